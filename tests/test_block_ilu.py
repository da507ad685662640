"""Block ILU(0) and the Block-ISAI of its factors (issue 10, step 2).

* BILU(0) against a dense reference: ``L U = A`` on the block pattern of ``A``; with
  ``b = 1`` it is ILU(0);
* ``BlockILU0`` against PETSc's ILU(0) on a BAIJ matrix of the same block size (the
  same Krylov iteration counts with FP64 factors; FP32 within a couple);
* the block ISAI of the factors against exact block triangular inverses (full pattern)
  and its local equations (pattern of ``A``);
* cpu against reference kernels; convergence next to ILU(0) and Block-Jacobi.
"""
from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp

import mpsolve
from mpsolve._sparse import canonical_csr
from mpsolve.kernels import lookup
from mpsolve.matrices import convection_diffusion2d, elasticity3d
from mpsolve.precond import (BlockILU0, BlockISAI, BlockJacobi, ILU0, ZeroPivotError,
                             make_preconditioner)
from mpsolve.precond._pattern import block_pattern
from mpsolve.precond.block_ilu import bilu0_factor, bilu0_split, bilu_isai_operators
from mpsolve.precond.ilu import ilu0_split

RTOL = 1e-8


# ----------------------------------------------------------------- problems
def random_block(nb, b, density=0.25, seed=0, n=None, symmetric=False):
    """Random ``nb x nb`` block pattern of full ``b x b`` blocks, diagonally dominant
    enough for BILU(0); ``n`` cuts it to a partial last block."""
    rng = np.random.default_rng(seed)
    S = sp.random(nb, nb, density=density, random_state=rng) + sp.eye(nb)
    if symmetric:
        S = S + S.T
    A = sp.kron((S != 0).astype(float), np.ones((b, b))).tocsr()
    A.data = rng.standard_normal(A.nnz)
    if symmetric:
        A = A + A.T
    A = A + sp.kron(sp.eye(nb), 2.0 * b * np.sqrt(density * nb + 1) * np.eye(b))
    A = sp.csr_matrix(A)
    if n is not None:
        A = sp.csr_matrix(A[:n, :n])
    return canonical_csr(A)


def block_coupled(k=16, peclet=50.0, seed=3):
    """Nonsymmetric, 3 unknowns per node (block size 3): upwind convection-diffusion
    with a nonsymmetric 3x3 coupling of the species' diffusion, plus a weak nonsymmetric
    reaction coupling, ``kron(C, K) + kron(I, 1e-3 mean(diag C) R)``."""
    rng = np.random.default_rng(seed)
    K = np.diag([1.0, 2.0, 0.5]) + 0.3 * rng.uniform(-1, 1, (3, 3))
    R = rng.uniform(-1, 1, (3, 3)) + 3 * np.eye(3)
    C = convection_diffusion2d(k, peclet=peclet)
    A = sp.kron(C, K) + sp.kron(sp.eye(k * k), 1e-3 * C.diagonal().mean() * R)
    return canonical_csr(sp.csr_matrix(A))


