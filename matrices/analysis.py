"""Cheap structural and numerical facts about a sparse matrix (for reports and solver choice)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["matrix_info", "detect_block_size"]


def _as_csr(A, name="A"):
    if not sp.issparse(A):
        raise TypeError(f"argument {name} must be a SciPy sparse matrix/array, got "
                        f"{type(A).__name__}; wrap dense input with scipy.sparse.csr_matrix")
    if A.ndim != 2:
        raise ValueError(f"argument {name} must be 2-D, got shape {A.shape}")
    A = sp.csr_matrix(A)
    if not A.has_canonical_format:
        A = A.copy()
        A.sum_duplicates()
    return A


def detect_block_size(A, candidates=(6, 5, 4, 3, 2), min_fill=0.95):
    """Largest block size ``b`` whose ``b x b`` blocks tile the sparsity pattern of ``A``.

    For each candidate ``b`` (largest first) the stored pattern
    (explicit zeros included) is compared with its block-expanded pattern: with ``nb`` the
    number of ``b x b`` blocks holding at least one stored entry, the fill is
    ``nnz / (nb * b**2)``. The first ``b`` with fill ``>= min_fill`` is returned. This costs
    one ``tobsr`` conversion per candidate tried.  ``b`` need not divide ``n`` (square
    matrices): the last block may be partial, as when constrained unknowns were removed
    from a node-blocked matrix; its blocks count only the places inside the matrix.

    Parameters
    ----------
    A : sparse matrix
        Any SciPy sparse matrix or array.
    candidates : sequence of int, optional
        Block sizes to try, any order (tried largest first). Default ``(6, 5, 4, 3, 2)``.
    min_fill : float, optional
        Fraction of the block-expanded pattern that must be stored, in ``(0, 1]``. Default 0.95,
        which tolerates a few partly filled blocks.

    Returns
    -------
    int
        The block size, or 1 when no candidate fits. An empty matrix gives 1. A fully dense
        matrix gives the largest dividing candidate.

    Examples
    --------
    >>> import scipy.sparse as sp, numpy as np
    >>> from mpsolve.matrices import detect_block_size, poisson2d
    >>> detect_block_size(sp.kron(poisson2d(4), np.ones((2, 2)), format="csr"))
    2
    >>> detect_block_size(poisson2d(4))
    1
    """
    A = _as_csr(A)
    if not 0 < min_fill <= 1:
        raise ValueError(f"argument min_fill must lie in (0, 1], got {min_fill}")
    m, n = A.shape
    nnz = A.nnz
    if nnz == 0:
        return 1
    for b in sorted({int(c) for c in candidates}, reverse=True):
        if b < 2 or b > min(m, n):
            continue
        if m % b or n % b:
            if m != n:
                continue
            # a trailing partial block (constrained dofs removed, as in s1rmq4m1 with
            # n = 5489 = 3 * 1829 + 2): the blocks of the last block row/column hold
            # fewer than b * b places
            pad = -n % b
            B = sp.block_diag([A, sp.csr_matrix((pad, pad))], format="csr").tobsr((b, b))
            width = np.full(B.shape[0] // b, b)
            width[-1] = b - pad
            rows = np.repeat(np.arange(width.size), np.diff(B.indptr))
            capacity = int((width[rows] * width[B.indices]).sum())
        else:
            capacity = int(A.tobsr(blocksize=(b, b)).indptr[-1]) * b * b
        if nnz >= min_fill * capacity:
            return b
    return 1


def matrix_info(A, sym_rtol=None):
    """Structural and numerical summary of a sparse matrix.

    Parameters
    ----------
    A : sparse matrix
        Any SciPy sparse matrix or array.
    sym_rtol : float, optional
        Numerical symmetry holds when ``max|A - A^T| <= sym_rtol * max|A|``. Default
        ``sqrt(eps)`` of float64 (about 1.5e-8), loose enough for values printed with
        limited digits.

    Returns
    -------
    dict
        ``rows``, ``cols``, ``n`` (rows), ``nnz`` (stored entries), ``nnz_per_row_min`` /
        ``_mean`` / ``_max``, ``structurally_symmetric``, ``symmetric`` (numerically, see
        ``sym_rtol``; False for non-square; ``A == A^T``, also for complex data),
        ``hermitian`` (``A == A^H`` to the same tolerance; equal to ``symmetric`` for real
        data), ``dtype``, ``max_abs``, ``positive_diagonal`` (every diagonal entry real
        and > 0), ``zero_diagonals`` (diagonal entries that are zero or not stored),
        ``diag_dominant_strict`` / ``diag_dominant_weak`` (fraction of rows with
        ``|a_ii| >`` resp. ``>= sum_{j != i} |a_ij|``), ``block_size``
        (:func:`detect_block_size`).

    Examples
    --------
    >>> from mpsolve.matrices import matrix_info, poisson2d
    >>> info = matrix_info(poisson2d(10))
    >>> info["n"], info["nnz_per_row_max"], info["symmetric"], info["diag_dominant_weak"]
    (100, 5, True, 1.0)
    >>> round(info["diag_dominant_strict"], 2)   # boundary rows only
    0.36
    """
    A = _as_csr(A)
    rows, cols = A.shape
    per_row = np.diff(A.indptr)
    absA = abs(A)
    max_abs = float(absA.max()) if A.nnz else 0.0
    square = rows == cols
    if square:
        P = A.copy()
        P.data = np.ones_like(P.data)
        PT = P.T.tocsr()
        struct_sym = (P != PT).nnz == 0
        if sym_rtol is None:
            sym_rtol = float(np.sqrt(np.finfo(np.float64).eps))
        diff = A - A.T.tocsr()
        dmax = float(abs(diff).max()) if diff.nnz else 0.0
        num_sym = dmax <= sym_rtol * max_abs
        num_herm = num_sym
        if np.iscomplexobj(A.data):
            diff = A - A.T.conj().tocsr()
            hmax = float(abs(diff).max()) if diff.nnz else 0.0
            num_herm = hmax <= sym_rtol * max_abs
    else:
        struct_sym = num_sym = num_herm = False
    k = min(rows, cols)
    diag = A.diagonal()
    absdiag = np.abs(diag)
    rowid = np.repeat(np.arange(rows), per_row)
    off = rowid != A.indices
    offsum = np.bincount(rowid[off], weights=np.abs(A.data[off]), minlength=rows)[:k]
    if k:
        strict = float(np.mean(absdiag > offsum))
        weak = float(np.mean(absdiag >= offsum))
    else:
        strict = weak = 0.0
    return {
        "rows": rows,
        "cols": cols,
        "n": rows,
        "nnz": int(A.nnz),
        "nnz_per_row_min": int(per_row.min()) if rows else 0,
        "nnz_per_row_mean": float(per_row.mean()) if rows else 0.0,
        "nnz_per_row_max": int(per_row.max()) if rows else 0,
        "structurally_symmetric": bool(struct_sym),
        "symmetric": bool(num_sym),
        "hermitian": bool(num_herm),
        "dtype": A.dtype.name,
        "max_abs": max_abs,
        "positive_diagonal": bool(k > 0 and np.all(diag.real > 0) and np.all(diag.imag == 0)),
        "zero_diagonals": int(np.count_nonzero(diag == 0)),
        "diag_dominant_strict": strict,
        "diag_dominant_weak": weak,
        "block_size": detect_block_size(A),
    }
