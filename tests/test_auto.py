"""``method="auto"`` / ``precond="auto"`` (mpsolve/auto.py): the analysis, the choice, every
fallback edge on a matrix built to trigger it, determinism, the budget, and never a false
success."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import mpsolve
from mpsolve import auto
from mpsolve.matrices import convection_diffusion2d, poisson2d
from mpsolve.result import AUTO_FAILED, USER_STOP

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

EPS = np.finfo(np.float64).eps


def _ok(res, A, b, rtol):
    """The result is what it says: converged means the FP64 true residual meets rtol;
    not converged, that the certified one (the FP64 residual's rounding bound added where
    it matters) does not."""
    true = np.linalg.norm(b - A @ res.x) / np.linalg.norm(b)
    if res.converged:
        assert true <= rtol * (1 + 1e-12)
    else:
        assert res.true_residual > rtol
    return true


def _labels(res):
    return [(c.label, c.outcome, c.iterations) for c in res.choices]


def test_defaults_of_solve_are_auto_and_recorded():
    A = poisson2d(20)
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, rtol=1e-10)
    assert res.converged and _ok(res, A, b, 1e-10) <= 1e-10
    assert res.method == "cg" and res.choices[0].precond == "ilu0"
    assert res.choices[0].outcome == "converged"
    assert res.analysis["symmetric"] and res.analysis["positive_diagonal"]
    text = res.summary()
    assert "analysis" in text and "choice 1" in text and "IC(0)" in text


def test_setup_time_accounts_for_the_analysis_and_the_set_ups():
    """The bookkeeping of the reported times, with no clock at all: ``_combine`` adds the
    analysis (with the block-size detection), every candidate's preconditioner set-up
    (failed ones included) and the driver's own set-up of each candidate run; the solve
    time is the runs' solve times (exact binary fractions: exact sums)."""
    import types

    cands = [auto.Choice("cg", "ilu0", {}, "first", outcome="set-up failed: x",
                         setup_seconds=2.0),
             auto.Choice("cg", "jacobi", {}, "second", outcome="converged",
                         setup_seconds=3.0)]
    run = types.SimpleNamespace(info=0, iterations=7, residuals=np.ones(7), setup_time=0.25,
                                solve_time=1.5, escalations=[], converged=True,
                                true_residual=1e-9, tolerance=1e-8, x=np.zeros(4))
    an = types.SimpleNamespace(block_time=0.5, as_dict=lambda: {"n": 4})
    problem = types.SimpleNamespace(hp=np.dtype(np.float64))   # an FP64 answer: no rounding
    r = auto._combine(cands, [run], an, 1.0, None, None, problem, total=99.0)
    assert r.analysis_time == 1.5                        # 1.0 + the detection's 0.5
    assert r.setup_time == 1.5 + 2.0 + 3.0 + 0.25
    assert r.solve_time == 1.5 and r.iterations == 7 and r.choices is cands
    assert r.status.endswith("automatic choice tried cg + ilu0 (set-up failed: x); "
                             "cg + jacobi (converged)")


def test_scipy_style_functions_keep_their_defaults():
    """cg/gmres/bicgstab are SciPy drop-ins: no automatic preconditioner."""
    A = convection_diffusion2d(16)
    b = A @ np.ones(A.shape[0])
    x, info = mpsolve.gmres(A, b, rtol=1e-8, restart=30)
    xs, _ = spla.gmres(A, b, rtol=1e-8, restart=30)
    assert info == 0
    res = mpsolve.solve(A, b, method="gmres", precond=None, rtol=1e-8, restart=30)
    assert res.choices == [] and res.precond is None


def test_same_choice_on_every_run():
    A = convection_diffusion2d(24)
    b = A @ np.ones(A.shape[0])
    runs = [mpsolve.solve(A, b, rtol=1e-9) for _ in range(3)]
    assert _labels(runs[0]) == _labels(runs[1]) == _labels(runs[2])
    assert runs[0].iterations == runs[1].iterations == runs[2].iterations
    np.testing.assert_array_equal(runs[0].x, runs[1].x)
    assert auto.analyse(A) .as_dict() | {"time": 0} == auto.analyse(A).as_dict() | {"time": 0}


def test_cg_curvature_breakdown_falls_back_to_gmres():
    """Symmetric, positive diagonal, indefinite: CG + shifted IC(0) (M positive definite)
    breaks down (-12), so the other CG candidate (FSAI) is skipped, not tried; GMRES goes on."""
    n = 60
    A = sp.diags([2 * np.ones(n - 1), np.ones(n), 2 * np.ones(n - 1)], [-1, 0, 1], format="csr")
    b = A @ np.ones(n)
    res = mpsolve.solve(A, b, rtol=1e-8)
    first, skipped, second = res.choices[:3]
    assert (first.method, first.precond) == ("cg", "ilu0")
    assert first.outcome.startswith("breakdown -12") and "shift=" in first.reason
    assert skipped.method == "cg" and skipped.outcome.startswith("skipped: CG broke down")
    assert skipped.iterations == 0
    assert second.method == "gmres" and second.outcome == "converged"
    assert res.converged and _ok(res, A, b, 1e-8) <= 1e-8
    assert res.iterations == first.iterations + second.iterations
    assert "breakdown -12" in res.status


def test_ilu0_zero_pivot_falls_back():
    """Nonzero diagonal, yet ILU(0) meets a zero pivot (u_22 = 1 - 0.5 * 2 = 0)."""
    blk = np.array([[1.0, 2.0, 0.0], [0.5, 1.0, 1.0], [0.0, 1.0, 3.0]])
    A = sp.csr_matrix(sp.block_diag([blk] * 20) + sp.diags(0.01 * np.ones(57), 3, shape=(60, 60)))
    b = A @ np.ones(60)
    res = mpsolve.solve(A, b, rtol=1e-8)
    assert res.choices[0].precond == "ilu0"
    assert res.choices[0].outcome.startswith("set-up failed: ZeroPivotError")
    assert res.converged and _ok(res, A, b, 1e-8) <= 1e-8


def test_tiny_diagonal_tries_ilu0_first_and_refuses_tiny_pivots():
    """Tiny, no zero diagonal entries: ILU(0) first with pivot_tol = sqrt(eps).  Where
    elimination gives the pivot back (a_ii = 1e-12 next to a_{i,i-1} a_{i-1,i} = -1)
    BiCGSTAB + ILU(0) solves it; where the pivot stays tiny (a block [[1e-12, 1], [1, 1]])
    ILU(0) is refused at set-up, naming the row, and MC64 + ILUT solves it."""
    n = 60
    A = convection_diffusion2d(8, peclet=5.0)[:n, :n].tolil()
    for i in range(1, n, 7):
        A[i, i - 1], A[i - 1, i], A[i, i] = 1.0, -1.0, 1e-12
    A = sp.csr_matrix(A)
    b = A @ np.linspace(1, 2, n)
    res = mpsolve.solve(A, b, rtol=1e-10)
    assert res.analysis["tiny_diagonal"] > 0 and res.analysis["zero_diagonal"] == 0
    assert res.choices[0].label.startswith("bicgstab + ilu0")
    assert res.choices[0].params["pivot_tol"] == auto.TINY
    assert res.precond == "ilu0" and res.converged and _ok(res, A, b, 1e-10) <= 1e-10

    blk = sp.csr_matrix(np.array([[1e-12, 1.0], [1.0, 1.0]]))
    A = sp.csr_matrix(sp.block_diag([blk] * 30) + sp.diags(0.1 * np.ones(n - 2), 2))
    b = A @ np.linspace(1, 2, n)
    res = mpsolve.solve(A, b, rtol=1e-10)
    first = res.choices[0]
    assert first.label.startswith("bicgstab + ilu0")
    assert first.outcome.startswith("set-up failed: ZeroPivotError") and "row 0" in first.outcome
    assert "ilut+mc64" in res.precond and res.converged and _ok(res, A, b, 1e-10) <= 1e-10


def _zero_diagonal(n=80, seed=1):
    rng = np.random.default_rng(seed)
    B = sp.random(n, n, density=3.0 / n, random_state=rng, format="csr") + sp.diags(2 + rng.random(n))
    A = sp.csr_matrix(B[np.roll(np.arange(n), 1), :])
    A.setdiag(0.0)
    A.eliminate_zeros()
    return sp.csr_matrix(sp.diags(10.0 ** rng.uniform(-4, 4, n)) @ A)


def test_zero_diagonal_chooses_mc64_ilut_and_returns_the_callers_x():
    A = _zero_diagonal()
    xs = np.linspace(1.0, 2.0, 80)
    b = A @ xs
    A0, b0 = A.copy(), b.copy()
    res = mpsolve.solve(A, b, rtol=1e-10)
    assert res.analysis["zero_diagonal"] == 80
    assert res.choices[0].label.startswith("gmres + ilut+mc64")
    assert res.converged and _ok(res, A, b, 1e-10) <= 1e-10
    np.testing.assert_allclose(res.x, xs, rtol=1e-6)
    assert abs(A - A0).max() == 0 and np.array_equal(b, b0)


