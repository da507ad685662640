"""A/B of right-preconditioned GMRES(30) with and without the Z basis (issue 14), one process.

"before": ``mpsolve.krylov.gmres._linear_m`` patched to False (flexible GMRES, ``Z`` kept,
``x += Z_k y`` -- what every right-preconditioned solve did before); "after": as shipped
(a linear ``M`` keeps one scratch row and ends each cycle with ``x += M (V_k y)``).  The
two run interleaved, ``repeats`` times each; per case: best CPU ms/iteration
(``time.process_time``: all threads' CPU time), best wall ms/iteration, iterations, the
FP64 true relative residual and the solve workspace's bytes.

Usage (one command, from the repository root; as a module: ``bench/coverage.py`` would
shadow the ``coverage`` package Numba imports): ``NUMBA_NUM_THREADS=1 python -m
bench.ab_gmres_right [repeats] [big]``
-- ``big`` adds ``convdiff3d:100`` (1e6 rows, 4 cycles a solve).  Prints JSON.
"""
import json
import sys
import time

import numpy as np

import mpsolve
from mpsolve.krylov import gmres
from mpsolve.matrices import generate

repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
cases = [("convdiff3d:50,peclet=10", pc, {"rtol": 1e-8}) for pc in ("jacobi", "ilu0")]
if len(sys.argv) > 2 and sys.argv[2] == "big":
    cases += [("convdiff3d:100,peclet=10", pc, {"rtol": 1e-12, "maxiter": 4})
              for pc in ("jacobi", "ilu0")]
real = gmres._linear_m
out = {}
for spec, pc, kw in cases:
    A = generate(spec)
    b = A @ np.ones(A.shape[0])
    bn = float(np.linalg.norm(b))
    solvers = {v: mpsolve.Solver(A, method="gmres", side="right", restart=30, precond=pc,
                                 precision="mixed", escalate=False)
               for v in ("before", "after")}
    best = {v: [np.inf, np.inf, 0, 0.0] for v in solvers}
    for rep in range(repeats + 1):                  # the first round: JIT warm-up
        for v, s in solvers.items():
            gmres._linear_m = (lambda sys_: False) if v == "before" else real
            t0, w0 = time.process_time(), time.perf_counter()
            r = s.solve(b, **kw)
            cpu, wall = time.process_time() - t0, time.perf_counter() - w0
            gmres._linear_m = real
            if rep:
                it = max(r.iterations, 1)
                bv = best[v]
                bv[0] = min(bv[0], 1e3 * cpu / it)
                bv[1] = min(bv[1], 1e3 * wall / it)
                bv[2] = r.iterations
                bv[3] = float(np.linalg.norm(b - A @ r.x)) / bn
    out[f"{spec} {pc}"] = {
        v: {"cpu_ms_per_it": round(best[v][0], 3), "wall_ms_per_it": round(best[v][1], 3),
            "iterations": best[v][2], "relres": best[v][3],
            "workspace_MB": round(s._problem.workspace.nbytes / 1e6, 2)}
        for v, s in solvers.items()}
    print(json.dumps({f"{spec} {pc}": out[f"{spec} {pc}"]}), file=sys.stderr, flush=True)
print(json.dumps(out, indent=1))
