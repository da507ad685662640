"""Point Jacobi: ``M = diag(A)^-1``."""
from __future__ import annotations

import numpy as np

from mpsolve._demote import demote
from mpsolve.kernels import lookup

from .base import Preconditioner

__all__ = ["Jacobi"]


def _rows_text(rows, limit=10):
    rows = [int(i) for i in rows[:limit]]
    more = "" if len(rows) < limit else ", ..."
    return ", ".join(map(str, rows)) + more


class Jacobi(Preconditioner):
    """Point Jacobi preconditioner ``M = diag(A)^{-1}``.

    The inverse diagonal is formed in FP64 and stored in ``dtype`` (FP32 by
    default when set up on its own); ``apply`` is one fused ``out = d * r``.

    Raises
    ------
    ValueError
        At setup, if a diagonal entry is zero (the message names the rows).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from mpsolve.precond import Jacobi
    >>> A = sp.diags([4.0, 2.0, 8.0]).tocsr()
    >>> M = Jacobi(dtype="float64").setup(A)
    >>> M.matvec(np.ones(3))
    array([0.25 , 0.5  , 0.125])
    """

    name = "jacobi"
    symmetric = True

    def _setup(self, A, dtype):
        d = A.diagonal().astype(np.float64)
        zero = np.flatnonzero(d == 0)
        if zero.size:
            raise ValueError(
                f"Jacobi: A has {zero.size} zero diagonal entr{'y' if zero.size == 1 else 'ies'} "
                f"(rows {_rows_text(zero)}); Jacobi needs a nonzero diagonal -- use "
                "precond='none', a block preconditioner, or permute A to a zero-free diagonal"
            )
        self.dinv = demote(1.0 / d, dtype, "Jacobi's inverse diagonal")
        self._kern = {}

    def apply(self, r, out):
        key = (r.dtype, out.dtype)
        k = self._kern.get(key)
        if k is None:
            k = self._kern[key] = lookup("cpu", "dmul", (self.dinv.dtype, r.dtype, out.dtype))
        k(self.dinv, r, out)  # out = D^-1 r

    @property
    def nbytes(self):
        return int(self.dinv.nbytes) if self.is_setup else 0
