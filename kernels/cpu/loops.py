"""Whole Krylov iterations in one compiled call, for small systems (Numba).

Below :data:`~._config.PARALLEL_MIN` unknowns (and :data:`.spmv.PARALLEL_MIN_WORK`
nonzeros plus rows) every CPU kernel runs its serial form, and the time of an iteration is mostly
the Python around the kernels: five to eight calls through bound
primitives per iteration, a microsecond or more each.  The loops here run the same
iterations inside one ``@njit`` function that calls the *same* kernels directly
(:mod:`.blas1`, :mod:`.spmv`, :mod:`.ilu`, :mod:`.eft`: not copies), so for the same
inputs they give the iterates, residual norms, iteration counts and flags of the Python
bodies in :mod:`mpsolve.krylov` bit for bit (``tests/test_fused.py`` checks that).

What a loop gets (raw arrays and scalars only; the codes and the packing are
:mod:`mpsolve.kernels.fused`'s, made by the launch plan :func:`loop_plan`):

* ``A = (parts, indptr, indices, data)`` and ``amode``: ``ACC64_DOT`` (FP64 row sums, CG's
  product fused with ``p . Ap``: the System's ``bind_dot``), ``ACC64`` or ``ACC32``;
* the preconditioner as a small fixed program ``prog`` over the arrays ``P = (ptr1, ind1,
  val1, ptr2, ind2, val2, d)`` with the row-sum mode ``pmode`` of its CSR products:
  ``P_NONE``, ``P_DIAG`` (Jacobi), ``P_CSR`` (one CSR product), ``P_CSR2`` (two: ``G^T (G
  r)`` or ``U_isai (L_isai r)``, the intermediate in a scratch vector), ``P_ILU`` (the
  ILU(0) sweeps of one diagonal block);
* the reduction mode (native or compensated Dot2) as the registry mode;
* ``hist``: the residual norms are written there (CG and BiCGSTAB run at most
  ``hist.size`` iterations a call and keep their scalars in ``state``, so the caller goes
  on with a further call and a long solve needs no long buffer).

The ops: ``cg_loop`` (CG's whole iteration), ``bicgstab_loop`` (BiCGSTAB's) and
``gmres_arnoldi`` (the inner steps of one GMRES cycle: the cycle's start and end -- the
update of ``x`` through NumPy's GEMV, the residual, the restart rules -- stay in Python,
once per cycle).

The rare paths of the Python bodies are run too, with the same arithmetic (:mod:`.loopmath`,
shared with the two-thread loops of :mod:`.team`): a norm that
is not trustworthy is computed again from the vector scaled by a power of two
(:func:`mpsolve.kernels.safenorm.safe_nrm2`), and an ``alpha`` whose dot overflowed or is
subnormal comes from scaled vectors (:func:`~mpsolve.kernels.safenorm.safe_dot_ratio`).
"""
import math
import os

import numpy as np
from numba import get_num_threads, njit

from ..fused import ACC32, ACC64_DOT, P_CSR, P_CSR2, P_DIAG, P_ILU, P_ILU2, P_NONE, pack
from ..registry import register, register_plan
from ._config import JIT, PARALLEL_MIN
from .blas1 import (_axpy2_ser, _axpy_ser, _bicg_dir_ser, _copy_ser, _dmul_ser, _maxpy_ser,
                    _mdot_ser, _scal_ser, _waxpy_ser, _xpay_ser)
from .eft import _mdot2_ser
from .hessenberg import _rotate
from .ilu import _ilu_solve
from .loopmath import _COMPENSATED, _NATIVE, _axpy2_nrm2, _cg_start, _dot, _nrm2, _ratio
from .spmv import _csr_acc32_ser, _csr_acc64_dot_ser, _csr_acc64_ser
from .team import split_rows, team_arnoldi, team_bicgstab, team_cg