def test_nothing_sets_up_gives_a_clear_status_not_an_exception(monkeypatch):
    """Structurally singular (an empty column) and inconsistent: every preconditioner's
    set-up fails (the matching is attempted once, cached with its error), then GMRES
    with the diagonal scaling (a zero diagonal entry: its row's largest) runs and cannot
    converge either, and GMRES alone is not tried after it; the status names them all."""
    from mpsolve.precond import _reorder

    calls = []
    real = _reorder.mc64
    monkeypatch.setattr(_reorder, "mc64", lambda C: calls.append(1) or real(C))
    A = sp.csr_matrix(np.array([[0.0, 1.0, 0.0], [0.0, 2.0, 1.0], [0.0, 1.0, 4.0]]))
    b = np.array([1.0, 2.0, 3.0])                    # not in the range of A
    res = mpsolve.solve(A, b, rtol=1e-8)
    assert len(calls) == 1 and len(res.choices) == 6
    assert res.info != 0 and not res.converged
    assert all(c.outcome.startswith("set-up failed") for c in res.choices[:4])
    assert res.choices[4].bare and \
        res.choices[4].label == "gmres + jacobi (zero_diagonal=row) [mixed]"
    assert res.choices[4].outcome != "not tried"
    assert res.choices[5].bare and res.choices[5].outcome == "not tried"
    assert "structurally singular" in res.choices[0].outcome
    # the matching's error is said once: the later candidates that reorder point to it
    assert all(c.outcome == "set-up failed: StructurallySingularError: as choice 1"
               for c in res.choices[1:4])
    assert res.status.count("structurally singular") == 1
    assert "tried gmres + ilut+mc64" in res.status and "gmres + jacobi" in res.status
    assert np.isfinite(res.x).all()


@pytest.mark.parametrize("consistent", [True, False])
def test_a_structurally_singular_system_falls_back_to_the_bare_method(consistent):
    """An empty row: MC64 and every factorisation refuse A, so auto runs GMRES with the
    diagonal scaling (GMRES alone, before it), which solves a consistent system (it ended
    with 'no candidate could be set up' before) and says why it stops on an inconsistent
    one; GMRES alone is not run after it."""
    from mpsolve.matrices import poisson2d

    A = poisson2d(20).tolil()
    A[5, :] = 0
    A = sp.csr_matrix(A)
    A.eliminate_zeros()
    b = A @ np.ones(A.shape[0]) if consistent else np.ones(A.shape[0])
    res = mpsolve.solve(A, b, rtol=1e-8)
    ran = [c for c in res.choices if c.bare and c.outcome != "not tried"]
    assert [c.precond for c in ran] == ["jacobi"]
    if consistent:
        assert res.converged and _ok(res, A, b, 1e-8) <= 1e-8
    else:
        assert not res.converged and res.info > 0 and "stagnated" in res.status
    # a matrix whose preconditioners set up never runs it, and the summary omits it
    B = poisson2d(20)
    r = mpsolve.solve(B, B @ np.ones(B.shape[0]), rtol=1e-8)
    assert r.choices[-1].bare and r.choices[-1].outcome == "not tried"
    assert "gmres + none" not in r.summary() and "zero_diagonal" not in r.summary()


def test_the_bare_method_also_runs_when_no_preconditioned_candidate_converged():
    """A singular A whose factors are all exactly singular and whose ISAI stagnates (central
    convection-diffusion without its diagonal, rank 380 of 400), b consistent: GMRES
    with the diagonal scaling (every diagonal entry zero: each row's largest), on the
    iterations left, solves it (it ended with ISAI's stagnation while those iterations
    were unused)."""
    A = convection_diffusion2d(20)
    A = sp.csr_matrix(A - sp.diags(A.diagonal()))
    A.eliminate_zeros()
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, rtol=1e-9)
    assert res.converged and _ok(res, A, b, 1e-9) <= 1e-9
    bare = res.choices[-2]
    assert bare.bare and bare.outcome == "converged" and bare.iterations > 0
    assert bare.precond == "jacobi" and res.choices[-1].outcome == "not tried"
    assert any(c.outcome.startswith("stagnated") for c in res.choices[:-1])
    assert res.iterations <= auto.DEFAULT_AUTO_MAXITER


def test_values_beyond_float32_choose_double():
    n = 40
    T = sp.diags([-1.0 * np.ones(n - 1), 3.0 * np.ones(n), -0.5 * np.ones(n - 1)], [-1, 0, 1])
    A = sp.csr_matrix(sp.diags(10.0 ** np.linspace(-60, 60, n)) @ T)
    b = A @ np.ones(n)
    res = mpsolve.solve(A, b, rtol=1e-10)
    assert not res.analysis["fits_float32"]
    assert res.choices[0].precision == "double" and res.precision == "double"
    assert res.converged and _ok(res, A, b, 1e-10) <= 1e-10
    # with FP32 data asked for anyway, the driver's range fallback escalates instead of NaNs
    res = mpsolve.solve(A, b, rtol=1e-10, precision="single")
    assert res.converged and res.escalations
    assert res.choices[0].precision == "single"          # the caller's policy, recorded


def test_fp32_range_of_the_factors_falls_back_to_fp64_storage():
    """The values fit FP32 ('mixed' is chosen), but ILU(0)'s L = a21 / a11 = 1e40 does not:
    the preconditioner is stored in FP64 instead, and the choice says why."""
    blk = np.array([[1e-20, 0.0], [1e20, 1e13]])
    A = sp.csr_matrix(sp.block_diag([blk] * 10))
    b = A @ np.ones(20)
    res = mpsolve.solve(A, b, rtol=1e-10)
    c = res.choices[0]
    assert res.analysis["fits_float32"] and c.precision == "mixed" and c.precond == "ilu0"
    assert "FP32 range: preconditioner stored in FP64" in c.reason
    assert c.outcome == "converged" and res.converged
    with pytest.raises(mpsolve.PrecisionRangeError if hasattr(mpsolve, "PrecisionRangeError")
                       else ValueError, match="float32 range"):
        mpsolve.solve(A, b, rtol=1e-10, method="gmres", precond="ilu0", precision="mixed",
                      escalate=False)


