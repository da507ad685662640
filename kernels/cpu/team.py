"""CG, BiCGSTAB and GMRES's inner steps run by two threads, each on half of the rows (Numba,
no parallel region).

For systems too large for one core and too small to pay for a parallel region per sweep
(:mod:`.sync`'s docstring: a region costs 55-80 us to open on a 2-vCPU machine whose
OpenMP workers sleep, a sweep of 10^4-10^5 rows takes 5-100 us), the caller's thread and
one helper thread run the same iteration as the compiled loops of :mod:`.loops` (the
same recurrences, stopping tests and rare paths), each on its own half of the rows:

* vector updates, the Jacobi scaling and the row products (of ``A`` and of a CSR
  preconditioner: ISAI's, SPAI's) touch the thread's own rows only;
* a dot product or norm is each thread's partial sum over its rows, published in a
  shared array; after a barrier both threads add the two partials in the same order
  (native: ``p_0 + p_1``; compensated: the two Dot2 pairs merged with TwoSum, then
  rounded or square-rooted as :mod:`.eft` does), so both take every branch alike;
* a product ``A p`` reads all of ``p``: a barrier follows each sweep whose output the
  next one reads across the halves (CG: three barriers an iteration without
  preconditioner, four with one; BiCGSTAB: six to eight; a GMRES step four to six);
* GMRES's small problem (the Hessenberg column, its Givens rotations) is computed by both
  threads alike, each in its own copy, from the same added partials;
* the ILU(0) sweeps (sequential by nature) run on the caller's thread over all rows while
  the helper waits; the rest of the iteration is still shared -- except for factors of
  two diagonal blocks (``ILU0(blocks=2)``: block Jacobi, as PETSc's ``bjacobi`` on two
  ranks), whose blocks are the halves, each thread sweeping its own;
* the rare paths (a norm or ratio recomputed from scaled vectors) run on the caller's
  thread on the whole vectors, between barriers, with :mod:`.loopmath`'s functions.

The rows are split once per matrix where ``nnz + rows`` is halved (:func:`split_rows`).
The loops' results depend on the split, never on the pairing: a run the helper does not
join (:func:`mpsolve.kernels.cpu.sync.await_partner`) computes both halves in turn with
the same arithmetic, bit for bit.  They are not the serial loops' bits (dot products are
summed in another order), as the parallel kernels' are not.

Reference for the structure: the SPMD form of PETSc's ``KSPSolve`` on two MPI ranks
(each rank its rows; ``VecDot``'s ``MPI_Allreduce`` the meeting point), here two threads
of one process sharing the vectors.
"""
from __future__ import annotations

import math
import os
import threading

import numpy as np
from numba import njit

from ..fused import ACC32, ACC64_DOT, P_CSR, P_CSR2, P_DIAG, P_ILU, P_ILU2, P_NONE
from ._config import JIT
from .blas1 import (_axpy2_nrm2_ser, _axpy2_ser, _axpy_ser, _bicg_dir_ser, _copy_ser,
                    _dmul_ser, _dot_ser, _maxpy_chunk, _mdot_chunk, _scal_ser, _waxpy_ser,
                    _xpay_ser)
from .eft import _LANES, _dot2_pair_buf, _round_pair, _sqrt_pair, two_sum
from .hessenberg import _rotate
from .ilu import _ilu_solve, _sweeps
from .loopmath import _NATIVE, _cg_start, _nrm2, _ratio
from .spmv import _rows_acc32, _rows_acc64, _rows_acc64_dot
from .sync import PARTNER_ROUNDS, SOLO, STATE, SYNC_SIZE, await_partner, barrier, claim

__all__ = ["split_rows", "run", "team_cg", "team_bicgstab", "team_arnoldi", "SKIPPED"]

#: Flag a helper returns when the caller had already taken the run alone.
SKIPPED = 99
#: Reduction slots of the shared ``red`` array: each slot holds the two threads' partials
#: 64 bytes apart (``red[16 s + 8 h]``, the Dot2 pair's low part at ``+ 1``).
_PQ, _RR, _RZ, _RHO, _R0V, _SS, _TT, _TS, _RARE = range(9)
_NSLOT = 9


