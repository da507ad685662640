"""The solve driver shared by every method (device-neutral: it keeps its vectors in
the problem's array module and calls only the System's kernels).

A method is a *body* ``body(sys, x, r, maxiter, tol, callback, hist, **kw) ->
(count, iterations, flag)`` that iterates on a :class:`~mpsolve._system.System`.
The driver around it, written once for all methods:

1. validates the input once (:func:`make_problem`) and realises it at the
   requested :class:`Precision` (:func:`make_system`, through :func:`system_for`,
   which keeps each policy's System for a :class:`mpsolve.Solver`'s next solve);
2. runs the body (one that returns a count of 0 has not changed ``x`` or ``r``: its
   true residual is the one computed before); when the body's own (recursive) residual
   says "converged", checks the FP64 true residual ``||b - A x||``: if it misses the
   tolerance, the iteration restarts from the true residual (*residual replacement*);
3. if the true residual stops improving (it failed to halve between two
   replacements) the solve has hit the accuracy floor of its precision: with
   ``escalate=True`` it switches to ``precision.stronger()`` and goes on from the
   current ``x``, recording an :class:`Escalation`; otherwise it stops with
   ``info > 0``;
4. judges the returned ``x`` by its FP64 true residual: ``info == 0`` only when
   ``||b - A x|| <= max(atol, rtol ||b||)``, certified -- the computed norm plus the
   rounding bound of the FP64 residual where that bound is not negligible
   (:meth:`~mpsolve._system.Problem.true_residual`; the ``eft`` presets: the Dot2
   residual and its bound).

A policy with ``inner`` set runs as iterative refinement (:mod:`.refine`).

The FP64 iterate ``x64``, the FP64 residual ``r64`` and the working-precision
copies all come from the problem's :class:`~mpsolve._system.Workspace`, as do the
bodies' Krylov vectors: a solve allocates them once, whatever number of residual
replacements, escalations or refinement steps it takes.

A ``callback`` that returns ``True`` stops the solve (Krylov.jl's convention): the
result has ``info == 0`` if the returned ``x`` meets the tolerance anyway, else
``info == -15`` (:data:`~mpsolve.result.USER_STOP`).
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ._demote import PrecisionRangeError
from .backend import on_host, to_device
from .kernels.safenorm import all_finite, ldexp_array
from ._configure import check_cg_preconditioner
from ._system import STAGNATION, check_basis, make_problem, system_for
from .precision import as_precision
from .precond.base import Preconditioner
from .refine import (FP64_ROUNDING, REPLAY_GAIN, best_replay, capped, dd_stage, dd_supported,
                     refine_stage)
from .result import USER_STOP, Escalation, SolveResult, keep_period, status_text

__all__ = ["run", "iterate", "report_fields"]

_EPS64 = 2.0**-52       # unit roundoff (x2) of FP64 and complex128


def _describe(M):
    if M is None:
        return ""
    if isinstance(M, Preconditioner):
        # each choice with its reason beside it: the variant's (auto's), the sparsity
        # power's (ISAI's test of the pattern of A)
        why = {"variant": getattr(M, "variant_reason", ""),
               "sparsity_power": getattr(M, "power_reason", "")}
        parts = []
        for k in ("variant", "block_size", "sparsity_power", "shift"):
            if getattr(M, k, None) is None:
                continue
            reason = why.get(k, "")
            shown = reason.startswith("auto") if k == "variant" else \
                reason not in ("", "requested", "default")
            parts.append(f"{k}={getattr(M, k)}" + (f" ({reason})" if shown else ""))
        extra = ", ".join(parts)
        return repr(M) + (f" [{extra}]" if extra else "")
    return type(M).__name__


def _float32_parts(policy) -> set:
    """What ``policy`` stores in float32: ``"A"``, ``"M"``, ``"b"`` (the vectors), its
    inner solve's included."""
    parts = set()
    for p in (policy, policy.inner):
        if p is not None:
            parts |= {part for part, dt in (("A", p.matrix), ("M", p.precond),
                                            ("b", p.working)) if dt == "float32"}
    return parts


