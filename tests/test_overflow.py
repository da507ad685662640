"""Norms and Krylov coefficients that neither overflow nor underflow (issue 13, item 3).

A system whose entries are near 1e300 is perfectly representable in FP64, but
``sqrt(x . x)`` and the dots in the Krylov coefficients overflow on it; SciPy's GMRES
and BiCGSTAB end with info 500 and -11 on ``A = 1e300 tridiag(-1, 2.5, -1)``,
``b = ones``.  mpsolve's norms rescale by a power of two when (and only when) the fast
kernel's result cannot be trusted (kernels/safenorm.py), the coefficients that are
ratios of dots are formed from scaled vectors where a dot overflowed, and a right-hand
side with ``||b||`` outside [2^-500, 2^500] is held scaled by a power of two.  Powers of
two scale exactly, so the oracles here are exact: the scaled computation must give the
unscaled one's bits times the power of two.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

import mpsolve
from mpsolve.kernels import lookup
from mpsolve.kernels.primitives import bind_primitives
from mpsolve.kernels.safenorm import all_finite, ldexp_array, norm, trustworthy

DEVICES = ("cpu", "reference")
MODES = ("native", "compensated")
DTYPES = (np.float64, np.float32)


def _tridiag(n):
    return sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n), format="csr")


@pytest.mark.parametrize("dtype", DTYPES)
def test_trustworthy_says_when_a_sum_of_squares_overflowed_or_underflowed(dtype):
    fi = np.finfo(dtype)
    n = 10
    assert trustworthy(1.0, n, dtype) and trustworthy(math.sqrt(float(fi.max)), n, dtype)
    assert not trustworthy(math.inf, n, dtype) and not trustworthy(math.nan, n, dtype)
    edge = math.sqrt(2 * float(fi.tiny) * n)          # 2 n tiny: the underflow bound
    assert trustworthy(edge * 1.001, n, dtype) and not trustworthy(edge * 0.999, n, dtype)
    assert not trustworthy(0.0, n, dtype)             # 0: all zeros, or all underflowed
    assert trustworthy(edge * 1.001, n // 2, np.dtype(dtype).type(0).dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES + (np.complex128, np.complex64))
def test_nrm2_of_a_scaled_vector_is_the_scaled_norm_bit_for_bit(device, mode, dtype):
    """``||2^k v|| = 2^k ||v||`` exactly in floating point when no entry over/underflows:
    the guarded norm must give exactly that where the unguarded one gives inf or 0."""
    ops = bind_primitives(device, dtype, mode, np)
    raw = lookup(device, "nrm2", (np.dtype(dtype).name,), mode)
    rng = np.random.default_rng(3)
    v = rng.standard_normal(257).astype(dtype)
    if np.dtype(dtype).kind == "c":
        v = v + 1j * rng.standard_normal(257).astype(v.real.dtype)
    ref = ops.nrm2(v)
    assert ref == raw(v)                              # an ordinary vector: the kernel's bits
    # 2^k v with every entry a normal number: squares that overflow, squares that
    # underflow, and a harmless scale
    fi = np.finfo(dtype)
    big, small = fi.maxexp - 8, -(fi.maxexp // 2 + 8)
    for k in (big, small, fi.nmant):
        x = ldexp_array(v, k)
        assert np.isfinite(x).all() and np.count_nonzero(x) == v.size
        assert ops.nrm2(x) == math.ldexp(ref, k), (k, ops.nrm2(x), raw(x))
    if mode == "native":                              # what the guard is for (the FP64-
        assert raw(ldexp_array(v, big)) == math.inf   # accumulated oracle may not overflow)
    assert ops.nrm2(np.zeros(5, dtype)) == 0.0
    bad = v.copy()
    bad[7] = np.nan
    assert math.isnan(ops.nrm2(bad))
    bad[7] = np.inf
    assert ops.nrm2(bad) == math.inf


@pytest.mark.parametrize("device", DEVICES)
def test_fused_update_norm_is_guarded_too(device):
    """CG's ``axpy2_nrm2`` (x += a p; r -= a q; ||r||) on huge vectors: the norm of the
    updated vector, as the guarded ``nrm2`` gives it."""
    ops = bind_primitives(device, np.float64, "native", np)
    rng = np.random.default_rng(4)
    x, y, u, v = (ldexp_array(rng.standard_normal(300), 1000) for _ in range(4))
    v2 = v.copy()
    got = ops.axpy2_nrm2(0.5, x, y, -0.25, u, v)
    ops.axpy2(0.5, x, y.copy(), -0.25, u, v2)
    assert np.array_equal(v, v2) and got == ops.nrm2(v2) < math.inf


def _exact_dot(x, y):
    return sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(x, y))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
def test_dot_ratio_against_exact_rationals(device, mode):
    """``(x . y) / (u . w)`` with dots far outside FP64's range (and the quotient inside):
    within a few ulps of the exact rational quotient; a zero denominator gives inf."""
    ops = bind_primitives(device, np.float64, mode, np)
    rng = np.random.default_rng(5)
    x, y, u, w = (np.abs(rng.standard_normal(50)) + 0.5 for _ in range(4))
    for ex, ey, eu, ew in ((1000, 200, 900, 300), (-1000, -100, -900, -150),
                           (700, 700, 690, 700)):
        xs, ys, us, ws = (ldexp_array(a, e) for a, e in ((x, ex), (y, ey), (u, eu), (w, ew)))
        exact = _exact_dot(xs, ys) / _exact_dot(us, ws)
        got = ops.dot_ratio(xs, ys, us, ws)
        assert math.isfinite(got)
        assert abs(Fraction(got) - exact) <= 8 * 2.0**-53 * abs(exact), (got, float(exact))
    assert ops.dot_ratio(x, y, np.zeros(50), w) == math.inf
    bad = x.copy()
    bad[0] = np.nan
    assert math.isnan(ops.dot_ratio(bad, y, u, w))


@pytest.mark.parametrize("method", ["cg", "gmres", "bicgstab"])
@pytest.mark.parametrize("precision", ["double", "mixed-eft"])
@pytest.mark.parametrize("a_exp,b_exp", [(996, 0), (-996, 0), (0, 996), (0, -996),
                                         (996, 500)])
def test_extreme_scales_solve(method, precision, a_exp, b_exp):
    """The issue's system, ``A = 2^996 tridiag(-1, 2.5, -1)`` (about 6.7e299, so powers of
    two keep the oracle exact), ``b = 2^b_exp ones``, and its tiny twins: every method
    converges, and the residual ``2^-b_exp (b - A x)``, computed exactly scaled, certifies
    the answer.  (SciPy 1.16: GMRES info 500, BiCGSTAB -11 on the first of these.)"""
    n = 100
    T = _tridiag(n)
    A = T * 2.0**a_exp
    b = np.full(n, 2.0**b_exp)
    r = mpsolve.solve(A, b, method=method, precision=precision, precond=None, rtol=1e-10)
    assert r.info == 0, r.status
    # b - A x = 2^b_exp (1 - T (2^(a_exp - b_exp) x)): every scaling exact
    y = r.x * 2.0**(a_exp - b_exp) if abs(a_exp - b_exp) < 1000 else \
        ldexp_array(r.x, a_exp - b_exp)
    res = np.linalg.norm(1.0 - T @ y) / math.sqrt(n)
    assert res <= 1e-10 * (1 + 1e-6), res
    assert r.true_residual <= 1e-10


@pytest.mark.parametrize("method", ["gmres", "bicgstab"])
def test_extreme_scales_solve_complex(method):
    """A complex non-Hermitian twin, ``2^996 (T + 0.5 i I)``, ``b = ones``."""
    n = 80
    T = (_tridiag(n) + 0.5j * sp.identity(n)).tocsr()
    r = mpsolve.solve(T * 2.0**996, np.ones(n), method=method, precision="double",
                      precond=None, rtol=1e-10)
    assert r.info == 0, r.status
    res = np.linalg.norm(1.0 - T @ (r.x * 2.0**996)) / math.sqrt(n)
    assert res <= 1e-10 * (1 + 1e-6), res


def test_scaled_right_hand_side_keeps_the_callers_units():
    """``||b||`` near 1e300: x0, atol and the callback's iterate are the caller's."""
    n = 60
    T = _tridiag(n)
    b = np.full(n, 2.0**990)
    xs = np.linalg.solve(T.toarray(), np.ones(n)) * 2.0**990
    x0 = xs * 0.5
    seen = []
    x, info = mpsolve.cg(T, b, x0=x0, rtol=1e-12, callback=lambda xk: seen.append(xk.copy()))
    assert info == 0 and np.allclose(x, xs, rtol=1e-10)
    assert np.array_equal(x0, xs * 0.5)                       # x0 not modified
    assert seen and np.allclose(seen[-1], xs, rtol=1e-9)      # the caller's units
    # an atol in the caller's units: ||b|| 1e-10 relative is ~2^990 1e-10 * sqrt(n)
    r = mpsolve.solve(T, b, method="gmres", precond=None, rtol=0.0,
                      atol=1e-6 * np.linalg.norm(np.ones(n)) * 2.0**990)
    assert r.info == 0 and r.true_residual <= 1e-6


@pytest.mark.parametrize("method", ["cg", "bicgstab", "gmres"])
def test_a_tiny_b_with_an_order_one_start_neither_overflows_nor_is_called_indefinite(method):
    """``||b|| = 1e-160`` (held scaled up by a power of two) and ``x0 = 1``: scaled as far
    as ``b``, the start became 1e161 and its residual's dots overflowed -- CG and BiCGSTAB
    stopped with -14 at once, and auto blamed A ("not positive definite").  ``b`` is now
    scaled up only as far as ``x0`` stays in range: each method converges, in the
    caller's units."""
    T = _tridiag(50)
    b = 1e-160 * (T @ np.ones(50))
    x0 = np.ones(50)
    r = mpsolve.solve(T, b, x0=x0, method=method, rtol=1e-8, maxiter=5000)
    assert r.info == 0, r.summary()
    assert np.linalg.norm(b - T @ r.x) <= 1.01e-8 * np.linalg.norm(b)
    assert np.allclose(r.x, 1e-160, rtol=1e-6, atol=0)
    assert np.array_equal(x0, np.ones(50))
    a = mpsolve.solve(T, b, x0=x0, rtol=1e-8)
    assert a.info == 0 and "not positive definite" not in a.summary()


