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

import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import scipy.sparse as sp

from ._demote import PrecisionRangeError, demote
from ._sparse import (canonical_csr, check_matrix, dtype_check, keep_block_size,
                      kernel_ready)
from .backend import (DEFAULT_DEVICE, HOST_DEVICE, array_module, on_host, resolve_device,
                      to_device, to_host)
from .kernels.primitives import Primitives, bind_primitives
from .kernels.safenorm import all_finite, checked_norm, ldexp_array, norm, scale_exponent
from .kernels.registry import launch_plan, lookup, provides
from .operator import CallableOperator, SparseOperator
from .precision import Precision, in_field, real_dtype
from .precond.base import Preconditioner, needs_setup, setup_for_solve
from .result import USER_STOP, callback_period, wants_stop

__all__ = ["Problem", "System", "Workspace", "make_problem", "make_system", "make_ops",
           "set_rhs", "derive_problem", "system_for", "compiled_loop", "STAGNATION"]

#: A stage stops replacing residuals (or refining) once the true residual fails to
#: shrink by this factor: it has reached the accuracy floor of its precision.
STAGNATION = 0.5

#: :meth:`Problem.true_residual` reports the computed norm of the FP64 residual as it is
#: where its rounding bound is below this fraction of the tolerance, and the norm plus the
#: bound above it.  Either way a residual is only called within the tolerance when the
#: norm plus *twice* the bound is: the exact residual meets the tolerance, and so does any
#: other FP64 evaluation of ``b - A x`` (another summation order: a caller's check).
CERTIFY = 2.0**-10

_F64 = np.dtype(np.float64)
_C128 = np.dtype(np.complex128)


# ------------------------------------------------------------------ checks
def refuse_sparse(v, name):
    """A SciPy sparse vector or block is refused by name (NumPy would take it for an object
    array, and the message would say "Python objects")."""
    if sp.issparse(v):
        raise TypeError(f"{name} is a SciPy sparse {v.format} matrix: pass a dense array, "
                        f"{name}.toarray()")


