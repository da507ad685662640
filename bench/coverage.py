"""Coverage table: which matrices each solver solves, with its defaults chosen for it.

For each matrix of a collection (and a few generated problems): mpsolve's ``solve`` with
``method="auto"``, ``precond="auto"`` against PETSc's best of CG (SPD only) x {Jacobi,
ICC(0)}, GMRES(30) x {Jacobi, ILU(0)}, BiCGSTAB x {Jacobi, ILU(0)}, and SciPy's best of
the same methods with Jacobi and ``spilu``, and mpsolve's own best hand-picked configuration
(CG (SPD only), GMRES(30), BiCGSTAB x Jacobi, ILU(0), ISAI, FP32 preconditioner) -- same
``b = A @ 1``, ``x0 = 0``, FP64 true relative residual ``1e-8``, at most 5000 iterations.
"Best": the fastest configuration that meets the tolerance by the FP64 true residual
(set-up included); PETSc's over its rank counts too (``--petsc-ranks``, default 1 and
2: one rank in this process, more under ``mpiexec`` in one launch for every matrix
before anything else runs, :mod:`mpsolve.bench.petsc_mpi`).  Every timed run is
repeated while it takes under ``REPEAT_BELOW`` seconds (mpsolve's and in-process PETSc's
first run over it once more: it may have compiled a kernel), up to ``--repeat`` times,
and the fastest kept (single runs of millisecond solves on a shared machine vary by 2x).
Columns: solved or not, iterations, seconds; totals at the end.

Run ``python -m mpsolve.bench.coverage [--collection DIR] [--out bench/results/coverage.md]``.
"""
from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .common import spd_like

__all__ = ["main", "run_auto", "run_mpsolve_best", "run_petsc_best", "run_scipy_best",
           "GENERATED"]

RTOL = 1e-8
MAXITER = 5000
RESTART = 30
#: Generated problems of the table (moderate sizes; the full suites are ``mpsolve bench``'s).
GENERATED = ["poisson3d:30", "anisotropic2d:200", "convdiff2d:200,peclet=50",
             "convdiff3d:30,peclet=10", "elasticity3d:12", "jump3d:20"]


#: A timed run is repeated (``--repeat`` times at most) while it takes less than this.
REPEAT_BELOW = 1.0
_REPEAT = [3]
#: The summary also gives the ratio over the problems whose PETSc's best takes at least
#: this many seconds: there the iterations dominate, below it the fixed cost of a call.
LONG_SOLVE = 0.01


def _fastest(run, own_clock=False):
    """``(result, seconds)`` of the fastest of up to ``_REPEAT[0]`` calls of ``run()``
    (repeated only while a call takes under ``REPEAT_BELOW`` seconds; a first call over it
    is run once more, as it may have compiled a kernel no earlier run needed -- FP64
    factors, a parallel form -- on a machine whose kernel cache is cold).  ``own_clock``:
    ``run()`` times itself and returns ``(result, seconds)`` (PETSc's set-up + solve)."""
    best = None
    for i in range(max(1, _REPEAT[0])):
        t0 = time.perf_counter()
        out = run()
        t = time.perf_counter() - t0
        if own_clock:
            out, t = out
        if best is None or t < best[1]:
            best = (out, t)
        if t >= REPEAT_BELOW and (i > 0 or _REPEAT[0] < 2):
            break
    return best


def run_auto(A, b):
    import mpsolve

    r, seconds = _fastest(lambda: mpsolve.solve(A, b, rtol=RTOL, maxiter=MAXITER))
    true = float(np.linalg.norm(b - A @ r.x) / np.linalg.norm(b))
    used = [c for c in r.choices if c.outcome != "not tried"]
    return dict(solved=bool(r.converged and true <= RTOL), iterations=r.iterations,
                seconds=seconds, true=true, config=used[-1].label if used else "-",
                tried=len(used))


