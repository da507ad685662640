"""Plain NumPy / exact-arithmetic oracles for the kernels (used by the tests)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

__all__ = ["spmv", "residual", "dot", "nrm2", "exact_sum", "exact_dot", "two_prod_exact",
           "fsum_dot", "fsum_sum", "gamma", "exact_cdot", "fsum_cdot"]


def spmv(indptr, indices, data, x, out_dtype=np.float64):
    """``A x`` row by row in FP64 (values and ``x`` cast to FP64 first, so FP32
    products are exact; SciPy's CSR product sums each row in order)."""
    n = indptr.size - 1
    A = sp.csr_matrix((np.asarray(data, dtype=np.float64), indices, indptr),
                      shape=(n, x.size))
    y = A @ np.asarray(x, dtype=np.float64)
    return np.asarray(y, dtype=np.float64).astype(out_dtype)


def residual(indptr, indices, data, x, b):
    return b.astype(np.float64) - spmv(indptr, indices, data, x)


def dot(x, y):
    return float(np.dot(x.astype(np.float64), y.astype(np.float64)))


def nrm2(x):
    return float(np.linalg.norm(x.astype(np.float64)))


# --- exact oracles for the compensated kernels (tests of kernels/eft.py) ------------
#
# Fraction arithmetic is exact for every finite float: these are the ground
# truth for ill-conditioned sums and dots, where allclose on easy data proves
# nothing.  They are slow (pure Python); fsum_dot is the fast exact-then-rounded one.

def exact_sum(x):
    """``sum(x)`` exactly, as a :class:`fractions.Fraction` (finite inputs)."""
    return sum((Fraction(float(v)) for v in np.asarray(x).ravel()), Fraction(0))


def exact_dot(x, y):
    """``x . y`` exactly, as a :class:`fractions.Fraction` (finite inputs)."""
    x = np.asarray(x).ravel()
    y = np.asarray(y).ravel()
    return sum((Fraction(float(a)) * Fraction(float(b)) for a, b in zip(x, y)),
               Fraction(0))


def _split(a):
    # Veltkamp: hi + lo == a, halves of <= 26 bits (NumPy never contracts to FMA)
    c = 134217729.0 * a                 # (2^27 + 1) a
    hi = c - (c - a)
    return hi, a - hi


def two_prod_exact(x, y):
    """Dekker's TwoProduct on float64 arrays: ``p + e == x * y`` exactly.

    Valid while no product overflows, ``|x|, |y| < 2^996`` and no error
    term underflows (``|x y| >= 2^-969``); :func:`fsum_dot` checks this.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    p = x * y                                                   # p = fl(x y)
    xh, xl = _split(x)
    yh, yl = _split(y)
    e = xl * yl - (((p - xh * yh) - xl * yh) - xh * yl)         # p + e == x y
    return p, e


def fsum_dot(x, y):
    """``x . y`` correctly rounded to float64: ``math.fsum`` of the exact
    products ``p_i + e_i`` (Dekker splitting).  FP32 inputs: their products
    are exact in FP64, so the split is not needed.

    Falls back to :func:`exact_dot` when the splitting could be inexact
    (huge, tiny or non-finite values).
    """
    x = np.asarray(x).ravel()
    y = np.asarray(y).ravel()
    if x.dtype == np.float32 and y.dtype == np.float32:
        return math.fsum((x.astype(np.float64) * y.astype(np.float64)).tolist())
    xd = x.astype(np.float64)
    yd = y.astype(np.float64)
    if not (np.isfinite(xd).all() and np.isfinite(yd).all()):
        with np.errstate(all="ignore"):             # NaN/inf inputs: IEEE's NaN or inf
            return float(np.dot(xd, yd))
    ax, ay = np.abs(xd), np.abs(yd)
    with np.errstate(over="ignore"):                # an inf here picks the exact path
        prod = ax * ay
    nz = prod != 0
    safe = (np.all(np.isfinite(prod)) and (ax.max(initial=0) < 2.0**996)
            and (ay.max(initial=0) < 2.0**996)
            and np.all(prod[nz] >= 2.0**-969))
    if not safe:
        q = exact_dot(x, y)
        try:
            return float(q)
        except OverflowError:                       # beyond FP64's range: rounds to inf
            return math.inf if q > 0 else -math.inf
    p, e = two_prod_exact(xd, yd)
    return math.fsum(np.concatenate([p, e]).tolist())


def fsum_sum(x):
    """``sum(x)`` correctly rounded to float64 (``math.fsum``)."""
    return math.fsum(np.asarray(x, dtype=np.float64).ravel().tolist())


def gamma(n, u):
    """Higham's ``gamma_n = n u / (1 - n u)`` (``inf`` when ``n u >= 1``)."""
    nu = n * u
    return nu / (1.0 - nu) if nu < 1 else math.inf


# =====================================================================================
# The ``reference`` device: every op of :data:`mpsolve.kernels.primitives.CONTRACT` in
# plain NumPy, registered so that the solvers and preconditioners run on it unchanged
# (``device="reference"``).  Sums in FP64 where the op says so, otherwise in the
# vectors' dtype; compensated reductions correctly rounded (``math.fsum`` of exact
# products), which is within Dot2's bound.  Written for clarity, not speed.
# =====================================================================================
from .registry import register as _register  # noqa: E402

_F = ("float32", "float64")
_C = ("complex64", "complex128")
_VEC = [(d,) for d in _F]
_CVEC = [(d,) for d in _C]
_ALLVEC = _VEC + _CVEC
_MAT = [(v, x, y) for v in _F for x in _F for y in _F]
_CMAT = [(v, x, y) for v in _C for x in _C for y in _C]


def _t(x):
    return x.dtype.type


# --- reductions ------------------------------------------------------------------------
@_register("reference", "dot", _VEC, mode="native")
def ref_dot(x, y):
    """``x . y`` in the vectors' dtype."""
    return float(np.dot(x, y))


@_register("reference", "dot", _VEC, mode="compensated")
def ref_dot_compensated(x, y):
    """``x . y`` correctly rounded to FP64, then to the vectors' dtype."""
    return float(_t(x)(fsum_dot(x, y)))


@_register("reference", "nrm2", _VEC, mode="native")
def ref_nrm2(x):
    """``sqrt(x . x)`` in the vectors' dtype."""
    return float(np.sqrt(_t(x)(np.dot(x, x))))


@_register("reference", "nrm2", _VEC, mode="compensated")
def ref_nrm2_compensated(x):
    return float(_t(x)(math.sqrt(fsum_dot(x, x))))


@_register("reference", "sum", _VEC, mode="native")
def ref_sum(x):
    return float(np.sum(x))


@_register("reference", "sum", _VEC, mode="compensated")
def ref_sum_compensated(x):
    return float(_t(x)(fsum_sum(x)))


@_register("reference", "mdot", _VEC, mode="native")
def ref_mdot(V, k, w, out):
    """``out[i] = V[i] . w`` for ``i < k``."""
    out[:k] = V[:k] @ w


@_register("reference", "mdot", _VEC, mode="compensated")
def ref_mdot_compensated(V, k, w, out):
    for i in range(k):
        out[i] = ref_dot_compensated(V[i], w)


@_register("reference", "axpy2_nrm2", _VEC, mode="native")
def ref_axpy2_nrm2(a, x, y, b, u, v):
    ref_axpy2(a, x, y, b, u, v)
    return ref_nrm2(v)


# --- complex reductions: x . y is the conjugated x^H y (NumPy's vdot) ---------------------
def _rview(x):
    return x.view(x.real.dtype)        # the 2n interleaved real parts (no copy)


def exact_cdot(x, y):
    """``x^H y`` exactly: a pair of :class:`fractions.Fraction` (real, imaginary)."""
    x = np.asarray(x).ravel()
    y = np.asarray(y).ravel()
    xr, xi, yr, yi = x.real, x.imag, y.real, y.imag
    return (exact_dot(xr, yr) + exact_dot(xi, yi), exact_dot(xr, yi) - exact_dot(xi, yr))


def fsum_cdot(x, y):
    """``x^H y`` with each part correctly rounded to FP64 (:func:`fsum_dot` of the parts)."""
    xr, xi, yr, yi = x.real, x.imag, y.real, y.imag
    re = fsum_dot(np.concatenate([xr, xi]), np.concatenate([yr, yi]))
    im = fsum_dot(np.concatenate([xr, -xi]), np.concatenate([yi, yr]))
    return complex(re, im)


@_register("reference", "dot", _CVEC, mode="native")
def ref_cdot(x, y):
    """``x^H y`` in the vectors' precision."""
    return complex(np.vdot(x, y))


@_register("reference", "dot", _CVEC, mode="compensated")
def ref_cdot_compensated(x, y):
    """``x^H y``, each part correctly rounded to FP64, then to the vectors' precision."""
    z = fsum_cdot(x, y)
    t = _t(_rview(x))
    return complex(float(t(z.real)), float(t(z.imag)))


@_register("reference", "nrm2", _CVEC, mode="native")
def ref_cnrm2(x):
    return ref_nrm2(_rview(x))


@_register("reference", "nrm2", _CVEC, mode="compensated")
def ref_cnrm2_compensated(x):
    return ref_nrm2_compensated(_rview(x))


@_register("reference", "mdot", _CVEC, mode="native")
def ref_cmdot(V, k, w, out):
    """``out[i] = V[i]^H w`` for ``i < k``."""
    out[:k] = V[:k].conj() @ w


@_register("reference", "mdot", _CVEC, mode="compensated")
def ref_cmdot_compensated(V, k, w, out):
    for i in range(k):
        out[i] = ref_cdot_compensated(V[i], w)


@_register("reference", "axpy2_nrm2", _CVEC, mode="native")
def ref_caxpy2_nrm2(a, x, y, b, u, v):
    ref_axpy2(a, x, y, b, u, v)
    return ref_cnrm2(v)


# --- updates -----------------------------------------------------------------------------
@_register("reference", "axpy", _ALLVEC)
def ref_axpy(a, x, y):
    y += _t(x)(a) * x


@_register("reference", "xpay", _ALLVEC)
def ref_xpay(x, a, y):
    y[:] = x + _t(x)(a) * y


@_register("reference", "axpby", _ALLVEC)
def ref_axpby(a, x, b, y):
    y[:] = _t(x)(a) * x + _t(x)(b) * y


@_register("reference", "waxpy", _ALLVEC)
def ref_waxpy(a, x, y, w):
    w[:] = y + _t(x)(a) * x


@_register("reference", "axpy2", _ALLVEC)
def ref_axpy2(a, x, y, b, u, v):
    y += _t(x)(a) * x
    v += _t(x)(b) * u


@_register("reference", "bicg_dir", _ALLVEC)
def ref_bicg_dir(r, beta, omega, v, p):
    t = _t(r)
    p[:] = r + t(beta) * (p - t(omega) * v)


@_register("reference", "scal", _ALLVEC)
def ref_scal(a, x):
    x *= _t(x)(a)


@_register("reference", "copy", [(a, b) for f in (_F, _C) for a in f for b in f])
def ref_copy(x, out):
    out[:] = x


@_register("reference", "lincomb", _ALLVEC)
def ref_lincomb(V, y, k, out):
    out[:] = np.asarray(y[:k], dtype=V.dtype) @ V[:k]


@_register("reference", "maxpy", _ALLVEC)
def ref_maxpy(V, k, h, w):
    w -= np.asarray(h[:k], dtype=w.dtype) @ V[:k]


# --- a compressed basis (CB-GMRES): V in FP32, the working vectors in FP64 -------------
_CB = [("float32", "float64")]


@_register("reference", "cb_mdot", _CB, mode="native")
def ref_cb_mdot(V, k, w, out):
    """``out[i] = V[i] . w`` in FP64, the FP32 rows widened exactly."""
    out[:k] = V[:k].astype(np.float64) @ w


@_register("reference", "cb_mdot", _CB, mode="compensated")
def ref_cb_mdot_compensated(V, k, w, out):
    for i in range(k):
        out[i] = fsum_dot(V[i].astype(np.float64), w)     # correctly rounded


@_register("reference", "cb_maxpy", _CB)
def ref_cb_maxpy(V, k, h, w):
    w -= np.asarray(h[:k], dtype=np.float64) @ V[:k].astype(np.float64)


@_register("reference", "cb_lincomb", _CB)
def ref_cb_lincomb(V, y, k, out):
    out[:] = np.asarray(y[:k], dtype=np.float64) @ V[:k].astype(np.float64)


@_register("reference", "cb_mdot_nrm2", _CB, mode="native")
def ref_cb_mdot_nrm2(V, k, w, out):
    ref_cb_mdot(V, k, w, out)
    return float(np.sqrt(np.dot(w, w)))


@_register("reference", "cb_maxpy_nrm2", _CB, mode="native")
def ref_cb_maxpy_nrm2(V, k, h, w):
    ref_cb_maxpy(V, k, h, w)
    return float(np.sqrt(np.dot(w, w)))


@_register("reference", "cb_store", [("float64", "float32")])
def ref_cb_store(a, x, out):
    out[:] = (np.float64(a) * x).astype(np.float32)   # scaled in FP64, rounded once


@_register("reference", "dmul", _MAT + _CMAT)
def ref_dmul(d, x, out):
    out[:] = d * x                     # NumPy promotes a mixed pair to FP64


# --- sparse matrices (no launch plan: ``plan`` is None) -----------------------------------
def _csr(indptr, indices, data, ncols, dtype):
    return sp.csr_matrix((np.asarray(data, dtype=dtype), indices, indptr),
                         shape=(indptr.size - 1, ncols))


def _acc(mode, dtype=np.float64):
    if np.dtype(dtype).kind == "c":
        return np.complex128 if mode == "acc64" else np.complex64
    return np.float64 if mode == "acc64" else np.float32


def _ref_spmv(mode):
    def spmv(plan, indptr, indices, data, x, y):
        """``y = A x``, products and row sums in the accumulator's precision."""
        acc = _acc(mode, y.dtype)
        y[:] = _csr(indptr, indices, data, x.size, acc) @ x.astype(acc)
    return spmv


_register("reference", "spmv", _MAT + _CMAT, mode="acc64")(_ref_spmv("acc64"))
_register("reference", "spmv", _MAT + _CMAT, mode="acc32")(_ref_spmv("acc32"))


@_register("reference", "spmv_dot", [(v, d, d) for v in _F for d in _F], mode="acc64")
def ref_spmv_dot(plan, indptr, indices, data, x, y):
    """``y = A x`` (FP64 row sums), then ``x . y`` in ``y``'s dtype."""
    _ref_spmv("acc64")(plan, indptr, indices, data, x, y)
    return float(np.dot(x, y))


@_register("reference", "spmv_dot", [(v, d, d) for v in _C for d in _C], mode="acc64")
def ref_cspmv_dot(plan, indptr, indices, data, x, y):
    """``y = A x`` (complex128 row sums), then ``x^H y`` in ``y``'s precision."""
    _ref_spmv("acc64")(plan, indptr, indices, data, x, y)
    return complex(np.vdot(x, y))


@_register("reference", "residual",
           [(v, d, d, d) for f in (_F, _C) for v in f for d in f], mode="acc64")
def ref_residual(plan, indptr, indices, data, x, b, r):
    """``r = b - A x``, FP64 (complex128) row sums, rounded once."""
    acc = _acc("acc64", r.dtype)
    r[:] = b.astype(acc) - _csr(indptr, indices, data, x.size, acc) @ x.astype(acc)


@_register("reference", "residual_scale",
           [(v, d, d) for f in (_F, _C) for v in f for d in f], mode="acc64")
def ref_residual_scale(plan, indptr, indices, data, x, b):
    """``sum_i (|b_i| + (|A| |x|)_i)^2`` in FP64: the cpu kernel's sum, by NumPy."""
    wide = _acc("acc64", data.dtype)                  # moduli in FP64, as the cpu kernel
    absA = _csr(indptr, indices, np.abs(data.astype(wide)), x.size, np.float64)
    v = np.abs(b.astype(wide)) + absA @ np.abs(x.astype(wide))
    with np.errstate(over="ignore"):
        return float(np.dot(v, v))


@_register("reference", "residual_norms",
           [(v, d, d, d) for f in (_F, _C) for v in f for d in f], mode="acc64")
def ref_residual_norms(plan, indptr, indices, data, x, b, r):
    """``ref_residual`` and ``(||r||^2, ref_residual_scale)`` in FP64, by NumPy."""
    ref_residual(plan, indptr, indices, data, x, b, r)
    rw = r.astype(_acc("acc64", r.dtype))
    with np.errstate(over="ignore", invalid="ignore"):
        ssq = float(np.vdot(rw, rw).real)
    return ssq, ref_residual_scale(plan, indptr, indices, data, x, b)


def _ref_bsrmv(mode):
    def bsrmv(plan, indptr, indices, data, x, y):
        """``y = A x`` for BSR ``A`` (a trailing partial block: rows/columns past the
        vectors' length are dropped); complex blocks sum in the complex accumulator."""
        acc = _acc(mode, data.dtype)
        nbr = indptr.size - 1
        b = data.shape[1]
        nbc = int(indices.max()) + 1 if indices.size else 0
        ncols = max(nbc * b, x.size)
        B = sp.bsr_matrix((np.asarray(data, dtype=acc), indices, indptr),
                          shape=(nbr * b, -(-ncols // b) * b))
        xx = np.zeros(B.shape[1], dtype=acc)
        xx[:x.size] = x
        y[:] = (B @ xx)[:y.size]
    return bsrmv


_register("reference", "bsrmv", _MAT + _CMAT, mode="acc64")(_ref_bsrmv("acc64"))
_register("reference", "bsrmv", _MAT + _CMAT, mode="acc32")(_ref_bsrmv("acc32"))


@_register("reference", "range_scan", _ALLVEC)
def ref_range_scan(v, big, tiny):
    a = np.abs(v)
    return bool((a > big).any()), bool(((a < tiny) & (a > 0)).any())


# --- GMRES's host-side least-squares problem ---------------------------------------------
@_register("reference", "givens", [("float64",)])
def ref_givens(H, cs, sn, g, j):
    """Real Givens rotations (complex: :func:`ref_givens_complex`)."""
    for i in range(j):
        hi, hi1 = H[i, j], H[i + 1, j]
        H[i, j] = cs[i] * hi + sn[i] * hi1
        H[i + 1, j] = -sn[i] * hi + cs[i] * hi1
    den = math.hypot(H[j, j], H[j + 1, j])
    cs[j], sn[j] = (1.0, 0.0) if den == 0.0 else (H[j, j] / den, H[j + 1, j] / den)
    H[j, j] = den
    H[j + 1, j] = 0.0
    g[j + 1] = -sn[j] * g[j]
    g[j] = cs[j] * g[j]
    return abs(g[j + 1])


@_register("reference", "givens", [("complex128",)])
def ref_givens_complex(H, cs, sn, g, j):
    """Complex Givens rotations ``G = [[conj c, conj s], [-s, c]]``, ``c = h_jj / d``,
    ``s = h_j+1,j / d``, ``d = sqrt(|h_jj|^2 + |h_j+1,j|^2)``: unitary, ``G h = (d, 0)``."""
    for i in range(j):
        hi, hi1 = H[i, j], H[i + 1, j]
        H[i, j] = np.conj(cs[i]) * hi + np.conj(sn[i]) * hi1
        H[i + 1, j] = -sn[i] * hi + cs[i] * hi1
    den = math.hypot(abs(H[j, j]), abs(H[j + 1, j]))
    cs[j], sn[j] = (1.0, 0.0) if den == 0.0 else (H[j, j] / den, H[j + 1, j] / den)
    H[j, j] = den
    H[j + 1, j] = 0.0
    g[j + 1] = -sn[j] * g[j]
    g[j] = np.conj(cs[j]) * g[j]
    return abs(g[j + 1])


@_register("reference", "back_substitute", [("float64",), ("complex128",)])
def ref_back_substitute(H, g, k, y):
    for i in range(k - 1, -1, -1):
        acc = g[i] - H[i, i + 1:k] @ y[i + 1:k]
        y[i] = acc / H[i, i] if H[i, i] != 0.0 else 0.0


# =====================================================================================
# Preconditioner kernels of the ``reference`` device: the ILU(0) set-up and sweeps and
# the (Block-)ISAI local-system gather (``mpsolve.precond``), in plain Python / NumPy.
# The set-up ops are FP64 and give the CPU's results bit for bit (same operations in the
# same order, NumPy never contracts to an FMA); the sweeps carry each row's sum in FP64
# and round it once to ``y``'s dtype, so they match the CPU kernel up to its FMA and
# reassociated row sums.  Slow: meant for the small matrices of the tests.
# =====================================================================================
from .registry import register as _reg_pc, register_plan as _reg_plan_pc  # noqa: E402

_PC_F = ("float32", "float64")
_PC_MAT = [(v, x, y) for v in _PC_F for x in _PC_F for y in _PC_F]
_PC_MAT_C = _PC_MAT + _CMAT
_PC_SETUP = [("float64",)]
_PC_SETUP_C = [("float64",), ("complex128",)]   # complex data: the set-up in complex128


@_reg_pc("reference", "ilu0_factor", _PC_SETUP_C)
def ref_ilu0_factor(indptr, indices, data, diag):
    """ILU(0) in place on sorted CSR (Saad Alg. 10.4, IKJ, dense work row ``w``):
    for each ``k < i`` of row ``i``: ``l_ik = w_k / u_kk``, ``w_j -= l_ik u_kj`` over the
    strict upper part of row ``k``.  Returns -1, or the first row with a zero,
    non-finite or missing pivot."""
    n = indptr.size - 1
    w = np.zeros(n, dtype=data.dtype)
    inv = np.empty(n, dtype=data.dtype)
    for i in range(n):
        s, e = int(indptr[i]), int(indptr[i + 1])
        cols = indices[s:e]
        w[cols] = data[s:e]
        for kk in range(s, e):
            k = int(indices[kk])
            if k >= i:
                break
            lik = w[k] * inv[k]                      # l_ik = w_k / u_kk
            w[k] = lik
            up = slice(int(diag[k]) + 1, int(indptr[k + 1]))
            w[indices[up]] -= lik * data[up]         # w_j -= l_ik u_kj
        data[s:e] = w[cols]
        if diag[i] < 0:
            return i
        piv = data[diag[i]]
        if piv == 0.0 or not np.isfinite(piv):
            return i
        inv[i] = 1.0 / piv
    return -1


@_reg_pc("reference", "ic0_factor", _PC_SETUP_C)
def ref_ic0_factor(indptr, indices, data, diag, mirror, positive=False):
    """IC(0) in place on sorted symmetric (Hermitian) CSR: row ``i``'s upper part by
    ``w_j -= l_ik u_kj`` over ``j >= i`` of row ``k``, for each ``k < i`` of its pattern with
    ``l_ik = conj(u_ki) / u_kk`` (``u_ki`` at ``mirror[kk]``).  Returns -1, or the first row
    with a zero, non-finite or missing pivot (with ``positive``: not positive)."""
    n = indptr.size - 1
    w = np.zeros(n, dtype=data.dtype)
    inv = np.empty(n, dtype=data.dtype)
    for i in range(n):
        s, d, e = int(indptr[i]), int(diag[i]), int(indptr[i + 1])
        if d < 0:
            return i
        cols = indices[d:e]
        w[cols] = data[d:e]
        for kk in range(s, d):
            k, m = int(indices[kk]), int(mirror[kk])
            lik = np.conj(data[m]) * inv[k]
            data[kk] = lik
            up = slice(m, int(indptr[k + 1]))
            w[indices[up]] -= lik * data[up]
        data[d:e] = w[cols]
        piv = data[d]
        if piv == 0.0 or not np.isfinite(piv) or (positive and not piv.real > 0):
            return i
        inv[i] = 1.0 / piv
    return -1


@_reg_pc("reference", "diag_positions", _PC_SETUP_C)
def ref_diag_positions(indptr, indices):
    """``diag[i]``: position of ``a_ii`` in sorted CSR (-1 where it is not stored)."""
    n = indptr.size - 1
    rows = np.repeat(np.arange(n), np.diff(indptr))
    on = np.flatnonzero(indices == rows)
    diag = np.full(n, -1, dtype=np.int64)
    diag[rows[on]] = on
    return diag


@_reg_pc("reference", "line_abs_max", _PC_SETUP)
def ref_line_abs_max(indptr, indices, mag, r, c, rm, cm):
    """Row and column maxima of ``diag(r) mag diag(c)`` into ``rm`` and ``cm`` (0 for an
    empty line)."""
    n = indptr.size - 1
    rows = np.repeat(np.arange(n), np.diff(indptr))
    v = r[rows] * mag * c[indices]
    rm[:] = 0.0
    cm[:] = 0.0
    np.maximum.at(rm, rows, v)
    np.maximum.at(cm, indices, v)


@_reg_pc("reference", "ruiz_scaling", _PC_SETUP)
def ref_ruiz_scaling(indptr, indices, mag, passes, close, r, c):
    """Ruiz's max-norm scaling in place on ``r`` and ``c`` (the CPU kernel's contract):
    per pass, the line maxima of ``diag(r) mag diag(c)``, a stop when every nonzero one
    is within ``1 +- close``, else each line divided by the square root of its maximum.
    Returns the passes that scaled."""
    rm, cm = np.empty(r.size), np.empty(c.size)
    for p in range(passes):
        ref_line_abs_max(indptr, indices, mag, r, c, rm, cm)
        if (np.all(np.abs(rm[rm > 0] - 1.0) <= close)
                and np.all(np.abs(cm[cm > 0] - 1.0) <= close)):
            return p
        r[rm > 0] /= np.sqrt(rm[rm > 0])
        c[cm > 0] /= np.sqrt(cm[cm > 0])
    return passes


@_reg_pc("reference", "symmetric_mirror", _PC_SETUP_C)
def ref_symmetric_mirror(indptr, indices, data, rtol, mirror):
    """Symmetric pattern and ``|a_ij - conj(a_ji)| <= rtol max(|a_ij|, |a_ji|,
    sqrt(|a_ii a_jj|))`` (the CPU kernel's test)?  Then
    ``mirror[k]`` = position of entry ``k``'s transpose (canonical CSR: the keys
    ``i n + j`` are sorted, so the transpose is found by a binary search)."""
    n = indptr.size - 1
    if indices.size == 0:
        return True
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    cols = indices.astype(np.int64)
    key = rows * n + cols
    tkey = cols * n + rows
    pos = np.minimum(np.searchsorted(key, tkey), key.size - 1)
    if not np.array_equal(key[pos], tkey):
        return False
    a, b = data, data[pos]
    dabs = np.zeros(n)
    on = rows == cols
    dabs[rows[on]] = np.abs(data[on])
    scale = np.maximum(np.maximum(np.abs(a), np.abs(b)), np.sqrt(dabs[rows]) * np.sqrt(dabs[cols]))
    if np.any(np.abs(a - np.conj(b)) > rtol * scale):
        return False
    mirror[:] = pos
    return True


@_reg_pc("reference", "ilu_split", _PC_SETUP_C)
def ref_ilu_split(indptr, indices, data, diag, symmetric, mirror, lval, lind, lptr, uval,
                  uind, uptr, dinv):
    """The combined factors laid out for the sweeps: ``L`` (strict lower part, rows in
    order), ``U' = D^{-1} U`` (strict upper part, rows reversed, columns descending --
    the reverse of CSR order), ``dinv = 1 / diag(U)``; ``symmetric``: ``U'`` takes the
    values of ``L^H`` (``mirror``; ``L^T`` for real data)."""
    n = indptr.size - 1
    at = np.arange(indices.size)
    rows = np.repeat(np.arange(n), np.diff(indptr))
    lo = at < diag[rows]
    lval[:] = data[lo]
    lind[:] = indices[lo]
    lptr[0] = 0
    np.cumsum(diag - indptr[:-1], out=lptr[1:])
    dinv[:] = 1.0 / data[diag]
    ku = np.flatnonzero(at > diag[rows])[::-1]       # rows and columns descending
    uind[:] = indices[ku]
    uval[:] = np.conj(data[mirror[ku]]) if symmetric else data[ku] / data[diag[rows[ku]]]
    uptr[0] = 0
    np.cumsum((indptr[1:] - diag - 1)[::-1], out=uptr[1:])


@_reg_pc("reference", "drop_coupling", _PC_SETUP_C)
def ref_drop_coupling(indptr, indices, data, bounds):
    """Entries of CSR ``A`` whose column lies in their row's block (``bounds``)."""
    n = indptr.size - 1
    block = np.repeat(np.arange(bounds.size - 1), np.diff(bounds))
    rows = np.repeat(np.arange(n), np.diff(indptr))
    keep = block[indices] == block[rows]
    ip = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=n), out=ip[1:])
    return ip, indices[keep], data[keep]


@_reg_plan_pc("reference", "ilu_sweeps")
def ref_ilu_blocks(indptr, nblocks, min_rows):
    """Row bounds of ``nblocks`` diagonal blocks of about equal ``nnz + rows`` (the
    CPU's partition); ``"threads"``: one block (the reference device is serial)."""
    n = indptr.size - 1
    nb = 1 if nblocks == "threads" else max(1, min(int(nblocks), n))
    if nb == 1:
        return np.array([0, n], dtype=np.int64)
    work = indptr.astype(np.int64) + np.arange(n + 1, dtype=np.int64)
    bounds = np.searchsorted(work, np.linspace(0, work[-1], nb + 1), side="left")
    bounds = bounds.astype(np.int64)
    bounds[0], bounds[-1] = 0, n
    return np.maximum.accumulate(bounds)


@_reg_pc("reference", "ilu_sweeps", _PC_MAT_C)
def ref_ilu_sweeps(bounds, lptr, lind, lval, uptr, uind, uval, dinv, x, y):
    """``y = U'^{-1} D^{-1} L^{-1} x`` per diagonal block, row by row in Python floats
    (FP64; Python complex numbers, complex128, for complex data): forward
    ``z_i = x_i - sum_k l_ik z_k``, backward ``y_i = dinv_i z_i - sum_k u'_ik y_k``, each
    rounded once to ``y``'s dtype.  The nearest previous row (``i - 1`` forward,
    ``i + 1`` backward) enters unrounded, as the wide value its output was rounded from
    (as on the CPU)."""
    n = y.size
    wide = np.complex128 if y.dtype.kind == "c" else np.float64
    low = y.dtype in (np.float32, np.complex64)
    rnd = (lambda v: complex(y.dtype.type(v))) if wide is np.complex128 else \
        (lambda v: float(y.dtype.type(v)))
    lp, li, lv = lptr.tolist(), lind.tolist(), lval.astype(wide).tolist()
    up, ui, uv = uptr.tolist(), uind.tolist(), uval.astype(wide).tolist()
    di = dinv.astype(wide).tolist()
    xs = x.astype(wide).tolist()
    o = [0.0] * n
    b = bounds.tolist()
    for t in range(len(b) - 1):
        lo, hi = b[t], b[t + 1]
        prev = 0.0
        for i in range(lo, hi):                      # forward: L z = x
            s, e = lp[i], lp[i + 1]
            near = 0.0
            if e > s and li[e - 1] == i - 1:
                e -= 1
                near = lv[e]
            acc = xs[i]
            for k in range(s, e):
                acc -= lv[k] * o[li[k]]
            acc -= near * prev
            o[i] = rnd(acc) if low else acc
            prev = acc
        prev = 0.0
        for p in range(n - hi, n - lo):              # backward: D U' y = z
            i = n - 1 - p
            s, e = up[p], up[p + 1]
            near = 0.0
            if e > s and ui[e - 1] == i + 1:
                e -= 1
                near = uv[e]
            acc = o[i] * di[i]
            for k in range(s, e):
                acc -= uv[k] * o[ui[k]]
            acc -= near * prev
            o[i] = rnd(acc) if low else acc
            prev = acc
    y[:] = o


@_reg_pc("reference", "gather_local", _PC_SETUP_C)
def ref_gather_local(rows, pptr, pind, aptr, aind, adata, out):
    """``out[t] = A[J_i, J_i]`` for ``i = rows[t]``, ``J_i = pind[pptr[i]:pptr[i+1]]``
    (BSR ``A``, ``b x b`` blocks; ``out`` zeroed by the caller)."""
    b = adata.shape[1]
    for t, i in enumerate(np.asarray(rows).tolist()):
        J = pind[pptr[i]:pptr[i + 1]]
        m = J.size
        V = out[t].reshape(m, b, m, b).transpose(0, 2, 1, 3)   # V[p, q]: block (J_p, J_q)
        for p, r in enumerate(J.tolist()):
            k = np.arange(aptr[r], aptr[r + 1])
            c = aind[k]
            q = np.searchsorted(J, c)
            hit = q < m
            hit[hit] = J[q[hit]] == c[hit]
            V[p, q[hit]] = adata[k[hit]]


# --- block ILU(0) and the block ISAI of its factors (precond/block_ilu.py) ----------------
# BSR arrays: indptr/indices over block rows, data (nnzb, b, b).  One block row at a time,
# NumPy on b x b blocks: the oracles of kernels/cpu/bilu.py.

def _ref_inv_block(a):
    """``a^{-1}`` by Gauss-Jordan with partial pivoting (the CPU's order), or None."""
    b = a.shape[0]
    w = np.hstack([a.astype(np.result_type(a.dtype, np.float64)), np.eye(b)])
    for c in range(b):
        p = c + int(np.argmax(np.abs(w[c:, c])))
        if not abs(w[p, c]) > 0.0:
            return None
        if p != c:
            w[[c, p]] = w[[p, c]]
        w[c] = w[c] / w[c, c]
        for u in range(b):
            if u != c and w[u, c] != 0.0:
                w[u] = w[u] - w[u, c] * w[c]
    inv = w[:, b:]
    return inv.copy() if np.isfinite(inv).all() else None


def _ref_gemm(a, b_):
    """``a b_`` with each entry summed left to right (as the CPU kernel)."""
    b = a.shape[0]
    c = np.zeros((b, b), dtype=np.result_type(a.dtype, b_.dtype))
    for w in range(b):
        c = c + np.outer(a[:, w], b_[w, :])
    return c


@_reg_pc("reference", "bilu0_factor", _PC_SETUP_C)
def ref_bilu0_factor(indptr, indices, data, diag, dinv):
    """Block ILU(0), block IKJ, in place on ``data``; ``dinv[i] = U_ii^{-1}``.  -1 or the
    first block row with a missing or singular pivot block."""
    nb = indptr.size - 1
    for i in range(nb):
        s, e = int(indptr[i]), int(indptr[i + 1])
        pos = {int(indices[k]): k for k in range(s, e)}
        for kk in range(s, e):
            k = int(indices[kk])
            if k >= i:
                break
            data[kk] = _ref_gemm(data[kk], dinv[k])                   # L_ik = A_ik U_kk^-1
            for jj in range(int(diag[k]) + 1, int(indptr[k + 1])):
                p = pos.get(int(indices[jj]))
                if p is not None:
                    data[p] -= _ref_gemm(data[kk], data[jj])          # A_ij -= L_ik U_kj
        if diag[i] < 0:
            return i
        inv = _ref_inv_block(data[diag[i]])
        if inv is None:
            return i
        dinv[i] = inv
    return -1


@_reg_pc("reference", "bilu_split", _PC_SETUP_C)
def ref_bilu_split(indptr, indices, data, diag, dinv, symmetric, mirror, lval, lind, lptr, uval,
                   uind, uptr):
    """The block factors laid out for ``bilu_sweeps``: ``L`` rows in order, ``U' = D^-1 U``
    rows reversed (``L_ji^T`` with ``symmetric``, ``dinv`` then symmetrised; complex:
    Hermitian, ``L_ji^H``)."""
    nb = indptr.size - 1
    if symmetric:
        for i in range(nb):
            d = np.diag(dinv[i]).real.copy()
            dinv[i] = 0.5 * (dinv[i] + dinv[i].T.conj())    # the diagonal stays exact
            dinv[i][np.diag_indices(dinv.shape[1])] = d
    q = 0
    for i in range(nb):
        lptr[i] = q
        k = np.arange(indptr[i], diag[i])
        lval[q:q + k.size] = data[k]
        lind[q:q + k.size] = indices[k]
        q += k.size
    lptr[nb] = q
    q = 0
    for p in range(nb):
        i = nb - 1 - p
        uptr[p] = q
        for k in range(int(diag[i]) + 1, int(indptr[i + 1])):
            uval[q] = data[mirror[k]].T.conj() if symmetric else _ref_gemm(dinv[i], data[k])
            uind[q] = indices[k]
            q += 1
    uptr[nb] = q


@_reg_pc("reference", "block_tri_isai", _PC_SETUP_C)
def ref_block_tri_isai(pptr, pind, tptr, tind, tdata, tdiag, dinv, lower, cond_limit, out,
                       bad):
    """Block ISAI of a block triangular factor (combined BILU(0) storage): for block row
    ``i``, ``X T[J, J] = E_i^T`` by block substitution; ``bad[i]`` as the CPU kernel."""
    nb = pptr.size - 1
    b = tdata.shape[1]
    for i in range(nb):
        j0, j1 = int(pptr[i]), int(pptr[i + 1])
        J = [int(c) for c in pind[j0:j1]]
        m = len(J)
        pos = {c: p for p, c in enumerate(J)}
        S = np.zeros((m, b, b), dtype=tdata.dtype)
        rown = np.zeros((m, b))
        order = range(m - 1, -1, -1) if lower else range(m)
        for step, q in enumerate(order):
            r = J[q]
            R = -S[q] + (np.eye(b) if step == 0 else 0.0)
            if lower:
                out[j0 + q] = R
                rown[q] += 1.0
                ks = range(int(tptr[r]), int(tdiag[r]))
            else:
                out[j0 + q] = _ref_gemm(R, dinv[r])
                rown[q] += np.abs(tdata[tdiag[r]]).sum(axis=1)
                ks = range(int(tdiag[r]) + 1, int(tptr[r + 1]))
            for k in ks:
                p = pos.get(int(tind[k]))
                if p is not None:
                    S[p] += _ref_gemm(out[j0 + q], tdata[k])
                    rown[q] += np.abs(tdata[k]).sum(axis=1)
        X = out[j0:j1]
        xn = np.abs(X).sum(axis=(0, 2)).max() if m else 0.0
        tn = rown.max() if m else 0.0
        bad[i] = 0 if np.isfinite(X).all() and tn * xn <= cond_limit else 1


@_reg_pc("reference", "bilu_sweeps", _PC_MAT_C)
def ref_bilu_sweeps(lptr, lind, lval, uptr, uind, uval, dinv, x, y):
    """``y = U'^-1 D^-1 L^-1 x`` block row by block row, FP64 sums rounded to ``y``'s
    dtype on each store (``y`` may end inside the last block)."""
    n = y.size
    nb, b = dinv.shape[0], dinv.shape[1]
    wd = np.complex128 if y.dtype.kind == "c" else np.float64
    o = np.zeros(nb * b, dtype=wd)
    o[:n] = x.astype(wd)
    lv, uv, di = (a.astype(wd) for a in (lval, uval, dinv))
    narrow = {np.dtype(np.float32): np.float32, np.dtype(np.complex64): np.complex64}.get(y.dtype)
    rnd = (lambda v: v.astype(narrow).astype(wd)) if narrow is not None else (lambda v: v)
    for i in range(nb):                                  # L z = x
        acc = o[i * b:(i + 1) * b].copy()
        for k in range(lptr[i], lptr[i + 1]):
            c = lind[k] * b
            acc -= lv[k] @ o[c:c + b]
        o[i * b:(i + 1) * b] = rnd(acc)
    for p in range(nb):                                  # U' y = D^-1 z
        i = nb - 1 - p
        acc = di[i] @ o[i * b:(i + 1) * b]
        for k in range(uptr[p], uptr[p + 1]):
            c = uind[k] * b
            acc -= uv[k] @ o[c:c + b]
        o[i * b:(i + 1) * b] = rnd(acc)
    y[:] = o[:n]


# =====================================================================================
# The (Block-)ISAI set-up of the ``reference`` device: patterns (SciPy) and the batched
# local solves (NumPy on the whole stack of a size group).  The local solves repeat the
# CPU kernels' arithmetic element for element (right-looking LU with the first largest
# pivot, left-looking Cholesky, substitution, each sum in index order, no FMA), so the
# stored ISAI equals the CPU's bit for bit; only the eigenvalue test of FSAI's last
# block (b > 1) goes through LAPACK here and there.
# =====================================================================================
import scipy.sparse as _sp  # noqa: E402

_SYM_RTOL = 64 * np.finfo(np.float64).eps   # the CPU's localsolve.SYM_RTOL


@_reg_pc("reference", "bsr_from_csr", _PC_SETUP_C)
def ref_bsr_from_csr(indptr, indices, data, b):
    """Canonical BSR of canonical CSR ``A`` with every diagonal block stored (explicit
    zeros kept): SciPy's union with zero diagonal blocks, then ``tobsr``."""
    n = indptr.size - 1
    nb = n // b
    wide = np.complex128 if np.iscomplexobj(data) else np.float64
    C = _sp.csr_matrix((np.asarray(data, wide), indices, indptr), shape=(n, n)).tocoo()
    r = np.repeat(np.arange(n), b)
    c = np.repeat(np.arange(nb) * b, b * b) + np.tile(np.arange(b), n)
    S = _sp.csr_matrix((np.concatenate([C.data, np.zeros(n * b)]),
                        (np.concatenate([C.row, r]), np.concatenate([C.col, c]))),
                       shape=(n, n))                     # duplicates summed, zeros kept
    S.sort_indices()
    B = _sp.bsr_matrix(S, blocksize=(b, b))
    B.sort_indices()
    return (B.indptr.astype(np.int64), B.indices.astype(np.int64),
            np.ascontiguousarray(B.data, dtype=wide))


def _ref_part(P, part):
    """Canonical ``(indptr, indices)`` (int64) of ``P``, ``tril``/``triu`` for ``part``
    1/2."""
    if part == 1:
        P = _sp.tril(P, format="csr")
    elif part == 2:
        P = _sp.triu(P, format="csr")
    P = _sp.csr_matrix(P)
    P.sum_duplicates()
    P.sort_indices()
    return P.indptr.astype(np.int64), P.indices.astype(np.int64)


@_reg_pc("reference", "pattern_power", _PC_SETUP)
def ref_pattern_power(sptr, sind, power, part):
    """Pattern of ``(S + I)^power`` (SciPy products of 0/1 matrices), then
    ``tril``/``triu`` for ``part`` 1/2."""
    nb = sptr.size - 1
    S = _sp.csr_matrix((np.ones(sind.size), sind, sptr), shape=(nb, nb))
    S = (S + _sp.identity(nb, format="csr")).tocsr()
    S.data[:] = 1.0
    P = S
    for _ in range(int(power) - 1):
        P = P @ S
        P.data[:] = 1.0  # pattern only: no cancellation, no overflow
    return _ref_part(P, part)


@_reg_pc("reference", "strong_graph", _PC_SETUP)
def ref_strong_graph(aptr, aind, anorm, theta):
    """The strong couplings of each row (NumPy): off the diagonal, ``anorm > 0`` and at
    least ``theta`` times the row's largest off-diagonal ``anorm``."""
    nb = aptr.size - 1
    rows = np.repeat(np.arange(nb), np.diff(aptr))
    w = np.where(aind != rows, np.asarray(anorm, np.float64), 0.0)
    top = np.zeros(nb)
    np.maximum.at(top, rows, w)
    keep = (w > 0) & (w >= theta * top[rows])
    sptr = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=nb), out=sptr[1:])
    return sptr, np.asarray(aind, np.int64)[keep]


