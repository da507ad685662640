"""Complex preconditioners (Block-Jacobi, ILU(0), ISAI, Block-ISAI) and complex solves with them.

Each preconditioner is checked against an oracle computed independently on the same
complex matrix (dense inverses, a textbook ILU(0) in Python complex arithmetic, the
defining equations of the ISAI rows), the ``cpu`` kernels against the ``reference``
device, and full solves on the Helmholtz (complex-symmetric, indefinite) and magnetic
Laplacian (Hermitian positive definite) problems against SciPy on the same systems, with
the true residual recomputed here in complex128.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import mpsolve
from mpsolve._demote import PrecisionRangeError, demote
from mpsolve._sparse import canonical_csr
from mpsolve.kernels import lookup
from mpsolve.kernels.registry import launch_plan
from mpsolve.matrices import helmholtz2d, magnetic2d
from mpsolve.precond import ILU0, ISAI, BlockILU0, BlockISAI, BlockJacobi

EPS64 = np.finfo(np.float64).eps
EPS32 = np.finfo(np.float32).eps
DEVICES = ("cpu", "reference")


def _helm(n=6, k=12.0, eps=0.3):
    return canonical_csr(helmholtz2d(n, k=k, eps=eps))


def _mag(n=6, flux=0.3):
    return canonical_csr(magnetic2d(n, flux=flux))


def _rand_vec(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n) + 1j * rng.standard_normal(n)


def _dense_of(M):
    """The preconditioner as a dense matrix, column by column through ``matvec``."""
    n = M.shape[0]
    return np.column_stack([M.matvec(np.eye(n, dtype=np.complex128)[:, j]) for j in range(n)])


# ----------------------------------------------------------------- storage rules
@pytest.mark.parametrize("cls", [BlockJacobi, ILU0, BlockISAI])
@pytest.mark.parametrize("dt,want", [("float32", np.complex64), ("float64", np.complex128)])
def test_storage_is_the_complex_twin(cls, dt, want):
    A = _helm()
    kw = {"block_size": 2} if cls is not ILU0 else {}
    M = cls(dtype=dt, **kw).setup(A)
    assert M.storage_dtype == want
    assert M.dtype == np.complex128
    y = M.matvec(_rand_vec(A.shape[0]))
    assert y.dtype == np.complex128 and np.isfinite(y).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # real(A) is indefinite: FSAI falls back
        real = cls(dtype=dt, **kw).setup(A.real)
    z = _rand_vec(A.shape[0])              # a real M on a complex vector: by linearity
    assert np.array_equal(real.matvec(z), real.matvec(z.real) + 1j * real.matvec(z.imag))


def test_demote_checks_real_and_imaginary_parts():
    v = np.array([1.0 + 1e39j, 2.0])
    with pytest.raises(PrecisionRangeError, match="complex64"):
        demote(v, np.complex64, "M")
    tiny = np.array([1.0 + 1e-50j, 1.0])
    with pytest.raises(PrecisionRangeError, match="underflow"):
        demote(tiny, np.complex64, "M")
    # negligible in its row: flushed by the documented rule
    out = demote(tiny, np.complex64, "M", scale=np.abs(tiny))
    assert out.dtype == np.complex64 and out[0] == 1.0
    with pytest.raises(TypeError, match="complex values"):
        demote(v, np.float32, "M")


# ----------------------------------------------------------------- Block-Jacobi
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("b", [3, 12])
def test_block_jacobi_is_the_inverse_block_diagonal(device, b):
    A = _helm()
    n = A.shape[0]
    Ad = A.toarray()
    D = np.zeros_like(Ad)
    for k in range(0, n, b):
        D[k:k + b, k:k + b] = Ad[k:k + b, k:k + b]
    x = _rand_vec(n, 1)
    want = np.linalg.solve(D, x)
    for dt, tol in (("float64", 50 * EPS64), ("float32", 50 * EPS32)):
        M = BlockJacobi(block_size=b, dtype=dt).setup(A, device=device)
        y = M.matvec(x)
        cond = np.linalg.cond(D)
        assert np.linalg.norm(y - want) <= tol * cond * np.linalg.norm(want)


def test_block_jacobi_hermitian_blocks_give_hermitian_m():
    A = _mag()
    M = BlockJacobi(block_size=4, dtype="float64").setup(A)
    Md = _dense_of(M)
    assert np.abs(Md - Md.conj().T).max() <= 10 * EPS64 * np.abs(Md).max()
    assert np.linalg.eigvalsh(0.5 * (Md + Md.conj().T)).min() > 0


# ----------------------------------------------------------------- ILU(0)
def _ilu0_oracle(A):
    """ILU(0) by the textbook IKJ loop over a dense copy, kept to the pattern of A
    (Saad, Algorithm 10.4), in Python complex arithmetic."""
    n = A.shape[0]
    a = A.toarray().astype(np.complex128)
    nz = A.toarray() != 0
    for i in range(1, n):
        for k in range(i):
            if not nz[i, k]:
                continue
            a[i, k] = a[i, k] / a[k, k]
            for j in range(k + 1, n):
                if nz[i, j]:
                    a[i, j] -= a[i, k] * a[k, j]
    L = np.tril(a, -1) + np.eye(n)
    U = np.triu(a)
    return L, U


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("make", [_helm, _mag], ids=["helmholtz", "magnetic"])
def test_ilu0_factors_match_the_textbook_ilu0(device, make):
    A = make()
    L0, U0 = _ilu0_oracle(A)
    M = ILU0(dtype="float64").setup(A, device=device)
    L, U = M.factors()
    assert L.dtype == np.complex128
    scale = np.abs(A).max()
    assert np.abs(L.toarray() - L0).max() <= 1e3 * EPS64
    assert np.abs(U.toarray() - U0).max() <= 1e3 * EPS64 * scale
    # the apply solves with these factors: M r = U^-1 L^-1 r
    r = _rand_vec(A.shape[0], 2)
    want = np.linalg.solve(U0, np.linalg.solve(L0, r))
    for dt, tol in (("float64", 1e3 * EPS64), ("float32", 1e3 * EPS32)):
        y = ILU0(dtype=dt).setup(A, device=device).matvec(r)
        assert np.linalg.norm(y - want) <= tol * np.linalg.norm(want)


def test_ilu0_hermitian_form_only_for_hermitian_a():
    H = ILU0(dtype="float64").setup(_mag())
    assert H.symmetric                     # A == A^H: U = D L^H, M Hermitian
    L, U = H.factors()
    d = U.diagonal()
    assert np.abs(d.imag).max() <= 1e3 * EPS64 * np.abs(d).max()
    np.testing.assert_allclose(U.toarray(), (sp.diags(d) @ L.conj().T).toarray(),
                               rtol=0, atol=1e3 * EPS64 * np.abs(d).max())
    S = ILU0(dtype="float64").setup(_helm())
    assert not S.symmetric                 # complex-symmetric is not Hermitian
    with pytest.raises(ValueError, match="Hermitian"):
        ILU0(symmetric=True).setup(_helm())


def test_ilu0_on_a_tridiagonal_complex_matrix_is_exact():
    n = 9
    rng = np.random.default_rng(3)
    off = rng.standard_normal(n - 1) + 1j * rng.standard_normal(n - 1)
    A = sp.diags([off, 4.0 + 1j * rng.standard_normal(n), off[::-1].conj()],
                 [-1, 0, 1]).tocsr()
    x = _rand_vec(n, 4)
    y = ILU0(dtype="float64").setup(A).matvec(A @ x)
    assert np.linalg.norm(y - x) <= 1e3 * EPS64 * np.linalg.norm(x)


# ----------------------------------------------------------------- ISAI / Block-ISAI
def _pattern_rows(P):
    P = sp.csr_matrix(P)
    return [P.indices[P.indptr[i]:P.indptr[i + 1]] for i in range(P.shape[0])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls,b", [(ISAI, 1), (BlockISAI, 2)])
def test_general_isai_rows_solve_their_local_systems(device, cls, b):
    A = _helm()
    kw = {"block_size": b} if cls is BlockISAI else {}
    M = cls(variant="general", dtype="float64", sparsity_power=2, **kw).setup(A, device=device)
    Mm = M.operators()[0]
    assert Mm.dtype == np.complex128
    MA = (Mm @ A).toarray()
    n = A.shape[0]
    # row i of M, on its block pattern J_i: (M A)[i, J_i] = e_i^T (X A[J_i, J_i] = E_i^T)
    for i, J in enumerate(_pattern_rows(Mm)):
        np.testing.assert_allclose(MA[i, J], (J == i).astype(float), rtol=0, atol=1e-11)
    assert M.variant == "general" and n == Mm.shape[0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls,b", [(ISAI, 1), (BlockISAI, 2)])
def test_spd_isai_is_hermitian_fsai(device, cls, b):
    A = _mag()
    kw = {"block_size": b} if cls is BlockISAI else {}
    M = cls(dtype="float64", **kw).setup(A, device=device)
    assert M.variant == "spd" and "Hermitian" in M.variant_reason and M.symmetric
    G, GH = M.operators()
    assert (G != GH.conj().T).nnz == 0                       # M = G^H G exactly
    assert sp.triu(G, b).nnz == 0                            # lower (block) triangular
    # each row solves its local system: (G A)[r, J] vanishes off r's own diagonal block
    GA = (G @ A).toarray()
    for r, J in enumerate(_pattern_rows(G)):
        off = J // b != r // b
        np.testing.assert_allclose(GA[r, J[off]], 0, atol=1e-12)
    GAG = (G @ A @ G.conj().T).toarray()
    n = A.shape[0]
    for k in range(0, n, b):                                 # blockdiag(G A G^H) = I
        np.testing.assert_allclose(GAG[k:k + b, k:k + b], np.eye(b), rtol=0, atol=1e-12)
    Md = M.to_sparse().toarray()
    assert np.abs(Md - Md.conj().T).max() <= 10 * EPS64 * np.abs(Md).max()
    assert np.linalg.eigvalsh(Md).min() > 0                  # Hermitian positive definite


@pytest.mark.parametrize("device", DEVICES)
def test_right_isai_is_a_right_inverse_on_its_pattern(device):
    A = _helm()
    M = ISAI(variant="right", dtype="float64").setup(A, device=device)
    Mm = M.operators()[0]
    AM = (A @ Mm).toarray()
    for j, I in enumerate(_pattern_rows(Mm.T)):              # column j of M, rows I
        np.testing.assert_allclose(AM[I, j], (I == j).astype(float), rtol=0, atol=1e-11)


def test_auto_variant_tests_hermitian_not_symmetric():
    H = ISAI().setup(_helm())
    assert H.variant == "general" and "not Hermitian" in H.variant_reason
    assert ISAI().setup(_helm(), side="right").variant == "right"
    assert ISAI().setup(_mag()).variant == "spd"
    # a real symmetric matrix still says symmetric
    assert "symmetric" in ISAI().setup(sp.csr_matrix(_mag().real)).variant_reason


@pytest.mark.parametrize("variant", ["lower", "upper", "ilu"])
def test_triangular_isai_variants_on_complex_factors(variant):
    A = _helm()
    L, U = ILU0(dtype="float64").setup(A).factors()
    T = {"lower": L, "upper": U, "ilu": A}[variant]
    M = ISAI(variant=variant, dtype="float64").setup(T)
    if variant == "ilu":
        Li, Ui = M.operators()
        # each factor's ISAI inverts it on its pattern: exact where the inverse is banded
        for F, Fi in ((L, Li), (U, Ui)):
            R = (Fi @ F).toarray()
            for i, J in enumerate(_pattern_rows(Fi)):
                np.testing.assert_allclose(R[i, J], (J == i).astype(float), atol=1e-12)
    else:
        Mi = M.operators()[0]
        R = (Mi @ T).toarray()
        for i, J in enumerate(_pattern_rows(Mi)):
            np.testing.assert_allclose(R[i, J], (J == i).astype(float), atol=1e-12)


def test_indefinite_spd_request_falls_back_finite():
    # Helmholtz is not Hermitian: its 'spd' local systems get the documented fallback
    A = _helm(k=20.0, eps=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        M = BlockISAI(variant="spd", block_size=2, dtype="float64").setup(A)
    assert np.isfinite(M.to_sparse().data).all()


# ----------------------------------------------------------------- complex BILU(0)
def _block_coupled_c(nb=6, b=3, seed=0):
    """A complex block-coupled matrix: a block tridiagonal skeleton, dense ``b x b`` blocks,
    diagonally dominant pivot blocks, plus a few far blocks (so BILU(0) is not exact)."""
    rng = np.random.default_rng(seed)
    blocks, rows, cols = [], [], []
    for i in range(nb):
        for j in {i - 1, i, i + 1, (i + 3) % nb} - {-1, nb}:
            B = rng.standard_normal((b, b)) + 1j * rng.standard_normal((b, b))
            if i == j:
                B += 4 * b * np.eye(b)
            blocks.append(B)
            rows.append(i)
            cols.append(j)
    order = np.lexsort((cols, rows))
    ptr = np.zeros(nb + 1, np.int64)
    np.add.at(ptr, np.asarray(rows) + 1, 1)
    A = sp.bsr_matrix((np.array(blocks)[order], np.asarray(cols)[order], np.cumsum(ptr)),
                      shape=(nb * b, nb * b)).tocsr()
    return canonical_csr(A)


def _dense_block_lu(A, b):
    """Block LU without pivoting of a dense matrix (unit block lower L, block upper U)."""
    n = A.shape[0]
    L, U = np.eye(n, dtype=complex), A.astype(complex).copy()
    for k in range(0, n, b):
        K = slice(k, k + b)
        inv = np.linalg.inv(U[K, K])
        for i in range(k + b, n, b):
            I_ = slice(i, i + b)
            L[I_, K] = U[I_, K] @ inv
            U[I_, :] -= L[I_, K] @ U[K, :]
    return L, U


def test_bilu0_of_a_complex_block_tridiagonal_matrix_is_its_block_lu():
    from mpsolve.precond.block_ilu import bilu0_split
    nb, b = 6, 2
    T = _block_coupled_c(nb, b, seed=3).toarray()
    for i in range(0, nb * b, b):                      # drop the far blocks: tridiagonal
        for j in range(0, nb * b, b):
            if abs(i - j) > b:
                T[i:i + b, j:j + b] = 0
    A = canonical_csr(sp.csr_matrix(T))
    L, U = bilu0_split(A, b)
    assert L.dtype == U.dtype == np.complex128
    Ld, Ud = _dense_block_lu(T, b)                     # no fill: BILU(0) is the exact block LU
    assert np.abs(L.toarray() - Ld).max() <= 1e3 * EPS64 * np.abs(Ld).max()
    assert np.abs(U.toarray() - Ud).max() <= 1e3 * EPS64 * np.abs(Ud).max()
    assert np.abs(L @ U - T).max() <= 1e3 * EPS64 * np.abs(T).max()


@pytest.mark.parametrize("device", DEVICES)
def test_complex_blockilu0_matches_a_on_its_pattern_and_applies_its_inverse(device):
    """(L U)_ij = A_ij on the block pattern (ILU(0)'s defining property, exact arithmetic
    up to rounding), and ``M r = U^-1 L^-1 r`` by dense complex triangular solves."""
    import scipy.linalg as sla
    A = _block_coupled_c(7, 3, seed=1)
    M = BlockILU0(block_size=3, dtype="float64").setup(A, device=device)
    assert M.storage_dtype == np.complex128 and not M.symmetric
    L, U = M.factors()
    LU = (L @ U).toarray()
    Ad = A.toarray()
    mask = np.kron((abs(sp.bsr_matrix(A, blocksize=(3, 3))).toarray().reshape(7, 3, 7, 3)
                    .sum(axis=(1, 3)) > 0), np.ones((3, 3), bool))
    assert np.abs((LU - Ad)[mask]).max() <= 1e3 * EPS64 * np.abs(Ad).max()
    assert np.abs((LU - Ad)[~mask]).max() > 1e-3            # fill dropped: not the exact LU
    r = _rand_vec(A.shape[0], 4)
    want = np.linalg.solve(U.toarray(), sla.solve_triangular(L.toarray(), r, lower=True))
    got = M.matvec(r)
    assert got.dtype == np.complex128
    assert np.abs(got - want).max() <= 1e3 * EPS64 * np.abs(want).max()


def test_hermitian_a_gives_a_hermitian_blockilu0():
    A = _mag(6)                                        # Hermitian positive definite
    M = BlockILU0(block_size=2, dtype="float64").setup(A)
    assert M.symmetric                                 # detected: L D L^H
    Md = _dense_of(M)
    assert np.abs(Md - Md.conj().T).max() <= 10 * EPS64 * np.abs(Md).max()
    G = BlockILU0(block_size=2, dtype="float64", symmetric=False).setup(A)
    r = _rand_vec(A.shape[0], 2)
    np.testing.assert_allclose(M.matvec(r), G.matvec(r), rtol=1e-10,
                               atol=1e-10 * np.abs(G.matvec(r)).max())


def test_hermitian_a_gives_a_hermitian_ilut():
    """ILUT's symmetric form of a Hermitian A took SuperLU's pivots with their imaginary
    rounding (1e-6 relative): ``U^H D^-1 U`` was Hermitian to 8e-6 only, while
    ``M.symmetric`` let it pass CG's check."""
    from mpsolve.precond import ILUT

    k = 10
    T = sp.diags([-np.ones(k - 1), 2 * np.ones(k), -np.ones(k - 1)], [-1, 0, 1])
    L = sp.kron(T, sp.eye(k)) + sp.kron(sp.eye(k), T)
    n = L.shape[0]
    skew = sp.diags(np.ones(n - 1), 1) - sp.diags(np.ones(n - 1), -1)
    H = sp.csr_matrix(L + 0.3j * skew + 0.3 * sp.eye(n))     # Hermitian positive definite
    for kw in ({}, {"drop_tol": 0.0}):
        M = ILUT(dtype="float64", **kw).setup(H)
        assert M.symmetric and M.stats["form"] == "symmetric"
        Md = _dense_of(M)
        assert np.abs(Md - Md.conj().T).max() <= 10 * EPS64 * np.abs(Md).max()
        assert np.linalg.eigvalsh((Md + Md.conj().T) / 2).min() > 0


