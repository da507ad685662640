"""MC64 permutation and scaling (precond/_reorder.py), ILUT, and preconditioners wrapped by
``reorder="mc64"``: exact properties, the caller's ordering, untouched inputs, clear errors."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import mpsolve
from mpsolve.precond import (ILU0, ILUT, ISAI, Jacobi, Reordered, StructurallySingularError,
                             ZeroPivotError, make_preconditioner, mc64)
from mpsolve.precond import _reorder

from conftest import COLLECTION, load_collection_matrix

EPS = np.finfo(np.float64).eps


def _zero_diagonal(n, seed, spread=6.0):
    """A random nonsingular matrix with a zero diagonal and entries over ``10^+-spread``:
    a random permutation of a diagonally strong matrix, rows and columns scaled wildly."""
    rng = np.random.default_rng(seed)
    B = sp.random(n, n, density=4.0 / n, random_state=rng, format="csr")
    B = B + sp.diags(2.0 + rng.random(n))
    p = np.roll(np.arange(n), 1)                      # a cyclic shift: no fixed point
    A = sp.csr_matrix(B[p, :])
    A.setdiag(0.0)
    A.eliminate_zeros()
    A = sp.diags(10.0 ** rng.uniform(-spread, spread, n)) @ A \
        @ sp.diags(10.0 ** rng.uniform(-spread, spread, n))
    return sp.csr_matrix(A)


def _check_properties(A, R):
    n = A.shape[0]
    assert sorted(R.perm.tolist()) == list(range(n))
    B = R.matrix
    d = B.diagonal()
    assert np.all(np.abs(d) == 1.0), "the permuted, scaled diagonal is 1 in modulus, exactly"
    off = (B - sp.diags(d)).tocsr()
    # the documented bound: exp(DUAL_SLACK eps max|w|) (1 + 4 eps), max|w| <= ln(max|a|/min|a|)
    a = np.abs(sp.csr_matrix(A).data)
    a = a[a > 0]
    wmax = max(1.0, np.log(a.max() / a.min()))
    assert abs(off).max() <= np.exp(_reorder.DUAL_SLACK * EPS * wmax) * (1 + 4 * EPS)
    # B is the documented transformation of A (to rounding)
    ref = sp.diags(R.row_scale[R.perm]) @ sp.csr_matrix(A)[R.perm, :] @ sp.diags(R.col_scale)
    assert abs(ref - B).max() <= 4 * EPS
    assert np.all(R.row_scale > 0) and np.all(R.col_scale > 0)


@pytest.mark.parametrize("seed", range(6))
def test_mc64_unit_diagonal_and_bounded_entries(seed):
    A = _zero_diagonal(40 + 10 * seed, seed)
    assert (A.diagonal() == 0).all()
    _check_properties(A, mc64(A))


def test_mc64_maximises_the_diagonal_product():
    """Brute force over every permutation of a small dense matrix."""
    rng = np.random.default_rng(3)
    for _ in range(5):
        D = rng.standard_normal((6, 6)) * 10.0 ** rng.uniform(-3, 3, (6, 6))
        D[rng.random((6, 6)) < 0.3] = 0.0
        np.fill_diagonal(D, 0.0)
        A = sp.csr_matrix(D)
        try:
            R = mc64(A)
        except StructurallySingularError:
            continue
        best = max(np.prod(np.abs(D[list(p), range(6)])) for p in itertools.permutations(range(6)))
        got = np.prod(np.abs(D[R.perm, range(6)]))
        assert got == pytest.approx(best, rel=1e-12)
        _check_properties(A, R)


def test_mc64_near_ties_need_the_exact_costs():
    """Entries within 1/64 in log of each other: the coarse matching may pick either
    diagonal; the answer must still be the exact optimum with exact duals."""
    A = sp.csr_matrix(np.array([[1.0, 1.001], [1.002, 1.0]]))
    R = mc64(A)
    assert R.perm.tolist() == [1, 0]
    _check_properties(A, R)


def test_mc64_cancels_cycles_of_a_coarse_matching():
    """Values 1 + O(1e-3): every rounded cost is 0, the coarse matching is arbitrary; the
    cycle cancelling must reach the exact optimum (checked against SciPy's matching on the
    exact costs) and exact duals."""
    from scipy.sparse.csgraph import min_weight_full_bipartite_matching

    rng = np.random.default_rng(5)
    n = 60
    A = sp.random(n, n, density=0.15, random_state=rng, format="csr") + sp.eye(n)
    A.data = 1.0 + 1e-3 * rng.random(A.nnz)
    R = mc64(A)
    assert R.rotations > 0
    C = sp.csr_matrix(A)
    cost = 2.0 - np.log(C.data)                 # > 0; minimum <=> maximum product
    r, c = min_weight_full_bipartite_matching(sp.csr_matrix((cost, C.indices, C.indptr), (n, n)))
    best = np.sum(np.log(np.abs(C[r, c].A1)))
    assert np.sum(np.log(np.abs(C[R.perm, np.arange(n)].A1))) == pytest.approx(best, abs=1e-12)
    _check_properties(A, R)


def test_mc64_leaves_the_input_alone():
    A = _zero_diagonal(30, 7)
    A.sort_indices()
    before = (A.data.copy(), A.indices.copy(), A.indptr.copy())
    mc64(A)
    Reordered(ILUT()).setup(A)
    assert all(np.array_equal(x, y) for x, y in zip(before, (A.data, A.indices, A.indptr)))


def test_mc64_ignores_explicit_zeros():
    A = sp.csr_matrix(np.array([[0.0, 2.0], [3.0, 0.0]]))
    A = sp.csr_matrix((np.r_[0.0, A.data, 0.0], np.r_[0, A.indices[0], A.indices[1], 1],
                       [0, 2, 4]), shape=(2, 2))
    assert A.nnz == 4
    R = mc64(A)
    assert R.perm.tolist() == [1, 0]
    _check_properties(A, R)


@pytest.mark.parametrize("D, rows", [
    (np.array([[1.0, 2.0, 0.0], [3.0, 4.0, 0.0], [5.0, 6.0, 0.0]]), "empty columns: 2"),
    (np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [5.0, 6.0, 7.0]]), "empty rows: 1"),
    (np.array([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [3.0, 4.0, 5.0]]), "cannot be matched"),
])
def test_structurally_singular_is_named(D, rows):
    with pytest.raises(StructurallySingularError, match="structurally singular") as err:
        mc64(sp.csr_matrix(D))
    assert rows in str(err.value)
    with pytest.raises(StructurallySingularError):
        mpsolve.solve(sp.csr_matrix(D), np.ones(3), method="gmres", precond="ilut",
                      reorder="mc64")


def test_reordered_preconditioner_is_m_of_a_in_the_callers_ordering():
    """With an exact inner solve (ILUT without dropping) M = A^-1 on the user's A."""
    A = _zero_diagonal(50, 11, spread=3.0)
    x = np.linspace(-1.0, 2.0, 50)
    M = make_preconditioner("ilut", reorder="mc64", drop_tol=0.0, fill_factor=50,
                            dtype="float64").setup(A)
    assert isinstance(M, Reordered) and M.name == "ilut+mc64"
    np.testing.assert_allclose(M.matvec(A @ x), x, rtol=1e-9, atol=1e-9)
    # FP32 input, FP64 output: widened exactly before the permutation and scaling
    r32 = (A @ x).astype(np.float32)
    out = np.empty(50)
    M.apply(r32, out)
    np.testing.assert_array_equal(out, M.matvec(r32.astype(np.float64)))


