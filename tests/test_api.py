"""SciPy's contract for cg / gmres / bicgstab, checked against SciPy itself."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import mpsolve
from mpsolve import bicgstab, cg, gmres
from mpsolve.precond import BlockISAI, ISAI, Jacobi

from conftest import problem, problems

SOLVERS = {"cg": cg, "gmres": gmres, "bicgstab": bicgstab}
SCIPY = {"cg": spla.cg, "gmres": spla.gmres, "bicgstab": spla.bicgstab}


def _cases():
    for name, A, spd in problems():
        for m in SOLVERS:
            if m == "cg" and not spd:
                continue
            yield pytest.param(m, A, id=f"{m}-{name}")


@pytest.mark.parametrize("method,A", list(_cases()))
def test_residual_bound_per_dtype(method, A):
    """Converges with a true residual within the tolerance of the data's precision."""
    rng = np.random.default_rng(0)
    b = rng.standard_normal(A.shape[0]).astype(A.dtype)
    eps = np.finfo(A.dtype).eps
    rtol = 1e-8 if A.dtype == np.float64 else 1e-4
    x, info = SOLVERS[method](A, b, rtol=rtol, maxiter=2000)
    assert info == 0
    assert x.dtype == A.dtype
    res = np.linalg.norm(b.astype(float) - A.astype(float) @ x.astype(float))
    assert res <= rtol * np.linalg.norm(b.astype(float)) * (1 + 10 * eps / rtol)


@pytest.mark.parametrize("method", SOLVERS)
def test_matches_scipy_solution(method):
    A = problem("random-spd") if method == "cg" else problem("nonsymmetric")
    b = np.arange(A.shape[0], dtype=float) / A.shape[0] + 1.0
    x, info = SOLVERS[method](A, b, rtol=1e-12, maxiter=5000)
    xs, infos = SCIPY[method](A, b, rtol=1e-12, maxiter=5000)
    assert info == infos == 0
    xe = np.linalg.solve(A.toarray(), b)
    cond = np.linalg.cond(A.toarray())
    assert np.linalg.norm(x - xe) <= 1e-12 * cond * 10 * np.linalg.norm(xe)


@pytest.mark.parametrize("method", SOLVERS)
def test_maxiter_one_calls_callback_once(method):
    A = problem("poisson2d")
    b = np.ones(A.shape[0])
    calls = []
    kw = {"callback_type": "x"} if method == "gmres" else {}
    x, info = SOLVERS[method](A, b, maxiter=1, rtol=1e-14, callback=calls.append, **kw)
    assert len(calls) == 1
    assert info == 1


def test_gmres_legacy_callback_counts_inner_iterations_like_scipy():
    A = problem("nonsymmetric")
    b = np.ones(A.shape[0])
    ours, theirs = [], []
    gmres(A, b, maxiter=7, restart=5, rtol=1e-14, callback=ours.append, callback_type="legacy")
    spla.gmres(A, b, maxiter=7, restart=5, rtol=1e-14, callback=theirs.append,
               callback_type="legacy")
    assert len(ours) == len(theirs) == 7
    assert all(isinstance(v, float) for v in ours)
    assert ours[0] < 1.0


@pytest.mark.parametrize("method", SOLVERS)
def test_zero_rhs_returns_zero(method):
    A = problem("poisson2d")
    x0 = np.ones(A.shape[0])
    x, info = SOLVERS[method](A, np.zeros(A.shape[0]), x0=x0)
    assert info == 0 and not x.any()
    assert (x0 == 1).all()


@pytest.mark.parametrize("method", SOLVERS)
def test_user_data_never_modified(method):
    A = problem("poisson2d").tocsr()
    A_before = A.copy()
    b = np.linspace(1, 2, A.shape[0])
    b_before = b.copy()
    x0 = np.full(A.shape[0], 0.5)
    x0_before = x0.copy()
    M = sp.diags(1 / A.diagonal()).tocsr()
    x, info = SOLVERS[method](A, b, x0=x0, M=M, rtol=1e-10)
    assert info == 0
    assert (x0 == x0_before).all() and (b == b_before).all()
    assert (A != A_before).nnz == 0
    assert x is not x0 and x is not b


