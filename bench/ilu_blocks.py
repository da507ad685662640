"""One ILU(0) block against two (``ILU0(blocks=2)``, block Jacobi) on the team loops.

``python -m mpsolve.bench.ilu_blocks [--repeat R] [--out FILE] [NAME ...]``

For each matrix (SuiteSparse names from ``MPSOLVE_MATRIX_PATH``, or generated problems
such as ``poisson3d:30``; default: the ones whose PETSc best in ``coverage.md`` is block
Jacobi on two ranks, and a few more): CG (symmetric A) or BiCGSTAB with ILU(0) of one
block and of two, ``precision='mixed'``, b = A @ 1, x0 = 0, rtol 1e-8, whole solves
(set-up included), the fastest of ``R`` runs each, in one process.  Two blocks lose the
coupling between the halves (more iterations) and gain the second thread's sweeps; the
ratio one block / two blocks says which wins where.
"""
from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

import mpsolve
from mpsolve._sparse import is_symmetric
from mpsolve.matrices import generate, load

DEFAULT = ["bcsstk16", "s1rmq4m1", "s1rmt3m1", "bcsstk18", "bcsstk15", "bcsstk17",
           "bcsstk13", "anisotropic2d:200", "jump3d:20", "poisson3d:30", "elasticity3d:12",
           "convdiff2d:200,peclet=50", "convdiff3d:30,peclet=10", "sherman3", "sherman5",
           "pde2961", "memplus"]


def _time(A, b, method, blocks, repeat):
    best, res = math.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        res = mpsolve.solve(A, b, method=method, precond="ilu0", blocks=blocks,
                            precision="mixed", rtol=1e-8, maxiter=5000)
        best = min(best, time.perf_counter() - t)
    return best, res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None, help="write the Markdown table here too")
    args = ap.parse_args(argv)
    rows = []
    for name in args.names:
        A = (generate(name) if ":" in name else load(name)).tocsr()
        b = A @ np.ones(A.shape[0])
        method = "cg" if is_symmetric(A) and (A.diagonal() > 0).all() else "bicgstab"
        _time(A, b, method, 1, 1)                         # warm-up
        _time(A, b, method, 2, 1)
        t1, r1 = _time(A, b, method, 1, args.repeat)
        t2, r2 = _time(A, b, method, 2, args.repeat)
        rows.append((name, A.shape[0], A.nnz, method, r1, t1, r2, t2))
        print(f"{name:26s} n={A.shape[0]:7d} {method:8s} one block {r1.iterations:5d} its "
              f"{t1 * 1e3:8.2f} ms{'' if r1.converged else ' (not converged)'}  two "
              f"{r2.iterations:5d} its {t2 * 1e3:8.2f} ms"
              f"{'' if r2.converged else ' (not converged)'}  ratio {t1 / t2:.2f}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# ILU(0): one block against two on the team loops\n\n")
            names = "" if args.names == DEFAULT else " " + " ".join(args.names)
            f.write(f"Command: `python -m mpsolve.bench.ilu_blocks --repeat {args.repeat}"
                    f" --out {args.out}{names}`"
                    f" (this machine: {os.cpu_count()} CPUs).  b = A @ 1, x0 = 0, rtol 1e-8, "
                    "precision 'mixed'; CG on symmetric A with a positive diagonal, else "
                    "BiCGSTAB; whole solves (set-up included), fastest of the runs.\n\n")
            f.write("| matrix | n | nnz | method | its one / two | one block ms | "
                    "two blocks ms | one / two |\n|---|---|---|---|---|---|---|---|\n")
            for name, n, nnz, method, r1, t1, r2, t2 in rows:
                mark = lambda r: "" if r.converged else " (not converged)"   # noqa: E731
                f.write(f"| {name} | {n} | {nnz} | {method} | {r1.iterations}{mark(r1)} / "
                        f"{r2.iterations}{mark(r2)} | {t1 * 1e3:.2f} | {t2 * 1e3:.2f} | "
                        f"{t1 / t2:.2f} |\n")


if __name__ == "__main__":
    main()
