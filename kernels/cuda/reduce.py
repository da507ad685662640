"""Reductions on the GPU: ``dot``, ``nrm2``, ``sum``, ``mdot`` (native and compensated) and
the fused ``axpy2_nrm2``, bitwise reproducible for any launch configuration and any GPU.

Reference: T. Ogita, S. M. Rump, S. Oishi, "Accurate sum and dot product", SIAM J. Sci.
Comput. 26(6):1955-1988, 2005 (ORO): Algorithm 4.4 ``Sum2``, Algorithm 5.3 ``Dot2``.  The
scalar EFTs are :mod:`mpsolve.kernels.eft`'s, compiled by :mod:`mpsolve.kernels.cuda.eft`.

Reproducibility: a fixed reduction tree
---------------------------------------
The order of every floating-point operation depends on ``n`` only:

1. **Chunks.**  ``x`` is cut into chunks of :data:`CHUNK` = 1024 consecutive elements (the
   last one shorter).  A chunk is reduced by one warp: lane ``l`` accumulates elements
   ``lo + l, lo + l + 32, ...`` in increasing order (coalesced loads: the warp reads 32
   consecutive elements per step) into its own ``(p, s)`` pair -- Dot2: ``h, r =
   TwoProd(x_i, y_i)`` (by ``fma``), ``p, q = TwoSum(p, h)`` (by ``*_rn``), ``s += q + r``;
   Sum2 the same without the product -- and the 32 lane pairs are merged by ``shfl_down``
   in a fixed binary tree (offsets 16, 8, 4, 2, 1; :func:`~.field.pair_warp_merge`).  Lane 0
   writes the chunk's pair to slot ``c`` of a partials array.  Which warp of which block
   reduces chunk ``c`` depends on the launch configuration (a grid-stride loop over
   chunks); the chunk's pair does not.
2. **Levels.**  While more than :data:`CHUNK` pairs are left, the pairs are reduced the
   same way, :data:`CHUNK` consecutive pairs per warp (pair merge: ``TwoSum`` of the high
   parts, the error added to the low parts), into a shorter partials array.
3. **Final.**  One warp (a fixed shape, not a tuning parameter: grid ``(1, rows)`` x 32
   threads) merges the last ``<= CHUNK`` pairs and rounds the pair once to the vectors'
   dtype (``fl(p + s)``, :func:`~.eft.round_pair`) or takes its root with one Newton step
   (:func:`~.eft.sqrt_pair`, ``nrm2``).  One device-to-host copy of the scalar: the only
   synchronisation.

No floating-point atomics, no dependence on the number of blocks, threads per block or
SMs; every ``+ - *`` is an explicitly rounded ``add.rn``/``sub.rn``/``mul.rn``/``fma.rn``
(never contracted differently by ptxas for another architecture).  The simulator
emulates those exactly, so it gives the hardware's bits.

Native mode: the same tree with one value per lane, ``s = fma(x_i, y_i, s)`` (dot, nrm2:
one rounding per element, as cuBLAS) or ``s = s + x_i`` (sum), merged by ``add_rn``.
FP32 vectors are reduced in FP32 (native) or as FP32 pairs (compensated), like the CPU.

Error bound (compensated): the tree is still an error-free transformation of the input
followed by a floating-point sum of the errors, so ORO's bound holds:
``|dot2 - x.y| <= u |x.y| + gamma_n^2 |x|.|y|`` (``u = 2^-53`` FP64, ``2^-24`` FP32).

Complex vectors: ``dot``/``mdot`` return ``x^H y`` (Python complex; ``mdot``'s ``out``
complex128) from the same kernels typed for complex arrays (:mod:`.field`): native
``fma`` per real product of ``conj(x_i) y_i``, compensated Dot2 on the four real products of
each element in the order of the CPU's ``cdot2`` (a pair per part, so each part meets the
real bound with ``n -> 2n``), the trees merging both parts; the complex Dot2 pass keeps two
pairs per lane and is compiled a second time with the pair merges' register cap.
``nrm2`` of a complex vector is the real kernel on its ``2n`` parts (as the CPU);
``axpy2_nrm2`` sums ``|v_i|^2`` in a real accumulator.

Memory traffic: ``dot`` reads ``2n`` values (+ ``2n/1024`` partials), ``nrm2``/``sum``
``n``, ``mdot`` ``(k + 1) n`` (``w`` re-read from cache per row), ``axpy2_nrm2`` ``6n``.
"""
from __future__ import annotations

