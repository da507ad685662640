"""Tests of the block and ISAI preconditioners (precond/block_jacobi.py, isai.py,
block_isai.py, ilu.py, _localsolve.py, _pattern.py) and of the BSR kernel
(kernels/cpu/bsr.py).

The oracles are dense NumPy: every ISAI row must solve its own local system,
ILU(0) must equal Gaussian elimination restricted to the pattern, and each
preconditioner must cut Krylov iterations.
"""
from __future__ import annotations

import os
import pathlib
import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.io as sio
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import mpsolve
from mpsolve.kernels import lookup
from mpsolve.kernels.cpu.spmv import partition_rows
from mpsolve.matrices import convection_diffusion2d, poisson2d
from mpsolve.precond import (REGISTRY, BlockILU0, BlockISAI, BlockJacobi, ILU0, ILUT, ISAI,
                             Jacobi, PreconditionerWarning, Reordered, ZeroPivotError,
                             detect_block_size, make_preconditioner)
from mpsolve.precond import _localsolve

EPS32 = np.finfo(np.float32).eps
COLLECTION = pathlib.Path(os.environ.get(
    "MPSOLVE_TEST_COLLECTION",
    pathlib.Path(__file__).resolve().parents[1] / ".." / "shared" / "matrices" / "suitesparse"))


# ------------------------------------------------------------------ test matrices
def lap1d(n):
    return sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))


def poisson2d(k):
    """5-point Laplacian on a k x k grid (SPD, n = k^2)."""
    T, I = lap1d(k), sp.identity(k)
    return (sp.kron(T, I) + sp.kron(I, T)).tocsr()


def convdiff2d(k, beta=0.4):
    """Upwind-free central convection-diffusion on a k x k grid (nonsymmetric)."""
    T = lap1d(k)
    C = sp.diags([-1.0, 1.0], [-1, 1], shape=(k, k))
    I = sp.identity(k)
    return (sp.kron(T, I) + sp.kron(I, T) + beta * (sp.kron(C, I) + 0.5 * sp.kron(I, C))).tocsr()


def random_nonsym(n, density, seed):
    rng = np.random.default_rng(seed)
    R = sp.random(n, n, density=density, random_state=rng, data_rvs=lambda s: rng.uniform(-1, 1, s))
    A = R + sp.diags(np.abs(R).sum(axis=1).A.ravel() + 1.0 + rng.uniform(0, 1, n))
    return sp.csr_matrix(A)


def random_spd(n, density, seed):
    rng = np.random.default_rng(seed)
    R = sp.random(n, n, density=density, random_state=rng, data_rvs=lambda s: rng.uniform(-1, 1, s))
    S = R + R.T
    return sp.csr_matrix(S + sp.diags(np.abs(S).sum(axis=1).A.ravel() + 0.5))


def block3(k, seed=0, perturb=1e-2, dim=2):
    """3 dofs per node: kron(Laplacian, random SPD 3x3) + a small symmetric
    perturbation on the same block pattern (SPD, block size 3)."""
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((3, 3))
    K = Q @ Q.T + 3 * np.eye(3)
    L = poisson2d(k) if dim == 2 else (sp.kron(poisson2d(k), sp.identity(k))
                                        + sp.kron(sp.identity(k * k), lap1d(k)))
    A = sp.kron(L, K).tocsr()
    P = A.copy()
    P.data = rng.uniform(-1, 1, P.nnz) * perturb * np.abs(A.data).max()
    A = A + (P + P.T) / 2
    return sp.csr_matrix(A)


def pattern_rows(M):
    M = sp.csr_matrix(M)
    return [M.indices[M.indptr[i]:M.indptr[i + 1]] for i in range(M.shape[0])]


def pattern_power(A, k, part="all"):
    S = sp.csr_matrix(A, dtype=float).copy()
    S.data[:] = 1.0
    S = (S + sp.identity(A.shape[0])).tocsr()
    P = S
    for _ in range(k - 1):
        P = P @ S
    P = sp.tril(P) if part == "lower" else sp.triu(P) if part == "upper" else P
    P = sp.csr_matrix(P)
    P.sort_indices()
    return P


# ------------------------------------------------------------------ local systems
@pytest.mark.parametrize("power", [1, 2])
def test_isai_general_rows_solve_local_systems(power):
    A = random_nonsym(60, 0.06, 1)
    M = ISAI("general", sparsity_power=power, dtype="float64").setup(A)
    Md, Ad = M.to_sparse(), A.toarray()
    P = pattern_power(A, power)
    assert (abs(Md) > 0).sum() <= P.nnz
    for i, J in enumerate(pattern_rows(P)):
        e = (J == i).astype(float)
        got = Md[i, J].toarray().ravel() @ Ad[np.ix_(J, J)]
        ref = np.linalg.solve(Ad[np.ix_(J, J)].T, e)
        np.testing.assert_allclose(got, e, atol=1e-12)
        np.testing.assert_allclose(Md[i, J].toarray().ravel(), ref, rtol=1e-12, atol=1e-14)
        outside = np.setdiff1d(np.arange(60), J)
        assert abs(Md[i, outside]).sum() == 0
    assert M.fallback_rows.size == 0
    assert M.nbytes > 0 and M.name == "isai" and not M.symmetric


