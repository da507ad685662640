"""A converged solve is a certified one: the FP64 true residual carries its rounding bound.

``||b - A x||`` computed in FP64 is off by up to ``gamma_{m+1} || |b| + |A| |x| ||``.  Where
``|A| |x|`` dwarfs ``|b|`` -- the diverged iterate of an inconsistent singular system --
``b - A x`` cancels to rounding noise, and a computed residual of 0 used to read as
"converged" (CG + Jacobi on ``[[1, 1], [1, 1]] x = [1, 2]`` returned ``x = 5.6e31 [-1, 1]``
with ``info = 0``).  The oracle here is the exact residual of the returned FP64 ``x``
(``fractions``), not another FP64 residual, which cancels the same way.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

import mpsolve
from mpsolve._system import CERTIFY, make_problem
from mpsolve.kernels.reference import exact_cdot
from mpsolve.kernels.registry import launch_plan, lookup
from mpsolve.matrices import poisson2d


def _exact_rows(A, b, x):
    """The rows of ``b - A x`` (FP64 or complex128 data) exactly: ``(re, im)`` Fraction
    pairs, by the reference's ``exact_cdot`` of ``conj([b_i, a_i])`` with ``[1, -x]``."""
    A = sp.csr_matrix(A)
    out = []
    for i in range(A.shape[0]):
        lo, hi = A.indptr[i], A.indptr[i + 1]
        out.append(exact_cdot(np.conj(np.r_[b[i], A.data[lo:hi]].astype(np.complex128)),
                              np.r_[1.0, -np.asarray(x)[A.indices[lo:hi]]].astype(np.complex128)))
    return out


def _exact_residual_norm(A, b, x) -> float:
    """``||b - A x||_2`` of FP64 ``A``, ``b``, ``x``, exactly (then rounded)."""
    return float(sum(re * re + im * im for re, im in _exact_rows(A, b, x))) ** 0.5


def _inconsistent_singular():
    """Two systems without a solution: the iterates of CG/BiCGSTAB run off along the null
    vector, where ``b - A x`` cancels."""
    A1 = sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 1.0]]))
    # 1-D Neumann Laplacian (null vector: ones) with a b that is not orthogonal to it
    n = 30
    L = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tolil()
    L[0, 0] = L[n - 1, n - 1] = 1.0
    return [(A1, np.array([1.0, 2.0])), (sp.csr_matrix(L), np.linspace(1.0, 2.0, n))]


@pytest.mark.parametrize("system", [0, 1])
@pytest.mark.parametrize("method,precond", [("auto", "auto")] + [
    (m, p) for m in ("cg", "gmres", "bicgstab") for p in ("jacobi", None)])
@pytest.mark.parametrize("precision", ["double", "mixed", "eft"])
def test_no_false_success_where_the_residual_cancels(system, method, precond, precision):
    A, b = _inconsistent_singular()[system]
    rtol = 1e-5
    kw = dict(method=method, precond=precond)
    res = mpsolve.solve(A, b, rtol=rtol, precision=precision, maxiter=200, **kw)
    exact = _exact_residual_norm(A, b, res.x)
    bnrm = float(np.linalg.norm(b))
    # no x solves these systems: nothing may claim convergence, and the reported residual
    # is an upper bound of the exact one
    assert res.info != 0 and not res.converged, res.status
    assert exact >= 0.1 * bnrm           # (the least-squares residual of both is that large)
    assert res.true_residual * bnrm >= exact * (1 - 1e-12)


def test_the_old_false_success_is_named():
    """The case found by fuzzing: CG + Jacobi in FP64 on the 2 x 2 system."""
    A, b = _inconsistent_singular()[0]
    res = mpsolve.solve(A, b, method="cg", precond="jacobi", precision="double")
    assert res.info > 0
    assert _exact_residual_norm(A, b, res.x) <= res.true_residual * np.linalg.norm(b)


