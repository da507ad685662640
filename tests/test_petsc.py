"""mpsolve's preconditioners inside PETSc (petsc4py's Python PC), serial and under MPI."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

petsc4py = pytest.importorskip("petsc4py", reason="petsc4py is not installed (run .ci/setup.sh)")
from petsc4py import PETSc  # noqa: E402

import mpsolve  # noqa: E402
import mpsolve.petsc as mp  # noqa: E402
from mpsolve.matrices import convection_diffusion2d, elasticity3d, poisson2d  # noqa: E402
from mpsolve.bench.baselines import petsc_solve  # noqa: E402

from conftest import COLLECTION, load_collection_matrix, petsc_mat_apply  # noqa: E402

RTOL = 1e-8


def _ksp(A, ksp_type, ctx=None, pc_type=None):
    P = PETSc.Mat().createAIJ(size=A.shape, csr=(A.indptr.astype(PETSc.IntType),
                                                 A.indices.astype(PETSc.IntType), A.data),
                              comm=PETSc.COMM_SELF)
    P.assemble()
    ksp = PETSc.KSP().create(PETSc.COMM_SELF)
    ksp.setOperators(P)
    ksp.setType(ksp_type)
    ksp.setTolerances(rtol=RTOL, atol=0.0, max_it=3000)
    if ksp_type != "cg":
        ksp.setPCSide(PETSc.PC.Side.RIGHT)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    pc = ksp.getPC()
    if ctx is not None:
        pc.setType("python")
        pc.setPythonContext(ctx)
    elif pc_type:
        pc.setType(pc_type)
    return ksp, P


def _solve(ksp, P, b):
    bv = P.createVecLeft()
    bv.array[:] = b
    xv = P.createVecRight()
    xv.set(0.0)
    ksp.solve(bv, xv)
    return xv.array.copy(), ksp.getIterationNumber(), ksp.getConvergedReason()


def _from_options(A, options):
    """A KSP configured from the options database alone (``options`` removed after), set
    up; returns ``(ksp, P)``."""
    opts = PETSc.Options()
    for k, v in options.items():
        opts[k] = v
    try:
        P = mp.petsc_mat(A)
        ksp = PETSc.KSP().create(PETSc.COMM_SELF)
        ksp.setOperators(P)
        ksp.setTolerances(rtol=RTOL, atol=0.0, max_it=3000)
        ksp.setFromOptions()
        ksp.setUp()
    finally:
        for k in options:
            opts.delValue(k)
    return ksp, P


CASES = [
    # (matrix, PETSc KSP, mpsolve method, context factory)
    ("bcsstk14", "cg", "cg", lambda: mp.ISAI(variant="spd")),
    ("s1rmq4m1", "cg", "cg", lambda: mp.BlockISAI(variant="spd")),
    ("add20", "fgmres", "gmres", lambda: mp.ISAI(variant="general", sparsity_power=2)),
    ("elasticity3d:8", "fgmres", "gmres", lambda: mp.BlockISAI(block_size=3, side="right")),
    ("convdiff2d:40", "fbcgs", "bicgstab", lambda: mp.ISAI(side="right")),
]


def _matrix(name):
    if name == "elasticity3d:8":
        return elasticity3d(8)
    if name == "convdiff2d:40":
        return convection_diffusion2d(40, peclet=20)
    if not COLLECTION.exists():
        pytest.skip("no test collection")
    return load_collection_matrix(name)


@pytest.mark.parametrize("name,ksp_type,method,make", CASES, ids=[c[0] for c in CASES])
def test_ksp_with_mpsolve_pc_matches_mpsolve(name, ksp_type, method, make, table):
    """PETSc's KSP + mpsolve's PC reaches the same true residual as mpsolve's own
    solver with the same preconditioner, in about the same number of iterations."""
    A = _matrix(name)
    b = A @ np.ones(A.shape[0])
    ctx = make()
    ksp, P = _ksp(A, ksp_type, ctx)
    if ksp_type == "fgmres":
        # FGMRES: right preconditioning that keeps M v_j, as mpsolve's right-side GMRES
        # does -- the right choice for a preconditioner applied in FP32
        ksp.setGMRESRestart(30)
    x, its, reason = _solve(ksp, P, b)
    true_p = np.linalg.norm(b - A @ x) / np.linalg.norm(b)
    assert reason > 0, f"PETSc did not converge: reason {reason}"
    assert true_p <= RTOL * 1.01
    assert ctx.setup_count == 1
    # mpsolve's own solver with an identically configured preconditioner
    M = type(ctx.M)(**{k: v for k, v in ctx.params.items()}, dtype="float32")
    # PETSc runs GMRES/BCGS right-preconditioned with the unpreconditioned norm (the same
    # true-residual test as mpsolve's); mpsolve's GMRES on the same side
    kw = dict(restart=30, side="right") if method == "gmres" else {}
    # (PETSc's plain right-preconditioned GMRES forms x = x0 + M (V y) and, with an FP32
    # M, trusts an estimate that is off by eps_fp32 ||M||: on add20 it stops at 5e-5)
    res = mpsolve.solve(A, b, method=method, precond=M, rtol=RTOL, maxiter=3000, **kw)
    assert res.converged
    table("PETSc KSP + mpsolve PC vs mpsolve's own solver (same PC, true residual 1e-8)",
          ["matrix", "KSP", "PC", "PETSc its", "mpsolve its", "PETSc true res", "mpsolve true res"]
          ).append([name, ksp_type, type(ctx).__name__, its, res.iterations, f"{true_p:.1e}",
                    f"{res.true_residual:.1e}"])
    assert abs(its - res.iterations) <= max(5, 0.35 * max(its, res.iterations))


ILU_CASES = [("bcsstk16", "cg", "cg"), ("nos3", "cg", "cg"), ("sherman3", "gmres", "gmres"),
             ("convdiff2d:40", "bcgs", "bicgstab")]


@pytest.mark.parametrize("name,ksp_type,method", ILU_CASES, ids=[c[0] for c in ILU_CASES])
def test_ilu0_matches_petsc_ilu(name, ksp_type, method, table):
    """mpsolve's ILU(0) (FP64 factors, and FP32) is PETSc's ILU(0): the same Krylov
    method takes the same number of iterations with either, to the same true residual."""
    from mpsolve.precond import ILU0

    A = _matrix(name)
    b = A @ np.ones(A.shape[0])
    ksp, P = _ksp(A, ksp_type, pc_type="ilu")
    if ksp_type == "gmres":
        ksp.setGMRESRestart(30)
    x, its, reason = _solve(ksp, P, b)
    assert reason > 0
    kw = dict(restart=30, side="right") if method == "gmres" else {}
    res64 = mpsolve.solve(A, b, method=method, precond=ILU0(dtype="float64"), rtol=RTOL,
                          maxiter=3000, **kw)
    res32 = mpsolve.solve(A, b, method=method, precond=ILU0(dtype="float32"), rtol=RTOL,
                          maxiter=3000, **kw)
    table("ILU(0): PETSc's vs mpsolve's (FP64 and FP32 factors), true residual 1e-8",
          ["matrix", "method", "PETSc its", "mpsolve FP64 its", "mpsolve FP32 its"]
          ).append([name, method, its, res64.iterations, res32.iterations])
    assert res64.converged and res32.converged
    slack = 1 if method == "cg" else 2 + 0.1 * its  # BiCGSTAB/GMRES: rounding moves a step
    assert abs(res64.iterations - its) <= slack
    assert abs(res32.iterations - its) <= slack + 0.1 * its


def test_setup_runs_once_for_the_same_operator_and_again_when_it_changes():
    A = _matrix("convdiff2d:40")
    b = A @ np.ones(A.shape[0])
    ctx = mp.ISAI()
    ksp, P = _ksp(A, "gmres", ctx)
    _solve(ksp, P, b)
    _solve(ksp, P, 2 * b)
    assert ctx.setup_count == 1
    P.scale(2.0)            # new values: PETSc's state changes, the PC must rebuild
    ksp.setOperators(P)
    x, its, reason = _solve(ksp, P, b)
    assert ctx.setup_count == 2
    assert reason > 0
    assert np.linalg.norm(b - 2 * (A @ x)) <= RTOL * 1.01 * np.linalg.norm(b)


def test_options_database_selects_and_configures_the_pc(tmp_path):
    A = elasticity3d(6)
    b = A @ np.ones(A.shape[0])
    ksp, P = _ksp(A, "cg")
    opts = PETSc.Options()
    settings = {"pc_type": "python", "pc_python_type": "mpsolve.petsc.BlockISAI",
                "mpsolve_block_size": "3", "mpsolve_sparsity_power": "2",
                "mpsolve_variant": "spd", "mpsolve_precision": "double"}
    for k, v in settings.items():
        opts[k] = v
    try:
        ksp.setFromOptions()
        x, its, reason = _solve(ksp, P, b)
    finally:
        for k in settings:
            opts.delValue(k)
    ctx = ksp.getPC().getPythonContext()
    assert isinstance(ctx, mp.BlockISAI)
    assert reason > 0
    assert ctx.M.block_size == 3 and ctx.M.sparsity_power == 2 and ctx.M.variant == "spd"
    assert ctx.M.storage_dtype == np.float64      # -mpsolve_precision double
    f = tmp_path / "view.txt"
    viewer = PETSc.Viewer().createASCII(str(f), comm=PETSc.COMM_SELF)
    ksp.view(viewer)
    viewer.destroy()
    text = f.read_text()
    assert "mpsolve BlockISAI" in text and "block_size=3" in text and "float64" in text


def _options_error(ksp, options):
    """The Python error ``KSPSetFromOptions`` raises with these options in the database
    (PETSc wraps it: the clear message is its cause); the options are removed after."""
    opts = PETSc.Options()
    for k, v in options.items():
        opts[k] = v
    try:
        with pytest.raises(PETSc.Error) as err:
            ksp.setFromOptions()
    finally:
        for k in options:
            opts.delValue(k)
    return err.value.__cause__


def test_bad_option_is_a_clear_error():
    ksp, P = _ksp(elasticity3d(4), "cg")
    cause = _options_error(ksp, {"pc_type": "python", "mpsolve_precision": "quadruple",
                                 "pc_python_type": "mpsolve.petsc.BlockISAI"})
    assert isinstance(cause, ValueError)
    assert "-mpsolve_precision quadruple" in str(cause) and "mixed-eft" in str(cause)


def test_mat_apply_handles_several_right_hand_sides():
    A = _matrix("convdiff2d:40")
    n = A.shape[0]
    ctx = mp.ISAI()
    ksp, P = _ksp(A, "gmres", ctx)
    ksp.setUp()
    pc = ksp.getPC()
    R = np.random.default_rng(0).standard_normal((n, 4))
    got = petsc_mat_apply(pc, R)
    want = np.column_stack([ctx.M.matvec(R[:, j]) for j in range(4)])
    assert np.allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())


def test_apply_writes_into_petsc_arrays_without_copies():
    A = _matrix("convdiff2d:40")
    ctx = mp.ISAI(dtype="float64")
    ksp, P = _ksp(A, "gmres", ctx)
    ksp.setUp()
    x = P.createVecRight()
    x.setRandom()
    y = P.createVecLeft()
    before = y.array  # a view on PETSc's memory
    ctx.apply(ksp.getPC(), x, y)
    assert np.shares_memory(before, y.array)
    assert np.allclose(y.array, ctx.M.matvec(x.array.copy()))


def test_petsc_baseline_runner_matches_scipy_truth():
    A = _matrix("convdiff2d:40")
    b = A @ np.ones(A.shape[0])
    for pc in ("jacobi", "bjacobi", "sor", "mpsolve"):
        out = petsc_solve(A, b, method="gmres", pc=pc, rtol=RTOL, maxiter=2000, restart=30)
        assert out["true_residual"] <= RTOL * 1.01, (pc, out["reason"])
        assert out["iterations"] > 0


def _mpiexec():
    exe = shutil.which("mpiexec") or shutil.which("mpiexec.mpich")
    if exe is None:
        pytest.skip("mpiexec not found")
    return exe


@pytest.mark.mpi
def test_mpi_two_ranks_bjacobi_with_mpsolve_subpc():
    script = Path(__file__).parent / "mpi" / "petsc_bjacobi.py"
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    proc = subprocess.run([_mpiexec(), "-n", "2", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, proc.stdout[-2000:]
    res = json.loads(line[0][len("RESULT "):])
    assert res.pop("size") == 2
    for name, r in res.items():
        assert r["reason"] > 0, (name, r)
        assert r["true_residual"] <= RTOL * 1.01, (name, r)
        assert r.get("type", "mpibaij").startswith("mpi"), (name, r)   # (not converted)


def test_bench_compares_the_same_gmres_as_petsc():
    """mpsolve bench runs mpsolve's GMRES right-preconditioned with the unpreconditioned
    residual, as its PETSc baseline: with the same ILU(0) both take the same iterations
    (left preconditioning would minimise another residual: watt_1 35 vs 2)."""
    import argparse

    from mpsolve.bench import suite as bm

    p = argparse.ArgumentParser()
    bm.add_arguments(p)
    args = p.parse_args(["--problems", "convdiff2d:40,peclet=20", "--methods", "gmres",
                         "--precisions", "double", "--preconds", "ilu0", "--baselines",
                         "petsc", "--petsc-preconds", "bjacobi", "--petsc-ranks", "1"])
    runs = bm.run_suite(args, progress=False)
    its = {r.solver: r.iterations for r in runs}
    assert all(r.converged for r in runs) and its["mpsolve"] == its["petsc"], its


DEFAULT_PCS = ["ISAI", "BlockISAI", "ILU0", "BlockILU0", "Jacobi", "BlockJacobi"]


def _cg_meets_rtol(A, ctx, what):
    """PETSc's CG with the plug-in context ``ctx`` on ``A x = A 1`` converges and meets
    ``RTOL`` in the true residual."""
    b = A @ np.ones(A.shape[0])
    ksp, P = _ksp(A, "cg", ctx)
    x, its, reason = _solve(ksp, P, b)
    assert reason > 0, f"KSPCG + {what}: reason {reason}"
    assert np.linalg.norm(b - A @ x) <= 1.01 * RTOL * np.linalg.norm(b)


@pytest.mark.parametrize("pc_name", DEFAULT_PCS)
def test_default_plugin_pcs_are_safe_under_ksp_cg(pc_name):
    """Every plug-in class with its defaults converges under PETSc's CG on an SPD problem
    with coefficient jumps (a nonsymmetric M would break CG's curvature test)."""
    from mpsolve.matrices import jump3d

    ctx = getattr(mp, pc_name)()
    _cg_meets_rtol(jump3d(10, contrast=1e4), ctx, f"{pc_name} defaults")
    if hasattr(ctx.M, "variant"):
        assert ctx.M.variant == "spd" or pc_name == "BlockISAI" and ctx.M.symmetric


@pytest.mark.parametrize("pc_name", ["ISAI", "BlockISAI"])
def test_plugin_takes_the_spd_form_under_ksp_cg_from_the_options(pc_name):
    """``-ksp_type cg`` says CG (a symmetric ``M``): on an SPD matrix with 1e-11 relative
    assembly noise (nonsymmetric to the symmetry test) the default variant is ``spd``, not
    the left inverse that broke PETSc's CG down; ``-mpsolve_side symmetric`` says it too."""
    from mpsolve.matrices import jump3d

    A = jump3d(10, contrast=1e4).tocsr()
    A.data *= 1.0 + 1e-11 * np.random.default_rng(0).standard_normal(A.nnz)
    b = A @ np.ones(A.shape[0])
    for options in ({"ksp_type": "cg"}, {"ksp_type": "cg", "mpsolve_side": "symmetric"}):
        opts = PETSc.Options()
        for k, v in dict(options, pc_type="python",
                         pc_python_type=f"mpsolve.petsc.{pc_name}").items():
            opts[k] = v
        try:
            ksp, P = _ksp(A, "cg")
            ksp.setFromOptions()
            x, its, reason = _solve(ksp, P, b)
            ctx = ksp.getPC().getPythonContext()
        finally:
            for k in list(options) + ["pc_type", "pc_python_type"]:
                opts.delValue(k)
        assert ctx.M.variant == "spd" and ctx.side == "symmetric"
        assert reason > 0
        assert np.linalg.norm(b - A @ x) <= 1.01 * RTOL * np.linalg.norm(b)


@pytest.mark.parametrize("options,variant", [
    ({"ksp_type": "fgmres"}, "right"), ({"ksp_type": "gmres"}, "general"),
    ({"ksp_type": "gmres", "ksp_pc_side": "right"}, "right"),
    ({"ksp_type": "bcgs", "mpsolve_side": "right"}, "right"),
])
def test_plugin_side_comes_from_the_options(options, variant):
    """Nonsymmetric A, default variant: the approximate inverse matches the side the
    options database says M is applied on (right-only KSP types included)."""
    from mpsolve.matrices import coupled_convdiff2d

    A = coupled_convdiff2d(16, peclet=50)
    b = A @ np.ones(A.shape[0])
    opts = PETSc.Options()
    for k, v in dict(options, pc_type="python",
                     pc_python_type="mpsolve.petsc.BlockISAI").items():
        opts[k] = v
    try:
        P = PETSc.Mat().createAIJ(size=A.shape, csr=(A.indptr.astype(PETSc.IntType),
                                                     A.indices.astype(PETSc.IntType), A.data),
                                  comm=PETSc.COMM_SELF)
        P.assemble()
        ksp = PETSc.KSP().create(PETSc.COMM_SELF)
        ksp.setOperators(P)
        ksp.setTolerances(rtol=RTOL, atol=0.0, max_it=3000)
        ksp.setFromOptions()                       # everything from the options database
        x, its, reason = _solve(ksp, P, b)
        ctx = ksp.getPC().getPythonContext()
    finally:
        for k in list(options) + ["pc_type", "pc_python_type"]:
            opts.delValue(k)
    assert ctx.M.variant == variant
    assert reason > 0
    # (left preconditioning: PETSc stops on the preconditioned residual, so the true
    # one is only bounded through ||M^-1||)
    assert np.linalg.norm(b - A @ x) <= 1e-6 * np.linalg.norm(b)


def test_plugin_side_follows_a_changed_ksp_type():
    """The side inferred from the options is taken anew at every KSPSetFromOptions: a
    context made for fgmres (right) kept ``right`` after the KSP became gmres (PETSc's
    left default) and then cg (symmetric), and applied a right approximate inverse on
    the left; a side given to the constructor stays."""
    from mpsolve.matrices import coupled_convdiff2d

    import scipy.sparse as sp
    from mpsolve.matrices import poisson2d

    A = coupled_convdiff2d(12, peclet=5)
    b = A @ np.ones(A.shape[0])
    S = sp.csr_matrix(sp.kron(poisson2d(12), sp.eye(3)))     # SPD, A's size
    opts = PETSc.Options()
    for ctx, want in ((mp.BlockISAI(), {"fgmres": "right", "gmres": "general", "cg": "spd"}),
                      (mp.BlockISAI(side="right"), {"fgmres": "right", "gmres": "right"})):
        ksp = PETSc.KSP().create(PETSc.COMM_SELF)   # (no side set in code: the options')
        ksp.setTolerances(rtol=RTOL, atol=0.0, max_it=3000)
        ksp.getPC().setType("python")
        ksp.getPC().setPythonContext(ctx)
        for kind, variant in want.items():
            M = S if kind == "cg" else A
            ksp.setOperators(_ksp(M, kind)[1])
            opts["ksp_type"] = kind
            try:
                ksp.setFromOptions()
            finally:
                opts.delValue("ksp_type")
            _, _, reason = _solve(ksp, ksp.getOperators()[1],
                                  S @ np.ones(S.shape[0]) if kind == "cg" else b)
            assert ctx.M.variant == variant and reason > 0, (kind, ctx.side)


# --------------------------------------------- PETSc's baseline on several ranks (issue 14)
@pytest.fixture(scope="module")
def two_rank_runs(tmp_path_factory):
    """One worker launch under ``mpiexec -n 2`` for the jobs of the tests below: an SPD
    and a nonsymmetric generated problem, a bad method and a missing matrix between good
    jobs (the worker must go on after them)."""
    from mpsolve.bench import petsc_mpi
    from mpsolve.matrices import generate, poisson3d

    exe = _mpiexec()
    tmp = tmp_path_factory.mktemp("petsc-mpi")
    S = poisson3d(12)                                     # 1728 unknowns, SPD
    N = generate("convdiff2d:40,peclet=20").tocsr()       # nonsymmetric
    ps = petsc_mpi.write_matrix(S, tmp, "spd")
    pn = petsc_mpi.write_matrix(N, tmp, "nonsym")
    common = dict(rtol=RTOL, maxiter=2000, restart=30, repeat=1, time_limit=60)
    jobs = {"cg-jacobi": dict(common, matrix=ps, method="cg", pc="jacobi"),
            "bad-method": dict(common, matrix=ps, method="qmr", pc="jacobi"),
            "gmres-ilu": dict(common, matrix=pn, method="gmres", pc="ilu"),
            "missing": dict(common, matrix=str(tmp / "nowhere.npz"), method="cg", pc="jacobi"),
            "cg-icc": dict(common, matrix=ps, method="cg", pc="icc", repeat=2),
            "bicgstab-sor": dict(common, matrix=pn, method="bicgstab", pc="sor")}
    results, note = petsc_mpi.run_jobs(list(jobs.values()), 2, mpiexec=exe)
    return dict(zip(jobs, results)), note, {"spd": S, "nonsym": N}


@pytest.mark.mpi
def test_two_ranks_cg_jacobi_takes_the_serial_iterations(two_rank_runs):
    """Jacobi is the same operator on any number of ranks: CG takes the serial KSP's
    iterations (one more or less for the reduction order) and meets the tolerance."""
    runs, note, A = two_rank_runs
    r = runs["cg-jacobi"]
    assert r["status"] == "ok" and r["ranks"] == 2 and r["pc_label"] == "jacobi x2", r
    S = A["spd"]
    serial = petsc_solve(S, S @ np.ones(S.shape[0]), method="cg", pc="jacobi", rtol=RTOL,
                         maxiter=2000)
    assert abs(r["iterations"] - serial["iterations"]) <= 1, (r["iterations"], serial)
    assert r["reason"] == "CONVERGED_RTOL" and r["converged"]
    assert r["true_residual"] <= RTOL * 1.01
    assert r["history"][0] == pytest.approx(1.0) and r["history"][-1] <= RTOL
    assert len(r["history"]) == r["iterations"] + 1
    # the worker reports both times (the bench's columns); their values are not judged here
    assert all(isinstance(r[k], float) and np.isfinite(r[k]) for k in ("setup_time", "solve_time"))


@pytest.mark.mpi
def test_two_ranks_gmres_block_ilu_meets_the_tolerance(two_rank_runs):
    """PETSc's ILU on two ranks is block Jacobi with an ILU(0) block per rank: GMRES(30)
    converges to the FP64 true residual; ICC (CG) and local SSOR (BiCGSTAB) likewise."""
    runs, note, A = two_rank_runs
    for name, label in (("gmres-ilu", "bjacobi+ilu x2"), ("cg-icc", "bjacobi+icc x2"),
                        ("bicgstab-sor", "local ssor x2")):
        r = runs[name]
        assert r["status"] == "ok" and r["pc_label"] == label, (name, r)
        assert r["converged"] and r["reason"].startswith("CONVERGED"), (name, r)
        assert r["true_residual"] <= RTOL * 1.01, (name, r)
    # the block preconditioner is weaker than the serial ILU(0), never stronger by much:
    # it is a different operator, so only a sanity bound on the count
    N = A["nonsym"]
    serial = petsc_solve(N, N @ np.ones(N.shape[0]), method="gmres", pc="ilu", rtol=RTOL)
    assert runs["gmres-ilu"]["iterations"] >= serial["iterations"] // 2


@pytest.mark.mpi
def test_a_bad_job_is_a_status_and_the_worker_goes_on(two_rank_runs):
    runs, note, _ = two_rank_runs
    assert note is None                                   # the worker itself ran through
    assert runs["bad-method"]["status"].startswith("error: ValueError: method 'qmr'")
    assert "nowhere.npz" in runs["missing"]["status"]
    assert not runs["bad-method"]["converged"] and not runs["missing"]["converged"]
    assert runs["cg-icc"]["status"] == "ok" and runs["bicgstab-sor"]["status"] == "ok"


def test_a_failed_or_missing_mpiexec_is_a_status_not_an_exception(tmp_path, monkeypatch):
    from mpsolve.bench import petsc_mpi

    S = convection_diffusion2d(8)
    job = dict(matrix=petsc_mpi.write_matrix(S, tmp_path, "a"), method="gmres", pc="ilu",
               rtol=RTOL, maxiter=100)
    false = shutil.which("false")
    if false is None:
        pytest.skip("no `false` executable")
    results, note = petsc_mpi.run_jobs([job, job], 2, mpiexec=false)
    assert note.startswith("the PETSc MPI worker (mpiexec -n 2) exited with status 1 "
                           "after 0 of 2 jobs"), note
    assert all(r["status"] == f"error: {note}" and r["ranks"] == 2 for r in results)
    monkeypatch.setattr(petsc_mpi, "find_mpiexec", lambda: None)
    results, note = petsc_mpi.run_jobs([job], 2)
    assert note == "mpiexec not found: PETSc ran with 1 rank only"
    assert results[0]["status"] == f"error: {note}"


@pytest.mark.mpi
def test_bench_suite_runs_petsc_on_one_and_two_ranks(tmp_path, monkeypatch):
    """``mpsolve bench --petsc-ranks 1 2``: every PETSc configuration on both rank counts
    (mpsolve's PCs on one rank only), PETSc's best taken over both, the header saying
    so; with mpiexec missing the bench falls back to one rank and says that."""
    import argparse

    from mpsolve.bench import suite as bm
    from mpsolve.bench.report import best, write_markdown

    _mpiexec()
    p = argparse.ArgumentParser()
    bm.add_arguments(p)
    argv = ["--problems", "poisson3d:10", "--methods", "cg", "--precisions", "double",
            "--preconds", "jacobi", "--baselines", "petsc", "--petsc-preconds", "jacobi",
            "icc", "mpsolve", "--petsc-ranks", "1", "2"]
    info = {}
    runs = bm.run_suite(p.parse_args(argv), progress=False, info=info)
    petsc = {(r.precond, r.ranks): r for r in runs if r.solver == "petsc"}
    assert sorted(petsc) == [("icc", 1), ("icc", 2), ("jacobi", 1), ("jacobi", 2),
                             ("mpsolve", 1)]
    assert all(r.converged for r in runs), [(r.label, r.status) for r in runs]
    assert petsc["icc", 2].config == "cg/bjacobi+icc x2/double"
    assert petsc["jacobi", 1].iterations - 1 <= petsc["jacobi", 2].iterations \
        <= petsc["jacobi", 1].iterations + 1
    assert best(runs, "petsc", "poisson3d:10") is min(petsc.values(),
                                                      key=lambda r: r.total_time)
    assert info == {"petsc_ranks": [1, 2], "petsc_mpi_notes": []}
    meta = dict(command="x", machine="m", python="3", versions={}, rtol=RTOL,
                mpsolve_threads=2, **info)
    write_markdown(runs, tmp_path / "r.md", meta)
    text = (tmp_path / "r.md").read_text()
    assert "mpsolve used 2 threads" in text and "PETSc ran on 1 and 2 MPI ranks" in text
    assert "| poisson3d:10 | petsc | 2 | cg | bjacobi+icc x2 | double |" in text

    only2 = argv[:-2] + ["2"]                             # no in-process PETSc run
    runs = bm.run_suite(p.parse_args(only2), progress=False)
    assert sorted((r.precond, r.ranks) for r in runs if r.solver == "petsc") == [
        ("icc", 2), ("jacobi", 2)]

    monkeypatch.setenv("MPIEXEC", str(tmp_path / "no-such-mpiexec"))
    info = {}
    runs = bm.run_suite(p.parse_args(argv), progress=False, info=info)
    assert {r.ranks for r in runs} == {1} and info["petsc_ranks"] == [1]
    assert info["petsc_mpi_notes"][0].startswith("mpiexec not found: PETSc ran with 1 rank")


# PETSc's BCGSL on the right side returns an x without M applied (with its own Jacobi and
# ILU too: true residuals 3.7 and 1.7, reported as converged): left only
@pytest.mark.parametrize("ksp_type,configured", [
    ("bcgs", False), ("bcgsl", False), ("tfqmr", False), ("bcgs", True), ("tfqmr", True)],
    ids=["bcgs-defaults", "bcgsl-defaults", "tfqmr-defaults", "bcgs-right-true-norm",
         "tfqmr-right-true-norm"])
@pytest.mark.parametrize("pc_name", ["ISAI", "BlockISAI"])
def test_plugin_isai_is_linear_so_non_flexible_ksps_meet_the_tolerance(ksp_type, pc_name,
                                                                         configured):
    """Non-flexible KSPs assume a fixed linear M: the plug-in's (Block-)ISAI sums its rows
    in FP64 by default, so the true residual follows the KSP's recursive one (with FP32
    sums BiCGSTAB reported convergence here at a true residual of 5e-7, TFQMR at 6e-3)."""
    A = convection_diffusion2d(40, peclet=20)
    b = A @ np.ones(A.shape[0])
    ctx = getattr(mp, pc_name)()
    if configured:                       # right side, unpreconditioned norm (as the bench)
        ksp, P = _ksp(A, ksp_type, ctx)
    else:                                # what a user gets by default: left, preconditioned
        P = mp.petsc_mat(A)
        ksp = PETSc.KSP().create(PETSc.COMM_SELF)
        ksp.setOperators(P)
        ksp.setType(ksp_type)
        ksp.setTolerances(rtol=RTOL, atol=0.0, max_it=3000)
        ksp.getPC().setType("python")
        ksp.getPC().setPythonContext(ctx)
    x, its, reason = _solve(ksp, P, b)
    assert reason > 0
    assert ctx.M.accumulate == "float64"
    # a preconditioned norm differs from the true one by at most M's conditioning; the
    # FP32 sums' drift was 50x-600000x
    assert np.linalg.norm(b - A @ x) <= 10 * RTOL * np.linalg.norm(b)


def test_plugin_accumulate_option_is_still_honoured():
    A = convection_diffusion2d(20, peclet=20)
    ctx = mp.ISAI(accumulate="float32")
    ksp, P = _ksp(A, "fgmres", ctx)
    _solve(ksp, P, A @ np.ones(A.shape[0]))
    assert ctx.M.accumulate == "float32"


def test_a_matrix_free_operator_is_refused_clearly_but_jacobi_takes_its_diagonal():
    A = convection_diffusion2d(16, peclet=5).tocsr()
    n = A.shape[0]
    products = []

    class Shell:                     # a matrix-free operator with a diagonal, as PCJACOBI needs
        def mult(self, mat, x, y):
            products.append(1)
            y.array[:] = A @ x.array_r

        def getDiagonal(self, mat, d):
            d.array[:] = A.diagonal()

    S = PETSc.Mat().createPython((n, n), Shell())
    S.setUp()
    b = S.createVecLeft()
    b.setArray(A @ np.ones(n))
    its = {}
    for name, ctx in (("petsc", None), ("mpsolve", mp.Jacobi())):
        ksp = PETSc.KSP().create()
        ksp.setOperators(S)
        ksp.setType("gmres")
        ksp.setTolerances(rtol=1e-10)
        pc = ksp.getPC()
        if ctx is None:
            pc.setType("jacobi")
        else:
            pc.setType("python")
            pc.setPythonContext(ctx)
        x = b.duplicate()
        products.clear()
        ksp.solve(b, x)
        assert ksp.getConvergedReason() > 0
        its[name] = (ksp.getIterationNumber(), len(products))
    assert its["mpsolve"] == its["petsc"]          # the same M, no products to build it
    ksp, _ = _ksp(A, "gmres", mp.ILU0())
    ksp.setOperators(S)
    products.clear()
    with pytest.raises(PETSc.Error) as err:
        ksp.solve(b, b.duplicate())
    assert isinstance(err.value.__cause__, TypeError)
    assert "matrix-free Mat of type 'python'" in str(err.value.__cause__)
    assert "ksp.setOperators(A, P)" in str(err.value.__cause__)
    assert len(products) < 5                       # not n products to densify the shell


@pytest.mark.parametrize("pc_name", DEFAULT_PCS)
def test_plugin_stores_in_fp64_where_fp32_cannot_hold_the_preconditioner(pc_name):
    """A matrix scaled by 1e-80 (its inverse's entries near 1e80, its inverse Cholesky
    factor's near 1e40: past FP32's 3.4e38 either way): the
    default FP32 storage cannot hold any plug-in's preconditioner, so it is stored in
    FP64 (as mpsolve.solve escalates) and CG converges; a caller's explicit FP32 fails
    the PC's set-up with the range error, as a zero pivot (raised out of KSPSolve, on one
    MPI rank it hung the other)."""
    from mpsolve.matrices import poisson2d

    A = (poisson2d(12) * 1e-80).tocsr()
    b = A @ np.ones(A.shape[0])
    ctx = getattr(mp, pc_name)()
    _cg_meets_rtol(A, ctx, pc_name)
    assert ctx.M.storage_dtype == np.float64 and "FP32 range" in ctx.escalated
    ctx32 = getattr(mp, pc_name)(dtype="float32")
    ksp, P = _ksp(A, "cg", ctx32)
    _, _, reason = _solve(ksp, P, b)
    assert reason == PETSc.KSP.ConvergedReason.DIVERGED_PCSETUP_FAILED
    assert ctx32.failed.startswith("PrecisionRangeError") and ctx32.M is None


def _typed(A, mtype, bs=1):
    """``A`` as a PETSc Mat of ``mtype`` (seqbaij/seqsbaij take block size ``bs``)."""
    P = mp.petsc_mat(A)
    if mtype == "seqaij" and bs == 1:
        return P
    if mtype == "seqaij":
        Q = PETSc.Mat().createAIJ(size=A.shape, bsize=bs, comm=PETSc.COMM_SELF)
    elif mtype == "seqdense":
        return P.convert("seqdense", PETSc.Mat())
    else:
        Q = PETSc.Mat().create(PETSc.COMM_SELF)
        Q.setSizes(A.shape, bsize=bs)
        Q.setType(mtype)
    Q.setUp()
    C = A.tocsr() if mtype != "seqsbaij" else __import__("scipy.sparse").sparse.triu(A).tocsr()
    Q.setOption(PETSc.Mat.Option.NEW_NONZERO_ALLOCATION_ERR, False)
    for i in range(A.shape[0]):
        cols = C.indices[C.indptr[i]:C.indptr[i + 1]]
        Q.setValues(i, cols, C.data[C.indptr[i]:C.indptr[i + 1]])
    Q.assemble()
    return Q


@pytest.mark.parametrize("mtype,bs", [("seqbaij", 3), ("seqsbaij", 3), ("seqdense", 1),
                                      ("seqaij", 3)])
def test_the_plugin_leaves_the_callers_matrix_as_it_is(mtype, bs):
    """P of another type than AIJ is read through an AIJ copy: after the solve it is of its
    type still (petsc4py's convert without ``out`` converts in place: a BAIJ or SBAIJ
    matrix came back AIJ, and under MPI its refill failed), set up once, and its block
    size is the one BlockISAI uses."""
    A = elasticity3d(3).tocsr()
    P = _typed(A, mtype, bs)
    ksp = PETSc.KSP().create(PETSc.COMM_SELF)
    ksp.setOperators(P)
    ksp.setType("cg")
    ksp.setTolerances(rtol=RTOL, atol=0.0, max_it=500)
    ctx = mp.BlockISAI(variant="spd")
    pc = ksp.getPC()
    pc.setType("python")
    pc.setPythonContext(ctx)
    b = P.createVecLeft()
    b.array[:] = A @ np.ones(A.shape[0])
    x = P.createVecRight()
    ksp.solve(b, x)
    assert ksp.getConvergedReason() > 0
    assert P.getType() == mtype and ctx.setup_count == 1
    assert ctx.M.block_size == (bs if bs > 1 else ctx.M.block_size)
    assert np.linalg.norm(A @ x.array - b.array) <= 1.01 * RTOL * np.linalg.norm(b.array)


def test_petsc_mat_sums_duplicate_entries_as_scipy():
    import scipy.sparse as sp

    A = sp.csr_matrix(([1.0, 1.0, 3.0, 4.0], [0, 0, 1, 1], [0, 2, 3, 4]), shape=(3, 3))
    P = mp.petsc_mat(A)
    assert P.getValue(0, 0) == 2.0 and P.getValue(1, 1) == 3.0 and P.getValue(2, 1) == 4.0


def test_a_failed_set_up_follows_petscs_convention():
    """A zero pivot: the PC's failed reason is set and the KSP stops with
    KSP_DIVERGED_PC_FAILED (-11), as PETSc's own ILU, instead of an exception through
    KSPSolve (a Newton or time-stepping solver recovers from the reason).  Jacobi uses 1
    where the diagonal is zero, as PETSc's PCJACOBI, and takes its iterations."""
    import scipy.sparse as sp

    A = sp.diags([-1.0, 2.5, -1.2], [-1, 0, 1], shape=(50, 50), format="csr")
    A.data[A.indptr[0]] = 0.0                         # a stored zero pivot at (0, 0)
    B = A.copy()
    B.data[:B.indptr[2]] = 0.0                        # a zero 2 x 2 pivot block
    b = A @ np.ones(A.shape[0])
    for ctx, M in ((mp.ILU0(), A), (mp.BlockILU0(block_size=2), B)):
        ksp, P = _ksp(M, "gmres", ctx)
        _, _, reason = _solve(ksp, P, b)
        assert reason == PETSc.KSP.ConvergedReason.DIVERGED_PCSETUP_FAILED
        assert ksp.getPC().getFailedReason() != 0 and ctx.failed
    got = [_solve(*_ksp(A, "gmres", c, pc), b) for c, pc in ((mp.Jacobi(), None),
                                                               (None, "jacobi"))]
    assert got[0][2] > 0 and got[0][1] == got[1][1]
    # the matrix's own values: a NaN (any class), a zero diagonal under point block
    # Jacobi -- they raised a ValueError out of KSPSolve (under MPI, on one rank: a hang)
    N = convection_diffusion2d(10, peclet=2.0).tocsr()
    N[3, 4] = np.nan
    Z = A.copy()
    for ctx, M, why in ((mp.ILU0(), N, PETSc.PC.FailedReason.FACTOR_OTHER),
                        (mp.ISAI(), N, PETSc.PC.FailedReason.FACTOR_OTHER),
                        (mp.BlockJacobi(block_size=1), Z,
                         PETSc.PC.FailedReason.FACTOR_NUMERIC_ZEROPIVOT)):
        ksp, P = _ksp(M, "gmres", ctx)
        ksp.setUp()
        assert ksp.getPC().getFailedReason() == why and ctx.failed
        assert ("NaN" if M is N else "zero diagonal") in ctx.failed
        _, _, reason = _solve(ksp, P, np.ones(M.shape[0]))
        assert reason == PETSc.KSP.ConvergedReason.DIVERGED_PCSETUP_FAILED


def test_plugin_keywords_and_option_values_are_checked_when_given():
    """A misspelt keyword is refused by the constructor (it used to be dropped silently);
    a bad value of an option is refused by KSPSetFromOptions, naming the option."""
    with pytest.raises(TypeError, match="sparsity_powr"):
        mp.ISAI(sparsity_powr=3)
    with pytest.raises(TypeError, match="precision"):
        mp.ISAI(precision="double")
    with pytest.raises(ValueError):
        mp.ISAI(variant="bogus")
    for bad in ("float16", "int32", "complex64", "fp32"):   # (accepted until the solve)
        with pytest.raises(ValueError, match=f"dtype={bad!r}: use 'float32' or 'float64'"):
            mp.ILU0(dtype=bad)
    assert mp.ILU0(dtype=np.float64).dtype == "float64"
    ksp, P = _ksp(convection_diffusion2d(8, peclet=2.0), "gmres")
    cause = _options_error(ksp, {"pc_type": "python", "mpsolve_variant": "bogus",
                                 "pc_python_type": "mpsolve.petsc.ISAI"})
    assert "-mpsolve_variant bogus" in str(cause)


def test_a_second_set_from_options_leaves_the_plugin_working():
    """petsc4py makes the Python context anew at a second KSPSetFromOptions, after the
    PC's set-up: the first apply sets it up (it failed with AttributeError)."""
    A = convection_diffusion2d(10, peclet=2.0).tocsr()
    ksp, P = _ksp(A, "gmres")
    opts = PETSc.Options()
    opts["pc_type"] = "python"
    opts["pc_python_type"] = "mpsolve.petsc.ISAI"
    try:
        ksp.setFromOptions()
        b = A @ np.ones(A.shape[0])
        first = _solve(ksp, P, b)
        ksp.setFromOptions()
        second = _solve(ksp, P, b)
    finally:
        for k in ("pc_type", "pc_python_type"):
            opts.delValue(k)
    assert first[2] > 0 and second[2] > 0 and first[1] == second[1]


def test_a_new_mat_at_a_freed_mats_address_is_set_up_anew():
    """The set-up was keyed by the Mat's handle (its address) and state: a Mat made after
    the first was freed can take its address and, assembled alike, its state -- and the
    first Mat's factors were applied to it (Richardson diverged).  Keyed by PETSc's object
    id, every new Mat is set up anew."""
    import gc

    import scipy.sparse as sp

    from mpsolve.matrices import poisson3d

    A = poisson3d(6).tocsr()
    n = A.shape[0]
    rng = np.random.default_rng(0)
    ctx = mp.ILU0()
    ksp = PETSc.KSP().create(PETSc.COMM_SELF)
    ksp.setType("richardson")
    ksp.setTolerances(rtol=1e-10, atol=0.0, max_it=60)
    pc = ksp.getPC()
    pc.setType("python")
    pc.setPythonContext(ctx)
    b = mp.petsc_vec(np.ones(n))
    x = b.duplicate()
    P1 = mp.petsc_mat(A)
    ksp.setOperators(P1)
    ksp.solve(b, x)
    scaled = [(sp.diags(rng.uniform(1, 100, n)) @ A).tocsr() for _ in range(2)]
    P2 = mp.petsc_mat(scaled[0])
    ksp.setOperators(P2)
    del P1
    gc.collect()
    P3 = mp.petsc_mat(scaled[1])             # (often at P1's address, with P1's state)
    ksp.setOperators(P3)
    del P2
    gc.collect()
    x.set(0.0)
    ksp.solve(b, x)
    assert ctx.setup_count == 2 and ksp.getConvergedReason() > 0
    r = b.array - scaled[1] @ x.array
    assert np.linalg.norm(r) <= 1e-9 * np.linalg.norm(b.array)


def test_view_on_a_viewer_that_is_not_ascii_writes_nothing(tmp_path):
    """-ksp_view binary:FILE (or draw) called the context's view, which printed to the
    viewer as text: PETSc error 62, "Not ASCII PetscViewer", and KSPSolve failed."""
    A = convection_diffusion2d(10, peclet=2.0).tocsr()
    ctx = mp.ISAI()
    ksp, P = _ksp(A, "gmres", ctx)
    _solve(ksp, P, A @ np.ones(A.shape[0]))
    viewer = PETSc.Viewer().createBinary(str(tmp_path / "v.bin"), "w")
    ksp.view(viewer)                       # (raised PETSc.Error before)
    viewer.destroy()
    text = PETSc.Viewer().createASCII(str(tmp_path / "v.txt"))
    ksp.view(text)
    text.destroy()
    assert "mpsolve ISAI preconditioner" in (tmp_path / "v.txt").read_text()


def test_options_changed_after_the_set_up_are_used_by_the_next_solve():
    """A second KSPSetFromOptions with new -mpsolve_* values: PETSc calls no set-up for
    an unchanged operator, so the old M was kept (its dtype and sparsity power) although
    the context held the new values; now the next apply builds the new one."""
    A = convection_diffusion2d(10, peclet=50.0).tocsr()
    ctx = mp.ISAI()
    ksp, P = _ksp(A, "gmres", ctx)
    b = A @ np.ones(A.shape[0])
    _solve(ksp, P, b)
    assert ctx.M.storage_dtype == np.float32 and ctx.M.sparsity_power == 1
    opts = PETSc.Options()
    opts["mpsolve_dtype"] = "float64"
    opts["mpsolve_sparsity_power"] = 2
    try:
        ksp.setFromOptions()
        x, its, reason = _solve(ksp, P, b)
    finally:
        for k in ("mpsolve_dtype", "mpsolve_sparsity_power"):
            opts.delValue(k)
    assert reason > 0 and ctx.setup_count == 2
    assert ctx.M.storage_dtype == np.float64 and ctx.M.sparsity_power == 2
    ksp.setFromOptions()                    # the same values again: no rebuild
    _solve(ksp, P, b)
    assert ctx.setup_count == 2


def test_a_preonly_sub_ksp_takes_the_outer_ksps_side():
    """Block Jacobi with an mpsolve sub-PC under FGMRES (right only): an explicit
    -sub_ksp_type preonly was taken as the side's source (left: the general variant);
    a preonly sub-KSP applies M once, so the outer KSP's side holds."""
    A = convection_diffusion2d(20, peclet=50.0).tocsr()
    b = A @ np.ones(A.shape[0])
    ksp, P = _from_options(A, {"ksp_type": "fgmres", "pc_type": "bjacobi",
                               "sub_ksp_type": "preonly", "sub_pc_type": "python",
                               "sub_pc_python_type": "mpsolve.petsc.ISAI"})
    x, its, reason = _solve(ksp, P, b)
    sub = ksp.getPC().getBJacobiSubKSP()[0].getPC().getPythonContext()
    assert reason > 0 and sub.side == "right" and sub.M.variant == "right"


TRANSPOSE_PCS = {"ilu0": lambda: mp.ILU0(dtype="float64"), "isai": lambda: mp.ISAI(),
                 "block-isai-bilu": lambda: mp.BlockISAI(variant="bilu", block_size=2),
                 "block-jacobi": lambda: mp.BlockJacobi(block_size=2),
                 "block-ilu0": lambda: mp.BlockILU0(block_size=2)}


@pytest.mark.parametrize("name", list(TRANSPOSE_PCS))
def test_solve_transpose_and_bicg_with_a_nonsymmetric_plugin_pc(name):
    """``KSPSolveTranspose`` and BiCG apply ``M^T`` (``PCApplyTranspose``): with a
    nonsymmetric mpsolve M they now solve ``A^T x = b`` (and ``A x = b``) to the tolerance
    (the plug-in raised NotImplementedError); mpsolve's FP64 ILU(0) takes PETSc's ILU(0)
    iterations in the transposed solve too."""
    A = sp.csr_matrix(convection_diffusion2d(24, peclet=30))
    assert abs(A - A.T).max() > 0.1
    b = np.cos(np.arange(A.shape[0]))
    ksp, P = _ksp(A, "gmres", ctx=TRANSPOSE_PCS[name]())
    bv, xv = P.createVecLeft(), P.createVecRight()
    bv.array[:] = b
    xv.set(0.0)
    ksp.solveTranspose(bv, xv)
    assert ksp.getConvergedReason() > 0
    x = xv.array.copy()
    assert np.linalg.norm(b - A.T @ x) <= 1.01 * RTOL * np.linalg.norm(b)
    if name == "ilu0":
        ref, _ = _ksp(A, "gmres", pc_type="ilu")
        xv.set(0.0)
        ref.solveTranspose(bv, xv)
        assert ref.getConvergedReason() > 0
        assert abs(ref.getIterationNumber() - ksp.getIterationNumber()) <= 1
    ksp, P = _ksp(A, "bicg", ctx=TRANSPOSE_PCS[name]())
    ksp.setPCSide(PETSc.PC.Side.LEFT)                 # (PETSc's BiCG: left only)
    ksp.setNormType(PETSc.KSP.NormType.PRECONDITIONED)
    ksp.setTolerances(rtol=1e-10, atol=0.0, max_it=3000)
    x, its, reason = _solve(ksp, P, b)
    assert reason > 0
    assert np.linalg.norm(b - A @ x) <= 1e-6 * np.linalg.norm(b)


def test_a_storage_precision_that_cannot_hold_m_fails_the_pc_not_the_process():
    """``dtype="float32"`` chosen by the caller and an M beyond FP32 (a diagonal entry of
    1e-45: its inverse overflows): the PC's failed reason, as for a zero pivot -- raised
    out of KSPSolve, on one MPI rank it hung the other."""
    import scipy.sparse as sp

    A = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(40, 40), format="lil")
    A[39, 39] = 1e-45
    A = sp.csr_matrix(A)
    ctx = mp.Jacobi(dtype="float32")
    ksp, P = _ksp(A, "gmres", ctx)
    _, _, reason = _solve(ksp, P, np.ones(40))
    assert reason == PETSc.KSP.ConvergedReason.DIVERGED_PCSETUP_FAILED
    assert "PrecisionRangeError" in ctx.failed