def test_complex_bilu_isai_with_full_pattern_is_the_exact_triangular_inverse():
    import scipy.linalg as sla
    from mpsolve.precond.block_ilu import bilu0_split, bilu_isai_operators
    A = _block_coupled_c(6, 2, seed=5)
    L, U = bilu0_split(A, 2)
    chain, bad, stats = bilu_isai_operators(A, 2, 6, "float64", "float64", symmetric=False)
    assert bad.size == 0 and stats["symmetric"] is False
    Li, Ui = (op.to_scipy().toarray() for op in chain.ops)
    I = np.eye(A.shape[0])
    Linv = sla.solve_triangular(L.toarray(), I, lower=True)
    Uinv = np.linalg.solve(U.toarray(), I)
    assert np.abs(Li - Linv).max() <= 1e-10 * max(1.0, np.abs(Linv).max())
    assert np.abs(Ui - Uinv).max() <= 1e-10 * max(1.0, np.abs(Uinv).max())
    M = BlockISAI(variant="bilu", block_size=2, sparsity_power=6, dtype="float64",
                  accumulate="float64").setup(A)
    r = _rand_vec(A.shape[0], 6)
    want = Uinv @ (Linv @ r)
    assert np.abs(M.matvec(r) - want).max() <= 1e-10 * np.abs(want).max()


