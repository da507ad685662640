"""SciPy's contract for ``cg``/``gmres``/``bicgstab``, point by point: each test states
the SciPy behaviour it mirrors and checks mpsolve against SciPy on the same call."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import mpsolve

METHODS = ["cg", "gmres", "bicgstab"]


def _spd(n=12):
    return sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n), format="csr")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("tols", [dict(atol=np.inf), dict(rtol=np.inf), dict(atol=1e3)])
@pytest.mark.parametrize("x0", [None, "ones"])
def test_a_tolerance_every_residual_meets_returns_x0_at_once(method, tols, x0):
    """SciPy: ``atol=np.inf`` (or any ``atol >= ||b - A x0||``) is accepted and the
    solver returns ``x0`` (zeros by default) with ``info == 0`` and no iteration."""
    A = _spd()
    b = A @ np.arange(1.0, 13.0)
    start = None if x0 is None else np.ones(12)
    calls = []
    x, info = getattr(mpsolve, method)(A, b, x0=start, callback=calls.append, **tols)
    xs, infos = getattr(spla, method)(A, b, x0=start, **tols)
    assert info == infos == 0
    np.testing.assert_array_equal(x, xs)
    np.testing.assert_array_equal(x, np.zeros(12) if x0 is None else np.ones(12))
    assert calls == []


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("bad", [None, "legacy", np.nan, -1.0])
def test_bad_atol_is_a_value_error_as_in_scipy(method, bad):
    """SciPy (>= 1.14): ``atol=None``, ``atol='legacy'`` and a negative ``atol`` raise
    ``ValueError``.  mpsolve also refuses NaN (SciPy iterates with it and can never
    converge).  mpsolve's message names the argument."""
    A = _spd()
    b = np.ones(12)
    if not (isinstance(bad, float) and np.isnan(bad)):
        with pytest.raises(ValueError):
            getattr(spla, method)(A, b, atol=bad)
    with pytest.raises(ValueError, match="atol"):
        getattr(mpsolve, method)(A, b, atol=bad)
    with pytest.raises(ValueError, match="rtol"):
        getattr(mpsolve, method)(A, b, rtol=bad if bad is not None else "legacy")


def test_a_tolerance_of_the_wrong_type_is_also_a_type_error():
    """Kept for callers that catch ``TypeError`` (mpsolve's earlier behaviour)."""
    with pytest.raises(TypeError, match="rtol"):
        mpsolve.cg(_spd(), np.ones(12), rtol="1e-5")


def test_zero_b_with_infinite_rtol_is_not_nan():
    """``rtol * ||b||`` is ``inf * 0`` for ``b = 0``: the tolerance is ``atol``, and the
    answer is the exact zero (SciPy returns zeros with ``info == 0``)."""
    A = _spd()
    for method in METHODS:
        x, info = getattr(mpsolve, method)(A, np.zeros(12), rtol=np.inf)
        xs, infos = getattr(spla, method)(A, np.zeros(12), rtol=np.inf)
        assert info == infos == 0
        np.testing.assert_array_equal(x, xs)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("start", ["none", "zeros", "negative zeros"])
def test_an_exact_preconditioner_needs_at_most_three_products_with_a(method, start):
    """SciPy (``test_precond_inverse``, which passes ``x0 = 0 * b``): with ``M = A^{-1}``
    given as a LinearOperator the solvers converge at once, using at most three products
    with ``A``; the first residual of a zero start -- none, or an all-zero ``x0``
    (``x.any()``) -- is ``b`` itself (no product).  The answer is certified by mpsolve's
    FP64 true residual all the same."""
    A = _spd(20).tocsc()
    b = np.arange(1.0, 21.0)
    x0 = {"none": None, "zeros": np.zeros(20), "negative zeros": -np.zeros(20)}[start]
    lu = spla.splu(A)
    count = [0]

    def matvec(x):
        count[0] += 1
        return A @ x

    Aop = spla.LinearOperator(A.shape, matvec=matvec, dtype=np.float64)
    M = spla.LinearOperator(A.shape, matvec=lu.solve, dtype=np.float64)
    x, info = getattr(mpsolve, method)(Aop, b, x0=x0, M=M, rtol=1e-8)
    assert info == 0 and count[0] <= 3, count[0]
    assert np.linalg.norm(A @ x - b) <= 1e-8 * np.linalg.norm(b)