def test_a_prefixed_ksp_reads_only_its_own_options_for_the_side():
    """A KSP with prefix ``foo_``: ``-ksp_type cg`` and ``-ksp_pc_side right`` without
    the prefix are not its options (PETSc's rule); its GMRES got the SPD form of ISAI from
    them.  ``-foo_ksp_type gmres -foo_ksp_norm_type unpreconditioned`` runs GMRES
    right-preconditioned: the context infers the right side from them."""
    A = convection_diffusion2d(20, peclet=20.0).tocsr()
    opts = PETSc.Options()
    for extra, side in (({"ksp_type": "cg"}, None), ({"ksp_pc_side": "right"}, None),
                        ({"foo_ksp_type": "gmres", "foo_ksp_norm_type": "unpreconditioned"},
                         "right")):
        ctx = mp.ISAI()
        P = PETSc.Mat().createAIJ(size=A.shape, csr=(
            A.indptr.astype(PETSc.IntType), A.indices.astype(PETSc.IntType), A.data),
            comm=PETSc.COMM_SELF)
        ksp = PETSc.KSP().create(PETSc.COMM_SELF)
        ksp.setOptionsPrefix("foo_")
        ksp.setOperators(P)
        ksp.setType("gmres")
        pc = ksp.getPC()
        pc.setType("python")
        pc.setPythonContext(ctx)
        for k, v in extra.items():
            opts[k] = v
        try:
            ksp.setFromOptions()
        finally:
            for k in extra:
                opts.delValue(k)
        _, its, reason = _solve(ksp, P, A @ np.ones(A.shape[0]))
        assert reason > 0 and ctx.side == side
        assert ctx.M.variant == ("right" if side == "right" else "general")


