"""The ``mpsolve`` command line."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from mpsolve.cli import main
from mpsolve.matrices import convection_diffusion2d, read_vector, write_mtx


def run(*args):
    return subprocess.run([sys.executable, "-m", "mpsolve.cli", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("cmd", [[], ["solve"], ["info"], ["bench"]])
def test_help_everywhere(cmd):
    p = run(*cmd, "--help")
    assert p.returncode == 0
    assert "usage: mpsolve" in p.stdout


def test_solve_a_file_and_write_x(tmp_path, capsys):
    A = convection_diffusion2d(20, peclet=10)
    f = tmp_path / "A.mtx"
    write_mtx(f, A)
    xtrue = np.linspace(1, 2, A.shape[0])
    write_mtx(tmp_path / "b.mtx", A @ xtrue)
    rc = main(["solve", str(f), "--rhs", str(tmp_path / "b.mtx"), "--method", "bicgstab",
               "--precond", "jacobi", "--precision", "mixed-eft", "--rtol", "1e-10",
               "--out", str(tmp_path / "x.mtx")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "converged" in out and "mixed-eft" in out and "true rel. residual" in out
    # Numba's start-up is reported on its own line, before (and outside) the solve's times
    assert out.index("start-up") < out.index("setup ")
    x = read_vector(tmp_path / "x.mtx")
    assert np.linalg.norm(A @ x - A @ xtrue) <= 1e-10 * np.linalg.norm(A @ xtrue)


def test_solve_a_suitesparse_mat_file_and_an_extracted_tarball(tmp_path, capsys):
    import scipy.io
    import scipy.sparse as sp

    A = convection_diffusion2d(12, peclet=10)
    scipy.io.savemat(tmp_path / "cd.mat", {"Problem": {"A": sp.csc_matrix(A), "name": "cd"}})
    (tmp_path / "cd").mkdir()
    write_mtx(tmp_path / "cd" / "cd.mtx.gz", A)
    for path in (tmp_path / "cd.mat", tmp_path / "cd"):
        assert main(["solve", str(path), "--rtol", "1e-10"]) == 0
        out = capsys.readouterr().out
        assert "converged" in out and "(144 x 144, 672 nonzeros)" in out
    # SuiteSparse's .mat carries b too: --rhs reads it; .npy in and out
    xtrue = np.linspace(1, 2, 144)
    scipy.io.savemat(tmp_path / "cdb.mat", {"Problem": {"A": sp.csc_matrix(A), "b": A @ xtrue}})
    assert main(["solve", str(tmp_path / "cdb.mat"), "--rhs", str(tmp_path / "cdb.mat"),
                 "--rtol", "1e-12", "--out", str(tmp_path / "x.npy")]) == 0
    assert np.abs(np.load(tmp_path / "x.npy") - xtrue).max() < 1e-9
    np.save(tmp_path / "B.npy", np.c_[A @ xtrue, 2 * (A @ xtrue)])
    assert main(["solve", str(tmp_path / "cd.mat"), "--rhs", str(tmp_path / "B.npy"),
                 "--rtol", "1e-12", "--out", str(tmp_path / "X.npy")]) == 0
    assert np.abs(np.load(tmp_path / "X.npy") - np.c_[xtrue, 2 * xtrue]).max() < 1e-9
    capsys.readouterr()
    np.save(tmp_path / "bad.npy", np.zeros((144, 2, 2)))
    assert main(["solve", str(tmp_path / "cd.mat"), "--rhs", str(tmp_path / "bad.npy")]) == 2
    assert "holds a 3-D float64 array" in capsys.readouterr().err
    assert main(["info", str(tmp_path / "cd.mat")]) == 0
    assert "144" in capsys.readouterr().out
    assert main(["solve", str(tmp_path / "missing.mat")]) == 2
    assert "missing.mat: no such file" in capsys.readouterr().err


def test_several_right_hand_sides_from_a_file(tmp_path, capsys):
    """An n x k --rhs solves k systems together and --out writes the n x k solution; a 1 x n
    row is one right-hand side; a file with another row count names both shapes."""
    from mpsolve.matrices import read_mtx

    A = convection_diffusion2d(12, peclet=10)
    n = A.shape[0]
    f = tmp_path / "A.mtx"
    write_mtx(f, A)
    X = np.stack([np.linspace(1, 2, n), np.cos(np.arange(n)), np.ones(n)], axis=1)
    write_mtx(tmp_path / "B.mtx", A @ X)
    rc = main(["solve", str(f), "--rhs", str(tmp_path / "B.mtx"), "--rtol", "1e-10",
               "--out", str(tmp_path / "X.mtx")])
    out = capsys.readouterr().out
    assert rc == 0 and "(3 right-hand sides)" in out and "3 of 3" in out
    got = np.asarray(read_mtx(tmp_path / "X.mtx").todense())
    assert got.shape == (n, 3)
    res = np.linalg.norm(A @ got - A @ X, axis=0) / np.linalg.norm(A @ X, axis=0)
    assert res.max() <= 1e-10
    write_mtx(tmp_path / "row.mtx", (A @ X[:, 0]).reshape(1, -1))
    assert main(["solve", str(f), "--rhs", str(tmp_path / "row.mtx"), "--rtol", "1e-10",
                 "--out", str(tmp_path / "x.mtx")]) == 0
    x = read_vector(tmp_path / "x.mtx")
    assert np.linalg.norm(A @ x - A @ X[:, 0]) <= 1e-10 * np.linalg.norm(A @ X[:, 0])
    write_mtx(tmp_path / "short.mtx", np.ones((n - 1, 2)))
    capsys.readouterr()
    assert main(["solve", str(f), "--rhs", str(tmp_path / "short.mtx")]) == 2
    assert f"holds a {n - 1} x 2 array, but A is {n} x {n}" in capsys.readouterr().err
    np.save(tmp_path / "long.npy", np.ones(n + 1))
    assert main(["solve", str(f), "--rhs", str(tmp_path / "long.npy")]) == 2
    assert f"holds a vector of {n + 1} entries, but A is {n} x {n}" in capsys.readouterr().err


def test_solve_generator_spec_nonconverged_exit_status(capsys):
    rc = main(["solve", "poisson2d:30", "--method", "cg", "--maxiter", "3", "--rtol", "1e-12"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "not converged" in out


def test_solve_with_preconditioner_options(capsys):
    rc = main(["solve", "elasticity3d:5", "--method", "cg", "--precond", "block-isai",
               "--block-size", "3", "--sparsity-power", "1", "--rtol", "1e-8"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "block-isai" in out


@pytest.mark.parametrize("args, opt", [
    (["--block-size", "3"], "--block-size"),                      # auto takes no options
    (["--precond", "none", "--variant", "spd"], "--variant"),
    (["--precond", "ilu0", "--sparsity-power", "2"], "--sparsity-power"),
    (["--precond", "jacobi", "--block-size", "2"], "--block-size"),
])
def test_preconditioner_option_that_would_be_dropped_is_refused(args, opt, capsys):
    """An option the chosen preconditioner does not take is an error naming it and the
    preconditioners that do take it (it was dropped silently)."""
    assert main(["solve", "poisson2d:10", *args]) == 2
    err = capsys.readouterr().err
    assert f"{opt} does not apply" in err and "it is an option of --precond" in err


def test_info_reports_block_size_and_symmetry(capsys):
    rc = main(["info", "elasticity3d:4"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "block_size" in out and "3" in out
    assert "symmetric" in out


def test_info_reports_the_automatic_choice(tmp_path, capsys):
    """``mpsolve info`` says what ``solve(A, b)`` would try, by the solvers' own symmetry
    test: a matrix symmetric to 1e-10 relative is 'symmetric' normwise (sqrt(eps)) but
    not for the solvers, which take BiCGSTAB for it."""
    import scipy.io
    import scipy.sparse as sp

    from mpsolve.matrices import poisson2d

    assert main(["info", "poisson2d:8"]) == 0
    out = capsys.readouterr().out
    assert "auto_symmetric" in out and "auto_candidates         cg + ilu0" in out
    A = poisson2d(8).tolil()
    A[0, 1] = -1.0 + 1e-10
    scipy.io.mmwrite(tmp_path / "near.mtx", sp.csr_matrix(A))
    assert main(["info", str(tmp_path / "near.mtx")]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines()[1:])
    assert lines["symmetric"].strip() == "True" and lines["auto_symmetric"].strip() == "False"
    assert lines["auto_candidates"].startswith("bicgstab")


def test_clear_errors(tmp_path, capsys):
    bad = tmp_path / "bad.mtx"
    bad.write_text("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 q 1.0\n")
    assert main(["solve", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "line 3" in err
    assert main(["solve", "no_such_matrix_anywhere"]) == 2
    assert "no_such_matrix_anywhere" in capsys.readouterr().err
    p = run("solve", "poisson2d:10", "--method", "minres")
    assert p.returncode == 2 and "invalid choice" in p.stderr
    # a missing file is named as a missing file, not looked up in the collection
    assert main(["solve", str(tmp_path / "missing.mtx")]) == 2
    assert "missing.mtx: no such file" in capsys.readouterr().err
    # a rectangular matrix is refused as such, before the default b = A @ 1 is formed
    import scipy.io
    import scipy.sparse as sp
    rect = tmp_path / "rect.mtx"
    scipy.io.mmwrite(str(rect), sp.random(5, 7, density=0.5, random_state=1))
    assert main(["solve", str(rect)]) == 2
    assert f"A ({rect}) must be square, got shape (5, 7)" in capsys.readouterr().err
    # --out into a folder that does not exist: refused before the solve, not after it
    assert main(["solve", "poisson2d:10", "--out", str(tmp_path / "no" / "x.mtx")]) == 2
    err = capsys.readouterr()
    assert "its folder does not exist" in err.err and "converged" not in err.out



def test_damaged_compressed_files_are_an_error_line_not_a_traceback(tmp_path, capsys):
    """A truncated or corrupt ``.mtx.gz``, a ``.gz`` that is no gzip file and a truncated
    ``.npz`` raised EOFError / zlib.error / BadZipFile through ``main``: a traceback and
    exit status 1, the status of a solve that did not converge."""
    import gzip

    import scipy.sparse as sp

    from mpsolve.matrices import poisson2d

    good = tmp_path / "p.mtx"
    write_mtx(good, poisson2d(6))
    packed = gzip.compress(good.read_bytes())
    (tmp_path / "trunc.mtx.gz").write_bytes(packed[:len(packed) // 2])
    damaged = bytearray(packed)
    for k in range(20, 60):
        damaged[k] ^= 0x5A
    (tmp_path / "bad.mtx.gz").write_bytes(bytes(damaged))
    (tmp_path / "plain.mtx.gz").write_bytes(good.read_bytes())
    sp.save_npz(tmp_path / "p.npz", poisson2d(6))
    whole = (tmp_path / "p.npz").read_bytes()
    (tmp_path / "trunc.npz").write_bytes(whole[:len(whole) // 2])
    for name in ("trunc.mtx.gz", "bad.mtx.gz", "plain.mtx.gz", "trunc.npz"):
        f = str(tmp_path / name)
        for argv in (["solve", f], ["info", f], ["solve", str(good), "--rhs", f]):
            if name.endswith(".npz") and "--rhs" in argv:
                continue
            assert main(argv) == 2, (argv, capsys.readouterr())
            err = capsys.readouterr().err
            assert name in err and "Traceback" not in err, err


def test_info_device_with_a_matrix_keeps_the_device_exit_status(capsys, monkeypatch):
    """``mpsolve info --device MATRIX`` exited 0 whether a GPU was usable or not."""
    import mpsolve.backend as backend

    for usable, status in ((False, 1), (True, 0)):
        monkeypatch.setattr(backend, "gpu_report", lambda usable=usable: {"usable": usable})
        monkeypatch.setattr(backend, "format_gpu_report", lambda report: "GPU (test)")
        assert main(["info", "--device", "poisson2d:4"]) == status
        assert "poisson2d:4" in capsys.readouterr().out

def test_an_unusable_device_is_an_error_line_not_a_traceback(capsys, monkeypatch):
    """``--device gpu`` where no GPU (or no CuPy) can run: exit status 2 and the reason."""
    import mpsolve.backend as backend
    from mpsolve.backend import DeviceUnavailableError

    def unusable(device):
        raise DeviceUnavailableError(f"device={device!r} needs a CUDA GPU (test)")

    monkeypatch.setattr(backend, "_cupy", unusable)
    assert main(["solve", "poisson2d:8", "--device", "gpu"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_bench_quick_writes_json_markdown_and_plots(tmp_path):
    out = tmp_path / "bench"
    p = run("bench", "--problems", "poisson2d:20", "convdiff2d:16", "--methods", "cg", "gmres",
            "--precisions", "double", "mixed-eft", "--preconds", "jacobi", "--baselines", "scipy",
            "--scipy-preconds", "jacobi", "--out", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    runs = data["runs"]
    # poisson: cg+gmres, convdiff: gmres only (not SPD); x (2 precisions + 1 scipy)
    assert len(runs) == (2 + 1) * 3
    assert all(r["converged"] for r in runs)
    assert {r["solver"] for r in runs} == {"mpsolve", "scipy"}
    md = (out / "results.md").read_text()
    assert "| poisson2d:20 |" in md and "geometric-mean speed-up" in md
    assert (out / "profile.png").stat().st_size > 1000
    assert any(f.name.startswith("convergence_") for f in out.iterdir())


def test_bench_reports_the_set_up_stages_of_block_isai(tmp_path):
    out = tmp_path / "bench"
    p = run("bench", "--problems", "poisson2d:20", "--methods", "cg", "--precisions", "mixed",
            "--preconds", "block-isai", "jacobi", "--baselines", "scipy", "--scipy-preconds",
            "jacobi", "--no-plots", "--out", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    runs = json.loads((out / "results.json").read_text())["runs"]
    staged = {r["precond"]: r["setup_stages"] for r in runs if r["solver"] == "mpsolve"}
    assert staged["jacobi"] == {}
    stages = staged["block-isai"]
    assert {"pattern", "solve", "store"} <= set(stages)
    assert all(isinstance(v, float) and np.isfinite(v) and v >= 0 for v in stages.values())
    md = (out / "results.md").read_text()
    assert "## Preconditioner set-up by stage" in md and "| poisson2d:20 | cg | block-isai |" in md


def test_bench_records_failures_instead_of_dropping_them(tmp_path):
    out = tmp_path / "bench"
    p = run("bench", "--problems", "convdiff2d:24", "--methods", "gmres", "--precisions", "double",
            "--preconds", "none", "--baselines", "scipy", "--scipy-preconds", "none",
            "--maxiter", "5", "--restart", "5", "--no-plots", "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert len(runs) == 2 and not any(r["converged"] for r in runs)
    assert "FAILED" in (out / "results.md").read_text()


def test_bench_repeat_keeps_the_fastest_converged_run_and_never_retries_failures(monkeypatch):
    import argparse

    from mpsolve.bench import suite as bm

    p = argparse.ArgumentParser()
    bm.add_arguments(p)
    args = p.parse_args(["--problems", "poisson2d:8", "--methods", "cg", "--precisions",
                         "double", "--preconds", "jacobi", "none", "--baselines",
                         "--repeat", "3"])
    times = {"jacobi": iter([0.3, 0.1, 0.2]), "none": iter([0.5])}
    calls = []

    def fake(A, b, problem, spd, method, precision, precond, args_):
        calls.append(precond)
        t = next(times[precond])
        return bm.Run(problem=problem, n=A.shape[0], nnz=A.nnz, spd=spd, solver="mpsolve",
                      method=method, precision=precision, precond=precond, setup_time=0.0,
                      solve_time=t, converged=precond == "jacobi")

    monkeypatch.setattr(bm, "run_mpsolve", fake)
    runs = bm.run_suite(args, progress=False)
    assert calls == ["jacobi"] * 3 + ["none"]          # the failure ran once
    assert [(r.precond, r.solve_time) for r in runs] == [("jacobi", 0.1), ("none", 0.5)]


def test_bench_repeat_must_be_positive():
    p = run("bench", "--quick", "--repeat", "0", "--out", "unused")
    assert p.returncode == 2 and "argument --repeat: 0: give an integer >= 1" in p.stderr


def test_bench_coverage_writes_the_coverage_table(tmp_path):
    from conftest import COLLECTION

    if not (COLLECTION / "west0479.mtx.gz").exists():
        pytest.skip(f"no SuiteSparse collection at {COLLECTION}")
    out = tmp_path / "cov"
    p = run("bench", "--coverage", "--collection", str(COLLECTION), "--matrices", "west0479",
            "nos4", "--out", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    md = (out / "coverage.md").read_text()
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in md.splitlines()
            if line.startswith("| west0479") or line.startswith("| nos4")}
    assert set(rows) == {"west0479", "nos4"}
    assert rows["west0479"][3] == "yes" and rows["nos4"][3] == "yes"   # auto solved both
    assert "Solved: mpsolve auto 2 of 2" in md


def test_restart_with_a_method_that_has_none_is_refused():
    """``--restart`` under CG or BiCGSTAB was dropped without a word (the preconditioner
    options that do not apply are refused): now refused too, naming where it applies."""
    p = run("solve", "poisson2d:8", "--method", "cg", "--restart", "5")
    assert p.returncode == 2
    assert "--restart 5 does not apply to --method cg" in p.stderr


def test_out_and_rhs_errors_name_the_option_before_the_solve(tmp_path, capsys, monkeypatch):
    """``--out`` a folder, or a file that cannot be written: refused before the solve
    (the error came after the whole solve, naming no option); ``--rhs`` a .npz (a sparse
    matrix) or a binary file: an error line naming ``--rhs`` (not 200 bytes of zip header);
    a problem too large for memory: an error line, exit 2 (a traceback, exit 1)."""
    import mpsolve

    calls = []
    monkeypatch.setattr(mpsolve, "solve", lambda *a, **k: calls.append(1))
    assert main(["solve", "poisson2d:6", "--out", str(tmp_path)]) == 2
    assert "--out" in capsys.readouterr().err and not calls
    assert main(["solve", "poisson2d:6", "--out", str(tmp_path / "no" / "x.mtx")]) == 2
    assert "--out" in capsys.readouterr().err and not calls
    import scipy.sparse as sp

    sp.save_npz(tmp_path / "A.npz", sp.eye(36).tocsr())
    (tmp_path / "b.bin").write_bytes(b"PK\x03\x04\x00\x01binary")
    for f in ("A.npz", "b.bin"):
        assert main(["solve", "poisson2d:6", "--rhs", str(tmp_path / f)]) == 2
        err = capsys.readouterr().err
        assert "--rhs" in err and "\\x" not in err and len(err) < 300 and not calls

    def huge(*a, **k):
        raise MemoryError("Unable to allocate 603. GiB")
    monkeypatch.setattr("mpsolve.cli.load_matrix", huge)
    assert main(["info", "poisson3d:3000"]) == 2
    assert "out of memory" in capsys.readouterr().err


def test_bench_out_errors_name_the_option(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    assert main(["bench", "--quick", "--out", str(tmp_path / "f")]) == 2
    assert "--out" in capsys.readouterr().err
    assert main(["bench", "--rebuild", "--out", str(tmp_path / "none")]) == 2
    assert "--rebuild" in capsys.readouterr().err


@pytest.mark.parametrize("args, opt", [(["--rtol", "-1"], "--rtol"), (["--atol", "nan"], "--atol"),
                                       (["--maxiter", "0"], "--maxiter"),
                                       (["--restart", "x"], "--restart"),
                                       (["--precond", "block-jacobi", "--block-size", "-1"],
                                        "--block-size")])
def test_bad_numbers_name_the_option(args, opt, capsys):
    """A bad number is refused by the parser, naming the option (the solver's error named
    the Python keyword: 'rtol=-1.0', 'maxiter=0 ... (or None ...)')."""
    with pytest.raises(SystemExit) as exc:
        main(["solve", "poisson2d:5", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {opt}:" in err and "None" not in err


# ------------------------------------------------- messages and statuses (stop 50's sweep)
def _mtx(path, text):
    path.write_text(text)
    return str(path)


def test_a_block_inverse_that_overflows_is_a_clear_error(tmp_path, capsys):
    """block-jacobi on a subnormal diagonal: a FloatingPointError traceback and status 1
    (the status of "did not converge"); now a message naming the block rows, status 2."""
    f = _mtx(tmp_path / "sub.mtx", "%%MatrixMarket matrix coordinate real general\n"
             "2 2 2\n1 1 1e-320\n2 2 1\n")
    assert main(["solve", f, "--method", "gmres", "--precond", "block-jacobi"]) == 2
    err = capsys.readouterr().err
    assert "block rows 0" in err and "overflows FP64" in err and "Traceback" not in err


def test_an_overflowing_default_rhs_is_named(tmp_path, capsys):
    f = _mtx(tmp_path / "big.mtx", "%%MatrixMarket matrix coordinate real general\n"
             "2 2 3\n1 1 1e308\n1 2 1e308\n2 2 1\n")
    assert main(["solve", f]) == 2
    err = capsys.readouterr().err
    assert "default right-hand side A @ ones overflows" in err and "--rhs" in err


def test_refusals_name_the_file_and_an_empty_rhs(tmp_path, capsys):
    f = _mtx(tmp_path / "rect.mtx", "%%MatrixMarket matrix coordinate real general\n"
             "3 2 2\n1 1 1\n2 2 1\n")
    assert main(["solve", f]) == 2
    assert "rect.mtx" in capsys.readouterr().err
    g = _mtx(tmp_path / "sq.mtx", "%%MatrixMarket matrix coordinate real general\n"
             "2 2 2\n1 1 2\n2 2 3\n")
    np.save(tmp_path / "b0.npy", np.zeros((2, 0)))
    assert main(["solve", g, "--rhs", str(tmp_path / "b0.npy")]) == 2
    assert "no right-hand side" in capsys.readouterr().err


def test_gzip_files_in_capitals_and_collection_group_names(tmp_path, capsys, monkeypatch):
    """``NOS4.MTX.GZ`` is gzip data ("binary data, not a Matrix Market text file"); the
    collection's ``group/name`` form, as mpsolve.matrices.load takes it, was "no such file"."""
    import gzip

    text = ("%%MatrixMarket matrix coordinate real symmetric\n3 3 4\n1 1 4\n2 1 -1\n"
            "2 2 4\n3 3 4\n")
    (tmp_path / "SMALL.MTX.GZ").write_bytes(gzip.compress(text.encode()))
    assert main(["solve", str(tmp_path / "SMALL.MTX.GZ"), "--rtol", "1e-10"]) == 0
    from mpsolve.matrices import read_matrix, write_mtx as w

    B = read_matrix(str(tmp_path / "SMALL.MTX.GZ"))
    w(str(tmp_path / "OUT.MTX.GZ"), B)
    assert (tmp_path / "OUT.MTX.GZ").read_bytes()[:2] == b"\x1f\x8b"
    coll = tmp_path / "coll"
    (coll / "HB").mkdir(parents=True)
    (coll / "small.mtx").write_text(text)
    monkeypatch.setenv("MPSOLVE_MATRIX_PATH", str(coll))
    capsys.readouterr()
    assert main(["info", "HB/small"]) == 0
    assert main(["info", "HB/nothere"]) == 2
    assert "nor a matrix of the collection" in capsys.readouterr().err


def test_a_closed_stdout_pipe_is_not_an_error():
    """``mpsolve solve ... | head``: the reader leaving is no error message, and the
    status is the shell's for SIGPIPE (it printed "error: [Errno 32] Broken pipe", 2)."""
    code = ("import os, sys\n"
            "r, w = os.pipe(); os.close(r); os.dup2(w, 1)   # a reader that has left\n"
            "from mpsolve.cli import main\n"
            "sys.stderr.write(f'RC {main([\"solve\", \"poisson2d:20\"])}\\n')\n")
    p = subprocess.run([sys.executable, "-u", "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert "Broken pipe" not in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "RC 141" in p.stderr