def _check_vector(v, n, name):
    if type(v) is not np.ndarray:
        refuse_sparse(v, name)
    arr = kernel_ready(v if type(v) is np.ndarray else to_host(v))
    if arr.dtype == object:
        raise TypeError(f"{name} holds Python objects (dtype object): pass a numeric array, "
                        f"for example np.asarray({name}, dtype=np.float64)")
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr.reshape(-1)                   # a column; a row (1, n) is refused, as SciPy
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
    if type(value) is float and value >= 0.0:  # the common case, at once (NaN fails >=)
        return value
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]                       # a 0-d array is its number, as for SciPy
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
    if type(maxiter) is int and maxiter > 0:    # the common case, at once
        return maxiter
    if isinstance(maxiter, np.ndarray) and maxiter.ndim == 0:
        maxiter = maxiter[()]                   # a 0-d array is its number, as for SciPy
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
        self._seen = {}         # (name, shape, dtype as passed) -> array: no np.dtype() call
        self.allocations = 0

    def get(self, name, shape, dtype):
        a = self._seen.get((name, shape, dtype))
        if a is not None:
            return a
        key = (name, shape, np.dtype(dtype).char)
        a = self._arrays.get(key)
        if a is None:
            a = self._arrays[key] = self.xp.empty(shape, dtype=dtype)
            self.allocations += 1
        self._seen[(name, shape, dtype)] = a
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
    #: ``b`` (and ``x0``, ``atol``) are held as ``2^-b_exp`` times the caller's when ``||b||``
    #: is outside [2^-500, 2^500], so no square of a residual's norm over- or underflows
    #: (a tiny ``b`` is scaled up only as far as a given ``x0`` stays in that range);
    #: the answer and the callback's ``x`` are scaled back (exact: powers of two)
    b_exp: int = 0
    #: :func:`system_for`'s Systems (or the range error of their set-up), one per policy
    _systems: dict = field(default_factory=dict)
    #: the workspace outlives the solve (a :class:`mpsolve.Solver`'s): :meth:`answer`
    #: copies ``x`` even where no cast is needed, so the next solve cannot overwrite it
    reused: bool = False
    #: :meth:`_bind_residual`'s ``(kernel, fused)`` for ``A64`` (made once)
    _residual64: Optional[tuple] = None
    #: :meth:`residual_bound`'s kernel ``f(x, b) -> sum_i v_i^2`` (bound when a pass needs
    #: it) and its two constants (FP64 and Dot2 residuals); made once
    _rbound: Optional[list] = None
    #: complex data: the ``residual_dd`` kernel of ``A``'s real form
    #: (:func:`mpsolve.refine.real_form`), made by the first double-double stage
    _dd64: Optional[Callable] = None
    #: the first residual of a zero start (none, or an all-zero ``x0`` given: SciPy's
    #: ``x.any()`` test) is ``b`` itself: checked (exact zeros) once per solve and then no
    #: product with ``A`` -- SciPy's solvers, given an exact preconditioner, use at most
    #: three products with ``A``, and so does mpsolve
    _first_residual: bool = True
    #: a complex problem: every dtype of its policies is realised as the complex twin
    #: (:func:`mpsolve.precision.in_field`); ``hp`` is FP64 or complex128, the dtype of the
    #: private copies ``b64``/``x0_64``, the iterate ``x64`` and the true residual
    is_complex: bool = False

    @property
    def hp(self) -> np.dtype:
        """The FP64 dtype of this problem's field: float64, or complex128."""
        return _C128 if self.is_complex else _F64

    def realise(self, dtype) -> np.dtype:
        """A policy's real dtype name in this problem's field (complex twin or itself)."""
        return in_field(dtype, self.is_complex)

    def true_residual(self, x64, r64) -> float:
        """``r64 = b - A x64`` in FP64; returns ``||r64||_2`` -- where that meets the
        tolerance, *certified*: when the rounding error of the FP64 residual could matter
        (:meth:`residual_bound` over :data:`CERTIFY` times the tolerance) the bound is
        added, so the value returned is an upper bound of the exact ``||b - A x64||_2``;
        and it is within the tolerance only where the norm plus twice the bound is
        (:meth:`certified`).
        Every convergence decision goes through here: where ``|A| |x|`` is so much larger
        than ``|b|`` that ``b - A x`` cancels to rounding noise (a diverged iterate of a
        singular system, a tolerance below what FP64 can verify) a computed residual of
        0 no longer reads as "converged".  An operator without entries (a
        ``LinearOperator``) has no bound: the rounding of ``A x`` to FP64 stands for it
        (:meth:`operator_floor`).
        On a device with ``residual_norms`` (the host devices) the residual, its norm and
        the bound's sum come from one pass over ``A``."""
        first, self._first_residual = self._first_residual, False
        if first and not bool(x64.any()):               # no start, or a zero one given
            r64[:] = self.b64                                  # b - A 0, exactly
            return self.bnrm                                   # (= norm(b64), taken already)
        bound = self._residual64
        if bound is None:
            bound = self._residual64 = self._bind_residual()
        kernel, fused = bound
        if not fused:
            kernel(x64, self.b64, r64)                         # r = b - A x in FP64
            return self.certified(norm(r64, self.xp), x64)     # (norm: overflow-safe)
        # one pass: r = b - A x, ||r||^2 and the rounding bound's sum of squares
        ssq, ssq_v = kernel(x64, self.b64, r64)
        return self.certified(checked_norm(math.sqrt(ssq), r64, self.xp), x64, ssq_v=ssq_v)

    def _bind_residual(self):
        """``(kernel, fused)``: the device's one-pass ``residual_norms`` for ``A64``
        (``fused``), or where it has none (a device without the host ops, an operator
        without entries) ``r = b - A x`` alone."""
        hp = self.hp
        try:
            return self.A64._csr_kernel("residual_norms", (hp, hp, hp), "acc64"), True
        except (AttributeError, KeyError):
            return self.A64.bind_residual(hp), False

    def replace_values(self, C) -> None:
        """Take ``C``, a canonical CSR matrix of ``A``'s pattern and field, as ``A``
        (:meth:`mpsolve.Solver.update`): its FP64 operator made again, and the kernels
        bound to the old values dropped (the residual's and its rounding bound's)."""
        self.A_csr = self.A_user = keep_block_size(C, self.A_csr)   # (the same pattern)
        self.A64 = SparseOperator(C, self.hp, "float64", self.device, what="A")
        self._residual64 = self._rbound = self._dd64 = None

    def certified(self, nrm, x64, b64=None, tol=None, dd=False, ssq_v=None) -> float:
        """``nrm``, the norm of the FP64 residual ``b - A x64`` (``b64``: default the
        problem's ``b``), as :meth:`true_residual` returns it where ``nrm`` meets ``tol``
        (default the problem's): ``nrm`` itself if ``nrm + 2 bound`` meets ``tol`` too
        and the :meth:`residual_bound` is at most :data:`CERTIFY` times ``tol``, ``nrm +
        bound`` if it is larger, and ``nrm + 2 bound`` (over ``tol``: not certified) where
        ``nrm + 2 bound`` misses ``tol``.  A value within ``tol`` is so an exact residual
        within ``tol`` whose FP64 evaluation in any other order (``||b - A @ x||`` by
        NumPy, off from ``nrm`` by at most the two bounds) is within ``tol`` as well.
        ``dd``: ``nrm`` is the norm of the residual computed by ``residual_dd`` (Dot2 rows)
        of ``x64`` alone, whose bound is ``u nrm + gamma_{2m+1}^2 ||v||`` (ORO 2005, as
        :mod:`mpsolve.kernels.cpu.dd` states it for a pair with a zero low part); its
        answer is certified exactly (``nrm + bound`` within ``tol``: an FP64 evaluation
        cannot check the tolerances below FP64's floor that the ``eft`` presets reach).
        ``ssq_v``: the bound's sum of squares when the residual's pass computed it already
        (``residual_norms``)."""
        tol = self.tol if tol is None else tol
        if nrm <= tol:
            if self.A_csr is not None:
                bound = self.residual_bound(x64, b64, dd, ssq_v)
                if dd:
                    bound += 1.01 * 2.0**-53 * nrm
            else:               # (an estimate, not a bound: not doubled)
                bound = self.operator_floor(nrm, b64)
            reach = nrm + (bound if dd or self.A_csr is None else 2.0 * bound)
            if not reach <= tol:                               # (NaN: not certified)
                return reach
            if not bound <= CERTIFY * tol:
                return nrm + bound
        return nrm

    def operator_floor(self, nrm, b64=None) -> float:
        """For an operator without entries (a ``LinearOperator``), whose rounding inside
        ``A x`` cannot be bounded: the rounding of ``A x`` to FP64 alone, ``u ||A x||``
        with ``||A x|| <= ||b|| + nrm`` -- not an upper bound of the error, but a
        tolerance below it (``rtol=0``, ``1e-16``) is no longer met by a computed residual
        of 0 (``info == 0`` with an exact residual above the tolerance)."""
        bn = self.bnrm if b64 is None else norm(b64, self.xp)
        return 2.0**-53 * (bn + nrm)

    def residual_bound(self, x64, b64=None, dd=False, ssq_v=None) -> float:
        """A bound of the rounding error of the FP64 residual ``b - A x64`` that
        :meth:`true_residual` computes: ``gamma ||v||_2`` with ``v_i = |b_i| + sum_j
        |a_ij| |x_j|`` (one pass over ``A``, the ``residual_scale`` kernel).  Each row is
        a sum of at most ``m + 1`` terms (``m``: the longest row's stored entries), in any
        order, so its error is at most ``gamma_{m+1} v_i``, ``gamma_k = k u / (1 - k u)``
        (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. (3.4));
        complex rows: ``sqrt(2) gamma_{m+2}`` (ibid., section 3.6).  ``dd``: the Dot2
        residual's ``gamma_{2m+1}^2 ||v||`` (:meth:`certified`); complex data run it on
        the real form (:func:`mpsolve.refine.real_form`), whose rows have ``2m`` entries
        and term sums at most ``v_i`` each: ``sqrt(2) gamma_{4m+1}^2 ||v||``.  The constants
        carry a margin for the rounding of ``v`` itself.  ``inf`` where ``v`` overflows.
        ``ssq_v``: ``||v||^2`` computed already (no pass over ``A`` then)."""
        rb = self._rbound
        if rb is None:
            rb = self._rbound = [None, *self._bound_constants()]
        b64 = self.b64 if b64 is None else b64
        if ssq_v is None:                 # (the kernel is bound where a pass needs it)
            if rb[0] is None:
                rb[0] = self._bound_kernel()
            ssq_v = rb[0](x64, b64)
        g = rb[2] if dd else rb[1]
        if ssq_v < math.inf:
            return g * math.sqrt(ssq_v)
        # ||v||^2 overflowed, ||v|| itself may not have (||A|| ||x|| past 1e154): v is
        # linear in (x, b), so take it of (x, b) / 2^512 -- the entries that underflow there
        # are below 2^-562 of the largest, their part of ||v|| beneath its last bit (the
        # factor 1 + 2^-40 covers it)
        if rb[0] is None:
            rb[0] = self._bound_kernel()
        s = 2.0**-512
        ssq_s = rb[0](x64 * s, b64 * s)
        if not ssq_s < math.inf:
            return math.inf
        return g * math.sqrt(ssq_s) * 2.0**512 * (1.0 + 2.0**-40)

    def _bound_constants(self):
        """``(gamma, gamma_dd)`` of :meth:`residual_bound` for ``A``'s longest row."""
        ip = self.A_csr.indptr
        m = int((ip[1:] - ip[:-1]).max()) if ip.size > 1 else 0

        def gamma_(k, u=2.0**-53):
            return k * u / (1.0 - k * u) * (1.0 + 4 * (m + 2) * u)
        if self.is_complex:
            return math.sqrt(2.0) * gamma_(m + 2), math.sqrt(2.0) * gamma_(4 * m + 1) ** 2
        return gamma_(m + 1), gamma_(2 * m + 1) ** 2

    def _bound_kernel(self):
        """``f(x, b) -> ||v||^2`` of :meth:`residual_bound` (the ``residual_scale`` kernel)."""
        hp = self.hp
        try:
            return self.A64._csr_kernel("residual_scale", (hp, hp), "acc64")
        except KeyError:           # a device without the kernel: on host copies
            H = self.A64.to_scipy()
            parts = launch_plan(HOST_DEVICE, "spmv", H.indptr)
            g = lookup(HOST_DEVICE, "residual_scale", (H.dtype, hp, hp), "acc64")
            return lambda x, b: g(parts, H.indptr, H.indices, H.data, to_host(x), to_host(b))

    def all_finite(self, x) -> bool:
        return all_finite(x, self.xp)

    def unscale(self, x):
        """A solve's ``x`` in the caller's units (``2^b_exp x``; ``x`` itself if unscaled)."""
        return ldexp_array(x, self.b_exp) if self.b_exp else x

    def answer(self, x64):
        """``x64`` in the caller's dtype and units, on the caller's device."""
        x64 = self.unscale(x64)
        if x64.dtype != self.out_dtype:
            x = x64.astype(self.out_dtype)
        elif self.reused and not self.b_exp:
            x = x64.copy()
        else:
            x = x64
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


