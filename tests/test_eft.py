"""Tests of the EFTs (kernels/eft.py, compiled for the CPU in kernels/cpu/eft.py with
the compensated reductions) against exact arithmetic (fractions.Fraction).

The accuracy claims are those of Ogita, Rump & Oishi, "Accurate sum and dot
product", SIAM J. Sci. Comput. 26(6), 2005 (ORO):

* TwoSum / TwoProduct: ``s + e == a + b`` and ``p + e == a * b`` *exactly*.
* Dot2 (Alg. 5.3), Prop. 5.5 / Cor. 5.6::

      |dot2(x, y) - x.y| <= u |x.y| + gamma_n^2 |x|.|y|

* Sum2 (Alg. 4.4), Prop. 4.5 / Cor. 4.7::

      |sum2(x) - sum x| <= u |sum x| + gamma_{n-1}^2 sum |x|

with ``u = 2^-53`` (FP64) or ``2^-24`` (FP32) and ``gamma_n = n u / (1 - n u)``.
Ill-conditioned data come from ORO's generator GenDot (Alg. 6.1), below; the
tests also show the *plain* dot violating the Dot2 bound on the hardest cases,
so the bound is a real check.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal, getcontext
from fractions import Fraction

import numba
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from mpsolve.kernels import eft as py_eft, lookup, reference as ref
from mpsolve.kernels.cpu import blas1, eft, intrin

U = {np.float64: 2.0**-53, np.float32: 2.0**-24}
F64_MAX = np.finfo(np.float64).max
F32_MAX = float(np.finfo(np.float32).max)


# --- generators -----------------------------------------------------------------------

def gen_dot(n, cond, rng, dtype=np.float64, xdtype=None):
    """ORO 2005, Algorithm 6.1 (GenDot): ``x, y`` of length ``n`` whose dot
    product has condition number ``2 |x|.|y| / |x.y|`` of about ``cond``.

    The first half gets random exponents in ``[0, b/2]`` (``b = log2 cond``,
    the first one ``b/2 + 1``, the last 0); the second half's exponents fall
    linearly from ``b/2`` to 0 and each ``y_i`` is chosen so that the running
    dot product (kept exactly, as a Fraction) nearly cancels.  Returns
    ``x, y, exact (Fraction), achieved condition number``.  ``xdtype``: ``x`` in
    another dtype than ``y`` (an FP32 basis row against an FP64 vector).
    """
    dt = np.dtype(dtype).type
    n2 = n // 2
    b = math.log2(cond)
    x = np.zeros(n, dtype=xdtype or dt)
    y = np.zeros(n, dtype=dt)
    e = np.rint(rng.random(n2) * b / 2)
    e[0] = round(b / 2) + 1
    e[-1] = 0
    x[:n2] = (2 * rng.random(n2) - 1) * 2.0**e
    y[:n2] = (2 * rng.random(n2) - 1) * 2.0**e
    acc = ref.exact_dot(x[:n2], y[:n2])
    e = np.rint(np.linspace(b / 2, 0, n - n2))
    for i in range(n2, n):
        x[i] = (2 * rng.random() - 1) * 2.0**e[i - n2]
        y[i] = ((2 * rng.random() - 1) * 2.0**e[i - n2] - float(acc)) / float(x[i])
        acc += Fraction(float(x[i])) * Fraction(float(y[i]))
    perm = rng.permutation(n)
    x, y = np.ascontiguousarray(x[perm]), np.ascontiguousarray(y[perm])
    absdot = ref.exact_dot(np.abs(x), np.abs(y))
    c = float(2 * absdot / abs(acc)) if acc != 0 else math.inf
    return x, y, acc, c


def dot2_bound(exact, absdot, n, u):
    """ORO Cor. 5.6: ``u |x.y| + gamma_n^2 |x|.|y|`` (exact Fractions in, Fraction out)."""
    g = ref.gamma(n, u)
    return Fraction(u) * abs(exact) + Fraction(g * g) * (1 + Fraction(4 * u)) * absdot


def err(res, exact):
    return abs(Fraction(float(res)) - exact)


CONDS64 = [1e10, 1e16, 1e20, 1e25, 1e30]
CONDS32 = [1e4, 1e7, 1e10, 1e14]


@pytest.fixture
def force_parallel(monkeypatch):
    """Send every length through the parallel (chunked) kernels, in small chunks."""
    monkeypatch.setattr(eft, "PARALLEL_MIN", 0)
    monkeypatch.setattr(eft, "_CHUNK", 16)


# --- FMA --------------------------------------------------------------------------------

def test_fma_is_fused():
    a, b = 1 + 2.0**-30, 1 - 2.0**-30
    assert a * b - 1.0 == 0.0                          # separate multiply and add: wrong
    assert eft.fma(a, b, -1.0) == -2.0**-60            # one rounding: exact
    a32, b32 = np.float32(1 + 2.0**-15), np.float32(1 - 2.0**-15)
    assert np.float32(a32 * b32) - np.float32(1) == 0
    r32 = eft.fma(a32, b32, np.float32(-1))
    assert float(np.float32(r32)) == r32 == -2.0**-30   # an FP32 value (boxed as float)


def test_fma_random_matches_exact():
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((3, 200))
    for ai, bi, ci in zip(a, b, c):
        exact = Fraction(ai) * Fraction(bi) + Fraction(ci)
        assert eft.fma(ai, bi, ci) == float(exact)     # float(Fraction) rounds to nearest


# --- two_sum / fast_two_sum --------------------------------------------------------------

EDGE64 = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, -2.225073858507201e-308,
          1.0, -1.0, 1 + 2.0**-52, 1 - 2.0**-53, 2.0**-60, 3.0, 1 / 3, -0.1, 2.0**52,
          2.0**53 + 2, 1e16, -1e16, 1e300, -1e300, 2.0**1023, -2.0**1023,
          float(F64_MAX), -float(F64_MAX), float(F64_MAX) / 3, 2.0**970, 2.0**-1022,
          2.0**-1074 * 3]


def _check_two_sum(a, b, s, e):
    assert s == a + b                                  # s is the rounded sum
    assert Fraction(s) + Fraction(e) == Fraction(a) + Fraction(b)


@pytest.mark.parametrize("a", EDGE64)
def test_two_sum_edge_cases_exact(a):
    for b in EDGE64:
        if not math.isfinite(a + b):
            continue
        s, e = eft.two_sum(a, b)
        _check_two_sum(a, b, s, e)
        if abs(a) >= abs(b):
            s2, e2 = eft.fast_two_sum(a, b)
            assert (s2, e2) == (s, e) or Fraction(s2) + Fraction(e2) == Fraction(a) + Fraction(b)


def test_two_sum_signed_zeros():
    s, e = eft.two_sum(-0.0, -0.0)
    assert s == 0 and math.copysign(1, s) == -1        # -0 + -0 == -0
    s, e = eft.two_sum(0.0, -0.0)
    assert s == 0 and e == 0 and math.copysign(1, s) == 1


def test_two_sum_random_exact():
    rng = np.random.default_rng(1)
    a = rng.standard_normal(500) * 2.0 ** rng.integers(-60, 60, 500)
    b = rng.standard_normal(500) * 2.0 ** rng.integers(-60, 60, 500)
    for ai, bi in zip(a, b):
        _check_two_sum(ai, bi, *eft.two_sum(ai, bi))


def test_fast_two_sum_needs_ordering():
    # |a| < |b| breaks FastTwoSum, TwoSum stays exact: the precondition is real
    a, b = 2.0**-60, 1.0 + 2.0**-52
    s, e = eft.fast_two_sum(a, b)
    assert Fraction(s) + Fraction(e) != Fraction(a) + Fraction(b)
    _check_two_sum(a, b, *eft.two_sum(a, b))


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False),
       st.floats(allow_nan=False, allow_infinity=False))
def test_two_sum_property(a, b):
    assume(math.isfinite(a + b))
    _check_two_sum(a, b, *eft.two_sum(a, b))
    if abs(a) >= abs(b):
        s, e = eft.fast_two_sum(a, b)
        assert Fraction(s) + Fraction(e) == Fraction(a) + Fraction(b)


@settings(max_examples=200, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False),
       st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_two_sum_property_f32(a, b):
    a, b = np.float32(a), np.float32(b)
    with np.errstate(over="ignore"):
        assume(np.isfinite(a + b))
    s, e = eft.two_sum(a, b)
    assert np.float32(s) == s and np.float32(e) == e
    assert np.float32(s) == a + b
    assert Fraction(float(s)) + Fraction(float(e)) == Fraction(float(a)) + Fraction(float(b))


# --- two_prod ------------------------------------------------------------------------------

def _prod_in_domain(a, b, emin=-1022, p=53, big=F64_MAX):
    """TwoProduct is exact when the product is finite and its error cannot
    underflow: ``a*b == 0`` from a zero factor, or ``|a b| >= 2^(emin + p)``."""
    exact = Fraction(a) * Fraction(b)
    if a == 0 or b == 0:
        return True
    return abs(exact) <= big and abs(exact) >= Fraction(2) ** (emin + p)


def _check_two_prod(a, b, p, e):
    assert p == a * b
    assert Fraction(float(p)) + Fraction(float(e)) == Fraction(float(a)) * Fraction(float(b))


EDGE_PROD = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 3.0, 5.0, 1 / 3, 0.1, 1 + 2.0**-52,
             1 - 2.0**-53, 2.0**-500, 2.0**500, 1e150, -1e-150, 2.0**-1000 * 1.5,
             2.0**26 + 1, 2.0**27 - 1, 134217729.0, 9007199254740991.0]


@pytest.mark.parametrize("a", EDGE_PROD)
def test_two_prod_edge_cases_exact(a):
    for b in EDGE_PROD:
        if not _prod_in_domain(a, b):
            continue
        p, e = eft.two_prod(a, b)
        _check_two_prod(a, b, p, e)
        assert eft.two_prod_dekker(a, b) == (p, e)


def test_two_prod_exact_products_have_zero_error():
    # powers of two, and products that fit in 53 bits, have e == 0
    for a, b in [(2.0**-300, 2.0**200), (3.0, 5.0), (2.0**26 + 1, 2.0**26 - 1),
                 (-0.75, 1024.0)]:
        p, e = eft.two_prod(a, b)
        assert p == a * b and e == 0
    # 2^27 + 1 squared needs 55 bits: error 1
    assert eft.two_prod(2.0**27 + 1, 2.0**27 + 1) == (2.0**54 + 2.0**28, 1.0)


def test_two_prod_random_and_dekker_agree():
    rng = np.random.default_rng(2)
    a = rng.standard_normal(1000) * 2.0 ** rng.integers(-200, 200, 1000)
    b = rng.standard_normal(1000) * 2.0 ** rng.integers(-200, 200, 1000)
    for ai, bi in zip(a, b):
        p, e = eft.two_prod(ai, bi)
        _check_two_prod(ai, bi, p, e)
        assert eft.two_prod_dekker(ai, bi) == (p, e)
    a32 = rng.standard_normal(300).astype(np.float32)
    b32 = rng.standard_normal(300).astype(np.float32)
    for ai, bi in zip(a32, b32):
        p, e = eft.two_prod(ai, bi)
        assert np.float32(p) == p and np.float32(e) == e     # FP32 values
        _check_two_prod(ai, bi, p, e)
        assert eft.two_prod_dekker(ai, bi) == (p, e)


def test_split_halves():
    rng = np.random.default_rng(3)
    for a in rng.standard_normal(100) * 1e5:
        hi, lo = eft.split(a)
        assert hi + lo == a
        assert Fraction(hi) + Fraction(lo) == Fraction(a)
        # each half has at most 26 significant bits: its square is exact
        assert Fraction(hi * hi) == Fraction(hi) ** 2
        assert Fraction(lo * lo) == Fraction(lo) ** 2


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False),
       st.floats(allow_nan=False, allow_infinity=False))
def test_two_prod_property(a, b):
    assume(_prod_in_domain(a, b))
    p, e = eft.two_prod(a, b)
    _check_two_prod(a, b, p, e)
    if abs(a) < 2.0**995 and abs(b) < 2.0**995:
        assert eft.two_prod_dekker(a, b) == (p, e)


@settings(max_examples=200, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False),
       st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_two_prod_property_f32(a, b):
    assume(_prod_in_domain(a, b, emin=-126, p=24, big=F32_MAX))
    a, b = np.float32(a), np.float32(b)
    _check_two_prod(a, b, *eft.two_prod(a, b))


# --- no fastmath anywhere ---------------------------------------------------------------

def _eft_dispatchers():
    return {k: v for k, v in vars(eft).items()
            if isinstance(v, numba.core.registry.CPUDispatcher)}


def test_no_fastmath_in_eft_kernels():
    disps = _eft_dispatchers()
    assert {"two_sum", "two_prod", "fma", "_dot2_pair_range", "_dot2_pair_par",
            "_sum2_pair_range", "_sum2_pair_par"} <= set(disps)
    for name, d in disps.items():
        assert not d.targetoptions.get("fastmath"), name


_FAST_FLAGS = re.compile(r"\bf(add|sub|mul|div)\s+(fast|reassoc|contract|nnan|ninf|nsz|arcp|afn)\b")


def test_no_fast_math_flags_in_ir():
    # cached code cannot be inspected: recompile copies with the same options
    x = np.linspace(-1, 1, 37)
    for name in ("_dot2_pair_range", "_sum2_pair_range", "two_prod"):
        d = getattr(eft, name)
        opts = {k: v for k, v in d.targetoptions.items() if k not in ("cache", "nopython")}
        fresh = numba.njit(**opts)(d.py_func)
        if name == "_dot2_pair_range":
            fresh(x, x, 0, x.size)
        elif name == "_sum2_pair_range":
            fresh(x, 0, x.size)
        else:
            fresh(1.5, 2.5)
        llvm = fresh.inspect_llvm(fresh.signatures[0])
        assert not _FAST_FLAGS.search(llvm), name
        if name != "_sum2_pair_range":
            assert "llvm.fma.f64" in llvm, name


def test_dot2_lanes_vectorise():
    """Dot2's pairs are SIMD lanes (``_dot2_lanes``): LLVM's loop vectoriser turns the
    TwoProduct into a *vector* FMA (Numba leaves the SLP vectoriser off, so the unrolled
    scalar pairs it replaced stayed scalar), with no fast-math flag."""
    x, X = np.ones(100), np.ones((3, 100))
    # the lanes alone, and as the dot and the multi-dot use them (a fixed lane count there:
    # LLVM must still vectorise rather than unroll the lanes' loop)
    for name, args in (("_dot2_lanes", (X, X, np.zeros(100), np.zeros(100))),
                       ("_dot2_ser", (x, x)), ("_mdot2_ser", (X, 3, x, np.zeros(3)))):
        d = getattr(eft, name)
        opts = {k: v for k, v in d.targetoptions.items() if k not in ("cache", "nopython")}
        fresh = numba.njit(**opts)(d.py_func)
        fresh(*args)
        llvm = fresh.inspect_llvm(fresh.signatures[0])
        assert re.search(r"llvm\.fma\.v\d+f64", llvm), f"{name}: the lanes were not vectorised"
        assert not _FAST_FLAGS.search(llvm), name


# --- Dot2 -----------------------------------------------------------------------------------

def _check_dot2(x, y, exact, u):
    n = x.size
    absdot = ref.exact_dot(np.abs(x), np.abs(y))
    bound = dot2_bound(exact, absdot, n, u)
    res = eft.dot2(x, y)
    assert err(res, exact) <= bound, (err(res, exact), bound)
    return bound


@pytest.mark.parametrize("cond", CONDS64)
@pytest.mark.parametrize("n", [7, 100, 501])
def test_dot2_ill_conditioned_f64(cond, n):
    rng = np.random.default_rng(int(cond) % 1000 + n)
    x, y, exact, c = gen_dot(n, cond, rng)
    assert c > cond / 1e4                               # the generator did its job
    bound = _check_dot2(x, y, exact, U[np.float64])
    # native dot: fine while cond u << 1, useless beyond (the test has teeth)
    if cond >= 1e20:
        assert err(blas1.dot(x, y), exact) > bound
        assert err(float(np.dot(x, y)), exact) > bound


def test_dot2_as_good_as_double_double():
    # cond ~ 1e10 << 1/u: Dot2 is correctly rounded or within one ulp
    rng = np.random.default_rng(5)
    for _ in range(5):
        x, y, exact, _ = gen_dot(200, 1e10, rng)
        res = eft.dot2(x, y)
        assert err(res, exact) <= Fraction(math.ulp(float(exact)))


@pytest.mark.parametrize("cond", CONDS64)
def test_dot2_parallel_path_f64(cond, force_parallel):
    rng = np.random.default_rng(11)
    x, y, exact, _ = gen_dot(300, cond, rng)      # 19 chunks of 16
    _check_dot2(x, y, exact, U[np.float64])
    # chunk merge must not depend on chunk size beyond the bound; exact on easy data
    z = rng.integers(-8, 8, 300).astype(np.float64)
    assert eft.dot2(z, z) == float(np.dot(z, z))


def _recursive_dot(x, y):
    """The textbook dot in x's dtype: s = fl(s + fl(x_i y_i)), no FMA."""
    s = x.dtype.type(0)
    with np.errstate(all="ignore"):
        for a, b in zip(x, y):
            s = s + a * b
    return float(s)


