"""Diagonal scalings of a sparse matrix's magnitudes, compiled (the set-up of the
scale-aware tests in :mod:`mpsolve.precond._scaling`).

Each Ruiz pass reads the matrix once: the row maxima and the column maxima of
``diag(r) |C| diag(c)`` come out of the same sweep over CSR, with the entries scaled on
the fly rather than kept scaled in a copy (no ``nnz``-sized temporaries; NumPy's
``maximum.at`` and ``reduceat`` passes took 0.1-1 ms a pass on small matrices and 36 ms in
all on bcsstk18).  An entry is formed as ``(r_i |c_ij|) c_j`` in each pass, which
differs from scaling a copy in place by the rounding of a product.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..registry import register
from ._config import JIT

_ABS = [("float64",)]


@njit(**JIT)
def _line_maxima(indptr, indices, mag, r, c, rm, cm):
    """``rm[i] = max_j r_i mag_ij c_j`` and ``cm[j] = max_i r_i mag_ij c_j`` (0 for an
    empty line), one sweep."""
    n = indptr.size - 1
    cm[:] = 0.0
    for i in range(n):
        m = 0.0
        ri = r[i]
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            v = ri * mag[k] * c[j]
            m = max(m, v)
            cm[j] = max(cm[j], v)
        rm[i] = m


@njit(**JIT)
def _within(m, close):
    """Every nonzero ``m[i]`` within ``1 +- close``?"""
    for i in range(m.size):
        if m[i] > 0.0 and abs(m[i] - 1.0) > close:
            return False
    return True


@register("cpu", "line_abs_max", _ABS)
@njit(**JIT)
def line_abs_max(indptr, indices, mag, r, c, rm, cm):
    """Row and column maxima of ``diag(r) mag diag(c)`` (``mag``: the magnitudes of a CSR
    matrix's entries) into ``rm`` and ``cm``; one sweep."""
    _line_maxima(indptr, indices, mag, r, c, rm, cm)


@register("cpu", "ruiz_scaling", _ABS)
@njit(**JIT)
def ruiz_scaling(indptr, indices, mag, passes, close, r, c):
    """Ruiz's simultaneous max-norm scaling, in place on ``r`` and ``c`` (start: ones):
    at most ``passes`` passes, each dividing every row and column by the square root of
    its largest scaled entry, until every nonzero line maximum is within ``1 +- close``.
    Returns the passes that scaled."""
    n = indptr.size - 1
    rm = np.empty(n)
    cm = np.empty(c.size)
    for p in range(passes):
        _line_maxima(indptr, indices, mag, r, c, rm, cm)
        if _within(rm, close) and _within(cm, close):
            return p
        for i in range(n):
            if rm[i] > 0.0:
                r[i] /= math.sqrt(rm[i])
        for j in range(c.size):
            if cm[j] > 0.0:
                c[j] /= math.sqrt(cm[j])
    return passes