import numpy as np
from numba import complex64, complex128, cuda, float32, float64, int64

from ..registry import register
from ._intrin import SIM, WARP, add_rn, lane_id
from ._launch import THREADS, cdiv, dev, device_view, expose, grid_warps, read_scalar, scratch, \
    stream
from .eft import DEVICE_JIT, two_sum
from .field import abs2_fma, cfma, dot2_step, fadd, fmul, pair_add, pair_warp_merge, \
    root as sqrt_value, root_pair, round_pair, rzero, value_warp_merge, zero

__all__ = ["CHUNK", "dot", "dot2", "nrm2", "nrm2_compensated", "sum_native", "sum2", "mdot",
           "mdot2", "axpy2_nrm2"]

#: Elements (or partial pairs) per chunk: 32 per lane.  Part of the result's definition
#: (changing it changes the rounding); never derived from the launch configuration.  Read
#: by the host functions at each call and passed to the kernels, so the simulator tests
#: can shrink it (e.g. to 8) to get many chunks and several levels at n <= 300.
CHUNK = 1024

_VEC = [("float64",), ("float32",)]
_CVEC = [("complex128",), ("complex64",)]
_T = (float32, float64)
_CT = (complex64, complex128)
#: FP64 twin of each type: the dtype of mdot's results (and of a widened FP32 result)
_W = {float32: float64, float64: float64, complex64: complex128, complex128: complex128}
_R = {complex64: float32, complex128: float64}

#: The grid-stride passes: at most ``THREADS`` threads per block and at least 3 blocks per
#: SM resident, which caps ptxas at 80 registers (measured: the multi-row ``mdot`` passes
#: took 90-122 on sm_80 without it).  The FP64 pair merges of ``mdot2`` and of the merge
#: levels spill under that cap on sm_80: 2 blocks (128 registers; they use 82-90).
#: tests/cuda/compile_checks.py asserts no spills.  The simulator's ``cuda.jit`` has no
#: ``launch_bounds``.
_PASS_JIT = {} if SIM else dict(launch_bounds=(THREADS, 3))
_PAIRS_JIT = {} if SIM else dict(launch_bounds=(THREADS, 2))


# --- per-chunk device functions --------------------------------------------------------

@cuda.jit(**DEVICE_JIT)
def _warp_coords():
    """(global warp index, number of warps in the grid along x, lane)."""
    tid = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    return tid // WARP, (cuda.gridDim.x * cuda.blockDim.x) // WARP, lane_id()


# --- compensated passes ------------------------------------------------------------------