def test_hermitian_bilu_isai_is_g_hermitian_g():
    from mpsolve.precond.block_ilu import bilu0_factor, bilu_isai_operators
    import scipy.linalg as sla
    A = _mag(6)
    chain, bad, stats = bilu_isai_operators(A, 2, 1, "float64", "float64")
    assert stats["symmetric"] and bad.size == 0
    G, Gh = (op.to_scipy() for op in chain.ops)
    assert abs(G.conj().T - Gh).max() == 0.0
    ch2, _, _ = bilu_isai_operators(A, 2, 1, "float64", "float64", symmetric=False)
    Li = ch2.ops[0].to_scipy().toarray()
    Dinv = sla.block_diag(*bilu0_factor(A, 2)[4])
    np.testing.assert_allclose((Gh @ G).toarray(), Li.conj().T @ Dinv @ Li, atol=1e-12)
    M = BlockISAI(variant="bilu", block_size=2).setup(A)
    Md = _dense_of(M)
    assert M.symmetric and np.abs(Md - Md.conj().T).max() <= 10 * EPS64 * np.abs(Md).max()


@pytest.mark.parametrize("precond", ["block-ilu0", "block-isai-bilu"])
@pytest.mark.parametrize("precision", ["double", "mixed"])
def test_complex_block_coupled_solve_like_scipy(precond, precision):
    """GMRES with complex BILU(0) / Block-ISAI(bilu) on a complex block-coupled system,
    against SciPy's GMRES (ILU-preconditioned) on the same system."""
    A = _block_coupled_c(40, 3, seed=11)
    n = A.shape[0]
    b = A @ np.exp(2j * np.pi * np.arange(n) / n)
    rtol = 1e-8
    M = (BlockILU0(block_size=3, dtype="float32" if precision == "mixed" else "float64")
         if precond == "block-ilu0" else
         BlockISAI(variant="bilu", block_size=3,
                   dtype="float32" if precision == "mixed" else "float64"))
    r = mpsolve.solve(A, b, method="gmres", precond=M, precision=precision, rtol=rtol,
                      maxiter=500)
    assert r.info == 0 and r.x.dtype == np.complex128
    assert _true_rel_residual(A, r.x, b) <= rtol
    r0 = mpsolve.solve(A, b, method="gmres", precond=None, precision=precision, rtol=rtol,
                       maxiter=500)
    assert r.iterations < r0.iterations                     # it does help
    sx, sinfo = spla.gmres(A, b, rtol=rtol, atol=0.0, M=_spilu_op(A), maxiter=500)
    assert sinfo == 0
    cond = np.linalg.cond(A.toarray())
    assert np.linalg.norm(r.x - sx) <= 4 * rtol * cond * np.linalg.norm(sx)