#: ``||b||`` outside this range is scaled by a power of two (:attr:`Problem.b_exp`)
_B_RANGE = (2.0**-500, 2.0**500)


def make_problem(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None,
                 default_maxiter=lambda n: 10 * n, device=None, precond_side="left",
                 scale=True) -> Problem:
    """Validate and convert the user's arguments (SciPy's rules).

    ``device``: where the solve runs; ``None`` takes the device of ``A``, ``b`` and
    ``x0`` (:func:`mpsolve.backend.resolve_device`: an unknown device, or arrays on two
    devices, is a ``ValueError``).  Host arrays are copied to the device once; the
    answer goes back to the caller's side (a NumPy array when ``b`` was one, a CuPy
    array when it was one).  ``A``, ``b`` and ``x0`` are checked on the host once (a
    CuPy sparse ``A`` is copied there for that); the vectors the solve works on are
    FP64 copies made on the device from the caller's arrays.
    ``precond_side``: the side the method applies ``M`` on (told to a preconditioner
    set up here).  ``scale``: hold ``b`` scaled by a power of two when ``||b||`` is
    outside :data:`_B_RANGE` (:attr:`Problem.b_exp`; off for a caller that works on the
    problem's vectors itself in the caller's units).
    """
    device = resolve_device(device, A, b, None if isinstance(x0, str) else x0)
    xp = array_module(device)           # first: a device that cannot run says so here
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
    x0_checked = None
    if x0 is not None and not isinstance(x0, str):
        x0_checked = _check_vector(x0, n, "x0")
    if isinstance(M, str):
        raise TypeError(
            f"M={M!r} is a preconditioner's name, but M takes an operator (a matrix, a "
            f"LinearOperator or a Preconditioner), as in scipy.sparse.linalg; pass the name "
            f"as mpsolve.solve(A, b, method=..., precond={M!r}) or build it: "
            f"mpsolve.precond.make_preconditioner({M!r}).setup(A)")
    if M is not None and not isinstance(M, Preconditioner):
        M = check_matrix(M, "M")
        if M.shape != (n, n):
            raise ValueError(f"M has shape {M.shape}, but A is {n}x{n}: M must be {n}x{n}")
    elif M is not None and M.is_setup and M.shape != (n, n) and \
            getattr(M, "_solve_key", None) is None:
        raise ValueError(
            f"M was set up for a {M.shape[0]}x{M.shape[1]} matrix, but A is {n}x{n}; "
            "call M.setup(A) again or pass a fresh preconditioner"
        )
    # a complex M (a matrix or operator, or a preconditioner the caller set up for a
    # complex matrix) makes the solve complex as well: its products with real vectors are
    # complex -- one a solve set up is set up again for this A (setup_for_solve), in A's
    # field, so its last set-up says nothing
    m_field = M
    if isinstance(M, Preconditioner):
        m_field = M.storage_dtype if getattr(M, "_solve_key", None) is None else None
    cplx = _is_complex(A, b, x0_checked, m_field)
    if cplx:
        _check_complex_device(device)
    hp = in_field("float64", cplx)

    if sp.issparse(A):
        A_csr = canonical_csr(A)
        if A_csr.dtype.kind not in "fc" or (cplx and A_csr.dtype.kind != "c"):
            # integer data as FP64 (SciPy's rule); a real A of a complex problem in complex128
            A_csr = keep_block_size(sp.csr_matrix((A_csr.data.astype(hp), A_csr.indices,
                                                   A_csr.indptr), shape=A_csr.shape), A_csr)
        A64 = SparseOperator(A_csr, hp, "float64", device, what="A")
    else:
        A_csr = None
        A64 = CallableOperator(A, device)

    return Problem(n=n, A_csr=A_csr, A_user=A, A64=A64, M_user=M, maxiter=maxiter,
                   device=device, xp=xp, workspace=Workspace(xp), precond_side=precond_side,
                   is_complex=cplx,
                   **_rhs_fields(b_user, b, x0, x0_checked, n, a_dtype, cplx, device, xp,
                                 rtol, atol, scale))


