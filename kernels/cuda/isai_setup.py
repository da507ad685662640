"""The (Block-)ISAI set-up on the GPU: gather, batched local solves, check, block substitution.

These are the ``"gpu"`` kernels of the host set-up ops ``gather_local``, ``local_lu_solve``,
``local_tri_solve`` and ``block_tri_isai`` of :data:`mpsolve.kernels.primitives.CONTRACT`:
same names, same arguments, same math and the same acceptance rule as the host devices'
(``kernels/cpu``, ``kernels/reference.py``), on the device's arrays.  A preconditioner set
up for ``"gpu"`` finds them in the registry (:func:`mpsolve.precond._util.setup_device`)
and runs its local solves here; only patterns and size groups are computed on the host.

Arguments (the device form of the contract)
-------------------------------------------
* ``rows``, ``pos``, ``pptr``, ``pind`` -- the block pattern and the rows to solve: host
  (NumPy) arrays, as the host computed them (sizes and groups are read on the host); they
  are uploaded once per call.
* ``aptr``, ``aind``, ``adata`` (``tptr``, ...) -- ``A``'s BSR arrays: device arrays
  (uploaded here when given on the host).
* ``out`` -- ``(nnz(pattern), b, b)`` FP64 in the device's array module: accepted rows are
  written there, on the device (the stored operator is demoted to FP32 from it, on the
  device).
* ``bad`` -- a host array (one byte per row): ``1`` where a row was rejected by the CPU's
  rule (:mod:`mpsolve.precond._localsolve`: not finite, backward error above
  ``bwd_tol``, ``||Mat||_inf ||X||_inf`` above ``cond_limit``; ``spd``: ``Z_last`` not
  SPD or too ill-conditioned).  Rejected rows are not written; the caller's CPU fallback
  replaces them, exactly as on the host devices.

How (one size group ``s = m b`` at a time, in batches of :data:`BATCH_BYTES`; ``xp`` the
arrays' module: CuPy on a GPU, NumPy under numba's simulator, where CuPy cannot allocate --
the same code runs on both)
----------------------------------------------------------------------------------------
1. **Gather** (:func:`gather_local`): one warp per block row ``i``; for each block row
   ``J_p`` of ``J_i`` the lanes stride over the stored blocks of ``A``'s row ``J_p``,
   binary-search each block column in ``J_i`` and copy hits to ``out[t, p b:, q b:]``
   (the host op's semantics; ``out`` zeroed by the caller); a row over ``LONG_ROW``
   times longer than ``J_i`` (a dense row) is read the other way round, the lanes over
   ``J_i`` searching the row, as the CPU's gather does.
2. **Solve**, ``Mat X = E_pos`` (``Mat = A_J^T``; ``spd``: ``A_J``), ``b`` right-hand
   sides:

   * ``s <= 32``: the warp kernels of :mod:`.localsolve` (Gauss-Jordan with partial
     pivoting; substitution for ``local_tri_solve``); ``b > 1``: their block-row form
     (``nrhs = b`` columns ``e_{pos b + u}``, one factorisation, the right-hand sides in
     global memory).  Their acceptance quantities ``Q = (bwd, cond)`` (block norms over
     the ``b`` columns) feed the CPU's rule directly.
   * ``32 < s``: :func:`batched_lu`, a blocked right-looking LU with partial pivoting,
     panels of :data:`PANEL` columns factored column by column (vectorised over the
     stack), ``U12 = L11^{-1} A12``, and the trailing update ``A22 -= L21 U12`` as
     ``xp.matmul`` on the stack: cuBLAS strided-batched DGEMM on a GPU (FP64 Tensor
     Cores on compute capability >= 8.0).  Then :func:`lu_solve` (``b`` columns).
     Triangular systems: substitution on the stack, no factorisation.
3. **Check** (:func:`check`, the stacks of 2.'s second case): ``R = Mat X - E`` as
   ``xp.matmul`` (batched DGEMM), the CPU's ``bwd`` and ``cond`` bound, the CPU's
   thresholds.
4. ``spd`` (FSAI finish, :func:`fsai_finish`): ``Z_last`` symmetrised, its eigenvalue
   bounds checked (``b = 1``: ``z_last > 0``), ``Z_last = L L^T`` by a ``b x b``
   Cholesky on the stack, ``G = L^{-1} Z^T`` by substitution -- the operations of the
   reference's ``_ref_spd_finish_store``.
5. **Store**: accepted block rows scattered into ``out`` on the device.

``block_tri_isai`` (BILU(0)'s factors, :mod:`mpsolve.precond.block_ilu`): the block
substitution ``X_q = (E_q - sum_p X_p T[J_p, J_q]) T_qq^{-1}`` is scheduled on the host by
step (all block rows at their ``step``-th block at once; pattern only), and each step's
``b x b`` products ``X_q T_qk`` / ``R T_qq^{-1}`` run batched through the FP64 Tensor
Core helper :func:`.dmma.block_gemm` (8x8x4 DMMA, blocks padded to 8) where ``b <= 8``
(``xp.matmul`` otherwise), accumulated in the reference's order.  The condition bound's
row norms of ``T`` are pattern and host data (computed on the host, in the reference's
order); ``||X||`` and finiteness are reduced on the device.

Verified without a GPU: ``tests/cuda/sim_setup.py`` (simulator: every op against the
``reference`` device, and the preconditioners set up on ``"gpu"`` against ``"cpu"``);
``tests/cuda/compile_checks.py`` (the registry's kernels, the gather kernel included)
and ``tests/cuda/compile_setup.py`` compile them for sm_80/sm_90 and link them to SASS.
Not verified: speed and CuPy's batched ``eigvalsh``/``matmul`` on a real device (no GPU
lent).
"""
from __future__ import annotations

