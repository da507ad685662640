"""Public entry points: SciPy-compatible ``cg``/``gmres``/``bicgstab`` and ``solve``."""
from __future__ import annotations

import time
import warnings

import numpy as np
import scipy.sparse.linalg as spla

from ._configure import (check_gmres_options, check_precond, configure, is_auto,  # noqa: F401
                         gmres_callback_type)  # (configure: re-exported)
from .driver import run
from .krylov import BODIES
from .result import USER_STOP, SolveResult

__all__ = ["cg", "gmres", "bicgstab", "solve", "METHODS"]

METHODS = tuple(BODIES)

_COMMON_DOC = """
    Parameters
    ----------
    A : sparse matrix/array (any format), ndarray or LinearOperator
        The ``n x n`` system matrix: real (integer, boolean, float16 and long double data
        are converted to FP64, as SciPy computes them -- integers beyond 2^53 and long
        doubles rounded: the answer is certified for the rounded system) or
        complex64/complex128.  If any of ``A``, ``b``, ``x0``, ``M`` is complex the solve
        is complex, with SciPy's conjugated dots (CG: Hermitian positive definite ``A``).
    b : ndarray, shape (n,) or (n, 1)
    x0 : ndarray, ``'Mb'`` or None
        Starting guess (never modified); ``'Mb'`` starts from ``M @ b``.
    rtol, atol : float, keyword-only
        Stop when ``||b - A x|| <= max(atol, rtol * ||b||)`` (FP64 true residual;
        complex128 for a complex system).
    maxiter : int, optional
        Iteration limit{maxiter_note}.
    M : sparse matrix, ndarray, LinearOperator or mpsolve preconditioner
        Approximation of ``A^-1``.  An mpsolve preconditioner that is not set up
        yet is set up on ``A`` in the policy's preconditioner precision.  Under CG, an
        mpsolve preconditioner that is not symmetric (``M.symmetric`` False) on a
        symmetric ``A`` is refused (``ValueError`` naming the ones that are).
    callback : callable, optional
        {callback_note}  Returning ``True`` stops the solve: ``info`` is then
        0 if ``x`` meets the tolerance, else ``-15``.
    precision : str or Precision, optional
        ``'double'``, ``'single'``, ``'mixed'``, ``'eft'``, ``'mixed-eft'``, ``'ir'``,
        ``'mixed-cb'``, ``'mixed-eft-cb'`` (:data:`mpsolve.PRESETS`) or a
        :class:`~mpsolve.Precision`.  Default: the data's precision (SciPy's).
    escalate : bool, default True
        Switch to a stronger policy when the current one stagnates above the
        tolerance (recorded in :attr:`SolveResult.escalations`).
    device : {{None, 'cpu', 'reference', 'gpu'}}, keyword-only
        Where the solve runs.  ``None`` (default): the device of ``A``, ``b`` and
        ``x0`` (CuPy arrays -> ``'gpu'``, anything else -> ``'cpu'``).  ``'reference'``
        runs the plain-NumPy oracle kernels (slow; for testing).  ``x`` is returned
        on the caller's side: a NumPy array when ``b`` was one.

    Returns
    -------
    x : ndarray
    info : int
        0 converged; > 0 iterations done without converging{info_note}; < 0 a
        breakdown, see :data:`mpsolve.BREAKDOWNS`.
"""


def _one_rhs(b, name):
    """SciPy's shape rule for the SciPy-style functions: ``b`` of shape ``(n,)`` or
    ``(n, 1)``; several right-hand sides are refused with the way to solve them."""
    shape = getattr(b, "shape", None)
    if shape is None and isinstance(b, (list, tuple)):
        try:
            shape = np.shape(b)               # (a list of lists: its array's shape)
        except ValueError:
            shape = None
    if shape is not None and len(shape) == 2 and shape[0] == 1 and shape[1] > 1:
        raise ValueError(
            f"b has shape {tuple(shape)}, a row: mpsolve.{name} takes one right-hand side as "
            f"a column, shape ({shape[1]},) or ({shape[1]}, 1), as scipy.sparse.linalg.{name} "
            "does: pass b.ravel()")
    if shape is not None and len(shape) == 2 and shape[1] > 1:
        raise ValueError(
            f"b has shape {tuple(shape)}: mpsolve.{name} takes one right-hand side, shape "
            f"({shape[0]},) or ({shape[0]}, 1), as scipy.sparse.linalg.{name} does; solve "
            f"{shape[1]} right-hand sides together with mpsolve.solve(A, b, method="
            f"{name!r}) or mpsolve.Solver(A, method={name!r}).solve(b)")