def test_one_context_serving_two_pcs_gives_each_its_own_m():
    """One context handed to two PCs (two KSPs, two matrices): PETSc sets a PC up again
    only when its operator changes, so the first KSP applied the M built for the second
    matrix (2 iterations, then 263); apply now sets the context up for the PC it serves."""
    A = convection_diffusion2d(16, peclet=2.0).tocsr()
    B = (A @ A).tocsr()
    ctx = mp.ILU0()
    k1, P1 = _ksp(A, "gmres", ctx)
    k2, P2 = _ksp(B, "gmres", ctx)
    first = _solve(k1, P1, A @ np.ones(A.shape[0]))[1]
    _solve(k2, P2, B @ np.ones(B.shape[0]))
    again = _solve(k1, P1, A @ np.ones(A.shape[0]))
    assert again[2] > 0 and again[1] == first
    np.testing.assert_allclose(again[0], 1.0, rtol=1e-6)


# ------------------------------------------------------ the side, options, failures (stop 50)
@pytest.mark.parametrize("options", [
    {"ksp_type": "pipebcgs"}, {"ksp_type": "qmrcgs"},
    *({"ksp_type": k, "ksp_norm_type": "unpreconditioned"}
      for k in ("tfqmr", "cgs", "bcgsl", "lgmres", "dgmres", "pgmres", "ibcgs", "idr", "tcqmr",
                "tsirm"))])
