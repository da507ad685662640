"""The baselines of ``mpsolve bench``: SciPy's Krylov solvers and PETSc's KSP.

Both solve the same system as mpsolve (``b = A @ ones``, ``x0 = 0``) and are judged
by the same FP64 true relative residual.  Residual histories are recorded for the
plots without counting in the solve time: PETSc keeps its own (KSP convergence
history, the unpreconditioned norm its stopping test uses); for SciPy's CG and
BiCGSTAB the true residual is computed at sampled iterations inside the callback
and the callback's time is taken off the solve time; SciPy's GMRES reports its own
(left-preconditioned) residual estimate each inner iteration.

PETSc runs on one MPI rank in this process (:func:`petsc_solve`) and on more under
``mpiexec`` (:func:`run_petsc_ranks`, :mod:`mpsolve.bench.petsc_mpi`); the bench takes
PETSc's best over its rank counts.
"""
from __future__ import annotations

import re
import time

import numpy as np
import scipy.sparse as sp

from .common import Run, TimeLimit, deadline_callback, maxiter_for, sampled
from mpsolve._params import init_params

__all__ = ["run_scipy", "run_petsc", "run_petsc_ranks", "petsc_solve", "petsc_operator",
           "petsc_available", "SCIPY_PRECONDS", "PETSC_PRECONDS"]

#: SciPy preconditioners the runner knows.
SCIPY_PRECONDS = ["none", "jacobi", "spilu"]
#: PETSc PCs with a meaning here besides PETSc's own PC names (``jacobi``, ``bjacobi``,
#: ``sor``, ``ilu``, ...): mpsolve's preconditioners through petsc4py's python PC.
PETSC_PRECONDS = ["jacobi", "bjacobi", "sor", "ilu", "none", "mpsolve", "mpsolve-isai",
                  "mpsolve-block-isai", "mpsolve-block-jacobi"]


def petsc_available():
    """True when PETSc can be used: petsc4py and the PETSc library it loads (a petsc4py
    whose library is missing or broken imports, but ``from petsc4py import PETSc`` fails:
    its runs were counted as PETSc's failures)."""
    try:
        from petsc4py import PETSc  # noqa: F401
    except (ImportError, OSError, RuntimeError):
        return False
    return True


def petsc_build():
    """How the installed PETSc was compiled, for the results' header: its C optimisation
    flags and whether debugging is on (from ``$PETSC_DIR/lib/petsc/conf/petscvariables``),
    e.g. ``"-O3 -march=native, debugging off"``; ``"unknown"`` when that file is not found.
    The bench compares with PETSc built as PETSc recommends for speed
    (``--with-debugging=0 COPTFLAGS='-O3 -march=native'``, what ``.ci/setup.sh`` installs)."""
    import os

    try:
        import petsc4py
        conf = petsc4py.get_config()
        path = os.path.join(conf["PETSC_DIR"], conf.get("PETSC_ARCH") or "",
                            "lib", "petsc", "conf", "petscvariables")
        with open(path) as f:
            text = f.read()
    except (ImportError, OSError, KeyError):
        return "unknown"
    return describe_petsc_build(text)


def describe_petsc_build(text):
    """:func:`petsc_build`'s summary of a ``petscvariables`` file's text."""
    flags = re.search(r"^CC_FLAGS\s*=(.*)$", text, re.M)
    opt = [f for f in (flags.group(1).split() if flags else [])
           if f.startswith(("-O", "-march", "-mtune")) or f == "-g"]
    debug = re.search(r"--with-debugging=(\S+)", text)
    on = debug is None or debug.group(1).lower() not in ("0", "no", "false")
    return f"{' '.join(opt) or 'no -O flags'}, debugging {'on' if on else 'off'}"


# -------------------------------------------------------------------------- SciPy
_SPILU = {}  # one SuperLU ILU factorisation per problem, shared by the methods


def _sample_points(limit=4000, growth=1.2):
    """Iterations at which SciPy's CG/BiCGSTAB residual is recorded: 1..10, then
    geometrically spaced (about 40 points up to 3000 iterations)."""
    pts, it = set(range(1, 11)), 10.0
    while it < limit:
        it *= growth
        pts.add(int(it))
    return pts


_SAMPLES = _sample_points()


