"""Level-1 vector updates on the GPU (numba-cuda), registered for device ``"gpu"``.

Same ops, signatures and dtype keys as :mod:`mpsolve.kernels.cpu.blas1` (the contract of
:mod:`mpsolve.kernels.primitives`).  Every kernel is a grid-stride loop, one thread per
element, consecutive threads on consecutive elements (coalesced); the grid is capped at one
full wave of the device (:func:`mpsolve.kernels.cuda._launch.grid`).  Scalars are cast to the
vectors' dtype on the host (as the reference does: ``dtype(a)``).

Rounding: every ``+ - *`` is an explicitly rounded ``add_rn``/``sub_rn``/``mul_rn``
(:mod:`._intrin`), never contracted into an FMA, so each element is rounded exactly as
the CPU and the NumPy reference round it (``y + a*x``: the product, then the sum): the
updates agree with both **bit for bit**, on any GPU and in the simulator.  ``lincomb`` and
``maxpy`` sum over the ``k`` basis vectors in order ``i = 0, 1, ...`` per element
(``maxpy`` bitwise the CPU's; ``lincomb`` within rounding of the CPU's BLAS GEMV).

Complex vectors (complex64/complex128): the same kernels, typed by the arrays, through
:mod:`.field` (``fadd``/``fsub``/``fmul``: the complex product as two rounded products and one
rounded add or subtract per part, as NumPy's and Numba's), so the complex updates agree with
the CPU's bit for bit too.  ``copy``/``dmul`` keys stay within one field.

Memory traffic per element: ``axpy``/``xpay``/``waxpy``/``axpby`` 3 values, ``axpy2`` 6,
``bicg_dir`` 4, ``scal``/``copy`` 2, ``dmul`` 3, ``lincomb`` ``k + 1``, ``maxpy`` ``k + 2``.
"""
from __future__ import annotations

import numpy as np
from numba import complex64, complex128, cuda, float32, float64, int64

from ..registry import register
from .field import fadd, fmul, fsub, zero
from ._launch import dev, device_view, expose, grid, scratch, stream

__all__ = ["axpy", "xpay", "axpby", "waxpy", "axpy2", "bicg_dir", "scal", "copy", "dmul",
           "lincomb", "maxpy"]

_F = ("float32", "float64")
_C = ("complex64", "complex128")
#: every op on real and complex vectors (the complex twins of the CPU's keys); the
#: multi-dtype keys stay within one field
_VEC = [(d,) for d in _F + _C]
_PAIRS = [(a, b) for f in (_F, _C) for a in f for b in f]
_TRIPLES = [(d, x, o) for f in (_F, _C) for d in f for x in f for o in f]
_T = (float32, float64, complex64, complex128)
_TF = ((float32, float64), (complex64, complex128))


@cuda.jit
def _axpy(a, x, y):
    i = cuda.grid(1)
    while i < x.size:
        y[i] = fadd(y[i], fmul(a, x[i]))            # y = y + a x
        i += cuda.gridsize(1)


@cuda.jit
def _xpay(x, a, y):
    i = cuda.grid(1)
    while i < x.size:
        y[i] = fadd(x[i], fmul(a, y[i]))            # y = x + a y
        i += cuda.gridsize(1)


@cuda.jit
def _axpby(a, x, b, y):
    i = cuda.grid(1)
    while i < x.size:
        y[i] = fadd(fmul(a, x[i]), fmul(b, y[i]))  # y = a x + b y
        i += cuda.gridsize(1)


@cuda.jit
def _waxpy(a, x, y, w):
    i = cuda.grid(1)
    while i < x.size:
        w[i] = fadd(y[i], fmul(a, x[i]))            # w = y + a x
        i += cuda.gridsize(1)


@cuda.jit
def _axpy2(a, x, y, b, u, v):
    i = cuda.grid(1)
    while i < x.size:
        y[i] = fadd(y[i], fmul(a, x[i]))            # y = y + a x
        v[i] = fadd(v[i], fmul(b, u[i]))            # v = v + b u
        i += cuda.gridsize(1)


