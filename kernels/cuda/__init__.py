"""numba-cuda kernels: the ``"gpu"`` device.  Importing this package registers them.

The registry (:mod:`mpsolve.kernels.registry`) imports this package the first time a
``"gpu"`` kernel is asked for, so ``import mpsolve`` never imports numba-cuda on a CPU run.
Every op is registered under the same name and dtype keys as the CPU's
(:data:`mpsolve.kernels.primitives.CONTRACT`), complex keys included for the ops the GPU
runs (not the host set-up ops: a complex set-up runs on the host device), so the Krylov
methods run unchanged.

Modules
-------
``_intrin``   warp shuffles/votes, ``fma``, ``add_rn``/``sub_rn``/``mul_rn``: the ONLY place
              that may call numba-cuda's warp shuffle/vote/syncwarp intrinsics, its fused
              multiply-add or libdevice (exact emulations under the simulator; checked by
              ``tests/test_cuda.py::test_only_intrin_calls_warp_intrinsics_fma_libdevice``).
``_launch``   launch configuration from the device's properties (cached per device):
              ``grid(n)``/``grid_warps(items)``; ``stream(*arrays)`` (CuPy's current stream);
              ``dev(*arrays)`` (CuPy arrays without numba's per-launch stream sync; under the
              simulator NumPy arrays wrapped without a copy, so an array passed twice is one
              array); reusable ``scratch`` buffers; ``expose`` (below).
``eft``       the scalar EFTs of :mod:`mpsolve.kernels.eft`, compiled for CUDA.
``field``     scalar helpers (``fadd``, ``fmul``, ``cfma``, ``shfl``, ``wide``, ...) that let one
              kernel body serve real and complex arrays: the real expression for
              FP32/FP64, the same rounded operations part by part for complex64/128.
``blas1``     the BLAS-1 updates (grid-stride, coalesced).
``reduce``    ``dot``/``nrm2``/``sum``/``mdot`` native and compensated, ``axpy2_nrm2``:
              fixed chunks merged in a fixed order (bitwise reproducible).
``host``      GMRES's host-side ops (``givens``, ``back_substitute``) and ``range_scan``.
``isai_setup`` the (Block-)ISAI set-up ops (``gather_local``, ``local_lu_solve``,
              ``local_tri_solve``, ``block_tri_isai``) on device arrays.

Convention for every registered ``"gpu"`` kernel: ``func.cuda_kernels``
-----------------------------------------------------------------------
The compile test (``tests/cuda/compile_checks.py``, run by ``tests/test_cuda.py`` with the
simulator off) iterates over ``registry.available("gpu")`` and compiles, for cc 8.0 and
9.0, every ``cuda.jit`` dispatcher a registered function launches, for every signature it
can be launched with, then links the PTX to SASS (nvJitLink) and inspects both.  So each
registered Python function carries the attribute::

    func.cuda_kernels = [(dispatcher, [sig, ...]), ...]

``dispatcher`` is the ``numba.cuda.jit`` kernel object (not a device function), each
``sig`` an argument-type tuple such as ``(float64, float64[::1], float64[::1])`` (the types
numba infers for CuPy arrays: 1-D contiguous ``T[::1]``, 2-D ``T[:, ::1]``).  Use
:func:`mpsolve.kernels.cuda._launch.expose` to set it (it checks the shape).  A registered
function without the attribute fails the compile test, except host-only ops that say so with
``func.cuda_kernels = []``.  Optional flags the compile test reads from the same object:

* ``func.cuda_warp = {dispatcher, ...}`` kernels that must contain ``shfl.sync``;
* ``func.cuda_eft = {dispatcher, ...}`` kernels whose floating-point arithmetic must be
  ``add.rn``/``sub.rn``/``mul.rn``/``fma.rn`` only (error-free transformations).

(``expose(func, pairs, warp=..., eft=...)`` sets all three.)

Tests: ``tests/test_cuda.py`` runs each file of ``tests/cuda/`` in its own process, chosen by
its name: ``*sim*`` under the simulator, ``*compile*`` with it off, ``*gpu*`` on a device.
"""
from . import _intrin  # noqa: F401  (first: the intrinsics every kernel module uses)
from . import blas1, reduce, host  # noqa: F401  (BLAS-1 updates, reductions, host-side ops)

# --- SpMV kernels (kernels/cuda/spmv.py, bsr.py, fused.py): add their imports here ------
from . import spmv, bsr, fused  # noqa: F401  (CSR/BSR SpMV, residual, fused spmv_dot)
from . import dd  # noqa: F401  (double-double x and the compensated residual)
from . import localsolve, dmma  # noqa: F401  (warp local solves of the ISAI set-up; FP64 DMMA block GEMM)
from . import isai_setup  # noqa: F401  (the (Block-)ISAI set-up ops on the device: gather, solves, check)
