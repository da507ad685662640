"""Block CG -- ``k`` independent (preconditioned) CG iterations run together.

The method is Hestenes & Stiefel's CG (doi:10.6028/jres.049.044; preconditioned as in
Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed., Algorithm 9.1) applied to
each of ``k`` right-hand sides, *not* O'Leary's block CG (whose shared Krylov space
couples the columns): column ``c`` follows the same recurrence, with its own ``alpha_c``
and ``beta_c``, as :func:`mpsolve.krylov.cg.cg_body` does on it alone.  What the columns
share is the memory traffic: ``Q = A P`` is one SpMM sweep over ``A`` (its FP32 copy
under ``mixed``), ``Z = M R`` one sweep over the preconditioner's stored operators, and
each vector update one pass over the ``(n, k)`` blocks (:mod:`mpsolve.kernels.cpu.spmm`).

Per-column convergence and *deflation*: a column whose recursive residual meets its
tolerance (or that breaks down, or reaches its iteration limit) leaves the active block.
``deflation="compact"`` (the default) copies the remaining columns into narrower blocks,
so later sweeps do ``k' < k`` columns of work (at most ``k`` such copies a call);
``deflation="mask"`` keeps the width and freezes the column (``alpha_c = 0``; its
``x_c`` and ``r_c`` no longer change), paying full-width sweeps to the end
(``bench/bench_multi_rhs.py`` measures both).

Deviations from the single-vector body: no scaled-vector rescue of an overflowed or
subnormal ``p.Ap`` (the column leaves with code -12 or -14; the driver hands a column
whose FP32 parts produced a non-finite value to the single-vector path, which escalates),
no callback (the driver runs a solve with a callback column by column).

Memory traffic per iteration, ``k`` columns: the SpMM (``A`` once + ``2 k n`` vector values;
``p_c . q_c`` formed in the same sweep where the device has ``spmm_dot``) + ``9 k n`` with
point Jacobi (``bsys.pdiag``) or without M: ``col_cg_step`` reads ``p, x, q, r`` and writes
``x, r`` (``z = d r`` formed in the pass for ``r . z``, never stored), ``col_dxpay`` reads
``r, p`` and writes ``p`` (``d`` read twice, ``n`` values).  Another M: its sweep (``r`` in,
``z`` out) + ``11 k n`` (``r . z`` a pass of its own, ``p = z + beta p``).  The single body
with Jacobi moves ``13 n`` besides its SpMV (its ``dmul`` stores ``z``).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["block_cg_body"]


def block_cg_body(bsys, X, R, B, limits, tol, hist, deflation="compact"):
    """At most ``limits[c]`` PCG iterations on column ``c`` of ``X`` (residual ``R``).

    ``X``, ``R`` and ``B`` are ``(n, k)`` C-contiguous blocks of the working dtype; ``X`` and
    ``R`` are updated in place (``B`` is not used: CG needs no residual recomputation).
    ``tol``: per-column absolute tolerances.  ``hist`` gets, per iteration, the largest
    recursive residual of the active columns relative to its tolerance's ``||b||``
    (``bsys.bnrm``).  Returns ``(its, its, flags)``, per-column arrays: flag 0 the
    recursive residual met ``tol``, 1 the limit was reached, -12 curvature breakdown,
    -14 non-finite values.

    The vector work of an iteration is two passes over the blocks besides the SpMM
    (``ops.col_cg_step``: ``x += a p; r -= a q``, ``||r||`` and ``r . z``; ``ops.col_dxpay``:
    ``p = z + beta p``) where ``M`` is a diagonal (``bsys.pdiag``: ``z = d r`` is formed
    where it is used, never stored) or absent; another ``M`` adds its sweep and a pass for
    ``r . z``.
    """
    ops, mm, psolve = bsys.ops, bsys.matvec, bsys.psolve
    mm_dot = bsys.matvec_dot
    col_dot, step, xpay = ops.col_dot, ops.col_cg_step, ops.col_xpay
    n, k = X.shape
    wdt = X.dtype
    tiny = float(np.finfo(wdt).tiny)
    its = np.zeros(k, np.int64)
    flags = np.ones(k, np.int64)
    cols = np.arange(k)                       # the caller's column of each working column
    x, r = X, R                               # working blocks: the caller's until compacted
    tol = np.asarray(tol, np.float64).copy()
    limits = np.asarray(limits, np.int64).copy()
    bn = np.asarray(bsys.bnrm, np.float64).copy()
    bn[bn <= 0] = 1.0                         # hist: relative to ||b_c|| (1 for b_c = 0)
    mask = deflation == "mask"
    live = np.ones(k, bool)
    # z = M r: a diagonal M (or none) fused into the two passes (dz its diagonal, empty
    # without M); another M applied by its own sweep into the block z
    dz = getattr(bsys, "pdiag", None)
    fused = psolve is None or dz is not None
    if not fused or psolve is None:
        dz = np.zeros(0)
    z = None if fused else np.empty_like(r)
    p = np.zeros_like(r)                      # zeros: 0 p below adds nothing
    if fused:
        ops.col_dxpay(dz, r, np.zeros(k), p)  # P = Z (= d R, or R)
    else:
        psolve(r, z)                          # Z = M R
        p[:] = z                              # P = Z
    q = np.zeros_like(r)
    rn = np.empty(k)
    rz = np.empty(k)
    zero = np.zeros(k)
    step(zero, p, x, q, r, dz, rn, rz)        # ||r_c|| and r_c . z_c (x, r unchanged)
    if psolve is None:
        rz = rn * rn                          # r.z = r.r as ||r||^2 (the single body's)
    elif not fused:
        col_dot(r, z, rz)                     # r_c . z_c
    pq = np.empty(k)
    rzn = np.empty(k)
    it = 0

    def leave(codes):
        """Columns with ``codes[c] != 2`` leave with that flag (2: stay)."""
        nonlocal x, r, z, p, q, rz, rzn, rn, tol, limits, bn, cols, live, pq, zero, sm, sa
        out = live & (codes != 2)
        if not out.any():
            return
        flags[cols[out]] = codes[out]
        live = live & ~out
        if mask:
            return
        keep = np.flatnonzero(live)
        if x is not X:                        # write the leaving columns back
            X[:, cols[out]] = x[:, out]
            R[:, cols[out]] = r[:, out]
        x, r = np.ascontiguousarray(x[:, keep]), np.ascontiguousarray(r[:, keep])
        z = None if fused else np.ascontiguousarray(z[:, keep])
        p, q = np.ascontiguousarray(p[:, keep]), np.empty_like(x)
        rz, rzn, rn, tol, limits, bn = (rz[keep], rzn[keep], rn[keep], tol[keep],
                                        limits[keep], bn[keep])
        sm, sa = sm[keep], sa[keep]
        cols, live, pq, zero = cols[keep], np.ones(keep.size, bool), np.empty(keep.size), \
            np.zeros(keep.size)

    codes = np.full(k, 2)
    codes[rn <= tol] = 0
    codes[(codes == 2) & ~(np.isfinite(rz))] = -14
    codes[(codes == 2) & ~(rz != 0)] = -12
    # each column keeps the signs of its r.z and (from its first step) p.Ap, as the single
    # body: A and M may be negative definite (SciPy's CG takes them)
    sm = np.where(rz < 0, -1.0, 1.0)
    sa = np.zeros(k)
    codes[(codes == 2) & (limits <= 0)] = 1
    leave(codes)
    while live.any():
        it += 1
        if mm_dot is not None:
            mm_dot(p, q, pq)                  # Q = A P and p_c . q_c, one sweep over A
        else:
            mm(p, q)                          # Q = A P, one sweep over A
            col_dot(p, q, pq)                 # p_c . q_c
        if it == 1:
            sa = np.sign(pq)                  # (0 for 0, NaN for NaN: those fail below)
        spq = sa * pq
        ok = (spq >= tiny) & (spq < math.inf)  # p.q normal, of its sign, finite (not NaN)
        if not mask and ok.all():             # the common case: every column steps
            alpha = rz / pq
            act = live
        else:
            ok &= live
            alpha = np.where(ok, rz / np.where(ok, pq, 1.0), 0.0)
            act = ok
            codes = np.full(rz.size, 2)
            bad = live & ~ok
            codes[bad] = np.where(np.isnan(pq[bad]) | np.isinf(pq[bad]), -14, -12)
        # x_c += a_c p_c; r_c -= a_c q_c; ||r_c||; r_c . z_c (z = d r; rzn unused otherwise)
        step(alpha, p, x, q, r, dz, rn, rzn)
        its[cols[act]] = it
        if act is live:                       # (only without mask: see above)
            hist.append(float(np.max(rn / bn)) if rn.size else 0.0)
            fin = np.isfinite(rn)
            conv = rn <= tol
            if not (fin.all() and not conv.any() and it < limits.min()):
                codes = np.full(rn.size, 2)
                codes[~fin] = -14
                codes[conv] = 0
                codes[(codes == 2) & (it >= limits)] = 1
                leave(codes)
        else:
            if act.any():
                hist.append(float(np.max(rn[act] / bn[act])))
            codes[act & ~np.isfinite(rn)] = -14
            codes[act & (rn <= tol)] = 0
            codes[act & (codes == 2) & (it >= limits)] = 1
            leave(codes)
        if not live.any():
            break
        if psolve is None:
            rz_new = rn * rn                  # r.z = r.r
        else:
            if not fused:
                psolve(r, z)                  # Z = M R
                col_dot(r, z, rzn)            # r_c . z_c
            if not (sm[live] * rzn[live] > 0).all():
                codes = np.full(rn.size, 2)
                bad = live & ~(sm * rzn > 0)
                codes[bad] = np.where(np.isnan(rzn[bad]), -14, -12)
                leave(codes)
                if not live.any():
                    break
            rz_new = rzn
        if mask:
            beta = np.where(live, rz_new / np.where(live, rz, 1.0), 0.0)
            rz = np.where(live, rz_new, rz)
        else:
            beta = rz_new / rz
            rz = rz_new.copy()
        if fused:
            ops.col_dxpay(dz, r, beta, p)     # p_c = d r_c + beta_c p_c (z never stored)
        else:
            xpay(z, beta, p)                  # p_c = z_c + beta_c p_c
    if x is not X:
        X[:, cols] = x
        R[:, cols] = r
    return its, its, flags
