"""How few iterations can *any* precision of the recurrences give?  The ceiling of issue 15's
iteration goal (``eft``/``double`` <= 0.95 in geometric mean on the ill-conditioned set).

Run ``python -m mpsolve.bench.bench_eft_ceiling [--quick] [--no-suite] [--out FILE]``.
Writes Markdown (default ``bench/results/eft_ceiling.md``).

A measuring instrument, not product code: CG, BiCGSTAB and GMRES(30), Jacobi-preconditioned,
each written once (:func:`cg_body`, :func:`bicgstab_body`, :func:`gmres_body`) against a
small arithmetic interface and run with the *whole* recurrence -- every vector, every scalar,
the SpMV, the preconditioner, the dots, the updates, GMRES's Hessenberg matrix and rotations
-- in

* ``fp64`` (:class:`F64`): NumPy/SciPy float64;
* ``ld`` (:class:`LD`): ``numpy.longdouble`` (x86 80-bit extended: 64-bit significand,
  ``u = 2^-64``), SciPy's longdouble SpMV;
* ``dd`` (:class:`DDArith`): double-double, ``u ~ 2^-106``.  Every vector is a pair of
  FP64 arrays ``(h, l)``, every scalar a :class:`DD` pair.  SpMV: ``A (h + l)`` with Dot2
  per row (mpsolve's ``residual_dd`` CPU kernel with ``b = 0``: every product split by
  TwoProduct, every sum by TwoSum); dots: Dot2 over the exact products ``h_x h_y`` plus the
  cross terms (:func:`dd_dot`); updates, scaling and the Jacobi division by the accurate
  double-double operations of Joldes, Muller & Popescu (2017, "Tight and rigorous error
  bounds for basic building blocks of double-word arithmetic", ACM TOMS 44(2),
  doi:10.1145/3121432): :func:`dd_add` (their Algorithm 6, relative error <= 3 u^2),
  :func:`dd_mul` (Algorithm 12, <= 4 u^2); division and square root by one Newton
  correction on a residual computed in double-double.

The three follow mpsolve's methods step for step (:mod:`mpsolve.krylov`): CG's stopping test
on the unpreconditioned recursive residual, BiCGSTAB right-preconditioned with its half-step
test, GMRES(30) left-preconditioned with classical Gram-Schmidt and one selective second pass
(``eta = max(1e-3, eps^(1/4))``) and the true residual recomputed after each cycle (inner
target tightened x 1/4 when the estimate was met and the residual was not); around the body
the driver's residual replacement (:func:`instrument`): a recursive residual that meets the
tolerance while the true one -- computed in the same arithmetic -- does not restarts the
iteration from the true residual, until it fails to halve.  Iterations: CG and BiCGSTAB
steps, GMRES inner steps.

Beside them, (d) mpsolve's own ``double`` and ``eft`` presets (``mpsolve.solve``, method and
Jacobi fixed, :func:`mpsolve.bench.bench_eft_ablation.run`).  Problems: those of
:mod:`mpsolve.bench.bench_accuracy` / :mod:`mpsolve.bench.bench_eft_ablation` at
``rtol = 1e-10`` (``b = A x*``, integer ``x*``), and (unless ``--no-suite``) the systems of the
ablation's suite set at ``rtol = 1e-8`` (``b = A 1``) that ``double`` solves, small enough for
the time budget (``--suite-max-work``: ``double``'s iterations times ``nnz`` of the matrix).
Every instrument run is capped at ``--cap`` times ``double``'s iterations (plus 100): a run
that does not converge within it is marked ``*`` and counts at the cap.

For CG, (e) the count of exact arithmetic (:func:`cg_exact_count`: Lanczos with full
reorthogonalisation, the exact CG of a matrix within FP64's rounding of ``A``).

What this bounds: an FP64-cost change of the arithmetic (compensated reductions,
double-double ``x`` or residual, compensated updates) computes part of the recurrence at
double-double accuracy and the rest in FP64, so ``dd`` -- all of it at double-double
accuracy -- is as far as such changes can go; ``exact`` is as far as any arithmetic can.
"""
from __future__ import annotations

import argparse
import math
import pathlib
import platform
import sys
import time

import numpy as np
import scipy.sparse as sp
from numba import njit
from threadpoolctl import threadpool_limits

from mpsolve.kernels import lookup
from mpsolve.kernels.cpu.eft import fast_two_sum, two_prod, two_sum
from mpsolve.kernels.cpu.intrin import fma

from .bench_accuracy import RESTART, _geomean, _x_int, cond1, generated, suitesparse
from .bench_eft_ablation import run as mpsolve_run
from .bench_eft_ablation import suite_problems

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: The driver's stagnation rule (mpsolve._system.STAGNATION): a replacement must halve
#: the true residual
STAGNATION = 0.5
#: cond1 from which a system is in the ill-conditioned set (bench_accuracy's goals)
ILL = 1e8

_RES_DD = lookup("cpu", "residual_dd", ("float64",))   # r + rl = b - A (xh + xl), Dot2 rows
# no fastmath (an EFT must not be reassociated); not cached: the EFTs are compiled from
# mpsolve.kernels.eft, which Numba's cache of this file would not track
_JIT = dict(nogil=True, fastmath=False, cache=False)


# ------------------------------------------------------------ double-double scalars
@njit(**_JIT)
def dd_add(ah, al, bh, bl):
    """``(ah + al) + (bh + bl)`` as a normalised pair, relative error <= 3 u^2 (Joldes,
    Muller & Popescu 2017, Algorithm 6, AccurateDWPlusDW)."""
    sh, sl = two_sum(ah, bh)
    th, tl = two_sum(al, bl)
    vh, vl = fast_two_sum(sh, sl + th)
    return fast_two_sum(vh, tl + vl)


