"""The compiled Krylov loops (kernels/cpu/loops.py) against the Python bodies.

For the same inputs the loop must give what the body's Python loop gives, bit for bit:
the returned ``x``, the iteration count, ``info`` and the residual history.  Each case is
solved twice, with ``MPSOLVE_FUSED=0`` (the Python loop) and ``MPSOLVE_FUSED=1`` (the
compiled loop wherever it exists), and the two results compared with ``==`` on the bits;
each case also checks that the compiled loop was the one that ran.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import mpsolve
from mpsolve._system import compiled_loop, make_problem, make_system
from mpsolve.kernels import lookup
from mpsolve.matrices import poisson2d
from mpsolve.precision import as_precision
from mpsolve.precond import ILU0, ISAI, BlockJacobi, Jacobi


def _spd_random(n, seed):
    rng = np.random.default_rng(seed)
    B = sp.random(n, n, density=4.0 / n, random_state=rng, format="csr")
    S = (B + B.T).tocsr()
    d = np.abs(S).sum(axis=1).A1 + rng.uniform(0.1, 1.0, n)
    return (S + sp.diags(d)).tocsr()


def _indefinite(n):
    A = poisson2d(int(np.sqrt(n))).tolil()
    A[3, 3] = -50.0                      # a negative curvature direction: CG's -12
    return A.tocsr()


_A = {
    "poisson": poisson2d(12),
    "spd-random": _spd_random(150, 1),
    "poisson-f32": poisson2d(10).astype(np.float32),
    "huge": poisson2d(8) * 1e300,        # p.Ap overflows: alpha from scaled vectors
    "tiny": poisson2d(8) * 1e-300,       # p.Ap subnormal: the same path
    "negative": -poisson2d(11),          # negative definite (SciPy's CG solves it): p.Ap < 0
}

_M = {
    "none": lambda: None,
    "jacobi": lambda: Jacobi(),
    "jacobi64": lambda: Jacobi(dtype="float64"),
    "ilu0": lambda: ILU0(),
    "ilu0x2": lambda: ILU0(blocks=2),                 # two diagonal blocks, one pass
    "isai-spd": lambda: ISAI(variant="spd"),          # two CSR products, FP32 row sums
    "isai-general": lambda: ISAI(variant="general", accumulate="float64"),
    "matrix": "matrix",                               # M as a sparse matrix
    "matrix-fsai": "matrix-fsai",                     # G^T G as one sparse matrix
}


def _user_matrix(A, M):
    """The sparse-matrix ``M`` cases: ``diag(A)^-1``, or the FSAI ``G^T G`` of ``A`` as one
    symmetric CSR matrix (one CSR product in the loop: what a ``general`` ISAI gives, which
    CG refuses on these symmetric matrices)."""
    if M == "matrix":
        return sp.diags(1.0 / A.diagonal()).tocsr()
    return ISAI(variant="spd", dtype="float64").setup(A).to_sparse()

_POLICIES = ("double", "single", "mixed", "eft", "mixed-eft")


def _solve(monkeypatch, fused, A, b, M, policy, **kw):
    monkeypatch.setenv("MPSOLVE_FUSED", fused)
    M = _user_matrix(A, M) if isinstance(M, str) else M()
    return mpsolve.solve(A, b, method="cg", precond=M, precision=policy, escalate=False,
                         **kw)


def _same(r0, r1):
    assert r1.iterations == r0.iterations
    assert r1.info == r0.info
    assert r1.x.dtype == r0.x.dtype
    assert np.array_equal(r1.x.view(np.uint8), r0.x.view(np.uint8)), \
        f"x differs in {np.sum(r1.x != r0.x)} entries"
    assert np.array_equal(r1.residuals, r0.residuals, equal_nan=True)
    assert r1.true_residual == r0.true_residual or (np.isnan(r1.true_residual)
                                                    and np.isnan(r0.true_residual))


def _loop_runs(A, b, M, policy, op="cg_loop", side="left"):
    """The compiled loop ``op`` exists for this solve's System."""
    M = _user_matrix(A, M) if isinstance(M, str) else M()
    problem = make_problem(A, b, M=M, precond_side=side)
    sys = make_system(problem, as_precision(policy, problem.data_dtype))
    return compiled_loop(sys, op) is not None


