"""Defaults that work: every preconditioner picked by name, with no other parameter,
converges with CG on SPD problems and with GMRES (left and right) and BiCGSTAB on
nonsymmetric ones -- no breakdown, no stagnation -- on problems of several kinds
(coefficient jumps, anisotropy, block coupling, convection), and takes no more
iterations than Jacobi on at least 90% of the runs.
"""
from __future__ import annotations

import numpy as np
import pytest

import mpsolve
from mpsolve.matrices import (anisotropic3d, convection_diffusion3d, coupled_convdiff2d,
                              elasticity3d, jump3d)
from mpsolve.precond import REGISTRY

SPD = {
    "jump3d": lambda: jump3d(12, contrast=1e4),
    "anisotropic3d": lambda: anisotropic3d(12, eps=(1.0, 1e-2, 1e-3)),
    "elasticity3d": lambda: elasticity3d(6),
}
NONSYM = {
    "convdiff3d-pe100": lambda: convection_diffusion3d(12, peclet=100.0),
    "coupled2d": lambda: coupled_convdiff2d(16, peclet=50.0),
}
RUNS = ([(p, "cg", {}) for p in SPD]
        + [(p, "gmres", {"side": s, "restart": 30}) for p in list(SPD) + list(NONSYM)
           for s in ("left", "right")]
        + [(p, "bicgstab", {}) for p in list(SPD) + list(NONSYM)])
PRECONDS = sorted(REGISTRY)
_CACHE = {}


def _matrix(name):
    if name not in _CACHE:
        A = (SPD.get(name) or NONSYM[name])()
        _CACHE[name] = (A, A @ np.ones(A.shape[0]))
    return _CACHE[name]


def _solve(problem, method, kw, precond):
    A, b = _matrix(problem)
    return mpsolve.solve(A, b, method=method, precond=precond, rtol=1e-8, maxiter=3000, **kw)


def _id(run):
    p, m, kw = run
    return f"{p}-{m}" + (f"-{kw['side']}" if "side" in kw else "")


@pytest.mark.parametrize("precond", PRECONDS)
@pytest.mark.parametrize("run", RUNS, ids=[_id(r) for r in RUNS])
def test_default_preconditioner_converges(run, precond, table):
    problem, method, kw = run
    res = _solve(problem, method, kw, precond)
    jac = _solve(problem, method, kw, "jacobi") if precond != "jacobi" else res
    table("Preconditioner defaults (iterations; Jacobi's in brackets)",
          ["problem", "method", "precond", "info", "iterations", "jacobi"]).append(
        [problem, method + ("/" + kw["side"] if "side" in kw else ""), precond, res.info,
         res.iterations, jac.iterations])
    _RESULTS[(_id(run), precond)] = (res.iterations, jac.iterations)
    assert res.info == 0, res.summary()
    assert res.true_residual <= 1e-8


_RESULTS: dict = {}


def test_defaults_beat_jacobi_on_90_percent_of_the_runs():
    """Over every (problem, method, preconditioner) run above (run first when the
    whole file runs), no more iterations than Jacobi in at least 90% of them."""
    if len(_RESULTS) < len(RUNS) * len(PRECONDS):
        for run in RUNS:
            for pc in PRECONDS:
                if (_id(run), pc) not in _RESULTS:
                    r = _solve(*run, pc)
                    j = _solve(*run, "jacobi")
                    _RESULTS[(_id(run), pc)] = (r.iterations, j.iterations)
    better = [it <= jac for it, jac in _RESULTS.values()]
    worse = sorted(k for k, (it, jac) in _RESULTS.items() if it > jac)
    assert np.mean(better) >= 0.9, f"worse than Jacobi: {worse}"


@pytest.mark.parametrize("precond", ["isai", "block-isai"])
def test_auto_variant_follows_symmetry_and_side(precond):
    A, b = _matrix("jump3d")
    r = mpsolve.solve(A, b, method="cg", precond=precond, rtol=1e-8)
    assert "variant=spd" in r.precond_detail and "symmetric" in r.precond_detail
    N, c = _matrix("coupled2d")
    left = mpsolve.solve(N, c, method="gmres", precond=precond, rtol=1e-8)
    right = mpsolve.solve(N, c, method="gmres", side="right", precond=precond, rtol=1e-8)
    assert "variant=general" in left.precond_detail
    assert "variant=right" in right.precond_detail


def _noisy(A, rel, seed=0):
    """``A`` with each stored value times ``1 + rel * N(0, 1)``: symmetric but for assembly
    noise of relative size ``rel``."""
    A = A.tocsr(copy=True)
    A.data *= 1.0 + rel * np.random.default_rng(seed).standard_normal(A.nnz)
    return A


@pytest.mark.parametrize("precond", ["isai", "block-isai"])
def test_cg_gets_a_symmetric_isai_for_a_nearly_symmetric_a(precond):
    """An SPD matrix with 1e-11 relative assembly noise is nonsymmetric to the symmetry
    test (1e-12), and the default variant was then ``general``: a nonsymmetric, indefinite
    ``M`` that broke CG down at its first iteration (info -12).  Under CG the default is the
    SPD form, through ``solve``, the SciPy-style ``cg`` and a preconditioner object."""
    from mpsolve.precond import make_preconditioner

    A = _noisy(jump3d(10, contrast=1e4), 1e-11)
    b = np.random.default_rng(1).standard_normal(A.shape[0])
    r = mpsolve.solve(A, b, method="cg", precond=precond, rtol=1e-8)
    assert r.info == 0 and r.true_residual <= 1e-8, r.summary()
    assert "variant=spd" in r.precond_detail
    M = make_preconditioner(precond)
    x, info = mpsolve.cg(A, b, rtol=1e-8, M=M)
    assert info == 0 and M.variant == "spd" and "needs a symmetric M" in M.variant_reason
    assert np.linalg.norm(b - A @ x) <= 1.01e-8 * np.linalg.norm(b)
    # GMRES keeps the side's approximate inverse
    g = mpsolve.solve(A, b, method="gmres", precond=precond, rtol=1e-8)
    assert g.info == 0 and "variant=general" in g.precond_detail
    # A far from symmetric under CG: still the symmetric form, with a warning that says so
    with pytest.warns(mpsolve.precond.PreconditionerWarning, match="under a method that"):
        make_preconditioner(precond).setup(_noisy(A, 1e-3), side="symmetric")


def test_right_variant_is_a_right_approximate_inverse():
    """``variant="right"`` gives ``A M ~ I`` exactly where ``general`` gives ``M A ~ I``:
    its residual ``||A M - I||_F`` is the smaller of the two on a nonsymmetric matrix,
    and it is the transpose of ``general`` on ``A^T``."""
    from mpsolve.precond import ISAI

    A, _ = _matrix("coupled2d")
    I = np.eye(A.shape[0])
    Mr = ISAI("right", dtype="float64").setup(A).to_sparse()
    Ml = ISAI("general", dtype="float64").setup(A).to_sparse()
    right_err = np.linalg.norm((A @ Mr).toarray() - I)
    left_on_right = np.linalg.norm((A @ Ml).toarray() - I)
    assert right_err < left_on_right
    Mt = ISAI("general", dtype="float64").setup(A.T.tocsr()).to_sparse()
    assert abs(Mr - Mt.T).max() == 0