def past_range_error(policy, err):
    """The escalation after ``err``, a :class:`PrecisionRangeError` of ``policy``'s set-up:
    the first stronger policy that keeps the part that did not fit (``A``, ``b`` or the
    preconditioner's storage) in FP64 -- every one between fails the same way (``mixed
    -> mixed-eft`` with an FP32 M, ``single -> ir`` with an FP32 A); ``None`` at the top."""
    part = {"A": "A", "b": "b"}.get(getattr(err, "what", None), "M")
    nxt = policy.stronger()
    while nxt is not None and part in _float32_parts(nxt):
        nxt = nxt.stronger()
    return nxt


def krylov_stage(body, sys, x64, budget, callback, hist, body_kw, r64):
    """One precision policy, with residual replacement.  Returns
    ``(count, iterations, flag, true_norm)``; flag 2 means "stagnated"."""
    problem = sys.problem
    ws = problem.workspace
    n = problem.n
    tol = problem.tol
    wdt = sys.dtype
    same = x64.dtype == wdt
    true = start_true = problem.true_residual(x64, r64)
    if true <= tol * (1.0 - (4 * n + 8) * _EPS64):
        # x already meets the tolerance: the body would stop before its first iteration
        # (every body's first test is its own norm of r, here r64 itself, against tol;
        # that norm and this one differ by less than the margin, a few n eps relative),
        # leaving x and r as they are -- the same answer without the call.  In a lower
        # working precision x is kept as it is too (rounded to it, it would lose what
        # made it meet the tolerance)
        return 0, 0, 0, true
    if same:
        x = x64
    else:
        x = ws.get("x", n, wdt)
        x[:] = x64                              # x = x64, rounded once
    backup = ws.get("x_start", n, problem.hp)
    backup[:] = x64
    r = r64 if same else ws.get("r", n, wdt)
    if not same:
        r[:] = r64                              # r = b - A x, rounded once
    count = iters = 0
    last_true = np.inf
    call_x = ws.get("x_call", n, problem.hp)   # where the body call started

    def replay(j, kw):
        """x64 = the body call's iterate ``j`` (:func:`~mpsolve.refine.best_replay`),
        recomputed from the call's start; its true residual (r64 with it)."""
        x64[:] = call_x
        if not same:
            x[:] = x64
        problem.true_residual(x64, r64)
        if not same:
            r[:] = r64
        body(sys, x, r, j, tol, None, [], **kw)
        if not same:
            x64[:] = x
        return problem.true_residual(x64, r64) if problem.all_finite(x64) else np.inf

    while True:
        kw = capped(body_kw, iters)
        if kw is None:                          # the inner-iteration cap is spent
            return count, iters, 1, true
        call_x[:] = x64
        h0 = len(hist)
        c, it, flag = body(sys, x, r, budget - count, tol, callback, hist, **kw)
        # a body that did nothing left x64 (and r64) as they were: their residual is known
        if not (c == 0 and it == 0 and same and true < np.inf):
            if not same:
                x64[:] = x
            if not problem.all_finite(x64):
                j = best_replay(hist, h0, c, it, np.inf)
                true = replay(j, kw) if j else np.inf
                if true < start_true:           # (its best iterate, before the overflow)
                    sys.replayed = iters + j
                    return count + c, iters + it, -14, true
                x64[:] = backup
                true = problem.true_residual(x64, r64)
                return count + c, iters + it, -14, true
            true = problem.true_residual(x64, r64)
        if true <= tol:
            return count + c, iters + it, 0, true
        stalled = flag == 0 and not true < STAGNATION * last_true   # (inf or NaN too)
        if flag != 0 or count + c >= budget or stalled:
            # (not where the caller's callback stopped it: the iterate it stopped at)
            j = 0 if stalled or flag == USER_STOP else best_replay(hist, h0, c, it, true)
            if j:
                # the call ended far above the best iterate it passed: that iterate,
                # recomputed, where it is better (the current one kept otherwise)
                keep = ws.get("x_end", n, problem.hp)
                keep[:] = x64
                got = replay(j, kw)
                if got < true:
                    true = got
                    sys.replayed = iters + j
                else:
                    x64[:] = keep
                    true = problem.true_residual(x64, r64)
        count += c
        iters += it
        if flag != 0 or count >= budget or stalled:
            if true > REPLAY_GAIN * start_true:
                # the iteration diverged: no x far worse than the one it started from is
                # handed back (the status says so through diverged=True); a residual a
                # little above the start's is CG's and BiCGSTAB's way (CG's error still
                # fell in the energy norm): that iterate is returned, as SciPy returns it
                # (a warm restart by maxiter-sized calls got its x0 back every call)
                x64[:] = backup
                true = problem.true_residual(x64, r64)
                sys.diverged = True
            # (stalled: the recursive residual met the tolerance, the true one did not
            # halve since the last replacement -- the precision's floor)
            return count, iters, (2 if stalled else flag), true
        last_true = true
        if not same:                            # (same: r is r64 = b - A x already)
            r[:] = r64                          # r = b - A x (FP64, rounded once)


