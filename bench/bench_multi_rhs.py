"""Several right-hand sides in one sweep: the k-RHS goal of issue 14.

Run ``python -m mpsolve.bench.bench_multi_rhs`` (1M unknowns, about 10-20 minutes on an
idle machine), ``--medium`` (262k unknowns) or ``--small`` (a quick check of the script,
27k unknowns); options
``[--ks 1 2 4 8] [--precision mixed] [--rtol 1e-8] [--repeat 1] [--out FILE]``.

Two cases, the goal's: CG + Jacobi on ``poisson3d:100`` and GMRES(30) + ILU(0) (left) on
``convdiff3d:100,peclet=10`` (``--small``: the same at 30^3).  The right-hand sides are
``b_c = A x_c`` for random ``x_c`` (column 0: ``x = 1``), ``x0 = 0``, FP64 true residual
``rtol``.  A :class:`mpsolve.Solver` is set up once per case (not timed); then, for each
``k``:

* ``block``      -- ``Solver.solve(B[:, :k])`` with ``MPSOLVE_BLOCK=1`` (set by this script:
  by default the CPU iterates together only CG from 500k unknowns,
  :func:`mpsolve.multi.together`): the k systems iterated together, converged columns
  compacted out of the block;
* ``block mask`` -- the same with ``deflation="mask"`` (frozen columns stay in the block);
* ``separate``   -- ``k`` calls ``Solver.solve(B[:, c])``.

Reported: seconds (best of ``--repeat``), the ratio to one right-hand side's solve
(``k = 1`` separate), the largest column iteration count, and whether every column
converged.  Goal: ``block`` at ``k = 8`` within 3x of one solve.  Beside it the traffic
model's ratio (:func:`traffic_ratio`): what the ratio would be if a block iteration moved
just the bytes the model counts, at the bandwidth the one-RHS solve reaches -- the matrix
and the preconditioner's stored operators once, the vectors once per column.  Also the
kernels alone:
one SpMM over ``A`` with ``k`` columns against ``k`` SpMVs, and ILU(0)'s sweeps with ``k``
right-hand sides per row against ``k`` single sweeps.

``--profile`` (``--small``: 27k unknowns) times one block solve per ``k`` kernel by kernel
instead (each kernel a block body calls wrapped in a timer: the SpMM, M, each column op;
the rest is the bodies' and the driver's Python) and writes
``bench/results/multi_rhs_profile.md``: where a block iteration's time goes.

Ratios come from one run of this script; the machine may be shared, so compare ratios,
not absolute times across runs.  Writes Markdown (``--out``; default
``bench/results/multi_rhs.md``).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import platform
import sys
import time

import numpy as np

from mpsolve import Solver
from mpsolve.kernels import lookup
from mpsolve.kernels.registry import launch_plan
from mpsolve.matrices import generate
from mpsolve.precond import make_preconditioner
from mpsolve.bench.suite import _csr_bytes

ROOT = pathlib.Path(__file__).resolve().parents[1]
CASES = [("cg", "jacobi", "poisson3d:100"), ("gmres", "ilu0", "convdiff3d:100,peclet=10")]
SMALL = [("cg", "jacobi", "poisson3d:30"), ("gmres", "ilu0", "convdiff3d:30,peclet=10")]
MEDIUM = [("cg", "jacobi", "poisson3d:64"), ("gmres", "ilu0", "convdiff3d:64,peclet=10")]
#: A first, untimed round on a smaller problem of each case compiles every kernel (Numba
#: compiles on first call; the parallel forms need vectors of 32k entries or more)
WARM = {"poisson3d:100": "poisson3d:36", "convdiff3d:100,peclet=10": "convdiff3d:36,peclet=10",
        "poisson3d:30": "poisson3d:34", "convdiff3d:30,peclet=10": "convdiff3d:34,peclet=10",
        "poisson3d:64": "poisson3d:34", "convdiff3d:64,peclet=10": "convdiff3d:34,peclet=10"}


def _best(f, repeat):
    best, out = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def traffic_ratio(method, n, nnz, m_bytes, k, restart=30, value_bytes=4, vec_bytes=8):
    """Bytes of one block iteration with ``k`` columns over those with one, by the model of
    :func:`mpsolve.bench.suite.iteration_bytes`: one pass over ``A`` (``value_bytes`` values,
    32-bit indices) and one over M's stored ``m_bytes`` per iteration whatever ``k``; per
    column the method's vector traffic (CG: 12n, 2n more for ``r . z``; GMRES(m): a
    classical Gram--Schmidt step reads ``(m + 1) n`` basis values and ``2n`` working values
    on average over a cycle) and the 2n of each product's input and output.  The
    ``mixed`` preset's defaults: FP32 ``A``, FP64 vectors and basis."""
    fixed = _csr_bytes(n, nnz, value_bytes) + m_bytes
    if method == "cg":
        per_col = (12 + 2 + 2 + 2) * n * vec_bytes
    else:
        per_col = ((restart + 1) + 2 + 2 + 2) * n * vec_bytes
    return (fixed + k * per_col) / (fixed + per_col)