def split_rows(indptr) -> np.ndarray:
    """``[0, m, n]``: the row ``m`` where ``nnz + rows`` of the rows before it is half of
    the matrix's (int64)."""
    n = indptr.size - 1
    work = indptr.astype(np.int64) + np.arange(n + 1, dtype=np.int64)
    m = int(np.searchsorted(work, work[-1] / 2.0, side="left"))
    return np.array([0, min(max(m, 0), n), n], dtype=np.int64)


# ------------------------------------------------------------------ meeting points
@njit(**JIT)
def _bar(pair, sync, tid, ep):
    """A barrier when two threads run (the next epoch), nothing in a solo run."""
    if pair:
        ep += 1
        barrier(sync, tid, ep)
    return ep


@njit(**JIT)
def _part(dmode, red, slot, h, x, y, lo, hi, lanes):
    """Half ``h``'s partial of ``x . y`` (rows ``lo:hi``) into its slot (``lanes``: the
    thread's scratch of Dot2's lane pairs, made once per run -- an allocation per dot
    product, as :func:`.eft._dot2_pair_range` makes, costs the compensated team loops up
    to 1.2x where both threads allocate at once)."""
    k = 16 * slot + 8 * h
    if dmode == _NATIVE:
        red[k] = np.float64(_dot_ser(x[lo:hi], y[lo:hi]))
    else:
        p, s = _dot2_pair_buf(x, y, lo, hi, lanes[0], lanes[1])
        red[k] = np.float64(p)
        red[k + 1] = np.float64(s)


@njit(**JIT)
def _pair_sum(red, slot):
    """The two halves' Dot2 pairs merged (TwoSum of the high parts)."""
    k = 16 * slot
    p, q = two_sum(red[k], red[k + 8])
    return p, red[k + 1] + red[k + 9] + q


@njit(**JIT)
def _dot_of(dmode, red, slot):
    if dmode == _NATIVE:
        return red[16 * slot] + red[16 * slot + 8]
    p, s = _pair_sum(red, slot)
    return _round_pair(p, s)


@njit(**JIT)
def _share(pair, sync, tid, ep, red, h0, value):
    """``value`` computed by the caller's thread (``h0 == 0``), handed to both threads:
    write, barrier, read, barrier (the second so a later write cannot overtake a read)."""
    if h0 == 0:
        red[16 * _RARE] = value
    ep = _bar(pair, sync, tid, ep)
    v = red[16 * _RARE]
    ep = _bar(pair, sync, tid, ep)
    return v, ep


@njit(**JIT)
def _norm_of(dmode, red, slot, v, lo, step, pair, sync, tid, ep, h0):
    """``||v||`` from the slot's partials of ``v . v`` (after a barrier), with the rare
    path of :func:`.loopmath._nrm2` -- the norm of ``v`` scaled by a power of two -- on the
    caller's thread where the fast sum is not trustworthy."""
    if dmode == _NATIVE:
        r = math.sqrt(red[16 * slot] + red[16 * slot + 8])
    else:
        p, s = _pair_sum(red, slot)
        r = _sqrt_pair(p, s)
    if r < math.inf and r * r >= lo * v.size:
        return r, ep
    val = _nrm2(dmode, v, lo, step) if h0 == 0 else 0.0
    return _share(pair, sync, tid, ep, red, h0, val)


@njit(**JIT)
def _residual_norm(dmode, red, r, lo, step, pair, sync, tid, ep, h0, hist, k, tol):
    """Iteration ``k``'s ``||r||`` from the :data:`_RR` partials (after a barrier), kept
    in ``hist`` by the caller's thread; ``(rnorm, ep, flag)``, flag 1 to go on, 0
    converged, -14 not finite -- the stopping test of CG and BiCGSTAB alike."""
    rnorm, ep = _norm_of(dmode, red, _RR, r, lo, step, pair, sync, tid, ep, h0)
    if h0 == 0:
        hist[k - 1] = rnorm
    if not math.isfinite(rnorm):
        return rnorm, ep, -14
    if rnorm <= tol:
        return rnorm, ep, 0
    return rnorm, ep, 1