__all__ = ["loop_plan", "cg_loop_native", "cg_loop_compensated", "gmres_arnoldi_native",
           "gmres_arnoldi_compensated", "bicgstab_loop_native", "bicgstab_loop_compensated"]

def loop_plan(n, A, M, dtype, force=False):
    """The argument pack of :func:`mpsolve.kernels.fused.pack`, or ``None`` where a loop
    here would not compute what the Python body computes bit for bit: some kernel the
    Python body calls runs its parallel form at this size (``n`` at least
    :data:`PARALLEL_MIN`, or a matrix split in several row partitions).  ``force``: pack
    whatever the size (the loops are serial; for tests and explicit use).

    The parallel SpMV is not called from these loops: tried (the Python bodies' parallel
    product inside the loop, same bits), a solve of ``python -m mpsolve.bench.coverage``
    crashed there with a segmentation fault, in its first solve after PETSc's set-up; not
    pursued.  The two-thread form (:mod:`.team`) opens no parallel region."""
    if not force and (n >= PARALLEL_MIN or A[0].size > 2):
        return None
    return pack(A, M, dtype)


#: Added to a pack's matrix mode when the team loops (:mod:`.team`) run it; the pack's
#: first matrix array is then the two halves' row split.
TEAM = 16
#: Work (``nnz + rows`` of ``A``) from which the loops run on two threads
#: (:mod:`.team`), measured with ``python -m mpsolve.bench.team``
#: (``bench/results/team.md``): below it the helper's start (about 100 us on this
#: project's 2-vCPU machines) outweighs what the halved sweeps save -- 2-D Poisson with
#: Jacobi or ISAI gained 1.08-1.18x at 24k, 0.91-1.03x at 12k.  With ILU(0), whose sweeps stay
#: on one thread, from :data:`TEAM_MIN_WORK_ILU` (0.99-1.19x at 95k, 0.83-1.03x at 47k).
#: ILU(0) factors of two diagonal blocks (``ILU0(blocks=2)``), each thread sweeping its
#: own, from :data:`TEAM_MIN_WORK`.
#: ``MPSOLVE_TEAM_MIN`` sets one threshold for every preconditioner, ``MPSOLVE_TEAM=0``
#: turns the team loops off.
TEAM_MIN_WORK = 20000
TEAM_MIN_WORK_ILU = 100000


def team_threads() -> bool:
    """Two threads may run: Numba is allowed two or more (``NUMBA_NUM_THREADS``,
    ``numba.set_num_threads``) and the process may run on two or more CPUs (its affinity
    mask, read once per process: a system call that cost about 2% of a small solve)."""
    if get_num_threads() < 2:
        return False
    pid = os.getpid()
    if _CPUS[0] != pid:
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:                               # no affinity call here
            cpus = os.cpu_count() or 1
        _CPUS[:] = [pid, cpus]
    return _CPUS[1] >= 2


#: ``[pid, CPUs]``: the process's CPU count as :func:`team_threads` last read it.
_CPUS = [None, 0]


def team_allowed() -> bool:
    """Not turned off (``MPSOLVE_TEAM=0``) and two threads may run."""
    return os.environ.get("MPSOLVE_TEAM", "1") != "0" and team_threads()


def use_team(n, work, prog) -> bool:
    """Whether the loops on ``n`` unknowns (``work``: ``nnz + rows``) with the
    preconditioner program ``prog`` run on two threads: from :data:`TEAM_MIN_WORK`
    (:data:`TEAM_MIN_WORK_ILU`), below :data:`PARALLEL_MIN` unknowns -- and beyond where
    Numba has just two threads (a team iteration beats one parallel region per sweep
    there); with more threads the parallel kernels run the large systems."""
    if not team_allowed():
        return False
    least = os.environ.get("MPSOLVE_TEAM_MIN")
    if least is not None:
        least = int(least)
    else:
        least = TEAM_MIN_WORK_ILU if prog == P_ILU else TEAM_MIN_WORK
    return work >= least and (n < PARALLEL_MIN or get_num_threads() == 2)


