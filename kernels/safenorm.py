"""Norms and ratios of dot products that neither overflow nor underflow.

A 2-norm computed as ``sqrt(x . x)`` overflows when ``x``'s entries exceed the square
root of the largest float (``|x_i| > 1.3e154`` in FP64, ``1.8e19`` in FP32), and loses
its relative accuracy to underflow when they are below the square root of the smallest
normal one -- although ``||x||`` itself is representable.  BLAS's ``nrm2`` scales every
entry; that costs a division an entry on every call.  Here the fast kernel runs as
before, and only a result it cannot vouch for is computed again on ``x`` scaled by a
power of two (exact), so an ordinary vector pays one comparison:

* :func:`trustworthy` -- ``sqrt(s)`` of an unscaled sum of ``m`` squares ``s`` is right
  to the kernel's accuracy when ``s`` is finite and ``s >= 2 m tiny`` (``tiny``: the
  smallest normal number).  Each square that underflows is off by at most
  ``2 tiny u`` (``u``: the unit roundoff); ``m`` of them are then at most ``u s``.
  NaN, ``inf`` and a sum that underflowed to 0 fail the test.
* :func:`safe_nrm2` -- wraps a device's ``nrm2`` (native or compensated): on a result
  that is not trustworthy it takes ``e`` with ``2^(e-1) <= max |x_i| < 2^e`` and
  returns ``2^e nrm2(2^-e x)``.  Scaling by a power of two is exact except for entries
  that become subnormal, which are below ``2^-(e+p)`` relative to the largest one and so
  too small to change the norm.  NaN and ``inf`` in ``x`` still give NaN/``inf``.
* :func:`safe_dot_ratio` -- ``(x . y) / (u . w)`` for the Krylov coefficients that are
  ratios of dots (CG's ``alpha = r.z / p.Ap``, BiCGSTAB's ``alpha`` and
  ``omega = t.s / t.t``), formed from vectors scaled by powers of two, which are put
  back into the quotient; the methods call it only where a dot overflowed or is
  subnormal.
* :func:`norm` -- the same guard around ``xp.linalg.norm`` (the true residual's norm).

The wrappers sit around the kernels in :func:`mpsolve.kernels.primitives.bind_primitives`,
so every device and reduction mode gets them; the kernels themselves stay as they are.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["trustworthy", "safe_nrm2", "safe_after", "safe_dot_ratio", "norm", "checked_norm",
           "all_finite",
           "scale_exponent", "ldexp_array"]

_LIMITS = {}
_F64 = np.dtype(np.float64)


_HOST_DOT = []


def _host_dot():
    """The host's native FP64 dot kernel (looked up on first use: importing this module
    does not load the kernels)."""
    if not _HOST_DOT:
        from .registry import lookup
        _HOST_DOT.append(lookup("cpu", "dot", ("float64",), "native"))
    return _HOST_DOT[0]


def _tiny2(dtype):
    """``(2 tiny, terms per entry)`` of a float or complex dtype (a complex entry's
    ``|z|^2`` is two squares)."""
    dt = np.dtype(dtype)
    lim = _LIMITS.get(dt)
    if lim is None:
        fi = np.finfo(dt)
        lim = _LIMITS[dt] = (2.0 * float(fi.tiny), 2 if dt.kind == "c" else 1)
    return lim


def trustworthy(nrm: float, n: int, dtype) -> bool:
    """Whether ``nrm = sqrt(s)``, ``s`` an unscaled sum of the squares of ``n`` entries of
    ``dtype``, is free of overflow and of accuracy lost to underflow (module docstring)."""
    tiny2, per = _tiny2(dtype)
    return nrm < math.inf and nrm * nrm >= tiny2 * (per * n)


def scale_exponent(x, xp) -> int | None:
    """``e`` with ``2^(e-1) <= max |x_i| < 2^e``; ``None`` when ``x`` is all zeros or
    holds NaN or ``inf`` (nothing to scale)."""
    if x.size == 0:
        return None
    m = float(xp.abs(x).max())
    if not (0.0 < m < math.inf):
        return None
    return math.frexp(m)[1]


def ldexp_array(x, e):
    """``2^e x`` in ``x``'s dtype (a new array), exact unless entries over- or underflow."""
    return _scaled(x, -e) if e else x.copy()


def _scaled(x, e):
    """``2^-e x`` in ``x``'s dtype (a new array: only on the rare path), in steps whose
    factors are normal numbers of that dtype (``2^-e`` alone may not be one)."""
    t = x.real.dtype.type
    step = np.finfo(x.real.dtype).maxexp - 2          # 1021 (FP64), 125 (FP32)
    e = -e
    y = None
    with np.errstate(over="ignore", under="ignore"):    # inf / 0 are the answer there
        while y is None or e:
            f = max(-step, min(step, e))
            y = (x if y is None else y) * t(math.ldexp(1.0, f))
            e -= f
    return y


def _ldexp_real(v, e):
    try:
        return math.ldexp(v, e)
    except OverflowError:
        return math.copysign(math.inf, v)


def safe_nrm2(nrm2, xp, dtype):
    """``nrm2`` for vectors of ``dtype`` that rescales when its result is not
    :func:`trustworthy` (the test inlined: it runs on every call)."""
    tiny2, per = _tiny2(dtype)
    lo = tiny2 * per
    inf = math.inf

    def nrm2_safe(x):
        r = nrm2(x)
        if r < inf and r * r >= lo * x.size:
            return r
        return _rescaled(nrm2, x, xp, r)

    nrm2_safe.__doc__ = nrm2.__doc__
    nrm2_safe.__wrapped__ = nrm2
    return nrm2_safe