def _long_ill_conditioned(m, cond, rng, dtype=np.float64):
    """A GenDot core plus ``m`` pairs ``(a, b), (a, -b)`` that cancel exactly."""
    x0, y0, exact, _ = gen_dot(64, cond, rng, dtype)
    b = math.log2(cond)
    a = ((2 * rng.random(m) - 1) * 2.0 ** np.rint(rng.random(m) * b / 2)).astype(dtype)
    c = ((2 * rng.random(m) - 1) * 2.0 ** np.rint(rng.random(m) * b / 2)).astype(dtype)
    x = np.concatenate([x0, a, a])
    y = np.concatenate([y0, c, -c])
    perm = rng.permutation(x.size)
    x, y = np.ascontiguousarray(x[perm]), np.ascontiguousarray(y[perm])
    # |x|.|y|, rounded up a little (fsum_dot is correctly rounded)
    absdot = Fraction(ref.fsum_dot(np.abs(x), np.abs(y))) * (1 + Fraction(2.0**-50))
    return x, y, exact, absdot


@pytest.mark.parametrize("cond", [1e16, 1e30])
def test_dot2_long_vectors_default_parallel(cond):
    rng = np.random.default_rng(13)
    m = max(eft.PARALLEL_MIN, 3 * eft._CHUNK) // 2 + 1000
    x, y, exact, absdot = _long_ill_conditioned(m, cond, rng)
    assert x.size >= eft.PARALLEL_MIN
    u = U[np.float64]
    bound = Fraction(u) * abs(exact) + Fraction(ref.gamma(x.size, u) ** 2) * 2 * absdot
    res = eft.dot2(x, y)
    assert err(res, exact) <= bound
    assert err(blas1.dot(x, y), exact) > bound
    # serial and parallel are the same algorithm on a different split: both in bound
    p, s = eft._dot2_pair_ser(x, y)
    assert err(p + s, exact) <= bound