@pytest.mark.parametrize("seed", range(6))
def test_residual_bound_bounds_the_rounding_of_the_fp64_residual(seed):
    """``Problem.residual_bound(x)`` >= ``||fl(b - A x) - (b - A x)||_2`` (exact), on
    rows with wide dynamic range and cancellation; complex rows too."""
    rng = np.random.default_rng(seed)
    n = 40
    A = sp.random(n, n, density=0.3, random_state=rng, format="csr")
    A.data = rng.standard_normal(A.nnz) * 10.0 ** rng.uniform(-6, 6, A.nnz)
    A = sp.csr_matrix(A + sp.identity(n))
    cplx = seed % 2 == 1
    x = rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n)
    if cplx:
        A = sp.csr_matrix(A * (1 + 0.5j))
        x = x * (0.3 - 1j)
    b = A @ x                                    # b - A x cancels in every row
    b = b + rng.standard_normal(n) * 1e-12 * np.abs(b)
    p = make_problem(A, b, rtol=1e-30)
    r = np.empty(n, p.hp)
    p._first_residual = False
    p.true_residual(x.astype(p.hp), r)           # the FP64 residual, as the driver makes it
    bound = p.residual_bound(x.astype(p.hp))
    err2 = Fraction(0)
    for (re, im), ri in zip(_exact_rows(A, b, x), r.astype(np.complex128)):
        err2 += (Fraction(ri.real) - re) ** 2 + (Fraction(ri.imag) - im) ** 2
    err = float(err2) ** 0.5
    assert err > 0                                # the rounding is there to bound
    assert bound >= err
    assert bound <= 1e6 * err                     # and the bound is not vacuous


def test_certified_residual_is_the_computed_one_where_rounding_is_negligible():
    """Ordinary solves report the computed FP64 residual unchanged (the bound is below
    ``CERTIFY`` times the tolerance), so answers and figures are as before."""
    A = poisson2d(12)
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, method="cg", precond="jacobi", precision="double", rtol=1e-8)
    x = res.x
    p = make_problem(A, b, rtol=1e-8)
    assert p.residual_bound(x) <= CERTIFY * p.tol
    assert res.true_residual == pytest.approx(
        np.linalg.norm(b - A @ x) / np.linalg.norm(b), rel=1e-6)


def _residual_case(dt, n, seed):
    """A random ``n x n`` CSR matrix with values of ``dt[0]`` (some rows empty; complex:
    the real values times ``1 - 2j``), ``x`` and ``b`` of ``dt[1]``, and the int32 index
    arrays."""
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=min(0.2, 8 / n), random_state=rng, format="csr")
    A.data = rng.standard_normal(A.nnz)
    vdt, xdt = (np.dtype(d) for d in dt)
    A = sp.csr_matrix(A.astype(vdt) * (1 - 2j if vdt.kind == "c" else 1))
    x = rng.standard_normal(n).astype(xdt)
    b = rng.standard_normal(n).astype(xdt)
    if vdt.kind == "c":
        x = (x * (0.5 + 1j)).astype(xdt)
    return A, x, b, A.indptr.astype(np.int32), A.indices.astype(np.int32)


def _scale_oracle(A, x, b):
    """``sum_i (|b_i| + (|A| |x|)_i)^2`` by NumPy, moduli in FP64."""
    wide = np.complex128 if A.dtype.kind == "c" else np.float64
    absA = sp.csr_matrix((np.abs(A.data.astype(wide)), A.indices, A.indptr), shape=A.shape)
    v = np.abs(b.astype(wide)) + absA @ np.abs(x.astype(wide))
    return float(v @ v)


@pytest.mark.parametrize("device", ["cpu", "reference"])
@pytest.mark.parametrize("dt", [("float64", "float64"), ("float32", "float64"),
                                ("float32", "float32"), ("complex128", "complex128"),
                                ("complex64", "complex128")])
@pytest.mark.parametrize("n", [37, 50_000])                # serial and parallel launch plans
def test_residual_scale_kernel(device, dt, n):
    """``residual_scale`` = ``sum_i (|b_i| + (|A| |x|)_i)^2`` (NumPy in FP64), empty rows
    included; ``inf`` when it overflows."""
    A, x, b, ip, ix = _residual_case(dt, n, seed=n)
    vdt, xdt = A.dtype, x.dtype
    kern = lookup(device, "residual_scale", (vdt, xdt, xdt), "acc64")
    plan = launch_plan(device, "spmv", ip)
    got = kern(plan, ip, ix, A.data, x, b)
    assert got == pytest.approx(_scale_oracle(A, x, b), rel=1e-12)
    if xdt.itemsize * (2 if xdt.kind == "f" else 1) == 16:       # an FP64 x can overflow v^2
        assert kern(plan, ip, ix, A.data, x * 1e200, b) == np.inf


