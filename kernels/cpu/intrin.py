"""The CPU target's arithmetic primitives: ``fma`` and correctly rounded ``+ - *``.

These are the only operations in which the devices differ for the error-free
transformations of :mod:`mpsolve.kernels.eft` (written once, in plain Python):
:func:`mpsolve.kernels.eft.specialise` binds the names ``fma``, ``add_rn``,
``sub_rn`` and ``mul_rn`` of this module into the EFTs and compiles them with
Numba (see :mod:`mpsolve.kernels.cpu.eft`).  The CUDA target binds the same
names from its own intrinsics module (``numba.cuda.fma`` and libdevice's
``__dadd_rn`` etc., which the compiler never contracts).

* ``fma``: LLVM's ``llvm.fma`` intrinsic.  Numba's CPU target has no
  ``math.fma`` on Python 3.11; the intrinsic is declared with its full function
  type, else LLVM rejects the call.
* ``add_rn``, ``sub_rn``, ``mul_rn``: the plain operators.  On the CPU, Numba
  and LLVM never contract ``a*b + c`` into an FMA, nor reassociate, unless the
  ``contract``/``reassoc`` fast-math flags are set, so the plain operators *are*
  correctly rounded.  Every function here is compiled with ``fastmath=False``,
  and inlined (``inline="always"``) into its callers: no cost over writing the
  operator.

For kernels written once for real and complex data (with :mod:`.field`'s ``wide``,
``conj``, ...): ``wide_zero(a)`` (the zero of ``a``'s widened dtype) and ``madd(a, b, c)``
(``a*b + c``: the fused ``fma`` for real operands, the plain complex operations otherwise
-- there is no complex FMA).
"""
from __future__ import annotations

from llvmlite import ir
import numpy as np
from numba import njit, types
from numba.extending import intrinsic, overload

from ._config import JIT

__all__ = ["fma", "add_rn", "sub_rn", "mul_rn", "wide_zero", "madd"]

# Explicit: a primitive of the EFTs must never get fastmath, whatever JIT grows into.
_PRIM_JIT = dict(JIT, fastmath=False, inline="always")


@intrinsic
def _llvm_fma(typingctx, a, b, c):
    """``fl(a*b + c)`` with one rounding: LLVM's ``llvm.fma.f32/f64`` intrinsic.

    The three arguments are converted to ``float64`` unless all are ``float32``.
    """
    args = (a, b, c)
    if not all(isinstance(t, (types.Float, types.Integer)) for t in args):
        return None
    if all(isinstance(t, types.Float) and t.bitwidth == 32 for t in args):
        ft = types.float32
    else:
        ft = types.float64
    sig = ft(a, b, c)

    def codegen(context, builder, signature, llargs):
        lty = context.get_value_type(ft)
        vals = [context.cast(builder, v, t, ft)
                for v, t in zip(llargs, signature.args)]
        # the full function type is required, else LLVM rejects the call
        fn = builder.module.declare_intrinsic("llvm.fma", [lty],
                                              ir.FunctionType(lty, [lty, lty, lty]))
        return builder.call(fn, vals)

    return sig, codegen


@njit(**_PRIM_JIT)
def fma(a, b, c):
    """Fused multiply-add ``fl(a*b + c)``, rounded once.

    Parameters
    ----------
    a, b, c : float
        FP64, or all FP32 (then the result is FP32).

    Returns
    -------
    float
        ``a*b + c`` with a single rounding (hardware FMA where the CPU has it;
        LLVM lowers it to a correct library call otherwise).

    Examples
    --------
    >>> from mpsolve.kernels.cpu.intrin import fma
    >>> fma(1 + 2.0**-30, 1 - 2.0**-30, -1.0) == -2.0**-60   # a*b then +c gives 0
    True
    """
    return _llvm_fma(a, b, c)


@njit(**_PRIM_JIT)
def add_rn(a, b):
    """``fl(a + b)``, round to nearest even (never contracted on the CPU).

    Examples
    --------
    >>> from mpsolve.kernels.cpu.intrin import add_rn
    >>> add_rn(1.0, 2.0**-53)            # the tie rounds to even
    1.0
    """
    return a + b


@njit(**_PRIM_JIT)
def sub_rn(a, b):
    """``fl(a - b)``, round to nearest even (never contracted on the CPU)."""
    return a - b


@njit(**_PRIM_JIT)
def mul_rn(a, b):
    """``fl(a * b)``, round to nearest even (never contracted into an FMA on the CPU).

    Examples
    --------
    >>> from mpsolve.kernels.cpu.intrin import fma, mul_rn
    >>> a, b = 1 + 2.0**-30, 1 - 2.0**-30
    >>> mul_rn(a, b) - 1.0, fma(a, b, -1.0)   # the product's rounding error is lost
    (0.0, -8.673617379884035e-19)
    """
    return a * b


# --- real and complex data in one kernel ------------------------------------------------
def wide_zero(a):
    """The zero of the widened dtype of array ``a``'s elements (inside Numba kernels)."""
    return np.complex128(0) if np.iscomplexobj(a) else np.float64(0)


def madd(a, b, c):
    """``a*b + c``: :func:`fma` for real operands, plain complex arithmetic otherwise."""
    return a * b + c


@overload(wide_zero, inline="always")
def _wide_zero(a):
    if isinstance(a.dtype, types.Complex):
        return lambda a: np.complex128(0)
    return lambda a: np.float64(0)


@overload(madd, inline="always")
def _madd(a, b, c):
    if any(isinstance(t, types.Complex) for t in (a, b, c)):
        return lambda a, b, c: a * b + c
    return lambda a, b, c: _llvm_fma(a, b, c)
