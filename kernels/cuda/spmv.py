"""CSR sparse matrix-vector products on the GPU (numba-cuda): a sub-warp per row.

``y = A x`` (op ``spmv``, modes ``acc64``/``acc32``) and ``r = b - A x`` (op
``residual``, FP64 row sums) with ``A`` in CSR form (``indptr``, ``indices``,
``data``), registered for device ``"gpu"`` under the same dtype keys ``(data, x, y)``
as the CPU kernels (:mod:`mpsolve.kernels.cpu.spmv`).  Values, input and output may each
be FP32 or FP64; the casts are fused into the loads and the final store (no temporary
copy of ``x`` or ``y``).  The accumulator is a separate choice:

* ``acc64`` -- each lane carries its part of the row sum in FP64 (``fma`` of the FP64
  values; products of FP32 data and FP32 input are exact in FP64), the parts are added
  in FP64 and the row sum is rounded once to ``y``'s dtype;
* ``acc32`` -- the same in FP32 (what a pure FP32 library does); the ``fma`` rounds once
  per entry where a separate product would round twice.

Complex values (complex64/complex128, with complex vectors; the CPU's keys): the same
kernels typed for complex arrays (:mod:`.field`): ``acc64`` accumulates in complex128,
``acc32`` in complex64, one ``fma`` per real product, each shuffle two real shuffles.

Layout: a sub-warp per row
--------------------------
A *sub-warp* of ``W`` consecutive lanes (``W`` in 2, 4, 8, 16, 32) owns one row: lane
``s`` of it multiplies entries ``indptr[i] + s, + W, + 2W, ...`` (one ``fma`` per entry,
in stored order within the lane), and the ``W`` lane sums are added by a shuffle tree
(``shfl_down`` by ``W/2, W/4, ..., 1``; lane 0 of the sub-warp holds the row sum).  The
``W`` lanes of a sub-warp load ``W`` consecutive ``indices``/``data`` entries per step, and
the sub-warps of a warp own consecutive rows, whose entries are adjacent in CSR: a warp's
load instruction reads one contiguous stretch of the two arrays (coalesced), instead of 32
scattered rows as with a thread per row.

**Width rule** (:func:`csr_plan`): ``W`` = the smallest power of two >= the mean row
length ``nnz / n``, clamped to ``[2, 32]``.  With ``W >= mean`` a typical row is consumed
in one coalesced step and the shuffle tree is ``log2 W`` steps; a larger ``W`` would idle
more lanes of every load (a 5-entry row in 32 lanes uses 16% of them) and add shuffle
steps; a smaller one serialises the row over several dependent steps.  A 2-D 5-point
Laplacian gets ``W = 8``, a 3-D 7-point one ``8``, a 27-point one ``32``.  Rows far longer
than the mean are still handled by one sub-warp (``W`` lanes looping): a matrix with a
few very long rows is imbalanced (a merge-path split is not implemented).

Summation order and reproducibility
------------------------------------
The order of a row sum depends only on ``W`` (lane partials in stored order, then the
fixed shuffle tree), never on the block size or the grid: for one plan width the result
bits are the same for every launch configuration, and the simulator (exact ``fma`` and
shuffle emulations, :mod:`._intrin`) gives the bits a GPU gives.  Different widths
reassociate rows longer than the smaller width (rows up to ``min(W1, W2)`` entries give
the same bits: the wider tree only adds exact zeros).

Launch plan
-----------
``launch_plan("gpu", "spmv", indptr)`` returns a :class:`CsrPlan` (host scalars: ``n``,
``nnz``, ``width``, ``block``, ``grid``) computed once per matrix from ``n`` and
``indptr[-1]`` (one scalar read from the device); the operators pass it back as the
registered functions' first argument, which launch ``grid x block`` threads with
``log2(W)`` as the CUDA kernel's first argument (shifts, not divisions, place the
threads).  ``block`` (default :func:`._launch.config`'s: 256 on a GPU, 32 under the
simulator) threads hold ``block / W`` rows per pass; the grid covers the rows once, capped
at one resident wave of the device (SM count x blocks per SM), the kernel looping over row
groups beyond that (grid-stride, block-uniform: every thread of a block runs the same
iterations, so the shuffles stay convergent).  :func:`csr_plan` takes ``width=``,
``block=``, ``grid=`` overrides (the tests prove the result independent of block and
grid).

Memory traffic per product
--------------------------
For ``n`` rows, ``nnz`` nonzeros, 32-bit indices: ``nnz * (4 + sizeof(value))`` bytes of
matrix (each read once, coalesced), ``4 (n + 1)`` of ``indptr`` (two broadcast loads per
row, the second one an L1 hit of the next row's), ``n * sizeof(y)`` written and ``x``
gathered: ``ncols * sizeof(x)`` when ``x`` stays in L2 (50 MB on an H100: ~6M FP64
entries), at worst ``nnz`` sectors.  FP32 values move ~2/3 of FP64's matrix bytes (the
~1.5x bandwidth bound of the benchmark).  ``residual`` reads ``b`` in addition
(``n * sizeof(b)``).
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from ..registry import register, register_plan
from ._intrin import SIM
from .field import ffma, narrow, nzero, shfl, wide, wzero
from ._launch import cdiv, config, dev, expose, read_scalar, stream  # noqa: F401 (fused)

__all__ = ["CsrPlan", "csr_plan", "subwarp_width", "csr_spmv_acc64", "csr_spmv_acc32",
           "csr_residual", "row_sum64", "row_sum32", "WIDTHS"]

#: Device-function options: always inlined on hardware (the simulator takes no options).
_DEV = dict(device=True) if SIM else dict(device=True, forceinline=True)

#: Sub-warp widths the kernel supports (powers of two dividing the warp).
WIDTHS = (2, 4, 8, 16, 32)
#: The widest block a plan may ask for: the complex128 BSR kernel takes 66 registers a
#: thread on sm_80 (72 as allocated), and 1024 such threads need more than an SM's
#: 65536 registers -- the launch would fail on the GPU (the simulator runs it).
MAX_BLOCK = 512


def _block_grid(units, per_block_of, block, grid):
    """``(block, grid)``: ``block`` threads (default: :func:`._launch.config`'s), and
    ``grid`` blocks covering ``units`` work items of ``per_block_of(block)`` per block,
    capped at the device's one full wave (the kernels loop over the rest)."""
    cfg = config()
    blk = cfg.threads if block is None else int(block)
    if blk % 32 or not 32 <= blk <= MAX_BLOCK:
        raise ValueError(f"block={blk}: a multiple of 32 in [32, {MAX_BLOCK}]")
    if grid is None:
        g = max(1, min(cdiv(max(units, 1), per_block_of(blk)), cfg.max_blocks))
    else:
        g = max(1, int(grid))
    return blk, g


# --- the plan ---------------------------------------------------------------------------
class CsrPlan:
    """Launch plan of the CSR kernels: ``width`` lanes per row, ``block`` threads per
    block, ``grid`` blocks, for ``n`` rows and ``nnz`` nonzeros (host scalars)."""

    __slots__ = ("n", "nnz", "width", "block", "grid")

    def __init__(self, n, nnz, width, block, grid):
        self.n, self.nnz, self.width, self.block, self.grid = (int(n), int(nnz), int(width),
                                                               int(block), int(grid))

    def __repr__(self):
        return (f"CsrPlan(n={self.n}, nnz={self.nnz}, width={self.width}, "
                f"block={self.block}, grid={self.grid})")

    def __eq__(self, other):
        return isinstance(other, CsrPlan) and (self.n, self.nnz, self.width, self.block,
                                               self.grid) == (other.n, other.nnz, other.width,
                                                              other.block, other.grid)

    __hash__ = None


def subwarp_width(n: int, nnz: int) -> int:
    """The sub-warp width for a mean row length ``nnz / n``: the smallest power of two
    at least the mean, clamped to ``[2, 32]``.

    >>> [subwarp_width(100, m * 100) for m in (0, 1, 3, 5, 7, 9, 27, 200)]
    [2, 2, 4, 8, 8, 16, 32, 32]
    """
    mean = nnz / n if n > 0 else 0.0
    w = 2
    while w < 32 and w < mean:
        w *= 2
    return w


@register_plan("gpu", "spmv")
def csr_plan(indptr, width=None, block=None, grid=None) -> CsrPlan:
    """The plan of the CSR kernels for a matrix with row pointers ``indptr`` (host or
    device array): ``width`` from :func:`subwarp_width` unless given, ``block``
    (default: the device's, :func:`mpsolve.kernels.cuda._launch.config`) threads, ``grid``
    covering the rows (capped at one resident wave) unless given."""
    n = int(indptr.shape[0]) - 1
    nnz = int(indptr[-1]) if n > 0 else 0
    w = subwarp_width(n, nnz) if width is None else int(width)
    if w not in WIDTHS:
        raise ValueError(f"sub-warp width {w}: choose one of {WIDTHS}")
    blk, g = _block_grid(n, lambda blk: blk // w, block, grid)
    return CsrPlan(n, nnz, w, blk, g)


# --- device code ------------------------------------------------------------------------
def _make_row_sum(CAST, ZERO):
    @cuda.jit(**_DEV)
    def row_sum(indptr, indices, data, x, row, n, sub, width):
        """Row ``row``'s sum in ``CAST``'s precision (FP64/complex128: ``field.wide``,
        FP32/complex64: ``field.narrow``, the field of ``data``) on lane 0 of the calling
        sub-warp (``sub`` is the lane within it).  Every lane of the warp calls it (rows
        ``>= n`` contribute 0)."""
        acc = ZERO(data)
        if row < n:
            # unsigned indices: no negative-index wraparound test in the loop
            r = np.uint64(row)
            k = np.uint64(indptr[r]) + np.uint64(sub)
            end = np.uint64(indptr[r + np.uint64(1)])
            step = np.uint64(width)
            while k < end:                # entries sub, sub + W, ... in stored order
                # acc += a_ik x_k, one rounding (complex: per real product, field.ffma)
                acc = ffma(CAST(data[k]), CAST(x[np.uint64(indices[k])]), acc)
                k += step
        off = width >> 1
        while off > 0:                    # fixed tree: lane s += lane s + off
            acc += shfl(acc, off)
            off >>= 1
        return acc

    return row_sum


row_sum64 = _make_row_sum(wide, wzero)
row_sum32 = _make_row_sum(narrow, nzero)


def kernel(name):
    """``cuda.jit`` under a distinct name: the kernels made by one factory get their own
    PTX entry names and compile-report rows."""
    def deco(fn):
        fn.__name__ = fn.__qualname__ = name
        return cuda.jit(fn)
    return deco


def _make_spmv(row_sum, name):
    @kernel(name)
    def csr_kernel(lw, indptr, indices, data, x, y):
        """``lw = log2(W)``: shifts, not divisions, place the threads."""
        n = y.shape[0]
        tid = cuda.threadIdx.x
        width = np.int32(1) << lw
        sub = tid & (width - 1)
        rows = cuda.blockDim.x >> lw          # rows per block and pass
        step = cuda.gridDim.x * rows
        base = cuda.blockIdx.x * rows
        while base < n:                       # block-uniform: shuffles stay convergent
            row = base + (tid >> lw)
            s = row_sum(indptr, indices, data, x, row, n, sub, width)
            if sub == 0 and row < n:
                y[np.uint64(row)] = s         # rounded once to y's dtype
            base += step
    return csr_kernel


_csr_acc64 = _make_spmv(row_sum64, "csr_spmv_acc64")
_csr_acc32 = _make_spmv(row_sum32, "csr_spmv_acc32")


@kernel("csr_residual")
def _csr_residual(lw, indptr, indices, data, x, b, r):
    n = r.shape[0]
    tid = cuda.threadIdx.x
    width = np.int32(1) << lw
    sub = tid & (width - 1)
    rows = cuda.blockDim.x >> lw
    step = cuda.gridDim.x * rows
    base = cuda.blockIdx.x * rows
    while base < n:
        row = base + (tid >> lw)
        s = row_sum64(indptr, indices, data, x, row, n, sub, width)
        if sub == 0 and row < n:
            i = np.uint64(row)
            r[i] = wide(b[i]) - s
        base += step


# --- registered host entry points -------------------------------------------------------
_F = ("float32", "float64")
_C = ("complex64", "complex128")
#: the CPU's keys: each field on its own (complex values with complex vectors)
_ALL = [(v, xi, yo) for f in (_F, _C) for v in f for xi in f for yo in f]
_RES = [(v, d, d, d) for f in (_F, _C) for v in f for d in f]


def log2_width(width):
    """The kernels' first argument: ``log2(W)`` as an int32."""
    return np.int32(int(width).bit_length() - 1)


def _launch(kern, plan, y, *args):
    if plan.n > 0:
        strm = stream(*args)   # before dev(): CuPy arrays tell it CuPy's current stream
        kern[plan.grid, plan.block, strm](log2_width(plan.width), *dev(*args))


@register("gpu", "spmv", _ALL, mode="acc64")
def csr_spmv_acc64(plan, indptr, indices, data, x, y):
    """``y <- A x``, row sums in FP64.  Dtypes key: ``(data, x, y)``."""
    _launch(_csr_acc64, plan, y, indptr, indices, data, x, y)


@register("gpu", "spmv", _ALL, mode="acc32")
def csr_spmv_acc32(plan, indptr, indices, data, x, y):
    """``y <- A x``, row sums in FP32.  Dtypes key: ``(data, x, y)``."""
    _launch(_csr_acc32, plan, y, indptr, indices, data, x, y)


@register("gpu", "residual", _RES, mode="acc64")
def csr_residual(plan, indptr, indices, data, x, b, r):
    """``r <- b - A x`` in one pass, row sums in FP64.  Dtypes key: ``(data, x, b, r)``."""
    _launch(_csr_residual, plan, r, indptr, indices, data, x, b, r)


# --- what the compile test builds (func.cuda_kernels, see kernels/cuda/__init__.py) ------
def _expose():
    from numba import types as t
    fl = {"float32": t.float32[::1], "float64": t.float64[::1],
          "complex64": t.complex64[::1], "complex128": t.complex128[::1]}
    i32, i64 = t.int32[::1], t.int64[::1]
    spmv = [(t.int32, i32, i32, fl[v], fl[a], fl[b]) for v, a, b in _ALL]
    # 64-bit row pointers and indices (nnz >= 2**31): one combination proves the arithmetic
    big = [(t.int32, i64, i64, fl["float32"], fl["float64"], fl["float64"])]
    res = [(t.int32, i32, i32, fl[v], fl[d], fl[d], fl[d]) for v, d, _, _ in _RES]
    expose(csr_spmv_acc64, [(_csr_acc64, spmv + big)], warp=[_csr_acc64])
    expose(csr_spmv_acc32, [(_csr_acc32, spmv)], warp=[_csr_acc32])
    expose(csr_residual, [(_csr_residual, res)], warp=[_csr_residual])


_expose()