@pytest.mark.parametrize("cond", CONDS32)
@pytest.mark.parametrize("parallel", [False, True])
def test_dot2_ill_conditioned_f32(cond, parallel, monkeypatch):
    if parallel:
        monkeypatch.setattr(eft, "PARALLEL_MIN", 0)
        monkeypatch.setattr(eft, "_CHUNK", 16)
    rng = np.random.default_rng(int(cond) % 997)
    x, y, exact, c = gen_dot(200, cond, rng, np.float32)
    assert x.dtype == np.float32
    bound = _check_dot2(x, y, exact, U[np.float32])
    if cond >= 1e10:
        assert err(_recursive_dot(x, y), exact) > bound
    # FP32 pair: the answer is a float32 value
    assert float(np.float32(eft.dot2(x, y))) == eft.dot2(x, y)


@pytest.mark.parametrize("cond", CONDS64)
@pytest.mark.parametrize("parallel", [False, True])
def test_cb_mdot2_ill_conditioned(cond, parallel, monkeypatch):
    """Compensated Gram-Schmidt coefficients on a compressed basis: FP32 rows against an
    FP64 vector meet Dot2's FP64 bound (u = 2^-53); the native FP64 sum does not."""
    if parallel:
        monkeypatch.setattr(eft, "PARALLEL_MIN", 0)
        monkeypatch.setattr(eft, "_MCHUNK", 16)
    rng = np.random.default_rng(int(cond) % 991)
    x, w, exact, c = gen_dot(120, cond, rng, np.float64, xdtype=np.float32)
    # row 0 nearly cancels against w; rows 1, 2 are ordinary FP32 rows
    V = np.stack([x] + [rng.standard_normal(w.size).astype(np.float32) for _ in range(2)])
    assert V.dtype == np.float32 and w.dtype == np.float64
    out = np.full(4, np.nan)
    lookup("cpu", "cb_mdot", ("float32", "float64"), "compensated")(V, 3, w, out)
    assert np.isnan(out[3])
    native = np.zeros(3)
    lookup("cpu", "cb_mdot", ("float32", "float64"), "native")(V, 3, w, native)
    for i in range(3):
        exact_i = ref.exact_dot(V[i], w)
        bound_i = dot2_bound(exact_i, ref.exact_dot(np.abs(V[i]), np.abs(w)), w.size,
                             U[np.float64])
        assert err(out[i], exact_i) <= bound_i, i
    bound = dot2_bound(exact, ref.exact_dot(np.abs(V[0]), np.abs(w)), w.size, U[np.float64])
    if cond >= 1e20:
        assert err(native[0], exact) > bound


