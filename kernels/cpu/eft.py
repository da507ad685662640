"""Error-free transformations compiled for the CPU, and the compensated reductions.

The scalar EFTs (:func:`two_sum`, :func:`fast_two_sum`, :func:`two_prod`,
:func:`split`, :func:`two_prod_dekker` and the pair helpers) are not written
here: they are :mod:`mpsolve.kernels.eft`'s code objects, compiled by
:func:`mpsolve.kernels.eft.specialise` with the CPU primitives of
:mod:`mpsolve.kernels.cpu.intrin` (LLVM's ``llvm.fma``, the plain operators).
This module writes the reductions on top of them and registers them for the
``cpu`` device: ``sum``, ``dot``, ``nrm2`` and ``mdot`` in the ``compensated``
mode (and ``sum`` in the ``native`` one).

Reference: T. Ogita, S. M. Rump, S. Oishi, "Accurate sum and dot product",
SIAM J. Sci. Comput. 26(6):1955-1988, 2005 (ORO): Algorithm 4.4 ``Sum2`` ->
:func:`sum2`, Algorithm 5.3 ``Dot2`` -> :func:`dot2`.

Deviations from the paper
-------------------------
* Several independent ``(s, c)`` pairs.  A single running pair is one long
  dependency chain.  Dot2 (and the norms and multi-dots built on it) keeps
  ``_LANES = 32`` pairs, one per SIMD lane: element ``i`` of a range goes to lane
  ``i mod 32`` (:func:`_dot2_lanes`), a loop LLVM vectorises (vector FMA
  TwoProducts, vector TwoSums: 2.5-3x faster than the 4 unrolled scalar pairs it
  replaced, which stayed scalar because Numba runs without LLVM's SLP vectoriser);
  Sum2 keeps ``_NACC = 4`` pairs (unrolled).  The parallel kernels give every
  chunk of ``_CHUNK`` elements its own pairs.  The partial pairs are merged with
  :func:`two_sum` (high parts) and ordinary addition (low parts).  This is still
  an error-free transformation of the
  input vector followed by a floating-point sum of the error terms, so the
  bound of the paper holds (with the same ``gamma_n``)::

      |dot2(x, y) - x.y| <= u |x.y| + gamma_n^2 |x|.|y|,
      u = 2^-53 (FP64) or 2^-24 (FP32),  gamma_n = n u / (1 - n u),

  for ``sum2`` the same with ``x.y`` -> ``sum x`` and ``gamma_{n-1}``.
* The chunking depends on the length only, never on the thread count, so a
  result is bitwise reproducible for any ``NUMBA_NUM_THREADS``.
* FP32 inputs are accumulated as an FP32 pair (the *native* compensated
  scheme: ``u = 2^-24``, "as accurate as FP32 arithmetic with twice the
  precision, then rounded to FP32").  For FP32 data a plain FP64 accumulation
  is an alternative; it is not what this module does.
* No underflow or overflow, as in the paper (see :mod:`mpsolve.kernels.eft`).
  No input scaling is done by the norms.

Every kernel here is compiled *without* ``fastmath``: reassociation or
contraction lets LLVM "simplify" ``(a - (s - bb))`` to zero and destroys the
transformations (``tests/test_eft.py`` inspects the dispatchers and the IR).
The plain ``+=`` of the error terms below is safe on the CPU for the same
reason (no ``contract`` flag, and no product feeds them).

Numba's on-disk cache (``cache=True``) of the reductions is keyed on *this*
file: after editing :mod:`mpsolve.kernels.eft`, clear ``kernels/cpu/__pycache__``
(Numba does not track that dependency).
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from .. import eft as _eft
from ..registry import register
from . import intrin
from ._config import JIT, PARALLEL_MIN
from .intrin import add_rn, fma, mul_rn, sub_rn  # noqa: F401  (the CPU primitives)

__all__ = [
    "fma", "two_sum", "fast_two_sum", "two_prod", "two_prod_dekker", "split",
    "sum2", "dot2", "nrm2_compensated", "sum_native", "mdot2", "cb_mdot2",
    "cdot2", "cnrm2_compensated", "cmdot2",
]


def _pool():
    """Launch Numba's thread pool (once; a flag test after that).  ``_sum2_par``,
    ``_dot2_par`` and ``_nrm2_par`` are cached serial functions that call cached
    ``parallel=True`` ones: loaded from Numba's disk cache they do not launch the pool,
    and the first of them called in a process in which no parallel kernel had run called
    a null pointer (a segmentation fault; Numba issue 8578).  Launched here, at their
    first call, not at import: a process that forks after importing the kernels (a
    ``multiprocessing`` pool) must not hold a GNU OpenMP pool yet."""
    get_num_threads()


# Explicit: an EFT kernel must never get fastmath, whatever JIT grows into.
_EFT_JIT = dict(JIT, fastmath=False)

#: How the scalar EFTs are compiled.  Not ``inline="always"``: LLVM inlines them
#: into the reductions anyway (same code, same speed), while Numba-level inlining
#: re-types them at every call site (measured: +50% cold compile time of Dot2).
#: Not ``cache=True``: Numba's cache keys a function on its file, name and line,
#: not on the primitives bound into its globals, so two targets built from the
#: same code object would share (and overwrite) entries.  They are compiled on
#: their own only when a reduction is compiled or Python calls them.
_SCALAR_JIT = dict(nogil=True, fastmath=False, cache=False)

#: The scalar EFTs of :mod:`mpsolve.kernels.eft`, compiled for the CPU.
_T = _eft.specialise(njit(**_SCALAR_JIT), intrin, module=__name__)

two_sum = _T.two_sum
fast_two_sum = _T.fast_two_sum
two_prod = _T.two_prod
split = _T.split
two_prod_dekker = _T.two_prod_dekker
_round_pair = _T._round_pair
_merge4 = _T._merge4
_sqrt_pair = _T._sqrt_pair

#: Independent (s, c) accumulator pairs of Sum2 (unrolled by hand).
_NACC = 4
#: Independent (p, s) pairs ("lanes") of Dot2, one SIMD lane each (:func:`_dot2_lanes`):
#: 32 = 8 AVX2 registers of FP64 (4 of FP32 at 8 a register), enough for the adds' latency.
_LANES = 32
#: Elements per chunk of the parallel kernels (fixed: reproducible results).
_CHUNK = 8192


# --- Sum2 (Algorithm 4.4) -----------------------------------------------------------

@njit(**_EFT_JIT)
def _sum2_pair_range(x, lo, hi):
    """Sum2 of ``x[lo:hi]`` with 4 independent pairs; returns the pair ``(s, c)``."""
    z = x.dtype.type(0.0)
    s0 = z; s1 = z; s2 = z; s3 = z
    c0 = z; c1 = z; c2 = z; c3 = z
    i = lo
    stop4 = lo + ((hi - lo) // 4) * 4
    while i < stop4:
        s0, q0 = two_sum(s0, x[i])       # s + q == old s + x_i
        s1, q1 = two_sum(s1, x[i + 1])
        s2, q2 = two_sum(s2, x[i + 2])
        s3, q3 = two_sum(s3, x[i + 3])
        c0 += q0                         # c collects the rounding errors
        c1 += q1
        c2 += q2
        c3 += q3
        i += 4
    while i < hi:
        s0, q0 = two_sum(s0, x[i])
        c0 += q0
        i += 1
    return _merge4(s0, s1, s2, s3, c0, c1, c2, c3)


@njit(**_EFT_JIT)
def _sum2_ser(x):
    s, c = _sum2_pair_range(x, 0, x.size)
    return _round_pair(s, c)             # res = fl(s + c)


@njit(parallel=True, **_EFT_JIT)
def _sum2_pair_par(x, chunk):
    n = x.size
    nchunk = (n + chunk - 1) // chunk
    ps = np.empty(nchunk, dtype=x.dtype)
    pc = np.empty(nchunk, dtype=x.dtype)
    for k in prange(nchunk):
        lo = k * chunk
        ps[k], pc[k] = _sum2_pair_range(x, lo, min(lo + chunk, n))
    z = x.dtype.type(0.0)
    s = z
    c = z
    for k in range(nchunk):              # combine the chunks' pairs in order
        s, q = two_sum(s, ps[k])
        c += pc[k] + q
    return s, c


@njit(**_EFT_JIT)
def _sum2_par(x, chunk):
    s, c = _sum2_pair_par(x, chunk)
    return _round_pair(s, c)


def sum2(x):
    """Compensated sum, ORO 2005 Algorithm 4.4 (Sum2).

    As accurate as summing in twice the working precision and rounding:
    ``|sum2(x) - sum(x)| <= u |sum(x)| + gamma_{n-1}^2 sum|x|``.

    Parameters
    ----------
    x : ndarray, float64 or float32, 1-D contiguous
        FP32 is summed as an FP32 pair (``u = 2^-24``).

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> from mpsolve.kernels.cpu.eft import sum2
    >>> x = np.array([1.0, 1e-16, -1.0])
    >>> sum2(x), float(np.sum(x))
    (1e-16, 0.0)
    """
    if x.size >= PARALLEL_MIN:
        _pool()
        return float(_sum2_par(x, _CHUNK))
    return float(_sum2_ser(x))


@register("cpu", "sum", [("float64",), ("float32",)], mode="native")
def sum_native(x):
    """``sum(x)`` accumulated in the vector's dtype (NumPy's pairwise sum)."""
    return float(np.sum(x))


register("cpu", "sum", [("float64",), ("float32",)], mode="compensated")(sum2)


# --- Dot2 (Algorithm 5.3) -----------------------------------------------------------

@njit(**_EFT_JIT)
def _dot2_lanes(X, Y, P, S):
    """Dot2 over the rows of ``X`` and ``Y`` (both ``(m, L)``), one ``(p, s)`` pair per
    column ("lane") kept in ``P[l], S[l]``: ``P[l] + S[l]`` collects ``X[:, l] . Y[:, l]``.

    The lanes are independent, so the inner loop has no loop-carried chain and LLVM's loop
    vectoriser runs it ``L`` lanes at a time on SIMD registers (Numba leaves the SLP
    vectoriser off, so unrolled scalar pairs stay scalar: 2.5-3x slower here).  Where ``L``
    is a small compile-time constant LLVM may unroll the loop fully instead of vectorising
    it: ``tests/test_eft.py`` checks the vector FMA in the kernels that call this one."""
    m, L = X.shape
    for j in range(m):
        xr = X[j]
        yr = Y[j]
        for l in range(L):
            h, r = two_prod(xr[l], yr[l])        # h + r == x_i y_i
            p, q = two_sum(P[l], h)              # p + q == old p + h
            P[l] = p
            S[l] += q + r                        # s collects both errors


@njit(**_EFT_JIT)
def _merge_lanes(P, S, p, s):
    """``(p, s)`` with the lanes' pairs added: high parts error-free, errors to ``s``."""
    for l in range(P.size):
        p, q = two_sum(p, P[l])
        s += S[l] + q
    return p, s


