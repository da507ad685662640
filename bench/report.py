"""Tables of ``mpsolve bench``: ``results.md`` and the summary printed at the end."""
from __future__ import annotations

import math

__all__ = ["REFERENCE", "best", "reference_run", "summary", "write_markdown", "text_summary",
           "parallel_line"]

#: The baselines' reference runs (issue 5's goal): PETSc's default GMRES(30) with block
#: Jacobi/ILU(0), SciPy's gmres with spilu.  On an SPD problem that has no GMRES run the
#: baseline's CG run with the same preconditioner stands in.
REFERENCE = {"petsc": (("gmres", "cg"), "bjacobi"), "scipy": (("gmres", "cg"), "spilu")}


def fmt_time(t):
    return "-" if not math.isfinite(t) else f"{t:.3f}"


def best(runs, solver, problem):
    """The fastest converged run of ``solver`` on ``problem`` (None if none converged):
    over every configuration and, for PETSc, every rank count."""
    ok = [r for r in runs if r.solver == solver and r.problem == problem and r.converged]
    return min(ok, key=lambda r: r.total_time) if ok else None


def reference_run(runs, solver, problem, reference=REFERENCE):
    """The reference run of ``solver`` on ``problem``: the run of the first of the
    reference's methods that has one, converged or not (None when there is none); of
    its runs on several MPI ranks (PETSc's), the fastest converged one."""
    if not reference or solver not in reference:
        return None
    meths, pc = reference[solver]
    for meth in meths:
        cands = [r for r in runs if r.solver == solver and r.problem == problem
                 and r.precond == pc and r.method == meth]
        if cands:
            ok = [r for r in cands if r.converged]
            return min(ok, key=lambda r: r.total_time) if ok else cands[0]
    return None


def reference_name(solver, reference=REFERENCE):
    if reference and solver in reference:
        meths, pc = reference[solver]
        return f"{solver} {'/'.join(meths)}+{pc}"
    return f"{solver} best"


def _geomean(xs):
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def summary(runs, reference=None):
    """Per problem: mpsolve's best time to solution against each baseline.

    ``reference``: a dict solver -> (methods, precond) naming the baseline run to
    compare with: the run of the first of ``methods`` that has one, converged or not
    (e.g. PETSc's default GMRES + bjacobi/ILU(0), see :data:`REFERENCE`); without it
    each baseline's best converged run.

    Returns ``(rows, geometric means, ratios)``: one dict per problem (``problem``,
    ``mpsolve``, ``scipy``, ``petsc`` runs or None), per baseline the geometric mean of
    the speed-ups over the problems both solved, and every speed-up (``inf`` where only
    mpsolve converged).
    """
    problems = list(dict.fromkeys(r.problem for r in runs))
    lines = []
    ratios = {}
    for p in problems:
        mine = best(runs, "mpsolve", p)
        row = {"problem": p, "mpsolve": mine}
        for s in ("scipy", "petsc"):
            other = reference_run(runs, s, p, reference) if reference else None
            if other is None:  # no reference run for this problem: the baseline's best run
                other = best(runs, s, p)
            row[s] = other
            if mine and other:
                t_other = other.total_time if other.converged else math.inf
                ratios.setdefault(s, []).append(t_other / mine.total_time)
        lines.append(row)
    return lines, {s: _geomean([x for x in v if math.isfinite(x)]) for s, v in ratios.items()}, ratios


def _summary_lines(runs, reference, bold="**"):
    """The geometric-mean sentences: best against best first (the headline), then
    against the named reference runs."""
    out = []
    problems = list(dict.fromkeys(r.problem for r in runs))
    baselines = [s for s in ("scipy", "petsc") if any(r.solver == s for r in runs)]
    for ref in (None, reference) if reference else (None,):
        rows, gm, ratios = summary(runs, ref)
        for s in baselines:
            if ref and not any(reference_run(runs, s, p, ref) for p in problems):
                continue    # no such run at all (its preconditioner not asked for): unnamed
            finite = [x for x in ratios.get(s, []) if math.isfinite(x)]
            failed = len(ratios.get(s, [])) - len(finite)
            # the other way round: the baseline solved, no run of mpsolve's did
            lost = sum(1 for row in rows if row["mpsolve"] is None and row[s] is not None
                       and row[s].converged)
            name = (reference_name(s, ref) if ref else
                    f"{s}'s best run (any method and preconditioner)")
            head = (f"geometric-mean speed-up {bold}{gm[s]:.2f}x{bold} over the {len(finite)} "
                    f"problems both solved" if finite else "no problem solved by both")
            out.append(f"mpsolve's best vs {name}: {head}; on {failed} more the {s} run "
                       f"failed and mpsolve's did not; on {lost} the {s} run solved and "
                       f"no run of mpsolve's did")
    return out