@pytest.mark.parametrize("n", [31, 32, 33, 63, 64, 65, 97])
def test_dot2_across_lane_boundaries(n):
    """Lengths around multiples of the lane count: the vectorised body, the lanes' merge
    and the scalar tail together stay within Dot2's bound on ill-conditioned data."""
    assert eft._LANES == 32
    rng = np.random.default_rng(n)
    x, y, exact, _ = gen_dot(n, 1e28, rng)
    _check_dot2(x, y, exact, U[np.float64])
    assert err(eft.nrm2_compensated(x) ** 2, ref.exact_dot(x, x)) <= \
        4 * Fraction(U[np.float64]) * ref.exact_dot(x, x)


def test_dot2_small_lengths_exact():
    for n in (0, 1, 2, 3, 4, 5, 31):
        rng = np.random.default_rng(n)
        for dt in (np.float64, np.float32):
            x = rng.standard_normal(n).astype(dt)
            y = rng.standard_normal(n).astype(dt)
            exact = ref.exact_dot(x, y)
            res = eft.dot2(x, y)
            u = U[dt]
            assert err(res, exact) <= dot2_bound(exact, ref.exact_dot(np.abs(x), np.abs(y)), n, u)
    assert eft.dot2(np.zeros(0), np.zeros(0)) == 0.0


