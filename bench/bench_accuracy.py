"""Accuracy of the precision presets where the solution is known: issue 15's goals.

Run ``python -m mpsolve.bench.bench_accuracy [--quick] [--out FILE]`` on an otherwise idle
machine.  Writes Markdown (default ``bench/results/accuracy.md``).

Problems (x0 = 0):

* generated, integer matrices with an integer solution ``x*`` (entries in [-100, 100]),
  so ``b = A x*`` is exact in FP64 and the forward error is measured against the exact
  solution: 3-D diffusion with integer coefficient jumps (``jump3d-int``: each cell's
  coefficient 1 or J, a face gets the smaller of its two cells'; J = 1e6 .. 1e9, n = 14^3
  = 2744 as in the issue), strong anisotropy (``aniso3d-int``: coefficients 1e6, 1e3, 1
  along x, y, z), a diagonally scaled Laplacian (``scaled-lap``: D L D, D = diag(2^k),
  k uniform in [0, 16], integer entries), and a nonsymmetric one (jumps plus integer
  upwind convection, GMRES(30) with at most 250 cycles, and BiCGSTAB);
* ill-conditioned matrices of the shared SuiteSparse set: ``b = fl(A x*_int)`` for an
  integer ``x*_int`` (the product computed exactly and rounded once), and the exact
  solution ``x*`` of the FP64 system ``A x = b`` taken from a dense LU refined with the
  exactly rounded residual of the reference device (``residual_dd``: ``math.fsum`` of
  exact products) and ``x`` kept as the exactly rounded pair (``dd_axpy``), until the
  correction is below 1e-28 of ``x`` -- the reference's own error is far below FP64's u.

For each problem and policy (``escalate=False``) at ``rtol = 1e-16`` -- below the FP64
floor, so each policy goes as far as it can: the normwise forward error
``||x - x*|| / ||x*||``, the true relative residual computed exactly (the reference
device's ``residual_dd``, exact products summed by ``math.fsum``), iterations, solve time
and time per iteration.  SciPy (and PETSc where petsc4py imports) run the same method and
preconditioner at the same ``rtol`` (their own stopping rules).

A second table: iterations of ``double`` against ``eft`` (and ``eft`` with native
reductions, to see which part moves them) at ``rtol = 1e-10``, where one Krylov solve
is enough for every policy: the issue's iteration goal; on the same systems and on
larger ones (n = 60^3, 40^3 for GMRES), whose time per iteration is the iterations' own
cost (the policies' runs interleaved, best of ``--repeat``).

Times are the best of ``--repeat`` runs (default 3) after a warm-up; the machine may be
shared: compare ratios within a row.
"""
from __future__ import annotations

import argparse
import math
import pathlib
import platform
import sys
import time
from dataclasses import replace

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from mpsolve import Precision, solve
from mpsolve.kernels import lookup
from mpsolve.matrices import anisotropic3d, poisson3d

from .bench_setup import best_of

ROOT = pathlib.Path(__file__).resolve().parents[1]
POLICIES = ["double", "mixed", "eft", "mixed-eft"]
U = 2.0 ** -53
RESTART = 30

_RES = lookup("reference", "residual_dd", ("float64",))
_DDAXPY = lookup("reference", "dd_axpy", ("float64",))


# ------------------------------------------------------------------ problems
def int_jump3d(m, jump, seed=0):
    """Integer 3-D diffusion, cell coefficients 1 or ``jump`` (faces: the smaller)."""
    rng = np.random.default_rng(seed)
    k = np.where(rng.random((m, m, m)) < 0.5, 1, int(jump)).astype(np.int64)
    idx = np.arange(m ** 3).reshape(m, m, m)
    rows, cols, vals = [], [], []
    diag = np.zeros(m ** 3, dtype=np.int64)
    for ax in range(3):
        lo = [slice(None)] * 3
        hi = [slice(None)] * 3
        lo[ax], hi[ax] = slice(0, m - 1), slice(1, m)
        kf = np.minimum(k[tuple(lo)], k[tuple(hi)]).ravel()
        i0, i1 = idx[tuple(lo)].ravel(), idx[tuple(hi)].ravel()
        rows += [i0, i1]
        cols += [i1, i0]
        vals += [-kf, -kf]
        np.add.at(diag, i0, kf)
        np.add.at(diag, i1, kf)
        for s in (0, m - 1):
            sl = [slice(None)] * 3
            sl[ax] = s
            np.add.at(diag, idx[tuple(sl)].ravel(), k[tuple(sl)].ravel())
    rows.append(np.arange(m ** 3))
    cols.append(np.arange(m ** 3))
    vals.append(diag)
    A = sp.csr_matrix((np.concatenate(vals).astype(np.float64),
                       (np.concatenate(rows), np.concatenate(cols))), shape=(m ** 3,) * 2)
    A.sum_duplicates()
    A.sort_indices()
    return A


