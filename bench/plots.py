"""Plots of ``mpsolve bench`` (matplotlib): convergence per problem, performance profile.

Both show the same few series (at most :data:`MAX_SERIES`), each with its own colour
and line style, the legend outside the data area:

* each engine's best configuration -- per problem the fastest converged run of
  mpsolve, of SciPy and of PETSc;
* the baselines' reference runs (PETSc's default GMRES/CG + block Jacobi/ILU(0),
  SciPy's GMRES/CG + spilu; :data:`mpsolve.bench.report.REFERENCE`);
* one named mpsolve configuration (:data:`NAMED_MPSOLVE`: Block-ISAI applied in FP32,
  the paper's preconditioner; per problem its fastest method).

A series that picks the same runs as an earlier one on every problem is merged into
it (its name added to the label) instead of drawn on top of it.
"""
from __future__ import annotations

import math
import os

import numpy as np

from .report import REFERENCE, best, reference_run

__all__ = ["write_plots", "series", "MAX_SERIES", "NAMED_MPSOLVE"]

MAX_SERIES = 6
#: The named mpsolve configuration drawn besides the best runs: (preconditioner,
#: precision), any method.
NAMED_MPSOLVE = ("block-isai", "mixed")

#: (colour, line style) per series, in order: distinct in both.
STYLES = [("#1f77b4", "-"), ("#ff7f0e", "--"), ("#2ca02c", "-."), ("#d62728", ":"),
          ("#9467bd", (0, (5, 1, 1, 1))), ("#8c564b", (0, (3, 1, 1, 1, 1, 1)))]


def _fixed(runs, solver, precond, precision):
    def pick(p):
        ok = [r for r in runs if r.solver == solver and r.problem == p and r.precond == precond
              and r.precision == precision]
        conv = [r for r in ok if r.converged]
        if conv:
            return min(conv, key=lambda r: r.total_time)
        return ok[0] if ok else None
    return pick


def series(runs):
    """``[(label, pick)]``: ``pick(problem)`` is the series' run on that problem (or None)."""
    names = {"mpsolve": "mpsolve", "scipy": "SciPy", "petsc": "PETSc"}
    cands = [(f"{names[s]} best", (lambda s: lambda p: best(runs, s, p))(s))
             for s in ("mpsolve", "scipy", "petsc")]
    cands += [("PETSc default: gmres/cg + bjacobi(ILU0)",
               lambda p: reference_run(runs, "petsc", p, REFERENCE)),
              ("SciPy gmres/cg + spilu", lambda p: reference_run(runs, "scipy", p, REFERENCE))]
    pc, prec = NAMED_MPSOLVE
    cands.append((f"mpsolve {pc}/{prec}", _fixed(runs, "mpsolve", pc, prec)))
    problems = list(dict.fromkeys(r.problem for r in runs))
    out = []
    for label, pick in cands:
        picked = [pick(p) for p in problems]
        if all(r is None for r in picked):
            continue
        same = next((i for i, (_, other) in enumerate(out)
                     if all(a is b for a, b in zip(picked, (other(p) for p in problems)))), None)
        if same is not None:
            out[same] = (f"{out[same][0]} = {label}", out[same][1])
            continue
        out.append((label, pick))
    return out[:MAX_SERIES]


def _legend(ax):
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False,
              handlelength=3.5, borderaxespad=0.0)


def _history(r):
    h = np.maximum(np.asarray(r.history, dtype=float), 1e-300)
    if r.history_its and len(r.history_its) == len(h):
        return np.asarray(r.history_its), h
    return np.linspace(0, max(r.iterations, len(h) - 1), len(h)), h


def write_plots(runs, outdir, rtol=None):
    """Write ``convergence_<problem>.png`` per problem and ``profile.png``; returns the
    files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = series(runs)
    files = []
    problems = list(dict.fromkeys(r.problem for r in runs))
    for p in problems:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        drawn = {}  # id(run) -> its line: a run two series pick is drawn once, both named
        for (label, pick), (colour, style) in zip(chosen, STYLES):
            r = pick(p)
            if r is None or not r.history:
                continue
            tag = f"{r.config}, {r.total_time:.2f} s" if r.converged else f"{r.config}, failed"
            if id(r) in drawn:
                line = drawn[id(r)]
                head, _, rest = line.get_label().rpartition("\n")
                line.set_label(f"{head} = {label}\n{rest}")
                continue
            its, h = _history(r)
            drawn[id(r)], = ax.semilogy(its, h, color=colour, ls=style, lw=1.8,
                                        label=f"{label}\n({tag})")
        if not ax.lines:
            plt.close(fig)
            continue
        if rtol:
            ax.axhline(rtol, color="0.5", lw=0.8, ls=(0, (1, 3)))
        ax.set_xlabel("iteration")
        ax.set_ylabel("relative residual")
        ax.set_title(f"convergence: {p}")
        ax.grid(True, which="major", alpha=0.3)
        _legend(ax)
        safe = "".join(c if c.isalnum() else "_" for c in p)
        f = os.path.join(outdir, f"convergence_{safe}.png")
        fig.savefig(f, dpi=110, bbox_inches="tight")
        plt.close(fig)
        files.append(f)
    # performance profile (Dolan & More 2002) over time to solution
    T = np.full((len(problems), len(chosen)), np.inf)
    for j, (_, pick) in enumerate(chosen):
        for i, p in enumerate(problems):
            r = pick(p)
            if r is not None and r.converged and math.isfinite(r.total_time):
                T[i, j] = r.total_time
    tmin = T.min(axis=1, keepdims=True) if chosen else np.full((len(problems), 1), np.inf)
    solved = np.isfinite(tmin[:, 0])
    if solved.any():
        ratio = T[solved] / tmin[solved]
        finite = ratio[np.isfinite(ratio)]
        top = max(2.0, min(1e3, float(finite.max()) * 1.5))
        taus = np.logspace(0, math.log10(top), 400)
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for j, ((label, _), (colour, style)) in enumerate(zip(chosen, STYLES)):
            rho = [(ratio[:, j] <= t).mean() for t in taus]
            ax.step(taus, rho, where="post", color=colour, ls=style, lw=1.8, label=label)
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.05)
        ax.set_xlim(1, top)
        ax.set_xlabel("tau (time to solution / fastest of these)")
        ax.set_ylabel("fraction of problems solved within tau")
        ax.set_title(f"performance profile, {int(solved.sum())} problems")
        ax.grid(True, which="major", alpha=0.3)
        _legend(ax)
        f = os.path.join(outdir, "profile.png")
        fig.savefig(f, dpi=110, bbox_inches="tight")
        plt.close(fig)
        files.append(f)
    return files
