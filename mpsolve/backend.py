"""The array-module boundary: which device a solve runs on, and its array namespace.

This is the one module above ``kernels/`` that knows device names and array
libraries (house rule 11).  Everything else asks it:

* :func:`device_of` -- the device the user's arrays live on (CuPy arrays and
  ``cupyx.scipy.sparse`` matrices -> ``"gpu"``, everything else -> ``"cpu"``),
  without importing CuPy;
* :func:`resolve_device` -- the device of a solve: an explicit ``device=`` (validated)
  or the arrays' own; arrays on two different devices are an error;
* :func:`array_module` -- the namespace workspace is allocated with (``numpy`` or
  ``cupy``, imported lazily);
* :func:`to_device` / :func:`to_host` -- moving arrays across the boundary.

Devices
-------
``"cpu"``
    NumPy arrays, Numba kernels (the default).
``"reference"``
    NumPy arrays, plain NumPy / exact-arithmetic kernels (:mod:`mpsolve.kernels.reference`):
    the oracle the other devices are tested against.  Slow; for tests.
``"gpu"``
    CuPy arrays, numba-cuda kernels (the CUDA backend).
"""
from __future__ import annotations

import numpy as np

__all__ = ["DEVICES", "DEFAULT_DEVICE", "HOST_DEVICE", "on_host", "device_of", "resolve_device", "array_module", "to_device", "to_host",
           "is_host"]

#: The device names a solve accepts, and the array library of each.
DEVICES = {"cpu": "numpy", "reference": "numpy", "gpu": "cupy"}
#: The device of host (NumPy/SciPy) data when nothing else is asked for.
DEFAULT_DEVICE = "cpu"
#: Where host-side set-up work (factorisations, patterns) runs for a device whose
#: arrays are not host arrays.
HOST_DEVICE = "cpu"


def _is_cupy(a) -> bool:
    return a is not None and type(a).__module__.split(".")[0] in ("cupy", "cupyx")


def device_of(*arrays) -> str:
    """The device of the given arrays: ``"gpu"`` if any is a CuPy array (or a
    ``cupyx.scipy.sparse`` matrix), else ``"cpu"``.  ``None`` entries are skipped."""
    for a in arrays:
        if _is_cupy(a):
            return "gpu"
    return DEFAULT_DEVICE


def on_host(*arrays) -> bool:
    """True when none of the arrays lives on an accelerator (NumPy, SciPy, lists...)."""
    return not any(_is_cupy(a) for a in arrays)


def resolve_device(device, *arrays) -> str:
    """The device a solve runs on.

    ``device=None``: the arrays' device (:func:`device_of`).  An explicit device is
    validated against :data:`DEVICES`.  Host arrays (NumPy/SciPy) are accepted by
    every device -- they are copied over once; device arrays (CuPy) with a host
    device, or arrays from two devices, are refused.

    Examples
    --------
    >>> import numpy as np
    >>> resolve_device(None, np.ones(3)), resolve_device("reference", np.ones(3))
    ('cpu', 'reference')
    >>> resolve_device("tpu", np.ones(3))
    Traceback (most recent call last):
    ...
    ValueError: device='tpu': choose one of ['cpu', 'gpu', 'reference'] (or None: the device of the arrays)
    """
    on_gpu = [a for a in arrays if _is_cupy(a)]
    if device is None:
        return device_of(*arrays)
    if not isinstance(device, str) or device not in DEVICES:
        raise ValueError(f"device={device!r}: choose one of {sorted(DEVICES)} "
                         "(or None: the device of the arrays)")
    if on_gpu and DEVICES[device] != "cupy":
        raise ValueError(
            f"device={device!r}, but A, b or x0 is a CuPy (GPU) array: pass device='gpu' "
            f"(or None), or move the arrays to the host with .get() first")
    return device


def array_module(device: str):
    """``numpy`` or ``cupy``: the namespace a device's arrays are made with."""
    lib = DEVICES.get(device)
    if lib == "numpy":
        return np
    if lib == "cupy":
        try:
            import cupy
        except ImportError as err:  # pragma: no cover - no GPU stack here
            raise RuntimeError("device='gpu' needs CuPy: pip install 'mpsolve[gpu]'") from err
        return cupy
    raise ValueError(f"device={device!r}: choose one of {sorted(DEVICES)}")


def is_host(device: str) -> bool:
    """True when the device's arrays are NumPy arrays in host memory."""
    return DEVICES.get(device) == "numpy"


def to_device(a, device: str):
    """``a`` as an array of ``device`` (no copy when it already is one)."""
    if a is None:
        return None
    if is_host(device):
        return to_host(a)
    return array_module(device).asarray(a)


def to_host(a):
    """``a`` as a NumPy array (``.get()`` for a CuPy array; no copy for NumPy)."""
    if _is_cupy(a):
        return a.get()
    return np.asarray(a)