import numpy as np
from numba import cuda, float64, int64

from ..cpu._config import LONG_ROW      # the CPU kernels' rule for a dense row
from ..registry import register
from . import dmma, localsolve as LS
from ._intrin import SIM, WARP, lane_id
from ._launch import cdiv, config, dev, expose, stream

__all__ = ["PANEL", "gather_local", "local_lu_solve", "local_tri_solve", "block_tri_isai",
           "batched_lu", "lu_solve", "tri_solve", "check", "fsai_finish"]

#: Panel width of the blocked batched LU (the warp's width: systems up to 32 unknowns
#: are one panel, i.e. unblocked).
PANEL = 32
#: Warps per block of the gather kernel.
WPB = 2 if SIM else 4
_F64 = [("float64",)]

_SIG_GATHER = [(int64[::1], int64[::1], int64[::1], int64[::1], int64[::1],
                float64[:, :, ::1], float64[:, :, ::1])]


# ----------------------------------------------------------------------------- arrays
def _xp(*arrays):
    """CuPy when any argument is a CuPy array, else NumPy (the simulator's arrays)."""
    for a in arrays:
        if type(a).__module__.split(".")[0] == "cupy":
            import cupy
            return cupy
    return np


def _host(a):
    return a.get() if type(a).__module__.split(".")[0] == "cupy" else np.asarray(a)


def _on(xp, a, dtype):
    """``a`` as a C-contiguous array of ``xp`` (uploaded when it is a host array)."""
    return xp.ascontiguousarray(xp.asarray(a), dtype=dtype)


