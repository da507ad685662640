"""Precision policies, escalation and iterative refinement (issue: mixed precision + EFT)."""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import mpsolve
from mpsolve import PRESETS, Precision
from mpsolve.matrices import (anisotropic2d, convection_diffusion2d, elasticity3d, poisson2d,
                               poisson3d)

from conftest import load_collection_matrix, manifest

RTOL = 1e-10


def test_presets_match_the_design_table():
    table = {  # working, matrix, precond, dot
        "double": ("float64", "float64", "float64", "native"),
        "single": ("float32", "float32", "float32", "native"),
        "mixed": ("float64", "float64", "float32", "native"),
        "eft": ("float64", "float64", "float64", "compensated"),
        "mixed-eft": ("float64", "float64", "float32", "compensated"),
        "ir": ("float64", "float64", "float32", "native"),
    }
    for name, want in table.items():
        p = PRESETS[name]
        assert (p.working, p.matrix, p.precond, p.dot) == want, name
    ir = PRESETS["ir"]
    assert ir.inner is not None and ir.inner.working == "float32" and ir.inner.matrix == "float32"


def test_precision_is_frozen_and_validated():
    p = Precision.preset("mixed")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.working = "float32"
    with pytest.raises(ValueError, match="working"):
        Precision(working="float16")
    with pytest.raises(ValueError, match="dot"):
        Precision(dot="kahan")
    with pytest.raises(ValueError, match="unknown precision preset"):
        Precision.preset("quad")
    # the inner policy by a preset's name; anything else named (an AttributeError of
    # 'str' before), and None is no precision (np.dtype(None) made it float64)
    assert Precision(inner="single").inner == PRESETS["single"]
    with pytest.raises(ValueError, match="Precision.inner='quad'"):
        Precision(inner="quad")
    with pytest.raises(TypeError, match="Precision.inner=3"):
        Precision(inner=3)
    with pytest.raises(ValueError, match="Precision.working=None"):
        Precision(working=None)


def test_escalation_ladder_ends_in_fp64_compensated():
    p = PRESETS["single"]
    seen = [p.name]
    while p.stronger() is not None:
        p = p.stronger()
        seen.append(p.name)
    assert seen == ["single", "ir", "mixed", "mixed-eft", "eft"]
    custom = Precision("mine", "float32", "float32", "float32", "float32", "native")
    up = custom.stronger()
    assert up.working == up.matrix == "float64"
    top = up.stronger()                 # then the dots and the residual, as 'eft' has them
    assert (top.dot, top.residual, top.precond) == ("compensated", "dd", "float32")
    last = top.stronger()               # and last its preconditioner
    assert (last.precond, last.stronger()) == ("float64", None)


def test_custom_policies_escalate_to_the_double_double_residual():
    """A custom policy (or a preset with a field replaced: the ladder follows the fields)
    ends where ``eft`` does, with compensated dots *and* the double-double residual: at a
    tolerance FP64's x cannot meet, its solve reported failure (info > 0, "at the
    accuracy floor") on the very x that 'double' -> 'eft' accepts."""
    A = poisson2d(16).tocsr()
    b = np.random.default_rng(1).standard_normal(A.shape[0])
    policies = ["double", Precision("mine", matrix="float32"),
                Precision("mine2", dot="compensated"),
                dataclasses.replace(PRESETS["mixed"], precond="float64")]
    for p in policies:
        r = mpsolve.solve(A, b, method="cg", precond="jacobi", precision=p, rtol=1e-14)
        assert r.info == 0 and r.true_residual <= 1e-14, (p, r.status)
        assert r.escalations[-1].to_precision.endswith(("eft", "+dd"))
    # a preset's name with other fields is not that preset: no FP64 M moved back to FP32,
    # and an 'eft' without its double-double residual is not the top of the ladder
    up = dataclasses.replace(PRESETS["mixed"], precond="float64").stronger()
    assert (up.precond, up.dot, up.residual) == ("float64", "compensated", "dd")
    assert dataclasses.replace(PRESETS["eft"], residual="fp64").stronger().residual == "dd"
    # ... and it ends where 'eft' does, its preconditioner in FP64 last: an FP32 M that
    # does not fit (Jacobi's inverse diagonal of A ~ 1e-40) escalates, as from the preset
    tiny = (poisson2d(10) * 1e-40).tocsr()
    for p in (dataclasses.replace(PRESETS["mixed-eft"], residual="fp64"),
              dataclasses.replace(PRESETS["mixed"], dot="compensated")):
        top = p
        while top.stronger() is not None:
            top = top.stronger()
        assert (top.working, top.matrix, top.precond, top.dot, top.residual) == \
            ("float64", "float64", "float64", "compensated", "dd")
        r = mpsolve.solve(tiny, tiny @ np.ones(100), method="cg", precond="jacobi",
                          precision=p, rtol=1e-8)
        assert r.converged and r.escalations, (p.name, r.status)


