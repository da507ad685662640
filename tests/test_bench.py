"""The benchmark is not the library: ``mpsolve.bench`` (the ``bench`` extra) stays out of
``import mpsolve``; its defaults, options and plots."""
from __future__ import annotations

import argparse
import doctest
import json
import subprocess
import sys

import pytest

NOT_LOADED = ("assert not [m for m in sys.modules if m.split('.')[0] in ('rich', 'matplotlib') "
              "or m.startswith('mpsolve.bench')], sorted(m for m in sys.modules "
              "if m.split('.')[0] in ('rich', 'matplotlib') or m.startswith('mpsolve.bench'))")


def _python(code, timeout=300):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout)


def test_importing_the_library_loads_neither_rich_matplotlib_nor_the_bench_package():
    p = _python("import mpsolve, mpsolve.precond, mpsolve.matrices, mpsolve.petsc, sys\n"
                + NOT_LOADED)
    assert p.returncode == 0, p.stderr[-3000:]


def test_solve_and_info_commands_do_not_load_the_bench_package():
    p = _python("import sys\nfrom mpsolve.cli import main\n"
                "assert main(['info', 'poisson2d:4']) == 0\n"
                "assert main(['solve', 'poisson2d:6', '--method', 'cg']) == 0\n" + NOT_LOADED)
    assert p.returncode == 0, p.stderr[-3000:]


def test_bench_without_the_extra_says_what_to_install(tmp_path):
    p = _python("import sys\nsys.modules['rich'] = None\nsys.modules['matplotlib'] = None\n"
                "from mpsolve.cli import main\n"
                f"sys.exit(main(['bench', '--quick', '--out', {str(tmp_path / 'out')!r}]))")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "pip install 'mpsolve[bench]'" in p.stderr and "rich" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


