"""Scalar helpers that let one Numba kernel serve real and complex vectors.

Numba compiles a kernel once per argument type; these functions are resolved at that
compile time (``numba.extending.overload``) to the real or the complex expression, so a
kernel written with them is *the same machine code as before* for float32/float64
arrays and the conjugated form for complex64/complex128 ones:

* ``cmul(x, y)``  -- ``conj(x) y`` (the term of ``x^H y``; ``x y`` for reals);
* ``abs2(x)``     -- ``|x|^2`` as a real of ``x``'s precision (``x x`` for reals);
* ``conj(x)``     -- ``conj(x)`` (``x`` for reals);
* ``wide(x)``     -- ``x`` in FP64 / complex128 (FP64 accumulation of an SpMV row);
* ``narrow(x)``   -- ``x`` in FP32 / complex64 (FP32 accumulation);
* ``div(x, y)``   -- ``x / y``, a complex ``y == 0`` giving a non-finite value as a real
  one does under ``error_model="numpy"`` (Numba's complex division raises
  ``ZeroDivisionError`` whatever the error model).

Used inside ``@njit`` kernels only (called from Python they raise).  Each overload is
inlined into the caller's Numba IR (``inline="always"``), so the caller's ``fastmath``
flags apply to it as to the expression it replaces: the native reductions keep their
contraction of ``s += x*y`` into an FMA bit for bit (a separately compiled helper would not
be contracted, and BiCGSTAB's iteration counts moved with that).

Numba's on-disk cache of a kernel is keyed on the kernel's own file: after editing this
module, clear ``kernels/cpu/__pycache__`` (Numba does not track the dependency).
"""
from numba import types
from numba.extending import overload
import numpy as np

__all__ = ["cmul", "abs2", "conj", "wide", "narrow", "div"]


def _stub(name):
    def stub(*_a):  # pragma: no cover - the overloads replace it inside @njit
        raise TypeError(f"mpsolve.kernels.cpu.field.{name} is for @njit kernels only")
    stub.__name__ = name
    return stub


cmul, abs2, conj, wide, narrow, div = (_stub(n) for n in __all__)


@overload(cmul, inline="always")
def _cmul(x, y):
    if isinstance(x, types.Complex) or isinstance(y, types.Complex):
        return lambda x, y: x.conjugate() * y
    return lambda x, y: x * y


@overload(abs2, inline="always")
def _abs2(x):
    if isinstance(x, types.Complex):
        return lambda x: x.real * x.real + x.imag * x.imag
    return lambda x: x * x


@overload(conj, inline="always")
def _conj(x):
    if isinstance(x, types.Complex):
        return lambda x: x.conjugate()
    return lambda x: x


@overload(wide, inline="always")
def _wide(x):
    if isinstance(x, types.Complex):
        return lambda x: np.complex128(x)
    return lambda x: np.float64(x)


@overload(narrow, inline="always")
def _narrow(x):
    if isinstance(x, types.Complex):
        return lambda x: np.complex64(x)
    return lambda x: np.float32(x)


@overload(div, inline="always")
def _div(x, y):
    if isinstance(y, types.Complex):
        def f(x, y):
            if y == 0:
                return (x + 0j) * np.inf      # (inf or NaN parts: a caller's finite check)
            return x / y
        return f
    return lambda x, y: x / y
