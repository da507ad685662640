"""Pattern power of nonsymmetric Block-ISAI: ``A`` (k = 1) against ``A^2`` (k = 2).

Run ``python -m mpsolve.bench.bench_isai_power --collection DIR [--out FILE]`` (default
``DIR``: ``$MPSOLVE_MATRIX_PATH``; default ``FILE``: ``bench/results/isai_power.md``).

For the nonsymmetric matrices of the collection (at most ``--max-nnz`` entries) and a few
generated convection-diffusion problems: GMRES(30), left and right preconditioned (true
residual 1e-8, b = A @ 1, at most 990 iterations, precision ``mixed``) with Jacobi and
Block-ISAI on the pattern of ``A`` and of ``A^2``, iterations and time to solution (set-up
+ solve, one run each, after a warm-up); the median over 256 sampled rows of the residual
``||e_i - m_i A||_2`` of the ``k = 1`` inverse (left: of ``A``; right: of ``A^T``), which
the default reads (:data:`mpsolve.precond.isai.POWER_RESIDUAL`), and the ``k`` the default
chose on each side.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import warnings

import numpy as np
import scipy.sparse as sp

from mpsolve import solve
from mpsolve.matrices import generate, list_collection, load
from mpsolve.precond import BlockISAI, Jacobi
from mpsolve.precond.isai import POWER_RESIDUAL, pattern_residual

ROOT = pathlib.Path(__file__).resolve().parents[1]
GENERATED = ["convdiff3d:24,peclet=10", "coupled2d:60", "convdiff2d:32,peclet=50",
             "convdiff2d:64,peclet=500"]


def _solve(A, rhs, P, side):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = solve(A, rhs, method="gmres", restart=30, side=side, precond=P,
                  precision="mixed", rtol=1e-8, maxiter=33, escalate=False)
    return f"{r.iterations}" + ("" if r.info == 0 else " F") + \
        f", {r.setup_time + r.solve_time:.3f}"


def run(name, A):
    rhs = A @ np.ones(A.shape[0])
    out = {"matrix": name}
    for side in ("left", "right"):
        variant = "general" if side == "left" else "right"
        for label, make in (("jacobi", Jacobi),
                            ("k=1", lambda: BlockISAI(variant=variant, sparsity_power=1)),
                            ("k=2", lambda: BlockISAI(variant=variant, sparsity_power=2))):
            try:
                out[side, label] = _solve(A, rhs, make(), side)
            except (ValueError, ArithmeticError, np.linalg.LinAlgError) as err:
                out[side, label] = f"setup error ({type(err).__name__})"
        C = A if side == "left" else sp.csr_matrix(A.T)
        C.sort_indices()
        try:
            P = BlockISAI(variant="general", sparsity_power=1).setup(C)
            out[side, "resid"] = f"{pattern_residual(C, P._chain.ops[0]):.3f}"
            D = BlockISAI(variant=variant).setup(A)
            out[side, "default"] = str(D.sparsity_power)
        except (ValueError, ArithmeticError, np.linalg.LinAlgError) as err:
            out[side, "resid"] = out[side, "default"] = "-"
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--collection", default=os.environ.get("MPSOLVE_MATRIX_PATH", ""))
    ap.add_argument("--problems", nargs="*", default=GENERATED, metavar="SPEC")
    ap.add_argument("--max-nnz", type=int, default=250_000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "isai_power.md"))
    args = ap.parse_args(argv)
    problems = [(s, sp.csr_matrix(generate(s))) for s in args.problems]
    for e in list_collection(args.collection) if args.collection else []:
        if e.nnz <= args.max_nnz and e.symmetric is False:
            problems.append((e.name, sp.csr_matrix(load(e.name, path=args.collection))))
    lines = ["# Block-ISAI pattern power on nonsymmetric matrices: A against A^2", "",
             "Command: `python -m mpsolve.bench.bench_isai_power --collection "
             f"{args.collection or '$MPSOLVE_MATRIX_PATH'}"
             + ("" if args.max_nnz == 250_000 else f" --max-nnz {args.max_nnz}") + "`", "",
             "GMRES(30) to a true residual of 1e-8, precision `mixed`: iterations (F: not "
             "within 990) and seconds to a solution (set-up + solve, one run); left: "
             "`M A ~ I`, right: `A M ~ I` (the ISAI of `A^T`).  `resid`: median over 256 "
             "sampled rows of `||e_i - m_i C||_2` of the k = 1 inverse of `C` (`A`, or "
             "`A^T` on the right); `default`: the `k` Block-ISAI chose with no "
             f"`sparsity_power` (`A^2` where `resid` > {POWER_RESIDUAL}).", "",
             "| matrix | side | jacobi | k=1 | k=2 | resid (k=1) | default k |",
             "|---|---|---|---|---|---|---|"]
    run("warm-up", sp.csr_matrix(generate("convdiff2d:8")))   # (compiles the kernels first)
    for name, A in problems:
        if A.shape[0] != A.shape[1] or abs(A - A.T).max() <= 1e-12 * abs(A).max():
            continue
        r = run(name, A)
        for side in ("left", "right"):
            lines.append(f"| {name} | {side} | {r[side, 'jacobi']} | {r[side, 'k=1']} | "
                         f"{r[side, 'k=2']} | {r[side, 'resid']} | {r[side, 'default']} |")
            print(lines[-1], flush=True)
    pathlib.Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