@njit(**_JIT)
def dd_mul(ah, al, bh, bl):
    """``(ah + al) (bh + bl)``, relative error <= 4 u^2 (ibid., Algorithm 12, FMA)."""
    ch, cl1 = two_prod(ah, bh)
    cl2 = fma(ah, bl, al * bh)
    return fast_two_sum(ch, cl1 + cl2)


@njit(**_JIT)
def dd_div(ah, al, bh, bl):
    """``(ah + al) / (bh + bl)``: ``q = fl(ah / bh)``, the remainder ``a - b q`` in
    double-double (it is of order ``u |a|``, so its own rounding is of order u^2), one
    correction ``rem / bh``.  Relative error of order u^2 (10 u^2 in the tests)."""
    q = ah / bh
    ph, pl = dd_mul(bh, bl, q, 0.0)
    rh, rl = dd_add(ah, al, -ph, -pl)
    return fast_two_sum(q, rh / bh)


@njit(**_JIT)
def dd_sqrt(ah, al):
    """``sqrt(ah + al)`` for ``ah + al >= 0``: one Newton correction of ``fl(sqrt(ah))``
    on the double-double remainder."""
    if not ah > 0.0:
        return 0.0, 0.0
    s = math.sqrt(ah)
    ph, pl = two_prod(s, s)
    rh, rl = dd_add(ah, al, -ph, -pl)
    return fast_two_sum(s, rh / (2.0 * s))


class DD:
    """A double-double scalar ``h + l`` (``|l| <= ulp(h) / 2``) with the arithmetic
    operators of :func:`dd_add`, :func:`dd_mul`, :func:`dd_div`; a float operand is the
    pair ``(f, 0)``.  Comparisons are those of the exact values."""

    __slots__ = ("h", "l")

    def __init__(self, h, l=0.0):
        self.h = float(h)
        self.l = float(l)

    @staticmethod
    def of(v):
        return v if isinstance(v, DD) else DD(v)

    def __add__(self, o):
        o = DD.of(o)
        return DD(*dd_add(self.h, self.l, o.h, o.l))

    __radd__ = __add__

    def __neg__(self):
        return DD(-self.h, -self.l)

    def __sub__(self, o):
        return self + (-DD.of(o))

    def __rsub__(self, o):
        return DD.of(o) + (-self)

    def __mul__(self, o):
        o = DD.of(o)
        return DD(*dd_mul(self.h, self.l, o.h, o.l))

    __rmul__ = __mul__

    def __truediv__(self, o):
        o = DD.of(o)
        return DD(*dd_div(self.h, self.l, o.h, o.l))

    def __rtruediv__(self, o):
        return DD.of(o) / self

    def __abs__(self):
        return -self if (self.h < 0 or (self.h == 0 and self.l < 0)) else self

    def __float__(self):
        return self.h + self.l

    def _cmp(self, o):
        d = self - DD.of(o)
        return d.h if d.h != 0 else d.l

    def __lt__(self, o):
        return self._cmp(o) < 0

    def __le__(self, o):
        return self._cmp(o) <= 0

    def __gt__(self, o):
        return self._cmp(o) > 0

    def __ge__(self, o):
        return self._cmp(o) >= 0

    def __repr__(self):
        return f"DD({self.h!r}, {self.l!r})"


# ------------------------------------------------------------ double-double vectors
@njit(**_JIT)
def dd_dot(xh, xl, yh, yl):
    """``(xh + xl) . (yh + yl)`` as a pair: Dot2 (Ogita, Rump & Oishi 2005, Alg. 5.3) of the
    exact products ``xh_i yh_i`` (TwoProduct), the cross terms ``xh yl + xl yh`` joining the
    FP64 error sum (``xl yl``, below u^2 |x_i y_i|, dropped).  Error <= ((2n (n + 4) + 8) u^2)
    sum |x_i y_i| (see tests/test_eft_ceiling.py)."""
    p = 0.0
    s = 0.0
    for i in range(xh.size):
        h, e = two_prod(xh[i], yh[i])
        p, q = two_sum(p, h)
        s += q + (e + fma(xh[i], yl[i], xl[i] * yh[i]))
    return two_sum(p, s)


@njit(**_JIT)
def dd_axpy_v(ah, al, xh, xl, yh, yl):
    """``y <- y + a x``, elementwise :func:`dd_mul` then :func:`dd_add`."""
    for i in range(xh.size):
        ph, pl = dd_mul(ah, al, xh[i], xl[i])
        yh[i], yl[i] = dd_add(yh[i], yl[i], ph, pl)


@njit(**_JIT)
def dd_xpay_v(xh, xl, ah, al, yh, yl):
    """``y <- x + a y`` (CG's direction update)."""
    for i in range(xh.size):
        ph, pl = dd_mul(ah, al, yh[i], yl[i])
        yh[i], yl[i] = dd_add(xh[i], xl[i], ph, pl)


@njit(**_JIT)
def dd_scal_v(ah, al, xh, xl, oh, ol):
    """``o <- a x``."""
    for i in range(xh.size):
        oh[i], ol[i] = dd_mul(ah, al, xh[i], xl[i])


@njit(**_JIT)
def dd_divd_v(xh, xl, d, oh, ol):
    """``o <- x / d`` for an FP64 vector ``d`` (Jacobi: the diagonal of A)."""
    for i in range(xh.size):
        oh[i], ol[i] = dd_div(xh[i], xl[i], d[i], 0.0)


class DV:
    """A double-double vector: the pair of FP64 arrays ``h + l``."""

    __slots__ = ("h", "l")

    def __init__(self, h, l=None):
        self.h = h
        self.l = np.zeros_like(h) if l is None else l


# ------------------------------------------------------------ the three arithmetics
def _csr(A):
    A = sp.csr_matrix(A, dtype=np.float64)
    A.sum_duplicates()
    A.sort_indices()
    return A