@_reg_pc("reference", "pattern_union_power", _PC_SETUP)
def ref_pattern_union_power(aptr, aind, sptr, sind, power, part):
    """``pattern(A) | pattern((S + I)^power)`` (SciPy), then ``tril``/``triu`` for
    ``part`` 1/2."""
    nb = aptr.size - 1
    qp, qi = ref_pattern_power(sptr, sind, power, 0)
    P = (_sp.csr_matrix((np.ones(aind.size), aind, aptr), shape=(nb, nb))
         + _sp.csr_matrix((np.ones(qi.size), qi, qp), shape=(nb, nb)))
    return _ref_part(P, part)


@_reg_pc("reference", "pattern_truncate", _PC_SETUP)
def ref_pattern_truncate(pptr, pind, wptr, wind, wdata, power, keep):
    """Wide rows keep the diagonal and their heaviest columns in ``W^power`` (SciPy
    product; stable order: ties keep the lower column)."""
    nb = pptr.size - 1
    sizes = np.diff(pptr)
    wide = np.flatnonzero(sizes > keep)
    if wide.size == 0:
        return pptr, pind, 0
    W = _sp.csr_matrix((wdata, wind, wptr), shape=(nb, nb))
    P = W
    for _ in range(int(power) - 1):
        P = P @ W
    P = _sp.csr_matrix(P)
    P.sort_indices()
    new_sizes = np.minimum(sizes, keep)
    out_ptr = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(new_sizes, out=out_ptr[1:])
    out_ind = np.empty(out_ptr[-1], dtype=np.int64)
    is_wide = np.zeros(nb, dtype=bool)
    is_wide[wide] = True
    for i in range(nb):
        J = pind[pptr[i]:pptr[i + 1]]
        if is_wide[i]:
            cols = P.indices[P.indptr[i]:P.indptr[i + 1]]
            vals = P.data[P.indptr[i]:P.indptr[i + 1]]
            w = vals[np.searchsorted(cols, J)]
            w[J == i] = np.inf                      # the diagonal always stays
            J = np.sort(J[np.argsort(-w, kind="stable")[:keep]])
        out_ind[out_ptr[i]:out_ptr[i + 1]] = J
    return out_ptr, out_ind, int(wide.size)


