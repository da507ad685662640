"""CSR sparse matrix-vector products on the CPU (Numba).

``y = A x`` with ``A`` in CSR form (``indptr``, ``indices``, ``data``).  The
values, the input and the output may each be FP32 or FP64 (or each complex64 or
complex128: the same kernels, with complex accumulators); the casts are fused
into the loop (no temporary copy of ``x`` or ``y``).  The accumulator is a
separate choice:

* ``acc64`` -- every row sum is carried in FP64 (products of FP32 values with
  FP32/FP64 inputs are formed exactly enough in FP64), then rounded once to
  ``y``'s dtype;
* ``acc32`` -- the row sum is carried in FP32 (what a pure FP32 library does).

Each row's sum adds its products two at a time, ``acc += (a_k x_k + a_k+1 x_k+1)``, as
PETSc's ``MatMult`` for AIJ does (``PetscSparseDensePlusDot``): the chain of dependent
additions is half the row's length, and a row of a few dozen entries is bound by that
chain, not by memory (bcsstk16, 60 a row: 195 -> 134 us a product; 7-point Poisson
1.28x).  The error bound is that of the sequential sum.  The SpMM (:mod:`.spmm`) adds in
the same order, so its columns are these products bit for bit.  The residual ``b - A x``
keeps SciPy's order (one product at a time): it runs once per solve, not per iteration.

Indices are read as unsigned (``np.uint64(indices[k])``): Numba then emits no
negative-index wraparound test in the inner loop (about 2x on this loop).

Work is split over *row partitions balanced by nonzeros* (``parts``, computed
once per matrix by :func:`partition_rows`), so a matrix with a few long rows
does not leave one core idle.  Memory traffic per product, for ``nnz``
nonzeros and ``n`` rows with 32-bit indices: ``nnz * (4 + sizeof(value))``
bytes of matrix plus the vectors, so FP32 values move ~2/3 of FP64's bytes
(the ~1.5x bound the benchmarks compare against).
"""
import numpy as np
from numba import njit, prange, get_num_threads

from ._config import JIT, PARALLEL_MIN
from .field import abs2, cmul, narrow, wide
from ..registry import register, register_plan

#: Below this many ``nnz + rows`` the SpMV runs serially.
PARALLEL_MIN_WORK = 4 * PARALLEL_MIN


@register_plan("cpu", "spmv")
@register_plan("cpu", "bsrmv")
def partition_rows(indptr, nparts=None):
    """Row boundaries splitting the rows into ``nparts`` runs of about equal
    ``nnz + rows`` work.  Returns an int64 array of length ``nparts + 1``.

    By default ``4 x threads`` partitions, or a single one (a serial product,
    no parallel region) when the matrix has fewer than :data:`PARALLEL_MIN_WORK`
    nonzeros plus rows: opening a parallel region costs more than it saves there.
    """
    n = indptr.size - 1
    if nparts is None:
        work_total = int(indptr[-1]) + n
        nparts = 4 * get_num_threads() if work_total >= PARALLEL_MIN_WORK else 1
    nparts = max(1, min(nparts, n))
    if nparts == 1:
        return np.array([0, n], dtype=np.int64)
    # work of a prefix of rows: nonzeros plus one unit per row (the store of y[i])
    work = indptr.astype(np.int64) + np.arange(n + 1, dtype=np.int64)
    targets = np.linspace(0, work[-1], nparts + 1)
    bounds = np.searchsorted(work, targets, side="left").astype(np.int64)
    bounds[0], bounds[-1] = 0, n
    return np.maximum.accumulate(bounds)


@njit(inline="always", **JIT)
def _rows_acc64(lo, hi, indptr, indices, data, x, y):
    one = np.uint64(1)
    for i in range(lo, hi):
        acc = wide(y.dtype.type(0.0))  # float64 (complex128)
        k, e = np.uint64(indptr[i]), np.uint64(indptr[i + 1])
        while k + one < e:             # two products a step (module docstring)
            acc += (wide(data[k]) * wide(x[np.uint64(indices[k])])
                    + wide(data[k + one]) * wide(x[np.uint64(indices[k + one])]))
            k += np.uint64(2)
        if k < e:
            acc += wide(data[k]) * wide(x[np.uint64(indices[k])])
        y[i] = acc  # rounded once to y's dtype


@njit(inline="always", **JIT)
def _rows_acc32(lo, hi, indptr, indices, data, x, y):
    one = np.uint64(1)
    for i in range(lo, hi):
        acc = narrow(y.dtype.type(0.0))  # float32 (complex64)
        k, e = np.uint64(indptr[i]), np.uint64(indptr[i + 1])
        while k + one < e:
            acc += (narrow(data[k]) * narrow(x[np.uint64(indices[k])])
                    + narrow(data[k + one]) * narrow(x[np.uint64(indices[k + one])]))
            k += np.uint64(2)
        if k < e:
            acc += narrow(data[k]) * narrow(x[np.uint64(indices[k])])
        y[i] = acc


