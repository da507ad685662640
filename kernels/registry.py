"""Kernel registry: ``(device, op, dtypes, mode) -> function``.

Every primitive a Krylov method may call is looked up here once, before the
iteration loop starts (house rule 5).  Kernels register themselves at import
time with :func:`register`; :func:`lookup` raises a :class:`KeyError` that lists
what exists when a combination is missing, so an unsupported precision or
device is reported at setup, never inside the loop.

Launch plans
------------
Some kernels take a *plan* as their first argument: how the work is split on
that device (the CPU's row partition balanced by nonzeros, a GPU's sub-warp
width).  Operators ask :func:`launch_plan` once per matrix, so no code above
``kernels/`` knows how a device schedules its work.

Keys
----
device : ``"cpu"``, ``"reference"`` (NumPy oracles) or ``"gpu"``
op     : primitive name (``"spmv"``, ``"dot"``, ``"nrm2"``, ``"axpy"``, ...)
dtypes : tuple of dtype strings, e.g. ``("float64",)`` for a vector kernel or
         ``("float32", "float64", "float64")`` for an SpMV with FP32 values,
         FP64 input and FP64 output
mode   : a variant: ``"native"``/``"compensated"`` for reductions,
         ``"acc64"``/``"acc32"`` for the SpMV accumulator, ``""`` otherwise
"""
from __future__ import annotations

import importlib
from typing import Callable, Dict, Iterable, Tuple

import numpy as np

__all__ = ["register", "lookup", "available", "provides", "dtype_key", "dtype_name",
           "register_plan",
           "launch_plan", "memoised"]

Key = Tuple[str, str, Tuple[str, ...], str]
_REGISTRY: Dict[Key, Callable] = {}
_LOADED: set = set()
_MEMO: Dict[tuple, Callable] = {}
_PLANS: Dict[Tuple[str, str], Callable] = {}


_NAMES: Dict[object, str] = {}


def dtype_name(d) -> str:
    """``np.dtype(d).name``, memoised: ``dtype.name`` is computed in Python on every
    access (several microseconds), and a solve asks a few dozen times."""
    try:
        return _NAMES[d]
    except (KeyError, TypeError):  # TypeError: an unhashable dtype-like
        name = np.dtype(d).name
        if isinstance(d, (np.dtype, type, str)):
            # (only these: a value NumPy also reads as its type, np.float32(1.0), would
            # be found again as 1 == 1.0 == True, which are no dtypes)
            _NAMES[d] = name
        return name


def dtype_key(*dtypes) -> Tuple[str, ...]:
    """Normalise dtype-likes to a tuple of NumPy dtype names."""
    return tuple(dtype_name(d) for d in dtypes)


def register(device: str, op: str, dtypes: Iterable[Tuple], mode: str = "") -> Callable:
    """Decorator registering ``func`` for every dtype tuple in ``dtypes``."""

    def deco(func: Callable) -> Callable:
        for dt in dtypes:
            key = (device, op, dtype_key(*dt), mode)
            _REGISTRY[key] = func
        _MEMO.clear()  # a (re-)registration must be seen by later lookups
        return func

    return deco


#: The module that registers each device's kernels when it is first asked for.  The
#: registry imports them by name (a plug-in table): it depends on no device, and a new
#: device is one more line here and its own package.
DEVICE_MODULES = {"cpu": "mpsolve.kernels.cpu", "reference": "mpsolve.kernels.reference",
                  "gpu": "mpsolve.kernels.cuda"}


def _ensure_loaded(device: str) -> None:
    # Kernels register on import; a device's modules are imported lazily so that
    # ``import mpsolve`` stays cheap and a GPU stack is never imported on a CPU run.
    if device in _LOADED:
        return
    module = DEVICE_MODULES.get(device)
    if module is not None:
        importlib.import_module(module)
    _LOADED.add(device)


def memoised(key: tuple, build: Callable):
    """``build()`` for ``key``, made once and kept until the next registration: for the
    objects made only of looked-up kernels (a solve's vector primitives), which a
    registration may change as it may change a lookup."""
    key = ("memoised",) + key
    got = _MEMO.get(key)
    if got is None:
        got = _MEMO[key] = build()
    return got


def register_plan(device: str, op: str) -> Callable:
    """Decorator registering ``func(*arrays) -> plan`` for kernels of ``op`` on ``device``."""

    def deco(func: Callable) -> Callable:
        _PLANS[(device, op)] = func
        return func

    return deco


def launch_plan(device: str, op: str, *args):
    """The launch plan of ``op`` on ``device`` for these arrays (e.g. the row
    partition of a CSR matrix on the CPU); ``None`` where the device needs none."""
    _ensure_loaded(device)
    func = _PLANS.get((device, op))
    return None if func is None else func(*args)


def lookup(device: str, op: str, dtypes: Tuple = (), mode: str = "") -> Callable:
    """Return the kernel for ``(device, op, dtypes, mode)``.

    Raises
    ------
    KeyError
        If no kernel is registered for that combination; the message lists the
        registered ``(dtypes, mode)`` variants of ``op`` on ``device``.
    """
    try:  # memo on the raw arguments (dtype objects hash): a solve does dozens of lookups
        return _MEMO[(device, op, dtypes, mode)]
    except (KeyError, TypeError):
        pass
    _ensure_loaded(device)
    key = (device, op, dtype_key(*dtypes), mode)
    try:
        func = _REGISTRY[key]
    except KeyError:
        have = sorted(
            f"{k[2]} mode={k[3]!r}" for k in _REGISTRY if k[0] == device and k[1] == op
        )
        raise KeyError(
            f"no {device} kernel for op={op!r}, dtypes={key[2]}, mode={mode!r}; "
            f"registered: {have or 'none'}"
        ) from None
    try:
        _MEMO[(device, op, dtypes, mode)] = func
    except TypeError:  # unhashable dtype-likes: not memoised
        pass
    return func


def provides(device: str, op: str, dtypes: Tuple = (), mode: str = "") -> bool:
    """Whether ``device`` registers ``op`` for ``dtypes`` and ``mode`` (a query that never
    raises: e.g. does a device without host arrays run this set-up op itself?)."""
    try:
        lookup(device, op, dtypes, mode)
    except KeyError:
        return False
    return True


def available(device: str | None = None) -> list:
    """All registered keys (optionally for one device), sorted."""
    if device is not None:
        _ensure_loaded(device)
    return sorted(k for k in _REGISTRY if device is None or k[0] == device)
