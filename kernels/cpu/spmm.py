"""Several right-hand sides at once on the CPU (Numba): the block kernels.

A block of ``k`` vectors is an ``(n, k)`` C-contiguous array: row ``i``'s ``k`` values are
adjacent, so one sweep over a sparse matrix reads each stored entry once and applies it to
all ``k`` columns (a CSR x dense product, *SpMM*).  The matrix traffic of ``k`` products is
then that of one; the vectors' traffic stays ``k`` times a vector's.

* ``spmm`` / ``residual_mm`` -- ``Y = A X`` and ``R = B - A X`` over CSR ``A``, each row's
  ``k`` sums carried in FP64 (``acc64``; ``acc32``: FP32), the casts fused, the products
  of one column in the stored order of :mod:`.spmv` (so column ``c`` of ``Y`` is bit for
  bit the ``spmv`` of column ``c`` of ``X``);
* ``dmul_mm`` -- ``Y = diag(d) X`` (point Jacobi);
* ``ilu_sweeps_mm`` -- ILU(0)'s two triangular sweeps (:mod:`.ilu`) with ``k`` right-hand
  sides per row: the latency-bound chain from row to row is paid once for ``k`` columns;
* the column ops: per-column dots and norms, and updates with one scalar per column
  (``a`` an FP64 array of length ``k``): what a block Krylov method with ``k``
  independent iterations needs (``mpsolve.krylov.block_cg``, ``block_gmres``);
* block CG's fused passes: ``col_cg_step`` (``x += a p; r -= a q``, ``||r||`` and ``r . z``
  with ``z = d r`` for point Jacobi formed in the pass, not stored) and ``col_dxpay``
  (``p = d r + beta p``);
* the basis ops of ``k`` independent GMRES bases stored as ``V`` of shape ``(m + 1, n, k)``:
  ``V[i]`` is the ``i``-th basis vector of every column; ``col_mdot_nrm2`` /
  ``col_maxpy_nrm2`` give ``||w_c||`` before / after the projection from the same pass.

Every kernel has a serial and a ``prange`` form (rows split in chunks for the
reductions, merged in a fixed order), dispatched on ``n`` as :mod:`.blas1` does.  Real
data only (FP32/FP64): a complex block solve runs column by column.
"""
import numpy as np
from numba import get_num_threads, njit, prange

from ._config import JIT, NATIVE_REDUCTION_MATH, PARALLEL_MIN
from .ilu import ilu_sweeps
from .intrin import madd
from .spmv import csr_spmv_acc32, csr_spmv_acc64, csr_spmv_dot_acc64
from ..registry import register

_F = ("float32", "float64")
_MAT = [(v, x, y) for v in _F for x in _F for y in _F]
_VEC = [(d,) for d in _F]

#: Rows per chunk of the chunked reductions (a chunk of an ``(n, k)`` block stays in cache).
CHUNK = 2048


# --------------------------------------------------------------------------- SpMM
# Each row's k sums are kept in scalar registers, a group of 8, 4, 2 or 1 columns at a
# time (an accumulator *array* indexed by a run-time column costs a store-to-load round
# trip per product: 10x slower than the SpMV here).  The blocks are read flat
# (``X.reshape(-1)``: entry (j, c) at j k + c) with unsigned indices, as :mod:`.spmv`
# does, so no wraparound test enters the inner loop.  ``acc`` (a length-1 array) carries
# the accumulator's dtype: FP64 for ``acc64``, FP32 for ``acc32``.  The products enter each
# sum two at a time, as :mod:`.spmv`'s rows do (the columns are its products bit for bit).
# ``res``: ``R = B - A X`` (the sums start from ``B`` and subtract one product at a time, as
# the residual kernel does: ``b - a x`` and ``b + (-a) x`` round alike).

@njit(inline="always", **JIT)
def _g8(lo, hi, indptr, indices, data, Xf, Bf, Yf, k, c0, acc, res, dot, D):
    t = acc.dtype.type
    one = np.uint64(1)
    yt = Yf.dtype.type              # X . Y of the stored (rounded) Y
    d0 = d1 = d2 = d3 = d4 = d5 = d6 = d7 = 0.0
    for i in range(lo, hi):
        o = np.uint64(i) * k + c0
        if res:
            s0, s1, s2, s3 = t(Bf[o]), t(Bf[o + 1]), t(Bf[o + 2]), t(Bf[o + 3])
            s4, s5, s6, s7 = t(Bf[o + 4]), t(Bf[o + 5]), t(Bf[o + 6]), t(Bf[o + 7])
        else:
            s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = t(0.0)
        p, e = np.uint64(indptr[i]), np.uint64(indptr[i + 1])
        while p + one < e and not res:  # two products a step (spmv's order)
            a, b = t(data[p]), t(data[p + one])
            j = np.uint64(indices[p]) * k + c0
            l = np.uint64(indices[p + one]) * k + c0
            s0 += a * t(Xf[j]) + b * t(Xf[l])
            s1 += a * t(Xf[j + 1]) + b * t(Xf[l + 1])
            s2 += a * t(Xf[j + 2]) + b * t(Xf[l + 2])
            s3 += a * t(Xf[j + 3]) + b * t(Xf[l + 3])
            s4 += a * t(Xf[j + 4]) + b * t(Xf[l + 4])
            s5 += a * t(Xf[j + 5]) + b * t(Xf[l + 5])
            s6 += a * t(Xf[j + 6]) + b * t(Xf[l + 6])
            s7 += a * t(Xf[j + 7]) + b * t(Xf[l + 7])
            p += np.uint64(2)
        while p < e:                  # the tail; the residual's terms one at a time
            a = -t(data[p]) if res else t(data[p])
            j = np.uint64(indices[p]) * k + c0
            s0 += a * t(Xf[j])
            s1 += a * t(Xf[j + 1])
            s2 += a * t(Xf[j + 2])
            s3 += a * t(Xf[j + 3])
            s4 += a * t(Xf[j + 4])
            s5 += a * t(Xf[j + 5])
            s6 += a * t(Xf[j + 6])
            s7 += a * t(Xf[j + 7])
            p += np.uint64(1)
        Yf[o], Yf[o + 1], Yf[o + 2], Yf[o + 3] = s0, s1, s2, s3
        Yf[o + 4], Yf[o + 5], Yf[o + 6], Yf[o + 7] = s4, s5, s6, s7
        if dot:
            d0 += np.float64(Xf[o]) * np.float64(yt(s0))
            d1 += np.float64(Xf[o + 1]) * np.float64(yt(s1))
            d2 += np.float64(Xf[o + 2]) * np.float64(yt(s2))
            d3 += np.float64(Xf[o + 3]) * np.float64(yt(s3))
            d4 += np.float64(Xf[o + 4]) * np.float64(yt(s4))
            d5 += np.float64(Xf[o + 5]) * np.float64(yt(s5))
            d6 += np.float64(Xf[o + 6]) * np.float64(yt(s6))
            d7 += np.float64(Xf[o + 7]) * np.float64(yt(s7))
    if dot:                         # the rows' X . Y, kept in registers until here
        D[c0] += d0
        D[c0 + 1] += d1
        D[c0 + 2] += d2
        D[c0 + 3] += d3
        D[c0 + 4] += d4
        D[c0 + 5] += d5
        D[c0 + 6] += d6
        D[c0 + 7] += d7


