"""Diagonal scalings of sparse matrices shared by the factorisations and approximate
inverses: one-pass row and column maxima, powers of two, Ruiz's max-norm and
Sinkhorn-Knopp's 2-norm equilibration, and the scale-aware "tiny value" test of ILU(0)'s
pivots and the analysis's diagonal (one module, so that :mod:`.ilu` and :mod:`.ilut`
import it and not each other)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["row_abs_max", "col_abs_max", "pow2_inverse", "ruiz_scaling", "sinkhorn_scaling",
           "tiny_after_equilibration"]


def _kernel(op):
    """The host device's compiled ``op`` on FP64 magnitudes."""
    from mpsolve.backend import HOST_DEVICE
    from mpsolve.kernels import lookup
    return lookup(HOST_DEVICE, op, ("float64",))


def _magnitudes(C):
    """``|c_ij|`` of CSR ``C``'s stored entries, FP64 (complex: their moduli)."""
    return np.abs(C.data).astype(np.float64, copy=False)


def row_abs_max(C):
    """``max_j |c_ij|`` of every row of CSR ``C`` (0 for an empty row), one pass."""
    out = np.zeros(C.shape[0])
    if C.nnz:
        lengths = np.diff(C.indptr)
        out[:] = np.maximum.reduceat(np.abs(C.data), np.minimum(C.indptr[:-1], C.nnz - 1))
        out[lengths == 0] = 0.0
    return out


def col_abs_max(C, r=None):
    """``max_i |r_i c_ij|`` of every column of CSR ``C`` (``r``: None for ones; 0 for an
    empty column), one pass."""
    n, m = C.shape
    rm, cm = np.empty(n), np.empty(m)
    _kernel("line_abs_max")(C.indptr, C.indices, _magnitudes(C),
                            np.ones(n) if r is None else np.asarray(r, dtype=np.float64),
                            np.ones(m), rm, cm)
    return cm


def pow2_inverse(m):
    """``2^-floor(log2 m)`` where ``m > 0`` (1 elsewhere): brings ``m`` into ``[1, 2)``
    exactly."""
    s = np.ones_like(m)
    on = m > 0
    s[on] = np.ldexp(1.0, 1 - np.frexp(m[on])[1])
    return s


def ruiz_scaling(C, passes=30, close=0.25):
    """Row and column factors ``(r, c)`` that bring the largest entry of every row and
    column of ``diag(r) C diag(c)`` to within ``1 +- close`` of 1 (1 for an empty line):
    Ruiz's simultaneous scaling by ``1/sqrt`` of the row and column maxima (D. Ruiz, *A
    scaling algorithm to equilibrate both rows and columns norms in matrices*, RAL-TR-2001-
    034), each pass halving every line's distance from 1 in the logarithm, at most
    ``passes`` of them.  Unlike one pass of rows then columns (:func:`equilibrate`), it
    scales rows and columns alike whatever scaling ``C`` came in; but a max-norm
    equilibrated matrix is not unique, so for ``D1 C D2`` the result may differ from
    ``C``'s by factors the max-norm cannot see (:func:`sinkhorn_scaling` narrows that).
    Compiled (the host device's ``ruiz_scaling`` kernel): one sweep over ``C`` a pass."""
    C = sp.csr_matrix(C)
    r, c = np.ones(C.shape[0]), np.ones(C.shape[1])
    _kernel("ruiz_scaling")(C.indptr, C.indices, _magnitudes(C), int(passes), float(close),
                            r, c)
    return r, c


def sinkhorn_scaling(C, tol=0.1, maxiter=1000):
    """Row and column factors ``(r, c)`` after which every row and column of ``diag(r) C
    diag(c)`` has 2-norm within ``1 +- tol`` (squared): Sinkhorn-Knopp's alternating
    scaling of ``S = |c_ij|^2`` (rows ``x = 1 / (S y)``, then columns ``y = 1 / (S^T x)``),
    started from :func:`ruiz_scaling`.  For a fully indecomposable square matrix (an
    irreducible one with a zero-free diagonal is) the limit is unique up to one scalar
    ``(t r, c / t)``, so for ``D1 C D2`` it is ``(D1^-1 r, D2^-1 c)``: the scaling is
    covariant, which the max-norm one is not.  Near the limit the convergence can slow to
    hundreds of passes (a 40 x 40 grid's convection-diffusion matrix: ~900 to ``tol =
    1e-2``); to ``tol = 0.1`` it took 8-61 passes on that matrix scaled by 1e-10..1e10,
    where what the scaling is for (:func:`mpsolve.auto.equilibrated_growth`) moved by a
    factor below 3.  A line that stays empty keeps factor 1; ``maxiter`` passes at most
    (for a matrix without total support the iteration need not converge)."""
    C = sp.csr_matrix(C)
    r, c = ruiz_scaling(C)
    n, m = C.shape
    if not C.nnz:
        return r, c
    rows = np.repeat(np.arange(n), np.diff(C.indptr))
    S = sp.csr_matrix(((np.abs(C.data) * r[rows] * c[C.indices]) ** 2, C.indices, C.indptr),
                      shape=(n, m))
    St = S.T.tocsr()
    x, y = np.ones(n), np.ones(m)
    with np.errstate(divide="ignore"):
        for _ in range(maxiter):
            sx = S @ y
            x = np.where(sx > 0, 1.0 / sx, 1.0)
            sy = St @ x
            on = sy > 0
            if np.all(np.abs(sy[on] * y[on] - 1.0) <= tol):
                break
            y = np.where(on, 1.0 / sy, 1.0)
    return r * np.sqrt(x), c * np.sqrt(y)


def tiny_after_equilibration(C, values, tol):
    """The rows ``i`` of CSR ``C`` whose ``values[i]`` (the diagonal entry, or ILU(0)'s
    pivot) is at most ``tol`` times its row's largest entry both as stored and *in the
    equilibrated matrix* ``diag(r) C diag(c)`` (:func:`ruiz_scaling`): ``|v_i| c_i <= tol
    max_j |c_ij| c_j`` (``r_i`` cancels).  ILU(0) is equivariant under diagonal scaling
    (the factors of ``D1 A D2`` are ``D1 L D1^-1`` and ``D1 U D2``), so whether its pivot
    is small should not depend on the units of the unknowns: against the row's largest
    entry of ``C`` alone, rows and columns scaled by 1e-6..1e6 made 213 of 1600
    convection-diffusion diagonals "tiny" and ILU(0) was refused, which with the same
    matrix converges in 17 BiCGSTAB iterations.  The equilibrated test clears such rows;
    it runs only where the test as stored (one pass over ``C``) finds a row, so a matrix
    with no small value pays nothing more (a value small only after equilibration is
    left to ILU(0)'s growth test, :func:`mpsolve.auto.ilu_growth`).  The max-norm scaling
    is Ruiz's, which scales rows and columns alike whatever units ``C`` came in (one pass
    of rows then columns still left 2 of those 213 rows "tiny")."""
    C = sp.csr_matrix(C)
    mag = np.abs(np.asarray(values))
    small = np.flatnonzero(mag <= tol * row_abs_max(C))
    if not small.size:
        return small
    _, c = ruiz_scaling(C)
    rmax, cm = np.empty(C.shape[0]), np.empty(C.shape[1])
    _kernel("line_abs_max")(C.indptr, C.indices, _magnitudes(C), np.ones(C.shape[0]), c,
                            rmax, cm)
    return small[mag[small] * c[small] <= tol * rmax[small]]
