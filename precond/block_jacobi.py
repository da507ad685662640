"""Block Jacobi: ``M = blockdiag(A_11, ..., A_pp)^{-1}`` with ``b x b`` diagonal blocks."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from mpsolve.operator import BSROperator

from ._localsolve import block_inverse_checked
from ._pattern import block_of
from ._util import PreconditionerWarning, check_count, rows_text, wide_dtype
from .base import Preconditioner
from .jacobi import check_zero_diagonal

__all__ = ["BlockJacobi"]


class BlockJacobi(Preconditioner):
    """Block Jacobi preconditioner with dense ``b x b`` diagonal blocks.

    The diagonal blocks are gathered into a stacked ``(nblocks, b, b)`` FP64
    array, inverted with one batched ``np.linalg.inv``, stored in ``dtype`` and
    applied by the BSR kernel (block-diagonal pattern, fused casts, FP64 row sums).
    Complex ``A``: the blocks are inverted in complex128 and stored in complex64
    (``dtype="float32"``) or complex128, the row sums carried in complex128.

    Parameters
    ----------
    block_size : int, optional
        ``b``.  Default: a BSR ``A``'s own block size, else detected by
        :func:`~mpsolve.precond.detect_block_size` (1 -- point Jacobi --
        when ``A`` has no block structure).  When ``b`` does not divide ``n`` the
        last block is smaller (padded with the identity); a ``b`` above ``n`` is ``n``.
    dtype : {"float32", "float64"} or None
        Storage precision (FP32 when set up on its own).

    Attributes
    ----------
    block_size : int
    fallback_rows : ndarray of int
        Block rows whose diagonal block was singular or ill-conditioned
        (``cond_2 > 1/(1024 eps)``, by SVD); each is replaced by the inverse of
        the block's diagonal, with ``1/max_k |a_jk|`` where ``a_jj = 0`` (``1`` for
        an empty row) -- never a NaN.  A :class:`PreconditionerWarning` names them.
        With block size 1 (point Jacobi) a zero diagonal entry is refused instead, as
        :class:`~mpsolve.precond.Jacobi` refuses it (a ``ValueError`` naming the rows).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from mpsolve.precond import BlockJacobi
    >>> A = sp.block_diag([[[4.0, 1.0], [1.0, 3.0]], [[2.0, 0.0], [0.0, 5.0]]]).tocsr()
    >>> M = BlockJacobi(block_size=2, dtype="float64").setup(A)
    >>> bool(np.allclose(M.matvec(A @ np.arange(4.0)), np.arange(4.0)))
    True
    """

    name = "block-jacobi"
    symmetric = True
    supports_complex = True

    def __init__(self, block_size=None, dtype=None):
        super().__init__(dtype)
        block_size = check_count(block_size, "block_size")
        self._block_request = None if block_size is None else int(block_size)
        self.block_size = self._block_request
        self.fallback_rows = np.zeros(0, dtype=np.int64)

    def _setup(self, A, dtype):
        n = A.shape[0]
        b = block_of(self._block_request, A)
        if b == 1:
            # point Jacobi: a zero diagonal entry is refused as Jacobi refuses it (its
            # fallback, 1/max|row|, only row-scales such a matrix: no convergence)
            check_zero_diagonal(A.diagonal(), "BlockJacobi (block size 1: point Jacobi)",
                                "a block_size whose diagonal blocks are regular, an ILU")
        nblk = -(-n // b)
        # D[k] = A[kb:(k+1)b, kb:(k+1)b], the padded tail with the identity
        C = sp.coo_matrix(A)
        keep = C.row // b == C.col // b
        D = np.zeros((nblk, b, b), dtype=wide_dtype(A.dtype))
        np.add.at(D, (C.row[keep] // b, C.row[keep] % b, C.col[keep] % b), C.data[keep])
        for j in range(n, nblk * b):
            D[-1, j % b, j % b] = 1.0
        rowmax = np.zeros(nblk * b)
        if A.nnz:
            rowmax[:n] = np.maximum.reduceat(np.abs(np.append(A.data, 0.0)),
                                             np.minimum(A.indptr[:-1], A.nnz))
            rowmax[:n][np.diff(A.indptr) == 0] = 0.0
        Dinv, bad = block_inverse_checked(D, rowmax.reshape(nblk, b))
        # M^T = M (conjugate-transposed for complex) where every block of A is
        # (aslinearoperator's rmatvec; ``symmetric`` says "SPD for SPD A", always True)
        self.self_adjoint = bool(np.array_equal(D, np.conj(np.swapaxes(D, 1, 2))))
        self.block_size = b
        self.fallback_rows = np.flatnonzero(bad).astype(np.int64)
        if bad.any():
            warnings.warn(
                f"BlockJacobi: {int(bad.sum())} diagonal block(s) singular or ill-conditioned "
                f"(block rows {rows_text(self.fallback_rows)}); replaced by the inverse of "
                f"their diagonal (1/max|row| where it is 0); listed in .fallback_rows",
                PreconditionerWarning, stacklevel=3)
        # out = blockdiag(A)^-1 r: one BSR product with the block-diagonal pattern
        self._op = BSROperator(np.arange(nblk + 1), np.arange(nblk), Dinv, n, dtype,
                               accumulate="float64", what="BlockJacobi's inverse blocks",
                               device=self.device)

    def _linear(self):
        """One BSR product with FP64 row sums: linear (:meth:`Preconditioner.linear_apply`)."""
        return self._op.accumulate == "float64"

    @property
    def blocks(self):
        """The stored inverse blocks, ``(nblocks, b, b)`` (on the device)."""
        self._check_ready()
        return self._op.data

    def __repr__(self):
        base = super().__repr__()
        return base[:-2] + f", b={self.block_size})>" if self.is_setup else base