def run(method: str, body: Callable, A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None,
        M=None, callback=None, precision=None, escalate=True, device=None,
        default_maxiter=lambda n: 10 * n, body_kw=None, precond_name=None,
        precond_side="left") -> SolveResult:
    """Validate, realise, iterate, escalate, judge.  See the module docstring.

    ``precond_side``: the side ``body`` applies ``M`` on (``"left"``, ``"right"`` or
    ``"symmetric"``: CG, which needs a symmetric ``M``), handed to a preconditioner set up
    here (its ``variant="auto"`` may depend on it).
    """
    t0 = time.perf_counter()
    problem = make_problem(A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                           default_maxiter=default_maxiter, device=device,
                           precond_side=precond_side)
    return iterate(method, body, problem, as_precision(precision, problem.data_dtype),
                   callback=callback, escalate=escalate, body_kw=body_kw or {},
                   precond_name=precond_name, t0=t0)


def report_fields(problem, method, precond_name=None) -> dict:
    """The :class:`SolveResult` fields that describe the set-up rather than the solve:
    the method and the preconditioner (its name, memory, description and set-up stats)."""
    Mobj = problem.M_user
    return dict(method=method,
                precond=precond_name or (getattr(Mobj, "name", None) or
                                         (type(Mobj).__name__ if Mobj is not None else None)),
                precond_nbytes=int(getattr(Mobj, "nbytes", 0) or 0) if Mobj is not None else 0,
                precond_detail=_describe(Mobj),
                precond_stats=dict(getattr(Mobj, "stats", None) or {}))


#: Why a solve whose FP64 iterate met the tolerance has not converged for the caller.
ROUNDED = ("x rounded to {dtype} misses the tolerance (its residual {rel:.1e}; the FP64 "
           "iterate met it): pass b as {wide} for an FP64 answer")


def rounded_text(dtype, rel) -> str:
    """:data:`ROUNDED` for an answer of ``dtype`` (the advice: float64, or complex128 for
    complex data -- float64 would drop the imaginary part)."""
    dt = np.dtype(dtype)
    return ROUNDED.format(dtype=dt.name, rel=rel,
                          wide="complex128" if dt.kind == "c" else "float64")


#: Why a solve whose scaled iterate met the tolerance has not converged for the caller.
OVERFLOWED = ("x overflows float64 in the caller's units (the iterate of the scaled system "
              "met the tolerance): the system is too badly scaled for a norm-wise residual; "
              "scale its rows and columns first")


#: Why a solve whose scaled iterate met the tolerance has not converged for the caller.
UNDERFLOWED = ("x underflows float64 in the caller's units (the iterate of the scaled system "
               "met the tolerance; x as returned, with subnormal or zero entries, does not): "
               "the system is too badly scaled for a norm-wise residual; scale its rows and "
               "columns first")


def _underflowed(problem, x, x64):
    """The certified residual norm of the answer ``x`` (the caller's units, ``b_exp < 0``)
    in the scaled system's units, or ``None`` where scaling ``x`` back gives ``x64``
    exactly (nothing was lost)."""
    xp = problem.xp
    xs = ldexp_array(xp.asarray(to_device(x, problem.device), dtype=problem.hp),
                     -problem.b_exp)
    if bool(xp.array_equal(xs, x64)):
        return None
    return problem.true_residual(xs, problem.workspace.get("r_out", problem.n, problem.hp))


def answer_residual(problem, x64):
    """The certified FP64 residual norm (:meth:`~mpsolve._system.Problem.true_residual`)
    of ``x64`` as the caller receives it -- rounded to ``problem.out_dtype`` -- or ``None``
    where returning it rounds nothing (FP64, complex128 or wider data).  Float32 (complex64)
    data get their answer in their own dtype, and a tolerance below what that dtype holds
    (``rtol=1e-8``: the rounding alone leaves about ``1e-7``) must not read as met."""
    out = np.dtype(problem.out_dtype)
    if out.itemsize >= problem.hp.itemsize:
        return None
    ws = problem.workspace
    xr = ws.get("x_out", problem.n, problem.hp)
    xr[:] = x64.astype(out)
    return problem.true_residual(xr, ws.get("r_out", problem.n, problem.hp))