@njit(**JIT)
def _ratio_shared(dmode, x, y, u, w, step, pair, sync, tid, ep, red, h0):
    """:func:`.loopmath._ratio` (``x.y / u.w`` from scaled vectors) on the caller's thread."""
    val = _ratio(dmode, x, y, u, w, step) if h0 == 0 else 0.0
    return _share(pair, sync, tid, ep, red, h0, val)


# ------------------------------------------------------------------ row products
@njit(**JIT)
def _rows(mode, ptr, ind, val, x, y, lo, hi):
    if mode == ACC32:
        _rows_acc32(lo, hi, ptr, ind, val, x, y)
    else:
        _rows_acc64(lo, hi, ptr, ind, val, x, y)


@njit(**JIT)
def _psolve(prog, pmode, P, r, z, t, split, h0, h1, pair, sync, tid, ep):
    """``z = M r`` on the thread's rows (DIAG, ILU2, CSR, CSR2: ``r`` complete for the CSR
    programs) or, for ILU, on all rows by the caller's thread.  On return the thread's own
    rows of ``z`` are written; all of ``z`` when ``prog`` is ILU (a barrier ends it)."""
    ptr1, ind1, val1, ptr2, ind2, val2, d = P
    if prog == P_ILU2:                                     # the halves are the blocks
        for h in range(h0, h1):
            _sweeps(split[h], split[h + 1], ptr1, ind1, val1, ptr2, ind2, val2, d, r, z)
        return ep
    if prog == P_ILU:
        if h0 == 0:
            _ilu_solve(ptr1, ind1, val1, ptr2, ind2, val2, d, r, z)
        return _bar(pair, sync, tid, ep)
    if prog == P_CSR2:
        for h in range(h0, h1):
            _rows(pmode, ptr1, ind1, val1, r, t, split[h], split[h + 1])
        ep = _bar(pair, sync, tid, ep)                     # t complete
    for h in range(h0, h1):
        lo, hi = split[h], split[h + 1]
        if prog == P_DIAG:
            _dmul_ser(d[lo:hi], r[lo:hi], z[lo:hi])
        elif prog == P_CSR:
            _rows(pmode, ptr1, ind1, val1, r, z, lo, hi)
        elif prog == P_CSR2:
            _rows(pmode, ptr2, ind2, val2, t, z, lo, hi)
    return ep


@njit(**JIT)
def _start(sync, tid):
    """``(joined, pair, h0, h1)``: whether this thread takes part, whether two threads
    run, and the halves this thread computes."""
    if not claim(sync, tid):
        return False, False, 0, 0
    pair = True
    if tid == 0:
        pair = await_partner(sync, PARTNER_ROUNDS)
    if pair:
        return True, True, tid, tid + 1
    return True, False, 0, 2


