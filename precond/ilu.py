"""ILU(0): incomplete LU factorization on the pattern of ``A`` -- the preconditioner
PETSc and SciPy users reach for first, and the one (Block-)ISAI competes with.

``A ~ L U`` with ``L`` unit lower triangular and ``U`` upper triangular, both
restricted to the pattern of ``A`` (Saad, *Iterative Methods for Sparse Linear
Systems*, 2nd ed., Algorithm 10.4, IKJ variant on sorted CSR, with a dense work row
as PETSc's numeric factorization).  The factorization runs in FP64; the factors are
stored in ``dtype`` (FP32 by default) as ``L`` and ``D^{-1} U`` and applied by two
sequential sweeps that carry each row's sum in FP64 (forward with ``L``, backward
with ``D^{-1} U`` and ``1/diag(U)``).  Optionally one diagonal block per thread.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import get_num_threads, njit, prange

from mpsolve._demote import demote
from mpsolve.kernels.cpu._config import JIT, NATIVE_REDUCTION_MATH
from mpsolve.kernels.cpu.spmv import partition_rows
from mpsolve.kernels.cpu.intrin import fma

from ._local import rows_text
from .base import Preconditioner

__all__ = ["ILU0", "ZeroPivotError", "ilu0_factor"]


class ZeroPivotError(ValueError):
    """ILU(0) met a zero (or missing) pivot; the message names the row."""


@njit(**JIT)
def _ilu0_ikj(n, indptr, indices, data, diag):
    # Saad Alg. 10.4 (IKJ) with a dense work row, as PETSc's numeric factorization:
    # scatter row i into w, for each k < i in its pattern (ascending): l_ik = w_k / u_kk,
    # w_j -= l_ik u_kj over the strict upper part of row k -- without testing whether j
    # is in row i's pattern: updates outside it land in w and are never gathered (each
    # row overwrites w on its own pattern first) -- then gather w back.  Branch-free
    # inner loop.  Returns -1 on success, else the first row with a bad pivot.
    w = np.zeros(n, dtype=np.float64)
    inv = np.empty(n, dtype=np.float64)
    for i in range(n):
        s, e = indptr[i], indptr[i + 1]
        for k in range(s, e):
            w[indices[k]] = data[k]
        for kk in range(s, e):
            k = indices[kk]
            if k >= i:
                break
            lik = w[k] * inv[k]
            w[k] = lik
            for jj in range(diag[k] + 1, indptr[k + 1]):
                w[indices[jj]] -= lik * data[jj]
        for k in range(s, e):
            data[k] = w[indices[k]]
        if diag[i] < 0:
            return i
        piv = data[diag[i]]
        if piv == 0.0 or not np.isfinite(piv):
            return i
        inv[i] = 1.0 / piv
    return -1


@njit(**JIT)
def _diag_positions(indptr, indices):
    n = indptr.size - 1
    diag = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        for k in range(indptr[i], indptr[i + 1]):
            if indices[k] == i:
                diag[i] = k
                break
    return diag


def ilu0_factor(C):
    """FP64 ILU(0) of a canonical CSR matrix ``C``.

    Returns ``(indptr, indices, data, diag)``: the combined factors in the
    pattern of ``C`` (strictly lower part = ``L`` without its unit diagonal,
    upper part = ``U``) and the position of each diagonal entry.  ``indptr`` and
    ``indices`` are ``C``'s own arrays (not copied, never written).

    Raises
    ------
    ZeroPivotError
        If a pivot ``u_ii`` is zero, not finite, or structurally missing.
    """
    n = C.shape[0]
    indptr, indices = C.indptr, C.indices
    data = C.data.astype(np.float64)  # a copy: the user's matrix is never touched
    diag = _diag_positions(indptr, indices)
    bad = _ilu0_ikj(n, indptr, indices, data, diag)
    if bad >= 0:
        missing = np.flatnonzero(diag < 0)
        what = ("is structurally missing" if diag[bad] < 0 else
                f"became {data[diag[bad]]!r}")
        raise ZeroPivotError(
            f"ILU(0): the pivot of row {bad} {what}"
            + (f" (rows without a diagonal entry: {rows_text(missing)})" if missing.size else "")
            + "; ILU(0) needs nonzero pivots -- permute A to a zero-free diagonal, "
            "or use ISAI/Block-Jacobi instead"
        )
    return indptr, indices, data, diag


def split_factors(indptr, indices, data, n):
    """``(L, U)`` (SciPy CSR, FP64, canonical) from combined factors; ``L`` gets its
    unit diagonal.  The pattern of ``A`` is kept, explicit zeros included."""
    rows = np.repeat(np.arange(n), np.diff(indptr))
    lo, up = indices < rows, indices >= rows
    L = sp.csr_matrix((np.concatenate([data[lo].astype(np.float64), np.ones(n)]),
                       (np.concatenate([rows[lo], np.arange(n)]),
                        np.concatenate([indices[lo], np.arange(n)]))), shape=(n, n))
    U = sp.csr_matrix((data[up].astype(np.float64), (rows[up], indices[up])), shape=(n, n))
    L.sort_indices()
    U.sort_indices()
    return L, U


def ilu0_split(C):
    """``(L, U)`` of ILU(0) of ``C`` as SciPy CSR FP64 matrices (``L`` with its unit diagonal)."""
    indptr, indices, data, _ = ilu0_factor(C)
    return split_factors(indptr, indices, data, C.shape[0])


@njit(**JIT)
def _symmetric_mirror(indptr, indices, data, rtol, mirror):
    """True when the pattern is symmetric and ``|a_ij - a_ji| <= rtol max(|a_ij|, |a_ji|)``
    for every stored entry; then ``mirror[k]`` is the position of entry ``k``'s
    transpose.  One pass with a cursor per row (sorted rows): walking the rows in
    order visits the entries of column ``j`` by ascending row, which for a symmetric
    pattern are the entries of row ``j`` in order."""
    n = indptr.size - 1
    cursor = indptr[:-1].copy()
    for i in range(n):
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            m = cursor[j]
            if m >= indptr[j + 1] or indices[m] != i:
                return False
            cursor[j] = m + 1
            a, b = data[k], data[m]
            if abs(a - b) > rtol * max(abs(a), abs(b)):
                return False
            mirror[k] = m
    return True


@njit(**JIT)
def _split(indptr, indices, data, diag, symmetric, mirror, lval, lind, lptr, uval, uind, uptr,
           dinv):
    """Lay the combined FP64 factors out for the solves.

    ``L``: strict lower part, rows in order, columns ascending (the nearest column
    last).  ``U' = D^{-1} U`` (unit upper, strict part): rows in *reverse* order so the
    backward sweep streams forward through memory, columns descending (the nearest
    column last again).  ``dinv = 1 / diag(U)``.  With ``symmetric`` the values of
    ``U'`` are those of ``L^T`` (for symmetric ``A``, ``U = D L^T`` in exact arithmetic),
    which makes the stored ``M = (L D L^T)^{-1}`` symmetric bit for bit.
    """
    n = indptr.size - 1
    q = 0
    for i in range(n):
        lptr[i] = q
        for k in range(indptr[i], diag[i]):
            lval[q] = data[k]
            lind[q] = indices[k]
            q += 1
        dinv[i] = 1.0 / data[diag[i]]
    lptr[n] = q
    q = 0
    for p in range(n):
        i = n - 1 - p
        uptr[p] = q
        d = data[diag[i]]
        for k in range(indptr[i + 1] - 1, diag[i], -1):
            j = indices[k]
            if symmetric:
                uval[q] = data[mirror[k]]  # l_ji
            else:
                uval[q] = data[k] / d
            uind[q] = j
            q += 1
    uptr[n] = q


@njit(inline="always", **JIT)
def _sweeps(lo, hi, lptr, lind, lval, uptr, uind, uval, dinv, r, out):
    """``out[lo:hi] = (L D U')^{-1} r[lo:hi]`` for one diagonal block (rows ``lo..hi-1``,
    no entries outside it): forward sweep with unit ``L``, backward with unit ``U'``
    scaled by ``dinv``; each row's sum in FP64.

    Triangular solves are latency bound: row ``i`` waits for row ``i - 1``.  The
    previous row's value is kept in an FP64 register and its term (stored last in the
    row) subtracted last with one FMA, so the chain between rows is one multiply-add
    instead of a store, a reload and (for FP32 vectors) two conversions.
    """
    n = out.size
    prev = 0.0
    for i in range(lo, hi):
        s, e = lptr[i], lptr[i + 1]
        near = 0.0
        if e > s and lind[e - 1] == i - 1:
            e -= 1
            near = np.float64(lval[e])
        acc = np.float64(r[i])
        for k in range(s, e):
            acc -= np.float64(lval[k]) * np.float64(out[lind[k]])
        acc = fma(-near, prev, acc)
        out[i] = acc
        prev = acc
    prev = 0.0
    for p in range(n - hi, n - lo):
        i = n - 1 - p
        s, e = uptr[p], uptr[p + 1]
        near = 0.0
        if e > s and uind[e - 1] == i + 1:
            e -= 1
            near = np.float64(uval[e])
        acc = np.float64(out[i]) * np.float64(dinv[i])
        for k in range(s, e):
            acc -= np.float64(uval[k]) * np.float64(out[uind[k]])
        acc = fma(-near, prev, acc)
        out[i] = acc
        prev = acc


@njit(fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _ilu_solve(lptr, lind, lval, uptr, uind, uval, dinv, r, out):
    """Both sweeps over all rows (one block)."""
    _sweeps(0, out.size, lptr, lind, lval, uptr, uind, uval, dinv, r, out)


@njit(parallel=True, fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _ilu_solve_blocks(bounds, lptr, lind, lval, uptr, uind, uval, dinv, r, out):
    """The sweeps of independent diagonal blocks, one task per block."""
    for t in prange(bounds.size - 1):
        _sweeps(bounds[t], bounds[t + 1], lptr, lind, lval, uptr, uind, uval, dinv, r, out)


@njit(**JIT)
def _drop_coupling(indptr, indices, data, bounds):
    """The block-diagonal part of a CSR matrix: entries whose column lies in their
    row's block (``bounds``), in order."""
    n = indptr.size - 1
    block = np.empty(n, np.int64)
    for t in range(bounds.size - 1):
        block[bounds[t]:bounds[t + 1]] = t
    ip = np.empty(n + 1, np.int64)
    keep = 0
    for i in range(n):
        ip[i] = keep
        for k in range(indptr[i], indptr[i + 1]):
            if block[indices[k]] == block[i]:
                keep += 1
    ip[n] = keep
    ix = np.empty(keep, indices.dtype)
    dv = np.empty(keep, data.dtype)
    q = 0
    for i in range(n):
        for k in range(indptr[i], indptr[i + 1]):
            if block[indices[k]] == block[i]:
                ix[q] = indices[k]
                dv[q] = data[k]
                q += 1
    return ip, ix, dv


