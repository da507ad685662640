"""Scalar helpers that let one CUDA kernel body serve real and complex vectors.

The CUDA counterpart of :mod:`mpsolve.kernels.cpu.field`.  On hardware each helper is a
``numba.extending.overload`` for the ``cuda`` target, resolved when a kernel is typed for
its arrays and inlined (``inline="always"``): for FP32/FP64 arguments it *is* the real
expression the kernels used before (``add_rn``, ``mul_rn``, ``fma``, one shuffle), so a
real kernel compiles to the same PTX; for complex64/complex128 arguments it is the
same operation done on the real and imaginary parts with the same explicitly rounded
primitives of :mod:`._intrin` (never contracted, never reassociated).  Under the simulator
they are plain Python functions with the same arithmetic on NumPy scalars (the
simulator's FP32 values are ``np.float32``, its complex64 ones ``np.complex64``).

Complex arithmetic, part by part (``a = ar + i ai``, ``b = br + i bi``)::

    fadd(a, b) = (ar + br) + i (ai + bi)                  each part add.rn
    fsub(a, b) = (ar - br) + i (ai - bi)                  sub.rn
    fmul(a, b) = (ar br - ai bi) + i (ar bi + ai br)      mul.rn, then sub.rn / add.rn
    cmul(x, y) = fmul(conj(x), y) = (xr yr + xi yi) + i (xr yi - xi yr)   (negation exact)
    ffma(a, b, c) = a b + c:     re fma(ar, br, fma(-ai, bi, cr)), im fma(ar, bi, fma(ai, br, ci))
    cfma(x, y, s) = ffma(conj(x), y, s) = conj(x) y + s
    abs2_fma(t, s) = |t|^2 + s (``s`` real):  fma(ti, ti, fma(tr, tr, s))

``fmul`` rounds as NumPy's and Numba's complex product (the two products, then one add or
subtract per part): the BLAS-1 updates agree with the CPU's bit for bit.  ``ffma``,
``cfma`` and ``abs2_fma`` accumulate with one rounding per real product (the complex
form of the real kernels' ``fma``).

Reductions: ``dot2_step`` is one element of Dot2 -- for reals ``TwoProd``, ``TwoSum``
and the error sum of the real kernels, for complex numbers the four real products of
``conj(x_i) y_i`` in the order of the CPU's ``cdot2`` (two into the real pair, two into
the imaginary pair); ``pair_add``/``round_pair``/``shfl``/``value_warp_merge``/``pair_warp_merge``
act on each part.  ``root`` is ``sqrt`` (a real value) and ``root_pair`` is
:func:`.eft.sqrt_pair` (a real pair); for a complex value they take the root of the real
part (the imaginary part of ``x^H x`` is zero): the complex norms themselves are the real
kernels on the interleaved parts, so those branches are typed but not taken.

Typing helpers: ``wide(v)``/``narrow(v)`` cast to FP64/complex128 or FP32/complex64 (the
SpMV accumulators), ``zero(a)``/``wzero(a)``/``nzero(a)``/``rzero(a)`` a zero of array
``a``'s dtype / wide / narrow type / of its *real* precision.
"""
from __future__ import annotations

import math

import numpy as np

from ._intrin import SIM, WARP, add_rn, fma, mul_rn, shfl_down, sub_rn
from .eft import pair_add as _pair_add, round_pair as _round_pair, sqrt_pair as _sqrt_pair, \
    two_prod, two_sum

__all__ = ["fadd", "fsub", "fmul", "cmul", "ffma", "cfma", "abs2_fma", "dot2_step",
           "pair_add", "round_pair", "root_pair", "root", "shfl", "value_warp_merge",
           "pair_warp_merge", "wide", "narrow", "zero", "wzero", "nzero", "rzero"]


def _dot2_real_py(x, y, p, s):
    """One element of Dot2 on reals: ``h + e == x y`` (TwoProd), ``p + q == p_old + h``
    (TwoSum), ``s`` collects both errors."""
    h, e = two_prod(x, y)
    p, q = two_sum(p, h)
    return p, add_rn(s, add_rn(q, e))