# ------------------------------------------------------------------ CG
@njit(**JIT)
def _cg(tid, sync, red, split, dmode, consts, A, amode, prog, P, pmode, x, r, q, z, p, t,
        maxiter, tol, hist, state):
    """PCG as :func:`.loops._cg` (same arguments, same ``state``), rows split by
    ``split`` between thread ``tid`` and its partner.  Returns ``(iterations, flag)``;
    ``(0, SKIPPED)`` for a helper that came too late."""
    joined, pair, h0, h1 = _start(sync, tid)
    if not joined:
        return 0, SKIPPED
    tiny, lo_, step = consts
    ptr, ind, val = A[1], A[2], A[3]
    lead = h0 == 0                                          # writes hist and state
    lanes = np.empty((2, _LANES), dtype=r.dtype)
    ep = 0
    if state[1] == 0:
        if prog != P_NONE:
            ep = _psolve(prog, pmode, P, r, z, t, split, h0, h1, pair, sync, tid, ep)
        for h in range(h0, h1):
            lo, hi = split[h], split[h + 1]
            _copy_ser(z[lo:hi], p[lo:hi])                   # p = z
            _part(dmode, red, _RR, h, r, r, lo, hi, lanes)
            if prog != P_NONE:
                _part(dmode, red, _RZ, h, r, z, lo, hi, lanes)
        ep = _bar(pair, sync, tid, ep)
        rnorm, ep = _norm_of(dmode, red, _RR, r, lo_, step, pair, sync, tid, ep, h0)
        rz = rnorm * rnorm if prog == P_NONE else _dot_of(dmode, red, _RZ)
        flag = _cg_start(rnorm, rz, tol)
        if flag != 1:
            return 0, flag
        sa = 0.0
    else:
        rz = state[0]
        sa = state[2]
    sm = math.copysign(1.0, rz)
    for k in range(1, maxiter + 1):
        for h in range(h0, h1):                             # q = A p; p . q
            lo, hi = split[h], split[h + 1]
            if amode == ACC64_DOT:
                red[16 * _PQ + 8 * h] = np.float64(
                    _rows_acc64_dot(lo, hi, ptr, ind, val, p, q))
            else:
                _rows(amode, ptr, ind, val, p, q, lo, hi)
                _part(dmode, red, _PQ, h, p, q, lo, hi, lanes)
        ep = _bar(pair, sync, tid, ep)
        if amode == ACC64_DOT or dmode == _NATIVE:
            pq = red[16 * _PQ] + red[16 * _PQ + 8]
        else:
            pq = _dot_of(dmode, red, _PQ)
        if sa == 0.0 and pq != 0.0:
            sa = math.copysign(1.0, pq)
            if lead:
                state[2] = sa
        if tiny <= sa * pq < math.inf:
            alpha = rz / pq
        else:                                               # from scaled vectors
            alpha, ep = _ratio_shared(dmode, r, z, p, q, step, pair, sync, tid, ep, red, h0)
            if not (0 < sm * sa * alpha < math.inf):
                return k - 1, (-14 if math.isnan(alpha) else -12)
        for h in range(h0, h1):                             # x += a p; r -= a q
            lo, hi = split[h], split[h + 1]
            if dmode == _NATIVE:
                red[16 * _RR + 8 * h] = np.float64(_axpy2_nrm2_ser(
                    alpha, p[lo:hi], x[lo:hi], -alpha, q[lo:hi], r[lo:hi]))
            else:
                _axpy2_ser(alpha, p[lo:hi], x[lo:hi], -alpha, q[lo:hi], r[lo:hi])
                _part(dmode, red, _RR, h, r, r, lo, hi, lanes)
        ep = _bar(pair, sync, tid, ep)
        rnorm, ep, flag = _residual_norm(dmode, red, r, lo_, step, pair, sync, tid, ep, h0,
                                         hist, k, tol)
        if flag != 1:
            return k, flag
        if prog == P_NONE:
            rz_new = rnorm * rnorm
        else:
            ep = _psolve(prog, pmode, P, r, z, t, split, h0, h1, pair, sync, tid, ep)
            for h in range(h0, h1):
                _part(dmode, red, _RZ, h, r, z, split[h], split[h + 1], lanes)
            ep = _bar(pair, sync, tid, ep)
            rz_new = _dot_of(dmode, red, _RZ)
        if rz_new == 0.0:                   # underflowed, or M r = 0 (both threads alike)
            return k, 0
        if prog != P_NONE and not (sm * rz_new > 0):
            return k, (-14 if math.isnan(rz_new) else -12)
        beta = rz_new / rz
        rz = rz_new
        if lead:
            state[0] = rz
        for h in range(h0, h1):                             # p = z + beta p
            lo, hi = split[h], split[h + 1]
            _xpay_ser(z[lo:hi], beta, p[lo:hi])
        ep = _bar(pair, sync, tid, ep)                      # all of p before A p
    return maxiter, 1