def test_problem_norm_is_safe():
    v = ldexp_array(np.random.default_rng(6).standard_normal(40), 1000)
    assert norm(v, np) == math.ldexp(float(np.linalg.norm(ldexp_array(v, -1000))), 1000)
    assert float(np.linalg.norm(v)) == math.inf               # NumPy's own overflows


def test_norm_and_all_finite_neither_warn_nor_raise_whatever_seterr_says():
    """The FP64 fast paths square the entries: an overflow or underflow there is judged,
    not reported (even under ``np.seterr(all="raise")``), and the caller's error state is
    left as it was."""
    big = np.full(8, 1e300)
    tiny = np.full(8, 1e-300)
    with np.errstate(all="raise"):
        assert norm(big, np) == math.ldexp(float(np.linalg.norm(ldexp_array(big, -1000))),
                                           1000)
        assert norm(tiny, np) > 0.0
        assert all_finite(big, np) and all_finite(tiny, np)      # squares overflow: judged
        assert all_finite(np.zeros(0), np)
        for bad in (np.inf, -np.inf, np.nan):
            v = big.copy()
            v[3] = bad
            assert not all_finite(v, np)
            w = np.ones(5)
            w[0] = bad
            assert not all_finite(w, np)
            assert not all_finite(w.astype(np.float32), np)       # the entrywise path
        with pytest.raises(FloatingPointError):
            big.dot(big)                                          # the state is intact