@pytest.mark.parametrize("device", ["cpu", "reference"])
@pytest.mark.parametrize("dt", [("float64", "float64"), ("float32", "float64"),
                                ("complex128", "complex128"), ("complex64", "complex128")])
@pytest.mark.parametrize("n", [37, 50_000])                # serial and parallel launch plans
def test_residual_norms_kernel(device, dt, n):
    """``residual_norms`` writes ``r = b - A x`` (on the cpu: the ``residual`` kernel's
    bits) and returns ``||r||^2`` and the bound's sum (NumPy's, and on the cpu the
    ``residual_scale`` kernel's bits: both add in row order); non-finite sums where ``x``
    overflows or holds a NaN."""
    A, x, b, ip, ix = _residual_case(dt, n, seed=n + 1)
    vdt, xdt = A.dtype, x.dtype
    plan = launch_plan(device, "spmv", ip)
    key = (vdt, xdt, xdt, xdt)
    r = np.empty(n, xdt)
    ssq, s = lookup(device, "residual_norms", key, "acc64")(plan, ip, ix, A.data, x, b, r)
    wide = np.complex128 if vdt.kind == "c" else np.float64
    exact = b.astype(wide) - sp.csr_matrix(A, dtype=wide) @ x.astype(wide)
    np.testing.assert_allclose(r, exact, rtol=0,
                               atol=1e-13 * np.sqrt(_scale_oracle(A, x, b)))
    assert ssq == pytest.approx(float(np.vdot(r, r).real), rel=1e-12)
    assert s == pytest.approx(_scale_oracle(A, x, b), rel=1e-12)
    if device == "cpu":
        r0 = np.empty(n, xdt)
        lookup(device, "residual", key, "acc64")(plan, ip, ix, A.data, x, b, r0)
        np.testing.assert_array_equal(r, r0)
        assert s == lookup(device, "residual_scale", (vdt, xdt, xdt), "acc64")(
            plan, ip, ix, A.data, x, b)
    big = lookup(device, "residual_norms", key, "acc64")(plan, ip, ix, A.data, x * 1e200, b,
                                                         r)
    assert big == (np.inf, np.inf)
    x[3] = np.nan
    with np.errstate(invalid="ignore"):
        bad = lookup(device, "residual_norms", key, "acc64")(plan, ip, ix, A.data, x, b, r)
    assert not any(np.isfinite(bad))


@pytest.mark.parametrize("method", ["cg", "gmres"])
def test_no_false_success_in_a_block_of_right_hand_sides(method):
    """Several right-hand sides iterated together: each column is judged as a single
    solve is (certified), so the inconsistent column fails and the consistent one
    converges."""
    A, b = _inconsistent_singular()[0]
    good = np.array([1.0, 1.0])                        # in the range of A: solvable
    B = np.stack([b, good], axis=1)
    res = mpsolve.solve(A, B, method=method, precond="jacobi", precision="double",
                        rtol=1e-8, maxiter=400)
    assert res.column_info[0] != 0
    assert res.column_info[1] == 0
    assert _exact_residual_norm(A, good, res.x[:, 1]) <= 1e-8 * np.linalg.norm(good)


@pytest.mark.parametrize("method", ["cg", "auto"])
@pytest.mark.parametrize("cplx", [False, True])
def test_a_float32_answer_is_judged_as_returned(method, cplx):
    """Float32 (complex64) data get x in their own dtype.  A tolerance below what that dtype
    holds is not met by the rounded answer, whatever the FP64 iterate reached: info > 0
    with the reason, and the residual reported is the returned x's.  Where the rounding
    costs nothing against the tolerance, it converges as before; FP64 b gives an FP64 x."""
    from mpsolve.matrices import magnetic2d

    A = magnetic2d(20) if cplx else poisson2d(20)     # (Hermitian positive definite: CG's)
    n = A.shape[0]
    dt = np.complex64 if cplx else np.float32
    A32 = sp.csr_matrix(A.astype(dt))
    b32 = (A32 @ np.linspace(1, 2, n).astype(dt)).astype(dt)
    kw = {} if method == "auto" else dict(method="cg", precond="jacobi")
    wide = np.complex128 if cplx else np.float64

    def returned(res, b):
        r = b.astype(wide) - A32.astype(wide) @ res.x.astype(wide)
        return np.linalg.norm(r) / np.linalg.norm(b.astype(wide))

    tight = mpsolve.solve(A32, b32, rtol=1e-8, **kw)
    assert tight.x.dtype == dt and tight.info > 0 and not tight.converged
    assert f"x rounded to {np.dtype(dt).name} misses the tolerance" in tight.status
    assert tight.true_residual == pytest.approx(returned(tight, b32), rel=1e-6)
    loose = mpsolve.solve(A32, b32, rtol=1e-5, **kw)
    assert loose.converged and returned(loose, b32) <= 1e-5
    wide_b = mpsolve.solve(A32, b32.astype(wide), rtol=1e-8, **kw)
    assert wide_b.converged and wide_b.x.dtype == wide
    assert returned(wide_b, b32) <= 1e-8 * (1 + 1e-6)
    x, info = mpsolve.cg(A32, b32, rtol=1e-8)                  # the SciPy-style function too
    assert info > 0 and x.dtype == dt


