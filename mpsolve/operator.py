"""Stored operators: what the Krylov methods and preconditioners multiply by.

Each operator holds its arrays on one device, in one storage precision, and
binds its kernel once per pair of vector dtypes:

``bind(x_dtype, y_dtype) -> f(x, y)`` computing ``y <- F x`` in place.

* :class:`SparseOperator` -- CSR (``spmv``; also ``r = b - A x`` and the fused
  ``q = A p; p . q``);
* :class:`BSROperator` -- block CSR with dense ``b x b`` blocks (``bsrmv``);
* :class:`DiagonalOperator` -- ``diag(d)`` (``dmul``);
* :class:`TriangularSweeps` -- ``(L D U')^{-1}`` by a forward and a backward sweep
  (``ilu_sweeps``), ILU(0)'s apply; :class:`BlockTriangularSweeps` the same with
  ``b x b`` blocks (``bilu_sweeps``), BILU(0)'s;
* :class:`OperatorChain` -- ``F_k ... F_1``, scratch vectors allocated once;
* :class:`CallableOperator` -- anything with a ``matvec`` (a ``LinearOperator``).

No operator knows how its device schedules the work: the kernel's launch plan (the
CPU's row partition, a GPU's sub-warp width) comes from
:func:`mpsolve.kernels.registry.launch_plan`.  Values are range-checked on the host
when they are demoted (:func:`mpsolve._demote.demote`) and then moved to the device.
"""
from __future__ import annotations

import threading
from functools import partial
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

from ._demote import bsr_row_scale, demote, row_scale
from .backend import (DEFAULT_DEVICE, HOST_DEVICE, array_module, device_of, is_host, on_host,
                      to_device, to_host)
from .kernels import lookup
from .kernels.registry import dtype_name, launch_plan

__all__ = ["SparseOperator", "BSROperator", "DiagonalOperator", "TriangularSweeps",
           "BlockTriangularSweeps", "OperatorChain", "CallableOperator", "transpose_blocks",
           "transpose_stored"]


def _acc_mode(accumulate) -> str:
    acc = dtype_name(accumulate)
    if acc not in ("float32", "float64"):
        raise ValueError(f"accumulate={accumulate!r}: use 'float32' or 'float64'")
    return "acc64" if acc == "float64" else "acc32"


_TRANSPOSE_KEYS = tuple(np.dtype(d) for d in ("float64", "complex128", "float32", "complex64"))


def transpose_blocks(pptr, pind, data, device=HOST_DEVICE):
    """Canonical BSR ``(tptr, tind, tdata)`` of the (block) transpose of a square block
    pattern, blocks ``(nnzb, b, b)`` transposed (not conjugated); by the ``bsr_transpose``
    kernel of the host device ``device``.

    Indices stay int32 where both ``pptr`` and ``pind`` are (a stored operator's), else
    int64; blocks keep ``data``'s precision (FP32 stored values are moved, not rounded)."""
    pptr, pind = np.asarray(pptr), np.asarray(pind)
    idx = np.int32 if pptr.dtype == np.int32 and pind.dtype == np.int32 else np.int64
    data = np.asarray(data)
    key = data.dtype if data.dtype in _TRANSPOSE_KEYS else \
        np.dtype(np.complex128 if data.dtype.kind == "c" else np.float64)
    return lookup(device, "bsr_transpose", (key,))(np.ascontiguousarray(pptr, dtype=idx),
                                                   np.ascontiguousarray(pind, dtype=idx),
                                                   np.ascontiguousarray(data, dtype=key))


def transpose_stored(pp, pi, data, host=None):
    """Block pattern and blocks ``(nnzb, b, b)`` of the (block) transpose, canonical, with
    ``data`` left where it is (host or device): the permutation comes from the host's
    ``bsr_transpose`` kernel on the pattern alone (block numbers as values, exact), the
    blocks are moved and transposed by the array module of ``data``.  Indices and blocks
    keep their dtypes (a stored operator's int32 and FP32 are transposed as they are).
    ``host``: the host device whose kernel runs (default: that of ``data``'s device)."""
    where = device_of(data)
    host = host or (where if is_host(where) else HOST_DEVICE)
    pp, pi = to_host(pp), to_host(pi)
    if on_host(data):                               # the host kernel moves the blocks too
        return transpose_blocks(pp, pi, np.ascontiguousarray(data), device=host)
    nnz = pi.size
    ids = np.arange(nnz, dtype=np.float64).reshape(nnz, 1, 1)
    tp, ti, tid = transpose_blocks(pp, pi, ids, device=host)
    xp = array_module(where)
    perm = to_device(tid.reshape(-1).astype(np.int64), where)
    return tp, ti, xp.ascontiguousarray(xp.swapaxes(data[perm], 1, 2))