@_reg_pc("reference", "bsr_transpose", _PC_SETUP_C + [("float32",), ("complex64",)])
def ref_bsr_transpose(pptr, pind, data):
    """Canonical BSR of the (block) transpose, by SciPy (indices in ``pind``'s dtype,
    blocks in ``data``'s)."""
    nb = pptr.size - 1
    b = data.shape[1]
    B = _sp.bsr_matrix((data, pind, pptr), shape=(nb * b, nb * b)).transpose().tobsr((b, b))
    B.sort_indices()
    return (B.indptr.astype(pind.dtype), B.indices.astype(pind.dtype),
            np.ascontiguousarray(B.data, dtype=data.dtype))


def _ref_local_stack(rows, pptr, pind, aptr, aind, adata, transpose):
    """The local matrices of a size group, ``(len(rows), s, s)`` (``A_J`` or ``A_J^T``)."""
    b = adata.shape[1]
    m = int(pptr[rows[0] + 1] - pptr[rows[0]])
    a = np.zeros((rows.size, m * b, m * b), dtype=adata.dtype)
    ref_gather_local(rows, pptr, pind, aptr, aind, adata, a)
    return np.ascontiguousarray(np.swapaxes(a, 1, 2)) if transpose else a


def _ref_rhs(pos, s, b, dtype=np.float64):
    x = np.zeros((pos.size, s, b), dtype=dtype)
    for j in range(b):
        x[np.arange(pos.size), pos * b + j, j] = 1.0
    return x


