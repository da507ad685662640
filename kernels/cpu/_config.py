"""Shared settings of the CPU kernels."""
import os
import types

from numba import njit

from ._calibrate import parallel_min

#: Vectors shorter than this run the serial kernel: opening a parallel region costs more
#: than a short vector takes to stream -- a few microseconds on a server whose idle
#: threads spin, 55-80 us on a 2-vCPU virtual machine whose threads sleep (mpsolve's
#: default there: :mod:`mpsolve.kernels`).  Measured once
#: per machine (:mod:`._calibrate`); ``MPSOLVE_PARALLEL_MIN`` sets it.
PARALLEL_MIN = parallel_min()

#: Options of every CPU kernel.  ``cache=True`` keeps compiled code on disk so a
#: second process does not pay the compile again; ``nogil`` lets a caller thread them.
JIT = dict(cache=True, nogil=True)

#: A sorted row this many times longer than the row (or local system) it updates is read
#: by binary search for the few columns needed, not scanned whole: a dense row (an arrow
#: matrix's) would otherwise cost O(n) for every row it couples to, O(n^2) in all -- 13 s
#: for IC(0) of a 200k arrow matrix, as PETSc's numeric ILU(0) loop too.  Used by the
#: ILU(0)/IC(0)/BILU(0) factorisations and the (Block-)ISAI gather; either way reads the
#: same entries in the same order, so the results are the same bits.
LONG_ROW = 8

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
