"""Shared settings of the CPU kernels."""
import os
import types

from numba import njit

#: Vectors shorter than this run the serial kernel: a parallel region costs a few
#: microseconds to open, more than a short vector takes to stream.
PARALLEL_MIN = int(os.environ.get("MPSOLVE_PARALLEL_MIN", "32768"))

#: Options of every CPU kernel.  ``cache=True`` keeps compiled code on disk so a
#: second process does not pay the compile again; ``nogil`` lets a caller thread them.
JIT = dict(cache=True, nogil=True)

#: Reassociation lets LLVM vectorise the *native* reductions (several partial sums).
#: Only the flags that keep NaN/Inf semantics; never used by the EFT kernels.
NATIVE_REDUCTION_MATH = {"reassoc", "contract"}


def serial_twin(kernel):
    """The serial compilation of a ``parallel=True`` kernel (its ``prange`` loops run as
    ``range``), for inputs too small to pay for opening a parallel region: tens of
    microseconds on a busy machine, more than the analysis of a matrix of a few thousand
    rows takes.  A renamed copy of the kernel's Python function is compiled, so Numba's
    disk cache (keyed by the function's qualified name) keeps the two compilations apart."""
    f = kernel.py_func
    g = types.FunctionType(f.__code__, f.__globals__, f.__name__ + "_serial",
                           f.__defaults__, f.__closure__)
    g.__qualname__ = f.__qualname__ + "_serial"
    g.__doc__ = f.__doc__
    return njit(**JIT)(g)