def test_dot2_nonfinite_propagates():
    x = np.array([1.0, np.inf, 2.0])
    assert math.isinf(eft.dot2(x, np.ones(3))) or math.isnan(eft.dot2(x, np.ones(3)))
    assert math.isnan(eft.dot2(np.array([1.0, np.nan]), np.ones(2)))


# --- Sum2 --------------------------------------------------------------------------------------

def _ill_sum(n, cond, rng, dtype=np.float64):
    """The error-free split ``[p; e]`` of a GenDot product: a sum as ill-conditioned."""
    x, y, exact, _ = gen_dot(n, cond, rng, np.float64)
    if dtype == np.float32:
        v = np.concatenate([x, -x * (1 + 2.0**-20), x * 2.0**-20]).astype(np.float32)
        v = v[rng.permutation(v.size)]
        return v, ref.exact_sum(v)
    p, e = ref.two_prod_exact(x, y)
    v = np.concatenate([p, e])
    v = np.ascontiguousarray(v[rng.permutation(v.size)])
    assert ref.exact_sum(v) == exact
    return v, exact


def _check_sum2(v, exact, u):
    n = v.size
    g = ref.gamma(max(n - 1, 0), u)
    bound = Fraction(u) * abs(exact) + Fraction(g * g) * (1 + Fraction(4 * u)) * ref.exact_sum(np.abs(v))
    res = eft.sum2(v)
    assert err(res, exact) <= bound, (err(res, exact), bound)
    return bound


@pytest.mark.parametrize("cond", CONDS64)
@pytest.mark.parametrize("parallel", [False, True])
def test_sum2_ill_conditioned_f64(cond, parallel, monkeypatch):
    if parallel:
        monkeypatch.setattr(eft, "PARALLEL_MIN", 0)
        monkeypatch.setattr(eft, "_CHUNK", 16)
    rng = np.random.default_rng(int(math.log10(cond)))
    v, exact = _ill_sum(150, cond, rng)
    bound = _check_sum2(v, exact, U[np.float64])
    if cond >= 1e20:
        assert err(float(np.sum(v)), exact) > bound
        assert err(sum(v.tolist()), exact) > bound


def test_sum2_f32_and_small():
    rng = np.random.default_rng(8)
    v, exact = _ill_sum(100, 1e12, rng, np.float32)
    _check_sum2(v, exact, U[np.float32])
    for n in (0, 1, 2, 5, 31):
        w = rng.standard_normal(n)
        assert eft.sum2(w) == ref.fsum_sum(w)
    assert eft.sum2(np.array([1.0, 1e-16, -1.0])) == 1e-16


