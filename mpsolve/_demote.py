"""Range-checked demotion of data to a lower precision."""
from __future__ import annotations

import numpy as np

__all__ = ["PrecisionRangeError", "demote"]


class PrecisionRangeError(ValueError):
    """Values do not fit the requested storage precision.

    Raised before a solve starts (never as a NaN later): a value larger than
    the format's largest finite number, or a nonzero so small it would round to
    zero.  The message says how many values, the largest/smallest magnitude, and
    the fixes: scale the system, or store that part in FP64.
    """


def demote(values: np.ndarray, dtype, what: str) -> np.ndarray:
    """Return ``values`` cast to ``dtype``, after checking that they fit.

    ``values`` is never modified; the result is a new array unless no cast is
    needed (then ``values`` itself is returned, read-only use intended).
    """
    dtype = np.dtype(dtype)
    if values.dtype == dtype:
        return values
    if dtype.itemsize >= values.dtype.itemsize:
        return values.astype(dtype)
    fi = np.finfo(dtype)
    a = np.abs(values)
    big = a > float(fi.max)
    if big.any():
        raise PrecisionRangeError(
            f"{what}: {int(big.sum())} value(s) exceed the {dtype.name} range "
            f"(largest |value| {a.max():.3e} > {fi.max:.3e}); scale the system "
            f"(e.g. divide A and b by a power of two) or keep {what} in float64 "
            f"(precision='double' or 'eft')"
        )
    # a nonzero below half the smallest subnormal rounds to zero
    tiny = (a > 0) & (a < float(fi.smallest_subnormal) / 2)
    if tiny.any():
        raise PrecisionRangeError(
            f"{what}: {int(tiny.sum())} nonzero value(s) underflow to zero in "
            f"{dtype.name} (smallest |value| {a[a > 0].min():.3e}); scale the system "
            f"or keep {what} in float64 (precision='double' or 'eft')"
        )
    return values.astype(dtype)