def mib_cell(run):
    """The preconditioner's stored MiB, ``-`` where the run did not record them (a
    preconditioner whose bytes are 0: PETSc's, which the bench does not ask)."""
    if run.precond_nbytes == 0 and run.precond not in (None, "none"):
        return "-"
    return f"{run.precond_nbytes / 2**20:.2f}"


def bandwidth_cells(run, stream):
    """``"GB/s | % stream"`` of a run's iteration (``-`` where it has no model or time)."""
    bw = getattr(run, "bandwidth", float("nan"))
    if not math.isfinite(bw):
        return "- | -"
    pct = f"{100 * bw / stream:.0f}" if math.isfinite(stream) and stream > 0 else "-"
    return f"{bw / 1e9:.1f} | {pct}"


def parallel_line(meta):
    """The header's sentence on the parallelism of each side: mpsolve's threads, the
    PETSc rank counts run and anything that went wrong with ``mpiexec``."""
    threads = meta.get("mpsolve_threads")
    ranks = meta.get("petsc_ranks")
    text = (f"Parallelism: mpsolve used {threads} thread{'s' * (threads != 1)} (Numba); "
            if threads else "Parallelism: mpsolve's thread count not recorded; ")
    if ranks is None:
        text += "PETSc ran in one process (results from before the rank counts were recorded)."
    elif not ranks:
        text += "PETSc did not run."
    else:
        text += (f"PETSc ran on {' and '.join(map(str, ranks))} MPI rank"
                 f"{'s' * (ranks != [1])} (1: in the bench's process; more: `mpiexec -n R`, "
                 "one thread per rank, ILU/ICC as block Jacobi with one ILU(0)/IC(0) block "
                 "per rank, SOR as local SSOR), its best over all of them.")
    for note in meta.get("petsc_mpi_notes") or []:
        text += f" **Note: {note}.**"
    return text


