"""A reusable solver: the set-up once, then ``solve(b)`` as often as needed.

``s = Solver(A, method=..., precond=..., precision=...)`` does everything that does not
depend on the right-hand side, once: it checks ``A`` (and ``M``), puts ``A`` in canonical
CSR form on the solve's device, resolves ``method``/``precond`` ``"auto"`` (the analysis
of :mod:`mpsolve.auto`), sets the preconditioner up, stores ``A`` and ``M`` at the
policy's precisions (FP32 copies included), binds their kernels and looks the vector
primitives up (:func:`mpsolve._system.system_for`).  Each :meth:`Solver.solve` then
checks ``b`` (and ``x0``), copies it and runs the same driver as :func:`mpsolve.solve`
(:func:`mpsolve.driver.iterate`) on the stored Systems and the same workspace vectors:
the same iterations and the same answer, bit for bit, as a fresh ``mpsolve.solve`` with
the same arguments (with ``"auto"``: as long as the fresh solve's first candidate is
the one kept here and does not hand over to the next one -- where auto's CG breaks down,
the Solver too leaves it, for good: :meth:`Solver.solve` -- and the policy is not an
iterative refinement, whose correction solves take a share of the iteration budget: the
fresh solve gives its first candidate half of it; the preconditioner keeps the
storage precision of the policy it was set up for, which ``precision=None`` takes from
``A``'s dtype -- an FP32 ``A`` solved with an FP64 ``b`` runs in FP64 with it).

:meth:`Solver.update` takes a new matrix.  With the same sparsity pattern (same shape,
``indptr`` and ``indices`` of the canonical CSR form) only the numeric set-up is redone:
the FP64 operator's values, the FP32 copies (the Systems are made again from the
canonical matrix, so the range checks run again) and the preconditioner's set-up on the
new values (whole: none of mpsolve's preconditioners keeps a separate symbolic phase
yet).  With another pattern (or shape, or a LinearOperator), new values of another kind
(complex for real; with ``"auto"``: values its analysis would choose differently for, such
as a matrix no longer symmetric), or new values that the kept choice cannot take (a zero
pivot, values beyond its FP32 storage), everything is set up again as by the constructor,
``"auto"`` choices included.  :attr:`Solver.last_update`
says which happened.

A Solver's solves share one workspace: calls from several threads run one after another
(a lock), a call from inside a running solve (its callback) is refused; a set-up
preconditioner, shared or not, applies from several threads at once.
"""
from __future__ import annotations

import contextlib
import threading
import time
import warnings

import numpy as np
import scipy.sparse as sp

from ._demote import PrecisionRangeError
from ._sparse import canonical_csr, check_matrix, keep_block_size
from ._system import _check_maxiter, check_basis, make_problem, set_rhs, system_for
from ._configure import (check_cg_preconditioner, check_gmres_options, check_precond,
                         configure, is_auto)
from .backend import on_host, resolve_device
from .driver import _describe as describe, iterate, report_fields
from .krylov import BODIES
from .precision import as_precision, in_field
from .precond._util import PreconditionerWarning
from .precond.base import Preconditioner, setup_for_solve
from .result import SolveResult, status_text

__all__ = ["Solver"]