def _mpsolve_configs(spd):
    out = [(m, pc) for m in ("gmres", "bicgstab") for pc in ("jacobi", "ilu0", "isai")]
    return ([("cg", "jacobi"), ("cg", "ilu0"), ("cg", "isai")] if spd else []) + out


def run_mpsolve_best(A, b, spd, time_limit):
    """The fastest of mpsolve's hand-picked configurations (``precision="mixed"``: FP32
    preconditioner; ISAI's ``variant`` its default, the SPD form under CG on a symmetric A)."""
    import mpsolve

    best = None
    nb = float(np.linalg.norm(b))
    for method, pc in _mpsolve_configs(spd):
        kw = dict(method=method, precond=pc, precision="mixed", rtol=RTOL)
        if method == "gmres":
            # right preconditioned, as PETSc's runs here and auto's GMRES: the stopping
            # test and the minimised residual are then the true one (left, SciPy's and
            # mpsolve's default, minimises M r: watt_2 + Jacobi 442 iterations against 6)
            kw.update(restart=RESTART, maxiter=-(-MAXITER // RESTART), side="right")
        else:
            kw.update(maxiter=MAXITER)

        def run():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    return mpsolve.solve(A, b, **kw)
                except Exception:    # noqa: BLE001 - a failed set-up is "not solved"
                    return None

        r, t = _fastest(run)
        if r is None or not r.converged or np.linalg.norm(b - A @ r.x) > RTOL * nb:
            continue
        if best is None or t < best["seconds"]:
            best = dict(solved=True, iterations=r.iterations, seconds=t,
                        config=f"{method} + {pc}")
    return best or dict(solved=False, iterations=0, seconds=float("nan"), config="-")


def _petsc_configs(spd):
    out = [("gmres", "jacobi"), ("gmres", "ilu"), ("bicgstab", "jacobi"), ("bicgstab", "ilu")]
    return ([("cg", "jacobi"), ("cg", "icc")] if spd else []) + out


def best_of(candidates):
    """The fastest candidate that solved (``solved``, ``seconds``), or a "not solved"
    row: PETSc's best over its configurations and rank counts, each a dict with
    ``solved``, ``iterations``, ``seconds``, ``config``, ``ranks``."""
    ok = [c for c in candidates if c["solved"]]
    if not ok:
        return dict(solved=False, iterations=0, seconds=float("nan"), config="-", ranks=1)
    return min(ok, key=lambda c: c["seconds"])


def run_petsc_best(A, b, spd, time_limit, parallel=(), serial=True):
    """PETSc's best on ``A``: its configurations (:func:`_petsc_configs`) in this process
    (one rank; ``serial=False``: not run), and ``parallel``: the same configurations'
    results on more ranks from :func:`mpsolve.bench.petsc_mpi.run_jobs` (dicts with
    ``method`` and ``pc`` added)."""
    from .baselines import petsc_solve
    from .petsc_mpi import pc_label

    cands = []
    for method, pc in _petsc_configs(spd) if serial else ():
        def run():
            out = petsc_solve(A, b, method=method, pc=pc, rtol=RTOL, maxiter=MAXITER,
                              restart=RESTART, time_limit=time_limit)
            return out, out["setup_time"] + out["solve_time"]

        try:
            out, t = _fastest(run, own_clock=True)
        except Exception:        # noqa: BLE001 - a failed PETSc set-up is "not solved"
            continue
        cands.append(dict(solved=bool(out["true_residual"] <= RTOL),
                          iterations=out["iterations"], seconds=t, config=f"{method} + {pc}",
                          ranks=1))
    for out in parallel:
        if out["status"] != "ok":
            continue
        cands.append(dict(solved=bool(out["true_residual"] <= RTOL),
                          iterations=out["iterations"],
                          seconds=out["setup_time"] + out["solve_time"],
                          config=f"{out['method']} + {pc_label(out['pc'], out['ranks'])}",
                          ranks=out["ranks"]))
    return best_of(cands)


def run_petsc_parallel(problems, ranks, time_limit, log=print):
    """Every problem's PETSc configurations on ``ranks`` MPI ranks, one ``mpiexec``
    launch for all (:func:`mpsolve.bench.petsc_mpi.run_jobs`; each run repeated as the
    serial ones, while under ``REPEAT_BELOW`` s, up to ``--repeat`` times).  ``problems``:
    ``(name, A, spd)``.  Returns ``({name: [result, ...]}, note)``."""
    import tempfile

    from .petsc_mpi import run_jobs, write_matrix

    out, jobs, owners = {}, [], []
    with tempfile.TemporaryDirectory(prefix="petsc-mpi-") as tmp:
        for i, (name, A, spd) in enumerate(problems):
            path = write_matrix(A, tmp, f"m{i}")
            for method, pc in _petsc_configs(spd):
                jobs.append(dict(matrix=path, method=method, pc=pc, rtol=RTOL,
                                 maxiter=MAXITER, restart=RESTART, repeat=_REPEAT[0],
                                 repeat_below=REPEAT_BELOW, time_limit=time_limit))
                owners.append(name)
        log(f"PETSc under mpiexec -n {ranks}: {len(jobs)} runs (one launch)")
        results, note = run_jobs(jobs, ranks)
    for name, job, res in zip(owners, jobs, results):
        out.setdefault(name, []).append(dict(res, method=job["method"], pc=job["pc"]))
    if note:
        log(f"note: {note}")
    return out, note


class _Stop(Exception):
    pass


def run_scipy_best(A, b, spd, time_limit):
    import scipy.sparse.linalg as spla

    best = None
    nb = float(np.linalg.norm(b))

    def precond(pc):
        if pc == "jacobi":
            d = A.diagonal()
            if (d == 0).any():
                raise ZeroDivisionError("zero diagonal")
            return sp.diags(1.0 / d)
        ilu = spla.spilu(sp.csc_matrix(A))
        return spla.LinearOperator(A.shape, matvec=ilu.solve)

    for pc in ("jacobi", "spilu"):
        for method in (["cg"] if spd else []) + ["gmres", "bicgstab"]:
            def run():
                count = [0]
                start = time.perf_counter()

                def cb(_):
                    count[0] += 1
                    if time.perf_counter() - start > time_limit:
                        raise _Stop

                fn = {"cg": spla.cg, "gmres": spla.gmres, "bicgstab": spla.bicgstab}[method]
                try:
                    kw = dict(rtol=RTOL, M=precond(pc), callback=cb)   # set-up timed too
                    if method == "gmres":
                        kw.update(restart=RESTART, maxiter=-(-MAXITER // RESTART),
                                  callback_type="pr_norm")
                    else:
                        kw.update(maxiter=MAXITER)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        x, _ = fn(A, b, **kw)
                except (_Stop, Exception):   # noqa: BLE001 - singular factor, breakdown, limit
                    return None
                return x, count[0]

            out, t = _fastest(run)
            if out is None:
                continue
            x, its = out
            if np.linalg.norm(b - A @ x) <= RTOL * nb and (best is None or t < best["seconds"]):
                best = dict(solved=True, iterations=its, seconds=t, config=f"{method} + {pc}")
    return best or dict(solved=False, iterations=0, seconds=float("nan"), config="-")


def _cell(r):
    if not r["solved"]:
        return "no", "", "", r.get("config", "-") if r.get("config") != "-" else ""
    return "yes", str(r["iterations"]), _secs(r["seconds"]), r["config"]


def _secs(t):
    """Seconds to three significant digits (a small solve's 0.00024 s is not "0.000")."""
    return f"{t:.3g}"


def _problems(entries, generated):
    """(name, spd or None, loader) of a collection's matrices (``entries``, from
    :func:`~mpsolve.matrices.list_collection`) and of the generated problems; ``spd`` None:
    decided from the matrix."""
    from mpsolve.matrices import generate, read_mtx

    rows = [(e.name, e.spd, lambda f=e.path: read_mtx(f).tocsr()) for e in entries]
    for spec in generated:
        rows.append((spec, None, lambda s=spec: sp.csr_matrix(generate(s))))
    return rows


def _warm_up():
    """Compile the kernels every candidate class uses once, before anything is timed (the
    compiled kernels are cached on disk, so a user pays this once per installation) --
    their parallel forms too, which only larger systems call (here above the measured
    threshold ``PARALLEL_MIN``, :mod:`mpsolve.kernels.cpu._calibrate`; without them the
    first generated problem's time was its compilation, 2.4 s against 0.03 s, and a run
    over ``REPEAT_BELOW`` is not repeated)."""
    import math

    import mpsolve
    from mpsolve.kernels.cpu._config import PARALLEL_MIN
    from mpsolve.matrices import convection_diffusion2d, poisson2d

    P = poisson2d(8)
    N = convection_diffusion2d(8)
    Z = sp.csr_matrix(np.array([[0.0, 2.0, 0.0], [1.0, 0.5, 0.0], [0.0, 1.0, 3.0]]))
    side = math.isqrt(PARALLEL_MIN) + 2
    big = (poisson2d(side), convection_diffusion2d(side)) if side <= 1500 else ()
    for A in (P, N, Z, sp.csr_matrix(P - 3.9 * sp.eye(P.shape[0])), *big):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mpsolve.solve(A, A @ np.ones(A.shape[0]), rtol=RTOL)
            for m, pc in (("cg", "isai"), ("gmres", "isai"), ("cg", "block-isai"),
                          ("gmres", "ilut")):
                try:
                    mpsolve.solve(A, A @ np.ones(A.shape[0]), method=m, precond=pc,
                                  maxiter=2)
                except ValueError:
                    pass


def main(argv=None, prog="python -m mpsolve.bench.coverage", command=None):
    """The coverage table; ``prog``: the program named in its errors, ``command``: the
    command line recorded in the table (``mpsolve bench --coverage`` passes its own)."""
    from mpsolve.bench.baselines import petsc_available
    from mpsolve.bench.petsc_mpi import default_ranks, find_mpiexec
    from mpsolve.bench.common import find_collection
    from mpsolve.matrices import list_collection
    from mpsolve.matrices.collection import LAYOUTS

    here = Path(__file__).resolve().parents[1]
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--collection", default=None,
                   help="the matrices' folder (a MANIFEST.tsv, *.mtx[.gz] or extracted "
                        "SuiteSparse tarballs; default: the first folder of $MPSOLVE_MATRIX_PATH, "
                        "$MPSOLVE_TEST_COLLECTION and a source checkout's "
                        "../shared/matrices/suitesparse that exists)")
    p.add_argument("--out", default=str(here / "bench" / "results" / "coverage.md"),
                   help="the Markdown file to write (or a folder: its coverage.md)")
    p.add_argument("--only", "--matrices", nargs="*", default=None, dest="only",
                   help="these matrices only")
    p.add_argument("--no-generated", action="store_true")
    p.add_argument("--time-limit", type=float, default=60.0,
                   help="seconds per baseline configuration (default 60)")
    p.add_argument("--petsc-ranks", nargs="+", type=int, default=None, metavar="R",
                   help="MPI rank counts of PETSc's best (default: 1 and the machine's "
                        "cores up to 2; more than 1: mpiexec -n R, one launch for all)")
    p.add_argument("--repeat", type=int, default=3,
                   help=f"time each run up to this many times while it takes under "
                        f"{REPEAT_BELOW:g} s, keep the fastest (default 3)")
    args = p.parse_args(argv)
    if args.petsc_ranks and min(args.petsc_ranks) < 1:
        p.error(f"--petsc-ranks: {args.petsc_ranks} must be positive")
    _REPEAT[0] = args.repeat
    have_petsc = petsc_available()
    collection = args.collection
    if collection is None:
        found = find_collection()
        collection = str(found[0]) if found else None
    elif not Path(collection).is_dir():
        p.error(f"--collection {collection}: no such folder")
    entries = list_collection([collection]) if collection else []
    if collection and not entries:
        p.error(f"--collection {collection}: no matrices there ({LAYOUTS})")
    listed = _problems(entries, [] if args.no_generated else GENERATED)
    unknown = sorted(set(args.only or ()) - {name for name, _, _ in listed})
    if unknown:
        p.error(f"--{'matrices' if prog.startswith('mpsolve') else 'only'} "
                f"{' '.join(unknown)}: neither in the collection "
                f"({collection or 'none found'}) nor a generated problem")
    problems = []
    for name, spd, load in listed:
        if args.only and name not in args.only:
            continue
        A = load()
        problems.append((name, A, spd_like(A) if spd is None else spd))
    ranks = sorted(set(args.petsc_ranks or default_ranks())) if have_petsc else []
    notes, parallel = [], {}
    if any(r > 1 for r in ranks) and find_mpiexec() is None:
        notes.append(f"mpiexec not found: PETSc ran with 1 rank only (asked for ranks "
                     f"{', '.join(map(str, ranks))})")
        print(f"note: {notes[-1]}")
        ranks = [1]
    for r in ranks:                # before anything else runs: the ranks have the cores
        if r > 1:
            done, note = run_petsc_parallel(problems, r, args.time_limit)
            notes += [note] if note else []
            for name, res in done.items():
                parallel.setdefault(name, []).extend(res)
    _warm_up()
    table = []
    for name, A, spd in problems:
        b = A @ np.ones(A.shape[0])
        auto = run_auto(A, b)
        own = run_mpsolve_best(A, b, spd, args.time_limit)
        pet = run_petsc_best(A, b, spd, args.time_limit, parallel.get(name, ()),
                             serial=1 in ranks) if have_petsc else None
        sci = run_scipy_best(A, b, spd, args.time_limit)
        table.append((name, A.shape[0], A.nnz, auto, own, pet, sci))
        print(name, A.shape[0], "auto", _cell(auto), "own best", _cell(own), "petsc",
              pet and _cell(pet), "scipy", _cell(sci), flush=True)
    if command is None:
        given = sys.argv[1:] if argv is None else list(argv)
        command = shlex.join(["python", "-m", "mpsolve.bench.coverage", *given])
    text = _markdown(table, have_petsc, ranks, notes, command=command, collection=collection)
    out = Path(args.out)
    if out.is_dir():                        # a folder: its coverage.md
        out = out / "coverage.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    args.out = str(out)
    print(f"written {args.out}")
    return 0


def _gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _markdown(table, have_petsc, petsc_ranks=(1,), notes=(), command=None, collection=None):
    """The Markdown page; ``petsc_ranks``: the rank counts PETSc ran on, ``notes``: what
    went wrong with ``mpiexec``, ``command``: the command line, ``collection``: the matrices'
    folder (for the header)."""
    from .common import mpsolve_threads
    from .report import parallel_line

    par = parallel_line(dict(mpsolve_threads=mpsolve_threads(),
                             petsc_ranks=list(petsc_ranks) if have_petsc else [],
                             petsc_mpi_notes=list(notes)))
    lines = ["# Coverage: mpsolve `auto` against PETSc's and SciPy's best", "",
             f"Command: `{command or 'python -m mpsolve.bench.coverage'}` (this machine: "
             f"{os.cpu_count()} cores; kernels compiled by a warm-up before the first timing; "
             "every run "
             f"repeated while under {REPEAT_BELOW:g} s (a first run over it once more), up to "
             f"{_REPEAT[0]} times, the "
             "fastest kept).", "",
             f"b = A @ 1, x0 = 0, FP64 true relative residual {RTOL:g}, at most {MAXITER} "
             "iterations.  mpsolve: `solve(A, b)` with its defaults (`method='auto'`, "
             "`precond='auto'`; analysis, fallbacks and set-up included in the time; "
             "iterations of every candidate tried).  Own best: the fastest of mpsolve's "
             "hand-picked CG (SPD) / GMRES(30) / BiCGSTAB x Jacobi / ILU(0) / ISAI with "
             "`precision='mixed'` (GMRES right-preconditioned, as PETSc's here).  PETSc: "
             "the fastest of CG (SPD) x "
             "{Jacobi, ICC(0)}, GMRES(30) x {Jacobi, ILU(0)}, BiCGSTAB x {Jacobi, ILU(0)} "
             "on each rank count (`xR`: R MPI ranks) that solves; SciPy: the fastest of "
             "the same methods x {Jacobi, spilu}.", "",
             f"Matrices: {collection or 'no collection folder'}"
             f"{' and the generated problems' if any(r[0] in GENERATED for r in table) else ''}"
             ".", "", par, "",
             "| matrix | n | nnz | auto | it | s | auto's choice | own best | it | s | config "
             "| PETSc | it | s | config | auto / PETSc | SciPy | it | s | config |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    vs_petsc, vs_own = [], []
    for name, n, nnz, auto, own, pet, sci in table:
        a = _cell(auto)
        o = _cell(own)
        pc = _cell(pet) if pet else ("n/a", "", "", "")
        sc = _cell(sci)
        both = pet and pet["solved"] and auto["solved"]
        ratio = f"{auto['seconds'] / pet['seconds']:.2f}" if both else ""
        lines.append(f"| {name} | {n} | {nnz} | {a[0]} | {a[1]} | {a[2]} | {auto['config']} "
                     f"| {o[0]} | {o[1]} | {o[2]} | {o[3]} "
                     f"| {pc[0]} | {pc[1]} | {pc[2]} | {pc[3]} | {ratio} | {sc[0]} | {sc[1]} "
                     f"| {sc[2]} | {sc[3]} |")
        if ratio:
            vs_petsc.append((auto["seconds"] / pet["seconds"], pet["seconds"]))
        if own["solved"] and auto["solved"]:
            vs_own.append(auto["seconds"] / own["seconds"])
    tot = len(table)
    na = sum(r[3]["solved"] for r in table)
    nown = sum(r[4]["solved"] for r in table)
    npet = sum(bool(r[5] and r[5]["solved"]) for r in table)
    nsci = sum(r[6]["solved"] for r in table)
    lines += ["", f"Solved: mpsolve auto {na} of {tot}, mpsolve's own best hand-picked "
              f"{nown} of {tot}, PETSc's best {npet if have_petsc else 'n/a'} of {tot}, "
              f"SciPy's best {nsci} of {tot}."]
    if vs_petsc:
        lines.append(f"Where both solve ({len(vs_petsc)} problems): geometric mean of auto's "
                     f"time / PETSc's best time = {_gmean([r for r, _ in vs_petsc]):.2f}.")
        long = [r for r, t in vs_petsc if t >= LONG_SOLVE]
        if long:
            lines.append(f"Of those, the {len(long)} where PETSc's best takes at least "
                         f"{LONG_SOLVE * 1e3:g} ms (the iterations, not the fixed cost of a "
                         f"call, dominate): geometric mean {_gmean(long):.2f}.")
    if vs_own:
        within = sum(r <= 1.5 for r in vs_own)
        lines.append(f"Where both solve ({len(vs_own)} problems): geometric mean of auto's "
                     f"time / mpsolve's own best hand-picked time = {_gmean(vs_own):.2f}; "
                     f"within 1.5x on {within} of {len(vs_own)}.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
