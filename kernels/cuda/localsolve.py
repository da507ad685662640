"""Warp-level batched local solves of the (Block-)ISAI set-up: one warp per local system.

What they compute
-----------------
Given a stack of FP64 local matrices ``A`` (``(batch, s, s)``, C-contiguous, ``s <= 32``,
the ``A[J_i, J_i]`` of :func:`mpsolve.precond._localsolve.gather_local`) and one position
``pos[t]`` per system, both kernels solve the ``general`` ISAI row system

    ``M x = e_pos``  with  ``M = A[t]^T``  (``x`` is row ``pos`` of the local inverse),

and return, besides ``x`` (``X[t, :s]``), the two acceptance quantities the CPU path
(:func:`mpsolve.precond._localsolve._checked_solve`) uses, in ``Q[t] = (bwd, cond_lb)``:

* ``bwd = ||M x - e_pos||_inf / (||M||_inf ||x||_inf + 1)`` (normwise backward error; the
  residual is formed from the *original* ``A`` in global memory);
* ``cond_lb = ||M||_inf ||x||_inf`` (a lower bound of ``cond_inf(M)``).

``||M||_inf`` is the norm of the solved matrix ``A^T`` (max column sum of ``A``), exactly as
the CPU's ``_norm_inf(np.swapaxes(Aloc, 1, 2))``.  A caller applies the CPU's rule unchanged:
reject when ``x`` is not finite, ``not bwd <= BWD_TOL`` or ``not cond_lb <= COND_LIMIT``.  An
exactly singular system (a zero pivot after partial pivoting, or a zero diagonal in the
triangular variant) is never NaN-silent: its ``Q[t]`` is ``(inf, inf)``; a non-finite ``x``
or residual also gives ``bwd = inf``.

* :func:`local_solve_warp` (op ``"local_solve_warp"``): Gauss-Jordan with partial
  pivoting.  The warp holds ``M`` in shared memory (``(32, 33)`` FP64 per warp, padded
  against bank conflicts), lane ``l`` owning row ``l`` of ``M`` and ``b_l`` of the right-hand
  side in a register.  Step ``k``: the pivot row ``p = argmax_{l >= k} |M[l, k]|`` is found
  by a ``shfl_xor`` butterfly max of ``|M[l, k]|`` followed by a ``ballot`` of the lanes that
  hold the maximum (the lowest such lane wins: a fixed tie rule), rows ``k``/``p`` are
  swapped by the lanes column-wise and ``b_k``/``b_p`` by ``shfl_idx``; every lane ``l != k``
  eliminates ``M[l, k]`` (``M[l, j] -= f M[k, j]`` by ``fma``, ``b_l -= f b_k``).  At the end
  ``x_l = b_l / M[l, l]``.  ``~s^3`` flops per system spread over ``s`` lanes.
* :func:`local_tri_warp` (op ``"local_tri_warp"``): the ``lower``/``upper`` ISAI, where
  ``A[J, J]`` is triangular: no factorisation, column-oriented substitution.  Step ``k``
  (increasing for ``M`` lower triangular, i.e. ``A`` upper; decreasing otherwise):
  ``x_k = b_k / M[k, k]`` broadcast by ``shfl_idx``, then every lane ``i`` updates
  ``b_i -= M[i, k] x_k = A[k, i] x_k``, a coalesced read of row ``k`` of ``A`` (no shared
  memory).  ``lower_m=True`` says ``M = A^T`` is lower triangular (``A`` upper).

Launch shape
------------
One warp per system, :data:`WPB` warps per block (4 on hardware: ``4 x 32 x 33 x 8 B =
33 KiB`` of static shared memory; 2 under the simulator), a grid-stride loop over systems
(grid from :func:`~._launch.grid_warps`, capped by the device's resident blocks).  Every
warp runs the same trip count and the same ``s`` steps (an idle warp works on a clamped
system and writes nothing), so the warp intrinsics are called convergently, as the
simulator's emulation in :mod:`._intrin` requires.  Idle lanes (``l >= s``) contribute zeros.

Where this is used in ``precond``
--------------------------------
The GPU (Block-)ISAI set-up, :mod:`.isai_setup` (the ``"gpu"`` ``local_lu_solve`` /
``local_tri_solve`` ops that :mod:`mpsolve.precond._localsolve` finds in the registry):
patterns and size groups on the host, a batched gather (one warp per block row), **stacks
with s <= 32 solved by these warp kernels** -- block rows (``b > 1`` right-hand sides
``E_pos``, columns ``pos b + u``) by their ``nrhs = b`` form -- their ``Q`` fed to the CPU's
rule, rejected rows through the CPU fallback; larger systems by the blocked batched LU of :mod:`.isai_setup`
(trailing updates ``xp.matmul`` on stacks: cuBLAS strided-batched DGEMM); the block-ILU
variant's block substitution products by the DMMA helper (:mod:`mpsolve.kernels.cuda.dmma`).

Block rows (``nrhs = b``)
-------------------------
``local_solve_warp(A, pos, nrhs=b)`` / ``local_tri_warp(..., nrhs=b)`` (kernels
``_gjb_kernel``, ``_trib_kernel``) solve ``A[t]^T X = E`` for the ``b`` columns
``pos b + u`` of the identity with one factorisation (one substitution): ``M`` as above,
the ``b`` right-hand sides in ``X[t]`` in global memory (lane ``l`` owns row ``l``;
the pivot swap by the first ``b`` lanes; ``syncwarp`` orders the lanes' accesses).  ``Q``
holds the block quantities, the CPU's block formula: ``||M X - E||_inf`` and
``||X||_inf`` as row sums over the ``b`` columns.

Verified without a GPU
----------------------
``tests/cuda/sim_localsolve.py`` (simulator): both kernels against ``numpy.linalg.solve``
for random well-conditioned systems, ``s`` in ``{1, 3, 8, 25, 32}``, batches <= 4, the
acceptance quantities against the CPU formula, a singular and a nearly singular system
flagged (``Q = (inf, inf)`` or over the CPU thresholds, never NaN).
``tests/cuda/compile_checks.py`` (via the registry) and ``tests/cuda/compile_localsolve.py``
compile both for sm_80/sm_90 and link them to SASS with nvJitLink: no spills, no stack,
``SHFL`` in the SASS.  Measured (numba-cuda 0.30.4, CUDA 13.5 wheels): registers per thread
Gauss-Jordan 105 (sm_80) / 61 (sm_90), triangular 128 / 72.  Not verified: speed and
hardware numerics (no GPU lent; a ``*gpu*`` test is the follow-up).
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float64, int64

from ..registry import register
from ._intrin import SIM, WARP, ballot, fma, lane_id, shfl_idx, shfl_xor, syncwarp
from ._launch import cdiv, config, dev, expose, stream

__all__ = ["MAX_S", "WPB", "local_solve_warp", "local_tri_warp"]

#: Largest local system a warp solves.
MAX_S = WARP
#: Warps per block (the shared-memory array's leading dimension: a module constant).
WPB = 2 if SIM else 4
#: Row stride of the per-warp shared matrix (33: padding against bank conflicts).
_LD = WARP + 1
_INF = math.inf

_SIG_GJ = [(float64[:, :, ::1], int64[::1], float64[:, ::1], float64[:, ::1])]
_SIG_TRI = [(float64[:, :, ::1], int64[::1], int64, float64[:, ::1], float64[:, ::1])]
_SIG_GJB = [(float64[:, :, ::1], int64[::1], float64[:, :, ::1], float64[:, ::1])]
_SIG_TRIB = [(float64[:, :, ::1], int64[::1], int64, float64[:, :, ::1], float64[:, ::1])]


@cuda.jit(device=True, inline=True)
def _warp_max(v):
    """Max over the warp (butterfly: every lane gets it).  NaN-safe: a NaN never wins."""
    for off in (16, 8, 4, 2, 1):
        o = shfl_xor(v, off)
        if o > v:
            v = o
    return v


@cuda.jit(device=True, inline=True)
def _finish(A, t, s, pos, x, lane, singular, write, X, Q):
    """Residual, norms and the acceptance quantities of ``A[t]^T x = e_pos``; writes
    ``X[t, :s]`` and ``Q[t]`` when ``write``.  ``x`` is lane ``lane``'s unknown."""
    r = 0.0
    colsum = 0.0
    for j in range(s):                            # convergent: shfl by every lane
        xj = shfl_idx(x, j)
        if lane < s:
            a = A[t, j, lane]                     # M[lane, j]
            r = fma(a, xj, r)
            colsum += abs(a)
    if lane == pos:
        r -= 1.0
    if lane >= s:
        r = 0.0
        colsum = 0.0
    ax = abs(x) if lane < s else 0.0
    nr = _warp_max(abs(r))
    na = _warp_max(colsum)
    nx = _warp_max(ax)
    finite = ballot(lane < s and not (abs(x) <= _INF)) == 0   # NaN/inf in x: not finite
    cond = na * nx
    bwd = nr / (cond + 1.0)
    if singular or not finite or not (bwd <= _INF):
        bwd = _INF
    if singular:
        cond = _INF
    if write:
        if lane < s:
            X[t, lane] = x
        if lane == 0:
            Q[t, 0] = bwd
            Q[t, 1] = cond