# ------------------------------------------------------------------ BiCGSTAB
@njit(**JIT)
def _bicgstab(tid, sync, red, split, dmode, consts, A, amode, prog, P, pmode, x, r, r0, p,
              v, s, t, ph, sh, w, maxiter, tol, eps, hist, state):
    """BiCGSTAB as :func:`.loops._bicgstab` (same arguments and ``state``), rows split
    between two threads.  Returns ``(iterations, flag)``."""
    joined, pair, h0, h1 = _start(sync, tid)
    if not joined:
        return 0, SKIPPED
    tiny, lo_, step = consts
    ptr, ind, val = A[1], A[2], A[3]
    lead = h0 == 0
    lanes = np.empty((2, _LANES), dtype=r.dtype)
    ep = 0
    rhotol = eps * eps
    first = state[3] == 0
    if first:
        for h in range(h0, h1):                             # shadow residual r0^ = r
            lo, hi = split[h], split[h + 1]
            _copy_ser(r[lo:hi], r0[lo:hi])
            _part(dmode, red, _RR, h, r, r, lo, hi, lanes)
        ep = _bar(pair, sync, tid, ep)
        r0nrm, ep = _norm_of(dmode, red, _RR, r, lo_, step, pair, sync, tid, ep, h0)
        rnorm = r0nrm
        if rnorm <= tol:
            return 0, 0
        rho_old = alpha = omega = 1.0
    else:
        rho_old, alpha, omega = state[0], state[1], state[2]
        r0nrm, rnorm = state[4], state[5]
    for k in range(1, maxiter + 1):
        for h in range(h0, h1):                             # rho = r0^ . r
            _part(dmode, red, _RHO, h, r0, r, split[h], split[h + 1], lanes)
        ep = _bar(pair, sync, tid, ep)
        rho = _dot_of(dmode, red, _RHO)
        if not math.isfinite(rho):
            return k - 1, -14
        if abs(rho) <= rhotol * r0nrm * rnorm:
            return k - 1, -10
        beta = (rho / rho_old) * (alpha / omega)
        for h in range(h0, h1):
            lo, hi = split[h], split[h + 1]
            if k == 1 and first:
                _copy_ser(r[lo:hi], p[lo:hi])               # p = r
            else:                                           # p = r + beta (p - omega v)
                _bicg_dir_ser(r[lo:hi], beta, omega, v[lo:hi], p[lo:hi])
        if prog != P_NONE:
            if prog != P_DIAG:
                ep = _bar(pair, sync, tid, ep)              # all of p before M p
            ep = _psolve(prog, pmode, P, p, ph, w, split, h0, h1, pair, sync, tid, ep)
        ep = _bar(pair, sync, tid, ep)                      # all of p^ before A p^
        for h in range(h0, h1):                             # v = A p^; r0^ . v
            lo, hi = split[h], split[h + 1]
            _rows(amode, ptr, ind, val, ph, v, lo, hi)
            _part(dmode, red, _R0V, h, r0, v, lo, hi, lanes)
        ep = _bar(pair, sync, tid, ep)
        r0v = _dot_of(dmode, red, _R0V)
        if r0v == 0.0:
            return k - 1, -11
        if tiny <= abs(r0v) < math.inf:
            alpha = rho / r0v
        else:
            alpha, ep = _ratio_shared(dmode, r0, r, r0, v, step, pair, sync, tid, ep, red,
                                      h0)
            if not math.isfinite(alpha):
                return k - 1, -14
        for h in range(h0, h1):                             # s = r - alpha v
            lo, hi = split[h], split[h + 1]
            _waxpy_ser(-alpha, v[lo:hi], r[lo:hi], s[lo:hi])
            _part(dmode, red, _SS, h, s, s, lo, hi, lanes)
        ep = _bar(pair, sync, tid, ep)
        snorm, ep = _norm_of(dmode, red, _SS, s, lo_, step, pair, sync, tid, ep, h0)
        if snorm <= tol:
            for h in range(h0, h1):
                lo, hi = split[h], split[h + 1]
                _axpy_ser(alpha, ph[lo:hi], x[lo:hi])       # x += alpha p^
                _copy_ser(s[lo:hi], r[lo:hi])               # r = s
            if lead:
                hist[k - 1] = snorm
            return k, 0
        if prog != P_NONE:                                  # s^ = M s (s complete)
            ep = _psolve(prog, pmode, P, s, sh, w, split, h0, h1, pair, sync, tid, ep)
            ep = _bar(pair, sync, tid, ep)                  # all of s^ before A s^
        for h in range(h0, h1):                             # t = A s^
            lo, hi = split[h], split[h + 1]
            _rows(amode, ptr, ind, val, sh, t, lo, hi)
            _part(dmode, red, _TT, h, t, t, lo, hi, lanes)
            _part(dmode, red, _TS, h, t, s, lo, hi, lanes)
        ep = _bar(pair, sync, tid, ep)
        tt = _dot_of(dmode, red, _TT)
        ts = _dot_of(dmode, red, _TS)
        if tiny <= tt < math.inf and abs(ts) < math.inf:
            omega = ts / tt
        else:
            omega, ep = _ratio_shared(dmode, t, s, t, t, step, pair, sync, tid, ep, red, h0)
            if not math.isfinite(omega):
                return k - 1, (-11 if tt == 0.0 else -14)
        if omega == 0.0:
            return k - 1, -11
        for h in range(h0, h1):
            lo, hi = split[h], split[h + 1]
            _axpy2_ser(alpha, ph[lo:hi], x[lo:hi], omega, sh[lo:hi], x[lo:hi])
            _waxpy_ser(-omega, t[lo:hi], s[lo:hi], r[lo:hi])  # r = s - omega t
            _part(dmode, red, _RR, h, r, r, lo, hi, lanes)
        ep = _bar(pair, sync, tid, ep)
        rnorm, ep, flag = _residual_norm(dmode, red, r, lo_, step, pair, sync, tid, ep, h0,
                                         hist, k, tol)
        if flag != 1:
            return k, flag
        rho_old = rho
        if lead:
            state[0], state[1], state[2], state[4], state[5] = (rho_old, alpha, omega, r0nrm,
                                                                 rnorm)
    return maxiter, 1


