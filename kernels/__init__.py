"""mpsolve.kernels: raw-array kernels and the registry that picks them.

Kernels take NumPy (or, on the GPU, CuPy) arrays and Python scalars only.  Look
them up with :func:`lookup` once per solve; :mod:`.reference` holds the plain
NumPy / exact-arithmetic oracles the tests compare them against.
"""
import os

#: Numba's OpenMP threading layer (GNU libgomp) reads its wait policy when it first starts
#: its threads: an idle worker spins ``GOMP_SPINCOUNT`` times (``pause`` loops) before it
#: sleeps.  libgomp's default (300,000 spins, "active" with ``OMP_WAIT_POLICY``) made a
#: parallel region that found the other core busy wait a scheduler quantum (a CSR SpMV on
#: bcsstk16: 18 ms for 0.2 ms on a loaded 2-core machine); passive waiting (no spin) costs
#: 60-80 us per region on this project's 2-vCPU machines, so every vector below 262k
#: entries ran serially and mid-sized solves used one core of two.  A short spin keeps the
#: workers awake through a Krylov iteration (its regions come microseconds apart) and
#: asleep soon after: a region then costs about 2 us and the threshold measured by
#: :mod:`.cpu._calibrate` is 16k entries.  Measured on 2 cores (CG + Jacobi on
#: ``poisson3d:40`` and ``:60``, CG + IC(0) on ``:40``, BiCGSTAB + ILU(0) on
#: ``convdiff2d:300,peclet=50``, ``auto`` on ``poisson3d:60``): idle, 1.6x, 1.6x, 1.0x,
#: 1.1x and 1.1x faster than passive waiting (the triangular sweeps stay serial); with a
#: CPU-bound process on the other core 1.2-1.5x slower (passive: serial, which that process
#: does not slow).  A wait policy or spin count the user set is kept (``OMP_WAIT_POLICY=
#: PASSIVE`` for the old behaviour).
SPIN_COUNT = 3000
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)

from .registry import available, lookup, provides, register  # noqa: E402,F401
