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

Three precisions (:func:`dd_stage`, the ``eft`` presets: ``residual="dd"``): ``x`` is
carried as a double-double pair ``(x_hi, x_lo)`` and step 1 computes ``r`` with Dot2 per
row from FP64 ``A`` and ``b`` (``residual_dd``), so ``r`` is accurate even where
``||r||`` is near ``u ||A|| ||x||`` and the FP64 residual would be mostly rounding error;
step 2 is a Krylov solve of ``A d = r`` in the policy's own precisions (FP64 vectors, the
preconditioner in FP32 for ``mixed-eft``: Carson & Higham's ``u_f``, ``u``, ``u_r =
u^2``); step 3 adds ``d`` to the pair without rounding error to speak of (``dd_axpy``).
Each step's forward error shrinks by about ``kappa(A) u``, down to the accuracy of the
pair, so for ``kappa(A) < 1/u`` the rounded answer reaches a forward error of order ``u``
-- where the FP64 recurrences of one Krylov solve stop at about ``kappa(A) u``.
This is van der Vorst & Ye's residual replacement with group-wise update ("Residual
replacement strategies for Krylov subspace iterative methods for the convergence of true
residuals", SIAM J. Sci. Comput. 22(3), 2000, doi:10.1137/S1064827599353865): the Krylov
body accumulates its iterate in a working-precision correction ``d`` started at 0, and at a
replacement point the correction is flushed into the pair and the recursive residual
replaced by the compensated true one.  Deviation: the replacement points are where the
recursive residual meets the target (the body's convergence), not their ``sqrt(eps)``
drop test inside the iteration, so a replacement restarts the Krylov space; with
tolerances above the FP64 floor there is only the one solve, and nothing is restarted.
The first step asks the body for the requested tolerance itself (the same iteration as
a plain solve), or for the working precision's floor ``10 eps ||b||`` if the tolerance
is below it; later steps for ``max(tol, DD_ETA ||r||)``, and once the pair meets the
tolerance but its FP64 rounding cannot (a tolerance below ``u ||A|| ||x||``) for
``DD_ETA ||r||``, until a correction no longer moves the rounded ``x``.

Stagnation: if one refinement step does not halve the true residual, the
inner precision cannot make progress on this matrix (its condition number is
beyond ``1/eps_fp32``); the stage stops with flag 2 so the driver can escalate.
Each inner solve gets at most a tenth of the iteration budget.
The user's ``callback`` is called as the method calls it -- each iteration (CG, BiCGSTAB)
or each restart cycle (GMRES, ``callback_type='x'``) with the FP64 iterate ``x + ||r|| d``,
or each GMRES inner iteration with the residual norm over ``||b||`` (``'pr_norm'``,
``'legacy'``), as SciPy calls them; ``'legacy'``'s ``maxiter`` caps the inner iterations
of all steps together.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import scipy.sparse as sp

from ._sparse import canonical_csr
from ._system import STAGNATION, system_for
from .kernels.registry import lookup
from .kernels.safenorm import norm
from .operator import SparseOperator
from .result import USER_STOP, keep_period, wants_stop

__all__ = ["refine_stage", "dd_stage", "dd_supported", "real_form", "INNER_RTOL", "DD_ETA",
           "best_replay", "REPLAY_GAIN"]

#: A body call that ended this many times above the smallest recursive residual it
#: reached is run again from its start to that iterate (:func:`best_replay`); a failed
#: run whose true residual ended this many times above its start's returns its start
#: (:func:`mpsolve.driver.krylov_stage`: "diverged").
REPLAY_GAIN = 100.0


def best_replay(hist, h0, c, it, end):
    """The iterations to run a body call again for, from its own start, to get back its
    best iterate -- or 0 where there is nothing to gain.

    CG and BiCGSTAB are not monotone: BiCGSTAB near a breakdown (``r0^H r`` tiny but not
    zero, as the compensated dots make it on a coefficient-jump problem of condition 1e7)
    can reach a residual of 1.7e-9 and then grow to 1e9 over the rest of the budget, and
    an FP32 iteration can overflow after its best iterate.  Keeping that iterate as it
    goes would cost a vector copy per improvement in every loop; but the bodies are
    deterministic (the compiled loops and the Python ones give the same bits, the team
    loops take every branch alike on both threads), so the iterate is recomputed, once,
    at the end of a failed call only: from the call's start, with no callback, for as
    many iterations as the history says it took to get there.  ``hist[h0:]``: the call's
    recursive residual norms, one per iteration (the bodies counted by iterations, ``c ==
    it``: CG and BiCGSTAB; GMRES's residual does not grow); ``end``: the norm the call
    ended with (a true residual, or non-finite).  Worth it where the best is
    :data:`REPLAY_GAIN` times below ``end``, and not the call's last iterate."""
    seg = np.asarray(hist[h0:], dtype=np.float64)
    if c != it or seg.size != it or it < 2:
        return 0
    finite = np.isfinite(seg)
    if not finite.any():
        return 0
    j = int(np.argmin(np.where(finite, seg, np.inf)))
    if j == it - 1 or end <= REPLAY_GAIN * seg[j]:        # (a NaN end: replayed)
        return 0
    return j + 1

#: Relative residual reduction asked of each inner solve.
INNER_RTOL = 1e-4
#: One inner solve may use at most 1/STEP_SHARE of the iteration budget, so an inner
#: precision that cannot converge is noticed (stagnation) before the budget is gone --
#: but at least MIN_STEP iterations (GMRES: cycles) of a small budget: a caller's
#: ``maxiter=40`` gave CG corrections of 4 iterations, restarted CG too slow to halve the
#: residual, read as a stagnation with most of the budget left.
STEP_SHARE = 10
MIN_STEP = 25


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
    # the user's callback sees what the method's own would show, in the caller's units:
    # the inner system solves A d = r / ||r|| from d = 0, so the iterate is x + ||r|| d and a
    # residual norm (GMRES's 'pr_norm'/'legacy' callbacks) is the inner one times ||r||
    scale = true
    inner_cb = None
    stop = []                   # the callback asked to stop (also on an inner solve's last
    if callback is not None:    # iteration, which the body reports as converged)
        xt = ws.get("ir_xt", n, x64.dtype)

        def inner_cb(v):
            if getattr(v, "shape", ()) == ():
                ret = callback(v * scale)
            else:
                xt[:] = v                        # (FP64 from here)
                problem.xp.multiply(xt, scale, out=xt)
                problem.xp.add(xt, x64, out=xt)
                ret = callback(xt)
            if wants_stop(ret):
                stop.append(True)
            return ret
        keep_period(inner_cb, callback)
    while true > tol and count < budget:
        kw = capped(body_kw, iters)    # (SciPy's legacy GMRES, auto: the whole solve's cap)
        if kw is None:
            break
        scale = true
        problem.xp.divide(r64, scale, out=step)
        r[:] = step                              # inner right-hand side r / ||r||, unit norm
        inner.b[:] = r
        d[:] = 0.0
        eta = max(INNER_RTOL, 0.5 * tol / true)  # no need to go further than the goal
        sub = []
        step_budget = min(budget - count, max(-(-budget // STEP_SHARE), MIN_STEP))
        c, it, iflag = body(inner, d, r, step_budget, eta, inner_cb, sub, **kw)
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
        if iflag == USER_STOP or stop:           # the callback asked to stop
            true = new
            flag = USER_STOP
            break
        if new > STAGNATION * true:
            true = new
            if iflag == 1 and count >= budget:
                break                            # the budget ran out: not a stagnation
            flag = 2 if new > tol else 0
            break
        true = new
    if true <= tol:
        flag = 0
    return count, iters, flag, true


#: Relative residual reduction asked of a correction solve after the first (the first asks
#: for the tolerance itself).  Measured on issue 15's integer problems (CG + Jacobi, 3-D
#: jumps 1e6/1e9, n = 2744; BiCGSTAB on a convection-diffusion twin): 1e-3 took the fewest
#: iterations but stopped at a forward error of 1e-11 on the 1e9 jumps (each step gains
#: less than kappa allows); 1e-5 reached the exact x* there in 553 iterations against 584
#: for sqrt(eps) (double: 327 iterations, forward error 4e-9).
DD_ETA = 1e-5

#: :func:`dd_stage`'s flag for "the double-double pair meets the tolerance, and x rounded
#: to FP64 is as close as FP64 holds it" (a tolerance below FP64's rounding of b - A x):
#: no stronger policy rounds x better, so the driver neither escalates nor moves on
FP64_ROUNDING = 4


def capped(body_kw, iters):
    """``body_kw`` for the next body call after ``iters`` inner iterations, with its
    ``max_inner`` cap lowered by them: the cap (SciPy's legacy GMRES maxiter, auto's share
    of its budget) bounds a whole solve's inner iterations -- every residual replacement,
    refinement step and escalation -- not each call's.  ``None`` where that cap is spent."""
    cap = body_kw.get("max_inner")
    if cap is None:
        return body_kw
    return dict(body_kw, max_inner=cap - iters) if iters < cap else None


def dd_supported(problem) -> bool:
    """Whether ``problem`` can run a double-double stage: the matrix entries of ``A`` are
    known (not a ``LinearOperator``).  A device without the kernels is refused by
    :func:`dd_stage` with a message naming the fix."""
    return problem.A_csr is not None


def real_form(C) -> sp.csr_matrix:
    """The real ``2n x 2n`` form of a complex CSR matrix ``C`` with rows and columns
    interleaved (real part, imaginary part of each unknown): row ``2i`` holds ``(Re a_ij,
    -Im a_ij)`` in columns ``(2j, 2j + 1)``, row ``2i + 1`` holds ``(Im a_ij, Re a_ij)``.
    A complex128 vector's float64 view is this form's vector, so ``real_form(C) @
    x.view(float64)`` is ``(C @ x).view(float64)``: the real double-double kernels (Dot2
    rows, pair updates) run on complex data through views, without copies of the vectors.
    Row ``2i`` or ``2i + 1`` has ``2 k_i`` entries (``k_i``: row ``i``'s), and its terms'
    moduli sum to at most row ``i``'s complex ``|b_i| + sum_j |a_ij| |x_j|`` (Cauchy-Schwarz
    on each pair): :meth:`mpsolve._system.Problem.residual_bound` states the bound."""
    C = C.tocsr()
    n, m = C.shape
    i = np.repeat(np.arange(n, dtype=np.int64), np.diff(C.indptr))
    j = C.indices.astype(np.int64)
    re, im = C.data.real.astype(np.float64), C.data.imag.astype(np.float64)
    rows = np.concatenate([2 * i, 2 * i, 2 * i + 1, 2 * i + 1])
    cols = np.concatenate([2 * j, 2 * j + 1, 2 * j, 2 * j + 1])
    vals = np.concatenate([re, -im, im, re])
    return canonical_csr(sp.csr_matrix((vals, (rows, cols)), shape=(2 * n, 2 * m)))


def _dd_kernels(problem, policy):
    """The ``residual_dd`` and ``dd_axpy`` kernels of the problem's device, or a clear
    error naming the fix (the registry's own message says what exists).  Complex data:
    both on float64 views, ``residual_dd`` of :func:`real_form` (made once per problem)."""
    try:
        axpy = lookup(problem.device, "dd_axpy", ("float64",))
        if not problem.is_complex:
            return problem.A64.bind_residual_dd(), axpy
        if problem._dd64 is None:
            problem._dd64 = SparseOperator(real_form(problem.A_csr), "float64", "float64",
                                           problem.device, what="A").bind_residual_dd()
        res = problem._dd64
        f8 = np.float64

        def residual_dd(xh, xl, b, r, rl):
            res(xh.view(f8), xl.view(f8), b.view(f8), r.view(f8), rl.view(f8))

        def dd_axpy(a, x, yh, yl):
            axpy(a, x.view(f8), yh.view(f8), yl.view(f8))
        return residual_dd, dd_axpy
    except KeyError as err:
        raise ValueError(
            f"precision={policy.name!r} keeps x and the residual in double-double "
            f"(residual='dd'), which device {problem.device!r} does not provide ({err}); "
            f"use precision=dataclasses.replace(Precision.preset({policy.name!r}), "
            f"residual='fp64') there") from None


def dd_stage(body, sys, x64, budget, callback, hist, body_kw, r64):
    """Refine ``x64`` as the high part of a double-double pair (module docstring, three
    precisions) until the compensated residual meets the tolerance, the budget is spent,
    a step stagnates or the body breaks down.  Returns ``(count, iterations, flag, true)``
    like :func:`mpsolve.driver.krylov_stage`, ``true`` the certified Dot2 residual of the
    returned ``x64`` (the pair rounded); the low part stays in the workspace (``dd_xl``).

    The body runs on a copy of ``sys`` whose right-hand side is the current residual and
    whose iterate is the correction ``d`` (from 0); the user's ``callback`` gets the full
    iterate ``x_hi + x_lo + d`` (formed only when there is a callback).
    """
    problem = sys.problem
    xp, ws, n, tol = problem.xp, problem.workspace, problem.n, problem.tol
    policy = sys.precision
    residual_dd, dd_axpy = _dd_kernels(problem, policy)
    wdt = sys.dtype
    hp = problem.hp                             # float64, or complex128 (its views: float64)
    xh = x64                                    # the pair's high part *is* the driver's x
    xl = ws.zeros("dd_xl", n, hp)
    rl = ws.get("dd_rl", n, hp)
    judge = ws.get("dd_judge", n, hp)
    keep_h, keep_l = ws.get("dd_keep_h", n, hp), ws.get("dd_keep_l", n, hp)
    zero, jl = ws.zeros("dd_zero", n, hp), ws.get("dd_judge_l", n, hp)

    def judged(x, out):
        """The residual of the rounded ``x`` by Dot2 (where the FP64 ``b - A x`` is mostly
        rounding error), certified (:meth:`mpsolve._system.Problem.certified`)."""
        residual_dd(x, zero, problem.b64, out, jl)
        return problem.certified(norm(out, xp), x, dd=True)

    rhs = ws.get("dd_rhs", n, wdt)              # the correction equation's right-hand side
    d = ws.get("dd_d", n, wdt)                  # the correction (the body's iterate)
    r = ws.get("dd_r", n, wdt)                  # its recursive residual
    d64 = d                                     # FP64: Precision refuses 'dd' otherwise
    eps = float(np.finfo(np.float64).eps)
    corr = replace(sys, b=rhs)                  # A d = rhs, same operator and M
    cb = None
    stop = []                                   # the callback asked to stop (as refine_stage)
    if callback is not None:
        xt = ws.get("dd_xt", n, hp)

        def cb(v):                              # the body's iterate is d: hand on x
            if getattr(v, "shape", None) == (n,):
                xp.add(xh, v, out=xt)
                xp.add(xt, xl, out=xt)          # x = x_hi + x_lo + d
                ret = callback(xt)
            else:
                ret = callback(v)               # GMRES's residual-norm callbacks
            if wants_stop(ret):
                stop.append(True)
            return ret
        keep_period(cb, callback)

    if problem._first_residual and not bool(xp.any(xh)):   # a zero start
        r64[:] = problem.b64                    # b - A 0, exactly
        problem._first_residual = False
    else:
        residual_dd(xh, xl, problem.b64, r64, rl)   # r + rl = b - A (x_hi + x_lo)
    true = norm(r64, xp)
    # the working precision's floor for the first correction equation, whose right-hand
    # side is the start's residual (b itself from a zero start): 10 eps_w ||r_0||
    wfloor = 10.0 * float(np.finfo(wdt).eps) * true
    count = iters = 0
    flag = 0 if true <= tol else 1
    first = True
    # accuracy: the pair met the tolerance but the rounded x cannot (a tolerance below the
    # FP64 floor u ||A|| ||x||): the steps then refine the forward error, each asking a
    # relative reduction DD_ETA, until a correction no longer moves the rounded x
    accuracy = False
    while true > tol or accuracy:
        kw = capped(body_kw, iters)
        if count >= budget or kw is None:
            flag = 1
            break
        rhs[:] = r64                            # rounded once to the working precision
        r[:] = rhs
        d.fill(0)
        if first:
            # the plain solve's own target -- or, below the working precision's floor
            # (10 eps ||r_0||: a GMRES cycle's recomputed residual never gets under it), that
            # floor: the refinement steps take it from there (a start already close to the
            # answer -- the block path's x handed on -- gets a floor of its own residual's
            # size, not of ||b||'s, which it may meet already: no step, "stagnated")
            target = max(tol, wfloor)
        elif accuracy:
            target = DD_ETA * true
        else:
            target = max(tol, DD_ETA * true)
        first = False
        h0 = len(hist)
        c, it, f = body(corr, d, r, budget - count, target, cb, hist, **kw)
        if stop:
            f = USER_STOP                       # (a stop on the step's last iteration too)
        if f != 0 and f != USER_STOP:
            # the correction's best iterate, where the call ended far above it (module
            # docstring of best_replay): run again from d = 0 to it
            done = problem.all_finite(d)
            j = best_replay(hist, h0, c, it, norm(r, xp) if done else np.inf)
            if j:
                d.fill(0)
                r[:] = rhs
                body(corr, d, r, j, target, None, [], **kw)
                sys.replayed = iters + j
        count += c
        iters += it
        if not problem.all_finite(d):
            flag = -14
            break
        keep_h[:] = xh
        keep_l[:] = xl
        dd_axpy(1.0, d64, xh, xl)               # x_hi + x_lo += d  (double-double)
        residual_dd(xh, xl, problem.b64, r64, rl)
        new = norm(r64, xp)
        if not new <= true:                     # the correction made it worse: undo it
            xh[:] = keep_h
            xl[:] = keep_l
            residual_dd(xh, xl, problem.b64, r64, rl)
            new = norm(r64, xp)
            if f != 0:
                sys.diverged = True
            f = f if f != 0 else 2
        moved = float(xp.abs(d64).max()) > eps * float(xp.abs(xh).max())
        if new <= tol or accuracy:
            # the pair meets the tolerance: so must the rounded x, by the driver's FP64
            # judge (certified); where it cannot (a tolerance below FP64's rounding of
            # b - A x), refine the forward error instead -- the answer is then judged by
            # its Dot2 residual at the end
            if problem.true_residual(xh, judge) <= tol:
                true, flag = new, 0
                break
            accuracy = True
            if not moved or new > STAGNATION * true:
                true, flag = new, FP64_ROUNDING  # x is as good as FP64 holds it
                break
        if f != 0:
            true, flag = new, f
            break
        # stagnated: the step did not halve the residual, or could not move the rounded x
        if not accuracy and (new > STAGNATION * true or not moved):
            true, flag = new, 2
            break
        true = new
    if flag == USER_STOP and true <= tol:
        flag = 0
    certified = judged(xh, r64)
    if flag == 0 and not certified <= tol:
        # the Dot2 residual meets the tolerance (it may be exactly 0), its rounding bound
        # does not: no step can certify less -- the floor of this precision
        flag = 2
    return count, iters, flag, certified