@register_plan("cpu", "bicgstab_loop")
@register_plan("cpu", "cg_loop")
def krylov_loop_plan(n, A, M, dtype, force=False, team_ok=True):
    """:func:`loop_plan`'s pack for the loops, or the team form of it where
    :func:`use_team` says so (not under ``force``: the serial loops, for the bit-for-bit
    checks against the Python bodies)."""
    if not force and team_ok and team_allowed():
        packed = pack(A, M, dtype)
        if packed is None:
            return None
        (_, ip, ix, data), amode, prog, P, pmode = packed
        split = None
        if prog == P_ILU and M[2] is not None and len(M[2]) == 3:
            # two diagonal blocks of ILU(0) factors: the team's halves are the blocks, each
            # thread sweeping its own
            split, prog = np.asarray(M[2], dtype=np.int64), P_ILU2
        if use_team(n, int(ip[-1]) + n, prog):
            split = split_rows(ip) if split is None else split
            return (split, ip, ix, data), amode + TEAM, prog, P, pmode
    return loop_plan(n, A, M, dtype, force)


@register_plan("cpu", "gmres_arnoldi")
def arnoldi_plan(n, A, M, dtype, force=False):
    """GMRES's inner steps: the serial loop where :func:`loop_plan` has it; on two threads
    only when asked (``MPSOLVE_TEAM_GMRES=1``).  Measured (``bench/results/team.md``):
    1.19-1.52x at 4k-8k unknowns, but 0.70-0.94x at 16k-64k, where the basis outgrows a
    core's cache and each cycle's update of ``x`` (NumPy, on the caller's thread) reads
    it all, so the helper's half of the basis crosses between the cores every cycle
    (instrumented: the caller waited at the barriers for 80% of a cycle); a team run per
    cycle also pays the helper's start every ``restart`` steps (0.23-0.32x with ILU(0) at
    1k-2k)."""
    team_ok = os.environ.get("MPSOLVE_TEAM_GMRES", "0") == "1"
    return krylov_loop_plan(n, A, M, dtype, force, team_ok)


# ------------------------------------------------------------------ operators
@njit(**JIT)
def _csr(mode, parts, ptr, ind, val, x, y):
    if mode == ACC32:
        _csr_acc32_ser(parts, ptr, ind, val, x, y)
    else:
        _csr_acc64_ser(parts, ptr, ind, val, x, y)


@njit(**JIT)
def _matvec_dot(amode, dmode, A, x, y):
    """``y = A x; return x . y`` as the System's ``matvec_dot``."""
    parts, ptr, ind, val = A
    if amode == ACC64_DOT:
        return np.float64(_csr_acc64_dot_ser(parts, ptr, ind, val, x, y))
    _csr(amode, parts, ptr, ind, val, x, y)
    return _dot(dmode, x, y)


@njit(**JIT)
def _psolve(prog, pmode, P, r, z, t):
    """``z = M r`` by the program ``prog`` (module docstring)."""
    ptr1, ind1, val1, ptr2, ind2, val2, d = P
    if prog == P_DIAG:
        _dmul_ser(d, r, z)
    elif prog == P_CSR:
        _csr(pmode, ptr1, ptr1, ind1, val1, r, z)
    elif prog == P_CSR2:
        _csr(pmode, ptr1, ptr1, ind1, val1, r, t)
        _csr(pmode, ptr2, ptr2, ind2, val2, t, z)
    elif prog == P_ILU:
        _ilu_solve(ptr1, ind1, val1, ptr2, ind2, val2, d, r, z)


