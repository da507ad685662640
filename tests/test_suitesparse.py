"""Every matrix of the SuiteSparse test collection, every method, against SciPy.

``b = A @ ones``, zero start, Jacobi where the diagonal has no zero (else no
preconditioner), true relative residual 1e-8.  For each method (CG only on the
SPD matrices):

* mpsolve tells the truth: ``info == 0`` exactly when the FP64 true residual of
  the returned ``x`` meets the tolerance (``info != 0`` otherwise), up to the rounding
  of the residual's own evaluation where it sits at that level;
* it agrees with SciPy's same method and preconditioner: both reach the
  tolerance or both do not, and the iteration counts are close.  SciPy is judged
  by its true residual too (it can report ``info == 0`` for an ``x`` that misses
  the tolerance); a run that fails counts as using the whole budget, so "close"
  also covers a run that converges near the budget while the other just misses.

  - CG: the same algorithm; counts agree within a few percent.
  - GMRES: both precondition from the left (mpsolve's default) and translate the
    preconditioned estimate into the true-residual test the same way; counts agree.
    (Right preconditioning is compared in ``test_api.py``.)
  - BiCGSTAB: its iteration count is chaotic in rounding -- SciPy's own count on
    add20 moves between 206 and 1254 when ``b`` is perturbed by 1e-14.  SciPy and
    mpsolve are run on ``b`` and two such perturbations, and one of mpsolve's counts
    must fall in the range SciPy's span (with the same margin).

The per-matrix iteration table is printed at the end of the test run.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import mpsolve

from conftest import COLLECTION, load_collection_matrix, manifest

RTOL = 1e-8
MAXITER = 1500          # iterations (inner iterations for GMRES)
RESTART = 20

ROWS = manifest()
pytestmark = pytest.mark.skipif(not ROWS, reason=f"no test collection at {COLLECTION}")


def _cases():
    for row in ROWS:
        spd = row["likely_spd"] == "yes"
        for m in (["cg"] if spd else []) + ["gmres", "bicgstab"]:
            yield pytest.param(row["name"], m, id=f"{row['name']}-{m}")


def _close(a, b):
    return abs(a - b) <= max(10, 0.35 * max(a, b))


@pytest.mark.parametrize("name,method", list(_cases()))
def test_agrees_with_scipy(name, method, table):
    A = load_collection_matrix(name)
    n = A.shape[0]
    b = A @ np.ones(n)
    bn = np.linalg.norm(b)
    d = A.diagonal()
    M = sp.diags(1.0 / d).tocsr() if (d != 0).all() else None
    kw = dict(rtol=RTOL, M=M)
    if method == "gmres":
        kw.update(restart=RESTART, maxiter=MAXITER // RESTART)
    else:
        kw.update(maxiter=MAXITER)

    def ours(rhs):
        return mpsolve.solve(A, rhs, method=method, precond=M,
                             **{k: v for k, v in kw.items() if k != "M"})

    res = ours(b)
    true_m = np.linalg.norm(b - A @ res.x) / bn
    # two FP64 evaluations of b - A x (ours one product at a time from b, SciPy's A @ x then
    # b minus it) differ by up to about (row length + 2) eps (|b| + |A| |x|) per entry:
    # where the residual sits at that level (nos7, cond 4e9) only that much agreement
    noise = ((np.diff(A.indptr).max() + 2) * np.finfo(float).eps
             * np.linalg.norm(abs(b) + abs(A) @ abs(res.x)) / bn)
    assert abs(res.true_residual - true_m) <= 1e-6 * true_m + noise
    assert (res.info == 0) == (true_m <= RTOL) or abs(true_m - RTOL) <= noise, res.status
    assert np.isfinite(res.x).all()

    def scipy_run(rhs):
        count = [0]

        def cb(_):
            count[0] += 1

        if method == "gmres":
            x, info = spla.gmres(A, rhs, rtol=RTOL, restart=RESTART, maxiter=MAXITER // RESTART,
                                 M=M, callback=cb, callback_type="pr_norm")
        else:
            fn = {"cg": spla.cg, "bicgstab": spla.bicgstab}[method]
            x, info = fn(A, rhs, callback=cb, **kw)
        true = np.linalg.norm(rhs - A @ x) / np.linalg.norm(rhs)
        return count[0], info, true

    it_raw, info_s, true_s = scipy_run(b)
    ok_s = bool(true_s <= RTOL)
    it_m = res.iterations if res.converged else MAXITER
    it_s = it_raw if ok_s else MAXITER
    lo = hi = it_s
    mine = [it_m]
    if method == "bicgstab":
        rng = np.random.default_rng(0)
        for _ in range(2):
            rhs = b * (1 + 1e-14 * rng.standard_normal(n))
            c, _, t = scipy_run(rhs)
            c = c if t <= RTOL else MAXITER
            lo, hi = min(lo, c), max(hi, c)
            # and ours on the same perturbed b: the spreads are compared, not one draw
            # (494_bus: ours 521-1444 and one miss over 8 draws, SciPy's 455-1405 and one)
            r = ours(rhs)
            mine.append(r.iterations if r.converged else MAXITER)
    table("SuiteSparse: iterations to true relative residual 1e-8 (Jacobi; F = not reached)",
          ["matrix", "method", "M", "mpsolve", "scipy", "scipy range (bicgstab)",
           "mpsolve true res", "scipy true res"]
          ).append([name, method, "jacobi" if M is not None else "none",
                    f"{res.iterations}{'' if res.converged else ' F'}",
                    f"{it_raw}{'' if ok_s else ' F'}{' (info=0!)' if info_s == 0 and not ok_s else ''}",
                    f"{lo}-{hi}" if method == "bicgstab" else "",
                    f"{true_m:.1e}", f"{true_s:.1e}"])
    # mpsolve reaching the true tolerance where SciPy's run does not (its true residual is
    # checked above) is no disagreement: nos7 (cond 4e9), where SciPy's CG stops on its
    # recursive residual at 3.7e-8, and rounding decides whether ours gets there
    better = res.converged and not ok_s and it_m <= 3 * max(it_raw, 1)
    assert better or any(_close(c, lo) or _close(c, hi) or lo <= c <= hi for c in mine), (
        f"mpsolve {res.iterations} it ({res.status}); scipy {it_raw} it (info {info_s}, true "
        f"residual {true_s:.2e}; range over perturbed b {lo}-{hi}; ours there {mine})")