@cuda.jit
def _bicg_dir(r, beta, omega, v, p):
    i = cuda.grid(1)
    while i < r.size:
        # p = r + beta (p - omega v)
        p[i] = fadd(r[i], fmul(beta, fsub(p[i], fmul(omega, v[i]))))
        i += cuda.gridsize(1)


@cuda.jit
def _scal(a, x):
    i = cuda.grid(1)
    while i < x.size:
        x[i] = fmul(a, x[i])                          # x = a x
        i += cuda.gridsize(1)


@cuda.jit
def _copy(x, out):
    i = cuda.grid(1)
    while i < x.size:
        out[i] = x[i]                                   # the cast (cvt.rn) fused
        i += cuda.gridsize(1)


@cuda.jit
def _dmul(d, x, out):
    i = cuda.grid(1)
    while i < x.size:
        # FP32 x FP32 in FP32, any FP64 operand in FP64 (NumPy's promotion), then out's dtype;
        # complex: the product of field.fmul
        out[i] = fmul(d[i], x[i])
        i += cuda.gridsize(1)


@cuda.jit
def _lincomb(V, k, c, out):
    j = cuda.grid(1)
    while j < out.size:
        s = zero(out)
        for i in range(k):                              # out = sum_{i<k} c_i V[i], in order
            s = fadd(s, fmul(c[i], V[i, j]))
        out[j] = s
        j += cuda.gridsize(1)


@cuda.jit
def _maxpy(V, k, h, w):
    j = cuda.grid(1)
    while j < w.size:
        s = w[j]
        for i in range(k):                              # w = w - h_i V[i], i = 0, 1, ...
            s = fsub(s, fmul(h[i], V[i, j]))
        w[j] = s
        j += cuda.gridsize(1)


# --- registered wrappers --------------------------------------------------------------------

@register("gpu", "axpy", _VEC)
def axpy(a, x, y):
    """``y <- y + a x``."""
    blocks, threads = grid(x.size)
    strm = stream(x, y)
    x, y = dev(x, y)
    _axpy[blocks, threads, strm](x.dtype.type(a), x, y)


@register("gpu", "xpay", _VEC)
def xpay(x, a, y):
    """``y <- x + a y`` (CG's ``p <- z + beta p``)."""
    blocks, threads = grid(x.size)
    strm = stream(x, y)
    x, y = dev(x, y)
    _xpay[blocks, threads, strm](x, x.dtype.type(a), y)


@register("gpu", "axpby", _VEC)
def axpby(a, x, b, y):
    """``y <- a x + b y``."""
    t = x.dtype.type
    blocks, threads = grid(x.size)
    strm = stream(x, y)
    x, y = dev(x, y)
    _axpby[blocks, threads, strm](t(a), x, t(b), y)


@register("gpu", "waxpy", _VEC)
def waxpy(a, x, y, w):
    """``w <- y + a x`` (BiCGSTAB's ``s <- r - alpha v``)."""
    blocks, threads = grid(x.size)
    strm = stream(x, y, w)
    x, y, w = dev(x, y, w)
    _waxpy[blocks, threads, strm](x.dtype.type(a), x, y, w)


@register("gpu", "axpy2", _VEC)
def axpy2(a, x, y, b, u, v):
    """``y <- y + a x;  v <- v + b u`` in one pass (CG's step 2)."""
    t = x.dtype.type
    blocks, threads = grid(x.size)
    strm = stream(x, y, u, v)
    x, y, u, v = dev(x, y, u, v)
    _axpy2[blocks, threads, strm](t(a), x, y, t(b), u, v)


@register("gpu", "bicg_dir", _VEC)
def bicg_dir(r, beta, omega, v, p):
    """BiCGSTAB's ``p <- r + beta (p - omega v)`` in one pass."""
    t = r.dtype.type
    blocks, threads = grid(r.size)
    strm = stream(r, v, p)
    r, v, p = dev(r, v, p)
    _bicg_dir[blocks, threads, strm](r, t(beta), t(omega), v, p)


@register("gpu", "scal", _VEC)
def scal(a, x):
    """``x <- a x``."""
    blocks, threads = grid(x.size)
    strm = stream(x)
    x, = dev(x)
    _scal[blocks, threads, strm](x.dtype.type(a), x)


