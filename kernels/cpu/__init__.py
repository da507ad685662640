"""Numba CPU kernels; importing this package registers them."""
from . import blas1, bsr, spmv  # noqa: F401
from .. import eft  # noqa: F401  (registers the compensated reductions)
