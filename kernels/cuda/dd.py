"""Double-double solution and compensated residual on the GPU (numba-cuda).

The same two ops, math and dtype keys as :mod:`mpsolve.kernels.cpu.dd` (the contract of
:mod:`mpsolve.kernels.primitives`): ``residual_dd`` (``r + rl = b - A (xh + xl)``, Dot2 per
row) and ``dd_axpy`` (``(yh, yl) += a x`` in double-double).  The EFTs are
:mod:`mpsolve.kernels.eft`'s, compiled for CUDA in :mod:`mpsolve.kernels.cuda.eft`; the
one plain addition (the error terms) is an explicit ``add_rn``, so nothing is contracted.

Both are grid-stride loops, one thread per row / element: ``residual_dd`` runs once per
refinement step (not per Krylov iteration), so it is written for exactness, not for the
SpMV's sub-warp layout; each row's terms are taken in stored order, as on the CPU, so the
two devices give the same bits.
"""
from __future__ import annotations

import math

from numba import cuda

from ..registry import register
from ._intrin import add_rn, mul_rn
from ._launch import dev, expose, grid, stream
from .eft import two_prod, two_sum

__all__ = ["csr_residual_dd", "dd_axpy"]


@cuda.jit
def _residual_dd(indptr, indices, data, xh, xl, b, r, rl):
    i = cuda.grid(1)
    while i < r.size:
        p = b[i]                                   # Dot2 pair (p, s), started at b_i
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            a = data[k]
            h, e = two_prod(a, -xh[j])             # h + e == -a_ij xh_j
            p, q = two_sum(p, h)                   # p + q == old p + h
            s = add_rn(s, add_rn(q, e))
            h, e = two_prod(a, -xl[j])             # the low part of x
            p, q = two_sum(p, h)
            s = add_rn(s, add_rn(q, e))
        hi, lo = two_sum(p, s)                     # r = fl(p + s), rl = the rest
        if math.isinf(hi) or math.isnan(hi):
            # past FP64's range (the error terms are inf - inf): the plain FP64 residual,
            # +-inf or NaN as FP64 says (the CPU kernel's rule)
            hi = b[i]
            for k in range(indptr[i], indptr[i + 1]):
                j = indices[k]
                hi = add_rn(hi, -add_rn(mul_rn(data[k], xh[j]), mul_rn(data[k], xl[j])))
            lo = 0.0
        r[i] = hi
        rl[i] = lo
        i += cuda.gridsize(1)


@cuda.jit
def _dd_axpy(a, x, yh, yl):
    i = cuda.grid(1)
    while i < x.size:
        t, te = two_prod(a, x[i])                  # t + te == a x_i
        s, se = two_sum(yh[i], t)                  # s + se == yh_i + t
        hi, lo = two_sum(s, add_rn(se, add_rn(te, yl[i])))   # renormalised
        yh[i] = hi
        yl[i] = lo
        i += cuda.gridsize(1)


@register("gpu", "residual_dd", [("float64",)])
def csr_residual_dd(plan, indptr, indices, data, xh, xl, b, r, rl):
    """``r + rl <- b - A (xh + xl)``, Dot2 per row (``plan`` unused: one thread a row)."""
    if r.size == 0:
        return
    strm = stream(indptr, xh, r)
    blocks, threads = grid(r.size)
    _residual_dd[blocks, threads, strm](*dev(indptr, indices, data, xh, xl, b, r, rl))


@register("gpu", "dd_axpy", [("float64",)])
def dd_axpy(a, x, yh, yl):
    """``(yh, yl) <- (yh + yl) + a x`` in double-double."""
    if x.size == 0:
        return
    strm = stream(x, yh)
    blocks, threads = grid(x.size)
    _dd_axpy[blocks, threads, strm](float(a), *dev(x, yh, yl))


def _expose():
    from numba import types as t
    f, i32, i64 = t.float64[::1], t.int32[::1], t.int64[::1]
    expose(csr_residual_dd, [(_residual_dd, [(i32, i32, f, f, f, f, f, f),
                                             (i64, i64, f, f, f, f, f, f)])],
           eft=[_residual_dd])
    expose(dd_axpy, [(_dd_axpy, [(t.float64, f, f, f)])], eft=[_dd_axpy])


_expose()