def run_scipy(A, b, problem, spd, method, precond, args):
    """One SciPy run (``scipy.sparse.linalg.cg/gmres/bicgstab``) as a :class:`Run`."""
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
    hist, hist_its, overhead = [], [], [0.0]
    nb = float(np.linalg.norm(b)) or 1.0

    if method == "gmres":
        def record(it, pr_norm):
            hist.append(float(pr_norm))
            hist_its.append(it)
    else:
        def record(it, xk):
            if it in _SAMPLES:
                t = time.perf_counter()
                hist.append(float(np.linalg.norm(b - A @ xk)) / nb)
                hist_its.append(it)
                overhead[0] += time.perf_counter() - t

    cb = deadline_callback(args.time_limit, count, record)
    kw = dict(rtol=args.rtol, M=M, callback=cb, maxiter=maxiter_for(method, args))
    if method == "gmres":
        kw.update(restart=args.restart, callback_type="pr_norm")
    fn = {"cg": spla.cg, "gmres": spla.gmres, "bicgstab": spla.bicgstab}[method]
    t1 = time.perf_counter()
    try:
        x, info = fn(A, b, **kw)
    except TimeLimit:
        return Run(**base, setup_time=setup, solve_time=float(args.time_limit),
                   iterations=count[0], precond_nbytes=nbytes,
                   status=f"stopped at the time limit ({args.time_limit:g} s)",
                   history=sampled(hist), history_its=[int(i) for i in sampled(hist_its)])
    except Exception as err:
        return Run(**base, setup_time=setup, status=f"error: {type(err).__name__}: {err}")
    solve = time.perf_counter() - t1 - overhead[0]
    true = float(np.linalg.norm(b - A @ x) / nb)
    if method != "gmres" and (not hist_its or hist_its[-1] != count[0]):
        hist.append(true)
        hist_its.append(count[0])
    ok = bool(true <= args.rtol)
    status = ("converged" if ok else
              f"not converged (scipy info={info})" + (" -- scipy reported success but the true "
                                                      "residual misses the tolerance" if info == 0 else ""))
    return Run(**base, setup_time=setup, solve_time=solve, iterations=count[0],
               true_residual=true, converged=ok, status=status, precond_nbytes=nbytes,
               history=sampled(hist), history_its=[int(i) for i in sampled(hist_its)])


# -------------------------------------------------------------------------- PETSc
def run_petsc(A, b, problem, spd, method, pc, args):
    """One PETSc run (:func:`petsc_solve`) as a :class:`Run`."""
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
               converged=bool(true <= args.rtol), status=out["reason"],
               history=sampled(out["history"]))


def run_petsc_ranks(cases, ranks, args, workdir=None):
    """PETSc runs on ``ranks`` MPI ranks (:mod:`mpsolve.bench.petsc_mpi`): one
    ``mpiexec`` launch for all ``cases``, ``(problem, A, spd, method, pc)`` tuples (each
    matrix written once to a temporary ``.npz``); PCs without a parallel form here
    (mpsolve's through the python PC) are left out.

    Returns ``(runs, note)``: a dict ``(problem, method, pc) -> Run`` (``ranks`` set; a
    job that failed is a failed :class:`Run` whose status says why) and ``note``: None,
    or what went wrong with ``mpiexec`` or the worker, for the results' header.
    """
    import tempfile

    from .petsc_mpi import PARALLEL_PC, run_jobs, write_matrix

    cases = [c for c in cases if c[4] in PARALLEL_PC]
    if not cases:
        return {}, None
    with tempfile.TemporaryDirectory(dir=workdir, prefix="petsc-mpi-") as tmp:
        paths, jobs = {}, []
        for problem, A, spd, method, pc in cases:
            if problem not in paths:
                paths[problem] = write_matrix(A, tmp, f"m{len(paths)}")
            jobs.append(dict(matrix=paths[problem], method=method, pc=pc, rtol=args.rtol,
                             maxiter=args.maxiter, restart=args.restart,
                             repeat=getattr(args, "repeat", 1),
                             time_limit=args.time_limit))
        results, note = run_jobs(jobs, ranks, workdir=workdir)
    runs = {}
    for (problem, A, spd, method, pc), out in zip(cases, results):
        base = dict(problem=problem, n=A.shape[0], nnz=int(A.nnz), spd=spd, solver="petsc",
                    method=method, precision="double", precond=pc, ranks=int(ranks))
        if out["status"] != "ok":
            runs[problem, method, pc] = Run(**base, status=out["status"])
            continue
        runs[problem, method, pc] = Run(
            **base, setup_time=out["setup_time"], solve_time=out["solve_time"],
            iterations=out["iterations"], true_residual=out["true_residual"],
            converged=bool(out["true_residual"] <= args.rtol), status=out["reason"],
            history=sampled(out["history"]))
    return runs, note


_KSP = {"cg": "cg", "gmres": "gmres", "bicgstab": "bcgs"}


def _pc_contexts():
    from mpsolve.petsc import BlockISAI, BlockJacobi, ISAI

    return {"mpsolve": BlockISAI, "mpsolve-isai": ISAI, "mpsolve-block-isai": BlockISAI,
            "mpsolve-block-jacobi": BlockJacobi}


def petsc_operator(A, comm):
    """PETSc's AIJ copy of the SciPy CSR matrix ``A`` (in PETSc's scalar type; a complex
    ``A`` on a real PETSc is a ``TypeError`` saying so) and a KSP on it: ``(P, ksp)``."""
    from petsc4py import PETSc

    from mpsolve.petsc import petsc_mat

    P = petsc_mat(A, comm)
    ksp = PETSc.KSP().create(comm)
    ksp.setOperators(P)
    return P, ksp


