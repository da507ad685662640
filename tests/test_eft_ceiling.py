"""The measuring instrument of ``bench/bench_eft_ceiling.py`` (issue 15's iteration ceiling):
its double-double kernels against exact rational arithmetic, its CG against an exact
rational CG, and its three methods in every arithmetic against mpsolve's own solves."""
from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest
import scipy.sparse as sp

from mpsolve import solve
from mpsolve.bench import bench_eft_ceiling as C
from mpsolve.matrices import convection_diffusion2d, poisson2d

U = F(1, 2 ** 53)


def gamma(m):
    return m * U / (1 - m * U)


def _pairs(rng, n, scale=2.0 ** 20):
    """``n`` normalised double-double numbers: integers (some huge, for cancellation)
    plus a low part far below their last bit."""
    hi = rng.integers(-2 ** 40, 2 ** 40, n).astype(np.float64) * \
        2.0 ** rng.integers(-30, 30, n)
    lo = rng.standard_normal(n) * np.abs(hi) * 2.0 ** -60
    out_h, out_l = np.empty(n), np.empty(n)
    for i in range(n):
        out_h[i], out_l[i] = C.fast_two_sum(hi[i], lo[i])
    return out_h, out_l


def _exact(h, l):
    return [F(a) + F(b) for a, b in zip(h, l)]


def test_scalar_dd_operations_within_their_bounds():
    rng = np.random.default_rng(0)
    xh, xl = _pairs(rng, 300)
    yh, yl = _pairs(rng, 300)
    for a, al, b, bl in zip(xh, xl, yh, yl):
        A, B = F(a) + F(al), F(b) + F(bl)
        for f, exact, bound in ((C.dd_add, A + B, 3), (C.dd_mul, A * B, 4),
                                (C.dd_div, A / B, 10)):
            h, l = f(a, al, b, bl)
            assert abs(h) >= abs(l) * 2 ** 52 or l == 0            # normalised pair
            if exact != 0:
                assert abs(F(h) + F(l) - exact) <= bound * U * U * abs(exact)
        h, l = C.dd_sqrt(abs(a), al if a > 0 else -al)          # the pair |A|
        S, A2 = F(h) + F(l), abs(A)
        assert abs(S * S - A2) <= 2 * 10 * U * U * A2              # sqrt to 10 u^2


@pytest.mark.parametrize("n", [1, 7, 64, 300])
def test_dd_dot_within_the_dot2_bound(n):
    rng = np.random.default_rng(n)
    xh, xl = _pairs(rng, n)
    yh, yl = _pairs(rng, n)
    if n > 2:                                    # heavy cancellation: the sum nearly 0
        xh[-1], xl[-1] = -xh[0], -xl[0]
        yh[-1], yl[-1] = yh[0], yl[0]
    X, Y = _exact(xh, xl), _exact(yh, yl)
    exact = sum(a * b for a, b in zip(X, Y))
    mag = sum(abs(a * b) for a, b in zip(X, Y))
    h, l = C.dd_dot(xh, xl, yh, yl)
    err = abs(F(h) + F(l) - exact)
    assert err <= (2 * n * (n + 4) + 8) * U * U * mag
    if n > 2:                                    # FP64 does far worse: the test can fail
        assert abs(F(float(np.dot(xh, yh))) - exact) > (2 * n * (n + 4) + 8) * U * U * mag


def test_dd_spmv_within_the_row_bound():
    rng = np.random.default_rng(3)
    n = 40
    A = sp.random(n, n, density=0.2, random_state=4, format="csr") + sp.eye(n)
    A.data = np.round(A.data * 2 ** 20) * 2.0 ** rng.integers(-8, 8, A.nnz)
    A = C._csr(A)
    xh, xl = _pairs(rng, n)
    ar = C.DDArith(A, np.zeros(n))
    y = ar.spmv(C.DV(xh, xl))
    X = _exact(xh, xl)
    for i in range(n):
        cols = A.indices[A.indptr[i]:A.indptr[i + 1]]
        vals = A.data[A.indptr[i]:A.indptr[i + 1]]
        exact = sum(F(a) * X[j] for a, j in zip(vals, cols))
        mag = sum(abs(F(a)) * (abs(F(xh[j])) + abs(F(xl[j]))) for a, j in zip(vals, cols))
        k = len(cols)
        assert abs(F(y.h[i]) + F(y.l[i]) - exact) <= gamma(2 * k + 1) ** 2 * mag


def _exact_pcg(A, b, steps):
    """Jacobi-PCG in rational arithmetic: the iterates x_1 .. x_steps."""
    n = len(b)
    Ad = A.toarray()
    M = [[F(v) for v in row] for row in Ad]
    d = [M[i][i] for i in range(n)]
    x = [F(0)] * n
    r = [F(v) for v in b]
    z = [ri / di for ri, di in zip(r, d)]
    p = list(z)
    rz = sum(a * c for a, c in zip(r, z))
    out = []
    for _ in range(steps):
        q = [sum(M[i][j] * p[j] for j in range(n)) for i in range(n)]
        alpha = rz / sum(a * c for a, c in zip(p, q))
        x = [xi + alpha * pi for xi, pi in zip(x, p)]
        r = [ri - alpha * qi for ri, qi in zip(r, q)]
        z = [ri / di for ri, di in zip(r, d)]
        rz_new = sum(a * c for a, c in zip(r, z))
        p = [zi + rz_new / rz * pi for zi, pi in zip(z, p)]
        rz = rz_new
        out.append(x)
    return out