def _dot2_parts_py(xr, xi, yr, yi, pr, pi, sr, si):
    """One element of complex Dot2 on the parts of ``conj(x) y``: the real pair
    ``(pr, sr)`` takes ``xr yr + xi yi``, the imaginary pair ``(pi, si)`` ``xr yi - xi yr``
    (four TwoProducts, the CPU's ``cdot2`` order)."""
    h0, r0 = two_prod(xr, yr)
    h1, r1 = two_prod(xi, yi)
    h2, r2 = two_prod(xr, yi)
    h3, r3 = two_prod(-xi, yr)
    pr, q0 = two_sum(pr, h0)
    pr, q1 = two_sum(pr, h1)
    pi, q2 = two_sum(pi, h2)
    pi, q3 = two_sum(pi, h3)
    sr = add_rn(sr, add_rn(add_rn(q0, r0), add_rn(q1, r1)))
    si = add_rn(si, add_rn(add_rn(q2, r2), add_rn(q3, r3)))
    return pr, pi, sr, si


if SIM:
    _dot2_real, _dot2_parts = _dot2_real_py, _dot2_parts_py

    def _c(v):
        return isinstance(v, (complex, np.complexfloating))

    def _mk(re, im):
        """A complex scalar of the parts' precision (np.float32 parts: complex64)."""
        t = np.complex64 if isinstance(re, np.float32) and isinstance(im, np.float32) \
            else np.complex128
        return t(complex(re, im))

    def _per_part(op):
        """``op(a, b)`` for reals, ``op`` on each part for complex numbers."""
        def f(a, b):
            return _mk(op(a.real, b.real), op(a.imag, b.imag)) if _c(a) else op(a, b)
        return f

    fadd, fsub = _per_part(add_rn), _per_part(sub_rn)

    def fmul(a, b):
        if _c(a) or _c(b):
            a, b = np.complex128(a) if not _c(a) else a, np.complex128(b) if not _c(b) else b
            return _mk(sub_rn(mul_rn(a.real, b.real), mul_rn(a.imag, b.imag)),
                       add_rn(mul_rn(a.real, b.imag), mul_rn(a.imag, b.real)))
        return mul_rn(a, b)

    def cmul(x, y):
        return fmul(x.conjugate(), y) if _c(x) else fmul(x, y)   # negation is exact

    def ffma(a, b, c):
        if _c(c):
            return _mk(fma(a.real, b.real, fma(-a.imag, b.imag, c.real)),
                       fma(a.real, b.imag, fma(a.imag, b.real, c.imag)))
        return fma(a, b, c)

    def cfma(x, y, s):
        return ffma(x.conjugate(), y, s) if _c(x) else ffma(x, y, s)

    def abs2_fma(t, s):
        if _c(t):
            return fma(t.imag, t.imag, fma(t.real, t.real, s))
        return fma(t, t, s)

    def dot2_step(x, y, p, s):
        if _c(p):
            pr, pi, sr, si = _dot2_parts(x.real, x.imag, y.real, y.imag, p.real, p.imag,
                                         s.real, s.imag)
            return _mk(pr, pi), _mk(sr, si)
        return _dot2_real(x, y, p, s)

    def pair_add(p, s, p2, s2):
        if _c(p):
            a, b = _pair_add(p.real, s.real, p2.real, s2.real)
            c, d = _pair_add(p.imag, s.imag, p2.imag, s2.imag)
            return _mk(a, c), _mk(b, d)
        return _pair_add(p, s, p2, s2)

    def round_pair(p, s):
        if _c(p):
            return _mk(_round_pair(p.real, s.real), _round_pair(p.imag, s.imag))
        return _round_pair(p, s)

    def root_pair(p, s):
        if _c(p):
            return _sqrt_pair(p.real, s.real)
        return _sqrt_pair(p, s)

    def root(v):
        return math.sqrt(v.real) if _c(v) else math.sqrt(v)

    shfl = shfl_down                    # the simulator's exchange takes any Python value

    def wide(v):
        return np.complex128(v) if _c(v) else np.float64(v)

    def narrow(v):
        return np.complex64(v) if _c(v) else np.float32(v)

    def zero(a):
        return a.dtype.type(0)

    def wzero(a):
        return np.complex128(0) if a.dtype.kind == "c" else np.float64(0)

    def nzero(a):
        return np.complex64(0) if a.dtype.kind == "c" else np.float32(0)

    def rzero(a):
        return np.zeros(1, a.dtype).real.dtype.type(0)