def test_a_residual_within_twice_its_bound_of_the_tolerance_is_not_certified():
    """A computed norm ``nrm`` within the tolerance is only called within it where ``nrm``
    plus twice the rounding bound is: the exact residual (``nrm`` +- bound) and any other
    FP64 evaluation of it (a caller's ``norm(b - A @ x)``, +- bound again) then meet the
    tolerance too.  It once went by ``nrm`` alone wherever the bound was below ``CERTIFY``
    times the tolerance, so an exact residual 0.1% over the tolerance read as converged."""
    A = poisson2d(12)
    x = np.linspace(1.0, 2.0, A.shape[0])
    b = A @ np.ones(A.shape[0])
    p = make_problem(A, b, rtol=1e-8)
    bound = p.residual_bound(x)
    assert bound > 0
    tol = 4096 * bound                      # the bound is 1/4096 of it: below CERTIFY
    assert bound <= CERTIFY * tol
    for nrm in (tol - 1.5 * bound, tol - 0.5 * bound, tol):
        got = p.certified(nrm, x, tol=tol)
        assert got > tol                    # not certified: reported as nrm + 2 bound
        assert got == nrm + 2 * bound
    # two bounds clear of the tolerance: certified, the computed norm reported as it is
    assert p.certified(tol - 2.5 * bound, x, tol=tol) == tol - 2.5 * bound
    # a bound over CERTIFY times the tolerance is added where it certifies
    tol = 16 * bound
    assert p.certified(tol - 3 * bound, x, tol=tol) == tol - 2 * bound
    assert p.certified(tol - bound, x, tol=tol) == tol + bound
    # the Dot2 residual's bound is certified once, exactly (no FP64 check can reach it)
    assert p.residual_bound(x, dd=True) <= CERTIFY * tol
    assert p.certified(tol / 2, x, tol=tol, dd=True) == tol / 2
    assert p.certified(tol, x, tol=tol, dd=True) > tol


@pytest.mark.parametrize("method", ["cg", "gmres", "bicgstab"])
def test_an_operator_answer_is_not_called_exact(method):
    """A LinearOperator has no entries to bound its product's rounding by; its computed
    residual was taken as it is, so ``rtol=0`` returned ``info == 0`` with a reported
    residual of 0 where the exact one (rational arithmetic) was 7e-17, and ``rtol=1e-16``
    was met by residuals up to twice that.  The rounding of ``A x`` to FP64 now stands
    for the bound: no success below it, the same answers above it."""
    import scipy.sparse.linalg as spla

    def exact(A, b, x):
        s = sum((Fraction(float(b[i])) - sum(Fraction(float(A[i, j])) * Fraction(float(x[j]))
                                             for j in range(len(b)))) ** 2
                for i in range(len(b)))
        return float(s) ** 0.5 / np.linalg.norm(b)

    for seed in range(6):
        rng = np.random.default_rng(seed)
        n = 4 + seed
        A = rng.standard_normal((n, n))
        A = A + A.T + 3 * n * np.eye(n)
        b = rng.standard_normal(n)
        for rtol in (0.0, 1e-16, 1e-12):
            r = mpsolve.solve(spla.aslinearoperator(A), b, method=method, precond=None,
                              precision="double", rtol=rtol)
            if r.info == 0:
                assert exact(A, b, r.x) <= rtol, (seed, rtol, r.true_residual)
            assert (r.info == 0) == (rtol == 1e-12), (seed, rtol, r.status)