def test_plugin_side_is_the_side_petsc_applies_m_on(options):
    """The plug-in infers the side from the options: the one PETSc's KSPSetUp settles on
    (these run right-preconditioned; the plug-in took them for left and built the left
    approximate inverse for the right side)."""
    A = convection_diffusion2d(8, peclet=5.0).tocsr()
    ksp, _ = _from_options(A, dict(options, pc_type="python",
                                   pc_python_type="mpsolve.petsc.ISAI"))
    side = {PETSc.PC.Side.LEFT: "left", PETSc.PC.Side.RIGHT: "right"}[ksp.getPCSide()]
    ctx = ksp.getPC().getPythonContext()
    assert side == "right" and ctx.side == side and ctx.M.variant == "right"


@pytest.mark.parametrize("options", [{"ksp_type": "cg", "ksp_pc_side": "left"},
                                     {"ksp_type": "pipecg2"}, {"ksp_type": "pipeprcg"}])
def test_plugin_takes_the_spd_form_for_every_cg_kind(options):
    """CG with an explicit left side, and the pipelined CGs pipecg2/pipeprcg, need a
    symmetric M: on an SPD matrix with 1e-11 assembly noise the plug-in built the
    nonsymmetric ``general`` ISAI (pipecg2: no convergence in 2998 iterations)."""
    from mpsolve.matrices import jump3d

    A = jump3d(8, contrast=1e4).tocsr()
    A.data *= 1.0 + 1e-11 * np.random.default_rng(0).standard_normal(A.nnz)
    b = A @ np.ones(A.shape[0])
    ksp, P = _from_options(A, dict(options, pc_type="python",
                                   pc_python_type="mpsolve.petsc.ISAI"))
    ctx = ksp.getPC().getPythonContext()
    x, its, reason = _solve(ksp, P, b)
    assert ctx.side == "symmetric" and ctx.M.variant == "spd"
    assert reason > 0 and np.linalg.norm(b - A @ x) <= 1e-6 * np.linalg.norm(b)


