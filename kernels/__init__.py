"""mpsolve.kernels: raw-array kernels and the registry that picks them.

Kernels take NumPy (or, on the GPU, CuPy) arrays and Python scalars only.  Look
them up with :func:`lookup` once per solve; :mod:`.reference` holds the plain
NumPy / exact-arithmetic oracles the tests compare them against.
"""
from .registry import available, lookup, register  # noqa: F401
