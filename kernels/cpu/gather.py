"""Gather of the (Block-)ISAI local systems on the CPU (Numba).

``gather_local(rows, pptr, pind, aptr, aind, adata, out)``: for each ``t``, with
``i = rows[t]`` and ``J = pind[pptr[i]:pptr[i+1]]`` (sorted, ``m`` block columns),
``out[t] = A[J, J]`` -- the ``(m b) x (m b)`` FP64 (complex128) local matrix of block row ``i``,
``A`` in BSR form (``adata`` of shape ``(nnzb, b, b)``).  ``out`` is zeroed by the
caller; one task per local system.
"""
from numba import njit, prange

from ..registry import register
from ._config import JIT


@njit(parallel=True, **JIT)
def _gather(rows, pptr, pind, aptr, aind, adata, out):
    # out[t] = A[J, J] for J = pind[pptr[rows[t]] : ...] (block entries, b x b each);
    # merge of two sorted lists: row J[p] of A against J.  out is zeroed by the caller.
    b = adata.shape[1]
    for t in prange(rows.size):
        i = rows[t]
        j0 = pptr[i]
        m = pptr[i + 1] - j0
        for p in range(m):
            r = pind[j0 + p]
            q = 0
            for k in range(aptr[r], aptr[r + 1]):
                c = aind[k]
                while q < m and pind[j0 + q] < c:
                    q += 1
                if q == m:
                    break
                if pind[j0 + q] == c:
                    for u in range(b):
                        for v in range(b):
                            out[t, p * b + u, q * b + v] = adata[k, u, v]


@register("cpu", "gather_local", [("float64",), ("complex128",)])
def gather_local(rows, pptr, pind, aptr, aind, adata, out):
    """``out[t] = A[J_i, J_i]`` for ``i = rows[t]`` (``out`` zeroed, ``(len(rows), s, s)``)."""
    _gather(rows, pptr, pind, aptr, aind, adata, out)
