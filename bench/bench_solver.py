"""Per-call cost of :class:`mpsolve.Solver` against PETSc's ``KSPSolve`` (issue 14, item 3).

Run ``python -m mpsolve.bench.bench_solver [--collection DIR] [--max-n 2000] [--out FILE]``
on an otherwise idle machine.  For every real matrix of the collection's ``MANIFEST.tsv``
with fewer than ``--max-n`` rows (b = A @ 1, x0 = 0, FP64 true residual ``--rtol``), and
two configurations per matrix -- symmetric positive definite: CG + Jacobi and CG + IC(0)
(mpsolve's ``ilu0`` takes its symmetric form on a symmetric matrix; PETSc ``icc``);
otherwise GMRES(30), right-preconditioned, + Jacobi and + ILU(0) (PETSc ``ilu``) -- it
times, each as the best mean of ``--repeat`` batches of calls (the ways compared timed
in turn within each round):

* ``mpsolve.solve`` -- a fresh call: checks, set-up and solve;
* ``Solver.solve`` -- on a :class:`mpsolve.Solver` set up once;
* ``KSPSolve`` -- on a KSP set up once (``KSPSetUp`` and a first solve before timing, so
  PETSc's lazy factorisation is done), ``b`` copied into its Vec and ``x`` out of it in
  every call, as ``Solver.solve`` copies them;

each for the whole solve and for a call that needs no iteration (``x0`` = the solution
``1``, a nonzero initial guess for PETSc: checks, copies, the residual test and the result
-- the per-call overhead, where the goal is ``Solver.solve``'s no more than ``KSPSolve``'s).
Both run in FP64 (``precision="double"``) with the same stopping rule (unpreconditioned
residual relative to ``||b||``); PETSc runs serially, mpsolve's kernels on its own
threads (Numba picks serial kernels at these sizes).  Writes Markdown (default
``bench/results/solver.md``).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: (method, mpsolve preconditioner, PETSc PC) per kind of matrix
CONFIGS = {"spd": [("cg", "jacobi", "jacobi"), ("cg", "ilu0", "icc")],
           "general": [("gmres", "jacobi", "jacobi"), ("gmres", "ilu0", "ilu")]}
RESTART = 30


#: The clock of the measurements (``--clock``): ``cpu`` -- the process's CPU time
#: (``time.process_time``: every thread of the process, PETSc's included; on a shared
#: machine it leaves out the time spent waiting for a core, which wall-clock time of a
#: short call is mostly made of) -- or ``wall`` (``time.perf_counter``).
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
clock = CLOCKS["cpu"]


def per_call(fs, repeat=5, budget=0.05):
    """Seconds per call of each ``f()`` in ``fs``: the best mean over ``repeat`` rounds,
    each round timing a batch of about ``budget`` seconds of every ``f`` in turn (on a
    shared machine the ways compared then see the same load)."""
    ks = []
    for f in fs:
        t0 = time.perf_counter()
        f()
        ks.append(max(1, int(budget / max(time.perf_counter() - t0, 1e-7))))
    best = [np.inf] * len(fs)
    for _ in range(repeat):
        for i, (f, k) in enumerate(zip(fs, ks)):
            t0 = clock()
            for _ in range(k):
                f()
            best[i] = min(best[i], (clock() - t0) / k)
    return best


def petsc_ksp(A, method, pc, rtol, maxiter):
    """A set-up serial KSP for ``A`` (FP64) and its ``solve(b) -> (x, iterations)``."""
    from petsc4py import PETSc

    from .baselines import petsc_operator

    P, ksp = petsc_operator(A, PETSc.COMM_SELF)
    ksp.setType(method)
    if method == "gmres":
        ksp.setGMRESRestart(RESTART)
        ksp.setPCSide(PETSc.PC.Side.RIGHT)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    ksp.setTolerances(rtol=rtol, atol=0.0, max_it=maxiter)
    ksp.getPC().setType(pc)
    bv, xv = P.createVecLeft(), P.createVecRight()
    ksp.setUp()

    def solve(b, x0=None):
        bv.array[:] = b                       # b in
        ksp.setInitialGuessNonzero(x0 is not None)
        if x0 is not None:
            xv.array[:] = x0                  # x0 in
        ksp.solve(bv, xv)
        return xv.array.copy(), ksp.getIterationNumber()   # x out
    return ksp, solve


def petsc_version_and_build():
    """PETSc's version and how it was compiled (:func:`.baselines.petsc_build`)."""
    from petsc4py import PETSc

    from .baselines import petsc_build

    return "PETSc %d.%d.%d" % PETSc.Sys.getVersion() + f" ({petsc_build()})"