@njit(**_EFT_JIT)
def _dot2_pair_buf(x, y, lo, hi, P, S):
    """Dot2 of ``x[lo:hi] . y[lo:hi]`` with ``P.size`` independent pairs (vectorised,
    :func:`_dot2_lanes`; ``P``, ``S``: scratch of that length, in ``y``'s dtype -- an FP32
    ``x`` is widened exactly); returns the pair ``(p, s)``."""
    lanes = P.size
    P[:] = 0.0
    S[:] = 0.0
    m = (hi - lo) // lanes
    cut = lo + m * lanes
    _dot2_lanes(x[lo:cut].reshape(m, lanes), y[lo:cut].reshape(m, lanes), P, S)
    z = y.dtype.type(0.0)
    p, s = _merge_lanes(P, S, z, z)
    for i in range(cut, hi):                     # the tail, < lanes elements
        h0, r0 = two_prod(x[i], y[i])
        p, q0 = two_sum(p, h0)
        s += q0 + r0
    return p, s


@njit(**_EFT_JIT)
def _dot2_pair_range(x, y, lo, hi):
    """Dot2 of ``x[lo:hi] . y[lo:hi]`` with :data:`_LANES` pairs; returns ``(p, s)``."""
    buf = np.empty((2, _LANES), dtype=y.dtype)
    return _dot2_pair_buf(x, y, lo, hi, buf[0], buf[1])