def _ref_lu(a):
    """``P A = L U`` in place on the stack (first largest pivot; whole rows swapped)."""
    B, s, _ = a.shape
    piv = np.empty((B, s), dtype=np.int64)
    at = np.arange(B)
    for k in range(s):
        p = k + np.argmax(np.abs(a[:, k:, k]), axis=1)
        piv[:, k] = p
        rk = a[at, k, :].copy()
        a[at, k, :] = a[at, p, :]
        a[at, p, :] = rk
        lr = a[:, k + 1:, k] / a[:, k, k][:, None]           # l_rk = a_rk / a_kk
        a[:, k + 1:, k] = lr
        a[:, k + 1:, k + 1:] -= lr[:, :, None] * a[:, k, None, k + 1:]
    return piv


def _ref_lu_solve(a, piv, x):
    B, s, _ = a.shape
    at = np.arange(B)
    for k in range(s):
        p = piv[:, k]
        xk = x[at, k, :].copy()
        x[at, k, :] = x[at, p, :]
        x[at, p, :] = xk
    for r in range(1, s):
        for c in range(r):
            x[:, r, :] -= a[:, r, c, None] * x[:, c, :]
    for r in range(s - 1, -1, -1):
        for c in range(r + 1, s):
            x[:, r, :] -= a[:, r, c, None] * x[:, c, :]
        x[:, r, :] = x[:, r, :] / a[:, r, r, None]