def test_sum2_long_vector_default_parallel():
    rng = np.random.default_rng(9)
    n = eft.PARALLEL_MIN + 12345
    v = rng.standard_normal(n) * 2.0 ** rng.integers(-30, 30, n)
    v = np.concatenate([v, -v, [1.0, 2.0**-70]])
    v = v[rng.permutation(v.size)]
    assert eft.sum2(v) == 1.0 + 2.0**-70 or eft.sum2(v) == 1.0
    assert eft.sum2(v) == ref.fsum_sum(v)


# --- compensated nrm2 ------------------------------------------------------------------------

def _sqrt_exact(frac, prec=60):
    getcontext().prec = prec
    return Decimal(frac.numerator) / Decimal(frac.denominator)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [0, 1, 2, 31, 1000, 40000])
def test_nrm2_compensated_within_one_ulp(dtype, n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 2.0 ** rng.integers(-10, 10, n)).astype(dtype)
    s = ref.exact_dot(x, x) if n <= 1000 else Fraction(ref.fsum_dot(x, x))
    exact = _sqrt_exact(s).sqrt()
    res = eft.nrm2_compensated(x)
    ulp = np.spacing(dtype(res)) if res else np.finfo(dtype).smallest_subnormal
    assert abs(Decimal(res) - exact) <= Decimal(float(ulp)), (res, exact)


def test_nrm2_compensated_edge():
    assert eft.nrm2_compensated(np.zeros(5)) == 0.0
    assert eft.nrm2_compensated(np.array([3.0, 4.0])) == 5.0
    assert math.isinf(eft.nrm2_compensated(np.array([1e200, 1e200])))   # no scaling: x.x overflows
    assert math.isnan(eft.nrm2_compensated(np.array([1.0, np.nan])))


# --- registry -------------------------------------------------------------------------------------

def test_registered_compensated_kernels():
    for dt in ("float64", "float32"):
        assert lookup("cpu", "dot", (dt,), "compensated") is eft.dot2
        assert lookup("cpu", "nrm2", (dt,), "compensated") is eft.nrm2_compensated
        assert lookup("cpu", "sum", (dt,), "compensated") is eft.sum2
        assert lookup("cpu", "sum", (dt,), "native") is eft.sum_native


# --- one source, several targets: the Python target is the exact oracle of the CPU one -----------

# (precision p, smallest normal exponent, Veltkamp's s) of each format
FMT = {np.float64: (53, -1022, 27), np.float32: (24, -126, 12)}
UINT = {np.float64: np.uint64, np.float32: np.uint32}


def _round_exact(q, dtype):
    """``q`` (a Fraction) rounded to nearest-even in ``dtype``'s format, as a Fraction.

    Independent of the code under test: integer arithmetic on the significand,
    subnormals included, no overflow (the callers stay in range)."""
    p, emin, _ = FMT[dtype]
    if q == 0:
        return Fraction(0)
    sign, q = (-1 if q < 0 else 1), abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:                          # now 2^e <= q < 2^(e+1)
        e -= 1
    quantum = Fraction(2) ** (max(e, emin) - p + 1)
    m = q / quantum
    n = m.numerator // m.denominator
    rem = m - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2):
        n += 1
    return sign * n * quantum


def _bits(x, dtype):
    return int(np.asarray(x, dtype=dtype).view(UINT[dtype]))


def _same(x, y, dtype):
    """Bit for bit, signed zeros included (both results are ``dtype`` values)."""
    assert float(np.asarray(x, dtype=dtype)) == float(x) and float(np.asarray(y, dtype=dtype)) == float(y)
    return _bits(x, dtype) == _bits(y, dtype)


def _sig_bits(x):
    """Significant bits of the float ``x`` (0 for 0)."""
    f = Fraction(float(x))
    m = abs(f.numerator)
    return 0 if m == 0 else (m >> ((m & -m).bit_length() - 1)).bit_length()


