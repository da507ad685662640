"""Several right-hand sides: ``b`` of shape ``(n, k)`` (mpsolve.multi, krylov/block_*.py,
kernels/cpu/spmm.py)."""
import numpy as np
import pytest
import scipy.sparse as sp

import mpsolve
from mpsolve.kernels import lookup
from mpsolve.kernels.registry import launch_plan
from mpsolve.matrices import convection_diffusion2d, poisson2d
from mpsolve.precond import make_preconditioner
from conftest import petsc_mat_apply


@pytest.fixture(autouse=True)
def _iterate_together(monkeypatch):
    """The block path on these small problems (by default only CG from 500k unknowns
    takes it on the CPU: :func:`mpsolve.multi.together`)."""
    monkeypatch.setenv("MPSOLVE_BLOCK", "1")


def _rhs(A, rng):
    """Columns that converge at different iterations: A 1 (easy), random (harder), zero
    (done at once), A (random) (another)."""
    n = A.shape[0]
    return np.column_stack([A @ np.ones(n), rng.standard_normal(n), np.zeros(n),
                            A @ rng.standard_normal(n)])


def _certified(A, x, b):
    """``||b - A x||_2`` in long double (products and sums in 80-bit), relative to ``||b||``."""
    A = sp.csr_matrix(A)
    xl = x.astype(np.longdouble)
    r = b.astype(np.longdouble).copy()
    for i in range(A.shape[0]):
        s, e = A.indptr[i], A.indptr[i + 1]
        r[i] -= np.dot(A.data[s:e].astype(np.longdouble), xl[A.indices[s:e]])
    bn = np.sqrt(np.sum(b.astype(np.longdouble) ** 2))
    return float(np.sqrt(np.sum(r * r)) / (bn if bn else 1))


# ----------------------------------------------------------------- kernels (parallel forms)
@pytest.mark.parametrize("key", [("float64", "float64", "float64"),
                                 ("float32", "float64", "float64"),
                                 ("float32", "float32", "float64")])
@pytest.mark.parametrize("mode", ["acc64", "acc32"])
def test_spmm_parallel_form_matches_reference_and_spmv(key, mode):
    """Large enough for the prange form: each column of the SpMM is the SpMV of that
    column, bit for bit (same products in the same order), and the reference agrees."""
    rng = np.random.default_rng(1)
    n, k = 60000, 3
    A = sp.random(n, n, density=4e-5, random_state=rng, format="csr") + sp.eye(n)
    A = sp.csr_matrix(A)
    A.sort_indices()
    ip, ix = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    plan = launch_plan("cpu", "spmv", ip)
    assert plan.size > 2
    data = A.data.astype(key[0])
    X = rng.standard_normal((n, k)).astype(key[1])
    Y = np.empty((n, k), key[2])
    lookup("cpu", "spmm", key, mode)(plan, ip, ix, data, X, Y)
    spmv = lookup("cpu", "spmv", key, mode)
    y = np.empty(n, key[2])
    for c in range(k):
        spmv(plan, ip, ix, data, np.ascontiguousarray(X[:, c]), y)
        assert np.array_equal(Y[:, c], y)
    Yr = np.empty_like(Y)
    lookup("reference", "spmm", key, mode)(None, ip, ix, data, X, Yr)
    tol = 1e-4 if mode == "acc32" else 1e-12
    np.testing.assert_allclose(Y, Yr, rtol=tol, atol=tol * np.abs(Yr).max())
    if mode == "acc64":   # the fused form: the same Y, and p_c . q_c to FP64 rounding
        Yd, out = np.empty_like(Y), np.empty(k)
        lookup("cpu", "spmm_dot", key, mode)(plan, ip, ix, data, X, Yd, out)
        assert np.array_equal(Yd, Y)
        want = np.einsum("ij,ij->j", X.astype(np.float64), Y.astype(np.float64))
        np.testing.assert_allclose(out, want, rtol=1e-12)


def test_block_kernels_parallel_forms_match_reference():
    rng = np.random.default_rng(2)
    n, k = 20000, 3
    blk = lambda: rng.standard_normal((n, k))  # noqa: E731
    A = sp.csr_matrix(sp.random(n, n, density=3e-4, random_state=rng) + sp.eye(n))
    A.sort_indices()
    ip, ix = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    cases = {
        "residual_mm": ([launch_plan("cpu", "spmv", ip), ip, ix, A.data, blk(), blk(),
                         np.empty((n, k))], ("float64",) * 4, "acc64"),
        "dmul_mm": ([rng.standard_normal(n), blk(), np.empty((n, k))], ("float64",) * 3, ""),
        "col_dot": ([blk(), blk(), np.zeros(k)], ("float64",), "native"),
        "col_axpy2_nrm2": ([rng.standard_normal(k), blk(), blk(), rng.standard_normal(k),
                            blk(), blk(), np.zeros(k)], ("float64",), "native"),
        "col_xpay": ([blk(), rng.standard_normal(k), blk()], ("float64",), ""),
        "col_scal": ([rng.standard_normal(k), blk(), blk()], ("float64",), ""),
        "col_mdot": ([rng.standard_normal((5, n, k)), 4, blk(), np.zeros((5, k))],
                     ("float64",), "native"),
        "col_maxpy": ([rng.standard_normal((5, n, k)), 4, rng.standard_normal((5, k)), blk()],
                      ("float64",), ""),
        "col_lincomb": ([rng.standard_normal((5, n, k)), rng.standard_normal((5, k)), 4,
                         blk()], ("float64",), ""),
        "col_cg_step": ([rng.standard_normal(k), blk(), blk(), blk(), blk(),
                         rng.random(n).astype(np.float32), np.zeros(k), np.zeros(k)],
                        ("float64",), "native"),
        "col_dxpay": ([rng.random(n), blk(), rng.standard_normal(k), blk()], ("float64",), ""),
        "col_mdot_nrm2": ([rng.standard_normal((5, n, k)), 4, blk(), np.zeros((5, k)),
                           np.zeros(k)], ("float64",), "native"),
        "col_maxpy_nrm2": ([rng.standard_normal((5, n, k)), 4, rng.standard_normal((5, k)),
                            blk(), np.zeros(k)], ("float64",), "native"),
    }
    for op, (args, key, mode) in cases.items():
        a_cpu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        a_ref = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        if op == "residual_mm":
            a_ref[0] = None
        lookup("cpu", op, key, mode)(*a_cpu)
        lookup("reference", op, key, mode)(*a_ref)
        for x, y in zip(a_cpu, a_ref):
            if isinstance(x, np.ndarray) and x.dtype.kind == "f":
                np.testing.assert_allclose(x, y, rtol=1e-11, atol=1e-11 * np.abs(y).max(),
                                           err_msg=op)