def _block_mask(A, b):
    """Scalar mask of the block pattern of ``A`` (``b x b`` blocks, diagonal blocks in)."""
    n = A.shape[0]
    nb = -(-n // b)
    C = sp.coo_matrix(A)
    S = sp.csr_matrix((np.ones(C.nnz + nb), (np.append(C.row // b, np.arange(nb)),
                                             np.append(C.col // b, np.arange(nb)))),
                      shape=(nb, nb)).toarray() > 0
    return np.kron(S, np.ones((b, b), bool))[:n, :n]


# ----------------------------------------------------------------- (a), (b): BILU(0)
@pytest.mark.parametrize("nb,b,n", [(12, 3, None), (15, 2, None), (10, 4, 37), (9, 5, 44),
                                    (20, 6, None)])
def test_bilu0_product_equals_a_on_its_block_pattern(nb, b, n):
    A = random_block(nb, b, seed=nb + b, n=n)
    L, U = bilu0_split(A, b)
    Ad, P = A.toarray(), (L @ U).toarray()
    mask = _block_mask(A, b)
    assert np.abs(P - Ad)[mask].max() <= 1e-12 * np.abs(Ad).max()
    # the factors live on the block pattern: L unit block lower, U block upper
    Ld, Ud = L.toarray(), U.toarray()
    assert not Ld[~mask].any() and not Ud[~mask].any()
    blk = np.arange(A.shape[0]) // b
    assert not Ld[blk[:, None] < blk[None, :]].any()
    assert not Ud[blk[:, None] > blk[None, :]].any()
    for i in range(0, A.shape[0], b):               # unit diagonal blocks of L
        e = min(i + b, A.shape[0])
        np.testing.assert_array_equal(Ld[i:e, i:e], np.eye(e - i))


def test_bilu0_is_exact_on_a_block_tridiagonal_matrix():
    T = sp.diags([-1.0, 4.0, -1.5], [-1, 0, 1], shape=(9, 9))
    A = canonical_csr(sp.kron(T, np.array([[3.0, 1.0, 0.5], [0.2, 3.0, 1.0], [0.1, 0.4, 2.0]])))
    M = BlockILU0(dtype="float64").setup(A)
    x = np.random.default_rng(0).standard_normal(A.shape[0])
    np.testing.assert_allclose(M.matvec(A @ x), x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bilu0_with_b1_is_ilu0(seed):
    A = random_block(60, 1, density=0.08, seed=seed)
    L1, U1 = bilu0_split(A, 1)
    L0, U0 = ilu0_split(A)
    assert abs(L1 - L0).max() <= 1e-14 * abs(L0).max()
    assert abs(U1 - U0).max() <= 1e-14 * abs(U0).max()
    # and the preconditioners apply alike
    r = np.random.default_rng(seed).standard_normal(A.shape[0])
    a = BlockILU0(block_size=1, dtype="float64", symmetric=False).setup(A).matvec(r)
    c = ILU0(dtype="float64", symmetric=False).setup(A).matvec(r)
    np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-12 * np.abs(c).max())


def test_blockilu0_apply_is_the_inverse_of_its_factors():
    A = block_coupled(6)
    M = BlockILU0(dtype="float64").setup(A)
    L, U = bilu0_split(A, 3)
    r = np.random.default_rng(1).standard_normal(A.shape[0])
    want = np.linalg.solve(U.toarray(), sla.solve_triangular(L.toarray(), r, lower=True))
    np.testing.assert_allclose(M.matvec(r), want, rtol=1e-11, atol=1e-11 * np.abs(want).max())
    Lm, Um = M.factors()
    np.testing.assert_allclose(Lm.toarray(), L.toarray(), atol=1e-12)
    np.testing.assert_allclose(Um.toarray(), U.toarray(), atol=1e-12 * abs(U).max())
    assert M.symmetric is False and M.block_size == 3


def test_symmetric_a_gives_a_symmetric_blockilu0():
    A = elasticity3d(3)
    M = BlockILU0(dtype="float32").setup(A)
    assert M.symmetric
    Md = np.column_stack([M.matvec(e) for e in np.eye(A.shape[0])])
    assert np.abs(Md - Md.T).max() <= 1e-5 * np.abs(Md).max()
    # the L D L^T form equals general BILU(0) up to rounding
    G = BlockILU0(dtype="float64", symmetric=False).setup(A)
    S = BlockILU0(dtype="float64", symmetric=True).setup(A)
    r = np.random.default_rng(2).standard_normal(A.shape[0])
    np.testing.assert_allclose(S.matvec(r), G.matvec(r), rtol=1e-9,
                               atol=1e-9 * np.abs(G.matvec(r)).max())
    with pytest.raises(ValueError, match="not symmetric"):
        BlockILU0(symmetric=True).setup(block_coupled(4))


def test_symmetric_indefinite_blocks_keep_the_unshifted_factors():
    """A symmetric A with a positive diagonal whose 2 x 2 diagonal blocks are indefinite is
    not positive definite, and no shift makes BILU(0)'s pivot blocks so: the factors are
    kept as they are (exact here: A is block tridiagonal), not refused -- GMRES with
    'block-ilu0' and Block-ISAI's 'bilu' variant raised ZeroPivotError, whose advice was
    the GMRES the caller was already running."""
    A = sp.kron(sp.diags([0.1, 1.0, 0.1], [-1, 0, 1], shape=(50, 50)),
                np.array([[1.0, 2.0], [2.0, 1.0]])).tocsr()
    b = A @ np.ones(100)
    M = BlockILU0(dtype="float64").setup(A)
    assert M.symmetric and M.shift is None
    np.testing.assert_allclose(M.matvec(b), np.ones(100), rtol=1e-12)
    for method in ("gmres", "bicgstab"):
        for kw in ({"precond": "block-ilu0"}, {"precond": "block-isai", "variant": "bilu"}):
            r = mpsolve.solve(A, b, method=method, rtol=1e-8, **kw)
            assert r.converged and r.iterations <= 5, (method, kw, r.status)


def test_singular_pivot_block_names_the_block_row():
    A = random_block(6, 2, seed=4).tolil()
    A[6:8, :] = 0.0                                     # block row 3 is zero
    A = canonical_csr(sp.csr_matrix(A))
    with pytest.raises(ZeroPivotError, match="block row 3"):
        BlockILU0(block_size=2).setup(A)
    B = sp.kron(sp.eye(4), np.array([[1.0, 2.0], [2.0, 4.0]])).tocsr()  # singular blocks
    with pytest.raises(ZeroPivotError, match="block row 0 .*singular"):
        BlockILU0(block_size=2).setup(B)


def test_registry_and_partial_last_block():
    assert isinstance(make_preconditioner("block-ilu0", block_size=3), BlockILU0)
    A = random_block(8, 4, seed=9, n=30)               # 30 = 7 * 4 + 2
    M = BlockILU0(block_size=4, dtype="float64").setup(A)
    L, U = bilu0_split(A, 4)
    r = np.random.default_rng(3).standard_normal(30)
    want = np.linalg.solve(U.toarray(), sla.solve_triangular(L.toarray(), r, lower=True))
    np.testing.assert_allclose(M.matvec(r), want, rtol=1e-11, atol=1e-11 * np.abs(want).max())
    x32 = BlockILU0(block_size=4).setup(A).matvec(r.astype(np.float32))
    assert x32.dtype == np.float32
    np.testing.assert_allclose(x32, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


# ----------------------------------------------------------------- (c): PETSc's BAIJ ILU(0)
def _petsc_baij_solve(A, b, bs, ksp_type):
    PETSc = pytest.importorskip("petsc4py.PETSc")
    B = sp.bsr_matrix(A, blocksize=(bs, bs))
    B.sort_indices()
    P = PETSc.Mat().createBAIJ(size=A.shape, bsize=bs,
                               csr=(B.indptr.astype(PETSc.IntType),
                                    B.indices.astype(PETSc.IntType),
                                    np.ascontiguousarray(B.data).reshape(-1)),
                               comm=PETSc.COMM_SELF)
    P.assemble()
    assert P.getType() == "seqbaij" and P.getBlockSize() == bs
    ksp = PETSc.KSP().create(PETSc.COMM_SELF)
    ksp.setOperators(P)
    ksp.setType(ksp_type)
    ksp.setTolerances(rtol=RTOL, atol=0.0, max_it=3000)
    if ksp_type != "cg":
        ksp.setPCSide(PETSc.PC.Side.RIGHT)
        ksp.setGMRESRestart(30)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    ksp.getPC().setType("ilu")
    bv = P.createVecLeft()
    bv.array[:] = b
    xv = P.createVecRight()
    xv.set(0.0)
    ksp.solve(bv, xv)
    assert ksp.getPC().getFactorMatrix().getType() == "seqbaij"
    return xv.array.copy(), ksp.getIterationNumber(), ksp.getConvergedReason()


PETSC_CASES = [("elasticity3d:8", "cg", "cg"), ("elasticity3d:8", "gmres", "gmres"),
               ("block-coupled:32", "gmres", "gmres"), ("block-coupled:32", "bcgs", "bicgstab")]


def _problem(name):
    kind, k = name.split(":")
    return elasticity3d(int(k)) if kind == "elasticity3d" else block_coupled(int(k))


@pytest.mark.parametrize("name,ksp_type,method", PETSC_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in PETSC_CASES])
def test_blockilu0_matches_petsc_baij_ilu(name, ksp_type, method, table):
    """mpsolve's BILU(0) is PETSc's ILU(0) on a BAIJ matrix (block size 3): the same
    Krylov method takes the same number of iterations with FP64 factors; FP32 factors
    stay within a couple."""
    pytest.importorskip("petsc4py")
    A = _problem(name)
    b = A @ np.ones(A.shape[0])
    x, its, reason = _petsc_baij_solve(A, b, 3, ksp_type)
    assert reason > 0
    kw = dict(restart=30, side="right") if method == "gmres" else {}
    res = {dt: mpsolve.solve(A, b, method=method, precond=BlockILU0(block_size=3, dtype=dt),
                             rtol=RTOL, maxiter=3000, **kw) for dt in ("float64", "float32")}
    table("BILU(0): PETSc's ILU on BAIJ (bs=3) vs mpsolve's BlockILU0, true residual 1e-8",
          ["matrix", "method", "PETSc its", "mpsolve FP64 its", "mpsolve FP32 its"]
          ).append([name, method, its, res["float64"].iterations, res["float32"].iterations])
    assert res["float64"].converged and res["float32"].converged
    slack = 1 if method == "cg" else 1 + 0.05 * its
    assert abs(res["float64"].iterations - its) <= slack
    assert abs(res["float32"].iterations - its) <= slack + 2


# ----------------------------------------------------------------- (d): ISAI of the factors
@pytest.mark.parametrize("nb,b,n", [(10, 3, None), (12, 2, 23), (8, 1, None)])
def test_bilu_isai_with_full_pattern_is_the_exact_triangular_inverse(nb, b, n):
    A = random_block(nb, b, density=0.3, seed=7 * nb + b, n=n)
    L, U = bilu0_split(A, b)
    chain, bad, stats = bilu_isai_operators(A, b, nb, "float64", "float64", symmetric=False)
    assert bad.size == 0 and stats["symmetric"] is False
    Li, Ui = (op.to_scipy().toarray() for op in chain.ops)
    m = A.shape[0]
    I = np.eye(m)
    Linv = sla.solve_triangular(L.toarray(), I, lower=True)
    Uinv = np.linalg.solve(U.toarray(), I)      # block upper: full b x b pivot blocks
    assert np.abs(Li - Linv).max() <= 1e-10 * max(1.0, np.abs(Linv).max())
    assert np.abs(Ui - Uinv).max() <= 1e-10 * max(1.0, np.abs(Uinv).max())


@pytest.mark.parametrize("make,b", [(lambda: block_coupled(5), 3),
                                    (lambda: random_block(14, 2, density=0.2, seed=5), 2)])
def test_bilu_isai_rows_satisfy_their_local_equations(make, b):
    """Power 1: block row ``i`` of ``L_isai`` on ``J_i = tril`` pattern of ``A`` satisfies
    ``X L[J_i, J_i] = E_i^T`` (and ``U_isai`` the same with ``U`` on ``triu``)."""
    A = make()
    L, U = bilu0_split(A, b)
    fac = bilu0_factor(A, b)
    nb = fac[0].size - 1
    chain, bad, _ = bilu_isai_operators(A, b, 1, "float64", "float64", symmetric=False)
    assert bad.size == 0
    for op, T, part in zip(chain.ops, (L.toarray(), U.toarray()), ("lower", "upper")):
        pp, pi = block_pattern(fac[0], fac[1], nb, 1, part)
        np.testing.assert_array_equal(op.indptr, pp)
        np.testing.assert_array_equal(op.indices, pi)
        X = op.to_scipy().toarray()
        for i in range(nb):
            cols = np.concatenate([np.arange(j * b, (j + 1) * b) for j in pi[pp[i]:pp[i + 1]]])
            rows = np.arange(i * b, (i + 1) * b)
            lhs = X[np.ix_(rows, cols)] @ T[np.ix_(cols, cols)]
            E = (cols[None, :] == rows[:, None]).astype(float)
            assert np.abs(lhs - E).max() <= 1e-12 * max(1.0, np.abs(T).max())
            # and nothing outside the pattern
            other = np.setdiff1d(np.arange(A.shape[0]), cols)
            assert not X[np.ix_(rows, other)].any()


def test_symmetric_bilu_isai_is_g_transpose_g():
    A = elasticity3d(3)
    chain, bad, stats = bilu_isai_operators(A, 3, 1, "float64", "float64")
    assert stats["symmetric"] and bad.size == 0
    G, Gt = (op.to_scipy() for op in chain.ops)
    assert abs(G.T - Gt).max() == 0.0
    # G = C^T L_isai with C C^T = D^-1: G^T G = L_isai^T D^-1 L_isai
    ch2, _, _ = bilu_isai_operators(A, 3, 1, "float64", "float64", symmetric=False)
    Li = ch2.ops[0].to_scipy().toarray()
    fac = bilu0_factor(A, 3)
    Dinv = sla.block_diag(*fac[4])
    np.testing.assert_allclose((Gt @ G).toarray(), Li.T @ Dinv @ Li, atol=1e-12)
    M = BlockISAI(variant="bilu").setup(A)
    assert M.symmetric and M.variant == "bilu" and M.sparsity_power == 1


def test_bilu_isai_fallback_rows_keep_their_diagonal_block(monkeypatch):
    """A block row rejected by the kernel (forced here) keeps only T_ii^-1, and is
    reported."""
    from mpsolve.precond import block_ilu

    A = block_coupled(4)
    real = lookup("cpu", "block_tri_isai", ("float64",))

    def forced(*args):
        real(*args)
        args[-1][2] = 1                                   # bad[2] = 1

    monkeypatch.setattr(block_ilu, "lookup", lambda d, op, k: forced
                        if op == "block_tri_isai" else lookup(d, op, k))
    with pytest.warns(mpsolve.precond.PreconditionerWarning, match="block rows 2"):
        M = BlockISAI(variant="bilu", dtype="float64").setup(A)
    assert list(M.fallback_rows) == [2]
    Li, Ui = M.operators()
    fac = bilu0_factor(A, 3)
    np.testing.assert_array_equal(Li[6:9].toarray()[:, 6:9], np.eye(3))
    assert Li[6:9].nnz == 9 or abs(Li[6:9]).sum() == 3.0
    np.testing.assert_allclose(Ui[6:9].toarray()[:, 6:9], fac[4][2])
    assert abs(Ui[6:9]).sum() == pytest.approx(np.abs(fac[4][2]).sum())


# ----------------------------------------------------------------- (e): cpu vs reference
def _kernel_pair(op, key=("float64",)):
    return lookup("cpu", op, key), lookup("reference", op, key)


@pytest.mark.parametrize("nb,b,n,sym", [(14, 3, None, False), (11, 2, 21, False),
                                        (12, 4, None, True), (30, 1, None, False)])
def test_bilu_setup_kernels_agree(nb, b, n, sym):
    from mpsolve.precond._pattern import to_bsr
    from mpsolve.precond.block_ilu import _pad

    A = random_block(nb, b, seed=nb, n=n, symmetric=sym)
    ip, ix, data = to_bsr(_pad(A, b), b)
    diag = lookup("cpu", "diag_positions", ("float64",))(ip, ix)
    got = {}
    for dev in ("cpu", "reference"):
        d, dinv = data.copy(), np.zeros((ip.size - 1, b, b))
        assert lookup(dev, "bilu0_factor", ("float64",))(ip, ix, d, diag, dinv) == -1
        got[dev] = (d, dinv)
    np.testing.assert_array_equal(got["cpu"][0], got["reference"][0])
    np.testing.assert_array_equal(got["cpu"][1], got["reference"][1])
    d, dinv = got["cpu"]
    nbk = ip.size - 1
    mirror = np.empty(ix.size if sym else 0, np.int64)
    if sym:
        assert lookup("cpu", "symmetric_mirror", ("float64",))(ip, ix, np.ones(ix.size), 0.0,
                                                                mirror)
    nl = int(np.sum(diag - ip[:-1]))
    nu = ix.size - nbk - nl
    outs = {}
    for dev in ("cpu", "reference"):
        arrs = [np.empty((nl, b, b)), np.empty(nl, np.int32), np.empty(nbk + 1, np.int64),
                np.empty((nu, b, b)), np.empty(nu, np.int32), np.empty(nbk + 1, np.int64)]
        di = dinv.copy()
        lookup(dev, "bilu_split", ("float64",))(ip, ix, d, diag, di, sym, mirror, *arrs)
        outs[dev] = arrs + [di]
    for a, c in zip(outs["cpu"], outs["reference"]):
        np.testing.assert_array_equal(a, c)
    for lower in (True, False):
        pp, pi = block_pattern(ip, ix, nbk, 2, "lower" if lower else "upper")
        res = {}
        for dev in ("cpu", "reference"):
            out, bad = np.zeros((pi.size, b, b)), np.zeros(nbk, np.uint8)
            lookup(dev, "block_tri_isai", ("float64",))(pp, pi, ip, ix, d, diag, dinv, lower,
                                                        1e12, out, bad)
            res[dev] = (out, bad)
        np.testing.assert_allclose(res["cpu"][0], res["reference"][0], rtol=1e-13,
                                   atol=1e-13 * np.abs(res["reference"][0]).max())
        np.testing.assert_array_equal(res["cpu"][1], res["reference"][1])


@pytest.mark.parametrize("store", ["float32", "float64"])
@pytest.mark.parametrize("xd,yd", [("float32", "float32"), ("float64", "float64"),
                                   ("float32", "float64"), ("float64", "float32")])
def test_bilu_sweeps_kernels_agree(store, xd, yd):
    A = random_block(13, 3, seed=21, n=37)
    M = BlockILU0(block_size=3, dtype=store, symmetric=False).setup(A)
    op = M._op
    args = (op.lptr, op.lind, op.lval, op.uptr, op.uind, op.uval, op.dinv)
    x = np.random.default_rng(5).standard_normal(37).astype(xd)
    y = {}
    for dev in ("cpu", "reference"):
        y[dev] = np.full(37, np.nan, yd)
        lookup(dev, "bilu_sweeps", (store, xd, yd))(*args, x, y[dev])
    tol = 4 * np.finfo(yd).eps
    np.testing.assert_allclose(y["cpu"], y["reference"], rtol=tol * 10,
                               atol=tol * 10 * np.abs(y["reference"]).max())


@pytest.mark.parametrize("make", [lambda **k: BlockILU0(**k),
                                  lambda **k: BlockISAI(variant="bilu", accumulate="float64",
                                                        **k)])
@pytest.mark.parametrize("A", [pytest.param(elasticity3d(3), id="spd"),
                               pytest.param(block_coupled(5), id="nonsym")])
def test_reference_device_matches_cpu(make, A):
    cpu = make(dtype="float64").setup(A)
    ref = make(dtype="float64").setup(A, device="reference")
    r = np.random.default_rng(0).standard_normal(A.shape[0])
    a, c = cpu.matvec(r), ref.matvec(r)
    np.testing.assert_allclose(a, c, rtol=1e-13, atol=1e-13 * np.abs(c).max())


# ----------------------------------------------------------------- (f): convergence
CONV_CASES = [("elasticity3d:8", "cg"), ("elasticity3d:8", "gmres"),
              ("block-coupled:32", "gmres"), ("block-coupled:32", "bicgstab")]
CONV_PRECONDS = {
    "BlockISAI(bilu)": lambda: BlockISAI(variant="bilu"),
    "BlockISAI(bilu, k=2)": lambda: BlockISAI(variant="bilu", sparsity_power=2),
    "BlockILU0": lambda: BlockILU0(),
    "ILU0": lambda: ILU0(),
    "BlockJacobi": lambda: BlockJacobi(),
}


@pytest.mark.parametrize("name,method", CONV_CASES, ids=[f"{a}-{m}" for a, m in CONV_CASES])
def test_krylov_converges_with_bilu_preconditioners(name, method, table):
    A = _problem(name)
    b = A @ np.ones(A.shape[0])
    kw = dict(restart=30, side="right") if method == "gmres" else {}
    its = {}
    for label, make in CONV_PRECONDS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error", mpsolve.precond.PreconditionerWarning)
            t0 = time.perf_counter()
            res = mpsolve.solve(A, b, method=method, precond=make(), rtol=RTOL, maxiter=3000,
                                **kw)
            total = time.perf_counter() - t0
        assert res.converged, (label, res.status)
        assert res.true_residual <= RTOL * 1.01
        its[label] = res.iterations
        table("BILU(0) / Block-ISAI(bilu) vs ILU(0) / Block-Jacobi (FP32 storage, rtol 1e-8)",
              ["matrix", "method", "preconditioner", "its", "setup s", "solve s", "total s"]
              ).append([name, method, label, res.iterations, f"{res.setup_time:.3f}",
                        f"{res.solve_time:.3f}", f"{total:.3f}"])
    # the block factorisation is at least as good as the point one on node blocks,
    # and its ISAI no worse than Block-Jacobi
    assert its["BlockILU0"] <= its["ILU0"] + 2
    assert its["BlockISAI(bilu)"] <= its["BlockJacobi"]


def test_docstring_examples_run():
    """The examples of :mod:`mpsolve.precond.block_ilu` (not yet in test_doctests.MODULES)."""
    import doctest

    from mpsolve.precond import block_ilu

    res = doctest.testmod(block_ilu, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.attempted > 0 and res.failed == 0


def test_a_bsr_matrix_gives_its_own_block_size():
    """A SciPy BSR matrix's square blocksize is the block preconditioners' default block
    size (PETSc's rule for a BAIJ matrix): it was re-detected from the pattern, so a
    (2, 2) BSR of a matrix whose pattern tiles at 4 got b = 4.  An explicit block_size
    still wins; (1, 1) blocks leave it to detection."""
    from mpsolve.precond import detect_block_size

    T = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(30, 30))
    K = np.eye(4) * 4.0 + 1.0                              # SPD 4 x 4 node blocks
    A = sp.kron(T, K).tocsr()
    n = A.shape[0]
    b = A @ np.ones(n)
    assert detect_block_size(A) == 4
    for bs, want in (((1, 1), 4), ((2, 2), 2), ((4, 4), 4)):
        B = sp.bsr_matrix(A, blocksize=bs)
        assert detect_block_size(B) == want
        for M in (BlockILU0(), BlockISAI(), BlockJacobi()):
            assert M.setup(B).block_size == want, (bs, type(M).__name__)
        assert BlockISAI(block_size=4).setup(B).block_size == 4
        r = mpsolve.solve(B, b, method="cg", precond="block-isai", rtol=1e-8)
        assert r.converged and f"block_size={want}" in r.precond_detail, r.precond_detail
    # kept through the library's own copies of A: a Solver's private copy and its pickle,
    # a numeric update with the same pattern, integer values set up in FP64, a real A of
    # a complex problem
    import pickle

    B = sp.bsr_matrix(A, blocksize=(2, 2))
    s = mpsolve.Solver(B, method="cg", precond="block-isai", rtol=1e-8)
    got = [s.solve(b), pickle.loads(pickle.dumps(s)).solve(b)]
    s.update(A * 1.5)
    assert s.last_update == "numeric"
    got += [s.solve(1.5 * b),
            mpsolve.solve(sp.bsr_matrix(A.astype(np.int64), blocksize=(2, 2)), b,
                          method="cg", precond="block-isai", rtol=1e-8),
            mpsolve.solve(B, b + 1j * b, method="gmres", precond="block-isai", rtol=1e-8)]
    for r in got:
        assert r.converged and "block_size=2," in r.precond_detail, r.precond_detail


def test_bilu_isai_of_a_badly_scaled_matrix_is_the_scaled_isai():
    """The ISAI of D_r A D_c's BILU(0) factors is the scaled ISAI of A's in exact
    arithmetic, but the triangular systems' condition check is not scale-invariant: rows and
    columns scaled by 1e-6..1e6 sent 239 of 500 block rows to the diagonal fallback and
    GMRES failed (960 iterations, residual 3e-2).  The 'bilu' form is built again on the
    equilibrated matrix where rows fell back, and is then the scaled ISAI of A's factors."""
    rng = np.random.default_rng(1)
    A = sp.kron(sp.diags([-1.0, 4.0, -2.0], [-1, 0, 1], shape=(500, 500)),
                np.array([[3.0, 1.0], [0.5, 2.0]])).tocsr()
    n = A.shape[0]
    dr, dc = 10.0 ** rng.uniform(-6, 6, n), 10.0 ** rng.uniform(-6, 6, n)
    As = sp.csr_matrix(sp.diags(dr) @ A @ sp.diags(dc))
    M = BlockISAI(variant="bilu", block_size=2, dtype="float64").setup(A)
    Ms = BlockISAI(variant="bilu", block_size=2, dtype="float64").setup(As)
    assert not M.stats["equilibrated"] and Ms.stats["equilibrated"]
    assert M.fallback_rows.size == 0 and Ms.fallback_rows.size == 0
    v = rng.standard_normal(n)
    want = M.matvec(v / dr) / dc                   # (D_r A D_c)^-1 ~ D_c^-1 M D_r^-1
    np.testing.assert_allclose(Ms.matvec(v), want, rtol=1e-12, atol=1e-14 * np.abs(want).max())
    b = As @ np.ones(n)
    for kw in ({"method": "gmres", "side": "right"}, {"method": "bicgstab"}):
        r = mpsolve.solve(As, b, precond=BlockISAI(variant="bilu", block_size=2), rtol=1e-8,
                          maxiter=200, **kw)
        assert r.converged and r.iterations <= 30, (kw, r.status)
