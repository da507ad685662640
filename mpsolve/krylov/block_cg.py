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

Memory traffic per iteration, ``k`` columns, with M: SpMM (``A`` once + ``2 k n`` vector
values; ``p_c . q_c`` formed in the same sweep where the device has ``spmm_dot``) + M's
sweep + ``k`` times the single body's ``12 n`` vector values.
"""
from __future__ import annotations

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
    """
    ops, mm, psolve = bsys.ops, bsys.matvec, bsys.psolve
    mm_dot = bsys.matvec_dot
    col_dot, axpy2_nrm2, xpay = ops.col_dot, ops.col_axpy2_nrm2, ops.col_xpay
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
    mask = deflation == "mask"
    live = np.ones(k, bool)
    z = r if psolve is None else np.empty_like(r)
    if psolve is not None:
        psolve(r, z)                          # Z = M R
    p = z.copy()                              # P = Z
    q = np.empty_like(r)
    rn = np.empty(k)
    col_dot(r, r, rn)
    np.sqrt(rn, out=rn)                       # ||r_c||
    rz = rn * rn if psolve is None else np.empty(k)
    if psolve is not None:
        col_dot(r, z, rz)                     # r_c . z_c
    pq = np.empty(k)
    it = 0

    def leave(codes):
        """Columns with ``codes[c] != 2`` leave with that flag (2: stay)."""
        nonlocal x, r, z, p, q, rz, rn, tol, limits, bn, cols, live, pq
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
        z = r if psolve is None else np.ascontiguousarray(z[:, keep])
        p, q = np.ascontiguousarray(p[:, keep]), np.empty_like(x)
        rz, rn, tol, limits, bn = rz[keep], rn[keep], tol[keep], limits[keep], bn[keep]
        cols, live, pq = cols[keep], np.ones(keep.size, bool), np.empty(keep.size)

    codes = np.full(k, 2)
    codes[rn <= tol] = 0
    codes[(codes == 2) & ~(np.isfinite(rz))] = -14
    codes[(codes == 2) & ~(rz > 0)] = -12
    codes[(codes == 2) & (limits <= 0)] = 1
    leave(codes)
    while live.any():
        it += 1
        if mm_dot is not None:
            mm_dot(p, q, pq)                  # Q = A P and p_c . q_c, one sweep over A
        else:
            mm(p, q)                          # Q = A P, one sweep over A
            col_dot(p, q, pq)                 # p_c . q_c
        ok = live & (pq >= tiny) & np.isfinite(pq)
        alpha = np.where(ok, rz / np.where(ok, pq, 1.0), 0.0)
        codes = np.full(rz.size, 2)
        codes[live & ~ok] = np.where(np.isfinite(pq[live & ~ok]), -12, -14)
        axpy2_nrm2(alpha, p, x, -alpha, q, r, rn)   # x_c += a_c p_c; r_c -= a_c q_c; ||r_c||
        its[cols[live & ok]] = it
        act = live & ok
        if act.any():
            hist.append(float(np.max(rn[act] / np.where(bn[act] > 0, bn[act], 1.0))))
        codes[act & ~np.isfinite(rn)] = -14
        codes[act & (rn <= tol)] = 0
        codes[act & (codes == 2) & (it >= limits)] = 1
        leave(codes)
        if not live.any():
            break
        if psolve is None:
            rz_new = rn * rn                  # r.z = r.r
        else:
            psolve(r, z)                      # Z = M R
            rz_new = np.empty(rn.size)
            col_dot(r, z, rz_new)             # r_c . z_c
            codes = np.full(rn.size, 2)
            bad = live & ~(rz_new > 0)
            codes[bad] = np.where(np.isnan(rz_new[bad]), -14, -12)
            leave(codes)
            if not live.any():
                break
            if rz_new.size != rz.size:        # compacted: the live columns' values
                rz_new = rz_new[np.flatnonzero(codes == 2)] if not mask else rz_new
        beta = np.where(live, rz_new / np.where(live, rz, 1.0), 0.0)
        rz = np.where(live, rz_new, rz)
        xpay(z, beta, p)                      # p_c = z_c + beta_c p_c
    if x is not X:
        X[:, cols] = x
        R[:, cols] = r
    return its, its, flags
