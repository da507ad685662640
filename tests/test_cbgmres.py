"""Compressed-basis GMRES (CB-GMRES): the Krylov basis stored in FP32, arithmetic in FP64.

Checked here: the policy (field, presets, ladder), that the basis really is FP32 in the
workspace, that the answer meets the FP64 true-residual tolerance (checked again here
from ``x``, independently of the solver), that the iteration counts stay close to the
FP64-basis GMRES on well-conditioned problems, left and right preconditioning, the
compensated mode, and the escalation to an FP64 basis (and no false success without it)
on a problem whose FP32 basis cannot carry the convergence.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st

import mpsolve
from mpsolve import PRESETS, Precision
from mpsolve.kernels import lookup
from mpsolve.matrices import convection_diffusion2d, poisson2d, poisson3d

from conftest import load_collection_matrix, manifest

RTOL = 1e-10


def _true_rel(A, b, x):
    """||b - A x|| / ||b|| in FP64, from scratch."""
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(b - A.astype(np.float64) @ np.asarray(x, np.float64))
                 / np.linalg.norm(b))


def _capture_workspaces(monkeypatch):
    from mpsolve import _system

    made = []
    orig = _system.Workspace.__init__

    def init(self, xp):
        orig(self, xp)
        made.append(self)

    monkeypatch.setattr(_system.Workspace, "__init__", init)
    return made


# ----------------------------------------------------------------- the policy
def test_presets_and_field():
    cb = PRESETS["mixed-cb"]
    assert (cb.working, cb.matrix, cb.precond, cb.dot, cb.basis) == (
        "float64", "float64", "float32", "native", "float32")
    assert cb.compressed and "basis float32" in cb.describe()
    assert PRESETS["mixed-eft-cb"].dot == "compensated"
    assert PRESETS["mixed-eft-cb"].basis == "float32"
    for name in ("double", "single", "mixed", "eft", "mixed-eft", "ir"):
        p = PRESETS[name]                       # unchanged: the basis follows the vectors
        assert p.basis == p.working and not p.compressed, name
    assert Precision().basis == "float64"
    assert Precision(working="float32", matrix="float32").basis == "float32"
    # any policy can take an FP32 basis, and give it back
    p = Precision.preset("eft").with_basis("float32")
    assert (p.name, p.basis, p.dot) == ("eft-cb", "float32", "compensated")
    assert p.with_basis(None) == PRESETS["eft"]
    assert Precision.preset("mixed").with_basis(np.float32) == cb


def test_basis_is_validated():
    with pytest.raises(ValueError, match="basis"):
        Precision(basis="float16")
    with pytest.raises(ValueError, match="wider than working"):
        Precision(working="float32", matrix="float32", basis="float64")


def test_ladder_gives_up_the_compressed_basis_first():
    assert PRESETS["mixed-cb"].stronger() == PRESETS["mixed"]
    assert PRESETS["mixed-eft-cb"].stronger() == PRESETS["mixed-eft"]
    p = Precision.preset("eft").with_basis("float32")
    assert p.stronger() == PRESETS["eft"]
    seen = [PRESETS["mixed-cb"]]
    while seen[-1].stronger() is not None:
        seen.append(seen[-1].stronger())
    assert [q.name for q in seen] == ["mixed-cb", "mixed", "mixed-eft", "eft"]
    custom = Precision("mine", "float32", "float32", "float32", "float32", "native")
    assert custom.stronger().basis == "float64"  # the vectors move to FP64: so does the basis


def test_compensated_policy_binds_the_dot2_kernel():
    from mpsolve._system import make_ops
    from mpsolve.kernels.cpu import eft

    key = ("float32", "float64")
    b = make_ops("cpu", "float64", "compensated").basis("float32")
    assert b.compressed and b.mdot is eft.cb_mdot2
    # no fused compensated norm: the op, then the compensated nrm2
    assert b.mdot_nrm2 is not lookup("cpu", "cb_mdot_nrm2", key, "native")
    V = np.ones((2, 3), np.float32)
    w = np.array([1e16, 1.0, -1e16])
    out = np.zeros(2)
    assert b.mdot_nrm2(V, 1, w, out) == eft.nrm2_compensated(w) and out[0] == 1.0
    b = make_ops("cpu", "float64", "native").basis("float32")
    assert b.mdot is lookup("cpu", "cb_mdot", key, "native")
    # the fused kernel, behind the overflow-safe norm's guard (kernels/safenorm.py)
    assert b.mdot_nrm2.__wrapped__ is lookup("cpu", "cb_mdot_nrm2", key, "native")
    assert b.maxpy_nrm2.__wrapped__ is lookup("cpu", "cb_maxpy_nrm2", key, "native")
    assert b.mdot is not eft.cb_mdot2
    same = make_ops("cpu", "float64", "native").basis("float64")
    assert not same.compressed and same.mdot is lookup("cpu", "mdot", ("float64",), "native")


def test_a_device_without_the_kernels_says_so_at_set_up():
    from mpsolve.kernels.primitives import bind_basis, bind_primitives

    ops = bind_primitives("reference", "float32", "native", np)
    with pytest.raises(KeyError, match="cb_mdot.*registered"):
        bind_basis(ops, "float16")


# ----------------------------------------------------------------- storage
@pytest.mark.parametrize("side", ["left", "right"])
def test_basis_is_stored_in_fp32(monkeypatch, side):
    made = _capture_workspaces(monkeypatch)
    A = convection_diffusion2d(30)
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, method="gmres", precision="mixed-cb", restart=20, rtol=RTOL,
                        precond="jacobi", side=side)
    assert res.info == 0 and res.precision == "mixed-cb"
    (ws,) = made
    V = [a for k, a in ws._arrays.items() if k[0] == "V"]
    assert len(V) == 1 and V[0].dtype == np.float32 and V[0].shape == (21, A.shape[0])
    assert V[0].nbytes == 21 * A.shape[0] * 4
    Z = [a for k, a in ws._arrays.items() if k[0] == "Z"]
    assert [z.dtype for z in Z] == ([np.float64] if side == "right" else [])
    # the same solve with the FP64 basis: the basis takes twice the bytes
    made.clear()
    mpsolve.solve(A, b, method="gmres", precision="mixed", restart=20, rtol=RTOL,
                  precond="jacobi", side=side)
    (ws64,) = made
    (V64,) = [a for k, a in ws64._arrays.items() if k[0] == "V"]
    assert V64.dtype == np.float64 and V64.nbytes == 2 * V[0].nbytes


# ----------------------------------------------------------------- convergence
def _close_iterations(cb, ref, restart=30):
    """CB-GMRES's count against the FP64-basis count on well-conditioned problems.

    Many cycles (the FP64 solve restarts at least twice): within 5% (+2; measured 0-4%).
    A solve that needs more than ~1/eps_fp32 of reduction inside one cycle converges in
    one or two cycles with an FP64 basis; a cycle on an FP32 basis ends at that reduction
    (its estimate stalls there) and the next one starts a fresh Krylov space: at most
    half a cycle more (measured: poisson3d(12) 34 -> 47, ILU(0) problems +0-4).
    """
    if ref >= 3 * restart:
        return cb <= 1.05 * ref + 2
    return cb <= ref + restart // 2


GENERATED = {
    "poisson2d": lambda: poisson2d(40),
    "convdiff2d": lambda: convection_diffusion2d(40),
    "poisson3d": lambda: poisson3d(12),
}


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("pc", [None, "jacobi", "ilu0"])
@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_problems(name, pc, side):
    A = GENERATED[name]()
    b = A @ np.ones(A.shape[0])
    kw = dict(method="gmres", restart=30, rtol=RTOL, precond=pc, side=side, maxiter=5000)
    ref = mpsolve.solve(A, b, precision="mixed", **kw)
    cb = mpsolve.solve(A, b, precision="mixed-cb", **kw)
    assert ref.info == 0 and cb.info == 0
    assert cb.precision == "mixed-cb" and not cb.escalations   # no escalation needed
    assert _true_rel(A, b, cb.x) <= RTOL
    assert cb.true_residual == pytest.approx(_true_rel(A, b, cb.x), rel=1e-6)
    assert _close_iterations(cb.iterations, ref.iterations), (cb.iterations, ref.iterations)


def _nonsymmetric_collection():
    names = [r["name"] for r in manifest() if r.get("symmetry") == "general"]
    return [n for n in ("sherman4", "pde2961", "add20", "jpwh_991") if n in names]


@pytest.mark.skipif(not _nonsymmetric_collection(), reason="no SuiteSparse test collection")
@pytest.mark.parametrize("name", _nonsymmetric_collection() or ["none"])
@pytest.mark.parametrize("pc", [None, "ilu0"])
def test_suitesparse_nonsymmetric(name, pc):
    A = load_collection_matrix(name).tocsr()
    b = A @ np.ones(A.shape[0])
    kw = dict(method="gmres", restart=30, rtol=RTOL, precond=pc, maxiter=3000)
    ref = mpsolve.solve(A, b, precision="mixed", **kw)
    cb = mpsolve.solve(A, b, precision="mixed-cb", **kw)
    assert ref.info == 0 and cb.info == 0
    assert _true_rel(A, b, cb.x) <= RTOL
    assert _close_iterations(cb.iterations, ref.iterations), (cb.iterations, ref.iterations)


@pytest.mark.parametrize("side", ["left", "right"])
def test_compensated_mode(side):
    A = convection_diffusion2d(40)
    b = A @ np.ones(A.shape[0])
    kw = dict(method="gmres", restart=30, rtol=1e-12, precond="ilu0", side=side)
    ref = mpsolve.solve(A, b, precision="mixed-eft", **kw)
    cb = mpsolve.solve(A, b, precision="mixed-eft-cb", **kw)
    assert cb.info == 0 and cb.precision == "mixed-eft-cb"
    assert _true_rel(A, b, cb.x) <= 1e-12
    assert _close_iterations(cb.iterations, ref.iterations), (cb.iterations, ref.iterations)


def test_scipy_style_call_and_reference_device():
    A = convection_diffusion2d(24)
    b = A @ np.ones(A.shape[0])
    x, info = mpsolve.gmres(A, b, rtol=RTOL, restart=30, precision="mixed-cb")
    assert info == 0 and _true_rel(A, b, x) <= RTOL
    out = {dev: mpsolve.solve(A, b, method="gmres", precision="mixed-cb", rtol=RTOL,
                              precond="ilu0", device=dev) for dev in ("cpu", "reference")}
    assert out["cpu"].info == out["reference"].info == 0
    assert abs(out["cpu"].iterations - out["reference"].iterations) <= 2
    assert _true_rel(A, b, out["reference"].x) <= RTOL


@pytest.mark.parametrize("side", ["left", "right"])
def test_user_operators_get_working_vectors(side):
    """A LinearOperator ``A`` (and ``M``) is called with FP64 vectors only, as under an
    FP64 basis: the FP32 rows are widened before the call."""
    import scipy.sparse.linalg as spla

    A = convection_diffusion2d(24)
    b = A @ np.ones(A.shape[0])
    seen = set()

    def mv(x):
        seen.add(np.asarray(x).dtype)
        return A @ x

    def pc(x):
        seen.add(np.asarray(x).dtype)
        return x / A.diagonal()

    op = spla.LinearOperator(A.shape, matvec=mv, dtype=np.float64)
    M = spla.LinearOperator(A.shape, matvec=pc, dtype=np.float64)
    ref = mpsolve.solve(A, b, method="gmres", precision="mixed", rtol=RTOL, side=side,
                        precond=M)
    res = mpsolve.solve(op, b, method="gmres", precision="mixed-cb", rtol=RTOL, side=side,
                        precond=M)
    assert seen == {np.dtype(np.float64)}
    assert res.info == 0 and _true_rel(A, b, res.x) <= RTOL
    assert _close_iterations(res.iterations, ref.iterations)


def test_fp32_data_keeps_its_dtype():
    A = convection_diffusion2d(20).astype(np.float32)
    b = (A @ np.ones(A.shape[0], np.float32)).astype(np.float32)
    res = mpsolve.solve(A, b, method="gmres", precision="mixed-cb", rtol=1e-6)
    assert res.info == 0 and res.x.dtype == np.float32


# ----------------------------------------------------------------- when FP32 is not enough
def _ill_diagonal(spread, n=400, seed=0):
    """A diagonal matrix with 12 distinct eigenvalues from ``spread`` to 1: GMRES with an
    exact basis converges in about 12 steps per cycle, but ``y`` grows like 1 / spread,
    and an FP32 basis then perturbs ``A V y`` by ``eps_fp32 / spread`` -- far more than
    the cycle's residual once ``spread < 1e-6``."""
    rng = np.random.default_rng(seed)
    lam = np.geomspace(spread, 1.0, 12)
    A = sp.csr_matrix(sp.diags(lam[rng.integers(0, 12, n)]))
    return A, rng.standard_normal(n)


