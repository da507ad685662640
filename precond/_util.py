"""Small shared pieces of the preconditioners: their warning class, row lists in
messages, and the device their host-side set-up runs on."""
from __future__ import annotations

import numbers

import numpy as np

from mpsolve.backend import HOST_DEVICE, is_host
from mpsolve.operator import ThreadBuffers  # noqa: F401  (re-exported for the preconditioners)
from mpsolve.kernels import provides

__all__ = ["PreconditionerWarning", "ThreadBuffers", "rows_text", "setup_device", "wide_dtype"]


class PreconditionerWarning(RuntimeWarning):
    """A preconditioner set-up replaced some rows by its documented fallback rule."""


def rows_text(rows, limit=10):
    """``"3, 17, 42, ..."`` -- the first ``limit`` row numbers, for messages."""
    rows = [int(i) for i in np.asarray(rows)[:limit]]
    return ", ".join(map(str, rows)) + (", ..." if len(rows) == limit else "")


def empty_lines_text(P) -> str:
    """``"empty rows: 1, 5; empty columns: none"`` for a square CSR pattern with empty rows
    or columns (structurally singular: no factorisation exists), ``""`` otherwise."""
    empty_r = np.flatnonzero(np.diff(P.indptr) == 0)
    empty_c = np.setdiff1d(np.arange(P.shape[1]), P.indices)
    if not (empty_r.size or empty_c.size):
        return ""
    return (f"empty rows: {rows_text(empty_r) or 'none'}; "
            f"empty columns: {rows_text(empty_c) or 'none'}")


def setup_device(device: str, op: str | None = None) -> str:
    """Where the FP64 set-up kernels (factorisations, local-system gathers) of a
    preconditioner for ``device`` run: the device itself when its arrays live on the
    host, else :data:`mpsolve.backend.HOST_DEVICE` (the stored operators then move to
    ``device``) -- unless ``op`` is named and ``device`` registers that set-up op itself
    (the GPU's ``local_lu_solve``, ``local_tri_solve``, ``block_tri_isai``): then the
    device runs it, on its own arrays.  Asked of the registry, never of a device name."""
    if is_host(device):
        return device
    if op is not None and provides(device, op, ("float64",)):
        return device
    return HOST_DEVICE


def wide_dtype(dtype) -> np.dtype:
    """The precision a set-up runs in for data of ``dtype``: float64, or complex128
    for complex data (also the dtype key of the set-up kernels)."""
    return np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def check_count(value, name, none_ok=True, what="a positive integer"):
    """``value`` as an int >= 1 (NumPy integers too; not a bool, a float or NaN), or None
    where ``none_ok``; else a ValueError naming the argument."""
    if value is None and none_ok:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or value < 1:
        raise ValueError(f"{name}={value!r}: use {what}" + (" or None" if none_ok else ""))
    return int(value)


def check_amount(value, name, least=0.0):
    """``value`` as a finite float >= ``least`` (NumPy scalars too; not a bool); else a
    ValueError naming the argument."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or \
            not np.isfinite(value) or value < least:
        raise ValueError(f"{name}={value!r}: use a finite number >= {least:g}")
    return float(value)
