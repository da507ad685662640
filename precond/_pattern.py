"""Block structure and sparsity patterns of the block preconditioners.

Everything works on a block (BSR) view of ``A`` with block size ``b``; the point
methods are the case ``b = 1``.

* :func:`detect_block_size` -- the node block size of ``A``;
* :func:`to_bsr` -- canonical BSR arrays of ``A`` with every diagonal block present;
* :func:`block_pattern` -- the block pattern of ``S^k`` (``S`` the block graph,
  diagonal included), whole, lower or upper triangular: the pattern of ``M`` (or
  ``G``) in (Block-)ISAI (Anzt, Huckle, Braeckle, Dongarra 2018);
* :func:`truncate_wide_rows` -- rows of ``S^k`` capped at their heaviest block columns
  in ``|A|^k``;
* :func:`strong_extension` -- the pattern of ``A`` widened along its strong couplings
  (a line-like anisotropy), the a-priori pattern of thresholded powers;
* :func:`transpose_blocks` -- the block transpose (``G^T`` of FSAI).

The work is done by host set-up kernels (``bsr_from_csr``, ``pattern_power``,
``strong_graph``, ``pattern_union_power``, ``pattern_truncate``, ``bsr_transpose``) looked
up for the host device the set-up runs on: compiled and parallel over rows on the CPU,
SciPy on the ``reference`` device.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from mpsolve.backend import HOST_DEVICE
from mpsolve.kernels import lookup
from mpsolve.operator import transpose_blocks  # noqa: F401  (the core's, re-exported)

from ._util import wide_dtype

__all__ = ["detect_block_size", "to_bsr", "block_pattern", "truncate_wide_rows",
           "strong_extension", "transpose_blocks"]

_F64 = ("float64",)


# ----------------------------------------------------------------- block structure
def block_of(request, A):
    """The block size for ``A``: the caller's ``request`` (or, None, the detected one),
    at most ``n`` -- a block wider than the matrix is the whole matrix as one block, the
    same ``M`` (padded to ``10**8`` it asked for petabytes)."""
    b = request or detect_block_size(A)
    return max(1, min(int(b), A.shape[0]))


def given_block_size(A):
    """The square block size ``A`` was handed over with -- a SciPy BSR matrix's
    ``blocksize`` ``(R, R)``, ``R > 1``, kept on its canonical CSR form as
    ``node_block_size`` (:func:`mpsolve._sparse.canonical_csr`) -- or None."""
    if sp.issparse(A) and A.format == "bsr":
        r, c = A.blocksize
        return int(r) if r == c and r > 1 else None
    return getattr(A, "node_block_size", None)


def detect_block_size(A, candidates=(6, 5, 4, 3, 2), min_fill=0.95, device=HOST_DEVICE):
    """The block size of ``A``'s node blocks: the ``blocksize`` of a BSR ``A`` with square
    blocks larger than 1 x 1 (as PETSc takes a BAIJ matrix's; :func:`given_block_size`),
    else detected as :func:`mpsolve.matrices.detect_block_size` does.

    The largest ``b`` whose ``b x b`` blocks tile the pattern (at least ``min_fill`` of
    the block-expanded pattern stored; a partial last block allowed), else 1.  The fill
    of each candidate is counted by the ``block_capacity`` kernel of the host device
    ``device`` (one pass over the pattern, no BSR conversion, stopped as soon as the
    fill is known to fall short).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(4, 4))
    >>> detect_block_size(sp.kron(T, np.ones((3, 3))).tocsr())
    3
    >>> detect_block_size(T.tocsr())
    1
    """
    if not 0 < min_fill <= 1:
        raise ValueError(f"argument min_fill must lie in (0, 1], got {min_fill}")
    given = given_block_size(A)
    if given is not None:
        return min(given, max(1, min(A.shape)))
    if not (type(A) is sp.csr_matrix and A.has_canonical_format) and \
            not (sp.issparse(A) and A.format == "csr" and A.has_canonical_format):
        A = sp.csr_matrix(A)                            # the canonical CSR matrix of auto's
        if not A.has_canonical_format:                  # analysis passes as it is
            A = A.copy()
            A.sum_duplicates()
    m, n = A.shape
    if A.nnz == 0:
        return 1
    kern = lookup(device, "block_capacity", _F64)
    indptr, indices = A.indptr, A.indices               # int32 or int64: the kernel takes both
    # fill >= min_fill  <=>  capacity - nnz <= nnz (1/min_fill - 1): the kernel stops
    # counting once that excess is passed
    slack = int(math.floor(A.nnz * (1.0 / min_fill - 1.0) * (1 + 1e-12)))
    # smallest first: where d divides b, every touched d x d block lies in a touched b x b
    # one, so capacity(d) <= capacity(b) and fill(b) <= fill(d) -- a b with a failed
    # divisor fails too and is not counted (a scalar matrix: 2, 3 and 5 counted, not 4, 6)
    failed, best = [], 1
    for b in sorted({int(c) for c in candidates}):
        if b < 2 or b > min(m, n) or ((m % b or n % b) and m != n):
            continue
        if any(b % d == 0 for d in failed):
            continue
        if A.nnz >= min_fill * kern(indptr, indices, n, b, slack):
            best = b
        else:
            failed.append(b)
    return best


def to_bsr(C, b, device=HOST_DEVICE, copy=True):
    """``(indptr, indices, data)`` of ``C`` as canonical BSR, data ``(nnzb, b, b)`` FP64
    (complex128 for complex ``C``).

    ``n`` must be a multiple of ``b``.  Every diagonal block is present (missing
    ones are added as explicit zero blocks, so the patterns below contain them) and
    every stored entry of ``C`` is kept (explicit zeros too).  Built by the
    ``bsr_from_csr`` kernel of the host device ``device``.  ``copy=False``: ``data`` may
    be a view of ``C``'s values (``b = 1``, every diagonal entry stored, FP64 values) --
    for callers that only read it (the ISAI set-up: 12 MB less to write, and to fault in,
    on a 1.5M-entry matrix).
    """
    n = C.shape[0]
    if n % b:
        raise ValueError(f"block size {b} does not divide n = {n}")
    C = sp.csr_matrix(C)
    if not C.has_canonical_format:
        C = C.copy()
        C.sum_duplicates()   # sorted, no duplicates (explicit zeros stay)
    ptr, ind, data = lookup(device, "bsr_from_csr", (wide_dtype(C.dtype),))(
        C.indptr, C.indices, C.data, b)
    if copy and np.may_share_memory(data, C.data):
        data = data.copy()
    return ptr, ind, data


_PARTS = {"all": 0, "lower": 1, "upper": 2}


def block_pattern(indptr, indices, nb, power=1, part="all", device=HOST_DEVICE):
    """Block pattern of ``S^power`` (``S`` the block graph, diagonal included).

    ``part``: ``"all"``, ``"lower"`` (``tril``) or ``"upper"`` (``triu``).
    Returns canonical ``(indptr, indices)`` (int64, sorted); by the ``pattern_power``
    kernel of the host device ``device`` (symbolic products row by row).
    """
    indptr = np.asarray(indptr, dtype=np.int64)
    if indptr.size != nb + 1:
        raise ValueError(f"block_pattern: indptr has {indptr.size} entries, expected {nb + 1}")
    return lookup(device, "pattern_power", _F64)(indptr, np.asarray(indices, dtype=np.int64),
                                                  int(power), _PARTS[part])


def truncate_wide_rows(pptr, pind, aptr, aind, adata, power, keep, device=HOST_DEVICE):
    """Cap every row of the pattern of ``A^power`` at ``keep`` block columns.

    A row that is wider keeps its diagonal and the ``keep - 1`` block columns of
    largest weight in ``|A|^power`` (``|A|`` the matrix of block Frobenius norms, its
    diagonal raised by the largest norm) -- the entries of ``A^power`` that can be
    large, as threshold-based sparse approximate inverses choose them; ties keep the
    lower column.  ``A`` (BSR) must store every diagonal block (:func:`to_bsr`).
    Returns ``(pptr, pind, n_truncated)``; by the ``pattern_truncate`` kernel of the
    host device ``device`` (only the wide rows of ``|A|^power`` are formed).
    """
    if not np.any(np.diff(pptr) > keep):
        return pptr, pind, 0
    nb = aptr.size - 1
    norms = np.sqrt((np.abs(adata) ** 2).sum(axis=(1, 2)))
    top = norms.max() if norms.size and norms.max() > 0 else 1.0
    w = norms + 1e-30 * top        # stored zeros keep a (tiny) weight: no entry vanishes
    rows = np.repeat(np.arange(nb), np.diff(aptr))
    diag = np.flatnonzero(aind == rows)
    if diag.size != nb:
        raise ValueError("truncate_wide_rows: A must store every diagonal block (to_bsr)")
    w[diag] = w[diag] + top
    return lookup(device, "pattern_truncate", _F64)(pptr, pind, aptr, aind, w, int(power),
                                                     int(keep))


#: :func:`strong_extension`: a coupling is strong where its block norm is at least this
#: fraction of the largest off-diagonal one of its row (classical AMG's threshold).
STRONG_THETA = 0.25
#: ... the pattern is widened only where a (block) row has at most this many strong
#: neighbours (median over the rows): couplings along lines, where the inverse decays
#: slowly along the line and fast across it.
STRONG_DEGREE = 2
#: ... by powers 2, 4, ... of the strong graph up to this one,
STRONG_POWER_MAX = 8
#: ... while the widened pattern has at most this many times the entries of A's own.
STRONG_GROWTH = 2.5


def strong_extension(aptr, aind, adata, part="all", device=HOST_DEVICE):
    """The block pattern of ``A`` (its ``part``: ``"all"``, ``"lower"``, ``"upper"``)
    joined with the pattern of ``(S + I)^k``, ``S`` the graph of ``A``'s strong couplings;
    ``(pptr, pind, k)`` (int64, sorted), or ``None`` where that does not apply.

    The inverse of a matrix whose couplings are strong along lines (an anisotropic
    diffusion, ``-(u_xx + 1e-2 u_yy + 1e-4 u_zz)``) decays slowly along the line and fast
    across it: the pattern of ``A`` (FSAI, ISAI) holds one neighbour each way of the
    slow direction and leaves most of the inverse out (CG + FSAI 129 iterations on a
    48^3 grid, IC(0), exact along the lines, 22), while ``A^k`` adds the weak directions
    as much and soon costs more than it saves.  The powers of the strong graph alone --
    Chow's a-priori patterns of thresholded ``A^k`` (SIAM J. Sci. Comput. 21, 2000) --
    add the slow direction only.  ``S``: ``0 < |a_IJ| >= STRONG_THETA max_K |a_IK|``
    (off-diagonal block norms, row by row: a symmetric ``A``'s strong couplings along
    its lines are mutual); applied where the median row has at most
    :data:`STRONG_DEGREE` strong neighbours (tested on a sample of rows first), ``k`` a
    power of two up to :data:`STRONG_POWER_MAX` whose pattern stays within
    :data:`STRONG_GROWTH` times ``A``'s (an isotropic problem, every neighbour strong, is
    left as it is).  Host arrays; the ``strong_graph`` and ``pattern_union_power``
    kernels of the host device ``device``.
    """
    aptr = np.asarray(aptr, dtype=np.int64)
    aind = np.asarray(aind, dtype=np.int64)
    nb = aptr.size - 1
    if nb < 3 or aind.size == 0:
        return None
    # a sample of rows first (the same 256 on every run): most matrices have more strong
    # neighbours, and pay no more than this for the test
    sample = np.random.default_rng(0).choice(nb, size=min(nb, 256), replace=False)
    lo, hi = aptr[sample], aptr[sample + 1]
    idx = np.repeat(lo - np.cumsum(np.r_[0, (hi - lo)[:-1]]), hi - lo) + np.arange(
        int((hi - lo).sum()))
    ptr = np.r_[0, np.cumsum(hi - lo)]
    w = np.where(aind[idx] != np.repeat(sample, hi - lo), _block_norms(adata[idx]), 0.0)
    top = np.maximum.reduceat(w, ptr[:-1])     # (each row stores its diagonal block)
    strong = (w > 0) & (w >= STRONG_THETA * np.repeat(top, hi - lo))
    if np.median(np.add.reduceat(strong, ptr[:-1])) > STRONG_DEGREE:
        return None
    sptr, sind = lookup(device, "strong_graph", _F64)(aptr, aind, _block_norms(adata),
                                                      STRONG_THETA)
    degree = float(np.median(np.diff(sptr)))
    if not sind.size or degree > STRONG_DEGREE:
        return None
    if part == "all":
        base = aind.size
    else:
        rows = np.repeat(np.arange(nb), np.diff(aptr))
        base = int(np.count_nonzero(aind <= rows if part == "lower" else aind >= rows))
    limit = STRONG_GROWTH * base
    # the power whose pattern fits, as a walk along lines adds it: `degree` a level (half
    # of them in a triangle) beyond the neighbours A has already; checked, halved if not
    per_level = degree if part == "all" else degree / 2
    k = STRONG_POWER_MAX
    while k > 1 and base + nb * per_level * (k - 1) > limit:
        k //= 2
    union = lookup(device, "pattern_union_power", _F64)
    while k > 1:
        pptr, pind = union(aptr, aind, sptr, sind, k, _PARTS[part])
        if pind.size <= limit:
            return pptr, pind, k
        k //= 2
    return None


def _block_norms(data):
    """The Frobenius norm of each block of ``data`` (``(nnzb, b, b)``)."""
    if data.ndim == 3 and data.shape[1] == 1:
        return np.abs(data.reshape(-1))
    return np.sqrt((np.abs(data) ** 2).reshape(data.shape[0], -1).sum(axis=1))