@pytest.mark.parametrize("power", [1, 2])
def test_isai_spd_is_fsai_and_spd(power):
    A = random_spd(50, 0.08, 2)
    M = ISAI("spd", sparsity_power=power, dtype="float64").setup(A)
    G, GT = M.operators()
    Ad, Gd = A.toarray(), G.toarray()
    np.testing.assert_array_equal(GT.toarray(), Gd.T)
    assert np.all(np.triu(Gd, 1) == 0)
    for i, J in enumerate(pattern_rows(pattern_power(A, power, "lower"))):
        z = np.linalg.solve(Ad[np.ix_(J, J)], (J == i).astype(float))
        np.testing.assert_allclose(Gd[i, J], z / np.sqrt(z[-1]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.diag(Gd @ Ad @ Gd.T), 1.0, rtol=1e-12)
    Md = M.to_sparse().toarray()
    np.testing.assert_allclose(Md, Md.T, atol=1e-14)
    assert np.linalg.eigvalsh(Md).min() > 0
    assert M.symmetric and ISAI("spd").symmetric


def test_isai_triangular_variants_and_ilu_combination():
    A = random_nonsym(50, 0.08, 3)
    L, U = ILU0(dtype="float64").setup(A).factors()
    Li = ISAI("lower", dtype="float64").setup(L)
    Ui = ISAI("upper", dtype="float64").setup(U)
    for T, Mi in ((L, Li), (U, Ui)):
        Td, Md = T.toarray(), Mi.to_sparse().toarray()
        for i, J in enumerate(pattern_rows(T)):
            np.testing.assert_allclose(Md[i, J] @ Td[np.ix_(J, J)], (J == i).astype(float),
                                       atol=1e-12)
    assert np.all(np.triu(Li.to_sparse().toarray(), 1) == 0)
    assert np.all(np.tril(Ui.to_sparse().toarray(), -1) == 0)
    Mc = ISAI("ilu", dtype="float64").setup(A)
    np.testing.assert_allclose(Mc.to_sparse().toarray(),
                               (Ui.to_sparse() @ Li.to_sparse()).toarray(), atol=1e-13)
    r = np.random.default_rng(0).standard_normal(50)
    np.testing.assert_allclose(Mc.matvec(r), Ui.matvec(Li.matvec(r)), rtol=1e-12)


def test_isai_lower_on_triangular_matrix_is_exact_for_bidiagonal():
    # the inverse of a bidiagonal matrix is dense, but with power n its pattern is full
    n = 8
    L = sp.diags([1.0, -0.5], [0, -1], shape=(n, n)).tocsr()
    M = ISAI("lower", sparsity_power=n, dtype="float64").setup(L)
    np.testing.assert_allclose(M.to_sparse().toarray(), np.linalg.inv(L.toarray()), atol=1e-14)


# ------------------------------------------------------------------ block ISAI
@pytest.mark.parametrize("variant", ["general", "spd"])
def test_block_isai_b1_equals_point_isai(variant):
    A = random_spd(40, 0.1, 4)
    P = ISAI(variant, dtype="float64").setup(A).to_sparse().toarray()
    B = BlockISAI(block_size=1, variant=variant, dtype="float64").setup(A)
    assert B.block_size == 1
    np.testing.assert_allclose(B.to_sparse().toarray(), P, rtol=1e-13, atol=1e-15)


def test_block_isai_general_rows_solve_block_systems():
    A = block3(4, seed=5, perturb=0.05)
    b = 3
    M = BlockISAI(variant="general", sparsity_power=2, dtype="float64").setup(A)
    assert M.block_size == b
    Md, Ad = M.to_sparse().toarray(), A.toarray()
    nb = A.shape[0] // b
    Sb = sp.bsr_matrix(A, blocksize=(b, b))
    Pb = pattern_power(sp.csr_matrix((np.ones(Sb.indices.size), Sb.indices, Sb.indptr),
                                     shape=(nb, nb)), 2)
    for i, Jb in enumerate(pattern_rows(Pb)):
        J = (Jb[:, None] * b + np.arange(b)).ravel()
        rows = np.arange(i * b, i * b + b)
        E = np.zeros((b, J.size))
        E[np.arange(b), np.searchsorted(J, rows)] = 1.0
        np.testing.assert_allclose(Md[np.ix_(rows, J)] @ Ad[np.ix_(J, J)], E, atol=1e-12)
        np.testing.assert_allclose(Md[np.ix_(rows, J)], np.linalg.solve(Ad[np.ix_(J, J)].T, E.T).T,
                                   rtol=1e-11, atol=1e-13)
        assert np.abs(Md[rows][:, np.setdiff1d(np.arange(A.shape[0]), J)]).sum() == 0


def test_block_isai_spd_block_fsai():
    A = block3(4, seed=6, perturb=0.05)
    b = 3
    M = BlockISAI(variant="spd", dtype="float64").setup(A)
    G, _ = M.operators()
    Gd, Ad = G.toarray(), A.toarray()
    n = A.shape[0]
    GAGt = Gd @ Ad @ Gd.T
    for i in range(n // b):
        s = slice(i * b, i * b + b)
        np.testing.assert_allclose(GAGt[s, s], np.eye(b), atol=1e-12)
        assert np.all(Gd[s, (i + 1) * b:] == 0)  # block lower triangular
    # G_i A[J, J] vanishes outside the diagonal block of row i (the FSAI equations)
    GA = Gd @ Ad
    Sb = sp.bsr_matrix(A, blocksize=(b, b))
    Pb = pattern_power(sp.csr_matrix((np.ones(Sb.indices.size), Sb.indices, Sb.indptr),
                                     shape=(n // b, n // b)), 1, "lower")
    for i, Jb in enumerate(pattern_rows(Pb)):
        Joff = (Jb[Jb != i][:, None] * b + np.arange(b)).ravel()
        np.testing.assert_allclose(GA[i * b:i * b + b, Joff], 0.0, atol=1e-12)
    Md = M.to_sparse().toarray()
    np.testing.assert_allclose(Md, Md.T, atol=1e-13)
    assert np.linalg.eigvalsh(Md).min() > 0


@pytest.mark.parametrize("P", [ISAI, BlockISAI])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_spd_variant_of_a_negative_definite_matrix_is_the_negated_fsai(P, dtype):
    """A symmetric A with a negative diagonal: ``spd`` (``variant="auto"``'s choice) builds
    G on -A and applies ``M = -(G^T G)``, exactly the negated M of the SPD ``-A`` (no
    local system falls back, no warning: G of A itself had no Cholesky factor in any row),
    and CG with it needs the iterations it needs on ``-A`` -- fewer than Jacobi's."""
    B = block3(12, seed=6, perturb=0.0) if P is BlockISAI else poisson2d(20).tocsr()
    A = sp.csr_matrix(-B)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        M, MB = P(dtype=dtype).setup(A), P(dtype=dtype).setup(B)
    assert M.variant == "spd" and M.fallback_rows.size == 0 and "negative diagonal" in \
        M.variant_reason
    r = np.random.default_rng(3).standard_normal(A.shape[0])
    np.testing.assert_array_equal(M.matvec(r), -MB.matvec(r))
    Md = M.to_sparse().toarray()
    assert np.linalg.eigvalsh((Md + Md.T) / 2).max() < 0
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, method="cg", precond=M, rtol=1e-8)
    resB = mpsolve.solve(B, -b, method="cg", precond=MB, rtol=1e-8)
    jac = mpsolve.solve(A, b, method="cg", precond="jacobi", rtol=1e-8)
    assert res.info == 0 and res.iterations == resB.iterations < jac.iterations
    assert np.linalg.norm(b - A @ res.x) <= 1e-8 * np.linalg.norm(b)


@pytest.mark.parametrize("make", [lambda: ILUT(), lambda: BlockISAI(variant="bilu")],
                         ids=["ilut", "bilu"])
def test_symmetric_forms_of_a_negative_definite_matrix_are_negated(make):
    """ILUT's symmetric form and the BILU variant's ``G^T G`` on a symmetric A with a
    negative diagonal: built on ``-A`` and negated (CG refused both: their nonsymmetric
    forms were taken), so ``M(A) = -M(-A)`` exactly and CG runs as on ``-A``."""
    B = block3(12, seed=6, perturb=0.0)
    A = sp.csr_matrix(-B)
    M, MB = make().setup(A), make().setup(B)
    assert M.symmetric and M.stats["negated"] and not MB.stats["negated"]
    r = np.random.default_rng(4).standard_normal(A.shape[0])
    np.testing.assert_array_equal(M.matvec(r), -MB.matvec(r))
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, method="cg", precond=M, rtol=1e-8)
    resB = mpsolve.solve(B, -b, method="cg", precond=MB, rtol=1e-8)
    assert res.info == 0 and res.iterations == resB.iterations
    assert np.linalg.norm(b - A @ res.x) <= 1e-8 * np.linalg.norm(b)


def test_block_isai_bsr_kernel_matches_dense_and_padding():
    A = block3(3, seed=7)
    A = sp.csr_matrix(A[:-1, :-1])  # n = 26: b = 3 no longer divides n -> padded block
    assert detect_block_size(A) == 3  # the partial last block is allowed
    M = BlockISAI(block_size=3, variant="general", dtype="float64", accumulate="float64").setup(A)
    r = np.random.default_rng(1).standard_normal(A.shape[0])
    np.testing.assert_allclose(M.matvec(r), M.to_sparse() @ r, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(M.to_sparse().toarray() @ A.toarray(), np.eye(26), atol=0.3)


@pytest.mark.parametrize("acc", ["acc64", "acc32"])
@pytest.mark.parametrize("dt", [("float32", "float64", "float64"), ("float64", "float32", "float32"),
                                ("float32", "float32", "float64")])
def test_bsr_kernel_against_reference(dt, acc):
    rng = np.random.default_rng(2)
    A = sp.random(40, 40, 0.1, random_state=rng).tobsr((4, 4))
    A.sort_indices()
    data = A.data.astype(dt[0])
    x = rng.standard_normal(40).astype(dt[1])
    y = np.full(40, np.nan, dtype=dt[2])
    lookup("cpu", "bsrmv", dt, acc)(partition_rows(A.indptr), A.indptr, A.indices, data, x, y)
    ref = sp.bsr_matrix((data.astype(np.float64), A.indices, A.indptr), shape=A.shape) @ x.astype(np.float64)
    tol = 1e-13 if acc == "acc64" and "float32" not in dt[1:] else 10 * EPS32
    np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * np.abs(ref).max())


# ------------------------------------------------------------------ block size detection
def test_detect_block_size():
    assert detect_block_size(block3(4)) == 3
    assert detect_block_size(block3(3, dim=3)) == 3
    assert detect_block_size(poisson2d(6)) == 1
    K2 = np.array([[2.0, 1.0], [1.0, 2.0]])
    assert detect_block_size(sp.kron(poisson2d(5), K2).tocsr()) == 2
    # 6 dofs built from 3 x 3 blocks arranged so 6 divides n but not the pattern
    A3 = sp.kron(lap1d(4), np.ones((3, 3))).tocsr()  # n = 12: 6 | 12 but 6x6 blocks are not full
    assert detect_block_size(A3) == 3
    # a single missing entry in an off-diagonal block: tolerated by the default fill rule
    # (it becomes an explicit zero of a stored block), not by an exact one
    B = block3(3).tolil()
    B[0, 4] = 0.0
    B = B.tocsr()
    B.eliminate_zeros()
    assert detect_block_size(B) == 3
    assert detect_block_size(B, min_fill=1.0) == 1
    # a scalar pattern is not mistaken for a blocked one
    assert detect_block_size(poisson2d(9)) == 1
    assert BlockJacobi().setup(block3(4)).block_size == 3
    assert BlockISAI().setup(block3(4)).block_size == 3


# ------------------------------------------------------------------ singular / excess paths
def test_isai_general_singular_rows_fall_back():
    A = random_nonsym(40, 0.1, 8).tolil()
    A[7, :] = A[6, :]            # duplicated row: every local system holding 6 and 7 is singular
    A[20, :] = 0.0               # zero row
    A = sp.csr_matrix(A)
    with pytest.warns(PreconditionerWarning, match="fallback"):
        M = ISAI("general", sparsity_power=1, dtype="float64").setup(A)
    Md = M.to_sparse().toarray()
    assert np.isfinite(Md).all()
    assert 20 in M.fallback_rows and 7 in M.fallback_rows
    assert Md[20, 20] == 1.0 and np.count_nonzero(Md[20]) == 1  # empty row: identity row
    # rows that did not fall back still solve their local systems
    Ad = A.toarray()
    for i, J in enumerate(pattern_rows(pattern_power(A, 1))):
        if i not in M.fallback_rows:
            np.testing.assert_allclose(Md[i, J] @ Ad[np.ix_(J, J)], (J == i).astype(float),
                                       atol=1e-10)
    assert np.isfinite(M.matvec(np.ones(40))).all()


def test_isai_spd_singular_rows_fall_back():
    A = random_spd(30, 0.1, 9).tolil()
    A[5, :] = 0.0
    A[:, 5] = 0.0
    A[12, 12] = -A[12, 12]       # not SPD: z_last <= 0 possible for that row
    A = sp.csr_matrix(A)
    with pytest.warns(PreconditionerWarning):
        M = ISAI("spd", dtype="float64").setup(A)
    assert 5 in M.fallback_rows
    G = M.operators()[0].toarray()
    assert np.isfinite(G).all() and np.all(np.diag(G) > 0)
    assert G[5, 5] == 1.0
    assert np.linalg.eigvalsh(M.to_sparse().toarray()).min() > 0  # G^T G stays SPD


def test_block_isai_zero_block_row_falls_back():
    A = block3(3, seed=10).tolil()
    A[6:9, :] = 0.0              # block row 2 entirely zero
    A = sp.csr_matrix(A)
    with pytest.warns(PreconditionerWarning, match="block row"):
        M = BlockISAI(block_size=3, variant="general", sparsity_power=1, dtype="float64").setup(A)
    assert 2 in M.fallback_rows
    Md = M.to_sparse().toarray()
    assert np.isfinite(Md).all()
    np.testing.assert_array_equal(Md[6:9, 6:9], np.eye(3))


def _badly_scaled_convdiff(m=10, spread=6, seed=1):
    """``D A D`` with ``D`` from 10^-spread..10^spread: a convection-diffusion matrix whose
    rows and columns span 1e24 (``b`` from a solution of the same spread)."""
    from mpsolve.matrices import convection_diffusion3d

    rng = np.random.default_rng(seed)
    A0 = convection_diffusion3d(m, peclet=100.0)
    d = 10.0 ** rng.uniform(-spread, spread, A0.shape[0])
    A = (sp.diags(d) @ A0 @ sp.diags(d)).tocsr()
    return A, A @ (rng.standard_normal(A.shape[0]) / d)


@pytest.mark.parametrize("precond", ["isai", "block-isai"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_isai_is_set_up_on_the_equilibrated_matrix(precond, side):
    """Rows and columns scaled by 1e-6..1e6: the local systems' checks sent hundreds of rows
    to the fallback and GMRES with the default ISAI stalled at 1e-1 (2000 iterations) where
    Jacobi takes 54.  The approximate inverse is now that of the equilibrated matrix
    (powers of two, LAPACK's rule), scaled back exactly; it converges in fewer iterations
    than Jacobi's."""
    A, b = _badly_scaled_convdiff()
    r = mpsolve.solve(A, b, method="gmres", side=side, precond=precond, rtol=1e-8,
                      maxiter=500)
    j = mpsolve.solve(A, b, method="gmres", side=side, precond="jacobi", rtol=1e-8)
    assert r.info == 0 and r.iterations <= j.iterations, (r.iterations, j.iterations)
    assert np.linalg.norm(b - A @ r.x) <= 1.01e-8 * np.linalg.norm(b)
    assert r.precond_stats["equilibrated"]


@pytest.mark.parametrize("variant", ["general", "right"])
def test_equilibrated_isai_is_the_scaled_isai_of_the_equilibrated_matrix(variant):
    """Exact: ``M`` stored for ``A`` is ``diag(c) M_s diag(r)`` bit for bit, ``M_s`` the ISAI
    of ``diag(r) A diag(c)`` (already equilibrated: set up as it is) -- the pattern test
    reads the same residual, so the same power is chosen; and a well-scaled ``A`` is not
    touched."""
    from mpsolve.precond.isai import equilibrated

    A, _ = _badly_scaled_convdiff(m=6)
    C = A if variant == "general" else A.T.tocsr()
    S, (c, r) = equilibrated(C)
    M = ISAI(variant, dtype="float64").setup(A)
    Ms = ISAI(variant, dtype="float64").setup(S if variant == "general" else S.T.tocsr())
    assert M.stats["equilibrated"] and not Ms.stats["equilibrated"]
    assert M.sparsity_power == Ms.sparsity_power
    want = sp.diags(c) @ Ms.to_sparse() @ sp.diags(r)
    if variant == "right":
        want = sp.diags(r) @ Ms.to_sparse() @ sp.diags(c)
    got = M.to_sparse()
    assert (abs(got - want) > 0).nnz == 0
    P = poisson2d(8)
    assert equilibrated(P)[1] is None
    assert not ISAI("general").setup(P).stats["equilibrated"]


def test_block_jacobi_of_block_size_one_refuses_a_zero_diagonal_as_jacobi_does():
    """Detected (or given) block size 1 is point Jacobi: a zero diagonal entry was replaced
    by 1/max|row| with a warning, and GMRES ran to its limit at residual 1 on a permuted
    convection-diffusion matrix that Jacobi refuses with a clear error; now the same
    error, naming the rows."""
    A = random_nonsym(30, 0.2, 12).tolil()
    A[4, 4] = 0.0
    A[17, 17] = 0.0
    A = sp.csr_matrix(A)
    for M in (BlockJacobi(), BlockJacobi(block_size=1)):
        with pytest.raises(ValueError, match=r"zero diagonal entries \(rows 4, 17\).*mc64"):
            M.setup(A)
    with pytest.raises(ValueError, match="rows 4, 17"):
        mpsolve.solve(A, np.ones(30), method="gmres", precond="block-jacobi")


def test_block_jacobi_singular_block_falls_back():
    A = block3(3, seed=11).tolil()
    A[3, :] = A[4, :]            # block 1 has two equal rows: singular
    A[6:9, :] = 0.0              # block 2: zero rows
    A[6:9, 6:9] = np.diag([2.0, 0.0, 4.0])  # ... except a partial diagonal
    A = sp.csr_matrix(A)
    with pytest.warns(PreconditionerWarning, match="block rows 1, 2"):
        M = BlockJacobi(block_size=3, dtype="float64").setup(A)
    np.testing.assert_array_equal(M.fallback_rows, [1, 2])
    D = M.blocks
    assert np.isfinite(D).all()
    np.testing.assert_allclose(D[2], np.diag([0.5, 1.0, 0.25]))  # row 7 is empty: 1
    np.testing.assert_allclose(D[1], np.diag(1.0 / A.diagonal()[3:6]))
    for k in (0, 3, 4):
        s = slice(3 * k, 3 * k + 3)
        np.testing.assert_allclose(D[k], np.linalg.inv(A[s, s].toarray()), rtol=1e-12)


@pytest.mark.parametrize("variant", ["general", "spd"])
def test_excess_path_matches_batched(variant, monkeypatch):
    A = random_nonsym(50, 0.08, 12) if variant == "general" else random_spd(50, 0.08, 12)
    ref = ISAI(variant, dtype="float64").setup(A)
    small = ISAI(variant, dtype="float64", max_local=4).setup(A)
    assert small.stats["excess_rows"] > 0 and ref.stats["excess_rows"] == 0
    np.testing.assert_allclose(small.to_sparse().toarray(), ref.to_sparse().toarray(),
                               rtol=1e-11, atol=1e-13)
    # the sparse-LU form of the excess path (used above DENSE_EXCESS_MAX unknowns)
    monkeypatch.setattr(_localsolve, "DENSE_EXCESS_MAX", 0)
    sparse = ISAI(variant, dtype="float64", max_local=4).setup(A)
    np.testing.assert_allclose(sparse.to_sparse().toarray(), ref.to_sparse().toarray(),
                               rtol=1e-10, atol=1e-12)
    blk = BlockISAI(block_size=2, variant=variant, dtype="float64", max_local=4).setup(A)
    blk_ref = BlockISAI(block_size=2, variant=variant, dtype="float64").setup(A)
    assert blk.stats["excess_rows"] > 0
    np.testing.assert_allclose(blk.to_sparse().toarray(), blk_ref.to_sparse().toarray(),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("variant", ["general", "spd"])
def test_blocks_wider_than_max_local_take_the_excess_path(variant):
    """A block of more scalar unknowns than ``max_local`` (block_size near n) sends every
    block row to the excess path, as the docstring says: the batched kernels ran them
    unblocked (minutes for ``block_size=n`` on 2187 unknowns) -- the same M either way."""
    A = random_nonsym(48, 0.1, 14) if variant == "general" else random_spd(48, 0.1, 14)
    ref = BlockISAI(block_size=6, variant=variant, dtype="float64").setup(A)
    wide = BlockISAI(block_size=6, variant=variant, dtype="float64", max_local=5).setup(A)
    assert wide.stats["excess_rows"] == 8 and ref.stats["excess_rows"] == 0
    np.testing.assert_allclose(wide.to_sparse().toarray(), ref.to_sparse().toarray(),
                               rtol=1e-10, atol=1e-12)


def test_excess_singular_row_falls_back():
    A = random_nonsym(30, 0.1, 13).tolil()
    A[10, :] = 0.0
    A = sp.csr_matrix(A)
    with pytest.warns(PreconditionerWarning):
        M = ISAI("general", dtype="float64", max_local=2).setup(A)
    assert 10 in M.fallback_rows and np.isfinite(M.to_sparse().toarray()).all()


# ------------------------------------------------------------------ storage and apply
ALL = [
    lambda **k: ISAI("general", **k), lambda **k: ISAI("spd", **k), lambda **k: ISAI("ilu", **k),
    lambda **k: BlockISAI(variant="general", **k), lambda **k: BlockISAI(variant="spd", **k),
    lambda **k: BlockJacobi(**k), lambda **k: ILU0(**k),
]


@pytest.mark.parametrize("make", ALL)
def test_fp32_storage_agrees_with_fp64(make):
    A = block3(4, seed=14)
    r = np.random.default_rng(3).standard_normal(A.shape[0])
    M64 = make(dtype="float64").setup(A)
    M32 = make(dtype="float32").setup(A)
    assert M32.storage_dtype == np.float32 and M32.nbytes < M64.nbytes
    y64 = M64.matvec(r)
    y32 = M32.matvec(r)
    y32s = M32.matvec(r.astype(np.float32))
    assert y32s.dtype == np.float32
    scale = np.abs(y64).max()
    assert np.abs(y32 - y64).max() <= 200 * EPS32 * scale
    assert np.abs(y32s - y64).max() <= 200 * EPS32 * scale
    if isinstance(M64, (ISAI, BlockISAI)):
        acc = type(M32)(**{**_params(M32), "accumulate": "float64"}).setup(A)
        assert np.abs(acc.matvec(r) - y64).max() <= 50 * EPS32 * scale


def _params(M):
    p = dict(variant=M.variant, sparsity_power=M.sparsity_power, dtype="float32")
    if isinstance(M, BlockISAI):
        p["block_size"] = M.block_size
    return p


@pytest.mark.parametrize("make", ALL)
@pytest.mark.parametrize("vec", ["float64", "float32"])
def test_apply_in_place_without_allocation(make, vec):
    A = block3(8, seed=15)  # n = 192
    n = A.shape[0]
    M = make().setup(A)
    r = np.random.default_rng(4).standard_normal(n).astype(vec)
    r0 = r.copy()
    out = np.empty(n, dtype=vec)
    M.apply(r, out)  # first call: kernels bound, scratch vectors made
    tracemalloc.start()
    for _ in range(3):
        M.apply(r, out)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2000, f"apply allocated {peak} bytes"  # a vector would be >= 4 n = 768
    np.testing.assert_array_equal(r, r0)
    np.testing.assert_allclose(out, M.matvec(r0.astype(np.float64)),
                               rtol=100 * EPS32, atol=100 * EPS32 * np.abs(out).max())


# ------------------------------------------------------------------ ILU(0)
def dense_ilu0(A):
    """Gaussian elimination restricted to the pattern of A (Saad Alg. 10.4)."""
    W = A.toarray().astype(float)
    P = sp.csr_matrix(A).copy()
    P.data[:] = 1.0
    P = P.toarray() != 0
    n = W.shape[0]
    for i in range(1, n):
        for k in range(i):
            if P[i, k]:
                W[i, k] /= W[k, k]
                for j in range(k + 1, n):
                    if P[i, j]:
                        W[i, j] -= W[i, k] * W[k, j]
    return np.tril(W, -1) + np.eye(n), np.triu(W)


def test_ilu0_matches_dense_reference():
    A = random_nonsym(40, 0.1, 16)
    M = ILU0(dtype="float64").setup(A)
    L, U = M.factors()
    Lr, Ur = dense_ilu0(A)
    np.testing.assert_allclose(L.toarray(), Lr, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(U.toarray(), Ur, rtol=1e-12, atol=1e-14)
    r = np.random.default_rng(5).standard_normal(40)
    np.testing.assert_allclose(M.matvec(r), np.linalg.solve(Lr @ Ur, r), rtol=1e-10)
    # on the pattern of A, L U = A
    Ad, LU = A.toarray(), Lr @ Ur
    mask = Ad != 0
    np.testing.assert_allclose(LU[mask], Ad[mask], rtol=1e-12)


def test_ilu0_exact_on_tridiagonal():
    rng = np.random.default_rng(6)
    n = 30
    A = sp.diags([rng.uniform(-1, 0, n - 1), rng.uniform(3, 4, n), rng.uniform(-1, 0, n - 1)],
                 [-1, 0, 1]).tocsr()
    M = ILU0(dtype="float64").setup(A)
    MA = np.column_stack([M.matvec(c) for c in A.toarray().T])
    np.testing.assert_allclose(MA, np.eye(n), atol=1e-13)
    assert not M.symmetric and M.nbytes > 0


def _ilu_reference_solve(M, r):
    """``(L U)^{-1} r`` by SciPy's triangular solves on the stored factors."""
    L, U = M.factors()
    y = spla.spsolve_triangular(L, r.astype(np.float64), lower=True)
    return spla.spsolve_triangular(U, y, lower=False)


@pytest.mark.parametrize("store", ["float32", "float64"])
@pytest.mark.parametrize("vec", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["nonsym", "spd", "stencil"])
def test_ilu0_solve_kernel_vs_scipy_triangular_solves(store, vec, kind):
    """The sweeps (nearest-column term kept in a register, D^-1 U stored reversed) give
    the triangular solves of the stored factors: random patterns (nearest column often
    not i-1) and a stencil (always i-1)."""
    if kind == "nonsym":
        A = random_nonsym(60, 0.1, 21)
    elif kind == "spd":
        A = random_spd(60, 0.1, 22)
    else:
        from mpsolve.matrices import convection_diffusion2d
        A = convection_diffusion2d(9, peclet=5)
    M = ILU0(dtype=store).setup(A)
    r = np.random.default_rng(3).standard_normal(A.shape[0]).astype(vec)
    out = np.empty(A.shape[0], vec)
    M.apply(r, out)
    ref = _ilu_reference_solve(M, r)
    tol = 1e-13 if vec == np.float64 else 4 * EPS32
    assert np.linalg.norm(out - ref) <= tol * np.linalg.norm(ref) * 10


def test_ilu0_symmetric_form():
    """On SPD A the symmetric form stores U = D L^T exactly (M symmetric bit for bit),
    equals general ILU(0) to rounding, and is detected; symmetric=True on a
    nonsymmetric A is refused."""
    A = random_spd(50, 0.15, 23)
    Ms = ILU0(dtype="float32").setup(A)
    assert Ms.symmetric
    L, U = Ms.factors()
    D = sp.diags(1.0 / Ms.dinv.astype(np.float64))
    assert abs(U - D @ L.T).max() <= 1e-15 * abs(U).max()
    Mg = ILU0(dtype="float64", symmetric=False).setup(A)
    assert not Mg.symmetric
    Ms64 = ILU0(dtype="float64", symmetric=True).setup(A)
    E = np.eye(50)
    Dg = np.column_stack([Mg.matvec(c) for c in E])
    Ds = np.column_stack([Ms64.matvec(c) for c in E])
    np.testing.assert_allclose(Ds, Dg, rtol=1e-10, atol=1e-12 * abs(Dg).max())
    np.testing.assert_allclose(Ds, Ds.T, rtol=1e-12, atol=1e-13 * abs(Ds).max())
    assert np.all(np.linalg.eigvalsh((Ds + Ds.T) / 2) > 0)
    with pytest.raises(ValueError, match="symmetric=True"):
        ILU0(symmetric=True).setup(random_nonsym(30, 0.1, 24))
    with pytest.raises(ValueError, match="symmetric="):
        ILU0(symmetric="yes")


@pytest.mark.parametrize("kind", ["nonsym", "spd"])
def test_ilu0_blocks_is_block_jacobi_with_ilu0_blocks(kind):
    """ILU0(blocks=k): the coupling between the k row blocks is dropped, each block
    gets its own ILU(0), and the blocks are solved in parallel -- the same result as
    plain ILU(0) of the block-diagonal part."""
    A = random_nonsym(90, 0.08, 31) if kind == "nonsym" else random_spd(90, 0.08, 32)
    M = ILU0(dtype="float64", blocks=3).setup(A)
    assert M.blocks == 3
    b = M.bounds
    mask = np.zeros(A.shape, dtype=bool)
    for t in range(3):
        mask[b[t]:b[t + 1], b[t]:b[t + 1]] = True
    Ad = A.toarray() * mask
    ref = ILU0(dtype="float64").setup(sp.csr_matrix(Ad))
    assert ref.blocks == 1 and M.symmetric == ref.symmetric == (kind == "spd")
    for got, want in zip(M.factors(), ref.factors()):
        np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-13, atol=1e-14)
    r = np.random.default_rng(7).standard_normal(90)
    np.testing.assert_allclose(M.matvec(r), ref.matvec(r), rtol=1e-12)
    assert ILU0(blocks="threads").setup(A).blocks == 1  # small: one block
    for bad in (0, -1, 1.5, True, "cores"):
        with pytest.raises(ValueError, match="blocks="):
            ILU0(blocks=bad)


def test_ilu0_cg_spd_collection():
    """CG with the symmetric ILU(0) stored in FP32 converges on SPD matrices where
    ILU(0) exists, to the FP64 true residual, in the iterations of the FP64 factors."""
    import mpsolve
    from conftest import load_collection_matrix

    if not COLLECTION.exists():
        pytest.skip("no test collection")
    for name in ("nos4", "gr_30_30", "bcsstk16"):
        A = load_collection_matrix(name)
        b = A @ np.ones(A.shape[0])
        r32 = mpsolve.solve(A, b, method="cg", precond=ILU0(dtype="float32"), rtol=1e-10)
        r64 = mpsolve.solve(A, b, method="cg", precond=ILU0(dtype="float64"), rtol=1e-10)
        assert r32.converged and r64.converged and r32.true_residual <= 1e-10
        assert abs(r32.iterations - r64.iterations) <= 1 + 0.05 * r64.iterations


def test_ilu0_zero_pivot_names_the_row():
    A = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 2.0]]))
    with pytest.raises(ZeroPivotError, match="row 1"):
        ILU0(shift=None).setup(A)           # unshifted (the symmetric form shifts by default)
    with pytest.raises(ZeroPivotError, match="row 1"):
        ILU0(symmetric=False).setup(A)      # the general form is never shifted by default
    A = sp.csr_matrix(np.array([[1.0, 0.0], [1.0, 0.0]]))
    with pytest.raises(ZeroPivotError, match="row 1 is structurally missing.*reorder='mc64'"):
        ILU0().setup(A)


def test_pivot_errors_suggest_mc64_only_where_it_was_not_applied():
    """The fix named in a set-up error is one still open: ``reorder='mc64'`` outside the
    reordering, not inside it (where A already has its zero-free, unit diagonal)."""
    A = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [1.0, 1.0 + 1e-9, 4.0], [0.0, 4.0, 20.0]]))
    with pytest.raises(ZeroPivotError, match="reorder='mc64'"):
        ILU0(symmetric=False, shift=None, pivot_tol=1e-8).setup(A)
    with pytest.raises(ZeroPivotError) as err:      # its MC64 form has the same tiny pivot
        make_preconditioner("ilu0", reorder="mc64", symmetric=False, shift=None,
                            pivot_tol=1e-8).setup(A)
    assert "became" in str(err.value) and "mc64" not in str(err.value).lower()
    S = sp.csr_matrix(np.outer(np.ones(3), [1.0, 2.0, 3.0]))  # singular: SuperLU's LU fails
    with pytest.raises(ZeroPivotError, match="reorder='mc64'"):
        make_preconditioner("ilut").setup(S)
    with pytest.raises((ZeroPivotError, ValueError)) as err:
        make_preconditioner("ilut", reorder="mc64", symmetric=False).setup(S)
    assert "reorder='mc64'" not in str(err.value)
    with pytest.raises(ValueError, match="reorder='mc64'"):
        Jacobi().setup(sp.csr_matrix(np.array([[0.0, 1.0], [1.0, 0.0]])))


