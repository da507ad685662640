"""BSR (block CSR) sparse matrix-vector products on the GPU (numba-cuda): a warp per
block row.

``y = A x`` (op ``bsrmv``, modes ``acc64``/``acc32``) with ``A`` stored as ``b x b`` dense
blocks: ``indptr``/``indices`` over block rows/columns and ``data`` of shape
``(nnzb, b, b)`` (C order), registered for device ``"gpu"`` under the CPU's dtype keys
``(data, x, y)`` (:mod:`mpsolve.kernels.cpu.bsr`).  Casts are fused; ``acc64`` carries the
row sums in FP64, ``acc32`` in FP32 (``fma`` per entry, one rounding to ``y``'s dtype).
Complex blocks (complex64/complex128 with complex vectors) run the same kernels typed for
complex arrays (:mod:`.field`: complex128/complex64 sums, ``fma`` per real product).
A trailing partial block is allowed as on the CPU: scalar rows ``>= len(y)`` are not
written and columns ``>= len(x)`` are skipped.

Layout: lanes over (block, inner row)
-------------------------------------
One warp owns a block row.  For ``b <= 32`` its lanes are split as ``lane = j * b + u``:
``G = 32 // b`` *block slots* ``j`` times the ``b`` inner rows ``u`` (``b = 4``: 8 blocks of
the row at a time, ``b = 8``: 4, ``b = 3``: 10 with 2 lanes idle).  Lane ``(j, u)`` takes
blocks ``indptr[ib] + j, + G, ...`` and adds row ``u`` of each block times the ``b``
entries of ``x`` under it (``fma`` in column order); the ``G`` slot partials of row ``u``
are then added by a fixed shuffle tree over ``j`` (``shfl_down`` by ``s * b``,
``s = P/2 .. 1``, ``P`` = ``G`` rounded up to a power of two), which leaves the ``b`` row
sums on lanes ``0 .. b-1``; they store ``y`` (``b`` consecutive entries: one segment).

Why this layout: the blocks of a block row are contiguous in ``data`` and the lanes of one
step read ``G`` consecutive blocks, i.e. one contiguous stretch of ``G b^2`` values
(``32 b`` for ``b`` dividing 32): each of the ``b`` load instructions of a step touches
that stretch with stride ``b`` and together they use every byte of the lines they bring
into L1, so DRAM sees the matrix exactly once.  ``x`` is read as ``b`` broadcast loads per
block (lanes of one slot read the same entries).  A lane per (block, row, column) would
coalesce each instruction fully but needs a shuffle reduction per block over ``b`` lanes;
a lane per row of the block row (``b`` lanes busy) would idle 28 of 32 lanes at ``b = 4``.
For ``b > 32`` (not used by the preconditioners) the warp takes the inner rows in slabs of
32, one block at a time.

Summation order depends only on ``b`` (never on the block size or grid): the same bits
for every launch configuration, in the simulator as on a GPU.

Launch plan
-----------
``launch_plan("gpu", "bsrmv", indptr)`` returns a :class:`BsrPlan` (``nbr`` block rows,
``block`` threads = ``block / 32`` warps, ``grid`` covering the block rows, capped at one
resident wave, grid-stride beyond).  ``b`` is read from ``data.shape`` at the call.

Memory traffic per product
--------------------------
``nnzb (b^2 sizeof(value) + 4) + 4 (nbr + 1)`` bytes of matrix (the index overhead per
value is ``4 / b^2`` bytes instead of CSR's 4), ``x`` gathered (``ncols sizeof(x)`` when it
stays in L2), ``n sizeof(y)`` written.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from ..registry import register, register_plan
from .field import ffma, narrow, nzero, shfl, wide, wzero
from ._launch import dev, expose, stream
from .spmv import _block_grid, kernel

__all__ = ["BsrPlan", "bsr_plan", "bsr_spmv_acc64", "bsr_spmv_acc32"]

class BsrPlan:
    """Launch plan of the BSR kernels: ``nbr`` block rows, ``block`` threads per block
    (a warp per block row), ``grid`` blocks."""

    __slots__ = ("nbr", "block", "grid")

    def __init__(self, nbr, block, grid):
        self.nbr, self.block, self.grid = int(nbr), int(block), int(grid)

    def __repr__(self):
        return f"BsrPlan(nbr={self.nbr}, block={self.block}, grid={self.grid})"

    def __eq__(self, other):
        return isinstance(other, BsrPlan) and (self.nbr, self.block, self.grid) == (
            other.nbr, other.block, other.grid)

    __hash__ = None


@register_plan("gpu", "bsrmv")
def bsr_plan(indptr, block=None, grid=None) -> BsrPlan:
    """The plan of the BSR kernels for block row pointers ``indptr``: ``block`` threads
    (default: the device's, :func:`mpsolve.kernels.cuda._launch.config`), ``grid``
    covering the block rows (a warp each; capped at one resident wave) unless given."""
    nbr = int(indptr.shape[0]) - 1
    blk, g = _block_grid(nbr, lambda blk: blk // 32, block, grid)
    return BsrPlan(nbr, blk, g)


def _make(CAST, ZERO, name):
    @kernel(name)
    def bsr_kernel(indptr, indices, data, x, y):
        b = data.shape[1]
        n = y.shape[0]
        nx = x.shape[0]
        nbr = indptr.shape[0] - 1
        tid = cuda.threadIdx.x
        lane = tid & 31
        bw = b if b < 32 else 32          # inner rows per slab (b unless b > 32)
        G = 32 // bw                      # block slots
        j = lane // bw                    # this lane's slot ...
        ui = lane - j * bw                # ... and inner row
        P = 1
        while P < G:
            P <<= 1
        ub = np.uint64(b)
        wpb = cuda.blockDim.x >> 5
        base = cuda.blockIdx.x * wpb
        while base < nbr:                 # block-uniform: shuffles stay convergent
            ib = base + (tid >> 5)
            u0 = 0
            while u0 < b:                 # one slab unless b > 32
                u = u0 + ui
                acc = ZERO(data)              # FP64/FP32 (complex: complex128/64)
                if ib < nbr and j < G and u < b:
                    uu = np.uint64(u)
                    k = np.uint64(indptr[np.uint64(ib)]) + np.uint64(j)
                    end = np.uint64(indptr[np.uint64(ib) + np.uint64(1)])
                    while k < end:        # blocks j, j + G, ... of the block row
                        c0 = np.uint64(indices[k]) * ub
                        vend = ub if c0 + ub <= nx else np.uint64(nx) - c0  # partial last
                        v = np.uint64(0)
                        while v < vend:
                            acc = ffma(CAST(data[k, uu, v]), CAST(x[c0 + v]), acc)
                            v += np.uint64(1)
                        k += np.uint64(G)
                s = P >> 1
                while s > 0:              # fixed tree over the slots j
                    t = shfl(acc, s * bw)
                    if j + s < G:
                        acc += t
                    s >>= 1
                r = ib * b + u
                if j == 0 and ib < nbr and u < b and r < n:
                    y[np.uint64(r)] = acc     # rounded once to y's dtype
                u0 += bw
            base += cuda.gridDim.x * wpb
    return bsr_kernel


_bsr_acc64 = _make(wide, wzero, "bsr_spmv_acc64")
_bsr_acc32 = _make(narrow, nzero, "bsr_spmv_acc32")

_F = ("float32", "float64")
_C = ("complex64", "complex128")
_ALL = [(v, xi, yo) for f in (_F, _C) for v in f for xi in f for yo in f]


def _launch(kern, plan, indptr, indices, data, x, y):
    if plan.nbr > 0 and y.shape[0] > 0:
        strm = stream(x, y)    # before dev(): CuPy arrays tell it CuPy's current stream
        kern[plan.grid, plan.block, strm](*dev(indptr, indices, data, x, y))


@register("gpu", "bsrmv", _ALL, mode="acc64")
def bsr_spmv_acc64(plan, indptr, indices, data, x, y):
    """``y <- A x`` for BSR ``A`` (``data`` of shape ``(nnzb, b, b)``), row sums in FP64.
    Dtypes key: ``(data, x, y)``."""
    _launch(_bsr_acc64, plan, indptr, indices, data, x, y)


@register("gpu", "bsrmv", _ALL, mode="acc32")
def bsr_spmv_acc32(plan, indptr, indices, data, x, y):
    """``y <- A x`` for BSR ``A``, row sums in FP32.  Dtypes key: ``(data, x, y)``."""
    _launch(_bsr_acc32, plan, indptr, indices, data, x, y)


def _expose():
    from numba import types as t
    fl = {d: getattr(t, d)[::1] for d in _F + _C}
    blk = {d: getattr(t, d)[:, :, ::1] for d in _F + _C}
    i32 = t.int32[::1]
    sigs = [(i32, i32, blk[v], fl[a], fl[c]) for v, a, c in _ALL]
    expose(bsr_spmv_acc64, [(_bsr_acc64, sigs)], warp=[_bsr_acc64])
    expose(bsr_spmv_acc32, [(_bsr_acc32, sigs)], warp=[_bsr_acc32])


_expose()