@njit(**_EFT_JIT)
def _dot2_pair_ser(x, y):
    return _dot2_pair_range(x, y, 0, x.size)


@njit(parallel=True, **_EFT_JIT)
def _dot2_pair_par(x, y, chunk):
    n = x.size
    nchunk = (n + chunk - 1) // chunk
    pp = np.empty(nchunk, dtype=x.dtype)
    ps = np.empty(nchunk, dtype=x.dtype)
    for k in prange(nchunk):                     # each chunk: its own Dot2 pairs
        lo = k * chunk
        pp[k], ps[k] = _dot2_pair_range(x, y, lo, min(lo + chunk, n))
    z = x.dtype.type(0.0)
    p = z
    s = z
    for k in range(nchunk):                      # merge: p + q == old p + pp_k
        p, q = two_sum(p, pp[k])
        s += ps[k] + q
    return p, s


@njit(**_EFT_JIT)
def _dot2_ser(x, y):
    p, s = _dot2_pair_range(x, y, 0, x.size)
    return _round_pair(p, s)


@njit(**_EFT_JIT)
def _dot2_par(x, y, chunk):
    p, s = _dot2_pair_par(x, y, chunk)
    return _round_pair(p, s)


def dot2(x, y):
    """Compensated dot product, ORO 2005 Algorithm 5.3 (Dot2).

    As accurate as the dot product in twice the working precision, rounded::

        |dot2(x, y) - x.y| <= u |x.y| + gamma_n^2 |x|.|y|

    Same signature as the native ``dot`` of :mod:`mpsolve.kernels.cpu.blas1`;
    registered as ``("cpu", "dot", dtype, "compensated")``.

    Parameters
    ----------
    x, y : ndarray, 1-D contiguous, same length and dtype (float64 or float32)
        FP32 vectors are accumulated as an FP32 pair (``u = 2^-24``).

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> from mpsolve.kernels.cpu.eft import dot2
    >>> x = np.array([1e16, 1.0, -1e16]); y = np.ones(3)
    >>> dot2(x, y), float(np.dot(x, y))
    (1.0, 0.0)
    """
    _check_pair(x, y, "dot2")
    if x.size >= PARALLEL_MIN:
        _pool()
        return float(_dot2_par(x, y, _CHUNK))
    return float(_dot2_ser(x, y))


