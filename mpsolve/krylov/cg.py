"""CG / PCG -- the (preconditioned) conjugate gradient method.

Hestenes & Stiefel (1952), "Methods of conjugate gradients for solving linear
systems", J. Res. Nat. Bur. Standards 49(6), doi:10.6028/jres.049.044; the
preconditioned form as in Saad, *Iterative Methods for Sparse Linear Systems*,
2nd ed., Algorithm 9.1.

Deviations from the textbook: the stopping test is on the *unpreconditioned*
recursive residual ``||r||`` (SciPy's rule); the driver then checks the FP64
true residual and, if the recursive one has drifted, restarts from the true
residual (residual replacement).  Without a preconditioner ``z`` aliases ``r``
and ``r.z`` is the squared norm already computed for the stopping test.

Definite of either sign: SciPy's CG also solves a negative definite ``A`` (the 1-D
Laplacian written as ``[1, -2, 1]``), whose iterates are those of CG on ``-A``; so ``r^H z``
may be negative (``M`` negative definite: Jacobi of that ``A``) and ``p^H A p`` too.  Each
keeps the sign of its first value; a change of sign or a zero is the curvature breakdown
(-12: ``A`` or ``M`` is indefinite).

Complex systems: CG for Hermitian positive definite ``A`` (and ``M``), with the
conjugated dots ``x^H y``.  ``r^H z`` and ``p^H A p`` are then real in exact arithmetic;
``alpha`` and ``beta`` are formed from the complex dots as SciPy forms them (their
imaginary parts are rounding there), so a non-Hermitian ``A`` that SciPy's CG solves --
a Hermitian matrix shifted by ``i sigma I``, say -- is solved too; the signs and the
breakdown tests read the real parts.

Memory traffic per iteration (n-vectors, without M): SpMV + 2 reads (p.q) +
6 (fused x, r update) + 1 (||r||) + 3 (p update) = SpMV + 12n values.
"""
from __future__ import annotations

import cmath
import math

import numpy as np

from .._system import run_compiled_loop
from ..result import USER_STOP, callback_period, wants_stop

__all__ = ["cg_body"]


def cg_body(sys, x, r, maxiter, tol, callback, hist):
    """Run at most ``maxiter`` PCG iterations from ``x`` with residual ``r``.

    ``x`` and ``r`` are updated in place (working precision); ``q``, ``z`` and ``p``
    come from the solve's workspace.  Returns ``(iterations, iterations, flag)``: flag
    0 when the recursive residual met ``tol``, 1 when ``maxiter`` was reached,
    ``USER_STOP`` when the callback returned True, a negative breakdown code otherwise.

    Without a callback, where the device compiles the whole loop for this System
    (:func:`mpsolve._system.compiled_loop`: small systems on the CPU), that loop runs the
    same iterations in one call, with the same bits.  A callback with a ``period``
    attribute (:func:`~mpsolve.result.callback_period`: the automatic choice's monitor)
    is called every ``period`` iterations only, so the compiled loop runs between calls.
    """
    done = run_compiled_loop(sys, "cg_loop", x, r, maxiter, tol, hist, callback)
    if done is not None:
        return done
    period = callback_period(callback)      # the Python loop's calls of the callback
    ops, matvec_dot, psolve = sys.ops, sys.matvec_dot, sys.psolve
    dot, nrm2, axpy2_nrm2, xpay = ops.dot, ops.nrm2, ops.axpy2_nrm2, ops.xpay
    ratio = ops.dot_ratio
    n = x.size
    ws, wdt = sys.workspace, sys.dtype         # vectors allocated once per solve
    tiny = float(np.finfo(wdt).tiny)           # below: p.q is subnormal (or <= 0)
    q = ws.get("q", n, wdt)
    if psolve is None:
        z = r  # unpreconditioned: z aliases r
    else:
        z = ws.get("z", n, wdt)
        psolve(r, z)                          # z = M r
    p = ws.get("p", n, wdt)
    ops.copy(z, p)                            # p = z
    rnorm = nrm2(r)
    rz = rnorm * rnorm if psolve is None else dot(r, z)    # r^H z (complex data: complex)
    if rnorm <= tol:
        return 0, 0, 0
    if not (rz.real != 0 and cmath.isfinite(rz)):
        return 0, 0, (-14 if not cmath.isfinite(rz) else -12)
    # the signs of r^H z (M's) and of p^H A p (A's, from the first step): both stay
    sm, sa = math.copysign(1.0, rz.real), 0.0
    for k in range(1, maxiter + 1):
        pqc = matvec_dot(p, q)                # q = A p; p^H q (one pass where fused)
        pq = pqc.real
        if sa == 0.0 and pq != 0.0:
            sa = math.copysign(1.0, pq)       # (NaN: stays 0, the ratio's test fails)
        if tiny <= sa * pq < math.inf:
            alpha = rz / pqc
        else:                                 # p.q or r.z overflowed, or underflowed, or
            alpha = ratio(r, z, p, q)         # changed sign: from scaled vectors
            if not (0 < sm * sa * alpha.real < math.inf):
                return k - 1, k - 1, (-14 if cmath.isnan(alpha) else -12)
        rnorm = axpy2_nrm2(alpha, p, x, -alpha, q, r)  # x += alpha p; r -= alpha q; ||r||
        hist.append(rnorm)
        if callback is not None and (not period or k % period == 0) and \
                wants_stop(callback(x)):
            return k, k, (0 if rnorm <= tol else USER_STOP)
        if not math.isfinite(rnorm):
            return k, k, -14
        if rnorm <= tol:
            return k, k, 0
        if psolve is None:
            rz_new = rnorm * rnorm            # r.z = r.r
        else:
            psolve(r, z)                      # z = M r
            rz_new = dot(r, z)                # r^H z
        if rz_new == 0:
            # r^H z underflowed (||r|| below the square root of the smallest normal: rtol
            # 0 divided 0 by 0 at the next beta) or M r = 0: no direction left -- the
            # recursive residual is at its floor, the driver judges the true one
            return k, k, 0
        if psolve is not None and not (sm * rz_new.real > 0):
            return k, k, (-14 if cmath.isnan(rz_new) else -12)
        beta = rz_new / rz
        rz = rz_new
        xpay(z, beta, p)                      # p = z + beta p
    return maxiter, maxiter, 1