def test_unsorted_duplicate_csr_is_not_modified_and_solved():
    A = problem("poisson2d").tocoo()
    # duplicate every entry as two halves, shuffle the order: a non-canonical CSR
    rng = np.random.default_rng(3)
    perm = rng.permutation(2 * A.nnz)
    rows = np.concatenate([A.row, A.row])[perm]
    cols = np.concatenate([A.col, A.col])[perm]
    vals = np.concatenate([A.data / 2, A.data / 2])[perm]
    # build a CSR whose rows hold unsorted, duplicated column indices
    order = np.argsort(rows, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=A.shape[0]))])
    C = sp.csr_matrix((vals[order], cols[order], indptr), shape=A.shape)
    assert not C.has_canonical_format
    data0, idx0 = C.data.copy(), C.indices.copy()
    b = np.ones(A.shape[0])
    x, info = cg(C, b, rtol=1e-10)
    assert info == 0
    assert (C.data == data0).all() and (C.indices == idx0).all()
    assert np.linalg.norm(b - A.tocsr() @ x) <= 1e-10 * np.linalg.norm(b)


def test_positional_tolerances_rejected():
    A = problem("poisson2d")
    with pytest.raises(TypeError):
        cg(A, np.ones(A.shape[0]), None, 1e-5)


@pytest.mark.parametrize("method", SOLVERS)
def test_x0_Mb(method):
    A = problem("poisson2d")
    b = np.ones(A.shape[0])
    M = Jacobi(dtype="float64")
    x, info = SOLVERS[method](A, b, x0="Mb", M=M, rtol=1e-10)
    assert info == 0
    assert np.linalg.norm(b - A @ x) <= 1e-10 * np.linalg.norm(b)


FORMATS = ["csr", "csc", "coo", "bsr", "dia", "lil", "dok"]


@pytest.mark.parametrize("fmt", FORMATS + ["dense", "linop", "csr_array", "int"])
def test_any_matrix_format(fmt):
    A0 = problem("poisson2d")
    b = A0 @ np.ones(A0.shape[0])
    if fmt in FORMATS:
        A = A0.asformat(fmt)
    elif fmt == "dense":
        A = A0.toarray()
    elif fmt == "linop":
        A = spla.aslinearoperator(A0)
    elif fmt == "csr_array":
        A = sp.csr_array(A0)
    else:
        A = sp.csr_matrix(problem("poisson1d").astype(np.int64))
        b = A @ np.ones(A.shape[0])
    x, info = cg(A, b, rtol=1e-10)
    assert info == 0
    assert x.dtype == np.float64
    assert np.allclose(x, 1.0, atol=1e-6)


@pytest.mark.parametrize("kind", ["sparse", "dense", "linop", "jacobi", "jacobi-fp64", "callable"])
def test_any_preconditioner_kind(kind):
    A = problem("nonsymmetric").tocsr()  # nonsymmetric
    b = A @ np.ones(A.shape[0])
    d = 1 / A.diagonal()
    M = {"sparse": sp.diags(d).tocsc(), "dense": np.diag(d),
         "linop": spla.LinearOperator(A.shape, matvec=lambda r: d * r.ravel()),
         "jacobi": Jacobi(), "jacobi-fp64": Jacobi(dtype="float64"),
         "callable": spla.aslinearoperator(sp.diags(d))}[kind]
    for method in ("gmres", "bicgstab"):
        x, info = SOLVERS[method](A, b, M=M, rtol=1e-10)
        assert info == 0, method
        assert np.linalg.norm(b - A @ x) <= 1e-10 * np.linalg.norm(b)


def test_mpsolve_preconditioner_in_scipy():
    D = sp.diags(10.0 ** np.random.default_rng(5).uniform(-2, 2, 80))
    A = (D @ problem("random-spd") @ D).tocsr()  # badly scaled SPD
    b = A @ np.ones(A.shape[0])
    M = Jacobi().setup(A)
    counts = {}
    for name, MM in (("none", None), ("jacobi", M)):
        it = []
        x, info = spla.cg(A, b, rtol=1e-10, M=MM, callback=it.append, maxiter=5000)
        assert info == 0 or name == "none"
        counts[name] = len(it)
    # Jacobi helps on this badly scaled SPD matrix
    assert counts["jacobi"] < counts["none"]
    assert isinstance(M.aslinearoperator(), spla.LinearOperator)


def test_jacobi_iterations_agree_with_scipy():
    A = problem("poisson2d")
    b = A @ np.ones(A.shape[0])
    d = 1 / A.diagonal()
    it_s, it_m = [], []
    spla.cg(A, b, rtol=1e-10, M=sp.diags(d), callback=it_s.append)
    res = mpsolve.solve(A, b, method="cg", precond=Jacobi(dtype="float64"), rtol=1e-10,
                        callback=it_m.append)
    assert res.converged
    assert abs(len(it_s) - res.iterations) <= 2
    assert len(it_m) == res.iterations