def test_auto_on_values_spanning_the_whole_fp64_range_warns_nothing():
    """``D A D`` with ``D`` from 1e-150 to 1e150: the analysis's value range (1e600) and a
    candidate's iterate that overflows when unscaled are answers, not NumPy warnings."""
    import warnings

    from mpsolve.matrices import poisson2d

    A = poisson2d(30)
    n = A.shape[0]
    D = sp.diags(np.logspace(-150, 150, n))
    AD = sp.csr_matrix(D @ A @ D)
    b = AD @ np.ones(n)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        r = mpsolve.solve(AD, b, rtol=1e-8)
    assert r.analysis["value_range"] > 300
    # a norm-wise residual cannot see the rows of size 1e-300: x may be far from 1 there,
    # but a converged x exists in FP64 (the first ILUT's did not: inf, once unscaled)
    assert r.info == 0 and np.isfinite(r.x).all()
    s = 2.0**-1000                                    # the residual, without overflow
    assert np.linalg.norm(s * b - AD @ (s * r.x)) <= 1e-8 * np.linalg.norm(s * b)


def test_an_answer_that_overflows_when_unscaled_is_not_a_success():
    """A named solve whose scaled iterate meets the tolerance but whose ``x`` overflows in
    the caller's units: not converged, and the status says why."""
    from mpsolve.matrices import poisson2d

    A = poisson2d(30)
    n = A.shape[0]
    D = sp.diags(np.logspace(-150, 150, n))
    AD = sp.csr_matrix(D @ A @ D)
    r = mpsolve.solve(AD, AD @ np.ones(n), method="gmres", precond="ilut", reorder="mc64",
                      precision="double", side="right", restart=30, rtol=1e-8)
    # this ILUT's x has entries past 1e308 once unscaled (auto then tries a finer ILUT)
    assert not np.isfinite(r.x).all()
    assert r.info > 0 and "overflows float64" in r.status and r.true_residual == np.inf