def _cases():
    for an in _A:
        for mn in _M:
            for pol in _POLICIES:
                if an in ("huge", "tiny") and (pol in ("single", "mixed", "mixed-eft")
                                               or mn not in ("none", "jacobi64")):
                    continue                 # FP32 copies of these do not fit
                if mn == "isai-general":
                    continue                 # not symmetric: CG refuses it ("matrix-fsai")
                if an == "negative" and mn in ("isai-spd", "matrix-fsai"):
                    continue                 # FSAI needs a positive definite A
                yield pytest.param(an, mn, pol, id=f"{an}-{mn}-{pol}")


@pytest.mark.parametrize("an,mn,pol", list(_cases()))
def test_cg_loop_bit_for_bit(monkeypatch, an, mn, pol):
    A = _A[an]
    n = A.shape[0]
    b = A @ np.linspace(1.0, 2.0, n).astype(A.dtype)
    r0 = _solve(monkeypatch, "0", A, b, _M[mn], pol, rtol=1e-9)
    r1 = _solve(monkeypatch, "1", A, b, _M[mn], pol, rtol=1e-9)
    assert _loop_runs(A, b, _M[mn], pol)
    assert r0.iterations > 0
    _same(r0, r1)


@pytest.mark.parametrize("mn", ["none", "jacobi", "ilu0", "isai-spd"])
def test_cg_loop_breakdown_maxiter_and_zero_iterations(monkeypatch, mn):
    """Indefinite A (CG's -12), maxiter reached (info > 0), x0 the solution (0 iterations)."""
    A = _indefinite(144)
    b = A @ np.ones(144)
    rs = [_solve(monkeypatch, f, A, b, _M[mn], "double", rtol=1e-10) for f in "01"]
    _same(*rs)
    P = poisson2d(12)
    bp = P @ np.ones(144)
    rs = [_solve(monkeypatch, f, P, bp, _M[mn], "double", rtol=1e-12, maxiter=5) for f in "01"]
    assert rs[0].info == 5
    _same(*rs)
    x = np.linalg.solve(P.toarray(), bp)
    rs = [_solve(monkeypatch, f, P, bp, _M[mn], "double", x0=x, rtol=1e-8) for f in "01"]
    assert rs[0].iterations == 0 and rs[0].info == 0
    _same(*rs)


def test_cg_loop_breakdown_code():
    A = _indefinite(144)
    res = mpsolve.solve(A, A @ np.ones(144), method="cg", precond=None, precision="double",
                        escalate=False, rtol=1e-10)
    assert res.info == -12


def test_cg_loop_runs_on_in_chunks(monkeypatch):
    """More iterations than one call's history buffer: the loop goes on from its state."""
    import mpsolve._system as system

    monkeypatch.setattr(system, "LOOP_CHUNK", 7)
    A = poisson2d(16)
    b = A @ np.ones(256)
    rs = [_solve(monkeypatch, f, A, b, _M["none"], "double", rtol=1e-10) for f in "01"]
    assert rs[0].iterations > 20
    _same(*rs)


def test_auto_setting_uses_the_loop_only_below_the_parallel_size(monkeypatch):
    """``MPSOLVE_FUSED`` unset: the loop for a small system, the Python loop where a kernel
    would run its parallel form; 0: never."""
    from mpsolve.kernels.registry import launch_plan

    monkeypatch.delenv("MPSOLVE_FUSED", raising=False)
    A = poisson2d(10)
    b = A @ np.ones(100)
    assert _loop_runs(A, b, _M["jacobi"], "mixed")
    big = np.array([0, 1 << 20])
    monkeypatch.setenv("MPSOLVE_TEAM", "0")          # (the two-thread loops: test_team.py)
    assert launch_plan("cpu", "cg_loop", 1 << 20, (big, None, None, None, "acc64", True),
                       None, np.float64) is None
    monkeypatch.delenv("MPSOLVE_TEAM")
    monkeypatch.setenv("MPSOLVE_FUSED", "0")
    assert not _loop_runs(A, b, _M["jacobi"], "mixed")