@njit(inline="always", **JIT)
def _rows_residual(lo, hi, indptr, indices, data, x, b, r):
    # one product at a time, in stored order: SciPy's ``b - A @ x`` to the last bit.  The
    # true residual decides convergence; where it sits at FP64's rounding level (nos7,
    # cond 4e9) another order moves it across the tolerance against SciPy's own check
    for i in range(lo, hi):
        acc = wide(b[i])
        for k in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            acc -= wide(data[k]) * wide(x[np.uint64(indices[k])])
        r[i] = acc


@njit(inline="always", **JIT)
def _rows_acc64_dot(lo, hi, indptr, indices, data, x, y):
    one = np.uint64(1)
    s = y.dtype.type(0.0)
    for i in range(lo, hi):
        acc = wide(y.dtype.type(0.0))  # float64 (complex128)
        k, e = np.uint64(indptr[i]), np.uint64(indptr[i + 1])
        while k + one < e:
            acc += (wide(data[k]) * wide(x[np.uint64(indices[k])])
                    + wide(data[k + one]) * wide(x[np.uint64(indices[k + one])]))
            k += np.uint64(2)
        if k < e:
            acc += wide(data[k]) * wide(x[np.uint64(indices[k])])
        yi = y.dtype.type(acc)
        y[i] = yi
        s += cmul(y.dtype.type(x[i]), yi)  # conj(x_i) y_i
    return s


# Parallel drivers: one row partition per task.  A single partition runs serially
# (no parallel region is opened): see ``partition_rows``.
@njit(parallel=True, **JIT)
def _csr_acc64_par(parts, indptr, indices, data, x, y):
    for t in prange(parts.size - 1):
        _rows_acc64(parts[t], parts[t + 1], indptr, indices, data, x, y)


@njit(**JIT)
def _csr_acc64_ser(parts, indptr, indices, data, x, y):
    _rows_acc64(0, indptr.size - 1, indptr, indices, data, x, y)


@njit(parallel=True, **JIT)
def _csr_acc32_par(parts, indptr, indices, data, x, y):
    for t in prange(parts.size - 1):
        _rows_acc32(parts[t], parts[t + 1], indptr, indices, data, x, y)


@njit(**JIT)
def _csr_acc32_ser(parts, indptr, indices, data, x, y):
    _rows_acc32(0, indptr.size - 1, indptr, indices, data, x, y)


@njit(parallel=True, **JIT)
def _csr_acc64_dot_par(parts, indptr, indices, data, x, y):
    part = np.empty(parts.size - 1, dtype=y.dtype)
    for t in prange(parts.size - 1):
        part[t] = _rows_acc64_dot(parts[t], parts[t + 1], indptr, indices, data, x, y)
    s = y.dtype.type(0.0)
    for t in range(part.size):  # fixed order: the same partitions give the same sum
        s += part[t]
    return s


@njit(**JIT)
def _csr_acc64_dot_ser(parts, indptr, indices, data, x, y):
    return _rows_acc64_dot(0, indptr.size - 1, indptr, indices, data, x, y)


@njit(parallel=True, **JIT)
def _csr_residual_par(parts, indptr, indices, data, x, b, r):
    for t in prange(parts.size - 1):
        _rows_residual(parts[t], parts[t + 1], indptr, indices, data, x, b, r)


@njit(**JIT)
def _csr_residual_ser(parts, indptr, indices, data, x, b, r):
    _rows_residual(0, indptr.size - 1, indptr, indices, data, x, b, r)


@njit(inline="always", **JIT)
def _rows_residual_norms(lo, hi, indptr, indices, data, x, b, r):
    # _rows_residual (the same products in the same order: r to the same bits) and, in the
    # same pass, sum_i |r_i|^2 of the stored r and sum_i (|b_i| + sum_j |a_ij| |x_j|)^2
    # (_rows_residual_scale's sum), both in FP64
    ssq = 0.0
    s = 0.0
    for i in range(lo, hi):
        bi = wide(b[i])
        acc = bi
        v = abs(bi)
        for k in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            a = wide(data[k])
            xj = wide(x[np.uint64(indices[k])])
            acc -= a * xj
            v += abs(a) * abs(xj)
        r[i] = acc
        ssq += abs2(wide(r[i]))
        s += v * v
    return ssq, s


@njit(parallel=True, **JIT)
def _csr_residual_norms_par(parts, indptr, indices, data, x, b, r):
    ssq = np.empty(parts.size - 1, dtype=np.float64)
    part = np.empty(parts.size - 1, dtype=np.float64)
    for t in prange(parts.size - 1):
        ssq[t], part[t] = _rows_residual_norms(parts[t], parts[t + 1], indptr, indices, data,
                                               x, b, r)
    return ssq.sum(), part.sum()


@njit(**JIT)
def _csr_residual_norms_ser(parts, indptr, indices, data, x, b, r):
    return _rows_residual_norms(0, indptr.size - 1, indptr, indices, data, x, b, r)


_F = ("float32", "float64")
_C = ("complex64", "complex128")
# the same kernels for complex values and vectors (field.wide/narrow/cmul: complex128 /
# complex64 accumulators, conjugated dot); one field per call
_ALL = [(v, xi, yo) for f in (_F, _C) for v in f for xi in f for yo in f]
_SQ = [(v, d, d) for f in (_F, _C) for v in f for d in f]