def _transposed_csr(ptr, ind, val):
    """CSR arrays of the transpose of a square CSR matrix (:func:`transpose_stored` with
    1 x 1 blocks; values where they are, in their dtype)."""
    tp, ti, td = transpose_stored(ptr, ind, val.reshape(-1, 1, 1))
    return tp, ti, td.reshape(-1)


class _Stored:
    """Common part: device, shape, bound-kernel cache, ``matvec`` convenience."""

    device = DEFAULT_DEVICE
    shape = (0, 0)

    def _kernel(self, x_dtype, y_dtype):  # pragma: no cover - abstract
        raise NotImplementedError

    def __getstate__(self):
        # the bound kernels are closures over compiled code: bound again after a pickle
        state = self.__dict__.copy()
        state["_bound"] = {}
        return state

    def bind(self, x_dtype, y_dtype):
        """Kernel ``f(x, y)`` computing ``y <- F x`` for these vector dtypes (cached)."""
        key = (dtype_name(x_dtype), dtype_name(y_dtype))
        f = self._bound.get(key)
        if f is None:
            f = self._bound[key] = self._kernel(*key)
        return f

    def bind_block(self, x_dtype, y_dtype):
        """Kernel ``f(X, Y)`` computing ``Y <- F X`` for ``(n, k)`` C-contiguous blocks in
        one sweep over the stored operator (cached), or ``None`` where this operator or its
        device has no block kernel (the caller then applies it column by column)."""
        key = ("block", dtype_name(x_dtype), dtype_name(y_dtype))
        if key not in self._bound:
            try:
                self._bound[key] = self._block_kernel(*key[1:])
            except KeyError:        # the device registers no block kernel for these dtypes
                self._bound[key] = None
        return self._bound[key]

    def _block_kernel(self, xd, yd):
        return None

    def transposed(self):
        """The operator ``F^T`` (the plain transpose, also for complex values), stored on the
        same device in the same precision: the stored values are moved, never rounded
        again, so ``F^T`` is the exact transpose of the stored ``F``."""
        raise NotImplementedError(f"{type(self).__name__} has no transpose")

    def matvec(self, x):
        """``F @ x`` into a new array (convenience; not used in the loops)."""
        xp = array_module(self.device)
        x = xp.ascontiguousarray(to_device(x, self.device))
        y = xp.empty(self.shape[0], dtype=np.result_type(x.dtype, self.dtype))
        self.bind(x.dtype, y.dtype)(x, y)
        return y