def petsc_solve(A, b, method="gmres", pc="bjacobi", rtol=1e-8, maxiter=3000, restart=30,
                block_size=None, sparsity_power=None, options=None, time_limit=None):
    """Solve with PETSc's KSP (in this process, one rank, FP64), for baselines and tests
    (:mod:`mpsolve.bench.petsc_mpi` runs the same KSP on several ranks).

    The stopping test is PETSc's on the *unpreconditioned* residual relative to
    ``||b||`` (right preconditioning for GMRES/BiCGSTAB), the same rule as mpsolve's.
    ``pc``: a PETSc PC type (``bjacobi`` = block Jacobi with ILU(0) blocks, PETSc's
    default; ``jacobi``, ``sor``, ``ilu``, ...) or ``mpsolve`` (= ``mpsolve-block-isai``),
    ``mpsolve-isai``, ``mpsolve-block-jacobi``: mpsolve's preconditioner through
    :mod:`mpsolve.petsc` (then the flexible KSP variants, as an FP32 preconditioner is
    not exactly linear).

    Returns a dict: ``x``, ``iterations``, ``reason``, ``setup_time`` (building the
    PETSc matrix from ``A``'s CSR arrays, the KSP and ``KSPSetUp``; PETSc's ILU
    factorisation for ``bjacobi`` happens lazily inside the solve), ``solve_time``,
    ``true_residual`` (FP64, relative), ``history`` (the residual norms PETSc's test
    used, relative to ``||b||``), ``ctx`` (the mpsolve PC context or None).
    """
    from petsc4py import PETSc

    from .petsc_mpi import configure_ksp, ksp_outcome

    contexts = _pc_contexts()
    A = sp.csr_matrix(A)
    comm = PETSc.COMM_SELF
    t_mat = time.perf_counter()  # building PETSc's copy of A counts as set-up (mpsolve's
    # set-up time includes building its operator from the same SciPy matrix)
    P, ksp = petsc_operator(A, comm)
    ksp_type = _KSP[method]
    if pc in contexts and method in ("gmres", "bicgstab"):
        # an FP32 preconditioner is not exactly linear: PETSc's right-preconditioned
        # gmres/bcgs form x = M y at the end and miss the tolerance they reported;
        # the flexible variants keep the preconditioned vectors
        ksp_type = {"gmres": "fgmres", "bicgstab": "fbcgs"}[method]
    configure_ksp(ksp, method, ksp_type, rtol, maxiter, restart)
    p = ksp.getPC()
    ctx = None
    if pc in contexts:
        p.setType("python")
        cls = contexts[pc]
        # the side this KSP applies M on (configure_ksp: right for GMRES and BiCGSTAB),
        # which the approximate inverse must match; options the class does not take left out
        kw = {"side": "left" if method == "cg" else "right"}
        accepted = init_params(cls().precond_cls)
        if block_size is not None and "block_size" in accepted:
            kw["block_size"] = block_size
        if sparsity_power is not None and "sparsity_power" in accepted:
            kw["sparsity_power"] = sparsity_power
        ctx = cls(**kw)
        if method == "cg":
            ctx.params.setdefault("variant", "spd")
        p.setPythonContext(ctx)
    elif pc == "ilu":
        p.setType("ilu")
    else:
        p.setType(pc)
    if options:
        opts = PETSc.Options()
        for k, v in options.items():
            opts[k] = v
        ksp.setFromOptions()
    bv = P.createVecLeft()
    bv.array[:] = b
    xv = P.createVecRight()
    xv.set(0.0)
    mat_time = time.perf_counter() - t_mat
    t0 = time.perf_counter()
    ksp.setUp()
    setup = time.perf_counter() - t0 + mat_time
    stopped = [False]
    if time_limit is not None:
        t_start = time.perf_counter()

        def watchdog(ksp_, its, rnorm):
            # a monitor that ends the solve past the wall-clock limit (PETSc turns the
            # Python exception into an error that ksp.solve raises)
            if time.perf_counter() - t_start > time_limit:
                stopped[0] = True
                raise TimeoutError("time limit")

        ksp.setMonitor(watchdog)
    t1 = time.perf_counter()
    try:
        ksp.solve(bv, xv)
    except PETSc.Error:
        if not stopped[0]:
            raise
    solve = time.perf_counter() - t1
    x = xv.array.copy()
    nb = float(np.linalg.norm(b)) or 1.0
    true = float(np.linalg.norm(b - A @ x) / nb)
    its, reason, history = ksp_outcome(ksp, nb)
    out = dict(x=x, iterations=its,
               reason=f"stopped at the time limit ({time_limit:g} s)" if stopped[0] else reason,
               setup_time=setup, solve_time=solve, true_residual=true, history=history,
               ctx=ctx)
    ksp.destroy()
    P.destroy()
    bv.destroy()
    xv.destroy()
    return out
