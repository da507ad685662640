"""Symmetric matrices get symmetric positive definite preconditioners -- for CG, by name --
and nonsymmetric ones are refused under CG; ILUT factors badly scaled matrices.

* The symmetry test (``symmetric_mirror``, both host devices) passes assembled matrices
  whose entries that cancel to zero carry rounding noise (a P1 finite-element stiffness
  matrix: 7e-15 against entries of 100), and is invariant under symmetric scaling.
* ILUT on symmetric ``A`` with a positive diagonal is the symmetric form (incomplete
  Cholesky with threshold): ``M`` symmetric, CG converges (the pivoting ILUTP broke CG down
  on a biharmonic problem).  BILU(0) shifts where its pivot blocks are not SPD, as ILU(0).
* CG refuses a set-up preconditioner that is not symmetric on a symmetric ``A``.
* ILUT equilibrates: SuperLU's ILUTP reported row-scaled matrices exactly singular and gave
  factors of 1e60 on a diagonally dominant random matrix.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import mpsolve
from mpsolve.auto import analyse
from mpsolve.kernels import lookup
from mpsolve.matrices import convection_diffusion2d, poisson2d
from mpsolve.precond import ILU0, ILUT, ISAI, BlockILU0, BlockISAI


def _noisy_laplacian(m=24, seed=0):
    """2-D Laplacian with every diagonal-neighbour entry stored as rounding noise of
    opposite signs in (i, j) and (j, i) -- what assembly leaves where exact entries
    cancel -- so no entry pair agrees to 1e-12 of itself."""
    rng = np.random.default_rng(seed)
    A = poisson2d(m).tolil()
    n = A.shape[0]
    for i in range(n - m - 1):
        e = 1e-15 * (1 + rng.random())
        A[i, i + m + 1] = e
        A[i + m + 1, i] = -3 * e
    return sp.csr_matrix(A)


def _biharmonic(m=20):
    T = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
    L = sp.kron(sp.eye(m), T) + sp.kron(T, sp.eye(m))
    return sp.csr_matrix(L @ L)        # SPD, not an M-matrix: IC(0)/BILU(0) pivots go negative


@pytest.mark.parametrize("device", ["cpu", "reference"])
def test_symmetry_test_passes_rounding_noise_and_scaling(device):
    A = _noisy_laplacian()
    d = 10.0 ** np.random.default_rng(1).uniform(-6, 6, A.shape[0])
    sym = lookup(device, "symmetric_mirror", ("float64",))
    for B in (A, sp.csr_matrix(sp.diags(d) @ A @ sp.diags(d))):
        B.sort_indices()
        assert sym(B.indptr, B.indices, B.data, 1e-12, np.empty(B.nnz, np.int64))
    # a real asymmetry, 1e-9 of the diagonal, is one
    N = A.tolil()
    N[0, 1] = -1.0 + 1e-9
    N = sp.csr_matrix(N)
    assert not sym(N.indptr, N.indices, N.data, 1e-12, np.empty(N.nnz, np.int64))


@pytest.mark.parametrize("device", ["cpu", "reference"])
@pytest.mark.parametrize("scale", [1e-300, 1.0, 1e160, 1e300])
def test_symmetry_test_does_not_depend_on_the_scale(device, scale):
    """``sqrt(|a_ii a_jj|)`` overflowed for entries over 1e154, and the inf then passed
    every pair: a clearly nonsymmetric matrix scaled by 1e160 was called symmetric (ILU(0)
    took its IC form, ISAI its SPD one, GMRES + ILU(0) failed on a pivot)."""
    sym = lookup(device, "symmetric_mirror", ("float64",))
    T = sp.csr_matrix(scale * sp.diags([-1.0, 2.2, -1.2], [-1, 0, 1], shape=(50, 50)))
    assert not sym(T.indptr, T.indices, T.data, 1e-12, np.empty(T.nnz, np.int64))
    S = sp.csr_matrix(scale * sp.diags([-1.0, 2.2, -1.0], [-1, 0, 1], shape=(50, 50)))
    assert sym(S.indptr, S.indices, S.data, 1e-12, np.empty(S.nnz, np.int64))


def test_a_huge_nonsymmetric_matrix_gets_the_nonsymmetric_forms():
    A = sp.csr_matrix(1e160 * sp.diags([-1.0, 2.2, -1.2], [-1, 0, 1], shape=(400, 400)))
    b = A @ np.ones(400)
    assert not ILU0(dtype="float64").setup(A).symmetric
    assert ISAI(dtype="float64").setup(A).variant == "general"
    r = mpsolve.solve(A, b, method="gmres", precond="ilu0", precision="double", rtol=1e-8)
    assert r.converged
    assert np.linalg.norm(b - A @ r.x) <= 1e-8 * np.linalg.norm(b)


def test_noisy_symmetric_matrix_gets_the_symmetric_forms():
    A = _noisy_laplacian()
    assert analyse(A).symmetric
    assert ISAI().setup(A).variant == "spd"
    assert BlockISAI().setup(A).variant == "spd"
    assert ILU0().setup(A).symmetric and BlockILU0().setup(A).symmetric
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, rtol=1e-8)
    assert res.info == 0 and res.method == "cg"
    res = mpsolve.solve(A, b, method="cg", precond="isai", rtol=1e-8)
    assert res.info == 0 and res.true_residual <= 1e-8


def _one_sided_zeros(m=20):
    """2-D Laplacian plus stored zeros at ``(i, i + 5)`` with nothing stored at ``(i + 5,
    i)``: symmetric values, a nonsymmetric pattern."""
    A = poisson2d(m).tocsr()
    n = A.shape[0]
    Z = sp.csr_matrix((np.full(n - 5, 7.0), (np.arange(n - 5), np.arange(5, n))), A.shape)
    B = (A + Z).tocsr()
    B.data[B.data == 7.0] = 0.0
    return A, B


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.int64])
def test_stored_zeros_without_a_transpose_leave_a_matrix_symmetric(dtype):
    A, B = _one_sided_zeros()
    B = B.astype(dtype)
    before = (B.data.copy(), B.indices.copy(), B.indptr.copy())
    n = B.shape[0]
    assert (B.data == 0).sum() == n - 5 and abs(B - A).max() == 0
    C = mpsolve._sparse.canonical_csr(B)
    assert C.nnz == B.nnz + n - 5 and (C != B).nnz == 0        # zeros added, no value moved
    assert C.dtype == B.dtype and C.has_canonical_format
    assert analyse(B).symmetric
    assert ILU0().setup(B).symmetric and BlockILU0().setup(B).symmetric
    assert ISAI().setup(B).variant == "spd"
    b = B @ np.ones(n)
    res = mpsolve.solve(B, b, rtol=1e-8)
    assert res.info == 0 and res.method == "cg" and res.true_residual <= 1e-8
    x, info = mpsolve.cg(B, b, M=ILU0().setup(B), rtol=1e-8)
    assert info == 0 and np.linalg.norm(b - B @ x) <= 1e-8 * np.linalg.norm(b)
    for got, was in zip((B.data, B.indices, B.indptr), before):
        np.testing.assert_array_equal(got, was)                 # the caller's B untouched
    # a nonsymmetric matrix with stored zeros keeps its pattern
    N = B.tolil()
    N[0, 1] = 3.0
    N = sp.csr_matrix(N)
    N.data[N.data == 7.0] = 0.0
    assert mpsolve._sparse.canonical_csr(N).nnz == N.nnz and not analyse(N).symmetric


@pytest.mark.parametrize("A", [_biharmonic(), _noisy_laplacian(),
                               sp.csr_matrix(sp.diags(2.0 ** np.arange(-8, 8).repeat(36))
                                             @ poisson2d(24) @
                                             sp.diags(2.0 ** np.arange(-8, 8).repeat(36)))],
                         ids=["biharmonic", "noisy", "scaled"])
def test_ilut_symmetric_form_under_cg(A):
    M = ILUT(dtype="float64").setup(A)
    assert M.symmetric and M.stats["form"] == "symmetric"
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, A.shape[0]))
    Mx, My = M.matvec(x), M.matvec(y)
    assert abs(x @ My - y @ Mx) <= 1e-12 * abs(x @ Mx)
    assert x @ Mx > 0 and y @ My > 0
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, method="cg", precond="ilut", rtol=1e-8)
    assert res.info == 0 and res.true_residual <= 1e-8 and res.iterations <= 20


def test_ilut_symmetric_form_shifts_or_gives_way():
    """Indefinite symmetric A with a positive diagonal: a small shift keeps the symmetric
    form (recorded); one above ``SHIFT_DETECTED`` gives way to the general form, which
    preconditions such a matrix far better (GMRES 5 iterations against none in 9000 on
    the biharmonic minus 3 I) -- unless the symmetric form is asked for; ``symmetric=True``
    on a nonsymmetric A is refused; a complete factorisation is never shifted (it would
    not be exact)."""
    from mpsolve.precond.ilut import SHIFT_DETECTED

    P = sp.csr_matrix(poisson2d(24) - 0.1 * sp.eye(576))
    M = ILUT(dtype="float64").setup(P)
    assert M.symmetric and 0 < M.shift <= SHIFT_DETECTED and M.stats["shift"] == M.shift
    A = sp.csr_matrix(_biharmonic(12) - 3.0 * sp.eye(144))
    M = ILUT(dtype="float64").setup(A)
    assert not M.symmetric and M.stats["form"] == "general" and M.shift is None
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, method="gmres", precond=M, side="right", rtol=1e-8)
    assert res.info == 0 and res.iterations <= 10
    S = ILUT(dtype="float64", symmetric=True).setup(A)
    assert S.symmetric and S.shift > SHIFT_DETECTED
    G = ILUT(dtype="float64", symmetric=False).setup(A)
    assert not G.symmetric and G.stats["form"] == "general"
    E = ILUT(drop_tol=0.0, fill_factor=1e6, dtype="float64").setup(A)
    assert not E.shift
    b = A @ np.ones(A.shape[0])
    assert np.allclose(E.matvec(b), 1.0, rtol=1e-9)
    with pytest.raises(ValueError, match="not symmetric"):
        ILUT(symmetric=True).setup(convection_diffusion2d(8, peclet=10.0))


def test_block_ilu0_shifts_to_spd_pivot_blocks():
    A = _biharmonic(30)
    b = A @ np.ones(A.shape[0])
    for bs in (1, 3):
        M = BlockILU0(block_size=bs, dtype="float64").setup(A)
        assert M.symmetric and M.shift > 0
        res = mpsolve.solve(A, b, method="cg", precond=M, rtol=1e-8)
        assert res.info == 0 and res.true_residual <= 1e-8
    # BILU's ISAI takes the same shift and keeps its symmetric form
    M = BlockISAI(variant="bilu", block_size=3, dtype="float64").setup(A)
    assert M.symmetric and M.stats["shift"] > 0
    res = mpsolve.solve(A, b, method="cg", precond=M, rtol=1e-8)
    assert res.info == 0
    # no shift asked: the unshifted factors, whose M is indefinite
    M = BlockILU0(block_size=1, shift=None, dtype="float64").setup(A)
    assert M.shift is None
    assert mpsolve.solve(A, b, method="cg", precond=M, rtol=1e-8).info != 0


def test_cg_refuses_a_nonsymmetric_preconditioner_on_a_symmetric_matrix():
    A = poisson2d(16)
    b = A @ np.ones(A.shape[0])
    with pytest.raises(ValueError, match=r"method='cg'.*not symmetric.*precond='ilu0'"):
        mpsolve.solve(A, b, method="cg", precond="isai", variant="general")
    with pytest.raises(ValueError, match="not symmetric"):
        mpsolve.Solver(A, method="cg", precond=ILU0(symmetric=False))
    with pytest.raises(ValueError, match="not symmetric"):
        mpsolve.cg(A, b, M=ILUT(symmetric=False))
    # the same preconditioner under GMRES, and CG on a nonsymmetric A: the caller's choice
    assert mpsolve.solve(A, b, method="gmres", precond="isai", variant="general").info == 0
    C = convection_diffusion2d(16, peclet=0.5)
    mpsolve.solve(C, C @ np.ones(C.shape[0]), method="cg", precond="isai", maxiter=50)
    # a Solver checks at set-up and at update (new values symmetric, its M not), not per solve
    s = mpsolve.Solver(C, method="cg", precond=ISAI(variant="general"), maxiter=50)
    s.solve(C @ np.ones(C.shape[0]))
    with pytest.raises(ValueError, match="not symmetric"):
        s.update(A)


def _row_scaled_convection():
    A = convection_diffusion2d(40, peclet=50.0)
    r = 10.0 ** np.random.default_rng(2).uniform(-3, 3, A.shape[0])
    return sp.csr_matrix(sp.diags(r) @ A)


def _dominant_random(n=3000):
    rng = np.random.default_rng(3)
    A = sp.random(n, n, density=6 / n, random_state=3, format="csr")
    A.data = rng.standard_normal(A.nnz)
    return sp.csr_matrix(A + sp.diags(1.1 * np.asarray(abs(A).sum(axis=1)).ravel() + 0.1))


@pytest.mark.parametrize("make", [_row_scaled_convection, _dominant_random],
                         ids=["row-scaled", "dominant-random"])
def test_ilut_equilibrates_badly_scaled_matrices(make):
    A = make()
    M = ILUT(dtype="float64").setup(A)
    assert M.stats["equilibrated"] and M.stats["form"] == "general"
    x = np.random.default_rng(4).standard_normal(A.shape[0])
    assert np.linalg.norm(M.matvec(A @ x) - x) <= 0.5 * np.linalg.norm(x)
    b = A @ np.ones(A.shape[0])
    for kw in ({"method": "gmres", "side": "right"}, {"method": "bicgstab"}):
        res = mpsolve.solve(A, b, precond="ilut", rtol=1e-8, **kw)
        assert res.info == 0 and res.iterations <= 30


def test_fp32_matrix_is_symmetric_to_its_own_rounding():
    """A matrix assembled in FP32 is symmetric only to FP32 rounding: the test's tolerance
    is 64 ulps of the values' dtype (1e-12 for FP64), so FP32 noise passes in FP32 and
    the same perturbation stored in FP64 does not."""
    A = poisson2d(24)
    U = sp.triu(A, 1).tocoo()
    noise = 1e-7 * np.random.default_rng(5).standard_normal(U.nnz)
    P = sp.csr_matrix(A + sp.coo_matrix((U.data * noise, (U.row, U.col)), shape=A.shape))
    P32 = P.astype(np.float32)
    assert abs(P32 - P32.T).max() > 0
    assert analyse(P32).symmetric and ISAI().setup(P32).variant == "spd"
    assert ILUT().setup(P32).symmetric and ILU0().setup(P32).symmetric
    b = P32 @ np.ones(A.shape[0], np.float32)
    assert mpsolve.solve(P32, b, rtol=1e-5).method == "cg"
    assert not analyse(P).symmetric and ISAI().setup(P).variant == "general"


def test_ilut_general_form_tries_the_other_ordering():
    """SuperLU's ILUTP under COLAMD finds a 3-D coefficient-jump matrix's factor exactly
    singular; the minimum degree ordering of ``A + A^T`` factors it."""
    from mpsolve.matrices import jump3d

    A = jump3d(20, seed=0)
    M = ILUT(symmetric=False, dtype="float64").setup(A)
    assert M.stats["ordering"] == "MMD_AT_PLUS_A" and M.stats["form"] == "general"
    res = mpsolve.solve(A, A @ np.ones(A.shape[0]), method="gmres", precond=M, rtol=1e-8)
    assert res.info == 0 and res.iterations <= 30


def test_symmetry_kernels_agree_near_the_threshold():
    """The CPU kernel (diagonal looked up only for pairs failing the plain test) and the
    reference device's vectorised test give the same verdicts and transpose positions on
    random symmetric matrices perturbed around the tolerance, zero diagonals included."""
    rng = np.random.default_rng(11)
    cpu = lookup("cpu", "symmetric_mirror", ("float64",))
    ref = lookup("reference", "symmetric_mirror", ("float64",))
    verdicts = set()
    for t in range(60):
        n = int(rng.integers(5, 40))
        B = sp.random(n, n, density=0.2, random_state=rng, format="csr")
        S = sp.csr_matrix(B + B.T + sp.diags(rng.uniform(0, 4, n) * (rng.random(n) > 0.2)))
        S.sort_indices()
        pert = S.copy()
        k = int(rng.integers(0, S.nnz)) if S.nnz else 0
        if S.nnz:
            pert.data[k] += 10.0 ** rng.uniform(-16, -10) * rng.choice([-1, 1]) * (
                1.0 + abs(pert.data[k]))
        m1, m2 = np.empty(S.nnz, np.int64), np.empty(S.nnz, np.int64)
        v1 = cpu(pert.indptr, pert.indices, pert.data, 1e-12, m1)
        v2 = ref(pert.indptr, pert.indices, pert.data, 1e-12, m2)
        assert v1 == v2
        if v1:
            assert np.array_equal(m1, m2)
        verdicts.add(bool(v1))
    assert verdicts == {True, False}          # both sides of the threshold were met


@pytest.mark.parametrize("A", [sp.csr_matrix((0, 0)), sp.csr_matrix(np.array([[2.0]])),
                               sp.csr_matrix(np.array([[0.0, 1.0], [1.0, 0.0]]))],
                         ids=["empty", "1x1", "zero-diagonal"])
def test_ilut_tiny_matrices(A):
    """ILUT on an empty matrix (set up as before equilibration existed), a 1 x 1 (the
    symmetric form) and a symmetric one without a diagonal (the general form pivots)."""
    M = ILUT(dtype="float64").setup(A)
    n = A.shape[0]
    assert M.symmetric == (n == 1)
    assert np.allclose(M.matvec(A @ np.ones(n)), 1.0)