# ----------------------------------------------------------------------------- gather
@cuda.jit
def _gather_kernel(rows, pptr, pind, aptr, aind, adata, out):
    """``out[t] = A[J_i, J_i]``, ``i = rows[t]``: one warp per ``t``, lanes over the stored
    blocks of each row ``J_p`` of ``A``, a binary search of the block column in ``J_i`` --
    or, for a row of ``A`` over ``LONG_ROW`` times longer than ``J_i`` (a dense row), lanes
    over ``J_i``, a binary search of each column in that row: ``O(m log n)`` in place of
    ``O(n)`` for every local system the row meets (the CPU kernel's rule; the same
    entries land in the same places).  The branch is the same for the whole warp."""
    nrow = rows.shape[0]
    b = adata.shape[1]
    tid = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    gw = tid // WARP
    nw = (cuda.gridDim.x * cuda.blockDim.x) // WARP
    lane = lane_id()
    for t in range(gw, nrow, nw):
        i = rows[t]
        j0 = pptr[i]
        m = pptr[i + 1] - j0
        for p in range(m):
            r = pind[j0 + p]
            k0 = aptr[r]
            k1 = aptr[r + 1]
            if k1 - k0 > LONG_ROW * m:
                for q in range(lane, m, WARP):
                    c = pind[j0 + q]
                    lo = k0
                    hi = k1
                    while lo < hi:                    # first k with aind[k] >= c
                        mid = (lo + hi) // 2
                        if aind[mid] < c:
                            lo = mid + 1
                        else:
                            hi = mid
                    if lo < k1 and aind[lo] == c:
                        for u in range(b):
                            for v in range(b):
                                out[t, p * b + u, q * b + v] = adata[lo, u, v]
                continue
            for k in range(k0 + lane, k1, WARP):
                c = aind[k]
                lo = 0
                hi = m
                while lo < hi:                        # first q with J[q] >= c
                    mid = (lo + hi) // 2
                    if pind[j0 + mid] < c:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo < m and pind[j0 + lo] == c:
                    for u in range(b):
                        for v in range(b):
                            out[t, p * b + u, lo * b + v] = adata[k, u, v]


@register("gpu", "gather_local", _F64)
def gather_local(rows, pptr, pind, aptr, aind, adata, out):
    """``out[t] = A[J_i, J_i]`` for ``i = rows[t]`` (``out`` ``(len(rows), m b, m b)``
    FP64 on the device, zeroed by the caller); one warp per block row."""
    xp = _xp(out, adata)
    n = int(np.asarray(rows).size) if not hasattr(rows, "size") else int(rows.size)
    if n == 0:
        return out
    args = [_on(xp, a, np.int64) for a in (rows, pptr, pind, aptr, aind)]
    ad = _on(xp, adata, np.float64)
    strm = stream(out, *args)
    blocks = max(1, min(cdiv(n, WPB), config().max_blocks))
    _gather_kernel[blocks, WPB * WARP, strm](*dev(*args, ad, out))
    return out


# ----------------------------------------------------------------------------- stack algebra
def batched_lu(xp, a):
    """``P A = L U`` in place on the stack ``a`` (``(B, s, s)``); returns the pivots
    ``(B, s)`` (row ``k`` swapped with row ``piv[:, k]``, whole rows, as LAPACK's getrf).

    Blocked right-looking: for each panel ``[k0, k1)`` of :data:`PANEL` columns, the
    panel is factored column by column (partial pivoting, updates inside the panel only),
    then ``U12 = L11^{-1} A12`` and the trailing update ``A22 -= L21 U12`` as one
    ``xp.matmul`` on the stack (cuBLAS strided-batched DGEMM on a GPU)."""
    B, s, _ = a.shape
    at = xp.arange(B)
    piv = xp.empty((B, s), dtype=np.int64)
    for k0 in range(0, s, PANEL):
        k1 = min(s, k0 + PANEL)
        for k in range(k0, k1):
            p = k + xp.argmax(xp.abs(a[:, k:, k]), axis=1)
            piv[:, k] = p
            rk = a[at, k, :].copy()
            a[at, k, :] = a[at, p, :]
            a[at, p, :] = rk
            lr = a[:, k + 1:, k] / a[:, k, k][:, None]           # l_rk = a_rk / a_kk
            a[:, k + 1:, k] = lr
            a[:, k + 1:, k + 1:k1] -= lr[:, :, None] * a[:, k, None, k + 1:k1]
        if k1 < s:
            for k in range(k0, k1):                              # U12 = L11^-1 A12
                a[:, k + 1:k1, k1:] -= a[:, k + 1:k1, k, None] * a[:, k, None, k1:]
            a[:, k1:, k1:] -= xp.matmul(a[:, k1:, k0:k1], a[:, k0:k1, k1:])  # A22 -= L21 U12
    return piv