def test_budget_is_shared_and_never_exceeded():
    A = convection_diffusion2d(32, peclet=200.0)
    b = A @ np.ones(A.shape[0])
    for maxiter in (12, 3):
        res = mpsolve.solve(A, b, rtol=1e-14, maxiter=maxiter)
        assert res.iterations <= maxiter
        left = maxiter
        for c in res.choices:              # each candidate within its share: half of what is left
            last = c is res.choices[-1]
            assert c.iterations <= (left if last else max(1, left // 2))
            left -= c.iterations
        assert res.converged or res.info > 0
        _ok(res, A, b, 1e-14)
    res = mpsolve.solve(A, b, rtol=1e-14, maxiter=1)
    assert res.iterations == 1 and not res.converged and res.info > 0
    with pytest.raises(ValueError, match="maxiter"):
        mpsolve.solve(A, b, maxiter=0)


def test_stagnation_monitor_stops_a_flat_residual():
    A = sp.eye(10, format="csr")
    b = np.ones(10)
    mon = auto._Monitor(A, b, np.linalg.norm(b), every=1, per_call=30, share=10**6, user=None)
    x = np.zeros(10)
    stops = [mon(x) for _ in range(20)]
    k = stops.index(True)
    assert (k + 1) * 30 >= auto.STAGNATION_WINDOW and "stagnated" in mon.why
    mon = auto._Monitor(A, b, np.linalg.norm(b), every=1, per_call=30, share=10**6, user=None)
    assert not any(mon(np.full(10, 1 - 0.5 ** (i + 1))) for i in range(20))   # halving: fine
    mon = auto._Monitor(A, b, 1.0, every=1, per_call=30, share=60, user=None)
    assert [mon(x), mon(x)] == [False, True] and "share" in mon.why


def test_stagnation_window_is_the_longer_of_300_and_half_the_run():
    """A candidate that converged fast and then slowed (halving every 400 iterations, as
    CG + IC(0) on plat362 between plateaus) is kept: the last half of its run halved the
    residual.  A flat residual is still stopped, within twice the iterations it took to get
    there; a flat one from the start after the fixed window, as before."""
    A = sp.eye(10, format="csr")
    b = np.ones(10)

    def run(rel):                               # rel(it): the true relative residual
        mon = auto._Monitor(A, b, np.linalg.norm(b), every=1, per_call=30, share=10**6,
                            user=None)
        for k in range(1, 200):
            if mon(np.full(10, 1.0 - rel(30 * k))):
                return 30 * k, mon.why
        return None, None

    fast_then_slow = lambda it: 0.5 ** (it / 100) if it <= 900 else 0.5 ** (9 + (it - 900) / 400)
    assert run(fast_then_slow) == (None, None)
    stop, why = run(lambda it: 0.5 ** (min(it, 900) / 100))        # flat after 900
    assert 900 + auto.STAGNATION_WINDOW < stop <= 2 * 900 + 30
    assert why == f"stagnated: the true residual did not halve in {stop // 2} iterations"
    stop, why = run(lambda it: 1.0)                                  # flat from the start
    assert stop == auto.STAGNATION_WINDOW + 30 and "in 300 iterations" in why


def test_block_size_is_detected_only_when_a_candidate_needs_it(monkeypatch):
    """The block size picks ISAI or Block-ISAI for the SPD approximate inverse, the second
    SPD candidate; a solve whose IC(0) converges does not detect it (``None`` in the
    analysis, "not needed" in the summary, the untried candidate labelled by both names).
    One that reaches the candidate detects it there and gets Block-ISAI with b = 3, the
    detection's time counted in the analysis's (auto's clock replaced by one that ticks
    1 s a reading: the accounting is checked, not the speed)."""
    import types

    from mpsolve.matrices import generate

    A = sp.csr_matrix(generate("elasticity3d:4"))
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, rtol=1e-8)
    assert res.converged and res.choices[0].outcome == "converged"
    assert res.analysis["block_size"] is None
    assert "block size not needed" in res.summary()
    assert res.choices[1].label == "cg + isai/block-isai (variant=spd) [mixed]"
    def ticking(**kw):
        ticks = iter(range(10**6))
        monkeypatch.setattr(auto, "time",
                            types.SimpleNamespace(perf_counter=lambda: next(ticks)))
        try:
            return mpsolve.solve(A, b, rtol=1e-8, **kw)
        finally:
            monkeypatch.undo()

    plain = ticking()                                   # no detection: the analysis alone
    assert plain.analysis["block_time"] == 0
    res = ticking(maxiter=2)                            # IC(0) spends its share: 1 iteration
    c = res.choices[1]
    assert (c.method, c.precond, c.iterations) == ("cg", "block-isai", 1)
    assert c.reason.endswith("; block size 3") and not c.by_block
    assert res.analysis["block_size"] == 3 and res.analysis["block_time"] == 1
    # the same analysis as the plain solve's, plus the detection's tick
    assert res.analysis_time == plain.analysis_time + 1
    assert "block size 3" in res.summary()
    an = auto.analyse(A)                               # asked for first: resolved up front
    assert an.block_size == 3
    assert auto.candidates(an)[1].label == "cg + block-isai (variant=spd) [mixed]"


def test_unstable_ilu0_factors_are_refused():
    """Central differences at a cell Peclet number far above 2: ILU(0) exists but its
    triangular solves are unstable (Elman 1986); BiCGSTAB with it breaks down and GMRES(30)
    with it does not converge in 2000 cycles in FP64.  auto refuses the factors at set-up
    (Chow & Saad's growth test), for both ILU(0) candidates with one set-up, and solves
    with the next class candidate.  Stable factors of the same operator with upwinding
    pass the test."""
    from mpsolve.precond import ILU0

    A = sp.csr_matrix(convection_diffusion2d(32, peclet=1000.0, upwind=False))
    b = A @ np.ones(A.shape[0])
    M = ILU0(dtype=np.float32)
    M.setup(A)
    assert auto.ilu_growth(M, A) > 1e3 * auto.ILU_GROWTH_LIMIT
    res = mpsolve.solve(A, b, rtol=1e-8)
    c0, c1 = res.choices[:2]
    assert (c0.method, c0.precond, c1.method, c1.precond) == ("bicgstab", "ilu0", "gmres", "ilu0")
    assert c0.outcome.startswith("set-up failed: UnstableFactorsError: unstable factors")
    assert c1.outcome == "set-up failed: UnstableFactorsError: as choice 1"   # (one set-up)
    assert c0.iterations == c1.iterations == 0
    assert res.converged and _ok(res, A, b, 1e-8) <= 1e-8
    assert res.choices[2].outcome == "converged"
    U = sp.csr_matrix(convection_diffusion2d(32, peclet=1000.0))
    M.setup(U)
    assert auto.ilu_growth(M, U) <= 10.0
    res = mpsolve.solve(U, U @ np.ones(U.shape[0]), rtol=1e-8)
    assert res.choices[0].outcome == "converged"


def test_stagnation_falls_back_from_the_current_iterate(monkeypatch):
    """A shifted (indefinite) nonsymmetric Laplacian: BiCGSTAB and GMRES with ILU(0)
    stagnate, the pivoting ILUT (on A itself: its diagonal is zero-free) finishes -- before
    it, GMRES + ISAI stagnated too, and ILUT after MC64 finished; each candidate starts
    where the one before stopped, and the two ILU(0) candidates share one set-up.  (Its
    ILU(0) factors are unstable, growth 2.4e11, and auto refuses them at set-up: the growth
    test is off here, to show the stagnation path.)"""
    from mpsolve.precond import ILU0

    monkeypatch.setattr(auto, "ILU_GROWTH_LIMIT", np.inf)

    rng = np.random.default_rng(0)
    n = 400
    A = sp.csr_matrix(poisson2d(20) - 2.0 * sp.eye(n) + sp.diags(0.3 * rng.random(n - 1), 1))
    b = A @ np.ones(n)
    setups = []
    real = ILU0.setup_canonical

    def counted(self, *a, **k):
        setups.append(self)
        return real(self, *a, **k)

    ILU0.setup_canonical = counted
    try:
        res = mpsolve.solve(A, b, rtol=1e-8)
    finally:
        ILU0.setup_canonical = real
    c0, c1, c2, c3, c4, c5 = [c for c in res.choices if not c.bare]
    assert (c0.method, c0.precond) == ("bicgstab", "ilu0") and c0.outcome.startswith("stagnated")
    assert (c1.method, c1.precond) == ("gmres", "ilu0") and c1.outcome.startswith("stagnated")
    assert len(setups) == 1                              # ILU(0) set up once for both
    assert (c2.precond, c2.params, c2.outcome) == ("ilut", {}, "converged")
    assert c3.outcome == c4.outcome == c5.outcome == "not tried"
    assert c0.iterations >= auto.STAGNATION_WINDOW
    assert c1.true_residual <= c0.true_residual           # from the current iterate
    assert res.iterations == c0.iterations + c1.iterations + c2.iterations
    assert res.converged and _ok(res, A, b, 1e-8) <= 1e-8
    assert "stagnated" in res.status


@pytest.mark.parametrize("n,peclet", [(60, 1000.0), (80, 2000.0)])
def test_unstable_ilu0_on_a_zero_free_diagonal_goes_to_ilut_on_a_itself(n, peclet):
    """Central differences at a high Peclet number: ILU(0) is refused as unstable, and the
    next candidates were ISAI (stagnated), ILUT after MC64 (stagnated, or exactly
    singular) and the direct fallback, about 660 and 330 iterations in all.  The diagonal
    is zero-free, so ILUT on A itself comes first now, and converges."""
    A = convection_diffusion2d(n, peclet=peclet, upwind=False).tocsr()
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, rtol=1e-8)
    tried = [c for c in res.choices if c.outcome != "not tried"]
    assert [c.outcome.split(":")[0] for c in tried[:2]] == ["set-up failed"] * 2
    assert len(tried) == 3 and (tried[2].precond, tried[2].params) == ("ilut", {})
    assert res.converged and res.iterations < 200
    _ok(res, A, b, 1e-8)


def test_user_callback_stop_is_honoured():
    A = convection_diffusion2d(24)
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, rtol=1e-12, callback=lambda xk: True)
    assert res.info == USER_STOP
    assert res.choices[0].outcome == "stopped by the callback"
    assert all(c.outcome == "not tried" for c in res.choices[1:])


def test_pinned_method_or_preconditioner():
    A = poisson2d(16)
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, method="gmres", rtol=1e-8)
    assert {c.method for c in res.choices} == {"gmres"} and res.converged
    res = mpsolve.solve(A, b, precond="jacobi", rtol=1e-8)
    assert res.choices[0].label.startswith("cg + jacobi") and res.converged
    with pytest.raises(TypeError, match="auto"):
        mpsolve.solve(A, b, drop_tol=1e-3)
    with pytest.raises(ValueError, match="method"):
        mpsolve.solve(A, b, method="minres")



@pytest.mark.parametrize("make", [
    lambda: mpsolve.precond.ILU0(), lambda: mpsolve.precond.Jacobi(),
    lambda: mpsolve.precond.ISAI(), lambda: mpsolve.precond.ILUT(),
    lambda: mpsolve.precond.BlockISAI(variant="general"),
    lambda: mpsolve.precond.Reordered(mpsolve.precond.ILU0()),
], ids=["ilu0", "jacobi", "isai", "ilut", "block-isai-general", "reordered"])
@pytest.mark.parametrize("spd", [True, False], ids=["spd", "nonsym"])
def test_a_preconditioner_object_with_the_auto_method(make, spd):
    """``solve(A, b, precond=M)`` for an object ``M`` not yet set up: ``method="auto"``
    sets it up for each candidate's side and converges -- and CG takes it only where
    ``M`` came out symmetric (an ILUT or a general ISAI on an SPD A: GMRES)."""
    A = poisson2d(16) if spd else convection_diffusion2d(16, peclet=20)
    b = A @ np.ones(A.shape[0])
    for run in (lambda M: mpsolve.solve(A, b, precond=M, rtol=1e-8),
                lambda M: mpsolve.Solver(A, precond=M, rtol=1e-8).solve(b)):
        M = make()
        res = run(M)
        _ok(res, A, b, 1e-8)
        assert res.converged and M.is_setup
        # set up for the side the chosen method applies it on (CG "symmetric": it needs a
        # symmetric M; the others right)
        assert M._side == ("symmetric" if res.method == "cg" else "right")
        if res.method == "cg":
            assert spd and M.symmetric
        tried = [c for c in res.choices if c.outcome != "not tried"]
        assert all(c.outcome in ("converged", "chosen") or "not symmetric" in c.outcome
                   for c in tried)
    # one the caller set up is used as it is
    M = mpsolve.precond.ILU0(dtype="float64").setup(A)
    factors = M.matvec(b)
    res = mpsolve.solve(A, b, precond=M, rtol=1e-8)
    assert res.converged and np.array_equal(M.matvec(b), factors)