class F64:
    """FP64 recurrences (NumPy/SciPy)."""

    name = "fp64"
    eps = float(np.finfo(np.float64).eps)

    def __init__(self, A, b):
        self.A = _csr(A)
        self.b = np.asarray(b, np.float64)
        self.d = self.A.diagonal()

    def zeros(self):
        return np.zeros(self.b.size)

    def copy(self, x):
        return x.copy()

    def spmv(self, x):
        return self.A @ x

    def residual(self, x):
        return self.b - self.A @ x

    def psolve(self, r):
        return r / self.d                           # Jacobi: each entry divided by a_ii

    def dot(self, x, y):
        return float(np.dot(x, y))

    def nrm(self, x):
        return math.sqrt(self.dot(x, x))

    def sqrt(self, s):
        return math.sqrt(s)

    def axpy(self, a, x, y):
        y += a * x

    def xpay(self, x, a, y):
        y *= a
        y += x

    def scal(self, a, x):
        return a * x

    def scalar(self, f):
        return float(f)

    def pair(self, x):
        """``x`` as an FP64 pair ``(xh, xl)`` (its exact value), for the accurate residual."""
        return x, np.zeros_like(x)


class LD(F64):
    """``numpy.longdouble`` recurrences; SciPy's CSR SpMV in longdouble."""

    name = "ld"
    eps = float(np.finfo(np.longdouble).eps)

    def __init__(self, A, b):
        super().__init__(A, b)
        self.A = self.A.astype(np.longdouble)
        self.b = self.b.astype(np.longdouble)
        self.d = self.d.astype(np.longdouble)

    def zeros(self):
        return np.zeros(self.b.size, np.longdouble)

    def dot(self, x, y):
        return np.dot(x, y)

    def nrm(self, x):
        return np.sqrt(np.dot(x, x))

    def sqrt(self, s):
        return np.sqrt(s)

    def scalar(self, f):
        return np.longdouble(f)

    def pair(self, x):
        h = x.astype(np.float64)
        return h, (x - h).astype(np.float64)


class DDArith:
    """Double-double recurrences (module docstring)."""

    name = "dd"
    eps = 2.0 ** -104                               # 2 u of the pair format, as eps of FP64

    def __init__(self, A, b):
        self.A = _csr(A)
        self.b = np.asarray(b, np.float64)
        self.d = self.A.diagonal()
        self.zero = np.zeros(self.b.size)
        self.parts = np.array([0, self.b.size], dtype=self.A.indptr.dtype)   # serial rows

    def zeros(self):
        return DV(np.zeros(self.b.size))

    def copy(self, x):
        return DV(x.h.copy(), x.l.copy())

    def _res(self, x, b):
        r, rl = np.empty(self.b.size), np.empty(self.b.size)
        A = self.A
        _RES_DD(self.parts, A.indptr, A.indices, A.data, x.h, x.l, b, r, rl)
        return r, rl

    def spmv(self, x):
        r, rl = self._res(x, self.zero)              # 0 - A x, each row Dot2
        return DV(-r, -rl)

    def residual(self, x):
        return DV(*self._res(x, self.b))

    def psolve(self, r):
        z = DV(np.empty_like(r.h), np.empty_like(r.h))
        dd_divd_v(r.h, r.l, self.d, z.h, z.l)
        return z

    def dot(self, x, y):
        return DD(*dd_dot(x.h, x.l, y.h, y.l))

    def nrm(self, x):
        return self.sqrt(self.dot(x, x))

    def sqrt(self, s):
        return DD(*dd_sqrt(s.h, s.l))

    def axpy(self, a, x, y):
        a = DD.of(a)
        dd_axpy_v(a.h, a.l, x.h, x.l, y.h, y.l)

    def xpay(self, x, a, y):
        a = DD.of(a)
        dd_xpay_v(x.h, x.l, a.h, a.l, y.h, y.l)

    def scal(self, a, x):
        a = DD.of(a)
        o = DV(np.empty_like(x.h), np.empty_like(x.h))
        dd_scal_v(a.h, a.l, x.h, x.l, o.h, o.l)
        return o

    def scalar(self, f):
        return DD(f)

    def pair(self, x):
        return x.h, x.l


ARITHS = {"fp64": F64, "ld": LD, "dd": DDArith}


# ------------------------------------------------------------ the methods, written once
def cg_body(ar, x, r, maxiter, tol):
    """Jacobi-PCG as :func:`mpsolve.krylov.cg.cg_body`: at most ``maxiter`` steps from
    ``x`` (updated in place) and its residual ``r``.  Returns ``(steps, flag)``: 0 the
    recursive ``||r|| <= tol``, 1 out of steps, -12 ``p.Ap`` or ``r.z`` not positive."""
    z = ar.psolve(r)
    p = ar.copy(z)
    rz = ar.dot(r, z)
    if float(ar.nrm(r)) <= tol:
        return 0, 0
    for k in range(1, maxiter + 1):
        q = ar.spmv(p)                              # q = A p
        pq = ar.dot(p, q)
        if not float(pq) > 0:
            return k - 1, -12
        alpha = rz / pq
        ar.axpy(alpha, p, x)                        # x += alpha p
        ar.axpy(-alpha, q, r)                       # r -= alpha q
        if float(ar.nrm(r)) <= tol:
            return k, 0
        z = ar.psolve(r)                            # z = M r
        rz_new = ar.dot(r, z)
        if not float(rz_new) > 0:
            return k, -12
        beta = rz_new / rz
        rz = rz_new
        ar.xpay(z, beta, p)                         # p = z + beta p
    return maxiter, 1