@register("cpu", "spmv", _ALL, mode="acc64")
def csr_spmv_acc64(parts, indptr, indices, data, x, y):
    """``y <- A x``, row sums in FP64.  Dtypes key: ``(data, x, y)``."""
    (_csr_acc64_par if parts.size > 2 else _csr_acc64_ser)(parts, indptr, indices, data, x, y)


@register("cpu", "spmv_dot", [k for k in _SQ if k[0] in _F], mode="acc64")
def csr_spmv_dot_acc64(parts, indptr, indices, data, x, y):
    """``y <- A x`` (row sums in FP64) and return ``x . y`` accumulated in ``y``'s dtype,
    in one pass (CG's ``q = A p; p . q``: ``p`` and ``q`` are not read again).
    ``A`` square.  Dtypes key: ``(data, x, y)`` with ``x`` and ``y`` alike."""
    f = _csr_acc64_dot_par if parts.size > 2 else _csr_acc64_dot_ser
    return float(f(parts, indptr, indices, data, x, y))


@register("cpu", "spmv_dot", [k for k in _SQ if k[0] in _C], mode="acc64")
def csr_spmv_dot_acc64_complex(parts, indptr, indices, data, x, y):
    """:func:`csr_spmv_dot_acc64` for complex ``A``, ``x``, ``y``: returns ``x^H y``, a
    Python complex."""
    f = _csr_acc64_dot_par if parts.size > 2 else _csr_acc64_dot_ser
    return complex(f(parts, indptr, indices, data, x, y))


@register("cpu", "spmv", _ALL, mode="acc32")
def csr_spmv_acc32(parts, indptr, indices, data, x, y):
    """``y <- A x``, row sums in FP32.  Dtypes key: ``(data, x, y)``."""
    (_csr_acc32_par if parts.size > 2 else _csr_acc32_ser)(parts, indptr, indices, data, x, y)


@njit(inline="always", **JIT)
def _rows_residual_scale(lo, hi, indptr, indices, data, x, b):
    # sum over rows of (|b_i| + sum_j |a_ij| |x_j|)^2 in FP64; complex entries by modulus
    s = 0.0
    for i in range(lo, hi):
        v = abs(wide(b[i]))
        for k in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            v += abs(wide(data[k])) * abs(wide(x[np.uint64(indices[k])]))
        s += v * v
    return s


@njit(parallel=True, **JIT)
def _csr_residual_scale_par(parts, indptr, indices, data, x, b):
    part = np.empty(parts.size - 1, dtype=np.float64)
    for t in prange(parts.size - 1):
        part[t] = _rows_residual_scale(parts[t], parts[t + 1], indptr, indices, data, x, b)
    return part.sum()


@njit(**JIT)
def _csr_residual_scale_ser(parts, indptr, indices, data, x, b):
    return _rows_residual_scale(0, indptr.size - 1, indptr, indices, data, x, b)


@register("cpu", "residual_scale", [(v, d, d) for v, d, _ in _SQ], mode="acc64")
def csr_residual_scale(parts, indptr, indices, data, x, b):
    """``sum_i (|b_i| + sum_j |a_ij| |x_j|)^2`` in FP64 (one pass over ``A``, as the
    residual's): the square of the norm that bounds the rounding error of ``b - A x``
    computed by :func:`csr_residual` (:meth:`mpsolve._system.Problem.residual_bound`).
    ``inf`` where it overflows.  Dtypes key: ``(data, x, b)``."""
    f = _csr_residual_scale_par if parts.size > 2 else _csr_residual_scale_ser
    return float(f(parts, indptr, indices, data, x, b))


@register("cpu", "residual_norms", [(v, d, d, d) for v, d, _ in _SQ], mode="acc64")
def csr_residual_norms(parts, indptr, indices, data, x, b, r):
    """:func:`csr_residual` (``r`` to the same bits) and, in the same pass over ``A``,
    ``(sum_i |r_i|^2, sum_i (|b_i| + sum_j |a_ij| |x_j|)^2)`` in FP64: the square of the
    residual's norm (of ``r`` as stored) and :func:`csr_residual_scale`'s sum.  A solve's
    true residual, its norm and its rounding bound at the cost of the residual alone
    (the sums are compute the pass has room for: it waits on memory).  ``inf`` or NaN
    where a sum overflows or an entry is not finite: the caller judges them.  Dtypes
    key: ``(data, x, b, r)``."""
    f = _csr_residual_norms_par if parts.size > 2 else _csr_residual_norms_ser
    ssq, s = f(parts, indptr, indices, data, x, b, r)
    return float(ssq), float(s)


@register("cpu", "residual", [(v, d, d, d) for v, d, _ in _SQ], mode="acc64")
def csr_residual(parts, indptr, indices, data, x, b, r):
    """``r <- b - A x`` in one pass, row sums in FP64.  Dtypes key: ``(data, x, b, r)``."""
    (_csr_residual_par if parts.size > 2 else _csr_residual_ser)(parts, indptr, indices, data,
                                                                 x, b, r)
