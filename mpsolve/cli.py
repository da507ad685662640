"""The ``mpsolve`` command: ``solve``, ``info`` and ``bench``.

Matrices are named the same way everywhere: a Matrix Market file (``A.mtx``,
``A.mtx.gz``), a generator spec (``poisson3d:100``, ``elasticity3d:20``,
``convdiff2d:200,peclet=50``) or a SuiteSparse name found in
``$MPSOLVE_MATRIX_PATH`` / the download cache (``bcsstk14``).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from ._cliargs import count, tolerance
from .backend import DeviceUnavailableError

__all__ = ["main", "load_matrix"]


def load_matrix(spec: str):
    """A matrix from a file path (:func:`mpsolve.matrices.read_matrix`: Matrix Market,
    MATLAB, Harwell-Boeing, ``.npz`` or an extracted SuiteSparse tarball's folder), a
    generator spec or a collection name."""
    from .matrices import GENERATORS, MATRIX_SUFFIXES, generate, load, read_matrix

    missing = FileNotFoundError(f"{spec}: no such file (a matrix is a file -- Matrix Market, "
                                "MATLAB, Harwell-Boeing or .npz --, a generator spec such as "
                                "poisson3d:50, or a collection name, as bcsstk01 or "
                                "HB/bcsstk01)")
    if os.path.exists(spec):
        return read_matrix(spec)
    if spec.lower().endswith(MATRIX_SUFFIXES):
        raise missing
    head = spec.split(":", 1)[0]
    if ":" in spec or head in GENERATORS:
        return generate(spec if ":" in spec else spec + ":32")
    if "/" in spec or os.sep in spec:
        # a path that is not there, or a collection's group/name (load's form)
        if spec.count("/") != 1 or os.sep != "/" and os.sep in spec:
            raise missing
        try:
            return load(spec)
        except (LookupError, FileNotFoundError) as err:
            raise FileNotFoundError(f"{spec}: no such file, nor a matrix of the collection "
                                    f"({err})") from None
    return load(spec)


def _add_solver_options(p):
    from .backend import DEVICES
    from .precision import PRESETS
    from .precond import REGISTRY

    p.add_argument("--method", default="auto", choices=["auto", "cg", "gmres", "bicgstab"],
                   help="Krylov method (default: auto -- chosen from an analysis of A, with "
                        "fallbacks; the summary says what was chosen and why)")
    p.add_argument("--precond", default="auto", choices=["auto", "none"] + sorted(REGISTRY),
                   help="preconditioner (default: auto, chosen with the method)")
    p.add_argument("--reorder", default=None, choices=["mc64"],
                   help="permute and scale A to a unit diagonal before setting up the "
                        "preconditioner (MC64; for zero or tiny diagonal entries)")
    p.add_argument("--precision", default=None, choices=sorted(PRESETS),
                   help="precision policy (default: with --method or --precond auto, "
                        "auto's choice -- mixed where the values fit FP32; with both named, "
                        "double)")
    p.add_argument("--rtol", type=tolerance, default=1e-8,
                   help="relative tolerance (default 1e-8)")
    p.add_argument("--atol", type=tolerance, default=0.0,
                   help="absolute tolerance (default 0)")
    p.add_argument("--maxiter", type=count, default=None,
                   help="iteration limit: with auto (the default) the Krylov iterations of "
                   "all candidates together (default 5000); with --method and --precond both "
                   "named, as SciPy's (restart cycles for gmres; default 10 n)")
    p.add_argument("--restart", type=count, default=None,
                   help="GMRES restart length (default 30 with auto, 20 with --method gmres "
                   "and a named --precond)")
    p.add_argument("--block-size", type=count, default=None,
                   help="block size for block-jacobi / block-isai / block-ilu0 (default: "
                        "detected; an error with another --precond)")
    p.add_argument("--sparsity-power", type=count, default=None,
                   help="ISAI pattern: that of A^k (default: 1; general and right move to "
                        "2 where the inverse on A's pattern is poor, as the summary says)")
    p.add_argument("--variant", default=None,
                   help="ISAI variant (isai: auto, general, right, spd, lower, upper, ilu; "
                   "block-isai: auto, general, right, spd, bilu); default spd under --method "
                   "cg, else auto (spd for a symmetric A, else the approximate inverse of "
                   "the side M is applied on)")
    p.add_argument("--no-escalate", action="store_true",
                   help="report failure instead of switching to a stronger precision")
    p.add_argument("--device", default=None, choices=sorted(DEVICES),
                   help="where the solve runs (default: the CPU; see mpsolve info --device)")


def precond_params(args, method):
    """Constructor keywords for the chosen preconditioner from the CLI options."""
    from ._params import accepted_params, init_params
    from .precond import REGISTRY

    given = [k for k in ("block_size", "sparsity_power", "variant")
             if getattr(args, k, None) is not None]
    takes = set() if args.precond in ("none", "auto") else init_params(REGISTRY[args.precond])
    unused = [k for k in given if k not in takes]
    if unused:                          # an option that would be dropped silently: refused
        opts = ", ".join("--" + k.replace("_", "-") for k in unused)
        users = sorted(name for name, cls in REGISTRY.items()
                       if set(unused) <= init_params(cls))
        raise ValueError(f"{opts} does not apply to --precond {args.precond}; it is an option "
                         f"of --precond {' / '.join(users) or '(none)'}")
    if args.precond in ("none", "auto"):
        return {}
    variant = args.variant if args.variant is not None else ("spd" if method == "cg" else None)
    params = accepted_params(REGISTRY[args.precond], {
        "block_size": args.block_size, "sparsity_power": args.sparsity_power,
        "variant": variant})
    if getattr(args, "reorder", None):
        params["reorder"] = args.reorder
    return params


def _start_up() -> float:
    """Initialise Numba and load the compiled kernels of the common path (a solve of a
    2 x 2 system) before anything is timed: a one-time cost of the process (about 0.4 s
    here, from Numba's disk cache) that would otherwise be reported as the analysis of
    the first matrix.  Returns its seconds."""
    import time

    import scipy.sparse as sp

    from . import solve

    t0 = time.perf_counter()
    solve(sp.identity(2, format="csr"), np.ones(2))
    return time.perf_counter() - t0


def _check_out_file(path):
    """``--out``: a file that can be written, checked before the solve (an error after
    it loses the run): not a folder, in a folder that exists, writable (tried: opened for
    appending, and removed again where it did not exist)."""
    if os.path.isdir(path):
        raise IsADirectoryError(f"--out {path}: is a folder; give a file name in it "
                                "(.mtx or .npy)")
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise FileNotFoundError(f"--out {path}: its folder does not exist")
    existed = os.path.exists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as err:
        raise OSError(f"--out {path}: cannot be written ({err.strerror or err})") from None
    if not existed:
        os.remove(path)


def cmd_solve(args):
    from . import solve
    from ._sparse import check_matrix
    from .matrices import read_dense, write_mtx

    if args.out:
        _check_out_file(args.out)        # before the solve, not after it
    # square, finite: before b = A @ 1 (the messages name the file)
    A = check_matrix(load_matrix(args.matrix), f"A ({args.matrix})")
    n = A.shape[0]
    if args.rhs:
        try:                             # n x 1 (or 1 x n): one; n x k: k solved together
            b = read_dense(args.rhs)
        except FileNotFoundError as err:
            raise FileNotFoundError(f"--rhs: {err}") from None
        except ValueError as err:
            raise ValueError(f"--rhs: {err}") from None
        if b.ndim not in (1, 2) or b.dtype.kind not in "biufc":
            raise ValueError(f"--rhs {args.rhs}: holds a {b.ndim}-D {b.dtype} array, not "
                             "a vector or an n x k block of them")
        if 0 in b.shape:
            raise ValueError(f"--rhs {args.rhs}: holds a {' x '.join(map(str, b.shape))} "
                             "array: no right-hand side to solve for")
        if 1 in b.shape:
            b = b.reshape(-1)
        if b.shape[0] != n:
            shape = f"vector of {b.shape[0]} entries" if b.ndim == 1 else \
                f"{b.shape[0]} x {b.shape[1]} array"
            raise ValueError(f"--rhs {args.rhs}: holds a {shape}, but A is {n} x {n}: give "
                             f"{n} entries (one right-hand side) or a {n} x k array (k "
                             "right-hand sides)")
        rhs_text = args.rhs + (f"  ({b.shape[1]} right-hand sides)" if b.ndim == 2 else "")
    else:
        with np.errstate(all="ignore"):
            b = A @ np.ones(n)
        if b.dtype.kind in "fc" and not np.isfinite(b).all():
            bad = int((~np.isfinite(b)).sum())
            raise ValueError(f"the default right-hand side A @ ones overflows FP64 in {bad} "
                             f"row(s) (their sums pass 1.8e308): give one with --rhs, or "
                             "scale A")
        rhs_text = "A @ ones (default)"
    if args.restart is not None and args.method in ("cg", "bicgstab"):
        raise ValueError(f"--restart {args.restart} does not apply to --method "
                         f"{args.method}; it is an option of --method gmres (and auto, "
                         "when it picks GMRES)")
    if args.reorder and args.precond in ("auto", "none"):
        raise ValueError(f"--reorder {args.reorder} needs --precond NAME (auto chooses its own "
                         "reordering)")
    auto = "auto" in (args.method, args.precond)
    start_up = _start_up()
    res = solve(A, b, method=args.method, precond=args.precond,
                precision=args.precision if (args.precision or auto) else "double",
                rtol=args.rtol, atol=args.atol, maxiter=args.maxiter, restart=args.restart,
                escalate=not args.no_escalate, device=args.device,
                **precond_params(args, args.method))
    print(f"matrix      {args.matrix}  ({n} x {n}, {A.nnz} nonzeros)")
    print(f"rhs         {rhs_text}")
    print(f"start-up    {start_up:.2f} s: Numba and the compiled kernels loaded (once per "
          "process; not in the times below)")
    print(res.summary())
    if args.out:
        try:
            if args.out.lower().endswith(".npy"):
                np.save(args.out, res.x)
            else:
                write_mtx(args.out, res.x, comment="mpsolve solution")
        except OSError as err:
            raise OSError(f"--out {args.out}: {err.strerror or err}") from None
        print(f"solution written to {args.out}")
    return 0 if res.converged else 1


#: Exit status of ``mpsolve info --device``: 0 a CUDA GPU and the whole GPU stack are
#: usable; 1 not (the report says what is missing and how to fix what pip can fix).
INFO_DEVICE_EXIT = {"usable": 0, "not usable": 1}


def cmd_info(args):
    from .matrices import matrix_info

    status = 0
    if args.device:
        from .backend import format_gpu_report, gpu_report

        report = gpu_report()
        print(format_gpu_report(report))
        status = INFO_DEVICE_EXIT["usable" if report["usable"] else "not usable"]
        if args.matrix is None:
            return status
        print()
    if args.matrix is None:
        raise ValueError("give a MATRIX to describe, or --device for the GPU report")
    A = load_matrix(args.matrix)
    info = matrix_info(A)
    if A.shape[0] == A.shape[1]:
        # what solve(A, b) would do: the analysis's own symmetry test (the one every
        # symmetric form uses; ``symmetric`` above is the looser normwise sqrt(eps) one)
        # and the candidates in the order it would try them
        from ._sparse import canonical_csr, check_matrix
        from .auto import plan

        try:
            an, cands = plan(canonical_csr(check_matrix(A, "A")))
            info["auto_symmetric"] = bool(an.symmetric)
            info["auto_candidates"] = " -> ".join(c.label for c in cands)
        except (ValueError, TypeError) as err:   # a matrix no solve takes (NaN, dtype)
            info["auto_candidates"] = f"none: {err}"
    width = max(len(k) for k in info)
    print(f"matrix  {args.matrix}")
    for k, v in info.items():
        if isinstance(v, float):
            v = f"{v:.4g}"
        print(f"{k.ljust(width)}  {v}")
    return status          # (with --device: the GPU's, as without a matrix)


#: What ``mpsolve bench`` needs beyond mpsolve's own dependencies (the ``bench`` extra).
BENCH_EXTRA_HINT = ("mpsolve bench needs the 'bench' extra (rich, matplotlib): "
                    "pip install 'mpsolve[bench]' (from a source checkout: "
                    "pip install -e '.[bench]', or: pip install rich matplotlib)")


def cmd_bench(args):
    import importlib.util

    missing = [m for m in ("rich", "matplotlib") if _find_spec(importlib.util, m) is None]
    if missing:
        print(f"mpsolve bench: error: {' and '.join(missing)} not installed. {BENCH_EXTRA_HINT}",
              file=sys.stderr)
        return 2
    from .bench import main as bench_main

    return bench_main(args)


def _find_spec(util, name):
    try:
        return util.find_spec(name)
    except (ImportError, ValueError):  # a module set to None in sys.modules, a broken one
        return None


def _command(argv):
    """The sub-command named in ``argv`` (its first word that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(bench_options=True):
    """The ``mpsolve`` argument parser.  ``bench_options=False`` leaves the options of
    ``bench`` out (they live in :mod:`mpsolve.bench`, imported only when needed)."""
    p = argparse.ArgumentParser(
        prog="mpsolve",
        description="Mixed-precision sparse Krylov solvers: solve a system, describe a matrix, "
                    "or benchmark against SciPy and PETSc.")
    p.add_argument("--version", action="version", version=f"mpsolve {__import__('mpsolve').__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    ps = sub.add_parser("solve", help="solve A x = b and print a summary",
                        description="Solve A x = b.  MATRIX is a matrix file (.mtx/.mtx.gz, .mat, "
                                    ".rb/.rua/.rsa/.hb, .npz), a generator "
                                    "spec such as poisson3d:50, or a SuiteSparse name found in "
                                    "$MPSOLVE_MATRIX_PATH.  Exit status 0 when converged, 1 otherwise.")
    ps.add_argument("matrix", help="matrix file (Matrix Market, MATLAB .mat, Harwell-Boeing, "
                    ".npz, or an extracted SuiteSparse tarball's folder), generator spec or "
                    "collection name")
    ps.add_argument("--rhs", help="right-hand side (Matrix Market, .npy, or .mat: a "
                    "SuiteSparse Problem's b; n x 1; n x k: k right-hand "
                    "sides, one set-up); default A @ ones")
    ps.add_argument("--out", help="write the solution x here (Matrix Market, or .npy by its "
                    "name; n x k for k right-hand sides)")
    _add_solver_options(ps)
    ps.set_defaults(func=cmd_solve)

    pi = sub.add_parser("info", help="facts about a matrix, or (--device) the GPU stack found",
                        description="Print facts about a matrix: size, nonzeros, symmetry, "
                                    "diagonal dominance, a block-size guess, and what solve(A, "
                                    "b) would try (the automatic choice's symmetry test and "
                                    "candidates, in order).  With --device: "
                                    "what GPU, compute capability, CUDA driver and runtime, "
                                    "CuPy/numba-cuda/NVRTC/nvJitLink versions were found, or "
                                    "what is missing and the pip command that installs it; "
                                    "exit status 0 when a GPU is usable, 1 when not.")
    pi.add_argument("matrix", nargs="?", default=None,
                    help="matrix file (Matrix Market, MATLAB .mat, Harwell-Boeing, .npz, or "
                         "an extracted SuiteSparse tarball's folder), generator spec or "
                         "collection name")
    pi.add_argument("--device", "--gpu", dest="device", action="store_true",
                    help="report the GPU stack (exit status 0: usable, 1: not)")
    pi.set_defaults(func=cmd_info)

    pb = sub.add_parser("bench", help="benchmark mpsolve against SciPy (and PETSc)",
                        description="Run a benchmark suite: mpsolve's methods x precisions x "
                                    "preconditioners against SciPy and PETSc baselines. "
                                    "Writes JSON, a Markdown table and PNG plots. Needs the "
                                    "'bench' extra (pip install 'mpsolve[bench]'). Without "
                                    "options: a few minutes (moderate generated problems, a "
                                    "few SuiteSparse matrices when found, the best-known "
                                    "configurations); --full: the whole suite (~45 min on 2 "
                                    "cores).")
    if bench_options:
        from .bench import add_arguments

        add_arguments(pb)
    pb.set_defaults(func=cmd_bench)
    return p


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(bench_options=_command(argv) == "bench")
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        # the reader of stdout left (`| head`): no error message, the shell's status
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
    except (ValueError, TypeError, LookupError, OSError, DeviceUnavailableError,
            ArithmeticError, np.linalg.LinAlgError) as err:
        # (ArithmeticError: a set-up the matrix's values defeat -- a block inverse that
        # overflows FP64; exit status 1 is kept for "did not converge")
        print(f"mpsolve {args.command}: error: {err}", file=sys.stderr)
        return 2
    except MemoryError as err:          # (a generator size or a file too large for memory)
        print(f"mpsolve {args.command}: error: out of memory ({err or 'MemoryError'}): "
              "a smaller problem, or a machine with more memory", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
