"""``mpsolve bench --device gpu``: mpsolve's CUDA backend against cuSPARSE, CuPy and PETSc.

Needs a CUDA GPU (``mpsolve info --device`` says what was found).  Without one it says
so and exits with status :data:`NO_GPU_EXIT`, running nothing and writing nothing.

What it times, on the suite's problems (``--quick``/``--full``/``--problems`` and the
SuiteSparse matrices, as ``mpsolve bench``), every kernel with CUDA events after a
warm-up (the first call -- numba-cuda's JIT compilation included -- is reported apart,
as ``first call``):

1. **SpMV** -- mpsolve's CSR kernel (FP64; FP32 values and vectors with FP32 sums; FP32
   values with FP64 vectors and sums) against cuSPARSE through ``cupyx.scipy.sparse``
   (``A @ x``, FP64 and FP32): time and effective bandwidth (values + column indices +
   row pointers + ``x`` + ``y`` once each).
2. **Dot** -- mpsolve's native and compensated (Dot2) dot against ``cupy.dot`` on
   ``--dot-size`` doubles.
3. **Preconditioners** -- Block-ISAI set-up (wall time; per stage from
   ``M.stats["stage_times"]`` when the preconditioner reports it) and apply (FP32
   storage, FP64 vectors) against cuSPARSE ILU(0): ``csrilu02`` (through
   ``cupyx.scipy.sparse.linalg.spilu(A, fill_factor=1)``, which factorises with
   ``cupyx.cusparse.csrilu02`` on the GPU and splits the factors on the host) and its
   two triangular solves (``spsolve_triangular``, cuSPARSE SpSM; CuPy analyses the
   triangle on every call, which the apply time includes -- that is what a CuPy user
   gets).
4. **Time to an FP64 true residual of ``--rtol``** (default 1e-8; wall clock, set-up and
   the upload of ``A`` and ``b`` included): mpsolve on the GPU (Jacobi and Block-ISAI
   in FP32, ``mixed``), ``cupyx.scipy.sparse.linalg`` cg/gmres/bicgstab with Jacobi and
   cuSPARSE ILU(0), and PETSc on the CPU (block Jacobi/ILU(0) and Jacobi, when
   petsc4py is installed).  Every run is judged by ``||b - A x|| / ||b||`` in FP64.
5. **Against the paper** -- the figures it reports on an A100 (Block-ISAI 6x faster
   than cuSPARSE's ILU(0) preconditioner, 11.2x faster than PETSc's) next to the
   same ratios measured here (geometric means over the problems both solved).

Writes ``results_gpu.json`` and ``results_gpu.md`` to ``--out`` and prints the tables.
"""
from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from typing import Callable, Dict, List

import numpy as np
import scipy.sparse as sp

__all__ = ["main", "run", "CudaEnv", "NO_GPU_EXIT", "PAPER"]

#: Exit status of ``mpsolve bench --device gpu`` when no GPU is usable.
NO_GPU_EXIT = 3
#: What the paper reports on an A100 (speed-ups of Block-ISAI, time to solution).
PAPER = {"vs_cusparse_ilu0": 6.0, "vs_petsc": 11.2}
#: mpsolve's configurations on the GPU (preconditioner, precision).
GPU_CONFIGS = [("jacobi", "mixed"), ("block-isai", "mixed")]
#: cupyx's preconditioners: Jacobi (a diagonal scaling) and cuSPARSE ILU(0).
CUPYX_PRECONDS = ["jacobi", "ilu0"]
DOT_SIZE = 10_000_000
REPEAT = 20