def int_aniso3d(m):
    A = anisotropic3d(m, eps=(1.0, 1e-3, 1e-6)) * 1e6
    A.data = np.round(A.data)
    return sp.csr_matrix(A)


def scaled_laplacian(m, kmax=16, seed=2):
    rng = np.random.default_rng(seed)
    D = sp.diags(2.0 ** rng.integers(0, kmax + 1, m ** 3))
    return sp.csr_matrix(D @ poisson3d(m) @ D)


def int_convdiff(m, jump, seed=3):
    A0 = int_jump3d(m, jump, seed)
    n = A0.shape[0]
    C = sp.diags([np.full(n - 1, -3.0)], [-1], shape=(n, n)) + sp.diags(np.full(n, 3.0))
    A = sp.csr_matrix(A0 + C)
    A.sort_indices()
    return A


def _x_int(n, seed=1):
    return np.random.default_rng(seed).integers(-100, 101, n).astype(np.float64)


def exact_rhs(A, xs):
    """``fl(A xs)``, each row's exact sum rounded once (the reference residual of -xs)."""
    r, rl = np.empty(A.shape[0]), np.empty(A.shape[0])
    z = np.zeros(A.shape[0])
    _RES(None, A.indptr, A.indices, A.data, -xs, z, z, r, rl)   # 0 - A (-xs)
    return r


def exact_residual(A, x, b):
    """``||b - A x|| / ||b||`` with each row exact, rounded once."""
    r, rl = np.empty(A.shape[0]), np.empty(A.shape[0])
    _RES(None, A.indptr, A.indices, A.data, np.asarray(x, np.float64), np.zeros_like(b),
         b, r, rl)
    return float(np.linalg.norm(r) / np.linalg.norm(b))


def reference_solution(A, b, steps=12):
    """The exact solution of ``A x = b`` (FP64 data) to far below FP64's u: dense LU,
    refined with exactly rounded residuals, x kept as the best double-double pair."""
    lu = sla.lu_factor(A.toarray())
    xh = sla.lu_solve(lu, b)
    xl = np.zeros_like(xh)
    r, rl = np.empty_like(b), np.empty_like(b)
    for _ in range(steps):
        _RES(None, A.indptr, A.indices, A.data, xh, xl, b, r, rl)
        d = sla.lu_solve(lu, r)
        _DDAXPY(1.0, d, xh, xl)
        if np.linalg.norm(d) <= 1e-28 * np.linalg.norm(xh):
            return xh, xl
    raise RuntimeError("the reference refinement did not converge (condition >= 1/u?)")


def generated(quick):
    m = 10 if quick else 14
    yield f"jump3d-int m={m} J=1e6", int_jump3d(m, 1e6), "cg", "jacobi"
    yield f"jump3d-int m={m} J=1e8", int_jump3d(m, 1e8), "cg", "jacobi"
    yield f"jump3d-int m={m} J=1e9", int_jump3d(m, 1e9), "cg", "jacobi"
    yield f"aniso3d-int m={m}", int_aniso3d(m), "cg", "jacobi"
    yield f"scaled-lap m={m} D=2^[0,16]", scaled_laplacian(m), "cg", "jacobi"
    yield f"convdiff-int m={m - 2} J=1e7", int_convdiff(m - 2, 1e7), "gmres", "jacobi"
    yield f"convdiff-int m={m - 2} J=1e7", int_convdiff(m - 2, 1e7), "bicgstab", "jacobi"


#: SPD matrices of condition 1e7 .. 1e10 (CG); the nonsymmetric ones of the set that
#: BiCGSTAB + Jacobi solves are far better conditioned (1e4 .. 1e5), and GMRES(20) + Jacobi
#: does not reach 1e-12 on them in 5000 cycles
SUITESPARSE = [("bcsstk14", "cg", "jacobi"), ("nos7", "cg", "jacobi"),
               ("bcsstk15", "cg", "jacobi"), ("bcsstk13", "cg", "jacobi"),
               ("nos1", "cg", "jacobi"), ("1138_bus", "cg", "jacobi"),
               ("sherman1", "bicgstab", "jacobi"), ("fs_680_1", "bicgstab", "jacobi"),
               ("orsirr_1", "bicgstab", "jacobi")]


