"""Compressed-basis GMRES against FP64-basis GMRES: the CB-GMRES goal of issue 14.

Run ``python -m mpsolve.bench.bench_cbgmres [--problems SPEC ...] [--precond jacobi]
[--restart 30] [--rtol 1e-8] [--repeat 1] [--out FILE]`` on an otherwise idle machine.

For each generated problem (b = A @ 1, x0 = 0, FP64 true residual ``rtol``) it solves with
GMRES(restart), left preconditioned, under

* ``double``   -- FP64 basis, FP64 preconditioner (the FP64 reference),
* ``mixed``    -- FP64 basis, FP32 preconditioner (separates the preconditioner's share),
* ``mixed-cb`` -- FP32 basis, FP32 preconditioner (CB-GMRES),

and reports iterations, solve time, time per iteration and the ratios against
``double``.  The goal: ``mixed-cb``'s time per iteration <= 0.75x ``double``'s, its
iterations within 2%.  It also times the orthogonalisation kernels alone (one CGS pass
over ``k = restart / 2`` basis vectors: ``mdot`` + ``maxpy`` on an FP64 basis against
``cb_mdot`` + ``cb_maxpy`` on an FP32 one), where the basis' bytes are the whole cost.

Every ratio comes from one run of this script: the machine may be shared, so compare
ratios, not absolute times across runs.  Writes Markdown (``--out``; default
``bench/results/cbgmres.md``).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import platform
import sys
import time

import numpy as np

from mpsolve import solve
from mpsolve.kernels import lookup
from mpsolve.matrices import generate

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROBLEMS = ["poisson3d:100", "convdiff3d:100,peclet=10"]
POLICIES = ["double", "mixed", "mixed-cb"]


def _solve(A, b, policy, args):
    return solve(A, b, method="gmres", restart=args.restart, rtol=args.rtol,
                 precond=args.precond, precision=policy, maxiter=args.maxiter)


def cgs_kernels(n, k, repeat):
    """Best time (s) of one CGS pass (coefficients + projection) over ``k`` basis
    vectors of length ``n``: FP64 basis, FP32 basis (w FP64 in both)."""
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(n)
    h = np.zeros(k + 1)
    out = {}
    for name, dt, mdot, maxpy in (
            ("fp64 basis", np.float64, lookup("cpu", "mdot", ("float64",), "native"),
             lookup("cpu", "maxpy", ("float64",))),
            ("fp32 basis", np.float32,
             lookup("cpu", "cb_mdot", ("float32", "float64"), "native"),
             lookup("cpu", "cb_maxpy", ("float32", "float64")))):
        V = rng.standard_normal((k, n)).astype(dt)
        w = w0.copy()
        best = np.inf
        for _ in range(repeat + 1):          # the first call compiles / warms the caches
            t0 = time.perf_counter()
            mdot(V, k, w, h)                 # h_i = v_i . w
            h *= 1e-3
            maxpy(V, k, h, w)                # w -= V^T h
            best = min(best, time.perf_counter() - t0)
        out[name] = best
        del V
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", nargs="+", default=PROBLEMS)
    p.add_argument("--precond", default="jacobi", help="preconditioner name, or 'none'")
    p.add_argument("--restart", type=int, default=30)
    p.add_argument("--rtol", type=float, default=1e-8)
    p.add_argument("--maxiter", type=int, default=200)
    p.add_argument("--repeat", type=int, default=1, help="solves per policy (best time)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "cbgmres.md"))
    args = p.parse_args(argv)
    if args.precond == "none":
        args.precond = None

    # compile every kernel on a small twin first
    A = generate("convdiff3d:12")
    for pol in POLICIES:
        _solve(A, A @ np.ones(A.shape[0]), pol, args)

    cmd = "python -m mpsolve.bench.bench_cbgmres " + " ".join(
        a if " " not in a else repr(a) for a in (argv if argv is not None else sys.argv[1:]))
    lines = ["# CB-GMRES: FP32 Krylov basis against FP64 (issue 14, item 1)", "",
             f"Command: `{cmd.strip()}`", "",
             (f"({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {platform.machine()}, "
              f"{os.cpu_count()} cores, shared with other work; one run: compare the ratios "
              f"within a row, not times across runs.)  GMRES({args.restart}), left "
              f"preconditioning with {args.precond or 'no preconditioner'}, b = A 1, x0 = 0, "
              f"FP64 true residual rtol {args.rtol:g}; time = best of {args.repeat} solve(s)."),
             "", ("| problem | n | policy | info | iterations | iter. ratio | solve s "
                  "| ms / iter. | time/iter. ratio | basis MiB |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    kern_rows = []
    for spec in args.problems:
        A = generate(spec)
        n = A.shape[0]
        b = A @ np.ones(n)
        res = {}
        for pol in POLICIES:
            best = None
            for _ in range(args.repeat):
                r = _solve(A, b, pol, args)
                if best is None or r.solve_time < best.solve_time:
                    best = r
            res[pol] = best
            print(f"{spec} {pol}: info {best.info}, {best.iterations} it, "
                  f"{best.solve_time:.2f} s, {best.true_residual:.1e}", flush=True)
        base = res["double"]
        base_it = base.solve_time / max(base.iterations, 1)
        for pol, r in res.items():
            per = r.solve_time / max(r.iterations, 1)
            itemsize = 4 if pol.endswith("-cb") else 8
            lines.append(
                f"| {spec} | {n} | {pol} | {r.info} | {r.iterations} | "
                f"{r.iterations / max(base.iterations, 1):.3f} | {r.solve_time:.2f} | "
                f"{1e3 * per:.1f} | {per / base_it:.3f} | "
                f"{(args.restart + 1) * n * itemsize / 2**20:.0f} |")
        k = args.restart // 2
        t = cgs_kernels(n, k, repeat=5)
        kern_rows.append(f"| {n} | {k} | {1e3 * t['fp64 basis']:.2f} | "
                         f"{1e3 * t['fp32 basis']:.2f} | "
                         f"{t['fp32 basis'] / t['fp64 basis']:.3f} |")
        del A
    lines += ["", "## One CGS pass alone (mdot + maxpy; best of 5)", "",
              "| n | basis vectors | FP64 basis ms | FP32 basis ms | ratio |",
              "|---|---|---|---|---|"]
    lines += kern_rows
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text)
    return text


if __name__ == "__main__":
    main()