def test_bench_help_names_full_and_its_duration():
    p = subprocess.run([sys.executable, "-m", "mpsolve.cli", "bench", "--help"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())
    assert "--full" in text and "45 minutes" in text and "--quick" in text


def test_accepted_params_is_the_one_keyword_filter():
    from mpsolve import _params
    from mpsolve.precond import REGISTRY

    res = doctest.testmod(_params, verbose=False)
    assert res.failed == 0 and res.attempted >= 2
    kw = {"variant": "spd", "block_size": 3, "sparsity_power": None, "no_such_option": 1}
    assert _params.accepted_params(REGISTRY["jacobi"], kw) == {}
    assert _params.accepted_params(REGISTRY["block-isai"], kw) == {"variant": "spd",
                                                                   "block_size": 3}
    assert "sparsity_power" in _params.accepted_params(REGISTRY["isai"], kw, drop_none=False)


def _args(*argv):
    from mpsolve.bench import suite

    p = argparse.ArgumentParser()
    suite.add_arguments(p)
    return suite, p.parse_args(list(argv))


def test_default_configurations_are_the_reduced_set_and_full_is_every_combination():
    suite, args = _args()
    assert suite.mpsolve_configs(args) == suite.DEFAULT_CONFIGS
    assert suite._methods_for(True, args) == ["cg"]
    assert suite._methods_for(False, args) == ["gmres", "bicgstab"]
    assert suite._baseline_preconds(args) == (["jacobi", "spilu"],
                                              ["bjacobi", "jacobi", "sor", "icc"])

    suite, args = _args("--full")
    assert len(suite.mpsolve_configs(args)) == 9
    assert suite._methods_for(True, args) == ["cg", "gmres"]
    assert suite._baseline_preconds(args)[1] == ["jacobi", "bjacobi", "sor", "icc", "mpsolve"]

    # an option given alone keeps its former meaning: a product with the other's full list
    suite, args = _args("--preconds", "ilu0")
    assert suite.mpsolve_configs(args) == [("ilu0", "double"), ("ilu0", "mixed"),
                                           ("ilu0", "mixed-eft")]


def test_default_suite_takes_suitesparse_matrices_from_the_matrix_path(tmp_path, monkeypatch):
    from mpsolve.matrices import poisson2d, write_mtx

    write_mtx(tmp_path / "sherman3.mtx", poisson2d(4))  # a stand-in under a default name
    monkeypatch.setenv("MPSOLVE_MATRIX_PATH", str(tmp_path))
    suite, args = _args("--problems", "poisson2d:4")
    assert tmp_path in suite.find_collection()
    found, folders = suite._default_matrices()
    assert ("sherman3", 16, False) in [(n, A.shape[0], spd) for n, A, spd in found]
    # explicit problems: no SuiteSparse matrices added
    assert [name for name, _, _ in suite._load_problems(args)] == ["poisson2d:4"]


def _run(problem, solver, method, precond, precision, t, converged=True):
    from mpsolve.bench.common import Run

    return Run(problem=problem, n=100, nnz=500, spd=True, solver=solver, method=method,
               precision=precision, precond=precond, setup_time=0.0, solve_time=t,
               iterations=10, true_residual=1e-9 if converged else 1.0, converged=converged,
               history=[1.0, 1e-3, 1e-9], history_its=[0, 5, 10] if solver == "scipy" else [])


def test_plots_show_at_most_six_series_with_distinct_styles_and_the_legend_outside(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from mpsolve.bench import plots

    runs = []
    for i, p in enumerate(["a", "b", "c"]):
        for m in ("cg", "gmres"):
            for pc in ("jacobi", "ilu0", "block-isai"):
                for prec in ("double", "mixed", "mixed-eft"):
                    runs.append(_run(p, "mpsolve", m, pc, prec, 1 + hash((i, m, pc, prec)) % 7))
            for pc in ("jacobi", "spilu"):
                runs.append(_run(p, "scipy", m, pc, "double", 3.0 + i, converged=pc != "spilu"))
            for pc in ("jacobi", "bjacobi", "sor", "mpsolve"):
                runs.append(_run(p, "petsc", m, pc, "double", 2.0 + (pc == "sor") + i))
    chosen = plots.series(runs)
    assert 3 <= len(chosen) <= plots.MAX_SERIES
    assert len({c for c, _ in plots.STYLES}) == len({str(s) for _, s in plots.STYLES}) \
        == len(plots.STYLES) >= plots.MAX_SERIES

    seen = []
    import matplotlib.figure

    orig = matplotlib.figure.Figure.savefig

    def spy(fig, *a, **k):
        ax = fig.axes[0]
        fig.canvas.draw()
        leg = ax.get_legend()
        assert leg is not None
        lb, ab = leg.get_window_extent(), ax.get_window_extent()
        assert lb.x0 >= ab.x1 - 1 or lb.y1 <= ab.y0 + 1, "legend overlaps the data area"
        styles = [ln.get_color() for ln in ax.get_lines()
                  if ln.get_label() and not ln.get_label().startswith("_")]
        assert len(styles) <= plots.MAX_SERIES and len(set(styles)) == len(styles)
        seen.append(len(styles))
        return orig(fig, *a, **k)

    matplotlib.figure.Figure.savefig = spy
    try:
        files = plots.write_plots(runs, str(tmp_path), rtol=1e-8)
    finally:
        matplotlib.figure.Figure.savefig = orig
    assert {f.split("/")[-1] for f in files} == {"convergence_a.png", "convergence_b.png",
                                                 "convergence_c.png", "profile.png"}
    assert seen and all(2 <= k <= plots.MAX_SERIES for k in seen)


def test_bench_setup_writes_the_goal_tables(tmp_path):
    """``python -m mpsolve.bench.bench_setup`` on tiny problems: a set-up row per
    configuration with its ratio to ILU(0)'s, and a time-to-solution row per method."""
    from mpsolve.bench import bench_setup

    out = tmp_path / "setup.md"
    bench_setup.main(["--problems", "poisson3d:6", "coupled2d:8", "--repeat", "1",
                      "--out", str(out)])
    text = out.read_text()
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| ")]
    setup = [r for r in rows if len(r) == 10 and r[0] != "| problem"]
    labels = {(r[0].strip("| "), r[3]) for r in setup}
    assert ("poisson3d:6", "block-isai spd k=1") in labels       # symmetric: the SPD form
    assert ("coupled2d:8", "block-isai spd k=1") not in labels     # nonsymmetric: none
    assert all(r[5].endswith("x") for r in setup)
    solves = [r for r in rows if len(r) == 13 and r[0] != "| problem"]
    assert {(r[0].strip("| "), r[1]) for r in solves} == {
        ("poisson3d:6", "cg"), ("coupled2d:8", "gmres"), ("coupled2d:8", "gmres right"),
        ("coupled2d:8", "bicgstab")}
    assert ("coupled2d:8", "block-isai general default") in labels   # k=1 + its power test
    for r in solves:            # the alternatives: k=2 on nonsymmetric problems only, bilu on all
        assert (r[11] == "") == (r[0].strip("| ") == "poisson3d:6")
        assert r[12].strip(" |").endswith("x")
    assert "(failed)" not in text and "geometric mean" in text


def test_bench_isai_power_table(tmp_path):
    """``python -m mpsolve.bench.bench_isai_power`` on a tiny nonsymmetric problem: a row
    per side with Jacobi's, k=1's and k=2's iterations and times, the sampled residual
    and the default's choice, which follows the residual; symmetric problems are left
    out."""
    from mpsolve.bench import bench_isai_power
    from mpsolve.precond.isai import POWER_RESIDUAL

    out = tmp_path / "power.md"
    bench_isai_power.main(["--collection", "", "--problems", "convdiff2d:12,peclet=20",
                           "poisson3d:5", "--out", str(out)])
    rows = [[c.strip("| ") for c in line.split(" | ")] for line in out.read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| matrix")]
    assert [r[:2] for r in rows] == [["convdiff2d:12,peclet=20", "left"],
                                     ["convdiff2d:12,peclet=20", "right"]]
    for r in rows:
        its = [int(c.split(",")[0]) for c in r[2:5]]      # all three converge here
        assert its[2] <= its[1] <= its[0]
        assert all(float(c.split(",")[1]) >= 0 for c in r[2:5])      # seconds
        resid = float(r[5])
        assert 0.0 < resid < 1.0 and r[6] == ("2" if resid > POWER_RESIDUAL else "1")


def test_bench_localsolve_stages_runs(capsys):
    """``python -m mpsolve.bench.bench_localsolve_stages`` on a small problem: a line per
    stage with the CPU time it adds (no timing asserted)."""
    from mpsolve.bench import bench_localsolve_stages

    bench_localsolve_stages.main(["--problem", "convdiff3d:8,peclet=10", "--lanes", "8",
                                  "--groups", "2"])
    text = capsys.readouterr().out
    assert "16 systems of s = " in text             # 2 groups of 8 lanes
    assert all(stage in text for stage in bench_localsolve_stages.STAGES)


def test_results_header_says_how_petsc_was_built():
    """The bench's baseline must be PETSc's optimised build; the header says which it ran."""
    from mpsolve.bench.baselines import describe_petsc_build, petsc_build

    opt = ("CC_FLAGS =  -fPIC -Wall -fvisibility=hidden -O3 -march=native\n"
           "CONFIGURE_OPTIONS = --prefix=/x --with-debugging=0 COPTFLAGS='-O3 -march=native'\n")
    dbg = "CC_FLAGS =  -fPIC -Wall -g -O\nCONFIGURE_OPTIONS = --prefix=/x\n"
    assert describe_petsc_build(opt) == "-O3 -march=native, debugging off"
    assert describe_petsc_build(dbg) == "-g -O, debugging on"       # PETSc's default: on
    assert isinstance(petsc_build(), str) and petsc_build()


# ---------------------------------------------------------------- memory traffic (issue 14)
def test_iteration_bytes_model():
    """The bytes an iteration must move, counted by hand for small cases."""
    import math

    from mpsolve.bench.suite import iteration_bytes

    n, nnz = 100, 500
    r = _run("p", "mpsolve", "cg", "jacobi", "mixed", 1.0)
    r.precond_nbytes = 400                              # FP32 inverse diagonal
    a = nnz * (8 + 4) + (n + 1) * 4 + 2 * n * 8         # FP64 A, its x in and y out
    m = 400 + 2 * n * 8                                 # M's storage, r in and z out
    assert iteration_bytes(r) == a + m + 14 * n * 8
    r = _run("p", "mpsolve", "bicgstab", "none", "single", 1.0)
    a = nnz * (4 + 4) + (n + 1) * 4 + 2 * n * 4
    assert iteration_bytes(r) == 2 * a + 20 * n * 4
    g = _run("p", "mpsolve", "gmres", "none", "mixed", 1.0)
    cb = _run("p", "mpsolve", "gmres", "none", "mixed-cb", 1.0)
    assert iteration_bytes(g, restart=30) - iteration_bytes(cb, restart=30) == 31 * n * 4
    ir = _run("p", "mpsolve", "cg", "none", "ir", 1.0)  # the inner FP32 iterations
    assert iteration_bytes(ir) == nnz * 8 + (n + 1) * 4 + 2 * n * 4 + 12 * n * 4
    sor = _run("p", "petsc", "cg", "sor", "double", 1.0)
    assert iteration_bytes(sor) == (3 * (nnz * 12 + (n + 1) * 4) + 2 * 2 * n * 8
                                    + 14 * n * 8)
    assert math.isnan(iteration_bytes(_run("p", "petsc", "cg", "mpsolve", "double", 1.0)))


def test_bandwidth_columns_in_results_md(tmp_path):
    from mpsolve.bench.report import write_markdown
    from mpsolve.bench.suite import iteration_bytes

    r = _run("p", "mpsolve", "cg", "none", "double", 0.5)
    r.bytes_per_iteration = iteration_bytes(r)
    q = _run("p", "petsc", "cg", "mpsolve", "double", 0.5)      # storage unknown
    q.bytes_per_iteration = iteration_bytes(q)
    meta = dict(command="x", machine="m", python="3", versions={}, rtol=1e-8,
                stream_bytes_per_s=1e9)
    write_markdown([r, q], tmp_path / "r.md", meta)
    text = (tmp_path / "r.md").read_text()
    assert "| GB/s | % stream |" in text and "1.0 GB/s" in text
    gbs = r.bytes_per_iteration * 10 / 0.5 / 1e9          # 10 iterations in 0.5 s
    assert f"| {gbs:.1f} | {100 * gbs:.0f} |" in text
    assert "| - | - |" in text


def test_stream_bandwidth_measured_once(monkeypatch):
    """The bookkeeping, not the machine's speed: under a clock that advances by exactly
    0.25 s a read, each pass of ``a = b + c`` takes 0.25 s, so the figure is the three
    FP64 vectors' bytes over 0.25 s; a second call returns the cached figure without
    measuring again."""
    from mpsolve.bench import suite

    ticks = iter(range(10**6))
    monkeypatch.setattr(suite, "_STREAM", {})
    monkeypatch.setattr(suite.time, "perf_counter", lambda: 0.25 * next(ticks))
    n = 1 << 12
    bw = suite.stream_bandwidth(n=n, repeat=3)
    assert bw == 3 * 8 * n / 0.25
    reads = next(ticks)
    assert suite.stream_bandwidth(n=n, repeat=3) is bw          # cached for the run
    assert next(ticks) == reads + 1                              # the clock was not read


def test_bench_solver_report_table():
    import argparse as ap

    from mpsolve.bench.bench_solver import report

    row = dict(name="m", n=10, nnz=28, method="cg", precond="jacobi", pc="jacobi", its=5,
               kits=5, ok=True, kok=True, fresh=4e-3, solver=2e-3, ksp=1e-3, solver0=5e-5,
               ksp0=2.5e-5)
    bad = dict(name="w", n=10, nnz=28, method="gmres", precond="ilu0", pc="ilu",
               error="ZeroPivotError: ...")
    args = ap.Namespace(max_n=2000, rtol=1e-8, repeat=5)
    text = report([row, bad], args, "PETSc x", 1.0)
    assert "| m | 10 | 28 | cg + jacobi (jacobi) | 5 / 5 | 4.000 | 2.000 | 1.000 | 2.00 | " \
           "2.00 | 50.0 | 25.0 | 2.00 |" in text
    assert "Solver.solve / KSPSolve **2.00**" in text and "ZeroPivotError" in text


def test_eft_ablation_switch_reaches_both_ends():
    """``bench_eft_ablation``'s role switch (issue 15's measurement): with no role
    compensated a BiCGSTAB solve is the ``eft`` preset's with ``dot="native"``, with every
    role it is the ``eft`` preset's (every reduction Dot2), on a system where the two take
    different iteration counts -- so the roles in between are the switch's doing."""
    from dataclasses import replace

    import numpy as np

    from mpsolve import Precision
    from mpsolve.bench.bench_accuracy import int_convdiff
    from mpsolve.bench.bench_eft_ablation import ROLES, Switch, run

    A = int_convdiff(8, 1e7)
    b = A @ np.arange(A.shape[0], dtype=float)
    native_policy = replace(Precision.preset("eft"), name="eft-native", dot="native")
    dot2 = run(A, b, "bicgstab", "eft", 1e-10).iterations
    native = run(A, b, "bicgstab", native_policy, 1e-10).iterations
    assert dot2 != native
    assert run(A, b, "bicgstab", "eft", 1e-10, Switch(ROLES["bicgstab"])).iterations == dot2
    assert run(A, b, "bicgstab", "eft", 1e-10, Switch(())).iterations == native


# ------------------------------------------------------- PETSc's best over rank counts
def test_petsc_best_is_the_faster_rank_count():
    """The suite's "best" and reference runs take the faster of PETSc's rank counts; a
    faster run that failed never counts; configs name the ranks."""
    from mpsolve.bench.report import best, reference_run

    one = _run("p", "petsc", "gmres", "bjacobi", "double", 0.4)
    two = _run("p", "petsc", "gmres", "bjacobi", "double", 0.3)
    two.ranks = 2
    bad = _run("p", "petsc", "gmres", "jacobi", "double", 0.01, converged=False)
    bad.ranks = 2
    assert best([one, two, bad], "petsc", "p") is two
    assert reference_run([one, two, bad], "petsc", "p") is two
    two.solve_time = 0.5
    assert best([one, two, bad], "petsc", "p") is one
    assert reference_run([two, one], "petsc", "p") is one
    two.converged = one.converged = False
    assert reference_run([two, one], "petsc", "p") is two        # none converged: the first
    assert two.config == "gmres/bjacobi+ilu x2/double" and one.config == "gmres/bjacobi/double"
    icc = _run("p", "petsc", "cg", "icc", "double", 0.1)
    icc.ranks = 2
    assert icc.label == "petsc:cg/bjacobi+icc x2/double"


def test_coverage_best_of_picks_the_faster_solved_candidate():
    from mpsolve.bench import coverage

    def cand(t, ranks, solved=True):
        return dict(solved=solved, iterations=5, seconds=t, config=f"c{ranks}", ranks=ranks)

    assert coverage.best_of([cand(0.2, 1), cand(0.1, 2)])["ranks"] == 2
    assert coverage.best_of([cand(0.2, 1), cand(0.3, 2)])["ranks"] == 1
    assert coverage.best_of([cand(0.2, 1), cand(0.01, 2, solved=False)])["ranks"] == 1
    none = coverage.best_of([cand(0.01, 2, solved=False)])
    assert not none["solved"] and none["config"] == "-"
    assert not coverage.best_of([])["solved"]


def test_coverage_table_ratio_column_and_long_solve_summary():
    """The table gives each row's auto / PETSc ratio (only where both solve), times to
    three significant digits, and the geometric mean over all and over long solves."""
    from mpsolve.bench import coverage

    def res(t, solved=True):
        return dict(solved=solved, iterations=3, seconds=t, config="cfg")

    table = [("small", 10, 30, res(0.00024), res(0.0002), res(0.00006), res(0.001)),
             ("large", 99, 300, res(0.5), res(0.5), res(1.0), res(2.0)),
             ("unsolved", 5, 9, res(0.1), res(0.1), res(0.1, solved=False), res(0.1))]
    md = coverage._markdown(table, True)
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in md.splitlines()
            if line.startswith("| ") and not line.startswith("| matrix")}
    assert rows["small"][5] == "0.00024" and rows["small"][15] == "4.00"
    assert rows["large"][15] == "0.50" and rows["unsolved"][15] == ""
    assert "geometric mean of auto's time / PETSc's best time = 1.41." in md
    assert "Of those, the 1 where PETSc's best takes at least 10 ms" in md
    assert "geometric mean 0.50." in md


def test_coverage_petsc_best_takes_parallel_results(monkeypatch):
    """run_petsc_best: the serial configurations and the worker's results on more ranks
    in one comparison (a failed worker job is left out)."""
    import numpy as np

    from mpsolve.bench import baselines, coverage

    def fake_solve(A, b, method, pc, **kw):
        return dict(true_residual=1e-9, iterations=7, setup_time=0.1, solve_time=0.1)

    monkeypatch.setattr(baselines, "petsc_solve", fake_solve)
    par = [dict(status="ok", method="cg", pc="icc", ranks=2, true_residual=1e-9,
                iterations=9, setup_time=0.05, solve_time=0.05),
           dict(status="error: x", method="cg", pc="jacobi", ranks=2, true_residual=float("nan"),
                iterations=0, setup_time=float("nan"), solve_time=float("nan"))]
    A, b = np.eye(2), np.ones(2)
    got = coverage.run_petsc_best(A, b, True, 10.0, par)
    assert got["config"] == "cg + bjacobi+icc x2" and got["ranks"] == 2 and got["solved"]
    par[0]["solve_time"] = 1.0
    got = coverage.run_petsc_best(A, b, True, 10.0, par)
    assert got["ranks"] == 1 and got["seconds"] == pytest.approx(0.2)
    got = coverage.run_petsc_best(A, b, True, 10.0, par, serial=False)
    assert got["ranks"] == 2                             # only the parallel results


def test_results_header_names_ranks_threads_and_mpiexec_trouble():
    from mpsolve.bench.report import parallel_line

    line = parallel_line(dict(mpsolve_threads=2, petsc_ranks=[1, 2], petsc_mpi_notes=[]))
    assert "mpsolve used 2 threads" in line and "PETSc ran on 1 and 2 MPI ranks" in line
    line = parallel_line(dict(mpsolve_threads=2, petsc_ranks=[1],
                              petsc_mpi_notes=["mpiexec not found: PETSc ran with 1 rank only"]))
    assert "PETSc ran on 1 MPI rank " in line and "**Note: mpiexec not found" in line
    assert "before the rank counts were recorded" in parallel_line({})


def test_default_rank_counts():
    from mpsolve.bench.petsc_mpi import default_ranks, pc_label

    assert default_ranks(1) == [1] and default_ranks(2) == [1, 2] and default_ranks(16) == [1, 2]
    assert pc_label("ilu", 1) == "ilu" and pc_label("ilu", 4) == "bjacobi+ilu x4"
    assert pc_label("sor", 2) == "local ssor x2" and pc_label("jacobi", 2) == "jacobi x2"


def test_collection_errors_name_the_folder_and_the_unknown_matrices(tmp_path, monkeypatch):
    from mpsolve.matrices import poisson2d, write_mtx

    suite, args = _args("--collection", str(tmp_path))
    with pytest.raises(ValueError, match="no matrices there"):
        suite._load_problems(args)
    (tmp_path / "ab").mkdir()
    write_mtx(tmp_path / "ab" / "ab.mtx", poisson2d(3))      # an extracted tarball
    assert [n for n, _, _ in suite._load_problems(args)] == ["ab"]
    suite, args = _args("--collection", str(tmp_path), "--matrices", "ab", "zz")
    with pytest.raises(ValueError, match=r"--matrices zz: not in .*its 1 matrices: ab"):
        suite._load_problems(args)
    suite, args = _args("--collection", str(tmp_path / "none"))
    with pytest.raises(ValueError, match="no such folder"):
        suite._load_problems(args)
    # through the command line: an error line and exit status 2, as its other user errors
    # (these exited 1 through SystemExit)
    from mpsolve.cli import main

    assert main(["bench", "--collection", str(tmp_path / "none"), "--out",
                 str(tmp_path / "o")]) == 2
    # --matrices alone: from the collection found by default
    monkeypatch.setenv("MPSOLVE_MATRIX_PATH", str(tmp_path))
    suite, args = _args("--matrices", "ab")
    assert [n for n, _, _ in suite._load_problems(args)] == ["ab"]


def test_the_suites_spd_families_are_the_hermitian_positive_definite_ones():
    """``mpsolve bench`` runs CG and ICC on a generated problem by its family: the list
    must name exactly the families whose matrices are Hermitian positive definite (jump3d
    was left out, so the bench skipped CG on it)."""
    import numpy as np

    from mpsolve.bench.suite import SPD_FAMILIES
    from mpsolve.matrices import GENERATORS, generate

    small = {"laplacian1d": 40, "elasticity3d": 3}
    for family in GENERATORS:
        A = generate(f"{family}:{small.get(family, 6)}").toarray()
        hpd = np.allclose(A, A.conj().T) and np.linalg.eigvalsh(A).min() > 0
        assert (family in SPD_FAMILIES) == hpd, family


def test_the_summary_names_no_reference_run_that_was_not_made():
    """With PETSc's Jacobi only (no bjacobi run), the summary gives the best-vs-best line
    and no line naming PETSc's GMRES + bjacobi (it used to, over the best run)."""
    from mpsolve.bench.report import REFERENCE, _summary_lines

    runs = [_run("p", "mpsolve", "cg", "ilu0", "mixed", 0.1),
            _run("p", "petsc", "cg", "jacobi", "double", 0.2),
            _run("p", "scipy", "gmres", "spilu", "double", 0.3)]
    lines = _summary_lines(runs, REFERENCE)
    assert not any("bjacobi" in ln for ln in lines)
    assert any("petsc's best run" in ln for ln in lines)
    assert any("spilu" in ln for ln in lines)          # SciPy's reference run exists


@pytest.mark.parametrize("argv", [["--maxiter", "0"], ["--maxiter", "-5"], ["--rtol", "-1"],
                                  ["--time-limit", "-1"], ["--restart", "0"],
                                  ["--block-size", "-2"], ["--rtol", "nan"]])
def test_bench_options_out_of_range_are_refused_by_the_parser(argv, capsys):
    from mpsolve.bench import suite

    p = argparse.ArgumentParser()
    suite.add_arguments(p)
    with pytest.raises(SystemExit):
        p.parse_args(argv)
    err = capsys.readouterr().err
    assert f"argument {argv[0]}:" in err and ("positive" in err or ">= 1" in err)


@pytest.mark.parametrize("argv,word", [(["--coverage", "--rtol", "1e-6"], "--rtol"),
                                       (["--coverage", "--methods", "cg"], "--methods"),
                                       (["--petsc-preconds", "nosuchpc"], "nosuchpc")])
def test_bench_options_that_would_be_ignored_are_refused(argv, word, tmp_path):
    """--coverage's table has a fixed tolerance and candidates (it ignored --rtol and the
    others silently); an unknown PETSc PC is named before anything runs."""
    from mpsolve.bench import suite

    if word == "nosuchpc":
        pytest.importorskip("petsc4py")
    p = argparse.ArgumentParser()
    suite.add_arguments(p)
    args = p.parse_args(argv + ["--out", str(tmp_path)])
    with pytest.raises(ValueError, match=word):
        suite.main(args)


def test_scipy_spilu_runs_gmres_on_spd_problems_and_results_json_is_strict(tmp_path):
    """SciPy's ``spilu`` is not symmetric: CG with it stalled (poisson3d:24 at 2e-2 until
    the time limit) and stood as SciPy's reference; on SPD problems its GMRES runs
    instead (CG keeps Jacobi).  ``results.json`` is strict JSON (a failed run's NaN
    written null) and reads back into the same tables."""
    suite, args = _args("--problems", "poisson2d:12", "convdiff2d:12", "--baselines", "scipy",
                        "--preconds", "jacobi", "--precisions", "double", "--no-plots",
                        "--out", str(tmp_path), "--repeat", "1")
    runs = suite.run_suite(args, progress=False)
    scipy_runs = {(r.problem, r.method, r.precond) for r in runs if r.solver == "scipy"}
    assert ("poisson2d:12", "gmres", "spilu") in scipy_runs
    assert ("poisson2d:12", "cg", "jacobi") in scipy_runs
    assert not any(m == "cg" and pc == "spilu" for _, m, pc in scipy_runs)
    runs[0].true_residual = float("nan")
    meta = dict(command="x", machine="m", python="3", versions={}, rtol=1e-8,
                stream_bytes_per_s=float("nan"))
    suite.write_json(tmp_path / "results.json", meta, runs)

    def refuse(word):
        raise ValueError(word)

    data = json.loads((tmp_path / "results.json").read_text(), parse_constant=refuse)
    assert data["runs"][0]["true_residual"] is None
    args.rebuild = True
    assert suite.main(args) == 0
    text = (tmp_path / "results.md").read_text()
    assert "| nan |" in text and "poisson2d:12" in text


def test_the_warm_up_compiles_the_timed_runs_callback_path(monkeypatch):
    """The timed run passes a periodic callback (the time limit), which takes its own
    compiled loop: the warm-up must take the same one, else the first timed run of each
    configuration paid its compilation (poisson3d:24 CG + Jacobi 44 ms, then 9 ms)."""
    import types

    import mpsolve
    from mpsolve.bench import suite
    from mpsolve.matrices import generate

    seen = []

    def spy(*a, **kw):
        seen.append(kw)
        raise RuntimeError("recorded")                # (the warm-up swallows errors)

    monkeypatch.setattr(mpsolve, "solve", spy)
    monkeypatch.setattr(suite, "_WARM", set())
    args = types.SimpleNamespace(block_size=None, sparsity_power=None, gmres_side="right",
                                 restart=30)
    for method in ("cg", "gmres"):
        suite._warm_up(generate("poisson2d:6"), method, "mixed", "jacobi", args)
    assert len(seen) == 2
    for kw in seen:
        assert getattr(kw.get("callback"), "period", None) == suite.DEADLINE_PERIOD
    assert seen[1]["restart"] == 30 and seen[1]["side"] == "right"


# ------------------------------------------------------------ the stop-50 sweep's findings
def test_the_summary_counts_mpsolves_failures_too():
    """A problem SciPy solved and no run of mpsolve's did is counted (it was dropped: the
    summary spoke of the baseline's failures only), and with no problem both solved the
    sentence says so (the lines vanished, or read "nanx")."""
    from mpsolve.bench.report import _summary_lines

    runs = [_run("p1", "mpsolve", "cg", "jacobi", "double", 0.01),
            _run("p1", "scipy", "cg", "jacobi", "-", 0.02),
            _run("p2", "mpsolve", "cg", "jacobi", "double", 0.01, converged=False),
            _run("p2", "scipy", "cg", "jacobi", "-", 0.02)]
    line, = [ln for ln in _summary_lines(runs, None, bold="") if "scipy's best" in ln]
    assert "2.00x over the 1 problems both solved" in line
    assert "on 1 the scipy run solved and no run of mpsolve's did" in line
    line, = [ln for ln in _summary_lines(runs[2:], None, bold="") if "scipy's best" in ln]
    assert "no problem solved by both" in line and "nan" not in line


def test_a_collection_without_manifest_decides_spd_and_skips_a_damaged_file(tmp_path):
    """No MANIFEST.tsv: SPD is decided from the matrix (every matrix was taken as
    nonsymmetric: CG never ran); a damaged file is skipped, said, and the rest run (the
    listing raised and nothing ran)."""
    import warnings

    from mpsolve.bench import suite
    from mpsolve.matrices import convection_diffusion2d, poisson2d, write_mtx

    write_mtx(str(tmp_path / "spd.mtx"), poisson2d(4))
    write_mtx(str(tmp_path / "nonsym.mtx"), convection_diffusion2d(4, peclet=10))
    (tmp_path / "broken.mtx.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    args = argparse.Namespace(collection=str(tmp_path), matrices=None, problems=[],
                              quick=False, full=False)
    notes = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = suite._load_problems(args, notes.append)
    assert [(n, spd) for n, _, spd in got] == [("nonsym", False), ("spd", True)]
    assert any("broken" in str(w.message) for w in caught)


def test_coverage_refuses_the_suites_options_and_records_the_users_command(monkeypatch,
                                                                           capsys):
    """``--coverage`` ignored --device gpu (it ran the CPU table), --quick, --baselines
    ... silently; the command it recorded was another program's."""
    from mpsolve.bench import suite
    from mpsolve.cli import main

    for opt in (["--device", "gpu"], ["--quick"], ["--gmres-side", "left"],
                ["--baselines", "scipy"]):
        assert main(["bench", "--coverage", *opt]) == 2
        assert f"--coverage: {opt[0]} do(es) not apply" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["/usr/bin/mpsolve", "bench", "--out", "a b"])
    assert suite._command_line() == "mpsolve bench --out 'a b'"


def test_petsc_is_not_available_where_its_library_does_not_load(monkeypatch):
    """petsc4py imports, its PETSc module does not (a missing libpetsc): no PETSc baseline
    (its runs were recorded as PETSc's failures, and counted as mpsolve's wins)."""
    import types

    from mpsolve.bench.baselines import petsc_available

    fake = types.ModuleType("petsc4py")
    fake.__path__ = []
    monkeypatch.setitem(sys.modules, "petsc4py", fake)
    monkeypatch.setitem(sys.modules, "petsc4py.PETSc", None)    # import raises ImportError
    assert petsc_available() is False


def test_the_suite_skips_a_matrix_file_it_cannot_read(tmp_path):
    """A header that reads and a body that does not: the suite says so and runs the rest."""
    from mpsolve.bench import suite
    from mpsolve.matrices import poisson2d, write_mtx

    write_mtx(str(tmp_path / "good.mtx"), poisson2d(4))
    (tmp_path / "badbody.mtx").write_text("%%MatrixMarket matrix coordinate real general\n"
                                          "2 2 2\n1 1 x\n2 2 1\n")
    args = argparse.Namespace(collection=str(tmp_path), matrices=None, problems=[],
                              quick=False, full=False)
    notes = []
    got = suite._load_problems(args, notes.append)
    assert [n for n, _, _ in got] == ["good"]
    assert any("badbody skipped" in n for n in notes)


def test_spd_like_takes_hermitian_not_complex_symmetric():
    import numpy as np
    import scipy.sparse as sp

    from mpsolve.bench.common import spd_like

    H = sp.csr_matrix(np.array([[4.0, 1 + 1j], [1 - 1j, 3.0]]))
    S = sp.csr_matrix(np.array([[4.0, 1 + 1j], [1 + 1j, 3.0]]))
    assert spd_like(H) and not spd_like(S)
    assert spd_like(sp.csr_matrix(np.array([[2.0, -1.0], [-1.0, 2.0]])))