def test_no_loop_with_a_callback_or_unfusable_preconditioner(monkeypatch):
    monkeypatch.setenv("MPSOLVE_FUSED", "1")
    A = poisson2d(10)
    b = A @ np.ones(100)
    seen = []
    res = mpsolve.solve(A, b, method="cg", precond="jacobi", callback=seen.append,
                        precision="double")
    assert len(seen) == res.iterations > 0        # the Python body ran: it called back
    assert not _loop_runs(A, b, lambda: BlockJacobi(), "double")     # no fusable form
    assert _loop_runs(A, b, lambda: ILU0(blocks=2), "double")    # two blocks: one pass


@pytest.mark.parametrize("mode", ["native", "compensated"])
@pytest.mark.parametrize("mn", ["none", "jacobi", "ilu0", "isai-spd", "isai-general"])
def test_cg_loop_kernel_matches_reference(mode, mn):
    """The cpu kernel against the reference device's composition of its own ops, on the
    same packed arguments: iteration counts and flags equal, x and histories close."""
    A = _spd_random(120, 3)
    n = A.shape[0]
    b = A @ np.ones(n)
    M = _M[mn]()
    problem = make_problem(A, b, M=M)
    sys = make_system(problem, as_precision("double", problem.data_dtype))
    Aop = sys.A_op
    desc = None if M is None else M.fusable()
    from mpsolve.kernels.registry import launch_plan

    out = []
    for dev in ("cpu", "reference"):
        plan = launch_plan(dev, "cg_loop", n, (Aop.parts, Aop.indptr, Aop.indices, Aop.data,
                                               "acc64", mode == "native"),
                           desc, np.float64 if M is None else M.storage_dtype, True)
        Ak, amode, prog, P, pmode = plan
        x = np.zeros(n)
        r = b.copy()
        q, p, t = np.empty(n), np.empty(n), np.empty(n)
        z = r if prog == 0 else np.empty(n)
        hist = np.zeros(500)
        state = np.zeros(3)
        c, f = lookup(dev, "cg_loop", ("float64",), mode)(Ak, amode, prog, P, pmode, x, r, q,
                                                          z, p, t, 500, 1e-10, hist, state)
        out.append((c, f, x, hist[:c]))
    (c0, f0, x0, h0), (c1, f1, x1, h1) = out
    assert f0 == f1 == 0
    assert abs(c0 - c1) <= 1
    m = min(c0, c1)
    np.testing.assert_allclose(h0[:m], h1[:m], rtol=1e-6, atol=1e-10 * h0[0])   # rounding noise
    np.testing.assert_allclose(x0, x1, rtol=1e-8)
    np.testing.assert_allclose(A @ x0, b, rtol=0, atol=1e-8 * np.linalg.norm(b))


# ------------------------------------------------------------------ GMRES
from mpsolve.matrices import convection_diffusion2d  # noqa: E402

_NS = {
    "convdiff": convection_diffusion2d(12),
    "poisson": poisson2d(10),
    "few-eigenvalues": sp.diags(np.tile([1.0, 2.0, 5.0], 30)).tocsr(),  # happy breakdown
}
_NSM = {
    "none": lambda: None,
    "jacobi": lambda: Jacobi(),
    "ilu0": lambda: ILU0(),
    "isai-general": lambda: ISAI(variant="general"),
    "isai-right": lambda: ISAI(variant="right", accumulate="float64"),
    "matrix": "matrix",
}