def bicgstab_body(ar, x, r, maxiter, tol):
    """Right-preconditioned BiCGSTAB as :func:`mpsolve.krylov.bicgstab.bicgstab_body`
    (shadow residual the starting ``r``, half-step test on ``||s||``).  Flags as
    :func:`cg_body`; -10 ``rho`` or ``r0.v`` vanished, -11 ``omega`` did."""
    r0 = ar.copy(r)
    r0nrm = float(ar.nrm(r0))
    rnorm = r0nrm
    if rnorm <= tol:
        return 0, 0
    rhotol = ar.eps * ar.eps
    p = ar.zeros()
    v = ar.zeros()
    rho_old = alpha = omega = ar.scalar(1.0)
    for k in range(1, maxiter + 1):
        rho = ar.dot(r0, r)
        if abs(float(rho)) <= rhotol * r0nrm * rnorm:
            return k - 1, -10
        if k == 1:
            p = ar.copy(r)
        else:
            beta = (rho / rho_old) * (alpha / omega)
            ar.axpy(-omega, v, p)                   # p = r + beta (p - omega v)
            ar.xpay(r, beta, p)
        ph = ar.psolve(p)
        v = ar.spmv(ph)                             # v = A M p
        r0v = ar.dot(r0, v)
        if float(r0v) == 0.0:
            return k - 1, -10
        alpha = rho / r0v
        s = ar.copy(r)
        ar.axpy(-alpha, v, s)                       # s = r - alpha v
        snorm = float(ar.nrm(s))
        if snorm <= tol:
            ar.axpy(alpha, ph, x)
            _assign(r, s)
            return k, 0
        sh = ar.psolve(s)
        t = ar.spmv(sh)                             # t = A M s
        tt = ar.dot(t, t)
        if float(tt) == 0.0:
            return k - 1, -11
        omega = ar.dot(t, s) / tt
        if float(omega) == 0.0:
            return k - 1, -11
        ar.axpy(alpha, ph, x)                       # x += alpha p^ + omega s^
        ar.axpy(omega, sh, x)
        _assign(r, s)
        ar.axpy(-omega, t, r)                       # r = s - omega t
        rnorm = float(ar.nrm(r))
        if not math.isfinite(rnorm):
            return k, -14
        if rnorm <= tol:
            return k, 0
        rho_old = rho
    return maxiter, 1


def _assign(dst, src):
    if isinstance(dst, DV):
        dst.h[:] = src.h
        dst.l[:] = src.l
    else:
        dst[:] = src


def gmres_body(ar, x, r, maxiter, tol, restart=RESTART):
    """Left-Jacobi GMRES(restart) as :func:`mpsolve.krylov.gmres.gmres_body`: CGS with a
    selective second pass, Givens rotations and the back substitution in ``ar``'s
    arithmetic, the true residual after each cycle.  ``maxiter`` counts inner steps.
    Flags: 0 converged (or the inner target can tighten no further), 1 out of steps,
    -13 happy breakdown short of the tolerance."""
    eps = ar.eps
    reorth = max(1e-3, eps ** 0.25)
    rnorm = float(ar.nrm(r))
    if rnorm <= tol:
        return 0, 0
    inner = 0
    factor = 1.0
    while inner < maxiter:
        w = ar.psolve(r)
        beta = ar.nrm(w)
        ratio = rnorm / float(beta)                 # unpreconditioned per preconditioned
        V = [ar.scal(ar.scalar(1.0) / beta, w)]
        target = tol / ratio * factor
        g = [beta]
        R, cs, sn = [], [], []
        happy = False
        est = float(beta)
        for j in range(restart):
            w = ar.psolve(ar.spmv(V[j]))            # w = M A v_j
            wnorm_in = wnorm0 = float(ar.nrm(w))
            col = [ar.scalar(0.0)] * (j + 1)
            for _pass in range(2):                  # CGS, once more if it lost too much
                h = [ar.dot(v, w) for v in V]
                for hi, v in zip(h, V):
                    ar.axpy(-hi, v, w)
                col = [c + hi for c, hi in zip(col, h)]
                wn = ar.nrm(w)
                if float(wn) > reorth * wnorm0:
                    break
                wnorm0 = float(wn)
            col.append(wn)
            for i in range(j):                      # the previous rotations
                a, b_ = col[i], col[i + 1]
                col[i] = cs[i] * a + sn[i] * b_
                col[i + 1] = cs[i] * b_ - sn[i] * a
            d = ar.sqrt(col[j] * col[j] + col[j + 1] * col[j + 1])
            cs.append(col[j] / d)
            sn.append(col[j + 1] / d)
            col[j] = d
            g.append(-sn[j] * g[j])
            g[j] = cs[j] * g[j]
            R.append(col[: j + 1])
            est = abs(float(g[j + 1]))
            inner += 1
            if float(wn) <= eps * wnorm_in:
                happy = True
                break
            V.append(ar.scal(ar.scalar(1.0) / wn, w))
            if est <= target or inner >= maxiter:
                break
        k = len(R)
        y = [None] * k
        for i in range(k - 1, -1, -1):              # R y = g
            s = g[i]
            for jj in range(i + 1, k):
                s = s - R[jj][i] * y[jj]
            y[i] = s / R[i][i]
        for i in range(k):
            ar.axpy(y[i], V[i], x)                  # x += V_k y
        _assign(r, ar.residual(x))                  # r = b - A x
        rnorm = float(ar.nrm(r))
        if rnorm <= tol:
            return inner, 0
        if happy:
            return inner, -13
        if est <= target:
            if factor > eps:
                factor *= 0.25                      # ask the next cycle for more
            else:
                return inner, 0
        else:
            factor = min(1.0, 1.5 * factor)
    return inner, 1


BODIES = {"cg": cg_body, "bicgstab": bicgstab_body, "gmres": gmres_body}


