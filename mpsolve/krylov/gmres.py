"""GMRES(m) -- restarted generalised minimal residual, left or right preconditioned.

Saad & Schultz (1986), "GMRES: a generalized minimal residual algorithm for
solving nonsymmetric linear systems", SIAM J. Sci. Stat. Comput. 7(3),
doi:10.1137/0907058; preconditioning as in Saad, *Iterative Methods for Sparse
Linear Systems*, 2nd ed., Algorithms 9.4 (left) and 9.5 (right).

``side="left"`` (the default, as in SciPy and PETSc): the Arnoldi process runs
on ``M A`` and minimises the preconditioned residual ``||M r||``.  The stopping
test is on the true residual ``||b - A x||`` all the same: a cycle stops when the
preconditioned estimate reaches ``tol`` scaled by the ratio ``||M r|| / ||r||``
seen at the start of the cycle, and the residual is recomputed at the end of each
cycle; when the estimate was met but the residual was not, the inner target is
tightened (x 1/4) for the next cycle (SciPy's rule, gh-8400).

``side="right"``: the Arnoldi process runs on ``A M``, so the minimised residual
*is* the unpreconditioned one and the estimate needs no translation.  The
preconditioned vectors ``z_j = M v_j`` are kept and ``x = x0 + Z y`` (flexible
GMRES, Saad 1993, doi:10.1137/0914028): a preconditioner applied in FP32 is not
exactly linear, and ``x0 + M (V y)`` would miss the Arnoldi relation by
``eps_fp32 ||M||``.  This costs ``restart`` more vectors.  Right preconditioning can stall on badly scaled matrices where
left converges (sherman3 with ISAI(A^2): left 1697 iterations, right none in
9000, because the unpreconditioned 2-norm is dominated by a few huge rows).

Orthogonalisation: classical Gram--Schmidt with one selective
reorthogonalisation pass (CGS2, "twice is enough": Giraud, Langou, Rozloznik &
van den Eshof 2005, doi:10.1007/s00211-005-0615-4): the coefficients of all
basis vectors come from one multi-vector pass (``ops.mdot``), the projection
from another (``ops.maxpy``).  One pass leaves ``v_{j+1}`` with a loss of
orthogonality of about ``eps ||w|| / ||w'||`` (``w'`` the projected vector), so the
projection is repeated (and the coefficients added) when ``||w'|| < eta ||w||``
with ``eta = max(1e-3, eps^(1/4))`` -- at most ``~1e3 eps`` lost per vector in FP64.
(Daniel--Gragg--Kaufman--Stewart's ``eta = 0.7`` reorthogonalises at nearly every
step of a converging GMRES, doubling its orthogonalisation cost: 4.4 s against
3.2 s, same iterations, on a 216k-row Poisson problem.)  This reads ``w`` once
per pass instead of once per basis vector, as modified Gram--Schmidt does.  The coefficients and norms go through
``ops.mdot`` / ``ops.nrm2``, so the ``compensated`` policies use Dot2.  The
Hessenberg matrix, Givens rotations and the small triangular solve are always FP64.

Memory traffic per inner step j: SpMV + M + about (2j + 4) n values (one CGS pass).
Memory: ``restart + 1`` basis vectors (``2 restart + 1`` with right preconditioning).
"""
from __future__ import annotations

import math

import numpy as np

from ..result import USER_STOP, wants_stop

__all__ = ["gmres_body", "SIDES"]

SIDES = ("left", "right")


