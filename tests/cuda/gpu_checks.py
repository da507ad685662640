"""Checks that need a real CUDA device: CuPy arrays, the hardware's bits, timings.

Run by ``tests/test_cuda.py`` (simulator off).  Every test is marked ``gpu`` and skipped,
with the reason, where numba-cuda finds no device or CuPy cannot allocate.

* the reductions on CuPy arrays give the bits of the Python model of the tree
  (``_tree_model.py``) -- the same bits the simulator gives -- for two launch
  configurations and on a non-default CuPy stream;
* the BLAS-1 updates on CuPy arrays bitwise equal to the reference on host copies;
* timings (CUDA events, after warm-up): Dot2 and the native dot against ``cupy.dot``,
  ``axpy`` against CuPy's ``y += a * x``; GB/s printed, nothing asserted about speed.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tree_model import model  # noqa: E402


def _why_no_gpu():
    try:
        from numba import cuda

        if not cuda.is_available():
            return "no GPU: numba-cuda finds no CUDA device/driver"
        import cupy

        cupy.zeros(1)
    except Exception as e:                       # noqa: BLE001  (ImportError, CUDA errors)
        return f"no GPU: {type(e).__name__}: {e}"
    return None


WHY = _why_no_gpu()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(WHY is not None, reason=str(WHY))]


def _lookup(*a):
    from mpsolve.kernels import lookup

    return lookup(*a)


def _device_info():
    from numba import cuda

    d = cuda.get_current_device()
    return f"{d.name.decode() if isinstance(d.name, bytes) else d.name} cc {d.compute_capability}"


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode", ["native", "compensated"])
def test_reductions_hardware_bits_are_the_models(mode, dtype, monkeypatch):
    import cupy

    from mpsolve.kernels.cuda import _launch, reduce as R

    monkeypatch.setattr(R, "CHUNK", 16)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(3000).astype(dtype)
    y = rng.standard_normal(3000).astype(dtype)
    x[::7] *= dtype(1e6)
    dx, dy = cupy.asarray(x), cupy.asarray(y)
    for op, args in (("dot", (dx, dy)), ("nrm2", (dx,)), ("sum", (dx,))):
        f = _lookup("gpu", op, (dtype,), mode)
        with _launch.override(threads=32, blocks=1):
            a = f(*args)
        b = f(*args)                                   # the device's own configuration
        with cupy.cuda.Stream(non_blocking=True):
            c = f(*args)
        want = model(op, mode, x, x if op == "nrm2" else y, 16)
        assert np.float64(a).tobytes() == np.float64(b).tobytes() == np.float64(c).tobytes()
        assert np.float64(a).tobytes() == np.float64(want).tobytes(), (op, a, want)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_updates_on_cupy_bitwise_reference(dtype):
    import cupy

    rng = np.random.default_rng(3)
    x, y, u, v = (rng.standard_normal(100_003).astype(dtype) for _ in range(4))
    dx, dy, du, dv = (cupy.asarray(a) for a in (x, y, u, v))
    _lookup("gpu", "axpy2", (dtype,))(0.7, dx, dy, -0.3, du, dv)
    _lookup("reference", "axpy2", (dtype,))(0.7, x, y, -0.3, u, v)
    assert np.array_equal(cupy.asnumpy(dy).view(np.uint8), y.view(np.uint8))
    assert np.array_equal(cupy.asnumpy(dv).view(np.uint8), v.view(np.uint8))


def _time(fn, reps=20):
    import cupy

    for _ in range(3):
        fn()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / reps * 1e-3


def test_timings(table):
    import cupy

    n = 1 << 24
    t = table(f"CUDA timings ({_device_info()}), n = {n}", ("kernel", "ms", "GB/s"))
    for dtype in (np.float64, np.float32):
        x = cupy.random.standard_normal(n).astype(dtype)
        y = cupy.random.standard_normal(n).astype(dtype)
        nbytes = 2 * n * x.itemsize
        cases = {f"cupy.dot {x.dtype}": lambda: float(cupy.dot(x, y)),
                 f"dot native {x.dtype}": lambda: _lookup("gpu", "dot", (dtype,), "native")(x, y),
                 f"dot compensated {x.dtype}":
                     lambda: _lookup("gpu", "dot", (dtype,), "compensated")(x, y)}
        for name, fn in cases.items():
            s = _time(fn)
            t.append((name, f"{s * 1e3:.3f}", f"{nbytes / s / 1e9:.0f}"))
        ax = _lookup("gpu", "axpy", (dtype,))
        s = _time(lambda: ax(0.5, x, y))
        t.append((f"axpy {x.dtype}", f"{s * 1e3:.3f}", f"{3 * n * x.itemsize / s / 1e9:.0f}"))
        s = _time(lambda: y.__iadd__(0.5 * x))
        t.append((f"cupy y += a*x {x.dtype}", f"{s * 1e3:.3f}",
                  f"{3 * n * x.itemsize / s / 1e9:.0f}"))
