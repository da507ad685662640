"""The measured parallel threshold (mpsolve.kernels.cpu._calibrate): its model, its bounds,
the per-machine file and the environment override."""
from __future__ import annotations

import json

import pytest

from mpsolve.kernels.cpu import _calibrate as cal
from mpsolve.kernels.cpu import blas1

_KERNELS = (blas1._axpy_ser, blas1._axpy_par)


def _fake_times(monkeypatch, short_par, short_ser, long_ser, long_par):
    """Stand-in kernels, and ``_median_time`` answering by kernel and length (seconds)."""
    def ser(a, x, y):
        pass

    def par(a, x, y):
        pass

    table = {(par, cal.SHORT): short_par, (ser, cal.SHORT): short_ser,
             (ser, cal.LONG): long_ser, (par, cal.LONG): long_par}
    monkeypatch.setattr(cal, "_median_time", lambda f, x, y: table[f, x.size])
    return ser, par
    monkeypatch.setattr(cal, "get_num_threads", lambda: 2)


@pytest.mark.parametrize("times, expected", [
    # this project's VM: o = 60 us, 2^20 elements 550 us serial, 370 us split (p ~ 1.8):
    # n* = 60 * 2^20 / (550 - 310) = 262144 -> 2^18
    ((61e-6, 1e-6, 550e-6, 370e-6), 2 ** 18),
    # a server whose workers spin: o = 3 us, p ~ 8 -> n* ~ 5.9k, raised to LOW
    ((4e-6, 1e-6, 550e-6, 72e-6), cal.LOW),
    # no speed-up on long vectors (one memory path): never split
    ((61e-6, 1e-6, 550e-6, 600e-6), cal.HIGH),
    # a huge region cost: capped at HIGH
    ((20e-3, 1e-6, 550e-6, 300e-6), cal.HIGH),
])
def test_the_crossover_model(monkeypatch, times, expected):
    assert cal.measure(*_fake_times(monkeypatch, *times)) == expected


def test_one_thread_never_splits(monkeypatch):
    monkeypatch.setattr(cal, "get_num_threads", lambda: 1)
    assert cal.measure(*_KERNELS) == cal.HIGH


def test_a_real_measurement_runs_here_and_in_its_child_process():
    """blas1's own axpy kernels, timed in this process and in the child process the
    threshold is measured in (which reports a value: ``None`` is its failure)."""
    here, apart = cal.measure(*_KERNELS), cal._measure_apart()
    assert apart is not None
    for v in (here, apart):
        assert cal.LOW <= v <= cal.HIGH and v & (v - 1) == 0


def test_a_failed_measurement_falls_back(monkeypatch, tmp_path):
    monkeypatch.delenv("MPSOLVE_PARALLEL_MIN", raising=False)
    monkeypatch.setenv("MPSOLVE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cal, "_measure_apart", lambda: None)
    assert cal.parallel_min() == cal.FALLBACK
    assert not (tmp_path / cal.FILE).exists()            # nothing kept: measured next time


def test_kept_per_machine_and_overridden_by_the_environment(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(cal, "_measure_apart", lambda: calls.append(1) or 4096)
    monkeypatch.delenv("MPSOLVE_PARALLEL_MIN", raising=False)
    monkeypatch.setenv("MPSOLVE_CACHE_DIR", str(tmp_path))
    assert cal.parallel_min() == 4096 and len(calls) == 1
    kept = json.loads((tmp_path / cal.FILE).read_text())
    assert kept[cal._key()]["parallel_min"] == 4096
    assert cal.parallel_min() == 4096 and len(calls) == 1          # read back, not measured
    (tmp_path / cal.FILE).write_text(json.dumps({"another machine": {"parallel_min": 99}}))
    assert cal.parallel_min() == 4096 and len(calls) == 2          # not this machine's
    kept = json.loads((tmp_path / cal.FILE).read_text())
    assert kept["another machine"]["parallel_min"] == 99           # kept beside this one
    (tmp_path / cal.FILE).write_text("{not json")
    assert cal.parallel_min() == 4096 and len(calls) == 3          # unreadable: measured
    monkeypatch.setenv("MPSOLVE_PARALLEL_MIN", "12345")
    assert cal.parallel_min() == 12345 and len(calls) == 3         # no measurement
    # a cache that cannot be written: measured, and still answered
    monkeypatch.delenv("MPSOLVE_PARALLEL_MIN")
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MPSOLVE_CACHE_DIR", str(blocker / "sub"))
    assert cal.parallel_min() == 4096 and len(calls) == 4


def test_openmp_wait_policy_is_passive_unless_the_user_chose_one_and_keys_the_threshold():
    """Importing mpsolve sets ``OMP_WAIT_POLICY=PASSIVE`` (before Numba's OpenMP pool
    starts) where neither it nor ``GOMP_SPINCOUNT`` is set, and keeps a user's choice; the
    wait policy is part of the calibration's key, so a threshold measured under one policy
    (passive: 262144 here) is not used under another (a short spin: 16384)."""
    import os
    import subprocess
    import sys

    code = ("import os, mpsolve; from mpsolve.kernels.cpu import _calibrate as c; "
            "print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'), "
            "c._key().rsplit('|', 1)[1])")
    base = {k: v for k, v in os.environ.items()
            if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    seen = {}
    for extra in ({}, {"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "3000"}):
        out = subprocess.run([sys.executable, "-c", code], env=dict(base, **extra),
                             capture_output=True, text=True, check=True)
        seen[tuple(extra.items())] = out.stdout.split()
    assert seen[()] == ["None", "PASSIVE", "PASSIVE/"]
    assert seen[(("OMP_WAIT_POLICY", "ACTIVE"),)] == ["None", "ACTIVE", "ACTIVE/"]
    assert seen[(("GOMP_SPINCOUNT", "3000"),)] == ["3000", "None", "/3000"]