def _ref_chol(a):
    """``A = L L^H`` in place (left-looking; ``L L^T`` for real data); returns the mask
    where it applies."""
    B, s, _ = a.shape
    iu = np.triu_indices(s, 1)
    up, lo = a[:, iu[0], iu[1]], a[:, iu[1], iu[0]]
    ok = ~(np.abs(up - np.conj(lo)) > _SYM_RTOL * np.maximum(np.abs(up), np.abs(lo))).any(axis=1)
    for j in range(s):
        for k in range(j):
            a[:, j, j] -= a[:, j, k] * np.conj(a[:, j, k])
        d = a[:, j, j].real
        ok &= (d > 0.0) & (d < np.inf)
        a[:, j, j] = np.sqrt(d)
        for k in range(j):
            a[:, j + 1:, j] -= a[:, j + 1:, k] * np.conj(a[:, j, k, None])
        a[:, j + 1:, j] = a[:, j + 1:, j] / a[:, j, j, None]
    return ok


def _ref_chol_solve(a, x):
    s = a.shape[1]
    for r in range(s):
        for c in range(r):
            x[:, r, :] -= a[:, r, c, None] * x[:, c, :]
        x[:, r, :] = x[:, r, :] / a[:, r, r, None]
    for r in range(s - 1, -1, -1):
        for c in range(r + 1, s):
            x[:, r, :] -= np.conj(a[:, c, r, None]) * x[:, c, :]
        x[:, r, :] = x[:, r, :] / a[:, r, r, None]


def _ref_tri_solve(a, x, upper):
    s = a.shape[1]
    for rr in range(s):
        r = s - 1 - rr if upper else rr
        for c in (range(r + 1, s) if upper else range(r)):
            x[:, r, :] -= a[:, r, c, None] * x[:, c, :]
        x[:, r, :] = x[:, r, :] / a[:, r, r, None]


