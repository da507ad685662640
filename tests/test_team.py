"""The two-thread CG, BiCGSTAB and GMRES loops (kernels/cpu/team.py) and their atomics
(kernels/cpu/sync.py).

The team loops sum dot products in another order than the serial loops, so they are
compared with them by tolerance (same iteration counts within a few, same solution to
the tolerance asked, residual histories close while far from convergence); a run the
helper does not join (solo) must give the paired run's bits exactly.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future

import numpy as np
import pytest
import scipy.sparse as sp

import mpsolve
from mpsolve._system import compiled_loop, make_problem, make_system
from mpsolve.kernels.cpu import loops, sync, team
from mpsolve.matrices import convection_diffusion2d, poisson2d
from mpsolve.precision import as_precision
from mpsolve.precond import ILU0, ISAI, Jacobi

pytestmark = pytest.mark.skipif(not loops.team_threads(),
                                reason="the team loops need two threads")


# ------------------------------------------------------------------ atomics
@pytest.fixture(scope="module")
def exchange():
    from numba import njit

    @njit(nogil=True)
    def run(tid, s, shared, rounds):
        if not sync.claim(s, tid):
            return -1
        if tid == 0 and not sync.await_partner(s, sync.PARTNER_ROUNDS):
            return -2
        total = 0
        for e in range(1, rounds + 1):
            slot = 8 * tid + (e & 1)                 # two slots a thread: no overtaking
            shared[slot] = e * (tid + 1)
            sync.barrier(s, tid, e)
            total += shared[8 * (1 - tid) + (e & 1)]
        return total

    return run


def test_barrier_exchanges_every_round(exchange):
    """Each thread reads the value the other wrote before the same barrier, 20000 times:
    a missed or overtaken barrier changes a sum."""
    rounds = 20000
    s, shared = np.zeros(sync.SYNC_SIZE, np.int64), np.zeros(16, np.int64)
    got = {}
    th = threading.Thread(target=lambda: got.setdefault(1, exchange(1, s, shared, rounds)))
    th.start()
    got[0] = exchange(0, s, shared, rounds)
    th.join()
    tri = rounds * (rounds + 1) // 2
    assert got == {0: 2 * tri, 1: tri}


def test_late_helper_finds_the_run_taken(exchange):
    """No helper within the wait: the caller runs alone (solo) and a helper that comes
    after returns at once (one compare-and-swap decides)."""
    s, shared = np.zeros(sync.SYNC_SIZE, np.int64), np.zeros(16, np.int64)
    assert not sync.await_partner(s, 1)
    assert s[sync.STATE] == sync.SOLO
    assert exchange(1, s, shared, 5) == -1
    s[:] = 0
    assert sync.claim(s, 1) and s[sync.STATE] == sync.PAIRED
    assert sync.await_partner(s, 1)


def test_cas_returns_the_old_value():
    from numba import njit

    cas = njit(lambda a, i, e, v: sync.cas(a, i, e, v))
    a = np.zeros(sync.SYNC_SIZE, np.int64)
    assert cas(a, 3, 0, 7) == 0 and a[3] == 7
    assert cas(a, 3, 0, 9) == 7 and a[3] == 7


def test_split_halves_the_work():
    A = sp.diags([np.arange(1.0, 101.0)], [0]).tocsr()
    A = (A + sp.random(100, 100, density=0.05, random_state=0)).tocsr()
    s = team.split_rows(A.indptr)
    work = A.indptr + np.arange(101)
    assert s[0] == 0 and s[2] == 100
    assert abs(work[s[1]] - work[-1] / 2) <= A.getnnz(axis=1).max() + 1
    assert list(team.split_rows(np.zeros(1, np.int64))) == [0, 0, 0]


# ------------------------------------------------------------------ the loops
def _spd(n, seed):
    rng = np.random.default_rng(seed)
    B = sp.random(n, n, density=5.0 / n, random_state=rng, format="csr")
    S = (B + B.T).tocsr()
    return (S + sp.diags(np.abs(S).sum(axis=1).A1 + rng.uniform(0.1, 1.0, n))).tocsr()


_SPD = {"poisson": lambda: poisson2d(30), "random": lambda: _spd(700, 2),
        "poisson-f32": lambda: poisson2d(24).astype(np.float32),
        "tiny": lambda: poisson2d(20) * 1e-300}          # the rare paths: scaled norms
_NS = {"convdiff": lambda: convection_diffusion2d(30, peclet=20.0),
       "poisson": lambda: poisson2d(25)}
_CG_M = {"none": lambda A: None, "jacobi": lambda A: Jacobi(),
         "ilu0": lambda A: ILU0(), "ilu0x2": lambda A: ILU0(blocks=2),
         "isai-spd": lambda A: ISAI(variant="spd"),
         "matrix": lambda A: sp.diags(1.0 / A.diagonal()).tocsr()}
_BI_M = {"none": lambda A: None, "jacobi": lambda A: Jacobi(), "ilu0": lambda A: ILU0(),
         "ilu0x2": lambda A: ILU0(blocks=2), "isai": lambda A: ISAI(variant="general")}


def _run(monkeypatch, team_on, method, A, b, M, policy, **kw):
    monkeypatch.delenv("MPSOLVE_FUSED", raising=False)
    monkeypatch.setenv("MPSOLVE_TEAM_GMRES", "1")
    if team_on:
        monkeypatch.setenv("MPSOLVE_TEAM_MIN", "1")
        monkeypatch.delenv("MPSOLVE_TEAM", raising=False)
    else:
        monkeypatch.setenv("MPSOLVE_FUSED", "1")           # the serial compiled loop
    calls = []
    real = team.run

    def counting(loop, *args):
        got = real(loop, *args)
        calls.append(got)
        return got

    monkeypatch.setattr(team, "run", counting)
    res = mpsolve.solve(A, b, method=method, precond=M, precision=policy, escalate=False,
                        **kw)
    return res, calls


def _close(rt, rs, A, b, rtol, single=False):
    """Team ``rt`` against serial ``rs``: both converge in about as many iterations, to
    the tolerance, with histories that agree while far from convergence."""
    assert rs.info == 0 and rt.info == 0
    assert abs(rt.iterations - rs.iterations) <= max(2, rs.iterations // 20)
    assert rt.true_residual <= rtol
    k = min(5, rt.iterations, rs.iterations)
    tol = 1e-4 if single or A.dtype == np.float32 else 1e-8   # FP32 / FP64 iterations
    np.testing.assert_allclose(rt.residuals[:k], rs.residuals[:k], rtol=tol)


@pytest.mark.parametrize("pol", ["double", "mixed", "eft", "single"])
@pytest.mark.parametrize("mn", list(_CG_M))
@pytest.mark.parametrize("an", list(_SPD))
def test_team_cg_matches_the_serial_loop(monkeypatch, an, mn, pol):
    A = _SPD[an]()
    if an == "tiny" and (pol in ("single", "mixed") or mn not in ("none", "jacobi")):
        pytest.skip("FP32 copies of this matrix (or of its preconditioner) underflow")
    n = A.shape[0]
    b = A @ np.linspace(1.0, 2.0, n).astype(A.dtype)
    rtol = 1e-5 if pol == "single" or A.dtype == np.float32 else 1e-9
    rs, _ = _run(monkeypatch, False, "cg", A, b, _CG_M[mn](A), pol, rtol=rtol)
    rt, calls = _run(monkeypatch, True, "cg", A, b, _CG_M[mn](A), pol, rtol=rtol)
    assert calls, "the team loop did not run"
    _close(rt, rs, A, b, rtol, pol == "single")


@pytest.mark.parametrize("pol", ["double", "mixed", "eft"])
@pytest.mark.parametrize("mn", list(_BI_M))
@pytest.mark.parametrize("an", list(_NS))
def test_team_bicgstab_matches_the_serial_loop(monkeypatch, an, mn, pol):
    A = _NS[an]()
    b = A @ np.linspace(1.0, 2.0, A.shape[0])
    rs, _ = _run(monkeypatch, False, "bicgstab", A, b, _BI_M[mn](A), pol, rtol=1e-9)
    rt, calls = _run(monkeypatch, True, "bicgstab", A, b, _BI_M[mn](A), pol, rtol=1e-9)
    assert calls, "the team loop did not run"
    _close(rt, rs, A, b, 1e-9)


def test_team_cg_breakdowns_maxiter_and_chunks(monkeypatch):
    """CG's -12 on an indefinite matrix, ``maxiter`` reached, zero iterations from the
    solution, and more iterations than one call's history buffer: as the serial loop."""
    import mpsolve._system as system

    A = poisson2d(20).tolil()
    A[3, 3] = -50.0
    A = A.tocsr()
    b = A @ np.ones(400)
    rs = [_run(monkeypatch, t, "cg", A, b, None, "double", rtol=1e-10)[0] for t in (0, 1)]
    assert rs[0].info == rs[1].info == -12
    P = poisson2d(20)
    bp = P @ np.ones(400)
    rs = [_run(monkeypatch, t, "cg", P, bp, Jacobi(), "double", rtol=1e-12, maxiter=7)[0]
          for t in (0, 1)]
    assert rs[0].info == rs[1].info == 7
    np.testing.assert_allclose(rs[1].residuals, rs[0].residuals, rtol=1e-10)
    x = sp.linalg.spsolve(P.tocsc(), bp)
    rt, calls = _run(monkeypatch, True, "cg", P, bp, Jacobi(), "double", x0=x, rtol=1e-8)
    assert rt.iterations == 0 and rt.info == 0
    monkeypatch.setattr(system, "LOOP_CHUNK", 9)
    rs = [_run(monkeypatch, t, "cg", P, bp, ILU0(), "double", rtol=1e-10)[0]
          for t in (0, 1)]
    rt, calls = _run(monkeypatch, True, "cg", P, bp, ILU0(), "double", rtol=1e-10)
    assert len(calls) >= 2                            # went on from the loop's state
    _close(rt, rs[0], P, bp, 1e-10)