def instrument(ar, method, rtol, maxiter):
    """One solve from ``x = 0`` with residual replacement (the driver's rule, the true
    residual in ``ar``'s arithmetic).  Returns ``(iterations, flag, x)``; flag 0 when the
    true residual met ``rtol ||b||``, 2 when a replacement failed to halve it."""
    body = BODIES[method]
    tol = rtol * float(np.linalg.norm(np.asarray(ar.b, np.float64)))
    x = ar.zeros()
    r = ar.residual(x)
    total = 0
    last = math.inf
    while True:
        k, flag = body(ar, x, r, maxiter - total, tol)
        total += k
        r = ar.residual(x)
        true = float(ar.nrm(r))
        if true <= tol:
            return total, 0, x
        if flag != 0 or total >= maxiter:
            return total, flag or 1, x
        if true > STAGNATION * last:
            return total, 2, x
        last = true


def accurate_residual(A, b, xh, xl):
    """``||b - A (xh + xl)|| / ||b||``, each row Dot2 (the referee of every variant)."""
    A = _csr(A)
    r, rl = np.empty(b.size), np.empty(b.size)
    _RES_DD(np.array([0, b.size], dtype=A.indptr.dtype), A.indptr, A.indices, A.data, xh,
            xl, b, r, rl)
    return float(np.linalg.norm(r) / np.linalg.norm(b))


def cg_exact_count(A, b, rtol, maxiter):
    """The iterations of Jacobi-PCG *in exact arithmetic* to ``||b - A x_k|| <= rtol ||b||``
    (``x0 = 0``), from Lanczos with full reorthogonalisation.

    PCG with ``M = D^-1`` is CG on ``C = D^-1/2 A D^-1/2``, ``c = D^-1/2 b``; its iterate
    ``k`` is the Galerkin solution on the Krylov space ``K_k(C, c)``, whose residual is
    ``r^_k = -beta_k (e_k^T y_k) v_{k+1}`` (``T_k y_k = ||c|| e_1``, the Lanczos
    tridiagonal), and the unpreconditioned residual is ``D^1/2 r^_k``.  With every new
    Lanczos vector orthogonalised against all previous ones (two CGS passes) the basis
    stays orthonormal to FP64's rounding, which is the Lanczos process of exact arithmetic
    on a matrix within ``u ||C||`` of ``C`` (Paige): no lost orthogonality, no delay.
    Returns ``(k, flag)``: flag 0 met (or the Krylov space exhausted, ``beta_k`` at
    rounding level: ``x_k`` is then the solution), 1 ``maxiter`` reached."""
    from scipy.linalg import solve_banded

    A = _csr(A)
    if (A - A.T).count_nonzero():
        raise ValueError("cg_exact_count: A must be exactly symmetric (Lanczos' three-term "
                         "recurrence is the exact CG of a symmetric A only)")
    n = A.shape[0]
    s = 1.0 / np.sqrt(A.diagonal())
    sq = np.sqrt(A.diagonal())
    c = s * b
    beta0 = float(np.linalg.norm(c))
    tol = rtol * float(np.linalg.norm(b))
    m = min(maxiter, n) + 1
    V = np.zeros((min(m, 128), n))                              # grown as needed
    V[0] = c / beta0
    alpha, beta = [], []
    with threadpool_limits(1):
        for k in range(1, m):
            if k == V.shape[0]:
                V = np.concatenate([V, np.zeros((min(k, m - k), n))])
            w = s * (A @ (s * V[k - 1]))
            alpha.append(float(V[k - 1] @ w))
            for _ in range(2):                                  # full reorthogonalisation
                w -= V[:k].T @ (V[:k] @ w)
            beta.append(float(np.linalg.norm(w)))
            ab = np.zeros((3, k))                               # T_k, banded
            ab[0, 1:] = beta[:k - 1]
            ab[1] = alpha
            ab[2, :-1] = beta[:k - 1]
            e1 = np.zeros(k)
            e1[0] = beta0
            y = solve_banded((1, 1), ab, e1)
            if beta[-1] <= 1e-14 * max(abs(a) for a in alpha):
                return k, 0                                     # exhausted: x_k is exact
            V[k] = w / beta[-1]
            if beta[-1] * abs(y[-1]) * float(np.linalg.norm(sq * V[k])) <= tol:
                return k, 0
    return m - 1, 1


# ------------------------------------------------------------ work per iteration
#: Operations (a FMA counted as 2 flops) per element of each kernel: FP64 and double-double.
#: two_sum 6, fast_two_sum 3, two_prod 3 (mul + FMA), dd_add 20, dd_mul 10 (two_prod, mul,
#: FMA, add, fast_two_sum), dd_div by a double 35 (div, dd_mul, dd_add, div, fast_two_sum).
FLOPS = {  # kernel: (fp64, dd)
    "spmv (per nonzero)": (2, 22),      # dd: 2 x (two_prod 3 + two_sum 6 + 2 adds)
    "dot": (2, 15),                     # dd: two_prod 3, two_sum 6, FMA 2, mul, 3 adds
    "axpy / xpay": (2, 30),             # dd: dd_mul + dd_add
    "jacobi (divide by a_ii)": (1, 35),
}
#: Bytes moved per element (FP64 8 bytes; a dd vector 16; CSR: 8 value + 4 index per
#: nonzero, the gathered x entry counted once a nonzero)
BYTES = {
    "spmv (per nonzero)": (8 + 4 + 8, 8 + 4 + 16),
    "dot": (16, 32),
    "axpy / xpay": (24, 48),
    "jacobi (divide by a_ii)": (24, 40),
}
#: Kernel calls per iteration of each method (Jacobi): spmv, dot (norms counted as dots),
#: axpy-like updates (copies not counted), Jacobi applies.  GMRES: the step j of a cycle,
#: averaged over j = 0..29 with one CGS pass: j + 1 dots and axpys, the norm, the scaling
#: of v_{j+1} (counted as an axpy); the end of a cycle (x update, residual) not counted
CALLS = {
    "cg": {"spmv (per nonzero)": 1, "dot": 3, "axpy / xpay": 3, "jacobi (divide by a_ii)": 1},
    "bicgstab": {"spmv (per nonzero)": 2, "dot": 6, "axpy / xpay": 6,
                 "jacobi (divide by a_ii)": 2},
    "gmres": {"spmv (per nonzero)": 1, "dot": 16.5, "axpy / xpay": 16.5,
              "jacobi (divide by a_ii)": 1},
}