def _ref_check(a0, x, pos, b, bwd_tol, cond_limit, bad):
    """``bad = 1`` where the solution is rejected (the rule of precond._localsolve)."""
    B, s, _ = a0.shape
    sa = np.zeros((B, s))
    R = np.zeros((B, s, b), dtype=x.dtype)
    for c in range(s):
        sa += np.abs(a0[:, :, c])
        R += a0[:, :, c, None] * x[:, c, None, :]
    for j in range(b):
        R[np.arange(B), pos * b + j, j] -= 1.0
    sx = np.zeros((B, s))
    sr = np.zeros((B, s))
    for j in range(b):
        sx += np.abs(x[:, :, j])
        sr += np.abs(R[:, :, j])
    cond = sa.max(axis=1) * sx.max(axis=1)
    bwd = sr.max(axis=1) / (cond + 1.0)
    fin = np.isfinite(x).all(axis=(1, 2))
    bad[~(fin & (bwd <= bwd_tol) & (cond <= cond_limit))] = 1


def _ref_store(x, rows, pptr, bad, out):
    B, s, b = x.shape
    m = s // b
    for t in np.flatnonzero(bad == 0):
        out[pptr[rows[t]]:pptr[rows[t]] + m] = x[t].reshape(m, b, b).transpose(0, 2, 1)


def _ref_spd_finish_store(x, rows, pptr, cond_limit, bad, out):
    B, s, b = x.shape
    m = s // b
    for t in np.flatnonzero(bad == 0):
        z = x[t]
        zl = 0.5 * (z[s - b:, :] + z[s - b:, :].T.conj())       # Hermitian part
        w = np.linalg.eigvalsh(zl) if b > 1 else zl[0].real
        if not (w[0] > 0.0) or not (w[0] * cond_limit >= w[-1]):
            bad[t] = 1
            continue
        lt = np.zeros((b, b), dtype=z.dtype)                    # Z_last = L L^H
        for j in range(b):
            d = zl[j, j]
            for k in range(j):
                d -= lt[j, k] * np.conj(lt[j, k])
            d = np.sqrt(d.real)
            lt[j, j] = d
            for i in range(j + 1, b):
                acc = zl[i, j]
                for k in range(j):
                    acc -= lt[i, k] * np.conj(lt[j, k])
                lt[i, j] = acc / d
        gi = np.empty((b, s), dtype=z.dtype)                    # G_i = L^-1 Z^H
        for u in range(b):
            acc = np.conj(z[:, u])
            for v in range(u):
                acc -= lt[u, v] * gi[v]
            gi[u] = acc / lt[u, u]
        out[pptr[rows[t]]:pptr[rows[t]] + m] = gi.reshape(b, m, b).transpose(1, 0, 2)


def _ref_by_size(solve):
    """Run ``solve`` on each size group of ``rows`` (the stacks need one size)."""
    def run(rows, pos, pptr, pind, aptr, aind, adata, flag, bwd_tol, cond_limit, out, bad):
        rows = np.asarray(rows, dtype=np.int64)
        pos = np.asarray(pos, dtype=np.int64)
        sizes = pptr[rows + 1] - pptr[rows]
        for m in np.unique(sizes):
            t = np.flatnonzero(sizes == m)
            bt = np.zeros(t.size, dtype=np.int8)
            solve(rows[t], pos[t], pptr, pind, aptr, aind, adata, flag, bwd_tol, cond_limit,
                  out, bt)
            bad[t] = bt
    run.__doc__ = solve.__doc__
    return run


@_reg_pc("reference", "local_lu_solve", _PC_SETUP_C)
@_ref_by_size
def ref_local_lu_solve(rows, pos, pptr, pind, aptr, aind, adata, spd, bwd_tol, cond_limit, out,
                       bad):
    """The CPU's ``local_lu_solve`` on the stack of each size group."""
    b = adata.shape[1]
    with np.errstate(all="ignore"):
        a = _ref_local_stack(rows, pptr, pind, aptr, aind, adata, not spd)
        a0 = a.copy()
        piv = _ref_lu(a)
        x = _ref_rhs(pos, a.shape[1], b, a.dtype)
        _ref_lu_solve(a, piv, x)
        _ref_check(a0, x, pos, b, bwd_tol, cond_limit, bad)
        if spd:
            _ref_spd_finish_store(x, rows, pptr, cond_limit, bad, out)
        else:
            _ref_store(x, rows, pptr, bad, out)


@_ref_by_size
def _ref_chol_group(rows, pos, pptr, pind, aptr, aind, adata, _flag, bwd_tol, cond_limit, out,
                    bad):
    b = adata.shape[1]
    with np.errstate(all="ignore"):
        a = _ref_local_stack(rows, pptr, pind, aptr, aind, adata, False)
        a0 = a.copy()
        ok = _ref_chol(a)
        x = _ref_rhs(pos, a.shape[1], b, a.dtype)
        _ref_chol_solve(a, x)
        _ref_check(a0, x, pos, b, bwd_tol, cond_limit, bad)
        bad[~ok | (bad != 0)] = 2
        _ref_spd_finish_store(x, rows, pptr, cond_limit, bad, out)


@_reg_pc("reference", "local_chol_solve", _PC_SETUP_C)
def ref_local_chol_solve(rows, pos, pptr, pind, aptr, aind, adata, bwd_tol, cond_limit, out,
                         bad):
    """The CPU's ``local_chol_solve`` on the stack of each size group."""
    _ref_chol_group(rows, pos, pptr, pind, aptr, aind, adata, None, bwd_tol, cond_limit, out, bad)


@_reg_pc("reference", "local_tri_solve", _PC_SETUP_C)
@_ref_by_size
def ref_local_tri_solve(rows, pos, pptr, pind, aptr, aind, adata, lower, bwd_tol, cond_limit,
                        out, bad):
    """The CPU's ``local_tri_solve`` on the stack of each size group."""
    b = adata.shape[1]
    with np.errstate(all="ignore"):
        a = _ref_local_stack(rows, pptr, pind, aptr, aind, adata, True)
        x = _ref_rhs(pos, a.shape[1], b, a.dtype)
        _ref_tri_solve(a, x, bool(lower))
        _ref_check(a, x, pos, b, bwd_tol, cond_limit, bad)
        _ref_store(x, rows, pptr, bad, out)