@pytest.mark.parametrize("symmetric", [False, True])
def test_ilu0_pivot_tol_refuses_small_pivots_relative_to_the_row(symmetric):
    """pivot_tol compares |u_ii| with row i's largest entry, both as stored and in the
    equilibrated matrix (Ruiz): u_11 = (1 + d) - 1 * 1 = d is refused at a tolerance above
    d over either reference (4 as stored, in [1, 20] equilibrated), and passes below; a
    tiny a_ii whose pivot grows back passes; a pivot small only through the units of
    the unknowns passes."""
    from mpsolve.precond._scaling import ruiz_scaling

    d = 1e-9
    A = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [1.0, 1.0 + d, 4.0], [0.0, 4.0, 20.0]]))
    _, c = ruiz_scaling(A)
    ref = max(abs(A[1, j]) * c[j] for j in range(3)) / c[1]
    assert 1.0 <= ref <= 20.0
    with pytest.raises(ZeroPivotError, match=r"row 1 became .*pivot_tol = 1e-08 times its "
                       r"row's largest entry \(as stored and with rows and columns equilibrated"):
        ILU0(symmetric=symmetric, shift=None, pivot_tol=1e-8).setup(A)
    # u_11 = d (to ~1e-7 relative: 1 + d rounded): below 1e-8 * 4, above 1e-12 * 4; ILU(0)
    # of a tridiagonal matrix is exact (FP64 factors: FP32 would round 1 + d to 1)
    M = ILU0("float64", symmetric=symmetric, shift=None, pivot_tol=1e-12).setup(A)
    np.testing.assert_allclose(M.matvec(A @ np.ones(3)), np.ones(3), rtol=1e-6)
    # a tiny diagonal entry whose pivot is not tiny: u_11 = 1e-12 + 1 (a_10 a_01 = -1)
    B = sp.csr_matrix(np.array([[1.0, -1.0], [1.0, 1e-12]]))
    assert np.allclose(ILU0("float64", pivot_tol=1e-8).setup(B).matvec(B @ np.ones(2)), 1.0)
    # the same B in other units: unknown 0 scaled by 1e6, unknown 1 by 1e-6; its factors
    # are B's, scaled: u_11 = 1e-6, 1e-12 of its row's largest entry 1e6 as stored
    S = sp.csr_matrix(B @ sp.diags([1e6, 1e-6]))
    from mpsolve.precond._scaling import row_abs_max, tiny_after_equilibration

    pivots = np.array([1e6, 1e-6 + 1e-18])     # u_11 = s_11 - s_10 s_01 / s_00
    assert pivots[1] <= 1e-8 * row_abs_max(S)[1]
    assert tiny_after_equilibration(S, pivots, 1e-8).size == 0
    M = ILU0("float64", pivot_tol=1e-8).setup(S)     # accepted, and exact: L y = S e
    # cancels 1e6 against 1e6 in y_1 = 1e-6 (1e-10 absolute rounding: 1e-4 relative)
    np.testing.assert_allclose(M.matvec(S @ np.ones(2)), 1.0, rtol=1e-4)
    for bad in (-1e-3, 1.0, True, "1e-8", float("nan")):
        with pytest.raises(ValueError, match="pivot_tol="):
            ILU0(pivot_tol=bad)


# ------------------------------------------------------------------ Krylov iterations
def _iters(solver, A, M, **kw):
    b = A @ np.ones(A.shape[0])
    count = [0]

    def cb(_):
        count[0] += 1

    x, info = solver(A, b, M=M, callback=cb, **kw)
    assert info == 0
    assert np.linalg.norm(b - A @ x) <= 1.01e-8 * np.linalg.norm(b) * (10 if M is not None else 1)
    return count[0]


def test_cg_iterations_poisson():
    A = block3(12, seed=17)  # SPD, b = 3, n = 432
    base = _iters(spla.cg, A, None, rtol=1e-8, maxiter=5000)
    counts = {}
    for name, M in [("jacobi", Jacobi()), ("block-jacobi", BlockJacobi()),
                    ("isai-spd", ISAI("spd")), ("isai-spd-2", ISAI("spd", sparsity_power=2)),
                    ("block-isai-spd", BlockISAI(variant="spd"))]:
        counts[name] = _iters(spla.cg, A, M.setup(A), rtol=1e-8, maxiter=5000)
        assert counts[name] < base, (name, counts[name], base)
    assert counts["isai-spd"] < counts["jacobi"]
    assert counts["isai-spd-2"] < counts["isai-spd"]
    assert counts["block-isai-spd"] < counts["block-jacobi"]
    P = poisson2d(20)
    assert _iters(spla.cg, P, ISAI("spd").setup(P), rtol=1e-8) < _iters(spla.cg, P, None, rtol=1e-8)


def test_gmres_iterations_convection_diffusion():
    A = convdiff2d(24)
    kw = dict(rtol=1e-8, restart=30, maxiter=200, callback_type="pr_norm")
    base = _iters(spla.gmres, A, None, **kw)
    for M in (ISAI("general"), ISAI("ilu"), ILU0(), BlockISAI(block_size=2, variant="general"),
              BlockJacobi(block_size=4)):
        it = _iters(spla.gmres, A, M.setup(A), **kw)
        assert it < base, (M, it, base)


def _load(name):
    f = COLLECTION / f"{name}.mtx.gz"
    if not f.exists():
        pytest.skip(f"{f} not found (set MPSOLVE_TEST_COLLECTION)")
    return sp.csr_matrix(sio.mmread(str(f)))


@pytest.mark.parametrize("name, spd1_max, spd2_max", [("bcsstk14", 100, 65), ("nos3", 130, 95)])
def test_spd_isai_beats_jacobi_on_suitesparse(name, spd1_max, spd2_max):
    A = _load(name)
    jac = _iters(spla.cg, A, Jacobi().setup(A), rtol=1e-8, maxiter=5000)
    s1 = _iters(spla.cg, A, ISAI("spd").setup(A), rtol=1e-8, maxiter=5000)
    s2 = _iters(spla.cg, A, ISAI("spd", sparsity_power=2).setup(A), rtol=1e-8, maxiter=5000)
    # DESIGN.md's prototype: bcsstk14 297 -> 83 -> 51, nos3 220 -> 109 -> 75
    assert s1 < jac and s2 < s1
    assert s1 <= spd1_max and s2 <= spd2_max, (jac, s1, s2)


# ------------------------------------------------------------------ interface
def test_registry_and_parameters():
    A = block3(3)
    for key in ("block-jacobi", "ilu0", "isai", "block-isai"):
        M = make_preconditioner(key).setup(A)
        assert REGISTRY[key].name == key == M.name
        assert "not set up" not in repr(M) and M.nbytes > 0
        assert np.isfinite(M.matvec(np.ones(A.shape[0]))).all()
    assert "b=3" in repr(BlockISAI().setup(A))
    with pytest.raises(ValueError, match="variant"):
        ISAI("bogus")
    with pytest.raises(ValueError, match="variant"):
        BlockISAI(variant="lower")
    with pytest.raises(ValueError, match="sparsity_power"):
        ISAI(sparsity_power=0)
    with pytest.raises(ValueError, match="block_size"):
        BlockJacobi(block_size=0)
    with pytest.raises(RuntimeError, match="not set up"):
        ISAI().matvec(np.ones(3))
    assert ISAI("general").sparsity_power == 1 and ISAI("spd").sparsity_power == 1
    assert ISAI().variant == "auto" and ISAI().sparsity_power is None  # chosen at set-up
    assert BlockJacobi(block_size=1, dtype="float64").setup(A).block_size == 1
    np.testing.assert_allclose(BlockJacobi(block_size=1, dtype="float64").setup(A).matvec(np.ones(27)),
                               1.0 / A.diagonal(), rtol=1e-14)


