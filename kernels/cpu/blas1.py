"""Level-1 vector kernels on the CPU (Numba).

Every kernel takes raw 1-D arrays and scalars and writes its result in place
(house rules 6 and 7).  The same kernels serve complex vectors (the updates as they
are, the fused norm through :mod:`.field`, which compiles to the plain real expression
for real arrays); the complex dots ``x^H y`` keep their real and imaginary sums apart
(:func:`cdot`, :func:`cmdot`).  Each public function dispatches once on the length:
the parallel form (``prange``, both cores) for long vectors, the serial form
below :data:`PARALLEL_MIN`.  Vectors of one call share one dtype; the scalar
arguments are Python floats and are cast to that dtype inside the kernel.

The reductions here are the *native* ones (accumulating in the vectors' dtype,
reassociated so LLVM can vectorise); the compensated ones live in
:mod:`mpsolve.kernels.cpu.eft`.
"""
import numpy as np
from numba import njit, prange

from ._config import JIT, NATIVE_REDUCTION_MATH, PARALLEL_MIN
from .field import abs2
from ..registry import register

_VEC = [("float64",), ("float32",)]
_CVEC = [("complex128",), ("complex64",)]
#: The kernels written once for both fields (``field.abs2`` is ``x x`` for reals, ``|x|^2``
#: for complex numbers, resolved at compile time; the updates need nothing).
_ALLVEC = _VEC + _CVEC


# --- reductions -----------------------------------------------------------------