# ------------------------------------------------------------------ GMRES
@njit(**JIT)
def _mdot_part(dmode, mred, h, V, k, w, lo, hi, lanes):
    """Half ``h``'s partials of ``V[i] . w`` (rows ``lo:hi``), ``i < k``, into ``mred[h]``."""
    if dmode == _NATIVE:
        _mdot_chunk(V, k, w, lo, hi, mred[h, 0])
        return
    for i in range(k):
        p, s = _dot2_pair_buf(V[i], w, lo, hi, lanes[0], lanes[1])
        mred[h, 0, i] = np.float64(p)
        mred[h, 1, i] = np.float64(s)


@njit(**JIT)
def _mdot_sum(dmode, mred, k, out):
    """The two halves' partials added, as :func:`_dot_of` does (both threads alike)."""
    for i in range(k):
        if dmode == _NATIVE:
            out[i] = mred[0, 0, i] + mred[1, 0, i]
        else:
            p, q = two_sum(mred[0, 0, i], mred[1, 0, i])
            out[i] = _round_pair(p, mred[0, 1, i] + mred[1, 1, i] + q)


@njit(**JIT)
def _arnoldi(tid, sync, red, split, mred, dmode, consts, A, amode, prog, P, pmode, side, V,
             Z, u, t, H0, cs0, sn0, g0, hcol0, H1, cs1, sn1, g1, hcol1, target, floor,
             max_steps, ratio, eps, reorth, hist):
    """The inner steps of one GMRES cycle as :func:`.loops._arnoldi` (same arguments),
    rows split between two threads.  The small problem (``H``, the rotations, ``g``) is
    computed by both threads alike, each in its own arrays (the caller's: ``H0``...; the
    helper's copies: ``H1``...), so both take every branch alike.  Returns ``(steps,
    happy, est, wnorm_in, flag)``; a late helper's flag is :data:`SKIPPED`."""
    joined, pair, h0, h1 = _start(sync, tid)
    if not joined:
        return 0, False, 0.0, 0.0, SKIPPED
    if tid == 1:
        H, cs, sn, g, hcol = H1, cs1, sn1, g1, hcol1
    else:
        H, cs, sn, g, hcol = H0, cs0, sn0, g0, hcol0
    tiny, lo_, step = consts
    ptr, ind, val = A[1], A[2], A[3]
    lead = h0 == 0
    lanes = np.empty((2, _LANES), dtype=V.dtype)
    ep = 0
    m = H.shape[1]
    est = 0.0
    wnorm_in = 0.0
    happy = False
    steps = 0
    for j in range(m):
        w = V[j + 1]
        if side == 1:                                       # w = M A v_j
            for h in range(h0, h1):
                _rows(amode, ptr, ind, val, V[j], u, split[h], split[h + 1])
            if prog != P_DIAG:
                ep = _bar(pair, sync, tid, ep)              # all of u before M u
            ep = _psolve(prog, pmode, P, u, w, t, split, h0, h1, pair, sync, tid, ep)
        elif side == 2:                                     # z_j = M v_j; w = A z_j
            z = Z[j] if Z.shape[0] > 1 else Z[0]
            ep = _psolve(prog, pmode, P, V[j], z, t, split, h0, h1, pair, sync, tid, ep)
            ep = _bar(pair, sync, tid, ep)                  # all of z before A z
            for h in range(h0, h1):
                _rows(amode, ptr, ind, val, z, w, split[h], split[h + 1])
        else:
            for h in range(h0, h1):                         # w = A v_j
                _rows(amode, ptr, ind, val, V[j], w, split[h], split[h + 1])
        for h in range(h0, h1):                             # h_i = v_i . w; ||w||
            lo, hi = split[h], split[h + 1]
            _mdot_part(dmode, mred, h, V, j + 1, w, lo, hi, lanes)
            _part(dmode, red, _SS, h, w, w, lo, hi, lanes)
        ep = _bar(pair, sync, tid, ep)
        _mdot_sum(dmode, mred, j + 1, hcol)
        wnorm, ep = _norm_of(dmode, red, _SS, w, lo_, step, pair, sync, tid, ep, h0)
        wnorm0 = wnorm_in = wnorm
        for ps in range(2):                                 # CGS2
            if ps:
                for h in range(h0, h1):
                    _mdot_part(dmode, mred, h, V, j + 1, w, split[h], split[h + 1], lanes)
                ep = _bar(pair, sync, tid, ep)
                _mdot_sum(dmode, mred, j + 1, hcol)
            for h in range(h0, h1):                         # w -= sum_i h_i v_i
                lo, hi = split[h], split[h + 1]
                _maxpy_chunk(V, j + 1, hcol, w, lo, hi)
                _part(dmode, red, _RR, h, w, w, lo, hi, lanes)
            ep = _bar(pair, sync, tid, ep)
            wnorm, ep = _norm_of(dmode, red, _RR, w, lo_, step, pair, sync, tid, ep, h0)
            for i in range(j + 1):
                H[i, j] += hcol[i]
            if wnorm > reorth * wnorm0:
                break
            wnorm0 = wnorm
        H[j + 1, j] = wnorm
        if not math.isfinite(wnorm):
            return steps, happy, est, wnorm_in, -14
        est = _rotate(H, cs, sn, g, j)                      # Givens: H[:, j] -> R
        if lead:
            hist[steps] = est * ratio
        steps += 1
        if wnorm <= eps * wnorm_in or wnorm == 0.0:
            happy = True
            break
        for h in range(h0, h1):                             # v_{j+1} = w / ||w||
            lo, hi = split[h], split[h + 1]
            _scal_ser(1.0 / wnorm, w[lo:hi])
        ep = _bar(pair, sync, tid, ep)                      # all of v_{j+1} before A v
        if est <= target or est <= floor or steps == max_steps:
            break
    return steps, happy, est, wnorm_in, 0