def test_solve_result_fields():
    A = problem("poisson2d")
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, method="cg", precond="jacobi", rtol=1e-9)
    assert res.converged and res.info == 0
    assert res.iterations == len(res.residuals)
    assert res.residuals[-1] <= 1e-9
    true = np.linalg.norm(b - A @ res.x) / np.linalg.norm(b)
    assert res.true_residual == pytest.approx(true, rel=1e-6)
    assert all(isinstance(t, float) for t in (res.setup_time, res.solve_time))  # not speed
    assert "converged" in res.status
    x, info = res
    assert info == 0 and x is res.x
    assert "true rel. residual" in res.summary()


def test_nonconvergence_reports_positive_info():
    A = problem("poisson2d")
    b = np.ones(A.shape[0])
    res = mpsolve.solve(A, b, method="cg", maxiter=3, rtol=1e-12, precond=None)
    assert res.info == 3 and not res.converged
    assert "not converged" in res.status


def test_cg_on_indefinite_reports_breakdown_or_nonconvergence():
    P = problem("poisson2d")
    A = (P - 4.0 * sp.eye(P.shape[0])).tocsr()  # indefinite: p.Ap changes sign
    b = np.ones(A.shape[0])
    x, info = cg(A, b, rtol=1e-8)
    assert info == -12
    assert np.isfinite(x).all()
    x, info = cg(-P, b, rtol=1e-8)              # negative definite: solved, as SciPy's CG
    assert info == 0 and np.linalg.norm(b + P @ x) <= 1e-8 * np.linalg.norm(b)


def test_empty_system():
    x, info = cg(sp.csr_matrix((0, 0)), np.zeros(0))
    assert info == 0 and x.shape == (0,)


def test_singular_gmres_reports_failure():
    A = sp.diags([1.0, 2.0, 0.0, 4.0]).tocsr()
    b = np.ones(4)
    x, info = gmres(A, b, rtol=1e-10, maxiter=5)
    assert info != 0
    assert np.isfinite(x).all()


@pytest.mark.parametrize("name", ["nonsymmetric", "poisson2d"])
def test_gmres_right_preconditioning_matches_scipy_on_AM(name):
    """side='right' is GMRES on A M with x = M y: SciPy's gmres on that operator takes
    the same iterations."""
    A = problem(name).tocsr()
    b = A @ np.linspace(1, 2, A.shape[0])
    d = 1.0 / A.diagonal()
    M = sp.diags(d).tocsr()
    ours = mpsolve.solve(A, b, method="gmres", precond=M, side="right", rtol=1e-10, restart=10)
    AM = spla.LinearOperator(A.shape, matvec=lambda v: A @ (d * v), dtype=np.float64)
    count = []
    y, info = spla.gmres(AM, b, rtol=1e-10, restart=10, callback=count.append,
                         callback_type="pr_norm")
    assert ours.converged and info == 0
    assert abs(ours.iterations - len(count)) <= 1
    assert np.linalg.norm(b - A @ ours.x) <= 1e-10 * np.linalg.norm(b)


def test_gmres_left_preconditioning_survives_bad_scaling():
    """A badly row-scaled system: right preconditioning minimises a residual dominated
    by the large rows; left preconditioning (the default) still meets the true
    tolerance, and the true residual decides info either way."""
    rng = np.random.default_rng(4)
    A0 = problem("nonsymmetric").tocsr()
    D = sp.diags(10.0 ** rng.uniform(-6, 6, A0.shape[0]))
    A = (D @ A0).tocsr()
    b = A @ np.ones(A.shape[0])
    M = sp.diags(1.0 / A.diagonal()).tocsr()
    left = mpsolve.solve(A, b, method="gmres", precond=M, rtol=1e-10, restart=20)
    assert left.converged
    assert np.linalg.norm(b - A @ left.x) <= 1e-10 * np.linalg.norm(b)
    with pytest.raises(ValueError, match="side"):
        gmres(A, b, M=M, side="middle")


@pytest.mark.parametrize("make,solver", [
    (lambda: ISAI(), "cgs"), (lambda: BlockISAI(block_size=2), "cgs"),
    (lambda: ISAI(), "bicgstab"), (lambda: BlockISAI(block_size=2), "bicgstab"),
    (lambda: BlockISAI(variant="bilu"), "bicgstab")],
    ids=["isai-cgs", "block-isai-cgs", "isai-bicgstab", "block-isai-bicgstab", "bilu-bicgstab"])
def test_default_preconditioners_work_inside_scipy_krylov(make, solver):
    """A preconditioner handed to SciPy's methods (``aslinearoperator``) is a fixed linear
    operator by default: with ISAI's rows summed in FP32 SciPy's CGS returned NaN here.
    (CGS with the BILU variant stalls at 1e-6 with FP64 storage too: CGS's own erratic
    convergence, not the apply's.)"""
    from mpsolve.matrices import convection_diffusion2d

    A = convection_diffusion2d(100, peclet=50).tocsr()
    b = A @ np.ones(A.shape[0])
    M = make().setup(A)
    x, info = getattr(spla, solver)(A, b, M=M.aslinearoperator(), rtol=1e-8, maxiter=2000)
    assert info == 0
    assert np.linalg.norm(b - A @ x) <= 1e-7 * np.linalg.norm(b)