def _check_pair(x, y, what):
    """``x`` and ``y`` of one shape and dtype (the kernels read ``x.size`` entries of
    both and accumulate in ``y``'s dtype: a shorter ``x`` cut ``y`` silently, an FP32
    ``y`` made an FP64 ``x``'s sum FP32)."""
    if x.shape != y.shape or x.dtype != y.dtype:
        raise ValueError(f"{what}: x and y must have one shape and dtype, got "
                         f"{x.shape} {x.dtype} and {y.shape} {y.dtype}")


@njit(**_EFT_JIT)
def _nrm2_ser(x):
    p, s = _dot2_pair_range(x, x, 0, x.size)
    return _sqrt_pair(p, s)


@njit(**_EFT_JIT)
def _nrm2_par(x, chunk):
    p, s = _dot2_pair_par(x, x, chunk)
    return _sqrt_pair(p, s)


def nrm2_compensated(x):
    """``||x||_2`` from the Dot2 pair of ``x . x``.

    ``x . x`` is kept as the unrounded pair ``(p, s)``; the root is
    ``r = sqrt(p)`` corrected by one Newton step whose residual
    ``p - r^2`` comes exactly from an FMA: ``r + (fma(-r, r, p) + s) / (2 r)``.
    The result is within about one ulp of the exact norm (no overflow scaling:
    ``x . x`` must not overflow, as for the native ``nrm2``).

    Examples
    --------
    >>> import numpy as np
    >>> from mpsolve.kernels.cpu.eft import nrm2_compensated
    >>> nrm2_compensated(np.array([3.0, 4.0]))
    5.0
    """
    if x.size >= PARALLEL_MIN:
        _pool()
        return float(_nrm2_par(x, _CHUNK))
    return float(_nrm2_ser(x))


