"""Plain NumPy / exact-arithmetic oracles for the kernels (used by the tests)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

__all__ = ["spmv", "residual", "dot", "nrm2", "exact_sum", "exact_dot", "two_prod_exact",
           "fsum_dot", "fsum_sum", "gamma"]


def spmv(indptr, indices, data, x, out_dtype=np.float64):
    """``A x`` row by row in FP64 (values and ``x`` cast to FP64 first, so FP32
    products are exact; SciPy's CSR product sums each row in order)."""
    n = indptr.size - 1
    A = sp.csr_matrix((np.asarray(data, dtype=np.float64), indices, indptr),
                      shape=(n, x.size))
    y = A @ np.asarray(x, dtype=np.float64)
    return np.asarray(y, dtype=np.float64).astype(out_dtype)


def residual(indptr, indices, data, x, b):
    return b.astype(np.float64) - spmv(indptr, indices, data, x)


def dot(x, y):
    return float(np.dot(x.astype(np.float64), y.astype(np.float64)))


def nrm2(x):
    return float(np.linalg.norm(x.astype(np.float64)))


# --- exact oracles for the compensated kernels (tests of kernels/eft.py) ------------
#
# Fraction arithmetic is exact for every finite float: these are the ground
# truth for ill-conditioned sums and dots, where allclose on easy data proves
# nothing.  They are slow (pure Python); fsum_dot is the fast exact-then-rounded one.

def exact_sum(x):
    """``sum(x)`` exactly, as a :class:`fractions.Fraction` (finite inputs)."""
    return sum((Fraction(float(v)) for v in np.asarray(x).ravel()), Fraction(0))


def exact_dot(x, y):
    """``x . y`` exactly, as a :class:`fractions.Fraction` (finite inputs)."""
    x = np.asarray(x).ravel()
    y = np.asarray(y).ravel()
    return sum((Fraction(float(a)) * Fraction(float(b)) for a, b in zip(x, y)),
               Fraction(0))


def _split(a):
    # Veltkamp: hi + lo == a, halves of <= 26 bits (NumPy never contracts to FMA)
    c = 134217729.0 * a                 # (2^27 + 1) a
    hi = c - (c - a)
    return hi, a - hi


def two_prod_exact(x, y):
    """Dekker's TwoProduct on float64 arrays: ``p + e == x * y`` exactly.

    Valid while no product overflows, ``|x|, |y| < 2^996`` and no error
    term underflows (``|x y| >= 2^-969``); :func:`fsum_dot` checks this.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    p = x * y                                                   # p = fl(x y)
    xh, xl = _split(x)
    yh, yl = _split(y)
    e = xl * yl - (((p - xh * yh) - xl * yh) - xh * yl)         # p + e == x y
    return p, e


def fsum_dot(x, y):
    """``x . y`` correctly rounded to float64: ``math.fsum`` of the exact
    products ``p_i + e_i`` (Dekker splitting).  FP32 inputs: their products
    are exact in FP64, so the split is not needed.

    Falls back to :func:`exact_dot` when the splitting could be inexact
    (huge, tiny or non-finite values).
    """
    x = np.asarray(x).ravel()
    y = np.asarray(y).ravel()
    if x.dtype == np.float32 and y.dtype == np.float32:
        return math.fsum((x.astype(np.float64) * y.astype(np.float64)).tolist())
    xd = x.astype(np.float64)
    yd = y.astype(np.float64)
    ax, ay = np.abs(xd), np.abs(yd)
    prod = ax * ay
    nz = prod != 0
    safe = (np.all(np.isfinite(prod)) and (ax.max(initial=0) < 2.0**996)
            and (ay.max(initial=0) < 2.0**996)
            and np.all(prod[nz] >= 2.0**-969))
    if not safe:
        return float(exact_dot(x, y))
    p, e = two_prod_exact(xd, yd)
    return math.fsum(np.concatenate([p, e]).tolist())


def fsum_sum(x):
    """``sum(x)`` correctly rounded to float64 (``math.fsum``)."""
    return math.fsum(np.asarray(x, dtype=np.float64).ravel().tolist())


def gamma(n, u):
    """Higham's ``gamma_n = n u / (1 - n u)`` (``inf`` when ``n u >= 1``)."""
    nu = n * u
    return nu / (1.0 - nu) if nu < 1 else math.inf
