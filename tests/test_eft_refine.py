"""Issue 15: double-double x, the compensated residual and three-precision refinement.

Exact oracles (``fractions.Fraction``) for the kernels; integer problems with an exactly
known solution for the solver (``b = A x*`` exact in FP64), so the forward error is
measured, not estimated.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

import mpsolve
from mpsolve import Precision
from mpsolve.kernels import lookup
from mpsolve.kernels.reference import gamma
from mpsolve.kernels.registry import launch_plan
from mpsolve.bench.bench_accuracy import int_convdiff, int_jump3d

U = 2.0 ** -53


# ----------------------------------------------------------------- problems
def exact_problem(A, seed=1, scale=100):
    rng = np.random.default_rng(seed)
    xs = rng.integers(-scale, scale + 1, A.shape[0]).astype(np.float64)
    b = A @ xs
    assert np.array_equal(b, np.round(b)) and np.abs(b).max() < 2.0 ** 53   # exact
    return xs, b


def forward_error(x, xs):
    return float(np.linalg.norm(x - xs) / np.linalg.norm(xs))


# ----------------------------------------------------------------- residual_dd kernel
def _ill_csr(n, k, rng):
    """Rows whose residual cancels: b_i = fl(A x)_i for x a dd pair with wide values, so
    the exact residual is tiny against |b| + |A| |x|."""
    A = sp.random(n, n, density=k / n, random_state=rng, format="csr",
                  data_rvs=lambda m: rng.standard_normal(m) * 10.0 ** rng.integers(-6, 7, m))
    A = sp.csr_matrix(A + sp.eye(n))
    A.sort_indices()
    xh = rng.standard_normal(n) * 10.0 ** rng.integers(-4, 5, n)
    xl = xh * rng.standard_normal(n) * 2.0 ** -54          # a normalised-ish low part
    b = A @ xh                                            # b - A xh is rounding only
    return A, xh, xl, b


def _exact_residual(A, xh, xl, b):
    out = []
    for i in range(A.shape[0]):
        q = Fraction(float(b[i]))
        for k in range(A.indptr[i], A.indptr[i + 1]):
            j = A.indices[k]
            q -= Fraction(float(A.data[k])) * (Fraction(float(xh[j])) + Fraction(float(xl[j])))
        out.append(q)
    return out


def _mag(A, xh, xl, b):
    return np.abs(b) + abs(A) @ (np.abs(xh) + np.abs(xl))


@pytest.mark.parametrize("device", ["cpu", "reference"])
@pytest.mark.parametrize("n", [40, 3000])     # 3000 rows: the CPU's parallel path
def test_residual_dd_within_the_dot2_bound(device, n):
    rng = np.random.default_rng(n)
    A, xh, xl, b = _ill_csr(n, 8, rng)
    ip, ix = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    plan = launch_plan(device, "spmv", ip) if device == "cpu" else None
    if device == "cpu" and n == 3000:
        plan = np.linspace(0, n, 9).astype(np.int64)     # several partitions
    r, rl = np.full(n, np.nan), np.full(n, np.nan)
    lookup(device, "residual_dd", ("float64",))(plan, ip, ix, A.data, xh, xl, b, r, rl)
    exact = _exact_residual(A, xh, xl, b)
    mag = _mag(A, xh, xl, b)
    k = np.diff(A.indptr)
    worst_pair = worst_fp64 = 0.0
    r64 = b - A @ xh - A @ xl                             # the FP64 way, for contrast
    for i in range(n):
        q = exact[i]
        bound = U * abs(float(q)) + gamma(2 * k[i] + 1, U) ** 2 * mag[i]
        err_pair = abs(float(Fraction(float(r[i])) + Fraction(float(rl[i])) - q))
        err_round = abs(float(Fraction(float(r[i])) - q))
        assert err_pair <= bound, (i, err_pair, bound)
        # r is the pair rounded: within half an ulp of the exact residual plus the bound
        assert err_round <= U * abs(float(q)) + bound
        # rl is the rest of the pair: |rl| at most half an ulp of r
        assert abs(rl[i]) <= U * abs(r[i])
        worst_pair = max(worst_pair, err_pair / mag[i])
        worst_fp64 = max(worst_fp64, abs(float(Fraction(float(r64[i])) - q)) / mag[i])
    # the data are ill-conditioned: the FP64 residual is wrong by far more than the pair
    assert worst_fp64 > 1e-18 and worst_pair < 1e-28


def test_residual_dd_empty_rows_and_zero_x():
    A = sp.csr_matrix(np.array([[0.0, 0.0], [2.0, 3.0]]))
    ip, ix = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    b = np.array([5.0, -1.0])
    for device in ("cpu", "reference"):
        r, rl = np.empty(2), np.empty(2)
        plan = launch_plan(device, "spmv", ip)
        lookup(device, "residual_dd", ("float64",))(plan, ip, ix, A.data, np.zeros(2),
                                                    np.zeros(2), b, r, rl)
        assert r.tolist() == [5.0, -1.0] and rl.tolist() == [0.0, 0.0]


def test_residual_dd_cpu_agrees_with_reference():
    rng = np.random.default_rng(7)
    A, xh, xl, b = _ill_csr(500, 6, rng)
    ip, ix = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    out = {}
    for device in ("cpu", "reference"):
        r, rl = np.empty(500), np.empty(500)
        lookup(device, "residual_dd", ("float64",))(launch_plan(device, "spmv", ip), ip, ix,
                                                    A.data, xh, xl, b, r, rl)
        out[device] = (r, rl)
    # the reference is the exact residual rounded; the CPU's pair is within Dot2's bound,
    # so its rounded part agrees to an ulp of the residual plus that bound
    mag = _mag(A, xh, xl, b)
    k = np.diff(A.indptr)
    bound = 2 * U * np.abs(out["reference"][0]) + gamma(2 * k.max() + 1, U) ** 2 * mag
    assert np.all(np.abs(out["cpu"][0] - out["reference"][0]) <= bound)


# ----------------------------------------------------------------- dd_axpy kernel
@pytest.mark.parametrize("device", ["cpu", "reference"])
@pytest.mark.parametrize("n", [50, 40000])    # 40000: the CPU's parallel path
def test_dd_axpy_error_is_second_order(device, n):
    rng = np.random.default_rng(n + 1)
    m = min(n, 60)                             # exact checks on a sample
    yh = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 9, n)
    yl = yh * rng.uniform(-1, 1, n) * 2.0 ** -53
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 9, n)
    x[:10] = -yh[:10] / 3.0                    # heavy cancellation in a few entries
    a = 3.0 * (1 + 2.0 ** -40)
    h, lo = yh.copy(), yl.copy()
    lookup(device, "dd_axpy", ("float64",))(a, x, h, lo)
    for i in list(range(10)) + list(rng.choice(n, m, replace=False)):
        q = Fraction(float(yh[i])) + Fraction(float(yl[i])) + Fraction(a) * Fraction(float(x[i]))
        got = Fraction(float(h[i])) + Fraction(float(lo[i]))
        scale = abs(a * x[i]) + abs(yh[i]) + abs(float(q))
        assert abs(float(got - q)) <= 2 * U * U * scale + 2.0 ** -1074, i
        assert h[i] == float(got) or abs(lo[i]) <= U * abs(h[i])      # normalised
    if device == "reference":                  # the oracle: the best pair, exactly
        i = 3
        q = Fraction(float(yh[i])) + Fraction(float(yl[i])) + Fraction(a) * Fraction(float(x[i]))
        assert h[i] == float(q) and lo[i] == float(q - Fraction(float(h[i])))


def test_dd_axpy_keeps_what_fp64_loses():
    yh, yl = np.ones(3), np.zeros(3)
    x = np.full(3, 2.0 ** -60)
    f = lookup("cpu", "dd_axpy", ("float64",))
    for _ in range(100):
        f(1.0, x, yh, yl)                      # 100 increments FP64 would each drop
    assert np.all(yh == 1.0) and np.all(yl == 100 * 2.0 ** -60)    # below ulp(1) / 2
    y64 = np.ones(3)
    for _ in range(100):
        y64 += x
    assert np.all(y64 == 1.0)


# ----------------------------------------------------------------- policies
def test_eft_presets_carry_x_in_double_double():
    for name in ("eft", "mixed-eft", "mixed-eft-cb"):
        assert Precision.preset(name).residual == "dd"
    for name in ("double", "single", "mixed", "ir", "mixed-cb"):
        assert Precision.preset(name).residual == "fp64"
    with pytest.raises(ValueError, match="residual"):
        Precision(residual="quad")
    with pytest.raises(ValueError, match="working='float64'"):
        Precision(working="float32", matrix="float32", residual="dd")
    assert "double-double" in Precision.preset("eft").describe()


# ----------------------------------------------------------------- the solver
@pytest.fixture(scope="module")
def jump_problem():
    A = int_jump3d(14, 1e9)                    # issue 15's example: n = 2744, jumps 1e9
    xs, b = exact_problem(A)
    return A, xs, b


@pytest.mark.parametrize("prec", ["eft", "mixed-eft"])
def test_forward_error_gain_on_an_exact_ill_conditioned_problem(jump_problem, prec):
    """Issue 15's goal on a small twin of its example: 100x smaller forward error than
    ``double`` (and within a few u of x*), at a tolerance below the FP64 floor."""
    A, xs, b = jump_problem
    kw = dict(method="cg", precond="jacobi", rtol=1e-16, escalate=False)
    d = mpsolve.solve(A, b, precision="double", **kw)
    e = mpsolve.solve(A, b, precision=prec, **kw)
    fe_d, fe_e = forward_error(d.x, xs), forward_error(e.x, xs)
    assert fe_d > 1e-13                        # double is limited by its recurrences
    assert fe_e <= fe_d / 100 and fe_e <= 10 * U
    assert e.x_lo is not None and d.x_lo is None
    assert np.all(np.abs(e.x_lo) <= U * np.abs(e.x))
    # the honest judge: info == 0 only if the FP64 residual of the returned x meets tol
    r = np.linalg.norm(b - A @ e.x) / np.linalg.norm(b)
    assert (e.info == 0) == (e.true_residual <= 1e-16)
    assert abs(r - e.true_residual) <= 4 * U * (abs(A) @ np.abs(e.x)).max() / np.linalg.norm(b)


@pytest.mark.parametrize("method", ["gmres", "bicgstab"])
def test_forward_error_gain_nonsymmetric(method):
    """A nonsymmetric integer problem (upwind convection on top of the jumps)."""
    A = int_convdiff(8, 1e7)                   # jumps plus integer upwinding
    xs, b = exact_problem(A, seed=4)
    kw = dict(method=method, precond="jacobi", rtol=1e-16, escalate=False, maxiter=20000)
    d = mpsolve.solve(A, b, precision="double", **kw)
    e = mpsolve.solve(A, b, precision="eft", **kw)
    fe_d, fe_e = forward_error(d.x, xs), forward_error(e.x, xs)
    assert fe_e <= max(fe_d / 100, 10 * U), (fe_d, fe_e)


def test_eft_at_an_ordinary_tolerance_is_one_solve(jump_problem):
    """Above the FP64 floor the dd stage is the plain solve plus one compensated
    residual: the same iteration count as ``double``, to a few iterations (Dot2 dots)."""
    A, xs, b = jump_problem
    kw = dict(method="cg", precond="jacobi", rtol=1e-8)
    d = mpsolve.solve(A, b, precision="double", **kw)
    e = mpsolve.solve(A, b, precision="eft", **kw)
    assert d.info == 0 and e.info == 0
    assert abs(e.iterations - d.iterations) <= max(2, 0.02 * d.iterations)
    assert e.true_residual <= 1e-8


def test_no_false_success_and_user_data_untouched():
    """A budget too small: info > 0, and the reported residual is the returned x's."""
    A = int_jump3d(8, 1e6)
    xs, b = exact_problem(A)
    A0, b0 = A.copy(), b.copy()
    x0 = np.ones(A.shape[0])
    res = mpsolve.solve(A, b, x0=x0, method="cg", precond="jacobi", precision="eft",
                        rtol=1e-12, maxiter=5, escalate=False)
    assert res.info > 0
    true = np.linalg.norm(b - A @ res.x) / np.linalg.norm(b)
    assert true > 1e-12 and math.isclose(true, res.true_residual, rel_tol=1e-6)
    assert np.array_equal(b, b0) and (A != A0).nnz == 0 and np.all(x0 == 1.0)


