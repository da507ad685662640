"""``mpsolve bench``: the suite runner behind the command.

Runs every problem of a suite through mpsolve's configurations (methods x
precision presets x preconditioners) and through the baselines -- SciPy (the
same Krylov method with ``spilu`` or Jacobi) and PETSc (KSP gmres/cg/bcgs with
PC jacobi, bjacobi+ilu, sor, and with mpsolve's own PC) when petsc4py is
installed -- all with the same right-hand side ``b = A @ ones``, the zero
starting guess and the same FP64 true-residual tolerance.  A run that fails or
does not converge is recorded as such, never dropped.

Writes ``results.json`` (every run, with residual histories), ``results.md``
(tables and a summary of time-to-solution ratios), ``convergence_*.png`` and
``profile.png`` (a Dolan--More performance profile).
"""
from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import List

import numpy as np

__all__ = ["add_arguments", "main", "run_suite", "Run", "DEFAULT_SUITE", "QUICK_SUITE"]

#: The built-in suite: 1M unknowns for the scalar 3-D problems, 192k (15M nonzeros) for
#: elasticity.
DEFAULT_SUITE = ["poisson3d:100", "convdiff3d:100,peclet=10", "anisotropic3d:64",
                 "elasticity3d:40"]
#: A small suite for smoke runs and CI (``--quick``).
QUICK_SUITE = ["poisson3d:24", "convdiff2d:64,peclet=20", "elasticity3d:8"]


@dataclass
class Run:
    problem: str
    n: int
    nnz: int
    spd: bool
    solver: str            # mpsolve | scipy | petsc
    method: str
    precision: str
    precond: str
    setup_time: float = float("nan")
    solve_time: float = float("nan")
    iterations: int = 0
    true_residual: float = float("nan")
    converged: bool = False
    status: str = ""
    precond_nbytes: int = 0
    history: List[float] = field(default_factory=list)

    @property
    def total_time(self):
        return self.setup_time + self.solve_time

    @property
    def label(self):
        return f"{self.solver}:{self.method}/{self.precond}/{self.precision}"


# ----------------------------------------------------------------------- problems
def _load_problems(args):
    """(name, A, spd) triples of the suite."""
    from .matrices import generate, list_collection, read_mtx

    out = []
    if args.collection:
        entries = list_collection([args.collection])
        for e in entries:
            if args.matrices and e.name not in args.matrices:
                continue
            A = read_mtx(e.path)
            out.append((e.name, A, bool(e.spd)))
    specs = args.problems
    if specs is None:
        specs = [] if args.collection else (QUICK_SUITE if args.quick else DEFAULT_SUITE)
    for spec in specs:
        A = generate(spec)
        name = spec.split(":")[0]
        spd = name.startswith(("poisson", "anisotropic", "elasticity", "laplacian"))
        out.append((spec, A, spd))
    return out


def _methods_for(spd, methods, explicit=False):
    """CG only on SPD problems; by default BiCGSTAB only on the others."""
    out = [m for m in methods if m != "cg" or spd]
    if spd and not explicit:
        out = [m for m in out if m != "bicgstab"]
    return out


def _precond_for(name, method, block_size=None, sparsity_power=None):
    """An mpsolve preconditioner (or None) configured for ``method``."""
    import inspect

    from .precond import REGISTRY

    if name == "none":
        return None
    cls = REGISTRY[name]
    params = inspect.signature(cls.__init__).parameters
    kw = {}
    if "variant" in params:
        kw["variant"] = "spd" if method == "cg" else "general"
    if block_size is not None and "block_size" in params:
        kw["block_size"] = block_size
    if sparsity_power is not None and "sparsity_power" in params:
        kw["sparsity_power"] = sparsity_power
    return cls(**kw)