def measure(A, method, precond, pc, rtol, repeat):
    """One row: times per call and iterations of the three ways."""
    import mpsolve

    n = A.shape[0]
    b = A @ np.ones(n)
    bnrm = np.linalg.norm(b)
    kw = dict(method=method, precond=precond, precision="double", rtol=rtol)
    if method == "gmres":
        kw.update(restart=RESTART, side="right")
    maxit = 10 * n
    row = dict(method=method, precond=precond, pc=pc)
    s = mpsolve.Solver(A, **kw, maxiter=maxit if method != "gmres" else -(-maxit // RESTART))
    r = s.solve(b)
    fresh = mpsolve.solve(A, b, **kw, maxiter=s._maxiter)
    assert fresh.iterations == r.iterations and np.array_equal(fresh.x, r.x)
    row.update(its=r.iterations, ok=r.converged, setup=s.setup_time)
    one = np.ones(n)
    r0 = s.solve(b, x0=one)
    ksp, ksolve = petsc_ksp(A, method, pc, rtol, maxit)
    x, its = ksolve(b)
    row.update(kits=its, kok=bool(np.linalg.norm(b - A @ x) <= 1.01 * rtol * bnrm))
    _, kits0 = ksolve(b, one)
    row["zero_its"] = (r0.iterations, kits0)
    row["fresh"], row["solver"], row["ksp"] = per_call(
        [lambda: mpsolve.solve(A, b, **kw, maxiter=s._maxiter), lambda: s.solve(b),
         lambda: ksolve(b)], repeat)
    row["solver0"], row["ksp0"] = per_call([lambda: s.solve(b, x0=one),
                                            lambda: ksolve(b, one)], repeat)
    return row


def _ms(t):
    return f"{t * 1e3:.3f}"


def report(rows, args, build, seconds):
    head = ("| matrix | n | nnz | method + M | its (mpsolve / PETSc) | mpsolve.solve ms | "
            "Solver.solve ms | KSPSolve ms | Solver / KSP | fresh / Solver | "
            "0-it Solver us | 0-it KSP us | 0-it Solver / KSP |")
    lines = [
        "# Solver.solve against KSPSolve: per-call cost on the small SuiteSparse matrices",
        "",
        f"Command: `python -m mpsolve.bench.bench_solver --max-n {args.max_n} --rtol "
        f"{args.rtol:g} --repeat {args.repeat} --clock {getattr(args, 'clock', 'cpu')}` "
        f"({seconds:.0f} s; {platform.node()}, "
        f"{os.cpu_count()} CPUs, {platform.python_version()}; {build}).",
        "",
        "b = A @ 1, x0 = 0, FP64 (`precision='double'`), stop at an unpreconditioned residual "
        f"of {args.rtol:g} ||b||; GMRES(30) right-preconditioned in both; PETSc's IC(0) "
        "(`icc`) against mpsolve's ILU(0) in its symmetric form.  Times ("
        + ("process CPU time: the machine is shared, and the wall-clock time of a short "
           "call is mostly waiting for a core" if getattr(args, "clock", "cpu") == "cpu"
           else "wall-clock time") + ") are the best mean "
        "of the repeats, per call: `mpsolve.solve` fresh (checks, set-up, solve), "
        "`Solver.solve` on a Solver set up once, `KSPSolve` on a set-up KSP (b copied in, "
        "x copied out).  0-it: a call that needs no iteration (x0 = 1, the solution; "
        "PETSc with a nonzero initial guess, x0 copied in): the per-call overhead -- the "
        "checks and copies, mpsolve's FP64 true residual (once: a start that meets the "
        "tolerance returns without calling the method) or PETSc's initial residual and "
        "preconditioner application, the result.",
        "", head, "|" + "---|" * (head.count("|") - 1),
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | {r['n']} | {r['nnz']} | {r['method']} + "
                         f"{r['precond']} | {r['error']} |" + " |" * 9)
            continue
        its = f"{r['its']}{'' if r['ok'] else '*'} / {r['kits']}{'' if r['kok'] else '*'}"
        lines.append(
            f"| {r['name']} | {r['n']} | {r['nnz']} | {r['method']} + {r['precond']} "
            f"({r['pc']}) | {its} | {_ms(r['fresh'])} | {_ms(r['solver'])} | {_ms(r['ksp'])} "
            f"| {r['solver'] / r['ksp']:.2f} | {r['fresh'] / r['solver']:.2f} | "
            f"{r['solver0'] * 1e6:.1f} | {r['ksp0'] * 1e6:.1f} | {r['solver0'] / r['ksp0']:.2f} |")
    ok = [r for r in rows if "error" not in r and r["ok"] and r["kok"]]

    def gm(key_a, key_b):
        return float(np.exp(np.mean([np.log(r[key_a] / r[key_b]) for r in ok]))) if ok else np.nan
    lines += [
        "",
        "`*`: not converged: the iteration limit (10 n), a breakdown (where mpsolve stops "
        "after a few iterations: CG's curvature breakdown, its IC(0) of that matrix not being "
        "positive definite), stagnation at the accuracy floor, or (PETSc) a true residual "
        "short of the tolerance.",
        "",
        f"Geometric means over the {len(ok)} runs both converged: Solver.solve / KSPSolve "
        f"**{gm('solver', 'ksp'):.2f}**"
        f", no iteration (per-call overhead) **{gm('solver0', 'ksp0'):.2f}**; "
        f"mpsolve.solve (fresh) / Solver.solve {gm('fresh', 'solver'):.2f}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--collection", default=os.environ.get(
        "MPSOLVE_TEST_COLLECTION", str(ROOT.parent / "shared" / "matrices" / "suitesparse")))
    ap.add_argument("--max-n", type=int, default=2000)
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", nargs="*", help="matrix names (default: all that fit)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                    help="cpu: process CPU time (default; see CLOCKS), wall: wall-clock time")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "solver.md"))
    args = ap.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    from mpsolve.matrices import read_mtx

    folder = pathlib.Path(args.collection)
    text = (folder / "MANIFEST.tsv").read_text().splitlines()
    head = text[0].split("\t")
    entries = [dict(zip(head, ln.split("\t"))) for ln in text[1:] if ln.strip()]
    entries = [e for e in entries if int(e["rows"]) < args.max_n and e["field"] != "complex"
               and (not args.only or e["name"] in args.only)]
    t0 = time.perf_counter()
    rows = []
    for e in sorted(entries, key=lambda e: int(e["rows"])):
        A = read_mtx(folder / e["file"]).tocsr().astype(np.float64)
        kind = "spd" if e["likely_spd"] == "yes" else "general"
        for method, precond, pc in CONFIGS[kind]:
            base = dict(name=e["name"], n=A.shape[0], nnz=int(A.nnz), method=method,
                        precond=precond, pc=pc)
            try:
                base.update(measure(A, method, precond, pc, args.rtol, args.repeat))
            except Exception as err:          # a set-up failure (zero pivot, ...): recorded
                base["error"] = f"{type(err).__name__}: {str(err)[:60]}"
            rows.append(base)
            print(base.get("error") or
                  f"{e['name']:10s} {method}+{precond}: its {base['its']}/{base['kits']} "
                  f"solver {base['solver'] * 1e3:.3f} ms ksp {base['ksp'] * 1e3:.3f} ms, "
                  f"0-it {base['solver0'] * 1e6:.0f} / {base['ksp0'] * 1e6:.0f} us "
                  f"({base['zero_its']})", flush=True)
    out = report(rows, args, petsc_version_and_build(), time.perf_counter() - t0)
    pathlib.Path(args.out).write_text(out)
    pathlib.Path(args.out).with_suffix(".json").write_text(json.dumps(
        {"args": vars(args), "rows": rows}, indent=1, default=str))
    print(out)


if __name__ == "__main__":
    main()