# ----------------------------------------------------------------- cpu vs reference
@pytest.mark.parametrize("make", [_helm, _mag], ids=["helmholtz", "magnetic"])
@pytest.mark.parametrize("build", [
    lambda: ILU0(dtype="float64"), lambda: ILU0(dtype="float32"),
    lambda: BlockJacobi(block_size=3, dtype="float64"),
    lambda: ISAI(dtype="float64"), lambda: ISAI(variant="general", dtype="float32"),
    lambda: BlockISAI(block_size=2, dtype="float64"),
    lambda: BlockISAI(block_size=3, variant="general", dtype="float64"),
    lambda: BlockISAI(block_size=2, variant="spd", dtype="float64"),
    lambda: BlockILU0(block_size=2, dtype="float64"),
    lambda: BlockILU0(block_size=3, dtype="float32"),
    lambda: BlockISAI(block_size=2, variant="bilu", dtype="float64")],
    ids=["ilu0", "ilu0-c64", "bjacobi", "isai", "isai-general-c64", "bisai", "bisai-general",
         "bisai-spd", "bilu0", "bilu0-c64", "bisai-bilu"])
def test_cpu_and_reference_build_the_same_preconditioner(make, build):
    A = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Mc = build().setup(A, device="cpu")
        Mr = build().setup(A, device="reference")
    x = _rand_vec(A.shape[0], 5)
    yc, yr = Mc.matvec(x), Mr.matvec(x)
    low = Mc.storage_dtype == np.complex64
    acc = getattr(Mc, "accumulate", "float64")
    tol = 1e2 * (EPS32 if low or acc == "float32" else EPS64)
    assert np.linalg.norm(yc - yr) <= tol * np.linalg.norm(yr)
    if hasattr(Mc, "operators"):
        for Oc, Or in zip(Mc.operators(), Mr.operators()):
            assert (Oc != Or).nnz == 0 or abs(Oc - Or).max() <= 1e-12 * abs(Or).max()


