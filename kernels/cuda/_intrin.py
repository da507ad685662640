"""The CUDA target's intrinsics: warp shuffles and votes, ``fma`` and correctly rounded ``+ - *``.

Every CUDA kernel of :mod:`mpsolve.kernels.cuda` reaches warp-level communication and the
arithmetic that error-free transformations depend on through this module and nothing else
(``tests/cuda/test_source.py`` fails if another module calls ``cuda.shfl*``,
``cuda.ballot*``, ``cuda.syncwarp``, ``cuda.fma`` or ``libdevice`` directly).  It is also
the ``intrin`` namespace given to :func:`mpsolve.kernels.eft.specialise` for the CUDA
build of the scalar EFTs (:mod:`mpsolve.kernels.cuda.eft`).

API
---
``SIM``
    ``True`` when numba-cuda's simulator is active (``NUMBA_ENABLE_CUDASIM=1`` set
    before numba was first imported).
``shfl_down(value, delta)``, ``shfl_xor(value, lanemask)``, ``shfl_idx(value, src_lane)``
    Full-warp (mask ``0xffffffff``, width 32) shuffles of an int or float (32 or 64 bit).
    ``shfl_down`` returns the caller's own ``value`` where ``lane + delta >= 32``;
    ``shfl_idx`` reads lane ``src_lane % 32``.
``ballot(pred) -> int``
    Bit ``l`` set where lane ``l`` of the warp passed a true ``pred``.
``syncwarp()``
    Full-warp barrier (memory ordering among the lanes).
``lane_id()``, ``warp_id_in_block()``
    The lane (0..31) and the warp (within its block) of the calling thread, from its
    linear index in the block.
``fma(a, b, c)``
    ``fl(a*b + c)`` rounded once (``fma.rn``).  FP32 when all three are FP32.
``add_rn(a, b)``, ``sub_rn(a, b)``, ``mul_rn(a, b)``
    ``fl(a + b)``, ``fl(a - b)``, ``fl(a * b)``, round to nearest even, never contracted
    into an FMA nor reassociated.  Both arguments FP64, or both FP32 (the FP32 form is
    chosen only when both are FP32; mixed arguments are computed in FP64).

On hardware
-----------
Shuffles and votes are ``cuda.shfl_*_sync(0xffffffff, ...)``, ``cuda.ballot_sync`` and
``cuda.syncwarp``: every lane of the warp must call them convergently (all our kernels
keep whole warps in the loop, idle lanes contributing zeros).  ``fma`` is ``cuda.fma``
(PTX ``fma.rn.f32/f64``).  ``add_rn``/``mul_rn`` are libdevice's ``__nv_dadd_rn``,
``__nv_dmul_rn``, ``__nv_fadd_rn``, ``__nv_fmul_rn`` (PTX ``add.rn``, ``mul.rn``: an
explicit rounding modifier forbids ptxas to fuse the operation into an FMA, which it may do
with a plain ``mul.f64``/``add.f64``); ``sub_rn`` is ``__nv_fsub_rn`` for FP32 and
``__nv_dadd_rn(a, -b)`` for FP64 (libdevice has no ``dsub_rn``; negation is exact).  The
FP32/FP64 choice is ``isinstance(a, np.float32)``, which Numba resolves at compile time
(the other branch is pruned: one instruction, no branch in the PTX).  The device functions
are compiled with ``forceinline=True`` (LLVM ``alwaysinline``): no call remains.

Under the simulator
-------------------
The simulator has no shuffles, votes or ``syncwarp``; its ``cuda.fma`` is ``a*b + c``
(two roundings) and libdevice's ``*_rn`` return ``None``.  Here they are exact emulations
in plain Python:

* **Warp exchange.**  The simulator runs one block at a time, each thread a Python thread,
  with a real block barrier (``BlockThread.syncthreads``).  A shuffle writes the caller's
  value into a per-block scratch table (a dict on the simulator's ``BlockManager``, keyed
  by the thread's linear index), waits at the block barrier, and reads the source lane's
  entry.  Two tables alternate (each thread counts its exchanges), so one barrier per
  shuffle suffices: a table is written again only two exchanges later, after a barrier
  that every reader of its previous contents has passed.  ``ballot`` is the same exchange
  of the predicate, OR-ed over the warp's lanes; ``syncwarp`` is the block barrier.
  **Contract:** every thread of the block calls the warp intrinsics, the same number of
  times, in the same order (block-convergent).  All kernels of this package respect it:
  a thread never leaves the reduction loops early.  A lane that does not exist (a partial
  last warp) reads back its own value.
* **Shared arrays.**  The simulator creates a block's ``cuda.shared.array`` on the first
  thread's call with an unlocked check-then-store; with a short GIL switch interval two
  threads can each create one, and the kernel then reads uninitialised memory (seen as a
  rare overflow in the block Gauss-Jordan).  Importing this module under the simulator
  replaces that method with the same one under a lock.
* ``fma`` is :func:`mpsolve.kernels.eft.fma`: the exact product and sum as a
  :class:`fractions.Fraction`, rounded once (to FP32, correctly, when all three
  arguments are ``np.float32``).
* ``add_rn``, ``sub_rn``, ``mul_rn`` are the Python/NumPy operators (IEEE, never
  contracted).  The simulator's values of FP32 arrays are ``np.float32`` scalars, so FP32
  arithmetic stays FP32.

Both targets give bit-identical results for every function here (tests/cuda/).
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["SIM", "WARP", "FULL_MASK", "shfl_down", "shfl_xor", "shfl_idx", "ballot",
           "syncwarp", "lane_id", "warp_id_in_block", "fma", "add_rn", "sub_rn", "mul_rn"]

#: The simulator is active (the environment variable was read when numba was imported).
SIM = bool(numba.config.ENABLE_CUDASIM)
#: Threads per warp (NVIDIA: 32 on every architecture numba-cuda supports).
WARP = 32
#: The full-warp mask of the ``*_sync`` intrinsics.
FULL_MASK = 0xFFFFFFFF


if SIM:
    import sys
    import threading

    from numba.cuda.simulator import kernelapi as _kapi

    from .. import eft as _pyeft

    _SHARED_LOCK = threading.Lock()
    _sim_shared_array = _kapi.FakeCUDAShared.array

    def _shared_array(self, shape, dtype, alignment=None):
        """``cuda.shared.array`` under the simulator, made atomic: the simulator keys a
        block's shared array by the calling line and creates it on the first call, but
        checks and creates without a lock, so two of the block's threads switched between
        the check and the store get two different arrays (each then reads the other's
        uninitialised memory).  Here the check and the store are one step under a lock."""
        if alignment is not None or shape == 0:             # errors / dynamic shared memory
            return _sim_shared_array(self, shape, dtype, alignment)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)  # the simulator's own key
        with _SHARED_LOCK:
            res = self._allocations.get(key)
            if res is None:
                dt = (_kapi.numpy_support.as_dtype(dtype) if isinstance(dtype, _kapi.types.Type)
                      else dtype)
                res = self._allocations[key] = np.empty(shape, dt)
        return res

    _kapi.FakeCUDAShared.array = _shared_array

    def _exchange(value):
        """Publish ``value`` for this thread, wait at the block barrier; return the
        table (linear thread index -> value) of this exchange and the caller's index."""
        t = threading.current_thread()
        mgr = t._manager
        tables = mgr.__dict__.get("_mpsolve_xchg")
        if tables is None:                       # setdefault: atomic under the GIL
            tables = mgr.__dict__.setdefault("_mpsolve_xchg", ({}, {}))
        phase = t.__dict__.get("_mpsolve_phase", 0)
        t._mpsolve_phase = phase ^ 1
        table = tables[phase]
        tid = t.thread_id
        table[tid] = value
        t.syncthreads()                          # every thread of the block has written
        return table, tid

    def shfl_down(value, delta):
        table, tid = _exchange(value)
        lane = tid % WARP
        if lane + delta >= WARP:
            return value
        return table.get(tid + delta, value)

    def shfl_xor(value, lanemask):
        table, tid = _exchange(value)
        src = (tid - tid % WARP) + ((tid % WARP) ^ (lanemask % WARP))
        return table.get(src, value)

    def shfl_idx(value, src_lane):
        table, tid = _exchange(value)
        src = (tid - tid % WARP) + src_lane % WARP
        return table.get(src, value)

    def ballot(pred):
        table, tid = _exchange(bool(pred))
        base = tid - tid % WARP
        mask = 0
        for lane in range(WARP):
            if table.get(base + lane, False):
                mask |= 1 << lane
        return mask

    def syncwarp():
        threading.current_thread().syncthreads()

    def lane_id():
        return threading.current_thread().thread_id % WARP

    def warp_id_in_block():
        return threading.current_thread().thread_id // WARP

    fma = _pyeft.fma

    def add_rn(a, b):
        return a + b

    def sub_rn(a, b):
        return a - b

    def mul_rn(a, b):
        return a * b

