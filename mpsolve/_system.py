"""``make_system``: the ONE place where solver inputs are checked and converted.

Solver bodies assume clean input (house rule 3).  Every rejection names the
argument and says how to fix it.  The user's ``A``, ``b``, ``x0`` and ``M`` are
never modified: anything that must change is copied first.

Two stages:

* :class:`Problem` -- the validated problem in FP64 (canonical CSR ``A`` or a
  wrapped ``LinearOperator``, ``b``, ``x0``, the absolute tolerance), built once;
* :class:`System` -- the problem *realised at a* :class:`~mpsolve.Precision`:
  ``A`` stored at ``precision.matrix`` with its SpMV bound, the preconditioner's
  apply, and the vector primitives looked up from the kernel registry.  The
  escalation and refinement drivers build further Systems from one Problem.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Optional

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .backend import array_module
from .kernels import lookup
from .kernels.registry import dtype_name
from .operator import CallableOperator, SparseOperator, canonical_csr
from .precision import Precision

__all__ = ["Problem", "System", "make_problem", "make_system", "make_ops", "check_matrix"]

_VECTOR_OPS = ("axpy", "xpay", "axpby", "waxpy", "axpy2", "bicg_dir")


# ------------------------------------------------------------------ checks
def _dtype_check(dtype, name):
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        raise TypeError(
            f"{name} is complex ({dtype}); mpsolve solves real systems only -- "
            f"split into real and imaginary parts (a 2n x 2n real system) or use "
            f"scipy.sparse.linalg for complex data"
        )
    if dtype.kind not in "biuf":
        raise TypeError(f"{name} has dtype {dtype}; expected a real numeric dtype")
    return dtype


def check_matrix(A, name="A"):
    """Validate a matrix argument; return a SciPy sparse matrix or a LinearOperator.

    Dense arrays become CSR.  Integer/boolean data is accepted (converted to
    FP64 later, as SciPy does); complex data, non-square shapes and non-finite
    values are rejected.
    """
    if sp.issparse(A):
        M = A
    elif isinstance(A, spla.LinearOperator) or (
        hasattr(A, "matvec") and hasattr(A, "shape") and not isinstance(A, np.ndarray)
    ):
        if len(A.shape) != 2 or A.shape[0] != A.shape[1]:
            raise ValueError(f"{name} must be square, got shape {A.shape}")
        if getattr(A, "dtype", None) is not None:
            _dtype_check(A.dtype, name)
        return A
    else:
        arr = np.asarray(A)
        if arr.dtype == object:
            raise TypeError(
                f"{name} of type {type(A).__name__} is not a matrix: pass a SciPy "
                "sparse matrix/array, a 2-D NumPy array or a LinearOperator"
            )
        if arr.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got an array of shape {arr.shape}")
        M = sp.csr_matrix(arr) if arr.size else sp.csr_matrix(arr.shape, dtype=arr.dtype)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(
            f"{name} must be square, got shape {M.shape}; a least-squares problem "
            "needs scipy.sparse.linalg.lsqr/lsmr"
        )
    _dtype_check(M.dtype, name)
    data = M.data if hasattr(M, "data") else M.tocsr().data
    if data.dtype.kind == "f" and not np.isfinite(data).all():
        bad = int((~np.isfinite(data)).sum())
        raise ValueError(f"{name} contains {bad} NaN or Inf value(s); clean the matrix first")
    return M


def _check_vector(v, n, name):
    arr = np.asarray(v)
    if arr.dtype == object:
        raise TypeError(f"{name} must be a numeric array, got {type(v).__name__}")
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(
            f"{name} has shape {np.shape(v)}, but A is {n}x{n}: {name} must have "
            f"shape ({n},) or ({n}, 1)"
        )
    _dtype_check(arr.dtype, name)
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise ValueError(f"{name} contains {bad} NaN or Inf value(s)")
    return arr


def _check_tol(value, name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not np.isfinite(v) or v < 0:
        raise ValueError(f"{name}={value!r}: must be a finite, non-negative number")
    return v


def _check_maxiter(maxiter, default):
    if maxiter is None:
        return default
    if isinstance(maxiter, (bool, np.bool_)) or not isinstance(maxiter, numbers.Integral):
        raise TypeError(f"maxiter must be a positive integer or None, got {maxiter!r}")
    if maxiter <= 0:
        raise ValueError(f"maxiter={maxiter}: must be a positive integer (or None for the default)")
    return int(maxiter)


# ------------------------------------------------------------------ problem
@dataclass
class Problem:
    """The validated problem, in FP64 (see module docstring)."""

    n: int
    A_csr: Optional[sp.csr_matrix]      # canonical CSR, any float dtype; None for an operator
    A_user: object                      # what the user passed (for a LinearOperator)
    A64: object                         # FP64 operator used for the true residual
    b64: np.ndarray
    x0_64: Optional[np.ndarray]         # None: zero start
    M_user: object
    bnrm: float
    tol: float                          # absolute: max(atol, rtol * ||b||)
    rtol: float
    atol: float
    maxiter: int
    out_dtype: np.dtype                 # dtype of the x returned to the user
    data_dtype: np.dtype                # float dtype of the user's A/b
    x0_mode: str = "given"              # "zero", "given" or "Mb"
    _ops_cache: dict = field(default_factory=dict)


def make_problem(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None,
                 default_maxiter=lambda n: 10 * n) -> Problem:
    """Validate and convert the user's arguments (SciPy's rules)."""
    A = check_matrix(A, "A")
    n = A.shape[0]
    b = _check_vector(b, n, "b")
    rtol = _check_tol(rtol, "rtol")
    atol = _check_tol(atol, "atol")
    maxiter = _check_maxiter(maxiter, default_maxiter(n))

    a_dtype = np.dtype(getattr(A, "dtype", None) or np.float64)
    data_dtype = np.result_type(a_dtype if a_dtype.kind == "f" else np.float64,
                                b.dtype if b.dtype.kind == "f" else np.float64)
    if M is not None and not _is_mpsolve_precond(M):
        M = check_matrix(M, "M")
        if M.shape != (n, n):
            raise ValueError(f"M has shape {M.shape}, but A is {n}x{n}: M must be {n}x{n}")
    elif M is not None and M.is_setup and M.shape != (n, n):
        raise ValueError(
            f"M was set up for a {M.shape[0]}x{M.shape[1]} matrix, but A is {n}x{n}; "
            "call M.setup(A) again or pass a fresh preconditioner"
        )

    if sp.issparse(A):
        A_csr = canonical_csr(A)
        if A_csr.dtype.kind != "f":
            A_csr = sp.csr_matrix((A_csr.data.astype(np.float64), A_csr.indices, A_csr.indptr),
                                  shape=A_csr.shape)
        A64 = SparseOperator(A_csr, "float64", "float64", what="A")
    else:
        A_csr = None
        A64 = CallableOperator(A)

    b64 = np.array(b, dtype=np.float64)  # copy: never alias the user's b
    x0_mode = "zero"
    x0_64 = None
    if isinstance(x0, str):
        if x0 != "Mb":
            raise ValueError(f"x0={x0!r}: the only string accepted is 'Mb' (start from M @ b)")
        x0_mode = "Mb"
    elif x0 is not None:
        x0_64 = np.array(_check_vector(x0, n, "x0"), dtype=np.float64)
        x0_mode = "given"
    bnrm = float(np.linalg.norm(b64))
    return Problem(n=n, A_csr=A_csr, A_user=A, A64=A64, b64=b64, x0_64=x0_64, M_user=M,
                   bnrm=bnrm, tol=max(atol, rtol * bnrm), rtol=rtol, atol=atol,
                   maxiter=maxiter, out_dtype=np.dtype(data_dtype), data_dtype=np.dtype(data_dtype),
                   x0_mode=x0_mode)


def _is_mpsolve_precond(M):
    from mpsolve.precond.base import Preconditioner

    return isinstance(M, Preconditioner)


# ------------------------------------------------------------------ system
def make_ops(device: str, dtype, dot_mode: str) -> SimpleNamespace:
    """The vector primitives for one solve, looked up once (house rule 5)."""
    dt = (dtype_name(dtype),)
    ops = SimpleNamespace(dtype=np.dtype(dtype), device=device, dot_mode=dot_mode)
    ops.dot = lookup(device, "dot", dt, dot_mode)
    ops.nrm2 = lookup(device, "nrm2", dt, dot_mode)
    for name in _VECTOR_OPS:
        setattr(ops, name, lookup(device, name, dt))
    ops.copy = lookup(device, "copy", dt * 2)
    ops.scal = lookup(device, "scal", dt)
    ops.lincomb = lookup(device, "lincomb", dt)
    ops.mdot = lookup(device, "mdot", dt, dot_mode)
    ops.maxpy = lookup(device, "maxpy", dt)
    try:  # fused update + norm where the device has one for this reduction mode
        ops.axpy2_nrm2 = lookup(device, "axpy2_nrm2", dt, dot_mode)
    except KeyError:
        axpy2, nrm2 = ops.axpy2, ops.nrm2

        def axpy2_nrm2(a, x, y, b, u, v):
            axpy2(a, x, y, b, u, v)
            return nrm2(v)

        ops.axpy2_nrm2 = axpy2_nrm2
    ops.xp = array_module(device)      # workspace allocation: xp.empty / xp.zeros
    return ops


@dataclass
class System:
    """A :class:`Problem` realised at one :class:`Precision`."""

    problem: Problem
    precision: Precision
    dtype: np.dtype                           # working dtype
    matvec: Callable                          # f(x, y): y = A x, working dtype
    residual: Callable                        # f(x, b, r): r = b - A x, working dtype
    psolve: Optional[Callable]                # f(r, z): z = M r, or None (identity)
    ops: SimpleNamespace
    b: np.ndarray                             # b in the working dtype
    A_op: object
    M_obj: object = None                      # the preconditioner object (for reports)
    precond_setup_time: float = 0.0
    diverged: bool = False                    # a stage ended worse than it started
    matvec_dot: Optional[Callable] = None     # f(x, y) -> x . y after y = A x (fused or not)


def _realise_preconditioner(problem: Problem, precision: Precision, wdt):
    M = problem.M_user
    if M is None:
        return None, None, 0.0
    if _is_mpsolve_precond(M):
        t = 0.0
        if not M.is_setup:
            if problem.A_csr is None:
                raise TypeError(
                    f"M={type(M).__name__} needs the matrix entries of A, but A is a "
                    "LinearOperator; pass A as a sparse matrix, or M as an operator"
                )
            M.setup(problem.A_csr, dtype=precision.precond)
            t = M.setup_time

        def psolve(r, z):
            M.apply(r, z)  # z = M r

        return psolve, M, t
    if sp.issparse(M):
        op = SparseOperator(canonical_csr(M), precision.precond, precision.accumulate, what="M")
    else:
        op = CallableOperator(M)
    return op.bind(wdt, wdt), op, 0.0


def make_system(problem: Problem, precision: Precision, device: str = "cpu") -> System:
    """Store ``A`` and ``M`` at ``precision`` and look up the kernels."""
    wdt = precision.working_dtype
    if problem.A_csr is not None:
        if precision.matrix == "float64" and problem.A64 is not None:
            A_op = problem.A64
        else:
            A_op = SparseOperator(problem.A_csr, precision.matrix, precision.accumulate, device, "A")
    else:
        A_op = problem.A64
    matvec = A_op.bind(wdt, wdt)
    residual = A_op.bind_residual(wdt)
    matvec_dot = (getattr(A_op, "bind_dot", lambda dt: None)(wdt)
                  if precision.dot == "native" else None)
    psolve, M_obj, t = _realise_preconditioner(problem, precision, wdt)
    key = (device, wdt.name, precision.dot)
    ops = problem._ops_cache.get(key)
    if ops is None:
        ops = problem._ops_cache[key] = make_ops(device, wdt, precision.dot)
    from ._demote import demote

    b = demote(problem.b64, wdt, "b")
    if b is problem.b64:
        b = problem.b64  # FP64 working precision shares the (private) FP64 copy
    if matvec_dot is None:  # compose: the reduction mode's own dot after the product
        dot = ops.dot

        def matvec_dot(x, y):
            matvec(x, y)
            return dot(x, y)

    return System(problem=problem, precision=precision, dtype=wdt, matvec=matvec,
                  residual=residual, psolve=psolve, ops=ops, b=b, A_op=A_op,
                  M_obj=M_obj, precond_setup_time=t, matvec_dot=matvec_dot)