def lu_solve(xp, a, piv, x):
    """``x = A^{-1} x`` in place (``x`` ``(B, s, nrhs)``) from :func:`batched_lu`."""
    B, s, _ = a.shape
    at = xp.arange(B)
    for k in range(s):
        p = piv[:, k]
        xk = x[at, k, :].copy()
        x[at, k, :] = x[at, p, :]
        x[at, p, :] = xk
    tri_solve(xp, a, x, upper=False, unit=True)
    tri_solve(xp, a, x, upper=True)


def tri_solve(xp, a, x, upper, unit=False):
    """``x = T^{-1} x`` in place for the triangle of the stack ``a`` (column oriented:
    ``x_k`` final, then subtracted from the rows still to come)."""
    s = a.shape[1]
    for kk in range(s):
        k = s - 1 - kk if upper else kk
        if not unit:
            x[:, k, :] = x[:, k, :] / a[:, k, k, None]
        if upper:
            x[:, :k, :] -= a[:, :k, k, None] * x[:, k, None, :]
        else:
            x[:, k + 1:, :] -= a[:, k + 1:, k, None] * x[:, k, None, :]


def _rhs(xp, B, s, b, pos):
    """``E`` (``(B, s, b)``): columns ``pos b + u`` of the identity."""
    E = xp.zeros((B, s, b))
    u = np.arange(b)
    E[xp.asarray(np.arange(B)[:, None]), xp.asarray(pos[:, None] * b + u[None, :]),
      xp.asarray(u[None, :])] = 1.0
    return E


def check(xp, Mat, X, E, bwd_tol, cond_limit):
    """The CPU's acceptance rule on a stack (``True`` = rejected): ``R = Mat X - E`` by
    ``xp.matmul`` (batched DGEMM), ``bwd = ||R||_inf / (||Mat||_inf ||X||_inf + 1)``,
    rejected when ``X`` is not finite, ``bwd > bwd_tol`` or the bound exceeds
    ``cond_limit`` (NaN rejects)."""
    nA = xp.abs(Mat).sum(axis=-1).max(axis=-1)
    nX = xp.abs(X).sum(axis=-1).max(axis=-1)
    R = xp.matmul(Mat, X) - E
    cond = nA * nX
    bwd = xp.abs(R).sum(axis=-1).max(axis=-1) / (cond + 1.0)
    fin = xp.isfinite(X).all(axis=(1, 2))
    return ~(fin & (bwd <= bwd_tol) & (cond <= cond_limit))


def fsai_finish(xp, Z, b, cond_limit):
    """FSAI rows from ``Z`` (``A_J Z = E_last``, ``(B, s, b)``): ``Z_last`` symmetrised,
    rejected unless SPD with ``lambda_max <= cond_limit lambda_min``; ``Z_last = L L^T``;
    ``G = L^{-1} Z^T`` (``(B, b, s)``).  Returns ``(G, rejected)``."""
    B, s, _ = Z.shape
    zl = Z[:, s - b:, :]
    zl = 0.5 * (zl + xp.swapaxes(zl, 1, 2))
    fin = xp.isfinite(Z).all(axis=(1, 2))
    eye = xp.eye(b)
    zl = xp.where(fin[:, None, None], zl, eye)
    if b == 1:
        w0 = wl = zl[:, 0, 0]
    else:
        w = xp.linalg.eigvalsh(zl)
        w0, wl = w[:, 0], w[:, -1]
    ok = fin & (w0 > 0.0) & (w0 * cond_limit >= wl)
    zl = xp.where(ok[:, None, None], zl, eye)
    L = xp.zeros((B, b, b))
    for j in range(b):                                           # Cholesky, b x b
        d = zl[:, j, j].copy()
        for k in range(j):
            d -= L[:, j, k] * L[:, j, k]
        d = xp.sqrt(d)
        L[:, j, j] = d
        for i in range(j + 1, b):
            acc = zl[:, i, j].copy()
            for k in range(j):
                acc -= L[:, i, k] * L[:, j, k]
            L[:, i, j] = acc / d
    Zt = xp.where(ok[:, None, None], xp.swapaxes(Z, 1, 2), 0.0)
    G = xp.empty((B, b, s))
    for u in range(b):                                           # G = L^-1 Z^T
        acc = Zt[:, u, :].copy()
        for v in range(u):
            acc -= L[:, u, v, None] * G[:, v, :]
        G[:, u, :] = acc / L[:, u, u, None]
    return G, ~ok


