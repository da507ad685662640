"""mpsolve.kernels: raw-array kernels and the registry that picks them.

Kernels take NumPy (or, on the GPU, CuPy) arrays and Python scalars only.  Look
them up with :func:`lookup` once per solve; :mod:`.reference` holds the plain
NumPy / exact-arithmetic oracles the tests compare them against.
"""
import os

# Numba's OpenMP threading layer reads this when it first starts its threads.
# With the default (active, spinning) wait policy a parallel region that finds
# the other core busy waits a whole scheduler quantum: measured here, a CSR SpMV
# on bcsstk16 took 18 ms instead of 0.2 ms on a loaded 2-core machine.  Passive
# waiting costs a few microseconds per region on an idle machine.  A value the
# user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .registry import available, lookup, provides, register  # noqa: E402,F401
