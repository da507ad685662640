"""Plain NumPy / exact-arithmetic oracles for the kernels (used by the tests)."""
from __future__ import annotations

import numpy as np

__all__ = ["spmv", "residual", "dot", "nrm2"]


def spmv(indptr, indices, data, x, out_dtype=np.float64):
    """``A x`` row by row in FP64 (``math.fsum``-free but exact enough for FP32 checks)."""
    n = indptr.size - 1
    y = np.zeros(n, dtype=np.float64)
    for i in range(n):
        s, e = indptr[i], indptr[i + 1]
        y[i] = np.dot(data[s:e].astype(np.float64), x[indices[s:e]].astype(np.float64))
    return y.astype(out_dtype)


def residual(indptr, indices, data, x, b):
    return b.astype(np.float64) - spmv(indptr, indices, data, x)


def dot(x, y):
    return float(np.dot(x.astype(np.float64), y.astype(np.float64)))


def nrm2(x):
    return float(np.linalg.norm(x.astype(np.float64)))