@cuda.jit
def _gj_kernel(A, pos, X, Q):
    """Gauss-Jordan with partial pivoting of ``A[t]^T x = e_pos[t]``, one warp per ``t``."""
    S = cuda.shared.array((WPB, WARP, _LD), float64)
    batch = A.shape[0]
    s = A.shape[1]
    tid = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    gw = tid // WARP
    nw = (cuda.gridDim.x * cuda.blockDim.x) // WARP
    w = cuda.threadIdx.x // WARP
    lane = lane_id()
    for rnd in range((batch + nw - 1) // nw):     # the same trip count for every warp
        t = gw + rnd * nw
        write = t < batch
        if not write:
            t = batch - 1                         # idle warp: a clamped copy, no writes
        p0 = pos[t]
        # load M = A^T: lane l holds row l of M, i.e. column l of A (coalesced in i)
        for i in range(s):
            if lane < s:
                S[w, lane, i] = A[t, i, lane]
        b = 1.0 if lane == p0 else 0.0
        singular = False
        syncwarp()
        for k in range(s):
            v = abs(S[w, lane, k]) if (lane >= k and lane < s) else -1.0
            vmax = _warp_max(v)
            mask = ballot(lane >= k and lane < s and v == vmax)
            p = k
            if mask != 0:
                p = cuda.ffs(mask) - 1            # lowest lane holding the max
                if p < k or p >= s:
                    p = k
            if p != k and lane < s:               # swap rows k and p, column by column
                tmp = S[w, k, lane]
                S[w, k, lane] = S[w, p, lane]
                S[w, p, lane] = tmp
            bk = shfl_idx(b, k)
            bp = shfl_idx(b, p)
            if lane == k:
                b = bp
            elif lane == p:
                b = bk
            syncwarp()
            piv = S[w, k, k]
            bk = shfl_idx(b, k)
            if not (piv != 0.0):                  # exact zero or NaN: singular
                singular = True
            elif lane != k and lane < s:
                f = S[w, lane, k] / piv
                for j in range(k + 1, s):
                    S[w, lane, j] = fma(-f, S[w, k, j], S[w, lane, j])
                S[w, lane, k] = 0.0
                b = fma(-f, bk, b)
            syncwarp()
        x = 0.0
        if lane < s:
            d = S[w, lane, lane]
            x = b / d if d != 0.0 else 0.0
        syncwarp()                                # S is reloaded by the next round
        _finish(A, t, s, p0, x, lane, singular, write, X, Q)


@cuda.jit
def _tri_kernel(A, pos, lower_m, X, Q):
    """Substitution for triangular ``M = A[t]^T`` (lower when ``lower_m``), one warp per ``t``."""
    batch = A.shape[0]
    s = A.shape[1]
    tid = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    gw = tid // WARP
    nw = (cuda.gridDim.x * cuda.blockDim.x) // WARP
    lane = lane_id()
    for rnd in range((batch + nw - 1) // nw):
        t = gw + rnd * nw
        write = t < batch
        if not write:
            t = batch - 1
        p0 = pos[t]
        b = 1.0 if lane == p0 else 0.0
        x = 0.0
        singular = False
        for step in range(s):
            k = step if lower_m != 0 else s - 1 - step
            d = A[t, k, k]
            bk = shfl_idx(b, k)
            if d != 0.0:
                xk = bk / d
            else:
                singular = True
                xk = 0.0
            if lane == k:
                x = xk
            later = (lane > k) if lower_m != 0 else (lane < k)
            if later and lane < s:
                b = fma(-A[t, k, lane], xk, b)   # M[lane, k] = A[k, lane]
        _finish(A, t, s, p0, x, lane, singular, write, X, Q)


@cuda.jit(device=True, inline=True)
def _finish_block(A, t, s, nrhs, pos, lane, singular, write, X, Q):
    """The block acceptance quantities of ``A[t]^T X = E`` (``E``: columns ``pos nrhs + u``
    of the identity), ``X`` in ``X[t]`` (global memory): ``||M X - E||_inf`` (row sums
    over the ``nrhs`` columns), ``||M||_inf ||X||_inf`` -- the CPU's block formula."""
    rsum = 0.0
    xsum = 0.0
    colsum = 0.0
    if lane < s:
        for j in range(s):
            colsum += abs(A[t, j, lane])            # row lane of M = A^T
        for u in range(nrhs):
            r = 0.0
            for j in range(s):
                r = fma(A[t, j, lane], X[t, j, u], r)
            if lane == pos * nrhs + u:
                r -= 1.0
            rsum += abs(r)
            xsum += abs(X[t, lane, u])
    nr = _warp_max(rsum)
    na = _warp_max(colsum)
    nx = _warp_max(xsum)
    finite = ballot(lane < s and not (xsum <= _INF)) == 0
    cond = na * nx
    bwd = nr / (cond + 1.0)
    if singular or not finite or not (bwd <= _INF):
        bwd = _INF
    if singular:
        cond = _INF
    if write and lane == 0:
        Q[t, 0] = bwd
        Q[t, 1] = cond


@cuda.jit
def _gjb_kernel(A, pos, X, Q):
    """Gauss-Jordan of ``A[t]^T X = E_pos`` with ``nrhs = X.shape[2]`` columns (a block row:
    columns ``pos nrhs + u``), one warp per ``t``: ``M`` in shared memory as
    :func:`_gj_kernel`, the right-hand sides in ``X[t]`` (global), lane ``l`` owning row
    ``l``; one factorisation for the ``nrhs`` columns."""
    S = cuda.shared.array((WPB, WARP, _LD), float64)
    batch = A.shape[0]
    s = A.shape[1]
    nrhs = X.shape[2]
    tid = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    gw = tid // WARP
    nw = (cuda.gridDim.x * cuda.blockDim.x) // WARP
    w = cuda.threadIdx.x // WARP
    lane = lane_id()
    for rnd in range((batch + nw - 1) // nw):     # the same trip count for every warp
        t = gw + rnd * nw
        write = t < batch
        if not write:
            t = batch - 1                         # idle warp: a clamped copy, no writes
        p0 = pos[t]
        for i in range(s):
            if lane < s:
                S[w, lane, i] = A[t, i, lane]
        if write and lane < s:
            for u in range(nrhs):
                X[t, lane, u] = 1.0 if lane == p0 * nrhs + u else 0.0
        singular = False
        syncwarp()
        for k in range(s):
            v = abs(S[w, lane, k]) if (lane >= k and lane < s) else -1.0
            vmax = _warp_max(v)
            mask = ballot(lane >= k and lane < s and v == vmax)
            p = k
            if mask != 0:
                p = cuda.ffs(mask) - 1            # lowest lane holding the max
                if p < k or p >= s:
                    p = k
            if p != k and lane < s:               # swap rows k and p (M column-wise,
                tmp = S[w, k, lane]               # X by its first nrhs lanes)
                S[w, k, lane] = S[w, p, lane]
                S[w, p, lane] = tmp
                if write and lane < nrhs:
                    tmp = X[t, k, lane]
                    X[t, k, lane] = X[t, p, lane]
                    X[t, p, lane] = tmp
            syncwarp()
            piv = S[w, k, k]
            if not (piv != 0.0):                  # exact zero or NaN: singular
                singular = True
            elif lane != k and lane < s:
                f = S[w, lane, k] / piv
                for j in range(k + 1, s):
                    S[w, lane, j] = fma(-f, S[w, k, j], S[w, lane, j])
                S[w, lane, k] = 0.0
                if write:
                    for u in range(nrhs):
                        X[t, lane, u] = fma(-f, X[t, k, u], X[t, lane, u])
            syncwarp()
        if write and lane < s:
            d = S[w, lane, lane]
            for u in range(nrhs):
                X[t, lane, u] = X[t, lane, u] / d if d != 0.0 else 0.0
        syncwarp()                                # X read by every lane; S reloaded next
        _finish_block(A, t, s, nrhs, p0, lane, singular, write, X, Q)
        syncwarp()


@cuda.jit
def _trib_kernel(A, pos, lower_m, X, Q):
    """Substitution for triangular ``M = A[t]^T`` with ``nrhs = X.shape[2]`` columns, the
    right-hand sides in ``X[t]`` (global), one warp per ``t``."""
    batch = A.shape[0]
    s = A.shape[1]
    nrhs = X.shape[2]
    tid = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    gw = tid // WARP
    nw = (cuda.gridDim.x * cuda.blockDim.x) // WARP
    lane = lane_id()
    for rnd in range((batch + nw - 1) // nw):
        t = gw + rnd * nw
        write = t < batch
        if not write:
            t = batch - 1
        p0 = pos[t]
        if write and lane < s:
            for u in range(nrhs):
                X[t, lane, u] = 1.0 if lane == p0 * nrhs + u else 0.0
        singular = False
        syncwarp()
        for step in range(s):
            k = step if lower_m != 0 else s - 1 - step
            d = A[t, k, k]
            if not (d != 0.0):
                singular = True
            if write and lane == k:
                for u in range(nrhs):
                    X[t, k, u] = X[t, k, u] / d if d != 0.0 else 0.0
            syncwarp()
            later = (lane > k) if lower_m != 0 else (lane < k)
            if write and later and lane < s:
                a = A[t, k, lane]                 # M[lane, k] = A[k, lane]
                for u in range(nrhs):
                    X[t, lane, u] = fma(-a, X[t, k, u], X[t, lane, u])
            syncwarp()
        _finish_block(A, t, s, nrhs, p0, lane, singular, write, X, Q)
        syncwarp()


def _launch(kernel, A, pos, *extra, nrhs=0):
    A = np.ascontiguousarray(A, dtype=np.float64) if isinstance(A, np.ndarray) else A
    batch, s, s2 = A.shape
    if s != s2 or not 1 <= s <= MAX_S:
        raise ValueError(f"local systems must be square with 1 <= s <= {MAX_S}, got {A.shape}")
    pos = np.ascontiguousarray(pos, dtype=np.int64) if isinstance(pos, np.ndarray) else pos
    if isinstance(pos, np.ndarray) and (pos.shape != (batch,) or pos.min(initial=0) < 0
                                        or pos.max(initial=0) >= s):
        raise ValueError("pos must hold one position 0 <= pos < s per system")
    shape = (batch, s, nrhs) if nrhs else (batch, s)
    xp = np
    if type(A).__module__.split(".")[0] == "cupy":
        import cupy as xp  # noqa: F811
    if batch == 0:                      # (in A's array module, as any other result)
        return xp.zeros(shape), xp.zeros((0, 2))
    if xp is not np:
        pos = xp.asarray(pos)           # checked on the host, uploaded once with A (numba
    Xo = xp.zeros(shape, dtype=np.float64)   # would copy a host array at every launch)
    Qo = xp.zeros((batch, 2), dtype=np.float64)
    strm = stream(A, pos, Xo, Qo)
    dA, dpos, dX, dQ = dev(A, pos, Xo, Qo)
    cfg = config()
    threads = WPB * WARP
    blocks = max(1, min(cdiv(batch, WPB), cfg.max_blocks))
    kernel[blocks, threads, strm](dA, dpos, *extra, dX, dQ)
    return Xo, Qo


@register("gpu", "local_solve_warp", [("float64",)])
def local_solve_warp(A, pos, nrhs=None):
    """``X[t] = A[t]^{-T} e_pos[t]`` (Gauss-Jordan, partial pivoting, one warp per system)
    for ``A`` ``(batch, s, s)`` FP64, ``s <= 32``.  Returns ``(X (batch, s), Q (batch, 2))``,
    ``Q[t] = (backward error, ||A^T||_inf ||x||_inf)`` (see the module docstring).

    ``nrhs = b``: a block row, ``X[t] = A[t]^{-T} E`` with ``E`` the columns
    ``pos[t] b + u`` (``u < b``) of the identity, one factorisation for the ``b`` columns
    (``X`` of shape ``(batch, s, b)``; ``Q`` the block quantities: norms over the ``b``
    columns, the CPU's block formula)."""
    if nrhs is None:
        return _launch(_gj_kernel, A, pos)
    return _launch(_gjb_kernel, A, _block_pos(pos, nrhs, A.shape[1]), nrhs=int(nrhs))


@register("gpu", "local_tri_warp", [("float64",)])
def local_tri_warp(A, pos, lower_m, nrhs=None):
    """As :func:`local_solve_warp` for triangular ``A[t]`` by substitution; ``lower_m``:
    ``A[t]^T`` is lower triangular (``A`` upper: the ``upper`` ISAI), else upper."""
    if nrhs is None:
        return _launch(_tri_kernel, A, pos, int(bool(lower_m)))
    return _launch(_trib_kernel, A, _block_pos(pos, nrhs, A.shape[1]), int(bool(lower_m)),
                   nrhs=int(nrhs))


def _block_pos(pos, nrhs, s):
    """``pos`` checked against the block layout (``pos nrhs + nrhs <= s``) and handed to
    :func:`_launch` as positions its range check accepts (the kernels read ``pos``)."""
    if int(nrhs) < 1 or s % int(nrhs):
        raise ValueError(f"nrhs={nrhs!r} must divide s = {s}")
    if isinstance(pos, np.ndarray) and pos.size and (pos.min() < 0 or pos.max() >= s // nrhs):
        raise ValueError("pos must hold one block position 0 <= pos < s / nrhs per system")
    return pos


expose(local_solve_warp, [(_gj_kernel, _SIG_GJ), (_gjb_kernel, _SIG_GJB)],
       warp=[_gj_kernel, _gjb_kernel])
expose(local_tri_warp, [(_tri_kernel, _SIG_TRI), (_trib_kernel, _SIG_TRIB)],
       warp=[_tri_kernel, _trib_kernel])