# ----------------------------------------------------------------------------- local solves
def _solve_group(xp, kind, A, p, b, flag, bwd_tol, cond_limit):
    """Block rows ``(B, b, s)`` of one size group from its gathered stack ``A`` and the
    rejection mask.  ``kind``: ``"lu"`` (``flag``: spd) or ``"tri"`` (``flag``: A lower)."""
    B, s, _ = A.shape
    spd = kind == "lu" and flag
    Mat = A if spd else xp.swapaxes(A, 1, 2)                     # the matrix solved
    E = _rhs(xp, B, s, b, p)
    if s <= LS.MAX_S:
        # the warp kernels solve A[t]^T x = e: give them Mat^T
        At = A if not spd else xp.ascontiguousarray(xp.swapaxes(A, 1, 2))
        nrhs = None if b == 1 else b                             # b columns: a block row
        if kind == "lu":
            X, Q = LS.local_solve_warp(At, p, nrhs=nrhs)
        else:
            X, Q = LS.local_tri_warp(At, p, not flag, nrhs=nrhs)
        X = X.reshape(B, s, b)
        # Q = (bwd, ||Mat||_inf ||X||_inf): the CPU's quantities, its thresholds
        bad = ~(xp.isfinite(X).all(axis=(1, 2)) & (Q[:, 0] <= bwd_tol)
                & (Q[:, 1] <= cond_limit))
    else:
        X = E.copy()
        if kind == "lu":
            F = Mat.copy(order="C")                              # Mat is kept for the check
            piv = batched_lu(xp, F)
            lu_solve(xp, F, piv, X)
        else:
            tri_solve(xp, Mat, X, upper=bool(flag))              # A lower: A^T upper
        bad = check(xp, Mat, X, E, bwd_tol, cond_limit)
    if spd:
        G, bad2 = fsai_finish(xp, X, b, cond_limit)
        return G, bad | bad2
    return xp.swapaxes(X, 1, 2), bad


def _local(kind, rows, pos, pptr, pind, aptr, aind, adata, flag, bwd_tol, cond_limit, out,
           bad):
    xp = _xp(out, adata)
    rows = np.asarray(_host(rows), dtype=np.int64)
    pos = np.asarray(_host(pos), dtype=np.int64)
    pptr_h = np.asarray(_host(pptr), dtype=np.int64)
    if rows.size == 0:
        return
    b = adata.shape[1]
    dp, di = _on(xp, pptr_h, np.int64), _on(xp, pind, np.int64)
    da, dj = _on(xp, aptr, np.int64), _on(xp, aind, np.int64)
    dd = _on(xp, adata, np.float64)
    sizes = pptr_h[rows + 1] - pptr_h[rows]
    err = np.errstate(all="ignore") if xp is np else _Null()
    with err:
        for m in np.unique(sizes):
            group = np.flatnonzero(sizes == m)
            s = int(m) * b
            step = _batch_rows(xp, s)
            for at in range(0, group.size, step):               # batches that fit
                sel = group[at:at + step]
                r, p = rows[sel], pos[sel]
                A = xp.zeros((sel.size, s, s))
                gather_local(r, dp, di, da, dj, dd, A)           # on the device
                Xr, rej = _solve_group(xp, kind, A, p, b, flag, bwd_tol, cond_limit)
                del A
                rej = np.asarray(_host(rej), dtype=bool)
                ok = np.flatnonzero(~rej)
                if ok.size:                                      # store on the device
                    blocks = Xr[xp.asarray(ok)].reshape(ok.size, b, int(m),
                                                        b).transpose(0, 2, 1, 3)
                    idx = pptr_h[r[ok]][:, None] + np.arange(int(m))[None, :]
                    out[xp.asarray(idx)] = blocks
                bad[sel] = rej.astype(bad.dtype)