def _rel(x, ref):
    num = sum((a - c) ** 2 for a, c in zip(x, ref))
    den = sum(c ** 2 for c in ref)
    return float(num / den) ** 0.5


def test_dd_cg_follows_exact_rational_cg():
    rng = np.random.default_rng(5)
    n = 8
    B = rng.integers(-9, 10, (n, n)).astype(np.float64)
    A = C._csr(sp.csr_matrix(B @ B.T + np.diag(rng.integers(1, 40, n).astype(np.float64))))
    b = rng.integers(-50, 51, n).astype(np.float64)
    ref = _exact_pcg(A, b, 6)
    for k in range(1, 7):
        dd = C.DDArith(A, b)
        x = dd.zeros()
        steps, flag = C.cg_body(dd, x, dd.residual(x), k, 0.0)
        assert (steps, flag) == (k, 1)
        assert _rel(_exact(x.h, x.l), ref[k - 1]) <= 1e-28
        f64 = C.F64(A, b)
        x64 = f64.zeros()
        C.cg_body(f64, x64, f64.residual(x64), k, 0.0)
        e64 = _rel([F(v) for v in x64], ref[k - 1])
        assert 1e-20 < e64 <= 1e-12                  # FP64: its own rounding, visible
        ld = C.LD(A, b)
        xl = ld.zeros()
        C.cg_body(ld, xl, ld.residual(xl), k, 0.0)
        assert _rel(_exact(*ld.pair(xl)), ref[k - 1]) <= 1e-16


@pytest.mark.parametrize("method", ["cg", "bicgstab", "gmres"])
def test_instrument_solves_and_matches_mpsolve(method):
    """Every arithmetic converges to the tolerance by the accurate true residual; the FP64
    instrument's count is mpsolve's ``double`` count (same algorithm, other rounding
    order) to a few iterations."""
    A = poisson2d(12) if method == "cg" else convection_diffusion2d(12, peclet=5.0)
    A = C._csr(A)
    b = A @ np.linspace(-1.0, 2.0, A.shape[0])
    rtol = 1e-10
    kw = dict(restart=C.RESTART) if method == "gmres" else {}
    ref = solve(A, b, method=method, precond="jacobi", precision="double", rtol=rtol,
                escalate=False, **kw)
    assert ref.info == 0
    for name, cls in C.ARITHS.items():
        ar = cls(A, b)
        it, flag, x = C.instrument(ar, method, rtol, 2000)
        assert flag == 0, name
        assert C.accurate_residual(A, b, *ar.pair(x)) <= rtol, name
        assert abs(it - ref.iterations) <= max(2, ref.iterations // 20), (name, it)


def test_work_counts_dd_costs_more_per_iteration():
    (f0, b0), (f1, b1) = C.work("cg", 1000, 5000)
    assert f0 == 5000 * 2 + 1000 * (3 * 2 + 3 * 2 + 1)
    assert f1 > 8 * f0 and 1.2 * b0 < b1 < 2 * b0


def test_exact_count_is_rational_cgs():
    """cg_exact_count (Lanczos, full reorthogonalisation) stops where exact rational PCG
    first meets the tolerance."""
    rng = np.random.default_rng(6)
    n = 8
    B = rng.integers(-9, 10, (n, n)).astype(np.float64)
    A = C._csr(sp.csr_matrix(B @ B.T + np.diag(rng.integers(1, 40, n).astype(np.float64))))
    b = rng.integers(-50, 51, n).astype(np.float64)
    ref = _exact_pcg(A, b, n)
    Ab = [[F(v) for v in row] for row in A.toarray()]
    res = [sum((F(bi) - sum(a * xj for a, xj in zip(row, x))) ** 2
               for bi, row in zip(b, Ab)) for x in ref]             # ||b - A x_k||^2
    nb2 = sum(F(v) ** 2 for v in b)
    checked = 0
    for k in range(1, n):
        best = min([nb2] + res[:k - 1])          # the smallest residual before step k
        if not 0 < res[k - 1] < best:
            continue                             # step k is not a first crossing
        # a tolerance between the two (geometric mean): step k is the first to meet it
        rtol = (float(res[k - 1]) * float(best)) ** 0.25 / float(nb2) ** 0.5
        assert res[k - 1] < F(rtol) ** 2 * nb2 < best
        assert C.cg_exact_count(A, b, rtol, 100) == (k, 0)
        checked += 1
    assert checked >= 4


def test_exact_count_shows_cgs_delay_that_precision_does_not_remove():
    """A Strakos spectrum (eigenvalues dense at the low end, a few outliers): exact CG ends
    within n steps, FP64 CG takes far more, double-double still more than exact."""
    n = 48
    i = np.arange(n)
    lam = 0.1 + i / (n - 1) * (1000.0 - 0.1) * 0.8 ** (n - 1 - i)
    Q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((n, n)))
    Ad = (Q * lam) @ Q.T
    A = C._csr(sp.csr_matrix((Ad + Ad.T) / 2))                     # exactly symmetric
    b = A @ np.ones(n)
    k_exact, flag = C.cg_exact_count(A, b, 1e-10, 1000)
    assert flag == 0 and k_exact <= n
    k64 = C.instrument(C.F64(A, b), "cg", 1e-10, 1000)[0]
    kdd = C.instrument(C.DDArith(A, b), "cg", 1e-10, 1000)[0]
    assert k64 > 2 * n and k_exact < kdd < k64
    with pytest.raises(ValueError, match="symmetric"):
        C.cg_exact_count(C._csr(sp.csr_matrix(Ad + np.triu(Ad, 1) * 1e-3)), b, 1e-10, 10)