def solves(method, precond, spec, ks, args, warm=None):
    if warm is not None:   # compile every kernel (serial and parallel forms) untimed
        solves(method, precond, warm, ks, args)
    A = generate(spec)
    n = A.shape[0]
    rng = np.random.default_rng(0)
    kmax = max(ks)
    Xt = rng.standard_normal((n, kmax))
    Xt[:, 0] = 1.0
    B = np.ascontiguousarray(A @ Xt)
    kw = dict(restart=30) if method == "gmres" else {}
    s = Solver(A, method=method, precond=precond, precision=args.precision, rtol=args.rtol,
               maxiter=args.maxiter, **kw)
    rows = []
    one = None
    for k in ks:
        Bk = np.ascontiguousarray(B[:, :k])
        t_sep, res_sep = _best(lambda: [s.solve(np.ascontiguousarray(Bk[:, c]))
                                        for c in range(k)], args.repeat)
        if k == 1:
            one = t_sep
        t_blk, res_blk = _best(lambda: s.solve(Bk), args.repeat)
        t_msk, res_msk = _best(lambda: s.solve(Bk, deflation="mask"), args.repeat)
        rows.append(dict(
            k=k, block=t_blk, mask=t_msk, separate=t_sep,
            its_block=int(np.max(res_blk.column_iterations)) if k > 1 else res_blk.iterations,
            its_sep=max(r.iterations for r in res_sep),
            ok=bool(res_blk.converged and res_msk.converged
                    and all(r.converged for r in res_sep)),
            model=traffic_ratio(method, n, A.nnz, res_sep[0].precond_nbytes, k),
            mode=res_blk.rhs_mode or "single"))
        print(f"  {spec} k={k}: block {t_blk:.2f} s, mask {t_msk:.2f} s, separate "
              f"{t_sep:.2f} s", flush=True)
    for r in rows:
        r["ratio_block"], r["ratio_mask"], r["ratio_sep"] = (r["block"] / one, r["mask"] / one,
                                                             r["separate"] / one)
    return A, rows


def kernels(A, ks, repeat):
    """Seconds of one SpMM with k columns and of k SpMVs (FP32 values: ``mixed`` stores M
    in FP32, ``A`` stays FP64 -- FP64 values here), and of ILU(0)'s sweeps (FP32 factors)."""
    ip, ix = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    plan = launch_plan("cpu", "spmv", ip)
    key = ("float64", "float64", "float64")
    spmm, spmv = lookup("cpu", "spmm", key, "acc64"), lookup("cpu", "spmv", key, "acc64")
    M = make_preconditioner("ilu0", dtype="float32").setup(A)
    op = M._op
    sargs = (op.bounds, op.lptr, op.lind, op.lval, op.uptr, op.uind, op.uval, op.dinv)
    key32 = ("float32", "float64", "float64")
    sw, swm = lookup("cpu", "ilu_sweeps", key32), lookup("cpu", "ilu_sweeps_mm", key32)
    n = A.shape[0]
    rows = []
    for k in ks:
        X = np.random.default_rng(1).standard_normal((n, k))
        Y = np.empty_like(X)
        cols = [np.ascontiguousarray(X[:, c]) for c in range(k)]
        y = np.empty(n)
        spmm(plan, ip, ix, A.data, X, Y)        # compile / warm
        swm(*sargs, X, Y)
        t_mm, _ = _best(lambda: spmm(plan, ip, ix, A.data, X, Y), repeat + 2)
        t_mv, _ = _best(lambda: [spmv(plan, ip, ix, A.data, c, y) for c in cols], repeat + 2)
        t_swm, _ = _best(lambda: swm(*sargs, X, Y), repeat + 2)
        t_sw, _ = _best(lambda: [sw(*sargs, c, y) for c in cols], repeat + 2)
        rows.append(dict(k=k, spmm=t_mm, spmv=t_mv, swm=t_swm, sw=t_sw))
    return rows