def _rhs_fields(b_user, b, x0, x0_checked, n, a_dtype, cplx, device, xp, rtol, atol,
                scale) -> dict:
    """The fields of a :class:`Problem` that come from the right-hand side, ``x0`` and the
    tolerances (``b`` and ``x0`` checked already, ``b_user`` as the caller passed it;
    ``cplx``: the problem is complex)."""
    data_dtype = np.result_type(a_dtype if a_dtype.kind in "fc" else np.float64,
                                b.dtype if b.dtype.kind in "fc" else np.float64)
    if cplx:
        data_dtype = np.result_type(data_dtype, np.complex64)
    data_dtype = np.dtype(data_dtype)
    hp = in_field("float64", cplx)
    if data_dtype.itemsize > hp.itemsize:
        data_dtype = hp       # long double data: solved in FP64, answered in FP64 (SciPy)
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
    bnrm = norm(b64, xp)                # overflow-safe (kernels/safenorm.py)
    b_exp = 0
    if scale and bnrm and not _B_RANGE[0] <= bnrm <= _B_RANGE[1]:
        if bnrm == math.inf:
            # finite entries whose 2-norm overflows (n entries of 1e308): frexp(inf) is 0,
            # which left b as it was and tol = inf, met by x = 0 "in 0 iterations"; from
            # the largest component, 2^-b_exp ||b|| <= sqrt(n) max|b_i| / 2^b_exp < 1
            parts = b64.view(np.float64) if b64.dtype.kind == "c" else b64
            b_exp = scale_exponent(parts, xp) + (int(parts.size).bit_length() + 1) // 2
        else:
            b_exp = math.frexp(bnrm)[1]  # b = 2^b_exp b': ||b'|| in [1/2, 1), exactly
        if x0_64 is not None and b_exp < 0:
            # a start far larger than b (a tiny b, an O(1) x0): scaled up as far as b, x0
            # would leave the range (and its residual overflow the dots: CG and BiCGSTAB
            # stopped with -14 at once); b is scaled up only as far as x0 stays in range
            xnrm = norm(x0_64, xp)
            if xnrm > 0 and math.isfinite(xnrm):
                cap = math.frexp(xnrm)[1] - math.frexp(_B_RANGE[1])[1] + 1
                b_exp = min(0, max(b_exp, cap))
        b64 = ldexp_array(b64, -b_exp)
        x0_64 = None if x0_64 is None else ldexp_array(x0_64, -b_exp)
        bnrm = norm(b64, xp)
        try:                            # atol in the scaled units (b tiny: it may leave
            atol = math.ldexp(atol, -b_exp) if atol < math.inf else atol     # the range)
        except OverflowError:
            atol = math.inf             # (every residual meets it: x0 is the answer)
    return dict(b64=b64, x0_64=x0_64, x0_mode=x0_mode, bnrm=bnrm, rtol=rtol, atol=atol,
                tol=max(atol, rtol * bnrm if bnrm else 0.0), out_dtype=data_dtype,
                data_dtype=data_dtype, out_host=on_host(b_user), b_exp=b_exp)


