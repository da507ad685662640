"""mpsolve.kernels: raw-array kernels and the registry that picks them.

Kernels take NumPy (or, on the GPU, CuPy) arrays and Python scalars only.  Look
them up with :func:`lookup` once per solve; :mod:`.reference` holds the plain
NumPy / exact-arithmetic oracles the tests compare them against.
"""
import os

#: Numba's OpenMP threading layer (GNU libgomp) reads its wait policy when it first starts
#: its threads.  Spinning without end (libgomp's default, or ``OMP_WAIT_POLICY=ACTIVE``)
#: made a parallel region that found the other core busy wait a scheduler quantum (a CSR
#: SpMV on bcsstk16: 18 ms for 0.2 ms on a loaded 2-core machine), so workers sleep between
#: regions (passive): a region then costs 60-80 us on this project's 2-vCPU machines and
#: the calibrated threshold (:mod:`.cpu._calibrate`) is 262144, so mid-sized solves run
#: on one core.  A short spin (``GOMP_SPINCOUNT=3000``: regions cost about 2 us while they
#: come close together, threshold 16384) was measured as the default and not kept: idle,
#: CG + Jacobi ran 1.6x faster on ``poisson3d:40``/``:60`` (the generated bench's best
#: against PETSc's best 1.09x -> 1.14x), but where a serial stretch (the ILU(0) sweeps)
#: outlasts the spin, each region pays the wake-up again -- the coverage bench's
#: ``convdiff3d:30`` (BiCGSTAB + ILU(0)) 2.1x slower, ``anisotropic2d:200`` 1.6x,
#: ``bcsstk15`` 1.3x, its geometric mean against PETSc 1.66 -> 1.76 -- and with a
#: CPU-bound process on the other core it was 1.2-1.5x slower.  A user with dedicated
#: cores and Jacobi-like solves may set ``GOMP_SPINCOUNT`` (the threshold is measured
#: again for it); a wait policy or spin count the user set is kept.
if "GOMP_SPINCOUNT" not in os.environ:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .registry import available, lookup, provides, register  # noqa: E402,F401