def _gmres(monkeypatch, fused, A, b, M, policy, side, **kw):
    monkeypatch.setenv("MPSOLVE_FUSED", fused)
    M = sp.diags(1.0 / A.diagonal()).tocsr() if M == "matrix" else M()
    return mpsolve.solve(A, b, method="gmres", precond=M, precision=policy, escalate=False,
                         side=side, **kw)




def _gmres_cases():
    for an in _NS:
        for mn in _NSM:
            for pol in _POLICIES:
                for side in ("left", "right"):
                    if an == "few-eigenvalues" and (mn != "none" or side == "right"):
                        continue
                    yield pytest.param(an, mn, pol, side, id=f"{an}-{mn}-{pol}-{side}")


@pytest.mark.parametrize("an,mn,pol,side", list(_gmres_cases()))
def test_gmres_arnoldi_bit_for_bit(monkeypatch, an, mn, pol, side):
    A = _NS[an]
    n = A.shape[0]
    b = A @ np.linspace(1.0, 2.0, n)
    rs = [_gmres(monkeypatch, f, A, b, _NSM[mn], pol, side, rtol=1e-9, restart=8)
          for f in "01"]
    assert _loop_runs(A, b, _NSM[mn], pol, "gmres_arnoldi", side)
    assert rs[0].iterations > 0
    assert rs[0].restarts == rs[1].restarts
    _same(*rs)


@pytest.mark.parametrize("flexible", [False, True], ids=["linear", "flexible"])
@pytest.mark.parametrize("mn", ["jacobi", "ilu0", "isai-right", "matrix"])
@pytest.mark.parametrize("pol", ["double", "mixed", "eft"])
def test_gmres_arnoldi_right_linear_and_flexible_bit_for_bit(monkeypatch, mn, pol, flexible):
    """Right preconditioning with a linear ``M`` (one Z row, ``x += M V_k y``) and forced
    flexible (``Z`` rows, ``x += Z_k y``): the compiled loop gives the Python body's bits
    on both paths."""
    from mpsolve.krylov import gmres

    real = gmres._linear_m
    said = []

    def spy(sys):
        said.append(False if flexible else real(sys))
        return said[-1]

    monkeypatch.setattr(gmres, "_linear_m", spy)
    A = _NS["convdiff"]
    n = A.shape[0]
    b = A @ np.linspace(1.0, 2.0, n)
    rs = [_gmres(monkeypatch, f, A, b, _NSM[mn], pol, "right", rtol=1e-10, restart=6)
          for f in "01"]
    assert _loop_runs(A, b, _NSM[mn], pol, "gmres_arnoldi", "right")
    assert said and all(s == (not flexible) for s in said)   # the path asked for ran
    assert rs[0].info == 0 and rs[0].restarts > 1
    _same(*rs)


@pytest.mark.parametrize("mn", ["none", "ilu0"])
def test_gmres_arnoldi_maxiter_and_zero_iterations(monkeypatch, mn):
    A = _NS["convdiff"]
    n = A.shape[0]
    b = A @ np.ones(n)
    rs = [_gmres(monkeypatch, f, A, b, _NSM[mn], "double", "left", rtol=1e-14, restart=5,
                 maxiter=3) for f in "01"]
    assert rs[0].info > 0
    _same(*rs)
    x = np.linalg.solve(A.toarray(), b)
    rs = [_gmres(monkeypatch, f, A, b, _NSM[mn], "double", "left", x0=x, rtol=1e-8)
          for f in "01"]
    assert rs[0].iterations == 0
    _same(*rs)


def test_no_arnoldi_loop_for_a_compressed_basis(monkeypatch):
    """CB-GMRES keeps its Python loop (its rows are FP32 under FP64 vectors); so does a
    callback."""
    monkeypatch.setenv("MPSOLVE_FUSED", "1")
    A = _NS["convdiff"]
    b = A @ np.ones(A.shape[0])
    rs = [_gmres(monkeypatch, f, A, b, _NSM["jacobi"], "mixed-cb", "left", rtol=1e-8)
          for f in "01"]
    _same(*rs)
    seen = []
    res = mpsolve.solve(A, b, method="gmres", precond="jacobi", callback=seen.append,
                        precision="double")
    assert len(seen) > 0 and res.info == 0