def set_rhs(problem: Problem, b, x0=None, *, rtol, atol, maxiter) -> Problem:
    """Give ``problem`` a new right-hand side, start and tolerances, checked as
    :func:`make_problem` checks them (:class:`mpsolve.Solver` calls it once per solve; the
    operator part -- ``A``, ``M``, the device, the Systems of :func:`system_for` -- stays).

    ``maxiter=None`` keeps the problem's default.  Arrays on another device than the
    problem's are refused (:func:`mpsolve.backend.resolve_device`); so is complex data
    for a problem set up real (its operators and kernels are real)."""
    n = problem.n
    rtol = _check_tol(rtol, "rtol")
    atol = _check_tol(atol, "atol")
    if maxiter is not None:
        problem.maxiter = _check_maxiter(maxiter, None)
    quick = (problem.xp is np and not problem.is_complex and _plain(b, n)
             and (x0 is None or _plain(x0, n)))
    if quick:
        # the common call -- FP64 NumPy vectors on a host device -- without the general
        # path's conversions: b (and x0) are written into the problem's private FP64
        # copies; b's norm (as make_problem takes it) and all_finite(x0) are the finite
        # checks (a NaN or Inf makes b's norm non-finite); a b that needs scaling (or
        # holds a NaN or Inf: then the usual error) takes the general path
        b64 = _private(problem, "b64", b)
        bnrm = norm(b64, np)
        quick = bnrm == 0.0 or _B_RANGE[0] <= bnrm <= _B_RANGE[1]
    if quick:
        x0_64 = None if x0 is None else _private(problem, "x0_64", x0)
        if x0_64 is not None and not all_finite(x0_64, np):
            _check_vector(x0, n, "x0")
        problem.b64, problem.x0_64, problem.bnrm, problem.b_exp = b64, x0_64, bnrm, 0
        problem.x0_mode = "zero" if x0 is None else "given"
        problem.rtol, problem.atol = rtol, atol
        problem.tol = max(atol, rtol * bnrm if bnrm else 0.0)
        problem.out_dtype = problem.data_dtype = _F64
        problem.out_host = True
    else:
        resolve_device(problem.device, b, None if isinstance(x0, str) else x0)
        b_checked = _check_vector(b, n, "b")
        x0_checked = None
        if x0 is not None and not isinstance(x0, str):
            x0_checked = _check_vector(x0, n, "x0")
        if _is_complex(b_checked, x0_checked) and not problem.is_complex:
            raise TypeError(
                "b (or x0) is complex, but this solver was set up for a real system: "
                "create it with a complex A (or a complex preconditioner) to solve complex "
                "right-hand sides")
        a_dtype = np.dtype(getattr(problem.A_user, "dtype", None) or np.float64)
        for k, v in _rhs_fields(b, b_checked, x0, x0_checked, n, a_dtype, problem.is_complex,
                                problem.device, problem.xp, rtol, atol, scale=True).items():
            setattr(problem, k, v)
    problem._first_residual = True
    return problem


def derive_problem(problem: Problem, *, M, maxiter, x0, precond_side) -> Optional[Problem]:
    """``problem``'s system with another preconditioner ``M``, iteration limit and start,
    as :func:`make_problem` would make it from the same arguments -- without checking and
    converting ``A`` and ``b`` again (``method="auto"`` runs each candidate on it).

    ``problem`` must be unscaled (``b_exp == 0``, as ``make_problem(..., scale=False)``
    makes it); ``None`` when ``make_problem`` would scale ``b`` (``||b||`` outside
    :data:`_B_RANGE`): the caller then makes the problem afresh.  ``x0``: ``None`` keeps
    ``problem``'s start, else an array of length ``n`` in the problem's field (a previous
    candidate's answer: finite, on the problem's device), copied.  ``M``: a preconditioner
    set up for ``A`` on the problem's device, or ``None``; a matrix or an operator (the
    caller's own ``M``) also gives ``None``: ``make_problem`` checks and wraps it."""
    if problem.b_exp or not (problem.bnrm == 0.0 or _B_RANGE[0] <= problem.bnrm <= _B_RANGE[1]):
        return None
    if M is not None and not isinstance(M, Preconditioner):
        return None
    if M is not None and not (isinstance(M, Preconditioner) and M.is_setup):
        raise TypeError("derive_problem takes a preconditioner set up for A (or None)")
    sub = object.__new__(Problem)       # the checked fields shared; the rest made anew
    sub.__dict__.update(problem.__dict__)
    sub.M_user, sub.maxiter = M, _check_maxiter(maxiter, None)
    sub.precond_side, sub.workspace = precond_side, Workspace(problem.xp)
    sub._ops_cache, sub._systems, sub.reused, sub._first_residual = {}, {}, False, True
    if x0 is not None:
        sub.x0_64 = problem.xp.array(x0, dtype=problem.hp).reshape(-1)
        sub.x0_mode = "given"
    return sub