def suitesparse(quick):
    from mpsolve.matrices import load

    for name, method, pc in (SUITESPARSE[:3] if quick else SUITESPARSE):
        try:
            A = sp.csr_matrix(load(name), dtype=np.float64)
        except Exception as err:  # noqa: BLE001  (a missing collection: skip, say so)
            print(f"  skip {name}: {err}", file=sys.stderr)
            continue
        A.sum_duplicates()
        A.sort_indices()
        yield name, A, method, pc


# ------------------------------------------------------------------ runs
def _jacobi_op(A):
    d = 1.0 / A.diagonal()
    return spla.LinearOperator(A.shape, matvec=lambda v: d * v.ravel(), dtype=np.float64)


def run_scipy(A, b, method, rtol, maxiter):
    it = [0]

    def cb(*_):
        it[0] += 1

    f = {"cg": spla.cg, "gmres": spla.gmres, "bicgstab": spla.bicgstab}[method]
    kw = dict(rtol=rtol, atol=0.0, M=_jacobi_op(A), callback=cb, maxiter=maxiter)
    if method == "gmres":
        kw.update(restart=RESTART, callback_type="pr_norm")
    t = time.perf_counter()
    x, info = f(A, b, **kw)
    return x, it[0], time.perf_counter() - t


def run_petsc(A, b, method, rtol, maxiter):
    from .baselines import petsc_solve

    if method == "gmres":
        maxiter *= RESTART                       # PETSc counts iterations, not cycles
    out = petsc_solve(A, b, method=method, pc="jacobi", rtol=rtol, maxiter=maxiter,
                      restart=RESTART)
    return out["x"], out["iterations"], out["solve_time"]


def _row(name, method, who, x, xs, A, b, iters, t):
    if not np.all(np.isfinite(x)):               # a baseline that broke down
        fe = res = float("inf")
    else:
        fe = float(np.linalg.norm(x - xs) / np.linalg.norm(xs))
        res = exact_residual(A, x, b)
    return dict(problem=name, method=method, who=who, fe=fe, res=res,
                iters=int(iters), time=t, tpi=t / max(iters, 1))


def _kw(method):
    return dict(restart=RESTART) if method == "gmres" else {}


def warm_up():
    """Compile every kernel the timed runs use (Numba caches on disk, but the first call
    in a process still loads them)."""
    A = int_convdiff(4, 10)
    b = A @ np.ones(A.shape[0])
    for method in ("cg", "gmres", "bicgstab"):
        for pol in POLICIES:
            solve(A, b, method=method, precond="jacobi", precision=pol, rtol=1e-16,
                  escalate=False, maxiter=50, **_kw(method))


def cond1(A):
    """``||A||_1 ||A^-1||_1``, the inverse's norm estimated (Hager/Higham, ``onenormest``)
    from a sparse LU."""
    lu = spla.splu(sp.csc_matrix(A))
    inv = spla.LinearOperator(A.shape, matvec=lu.solve, rmatvec=lambda v: lu.solve(v, "T"),
                              dtype=np.float64)
    return float(spla.norm(A, 1) * spla.onenormest(inv))


def _best(f, repeat):
    """``f()``'s result and its best wall time over ``repeat`` calls."""
    best, out = best_of(f, repeat)
    return out, best


def accuracy_rows(problems, rtol, petsc, log, repeat):
    rows = []
    for name, A, method, pc, xs, b in problems:
        n = A.shape[0]
        maxiter = 40 * n if method != "gmres" else 250          # GMRES: restart cycles
        kappa = cond1(A)
        for pol in POLICIES:
            res, t = _best(lambda: solve(A, b, method=method, precond=pc, precision=pol,
                                         rtol=rtol, escalate=False, maxiter=maxiter,
                                         **_kw(method)), repeat)
            rows.append(_row(name, method, pol, res.x, xs, A, b, res.iterations, t))
            rows[-1]["cond"] = kappa
            log(rows[-1])
        (x, it, _), t = _best(lambda: run_scipy(A, b, method, rtol, maxiter), repeat)
        rows.append(_row(name, method, "scipy", x, xs, A, b, it, t))
        log(rows[-1])
        if petsc:
            (x, it, _), t = _best(lambda: run_petsc(A, b, method, rtol, maxiter), repeat)
            rows.append(_row(name, method, "petsc", x, xs, A, b, it, t))
            log(rows[-1])
    return rows