@pytest.mark.parametrize("mode", ["native", "compensated"])
@pytest.mark.parametrize("mn,side,zrows", [("none", 0, 12), ("ilu0", 1, 12),
                                           ("isai-general", 1, 12), ("jacobi", 2, 12),
                                           ("jacobi", 2, 1), ("ilu0", 2, 1)])
def test_gmres_arnoldi_kernel_matches_reference(mode, mn, side, zrows):
    """One cycle's inner steps, cpu kernel against the reference device's composition:
    the same number of steps, the Hessenberg matrix and estimates close.  ``zrows`` 1:
    right preconditioning with a linear ``M`` (``z_j`` in ``Z``'s one row)."""
    from mpsolve.kernels.registry import launch_plan

    A = convection_diffusion2d(10)
    n, m = A.shape[0], 12
    M = _NSM[mn]()
    problem = make_problem(A, np.ones(n), M=M)
    sys = make_system(problem, as_precision("double", problem.data_dtype))
    Aop = sys.A_op
    desc = None if M is None else M.fusable()
    out = []
    for dev in ("cpu", "reference"):
        plan = launch_plan(dev, "gmres_arnoldi", n, (Aop.parts, Aop.indptr, Aop.indices,
                                                     Aop.data, "acc64", False),
                           desc, np.float64 if M is None else M.storage_dtype, True)
        Ak, amode, prog, P, pmode = plan
        V = np.zeros((m + 1, n))
        V[0] = np.linspace(1.0, 2.0, n)
        V[0] /= np.linalg.norm(V[0])
        Z = np.zeros((zrows, n))
        H = np.zeros((m + 1, m))
        cs, sn, g, hcol = np.zeros(m), np.zeros(m), np.zeros(m + 1), np.zeros(m + 1)
        g[0] = 1.0
        hist = np.zeros(m)
        res = lookup(dev, "gmres_arnoldi", ("float64",), mode)(
            Ak, amode, prog, P, pmode, side, V, Z, np.empty(n), np.empty(n), H, cs, sn, g,
            hcol, 1e-10, 0.0, -1, 1.0, float(np.finfo(float).eps), 1e-3, hist)
        out.append((res, H, hist))
    (r0, H0, h0), (r1, H1, h1) = out
    assert r0[0] == r1[0] == m and r0[1] == r1[1] and r0[4] == r1[4] == 0
    # the kernels sum in other orders (the cpu's row sums two products a step, SciPy's one;
    # an FP32 preconditioner, or one summing its rows in FP32, rounds at FP32's level);
    # twelve Arnoldi steps amplify the difference in the late columns: on this problem a
    # change of the start vector at FP32's level (6e-8 relative) moves the reference's own
    # H by up to 6e-3 (ISAI general) and 1e-2 (ILU(0)); the kernels' FP32 rounding, by
    # 2e-5 against the reference
    fp32 = M is not None and (M.storage_dtype == np.float32 or desc[2] == "acc32")
    tol = 1e-3 if fp32 else 1e-6
    np.testing.assert_allclose(H0, H1, rtol=tol, atol=tol * 1e-2)
    np.testing.assert_allclose(h0, h1, rtol=tol * 10)


# ------------------------------------------------------------------ BiCGSTAB
def _bicgstab(monkeypatch, fused, A, b, M, policy, **kw):
    monkeypatch.setenv("MPSOLVE_FUSED", fused)
    M = sp.diags(1.0 / A.diagonal()).tocsr() if M == "matrix" else M()
    return mpsolve.solve(A, b, method="bicgstab", precond=M, precision=policy,
                         escalate=False, **kw)


def _bicgstab_cases():
    for an in ("convdiff", "poisson"):
        for mn in _NSM:
            for pol in _POLICIES:
                yield pytest.param(an, mn, pol, id=f"{an}-{mn}-{pol}")