# ---------------------------------------------------------------------- environments
class CudaEnv:
    """The GPU: CuPy arrays, cuSPARSE through ``cupyx``, CUDA-event timings.

    Every CuPy import is here, guarded: a missing CUDA library (``cupyx.scipy.sparse.linalg``
    and ``cupy.cublas`` load cuSPARSE/cuBLAS/cuSOLVER) disables the baselines that need
    it, with a note, instead of stopping the benchmark."""

    device = "gpu"

    def __init__(self):
        import cupy
        import cupyx.scipy.sparse as csp

        self.xp, self.csp, self.notes = cupy, csp, []
        try:
            import cupyx.scipy.sparse.linalg as cspla
        except Exception as err:  # noqa: BLE001 - ImportError or a CUDA library error
            cspla = None
            self.notes.append(f"cupyx.scipy.sparse.linalg unavailable ({type(err).__name__}: "
                              f"{err}): no cupyx solver or cuSPARSE ILU(0) baselines")
        self.spla = cspla
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props.get("name", b"?")
        self.name = name.decode() if isinstance(name, bytes) else str(name)
        self.name += f" (cc {props.get('major')}.{props.get('minor')})"

    def sync(self):
        self.xp.cuda.get_current_stream().synchronize()

    def asarray(self, a, dtype=None):
        return self.xp.asarray(a, dtype=dtype)

    def csr(self, A, dtype=np.float64):
        A = sp.csr_matrix(A, dtype=dtype)
        return self.csp.csr_matrix(A)

    def time(self, fn: Callable, repeat: int = REPEAT):
        """``(first call, best, median)`` in seconds: the first call by the wall clock
        (JIT compilation included), then ``repeat`` calls timed by CUDA events."""
        cp = self.xp
        self.sync()
        t0 = time.perf_counter()
        fn()
        self.sync()
        first = time.perf_counter() - t0
        start, end = cp.cuda.Event(), cp.cuda.Event()
        ts = []
        for _ in range(repeat):
            start.record()
            fn()
            end.record()
            end.synchronize()
            ts.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        return first, min(ts), float(np.median(ts))

    def wall(self, fn: Callable):
        """``(seconds, result)`` of ``fn()`` by the wall clock, the device synchronised."""
        self.sync()
        t0 = time.perf_counter()
        out = fn()
        self.sync()
        return time.perf_counter() - t0, out

    # --- cuSPARSE ILU(0) ---------------------------------------------------------------
    def ilu0(self, Ad):
        """``(factor_s, setup_s, solve)``: ``csrilu02`` alone, the whole set-up of
        ``spilu(fill_factor=1)`` (factor + the host split of CuPy's ``CusparseLU``), and
        its ``solve(r)`` (two cuSPARSE triangular solves)."""
        from cupyx import cusparse

        a = Ad.copy()
        t_factor, _ = self.wall(lambda: cusparse.csrilu02(a))
        t_setup, lu = self.wall(lambda: self.spla.spilu(Ad, fill_factor=1))
        return t_factor, t_setup, lu.solve

    def solvers(self):
        s = self.spla
        return {"cg": s.cg, "gmres": s.gmres, "bicgstab": s.bicgstab}

    def operator(self, shape, matvec):
        return self.spla.LinearOperator(shape, matvec=matvec, dtype=np.float64)


# ------------------------------------------------------------------------- helpers
def _spmv_bytes(n, nnz, vbytes, xbytes):
    """Bytes an ideal CSR SpMV moves: values and column indices once, row pointers, x
    and y once each."""
    return nnz * (vbytes + 4) + (n + 1) * 4 + n * 2 * xbytes


def _geomean(xs):
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def _fmt(x, digits=3):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _table(rows: List[dict], cols: List[str]) -> str:
    head = "| " + " | ".join(cols) + " |"
    sep = "| " + " | ".join("---" for _ in cols) + " |"
    body = ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join([head, sep] + body)


# -------------------------------------------------------------------------- sections
def bench_spmv(env, name, A, repeat):
    from mpsolve.operator import SparseOperator

    n, nnz = A.shape[0], A.nnz
    rows = []
    for label, vdt, xdt, acc in (("fp64", "float64", "float64", "float64"),
                                 ("fp32", "float32", "float32", "float32"),
                                 ("fp32 values, fp64 vectors", "float32", "float64", "float64")):
        op = SparseOperator(A, vdt, acc, env.device)
        x = env.asarray(np.ones(n), dtype=xdt)
        y = env.xp.empty(n, dtype=xdt)
        f = op.bind(xdt, xdt)
        first, best, _ = env.time(lambda: f(x, y), repeat)
        gb = _spmv_bytes(n, nnz, np.dtype(vdt).itemsize, np.dtype(xdt).itemsize) / 1e9
        row = {"problem": name, "spmv": label, "first call s": first, "mpsolve s": best,
               "mpsolve GB/s": gb / best}
        if vdt == xdt:
            Ad = env.csr(A, vdt)
            first_c, best_c, _ = env.time(lambda: Ad @ x, repeat)
            row.update({"cuSPARSE s": best_c, "cuSPARSE GB/s": gb / best_c,
                        "speed-up": best_c / best})
        rows.append(row)
    return rows