class SparseOperator(_Stored):
    """A CSR matrix stored in ``dtype`` on ``device``, multiplied by a bound kernel.

    Parameters
    ----------
    A : scipy.sparse matrix in canonical CSR form (:func:`mpsolve._sparse.canonical_csr`)
    dtype : storage precision of the values (``"float32"`` or ``"float64"``)
    accumulate : precision of the row sums
    device : a device name (:data:`mpsolve.backend.DEVICES`)
    what : name used in range-check errors

    Raises
    ------
    PrecisionRangeError
        If a value of ``A`` does not fit ``dtype``.
    """

    def __init__(self, A, dtype="float64", accumulate="float64", device=DEFAULT_DEVICE, what="A"):
        self.shape = A.shape
        self.device = device
        self._mode = _acc_mode(accumulate)
        self.accumulate = dtype_name(accumulate)
        data = self._demote(A, dtype, what, device)
        self.dtype = data.dtype
        self.indptr = to_device(A.indptr, device)
        self.indices = to_device(A.indices, device)
        self.data = to_device(data, device)
        self.parts = launch_plan(device, "spmv", self.indptr)
        self._bound = {}

    @staticmethod
    def _demote(A, dtype, what, device):
        if np.dtype(dtype).itemsize >= A.data.dtype.itemsize:
            return demote(A.data, dtype, what, device=device)
        try:
            return demote(A.data, dtype, what, device=device)
        except ValueError:
            # retry with row scales: underflowing entries negligible in their row flush to 0
            return demote(A.data, dtype, what, scale=row_scale(A.indptr, A.data),
                          device=device)

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    @property
    def nbytes(self) -> int:
        """Bytes of matrix storage (values, indices, row pointers)."""
        return int(self.data.nbytes + self.indices.nbytes + self.indptr.nbytes)

    def _csr_kernel(self, op, dtypes, mode=""):
        """The device's ``op`` for ``(self.dtype, *dtypes)`` and ``mode`` with this matrix's
        arrays bound: ``f(*vectors)`` calls ``op(parts, indptr, indices, data, *vectors)``.
        ``KeyError`` (naming what exists) where the device has none."""
        kern = lookup(self.device, op, (self.dtype, *dtypes), mode)
        # a partial, not a closure: one Python frame less per product
        return partial(kern, self.parts, self.indptr, self.indices, self.data)

    def _kernel(self, xd, yd):
        return self._csr_kernel("spmv", (xd, yd), self._mode)            # y = A x

    def _block_kernel(self, xd, yd):
        return self._csr_kernel("spmm", (xd, yd), self._mode)     # Y = A X, one sweep over A

    def _fused_dot_kernel(self, op, dtype):
        """``op`` (a product fused with its dot) bound for square ``A`` with FP64 row sums,
        or ``None`` where it does not apply or the device has none."""
        dt = dtype_name(dtype)
        if self._mode != "acc64" or self.shape[0] != self.shape[1]:
            return None
        try:
            return self._csr_kernel(op, (dt, dt), "acc64")
        except KeyError:
            return None

    def bind_block_dot(self, dtype):
        """Kernel ``f(X, Y, out)`` computing ``Y <- A X`` and ``out[c] <- X[:, c] . Y[:, c]``
        (FP64) in one sweep over ``A`` (square ``A``, FP64 row sums), or ``None`` where the
        device has none (the caller composes the product and a column dot)."""
        return self._fused_dot_kernel("spmm_dot", dtype)

    def bind_block_residual(self, dtype):
        """Kernel ``f(X, B, R)`` computing ``R <- B - A X`` for ``(n, k)`` blocks (FP64 row
        sums, one sweep over ``A``); ``KeyError`` where the device has none."""
        dt = dtype_name(dtype)
        return self._csr_kernel("residual_mm", (dt, dt, dt), "acc64")     # R = B - A X

    def bind_dot(self, dtype):
        """Kernel ``f(x, y) -> x . y`` computing ``y <- A x`` and the native dot of
        ``x`` and ``y`` in one pass (square ``A``, FP64 row sums), or ``None`` when the
        device has no fused kernel for this operator (the caller composes ``bind``
        and a dot)."""
        return self._fused_dot_kernel("spmv_dot", dtype)          # y = A x; return x . y

    def bind_residual(self, dtype):
        """Kernel ``f(x, b, r)`` computing ``r <- b - A x`` (FP64 row sums)."""
        dt = dtype_name(dtype)
        return self._csr_kernel("residual", (dt, dt, dt), "acc64")        # r = b - A x

    def transposed(self, what="A^T"):
        """``A^T`` as a SparseOperator (:meth:`_Stored.transposed`, square ``A``): CSR of
        the transpose, the stored values moved (:func:`transpose_stored`)."""
        tp, ti, td = _transposed_csr(self.indptr, self.indices, self.data)
        T = SimpleNamespace(indptr=tp, indices=ti, data=td, shape=self.shape)
        return SparseOperator(T, dtype=self.dtype, accumulate=self.accumulate,
                              device=self.device, what=what)

    def bind_residual_dd(self):
        """Kernel ``f(xh, xl, b, r, rl)`` computing ``r + rl <- b - A (xh + xl)`` with Dot2
        per row (FP64 values only; the device's ``residual_dd``: a ``KeyError`` naming what
        exists where it has none)."""
        return self._csr_kernel("residual_dd", ())        # r + rl = b - A (xh + xl)

    def to_scipy(self):
        """The stored matrix as a SciPy CSR matrix with FP64 (complex128) values (on the
        host)."""
        return sp.csr_matrix((to_host(self.data).astype(np.result_type(self.dtype, np.float64)),
                              to_host(self.indices),
                              to_host(self.indptr)), shape=self.shape)