def _oracle_checks(a, b, dtype):
    """The Python target's two_sum, two_prod, split, two_prod_dekker and fma against
    Fraction arithmetic, and against the CPU-compiled ones, bit for bit."""
    a, b = dtype(a), dtype(b)
    fa, fb = Fraction(float(a)), Fraction(float(b))
    p, emin, s = FMT[dtype]
    big = Fraction(float(np.finfo(dtype).max))
    # two_sum: s = fl(a + b), e = a + b - s, exactly (while a + b does not overflow)
    q = fa + fb
    if abs(_round_exact(q, dtype)) <= big:
        ps, pe = py_eft.two_sum(a, b)
        assert Fraction(float(ps)) == _round_exact(q, dtype)
        assert Fraction(float(pe)) == q - Fraction(float(ps))
        cs, ce = eft.two_sum(a, b)
        assert _same(ps, cs, dtype) and _same(pe, ce, dtype), (a, b)
    # two_prod: p = fl(a b), e = a b - p, exactly (in the domain of TwoProduct)
    q = fa * fb
    if _prod_in_domain(fa, fb, emin, p, big):
        pp, pe = py_eft.two_prod(a, b)
        assert Fraction(float(pp)) == _round_exact(q, dtype)
        assert Fraction(float(pe)) == q - Fraction(float(pp))
        cp, ce = eft.two_prod(a, b)
        assert _same(pp, cp, dtype) and _same(pe, ce, dtype), (a, b)
        lim = 2.0 ** (995 if dtype is np.float64 else 114)           # split does not overflow
        if abs(float(a)) < lim and abs(float(b)) < lim and abs(q) <= big / 2:
            dp, de = py_eft.two_prod_dekker(a, b)
            cdp, cde = eft.two_prod_dekker(a, b)
            assert _same(dp, cdp, dtype) and _same(de, cde, dtype), (a, b)
    # fma(a, b, c): one rounding of the exact a*b + c (c = -fl(a*b) and c = b)
    with np.errstate(all="ignore"):
        cs = [b, dtype(-(a * b)) if np.isfinite(a * b) else b]
    for c in cs:
        qf = q + Fraction(float(c))
        if abs(_round_exact(qf, dtype)) <= big:
            pf = py_eft.fma(a, b, c)
            assert Fraction(float(pf)) == _round_exact(qf, dtype), (a, b, c)
            assert _same(pf, intrin.fma(a, b, c), dtype), (a, b, c)
    # split: every step correctly rounded (simulated exactly), hi + lo == a, short halves
    if abs(float(a)) < 2.0 ** (996 if dtype is np.float64 else 115):
        hi, lo = py_eft.split(a)
        c1 = _round_exact(Fraction(2**s + 1) * fa, dtype)
        c2 = _round_exact(c1 - fa, dtype)
        assert Fraction(float(hi)) == _round_exact(c1 - c2, dtype)
        assert Fraction(float(lo)) == fa - Fraction(float(hi))       # exact: hi + lo == a
        assert _sig_bits(hi) <= p - s and _sig_bits(lo) <= s - 1
        chi, clo = eft.split(a)
        assert _same(hi, chi, dtype) and _same(lo, clo, dtype), a