@pytest.mark.parametrize("an,mn,pol", list(_bicgstab_cases()))
def test_bicgstab_loop_bit_for_bit(monkeypatch, an, mn, pol):
    A = _NS[an]
    n = A.shape[0]
    b = A @ np.linspace(1.0, 2.0, n)
    rs = [_bicgstab(monkeypatch, f, A, b, _NSM[mn], pol, rtol=1e-9) for f in "01"]
    assert _loop_runs(A, b, _NSM[mn], pol, "bicgstab_loop", "right")
    assert rs[0].iterations > 0
    _same(*rs)


def test_bicgstab_loop_breakdown_maxiter_chunks(monkeypatch):
    """A breakdown (rho = 0: b orthogonal to A b, the skew matrix [[0, 1], [-1, 0]] per
    pair), maxiter reached, and more iterations than one call's history buffer."""
    import mpsolve._system as system

    S = sp.block_diag([np.array([[0.0, 1.0], [-1.0, 0.0]])] * 20).tocsr()
    rs = [_bicgstab(monkeypatch, f, S, np.ones(40), _NSM["none"], "double", rtol=1e-10)
          for f in "01"]
    assert rs[0].info < 0
    _same(*rs)
    A = _NS["convdiff"]
    b = A @ np.ones(A.shape[0])
    rs = [_bicgstab(monkeypatch, f, A, b, _NSM["jacobi"], "double", rtol=1e-14, maxiter=4)
          for f in "01"]
    assert rs[0].info == 4
    _same(*rs)
    monkeypatch.setattr(system, "LOOP_CHUNK", 3)
    rs = [_bicgstab(monkeypatch, f, A, b, _NSM["none"], "double", rtol=1e-10) for f in "01"]
    assert rs[0].iterations > 6
    _same(*rs)


@pytest.mark.parametrize("mode", ["native", "compensated"])
@pytest.mark.parametrize("mn", ["none", "jacobi", "ilu0", "isai-right"])
def test_bicgstab_loop_kernel_matches_reference(mode, mn):
    from mpsolve.kernels.registry import launch_plan

    A = convection_diffusion2d(10)
    n = A.shape[0]
    b = A @ np.ones(n)
    M = _NSM[mn]()
    problem = make_problem(A, b, M=M, precond_side="right")
    sys = make_system(problem, as_precision("double", problem.data_dtype))
    Aop = sys.A_op
    desc = None if M is None else M.fusable()
    out = []
    for dev in ("cpu", "reference"):
        Ak, amode, prog, P, pmode = launch_plan(
            dev, "bicgstab_loop", n, (Aop.parts, Aop.indptr, Aop.indices, Aop.data, "acc64",
                                      False), desc, np.float64 if M is None else
            M.storage_dtype, True)
        x, r = np.zeros(n), b.copy()
        vecs = [np.zeros(n) for _ in range(8)]
        hist, state = np.zeros(400), np.zeros(6)
        r0, p, v, s, t, ph, sh, w = vecs           # p and v zero, as the contract asks
        if prog == 0:
            ph, sh = p, s                           # no M: p^ is p, s^ is s
        c, f = lookup(dev, "bicgstab_loop", ("float64",), mode)(
            Ak, amode, prog, P, pmode, x, r, r0, p, v, s, t, ph, sh, w, 400,
            1e-10 * np.linalg.norm(b), hist, state)
        out.append((c, f, x))
    (c0, f0, x0), (c1, f1, x1) = out
    assert f0 == f1 == 0 and abs(c0 - c1) <= 2
    np.testing.assert_allclose(x0, x1, rtol=1e-7)
    np.testing.assert_allclose(A @ x0, b, atol=1e-9 * np.linalg.norm(b))