@pytest.mark.parametrize("kind", ["operator", "sparse", "dense"])
def test_a_matrix_or_operator_as_precond_with_the_auto_method(kind):
    """``precond=`` a matrix or a LinearOperator (applied as it is) under
    ``method="auto"``: solve, Solver and several right-hand sides converge with it (they
    raised: an AttributeError 'is_setup', SciPy's 'isnan' TypeError, NumPy's ambiguous truth
    value for an array compared with "auto")."""
    A = convection_diffusion2d(16)
    b = A @ np.ones(A.shape[0])
    d = 1.0 / A.diagonal()
    M = {"operator": spla.LinearOperator(A.shape, lambda r: d * np.ravel(r)),
         "sparse": sp.diags(d).tocsr(), "dense": np.diag(d)}[kind]
    runs = (lambda: mpsolve.solve(A, b, precond=M, rtol=1e-8),
            lambda: mpsolve.Solver(A, precond=M, rtol=1e-8).solve(b),
            lambda: mpsolve.solve(A, np.c_[b, 2 * b], precond=M, rtol=1e-8))
    its = []
    for run in runs:
        res = run()
        x = res.x if res.x.ndim == 1 else res.x[:, 0]
        assert res.converged and np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)
        its.append(res.iterations)
    # it is the preconditioner applied: Jacobi's iterations, not the bare method's
    ref = mpsolve.solve(A, b, method="bicgstab", precond="jacobi", precision="double",
                        rtol=1e-8)
    assert its[0] == its[1] == ref.iterations


def test_pinned_method_reasons_are_true_and_candidates_distinct():
    spd = poisson2d(8)
    an = auto.analyse(sp.csr_matrix(spd))
    for method in ("gmres", "bicgstab"):
        cands = auto.candidates(an, method=method)
        assert {c.method for c in cands} == {method}
        # the preconditioner was chosen for CG: say so, and not that CG failed
        assert cands[0].reason.startswith(f"method {method} pinned by the caller; the "
                                          "preconditioner of the cg candidate: ")
        assert "CG failed" not in cands[0].reason
    # CG pinned on a nonsymmetric A (real) or a non-Hermitian one (complex): warned in the
    # reason, and each preconditioner once (BiCGSTAB and GMRES shared ILU(0))
    for A, herm in ((convection_diffusion2d(8, peclet=20), "symmetric"),
                    (sp.csr_matrix(spd * (1 + 1j)), "Hermitian")):
        cands = auto.candidates(auto.analyse(sp.csr_matrix(A)), method="cg")
        assert {c.method for c in cands} == {"cg"}
        keys = [(c.precond, repr(sorted(c.params.items())), c.by_block) for c in cands]
        assert len(keys) == len(set(keys)) and cands[0].precond == "ilu0"
        assert f"(A is not {herm}: CG assumes a {herm} positive definite A" in cands[0].reason

def test_ic0_growth_test_is_blind_to_symmetric_scaling():
    """IC(0)'s growth test measures ``M A x - x`` relative to ``x = |diag A|^{-1/2}``: a
    symmetric scaling ``D A D`` (mixed units) leaves it as it was.  With the ones vector
    it read 1.9e147 on a Laplacian scaled over 1e-150..1e150, and ``precond="ilu0"``
    refused exact-to-rounding factors as unstable (no candidate could be set up)."""
    from mpsolve.precond import ILU0

    A = sp.csr_matrix(poisson2d(15))
    d = 10.0 ** np.random.default_rng(1).uniform(-75, 75, A.shape[0])
    S = sp.csr_matrix(sp.diags(d) @ A @ sp.diags(d))
    g = auto.ilu_growth(ILU0(dtype="float64").setup(A), A)
    gs = auto.ilu_growth(ILU0(dtype="float64").setup(S), S)
    assert g < 10 and abs(gs - g) <= 1e-6 * g
    b = S @ np.ones(S.shape[0])
    res = mpsolve.solve(S, b, precond="ilu0", rtol=1e-8)
    assert res.converged and res.choices[0].outcome == "converged"
    _ok(res, S, b, 1e-8)


def _growth_by_products(M, C):
    """``auto.ilu_growth``'s quantity by SciPy's product and ``M.matvec``: the oracle,
    independent of the ``ilu_growth`` kernels."""
    n = C.shape[0]
    x = np.ones(n)
    if M.symmetric:
        d = np.abs(C.diagonal()).astype(np.float64)
        d[d == 0] = 1.0
        x = 1.0 / np.sqrt(d)
    g = float(np.max(np.abs(M.matvec(C @ x) - x) / x))
    return g if np.isfinite(g) else np.inf