# ------------------------------------------------------------------ CG
@njit(**JIT)
def _cg(dmode, consts, A, amode, prog, P, pmode, x, r, q, z, p, t, maxiter, tol, hist,
        state):
    """PCG as :func:`mpsolve.krylov.cg.cg_body` (Saad Alg. 9.1; stopping test on the
    unpreconditioned ``||r||``).  ``z`` is ``r`` itself when ``prog`` is :data:`P_NONE`.
    Returns ``(iterations, flag)``; ``state = [rz, resume, sign of p.Ap]`` (the signs as
    the body keeps them: A or M may be negative definite)."""
    tiny, lo, step = consts
    if state[1] == 0:
        if prog != P_NONE:
            _psolve(prog, pmode, P, r, z, t)        # z = M r
        _copy_ser(z, p)                             # p = z
        rnorm = _nrm2(dmode, r, lo, step)
        rz = rnorm * rnorm if prog == P_NONE else _dot(dmode, r, z)
        flag = _cg_start(rnorm, rz, tol)
        if flag != 1:
            return 0, flag
        sa = 0.0
    else:
        rz = state[0]
        sa = state[2]
    sm = math.copysign(1.0, rz)
    for k in range(1, maxiter + 1):
        pq = _matvec_dot(amode, dmode, A, p, q)     # q = A p; p . q
        if sa == 0.0 and pq != 0.0:
            sa = math.copysign(1.0, pq)
            state[2] = sa
        if tiny <= sa * pq < math.inf:
            alpha = rz / pq
        else:                                       # from scaled vectors
            alpha = _ratio(dmode, r, z, p, q, step)
            if not (0 < sm * sa * alpha < math.inf):
                return k - 1, (-14 if math.isnan(alpha) else -12)
        rnorm = _axpy2_nrm2(dmode, alpha, p, x, -alpha, q, r, lo, step)  # x += a p; r -= a q
        hist[k - 1] = rnorm
        if not math.isfinite(rnorm):
            return k, -14
        if rnorm <= tol:
            return k, 0
        if prog == P_NONE:
            rz_new = rnorm * rnorm
        else:
            _psolve(prog, pmode, P, r, z, t)        # z = M r
            rz_new = _dot(dmode, r, z)
        if rz_new == 0.0:                           # underflowed, or M r = 0: at its floor
            return k, 0
        if prog != P_NONE and not (sm * rz_new > 0):
            return k, (-14 if math.isnan(rz_new) else -12)
        beta = rz_new / rz
        rz = rz_new
        state[0] = rz
        _xpay_ser(z, beta, p)                       # p = z + beta p
    return maxiter, 1


_LOOP_KEYS = [("float64",), ("float32",)]
_CONSTS = {}


def _consts(dtype):
    """``(tiny, 2 tiny, maxexp - 2)`` of ``dtype``: CG's subnormal test, the norms'
    trust bound (safenorm), the scaling step."""
    c = _CONSTS.get(dtype)
    if c is None:
        fi = np.finfo(dtype)
        c = _CONSTS[dtype] = (float(fi.tiny), 2.0 * float(fi.tiny), int(fi.maxexp) - 2)
    return c


@register("cpu", "cg_loop", _LOOP_KEYS, mode="native")
def cg_loop_native(A, amode, prog, P, pmode, x, r, q, z, p, t, maxiter, tol, hist, state):
    """At most ``min(maxiter, hist.size)`` PCG iterations in one call, native dots (module
    docstring).  Returns ``(iterations, flag)``: flag 0 converged, 1 iterations used up,
    -12 / -14 as :func:`mpsolve.krylov.cg.cg_body`."""
    if amode >= TEAM:
        return team_cg(A[0], _NATIVE, _consts(x.dtype), A, amode - TEAM, prog, P, pmode, x,
                       r, q, z, p, t, maxiter, tol, hist, state)
    c, f = _cg(_NATIVE, _consts(x.dtype), A, amode, prog, P, pmode, x, r, q, z, p, t,
               min(maxiter, hist.size), tol, hist, state)
    return int(c), int(f)