def team_arnoldi(split, dmode, consts, A, amode, prog, P, pmode, side, V, Z, u, t, H, cs, sn,
                 g, hcol, target, floor, max_steps, ratio, eps, reorth, hist):
    """One GMRES cycle's inner steps on two threads; as :func:`.loops._arnoldi_call`.
    Returns ``(steps, happy, est, wnorm_in, flag)``."""
    mred = np.zeros((2, 2, H.shape[0]))
    s, hp, e, wi, f = run(_arnoldi, split, mred, dmode, consts, A, amode, prog, P, pmode,
                          side, V, Z, u, t, H, cs, sn, g, hcol, H.copy(), cs.copy(),
                          sn.copy(), g.copy(), hcol.copy(), target, floor, max_steps, ratio,
                          eps, reorth, hist)
    return int(s), bool(hp), float(e), float(wi), int(f)


# ------------------------------------------------------------------ the two threads
_local = threading.local()


def _helper():
    """The calling thread's helper (one worker thread, made at its first team run), or
    ``None`` where none can be had (interpreter shutdown).  A thread of its own per
    caller, so two callers' runs never wait for one helper; made again in a forked child
    (whose copy of the parent's pool has no thread)."""
    pool = getattr(_local, "pool", None)
    if pool is None or _local.pid != os.getpid():
        try:
            # (imported here: importing concurrent.futures.thread registers an atexit hook,
            # refused once shutdown began -- a first solve from a thread outliving the
            # main one, or from an atexit handler, failed at the kernels' import)
            from concurrent.futures import ThreadPoolExecutor

            pool = ThreadPoolExecutor(1, thread_name_prefix="mpsolve-team")
        except RuntimeError:                               # interpreter shutting down
            return None
        _local.pool, _local.pid = pool, os.getpid()
    return pool


