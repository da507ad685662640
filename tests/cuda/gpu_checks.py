"""Checks that need a real CUDA device: CuPy arrays and the hardware's bits.

Run by ``tests/test_cuda.py`` (simulator off).  Every test is marked ``gpu`` and skipped,
with the reason, where numba-cuda finds no device or CuPy cannot allocate.

* the reductions on CuPy arrays give the bits of the Python model of the tree
  (``_tree_model.py``) -- the same bits the simulator gives -- for two launch
  configurations and on a non-default CuPy stream;
* the BLAS-1 updates on CuPy arrays bitwise equal to the reference on host copies;

Timings are not tests: ``python -m mpsolve.bench.gpu_launch`` and ``mpsolve bench --device
gpu`` measure the kernels against CuPy and cuSPARSE.
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
