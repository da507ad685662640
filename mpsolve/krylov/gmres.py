"""GMRES(m) -- restarted generalised minimal residual, left or right preconditioned.

Saad & Schultz (1986), "GMRES: a generalized minimal residual algorithm for
solving nonsymmetric linear systems", SIAM J. Sci. Stat. Comput. 7(3),
doi:10.1137/0907058; preconditioning as in Saad, *Iterative Methods for Sparse
Linear Systems*, 2nd ed., Algorithms 9.4 (left) and 9.5 (right).

``side="left"`` (the default, as in SciPy and PETSc): the Arnoldi process runs
on ``M A`` and minimises the preconditioned residual ``||M r||``.  The stopping
test is on the true residual ``||b - A x||`` all the same: a cycle stops when the
preconditioned estimate reaches ``tol`` scaled by the ratio ``||M r|| / ||r||``
seen at the start of the cycle, and the residual is recomputed at the end of each
cycle; when the estimate was met but the residual was not, the inner target is
tightened (x 1/4) for the next cycle (SciPy's rule, gh-8400).

``side="right"``: the Arnoldi process runs on ``A M``, so the minimised residual
*is* the unpreconditioned one and the estimate needs no translation.  Where ``M``'s apply
is linear to the working precision -- FP64 (complex128) working vectors and an apply that
carries its sums in FP64 whatever its stored precision
(:meth:`mpsolve.precond.Preconditioner.linear_apply`: Jacobi, BlockJacobi, the ILU
sweeps, ISAI with ``accumulate="float64"``; a sparse-matrix ``M`` under an ``acc64``
policy) -- ``z_j = M v_j`` goes to one scratch vector and the cycle ends with ``x += M
(V_k y)``: one more apply per cycle, as PETSc's right-preconditioned GMRES.  Otherwise
(FP32 working vectors or row sums, an operator or callable ``M``, a preconditioner that
does not vouch for its apply) the vectors ``z_j`` are kept and ``x = x0 + Z y`` (flexible
GMRES, Saad 1993, doi:10.1137/0914028): an ``M`` that rounds to FP32 is not exactly
linear, and ``x0 + M (V y)`` would miss the Arnoldi relation by ``eps_fp32 ||M||``
(add20 with an FP32-sum ISAI: 5e-5 instead of 1e-8).  This costs ``restart`` more
vectors.  Right preconditioning can stall on badly scaled matrices where
left converges (sherman3 with ISAI(A^2): left 1697 iterations, right none in
9000, because the unpreconditioned 2-norm is dominated by a few huge rows).

Orthogonalisation: classical Gram--Schmidt with one selective
reorthogonalisation pass (CGS2, "twice is enough": Giraud, Langou, Rozloznik &
van den Eshof 2005, doi:10.1007/s00211-005-0615-4): the coefficients of all
basis vectors come from one multi-vector pass (``ops.mdot``), the projection
from another (``ops.maxpy``).  One pass leaves ``v_{j+1}`` with a loss of
orthogonality of about ``eps ||w|| / ||w'||`` (``w'`` the projected vector), so the
projection is repeated (and the coefficients added) when ``||w'|| < eta ||w||``
with ``eta = max(1e-3, eps^(1/4))`` -- at most ``~1e3 eps`` lost per vector in FP64.
(Daniel--Gragg--Kaufman--Stewart's ``eta = 0.7`` reorthogonalises at nearly every
step of a converging GMRES, doubling its orthogonalisation cost: 4.4 s against
3.2 s, same iterations, on a 216k-row Poisson problem.)  This reads ``w`` once
per pass instead of once per basis vector, as modified Gram--Schmidt does.  The coefficients and norms go through
``ops.mdot`` / ``ops.nrm2``, so the ``compensated`` policies use Dot2.  The
Hessenberg matrix, Givens rotations and the small triangular solve are always FP64.

Compressed basis (CB-GMRES; Aliaga, Anzt, Gruetzmacher, Quintana-Orti & Tomas,
"Compressed basis GMRES on high-performance graphics processing units", Int. J. High
Perform. Comput. Appl. 2022, doi:10.1177/10943420211036432): with ``precision.basis``
narrower than the working precision (the ``-cb`` presets) the rows of ``V`` are stored
in FP32 while ``w``, the Gram--Schmidt coefficients, norms, the Hessenberg matrix and
``x`` stay FP64.  Each step computes ``w = A v_j`` (or ``M A v_j``, ``A M v_j``) in FP64
from the stored FP32 ``v_j`` (the SpMV widens it), orthogonalises ``w`` in FP64
against the stored rows (``cb_mdot``/``cb_maxpy``: FP32 rows widened exactly, FP64
products and sums, Dot2 under the compensated policies), normalises it in FP64 and
rounds it to FP32 once (``cb_store``); ``x += V_k y`` reads the stored rows.  The
rounding perturbs the Arnoldi relation by about ``eps_fp32 h_{j+1,j}`` per step, so a
cycle's residual estimate may claim more than it delivers below ``~eps_fp32`` of the
cycle's starting residual: each cycle starts from the true residual, so this costs a
few iterations at most, and where it stalls the driver's stagnation rule escalates to
an FP64 basis (``Precision.stronger``).  Deviation from the paper: no FP16/fixed-point
formats, and with flexible right preconditioning ``Z`` stays in the working precision
(as above) while ``V`` is compressed.

Complex systems: the basis, ``w`` and the coefficients ``h_ij = v_i^H w`` are complex
(``ops.mdot`` conjugates), the Hessenberg matrix, rotations and ``g`` are complex128
(``np.result_type(working, float64)``: FP64 for real data) and the rotations are the
unitary complex ones of the ``givens`` kernel.  A compressed basis is real-only.

Memory traffic per inner step j: SpMV + M + about (2j + 4) n values (one CGS pass);
with an FP32 basis the basis reads cost half (``(j + 1)`` values of 4 bytes twice).
Memory: ``restart + 1`` basis vectors (``2 restart + 1`` with flexible right
preconditioning, ``restart + 2`` with a linear ``M``); an FP32 basis takes half the bytes
and one working vector more.
"""
from __future__ import annotations

