"""Block GMRES(m) -- ``k`` independent restarted GMRES iterations run together.

Saad & Schultz's GMRES (doi:10.1137/0907058), left, right (flexible, Saad 1993,
doi:10.1137/0914028) or not preconditioned, applied to each of ``k`` right-hand sides with
its own Krylov basis, Hessenberg matrix and rotations -- the recurrence of
:func:`mpsolve.krylov.gmres.gmres_body` column by column, not a block-Krylov method with a
shared space.  The columns share the sweeps: ``W = A V_j`` is one SpMM over ``A``, ``M``
one sweep over its stored operators, and the Gram--Schmidt passes (CGS with a second pass
when any column lost more than ``eta``, as the single body) read the ``k`` bases, stored
as ``V`` of shape ``(m + 1, n, k)``, once per pass (:mod:`mpsolve.kernels.cpu.spmm`); the
norms of the new vectors before and after the projection come from the same passes
(``col_mdot_nrm2``, ``col_maxpy_nrm2``), as the single body's ``mdot_nrm2`` /
``maxpy_nrm2``.  The second CGS pass projects only the columns that need it (the others'
coefficients are zeroed: their ``w_c`` is left as it is), as the single body decides per
vector.

Per-column convergence: inside a cycle, a column whose estimate meets its target (or
that has a happy breakdown) is *frozen*: its later Arnoldi steps are masked (its new
basis vector scaled by 0) and its update uses the steps up to its own.  With
``deflation="compact"`` (the default) frozen columns leave the block inside the cycle
where the steps left save more than the copy costs: their update, true residual and
restart rules come at once, and the other columns' bases are copied into a narrower
block (at most one copy per leaving column; the columns that converge first no longer
ride along at full width to the cycle's end); between cycles the columns that are done
leave too.  ``"mask"``: they stay frozen at full width.

Deviations from the single body: no callback, no compressed basis, no ``max_inner``
(the driver runs those column by column).

Memory: ``k`` bases, ``(m + 1) k n`` values (``(2 m + 1) k n`` with right
preconditioning): ``k`` times one solve's.
"""
from __future__ import annotations

import math

import numpy as np

from .._system import STAGNATION
from .gmres import FLOOR_CYCLES, FLOOR_GAIN, STALL_CYCLES, STALL_GAIN

__all__ = ["block_gmres_body"]


