"""Fused CSR kernels on the GPU: ``spmv_dot`` (``y = A x`` and ``x . y`` in one pass).

CG's ``q = A p; p . q``: the product and the dot read ``p`` and write ``q`` once instead
of reading both again for a separate dot.  Dtypes key ``(data, x, y)`` with ``x`` and ``y``
alike, mode ``acc64`` (FP64 row sums, rounded once to ``y``'s dtype, exactly the bits of
:func:`mpsolve.kernels.cuda.spmv.csr_spmv_acc64` for the same plan); the dot is
accumulated in ``y``'s dtype, as the contract and the CPU kernel do.

Reduction: fixed chunks, fixed order, no atomics
------------------------------------------------
The rows are cut into chunks of :data:`CHUNK` rows (a constant, not the block size).  A
block takes whole chunks (grid-stride over chunks); its sub-warps compute the chunk's
rows (a sub-warp per row, as :mod:`.spmv`) and store ``x_i * y_i`` (rounded in ``y``'s
dtype) in shared memory; the chunk's sum is then a fixed tree: ``CHUNK / 32`` groups of 32
consecutive rows, each summed by a warp's shuffle tree (``shfl_down`` 16, 8, 4, 2, 1),
then the group sums by the same tree.  Which warp sums which group depends on the block
size, the tree does not.  Each chunk writes its partial to a buffer (``nchunks`` values,
a cached :func:`._launch.scratch` buffer: no allocation per product); a second launch of
one block sums them in a fixed order: :data:`SLOTS` slots, slot ``s`` adding partials ``s, s + SLOTS,
...`` in order, then the slots by the same tree.  No floating-point atomics anywhere: the
result bits depend on ``n`` and the data only -- the same for every block size, grid and
sub-warp width that yields the same ``y``, and the same in the simulator.  The Python
float returned is the one device-to-host read the method needs (it synchronises the
stream, so the next product may reuse the buffers).  The final pass is sequential within a
slot: ``n / (CHUNK * SLOTS)`` adds, 15 at ``n = 10^6``, 150 at ``10^7``.

Memory traffic per product
--------------------------
As :mod:`.spmv` (``nnz (4 + sizeof(value)) + 4 (n + 1)`` bytes of matrix, ``x`` gathered,
``n sizeof(y)`` written), plus ``x_i`` for the dot (an L1/L2 hit: row ``i``'s diagonal
entry has just gathered it for a matrix with a stored diagonal) and ``n / CHUNK`` partials
written and read back (0.4% of ``y`` at ``CHUNK = 256``).  The unfused pair moves
``n (sizeof(x) + sizeof(y))`` more bytes from DRAM.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from ..registry import register
from ._intrin import SIM
from .field import cmul, shfl
from ._launch import cdiv, dev, expose, scratch, stream
from .spmv import _DEV, kernel, log2_width, read_scalar, row_sum64

__all__ = ["csr_spmv_dot", "CHUNK", "SLOTS"]

#: Rows per chunk of the dot's fixed-order reduction (a multiple of 32, at most 32 * 32).
CHUNK = 256
#: Slots of the final sum over the chunk partials (a multiple of 32, at most 32 * 32).
SLOTS = 256


def _make(YT, NT, tag):
    """Kernels for dot dtype ``YT`` (``np.float32``/``np.float64``, or ``np.complex64``/
    ``np.complex128``: then the dot is ``x^H y``; ``NT`` the Numba type of the shared
    arrays)."""

    @cuda.jit(**_DEV)
    def tree32(v):
        """Sum over the 32 lanes of a warp in the fixed tree order (result on lane 0)."""
        off = 16
        while off > 0:
            v += shfl(v, off)
            off >>= 1
        return v

    @cuda.jit(**_DEV)
    def block_tree(buf, m, groups):
        """Sum of ``buf[0:m]`` (``m`` a multiple of 32, ``m / 32 <= 32``) in a fixed
        order, whatever the block size; lane 0 of every warp returns it.  ``groups``: shared
        scratch of 32.  Ends with a barrier: ``buf`` and ``groups`` may be rewritten."""
        tid = cuda.threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        nw = cuda.blockDim.x >> 5
        ng = m >> 5
        for g0 in range(0, ng, nw):       # block-uniform: warps take groups g0 + warp
            g = g0 + warp
            v = buf[g * 32 + lane] if g < ng else YT(0.0)
            v = tree32(v)
            if lane == 0 and g < ng:
                groups[g] = v
        cuda.syncthreads()
        v = groups[lane] if lane < ng else YT(0.0)
        v = tree32(v)                     # every warp sums the group sums (same tree)
        cuda.syncthreads()
        return v

    @kernel(f"csr_spmv_dot_{tag}")
    def spmv_dot_kernel(lw, indptr, indices, data, x, y, part):
        prod = cuda.shared.array(CHUNK, dtype=NT)
        groups = cuda.shared.array(32, dtype=NT)
        n = y.shape[0]
        tid = cuda.threadIdx.x
        width = np.int32(1) << lw
        sub = tid & (width - 1)
        local = tid >> lw
        rows = cuda.blockDim.x >> lw
        nchunks = (n + CHUNK - 1) // CHUNK
        c = cuda.blockIdx.x
        while c < nchunks:                # block-uniform (grid-stride over chunks)
            r0 = c * CHUNK
            off = 0
            while off < CHUNK and r0 + off < n:   # (block-uniform) the last chunk's rows
                lr = off + local
                row = r0 + lr
                s = row_sum64(indptr, indices, data, x, row, n, sub, width)
                if sub == 0 and lr < CHUNK:
                    if row < n:
                        i = np.uint64(row)
                        yi = YT(s)
                        y[i] = yi
                        prod[lr] = cmul(YT(x[i]), yi)    # x_i y_i (complex: conj(x_i) y_i)
                    else:
                        prod[lr] = YT(0.0)
                off += rows
            z = off + tid                     # rows past n in the last chunk: zeros
            while z < CHUNK:
                prod[z] = YT(0.0)
                z += cuda.blockDim.x
            cuda.syncthreads()
            t = block_tree(prod, CHUNK, groups)
            if tid == 0:
                part[c] = t
            c += cuda.gridDim.x

    @kernel(f"dot_final_sum_{tag}")
    def final_sum_kernel(part, out):
        slots = cuda.shared.array(SLOTS, dtype=NT)
        groups = cuda.shared.array(32, dtype=NT)
        tid = cuda.threadIdx.x
        m = part.shape[0]
        for s0 in range(0, SLOTS, cuda.blockDim.x):
            s = s0 + tid
            if s < SLOTS:
                v = YT(0.0)
                for c in range(s, m, SLOTS):   # in order within a slot
                    v += part[c]
                slots[s] = v
        cuda.syncthreads()
        t = block_tree(slots, SLOTS, groups)
        if tid == 0:
            out[0] = t

    return spmv_dot_kernel, final_sum_kernel


#: the kernels' name tags (PTX entry names) per dot dtype
_TAG = {np.float32: "y32", np.float64: "y64", np.complex64: "c64", np.complex128: "c128"}
if SIM:
    _K = {np.dtype(t): _make(t, t, _TAG[t]) for t in _TAG}
else:
    from numba import complex64 as _nc64, complex128 as _nc128, float32 as _nf32, \
        float64 as _nf64
    _K = {np.dtype(t): _make(t, nt, _TAG[t]) for t, nt in (
        (np.float32, _nf32), (np.float64, _nf64), (np.complex64, _nc64),
        (np.complex128, _nc128))}
_K32, _K64 = _K[np.dtype(np.float32)], _K[np.dtype(np.float64)]


@register("gpu", "spmv_dot", [(v, d, d) for f in (("float32", "float64"),
                                                  ("complex64", "complex128"))
                              for v in f for d in f], mode="acc64")
def csr_spmv_dot(plan, indptr, indices, data, x, y):
    """``y <- A x`` (row sums in FP64, complex128 for complex data) and return ``x . y``
    (complex: ``x^H y``, a Python complex) accumulated in ``y``'s dtype in a fixed order
    (bitwise the same for every launch configuration).  ``A`` square.
    Dtypes key: ``(data, x, y)`` with ``x`` and ``y`` alike."""
    n = plan.n
    if n == 0:
        return 0j if np.dtype(y.dtype).kind == "c" else 0.0
    nchunks = cdiv(n, CHUNK)
    strm = stream(x, y)
    part = scratch("spmv_dot_part", nchunks, y.dtype, strm)
    out = scratch("spmv_dot_out", 1, y.dtype, strm)
    main, final = _K[np.dtype(y.dtype)]
    indptr, indices, data, x, y = dev(indptr, indices, data, x, y)
    main[min(plan.grid, nchunks), plan.block, strm](log2_width(plan.width), indptr, indices,
                                                    data, x, y, part)
    final[1, plan.block, strm](part, out)   # any block size: the same bits
    return read_scalar(out, strm)


def _expose():
    from numba import types as t
    fl = {d: getattr(t, d)[::1] for d in ("float32", "float64", "complex64", "complex128")}
    i32 = t.int32[::1]
    pairs, warp = [], []
    for dt, (main, final) in _K.items():
        d = dt.name
        field = ("complex64", "complex128") if dt.kind == "c" else ("float32", "float64")
        pairs.append((main, [(t.int32, i32, i32, fl[v], fl[d], fl[d], fl[d]) for v in field]))
        pairs.append((final, [(fl[d], fl[d])]))
        warp += [main, final]
    expose(csr_spmv_dot, pairs, warp=warp)


_expose()