def test_callback_sees_the_full_iterate(jump_problem):
    A, xs, b = jump_problem
    seen = []
    mpsolve.solve(A, b, method="cg", precond="jacobi", precision="eft", rtol=1e-16,
                  escalate=False, callback=lambda x: seen.append(forward_error(x, xs)))
    # every call is an iterate of x (not of a correction): errors below 1 from early on,
    # and the last ones at the refined accuracy
    assert len(seen) > 10 and max(seen[len(seen) // 2:]) < 1e-6 and seen[-1] < 1e-14


def test_reference_device_runs_the_dd_stage(jump_problem):
    A = int_jump3d(5, 1e6)
    xs, b = exact_problem(A)
    kw = dict(method="cg", precond="jacobi", precision="eft", rtol=1e-16, escalate=False)
    ref = mpsolve.solve(A, b, device="reference", **kw)
    cpu = mpsolve.solve(A, b, **kw)
    assert forward_error(ref.x, xs) <= 10 * U and forward_error(cpu.x, xs) <= 10 * U


def test_linear_operator_runs_the_fp64_way():
    """No matrix entries: no compensated residual; the eft preset still solves (its
    compensated dots) and says nothing false."""
    from scipy.sparse.linalg import aslinearoperator

    A = int_jump3d(5, 1e3)
    xs, b = exact_problem(A)
    res = mpsolve.solve(aslinearoperator(A), b, method="cg", precision="eft", rtol=1e-10)
    assert res.info == 0 and res.x_lo is None
    assert np.linalg.norm(b - A @ res.x) <= 1e-10 * np.linalg.norm(b) * 1.01


def test_double_and_mixed_are_unchanged_by_the_dd_path(jump_problem):
    """``double``/``mixed`` never enter the dd stage (bit-for-bit the old krylov stage)."""
    import mpsolve.driver as driver

    A, xs, b = jump_problem
    calls = []
    orig = driver.dd_stage

    def spy(*a, **k):
        calls.append(1)
        return orig(*a, **k)

    driver.dd_stage = spy
    try:
        for prec in ("double", "mixed"):
            mpsolve.solve(A, b, method="cg", precond="jacobi", precision=prec, rtol=1e-10)
        assert not calls
        mpsolve.solve(A, b, method="cg", precond="jacobi", precision="eft", rtol=1e-10)
        assert calls
    finally:
        driver.dd_stage = orig


def test_a_tolerance_below_fp64s_floor_escalates_double_to_eft(jump_problem):
    """``double``'s floor (10 eps) is above rtol = 1e-16: with escalate=True the solve
    starts as ``eft``, whose double-double floor is below it, and gains its accuracy;
    ``mixed-eft`` stays itself (refinement with an FP32 preconditioner gets as far)."""
    A, xs, b = jump_problem
    r = mpsolve.solve(A, b, method="cg", precond="jacobi", precision="double", rtol=1e-16)
    assert r.precision == "eft" and "floor" in r.escalations[0].reason
    assert forward_error(r.x, xs) <= 10 * U
    m = mpsolve.solve(A, b, method="cg", precond="jacobi", precision="mixed-eft", rtol=1e-16)
    assert m.precision == "mixed-eft" and not m.escalations
    assert forward_error(m.x, xs) <= 10 * U
    assert Precision.preset("eft").floor < 1e-30 < Precision.preset("double").floor


def test_dd_kernels_propagate_non_finite_values():
    A = sp.csr_matrix(np.array([[1.0, 2.0], [0.0, 3.0]]))
    ip, ix = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    xh, xl, b = np.array([np.inf, 1.0]), np.zeros(2), np.ones(2)
    for device in ("cpu", "reference"):
        r, rl = np.empty(2), np.empty(2)
        with np.errstate(all="ignore"):
            lookup(device, "residual_dd", ("float64",))(launch_plan(device, "spmv", ip), ip,
                                                        ix, A.data, xh, xl, b, r, rl)
        assert not np.isfinite(r[0]) and r[1] == -2.0
        yh, yl = np.array([1.0, 2.0]), np.zeros(2)
        with np.errstate(all="ignore"):
            lookup(device, "dd_axpy", ("float64",))(1.0, np.array([np.nan, 1.0]), yh, yl)
        assert np.isnan(yh[0]) and yh[1] == 3.0


# ----------------------------------------------------------------- the accuracy bench's oracles
def _fraction_solve(A, b):
    """Gaussian elimination in exact rational arithmetic."""
    n = A.shape[0]
    M = [[Fraction(float(v)) for v in row] + [Fraction(float(bi))]
         for row, bi in zip(A.toarray(), b)]
    for k in range(n):
        p = next(i for i in range(k, n) if M[i][k] != 0)
        M[k], M[p] = M[p], M[k]
        for i in range(k + 1, n):
            f = M[i][k] / M[k][k]
            M[i] = [a - f * c for a, c in zip(M[i], M[k])]
    x = [Fraction(0)] * n
    for i in reversed(range(n)):
        x[i] = (M[i][n] - sum(M[i][j] * x[j] for j in range(i + 1, n))) / M[i][i]
    return x


def test_bench_reference_solution_is_exact_to_double_double():
    """The accuracy bench's x* for SuiteSparse matrices: dense LU refined with exactly
    rounded residuals; against exact rational elimination on an ill-conditioned system."""
    from mpsolve.bench.bench_accuracy import exact_rhs, reference_solution

    n = 12
    rng = np.random.default_rng(3)
    H = np.array([[1.0 / (i + j + 1) for j in range(n)] for i in range(n)])   # Hilbert
    A = sp.csr_matrix(H + np.diag(rng.uniform(0, 1e-8, n)))      # cond ~ 1e9
    xi = rng.integers(-9, 10, n).astype(np.float64)
    b = exact_rhs(A, xi)
    assert np.array_equal(b, [float(q) for q in
                              (sum((Fraction(float(a)) * Fraction(float(x))
                                    for a, x in zip(row, xi)), Fraction(0))
                               for row in A.toarray())])       # each row rounded once
    xh, xl = reference_solution(A, b)
    exact = _fraction_solve(A, b)
    err = max(abs(float(Fraction(float(h)) + Fraction(float(lo)) - q))
              for h, lo, q in zip(xh, xl, exact))
    assert err <= 1e-25 * max(abs(float(q)) for q in exact)
    assert all(h == float(q) for h, q in zip(xh, exact))        # x* rounded correctly


def test_dd_kernel_docstring_examples_run():
    import doctest
    import importlib

    mod = importlib.import_module("mpsolve.kernels.cpu.dd")
    res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert res.attempted >= 2 and res.failed == 0


# ----------------------------------------------------------------- complex data
def test_real_form_is_the_complex_product_through_views():
    """``real_form(C) @ x.view(float64) == (C @ x).view(float64)``, exactly on small
    integers (so the double-double kernels run on complex data through views)."""
    from mpsolve.refine import real_form
    rng = np.random.default_rng(3)
    n = 30
    C = sp.random(n, n, density=0.2, random_state=rng, format="csr")
    C.data = rng.integers(-9, 10, C.nnz) + 1j * rng.integers(-9, 10, C.nnz)
    C = sp.csr_matrix(C + sp.eye(n) * (1 - 2j))
    x = rng.integers(-9, 10, n) + 1j * rng.integers(-9, 10, n)
    R = real_form(C)
    assert R.shape == (2 * n, 2 * n) and R.has_canonical_format
    assert np.array_equal(R @ x.view(np.float64), (C @ x).view(np.float64))
    assert np.array_equal(np.diff(R.indptr), np.repeat(2 * np.diff(C.indptr), 2))


def test_complex_dd_residual_within_its_bound():
    """The Dot2 residual of complex data (``residual_dd`` on the real form) is within the
    bound :meth:`Problem.certified` adds for it, ``u ||res|| + sqrt(2) gamma_{4m+1}^2
    ||v||``, against the exact residual (``fractions``), on rows that cancel."""
    from mpsolve._system import make_problem
    from mpsolve.refine import _dd_kernels
    rng = np.random.default_rng(7)
    n = 60
    A = sp.random(n, n, density=0.15, random_state=rng, format="csr")
    A.data = (rng.standard_normal(A.nnz) + 1j * rng.standard_normal(A.nnz)) * \
        10.0 ** rng.integers(-6, 7, A.nnz)
    A = sp.csr_matrix(A + sp.eye(n) * (2 + 1j))
    A.sort_indices()
    x = (rng.standard_normal(n) + 1j * rng.standard_normal(n)) * 10.0 ** rng.integers(-4, 5, n)
    b = A @ x                                      # b - A x: rounding only
    p = make_problem(A, b, rtol=1e-30)
    residual_dd, _ = _dd_kernels(p, Precision.preset("eft"))
    r, rl = np.empty(n, np.complex128), np.empty(n, np.complex128)
    residual_dd(x, np.zeros(n, np.complex128), p.b64, r, rl)
    err2 = res2 = Fraction(0)
    for i in range(n):
        lo, hi = A.indptr[i], A.indptr[i + 1]
        re, im = Fraction(b[i].real), Fraction(b[i].imag)
        for a, j in zip(A.data[lo:hi], A.indices[lo:hi]):
            ar, ai, xr, xi = (Fraction(v) for v in (a.real, a.imag, x[j].real, x[j].imag))
            re -= ar * xr - ai * xi
            im -= ar * xi + ai * xr
        res2 += re * re + im * im
        err2 += (Fraction(r[i].real) - re) ** 2 + (Fraction(r[i].imag) - im) ** 2
    err, res = float(err2) ** 0.5, float(res2) ** 0.5
    bound = p.residual_bound(x, dd=True) + U * res
    assert err <= bound
    # the exact residual is b's rounding (nonzero), far below FP64's bound of it
    assert res > 0 and bound < 1e-10 * p.residual_bound(x)


def test_complex_eft_refines_past_fp64s_floor():
    """Complex data get the double-double stage too (they ran the FP64 stages: 'stagnated
    at the accuracy floor of precision eft' at rtol 1e-15 where the real twin converged).
    A complex integer problem with an exact solution: the forward error gain of the real
    case, the low part complex."""
    A = sp.csr_matrix(int_jump3d(9, 1e7) * (1 + 1j))
    rng = np.random.default_rng(5)
    xs = rng.integers(-100, 101, A.shape[0]) + 1j * rng.integers(-100, 101, A.shape[0])
    b = A @ xs
    assert np.array_equal(b, np.round(b.real) + 1j * np.round(b.imag))      # exact
    kw = dict(method="gmres", precond="jacobi", rtol=1e-16, escalate=False, maxiter=20000)
    d = mpsolve.solve(A, b, precision="double", **kw)
    e = mpsolve.solve(A, b, precision="eft", **kw)
    fe_d, fe_e = forward_error(d.x, xs), forward_error(e.x, xs)
    assert fe_e <= max(fe_d / 100, 10 * U), (fe_d, fe_e)
    assert e.x_lo is not None and e.x_lo.dtype == np.complex128
    assert np.all(np.abs(e.x_lo) <= 2 * U * np.abs(e.x))
    # an ordinary tolerance is met and certified (it stagnated at 1e-15 before)
    from mpsolve.matrices import generate
    Ac = sp.csr_matrix(generate("convdiff2d:20,peclet=5") * (1 + 0.3j))
    bc = Ac @ np.ones(Ac.shape[0])
    for prec in ("eft", "mixed-eft"):
        res = mpsolve.solve(Ac, bc, method="gmres", precond="ilu0", rtol=1e-15,
                            precision=prec)
        assert res.info == 0, res.status
        assert np.linalg.norm(bc - Ac @ res.x) <= 1.01e-15 * np.linalg.norm(bc)


def _jump2d(m=20, jump=1e6, seed=5):
    """A 2-D diffusion matrix with integer coefficients jumping by ``jump`` between random
    cells (condition ~1e7) and an integer solution: ``b = A x*`` exactly."""
    rng = np.random.default_rng(seed)
    k = np.where(rng.random((m + 1, m + 1)) < 0.5, 1.0, jump)
    rows, cols, vals = [], [], []
    for i in range(m):
        for j in range(m):
            s = 0.0
            for di, dj, c in ((1, 0, k[i + 1, j]), (-1, 0, k[i, j]), (0, 1, k[i, j + 1]),
                              (0, -1, k[i, j])):
                s += c
                if 0 <= i + di < m and 0 <= j + dj < m:
                    rows.append(i * m + j)
                    cols.append((i + di) * m + j + dj)
                    vals.append(-c)
            rows.append(i * m + j)
            cols.append(i * m + j)
            vals.append(s)
    A = sp.csr_matrix((vals, (rows, cols)), shape=(m * m, m * m))
    return A, A @ rng.integers(-3, 4, m * m).astype(float)


@pytest.mark.parametrize("precision", ["eft", "mixed-eft",
                                       Precision(name="dots", dot="compensated")])
def test_a_failed_bicgstab_returns_its_best_iterate(precision):
    """BiCGSTAB with compensated dots near its breakdown (r0^H r tiny but not zero) on a
    coefficient-jump problem reaches a residual of ~2e-9 and then grows (to 1e9 and beyond
    over 20000 iterations): the answer was its start (residual 1) or the last, grown
    iterate.  Now the best iterate of the failed run, recomputed from the run's start:
    the very x a run stopped there computes (the bodies are deterministic), and said."""
    A, b = _jump2d()
    res = mpsolve.solve(A, b, method="bicgstab", precond="jacobi", precision=precision,
                        rtol=1e-10, maxiter=3000)
    assert res.info == 3000 and res.iterations == 3000
    best = int(np.argmin(res.residuals)) + 1
    assert res.residuals[-1] > 100 * res.residuals[best - 1]
    assert f"its iterate of iteration {best}, recomputed" in res.status
    true = np.linalg.norm(b - A @ res.x) / np.linalg.norm(b)
    assert true <= 5e-9 and true == pytest.approx(res.true_residual, rel=1e-6)
    there = mpsolve.solve(A, b, method="bicgstab", precond="jacobi", precision=precision,
                          rtol=1e-10, maxiter=best)
    np.testing.assert_array_equal(res.x, there.x)


def test_a_run_the_callback_stopped_is_not_replayed():
    """The best-iterate replay is for failed runs: a run the caller's callback stopped
    returns the iterate it stopped at (info -15), however far above its best."""
    A, b = _jump2d()
    calls = []

    def stop(xk):
        calls.append(1)
        return len(calls) >= 2990
    res = mpsolve.solve(A, b, method="bicgstab", precond="jacobi",
                        precision=Precision(name="dots", dot="compensated"), rtol=1e-10,
                        maxiter=3000, callback=stop)
    assert res.info == -15 and res.iterations == 2990 and "recomputed" not in res.status
    assert res.residuals[-1] > 100 * res.residuals.min()
    true = np.linalg.norm(b - A @ res.x) / np.linalg.norm(b)      # x: not the best one
    assert true > 10 * res.residuals.min() and true == pytest.approx(res.true_residual,
                                                                       rel=1e-6)


@pytest.mark.parametrize("precision", ["ir", "eft", "mixed-eft", "single"])
@pytest.mark.parametrize("method", ["cg", "gmres", "bicgstab"])
def test_a_callback_stop_is_honoured_by_the_refinement_policies(precision, method):
    """A callback returning True stops the solve under the refinement policies too: a stop
    asked on an inner solve's last iteration (which the body reports as converged) was
    lost -- 'ir' GMRES with callback_type='x' never stopped, CG stopped one call late."""
    n = 200
    A = sp.diags([-1.2 * np.ones(n - 1), 4 * np.ones(n), -0.8 * np.ones(n - 1)], [-1, 0, 1],
                 format="csr")
    if method == "cg":
        A = sp.csr_matrix(A + A.T)
    b = np.random.default_rng(1).standard_normal(n)
    func = getattr(mpsolve, method)
    kw = {"callback_type": "x"} if method == "gmres" else {}
    free = []
    func(A, b, rtol=1e-12, precision=precision, callback=lambda xk: free.append(1), **kw)
    for k in range(1, len(free) + 1):
        calls = []
        x, info = func(A, b, rtol=1e-12, precision=precision,
                       callback=lambda xk: (calls.append(1), len(calls) >= k)[1], **kw)
        assert len(calls) == k
        met = np.linalg.norm(b - A @ x) <= 1e-12 * np.linalg.norm(b)
        assert info == (0 if met else -15)