else:
    from numba import cuda, types
    from numba.extending import overload

    from .eft import DEVICE_JIT as _DJ
    _dot2_real, _dot2_parts = (cuda.jit(**_DJ)(f) for f in (_dot2_real_py, _dot2_parts_py))

    def _stub(name):
        def stub(*_a):  # pragma: no cover - the overloads replace it inside kernels
            raise TypeError(f"mpsolve.kernels.cuda.field.{name} is for CUDA kernels only")
        stub.__name__ = name
        return stub

    (fadd, fsub, fmul, cmul, ffma, cfma, abs2_fma, dot2_step, pair_add, round_pair,
     root_pair, root, shfl, wide, narrow, zero, wzero, nzero, rzero) = (
        _stub(n) for n in ("fadd", "fsub", "fmul", "cmul", "ffma", "cfma", "abs2_fma",
                           "dot2_step", "pair_add", "round_pair", "root_pair", "root",
                           "shfl", "wide", "narrow", "zero", "wzero", "nzero", "rzero"))

    def _ov(stub):
        return overload(stub, target="cuda", inline="always")

    def _cx(*ts):
        return any(isinstance(t, types.Complex) for t in ts)

    def _ctype(*ts):
        """The complex NumPy type of the widest of the arguments' precisions."""
        bits = 32
        for t in ts:
            f = t.underlying_float if isinstance(t, types.Complex) else t
            if isinstance(f, types.Float) and f.bitwidth == 64:
                bits = 64
        return np.complex128 if bits == 64 else np.complex64

    def _per_part(stub, op):
        """``stub(a, b)``: ``op(a, b)`` for reals, ``op`` on each part for complex numbers."""
        @_ov(stub)
        def _impl(a, b):
            if _cx(a, b):
                ct = _ctype(a, b)
                return lambda a, b: ct(complex(op(a.real, b.real), op(a.imag, b.imag)))
            return lambda a, b: op(a, b)

    _per_part(fadd, add_rn)
    _per_part(fsub, sub_rn)

    @_ov(fmul)
    def _fmul(a, b):
        if _cx(a, b):
            ct = _ctype(a, b)

            def impl(a, b):
                ar, ai, br, bi = a.real, a.imag, b.real, b.imag
                return ct(complex(sub_rn(mul_rn(ar, br), mul_rn(ai, bi)),
                                  add_rn(mul_rn(ar, bi), mul_rn(ai, br))))
            return impl
        return lambda a, b: mul_rn(a, b)

    @_ov(cmul)
    def _cmul(x, y):
        if _cx(x):
            return lambda x, y: fmul(x.conjugate(), y)     # negation is exact
        return lambda x, y: fmul(x, y)

    @_ov(ffma)
    def _ffma(a, b, c):
        if _cx(c):
            ct = _ctype(c)

            def impl(a, b, c):
                ar, ai, br, bi = a.real, a.imag, b.real, b.imag
                return ct(complex(fma(ar, br, fma(-ai, bi, c.real)),
                                  fma(ar, bi, fma(ai, br, c.imag))))
            return impl
        return lambda a, b, c: fma(a, b, c)

    @_ov(cfma)
    def _cfma(x, y, s):
        if _cx(x):
            return lambda x, y, s: ffma(x.conjugate(), y, s)
        return lambda x, y, s: ffma(x, y, s)

    @_ov(abs2_fma)
    def _abs2_fma(t, s):
        if _cx(t):
            return lambda t, s: fma(t.imag, t.imag, fma(t.real, t.real, s))
        return lambda t, s: fma(t, t, s)

    @_ov(dot2_step)
    def _dot2_step(x, y, p, s):
        if _cx(p):
            ct = _ctype(p)

            def impl(x, y, p, s):
                pr, pi, sr, si = _dot2_parts(x.real, x.imag, y.real, y.imag, p.real, p.imag,
                                             s.real, s.imag)
                return ct(complex(pr, pi)), ct(complex(sr, si))
            return impl
        return lambda x, y, p, s: _dot2_real(x, y, p, s)

    @_ov(pair_add)
    def _pair_add_ov(p, s, p2, s2):
        if _cx(p):
            ct = _ctype(p)

            def impl(p, s, p2, s2):
                a, b = _pair_add(p.real, s.real, p2.real, s2.real)
                c, d = _pair_add(p.imag, s.imag, p2.imag, s2.imag)
                return ct(complex(a, c)), ct(complex(b, d))
            return impl
        return lambda p, s, p2, s2: _pair_add(p, s, p2, s2)

    @_ov(round_pair)
    def _round_pair_ov(p, s):
        if _cx(p):
            ct = _ctype(p)
            return lambda p, s: ct(complex(_round_pair(p.real, s.real),
                                           _round_pair(p.imag, s.imag)))
        return lambda p, s: _round_pair(p, s)

    @_ov(root_pair)
    def _root_pair(p, s):
        if _cx(p):
            return lambda p, s: _sqrt_pair(p.real, s.real)
        return lambda p, s: _sqrt_pair(p, s)

    @_ov(root)
    def _root(v):
        if _cx(v):
            return lambda v: math.sqrt(v.real)
        return lambda v: math.sqrt(v)

    @_ov(shfl)
    def _shfl(v, off):
        if _cx(v):
            ct = _ctype(v)
            return lambda v, off: ct(complex(shfl_down(v.real, off), shfl_down(v.imag, off)))
        return lambda v, off: shfl_down(v, off)

    @_ov(wide)
    def _wide(v):
        if _cx(v):
            return lambda v: np.complex128(v)
        return lambda v: np.float64(v)

    @_ov(narrow)
    def _narrow(v):
        if _cx(v):
            return lambda v: np.complex64(v)
        return lambda v: np.float32(v)

    @_ov(zero)
    def _zero(a):
        t = _np_type(a.dtype)
        return lambda a: t(0)

    @_ov(wzero)
    def _wzero(a):
        t = np.complex128 if isinstance(a.dtype, types.Complex) else np.float64
        return lambda a: t(0)

    @_ov(nzero)
    def _nzero(a):
        t = np.complex64 if isinstance(a.dtype, types.Complex) else np.float32
        return lambda a: t(0)

    @_ov(rzero)
    def _rzero(a):
        d = a.dtype.underlying_float if isinstance(a.dtype, types.Complex) else a.dtype
        t = np.float64 if d.bitwidth == 64 else np.float32
        return lambda a: t(0)

    def _np_type(nbt):
        from numba.np.numpy_support import as_dtype
        return as_dtype(nbt).type


def _make_merges():
    """``value_warp_merge`` and ``pair_warp_merge``: the warp's 32 values (pairs) merged in
    a fixed binary tree by shuffles (offsets 16, 8, 4, 2, 1; lane ``l`` merges ``(own, lane
    l + offset)`` in that order, lanes without a partner keep theirs; lane 0 holds the
    result), on real or complex values.  All 32 lanes must call them."""
    from numba import cuda
    from .eft import DEVICE_JIT

    @cuda.jit(**DEVICE_JIT)
    def value_warp_merge(v, lane):
        off = WARP // 2
        while off > 0:
            v2 = shfl(v, off)
            if lane + off < WARP:
                v = fadd(v, v2)
            off //= 2
        return v

    @cuda.jit(**DEVICE_JIT)
    def pair_warp_merge(p, s, lane):
        off = WARP // 2
        while off > 0:
            p2 = shfl(p, off)
            s2 = shfl(s, off)
            if lane + off < WARP:             # lanes without a partner keep their pair
                p, s = pair_add(p, s, p2, s2)
            off //= 2
        return p, s

    return value_warp_merge, pair_warp_merge


value_warp_merge, pair_warp_merge = _make_merges()