@pytest.mark.parametrize("func", ["cg", "gmres", "bicgstab", "auto"])
@pytest.mark.parametrize("a_scale, lost", [(1e20, True), (1e25, True), (1e-20, False)])
def test_an_answer_that_underflows_when_unscaled_is_not_a_success(func, a_scale, lost):
    """b of norm 1e-300 is solved scaled up by a power of two; scaled back down, x =
    A^-1 b (about 1e-320 for A = 1e20 T) loses bits in subnormals, or is 0: info 0 only
    where the x returned meets the tolerance (judged scaled up again, exactly)."""
    from mpsolve.matrices import poisson2d

    A = sp.csr_matrix(a_scale * poisson2d(6))
    b = np.full(36, 1e-300)
    if func == "auto":
        r = mpsolve.solve(A, b, rtol=1e-8)
        x, info = r.x, r.info
        assert not lost or len([c for c in r.choices if c.iterations]) == 1  # (stops there)
    else:
        x, info = getattr(mpsolve, func)(A, b, rtol=1e-8)
    s = 2.0**1000                                     # the residual, without underflow
    rel = np.linalg.norm(s * b - A @ (s * x)) / np.linalg.norm(s * b)
    assert (info == 0) == (rel <= 1e-8)
    assert (info != 0) == lost


@pytest.mark.parametrize("method", ["cg", "gmres", "bicgstab"])
@pytest.mark.parametrize("precision", ["double", "mixed", "eft"])
def test_a_residual_bound_whose_square_overflows_ends_the_solve(method, precision):
    """||b|| = 1e150 (in range: not scaled) and an x of the same size: ||v||^2 of the
    residual's rounding bound overflowed (||v|| itself did not), the certified residual
    read inf, and the replacement loop compared inf with 0.5 inf for ever -- in solve's
    default too.  The bound is now taken of (x, b) / 2^512; the loop also ends on inf."""
    import faulthandler

    A = sp.csr_matrix([[1.0, -1.0], [-1.0, 1.0 + 1e-6]])
    b = np.array([1e150, 0.0])
    faulthandler.dump_traceback_later(120, exit=True)   # (a hang fails, with its traceback)
    try:
        r = mpsolve.solve(A, b, method=method, precond=None, precision=precision, rtol=1e-6)
        default = mpsolve.solve(A, b)
    finally:
        faulthandler.cancel_dump_traceback_later()
    s = 2.0**-500                                     # the residual, without overflow
    for res in (r, default):
        assert res.info == 0 and np.isfinite(res.true_residual)
        assert np.linalg.norm(s * b - A @ (s * res.x)) <= 1e-6 * np.linalg.norm(s * b)


def test_a_stagnating_stage_never_returns_an_x_worse_than_its_start():
    """The replacement loop's stagnation exit kept the last x even where it was worse
    than the start (relative residual 1e182 from x0 = 0 on D A D, D from 1e-100 to
    1e100): the start comes back then, as on the other exits."""
    from mpsolve.matrices import poisson2d

    n = 196
    d = np.logspace(-100, 100, n)
    np.random.default_rng(1).shuffle(d)
    A = (sp.diags(d) @ poisson2d(14) @ sp.diags(d)).tocsr()
    b = np.ones(n)
    r = mpsolve.solve(A, b, method="cg", precond="jacobi", precision="double",
                      escalate=False, rtol=1e-8)
    assert r.true_residual <= 1.0 + 1e-12             # no worse than x0 = 0


@pytest.mark.parametrize("method, precision, scale", [
    ("cg", "single", 1e-20), ("bicgstab", "single", 1e-22), ("cg", "ir", 1e-40),
    ("gmres", "ir", 1e-38), ("cg", "float32-data", 1e-20)])