def test_a_subclass_that_changes_apply_keeps_its_python_call(monkeypatch):
    """A preconditioner subclass with its own ``apply`` is called, not its parent's
    fusable description."""
    monkeypatch.setenv("MPSOLVE_FUSED", "1")
    calls = []

    class Counting(Jacobi):
        def apply(self, r, out):
            calls.append(1)
            super().apply(r, out)

    A = poisson2d(10)
    b = A @ np.ones(100)
    res = mpsolve.solve(A, b, method="cg", precond=Counting(), precision="double")
    assert res.info == 0 and len(calls) >= res.iterations
    assert _loop_runs(A, b, lambda: Jacobi(), "double")
    assert not _loop_runs(A, b, lambda: Counting(), "double")


def test_a_preconditioner_set_up_again_by_its_owner_is_seen(monkeypatch):
    """A Solver given a set-up preconditioner: when the caller sets it up again on other
    values, the next solve uses the new factors (the loop's arrays are looked at again),
    as the Python loop does."""
    monkeypatch.setenv("MPSOLVE_FUSED", "1")
    A = poisson2d(12)
    n = A.shape[0]
    b = A @ np.ones(n)
    out = []
    for fused in "01":
        monkeypatch.setenv("MPSOLVE_FUSED", fused)
        M = ILU0(dtype="float64").setup(A)
        s = mpsolve.Solver(A, method="cg", precond=M, precision="double", rtol=1e-10)
        first = s.solve(b)
        M.setup((A + sp.diags(np.linspace(0.0, 3.0, n))).tocsr())   # another M, same A
        out.append((first, s.solve(b)))
    _same(out[0][0], out[1][0])
    _same(out[0][1], out[1][1])
    assert out[1][1].iterations != out[1][0].iterations


from mpsolve.result import PERIOD_ATTR  # noqa: E402


class _Periodic:
    """A callback with a period (mpsolve.result.callback_period's private attribute):
    records the iteration counts it was called at (from the residual history's length)
    and asks to stop at ``stop_at`` calls."""

    def __init__(self, period, stop_at=None):
        setattr(self, PERIOD_ATTR, period)
        self.stop_at, self.calls = stop_at, 0

    def __call__(self, x):
        self.calls += 1
        return self.stop_at is not None and self.calls >= self.stop_at


@pytest.mark.parametrize("method", ["cg", "bicgstab"])
@pytest.mark.parametrize("chunk", [None, 7])
def test_periodic_callback_same_bits_on_both_paths(monkeypatch, method, chunk):
    """A periodic callback (the automatic choice's monitor) lets the compiled loop run:
    called after every ``period``-th iteration on both paths, the same x bits, and a stop
    it asks for ends both at the same iteration with info -15."""
    import mpsolve._system as system

    if chunk:                                 # the loop's calls split finer than the period
        monkeypatch.setattr(system, "LOOP_CHUNK", chunk)
    A = poisson2d(16)
    b = A @ np.linspace(1.0, 2.0, 256)
    out = []
    for fused in "01":
        monkeypatch.setenv("MPSOLVE_FUSED", fused)
        cb = _Periodic(10)
        r = mpsolve.solve(A, b, method=method, precond="jacobi", precision="mixed",
                          rtol=1e-10, escalate=False, callback=cb)
        stop = _Periodic(10, stop_at=2)
        s = mpsolve.solve(A, b, method=method, precond="jacobi", precision="mixed",
                          rtol=1e-10, escalate=False, callback=stop)
        out.append((r, cb.calls, s, stop.calls))
    (r0, c0, s0, k0), (r1, c1, s1, k1) = out
    assert _loop_runs(A, b, _M["jacobi"], "mixed", op=f"{method}_loop")
    assert r0.iterations > 20 and c0 == c1 == r0.iterations // 10
    _same(r0, r1)
    assert s0.info == s1.info == -15 and s0.iterations == s1.iterations == 20 and k0 == k1 == 2
    _same(s0, s1)


