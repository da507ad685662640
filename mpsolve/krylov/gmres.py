"""GMRES(m) -- restarted generalised minimal residual, right-preconditioned.

Saad & Schultz (1986), "GMRES: a generalized minimal residual algorithm for
solving nonsymmetric linear systems", SIAM J. Sci. Stat. Comput. 7(3),
doi:10.1137/0907058; right preconditioning as in Saad, *Iterative Methods*,
Algorithm 9.5: the Arnoldi process runs on ``A M``, so the least-squares
residual it minimises is the *unpreconditioned* residual and ``x = x0 + M V y``.
(SciPy's ``gmres`` preconditions from the left; iteration counts differ a little.)

Orthogonalisation: classical Gram--Schmidt with one selective
reorthogonalisation pass (CGS2, "twice is enough": Giraud, Langou, Rozloznik &
van den Eshof 2005, doi:10.1007/s00211-005-0615-4): the coefficients of all
basis vectors come from one multi-vector pass (``ops.mdot``), the projection
from another (``ops.maxpy``); when ``||w||`` drops below ``0.7`` of its value
before the projection, the projection is repeated and the coefficients added.
This is as stable as modified Gram--Schmidt for GMRES and reads ``w`` once per
pass instead of once per basis vector.  The coefficients and norms go through
``ops.mdot`` / ``ops.nrm2``, so the ``compensated`` policies use Dot2.
The Hessenberg matrix, Givens rotations and the small triangular solve are
always FP64.

Memory traffic per inner step j: SpMV + M + about (2j + 4) n values (one CGS pass).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["gmres_body"]

REORTH = 0.7


def gmres_body(sys, x, r, maxiter, tol, callback, hist, restart=20, callback_type="x",
               max_inner=None):
    """Run at most ``maxiter`` restart cycles of GMRES(restart).

    ``max_inner`` caps the inner iterations too (SciPy's ``callback_type='legacy'``).
    ``x`` and ``r`` are updated in place; ``r`` is ``b - A x`` in the working
    precision after each cycle.  Returns ``(cycles, inner_iterations, flag)``:
    flag 0 converged (or the Arnoldi estimate converged while the recomputed
    residual did not -- the driver then judges by the true residual), 1 out of cycles, -13 happy breakdown short of the
    tolerance, -14 non-finite values.
    """
    ops, matvec, psolve = sys.ops, sys.matvec, sys.psolve
    nrm2, axpy, mdot, maxpy = ops.nrm2, ops.axpy, ops.mdot, ops.maxpy
    n = x.size
    xp = ops.xp                                # workspace lives where x lives
    m = max(1, min(restart, n))
    wdt = sys.dtype
    V = xp.empty((m + 1, n), dtype=wdt)        # Arnoldi basis, one row per vector
    z = xp.empty(n, dtype=wdt) if psolve is not None else None
    u = xp.empty(n, dtype=wdt)
    H = np.zeros((m + 1, m), dtype=np.float64)
    cs = np.zeros(m)
    sn = np.zeros(m)
    g = np.zeros(m + 1)
    y = np.zeros(m)
    hcol = np.zeros(m + 1)                     # Gram-Schmidt coefficients of one column
    inner = 0
    rnorm = nrm2(r)
    if rnorm <= tol:
        return 0, 0, 0
    for cycle in range(1, maxiter + 1):
        beta = rnorm
        ops.copy(r, V[0])
        ops.scal(1.0 / beta, V[0])              # v0 = r / ||r||
        g[:] = 0.0
        g[0] = beta
        H[:] = 0.0
        happy = False
        j_end = 0
        for j in range(m):
            if psolve is not None:
                psolve(V[j], z)                 # z = M v_j
                matvec(z, V[j + 1])             # w = A M v_j
            else:
                matvec(V[j], V[j + 1])          # w = A v_j
            w = V[j + 1]
            wnorm0 = wnorm_in = nrm2(w)
            for _pass in range(2):              # CGS, repeated once if needed (CGS2)
                mdot(V, j + 1, w, hcol)         # h_i = v_i . w, i <= j
                maxpy(V, j + 1, hcol, w)        # w -= sum_i h_i v_i
                H[: j + 1, j] += hcol[: j + 1]
                wnorm = nrm2(w)
                if wnorm > REORTH * wnorm0:
                    break
                wnorm0 = wnorm
            H[j + 1, j] = wnorm
            if not math.isfinite(wnorm):
                return cycle, inner, -14
            # apply the previous rotations to column j, then a new one
            for i in range(j):
                hi, hi1 = H[i, j], H[i + 1, j]
                H[i, j] = cs[i] * hi + sn[i] * hi1
                H[i + 1, j] = -sn[i] * hi + cs[i] * hi1
            den = math.hypot(H[j, j], H[j + 1, j])
            if den == 0.0:
                cs[j], sn[j] = 1.0, 0.0
            else:
                cs[j], sn[j] = H[j, j] / den, H[j + 1, j] / den
            H[j, j] = den
            H[j + 1, j] = 0.0
            g[j + 1] = -sn[j] * g[j]
            g[j] = cs[j] * g[j]
            inner += 1
            est = abs(g[j + 1])                 # ||b - A x_j|| in exact arithmetic
            hist.append(est)
            if callback is not None and callback_type in ("pr_norm", "legacy"):
                callback(est / sys.problem.bnrm if sys.problem.bnrm else est)
            j_end = j + 1
            if wnorm <= np.finfo(wdt).eps * wnorm_in or wnorm == 0.0:
                happy = True
                break
            ops.scal(1.0 / wnorm, w)            # v_{j+1} = w / ||w||
            if est <= tol or inner == max_inner:
                break
        k = j_end
        # y = H[:k, :k]^-1 g[:k] (upper triangular, back substitution in FP64)
        for i in range(k - 1, -1, -1):
            hii = H[i, i]
            acc = g[i] - float(np.dot(H[i, i + 1:k], y[i + 1:k]))
            y[i] = acc / hii if hii != 0.0 else 0.0
        ops.lincomb(V, y, k, u)                 # u = V_k y
        if psolve is not None:
            psolve(u, z)                        # z = M u
            axpy(1.0, z, x)                     # x += M V y
        else:
            axpy(1.0, u, x)                     # x += V y
        sys.residual(x, sys.b, r)               # r = b - A x
        rnorm = nrm2(r)
        if callback is not None and callback_type == "x":
            callback(x)
        if not math.isfinite(rnorm):
            return cycle, inner, -14
        if rnorm <= tol:
            return cycle, inner, 0
        if est <= tol and not happy:
            # the Arnoldi estimate met the tolerance but the recomputed residual did
            # not: the working precision's floor, or rounding drift.  The driver
            # judges with the FP64 true residual (replacement, stagnation, escalation).
            return cycle, inner, 0
        if happy:
            return cycle, inner, -13
        if inner == max_inner:
            return cycle, inner, 1
    return maxiter, inner, 1