def test_ilu0_zero_pivot_is_cured_by_mc64():
    A = _zero_diagonal(60, 5, spread=0.3)
    b = A @ np.ones(60)
    with pytest.raises(ZeroPivotError):
        ILU0().setup(A)
    Ac, bc = A.copy(), b.copy()
    res = mpsolve.solve(A, b, method="gmres", precond="ilu0", reorder="mc64", rtol=1e-10,
                        restart=60, maxiter=50)
    assert res.converged and res.true_residual <= 1e-10
    np.testing.assert_allclose(res.x, 1.0, rtol=1e-6)       # the caller's ordering
    assert abs(A - Ac).max() == 0 and np.array_equal(b, bc)
    assert res.precond == "ilu0+mc64"
    assert res.precond_stats["reorder"] == "mc64"


@pytest.mark.parametrize("inner", [Jacobi, ISAI])
def test_any_preconditioner_can_be_reordered(inner):
    A = _zero_diagonal(40, 2, spread=2.0)
    if inner is Jacobi:
        with pytest.raises(ValueError, match="zero diagonal"):
            Jacobi().setup(A)
    M = Reordered(inner(dtype="float64")).setup(A)
    y = M.matvec(np.ones(40))
    assert np.isfinite(y).all()


def test_ilut_pivots_past_a_zero_diagonal_and_is_exact_without_dropping():
    A = _zero_diagonal(80, 9, spread=1.0)
    x = np.cos(np.arange(80.0))
    M = ILUT(drop_tol=0.0, fill_factor=80, dtype="float64").setup(A)
    np.testing.assert_allclose(M.matvec(A @ x), x, rtol=1e-9, atol=1e-9)
    M32 = ILUT(drop_tol=0.0, fill_factor=80).setup(A)
    assert M32.storage_dtype == np.float32
    assert np.linalg.norm(M32.matvec(A @ x) - x) <= 1e-3 * np.linalg.norm(x)