class BSROperator(_Stored):
    """A BSR matrix stored in ``dtype`` on ``device``, multiplied by the ``bsrmv`` kernel.

    ``data`` of shape ``(nnzb, b, b)`` (FP64 or complex128 on the host, or already on
    ``device``; range-checked by :func:`~mpsolve._demote.demote` where it is; complex
    blocks are stored in ``dtype``'s complex twin), ``indptr``/``indices``
    over blocks; ``n`` scalar rows (a trailing partial block is allowed: the kernel skips
    rows and columns past ``n``).
    """

    def __init__(self, indptr, indices, data, n, dtype, accumulate="float32", what="M",
                 device=DEFAULT_DEVICE):
        self.device = device
        xp = np if on_host(data) else array_module(device)   # device blocks: demoted there
        wide = np.complex128 if data.dtype.kind == "c" else np.float64
        if wide is np.complex128:
            dtype = np.result_type(dtype, np.complex64)
        if data.dtype != np.dtype(dtype):          # (blocks already stored: kept as they are)
            data = demote(xp.ascontiguousarray(data, dtype=wide), dtype, what, device=device,
                          scale=lambda: bsr_row_scale(indptr, data))
        data = xp.ascontiguousarray(data)
        self.indptr = to_device(np.ascontiguousarray(indptr, dtype=np.int32), device)
        self.indices = to_device(np.ascontiguousarray(indices, dtype=np.int32), device)
        self.data = to_device(data, device)
        self.dtype = data.dtype
        self.n = int(n)
        self.b = int(data.shape[1])
        self.shape = (self.n, self.n)
        self.accumulate = dtype_name(accumulate)
        self._mode = _acc_mode(accumulate)
        self.parts = launch_plan(device, "bsrmv", self.indptr)
        self._bound = {}

    @property
    def nbytes(self):
        return int(self.data.nbytes + self.indices.nbytes + self.indptr.nbytes)

    def _kernel(self, xd, yd):
        kern = lookup(self.device, "bsrmv", (self.dtype, xd, yd), self._mode)
        parts, ip, ix, d = self.parts, self.indptr, self.indices, self.data

        def f(x, y):
            kern(parts, ip, ix, d, x, y)  # y = M x

        return f

    def transposed(self, what="M^T"):
        """``M^T`` as a BSROperator (:meth:`_Stored.transposed`): block pattern transposed,
        each block transposed, the stored values moved (:func:`transpose_stored`)."""
        tp, ti, td = transpose_stored(self.indptr, self.indices, self.data)
        return BSROperator(tp, ti, td, self.n, self.dtype, self.accumulate, what,
                           device=self.device)

    def to_scipy(self):
        """The stored matrix as a SciPy CSR matrix with FP64 (complex128) values (on the
        host)."""
        nbr = self.indptr.size - 1
        wide = np.complex128 if self.dtype.kind == "c" else np.float64
        B = sp.bsr_matrix((to_host(self.data).astype(wide), to_host(self.indices),
                           to_host(self.indptr)), shape=(nbr * self.b, nbr * self.b))
        return B.tocsr()[: self.n, : self.n]


class DiagonalOperator(_Stored):
    """``diag(d)`` stored in ``dtype`` on ``device`` (``d`` given in FP64 or complex128 on
    the host)."""

    def __init__(self, d, dtype, what="diagonal", device=DEFAULT_DEVICE):
        self.device = device
        d = np.asarray(d)   # FP64, or complex128 for a complex diagonal
        d = demote(np.ascontiguousarray(d, dtype=np.result_type(d.dtype, np.float64)), dtype,
                   what, device=device)
        self.dtype = d.dtype
        self.d = to_device(d, device)
        self.shape = (d.size, d.size)
        self._bound = {}

    @property
    def nbytes(self):
        return int(self.d.nbytes)

    def _kernel(self, xd, yd):
        kern = lookup(self.device, "dmul", (self.dtype, xd, yd))
        d = self.d

        def f(x, y):
            kern(d, x, y)  # y = diag(d) x

        return f

    def _block_kernel(self, xd, yd):
        kern = lookup(self.device, "dmul_mm", (self.dtype, xd, yd))
        d = self.d

        def f(X, Y):
            kern(d, X, Y)  # Y = diag(d) X

        return f

    def transposed(self):
        """``diag(d)^T = diag(d)``: this operator itself."""
        return self

    def to_scipy(self):
        d = to_host(self.d)
        return sp.diags(d.astype(np.result_type(d.dtype, np.float64)), format="csr")