def bench_dot(env, size, repeat):
    from mpsolve.kernels import lookup

    rng = np.random.default_rng(0)
    x = env.asarray(rng.standard_normal(size))
    y = env.asarray(rng.standard_normal(size))
    gb = 2 * size * 8 / 1e9
    _, t_ref, _ = env.time(lambda: float(env.xp.dot(x, y)), repeat)
    rows = [{"dot": "cupy.dot (cuBLAS)", "n": size, "s": t_ref, "GB/s": gb / t_ref,
             "x cupy.dot": 1.0}]
    for mode in ("native", "compensated"):
        f = lookup(env.device, "dot", ("float64",), mode)
        first, t, _ = env.time(lambda: f(x, y), repeat)
        rows.append({"dot": f"mpsolve {mode}" + (" (Dot2)" if mode == "compensated" else ""),
                     "n": size, "first call s": first, "s": t, "GB/s": gb / t,
                     "x cupy.dot": t / t_ref})
    return rows


def _block_isai(spd, args):
    from mpsolve._params import accepted_params
    from mpsolve.precond import REGISTRY

    cls = REGISTRY["block-isai"]
    return cls(**accepted_params(cls, {"variant": "spd" if spd else None,
                                       "block_size": args.block_size,
                                       "sparsity_power": args.sparsity_power}))