def test_ilut_without_dropping_or_a_binding_fill_bound_is_superlus_complete_lu():
    """drop_tol=0 with a fill bound that cannot bind (n^2 + n entries) is a complete LU:
    SuperLU's supernodal splu (1.6-1.9x faster than its ILU code on the same factors), with
    the ILU code's pivoting; a bound that can bind keeps the ILU code (which honours it)."""
    A = _zero_diagonal(120, 7, spread=1.0)
    n, x = A.shape[0], np.sin(np.arange(120.0))
    full = ILUT(drop_tol=0.0, fill_factor=(n * n + n) / A.nnz, dtype="float64").setup(A)
    bounded = ILUT(drop_tol=0.0, fill_factor=0.9 * (n * n + n) / A.nnz, dtype="float64").setup(A)
    assert full.stats["factorisation"] == "complete LU (splu)"
    assert bounded.stats["factorisation"] == "ILUTP (spilu)"
    assert full.stats["fill"] == pytest.approx(bounded.stats["fill"], rel=0.05)
    # an exact LU applied in FP64: forward error within cond(A) u (measured ~470 u here,
    # cond(A) = 5.3e3)
    kappa = np.linalg.cond(A.toarray())
    for M in (full, bounded):
        np.testing.assert_allclose(M.matvec(A @ x), x, rtol=0, atol=kappa * EPS)


def test_ilut_bad_parameters_and_singular_factor():
    with pytest.raises(ValueError, match="drop_tol"):
        ILUT(drop_tol=-1.0)
    with pytest.raises(ValueError, match="fill_factor"):
        ILUT(fill_factor=0.5)
    with pytest.raises(ValueError, match="reorder"):
        Reordered(ILUT(), reorder="rcm")
    with pytest.raises(ValueError, match="reorder"):
        make_preconditioner("none", reorder="mc64")
    # SuperLU's failure without its source location; an empty row or column named as the
    # structural singularity it is (no drop_tol helps), else the advice that may
    empty = sp.csr_matrix(np.array([[1.0, 0, 0], [0, 0, 0], [0, 0, 1]]))
    with pytest.raises(ZeroPivotError) as err:
        ILUT().setup(empty)
    msg = str(err.value)
    assert "(empty rows: 1; empty columns: 1)" in msg and "no factorisation exists" in msg
    assert "line" not in msg and ".c" not in msg and "\n" not in msg
    with pytest.raises(ZeroPivotError, match=r"SuperLU: Factor is exactly singular; lower "
                                             r"drop_tol or raise fill_factor"):
        ILUT(symmetric=False).setup(sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 1.0]])))


def test_bellman_ford_reports_a_negative_cycle():
    src, dst, w = np.array([0, 1, 2]), np.array([1, 0, 0]), np.array([-1.0, -1.0, 5.0])
    d, sweeps, cyc = _reorder._bellman_ford(3, src, dst, w)
    assert d is None and sweeps == 4 and sorted(cyc.tolist()) == [0, 1]
    d, sweeps, cyc = _reorder._bellman_ford(3, src, dst, w, check_every=1)
    assert d is None and sweeps < 4 and sorted(cyc.tolist()) == [0, 1]
    d, sweeps, cyc = _reorder._bellman_ford(3, src, dst, np.array([-1.0, 1.0, 5.0]))
    assert d.tolist() == [0.0, -1.0, 0.0] and cyc is None


ZERO_DIAGONAL = ["west0479", "west1505", "rajat19", "qh1484", "dw8192"]


@pytest.mark.parametrize("name", ZERO_DIAGONAL)
def test_zero_diagonal_suitesparse_solve_with_mc64_ilut(name):
    if not (COLLECTION / f"{name}.mtx.gz").exists():
        pytest.skip(f"{name} not in {COLLECTION}")
    A = load_collection_matrix(name).tocsr()
    b = A @ np.ones(A.shape[0])
    R = mc64(A)
    _check_properties(A, R)
    res = mpsolve.solve(A, b, method="gmres", precond="ilut", reorder="mc64", rtol=1e-8,
                        restart=30, maxiter=167)
    assert res.converged and res.true_residual <= 1e-8
    r = b - A @ res.x
    assert np.linalg.norm(r) <= 1e-8 * np.linalg.norm(b)


def test_a_reordering_is_reused_and_its_shape_checked():
    A = _zero_diagonal(30, 4, spread=1.0)
    R = mc64(A)
    M = Reordered(ILUT(), reordering=R).setup(A)
    assert M.reordering is R
    with pytest.raises(ValueError, match="reordering is for a 30x30"):
        Reordered(ILUT(), reordering=R).setup(_zero_diagonal(20, 4))


def test_mc64_refuses_a_scaling_fp64_cannot_hold():
    """Entries near the subnormal range (1e-320): the scaling factors (1 / |a_ij|)
    overflow; refused in a line naming the range (NumPy's boolean-assignment error leaked
    from the diagonal fix-up, after an overflow warning in exp)."""
    import warnings

    A = (1e-320 * sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(20, 20))).tocsr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="not representable in FP64"):
            mc64(A)