@_reg_pc("reference", "block_capacity", _PC_SETUP)
def ref_block_capacity(indptr, indices, ncols, b, max_excess=-1):
    """Places in the ``b x b`` blocks holding a stored entry (partial last block row /
    column ``ncols % b`` wide), by unique block keys; ``nnz + max_excess + 1`` when
    ``max_excess >= 0`` and the excess ``capacity - nnz`` exceeds it."""
    m = indptr.size - 1
    if indices.size == 0:
        return 0
    rows = np.repeat(np.arange(m, dtype=np.int64), np.diff(indptr))
    nbc = -(-int(ncols) // b)
    keys = np.unique((rows // b) * nbc + np.asarray(indices, np.int64) // b)
    width = np.full(max(nbc, -(-m // b)), b, dtype=np.int64)
    if ncols % b:
        width[nbc - 1] = ncols % b
    cap = int((width[keys // nbc] * width[keys % nbc]).sum())
    nnz = int(indptr[m])
    return nnz + max_excess + 1 if 0 <= max_excess < cap - nnz else cap


@_reg_pc("reference", "row_stats", [("float32",), ("float64",), ("complex64",), ("complex128",)])
def ref_row_stats(indptr, indices, data, tiny, eps):
    """``row_stats`` by whole-array NumPy: zero / tiny / dominant diagonal counts, the
    extreme nonzero ``|a_ij|``, the real positive diagonal flag, the longest row."""
    n = indptr.size - 1
    rows = np.repeat(np.arange(n), np.diff(indptr))
    a = np.abs(data).astype(np.float64)
    lengths = np.diff(indptr)
    on = indices == rows
    ad = np.zeros(n)
    ad[rows[on]] = a[on]
    d = np.zeros(n, data.dtype)
    d[rows[on]] = data[on]
    rmax = np.zeros(n)
    np.maximum.at(rmax, rows, a)
    rsum = np.zeros(n)
    np.add.at(rsum, rows, a)
    nz = a[a > 0]
    return np.array([
        float((ad == 0).sum()),
        float(((ad > 0) & (ad <= tiny * rmax)).sum()),
        float((ad >= (rsum - ad) * (1 - 4 * eps * lengths)).sum()),
        float(a.max(initial=0.0)),
        float(nz.min()) if nz.size else np.inf,
        float(bool(np.all((d.real > 0) & (d.imag == 0)))),
        float(lengths.max(initial=0)),
    ])


# --- double-double x and the compensated residual (mpsolve.refine's dd stage) ---------------
def _exact_terms(a, x):
    """The products ``a_k x_k`` as exact pairs (Dekker), with a fallback to Fractions
    where the split could be inexact (huge, tiny or non-finite products)."""
    p, e = two_prod_exact(a, x)
    ax, xx = np.abs(a), np.abs(x)
    prod = ax * xx
    nz = prod != 0
    if not (np.all(np.isfinite(prod)) and ax.max(initial=0) < 2.0**996
            and xx.max(initial=0) < 2.0**996 and np.all(prod[nz] >= 2.0**-969)):
        return None
    return p, e


def _round_rest(terms):
    """``(fl(sum), fl(sum - fl(sum)))`` of exactly represented terms: the best pair."""
    hi = math.fsum(terms)
    if not math.isfinite(hi):
        return hi, 0.0
    return hi, math.fsum(terms + [-hi])


@_register("reference", "residual_dd", [("float64",)])
def ref_residual_dd(plan, indptr, indices, data, xh, xl, b, r, rl):
    """``r + rl = b - A (xh + xl)``: each row's exact residual rounded to FP64 (``r``)
    and the rest rounded (``rl``) -- within the Dot2 bound of the CPU kernel."""
    data = np.asarray(data, dtype=np.float64)
    cols = np.asarray(indices, dtype=np.int64)
    th, tl = _exact_terms(data, xh[cols]), _exact_terms(data, xl[cols])
    for i in range(indptr.size - 1):
        lo, hi = int(indptr[i]), int(indptr[i + 1])
        if th is None or tl is None:        # exact in Fractions, then rounded
            cs = cols[lo:hi]
            if not (np.isfinite(b[i]) and np.isfinite(data[lo:hi]).all()
                    and np.isfinite(xh[cs]).all() and np.isfinite(xl[cs]).all()):
                with np.errstate(all="ignore"):   # inf/nan propagate as in FP64
                    r[i] = b[i] - np.sum(data[lo:hi] * xh[cs]) - np.sum(data[lo:hi] * xl[cs])
                rl[i] = 0.0
                continue
            q = Fraction(float(b[i])) - sum(
                (Fraction(float(data[k])) * (Fraction(float(xh[cols[k]]))
                                             + Fraction(float(xl[cols[k]])))
                 for k in range(lo, hi)), Fraction(0))
            try:
                r[i] = float(q)
            except OverflowError:           # past FP64's range: rounds to +-inf
                r[i], rl[i] = (math.inf if q > 0 else -math.inf), 0.0
                continue
            rl[i] = float(q - Fraction(r[i]))
            continue
        terms = [float(b[i])]
        for p, e in (th, tl):
            terms += (-p[lo:hi]).tolist() + (-e[lo:hi]).tolist()
        r[i], rl[i] = _round_rest(terms)


@_register("reference", "dd_axpy", [("float64",)])
def ref_dd_axpy(a, x, yh, yl):
    """``(yh, yl) = (yh + yl) + a x`` exactly, rounded to the best pair: ``yh`` the
    nearest FP64 value, ``yl`` the rest rounded."""
    pe = _exact_terms(np.full(x.size, float(a)), np.asarray(x, dtype=np.float64))
    for i in range(x.size):
        if pe is None:
            if not (np.isfinite(yh[i]) and np.isfinite(yl[i]) and np.isfinite(x[i])
                    and math.isfinite(a)):
                with np.errstate(all="ignore"):
                    yh[i] = yh[i] + yl[i] + a * x[i]
                yl[i] = 0.0
                continue
            q = Fraction(float(yh[i])) + Fraction(float(yl[i])) + Fraction(float(a)) * \
                Fraction(float(x[i]))
            yh[i] = float(q)
            yl[i] = float(q - Fraction(yh[i]))
        else:
            yh[i], yl[i] = _round_rest([float(yh[i]), float(yl[i]), float(pe[0][i]),
                                        float(pe[1][i])])


# --- the compiled Krylov loops (kernels/fused.py's programs), composed of the ops above ----
from . import fused as _fused  # noqa: E402


@_reg_plan_pc("reference", "bicgstab_loop")
@_reg_plan_pc("reference", "gmres_arnoldi")
@_reg_plan_pc("reference", "cg_loop")
def ref_loop_plan(n, A, M, dtype, force=False):
    """:func:`mpsolve.kernels.fused.pack`, at every size (the reference is serial)."""
    return _fused.pack(A, M, dtype)


def _ref_loop_ops(dtype, mode, A, amode, prog, P, pmode):
    """``(ops, matvec_dot, psolve)`` of the reference device for a loop's arguments."""
    from .primitives import bind_primitives

    ops = bind_primitives("reference", dtype, mode, np)
    _, ip, ix, data = A
    acc = "acc32" if amode == _fused.ACC32 else "acc64"
    spmv = _ref_spmv(acc)

    def matvec_dot(x, y):
        if amode == _fused.ACC64_DOT:
            return ref_spmv_dot(None, ip, ix, data, x, y)
        spmv(None, ip, ix, data, x, y)          # y = A x
        return ops.dot(x, y)

    ptr1, ind1, val1, ptr2, ind2, val2, d = P
    pspmv = _ref_spmv("acc32" if pmode == _fused.ACC32 else "acc64")

    def psolve(r, z, t):
        if prog == _fused.P_DIAG:
            ref_dmul(d, r, z)                   # z = d * r
        elif prog == _fused.P_CSR:
            pspmv(None, ptr1, ind1, val1, r, z)
        elif prog == _fused.P_CSR2:
            pspmv(None, ptr1, ind1, val1, r, t)
            pspmv(None, ptr2, ind2, val2, t, z)
        elif prog == _fused.P_ILU:
            ref_ilu_sweeps(np.array([0, z.size]), ptr1, ind1, val1, ptr2, ind2, val2, d, r, z)

    return ops, matvec_dot, (None if prog == _fused.P_NONE else psolve)


def _ref_cg_loop(mode):
    def cg_loop(A, amode, prog, P, pmode, x, r, q, z, p, t, maxiter, tol, hist, state):
        """PCG as :func:`mpsolve.krylov.cg.cg_body`, from the reference device's ops; the
        loop's contract (kernels/fused.py, kernels/primitives.py)."""
        ops, matvec_dot, psolve = _ref_loop_ops(x.dtype, mode, A, amode, prog, P, pmode)
        tiny = float(np.finfo(x.dtype).tiny)
        maxiter = min(maxiter, hist.size)
        if psolve is None:
            z = r
        if state[1] == 0:
            if psolve is not None:
                psolve(r, z, t)                 # z = M r
            ops.copy(z, p)
            rnorm = ops.nrm2(r)
            rz = rnorm * rnorm if psolve is None else ops.dot(r, z)
            if rnorm <= tol:
                return 0, 0
            if not (rz != 0 and math.isfinite(rz)):
                return 0, (-14 if not math.isfinite(rz) else -12)
            sa = 0.0
        else:
            rz = float(state[0])
            sa = float(state[2])
        sm = math.copysign(1.0, rz)             # the signs of r.z and p.Ap stay (cg.py)
        for k in range(1, maxiter + 1):
            pq = matvec_dot(p, q)               # q = A p; p . q
            if sa == 0.0 and pq != 0.0:
                sa = state[2] = math.copysign(1.0, pq)
            if tiny <= sa * pq < math.inf:
                alpha = rz / pq
            else:
                alpha = ops.dot_ratio(r, z, p, q)
                if not (0 < sm * sa * alpha < math.inf):
                    return k - 1, (-14 if math.isnan(alpha) else -12)
            rnorm = ops.axpy2_nrm2(alpha, p, x, -alpha, q, r)
            hist[k - 1] = rnorm
            if not math.isfinite(rnorm):
                return k, -14
            if rnorm <= tol:
                return k, 0
            if psolve is None:
                rz_new = rnorm * rnorm
            else:
                psolve(r, z, t)
                rz_new = ops.dot(r, z)
            if rz_new == 0:                     # underflowed, or M r = 0: at its floor
                return k, 0
            if psolve is not None and not (sm * rz_new > 0):
                return k, (-14 if math.isnan(rz_new) else -12)
            beta = rz_new / rz
            rz = state[0] = rz_new
            ops.xpay(z, beta, p)                # p = z + beta p
        return maxiter, 1
    return cg_loop


_register("reference", "cg_loop", _VEC, mode="native")(_ref_cg_loop("native"))
_register("reference", "cg_loop", _VEC, mode="compensated")(_ref_cg_loop("compensated"))


def _ref_gmres_arnoldi(mode):
    def gmres_arnoldi(A, amode, prog, P, pmode, side, V, Z, u, t, H, cs, sn, g, hcol, target,
                      floor, max_steps, ratio, eps, reorth, hist):
        """GMRES's inner steps as :func:`mpsolve.krylov.gmres.gmres_body` runs them, from
        the reference device's ops; the contract of kernels/primitives.py."""
        ops, _, psolve = _ref_loop_ops(V.dtype, mode, A, amode, prog, P, pmode)
        _, ip, ix, data = A
        spmv = _ref_spmv("acc32" if amode == _fused.ACC32 else "acc64")

        def matvec(x, y):
            spmv(None, ip, ix, data, x, y)      # y = A x

        m = H.shape[1]
        est = wnorm_in = 0.0
        happy = False
        steps = 0
        for j in range(m):
            w = V[j + 1]
            if side == 1:
                matvec(V[j], u)
                psolve(u, w, t)                 # w = M A v_j
            elif side == 2:
                z = Z[j] if Z.shape[0] > 1 else Z[0]    # one row: a linear M (no Z basis)
                psolve(V[j], z, t)              # z_j = M v_j
                matvec(z, w)
            else:
                matvec(V[j], w)
            ops.mdot(V, j + 1, w, hcol)
            wnorm0 = wnorm_in = ops.nrm2(w)
            for ps in range(2):
                if ps:
                    ops.mdot(V, j + 1, w, hcol)
                ops.maxpy(V, j + 1, hcol, w)    # w -= sum_i h_i v_i
                wnorm = ops.nrm2(w)
                H[: j + 1, j] += hcol[: j + 1]
                if wnorm > reorth * wnorm0:
                    break
                wnorm0 = wnorm
            H[j + 1, j] = wnorm
            if not math.isfinite(wnorm):
                return steps, happy, est, wnorm_in, -14
            est = ops.givens(H, cs, sn, g, j)
            hist[steps] = est * ratio
            steps += 1
            if wnorm <= eps * wnorm_in or wnorm == 0.0:
                happy = True
                break
            ops.scal(1.0 / wnorm, w)            # v_{j+1} = w / ||w||
            if est <= target or est <= floor or steps == max_steps:
                break
        return steps, happy, est, wnorm_in, 0
    return gmres_arnoldi


_register("reference", "gmres_arnoldi", _VEC, mode="native")(_ref_gmres_arnoldi("native"))
_register("reference", "gmres_arnoldi", _VEC, mode="compensated")(
    _ref_gmres_arnoldi("compensated"))


def _ref_bicgstab_loop(mode):
    def bicgstab_loop(A, amode, prog, P, pmode, x, r, r0, p, v, s, t, ph, sh, w, maxiter, tol,
                      hist, state):
        """BiCGSTAB as :func:`mpsolve.krylov.bicgstab.bicgstab_body`, from the reference
        device's ops; the contract of kernels/primitives.py."""
        ops, _, psolve = _ref_loop_ops(x.dtype, mode, A, amode, prog, P, pmode)
        _, ip, ix, data = A
        spmv = _ref_spmv("acc32" if amode == _fused.ACC32 else "acc64")
        eps = float(np.finfo(x.dtype).eps)
        tiny = float(np.finfo(x.dtype).tiny)
        rhotol = eps * eps
        maxiter = min(maxiter, hist.size)
        if psolve is None:
            ph, sh = p, s
        first = state[3] == 0
        if first:
            ops.copy(r, r0)
            r0nrm = rnorm = ops.nrm2(r0)
            if rnorm <= tol:
                return 0, 0
            rho_old = alpha = omega = 1.0
        else:
            rho_old, alpha, omega, _, r0nrm, rnorm = (float(c) for c in state)
        for k in range(1, maxiter + 1):
            rho = ops.dot(r0, r)
            if not math.isfinite(rho):
                return k - 1, -14
            if abs(rho) <= rhotol * r0nrm * rnorm:
                return k - 1, -10
            if k == 1 and first:
                ops.copy(r, p)
            else:
                ops.bicg_dir(r, (rho / rho_old) * (alpha / omega), omega, v, p)
            if psolve is not None:
                psolve(p, ph, w)                # p^ = M p
            spmv(None, ip, ix, data, ph, v)     # v = A p^
            r0v = ops.dot(r0, v)
            if r0v == 0.0:
                return k - 1, -10
            if tiny <= abs(r0v) < math.inf:
                alpha = rho / r0v
            else:
                alpha = ops.dot_ratio(r0, r, r0, v)
                if not math.isfinite(alpha):
                    return k - 1, -14
            ops.waxpy(-alpha, v, r, s)          # s = r - alpha v
            snorm = ops.nrm2(s)
            if snorm <= tol:
                ops.axpy(alpha, ph, x)
                ops.copy(s, r)
                hist[k - 1] = snorm
                return k, 0
            if psolve is not None:
                psolve(s, sh, w)                # s^ = M s
            spmv(None, ip, ix, data, sh, t)     # t = A s^
            tt = ops.dot(t, t)
            ts = ops.dot(t, s)
            if tiny <= tt < math.inf and abs(ts) < math.inf:
                omega = ts / tt
            else:
                omega = ops.dot_ratio(t, s, t, t)
                if not math.isfinite(omega):
                    return k - 1, (-11 if tt == 0.0 else -14)
            if omega == 0.0:
                return k - 1, -11
            ops.axpy2(alpha, ph, x, omega, sh, x)
            ops.waxpy(-omega, t, s, r)          # r = s - omega t
            rnorm = ops.nrm2(r)
            hist[k - 1] = rnorm
            if not math.isfinite(rnorm):
                return k, -14
            if rnorm <= tol:
                return k, 0
            rho_old = rho
            state[:] = (rho_old, alpha, omega, state[3], r0nrm, rnorm)
        return maxiter, 1
    return bicgstab_loop


_register("reference", "bicgstab_loop", _VEC, mode="native")(_ref_bicgstab_loop("native"))
_register("reference", "bicgstab_loop", _VEC, mode="compensated")(
    _ref_bicgstab_loop("compensated"))
# --- several right-hand sides: (n, k) blocks, one column per right-hand side -------------
# (kernels/cpu/spmm.py; a block op is the single-vector op applied to each column)
_BMAT = [(v, x, y) for v in _F for x in _F for y in _F]


def _ref_spmm(mode):
    def spmm(plan, indptr, indices, data, X, Y):
        """``Y = A X``, products and row sums in the accumulator's precision."""
        acc = _acc(mode)
        Y[:] = _csr(indptr, indices, data, X.shape[0], acc) @ X.astype(acc)
    return spmm


_register("reference", "spmm", _BMAT, mode="acc64")(_ref_spmm("acc64"))
_register("reference", "spmm", _BMAT, mode="acc32")(_ref_spmm("acc32"))


@_register("reference", "spmm_dot", _BMAT, mode="acc64")
def ref_spmm_dot(plan, indptr, indices, data, X, Y, out):
    """``Y = A X`` (FP64 row sums), then ``out[c] = X[:, c] . Y[:, c]`` in FP64."""
    _ref_spmm("acc64")(plan, indptr, indices, data, X, Y)
    out[:] = np.einsum("ij,ij->j", X.astype(np.float64), Y.astype(np.float64))


@_register("reference", "residual_mm", [(v, d, d, d) for v in _F for d in _F], mode="acc64")
def ref_residual_mm(plan, indptr, indices, data, X, B, R):
    """``R = B - A X``, FP64 row sums, rounded once."""
    R[:] = B.astype(np.float64) - _csr(indptr, indices, data, X.shape[0], np.float64) @ \
        X.astype(np.float64)


@_register("reference", "dmul_mm", _BMAT)
def ref_dmul_mm(d, X, Y):
    """``Y = diag(d) X``."""
    Y[:] = d[:, None] * X


@_reg_pc("reference", "ilu_growth", [("float64", "float32"), ("float64", "float64"),
                                     ("complex128", "complex64"), ("complex128", "complex128")])
def ref_ilu_growth(indptr, indices, data, scaled, bounds, lptr, lind, lval, uptr, uind, uval,
                   dinv, x, y, z):
    """``max_i |(M C x - x)_i| / x_i`` (``x`` ones, or ``|c_ii|^{-1/2}`` where ``scaled``
    and ``c_ii != 0``), ``inf`` for a non-finite term: SciPy's product in FP64 (complex128)
    and :func:`ref_ilu_sweeps`; ``x``, ``y = C x`` and ``z = M y`` written to the work
    vectors."""
    n = x.size
    C = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    x[:] = 1.0
    if scaled:
        d = np.abs(C.diagonal())
        x[d != 0] = 1.0 / np.sqrt(d[d != 0])
    y[:] = C @ x
    ref_ilu_sweeps(bounds, lptr, lind, lval, uptr, uind, uval, dinv, y, z)
    with np.errstate(invalid="ignore", over="ignore"):
        t = np.abs(z - x) / x
    if not t.size:
        return 0.0
    return float(t.max()) if np.isfinite(t).all() else np.inf


@_register("reference", "ilu_sweeps_mm", _BMAT)
def ref_ilu_sweeps_mm(bounds, lptr, lind, lval, uptr, uind, uval, dinv, X, Y):
    """``ilu_sweeps`` on each column of ``X``."""
    col = np.empty(X.shape[0], Y.dtype)
    for c in range(X.shape[1]):
        ref_ilu_sweeps(bounds, lptr, lind, lval, uptr, uind, uval, dinv,
                       np.ascontiguousarray(X[:, c]), col)
        Y[:, c] = col


@_register("reference", "col_dot", _VEC, mode="native")
def ref_col_dot(X, Y, out):
    """``out[c] = X[:, c] . Y[:, c]`` in the blocks' dtype."""
    out[:X.shape[1]] = [np.dot(X[:, c], Y[:, c]) for c in range(X.shape[1])]


@_register("reference", "col_axpy2_nrm2", _VEC, mode="native")
def ref_col_axpy2_nrm2(a, X, Y, b, U, V, out):
    """Per column: ``Y_c += a_c X_c; V_c += b_c U_c; out_c = ||V_c||``."""
    t = X.dtype.type
    Y += np.asarray(a).astype(t)[None, :] * X
    V += np.asarray(b).astype(t)[None, :] * U
    out[:X.shape[1]] = np.sqrt((V.astype(np.float64) ** 2).sum(axis=0))


@_register("reference", "col_xpay", _VEC)
def ref_col_xpay(X, a, Y):
    """``Y_c = X_c + a_c Y_c``."""
    Y[:] = X + np.asarray(a).astype(X.dtype)[None, :] * Y


@_register("reference", "col_scal", _VEC)
def ref_col_scal(a, X, out):
    """``out_c = a_c X_c``."""
    out[:] = np.asarray(a).astype(X.dtype)[None, :] * X


@_register("reference", "col_mdot", _VEC, mode="native")
def ref_col_mdot(V, j, W, out):
    """``out[i, c] = V[i, :, c] . W[:, c]``, ``i < j``."""
    for i in range(j):
        for c in range(W.shape[1]):
            out[i, c] = np.dot(V[i, :, c], W[:, c])


@_register("reference", "col_maxpy", _VEC)
def ref_col_maxpy(V, j, H, W):
    """``W_c -= sum_{i<j} H[i, c] V[i, :, c]``."""
    for i in range(j):
        W -= np.asarray(H[i]).astype(W.dtype)[None, :] * V[i]


@_register("reference", "col_lincomb", _VEC)
def ref_col_lincomb(V, Y, j, out):
    """``out_c = sum_{i<j} Y[i, c] V[i, :, c]``."""
    out[:] = 0
    for i in range(j):
        out += np.asarray(Y[i]).astype(out.dtype)[None, :] * V[i]


@_register("reference", "col_cg_step", _VEC, mode="native")
def ref_col_cg_step(a, P, X, Q, R, d, rn, rz):
    """Per column: ``X_c += a_c P_c; R_c -= a_c Q_c; rn_c = ||R_c||; rz_c = R_c . (d R_c)``
    (``d`` empty: ``R_c . R_c``)."""
    at = np.asarray(a).astype(X.dtype)[None, :]
    X += at * P
    R -= at * Q
    Z = R if np.asarray(d).size == 0 else np.asarray(d)[:, None] * R
    for c in range(X.shape[1]):
        rn[c] = np.sqrt(np.dot(R[:, c], R[:, c]))
        rz[c] = np.dot(R[:, c], Z[:, c])


@_register("reference", "col_dxpay", _VEC)
def ref_col_dxpay(d, R, a, P):
    """``P_c = d R_c + a_c P_c`` (``d`` empty: ``R_c + a_c P_c``)."""
    Z = R if np.asarray(d).size == 0 else (np.asarray(d)[:, None] * R).astype(P.dtype)
    P[:] = Z + np.asarray(a).astype(P.dtype)[None, :] * P


@_register("reference", "col_mdot_nrm2", _VEC, mode="native")
def ref_col_mdot_nrm2(V, j, W, out, nrm):
    """``col_mdot`` and ``nrm_c = ||W_c||``."""
    ref_col_mdot(V, j, W, out)
    nrm[:W.shape[1]] = np.sqrt((W.astype(np.float64) ** 2).sum(axis=0))


@_register("reference", "col_maxpy_nrm2", _VEC, mode="native")
def ref_col_maxpy_nrm2(V, j, H, W, nrm):
    """``col_maxpy`` and ``nrm_c = ||W_c||`` of the updated ``W``."""
    ref_col_maxpy(V, j, H, W)
    nrm[:W.shape[1]] = np.sqrt((W.astype(np.float64) ** 2).sum(axis=0))