@pytest.mark.parametrize("kind", ["spd", "nonsymmetric", "hermitian", "complex", "blocks",
                                  "unstable", "zero-diagonal-entry", "float32-data"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_ilu_growth_kernel_matches_the_products(kind, dtype):
    """The compiled test (one kernel call: ``C x``, both sweeps, the largest term) gives
    what the products give, and the reference device's kernel, to their rounding (the
    sums' order differs; relative ``n`` eps64 of the terms), ``inf`` where they are not
    finite."""
    from mpsolve.kernels import lookup
    from mpsolve.precond import ILU0

    rng = np.random.default_rng(7)
    A = sp.csr_matrix(poisson2d(12))
    n = A.shape[0]
    kw = {}
    if kind == "nonsymmetric":
        A = sp.csr_matrix(convection_diffusion2d(12, peclet=50.0))
    elif kind == "hermitian":
        A = sp.csr_matrix(A + 1j * (sp.triu(A, 1) * 0.1 - sp.tril(A, -1) * 0.1))
    elif kind == "complex":
        A = sp.csr_matrix(A + 0.3j * sp.diags(rng.random(n)) + sp.diags(rng.random(n - 1), 1))
    elif kind == "blocks":
        kw = dict(blocks=3)
    elif kind == "unstable":
        A = sp.csr_matrix(convection_diffusion2d(32, peclet=1000.0, upwind=False))
    elif kind == "float32-data":      # C read in FP64, as the factorisation reads it
        A = sp.csr_matrix(convection_diffusion2d(12, peclet=50.0), dtype=np.float32)
    elif kind == "zero-diagonal-entry":
        # a stored zero a_33 (x_3 = 1 there); its pivot is not zero, by the elimination
        A = sp.csr_matrix(A)
        A.sort_indices()
        A.data[A.indptr[3] + np.flatnonzero(A.indices[A.indptr[3]:A.indptr[4]] == 3)] = 0.0
    if kind != "zero-diagonal-entry":
        A = sp.csr_matrix(A)
        A.sort_indices()
    M = ILU0(dtype=dtype, **kw).setup(A)
    assert M.blocks == (3 if kind == "blocks" else 1)
    if kind == "zero-diagonal-entry":
        assert M.symmetric and A[3, 3] == 0
    want = _growth_by_products(M, A)
    got = auto.ilu_growth(M, A)
    if kind == "unstable":
        assert want > 1e3 * auto.ILU_GROWTH_LIMIT and got > 1e3 * auto.ILU_GROWTH_LIMIT
    else:
        assert np.isfinite(want) and abs(got - want) <= 64 * A.shape[0] * 2.0**-52 * max(want, 1)
    op = M._op
    args = (op.bounds, op.lptr, op.lind, op.lval, op.uptr, op.uind, op.uval, op.dinv)
    wide = np.complex128 if A.dtype.kind == "c" else np.float64
    for device in ("cpu", "reference"):
        kern = lookup(device, "ilu_growth", (wide, op.dtype))
        work = [np.empty(A.shape[0], t) for t in (np.float64, wide, wide)]
        g = kern(A.indptr, A.indices, A.data.astype(wide), M.symmetric, *args, *work)
        assert g == got if device == "cpu" else (
            g == got == np.inf or abs(g - got) <= 64 * A.shape[0] * 2.0**-52 * max(g, 1))
        C = sp.csr_matrix(A.astype(wide))
        C.data[:] = np.nan                  # non-finite terms: inf
        assert kern(C.indptr, C.indices, C.data, M.symmetric, *args, *work) == np.inf


def test_pinned_cg_on_a_symmetric_zero_diagonal_matrix_is_a_status_not_an_error():
    """``method="cg"`` with the automatic preconditioner on a symmetric saddle-point matrix
    (a zero diagonal block): auto's choices for it are reordered (MC64) and so
    nonsymmetric, which CG's check refuses for a symmetric A -- that check raised out of
    ``solve`` naming a preconditioner the caller never chose.  Now no nonsymmetric M is
    set up for CG: the solve ends with CG's own status (A is indefinite), every candidate
    run under CG had a symmetric M, and auto (the method free) solves it."""
    K = poisson2d(10)
    B = sp.eye(30, 100, format="csr") + sp.random(30, 100, density=0.05, random_state=3)
    A = sp.bmat([[K, B.T], [B, None]]).tocsr()
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, method="cg", rtol=1e-8)
    assert not res.converged and "CG" in res.status
    assert {c.method for c in res.choices} == {"cg"}
    assert not any("mc64" in c.label for c in res.choices)
    res = mpsolve.solve(A, b, rtol=1e-8)
    _ok(res, A, b, 1e-8)
    assert res.converged


def test_linear_operator_gets_unpreconditioned_gmres():
    A = convection_diffusion2d(12)
    op = spla.aslinearoperator(A)
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(op, b, rtol=1e-8)
    assert res.choices[0].label.startswith("gmres + none") and res.converged
    assert res.analysis == {}


def test_dominance_with_equality_does_not_depend_on_rounding():
    """0.6 = 0.1 + 0.2 + 0.3 in exact arithmetic, not in the summation: still dominant (the
    choice of IC(0) for nos7-like matrices must not flip with the summation order)."""
    D = np.array([[0.6, -0.1, -0.2, -0.3], [-0.1, 1, 0, 0], [-0.2, 0, 1, 0], [-0.3, 0, 0, 1.0]])
    an = auto.analyse(sp.csr_matrix(D))
    assert an.dominant_rows == 1.0
    assert auto.candidates(an)[0].precond == "ilu0"
    D[0, 0] = 0.59
    assert auto.analyse(sp.csr_matrix(D)).dominant_rows == 0.75


def test_analysis_facts():
    A = sp.csr_matrix(np.array([[4.0, -1.0, 0.0], [-1.0, 4.0, -1.0], [0.0, -1.0, 4.0]]))
    an = auto.analyse(A)
    assert an.symmetric and an.positive_diagonal and an.dominant_rows == 1.0
    assert an.zero_diagonal == 0 and an.tiny_diagonal == 0 and an.fits_float32
    B = sp.csr_matrix(np.array([[1e-12, 1.0], [1.0, 0.0]]))
    an = auto.analyse(B)
    assert an.zero_diagonal == 1 and an.tiny_diagonal == 1 and an.weak_diagonal
    assert not an.positive_diagonal


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("parallel", [False, True])
def test_row_stats_kernel_matches_reference(dtype, parallel, monkeypatch):
    """``row_stats`` (the analysis' one scan) against the reference device, field by field,
    on a matrix with each case: a missing and a stored-zero diagonal, a tiny one, a
    negative one, dominant rows, an empty row, explicit zeros off the diagonal; serial and
    in parallel chunks."""
    from mpsolve.kernels import lookup
    from mpsolve.kernels.cpu import pattern

    monkeypatch.setattr(pattern, "PARALLEL_MIN", 0 if parallel else 10**9)
    rng = np.random.default_rng(7)
    n = 120
    A = sp.random(n, n, density=0.06, random_state=8, format="lil")
    for i in range(n):
        A[i, i] = 10.0 + i
    A[3, 3] = -2.0                     # negative diagonal
    A[5, 5] = 1e-13                    # tiny next to an entry of order 1
    A[5, 6] = 1.0
    A[9, 9] = 0.0                      # not stored
    A[11, :] = 0.0                     # empty row
    A = sp.csr_matrix(A)
    A.sort_indices()
    rows = np.repeat(np.arange(n), np.diff(A.indptr))
    A.data[(rows == 17) & (A.indices == 17)] = 0.0               # a stored zero diagonal
    A.data[np.flatnonzero((rows == 18) & (A.indices != 18))[0]] = 0.0   # ... and off it
    A = A.astype(dtype)
    if dtype.startswith("complex"):
        A = sp.csr_matrix(A + 1j * sp.random(n, n, density=0.03, random_state=9))
        A = A.astype(dtype)
        A.data[A.indices == np.repeat(np.arange(n), np.diff(A.indptr))] += 0j
    A.sort_indices()
    assert A.nnz > n
    args = (A.indptr, A.indices, A.data, auto.TINY, auto.EPS)
    got = lookup("cpu", "row_stats", (dtype,))(*args)
    want = lookup("reference", "row_stats", (dtype,))(*args)
    np.testing.assert_array_equal(got, want)
    assert got[0] >= 3 and got[1] >= 1 and got[5] == 0.0      # zeros, the tiny one, the -2
    an = auto.analyse(A)
    assert (an.zero_diagonal, an.tiny_diagonal) == (int(want[0]), int(want[1]))
    assert an.dominant_rows == want[2] / n and not an.positive_diagonal


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.longdouble])
def test_integer_and_long_double_matrices_are_analysed_and_solved(dtype):
    """Integer and long-double ``A`` (accepted as SciPy accepts them): the analysis is that
    of its FP64 values, and ``auto`` and named preconditioners (each set up in FP64) solve
    it to a residual checked in long double."""
    P = poisson2d(12)                                  # integer entries, made nonsymmetric
    A64 = sp.csr_matrix(P + 2.0 * sp.eye(P.shape[0], k=1) - sp.eye(P.shape[0], k=-3))
    A = A64.astype(dtype)
    assert np.array_equal(A.astype(np.float64).toarray(), A64.toarray())   # exact values
    want = auto.analyse(A64).as_dict()
    got = auto.analyse(A).as_dict()
    assert {k: v for k, v in got.items() if "time" not in k} == \
        {k: v for k, v in want.items() if "time" not in k}
    b = A64 @ np.ones(A64.shape[0])
    for kw in ({}, dict(method="gmres", precond="ilu0"), dict(method="bicgstab", precond="isai")):
        res = mpsolve.solve(A, b, rtol=1e-10, **kw)
        assert res.info == 0, (kw, res.status)
        Al = A64.astype(np.longdouble)
        x = res.x.astype(np.longdouble)
        rel = np.linalg.norm(b.astype(np.longdouble) - Al @ x) / np.linalg.norm(b)
        assert rel <= 1e-10 * (1 + 1e-6), (kw, float(rel))


def test_command_line_solve_defaults_to_auto(capsys):
    from mpsolve.cli import main

    assert main(["solve", "poisson2d:20"]) == 0
    out = capsys.readouterr().out
    assert "choice 1    cg + ilu0" in out and "analysis" in out
    assert main(["solve", "convdiff2d:16", "--precond", "ilu0", "--reorder", "mc64"]) == 0
    out = capsys.readouterr().out
    assert "bicgstab + ilu0+mc64" in out
    assert main(["solve", "poisson2d:8", "--reorder", "mc64"]) == 2
    assert "--reorder mc64 needs --precond" in capsys.readouterr().err


def test_direct_fallback_only_for_matrices_it_fits(monkeypatch):
    an = auto.analyse(convection_diffusion2d(16))
    assert any(c.params.get("drop_tol") == 0.0 for c in auto.candidates(an))
    # its reason says whether the LU is complete (a dense one fits) or its fill bounded
    for k, words in ((16, "a complete LU"), (100, "fill bounded at 50 nnz(A)")):
        direct = [c for c in auto.candidates(auto.analyse(convection_diffusion2d(k)))
                  if c.params.get("drop_tol") == 0.0]
        assert len(direct) == 1 and words in direct[0].reason
    monkeypatch.setattr(auto, "DIRECT_MAX_ENTRIES", an.nnz)
    assert not any(c.params.get("drop_tol") == 0.0 for c in auto.candidates(an))



def test_a_tolerance_below_every_precision_floor_stops_at_the_first_candidate():
    """rtol = atol = 0 asks for a residual nothing can certify: the first candidate
    escalates to ``eft`` and stagnates at its floor, and no further candidate is set up
    (each used to be, and ran 0 iterations).  ``info`` is SciPy's: the iterations done."""
    A = poisson2d(10)
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, rtol=0.0, atol=0.0)
    assert not res.converged and res.at_floor and res.precision == "eft"
    tried = [c for c in res.choices if c.outcome != "not tried"]
    assert len(tried) == 1 and "accuracy floor" in tried[0].outcome
    assert res.info == res.iterations == tried[0].iterations > 0
    ok = mpsolve.solve(A, b, rtol=1e-8)
    assert ok.converged and not ok.at_floor


@pytest.mark.parametrize("x_exact, rtol, floor", [
    ("random", 1e-17, "FP64's rounding of b - A x"),   # the pair meets it; x rounded cannot
    ("ones", 1e-30, "accuracy floor of precision 'eft'"),  # Dot2 residual 0, its bound not
])
def test_a_tolerance_below_fp64_rounding_says_why_and_stops(x_exact, rtol, floor):
    """Below what an FP64 x can meet, the EFT stages end with the reason (they ended with
    info > 0 and no reason, and auto set up every other candidate for 0 iterations each,
    each one's outcome 'iteration budget spent')."""
    A = poisson2d(12)
    x = np.ones(A.shape[0]) if x_exact == "ones" else \
        np.random.default_rng(0).standard_normal(A.shape[0])
    b = A @ x
    direct = mpsolve.solve(A, b, rtol=rtol, method="cg", precond="ilu0", precision="mixed")
    assert floor in direct.status
    for res in (direct, mpsolve.solve(A, b, rtol=rtol)):
        assert not res.converged and res.at_floor
        assert res.info == res.iterations > 0 and res.x_lo is not None
        # x: the pair rounded to FP64 (measured 2.7 u here)
        assert np.linalg.norm(res.x - x) <= 10 * EPS * np.linalg.norm(x)
    tried = [c for c in res.choices if c.outcome != "not tried"]
    assert len(tried) == 1 and "accuracy floor" in tried[0].outcome