@njit(inline="always", **JIT)
def _g4(lo, hi, indptr, indices, data, Xf, Bf, Yf, k, c0, acc, res, dot, D):
    t = acc.dtype.type
    one = np.uint64(1)
    yt = Yf.dtype.type              # X . Y of the stored (rounded) Y
    d0 = d1 = d2 = d3 = 0.0
    for i in range(lo, hi):
        o = np.uint64(i) * k + c0
        if res:
            s0, s1, s2, s3 = t(Bf[o]), t(Bf[o + 1]), t(Bf[o + 2]), t(Bf[o + 3])
        else:
            s0 = s1 = s2 = s3 = t(0.0)
        p, e = np.uint64(indptr[i]), np.uint64(indptr[i + 1])
        while p + one < e and not res:  # two products a step (spmv's order)
            a, b = t(data[p]), t(data[p + one])
            j = np.uint64(indices[p]) * k + c0
            l = np.uint64(indices[p + one]) * k + c0
            s0 += a * t(Xf[j]) + b * t(Xf[l])
            s1 += a * t(Xf[j + 1]) + b * t(Xf[l + 1])
            s2 += a * t(Xf[j + 2]) + b * t(Xf[l + 2])
            s3 += a * t(Xf[j + 3]) + b * t(Xf[l + 3])
            p += np.uint64(2)
        while p < e:                  # the tail; the residual's terms one at a time
            a = -t(data[p]) if res else t(data[p])
            j = np.uint64(indices[p]) * k + c0
            s0 += a * t(Xf[j])
            s1 += a * t(Xf[j + 1])
            s2 += a * t(Xf[j + 2])
            s3 += a * t(Xf[j + 3])
            p += np.uint64(1)
        Yf[o], Yf[o + 1], Yf[o + 2], Yf[o + 3] = s0, s1, s2, s3
        if dot:
            d0 += np.float64(Xf[o]) * np.float64(yt(s0))
            d1 += np.float64(Xf[o + 1]) * np.float64(yt(s1))
            d2 += np.float64(Xf[o + 2]) * np.float64(yt(s2))
            d3 += np.float64(Xf[o + 3]) * np.float64(yt(s3))
    if dot:
        D[c0] += d0
        D[c0 + 1] += d1
        D[c0 + 2] += d2
        D[c0 + 3] += d3


@njit(inline="always", **JIT)
def _g2(lo, hi, indptr, indices, data, Xf, Bf, Yf, k, c0, acc, res, dot, D):
    t = acc.dtype.type
    one = np.uint64(1)
    yt = Yf.dtype.type              # X . Y of the stored (rounded) Y
    d0 = d1 = 0.0
    for i in range(lo, hi):
        o = np.uint64(i) * k + c0
        if res:
            s0, s1 = t(Bf[o]), t(Bf[o + 1])
        else:
            s0 = s1 = t(0.0)
        p, e = np.uint64(indptr[i]), np.uint64(indptr[i + 1])
        while p + one < e and not res:  # two products a step (spmv's order)
            a, b = t(data[p]), t(data[p + one])
            j = np.uint64(indices[p]) * k + c0
            l = np.uint64(indices[p + one]) * k + c0
            s0 += a * t(Xf[j]) + b * t(Xf[l])
            s1 += a * t(Xf[j + 1]) + b * t(Xf[l + 1])
            p += np.uint64(2)
        while p < e:                  # the tail; the residual's terms one at a time
            a = -t(data[p]) if res else t(data[p])
            j = np.uint64(indices[p]) * k + c0
            s0 += a * t(Xf[j])
            s1 += a * t(Xf[j + 1])
            p += np.uint64(1)
        Yf[o], Yf[o + 1] = s0, s1
        if dot:
            d0 += np.float64(Xf[o]) * np.float64(yt(s0))
            d1 += np.float64(Xf[o + 1]) * np.float64(yt(s1))
    if dot:
        D[c0] += d0
        D[c0 + 1] += d1