_VEC = [("float64",), ("float32",)]
register("cpu", "dot", _VEC, mode="compensated")(dot2)
register("cpu", "nrm2", _VEC, mode="compensated")(nrm2_compensated)


# --- complex Dot2: x^H y from the real EFTs on the real and imaginary parts --------------
# conj(x_i) y_i = (xr yr + xi yi) + i (xr yi - xi yr): each part of x^H y is a real dot
# product of 2n terms, and Dot2 runs on the four real products of every element (two
# TwoProducts into the real pair, two into the imaginary pair).  Each part then meets the
# bound of :func:`dot2` with n -> 2n, and (sum |xr yr| + |xi yi| <= |x_i| |y_i|, likewise
# for the imaginary terms) the complex result
#     |cdot2(x, y) - x^H y| <= u |x^H y| + sqrt(2) gamma_{2n}^2 sum |x_i| |y_i|.

@njit(**_EFT_JIT)
def _cdot2_pairs_range(x, y, lo, hi):
    """Dot2 of ``x[lo:hi]^H y[lo:hi]`` (complex): ``(re_p, re_s, im_p, im_s)``."""
    z = x.real.dtype.type(0.0)                   # a real zero of x's precision
    rp = z; rs = z; ip = z; is_ = z
    for i in range(lo, hi):
        xr = x[i].real; xi = x[i].imag
        yr = y[i].real; yi = y[i].imag
        h0, r0 = two_prod(xr, yr)                # h + r == xr yr
        h1, r1 = two_prod(xi, yi)
        h2, r2 = two_prod(xr, yi)
        h3, r3 = two_prod(-xi, yr)
        rp, q0 = two_sum(rp, h0)                 # real part: + xr yr + xi yi
        rp, q1 = two_sum(rp, h1)
        ip, q2 = two_sum(ip, h2)                 # imaginary part: + xr yi - xi yr
        ip, q3 = two_sum(ip, h3)
        rs += (q0 + r0) + (q1 + r1)
        is_ += (q2 + r2) + (q3 + r3)
    return rp, rs, ip, is_


@njit(parallel=True, **_EFT_JIT)
def _cdot2_par(x, y, chunk):
    n = x.size
    nchunk = (n + chunk - 1) // chunk
    parts = np.empty((nchunk, 4), dtype=x.real.dtype)
    for k in prange(nchunk):
        lo = k * chunk
        a, b, c, d = _cdot2_pairs_range(x, y, lo, min(lo + chunk, n))
        parts[k, 0] = a
        parts[k, 1] = b
        parts[k, 2] = c
        parts[k, 3] = d
    z = parts.dtype.type(0.0)
    rp = z; rs = z; ip = z; is_ = z
    for k in range(nchunk):                      # merge in order: p + q == old p + part
        rp, q = two_sum(rp, parts[k, 0])
        rs += parts[k, 1] + q
        ip, q = two_sum(ip, parts[k, 2])
        is_ += parts[k, 3] + q
    return _round_pair(rp, rs), _round_pair(ip, is_)


@njit(**_EFT_JIT)
def _cdot2_ser(x, y):
    rp, rs, ip, is_ = _cdot2_pairs_range(x, y, 0, x.size)
    return _round_pair(rp, rs), _round_pair(ip, is_)


def cdot2(x, y):
    """Compensated ``x^H y`` of complex vectors: Dot2 on the real and the imaginary part,
    from TwoProduct/TwoSum on the four real products of each element (see above)::

        |cdot2(x, y) - x^H y| <= u |x^H y| + sqrt(2) gamma_{2n}^2 sum |x_i| |y_i|

    (each part separately: ``u |part| + gamma_{2n}^2 sum |x_i| |y_i|``).  Complex64 is
    accumulated as FP32 pairs (``u = 2^-24``).  Returns a Python complex.

    Examples
    --------
    >>> import numpy as np
    >>> from mpsolve.kernels.cpu.eft import cdot2
    >>> x = np.array([1e16, 1 + 1j, -1e16]); y = np.ones(3, complex)
    >>> cdot2(x, y), complex(np.vdot(x, y))       # conj(x) . y = 1 - 1j
    ((1-1j), -1j)
    """
    _check_pair(x, y, "cdot2")
    if x.size >= PARALLEL_MIN:
        re, im = _cdot2_par(x, y, _CHUNK)
    else:
        re, im = _cdot2_ser(x, y)
    return complex(float(re), float(im))


