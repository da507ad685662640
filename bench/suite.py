"""``mpsolve bench``: problems, configurations and the runner.

Runs every problem of a suite through mpsolve's configurations (method x precision
preset x preconditioner) and through the baselines -- SciPy (the same Krylov method
with ``spilu`` or Jacobi) and PETSc (KSP gmres/cg/bcgs with its own PCs, or with
mpsolve's) when petsc4py is installed, on one MPI rank in this process and on more
under ``mpiexec`` (``--petsc-ranks``, default 1 and 2: PETSc's best is taken over
both) -- all with the same right-hand side ``b = A @ ones``, the zero starting guess
and the same FP64 true-residual tolerance.
A run that fails or does not converge is recorded as such, never dropped.

Without options (a few minutes on 2 cores): :data:`DEFAULT_SUITE` (generated
problems of 24k-125k unknowns) plus :data:`DEFAULT_MATRICES` from a SuiteSparse folder
when one is found (:func:`find_collection`), the configurations of
:data:`DEFAULT_CONFIGS` and the baselines' standard preconditioners.  ``--full``: the
1M-unknown :data:`FULL_SUITE` and every combination (about 45 minutes here, most of
it in SciPy's ``spilu``).

Writes ``results.json`` (every run, with residual histories), ``results.md`` (tables
and a summary of time-to-solution ratios), ``convergence_*.png`` and ``profile.png``
(a Dolan--More performance profile), and prints the per-problem table.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import shlex
import sys
import time
from dataclasses import asdict, fields
from typing import List

import numpy as np

from mpsolve._cliargs import count

from .baselines import petsc_available, petsc_build, run_petsc, run_petsc_ranks, run_scipy
from .common import (Run, TimeLimit, deadline_callback, find_collection, maxiter_for, spd_like,
                     mpsolve_threads, sampled)

__all__ = ["add_arguments", "main", "run_suite", "run_mpsolve", "Run", "DEFAULT_SUITE",
           "FULL_SUITE", "QUICK_SUITE", "DEFAULT_MATRICES", "DEFAULT_CONFIGS",
           "find_collection", "iteration_bytes", "stream_bandwidth", "petsc_rank_counts"]

# ------------------------------------------------------------------------ suites
#: The default suite: moderate generated problems (125k unknowns for the scalar 3-D
#: problems, 24k unknowns / 1.8M nonzeros for elasticity with 3x3 blocks).
DEFAULT_SUITE = ["poisson3d:50", "convdiff3d:50,peclet=10", "elasticity3d:20"]
#: ``--full``: 1M unknowns for the scalar 3-D problems, 192k (15M nonzeros) for
#: elasticity.
FULL_SUITE = ["poisson3d:100", "convdiff3d:100,peclet=10", "anisotropic3d:64",
              "elasticity3d:40"]
#: A small suite for smoke runs and CI (``--quick``).
QUICK_SUITE = ["poisson3d:24", "convdiff2d:64,peclet=20", "elasticity3d:8"]
#: SuiteSparse matrices added to the default suite when a collection folder has them
#: (structural SPD matrices, then nonsymmetric circuit/fluid/Markov ones; each solves
#: in well under a second with the better configurations).
DEFAULT_MATRICES = ["bcsstk16", "s1rmq4m1", "bcsstk17", "memplus", "sherman3", "cage9"]
#: SPD or not, for the default matrices (used when the folder has no MANIFEST.tsv).
_KNOWN_SPD = {"bcsstk16": True, "s1rmq4m1": True, "bcsstk17": True, "memplus": False,
              "sherman3": False, "cage9": False}

# ---------------------------------------------------------------- configurations
#: ``--full`` (and the default of either option when only the other is given):
#: every preconditioner x every precision.
FULL_PRECONDS = ["jacobi", "ilu0", "block-isai"]
FULL_PRECISIONS = ["double", "mixed", "mixed-eft"]
#: The default mpsolve configurations (preconditioner, precision): the fastest ones of
#: the full suite's results (FP32 ILU(0) and Jacobi), FP64 ILU(0) to show what FP32
#: storage buys, and Block-ISAI applied in FP32 (the paper's preconditioner).
DEFAULT_CONFIGS = [("jacobi", "mixed"), ("ilu0", "double"), ("ilu0", "mixed"),
                   ("block-isai", "mixed")]
#: The baselines' preconditioners: by default SciPy's Jacobi and spilu, PETSc's
#: default (block Jacobi with ILU(0) blocks) and Jacobi.
FULL_SCIPY_PRECONDS = ["jacobi", "spilu"]
DEFAULT_SCIPY_PRECONDS = ["jacobi", "spilu"]
FULL_PETSC_PRECONDS = ["jacobi", "bjacobi", "sor", "icc", "mpsolve"]
#: PETSc's own candidates for its best run (issue 14: CG/GMRES(30)/BiCGSTAB x Jacobi,
#: ILU(0) (= serial bjacobi), SOR, ICC where it applies: SPD problems under CG)
DEFAULT_PETSC_PRECONDS = ["bjacobi", "jacobi", "sor", "icc"]
METHODS = ["cg", "gmres", "bicgstab"]
#: The generated families whose matrices are SPD, or Hermitian positive definite
#: (magnetic2d): CG and ICC apply (tests/test_bench.py checks each family's eigenvalues).
SPD_FAMILIES = frozenset({"laplacian1d", "poisson2d", "poisson3d", "anisotropic2d",
                          "anisotropic3d", "elasticity3d", "jump3d", "magnetic2d"})
#: Seconds a solve may iterate (``--time-limit``): every default problem solves in
#: about a second with the better configurations; what runs longer has failed.
DEFAULT_TIME_LIMIT = 20.0
FULL_TIME_LIMIT = 60.0


def _default_matrices():
    """(name, A, spd) of :data:`DEFAULT_MATRICES` found in :func:`find_collection`."""
    from mpsolve.matrices import CollectionError, find, list_collection, read_mtx

    folders = find_collection()
    if not folders:
        return [], None
    spd = dict(_KNOWN_SPD)
    for folder in folders:
        if (folder / "MANIFEST.tsv").is_file():
            try:
                for e in list_collection([folder]):
                    if e.name in spd and e.spd is not None:
                        spd[e.name] = bool(e.spd)
            except (ValueError, OSError):
                pass
    out = []
    for name in DEFAULT_MATRICES:
        try:
            out.append((name, read_mtx(find(name, path=folders)), spd[name]))
        except (CollectionError, OSError, ValueError):
            continue  # not in this collection: the suite runs without it
    return out, folders


def _load_problems(args, log=None):
    """(name, A, spd) triples of the suite."""
    from mpsolve.matrices import generate, list_collection, read_mtx
    from mpsolve.matrices.collection import LAYOUTS

    out = []
    collection = args.collection
    if args.matrices and not collection:         # from the collection found by default
        found = find_collection()
        if not found:
            raise ValueError("--matrices: no collection folder found; "
                             "pass --collection DIR or set MPSOLVE_MATRIX_PATH")
        collection = str(found[0])
    if collection:
        if not os.path.isdir(collection):
            raise ValueError(f"--collection {collection}: no such folder")
        entries = list_collection([collection])
        if not entries:
            raise ValueError(f"--collection {collection}: no "
                             f"matrices there ({LAYOUTS})")
        unknown = sorted(set(args.matrices or ()) - {e.name for e in entries})
        if unknown:
            raise ValueError(f"--matrices {' '.join(unknown)}: not in "
                             f"{collection} (its {len(entries)} matrices: "
                             f"{' '.join(e.name for e in entries[:8])}"
                             f"{' ...' if len(entries) > 8 else ''})")
        for e in entries:
            if args.matrices and e.name not in args.matrices:
                continue
            try:
                A = read_mtx(e.path)
            except (ValueError, OSError) as err:
                # one damaged file does not end the run of the others (said, not hidden)
                if log is not None:
                    log(f"note: {e.name} skipped: {err}")
                continue
            # the collection's likely_spd, else from the matrix (no MANIFEST: CG ran on
            # none of them)
            out.append((e.name, A, spd_like(A) if e.spd is None else bool(e.spd)))
    specs = args.problems
    if specs is None:
        specs = ([] if collection else QUICK_SUITE if args.quick else
                 FULL_SUITE if args.full else DEFAULT_SUITE)
    for spec in specs:
        A = generate(spec)
        name = spec.split(":")[0]
        spd = name in SPD_FAMILIES
        out.append((spec, A, spd))
    if args.problems is None and not (collection or args.quick or args.full):
        found, folders = _default_matrices()
        if log:
            log(f"SuiteSparse: {len(found)} of {len(DEFAULT_MATRICES)} default matrices from "
                f"{', '.join(map(str, folders))}" if folders else
                "SuiteSparse: no collection folder found (set MPSOLVE_MATRIX_PATH): "
                "generated problems only")
        out += found
    return out


def mpsolve_configs(args):
    """(preconditioner, precision) pairs of mpsolve to run."""
    if args.preconds is None and args.precisions is None and not args.full:
        return list(DEFAULT_CONFIGS)
    return list(itertools.product(args.preconds or FULL_PRECONDS,
                                  args.precisions or FULL_PRECISIONS))


def _finite_or_null(obj):
    """``obj`` (dicts, lists, numbers) with every NaN or infinity replaced by ``None``:
    JSON has no such numbers (Python writes ``NaN``, which strict parsers refuse)."""
    if isinstance(obj, dict):
        return {k: _finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_null(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _null_to_nan(obj):
    """:func:`_finite_or_null` undone where it can be: ``None`` in a float field of a run
    (and in the header's numbers) back to NaN; lists of numbers (histories) too."""
    if isinstance(obj, dict):
        floats = {f.name for f in fields(Run) if f.type in (float, "float")}
        return {k: (float("nan") if v is None and (k in floats or k.endswith("_per_s"))
                    else _null_to_nan(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [float("nan") if v is None else _null_to_nan(v) for v in obj]
    return obj


def _methods_for(spd, args):
    """CG only on SPD problems.  By default CG alone on SPD problems and GMRES +
    BiCGSTAB on the others; with ``--full`` GMRES too on the SPD ones."""
    if args.methods is not None:
        return [m for m in args.methods if m != "cg" or spd]
    if spd:
        return ["cg", "gmres"] if args.full else ["cg"]
    return ["gmres", "bicgstab"]


def _baseline_preconds(args):
    scipy_pcs = args.scipy_preconds or (FULL_SCIPY_PRECONDS if args.full
                                        else DEFAULT_SCIPY_PRECONDS)
    petsc_pcs = args.petsc_preconds or (FULL_PETSC_PRECONDS if args.full
                                        else DEFAULT_PETSC_PRECONDS)
    return scipy_pcs, petsc_pcs


def _precond_for(name, method, block_size=None, sparsity_power=None):
    """An mpsolve preconditioner (or None) configured for ``method``."""
    from mpsolve._params import accepted_params
    from mpsolve.precond import REGISTRY

    if name == "none":
        return None
    cls = REGISTRY[name]
    return cls(**accepted_params(cls, {
        "variant": "spd" if method == "cg" else "general", "block_size": block_size,
        "sparsity_power": sparsity_power}))


# ------------------------------------------------------------------------ runners
#: Iterations between two checks of the time limit in an mpsolve run.
DEADLINE_PERIOD = 32


def run_mpsolve(A, b, problem, spd, method, precision, precond, args):
    """One mpsolve run (:func:`mpsolve.solve`) as a :class:`Run`."""
    from mpsolve import solve

    base = dict(problem=problem, n=A.shape[0], nnz=int(A.nnz), spd=spd, solver="mpsolve",
                method=method, precision=precision, precond=precond)
    try:
        _warm_up(A, method, precision, precond, args)
        M = _precond_for(precond, method, args.block_size, args.sparsity_power)
        kw = dict(restart=args.restart, side=args.gmres_side) if method == "gmres" else {}
        # the time limit is checked every DEADLINE_PERIOD iterations (mpsolve's periodic
        # callback protocol, mpsolve.result.callback_period): a callback wanting every
        # iteration would take CG and BiCGSTAB off their compiled loops, and time a solve
        # no user without a callback runs (poisson3d:24 CG + Jacobi: 22 ms against 5 ms)
        deadline = deadline_callback(args.time_limit)
        deadline.period = DEADLINE_PERIOD
        res = solve(A, b, method=method, precond=M, precision=precision, rtol=args.rtol,
                    maxiter=maxiter_for(method, args), callback=deadline, **kw)
    except TimeLimit:
        return Run(**base, status=f"stopped at the time limit ({args.time_limit:g} s)",
                   setup_time=float("nan"), solve_time=float(args.time_limit))
    except Exception as err:  # recorded, never dropped
        return Run(**base, status=f"error: {type(err).__name__}: {err}")
    return Run(**base, setup_time=res.setup_time, solve_time=res.solve_time,
               iterations=res.iterations, true_residual=res.true_residual,
               converged=res.converged, status=res.status, precond_nbytes=res.precond_nbytes,
               history=sampled(res.residuals),
               setup_stages={k: float(v) for k, v in
                             (res.precond_stats or {}).get("stage_times", {}).items()})


_WARM = set()


def _warm_up(A, method, precision, precond, args):
    """Compile the kernels a configuration uses before it is timed (Numba compiles on
    first call; the on-disk cache makes this cheap after the first run): a few
    iterations on a leading principal submatrix large enough to take the parallel
    kernel paths."""
    import warnings

    from mpsolve import solve

    block = args.block_size
    if block is None and precond.startswith("block-"):
        from mpsolve.precond import detect_block_size

        block = detect_block_size(A)  # kernels are generated per block size
    from mpsolve.kernels.cpu._config import PARALLEL_MIN

    big = PARALLEL_MIN + 64                      # (the kernels' parallel forms from here)
    key = (method, precision, precond, A.shape[0] >= big, block)
    if key in _WARM:
        return
    m = min(A.shape[0], big)
    S = A[:m, :m].tocsr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            M = _precond_for(precond, method, block, args.sparsity_power)
            kw = dict(restart=args.restart, side=args.gmres_side) if method == "gmres" else {}

            def periodic(*_):
                return None
            # the timed run's callback protocol (a periodic callback): its compiled loop,
            # not the one without a callback (the first timed run paid 25-35 ms for it)
            periodic.period = DEADLINE_PERIOD
            solve(S, S @ np.ones(m), method=method, precond=M, precision=precision,
                  rtol=1e-30, maxiter=2, escalate=False, callback=periodic, **kw)
        except Exception:
            pass  # the timed run reports whatever goes wrong
    _WARM.add(key)


# ------------------------------------------------------------- memory traffic
#: Index bytes of the CSR matrices the model counts (32-bit column indices and row
#: pointers, as mpsolve, SciPy and PETSc store these problems).
INDEX_BYTES = 4


def _csr_bytes(n, nnz, value_bytes):
    """Bytes of one pass over a CSR matrix: values and column indices, row pointers."""
    return nnz * (value_bytes + INDEX_BYTES) + (n + 1) * INDEX_BYTES


def _precond_bytes(run):
    """Stored bytes of the run's preconditioner, read once per application: mpsolve's and
    SciPy's as they report them; PETSc's Jacobi (one FP64 diagonal), ILU(0) and block
    Jacobi/ILU(0) (factors on A's pattern, FP64), SOR (a forward and a backward sweep over
    A); NaN for what is not known (mpsolve's preconditioners inside PETSc)."""
    n, nnz = run.n, run.nnz
    if run.precond in (None, "none"):
        return 0.0
    if run.solver != "petsc":
        return float(run.precond_nbytes)
    return {"jacobi": 8.0 * n, "bjacobi": _csr_bytes(n, nnz, 8), "ilu": _csr_bytes(n, nnz, 8),
            "icc": _csr_bytes(n, nnz, 8), "sor": 2.0 * _csr_bytes(n, nnz, 8)}.get(
                run.precond, float("nan"))


def iteration_bytes(run, restart=30):
    """Bytes one iteration of ``run`` must move at least: the matrix (``nnz`` values in
    the policy's storage precision with 32-bit indices, and the row pointers) per SpMV,
    the preconditioner's stored bytes per application, and the method's vector traffic in
    the vectors' precision -- each SpMV and each application of M reads its input and
    writes its output (2n), and besides:

    * CG: 12n (``krylov/cg.py``), 2n more with M (``r . z``); one SpMV, one M;
    * BiCGSTAB: about 20n; two SpMVs, two M;
    * GMRES(m): a classical Gram--Schmidt pass at inner step j reads the j + 1 basis
      vectors twice and w three times, (2j + 4)n, so (m + 1)n basis values (in the basis
      precision: FP32 for the ``-cb`` presets) and 2n working values a step on average
      over a cycle; one SpMV, one M.

    The ``ir`` policy counts its inner (FP32) iterations.  A lower bound: caches that
    keep a vector between two kernels make the real traffic smaller, reorthogonalisation
    and restarts make it larger."""
    from mpsolve.precision import Precision

    try:
        pol = Precision.preset(run.precision)
    except (KeyError, ValueError):
        return float("nan")
    if pol.inner is not None:
        pol = pol.inner
    n = run.n
    w = np.dtype(pol.working).itemsize
    a = _csr_bytes(n, run.nnz, np.dtype(pol.matrix).itemsize) + 2 * n * w
    has_m = run.precond not in (None, "none")
    m = (_precond_bytes(run) + 2 * n * w) if has_m else 0.0
    if run.method == "cg":
        return a + m + (12 + 2 * has_m) * n * w
    if run.method == "bicgstab":
        return 2 * a + 2 * m + 20 * n * w
    basis = np.dtype(pol.basis or pol.working).itemsize
    k = max(1, min(restart, n))
    return a + m + (k + 1) * n * basis + 2 * n * w


_STREAM = {}


def stream_bandwidth(n=1 << 23, repeat=5):
    """The machine's memory bandwidth, bytes per second, measured once per process: the
    best of ``repeat`` passes of ``a = b + c`` (STREAM's Add: two reads and a write of
    ``n`` FP64 values, 64 MiB each) by NumPy, split over one thread per core (NumPy's
    ufuncs release the GIL)."""
    if n in _STREAM:
        return _STREAM[n]
    from concurrent.futures import ThreadPoolExecutor

    k = os.cpu_count() or 1
    a, b, c = np.empty(n), np.ones(n), np.full(n, 2.0)
    edges = np.linspace(0, n, k + 1).astype(int)
    parts = list(zip(edges[:-1], edges[1:]))

    def add(se):
        np.add(b[se[0]:se[1]], c[se[0]:se[1]], out=a[se[0]:se[1]])

    best = np.inf
    with ThreadPoolExecutor(k) as pool:
        list(pool.map(add, parts))                    # first touch
        for _ in range(repeat):
            t0 = time.perf_counter()
            list(pool.map(add, parts))
            best = min(best, time.perf_counter() - t0)
    _STREAM[n] = 3 * 8 * n / best
    return _STREAM[n]


# ------------------------------------------------------------------------- suite
def petsc_rank_counts(args):
    """The MPI rank counts of the PETSc baseline: ``--petsc-ranks``, else 1 and the
    machine's cores up to 2 (:func:`mpsolve.bench.petsc_mpi.default_ranks`)."""
    from .petsc_mpi import default_ranks

    ranks = getattr(args, "petsc_ranks", None) or default_ranks()
    return sorted(set(int(r) for r in ranks))


def _petsc_parallel(jobs, ranks, args, log=None):
    """The PETSc jobs on each rank count above 1, one ``mpiexec`` launch per count:
    ``({(problem, method, pc, ranks): Run}, [notes])``."""
    done, notes = {}, []
    for r in ranks:
        cases = [(name, A, spd, method, pc) for solver, name, A, spd, method, _, pc, nr
                 in jobs if solver == "petsc" and nr == r]
        if r <= 1 or not cases:
            continue
        if log:
            log(f"PETSc under mpiexec -n {r}: {len(cases)} runs (one launch)")
        runs, note = run_petsc_ranks(cases, r, args)
        if note:
            notes.append(note)
            if log:
                log(f"note: {note}")
        done.update({(*key, r): run for key, run in runs.items()})
    return done, notes


def run_suite(args, progress=True, log=None, info=None) -> List[Run]:
    """Run every configuration on every problem; returns the runs in order.

    PETSc's runs are made on every rank count of :func:`petsc_rank_counts`: one rank in
    this process (:func:`~mpsolve.bench.baselines.run_petsc`), more under ``mpiexec``
    (:func:`~mpsolve.bench.baselines.run_petsc_ranks`, all of them first, in one launch
    per rank count).  ``info``: a dict that receives ``petsc_ranks`` (the counts run)
    and ``petsc_mpi_notes`` (what went wrong with ``mpiexec``, if anything)."""
    from .petsc_mpi import PARALLEL_PC, find_mpiexec

    if args.time_limit is None:
        args.time_limit = FULL_TIME_LIMIT if args.full else DEFAULT_TIME_LIMIT
    if args.repeat is None:
        args.repeat = 1                         # (--coverage's default is its own: 3)
    problems = _load_problems(args, log)
    configs = mpsolve_configs(args)
    scipy_pcs, petsc_pcs = _baseline_preconds(args)
    with_petsc = "petsc" in args.baselines and petsc_available()
    ranks = petsc_rank_counts(args) if with_petsc else []
    notes = []
    if any(r > 1 for r in ranks) and find_mpiexec() is None:
        notes.append(f"mpiexec not found: PETSc ran with 1 rank only (asked for ranks "
                     f"{', '.join(map(str, ranks))})")
        if log:
            log(f"note: {notes[-1]}")
        ranks = [1]
    jobs = []
    for name, A, spd in problems:
        for method in _methods_for(spd, args):
            for pc, prec in configs:
                jobs.append(("mpsolve", name, A, spd, method, prec, pc, 1))
            if "scipy" in args.baselines:
                for pc in scipy_pcs:
                    # spilu is not symmetric: CG with it is no valid configuration (mpsolve
                    # refuses a nonsymmetric M under CG; CG + spilu stalled at 2e-2 on
                    # poisson3d:24), so SciPy's GMRES runs with it instead
                    sm = "gmres" if (pc == "spilu" and method == "cg") else method
                    if not any(j[0] == "scipy" and j[1] == name and j[4] == sm and j[6] == pc
                               for j in jobs):
                        jobs.append(("scipy", name, A, spd, sm, "double", pc, 1))
            if with_petsc:
                for pc in petsc_pcs:
                    if pc == "icc" and not (spd and method == "cg"):
                        continue            # PETSc's ICC is for symmetric A (CG's case)
                    for r in ranks:          # several ranks: PETSc's own PCs only
                        if r == 1 or pc in PARALLEL_PC:
                            jobs.append(("petsc", name, A, spd, method, "double", pc, r))
    parallel, more = _petsc_parallel(jobs, ranks, args, log)
    notes += more
    if info is not None:
        info.update(petsc_ranks=ranks, petsc_mpi_notes=notes)
    runs = []
    rhs = {}
    bar = _progress(len(jobs)) if progress else None
    try:
        for solver, name, A, spd, method, prec, pc, nranks in jobs:
            if name not in rhs:
                rhs[name] = A @ np.ones(A.shape[0])
            b = rhs[name]
            if bar:
                bar.update(f"{name} {solver} {method}/{pc}/{prec}"
                           + (f" x{nranks}" if nranks > 1 else ""))
            r = parallel[name, method, pc, nranks] if nranks > 1 else None
            for _ in range(args.repeat if r is None else 0):
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
            r.bytes_per_iteration = iteration_bytes(r, args.restart)
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
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)

        self.console = Console(stderr=True)
        self.p = Progress(TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), TextColumn("{task.description}"),
                          console=self.console, transient=False)
        self.p.start()
        self.task = self.p.add_task("", total=total)

    def update(self, text):
        self.p.update(self.task, description=text)

    def advance(self, run):
        mark = "ok  " if run.converged else "FAIL"
        line = (f"{mark} {run.problem:24s} {run.label:36s} it={run.iterations:5d} "
                f"t={run.total_time:8.3f}s res={run.true_residual:.1e}")
        if self.console.is_terminal:
            self.console.log(line)
        else:  # a log file: one plain line per run, not wrapped at 80 columns
            print(line, file=sys.stderr, flush=True)
        self.p.advance(self.task)

    def close(self):
        self.p.stop()


def _versions():
    import numba
    import scipy

    import mpsolve

    v = {"mpsolve": mpsolve.__version__, "numpy": np.__version__,
         "scipy": scipy.__version__, "numba": numba.__version__}
    try:
        import petsc4py
        from petsc4py import PETSc  # noqa: F401

        v["petsc4py"] = petsc4py.__version__
        v["petsc"] = ".".join(map(str, PETSc.Sys.getVersion()))
        v["petsc build"] = petsc_build()
    except Exception:
        v["petsc4py"] = "not usable (petsc4py or its PETSc library does not import)"
    return v


# --------------------------------------------------------------------------- CLI
def _positive_float(text):
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def _command_line():
    """The command line that runs this bench, as a shell would take it (arguments with
    spaces quoted)."""
    if sys.argv and "mpsolve" in sys.argv[0]:
        return shlex.join(["mpsolve", *sys.argv[1:]])
    return "mpsolve bench (called from Python)"


def add_arguments(p):
    """The options of ``mpsolve bench`` (on an :mod:`argparse` parser)."""
    from mpsolve.precision import PRESETS

    from .baselines import SCIPY_PRECONDS

    default_cfg = " ".join(f"{pc}/{prec}" for pc, prec in DEFAULT_CONFIGS)
    p.add_argument("--full", action="store_true",
                   help=f"the whole suite: the 1M-unknown problems ({' '.join(FULL_SUITE)}; "
                        "unless --problems, --collection or --quick choose others) with every "
                        "preconditioner x precision, GMRES also on SPD problems, and every "
                        "baseline preconditioner. About 45 minutes on 2 cores (SciPy's spilu "
                        "alone ~285 s per 1M-unknown problem). Without --full: "
                        f"{' '.join(DEFAULT_SUITE)} plus a few SuiteSparse matrices when a "
                        "collection is found ($MPSOLVE_MATRIX_PATH or "
                        "../shared/matrices/suitesparse), a few minutes")
    p.add_argument("--collection", metavar="DIR",
                   help="run the matrices of a SuiteSparse collection folder (with MANIFEST.tsv, "
                        "*.mtx[.gz] or extracted tarballs <name>/<name>.mtx[.gz]) instead of "
                        "the generated problems")
    p.add_argument("--matrices", nargs="+", metavar="NAME",
                   help="only these matrices of the collection (--collection, else the first "
                        "folder of $MPSOLVE_MATRIX_PATH, $MPSOLVE_TEST_COLLECTION and "
                        "../shared/matrices/suitesparse that exists)")
    p.add_argument("--problems", nargs="+", metavar="SPEC",
                   help=f"generated problems (default: {' '.join(DEFAULT_SUITE)} and the "
                        f"SuiteSparse matrices {' '.join(DEFAULT_MATRICES)} when found)")
    p.add_argument("--quick", action="store_true",
                   help=f"small generated problems ({' '.join(QUICK_SUITE)}), under a minute")
    p.add_argument("--methods", nargs="+", default=None, choices=METHODS,
                   help="Krylov methods (default: cg on SPD problems -- with --full cg and "
                        "gmres --, gmres and bicgstab on the others; cg never on non-SPD ones)")
    p.add_argument("--precisions", nargs="+", default=None, choices=sorted(PRESETS),
                   help="mpsolve precision presets, each with each of --preconds (default: "
                        f"the configurations {default_cfg}; with --full or --preconds: "
                        f"{' '.join(FULL_PRECISIONS)})")
    p.add_argument("--preconds", nargs="+", default=None,
                   help="mpsolve preconditioners (names in mpsolve.precond.REGISTRY, or none), "
                        "each with each of --precisions (default: the configurations above; "
                        f"with --full or --precisions: {' '.join(FULL_PRECONDS)})")
    p.add_argument("--baselines", nargs="*", default=["scipy", "petsc"],
                   choices=["scipy", "petsc"], help="baselines to run (default: scipy petsc; "
                   "petsc needs petsc4py; none: --baselines with no name)")
    p.add_argument("--scipy-preconds", nargs="+", default=None, choices=SCIPY_PRECONDS,
                   help=f"default: {' '.join(DEFAULT_SCIPY_PRECONDS)}")
    p.add_argument("--petsc-preconds", nargs="+", default=None,
                   help="PETSc PCs (bjacobi = block Jacobi with ILU(0) blocks, PETSc's default; "
                        "mpsolve = mpsolve.petsc.BlockISAI through the python PC; default: "
                        f"{' '.join(DEFAULT_PETSC_PRECONDS)}, with --full "
                        f"{' '.join(FULL_PETSC_PRECONDS)})")
    p.add_argument("--petsc-ranks", nargs="+", type=count, default=None, metavar="R",
                   help="MPI rank counts of the PETSc baseline, PETSc's best taken over all "
                        "(default: 1 and the machine's cores up to 2). 1: PETSc in this "
                        "process; more: mpiexec -n R, one launch for all runs, ILU/ICC as "
                        "block Jacobi with one ILU(0)/IC(0) block per rank, SOR as local "
                        "SSOR sweeps; mpsolve's PCs run on 1 rank only")
    p.add_argument("--rtol", type=_positive_float, default=1e-8,
                   help="FP64 true relative residual (1e-8)")
    p.add_argument("--maxiter", type=count, default=3000,
                   help="iteration limit per run (inner iterations for gmres, whole restart "
                        "cycles of them for mpsolve's and SciPy's: --maxiter 5 --restart 2 "
                        "gives them 4; default 3000)")
    p.add_argument("--restart", type=count, default=30,
                   help="GMRES restart (default 30)")
    p.add_argument("--gmres-side", choices=["left", "right"], default="right",
                   help="preconditioning side of mpsolve's GMRES (default right: the PETSc "
                        "baseline runs right-preconditioned GMRES with the unpreconditioned "
                        "residual norm, so both minimise the same residual)")
    p.add_argument("--time-limit", type=_positive_float, default=None,
                   help="seconds one solve may iterate before it is stopped and recorded as "
                        f"not converged (default {DEFAULT_TIME_LIMIT:g}, with --full "
                        f"{FULL_TIME_LIMIT:g}; a preconditioner set-up is not interrupted)")
    p.add_argument("--repeat", type=count, default=None,
                   help="run each converged configuration this many times and keep the "
                        "fastest (every solver alike; this machine's timings are noisy; "
                        "default 1, with --coverage 3)")
    p.add_argument("--block-size", type=count, default=None,
                   help="block size of mpsolve's block preconditioners (default: detected "
                        "per problem)")
    p.add_argument("--sparsity-power", type=count, default=None,
                   help="sparsity power k (pattern of A^k) of mpsolve's ISAI and Block-ISAI "
                        "(default: their own choice)")
    p.add_argument("--out", default="mpsolve-bench",
                   help="output folder for results.json, results.md and the plots (default "
                        "mpsolve-bench; made where missing)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--rebuild", action="store_true",
                   help="run nothing: rewrite results.md and the plots from --out/results.json")
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                   help="cpu (default): the suite above. gpu: mpsolve's CUDA backend against "
                        "cuSPARSE, cupy.dot, cupyx's solvers with Jacobi and cuSPARSE ILU(0), "
                        "and PETSc on the CPU, timed with CUDA events after a warm-up; writes "
                        "results_gpu.json/.md (mpsolve.bench.gpu). Needs a CUDA GPU: without "
                        "one it says so and exits with status 3")
    p.add_argument("--coverage", action="store_true",
                   help="the coverage table instead of the suite: mpsolve's defaults "
                        "(method and preconditioner 'auto') against mpsolve's own best "
                        "hand-picked configuration and PETSc's and SciPy's best "
                        "configuration on every matrix of the collection (--collection or the "
                        "first folder found) and a few generated problems; writes "
                        "--out/coverage.md (mpsolve.bench.coverage). Takes --collection, "
                        "--matrices, --time-limit, --petsc-ranks, --repeat, --out; its "
                        "tolerance (1e-8), methods and preconditioners are fixed")
    p.add_argument("--dot-size", type=count, default=10_000_000,
                   help="--device gpu: vector length of the dot benchmark (default 1e7)")


def gpu_hooks():
    """What ``mpsolve bench --device gpu`` (:mod:`mpsolve.bench.gpu`) takes from the suite:
    its problems, methods, baseline preconditioners and mpsolve's preconditioner set-up
    (handed over, so that the GPU module does not import this one)."""
    from types import SimpleNamespace

    return SimpleNamespace(load_problems=_load_problems, methods_for=_methods_for,
                           baseline_preconds=_baseline_preconds, precond_for=_precond_for)


def write_json(path, meta, runs):
    """``results.json``: the header and every run, strict JSON (a non-finite number -- a
    failed run's residual -- written ``null``; :func:`_rebuild` reads it back as NaN)."""
    with open(path, "w") as f:
        json.dump(_finite_or_null({"meta": meta, "runs": [asdict(r) for r in runs]}), f,
                  indent=1, allow_nan=False)


def _out_folder(path):
    """``--out``: the results folder, made where missing; an error naming the option
    where it cannot be (a file of that name, no permission)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise OSError(f"--out {path}: cannot be the results folder "
                      f"({err.strerror or err}); give a folder") from None


def _rebuild(args):
    """Write results.md and the plots again from an existing results.json."""
    from .plots import write_plots
    from .report import REFERENCE, write_markdown

    path = os.path.join(args.out, "results.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--rebuild: no {path} to rebuild from (--out names the "
                                "folder of an earlier run)")
    with open(path) as f:
        data = json.load(f)
    runs = [Run(**_null_to_nan(r)) for r in data["runs"]]
    meta = _null_to_nan(data["meta"])
    write_markdown(runs, os.path.join(args.out, "results.md"), meta, REFERENCE)
    if not args.no_plots:
        write_plots(runs, args.out, rtol=meta.get("rtol"))
    print(f"rewrote {args.out}/results.md from results.json")
    return 0


def main(args):
    """``mpsolve bench`` with parsed options (see :func:`add_arguments`); returns the
    exit status."""
    from mpsolve.precond import REGISTRY

    from .plots import write_plots
    from .report import REFERENCE, parallel_line, text_summary, write_markdown

    if args.rebuild:
        return _rebuild(args)
    if getattr(args, "coverage", False):
        from .coverage import main as coverage_main

        folders = [args.collection] if args.collection else [str(f) for f in find_collection()]
        argv = ["--out", os.path.join(args.out, "coverage.md")]
        argv += ["--collection", folders[0]] if folders else []
        argv += ["--time-limit", str(args.time_limit)] if args.time_limit else []
        argv += ["--matrices", *args.matrices] if args.matrices else []
        argv += ["--petsc-ranks", *map(str, args.petsc_ranks)] if args.petsc_ranks else []
        argv += ["--repeat", str(args.repeat)] if args.repeat else []
        # every other option of the suite left at its default: the coverage table's
        # tolerance, methods, preconditioners and device are fixed (they were ignored)
        ref = argparse.ArgumentParser()
        add_arguments(ref)
        defaults = vars(ref.parse_args([]))
        takes = {"collection", "matrices", "time_limit", "petsc_ranks", "repeat", "out",
                 "coverage", "rebuild", "no_plots"}
        fixed = [f"--{k.replace('_', '-')}" for k, default in defaults.items()
                 if k not in takes and getattr(args, k, default) != default]
        if fixed:
            raise ValueError(f"--coverage: {' '.join(fixed)} do(es) not apply: the coverage "
                             "table's tolerance, methods, preconditioners and device are "
                             "fixed; it takes --collection, --matrices, --time-limit, "
                             "--petsc-ranks, --repeat and --out")
        _out_folder(args.out)
        return coverage_main(argv, prog="mpsolve bench --coverage",
                             command=_command_line()) or 0
    if getattr(args, "device", "cpu") == "gpu":
        from .gpu import main as gpu_main

        return gpu_main(args, hooks=gpu_hooks())

    bad = [p for p in args.preconds or () if p != "none" and p not in REGISTRY]
    if bad:
        raise ValueError(f"--preconds: unknown {bad}; choose from {['none'] + sorted(REGISTRY)}")
    if args.petsc_preconds and petsc_available():
        from petsc4py import PETSc

        from .baselines import _pc_contexts

        known = set(_pc_contexts()) | {v for k, v in vars(PETSc.PC.Type).items()
                                       if not k.startswith("_") and isinstance(v, str)}
        bad = [p for p in args.petsc_preconds if p not in known]
        if bad:
            raise ValueError(f"--petsc-preconds: unknown {bad}: PETSc PC types (jacobi, "
                             "bjacobi, sor, icc, ilu, ...) or mpsolve's (" +
                             ", ".join(sorted(_pc_contexts())) + ")")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    if "petsc" in args.baselines and not petsc_available():
        log("note: PETSc is not usable here (petsc4py or its PETSc library does not import): "
            "the PETSc baseline is skipped")
    _out_folder(args.out)
    t0 = time.time()
    info = {}
    runs = run_suite(args, progress=True, log=log, info=info)
    meta = {
        "command": _command_line(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "python": platform.python_version(), "versions": _versions(), "rtol": args.rtol,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_seconds": time.time() - t0,
        "stream_bytes_per_s": stream_bandwidth(),
        "mpsolve_threads": mpsolve_threads(),
        "petsc_ranks": info.get("petsc_ranks", []),
        "petsc_mpi_notes": info.get("petsc_mpi_notes", []),
    }
    write_json(os.path.join(args.out, "results.json"), meta, runs)
    write_markdown(runs, os.path.join(args.out, "results.md"), meta, REFERENCE)
    files = [] if args.no_plots else write_plots(runs, args.out, rtol=args.rtol)
    print(f"{len(runs)} runs in {meta['wall_seconds']:.0f} s, {sum(r.converged for r in runs)} "
          f"converged, {sum(not r.converged for r in runs)} failed or not converged")
    print("Fastest converged run per problem (configuration = method/preconditioner/precision, "
          "time to solution = set-up + solve; vs X = X's best time / mpsolve's best):")
    print(text_summary(runs, REFERENCE))
    print(parallel_line(meta).replace("**", ""))
    print(f"wrote {args.out}/results.json, results.md" + (f" and {len(files)} plots" if files else ""))
    return 0