def test_the_zero_start_shortcut_never_skips_a_nonzero_start():
    """The shortcut applies only to an exactly zero start: with ``x0`` given (even tiny)
    the first residual is ``b - A x0`` (one more product), and the answers agree."""
    A = _spd(20)
    b = np.arange(1.0, 21.0)
    count = [0]

    def matvec(x):
        count[0] += 1
        return A @ x

    Aop = spla.LinearOperator(A.shape, matvec=matvec, dtype=np.float64)
    x0 = np.full(20, 1e-300)
    res0 = mpsolve.solve(Aop, b, x0=x0, method="cg", precond=None, rtol=1e-10)
    with_x0 = count[0]
    count[0] = 0
    res1 = mpsolve.solve(Aop, b, method="cg", precond=None, rtol=1e-10)
    assert res0.info == res1.info == 0 and with_x0 == count[0] + 1
    assert res0.true_residual <= 1e-10 and res1.true_residual <= 1e-10


@pytest.mark.parametrize("side", ["left", "right"])
def test_gmres_with_a_singular_preconditioner_is_exact_where_it_can_be(side):
    """SciPy's GMRES test with a singular ``M`` (``A = diag(2, 3, 4)``, ``M = diag(1, 1, 0)``,
    ``b = (0, 1, 1)``, ``x0 = (1, 0, 0)``, rtol 1e-15) checks
    ``assert_allclose(M @ A @ x, M @ b, rtol=1e-7)`` with no ``atol``: the entries that
    must be exactly 0 are.  The third component is out of M's reach, so neither converges
    (SciPy: info > 0; mpsolve: -13, M or A singular, documented in BREAKDOWNS)."""
    A = sp.diags([2.0, 3.0, 4.0]).tocsr()
    M = sp.diags([1.0, 1.0, 0.0]).tocsr()
    b = np.array([0.0, 1.0, 1.0])
    x0 = np.array([1.0, 0.0, 0.0])
    xs, infos = spla.gmres(A, b, x0=x0, M=M, rtol=1e-15)
    np.testing.assert_allclose(M @ (A @ xs), M @ b, rtol=1e-7)         # SciPy itself
    x, info = mpsolve.gmres(A, b, x0=x0, M=M, rtol=1e-15, side=side)
    assert infos != 0 and info == -13
    np.testing.assert_allclose(M @ (A @ x), M @ b, rtol=1e-7)
    assert np.array_equal(x0, [1.0, 0.0, 0.0])


def test_gmres_legacy_callback_as_scipy_warning_info_and_scalar():
    """SciPy's gmres with a callback and no ``callback_type``: a DeprecationWarning (its
    phrase, which warning filters match), the legacy mode whose ``maxiter`` counts inner
    iterations and whose ``info`` is then that ``maxiter``, and residual norms passed as
    NumPy scalars (callbacks read ``.ndim``)."""
    rng = np.random.default_rng(1)
    A = rng.random((20, 20))
    b = rng.random(20)
    for solver in (spla.gmres, mpsolve.gmres):
        seen = []
        with pytest.warns(DeprecationWarning, match="called without specifying `callback_type`"):
            x, info = solver(A, b, rtol=1e-6, atol=0.0, callback=seen.append, maxiter=2,
                             restart=50)
        assert info == 2 and len(seen) == 2, solver
        assert all(isinstance(r, np.float64) and r.ndim == 0 for r in seen), solver
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # named: no warning
        x, info = mpsolve.gmres(A, b, rtol=1e-6, atol=0.0, callback=seen.append, maxiter=3,
                                restart=50, callback_type="legacy")
        assert info == 3
        x, info = mpsolve.gmres(A, b, rtol=1e-6, atol=0.0, maxiter=2, restart=50)


@pytest.mark.parametrize("callback_type", ["pr_norm", "legacy"])
def test_gmres_residual_callback_is_relative_whatever_the_scale_of_b(callback_type):
    """SciPy's ``pr_norm`` (and legacy) callback gets the relative residual norm, the same
    numbers for ``b`` and ``s b``.  mpsolve solves a ``b`` with ``||b||`` outside
    [2^-500, 2^500] scaled by a power of two and hands iterates back in the caller's units;
    it multiplied these relative norms by that power too (5e-160 for ``s = 1e-160``)."""
    A = _spd(40)
    b = A @ np.ones(40)
    seen = {}
    for s in (1.0, 1e-160, 1e160):
        got = []
        mpsolve.gmres(A, s * b, rtol=1e-8, callback=got.append, callback_type=callback_type,
                      restart=10)
        seen[s] = np.array(got)
    ref = []
    spla.gmres(A, b, rtol=1e-8, callback=ref.append, callback_type=callback_type, restart=10)
    assert seen[1.0].size == len(ref)
    np.testing.assert_allclose(seen[1.0], ref, rtol=1e-6)
    for s in (1e-160, 1e160):
        np.testing.assert_allclose(seen[s], seen[1.0], rtol=1e-6)