class Solver:
    """``A x = b`` set up once for many right-hand sides.

    Parameters
    ----------
    A : sparse matrix/array (any format), ndarray or LinearOperator
        The ``n x n`` system matrix, real or complex (never modified); a complex ``A``
        takes complex right-hand sides, a real one refuses them (make the Solver with
        the complex matrix).
    method, precond, precision, restart, side, escalate, device, **precond_params
        As in :func:`mpsolve.solve`.  ``"auto"`` is resolved here, once: the analysis of
        ``A`` orders the candidates (:func:`mpsolve.auto.candidates`) and the first whose
        preconditioner sets up is kept (``choices`` lists them).  Unlike
        :func:`mpsolve.solve`, a kept candidate that stagnates in a solve is not replaced
        by the next one: the result says so (``info``, ``status``).  One exception: CG
        with auto's own (positive definite) preconditioner that breaks down on
        ``p^T A p <= 0`` has shown ``A`` indefinite; the choice is then made again without
        CG, that solve run again with the iterations the call has left, and the new
        choice kept for every later solve (and made afresh by :meth:`update`).
    rtol, atol, maxiter
        Defaults of every :meth:`solve` (each call may override them).  ``maxiter``
        counts as in :func:`mpsolve.solve` for the method run (GMRES: restart cycles),
        default ``10 n``; with ``method="auto"`` it is auto's budget, as in
        :func:`mpsolve.solve`: iterations (GMRES's inner ones, capped exactly), default
        :data:`mpsolve.auto.DEFAULT_AUTO_MAXITER`.

    Attributes
    ----------
    method : str
        The method solves run (``"auto"`` resolved).
    precond : str or None
        The preconditioner's name.
    precision : Precision
        The policy the set-up realised: the one asked for, or a stronger one where its FP32
        copies did not fit (each solve then escalates the same way, and says so in its
        ``escalations``, as a fresh solve does).
    setup_time : float
        Seconds the construction (or the last :meth:`update`) took.
    choices : list of mpsolve.auto.Choice
        ``"auto"``: the candidates considered, the kept one marked ``"chosen"``.
    analysis : dict
        ``"auto"``: what the analysis of ``A`` found.
    last_update : {None, "numeric", "full"}
        What the last :meth:`update` redid.

    Examples
    --------
    >>> import numpy as np
    >>> import mpsolve
    >>> from mpsolve.matrices import poisson2d
    >>> A = poisson2d(16)
    >>> s = mpsolve.Solver(A, method="cg", precond="ilu0", precision="mixed", rtol=1e-10)
    >>> r1 = s.solve(A @ np.ones(A.shape[0]))
    >>> r2 = s.solve(A @ np.arange(A.shape[0], dtype=float))
    >>> r1.converged, r2.converged, s.precond
    (True, True, 'ilu0')
    >>> r3 = mpsolve.solve(A, A @ np.ones(A.shape[0]), method="cg", precond="ilu0",
    ...                    precision="mixed", rtol=1e-10)
    >>> r3.iterations == r1.iterations and bool((r3.x == r1.x).all())
    True
    >>> s.update(2.0 * A).last_update
    'numeric'
    >>> bool(np.allclose(s.solve(A @ np.ones(A.shape[0])).x, 0.5, rtol=1e-8))
    True
    """

    def __init__(self, A, *, method="auto", precond="auto", precision=None, rtol=1e-5,
                 atol=0.0, maxiter=None, restart=None, side=None, escalate=True, device=None,
                 **precond_params):
        self._args = dict(method=method, precond=precond, precision=precision, rtol=rtol,
                          atol=atol, maxiter=maxiter, restart=restart, side=side,
                          escalate=escalate, device=device, precond_params=precond_params)
        self.last_update = None
        #: ``"auto"``'s CG broke down in a solve (its M positive definite, so A is not):
        #: the choice skips CG from then on (:meth:`_switch_from_cg`)
        self._not_pd = False
        # one solve (or update) at a time: they share the stored workspace and Systems;
        # _busy refuses a call from inside one (a callback of the same thread)
        self._lock = threading.RLock()
        self._busy = False
        self._build(A, stacklevel=4)

    # ------------------------------------------------------------------ set-up
    def _build(self, A, stacklevel, device=None):
        """Everything the constructor does (and :meth:`update` with another pattern);
        ``device``: the device to keep (a choice made again for the checked host copy of
        ``A``), instead of the one the arguments resolve to."""
        t0 = time.perf_counter()
        a = self._args
        method, precond, precision = a["method"], a["precond"], a["precision"]
        self.escalate = bool(a["escalate"])
        auto = method == "auto" or is_auto(precond)
        if method not in ("auto",) + tuple(BODIES):
            raise ValueError(f"method={method!r}: choose 'auto' or one of {list(BODIES)}")
        a["restart"] = check_gmres_options(a["restart"], a["side"], method, stacklevel + 1)
        check_precond(precond)
        device = resolve_device(a["device"] if device is None else device, A)
        if not on_host(A) and hasattr(A, "get"):
            A = A.get()                             # a device sparse matrix: checked on the host
        A = check_matrix(A, "A")
        if sp.issparse(A):
            A = _private_csr(A)
        n = A.shape[0]
        a_dtype = np.dtype(getattr(A, "dtype", None) or np.float64)
        b0 = np.zeros(n, a_dtype if a_dtype.kind in "fc" else np.float64)  # until a solve
        self.choices, self.analysis = [], {}
        self._plan_labels = None
        self._chosen = self._pinned = None
        # the caller's own set-up (one a solve made for another matrix is not theirs)
        M_was_setup = isinstance(precond, Preconditioner) and precond.is_setup \
            and getattr(precond, "_solve_key", None) is None
        restart, side = a["restart"], a["side"]
        if auto:
            from .auto import (AUTO_RESTART, DEFAULT_AUTO_MAXITER, NoCandidateError,
                               candidate_side, plan, probe_operator, resolve_block,
                               SETUP_ERRORS, set_up_candidate)

            pinned = None if is_auto(precond) else precond
            problem = make_problem(A, b0, rtol=a["rtol"], atol=a["atol"], device=device,
                                   M=pinned if not isinstance(pinned, str) else None)
            if method != "auto" and precision is not None:  # the caller's pair: refused
                check_basis(method, problem, as_precision(precision, problem.data_dtype))
            probe = probe_operator(problem) if problem.A_csr is None and method == "auto" \
                else None
            an, cands = plan(problem.A_csr, method, precond, a["precond_params"], probe)
            self._plan_labels = [c.label for c in cands]
            chosen = M = policy = None
            # shared by the candidates, as in auto_solve: the MC64 matching, the symmetry
            # test, the side a pinned object was set up for
            cache = {"mirror_hint": getattr(an, "mirror_hint", None)}
            for c in cands:
                if self._not_pd and c.method == "cg":
                    c.outcome = ("skipped: CG broke down on p^T A p <= 0 in a solve, with a "
                                 "positive definite M, so A is not positive definite")
                    continue
                if c.by_block and an is not None and pinned is None:
                    resolve_block(c, an)
                policy = as_precision(precision or c.precision, problem.data_dtype)
                c.precision = policy.name
                m_side = candidate_side(c.method, side)
                ts = time.perf_counter()
                try:
                    check_basis(c.method, problem, policy)
                except ValueError as err:  # GMRES with a compressed basis on complex data
                    c.outcome = f"skipped: {err}"
                    continue
                try:
                    M = set_up_candidate(c, pinned, a["precond_params"], problem.A_csr, policy,
                                         device, m_side, self.escalate, cache)
                except SETUP_ERRORS as err:
                    c.outcome = f"set-up failed: {type(err).__name__}: {err}"
                    continue
                finally:
                    c.setup_seconds = c.seconds = time.perf_counter() - ts
                c.outcome = "chosen"
                chosen = c
                break
            self.choices = cands
            self._chosen, self._pinned = chosen, pinned
            self.analysis = an.as_dict() if an is not None else {}
            if chosen is None:
                raise NoCandidateError("method/precond 'auto': no candidate could be set up: "
                                 + "; ".join(f"{c.label} ({c.outcome})" for c in cands))
            method = chosen.method
            if method == "gmres":
                restart, side = (AUTO_RESTART if restart is None else restart), m_side
            else:
                restart = side = None
            if M is not None and not isinstance(M, Preconditioner):
                M = problem.M_user           # the caller's matrix or operator, as checked
            # as auto_solve hands its candidate to solve(): the set-up object, no name
            body_kw, _, name, m_side = configure(method, M, restart, side, None, stacklevel)
            # maxiter counts iterations, as solve()'s auto budget: GMRES's inner ones,
            # capped exactly (max_inner), not restart cycles
            default_maxiter = DEFAULT_AUTO_MAXITER
            problem.M_user, problem.precond_side = M, m_side
        else:
            body_kw, M, name, m_side = configure(method, precond, restart, side,
                                                 a["precond_params"], stacklevel)
            problem = make_problem(A, b0, rtol=a["rtol"], atol=a["atol"], M=M, device=device,
                                   precond_side=m_side)
            policy = as_precision(precision, problem.data_dtype)
            default_maxiter = 10 * n
        self._problem = problem
        problem.reused = True
        self._maxiter = default_maxiter if a["maxiter"] is None else a["maxiter"]
        #: GMRES chosen by "auto": maxiter counts inner iterations (as solve()'s budget)
        self._restart_of_inner = body_kw["restart"] if auto and method == "gmres" else None
        problem.maxiter = self._maxiter
        set_rhs(problem, b0, rtol=a["rtol"], atol=a["atol"], maxiter=self._maxiter)  # checks
        self.method = method
        self._body, self._body_kw = BODIES[method], body_kw
        self._start = policy if auto else precision
        self._policies = {}
        # a preconditioner passed already set up (or as a matrix/operator) is the caller's:
        # update() leaves it alone; one made or set up here is set up again there
        self._owns_M = isinstance(M, Preconditioner) and not M_was_setup
        check_basis(method, problem, policy)
        self.precision = self._realise(policy)      # the preconditioner is set up here
        if method == "cg":
            check_cg_preconditioner(problem)
        self._name = name
        self._M_state = self._m_state()
        self._report = report_fields(problem, method, name)
        if auto:
            self._report.update(choices=self.choices, analysis=self.analysis)
        self.precond = self._report["precond"]
        self.setup_time = time.perf_counter() - t0

    def _realise(self, policy):
        """The first policy (from ``policy`` on, stronger when the FP32 copies of ``A`` or
        the preconditioner do not fit) whose System can be made; each solve then meets
        the same range errors in :func:`system_for`'s cache and escalates the same way."""
        while True:
            try:
                system_for(self._problem, policy)
                return policy
            except PrecisionRangeError:
                nxt = policy.stronger() if self.escalate else None
                if nxt is None:
                    raise
                policy = nxt

    # ------------------------------------------------------------------ use
    @property
    def shape(self):
        return (self._problem.n, self._problem.n)

    @property
    def n(self) -> int:
        return self._problem.n

    def solve(self, b, x0=None, *, rtol=None, atol=None, maxiter=None,
              callback=None, deflation="compact") -> SolveResult:
        """Solve ``A x = b`` with the stored set-up.

        Parameters
        ----------
        b : ndarray, shape (n,), (n, 1) or (n, k)
            Never modified (it is checked and copied).  ``(n, k)`` with ``k > 1``: ``k``
            right-hand sides, solved together where the method and policy allow and that
            pays (CG and GMRES under ``double``/``mixed``: one sweep over ``A`` and ``M``
            serves every column; :func:`mpsolve.multi.together`), else one after the
            other; ``x`` then has shape ``(n, k)`` and the result per-column figures
            (:mod:`mpsolve.multi`).
        x0 : ndarray, ``'Mb'`` or None
            As in :func:`mpsolve.solve`; with ``k`` right-hand sides ``(n,)`` (one start
            for every column) or ``(n, k)``.
        deflation : {'compact', 'mask'}
            ``k`` right-hand sides iterated together: how converged columns leave the
            block (narrower blocks, or frozen columns at full width).
        rtol, atol, maxiter : optional
            This call's values (default: the constructor's).
        callback : callable, optional
            As in :func:`mpsolve.solve`.

        Returns
        -------
        SolveResult
            As :func:`mpsolve.solve` returns it; ``setup_time`` is this call's checks and
            copies only (the stored set-up took :attr:`setup_time`).

        Calls from several threads are safe and run one after another (they share the
        stored workspace); for right-hand sides in parallel pass them as the columns of one
        ``b``, or give each thread its own Solver.  A call from inside a running solve of
        the same Solver (its callback) raises ``RuntimeError``.
        """
        if isinstance(b, (list, tuple)):
            b = np.asarray(b)                 # (as solve: a list is its array, 1-D or 2-D)
        if deflation not in ("compact", "mask"):
            raise ValueError(f"deflation={deflation!r}: use 'compact' or 'mask'")
        with self._lock, self._exclusive("solve"):
            return self._solve(b, x0, rtol, atol, maxiter, callback, deflation)

    @contextlib.contextmanager
    def _exclusive(self, what):
        """The stored problem, workspace and Systems are this call's alone: a call from
        inside a running solve of this Solver (its callback, in the same thread; other
        threads wait for the lock) would overwrite the right-hand side and the vectors
        the running solve certifies its answer with."""
        if self._busy:
            raise RuntimeError(f"Solver.{what}() called while a solve of this Solver is running "
                               "(from its callback): the two share the stored workspace; use "
                               "another Solver (or mpsolve.solve) inside the callback")
        self._busy = True
        try:
            yield
        finally:
            self._busy = False

    def _solve(self, b, x0, rtol, atol, maxiter, callback, deflation):
        r = self._run(b, x0, rtol, atol, maxiter, callback, deflation)
        if not self._cg_broke_down(r):
            return r
        return self._switch_from_cg(r, b, x0, rtol, atol, maxiter, callback, deflation)

    def _cg_broke_down(self, r) -> bool:
        """CG chosen by ``"auto"`` with auto's own preconditioner (positive definite by
        construction: shifted IC(0), FSAI, Jacobi of a positive diagonal) met the
        curvature breakdown (info -12) in this solve, in some column: A is not positive
        definite, and every later solve would break down as well."""
        a = self._args
        if self.method != "cg" or a["method"] != "auto" or not is_auto(a["precond"]):
            return False
        cols = getattr(r, "column_info", None)
        return r.info == -12 or (cols is not None and bool(np.any(np.asarray(cols) == -12)))

    def _switch_from_cg(self, r, b, x0, rtol, atol, maxiter, callback, deflation):
        """What :func:`mpsolve.auto.auto_solve` does on CG's breakdown, kept: the choice is
        made again without CG (the next candidate that sets up, GMRES or BiCGSTAB) for
        this solve, run again from its own start, and for every later one.  The result
        counts both runs' iterations and set-up; ``choices`` and ``status`` say so."""
        t0 = time.perf_counter()
        self._not_pd = True
        P = self._problem                   # (an operator A has no CSR form: A itself)
        self._build(P.A_csr if P.A_csr is not None else P.A_user, stacklevel=5,
                    device=P.device)
        rebuilt = time.perf_counter() - t0
        broke = (f"CG broke down after {r.iterations} iterations (A is not positive "
                 f"definite): this Solver now runs {self.method}")
        # the budget is this call's, both runs together (auto's maxiter counts iterations,
        # whatever the method); several columns: the most any column used
        cols = getattr(r, "column_iterations", None)
        used = int(np.max(cols)) if cols is not None and np.size(cols) else r.iterations
        left = _check_maxiter(self._maxiter if maxiter is None else maxiter, None) - used
        if left < 1:
            r.status += f"; {broke}, with no iterations left for it in this call"
            return r
        r2 = self._run(b, x0, rtol, atol, left, callback, deflation)
        r2.iterations += r.iterations
        r2.setup_time += r.setup_time + r.solve_time + rebuilt
        if getattr(r2, "column_info", None) is None:
            if r2.info > 0:
                r2.info = r2.iterations             # (auto's info: the iterations run)
            # the status's head made again for both runs' count (its additions kept)
            _, sep, rest = r2.status.partition("; ")
            r2.status = status_text(r2.info, r2.iterations, r2.true_residual,
                                    r2.tolerance) + sep + rest
        r2.status += f"; {broke}"
        return r2

    def _m_state(self):
        """What this Solver set its own preconditioner object up as: ``(set-ups, storage
        dtype, side)`` (``None`` for one it does not own)."""
        M = self._problem.M_user
        if not self._owns_M or not isinstance(M, Preconditioner):
            return None
        return (M.setups, M.storage_dtype, M._side)

    def _reclaim(self):
        """The preconditioner object this Solver set up, set up since by another (a second
        Solver given the same object, a copy's update): set up again for this Solver's
        matrix, as it was -- its stored operators are another matrix's now."""
        st = self._M_state
        M, p = self._problem.M_user, self._problem
        if st is None or M.setups == st[0] or p.A_csr is None:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PreconditionerWarning)   # (said at its set-up)
            setup_for_solve(M, p.A_csr, dtype=st[1], device=p.device, side=st[2])
        p._systems.clear()                  # (loops fused with the other set-up's arrays)
        self._M_state = self._m_state()

    def _run(self, b, x0, rtol, atol, maxiter, callback, deflation):
        t0 = time.perf_counter()
        a = self._args
        self._reclaim()
        M = self._problem.M_user
        if isinstance(M, Preconditioner) and (not M.is_setup or M.shape[0] != self._problem.n):
            # the caller's own M, set up again (or reset) since: its stored operators are
            # no longer this system's (the compiled loops would index past them)
            n = self._problem.n
            now = "not set up" if not M.is_setup else \
                f"set up for a {M.shape[0]}x{M.shape[1]} matrix"
            raise ValueError(f"M (precond) is {now} now, but this Solver's A is {n}x{n}: "
                             "make a new Solver for the other matrix (or set M up for this "
                             "one again)")
        if getattr(b, "ndim", None) == 2 and b.shape[1] != 1:
            from .multi import solve_block

            r = solve_block(self, b, x0, rtol=a["rtol"] if rtol is None else rtol,
                            atol=a["atol"] if atol is None else atol,
                            maxiter=self._maxiter if maxiter is None else maxiter,
                            callback=callback, deflation=deflation, t0=t0)
            if self._restart_of_inner is not None:  # (auto's info: iterations, not cycles)
                info, its = np.asarray(r.column_info), np.asarray(r.column_iterations)
                r.column_info = np.where(info > 0, np.maximum(its, 1), info)
                if r.info > 0:
                    r.info = int(np.max(r.column_info))
            return self._with_memory(r)
        cap = _check_maxiter(self._maxiter if maxiter is None else maxiter, None)
        body_kw = self._body_kw
        if self._restart_of_inner is not None:      # cycles enough, inner ones capped
            body_kw = dict(body_kw, max_inner=cap)
            cap = -(-cap // self._restart_of_inner)
        problem = set_rhs(self._problem, b, x0, rtol=a["rtol"] if rtol is None else rtol,
                          atol=a["atol"] if atol is None else atol, maxiter=cap)
        policy = self._policy_for(problem.data_dtype)
        r = iterate(self.method, self._body, problem, policy, callback=callback,
                    escalate=self.escalate, body_kw=body_kw, t0=t0, report=self._report)
        if self._restart_of_inner is not None and r.info > 0:
            r.info = max(1, r.iterations)           # (auto's info: iterations, not cycles)
        return self._with_memory(r)

    def _with_memory(self, r):
        """``r`` with the preconditioner's memory as it is after the solve (what
        :func:`mpsolve.solve` reports): some store more at their first use (ISAI's
        transposed operator), after the constructor's report was made."""
        M = self._problem.M_user
        if isinstance(M, Preconditioner):
            nb = int(M.nbytes or 0)
            if nb != self._report["precond_nbytes"]:
                self._report.update(precond_nbytes=nb, precond_detail=describe(M))
            r.precond_nbytes = nb
            r.precond_detail = self._report["precond_detail"]
        return r

    def _block_cycles(self, maxiter: int) -> int:
        """The block method's ``maxiter`` for ``maxiter`` in this Solver's units: itself,
        or where it counts GMRES's inner iterations (auto's GMRES) the whole cycles that
        fit (0: fewer iterations than a cycle, the columns run one by one, capped)."""
        m = self._restart_of_inner
        return maxiter if m is None else maxiter // m

    def _from_cycles(self, cycles: int) -> int:
        """``cycles`` of the block GMRES in this Solver's ``maxiter`` units."""
        m = self._restart_of_inner
        return cycles if m is None else cycles * m

    def _policy_for(self, dt):
        """The policy a fresh solve of data dtype ``dt`` starts from (with precision=None
        the data's dtype decides: an FP32 A with an FP64 b runs in FP64 -- with the
        preconditioner as the constructor set it up for A's dtype, in FP32: that is
        ``mixed``, and is named so); the Systems' cached range errors then escalate it as
        in the constructor."""
        policy = self._policies.get(dt)
        if policy is None:
            policy = as_precision(self._start, dt)
            M = self._problem.M_user
            if self._start is None and policy.precond == "float64" and \
                    isinstance(M, Preconditioner) and M.storage_dtype is not None and \
                    np.dtype(M.storage_dtype).char in "fF":
                policy = as_precision("mixed", dt)
            self._policies[dt] = policy
        return policy

    def _a_dtype(self):
        a = np.dtype(getattr(self._problem.A_user, "dtype", None) or np.float64)
        return a if a.kind in "fc" else np.dtype(np.float64)

    def __matmul__(self, b):
        """``s @ b``: the solution ``x`` of ``A x = b`` (``s.solve(b).x``), so that a
        Solver reads as ``A^-1``."""
        return self.solve(b).x

    # ------------------------------------------------------------------ update
    def update(self, A_new) -> "Solver":
        """Take a new matrix; returns ``self``.

        Same shape and sparsity pattern as the current ``A`` (canonical CSR ``indptr`` and
        ``indices``): only the numeric set-up is redone (``last_update = "numeric"``) --
        the FP64 operator and the FP32 copies of the values, the preconditioner's set-up
        on them; the choice of method and preconditioner, the kernels and the workspace
        stay.  A preconditioner the caller passed already set up (or as a matrix or
        operator) is the caller's and stays as it is.  Otherwise (``last_update =
        "full"``): everything is set up again as by the constructor -- also where
        ``"auto"`` would now choose differently (the analysis of the new values orders
        other candidates: ``A`` no longer symmetric, a zero diagonal entry, values beyond
        FP32; the chosen candidate's set-up fails its checks on the new values, unstable
        ILU factors; a candidate before it had failed on the old ones), where the new
        values are complex and the old were not (or the other way round) or of another
        precision (float32 for float64, ...), and where the kept choice cannot take them
        (a zero pivot, an FP32 range the first policy does not reach).  Waits for a solve
        running in another thread.
        An update that raises (the new matrix refused, or no set-up of it possible) leaves
        the Solver solving the old matrix, as before the call.
        """
        with self._lock, self._exclusive("update"):
            saved = dict(self.__dict__)
            p = saved["_problem"]
            stored = (p.A_csr, p.A_user, p.A64, p._residual64, p._rbound, dict(p._systems))
            try:
                return self._update(A_new)
            except BaseException:
                # refused: the Solver stays as it was -- its attributes, and where the
                # failed update reached the stored problem or set up a preconditioner
                # object this Solver set up before, the set-up of the old matrix again
                self.__dict__.clear()
                self.__dict__.update(saved)
                touched = p.A_user is not stored[1] or (
                    self._owns_M and isinstance(self._args["precond"], Preconditioner))
                p.A_csr, p.A_user, p.A64, p._residual64, p._rbound = stored[:5]
                p._systems.clear()
                p._systems.update(stored[5])
                if touched:
                    self._build(stored[1], stacklevel=4, device=p.device)
                    self.last_update = saved["last_update"]
                raise

    def _update(self, A_new) -> "Solver":
        t0 = time.perf_counter()
        p = self._problem
        C = None
        if (p.A_csr is not None and on_host(A_new)
                and getattr(A_new, "shape", None) == p.A_csr.shape):
            try:
                C = check_matrix(A_new, "A_new")
            except TypeError:
                C = None
            # entries to compare patterns by; an operator without them: set up anew
            C = _private_csr(C) if sp.issparse(C) else None
        old = p.A_csr
        # the same pattern and the same data dtype (float32 values for float64 ones, or
        # the other way round, choose another policy and preconditioner storage: a fresh
        # Solver's, so set up anew)
        same = C is not None and C.nnz == old.nnz and (C.dtype.kind == "c") == p.is_complex \
            and (C.dtype if C.dtype.kind in "fc" else np.dtype(np.float64)) == self._a_dtype() \
            and np.array_equal(C.indptr, old.indptr) and np.array_equal(C.indices, old.indices)
        hp = in_field("float64", p.is_complex)
        if same and C.dtype.kind not in "fc":
            C = C.astype(hp)                     # as make_problem: integers in FP64
        if not same or self._not_pd or self._choice_changed(C) or self._tried_before():
            # (_not_pd: CG was given up for the old values, which the new ones may not
            # share: the choice is made again, as a fresh Solver's)
            self._not_pd = False                 # (learnt of the old matrix)
            self._build(A_new, stacklevel=4)
            self.last_update = "full"
            return self
        p.replace_values(C)
        M = p.M_user
        start = as_precision(self._start, self._a_dtype())
        try:
            if self._owns_M:
                # its set-up on the new values in the first policy's storage, as a fresh
                # Solver's: not in the storage an escalation for the old values left (an
                # FP64 M under 'mixed'), and range-checked again (escalated if need be)
                with warnings.catch_warnings():
                    if self._candidate_precond() == "ilut":
                        # (auto's ILUT: its warning, unstable factors, is a refusal below)
                        warnings.simplefilter("ignore", PreconditionerWarning)
                    setup_for_solve(M, C, dtype=p.realise(start.precond), device=M.device,
                                    side=M._side)
            self._check_candidate(M, C)
            p._systems.clear()   # the stored (FP32) copies of A, made again and range-checked
            self._policies.clear()
            # from a zero right-hand side, as the constructor (not the last solve's b,
            # whose range may have escalated the policy then)
            set_rhs(p, np.zeros(p.n, self._a_dtype()), rtol=self._args["rtol"],
                    atol=self._args["atol"], maxiter=self._maxiter)
            self.precision = self._realise(start)
        except (ValueError, ArithmeticError, np.linalg.LinAlgError):
            # the new values do not fit the kept choice (a zero pivot, an FP32 range the
            # first policy does not reach): set everything up as the constructor does
            self._build(A_new, stacklevel=4)
            self.last_update = "full"
            return self
        if self.method == "cg":
            check_cg_preconditioner(p)       # (new values: A symmetric now, M not)
        self._M_state = self._m_state()
        self._report.update(report_fields(p, self.method, self._name))
        self.setup_time = time.perf_counter() - t0
        self.last_update = "numeric"
        return self

    def _choice_changed(self, C) -> bool:
        """``"auto"``: whether the analysis of the new values ``C`` orders other candidates
        than the constructor's did (``A`` no longer symmetric, a diagonal entry now zero,
        values beyond FP32...): the kept choice was made for a matrix of another kind.
        Else the analysis of ``C`` is this Solver's from now on."""
        if self._plan_labels is None:
            return False
        from .auto import plan

        a = self._args
        an, cands = plan(C, a["method"], a["precond"], a["precond_params"])
        if [c.label for c in cands] != self._plan_labels:
            return True
        self.analysis = an.as_dict() if an is not None else {}
        self._report["analysis"] = self.analysis
        return False

    def _tried_before(self) -> bool:
        """``"auto"``: whether a candidate before the chosen one failed its set-up on the
        old values -- the new ones may let it pass, and a fresh Solver would choose it."""
        if self._chosen is None or (isinstance(self._pinned, Preconditioner)
                                    and not self._owns_M):
            return False                # (the caller's set-up object: used as it is)
        for c in self.choices:
            if c is self._chosen:
                return False
            if c.outcome.startswith("set-up failed"):
                return True
        return False

    def _check_candidate(self, M, C):
        """``"auto"``: the checks of its candidate's set-up (:func:`mpsolve.auto.
        set_up_candidate`) on the new values: unstable ILU(0)/ILUT factors, a
        nonsymmetric ``M`` under CG -- raised (an update sets everything up again)."""
        c = self._chosen
        if c is None or not isinstance(M, Preconditioner):
            return
        from .auto import _check_symmetric, check_factors

        name = self._candidate_precond()
        if name is not None:
            # (set_up_candidate's parameters: the candidate's own, or none for a pinned name)
            params = dict(c.params) if self._pinned is None else {}
            params.update(self._args["precond_params"])
            check_factors(name, params, M, C)
        _check_symmetric(c, M)

    def _candidate_precond(self):
        """The name of the preconditioner ``"auto"``'s chosen candidate set up by name --
        its own, or the caller's pinned name (``precond="ilu0"``) -- else ``None``."""
        if self._chosen is None:
            return None
        if isinstance(self._pinned, str):
            return self._pinned
        return self._chosen.precond if self._pinned is None and \
            isinstance(self._chosen.precond, str) else None

    def __reduce__(self):
        # A Solver holds compiled kernels, device arrays and a lock, none of them
        # picklable: a pickled (or deep-copied) Solver is its matrix and its arguments, set
        # up again where it is loaded -- the same choices, as the analysis is deterministic.
        a = dict(self._args)
        return (_rebuild, (self._problem.A_user, a.pop("precond_params"), a, self._not_pd))

    def __repr__(self):
        return (f"<Solver {self.n}x{self.n}: {self.method}"
                + (f" + {self.precond}" if self.precond else "")
                + f", {self.precision.name}>")


def _private_csr(A) -> sp.csr_matrix:
    """The canonical CSR form of the caller's sparse ``A``, sharing no memory with it: a
    Solver solves with the values it was set up with (a later change of the caller's
    arrays in place would reach its FP64 operator but not its preconditioner or FP32
    copies); new values come through :meth:`Solver.update`."""
    C = canonical_csr(A)
    if any(np.may_share_memory(getattr(C, k), theirs) for k in ("data", "indices", "indptr")
           for theirs in (getattr(A, "data", None), getattr(A, "indices", None),
                          getattr(A, "indptr", None)) if theirs is not None):
        C = keep_block_size(sp.csr_matrix((C.data.copy(), C.indices.copy(), C.indptr.copy()),
                                          shape=C.shape), C)
        C.has_sorted_indices = True
        C.has_canonical_format = True
    return C


def _rebuild(A, precond_params, args, not_pd=False):
    """A :class:`Solver` from its pickled form (:meth:`Solver.__reduce__`); ``not_pd``: the
    pickled one had left CG (its breakdown showed ``A`` not positive definite), so this
    one chooses without CG too, as the pickled one ran."""
    s = Solver(A, **args, **precond_params)
    if not_pd and not s._not_pd:
        s._not_pd = True
        if s.method == "cg" and s._plan_labels is not None:
            P = s._problem
            s._build(P.A_csr if P.A_csr is not None else P.A_user, stacklevel=3,
                     device=P.device)
    return s