# ------------------------------------------------------------------ profile of one iteration
class _Timer:
    """Wraps the kernels a block body calls and adds up their seconds by name."""

    def __init__(self):
        self.t = {}
        self.n = {}

    def wrap(self, name, f):
        if f is None:
            return None

        def g(*a):
            t = time.perf_counter()
            out = f(*a)
            self.t[name] = self.t.get(name, 0.0) + time.perf_counter() - t
            self.n[name] = self.n.get(name, 0) + 1
            return out

        return g


def profile(method, precond, spec, ks, args):
    """Per block iteration, the seconds of each kernel of the block body (SpMM, M, each
    column op) and of the rest (Python: NumPy glue, the driver), for one solve at each
    ``k``; ``k = 1``: the single-vector solve's time per iteration, for reference."""
    import dataclasses

    from mpsolve import multi

    A = generate(spec)
    n = A.shape[0]
    rng = np.random.default_rng(0)
    Xt = rng.standard_normal((n, max(ks)))
    Xt[:, 0] = 1.0
    B = np.ascontiguousarray(A @ Xt)
    kw = dict(restart=30) if method == "gmres" else {}
    s = Solver(A, method=method, precond=precond, precision=args.precision, rtol=args.rtol,
               **kw)
    plan0 = multi._block_plan
    timer = _Timer()

    def plan(*a, **k):
        out = plan0(*a, **k)
        if out is None:
            return None
        body, body_kw, policy, sys_, bsys = out
        ops = dataclasses.replace(bsys.ops, **{f.name: timer.wrap(f.name, getattr(bsys.ops,
                                                                                  f.name))
                                                for f in dataclasses.fields(bsys.ops)
                                                if f.name.startswith("col_")
                                                or f.name.startswith("cg_")
                                                or f.name.startswith("gs_")})
        bsys = dataclasses.replace(
            bsys, ops=ops, matvec=timer.wrap("SpMM", bsys.matvec),
            matvec_dot=timer.wrap("SpMM+dot", bsys.matvec_dot),
            psolve=timer.wrap("M", bsys.psolve), residual=timer.wrap("residual", bsys.residual))
        return body, body_kw, policy, sys_, bsys

    rows = []
    for k in ks:
        b = np.ascontiguousarray(B[:, :k]) if k > 1 else np.ascontiguousarray(B[:, 0])
        s.solve(b)                                  # warm (compilation)
        multi._block_plan = plan
        try:
            timer.t.clear()
            timer.n.clear()
            t = time.perf_counter()
            res = s.solve(b)
            total = time.perf_counter() - t
        finally:
            multi._block_plan = plan0
        its = int(res.iterations)
        rows.append(dict(k=k, its=its, total=total, t=dict(timer.t), n=dict(timer.n)))
    return A, rows


def profile_main(args, out):
    lines = ["# One block iteration, by kernel (issue 14, item 2)", "",
             f"`python -m mpsolve.bench.bench_multi_rhs --profile{' --small' if args.small else ''}`"
             f" -- {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; precision "
             f"`{args.precision}`, rtol {args.rtol:g}; one solve per k after a warm-up solve. "
             "Milliseconds per block iteration (the largest column count): each kernel's "
             "total over the solve divided by the iterations, its calls per iteration in "
             "brackets; *rest*: the solve's time not in a kernel (the bodies' NumPy and "
             "Python glue, the driver). k = 1: the single-vector solve (no block kernels; "
             "its total per iteration only).", ""]
    cases = SMALL if args.small else MEDIUM
    for method, precond, spec in cases:
        print(f"profile {method} + {precond} on {spec}", flush=True)
        A, rows = profile(method, precond, spec, args.ks, args)
        names = sorted({nm for r in rows for nm in r["t"]})
        label = "GMRES(30)" if method == "gmres" else "CG"
        lines += [f"## {label} + {precond} on `{spec}` (n = {A.shape[0]})", "",
                  "| k | its | total ms/it | " + " | ".join(names) + " | rest |",
                  "|---|---|---|" + "---|" * (len(names) + 1)]
        for r in rows:
            its = max(r["its"], 1)
            cells = [f"{r['t'][nm] * 1e3 / its:.2f} ({r['n'][nm] / its:.1f})" if nm in r["t"]
                     else "" for nm in names]
            rest = r["total"] - sum(r["t"].values())
            lines.append(f"| {r['k']} | {r['its']} | {r['total'] * 1e3 / its:.2f} | "
                         + " | ".join(cells) + f" | {rest * 1e3 / its:.2f} |")
        lines.append("")
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {out}")