def test_direct_fallback_is_a_complete_lu_where_a_dense_one_fits():
    """A random sparse skew-symmetric matrix plus 0.01 I: every incomplete candidate
    stagnates, and SuperLU's LU drops what exceeds its fill bound even at drop_tol=0
    (bounded at 50 nnz(A) it stagnated too, info 2040).  Where a dense LU fits, the last
    resort's bound cannot bind: its factors solve the system in one GMRES iteration."""
    n = 1000
    S = sp.random(n, n, density=3 / n, random_state=5, format="csr")
    A = (S - S.T + 1e-2 * sp.eye(n)).tocsr()
    b = A @ np.ones(n)
    fill = auto.direct_fill_factor(n, A.nnz)
    assert fill * A.nnz >= n * n + n                    # L + U can hold a dense LU
    res = mpsolve.solve(A, b, rtol=1e-8)
    _ok(res, A, b, 1e-8)
    last = [c for c in res.choices if not c.bare][-1]
    assert res.converged and last.params == {"reorder": "mc64", "drop_tol": 0.0,
                                             "fill_factor": fill, "symmetric": False}
    assert last.outcome == "converged" and last.iterations <= 2
    # beyond a dense LU's size the fill stays bounded; beyond the entry budget, no candidate
    big = 10 ** 5
    assert auto.direct_fill_factor(big, 5 * big) == auto.DIRECT_FILL
    assert auto.direct_fill_factor(big, auto.DIRECT_MAX_ENTRIES) is None

def test_direct_fallback_is_an_exact_lu_of_a_symmetric_indefinite_matrix(monkeypatch):
    """A shifted 2-D Laplacian (symmetric, positive diagonal, indefinite): with its fill
    bounded (n = 7225 in the report; here the dense bound made small), the last resort's
    ILUT took its symmetric, Manteuffel-shifted form -- ``||M A e - e|| = 0.14``, no LU --
    and auto ended unsolved where SciPy's spsolve is exact.  It is the pivoting LU now."""
    from mpsolve.precond import make_preconditioner

    m = 30
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    A = (sp.kron(T, sp.eye(m)) + sp.kron(sp.eye(m), T) - 0.2 * sp.eye(m * m)).tocsr()
    monkeypatch.setattr(auto, "DIRECT_MAX_ENTRIES", auto.DIRECT_FILL * A.nnz)
    direct = [c for c in auto.candidates(auto.analyse(A)) if c.params.get("drop_tol") == 0.0]
    assert len(direct) == 1 and "fill bounded" in direct[0].reason
    M = make_preconditioner(direct[0].precond, **direct[0].params)
    M.setup(A, dtype="float64")
    e = np.ones(A.shape[0])
    assert np.linalg.norm(M.matvec(A @ e) - e) <= 1e-10 * np.linalg.norm(e)
    b = A @ np.random.default_rng(7).standard_normal(A.shape[0])
    res = mpsolve.solve(A, b, rtol=1e-10)
    _ok(res, A, b, 1e-10)


def test_symmetry_is_ilu0s_own_test():
    """auto calls A symmetric exactly when ILU(0) uses its symmetric (IC(0)) form, so CG is
    never handed a nonsymmetric ILU(0)."""
    from mpsolve.precond import ILU0

    A = poisson2d(10).tolil()
    A[0, 1] *= 1 + 1e-9                     # 1e-9 relative, in one entry
    for M in (poisson2d(10), sp.csr_matrix(A)):
        assert auto.analyse(M).symmetric == ILU0().setup(M).symmetric
    assert not auto.analyse(sp.csr_matrix(A)).symmetric
    res = mpsolve.solve(sp.csr_matrix(A), np.ones(100), rtol=1e-8)
    assert res.method != "cg" and res.converged
    assert all(c.method != "cg" for c in res.choices)


@pytest.mark.parametrize("seed", range(12))
def test_never_a_false_success_on_random_matrices(seed):
    """Random sparse matrices -- some with zero diagonals, some singular, some badly
    scaled: whatever auto reports, 'converged' means the FP64 true residual meets rtol."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    A = sp.random(n, n, density=float(rng.uniform(0.05, 0.4)), random_state=rng, format="csr")
    if seed % 3:
        A = A + sp.diags(rng.uniform(-1, 1, n) * (seed % 2))
    if seed % 4 == 0:
        A = sp.diags(10.0 ** rng.uniform(-8, 8, n)) @ A
    A = sp.csr_matrix(A)
    b = rng.standard_normal(n)
    res = mpsolve.solve(A, b, rtol=1e-8, maxiter=300)
    _ok(res, A, b, 1e-8)
    assert res.iterations <= 300
    assert res.status and (res.converged or "tried" in res.status or res.info != 0)


@pytest.mark.parametrize("scale", [1.0, 2.0**600, 2.0**-600])
def test_candidates_run_on_the_checked_problem_as_on_a_fresh_one(scale, monkeypatch):
    """auto runs each candidate on the problem it checked (``derive_problem``: A and b not
    checked again); the answer is bit for bit what solve() gives the same candidate with
    the same M, from the same start.  A b whose norm needs scaling (outside 2^+-500) takes
    solve()'s own path, which scales it."""
    from mpsolve import _system
    from mpsolve.precond import ILU0

    A = sp.csr_matrix(convection_diffusion2d(12, peclet=5.0))
    n = A.shape[0]
    b = scale * (A @ np.linspace(1.0, 2.0, n))
    x0 = np.full(n, 0.5 * scale)
    derived = []
    real = _system.derive_problem

    def spy(*a, **k):
        out = real(*a, **k)
        derived.append(out)
        return out

    monkeypatch.setattr(auto, "derive_problem", spy)
    b_copy, x0_copy = b.copy(), x0.copy()
    res = mpsolve.solve(A, b, x0, rtol=1e-9)
    assert np.array_equal(b, b_copy) and np.array_equal(x0, x0_copy)
    c = res.choices[0]
    assert (c.method, c.precond, c.outcome) == ("bicgstab", "ilu0", "converged")
    assert (derived[0] is None) == (scale != 1.0)
    M = ILU0(dtype="float32")
    M.setup(A)
    ref = mpsolve.solve(A, b, x0, method="bicgstab", precond=M, rtol=1e-9,
                        precision="mixed")
    assert res.iterations == ref.iterations
    assert np.array_equal(res.x, ref.x)
    # the true residual in units where it cannot overflow (scale is a power of two)
    r = b / scale - A @ (res.x / scale)
    assert res.converged and np.linalg.norm(r) <= 1e-9 * np.linalg.norm(b / scale)


def test_ic0_set_up_reuses_the_analysis_symmetry_test(monkeypatch):
    """auto's analysis runs the symmetry test (``symmetric_mirror``) on A's arrays; the
    IC(0) set-up of the first candidate, on those very arrays, takes its verdict and
    transpose positions instead of running it again -- and factors the same bits as an
    ILU0 set up on its own.  A hint for other arrays (another A, a copy) is not used."""
    from mpsolve.precond import ILU0
    from mpsolve.precond import ilu as ilu_mod

    calls = []
    real = ilu_mod.lookup

    def counting(device, op, *a, **k):
        f = real(device, op, *a, **k)
        if op != "symmetric_mirror":
            return f

        def g(*args):
            calls.append(args[0])
            return f(*args)
        return g

    A = sp.csr_matrix(poisson2d(12) + sp.diags(np.linspace(0.0, 1.0, 144)))
    b = A @ np.ones(144)
    import mpsolve.kernels as kernels_mod

    monkeypatch.setattr(ilu_mod, "lookup", counting)
    monkeypatch.setattr(auto, "lookup", counting)
    monkeypatch.setattr(kernels_mod, "lookup", counting)     # (is_symmetric's, _sparse)
    r = mpsolve.solve(A, b, rtol=1e-8)
    assert (r.method, r.precond, r.info) == ("cg", "ilu0", 0)
    assert len(calls) == 1                            # the analysis's only

    an = auto.analyse(A)
    C = sp.csr_matrix(A)                              # other arrays (a copy)
    C.data = C.data.copy()
    M = ILU0(dtype=np.float64)
    M.mirror_hint = an.mirror_hint
    calls.clear()
    M.setup(C)
    assert len(calls) == 1 and M.mirror_hint is None  # computed again; the hint dropped
    M2 = ILU0(dtype=np.float64)
    M2.mirror_hint = an.mirror_hint[:3] + (True, an.mirror_hint[4])
    calls.clear()
    M2.setup(A)                                       # A canonical: its own arrays
    assert len(calls) == 0 and M2.symmetric
    x = np.linspace(-1.0, 1.0, 144)
    y, y2 = np.empty(144), np.empty(144)
    M.apply(x, y)
    M2.apply(x, y2)
    assert np.array_equal(y, y2)


def test_zero_right_hand_side_solves_to_zero_even_where_nothing_sets_up():
    """SciPy's rule, x = 0 for b = 0, holds under auto also for a matrix that no
    preconditioner can be set up for (the zero matrix); a nonzero b there ends with the
    bare GMRES's breakdown, which says A is singular."""
    Z = sp.csr_matrix((3, 3))
    for x0 in (None, np.ones(3)):
        res = mpsolve.solve(Z, np.zeros(3), x0)
        assert res.info == 0 and res.converged and not res.x.any()
        assert "zero right-hand side" in res.status
    res = mpsolve.solve(Z, np.ones(3))
    assert res.info == -13 and not res.converged and "singular" in res.status


