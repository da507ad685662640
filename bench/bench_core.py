"""Core benchmarks: kernels and solvers against SciPy, precision presets on SuiteSparse.

Run::

    python bench/bench_core.py [--grid 100] [--collection DIR] [--out bench/results]

Sections (each timed in this one run, so the ratios compare like with like):

1. CSR SpMV on the 3-D Poisson matrix (``grid^3`` rows): mpsolve's kernel (FP64
   values; FP32 values with FP32 and with FP64 vectors) vs SciPy's ``A @ x``, and on
   the 3-D elasticity matrix (3 unknowns per node);
2. dot vs Dot2 (and native vs compensated norm) on 10M-long vectors;
3. ``mpsolve.cg`` vs ``scipy.sparse.linalg.cg`` on the Poisson problem (Jacobi),
   with the time per iteration and the solver overhead next to one SpMV;
4. iterations and time to a true relative residual of 1e-10 for the presets
   ``double``, ``eft``, ``mixed``, ``mixed-eft``, ``ir`` on the SPD SuiteSparse
   matrices (CG + Jacobi) and on the nonsymmetric ones (GMRES(30) + Jacobi).

Writes ``core.md`` and ``core.json`` in ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np
import scipy
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import mpsolve
from mpsolve._sparse import canonical_csr
from mpsolve.kernels import lookup
from mpsolve.matrices import elasticity3d, list_collection, poisson3d, read_mtx
from mpsolve.operator import SparseOperator


def best_of(f, repeat=7, number=5):
    """Minimum over ``repeat`` runs of the mean time of ``number`` calls (seconds)."""
    f()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            f()
        times.append((time.perf_counter() - t0) / number)
    return min(times)


def spmv_section(A, name):
    n = A.shape[0]
    C = canonical_csr(A)
    x64 = np.random.default_rng(0).standard_normal(n)
    x32 = x64.astype(np.float32)
    y64 = np.empty(n)
    y32 = np.empty(n, dtype=np.float32)
    op64 = SparseOperator(C, "float64", "float64")
    op32 = SparseOperator(C, "float32", "float32")
    op32m = SparseOperator(C, "float32", "float64")
    rows = {
        "scipy A @ x (fp64)": best_of(lambda: C @ x64),
        "mpsolve fp64 values, fp64 vectors": best_of(lambda: op64.bind("float64", "float64")(x64, y64)),
        "mpsolve fp32 values, fp32 vectors, fp32 acc": best_of(lambda: op32.bind("float32", "float32")(x32, y32)),
        "mpsolve fp32 values, fp64 vectors, fp64 acc": best_of(lambda: op32m.bind("float64", "float64")(x64, y64)),
    }
    return {"matrix": name, "n": n, "nnz": int(C.nnz), "seconds": rows}


def dot_section(n=10_000_000):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    dot = lookup("cpu", "dot", ("float64",), "native")
    dot2 = lookup("cpu", "dot", ("float64",), "compensated")
    nrm = lookup("cpu", "nrm2", ("float64",), "native")
    nrm2c = lookup("cpu", "nrm2", ("float64",), "compensated")
    return {"n": n, "seconds": {
        "numpy dot": best_of(lambda: np.dot(x, y)),
        "mpsolve dot (native)": best_of(lambda: dot(x, y)),
        "mpsolve dot2 (compensated)": best_of(lambda: dot2(x, y)),
        "mpsolve nrm2 (native)": best_of(lambda: nrm(x)),
        "mpsolve nrm2 (compensated)": best_of(lambda: nrm2c(x)),
    }}


def cg_section(A, name, rtol=1e-8):
    b = A @ np.ones(A.shape[0])
    d = A.diagonal()
    Ms = sp.diags(1.0 / d)
    out = {"matrix": name, "n": A.shape[0], "rtol": rtol, "runs": {}}
    # warm up the JIT outside the timing
    mpsolve.solve(A, b, method="cg", precond="jacobi", rtol=1e-2)
    for prec in ("double", "mixed", "mixed-eft"):
        t0 = time.perf_counter()
        r = mpsolve.solve(A, b, method="cg", precond="jacobi", precision=prec, rtol=rtol)
        t = time.perf_counter() - t0
        out["runs"][f"mpsolve cg jacobi {prec}"] = dict(seconds=t, solve=r.solve_time,
                                                        iterations=r.iterations,
                                                        true_residual=r.true_residual)
    count = [0]
    t0 = time.perf_counter()
    x, info = spla.cg(A, b, rtol=rtol, M=Ms, callback=lambda _: count.__setitem__(0, count[0] + 1))
    t = time.perf_counter() - t0
    out["runs"]["scipy cg jacobi"] = dict(seconds=t, solve=t, iterations=count[0],
                                          true_residual=float(np.linalg.norm(b - A @ x) / np.linalg.norm(b)))
    C = canonical_csr(A)
    op = SparseOperator(C, "float64", "float64")
    xx = np.ones(A.shape[0])
    yy = np.empty(A.shape[0])
    out["spmv_seconds"] = best_of(lambda: op.bind("float64", "float64")(xx, yy))
    return out


def presets_section(collection, rtol=1e-10, max_nnz=600_000):
    rows = []
    for e in list_collection([collection]):
        if e.nnz > max_nnz:
            continue
        A = read_mtx(e.path)
        b = A @ np.ones(A.shape[0])
        method = "cg" if e.spd else "gmres"
        precond = "jacobi" if (A.diagonal() != 0).all() else "none"
        row = {"matrix": e.name, "method": method, "precond": precond, "n": A.shape[0]}
        for prec in ("double", "eft", "mixed", "mixed-eft", "ir"):
            kw = dict(restart=30, maxiter=100) if method == "gmres" else dict(maxiter=10_000)
            t0 = time.perf_counter()
            try:
                r = mpsolve.solve(A, b, method=method, precond=precond, precision=prec,
                                  rtol=rtol, escalate=False, **kw)
                row[prec] = dict(iterations=r.iterations, seconds=time.perf_counter() - t0,
                                 converged=r.converged, true_residual=r.true_residual)
            except Exception as err:
                row[prec] = dict(error=f"{type(err).__name__}: {err}")
        rows.append(row)
    return rows


def write_md(res, path):
    L = ["# Core benchmarks", "", f"Command: `{res['command']}`", "",
         f"Machine: {res['machine']}; {res['versions']}; date {res['date']}.", "",
         "All figures of one table come from the same run (the machine is noisy; compare ratios, "
         "not absolute times across tables).", ""]
    for sec in res["spmv"]:
        L += [f"## SpMV: {sec['matrix']} ({sec['n']} rows, {sec['nnz']} nonzeros)", "",
              "| kernel | time (ms) | speed-up vs SciPy | vs mpsolve fp64 |", "|---|---|---|---|"]
        s = sec["seconds"]
        ref, ref64 = s["scipy A @ x (fp64)"], s["mpsolve fp64 values, fp64 vectors"]
        for k, v in s.items():
            L.append(f"| {k} | {v * 1e3:.2f} | {ref / v:.2f}x | {ref64 / v:.2f}x |")
        L.append("")
    d = res["dot"]["seconds"]
    L += [f"## Reductions on {res['dot']['n']:,}-long FP64 vectors", "",
          "| kernel | time (ms) | ratio to native |", "|---|---|---|"]
    for k, v in d.items():
        base = d["mpsolve nrm2 (native)"] if "nrm2" in k else d["mpsolve dot (native)"]
        L.append(f"| {k} | {v * 1e3:.2f} | {v / base:.2f} |")
    L.append("")
    c = res["cg"]
    L += [f"## CG + Jacobi on {c['matrix']} ({c['n']} rows) to rtol {c['rtol']:g}", "",
          f"One FP64 SpMV: {c['spmv_seconds'] * 1e3:.2f} ms.", "",
          "| solver | iterations | time (s) | ms / iteration | overhead per iteration beyond one SpMV (ms) | true rel. residual |",
          "|---|---|---|---|---|---|"]
    for k, v in c["runs"].items():
        per = v["solve"] / max(1, v["iterations"]) * 1e3
        L.append(f"| {k} | {v['iterations']} | {v['seconds']:.2f} | {per:.2f} | "
                 f"{per - c['spmv_seconds'] * 1e3:.2f} | {v['true_residual']:.1e} |")
    L.append("")
    if res.get("presets"):
        precs = ("double", "eft", "mixed", "mixed-eft", "ir")
        L += ["## Precision presets to a true relative residual of 1e-10 (escalation off)", "",
              "CG + Jacobi on the SPD matrices, GMRES(30) + Jacobi (max 3000 iterations) on the "
              "others; `F` = not reached.  Ratios are against `double` on the matrices both solved.", "",
              "| matrix | method | " + " | ".join(f"{p} it / s" for p in precs) + " |",
              "|---|---|" + "---|" * len(precs)]
        for r in res["presets"]:
            cells = []
            for p in precs:
                v = r[p]
                if "error" in v:
                    cells.append("error")
                else:
                    cells.append(f"{v['iterations']}{'' if v['converged'] else ' F'} / {v['seconds']:.2f}")
            L.append(f"| {r['matrix']} | {r['method']} | " + " | ".join(cells) + " |")
        L.append("")
        for p in precs[1:]:
            its, ts = [], []
            for r in res["presets"]:
                a, b = r["double"], r[p]
                if a.get("converged") and b.get("converged"):
                    its.append(b["iterations"] / a["iterations"])
                    ts.append(b["seconds"] / a["seconds"])
            if its:
                g = lambda v: float(np.exp(np.mean(np.log(v))))  # noqa: E731
                L.append(f"- `{p}` vs `double`: iterations {100 * g(its):.1f}% (geometric mean), "
                         f"time {g(ts):.2f}x, over {len(its)} matrices both solved; "
                         f"{sum(1 for r in res['presets'] if r[p].get('converged') and not r['double'].get('converged'))} "
                         f"solved only by `{p}`, "
                         f"{sum(1 for r in res['presets'] if r['double'].get('converged') and not r[p].get('converged'))} "
                         f"only by `double`")
        L.append("")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grid", type=int, default=100, help="Poisson grid (grid^3 rows; 100 -> 1M)")
    ap.add_argument("--elasticity", type=int, default=40, help="elasticity grid (3 n^3 rows)")
    ap.add_argument("--collection", default=os.environ.get(
        "MPSOLVE_TEST_COLLECTION", os.path.join(os.path.dirname(__file__), "..", "..", "shared",
                                                "matrices", "suitesparse")))
    ap.add_argument("--no-presets", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = ap.parse_args(argv)
    import numba

    res = {"command": "python bench/bench_core.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, numba threads {numba.get_num_threads()}",
           "versions": f"numpy {np.__version__}, scipy {scipy.__version__}, numba {numba.__version__}",
           "date": time.strftime("%Y-%m-%d %H:%M")}
    P = poisson3d(args.grid)
    E = elasticity3d(args.elasticity)
    print("spmv ...", flush=True)
    res["spmv"] = [spmv_section(P, f"poisson3d:{args.grid}"),
                   spmv_section(E, f"elasticity3d:{args.elasticity}")]
    print("dot ...", flush=True)
    res["dot"] = dot_section()
    print("cg ...", flush=True)
    res["cg"] = cg_section(P, f"poisson3d:{args.grid}")
    if not args.no_presets and os.path.isdir(args.collection):
        print("presets ...", flush=True)
        res["presets"] = presets_section(args.collection)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "core.json"), "w") as f:
        json.dump(res, f, indent=1)
    write_md(res, os.path.join(args.out, "core.md"))
    print(open(os.path.join(args.out, "core.md")).read())


if __name__ == "__main__":
    main()