def iteration_rows(problems, rtol, log, repeat):
    """double vs eft (and eft with native reductions) at an ordinary tolerance: iterations
    and the best solve time of ``repeat`` runs."""
    eft_native = replace(Precision.preset("eft"), name="eft-native-dots", dot="native")
    rows = []
    for name, A, method, pc in problems:
        b = A @ _x_int(A.shape[0])
        out = dict(problem=name, method=method, n=A.shape[0])
        for _ in range(repeat):         # interleaved, so a busy spell hits every policy
            for pol in ("double", "eft", eft_native):
                res, t = _best(lambda: solve(A, b, method=method, precond=pc, precision=pol,
                                             rtol=rtol, escalate=False,
                                             maxiter=(40 * A.shape[0] if method != "gmres"
                                                      else 250), **_kw(method)), 1)
                key = pol if isinstance(pol, str) else pol.name
                if key not in out or t < out[key][2]:
                    out[key] = (res.iterations, res.info, t)
        rows.append(out)
        log(out)
    return rows


def large(quick):
    """Problems large enough for the time per iteration to be the iterations' own."""
    m = 30 if quick else 60
    yield f"jump3d-int m={m} J=1e8", int_jump3d(m, 1e8), "cg", "jacobi"
    yield f"aniso3d-int m={m}", int_aniso3d(m), "cg", "jacobi"
    yield f"convdiff-int m={m} J=1e4", int_convdiff(m, 1e4), "bicgstab", "jacobi"
    yield f"convdiff-int m={m * 2 // 3} J=1e4", int_convdiff(m * 2 // 3, 1e4), "gmres", "jacobi"


# ------------------------------------------------------------------ report
def _geomean(v):
    v = [x for x in v if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def report(acc, its, big, rtol_acc, rtol_it, repeat, wall):
    L = ["# Accuracy of the precision presets (issue 15)", "",
         f"`python -m mpsolve.bench.bench_accuracy` -- {platform.machine()}, "
         f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}; "
         f"times are the best of {repeat} runs on a shared 2-core machine ({wall:.0f} s in "
         "all): compare ratios within a row.", "",
         f"## Forward error at rtol = {rtol_acc:g} (below the FP64 floor)", "",
         "Forward error `||x - x*|| / ||x*||` against the exact solution; `cond1` = "
         "`||A||_1 ||A^-1||_1` (estimated); true residual `||b - A x|| / ||b||` with each "
         "row exact (rounded once); `t/it` solve time per iteration against `double`'s "
         "(these systems are small -- n <= 4884 -- so the fixed cost of a solve weighs: see "
         "the large problems below for the iterations' own cost).  "
         "`u` = 2^-53 = 1.1e-16.", "",
         "| problem | cond1 | method | solver | forward error | vs double | true residual | "
         "iterations | time (s) | t/it vs double |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = {(r["problem"], r["method"]): r for r in acc if r["who"] == "double"}
    for r in acc:
        d = base[(r["problem"], r["method"])]
        L.append(f"| {r['problem']} | {d['cond']:.1e} | {r['method']} | {r['who']} | "
                 f"{r['fe']:.2e} | "
                 f"{d['fe'] / r['fe'] if r['fe'] > 0 else float('inf'):.3g}x | "
                 f"{r['res']:.2e} | {r['iters']} | {r['time']:.3f} | "
                 f"{r['tpi'] / d['tpi']:.2f} |")
    L += ["", f"## Iterations and time per iteration at rtol = {rtol_it:g}", "",
          "One Krylov solve for every policy (the double-double stage then costs one "
          "compensated residual and one FP64 check at the end).  `eft-native-dots`: the "
          "`eft` preset with native reductions (double-double x and residual kept): what "
          "the compensated dots and norms do to the iteration count.", "",
          "| problem | n | method | double | eft | eft/double | eft-native-dots | "
          "t/it eft vs double | t/it eft-native-dots vs double |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    ratios, tpis = [], []
    for r in its + big:
        d, e, en = r["double"], r["eft"], r["eft-native-dots"]
        ratio = e[0] / max(d[0], 1)
        tpd = d[2] / max(d[0], 1)
        tpi, tpn = (e[2] / max(e[0], 1)) / tpd, (en[2] / max(en[0], 1)) / tpd
        if r in its:
            ratios.append(ratio)
        else:
            tpis.append(tpi)
        L.append(f"| {r['problem']} | {r['n']} | {r['method']} | {d[0]}"
                 f"{'' if d[1] == 0 else '*'} | {e[0]}{'' if e[1] == 0 else '*'} | "
                 f"{ratio:.3f} | {en[0]}{'' if en[1] == 0 else '*'} | {tpi:.2f} | "
                 f"{tpn:.2f} |")
    L += ["", "`*`: did not converge within the budget.", ""]
    L += goals(acc, ratios, tpis)
    return "\n".join(L) + "\n"


def goals(acc, ratios, tpis):
    """Each goal of the issue with its measured status."""
    by = {}
    for r in acc:
        by.setdefault((r["problem"], r["method"]), {})[r["who"]] = r
    ill = {k: g for k, g in by.items() if g["double"]["cond"] >= 1e8}
    ok = lambda c: "met" if c else "NOT met"  # noqa: E731
    L = ["## Goals (issue 15)", "",
         f"The ill-conditioned set: the {len(ill)} systems above with cond1 >= 1e8 "
         f"({', '.join(f'{p} {m}' for p, m in ill)}).", ""]
    for p in ("eft", "mixed-eft"):
        g_ill = [g["double"]["fe"] / max(g[p]["fe"], 1e-300) for g in ill.values()]
        g_all = [g["double"]["fe"] / max(g[p]["fe"], 1e-300) for g in by.values()]
        near = sum(g[p]["fe"] <= 10 * U for g in ill.values())
        L.append(f"- `{p}` forward error >= 100x smaller than `double`'s on the "
                 f"ill-conditioned set: min gain {min(g_ill):.3g}x, geomean "
                 f"{_geomean(g_ill):.3g}x -- {ok(min(g_ill) >= 100)}; within 10 u of x* on "
                 f"{near}/{len(ill)}.  On all {len(g_all)} systems: "
                 f"{sum(x >= 100 for x in g_all)} gain >= 100x, min {min(g_all):.3g}x.")
    same = [g["mixed-eft"]["fe"] / max(g["eft"]["fe"], 1e-300) for g in by.values()]
    both = sum(max(g["mixed-eft"]["fe"], g["eft"]["fe"]) <= 10 * U for g in by.values())
    L.append(f"- `mixed-eft` as accurate as `eft`: both within 10 u of x* on {both}/"
             f"{len(by)} systems; forward-error ratio mixed-eft/eft max {max(same):.3g} -- "
             f"{ok(all(max(g['mixed-eft']['fe'], g['eft']['fe']) <= 10 * U or r <= 10 for g, r in zip(by.values(), same)))}.")
    L.append(f"- `eft` time per iteration <= 1.6x `double`'s (large problems, one solve): "
             f"max {max(tpis):.2f}x, geomean {_geomean(tpis):.2f}x -- {ok(max(tpis) <= 1.6)}.")
    g = _geomean(ratios)
    L.append(f"- `eft`/`double` iterations at the ordinary tolerance: geomean {g:.3f} "
             f"(goal <= 0.95: {ok(g <= 0.95)}), max {max(ratios):.3f} (goal <= 1.05: "
             f"{ok(max(ratios) <= 1.05)}).")
    return L


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small problems, few matrices")
    ap.add_argument("--rtol", type=float, default=1e-16)
    ap.add_argument("--rtol-iterations", type=float, default=1e-10)
    ap.add_argument("--no-petsc", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "accuracy.md"))
    args = ap.parse_args(argv)
    from .baselines import petsc_available

    petsc = petsc_available() and not args.no_petsc
    t0 = time.perf_counter()
    problems = []
    for name, A, method, pc in generated(args.quick):
        xs = _x_int(A.shape[0])
        b = A @ xs
        assert np.array_equal(b, exact_rhs(A, xs)), name         # exact in FP64
        problems.append((name, A, method, pc, xs, b))
    for name, A, method, pc in suitesparse(args.quick):
        b = exact_rhs(A, _x_int(A.shape[0]))
        xs, _ = reference_solution(A, b)
        problems.append((name, A, method, pc, xs, b))

    def log(r):
        print(r, flush=True)

    warm_up()
    acc = accuracy_rows(problems, args.rtol, petsc, log, args.repeat)
    its = iteration_rows([p[:4] for p in problems], args.rtol_iterations, log, args.repeat)
    big = iteration_rows(list(large(args.quick)), args.rtol_iterations, log, args.repeat)
    text = report(acc, its, big, args.rtol, args.rtol_iterations, args.repeat,
                  time.perf_counter() - t0)
    pathlib.Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