def bench_precond(env, name, A, spd, args, repeat):
    n = A.shape[0]
    r = env.asarray(A @ np.ones(n))
    z = env.xp.empty(n)
    rows = []
    M = _block_isai(spd, args)
    t_setup, _ = env.wall(lambda: M.setup(A, dtype="float32", device=env.device))
    first, t_apply, _ = env.time(lambda: M.apply(r, z), repeat)
    stages = dict((getattr(M, "stats", None) or {}).get("stage_times") or {})
    rows.append({"problem": name, "preconditioner": f"mpsolve Block-ISAI ({M.variant}, "
                 f"b={M.block_size}), fp32", "setup s": t_setup, "apply s": t_apply,
                 "first apply s": first,
                 "stages": ", ".join(f"{k} {v:.3g}" for k, v in stages.items()) or "-"})
    if env.spla is not None:
        try:
            Ad = env.csr(A)
            t_factor, t_setup_c, solve = env.ilu0(Ad)
            _, t_apply_c, _ = env.time(lambda: solve(r), max(3, repeat // 4))
            rows.append({"problem": name, "preconditioner": "cuSPARSE ILU(0) (csrilu02 + "
                         "2 triangular solves), fp64", "setup s": t_setup_c,
                         "apply s": t_apply_c, "stages": f"csrilu02 {t_factor:.3g}"})
            rows[0]["apply speed-up vs ILU(0)"] = t_apply_c / t_apply
        except Exception as err:  # noqa: BLE001 - zero pivot, missing library: recorded
            rows.append({"problem": name, "preconditioner": "cuSPARSE ILU(0)",
                         "stages": f"failed: {type(err).__name__}: {err}"})
    return rows


def _run_record(name, engine, method, pc, prec, total, setup, its, true, rtol, status=""):
    return {"problem": name, "engine": engine, "method": method, "precond": pc,
            "precision": prec, "total s": total, "setup s": setup, "iterations": its,
            "true residual": true, "converged": bool(true <= rtol), "status": status}


def solve_mpsolve(env, hooks, name, A, b, spd, method, pc, prec, args):
    import mpsolve

    def go():
        bd = env.asarray(b)                       # b on the device: the solve runs there
        M = hooks.precond_for(pc, method, args.block_size, args.sparsity_power)
        kw = dict(restart=args.restart, side=args.gmres_side) if method == "gmres" else {}
        return mpsolve.solve(A, bd, method=method, precond=M, precision=prec, rtol=args.rtol,
                             maxiter=max(1, args.maxiter // args.restart) if method == "gmres"
                             else args.maxiter, device=env.device, **kw)

    try:
        total, res = env.wall(go)
    except Exception as err:  # noqa: BLE001 - recorded, never dropped
        return _run_record(name, "mpsolve (GPU)", method, pc, prec, math.nan, math.nan, 0,
                           math.inf, args.rtol, f"error: {type(err).__name__}: {err}")
    return _run_record(name, "mpsolve (GPU)", method, pc, prec, total, res.setup_time,
                       res.iterations, res.true_residual, args.rtol, res.status)


def solve_cupyx(env, name, A, b, spd, method, pc, args):
    count = [0]

    def go():
        Ad = env.csr(A)
        bd = env.asarray(b)
        t0 = time.perf_counter()
        M = None
        if pc == "jacobi":
            dinv = 1.0 / Ad.diagonal()
            M = env.operator(A.shape, lambda v: dinv * v)
        elif pc == "ilu0":
            _, _, solve = env.ilu0(Ad)
            M = env.operator(A.shape, solve)
        env.sync()
        setup = time.perf_counter() - t0
        kw = dict(rtol=args.rtol, M=M, maxiter=args.maxiter)
        if method == "gmres":
            kw.update(restart=args.restart, callback_type="x")
            step = args.restart                   # cupyx's callback: once per restart cycle
        else:
            step = 1

        def cb(_):
            count[0] += step

        x, info = env.solvers()[method](Ad, bd, callback=cb, **kw)
        true = float(env.xp.linalg.norm(bd - Ad @ x) / env.xp.linalg.norm(bd))
        return setup, true, info

    try:
        total, (setup, true, info) = env.wall(go)
    except Exception as err:  # noqa: BLE001
        return _run_record(name, "cupyx", method, pc, "double", math.nan, math.nan, count[0],
                           math.inf, args.rtol, f"error: {type(err).__name__}: {err}")
    return _run_record(name, "cupyx", method, pc, "double", total, setup, count[0], true,
                       args.rtol, f"info={info}")


def solve_petsc(name, A, b, spd, method, pc, args):
    from .baselines import run_petsc

    r = run_petsc(A, b, name, spd, method, pc, args)
    return _run_record(name, "PETSc (CPU)", method, pc, "double", r.total_time, r.setup_time,
                       r.iterations, r.true_residual if math.isfinite(r.true_residual)
                       else math.inf, args.rtol, r.status)


def _warm_up(env, hooks, A, spd, methods, args, log):
    """Each engine once before the timed runs (the kernels compile on first use:
    numba-cuda's JIT, CuPy's kernel cache, the host's numba kernels): a short run on a
    leading block of ``A``, then mpsolve's Jacobi configurations solved on ``A`` itself
    (on an H100, short non-converging runs alone left ~1 s of compilation in the first
    timed solve of each problem: 1.45 s against 0.39 s warm for CG + Jacobi on
    poisson3d:80).  Block-ISAI's set-up on ``A`` is not repeated (it is timed apart).
    Returns the wall time."""
    from types import SimpleNamespace

    m = min(A.shape[0], 20_000)
    S = sp.csr_matrix(A[:m, :m])
    bs = S @ np.ones(m)
    b = A @ np.ones(A.shape[0])
    short = SimpleNamespace(**{**vars(args), "maxiter": 2 * args.restart, "rtol": 1e-30})
    t0 = time.perf_counter()
    for method in methods:
        for pc, prec in GPU_CONFIGS:
            solve_mpsolve(env, hooks, "warm-up", S, bs, spd, method, pc, prec, short)
            if pc != "block-isai":                 # the whole solve: certification too
                solve_mpsolve(env, hooks, "warm-up", A, b, spd, method, pc, prec, args)
        if env.spla is not None:
            for pc in CUPYX_PRECONDS:
                solve_cupyx(env, "warm-up", S, bs, spd, method, pc, short)
    t = time.perf_counter() - t0
    log(f"  warm-up (JIT compilation and first launches): {t:.2f} s")
    return t


def summary_vs_paper(runs, precond_rows, env_name):
    """The paper's ratios next to ours (geometric means over problem x method where both
    converged): Block-ISAI's time to solution against cupyx + cuSPARSE ILU(0) and against
    PETSc's block Jacobi/ILU(0) on the CPU; and the apply-time ratio."""
    def pick(engine, pc, problem, method):
        c = [r for r in runs if r["engine"] == engine and r["precond"] == pc
             and r["problem"] == problem and r["method"] == method and r["converged"]]
        return min(c, key=lambda r: r["total s"]) if c else None

    keys = sorted({(r["problem"], r["method"]) for r in runs})
    vs_ilu0, vs_petsc = [], []
    for p, m in keys:
        mine = pick("mpsolve (GPU)", "block-isai", p, m)
        if mine is None:
            continue
        other = pick("cupyx", "ilu0", p, m)
        if other is not None:
            vs_ilu0.append(other["total s"] / mine["total s"])
        other = pick("PETSc (CPU)", "bjacobi", p, m)
        if other is not None:
            vs_petsc.append(other["total s"] / mine["total s"])
    apply = [r["apply speed-up vs ILU(0)"] for r in precond_rows
             if "apply speed-up vs ILU(0)" in r]
    return [
        {"comparison": "Block-ISAI vs cuSPARSE ILU(0), time to solution",
         "paper (A100)": PAPER["vs_cusparse_ilu0"], "here": _geomean(vs_ilu0),
         "cases": len(vs_ilu0), "GPU": env_name},
        {"comparison": "Block-ISAI vs cuSPARSE ILU(0), one apply",
         "paper (A100)": None, "here": _geomean(apply), "cases": len(apply), "GPU": env_name},
        {"comparison": "Block-ISAI (GPU) vs PETSc block Jacobi/ILU(0) (CPU), time to solution",
         "paper (A100)": PAPER["vs_petsc"], "here": _geomean(vs_petsc),
         "cases": len(vs_petsc), "GPU": env_name},
    ]


# ---------------------------------------------------------------------------- runner
def run(args, env, hooks, log=None) -> Dict[str, list]:
    """Every section on every problem of the suite with ``env`` (:class:`CudaEnv`);
    ``hooks``: the suite's problems and configurations (:func:`mpsolve.bench.suite.gpu_hooks`).
    Returns the tables (lists of dicts) by section."""
    from .baselines import petsc_available

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    repeat = getattr(args, "repeat_kernels", None) or REPEAT
    out = {"spmv": [], "dot": [], "precond": [], "solve": [], "warm_up": []}
    problems = hooks.load_problems(args, log)
    _, petsc_pcs = hooks.baseline_preconds(args)
    with_petsc = "petsc" in args.baselines and petsc_available()
    if "petsc" in args.baselines and not with_petsc:
        log("note: petsc4py is not installed: the PETSc (CPU) baseline is skipped")
    log(f"dot: n = {args.dot_size}")
    out["dot"] = bench_dot(env, args.dot_size, repeat)
    for name, A, spd in problems:
        A = sp.csr_matrix(A, dtype=np.float64)
        A.sort_indices()
        b = A @ np.ones(A.shape[0])
        methods = hooks.methods_for(spd, args)
        log(f"{name}: n = {A.shape[0]}, nnz = {A.nnz}")
        out["warm_up"].append({"problem": name, "s": _warm_up(env, hooks, A, spd, methods,
                                                             args, log)})
        out["spmv"] += bench_spmv(env, name, A, repeat)
        out["precond"] += bench_precond(env, name, A, spd, args, repeat)
        for method in methods:
            start = len(out["solve"])
            for pc, prec in GPU_CONFIGS:
                out["solve"].append(solve_mpsolve(env, hooks, name, A, b, spd, method, pc,
                                                  prec, args))
            if env.spla is not None:
                for pc in CUPYX_PRECONDS:
                    out["solve"].append(solve_cupyx(env, name, A, b, spd, method, pc, args))
            if with_petsc:
                for pc in petsc_pcs:
                    out["solve"].append(solve_petsc(name, A, b, spd, method, pc, args))
            for r in out["solve"][start:]:
                log(f"  {'ok  ' if r['converged'] else 'FAIL'} {r['engine']:14s} {method:8s} "
                    f"{r['precond']:11s} {_fmt(r['total s'])} s, it={r['iterations']}, "
                    f"res={_fmt(r['true residual'])}")
    out["paper"] = summary_vs_paper(out["solve"], out["precond"], env.name)
    return out


def markdown(out, meta) -> str:
    parts = [f"# mpsolve on the GPU ({meta['gpu']})", "",
             f"`{meta['command']}`, {meta['date']}; kernels timed by CUDA events after a "
             "warm-up, best of the repeats (`first call`: the first launch, JIT compilation "
             "included); solves by the wall clock, set-up and uploads included.", ""]
    parts += ["## Against the paper", "", _table(out["paper"], ["comparison", "paper (A100)",
                                                                "here", "cases", "GPU"]), ""]
    parts += ["## SpMV", "", _table(out["spmv"], ["problem", "spmv", "mpsolve s", "mpsolve GB/s",
                                                  "cuSPARSE s", "cuSPARSE GB/s", "speed-up",
                                                  "first call s"]), ""]
    parts += ["## Dot", "", _table(out["dot"], ["dot", "n", "s", "GB/s", "x cupy.dot",
                                                "first call s"]), ""]
    parts += ["## Preconditioners", "", _table(out["precond"], [
        "problem", "preconditioner", "setup s", "apply s", "apply speed-up vs ILU(0)",
        "stages"]), ""]
    parts += ["## Time to solution", "", _table(out["solve"], [
        "problem", "engine", "method", "precond", "precision", "total s", "setup s",
        "iterations", "true residual", "converged"]), ""]
    parts += ["## Warm-up", "", _table(out["warm_up"], ["problem", "s"]), ""]
    if meta.get("notes"):
        parts += ["## Notes", ""] + [f"* {n}" for n in meta["notes"]] + [""]
    return "\n".join(parts)


def no_gpu_message(report) -> str:
    why = "; ".join(report["missing"]) or "no CUDA device found"
    return (f"mpsolve bench --device gpu: error: no usable GPU here ({why}). The GPU timings "
            "need a CUDA GPU: nothing was run. `mpsolve info --device` lists what was found"
            + (f"; to install what is missing: {' '.join(report['fix'])}" if report["fix"]
               else "") + ".")


def main(args, hooks, env=None) -> int:
    """``mpsolve bench --device gpu``; returns the exit status (:data:`NO_GPU_EXIT`
    without a usable GPU).  ``hooks``: :func:`mpsolve.bench.suite.gpu_hooks`; ``env``: for
    tests, a stand-in for :class:`CudaEnv`."""
    if env is None:
        from mpsolve.backend import gpu_report

        report = gpu_report()
        if not report["usable"]:
            print(no_gpu_message(report), file=sys.stderr)
            return NO_GPU_EXIT
        try:
            env = CudaEnv()
        except Exception as err:  # noqa: BLE001 - a CUDA library CuPy needs is missing
            print(f"mpsolve bench --device gpu: error: the GPU was found but CuPy cannot use "
                  f"it ({type(err).__name__}: {err}); nothing was run. `mpsolve info --device` "
                  "lists the stack", file=sys.stderr)
            return NO_GPU_EXIT
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    out = run(args, env, hooks)
    meta = {"command": "mpsolve " + " ".join(sys.argv[1:]) if sys.argv and "mpsolve" in
            sys.argv[0] else "mpsolve bench --device gpu (called from Python)",
            "gpu": env.name, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rtol": args.rtol,
            "wall_seconds": time.time() - t0, "notes": list(getattr(env, "notes", []))}
    with open(os.path.join(args.out, "results_gpu.json"), "w") as f:
        json.dump({"meta": meta, **out}, f, indent=1, default=float)
    text = markdown(out, meta)
    with open(os.path.join(args.out, "results_gpu.md"), "w") as f:
        f.write(text)
    print(text)
    print(f"wrote {args.out}/results_gpu.json and results_gpu.md")
    return 0
