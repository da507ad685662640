"""The reductions, rare paths and stopping rules shared by the compiled Krylov loops
(:mod:`.loops`, serial) and the two-thread team loops (:mod:`.team`): a dot product and a
norm in the native or compensated mode, the paths of :mod:`mpsolve.kernels.safenorm`
taken when a norm or a ratio of dot products is not trustworthy (recomputed from vectors
scaled by powers of two), and CG's test of its starting residual.
"""
import math

import numpy as np
from numba import njit

from ._config import JIT
from .blas1 import _axpy2_nrm2_ser, _axpy2_ser, _dot_ser
from .eft import _dot2_ser, _nrm2_ser

#: Reduction modes.
_NATIVE, _COMPENSATED = 0, 1


@njit(**JIT)
def _dot(mode, x, y):
    """``x . y`` as the registered ``dot`` of ``mode`` returns it (a float)."""
    if mode == _NATIVE:
        return np.float64(_dot_ser(x, y))
    return np.float64(_dot2_ser(x, y))


@njit(**JIT)
def _nrm2_raw(mode, x):
    if mode == _NATIVE:
        return math.sqrt(np.float64(_dot_ser(x, x)))
    return np.float64(_nrm2_ser(x))


@njit(**JIT)
def _scale_exponent(x):
    """``e`` with ``2^(e-1) <= max |x_i| < 2^e``, or 0 with ``ok`` False (all zeros, or
    NaN/inf: safenorm.scale_exponent's None)."""
    if x.size == 0:
        return 0, False
    m = 0.0
    for i in range(x.size):
        a = abs(np.float64(x[i]))
        if a != a:
            return 0, False
        if a > m:
            m = a
    if not (0.0 < m < math.inf):
        return 0, False
    return math.frexp(m)[1], True


@njit(**JIT)
def _scaled(x, e, step):
    """``2^-e x`` in ``x``'s dtype, in steps of normal factors (safenorm._scaled)."""
    y = x.copy()
    e = -e
    first = True
    while first or e != 0:
        first = False
        f = max(-step, min(step, e))
        fac = x.dtype.type(math.ldexp(1.0, f))
        for i in range(y.size):
            y[i] = y[i] * fac
        e -= f
    return y


@njit(**JIT)
def _ldexp(v, e):
    return math.ldexp(v, e)


@njit(**JIT)
def _nonfinite(x):
    """(any non-finite, any NaN) of ``x``."""
    bad = False
    for i in range(x.size):
        v = x[i]
        if v != v:
            return True, True
        if not math.isfinite(v):
            bad = True
    return bad, False


@njit(**JIT)
def _nrm2(mode, x, lo, step):
    """``||x||`` as :func:`safenorm.safe_nrm2` of the mode's ``nrm2`` (``lo``: its bound)."""
    r = _nrm2_raw(mode, x)
    if r < math.inf and r * r >= lo * x.size:
        return r
    e, ok = _scale_exponent(x)
    if not ok:
        if x.size:
            bad, isnan = _nonfinite(x)
            if bad:
                return math.nan if isnan else math.inf
        return r
    return _ldexp(_nrm2_raw(mode, _scaled(x, e, step)), e)


@njit(**JIT)
def _axpy2_nrm2(mode, a, x, y, b, u, v, lo, step):
    """``y += a x; v += b u; return ||v||`` as the bound ``axpy2_nrm2`` of ``mode``."""
    if mode == _NATIVE:
        r = math.sqrt(np.float64(_axpy2_nrm2_ser(a, x, y, b, u, v)))
        if r < math.inf and r * r >= lo * v.size:
            return r
    else:
        _axpy2_ser(a, x, y, b, u, v)
    return _nrm2(mode, v, lo, step)


@njit(**JIT)
def _ratio(mode, x, y, u, w, step):
    """``(x . y) / (u . w)`` from scaled vectors (safenorm.safe_dot_ratio)."""
    num_e = 0
    for k in range(4):
        v = x if k == 0 else (y if k == 1 else (u if k == 2 else w))
        if v.size:
            bad, _ = _nonfinite(v)
            if bad:
                return math.nan
    ex, okx = _scale_exponent(x)
    ey, oky = _scale_exponent(y)
    eu, oku = _scale_exponent(u)
    ew, okw = _scale_exponent(w)
    sx = _scaled(x, ex, step) if okx else x.copy()
    sy = _scaled(y, ey, step) if oky else y.copy()
    su = _scaled(u, eu, step) if oku else u.copy()
    sw = _scaled(w, ew, step) if okw else w.copy()
    num = _dot(mode, sx, sy)
    den = _dot(mode, su, sw)
    if den != 0:
        q = num / den
    elif num == 0 or num != num:
        q = math.nan
    else:
        q = math.copysign(math.inf, num)
    if q != q or abs(q) == math.inf or q == 0:
        return q
    num_e = (ex if okx else 0) + (ey if oky else 0) - (eu if oku else 0) - (ew if okw else 0)
    return _ldexp(q, num_e)


@njit(**JIT)
def _cg_start(rnorm, rz, tol):
    """CG's flag before its first iteration (:func:`mpsolve.krylov.cg.cg_body`'s rule):
    ``0`` when ``||r|| <= tol`` (converged), ``-14`` when ``r . z`` is not finite, ``-12``
    when it is zero (``M`` not positive definite), else ``1`` (iterate)."""
    if rnorm <= tol:
        return 0
    if not (rz != 0 and math.isfinite(rz)):
        return -14 if not math.isfinite(rz) else -12
    return 1
