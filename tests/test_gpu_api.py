"""The GPU face of mpsolve, checked in a normal process without a GPU.

* the array-module boundary: the simulator switch (NumPy arrays for ``"gpu"``), a clear
  error when no GPU (or no CuPy) is there, nothing of CuPy/numba-cuda imported by
  ``import mpsolve``;
* CuPy in, CuPy out: with a stand-in for CuPy (a NumPy subclass whose type lives in a
  ``cupy`` module, the CPU's kernels registered for ``"gpu"``) the solvers take device
  arrays and device sparse matrices, keep every vector of the solve in the device's array
  type, certify the true residual there and return the caller's type;
* ``mpsolve info --device`` (what is found, what is missing, the exit status);
* ``mpsolve bench --device gpu`` without a GPU (a clear error, exit status 3, nothing
  written) and its harness run end to end with host stand-ins for CuPy/cuSPARSE.

The kernels themselves run under the simulator in ``tests/cuda/``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import types

import numpy as np
import pytest
import scipy.sparse as sp

import mpsolve
from mpsolve import backend
from mpsolve.matrices import convection_diffusion2d, poisson2d

GPU = backend.GPU_DEVICE


def _python(code, env=None, timeout=300):
    e = dict(os.environ)
    e.pop("NUMBA_ENABLE_CUDASIM", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=e)


GPU_HERE = backend.gpu_report()["usable"]


# ------------------------------------------------------------------ the boundary
def test_import_mpsolve_imports_neither_cupy_nor_numba_cuda():
    p = _python("import sys, mpsolve, mpsolve.precond, mpsolve.petsc, mpsolve.cli\n"
                "import mpsolve.bench, mpsolve.bench.gpu\n"
                "from mpsolve import backend\n"
                "backend.cuda_simulator(); backend.is_host('gpu')\n"
                "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('cupy', 'cupyx')\n"
                "             or m.startswith('numba.cuda') or m == 'numba')\n"
                "assert not bad, bad")
    assert p.returncode == 0, p.stderr[-3000:]


def test_simulator_makes_the_gpu_arrays_numpy_without_importing_numba():
    p = _python("import sys, numpy\nfrom mpsolve import backend\n"
                "assert backend.cuda_simulator()\n"
                "assert backend.array_module('gpu') is numpy and not backend.is_host('gpu')\n"
                "assert 'numba' not in sys.modules and 'cupy' not in sys.modules",
                env={"NUMBA_ENABLE_CUDASIM": "1"})
    assert p.returncode == 0, p.stderr[-3000:]


def test_simulator_switch_follows_numba_config(monkeypatch):
    import numba

    from numba.core import config

    monkeypatch.setattr(config, "ENABLE_CUDASIM", 1)
    assert numba.config.ENABLE_CUDASIM
    assert backend.cuda_simulator() and backend.array_module(GPU) is np
    x = np.ones(3)
    assert backend.to_device(x, GPU) is x
    assert not backend.is_host(GPU)          # set-up kernels still from HOST_DEVICE
    monkeypatch.setattr(config, "ENABLE_CUDASIM", 0)
    assert not backend.cuda_simulator()


@pytest.mark.skipif(GPU_HERE, reason="a GPU is usable here")
def test_gpu_device_without_a_gpu_says_so():
    with pytest.raises(RuntimeError, match=r"needs a CUDA GPU.*mpsolve info --device"):
        mpsolve.solve(poisson2d(4), np.ones(16), method="cg", precond="jacobi", device=GPU)


def test_gpu_device_without_cupy_says_what_to_install():
    p = _python("import sys\nsys.modules['cupy'] = None\nimport numpy as np, mpsolve\n"
                "from mpsolve.matrices import poisson2d\n"
                "try:\n    mpsolve.cg(poisson2d(4), np.ones(16), device='gpu')\n"
                "except RuntimeError as e:\n    print(e)\n")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "pip install 'mpsolve[gpu]'" in p.stdout and "cupy-cuda13x" in p.stdout


# ------------------------------------------------------------------ CuPy in, CuPy out
class FakeCupy(np.ndarray):
    """Stands for ``cupy.ndarray``: its type's module is ``cupy``; ``get``/``set`` as CuPy's."""

    __module__ = "cupy._core.core"

    def get(self, out=None):
        if out is None:
            return np.array(self.view(np.ndarray))
        np.copyto(out, self.view(np.ndarray))
        return out

    def set(self, a):
        np.copyto(self.view(np.ndarray), a)


def _dev(a):
    return np.ascontiguousarray(a).view(FakeCupy)


class FakeCsr:
    """Stands for ``cupyx.scipy.sparse.csr_matrix`` (``get()`` gives the SciPy matrix)."""

    __module__ = "cupyx.scipy.sparse._csr"

    def __init__(self, A):
        self._A = sp.csr_matrix(A)
        self.shape, self.dtype = self._A.shape, self._A.dtype

    def get(self):
        return self._A.copy()


class _FakeXP(types.ModuleType):
    """NumPy whose array results are :class:`FakeCupy` (the device's array module)."""

    def __init__(self):
        super().__init__("fake_cupy")
        self.ndarray = FakeCupy

    def __getattr__(self, name):
        obj = getattr(np, name)
        if not callable(obj) or isinstance(obj, type):
            return obj

        def wrapped(*a, **k):
            out = obj(*a, **k)
            if isinstance(out, np.ndarray) and not isinstance(out, FakeCupy) and out.ndim:
                out = out.view(FakeCupy)
            return out

        return wrapped


@pytest.fixture
def fake_gpu(monkeypatch):
    """Device ``"gpu"`` with :class:`FakeCupy` arrays and the CPU's kernels: the data flow
    of the GPU path (what lives where, what comes back) without a GPU."""
    from mpsolve.kernels import registry as R

    R._ensure_loaded(backend.DEFAULT_DEVICE)   # first: a module registers once
    saved = (dict(R._REGISTRY), dict(R._PLANS), set(R._LOADED), dict(R._MEMO))
    for k, f in list(R._REGISTRY.items()):
        if k[0] == backend.DEFAULT_DEVICE:
            R._REGISTRY[(GPU,) + k[1:]] = f
    for (d, op), f in list(R._PLANS.items()):
        if d == backend.DEFAULT_DEVICE:
            R._PLANS[(GPU, op)] = f
    R._LOADED.add(GPU)
    R._MEMO.clear()
    xp = _FakeXP()
    monkeypatch.setattr(backend, "_cupy", lambda device: xp)
    monkeypatch.setattr(backend, "cuda_simulator", lambda: False)
    yield xp
    R._REGISTRY.clear(), R._REGISTRY.update(saved[0])
    R._PLANS.clear(), R._PLANS.update(saved[1])
    R._LOADED.clear(), R._LOADED.update(saved[2])
    R._MEMO.clear(), R._MEMO.update(saved[3])


def _workspaces(monkeypatch):
    from mpsolve import _system

    made = []
    orig = _system.Workspace.__init__

    def init(self, xp):
        orig(self, xp)
        made.append(self)

    monkeypatch.setattr(_system.Workspace, "__init__", init)
    return made


CASES = [("cg", "spd", None), ("cg", "spd", "jacobi"), ("cg", "spd", "block-isai"),
         ("gmres", "nonsym", None), ("gmres", "nonsym", "block-isai"),
         ("bicgstab", "nonsym", "jacobi"), ("bicgstab", "nonsym", "block-isai")]


@pytest.mark.parametrize("method,kind,pc", CASES)
@pytest.mark.parametrize("prec", ["double", "mixed-eft"])
def test_cupy_in_cupy_out(fake_gpu, monkeypatch, method, kind, pc, prec):
    A = poisson2d(12) if kind == "spd" else convection_diffusion2d(12)
    b = np.random.default_rng(5).standard_normal(A.shape[0])
    made = _workspaces(monkeypatch)
    bd, Ad = _dev(b), FakeCsr(A)
    keep = b.copy()
    g = mpsolve.solve(Ad, bd, method=method, precond=pc, precision=prec, rtol=1e-8)
    (ws,) = made
    c = mpsolve.solve(A, b, method=method, precond=pc, precision=prec, rtol=1e-8)
    assert g.info == c.info == 0
    assert g.iterations == c.iterations          # the same kernels: the same iterations
    assert type(g.x) is FakeCupy                 # the caller's type back
    np.testing.assert_array_equal(bd.get(), keep)  # b never modified
    # every vector of the solve lived on the device
    assert ws._arrays and all(type(a) is FakeCupy for a in ws._arrays.values())
    assert ws.xp is fake_gpu
    true = np.linalg.norm(b - A @ g.x.get()) / np.linalg.norm(b)
    assert true <= 1e-8 and g.true_residual == pytest.approx(true, rel=1e-6)


def test_host_input_with_device_gpu_comes_back_on_the_host(fake_gpu, monkeypatch):
    A = poisson2d(10)
    b = A @ np.ones(A.shape[0])
    made = _workspaces(monkeypatch)
    x, info = mpsolve.cg(A, b, rtol=1e-10, device=GPU, M=None)
    assert info == 0 and type(x) is np.ndarray
    assert all(type(a) is FakeCupy for a in made[0]._arrays.values())
    # a device b with a host A: the device of the data, the answer as b
    x0 = _dev(np.zeros(A.shape[0]))
    x, info = mpsolve.bicgstab(A, _dev(b), x0, rtol=1e-10)
    assert info == 0 and type(x) is FakeCupy and not x0.get().any()
    # FP32 device data: an FP32 device answer
    x, info = mpsolve.cg(FakeCsr(A.astype(np.float32)), _dev(b.astype(np.float32)), rtol=1e-5)
    assert info == 0 and type(x) is FakeCupy and x.dtype == np.float32


def test_device_arrays_with_a_host_device_are_refused(fake_gpu):
    with pytest.raises(ValueError, match="CuPy"):
        mpsolve.cg(poisson2d(4), _dev(np.ones(16)), device=backend.DEFAULT_DEVICE)


def _stored_arrays(obj, seen=None, stored=False):
    """The arrays of the stored operators a preconditioner holds (through chains and
    lists; the launch plan ``parts`` is the kernel's business, not an operand)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return [obj] if stored else []
    if isinstance(obj, (list, tuple)):
        return [a for o in obj for a in _stored_arrays(o, seen, stored)]
    mod = type(obj).__module__
    if mod.startswith(("mpsolve", "precond")) and hasattr(obj, "__dict__"):
        op = mod == "mpsolve.operator"
        return [a for k, o in vars(obj).items() if k not in ("_bound", "_local", "parts")
                for a in _stored_arrays(o, seen, op)]
    return []


def test_preconditioner_for_the_device_stores_device_arrays(fake_gpu):
    from mpsolve.precond import BlockISAI, Jacobi

    A = convection_diffusion2d(8)
    r = np.random.default_rng(1).standard_normal(A.shape[0])
    for M in (Jacobi().setup(A, device=GPU), BlockISAI(block_size=2).setup(A, device=GPU)):
        assert M.device == GPU
        arrays = _stored_arrays(M)
        assert arrays and all(type(a) is FakeCupy for a in arrays)
        z = M.matvec(r)                          # SciPy's protocol: host in, host out
        assert type(z) is np.ndarray
        Mc = type(M)(**({"block_size": 2} if isinstance(M, BlockISAI) else {})).setup(A)
        np.testing.assert_allclose(z, Mc.matvec(r), rtol=1e-6, atol=1e-7)


def test_petsc_plugin_copies_across_the_boundary(fake_gpu):
    pytest.importorskip("petsc4py")
    from petsc4py import PETSc

    from mpsolve.petsc import Jacobi

    A = poisson2d(10)
    b = A @ np.ones(A.shape[0])
    calls = {"up": 0, "down": 0}
    up, down = backend.upload, backend.download

    def count(name, f):
        def g(*a):
            calls[name] += 1
            return f(*a)
        return g

    import mpsolve.petsc as plugin

    plugin.upload, plugin.download = count("up", up), count("down", down)
    try:
        its = {}
        for dev in (GPU, None):
            P = PETSc.Mat().createAIJ(size=A.shape, csr=(A.indptr, A.indices, A.data),
                                      comm=PETSc.COMM_SELF)
            P.assemble()
            ksp = PETSc.KSP().create(PETSc.COMM_SELF)
            ksp.setOperators(P)
            ksp.setType("cg")
            ksp.setTolerances(rtol=1e-8)
            pc = ksp.getPC()
            pc.setType("python")
            ctx = Jacobi(device=dev, dtype="float64")
            pc.setPythonContext(ctx)
            bv, xv = P.createVecLeft(), P.createVecRight()
            bv.array[:] = b
            ksp.solve(bv, xv)
            its[dev] = ksp.getIterationNumber()
            assert np.linalg.norm(b - A @ xv.array) <= 1e-7 * np.linalg.norm(b)
            if dev is not None:
                assert ctx.M.device == GPU and type(ctx._bufs[0]) is FakeCupy
            for o in (ksp, P, bv, xv):
                o.destroy()
    finally:
        plugin.upload, plugin.download = up, down
    assert its[GPU] == its[None]
    assert calls["up"] == calls["down"] >= its[GPU]


def test_petsc_plugin_rejects_an_unknown_device():
    from mpsolve.petsc import Jacobi

    with pytest.raises(ValueError, match="device"):
        Jacobi(device="tpu")


# ------------------------------------------------------------------ info --device
def test_info_device_reports_what_is_found_and_missing(capsys):
    from mpsolve.cli import INFO_DEVICE_EXIT, main

    rc = main(["info", "--device"])
    out = capsys.readouterr().out
    rep = backend.gpu_report()
    assert rc == INFO_DEVICE_EXIT["usable" if rep["usable"] else "not usable"]
    for name in ("cupy-cuda13x", "numba-cuda", "nvidia-cuda-nvrtc", "nvidia-nvjitlink"):
        assert name in out
    assert "CUDA runtime" in out and "NVRTC" in out and "nvJitLink" in out
    if not rep["usable"]:
        assert rc == 1 and "none usable" in out and "missing:" in out
    assert main(["info", "--gpu"]) == rc        # the alias
    capsys.readouterr()


def test_info_device_names_the_pip_command_for_missing_packages(monkeypatch, capsys):
    from mpsolve.cli import main

    real = backend._dist_version
    monkeypatch.setattr(backend, "_dist_version",
                        lambda name: None if name in ("numba-cuda", "nvidia-nvjitlink")
                        else real(name))
    assert main(["info", "--device"]) == 1
    out = capsys.readouterr().out
    assert "numba-cuda" in out and "NOT INSTALLED" in out
    assert "pip install 'numba-cuda[cu13]'" in out


def test_info_needs_a_matrix_or_device(capsys):
    from mpsolve.cli import main

    assert main(["info"]) == 2
    assert "--device" in capsys.readouterr().err
    assert main(["info", "poisson2d:4"]) == 0


def test_info_device_exit_status_from_the_command_line():
    p = subprocess.run([sys.executable, "-m", "mpsolve.cli", "info", "--device"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == (0 if GPU_HERE else 1), p.stderr
    assert "GPU" in p.stdout


# ------------------------------------------------------------------ bench --device gpu
@pytest.mark.skipif(GPU_HERE, reason="a GPU is usable here")
def test_bench_gpu_without_a_gpu_says_so_and_writes_nothing(tmp_path):
    pytest.importorskip("rich")
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "mpsolve.cli", "bench", "--device", "gpu",
                        "--quick", "--out", str(out)], capture_output=True, text=True,
                       timeout=300)
    from mpsolve.bench.gpu import NO_GPU_EXIT

    assert p.returncode == NO_GPU_EXIT == 3, p.stdout + p.stderr
    assert "no usable GPU" in p.stderr and "mpsolve info --device" in p.stderr
    assert not out.exists()
    assert "cupy" not in p.stdout


class HostEnv:
    """The harness's view of a GPU, played by the host: NumPy/SciPy arrays, mpsolve's
    ``cpu`` device, wall-clock timings, mpsolve's ILU(0) for cuSPARSE's."""

    device = backend.DEFAULT_DEVICE
    name = "host stand-in"

    def __init__(self):
        import scipy.sparse.linalg as spla

        self.xp, self.spla, self.notes = np, spla, ["host stand-in (test)"]

    def sync(self):
        pass

    def asarray(self, a, dtype=None):
        return np.array(a, dtype=dtype)

    def csr(self, A, dtype=np.float64):
        return sp.csr_matrix(A, dtype=dtype)

    def time(self, fn, repeat=3):
        import time

        ts = []
        for _ in range(repeat + 1):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return ts[0], min(ts[1:]), float(np.median(ts[1:]))

    def wall(self, fn):
        import time

        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out

    def ilu0(self, Ad):
        from mpsolve.precond import ILU0

        t, M = self.wall(lambda: ILU0(dtype="float64").setup(Ad))
        return t, t, M.matvec

    def solvers(self):
        s = self.spla
        return {"cg": s.cg, "gmres": s.gmres, "bicgstab": s.bicgstab}

    def operator(self, shape, matvec):
        return self.spla.LinearOperator(shape, matvec=matvec, dtype=np.float64)


def test_bench_gpu_harness_runs_end_to_end_on_stand_ins(tmp_path, capsys):
    """Every section of ``mpsolve bench --device gpu`` -- SpMV, dots, preconditioner set-up
    and apply, time to solution for each engine, the table against the paper -- run with
    host stand-ins: the bookkeeping is right before a GPU ever runs it."""
    from mpsolve.bench import gpu, suite

    p = argparse.ArgumentParser()
    suite.add_arguments(p)
    args = p.parse_args(["--device", "gpu", "--problems", "poisson2d:12",
                         "convdiff2d:12,peclet=10", "--dot-size", "1000", "--baselines",
                         "petsc", "--out", str(tmp_path / "out")])
    args.repeat_kernels = 2
    assert gpu.main(args, suite.gpu_hooks(), env=HostEnv()) == 0
    import json

    data = json.loads((tmp_path / "out" / "results_gpu.json").read_text())
    md = (tmp_path / "out" / "results_gpu.md").read_text()
    assert {"spmv", "dot", "precond", "solve", "paper", "meta"} <= set(data)
    assert len(data["spmv"]) == 2 * 3          # rows present; the measured GB/s is not judged
    assert all(isinstance(r["mpsolve GB/s"], float) for r in data["spmv"])
    assert [r["dot"].split()[0] for r in data["dot"]] == ["cupy.dot", "mpsolve", "mpsolve"]
    engines = {r["engine"] for r in data["solve"]}
    assert {"mpsolve (GPU)", "cupyx"} <= engines
    ok = [r for r in data["solve"] if r["engine"] != "PETSc (CPU)"]
    assert all(r["converged"] for r in ok), [(r["engine"], r["method"], r["precond"],
                                              r["status"]) for r in ok if not r["converged"]]
    paper = {r["comparison"]: r for r in data["paper"]}
    first = paper["Block-ISAI vs cuSPARSE ILU(0), time to solution"]
    assert first["paper (A100)"] == 6.0 and first["cases"] >= 2
    assert isinstance(first["here"], float)     # a measured ratio: its value is the bench's
    assert any(r["paper (A100)"] == 11.2 for r in data["paper"])
    assert "## Against the paper" in md and "## SpMV" in md
    assert "results_gpu.md" in capsys.readouterr().out


def test_smoke_kernel_failure_names_the_fix(monkeypatch):
    """``gpu_report`` compiles and runs a test kernel; where numba-cuda cannot compile (as
    numba-cuda 0.30.4 under NumPy 2.5, whose ``row_stack`` it calls), the report says so
    and names the pip command."""
    from numba import cuda

    def jit(*a, **k):
        raise AttributeError("module 'numpy' has no attribute 'row_stack'")

    monkeypatch.setattr(cuda, "jit", jit)
    report, missing = {}, []
    backend._smoke_kernel(None, report, missing)
    assert report["kernel"] == "failed"
    assert len(missing) == 1 and "row_stack" in missing[0] and "numpy<2.5" in missing[0]
    assert report["fix_requirements"] == ["numpy<2.5"]


def test_matvec_of_a_host_preconditioner_refuses_a_device_array_by_name():
    """``M.matvec(r)`` keeps a CuPy ``r`` on the device (checked on a GPU by
    ``tests/cuda/gpu_solvers.py``); a preconditioner set up on the CPU says which device
    it is on instead of failing inside ``numpy.asarray``."""
    from mpsolve.matrices import poisson2d
    from mpsolve.precond import Jacobi

    class FakeDeviceArray:              # what backend.on_host sees as a CuPy array
        __module__ = "cupy._fake"
        ndim, shape = 1, (16,)

    M = Jacobi().setup(poisson2d(4))
    with pytest.raises(TypeError, match="device='gpu'"):
        M.matvec(FakeDeviceArray())
    with pytest.raises(TypeError, match="device='gpu'"):
        M @ FakeDeviceArray()