def main(argv=None):
    os.environ["MPSOLVE_BLOCK"] = "1"            # the block path at every size measured
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="27k unknowns: check the script")
    ap.add_argument("--medium", action="store_true", help="262k unknowns (64^3)")
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--precision", default="mixed")
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--maxiter", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--profile", action="store_true",
                    help="time each kernel of one block iteration (262k unknowns; --small: "
                         "27k) into bench/results/multi_rhs_profile.md")
    args = ap.parse_args(argv)
    if 1 not in args.ks:
        args.ks = [1] + args.ks
    if args.profile:
        name = "multi_rhs_profile_small.md" if args.small else "multi_rhs_profile.md"
        return profile_main(args, pathlib.Path(args.out or ROOT / "bench" / "results" / name))
    cases = SMALL if args.small else MEDIUM if args.medium else CASES
    size = " --small" if args.small else " --medium" if args.medium else ""
    out = pathlib.Path(args.out or ROOT / "bench" / "results" /
                       f"multi_rhs{size.replace(' --', '_')}.md")
    lines = ["# Several right-hand sides in one sweep (issue 14, item 2)", "",
             f"`python -m mpsolve.bench.bench_multi_rhs{size}` -- "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}; precision "
             f"`{args.precision}`, rtol {args.rtol:g}, b_c = A x_c (x_0 = 1, others random), "
             f"x0 = 0, best of {args.repeat}, after an untimed round on a smaller problem (Numba's compilation). A Solver is set up once per case (not timed). "
             "Ratios are to one right-hand side's solve (k = 1) in the same run.", ""]
    A_last = None
    for method, precond, spec in cases:
        print(f"{method} + {precond} on {spec}", flush=True)
        A, rows = solves(method, precond, spec, args.ks, args, WARM.get(spec))
        A_last = A
        label = "GMRES(30)" if method == "gmres" else "CG"
        lines += [f"## {label} + {precond} on `{spec}` (n = {A.shape[0]}, nnz = {A.nnz})", "",
                  "| k | block s | block / one | traffic model / one | block mask s | mask / one "
                  "| k separate s | separate / one | max its block | max its separate "
                  "| all converged |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['k']} | {r['block']:.3f} | {r['ratio_block']:.2f}x | "
                         f"{r['model']:.2f}x | "
                         f"{r['mask']:.3f} | {r['ratio_mask']:.2f}x | {r['separate']:.3f} | "
                         f"{r['ratio_sep']:.2f}x | {r['its_block']} | {r['its_sep']} | "
                         f"{'yes' if r['ok'] else 'NO'} |")
        lines.append("")
    print("kernels", flush=True)
    krows = kernels(A_last, args.ks, args.repeat)
    lines += [f"## Kernels alone on the last case's matrix (n = {A_last.shape[0]})", "",
              "| k | SpMM (FP64 A) s | k SpMV s | SpMM / k SpMV | ILU(0) sweeps k RHS s | "
              "k single sweeps s | ratio |", "|---|---|---|---|---|---|---|"]
    for r in krows:
        lines.append(f"| {r['k']} | {r['spmm'] * 1e3:.2f} ms | {r['spmv'] * 1e3:.2f} ms | "
                     f"{r['spmm'] / r['spmv']:.2f} | {r['swm'] * 1e3:.2f} ms | "
                     f"{r['sw'] * 1e3:.2f} ms | {r['swm'] / r['sw']:.2f} |")
    lines.append("")
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