@pytest.mark.parametrize("spread,k", [(0.5, 1), (0.7, 2), (1.0, 1)])
def test_isai_default_power_is_a_for_good_patterns_and_a2_for_poor_ones(spread, k):
    """``general``/``right`` build on the pattern of ``A`` and move to ``A^2`` where that
    inverse leaves the sampled rows of ``M A`` far from ``I`` (median ``||e_i - m_i A||``
    over POWER_RESIDUAL) and ``A^2``'s median is lower (spread 1.0: 1.2 on ``A``, 1.5 on
    ``A^2``, which is not kept); the residuals the rule reads are the dense ones."""
    from mpsolve.precond import isai

    n = 400
    rng = np.random.default_rng(0)
    R = sp.random(n, n, density=4 / n, random_state=0,
                  data_rvs=lambda m: rng.uniform(-spread, spread, m))
    A = sp.csr_matrix(R + sp.eye(n))
    rows = isai._sample_rows(n)

    def residual(C, power):
        M = ISAI(variant="general", sparsity_power=power, dtype="float64").setup(C)
        return np.median(np.linalg.norm(np.eye(n)[rows] - M.to_sparse().toarray()[rows]
                                        @ C.toarray(), axis=1))

    for variant, C in (("general", A), ("right", sp.csr_matrix(A.T))):
        res, res2 = residual(C, 1), residual(C, 2)
        assert (res > isai.POWER_RESIDUAL and res2 < res) == (k == 2)
        assert (res > isai.POWER_RESIDUAL) == (spread > 0.5)
        for P in (ISAI(variant=variant), BlockISAI(block_size=2, variant=variant)):
            P.setup(A, dtype="float64")
            assert P.sparsity_power == k, P.power_reason
            if type(P) is ISAI:             # (Block-ISAI's rows hold whole 2 x 2 blocks)
                assert f"{res:.2f}" in P.power_reason
                if spread > 0.5:
                    assert f"{res2:.2f}" in P.power_reason
            assert P.stats["power_reason"] == P.power_reason
            assert P.stats["stage_times"]["power_test"] > 0   # (right: read on A^T)
    kept = ISAI(variant="general", sparsity_power=1).setup(A)
    assert kept.sparsity_power == 1 and kept.power_reason == "requested"


def test_power_test_keeps_the_warnings_of_the_build_it_keeps():
    """The pattern of ``A`` kept: its fallback rows are warned about once."""
    from mpsolve.matrices import convection_diffusion2d

    A = sp.lil_matrix(convection_diffusion2d(16))
    A[0, :] = 0
    A[1, :] = 0
    A[0, 0] = A[0, 1] = A[1, 0] = A[1, 1] = 1.0      # rows 0, 1: a singular local system
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        P = ISAI(variant="general").setup(sp.csr_matrix(A))
    assert P.sparsity_power == 1 and list(P.fallback_rows) == [0, 1]
    assert [str(w.message).split(":")[0] for w in caught] == ["ISAI(general)"]


@pytest.mark.parametrize("b", [1, 3, 4])
def test_power_test_reads_the_stored_rows(b):
    """The power test's sampled rows, gathered from the stored CSR/BSR arrays (a partial
    trailing block for b = 4 on 2700 rows), are those of the whole stored ``M``."""
    from mpsolve.matrices import coupled_convdiff2d
    from mpsolve.precond import isai

    A = sp.csr_matrix(coupled_convdiff2d(30))
    P = (ISAI if b == 1 else BlockISAI)(variant="general", dtype="float64",
                                        **({} if b == 1 else {"block_size": b})).setup(A)
    op = P._chain.ops[0]
    rows = isai._sample_rows(A.shape[0])
    got = isai._rows_of(op, rows)
    assert got.shape == (rows.size, A.shape[0])
    assert abs(got - op.to_scipy()[rows]).max() == 0


def test_isai_row_sums_are_fp64_unless_asked():
    """(Block-)ISAI sums its rows in FP64 whatever the storage and the policy (a linear
    ``M``; FP32 sums under ``double`` would also apply an FP64 ``M`` in single
    precision); ``accumulate`` given is kept."""
    from mpsolve.matrices import convection_diffusion2d

    A = convection_diffusion2d(12)
    b = A @ np.ones(A.shape[0])
    for prec in ("double", "mixed"):
        for P in (ISAI(), BlockISAI(block_size=2), BlockISAI(variant="bilu")):
            mpsolve.solve(A, b, method="gmres", precond=P, precision=prec)
            assert P.accumulate == "float64"
            assert {op.accumulate for op in P._chain.ops} == {"float64"}
            assert P.linear_apply(np.float64, np.float64)
    assert ISAI(accumulate="float32").setup(A, dtype="float64").accumulate == "float32"
    assert not ISAI(accumulate="float32").setup(A).linear_apply(np.float64, np.float64)
    x = np.random.default_rng(1).standard_normal(A.shape[0])
    for P in (ISAI("general"), ISAI("spd"), BlockISAI(block_size=2)):
        P.setup(A + A.T if P.variant == "spd" else A, dtype="float64")
        exact = P.to_sparse() @ x
        assert np.abs(P.matvec(x) - exact).max() <= 1e-14 * np.abs(exact).max()


@pytest.mark.parametrize("P", [ISAI, BlockISAI])
def test_an_spd_variant_asked_for_a_nonsymmetric_matrix_is_said(P):
    """``variant="spd"`` (FSAI, ``M = G^T G``) on a nonsymmetric ``A`` builds a symmetric
    ``M`` from A's lower triangle: kept (asked for), but said, in a warning and in
    ``variant_reason`` (it was silent); a symmetric ``A`` has no warning."""
    from mpsolve.matrices import convection_diffusion2d
    from mpsolve.precond import PreconditionerWarning

    A = sp.csr_matrix(convection_diffusion2d(8))
    with pytest.warns(PreconditionerWarning, match="not symmetric.*lower triangle"):
        M = P(variant="spd").setup(A)
    assert M.variant == "spd" and M.symmetric and "not symmetric" in M.variant_reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        M = P(variant="spd").setup(sp.csr_matrix(A + A.T))
    assert M.variant_reason == "requested"


# ------------------------------------------------------------------ devices
# Issue 9: a preconditioner is set up *for* a device and stores device-neutral
# operators; the ``reference`` device (plain NumPy kernels) must give the CPU's results.

def block_nonsym(k=4, seed=5):
    """3 dofs per node, nonsymmetric: kron(convection-diffusion, random 3x3) plus a
    nonsymmetric perturbation on the block pattern (block size 3)."""
    rng = np.random.default_rng(seed)
    K = rng.standard_normal((3, 3)) + 4 * np.eye(3)
    A = sp.kron(convdiff2d(k), K).tocsr()
    P = A.copy()
    P.data = rng.uniform(-1, 1, P.nnz) * 1e-2 * np.abs(A.data).max()
    return sp.csr_matrix(A + P)


DEVICE_CASES = {
    "jacobi": (lambda **k: Jacobi(**k), lambda: random_spd(60, 0.08, 41)),
    "block-jacobi": (lambda **k: BlockJacobi(**k), lambda: block3(4, seed=42)),
    "ilu0": (lambda **k: ILU0(**k), lambda: random_nonsym(70, 0.08, 43)),
    "ilu0-spd": (lambda **k: ILU0(**k), lambda: random_spd(70, 0.08, 44)),
    "ilu0-blocks2": (lambda **k: ILU0(blocks=2, **k), lambda: random_nonsym(70, 0.08, 45)),
    "ilu0-blocks2-spd": (lambda **k: ILU0(blocks=2, **k), lambda: poisson2d(9)),
    "isai-general": (lambda **k: ISAI("general", **k), lambda: random_nonsym(60, 0.08, 46)),
    "isai-spd": (lambda **k: ISAI("spd", **k), lambda: random_spd(60, 0.08, 47)),
    "isai-ilu": (lambda **k: ISAI("ilu", **k), lambda: convdiff2d(8)),
    "block-isai-general": (lambda **k: BlockISAI(variant="general", **k), lambda: block_nonsym()),
    "block-isai-spd": (lambda **k: BlockISAI(variant="spd", **k), lambda: block3(4, seed=48)),
}


def _device_ops(M):
    ops = getattr(M, "_chain", None)
    return ops.ops if ops is not None else [M._op]


@pytest.mark.parametrize("store", ["float64", "float32"])
@pytest.mark.parametrize("case", sorted(DEVICE_CASES))
def test_reference_device_matches_cpu(case, store):
    """Every preconditioner set up for ``device="reference"`` stores the same operator
    (its set-up kernels give the CPU's bit for bit) and applies to the CPU's result:
    within 1e-13 with FP64 storage, accumulation and vectors, a few FP32 eps otherwise
    (FMA and summation order in the kernels)."""
    make, matrix = DEVICE_CASES[case]
    A = matrix()
    cpu = make(dtype=store).setup(A)
    ref = make(dtype=store).setup(A, device="reference")
    assert (cpu.device, ref.device) == ("cpu", "reference")
    assert all(op.device == "reference" for op in _device_ops(ref))
    assert ref.nbytes == cpu.nbytes and ref.symmetric == cpu.symmetric
    # the same stored operator: the set-up is identical on both devices
    for a, b in zip(_device_ops(cpu), _device_ops(ref)):
        if hasattr(a, "to_scipy"):
            assert abs(a.to_scipy() - b.to_scipy()).max() == 0.0
    if isinstance(cpu, ILU0):
        assert cpu.blocks == ref.blocks
        for a, b in zip(cpu.factors(), ref.factors()):
            assert abs(a - b).max() == 0.0
    r = np.random.default_rng(3).standard_normal(A.shape[0])
    fp64 = store == "float64" and getattr(cpu, "accumulate", "float64") == "float64"
    for vec in (np.float64, np.float32):
        rv = r.astype(vec)
        want, got = np.empty_like(rv), np.empty_like(rv)
        cpu.apply(rv, want)
        ref.apply(rv, got)
        tol = 1e-13 if fp64 and vec == np.float64 else 8 * EPS32
        assert np.linalg.norm(got.astype(np.float64) - want) <= tol * np.linalg.norm(want), vec
    want = cpu.matvec(r)
    np.testing.assert_allclose(ref.matvec(r), want, rtol=0,
                               atol=(1e-13 if fp64 else 8 * EPS32) * np.abs(want).max())


def test_setup_canonical_and_device_argument():
    """``setup_canonical`` takes the canonical CSR of ``make_problem`` (no second
    check); ``setup(device=)`` is validated."""
    from mpsolve._sparse import canonical_csr

    A = random_nonsym(40, 0.1, 49)
    C = canonical_csr(A)
    M1 = ISAI("general", dtype="float64").setup_canonical(C, device="reference")
    M2 = ISAI("general", dtype="float64").setup(A.tocoo())
    assert M1.device == "reference" and M2.device == "cpu"
    assert abs(M1.to_sparse() - M2.to_sparse()).max() == 0.0
    with pytest.raises(ValueError, match="device="):
        Jacobi().setup(A, device="tpu")


# the ILU(0) and local-gather kernels of the two host devices
def _ilu_layout(A, dtype, blocks):
    M = ILU0(dtype=dtype, blocks=blocks, symmetric=False).setup(A)
    op = M._op
    return M.bounds, (op.lptr, op.lind, op.lval, op.uptr, op.uind, op.uval, op.dinv)


@pytest.mark.parametrize("blocks", [1, 3])
@pytest.mark.parametrize("store", ["float32", "float64"])
def test_ilu_sweeps_kernels_agree(store, blocks):
    """``ilu_sweeps`` on cpu and reference: FP64 row sums rounded once to ``y``; equal
    up to the CPU's FMA on the nearest term (and its reassociated sums)."""
    A = random_nonsym(120, 0.05, 50)
    bounds, arrays = _ilu_layout(A, store, blocks)
    assert bounds.size == blocks + 1
    x64 = np.random.default_rng(4).standard_normal(A.shape[0])
    for xd in ("float32", "float64"):
        for yd in ("float32", "float64"):
            x = x64.astype(xd)
            want = np.empty(x.size, yd)
            got = np.empty(x.size, yd)
            lookup("cpu", "ilu_sweeps", (store, xd, yd))(bounds, *arrays, x, want)
            lookup("reference", "ilu_sweeps", (store, xd, yd))(bounds, *arrays, x, got)
            tol = 1e-14 if yd == "float64" else 8 * EPS32
            err = np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want)
            assert err <= tol, (xd, yd, err)