@pytest.mark.parametrize("name", ["jacobi", "ilu0", "isai", "block-isai", "ilut"])
def test_a_real_preconditioner_applies_to_complex_vectors_by_linearity(name):
    """SciPy's operators apply to complex vectors: a real ``M`` gives ``M u + i M v``."""
    from mpsolve.precond import make_preconditioner

    A = problem("poisson2d")
    n = A.shape[0]
    M = make_preconditioner(name).setup(A)
    # the oracle: M as a dense FP64 matrix, column by column from real unit vectors
    Md = np.column_stack([M.matvec(e) for e in np.eye(n)])
    rng = np.random.default_rng(3)
    u, v = rng.standard_normal((2, n))
    for dt in (np.complex128, np.complex64):
        z = (u + 1j * v).astype(dt)
        got = M.matvec(z)
        want = Md @ z.astype(np.complex128)
        assert got.dtype == dt
        # M's rounding to z's precision, and the oracle's sums (at most 1.05 eps measured)
        tol = 16 * np.finfo(dt).eps * (np.abs(Md) @ np.abs(z)).max()
        assert np.abs(got - want).max() <= tol
        assert M.matvec(z[:, None]).shape == (n, 1)
    x, info = spla.gmres(A, A @ (u + 1j * v), M=M.aslinearoperator(), rtol=1e-10)
    assert info == 0


def test_setting_a_preconditioner_up_on_an_operator_names_the_fix():
    with pytest.raises(TypeError, match="entries of A.*sparse matrix"):
        ISAI().setup(spla.aslinearoperator(problem("poisson2d")))


@pytest.mark.parametrize("method", ["gmres", "auto"])
def test_a_preconditioner_a_solve_set_up_follows_the_matrix(method):
    """A preconditioner object passed not set up is set up by the solve; passed again with
    another matrix (another size, other values, or the same matrix changed in place) it is
    set up for that one -- PETSc's rule -- where it applied the first matrix's factors (a
    time-stepping loop reusing one ILU0() ran every step on step 0's).  The same matrix
    again: not set up again.  One the caller set up stays theirs, used as it is."""
    from mpsolve.precond import ILU0
    from mpsolve.matrices import convection_diffusion2d, poisson2d

    A1, A2, A3 = poisson2d(20), convection_diffusion2d(20, peclet=30), poisson2d(21)
    kw = dict(method=method, rtol=1e-8)

    def its(A, M):
        return mpsolve.solve(A, A @ np.ones(A.shape[0]), precond=M, **kw).iterations

    M = ILU0()
    its(A1, M)
    assert M.setups == 1
    its(A1, M)
    assert M.setups == 1                           # the same matrix: kept
    assert its(A3, M) == its(A3, ILU0()) and M.setups == 2     # another size
    assert its(A2, M) == its(A2, ILU0()) and M.setups == 3     # other values
    A4 = A2.copy()
    its(A4, M)
    assert M.setups == 3                           # equal values: kept
    A4.data *= 1.5                                 # changed in place
    assert its(A4, M) == its(A4, ILU0()) and M.setups == 4
    A4.data[:] = A4.data[::-1].copy()              # the same values, moved: J A J = A^T
    assert its(A4, M) == its(A4, ILU0()) and M.setups == 5
    # values moved within their columns (their sums, the old fingerprint, kept: dyadic
    # values sum exactly) and a change below the sums' rounding: set up again each time
    n, p = 100, 0.875
    A5 = sp.diags([np.full(n - 1, -1 - p), np.full(n, 2.0), np.full(n - 1, -1 + p)],
                  [-1, 0, 1], format="csr")
    its(A5, M)
    setups = M.setups
    C5 = A5.tocsc()
    for j in range(1, n - 1):
        v = C5.data[C5.indptr[j]:C5.indptr[j + 1]]
        v[0], v[2] = v[2], v[0]
    A5.data[:] = C5.tocsr().data                   # A^T but for the first and last columns
    assert its(A5, M) == its(A5, ILU0()) and M.setups == setups + 1
    A5.data[0] = np.nextafter(A5.data[0], 3.0)     # one bit: under the sums' rounding
    its(A5, M)
    assert M.setups == setups + 2
    # the caller's set-up on A1 is applied to A2 as it is
    C = ILU0().setup(A1)
    assert its(A2, C) != its(A2, ILU0()) and C.setups == 1