def test_default_precision_follows_the_data():
    A = poisson3d(6)
    b = A @ np.ones(A.shape[0])
    assert mpsolve.solve(A, b, method="cg", precond=None).precision == "double"
    assert mpsolve.solve(A.astype(np.float32), b.astype(np.float32), method="cg", precond=None).precision == "single"


# ----------------------------------------------------------------- problem sets
def _spd_problems():
    out = [("poisson3d:16", poisson3d(16)), ("elasticity3d:6", elasticity3d(6)),
           ("anisotropic2d:40", anisotropic2d(40, epsilon=1e-2))]
    for row in manifest():
        if row["likely_spd"] == "yes" and int(row["nnz"]) <= 150_000:
            out.append((row["name"], None))
    return out


SPD = _spd_problems()


def _matrix(name, A):
    return load_collection_matrix(name) if A is None else A


def _accurate_residual(A, b, x):
    """``||b - A x||_2`` with each row correctly rounded (the reference's ``fsum_dot`` of
    ``(b_i, a_i)`` with ``(1, -x)``): an FP64 ``b - A x`` of nos7 (cond 4e9) is mostly
    rounding error at 1e-10, the level these solves are judged at."""
    from mpsolve.kernels.reference import fsum_dot

    A = sp.csr_matrix(A)
    x = np.asarray(x, dtype=np.float64)
    rows = [fsum_dot(np.r_[b[i], A.data[A.indptr[i]:A.indptr[i + 1]]],
                     np.r_[1.0, -x[A.indices[A.indptr[i]:A.indptr[i + 1]]]])
            for i in range(A.shape[0])]
    return float(np.linalg.norm(rows))


def _prec_for(A):
    from mpsolve.precond import Jacobi

    return Jacobi


