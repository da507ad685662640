"""The batched FP64 solution of the many small *local systems* of (Block-)ISAI and
FSAI, and the checked inverses of diagonal blocks (Block-Jacobi, the fallback rule).

Everything here works on a block (BSR) view of ``A`` with block size ``b``
(:mod:`._pattern`); the point methods are the case ``b = 1``, so point ISAI and
Block-ISAI share one code path.  The set-up runs in FP64, by the set-up kernels of the
host device (:func:`mpsolve.kernels.registry.lookup`): the batched local solves
``local_lu_solve`` / ``local_chol_solve`` / ``local_tri_solve`` gather, factor, solve,
check and store each row in one pass (compiled and parallel on the CPU, NumPy on the
stacks on the ``reference`` device, bit for bit the same).  A device without host arrays
that registers these ops itself runs them on its own arrays (the GPU: a gather kernel,
warp solves up to 32 unknowns, a blocked batched LU on cuBLAS above,
:mod:`mpsolve.kernels.cuda.isai_setup`) with the same rule; patterns, the excess and
the fallback rows stay on the host device (:func:`._util.setup_device`).

Local systems
-------------
Block row ``i`` of ``M`` has the block column set ``J_i`` (sorted, ``m = |J_i|``
blocks, ``s = m b`` scalar unknowns).  With ``A_J = A[J_i, J_i]`` (``s x s``)
and ``E_i`` the ``b`` columns of the identity at the position of block ``i`` in
``J_i``:

* ``general`` (also the triangular ``lower``/``upper`` cases):
  ``X A_J = E_i^T``, i.e. ``A_J^T X^T = E_i``; ``M[i, J_i] = X``
  (Anzt, Huckle, Braeckle, Dongarra 2018, eq. (3)).
* ``spd`` (block FSAI, Kolotilina & Yeremin 1993): ``J_i <= i`` ends with ``i``;
  ``A_J Z = E_last``; with ``Z_last = L L^T`` (Cholesky of the last ``b x b``
  block of ``Z``), ``G[i, J_i] = L^{-1} Z^T``, so that the diagonal block
  ``G_i A_J G_i^T = L^{-1} Z_last L^{-T} = I`` (for ``b = 1``:
  ``g = z / sqrt(z_last)``, ``diag(G A G^T) = 1``).

Rows are grouped by ``m`` and solved batched, by the factorisation their systems
need: ``general`` -- LU with partial pivoting of ``A_J^T``; ``spd`` -- Cholesky of
``A_J`` (``A_J`` is SPD for SPD ``A``; a system that is not symmetric to
``SYM_RTOL`` of the kernels, not numerically positive definite, or whose solution is
rejected, is left to LU, so LU decides exactly as without Cholesky), then the FSAI
finish above; ``lower`` / ``upper`` (``A`` triangular, ISAI of ILU's factors) -- plain
substitution, no factorisation.  Flops per system of ``s`` unknowns: LU
``2/3 s^3``, Cholesky ``1/3 s^3``, plus ``2 s^2 b`` for the solves and ``2 s^2 b``
for the check (``stats["solve_flops"]``: the dense count; the CPU kernels skip the
terms of entries zero in every system of a group, so they do less).  Rows with ``s > max_local`` take the
*excess* path: one dense LAPACK solve each (the ``gather_local`` kernel, then
``np.linalg.solve``), or a sparse LU when ``s`` exceeds :data:`DENSE_EXCESS_MAX`.

Fallback rule (singular or ill-conditioned local systems)
--------------------------------------------------------
A local solve is *rejected* when its result is not finite, its normwise
backward error ``||A_J^T X^T - E||_inf / (||A_J||_inf ||X||_inf + 1)`` exceeds
:data:`BWD_TOL`, or the lower bound ``||A_J||_inf ||X||_inf`` of the condition
number exceeds :data:`COND_LIMIT` (or, for ``spd``, ``Z_last`` is not positive
definite).  A rejected block row is recorded in ``fallback_rows`` and replaced:

1. ``general``: the least-squares solution over all the columns its rows touch
   (SPAI's rule), ``min ||X A[J_i, K_i] - E_i^T(K_i)||_F``, kept when finite and
   its relative residual is at most :data:`LS_ACCEPT`;
2. otherwise (and always for ``spd``): the block-diagonal rule -- the inverse of
   the diagonal block ``A_ii`` (``spd``: ``chol(A_ii)^{-1}``) when it is
   well-conditioned (SPD), else diagonal: ``1/a_jj`` (``spd``:
   ``1/sqrt(|a_jj|)``), or, where ``a_jj = 0``, ``1/max_k |a_jk|`` (``1`` for an
   empty row).

The result is always finite (asserted before it is stored).

Complex data: the same systems in complex128 (``A_J^T`` stays the plain transpose: ``M A
~ I``); ``spd`` means Hermitian positive definite: ``Z_last = L L^H``, ``G[i, J_i] =
L^{-1} Z^H``, so ``blockdiag(G A G^H) = I`` and ``M = G^H G``.
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from mpsolve.backend import HOST_DEVICE, array_module, device_of, to_device
from mpsolve.kernels import lookup, provides
from mpsolve.operator import transpose_stored  # noqa: F401  (the core's, re-exported)

from ._blas import blas_single_thread
from ._util import rows_text, setup_device, wide_dtype

__all__ = [
    "gather_local", "local_solve", "block_diag_fallback", "block_inverse_checked",
    "transpose_stored", "transpose_operator", "DEFAULT_MAX_LOCAL", "DENSE_EXCESS_MAX", "COND_LIMIT", "BWD_TOL", "LS_ACCEPT",
]

_EPS = np.finfo(np.float64).eps
#: Lower bound of cond(A_J) above which a local solve is rejected (~4.4e12).
COND_LIMIT = 1.0 / (1024 * _EPS)
#: Normwise backward error above which a local solve is rejected (~2.3e-10).
BWD_TOL = 2.0**20 * _EPS
#: Least-squares fallback rows are kept when ||residual||_F / ||E||_F <= LS_ACCEPT.
LS_ACCEPT = 0.9
#: Default largest local system (scalar unknowns) solved in the batched path.
DEFAULT_MAX_LOCAL = 256
#: Excess rows up to this size are solved densely, larger ones by sparse LU.
DENSE_EXCESS_MAX = 2048
#: ``spd``: rows whose local systems are first tried by Cholesky to choose it or LU.
_PROBE = 256


# ----------------------------------------------------------------- gather
def gather_local(rows, pptr, pind, aptr, aind, adata, m, device=HOST_DEVICE):
    """Stacked local matrices ``A[J_i, J_i]`` of ``rows`` (all with ``|J_i| = m``),
    ``(len(rows), m b, m b)`` FP64 (complex128), by the ``gather_local`` kernel of
    ``device`` (a host device)."""
    b = adata.shape[1]
    wide = wide_dtype(adata.dtype)
    out = np.zeros((rows.size, m * b, m * b), dtype=wide)
    kern = lookup(device, "gather_local", (wide,))
    kern(np.ascontiguousarray(rows, dtype=np.int64), pptr, pind, aptr, aind, adata, out)
    return out


# ----------------------------------------------------------------- batched solves
def _norm_inf(X):
    """Row-sum (infinity) norm of each matrix of a stack."""
    return np.abs(X).sum(axis=-1).max(axis=-1)


def _rhs(batch, m, b, pos):
    E = np.zeros((batch, m * b, b))
    u = np.arange(b)
    E[np.arange(batch)[:, None], pos[:, None] * b + u[None, :], u[None, :]] = 1.0
    return E


def _checked_solve(Mat, E):
    """Batched ``Mat X = E`` and a mask of rejected systems (see module docs)."""
    try:
        X = np.linalg.solve(Mat, E)
    except np.linalg.LinAlgError:  # an exactly singular one: solve them one by one
        X = np.empty_like(E)
        for t in range(Mat.shape[0]):
            try:
                X[t] = np.linalg.solve(Mat[t], E[t])
            except np.linalg.LinAlgError:
                X[t] = np.nan
    with np.errstate(all="ignore"):
        nA = _norm_inf(Mat)
        nX = _norm_inf(X)
        R = Mat @ X - E
        bwd = _norm_inf(R) / (nA * nX + 1.0)
        bad = ~np.isfinite(X).all(axis=(1, 2)) | ~(bwd <= BWD_TOL) | ~(nA * nX <= COND_LIMIT)
    return X, bad


def _spd_finish(Z, b):
    """FSAI rows from ``Z`` (``A_J Z = E_last``): ``G_i = L^{-1} Z^H``, ``Z_last = L L^H``.

    Returns ``(G (batch, b, s), bad)``.
    """
    Zl = Z[:, -b:, :]
    Zl = 0.5 * (Zl + np.swapaxes(Zl, 1, 2).conj())
    with np.errstate(all="ignore"):
        bad = ~np.isfinite(Z).all(axis=(1, 2))
        Zl = np.where(bad[:, None, None], np.eye(b), Zl)
        w = np.linalg.eigvalsh(Zl)
        bad |= ~(w[:, 0] > 0) | ~(w[:, 0] * COND_LIMIT >= w[:, -1])
    Zl = np.where(bad[:, None, None], np.eye(b), Zl)
    L = np.linalg.cholesky(Zl)
    G = np.linalg.solve(L, np.swapaxes(np.where(bad[:, None, None], 0.0, Z), 1, 2).conj())
    return G, bad


def _solve_stack(Aloc, pos, variant, b):
    """Block rows ``X`` (``(batch, b, s)``) of a stack of local systems, and rejections."""
    batch, s, _ = Aloc.shape
    if variant == "spd":
        Z, bad = _checked_solve(Aloc, _rhs(batch, s // b, b, pos))
        G, bad2 = _spd_finish(Z, b)
        return G, bad | bad2
    X, bad = _checked_solve(np.swapaxes(Aloc, 1, 2), _rhs(batch, s // b, b, pos))
    return np.swapaxes(X, 1, 2), bad


def _scatter(Xrows, rows, pptr, out):
    """``out[pptr[i] + p] = X[:, :, p b:(p+1) b]`` for each block row ``i`` in ``rows``
    (host ``X``; ``out`` on the host or on the device that solved the batched rows)."""
    batch, b, s = Xrows.shape
    m = s // b
    blocks = Xrows.reshape(batch, b, m, b).transpose(0, 2, 1, 3)  # (batch, m, b, b)
    idx = pptr[rows][:, None] + np.arange(m)[None, :]
    where = device_of(out)
    out[to_device(idx, where)] = to_device(np.ascontiguousarray(blocks), where)


def local_solve(aptr, aind, adata, pptr, pind, variant, max_local=None, scalar_csr=None,
                device=HOST_DEVICE):
    """Solve every local system of the pattern ``(pptr, pind)``.

    Parameters
    ----------
    aptr, aind, adata : BSR arrays of ``A`` (``adata`` of shape ``(nnzb, b, b)``, FP64)
    pptr, pind : block pattern of ``M`` (sorted; contains the diagonal; for
        ``"spd"`` lower triangular)
    variant : ``"general"``, ``"spd"``, or ``"lower"`` / ``"upper"`` (``A`` lower /
        upper triangular: ``general`` solved by substitution)
    max_local : largest local system (scalar unknowns) of the batched path
    scalar_csr : ``A`` as scalar CSR (for the excess and least-squares paths;
        built from the BSR arrays when omitted)
    device : the device the preconditioner is set up for.  The batched local solves run
        on it where it registers the op (``local_lu_solve`` / ``local_tri_solve``: the
        GPU's gather, warp and blocked batched LU kernels, :func:`._util.setup_device`),
        else on the host device; patterns, groups, the excess and the fallback rows
        always on the host device.  A device without ``local_chol_solve`` solves the
        ``spd`` systems by LU (the verdicts are LU's, as after a Cholesky rejection).

    Returns
    -------
    data : ``(nnz(pattern), b, b)`` FP64 blocks of ``M`` (or ``G``), all finite, in the
        array module of the device that solved the batched rows (on it: demoted there)
    fallback_rows : sorted int64 array of the block rows that took the fallback rule
    stats : dict (``groups``, ``batched_rows``, ``excess_rows``, ``solve_flops`` of the
        batched solves, ``solve_device`` (where they ran), ``stage_times``: seconds of the ``solve`` (gather, factorisation,
        check and store, fused in the kernels), ``excess`` and ``fallback`` stages)
    """
    if variant not in ("general", "spd", "lower", "upper"):
        raise ValueError(f"local_solve: unknown variant {variant!r}")
    with blas_single_thread():
        return _local_solve(aptr, aind, adata, pptr, pind, variant,
                            DEFAULT_MAX_LOCAL if max_local is None else max_local, scalar_csr,
                            device)


def _flops(variant, s, b):
    """Total flops of the batched local solves of the systems with ``s`` unknowns
    (factorisation, solves, check), counted per distinct size (``s`` has one entry a
    row: 216k on poisson3d:60, a few distinct values)."""
    sizes = np.bincount(np.asarray(s, dtype=np.int64))
    u = np.flatnonzero(sizes).astype(np.float64)
    fac = {"general": 2 / 3, "spd": 1 / 3}.get(variant, 0.0) * u**3
    subst = (2 if variant in ("general", "spd") else 1) * u * u * b
    return float(np.dot(sizes[sizes > 0], fac + subst + 2 * u * u * b))


def _local_solve(aptr, aind, adata, pptr, pind, variant, max_local, scalar_csr, device):
    t_start = time.perf_counter()
    nb = pptr.size - 1
    b = adata.shape[1]
    aptr_h, aind_h, adata_h = aptr, aind, adata
    sizes = np.diff(pptr)
    f64 = ("float64",)
    host = setup_device(device)                     # excess and fallback rows
    # position of block i inside J_i (one pass over the pattern, by the host's kernel)
    pos = lookup(host, "diag_positions", f64)(pptr, pind)
    if np.any(pos < 0):
        raise ValueError("local_solve: the pattern must contain every diagonal block")
    pos -= pptr[:-1]
    if variant == "spd" and np.any(pos != sizes - 1):
        raise ValueError("local_solve: an 'spd' pattern must be lower triangular")

    f64 = (wide_dtype(adata.dtype),)                # the set-up kernels' key: FP64 / complex128
    op = "local_lu_solve" if variant in ("spd", "general") else "local_tri_solve"
    sdev = setup_device(device, op)                 # the batched local solves
    if not provides(sdev, op, f64):                 # a device without them for this dtype
        sdev = host
    chol = None
    if variant == "spd" and provides(sdev, "local_chol_solve", f64):
        chol = lookup(sdev, "local_chol_solve", f64)
    if variant in ("spd", "general"):
        lu = lookup(sdev, "local_lu_solve", f64)
    else:
        tri = lookup(sdev, "local_tri_solve", f64)
    out = array_module(sdev).zeros((pind.size, b, b), dtype=f64[0])
    if sdev != host:                                # the device's arrays: A once, out there
        aptr, aind, adata = (to_device(a, sdev) for a in (aptr_h, aind_h, adata_h))
    bad_rows = []
    # local systems of at most max_local scalar unknowns go batched; a block wider than
    # max_local (block_size near n) sends every row to the excess path's LAPACK solve --
    # the batched kernels' unblocked loops took minutes on a few thousand unknowns
    mmax = int(max_local) // b
    # rows grouped by |J_i|, ascending (stable: the same order whatever the algorithm;
    # 16-bit keys take NumPy's radix sort, 3x faster than the merge sort of int64)
    key = sizes.astype(np.uint16) if sizes.size and sizes.max() < 2**16 else sizes
    order = np.argsort(key, kind="stable")
    rows = order[sizes[order] <= mmax].astype(np.int64)
    p = pos[rows]
    bad = np.zeros(rows.size, dtype=np.int8)
    s_rows = sizes[rows] * b
    if variant == "spd":
        # Cholesky unless a probe of the rows says A_J is mostly not SPD (a nonsymmetric
        # A): then LU at once, instead of Cholesky failing and LU again on every row
        use_chol = chol is not None
        probe = rows[::max(1, rows.size // _PROBE)]
        if use_chol:
            pbad = np.zeros(probe.size, dtype=np.int8)
            chol(probe, pos[probe], pptr, pind, aptr, aind, adata, BWD_TOL, COND_LIMIT, out,
                 pbad)
            use_chol = np.count_nonzero(pbad == 2) <= probe.size // 2
        if use_chol:
            if probe.size == rows.size:     # the probe was every row: its results stand
                bad[:] = pbad
            else:
                chol(rows, p, pptr, pind, aptr, aind, adata, BWD_TOL, COND_LIMIT, out, bad)
        else:
            bad[:] = 2
        retry = np.flatnonzero(bad == 2)                # not SPD, or rejected: LU decides
        if retry.size:
            bad2 = np.zeros(retry.size, dtype=np.int8)
            lu(rows[retry], p[retry], pptr, pind, aptr, aind, adata, True, BWD_TOL, COND_LIMIT,
               out, bad2)
            bad[retry] = bad2
        flops = (_flops("spd", s_rows, b) if use_chol else 0.0) \
            + _flops("general", s_rows[retry], b)
    elif variant == "general":
        lu(rows, p, pptr, pind, aptr, aind, adata, False, BWD_TOL, COND_LIMIT, out, bad)
        flops = _flops(variant, s_rows, b)
    else:
        tri(rows, p, pptr, pind, aptr, aind, adata, variant == "lower", BWD_TOL, COND_LIMIT,
            out, bad)
        flops = _flops(variant, s_rows, b)
    bad_rows.append(rows[bad != 0])
    groups = int(np.count_nonzero(np.diff(s_rows))) + int(s_rows.size > 0)   # sizes
    t_batched = time.perf_counter()

    aptr, aind, adata = aptr_h, aind_h, adata_h     # the host's arrays from here on
    dense_variant = "spd" if variant == "spd" else "general"
    excess = np.flatnonzero(sizes > mmax)
    if excess.size and scalar_csr is None:
        scalar_csr = _bsr_to_csr(aptr, aind, adata)
    for i in excess:
        X, bad = _excess_row(i, aptr, aind, adata, pptr, pind, pos[i], dense_variant,
                             scalar_csr, host)
        if bad:
            bad_rows.append(np.array([i]))
        else:
            _scatter(X[None], np.array([i]), pptr, out)
    t_excess = time.perf_counter()

    bad_rows = np.sort(np.concatenate(bad_rows)) if bad_rows else np.zeros(0, np.int64)
    if bad_rows.size:
        if scalar_csr is None:
            scalar_csr = _bsr_to_csr(aptr, aind, adata)
        for i in bad_rows:
            X = _fallback_row(i, aptr, aind, adata, pptr, pind, pos[i], dense_variant,
                              scalar_csr)
            _scatter(X[None], np.array([i]), pptr, out)
    if not bool(array_module(sdev).isfinite(out).all()):  # pragma: no cover - the rules
        raise FloatingPointError("local_solve produced a non-finite entry")
    t_end = time.perf_counter()
    stats = dict(groups=groups, batched_rows=int(nb - excess.size), excess_rows=int(excess.size),
                 solve_flops=float(flops), solve_device=sdev,
                 stage_times=dict(solve=t_batched - t_start, excess=t_excess - t_batched,
                                  fallback=t_end - t_excess))
    return out, bad_rows.astype(np.int64), stats


def transpose_operator(op, what, conj=False, negate=False):
    """The stored operator ``op`` transposed (conjugated with ``conj``, negated with
    ``negate``) and stored again on its device in its own precision: the stored values are
    moved, not rounded (exact; :meth:`mpsolve.operator.SparseOperator.transposed`), with
    no second demotion."""
    T = op.transposed(what)
    if conj and T.dtype.kind == "c":
        T.data = array_module(T.device).conj(T.data)     # (nothing bound yet)
    if negate:
        T.data = -T.data                                 # (exact)
    return T


def _bsr_to_csr(aptr, aind, adata):
    nb = aptr.size - 1
    b = adata.shape[1]
    return sp.bsr_matrix((adata, aind, aptr), shape=(nb * b, nb * b)).tocsr()


def _scalar_index(J, b):
    return (np.asarray(J)[:, None] * b + np.arange(b)[None, :]).ravel()


def _excess_row(i, aptr, aind, adata, pptr, pind, p, variant, C, device):
    """One long row: dense solve (``s <= DENSE_EXCESS_MAX``) or sparse LU."""
    b = adata.shape[1]
    m = int(pptr[i + 1] - pptr[i])
    s = m * b
    if s <= DENSE_EXCESS_MAX:
        Aloc = gather_local(np.array([i]), pptr, pind, aptr, aind, adata, m, device)
        X, bad = _solve_stack(Aloc, np.array([p]), variant, b)
        return X[0], bool(bad[0])
    import scipy.sparse.linalg as spla

    J = _scalar_index(pind[pptr[i]:pptr[i + 1]], b)
    AJ = C[J][:, J].tocsc()
    E = np.zeros((s, b))
    E[p * b + np.arange(b), np.arange(b)] = 1.0
    Mat = AJ if variant == "spd" else AJ.T.tocsc()
    try:
        with np.errstate(all="ignore"):
            X = spla.splu(Mat).solve(E)
    except RuntimeError:  # exactly singular
        return None, True
    with np.errstate(all="ignore"):
        nA = abs(Mat).sum(axis=1).max()
        nX = np.abs(X).sum(axis=1).max()
        bwd = np.abs(Mat @ X - E).sum(axis=1).max() / (nA * nX + 1.0)
        bad = not (np.isfinite(X).all() and bwd <= BWD_TOL and nA * nX <= COND_LIMIT)
    if bad:
        return None, True
    if variant == "spd":
        G, bad2 = _spd_finish(X[None], b)
        return G[0], bool(bad2[0])
    return X.T, False


def _fallback_row(i, aptr, aind, adata, pptr, pind, p, variant, C):
    """The documented fallback for block row ``i`` (see the module docstring)."""
    b = adata.shape[1]
    J = pind[pptr[i]:pptr[i + 1]]
    s = J.size * b
    X = np.zeros((b, s), dtype=wide_dtype(adata.dtype))
    if variant != "spd":
        # 1. least squares over all the columns the rows J touch (SPAI)
        Jsc = _scalar_index(J, b)
        AJ = C[Jsc]
        K = np.union1d(AJ.indices, i * b + np.arange(b))  # e_i's own columns always count
        if K.size * s <= 4 * 2**20:
            AJK = AJ[:, K].toarray()  # s x |K|
            E = np.zeros((K.size, b))
            E[np.searchsorted(K, i * b + np.arange(b)), np.arange(b)] = 1.0
            with np.errstate(all="ignore"):
                try:
                    Y = np.linalg.lstsq(AJK.T, E, rcond=None)[0]  # (s, b)
                    res = np.linalg.norm(AJK.T @ Y - E) / np.sqrt(b)
                    ok = np.isfinite(Y).all() and res <= LS_ACCEPT
                except np.linalg.LinAlgError:
                    ok = False
            if ok:
                return Y.T
    # 2. block-diagonal rule
    ka = aptr[i] + np.searchsorted(aind[aptr[i]:aptr[i + 1]], i)
    Aii = adata[ka] if (ka < aptr[i + 1] and aind[ka] == i) else np.zeros((b, b), adata.dtype)
    rowmax = np.asarray(abs(C[i * b:(i + 1) * b]).max(axis=1).todense()).ravel()
    X[:, p * b:(p + 1) * b] = block_diag_fallback(Aii[None], rowmax[None], spd=(variant == "spd"))[0]
    return X


def block_diag_fallback(D, rowmax, spd=False):
    """Inverse (``spd``: inverse Cholesky factor) of each diagonal block of a stack, by the rule.

    ``D``: ``(nblk, b, b)`` diagonal blocks; ``rowmax``: ``(nblk, b)`` the largest
    ``|a_jk|`` of each scalar row of ``A``.  A block that is well-conditioned
    (``spd``: SPD with ``lambda_max / lambda_min <= COND_LIMIT``) gets its inverse
    (``spd``: ``chol(D)^{-1}``, lower triangular, so ``G D G^T = I``); any other
    block gets the diagonal rule ``1/d_jj`` (``spd``: ``1/sqrt(|d_jj|)``), with
    ``1/rowmax_j`` where ``d_jj = 0`` and 1 for an empty row.

    Returns the ``(nblk, b, b)`` stack; :func:`block_inverse_checked` also
    returns which blocks took the diagonal rule.
    """
    return block_inverse_checked(D, rowmax, spd)[0]


def block_inverse_checked(D, rowmax, spd=False):
    """As :func:`block_diag_fallback`, also returning the mask of blocks that took the rule."""
    nblk, b, _ = D.shape
    with np.errstate(all="ignore"):
        if spd:
            Ds = 0.5 * (D + np.swapaxes(D, 1, 2).conj())     # Hermitian part
            w = np.linalg.eigvalsh(Ds)
            bad = ~(w[:, 0] > 0) | ~(w[:, 0] * COND_LIMIT >= w[:, -1])
            L = np.linalg.cholesky(np.where(bad[:, None, None], np.eye(b), Ds))
            inv = np.linalg.solve(L, np.broadcast_to(np.eye(b), L.shape))
        else:
            sv = np.linalg.svd(D, compute_uv=False)
            bad = ~(sv[:, -1] * COND_LIMIT >= sv[:, 0]) | ~(sv[:, -1] > 0)
            inv = np.linalg.inv(np.where(bad[:, None, None], np.eye(b), D))
    if bad.any():
        d = np.diagonal(D[bad], axis1=1, axis2=2)
        rm = rowmax[bad]
        base = np.where(d != 0, np.abs(d) if spd else d, np.where(rm > 0, rm, 1.0))
        diag = 1.0 / np.sqrt(base) if spd else 1.0 / base
        fb = np.zeros((int(bad.sum()), b, b), dtype=inv.dtype)
        fb[:, np.arange(b), np.arange(b)] = diag
        inv[bad] = fb
    over = np.flatnonzero(~np.isfinite(inv).reshape(nblk, -1).all(axis=1))
    if over.size:
        # (a diagonal rule's 1/d of a subnormal d, or an inverse too large for FP64:
        # ArithmeticError, as a zero pivot -- a solve's "auto" tries the next candidate)
        raise FloatingPointError(
            f"block inverse: {over.size} diagonal block(s) of A (block rows "
            f"{rows_text(over)}) so small that the inverse overflows FP64: scale the "
            "system's rows and columns (or divide A and b by a power of two), or use "
            "another preconditioner")
    return inv, bad