@njit(inline="always", **JIT)
def _g1(lo, hi, indptr, indices, data, Xf, Bf, Yf, k, c0, acc, res, dot, D):
    t = acc.dtype.type
    one = np.uint64(1)
    yt = Yf.dtype.type              # X . Y of the stored (rounded) Y
    d0 = 0.0
    for i in range(lo, hi):
        o = np.uint64(i) * k + c0
        s0 = t(Bf[o]) if res else t(0.0)
        p, e = np.uint64(indptr[i]), np.uint64(indptr[i + 1])
        while p + one < e and not res:  # two products a step (spmv's order)
            a, b = t(data[p]), t(data[p + one])
            s0 += (a * t(Xf[np.uint64(indices[p]) * k + c0])
                   + b * t(Xf[np.uint64(indices[p + one]) * k + c0]))
            p += np.uint64(2)
        while p < e:                  # the tail; the residual's terms one at a time
            a = -t(data[p]) if res else t(data[p])
            s0 += a * t(Xf[np.uint64(indices[p]) * k + c0])
            p += np.uint64(1)
        Yf[o] = s0
        if dot:
            d0 += np.float64(Xf[o]) * np.float64(yt(s0))
    if dot:
        D[c0] += d0


@njit(inline="always", **JIT)
def _rows_mm(lo, hi, indptr, indices, data, Xf, Bf, Yf, k, acc, res, dot, D):
    """Rows ``lo..hi-1`` of ``Y = A X`` (or ``R = B - A X``), ``k`` columns in groups; with
    ``dot`` (square ``A``) also ``D[c] += X[i, c] Y[i, c]`` over these rows, in FP64: each
    row's products summed in registers as the row is written (its ``X`` and ``Y`` entries
    still in cache), the group's sums added to ``D`` once."""
    ku = np.uint64(k)
    c = 0
    while c + 8 <= k:
        _g8(lo, hi, indptr, indices, data, Xf, Bf, Yf, ku, np.uint64(c), acc, res, dot, D)
        c += 8
    if c + 4 <= k:
        _g4(lo, hi, indptr, indices, data, Xf, Bf, Yf, ku, np.uint64(c), acc, res, dot, D)
        c += 4
    if c + 2 <= k:
        _g2(lo, hi, indptr, indices, data, Xf, Bf, Yf, ku, np.uint64(c), acc, res, dot, D)
        c += 2
    if c < k:
        _g1(lo, hi, indptr, indices, data, Xf, Bf, Yf, ku, np.uint64(c), acc, res, dot, D)


@njit(parallel=True, **JIT)
def _mm_par(parts, indptr, indices, data, Xf, Bf, Yf, k, acc, res, dot, D):
    for t in prange(parts.size - 1):
        _rows_mm(parts[t], parts[t + 1], indptr, indices, data, Xf, Bf, Yf, k, acc, res, dot,
                 D[t])


@njit(**JIT)
def _mm_ser(parts, indptr, indices, data, Xf, Bf, Yf, k, acc, res, dot, D):
    _rows_mm(0, indptr.size - 1, indptr, indices, data, Xf, Bf, Yf, k, acc, res, dot, D[0])


_ACC64 = np.zeros(1, np.float64)
_ACC32 = np.zeros(1, np.float32)
_NO_DOT = {}                            # row parts -> (parts, 0) array: a sweep without dots


def _mm(parts, indptr, indices, data, X, B, Y, acc, res, out=None):
    """The sweep; with ``out``, also ``out[c] = X[:, c] . Y[:, c]`` (one FP64 partial sum per
    row part, added in part order)."""
    parallel = parts.size > 2
    rows = parts.size - 1 if parallel else 1
    if out is None:                     # no partial sums: a shared zero-width array
        D = _NO_DOT.get(rows)
        if D is None:
            D = _NO_DOT[rows] = np.zeros((rows, 0))
    else:
        D = np.zeros((rows, X.shape[1]))
    (_mm_par if parallel else _mm_ser)(parts, indptr, indices, data, X.reshape(-1),
                                       B.reshape(-1), Y.reshape(-1), X.shape[1], acc, res,
                                       out is not None, D)
    if out is not None:
        out[:] = D[0]
        for t in range(1, D.shape[0]):
            out += D[t]


# One column (a block narrowed to k = 1 by deflation): the SpMV kernels on the column as a
# vector (a C-contiguous (n, 1) block reshapes to one without a copy); same sums, same bits.

@register("cpu", "spmm", _MAT, mode="acc64")
def spmm_acc64(parts, indptr, indices, data, X, Y):
    """``Y <- A X`` for CSR ``A`` and ``(n, k)`` blocks, row sums in FP64.  The launch plan
    is the SpMV's (``parts``).  Dtypes key ``(data, X, Y)``."""
    if X.shape[1] == 1:
        csr_spmv_acc64(parts, indptr, indices, data, X.reshape(-1), Y.reshape(-1))
        return
    _mm(parts, indptr, indices, data, X, Y, Y, _ACC64, False)


@register("cpu", "spmm", _MAT, mode="acc32")
def spmm_acc32(parts, indptr, indices, data, X, Y):
    """``Y <- A X``, row sums in FP32.  Dtypes key ``(data, X, Y)``."""
    if X.shape[1] == 1:
        csr_spmv_acc32(parts, indptr, indices, data, X.reshape(-1), Y.reshape(-1))
        return
    _mm(parts, indptr, indices, data, X, Y, Y, _ACC32, False)


@register("cpu", "spmm_dot", _MAT, mode="acc64")
def spmm_dot_acc64(parts, indptr, indices, data, X, Y, out):
    """``Y <- A X`` (FP64 row sums) and ``out[c] <- X[:, c] . Y[:, c]`` (FP64) in one sweep
    over ``A``: block CG's ``Q = A P`` with its ``p_c . q_c``, without a second pass over
    the two blocks.  Dtypes key ``(data, X, Y)``.  One FP64 column: the SpMV's fused form."""
    if X.shape[1] == 1 and X.dtype == Y.dtype == np.float64:
        out[0] = csr_spmv_dot_acc64(parts, indptr, indices, data, X.reshape(-1), Y.reshape(-1))
        return
    _mm(parts, indptr, indices, data, X, Y, Y, _ACC64, False, out)