def _scaled(A, seed=0, spread=6):
    """``D1 A D2`` for diagonal ``D1``, ``D2`` of random powers of 10 in 1e-spread..1e+spread."""
    rng = np.random.default_rng(seed)
    n = A.shape[0]
    return sp.csr_matrix(sp.diags(10.0 ** rng.uniform(-spread, spread, n)) @ A
                         @ sp.diags(10.0 ** rng.uniform(-spread, spread, n)))


def test_scaling_rows_and_columns_does_not_make_a_diagonal_tiny():
    """ILU(0) is equivariant under diagonal scaling, so auto's choice for it must not
    depend on the units of rows and unknowns.  A central-difference convection-diffusion
    matrix scaled ``D1 A D2`` over 1e-6..1e6: next to its row's largest stored entry, its
    diagonal was "tiny" in hundreds of rows, ILU(0)'s pivots were refused and the growth
    test with the ones vector saw 1e8; in the equilibrated matrix neither is the case, and
    BiCGSTAB + ILU(0) solves it as it solves the unscaled matrix."""
    A0 = sp.csr_matrix(convection_diffusion2d(40, peclet=50.0, upwind=False))
    A = _scaled(A0)
    d = np.abs(A.diagonal())
    rowmax = np.abs(A).max(axis=1).toarray().ravel()
    assert np.count_nonzero(d <= auto.TINY * rowmax) > 100     # tiny as stored
    for M in (A0, A):
        b = M @ np.ones(M.shape[0])
        res = mpsolve.solve(M, b, rtol=1e-8)
        assert res.analysis["tiny_diagonal"] == 0
        first = res.choices[0]
        assert first.label == "bicgstab + ilu0 [mixed]" and first.outcome == "converged"
        assert _ok(res, M, b, 1e-8) <= 1e-8


def test_equilibrated_growth_is_blind_to_the_scaling_and_keeps_unstable_factors_out():
    """:func:`auto.equilibrated_growth` is the same for ``A`` and ``D1 A D2`` (to the
    rounding of the powers of 2 of the scaling), and still refuses factors that are
    unstable whatever the scaling (central differences at Peclet 1000)."""
    from mpsolve.precond import ILU0

    A0 = sp.csr_matrix(convection_diffusion2d(40, peclet=50.0, upwind=False))
    g = []
    for A in (A0, _scaled(A0), _scaled(A0, seed=3, spread=3)):
        M = ILU0(dtype=np.float64).setup(A)
        g.append(auto.equilibrated_growth(M, A))
    assert max(g) <= 10 and max(g) <= 4 * min(g)
    U = sp.csr_matrix(convection_diffusion2d(32, peclet=1000.0, upwind=False))
    M = ILU0(dtype=np.float64).setup(U)
    assert auto.equilibrated_growth(M, U) > auto.ILU_GROWTH_LIMIT


def test_unstable_ilut_factors_warn_and_are_refused_as_ilu0s():
    """ILUTP's dropping with row pivoting can give factors whose triangular solves grow
    without bound although SuperLU accepted every pivot: on the scaled central-difference
    matrix GMRES(30) with them stalled.  The set-up measures the growth (``stats``), warns
    by name where it exceeds the limit, and auto refuses such factors as ILU(0)'s."""
    from mpsolve.precond import ILUT, PreconditionerWarning
    from mpsolve.precond.ilu import GROWTH_LIMIT

    A0 = sp.csr_matrix(convection_diffusion2d(40, peclet=50.0, upwind=False))
    A = _scaled(A0)
    with pytest.warns(PreconditionerWarning, match=r"ILUT\(drop_tol=0.001, fill_factor=10\): "
                      r"unstable factors: \|\|M A e - e\|\|_inf = .* lower drop_tol"):
        M = ILUT().setup(A)
    assert M.stats["growth"] > GROWTH_LIMIT
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", PreconditionerWarning)
        assert ILUT().setup(A0).stats["growth"] < 1.0
    res = mpsolve.solve(A, A @ np.ones(A.shape[0]), rtol=1e-8, precond="ilut")
    assert not res.converged and res.iterations == 0
    assert [c.outcome.split(":")[1].strip() for c in res.choices if not c.bare] == \
        ["UnstableFactorsError"] * 2


@pytest.mark.parametrize("maxiter", [40, 300])
def test_auto_never_runs_past_the_callers_iteration_budget(maxiter):
    """GMRES candidates are capped by their inner iterations (``max_inner``), across
    restarts, double-double refinement steps and escalations: their once-a-cycle monitor
    only estimated them, and a nearly singular matrix whose candidates refine in
    double-double ran 307 iterations under ``maxiter=300``."""
    rng = np.random.default_rng(4)
    n = int(rng.integers(5, 60))
    A = sp.random(n, n, density=float(rng.uniform(0.05, 0.4)), random_state=rng, format="csr")
    rng.uniform(-1, 1, n)                # (the draws of the random-matrix test's seed 4)
    A = sp.csr_matrix(sp.diags(10.0 ** rng.uniform(-8, 8, n)) @ A)
    b = rng.standard_normal(n)
    res = mpsolve.solve(A, b, rtol=1e-8, maxiter=maxiter)
    ran = [c for c in res.choices if c.iterations]
    # (or the first candidate's double-double answer met the tolerance: auto stops there)
    assert (len(ran) >= 2 or "double-double answer x + x_lo met" in ran[0].outcome) and \
        any(c.method == "gmres" for c in ran)
    assert sum(c.iterations for c in ran) == res.iterations <= maxiter
    _ok(res, A, b, 1e-8)


@pytest.mark.parametrize("precision", ["double", "eft", "ir"])
def test_an_inner_iteration_cap_spans_the_whole_solve(precision):
    """``max_inner`` (SciPy's legacy GMRES maxiter, auto's GMRES share) bounds the inner
    iterations of the whole solve: a body the driver calls again (a residual replacement
    after its recursive residual met the tolerance and the true one did not, a
    double-double refinement step, an iterative-refinement step) gets what is left of
    it.  A stand-in body halves the error of its system's solution (a correction's, in a
    refinement) per call, 10 iterations each."""
    from mpsolve import driver

    A = sp.csr_matrix(poisson2d(6))
    b = A @ np.ones(A.shape[0])
    seen = []

    def body(sys, x, r, maxiter, tol, callback, hist, max_inner=None):
        seen.append(max_inner)
        it = min(10, max_inner)
        x += 0.5 * (spla.spsolve(sp.csc_matrix(A), np.asarray(sys.b, np.float64)) - x)
        hist.extend([0.0] * it)
        return 1, it, 0                  # "converged" by its own residual

    res = driver.run("gmres", body, A, b, rtol=1e-14, maxiter=1000, precision=precision,
                     body_kw={"max_inner": 25})
    assert seen[0] == 25 and seen[1:] and all(0 < m <= 25 for m in seen)
    assert sum(min(10, m) for m in seen) == res.iterations <= 25 and res.info > 0


def test_an_operator_without_entries_gets_cg_where_a_probe_finds_it_symmetric():
    """A ``LinearOperator`` has no entries to analyse: two products with fixed random
    vectors tell a symmetric operator with ``u^T A u > 0``, which gets CG first (about
    half GMRES(30)'s iterations on a 2-D Laplacian), GMRES after it; a nonsymmetric or
    negative one gets GMRES alone, as before.  The same choice on every run."""
    P = sp.csr_matrix(poisson2d(30))
    b = P @ np.ones(P.shape[0])
    res = mpsolve.solve(spla.aslinearoperator(P), b, rtol=1e-8)
    assert [c.method for c in res.choices] == ["cg", "gmres"]
    assert res.method == "cg" and res.converged and _ok(res, P, b, 1e-8) <= 1e-8
    again = mpsolve.solve(spla.aslinearoperator(P), b, rtol=1e-8)
    assert again.iterations == res.iterations and np.array_equal(again.x, res.x)
    gm = mpsolve.solve(P, b, rtol=1e-8, method="gmres", precond=None)
    assert res.iterations < gm.iterations
    for B in (sp.csr_matrix(convection_diffusion2d(20, peclet=10.0)), -P):
        rhs = B @ np.ones(B.shape[0])
        r = mpsolve.solve(spla.aslinearoperator(B), rhs, rtol=1e-8)
        assert [c.method for c in r.choices] == ["gmres"] and r.converged
    # complex: Hermitian passes, complex-symmetric (not Hermitian) does not
    H = sp.csr_matrix(P + 1j * (sp.triu(P, 1) - sp.tril(P, -1)) * 0.1)
    assert abs(H - H.conj().T).max() == 0
    rh = H @ np.ones(H.shape[0])
    assert mpsolve.solve(spla.aslinearoperator(H), rh, rtol=1e-8).choices[0].method == "cg"
    S = sp.csr_matrix(P + 1j * sp.eye(P.shape[0]))
    r = mpsolve.solve(spla.aslinearoperator(S), S @ np.ones(S.shape[0]), rtol=1e-8)
    assert [c.method for c in r.choices] == ["gmres"]