@pytest.mark.parametrize("b", [1, 3])
def test_gather_local_kernels_agree(b):
    """``gather_local`` on cpu and reference: the same local matrices, bit for bit,
    and each equals the dense ``A[J, J]``."""
    from mpsolve.precond._pattern import block_pattern, to_bsr

    A = block3(3, seed=51) if b == 3 else random_nonsym(50, 0.08, 52)
    aptr, aind, adata = to_bsr(sp.csr_matrix(A), b)
    nb = aptr.size - 1
    pptr, pind = block_pattern(aptr, aind, nb, power=2)
    sizes = np.diff(pptr)
    m = int(np.bincount(sizes).argmax())
    rows = np.flatnonzero(sizes == m).astype(np.int64)
    outs = []
    for dev in ("cpu", "reference"):
        out = np.zeros((rows.size, m * b, m * b))
        lookup(dev, "gather_local", ("float64",))(rows, pptr, pind, aptr, aind, adata, out)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])
    D = A.toarray()
    for t in (0, rows.size // 2, rows.size - 1):
        J = (pind[pptr[rows[t]]:pptr[rows[t] + 1]][:, None] * b + np.arange(b)).ravel()
        np.testing.assert_array_equal(outs[0][t], D[np.ix_(J, J)])


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_scaling_kernels_agree(index):
    """The line maxima and Ruiz's scaling (the compiled kernels behind
    :mod:`mpsolve.precond._scaling`) against the reference device, and Ruiz's contract:
    every nonzero row and column maximum of ``diag(r) |C| diag(c)`` within ``1 +- close``
    (entries spread over 1e-12..1e12, an empty row and an empty column, a rectangular
    matrix); a budget of passes that ends before it returns the budget."""
    rng = np.random.default_rng(7)
    C = sp.random(60, 50, density=0.08, random_state=rng, format="lil")
    C[3, :] = 0
    C[:, 7] = 0
    C = sp.csr_matrix(C)
    C.data *= 10.0 ** rng.uniform(-12, 12, C.nnz) * rng.choice([-1, 1], C.nnz)
    C.indptr, C.indices = C.indptr.astype(index), C.indices.astype(index)
    mag = np.abs(C.data)
    r0, c0 = 10.0 ** rng.uniform(-3, 3, 60), 10.0 ** rng.uniform(-3, 3, 50)
    out = {}
    for dev in ("cpu", "reference"):
        rm, cm = np.full(60, np.nan), np.full(50, np.nan)
        lookup(dev, "line_abs_max", ("float64",))(C.indptr, C.indices, mag, r0, c0, rm, cm)
        r, c = np.ones(60), np.ones(50)
        passes = lookup(dev, "ruiz_scaling", ("float64",))(C.indptr, C.indices, mag, 40, 0.25,
                                                           r, c)
        r2, c2 = np.ones(60), np.ones(50)
        short = lookup(dev, "ruiz_scaling", ("float64",))(C.indptr, C.indices, mag, 2, 0.25,
                                                          r2, c2)
        out[dev] = (rm, cm, r, c, passes, short)
    B = abs(sp.diags(r0) @ C @ sp.diags(c0))
    np.testing.assert_array_equal(out["cpu"][0], B.max(axis=1).toarray().ravel())
    np.testing.assert_array_equal(out["cpu"][1], B.max(axis=0).toarray().ravel())
    for a, b in zip(out["cpu"], out["reference"]):
        np.testing.assert_allclose(a, b, rtol=1e-13)
    rm_, cm_, r, c, passes, short = out["cpu"]
    assert 2 < passes < 40 and short == 2
    S = abs(sp.diags(r) @ C @ sp.diags(c))
    rmax, cmax = S.max(axis=1).toarray().ravel(), S.max(axis=0).toarray().ravel()
    assert rmax[3] == 0 and cmax[7] == 0 and r[3] == 1 and c[7] == 1
    on_r, on_c = rmax > 0, cmax > 0
    assert np.all(np.abs(rmax[on_r] - 1) <= 0.25) and np.all(np.abs(cmax[on_c] - 1) <= 0.25)


@pytest.mark.parametrize("kind", ["nonsym", "spd"])
def test_ilu_setup_kernels_agree(kind):
    """The ILU(0) set-up ops (factorisation, diagonal positions, symmetry check, layout,
    block split and its plan) give the same arrays on cpu and reference."""
    from mpsolve.kernels.registry import launch_plan

    A = sp.csr_matrix(random_nonsym(80, 0.06, 53) if kind == "nonsym" else random_spd(80, 0.06, 54))
    f64 = ("float64",)
    res = {}
    for dev in ("cpu", "reference"):
        k = {op: lookup(dev, op, f64) for op in ("diag_positions", "ilu0_factor", "symmetric_mirror",
                                                 "ilu_split", "drop_coupling")}
        bounds = launch_plan(dev, "ilu_sweeps", A.indptr, 3, 50_000)
        ip, ix, dv = k["drop_coupling"](A.indptr, A.indices, A.data, bounds)
        diag = k["diag_positions"](A.indptr, A.indices)
        data = A.data.astype(np.float64)
        bad = k["ilu0_factor"](A.indptr, A.indices, data, diag)
        mirror = np.zeros(A.nnz, np.int32)
        sym = bool(k["symmetric_mirror"](A.indptr, A.indices, A.data, 1e-12, mirror))
        n = A.shape[0]
        nl = int(np.sum(diag - A.indptr[:-1]))
        lay = [np.empty(nl), np.empty(nl, np.int32), np.empty(n + 1, np.int64),
               np.empty(A.nnz - n - nl), np.empty(A.nnz - n - nl, np.int32),
               np.empty(n + 1, np.int64), np.empty(n)]
        k["ilu_split"](A.indptr, A.indices, data, diag, sym, mirror, *lay)
        res[dev] = [bounds, ip, ix, dv, diag, data, np.array([bad, sym]), mirror] + lay
    assert res["cpu"][6][1] == (kind == "spd")
    for a, b in zip(res["cpu"], res["reference"]):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    # "threads": the reference device is serial, one block
    assert launch_plan("reference", "ilu_sweeps", A.indptr, "threads", 1).size == 2


@pytest.mark.parametrize("field", ["real", "complex"])
def test_ic0_factor_is_ilu0_factor_at_half_the_work(field):
    """IC(0) (``ic0_factor``: the upper factor by elimination, the lower one read off it)
    gives ILU(0)'s factors of a symmetric (Hermitian) matrix to rounding, the same bits on
    cpu and reference (real data), and names the same bad row."""
    A = sp.csr_matrix(random_spd(90, 0.08, 55))
    if field == "complex":
        rng = np.random.default_rng(56)
        E = sp.triu(A, 1).tocsr()
        E.data = E.data * np.exp(1j * rng.uniform(0, np.pi, E.nnz))
        A = sp.csr_matrix(sp.diags(A.diagonal()) + E + E.conj().T)
        A.sort_indices()
    key = ("complex128",) if field == "complex" else ("float64",)
    diag = lookup("cpu", "diag_positions", key)(A.indptr, A.indices)
    mirror = np.zeros(A.nnz, np.int32)
    assert lookup("cpu", "symmetric_mirror", key)(A.indptr, A.indices, A.data, 1e-12, mirror)
    full = A.data.astype(key[0])
    assert lookup("cpu", "ilu0_factor", key)(A.indptr, A.indices, full, diag) == -1
    half = {}
    for dev in ("cpu", "reference"):
        half[dev] = A.data.astype(key[0])
        assert lookup(dev, "ic0_factor", key)(A.indptr, A.indices, half[dev], diag, mirror) == -1
    if field == "real":
        assert np.array_equal(half["cpu"], half["reference"])
    else:  # Numba's complex product rounds differently from NumPy's
        np.testing.assert_allclose(half["cpu"], half["reference"], rtol=1e-14, atol=1e-16)
    np.testing.assert_allclose(half["cpu"], full, rtol=1e-12, atol=1e-14 * abs(full).max())
    # positive=True: the first pivot that is not positive ends it, on both devices
    B = sp.csr_matrix(A - sp.diags(np.full(A.shape[0], 0.8 * A.diagonal().real.min())) * 4)
    B.sort_indices()
    mb = np.zeros(B.nnz, np.int32)
    assert lookup("cpu", "symmetric_mirror", key)(B.indptr, B.indices, B.data, 1e-12, mb)
    db = lookup("cpu", "diag_positions", key)(B.indptr, B.indices)
    f = B.data.astype(key[0])
    assert lookup("cpu", "ic0_factor", key)(B.indptr, B.indices, f, db, mb) == -1
    first = int(np.flatnonzero(~(f[db].real > 0))[0])        # its first pivot <= 0
    for dev in ("cpu", "reference"):
        assert lookup(dev, "ic0_factor", key)(B.indptr, B.indices, B.data.astype(key[0]), db, mb,
                                              True) == first
    # a missing diagonal entry (row 7): both name that row
    C = A.tolil()
    C[7, 7] = 0
    C = sp.csr_matrix(C)
    C.eliminate_zeros()
    C.sort_indices()
    d = lookup("cpu", "diag_positions", key)(C.indptr, C.indices)
    mc = np.zeros(C.nnz, np.int32)
    assert lookup("cpu", "symmetric_mirror", key)(C.indptr, C.indices, C.data, 1e-12, mc)
    for dev in ("cpu", "reference"):
        assert lookup(dev, "ilu0_factor", key)(C.indptr, C.indices, C.data.astype(key[0]), d) == 7
        assert lookup(dev, "ic0_factor", key)(C.indptr, C.indices, C.data.astype(key[0]), d,
                                              mc) == 7


def test_precond_names_no_device():
    """Only kernels/ knows devices (house rule 11): nothing in precond/ names a device in
    a kernel lookup or launch plan, imports numba/cupy, or imports a device's kernels."""
    import ast

    import mpsolve.precond

    root = pathlib.Path(mpsolve.precond.__file__).parent
    files = sorted(root.glob("*.py"))
    assert len(files) >= 8
    for f in files:
        src = f.read_text()
        assert 'lookup("cpu"' not in src and "lookup('cpu'" not in src, f.name
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                names = []
            for name in names:
                parts = name.split(".")
                assert parts[0] not in ("numba", "cupy", "cupyx"), (f.name, name)
                assert not ("kernels" in parts and ({"cpu", "cuda", "reference"} & set(parts))), \
                    (f.name, name)
            if isinstance(node, ast.Call):
                fn = node.func
                fname = fn.id if isinstance(fn, ast.Name) else getattr(fn, "attr", "")
                if fname in ("lookup", "launch_plan") and node.args:
                    assert not isinstance(node.args[0], ast.Constant), (f.name, node.lineno)


# ------------------------------------------------------------------ (Block-)ISAI set-up kernels
def _with_defects(A):
    """``A`` with an explicit stored zero and one missing diagonal entry (row 3)."""
    A = sp.csr_matrix(A, dtype=np.float64).tolil()
    A[3, 3] = 0.0
    A = sp.csr_matrix(A)
    A.eliminate_zeros()
    A = A.tocoo()
    r, c, v = A.row.tolist(), A.col.tolist(), A.data.tolist()
    r.append(5), c.append(A.shape[0] - 1), v.append(0.0)   # a stored zero
    C = sp.csr_matrix((v, (r, c)), shape=A.shape)
    C.sort_indices()
    return C


@pytest.mark.parametrize("b", [1, 3])
def test_isai_pattern_kernels_agree(b):
    """``bsr_from_csr``, ``pattern_power``, ``strong_graph``, ``pattern_union_power``,
    ``pattern_truncate`` and ``bsr_transpose`` give the same arrays on cpu (compiled) and
    reference (SciPy): BSR with every diagonal block and every stored entry, ``(S + I)^k``
    whole/lower/upper (alone and joined with A's pattern), the strong couplings, the
    heaviest columns of
    ``|A|^k`` (k <= 2: equal weights, equal ties), the block transpose."""
    A = _with_defects(block3(3, seed=55, dim=3) if b == 3 else random_nonsym(90, 0.05, 56))
    f64 = ("float64",)
    res = {dev: lookup(dev, "bsr_from_csr", f64)(A.indptr, A.indices, A.data, b)
           for dev in ("cpu", "reference")}
    for x, y in zip(res["cpu"], res["reference"]):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    aptr, aind, adata = res["cpu"]
    nb = aptr.size - 1
    assert np.all(np.diff(aptr) > 0) and aind.size == np.unique(
        np.repeat(np.arange(nb), np.diff(aptr)) * nb + aind).size
    Ad = A.toarray()
    np.testing.assert_array_equal(sp.bsr_matrix((adata, aind, aptr), shape=A.shape).toarray(), Ad)
    for power in (1, 2, 3):
        for part in (0, 1, 2):
            pc, pr = (lookup(dev, "pattern_power", f64)(aptr, aind, power, part)
                      for dev in ("cpu", "reference"))
            assert np.array_equal(pc[0], pr[0]) and np.array_equal(pc[1], pr[1]), (power, part)
    # the strong-coupling extension's union (S: every other entry of A, made symmetric)
    ar = np.repeat(np.arange(nb), np.diff(aptr))
    S = sp.csr_matrix((np.ones(ar[::2].size), (ar[::2], aind[::2])), shape=(nb, nb))
    S = sp.csr_matrix(S + S.T)
    S.data[:] = 1.0
    norms = np.sqrt((adata ** 2).sum(axis=(1, 2)))
    norms[::7] = 0.0                                  # (stored zeros are never strong)
    for theta in (0.0, 0.25, 0.9):
        gc, gr = (lookup(dev, "strong_graph", f64)(aptr, aind, norms, theta)
                  for dev in ("cpu", "reference"))
        assert np.array_equal(gc[0], gr[0]) and np.array_equal(gc[1], gr[1]), theta
    assert gc[1].size < aind.size - nb
    for power in (1, 2, 3, 5):
        for part in (0, 1, 2):
            uc, ur = (lookup(dev, "pattern_union_power", f64)(
                aptr, aind, S.indptr.astype(np.int64), S.indices.astype(np.int64), power, part)
                for dev in ("cpu", "reference"))
            assert np.array_equal(uc[0], ur[0]) and np.array_equal(uc[1], ur[1]), (power, part)
    rows = np.repeat(np.arange(nb), np.diff(aptr))
    w = np.sqrt((adata ** 2).sum(axis=(1, 2))) + 1e-30
    w[aind == rows] += w.max()
    for power in (1, 2):
        pp, pi = lookup("cpu", "pattern_power", f64)(aptr, aind, power, 0)
        keep = int(np.median(np.diff(pp)))
        tc, tr = (lookup(dev, "pattern_truncate", f64)(pp, pi, aptr, aind, w, power, keep)
                  for dev in ("cpu", "reference"))
        assert tc[2] == tr[2] > 0
        assert np.array_equal(tc[0], tr[0]) and np.array_equal(tc[1], tr[1]), power
        assert np.diff(tc[0]).max() == keep
    data = np.random.default_rng(57).standard_normal((pi.size, b, b))
    tc, tr = (lookup(dev, "bsr_transpose", f64)(pp, pi, data) for dev in ("cpu", "reference"))
    for x, y in zip(tc, tr):
        assert np.array_equal(x, y)
    T = sp.bsr_matrix((data, pi, pp), shape=A.shape).toarray().T
    np.testing.assert_array_equal(sp.bsr_matrix((tc[2], tc[1], tc[0]), shape=A.shape).toarray(), T)
    # a stored operator's arrays (int32 indices, FP32 or complex64 blocks) keep their dtypes
    p32, i32 = pp.astype(np.int32), pi.astype(np.int32)
    for dt in (np.float32, np.complex64):
        d = (data + (1j * data[::-1] if dt is np.complex64 else 0)).astype(dt)
        tc, tr = (lookup(dev, "bsr_transpose", (np.dtype(dt).name,))(p32, i32, d)
                  for dev in ("cpu", "reference"))
        for x, y, want in zip(tc, tr, (np.int32, np.int32, dt)):
            assert x.dtype == y.dtype == want and np.array_equal(x, y)
        np.testing.assert_array_equal(
            sp.bsr_matrix((tc[2], tc[1], tc[0]), shape=A.shape).toarray(),
            sp.bsr_matrix((d, pi, pp), shape=A.shape).toarray().T)


def test_to_bsr_copies_unless_told_not_to():
    """``to_bsr`` returns blocks that do not share ``A``'s values unless ``copy=False`` (the
    ISAI set-up only reads them); with ``b = 1`` and every diagonal stored they are then
    a view, and the ISAI set-up leaves ``A`` as it was."""
    from mpsolve.precond._pattern import to_bsr

    A = poisson2d(8)
    before = A.copy()
    for dev in ("cpu", "reference"):
        _, _, d = to_bsr(A, 1, device=dev)
        assert not np.may_share_memory(d, A.data)
        _, _, d = to_bsr(A, 1, device=dev, copy=False)
        np.testing.assert_array_equal(d.reshape(-1), A.data)
    assert np.may_share_memory(to_bsr(A, 1, copy=False)[2], A.data)
    for variant in ("spd", "general", "right"):
        ISAI(variant, sparsity_power=1).setup(A)
    assert (A != before).nnz == 0


def test_block_capacity_kernels_agree_and_detect_block_size():
    """``block_capacity`` on cpu and reference (also stopped early at an excess bound),
    and the block size it detects equals :func:`mpsolve.matrices.detect_block_size`
    (partial last blocks included)."""
    from mpsolve.matrices import detect_block_size as detect_ref
    from mpsolve.matrices import elasticity3d, poisson3d

    f64 = ("float64",)
    E = elasticity3d(3)
    cases = [E, sp.csr_matrix(E[:-2, :-2]), block3(3, seed=60), random_nonsym(40, 0.1, 61),
             sp.csr_matrix(poisson3d(12)), elasticity3d(6),
             sp.csr_matrix(sp.kron(poisson2d(3), np.ones((2, 2))))]
    for A in cases:
        A = sp.csr_matrix(A)
        for b in (2, 3, 4, 5):
            caps = [lookup(dev, "block_capacity", f64)(A.indptr, A.indices, A.shape[1], b)
                    for dev in ("cpu", "reference")]
            assert caps[0] == caps[1] >= A.nnz, (b, caps)
            for slack in (0, 3, A.nnz // 20, caps[0] - A.nnz, caps[0] - A.nnz - 1):
                if slack < 0:
                    continue
                # stopped early: nnz + slack + 1 exactly when the excess passes the slack
                want = caps[0] if caps[0] - A.nnz <= slack else A.nnz + slack + 1
                got = [lookup(dev, "block_capacity", f64)(A.indptr, A.indices, A.shape[1], b,
                                                          slack) for dev in ("cpu", "reference")]
                assert got == [want, want], (b, slack, got, want)
        for fill in (0.5, 0.95, 1.0):
            assert detect_block_size(A, min_fill=fill) == detect_ref(A, min_fill=fill)
    assert detect_block_size(E) == 3 and detect_block_size(sp.csr_matrix(E[:-2, :-2])) == 3


def _local_problem(b, power, part, seed):
    """BSR ``A`` with a duplicated row, a zero row and a non-symmetric corner, its pattern,
    the diagonal positions; the local systems come in several sizes (``b = 3``: the 27-point
    elasticity stencil, up to 27 blocks, s = 81 unknowns)."""
    from mpsolve.matrices import elasticity3d
    from mpsolve.precond._pattern import block_pattern, to_bsr

    rng = np.random.default_rng(seed)
    if b == 3:
        A = elasticity3d(3)
        A = A + sp.diags(rng.uniform(0, 0.1, A.shape[0]))
    else:
        A = random_spd(70, 0.06, seed)
    A = sp.csr_matrix(A).tolil()
    A[7, :] = A[6, :]                  # duplicated row: local systems holding 6 and 7 singular
    A[20, :] = 0.0                     # zero row
    A[30, 31] += 0.5                   # not symmetric there
    A = sp.csr_matrix(A)
    aptr, aind, adata = to_bsr(A, b)
    nb = aptr.size - 1
    pp, pi = block_pattern(aptr, aind, nb, power, part)
    sizes = np.diff(pp)
    pos = np.array([np.searchsorted(pi[pp[i]:pp[i + 1]], i) for i in range(nb)])
    return A, (aptr, aind, adata), (pp, pi), sizes, pos


def _lapack_rows(A, b, pp, pi, i, p, spd, cond=None):
    """The local system of block row ``i`` solved by LAPACK, and the rejection rule
    (``cond``: a dict that receives ``Mat``'s condition number)."""
    J = (pi[pp[i]:pp[i + 1]][:, None] * b + np.arange(b)).ravel()
    AJ = sp.csr_matrix(A)[J][:, J].toarray()
    Mat = AJ if spd else AJ.T
    E = np.zeros((J.size, b))
    E[p * b + np.arange(b), np.arange(b)] = 1.0
    try:
        X = np.linalg.solve(Mat, E)
    except np.linalg.LinAlgError:
        return None, True
    with np.errstate(all="ignore"):
        nA = np.abs(Mat).sum(axis=1).max()
        nX = np.abs(X).sum(axis=1).max()
        bwd = np.abs(Mat @ X - E).sum(axis=1).max() / (nA * nX + 1)
    bad = not (np.isfinite(X).all() and bwd <= _localsolve.BWD_TOL
               and nA * nX <= _localsolve.COND_LIMIT)
    if cond is not None:
        cond[i] = np.linalg.cond(Mat) if np.isfinite(Mat).all() else np.inf
    return X, bad


@pytest.mark.parametrize("lockstep", [True, False])
@pytest.mark.parametrize("b, power", [(1, 2), (3, 1)])
@pytest.mark.parametrize("kind", ["lu", "lu-spd", "chol", "tri-lower", "tri-upper"])
def test_local_solve_kernels_agree(kind, b, power, lockstep, monkeypatch):
    """``local_lu_solve``, ``local_chol_solve``, ``local_tri_solve`` on cpu (systems in lock
    step, or one per iteration) and reference (NumPy on the stacks): the same blocks bit
    for bit and the same rejections; the rejections are LAPACK's under the rule of
    ``_localsolve`` and the accepted rows solve their local systems."""
    from mpsolve.kernels.cpu import localsolve
    from mpsolve.precond._pattern import to_bsr

    monkeypatch.setattr(localsolve, "LOCKSTEP_MAX", 10**6 if lockstep else 0)

    spd = kind in ("lu-spd", "chol")
    part = "lower" if spd else {"tri-lower": "lower", "tri-upper": "upper"}.get(kind, "all")
    A, (aptr, aind, adata), (pp, pi), sizes, pos = _local_problem(b, power, part, 58)
    if kind.startswith("tri"):                     # a triangular A (ILU's factors)
        A = sp.csr_matrix(sp.tril(A) if kind == "tri-lower" else sp.triu(A))
        A.sort_indices()
        aptr, aind, adata = to_bsr(A, b)
    nb = aptr.size - 1
    assert len(np.unique(sizes)) > 2 and (b == 1 or kind != "lu" or sizes.max() * b == 81)
    rows = np.random.default_rng(59).permutation(nb).astype(np.int64)   # any order
    f64 = ("float64",)
    outs, bads = [], []
    for dev in ("cpu", "reference"):
        out = np.full((pi.size, b, b), 7.0)
        bad = np.zeros(nb, np.int8)
        args = (rows, pos[rows], pp, pi, aptr, aind, adata)
        tol = (_localsolve.BWD_TOL, _localsolve.COND_LIMIT, out, bad)
        if kind.startswith("lu"):
            lookup(dev, "local_lu_solve", f64)(*args, kind == "lu-spd", *tol)
        elif kind == "chol":
            lookup(dev, "local_chol_solve", f64)(*args, *tol)
        else:
            lookup(dev, "local_tri_solve", f64)(*args, kind == "tri-lower", *tol)
        outs.append(out)
        bads.append(bad)
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(bads[0], bads[1])
    out, bad = outs[0], bads[0]
    if kind == "chol":                              # left to LU: non-SPD and rejected rows
        assert {0, 2} >= set(np.unique(bad).tolist()) and np.any(bad == 2)
        bad = bad.astype(bool)
    got_bad = set(rows[bad != 0].tolist())
    assert got_bad                                   # the defects are caught
    for t, i in enumerate(rows):
        X, want_bad = _lapack_rows(A, b, pp, pi, i, pos[i], spd)
        blocks = out[pp[i]:pp[i + 1]]
        if kind == "chol":
            if not bad[t]:
                assert not want_bad
            continue
        if kind == "lu-spd":
            if not want_bad and not bad[t]:
                Zl = X[-b:]
                G = np.linalg.solve(np.linalg.cholesky(0.5 * (Zl + Zl.T)), X.T)
                np.testing.assert_allclose(np.hstack(list(blocks)), G, rtol=1e-10, atol=1e-12)
            assert bad[t] >= want_bad, i            # the FSAI finish may reject more
            continue
        assert bool(bad[t]) == want_bad, i
        if not want_bad:
            np.testing.assert_allclose(np.hstack(list(blocks)), X.T, rtol=1e-10, atol=1e-12)
        else:
            assert np.all(blocks == 7.0)            # rejected: out untouched


def _lapack_isai(A, b, power, variant):
    """Today's rule by LAPACK, row by row: the rows that must fall back, and the rows of M
    (G for spd) of the others."""
    from mpsolve.precond._pattern import block_pattern, to_bsr, truncate_wide_rows
    from mpsolve.precond.isai import NARROW_ABOVE

    aptr, aind, adata = to_bsr(sp.csr_matrix(A), b)
    nb = aptr.size - 1
    pp, pi = block_pattern(aptr, aind, nb, power, "lower" if variant == "spd" else "all")
    if power > 1:
        pp, pi, _ = truncate_wide_rows(pp, pi, aptr, aind, adata, power, NARROW_ABOVE // b)
    bad, rows, cond = [], {}, {}
    A = sp.csr_matrix(A)
    for i in range(nb):
        p = int(np.searchsorted(pi[pp[i]:pp[i + 1]], i))
        X, rej = _lapack_rows(A, b, pp, pi, i, p, variant == "spd", cond)
        if not rej and variant == "spd":
            Zl = 0.5 * (X[-b:] + X[-b:].T)
            w = np.linalg.eigvalsh(Zl)
            rej = not (w[0] > 0 and w[0] * _localsolve.COND_LIMIT >= w[-1])
            if not rej:
                X = np.linalg.solve(np.linalg.cholesky(Zl), X.T).T
        if rej:
            bad.append(i)
        else:
            rows[i] = (pi[pp[i]:pp[i + 1]], X.T, cond[i])
    return np.array(bad, dtype=np.int64), rows


def _backward_error(A, J, x, i, spd):
    """``||x A_J - e_i|| / (||A_J|| ||x|| + 1)`` (infinity norms; ``spd``: ``A_J x^T``)."""
    AJ = A[J][:, J].toarray()
    r = AJ @ x if spd else x @ AJ
    r[np.searchsorted(J, i)] -= 1.0
    nA = np.abs(AJ if spd else AJ.T).sum(axis=1).max()
    return np.abs(r).max() / (nA * np.abs(x).max() + 1.0)


@pytest.mark.parametrize("name, variant, power", [
    ("sherman2", "spd", 1), ("mhd4800a", "general", 1), ("mhd4800a", "spd", 1),
    ("sherman2", "general", 1), ("orsirr_1", "general", 2)])
def test_isai_fallback_rows_are_lapacks(name, variant, power, monkeypatch):
    """The compiled batched solves reject exactly the local systems that LAPACK's solve
    rejects under the rule of ``_localsolve`` (so ``fallback_rows`` is what the LAPACK
    set-up reported: 721 rows of sherman2 (spd), 4493 / 4620 of mhd4800a); every other
    row of ``M`` meets the rule's backward error bound and, where its local system is
    well-conditioned, agrees with LAPACK's row.  (Local systems that are singular to
    working precision but consistent -- qh1484, rajat19 -- are a matter of rounding luck
    for either: the compiled LU meets an exact zero pivot and falls back where LAPACK may
    return some solution.)"""
    from mpsolve.precond import isai

    A = _load(name)
    # the local solves of A itself (mhd4800a's rows span 2^42: the general set-up would
    # redo them on the equilibrated matrix, tested on its own above)
    monkeypatch.setattr(isai, "equilibrated", lambda C: (C, None))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PreconditionerWarning)
        M = ISAI(variant, sparsity_power=power, dtype="float64").setup(A)
    want_bad, rows = _lapack_isai(A, 1, power, variant)
    np.testing.assert_array_equal(M.fallback_rows, want_bad)
    S = sp.csr_matrix(M.operators()[0])
    S.sort_indices()
    eps = np.finfo(np.float64).eps
    for i, (J, x, cond) in rows.items():
        cols = S.indices[S.indptr[i]:S.indptr[i + 1]]
        assert np.isin(cols, J).all()
        got = np.zeros(A.shape[0])
        got[cols] = S.data[S.indptr[i]:S.indptr[i + 1]]
        if variant == "general":
            assert _backward_error(A, J, got[J], i, False) <= _localsolve.BWD_TOL
        if cond <= 1e4:
            err = np.linalg.norm(got[J] - x.ravel()) / np.linalg.norm(x)
            assert err <= 1e3 * eps * cond, (i, err, cond)


# ------------------------------------------------------------------ Manteuffel-shifted IC(0)
#: Kershaw's matrix (J. Comput. Phys. 26, 1978): symmetric positive definite, and its IC(0)
#: meets a negative pivot -- the example of PETSc's own shift test.
KERSHAW = sp.csr_matrix(np.array([[3.0, -2.0, 0.0, 2.0], [-2.0, 3.0, -2.0, 0.0],
                                  [0.0, -2.0, 3.0, -2.0], [2.0, 0.0, -2.0, 3.0]]))


def _pivots(M):
    return M.factors()[1].diagonal()


def test_ic0_shift_makes_kershaw_positive_definite():
    assert np.all(np.linalg.eigvalsh(KERSHAW.toarray()) > 0)
    plain = ILU0(dtype="float64", shift=None).setup(KERSHAW)
    assert plain.shift is None and np.any(_pivots(plain) <= 0)      # IC(0) breaks down
    M = ILU0(dtype="float64").setup(KERSHAW)
    assert M.symmetric and M.shift is not None and np.all(_pivots(M) > 0)
    dense = np.column_stack([M.matvec(e) for e in np.eye(4)])
    np.testing.assert_allclose(dense, dense.T, rtol=0, atol=1e-15)  # M symmetric (stored
    assert np.all(np.linalg.eigvalsh((dense + dense.T) / 2) > 0)  # as L, D) and positive definite
    b = KERSHAW @ np.ones(4)
    r = mpsolve.solve(KERSHAW, b, method="cg", precond=M, rtol=1e-12)
    assert r.info == 0 and np.linalg.norm(b - KERSHAW @ r.x) <= 1e-12 * np.linalg.norm(b)
    r0 = mpsolve.solve(KERSHAW, b, method="cg", precond=plain, rtol=1e-12)
    assert r0.info == -12                       # the unshifted M is indefinite: CG breaks down


def test_ic0_shift_is_the_factorisation_of_the_shifted_matrix():
    """ILU0(shift=s) gives bit for bit the factors of D + (A - D) / (1 + s), unshifted."""
    A = _spd_stiffness_like(80, seed=3)
    rows = np.repeat(np.arange(80), np.diff(A.indptr))
    for s in (1e-3, 0.25, 3.0):
        As = A.copy()                           # each off-diagonal entry divided (rounded once)
        As.data = np.where(A.indices == rows, A.data, A.data / (1 + s))
        got, ref = ILU0(dtype="float64", shift=s).setup(A), ILU0(dtype="float64", shift=None).setup(As)
        assert got.shift == s
        for a, b in zip(got.factors(), ref.factors()):
            np.testing.assert_array_equal(a.toarray(), b.toarray())


def test_ic0_auto_shift_is_the_first_of_the_sequence_that_works():
    from mpsolve.precond.ilu import SHIFT_GROWTH, SHIFT_START
    A = _spd_stiffness_like(120, seed=5)
    assert np.any(_pivots(ILU0(dtype="float64", shift=None).setup(A)) <= 0)
    M = ILU0(dtype="float64").setup(A)
    k = round(np.log(M.shift / SHIFT_START) / np.log(SHIFT_GROWTH))
    assert M.shift == SHIFT_START * SHIFT_GROWTH ** k and np.all(_pivots(M) > 0)
    if k > 0:                                   # the shift before it did not work
        assert np.any(_pivots(ILU0(dtype="float64", shift=M.shift / SHIFT_GROWTH).setup(A)) <= 0)


def test_ic0_shift_only_where_needed_and_never_on_the_general_form():
    A = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(30, 30)).tocsr()
    assert ILU0().setup(A).shift is None        # positive pivots: no shift
    N = KERSHAW.tolil()
    N[0, 1] = -2.5                              # nonsymmetric: the general ILU(0), unshifted
    M = ILU0(dtype="float64").setup(N.tocsr())
    assert not M.symmetric and M.shift is None


def test_ic0_shift_leaves_the_user_matrix_alone():
    A = KERSHAW.copy()
    before = (A.data.copy(), A.indices.copy(), A.indptr.copy())
    ILU0().setup(A)
    for a, b in zip(before, (A.data, A.indices, A.indptr)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad", [-1.0, np.inf, np.nan, "yes", True])
def test_ic0_shift_argument_checked(bad):
    with pytest.raises(ValueError, match="shift="):
        ILU0(shift=bad)


def _spd_stiffness_like(n, seed):
    """SPD, not diagonally dominant, with positive off-diagonal couplings (what breaks
    IC(0) on stiffness matrices): B^T B for a sparse random B, plus a small diagonal."""
    rng = np.random.default_rng(seed)
    B = sp.random(n, n, density=12.0 / n, random_state=rng, format="csr") + sp.eye(n)
    A = (B.T @ B + 1e-3 * sp.eye(n)).tocsr()
    A.sort_indices()
    return A


@pytest.mark.parametrize("name,kw", [("block-isai", {}), ("isai", {"variant": "spd"}),
                                     ("ilut", {"dtype": "float64"}), ("ilu0", {"reorder": "mc64"}),
                                     ("block-isai", {"variant": "bilu"})])
def test_a_set_up_preconditioner_applies_from_several_threads(name, kw):
    """Apply scratch vectors are per thread: one set-up M serves concurrent solves (a
    shared intermediate vector made the chains of ISAI return mixed-up products)."""
    from concurrent.futures import ThreadPoolExecutor

    from mpsolve.matrices import convection_diffusion3d
    from mpsolve.precond import make_preconditioner

    A = sp.csr_matrix(convection_diffusion3d(16, peclet=10))
    if kw.get("variant") == "spd":             # (FSAI wants a symmetric A: the warning's)
        A = sp.csr_matrix(A + A.T)
    M = make_preconditioner(name, **kw).setup(A)
    R = np.random.default_rng(0).standard_normal((8, A.shape[0]))
    want = [M.matvec(r) for r in R]
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda k: M.matvec(R[k % 8]), range(64)))
    for k, y in enumerate(got):
        assert np.array_equal(y, want[k % 8])