@register("cpu", "residual_mm", [(v, d, d, d) for v in _F for d in _F], mode="acc64")
def residual_mm(parts, indptr, indices, data, X, B, R):
    """``R <- B - A X`` in one sweep over ``A``, FP64 row sums.  Dtypes key
    ``(data, X, B, R)``."""
    _mm(parts, indptr, indices, data, X, B, R, _ACC64, True)


# --------------------------------------------------------------------------- Jacobi
@njit(**JIT)
def _dmul_mm_ser(d, X, Y):
    for i in range(X.shape[0]):
        a = d[i]
        for c in range(X.shape[1]):
            Y[i, c] = a * X[i, c]


@njit(parallel=True, **JIT)
def _dmul_mm_par(d, X, Y):
    for i in prange(X.shape[0]):
        a = d[i]
        for c in range(X.shape[1]):
            Y[i, c] = a * X[i, c]


@register("cpu", "dmul_mm", _MAT)
def dmul_mm(d, X, Y):
    """``Y <- diag(d) X`` for ``(n, k)`` blocks (casts fused).  Dtypes key ``(d, X, Y)``."""
    (_dmul_mm_par if X.size >= PARALLEL_MIN else _dmul_mm_ser)(d, X, Y)


# --------------------------------------------------------------------------- ILU(0)
@njit(inline="always", **JIT)
def _row_mm(i, s, e, ind, val, near_col, out, acc, prev):
    """One row of a sweep on ``k`` columns, ``acc`` holding its start: ``acc -= val[p]
    out[ind[p]]`` over the row's entries but its last when that is column ``near_col``
    (the previous row's term, applied last by FMA), then ``out[i] = prev = acc -
    near prev``."""
    k = out.shape[1]
    near = 0.0
    if e > s and ind[e - 1] == near_col:
        e -= 1
        near = np.float64(val[e])
    for p in range(s, e):
        v = np.float64(val[p])
        j = np.uint64(ind[p])  # unsigned: no negative-index test (as the single sweep)
        for c in range(k):
            acc[c] -= v * np.float64(out[j, c])
    for c in range(k):
        a = madd(-near, prev[c], acc[c])
        out[i, c] = a
        prev[c] = a


@njit(inline="always", **JIT)
def _sweeps_mm(lo, hi, lptr, lind, lval, uptr, uind, uval, dinv, R, out):
    """:func:`.ilu._sweeps` with ``k`` right-hand sides: the same operations on each
    column, in the same order (the previous row's term last, by FMA), so each column is
    bit for bit the single-vector sweep."""
    n = out.shape[0]
    k = out.shape[1]
    acc = np.empty(k, np.float64)
    prev = np.zeros(k, np.float64)
    for i in range(lo, hi):                              # L, forward
        for c in range(k):
            acc[c] = np.float64(R[i, c])
        _row_mm(i, lptr[i], lptr[i + 1], lind, lval, i - 1, out, acc, prev)
    for c in range(k):
        prev[c] = 0.0
    for q in range(n - hi, n - lo):                      # D^-1 U', backward (rows reversed)
        i = n - 1 - q
        di = np.float64(dinv[i])
        for c in range(k):
            acc[c] = np.float64(out[i, c]) * di
        _row_mm(i, uptr[q], uptr[q + 1], uind, uval, i + 1, out, acc, prev)


@njit(inline="always", **JIT)
def _row_mm2(i, s, e, ind, val, near_col, Of, a0, a1, p0, p1):
    """:func:`_row_mm` for two columns, the sums and the previous row's values in scalar
    registers (``Of``: ``out`` flat): returns the row's two values."""
    near = 0.0
    if e > s and ind[e - 1] == near_col:
        e -= 1
        near = np.float64(val[e])
    for p in range(np.uint64(s), np.uint64(e)):
        v = np.float64(val[p])
        j = np.uint64(ind[p]) * np.uint64(2)
        a0 -= v * np.float64(Of[j])
        a1 -= v * np.float64(Of[j + 1])
    a0 = madd(-near, p0, a0)
    a1 = madd(-near, p1, a1)
    o = np.uint64(i) * np.uint64(2)
    Of[o] = a0
    Of[o + 1] = a1
    return a0, a1


@njit(inline="always", **JIT)
def _sweeps_mm2(lo, hi, lptr, lind, lval, uptr, uind, uval, dinv, R, out):
    """:func:`_sweeps_mm` for ``k = 2``: an accumulator *array* costs a store and a reload
    per entry and column, which at two columns lost to two single sweeps (1.45x their
    time); here each column's sum and previous value stay in registers, as the single
    sweep's one does (same operations, same order)."""
    n = out.shape[0]
    Rf, Of = R.reshape(-1), out.reshape(-1)
    p0 = p1 = 0.0
    for i in range(lo, hi):                              # L, forward
        o = np.uint64(i) * np.uint64(2)
        p0, p1 = _row_mm2(i, lptr[i], lptr[i + 1], lind, lval, i - 1, Of,
                          np.float64(Rf[o]), np.float64(Rf[o + 1]), p0, p1)
    p0 = p1 = 0.0
    for q in range(n - hi, n - lo):                      # D^-1 U', backward (rows reversed)
        i = n - 1 - q
        di = np.float64(dinv[i])
        o = np.uint64(i) * np.uint64(2)
        p0, p1 = _row_mm2(i, uptr[q], uptr[q + 1], uind, uval, i + 1, Of,
                          np.float64(Of[o]) * di, np.float64(Of[o + 1]) * di, p0, p1)


