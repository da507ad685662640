"""The paper's second figure -- Block-ISAI on a GPU against PETSc on a CPU -- from a GPU
result file and PETSc runs on this machine.

``python -m mpsolve.bench.gpu_petsc_cpu RESULTS_GPU.json [...] [--out FILE]``

``mpsolve bench --device gpu`` runs PETSc only where petsc4py is installed next to the
GPU; where it is not (the lent GPU machines here have no PETSc, and no network to build
one), this runs, on this machine, PETSc with block Jacobi/ILU(0) (PETSc's default PC) and
with the best of its other preconditioners (Jacobi, SOR, ICC on SPD problems) for every
(problem, method) of the file, with the file's tolerance, and writes the ratio of PETSc's
time to solution to the GPU Block-ISAI time (set-up and uploads included in both) -- the
paper reports 11.2x (A100 against its CPU).  The two times come from two machines, as
the paper's do; the table says which.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

from .common import emit


def _problem(name, collection):
    from mpsolve.matrices import generate, read_mtx

    if ":" in name:
        return generate(name)
    return read_mtx(os.path.join(collection, f"{name}.mtx.gz"))


def run(files, collection, maxiter=3000, restart=30, time_limit=60.0):
    from .baselines import petsc_available, petsc_build, run_petsc

    if not petsc_available():
        raise SystemExit("petsc4py is not installed: nothing to compare")
    rows = []
    for f in files:
        with open(f) as fh:
            d = json.load(fh)
        rtol = float(d["meta"].get("rtol", 1e-8))
        gpu = d["meta"]["gpu"]
        keys = sorted({(r["problem"], r["method"]) for r in d["solve"]
                       if r["engine"] == "mpsolve (GPU)" and r["precond"] == "block-isai"
                       and r["converged"]})
        for name, method in keys:
            A = sp.csr_matrix(_problem(name, collection), dtype=np.float64)
            A.sort_indices()
            b = A @ np.ones(A.shape[0])
            spd = method == "cg"
            t_gpu = min(r["total s"] for r in d["solve"] if r["problem"] == name and
                        r["method"] == method and r["engine"] == "mpsolve (GPU)" and
                        r["precond"] == "block-isai" and r["converged"])
            args = SimpleNamespace(rtol=rtol, maxiter=maxiter, restart=restart,
                                   block_size=None, sparsity_power=1, time_limit=time_limit)
            res = {}
            for pc in ["bjacobi", "jacobi", "sor"] + (["icc"] if spd else []):
                run_petsc(A, b, name, spd, method, pc, args)            # warm
                r = run_petsc(A, b, name, spd, method, pc, args)
                if r.converged:
                    res[pc] = r.setup_time + r.solve_time
            best = min(res, key=res.get) if res else None
            rows.append({"problem": name, "method": method, "GPU": gpu,
                         "Block-ISAI GPU s": t_gpu,
                         "PETSc bjacobi s": res.get("bjacobi", math.nan),
                         "PETSc best s": res[best] if best else math.nan,
                         "PETSc best PC": best or "-",
                         "x vs bjacobi": res.get("bjacobi", math.nan) / t_gpu,
                         "x vs best": (res[best] / t_gpu) if best else math.nan})
    return rows, petsc_build()


def _geo(v):
    v = [x for x in v if math.isfinite(x) and x > 0]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else math.nan


def markdown(rows, build, command):
    head = ["problem", "method", "Block-ISAI GPU s", "PETSc bjacobi s", "PETSc best s",
            "PETSc best PC", "x vs bjacobi", "x vs best"]
    out = ["# Block-ISAI on the GPU against PETSc on this CPU (the paper: 11.2x)", "",
           f"`{command}`, {time.strftime('%Y-%m-%d %H:%M')}.  GPU times from the result "
           f"file(s) ({rows[0]['GPU'] if rows else '-'}); PETSc on this machine "
           f"({platform.machine()}, {os.cpu_count()} cores; {build}), one process, after a "
           "warm-up run; both times to an FP64 true residual of the file's tolerance, "
           "set-up included.  `x`: PETSc's time / Block-ISAI's (above 1: the GPU is faster).",
           "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        out.append("| " + " | ".join(f"{r[h]:.3g}" if isinstance(r[h], float) else str(r[h])
                                     for h in head) + " |")
    out += ["", f"Geometric mean: x vs bjacobi {_geo([r['x vs bjacobi'] for r in rows]):.2f}, "
            f"x vs PETSc's best {_geo([r['x vs best'] for r in rows]):.2f} "
            f"({len(rows)} problem x method pairs)."]
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mpsolve.bench.gpu_petsc_cpu",
                                description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", help="results_gpu.json files of mpsolve bench --device gpu")
    p.add_argument("--collection", default=os.environ.get(
        "MPSOLVE_TEST_COLLECTION", os.path.join("..", "shared", "matrices", "suitesparse")))
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    rows, build = run(a.files, a.collection)
    text = markdown(rows, build, "python -m mpsolve.bench.gpu_petsc_cpu " + " ".join(
        argv if argv is not None else __import__("sys").argv[1:]))
    emit(text, a.out)


if __name__ == "__main__":
    main()