_CK = ("complex64", "complex128")


@pytest.mark.parametrize("key", [(v, x, y) for v in _CK for x in _CK for y in _CK])
@pytest.mark.parametrize("mode", ["acc64", "acc32"])
@pytest.mark.parametrize("b", [2, 10])
def test_bsrmv_complex_kernel_matches_reference(key, mode, b):
    rng = np.random.default_rng(7)
    n = 40
    B = sp.random(n, n, density=0.1, random_state=rng) + 1j * sp.random(
        n, n, density=0.1, random_state=rng) + sp.eye(n)
    B = sp.bsr_matrix(B, blocksize=(b, b))
    B.sort_indices()
    ip, ix = B.indptr.astype(np.int32), B.indices.astype(np.int32)
    data = B.data.astype(key[0])
    x = _rand_vec(n, 8).astype(key[1])
    yc, yr = np.empty(n, key[2]), np.empty(n, key[2])
    lookup("cpu", "bsrmv", key, mode)(launch_plan("cpu", "bsrmv", ip), ip, ix, data, x, yc)
    lookup("reference", "bsrmv", key, mode)(None, ip, ix, data, x, yr)
    exact = B.toarray().astype(np.complex128) @ x.astype(np.complex128)
    low = "complex64" in key or mode == "acc32"
    tol = 1e2 * (EPS32 if low else EPS64)
    assert np.linalg.norm(yc - yr) <= tol * np.linalg.norm(exact)
    assert np.linalg.norm(yc - exact) <= tol * np.linalg.norm(exact) * b