@register("cpu", "cg_loop", _LOOP_KEYS, mode="compensated")
def cg_loop_compensated(A, amode, prog, P, pmode, x, r, q, z, p, t, maxiter, tol, hist,
                        state):
    """:func:`cg_loop_native` with compensated (Dot2) dots and norms."""
    if amode >= TEAM:
        return team_cg(A[0], _COMPENSATED, _consts(x.dtype), A, amode - TEAM, prog, P, pmode,
                       x, r, q, z, p, t, maxiter, tol, hist, state)
    c, f = _cg(_COMPENSATED, _consts(x.dtype), A, amode, prog, P, pmode, x, r, q, z, p, t,
               min(maxiter, hist.size), tol, hist, state)
    return int(c), int(f)


# ------------------------------------------------------------------ GMRES
@njit(**JIT)
def _mdot(mode, V, k, w, out):
    if mode == _NATIVE:
        _mdot_ser(V, k, w, out)
    else:
        _mdot2_ser(V, k, w, out)


@njit(**JIT)
def _arnoldi(dmode, consts, A, amode, prog, P, pmode, side, V, Z, u, t, H, cs, sn, g, hcol,
             target, floor, max_steps, ratio, eps, reorth, hist):
    """The inner steps of one GMRES(m) cycle as :func:`mpsolve.krylov.gmres.gmres_body`
    runs them (an FP64 or FP32 basis in the working dtype; CGS2; Givens), from ``V[0]``
    already normalised.  ``side``: 0 none, 1 left (``w = M A v_j``), 2 right (``z_j = M
    v_j`` into ``Z[j]``, or ``Z[0]`` when ``Z`` has one row -- a linear ``M``, the body
    forms ``M (V_k y)`` after the cycle -- and ``w = A z_j``).  Stops after ``m`` steps, a
    happy breakdown, ``est <= target``, ``est <= floor`` or ``max_steps`` steps (``-1``: no
    cap).  Returns ``(steps, happy, est, wnorm_in, flag)``: ``hist[:steps]`` the estimates
    times ``ratio``; flag -14 when ``||w||`` is not finite (that step not counted)."""
    tiny, lo, step = consts
    parts, ptr, ind, val = A
    m = H.shape[1]
    est = 0.0
    wnorm_in = 0.0
    happy = False
    steps = 0
    for j in range(m):
        w = V[j + 1]
        if side == 1:
            _csr(amode, parts, ptr, ind, val, V[j], u)          # u = A v_j
            _psolve(prog, pmode, P, u, w, t)                  # w = M A v_j
        elif side == 2:
            z = Z[j] if Z.shape[0] > 1 else Z[0]              # flexible: row j; linear M: one
            _psolve(prog, pmode, P, V[j], z, t)               # z_j = M v_j
            _csr(amode, parts, ptr, ind, val, z, w)           # w = A z_j
        else:
            _csr(amode, parts, ptr, ind, val, V[j], w)        # w = A v_j
        _mdot(dmode, V, j + 1, w, hcol)                       # h_i = v_i . w
        wnorm = _nrm2(dmode, w, lo, step)
        wnorm0 = wnorm_in = wnorm
        for ps in range(2):                                   # CGS2
            if ps:
                _mdot(dmode, V, j + 1, w, hcol)
            _maxpy_ser(V, j + 1, hcol, w)                     # w -= sum_i h_i v_i
            wnorm = _nrm2(dmode, w, lo, step)
            for i in range(j + 1):
                H[i, j] += hcol[i]
            if wnorm > reorth * wnorm0:
                break
            wnorm0 = wnorm
        H[j + 1, j] = wnorm
        if not math.isfinite(wnorm):
            return steps, happy, est, wnorm_in, -14
        est = _rotate(H, cs, sn, g, j)                        # Givens: H[:, j] -> R
        hist[steps] = est * ratio
        steps += 1
        if wnorm <= eps * wnorm_in or wnorm == 0.0:
            happy = True
            break
        _scal_ser(1.0 / wnorm, w)                             # v_{j+1} = w / ||w||
        if est <= target or est <= floor or steps == max_steps:
            break
    return steps, happy, est, wnorm_in, 0


