"""What the overflow-safe norms cost (issue 13, item 3): the guarded ``nrm2`` and
``axpy2_nrm2`` of :func:`mpsolve.kernels.primitives.bind_primitives` against the bare
kernels they wrap, on ordinary vectors (where the guard only compares), and whole CG
solves whose per-iteration norm calls go through it.

Run: ``python -m mpsolve.bench.bench_safenorm [--out bench/results/safenorm.md]``
(interleaved, best of ``--repeat``; a ratio near 1.00 is the claim).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from .common import emit


def _best(f, repeat):
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def _pair(fa, fb, repeat, inner):
    """Interleaved best-of timings of ``fa`` and ``fb`` (each ``inner`` calls a sample)."""
    ta = tb = np.inf
    for _ in range(repeat):
        ta = min(ta, _best(lambda: [fa() for _ in range(inner)], 1) / inner)
        tb = min(tb, _best(lambda: [fb() for _ in range(inner)], 1) / inner)
    return ta, tb


def _solves(repeat):
    """CG and BiCGSTAB solves with the guards and without (the bare kernels bound)."""
    import mpsolve
    import mpsolve.kernels.primitives as P
    from mpsolve.matrices import convection_diffusion2d, poisson2d, poisson3d

    cases = [("poisson2d:30", poisson2d(30), "cg", "jacobi"),
             ("poisson3d:40", poisson3d(40), "cg", "jacobi"),
             ("convdiff2d:100", convection_diffusion2d(100), "bicgstab", "ilu0")]
    guarded = (P.safe_nrm2, P.safe_after)
    bare = (lambda f, xp, dt: f, lambda f, nrm2, vec, dt: f)
    out = []
    for name, A, method, pc in cases:
        b = A @ np.ones(A.shape[0])

        def run(fns):
            P.safe_nrm2, P.safe_after = fns
            try:
                return mpsolve.solve(A, b, method=method, precond=pc, precision="double",
                                     rtol=1e-8)
            finally:
                P.safe_nrm2, P.safe_after = guarded

        ra, rb = run(bare), run(guarded)
        ta = tb = np.inf
        for _ in range(repeat):
            ta = min(ta, _best(lambda: run(bare), 1))
            tb = min(tb, _best(lambda: run(guarded), 1))
        out.append((name, f"{method} + {pc}", rb.iterations, ta, tb,
                    ra.iterations == rb.iterations and np.array_equal(ra.x, rb.x)))
    return out


def main(argv=None):
    from mpsolve.kernels.primitives import bind_primitives

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--out", default=None, help="write the Markdown table here")
    args = p.parse_args(argv)
    rows = []
    rng = np.random.default_rng(0)
    for mode in ("native", "compensated"):
        ops = bind_primitives("cpu", np.float64, mode, np)
        for n in (1_000, 100_000, 1_000_000):
            x, y, u, v = (rng.standard_normal(n) for _ in range(4))
            inner = max(1, 200_000 // n)
            ta, tb = _pair(lambda: ops.nrm2.__wrapped__(x), lambda: ops.nrm2(x),
                           args.repeat, inner)
            rows.append((f"nrm2 ({mode})", n, ta, tb))
            fused = ops.axpy2_nrm2
            raw = getattr(fused, "__wrapped__", None)
            if raw is not None:
                ta, tb = _pair(lambda: raw(0.0, x, y, 0.0, u, v),
                               lambda: fused(0.0, x, y, 0.0, u, v), args.repeat, inner)
                rows.append((f"axpy2_nrm2 ({mode})", n, ta, tb))
    solves = _solves(args.repeat)
    lines = ["# Overflow-safe norms: what the guard costs", "",
             "Command: `python -m mpsolve.bench.bench_safenorm --out bench/results/safenorm.md`",
             "", "cpu, FP64, ordinary vectors (the guard's test passes: no rescaling); "
             f"interleaved, best of {args.repeat}; seconds per call.", "",
             "| op | n | bare kernel | guarded | ratio |", "|---|---|---|---|---|"]
    for name, n, ta, tb in rows:
        lines.append(f"| {name} | {n} | {ta:.3e} | {tb:.3e} | {tb / ta:.2f}x |")
    lines += ["", "Whole solves (`mpsolve.solve`, precision `double`, rtol 1e-8, b = A @ 1): "
              "the guards bypassed (bare kernels bound) against the library as it is; "
              "seconds, best of the interleaved runs.", "",
              "| problem | method + M | iterations | bare | guarded | ratio | same x |",
              "|---|---|---|---|---|---|---|"]
    for name, how, its, ta, tb, same in solves:
        lines.append(f"| {name} | {how} | {its} | {ta:.4f} | {tb:.4f} | {tb / ta:.2f}x | "
                     f"{'yes' if same else 'NO'} |")
    text = "\n".join(lines) + "\n"
    emit(text, args.out)


if __name__ == "__main__":
    main()