def _arrow(n, seed, symmetric):
    """A dense first row and column on a random sparse, diagonally dominant matrix: the
    rows the ILU/IC/BILU kernels and the local-system gather read by lookup."""
    rng = np.random.default_rng(seed)
    R = sp.random(n, n, density=4.0 / n, random_state=rng, format="csr")
    R = R + R.T if symmetric else R
    R = R.tolil()
    R[0, :] = rng.uniform(0.1, 1.0, n)
    R[:, 0] = R[0, :].T if symmetric else rng.uniform(0.1, 1.0, (n, 1))
    R = sp.csr_matrix(R)
    d = np.asarray(abs(R).sum(axis=1)).ravel() + 1.0
    A = sp.csr_matrix(R + sp.diags(d))
    A.sort_indices()
    return A


@pytest.mark.parametrize("kind", ["ilu0", "ic0", "bilu0-2", "isai-spd", "isai-general"])
def test_long_rows_take_the_lookup_path_with_the_same_results(kind):
    """A dense row is read by binary search where it is far longer than the row or local
    system it updates (O(n) per row before: 13 s for IC(0) of a 200k arrow matrix); the
    factors and the ISAI blocks equal the reference device's, which scans, bit for bit."""
    from mpsolve.precond._pattern import block_pattern, to_bsr

    f64 = ("float64",)
    sym = kind in ("ic0", "isai-spd")
    A = _arrow(300, 71, sym)
    if kind in ("ilu0", "ic0"):
        got = []
        for dev in ("cpu", "reference"):
            diag = lookup(dev, "diag_positions", f64)(A.indptr, A.indices)
            data = A.data.astype(np.float64)
            if kind == "ilu0":
                bad = lookup(dev, "ilu0_factor", f64)(A.indptr, A.indices, data, diag)
            else:
                mirror = np.zeros(A.nnz, np.int64)
                assert lookup(dev, "symmetric_mirror", f64)(A.indptr, A.indices, A.data,
                                                            1e-12, mirror)
                bad = lookup(dev, "ic0_factor", f64)(A.indptr, A.indices, data, diag, mirror)
            assert bad == -1
            got.append(data)
        assert np.array_equal(got[0], got[1])
        return
    if kind == "bilu0-2":
        B = sp.csr_matrix(sp.kron(A, np.array([[2.0, 0.3], [0.1, 2.0]])))
        ip, ix, data = to_bsr(B, 2)
        diag = lookup("cpu", "diag_positions", f64)(ip, ix)
        got = []
        for dev in ("cpu", "reference"):
            d, dinv = data.copy(), np.zeros((ip.size - 1, 2, 2))
            assert lookup(dev, "bilu0_factor", f64)(ip, ix, d, diag, dinv) == -1
            got.append((d, dinv))
        assert np.array_equal(got[0][0], got[1][0]) and np.array_equal(got[0][1], got[1][1])
        return
    aptr, aind, adata = to_bsr(A, 1)
    nb = aptr.size - 1
    pp, pi = block_pattern(aptr, aind, nb, 1, "lower" if sym else "all")
    pos = lookup("cpu", "diag_positions", f64)(pp, pi) - pp[:-1]
    rows = np.arange(nb, dtype=np.int64)
    outs = []
    for dev in ("cpu", "reference"):
        out = np.zeros((pi.size, 1, 1))
        bad = np.zeros(nb, np.int8)
        args = (rows, pos, pp, pi, aptr, aind, adata)
        tol = (_localsolve.BWD_TOL, _localsolve.COND_LIMIT, out, bad)
        if sym:
            lookup(dev, "local_chol_solve", f64)(*args, *tol)
        else:
            lookup(dev, "local_lu_solve", f64)(*args, False, *tol)
        assert not bad.any()
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])