@pytest.mark.parametrize("key", [(v, x, y) for v in _CK for x in _CK for y in _CK])
def test_ilu_sweeps_complex_kernel_matches_reference(key):
    A = _helm(n=7)
    M = ILU0(dtype="float64").setup(A)
    ops = M._op
    args = [np.asarray(a) for a in (ops.bounds, ops.lptr, ops.lind)] + [ops.lval.astype(key[0])] \
        + [np.asarray(ops.uptr), np.asarray(ops.uind), ops.uval.astype(key[0]),
           ops.dinv.astype(key[0])]
    x = _rand_vec(A.shape[0], 9).astype(key[1])
    yc, yr = np.empty(x.size, key[2]), np.empty(x.size, key[2])
    lookup("cpu", "ilu_sweeps", key)(*args, x, yc)
    lookup("reference", "ilu_sweeps", key)(*args, x, yr)
    tol = 1e2 * (EPS32 if "complex64" in key else EPS64)
    assert np.linalg.norm(yc - yr) <= tol * np.linalg.norm(yr)


# ----------------------------------------------------------------- full solves
def _true_rel_residual(A, x, b):
    return np.linalg.norm(b - A @ x.astype(np.complex128)) / np.linalg.norm(b)


def _spilu_op(A):
    lu = spla.spilu(sp.csc_matrix(A), drop_tol=0.0, fill_factor=1.0)
    return spla.LinearOperator(A.shape, matvec=lu.solve, dtype=np.complex128)


@pytest.mark.parametrize("precision", ["double", "mixed"])
@pytest.mark.parametrize("method", ["gmres", "bicgstab"])
@pytest.mark.parametrize("precond", ["ilu0", "isai", "block-jacobi", None])
def test_helmholtz_solves_like_scipy(precision, method, precond):
    A = helmholtz2d(16, k=15.0, eps=0.2)
    n = A.shape[0]
    xs = np.exp(2j * np.pi * np.arange(n) / n)
    b = A @ xs
    rtol = 1e-8
    r = mpsolve.solve(A, b, method=method, precond=precond, precision=precision, rtol=rtol,
                      maxiter=3000)
    assert r.info == 0 and r.x.dtype == np.complex128
    assert _true_rel_residual(A, r.x, b) <= rtol            # certified here
    assert r.true_residual <= rtol
    # SciPy on the same system (ILU-preconditioned where mpsolve uses a preconditioner)
    M = _spilu_op(A) if precond else None
    sx, sinfo = getattr(spla, method)(A, b, rtol=rtol, atol=0.0, M=M, maxiter=3000)
    assert sinfo == 0
    cond = np.linalg.cond(A.toarray())
    assert np.linalg.norm(r.x - sx) <= 4 * rtol * cond * np.linalg.norm(sx)