@njit(fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _ilu_mm_one(lptr, lind, lval, uptr, uind, uval, dinv, R, out):
    if out.shape[1] == 2:
        _sweeps_mm2(0, out.shape[0], lptr, lind, lval, uptr, uind, uval, dinv, R, out)
    else:
        _sweeps_mm(0, out.shape[0], lptr, lind, lval, uptr, uind, uval, dinv, R, out)


@njit(parallel=True, fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _ilu_mm_blocks(bounds, lptr, lind, lval, uptr, uind, uval, dinv, R, out):
    for t in prange(bounds.size - 1):
        if out.shape[1] == 2:
            _sweeps_mm2(bounds[t], bounds[t + 1], lptr, lind, lval, uptr, uind, uval, dinv,
                        R, out)
        else:
            _sweeps_mm(bounds[t], bounds[t + 1], lptr, lind, lval, uptr, uind, uval, dinv, R,
                       out)


@register("cpu", "ilu_sweeps_mm", _MAT)
def ilu_sweeps_mm(bounds, lptr, lind, lval, uptr, uind, uval, dinv, X, Y):
    """``Y = U'^-1 D^-1 L^-1 X`` for ``(n, k)`` blocks, per diagonal block of ``bounds``
    (ILU(0)'s layout, :func:`.ilu.ilu_sweeps`); FP64 row sums.  Dtypes key
    ``(values, X, Y)``."""
    if X.shape[1] == 1:                     # one column: the single-vector sweeps
        ilu_sweeps(bounds, lptr, lind, lval, uptr, uind, uval, dinv, X.reshape(-1),
                   Y.reshape(-1))
    elif bounds.size > 2:
        _ilu_mm_blocks(bounds, lptr, lind, lval, uptr, uind, uval, dinv, X, Y)
    else:
        _ilu_mm_one(lptr, lind, lval, uptr, uind, uval, dinv, X, Y)


# --------------------------------------------------------------------------- column ops
# The column reductions keep each column's sum in a scalar register, 8/4/2/1 columns a
# group, reading the rows flat (the SpMM's scheme): a row's group is contiguous, so the
# group's sums vectorise across the columns.  (An accumulator array indexed by the column
# costs a store-to-load round trip per term; a column-by-column strided loop does not
# vectorise: 6x the native dots here.)

@njit(inline="always", fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _rd8(Xf, Yf, lo, hi, k, c0, part):
    t = Xf.dtype.type
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = t(0.0)
    for i in range(np.uint64(lo), np.uint64(hi)):
        o = i * k + c0
        s0 += Xf[o] * Yf[o]
        s1 += Xf[o + 1] * Yf[o + 1]
        s2 += Xf[o + 2] * Yf[o + 2]
        s3 += Xf[o + 3] * Yf[o + 3]
        s4 += Xf[o + 4] * Yf[o + 4]
        s5 += Xf[o + 5] * Yf[o + 5]
        s6 += Xf[o + 6] * Yf[o + 6]
        s7 += Xf[o + 7] * Yf[o + 7]
    part[c0], part[c0 + 1], part[c0 + 2], part[c0 + 3] = s0, s1, s2, s3
    part[c0 + 4], part[c0 + 5], part[c0 + 6], part[c0 + 7] = s4, s5, s6, s7


@njit(inline="always", fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _rd4(Xf, Yf, lo, hi, k, c0, part):
    t = Xf.dtype.type
    s0 = s1 = s2 = s3 = t(0.0)
    for i in range(np.uint64(lo), np.uint64(hi)):
        o = i * k + c0
        s0 += Xf[o] * Yf[o]
        s1 += Xf[o + 1] * Yf[o + 1]
        s2 += Xf[o + 2] * Yf[o + 2]
        s3 += Xf[o + 3] * Yf[o + 3]
    part[c0], part[c0 + 1], part[c0 + 2], part[c0 + 3] = s0, s1, s2, s3


@njit(inline="always", fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _rd2(Xf, Yf, lo, hi, k, c0, part):
    t = Xf.dtype.type
    s0 = s1 = t(0.0)
    for i in range(np.uint64(lo), np.uint64(hi)):
        o = i * k + c0
        s0 += Xf[o] * Yf[o]
        s1 += Xf[o + 1] * Yf[o + 1]
    part[c0], part[c0 + 1] = s0, s1


@njit(inline="always", fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _rd1(Xf, Yf, lo, hi, k, c0, part):
    s0 = Xf.dtype.type(0.0)
    for i in range(np.uint64(lo), np.uint64(hi)):
        o = i * k + c0
        s0 += Xf[o] * Yf[o]
    part[c0] = s0


@njit(inline="always", fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _red_rows(Xf, Yf, lo, hi, k, part):
    """``part[c] = sum_{lo <= i < hi} X[i, c] Y[i, c]`` for flat ``(n, k)`` blocks."""
    ku = np.uint64(k)
    c = 0
    while c + 8 <= k:
        _rd8(Xf, Yf, lo, hi, ku, np.uint64(c), part)
        c += 8
    if c + 4 <= k:
        _rd4(Xf, Yf, lo, hi, ku, np.uint64(c), part)
        c += 4
    if c + 2 <= k:
        _rd2(Xf, Yf, lo, hi, ku, np.uint64(c), part)
        c += 2
    if c < k:
        _rd1(Xf, Yf, lo, hi, ku, np.uint64(c), part)


@njit(fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _col_dot_rows(X, Y, lo, hi, part):
    _red_rows(X.reshape(-1), Y.reshape(-1), lo, hi, X.shape[1], part)


@njit(parallel=True, **JIT)
def _col_dot_par(X, Y, out):
    n, k = X.shape
    nch = (n + CHUNK - 1) // CHUNK
    parts = np.empty((nch, k), dtype=X.dtype)
    for t in prange(nch):
        lo = t * CHUNK
        _col_dot_rows(X, Y, lo, min(lo + CHUNK, n), parts[t])
    for c in range(k):
        s = X.dtype.type(0.0)
        for t in range(nch):          # fixed order
            s += parts[t, c]
        out[c] = s


@njit(**JIT)
def _col_dot_ser(X, Y, out):
    part = np.empty(X.shape[1], dtype=X.dtype)
    _col_dot_rows(X, Y, 0, X.shape[0], part)
    for c in range(X.shape[1]):
        out[c] = part[c]


@register("cpu", "col_dot", _VEC, mode="native")
def col_dot(X, Y, out):
    """``out[c] <- X[:, c] . Y[:, c]`` (sums in the blocks' dtype; ``out`` FP64)."""
    (_col_dot_par if X.size >= PARALLEL_MIN else _col_dot_ser)(X, Y, out)


@njit(fastmath={"reassoc"}, **JIT)
def _col_axpy2_rows(a, X, Y, b, U, V, lo, hi, part):
    k = X.shape[1]
    for i in range(lo, hi):
        for c in range(k):
            Y[i, c] += Y.dtype.type(a[c]) * X[i, c]
            V[i, c] += V.dtype.type(b[c]) * U[i, c]
    Vf = V.reshape(-1)                  # the chunk of V, still in cache
    _red_rows(Vf, Vf, lo, hi, k, part)


@njit(parallel=True, **JIT)
def _col_axpy2_par(a, X, Y, b, U, V, out):
    n, k = X.shape
    nch = (n + CHUNK - 1) // CHUNK
    parts = np.empty((nch, k), dtype=V.dtype)
    for t in prange(nch):
        lo = t * CHUNK
        _col_axpy2_rows(a, X, Y, b, U, V, lo, min(lo + CHUNK, n), parts[t])
    for c in range(k):
        s = V.dtype.type(0.0)
        for t in range(nch):
            s += parts[t, c]
        out[c] = np.sqrt(np.float64(s))


@njit(**JIT)
def _col_axpy2_ser(a, X, Y, b, U, V, out):
    part = np.empty(X.shape[1], dtype=V.dtype)
    _col_axpy2_rows(a, X, Y, b, U, V, 0, X.shape[0], part)
    for c in range(X.shape[1]):
        out[c] = np.sqrt(np.float64(part[c]))


@register("cpu", "col_axpy2_nrm2", _VEC, mode="native")
def col_axpy2_nrm2(a, X, Y, b, U, V, out):
    """Per column ``c``: ``Y_c += a_c X_c;  V_c += b_c U_c;  out_c = ||V_c||_2`` in one
    pass (block CG's ``x += alpha p; r -= alpha q``)."""
    (_col_axpy2_par if X.size >= PARALLEL_MIN else _col_axpy2_ser)(a, X, Y, b, U, V, out)


@njit(**JIT)
def _col_xpay_ser(X, a, Y):
    for i in range(X.shape[0]):
        for c in range(X.shape[1]):
            Y[i, c] = X[i, c] + Y.dtype.type(a[c]) * Y[i, c]


@njit(parallel=True, **JIT)
def _col_xpay_par(X, a, Y):
    for i in prange(X.shape[0]):
        for c in range(X.shape[1]):
            Y[i, c] = X[i, c] + Y.dtype.type(a[c]) * Y[i, c]


@register("cpu", "col_xpay", _VEC)
def col_xpay(X, a, Y):
    """``Y_c <- X_c + a_c Y_c`` per column (block CG's ``p = z + beta p``)."""
    (_col_xpay_par if X.size >= PARALLEL_MIN else _col_xpay_ser)(X, a, Y)


# Block CG's vector work in two passes (the SpMM's third): with a diagonal preconditioner
# (Jacobi) z = d r is never stored -- its entries are formed where they are used, each
# rounded as dmul_mm rounds it (fl(d_i r_ic), d widened exactly), so the step, the dot
# r . z and the direction update p = z + beta p see the values a stored z would hold.

@njit(**JIT)
def _cg_step_rows(a, P, X, Q, R, d, lo, hi, zs):
    """Rows ``lo..hi``: ``x += a p;  r -= a q`` (``r + (-a) q``, as ``axpy2`` rounds it) and,
    with ``d``, ``zs = d r`` of the updated rows (a chunk-sized scratch)."""
    ku = np.uint64(X.shape[1])
    Pf, Xf, Qf, Rf = P.reshape(-1), X.reshape(-1), Q.reshape(-1), R.reshape(-1)
    t = X.dtype.type
    base = np.uint64(lo) * ku
    for i in range(np.uint64(lo), np.uint64(hi)):
        o = i * ku
        for c in range(np.uint64(0), ku):
            ac = t(a[c])
            Xf[o + c] += ac * Pf[o + c]
            Rf[o + c] += (-ac) * Qf[o + c]
        if d.size:
            di = d[i]
            for c in range(np.uint64(0), ku):
                zs[o - base + c] = di * Rf[o + c]


@njit(fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _cg_red_rows(R, lo, hi, zs, want, prr, prz):
    """``prr[c] = sum r_ic^2``, ``prz[c] = sum r_ic zs_ic`` (``want``) over rows ``lo..hi``
    (in cache: just updated)."""
    k = R.shape[1]
    Rf = R.reshape(-1)[lo * k:hi * k]
    _red_rows(Rf, Rf, 0, hi - lo, k, prr)
    if want:
        _red_rows(Rf, zs, 0, hi - lo, k, prz)


@njit(**JIT)
def _cg_step_finish(prr, prz, want, rn, rz):
    """``rn``, ``rz`` from the chunks' partial sums, added in chunk order."""
    nch, k = prr.shape
    for c in range(k):
        s = prr.dtype.type(0.0)
        u = prr.dtype.type(0.0)
        for t in range(nch):            # fixed order
            s += prr[t, c]
            u += prz[t, c]
        rn[c] = np.sqrt(np.float64(s))
        rz[c] = u if want else s


# Both forms take the rows in chunks of CHUNK with the same partial sums per chunk: the
# serial form gives the parallel form's bits.  The parallel form runs nw workers over
# contiguous ranges of chunks, each with one chunk-sized scratch for z = d r (allocated once
# per worker and call, not per chunk; no thread-id lookup, which numba cannot cache).

@njit(parallel=True, **JIT)
def _col_cg_step_par(a, P, X, Q, R, d, rn, rz, nw):
    n, k = X.shape
    nch = (n + CHUNK - 1) // CHUNK
    prr = np.empty((nch, k), dtype=R.dtype)
    prz = np.empty((nch, k), dtype=R.dtype)
    want = d.size > 0
    for w in prange(nw):
        zs = np.empty(CHUNK * k if want else 0, dtype=R.dtype)
        for t in range(w * nch // nw, (w + 1) * nch // nw):
            lo = t * CHUNK
            hi = min(lo + CHUNK, n)
            _cg_step_rows(a, P, X, Q, R, d, lo, hi, zs)
            _cg_red_rows(R, lo, hi, zs, want, prr[t], prz[t])
    _cg_step_finish(prr, prz, want, rn, rz)


@njit(**JIT)
def _col_cg_step_ser(a, P, X, Q, R, d, rn, rz):
    n, k = X.shape
    nch = (n + CHUNK - 1) // CHUNK
    prr = np.empty((nch, k), dtype=R.dtype)
    prz = np.empty((nch, k), dtype=R.dtype)
    want = d.size > 0
    zs = np.empty(min(n, CHUNK) * k if want else 0, dtype=R.dtype)
    for t in range(nch):
        lo = t * CHUNK
        hi = min(lo + CHUNK, n)
        _cg_step_rows(a, P, X, Q, R, d, lo, hi, zs)
        _cg_red_rows(R, lo, hi, zs, want, prr[t], prz[t])
    _cg_step_finish(prr, prz, want, rn, rz)


@register("cpu", "col_cg_step", _VEC, mode="native")
def col_cg_step(a, P, X, Q, R, d, rn, rz):
    """Per column ``c``: ``X_c += a_c P_c;  R_c -= a_c Q_c;  rn_c = ||R_c||_2;  rz_c = R_c .
    (d * R_c)`` in one pass (block CG's step with point Jacobi ``z = d r`` never stored);
    ``d`` empty (no preconditioner): ``rz_c = R_c . R_c``.  ``a``, ``rn``, ``rz`` FP64
    length ``k``; ``d`` FP32 or FP64, length ``n`` (or 0)."""
    if X.size >= PARALLEL_MIN:
        nch = (X.shape[0] + CHUNK - 1) // CHUNK
        _col_cg_step_par(a, P, X, Q, R, d, rn, rz, min(nch, 4 * get_num_threads()))
    else:
        _col_cg_step_ser(a, P, X, Q, R, d, rn, rz)


@njit(**JIT)
def _col_dxpay_rows(d, R, a, P, lo, hi):
    ku = np.uint64(R.shape[1])
    Rf, Pf = R.reshape(-1), P.reshape(-1)
    t = P.dtype.type
    for i in range(np.uint64(lo), np.uint64(hi)):
        o = i * ku
        di = d[i]
        for c in range(np.uint64(0), ku):
            z = t(di * Rf[o + c])       # z = d r, rounded as dmul_mm stores it
            Pf[o + c] = z + t(a[c]) * Pf[o + c]


@njit(parallel=True, **JIT)
def _col_dxpay_par(d, R, a, P):
    n = R.shape[0]
    nch = (n + CHUNK - 1) // CHUNK
    for t in prange(nch):
        lo = t * CHUNK
        _col_dxpay_rows(d, R, a, P, lo, min(lo + CHUNK, n))


@njit(**JIT)
def _col_dxpay_ser(d, R, a, P):
    _col_dxpay_rows(d, R, a, P, 0, R.shape[0])


@register("cpu", "col_dxpay", _VEC)
def col_dxpay(d, R, a, P):
    """``P_c <- d * R_c + a_c P_c`` per column (block CG's ``p = z + beta p`` with ``z = d
    r`` formed on the fly, each ``d_i r_ic`` rounded once as :func:`dmul_mm` stores it);
    ``d`` empty: :func:`col_xpay` (``P_c <- R_c + a_c P_c``)."""
    if d.size == 0:
        col_xpay(R, a, P)
        return
    (_col_dxpay_par if R.size >= PARALLEL_MIN else _col_dxpay_ser)(d, R, a, P)


@njit(**JIT)
def _col_scal_ser(a, X, out):
    for i in range(X.shape[0]):
        for c in range(X.shape[1]):
            out[i, c] = out.dtype.type(a[c]) * X[i, c]


@njit(parallel=True, **JIT)
def _col_scal_par(a, X, out):
    for i in prange(X.shape[0]):
        for c in range(X.shape[1]):
            out[i, c] = out.dtype.type(a[c]) * X[i, c]


@register("cpu", "col_scal", _VEC)
def col_scal(a, X, out):
    """``out_c <- a_c X_c`` per column (``out`` may be ``X``)."""
    (_col_scal_par if X.size >= PARALLEL_MIN else _col_scal_ser)(a, X, out)


# --------------------------------------------------------------------------- k GMRES bases
# V has shape (m + 1, n, k): V[i, r, c] is entry r of the i-th basis vector of column c.

@njit(fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _col_mdot_rows(V, j, W, lo, hi, part, want):
    """``part[i] = V_i . W`` over rows ``lo..hi`` for ``i < j``; ``want``: also
    ``part[j] = W . W`` (the rows of ``W`` are in cache)."""
    Wf = W.reshape(-1)
    for i in range(j):
        _red_rows(V[i].reshape(-1), Wf, lo, hi, W.shape[1], part[i])
    if want:
        _red_rows(Wf, Wf, lo, hi, W.shape[1], part[j])


@njit(parallel=True, **JIT)
def _col_mdot_par(V, j, W, out, nrm, want):
    n, k = W.shape
    nch = (n + CHUNK - 1) // CHUNK
    parts = np.empty((nch, j + 1, k), dtype=W.dtype)
    for t in prange(nch):
        lo = t * CHUNK
        _col_mdot_rows(V, j, W, lo, min(lo + CHUNK, n), parts[t], want)
    for i in range(j + 1 if want else j):
        for c in range(k):
            s = W.dtype.type(0.0)
            for t in range(nch):        # fixed order
                s += parts[t, i, c]
            if i < j:
                out[i, c] = s
            else:
                nrm[c] = np.sqrt(np.float64(s))


@njit(**JIT)
def _col_mdot_ser(V, j, W, out, nrm, want):
    part = np.empty((j + 1, W.shape[1]), dtype=W.dtype)
    _col_mdot_rows(V, j, W, 0, W.shape[0], part, want)
    for i in range(j):
        for c in range(W.shape[1]):
            out[i, c] = part[i, c]
    if want:
        for c in range(W.shape[1]):
            nrm[c] = np.sqrt(np.float64(part[j, c]))


_NO_NRM = np.zeros(0)


@register("cpu", "col_mdot", _VEC, mode="native")
def col_mdot(V, j, W, out):
    """``out[i, c] <- V[i, :, c] . W[:, c]`` for ``i < j`` (Gram--Schmidt coefficients of
    ``k`` bases at once; ``out`` FP64 ``(>= j, k)``)."""
    (_col_mdot_par if W.size >= PARALLEL_MIN else _col_mdot_ser)(V, j, W, out, _NO_NRM, False)


@register("cpu", "col_mdot_nrm2", _VEC, mode="native")
def col_mdot_nrm2(V, j, W, out, nrm):
    """:func:`col_mdot` and ``nrm[c] <- ||W[:, c]||_2`` in the same pass over ``W`` (block
    GMRES's coefficients and the norm of the new vectors before the projection)."""
    (_col_mdot_par if W.size >= PARALLEL_MIN else _col_mdot_ser)(V, j, W, out, nrm, True)


@njit(**JIT)
def _col_maxpy_rows(V, j, H, W, lo, hi):
    k = W.shape[1]
    Wf = W.reshape(-1)
    if 16 % k == 0:
        # the rows' values as one contiguous run, 16 at a time, with the coefficients laid
        # out to match (lane t: column t mod k): a fixed-length inner loop LLVM vectorises
        h = np.empty(16, W.dtype)
        L0 = np.uint64(lo) * np.uint64(k)
        L1 = np.uint64(hi) * np.uint64(k)
        nb = (L1 - L0) // np.uint64(16)
        for i in range(j):
            Vf = V[i].reshape(-1)
            for t in range(16):
                h[t] = H[i, t % k]
            for b in range(np.uint64(0), nb):
                o = L0 + b * np.uint64(16)
                for t in range(np.uint64(0), np.uint64(16)):
                    Wf[o + t] -= h[t] * Vf[o + t]
            for o in range(L0 + nb * np.uint64(16), L1):
                Wf[o] -= h[(o - L0) % np.uint64(16)] * Vf[o]
        return
    # other widths: flat unsigned indexing (no wraparound tests in the inner loop); the
    # row's h_i in a small array of W's dtype, read k at a time
    ku = np.uint64(k)
    h = np.empty(k, W.dtype)
    for i in range(j):
        Vf = V[i].reshape(-1)
        for c in range(k):
            h[c] = H[i, c]
        for r in range(np.uint64(lo), np.uint64(hi)):
            o = r * ku
            for c in range(np.uint64(0), ku):
                Wf[o + c] -= h[c] * Vf[o + c]


@njit(parallel=True, **JIT)
def _col_maxpy_par(V, j, H, W, nrm, want):
    n, k = W.shape
    nch = (n + CHUNK - 1) // CHUNK
    parts = np.empty((nch, k), dtype=W.dtype)
    for t in prange(nch):
        lo = t * CHUNK
        hi = min(lo + CHUNK, n)
        _col_maxpy_rows(V, j, H, W, lo, hi)
        if want:
            _col_dot_rows(W, W, lo, hi, parts[t])   # the updated rows, still in cache
    if want:
        for c in range(k):
            s = W.dtype.type(0.0)
            for t in range(nch):
                s += parts[t, c]
            nrm[c] = np.sqrt(np.float64(s))


@njit(**JIT)
def _col_maxpy_ser(V, j, H, W, nrm, want):
    _col_maxpy_rows(V, j, H, W, 0, W.shape[0])
    if want:
        part = np.empty(W.shape[1], dtype=W.dtype)
        _col_dot_rows(W, W, 0, W.shape[0], part)
        for c in range(W.shape[1]):
            nrm[c] = np.sqrt(np.float64(part[c]))


@register("cpu", "col_maxpy", _VEC)
def col_maxpy(V, j, H, W):
    """``W[:, c] <- W[:, c] - sum_{i<j} H[i, c] V[i, :, c]`` (the projection of ``k``
    Gram--Schmidt steps at once)."""
    (_col_maxpy_par if W.size >= PARALLEL_MIN else _col_maxpy_ser)(V, j, H, W, _NO_NRM, False)


@register("cpu", "col_maxpy_nrm2", _VEC, mode="native")
def col_maxpy_nrm2(V, j, H, W, nrm):
    """:func:`col_maxpy`, then ``nrm[c] <- ||W[:, c]||_2`` of the updated ``W`` (each chunk
    of rows while it is in cache: no second pass)."""
    (_col_maxpy_par if W.size >= PARALLEL_MIN else _col_maxpy_ser)(V, j, H, W, nrm, True)


@register("cpu", "col_lincomb", _VEC)
def col_lincomb(V, Y, j, out):
    """``out[:, c] <- sum_{i<j} Y[i, c] V[i, :, c]`` (GMRES's ``V_j y`` for ``k`` bases):
    :func:`col_maxpy` on a zeroed ``out`` with ``-Y`` (the negation is exact, so the sums
    round as ``out += y v`` would)."""
    out.fill(0.0)
    col_maxpy(V, j, -np.asarray(Y[:j]), out)