def test_team_bicgstab_breakdown(monkeypatch):
    """rho = 0 at once (b orthogonal to A b): the serial loop's flag."""
    S = sp.block_diag([np.array([[0.0, 1.0], [-1.0, 0.0]])] * 20).tocsr()
    rs = [_run(monkeypatch, t, "bicgstab", S, np.ones(40), None, "double", rtol=1e-10)[0]
          for t in (0, 1)]
    assert rs[0].info == rs[1].info < 0
    assert rs[0].iterations == rs[1].iterations


_GM_M = {"none": lambda A: None, "jacobi": lambda A: Jacobi(), "ilu0": lambda A: ILU0(),
         "ilu0x2": lambda A: ILU0(blocks=2), "isai": lambda A: ISAI(variant="general"),
         "isai-spd": lambda A: ISAI(variant="spd")}


@pytest.mark.parametrize("pol", ["double", "mixed", "eft"])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("mn", list(_GM_M))
def test_team_gmres_matches_the_serial_loop(monkeypatch, mn, side, pol):
    A = _NS["convdiff"]() if mn != "isai-spd" else _SPD["poisson"]()
    b = A @ np.linspace(1.0, 2.0, A.shape[0])
    kw = dict(rtol=1e-9, restart=20, side=side, maxiter=3000)
    rs, _ = _run(monkeypatch, False, "gmres", A, b, _GM_M[mn](A), pol, **kw)
    rt, calls = _run(monkeypatch, True, "gmres", A, b, _GM_M[mn](A), pol, **kw)
    assert calls, "the team loop did not run"
    _close(rt, rs, A, b, 1e-9)