#: Fewest rows per block when ``ILU0(blocks="threads")`` splits a matrix for the threads.
MIN_BLOCK_ROWS = 50_000


#: Relative tolerance of the symmetry check of ``ILU0(symmetric=None)``.
SYMMETRY_RTOL = 1e-12


class ILU0(Preconditioner):
    """ILU(0) preconditioner ``M = (L U)^{-1}`` on the pattern of ``A``.

    Parameters
    ----------
    dtype : {"float32", "float64"} or None
        Storage precision of the factors (FP32 when set up on its own).  The
        factorization itself always runs in FP64; the triangular solves carry
        each row's sum in FP64 and round it to the dtype of ``out``.
    blocks : int or "threads"
        Number of diagonal blocks, factorised and solved independently, one thread
        each (block Jacobi with ILU(0) blocks: what PETSc's ``bjacobi`` gives with
        one block per MPI rank).  Entries coupling two blocks are dropped before the
        factorisation; blocks are contiguous row ranges of about equal nonzeros.
        Default 1: plain ILU(0).  ``"threads"``: one block per Numba thread, as long as
        each gets at least ``MIN_BLOCK_ROWS`` (50,000) rows.  The sweeps then run on
        every core at the price of iterations (measured on this 2-core machine,
        ``poisson3d:100`` CG: apply 10.8 -> 7.4 ms, iterations 101 -> 117 -- a wash
        with two cores; it pays with more).
    symmetric : bool or None
        ``True``: ``A`` is symmetric, store ``L`` and ``D`` only in effect
        (``U = D L^T``, the IC(0) / LDL^T form) so ``M`` is symmetric bit for bit
        and usable with CG (and PETSc's ``applyTranspose``).  ``False``: general
        ILU(0).  ``None`` (default): symmetric when ``A``'s pattern is and its
        values agree to ``SYMMETRY_RTOL`` (1e-12) relative.

    Attributes
    ----------
    nbytes : int
        Bytes of the stored factors (values, indices, row pointers, inverse
        diagonal).
    symmetric : bool
        After setup: whether the symmetric form was used.

    Raises
    ------
    ZeroPivotError
        At setup, on a zero or missing pivot (the message names the row).

    Notes
    -----
    The solves are sequential (a row depends on the rows before it) -- the cost
    ISAI avoids by replacing them with SpMVs -- and latency bound rather than
    bandwidth bound; see ``_sweeps`` for how the chain between rows is kept
    short.  Storage: ``L`` forward, ``D^{-1} U`` backward, ``1/diag(U)``, so
    neither sweep divides.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from mpsolve.precond import ILU0
    >>> A = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(5, 5)).tocsr()
    >>> M = ILU0(dtype="float64").setup(A)
    >>> x = M.matvec(A @ np.ones(5))      # ILU(0) is exact on a tridiagonal matrix
    >>> bool(np.allclose(x, 1.0)), M.symmetric
    (True, True)
    """

    name = "ilu0"
    symmetric = False

    def __init__(self, dtype=None, symmetric=None, blocks=1):
        super().__init__(dtype)
        if symmetric not in (None, True, False):
            raise ValueError(f"symmetric={symmetric!r}: use True, False or None (detect)")
        if blocks != "threads" and (isinstance(blocks, bool) or not isinstance(blocks, int)
                                    or blocks < 1):
            raise ValueError(f"blocks={blocks!r}: use a positive integer, or 'threads' (one "
                             "block per thread for large systems)")
        self._symmetric_request = symmetric
        self._blocks_request = blocks
        self.bounds = None

    def _block_bounds(self, A):
        n = A.shape[0]
        nb = self._blocks_request
        if nb == "threads":
            nb = max(1, min(get_num_threads(), n // MIN_BLOCK_ROWS))
        nb = max(1, min(nb, n))
        if nb == 1:
            return np.array([0, n], dtype=np.int64)
        return partition_rows(A.indptr, nb)

    def _setup(self, A, dtype):
        self.bounds = self._block_bounds(A)
        if self.bounds.size > 2:
            ip, ix, dv = _drop_coupling(A.indptr, A.indices, A.data, self.bounds)
            A = sp.csr_matrix((dv, ix, ip), shape=A.shape)
            A.has_sorted_indices = True
        indptr, indices, data, diag = ilu0_factor(A)
        sym = self._symmetric_request
        mirror = np.empty(indices.size if sym is not False else 0,
                          np.int32 if indices.size < 2**31 else np.int64)
        if sym is None:
            sym = bool(_symmetric_mirror(A.indptr, A.indices, A.data, SYMMETRY_RTOL, mirror))
        elif sym and not _symmetric_mirror(A.indptr, A.indices, A.data, 1e-8, mirror):
            raise ValueError("ILU0(symmetric=True): A is not symmetric (pattern or values "
                             "differ by more than 1e-8 relative); use symmetric=False or None")
        n = A.shape[0]
        nl = int(np.sum(diag - indptr[:-1]))
        nu = indices.size - n - nl
        lptr = np.empty(n + 1, np.int64)
        uptr = np.empty(n + 1, np.int64)
        lind = np.empty(nl, np.int32)
        uind = np.empty(nu, np.int32)
        lval = np.empty(nl, np.float64)
        uval = np.empty(nu, np.float64)
        dinv = np.empty(n, np.float64)
        _split(indptr, indices, data, diag, sym, mirror, lval, lind, lptr, uval, uind, uptr, dinv)
        self.symmetric = sym
        self.lptr, self.lind = lptr.astype(np.int32), lind
        self.uptr, self.uind = uptr.astype(np.int32), uind
        self.lval = demote(lval, dtype, "ILU(0) factor L")
        self.uval = demote(uval, dtype, "ILU(0) factor D^-1 U")
        self.dinv = demote(dinv, dtype, "ILU(0) inverse pivots")

    @property
    def blocks(self):
        """Number of diagonal blocks used (after setup)."""
        return 0 if self.bounds is None else int(self.bounds.size - 1)

    def apply(self, r, out):
        if self.bounds.size > 2:  # out = U^-1 L^-1 r, one thread per block
            _ilu_solve_blocks(self.bounds, self.lptr, self.lind, self.lval, self.uptr,
                              self.uind, self.uval, self.dinv, r, out)
        else:
            _ilu_solve(self.lptr, self.lind, self.lval, self.uptr, self.uind, self.uval,
                       self.dinv, r, out)

    def factors(self):
        """``(L, U)`` as SciPy CSR FP64 matrices from the stored values (``L`` with its
        unit diagonal, ``U = D U'`` with ``D = 1 / dinv``)."""
        self._check_ready()
        n = self.shape[0]
        L = sp.csr_matrix((self.lval.astype(np.float64), self.lind, self.lptr), shape=(n, n))
        L = (L + sp.eye(n, format="csr")).tocsr()
        d = 1.0 / self.dinv.astype(np.float64)
        rows = (n - 1 - np.repeat(np.arange(n), np.diff(self.uptr))).astype(np.int64)
        Up = sp.csr_matrix((self.uval.astype(np.float64), (rows, self.uind)), shape=(n, n))
        U = (sp.diags(d) @ (Up + sp.eye(n, format="csr"))).tocsr()
        L.sort_indices()
        U.sort_indices()
        return L, U

    @property
    def nbytes(self):
        if not self.is_setup:
            return 0
        return int(sum(a.nbytes for a in (self.lptr, self.lind, self.lval, self.uptr,
                                          self.uind, self.uval, self.dinv)))