@register("gpu", "copy", _PAIRS)
def copy(x, out):
    """``out <- x``, the cast to ``out``'s dtype fused."""
    blocks, threads = grid(x.size)
    strm = stream(x, out)
    x, out = dev(x, out)
    _copy[blocks, threads, strm](x, out)


@register("gpu", "dmul", _TRIPLES)
def dmul(d, x, out):
    """``out <- diag(d) x``, casts fused (point Jacobi's apply); dtypes ``(d, x, out)``."""
    blocks, threads = grid(x.size)
    strm = stream(d, x, out)
    d, x, out = dev(d, x, out)
    _dmul[blocks, threads, strm](d, x, out)


def _coefficients(h, k, dtype, strm):
    """``h[:k]`` in ``dtype`` on the device: a host array (GMRES keeps its small problem on
    the host) is cast there and copied once into a cached buffer."""
    buf = scratch("coef", max(k, 1), dtype, strm)
    src = device_view(h)
    if src is not None:
        if src.dtype == np.dtype(dtype):
            return src
        _copy[1, 32, strm](src[:k], buf[:k])
        return buf
    buf[:k].copy_to_device(np.ascontiguousarray(np.asarray(h[:k], dtype=dtype)), stream=strm)
    return buf


@register("gpu", "lincomb", _VEC)
def lincomb(V, y, k, out):
    """``out <- sum_{i<k} y_i V[i]`` (GMRES's ``V_k y``); ``V`` one vector a row."""
    strm = stream(V, out)
    V, out = dev(V, out)
    c = _coefficients(y, k, V.dtype, strm)
    blocks, threads = grid(out.size)
    _lincomb[blocks, threads, strm](V, k, c, out)


@register("gpu", "maxpy", _VEC)
def maxpy(V, k, h, w):
    """``w <- w - sum_{i<k} h_i V[i]`` (classical Gram-Schmidt's projection)."""
    if k <= 0:
        return
    strm = stream(V, w)
    V, w = dev(V, w)
    c = _coefficients(h, k, w.dtype, strm)
    blocks, threads = grid(w.size)
    _maxpy[blocks, threads, strm](V, k, c, w)


# --- what the compile test compiles (kernels/cuda/__init__.py: func.cuda_kernels) ----------

def _v(t):
    return t[::1]


_ALL = {_axpy, _xpay, _axpby, _waxpy, _axpy2, _bicg_dir, _scal, _copy, _dmul, _lincomb, _maxpy}
for _f, _k, _sigs in (
        (axpy, _axpy, [(t, _v(t), _v(t)) for t in _T]),
        (xpay, _xpay, [(_v(t), t, _v(t)) for t in _T]),
        (axpby, _axpby, [(t, _v(t), t, _v(t)) for t in _T]),
        (waxpy, _waxpy, [(t, _v(t), _v(t), _v(t)) for t in _T]),
        (axpy2, _axpy2, [(t, _v(t), _v(t), t, _v(t), _v(t)) for t in _T]),
        (bicg_dir, _bicg_dir, [(_v(t), t, t, _v(t), _v(t)) for t in _T]),
        (scal, _scal, [(t, _v(t)) for t in _T]),
        (copy, _copy, [(_v(a), _v(b)) for f in _TF for a in f for b in f]),
        (dmul, _dmul, [(_v(d), _v(x), _v(o)) for f in _TF for d in f for x in f for o in f]),
        (lincomb, _lincomb, [(t[:, ::1], int64, _v(t), _v(t)) for t in _T]),
        (maxpy, _maxpy, [(t[:, ::1], int64, _v(t), _v(t)) for t in _T])):
    expose(_f, [(_k, _sigs)], eft=_ALL)
expose(lincomb, [(_lincomb, lincomb.cuda_kernels[0][1]),
                 (_copy, [(_v(a), _v(b)) for f in _TF for a in f for b in f])], eft=_ALL)
expose(maxpy, [(_maxpy, maxpy.cuda_kernels[0][1]),
               (_copy, [(_v(a), _v(b)) for f in _TF for a in f for b in f])], eft=_ALL)