def gmres_body(sys, x, r, maxiter, tol, callback, hist, restart=20, callback_type="x",
               max_inner=None, side="left"):
    """Run at most ``maxiter`` restart cycles of GMRES(restart).

    ``max_inner`` caps the inner iterations too (SciPy's ``callback_type='legacy'``).
    ``x`` and ``r`` are updated in place; ``r`` is ``b - A x`` in the working
    precision after each cycle.  ``hist`` gets one residual estimate per inner
    iteration, in unpreconditioned units (for ``side="left"`` the preconditioned
    estimate times the cycle's ``||r|| / ||M r||``).  Returns
    ``(cycles, inner_iterations, flag)``: flag 0 converged (or the estimate can no
    longer be trusted to find a better ``x`` -- the driver then judges by the true
    residual), 1 out of cycles, -13 happy breakdown short of the tolerance,
    -14 non-finite values.
    """
    ops, matvec, psolve = sys.ops, sys.matvec, sys.psolve
    nrm2, axpy, mdot, maxpy = ops.nrm2, ops.axpy, ops.mdot, ops.maxpy
    n = x.size
    ws, wdt = sys.workspace, sys.dtype         # vectors allocated once per solve
    m = max(1, min(restart, n))
    left = psolve is not None and side == "left"
    right = psolve is not None and not left
    eps = float(np.finfo(wdt).eps)
    reorth = max(1e-3, eps ** 0.25)            # second CGS pass below this ratio
    V = ws.get("V", (m + 1, n), wdt)           # Arnoldi basis, one row per vector
    # right preconditioning keeps Z = [M v_0, M v_1, ...] (flexible GMRES): an M applied in
    # FP32 is not exactly linear, and x += M (V y) would not be the combination the
    # Arnoldi relation was built from (add20 + FP32 ISAI: 5e-5 instead of 1e-8)
    Z = ws.get("Z", (m, n), wdt) if right else None
    u = ws.get("u", n, wdt)
    H = np.zeros((m + 1, m), dtype=np.float64)
    cs = np.zeros(m)
    sn = np.zeros(m)
    g = np.zeros(m + 1)
    y = np.zeros(m)
    hcol = np.zeros(m + 1)                     # Gram-Schmidt coefficients of one column
    bnrm = sys.problem.bnrm or 1.0
    inner = 0
    factor = 1.0                               # left: tightening of the inner target
    rnorm = nrm2(r)
    if rnorm <= tol:
        return 0, 0, 0
    stop = False                               # the callback asked to stop
    for cycle in range(1, maxiter + 1):
        if left:
            psolve(r, V[0])                     # v0 = M r / ||M r||
            beta = nrm2(V[0])
            if not (beta > 0.0 and math.isfinite(beta)):
                return cycle, inner, -14 if not math.isfinite(beta) else -13
            ratio = rnorm / beta                # unpreconditioned per preconditioned
        else:
            ops.copy(r, V[0])                   # v0 = r / ||r||
            beta = rnorm
            ratio = 1.0
        ops.scal(1.0 / beta, V[0])
        target = tol / ratio * factor           # inner target for the minimised residual
        g[:] = 0.0
        g[0] = beta
        H[:] = 0.0
        happy = False
        est = beta
        j_end = 0
        for j in range(m):
            if left:
                matvec(V[j], u)                 # u = A v_j
                psolve(u, V[j + 1])             # w = M A v_j
            elif right:
                psolve(V[j], Z[j])              # z_j = M v_j
                matvec(Z[j], V[j + 1])          # w = A z_j
            else:
                matvec(V[j], V[j + 1])          # w = A v_j
            w = V[j + 1]
            wnorm0 = wnorm_in = nrm2(w)
            for _pass in range(2):              # CGS, repeated once if needed (CGS2)
                mdot(V, j + 1, w, hcol)         # h_i = v_i . w, i <= j
                maxpy(V, j + 1, hcol, w)        # w -= sum_i h_i v_i
                H[: j + 1, j] += hcol[: j + 1]
                wnorm = nrm2(w)
                if wnorm > reorth * wnorm0:
                    break
                wnorm0 = wnorm
            H[j + 1, j] = wnorm
            if not math.isfinite(wnorm):
                return cycle, inner, -14
            est = ops.givens(H, cs, sn, g, j)   # Givens: H[:, j] -> R, g updated
            inner += 1
            hist.append(est * ratio)
            if (callback is not None and callback_type in ("pr_norm", "legacy")
                    and wants_stop(callback(est / bnrm))):
                stop = True
            j_end = j + 1
            if wnorm <= eps * wnorm_in or wnorm == 0.0:
                happy = True
                break
            ops.scal(1.0 / wnorm, w)            # v_{j+1} = w / ||w||
            if est <= target or inner == max_inner or stop:
                break
        k = j_end
        ops.back_substitute(H, g, k, y)         # y = R[:k, :k]^-1 g[:k], FP64
        if right:
            ops.lincomb(Z, y, k, u)             # u = Z_k y  (= M V_k y for an exact M)
        else:
            ops.lincomb(V, y, k, u)             # u = V_k y
        axpy(1.0, u, x)                         # x += u
        sys.residual(x, sys.b, r)               # r = b - A x
        rnorm = nrm2(r)
        if callback is not None and callback_type == "x" and wants_stop(callback(x)):
            stop = True
        if not math.isfinite(rnorm):
            return cycle, inner, -14
        if rnorm <= tol:
            return cycle, inner, 0
        if stop:
            return cycle, inner, USER_STOP
        if happy:
            return cycle, inner, -13
        if inner == max_inner:
            return cycle, inner, 1
        if est <= target:
            # the minimised residual met its target but the true one did not
            if left and factor > eps:
                factor *= 0.25                  # ask the next cycle for more (SciPy's rule)
            else:
                # the working precision's floor or rounding drift: the driver judges
                # with the FP64 true residual (replacement, stagnation, escalation)
                return cycle, inner, 0
        elif left:
            factor = min(1.0, 1.5 * factor)
    return maxiter, inner, 1