@pytest.mark.parametrize("restart", [None, 5])
def test_gmres_legacy_callback_default_maxiter_is_ten_n_inner_iterations(restart):
    """Legacy mode without ``maxiter``: SciPy stops after ``10 n`` inner iterations with
    ``info = 10 n``; mpsolve ran ``10 n`` restart cycles (4398 inner iterations on this
    cyclic shift, where GMRES needs n per cycle, and converged) and counted ``info`` in
    cycles."""
    n = 30
    A = sp.csr_matrix((np.ones(n), (np.arange(n), (np.arange(n) + 1) % n)), shape=(n, n))
    b = np.random.default_rng(0).standard_normal(n)
    got = {}
    for solver in (spla.gmres, mpsolve.gmres):
        seen = []
        x, info = solver(A, b, rtol=1e-12, callback=seen.append, callback_type="legacy",
                         restart=restart)
        got[solver] = (info, len(seen))
    assert got[mpsolve.gmres] == got[spla.gmres] == (10 * n, 10 * n)
    seen = []                                   # A as a list of lists (mpsolve takes it)
    x, info = mpsolve.gmres(A.toarray().tolist(), b, rtol=1e-12, callback=seen.append,
                            callback_type="legacy", restart=restart)
    assert (info, len(seen)) == (10 * n, 10 * n)


@pytest.mark.parametrize("method", METHODS)
def test_zero_dimensional_arrays_are_numbers_for_tolerances_and_maxiter(method):
    """SciPy takes ``rtol``/``atol``/``maxiter`` as 0-d arrays (what ``np.array(1e-8)`` or
    a reduction gives) as their numbers; a 1-element 1-d array is still refused."""
    A = _spd(30)
    b = A @ np.ones(30)
    kw = dict(rtol=np.array(1e-12), atol=np.array(0.0), maxiter=np.array(4))
    if method == "gmres":
        kw["restart"] = 2                                       # 4 cycles of 2: unconverged
    x, info = getattr(mpsolve, method)(A, b, **kw)
    xs, infos = getattr(spla, method)(A, b, **kw)
    assert info == infos == 4
    x, info = getattr(mpsolve, method)(A, b, atol=np.array(1e-6), rtol=0.0)
    assert info == 0 and np.linalg.norm(b - A @ x) <= 1e-6
    with pytest.raises(ValueError, match=r"atol=array\(\[1.e-08\]\)"):
        getattr(mpsolve, method)(A, b, atol=np.array([1e-8]))


def test_bicgstab_callbacks_and_codes_as_scipy():
    """BiCGSTAB calls the callback once per full iteration as SciPy does -- not for a half
    step that converges -- and reports r0.v == 0 (a zero matrix) as SciPy's -11."""
    from mpsolve.matrices import convection_diffusion2d

    half_steps = 0
    for m, pe in [(8, 2.0), (10, 5.0), (14, 20.0), (12, 1.0), (9, 50.0)]:
        A = convection_diffusion2d(m, peclet=pe).tocsr()
        b = np.random.default_rng(m).standard_normal(A.shape[0])
        ours, theirs = [], []
        x, info = mpsolve.bicgstab(A, b, rtol=1e-8, precision="double", callback=ours.append)
        y, sinfo = spla.bicgstab(A, b, rtol=1e-8, callback=theirs.append)
        assert info == sinfo == 0 and len(ours) == len(theirs)
        r = mpsolve.solve(A, b, method="bicgstab", precond=None, precision="double", rtol=1e-8)
        half_steps += r.iterations > len(ours)        # (the count of started iterations)
    assert half_steps                                  # the half-step exit was exercised
    Z = sp.csr_matrix((5, 5))
    assert mpsolve.bicgstab(Z, np.ones(5))[1] == spla.bicgstab(Z, np.ones(5))[1] == -11


