"""``make_system``: the ONE place where solver inputs are checked and converted.

Solver bodies assume clean input (house rule 3).  Every rejection names the
argument and says how to fix it.  The user's ``A``, ``b``, ``x0`` and ``M`` are
never modified: anything that must change is copied first.

Two stages:

* :class:`Problem` -- the validated problem in FP64 (canonical CSR ``A`` or a
  wrapped ``LinearOperator``, ``b``, ``x0``, the absolute tolerance), built once,
  on the solve's *device*: the one of the arrays (:func:`mpsolve.backend.device_of`)
  or an explicit ``device=``;
* :class:`System` -- the problem *realised at a* :class:`~mpsolve.Precision`:
  ``A`` stored at ``precision.matrix`` with its SpMV bound, the preconditioner's
  apply, and the vector primitives looked up from the kernel registry.  The
  escalation and refinement drivers build further Systems from one Problem, and
  they all share the Problem's :class:`Workspace`.

``A`` is checked and put in canonical CSR form here, once
(:mod:`mpsolve._sparse`); a preconditioner is set up from that canonical matrix
without checking it again.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import scipy.sparse as sp

from ._demote import demote
from ._sparse import canonical_csr, check_matrix, dtype_check
from .backend import DEFAULT_DEVICE, array_module, on_host, resolve_device, to_device, to_host
from .kernels.primitives import Primitives, bind_primitives
from .kernels.registry import provides
from .operator import CallableOperator, SparseOperator
from .precision import Precision, in_field
from .precond.base import Preconditioner

__all__ = ["Problem", "System", "Workspace", "make_problem", "make_system", "make_ops",
           "STAGNATION"]

#: A stage stops replacing residuals (or refining) once the true residual fails to
#: shrink by this factor: it has reached the accuracy floor of its precision.
STAGNATION = 0.5


# ------------------------------------------------------------------ checks
def _check_vector(v, n, name):
    arr = to_host(v)
    if arr.dtype == object:
        raise TypeError(f"{name} must be a numeric array, got {type(v).__name__}")
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(
            f"{name} has shape {np.shape(v)}, but A is {n}x{n}: {name} must have "
            f"shape ({n},) or ({n}, 1)"
        )
    dtype_check(arr.dtype, name)
    if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise ValueError(f"{name} contains {bad} NaN or Inf value(s)")
    return arr


class ToleranceError(ValueError, TypeError):
    """A bad ``rtol``/``atol``: a ``ValueError`` as SciPy raises (``atol=None`` and
    ``atol='legacy'`` included), and a ``TypeError`` for a value of the wrong type."""


def _check_tol(value, name):
    """A tolerance as a float: real, non-negative, not NaN; ``inf`` allowed (SciPy: a
    tolerance that every residual meets returns ``x0`` at once with ``info = 0``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ToleranceError(f"{name}={value!r}: must be a real, non-negative number "
                             "(SciPy's 'legacy' and None are not accepted either)")
    v = float(value)
    if np.isnan(v) or v < 0:
        raise ToleranceError(f"{name}={value!r}: must be a non-negative number (not NaN)")
    return v


def _check_maxiter(maxiter, default):
    if maxiter is None:
        return default
    if isinstance(maxiter, (bool, np.bool_)) or not isinstance(maxiter, numbers.Integral):
        raise TypeError(f"maxiter must be a positive integer or None, got {maxiter!r}")
    if maxiter <= 0:
        raise ValueError(f"maxiter={maxiter}: must be a positive integer (or None for the default)")
    return int(maxiter)


# ------------------------------------------------------------------ workspace
class Workspace:
    """The vectors of one solve, allocated once on its device (house rule 6).

    ``get(name, shape, dtype)`` returns the same array for the same key every time,
    so a Krylov body called again -- after a residual replacement, an escalation to
    another policy of the same working dtype, or in the next refinement step --
    allocates nothing.  ``allocations`` counts the arrays made.
    """

    def __init__(self, xp):
        self.xp = xp
        self._arrays = {}
        self.allocations = 0

    def get(self, name, shape, dtype):
        key = (name, shape, np.dtype(dtype).char)
        a = self._arrays.get(key)
        if a is None:
            a = self._arrays[key] = self.xp.empty(shape, dtype=dtype)
            self.allocations += 1
        return a

    def zeros(self, name, shape, dtype):
        a = self.get(name, shape, dtype)
        a.fill(0)
        return a

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self._arrays.values()))