def test_team_gmres_happy_breakdown_and_cycles(monkeypatch):
    """A happy breakdown (A = I + a rank-2 part: the Krylov space closes after 3 steps)
    and several restart cycles (each cycle one team run): as the serial loop."""
    n = 600
    rng = np.random.default_rng(5)
    U = rng.standard_normal((n, 2))
    A = sp.csr_matrix(np.eye(n) + U @ U.T / n)
    b = rng.standard_normal(n)
    rs = [_run(monkeypatch, t, "gmres", A, b, None, "double", rtol=1e-12, restart=20)
          for t in (0, 1)]
    assert rs[0][0].info == rs[1][0].info == 0
    assert rs[0][0].iterations == rs[1][0].iterations <= 4
    P = _NS["poisson"]()
    bp = P @ np.ones(P.shape[0])
    rs = [_run(monkeypatch, t, "gmres", P, bp, Jacobi(), "double", rtol=1e-10, restart=5,
               side="right", maxiter=5000) for t in (0, 1)]
    assert len(rs[1][1]) >= 3                                   # cycles: team runs
    _close(rs[1][0], rs[0][0], P, bp, 1e-10)


class _AbsentHelper:
    """A helper pool that never runs what it is given (a busy or missing thread)."""

    def submit(self, fn, *args):
        f = Future()
        f.set_result(None)
        return f


@pytest.mark.parametrize("method,mn", [("cg", "jacobi"), ("cg", "ilu0"), ("cg", "ilu0x2"),
                                       ("bicgstab", "isai"), ("bicgstab", "none"),
                                       ("gmres", "ilu0"), ("gmres", "isai")])