import math

import numpy as np

from .._system import STAGNATION, compiled_loop
from ..operator import CallableOperator, SparseOperator
from ..precond import Preconditioner
from ..result import USER_STOP, wants_stop

__all__ = ["gmres_body", "SIDES"]

SIDES = ("left", "right")


def gmres_body(sys, x, r, maxiter, tol, callback, hist, restart=20, callback_type="x",
               max_inner=None, side="left", stall=True):
    """Run at most ``maxiter`` restart cycles of GMRES(restart).

    ``max_inner`` caps the inner iterations too (SciPy's ``callback_type='legacy'``).
    ``stall``: in FP64, hand over to the driver (flag 2) after :data:`STALL_CYCLES`
    cycles that left the residual where it was (``False``: the SciPy drop-in's
    ``mpsolve.gmres``, which runs ``maxiter`` as SciPy's does).
    ``x`` and ``r`` are updated in place; ``r`` is ``b - A x`` in the working
    precision after each cycle.  ``hist`` gets one residual estimate per inner
    iteration, in unpreconditioned units (for ``side="left"`` the preconditioned
    estimate times the cycle's ``||r|| / ||M r||``).  Returns
    ``(cycles, inner_iterations, flag)``: flag 0 converged (or the estimate can no
    longer be trusted to find a better ``x`` -- the driver then judges by the true
    residual), 1 out of cycles, 2 the compressed basis cost a cycle its convergence
    (:func:`_basis_lost`: the driver's stagnation rule then escalates to an FP64 basis)
    or a happy breakdown with a regular ``R`` that no longer lowers a residual at the
    working precision's rounding (its floor), -13 a happy breakdown short of the
    tolerance with a singular ``R`` or a residual far above that rounding (A or M
    singular), -14 non-finite values.
    """
    ops, psolve = sys.ops, sys.psolve
    nrm2, axpy = ops.nrm2, ops.axpy
    n = x.size
    ws, wdt = sys.workspace, sys.dtype         # vectors allocated once per solve
    bops = ops.basis(sys.basis)                # the basis' kernels, looked up once
    mdot, store = bops.mdot, bops.store
    mdot_nrm2, maxpy_nrm2 = bops.mdot_nrm2, bops.maxpy_nrm2
    # w = A v for a stored basis row v: a stored matrix widens an FP32 row inside its SpMV;
    # a user's operator gets the row widened first (it is called with working vectors only)
    if not bops.compressed:
        matvec = sys.matvec
    elif isinstance(sys.A_op, CallableOperator):
        user_mv, t = sys.matvec, ws.get("vw", n, wdt)

        def matvec(v, w):
            ops.copy(v, t)                      # t = v, widened
            user_mv(t, w)                       # w = A t
    else:
        matvec = sys.A_op.bind(bops.dtype, wdt)
    m = max(1, min(restart, n))
    left = psolve is not None and side == "left"
    right = psolve is not None and not left
    flexible = right and not _linear_m(sys)
    eps = float(np.finfo(wdt).eps)
    reorth = max(1e-3, eps ** 0.25)            # second CGS pass below this ratio
    # a compressed basis carries a cycle's residual down by about 1 / eps_basis at most
    # (its rounding then dominates the Arnoldi relation, the estimate stalls): the cycle
    # ends there and the next one goes on from the true residual
    reach = float(np.finfo(bops.dtype).eps) if bops.compressed else 0.0
    V = ws.get("V", (m + 1, n), bops.dtype)    # Arnoldi basis, one row per vector
    # the new vector w: written straight into V's next row, or (compressed basis) kept in
    # the working precision and rounded into that row once orthonormal
    W = ws.get("w", n, wdt) if bops.compressed else None
    # right preconditioning keeps Z = [M v_0, M v_1, ...] (flexible GMRES) unless M is
    # linear (module docstring): then z_j goes to Z's one row and x += M (V_k y)
    Z = None if not right else ws.get("Z", (m, n), wdt) if flexible else \
        ws.get("Z", (1, n), wdt)
    u = ws.get("u", n, wdt)
    hdt = np.result_type(wdt, np.float64)      # the small problem: FP64 (complex128)
    H = np.zeros((m + 1, m), dtype=hdt)
    cs = np.zeros(m, dtype=hdt)
    sn = np.zeros(m, dtype=hdt)
    g = np.zeros(m + 1, dtype=hdt)
    y = np.zeros(m, dtype=hdt)
    hcol = np.zeros(m + 1, dtype=hdt)          # Gram-Schmidt coefficients of one column
    bnrm = sys.problem.bnrm or 1.0
    inner = 0
    factor = 1.0                               # left: tightening of the inner target
    claimed = None                             # left, compressed: (beta, est) of the last cycle
    last_happy = math.inf                      # true residual after the last happy breakdown
    last_claim = math.inf                      # left: true residual after the last met target
    # FP32 working precision: r = b - A x itself has a floor near eps_32 ||A|| ||x||, and
    # cycles whose targets lie below it make no progress at all (their estimates never
    # meet the target, so neither rule above ends them): after FLOOR_CYCLES cycles with
    # no new lowest residual (by FLOOR_GAIN) the body hands over to the driver, which
    # judges with the FP64 true residual (escalation, or the floor in the status)
    watch_floor = eps > 2.0**-30
    # FP64 too: a cycle that leaves r where it was is repeated by every restart from it
    # (GMRES(m) is deterministic): after STALL_CYCLES cycles with no new lowest residual
    # (by STALL_GAIN) the driver judges -- left preconditioning of a badly scaled A
    # (Jacobi on D A D, D over 1e-6..1e6) kept r at 1.6e-3 for all of 300 cycles
    least, gain = (FLOOR_CYCLES, FLOOR_GAIN) if watch_floor else (STALL_CYCLES, STALL_GAIN)
    watch = watch_floor or stall
    best, stalled = math.inf, 0
    rnorm = nrm2(r)
    if rnorm <= tol:
        return 0, 0, 0
    stop = False                               # the callback asked to stop
    # without a callback inside the cycle (none, or one per cycle: callback_type "x"), on
    # an uncompressed basis: a cycle's inner steps in one compiled call where the device
    # has it (mpsolve._system.compiled_loop), the same bits
    inner_callback = callback is not None and callback_type in ("pr_norm", "legacy")
    arnoldi = None if inner_callback or bops.compressed else \
        compiled_loop(sys, "gmres_arnoldi")
    py_steps = m if arnoldi is None else 0     # the Python inner loop's length
    for cycle in range(1, maxiter + 1):
        v0 = V[0]
        if left:
            w = v0 if W is None else W
            psolve(r, w)                        # v0 = M r / ||M r||
            beta = nrm2(w)
            if not (beta > 0.0 and math.isfinite(beta)):
                return cycle, inner, -14 if not math.isfinite(beta) else -13
            ratio = rnorm / beta                # unpreconditioned per preconditioned
            if claimed is not None and _basis_lost(beta, *claimed):
                return cycle - 1, inner, 2      # ||M r|| delivered against the estimate
        else:
            w = r                               # v0 = r / ||r||
            beta = rnorm
            ratio = 1.0
        store(1.0 / beta, w, v0)                # v0 = w / beta (rounded to V's dtype)
        target = tol / ratio * factor           # inner target for the minimised residual
        g[:] = 0.0
        g[0] = beta
        H[:] = 0.0
        happy = False
        est = beta
        j_end = 0
        if arnoldi is not None:
            j_end, happy, est, wnorm_in, bad = arnoldi(
                1 if left else (2 if right else 0), V, Z, u, H, cs, sn, g, hcol, target,
                reach * beta, -1 if max_inner is None else max_inner - inner, ratio, eps,
                reorth, hist)
            inner += j_end
            if bad:
                return cycle, inner, bad
        for j in range(py_steps):
            vnext = V[j + 1]
            w = vnext if W is None else W
            if left:
                matvec(V[j], u)                 # u = A v_j
                psolve(u, w)                    # w = M A v_j
            elif right:
                z = Z[j] if flexible else Z[0]
                if W is None:
                    psolve(V[j], z)             # z_j = M v_j
                else:
                    ops.copy(V[j], u)           # u = v_j, widened
                    psolve(u, z)                # z_j = M v_j
                sys.matvec(z, w)                # w = A z_j
            else:
                matvec(V[j], w)                 # w = A v_j
            wnorm0 = wnorm_in = mdot_nrm2(V, j + 1, w, hcol)   # h_i = v_i . w, i <= j; ||w||
            for _pass in range(2):              # CGS, repeated once if needed (CGS2)
                if _pass:
                    mdot(V, j + 1, w, hcol)     # h_i = v_i . w (second pass)
                wnorm = maxpy_nrm2(V, j + 1, hcol, w)   # w -= sum_i h_i v_i; ||w||
                H[: j + 1, j] += hcol[: j + 1]
                if wnorm > reorth * wnorm0:
                    break
                wnorm0 = wnorm
            H[j + 1, j] = wnorm
            if not math.isfinite(wnorm):
                return cycle, inner, -14
            est = ops.givens(H, cs, sn, g, j)   # Givens: H[:, j] -> R, g updated
            inner += 1
            hist.append(est * ratio)
            # (the norm as a NumPy scalar, as SciPy passes it: callbacks read its .ndim)
            if (callback is not None and callback_type in ("pr_norm", "legacy")
                    and wants_stop(callback(np.float64(est / bnrm)))):
                stop = True
            j_end = j + 1
            if wnorm <= eps * wnorm_in or wnorm == 0.0:
                happy = True
                break
            store(1.0 / wnorm, w, vnext)        # v_{j+1} = w / ||w|| (rounded to V's dtype)
            if est <= target or est <= reach * beta or inner == max_inner or stop:
                break
        k = j_end
        singular = happy and abs(H[k - 1, k - 1]) <= eps * wnorm_in
        if singular:
            # A or M singular: the last direction added nothing (A M v in the span already)
            # and left R singular; the least-squares minimum is that of the first k-1
            k -= 1
        ops.back_substitute(H, g, k, y)         # y = R[:k, :k]^-1 g[:k], FP64
        if flexible:
            ops.lincomb(Z, y, k, u)             # u = Z_k y
            axpy(1.0, u, x)                     # x += u
        else:
            bops.lincomb(V, y, k, u)            # u = V_k y (the stored rows)
            if right:
                psolve(u, Z[0])                 # M u: linear M, = Z_k y to rounding
            axpy(1.0, Z[0] if right else u, x)  # x += M V_k y (right) or V_k y
        sys.residual(x, sys.b, r)               # r = b - A x
        rnorm = nrm2(r)
        if callback is not None and callback_type == "x" and wants_stop(callback(x)):
            stop = True
        if not math.isfinite(rnorm):
            return cycle, inner, -14
        if rnorm <= tol:
            return cycle, inner, 0
        if bops.compressed:
            if left:
                claimed = (beta, est)           # judged with ||M r|| at the next cycle
            elif _basis_lost(rnorm, beta, est):
                return cycle, inner, 2
        if stop:
            return cycle, inner, USER_STOP
        if happy:
            # the Krylov space is exhausted short of the tolerance; one more cycle from the
            # true residual corrects x's rounding within the reachable space: as long as
            # that still helps.  Then: with R singular, or a residual left far above the
            # working precision's rounding (sqrt(eps) ||b||: a singular M under left
            # preconditioning keeps R regular), A or M is singular -- the part of r they
            # cannot reach stays: -13; else the space held the answer of the working
            # precision's system and what is left is that precision's floor (a near-exact
            # M at a tolerance below it: the driver's stagnation, flag 2)
            if not rnorm < last_happy or inner == max_inner:
                if singular or not rnorm <= math.sqrt(eps) * bnrm:
                    return cycle, inner, -13
                return cycle, inner, 2 if not rnorm < last_happy else 1
            last_happy = rnorm
            continue
        if inner == max_inner:
            return cycle, inner, 1
        if watch:
            if rnorm < gain * best:
                best, stalled = rnorm, 0
            else:
                stalled += 1
                if stalled >= least:
                    return cycle, inner, 2
        if est <= target:
            # the minimised residual met its target but the true one did not
            if left and factor > eps and not rnorm > STAGNATION * last_claim:
                factor *= 0.25                  # ask the next cycle for more (SciPy's rule)
                last_claim = rnorm
            else:
                # the working precision's floor or rounding drift: the driver judges
                # with the FP64 true residual (replacement, stagnation, escalation) --
                # left: also where the last claim's tighter target did not halve the true
                # residual (at a floor, tighter targets and the relaxation of the cycles
                # that miss them took turns until maxiter: thousands of cycles)
                return cycle, inner, 0
        elif left:
            factor = min(1.0, 1.5 * factor)
    return maxiter, inner, 1