def test_a_breakdown_in_float32_arithmetic_escalates(method, precision, scale):
    """A breakdown where the iteration's own arithmetic is FP32 -- ``single``, the inner
    solves of ``ir``, float32 data -- may be FP32's: a small ``b`` (CG's ``r.z``
    underflowed and read as "A not definite", -12; BiCGSTAB's rho, -10/-11) or a small
    ``A`` (non-finite values in ``ir``'s inner solves, -14, which ended the solve).  It
    escalates, as a stagnation does, and the solve converges; a breakdown that is A's own
    (an indefinite A under CG) still ends with its code after the FP64 policy meets it."""
    from mpsolve.matrices import convection_diffusion2d, poisson2d

    A = sp.csr_matrix(poisson2d(20) if method == "cg" else convection_diffusion2d(20))
    if precision == "ir":
        A, b = A * scale, A @ np.ones(A.shape[0]) * scale
    else:
        b = A @ np.ones(A.shape[0]) * scale
    kw = dict(method=method, rtol=1e-5, precond="jacobi" if precision != "ir" else None)
    if precision == "float32-data":
        A, b = A.astype(np.float32), b.astype(np.float32)
    else:
        kw["precision"] = precision
    r = mpsolve.solve(A, b, **kw)
    assert r.converged, r.status
    A64, b64 = A.astype(np.float64), b.astype(np.float64)
    assert np.linalg.norm(b64 - A64 @ r.x.astype(np.float64)) <= 1.01e-5 * np.linalg.norm(b64)
    assert r.escalations and "float32" in r.escalations[0].reason
    P = sp.csr_matrix(poisson2d(20) - 0.5 * sp.eye(400))
    r = mpsolve.solve(P, P @ np.ones(400), method="cg", precision="single", rtol=1e-5)
    assert r.info == -12 and r.escalations and r.escalations[-1].to_precision == "mixed"


@pytest.mark.parametrize("method", ["auto", "cg", "gmres", "bicgstab"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_a_right_hand_side_whose_norm_overflows_is_scaled(method, dtype):
    """Finite entries whose 2-norm overflows (four of 1e308): ``frexp(inf)`` left b
    unscaled, ``tol = inf``, and x = 0 "converged in 0 iterations" at a true residual of
    NaN.  Scaled from the largest entry, it is solved (x ~ 4.5e307, in range); where x
    itself overflows, the status says so and info is not 0."""
    A = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(4, 4), dtype=dtype).tocsr()
    b = np.full(4, 1e308, dtype=dtype)
    res = mpsolve.solve(A, b, method=method, rtol=1e-8)
    assert res.info == 0 and res.iterations > 0 and res.true_residual <= 1e-8
    s = 2.0 ** -600                                  # (b - A x) itself overflows
    assert np.linalg.norm(b * s - A @ (res.x * s)) <= 1e-8 * np.linalg.norm(b * s)
    L = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(4, 4), dtype=dtype).tocsr()
    bad = mpsolve.solve(L, b, method=method, rtol=1e-8)   # x = L^-1 b: 6e308
    assert bad.info != 0 and "overflows" in bad.status and bad.true_residual > 1e-8


@pytest.mark.parametrize("precond", [None, "jacobi"])
@pytest.mark.parametrize("device", [None, "reference"])
@pytest.mark.parametrize("n", [30, 70])
def test_cg_at_rtol_zero_ends_with_a_status(precond, device, n):
    """rtol = 0: CG's r^H z underflows once ||r|| falls below sqrt(tiny); the next beta
    divided 0 by 0 (ZeroDivisionError from every loop: Python, compiled, two-thread) and
    with Jacobi the zero read as 'M not definite' (-12) on an SPD matrix.  Now the
    recursive residual is at its floor there and the driver judges the true one: not
    converged (rtol 0 is out of reach), at FP64's floor."""
    from mpsolve.matrices import poisson2d

    A = poisson2d(n)
    b = np.random.default_rng(0).standard_normal(n * n)
    for rtol in (0.0, 1e-300):
        res = mpsolve.solve(A, b, method="cg", precond=precond, rtol=rtol, maxiter=3000,
                            precision="double", device=device, escalate=False)
        assert res.info > 0 and res.true_residual < 1e-14
    x, info = mpsolve.cg(A, b, rtol=0.0, maxiter=3000)
    assert info > 0