def cnrm2_compensated(x):
    """``||x||_2`` of a complex vector: :func:`nrm2_compensated` of its ``2n`` real parts."""
    return nrm2_compensated(x.view(x.real.dtype))


def cmdot2(V, k, w, out):
    """Compensated ``out[i] <- V[i]^H w`` for ``i < k``, complex (:func:`cdot2` per row)."""
    for i in range(k):
        out[i] = cdot2(V[i], w)


_CVEC = [("complex128",), ("complex64",)]
register("cpu", "dot", _CVEC, mode="compensated")(cdot2)
register("cpu", "nrm2", _CVEC, mode="compensated")(cnrm2_compensated)
register("cpu", "mdot", _CVEC, mode="compensated")(cmdot2)


# --- Dot2 of several vectors with one (classical Gram-Schmidt) ----------------------

_MCHUNK = 4096


@njit(parallel=True, **_EFT_JIT)
def _mdot2_pairs_par(V, k, w, chunk):
    n = w.size
    nch = (n + chunk - 1) // chunk
    pp = np.empty((nch, k), dtype=w.dtype)
    ps = np.empty((nch, k), dtype=w.dtype)
    for c in prange(nch):                        # each chunk: Dot2 pairs of all k rows
        lo = c * chunk
        hi = min(lo + chunk, n)
        buf = np.empty((2, _LANES), dtype=w.dtype)   # the lanes' pairs, reused by the rows
        for i in range(k):
            pp[c, i], ps[c, i] = _dot2_pair_buf(V[i], w, lo, hi, buf[0], buf[1])
    return pp, ps


@njit(**_EFT_JIT)
def _mdot2_merge(pp, ps, k, out):
    z = pp.dtype.type(0.0)
    for i in range(k):
        p = z
        s = z
        for c in range(pp.shape[0]):             # p + q == old p + pp_c
            p, q = two_sum(p, pp[c, i])
            s += ps[c, i] + q
        out[i] = _round_pair(p, s)


@njit(**_EFT_JIT)
def _mdot2_ser(V, k, w, out):
    buf = np.empty((2, _LANES), dtype=w.dtype)
    for i in range(k):
        p, s = _dot2_pair_buf(V[i], w, 0, w.size, buf[0], buf[1])
        out[i] = _round_pair(p, s)


def mdot2(V, k, w, out):
    """Compensated ``out[i] <- V[i] . w`` for ``i < k`` (Dot2 of each row, one pass over ``w``
    per chunk); same error bound as :func:`dot2` for each coefficient.  An FP32 ``V`` with
    an FP64 ``w`` (the compressed basis, :func:`cb_mdot2`) is widened exactly, the pairs
    kept in FP64."""
    if w.size >= PARALLEL_MIN:
        pp, ps = _mdot2_pairs_par(V, k, w, _MCHUNK)
        _mdot2_merge(pp, ps, k, out)
    else:
        _mdot2_ser(V, k, w, out)


register("cpu", "mdot", [("float64",), ("float32",)], mode="compensated")(mdot2)


# --- Dot2 of FP32 basis rows with an FP64 vector (compressed-basis GMRES) ---------------
# Each FP32 entry is widened exactly to FP64 (:func:`_dot2_pair_range` keeps its pairs in
# w's dtype); the product with an FP64 entry is not exact in FP64, so it goes through
# TwoProduct as in Dot2: the bound of :func:`dot2` with u = 2^-53 holds for the widened rows.

def cb_mdot2(V, k, w, out):
    """Compensated ``out[i] <- V[i] . w`` for ``i < k``, ``V`` FP32 (the compressed basis),
    ``w`` FP64: Dot2 in FP64 of each widened row, the bound of :func:`dot2` (``u = 2^-53``)."""
    mdot2(V, k, w, out)


register("cpu", "cb_mdot", [("float32", "float64")], mode="compensated")(cb_mdot2)