def _rescaled(nrm2, x, xp, r):
    e = scale_exponent(x, xp)
    if e is None:                     # zeros (r = 0 is right) or NaN/inf (r says so)
        if x.size and not bool(xp.isfinite(x).all()):
            return math.nan if bool(xp.isnan(x).any()) else math.inf
        return r
    return _ldexp_real(nrm2(_scaled(x, e)), e)


def safe_after(fused, nrm2_safe, vec, dtype):
    """A fused ``op + ||v||`` kernel whose norm is recomputed by ``nrm2_safe`` when it is
    not :func:`trustworthy` (``vec``: the position of ``v``, of ``dtype``, among the
    arguments)."""
    tiny2, per = _tiny2(dtype)
    lo = tiny2 * per
    inf = math.inf

    def fused_safe(*args):
        r = fused(*args)
        if r < inf and r * r >= lo * args[vec].size:
            return r
        return nrm2_safe(args[vec])

    fused_safe.__doc__ = fused.__doc__
    fused_safe.__wrapped__ = fused
    return fused_safe


def _ldexp(z, e):
    if isinstance(z, complex):
        return complex(_ldexp_real(z.real, e), _ldexp_real(z.imag, e))
    return _ldexp_real(z, e)


def _divide(a, b):
    """``a / b`` with IEEE's rules for ``b == 0`` (Python raises instead)."""
    if b != 0:
        return a / b
    if a == 0 or a != a:
        return math.nan
    return math.copysign(math.inf, a.real if isinstance(a, complex) else a)


def _quiet_sq_norm(v) -> float:
    """``sqrt(v . v)`` of a 1-D FP64 NumPy array, by the host's compiled dot: neither a
    BLAS call (OpenBLAS threads its ddot above ~10^4 entries, and its threads then wait
    for cores that Numba's threads, spinning after a parallel kernel, or another process
    hold: measured 8 ms for one norm of 12k entries on a busy 2-core machine, 4 us
    compiled) nor an ``np.errstate`` (a compiled kernel raises no floating-point warning,
    whatever ``np.seterr`` says: the caller judges the result).  A strided ``v`` takes
    NumPy's dot, quietly."""
    if v.flags.c_contiguous:
        return math.sqrt(_host_dot()(v, v))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return math.sqrt(v.dot(v))


def all_finite(v, xp) -> bool:
    """Whether every entry of the array ``v`` of ``xp`` is finite.  A 1-D FP64 NumPy ``v``
    is judged by ``v . v`` first (finite only when every entry is: a NaN or ``inf``
    entry makes it NaN or ``inf``); only where that sum is not finite -- a non-finite
    entry, or finite entries whose squares overflow -- does the entrywise test run."""
    if xp is np and v.dtype == _F64 and v.ndim == 1 and _quiet_sq_norm(v) < math.inf:
        return True
    return bool(xp.isfinite(v).all())


def norm(v, xp) -> float:
    """``||v||_2`` of an array of ``xp`` (``xp.linalg.norm``, which is ``sqrt(v . v)``),
    rescaled as :func:`safe_nrm2` when that is not trustworthy."""
    if xp is np and v.dtype == _F64 and v.ndim == 1:
        r = _quiet_sq_norm(v)
    else:
        with np.errstate(over="ignore", under="ignore"):    # judged below, not warned about
            r = float(xp.linalg.norm(v))
    return checked_norm(r, v, xp)


def checked_norm(r, v, xp) -> float:
    """``||v||_2`` from ``r``, ``sqrt`` of an unscaled sum of the squares of ``v``'s entries
    computed already (:func:`norm`'s, or one a fused kernel returned): ``r`` itself where
    it is :func:`trustworthy`, ``0`` for an all-zero ``v``, else :func:`norm`'s rescaled
    value."""
    tiny2, per = _tiny2(v.dtype)
    if r < math.inf and r * r >= tiny2 * (per * v.size):  # trustworthy(r, v.size, v.dtype)
        return r
    if r == 0.0 and not bool(v.any()):
        return 0.0                                         # exactly zero (a solved x0)
    return _rescaled(lambda u: float(xp.linalg.norm(u)), v, xp, r)


def safe_dot_ratio(dot, xp):
    """``ratio(x, y, u, w) = (x . y) / (u . w)`` (``x^H y`` for complex vectors) without
    overflow or underflow in the dots: each vector is scaled by a power of two (an
    all-zero vector by 1), the dots of the scaled vectors divided, and the powers of two
    put back.  For the Krylov coefficients that are such ratios (CG's ``alpha``,
    BiCGSTAB's ``alpha`` and ``omega``), called where their usual computation met a dot
    that is not a finite normal number: it allocates scaled copies, so it is the
    exception's path, not the loop's.  NaN or ``inf`` in a vector gives NaN; a zero
    denominator gives IEEE's ``inf``/NaN."""

    def ratio(x, y, u, w):
        exps = {}
        scaled = {}
        for v in (x, y, u, w):
            if id(v) not in exps:
                if v.size and not bool(xp.isfinite(v).all()):
                    return math.nan
                e = scale_exponent(v, xp)
                exps[id(v)] = 0 if e is None else e
                scaled[id(v)] = v if e is None else _scaled(v, e)
        num = dot(scaled[id(x)], scaled[id(y)])
        den = dot(scaled[id(u)], scaled[id(w)])
        q = _divide(num, den)
        if q != q or abs(q) == math.inf or q == 0:
            return q
        return _ldexp(q, exps[id(x)] + exps[id(y)] - exps[id(u)] - exps[id(w)])

    return ratio