def test_solo_run_gives_the_paired_bits(monkeypatch, method, mn):
    """Without the helper the caller computes both halves in turn: the same bits."""
    A = poisson2d(30) if method == "cg" else _NS["convdiff"]()
    b = A @ np.linspace(1.0, 2.0, A.shape[0])
    table = {"cg": _CG_M, "bicgstab": _BI_M, "gmres": _GM_M}[method]
    paired, _ = _run(monkeypatch, True, method, A, b, table[mn](A), "mixed", rtol=1e-9)
    monkeypatch.setattr(team, "_helper", lambda: _AbsentHelper())
    solo, calls = _run(monkeypatch, True, method, A, b, table[mn](A), "mixed", rtol=1e-9)
    assert calls
    assert solo.iterations == paired.iterations
    assert np.array_equal(solo.x.view(np.uint8), paired.x.view(np.uint8))
    assert np.array_equal(solo.residuals, paired.residuals)


def test_callers_on_several_threads(monkeypatch):
    """Three threads solving at once, each with its helper: every answer right."""
    monkeypatch.setenv("MPSOLVE_TEAM_MIN", "1")
    A = poisson2d(40)
    out = {}

    def solve(i):
        b = A @ np.full(A.shape[0], float(i + 1))
        out[i] = mpsolve.solve(A, b, method="cg", precond="jacobi", rtol=1e-10)

    ths = [threading.Thread(target=solve, args=(i,)) for i in range(3)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    for i in range(3):
        assert out[i].info == 0
        np.testing.assert_allclose(out[i].x, i + 1.0, rtol=1e-7)


def test_plan_rules(monkeypatch):
    """The team from its least work (and beyond the parallel size with two threads), never
    under ``MPSOLVE_TEAM=0`` or ``force`` (the serial loops); GMRES's only when asked."""
    from mpsolve.kernels.registry import launch_plan

    A = poisson2d(70)
    n = A.shape[0]
    Ad = (np.array([0, n]), A.indptr, A.indices, A.data, "acc64", True)
    monkeypatch.delenv("MPSOLVE_TEAM", raising=False)
    monkeypatch.setenv("MPSOLVE_TEAM_MIN", str(n + A.nnz))
    got = launch_plan("cpu", "cg_loop", n, Ad, None, np.float64)
    assert got[1] >= loops.TEAM and list(got[0][0]) == list(team.split_rows(A.indptr))
    assert launch_plan("cpu", "cg_loop", n, Ad, None, np.float64, True)[1] < loops.TEAM
    assert launch_plan("cpu", "gmres_arnoldi", n, Ad, None, np.float64)[1] < loops.TEAM
    monkeypatch.setenv("MPSOLVE_TEAM_GMRES", "1")                # GMRES's: when asked
    assert launch_plan("cpu", "gmres_arnoldi", n, Ad, None, np.float64)[1] >= loops.TEAM
    monkeypatch.setenv("MPSOLVE_TEAM_MIN", str(n + A.nnz + 1))
    assert launch_plan("cpu", "bicgstab_loop", n, Ad, None, np.float64)[1] < loops.TEAM
    monkeypatch.setenv("MPSOLVE_TEAM_MIN", "1")
    monkeypatch.setenv("MPSOLVE_TEAM", "0")
    assert launch_plan("cpu", "cg_loop", n, Ad, None, np.float64)[1] < loops.TEAM


def test_two_block_ilu_halves_are_its_blocks(monkeypatch):
    """ILU(0) factors of two diagonal blocks: the team's halves are the blocks and each
    thread sweeps its own (``P_ILU2``); the serial loop's one pass over all rows computes
    the blocks' sweeps bit for bit; one block keeps the caller's sweeps (``P_ILU``)."""
    from mpsolve.kernels.fused import P_ILU, P_ILU2
    from mpsolve.kernels.registry import launch_plan, lookup

    A = convection_diffusion2d(40, peclet=5.0)
    n = A.shape[0]
    Ad = (np.array([0, n]), A.indptr, A.indices, A.data, "acc64", False)
    monkeypatch.delenv("MPSOLVE_TEAM", raising=False)
    monkeypatch.setenv("MPSOLVE_TEAM_MIN", "1")
    M2, M1 = ILU0(blocks=2), ILU0()
    M2.setup(A)
    M1.setup(A)
    desc = M2.fusable()
    assert M2.blocks == 2 and list(desc[2]) == list(M2.bounds)
    got = launch_plan("cpu", "bicgstab_loop", n, Ad, desc, np.float32)
    assert got[1] >= loops.TEAM and got[2] == P_ILU2
    assert list(got[0][0]) == list(M2.bounds)
    got = launch_plan("cpu", "bicgstab_loop", n, Ad, M1.fusable(), np.float32)
    assert got[2] == P_ILU and list(got[0][0]) == list(team.split_rows(A.indptr))
    r = np.random.default_rng(0).standard_normal(n)
    z_blocks, z_one = np.empty(n), np.empty(n)
    M2.apply(r, z_blocks)
    sweeps = lookup("cpu", "ilu_sweeps", (np.float32, np.float64, np.float64))
    sweeps(np.array([0, n], np.int64), *desc[1], r, z_one)
    assert np.array_equal(z_blocks, z_one)


def test_system_runner_goes_through_the_team_only_when_on(monkeypatch):
    """The System's compiled-loop runner calls the team loop when the plan says so (and
    solves), and the serial loop under ``MPSOLVE_TEAM=0``."""
    monkeypatch.delenv("MPSOLVE_FUSED", raising=False)
    monkeypatch.setenv("MPSOLVE_TEAM_MIN", "1")
    A = poisson2d(20)
    b = A @ np.ones(400)
    calls = []
    real = team.run
    monkeypatch.setattr(team, "run", lambda loop, *a: calls.append(1) or real(loop, *a))
    for setting, expect in (("1", 1), ("0", 0)):
        monkeypatch.setenv("MPSOLVE_TEAM", setting)
        calls.clear()
        problem = make_problem(A, b, M=Jacobi())
        s = make_system(problem, as_precision("double", problem.data_dtype))
        run = compiled_loop(s, "cg_loop")
        x, r, hist = np.zeros(400), b.copy(), []
        count, flag = run(x, r, 500, 1e-10 * np.linalg.norm(b), hist)
        assert flag == 0 and len(calls) == expect
        np.testing.assert_allclose(x, 1.0, rtol=1e-8)


def test_no_helper_runs_alone_at_once(monkeypatch):
    """No helper to be had (interpreter shutdown): the run is marked solo before it starts
    (no wait) and gives the paired bits."""
    A = poisson2d(30)
    b = A @ np.linspace(1.0, 2.0, A.shape[0])
    paired, _ = _run(monkeypatch, True, "cg", A, b, Jacobi(), "mixed", rtol=1e-9)
    monkeypatch.setattr(team, "_helper", lambda: None)
    solo, calls = _run(monkeypatch, True, "cg", A, b, Jacobi(), "mixed", rtol=1e-9)
    assert calls and solo.iterations == paired.iterations
    assert np.array_equal(solo.x, paired.x)
    s = np.zeros(sync.SYNC_SIZE, np.int64)
    s[sync.STATE] = sync.SOLO
    assert not sync.await_partner(s, 10 ** 9)          # at once, not after the rounds


def _child_solve(q):
    A = poisson2d(40)
    res = mpsolve.solve(A, A @ np.ones(A.shape[0]), method="cg", precond="jacobi",
                        rtol=1e-10)
    q.put((res.info, float(np.abs(res.x - 1.0).max())))


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork here")
def test_a_forked_child_gets_its_own_helper(monkeypatch):
    """A child forked after a team run inherits the parent's pool without its thread: it
    makes its own (else its first team run would wait for a thread that is not there)."""
    import multiprocessing as mp

    monkeypatch.setenv("MPSOLVE_TEAM_MIN", "1")
    _child_solve(mp.Queue())                              # the parent's helper exists
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_solve, args=(q,))
    p.start()
    info, err = q.get(timeout=120)
    p.join(timeout=60)
    assert info == 0 and err < 1e-6


def test_a_first_solve_after_the_main_thread_ended_runs():
    """The kernels are imported at the first solve; the team module imported
    concurrent.futures.thread at its own import, which registers an atexit hook and is
    refused once the interpreter's shutdown has begun: a first solve from a thread that
    outlived the main one, or from an atexit handler, raised RuntimeError (every later
    one too)."""
    import subprocess
    import sys

    code = (
        "import atexit, threading, numpy as np, scipy.sparse as sp, mpsolve\n"
        "A = sp.diags([-1., 2., -1.], [-1, 0, 1], (100, 100), format='csr')\n"
        "def w():\n"
        "    for k in range(2):\n"
        "        print('ok', mpsolve.solve(A, np.ones(100), rtol=1e-8).info, flush=True)\n"
        "threading.Thread(target=w).start()\n")
    for script in (code, code.replace("threading.Thread(target=w).start()",
                                      "atexit.register(w)")):
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=120)
        assert out.stdout.split() == ["ok", "0", "ok", "0"], out.stderr[-500:]