def test_ilut_orders_a_matrix_with_a_dense_row_by_minimum_degree():
    """SuperLU's ILU under COLAMD is quadratic with a dense row (178 s at n = 100000);
    the ILUT takes the minimum degree ordering of A + A^T there, COLAMD elsewhere."""
    from mpsolve.precond import ILUT
    from mpsolve.precond.ilut import column_ordering

    n = 3000
    T = sp.diags([-1.0, 4.0, -1.5], [-1, 0, 1], shape=(n, n), format="lil")
    T[0, :] = np.random.default_rng(7).uniform(0, 0.01, n)
    T[0, 0] = 10.0
    A = sp.csr_matrix(T)
    assert column_ordering(A) == "MMD_AT_PLUS_A"
    from mpsolve.matrices import poisson2d

    assert column_ordering(sp.csr_matrix(poisson2d(30))) == "COLAMD"
    M = ILUT().setup(A)
    assert M.stats["ordering"] == "MMD_AT_PLUS_A"
    b = A @ np.ones(n)
    r = mpsolve.solve(A, b, method="gmres", precond=M, rtol=1e-10)
    assert r.info == 0 and np.linalg.norm(b - A @ r.x) <= 1e-10 * np.linalg.norm(b)


@pytest.mark.parametrize("name", sorted(REGISTRY) + ["ilu0+mc64"])
@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_a_set_up_preconditioner_pickles_and_copies(name, complex_):
    """A set-up preconditioner, applied (its kernels bound, its per-thread scratch made),
    pickles and deep-copies (multiprocessing, joblib): the copy applies the same operator
    bit for bit, and the original keeps working."""
    import copy
    import pickle

    A = convdiff2d(12)
    if complex_:
        A = sp.csr_matrix(A * (1 + 0.25j))
    M = (mpsolve.precond.Reordered(ILU0()) if name == "ilu0+mc64"
         else make_preconditioner(name))
    if complex_ and not M.supports_complex:
        pytest.skip(f"{name} is real only")
    M.setup(A)
    r = np.random.default_rng(3).standard_normal(A.shape[0])
    z = M.matvec(r)
    M.matvec(r.astype(np.float32))
    for twin in (pickle.loads(pickle.dumps(M)), copy.deepcopy(M), copy.copy(M)):
        np.testing.assert_array_equal(twin.matvec(r), z)
    np.testing.assert_array_equal(M.matvec(r), z)


def test_a_failed_set_up_leaves_the_preconditioner_not_set_up():
    """A set-up that raises (here: a structurally missing pivot) leaves no half-built
    object that reads as set up: applying it then says "not set up", and a set-up of a
    good matrix afterwards works."""
    A = poisson2d(6).tocsr()
    M = ILU0()
    M.setup(A)
    Z = A.tolil()
    Z[2, 2] = 0.0
    Z = Z.tocsr()
    Z.eliminate_zeros()
    with pytest.raises(ValueError):
        M.setup(Z)
    assert not M.is_setup
    with pytest.raises(RuntimeError, match="not set up"):
        M.matvec(np.ones(36))
    M.setup(A)
    assert M.is_setup and np.all(np.isfinite(M.matvec(np.ones(36))))


# ------------------------------------------------- the public apply protocol, checked
_EVERY = {"jacobi": lambda: Jacobi(), "block-jacobi": lambda: BlockJacobi(block_size=2),
          "ilu0": lambda: ILU0(), "isai": lambda: ISAI(), "block-isai": lambda: BlockISAI(),
          "ilut": lambda: make_preconditioner("ilut"),
          "mc64": lambda: make_preconditioner("ilu0", reorder="mc64")}


@pytest.mark.parametrize("name", sorted(_EVERY))
def test_apply_refuses_vectors_the_kernels_would_overrun(name):
    """apply(r, out) is the low-level protocol: a short out (written past its end), a
    short r (read past it), a strided or 2-D vector, an integer dtype and a call before
    set-up are refused with the fix, never a corrupted heap or a kernel's KeyError."""
    A = poisson2d(8).tocsr()
    n = A.shape[0]
    M = _EVERY[name]()
    with pytest.raises(RuntimeError, match="not set up"):
        M.apply(np.ones(n), np.empty(n))
    M.setup(A)
    good = np.ones(n)
    for r, out, what in [(good, np.empty(n - 5), "out has shape"),
                         (np.ones(n - 5), np.empty(n), "r has shape"),
                         (np.ones(2 * n)[::2], np.empty(n), "not contiguous"),
                         (good, np.empty((n, 1)), "out has shape")]:
        with pytest.raises(ValueError, match=what):
            M.apply(r, out)
    with pytest.raises(TypeError, match="dtype int64"):
        M.apply(np.ones(n, np.int64), np.empty(n))
    out = np.empty(n)
    M.apply(good, out)
    assert np.array_equal(out, M.matvec(good))
    if name not in ("ilut", "mc64"):
        R = np.asfortranarray(np.ones((n, 3)))
        with pytest.raises(ValueError, match="C-contiguous"):
            M.apply_block(R, np.empty((n, 3)))
        with pytest.raises(ValueError, match=r"same shape"):
            M.apply_block(np.ones((n, 3)), np.empty((n, 2)))


_VARIANTS = dict(_EVERY, **{
    "isai-general": lambda: ISAI(variant="general"), "isai-right": lambda: ISAI(variant="right"),
    "block-isai-general": lambda: BlockISAI(variant="general", block_size=2),
    "block-isai-bilu": lambda: BlockISAI(variant="bilu", block_size=2),
    "block-ilu0": lambda: BlockILU0(block_size=2)})


@pytest.mark.parametrize("name", sorted(_VARIANTS))
def test_apply_in_place_and_refusals_of_unusable_arrays(name):
    """``apply(r, r)`` (in place) computes ``M r``, as ``matvec`` does: the single-product
    forms (ISAI general/right, Block-ISAI) read entries of ``r`` they had overwritten
    (0.14 relative error), ``apply_transpose`` and ``apply_block`` too.  A read-only
    ``out``, a byte-swapped vector or a list is refused naming it (numba's TypingError
    or an AttributeError came out of the kernels)."""
    A = sp.csr_matrix(convection_diffusion2d(8, peclet=5.0))
    n = A.shape[0]
    M = _VARIANTS[name]().setup(A)
    v = np.random.default_rng(0).standard_normal(n)
    w = v.copy()
    M.apply(w, w)
    np.testing.assert_allclose(w, M.matvec(v), rtol=1e-12, atol=0)
    if hasattr(M, "apply_transpose"):
        want = np.empty(n)
        M.apply_transpose(v, want)
        w = v.copy()
        M.apply_transpose(w, w)
        np.testing.assert_allclose(w, want, rtol=1e-12, atol=0)
    R = np.random.default_rng(1).standard_normal((n, 3))
    Z = np.empty_like(R)
    M.apply_block(R, Z)
    M.apply_block(R, R)
    np.testing.assert_allclose(R, Z, rtol=1e-12, atol=0)
    out = np.empty(n)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        M.apply(v, out)
    with pytest.raises(TypeError, match="byte order"):
        M.apply(v.astype(">f8"), np.empty(n))
    with pytest.raises(TypeError, match="r is a list"):
        M.apply(list(v), np.empty(n))


@pytest.mark.parametrize("name", sorted(_EVERY))
def test_scipy_solver_given_an_unset_preconditioner_says_so(name):
    """SciPy's solvers read ``M.shape`` first: ``None`` before set-up gave "'NoneType'
    object is not iterable" from inside LinearOperator."""
    A = poisson2d(4).tocsr()
    M = _EVERY[name]()
    assert "not set up" in repr(M)
    with pytest.raises(RuntimeError, match=r"not set up: call \.setup\(A\) first"):
        spla.cg(A, np.ones(16), M=M)
    x, info = mpsolve.gmres(A, np.ones(16), M=_EVERY[name](), rtol=1e-10)  # (sets it up)
    assert info == 0 and np.linalg.norm(A @ x - 1) <= 1e-10 * 4


def test_isai_power_beyond_the_rows_builds_the_full_reach_pattern():
    """A sparsity power above n - 1 builds the pattern of power n - 1 (``(S + I)^k`` stops
    growing there): ``sparsity_power=2**40`` never returned, 10**5 took 22 s."""
    A = sp.csr_matrix(sp.diags([-1.0, 2.5, -1.2], [-1, 0, 1], shape=(30, 30)))
    v = np.arange(30.0)
    for M, full, most in [(ISAI(variant="general", sparsity_power=2**40), 29, 29),
                          (ISAI(variant="ilu", sparsity_power=10**6), 29, 29),
                          (BlockISAI(block_size=3, sparsity_power=10**6), 9, 9)]:
        M.setup(A)
        assert M.sparsity_power == most and "builds the same pattern" in M.power_reason
        ref = type(M)(**{k: getattr(M, k) for k in ("variant",)},
                      **({"block_size": 3} if isinstance(M, BlockISAI) else {}),
                      sparsity_power=full).setup(A)
        assert np.array_equal(M.matvec(v), ref.matvec(v))


def test_dtype_answers_do_not_depend_on_earlier_calls():
    """dtype names were memoised by value: after ``np.float32(1.0)`` (which NumPy reads as
    its type) ``True`` and ``np.float64(1.0)`` (equal to it as numbers) were found as
    'float32'."""
    from mpsolve.kernels.registry import dtype_name

    A = sp.csr_matrix(sp.diags([4.0, 2.0, 8.0]))
    assert Jacobi(dtype=np.float32(1.0)).setup(A).storage_dtype == np.float32
    with pytest.raises(ValueError, match="dtype=True"):
        Jacobi(dtype=True)
    assert Jacobi(dtype=np.float64(1.0)).setup(A).storage_dtype == np.float64
    assert dtype_name(np.float64(1.0)) == "float64" and dtype_name(np.float32(1)) == "float32"


def test_setup_dtype_and_matvec_dtype_follow_the_documentation():
    """setup(A, dtype=...) takes the storage precisions only (an integer dtype stored the
    factors truncated); matvec returns M r in the promotion of r's dtype with the storage
    dtype -- an FP32 r and an FP64 M: FP64 (it overflowed to inf in FP32 before)."""
    A = poisson2d(5).tocsr()
    for bad in ("int", "float16", "bogus", 3):
        with pytest.raises(ValueError, match="dtype="):
            ILU0().setup(A, dtype=bad)
    assert ILU0().setup(A, dtype="complex64").storage_dtype == np.float32   # a real A
    M = Jacobi(dtype="float64").setup(sp.identity(4, format="csr") * 1e-20)
    y = M.matvec(np.full(4, 1e25, np.float32))
    assert y.dtype == np.float64 and np.allclose(y, 1e45, rtol=1e-7)
    assert Jacobi().setup(A).matvec(np.ones(25, np.float32)).dtype == np.float32


def test_block_jacobi_transpose_is_its_own_only_for_symmetric_blocks():
    """aslinearoperator's rmatvec is M^H: BlockJacobi's class-level ``symmetric`` says
    "SPD for SPD A", not "symmetric for this A", so nonsymmetric blocks get their own
    transposes (it raised NotImplementedError before there was a transpose apply)."""
    S = sp.block_diag([[[4.0, 1.0], [1.0, 3.0]]] * 3).tocsr()
    N = sp.block_diag([[[4.0, 2.0], [0.5, 3.0]]] * 3).tocsr()
    x = np.arange(6.0)
    for A in (S, N):
        L = BlockJacobi(block_size=2, dtype="float64").setup(A).aslinearoperator()
        np.testing.assert_allclose(L.rmatvec(x), np.linalg.inv(A.toarray()).T @ x,
                                   rtol=1e-14)