def block_gmres_body(bsys, X, R, B, limits, tol, hist, restart=20, side="left",
                     deflation="compact", callback_type=None, stall=True):
    """At most ``limits[c]`` restart cycles on column ``c``.

    ``X``, ``R``, ``B``: ``(n, k)`` C-contiguous blocks (working dtype); ``X`` and ``R``
    updated in place (``R = B - A X`` after each cycle).  Returns ``(cycles, its, flags)``
    per column, flags as :func:`~mpsolve.krylov.gmres.gmres_body`'s: 0 converged (or the
    estimate met its target and the driver judges by the true residual), 1 out of cycles,
    2 a happy breakdown with a regular ``R`` that no longer lowers a residual at the
    working precision's rounding (its floor), -13 one with a singular ``R`` or a residual
    far above that rounding (A or M singular), -14 non-finite values.  A column whose
    true residual set no new low (by ``STALL_GAIN``) for ``STALL_CYCLES`` cycles (in FP32:
    ``FLOOR_GAIN``, ``FLOOR_CYCLES``) stops with flag 2, as in the single-vector body
    (``stall=False``: FP64 runs its cycles out).
    """
    ops, mm, psolve, residual = bsys.ops, bsys.matvec, bsys.psolve, bsys.residual
    col_dot, col_scal, col_mdot = ops.col_dot, ops.col_scal, ops.col_mdot
    col_lincomb = ops.col_lincomb
    mdot_nrm2, maxpy_nrm2 = ops.col_mdot_nrm2, ops.col_maxpy_nrm2
    givens, back_substitute = ops.givens, ops.back_substitute
    n, k = X.shape
    wdt = X.dtype
    m = max(1, min(restart, n))
    left = psolve is not None and side == "left"
    right = psolve is not None and not left
    eps = float(np.finfo(wdt).eps)
    reorth = max(1e-3, eps ** 0.25)
    cycles = np.zeros(k, np.int64)
    its = np.zeros(k, np.int64)
    flags = np.ones(k, np.int64)
    factor = np.ones(k)
    last_happy = np.full(k, math.inf)
    last_claim = np.full(k, math.inf)      # left: true residual after the last met target
    active = np.arange(k)                      # caller's columns still iterating
    rn = np.empty(k)
    col_dot(R, R, rn)
    np.sqrt(rn, out=rn)
    done = rn <= np.asarray(tol)
    flags[done] = 0
    mask = deflation == "mask"
    bnrm = np.asarray(bsys.bnrm, np.float64)
    # the single-vector body's stagnation watch, per column (a tolerance no cycle can
    # reach, rtol=0: every cycle left the residual where it was until limits ran out --
    # 45000 cycles on a 225-unknown problem)
    watch_floor = eps > 2.0**-30
    least, gain = (FLOOR_CYCLES, FLOOR_GAIN) if watch_floor else (STALL_CYCLES, STALL_GAIN)
    watch = watch_floor or stall
    best = np.full(k, math.inf)
    stalled = np.zeros(k, np.int64)
    space = {}                                   # the bases of the current block width

    def bases(width):
        """``(V, Z, U)`` for ``width`` columns, allocated once per width; a narrower block
        drops the wider one's (compact deflation only narrows)."""
        bufs = space.get(width)
        if bufs is None:
            space.clear()
            bufs = space[width] = (np.empty((m + 1, n, width), wdt),
                                   np.empty((m, n, width), wdt) if right else None,
                                   np.empty((n, width), wdt))
        return bufs
    while True:
        live = np.flatnonzero(~done)
        if live.size == 0:
            break
        # the block of this cycle: every column (mask) or the live ones (compact)
        blk = np.arange(k) if mask else live
        full = blk.size == k
        x = X if full else np.ascontiguousarray(X[:, blk])
        r = R if full else np.ascontiguousarray(R[:, blk])
        b = B if full else np.ascontiguousarray(B[:, blk])
        ka = blk.size
        on = ~done[blk]                          # the columns that iterate in this cycle
        tl = np.asarray(tol)[blk]
        V, Z, U = bases(ka)
        beta = rn[blk].copy()
        ratio = np.ones(ka)
        if left:
            psolve(r, V[0])                      # v0 = M r (normalised below)
            col_dot(V[0], V[0], beta)
            np.sqrt(beta, out=beta)
            bad = on & ~(np.isfinite(beta) & (beta > 0))
            for c in np.flatnonzero(bad):
                flags[blk[c]] = -14 if not math.isfinite(beta[c]) else -13
                done[blk[c]] = True
            on &= ~bad
            ratio = np.where(on, rn[blk] / np.where(on, beta, 1.0), 1.0)
        else:
            V[0] = r
        col_scal(np.where(on, 1.0 / np.where(on, beta, 1.0), 0.0), V[0], V[0])
        target = tl / ratio * factor[blk]
        H = np.zeros((ka, m + 1, m))
        cs = np.zeros((ka, m))
        sn = np.zeros((ka, m))
        g = np.zeros((ka, m + 1))
        g[:, 0] = beta
        hcol = np.zeros((m + 1, ka))
        wn = np.empty(ka)
        wn0 = np.empty(ka)
        est = beta.copy()
        jend = np.zeros(ka, np.int64)
        happy = np.zeros(ka, bool)
        wnorm_in = np.zeros(ka)
        frozen = ~on

        def finish(sel):
            """The end of this cycle for the block's columns ``sel``: ``x_c += V_c y_c``
            (``y_c = R_c^-1 g_c``), ``r_c = b_c - A x_c``, and the restart rules."""
            nonlocal x
            Y = np.zeros((m, ka))
            singular = np.zeros(ka, bool)
            for c in np.flatnonzero(sel & (jend > 0)):
                kc = int(jend[c])
                if happy[c] and abs(H[c, kc - 1, kc - 1]) <= eps * wnorm_in[c]:
                    kc -= 1
                    singular[c] = True
                back_substitute(H[c].copy(), g[c].copy(), kc, Y[:, c])   # y_c = R_c^-1 g_c
            jmax = int(jend[sel].max()) if sel.any() else 0
            col_lincomb(Z if right else V, Y, jmax, U)   # U = Z y or V y (0: other columns)
            x += U                               # x += U (other columns: + 0)
            idx = np.flatnonzero(sel)
            if idx.size == ka:
                xs, bs, rs = x, b, r
            else:
                xs, bs = np.ascontiguousarray(x[:, idx]), np.ascontiguousarray(b[:, idx])
                rs = np.empty_like(xs)
            residual(xs, bs, rs)                 # R = B - A X, one sweep
            rnew = np.empty(idx.size)
            col_dot(rs, rs, rnew)
            np.sqrt(rnew, out=rnew)
            if rs is not r:
                r[:, idx] = rs
            if x is not X:
                X[:, blk[idx]] = xs
                R[:, blk[idx]] = rs
            for i, c in enumerate(idx):
                col = blk[c]
                if done[col]:
                    continue
                cycles[col] += 1
                rn[col] = rnew[i]
                if watch and not happy[c]:       # (cycles since the last new low)
                    if rnew[i] < gain * best[col]:
                        best[col], stalled[col] = rnew[i], 0
                    else:
                        stalled[col] += 1
                if not math.isfinite(rnew[i]):
                    flags[col], done[col] = -14, True
                elif rnew[i] <= tl[c]:
                    flags[col], done[col] = 0, True
                elif happy[c]:
                    if not rnew[i] < last_happy[col]:
                        # R singular, or the residual far above the working precision's
                        # rounding: A or M is singular; else its floor (as GMRES's
                        # single-vector body)
                        far = not rnew[i] <= math.sqrt(eps) * (bnrm[col] or 1.0)
                        flags[col], done[col] = (-13 if singular[c] or far else 2), True
                    else:
                        last_happy[col] = rnew[i]
                elif watch and stalled[col] >= least:
                    flags[col], done[col] = 2, True
                elif est[c] <= target[c]:
                    # (left: as GMRES, a claim whose tighter target did not halve the true
                    # residual hands the column back: at a floor the two rules took turns)
                    if left and factor[col] > eps and not rnew[i] > STAGNATION * last_claim[col]:
                        factor[col] *= 0.25
                        last_claim[col] = rnew[i]
                    else:
                        flags[col], done[col] = 0, True
                elif left:
                    factor[col] = min(1.0, 1.5 * factor[col])
                if not done[col] and cycles[col] >= limits[col]:
                    flags[col], done[col] = 1, True

        for j in range(m):
            W = V[j + 1]
            if left:
                mm(V[j], U)                      # U = A v_j
                psolve(U, W)                     # W = M A v_j
            elif right:
                psolve(V[j], Z[j])               # z_j = M v_j
                mm(Z[j], W)                      # W = A z_j
            else:
                mm(V[j], W)                      # W = A v_j
            mdot_nrm2(V, j + 1, W, hcol, wn0)    # h_ic = v_ic . w_c; ||w_c||, one pass
            wnorm_in[:] = wn0
            step = np.zeros((j + 1, ka))
            for _pass in range(2):               # CGS, again where a column lost too much
                if _pass:
                    col_mdot(V, j + 1, W, hcol)  # h_ic = v_ic . w_c (second pass)
                    hcol[:, ~again] = 0.0        # the other columns: w_c unchanged
                maxpy_nrm2(V, j + 1, hcol, W, wn)   # w_c -= sum_i h_ic v_ic; ||w_c||
                step += hcol[:j + 1]
                again = ~frozen & (wn <= reorth * wn0)
                if not again.any():
                    break
                wn0[again] = wn[again]
            scale = np.zeros(ka)
            for c in np.flatnonzero(~frozen):
                H[c, :j + 1, j] = step[:, c]
                H[c, j + 1, j] = wn[c]
                if not math.isfinite(wn[c]):
                    flags[blk[c]] = -14
                    done[blk[c]] = True
                    frozen[c] = True
                    continue
                est[c] = givens(H[c], cs[c], sn[c], g[c], j)
                its[blk[c]] += 1
                jend[c] = j + 1
                if wn[c] <= eps * wnorm_in[c] or wn[c] == 0.0:
                    happy[c] = True
                    frozen[c] = True
                    continue
                scale[c] = 1.0 / wn[c]
                if est[c] <= target[c]:
                    frozen[c] = True
            col_scal(scale, W, W)                # v_{j+1} = w / ||w|| (0 for frozen columns)
            live_now = on & (jend == j + 1)
            if live_now.any():
                rel = est[live_now] * ratio[live_now] / np.where(bnrm[blk][live_now] > 0,
                                                                 bnrm[blk][live_now], 1.0)
                hist.append(float(rel.max()))
            if frozen.all():
                break
            # columns that stopped in this cycle: their update and restart rules now, and
            # the others go on in a narrower block (their bases copied) where the steps
            # left save more than the copy costs
            if not mask and j + 1 < m:
                stop = frozen & on               # (narrowed away below once finished)
                kk = ka - int(stop.sum())
                if stop.any() and (ka - kk) * sum(2 * i + 8 for i in range(j + 1, m)) > \
                        (j + 2) * (ka + kk):
                    finish(stop)
                    keep = np.flatnonzero(~frozen)
                    V0, Z0 = V, Z
                    V, Z, U = bases(keep.size)
                    np.take(V0[:j + 2], keep, axis=2, out=V[:j + 2], mode="clip")
                    if right:
                        np.take(Z0[:j + 1], keep, axis=2, out=Z[:j + 1], mode="clip")
                    del V0, Z0
                    x, r, b = (np.ascontiguousarray(x[:, keep]), np.ascontiguousarray(r[:, keep]),
                               np.ascontiguousarray(b[:, keep]))
                    blk, on, tl, ratio, target = (blk[keep], on[keep], tl[keep], ratio[keep],
                                                  target[keep])
                    H, cs, sn, g, hcol = H[keep], cs[keep], sn[keep], g[keep], hcol[:, keep]
                    wn, wn0, est, jend = wn[keep], wn0[keep], est[keep], jend[keep]
                    happy, wnorm_in, frozen = happy[keep], wnorm_in[keep], frozen[keep]
                    ka = keep.size
        finish(on)
    return cycles, its, flags