def write_markdown(runs, path, meta, reference=None):
    rows, _, _ = summary(runs, reference)
    out = ["# mpsolve bench results", "", f"Command: `{meta['command']}`", "",
           f"Machine: {meta['machine']}; Python {meta['python']}; versions: "
           + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()), "",
           f"Tolerance: FP64 true relative residual <= {meta['rtol']:g}; b = A @ ones; x0 = 0.", ""]
    if "wall_seconds" in meta:
        out += [f"Wall time of the whole run: {meta['wall_seconds']:.0f} s.", ""]
    out += [parallel_line(meta), ""]
    best_rows = {row["problem"]: row for row in summary(runs, None)[0]}
    ref_name = {s: reference_name(s, reference) for s in ("scipy", "petsc")}

    def cell(r):
        if r is None:
            return "-", "-"
        return (r.config + ("" if r.converged else " (failed)"),
                fmt_time(r.total_time) if r.converged else "failed")

    def ratio(mine, other):
        if mine is None or other is None:
            return "-"
        if not other.converged:
            return "only mpsolve"
        return f"{other.total_time / mine.total_time:.2f}x"

    out += ["## Best time to solution per problem", "",
            "Time to solution = set-up + solve (building the solver's copy of the matrix "
            "included). Speed-up = baseline time / mpsolve's best time. The reference "
            "columns are each baseline's GMRES(restart) run with the named preconditioner "
            "(its CG run where no GMRES ran; PETSc's on its faster rank count); 'petsc "
            "best' is PETSc's fastest converged run over every configuration and rank "
            "count (`xR`: R MPI ranks).",
            "",
            f"| problem | mpsolve best | time (s) | {ref_name['scipy']} (s) | "
            f"{ref_name['petsc']} (s) | speed-up vs it | petsc best | time (s) | "
            "speed-up vs it |",
            "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        mine = row.get("mpsolve")
        pb = best_rows[row["problem"]].get("petsc")
        out.append("| " + " | ".join([
            row["problem"], *cell(mine), cell(row.get("scipy"))[1], cell(row.get("petsc"))[1],
            ratio(mine, row.get("petsc")), *cell(pb), ratio(mine, pb)]) + " |")
    out.append("")
    out += [f"- {line}" for line in _summary_lines(runs, reference)]
    stream = meta.get("stream_bytes_per_s", float("nan"))
    out += ["", "## Every run", "",
            "GB/s: the bytes one iteration must move (the matrix in its storage precision "
            "with 32-bit indices per SpMV, the preconditioner's stored bytes per application, "
            "the method's vector traffic in the vectors' precision: "
            "`mpsolve.bench.suite.iteration_bytes`) times the iterations, over the solve time"
            "; % stream: that against the machine's "
            + (f"{stream / 1e9:.1f} GB/s" if math.isfinite(stream) else "(unmeasured)")
            + " (NumPy `a = b + c` on 64 MiB vectors, one thread per core, best of 5): "
            "over 100% where a problem's working set stays in the caches.  M MiB: the "
            "preconditioner's stored bytes, '-' where the baseline does not report them "
            "(PETSc's PCs).", "",
            "| problem | solver | ranks | method | precond | precision | iters | setup s | "
            "solve s | total s | true rel. res | M MiB | GB/s | % stream | status |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        nranks = r.ranks if r.solver == "petsc" else "-"
        out.append(f"| {r.problem} | {r.solver} | {nranks} | {r.method} | {r.precond_label} | "
                   f"{r.precision} | "
                   f"{r.iterations} | {fmt_time(r.setup_time)} | {fmt_time(r.solve_time)} | "
                   f"{fmt_time(r.total_time)} | {r.true_residual:.2e} | "
                   f"{mib_cell(r)} | {bandwidth_cells(r, stream)} | "
                   f"{'ok' if r.converged else 'FAILED: '}{'' if r.converged else r.status[:80]} |")
    staged = [r for r in runs if r.setup_stages]
    if staged:
        out += ["", "## Preconditioner set-up by stage", "",
                "Seconds of each stage the preconditioner reports (pattern: sparsity pattern "
                "of A^k; solve: batched local solves; excess: rows too long for the batch; "
                "fallback: rejected rows; store: FP32 demotion and layout); 'setup s' above "
                "also holds building the solver's copy of A and the checks.", "",
                "| problem | method | precond | precision | stages (s) |", "|---|---|---|---|---|"]
        for r in staged:
            stages = ", ".join(f"{k} {v:.3f}" for k, v in r.setup_stages.items())
            out.append(f"| {r.problem} | {r.method} | {r.precond} | {r.precision} | {stages} |")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def text_summary(runs, reference=None):
    """The per-problem table and the speed-up sentences, as plain text for the terminal:
    each engine's fastest converged run (configuration, seconds) per problem."""
    rows, _, _ = summary(runs, None)
    engines = [s for s in ("mpsolve", "scipy", "petsc") if any(r.solver == s for r in runs)]

    def cell(r):
        if r is None:
            return "failed"
        t = r.total_time
        return f"{r.config} " + (f"{t:.2f} s" if t >= 0.1 else f"{t * 1e3:.1f} ms")

    head = ["problem", "n"] + [f"{s} best" for s in engines] + \
        [f"vs {s}" for s in engines if s != "mpsolve"]
    table = []
    for row in rows:
        p = row["problem"]
        n = next(r.n for r in runs if r.problem == p)
        mine = row["mpsolve"]
        line = [p, str(n)] + [cell(best(runs, s, p)) for s in engines]
        for s in engines:
            if s == "mpsolve":
                continue
            other = best(runs, s, p)
            line.append("-" if mine is None else "only mpsolve" if other is None else
                        f"{other.total_time / mine.total_time:.2f}x")
        table.append(line)
    widths = [max(len(h), *(len(t[i]) for t in table)) if table else len(h)
              for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(t, widths)) for t in table]
    out += [""] + _summary_lines(runs, reference, bold="")
    return "\n".join(out)