@pytest.mark.parametrize("k", [1, 3, 8])
def test_col_cg_step_parallel_form_is_the_serial_bits(k):
    """The parallel block CG step (workers over ranges of chunks) adds the chunks' partial
    sums in the serial form's order: the same bits, with and without Jacobi, with 4 chunks
    among 3 workers."""
    from mpsolve.kernels.cpu import spmm

    n = 3 * spmm.CHUNK + 17
    rng = np.random.default_rng(k)
    a = rng.standard_normal(k)
    P, X, Q, R = (rng.standard_normal((n, k)) for _ in range(4))
    for dd in ((rng.random(n) + 0.5).astype(np.float32), np.zeros(0)):
        out = []
        for f in (lambda *z: spmm._col_cg_step_par(*z, 3), spmm._col_cg_step_ser):
            X1, R1, rn, rz = X.copy(), R.copy(), np.zeros(k), np.zeros(k)
            f(a, P, X1, Q, R1, dd, rn, rz)
            out.append((X1, R1, rn, rz))
        for u, v in zip(*out):
            assert np.array_equal(u, v)


@pytest.mark.parametrize("n", [500, 20000])
@pytest.mark.parametrize("k", [1, 2, 3, 8])
def test_fused_block_ops_equal_the_unfused_ones(n, k):
    """Block CG's and GMRES's fused passes against the ops they replace, serial (n = 500)
    and parallel forms: the updated blocks bit for bit; the norms and dots within the
    reassociation of one FP64 sum."""
    rng = np.random.default_rng(n + k)
    blk = lambda: rng.standard_normal((n, k))  # noqa: E731
    op = lambda name, mode="": lookup("cpu", name, ("float64",), mode)  # noqa: E731
    a = rng.standard_normal(k)
    d = (rng.random(n) + 0.5).astype(np.float32)        # Jacobi's FP32 diagonal
    P, X, Q, R = blk(), blk(), blk(), blk()
    for dd in (d, np.zeros(0)):
        X1, R1, X2, R2 = X.copy(), R.copy(), X.copy(), R.copy()
        rn, rz = np.zeros(k), np.zeros(k)
        op("col_cg_step", "native")(a, P, X1, Q, R1, dd, rn, rz)
        rn2 = np.zeros(k)
        op("col_axpy2_nrm2", "native")(a, P, X2, -a, Q, R2, rn2)   # x += a p; r -= a q
        assert np.array_equal(X1, X2) and np.array_equal(R1, R2)
        np.testing.assert_allclose(rn, rn2, rtol=4 * n * 2.0 ** -53)
        Z = R2.copy()
        if dd.size:
            lookup("cpu", "dmul_mm", ("float32", "float64", "float64"))(dd, R2, Z)
        want = np.array([np.dot(R2[:, c], Z[:, c]) for c in range(k)])
        np.testing.assert_allclose(rz, want, rtol=4 * n * 2.0 ** -53)
        P1, P2 = P.copy(), P.copy()
        op("col_dxpay")(dd, R2, a, P1)                  # p = d r + a p, z not stored
        op("col_xpay")(Z, a, P2)                        # p = z + a p, z stored
        assert np.array_equal(P1, P2)
    V = rng.standard_normal((6, n, k))
    W = blk()
    H1, H2 = np.zeros((6, k)), np.zeros((6, k))
    nrm = np.zeros(k)
    op("col_mdot_nrm2", "native")(V, 5, W, H1, nrm)
    op("col_mdot", "native")(V, 5, W, H2)
    assert np.array_equal(H1[:5], H2[:5])
    np.testing.assert_allclose(nrm, np.linalg.norm(W, axis=0), rtol=4 * n * 2.0 ** -53)
    W1, W2 = W.copy(), W.copy()
    op("col_maxpy_nrm2", "native")(V, 5, H1, W1, nrm)
    op("col_maxpy")(V, 5, H1, W2)
    assert np.array_equal(W1, W2)
    want = W.copy()
    for i in range(5):
        want -= H1[i][None, :] * V[i]
    np.testing.assert_allclose(W1, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    np.testing.assert_allclose(nrm, np.linalg.norm(W1, axis=0), rtol=4 * n * 2.0 ** -53)


@pytest.mark.parametrize("blocks", [1, 4])
@pytest.mark.parametrize("key", [("float64", "float64", "float64"),
                                 ("float32", "float64", "float64"),
                                 ("float32", "float32", "float32")])
def test_ilu_sweeps_mm_matches_single_sweeps_and_reference(blocks, key):
    """ILU(0)'s sweeps with k right-hand sides per row: each column as the single-vector
    sweep (to rounding), and as the reference's."""
    A = convection_diffusion2d(30)
    M = make_preconditioner("ilu0", dtype=key[0], blocks=blocks).setup(A)
    op = M._op
    rng = np.random.default_rng(3)
    X = rng.standard_normal((A.shape[0], 3)).astype(key[1])
    Y = np.empty(X.shape, key[2])
    args = (op.bounds, op.lptr, op.lind, op.lval, op.uptr, op.uind, op.uval, op.dinv)
    lookup("cpu", "ilu_sweeps_mm", key)(*args, X, Y)
    Yr = np.empty_like(Y)
    lookup("reference", "ilu_sweeps_mm", key)(*args, X, Yr)
    y = np.empty(X.shape[0], key[2])
    tol = 1e-5 if "float32" in key[1:] else 1e-12
    for c in range(3):
        lookup("cpu", "ilu_sweeps", key)(*args, np.ascontiguousarray(X[:, c]), y)
        np.testing.assert_allclose(Y[:, c], y, rtol=tol, atol=tol * np.abs(y).max())
    np.testing.assert_allclose(Y, Yr, rtol=tol, atol=tol * np.abs(Yr).max())


@pytest.mark.parametrize("blocks", [1, 4])
@pytest.mark.parametrize("k", [2, 4])
def test_ilu_sweeps_mm_columns_are_the_single_sweeps_bit_for_bit(blocks, k):
    """Two columns (registers, ``_sweeps_mm2``) and four (the general form): each column
    is the single-vector sweep's result exactly (same operations in the same order)."""
    A = convection_diffusion2d(30)
    key = ("float32", "float64", "float64")
    M = make_preconditioner("ilu0", dtype="float32", blocks=blocks).setup(A)
    op = M._op
    X = np.random.default_rng(4).standard_normal((A.shape[0], k))
    X0 = X.copy()
    Y = np.empty_like(X)
    args = (op.bounds, op.lptr, op.lind, op.lval, op.uptr, op.uind, op.uval, op.dinv)
    lookup("cpu", "ilu_sweeps_mm", key)(*args, X, Y)
    assert np.array_equal(X, X0)
    y = np.empty(X.shape[0])
    for c in range(k):
        lookup("cpu", "ilu_sweeps", key)(*args, np.ascontiguousarray(X[:, c]), y)
        assert np.array_equal(Y[:, c], y)
        assert np.all(np.isfinite(y)) and np.abs(y).max() > 0


# ----------------------------------------------------------------- preconditioner blocks
@pytest.mark.parametrize("name,params", [("jacobi", {}), ("ilu0", {}), ("ilu0", {"blocks": 3}),
                                         ("isai", {}), ("isai", {"variant": "general"}),
                                         ("block-jacobi", {"block_size": 2}),
                                         ("block-ilu0", {"block_size": 2}),
                                         ("block-isai", {"block_size": 2}), ("ilut", {})])
def test_apply_block_equals_column_by_column_apply(name, params):
    A = poisson2d(20)
    M = make_preconditioner(name, dtype="float32", **params).setup(A)
    rng = np.random.default_rng(4)
    R = rng.standard_normal((A.shape[0], 5))
    R0 = R.copy()
    Z = np.empty_like(R)
    M.apply_block(R, Z)
    assert np.array_equal(R, R0)
    want = np.column_stack([M.matvec(R[:, c]) for c in range(5)])
    np.testing.assert_allclose(Z, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


# ----------------------------------------------------------------- block solves
CG_CASES = [(p, pc) for p in ("double", "mixed") for pc in ("none", "jacobi", "ilu0")]


@pytest.mark.parametrize("precision,precond", CG_CASES)
@pytest.mark.parametrize("deflation", ["compact", "mask"])
def test_block_cg_columns_equal_single_solves(precision, precond, deflation):
    A = poisson2d(30)
    B = _rhs(A, np.random.default_rng(5))
    B0 = B.copy()
    res = mpsolve.solve(A, B, method="cg", precond=precond, precision=precision, rtol=1e-10,
                        deflation=deflation)
    assert np.array_equal(B, B0)
    assert res.rhs_mode == "block" and res.x.shape == B.shape
    assert res.info == 0 and list(res.column_info) == [0, 0, 0, 0]
    assert res.column_iterations[2] == 0 and np.all(res.x[:, 2] == 0)
    assert len(set(res.column_iterations.tolist())) == 4      # deflation exercised
    for c in range(4):
        one = mpsolve.solve(A, B[:, c], method="cg", precond=precond, precision=precision,
                            rtol=1e-10)
        assert res.column_iterations[c] == one.iterations
        np.testing.assert_allclose(res.x[:, c], one.x, rtol=0,
                                   atol=1e-9 * max(1.0, np.abs(one.x).max()))
        if c != 2:
            assert _certified(A, res.x[:, c], B[:, c]) <= 1e-10
            assert res.column_true_residual[c] <= 1e-10
    assert res.iterations == res.column_iterations.max()
    assert res.true_residual == res.column_true_residual.max()


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("precond", ["none", "ilu0", "jacobi"])
def test_block_gmres_columns_equal_single_solves(side, precond):
    A = convection_diffusion2d(24, peclet=20)
    B = _rhs(A, np.random.default_rng(6))
    res = mpsolve.solve(A, B, method="gmres", precond=precond, precision="mixed", rtol=1e-10,
                        restart=30, side=side)
    assert res.rhs_mode == "block" and res.info == 0
    for c in range(4):
        one = mpsolve.solve(A, B[:, c], method="gmres", precond=precond, precision="mixed",
                            rtol=1e-10, restart=30, side=side)
        assert abs(int(res.column_iterations[c]) - one.iterations) <= 1
        np.testing.assert_allclose(res.x[:, c], one.x, rtol=0,
                                   atol=1e-8 * max(1.0, np.abs(one.x).max()))
        if c != 2:
            assert _certified(A, res.x[:, c], B[:, c]) <= 1e-10


def test_block_cg_forms_jacobi_z_only_for_a_plain_diagonal_apply():
    """Block CG forms ``z = d r`` inside its passes only where ``M.apply`` is the stored
    diagonal (``bsys.pdiag``); a Jacobi subclass with its own ``apply`` keeps its sweep,
    and its block solve still equals its single solves."""
    from mpsolve import Solver
    from mpsolve.multi import _block_plan
    from mpsolve.precond.jacobi import Jacobi

    class Halved(Jacobi):
        def apply(self, r, out):            # z = d r / 2: not the stored diagonal's apply
            super().apply(r, out)
            out *= 0.5

    A = poisson2d(20)
    B = _rhs(A, np.random.default_rng(9))
    got = {}
    for name, M in (("jacobi", "jacobi"), ("ilu0", "ilu0"), ("halved", Halved())):
        s = Solver(A, method="cg", precond=M, precision="mixed", rtol=1e-10)
        got[name] = _block_plan(s, B, None, None)[4].pdiag
        if name == "halved":
            res = s.solve(B)
            assert res.rhs_mode == "block" and res.info == 0
            for c in range(B.shape[1]):
                one = s.solve(B[:, c])
                assert res.column_iterations[c] == one.iterations
                np.testing.assert_allclose(res.x[:, c], one.x, rtol=0,
                                           atol=1e-9 * max(1.0, np.abs(one.x).max()))
    d = 1.0 / A.diagonal()
    assert got["jacobi"] is not None
    np.testing.assert_allclose(got["jacobi"], d, rtol=1e-6)   # FP32 storage under mixed
    assert got["ilu0"] is None and got["halved"] is None


@pytest.mark.parametrize("side", ["left", "right"])
def test_block_gmres_columns_leaving_inside_a_cycle(side):
    """Columns that stop early in a cycle leave the block there (compact deflation: their
    update and restart rules at once, the others' bases copied into a narrower block): the
    iteration counts and solutions are those of the single solves and of ``mask``
    deflation (the columns stay, frozen, to the cycle's end)."""
    A = convection_diffusion2d(24, peclet=20)
    n = A.shape[0]
    rng = np.random.default_rng(8)
    B = np.column_stack([A @ np.ones(n)] + [rng.standard_normal(n) * 10.0 ** -e
                                            for e in range(3)] + [A @ rng.standard_normal(n)])
    kw = dict(method="gmres", precond="ilu0", precision="mixed", rtol=1e-10, restart=40,
              side=side)
    res = mpsolve.solve(A, B, **kw)
    msk = mpsolve.solve(A, B, deflation="mask", **kw)
    assert res.info == 0 and msk.info == 0 and res.rhs_mode == "block"
    assert len(set(res.column_iterations.tolist())) > 1
    for c in range(B.shape[1]):
        one = mpsolve.solve(A, B[:, c], **kw)
        assert abs(int(res.column_iterations[c]) - one.iterations) <= 1
        assert abs(int(msk.column_iterations[c]) - one.iterations) <= 1
        np.testing.assert_allclose(res.x[:, c], one.x, rtol=0,
                                   atol=1e-8 * max(1.0, np.abs(one.x).max()))
        assert _certified(A, res.x[:, c], B[:, c]) <= 1e-10


def test_x0_per_column_and_shared():
    A = poisson2d(20)
    n = A.shape[0]
    rng = np.random.default_rng(7)
    B = A @ rng.standard_normal((n, 3))
    X0 = rng.standard_normal((n, 3))
    X00 = X0.copy()
    res = mpsolve.solve(A, B, X0, method="cg", precond="jacobi", precision="double",
                        rtol=1e-10)
    assert np.array_equal(X0, X00)
    for c in range(3):
        one = mpsolve.solve(A, B[:, c], X0[:, c], method="cg", precond="jacobi",
                            precision="double", rtol=1e-10)
        assert res.column_iterations[c] == one.iterations
        np.testing.assert_allclose(res.x[:, c], one.x, atol=1e-12 * np.abs(one.x).max())
    shared = mpsolve.solve(A, B, X0[:, 0], method="cg", precond="jacobi", precision="double",
                           rtol=1e-10)
    one = mpsolve.solve(A, B[:, 1], X0[:, 0], method="cg", precond="jacobi",
                        precision="double", rtol=1e-10)
    assert shared.column_iterations[1] == one.iterations
    # a start that already solves a column: 0 iterations there
    exact = np.linalg.solve(A.toarray(), B[:, 2])
    X1 = X0.copy()
    X1[:, 2] = exact
    r = mpsolve.solve(A, B, X1, method="cg", precision="double", rtol=1e-8)
    assert r.column_iterations[2] == 0 and r.column_info[2] == 0


def test_no_false_success_and_worst_info():
    """Too few iterations: the columns that did not converge say so (info > 0, true
    residual above the tolerance), the scalar info is theirs."""
    A = poisson2d(30)
    B = _rhs(A, np.random.default_rng(8))
    res = mpsolve.solve(A, B, method="cg", precond="none", precision="double", rtol=1e-10,
                        maxiter=60)
    assert res.info > 0 and not res.converged
    for c in range(4):
        rel = _certified(A, res.x[:, c], B[:, c])
        if res.column_info[c] == 0:
            assert rel <= 1e-10
        else:
            assert res.column_info[c] == 60 and rel > 1e-10
    assert res.column_info[2] == 0
    assert "of 4 right-hand sides converged" in res.status


def test_breakdown_in_one_column_only():
    """CG on an indefinite matrix: a column in its positive eigenspace converges, one that
    meets the negative part breaks down (-12); the scalar info is the breakdown."""
    n = 50
    d = np.linspace(1, 10, n)
    d[-1] = -1.0
    A = sp.diags(d).tocsr()
    B = np.zeros((n, 2))
    B[0, 0] = 1.0                                    # e_0: positive part only
    B[:, 1] = 1.0                                    # touches the negative eigenvalue
    res = mpsolve.solve(A, B, method="cg", precond="none", precision="double", rtol=1e-10,
                        escalate=False)
    assert res.column_info[0] == 0
    assert res.column_info[1] != 0
    assert res.info == res.column_info[1]
    assert _certified(A, res.x[:, 0], B[:, 0]) <= 1e-10


def test_solver_reuses_the_set_up_for_blocks():
    A = poisson2d(24)
    n = A.shape[0]
    s = mpsolve.Solver(A, method="cg", precond="ilu0", precision="mixed", rtol=1e-10)
    rng = np.random.default_rng(9)
    for k in (2, 5):
        B = rng.standard_normal((n, k))
        res = s.solve(B)
        assert res.rhs_mode == "block" and res.info == 0 and res.x.shape == (n, k)
        for c in range(k):
            one = s.solve(B[:, c])
            assert res.column_iterations[c] == one.iterations
            np.testing.assert_allclose(res.x[:, c], one.x, atol=1e-9 * np.abs(one.x).max())
    one = s.solve(B[:, :1])                            # (n, 1): one right-hand side
    assert one.x.shape == (n,) and one.rhs_mode == "" and one.column_info is None


@pytest.mark.parametrize("kw", [dict(method="bicgstab", precond="ilu0", precision="mixed"),
                                dict(method="cg", precond="jacobi", precision="mixed-eft"),
                                dict(method="gmres", precond="ilu0", precision="mixed-cb"),
                                dict(method="cg", precond="jacobi", precision="ir")])
def test_column_path_for_the_other_methods_and_policies(kw):
    """What has no block body runs column by column: each column is exactly the single
    solve (same code), certified in FP64."""
    A = poisson2d(20)
    B = _rhs(A, np.random.default_rng(10))
    res = mpsolve.solve(A, B, rtol=1e-9, **kw)
    assert res.rhs_mode == "by column" and res.info == 0
    for c in range(4):
        one = mpsolve.solve(A, B[:, c], rtol=1e-9, **kw)
        assert res.column_iterations[c] == one.iterations
        assert np.array_equal(res.x[:, c], one.x)
        if c != 2:
            assert _certified(A, res.x[:, c], B[:, c]) <= 1e-9


def test_callback_runs_column_by_column():
    A = poisson2d(12)
    B = np.random.default_rng(11).standard_normal((A.shape[0], 2))
    seen = []
    res = mpsolve.solve(A, B, method="cg", precond="jacobi", precision="double", rtol=1e-8,
                        callback=lambda xk: seen.append(xk.shape))
    assert res.rhs_mode == "by column" and res.info == 0
    assert len(seen) == res.column_iterations.sum()


def test_dtypes_as_single_rhs():
    A = poisson2d(16)
    n = A.shape[0]
    B = np.random.default_rng(12).standard_normal((n, 3))
    r32 = mpsolve.solve(A.astype(np.float32), B.astype(np.float32), method="cg",
                        precond="jacobi", rtol=1e-5)
    one = mpsolve.solve(A.astype(np.float32), B[:, 0].astype(np.float32), method="cg",
                        precond="jacobi", rtol=1e-5)
    assert r32.x.dtype == one.x.dtype == np.float32 and r32.info == 0
    assert r32.precision == one.precision
    Bi = np.arange(3 * n).reshape(n, 3) % 7                     # integers: as FP64
    ri = mpsolve.solve(A, Bi, method="cg", precond="jacobi", precision="double", rtol=1e-10)
    assert ri.x.dtype == np.float64 and ri.rhs_mode == "block" and ri.info == 0
    with pytest.raises(TypeError, match="b has dtype"):
        mpsolve.solve(A, np.zeros((n, 2), dtype="U1"), method="cg")


def test_auto_with_several_right_hand_sides():
    A = poisson2d(20)
    B = _rhs(A, np.random.default_rng(13))
    res = mpsolve.solve(A, B, rtol=1e-9)
    assert res.info == 0 and res.x.shape == B.shape
    for c in (0, 1, 3):
        assert _certified(A, res.x[:, c], B[:, c]) <= 1e-9


# ----------------------------------------------------------------- bad input
def test_bad_shapes_are_refused_naming_the_argument():
    A = poisson2d(10)
    n = A.shape[0]
    with pytest.raises(ValueError, match=r"b has shape \(99, 3\)"):
        mpsolve.solve(A, np.zeros((99, 3)), method="cg")
    with pytest.raises(ValueError, match=r"x0 has shape"):
        mpsolve.solve(A, np.ones((n, 3)), np.zeros((n, 2)), method="cg")
    with pytest.raises(ValueError, match="b contains 1 NaN"):
        B = np.ones((n, 2))
        B[3, 1] = np.nan
        mpsolve.solve(A, B, method="cg")
    with pytest.raises(ValueError, match="deflation"):
        mpsolve.solve(A, np.ones((n, 2)), method="cg", deflation="drop")
    with pytest.raises(ValueError, match="b has shape"):
        mpsolve.Solver(A, method="cg").solve(np.ones((n, 2, 2)))


@pytest.mark.parametrize("fn", ["cg", "gmres", "bicgstab"])
def test_scipy_style_functions_refuse_several_rhs_and_say_what_to_use(fn):
    A = poisson2d(10)
    n = A.shape[0]
    f = getattr(mpsolve, fn)
    with pytest.raises(ValueError) as err:
        f(A, np.ones((n, 3)))
    msg = str(err.value)
    assert "b has shape" in msg and "mpsolve.solve" in msg and "Solver" in msg
    x, info = f(A, np.ones((n, 1)), rtol=1e-8)            # (n, 1): SciPy accepts it
    assert info == 0 and x.shape == (n,)


# ----------------------------------------------------------------- PETSc
def test_petsc_mat_apply_and_mat_solve():
    PETSc = pytest.importorskip("petsc4py.PETSc")
    import mpsolve.petsc as mp

    A = convection_diffusion2d(30, peclet=20)
    n = A.shape[0]
    if mp.scalar_dtype().kind == "c":
        pytest.skip("complex PETSc build")
    P = PETSc.Mat().createAIJ(size=A.shape, csr=(A.indptr.astype(PETSc.IntType),
                                                 A.indices.astype(PETSc.IntType), A.data),
                              comm=PETSc.COMM_SELF)
    P.assemble()
    ctx = mp.ILU0(dtype="float64")
    ksp = PETSc.KSP().create(PETSc.COMM_SELF)
    ksp.setOperators(P)
    ksp.setType("gmres")
    ksp.setTolerances(rtol=1e-10, atol=0.0, max_it=2000)
    pc = ksp.getPC()
    pc.setType("python")
    pc.setPythonContext(ctx)
    ksp.setUp()
    calls = []
    block = ctx.M.apply_block
    ctx.M.apply_block = lambda R, Z: (calls.append(R.shape), block(R, Z))
    rng = np.random.default_rng(14)
    R = rng.standard_normal((n, 4))
    got = petsc_mat_apply(pc, R)
    assert calls == [(n, 4)]                                   # one sweep for 4 columns
    want = np.column_stack([ctx.M.matvec(R[:, j]) for j in range(4)])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())
    # KSPMatSolve with the python PC: each column as the single KSPSolve
    Bm = PETSc.Mat().createDense((n, 4), array=np.asfortranarray(A @ R), comm=PETSc.COMM_SELF)
    Bm.assemble()
    Xm = PETSc.Mat().createDense((n, 4), comm=PETSc.COMM_SELF)
    Xm.setUp()
    Xm.assemble()
    ksp.matSolve(Bm, Xm)
    got = Xm.getDenseArray().copy()
    for j in range(4):
        b, x = P.createVecs()
        b.array[:] = (A @ R)[:, j]
        ksp.solve(b, x)
        np.testing.assert_allclose(got[:, j], x.array, atol=1e-7 * np.abs(x.array).max())
        assert np.linalg.norm(A @ got[:, j] - (A @ R)[:, j]) <= 1e-9 * np.linalg.norm(A @ R[:, j])


def test_complex_right_hand_sides_run_column_by_column():
    A = poisson2d(12)
    n = A.shape[0]
    rng = np.random.default_rng(15)
    B = rng.standard_normal((n, 2)) + 1j * rng.standard_normal((n, 2))
    res = mpsolve.solve(A, B, method="cg", precond="jacobi", precision="double", rtol=1e-10)
    assert res.rhs_mode == "by column" and res.info == 0 and res.x.dtype == np.complex128
    for c in range(2):
        one = mpsolve.solve(A, B[:, c], method="cg", precond="jacobi", precision="double",
                            rtol=1e-10)
        np.testing.assert_allclose(res.x[:, c], one.x, atol=1e-12 * np.abs(one.x).max())


def test_a_three_dimensional_b_is_refused_naming_both_shapes():
    A = sp.csr_matrix(poisson2d(6))
    with pytest.raises(ValueError, match=r"\(n,\) or \(n, 1\).*\(n, k\)"):
        mpsolve.solve(A, np.ones((A.shape[0], 2, 2)), method="cg")


def test_auto_with_several_right_hand_sides_falls_back_by_column():
    """A symmetric indefinite matrix with a positive diagonal: auto's first choice, CG,
    breaks down.  With one right-hand side auto moves on to GMRES; with three, the
    block solve of the Solver (which chooses once) broke down and solve returned info -12.
    Now each column it left is solved by the single right-hand side's auto from there --
    and a caller's maxiter still bounds every column.  (With auto's own preconditioner the
    Solver itself leaves CG on its breakdown -- A is then shown indefinite -- and the block
    solve converges; with the caller's pinned Jacobi it keeps CG, and the columns fall
    back.)"""
    A = sp.csr_matrix(poisson2d(16) - 0.5 * sp.eye(256))
    X = np.stack([np.ones(256), np.cos(np.arange(256.0)), np.linspace(-1, 1, 256)], axis=1)
    B = A @ X
    one = mpsolve.solve(A, B[:, 0], rtol=1e-8)
    assert one.converged and one.method == "gmres"
    res = mpsolve.solve(A, B, rtol=1e-8)
    assert res.converged and res.rhs_mode == "block" and res.method == "gmres"
    res = mpsolve.solve(A, B, rtol=1e-8, precond="jacobi")
    assert res.converged and res.rhs_mode == "block, then by column"
    assert np.array_equal(res.column_info, [0, 0, 0])
    rel = np.linalg.norm(B - A @ res.x, axis=0) / np.linalg.norm(B, axis=0)
    assert rel.max() <= 1e-8 and np.allclose(res.column_true_residual, rel, rtol=1e-6)
    assert any(c.reason.startswith("column 2, by itself") and c.outcome == "converged"
               for c in res.choices)
    for cap in (3, 12):
        capped = mpsolve.solve(A, B, rtol=1e-8, maxiter=cap, precond="jacobi")
        assert capped.column_iterations.max() <= cap
        assert capped.converged == (capped.column_info == 0).all()
    # a matrix the block solves is returned as before: no per-column pass
    P = poisson2d(16)
    assert mpsolve.solve(P, P @ X, rtol=1e-8).rhs_mode == "block"


@pytest.mark.parametrize("scale", [1e-170, 1e-150, 1e-60, 1e150])
@pytest.mark.parametrize("method", ["cg", "gmres"])
def test_a_column_far_from_norm_one_is_solved_as_alone(scale, method):
    """A column of norm 1e-170 squared to 0 in the block's column dots: x = 0, info 0,
    true residual 0 -- a false success; one of 1e-150 met CG's curvature test at p.Ap ~
    1e-300.  Such a B goes column by column (each scaled as the single path scales it):
    every column converges, certified as the returned x's residual."""
    A = poisson2d(12).tocsr()
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    B = np.column_stack([b, scale * b])
    r = mpsolve.solve(A, B, method=method, precond="jacobi", rtol=1e-8)
    assert r.info == 0 and list(r.column_info) == [0, 0]
    s = 2.0 ** round(-np.log2(scale))                 # the residual in range, exactly
    for c in range(2):
        res = np.linalg.norm(s * B[:, c] - A @ (s * r.x[:, c]))
        assert res <= 1e-8 * np.linalg.norm(s * B[:, c]) * 1.001


def test_complex_starts_operators_and_lists_in_block_solves():
    """A complex x0 with real A and B makes the block solve complex (it was cast to real
    with a ComplexWarning); a real LinearOperator with a complex B solves in complex (it
    raised); a float32 A with a complex64 B answers in complex64; a list of columns is
    taken by Solver.solve as by solve; a real Solver refuses a complex x0 naming it."""
    import scipy.sparse.linalg as spla

    A = poisson2d(10).tocsr()
    n = A.shape[0]
    B = np.random.default_rng(1).standard_normal((n, 2))
    X0 = (1 + 1j) * np.ones((n, 2))
    r = mpsolve.solve(A, B, x0=X0, method="cg", precond="jacobi", rtol=1e-10)
    assert r.x.dtype == np.complex128 and r.info == 0
    r = mpsolve.solve(spla.aslinearoperator(A), (1 + 1j) * B, method="gmres", precond=None,
                      rtol=1e-10)
    assert r.x.dtype == np.complex128 and r.info == 0
    assert np.linalg.norm((1 + 1j) * B - A @ r.x) <= 1e-9 * np.linalg.norm(B)
    r = mpsolve.solve(A.astype(np.float32), B.astype(np.complex64), rtol=1e-5)
    assert r.x.dtype == np.complex64
    s = mpsolve.Solver(A, method="cg", precond="jacobi", rtol=1e-10)
    assert s.solve(B.tolist()).x.shape == (n, 2)
    with pytest.raises(TypeError, match="x0 is complex"):
        s.solve(B, x0=X0)


def test_a_block_handed_to_eft_below_fp64s_floor_converges():
    """rtol = 1e-16 with precision='double': the block's columns, at FP64's floor, go on
    by eft from the block's x -- whose residual is already under the working floor of
    10 eps ||b||, so the first correction's target asked for nothing and the step read as
    stagnation (info 1); each column alone converged.  The floor is now the start's."""
    A = poisson2d(12).tocsr()
    bb = A @ np.ones(A.shape[0])
    r = mpsolve.solve(A, np.column_stack([bb, bb]), method="cg", precond="jacobi",
                      precision="double", rtol=1e-16)
    assert list(r.column_info) == [0, 0]
    one = mpsolve.solve(A, bb, method="cg", precond="jacobi", precision="double", rtol=1e-16)
    near = mpsolve.solve(A, bb, x0=r.x[:, 0] + 1e-15, method="cg", precond="jacobi",
                         precision="double", rtol=1e-16)
    assert one.info == 0 and near.info == 0 and not near.at_floor


@pytest.mark.parametrize("rtol", [1e-6, 2e-7])
def test_float32_columns_come_back_float32_and_are_judged_so(rtol):
    """``solve(A, B)`` on float32 data returns X in float32, as each column's single solve
    returns x (the block path returned float64), and a column is called converged only
    where its float32 answer meets the tolerance (one the rounding takes over it goes on
    by the single path); at 2e-7 some columns cannot, and say so."""
    from mpsolve.matrices import generate
    A = sp.csr_matrix(generate("poisson3d:5")).astype(np.float32)
    B = np.random.default_rng(0).integers(1, 5, (A.shape[0], 40)).astype(np.float32)
    r = mpsolve.solve(A, B, method="cg", precond="jacobi", rtol=rtol, precision="double")
    assert r.x.dtype == np.float32
    res = np.linalg.norm(B - A.astype(np.float64) @ r.x.astype(np.float64), axis=0) / \
        np.linalg.norm(B.astype(np.float64), axis=0)
    ok = r.column_info == 0
    assert ok.sum() >= (40 if rtol == 1e-6 else 10)
    assert np.all(res[ok] <= rtol)
    assert np.all(r.column_info[~ok] > 0)
    single = mpsolve.solve(A, B[:, 0], method="cg", precond="jacobi", rtol=rtol,
                           precision="double")
    assert single.x.dtype == np.float32 and (single.info == 0) == ok[0]


@pytest.mark.parametrize("given_x0", [False, True])
def test_a_callback_stop_stops_every_column(given_x0):
    """Several right-hand sides with a callback run column by column; a callback that
    returns True stops the solve -- the columns after it are not run (they kept going,
    each to convergence): ``info`` -15 on each, their start returned, and its residual."""
    from mpsolve.matrices import poisson2d
    A = sp.csr_matrix(poisson2d(12))
    rng = np.random.default_rng(0)
    B = rng.standard_normal((A.shape[0], 3))
    X0 = rng.standard_normal(B.shape) if given_x0 else None
    calls = []

    def stop(xk):
        calls.append(1)
        return len(calls) == 2

    r = mpsolve.solve(A, B, X0, method="cg", precond="jacobi", rtol=1e-8, callback=stop)
    assert len(calls) == 2 and r.info == -15
    assert list(r.column_info) == [-15, -15, -15]
    assert list(r.column_iterations[1:]) == [0, 0]
    start = np.zeros_like(B) if X0 is None else X0
    assert np.array_equal(r.x[:, 1:], start[:, 1:])
    want = np.linalg.norm(B - A @ start, axis=0) / np.linalg.norm(B, axis=0)
    np.testing.assert_allclose(r.column_true_residual[1:], want[1:], rtol=1e-12)
    # a column left unrun whose start meets the tolerance (b = 0, x = 0) has converged:
    # info 0, as a single solve stopped by its callback at a solution reports
    calls.clear()
    Z = np.column_stack([B[:, 0], np.zeros(A.shape[0]), B[:, 2]])
    r = mpsolve.solve(A, Z, method="cg", precond="jacobi", rtol=1e-8, callback=stop)
    assert list(r.column_info) == [-15, 0, -15] and r.info == -15
    assert not r.x[:, 1].any()
    assert mpsolve.solve(A, Z[:, 1], method="cg", callback=lambda x: True).info == 0


def _tridiag(n):
    return sp.diags([-np.ones(n - 1), 2.5 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1],
                    format="csr")


@pytest.mark.parametrize("scale,method", [(1e160, "gmres"), (1e300, "cg"), (1e-160, "gmres")])
def test_the_block_path_solves_an_extremely_scaled_a_as_the_single_path_does(scale, method):
    """Block GMRES's unguarded norms read M r ~ 1e-160 as zero (-13, "singular") or
    overflowed (-14), block CG's p.Ap as a curvature breakdown (-12), where each column
    alone converges: a column the block leaves with a breakdown goes to the single path."""
    A = scale * _tridiag(300)
    B = np.column_stack([np.ones(300), np.cos(np.arange(300))])
    r = mpsolve.solve(A, B, method=method, precond="jacobi", rtol=1e-8)
    assert list(r.column_info) == [0, 0]
    for c in range(2):
        assert np.linalg.norm(B[:, c] - A @ r.x[:, c]) <= 1e-8 * np.linalg.norm(B[:, c])


def test_column_info_counts_every_iteration_of_the_column():
    """info > 0 is the iteration count, as a single solve's: a column the block hands to the
    single path (here at the accuracy floor) counted only the single path's iterations."""
    A = poisson2d(30)
    B = np.random.default_rng(0).standard_normal((A.shape[0], 2))
    r = mpsolve.solve(A, B, method="cg", precond="jacobi", precision="double", rtol=1e-17)
    assert np.all(r.column_info > 0)
    np.testing.assert_array_equal(r.column_info, r.column_iterations)
    assert r.at_floor and r.at_floor == mpsolve.solve(A, B[:, 0], method="cg",
                                                      precond="jacobi", precision="double",
                                                      rtol=1e-17).at_floor
    r = mpsolve.solve(A, B, rtol=1e-17)                       # auto: its fallbacks too
    np.testing.assert_array_equal(r.column_info, r.column_iterations)


def test_auto_with_a_start_of_shape_n_by_1_for_every_column():
    """x0 of shape (n, 1) is one start for every column: auto's column fallback indexed its
    column j (IndexError) where the block solve had taken it."""
    n = 50
    Z = sp.diags([np.ones(n - 1), np.r_[0.0, 2 * np.ones(n - 1)], np.ones(n - 1)], [-1, 0, 1],
                 format="csr")
    B = np.ones((n, 3))
    r1 = mpsolve.solve(Z, B, x0=np.zeros((n, 1)), method="auto", precond="jacobi")
    r2 = mpsolve.solve(Z, B, x0=np.zeros(n), method="auto", precond="jacobi")
    assert r1.info == r2.info
    np.testing.assert_array_equal(r1.x, r2.x)


def test_auto_with_maxiter_solves_the_columns_that_the_single_solve_solves():
    """With a caller's maxiter the block solve's choice gets half of it, as solve(A, b)'s
    first candidate, and the column fallbacks go on with the next candidates (the block's
    choice is not run again): each column ends as solve(A, b_c) does."""
    from mpsolve.matrices import jump3d

    A = jump3d(8)
    B = np.random.default_rng(0).standard_normal((A.shape[0], 2))
    r = mpsolve.solve(A, B, rtol=1e-10, maxiter=15)
    singles = [mpsolve.solve(A, B[:, c], rtol=1e-10, maxiter=15) for c in range(2)]
    assert [s.info for s in singles] == [0, 0]
    assert list(r.column_info) == [0, 0]
    assert r.column_iterations.max() <= 15


def test_block_result_labels_and_messages():
    """rhs_mode says 'by column' where no block ran; a sparse b or x0 is refused by name
    (was "holds Python objects", or "x0 has shape (n, k), but b has shape (n, k)"); a 1-D
    x0 with one Inf says one, not k; cg with a list of lists points to solve."""
    A = poisson2d(8)
    n = A.shape[0]
    B = np.ones((n, 3))
    r = mpsolve.solve(A + 1j * sp.eye(n), B, rtol=1e-8)        # complex: column by column
    assert r.rhs_mode.startswith("by column")
    with pytest.raises(TypeError, match="b is a SciPy sparse"):
        mpsolve.solve(A, sp.csr_matrix(B), method="cg")
    with pytest.raises(TypeError, match="x0 is a SciPy sparse"):
        mpsolve.solve(A, B, x0=sp.csr_matrix(B), method="cg")
    x0 = np.zeros(n)
    x0[3] = np.inf
    with pytest.raises(ValueError, match="x0 contains 1 NaN"):
        mpsolve.solve(A, B, x0=x0, method="cg")
    with pytest.raises(ValueError, match="mpsolve.solve"):
        mpsolve.cg(A, B.tolist())


def test_a_zero_column_under_an_infinite_rtol_is_quiet():
    """``rtol=inf`` with a zero column: its tolerance is 0 (``b = 0`` has the solution 0),
    not ``inf * 0`` (a NaN and NumPy's 'invalid value' warning)."""
    import warnings

    A = poisson2d(10).tocsr()
    B = A @ np.ones((100, 3))
    B[:, 1] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = mpsolve.Solver(A, method="cg", precond="jacobi").solve(B, rtol=np.inf)
    assert list(res.column_info) == [0, 0, 0] and np.all(res.x[:, 1] == 0)


@pytest.mark.parametrize("precision", ["double", "mixed"])
def test_block_gmres_stops_at_its_floor_as_the_single_path(precision):
    """``rtol=0``: no cycle can meet the tolerance, and block GMRES returned only for a
    claimed convergence -- 45000 cycles (10 n) for two columns of a 225-unknown problem,
    ``at_floor`` False.  Its columns now stop after the single body's stagnation count
    of cycles without a new low (then the single path judges, as for any stagnation)."""
    A = poisson2d(15).tocsr()
    B = np.random.default_rng(0).random((225, 2))
    s = mpsolve.Solver(A, method="gmres", precond="ilu0", precision=precision, rtol=0.0)
    r = s.solve(B)
    from mpsolve.krylov.gmres import STALL_CYCLES

    assert np.all(r.column_info > 0) and np.all(r.column_info <= 3 * STALL_CYCLES)
    assert r.at_floor
    assert np.all(np.linalg.norm(B - A @ r.x, axis=0) <= 1e-13 * np.linalg.norm(B, axis=0))


@pytest.mark.parametrize("maxiter", [6, 20])
def test_block_cg_breakdown_is_the_single_solves_breakdown(maxiter):
    """A column that broke down in the block ran the single path on from the block's x
    with the budget left: with ``maxiter=6`` that ran out first and every column said
    "maxiter" (6) on an indefinite A, with 20 it broke down after 6/6/8 iterations where
    the single solves do after 3/3/4.  The single path now runs from the column's start."""
    A = (poisson2d(12) - 0.7 * sp.eye(144)).tocsr()
    B = np.random.default_rng(11).standard_normal((144, 3))
    s = mpsolve.Solver(A, method="cg", precond=None, precision="double", rtol=1e-10,
                       maxiter=maxiter)
    r = s.solve(B)
    single = [s.solve(np.ascontiguousarray(B[:, c])) for c in range(3)]
    assert [q.info for q in single] == [-12] * 3
    assert r.column_info.tolist() == [q.info for q in single]
    assert r.column_iterations.tolist() == [q.iterations for q in single]
    for c in range(3):
        np.testing.assert_array_equal(r.x[:, c], single[c].x)


@pytest.mark.parametrize("maxiter", [59, 61])
def test_auto_gmres_block_columns_get_the_whole_budget(maxiter):
    """auto's GMRES counts inner iterations: ``maxiter=59`` gave the block the one whole
    cycle (30) that fits and the columns stopped there, where separate solves run 59.  The
    rest now goes to the single path from where the block left each column."""
    A = (poisson2d(20) - 0.5 * sp.eye(400)).tocsr()
    B = np.random.default_rng(0).random((400, 2))
    s = mpsolve.Solver(A, method="gmres", rtol=1e-10, maxiter=maxiter)
    r = s.solve(B)
    single = [s.solve(np.ascontiguousarray(B[:, c])) for c in range(2)]
    assert r.rhs_mode == "block"
    assert r.column_iterations.tolist() == [q.iterations for q in single] == [maxiter] * 2
    assert r.column_info.tolist() == [q.info for q in single]


def test_auto_solver_leaving_cg_in_a_block_says_so_and_counts_alike():
    """auto's Solver chose CG, whose block broke down (A indefinite): the stragglers' single
    path switched the Solver to GMRES on the first column, the second ran GMRES alone --
    identical columns reported 114 and 113 iterations, and the status said only "block
    CG".  Each column now counts as the single solve does, and the status names the
    switch."""
    A = (poisson2d(20) - 0.5 * sp.eye(400)).tocsr()
    b = A @ np.random.default_rng(9).random(400)
    s = mpsolve.Solver(A, rtol=1e-8)
    r = s.solve(np.column_stack([b, b]))
    one = mpsolve.Solver(A, rtol=1e-8).solve(b)
    assert s.method == "gmres" and "now runs gmres" in one.status
    assert r.column_iterations.tolist() == [one.iterations] * 2
    assert "this Solver now runs gmres, which solved column(s) [0, 1]" in r.status
    assert np.all(r.column_info == 0)


def test_the_columns_go_together_where_that_is_measured_to_pay(monkeypatch):
    """By default (``MPSOLVE_BLOCK`` unset) a CPU solve iterates the columns together only
    for CG from ``BLOCK_CG_MIN_N`` unknowns: below, four separate solves (compiled whole
    loops, two threads) took a fifth to a half of the block's time.  ``0`` never, ``1``
    wherever the block bodies apply; the answers are the same either way."""
    from mpsolve.multi import BLOCK_CG_MIN_N, together

    monkeypatch.delenv("MPSOLVE_BLOCK")
    assert together("cg", BLOCK_CG_MIN_N, "cpu") and not together("cg", BLOCK_CG_MIN_N - 1, "cpu")
    assert not together("gmres", 10**8, "cpu") and together("gmres", 10, "gpu")
    A = poisson2d(12).tocsr()
    B = np.random.default_rng(1).random((144, 3))
    by_col = mpsolve.solve(A, B, method="cg", precond="jacobi", rtol=1e-10)
    assert by_col.rhs_mode == "by column"
    monkeypatch.setenv("MPSOLVE_BLOCK", "1")
    block = mpsolve.solve(A, B, method="cg", precond="jacobi", rtol=1e-10)
    assert block.rhs_mode == "block"
    assert block.column_iterations.tolist() == by_col.column_iterations.tolist()
    np.testing.assert_allclose(block.x, by_col.x, rtol=1e-8)
    monkeypatch.setenv("MPSOLVE_BLOCK", "0")
    assert mpsolve.solve(A, B, method="cg", precond="jacobi").rhs_mode == "by column"


def _auto_gmres_solver():
    A = sp.csr_matrix(convection_diffusion2d(14, 50.0))
    A[7, 7] = 0.0
    A.eliminate_zeros()
    s = mpsolve.Solver(A, precond="isai", rtol=1e-15, maxiter=20)
    assert s.method == "gmres" and s._restart_of_inner
    return A, s


def test_auto_gmres_block_budget_spent_in_whole_cycles_runs_no_straggler():
    """A column that used its whole budget in the block's cycles and then stagnated (rtol
    0) was handed to the single path with ``maxiter=0``: ValueError."""
    A, s = _auto_gmres_solver()
    n = A.shape[0]
    b = np.ones(n)
    B = np.column_stack([b, 2 * b + 1, np.arange(n, dtype=float)])
    for maxiter in (60, 630):
        r = s.solve(B, maxiter=maxiter, rtol=0.0)
        assert r.rhs_mode == "block" and np.all(r.column_iterations <= maxiter)
        assert np.all(r.column_info > 0)


def test_auto_gmres_columns_solved_one_by_one_get_the_whole_budget():
    """A column far from norm 1 sends every column to the single path: they got the whole
    cycles' iterations (30 of ``maxiter=59``), a single solve 59."""
    A, s = _auto_gmres_solver()
    b = np.ones(A.shape[0])
    r = s.solve(np.column_stack([b * 1e-200, 2 * b + 1]), maxiter=59)
    one = s.solve(b * 1e-200, maxiter=59)
    assert r.column_iterations.tolist() == [one.iterations, one.iterations] == [59, 59]


def test_a_bad_mpsolve_block_setting_is_named(monkeypatch):
    monkeypatch.setenv("MPSOLVE_BLOCK", "yes")
    A = poisson2d(6).tocsr()
    with pytest.raises(ValueError, match="MPSOLVE_BLOCK='yes'"):
        mpsolve.solve(A, np.ones((36, 2)), method="cg")