def _fmt(doc, **kw):
    kw.setdefault("maxiter_note", " (default ``10 n``)")
    kw.setdefault("callback_note", "Called as ``callback(xk)`` after each iteration.")
    kw.setdefault("info_note", "")
    return doc.replace("{common}", _COMMON_DOC.format(**kw))


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
       precision=None, escalate=True, device=None):
    _one_rhs(b, "cg")
    r = run("cg", BODIES["cg"], A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
            callback=callback, precision=precision, escalate=escalate, device=device,
            precond_side="symmetric")
    return r.x, r.info


cg.__doc__ = _fmt("""Solve ``A x = b`` with the (preconditioned) conjugate gradient method.

    A drop-in for :func:`scipy.sparse.linalg.cg`; ``A`` and ``M`` must be
    symmetric positive definite.
{common}
    Examples
    --------
    >>> import numpy as np
    >>> from mpsolve import cg
    >>> from mpsolve.matrices import poisson2d
    >>> A = poisson2d(20)
    >>> b = A @ np.ones(A.shape[0])
    >>> x, info = cg(A, b, rtol=1e-10)
    >>> info, bool(np.linalg.norm(b - A @ x) <= 1e-10 * np.linalg.norm(b))
    (0, True)
""")


def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
             precision=None, escalate=True, device=None):
    _one_rhs(b, "bicgstab")
    r = run("bicgstab", BODIES["bicgstab"], A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter,
            M=M, callback=callback, precision=precision, escalate=escalate, device=device,
            precond_side="right")
    return r.x, r.info


bicgstab.__doc__ = _fmt("""Solve ``A x = b`` with right-preconditioned BiCGSTAB.

    A drop-in for :func:`scipy.sparse.linalg.bicgstab` (same breakdown codes
    -10 and -11).
{common}
    Examples
    --------
    >>> import numpy as np
    >>> from mpsolve import bicgstab
    >>> from mpsolve.matrices import convection_diffusion2d
    >>> A = convection_diffusion2d(16)
    >>> b = A @ np.ones(A.shape[0])
    >>> x, info = bicgstab(A, b, rtol=1e-8)
    >>> info
    0
""")


def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, restart=None, maxiter=None, M=None,
          callback=None, callback_type=None, precision=None, escalate=True, side="left",
          device=None):
    _one_rhs(b, "gmres")
    if callback is not None and callback_type is None:
        # SciPy's warning, for the same reason (the default may follow SciPy's), with the
        # phrase its users' warning filters match
        warnings.warn("mpsolve.gmres called without specifying `callback_type` for its "
                      "callback: the default, 'legacy', may change with SciPy's; say which "
                      "you mean, gmres(..., callback_type='pr_norm') -- or 'legacy' to keep "
                      "`maxiter` counting inner iterations", DeprecationWarning, stacklevel=2)
    r = _gmres_result(A, b, x0, rtol=rtol, atol=atol, restart=restart, maxiter=maxiter, M=M,
                      callback=callback, callback_type=callback_type, precision=precision,
                      escalate=escalate, side=side, device=device)
    return r.x, r.info


def _gmres_result(A, b, x0=None, *, rtol, atol, restart, maxiter, M, callback, callback_type,
                  precision, escalate, precond_name=None, side="left", device=None):
    ctype = gmres_callback_type(callback, callback_type)
    restart = check_gmres_options(restart, side)
    side = side or "left"
    m = 20 if restart is None else restart
    # (SciPy's contract: maxiter runs out on a stalled GMRES, no early stop)
    kw = {"restart": m, "callback_type": ctype, "side": side, "stall": False}
    legacy = callback is not None and ctype == "legacy"
    inner = maxiter
    if legacy:
        # SciPy's legacy mode: maxiter counts inner iterations, 10 n of them by default
        shape = getattr(A, "shape", None) or np.shape(A)     # (a list of lists too)
        if inner is None and len(shape) == 2:
            inner = 10 * int(shape[0])
        kw["max_inner"] = inner
    r = run("gmres", BODIES["gmres"], A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
            callback=callback, precision=precision, escalate=escalate, body_kw=kw,
            precond_name=precond_name, device=device, precond_side=side)
    if legacy and inner is not None and r.info > 0 and r.iterations >= inner:
        r.info = int(inner)            # SciPy: stopped at maxiter inner iterations
    return r