@pytest.mark.parametrize("name,A", SPD, ids=[s[0] for s in SPD])
def test_mixed_and_eft_reach_fp64_accuracy_where_double_does(name, A, table):
    """`mixed`/`mixed-eft` reach 1e-10 wherever `double` does; `eft` needs no more
    iterations than `double` (up to a 2% rounding allowance); `single` never claims a
    false success."""
    A = _matrix(name, A)
    b = A @ np.ones(A.shape[0])
    maxiter = 20 * A.shape[0] if A.shape[0] < 2000 else 10_000
    res = {}
    for prec in ("double", "eft", "mixed", "mixed-eft"):
        res[prec] = mpsolve.solve(A, b, method="cg", precond="jacobi", precision=prec,
                                  rtol=RTOL, maxiter=maxiter)
    single = mpsolve.solve(A, b, method="cg", precond="jacobi", precision="single", rtol=RTOL,
                           maxiter=maxiter, escalate=False)
    single_esc = mpsolve.solve(A, b, method="cg", precond="jacobi", precision="single",
                               rtol=RTOL, maxiter=maxiter)
    table("CG + Jacobi iterations to a true relative residual of 1e-10",
          ["matrix", "double", "eft", "mixed", "mixed-eft", "single(no esc.)", "single->escalated"]
          ).append([name] + [f"{res[p].iterations}{'' if res[p].converged else '(F)'}"
                             for p in ("double", "eft", "mixed", "mixed-eft")]
                   + [f"info={single.info}", f"{single_esc.iterations} via "
                      + ">".join([single_esc.escalations[0].from_precision]
                                 + [e.to_precision for e in single_esc.escalations])
                      if single_esc.escalations else f"{single_esc.iterations}"])
    for prec, r in res.items():                      # info tells the truth:
        true = _accurate_residual(A, b, r.x) / np.linalg.norm(b)
        if r.converged:                              # converged: the residual meets rtol
            assert true <= RTOL * (1 + 1e-6), prec
        else:                                        # not: the certified one does not
            assert r.true_residual > RTOL, prec
    if res["double"].converged:
        assert res["mixed"].converged and res["mixed-eft"].converged
        assert res["eft"].converged
        assert res["eft"].iterations <= res["double"].iterations * 1.02 + 1
    # single asked for 1e-10 cannot reach it in FP32: never a false success
    assert single.info != 0
    assert single.true_residual > RTOL
    # with escalation on, it escalates (and then reaches the goal wherever double does)
    assert single_esc.escalations
    if res["double"].converged:
        assert single_esc.converged


def test_single_stagnation_escalates_with_reason():
    A = poisson3d(20)
    b = A @ np.ones(A.shape[0])
    r = mpsolve.solve(A, b, method="cg", precision="single", rtol=1e-10, precond=None)
    assert r.converged and r.true_residual <= 1e-10
    assert r.escalations[0].from_precision == "single"
    assert "floor" in r.escalations[0].reason
    assert r.precision != "single"


@pytest.mark.parametrize("method", ["cg", "gmres", "bicgstab"])
def test_stagnation_is_detected_from_drift(method):
    """FP32 on a problem whose FP32 accuracy floor lies above the tolerance although
    the tolerance is above eps_fp32: b is a smooth mode, so ||A|| ||x|| / ||b|| ~ cond(A)
    ~ 4e3.  The FP32 iteration believes it has converged while the FP64 true residual
    stalls near 5e-5: the driver sees the drift, reports it, and escalates when allowed."""
    n = 100
    A = poisson2d(n)
    s = np.sin(np.pi * np.arange(1, n + 1) / (n + 1))
    b = A @ np.kron(s, s)
    off = mpsolve.solve(A, b, method=method, precision="single", rtol=1e-5, escalate=False,
                        maxiter=3000, precond=None)
    assert off.info > 0 and not off.converged
    assert off.true_residual > 1e-5
    assert "stagnated" in off.status
    on = mpsolve.solve(A, b, method=method, precision="single", rtol=1e-5, maxiter=3000, precond=None)
    assert on.converged and on.true_residual <= 1e-5
    assert on.escalations[0].from_precision == "single"
    assert "stagnated" in on.escalations[0].reason
    assert on.iterations < 500  # detected early, not after exhausting maxiter


@pytest.mark.parametrize("method", ["cg", "gmres", "bicgstab"])
def test_iterative_refinement_reaches_fp64_accuracy(method):
    A = poisson3d(14) if method == "cg" else convection_diffusion2d(40, peclet=20)
    b = A @ np.linspace(1, 2, A.shape[0])
    r = mpsolve.solve(A, b, method=method, precond="jacobi", precision="ir", rtol=1e-12,
                      escalate=False)
    assert r.converged
    assert np.linalg.norm(b - A @ r.x) <= 1e-12 * np.linalg.norm(b)
    assert r.precision == "ir"