def run(loop, *args):
    """``loop(tid, sync, red, *args)`` on the calling thread (``tid`` 0) and its helper
    (``tid`` 1); the caller's result.  The helper's run is awaited before returning, so
    the vectors are final.  Without a helper the caller runs alone (the same bits)."""
    sync = np.zeros(SYNC_SIZE, np.int64)
    red = np.zeros(16 * _NSLOT)
    pool = _helper()
    fut = None
    if pool is not None:
        try:
            fut = pool.submit(loop, 1, sync, red, *args)
        except RuntimeError:                               # shut down: no new work
            fut = None
    if fut is None:
        sync[STATE] = SOLO
    try:
        got = loop(0, sync, red, *args)
    finally:
        if fut is not None:
            fut.result()
    return got


def team_cg(split, dmode, consts, A, amode, prog, P, pmode, x, r, q, z, p, t, maxiter, tol,
            hist, state):
    """At most ``min(maxiter, hist.size)`` PCG iterations on two threads; as
    :func:`.loops.cg_loop_native`'s call.  Returns ``(iterations, flag)``."""
    c, f = run(_cg, split, dmode, consts, A, amode, prog, P, pmode, x, r, q, z, p, t,
               min(maxiter, hist.size), tol, hist, state)
    return int(c), int(f)


def team_bicgstab(split, dmode, consts, A, amode, prog, P, pmode, x, r, r0, p, v, s, t, ph,
                  sh, w, maxiter, tol, eps, hist, state):
    """At most ``min(maxiter, hist.size)`` BiCGSTAB iterations on two threads; as
    :func:`.loops.bicgstab_loop_native`'s call.  Returns ``(iterations, flag)``."""
    c, f = run(_bicgstab, split, dmode, consts, A, amode, prog, P, pmode, x, r, r0, p, v, s,
               t, ph, sh, w, min(maxiter, hist.size), tol, eps, hist, state)
    return int(c), int(f)