#: An FP32 GMRES stops after this many cycles without a new lowest residual ...
FLOOR_CYCLES = 5
#: ... lower than the last one by this factor (a steady decrease of 0.16% a cycle resets
#: the count: only a residual that has stopped falling is a floor)
FLOOR_GAIN = 1.0 - 2.0**-7
#: A GMRES in FP64 (or wider) stops after this many cycles without a new lowest residual ...
STALL_CYCLES = 20
#: ... lower than the last one by this factor (1e-6 relative: only a frozen residual)
STALL_GAIN = 1.0 - 2.0**-20


def _linear_m(sys) -> bool:
    """Is the System's ``M`` linear to the working precision (module docstring)?  A
    preconditioner says so (:meth:`~mpsolve.precond.Preconditioner.linear_apply`); a
    sparse-matrix ``M`` is where its stored operator sums in FP64 and the vectors are
    FP64 (complex128); an operator or callable ``M`` is not known to be."""
    wdt = np.dtype(sys.dtype)
    M = getattr(getattr(sys, "problem", None), "M_user", None)    # bare primitives: none
    if isinstance(M, Preconditioner):
        return M.linear_apply(wdt, wdt)
    Mo = getattr(sys, "M_obj", None)
    return isinstance(Mo, SparseOperator) and Mo.accumulate == "float64" and \
        wdt in (np.dtype(np.float64), np.dtype(np.complex128))


def _basis_lost(delivered, start, claimed):
    """Did a cycle on a compressed basis deliver far less than its estimate claimed?

    ``start``: the minimised residual at the cycle's start, ``claimed``: its estimate at
    the end, ``delivered``: the residual recomputed from ``x`` (the same norm).  With an
    exact basis the two agree to rounding; an FP32 basis perturbs the Arnoldi relation
    by about ``eps_fp32 ||H|| ||y||``, which wins once ``y`` is large (ill-conditioned
    ``H``).  Lost: the residual grew over the cycle (a minimal-residual cycle on an exact
    basis never lets it grow), or the cycle kept less than half of the digits it claimed
    (``delivered / start > sqrt(claimed / start)``) and missed the estimate by more than 2x.
    """
    return delivered > start or (delivered > 2.0 * claimed
                                 and delivered * delivered > claimed * start)