def _adversarial(dtype, n, rng):
    """Random significands over the whole exponent range, short significands (sums of
    two powers of two), neighbours of powers of two, subnormals, signed zeros, extremes."""
    p, emin, _ = FMT[dtype]
    fi = np.finfo(dtype)
    emax = int(fi.maxexp) - 1
    k = n // 6
    e = rng.integers(emin - p + 1, emax + 1, k)
    x1 = np.ldexp(rng.random(k) + 1, e) * rng.choice([-1, 1], k)
    e = rng.integers(emin, emax, k)
    x2 = np.ldexp(1.0, e) + np.ldexp(1.0, e - rng.integers(1, 2 * p, k))
    e = rng.integers(emin + 1, emax, k)
    x3 = np.ldexp(1.0, e) * (1 + rng.choice([-1, 1], k) * 2.0 ** (-p + rng.integers(0, 2, k)))
    x4 = rng.standard_normal(k) * 2.0 ** rng.integers(-40, 40, k)
    x5 = np.ldexp(rng.random(k), emin) * rng.choice([-1, 1], k)           # subnormals
    special = [0.0, -0.0, 1.0, -1.0, float(fi.max), -float(fi.max), float(fi.tiny),
               float(fi.smallest_subnormal), 1 + 2.0**-(p - 1), 1 - 2.0**-p,
               1 + 2.0**-(p // 2), 2.0**(p // 2) + 1, 3.0, 0.1, 1 / 3]
    with np.errstate(over="ignore", under="ignore"):
        x = np.concatenate([x1, x2, x3, x4, x5, special]).astype(dtype)
    return x[np.isfinite(x)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_python_target_is_exact_and_matches_cpu_random(dtype):
    rng = np.random.default_rng(2024 if dtype is np.float64 else 2025)
    x = _adversarial(dtype, 1800, rng)
    y = np.concatenate([rng.permutation(x), x])       # random pairs, and each value with itself
    x = np.concatenate([x, rng.permutation(x)])
    for a, b in zip(x, y):
        _oracle_checks(a, b, dtype)
    # close magnitudes: cancellation in two_sum, products near a rounding boundary
    b2 = x * (1 + dtype(2.0 ** -FMT[dtype][0])) * -1
    for a, b in zip(x[:500], b2[:500]):
        _oracle_checks(a, b, dtype)


def test_python_fma_rounds_fp32_once():
    # a*a + c lies just above an FP32 midpoint: rounding to FP64 first, then to FP32,
    # would land on the midpoint and round down to even
    a, c = np.float32(1 + 2.0**-12), np.float32(2.0**-80)
    exact = Fraction(float(a)) ** 2 + Fraction(float(c))
    assert np.float32(float(exact)) == np.float32(1 + 2.0**-11)           # the double rounding
    assert py_eft.fma(a, a, c) == np.float32(1 + 2.0**-11 + 2.0**-23) == intrin.fma(a, a, c)
    assert isinstance(py_eft.fma(a, a, c), np.float32)
    # signed zeros and non-finite values as IEEE 754 (and as the CPU)
    for args in [(-0.0, 1.0, -0.0), (0.0, -1.0, -0.0), (-0.0, -1.0, -0.0), (2.0, 3.0, -6.0),
                 (math.inf, 0.0, 1.0), (math.inf, 2.0, -math.inf), (1e300, 1e300, -math.inf),
                 (1.0, 2.0, math.nan), (1e300, 1e300, 0.0)]:
        r, cr = py_eft.fma(*args), intrin.fma(*args)
        assert (math.isnan(r) and math.isnan(cr)) or _same(r, cr, np.float64), args


@settings(max_examples=400, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False),
       st.floats(allow_nan=False, allow_infinity=False))
def test_python_target_is_exact_and_matches_cpu_property(a, b):
    _oracle_checks(a, b, np.float64)


@settings(max_examples=400, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False),
       st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_python_target_is_exact_and_matches_cpu_property_f32(a, b):
    _oracle_checks(a, b, np.float32)


def test_efts_are_written_once():
    import ast
    import inspect

    # kernels/eft.py is device-neutral: no Numba, no device package, no registry, no kernels.cpu
    tree = ast.parse(inspect.getsource(py_eft))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = ["." * node.level + (node.module or "")] + [a.name for a in node.names]
        else:
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("register", "njit"), node.func.id
            continue
        for m in mods:
            assert not re.match(r"(numba|llvmlite|cupy|njit|register)\b", m), m
            assert "cpu" not in m and "cuda" not in m and "registry" not in m, m
    # the CPU functions are the same code objects, compiled, not a second copy
    names = set(py_eft.SCALAR_EFTS)
    cpu_tree = ast.parse(inspect.getsource(eft))
    defined = {n.name for n in ast.walk(cpu_tree) if isinstance(n, ast.FunctionDef)}
    assert not names & defined
    for name in py_eft.SCALAR_EFTS:
        d = getattr(eft._T, name)
        assert isinstance(d, numba.core.registry.CPUDispatcher), name
        assert d.py_func.__code__ is getattr(py_eft, name).__code__, name
        assert not d.targetoptions.get("fastmath"), name
    for name in ("two_sum", "fast_two_sum", "two_prod", "split", "two_prod_dekker"):
        assert getattr(eft, name) is getattr(eft._T, name)
    # the compiled EFTs call the CPU primitives, the Python target its own
    assert eft.two_prod.py_func.__globals__["fma"] is intrin.fma
    assert eft.two_sum.py_func.__globals__["add_rn"] is intrin.add_rn
    assert py_eft.two_prod.__globals__["fma"] is py_eft.fma


def test_specialise_checks_the_target():
    from types import SimpleNamespace

    with pytest.raises(TypeError, match="fma"):
        py_eft.specialise(None, SimpleNamespace(add_rn=py_eft.add_rn, sub_rn=py_eft.sub_rn,
                                                mul_rn=py_eft.mul_rn))
    # a target's primitives really are what the EFTs call: count them
    calls = []

    def counted(f):
        return lambda *a: calls.append(f.__name__) or f(*a)

    t = py_eft.specialise(None, SimpleNamespace(**{k: counted(getattr(py_eft, k))
                                                  for k in py_eft.PRIMITIVES}))
    assert t.two_prod(3.0, 0.1) == py_eft.two_prod(3.0, 0.1)
    assert calls == ["mul_rn", "fma"]
    calls.clear()
    t.two_sum(1.0, 1e-20)
    assert calls.count("add_rn") == 2 and calls.count("sub_rn") == 4


_CACHED_DOT2 = """
import numpy as np
from mpsolve.kernels.cpu.eft import dot2, nrm2_compensated
x = np.ones(40000)
print(float(nrm2_compensated(x)) if "{first}" == "nrm2" else float(dot2(x, x)))
"""


def test_parallel_dot2_from_the_disk_cache(tmp_path):
    """The compensated dot's parallel path is a cached serial function calling a cached
    parallel one: loaded from Numba's disk cache it does not launch the thread pool, and
    a process whose first parallel call it was called a null pointer (Numba issue 8578;
    a segmentation fault).  The pool is launched at import now: three processes on one
    fresh cache -- the parallel callee compiled by the first, the caller by the second,
    both loaded by the third -- all return the exact sum."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"),
               MPSOLVE_PARALLEL_MIN="32768")
    for first, want in (("nrm2", 200.0), ("dot2", 40000.0), ("dot2", 40000.0)):
        out = subprocess.run([sys.executable, "-c", _CACHED_DOT2.format(first=first)],
                             env=env, capture_output=True, text=True)
        assert out.returncode == 0, (first, out.returncode, out.stderr[-2000:])
        assert float(out.stdout.split()[-1]) == want


def test_dot2_refuses_vectors_of_other_shapes_or_dtypes():
    """The kernels read ``x.size`` entries of both and accumulate in ``y``'s dtype: a
    shorter ``x`` cut ``y`` silently and an FP32 ``y`` made an FP64 dot FP32."""
    from mpsolve.kernels.cpu.eft import cdot2, dot2

    with pytest.raises(ValueError, match="dot2: x and y must have one shape and dtype"):
        dot2(np.ones(50), np.ones(100))
    with pytest.raises(ValueError, match="one shape and dtype"):
        dot2(np.ones(64), np.ones(64, np.float32))
    with pytest.raises(ValueError, match="cdot2"):
        cdot2(np.ones(8, complex), np.ones(8, np.complex64))
    assert dot2(np.ones(50), np.ones(50)) == 50.0