def test_iterative_refinement_stagnates_on_fp32_singular_matrix():
    """A matrix with condition ~1e9 (beyond 1/eps_fp32): FP32 inner solves cannot make
    progress; refinement stagnates and escalates instead of iterating forever."""
    n = 200
    d = np.logspace(0, -9, n)
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    A = sp.csr_matrix((Q * d) @ Q.T)
    A = (A + A.T) * 0.5
    b = A @ np.ones(n)
    off = mpsolve.solve(A, b, method="gmres", precision="ir", rtol=1e-12, escalate=False,
                        restart=50, maxiter=200, precond=None)
    assert not off.converged
    on = mpsolve.solve(A, b, method="gmres", precision="ir", rtol=1e-12, restart=50, maxiter=200, precond=None)
    assert on.escalations and on.escalations[0].from_precision == "ir"


def test_ir_callback_sees_fp64_iterates():
    """Under refinement the callback is called as the method calls it: each iteration with
    the FP64 iterate x + ||r|| d (not only after each refinement step), the last one the
    answer; its residuals fall to the tolerance."""
    A = poisson3d(10)
    b = A @ np.ones(A.shape[0])
    seen = []
    r = mpsolve.solve(A, b, method="cg", precision="ir", rtol=1e-12, escalate=False,
                      callback=lambda x: seen.append(x.copy()), precond=None)
    assert r.converged and all(s.dtype == np.float64 for s in seen)
    assert len(seen) == r.iterations > 3                  # one a CG iteration
    res = [np.linalg.norm(b - A @ s) / np.linalg.norm(b) for s in seen]
    assert res[0] > 1e-3 and res[-1] <= 1e-11
    assert np.linalg.norm(seen[-1] - r.x) <= 1e-6 * np.linalg.norm(r.x)


@pytest.mark.parametrize("precision", ["ir", "single"])
def test_ir_gmres_residual_norm_callbacks_as_scipy(precision):
    """GMRES's 'pr_norm'/'legacy' callbacks under refinement get NumPy scalars: each inner
    iteration's residual norm over ||b|| in the caller's units (the inner system's norm
    times ||r||); 'legacy' caps the inner iterations of all steps together."""
    rng = np.random.default_rng(1)
    A = rng.random((20, 20)) + 20 * np.eye(20)
    b = rng.random(20)
    seen = []
    x, info = mpsolve.gmres(A, b, rtol=1e-12, atol=0.0, callback=seen.append, restart=5,
                            callback_type="pr_norm", precision=precision)
    assert info == 0 and len(seen) >= 2
    assert all(isinstance(v, np.float64) and v.ndim == 0 for v in seen)
    assert seen[0] < 1.0 and min(seen) <= 1e-11      # the caller's units: ||r|| / ||b||
    seen.clear()
    x, info = mpsolve.gmres(A, b, rtol=1e-12, atol=0.0, callback=seen.append, restart=50,
                            maxiter=3, callback_type="legacy", precision=precision)
    assert info == 3 and len(seen) == 3


def test_nonfinite_iteration_is_never_silent():
    """A preconditioner producing NaN: the solve reports info=-14 and returns a finite x."""
    from scipy.sparse.linalg import LinearOperator

    A = poisson3d(6)
    b = A @ np.ones(A.shape[0])
    calls = [0]

    def mv(r):
        calls[0] += 1
        out = r.copy()
        if calls[0] > 3:
            out[0] = np.nan
        return out

    M = LinearOperator(A.shape, matvec=mv)
    x, info = mpsolve.cg(A, b, M=M, rtol=1e-12)
    assert info == -14
    assert np.isfinite(x).all()


