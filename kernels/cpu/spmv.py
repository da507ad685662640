"""CSR sparse matrix-vector products on the CPU (Numba).

``y = A x`` with ``A`` in CSR form (``indptr``, ``indices``, ``data``).  The
values, the input and the output may each be FP32 or FP64; the casts are fused
into the loop (no temporary copy of ``x`` or ``y``).  The accumulator is a
separate choice:

* ``acc64`` -- every row sum is carried in FP64 (products of FP32 values with
  FP32/FP64 inputs are formed exactly enough in FP64), then rounded once to
  ``y``'s dtype;
* ``acc32`` -- the row sum is carried in FP32 (what a pure FP32 library does).

Work is split over *row partitions balanced by nonzeros* (``parts``, computed
once per matrix by :func:`partition_rows`), so a matrix with a few long rows
does not leave one core idle.  Memory traffic per product, for ``nnz``
nonzeros and ``n`` rows with 32-bit indices: ``nnz * (4 + sizeof(value))``
bytes of matrix plus the vectors, so FP32 values move ~2/3 of FP64's bytes
(the ~1.5x bound the benchmarks compare against).
"""
import numpy as np
from numba import njit, prange, get_num_threads

from ._config import JIT
from ..registry import register


def partition_rows(indptr, nparts=None):
    """Row boundaries splitting the rows into ``nparts`` runs of about equal
    ``nnz + rows`` work.  Returns an int64 array of length ``nparts + 1``."""
    n = indptr.size - 1
    if nparts is None:
        nparts = 4 * get_num_threads()
    nparts = max(1, min(nparts, n))
    # work of a prefix of rows: nonzeros plus one unit per row (the store of y[i])
    work = indptr.astype(np.int64) + np.arange(n + 1, dtype=np.int64)
    targets = np.linspace(0, work[-1], nparts + 1)
    bounds = np.searchsorted(work, targets, side="left").astype(np.int64)
    bounds[0], bounds[-1] = 0, n
    return np.maximum.accumulate(bounds)


@njit(parallel=True, **JIT)
def _csr_acc64(parts, indptr, indices, data, x, y):
    for t in prange(parts.size - 1):
        for i in range(parts[t], parts[t + 1]):
            acc = 0.0  # float64
            for k in range(indptr[i], indptr[i + 1]):
                acc += np.float64(data[k]) * np.float64(x[indices[k]])
            y[i] = acc


@njit(parallel=True, **JIT)
def _csr_acc32(parts, indptr, indices, data, x, y):
    for t in prange(parts.size - 1):
        for i in range(parts[t], parts[t + 1]):
            acc = np.float32(0.0)
            for k in range(indptr[i], indptr[i + 1]):
                acc += np.float32(data[k]) * np.float32(x[indices[k]])
            y[i] = acc


@njit(parallel=True, **JIT)
def _csr_residual(parts, indptr, indices, data, x, b, r):
    for t in prange(parts.size - 1):
        for i in range(parts[t], parts[t + 1]):
            acc = np.float64(b[i])
            for k in range(indptr[i], indptr[i + 1]):
                acc -= np.float64(data[k]) * np.float64(x[indices[k]])
            r[i] = acc


_F = ("float32", "float64")
_ALL = [(v, xi, yo) for v in _F for xi in _F for yo in _F]


@register("cpu", "spmv", _ALL, mode="acc64")
def csr_spmv_acc64(parts, indptr, indices, data, x, y):
    """``y <- A x``, row sums in FP64.  Dtypes key: ``(data, x, y)``."""
    _csr_acc64(parts, indptr, indices, data, x, y)


@register("cpu", "spmv", _ALL, mode="acc32")
def csr_spmv_acc32(parts, indptr, indices, data, x, y):
    """``y <- A x``, row sums in FP32.  Dtypes key: ``(data, x, y)``."""
    _csr_acc32(parts, indptr, indices, data, x, y)


@register("cpu", "residual", [(v, "float64", "float64", "float64") for v in _F]
          + [(v, "float32", "float32", "float32") for v in _F], mode="acc64")
def csr_residual(parts, indptr, indices, data, x, b, r):
    """``r <- b - A x`` in one pass, row sums in FP64.  Dtypes key: ``(data, x, b, r)``."""
    _csr_residual(parts, indptr, indices, data, x, b, r)
