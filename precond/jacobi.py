"""Point Jacobi: ``M = diag(A)^-1``."""
from __future__ import annotations

import numpy as np

from mpsolve._sparse import ZeroDiagonalError
from mpsolve.operator import DiagonalOperator

from ._util import rows_text
from .base import Preconditioner

__all__ = ["Jacobi"]


def check_zero_diagonal(d, who, other):
    """A point-Jacobi form (``who``) refuses a diagonal ``d`` with zeros, naming the rows
    and the ways out (``other``: another preconditioner that takes such a matrix)."""
    zero = np.flatnonzero(d == 0)
    if zero.size:
        raise ZeroDiagonalError(
            f"{who}: A has {zero.size} zero diagonal entr{'y' if zero.size == 1 else 'ies'} "
            f"(rows {rows_text(zero)}); Jacobi needs a nonzero diagonal -- use "
            f"reorder='mc64' (a permutation of A to a zero-free diagonal; precond='auto' "
            f"does so by itself), {other}, or precond='none'")


class Jacobi(Preconditioner):
    """Point Jacobi preconditioner ``M = diag(A)^{-1}``.

    The inverse diagonal is formed in FP64 (complex128 for a complex ``A``) and stored in
    ``dtype`` (its complex twin for a complex ``A``) (FP32 by
    default when set up on its own) as a :class:`~mpsolve.operator.DiagonalOperator`
    on the device it is set up for; ``apply`` is one fused ``out = d * r`` (the ``dmul`` kernel).

    Parameters
    ----------
    dtype : {"float32", "float64"} or None
        Storage precision.
    zero_diagonal : {"raise", "row"}
        A zero diagonal entry: ``"raise"`` (default) refuses ``A`` naming the rows;
        ``"row"`` takes the reciprocal of the row's largest ``|a_ij|`` there (1 for an
        empty row) -- a diagonal scaling of every row, the last-resort preconditioner of
        ``precond="auto"`` where no other can be set up (a structurally singular ``A``).

    Raises
    ------
    ValueError
        At setup, if a diagonal entry is zero (the message names the rows) and
        ``zero_diagonal="raise"``.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from mpsolve.precond import Jacobi
    >>> A = sp.diags([4.0, 2.0, 8.0]).tocsr()
    >>> M = Jacobi(dtype="float64").setup(A)
    >>> M.matvec(np.ones(3))
    array([0.25 , 0.5  , 0.125])
    >>> Mc = Jacobi(dtype="float32").setup(sp.diags([2j, 4.0, 1 + 1j]).tocsr())
    >>> Mc.storage_dtype, Mc.matvec(np.ones(3, complex))
    (dtype('complex64'), array([0.  -0.5j, 0.25+0.j , 0.5 -0.5j]))
    """

    name = "jacobi"
    symmetric = True
    supports_complex = True

    def __init__(self, dtype=None, zero_diagonal="raise"):
        super().__init__(dtype)
        if zero_diagonal not in ("raise", "row"):
            raise ValueError(f"zero_diagonal={zero_diagonal!r}: use 'raise' or 'row'")
        self.zero_diagonal = zero_diagonal

    def _setup(self, A, dtype):
        d = A.diagonal().astype(np.result_type(A.dtype, np.float64))  # FP64 or complex128
        if self.zero_diagonal == "row":
            zero = d == 0
            if zero.any():
                from ._scaling import row_abs_max

                m = row_abs_max(A)[zero]
                d[zero] = np.where(m > 0, m, 1.0)
        check_zero_diagonal(d, "Jacobi", "a block preconditioner")
        with np.errstate(over="ignore"):
            inv = 1.0 / d
        big = np.flatnonzero(~np.isfinite(inv))
        if big.size:
            raise ValueError(
                f"Jacobi: {big.size} diagonal entr{'y' if big.size == 1 else 'ies'} of A "
                f"(rows {rows_text(big)}; the smallest {np.abs(d[big]).min():.3g}) so small "
                "that the reciprocal overflows FP64: scale the system's rows and columns "
                "first (or use reorder='mc64', which scales them)")
        self._op = DiagonalOperator(inv, dtype, what="Jacobi's inverse diagonal",
                                    device=self.device)

    def _linear(self):
        """``out_i = d_i r_i``, one product rounded in ``out``'s dtype: linear
        (:meth:`Preconditioner.linear_apply`)."""
        return True

    def fusable(self):
        """``z = d * r``: ``("diag", (d,), None)`` (:meth:`Preconditioner.fusable`)."""
        return None if self._op is None else ("diag", (self._op.d,), None)

    @property
    def dinv(self):
        """The stored inverse diagonal (on the device)."""
        return self._op.d if self._op is not None else None