gmres.__doc__ = _fmt("""Solve ``A x = b`` with restarted GMRES(restart).

    A drop-in for :func:`scipy.sparse.linalg.gmres`.  ``restart`` (default 20)
    is the Krylov dimension between restarts; classical Gram--Schmidt with
    selective reorthogonalisation.  ``side`` (keyword, default ``'left'`` as in
    SciPy and PETSc) chooses left or right preconditioning; either way the
    stopping test is on the true residual ``||b - A x||``.
{common}
    Examples
    --------
    >>> import numpy as np
    >>> from mpsolve import gmres
    >>> from mpsolve.matrices import convection_diffusion2d
    >>> A = convection_diffusion2d(16)
    >>> b = A @ np.ones(A.shape[0])
    >>> x, info = gmres(A, b, rtol=1e-8, restart=30)
    >>> info
    0
""", maxiter_note=" in restart cycles (default ``10 n``); with a callback and "
     "``callback_type='legacy'`` it counts inner iterations (default ``10 n`` of them), as in "
     "SciPy",
     callback_note="``callback_type='x'``: ``callback(xk)`` after each restart cycle; "
     "``'pr_norm'`` or ``'legacy'`` (the default when a callback is given, with SciPy's "
     "DeprecationWarning asking to name one): "
     "``callback(residual_norm / ||b||)`` after each inner iteration.",
     info_note=" (restart cycles; inner iterations with a callback and "
     "``callback_type='legacy'``, as in SciPy)")


def _complex_twin(A):
    """A real ``A`` as the complex matrix or operator of a complex problem (SciPy's rule:
    a real ``A`` with a complex ``b`` solves in complex), in the complex precision of its
    own (float32: complex64)."""
    if hasattr(A, "astype") and not isinstance(A, spla.LinearOperator):
        return A.astype(np.result_type(A.dtype, np.complex64))
    if isinstance(A, spla.LinearOperator) or hasattr(A, "matvec"):
        return spla.LinearOperator(A.shape, matvec=A.matvec, dtype=np.complex128,
                                   rmatvec=getattr(A, "rmatvec", None))
    return np.asarray(A, dtype=np.complex128)      # a list of lists