def _unit_row_scale(indptr, values):
    """For each stored value of a triangular factor with a unit diagonal it does not store
    (CSR, or BSR blocks ``(nnzb, b, b)`` with identity diagonal blocks): the largest
    magnitude in its scalar row, at least 1 (:func:`demote`'s ``scale``)."""
    ip, v = to_host(indptr), to_host(values)
    if v.ndim == 1:
        return np.maximum(row_scale(ip, v), 1.0)
    return np.maximum(bsr_row_scale(ip, v), 1.0)


def _pivot_block_scale(dinv):
    """:func:`~mpsolve._demote.bsr_row_scale` of inverse pivot blocks ``(nb, b, b)`` (one
    block a row): a value far below the rest of its row of the inverse is negligible."""
    return bsr_row_scale(np.arange(dinv.shape[0] + 1), dinv)


class TriangularSweeps(_Stored):
    """``y = (L D U')^{-1} x`` by two sweeps (ILU(0)'s apply).

    ``L`` strictly lower (rows in order), ``U'`` strictly upper unit part of
    ``D^{-1} U`` (rows in *reverse* order), ``dinv = 1 / diag(U)``: the layout of
    :mod:`mpsolve.precond.ilu`.  ``bounds`` splits the rows into independent
    diagonal blocks (``[0, n]``: one block).  Each row's sum is carried in FP64
    (complex128 for complex factors, stored in complex64/complex128).
    """

    def __init__(self, lptr, lind, lval, uptr, uind, uval, dinv, bounds, dtype, what="ILU(0)",
                 device=DEFAULT_DEVICE):
        self.device = device
        # the rows of L and D^-1 U hold an implicit unit diagonal: a value that underflows
        # is negligible next to max(1, its row's largest entry) (demote's rule)
        self.lval = to_device(demote(lval, dtype, f"{what} factor L", device=device,
                                     scale=lambda: _unit_row_scale(lptr, lval)), device)
        self.uval = to_device(demote(uval, dtype, f"{what} factor D^-1 U", device=device,
                                     scale=lambda: _unit_row_scale(uptr, uval)), device)
        self.dinv = to_device(demote(dinv, dtype, f"{what} inverse pivots", device=device),
                              device)
        self.lptr, self.lind = to_device(lptr, device), to_device(lind, device)
        self.uptr, self.uind = to_device(uptr, device), to_device(uind, device)
        self.bounds = to_device(bounds, device)
        self.dtype = np.dtype(dtype)
        n = int(dinv.size)
        self.shape = (n, n)
        self._bound = {}

    @property
    def nbytes(self):
        return int(sum(a.nbytes for a in (self.lptr, self.lind, self.lval, self.uptr,
                                          self.uind, self.uval, self.dinv)))

    def _kernel(self, xd, yd):
        kern = lookup(self.device, "ilu_sweeps", (self.dtype, xd, yd))
        args = (self.bounds, self.lptr, self.lind, self.lval, self.uptr, self.uind, self.uval,
                self.dinv)

        def f(x, y):
            kern(*args, x, y)  # y = U'^-1 D^-1 L^-1 x

        return f

    def _block_kernel(self, xd, yd):
        kern = lookup(self.device, "ilu_sweeps_mm", (self.dtype, xd, yd))
        args = (self.bounds, self.lptr, self.lind, self.lval, self.uptr, self.uind, self.uval,
                self.dinv)

        def f(X, Y):
            kern(*args, X, Y)  # Y = U'^-1 D^-1 L^-1 X, k right-hand sides per row

        return f

    def transposed(self):
        """``M^T = (L D U')^{-T} = (U'^T D L^T)^{-1}`` as TriangularSweeps
        (:meth:`_Stored.transposed`): ``U'^T`` is unit lower and ``L^T`` unit upper, so the
        transpose has this very layout, with the stored values moved (never rounded again,
        on their device) and the same ``dinv`` and diagonal blocks."""
        lo = _transposed_csr(*_reverse_rows(self.uptr, self.uind, self.uval))   # U'^T
        up = _reverse_rows(*_transposed_csr(self.lptr, self.lind, self.lval))   # L^T
        return TriangularSweeps(*lo, *up, self.dinv, to_host(self.bounds), self.dtype,
                                what="transposed factors", device=self.device)