@pytest.mark.parametrize("spread", [1e-6, 1e-8, 1e-10])
@pytest.mark.parametrize("side", ["left", "right"])
def test_escalates_to_an_fp64_basis(spread, side):
    A, b = _ill_diagonal(spread)
    kw = dict(method="gmres", restart=30, rtol=RTOL, maxiter=400, precond=None, side=side)
    res = mpsolve.solve(A, b, precision="mixed-cb", **kw)
    assert res.info == 0 and _true_rel(A, b, res.x) <= RTOL
    assert [(e.from_precision, e.to_precision) for e in res.escalations] == [("mixed-cb",
                                                                              "mixed")]
    assert res.precision == "mixed"
    ref = mpsolve.solve(A, b, precision="mixed", **kw)
    assert res.iterations <= ref.iterations + 4 * 30   # found out within a few cycles


@pytest.mark.parametrize("spread", [1e-6, 1e-8, 1e-10])
def test_no_false_success_without_escalation(spread):
    A, b = _ill_diagonal(spread)
    res = mpsolve.solve(A, b, method="gmres", precision="mixed-cb", restart=30, rtol=RTOL,
                        maxiter=400, precond=None, escalate=False)
    true = _true_rel(A, b, res.x)
    assert res.info != 0 and true > RTOL
    assert res.true_residual == pytest.approx(true, rel=1e-6)
    assert "stagnated" in res.status and "mixed-cb" in res.status