def _arnoldi_call(dmode, A, amode, prog, P, pmode, side, V, Z, u, t, H, cs, sn, g, hcol,
                  target, floor, max_steps, ratio, eps, reorth, hist):
    if amode >= TEAM:
        return team_arnoldi(A[0], dmode, _consts(V.dtype), A, amode - TEAM, prog, P, pmode,
                            side, V, Z, u, t, H, cs, sn, g, hcol, target, floor, max_steps,
                            ratio, eps, reorth, hist)
    s, h, e, wi, f = _arnoldi(dmode, _consts(V.dtype), A, amode, prog, P, pmode, side, V, Z,
                              u, t, H, cs, sn, g, hcol, target, floor, max_steps, ratio, eps,
                              reorth, hist)
    return int(s), bool(h), float(e), float(wi), int(f)


@register("cpu", "gmres_arnoldi", _LOOP_KEYS, mode="native")
def gmres_arnoldi_native(A, amode, prog, P, pmode, side, V, Z, u, t, H, cs, sn, g, hcol,
                         target, floor, max_steps, ratio, eps, reorth, hist):
    """One GMRES cycle's inner steps in one call, native reductions (:func:`_arnoldi`).
    Returns ``(steps, happy, est, wnorm_in, flag)``."""
    return _arnoldi_call(_NATIVE, A, amode, prog, P, pmode, side, V, Z, u, t, H, cs, sn, g,
                         hcol, target, floor, max_steps, ratio, eps, reorth, hist)


@register("cpu", "gmres_arnoldi", _LOOP_KEYS, mode="compensated")
def gmres_arnoldi_compensated(A, amode, prog, P, pmode, side, V, Z, u, t, H, cs, sn, g, hcol,
                              target, floor, max_steps, ratio, eps, reorth, hist):
    """:func:`gmres_arnoldi_native` with Dot2 coefficients and norms."""
    return _arnoldi_call(_COMPENSATED, A, amode, prog, P, pmode, side, V, Z, u, t, H, cs, sn,
                         g, hcol, target, floor, max_steps, ratio, eps, reorth, hist)


