"""Set-up and apply times of the (Block-)ISAI preconditioners against ILU(0) baselines.

Run ``python bench/bench_precond.py [--matrices bcsstk14,nos3,...] [--repeat 50]``:
for each matrix it sets up ISAI (spd / general / ilu), Block-ISAI, Block-Jacobi,
our ILU(0) and SciPy's ``spilu`` (SuperLU's ILUTP with its default
``drop_tol=1e-4, fill_factor=10``, plus ``drop_tol=0, fill_factor=1``, the
closest it gets to ILU(0)), and times one preconditioner application
``out <- M r`` (best of ``--repeat``) with FP64 and FP32 vectors and FP32 / FP64
storage.  ``spilu``'s application is its ``solve`` (two sequential triangular
solves in FP64).

The matrices come from ``$MPSOLVE_TEST_COLLECTION`` (default
``../shared/matrices/suitesparse``) plus a generated 3-D block problem
(3 unknowns per node: ``kron(Laplacian_3d, K) + perturbation``, block size 3).

The ``test_*`` functions are pytest-benchmark micro-benchmarks
(``pytest bench/bench_precond.py --benchmark-only``).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import time
import warnings

import numpy as np
import scipy.io as sio
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from mpsolve.precond import ILU0, ISAI, BlockISAI, BlockJacobi, PreconditionerWarning

ROOT = pathlib.Path(__file__).resolve().parents[1]
COLLECTION = pathlib.Path(os.environ.get("MPSOLVE_TEST_COLLECTION",
                                         ROOT / ".." / "shared" / "matrices" / "suitesparse"))
DEFAULT = ["bcsstk14", "nos3", "bcsstk16", "sherman3", "af23560"]


def block_problem(k=14, seed=0):
    """3-D Laplacian (k^3 nodes) x SPD 3x3 + a 1% symmetric perturbation: b = 3."""
    rng = np.random.default_rng(seed)
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(k, k))
    I = sp.identity(k)
    L3 = sp.kron(sp.kron(T, I), I) + sp.kron(sp.kron(I, T), I) + sp.kron(sp.kron(I, I), T)
    Q = rng.standard_normal((3, 3))
    A = sp.kron(L3, Q @ Q.T + 3 * np.eye(3)).tocsr()
    P = A.copy()
    P.data = rng.uniform(-1, 1, P.nnz) * 0.01 * np.abs(A.data).max()
    return sp.csr_matrix(A + (P + P.T) / 2)


def load(name):
    if name == "block3d":
        return block_problem()
    return sp.csr_matrix(sio.mmread(str(COLLECTION / f"{name}.mtx.gz")))


def best_time(f, repeat):
    f()
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def candidates(spd):
    """(label, factory) pairs; factories take ``dtype``."""
    out = []
    if spd:
        out += [("isai spd k=1", lambda dt: ISAI("spd", sparsity_power=1, dtype=dt)),
                ("isai spd default", lambda dt: ISAI("spd", dtype=dt)),
                ("isai spd k=2", lambda dt: ISAI("spd", sparsity_power=2, dtype=dt)),
                ("block-isai spd", lambda dt: BlockISAI(variant="spd", dtype=dt))]
    else:
        out += [("isai general k=2", lambda dt: ISAI("general", dtype=dt)),
                ("block-isai general", lambda dt: BlockISAI(variant="general", dtype=dt))]
    out += [("isai ilu (L,U isai)", lambda dt: ISAI("ilu", dtype=dt)),
            ("block-jacobi", lambda dt: BlockJacobi(dtype=dt)),
            ("ilu0 (ours)", lambda dt: ILU0(dtype=dt))]
    return out


def bench_matrix(name, repeat):
    A = load(name)
    n = A.shape[0]
    spd = name == "block3d" or (abs(A - A.T).max() == 0 and A.diagonal().min() > 0)
    rng = np.random.default_rng(0)
    r64 = rng.standard_normal(n)
    r32 = r64.astype(np.float32)
    o64, o32 = np.empty(n), np.empty(n, dtype=np.float32)
    rows = []
    for label, make in candidates(spd):
        for dt in ("float32", "float64"):
            M = make(dt)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", PreconditionerWarning)
                    t0 = time.perf_counter()
                    M.setup(A)
                    ts = time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001 - report and go on (zero pivots, ...)
                rows.append((name, n, A.nnz, label, dt, f"failed: {type(e).__name__}", "", "", ""))
                break
            ta64 = best_time(lambda: M.apply(r64, o64), repeat)
            ta32 = best_time(lambda: M.apply(r32, o32), repeat)
            extra = getattr(M, "block_size", None)
            lab = label + (f" b={extra}" if extra else "")
            rows.append((name, n, A.nnz, lab, dt, f"{ts:.3f}", f"{ta64 * 1e3:.3f}",
                         f"{ta32 * 1e3:.3f}", f"{M.nbytes / 2**20:.2f}"))
    Ac = sp.csc_matrix(A)
    for label, kw in (("scipy spilu default", {}),
                      ("scipy spilu dt=0 ff=1", dict(drop_tol=0.0, fill_factor=1))):
        try:
            t0 = time.perf_counter()
            F = spla.spilu(Ac, **kw)
            ts = time.perf_counter() - t0
        except RuntimeError as e:
            rows.append((name, n, A.nnz, label, "float64", f"failed: {e}", "", "", ""))
            continue
        ta = best_time(lambda: F.solve(r64), repeat)
        mib = (F.L.data.nbytes + F.L.indices.nbytes + F.U.data.nbytes + F.U.indices.nbytes) / 2**20
        rows.append((name, n, A.nnz, label, "float64", f"{ts:.3f}", f"{ta * 1e3:.3f}", "-",
                     f"{mib:.2f}"))
    return rows


def solve_rows(name, rtol=1e-8):
    """Time to solution with mpsolve's solver and each preconditioner (FP32 storage)."""
    import mpsolve

    A = block_problem() if name == "block3d" else load(name)
    b = A @ np.ones(A.shape[0])
    spd = name == "block3d" or _is_spd(name)
    method = "cg" if spd else "gmres"
    cands = [("ilu0", ILU0()), ("isai", ISAI("spd" if spd else "general")),
             ("block-isai", BlockISAI(variant="spd" if spd else "general")),
             ("isai-ilu", ISAI("ilu")) if not spd else None]
    rows = []
    for label, M in filter(None, cands):
        kw = dict(restart=30, maxiter=100) if method == "gmres" else dict(maxiter=5000)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PreconditionerWarning)
                r = mpsolve.solve(A, b, method=method, precond=M, rtol=rtol, **kw)
            rows.append((name, method, label, r.iterations, f"{r.setup_time:.3f}",
                         f"{r.solve_time:.3f}", f"{r.setup_time + r.solve_time:.3f}",
                         "yes" if r.converged else "no"))
        except Exception as err:  # recorded, not dropped
            rows.append((name, method, label, "-", "-", "-", "-", f"error: {type(err).__name__}"))
    return rows