@pytest.mark.parametrize("pc", ["jacobi", "ilu0", "isai"])
def test_left_gmres_stops_at_the_floor_instead_of_cycling_to_maxiter(pc, monkeypatch):
    """Left-preconditioned GMRES with a tolerance below FP64's floor and no escalation:
    each cycle met its (preconditioned) target, SciPy's rule tightened the next one, a
    cycle that missed the tighter target relaxed it again -- in turns for all 2000 cycles
    (about 40,000 iterations), ending without a reason.  Now a claim whose tighter target
    did not halve the true residual hands back to the driver, which calls it the floor."""
    A = poisson2d(12)
    b = A @ np.random.default_rng(0).standard_normal(A.shape[0])
    res = mpsolve.solve(A, b, method="gmres", precond=pc, side="left", rtol=1e-17,
                        maxiter=2000, precision="double", escalate=False)
    assert not res.converged and res.info < 50 and res.iterations < 1000
    assert "stagnated at the accuracy floor of precision 'double'" in res.status
    assert res.true_residual < 1e-15
    # block GMRES's columns, by the same rule
    monkeypatch.setenv("MPSOLVE_BLOCK", "1")
    B = np.column_stack([b, A @ np.ones(A.shape[0])])
    block = mpsolve.solve(A, B, method="gmres", precond=pc, side="left", rtol=1e-17,
                          maxiter=2000, precision="double", escalate=False)
    assert block.rhs_mode == "block" and not block.converged
    assert np.asarray(block.column_iterations).max() < 1000


@pytest.mark.parametrize("precision", ["double", "single"])
def test_left_gmres_with_a_singular_m_is_not_called_the_floor(precision):
    """Left GMRES minimises ||M r||: with M singular (its last row zero) M r goes to zero
    while r stays near 8e-2 ||b||.  The driver's stagnation used to be reported as "the
    accuracy floor of precision 'double'" (``at_floor``), though the floor is 1e-15; now
    the status says the true residual stagnated far above it, and why."""
    n = 200
    rng = np.random.default_rng(0)
    A = sp.diags([rng.uniform(-1, 0, n - 1), 4 + rng.uniform(0, 1, n),
                  rng.uniform(-1, 0.5, n - 1)], [-1, 0, 1]).tocsr()
    b = A @ np.ones(n)
    M = sp.diags(np.r_[np.ones(n - 1), 0.0]).tocsr()
    res = mpsolve.solve(A, b, method="gmres", precond=M, side="left", rtol=1e-10,
                        precision=precision, escalate=False)
    assert res.info > 0 and res.true_residual > 1e-3 and not res.at_floor
    assert "stagnated far above the accuracy floor" in res.status, res.status
    assert "singular" in res.status


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("precond", ["jacobi", None])
def test_fp32_gmres_below_its_floor_stops_instead_of_cycling_to_maxiter(side, precond):
    """GMRES in FP32 (escalate=False) with a tolerance below FP32's floor: the cycles'
    targets are never met, so the met-target rules never end them; a floor of five cycles
    without a new lowest residual hands back (before: all 300 cycles, and 9000 at
    SciPy's default maxiter).  With escalate=True the same solve converges in FP64."""
    from mpsolve.matrices import poisson2d

    A = poisson2d(30).tocsr()
    b = np.random.default_rng(0).standard_normal(900)
    kw = dict(method="gmres", precond=precond, precision="single", rtol=1e-10, side=side,
              maxiter=300)
    r = mpsolve.solve(A, b, escalate=False, **kw)
    assert r.info > 0 and "accuracy floor of precision 'single'" in r.status
    assert r.restarts < 40 and r.true_residual < 1e-5
    assert mpsolve.solve(A, b, escalate=True, **kw).info == 0


@pytest.mark.parametrize("precision", ["single", "mixed", "ir"])
def test_a_start_that_meets_the_tolerance_is_kept_in_any_working_precision(precision):
    """x0 whose FP64 residual meets the tolerance: returned as it is, 0 iterations,
    info 0 -- in an FP32 working precision too (it was rounded to FP32 first and then
    judged: info 1 at rtol 1e-4, or 'converged' with an x 14x worse than x0)."""
    import scipy.sparse as sp

    n = 200
    A = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n)).tocsr()
    xs = np.sin(np.arange(1, n + 1) * np.pi * 3 / (n + 1))
    b = A @ xs
    for rtol in (1e-4, 1e-6):
        r = mpsolve.solve(A, b, xs, method="cg", precond=None, precision=precision,
                          rtol=rtol, escalate=False)
        assert r.info == 0 and r.iterations == 0 and np.array_equal(r.x, xs)