def test_an_indefinite_symmetric_operator_that_passes_the_probe_falls_back_to_gmres():
    """``u^T A u > 0`` is necessary, not sufficient: a symmetric indefinite operator with
    mostly positive eigenvalues passes the probe, CG breaks down (or stagnates), and
    GMRES solves from where it stopped, within the caller's budget."""
    P = sp.csr_matrix(poisson2d(20))
    A = sp.csr_matrix(P - 0.5 * sp.eye(P.shape[0]))
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(spla.aslinearoperator(A), b, rtol=1e-8, maxiter=2000)
    assert res.choices[0].method == "cg"
    assert res.converged and _ok(res, A, b, 1e-8) <= 1e-8
    assert res.iterations <= 2000


def test_float32_data_iterates_on_until_the_rounded_answer_meets_the_tolerance():
    """Float32 data get a float32 ``x``, whose rounding alone can take a residual that met
    the tolerance over it: auto's candidate iterates on to a tighter tolerance, as an
    explicit method does (a 2-D Laplacian, rtol 1e-6: 1.01e-6 returned as a failure
    before), and where even that cannot help (below float32's floor) ends at once with
    the rounding named, not with the next candidate."""
    A = sp.csr_matrix(poisson2d(50)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal(A.shape[0]).astype(np.float32)
    A64, b64 = A.astype(np.float64), b.astype(np.float64)
    res = mpsolve.solve(A, b, rtol=1e-6)
    assert res.x.dtype == np.float32 and res.converged
    rel = np.linalg.norm(b64 - A64 @ res.x.astype(np.float64)) / np.linalg.norm(b64)
    assert rel <= 1e-6
    explicit = mpsolve.solve(A, b, rtol=1e-6, method=res.method, precond=res.choices[0].precond)
    assert explicit.converged
    low = mpsolve.solve(A, b, rtol=1e-8)
    assert not low.converged and "x rounded to float32 misses the tolerance" in low.status
    assert [c.outcome for c in low.choices].count("not tried") == len(low.choices) - 1


def test_a_structurally_singular_diagonal_system_is_scaled():
    """A diagonal A with a zero entry (structurally singular: MC64 refuses it, and every
    candidate with it), values over 1e-5..1e5, b consistent: GMRES alone stopped at a
    residual of 0.85 after 330 iterations; the diagonal scaling (1 / |a_ii|, the row's
    largest for the zero entry) solves it in a step or two."""
    rng = np.random.default_rng(5)
    n = 200
    d = rng.standard_normal(n) * 10.0 ** rng.uniform(-5, 5, n)
    d[0] = 0.0
    A = sp.diags(d).tocsr()
    b = np.r_[0.0, rng.standard_normal(n - 1)]
    res = mpsolve.solve(A, b, rtol=1e-8)
    assert res.converged and res.iterations <= 3 and _ok(res, A, b, 1e-8) <= 1e-8
    with pytest.raises(ValueError, match="zero_diagonal='x'"):
        mpsolve.precond.Jacobi(zero_diagonal="x")
    M = mpsolve.precond.Jacobi(dtype="float64", zero_diagonal="row").setup(
        sp.csr_matrix(np.array([[0.0, -4.0], [1.0, 2.0]])))
    np.testing.assert_array_equal(M.matvec(np.ones(2)), [0.25, 0.5])


@pytest.mark.parametrize("n", [600, 1000])
def test_a_failed_auto_returns_its_best_answer_never_worse_than_the_start(n):
    """An inconsistent singular system (a connected graph Laplacian, random b) that no
    candidate solves: auto returned the last candidate's x -- 4.1 and 8.3 times ||b||
    where x = 0 has 1 and a candidate had reached 0.15 --, each candidate starting from the
    one before.  Now the next candidate starts from the best answer so far, and the answer
    is the best one (or the start), as the status says."""
    rng = np.random.default_rng(0)
    i, j = rng.integers(0, n, 2 * (5 * n // 2)).reshape(2, -1)
    keep = i != j
    W = sp.coo_matrix((rng.random(keep.sum()), (i[keep], j[keep])), (n, n)).tocsr()
    W = W + W.T + sp.diags([np.ones(n - 1)], [1], (n, n)) + sp.diags([np.ones(n - 1)], [-1], (n, n))
    L = sp.csr_matrix(sp.diags(np.asarray(W.sum(1)).ravel()) - W)
    b = np.random.default_rng(7).standard_normal(n)
    r = mpsolve.solve(L, b)
    assert not r.converged
    tried = [c.true_residual for c in r.choices
             if c.outcome != "not tried" and c.true_residual is not None
             and np.isfinite(c.true_residual)]
    own = np.linalg.norm(b - L @ r.x) / np.linalg.norm(b)
    assert r.true_residual == pytest.approx(own, rel=1e-6)    # (x cancels: FP64 rounding)
    assert r.true_residual <= min(tried + [1.0]) * (1 + 1e-12)
    if r.true_residual < tried[-1]:
        assert "smallest true residual" in r.status or "x is the start" in r.status


def test_ilut_candidates_after_slow_ilut_set_ups_are_skipped(monkeypatch):
    """ILUT set-ups fill in more from one candidate to the next (drop tolerance 1e-3, MC64,
    then a bounded LU): where those before took longer than the iterations left are
    estimated to (``_iteration_cost`` times them, at least 10 s), the rest are skipped --
    a skew-symmetric random matrix of 10^4 unknowns spent 24 + 11 + 37 s in them and then
    failed, where GMRES with the diagonal scaling converges.  Forced here with a cap of 0."""
    n = 1000
    R = sp.random(n, n, density=5 / n, random_state=0, format="csr")
    A = sp.csr_matrix(R - R.T + 1e-2 * sp.eye(n))
    b = np.random.default_rng(7).standard_normal(n)
    free = mpsolve.solve(A, b)
    assert free.converged and not any("set-ups before it took" in c.outcome
                                      for c in free.choices)
    assert 0.0 < auto._iteration_cost(auto.make_problem(A, b)) < 1.0
    monkeypatch.setattr(auto, "_iteration_cost", lambda problem: 0.0)
    monkeypatch.setattr(auto, "SETUP_CAP_MIN", 0.0)
    r = mpsolve.solve(A, b)
    skipped = [c for c in r.choices if "the ILUT set-ups before it took" in c.outcome]
    assert skipped and all(c.precond == "ilut" and c.setup_seconds == 0.0 for c in skipped)
    ran = [c for c in r.choices if c.precond == "ilut" and c.setup_seconds > 0]
    assert len(ran) == 1                                  # the first ILUT only
    own = np.linalg.norm(b - A @ r.x) / np.linalg.norm(b)
    assert r.true_residual == pytest.approx(own, rel=1e-6)
    assert r.converged == (own <= 1e-5)                   # (honest either way)


def test_auto_keeps_a_double_double_answer_that_meets_the_tolerance():
    """SPD, condition 1e14, rtol 1e-5: CG + IC(0)'s double-double answer ``x + x_lo`` meets
    the tolerance, ``x`` rounded to FP64 cannot (its residual 4e-2 is FP64's rounding of
    ``b - A x`` at an ``x`` of norm 1e14 ``||b||``).  auto went on through five more
    candidates and returned GMRES + Jacobi's x without ``x_lo`` (exact residual 5e-2); it
    now stops there, as the README says, with the low part."""
    from fractions import Fraction

    n = 2000
    e = np.ones(n)
    A = sp.diags([-e[:-1], 2 * e, -e[:-1]], [-1, 0, 1], format="csr")
    A = sp.csr_matrix(A - (2 - 2 * np.cos(np.pi / (n + 1))) * (1 - 1e-14) * sp.eye(n))
    b = np.random.default_rng(7).standard_normal(n)
    r = mpsolve.solve(A, b)
    assert not r.converged and r.at_floor and r.x_lo is not None
    assert "double-double answer x + x_lo met the tolerance" in r.status
    assert sum(c.outcome != "not tried" for c in r.choices) == 1
    # x + x_lo meets it, exactly (rational arithmetic on the tridiagonal rows)
    xs = [Fraction(float(h)) + Fraction(float(lo)) for h, lo in zip(r.x, r.x_lo)]
    d, off = Fraction(float(A[0, 0])), Fraction(-1)
    res2 = 0
    for i in range(n):
        s = Fraction(float(b[i])) - d * xs[i]
        if i:
            s -= off * xs[i - 1]
        if i < n - 1:
            s -= off * xs[i + 1]
        res2 += s * s
    assert float(res2) <= (1e-5 * np.linalg.norm(b)) ** 2


def test_mhd4800a_reaches_the_direct_fallback_on_every_run():
    """mhd4800a (2995 zero diagonal entries): both ILUTs fail (unstable factors), the
    direct fallback solves in one iteration.  With a 1 s floor on the ILUT time cap its
    first ILUT (1.0-1.3 s) skipped the fallback on some runs: no convergence, a choice
    that depended on the machine's noise."""
    from conftest import load_collection_matrix

    A = load_collection_matrix("mhd4800a")
    b = A @ np.ones(A.shape[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = mpsolve.solve(A, b, rtol=1e-8, maxiter=5000)
    assert r.converged and r.iterations <= 3
    assert not any("set-ups before it took" in c.outcome for c in r.choices)
    chosen = [c for c in r.choices if c.outcome.startswith("converged")]
    assert chosen and "direct fallback" in chosen[0].reason, [str(c) for c in r.choices]