else:
    from numba import cuda
    from numba.cuda import libdevice

    _DEV = dict(device=True, forceinline=True)

    @cuda.jit(**_DEV)
    def shfl_down(value, delta):
        return cuda.shfl_down_sync(FULL_MASK, value, delta)

    @cuda.jit(**_DEV)
    def shfl_xor(value, lanemask):
        return cuda.shfl_xor_sync(FULL_MASK, value, lanemask)

    @cuda.jit(**_DEV)
    def shfl_idx(value, src_lane):
        return cuda.shfl_sync(FULL_MASK, value, src_lane)

    @cuda.jit(**_DEV)
    def ballot(pred):
        return cuda.ballot_sync(FULL_MASK, pred)

    @cuda.jit(**_DEV)
    def syncwarp():
        cuda.syncwarp(FULL_MASK)

    @cuda.jit(**_DEV)
    def lane_id():
        return cuda.laneid

    @cuda.jit(**_DEV)
    def warp_id_in_block():
        t = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y
                                                  + cuda.blockDim.y * cuda.threadIdx.z)
        return t // WARP

    @cuda.jit(**_DEV)
    def fma(a, b, c):
        return cuda.fma(a, b, c)

    @cuda.jit(**_DEV)
    def add_rn(a, b):
        if isinstance(a, np.float32):
            if isinstance(b, np.float32):
                return libdevice.fadd_rn(a, b)
        return libdevice.dadd_rn(a, b)

    @cuda.jit(**_DEV)
    def sub_rn(a, b):
        if isinstance(a, np.float32):
            if isinstance(b, np.float32):
                return libdevice.fsub_rn(a, b)
        return libdevice.dadd_rn(a, -b)          # no dsub_rn in libdevice; -b is exact

    @cuda.jit(**_DEV)
    def mul_rn(a, b):
        if isinstance(a, np.float32):
            if isinstance(b, np.float32):
                return libdevice.fmul_rn(a, b)
        return libdevice.dmul_rn(a, b)
