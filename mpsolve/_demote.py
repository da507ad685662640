"""Range-checked demotion of data to a lower precision."""
from __future__ import annotations

import numpy as np

from .backend import HOST_DEVICE, device_of, is_host, on_host, to_host
from .kernels import lookup

__all__ = ["PrecisionRangeError", "demote", "row_scale", "bsr_row_scale"]


class PrecisionRangeError(ValueError):
    """Values do not fit the requested storage precision.

    Raised before a solve starts (never as a NaN later): a value larger than
    the format's largest finite number, or a nonzero so small it would round to
    zero while it still matters in its row (see :func:`demote`).  The message says how many values, the largest/smallest magnitude, and
    the fixes: scale the system, or store that part in FP64.  ``what`` names the part
    (``"A"``, ``"b"``, a preconditioner's storage), as :func:`demote` was told.
    """

    def __init__(self, message, what=None):
        super().__init__(message)
        self.what = what


_FINFO = {}     # dtype -> np.finfo(dtype)


def demote(values: np.ndarray, dtype, what: str, scale=None, device=None) -> np.ndarray:
    """Return ``values`` cast to ``dtype``, after checking that they fit.

    ``values`` is never modified; the result is a new array unless no cast is
    needed (then ``values`` itself is returned, read-only use intended).

    ``scale`` (optional, same shape, or a function returning it -- called only when a
    value underflows): the magnitude each value is measured against, e.g. the largest
    entry of its matrix row.  A nonzero that underflows to zero
    but is below ``eps(dtype) * scale`` is *negligible*: rounding every other entry
    of its row to ``dtype`` already perturbs the row by more, so it is flushed to
    zero (the documented rule) instead of raising.

    Complex values are checked part by part (a complex64 holds two float32 numbers): the
    real and imaginary parts of ``values`` are scanned against the range of ``dtype``'s
    real precision, each part measured against its value's ``scale``.

    ``device``: whose ``range_scan`` kernel checks the values (default: the
    device of ``values``; host values headed for an accelerator are checked by the
    host device's kernel, before they are copied); the values stay where they are.
    """
    dtype = np.dtype(dtype)
    if values.dtype == dtype:
        return values
    if values.dtype.kind == "c" and dtype.kind != "c":
        raise TypeError(f"{what}: complex values cannot be stored as {dtype.name}; "
                        "use a complex storage dtype")
    if dtype.itemsize >= values.dtype.itemsize:
        return values.astype(dtype)
    fi = _FINFO.get(dtype)
    if fi is None:
        fi = _FINFO[dtype] = np.finfo(dtype)
    device = device or device_of(values)
    if device != HOST_DEVICE and on_host(values) and not is_host(device):
        device = HOST_DEVICE        # host values (set-up data) are checked where they are
    parts = values.reshape(-1)
    if parts.dtype.kind == "c":     # the real and imaginary parts, interleaved
        parts = parts.view(np.finfo(parts.dtype).dtype)
    if parts.dtype.itemsize > 8:    # long double (host only): no compiled kernel takes it
        a = np.abs(parts)
        big_at = bool((a > fi.max).any())
        tiny_at = bool(((a > 0) & (a < fi.smallest_subnormal / 2)).any())
    else:
        scan = lookup(device, "range_scan", (parts.dtype,))
        big_at, tiny_at = scan(parts, float(fi.max), float(fi.smallest_subnormal) / 2)
    if not (big_at or tiny_at):  # the common case: one pass, then the cast
        return values.astype(dtype)
    a = np.abs(to_host(parts))
    big = a > float(fi.max)
    if big.any():
        raise PrecisionRangeError(
            f"{what}: {int(big.sum())} value(s) exceed the {dtype.name} range "
            f"(largest |value| {a.max():.3e} > {fi.max:.3e}); scale the system "
            f"(e.g. divide A and b by a power of two) or keep {what} in float64 "
            f"(precision='double' or 'eft')", what
        )
    # a nonzero below half the smallest subnormal rounds to zero
    tiny = (a > 0) & (a < float(fi.smallest_subnormal) / 2)
    if tiny.any() and scale is not None:
        sc = np.asarray(scale() if callable(scale) else scale).reshape(-1)
        if values.dtype.kind == "c":
            sc = np.repeat(sc, 2)                          # per part, as ``parts``
        tiny &= ~(a < float(fi.eps) * sc)                 # negligible ones may flush
    if tiny.any():
        raise PrecisionRangeError(
            f"{what}: {int(tiny.sum())} nonzero value(s) underflow to zero in "
            f"{dtype.name} (smallest |value| {a[tiny].min():.3e}) and are not negligible "
            f"in their rows; scale the system or keep {what} in float64 "
            f"(precision='double' or 'eft')", what
        )
    return values.astype(dtype)


def row_scale(indptr, values):
    """For each stored value, the largest magnitude in its row (the ``scale`` of
    :func:`demote` for a CSR matrix)."""
    a = np.abs(values)
    rows = np.diff(indptr)
    out = np.zeros_like(a)
    nz = np.flatnonzero(rows)
    if nz.size:
        m = np.maximum.reduceat(a, indptr[nz])
        out[:] = np.repeat(m, rows[nz])
    return out


def bsr_row_scale(indptr, blocks):
    """For each stored value of a BSR matrix (``blocks`` of shape ``(nnzb, b, b)``, block
    row pointers ``indptr``), the largest magnitude in its scalar row (the ``scale`` of
    :func:`demote` for stored blocks).  Host arrays (device ones are read back)."""
    ip, a = to_host(indptr), np.abs(to_host(blocks))
    out = np.zeros(a.shape[:2])
    rows = np.diff(ip)
    nz = np.flatnonzero(rows)
    if nz.size:
        m = np.maximum.reduceat(a.max(axis=2), ip[nz], axis=0)   # (block rows, b)
        out[:] = np.repeat(m, rows[nz], axis=0)
    return np.broadcast_to(out[:, :, None], a.shape)