def iterate(method: str, body: Callable, problem, policy, *, callback, escalate, body_kw,
            precond_name=None, t0=None, report=None, judge_answer=True) -> SolveResult:
    """Realise ``policy`` for the checked ``problem`` and solve: iterate, escalate, judge
    (the module docstring's steps 2-4).  :func:`run` calls it on a fresh Problem,
    :class:`mpsolve.Solver` on its own, whose Systems (:func:`system_for`) are already
    made.  ``t0``: when the call began (set-up time is counted from it); ``report``: the
    :func:`report_fields` when the caller has them already (else made at the end);
    ``judge_answer``: judge a converged ``x`` as returned (:func:`answer_residual`; auto
    judges its last candidate's answer itself)."""
    t0 = time.perf_counter() if t0 is None else t0
    n = problem.n
    if problem.b_exp and callback is not None:     # b was scaled: the caller's units
        user_callback = callback

        def callback(xk):
            # an iterate in the caller's units; GMRES's 'pr_norm' value (a 0-d NumPy scalar,
            # relative: no units) as it is
            return user_callback(problem.unscale(xk) if getattr(xk, "ndim", 0) else xk)
        keep_period(callback, user_callback)
    rel_tol = problem.tol / problem.bnrm if problem.bnrm else problem.rtol

    def finish(x64, info, count, iters, hist, true, setup, solve, escalations, pol, extra="",
               x_lo=None, at_floor=False):
        x = problem.answer(x64)
        if info == 0 and problem.b_exp and not all_finite(x, np if on_host(x) else problem.xp):
            # the scaled iterate met the tolerance, but x itself does not exist in FP64
            info, extra, true = max(count, 1), OVERFLOWED, np.inf
        elif info == 0 and problem.b_exp < 0 and x.dtype.itemsize >= problem.hp.itemsize:
            # scaled back down, x may have lost bits (subnormal or zero entries): judge
            # the x returned -- scaled up again, exactly -- on the scaled system (an FP32
            # answer's rounding is answer_residual's to judge)
            lost = _underflowed(problem, x, x64)
            if lost is not None and lost > problem.tol:
                info, extra, true = max(count, 1), UNDERFLOWED, lost
        if x_lo is not None and x.dtype == problem.hp:
            x_lo = problem.answer(x_lo).copy()
        else:
            x_lo = None
        rel = true / problem.bnrm if problem.bnrm else true
        fields = report_fields(problem, method, precond_name) if report is None else \
            dict(report, precond_stats=dict(report["precond_stats"]))
        residuals = np.array(hist, dtype=np.float64) if hist else np.empty(0)
        if hist:
            residuals /= problem.bnrm or 1.0
        return SolveResult(
            x=x, info=int(info), iterations=int(iters), residuals=residuals,
            true_residual=float(rel), tolerance=float(rel_tol), setup_time=setup,
            solve_time=solve, status=status_text(info, iters, rel, rel_tol, extra),
            precision=pol.name, escalations=escalations,
            restarts=max(0, int(count) - 1) if method == "gmres" else 0, x_lo=x_lo,
            at_floor=bool(at_floor), **fields)

    if n == 0 or problem.bnrm == 0.0:
        # SciPy: a zero right-hand side (or an empty system) has the solution 0
        return finish(problem.xp.zeros(n, problem.hp), 0, 0, 0, [], 0.0, time.perf_counter() - t0, 0.0, [], policy,
                      "zero right-hand side" if n else "empty system")

    escalations = []

    def realise(policy, done):
        """``make_system`` for ``policy`` -- or, when its data do not fit (FP32 range),
        for the first stronger policy whose data do."""
        while True:
            try:
                return policy, system_for(problem, policy)
            except PrecisionRangeError as err:
                nxt = past_range_error(policy, err) if escalate else None
                if nxt is None:
                    raise
                escalations.append(Escalation(done, policy.name, nxt.name, f"setup: {err}",
                                              float("nan")))
                policy = nxt

    check_basis(method, problem, policy)
    policy, sys = realise(policy, 0)
    if method == "cg" and not problem.reused:    # (a Solver checks at set-up and update)
        check_cg_preconditioner(problem)         # M is set up by now
    setup_time = time.perf_counter() - t0

    t1 = time.perf_counter()
    ws = problem.workspace
    x64 = ws.get("x64", n, problem.hp)
    if problem.x0_mode == "given":
        x64[:] = problem.x0_64
    elif problem.x0_mode == "Mb":
        if sys.psolve is None:
            x64[:] = problem.b64
        else:
            z = ws.get("Mb", n, sys.dtype)
            sys.psolve(sys.b, z)               # x0 = M b
            x64[:] = z
    else:
        x64.fill(0)
    r64 = ws.get("r64", n, problem.hp)
    hist = []
    count = iters = 0
    budget = problem.maxiter
    flag, true = 1, np.inf
    x_lo = None
    tol, room = problem.tol, 3       # (room: tightenings left for a rounded answer)
    while True:
        # a policy that cannot reach the tolerance even in exact arithmetic is skipped
        if escalate and rel_tol < policy.floor and policy.stronger() is not None:
            nxt = policy.stronger()
            true = problem.true_residual(x64, r64)
            escalations.append(Escalation(iters, policy.name, nxt.name,
                                          f"requested rtol {rel_tol:.1e} is below the "
                                          f"accuracy floor {policy.floor:.1e} of {policy.name}",
                                          true / problem.bnrm))
            policy, sys = realise(nxt, iters)
            continue
        range_error = None
        x_lo = None                            # the low part of a double-double x
        stage_kw = capped(body_kw, iters)   # an inner-iteration cap spans the stages
        try:
            if policy.inner is not None:
                c, it, flag, true = refine_stage(body, problem, policy, x64, budget - count,
                                                 callback, hist, stage_kw, r64)
            elif policy.residual == "dd" and dd_supported(problem):
                # x double-double, residual by Dot2: refinement in three precisions
                c, it, flag, true = dd_stage(body, sys, x64, budget - count, callback, hist,
                                             stage_kw, r64)
                x_lo = ws.get("dd_xl", n, problem.hp)
            else:
                c, it, flag, true = krylov_stage(body, sys, x64, budget - count, callback, hist,
                                                 stage_kw, r64)
        except PrecisionRangeError as err:  # the inner policy's FP32 copy did not fit
            if not escalate:
                raise
            range_error, c, it, flag = err, 0, 0, 3
            true = problem.true_residual(x64, r64)
        count += c
        iters += it
        if flag == 0:
            if judge_answer and room and count < budget:
                # x is returned rounded to float32 (complex64) data's dtype: where that
                # rounding takes the answer's residual over the tolerance although the
                # tolerance is well above it (rtol 1e-6 on float32 data: an FP64 iterate at
                # 0.998e-6, rounded 1.004e-6), iterate on to a tolerance that leaves room
                t = answer_residual(problem, x64)
                if t is not None and t > tol and t - true < 0.5 * tol:
                    room -= 1
                    problem.tol = max(tol - 2.0 * (t - true), 0.25 * tol)
                    continue
            break
        # a breakdown or a non-finite value where the iteration's own arithmetic is FP32
        # may be FP32's (a dot product under- or overflowed: b ~ 1e-20 made CG's r.z
        # zero in FP32 and read as "A not definite"): a stronger policy tells
        stuck = flag in (2, 3) or (flag in LOW_BREAKDOWNS and _low_working(policy))
        nxt = None
        if escalate and stuck and count < budget and capped(body_kw, iters) is not None:
            nxt = past_range_error(policy, range_error) if flag == 3 else policy.stronger()
        if nxt is None:
            break
        reason = {2: "the true residual stagnated above the tolerance (recursive and true "
                     "residual drifted apart)",
                  3: f"setup: {range_error}",
                  -14: "a non-finite value appeared in float32"}.get(
                      flag, f"breakdown {flag} in float32 arithmetic (its range or rounding "
                            "may be the cause)")
        escalations.append(Escalation(iters, policy.name, nxt.name, reason, true / problem.bnrm))
        policy, sys = realise(nxt, iters)
    problem.tol = tol
    solve_time = time.perf_counter() - t1

    if true <= problem.tol:
        info = 0
    elif flag < 0:
        info = flag
    else:
        info = max(count, 1)
    extra = ""
    if getattr(sys, "diverged", False) and info != 0:
        extra = "the iteration diverged; the starting x is returned"
    elif getattr(sys, "replayed", 0) and info != 0:
        extra = (f"the iteration ended far above its smallest residual: x is its iterate "
                 f"of iteration {sys.replayed}, recomputed")
    if flag == USER_STOP and info != 0:
        extra = "stopped by the callback"
    far = False
    if flag == 2 and info > 0:
        far = far_above_floor(problem, policy, x64, true)
        if far:
            extra = (f"stagnated far above the accuracy floor of precision {policy.name!r}: "
                     "the iteration's own residual met the tolerance and the true one did "
                     "not, or stopped falling (with M on the left: M r ~ 0 for a nonzero r, "
                     "a singular, very ill-conditioned or badly scaled preconditioner; "
                     "GMRES with side='right' minimises r itself)")
        else:
            extra = ("stagnated at the accuracy floor of precision " + repr(policy.name)
                     + ("" if escalate else "; escalate=True would switch to a stronger "
                        "policy"))
    if flag == FP64_ROUNDING and info > 0:
        extra = ("the tolerance is below FP64's rounding of b - A x at this x: " + DD_MET +
                 " rounded to float64, as close as float64 holds it (the low part in "
                 "SolveResult.x_lo)")
    if info != 0 and flag != USER_STOP:
        # the preconditioner's own word on a failed solve (ILU(0): unstable factors)
        why = getattr(problem.M_user, "diagnose", None)
        why = why(problem.A_csr) if callable(why) and isinstance(
            problem.M_user, Preconditioner) else None
        if why:
            extra = f"{extra}; {why}" if extra else why
    if info == 0 and judge_answer:
        t = answer_residual(problem, x64)
        if t is not None:
            true = t
            if t > problem.tol:
                info = max(count, 1)
                extra = rounded_text(problem.out_dtype, t / problem.bnrm)
    return finish(x64, info, count, iters, hist, true, setup_time,
                  solve_time, escalations, policy, extra, x_lo=x_lo,
                  at_floor=info > 0 and (flag == FP64_ROUNDING or (
                      flag == 2 and not far and policy.stronger() is None)))


