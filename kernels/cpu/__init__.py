"""Numba CPU kernels; importing this package registers them."""
from . import blas1, bsr, hessenberg, spmv  # noqa: F401
from . import gather, ilu  # noqa: F401  (preconditioner set-up and apply kernels)
from . import bilu  # noqa: F401  (block ILU(0): set-up, sweeps, ISAI of its factors)
from . import eft  # noqa: F401  (the compensated reductions)
from . import dd  # noqa: F401  (double-double x and the compensated residual)
from . import localsolve, pattern  # noqa: F401  ((Block-)ISAI set-up: patterns, local solves)
from . import scaling  # noqa: F401  (row and column maxima, Ruiz's equilibration)
from . import loops  # noqa: F401  (whole Krylov iterations in one call, small systems)
from . import spmm  # noqa: F401  (several right-hand sides: SpMM, block sweeps, column ops)