# ------------------------------------------------------------------ problem
@dataclass
class Problem:
    """The validated problem, in FP64 (see module docstring)."""

    n: int
    A_csr: Optional[sp.csr_matrix]      # canonical CSR on the host, any float dtype; None for an operator
    A_user: object                      # what the user passed (for a LinearOperator)
    A64: object                         # FP64 operator used for the true residual
    b64: object                         # FP64 b on the device
    x0_64: object                       # FP64 x0 on the device; None: zero start
    M_user: object
    bnrm: float
    tol: float                          # absolute: max(atol, rtol * ||b||)
    rtol: float
    atol: float
    maxiter: int
    out_dtype: np.dtype                 # dtype of the x returned to the user
    data_dtype: np.dtype                # float (or complex) dtype of the user's A/b
    x0_mode: str = "given"              # "zero", "given" or "Mb"
    device: str = DEFAULT_DEVICE        # where the solve runs
    xp: object = np                     # that device's array module
    out_host: bool = True               # return x as a NumPy array (the caller's arrays were)
    workspace: Optional[Workspace] = None
    precond_side: str = "left"          # the side the method applies M on
    _ops_cache: dict = field(default_factory=dict)
    #: the first residual of a zero start is ``b`` itself: checked (exact zeros) once per
    #: solve and then no product with ``A`` -- SciPy's solvers, given an exact
    #: preconditioner, use at most three products with ``A``, and so does mpsolve
    _first_residual: bool = True
    #: a complex problem: every dtype of its policies is realised as the complex twin
    #: (:func:`mpsolve.precision.in_field`); ``hp`` is FP64 or complex128, the dtype of the
    #: private copies ``b64``/``x0_64``, the iterate ``x64`` and the true residual
    is_complex: bool = False

    @property
    def hp(self) -> np.dtype:
        """The FP64 dtype of this problem's field: float64, or complex128."""
        return in_field("float64", self.is_complex)

    def realise(self, dtype) -> np.dtype:
        """A policy's real dtype name in this problem's field (complex twin or itself)."""
        return in_field(dtype, self.is_complex)

    def true_residual(self, x64, r64) -> float:
        """``r64 = b - A x64`` in FP64; returns ``||r64||_2``."""
        first, self._first_residual = self._first_residual, False
        if first and self.x0_mode == "zero" and not bool(self.xp.any(x64)):
            r64[:] = self.b64                                  # b - A 0, exactly
        else:
            self.A64.bind_residual(self.hp)(x64, self.b64, r64)  # r = b - A x in FP64
        return float(self.xp.linalg.norm(r64))

    def all_finite(self, x) -> bool:
        return bool(self.xp.isfinite(x).all())

    def answer(self, x64):
        """``x64`` in the caller's dtype, on the caller's device."""
        x = x64 if x64.dtype == self.out_dtype else x64.astype(self.out_dtype)
        return to_host(x) if self.out_host else x


def _fp64_copy(user, checked, device, xp, dtype=np.float64):
    """A private FP64 (``dtype``: complex128 for a complex problem) copy of a vector on
    ``device``: from the caller's own array when it already lives on a device (a CuPy
    ``b`` is checked on a host copy but not sent back and forth), else from the checked
    host array."""
    src = checked if on_host(user) else user
    return xp.array(to_device(src, device), dtype=dtype).reshape(-1)


def _is_complex(*objs) -> bool:
    """Whether any of the (checked) arguments -- arrays, matrices, operators, or dtypes --
    holds complex data: then the whole solve is complex (SciPy's rule: a real ``A`` with a
    complex ``b`` solves in complex)."""
    def kind(o):
        d = o if isinstance(o, np.dtype) else getattr(o, "dtype", None)
        return np.dtype(d).kind if d is not None else "f"
    return any(kind(o) == "c" for o in objs if o is not None and not isinstance(o, str))