def work(method, n, nnz):
    """(flops, bytes) per iteration of ``method`` for FP64 and dd: two pairs."""
    out = []
    for k in (0, 1):
        f = b = 0.0
        for kern, c in CALLS[method].items():
            m = nnz if kern.startswith("spmv") else n
            f += c * m * FLOPS[kern][k]
            b += c * m * BYTES[kern][k]
        out.append((f, b))
    return out


# ------------------------------------------------------------ runs
def measure(name, A, method, b, rtol, cap, ill=None, double=None):
    """Every variant on one system: iterations and flag of each, and of the instrument's
    its seconds and the accurate true residual of its answer.  ``double``: mpsolve's
    ``double`` result where the caller has it already."""
    n = A.shape[0]
    out = dict(problem=name, method=method, n=n, nnz=A.nnz, ill=ill)
    for pol in ("double", "eft"):
        res = double if pol == "double" and double is not None else \
            mpsolve_run(A, b, method, pol, rtol)
        out[pol] = (res.iterations, res.info)
    maxiter = int(cap * out["double"][0]) + 100
    for key, cls in ARITHS.items():
        ar = cls(A, b)
        t = time.perf_counter()
        with threadpool_limits(1):      # BLAS threads spinning on a busy machine: 20x slower
            it, flag, x = instrument(ar, method, rtol, maxiter)
        dt = time.perf_counter() - t
        out[key] = (it, flag, dt, accurate_residual(A, b, *ar.pair(x)))
    out["exact"] = None
    if method == "cg":
        # a matrix symmetric to rounding only (a generated one): its symmetric part's count
        skew = abs(A - A.T)
        if skew.nnz == 0 or skew.max() <= 1e-12 * abs(A).max():
            out["exact"] = cg_exact_count(_csr((A + A.T) * 0.5) if skew.nnz else A, b, rtol,
                                          maxiter)
    return out


def ablation_systems(quick):
    """bench_accuracy's systems (its and the ablation's problem list), ``b = A x*``."""
    for name, A, method, _pc in list(generated(quick)) + list(suitesparse(quick)):
        A = _csr(A)
        yield name, A, method, A @ _x_int(A.shape[0])


def suite_systems(quick, max_work, max_n, rtol):
    """The ablation's suite set (``b = A 1``), kept where ``A`` has at most ``max_n``
    rows, ``double`` solves it and its iterations times ``nnz`` is at most ``max_work``."""
    for name, A, method in suite_problems(quick):
        if A.shape[0] > max_n:
            continue
        A = _csr(A)
        b = A @ np.ones(A.shape[0])
        d = mpsolve_run(A, b, method, "double", rtol)
        if d.info != 0 or d.iterations * A.nnz > max_work:
            continue
        yield name, A, method, b, d


# ------------------------------------------------------------ report
def _it(v):
    return f"{v[0]}{'' if v[1] == 0 else '*'}"


def _rt(r, key, base="fp64"):
    """``key``'s iterations over ``base``'s, formatted (blank where ``key`` was not run)."""
    return f"{r[key][0] / max(r[base][0], 1):.3f}" if r[key] else ""


def _ratios(rows, key, base="fp64"):
    return [r[key][0] / max(r[base][0], 1) for r in rows]


def table(rows):
    L = ["| problem | n | method | cond1 | double | eft | eft/double | fp64 | ld | dd | "
         "exact | ld/fp64 | dd/fp64 | exact/fp64 | dd/double | true res. fp64, dd | "
         "s fp64, ld, dd |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
         "| --- | --- | --- |"]
    for r in rows:
        c = "" if r["ill"] is None else f"{r['ill']:.1e}"
        L.append(f"| {r['problem']} | {r['n']} | {r['method']} | {c} | {_it(r['double'])} | "
                 f"{_it(r['eft'])} | {r['eft'][0] / max(r['double'][0], 1):.3f} | "
                 f"{_it(r['fp64'])} | {_it(r['ld'])} | {_it(r['dd'])} | "
                 f"{_it(r['exact']) if r['exact'] else ''} | "
                 f"{_rt(r, 'ld')} | {_rt(r, 'dd')} | {_rt(r, 'exact')} | "
                 f"{r['dd'][0] / max(r['double'][0], 1):.3f} | "
                 f"{r['fp64'][3]:.1e}, {r['dd'][3]:.1e} | "
                 f"{r['fp64'][2]:.2f}, {r['ld'][2]:.2f}, {r['dd'][2]:.2f} |")
    return L


def _g(rows, key, base):
    return _geomean([r[key][0] / max(r[base][0], 1) for r in rows if r[key]])


