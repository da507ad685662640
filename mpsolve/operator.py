"""Operators the Krylov methods multiply by.

:class:`SparseOperator` stores a CSR matrix at a chosen precision and binds its
SpMV kernel once; :class:`CallableOperator` wraps anything with a ``matvec``
(a SciPy ``LinearOperator``) so the solvers see one interface:

``bind(x_dtype, y_dtype) -> f(x, y)`` computing ``y <- A x`` in place.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._demote import demote, row_scale
from .kernels import lookup
from .kernels.registry import dtype_name
from .kernels.cpu.spmv import partition_rows

__all__ = ["SparseOperator", "CallableOperator", "canonical_csr"]


def canonical_csr(A, name: str = "A") -> sp.csr_matrix:
    """A canonical CSR copy-or-view of any SciPy sparse matrix/array.

    Sorted column indices, no duplicates (summed, as SciPy does), 32-bit
    indices where they fit.  The caller's object is never modified: anything
    not already canonical is copied first.
    """
    if sp.issparse(A):
        C = A.tocsr()
        if C is A:
            C = A.copy() if not A.has_canonical_format else A
        elif not C.has_canonical_format:
            # tocsr() may share index arrays with A for some formats: copy first
            C = C.copy()
        if not C.has_canonical_format:
            C.sum_duplicates()  # also sorts indices
    else:
        C = sp.csr_matrix(np.asarray(A))
    C = sp.csr_matrix(C)  # matrix-style interface, whatever came in
    if C.indptr.dtype != np.int32 and C.nnz < 2**31 - 1 and C.shape[1] < 2**31 - 1:
        C = sp.csr_matrix((C.data, C.indices.astype(np.int32), C.indptr.astype(np.int32)),
                          shape=C.shape)
    return C


class SparseOperator:
    """A CSR matrix stored in ``dtype``, multiplied by a bound kernel.

    Parameters
    ----------
    A : scipy.sparse matrix in canonical CSR form (see :func:`canonical_csr`)
    dtype : storage precision of the values (``"float32"`` or ``"float64"``)
    accumulate : precision of the row sums
    device : ``"cpu"`` (the GPU backend will add ``"gpu"``)
    what : name used in range-check errors

    Raises
    ------
    PrecisionRangeError
        If a value of ``A`` does not fit ``dtype``.
    """

    def __init__(self, A, dtype="float64", accumulate="float64", device="cpu", what="A"):
        self.shape = A.shape
        self.device = device
        self.indptr = A.indptr
        self.indices = A.indices
        self.data = self._demote(A, dtype, what)
        self.dtype = self.data.dtype
        self.accumulate = dtype_name(accumulate)
        self._mode = "acc64" if self.accumulate == "float64" else "acc32"
        self.parts = partition_rows(self.indptr)
        self._bound = {}

    @staticmethod
    def _demote(A, dtype, what):
        if np.dtype(dtype).itemsize >= A.data.dtype.itemsize:
            return demote(A.data, dtype, what)
        try:
            return demote(A.data, dtype, what)
        except ValueError:
            # retry with row scales: underflowing entries negligible in their row flush to 0
            return demote(A.data, dtype, what, scale=row_scale(A.indptr, A.data))

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    @property
    def nbytes(self) -> int:
        """Bytes of matrix storage (values, indices, row pointers)."""
        return int(self.data.nbytes + self.indices.nbytes + self.indptr.nbytes)

    def bind(self, x_dtype, y_dtype):
        """Kernel ``f(x, y)`` computing ``y <- A x`` for these vector dtypes."""
        key = (dtype_name(x_dtype), dtype_name(y_dtype))
        f = self._bound.get(key)
        if f is None:
            kern = lookup(self.device, "spmv", (self.dtype, key[0], key[1]), self._mode)
            parts, ip, ix, d = self.parts, self.indptr, self.indices, self.data

            def f(x, y):
                kern(parts, ip, ix, d, x, y)  # y = A x

            self._bound[key] = f
        return f

    def bind_dot(self, dtype):
        """Kernel ``f(x, y) -> x . y`` computing ``y <- A x`` and the native dot of
        ``x`` and ``y`` in one pass (square ``A``, FP64 row sums), or ``None`` when no
        fused kernel exists for this operator (the caller composes ``bind`` and a dot)."""
        dt = dtype_name(dtype)
        if self._mode != "acc64" or self.shape[0] != self.shape[1]:
            return None
        try:
            kern = lookup(self.device, "spmv_dot", (self.dtype, dt, dt), "acc64")
        except KeyError:
            return None
        parts, ip, ix, d = self.parts, self.indptr, self.indices, self.data

        def f(x, y):
            return kern(parts, ip, ix, d, x, y)  # y = A x; return x . y

        return f

    def bind_residual(self, dtype):
        """Kernel ``f(x, b, r)`` computing ``r <- b - A x`` (FP64 row sums)."""
        dt = dtype_name(dtype)
        kern = lookup(self.device, "residual", (self.dtype, dt, dt, dt), "acc64")
        parts, ip, ix, d = self.parts, self.indptr, self.indices, self.data

        def f(x, b, r):
            kern(parts, ip, ix, d, x, b, r)  # r = b - A x

        return f

    def matvec(self, x):
        """``A @ x`` into a new array (convenience, not used in the loops)."""
        x = np.ascontiguousarray(x)
        y = np.empty(self.shape[0], dtype=np.result_type(x.dtype, self.dtype))
        self.bind(x.dtype, y.dtype)(x, y)
        return y


class CallableOperator:
    """Wraps an object with ``matvec`` (e.g. a ``LinearOperator``) as an operator."""

    def __init__(self, A):
        self.A = A
        self.shape = A.shape
        self.dtype = np.dtype(getattr(A, "dtype", None) or np.float64)
        self.nnz = None
        self.nbytes = 0

    def bind(self, x_dtype, y_dtype):
        A = self.A
        y_dtype = np.dtype(y_dtype)

        def f(x, y):
            v = np.asarray(A.matvec(x)).reshape(-1)  # y = A x
            if v.shape != y.shape:
                raise ValueError(
                    f"A.matvec returned shape {np.shape(v)}, expected {y.shape}"
                )
            y[:] = v

        return f

    def bind_residual(self, dtype):
        mv = self.bind(dtype, dtype)

        def f(x, b, r):
            mv(x, r)
            np.subtract(b, r, out=r)  # r = b - A x

        return f

    def matvec(self, x):
        return np.asarray(self.A.matvec(x)).reshape(-1)
