"""The ops of the contract that the ``"gpu"`` device does on the host, and ``range_scan``.

* ``givens``, ``back_substitute``: GMRES's small least-squares problem is a
  ``(restart + 1) x restart`` FP64 matrix on the host whatever the device of the Krylov
  vectors (Saad, Algorithm 6.9); the GPU device uses the CPU's compiled kernels
  (:mod:`mpsolve.kernels.cpu.hessenberg`) unchanged.  A kernel launch per Givens rotation
  would cost more than the rotation.
* ``range_scan(v, big, tiny)``: can demoting ``v`` overflow or flush a nonzero to zero?  A
  grid-stride kernel sets two integer flags (benign same-value stores, no atomics, no
  floating-point reduction) and one copy brings them to the host.

The host set-up ops of the contract (``host=True``) other than ``range_scan`` are not
registered here: set-up runs on ``mpsolve.backend.HOST_DEVICE``.
"""
from __future__ import annotations

import numpy as np
from numba import complex64, complex128, cuda, float32, float64, int32

from ..cpu import hessenberg as _cpu
from ..registry import register
from ._launch import dev, expose, grid, scratch, stream

__all__ = ["givens", "back_substitute", "range_scan"]


@register("gpu", "givens", [("float64",), ("complex128",)])
def givens(H, cs, sn, g, j):
    """GMRES's next Givens rotation on the host FP64 (complex128) Hessenberg matrix (the
    CPU kernel): rotate ``H[:, j]``, make rotation ``j``, update ``g``; return ``|g[j+1]|``."""
    return _cpu.givens(H, cs, sn, g, j)


@register("gpu", "back_substitute", [("float64",), ("complex128",)])
def back_substitute(H, g, k, y):
    """``y[:k] = R^-1 g[:k]``, ``R = H[:k, :k]`` upper triangular, on the host (the CPU kernel)."""
    _cpu.back_substitute(H, g, k, y)


givens.cuda_kernels = []             # host-only: nothing for the compile test
back_substitute.cuda_kernels = []


@cuda.jit
def _range_scan(v, big, tiny, flags):
    i = cuda.grid(1)
    while i < v.size:
        a = abs(v[i])                                # complex: the modulus (as the CPU)
        if a > big:                                  # NaN is neither big nor tiny
            flags[0] = 1
        elif a < tiny and a > 0.0:
            flags[1] = 1
        i += cuda.gridsize(1)


@register("gpu", "range_scan", [("float64",), ("float32",), ("complex128",), ("complex64",)])
def range_scan(v, big, tiny):
    """``(any |v_i| > big, any 0 < |v_i| < tiny)`` in one pass over the device vector."""
    strm = stream(v)
    v, = dev(v)
    flags = scratch("range_flags", 2, np.int32, strm)
    zero = np.zeros(2, dtype=np.int32)
    flags.copy_to_device(zero, stream=strm)
    blocks, threads = grid(v.size)
    _range_scan[blocks, threads, strm](v, float(big), float(tiny), flags)
    host = flags.copy_to_host(stream=strm) if strm else flags.copy_to_host()
    if strm:
        strm.synchronize()
    return bool(host[0]), bool(host[1])


expose(range_scan, [(_range_scan, [(t[::1], float64, float64, int32[::1])
                                   for t in (float32, float64, complex64, complex128)])])