class BlockTriangularSweeps(_Stored):
    """``y = (L D U')^{-1} x`` by a block forward and a block backward sweep (BILU(0)'s
    apply; the block analogue of :class:`TriangularSweeps`).

    ``L`` strictly lower blocks (block rows in order), ``U'`` strictly upper blocks of
    ``D^{-1} U`` (block rows in *reverse* order), ``dinv = D^{-1}`` ``(nb, b, b)``: the
    layout of the ``bilu_split`` kernel, given in FP64 on the host, range-checked and
    stored in ``dtype`` on ``device``; ``n`` scalar rows (may end inside the last
    block).  Each block row's sums are carried in FP64 (``bilu_sweeps``).
    """

    def __init__(self, lptr, lind, lval, uptr, uind, uval, dinv, n, dtype, what="BILU(0)",
                 device=DEFAULT_DEVICE):
        self.device = device
        # the rows of L and D^-1 U hold an implicit unit diagonal: a value that underflows
        # is negligible next to max(1, its row's largest entry) (demote's rule)
        self.lval = to_device(demote(lval, dtype, f"{what} factor L", device=device,
                                     scale=lambda: _unit_row_scale(lptr, lval)), device)
        self.uval = to_device(demote(uval, dtype, f"{what} factor D^-1 U", device=device,
                                     scale=lambda: _unit_row_scale(uptr, uval)), device)
        self.dinv = to_device(demote(dinv, dtype, f"{what} inverse pivot blocks",
                                     device=device, scale=lambda: _pivot_block_scale(dinv)),
                              device)
        self.lptr, self.lind = to_device(lptr, device), to_device(lind, device)
        self.uptr, self.uind = to_device(uptr, device), to_device(uind, device)
        self.dtype = np.dtype(dtype)
        self.b = int(dinv.shape[1])
        self.shape = (int(n), int(n))
        self._bound = {}

    @property
    def nbytes(self):
        return int(sum(a.nbytes for a in (self.lptr, self.lind, self.lval, self.uptr,
                                          self.uind, self.uval, self.dinv)))

    def _kernel(self, xd, yd):
        kern = lookup(self.device, "bilu_sweeps", (self.dtype, xd, yd))
        args = (self.lptr, self.lind, self.lval, self.uptr, self.uind, self.uval, self.dinv)

        def f(x, y):
            kern(*args, x, y)  # y = U'^-1 D^-1 L^-1 x

        return f

    def transposed(self):
        """``M^T = (U'^T D^T L^T)^{-1}`` as BlockTriangularSweeps (:meth:`_Stored.transposed`;
        the block form of :meth:`TriangularSweeps.transposed`): block patterns transposed,
        each block transposed, ``dinv`` blocks transposed, the stored values moved."""
        lo = transpose_stored(*_reverse_rows(self.uptr, self.uind, self.uval))  # U'^T
        up = _reverse_rows(*transpose_stored(self.lptr, self.lind, self.lval))  # L^T
        xp = array_module(self.device)
        dinv = xp.ascontiguousarray(xp.swapaxes(self.dinv, 1, 2))
        return BlockTriangularSweeps(*lo, *up, dinv, self.shape[0], self.dtype,
                                     what="transposed block factors", device=self.device)


def _reverse_rows(ptr, ind, val):
    """CSR (BSR) arrays with the rows -- and each row's entries -- in reverse order: the
    backward sweep's layout of an upper factor from plain CSR, and back (an involution;
    arrays where they are)."""
    xp = array_module(device_of(val))
    return ((ind.size - ptr[::-1]).astype(ptr.dtype), xp.ascontiguousarray(ind[::-1]),
            xp.ascontiguousarray(val[::-1]))


class ThreadBuffers(threading.local):
    """The scratch arrays of an ``apply``, one dict (``.d``) per thread: a set-up
    operator then applies correctly from several threads at once.  A pickled or copied
    one starts empty (scratch is remade on first use; a thread-local cannot be pickled)."""

    def __init__(self):
        self.d = {}

    def __reduce__(self):
        return (ThreadBuffers, ())


