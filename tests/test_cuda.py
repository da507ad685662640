"""The CUDA backend's checks, none of which needs a GPU except the last.

* In this process: no module of ``kernels/cuda/`` but ``_intrin.py`` calls a warp shuffle,
  vote, ``syncwarp``, ``cuda.fma`` or libdevice (so the simulator's emulations and the
  hardware's ``*_rn`` are used everywhere).
* ``tests/cuda/*sim*.py``, each in its own process with ``NUMBA_ENABLE_CUDASIM=1``
  (``sim_checks.py``: every ``"gpu"`` BLAS-1/reduction kernel against the reference
  device, reproducibility, CG; the SpMV and solver files of the other kernels).
* ``tests/cuda/compile_checks.py`` in its own process, simulator off: every registered
  ``"gpu"`` kernel compiled to PTX for sm_80 and sm_90 and linked to SASS (registers, no
  spills, ``shfl.sync``, ``.rn``-only arithmetic).  The register table is printed at the
  end of the run.  Missing toolchain wheels: skipped with the reason, failed under CI=true.
* ``tests/cuda/*gpu*.py`` (marker ``gpu``): real-device checks and timings; skipped,
  with the reason, where there is no GPU.

A file of ``tests/cuda/`` runs in the process its name says: ``*sim*``, ``*compile*``,
``*gpu*`` (a file named otherwise fails ``test_every_cuda_test_file_has_a_process``).

Each subprocess runs exactly once per ``python3 -m pytest``.  The main process does not
run those files itself: ``sim_checks.py``, ``compile_checks.py`` and ``gpu_checks.py`` are
not named ``test_*`` (not collected), and a ``tests/cuda/test_*`` file skips itself at
module level, with the reason, outside its process.  (No ``conftest.py`` in ``tests/cuda``:
test modules import ``tests/conftest.py`` as ``conftest``, and a second one would shadow
it.)  The process is named to the files by ``MPSOLVE_CUDA_PROCESS`` (``sim``, ``compile``,
``gpu``).
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CUDA_PKG = ROOT / "kernels" / "cuda"
CUDA_TESTS = ROOT / "tests" / "cuda"
CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


# ============================================================ intrinsics only through _intrin

_FORBIDDEN_ATTR = re.compile(r"^(shfl\w*|ballot\w*|syncwarp|fma|activemask|vote\w*|"
                             r"all_sync|any_sync|eq_sync|match_\w+_sync)$")


def forbidden_calls(source: str, filename: str = "<src>"):
    """``(line, what)`` for each use of a warp intrinsic, ``cuda.fma`` or libdevice."""
    hits = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Attribute):
            base = node.value
            base_name = (base.id if isinstance(base, ast.Name)
                         else base.attr if isinstance(base, ast.Attribute) else "")
            if base_name == "cuda" and _FORBIDDEN_ATTR.match(node.attr):
                hits.append((node.lineno, f"cuda.{node.attr}"))
            if node.attr == "libdevice" or base_name == "libdevice":
                hits.append((node.lineno, "libdevice"))
        elif isinstance(node, ast.Name) and node.id == "libdevice":
            hits.append((node.lineno, "libdevice"))
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if "libdevice" in mod:
                hits.append((node.lineno, f"from {mod} import"))
            if mod.endswith("cuda"):
                for a in node.names:
                    if a.name == "libdevice" or _FORBIDDEN_ATTR.match(a.name):
                        hits.append((node.lineno, f"from {mod} import {a.name}"))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if "libdevice" in a.name:
                    hits.append((node.lineno, f"import {a.name}"))
    return sorted(set(hits))


def test_scanner_catches_direct_intrinsics():
    src = ("from numba import cuda\nfrom numba.cuda import libdevice\n"
           "import numba.cuda.libdevice as ld\nfrom numba.cuda import fma, shfl_down_sync\n"
           "def k(a):\n    b = cuda.shfl_down_sync(0xffffffff, a, 1)\n"
           "    c = cuda.fma(a, a, b) + numba.cuda.ballot_sync(-1, 1)\n    cuda.syncwarp()\n"
           "    return libdevice.dadd_rn(a, c)\n")
    what = {w for _, w in forbidden_calls(src)}
    assert {"cuda.shfl_down_sync", "cuda.fma", "cuda.ballot_sync", "cuda.syncwarp",
            "libdevice", "from numba.cuda import fma", "from numba.cuda import shfl_down_sync",
            "import numba.cuda.libdevice"} <= what
    assert forbidden_calls("from ._intrin import fma, shfl_down\nx = cuda.grid(1)\n") == []


def test_only_intrin_calls_warp_intrinsics_fma_libdevice():
    files = sorted(p for p in CUDA_PKG.glob("*.py") if p.name != "_intrin.py")
    assert files, CUDA_PKG
    bad = {p.name: hits for p in files
           if (hits := forbidden_calls(p.read_text(), str(p)))}
    assert not bad, ("only kernels/cuda/_intrin.py may call warp shuffles/votes, syncwarp, "
                     f"cuda.fma or libdevice; use its functions instead: {bad}")
    assert forbidden_calls((CUDA_PKG / "_intrin.py").read_text()), "the scan sees _intrin"


# ============================================================ the subprocesses

def _run(kind: str, name: str, env_extra: dict, timeout: int):
    env = dict(os.environ, MPSOLVE_CUDA_PROCESS=kind, **env_extra)
    args = ["-q", "-p", "no:cacheprovider", "-rfEs", str(CUDA_TESTS / name)]
    # The simulator runs each CUDA thread of a block as a Python thread, and its block
    # barrier (which the warp-intrinsic emulation uses) is a polling loop: with Python's
    # default 5 ms GIL switch interval every barrier costs several intervals; 0.1 ms makes
    # the simulator files ~3x faster.
    switch = 1e-4 if kind == "sim" else sys.getswitchinterval()
    cmd = [sys.executable, "-c",
           f"import sys, pytest; sys.setswitchinterval({switch!r}); "
           f"sys.exit(pytest.main({args!r}))"]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{name} ran past {timeout} s:\n{(e.stdout or '')[-4000:]}", pytrace=False)
    out = r.stdout + r.stderr
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    summary = lines[-1].strip("= ") if lines else "(no output)"
    return r.returncode, out, summary, time.perf_counter() - t0


def _check(kind, name, env_extra, timeout, table):
    rc, out, summary, secs = _run(kind, name, env_extra, timeout)
    table("CUDA checks (own processes)", ("file", "result", "wall s")).append(
        (name, summary, f"{secs:.0f}"))
    if rc != 0:
        pytest.fail(f"{name} (MPSOLVE_CUDA_PROCESS={kind}) failed: {summary}\n"
                    f"{out[-12000:]}", pytrace=False)
    if " passed" not in summary:
        reasons = re.findall(r"SKIPPED \[\d+\] [^:]+:\d+: (.*)", out) or [summary]
        pytest.skip(f"{name}: {reasons[0]}")
    return out


def _files(word):
    """The files of ``tests/cuda/`` for one process: names containing ``word``."""
    return sorted(p.name for p in CUDA_TESTS.glob("*.py")
                  if word in p.name and not p.name.startswith(("_", "conftest")))


@pytest.mark.parametrize("name", _files("sim"))
def test_simulator(name, table):
    """``tests/cuda/*sim*.py``, each in its own process under numba-cuda's simulator."""
    _check("sim", name, {"NUMBA_ENABLE_CUDASIM": "1"}, 900, table)


def test_every_cuda_test_file_has_a_process():
    names = {p.name for p in CUDA_TESTS.glob("*.py")
             if not p.name.startswith(("_", "conftest"))}
    assert "sim_checks.py" in names and "compile_checks.py" in names
    orphans = {n for n in names if not any(w in n for w in ("sim", "compile", "gpu"))}
    assert not orphans, (f"tests/cuda/{sorted(orphans)}: name them *sim*, *compile* or *gpu* "
                         "so tests/test_cuda.py runs them (in the right process)")


@pytest.mark.parametrize("name", _files("compile"))
def test_compile_ptx_sass(name, table):
    """``tests/cuda/*compile*.py`` (``compile_checks.py``: every registered kernel; the
    others: kernels with their own checks, e.g. ``DMMA`` in the Tensor Core helper's
    SASS): PTX for cc 8.0/9.0, SASS via nvJitLink, simulator off."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "registers.json")
        _check("compile", name,
               {"NUMBA_ENABLE_CUDASIM": "0", "MPSOLVE_CUDA_REPORT": report}, 900, table)
        if os.path.exists(report):
            with open(report) as f:
                rows = json.load(f)
            regs = {}
            for r in rows:
                regs.setdefault(r["kernel"], {}).setdefault(r["cc"], []).append(r["registers"])
            t = table("CUDA kernels: registers per thread (min-max over signatures), 0 spills",
                      ("kernel", "sm_80", "sm_90", "signatures"))
            for k, by_cc in regs.items():
                def rng(v):
                    return f"{min(v)}" if min(v) == max(v) else f"{min(v)}-{max(v)}"
                t.append((k, rng(by_cc.get("8.0", [0])), rng(by_cc.get("9.0", [0])),
                          len(by_cc.get("8.0", []))))


@pytest.mark.gpu
@pytest.mark.parametrize("name", _files("gpu"))
def test_gpu(name, table):
    """``tests/cuda/*gpu*.py`` on a real device (skipped with the reason without one)."""
    _check("gpu", name,
           {"NUMBA_ENABLE_CUDASIM": "0", "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS": "0"}, 900, table)


def test_launch_reads_device_attributes_cuda_has():
    """``_launch`` reads the device's properties by name (``dev.NAME`` is numba-cuda's lazy
    lookup of ``CU_DEVICE_ATTRIBUTE_NAME``): every name must exist in the driver API, or
    the first launch on hardware fails (``MAX_THREADS_PER_MULTI_PROCESSOR`` did)."""
    driver = pytest.importorskip("cuda.bindings.driver")
    names = set(re.findall(r"\bdev\.([A-Z][A-Z0-9_]+)", (CUDA_PKG / "_launch.py").read_text()))
    assert names >= {"WARP_SIZE", "MULTIPROCESSOR_COUNT"}, names
    missing = sorted(n for n in names
                     if not hasattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{n}"))
    assert not missing, missing