# ------------------------------------------------------------------ BiCGSTAB
@njit(**JIT)
def _bicgstab(dmode, consts, A, amode, prog, P, pmode, x, r, r0, p, v, s, t, ph, sh, w,
              maxiter, tol, eps, hist, state):
    """BiCGSTAB as :func:`mpsolve.krylov.bicgstab.bicgstab_body` (van der Vorst 1992,
    right preconditioned; ``ph``/``sh`` are ``p``/``s`` themselves without ``M``;
    ``p`` and ``v`` zero on the first call).  Returns ``(iterations, flag)``; ``state =
    [rho_old, alpha, omega, resume, ||r0^||, ||r||]``."""
    tiny, lo, step = consts
    parts, ptr, ind, val = A
    rhotol = eps * eps
    first = state[3] == 0
    if first:
        _copy_ser(r, r0)                                  # shadow residual r0^ = r
        r0nrm = _nrm2(dmode, r0, lo, step)
        rnorm = r0nrm
        if rnorm <= tol:
            return 0, 0
        rho_old = alpha = omega = 1.0
    else:
        rho_old, alpha, omega = state[0], state[1], state[2]
        r0nrm, rnorm = state[4], state[5]
    for k in range(1, maxiter + 1):
        rho = _dot(dmode, r0, r)                          # rho = r0^ . r
        if not math.isfinite(rho):
            return k - 1, -14
        if abs(rho) <= rhotol * r0nrm * rnorm:
            return k - 1, -10
        if k == 1 and first:
            _copy_ser(r, p)                               # p = r
        else:
            beta = (rho / rho_old) * (alpha / omega)
            _bicg_dir_ser(r, beta, omega, v, p)           # p = r + beta (p - omega v)
        if prog != P_NONE:
            _psolve(prog, pmode, P, p, ph, w)             # p^ = M p
        _csr(amode, parts, ptr, ind, val, ph, v)          # v = A p^
        r0v = _dot(dmode, r0, v)
        if r0v == 0.0:
            return k - 1, -11
        if tiny <= abs(r0v) < math.inf:
            alpha = rho / r0v
        else:                                             # from scaled vectors
            alpha = _ratio(dmode, r0, r, r0, v, step)
            if not math.isfinite(alpha):
                return k - 1, -14
        _waxpy_ser(-alpha, v, r, s)                       # s = r - alpha v
        snorm = _nrm2(dmode, s, lo, step)
        if snorm <= tol:
            _axpy_ser(alpha, ph, x)                       # x += alpha p^
            _copy_ser(s, r)                               # r = s
            hist[k - 1] = snorm
            return k, 0
        if prog != P_NONE:
            _psolve(prog, pmode, P, s, sh, w)             # s^ = M s
        _csr(amode, parts, ptr, ind, val, sh, t)          # t = A s^
        tt = _dot(dmode, t, t)
        ts = _dot(dmode, t, s)
        if tiny <= tt < math.inf and abs(ts) < math.inf:
            omega = ts / tt
        else:
            omega = _ratio(dmode, t, s, t, t, step)
            if not math.isfinite(omega):
                return k - 1, (-11 if tt == 0.0 else -14)
        if omega == 0.0:
            return k - 1, -11
        _axpy2_ser(alpha, ph, x, omega, sh, x)            # x += alpha p^ + omega s^
        _waxpy_ser(-omega, t, s, r)                       # r = s - omega t
        rnorm = _nrm2(dmode, r, lo, step)
        hist[k - 1] = rnorm
        if not math.isfinite(rnorm):
            return k, -14
        if rnorm <= tol:
            return k, 0
        rho_old = rho
        state[0], state[1], state[2], state[4], state[5] = rho_old, alpha, omega, r0nrm, rnorm
    return maxiter, 1


def _bicgstab_call(dmode, A, amode, prog, P, pmode, x, r, r0, p, v, s, t, ph, sh, w, maxiter,
                   tol, hist, state):
    if amode >= TEAM:
        return team_bicgstab(A[0], dmode, _consts(x.dtype), A, amode - TEAM, prog, P, pmode,
                             x, r, r0, p, v, s, t, ph, sh, w, maxiter, tol,
                             float(np.finfo(x.dtype).eps), hist, state)
    c, f = _bicgstab(dmode, _consts(x.dtype), A, amode, prog, P, pmode, x, r, r0, p, v, s, t,
                     ph, sh, w, min(maxiter, hist.size), tol, float(np.finfo(x.dtype).eps),
                     hist, state)
    return int(c), int(f)


@register("cpu", "bicgstab_loop", _LOOP_KEYS, mode="native")
def bicgstab_loop_native(A, amode, prog, P, pmode, x, r, r0, p, v, s, t, ph, sh, w, maxiter,
                         tol, hist, state):
    """At most ``min(maxiter, hist.size)`` BiCGSTAB iterations in one call, native
    reductions (:func:`_bicgstab`).  Returns ``(iterations, flag)``."""
    return _bicgstab_call(_NATIVE, A, amode, prog, P, pmode, x, r, r0, p, v, s, t, ph, sh, w,
                          maxiter, tol, hist, state)


@register("cpu", "bicgstab_loop", _LOOP_KEYS, mode="compensated")
def bicgstab_loop_compensated(A, amode, prog, P, pmode, x, r, r0, p, v, s, t, ph, sh, w,
                              maxiter, tol, hist, state):
    """:func:`bicgstab_loop_native` with Dot2 dots and norms."""
    return _bicgstab_call(_COMPENSATED, A, amode, prog, P, pmode, x, r, r0, p, v, s, t, ph, sh,
                          w, maxiter, tol, hist, state)