def test_a_precision_preset_option_keeps_the_fp64_fallback():
    """``-mpsolve_precision mixed`` names the preset's FP32 storage as the default, as
    mpsolve.solve's preset: values FP32 cannot hold are stored in FP64 (the option made
    FP32 a fixed choice and failed the PC); ``-mpsolve_dtype float32`` stays fixed."""
    A = (poisson2d(12) * 1e-80).tocsr()
    b = A @ np.ones(A.shape[0])
    base = dict(ksp_type="gmres", pc_type="python", pc_python_type="mpsolve.petsc.Jacobi")
    ksp, P = _from_options(A, dict(base, mpsolve_precision="MIXED"))
    ctx = ksp.getPC().getPythonContext()
    x, its, reason = _solve(ksp, P, b)
    assert reason > 0 and ctx.escalated and ctx.M.storage_dtype == np.float64
    ksp, P = _from_options(A, dict(base, mpsolve_dtype="float32"))
    assert ksp.getPC().getFailedReason() != 0 and ksp.getPC().getPythonContext().failed


def test_options_without_a_value_or_in_capitals():
    ksp, _ = _ksp(elasticity3d(3), "gmres")
    cause = _options_error(ksp, {"pc_type": "python", "mpsolve_block_size": "",
                                 "pc_python_type": "mpsolve.petsc.BlockISAI"})
    assert isinstance(cause, ValueError) and "-mpsolve_block_size needs a value" in str(cause)
    A = convection_diffusion2d(8, peclet=5.0).tocsr()
    ksp, _ = _from_options(A, {"ksp_type": "gmres", "pc_type": "python", "mpsolve_side": "RIGHT",
                               "mpsolve_variant": "General", "mpsolve_dtype": "FLOAT64",
                               "mpsolve_device": "CPU",
                               "pc_python_type": "mpsolve.petsc.ISAI"})
    ctx = ksp.getPC().getPythonContext()
    assert ctx.side == "right" and ctx.M.variant == "general" and ctx.dtype == "float64"


