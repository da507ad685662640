"""Several right-hand sides: ``b`` of shape ``(n, k)`` in :func:`mpsolve.solve` and
:meth:`mpsolve.Solver.solve`.

**The block path** (CG and GMRES(m) where :func:`together` says it pays -- on the CPU CG
from :data:`BLOCK_CG_MIN_N` unknowns, ``MPSOLVE_BLOCK=1`` wherever it applies; policies
whose working precision is FP64 with native reductions -- ``double``, ``mixed`` --, a
real sparse ``A``, no callback): the ``k``
systems iterate together (:mod:`mpsolve.krylov.block_cg`, :mod:`.krylov.block_gmres`):
each product with ``A`` is one SpMM sweep over its stored copy (FP32 where the policy
stores ``A`` in FP32), each preconditioner apply one sweep over the preconditioner's
stored operators where it has a block kernel (:meth:`Preconditioner.apply_block`: Jacobi,
ILU(0), ISAI; the others column by column), and the columns have their own scalars.
Columns leave the block as they converge (deflation).  Around the block bodies the
driver applies :mod:`mpsolve.driver`'s rules *per column*: when a column's recursive
residual says "converged", its FP64 true residual ``||b_c - A x_c||`` is computed (one
sweep for all such columns, :meth:`SparseOperator.bind_block_residual`); a column that
misses its tolerance restarts from its true residual (residual replacement); one whose
true residual stops halving is handed to the single-vector driver from its current
``x_c`` (which escalates to a stronger policy as a single solve does), and so is one that
breaks down (curvature, a singular Hessenberg, a non-finite value: the block bodies' dots
and norms are not guarded against under- and overflow as the single path's are, so an
``A`` or ``M`` far from norm 1 can read as one there), from its start with the whole
budget (the single solve itself); a column that ends 100x above its start gets its
starting ``x`` back.  ``info_c == 0`` only when
``||b_c - A x_c|| <= max(atol, rtol ||b_c||)`` in FP64.

**The column path** (everything else: BiCGSTAB, the ``eft``/``mixed-eft``/``ir``/``single``
/``-cb`` presets, complex systems, a ``LinearOperator`` ``A``, a callback, ``x0='Mb'``,
devices without the block kernels, and on the CPU GMRES and CG below
:data:`BLOCK_CG_MIN_N` unknowns): the single-vector solve on each column in turn, with the
set-up done once (a :class:`mpsolve.Solver`), its compiled whole-loop and two-thread
kernels.

The result is one :class:`~mpsolve.result.SolveResult`: ``x`` of shape ``(n, k)``, the
per-column figures in ``column_info``, ``column_iterations`` and
``column_true_residual``, and the scalar fields summarising them: ``info`` is 0 when
every column converged, else a failing column's code (a breakdown code, which is
negative, before a positive count); ``iterations`` is the largest column count (the
number of block sweeps, without deflation); ``true_residual`` the largest relative true
residual; ``residuals`` per iteration the largest estimate among the active columns.
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import scipy.sparse as sp

from ._demote import PrecisionRangeError
from ._sparse import dtype_check, kernel_ready
from ._system import (STAGNATION, _check_maxiter, _check_tol, _fusable_is_apply, refuse_sparse,
                      system_for)
from .backend import is_host, on_host, to_device, to_host
from .kernels.primitives import BlockPrimitives, bind_block_primitives
from .kernels.safenorm import norm
from .krylov.block_cg import block_cg_body
from .krylov.block_gmres import block_gmres_body
from .precond.base import Preconditioner
from .result import USER_STOP, SolveResult, keep_period, status_text, wants_stop
from .refine import REPLAY_GAIN

__all__ = ["BLOCK_BODIES", "BlockSystem", "solve_block", "check_block"]

#: The methods with a block body; the others run column by column.
BLOCK_BODIES = {"cg": block_cg_body, "gmres": block_gmres_body}

#: On a host device the columns of a CG solve are iterated together from this many unknowns
#: on; GMRES's never by default (``MPSOLVE_BLOCK``: :func:`together`).
BLOCK_CG_MIN_N = 500_000


def together(method: str, n: int, device: str) -> bool:
    """Whether ``k`` columns of a ``method`` solve of ``n`` unknowns on ``device`` are iterated
    together (the block bodies) rather than one after the other -- by measurement, where
    each is faster.  On the CPU the single-vector loops run compiled as a whole and on two
    threads (the team loops), the block kernels per iteration from Python and on one
    thread below ``PARALLEL_MIN`` entries: k = 4 columns took 2-5x the time of four
    separate solves from 400 to 40000 unknowns (CG + Jacobi and GMRES + ILU(0),
    ``mixed``); at 10^6 block CG gained 10% on separate solves and block GMRES lost 15%
    (``bench/results/multi_rhs.md``).  So: CG from :data:`BLOCK_CG_MIN_N` unknowns, GMRES
    never, on the host devices; a GPU always (one SpMM for k SpMVs).
    ``MPSOLVE_BLOCK=1`` iterates together wherever the block bodies apply, ``0`` never."""
    setting = os.environ.get("MPSOLVE_BLOCK", "auto")
    if setting in ("0", "1"):
        return setting == "1"
    if setting != "auto":
        raise ValueError(f"MPSOLVE_BLOCK={setting!r}: use 1 (iterate the columns together), "
                         "0 (one after the other) or auto (unset: where it pays)")
    if not is_host(device):
        return True
    return method == "cg" and n >= BLOCK_CG_MIN_N

#: How converged columns leave the active block (:mod:`mpsolve.krylov.block_cg`).
DEFLATIONS = ("compact", "mask")


@dataclass
class BlockSystem:
    """What a block body calls: the block kernels bound once per solve."""

    ops: BlockPrimitives
    matvec: Callable                  # f(X, Y): Y = A X, one sweep (A at the policy's precision)
    psolve: Optional[Callable]        # f(R, Z): Z = M R (None: no preconditioner)
    residual: Callable                # f(X, B, R): R = B - A X, FP64 row sums
    bnrm: np.ndarray                  # ||b_c|| of the block's columns
    matvec_dot: Optional[Callable] = None   # f(X, Y, out): Y = A X, out_c = X_c . Y_c, fused
    pdiag: Optional[object] = None    # M's diagonal where psolve is Z = diag(d) R (Jacobi)


def check_block(b, n, name="b"):
    """``b`` as a host ``(n, k)`` array, checked as :func:`mpsolve._system.make_problem`
    checks a vector (numeric dtype, finite values); every rejection names ``name``."""
    refuse_sparse(b, name)
    arr = kernel_ready(b if type(b) is np.ndarray else to_host(b))
    if arr.dtype == object:
        raise TypeError(f"{name} holds Python objects (dtype object): pass a numeric array, "
                        f"for example np.asarray({name}, dtype=np.float64)")
    if arr.ndim != 2 or arr.shape[0] != n:
        raise ValueError(f"{name} has shape {np.shape(b)}, but A is {n}x{n}: several "
                         f"right-hand sides are a 2-D array of shape ({n}, k)")
    dtype_check(arr.dtype, name)
    if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise ValueError(f"{name} contains {bad} NaN or Inf value(s)")
    return arr


def _check_x0(x0, n, k):
    """``x0`` for ``k`` columns: ``None``, ``'Mb'``, an ``(n,)`` start shared by every
    column, or one start per column ``(n, k)``."""
    if x0 is None or isinstance(x0, str):
        if isinstance(x0, str) and x0 != "Mb":
            raise ValueError(f"x0={x0!r}: the only string accepted is 'Mb' (start from M @ b)")
        return None
    if sp.issparse(x0):
        return check_block(x0, n, "x0")          # (refused: a sparse matrix)
    arr = x0 if type(x0) is np.ndarray else to_host(x0)
    if (arr.ndim == 1 or (arr.ndim == 2 and arr.shape[1] == 1 and k != 1)) and \
            arr.shape[0] == n:                   # one start: checked, then copied k times
        return np.repeat(check_block(arr.reshape(-1, 1), n, "x0"), k, axis=1)
    if arr.shape != (n, k):
        raise ValueError(f"x0 has shape {np.shape(x0)}, but b has shape ({n}, {k}): x0 must "
                         f"have shape ({n},) (one start for every column) or ({n}, {k})")
    return check_block(arr, n, "x0")


def _worst(infos) -> int:
    """The scalar ``info`` of several columns: 0 when all converged, else the first
    breakdown code (negative), else the largest count."""
    infos = np.asarray(infos)
    neg = infos[infos < 0]
    if neg.size:
        return int(neg[0])
    return int(infos.max()) if infos.size else 0


def solve_block(solver, b, x0=None, *, rtol, atol, maxiter, callback=None,
                deflation="compact", t0=None) -> SolveResult:
    """Solve ``A X = B`` for the ``k`` columns of ``b`` with ``solver``'s set-up (see the
    module docstring).  ``deflation``: ``"compact"`` or ``"mask"`` (block path only)."""
    t0 = time.perf_counter() if t0 is None else t0
    problem = solver._problem
    n = problem.n
    if deflation not in DEFLATIONS:
        raise ValueError(f"deflation={deflation!r}: use 'compact' or 'mask'")
    bh = check_block(b, n, "b")
    k = bh.shape[1]
    x0h = _check_x0(x0, n, k)
    if bh.dtype.kind == "c" and not problem.is_complex:
        # (as each column's solve refuses it: k = 0 answered a complex x)
        raise TypeError("b is complex, but this solver was set up for a real system: "
                        "create it with a complex A to solve complex right-hand sides")
    if x0h is not None and x0h.dtype.kind == "c" and not problem.is_complex:
        raise TypeError("x0 is complex, but this solver was set up for a real system: "
                        "create it with a complex A to solve from a complex start")
    rtol = _check_tol(rtol, "rtol")
    atol = _check_tol(atol, "atol")
    maxiter = _check_maxiter(maxiter, solver._maxiter)
    cycles = solver._block_cycles(maxiter)    # (maxiter itself but under auto's GMRES)
    plan = _block_plan(solver, bh, x0, callback) if cycles else None
    if plan is None:
        return _by_columns(solver, b, bh, x0, x0h, rtol, atol, maxiter, callback, t0)
    return _run_block(solver, plan, bh, x0h, rtol, atol, cycles, deflation, t0, on_host(b),
                      budget=maxiter if cycles != maxiter else None)


# ------------------------------------------------------------------ the column path
def _by_columns(solver, b, bh, x0, x0h, rtol, atol, maxiter, callback, t0):
    k = bh.shape[1]
    host = on_host(b)
    results = []
    stopped = []                          # the callback asked to stop (a column may still
    if callback is not None:              # have converged at that call: info 0)
        user = callback

        def callback(xk):
            ret = user(xk)
            if wants_stop(ret):
                stopped.append(True)
            return ret
        keep_period(callback, user)
    for c in range(k):
        bc = np.ascontiguousarray(bh[:, c]) if host else b[:, c]
        xc = x0 if (x0 is None or isinstance(x0, str)) else np.ascontiguousarray(x0h[:, c])
        if stopped:
            # the callback stopped the solve: the columns after it are not run (they keep
            # their start), as a single solve stops where its callback says
            results.append(_not_run(solver, results[-1], bc, xc, rtol, atol))
            continue
        # (inside the caller's Solver.solve already: its lock is held)
        results.append(solver._solve(bc, xc, rtol, atol, maxiter, callback, "compact"))
    xs = [r.x for r in results]
    if host:
        x = np.column_stack(xs) if k else np.zeros((bh.shape[0], 0), _empty_dtype(solver, bh))
    else:
        import importlib

        xp = importlib.import_module(type(xs[0]).__module__.split(".")[0])
        x = xp.stack(xs, axis=1)
    return _combine(solver, results, x, "by column", time.perf_counter() - t0)


def _empty_dtype(solver, bh):
    """``x``'s dtype for ``k = 0`` right-hand sides: a single solve's (complex where ``A``
    or ``b`` is; long double answered in FP64)."""
    dt = np.result_type(solver._a_dtype(), bh.dtype if bh.dtype.kind in "fc" else np.float64)
    if dt.kind == "c":
        return dt if dt.itemsize <= 16 else np.dtype(np.complex128)
    return dt if dt.itemsize <= 8 else np.dtype(np.float64)


def _not_run(solver, like, b, x0, rtol, atol):
    """The result of a column a callback's stop left unsolved: ``x`` its start (``x0``, or
    0; ``M b`` is not formed), no iterations, the start's FP64 relative residual (0 for
    ``b = 0``), ``info`` :data:`USER_STOP` -- or 0 where the start meets the tolerance
    (``b = 0``: ``x = 0``), as a single solve stopped by its callback reports it."""
    problem = solver._problem
    xp, hp = problem.xp, problem.hp
    dt = like.x.dtype
    x = xp.zeros(b.shape[0], dt) if x0 is None or isinstance(x0, str) else \
        xp.asarray(x0).astype(dt)
    b64 = xp.ascontiguousarray(xp.asarray(b), dtype=hp)
    r = xp.empty_like(b64)
    # r = b - A x by the operator's own FP64 residual (on the problem's device)
    problem.A64.bind_residual(hp)(xp.ascontiguousarray(x, dtype=hp), b64, r)
    bnrm, rnrm = float(norm(b64, xp)), float(norm(r, xp))
    rel = rnrm / bnrm if bnrm else 0.0
    met = rnrm <= max(atol, rtol * bnrm)
    return SolveResult(x=x, info=0 if met else USER_STOP, iterations=0,
                       residuals=np.zeros(0), true_residual=rel, tolerance=like.tolerance,
                       setup_time=0.0, solve_time=0.0,
                       status="not run: the callback stopped the solve" + (
                           "; its start meets the tolerance" if met else ""),
                       method=like.method, precision=like.precision)


def _combine(solver, results, x, mode, elapsed, hist=None, extra=""):
    infos = np.array([r.info for r in results], np.int64)
    iters = np.array([r.iterations for r in results], np.int64)
    trues = np.array([r.true_residual for r in results])
    info = _worst(infos)
    k = len(results)
    solve_time = float(sum(r.solve_time for r in results))
    conv = int((infos == 0).sum())
    head = results[0] if results else None
    rel_tol = max((r.tolerance for r in results), default=0.0)
    true = float(trues.max()) if k else 0.0
    status = (f"{conv} of {k} right-hand sides converged ({mode}); " +
              status_text(info, int(iters.max()) if k else 0, true, rel_tol, extra))
    escal = [e for r in results for e in r.escalations]
    if hist is None:
        hist = results[int(np.argmax(iters))].residuals if k else np.zeros(0)
    fields = dict(solver._report)
    fields["precond_stats"] = dict(fields.get("precond_stats", {}))
    # at the floor: every column that did not converge is at its precision's floor
    floor = info != 0 and all(r.at_floor for r in results if r.info != 0)
    return SolveResult(
        x=x, info=info, iterations=int(iters.max()) if k else 0, residuals=np.asarray(hist),
        true_residual=true, tolerance=rel_tol, setup_time=max(0.0, elapsed - solve_time),
        solve_time=solve_time, status=status,
        precision=head.precision if head is not None else solver.precision.name,
        escalations=escal, restarts=int(sum(r.restarts for r in results)),
        column_info=infos, column_iterations=iters, column_true_residual=trues,
        rhs_mode=mode, at_floor=bool(floor), **fields)


# ------------------------------------------------------------------ the block path
def _data_dtype(solver, bh) -> np.dtype:
    """The data dtype of a real block solve (``x``'s dtype, as a single solve's: long
    double data are answered in FP64, as SciPy answers them)."""
    dt = np.dtype(np.result_type(solver._a_dtype(), bh.dtype if bh.dtype.kind == "f"
                                 else np.float64))
    return dt if dt.itemsize <= 8 else np.dtype(np.float64)


def _block_plan(solver, bh, x0, callback):
    """The bound block kernels ``(body, body_kw, policy, sys, BlockSystem)``, or ``None``
    when this solve runs column by column (the module docstring's list)."""
    problem = solver._problem
    if (solver.method not in BLOCK_BODIES or callback is not None or isinstance(x0, str)
            or not together(solver.method, problem.n, problem.device)
            or problem.A_csr is None or problem.is_complex or bh.dtype.kind == "c"
            or bh.shape[1] == 0 or solver._body_kw.get("max_inner") is not None):
        return None
    policy = solver._policy_for(_data_dtype(solver, bh))
    if (policy.inner is not None or policy.residual == "dd" or policy.dot != "native"
            or policy.compressed or np.dtype(policy.working) != np.float64):
        return None
    try:
        sys = system_for(problem, policy)
    except PrecisionRangeError:
        return None                       # the single path escalates, column by column
    wdt = sys.dtype
    try:
        ops = bind_block_primitives(problem.device, wdt)
        matvec = sys.A_op.bind_block(wdt, wdt)
        matvec_dot = getattr(sys.A_op, "bind_block_dot", lambda dt: None)(wdt)
        residual = problem.A64.bind_block_residual(wdt)
    except (KeyError, AttributeError):
        return None
    if matvec is None:
        return None
    psolve = _block_psolve(sys, wdt)
    pdiag = _block_diagonal(sys) if psolve is not None else None
    body_kw = {key: v for key, v in solver._body_kw.items() if key in ("restart", "side")}
    return (BLOCK_BODIES[solver.method], body_kw, policy, sys,
            BlockSystem(ops=ops, matvec=matvec, psolve=psolve, residual=residual,
                        bnrm=np.zeros(0), matvec_dot=matvec_dot, pdiag=pdiag))


def _block_diagonal(sys):
    """The stored diagonal ``d`` of a preconditioner whose apply is ``z = d * r`` (its
    :meth:`~mpsolve.precond.base.Preconditioner.fusable` description, where that describes
    its ``apply``): block CG then forms ``z`` inside its vector passes instead of storing
    it.  ``None`` for any other ``M``."""
    M = sys.M_obj
    if not isinstance(M, Preconditioner) or not _fusable_is_apply(M):
        return None
    desc = M.fusable()
    if desc is None or desc[0] != "diag":
        return None
    return desc[1][0]


def _block_psolve(sys, wdt):
    """``Z = M R`` on blocks: the preconditioner's :meth:`apply_block`, a stored matrix's
    block kernel, or (a user's operator) its apply on each column in turn."""
    M = sys.M_obj
    if sys.psolve is None:
        return None
    if isinstance(M, Preconditioner) and (M.dtype.kind == "c" or wdt.kind != "c"):
        return M.apply_block              # (a real M on complex data: by column, split)
    f = getattr(M, "bind_block", lambda *a: None)(wdt, wdt)
    if f is not None:
        return f
    one = sys.psolve
    scratch = {}

    def by_column(R, Z):
        bufs = scratch.get(R.shape[0])
        if bufs is None:
            bufs = scratch[R.shape[0]] = (np.empty(R.shape[0], R.dtype),
                                          np.empty(R.shape[0], Z.dtype))
        r, z = bufs
        for c in range(R.shape[1]):
            r[:] = R[:, c]
            one(r, z)                     # z = M r
            Z[:, c] = z

    return by_column


#: Column norms the block bodies take: their dots (p.Ap, r.z, ||r||^2, unguarded) stay
#: hundreds of binary orders from FP64's under- and overflow (a column of norm 1e-150 met
#: CG's curvature test at p.Ap ~ 1e-300; one of 1e-170 read as zero: x = 0, "converged").
_BLOCK_RANGE = (2.0**-100, 2.0**100)


def _column_norms(ops, B, xp):
    """``||B[:, c]||_2`` of each column, the fast column dots where they are in range, the
    overflow- and underflow-safe norm (:func:`mpsolve.kernels.safenorm.norm`) where the
    squares may have left FP64's range (a column of norm below 1e-154 squares to 0)."""
    k = B.shape[1]
    out = np.zeros(k)
    ops.col_dot(B, B, out)
    np.sqrt(out, out=out)
    for c in np.flatnonzero(~((out >= 2.0**-400) & (out <= 2.0**400))):
        out[c] = norm(xp.ascontiguousarray(B[:, c]), xp)
    return out


def _certified(problem, t, x, b, tol):
    """Column ``x``'s residual norm ``t`` as :meth:`mpsolve._system.Problem.certified`
    judges it (the rounding bound of the FP64 residual added where it matters)."""
    xp = problem.xp
    return problem.certified(t, xp.ascontiguousarray(x), xp.ascontiguousarray(b), tol)


def _run_block(solver, plan, bh, x0h, rtol, atol, maxiter, deflation, t0, host, budget=None):
    """``maxiter``: the block method's (cycles for GMRES); ``budget``: the Solver's own
    count of iterations where that differs (auto's GMRES counts inner iterations: the
    block runs the whole cycles that fit, a column they leave unconverged gets the rest
    by the single path)."""
    body, body_kw, policy, sys, bsys = plan
    problem = solver._problem
    xp = problem.xp
    n, k = bh.shape
    B = xp.array(to_device(bh, problem.device), dtype=np.float64, order="C")
    X = (xp.zeros((n, k), np.float64) if x0h is None else
         xp.array(to_device(x0h, problem.device), dtype=np.float64, order="C"))
    R = xp.empty((n, k), np.float64)
    ops = bsys.ops
    bnrm = _column_norms(ops, B, xp)
    xnrm = None if x0h is None else _column_norms(ops, X, xp)
    lo, hi = _BLOCK_RANGE
    if not (np.all((bnrm == 0) | ((bnrm >= lo) & (bnrm <= hi))) and
            (xnrm is None or np.all(xnrm <= hi))):
        # a column far from norm 1 (or a start far from it): the block's dots are not
        # guarded against under- and overflow as the single path's are (which also scales
        # b outside its range): every column by the single path
        return _by_columns(solver, bh, bh, None if x0h is None else x0h, x0h, rtol, atol,
                           solver._from_cycles(maxiter) if budget is None else budget, None,
                           t0)
    zero = bnrm == 0
    tol = np.maximum(atol, np.where(zero, 0.0, rtol * np.where(zero, 1.0, bnrm)))  # (inf rtol)
    X[:, zero] = 0.0                      # SciPy: a zero right-hand side has the solution 0
    setup = time.perf_counter() - t0
    t1 = time.perf_counter()
    count = np.zeros(k, np.int64)
    iters = np.zeros(k, np.int64)
    info = np.zeros(k, np.int64)
    final = zero.copy()
    diverged = np.zeros(k, bool)
    straggle = []
    broke = set()                         # stragglers run again from their start
    hist = []
    true = np.zeros(k)
    last_true = np.full(k, np.inf)
    X_start = X.copy()
    bsys.residual(X, B, R)                # R = B - A X
    ops.col_dot(R, R, true)
    np.sqrt(true, out=true)
    true[zero] = 0.0
    for c in np.flatnonzero((true <= tol) & ~zero):    # a start that meets tol: certified
        true[c] = _certified(problem, true[c], X[:, c], B[:, c], tol[c])
    start_true = true.copy()
    final |= true <= tol
    act = np.flatnonzero(~final)
    while act.size:
        whole = act.size == k
        Xa = X if whole else xp.ascontiguousarray(X[:, act])
        Ra = R if whole else xp.ascontiguousarray(R[:, act])
        Ba = B if whole else xp.ascontiguousarray(B[:, act])
        sub = dataclasses.replace(bsys, bnrm=bnrm[act])
        c_, it_, fl = body(sub, Xa, Ra, Ba, maxiter - count[act], tol[act], hist,
                           deflation=deflation, **body_kw)
        count[act] += c_
        iters[act] += it_
        finite = xp.isfinite(Xa).all(axis=0)
        finite = to_host(finite) if not isinstance(finite, np.ndarray) else finite
        for i in np.flatnonzero(~finite):
            Xa[:, i] = X_start[:, act[i]]  # never hand back a non-finite x
            fl[i] = -14
        bsys.residual(Xa, Ba, Ra)         # R = B - A X in FP64: the true residuals
        ta = np.empty(act.size)
        ops.col_dot(Ra, Ra, ta)
        np.sqrt(ta, out=ta)
        if not whole:
            X[:, act] = Xa
            R[:, act] = Ra
        for i, c in enumerate(act):
            t = ta[i]
            if t <= tol[c]:
                t = _certified(problem, t, Xa[:, i], Ba[:, i], tol[c])
            true[c] = t
            if t <= tol[c]:
                final[c], info[c] = True, 0
            elif fl[i] == 2:
                # the body's floor (GMRES: a happy breakdown with a regular R that no
                # longer helps): as a stagnation
                if solver.escalate and policy.stronger() is not None:
                    straggle.append(c)
                final[c], info[c] = True, max(int(count[c]), 1)
            elif fl[i] < 0 and fl[i] != USER_STOP:
                # a breakdown: the block's dots and norms are not guarded against under-
                # and overflow as the single path's are (an A or M far from norm 1 reads
                # as singular, indefinite or non-finite there): the single path says
                # whether it is one -- from the column's start, with the whole budget, so
                # that it is the single solve (the columns iterate independently: a CG
                # breakdown comes back at the same iteration; from x_c a short budget
                # left ran out first and hid it as "maxiter")
                broke.add(c)
                straggle.append(c)
                final[c], info[c] = True, fl[i]
            elif fl[i] == 1 and budget is not None and budget > int(iters[c]):
                straggle.append(c)        # the inner iterations the cycles left
                final[c], info[c] = True, max(int(count[c]), 1)
            elif fl[i] != 0 or count[c] >= maxiter:
                if t > REPLAY_GAIN * start_true[c]:     # diverged: the starting x back
                    X[:, c] = X_start[:, c]
                    true[c] = start_true[c]
                    R[:, c] = 0.0
                    diverged[c] = True
                final[c] = True
                info[c] = fl[i] if fl[i] < 0 else max(int(count[c]), 1)
            elif t > STAGNATION * last_true[c]:
                # the true residual stopped improving: the precision's floor
                if solver.escalate and policy.stronger() is not None:
                    straggle.append(c)
                final[c], info[c] = True, max(int(count[c]), 1)
            else:
                last_true[c] = t          # replaced: the next round starts from R = B - A X
        act = np.flatnonzero(~final)
    out_dt = _data_dtype(solver, bh)
    if out_dt.itemsize < 8:
        # float32 data get X in float32, as a single solve's x: a column is judged as it is
        # returned, rounded (a rounding that takes it over its tolerance: the single path
        # iterates on from it, leaving room for the rounding)
        Xr = X.astype(out_dt).astype(np.float64)
        bsys.residual(Xr, B, R)
        true_r = np.zeros(k)
        ops.col_dot(R, R, true_r)
        np.sqrt(true_r, out=true_r)
        for c in np.flatnonzero((info == 0) & ~zero):
            t = _certified(problem, true_r[c], Xr[:, c], B[:, c], tol[c])
            if t <= tol[c]:
                true[c] = t
            elif c not in straggle:
                straggle.append(c)
    solve_time = time.perf_counter() - t1
    results = []
    escal = {}
    # the block's method and each straggler's budget in the Solver's units, fixed before
    # the single path runs: a CG breakdown there makes the Solver choose again (GMRES,
    # whose budget auto counts in inner iterations: the conversion would change)
    name = {"cg": "block CG", "gmres": "block GMRES"}[solver.method]
    left = {c: solver._from_cycles(maxiter if c in broke else max(1, maxiter - int(count[c])))
            for c in straggle}
    if budget is not None:                # (the Solver's units: inner iterations)
        left.update({c: budget if c in broke else budget - int(iters[c]) for c in straggle})
    method0 = solver.method
    total = solver._from_cycles(maxiter) if budget is None else budget   # (Solver's units)
    for c in straggle:                    # escalation: the single path from x_c
        # (run again from the start by the same method, the block's iterations are
        # repeated, not added; after auto's switch from CG they are the column's too, and
        # count in its budget)
        again = c in broke
        repeat = again and solver.method == method0
        if left[c] <= 0:
            continue                      # (the budget is spent: the block's answer stays)
        if again and not repeat:
            left[c] = max(1, total - int(iters[c]))
        start = (None if x0h is None else np.ascontiguousarray(x0h[:, c])) if again else \
            np.ascontiguousarray(to_host(X[:, c]))
        r = solver._solve(np.ascontiguousarray(bh[:, c]), start, rtol, atol, left[c], None,
                          "compact")
        X[:, c] = to_device(np.asarray(r.x, np.float64), problem.device)
        if repeat:                        # the single solve itself, counted as it counts
            count[c] = iters[c] = 0
        # (info > 0: the count, the block's included; a single run that iterated none
        # reports 1, max(count, 1))
        info[c] = r.info if r.info <= 0 else max(1, int(count[c]) + (r.info if r.iterations
                                                                      else 0))
        iters[c] += r.iterations
        true[c] = r.true_residual * bnrm[c]
        escal[c] = r
    rel_tol = float(np.max(np.where(bnrm > 0, tol / np.where(bnrm > 0, bnrm, 1.0), rtol)))
    extra = f"{name}, deflation {deflation!r}"
    if solver.method != method0:          # (auto's CG met a breakdown in a column)
        extra += (f"; CG broke down (A is not positive definite): this Solver now runs "
                  f"{solver.method}, which solved column(s) {sorted(int(c) for c in escal)}")
    if diverged.any():
        extra += f"; column(s) {np.flatnonzero(diverged).tolist()} diverged: their starting x " \
                 "is returned"
    for c in range(k):
        rel = true[c] / bnrm[c] if bnrm[c] else 0.0
        r = escal.get(c)
        results.append(dataclasses.replace(
            r, iterations=int(iters[c]), info=int(info[c])) if r is not None else _column_stub(
            info[c], iters[c], rel, rel_tol, policy.name))
    X = X.astype(out_dt, copy=False)
    out = to_host(X) if host else X
    res = _combine(solver, results, out, "block", time.perf_counter() - t0,
                   hist=np.asarray(hist), extra=extra)
    res.setup_time = setup
    res.solve_time = solve_time + sum(r.solve_time for r in escal.values())
    return res


def _column_stub(info, iters, rel, rel_tol, precision):
    """One column's figures in the shape :func:`_combine` reads."""
    return SolveResult(x=None, info=int(info), iterations=int(iters), residuals=np.zeros(0),
                       true_residual=float(rel), tolerance=rel_tol, setup_time=0.0,
                       solve_time=0.0, status="", method="", precision=precision)