@pytest.mark.parametrize("precision", ["double", "mixed"])
@pytest.mark.parametrize("precond", ["ilu0", "isai", "block-isai", "block-jacobi", None])
def test_magnetic_cg_solves_like_scipy(precision, precond):
    A = magnetic2d(16, flux=0.2)
    n = A.shape[0]
    b = A @ (np.linspace(0, 1, n) + 0.5j)
    rtol = 1e-8
    r = mpsolve.solve(A, b, method="cg", precond=precond, precision=precision, rtol=rtol)
    assert r.info == 0
    assert _true_rel_residual(A, r.x, b) <= rtol
    sx, sinfo = spla.cg(A, b, rtol=rtol, atol=0.0, maxiter=2000)
    assert sinfo == 0
    cond = np.linalg.cond(A.toarray())
    assert np.linalg.norm(r.x - sx) <= 4 * rtol * cond * np.linalg.norm(sx)
    if precond in ("ilu0", "isai"):                          # they do help
        r0 = mpsolve.solve(A, b, method="cg", precond=None, precision=precision, rtol=rtol)
        assert r.iterations < r0.iterations


@pytest.mark.parametrize("precond", [ILU0, ISAI, BlockJacobi])
def test_mixed_stores_complex64_and_iterates_in_complex128(precond):
    A = helmholtz2d(12, k=10.0, eps=0.3)
    b = A @ np.ones(A.shape[0], dtype=np.complex128)
    M = precond()
    x, info = mpsolve.gmres(A, b, M=M, rtol=1e-9, precision="mixed", maxiter=500)
    assert info == 0 and x.dtype == np.complex128
    assert M.storage_dtype == np.complex64
    assert _true_rel_residual(A, x, b) <= 1e-9


@pytest.mark.parametrize("method", ["gmres", "bicgstab", "cg"])
@pytest.mark.parametrize("precond", ["ilu0", "isai"])
def test_no_false_success(method, precond):
    # stopped early: info > 0 exactly when the true residual misses the bound
    A = helmholtz2d(16, k=15.0, eps=0.05) if method != "cg" else magnetic2d(16, flux=0.1)
    b = A @ np.ones(A.shape[0], dtype=np.complex128)
    rtol = 1e-10
    for maxiter in (2, 5, 500):
        r = mpsolve.solve(A, b, method=method, precond=precond, rtol=rtol, maxiter=maxiter)
        res = _true_rel_residual(A, r.x, b)
        assert np.isfinite(r.x).all()
        if r.info == 0:                                      # success is certified
            assert res <= rtol and r.true_residual <= rtol
        if maxiter == 2:                                     # 2 steps cannot reach 1e-10
            assert r.info != 0 and res > rtol
    assert r.info == 0                                       # the last one converges


def test_auto_offers_the_complex_preconditioners():
    # supports_complex: method/precond 'auto' may take ILU(0) and ISAI for complex A;
    # CG (with a Hermitian M) only for the Hermitian problem
    for A, hermitian in ((helmholtz2d(16, k=15.0, eps=0.1), False),
                         (magnetic2d(16, flux=0.1), True)):
        b = A @ np.ones(A.shape[0], dtype=np.complex128)
        r = mpsolve.solve(A, b, rtol=1e-9)
        assert r.info == 0 and _true_rel_residual(A, r.x, b) <= 1e-9
        assert {c.precond for c in r.choices} >= {"ilu0", "isai"}
        assert (r.method == "cg") == hermitian
        assert all(c.method != "cg" for c in r.choices) or hermitian


@pytest.mark.parametrize("dt,tol", [("float64", 1e3 * EPS64), ("float32", 1e3 * EPS32)])
def test_ilut_complex_is_scipys_spilu(dt, tol):
    from mpsolve.precond import ILUT

    A = _helm()
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no complex -> real cast anywhere
        M = ILUT(drop_tol=1e-2, fill_factor=5, dtype=dt).setup(A)
    assert M.storage_dtype == (np.complex64 if dt == "float32" else np.complex128)
    r = _rand_vec(A.shape[0], 11)
    want = spla.spilu(sp.csc_matrix(A), drop_tol=1e-2, fill_factor=5).solve(r)
    assert np.linalg.norm(M.matvec(r) - want) <= tol * np.linalg.norm(want)


