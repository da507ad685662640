"""Mixed-precision iterative refinement (the ``ir`` policy).

Outer loop in FP64, inner Krylov solve in the policy's ``inner`` precision
(Wilkinson 1963; Carson & Higham (2018), "Accelerating the solution of linear
systems by iterative refinement in three precisions", SIAM J. Sci. Comput.
40(2), doi:10.1137/17M1140819 -- here with a Krylov inner solver, as in
GMRES-IR):

1. ``r = b - A x`` in FP64 (exact FP64 matrix, FP64 row sums);
2. solve ``A d = r / ||r||`` to a modest relative accuracy in the inner
   precision (FP32 matrix, FP32 preconditioner, FP32 vectors); the scaling by
   ``||r||`` keeps the inner data in FP32's range;
3. ``x <- x + ||r|| d`` in FP64; repeat until the FP64 true residual meets the
   tolerance.

Stagnation: if one refinement step does not halve the true residual, the
inner precision cannot make progress on this matrix (its condition number is
beyond ``1/eps_fp32``); the stage stops with flag 2 so the driver can escalate.
Each inner solve gets at most a tenth of the iteration budget.
The user's ``callback`` is called with the FP64 iterate after each outer step.
"""
from __future__ import annotations

from ._system import STAGNATION, system_for

from .result import USER_STOP, wants_stop

__all__ = ["refine_stage", "INNER_RTOL"]

#: Relative residual reduction asked of each inner solve.
INNER_RTOL = 1e-4
#: One inner solve may use at most 1/STEP_SHARE of the iteration budget, so an inner
#: precision that cannot converge is noticed (stagnation) before the budget is gone.
STEP_SHARE = 10


def refine_stage(body, problem, policy, x64, budget, callback, hist, body_kw, r64):
    """Refine ``x64`` in place until the FP64 true residual meets the tolerance, the
    budget is spent or a step stagnates.  Returns ``(count, iterations, flag, true)``
    like :func:`mpsolve.driver.krylov_stage`."""
    inner = system_for(problem, policy.inner)
    wdt = inner.dtype
    tol = problem.tol
    n = problem.n
    ws = problem.workspace
    d = ws.get("ir_d", n, wdt)
    r = ws.get("ir_r", n, wdt)
    step = ws.get("ir_step", n, x64.dtype)
    inner.b = ws.get("ir_b", n, wdt)             # the inner solve's own right-hand side
    true = problem.true_residual(x64, r64)
    count = iters = 0
    flag = 1
    while true > tol and count < budget:
        scale = true
        problem.xp.divide(r64, scale, out=step)
        r[:] = step                              # inner right-hand side r / ||r||, unit norm
        inner.b[:] = r
        d[:] = 0.0
        eta = max(INNER_RTOL, 0.5 * tol / true)  # no need to go further than the goal
        sub = []
        step_budget = min(budget - count, max(1, -(-budget // STEP_SHARE)))
        c, it, iflag = body(inner, d, r, step_budget, eta, None, sub, **body_kw)
        count += c
        iters += it
        hist.extend(h * scale for h in sub)
        if not problem.all_finite(d):            # overflow in the inner precision
            flag = -14
            break
        step[:] = d
        step *= scale                            # ||r|| d in FP64
        x64 += step                              # x = x + ||r|| d  (FP64)
        new = problem.true_residual(x64, r64)
        if new > true:                           # the correction made it worse: undo it
            x64 -= step
            new = problem.true_residual(x64, r64)
        if callback is not None and wants_stop(callback(x64)):
            true = new
            flag = USER_STOP
            break
        if new > STAGNATION * true:
            true = new
            flag = 2 if new > tol else 0
            break
        true = new
    if true <= tol:
        flag = 0
    return count, iters, flag, true