class OperatorChain:
    """``out <- F_k ... F_2 F_1 r`` for stored operators ``F_j`` (each with ``bind``).

    One scratch vector per intermediate, allocated on the first call for a
    given pair of vector dtypes and reused afterwards (``apply`` allocates
    nothing then).  Intermediates are kept in the dtype of ``out`` (the working
    precision), on the operators' device.  The scratch vectors are per thread: one chain
    (one set-up preconditioner) applies correctly from several threads at once.
    """

    def __init__(self, ops):
        self.ops = list(ops)
        self.device = self.ops[0].device if self.ops else DEFAULT_DEVICE
        self._local = ThreadBuffers()

    def __call__(self, r, out):
        ops = self.ops
        if len(ops) == 1:
            ops[0].bind(r.dtype, out.dtype)(r, out)  # out = F r
            return
        key = (r.dtype.name, out.dtype.name)
        scratch = self._local.d
        sc = scratch.get(key)
        if sc is None:
            xp = array_module(self.device)
            sc = scratch[key] = (
                [op.bind(r.dtype if j == 0 else out.dtype, out.dtype) for j, op in enumerate(ops)],
                [xp.empty(out.shape[0], dtype=out.dtype) for _ in range(min(2, len(ops) - 1))],
            )
        fs, bufs = sc
        src = r
        for j, f in enumerate(fs):
            dst = out if j == len(fs) - 1 else bufs[j % len(bufs)]
            f(src, dst)  # dst = F_j src
            src = dst

    def bind_block(self, x_dtype, y_dtype):
        """``f(X, Y)``: ``Y <- F_k ... F_1 X`` for ``(n, k)`` blocks, each operator in one
        sweep (:meth:`_Stored.bind_block`), scratch blocks made once per width; ``None``
        when an operator of the chain has no block kernel."""
        fs = [op.bind_block(x_dtype if j == 0 else y_dtype, y_dtype)
              for j, op in enumerate(self.ops)]
        if any(f is None for f in fs):
            return None
        if len(fs) == 1:
            return fs[0]
        xp = array_module(self.device)
        local = threading.local()                     # scratch blocks per thread

        def f(X, Y):
            scratch = getattr(local, "scratch", None)
            if scratch is None:
                scratch = local.scratch = {}
            bufs = scratch.get(Y.shape)
            if bufs is None:
                bufs = scratch[Y.shape] = [xp.empty(Y.shape, dtype=Y.dtype)
                                           for _ in range(min(2, len(fs) - 1))]
            src = X
            for j, g in enumerate(fs):
                dst = Y if j == len(fs) - 1 else bufs[j % len(bufs)]
                g(src, dst)  # dst = F_j src
                src = dst

        return f

    def transposed(self):
        """``(F_k ... F_1)^T = F_1^T ... F_k^T``: the chain of the transposed operators in
        reverse order."""
        return OperatorChain([op.transposed() for op in reversed(self.ops)])

    @property
    def nbytes(self):
        ob = sum(int(op.nbytes) for op in self.ops)
        scratch = self._local.d                                  # this thread's
        return ob + sum(int(b.nbytes) for _, bufs in scratch.values() for b in bufs)


class CallableOperator:
    """Wraps an object with ``matvec`` (e.g. a ``LinearOperator``) as an operator.

    The callable gets and returns arrays of the solve's device; its result is
    copied into the output vector.
    """

    def __init__(self, A, device=DEFAULT_DEVICE, what="A"):
        self.A = A
        self.shape = A.shape
        self.device = device
        self.dtype = np.dtype(getattr(A, "dtype", None) or np.float64)
        self.nnz = None
        self.nbytes = 0
        self.what = what

    def bind(self, x_dtype, y_dtype):
        A = self.A
        xp = array_module(self.device)
        what = self.what

        def f(x, y):
            v = xp.asarray(A.matvec(x)).reshape(-1)  # y = A x
            if v.shape != y.shape:
                raise ValueError(
                    f"{what}.matvec returned shape {v.shape}, expected {y.shape}"
                )
            if v.dtype.kind == "c" and y.dtype.kind != "c":
                if bool(xp.any(v.imag)):    # (NumPy would drop them with a warning)
                    raise TypeError(
                        f"{what}.matvec returned complex values for a real system (its "
                        f"dtype says {self.dtype.name}): give the operator a complex dtype "
                        "(LinearOperator(..., dtype=complex)) to solve a complex system")
                v = v.real
            y[:] = v

        return f

    def bind_residual(self, dtype):
        mv = self.bind(dtype, dtype)
        xp = array_module(self.device)

        def f(x, b, r):
            mv(x, r)
            xp.subtract(b, r, out=r)  # r = b - A x

        return f

    def matvec(self, x):
        return array_module(self.device).asarray(self.A.matvec(x)).reshape(-1)
