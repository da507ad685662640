"""The coverage table runner (bench/coverage.py): one small matrix end to end, and totals."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import COLLECTION


def test_coverage_table_for_one_matrix(tmp_path):
    pytest.importorskip("rich")
    from mpsolve.bench import coverage

    if not (COLLECTION / "west0479.mtx.gz").exists():
        pytest.skip("no west0479 in the test collection")
    out = tmp_path / "coverage.md"
    assert coverage.main(["--collection", str(COLLECTION), "--only", "west0479",
                          "--no-generated", "--out", str(out), "--time-limit", "20"]) == 0
    text = out.read_text()
    row = next(ln for ln in text.splitlines() if ln.startswith("| west0479 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "yes" and "ilut+mc64" in cells[6]       # auto solves it
    assert "Solved: mpsolve auto 1 of 1" in text


def test_markdown_totals_and_geometric_mean():
    from mpsolve.bench import coverage

    yes = lambda t: dict(solved=True, iterations=10, seconds=t, config="c")   # noqa: E731
    no = dict(solved=False, iterations=0, seconds=float("nan"), config="-")
    # columns: name, n, nnz, auto, own best, PETSc's best, SciPy's best
    table = [("a", 1, 1, yes(2.0), yes(1.0), yes(1.0), no),
             ("b", 1, 1, yes(1.0), yes(0.5), yes(4.0), yes(1.0)),
             ("c", 1, 1, no, yes(3.0), no, no)]
    text = coverage._markdown(table, True)
    assert ("mpsolve auto 2 of 3, mpsolve's own best hand-picked 3 of 3, PETSc's best 2 of 3, "
            "SciPy's best 1 of 3") in text
    assert f"PETSc's best time = {np.sqrt(2.0 * 0.25):.2f}" in text
    assert f"own best hand-picked time = {2.0:.2f}; within 1.5x on 0 of 2" in text


def test_fastest_repeats_only_short_runs(monkeypatch):
    from mpsolve.bench import coverage

    clock = iter([0.0, 0.5, 1.0, 1.25, 2.0, 2.875, 10.0, 12.0, 12.0, 13.5])
    monkeypatch.setattr(coverage.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(coverage, "_REPEAT", [3])
    calls = []
    out, t = coverage._fastest(lambda: calls.append(1) or len(calls))
    assert (out, t, len(calls)) == (2, 0.25, 3)         # 0.5, 0.25, 0.875 s: fastest kept
    calls.clear()
    out, t = coverage._fastest(lambda: calls.append(1) or len(calls))
    assert (out, t, len(calls)) == (2, 1.5, 2)          # 2 s (a compile?) once more, then no
    own = iter([("a", 0.5), ("b", 0.125), ("c", 1.5)])  # runs that time themselves
    monkeypatch.setattr(coverage.time, "perf_counter", lambda: 0.0)
    assert coverage._fastest(lambda: next(own), own_clock=True) == ("b", 0.125)
    own = iter([("a", 3.0), ("b", 0.1), ("c", 0.2)])
    assert coverage._fastest(lambda: next(own), own_clock=True) == ("b", 0.1)  # 3 s, then short
    own = iter([("a", 3.0), ("b", 2.5), ("c", 0.2)])
    assert coverage._fastest(lambda: next(own), own_clock=True) == ("b", 2.5)  # two long: stop
    monkeypatch.setattr(coverage, "_REPEAT", [1])
    own = iter([("a", 3.0), ("b", 0.1)])
    assert coverage._fastest(lambda: next(own), own_clock=True) == ("a", 3.0)  # --repeat 1


@pytest.mark.mpi
def test_coverage_petsc_best_on_two_ranks(tmp_path):
    """``--petsc-ranks 2``: PETSc's column holds only its runs under ``mpiexec -n 2``
    (one launch for the table), named as they ran there; the header says so."""
    pytest.importorskip("petsc4py")
    import shutil

    from mpsolve.bench import coverage

    if shutil.which("mpiexec") is None:
        pytest.skip("mpiexec not found")
    if not (COLLECTION / "nos3.mtx.gz").exists():
        pytest.skip("no nos3 in the test collection")
    out = tmp_path / "coverage.md"
    assert coverage.main(["--collection", str(COLLECTION), "--only", "nos3", "--no-generated",
                          "--out", str(out), "--time-limit", "20", "--repeat", "1",
                          "--petsc-ranks", "2"]) == 0
    text = out.read_text()
    assert "PETSc ran on 2 MPI ranks" in text and "mpsolve used" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| nos3 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[11] == "yes" and cells[14].endswith(" x2"), cells     # SPD: CG solves it
    assert "Note:" not in text


def test_coverage_refuses_unknown_matrices_and_says_what_ran(tmp_path, capsys):
    from mpsolve.bench import coverage
    from mpsolve.matrices import write_mtx

    (tmp_path / "m").mkdir()
    with pytest.raises(SystemExit):
        coverage.main(["--collection", str(tmp_path / "m"), "--out", str(tmp_path)])
    assert "no matrices there" in capsys.readouterr().err
    write_mtx(tmp_path / "m" / "tri.mtx", sp.diags_array([-1.0, 3.0, -1.0], offsets=[-1, 0, 1],
                                                         shape=(30, 30)))
    with pytest.raises(SystemExit):
        coverage.main(["--collection", str(tmp_path / "m"), "--only", "tri", "nosuch"])
    assert "--only nosuch: neither in the collection" in capsys.readouterr().err
    argv = ["--collection", str(tmp_path / "m"), "--no-generated", "--out", str(tmp_path),
            "--repeat", "1", "--petsc-ranks", "1", "--time-limit", "5"]
    assert coverage.main(argv) == 0
    text = (tmp_path / "coverage.md").read_text()
    assert f"Command: `python -m mpsolve.bench.coverage {' '.join(argv)}`" in text
    assert f"Matrices: {tmp_path / 'm'}." in text and "| tri | 30 |" in text