@pytest.mark.parametrize("case,precision,M,want", [
    # A's values past float32's range (M's fit): every policy with an FP32 A is passed over
    ("big", "single", "ilu0", [("single", "mixed")]),
    ("big", "ir", "jacobi", [("ir", "mixed")]),
    # D A D, D = 1e25 / 1e-25 by turns: neither A nor its preconditioner fit float32
    ("dad", "mixed", "ilu0", [("mixed", "eft")]),
    ("dad", "mixed-cb", "isai", [("mixed-cb", "eft")]),
    ("dad", "ir", "ilu0", [("ir", "eft")]),
    ("dad", "single", "ilu0", [("single", "mixed"), ("mixed", "eft")]),
])
def test_a_range_error_escalates_past_policies_that_fail_the_same_way(case, precision, M,
                                                                      want):
    """After a float32 range error the solve goes to the first stronger policy that keeps
    the part that did not fit in FP64: it went through every rung of the ladder, setting
    up each again (mixed -> mixed-eft -> eft with the same FP32 M; single -> ir -> mixed
    with the same FP32 A)."""
    from mpsolve.matrices import generate
    A = generate("convdiff2d:12,peclet=5").tocsr()
    n = A.shape[0]
    if case == "big":
        A = sp.csr_matrix(A * 1e39)
    else:
        d = np.where(np.arange(n) % 2 == 0, 1e25, 1e-25)
        A = sp.csr_matrix(sp.diags(d) @ A @ sp.diags(d))
    b = A @ np.ones(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                  # (ISAI's singular local systems)
        r = mpsolve.solve(A, b, method="gmres", precond=M, precision=precision, side="right")
    got = [(e.from_precision, e.to_precision) for e in r.escalations]
    assert got == want, [str(e) for e in r.escalations]
    assert all("float32 range" in e.reason for e in r.escalations)
    assert r.info == 0 and np.linalg.norm(b - A @ r.x) <= 1e-5 * np.linalg.norm(b)


def test_float32_data_under_an_fp64_policy_leave_room_for_the_answers_rounding():
    """Float32 data get x in float32.  Under ``double``/``mixed``/``eft`` the FP64 iterate
    that met rtol 1e-6 (well above float32's rounding) could miss it once rounded (1.004e-6)
    and the solve said info > 0; it now iterates on to a tolerance that leaves room."""
    from mpsolve.matrices import generate
    A = sp.csr_matrix(generate("poisson3d:5")).astype(np.float32)
    A64 = A.astype(np.float64)
    B = np.random.default_rng(0).integers(1, 5, (200, A.shape[0])).astype(np.float32)
    for prec in ("double", "mixed"):
        for b in B:
            r = mpsolve.solve(A, b, method="gmres", precond="ilu0", rtol=1e-6, precision=prec)
            assert r.info == 0 and r.x.dtype == np.float32, r.status
            b64 = b.astype(np.float64)
            assert np.linalg.norm(b64 - A64 @ r.x.astype(np.float64)) <= \
                1e-6 * np.linalg.norm(b64)


def test_auto_does_not_stop_at_a_stagnated_candidates_own_floor():
    """A stagnated candidate's large, cancelling x has a floor of its own (u |A| |x|): auto
    called that "the accuracy floor ... below what any candidate can certify" (info 85 at
    2.4e-8) and stopped; the next candidate (the direct fallback) meets rtol 1e-10."""
    n = 12
    H = sp.csr_matrix([[1.0 / (i + j + 1) for j in range(n)] for i in range(n)])
    b = H @ np.ones(n)
    r = mpsolve.solve(H, b, method="gmres", rtol=1e-10)
    assert r.info == 0 and not r.at_floor
    assert np.linalg.norm(b - H @ r.x) <= 1e-10 * np.linalg.norm(b)
    A = poisson2d(20)
    r = mpsolve.solve(A, A @ np.random.default_rng(1).standard_normal(400), rtol=1e-20)
    assert r.at_floor and r.info > 0                 # a floor of every answer: still one
    assert r.choices[0].outcome.startswith("stopped at the accuracy floor")


def test_iterative_refinement_with_a_small_budget_is_not_called_stagnated():
    """ir's correction solves get a tenth of the budget: with maxiter 40-100, restarted CG
    of 4-10 iterations did not halve the residual and that was called a stagnation (status
    "far above the accuracy floor ... singular preconditioner", or a false escalation to
    mixed) with most of the budget left; a correction now gets at least MIN_STEP, and a
    budget that runs out is not called a stagnation."""
    from mpsolve.matrices import generate

    A = generate("poisson3d:20")
    b = A @ np.random.default_rng(0).standard_normal(A.shape[0])
    for pc in (None, "jacobi"):
        r = mpsolve.solve(A, b, method="cg", precond=pc, precision="ir", escalate=False,
                          rtol=1e-6, maxiter=100)
        assert r.info == 0 and r.precision == "ir" and not r.escalations
    r = mpsolve.solve(A, b, method="cg", precond=None, precision="ir", escalate=False,
                      rtol=1e-6, maxiter=3)
    assert r.info == 3 and "stagnat" not in r.status


def test_a_tiny_b_with_a_moderate_atol_is_solved_by_x0():
    """||b|| <= atol: x0 is the answer (SciPy); with b scaled into range atol's scaling
    overflowed (OverflowError: math range error)."""
    A = sp.diags([-np.ones(49), 2.5 * np.ones(50), -np.ones(49)], [-1, 0, 1], format="csr")
    for b, atol in ((np.full(50, 1e-320), 1.0), (np.full(50, 1e-200), 1e120)):
        x, info = mpsolve.cg(A, b, atol=atol)
        assert info == 0 and not x.any()
        assert mpsolve.solve(A, b, atol=atol).info == 0
        assert mpsolve.Solver(A, method="cg").solve(b, atol=atol).info == 0
        assert list(mpsolve.solve(A, np.column_stack([b, b]), method="cg",
                                  atol=atol).column_info) == [0, 0]


def test_auto_escalations_end_at_the_answers_precision():
    """precision is the policy that produced the answer; escalations listed every
    candidate's, so the last one could end elsewhere ('ir', then [('ir', 'mixed')] of a
    failed CG candidate): now the answer's, the others' in their Choice."""
    A = poisson2d(12).astype(complex)
    U = sp.triu(A, 1)
    A = sp.csr_matrix(A + 0.3j * (U - U.T))
    r = mpsolve.solve(A, A @ np.ones(144), precision="ir", rtol=1e-6)
    assert r.info == 0
    assert not r.escalations or r.escalations[-1].to_precision == r.precision
    ran = [c for c in r.choices if c.outcome != "not tried"]
    assert any(c.escalations for c in ran[:-1])      # (the CG candidate's, kept there)


def test_a_linear_operator_returning_complex_values_for_a_real_dtype_is_refused():
    """NumPy dropped the imaginary parts into the real buffers (a ComplexWarning) and the
    solve reported success at a residual of 1e-2; SciPy reports a failure."""
    A = sp.diags([-np.ones(19), 2.5 * np.ones(20), -np.ones(19)], [-1, 0, 1], format="csr")
    L = spla.LinearOperator((20, 20), matvec=lambda v: (A @ v) * (1 + 1e-2j), dtype=float)
    with pytest.raises(TypeError, match="A.matvec returned complex values"):
        mpsolve.gmres(L, np.ones(20), rtol=1e-8)
    M = spla.LinearOperator((20, 20), matvec=lambda v: v * (1 + 1e-2j), dtype=float)
    with pytest.raises(TypeError, match="M.matvec returned complex values"):
        mpsolve.solve(A, np.ones(20), method="gmres", precond=M)
    R = spla.LinearOperator((20, 20), matvec=lambda v: (A @ v) + 0j, dtype=float)
    assert mpsolve.gmres(R, np.ones(20), rtol=1e-8)[1] == 0   # (zero imaginary parts: fine)