def test_forced_by_policy_on_any_preset():
    """``with_basis('float32')`` on the compensated FP64 preset: same answer quality."""
    A = convection_diffusion2d(32)
    b = A @ np.ones(A.shape[0])
    p = Precision.preset("eft").with_basis("float32")
    res = mpsolve.solve(A, b, method="gmres", precision=p, rtol=RTOL, precond="ilu0")
    assert res.info == 0 and res.precision == "eft-cb" and _true_rel(A, b, res.x) <= RTOL


def test_bench_script_runs(tmp_path):
    from mpsolve.bench import bench_cbgmres

    out = tmp_path / "cb.md"
    text = bench_cbgmres.main(["--problems", "convdiff3d:10", "--out", str(out)])
    assert out.read_text() == text
    rows = [ln for ln in text.splitlines() if ln.startswith("| convdiff3d:10 |")]
    assert [r.split("|")[3].strip() for r in rows] == ["double", "mixed", "mixed-cb"]
    assert all(r.split("|")[4].strip() == "0" for r in rows)        # info 0 each
    assert "FP32 basis ms" in text


# ----------------------------------------------------------------- property: never a false success
@st.composite
def _systems(draw):
    """Random nonsymmetric systems, from easy (diagonally dominant) to ill-conditioned
    (weak dominance, spread diagonal), with b of any scale."""
    n = draw(st.integers(1, 80))
    density = draw(st.floats(0.02, 0.4))
    seed = draw(st.integers(0, 2**31 - 1))
    dominance = draw(st.floats(0.01, 4.0))
    spread = 10.0 ** draw(st.integers(0, 10))
    rng = np.random.default_rng(seed)
    B = sp.random(n, n, density=density, random_state=rng, format="csr",
                  data_rvs=lambda k: rng.standard_normal(k))
    rowsum = np.asarray(abs(B).sum(axis=1)).ravel()
    D = sp.diags(np.geomspace(1.0, 1.0 / spread, n))
    A = (B + sp.diags(dominance * (rowsum + 1.0))) @ D
    b = rng.standard_normal(n) * draw(st.sampled_from([1.0, 1e-8, 1e8]))
    return A.tocsr(), b


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_systems(), st.sampled_from(["mixed-cb", "mixed-eft-cb"]),
       st.sampled_from(["left", "right"]), st.booleans(), st.sampled_from([3, 30]))
def test_never_a_false_success(system, policy, side, escalate, restart):
    """``info == 0`` exactly when the FP64 true residual of the returned ``x`` meets the
    tolerance, whatever the compressed basis did (outside the rounding band of two FP64
    evaluations of ``b - A x``)."""
    A, b = system
    rtol = 1e-9
    r = mpsolve.solve(A, b, method="gmres", precision=policy, rtol=rtol, side=side,
                      restart=restart, escalate=escalate, maxiter=200, precond=None)
    bn = np.linalg.norm(b)
    true = np.linalg.norm(b - A @ r.x) / bn
    band = 4 * A.shape[0] * np.finfo(float).eps * np.linalg.norm(abs(A) @ abs(r.x) + abs(b)) / bn
    assert np.isfinite(r.x).all()
    assert abs(r.true_residual - true) <= 1e-6 * true + band
    if abs(true - rtol) > band:
        assert (r.info == 0) == (true <= rtol), (r.status, true)
