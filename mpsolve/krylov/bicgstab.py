"""BiCGSTAB -- the stabilised biconjugate gradient method, right-preconditioned.

van der Vorst (1992), "Bi-CGSTAB: a fast and smoothly converging variant of
Bi-CG for the solution of nonsymmetric linear systems", SIAM J. Sci. Stat.
Comput. 13(2), doi:10.1137/0913035; the right-preconditioned form of Saad,
Algorithm 7.7 with ``M`` applied to the search directions (as SciPy does), so
the residual is the unpreconditioned one.

Breakdown codes are SciPy's: -10 when ``rho = r0.r`` vanishes (relative to
``||r0|| ||r||``), -11 when ``omega`` or ``r0.v`` vanishes.  The half step is checked: if
``||s||`` already meets the tolerance the iteration stops after ``x += alpha p`` (without
a call of the callback for that half iteration, as SciPy).

Complex systems: the dots are conjugated (``rho = r0^H r``, ``omega = t^H s / t^H t``,
SciPy's ``vdot``); the finiteness checks use :func:`cmath.isfinite`, which takes
real and complex scalars alike.

Memory traffic per iteration: 2 SpMV + 2 M + about 20n values.
"""
from __future__ import annotations

import cmath
import math

import numpy as np

from .._system import run_compiled_loop
from ..result import USER_STOP, callback_period, wants_stop

__all__ = ["bicgstab_body"]


def bicgstab_body(sys, x, r, maxiter, tol, callback, hist):
    """Run at most ``maxiter`` BiCGSTAB iterations from ``x`` with residual ``r``.

    Returns ``(iterations, iterations, flag)`` like :func:`~mpsolve.krylov.cg.cg_body`.
    Without a callback, where the device compiles the whole loop for this System
    (:func:`mpsolve._system.compiled_loop`), that loop runs, with the same bits; a callback
    with a ``period`` is called every ``period`` iterations only (as in CG's body).
    """
    done = run_compiled_loop(sys, "bicgstab_loop", x, r, maxiter, tol, hist, callback)
    if done is not None:
        return done
    period = callback_period(callback)      # the Python loop's calls of the callback
    ops, matvec, psolve = sys.ops, sys.matvec, sys.psolve
    dot, nrm2, waxpy, axpy2, bicg_dir = ops.dot, ops.nrm2, ops.waxpy, ops.axpy2, ops.bicg_dir
    n = x.size
    ws, wdt = sys.workspace, sys.dtype         # vectors allocated once per solve
    eps = float(np.finfo(wdt).eps)
    tiny = float(np.finfo(wdt).tiny)            # dots below it are subnormal
    ratio = ops.dot_ratio
    rhotol = eps * eps
    r0 = ws.get("r0", n, wdt)
    ops.copy(r, r0)                            # shadow residual r0^ = r
    r0nrm = nrm2(r0)
    p = ws.zeros("p", n, wdt)
    v = ws.zeros("v", n, wdt)
    s = ws.get("s", n, wdt)
    t = ws.get("t", n, wdt)
    if psolve is None:
        ph, sh = p, s                           # no M: p^ = p, s^ = s
    else:
        ph = ws.get("ph", n, wdt)
        sh = ws.get("sh", n, wdt)
    rnorm = r0nrm
    if rnorm <= tol:
        return 0, 0, 0
    rho_old = alpha = omega = 1.0
    for k in range(1, maxiter + 1):
        rho = dot(r0, r)                        # rho = r0^H r
        if not cmath.isfinite(rho):
            return k - 1, k - 1, -14
        if abs(rho) <= rhotol * r0nrm * rnorm:
            return k - 1, k - 1, -10
        if k == 1:
            ops.copy(r, p)                      # p = r
        else:
            beta = (rho / rho_old) * (alpha / omega)
            bicg_dir(r, beta, omega, v, p)      # p = r + beta (p - omega v)
        if psolve is not None:
            psolve(p, ph)                       # p^ = M p
        matvec(ph, v)                           # v = A p^
        r0v = dot(r0, v)                        # r0^H v
        if r0v == 0.0:
            return k - 1, k - 1, -11            # (SciPy's code for r0^H v = 0)
        if tiny <= abs(r0v) < math.inf:
            alpha = rho / r0v
        else:                                   # overflowed or subnormal: scaled vectors
            alpha = ratio(r0, r, r0, v)
            if not cmath.isfinite(alpha):
                return k - 1, k - 1, -14
        waxpy(-alpha, v, r, s)                  # s = r - alpha v
        snorm = nrm2(s)
        if snorm <= tol:
            ops.axpy(alpha, ph, x)              # x += alpha p^
            ops.copy(s, r)                      # r = s
            hist.append(snorm)
            return k, k, 0                      # (no callback call here, as in SciPy)
        if psolve is not None:
            psolve(s, sh)                       # s^ = M s
        matvec(sh, t)                           # t = A s^
        tt = dot(t, t).real                     # t^H t (real)
        ts = dot(t, s)                          # t^H s
        if tiny <= tt < math.inf and abs(ts) < math.inf:
            omega = ts / tt                     # omega = t^H s / t^H t
        else:                                   # t = 0, or a dot overflowed or is
            omega = ratio(t, s, t, t)           # subnormal: from scaled vectors
            if not cmath.isfinite(omega):
                return k - 1, k - 1, (-11 if tt == 0.0 else -14)
        if omega == 0.0:
            return k - 1, k - 1, -11
        axpy2(alpha, ph, x, omega, sh, x)       # x += alpha p^ + omega s^
        waxpy(-omega, t, s, r)                  # r = s - omega t
        rnorm = nrm2(r)
        hist.append(rnorm)
        if callback is not None and (not period or k % period == 0) and \
                wants_stop(callback(x)):
            return k, k, (0 if rnorm <= tol else USER_STOP)
        if not math.isfinite(rnorm):
            return k, k, -14
        if rnorm <= tol:
            return k, k, 0
        rho_old = rho
    return maxiter, maxiter, 1
