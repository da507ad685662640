"""Pattern power of nonsymmetric Block-ISAI: ``A`` (k = 1) against ``A^2`` (k = 2).

Run ``python -m mpsolve.bench.bench_isai_power --collection DIR [--out FILE]`` (default
``DIR``: ``$MPSOLVE_MATRIX_PATH``; default ``FILE``: ``bench/results/isai_power.md``).

For the nonsymmetric matrices of the collection (at most ``--max-nnz`` entries) and a few
generated convection-diffusion problems: GMRES(30) iterations (true residual 1e-8,
b = A @ 1, at most 990 iterations, FP32 storage) with Jacobi, ``general`` on the pattern of
``A`` and of ``A^2``, and the median over 256 sampled rows of the row residual
``||e_i - m_i A||_2`` of the ``k = 1`` inverse: the predictor tried (and rejected) for
choosing ``k`` from the data.  Iterations only: the timings are in ``bench_setup``.
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

ROOT = pathlib.Path(__file__).resolve().parents[1]
GENERATED = ["convdiff3d:24,peclet=10", "coupled2d:60", "convdiff2d:32,peclet=50"]


def _row_residual(A, M, rows):
    """``||e_i - (M A)[i, :]||_2`` for the sampled ``rows``."""
    R = sp.identity(A.shape[0], format="csr")[rows] - M[rows] @ A
    return np.sqrt(np.asarray(R.multiply(R.conj()).sum(axis=1)).real.ravel())


def run(name, A):
    rhs = A @ np.ones(A.shape[0])
    out = {"matrix": name}
    for label, make in (("jacobi", Jacobi), ("k=1", lambda: BlockISAI(variant="general",
                                                                         sparsity_power=1)),
                        ("k=2", lambda: BlockISAI(variant="general", sparsity_power=2))):
        try:
            P = make()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = solve(A, rhs, method="gmres", restart=30, precond=P, precision="mixed",
                          rtol=1e-8, maxiter=33, escalate=False)
            out[label] = f"{r.iterations}" + ("" if r.info == 0 else " F")
            if label == "k=1":
                rows = np.random.default_rng(0).choice(A.shape[0], min(256, A.shape[0]),
                                                       replace=False)
                out["resid"] = f"{np.median(_row_residual(A, P.to_sparse(), rows)):.3f}"
        except (ValueError, ArithmeticError, np.linalg.LinAlgError) as err:
            out[label] = f"setup error ({type(err).__name__})"
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
             "../shared/matrices/suitesparse`", "",
             "GMRES(30) iterations to a true residual of 1e-8 (F: not within 990); "
             "`resid`: median over 256 sampled rows of `||e_i - m_i A||_2` for k = 1.", "",
             "| matrix | jacobi | k=1 | k=2 | resid (k=1) |", "|---|---|---|---|---|"]
    for name, A in problems:
        if A.shape[0] != A.shape[1] or abs(A - A.T).max() <= 1e-12 * abs(A).max():
            continue
        r = run(name, A)
        lines.append(f"| {name} | {r['jacobi']} | {r['k=1']} | {r['k=2']} | "
                     f"{r.get('resid', '-')} |")
        print(lines[-1], flush=True)
    pathlib.Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
