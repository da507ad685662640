"""PETSc's KSP on several MPI ranks: the parallel side of the PETSc baseline.

mpsolve's CPU kernels use every core through threads; PETSc uses cores through MPI
ranks.  So that the bench compares with PETSc's best configuration, every PETSc
baseline also runs under ``mpiexec -n R`` and the faster rank count counts.

Two halves:

* the worker, ``mpiexec -n R python -m mpsolve.bench.petsc_mpi JOBS.json OUT.json``,
  launched once per bench run for all its jobs (mpiexec's start-up costs about half a
  second).  Every rank loads each job's matrix (a SciPy ``.npz`` written by the parent),
  keeps its contiguous block of rows (PETSc's default split) and builds the MPIAIJ
  matrix from that local CSR.  ``b = A @ 1`` (each rank its rows), ``x0 = 0``; KSP
  settings as :func:`mpsolve.bench.baselines.petsc_solve`: right preconditioning for
  GMRES/BiCGSTAB, the unpreconditioned residual norm, ``rtol``, ``atol = 0``,
  ``maxiter``.  Timing: set-up = building the MPIAIJ matrix from the local CSR, the KSP
  and ``KSPSetUp`` (and ``KSPSetUpOnBlocks``: the block factorisations), solve =
  ``KSPSolve``; a barrier before each clock, ``PetscTime`` (wall clock), the maximum over the
  ranks; the fastest of ``repeat`` runs.  The true relative residual is computed by
  PETSc in FP64 over all ranks.  Rank 0 writes OUT.json after every job, so a worker
  that dies leaves the jobs it finished.
* the parent, :func:`run_jobs`: writes the jobs, launches the worker with
  ``OMP_NUM_THREADS=1`` (one thread per rank), reads the results, and turns a missing
  ``mpiexec``, a failed worker or a failed job into a status line -- never an exception
  that stops the bench.

In parallel PETSc's ILU, ICC and SOR are local to a rank (:data:`PARALLEL_PC`): ``ilu``
and ``icc`` run as block Jacobi with one ILU(0) / IC(0) block per rank (what PETSc does
by default for ``bjacobi`` and recommends for a parallel incomplete factorisation),
``sor`` as SSOR sweeps on each rank's diagonal block; ``jacobi`` is the same operator on
any number of ranks.  mpsolve's own preconditioners (``mpsolve*``) run in one process
only.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

__all__ = ["PARALLEL_PC", "pc_label", "default_ranks", "find_mpiexec", "write_matrix",
           "run_jobs", "configure_ksp", "ksp_outcome", "main"]

#: PETSc PC name -> (PETSc PC type on several ranks, sub-PC type per rank or None, label)
PARALLEL_PC = {"jacobi": ("jacobi", None, "jacobi"),
               "none": ("none", None, "none"),
               "bjacobi": ("bjacobi", "ilu", "bjacobi+ilu"),
               "ilu": ("bjacobi", "ilu", "bjacobi+ilu"),
               "icc": ("bjacobi", "icc", "bjacobi+icc"),
               "sor": ("sor", None, "local ssor")}

_KSP = {"cg": "cg", "gmres": "gmres", "bicgstab": "bcgs"}

#: One rank per thread: the ranks are the parallelism.
RANK_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "NUMBA_NUM_THREADS": "1"}


def pc_label(pc, ranks):
    """How the PETSc PC ``pc`` runs on ``ranks`` ranks, for tables: ``pc`` itself on one
    rank, e.g. ``"bjacobi+icc x2"`` on two."""
    if ranks <= 1:
        return pc
    return f"{PARALLEL_PC.get(pc, (None, None, pc))[2]} x{ranks}"


def default_ranks(cores=None):
    """The rank counts to try by default: 1 and the machine's cores up to 2 (``[1, 2]``
    on a machine with two cores or more, ``[1]`` on one)."""
    if cores is None:
        cores = os.cpu_count() or 1
    return sorted({1, max(1, min(2, cores))})


def find_mpiexec():
    """The ``mpiexec`` executable (``$MPIEXEC`` when set), or None."""
    exe = os.environ.get("MPIEXEC")
    if exe:
        return shutil.which(exe) or (exe if os.path.isfile(exe) else None)
    return shutil.which("mpiexec") or shutil.which("mpiexec.mpich") \
        or shutil.which("mpiexec.openmpi")


def write_matrix(A, folder, name):
    """Write the CSR matrix ``A`` to ``folder/name.npz`` (uncompressed) for the worker;
    returns the path."""
    path = Path(folder) / f"{name}.npz"
    sp.save_npz(path, sp.csr_matrix(A), compressed=False)
    return str(path)


def _failed(job, status, ranks=None):
    return dict(id=job.get("id"), ranks=ranks, iterations=0, reason=status, converged=False,
                setup_time=float("nan"), solve_time=float("nan"),
                true_residual=float("nan"), history=[], pc_label="", status=status)


def run_jobs(jobs, ranks, mpiexec=None, timeout=None, workdir=None):
    """Run ``jobs`` with the worker under ``mpiexec -n ranks``: one launch for all.

    ``jobs``: dicts with ``matrix`` (a path from :func:`write_matrix`), ``method``
    (``cg``, ``gmres``, ``bicgstab``), ``pc`` (a key of :data:`PARALLEL_PC`), ``rtol``,
    ``maxiter``, ``restart``, ``repeat`` (runs, the fastest kept), optional
    ``repeat_below`` (repeat only while a run takes less, seconds) and ``time_limit``
    (seconds a solve may iterate).

    Returns ``(results, note)``: one dict per job, in order (``iterations``, ``reason``
    (PETSc's converged reason, or what went wrong), ``setup_time``, ``solve_time``,
    ``true_residual``, ``history`` (relative to ``||b||``), ``pc_label``, ``ranks``,
    ``status``: ``"ok"`` or an error line), and ``note``: None when the worker ran
    every job, else what went wrong (mpiexec missing, the worker's exit status and the
    end of its error output).  Never raises for a failed worker or job.
    """
    jobs = [dict(job, id=i) for i, job in enumerate(jobs)]
    if not jobs:
        return [], None
    exe = mpiexec or find_mpiexec()
    if exe is None:
        note = "mpiexec not found: PETSc ran with 1 rank only"
        return [_failed(j, f"error: {note}", ranks) for j in jobs], note
    if timeout is None:
        per = [float(j.get("time_limit") or 60.0) * max(1, int(j.get("repeat", 1))) + 30.0
               for j in jobs]
        timeout = 60.0 + sum(per)
    with tempfile.TemporaryDirectory(dir=workdir, prefix="petsc-mpi-") as tmp:
        jin, jout = Path(tmp) / "jobs.json", Path(tmp) / "out.json"
        jin.write_text(json.dumps({"jobs": jobs}))
        env = dict(os.environ, **RANK_ENV)
        import mpsolve

        # the ranks import the same mpsolve as this process (a source tree or installed)
        root = str(Path(mpsolve.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "")
                                                      .split(os.pathsep) if p])
        cmd = [exe, "-n", str(int(ranks)), sys.executable, "-m", "mpsolve.bench.petsc_mpi",
               str(jin), str(jout)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                  timeout=timeout)
            rc, err = proc.returncode, (proc.stderr or "") + (proc.stdout or "")
        except subprocess.TimeoutExpired as e:
            rc, err = None, f"timed out after {timeout:.0f} s; " + str(e.stderr or "")[-500:]
        except OSError as e:
            rc, err = -1, f"{type(e).__name__}: {e}"
        done = {}
        if jout.exists():
            try:
                done = {r["id"]: r for r in json.loads(jout.read_text())["results"]}
            except (ValueError, KeyError):
                done = {}
    note = None
    if rc != 0 or len(done) < len(jobs):
        tail = " ".join(err.strip().splitlines()[-3:])[-400:]
        note = (f"the PETSc MPI worker (mpiexec -n {ranks}) "
                + ("timed out" if rc is None else f"exited with status {rc}")
                + f" after {len(done)} of {len(jobs)} jobs" + (f": {tail}" if tail else ""))
    out = []
    for j in jobs:
        r = done.get(j["id"])
        out.append(r if r is not None else _failed(j, f"error: {note}", ranks))
    return out, note


# ------------------------------------------------------------ the KSP, either side
def configure_ksp(ksp, method, ksp_type, rtol, maxiter, restart):
    """The baseline's KSP settings, on one rank or many: ``ksp_type`` (``method``'s KSP
    or its flexible variant), GMRES's ``restart``, right preconditioning for
    GMRES/BiCGSTAB, the stopping test on the *unpreconditioned* residual relative to
    ``||b||`` (``rtol``, ``atol = 0``, ``maxiter``), and a residual history kept."""
    from petsc4py import PETSc

    ksp.setType(ksp_type)
    if method == "gmres":
        ksp.setGMRESRestart(restart)
    if method != "cg":
        ksp.setPCSide(PETSc.PC.Side.RIGHT)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    ksp.setTolerances(rtol=rtol, atol=0.0, max_it=maxiter)
    ksp.setConvergenceHistory(length=max(maxiter, 1) + 1, reset=True)


def ksp_outcome(ksp, nb):
    """``(iterations, reason, history)`` of a solved KSP: PETSc's converged reason by
    name, the residual norms of its test relative to ``nb`` (= ``||b||``)."""
    from petsc4py import PETSc

    reason = ksp.getConvergedReason()
    names = {v: k for k, v in vars(PETSc.KSP.ConvergedReason).items() if isinstance(v, int)}
    try:
        history = [float(h) / nb for h in ksp.getConvergenceHistory()]
    except PETSc.Error:
        history = []
    return int(ksp.getIterationNumber()), str(names.get(reason, reason)), history


# --------------------------------------------------------------------------- worker
def _local_rows(n, size, rank):
    """PETSc's default split of ``n`` rows over ``size`` ranks (``PetscSplitOwnership``):
    the first ``n % size`` ranks take one row more.  Returns ``(lo, hi)``."""
    m = n // size + (1 if rank < n % size else 0)
    lo = rank * (n // size) + min(rank, n % size)
    return lo, lo + m


def _solve_once(PETSc, comm, gmax, rows, n, job):
    """One timed set-up + solve of ``job`` on this rank's rows ``rows`` (CSR, global
    column indices); returns the job's result dict (the same on every rank)."""
    method, pc = job["method"], job["pc"]
    pc_type, sub_type, _ = PARALLEL_PC[pc]
    size = comm.getSize()
    m = rows.shape[0]
    it = PETSc.IntType
    comm.barrier()
    t0 = PETSc.Log.getTime()
    P = PETSc.Mat().createAIJ(size=((m, n), (m, n)), csr=(rows.indptr.astype(it),
                                                         rows.indices.astype(it),
                                                         rows.data.astype(PETSc.ScalarType)),
                              comm=comm)
    P.assemble()
    ksp = PETSc.KSP().create(comm)
    ksp.setOperators(P)
    maxiter = int(job["maxiter"])
    configure_ksp(ksp, method, _KSP[method], float(job["rtol"]), maxiter,
                  int(job.get("restart", 30)))
    p = ksp.getPC()
    p.setType(pc_type if size > 1 else pc)
    if size > 1 and sub_type is not None:
        ksp.setUp()                      # creates the per-rank sub-KSPs
        for sub in p.getBJacobiSubKSP():
            sub.getPC().setType(sub_type)
    bv = P.createVecLeft()
    bv.array[:] = rows @ np.ones(n)      # b = A @ 1, this rank's rows
    xv = P.createVecRight()
    xv.set(0.0)
    ksp.setUp()
    if size > 1 and sub_type is not None:
        ksp.setUpOnBlocks()              # the block factorisations, counted in the set-up
    setup = PETSc.Log.getTime() - t0
    limit = job.get("time_limit")
    stopped = [False]
    t_solve = [0.0]
    if limit is not None:
        def watchdog(ksp_, its, rnorm):
            # every rank reaches iteration ``its``: the decision is collective (the
            # slowest rank's clock), taken every 10 iterations to keep it cheap
            if its % 10 == 0 and \
                    gmax(PETSc.Log.getTime() - t_solve[0]) > float(limit):
                stopped[0] = True
                raise TimeoutError("time limit")

        ksp.setMonitor(watchdog)
    comm.barrier()
    t_solve[0] = PETSc.Log.getTime()
    try:
        ksp.solve(bv, xv)
    except PETSc.Error:
        if not stopped[0]:
            raise
    solve = PETSc.Log.getTime() - t_solve[0]
    setup, solve = gmax(setup), gmax(solve)
    r = P.createVecLeft()
    P.mult(xv, r)
    r.aypx(-1.0, bv)                     # r = b - A x, FP64 over all ranks
    nb = bv.norm() or 1.0
    true = float(r.norm() / nb)
    its, reason, history = ksp_outcome(ksp, nb)
    out = dict(id=job["id"], ranks=size, iterations=its,
               reason=f"stopped at the time limit ({float(limit):g} s)" if stopped[0] else reason,
               converged=bool(not stopped[0] and true <= float(job["rtol"])),
               setup_time=float(setup), solve_time=float(solve), true_residual=true,
               history=history, pc_label=pc_label(pc, size), status="ok")
    for obj in (ksp, P, bv, xv, r):
        obj.destroy()
    return out