def _is_spd(name):
    f = COLLECTION / "MANIFEST.tsv"
    if not f.exists():
        return False
    for line in f.read_text().splitlines()[1:]:
        cols = line.split("\t")
        if cols[0] == name:
            return cols[7] == "yes"
    return False


def main(argv=None):
    import platform
    import sys

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrices", default=",".join(DEFAULT + ["block3d"]))
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--out", help="also write the tables to this Markdown file")
    args = ap.parse_args(argv)
    lines = [f"# Preconditioner set-up, apply and time to solution", "",
             f"Command: `python bench/bench_precond.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
             f"({time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, {os.cpu_count()} cores; "
             "apply = best of --repeat; one run, compare ratios)", ""]

    def emit(line):
        print(line, flush=True)
        lines.append(line)

    head = ("matrix", "n", "nnz", "preconditioner", "storage", "setup s", "apply ms x64",
            "apply ms x32", "MiB")
    emit("## Set-up and apply")
    emit("")
    emit("| " + " | ".join(head) + " |")
    emit("|" + "---|" * len(head))
    names = [n for n in args.matrices.split(",")
             if n == "block3d" or (COLLECTION / f"{n}.mtx.gz").exists()]
    for name in names:
        for row in bench_matrix(name, args.repeat):
            emit("| " + " | ".join(str(c) for c in row) + " |")
    emit("")
    emit("## Time to solution (mpsolve CG on SPD / GMRES(30) otherwise, true residual 1e-8)")
    emit("")
    emit("| matrix | method | preconditioner | iterations | setup s | solve s | total s | converged |")
    emit("|---|---|---|---|---|---|---|---|")
    for name in names:
        for row in solve_rows(name):
            emit("| " + " | ".join(str(c) for c in row) + " |")
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


# ------------------------------------------------------------ pytest-benchmark
def _setup_pair():
    A = block_problem(10)
    return A, np.ones(A.shape[0])


def test_bench_isai_spd_apply(benchmark):
    A, r = _setup_pair()
    M = ISAI("spd").setup(A)
    out = np.empty_like(r)
    benchmark(M.apply, r, out)


def test_bench_block_isai_spd_apply(benchmark):
    A, r = _setup_pair()
    M = BlockISAI(variant="spd").setup(A)
    out = np.empty_like(r)
    benchmark(M.apply, r, out)


def test_bench_ilu0_apply(benchmark):
    A, r = _setup_pair()
    M = ILU0().setup(A)
    out = np.empty_like(r)
    benchmark(M.apply, r, out)


def test_bench_isai_spd_setup(benchmark):
    A, _ = _setup_pair()
    benchmark(lambda: ISAI("spd").setup(A))


if __name__ == "__main__":
    main()