@pytest.mark.parametrize("M", ["none", "jacobi-matrix", "ilu0", "jacobi"])
@pytest.mark.parametrize("fused", ["0", "1"])
def test_cg_solves_a_negative_definite_matrix_as_scipy(monkeypatch, M, fused):
    """SciPy's CG solves a negative definite A (the Laplacian written as [1, -2, 1]): its
    iterates are CG's on -A.  So does mpsolve's -- the Python body and the compiled loop,
    with M negative definite too (Jacobi of that A) -- with SciPy's iteration count; an A
    whose p.Ap changes sign is still the curvature breakdown."""
    from mpsolve.matrices import poisson2d
    from mpsolve.precond import ILU0, Jacobi

    monkeypatch.setenv("MPSOLVE_FUSED", fused)
    A = -poisson2d(15).tocsr()
    n = A.shape[0]
    b = np.random.default_rng(3).standard_normal(n)
    Mm = {"none": None, "jacobi-matrix": sp.diags(1.0 / A.diagonal()).tocsr(),
          "ilu0": ILU0(), "jacobi": Jacobi(dtype="float64")}[M]
    ours, theirs = [], []
    x, info = mpsolve.cg(A, b, rtol=1e-10, M=Mm, precision="double", callback=ours.append)
    assert info == 0 and np.linalg.norm(b - A @ x) <= 1e-10 * np.linalg.norm(b)
    if M in ("none", "jacobi-matrix"):
        y, sinfo = spla.cg(A, b, rtol=1e-10, M=Mm, callback=theirs.append)
        assert sinfo == 0 and len(ours) == len(theirs)
        assert np.allclose(x, y, rtol=0, atol=1e-9 * np.abs(y).max())
    B = np.column_stack([b, -2 * b, b[::-1]])
    R = mpsolve.solve(A, B, method="cg", precond=Mm if M != "ilu0" else "ilu0", rtol=1e-10)
    assert R.info == 0 and np.linalg.norm(B - A @ R.x) <= 1e-10 * np.linalg.norm(B) * 3
    S = (poisson2d(15) - 0.5 * sp.eye(n)).tocsr()           # indefinite
    S = (S - 1.5 * sp.diags(np.r_[np.zeros(n - 20), np.full(20, 4.0)])).tocsr()
    assert mpsolve.cg(S, b, rtol=1e-10, precision="double")[1] == -12


def test_cg_on_a_shifted_hermitian_matrix_as_scipy():
    """A complex A = T + 0.3i I (complex symmetric, normal, not Hermitian): SciPy's CG
    forms alpha and beta from the complex dots and converges; mpsolve's took their real
    parts and ran to maxiter at 1e-2.  The same iterations and answer as SciPy now."""
    T = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(60, 60), format="csr")
    A = (T + 0.3j * sp.eye(60)).tocsr()
    b = np.random.default_rng(0).standard_normal(60).astype(complex)
    ours, theirs = [], []
    x, info = mpsolve.cg(A, b, rtol=1e-10, precision="double", callback=ours.append)
    y, sinfo = spla.cg(A, b, rtol=1e-10, callback=theirs.append)
    assert info == sinfo == 0 and len(ours) == len(theirs)
    assert np.linalg.norm(b - A @ x) <= 1e-10 * np.linalg.norm(b)
    assert np.allclose(x, y, rtol=0, atol=1e-12 * np.abs(y).max())


@pytest.mark.parametrize("method", ["cg", "bicgstab"])
def test_a_failed_call_returns_its_iterate_as_scipy_for_warm_restarts(method):
    """A call that runs out of ``maxiter`` with a true residual above its start's (CG's
    residual grows while its A-norm error falls) returned its start ("diverged") at any
    margin: a warm restart by ``maxiter=5`` calls, each from the last one's x, never moved
    from x = 0.  Now only a run ending 100x above its start returns the start; otherwise
    the iterate SciPy returns (same iterations, same x to rounding)."""
    k = 20
    T = sp.diags([-np.ones(k - 1), 2 * np.ones(k), -np.ones(k - 1)], [-1, 0, 1])
    A = sp.csr_matrix(sp.kron(sp.eye(k), T) + sp.kron(T, sp.eye(k)))
    if method == "bicgstab":
        A = sp.csr_matrix(A + sp.kron(sp.eye(k), sp.diags([-0.9 * np.ones(k - 1),
                                                            0.9 * np.ones(k - 1)], [-1, 1])))
    b = np.ones(k * k)
    ours, theirs = getattr(mpsolve, method), getattr(spla, method)
    x, xs = ours(A, b, rtol=1e-12, maxiter=5)[0], theirs(A, b, rtol=1e-12, maxiter=5)[0]
    assert np.linalg.norm(b - A @ xs) > np.linalg.norm(b)          # (the case in point)
    np.testing.assert_allclose(x, xs, rtol=1e-10, atol=1e-12 * np.abs(xs).max())
    x = np.zeros(k * k)
    for _ in range(40):
        x, info = ours(A, b, x0=x, rtol=1e-8, maxiter=5)
        if info == 0:
            break
    assert np.linalg.norm(b - A @ x) < 1e-3 * np.linalg.norm(b)


def test_a_run_far_above_its_start_still_returns_the_start():
    """The divergence rule kept: unpreconditioned BiCGSTAB that ends 100x above where it
    started hands back its start, and says so."""
    rng = np.random.default_rng(3)
    n = 200
    A = sp.csr_matrix(sp.random(n, n, density=0.05, random_state=rng) * 30.0 + sp.eye(n))
    b = rng.standard_normal(n)
    r = mpsolve.solve(A, b, method="bicgstab", precond=None, precision="double",
                      rtol=1e-12, maxiter=60)
    assert r.info == 60 and "diverged; the starting x is returned" in r.status
    assert np.array_equal(r.x, np.zeros(n))
