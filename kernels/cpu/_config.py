"""Shared settings of the CPU kernels."""
import os

#: Vectors shorter than this run the serial kernel: a parallel region costs a few
#: microseconds to open, more than a short vector takes to stream.
PARALLEL_MIN = int(os.environ.get("MPSOLVE_PARALLEL_MIN", "32768"))

#: Options of every CPU kernel.  ``cache=True`` keeps compiled code on disk so a
#: second process does not pay the compile again; ``nogil`` lets a caller thread them.
JIT = dict(cache=True, nogil=True)

#: Reassociation lets LLVM vectorise the *native* reductions (several partial sums).
#: Only the flags that keep NaN/Inf semantics; never used by the EFT kernels.
NATIVE_REDUCTION_MATH = {"reassoc", "contract"}
