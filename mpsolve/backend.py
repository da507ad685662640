"""Backends: which device a solve runs on, chosen from the arrays (no global state).

``device_of(*arrays)`` says ``"gpu"`` for CuPy arrays and ``"cpu"`` otherwise,
without importing CuPy; ``array_module(device)`` gives the array namespace the
solver bodies allocate their workspace with (``numpy`` or ``cupy``, imported
lazily).  Kernels come from the registry keyed by the same device name, so a
GPU backend adds kernels and an array module -- not another copy of a solver.
"""
from __future__ import annotations

import numpy as np

__all__ = ["device_of", "array_module"]


def device_of(*arrays) -> str:
    for a in arrays:
        if a is not None and type(a).__module__.split(".")[0] == "cupy":
            return "gpu"
    return "cpu"


def array_module(device: str):
    if device == "cpu":
        return np
    if device == "gpu":
        try:
            import cupy
        except ImportError as err:  # pragma: no cover - no GPU stack here
            raise RuntimeError("device='gpu' needs CuPy: pip install 'mpsolve[gpu]'") from err
        return cupy
    raise ValueError(f"device={device!r}: use 'cpu' or 'gpu'")