#: What the status of a solve whose double-double answer met the tolerance says of it.
DD_MET = "x is the double-double answer (which meets it)"


#: A stagnation (flag 2) is "at the accuracy floor" unless the true residual is over this
#: many times the floor estimate of :func:`far_above_floor`.
FAR_ABOVE = 1e3


#: Breakdowns that escalate a policy whose iteration runs in FP32 (:func:`_low_working`):
#: BiCGSTAB's rho and omega, CG's curvature, non-finite values.
LOW_BREAKDOWNS = (-10, -11, -12, -14)


def _low_working(policy) -> bool:
    """FP32 (complex64) in the iteration's own arithmetic: the working vectors or ``A``'s
    products, of the policy or of its inner solves (``ir``)."""
    parts = (policy, policy.inner) if policy.inner is not None else (policy,)
    return any(np.finfo(np.dtype(d)).eps > 2.0**-30
               for p in parts for d in (p.working, p.matrix) if d)


def far_above_floor(problem, policy, x64, true) -> bool:
    """Whether the true residual ``true`` of a stagnated iteration is over :data:`FAR_ABOVE`
    times ``(m + 1) u ||v||``: the rounding an evaluation of ``b - A x`` in the policy's
    coarsest precision (unit roundoff ``u``, of its working, matrix and preconditioner
    dtypes) can leave, ``v = |b| + |A| |x|`` and ``m`` the longest row (FP64's
    :meth:`~mpsolve._system.Problem.residual_bound`, scaled by ``u / u_64``).  Below it, the
    iteration stopped where its precision stops it; far above it, the recursive residual
    met the tolerance for another reason: with ``M`` on the left, GMRES minimises ``||M
    r||``, which a singular ``M`` makes small for a large ``r``.  An operator without
    entries has no bound: never far (the floor's wording stays)."""
    if problem.A_csr is None:
        return False
    u = max(float(np.finfo(np.dtype(d)).eps)
            for d in (policy.working, policy.matrix, policy.precond) if d)
    bound = problem.residual_bound(x64)
    return bool(true > FAR_ABOVE * bound * (u / _EPS64))