def _scrambled(n, complex_=False, seed=0, scramble=True):
    """A nonsymmetric n x n matrix, complex with ``complex_``; with ``scramble`` its rows
    scaled over 12 decades and permuted (MC64 and ILUT's equilibration have work to do)."""
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=0.08, random_state=seed, format="csr") + \
        sp.diags(4 + rng.random(n))
    if complex_:
        A = A + 1j * sp.random(n, n, density=0.05, random_state=seed + 1)
    if not scramble:
        return sp.csr_matrix(A)
    S = sp.diags(10.0 ** rng.uniform(-6, 6, n))
    return sp.csr_matrix((S @ A)[rng.permutation(n)])


TRANSPOSE_CASES = {
    "jacobi": lambda dt: Jacobi(dtype=dt),
    "ilu0": lambda dt: ILU0(dtype=dt),
    "ilu0-2-blocks": lambda dt: ILU0(dtype=dt, blocks=2),
    "ic0": lambda dt: ILU0(dtype=dt, symmetric=True),
    "ilut": lambda dt: ILUT(dtype=dt),
    "isai": lambda dt: ISAI(dtype=dt),
    "isai-right-A2": lambda dt: ISAI(dtype=dt, variant="right", sparsity_power=2),
    "isai-spd": lambda dt: ISAI(dtype=dt, variant="spd"),
    "block-isai": lambda dt: BlockISAI(dtype=dt, block_size=3),
    "block-isai-bilu": lambda dt: BlockISAI(dtype=dt, block_size=2, variant="bilu"),
    "block-jacobi": lambda dt: BlockJacobi(dtype=dt, block_size=3),
    "block-ilu0": lambda dt: BlockILU0(dtype=dt, block_size=2),
    "mc64+ilu0": lambda dt: Reordered(ILU0(dtype=dt), reorder="mc64"),
}


@pytest.mark.parametrize("dt", ["float64", "float32"])
@pytest.mark.parametrize("field", ["real", "complex"])
@pytest.mark.parametrize("name", list(TRANSPOSE_CASES))
def test_transpose_apply_is_the_transpose_of_the_apply(name, field, dt):
    """apply_transpose is M^T (plain, also complex) and rmatvec M^H of the very M that
    apply applies, to the rounding of FP64 sums: checked against the dense M built
    column by column from apply; n = 61 leaves a partial last block."""
    n = 61
    if name in ("ic0", "isai-spd", "block-ilu0"):       # symmetric forms / pivot blocks
        A = sp.csr_matrix(poisson2d(8)[:n, :n])
        T = sp.triu(A, 1) * 0.3
        if name == "block-ilu0":
            A = A + T + (0.5j * sp.eye(n) if field == "complex" else 0)
        elif field == "complex":
            A = A + 1j * (T - T.T)                # Hermitian
        A = sp.csr_matrix(A)
    else:
        A = _scrambled(n, field == "complex", scramble=name in ("ilut", "mc64+ilu0"))
    M = TRANSPOSE_CASES[name](dt).setup(A)
    I = np.eye(n, dtype=M.dtype)
    D = np.column_stack([M.matvec(I[:, j]) for j in range(n)])
    rng = np.random.default_rng(1)
    x = rng.standard_normal(n) + (1j * rng.standard_normal(n) if M.dtype.kind == "c" else 0)
    out = np.empty(n, M.dtype)
    M.apply_transpose(x.astype(M.dtype), out)
    # the same stored values summed in another order: n terms' rounding of the vectors'
    # precision (FP64 vectors: the apply's sums are FP64 whatever the storage)
    scale = np.abs(D).max() * np.abs(x).max()
    tol64 = 2 * n * np.finfo(np.float64).eps * scale
    np.testing.assert_allclose(out, D.T @ x, rtol=0, atol=tol64)
    np.testing.assert_allclose(M.rmatvec(x), D.conj().T @ x, rtol=0, atol=tol64)
    L = M.aslinearoperator()
    np.testing.assert_allclose(L.rmatvec(x), D.conj().T @ x, rtol=0, atol=tol64)
    lo = np.empty(n, np.complex64 if M.dtype.kind == "c" else np.float32)  # FP32 vectors
    M.apply_transpose(x.astype(lo.dtype), lo)
    np.testing.assert_allclose(lo, D.T @ x.astype(lo.dtype), rtol=0, atol=n * EPS32 * scale)


def test_scipy_bicg_takes_an_mpsolve_preconditioner():
    """SciPy's bicg applies M^H (rmatvec) as well as M: with ILU(0) it now converges to
    the tolerance (it raised: no rmatvec for a nonsymmetric M)."""
    A = sp.csr_matrix(convection_diffusion2d(20, peclet=20))
    b = A @ np.ones(A.shape[0])
    M = ILU0(dtype="float64").setup(A).aslinearoperator()
    x, info = spla.bicg(A, b, M=M, rtol=1e-10, maxiter=500)
    assert info == 0
    assert np.linalg.norm(b - A @ x) <= 1e-10 * np.linalg.norm(b)
    its_none = []
    spla.bicg(A, b, rtol=1e-10, maxiter=500, callback=lambda xk: its_none.append(1))
    its = []
    spla.bicg(A, b, M=M, rtol=1e-10, maxiter=500, callback=lambda xk: its.append(1))
    assert len(its) < len(its_none) / 2          # M (and M^H) really precondition


def test_a_zero_complex_pivot_in_a_local_system_falls_back_as_a_real_one_does():
    """Local systems with a zero pivot (rows permuted: diagonal entries missing): the
    complex LU's division raised Numba's ZeroDivisionError (a SystemError out of the
    set-up) where a real one gives inf, is flagged by the check and falls back; now the
    complex systems fall back the same way."""
    for complex_ in (False, True):
        A = _scrambled(61, complex_)
        for b in (1, 3):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PreconditionerWarning)
                M = BlockISAI(block_size=b, dtype="float64").setup(A)
            assert np.all(np.isfinite(M.matvec(np.ones(61))))


def test_a_diagonal_whose_reciprocal_overflows_is_refused_and_ic0_ends():
    """A subnormal diagonal entry: Jacobi and ILU(0) name it (M r was inf, silently), and
    IC(0)'s shift search ends (dominance_shift overflowed to inf: an endless loop, in
    mpsolve.solve's default too)."""
    from mpsolve.precond import ZeroPivotError

    D = sp.diags([1e-310, 1.0, 2.0]).tocsr()
    with pytest.raises(ValueError, match="reciprocal overflows"):
        Jacobi(dtype="float64").setup(D)
    with pytest.raises(ZeroPivotError, match="reciprocal overflows"):
        ILU0(dtype="float64", symmetric=False).setup(D)
    A = sp.csr_matrix(np.array([[1e-320, 1e-3, 0.0], [1e-3, 1.0, 0.0], [0.0, 0.0, 2.0]]))
    with pytest.raises(ZeroPivotError, match="no shift up to 1e\\+16"):
        ILU0().setup(A)
    b = A @ np.ones(3)
    r = mpsolve.solve(A, b, rtol=1e-8)                  # it ends: with a certified answer
    assert r.info == 0 and np.linalg.norm(b - A @ r.x) <= 1e-8 * np.linalg.norm(b)


def test_precond_none_takes_no_options():
    A = poisson2d(4).tocsr()
    with pytest.raises(TypeError, match="precond='none' takes no options"):
        mpsolve.solve(A, np.ones(16), precond="none", variant="bogus")
    with pytest.raises(TypeError, match="precond='none' takes no options"):
        mpsolve.Solver(A, method="cg", precond="none", shift=0.1)


def test_constructor_numbers_numpy_scalars_in_bools_and_fractions_out():
    """Counts and amounts take NumPy scalars as Python numbers (np.int64(2) blocks were
    refused, np.float32 tolerances too); a bool, a fraction or NaN where a count is
    wanted is refused naming the argument (block_size=True was taken as 1, max_local=2.5
    as 2, NaN gave "cannot convert float NaN")."""
    from mpsolve.precond import BlockILU0

    ilut = REGISTRY["ilut"]
    for make in (lambda: ILU0(blocks=np.int64(2)), lambda: BlockILU0(shift=np.float32(0.1)),
                 lambda: ilut(drop_tol=np.float32(1e-4), fill_factor=np.int64(5)),
                 lambda: BlockISAI(block_size=np.int32(3)),
                 lambda: ISAI(sparsity_power=np.int64(2))):
        make()
    for make, name in ((lambda: BlockJacobi(block_size=True), "block_size"),
                       (lambda: BlockJacobi(block_size=2.5), "block_size"),
                       (lambda: ISAI(sparsity_power=True), "sparsity_power"),
                       (lambda: ISAI(max_local=2.5), "max_local"),
                       (lambda: BlockISAI(block_size=float("nan")), "block_size"),
                       (lambda: ISAI(accumulate="bogus"), "accumulate"),
                       (lambda: ILU0(blocks=0), "blocks"),
                       (lambda: ilut(fill_factor=0.5), "fill_factor")):
        with pytest.raises(ValueError, match=name):
            make()


def test_apply_block_by_columns_from_several_threads():
    """apply_block's column-by-column path (block preconditioners) kept its scratch columns
    in the shared kernel cache: two threads overwrote each other's (4-11 wrong blocks in
    300); the scratch is per thread now, as apply's."""
    import threading

    A = sp.csr_matrix(convection_diffusion2d(30))
    n = A.shape[0]
    for M in (BlockJacobi(block_size=4).setup(A), BlockISAI(block_size=2).setup(A)):
        rng = np.random.default_rng(0)
        Rs = [np.ascontiguousarray(rng.standard_normal((n, 4))) for _ in range(2)]
        want = []
        for R in Rs:
            Z = np.empty_like(R)
            M.apply_block(R, Z)
            want.append(Z)
        wrong = [0, 0]

        def work(t):
            Z = np.empty_like(Rs[t])
            for _ in range(200):
                M.apply_block(Rs[t], Z)
                wrong[t] += not np.array_equal(Z, want[t])

        threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert wrong == [0, 0]


def test_a_failed_solve_with_unstable_ilu0_factors_says_so():
    """A named ILU(0) is set up without the growth test (it would cost every set-up a
    product and two sweeps); a solve that then fails asks the preconditioner why
    (``Preconditioner.diagnose``), and ILU(0) names its unstable factors and the fix.
    Stable factors that merely ran out of iterations say nothing of the kind."""
    from mpsolve.matrices import convection_diffusion2d

    C = sp.csr_matrix(convection_diffusion2d(40, 1000.0, upwind=False))
    r = mpsolve.solve(C, C @ np.ones(C.shape[0]), method="gmres", precond="ilu0",
                      rtol=1e-8, maxiter=20)
    assert r.info > 0 and "ILU(0)'s factors are unstable: ||M A e - e||_inf = " in r.status
    assert "precond='ilut'" in r.status
    M = ILU0().setup(C)
    assert "unstable" in M.diagnose(C)
    U = sp.csr_matrix(convection_diffusion2d(40, 1000.0))
    r = mpsolve.solve(U, U @ np.ones(U.shape[0]), method="gmres", precond="ilu0",
                      rtol=1e-14, maxiter=1, restart=2)
    assert r.info > 0 and "unstable" not in r.status
    assert ILU0().setup(U).diagnose(U) is None and Jacobi().setup(U).diagnose(U) is None


@pytest.mark.parametrize("cls", [ISAI, BlockISAI])
def test_isai_keeps_the_pattern_of_a_where_a_squared_is_no_better(cls):
    """The default pattern test moves a poor inverse on the pattern of ``A`` to ``A^2``
    only where ``A^2``'s median residual is lower: on a central-difference
    convection-diffusion matrix at Peclet 1000 it was 1.52 against ``A``'s 1.07, and right-
    preconditioned GMRES with it stalled at 0.24 where ``A``'s pattern converges."""
    C = sp.csr_matrix(convection_diffusion2d(60, 1000.0, upwind=False))
    b = C @ np.ones(C.shape[0])
    for side in ("right", "left"):
        M = cls()
        r = mpsolve.solve(C, b, method="gmres", side=side, precond=M, precision="double",
                          rtol=1e-8, maxiter=100)
        assert M.sparsity_power == 1 and "A^2 did no better" in M.power_reason
        assert r.converged
    # where A^2 is better it is still taken (a circuit matrix's inverse needs the wider
    # pattern: median residual 0.69 on A's, well below on A^2's)
    path = COLLECTION / "add20.mtx.gz"
    if path.exists():
        A = sp.csr_matrix(sio.mmread(path))
        M = cls().setup(A)
        assert M.sparsity_power == 2 and M.power_reason.startswith("A^2")


def test_only_the_kept_pattern_build_warns():
    """The power test builds on A^2 too; where A's pattern is kept, A^2's warnings (two
    singular local systems here) are not the kept M's: they said "listed in
    .fallback_rows", and fallback_rows was empty."""
    T = sp.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(48, 48)).tocsr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        M = BlockISAI(block_size=2, variant="general", dtype="float64").setup(T)
    said = [w for w in caught if "fallback_rows" in str(w.message)]
    assert M.sparsity_power == 1 and "A^2" in M.power_reason
    assert bool(said) == bool(M.fallback_rows.size)


@pytest.mark.parametrize("P", [BlockJacobi, BlockISAI, BlockILU0])
def test_a_block_size_above_n_is_the_whole_matrix(P):
    """``block_size`` above ``n``: one block of ``n`` (the same M); padded to the size
    asked for, 10**8 asked for petabytes and 1000 took seconds."""
    A = poisson2d(7).tocsr()
    M = P(block_size=10**8, dtype="float64").setup(A)
    assert M.block_size == 49
    np.testing.assert_allclose(M.matvec(A @ np.ones(49)), 1.0, rtol=1e-10)


def test_a_reordered_preconditioner_before_set_up_has_no_bytes():
    """``nbytes`` before set-up read ``shape``, which now says "not set up"."""
    M = make_preconditioner("ilu0", reorder="mc64")
    assert M.nbytes == 0 and "not set up" in repr(M)


def test_fsai_pattern_follows_line_like_strong_couplings():
    """FSAI's default pattern on an anisotropic diffusion (couplings 1 : 1e-2 : 1e-4) is
    widened along the strong lines (the strong graph's powers, Chow's thresholded
    patterns): CG needs about half the iterations of the pattern of A; an isotropic
    Laplacian (every neighbour strong) keeps A's pattern, and so does a requested power."""
    from mpsolve.matrices import anisotropic3d, poisson3d
    from mpsolve.precond._pattern import STRONG_GROWTH

    A = anisotropic3d(16)
    b = A @ np.ones(A.shape[0])
    got = {}
    for name, P in (("default", ISAI(variant="spd")), ("A", ISAI(variant="spd",
                                                                  sparsity_power=1)),
                    ("block", BlockISAI())):
        r = mpsolve.solve(A, b, method="cg", precond=P, rtol=1e-8)
        assert r.converged
        got[name] = (r.iterations, P.stats["strong_power"], P.stats["pattern_nnz_blocks"])
    assert got["A"][1] == 0 and got["default"][1] >= 2 and got["block"] == got["default"]
    assert got["default"][0] <= 0.6 * got["A"][0], got
    lower_A = sp.tril(A).nnz
    assert got["default"][2] <= STRONG_GROWTH * lower_A
    L = poisson3d(12)
    P = ISAI(variant="spd").setup(L)
    assert P.stats["strong_power"] == 0 and P.power_reason == "default"
    assert P.stats["pattern_nnz_blocks"] == sp.tril(L).nnz
