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

__all__ = ["main", "load_matrix"]


def load_matrix(spec: str):
    """A matrix from a file path, a generator spec or a collection name."""
    from .matrices import GENERATORS, generate, load, read_mtx

    if os.path.exists(spec):
        return read_mtx(spec)
    head = spec.split(":", 1)[0]
    if ":" in spec or head in GENERATORS:
        return generate(spec if ":" in spec else spec + ":32")
    return load(spec)


def _add_solver_options(p):
    from .precision import PRESETS
    from .precond import REGISTRY

    p.add_argument("--method", default="gmres", choices=["cg", "gmres", "bicgstab"],
                   help="Krylov method (default: gmres)")
    p.add_argument("--precond", default="none", choices=["none"] + sorted(REGISTRY),
                   help="preconditioner (default: none)")
    p.add_argument("--precision", default="double", choices=sorted(PRESETS),
                   help="precision policy (default: double)")
    p.add_argument("--rtol", type=float, default=1e-8, help="relative tolerance (default 1e-8)")
    p.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default 0)")
    p.add_argument("--maxiter", type=int, default=None,
                   help="iteration limit (restart cycles for gmres; default 10 n)")
    p.add_argument("--restart", type=int, default=None, help="GMRES restart length (default 20)")
    p.add_argument("--block-size", type=int, default=None,
                   help="block size for block-jacobi / block-isai (default: detected)")
    p.add_argument("--sparsity-power", type=int, default=None,
                   help="ISAI pattern: that of A^k (default: 1 for spd, 2 for general)")
    p.add_argument("--variant", default=None,
                   help="ISAI variant: general, spd, lower, upper (default per method)")
    p.add_argument("--no-escalate", action="store_true",
                   help="report failure instead of switching to a stronger precision")


def precond_params(args, method):
    """Constructor keywords for the chosen preconditioner from the CLI options."""
    import inspect

    from .precond import REGISTRY

    if args.precond == "none":
        return {}
    cls = REGISTRY[args.precond]
    accepted = inspect.signature(cls.__init__).parameters
    kw = {}
    if args.block_size is not None and "block_size" in accepted:
        kw["block_size"] = args.block_size
    if args.sparsity_power is not None and "sparsity_power" in accepted:
        kw["sparsity_power"] = args.sparsity_power
    if "variant" in accepted:
        if args.variant is not None:
            kw["variant"] = args.variant
        elif method == "cg":
            kw["variant"] = "spd"
    return kw


def cmd_solve(args):
    from . import solve
    from .matrices import read_vector, write_mtx

    A = load_matrix(args.matrix)
    n = A.shape[0]
    if args.rhs:
        b = read_vector(args.rhs)
        rhs_text = args.rhs
    else:
        b = A @ np.ones(n)
        rhs_text = "A @ ones (default)"
    res = solve(A, b, method=args.method, precond=args.precond, precision=args.precision,
                rtol=args.rtol, atol=args.atol, maxiter=args.maxiter, restart=args.restart,
                escalate=not args.no_escalate, **precond_params(args, args.method))
    print(f"matrix      {args.matrix}  ({n} x {n}, {A.nnz} nonzeros)")
    print(f"rhs         {rhs_text}")
    print(res.summary())
    if args.out:
        write_mtx(args.out, res.x, comment="mpsolve solution")
        print(f"solution written to {args.out}")
    return 0 if res.converged else 1


def cmd_info(args):
    from .matrices import matrix_info

    A = load_matrix(args.matrix)
    info = matrix_info(A)
    width = max(len(k) for k in info)
    print(f"matrix  {args.matrix}")
    for k, v in info.items():
        if isinstance(v, float):
            v = f"{v:.4g}"
        print(f"{k.ljust(width)}  {v}")
    return 0


def cmd_bench(args):
    from .benchmark import main as bench_main

    return bench_main(args)


def build_parser():
    p = argparse.ArgumentParser(
        prog="mpsolve",
        description="Mixed-precision sparse Krylov solvers: solve a system, describe a matrix, "
                    "or benchmark against SciPy and PETSc.")
    p.add_argument("--version", action="version", version=f"mpsolve {__import__('mpsolve').__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    ps = sub.add_parser("solve", help="solve A x = b and print a summary",
                        description="Solve A x = b.  MATRIX is a .mtx/.mtx.gz file, a generator "
                                    "spec such as poisson3d:50, or a SuiteSparse name found in "
                                    "$MPSOLVE_MATRIX_PATH.  Exit status 0 when converged, 1 otherwise.")
    ps.add_argument("matrix", help="matrix file, generator spec or collection name")
    ps.add_argument("--rhs", help="right-hand side (Matrix Market vector); default A @ ones")
    ps.add_argument("--out", help="write the solution x here (Matrix Market)")
    _add_solver_options(ps)
    ps.set_defaults(func=cmd_solve)

    pi = sub.add_parser("info", help="size, nonzeros, symmetry, diagonal dominance, block size",
                        description="Print facts about a matrix: size, nonzeros, symmetry, "
                                    "diagonal dominance and a block-size guess.")
    pi.add_argument("matrix", help="matrix file, generator spec or collection name")
    pi.set_defaults(func=cmd_info)

    from .benchmark import add_arguments

    pb = sub.add_parser("bench", help="benchmark mpsolve against SciPy (and PETSc)",
                        description="Run a benchmark suite: methods x precisions x "
                                    "preconditioners, with SciPy and PETSc baselines. Writes "
                                    "JSON, a Markdown table and PNG plots.")
    add_arguments(pb)
    pb.set_defaults(func=cmd_bench)
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError, LookupError, OSError) as err:
        print(f"mpsolve {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
