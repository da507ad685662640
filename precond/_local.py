"""Shared machinery of the block preconditioners: block-size detection, sparsity
patterns, and the batched FP64 solution of the many small *local systems* of
(Block-)ISAI and FSAI.

Everything here works on a block (BSR) view of ``A`` with block size ``b``;
the point methods are the case ``b = 1``, so point ISAI and Block-ISAI share one
code path.

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

Rows are grouped by ``m``; a group's local matrices are gathered into one
stacked ``(batch, s, s)`` FP64 array by a Numba kernel and solved with one
batched ``np.linalg.solve`` (LAPACK ``getrf/getrs`` per matrix).  Rows with
``s > max_local`` take the *excess* path: one dense solve each (or a sparse LU
when ``s`` exceeds :data:`DENSE_EXCESS_MAX`).

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
"""
from __future__ import annotations

import contextlib

import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from mpsolve.kernels.cpu._config import JIT

__all__ = [
    "detect_block_size", "to_bsr", "block_pattern", "local_solve",
    "block_diag_fallback", "DEFAULT_MAX_LOCAL", "COND_LIMIT", "BWD_TOL", "LS_ACCEPT",
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
#: FP64 values per stacked chunk of local matrices (bounds setup memory, 64 MiB).
_CHUNK_VALUES = 8 * 2**20


# ----------------------------------------------------------------- BLAS threads
_BLAS_CTL = []


def _openblas_controls():
    """``(set_num_threads, get_num_threads)`` of the OpenBLAS NumPy is linked to, or Nones."""
    if not _BLAS_CTL:
        found = (None, None)
        try:
            import ctypes
            import re

            import numpy.linalg  # noqa: F401  (loads the BLAS)

            with open("/proc/self/maps") as f:
                libs = sorted(set(re.findall(r"(/\S*openblas\S*\.so\S*)", f.read())))
            for path in libs:
                lib = ctypes.CDLL(path)
                for pre in ("scipy_openblas", "openblas"):
                    for suf in ("64_", ""):
                        st = getattr(lib, f"{pre}_set_num_threads{suf}", None)
                        gt = getattr(lib, f"{pre}_get_num_threads{suf}", None)
                        if st is not None and gt is not None:
                            st.argtypes, gt.restype = [ctypes.c_int], ctypes.c_int
                            found = (st, gt)
                            break
                    if found[0] is not None:
                        break
                if found[0] is not None:
                    break
        except Exception:  # noqa: BLE001 - not Linux, not OpenBLAS: leave BLAS alone
            found = (None, None)
        _BLAS_CTL.append(found)
    return _BLAS_CTL[0]


@contextlib.contextmanager
def blas_single_thread():
    """Run the block with a single-threaded BLAS/LAPACK.

    The local systems are small and many: a multithreaded LAPACK call on a
    200 x 200 system costs more in thread wake-ups than it computes (measured
    here: 100 batched 225 x 225 solves took 6.3 s with OpenBLAS threads on a busy
    2-core machine, 0.06 s with one).  Uses ``threadpoolctl`` when installed,
    else OpenBLAS's own ``*_set_num_threads`` through ctypes; does nothing where
    neither is available.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    if threadpool_limits is not None:
        with threadpool_limits(limits=1, user_api="blas"):
            yield
        return
    st, gt = _openblas_controls()
    old = gt() if gt is not None else None
    if st is not None:
        st(1)
    try:
        yield
    finally:
        if st is not None:
            st(old)


# ----------------------------------------------------------------- block structure
def detect_block_size(A, candidates=(6, 5, 4, 3, 2), min_fill=0.95) -> int:
    """The block size of ``A``'s node blocks: :func:`mpsolve.matrices.detect_block_size`.

    The largest ``b`` whose ``b x b`` blocks tile the pattern (at least ``min_fill`` of
    the block-expanded pattern stored; a partial last block allowed), else 1.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(4, 4))
    >>> detect_block_size(sp.kron(T, np.ones((3, 3))).tocsr())
    3
    >>> detect_block_size(T.tocsr())
    1
    """
    from mpsolve.matrices.analysis import detect_block_size as detect

    return detect(sp.csr_matrix(A), candidates=candidates, min_fill=min_fill)


def to_bsr(C, b):
    """``(indptr, indices, data)`` of ``C`` as canonical BSR, data ``(nnzb, b, b)`` FP64.

    ``n`` must be a multiple of ``b``.  Every diagonal block is present (missing
    ones are added as explicit zero blocks, so the patterns below contain them).
    """
    n = C.shape[0]
    if n % b:
        raise ValueError(f"block size {b} does not divide n = {n}")
    nb = n // b
    # explicit zero diagonal blocks, united with C keeping every structural zero
    r = np.repeat(np.arange(n), b)
    c = np.repeat(np.arange(nb) * b, b * b) + np.tile(np.arange(b), n)
    S = _union_keep_zeros(C, sp.coo_matrix((np.zeros(n * b), (r, c)), shape=C.shape))
    B = sp.bsr_matrix(S, blocksize=(b, b))
    B.sort_indices()
    return (B.indptr.astype(np.int64), B.indices.astype(np.int64),
            np.ascontiguousarray(B.data, dtype=np.float64))


def _union_keep_zeros(C, Z):
    """``C + Z`` keeping the structural zeros of both (CSR, FP64)."""
    C = sp.coo_matrix(C)
    Z = sp.coo_matrix(Z)
    r = np.concatenate([C.row, Z.row])
    c = np.concatenate([C.col, Z.col])
    v = np.concatenate([C.data.astype(np.float64), Z.data])
    S = sp.csr_matrix((v, (r, c)), shape=C.shape)  # duplicates summed, zeros kept
    S.sort_indices()
    return S


def block_pattern(indptr, indices, nb, power=1, part="all"):
    """Block pattern of ``S^power`` (``S`` the block graph, diagonal included).

    ``part``: ``"all"``, ``"lower"`` (``tril``) or ``"upper"`` (``triu``).
    Returns canonical ``(indptr, indices)`` (int64, sorted).
    """
    S = sp.csr_matrix((np.ones(indices.size), indices, indptr), shape=(nb, nb))
    S = (S + sp.identity(nb, format="csr")).tocsr()
    S.data[:] = 1.0
    P = S
    for _ in range(int(power) - 1):
        P = P @ S
        P.data[:] = 1.0  # pattern only: no cancellation, no overflow
    if part == "lower":
        P = sp.tril(P, format="csr")
    elif part == "upper":
        P = sp.triu(P, format="csr")
    P = sp.csr_matrix(P)
    P.sort_indices()
    return P.indptr.astype(np.int64), P.indices.astype(np.int64)


def truncate_wide_rows(pptr, pind, aptr, aind, adata, power, keep):
    """Cap every row of the pattern of ``A^power`` at ``keep`` block columns.

    A row that is wider keeps its diagonal and the ``keep - 1`` block columns of
    largest weight in ``|A|^power`` (``|A|`` the matrix of block Frobenius norms) --
    the entries of ``A^power`` that can be large, as threshold-based sparse
    approximate inverses choose them.  Returns ``(pptr, pind, n_truncated)``.
    """
    nb = pptr.size - 1
    sizes = np.diff(pptr)
    wide = np.flatnonzero(sizes > keep)
    if wide.size == 0:
        return pptr, pind, 0
    norms = np.sqrt((adata ** 2).sum(axis=(1, 2)))
    top = norms.max() if norms.size and norms.max() > 0 else 1.0
    norms = norms + 1e-30 * top        # stored zeros keep a (tiny) weight: no entry vanishes
    W = sp.csr_matrix((norms, aind, aptr), shape=(nb, nb))
    W = (W + sp.identity(nb, format="csr") * top).tocsr()
    P = W
    for _ in range(int(power) - 1):
        P = P @ W
    P = sp.csr_matrix(P)
    P.sort_indices()
    new_sizes = sizes.copy()
    new_sizes[wide] = keep
    out_ptr = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(new_sizes, out=out_ptr[1:])
    out_ind = np.empty(out_ptr[-1], dtype=np.int64)
    is_wide = np.zeros(nb, dtype=bool)
    is_wide[wide] = True
    for i in range(nb):
        J = pind[pptr[i]:pptr[i + 1]]
        if is_wide[i]:
            cols = P.indices[P.indptr[i]:P.indptr[i + 1]]
            vals = P.data[P.indptr[i]:P.indptr[i + 1]]
            w = vals[np.searchsorted(cols, J)]
            w[J == i] = np.inf                      # the diagonal always stays
            J = np.sort(J[np.argsort(-w, kind="stable")[:keep]])
        out_ind[out_ptr[i]:out_ptr[i + 1]] = J
    return out_ptr, out_ind, int(wide.size)


# ----------------------------------------------------------------- gather kernel
@njit(parallel=True, **JIT)
def _gather(rows, pptr, pind, aptr, aind, adata, out):
    # out[t] = A[J, J] for J = pind[pptr[rows[t]] : ...] (block entries, b x b each);
    # merge of two sorted lists: row J[p] of A against J.  out is zeroed by the caller.
    b = adata.shape[1]
    for t in prange(rows.size):
        i = rows[t]
        j0 = pptr[i]
        m = pptr[i + 1] - j0
        for p in range(m):
            r = pind[j0 + p]
            q = 0
            for k in range(aptr[r], aptr[r + 1]):
                c = aind[k]
                while q < m and pind[j0 + q] < c:
                    q += 1
                if q == m:
                    break
                if pind[j0 + q] == c:
                    for u in range(b):
                        for v in range(b):
                            out[t, p * b + u, q * b + v] = adata[k, u, v]


def gather_local(rows, pptr, pind, aptr, aind, adata, m):
    """Stacked local matrices ``A[J_i, J_i]`` of ``rows`` (all with ``|J_i| = m``)."""
    b = adata.shape[1]
    out = np.zeros((rows.size, m * b, m * b))
    _gather(np.ascontiguousarray(rows, dtype=np.int64), pptr, pind, aptr, aind, adata, out)
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
    """FSAI rows from ``Z`` (``A_J Z = E_last``): ``G_i = L^{-1} Z^T``, ``Z_last = L L^T``.

    Returns ``(G (batch, b, s), bad)``.
    """
    Zl = Z[:, -b:, :]
    Zl = 0.5 * (Zl + np.swapaxes(Zl, 1, 2))
    with np.errstate(all="ignore"):
        bad = ~np.isfinite(Z).all(axis=(1, 2))
        Zl = np.where(bad[:, None, None], np.eye(b), Zl)
        w = np.linalg.eigvalsh(Zl)
        bad |= ~(w[:, 0] > 0) | ~(w[:, 0] * COND_LIMIT >= w[:, -1])
    Zl = np.where(bad[:, None, None], np.eye(b), Zl)
    L = np.linalg.cholesky(Zl)
    G = np.linalg.solve(L, np.swapaxes(np.where(bad[:, None, None], 0.0, Z), 1, 2))
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
    """``out[pptr[i] + p] = X[:, :, p b:(p+1) b]`` for each block row ``i`` in ``rows``."""
    batch, b, s = Xrows.shape
    m = s // b
    blocks = Xrows.reshape(batch, b, m, b).transpose(0, 2, 1, 3)  # (batch, m, b, b)
    idx = pptr[rows][:, None] + np.arange(m)[None, :]
    out[idx] = blocks


def local_solve(aptr, aind, adata, pptr, pind, variant, max_local=None, scalar_csr=None):
    """Solve every local system of the pattern ``(pptr, pind)``.

    Parameters
    ----------
    aptr, aind, adata : BSR arrays of ``A`` (``adata`` of shape ``(nnzb, b, b)``, FP64)
    pptr, pind : block pattern of ``M`` (sorted; contains the diagonal; for
        ``"spd"`` lower triangular)
    variant : ``"general"`` (also for triangular ``A``) or ``"spd"``
    max_local : largest local system (scalar unknowns) of the batched path
    scalar_csr : ``A`` as scalar CSR (for the excess and least-squares paths;
        built from the BSR arrays when omitted)

    Returns
    -------
    data : ``(nnz(pattern), b, b)`` FP64 blocks of ``M`` (or ``G``), all finite
    fallback_rows : sorted int64 array of the block rows that took the fallback rule
    stats : dict (``groups``, ``batched_rows``, ``excess_rows``)
    """
    with blas_single_thread():
        return _local_solve(aptr, aind, adata, pptr, pind, variant,
                            DEFAULT_MAX_LOCAL if max_local is None else max_local, scalar_csr)


def _local_solve(aptr, aind, adata, pptr, pind, variant, max_local, scalar_csr):
    nb = pptr.size - 1
    b = adata.shape[1]
    out = np.zeros((pind.size, b, b))
    sizes = np.diff(pptr)
    # position of block i inside J_i
    rows_all = np.repeat(np.arange(nb), sizes)
    diag_k = np.flatnonzero(pind == rows_all)
    pos_all = diag_k - pptr[rows_all[diag_k]]
    if diag_k.size != nb:
        raise ValueError("local_solve: the pattern must contain every diagonal block")
    pos = np.empty(nb, dtype=np.int64)
    pos[rows_all[diag_k]] = pos_all
    if variant == "spd" and np.any(pos != sizes - 1):
        raise ValueError("local_solve: an 'spd' pattern must be lower triangular")

    bad_rows = []
    mmax = max(1, int(max_local) // b)
    groups = 0
    for m in np.unique(sizes):
        rows = np.flatnonzero(sizes == m)
        if m > mmax:
            continue
        s = m * b
        chunk = max(1, _CHUNK_VALUES // (s * s))
        for c0 in range(0, rows.size, chunk):
            rr = rows[c0:c0 + chunk]
            Aloc = gather_local(rr, pptr, pind, aptr, aind, adata, m)
            X, bad = _solve_stack(Aloc, pos[rr], variant, b)
            _scatter(X[~bad], rr[~bad], pptr, out)
            bad_rows.append(rr[bad])
            groups += 1

    excess = np.flatnonzero(sizes > mmax)
    if excess.size and scalar_csr is None:
        scalar_csr = _bsr_to_csr(aptr, aind, adata)
    for i in excess:
        X, bad = _excess_row(i, aptr, aind, adata, pptr, pind, pos[i], variant, scalar_csr)
        if bad:
            bad_rows.append(np.array([i]))
        else:
            _scatter(X[None], np.array([i]), pptr, out)

    bad_rows = np.sort(np.concatenate(bad_rows)) if bad_rows else np.zeros(0, np.int64)
    if bad_rows.size:
        if scalar_csr is None:
            scalar_csr = _bsr_to_csr(aptr, aind, adata)
        for i in bad_rows:
            X = _fallback_row(i, aptr, aind, adata, pptr, pind, pos[i], variant, scalar_csr)
            _scatter(X[None], np.array([i]), pptr, out)
    if not np.isfinite(out).all():  # pragma: no cover - guarded by the rules above
        raise FloatingPointError("local_solve produced a non-finite entry")
    stats = dict(groups=groups, batched_rows=int(nb - excess.size), excess_rows=int(excess.size))
    return out, bad_rows.astype(np.int64), stats


def _bsr_to_csr(aptr, aind, adata):
    nb = aptr.size - 1
    b = adata.shape[1]
    return sp.bsr_matrix((adata, aind, aptr), shape=(nb * b, nb * b)).tocsr()


def _scalar_index(J, b):
    return (np.asarray(J)[:, None] * b + np.arange(b)[None, :]).ravel()


def _excess_row(i, aptr, aind, adata, pptr, pind, p, variant, C):
    """One long row: dense solve (``s <= DENSE_EXCESS_MAX``) or sparse LU."""
    b = adata.shape[1]
    m = int(pptr[i + 1] - pptr[i])
    s = m * b
    if s <= DENSE_EXCESS_MAX:
        Aloc = gather_local(np.array([i]), pptr, pind, aptr, aind, adata, m)
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
    X = np.zeros((b, s))
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
    Aii = adata[ka] if (ka < aptr[i + 1] and aind[ka] == i) else np.zeros((b, b))
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
            Ds = 0.5 * (D + np.swapaxes(D, 1, 2))
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
        fb = np.zeros((int(bad.sum()), b, b))
        fb[:, np.arange(b), np.arange(b)] = diag
        inv[bad] = fb
    if not np.isfinite(inv).all():  # pragma: no cover
        raise FloatingPointError("block inverse produced a non-finite entry")
    return inv, bad


# ----------------------------------------------------------------- storage / apply
class PreconditionerWarning(RuntimeWarning):
    """A preconditioner set-up replaced some rows by its documented fallback rule."""


def rows_text(rows, limit=10):
    """``"3, 17, 42, ..."`` -- the first ``limit`` row numbers, for messages."""
    rows = [int(i) for i in np.asarray(rows)[:limit]]
    return ", ".join(map(str, rows)) + (", ..." if len(rows) == limit else "")


class StoredBSR:
    """A BSR matrix stored in ``dtype`` and multiplied by the ``bsrmv`` kernel.

    ``data`` of shape ``(nnzb, b, b)`` (FP64, range-checked by :func:`demote`),
    ``indptr``/``indices`` over blocks; ``n`` scalar rows (a trailing partial
    block is allowed).  ``bind(x_dtype, y_dtype) -> f(x, y)`` computes ``y <- A x``.
    """

    def __init__(self, indptr, indices, data, n, dtype, accumulate="float32", what="M"):
        from mpsolve._demote import demote
        from mpsolve.kernels.cpu.spmv import partition_rows

        self.indptr = np.ascontiguousarray(indptr, dtype=np.int32)
        self.indices = np.ascontiguousarray(indices, dtype=np.int32)
        self.data = np.ascontiguousarray(demote(np.ascontiguousarray(data, dtype=np.float64), dtype, what))
        self.n = int(n)
        self.b = int(data.shape[1])
        self.shape = (self.n, self.n)
        self.accumulate = np.dtype(accumulate).name
        self._mode = "acc64" if self.accumulate == "float64" else "acc32"
        self.parts = partition_rows(self.indptr)
        self._bound = {}

    @property
    def nbytes(self):
        return int(self.data.nbytes + self.indices.nbytes + self.indptr.nbytes)

    def bind(self, x_dtype, y_dtype):
        from mpsolve.kernels import lookup

        key = (np.dtype(x_dtype).name, np.dtype(y_dtype).name)
        f = self._bound.get(key)
        if f is None:
            kern = lookup("cpu", "bsrmv", (self.data.dtype, key[0], key[1]), self._mode)
            parts, ip, ix, d = self.parts, self.indptr, self.indices, self.data

            def f(x, y):
                kern(parts, ip, ix, d, x, y)  # y = M x

            self._bound[key] = f
        return f

    def to_scipy(self):
        """The stored matrix as a SciPy BSR matrix with FP64 values."""
        nbr = self.indptr.size - 1
        B = sp.bsr_matrix((self.data.astype(np.float64), self.indices, self.indptr),
                          shape=(nbr * self.b, nbr * self.b))
        return B.tocsr()[: self.n, : self.n]


class OperatorChain:
    """``out <- F_k ... F_2 F_1 r`` for stored operators ``F_j`` (each with ``bind``).

    One scratch vector per intermediate, allocated on the first call for a
    given vector dtype and reused afterwards (``apply`` allocates nothing then).
    Intermediates are kept in the dtype of ``out`` (the working precision).
    """

    def __init__(self, ops):
        self.ops = list(ops)
        self._scratch = {}

    def __call__(self, r, out):
        ops = self.ops
        if len(ops) == 1:
            ops[0].bind(r.dtype, out.dtype)(r, out)  # out = F r
            return
        key = (r.dtype.name, out.dtype.name)
        sc = self._scratch.get(key)
        if sc is None:
            sc = self._scratch[key] = (
                [op.bind(r.dtype if j == 0 else out.dtype, out.dtype) for j, op in enumerate(ops)],
                [np.empty(out.shape[0], dtype=out.dtype) for _ in range(min(2, len(ops) - 1))],
            )
        fs, bufs = sc
        src = r
        for j, f in enumerate(fs):
            dst = out if j == len(fs) - 1 else bufs[j % len(bufs)]
            f(src, dst)  # dst = F_j src
            src = dst

    @property
    def nbytes(self):
        ob = sum(int(op.nbytes) for op in self.ops)
        return ob + sum(int(b.nbytes) for _, bufs in self._scratch.values() for b in bufs)