# ------------------------------------------------------------------------ runners
def run_mpsolve(A, b, problem, spd, method, precision, precond, args):
    from . import solve

    base = dict(problem=problem, n=A.shape[0], nnz=int(A.nnz), spd=spd, solver="mpsolve",
                method=method, precision=precision, precond=precond)
    try:
        _warm_up(A, method, precision, precond, args)
        M = _precond_for(precond, method, args.block_size, args.sparsity_power)
        kw = dict(restart=args.restart, side=args.gmres_side) if method == "gmres" else {}
        res = solve(A, b, method=method, precond=M, precision=precision, rtol=args.rtol,
                    maxiter=_maxiter(method, args), callback=_deadline_callback(args.time_limit),
                    **kw)
    except _TimeLimit:
        return Run(**base, status=f"stopped at the time limit ({args.time_limit:g} s)",
                   setup_time=float("nan"), solve_time=float(args.time_limit))
    except Exception as err:  # recorded, never dropped
        return Run(**base, status=f"error: {type(err).__name__}: {err}")
    return Run(**base, setup_time=res.setup_time, solve_time=res.solve_time,
               iterations=res.iterations, true_residual=res.true_residual,
               converged=res.converged, status=res.status, precond_nbytes=res.precond_nbytes,
               history=[float(h) for h in res.residuals[:: max(1, len(res.residuals) // 400)]])


_WARM = set()


class _TimeLimit(Exception):
    """Raised from an iteration callback when a run exceeds ``--time-limit``."""


def _deadline_callback(limit, counter=None):
    """A callback that counts iterations and stops the run past ``limit`` seconds."""
    start = time.perf_counter()

    def cb(*_):
        if counter is not None:
            counter[0] += 1
        if time.perf_counter() - start > limit:
            raise _TimeLimit
    return cb


def _warm_up(A, method, precision, precond, args):
    """Compile the kernels a configuration uses before it is timed (Numba compiles on
    first call; the on-disk cache makes this cheap after the first run): a few
    iterations on a leading principal submatrix large enough to take the parallel
    kernel paths."""
    import warnings

    from . import solve

    block = args.block_size
    if block is None and precond.startswith("block-"):
        from .precond import detect_block_size

        block = detect_block_size(A)  # kernels are generated per block size
    key = (method, precision, precond, A.shape[0] > 40_000, block)
    if key in _WARM:
        return
    m = min(A.shape[0], 40_000)
    S = A[:m, :m].tocsr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            M = _precond_for(precond, method, block, args.sparsity_power)
            kw = dict(side=args.gmres_side) if method == "gmres" else {}
            solve(S, S @ np.ones(m), method=method, precond=M, precision=precision,
                  rtol=1e-30, maxiter=2, escalate=False, **kw)
        except Exception:
            pass  # the timed run reports whatever goes wrong
    _WARM.add(key)


def _maxiter(method, args):
    if method == "gmres":
        return max(1, args.maxiter // args.restart)
    return args.maxiter


_SPILU = {}  # one SuperLU ILU factorisation per problem, shared by the methods


def run_scipy(A, b, problem, spd, method, precond, args):
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    base = dict(problem=problem, n=A.shape[0], nnz=int(A.nnz), spd=spd, solver="scipy",
                method=method, precision="double", precond=precond)
    t0 = time.perf_counter()
    try:
        if precond == "jacobi":
            d = A.diagonal()
            if (d == 0).any():
                return Run(**base, status="error: zero diagonal, Jacobi undefined")
            M = sp.diags(1.0 / d)
            nbytes = d.nbytes
        elif precond == "spilu":
            key = (problem, A.shape, A.nnz)
            if key not in _SPILU:
                t_f = time.perf_counter()
                _SPILU.clear()
                _SPILU[key] = (spla.spilu(A.tocsc()), time.perf_counter() - t_f)
            ilu, t_factor = _SPILU[key]
            t0 = time.perf_counter() - t_factor  # the factorisation counts for every method
            M = spla.LinearOperator(A.shape, matvec=ilu.solve)
            nbytes = int(ilu.L.data.nbytes + ilu.U.data.nbytes + ilu.L.indices.nbytes
                         + ilu.U.indices.nbytes)
        else:
            M, nbytes = None, 0
    except Exception as err:
        return Run(**base, setup_time=time.perf_counter() - t0,
                   status=f"error in setup: {type(err).__name__}: {err}")
    setup = time.perf_counter() - t0
    count = [0]
    cb = _deadline_callback(args.time_limit, count)
    kw = dict(rtol=args.rtol, M=M, callback=cb, maxiter=_maxiter(method, args))
    if method == "gmres":
        kw.update(restart=args.restart, callback_type="pr_norm")
    fn = {"cg": spla.cg, "gmres": spla.gmres, "bicgstab": spla.bicgstab}[method]
    t1 = time.perf_counter()
    try:
        x, info = fn(A, b, **kw)
    except _TimeLimit:
        return Run(**base, setup_time=setup, solve_time=float(args.time_limit),
                   iterations=count[0], precond_nbytes=nbytes,
                   status=f"stopped at the time limit ({args.time_limit:g} s)")
    except Exception as err:
        return Run(**base, setup_time=setup, status=f"error: {type(err).__name__}: {err}")
    solve = time.perf_counter() - t1
    true = float(np.linalg.norm(b - A @ x) / np.linalg.norm(b))
    ok = bool(true <= args.rtol)
    status = ("converged" if ok else
              f"not converged (scipy info={info})" + (" -- scipy reported success but the true "
                                                      "residual misses the tolerance" if info == 0 else ""))
    return Run(**base, setup_time=setup, solve_time=solve, iterations=count[0],
               true_residual=true, converged=ok, status=status, precond_nbytes=nbytes)


def run_petsc(A, b, problem, spd, method, pc, args):
    from .petsc import petsc_solve

    base = dict(problem=problem, n=A.shape[0], nnz=int(A.nnz), spd=spd, solver="petsc",
                method=method, precision="double", precond=pc)
    try:
        out = petsc_solve(A, b, method=method, pc=pc, rtol=args.rtol,
                          maxiter=args.maxiter, restart=args.restart,
                          block_size=args.block_size, sparsity_power=args.sparsity_power,
                          time_limit=args.time_limit)
    except Exception as err:
        return Run(**base, status=f"error: {type(err).__name__}: {err}")
    true = out["true_residual"]
    return Run(**base, setup_time=out["setup_time"], solve_time=out["solve_time"],
               iterations=out["iterations"], true_residual=true,
               converged=bool(true <= args.rtol), status=out["reason"])


def petsc_available():
    try:
        import petsc4py  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------- suite
def run_suite(args, progress=True) -> List[Run]:
    problems = _load_problems(args)
    jobs = []
    for name, A, spd in problems:
        for method in _methods_for(spd, args.methods or ["cg", "gmres", "bicgstab"],
                                   explicit=args.methods is not None):
            for pc in args.preconds:
                for prec in args.precisions:
                    jobs.append(("mpsolve", name, A, spd, method, prec, pc))
            if "scipy" in args.baselines:
                for pc in args.scipy_preconds:
                    jobs.append(("scipy", name, A, spd, method, "double", pc))
            if "petsc" in args.baselines and petsc_available():
                for pc in args.petsc_preconds:
                    jobs.append(("petsc", name, A, spd, method, "double", pc))
    runs = []
    rhs = {}
    bar = _progress(len(jobs)) if progress else None
    try:
        for solver, name, A, spd, method, prec, pc in jobs:
            if name not in rhs:
                rhs[name] = A @ np.ones(A.shape[0])
            b = rhs[name]
            if bar:
                bar.update(f"{name} {solver} {method}/{pc}/{prec}")
            r = None
            for _ in range(args.repeat):
                if solver == "mpsolve":
                    t = run_mpsolve(A, b, name, spd, method, prec, pc, args)
                elif solver == "scipy":
                    t = run_scipy(A, b, name, spd, method, pc, args)
                else:
                    t = run_petsc(A, b, name, spd, method, pc, args)
                if r is None or (t.converged and t.total_time < r.total_time):
                    r = t  # the fastest of the repeats (same for every solver)
                if not t.converged:
                    break  # a failure is not retried: it is reported as it happened
            runs.append(r)
            if bar:
                bar.advance(r)
    finally:
        if bar:
            bar.close()
    return runs


class _progress:
    """A rich progress bar (plain lines when stdout is not a terminal)."""

    def __init__(self, total):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True)
        self.p = Progress(TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), TextColumn("{task.description}"),
                          console=self.console, transient=False)
        self.p.start()
        self.task = self.p.add_task("", total=total)

    def update(self, text):
        self.p.update(self.task, description=text)

    def advance(self, run):
        mark = "ok " if run.converged else "FAIL"
        self.console.log(f"{mark} {run.problem:28s} {run.label:45s} it={run.iterations:6d} "
                         f"t={run.total_time:8.3f}s res={run.true_residual:.1e}")
        self.p.advance(self.task)

    def close(self):
        self.p.stop()


# ------------------------------------------------------------------------ output
def _fmt_t(t):
    return "-" if not math.isfinite(t) else f"{t:.3f}"


#: The baselines' reference runs (issue 5's goal): PETSc's default GMRES(30) with block
#: Jacobi/ILU(0), SciPy's gmres with spilu.  On an SPD problem that has no GMRES run the
#: baseline's CG run with the same preconditioner stands in.
REFERENCE = {"petsc": (("gmres", "cg"), "bjacobi"), "scipy": (("gmres", "cg"), "spilu")}


def best(runs, solver, problem):
    ok = [r for r in runs if r.solver == solver and r.problem == problem and r.converged]
    return min(ok, key=lambda r: r.total_time) if ok else None


def _geomean(xs):
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def summary(runs, reference=None):
    """Per problem: mpsolve's best time to solution against each baseline.

    ``reference``: a dict solver -> (methods, precond) naming the baseline run to
    compare with: the run of the first of ``methods`` that has one, converged or not
    (e.g. PETSc's default GMRES + bjacobi/ILU(0), see :data:`REFERENCE`); without it
    each baseline's best converged run.
    """
    problems = list(dict.fromkeys(r.problem for r in runs))
    lines = []
    ratios = {}
    for p in problems:
        mine = best(runs, "mpsolve", p)
        row = {"problem": p, "mpsolve": mine}
        for s in ("scipy", "petsc"):
            other = None
            if reference and s in reference:
                meths, pc = reference[s]
                for meth in meths:  # the first method that has a run, converged or not
                    cands = [r for r in runs if r.solver == s and r.problem == p
                             and r.precond == pc and r.method == meth]
                    if cands:
                        other = cands[0]
                        break
            if other is None:  # no reference run for this problem: the baseline's best run
                other = best(runs, s, p)
            row[s] = other
            if mine and other:
                t_other = other.total_time if other.converged else math.inf
                ratios.setdefault(s, []).append(t_other / mine.total_time)
        lines.append(row)
    return lines, {s: _geomean([x for x in v if math.isfinite(x)]) for s, v in ratios.items()}, ratios


def write_markdown(runs, path, meta, reference=None):
    rows, gm, ratios = summary(runs, reference)
    out = ["# mpsolve bench results", "", f"Command: `{meta['command']}`", "",
           f"Machine: {meta['machine']}; Python {meta['python']}; versions: "
           + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()), "",
           f"Tolerance: FP64 true relative residual <= {meta['rtol']:g}; b = A @ ones; x0 = 0.", ""]
    _, gm_best, ratios_best = summary(runs, None)
    best_rows = {row["problem"]: row for row in summary(runs, None)[0]}
    ref_name = {s: (f"{s} {'/'.join(reference[s][0])}+{reference[s][1]}" if reference and
                    s in reference else f"{s} best") for s in ("scipy", "petsc")}

    def cell(r):
        if r is None:
            return "-", "-"
        return (f"{r.method}/{r.precond}/{r.precision}" + ("" if r.converged else " (failed)"),
                _fmt_t(r.total_time) if r.converged else "failed")

    def ratio(mine, other):
        if mine is None or other is None:
            return "-"
        if not other.converged:
            return "only mpsolve"
        return f"{other.total_time / mine.total_time:.2f}x"

    out += ["## Best time to solution per problem", "",
            "Time to solution = set-up + solve (building the solver's copy of the matrix "
            "included). Speed-up = baseline time / mpsolve's best time. The reference "
            "columns are each baseline's GMRES(restart) run with the named preconditioner "
            "(its CG run where no GMRES ran); 'petsc best' is PETSc's fastest converged run.",
            "",
            f"| problem | mpsolve best | time (s) | {ref_name['scipy']} (s) | "
            f"{ref_name['petsc']} (s) | speed-up vs it | petsc best | time (s) | "
            "speed-up vs it |",
            "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        mine = row.get("mpsolve")
        pb = best_rows[row["problem"]].get("petsc")
        out.append("| " + " | ".join([
            row["problem"], *cell(mine), cell(row.get("scipy"))[1], cell(row.get("petsc"))[1],
            ratio(mine, row.get("petsc")), *cell(pb), ratio(mine, pb)]) + " |")
    out.append("")
    for label, gms, rts in (("the reference", gm, ratios), ("the best run", gm_best,
                                                             ratios_best)):
        for s, g in gms.items():
            finite = [x for x in rts[s] if math.isfinite(x)]
            failed = len(rts[s]) - len(finite)
            name = ref_name[s] if label == "the reference" else f"{s}'s best run (any method " \
                "and preconditioner)"
            out.append(f"- mpsolve's best vs {name}: geometric-mean speed-up **{g:.2f}x** over "
                       f"the {len(finite)} problems both solved; on {failed} more the {s} run "
                       f"failed and mpsolve's did not")
    out += ["", "## Every run", "",
            "| problem | solver | method | precond | precision | iters | setup s | solve s | "
            "total s | true rel. res | M MiB | status |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        out.append(f"| {r.problem} | {r.solver} | {r.method} | {r.precond} | {r.precision} | "
                   f"{r.iterations} | {_fmt_t(r.setup_time)} | {_fmt_t(r.solve_time)} | "
                   f"{_fmt_t(r.total_time)} | {r.true_residual:.2e} | "
                   f"{r.precond_nbytes / 2**20:.2f} | "
                   f"{'ok' if r.converged else 'FAILED: '}{'' if r.converged else r.status[:80]} |")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def write_plots(runs, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    for p in dict.fromkeys(r.problem for r in runs):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in runs:
            if r.problem == p and r.history:
                step = max(1, r.iterations // max(1, len(r.history) - 1)) if r.iterations else 1
                its = np.arange(len(r.history)) * step
                ax.semilogy(its, np.maximum(r.history, 1e-300), label=r.label, lw=1)
        if not ax.lines:
            plt.close(fig)
            continue
        ax.set_xlabel("iteration")
        ax.set_ylabel("relative residual")
        ax.set_title(f"convergence: {p}")
        ax.legend(fontsize=6, ncol=2)
        ax.grid(True, which="both", alpha=0.3)
        safe = "".join(c if c.isalnum() else "_" for c in p)
        f = os.path.join(outdir, f"convergence_{safe}.png")
        fig.tight_layout()
        fig.savefig(f, dpi=110)
        plt.close(fig)
        files.append(f)
    # performance profile (Dolan & More 2002) over time to solution
    labels = sorted({r.label for r in runs})
    problems = list(dict.fromkeys(r.problem for r in runs))
    T = np.full((len(problems), len(labels)), np.inf)
    for r in runs:
        if r.converged:
            T[problems.index(r.problem), labels.index(r.label)] = r.total_time
    tmin = T.min(axis=1, keepdims=True)
    solved = np.isfinite(tmin[:, 0])
    if solved.any():
        ratio = T[solved] / tmin[solved]
        taus = np.logspace(0, 2, 200)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for j, lab in enumerate(labels):
            rho = [(ratio[:, j] <= t).mean() for t in taus]
            if max(rho) > 0:
                ax.step(taus, rho, where="post", label=lab, lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("tau (time / best time)")
        ax.set_ylabel("fraction of problems solved within tau")
        ax.set_title("performance profile (time to solution)")
        ax.legend(fontsize=6, ncol=2)
        ax.grid(True, alpha=0.3)
        f = os.path.join(outdir, "profile.png")
        fig.tight_layout()
        fig.savefig(f, dpi=110)
        plt.close(fig)
        files.append(f)
    return files


def _versions():
    import numba
    import scipy

    v = {"mpsolve": __import__("mpsolve").__version__, "numpy": np.__version__,
         "scipy": scipy.__version__, "numba": numba.__version__}
    try:
        import petsc4py
        from petsc4py import PETSc  # noqa: F401

        v["petsc4py"] = petsc4py.__version__
        v["petsc"] = ".".join(map(str, PETSc.Sys.getVersion()))
    except Exception:
        v["petsc4py"] = "not installed"
    return v


# --------------------------------------------------------------------------- CLI
def _positive_int(text):
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def add_arguments(p):
    from .precision import PRESETS

    p.add_argument("--collection", metavar="DIR",
                   help="run the matrices of a SuiteSparse collection folder (with MANIFEST.tsv "
                        "or *.mtx[.gz]) instead of the generated problems")
    p.add_argument("--matrices", nargs="+", metavar="NAME",
                   help="only these matrices of the collection")
    p.add_argument("--problems", nargs="+", metavar="SPEC",
                   help=f"generated problems (default: {' '.join(DEFAULT_SUITE)})")
    p.add_argument("--quick", action="store_true",
                   help=f"small generated problems ({' '.join(QUICK_SUITE)})")
    p.add_argument("--methods", nargs="+", default=None,
                   choices=["cg", "gmres", "bicgstab"],
                   help="Krylov methods (default: cg and gmres on SPD problems, gmres and "
                        "bicgstab on the others; cg never on non-SPD ones)")
    p.add_argument("--precisions", nargs="+", default=["double", "mixed", "mixed-eft"],
                   choices=sorted(PRESETS), help="mpsolve precision presets")
    p.add_argument("--preconds", nargs="+", default=["jacobi", "ilu0", "block-isai"],
                   help="mpsolve preconditioners (names in mpsolve.precond.REGISTRY, or none)")
    p.add_argument("--baselines", nargs="*", default=["scipy", "petsc"],
                   choices=["scipy", "petsc"], help="baselines to run (petsc needs petsc4py)")
    p.add_argument("--scipy-preconds", nargs="+", default=["jacobi", "spilu"],
                   choices=["none", "jacobi", "spilu"])
    p.add_argument("--petsc-preconds", nargs="+",
                   default=["jacobi", "bjacobi", "sor", "mpsolve"],
                   help="PETSc PCs (bjacobi = block Jacobi with ILU(0) blocks; mpsolve = "
                        "mpsolve.petsc.BlockISAI through the python PC)")
    p.add_argument("--rtol", type=float, default=1e-8, help="FP64 true relative residual (1e-8)")
    p.add_argument("--maxiter", type=int, default=3000,
                   help="iteration limit per run (inner iterations for gmres; default 3000)")
    p.add_argument("--restart", type=int, default=30, help="GMRES restart (default 30)")
    p.add_argument("--gmres-side", choices=["left", "right"], default="right",
                   help="preconditioning side of mpsolve's GMRES (default right: the PETSc "
                        "baseline runs right-preconditioned GMRES with the unpreconditioned "
                        "residual norm, so both minimise the same residual)")
    p.add_argument("--time-limit", type=float, default=60.0,
                   help="seconds one solve may iterate before it is stopped and recorded as "
                        "not converged (default 60; a preconditioner set-up is not interrupted)")
    p.add_argument("--repeat", type=_positive_int, default=1,
                   help="run each converged configuration this many times and keep the "
                        "fastest (every solver alike; this machine's timings are noisy)")
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--sparsity-power", type=int, default=None)
    p.add_argument("--out", default="mpsolve-bench",
                   help="output folder for results.json, results.md and the plots")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--rebuild", action="store_true",
                   help="run nothing: rewrite results.md and the plots from --out/results.json")


def _rebuild(args):
    """Write results.md and the plots again from an existing results.json."""
    with open(os.path.join(args.out, "results.json")) as f:
        data = json.load(f)
    runs = [Run(**r) for r in data["runs"]]
    write_markdown(runs, os.path.join(args.out, "results.md"), data["meta"], REFERENCE)
    if not args.no_plots:
        write_plots(runs, args.out)
    print(f"rewrote {args.out}/results.md from results.json")
    return 0


def main(args):
    from .precond import REGISTRY

    if args.rebuild:
        return _rebuild(args)

    bad = [p for p in args.preconds if p != "none" and p not in REGISTRY]
    if bad:
        raise ValueError(f"--preconds: unknown {bad}; choose from {['none'] + sorted(REGISTRY)}")
    if "petsc" in args.baselines and not petsc_available():
        print("note: petsc4py is not installed: the PETSc baseline is skipped", file=sys.stderr)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    runs = run_suite(args, progress=True)
    meta = {
        "command": "mpsolve " + " ".join(sys.argv[1:]) if sys.argv and "mpsolve" in sys.argv[0]
        else "mpsolve bench (called from Python)",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "python": platform.python_version(), "versions": _versions(), "rtol": args.rtol,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_seconds": time.time() - t0,
    }
    reference = REFERENCE
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "runs": [asdict(r) for r in runs]}, f, indent=1)
    write_markdown(runs, os.path.join(args.out, "results.md"), meta, reference)
    files = [] if args.no_plots else write_plots(runs, args.out)
    print(f"{len(runs)} runs, {sum(r.converged for r in runs)} converged, "
          f"{sum(not r.converged for r in runs)} failed or not converged")
    for label, ref in (("reference", reference), ("best run", None)):
        _, gm, ratios = summary(runs, ref)
        for s, g in gm.items():
            n_fin = sum(1 for x in ratios[s] if math.isfinite(x))
            print(f"mpsolve best vs {s} {label}: geometric-mean speed-up {g:.2f}x over {n_fin} "
                  f"problems both solved ({len(ratios[s]) - n_fin} more where only mpsolve did)")
    print(f"wrote {args.out}/results.json, results.md" + (f" and {len(files)} plots" if files else ""))
    return 0