def needs_entries_error(what) -> TypeError:
    """The error for a preconditioner ``what`` to be set up on an ``A`` without entries."""
    return TypeError(
        f"{what} is set up from the matrix entries of A, but A is an operator without them "
        "(a LinearOperator); pass A as a sparse matrix or an ndarray, or the preconditioner "
        "as an operator (a LinearOperator or a set-up Preconditioner), or precond=None")


def _plain(v, n) -> bool:
    """``v`` is an FP64 NumPy vector of length ``n`` (:func:`set_rhs`'s quick path)."""
    return type(v) is np.ndarray and v.dtype == _F64 and v.shape == (n,)


def _private(problem, name, v):
    """``v`` copied into the problem's own FP64 array ``name`` (made once)."""
    own = getattr(problem, name)
    if own is None or own.shape != v.shape or own.dtype != _F64:
        own = np.empty(v.shape, _F64)
    np.copyto(own, v)
    return own


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
    replayed: int = 0                         # x: a stage's best iterate, recomputed (its
                                              # iteration in the solve's count)
    matvec_dot: Optional[Callable] = None     # f(x, y) -> x . y after y = A x (fused or not)
    basis: Optional[np.dtype] = None          # GMRES's basis dtype (precision.basis realised)
    loops: dict = field(default_factory=dict)  # compiled_loop's (runner, M's arrays), by op

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
        # one a solve set up: again for another matrix or another side (an approximate
        # inverse's "auto" variant is the side's: left M A ~ I, right A M ~ I)
        made = getattr(M, "_solve_args", None)
        if needs_setup(M, problem.A_csr, None if made is None else
                       (problem.precond_side, made[1])):
            if problem.A_csr is None:
                raise needs_entries_error(f"M={type(M).__name__} (precond={M.name!r})")
            setup_for_solve(M, problem.A_csr, dtype=problem.realise(precision.precond),
                            device=device, side=problem.precond_side)
            t = M.setup_time
        elif M.device != device:
            raise ValueError(
                f"M was set up for device {M.device!r}, but this solve runs on {device!r}: "
                f"call M.setup(A, device={device!r}) or pass a fresh preconditioner")

        if problem.is_complex and M.dtype.kind != "c":
            return _real_on_complex(M, problem), M, t

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
        op = CallableOperator(M, device, what="M")
    return op.bind(wdt, wdt), op, 0.0


def _real_on_complex(M, problem):
    """``psolve`` of a real preconditioner the caller set up, on a complex system: ``M (u
    + iv) = M u + i M v`` (as SciPy applies a real operator to a complex vector), the two
    parts through contiguous real scratch vectors of the problem's workspace."""
    ws, n, xp = problem.workspace, problem.n, problem.xp

    def psolve(r, z):
        rd = real_dtype(r.dtype)
        zd = real_dtype(z.dtype)
        u, mu = ws.get("m_re", n, rd), ws.get("m_re_out", n, zd)
        v, mv = ws.get("m_im", n, rd), ws.get("m_im_out", n, zd)
        xp.copyto(u, r.real)
        xp.copyto(v, r.imag)
        M.apply(u, mu)  # M u
        M.apply(v, mv)  # M v
        z.real[...] = mu
        z.imag[...] = mv

    return psolve


def check_basis(method: str, problem: Problem, precision: Precision) -> None:
    """A compressed GMRES basis (CB-GMRES) is real-only: GMRES on a complex ``problem``
    under such a policy is refused, before any set-up; CG and BiCGSTAB keep no basis and
    ignore the field (as on real systems)."""
    if method == "gmres" and problem.is_complex and precision.compressed:
        raise ValueError(
            f"precision={precision.name!r} stores GMRES's basis in {precision.basis} "
            "(CB-GMRES), which supports real systems only; for this complex system use "
            f"precision={precision.name.removesuffix('-cb')!r}")


def make_system(problem: Problem, precision: Precision) -> System:
    """Store ``A`` and ``M`` at ``precision`` on the problem's device and look up the kernels."""
    device = problem.device
    wdt = problem.realise(precision.working)
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
    key = (device, wdt, precision.dot)
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