@pytest.mark.parametrize("case", ["dd", "scaled_b"])
@pytest.mark.parametrize("method", ["cg", "bicgstab"])
def test_periodic_callback_keeps_its_period_through_wrappers(method, case):
    """The callback wrappers -- the double-double refinement's (it hands on x_hi + x_lo + d)
    and the scaled right-hand side's (x in the caller's units) -- keep the ``period``:
    called once per ``period`` iterations, not each one.  (Dropped, the automatic choice's
    monitor counted each call as ``period`` iterations and gave up on nos7's CG + IC(0)
    after 41 iterations as "did not halve in 300".)"""
    A = poisson2d(16)
    b = A @ np.linspace(1.0, 2.0, 256)
    precision = "mixed-eft" if case == "dd" else "mixed"
    if case == "scaled_b":
        b = b * 2.0**600                      # ||b|| outside _B_RANGE: solved as 2^-b_exp b
    cb = _Periodic(10)
    r = mpsolve.solve(A, b, method=method, precond="jacobi", precision=precision,
                      rtol=1e-10, escalate=False, callback=cb)
    assert r.info == 0 and r.iterations > 20
    assert cb.calls <= r.iterations // 10 + 2      # a refinement step may end mid-period


def test_auto_monitor_is_periodic_without_a_user_callback(monkeypatch):
    """The automatic choice's CG candidate gets a periodic monitor (so the compiled loop
    runs) when the caller gives no callback, a per-iteration one when the caller does."""
    from mpsolve import auto
    from mpsolve.result import callback_period

    seen = []
    real = auto._Monitor

    def spy(*a, **k):
        m = real(*a, **k)
        seen.append(callback_period(m))
        return m

    monkeypatch.setattr(auto, "_Monitor", spy)
    A = poisson2d(12)
    b = A @ np.ones(144)
    assert mpsolve.solve(A, b, rtol=1e-8).choices[0].method == "cg"
    calls = []
    mpsolve.solve(A, b, rtol=1e-8, callback=calls.append)
    assert seen == [auto.CHECK_EVERY, None] and calls


def test_a_body_on_bare_primitives_runs_its_python_loop():
    """cg_body driven on an object that is not a System (bound primitives only, as the GPU
    checks drive it): no compiled loop is asked for, the Python loop converges."""
    import types

    from mpsolve._system import Workspace
    from mpsolve.kernels.primitives import bind_primitives
    from mpsolve.krylov.cg import cg_body

    A = poisson2d(6)
    b = A @ np.ones(36)
    ops = bind_primitives("cpu", np.float64, "native", np)

    def matvec_dot(p, q):
        q[:] = A @ p
        return ops.dot(p, q)

    bare = types.SimpleNamespace(ops=ops, matvec_dot=matvec_dot, psolve=None,
                                 workspace=Workspace(np), dtype=np.dtype(np.float64))
    assert compiled_loop(bare, "cg_loop") is None
    x, r, hist = np.zeros(36), b.copy(), []
    it, _, flag = cg_body(bare, x, r, 100, 1e-10 * np.linalg.norm(b), None, hist)
    assert flag == 0 and 0 < it == len(hist)
    assert np.linalg.norm(b - A @ x) <= 1e-9 * np.linalg.norm(b)


@pytest.mark.parametrize("method", ["cg", "bicgstab"])
def test_a_users_callback_with_a_period_attribute_is_called_every_iteration(method):
    """The "call me every period iterations" protocol is internal (a private attribute):
    a user's callback object that happens to have a ``period`` is called every iteration,
    as SciPy calls it (it was called every ``period``-th, and a stop asked on a skipped
    iteration never seen)."""
    A = poisson2d(12)
    b = A @ np.linspace(1.0, 2.0, A.shape[0])

    class Counting:
        def __init__(self):
            self.period, self.calls = 5, 0

        def __call__(self, x):
            self.calls += 1

    plain = []
    r = mpsolve.solve(A, b, method=method, precond="jacobi", rtol=1e-8,
                      callback=lambda x: plain.append(1))
    cb = Counting()
    q = mpsolve.solve(A, b, method=method, precond="jacobi", rtol=1e-8, callback=cb)
    assert r.info == q.info == 0 and cb.calls == len(plain) >= r.iterations - 1