def test_mc64_reordering_of_a_complex_matrix():
    from mpsolve.precond import Reordered

    # a zero diagonal: ILU(0) alone has no pivot, ILU(0) of the MC64-permuted matrix has
    rng = np.random.default_rng(12)
    n = 30
    A = sp.random(n, n, density=0.15, random_state=rng, format="csr")
    A.data = A.data + 1j * rng.standard_normal(A.nnz)
    P = sp.csr_matrix((np.full(n, 3.0 - 1.0j), (np.arange(n), np.roll(np.arange(n), 1))))
    A = sp.csr_matrix(A - sp.diags(A.diagonal()) + P)        # the large entries off-diagonal
    with pytest.raises(ValueError):
        ILU0(dtype="float64").setup(A)
    M = Reordered(ILU0(dtype="float64")).setup(A)
    R = M.reordering
    B = R.matrix.toarray()
    assert B.dtype == np.complex128                            # imaginary parts kept
    want_B = np.diag(R.row_scale[R.perm]) @ A.toarray()[R.perm] @ np.diag(R.col_scale)
    np.testing.assert_allclose(np.abs(np.diag(B)), 1.0, rtol=1e-14)
    np.testing.assert_allclose(B, want_B, rtol=1e-12, atol=1e-12 * np.abs(B).max())
    L, U = M.inner.factors()                                   # M = Dc (L U)^-1 Dr P
    x = _rand_vec(n, 13)
    want = R.col_scale * np.linalg.solve((L @ U).toarray(), x[R.perm] * R.row_scale[R.perm])
    y = M.matvec(x)
    assert y.dtype == np.complex128
    assert np.linalg.norm(y - want) <= 1e-10 * np.linalg.norm(want)
    b = A @ x
    r = mpsolve.solve(A, b, method="gmres", precond="ilu0", reorder="mc64", rtol=1e-10)
    assert r.info == 0 and _true_rel_residual(A, r.x, b) <= 1e-10


@pytest.mark.parametrize("cls", [ILU0, ISAI, BlockJacobi])
@pytest.mark.parametrize("func", ["gmres", "bicgstab", "cg"])
def test_a_real_preconditioner_set_up_by_the_caller_on_complex_data(cls, func):
    """A real M set up beforehand, then a complex b: applied to the real and imaginary
    parts (M (u + iv) = M u + i M v, as SciPy applies a real operator) -- the same
    iterates as the complex twin of M, not a missing-kernel error."""
    from mpsolve.matrices import convection_diffusion2d, poisson2d

    A = (poisson2d(12) if func == "cg" else convection_diffusion2d(12, peclet=3.0)).tocsr()
    rng = np.random.default_rng(5)
    b = rng.standard_normal(A.shape[0]) + 1j * rng.standard_normal(A.shape[0])
    M = cls()
    M.setup(A, dtype=np.float64)
    x, info = getattr(mpsolve, func)(A, b, M=M, rtol=1e-10)
    assert info == 0 and x.dtype == np.complex128
    assert np.linalg.norm(b - A @ x) <= 1e-9 * np.linalg.norm(b)
    Mc = cls()
    Mc.setup(A.astype(np.complex128), dtype=np.complex128)
    xc, infoc = getattr(mpsolve, func)(A.astype(np.complex128), b, M=Mc, rtol=1e-10)
    assert infoc == 0 and np.allclose(x, xc, rtol=1e-8, atol=0)
    r = mpsolve.solve(A, np.column_stack([b, b.conj()]), method=func, precond=M, rtol=1e-10)
    assert r.info == 0 and r.x.shape == (A.shape[0], 2)


@pytest.mark.parametrize("name", ["jacobi", "block-jacobi", "ilu0", "ilut", "isai",
                                  "block-isai", "block-ilu0"])
def test_a_preconditioner_a_complex_solve_set_up_leaves_real_solves_real(name):
    """A preconditioner object passed to a complex solve and then to a real one is set up
    again for the real ``A`` -- and the real solve stays real: its old complex set-up made
    the solve complex (complex128 x for a real system, complex64 from ``mpsolve.cg`` on
    float32 data)."""
    from mpsolve.matrices import poisson3d
    from mpsolve.precond import make_preconditioner

    A = sp.csr_matrix(poisson3d(5))
    b = A @ np.ones(A.shape[0])
    H = sp.csr_matrix(magnetic2d(6, flux=0.05))
    h = H @ np.ones(H.shape[0])
    M = make_preconditioner(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = mpsolve.solve(H, h, method="gmres", precond=M, rtol=1e-8)
        assert r.x.dtype == np.complex128 and r.info == 0
        r = mpsolve.solve(A, b, method="gmres", precond=M, rtol=1e-8)
        assert r.x.dtype == np.float64 and r.info == 0
        assert np.abs(r.x - 1).max() < 1e-6
        x, info = mpsolve.cg(A.astype(np.float32), b.astype(np.float32), M=M)
        assert x.dtype == np.float32 and info == 0
        # and back: complex again
        r = mpsolve.solve(H, h, method="gmres", precond=M, rtol=1e-8)
        assert r.x.dtype == np.complex128 and r.info == 0
    # one the caller set up for a complex matrix still makes the solve complex (its
    # products with real vectors are complex)
    C = make_preconditioner("jacobi").setup(sp.csr_matrix(A * (1 + 1j)))
    assert mpsolve.solve(A, b, method="gmres", precond=C).x.dtype == np.complex128
