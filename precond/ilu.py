"""ILU(0): incomplete LU factorization on the pattern of ``A`` -- the baseline
that (Block-)ISAI competes with.

``A ~ L U`` with ``L`` unit lower triangular and ``U`` upper triangular, both
restricted to the pattern of ``A`` (Saad, *Iterative Methods for Sparse Linear
Systems*, 2nd ed., Algorithm 10.4, IKJ variant on sorted CSR).  The
factorization runs in FP64; the factors are stored in ``dtype`` and applied by
two sequential triangular solves (forward with ``L``, backward with ``U``).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

from mpsolve._demote import demote
from mpsolve.kernels.cpu._config import JIT

from ._local import rows_text
from .base import Preconditioner

__all__ = ["ILU0", "ZeroPivotError", "ilu0_factor"]


class ZeroPivotError(ValueError):
    """ILU(0) met a zero (or missing) pivot; the message names the row."""


@njit(**JIT)
def _ilu0_ikj(n, indptr, indices, data, diag):
    # Saad Alg. 10.4: for i = 1..n-1: for k < i in row i: a_ik /= a_kk;
    #   for j > k in row k and in pattern(row i): a_ij -= a_ik a_kj.
    # Returns -1 on success, else the first row with a zero/missing pivot.
    iw = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        for k in range(indptr[i], indptr[i + 1]):
            iw[indices[k]] = k
        for kk in range(indptr[i], indptr[i + 1]):
            j = indices[kk]
            if j >= i:
                break
            piv = data[diag[j]]
            lij = data[kk] / piv
            data[kk] = lij
            for jj in range(diag[j] + 1, indptr[j + 1]):
                p = iw[indices[jj]]
                if p >= 0:
                    data[p] -= lij * data[jj]
        for k in range(indptr[i], indptr[i + 1]):
            iw[indices[k]] = -1
        if diag[i] < 0 or data[diag[i]] == 0.0 or not np.isfinite(data[diag[i]]):
            return i
    return -1


def ilu0_factor(C):
    """FP64 ILU(0) of a canonical CSR matrix ``C``.

    Returns ``(indptr, indices, data, diag)``: the combined factors in the
    pattern of ``C`` (strictly lower part = ``L`` without its unit diagonal,
    upper part = ``U``) and the position of each diagonal entry.

    Raises
    ------
    ZeroPivotError
        If a pivot ``u_ii`` is zero, not finite, or structurally missing.
    """
    n = C.shape[0]
    indptr = C.indptr.astype(np.int64)
    indices = C.indices.astype(np.int64)
    data = C.data.astype(np.float64)  # a copy: the user's matrix is never touched
    rows = np.repeat(np.arange(n), np.diff(indptr))
    diag = np.full(n, -1, dtype=np.int64)
    on = np.flatnonzero(indices == rows)
    diag[rows[on]] = on
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
def _ilu_solve(indptr, indices, data, diag, r, out):
    n = out.size
    # forward: L y = r (unit diagonal), y kept in out
    for i in range(n):
        acc = np.float64(r[i])
        for k in range(indptr[i], diag[i]):
            acc -= np.float64(data[k]) * np.float64(out[indices[k]])
        out[i] = acc
    # backward: U x = y
    for i in range(n - 1, -1, -1):
        acc = np.float64(out[i])
        for k in range(diag[i] + 1, indptr[i + 1]):
            acc -= np.float64(data[k]) * np.float64(out[indices[k]])
        out[i] = acc / np.float64(data[diag[i]])


class ILU0(Preconditioner):
    """ILU(0) preconditioner ``M = (L U)^{-1}`` on the pattern of ``A``.

    Parameters
    ----------
    dtype : {"float32", "float64"} or None
        Storage precision of the factors (FP32 when set up on its own).  The
        factorization itself always runs in FP64; the triangular solves carry
        each row's sum in FP64 and round it to the dtype of ``out``.

    Attributes
    ----------
    nbytes : int
        Bytes of the stored factors (values, indices, row pointers, diagonal
        positions).

    Raises
    ------
    ZeroPivotError
        At setup, on a zero or missing pivot (the message names the row).

    Notes
    -----
    The solves are sequential (a row depends on the rows before it): the cost
    ISAI avoids by replacing them with SpMVs.  ``symmetric`` is False: ``L U``
    is not symmetric even for SPD ``A``.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from mpsolve.precond import ILU0
    >>> A = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(5, 5)).tocsr()
    >>> M = ILU0(dtype="float64").setup(A)
    >>> x = M.matvec(A @ np.ones(5))      # ILU(0) is exact on a tridiagonal matrix
    >>> bool(np.allclose(x, 1.0))
    True
    """

    name = "ilu0"
    symmetric = False

    def _setup(self, A, dtype):
        indptr, indices, data, diag = ilu0_factor(A)
        self.indptr = indptr.astype(np.int32)
        self.indices = indices.astype(np.int32)
        self.diag = diag.astype(np.int32)
        self.data = demote(data, dtype, "ILU(0) factors")

    def apply(self, r, out):
        _ilu_solve(self.indptr, self.indices, self.data, self.diag, r, out)  # out = U^-1 L^-1 r

    def factors(self):
        """``(L, U)`` as SciPy CSR FP64 matrices from the stored values."""
        self._check_ready()
        return split_factors(self.indptr, self.indices, self.data, self.shape[0])

    @property
    def nbytes(self):
        if not self.is_setup:
            return 0
        return int(self.data.nbytes + self.indices.nbytes + self.indptr.nbytes + self.diag.nbytes)