#: Bytes one batch of a size group may take (its stacks: the gathered systems, the LU's
#: copy, the check's temporaries -- :data:`STACKS` times ``s * s`` doubles a row);
#: ``None``: half the device's free memory at the call (64 MiB on the host's NumPy); a
#: batch has one row at least.
BATCH_BYTES = None
#: Stacks of ``s x s`` doubles a batch holds at once (gathered ``A``, the LU's ``F``, the
#: check's ``|Mat|`` and product, the trailing update's temporaries).
STACKS = 5


def _batch_rows(xp, s):
    """Rows of one batch of systems of ``s`` unknowns: all of a size group would not fit
    a GPU's memory on large problems (3-D elasticity, 10^6 unknowns: 333k systems of 81,
    17.5 GB a stack), so a group is solved in batches of :data:`BATCH_BYTES`."""
    budget = BATCH_BYTES
    if budget is None:
        budget = 64 << 20
        if xp is not np:
            try:
                free, _ = xp.cuda.runtime.memGetInfo()
                budget = free // 2
            except Exception:                               # noqa: BLE001
                pass
    return max(1, int(budget) // (STACKS * 8 * s * s))


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@register("gpu", "local_lu_solve", _F64)
def local_lu_solve(rows, pos, pptr, pind, aptr, aind, adata, spd, bwd_tol, cond_limit, out,
                   bad):
    """The host op on the device: gather, warp Gauss-Jordan (``s <= 32``) or blocked
    batched LU, check, (``spd``) FSAI finish, store (see the module docstring)."""
    _local("lu", rows, pos, pptr, pind, aptr, aind, adata, bool(spd), bwd_tol, cond_limit,
           out, bad)


@register("gpu", "local_tri_solve", _F64)
def local_tri_solve(rows, pos, pptr, pind, aptr, aind, adata, lower, bwd_tol, cond_limit,
                    out, bad):
    """The host op on the device for triangular ``A``: gather, warp substitution
    (``s <= 32``) or substitution on the stack, check, store."""
    _local("tri", rows, pos, pptr, pind, aptr, aind, adata, bool(lower), bwd_tol, cond_limit,
           out, bad)


# ----------------------------------------------------------------------------- block ILU
def _dmma_ok():
    return SIM or cuda.get_current_device().compute_capability >= (8, 0)


def _gemm(xp, A, B):
    """``A @ B`` for stacks of ``b x b`` blocks: the FP64 Tensor Core helper where
    ``b <= 8`` (and the device has FP64 MMA), ``xp.matmul`` otherwise."""
    if A.shape[0] == 0:
        return xp.zeros(A.shape)
    if A.shape[1] <= dmma.MAX_B and _dmma_ok():
        return dmma.block_gemm(xp.ascontiguousarray(A), xp.ascontiguousarray(B))
    return xp.matmul(A, B)


def _schedule(pptr, pind, tptr, tind, tdiag, lower, step):
    """Host, pattern only: the block rows active at ``step``, their block ``dst`` (pattern
    position of ``X_q``), its row ``r`` of ``T``, and the products of the step as
    ``(src, k, acc)``: ``S[acc] += X[src] T[k]`` for ``T[r, k]`` off the diagonal with
    ``tind[k]`` in ``J_i`` (in ``k`` order, as the reference)."""
    m = np.diff(pptr)
    act = np.flatnonzero(m > step)
    q = (m[act] - 1 - step) if lower else np.full(act.size, step)
    dst = pptr[act] + q
    r = pind[dst]
    k0 = tptr[r] if lower else tdiag[r] + 1
    k1 = tdiag[r] if lower else tptr[r + 1]
    cnt = np.maximum(k1 - k0, 0)
    tot = int(cnt.sum())
    own = np.repeat(np.arange(act.size), cnt)
    off = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    k = np.repeat(k0, cnt) + off
    i = act[own]
    c = tind[k]
    # position of column c in J_i: search the pattern keyed by (row, column)
    ncol = int(max(pind.max(initial=0), c.max(initial=0))) + 1
    nb = pptr.size - 1
    prow = np.repeat(np.arange(nb), m)
    key = prow * ncol + pind
    want = i * ncol + c
    g = np.minimum(np.searchsorted(key, want), max(key.size - 1, 0))
    hit = key[g] == want if key.size else np.zeros(0, bool)
    return act, dst, r, dst[own[hit]], k[hit], g[hit]   # (..., src, k, acc)


@register("gpu", "block_tri_isai", _F64)
def block_tri_isai(pptr, pind, tptr, tind, tdata, tdiag, dinv, lower, cond_limit, out, bad):
    """The host op on the device: ``X T[J_i, J_i] = E_i^T`` by block substitution for
    every block row at once, step by step, the ``b x b`` products through the FP64 Tensor
    Core helper (``b <= 8``); ``bad[i] = 1`` when ``X`` is not finite or ``||T_J||_inf
    ||X||_inf > cond_limit`` (see the module docstring)."""
    xp = _xp(out, tdata)
    pptr, pind, tptr, tind, tdiag = (np.asarray(_host(a), dtype=np.int64)
                                     for a in (pptr, pind, tptr, tind, tdiag))
    td_h = np.asarray(_host(tdata), dtype=np.float64)
    nb = pptr.size - 1
    if nb == 0:
        return
    b = td_h.shape[1]
    td = _on(xp, tdata, np.float64)
    di = _on(xp, dinv, np.float64)
    lower = bool(lower)
    m = np.diff(pptr)
    S = xp.zeros((pind.size, b, b))
    rown = np.zeros((pind.size, b))                               # host: T's row norms
    absrow = np.abs(td_h).sum(axis=2)
    eye = xp.eye(b)
    err = np.errstate(all="ignore") if xp is np else _Null()
    with err:
        for step in range(int(m.max(initial=0))):
            act, dst, r, src, k, acc = _schedule(pptr, pind, tptr, tind, tdiag, lower, step)
            ddst = xp.asarray(dst)
            R = -S[ddst]
            if step == 0:
                R = R + eye
            if lower:
                out[ddst] = R                                     # X_q = R (T_qq = I)
                rown[dst] += 1.0
            else:
                out[ddst] = _gemm(xp, R, di[xp.asarray(r)])       # X_q = R U_qq^-1
                rown[dst] += absrow[tdiag[r]]
            if k.size:
                # S[acc] += X_q T[r, k]: each acc once per step (distinct columns of J_i)
                S[xp.asarray(acc)] += _gemm(xp, out[xp.asarray(src)], td[xp.asarray(k)])
                np.add.at(rown, src, absrow[k])
        prow = np.repeat(np.arange(nb), m)
        tn = np.zeros(nb)
        np.maximum.at(tn, prow, rown.max(axis=1, initial=0.0))
        # ||X||_inf per block row and finiteness, reduced on the device
        a = xp.abs(out).sum(axis=2)                               # (nnzp, b)
        nf = (~xp.isfinite(out)).sum(axis=(1, 2)).astype(np.float64)
        cs = xp.concatenate([xp.zeros((1, b)), xp.cumsum(a, axis=0)])
        cf = xp.concatenate([xp.zeros(1), xp.cumsum(nf)])
        dp = xp.asarray(pptr)
        xn = (cs[dp[1:]] - cs[dp[:-1]]).max(axis=1)
        nonfin = (cf[dp[1:]] - cf[dp[:-1]]) != 0
        rej = nonfin | ~(xp.asarray(tn) * xn <= cond_limit)
    bad[:] = np.asarray(_host(rej), dtype=bad.dtype)


expose(gather_local, [(_gather_kernel, _SIG_GATHER)])
expose(local_lu_solve, [(_gather_kernel, _SIG_GATHER), (LS._gj_kernel, LS._SIG_GJ),
                        (LS._gjb_kernel, LS._SIG_GJB)], warp=[LS._gj_kernel, LS._gjb_kernel])
expose(local_tri_solve, [(_gather_kernel, _SIG_GATHER), (LS._tri_kernel, LS._SIG_TRI),
                         (LS._trib_kernel, LS._SIG_TRIB)],
       warp=[LS._tri_kernel, LS._trib_kernel])
expose(block_tri_isai, [(dmma._dmma_kernel, dmma._SIG)])