def system_for(problem: Problem, precision: Precision) -> System:
    """:func:`make_system`, made once per policy and problem and then reused.

    The stored ``A``, the preconditioner and the bound kernels of a System do not depend
    on the right-hand side: a :class:`mpsolve.Solver` that solves again (its Problem given
    a new ``b`` by :func:`set_rhs`) finds them here, and only ``b`` in the working
    precision is made again (range-checked: it may not fit FP32).  A policy whose set-up
    raised :class:`PrecisionRangeError` (its FP32 ``A`` or preconditioner does not fit)
    raises the same error again without redoing that work, so every solve escalates as
    the first one did.  Within one solve each policy is realised once, so a fresh solve
    behaves as with :func:`make_system`.
    """
    got = problem._systems.get(precision)
    if got is None:
        try:
            got = make_system(problem, precision)
        except PrecisionRangeError as err:
            try:   # an error of b's own demotion depends on this b: not kept
                demote(problem.b64, problem.realise(precision.working), "b")
            except PrecisionRangeError:
                raise err from None
            problem._systems[precision] = err
            raise
        problem._systems[precision] = got
        return got
    if isinstance(got, PrecisionRangeError):
        raise got
    got.b = demote(problem.b64, got.dtype, "b")   # FP64 working precision: b64 itself
    got.diverged = False
    got.replayed = 0
    return got


# ------------------------------------------------------------------ compiled loops
#: Iterations a compiled loop runs per call at most (its residual-history buffer).
LOOP_CHUNK = 4096


def compiled_loop(sys: System, op: str):
    """A runner of the compiled loop ``op``, or ``None`` where the body's Python loop
    runs; made once per System.  ``"cg_loop"``: ``run(x, r, maxiter, tol, hist) -> (count,
    flag)``, CG's whole iteration, ``"bicgstab_loop"`` the same for BiCGSTAB;
    ``"gmres_arnoldi"``: the inner steps of one GMRES cycle (:func:`_arnoldi_runner`).

    It applies where the device has the op for the working dtype and reduction mode, ``A``
    is a stored CSR operator, the preconditioner has a fusable description
    (:meth:`mpsolve.precond.base.Preconditioner.fusable`; a sparse-matrix ``M`` is one
    CSR product) and the device's launch plan for the op accepts the sizes (the CPU: only
    where every kernel of the Python loop is serial, so both give the same bits).  The
    environment variable ``MPSOLVE_FUSED`` overrides: ``0`` never, ``1`` wherever the
    op exists, whatever the size (read when the System first asks).  An object that is
    not a :class:`System` (a body driven on bare primitives, as the GPU checks do) gets
    ``None``: the loops need the System's stored operators."""
    if not isinstance(sys, System):
        return None
    M = sys.problem.M_user
    # the preconditioner's set-up count: the same count, the same arrays (no call of
    # ``fusable`` per solve); ``None`` without one (no M, a matrix or an operator)
    setups = getattr(M, "setups", None) if isinstance(M, Preconditioner) else None
    got = sys.loops.get(op)
    if got is not None and setups is not None and got[2][0] is M and got[2][1] == setups:
        return got[0]
    arrays = _desc_arrays(M)
    if got is not None and len(got[1]) == len(arrays) and \
            all(a is b for a, b in zip(got[1], arrays)):
        sys.loops[op] = (got[0], got[1], (M, setups))
        return got[0]
    # first call, or the caller set its preconditioner up again since (new arrays)
    run = _make_loop(sys, op)
    sys.loops[op] = (run, arrays, (M, setups))
    return run


def run_compiled_loop(sys, op: str, x, r, maxiter, tol, hist, callback):
    """A single-vector body's whole iteration by its compiled loop ``op``
    (:func:`compiled_loop`): ``(count, count, flag)`` as the body returns it, or ``None``
    where the body's Python loop must run (no compiled loop here, or a callback wanting
    every iteration -- one with a ``period`` is called every ``period`` iterations)."""
    period = callback_period(callback)
    if callback is not None and not period:
        return None
    loop = compiled_loop(sys, op)
    if loop is None:
        return None
    count, flag = loop(x, r, maxiter, tol, hist, callback, period)
    return count, count, flag


def _desc_arrays(M) -> tuple:
    """The arrays of ``M``'s fusable description (empty without one): a runner made from
    them is kept while they are the preconditioner's arrays."""
    if not isinstance(M, Preconditioner) or not M.is_setup:
        return ()
    desc = M.fusable()
    if desc is None:
        return ()
    return tuple(a for item in desc[1] for a in (item if isinstance(item, tuple) else (item,)))


def _make_loop(sys: System, op: str):
    setting = os.environ.get("MPSOLVE_FUSED", "auto")
    problem, precision, wdt = sys.problem, sys.precision, sys.dtype
    device = problem.device
    A = sys.A_op
    if setting == "0" or problem.is_complex or wdt.kind != "f" \
            or not isinstance(A, SparseOperator) \
            or not provides(device, op, (wdt,), precision.dot):
        return None
    M = problem.M_user
    mdtype = wdt
    if M is None:
        desc = None
    elif isinstance(M, Preconditioner):
        desc = M.fusable() if _fusable_is_apply(M) else None
        mdtype = M.storage_dtype
    elif isinstance(sys.M_obj, SparseOperator):
        Mo = sys.M_obj
        desc = ("csr", ((Mo.indptr, Mo.indices, Mo.data),), Mo._mode)
        mdtype = Mo.dtype
    else:
        return None
    if M is not None and desc is None:
        return None
    # CG's p . Ap comes from the fused product where the System's matvec_dot is fused
    fused_dot = op == "cg_loop" and precision.dot == "native" and A.bind_dot(wdt) is not None
    plan = launch_plan(device, op, problem.n,
                       (A.parts, A.indptr, A.indices, A.data, A._mode, fused_dot),
                       desc, mdtype, setting == "1")
    if plan is None:
        return None
    kern = lookup(device, op, (wdt,), precision.dot)
    make = {"cg_loop": _cg_runner, "gmres_arnoldi": _arnoldi_runner,
            "bicgstab_loop": _bicgstab_runner}[op]
    return make(kern, plan, sys.workspace, problem.n, wdt, desc is None)