def summary(rows, what):
    if not rows:
        return []
    cg = [r for r in rows if r["exact"]]
    ex = (f"; exact/fp64 {_g(cg, 'exact', 'fp64'):.3f}, **exact/`double` "
          f"{_g(cg, 'exact', 'double'):.3f}** (CG, {len(cg)} systems)") if cg else ""
    below = [r for r in rows if r["dd"][0] <= 0.95 * r["fp64"][0]]
    return [f"- {what} ({len(rows)} systems): geomean ld/fp64 {_g(rows, 'ld', 'fp64'):.3f}, "
            f"**dd/fp64 {_g(rows, 'dd', 'fp64'):.3f}**, dd/`double` "
            f"{_g(rows, 'dd', 'double'):.3f}{ex}; `eft`/`double` "
            f"{_g(rows, 'eft', 'double'):.3f}; the instrument's fp64/`double` "
            f"{_g(rows, 'fp64', 'double'):.3f}.  dd <= 0.95 x fp64 on {len(below)}"
            + (": " + ", ".join(f"{r['problem']} {r['method']} ({r['dd'][0]}/{r['fp64'][0]})"
                                for r in below) if below else "") + "."]


def conclusion(abl, suite, rtol, rtol_suite):
    """The verdict on issue 15's goal, from the measured counts."""
    ill = [r for r in abl if r["ill"] is not None and r["ill"] >= ILL]
    g = {k: _g(ill, k, "fp64") for k in ("ld", "dd", "exact")}
    gd = {k: _g(ill, k, "double") for k in ("dd", "exact")}
    same = [r for r in ill if r["dd"][0] == r["fp64"][0]]
    gap = sum(r["fp64"][0] - r["exact"][0] for r in ill)
    closed = sum(r["fp64"][0] - r["dd"][0] for r in ill)
    verdict = "reach" if gd["dd"] <= 0.95 else "do not reach"
    L = ["## Conclusion", "",
         f"**Double-double recurrences {verdict} the goal.**  On the ill-conditioned set "
         f"({len(ill)} systems, all CG) the whole recurrence in longdouble takes "
         f"{g['ld']:.3f}x the iterations of the same algorithm in FP64, in double-double "
         f"{g['dd']:.3f}x (geomean; {gd['dd']:.3f}x mpsolve's `double`): every vector, "
         f"scalar, SpMV, dot and update at about 106 bits saves {100 * (1 - gd['dd']):.1f}% "
         f"of `double`'s iterations where the goal asks for 5%; on {len(same)} of the "
         f"{len(ill)} FP64 and double-double give the same count to the iteration.  The "
         "`eft` preset computes a part of the recurrence (reductions; x and the residual "
         "outside the Krylov loop) at double-double accuracy and the rest in FP64, so no "
         "change of that kind at FP64 cost -- compensated reductions, double-double x or "
         "residual, compensated updates -- is more accurate than `dd`, and `dd` is short "
         "of the goal.", "",
         f"The count of exact arithmetic (`exact`: CG as Lanczos with full "
         f"reorthogonalisation, `cg_exact_count`) is {g['exact']:.3f}x FP64's and "
         f"{gd['exact']:.3f}x `double`'s on the set -- "
         + ", ".join(f"{r['problem']} {r['exact'][0]} against {r['fp64'][0]}"
                     for r in ill if r["exact"][0] < 0.97 * r["fp64"][0])
         + f"; double-double closes {closed} of the {gap} iterations between FP64 and "
         "exact arithmetic on the set.  That gap is CG's loss of orthogonality (the "
         "delay of finite-precision CG: converged Ritz values reappear, Greenbaum & "
         "Strakos 1992), and extra digits only postpone it.  "
         + (f"So only exact arithmetic meets the goal ({gd['exact']:.3f}); " if
            gd["exact"] <= 0.95 else
            f"Not even exact arithmetic meets the goal ({gd['exact']:.3f}); ")
         + "what gets closer is keeping the Krylov basis "
         "orthogonal (reorthogonalisation against the previous vectors: 4 k n flops a "
         "pass and k stored vectors at step k -- not an FP64-cost change) or "
         "fewer exact-arithmetic iterations (a better preconditioner), not the "
         "arithmetic of the recurrences."]
    big = sorted(abl, key=lambda r: r["dd"][0] / max(r["double"][0], 1))[:2]
    L += ["", f"Over all {len(abl)} systems of the set (the geomean `accuracy.md`'s goal line "
          f"takes) dd/fp64 is {_g(abl, 'dd', 'fp64'):.3f} and dd/`double` "
          f"{_g(abl, 'dd', 'double'):.3f}, carried by "
          + " and ".join(f"{r['problem']} {r['method']} (dd/`double` "
                         f"{r['dd'][0] / max(r['double'][0], 1):.2f}, the instrument's "
                         f"FP64 {r['fp64'][0] / max(r['double'][0], 1):.2f})" for r in big)
          + " (the instrument's FP64 against `double`: the same precision in another "
          "rounding order)."]
    rows = [(r, rtol) for r in abl] + [(r, rtol_suite) for r in suite]
    low = [(r, t) for r, t in rows if r["method"] != "bicgstab" and r["dd"][1] == 0
           and r["dd"][0] <= 0.95 * r["fp64"][0]]
    if low:
        parts, pay = [], []
        for r, t in low:
            (f0, b0), (f1, b1) = work(r["method"], r["n"], r["nnz"])
            cost = r["dd"][0] / r["fp64"][0] * b1 / b0
            parts.append(f"{r['problem']} {r['method']} at rtol {t:g}: {r['dd'][0]}/"
                         f"{r['fp64'][0]} ({r['dd'][0] / r['fp64'][0]:.2f}x; {f1 / f0:.0f}x "
                         f"flops and {b1 / b0:.2f}x bytes an iteration, {cost:.2f}x FP64's "
                         "bytes to the tolerance)")
            if cost < 1:
                pay.append(f"{r['problem']} {r['method']}")
        L += ["", "Where double-double recurrences do save 5% or more of FP64's CG or "
              f"GMRES iterations ({len(low)} of {len(rows)} systems): " + "; ".join(parts)
              + ".  A double-double iteration costs about 12x FP64's flops and 1.5-1.9x "
              "its bytes (table below: every vector a pair, the matrix read once), so even "
              "an implementation that stays memory-bound needs a saving of about 40% to "
              "pay; counted in bytes to the tolerance it pays on "
              + (", ".join(pay) if pay else "none of them") + "."]
    bi = [r for r, _ in rows if r["method"] == "bicgstab"]
    if bi:
        same_prec = [r["fp64"][0] / max(r["double"][0], 1) for r in bi]
        L += ["", f"BiCGSTAB's counts move with rounding *order* as much as with "
              f"precision: the instrument's FP64 BiCGSTAB (same algorithm and precision as "
              f"mpsolve's `double`, other summation orders) takes {min(same_prec):.2f}x.."
              f"{max(same_prec):.2f}x `double`'s iterations on these {len(bi)} systems "
              f"(dd/fp64 {min(_ratios(bi, 'dd')):.2f}x..{max(_ratios(bi, 'dd')):.2f}x): "
              "the `eft` preset's BiCGSTAB gains and losses in `eft_ablation.md` are this "
              "sensitivity, not a systematic effect of precision."]
    return L