def _check_complex_device(device):
    """A complex solve needs complex kernels: a device without them says so at set-up."""
    if not provides(device, "dot", ("complex128",), "native"):
        raise TypeError(
            f"the {device!r} device has no complex kernels: this complex system can be "
            "solved on device='cpu' (or 'reference'); pass NumPy/SciPy arrays or "
            "device='cpu'")


def make_problem(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None,
                 default_maxiter=lambda n: 10 * n, device=None, precond_side="left") -> Problem:
    """Validate and convert the user's arguments (SciPy's rules).

    ``device``: where the solve runs; ``None`` takes the device of ``A``, ``b`` and
    ``x0`` (:func:`mpsolve.backend.resolve_device`: an unknown device, or arrays on two
    devices, is a ``ValueError``).  Host arrays are copied to the device once; the
    answer goes back to the caller's side (a NumPy array when ``b`` was one, a CuPy
    array when it was one).  ``A``, ``b`` and ``x0`` are checked on the host once (a
    CuPy sparse ``A`` is copied there for that); the vectors the solve works on are
    FP64 copies made on the device from the caller's arrays.
    ``precond_side``: the side the method applies ``M`` on (told to a preconditioner
    set up here).
    """
    device = resolve_device(device, A, b, None if isinstance(x0, str) else x0)
    xp = array_module(device)           # first: a device that cannot run says so here
    out_host = on_host(b)
    if not on_host(A) and hasattr(A, "get"):
        A = A.get()                     # a device sparse matrix: checked on the host
    A = check_matrix(A, "A")
    n = A.shape[0]
    b_user = b
    b = _check_vector(b, n, "b")
    rtol = _check_tol(rtol, "rtol")
    atol = _check_tol(atol, "atol")
    maxiter = _check_maxiter(maxiter, default_maxiter(n))

    a_dtype = np.dtype(getattr(A, "dtype", None) or np.float64)
    data_dtype = np.result_type(a_dtype if a_dtype.kind in "fc" else np.float64,
                                b.dtype if b.dtype.kind in "fc" else np.float64)
    x0_checked = None
    if x0 is not None and not isinstance(x0, str):
        x0_checked = _check_vector(x0, n, "x0")
    if M is not None and not isinstance(M, Preconditioner):
        M = check_matrix(M, "M")
        if M.shape != (n, n):
            raise ValueError(f"M has shape {M.shape}, but A is {n}x{n}: M must be {n}x{n}")
    elif M is not None and M.is_setup and M.shape != (n, n):
        raise ValueError(
            f"M was set up for a {M.shape[0]}x{M.shape[1]} matrix, but A is {n}x{n}; "
            "call M.setup(A) again or pass a fresh preconditioner"
        )
    # a complex M (a matrix or operator, or a preconditioner set up for a complex matrix)
    # makes the solve complex as well: its products with real vectors are complex
    cplx = _is_complex(A, b, x0_checked,
                       M.storage_dtype if isinstance(M, Preconditioner) else M)
    if cplx:
        _check_complex_device(device)
        data_dtype = np.result_type(data_dtype, np.complex64)
    hp = in_field("float64", cplx)

    if sp.issparse(A):
        A_csr = canonical_csr(A)
        if A_csr.dtype.kind not in "fc" or (cplx and A_csr.dtype.kind != "c"):
            # integer data as FP64 (SciPy's rule); a real A of a complex problem in complex128
            A_csr = sp.csr_matrix((A_csr.data.astype(hp), A_csr.indices, A_csr.indptr),
                                  shape=A_csr.shape)
        A64 = SparseOperator(A_csr, hp, "float64", device, what="A")
    else:
        A_csr = None
        A64 = CallableOperator(A, device)

    b64 = _fp64_copy(b_user, b, device, xp, hp)  # a copy: never alias the user's b
    x0_mode = "zero"
    x0_64 = None
    if isinstance(x0, str):
        if x0 != "Mb":
            raise ValueError(f"x0={x0!r}: the only string accepted is 'Mb' (start from M @ b)")
        x0_mode = "Mb"
    elif x0 is not None:
        x0_64 = _fp64_copy(x0, x0_checked, device, xp, hp)
        x0_mode = "given"
    bnrm = float(xp.linalg.norm(b64))
    return Problem(n=n, A_csr=A_csr, A_user=A, A64=A64, b64=b64, x0_64=x0_64, M_user=M,
                   bnrm=bnrm, tol=max(atol, rtol * bnrm if bnrm else 0.0), rtol=rtol, atol=atol,
                   maxiter=maxiter, out_dtype=np.dtype(data_dtype), data_dtype=np.dtype(data_dtype),
                   x0_mode=x0_mode, device=device, xp=xp, out_host=out_host,
                   workspace=Workspace(xp), precond_side=precond_side, is_complex=cplx)