def test_jacobi_on_the_symmetric_side_is_petscs():
    """``-ksp_pc_side symmetric``: D^{-1/2} on each side, PCJACOBI's iterations (PETSc
    said "No method applysymmetricleft for PC of type python")."""
    A = convection_diffusion2d(10, peclet=5.0).tocsr()
    A = (A + sp.diags(np.linspace(1.0, 30.0, A.shape[0]))).tocsr()
    b = A @ np.ones(A.shape[0])
    got = []
    for pc in ({"pc_type": "jacobi"},
               {"pc_type": "python", "pc_python_type": "mpsolve.petsc.Jacobi"}):
        ksp, P = _from_options(A, dict(pc, ksp_type="gmres", ksp_pc_side="symmetric"))
        x, its, reason = _solve(ksp, P, b)
        assert reason > 0
        got.append((its, x))
    assert got[0][0] == got[1][0] and np.allclose(got[0][1], got[1][1], rtol=1e-6)


@pytest.mark.mpi
def test_two_ranks_failure_reason_view_and_sequential_helpers(tmp_path):
    """Under ``mpiexec -n 2``: a set-up that fails on one rank fails the PC on both
    (SETUP_ERROR, -1, was lost in PETSc's MPI_MAX of the ranks' reasons: both said
    "no error" and diverged on NaN); view prints each rank's M; petsc_mat/petsc_vec
    refuse a communicator of two ranks, naming the fix."""
    script = Path(__file__).parent / "mpi" / "petsc_failure.py"
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    proc = subprocess.run([_mpiexec(), "-n", "2", sys.executable, str(script), str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    res = [json.loads((tmp_path / f"result-{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in res] == [0, 1], proc.stdout[-2000:]
    for r in res:
        assert r["ksp_reason"] == PETSc.KSP.ConvergedReason.DIVERGED_PCSETUP_FAILED, r
        assert r["pc_reason"] > 0, r
        assert r["failed"] == (r["rank"] == 1), r
        assert r["escalated_reason"] > 0 and r["escalated"] == (r["rank"] == 1), r
        assert "comm has 2 ranks" in r["petsc_mat"] and "comm has 2 ranks" in r["petsc_vec"]
    view = proc.stdout
    assert "[0]" in view and "[1]" in view and "FP32 range: stored in FP64" in view
