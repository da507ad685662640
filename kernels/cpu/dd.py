"""Double-double solution and compensated residual on the CPU (the ``eft`` presets' outer loop).

Two ops of :data:`mpsolve.kernels.primitives.CONTRACT`, both on FP64 arrays:

* ``residual_dd`` -- ``r + rl = b - A (xh + xl)`` for an FP64 CSR ``A``, FP64 ``b`` and ``x``
  held as a double-double pair ``(xh, xl)``.  Each row is Ogita--Rump--Oishi's Dot2
  (ORO 2005, Algorithm 5.3) of the vector ``(b_i, a_i1, ..., a_ik, a_i1, ..., a_ik)`` with
  ``(1, -xh_j1, ..., -xh_jk, -xl_j1, ..., -xl_jk)``: every product split exactly by
  :func:`two_prod` (FMA), every partial sum by :func:`two_sum`, the errors summed in FP64.
  So each row is as accurate as if computed in twice the working precision::

      |(r_i + rl_i) - res_i| <= u |res_i| + gamma_{2k+1}^2 (|b_i| + sum_j |a_ij| (|xh_j| + |xl_j|)),

  ``u = 2^-53``, ``k`` the row's nonzeros, ``res_i`` the exact residual; ``r_i`` is the
  pair rounded to FP64 and ``rl_i`` what that rounding left (``two_sum``: ``r_i + rl_i``
  is the pair exactly).  The plain FP64 residual kernel's error is ``gamma_{k+1}`` times the
  same sum, which near convergence is as large as the residual itself.
* ``dd_axpy`` -- ``(yh, yl) <- (yh + yl) + a x``: the product split by :func:`two_prod`, the
  high parts added by :func:`two_sum`, the three low terms (product error, sum error, old
  ``yl``) added in FP64 and the pair renormalised with :func:`two_sum` (Dekker's
  double-double addition, the "sloppy" variant, with a TwoSum renormalisation that stays
  exact under cancellation).  The only roundings are the two FP64 additions of the low
  terms: ``|err| <= 2 u (|te| + |se| + |yl|) + O(u^3) <= 2 u^2 (|a x_i| + |yh_i + a x_i|
  + |yh_i|) + O(u^3)``, and ``yh_i`` is the new pair rounded to FP64 (``|yl_i| <=
  ulp(yh_i) / 2``).

The scalar EFTs are :mod:`mpsolve.kernels.eft`'s, compiled for the CPU in
:mod:`mpsolve.kernels.cpu.eft` (imported from there: not copied).  No ``fastmath``.
Work is split over the matrix's nonzero-balanced row partition (the SpMV's launch plan);
rows are independent, so the result does not depend on the partition.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..registry import register
from ._config import JIT
from .eft import two_prod, two_sum

__all__ = ["csr_residual_dd", "dd_axpy"]

_EFT_JIT = dict(JIT, fastmath=False)


@njit(**_EFT_JIT)
def _rows_residual_dd(lo, hi, indptr, indices, data, xh, xl, b, r, rl):
    for i in range(lo, hi):
        p = b[i]                                  # Dot2 pair (p, s), started at b_i
        s = 0.0
        for k in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            j = np.uint64(indices[k])
            a = data[k]
            h, e = two_prod(a, -xh[j])            # h + e == -a_ij xh_j
            p, q = two_sum(p, h)                  # p + q == old p + h
            s += q + e
            h, e = two_prod(a, -xl[j])            # the low part of x: same EFTs
            p, q = two_sum(p, h)
            s += q + e
        r[i], rl[i] = two_sum(p, s)               # r = fl(p + s), rl = the rest
        if not np.isfinite(r[i]):
            # a product or sum past FP64's range: the EFTs' error terms are inf - inf;
            # the plain FP64 residual says +-inf (or NaN for NaN data), as FP64 does
            t = b[i]
            for k in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
                j = np.uint64(indices[k])
                t -= data[k] * xh[j] + data[k] * xl[j]     # (the CUDA kernel's order)
            r[i] = t
            rl[i] = 0.0


@njit(parallel=True, **_EFT_JIT)
def _residual_dd_par(parts, indptr, indices, data, xh, xl, b, r, rl):
    for t in prange(parts.size - 1):
        _rows_residual_dd(parts[t], parts[t + 1], indptr, indices, data, xh, xl, b, r, rl)


@njit(**_EFT_JIT)
def _residual_dd_ser(parts, indptr, indices, data, xh, xl, b, r, rl):
    _rows_residual_dd(0, indptr.size - 1, indptr, indices, data, xh, xl, b, r, rl)


@register("cpu", "residual_dd", [("float64",)])
def csr_residual_dd(parts, indptr, indices, data, xh, xl, b, r, rl):
    """``r + rl <- b - A (xh + xl)``, Dot2 per row (see the module docstring).

    All arrays FP64 except the CSR index arrays; ``parts`` is the SpMV's launch plan.
    ``r`` is the compensated residual rounded to FP64, ``rl`` the rest of the pair.

    Examples
    --------
    >>> import numpy as np
    >>> ip, ix = np.array([0, 2], np.int32), np.array([0, 1], np.int32)
    >>> a = np.array([1.0, 1.0]); xh = np.array([1e16, -1e16]); xl = np.array([1.0, 0.0])
    >>> r, rl = np.empty(1), np.empty(1)
    >>> csr_residual_dd(np.array([0, 1]), ip, ix, a, xh, xl, np.array([3.0]), r, rl)
    >>> float(r[0])                               # 3 - (1e16 + 1 - 1e16), exactly
    2.0
    """
    f = _residual_dd_par if parts.size > 2 else _residual_dd_ser
    f(parts, indptr, indices, data, xh, xl, b, r, rl)


@njit(**_EFT_JIT)
def _dd_axpy_range(a, x, yh, yl, lo, hi):
    for i in range(lo, hi):
        t, te = two_prod(a, x[i])                 # t + te == a x_i
        s, se = two_sum(yh[i], t)                 # s + se == yh_i + t
        yh[i], yl[i] = two_sum(s, se + (te + yl[i]))        # renormalised: yh = fl(pair)


_DD_CHUNK = 16384


@njit(parallel=True, **_EFT_JIT)
def _dd_axpy_par(a, x, yh, yl):
    n = x.size
    nch = (n + _DD_CHUNK - 1) // _DD_CHUNK
    for c in prange(nch):
        lo = c * _DD_CHUNK
        _dd_axpy_range(a, x, yh, yl, lo, min(lo + _DD_CHUNK, n))


@register("cpu", "dd_axpy", [("float64",)])
def dd_axpy(a, x, yh, yl):
    """``(yh, yl) <- (yh + yl) + a x`` in double-double (see the module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> yh, yl = np.array([1.0]), np.array([0.0])
    >>> dd_axpy(1.0, np.array([2.0**-60]), yh, yl)
    >>> float(yh[0]), float(yl[0])                 # 1 + 2^-60, kept
    (1.0, 8.673617379884035e-19)
    """
    if x.size >= 2 * _DD_CHUNK:
        _dd_axpy_par(float(a), x, yh, yl)
    else:
        _dd_axpy_range(float(a), x, yh, yl, 0, x.size)