def _global_max(PETSc, comm):
    """``gmax(value)``: the largest of every rank's ``value`` (collective; through a
    PETSc vector with one entry per rank, so that no second MPI binding is needed)."""
    v = PETSc.Vec().createMPI((1, comm.getSize()), comm=comm)

    def gmax(value):
        v.array[0] = value
        return float(v.max()[1])
    return gmax


def _run_job(PETSc, comm, gmax, job, cache):
    """A job, repeated (the fastest converged run kept; a failed run ends the repeats)."""
    if job.get("method") not in _KSP:
        raise ValueError(f"method {job.get('method')!r}: choose from {sorted(_KSP)}")
    if job.get("pc") not in PARALLEL_PC:
        raise ValueError(f"pc {job.get('pc')!r}: choose from {sorted(PARALLEL_PC)}")
    path = job["matrix"]
    if cache.get("path") != path:
        A = sp.load_npz(path).tocsr()
        if A.shape[0] != A.shape[1]:
            raise ValueError(f"matrix {path}: not square {A.shape}")
        n = A.shape[0]
        lo, hi = _local_rows(n, comm.getSize(), comm.getRank())
        cache.clear()
        cache.update(path=path, n=n, rows=A[lo:hi].tocsr())
    best = None
    below = job.get("repeat_below")
    for _ in range(max(1, int(job.get("repeat", 1)))):
        out = _solve_once(PETSc, comm, gmax, cache["rows"], cache["n"], job)
        total = out["setup_time"] + out["solve_time"]
        if best is None or (out["converged"] and (not best["converged"] or total <
                                                  best["setup_time"] + best["solve_time"])):
            best = out
        if not out["converged"] or (below is not None and total >= float(below)):
            break
    return best


def main(argv=None):
    """The worker: ``python -m mpsolve.bench.petsc_mpi JOBS.json OUT.json`` under
    ``mpiexec``."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: mpiexec -n R python -m mpsolve.bench.petsc_mpi JOBS.json OUT.json",
              file=sys.stderr)
        return 2
    import petsc4py

    petsc4py.init([])
    from petsc4py import PETSc

    comm = PETSc.COMM_WORLD
    gmax = _global_max(PETSc, comm)
    jobs = json.loads(Path(argv[0]).read_text())["jobs"]
    results, cache = [], {}
    for job in jobs:
        try:
            out = _run_job(PETSc, comm, gmax, job, cache)
        except Exception as err:     # noqa: BLE001 - recorded for this job, the next runs
            out = _failed(job, f"error: {type(err).__name__}: {err}".strip(), comm.getSize())
        # every rank must agree that the job ended before the next collective call
        comm.barrier()
        results.append(out)
        if comm.getRank() == 0:
            tmp = Path(argv[1]).with_suffix(".part")
            tmp.write_text(json.dumps({"ranks": comm.getSize(), "results": results}))
            os.replace(tmp, argv[1])
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