# ------------------------------------------------------------------ system
def make_ops(device: str, dtype, dot_mode: str) -> Primitives:
    """The vector primitives for one solve, looked up once (house rule 5)."""
    return bind_primitives(device, dtype, dot_mode, array_module(device))


@dataclass
class System:
    """A :class:`Problem` realised at one :class:`Precision`."""

    problem: Problem
    precision: Precision
    dtype: np.dtype                           # working dtype
    matvec: Callable                          # f(x, y): y = A x, working dtype
    residual: Callable                        # f(x, b, r): r = b - A x, working dtype
    psolve: Optional[Callable]                # f(r, z): z = M r, or None (identity)
    ops: Primitives
    b: object                                 # b in the working dtype, on the device
    A_op: object
    M_obj: object = None                      # the preconditioner object (for reports)
    precond_setup_time: float = 0.0
    diverged: bool = False                    # a stage ended worse than it started
    matvec_dot: Optional[Callable] = None     # f(x, y) -> x . y after y = A x (fused or not)
    basis: Optional[np.dtype] = None          # GMRES's basis dtype (precision.basis realised)

    @property
    def workspace(self) -> Workspace:
        return self.problem.workspace


def _realise_preconditioner(problem: Problem, precision: Precision, wdt):
    M = problem.M_user
    if M is None:
        return None, None, 0.0
    device = problem.device
    if isinstance(M, Preconditioner):
        t = 0.0
        if not M.is_setup:
            if problem.A_csr is None:
                raise TypeError(
                    f"M={type(M).__name__} needs the matrix entries of A, but A is a "
                    "LinearOperator; pass A as a sparse matrix, or M as an operator"
                )
            M.setup_canonical(problem.A_csr, dtype=problem.realise(precision.precond),
                              device=device, side=problem.precond_side)
            t = M.setup_time
        elif M.device != device:
            raise ValueError(
                f"M was set up for device {M.device!r}, but this solve runs on {device!r}: "
                f"call M.setup(A, device={device!r}) or pass a fresh preconditioner")

        def psolve(r, z):
            M.apply(r, z)  # z = M r

        return psolve, M, t
    if sp.issparse(M):
        C = canonical_csr(M)
        if C.dtype.kind not in "fc" or (problem.is_complex and C.dtype.kind != "c"):
            C = sp.csr_matrix((C.data.astype(problem.hp), C.indices, C.indptr), shape=C.shape)
        op = SparseOperator(C, problem.realise(precision.precond), precision.accumulate,
                            device, what="M")
    else:
        op = CallableOperator(M, device)
    return op.bind(wdt, wdt), op, 0.0


def make_system(problem: Problem, precision: Precision) -> System:
    """Store ``A`` and ``M`` at ``precision`` on the problem's device and look up the kernels."""
    device = problem.device
    wdt = problem.realise(precision.working)
    if problem.is_complex and precision.compressed:
        raise ValueError(
            f"precision={precision.name!r} stores GMRES's basis in {precision.basis} "
            "(CB-GMRES), which supports real systems only; for this complex system use "
            f"precision={precision.name.removesuffix('-cb')!r}")
    if problem.A_csr is not None:
        if precision.matrix == "float64" and problem.A64 is not None:
            A_op = problem.A64
        else:
            A_op = SparseOperator(problem.A_csr, problem.realise(precision.matrix),
                                  precision.accumulate, device, "A")
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
                  M_obj=M_obj, precond_setup_time=t, matvec_dot=matvec_dot,
                  basis=problem.realise(precision.basis))
