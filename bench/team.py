"""Two-thread team loops against one thread: where does the team pay?

``python -m mpsolve.bench.team [--repeat R] [--sizes 1000,4000,...] [--configs NAME,...]
[--out FILE]``

For generated problems of growing size (2-D Poisson for CG, 2-D convection-diffusion for
BiCGSTAB and GMRES; b = A @ 1, x0 = 0, rtol 1e-8, ``precision='mixed'``) each
configuration is solved with the team loops off (``MPSOLVE_TEAM=0``: the serial compiled loop below
:data:`~mpsolve.kernels.cpu._config.PARALLEL_MIN` unknowns, the Python body with the
parallel kernels above) and forced on (``MPSOLVE_TEAM_MIN=1``, and
``MPSOLVE_TEAM_GMRES=1`` for GMRES), alternately, in one process; the fastest of
``R`` runs each.  Whole solves (set-up of ``M`` included, as a user sees them), so the
helper's start is in the team's time.  The ratio one thread / team is what
:data:`mpsolve.kernels.cpu.loops.TEAM_MIN_WORK` (and ``TEAM_MIN_WORK_ILU``) are chosen
from, in ``nnz + rows`` of ``A`` (the table's ``work``).
"""
from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

import mpsolve
from mpsolve.matrices import convection_diffusion2d, poisson2d

CONFIGS = [
    ("cg + jacobi", "spd", dict(method="cg", precond="jacobi")),
    ("cg + ilu0", "spd", dict(method="cg", precond="ilu0")),
    ("cg + isai", "spd", dict(method="cg", precond="isai")),
    ("bicgstab + jacobi", "ns", dict(method="bicgstab", precond="jacobi")),
    ("bicgstab + ilu0", "ns", dict(method="bicgstab", precond="ilu0")),
    ("bicgstab + isai", "ns", dict(method="bicgstab", precond="isai")),
    # block Jacobi with two ILU(0) blocks: each team thread sweeps its own block
    ("cg + ilu0 x2 blocks", "spd", dict(method="cg", precond="ilu0", blocks=2)),
    ("bicgstab + ilu0 x2 blocks", "ns", dict(method="bicgstab", precond="ilu0", blocks=2)),
    ("gmres(30) + jacobi", "ns", dict(method="gmres", precond="jacobi", restart=30)),
    ("gmres(30) + ilu0", "ns", dict(method="gmres", precond="ilu0", restart=30)),
]


def _problem(kind, n):
    m = max(4, int(round(math.sqrt(n))))
    return poisson2d(m) if kind == "spd" else convection_diffusion2d(m, peclet=20.0)


def _time(A, b, kw, team, repeat):
    if team:
        os.environ.pop("MPSOLVE_TEAM", None)
        os.environ["MPSOLVE_TEAM_MIN"] = "1"
        os.environ["MPSOLVE_TEAM_GMRES"] = "1"
    else:
        os.environ["MPSOLVE_TEAM"] = "0"
    best, res = math.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        res = mpsolve.solve(A, b, rtol=1e-8, precision="mixed", maxiter=20000, **kw)
        best = min(best, time.perf_counter() - t)
    return best, res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="1000,2000,4000,8000,16000,64000,250000")
    ap.add_argument("--configs", default=None,
                    help="comma-separated configuration names (default: all): "
                         + ", ".join(name for name, _, _ in CONFIGS))
    ap.add_argument("--out", default=None, help="write the Markdown table here too")
    args = ap.parse_args(argv)
    saved = {k: os.environ.get(k) for k in ("MPSOLVE_TEAM", "MPSOLVE_TEAM_MIN",
                                            "MPSOLVE_TEAM_GMRES")}
    rows = []
    chosen = CONFIGS
    if args.configs:
        want = [w.strip() for w in args.configs.split(",")]
        unknown = sorted(set(want) - {name for name, _, _ in CONFIGS})
        if unknown:
            ap.error(f"--configs: unknown {unknown}; choose from "
                     f"{[name for name, _, _ in CONFIGS]}")
        chosen = [c for c in CONFIGS if c[0] in want]
    try:
        for name, kind, kw in chosen:
            for n in (int(s) for s in args.sizes.split(",")):
                A = _problem(kind, n)
                b = A @ np.ones(A.shape[0])
                for team in (False, True):              # warm-up: compile both
                    _time(A, b, kw, team, 1)
                t1 = t2 = math.inf
                for _ in range(2):                      # alternate: drift hits both
                    a, r1 = _time(A, b, kw, False, args.repeat)
                    c, r2 = _time(A, b, kw, True, args.repeat)
                    t1, t2 = min(t1, a), min(t2, c)
                rows.append((name, A.shape[0], A.nnz + A.shape[0], r1.iterations,
                             r2.iterations, t1, t2))
                print(f"{name:20s} n={A.shape[0]:7d} its {r1.iterations:5d}/{r2.iterations:5d}"
                      f"  one thread {t1 * 1e3:9.3f} ms  team {t2 * 1e3:9.3f} ms"
                      f"  ratio {t1 / t2:5.2f}", flush=True)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if args.out:
        with open(args.out, "w") as f:
            f.write("# Two-thread team loops against one thread\n\n")
            only = f" --configs '{args.configs}'" if args.configs else ""
            f.write(f"Command: `python -m mpsolve.bench.team --repeat {args.repeat} "
                    f"--sizes {args.sizes}{only} --out {args.out}` (this machine: "
                    f"{os.cpu_count()} CPUs).  b = A @ 1, x0 = 0, rtol 1e-8, "
                    "precision 'mixed'; whole solves (M's set-up included), fastest of "
                    "the runs; one thread: `MPSOLVE_TEAM=0`, team: "
                    "`MPSOLVE_TEAM_MIN=1 MPSOLVE_TEAM_GMRES=1`.\n\n")
            f.write("| config | n | work | its (one / team) | one thread ms | team ms "
                    "| one / team |\n|---|---|---|---|---|---|---|\n")
            for name, n, work, i1, i2, t1, t2 in rows:
                f.write(f"| {name} | {n} | {work} | {i1} / {i2} | {t1 * 1e3:.3f} | {t2 * 1e3:.3f} "
                        f"| {t1 / t2:.2f} |\n")


if __name__ == "__main__":
    main()