def solve(A, b, x0=None, *, method="auto", precond="auto", precision=None, rtol=1e-5,
          atol=0.0, maxiter=None, restart=None, callback=None, escalate=True, side=None,
          device=None, deflation="compact", **precond_params) -> SolveResult:
    """Solve ``A x = b`` and report everything about the solve.

    Parameters
    ----------
    A, b, x0, rtol, atol, callback, precision, escalate, device
        As in :func:`cg`.  With ``"auto"`` and no ``precision``, the policy is chosen
        too (``'mixed'`` when the values fit FP32, else ``'double'``).
    method : {'auto', 'cg', 'gmres', 'bicgstab'}
        ``'auto'`` (default): chosen from a cheap analysis of ``A`` (symmetry, diagonal,
        dominance, block size, scaling), with fallbacks on breakdown, stagnation or a
        failed set-up, from the current iterate (:mod:`mpsolve.auto`).  The choices, their
        reasons and outcomes are in :attr:`SolveResult.choices` and ``summary()``.
    precond : 'auto', None, str or preconditioner
        ``'auto'`` (default): chosen with the method.  ``None``/``'none'``, a name from
        :data:`mpsolve.precond.REGISTRY` (``'jacobi'``, ``'ilu0'``, ``'ilut'``, ...), a
        preconditioner object, or any ``M`` accepted by :func:`cg`.  With
        ``method='auto'`` a named or object preconditioner is set up for each candidate
        method's side (one the caller set up is used as it is) and taken by CG only where
        it came out symmetric; a matrix or an operator is applied as given.
    maxiter : int, optional
        As in :func:`cg` for a named method and preconditioner; with ``'auto'``: the
        Krylov iterations of all candidates together (default 5000).
    restart : int, optional
        GMRES only: Krylov dimension between restarts (default 20; 30 with ``'auto'``).
    side : {None, 'left', 'right'}
        GMRES only: preconditioning side (default left, as SciPy and PETSc; right with
        ``'auto'``).
    b : ndarray, shape (n,), (n, 1) or (n, k)
        ``(n, k)``: ``k`` right-hand sides, set up once (a :class:`mpsolve.Solver`) and
        iterated together where the method and policy allow and that pays
        (:func:`mpsolve.multi.together`: on the CPU CG from 500k unknowns) -- CG and GMRES
        under ``double``/``mixed``: one sweep over ``A`` (and ``M``'s stored operators) per
        iteration serves every column, converged columns leave the block -- else solved
        one after the other (:mod:`mpsolve.multi`).  ``x`` is ``(n, k)``; per-column
        figures in ``column_info``, ``column_iterations``, ``column_true_residual``;
        ``info`` is 0 when every column converged, ``iterations`` the largest count.
        ``x0``: ``(n,)`` (every column) or ``(n, k)``.  With ``"auto"`` the choice is
        made once for the block, and a column it leaves unsolved goes on by the single
        solve's fallbacks from where the block left it (``rhs_mode`` "block, then by
        column").
    deflation : {'compact', 'mask'}
        Several right-hand sides iterated together: converged columns leave the block
        by compaction (default) or are frozen in place.
    **precond_params
        Passed to the preconditioner's constructor when ``precond`` is a name;
        ``reorder='mc64'`` first permutes and scales ``A`` to a unit diagonal
        (:func:`mpsolve.precond.mc64`) for any preconditioner.  A keyword that neither
        ``solve`` nor that preconditioner takes is a ``TypeError`` naming it and the
        parameters the preconditioner does take (with ``precond`` ``'auto'`` or ``None``:
        which preconditioners take it).

    Returns
    -------
    SolveResult
        ``x``, ``info``, ``converged``, ``iterations``, ``residuals``,
        ``true_residual`` (FP64, relative), ``setup_time``, ``solve_time``,
        ``status``, ``escalations``, ``choices``.  ``x, info = solve(...)`` also works.

    Examples
    --------
    >>> import numpy as np
    >>> import mpsolve
    >>> from mpsolve.matrices import poisson3d
    >>> A = poisson3d(10)
    >>> b = A @ np.ones(A.shape[0])
    >>> res = mpsolve.solve(A, b, method="cg", precond="jacobi", precision="mixed-eft", rtol=1e-10)
    >>> res.converged, res.true_residual <= 1e-10
    (True, True)
    >>> res = mpsolve.solve(A, b, rtol=1e-10)          # method and preconditioner chosen
    >>> res.converged, res.method, res.choices[0].precond
    (True, 'cg', 'ilu0')
    """
    if isinstance(b, (list, tuple)):
        b = np.asarray(b)                   # (as SciPy: a list is its array, 1-D or 2-D)
    # (several right-hand sides: the Solver made for them warns of GMRES options instead)
    block = getattr(b, "ndim", None) == 2 and b.shape[1] != 1
    restart = check_gmres_options(restart, side, None if block else method, stacklevel=3)
    check_precond(precond)
    if (getattr(b, "ndim", 1) or 0) > 2:
        raise ValueError(f"b has shape {tuple(b.shape)}: solve takes one right-hand side, "
                         f"shape (n,) or (n, 1), or k of them as the columns of an (n, k) array")
    if getattr(b, "ndim", None) == 2 and b.shape[1] != 1:
        from .solver import Solver

        t0 = time.perf_counter()
        a_kind = np.dtype(getattr(A, "dtype", None) or np.float64).kind
        x0_cplx = not isinstance(x0, str) and x0 is not None and np.iscomplexobj(x0)
        if (np.iscomplexobj(b) or x0_cplx) and a_kind != "c":
            A = _complex_twin(A)            # a real A with complex b or x0: a complex problem
        auto = method == "auto" or is_auto(precond)
        try:
            s = Solver(A, method=method, precond=precond, precision=precision, rtol=rtol,
                       atol=atol, maxiter=maxiter, restart=restart, side=side,
                       escalate=escalate, device=device, **precond_params)
        except ValueError as err:
            from .auto import NoCandidateError

            if not (auto and isinstance(err, NoCandidateError) and isinstance(b, np.ndarray)):
                raise
            res = None
        else:
            # auto: the Solver's choice gets half of a caller's budget, as solve(A, b)'s
            # first candidate does; its fallbacks (columns_fallback) have the rest
            from .auto import first_share

            share = None if not auto or maxiter is None else first_share(int(maxiter))
            res = s.solve(b, x0, callback=callback, deflation=deflation, maxiter=share)
        if auto and isinstance(b, np.ndarray) and (res is None or not (
                res.converged or res.at_floor or res.info == USER_STOP)):
            # a Solver chooses once; solve(A, b)'s fallbacks run on the columns it left
            from .auto import columns_fallback

            res = columns_fallback(
                solve, A, b, x0, res,
                dict(method=method, precond=precond, precision=precision, rtol=rtol,
                     atol=atol, maxiter=maxiter, restart=restart, callback=callback,
                     escalate=escalate, side=side, device=device, **precond_params))
        res.setup_time = time.perf_counter() - t0 - res.solve_time
        return res
    if method == "auto" or is_auto(precond):
        from .auto import auto_solve

        if method not in ("auto",) + tuple(BODIES):
            raise ValueError(f"method={method!r}: choose 'auto' or one of {list(BODIES)}")
        return auto_solve(solve, A, b, x0, method=method, precond=precond, precision=precision,
                          rtol=rtol, atol=atol, maxiter=maxiter, restart=restart,
                          callback=callback, escalate=escalate, side=side, device=device,
                          **precond_params)
    body_kw, M, name, m_side = configure(method, precond, restart, side, precond_params)
    return run(method, BODIES[method], A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
               callback=callback, precision=precision, escalate=escalate, body_kw=body_kw,
               precond_name=name, device=device, precond_side=m_side)