def work_table(rows):
    L = ["| problem | method | n | nnz | flops/it fp64 | flops/it dd | x | bytes/it fp64 | "
         "bytes/it dd | x |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        (f0, b0), (f1, b1) = work(r["method"], r["n"], r["nnz"])
        L.append(f"| {r['problem']} | {r['method']} | {r['n']} | {r['nnz']} | {f0:.3g} | "
                 f"{f1:.3g} | {f1 / f0:.1f} | {b0:.3g} | {b1:.3g} | {b1 / b0:.2f} |")
    return L


def report(abl, suite, args, wall):
    ill = [r for r in abl if r["ill"] is not None and r["ill"] >= ILL]
    L = ["# The ceiling of issue 15's iteration goal: iterations with the whole recurrence "
         "in FP64, longdouble and double-double", "",
         f"`python -m mpsolve.bench.bench_eft_ceiling` -- {platform.machine()}, Python "
         f"{platform.python_version()}, {time.strftime('%Y-%m-%d')} ({wall:.0f} s); "
         f"longdouble: {np.finfo(np.longdouble).nmant + 1}-bit significand.  Iterations are "
         "deterministic; the seconds are the unoptimised instrument's (indicative).", "",
         "`double`, `eft`: mpsolve's presets (Jacobi, method fixed).  `fp64`, `ld`, `dd`: "
         "the instrument of this script (module docstring) with every vector, scalar and "
         "kernel of the recurrence in FP64, `numpy.longdouble`, double-double.  Ratios "
         "`ld/fp64` and `dd/fp64` compare one algorithm in three precisions; `dd/double` "
         "sets the double-double count against mpsolve's.  `true res.`: "
         "`||b - A x|| / ||b||` of the returned x, each row Dot2.  `exact` (CG only): the "
         "count of exact arithmetic, from Lanczos with full reorthogonalisation "
         "(`cg_exact_count`; of `(A + A^T) / 2` for a matrix symmetric only to rounding).  "
         "`*`: not converged "
         f"within {args.cap} x `double`'s iterations + 100 (or a breakdown/stagnation).", "",
         f"## The ablation/accuracy systems at rtol = {args.rtol:g} (b = A x*, integer x*)",
         "", *table(abl), "",
         *summary(ill, f"ill-conditioned set (cond1 >= {ILL:g})"),
         *summary(abl, "all systems of the set"), ""]
    if suite:
        L += [f"## The suite set at rtol = {args.rtol_suite:g} (b = A 1)", "",
              f"The ablation's suite systems that `double` solves with at most "
              f"{args.suite_max_n} rows and `double`'s iterations x nnz <= "
              f"{args.suite_max_work:g} (the time budget).", "", *table(suite), "",
              *summary(suite, "suite set"),
              *summary([r for r in suite if r["method"] == "cg"], "suite, CG"),
              *summary([r for r in suite if r["method"] == "gmres"], "suite, GMRES(30)"),
              *summary([r for r in suite if r["method"] == "bicgstab"], "suite, BiCGSTAB"),
              ""]
    L += [*conclusion(abl, suite, args.rtol, args.rtol_suite), ""]
    L += ["## Work per iteration of double-double recurrences", "",
          "Counted, not timed (constants `FLOPS`, `BYTES`, `CALLS` of this script: flops of "
          "the kernels as written here, FMA = 2; bytes of the vectors and the CSR matrix "
          "streamed once per kernel; GMRES averaged over a 30-step cycle with one CGS "
          "pass).", "", *work_table(abl), ""]
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small problems, few matrices")
    ap.add_argument("--rtol", type=float, default=1e-10)
    ap.add_argument("--rtol-suite", type=float, default=1e-8)
    ap.add_argument("--no-suite", action="store_true")
    ap.add_argument("--cap", type=float, default=3.0,
                    help="instrument runs stop at cap x double's iterations + 100")
    ap.add_argument("--suite-max-work", type=float, default=3e8,
                    help="suite systems with double's iterations x nnz above this are left out")
    ap.add_argument("--suite-max-n", type=int, default=30000,
                    help="suite systems with more rows are left out")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "eft_ceiling.md"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()

    def log(r, t0):
        print(f"{time.perf_counter() - t0:7.1f} s", r, flush=True)

    abl = []
    for name, A, method, b in ablation_systems(args.quick):
        abl.append(measure(name, A, method, b, args.rtol, args.cap, cond1(A)))
        log(abl[-1], t0)
    suite = []
    if not args.no_suite:
        for name, A, method, b, d in suite_systems(args.quick, args.suite_max_work,
                                                   args.suite_max_n, args.rtol_suite):
            suite.append(measure(name, A, method, b, args.rtol_suite, args.cap, double=d))
            log(suite[-1], t0)
    text = report(abl, suite, args, time.perf_counter() - t0)
    pathlib.Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