@njit(fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _dot_ser(x, y):
    s = x.dtype.type(0.0)  # accumulate in the vectors' dtype
    for i in range(x.size):
        s += x[i] * y[i]
    return s


@njit(parallel=True, fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _dot_par(x, y):
    s = x.dtype.type(0.0)
    for i in prange(x.size):
        s += x[i] * y[i]
    return s


@register("cpu", "dot", _VEC, mode="native")
def dot(x, y):
    """``x . y`` accumulated in the vectors' precision."""
    if x.size >= PARALLEL_MIN:
        return float(_dot_par(x, y))
    return float(_dot_ser(x, y))


@register("cpu", "nrm2", _VEC, mode="native")
def nrm2(x):
    """``||x||_2`` as ``sqrt(x . x)`` (no overflow scaling; inputs are checked finite)."""
    return float(np.sqrt(dot(x, x)))


# Complex x^H y keeps its real and imaginary sums in two real accumulators: a complex
# accumulator is not vectorised by LLVM (measured: 4.1 ms against 0.75 ms on 1M complex128
# entries, NumPy's vdot 0.7 ms), two real ones are.
#   conj(x_i) y_i = (xr yr + xi yi) + i (xr yi - xi yr)

@njit(inline="always", **JIT)
def _cdot_range(x, y, lo, hi):
    sr = x.real.dtype.type(0.0)          # the vectors' precision
    si = sr
    for i in range(lo, hi):
        a = x[i]
        b = y[i]
        sr += a.real * b.real + a.imag * b.imag
        si += a.real * b.imag - a.imag * b.real
    return sr, si


@njit(fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _cdot_ser(x, y):
    return _cdot_range(x, y, 0, x.size)


@njit(parallel=True, fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _cdot_par(x, y):
    sr = x.real.dtype.type(0.0)
    si = sr
    for i in prange(x.size):
        a = x[i]
        b = y[i]
        sr += a.real * b.real + a.imag * b.imag
        si += a.real * b.imag - a.imag * b.real
    return sr, si


@register("cpu", "dot", _CVEC, mode="native")
def cdot(x, y):
    """``x^H y`` (NumPy's ``vdot``) accumulated in the vectors' precision; a Python complex."""
    sr, si = (_cdot_par if x.size >= PARALLEL_MIN else _cdot_ser)(x, y)
    return complex(float(sr), float(si))


def real_view(x):
    """A complex vector as the real vector of its interleaved parts (no copy)."""
    return x.view(x.real.dtype)


@register("cpu", "nrm2", _CVEC, mode="native")
def cnrm2(x):
    """``||x||_2`` of a complex vector: the real norm of its ``2n`` parts."""
    return nrm2(real_view(x))


# --- updates ----------------------------------------------------------------------

@njit(**JIT)
def _axpy_ser(a, x, y):
    a = x.dtype.type(a)
    for i in range(x.size):
        y[i] += a * x[i]


@njit(parallel=True, **JIT)
def _axpy_par(a, x, y):
    a = x.dtype.type(a)
    for i in prange(x.size):
        y[i] += a * x[i]


@register("cpu", "axpy", _ALLVEC)
def axpy(a, x, y):
    """``y <- a x + y``."""
    (_axpy_par if x.size >= PARALLEL_MIN else _axpy_ser)(a, x, y)


@njit(**JIT)
def _xpay_ser(x, a, y):
    a = x.dtype.type(a)
    for i in range(x.size):
        y[i] = x[i] + a * y[i]


@njit(parallel=True, **JIT)
def _xpay_par(x, a, y):
    a = x.dtype.type(a)
    for i in prange(x.size):
        y[i] = x[i] + a * y[i]


@register("cpu", "xpay", _ALLVEC)
def xpay(x, a, y):
    """``y <- x + a y`` (CG's direction update ``p <- z + beta p``)."""
    (_xpay_par if x.size >= PARALLEL_MIN else _xpay_ser)(x, a, y)


@njit(**JIT)
def _axpby_ser(a, x, b, y):
    a = x.dtype.type(a)
    b = x.dtype.type(b)
    for i in range(x.size):
        y[i] = a * x[i] + b * y[i]


@njit(parallel=True, **JIT)
def _axpby_par(a, x, b, y):
    a = x.dtype.type(a)
    b = x.dtype.type(b)
    for i in prange(x.size):
        y[i] = a * x[i] + b * y[i]


@register("cpu", "axpby", _ALLVEC)
def axpby(a, x, b, y):
    """``y <- a x + b y``."""
    (_axpby_par if x.size >= PARALLEL_MIN else _axpby_ser)(a, x, b, y)


@njit(**JIT)
def _waxpy_ser(a, x, y, w):
    a = x.dtype.type(a)
    for i in range(x.size):
        w[i] = y[i] + a * x[i]


@njit(parallel=True, **JIT)
def _waxpy_par(a, x, y, w):
    a = x.dtype.type(a)
    for i in prange(x.size):
        w[i] = y[i] + a * x[i]


@register("cpu", "waxpy", _ALLVEC)
def waxpy(a, x, y, w):
    """``w <- a x + y`` (BiCGSTAB's ``s <- r - alpha v``)."""
    (_waxpy_par if x.size >= PARALLEL_MIN else _waxpy_ser)(a, x, y, w)


# CG's update and the norm of the new residual in one pass (reassociation is allowed
# in the sum only; the updates are rounded exactly as ``axpy2``'s).
@njit(fastmath={"reassoc"}, **JIT)
def _axpy2_nrm2_ser(a, x, y, b, u, v):
    a = x.dtype.type(a)
    b = x.dtype.type(b)
    s = abs2(v.dtype.type(0.0))      # real zero of v's precision
    for i in range(x.size):
        y[i] += a * x[i]
        t = v[i] + b * u[i]
        v[i] = t
        s += abs2(t)
    return s


@njit(parallel=True, fastmath={"reassoc"}, **JIT)
def _axpy2_nrm2_par(a, x, y, b, u, v):
    a = x.dtype.type(a)
    b = x.dtype.type(b)
    s = abs2(v.dtype.type(0.0))
    for i in prange(x.size):
        y[i] += a * x[i]
        t = v[i] + b * u[i]
        v[i] = t
        s += abs2(t)
    return s


@register("cpu", "axpy2_nrm2", _ALLVEC, mode="native")
def axpy2_nrm2(a, x, y, b, u, v):
    """``axpy2`` and then ``||v||_2`` of the updated ``v``, in one pass over the vectors
    (CG: ``x += alpha p; r -= alpha q; return ||r||``).  The norm as :func:`nrm2`."""
    s = (_axpy2_nrm2_par if x.size >= PARALLEL_MIN else _axpy2_nrm2_ser)(a, x, y, b, u, v)
    return float(np.sqrt(s))


@njit(**JIT)
def _axpy2_ser(a, x, y, b, u, v):
    a = x.dtype.type(a)
    b = x.dtype.type(b)
    for i in range(x.size):
        y[i] += a * x[i]
        v[i] += b * u[i]


@njit(parallel=True, **JIT)
def _axpy2_par(a, x, y, b, u, v):
    a = x.dtype.type(a)
    b = x.dtype.type(b)
    for i in prange(x.size):
        y[i] += a * x[i]
        v[i] += b * u[i]


@register("cpu", "axpy2", _ALLVEC)
def axpy2(a, x, y, b, u, v):
    """Two fused updates in one pass: ``y <- y + a x``; ``v <- v + b u``.

    CG's step 2 (Ginkgo's naming): ``x <- x + alpha p``; ``r <- r - alpha q``.
    """
    (_axpy2_par if x.size >= PARALLEL_MIN else _axpy2_ser)(a, x, y, b, u, v)


@njit(**JIT)
def _bicg_dir_ser(r, beta, omega, v, p):
    beta = r.dtype.type(beta)
    omega = r.dtype.type(omega)
    for i in range(r.size):
        p[i] = r[i] + beta * (p[i] - omega * v[i])


@njit(parallel=True, **JIT)
def _bicg_dir_par(r, beta, omega, v, p):
    beta = r.dtype.type(beta)
    omega = r.dtype.type(omega)
    for i in prange(r.size):
        p[i] = r[i] + beta * (p[i] - omega * v[i])


@register("cpu", "bicg_dir", _ALLVEC)
def bicg_dir(r, beta, omega, v, p):
    """BiCGSTAB's direction update ``p <- r + beta (p - omega v)`` in one pass."""
    (_bicg_dir_par if r.size >= PARALLEL_MIN else _bicg_dir_ser)(r, beta, omega, v, p)


@njit(**JIT)
def _copy_ser(x, out):
    for i in range(x.size):
        out[i] = x[i]


@njit(parallel=True, **JIT)
def _copy_par(x, out):
    for i in prange(x.size):
        out[i] = x[i]


@register("cpu", "copy", [("float64", "float64"), ("float32", "float32"),
                          ("float64", "float32"), ("float32", "float64"),
                          ("complex128", "complex128"), ("complex64", "complex64"),
                          ("complex128", "complex64"), ("complex64", "complex128")])
def copy(x, out):
    """``out <- x`` with the cast to ``out``'s dtype fused into the copy."""
    (_copy_par if x.size >= PARALLEL_MIN else _copy_ser)(x, out)


@njit(**JIT)
def _scal_ser(a, x):
    a = x.dtype.type(a)
    for i in range(x.size):
        x[i] *= a


@njit(parallel=True, **JIT)
def _scal_par(a, x):
    a = x.dtype.type(a)
    for i in prange(x.size):
        x[i] *= a


@register("cpu", "scal", _ALLVEC)
def scal(a, x):
    """``x <- a x`` (its own loop: ``axpby(0, x, a, x)`` gave ``0 * inf = nan``)."""
    (_scal_par if x.size >= PARALLEL_MIN else _scal_ser)(a, x)


@njit(**JIT)
def _dmul_ser(d, x, out):
    for i in range(x.size):
        out[i] = d[i] * x[i]


@njit(parallel=True, **JIT)
def _dmul_par(d, x, out):
    for i in prange(x.size):
        out[i] = d[i] * x[i]


@register("cpu", "dmul", [(dd, xx, oo) for f in (("float32", "float64"),
                                                  ("complex64", "complex128"))
                          for dd in f for xx in f for oo in f])
def dmul(d, x, out):
    """``out <- diag(d) x``, the casts fused (point Jacobi's apply).  Dtypes key ``(d, x, out)``."""
    (_dmul_par if x.size >= PARALLEL_MIN else _dmul_ser)(d, x, out)


@register("cpu", "lincomb", _ALLVEC)
def lincomb(V, y, k, out):
    """``out <- sum_{i<k} y_i V[i]`` (GMRES's update ``V_k y``); ``V`` holds one vector a row.

    A dense GEMV on the first ``k`` rows (BLAS through NumPy).
    """
    np.dot(np.asarray(y[:k], dtype=V.dtype), V[:k], out=out)


# --- several vectors at once (GMRES's classical Gram-Schmidt) ------------------------
# ``V`` holds one vector per row.  The columns are processed in chunks small enough for
# a chunk of ``w`` to stay in cache while the ``k`` rows stream past, so ``w`` is read
# from memory once per call instead of once per basis vector (what ``k`` separate
# dots or axpys would cost).

MCHUNK = 4096


@njit(fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _mdot_chunk(V, k, w, lo, hi, part):
    ws = w[lo:hi]                      # unit-stride views: LLVM vectorises the loops
    for i in range(k):
        vs = V[i, lo:hi]
        s = w.dtype.type(0.0)
        for j in range(hi - lo):
            s += vs[j] * ws[j]
        part[i] = s


@njit(fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _cmdot_chunk(V, k, w, lo, hi, part):
    """:func:`_mdot_chunk` for complex rows: real and imaginary sums kept apart (see
    :func:`_cdot_range`), ``part[i] = V[i, lo:hi]^H w[lo:hi]``."""
    for i in range(k):
        sr, si = _cdot_range(V[i], w, lo, hi)
        part[i] = sr + 1j * si


@njit(parallel=True, **JIT)
def _cmdot_par(V, k, w, out):
    n = w.size
    nch = (n + MCHUNK - 1) // MCHUNK
    parts = np.empty((nch, k), dtype=w.dtype)
    for c in prange(nch):
        lo = c * MCHUNK
        _cmdot_chunk(V, k, w, lo, min(lo + MCHUNK, n), parts[c])
    for i in range(k):
        s = w.dtype.type(0.0)
        for c in range(nch):
            s += parts[c, i]
        out[i] = s


@njit(**JIT)
def _cmdot_ser(V, k, w, out):
    _cmdot_chunk(V, k, w, 0, w.size, out)


@register("cpu", "mdot", _CVEC, mode="native")
def cmdot(V, k, w, out):
    """``out[i] <- V[i]^H w`` for ``i < k``, complex: :func:`mdot`'s chunking, the real and
    imaginary sums kept apart (vectorised); ``out`` complex128."""
    (_cmdot_par if w.size >= PARALLEL_MIN else _cmdot_ser)(V, k, w, out)


@njit(parallel=True, **JIT)
def _mdot_par(V, k, w, out):
    n = w.size
    nch = (n + MCHUNK - 1) // MCHUNK
    parts = np.empty((nch, k), dtype=w.dtype)
    for c in prange(nch):
        lo = c * MCHUNK
        _mdot_chunk(V, k, w, lo, min(lo + MCHUNK, n), parts[c])
    for i in range(k):
        s = w.dtype.type(0.0)
        for c in range(nch):
            s += parts[c, i]
        out[i] = s


@njit(**JIT)
def _mdot_ser(V, k, w, out):
    _mdot_chunk(V, k, w, 0, w.size, out)


@register("cpu", "mdot", _VEC, mode="native")
def mdot(V, k, w, out):
    """``out[i] <- V[i] . w`` for ``i < k`` (classical Gram-Schmidt's coefficients).

    ``out`` is an FP64 array of length >= ``k``; the sums are carried in ``w``'s dtype
    (complex vectors: :func:`cmdot`).
    """
    (_mdot_par if w.size >= PARALLEL_MIN else _mdot_ser)(V, k, w, out)


# maxpy takes four rows a pass: four memory streams in flight, ``w``'s chunk loaded and
# stored once for the four, with the roundings of one row a pass.  One row a pass took
# 1.4x the time at k >= 4 (n = 10^6, the machine's DRAM bandwidth; ``python -m pytest
# bench/bench_kernels.py -k "mdot or maxpy" --benchmark-only``).  mdot stays one row a
# pass: four rows change how LLVM splits each row's sum into vector lanes, so its bits,
# and GMRES's iterates after them, would move (0.7x the time; a compressed-basis cycle
# then noticed its lost basis a cycle later on one test matrix).

@njit(**JIT)
def _maxpy_chunk(V, k, h, w, lo, hi):
    """``w[lo:hi] -= sum_{i<k} h_i V[i, lo:hi]``, four rows a pass
    with the roundings of one row a pass: ``w_j <- w_j - a_i v_ij`` for ``i = 0, 1, ...`` in
    turn, each product and difference rounded to ``w``'s dtype (``a = h_i`` rounded to it),
    no contraction -- ``w_j`` is kept in a register across the four rows instead of stored
    and loaded again (the GPU's ``maxpy`` matches these bits)."""
    ws = w[lo:hi]
    dt = w.dtype.type
    i = 0
    while i + 4 <= k:
        a0, a1, a2, a3 = dt(h[i]), dt(h[i + 1]), dt(h[i + 2]), dt(h[i + 3])
        v0, v1, v2, v3 = V[i, lo:hi], V[i + 1, lo:hi], V[i + 2, lo:hi], V[i + 3, lo:hi]
        for j in range(hi - lo):
            ws[j] = (((ws[j] - a0 * v0[j]) - a1 * v1[j]) - a2 * v2[j]) - a3 * v3[j]
        i += 4
    while i < k:
        a = dt(h[i])
        vs = V[i, lo:hi]
        for j in range(hi - lo):
            ws[j] -= a * vs[j]
        i += 1


@njit(parallel=True, **JIT)
def _maxpy_par(V, k, h, w):
    n = w.size
    nch = (n + MCHUNK - 1) // MCHUNK
    for c in prange(nch):
        lo = c * MCHUNK
        _maxpy_chunk(V, k, h, w, lo, min(lo + MCHUNK, n))


@njit(**JIT)
def _maxpy_ser(V, k, h, w):
    _maxpy_chunk(V, k, h, w, 0, w.size)


@register("cpu", "maxpy", _ALLVEC)
def maxpy(V, k, h, w):
    """``w <- w - sum_{i<k} h_i V[i]`` (the projection step of classical Gram-Schmidt)."""
    (_maxpy_par if w.size >= PARALLEL_MIN else _maxpy_ser)(V, k, h, w)


# --- a compressed basis (CB-GMRES): basis rows in FP32, the working vectors in FP64 ------
# The chunked loops above, compiled for FP32 rows and FP64 vectors: each FP32 entry is
# widened exactly to FP64 in the register it is loaded into (no FP64 copy of a row is
# ever made; the sums are carried in w's dtype), so the basis costs 4 bytes an entry to
# read, and every product and sum is FP64.  Dtype key: (V's, w's).

_CB = [("float32", "float64")]


@register("cpu", "cb_mdot", _CB, mode="native")
def cb_mdot(V, k, w, out):
    """``out[i] <- V[i] . w`` for ``i < k``, ``V`` FP32, ``w`` FP64, products and sums FP64
    (:func:`mdot`'s kernels: their sums are carried in ``w``'s dtype)."""
    (_mdot_par if w.size >= PARALLEL_MIN else _mdot_ser)(V, k, w, out)


@register("cpu", "cb_maxpy", _CB)
def cb_maxpy(V, k, h, w):
    """``w <- w - sum_{i<k} h_i V[i]``, ``V`` FP32, ``w`` and ``h`` FP64 (FP64 arithmetic)."""
    (_maxpy_par if w.size >= PARALLEL_MIN else _maxpy_ser)(V, k, h, w)   # (FP64 h_i * widened row)


@njit(**JIT)
def _cb_lincomb_chunk(V, y, k, out, lo, hi):
    os_ = out[lo:hi]
    os_[:] = 0.0
    for i in range(k):
        a = y[i]
        vs = V[i, lo:hi]
        for j in range(hi - lo):
            os_[j] += a * np.float64(vs[j])


@njit(parallel=True, **JIT)
def _cb_lincomb_par(V, y, k, out):
    n = out.size
    nch = (n + MCHUNK - 1) // MCHUNK
    for c in prange(nch):
        lo = c * MCHUNK
        _cb_lincomb_chunk(V, y, k, out, lo, min(lo + MCHUNK, n))


@njit(**JIT)
def _cb_lincomb_ser(V, y, k, out):
    _cb_lincomb_chunk(V, y, k, out, 0, out.size)


@register("cpu", "cb_lincomb", _CB)
def cb_lincomb(V, y, k, out):
    """``out <- sum_{i<k} y_i V[i]``, ``V`` FP32, ``y`` and ``out`` FP64 (GMRES's ``V_k y``)."""
    (_cb_lincomb_par if out.size >= PARALLEL_MIN else _cb_lincomb_ser)(V, y, k, out)


# The same two passes returning ``||w||_2`` too (native FP64 sums): GMRES needs the norm of
# ``w`` before and after each projection, and ``w``'s chunk is in cache at that moment, so
# the norm costs no memory traffic (a separate ``nrm2`` reads 8 bytes an entry).

@njit(fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _wsq_chunk(w, lo, hi):
    ws = w[lo:hi]
    s = 0.0
    for j in range(hi - lo):
        s += ws[j] * ws[j]
    return s


@njit(parallel=True, **JIT)
def _cb_mdot_nrm2_par(V, k, w, out):
    n = w.size
    nch = (n + MCHUNK - 1) // MCHUNK
    parts = np.empty((nch, k), dtype=np.float64)
    sq = np.empty(nch, dtype=np.float64)
    for c in prange(nch):
        lo = c * MCHUNK
        hi = min(lo + MCHUNK, n)
        _mdot_chunk(V, k, w, lo, hi, parts[c])
        sq[c] = _wsq_chunk(w, lo, hi)
    for i in range(k):
        s = 0.0
        for c in range(nch):
            s += parts[c, i]
        out[i] = s
    s = 0.0
    for c in range(nch):
        s += sq[c]
    return s


@njit(**JIT)
def _cb_mdot_nrm2_ser(V, k, w, out):
    _mdot_chunk(V, k, w, 0, w.size, out)
    return _wsq_chunk(w, 0, w.size)


@register("cpu", "cb_mdot_nrm2", _CB, mode="native")
def cb_mdot_nrm2(V, k, w, out):
    """:func:`cb_mdot` and ``||w||_2`` (native FP64) in the same pass over ``w``."""
    f = _cb_mdot_nrm2_par if w.size >= PARALLEL_MIN else _cb_mdot_nrm2_ser
    return float(np.sqrt(f(V, k, w, out)))


@njit(parallel=True, **JIT)
def _cb_maxpy_nrm2_par(V, k, h, w):
    n = w.size
    nch = (n + MCHUNK - 1) // MCHUNK
    sq = np.empty(nch, dtype=np.float64)
    for c in prange(nch):
        lo = c * MCHUNK
        hi = min(lo + MCHUNK, n)
        _maxpy_chunk(V, k, h, w, lo, hi)
        sq[c] = _wsq_chunk(w, lo, hi)       # the updated chunk, still in cache
    s = 0.0
    for c in range(nch):
        s += sq[c]
    return s


@njit(**JIT)
def _cb_maxpy_nrm2_ser(V, k, h, w):
    _maxpy_chunk(V, k, h, w, 0, w.size)
    return _wsq_chunk(w, 0, w.size)


@register("cpu", "cb_maxpy_nrm2", _CB, mode="native")
def cb_maxpy_nrm2(V, k, h, w):
    """:func:`cb_maxpy`, then ``||w||_2`` of the updated ``w`` (native FP64), one pass."""
    f = _cb_maxpy_nrm2_par if w.size >= PARALLEL_MIN else _cb_maxpy_nrm2_ser
    return float(np.sqrt(f(V, k, h, w)))


@njit(**JIT)
def _cb_store_ser(a, x, out):
    for i in range(x.size):
        out[i] = np.float32(a * x[i])             # scaled in FP64, rounded once


@njit(parallel=True, **JIT)
def _cb_store_par(a, x, out):
    for i in prange(x.size):
        out[i] = np.float32(a * x[i])


@register("cpu", "cb_store", [("float64", "float32")])
def cb_store(a, x, out):
    """``out <- fl32(a x)``: ``x`` FP64 scaled in FP64, rounded once to FP32 (the basis)."""
    (_cb_store_par if x.size >= PARALLEL_MIN else _cb_store_ser)(float(a), x, out)


# --- set-up checks ---------------------------------------------------------------------

@njit(**JIT)
def _range_scan(v, big, tiny):
    has_big = False
    has_tiny = False
    for i in range(v.size):
        a = abs(v[i])
        if a > big:
            has_big = True
        elif a < tiny and a > 0.0:
            has_tiny = True
    return has_big, has_tiny


@register("cpu", "range_scan", _ALLVEC)
def range_scan(v, big, tiny):
    """``(any |v_i| > big, any 0 < |v_i| < tiny)`` in one pass (NaN counts as neither):
    whether demoting ``v`` could overflow or flush a nonzero to zero."""
    return _range_scan(v, big, tiny)