def _dot2_pass(x, y, chunk, ps, pc):
    """Dot2 pair of every chunk of ``x . y`` into ``ps[0, c], pc[0, c]``."""
    n = x.size
    gw, nw, lane = _warp_coords()
    nchunk = (n + chunk - 1) // chunk
    z = zero(x)
    for r in range((nchunk + nw - 1) // nw):     # the same trip count for every warp
        c = gw + r * nw
        lo = c * chunk
        hi = min(lo + chunk, n)
        p = z
        s = z
        i = lo + lane
        while i < hi:
            # h + e == x_i y_i (TwoProd); p + q == p_old + h (TwoSum); s += q + e.
            # Complex: the four real products of conj(x_i) y_i (field.dot2_step)
            p, s = dot2_step(x[i], y[i], p, s)
            i += WARP
        p, s = pair_warp_merge(p, s, lane)
        if lane == 0 and c < nchunk:
            ps[0, c] = p
            pc[0, c] = s


#: the same body twice: the complex pass holds two pairs per lane (80 registers spill on
#: sm_80 under the 3-blocks cap), so it gets the 2-blocks cap of the pair merges
_dot2_pass, _cdot2_pass = (cuda.jit(**_PASS_JIT)(_dot2_pass),
                           cuda.jit(**_PAIRS_JIT)(_dot2_pass))


@cuda.jit(**_PASS_JIT)
def _sum2_pass(x, chunk, ps, pc):
    """Sum2 pair of every chunk of ``x`` into ``ps[0, c], pc[0, c]``."""
    n = x.size
    gw, nw, lane = _warp_coords()
    nchunk = (n + chunk - 1) // chunk
    z = zero(x)
    for r in range((nchunk + nw - 1) // nw):
        c = gw + r * nw
        lo = c * chunk
        hi = min(lo + chunk, n)
        p = z
        s = z
        i = lo + lane
        while i < hi:
            p, q = two_sum(p, x[i])              # p + q == p_old + x_i
            s = add_rn(s, q)
            i += WARP
        p, s = pair_warp_merge(p, s, lane)
        if lane == 0 and c < nchunk:
            ps[0, c] = p
            pc[0, c] = s


@cuda.jit(**_PAIRS_JIT)
def _mdot2_pass(V, k, w, chunk, ps, pc):
    """Dot2 pair of every chunk of ``V[i] . w``, ``i < k``, into ``ps[i, c], pc[i, c]``."""
    n = w.size
    gw, nw, lane = _warp_coords()
    nchunk = (n + chunk - 1) // chunk
    z = zero(w)
    for r in range((nchunk + nw - 1) // nw):
        c = gw + r * nw
        lo = c * chunk
        hi = min(lo + chunk, n)
        for row in range(k):
            p = z
            s = z
            i = lo + lane
            while i < hi:
                p, s = dot2_step(V[row, i], w[i], p, s)
                i += WARP
            p, s = pair_warp_merge(p, s, lane)
            if lane == 0 and c < nchunk:
                ps[row, c] = p
                pc[row, c] = s


@cuda.jit(**_PAIRS_JIT)
def _pairs_pass(ps, pc, m, chunk, qs, qc):
    """One level: the pairs ``ps[row, :m]`` merged ``CHUNK`` at a time into ``qs[row, c]``
    (row = ``blockIdx.y``)."""
    row = cuda.blockIdx.y
    gw, nw, lane = _warp_coords()
    nchunk = (m + chunk - 1) // chunk
    z = zero(ps)
    for r in range((nchunk + nw - 1) // nw):
        c = gw + r * nw
        lo = c * chunk
        hi = min(lo + chunk, m)
        p = z
        s = z
        i = lo + lane
        while i < hi:
            p, s = pair_add(p, s, ps[row, i], pc[row, i])
            i += WARP
        p, s = pair_warp_merge(p, s, lane)
        if lane == 0 and c < nchunk:
            qs[row, c] = p
            qc[row, c] = s


@cuda.jit
def _pairs_final(ps, pc, m, root, out):
    """One warp per row (grid ``(1, rows)`` x 32): merge ``ps[row, :m]`` (``m <= CHUNK``);
    ``out[row] = fl(p + s)``, or ``sqrt(p + s)`` with ``root``."""
    row = cuda.blockIdx.y
    lane = lane_id()
    z = zero(ps)
    p = z
    s = z
    i = lane
    while i < m:
        p, s = pair_add(p, s, ps[row, i], pc[row, i])
        i += WARP
    p, s = pair_warp_merge(p, s, lane)
    if lane == 0:
        if root:
            out[row] = root_pair(p, s)
        else:
            out[row] = round_pair(p, s)


# --- native passes -----------------------------------------------------------------------

@cuda.jit(**_PASS_JIT)
def _dot_pass(x, y, chunk, ps):
    """``x . y`` of every chunk, in the vectors' dtype (``fma``), into ``ps[0, c]``."""
    n = x.size
    gw, nw, lane = _warp_coords()
    nchunk = (n + chunk - 1) // chunk
    z = zero(x)
    for r in range((nchunk + nw - 1) // nw):
        c = gw + r * nw
        lo = c * chunk
        hi = min(lo + chunk, n)
        s = z
        i = lo + lane
        while i < hi:
            s = cfma(x[i], y[i], s)              # s += x_i y_i (complex: conj(x_i) y_i), fma
            i += WARP
        s = value_warp_merge(s, lane)
        if lane == 0 and c < nchunk:
            ps[0, c] = s


@cuda.jit(**_PASS_JIT)
def _sum_pass(x, chunk, ps):
    """``sum x`` of every chunk, in the vector's dtype, into ``ps[0, c]``."""
    n = x.size
    gw, nw, lane = _warp_coords()
    nchunk = (n + chunk - 1) // chunk
    z = zero(x)
    for r in range((nchunk + nw - 1) // nw):
        c = gw + r * nw
        lo = c * chunk
        hi = min(lo + chunk, n)
        s = z
        i = lo + lane
        while i < hi:
            s = add_rn(s, x[i])
            i += WARP
        s = value_warp_merge(s, lane)
        if lane == 0 and c < nchunk:
            ps[0, c] = s


@cuda.jit(**_PASS_JIT)
def _mdot_pass(V, k, w, chunk, ps):
    """``V[i] . w`` of every chunk, ``i < k``, in ``w``'s dtype, into ``ps[i, c]``."""
    n = w.size
    gw, nw, lane = _warp_coords()
    nchunk = (n + chunk - 1) // chunk
    z = zero(w)
    for r in range((nchunk + nw - 1) // nw):
        c = gw + r * nw
        lo = c * chunk
        hi = min(lo + chunk, n)
        for row in range(k):
            s = z
            i = lo + lane
            while i < hi:
                s = cfma(V[row, i], w[i], s)
                i += WARP
            s = value_warp_merge(s, lane)
            if lane == 0 and c < nchunk:
                ps[row, c] = s


@cuda.jit(**_PASS_JIT)
def _axpy2_nrm2_pass(a, x, y, b, u, v, chunk, ps):
    """``y += a x; v += b u`` (rounded as ``axpy2``) and ``v . v`` of every chunk of the new
    ``v`` (``fma``) into ``ps[0, c]``: one pass over the five vectors."""
    n = x.size
    gw, nw, lane = _warp_coords()
    nchunk = (n + chunk - 1) // chunk
    for r in range((nchunk + nw - 1) // nw):
        c = gw + r * nw
        lo = c * chunk
        hi = min(lo + chunk, n)
        s = rzero(x)                             # ||v||^2 is real
        i = lo + lane
        while i < hi:
            y[i] = fadd(y[i], fmul(a, x[i]))         # y += a x
            t = fadd(v[i], fmul(b, u[i]))            # v += b u
            v[i] = t
            s = abs2_fma(t, s)                       # ||v||^2 (complex: |t|^2)
            i += WARP
        s = value_warp_merge(s, lane)
        if lane == 0 and c < nchunk:
            ps[0, c] = s


@cuda.jit(**_PASS_JIT)
def _vals_pass(ps, m, chunk, qs):
    """One level of the native tree: ``ps[row, :m]`` summed ``CHUNK`` at a time."""
    row = cuda.blockIdx.y
    gw, nw, lane = _warp_coords()
    nchunk = (m + chunk - 1) // chunk
    z = zero(ps)
    for r in range((nchunk + nw - 1) // nw):
        c = gw + r * nw
        lo = c * chunk
        hi = min(lo + chunk, m)
        s = z
        i = lo + lane
        while i < hi:
            s = fadd(s, ps[row, i])
            i += WARP
        s = value_warp_merge(s, lane)
        if lane == 0 and c < nchunk:
            qs[row, c] = s


@cuda.jit
def _vals_final(ps, m, root, out):
    """One warp per row: ``out[row] = sum ps[row, :m]`` (``m <= CHUNK``), or its root."""
    row = cuda.blockIdx.y
    lane = lane_id()
    s = zero(ps)
    i = lane
    while i < m:
        s = fadd(s, ps[row, i])
        i += WARP
    s = value_warp_merge(s, lane)
    if lane == 0:
        if root:
            out[row] = sqrt_value(s)             # sqrt.rn: correctly rounded
        else:
            out[row] = s


# --- host side ---------------------------------------------------------------------------

def _partials(name, rows, m, dtype, strm):
    return scratch(name, rows * max(m, 1), dtype, strm).reshape((rows, max(m, 1)))


#: The largest grid.y of a launch (CUDA's limit): the row passes take ``rows`` there, and
#: run in slices of at most this many rows.
MAX_GRID_Y = 65535


def _finish_pairs(ps, pc, rows, m, chunk, root, out, strm):
    """Levels (while ``m > chunk``) and the final warp per row into ``out[:rows]``."""
    if rows <= MAX_GRID_Y:              # (no slicing: a device array's costs ~20 us)
        _finish_pairs_rows(ps, pc, rows, m, chunk, root, out, strm, 0)
        return
    for r0 in range(0, rows, MAX_GRID_Y):
        r1 = min(rows, r0 + MAX_GRID_Y)
        _finish_pairs_rows(ps[r0:r1], pc[r0:r1], r1 - r0, m, chunk, root, out[r0:r1], strm,
                           r0)


def _finish_vals(ps, rows, m, chunk, root, out, strm):
    """:func:`_finish_pairs` for plain partial sums (no compensation terms)."""
    if rows <= MAX_GRID_Y:
        _finish_vals_rows(ps, rows, m, chunk, root, out, strm, 0)
        return
    for r0 in range(0, rows, MAX_GRID_Y):
        r1 = min(rows, r0 + MAX_GRID_Y)
        _finish_vals_rows(ps[r0:r1], r1 - r0, m, chunk, root, out[r0:r1], strm, r0)


def _finish_pairs_rows(ps, pc, rows, m, chunk, root, out, strm, r0):
    """:func:`_finish_pairs` for at most :data:`MAX_GRID_Y` rows (``r0``: the first one's
    number, naming their scratch apart from another slice's)."""
    dt = ps.dtype
    level = 0
    while m > chunk:
        m2 = cdiv(m, chunk)
        tag = "ab"[level % 2] + (f"@{r0}" if r0 else "")
        qs = _partials("qs" + tag, rows, m2, dt, strm)
        qc = _partials("qc" + tag, rows, m2, dt, strm)
        blocks, threads = grid_warps(m2)
        _pairs_pass[(blocks, rows), threads, strm](ps, pc, m, chunk, qs, qc)
        ps, pc, m = qs, qc, m2
        level += 1
    _pairs_final[(1, rows), WARP, strm](ps, pc, m, root, out)


def _finish_vals_rows(ps, rows, m, chunk, root, out, strm, r0):
    dt = ps.dtype
    level = 0
    while m > chunk:
        m2 = cdiv(m, chunk)
        qs = _partials("qv" + "ab"[level % 2] + (f"@{r0}" if r0 else ""), rows, m2, dt, strm)
        blocks, threads = grid_warps(m2)
        _vals_pass[(blocks, rows), threads, strm](ps, m, chunk, qs)
        ps, m = qs, m2
        level += 1
    _vals_final[(1, rows), WARP, strm](ps, m, root, out)


def _real_view(x):
    """A complex vector as the real vector of its ``2n`` interleaved parts (no copy)."""
    return x.view(np.dtype(x.dtype).type(0).real.dtype)


def _dot2_any(x, y, root):
    strm = stream(x, y)
    x, y = dev(x, y)
    n = x.size
    chunk = CHUNK
    nchunk = cdiv(n, chunk)
    ps = _partials("ps", 1, nchunk, x.dtype, strm)
    pc = _partials("pc", 1, nchunk, x.dtype, strm)
    blocks, threads = grid_warps(nchunk)
    kern = _cdot2_pass if x.dtype.kind == "c" else _dot2_pass
    kern[blocks, threads, strm](x, y, chunk, ps, pc)
    out = scratch("out", 1, x.dtype, strm)
    _finish_pairs(ps, pc, 1, nchunk, chunk, root, out, strm)
    return read_scalar(out, strm)


def _dot_any(x, y, root):
    strm = stream(x, y)
    x, y = dev(x, y)
    chunk = CHUNK
    nchunk = cdiv(x.size, chunk)
    ps = _partials("pv", 1, nchunk, x.dtype, strm)
    blocks, threads = grid_warps(nchunk)
    _dot_pass[blocks, threads, strm](x, y, chunk, ps)
    out = scratch("out", 1, x.dtype, strm)
    _finish_vals(ps, 1, nchunk, chunk, root, out, strm)
    return read_scalar(out, strm)


@register("gpu", "dot", _VEC + _CVEC, mode="compensated")
def dot2(x, y):
    """Compensated ``x . y`` (ORO Dot2), bitwise reproducible; FP32 as an FP32 pair.
    Complex: ``x^H y`` from the four real products of each element (the CPU's ``cdot2``:
    a Dot2 pair for each part), a Python complex."""
    return _dot2_any(x, y, 0)


@register("gpu", "nrm2", _VEC, mode="compensated")
def nrm2_compensated(x):
    """``||x||_2`` from the Dot2 pair of ``x . x``, one Newton step on the pair."""
    return _dot2_any(x, x, 1)


@register("gpu", "dot", _VEC + _CVEC, mode="native")
def dot(x, y):
    """``x . y`` in the vectors' dtype (``fma`` per element, fixed tree); complex: ``x^H y``
    (``fma`` per real product), a Python complex."""
    return _dot_any(x, y, 0)


@register("gpu", "nrm2", _VEC, mode="native")
def nrm2(x):
    """``sqrt(x . x)`` in the vector's dtype (no overflow scaling, as the CPU)."""
    return _dot_any(x, x, 1)


@register("gpu", "nrm2", _CVEC, mode="native")
def cnrm2(x):
    """``||x||_2`` of a complex vector: :func:`nrm2` of its ``2n`` real parts (as the CPU)."""
    return nrm2(_real_view(x))


@register("gpu", "nrm2", _CVEC, mode="compensated")
def cnrm2_compensated(x):
    """Compensated ``||x||_2`` of a complex vector: :func:`nrm2_compensated` of its ``2n``
    real parts."""
    return nrm2_compensated(_real_view(x))


@register("gpu", "sum", _VEC, mode="compensated")
def sum2(x):
    """Compensated ``sum x`` (ORO Sum2), bitwise reproducible."""
    strm = stream(x)
    x, = dev(x)
    chunk = CHUNK
    nchunk = cdiv(x.size, chunk)
    ps = _partials("ps", 1, nchunk, x.dtype, strm)
    pc = _partials("pc", 1, nchunk, x.dtype, strm)
    blocks, threads = grid_warps(nchunk)
    _sum2_pass[blocks, threads, strm](x, chunk, ps, pc)
    out = scratch("out", 1, x.dtype, strm)
    _finish_pairs(ps, pc, 1, nchunk, chunk, 0, out, strm)
    return read_scalar(out, strm)


@register("gpu", "sum", _VEC, mode="native")
def sum_native(x):
    """``sum x`` in the vector's dtype, fixed tree."""
    strm = stream(x)
    x, = dev(x)
    chunk = CHUNK
    nchunk = cdiv(x.size, chunk)
    ps = _partials("pv", 1, nchunk, x.dtype, strm)
    blocks, threads = grid_warps(nchunk)
    _sum_pass[blocks, threads, strm](x, chunk, ps)
    out = scratch("out", 1, x.dtype, strm)
    _finish_vals(ps, 1, nchunk, chunk, 0, out, strm)
    return read_scalar(out, strm)


def _wide(dtype):
    return np.complex128 if np.dtype(dtype).kind == "c" else np.float64


def _mdot_out(res, k, out, strm):
    """``out[:k] = res[:k]``: one copy to the host (GMRES keeps its coefficients there) or a
    device-to-device copy."""
    if k == 0:
        return
    dev = device_view(out)
    if dev is None:
        host = res.copy_to_host(stream=strm) if strm else res.copy_to_host()
        if strm:
            strm.synchronize()
        out[:k] = host[:k]
    else:
        dev[:k].copy_to_device(res[:k], stream=strm)


@register("gpu", "mdot", _VEC + _CVEC, mode="compensated")
def mdot2(V, k, w, out):
    """``out[i] = V[i] . w`` for ``i < k`` by Dot2, each as :func:`dot2` would give it;
    ``out`` FP64, complex128 for complex ``w`` (host or device)."""
    if k <= 0:
        return
    strm = stream(V, w)
    V, w = dev(V, w)
    chunk = CHUNK
    nchunk = cdiv(w.size, chunk)
    ps = _partials("ps", k, nchunk, w.dtype, strm)
    pc = _partials("pc", k, nchunk, w.dtype, strm)
    blocks, threads = grid_warps(nchunk)
    _mdot2_pass[blocks, threads, strm](V, k, w, chunk, ps, pc)
    res = scratch("mout", k, _wide(w.dtype), strm)
    _finish_pairs(ps, pc, k, nchunk, chunk, 0, res, strm)
    _mdot_out(res, k, out, strm)


@register("gpu", "mdot", _VEC + _CVEC, mode="native")
def mdot(V, k, w, out):
    """``out[i] = V[i] . w`` for ``i < k`` in ``w``'s dtype, each as :func:`dot` would give
    it; ``out`` FP64, complex128 for complex ``w`` (host or device)."""
    if k <= 0:
        return
    strm = stream(V, w)
    V, w = dev(V, w)
    chunk = CHUNK
    nchunk = cdiv(w.size, chunk)
    ps = _partials("pv", k, nchunk, w.dtype, strm)
    blocks, threads = grid_warps(nchunk)
    _mdot_pass[blocks, threads, strm](V, k, w, chunk, ps)
    res = scratch("mout", k, _wide(w.dtype), strm)
    _finish_vals(ps, k, nchunk, chunk, 0, res, strm)
    _mdot_out(res, k, out, strm)


@register("gpu", "axpy2_nrm2", _VEC + _CVEC, mode="native")
def axpy2_nrm2(a, x, y, b, u, v):
    """``y += a x; v += b u; return ||v||_2`` in one pass (CG's step 2 and its residual
    norm); the updates bitwise those of ``axpy2``, the norm bitwise :func:`nrm2` of the new
    ``v`` (complex: ``sum |v_i|^2`` element by element, within rounding of :func:`cnrm2`,
    which sums the parts in another order)."""
    t = x.dtype.type
    strm = stream(x, y, u, v)
    x, y, u, v = dev(x, y, u, v)
    chunk = CHUNK
    nchunk = cdiv(x.size, chunk)
    rdt = np.dtype(x.dtype).type(0).real.dtype       # the norm's squares are real
    ps = _partials("pv", 1, nchunk, rdt, strm)
    blocks, threads = grid_warps(nchunk)
    _axpy2_nrm2_pass[blocks, threads, strm](t(a), x, y, t(b), u, v, chunk, ps)
    out = scratch("out", 1, rdt, strm)
    _finish_vals(ps, 1, nchunk, chunk, 1, out, strm)
    return read_scalar(out, strm)


# --- what the compile test compiles (kernels/cuda/__init__.py: func.cuda_kernels) ----------

def _v(t):
    return t[::1]


def _m(t):
    return t[:, ::1]


_TA = _T + _CT                            # dot, mdot (native, compensated) take both fields


def _outs(t):
    return (t, _W[t]) if _W[t] is not t else (t,)


_PAIRS = [(_pairs_pass, [(_m(t), _m(t), int64, int64, _m(t), _m(t)) for t in _TA]),
          (_pairs_final, [(_m(t), _m(t), int64, int64, _v(o)) for t in _TA for o in _outs(t)])]
_VALS = [(_vals_pass, [(_m(t), int64, int64, _m(t)) for t in _TA]),
         (_vals_final, [(_m(t), int64, int64, _v(o)) for t in _TA for o in _outs(t)])]
_ALL_PAIRS = {_dot2_pass, _cdot2_pass, _sum2_pass, _mdot2_pass, _pairs_pass, _pairs_final}
_ALL_VALS = {_dot_pass, _sum_pass, _mdot_pass, _axpy2_nrm2_pass, _vals_pass, _vals_final}
_ALL = _ALL_PAIRS | _ALL_VALS

for _f, _pass in ((dot2, (_dot2_pass, [(_v(t), _v(t), int64, _m(t), _m(t)) for t in _T])),
                  (nrm2_compensated, (_dot2_pass, [(_v(t), _v(t), int64, _m(t), _m(t)) for t in _T])),
                  (cnrm2_compensated, (_dot2_pass, [(_v(t), _v(t), int64, _m(t), _m(t))
                                                    for t in _T])),
                  (sum2, (_sum2_pass, [(_v(t), int64, _m(t), _m(t)) for t in _T])),
                  (mdot2, (_mdot2_pass, [(_m(t), int64, _v(t), int64, _m(t), _m(t)) for t in _TA]))):
    expose(_f, [_pass] + _PAIRS, warp=_ALL, eft=_ALL)
expose(dot2, dot2.cuda_kernels + [(_cdot2_pass, [(_v(t), _v(t), int64, _m(t), _m(t))
                                                 for t in _CT])], warp=_ALL, eft=_ALL)
for _f, _pass in ((dot, (_dot_pass, [(_v(t), _v(t), int64, _m(t)) for t in _TA])),
                  (nrm2, (_dot_pass, [(_v(t), _v(t), int64, _m(t)) for t in _T])),
                  (cnrm2, (_dot_pass, [(_v(t), _v(t), int64, _m(t)) for t in _T])),
                  (sum_native, (_sum_pass, [(_v(t), int64, _m(t)) for t in _T])),
                  (mdot, (_mdot_pass, [(_m(t), int64, _v(t), int64, _m(t)) for t in _TA])),
                  (axpy2_nrm2, (_axpy2_nrm2_pass,
                                [(t, _v(t), _v(t), t, _v(t), _v(t), int64, _m(_R.get(t, t)))
                                 for t in _TA]))):
    expose(_f, [_pass] + _VALS, warp=_ALL, eft=_ALL)