def _fusable_is_apply(M) -> bool:
    """``M``'s ``fusable`` describes its ``apply``: no class between ``M``'s own and the one
    that defines ``fusable`` overrides ``apply`` (a subclass that changes ``apply`` keeps
    its Python call)."""
    for cls in type(M).__mro__:
        if "fusable" in vars(cls):
            return True
        if "apply" in vars(cls):
            return False
    return False


def _in_chunks(call, maxiter, hist, buf, state, resume, hook=None, period=None):
    """Run a loop kernel ``call(iterations) -> (count, flag)`` until it stops or ``maxiter``
    iterations are done: each call runs at most ``buf.size`` (its history buffer, appended
    to ``hist``) and, when it used them all up, the next goes on from ``state``
    (``state[resume] = 1``).  With a ``hook`` (a callback with a ``period``), calls end at
    every multiple of ``period`` iterations, where ``hook()`` is called; when it returns
    True the run stops there with ``USER_STOP`` (the Python bodies' rule: a periodic
    callback is called after iteration ``k`` when ``k % period == 0``)."""
    state[resume] = 0.0
    count = 0
    while True:
        want = maxiter - count
        if hook is not None:
            want = min(want, period - count % period)
        c, flag = call(want)
        if c:
            hist.extend(buf[:c].tolist())
        count += c
        if flag != 1 or count >= maxiter:
            return count, flag
        if hook is not None and count % period == 0 and wants_stop(hook()):
            return count, USER_STOP
        state[resume] = 1.0                    # go on from where the call stopped


# The runners look their workspace vectors up once, at their first call (a Workspace
# hands out the same array for the same key every time): none per solve after that.

def _cg_runner(kern, plan, ws, n, wdt, no_m):
    Ak, amode, prog, P, pmode = plan
    vecs = []

    def run(x, r, maxiter, tol, hist, callback=None, period=None):
        if not vecs:
            vecs.extend((ws.get("q", n, wdt), ws.get("p", n, wdt),
                         None if no_m else ws.get("z", n, wdt), ws.get("loop_t", n, wdt),
                         ws.get("loop_hist", LOOP_CHUNK, _F64), ws.get("loop_state", 3, _F64)))
        q, p, z, t, buf, state = vecs
        if no_m:
            z = r
        hook = None if callback is None else (lambda: callback(x))
        return _in_chunks(lambda m: kern(Ak, amode, prog, P, pmode, x, r, q, z, p, t, m, tol,
                                         buf, state), maxiter, hist, buf, state, 1, hook,
                          period)

    return run


def _arnoldi_runner(kern, plan, ws, n, wdt, no_m):
    Ak, amode, prog, P, pmode = plan
    t = ws.get("loop_t", n, wdt)
    bufs = {}                                  # the history buffer, by restart length

    def run(side, V, Z, u, H, cs, sn, g, hcol, target, floor, max_steps, ratio, eps, reorth,
            hist):
        """One cycle's inner steps (``gmres_arnoldi``); ``side`` 0 none, 1 left, 2 right.
        Returns ``(steps, happy, est, wnorm_in, flag)``, the estimates appended to
        ``hist``."""
        buf = bufs.get(H.shape[1])
        if buf is None:
            buf = bufs[H.shape[1]] = ws.get("loop_hist", max(LOOP_CHUNK, H.shape[1]), _F64)
        steps, happy, est, wnorm_in, flag = kern(
            Ak, amode, prog, P, pmode, side, V, V if Z is None else Z, u, t, H, cs, sn, g,
            hcol, target, floor, max_steps, ratio, eps, reorth, buf)
        if steps:
            hist.extend(buf[:steps].tolist())
        return steps, happy, est, wnorm_in, flag

    return run


def _bicgstab_runner(kern, plan, ws, n, wdt, no_m):
    Ak, amode, prog, P, pmode = plan
    vecs = []

    def run(x, r, maxiter, tol, hist, callback=None, period=None):
        if not vecs:
            p, s = ws.get("p", n, wdt), ws.get("s", n, wdt)
            vecs.extend((ws.get("r0", n, wdt), p, ws.get("v", n, wdt), s, ws.get("t", n, wdt),
                         *((p, s) if no_m else (ws.get("ph", n, wdt), ws.get("sh", n, wdt))),
                         ws.get("loop_t", n, wdt), ws.get("loop_hist", LOOP_CHUNK, _F64),
                         ws.get("loop_bstate", 6, _F64)))
        r0, p, v, s, t, ph, sh, w, buf, state = vecs
        p.fill(0)
        v.fill(0)
        hook = None if callback is None else (lambda: callback(x))
        return _in_chunks(lambda m: kern(Ak, amode, prog, P, pmode, x, r, r0, p, v, s, t, ph,
                                         sh, w, m, tol, buf, state), maxiter, hist, buf,
                          state, 3, hook, period)

    return run
