"""Block structure and sparsity patterns of the block preconditioners.

Everything works on a block (BSR) view of ``A`` with block size ``b``; the point
methods are the case ``b = 1``.

* :func:`detect_block_size` -- the node block size of ``A``;
* :func:`to_bsr` -- canonical BSR arrays of ``A`` with every diagonal block present;
* :func:`block_pattern` -- the block pattern of ``S^k`` (``S`` the block graph,
  diagonal included), whole, lower or upper triangular: the pattern of ``M`` (or
  ``G``) in (Block-)ISAI (Anzt, Huckle, Braeckle, Dongarra 2018);
* :func:`truncate_wide_rows` -- rows of ``S^k`` capped at their heaviest block columns
  in ``|A|^k``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["detect_block_size", "to_bsr", "block_pattern", "truncate_wide_rows"]


# ----------------------------------------------------------------- block structure
def detect_block_size(A, candidates=(6, 5, 4, 3, 2), min_fill=0.95) -> int:
    """The block size of ``A``'s node blocks: :func:`mpsolve.matrices.detect_block_size`.

    The largest ``b`` whose ``b x b`` blocks tile the pattern (at least ``min_fill`` of
    the block-expanded pattern stored; a partial last block allowed), else 1.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(4, 4))
    >>> detect_block_size(sp.kron(T, np.ones((3, 3))).tocsr())
    3
    >>> detect_block_size(T.tocsr())
    1
    """
    from mpsolve.matrices.analysis import detect_block_size as detect

    return detect(sp.csr_matrix(A), candidates=candidates, min_fill=min_fill)


def to_bsr(C, b):
    """``(indptr, indices, data)`` of ``C`` as canonical BSR, data ``(nnzb, b, b)`` FP64.

    ``n`` must be a multiple of ``b``.  Every diagonal block is present (missing
    ones are added as explicit zero blocks, so the patterns below contain them).
    """
    n = C.shape[0]
    if n % b:
        raise ValueError(f"block size {b} does not divide n = {n}")
    nb = n // b
    # explicit zero diagonal blocks, united with C keeping every structural zero
    r = np.repeat(np.arange(n), b)
    c = np.repeat(np.arange(nb) * b, b * b) + np.tile(np.arange(b), n)
    S = _union_keep_zeros(C, sp.coo_matrix((np.zeros(n * b), (r, c)), shape=C.shape))
    B = sp.bsr_matrix(S, blocksize=(b, b))
    B.sort_indices()
    return (B.indptr.astype(np.int64), B.indices.astype(np.int64),
            np.ascontiguousarray(B.data, dtype=np.float64))


def _union_keep_zeros(C, Z):
    """``C + Z`` keeping the structural zeros of both (CSR, FP64)."""
    C = sp.coo_matrix(C)
    Z = sp.coo_matrix(Z)
    r = np.concatenate([C.row, Z.row])
    c = np.concatenate([C.col, Z.col])
    v = np.concatenate([C.data.astype(np.float64), Z.data])
    S = sp.csr_matrix((v, (r, c)), shape=C.shape)  # duplicates summed, zeros kept
    S.sort_indices()
    return S


def block_pattern(indptr, indices, nb, power=1, part="all"):
    """Block pattern of ``S^power`` (``S`` the block graph, diagonal included).

    ``part``: ``"all"``, ``"lower"`` (``tril``) or ``"upper"`` (``triu``).
    Returns canonical ``(indptr, indices)`` (int64, sorted).
    """
    S = sp.csr_matrix((np.ones(indices.size), indices, indptr), shape=(nb, nb))
    S = (S + sp.identity(nb, format="csr")).tocsr()
    S.data[:] = 1.0
    P = S
    for _ in range(int(power) - 1):
        P = P @ S
        P.data[:] = 1.0  # pattern only: no cancellation, no overflow
    if part == "lower":
        P = sp.tril(P, format="csr")
    elif part == "upper":
        P = sp.triu(P, format="csr")
    P = sp.csr_matrix(P)
    P.sort_indices()
    return P.indptr.astype(np.int64), P.indices.astype(np.int64)


def truncate_wide_rows(pptr, pind, aptr, aind, adata, power, keep):
    """Cap every row of the pattern of ``A^power`` at ``keep`` block columns.

    A row that is wider keeps its diagonal and the ``keep - 1`` block columns of
    largest weight in ``|A|^power`` (``|A|`` the matrix of block Frobenius norms) --
    the entries of ``A^power`` that can be large, as threshold-based sparse
    approximate inverses choose them.  Returns ``(pptr, pind, n_truncated)``.
    """
    nb = pptr.size - 1
    sizes = np.diff(pptr)
    wide = np.flatnonzero(sizes > keep)
    if wide.size == 0:
        return pptr, pind, 0
    norms = np.sqrt((adata ** 2).sum(axis=(1, 2)))
    top = norms.max() if norms.size and norms.max() > 0 else 1.0
    norms = norms + 1e-30 * top        # stored zeros keep a (tiny) weight: no entry vanishes
    W = sp.csr_matrix((norms, aind, aptr), shape=(nb, nb))
    W = (W + sp.identity(nb, format="csr") * top).tocsr()
    P = W
    for _ in range(int(power) - 1):
        P = P @ W
    P = sp.csr_matrix(P)
    P.sort_indices()
    new_sizes = sizes.copy()
    new_sizes[wide] = keep
    out_ptr = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(new_sizes, out=out_ptr[1:])
    out_ind = np.empty(out_ptr[-1], dtype=np.int64)
    is_wide = np.zeros(nb, dtype=bool)
    is_wide[wide] = True
    for i in range(nb):
        J = pind[pptr[i]:pptr[i + 1]]
        if is_wide[i]:
            cols = P.indices[P.indptr[i]:P.indptr[i + 1]]
            vals = P.data[P.indptr[i]:P.indptr[i + 1]]
            w = vals[np.searchsorted(cols, J)]
            w[J == i] = np.inf                      # the diagonal always stays
            J = np.sort(J[np.argsort(-w, kind="stable")[:keep]])
        out_ind[out_ptr[i]:out_ptr[i + 1]] = J
    return out_ptr, out_ind, int(wide.size)
