"""Every registered CPU kernel against kernels/reference.py.

Tolerances come from the precision: ``eps`` of the working (accumulation /
output) dtype times a small factor times the row length or ``sqrt(n)``, scaled
by the magnitudes involved (``|A| |x|`` for a row sum, ``|x|.|y|`` for a dot),
never a bare literal.  Inputs include empty rows, an all-empty matrix, a 1x1
matrix, very long rows, and lengths on both sides of ``PARALLEL_MIN``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from mpsolve.kernels import available, lookup, reference as ref
from mpsolve.kernels.cpu import spmv as spmv_mod
from mpsolve.kernels.cpu._config import PARALLEL_MIN

F = ("float32", "float64")
EPS = {np.dtype(d).name: float(np.finfo(d).eps) for d in F}
LONG = PARALLEL_MIN + 1001          # takes the parallel branch of every kernel
LENGTHS = [0, 1, 2, 31, LONG]


def _eps(*dtypes):
    """eps of the least precise of ``dtypes``."""
    return max(EPS[np.dtype(d).name] for d in dtypes)


# --- coverage: a newly registered op without a test here fails ---------------------------

TESTED_OPS = {"spmv", "bsrmv", "residual", "dot", "nrm2", "sum", "axpy", "xpay", "axpby", "waxpy",
              "axpy2", "bicg_dir", "copy", "dmul", "scal", "lincomb", "mdot", "maxpy",
              "axpy2_nrm2", "spmv_dot", "cb_mdot", "cb_maxpy", "cb_lincomb", "cb_store",
              "cb_mdot_nrm2", "cb_maxpy_nrm2",
              # several right-hand sides: against the reference device, tests/test_devices.py
              # (ilu_sweeps_mm: tests/test_multi_rhs.py)
              "spmm", "spmm_dot", "residual_mm", "dmul_mm", "ilu_sweeps_mm", "col_dot", "col_axpy2_nrm2",
              "col_xpay", "col_scal", "col_mdot", "col_maxpy", "col_lincomb",
              # (and bit for bit against the unfused ops: tests/test_multi_rhs.py)
              "col_cg_step", "col_dxpay", "col_mdot_nrm2", "col_maxpy_nrm2",
              # against the reference device: tests/test_devices.py
              "givens", "back_substitute", "range_scan",
              # against the reference device: tests/test_precond.py
              "ilu_sweeps", "gather_local", "ilu0_factor", "ic0_factor", "diag_positions",
              "symmetric_mirror",
              "ilu_split", "drop_coupling", "line_abs_max", "ruiz_scaling",
              # against the reference device: tests/test_block_ilu.py
              "bilu0_factor", "bilu_split", "block_tri_isai", "bilu_sweeps",
              # against the reference device: tests/test_precond.py
              "bsr_from_csr", "pattern_power", "strong_graph", "pattern_union_power",
              "pattern_truncate", "bsr_transpose",
              "local_lu_solve", "local_chol_solve", "local_tri_solve", "block_capacity",
              # against the reference device: tests/test_auto.py
              "row_stats", "ilu_growth",
              # against exact oracles and the reference device: tests/test_eft_refine.py
              "residual_dd", "dd_axpy",
              # against the reference device and NumPy: tests/test_certify.py
              "residual_scale", "residual_norms",
              # against the reference device and the Python bodies: tests/test_fused.py
              "cg_loop", "gmres_arnoldi", "bicgstab_loop"}


def test_every_registered_cpu_op_is_tested():
    ops = {k[1] for k in available("cpu")}
    assert ops <= TESTED_OPS, f"untested kernels: {sorted(ops - TESTED_OPS)}"
    assert {"spmv", "dot", "nrm2"} <= ops


def test_lookup_missing_combination_lists_what_exists():
    with pytest.raises(KeyError) as exc:
        lookup("cpu", "dot", ("float16",), "native")
    msg = exc.value.args[0]
    assert "float16" in msg and "('float64',) mode='native'" in msg
    assert "('float32',) mode='compensated'" in msg
    with pytest.raises(KeyError, match="registered: none"):
        lookup("cpu", "no_such_op", ("float64",))
    with pytest.raises(KeyError, match="acc64"):
        lookup("cpu", "spmv", ("float64", "float64", "float64"), "acc16")


# --- CSR matrices -----------------------------------------------------------------------

def make_csr(n, m, rng, density=0.05, empty_frac=0.2, heavy=(), dtype=np.float64):
    """Random ``n x m`` CSR (sorted int32 indices) with a share of empty rows
    and the rows in ``heavy`` filled completely.  Returns ``(indptr, indices, data, m)``."""
    A = sp.random(n, m, density=density, format="lil", random_state=rng,
                  data_rvs=lambda k: rng.standard_normal(k))
    empty = rng.random(n) < empty_frac
    for i in np.flatnonzero(empty):
        A.rows[i] = []
        A.data[i] = []
    for i in heavy:
        A.rows[i] = list(range(m))
        A.data[i] = list(rng.standard_normal(m) * 10.0 ** rng.integers(-3, 3, m))
    A = A.tocsr()
    A.sort_indices()
    return (A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data.astype(dtype), m)


def _matrices():
    rng = np.random.default_rng(42)
    out = {
        "random": make_csr(300, 250, rng),
        "heavy_rows": make_csr(200, 3000, rng, density=0.002, heavy=(0, 57, 199)),
        "all_empty": (np.zeros(51, np.int32), np.zeros(0, np.int32), np.zeros(0), 7),
        "one_by_one": (np.array([0, 1], np.int32), np.array([0], np.int32), np.array([-2.5]), 1),
        "zero_rows": (np.zeros(1, np.int32), np.zeros(0, np.int32), np.zeros(0), 3),
        "long": make_csr(LONG, LONG, rng, density=4.0 / LONG, empty_frac=0.1),
    }
    return out


MATS = _matrices()


def _row_scale(indptr, indices, data, x):
    """``|A| |x|`` per row and the row lengths, in FP64."""
    ab = ref.spmv(indptr, indices, np.abs(data.astype(np.float64)),
                  np.abs(x.astype(np.float64)))
    return ab, np.diff(indptr).astype(np.float64)


@pytest.mark.parametrize("mode", ["acc64", "acc32"])
@pytest.mark.parametrize("vdt,xdt,ydt", [(v, x, y) for v in F for x in F for y in F])
@pytest.mark.parametrize("name", sorted(MATS))
def test_spmv(name, vdt, xdt, ydt, mode):
    indptr, indices, data64, m = MATS[name]
    data = data64.astype(vdt)
    n = indptr.size - 1
    rng = np.random.default_rng(n)
    x = rng.standard_normal(m).astype(xdt)
    y = np.full(n, np.nan, dtype=ydt)                    # every entry must be written
    parts = spmv_mod.partition_rows(indptr)
    kern = lookup("cpu", "spmv", (vdt, xdt, ydt), mode)
    kern(parts, indptr, indices, data, x, y)
    assert y.dtype == np.dtype(ydt)
    want = ref.spmv(indptr, indices, data, x)            # FP64, from the same (cast) values
    ab, rowlen = _row_scale(indptr, indices, data, x)
    acc_eps = EPS["float64"] if mode == "acc64" else EPS["float32"]
    tol = 2 * acc_eps * (rowlen + 1) * ab + EPS[ydt] * np.abs(want)
    assert np.all(np.abs(y.astype(np.float64) - want) <= tol)
    empty = rowlen == 0
    assert np.all(y[empty] == 0)
    # the row partition does not change any row's sum
    y1 = np.empty_like(y)
    kern(np.array([0, n], np.int64), indptr, indices, data, x, y1)
    assert np.array_equal(y, y1, equal_nan=True)


def test_spmv_acc32_is_really_fp32():
    # 1 + 2^-30 - 1: FP64 keeps 2^-30, FP32 loses it (the two modes differ)
    indptr = np.array([0, 3], np.int32)
    indices = np.array([0, 1, 2], np.int32)
    data = np.array([1.0, 2.0**-30, -1.0])
    x = np.ones(3)
    parts = spmv_mod.partition_rows(indptr)
    y = np.empty(1)
    lookup("cpu", "spmv", ("float64",) * 3, "acc64")(parts, indptr, indices, data, x, y)
    assert y[0] == 2.0**-30
    lookup("cpu", "spmv", ("float64",) * 3, "acc32")(parts, indptr, indices, data, x, y)
    assert y[0] == 0.0


@pytest.mark.parametrize("vdt,wdt", [(v, w) for v in F for w in F])
@pytest.mark.parametrize("name", ["random", "heavy_rows", "all_empty", "one_by_one", "long"])
def test_residual(name, vdt, wdt):
    indptr, indices, data64, m = MATS[name]
    data = data64.astype(vdt)
    n = indptr.size - 1
    rng = np.random.default_rng(7)
    x = rng.standard_normal(m).astype(wdt)
    b = rng.standard_normal(n).astype(wdt)
    r = np.full(n, np.nan, dtype=wdt)
    kern = lookup("cpu", "residual", (vdt, wdt, wdt, wdt), "acc64")
    kern(spmv_mod.partition_rows(indptr), indptr, indices, data, x, b, r)
    want = ref.residual(indptr, indices, data, x, b)
    ab, rowlen = _row_scale(indptr, indices, data, x)
    tol = 2 * EPS["float64"] * (rowlen + 2) * (ab + np.abs(b)) + EPS[wdt] * np.abs(want)
    assert np.all(np.abs(r.astype(np.float64) - want) <= tol)


# --- BSR ------------------------------------------------------------------------------------------

def make_bsr(nb, mb, b, rng, density=0.2, empty_frac=0.2):
    """Random BSR with ``b x b`` blocks: ``(indptr, indices, data (nnzb, b, b))``."""
    P = sp.random(nb, mb, density=density, format="csr", random_state=rng)
    P.data[:] = 1
    keep = rng.random(nb) >= empty_frac
    P = (sp.diags(keep.astype(float)) @ P).tocsr()
    P.eliminate_zeros()
    P.sort_indices()
    data = rng.standard_normal((P.nnz, b, b))
    return P.indptr.astype(np.int32), P.indices.astype(np.int32), data


@pytest.mark.parametrize("mode", ["acc64", "acc32"])
@pytest.mark.parametrize("vdt,xdt,ydt", [(v, x, y) for v in F for x in F for y in F])
@pytest.mark.parametrize("b,nb,trim", [(1, 40, 0), (2, 33, 0), (3, 50, 2), (5, 1, 4), (3, 0, 0)])
def test_bsrmv(b, nb, trim, vdt, xdt, ydt, mode):
    rng = np.random.default_rng(b * 100 + nb)
    indptr, indices, data64 = make_bsr(nb, nb, b, rng)
    data = data64.astype(vdt)
    n = max(nb * b - trim, 0)                            # trailing partial block
    full = sp.bsr_matrix((data.astype(np.float64), indices, indptr),
                         shape=(nb * b, nb * b)).tocsr()[:n, :n]
    full.sort_indices()
    x = rng.standard_normal(n).astype(xdt)
    y = np.full(n, np.nan, ydt)
    lookup("cpu", "bsrmv", (vdt, xdt, ydt), mode)(
        spmv_mod.partition_rows(indptr), indptr, indices, data, x, y)
    want = ref.spmv(full.indptr, full.indices, full.data, x)
    ab, rowlen = _row_scale(full.indptr, full.indices, full.data, x)
    acc_eps = EPS["float64"] if mode == "acc64" else EPS["float32"]
    tol = 2 * acc_eps * (rowlen + 1) * ab + EPS[ydt] * np.abs(want)
    assert np.all(np.abs(y.astype(np.float64) - want) <= tol)


# --- partition_rows --------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(MATS))
@pytest.mark.parametrize("nparts", [None, 1, 2, 3, 8, 1000])
def test_partition_rows_covers_and_is_monotone(name, nparts):
    indptr = MATS[name][0]
    n = indptr.size - 1
    b = spmv_mod.partition_rows(indptr, nparts)
    assert b.dtype == np.int64
    assert b[0] == 0 and b[-1] == n
    assert np.all(np.diff(b) >= 0)
    if nparts is not None:
        assert b.size == max(1, min(nparts, n)) + 1


def test_partition_rows_balanced_on_skewed_matrix():
    # 10 000 rows of 1 entry, plus 4 rows of 20 000 entries at the front
    n = 10_000
    lens = np.ones(n, np.int64)
    lens[:4] = 20_000
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    work = indptr + np.arange(n + 1)                     # nnz + one unit per row
    for nparts in (2, 4, 8):
        b = spmv_mod.partition_rows(indptr, nparts)
        part_work = work[b[1:]] - work[b[:-1]]
        ideal = work[-1] / nparts
        biggest_row = (lens + 1).max()
        assert part_work.max() <= ideal + biggest_row    # a row cannot be split
        assert part_work.sum() == work[-1]
    # an even split of *rows* would put 80 004 of 90 004 units in the first part
    b = spmv_mod.partition_rows(indptr, 2)
    assert b[1] <= 4


# --- reductions ----------------------------------------------------------------------------------

def _vec(n, dt, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 2.0 ** rng.integers(-4, 4, n)).astype(dt)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dt", F)
@pytest.mark.parametrize("mode", ["native", "compensated"])
def test_dot(mode, dt, n):
    x, y = _vec(n, dt, 1), _vec(n, dt, 2)
    res = lookup("cpu", "dot", (dt,), mode)(x, y)
    assert isinstance(res, float)
    want = ref.fsum_dot(x, y)                            # correctly rounded x.y
    absdot = ref.fsum_dot(np.abs(x), np.abs(y))
    u = EPS[dt] / 2
    if mode == "native":
        tol = 4 * EPS[dt] * (2 + math.sqrt(n)) * absdot
    else:                                                # ORO Dot2 bound, x2
        tol = 2 * (u * abs(want) + ref.gamma(n, u) ** 2 * absdot) + EPS["float64"] * abs(want)
    assert abs(res - want) <= tol
    assert ref.dot(x, y) == pytest.approx(want, abs=4 * EPS["float64"] * (2 + n) * absdot)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dt", F)
@pytest.mark.parametrize("mode", ["native", "compensated"])
def test_nrm2(mode, dt, n):
    x = _vec(n, dt, 3)
    res = lookup("cpu", "nrm2", (dt,), mode)(x)
    want = math.sqrt(ref.fsum_dot(x, x))
    assert want == pytest.approx(ref.nrm2(x), rel=4 * EPS["float64"] * (2 + n))
    if mode == "native":
        tol = 4 * EPS[dt] * (2 + math.sqrt(n)) * want
    else:
        tol = 2 * EPS[dt] * want                         # about one ulp
    assert abs(res - want) <= tol
    assert res >= 0


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dt", F)
@pytest.mark.parametrize("mode", ["native", "compensated"])
def test_sum(mode, dt, n):
    x = _vec(n, dt, 4)
    res = lookup("cpu", "sum", (dt,), mode)(x)
    want = ref.fsum_sum(x)
    absum = ref.fsum_sum(np.abs(x))
    u = EPS[dt] / 2
    if mode == "native":
        tol = 4 * EPS[dt] * (2 + math.sqrt(n)) * absum
    else:
        tol = 2 * (u * abs(want) + ref.gamma(n, u) ** 2 * absum)
    assert abs(res - want) <= tol


# --- updates ---------------------------------------------------------------------------------------

A, B = 0.7519, -1.3125


def _close(got, want64, scale, dt, k=2):
    """|got - want| <= k eps(dt) |scale| elementwise (``want64`` computed in FP64)."""
    assert got.dtype == np.dtype(dt)
    assert np.all(np.abs(got.astype(np.float64) - want64) <= k * EPS[dt] * scale)


def _f64(*arrs):
    return [a.astype(np.float64) for a in arrs]


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dt", F)
def test_axpy_xpay_axpby_waxpy(dt, n):
    x, y0 = _vec(n, dt, 5), _vec(n, dt, 6)
    a, b = float(np.dtype(dt).type(A)), float(np.dtype(dt).type(B))   # scalars as the kernel sees them
    X, Y = _f64(x, y0)

    y = y0.copy()
    lookup("cpu", "axpy", (dt,))(A, x, y)                # y <- a x + y
    _close(y, a * X + Y, np.abs(a * X) + np.abs(Y), dt)

    y = y0.copy()
    lookup("cpu", "xpay", (dt,))(x, A, y)                # y <- x + a y
    _close(y, X + a * Y, np.abs(X) + np.abs(a * Y), dt)

    y = y0.copy()
    lookup("cpu", "axpby", (dt,))(A, x, B, y)            # y <- a x + b y
    _close(y, a * X + b * Y, np.abs(a * X) + np.abs(b * Y), dt, k=3)

    w = np.full(n, np.nan, dt)
    y = y0.copy()
    lookup("cpu", "waxpy", (dt,))(A, x, y, w)            # w <- a x + y
    _close(w, a * X + Y, np.abs(a * X) + np.abs(Y), dt)
    assert np.array_equal(y, y0)                         # inputs untouched
    assert np.array_equal(x, _vec(n, dt, 5))


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dt", F)
def test_axpy2_bicg_dir(dt, n):
    x, y0, u, v0 = (_vec(n, dt, s) for s in (7, 8, 9, 10))
    a, b = float(np.dtype(dt).type(A)), float(np.dtype(dt).type(B))
    X, Y, U_, V = _f64(x, y0, u, v0)
    y, v = y0.copy(), v0.copy()
    lookup("cpu", "axpy2", (dt,))(A, x, y, B, u, v)     # y += a x; v += b u
    _close(y, Y + a * X, np.abs(Y) + np.abs(a * X), dt)
    _close(v, V + b * U_, np.abs(V) + np.abs(b * U_), dt)

    r, vv, p0 = x, u, y0
    R, VV, P = X, U_, Y
    p = p0.copy()
    lookup("cpu", "bicg_dir", (dt,))(r, A, B, vv, p)    # p <- r + beta (p - omega v)
    want = R + a * (P - b * VV)
    scale = np.abs(R) + np.abs(a) * (np.abs(P) + np.abs(b * VV))
    _close(p, want, scale, dt, k=4)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("src,dst", [(s, d) for s in F for d in F])
def test_copy_with_cast(src, dst, n):
    x = _vec(n, src, 11)
    out = np.full(n, np.nan, dst)
    lookup("cpu", "copy", (src, dst))(x, out)
    assert np.array_equal(out, x.astype(dst))            # one correctly rounded cast


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("ddt,xdt,odt", [(d, x, o) for d in F for x in F for o in F])
def test_dmul(ddt, xdt, odt, n):
    d, x = _vec(n, ddt, 12), _vec(n, xdt, 13)
    out = np.full(n, np.nan, odt)
    lookup("cpu", "dmul", (ddt, xdt, odt))(d, x, out)
    want = d.astype(np.float64) * x.astype(np.float64)
    assert out.dtype == np.dtype(odt)
    # FP32 x FP32 may round the product in FP32 before the store to FP64
    assert np.all(np.abs(out.astype(np.float64) - want) <= _eps(ddt, xdt, odt) * np.abs(want))


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dt", F)
def test_scal(dt, n):
    x0 = _vec(n, dt, 14)
    x = x0.copy()
    lookup("cpu", "scal", (dt,))(A, x)                   # x <- a x
    a = float(np.dtype(dt).type(A))
    X = x0.astype(np.float64)
    _close(x, a * X, np.abs(a * X), dt, k=1)


def test_scal_keeps_infinities():
    # x <- a x must not turn inf into nan (0 * inf) nor lose signed zeros
    for dt in F:
        x = np.array([np.inf, -np.inf, -0.0, 1.0], dtype=dt)
        lookup("cpu", "scal", (dt,))(2.0, x)
        assert x[0] == np.inf and x[1] == -np.inf and x[3] == 2
        assert math.copysign(1, x[2]) == -1


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dt", F)
@pytest.mark.parametrize("k", [1, 3, 7])
def test_lincomb(dt, n, k):
    V = np.stack([_vec(n, dt, 20 + i) for i in range(8)])
    y = np.linspace(-1.5, 2.0, 8)
    out = np.empty(n, dtype=dt)
    lookup("cpu", "lincomb", (dt,))(V, y, k, out)        # out <- sum_{i<k} y_i V[i]
    yk = y[:k].astype(dt).astype(np.float64)
    want = yk @ V[:k].astype(np.float64)
    scale = np.abs(yk) @ np.abs(V[:k].astype(np.float64))
    _close(out, want, scale, dt, k=k + 1)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dt", F)
@pytest.mark.parametrize("mode", ["native", "compensated"])
def test_mdot(mode, dt, n):
    V = np.stack([_vec(n, dt, 40 + i) for i in range(6)])
    w = _vec(n, dt, 50)
    out = np.full(6, np.nan)
    lookup("cpu", "mdot", (dt,), mode)(V, 5, w, out)     # out_i <- V_i . w, i < 5
    assert np.isnan(out[5])                               # rows past k untouched
    for i in range(5):
        want = ref.fsum_dot(V[i].astype(np.float64), w.astype(np.float64))
        scale = float(np.abs(V[i].astype(np.float64)) @ np.abs(w.astype(np.float64)))
        k = 2 if mode == "compensated" else max(2, n)
        tol = (EPS[dt] * abs(want) + k * EPS[dt] ** (2 if mode == "compensated" else 1) * scale
               * (n + 2) + 1e-300)
        assert abs(out[i] - want) <= tol, (i, out[i], want)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dt", F)
def test_maxpy(dt, n):
    V = np.stack([_vec(n, dt, 60 + i) for i in range(4)])
    w0 = _vec(n, dt, 70)
    h = np.array([0.5, -1.25, 2.0, 3.0])
    w = w0.copy()
    lookup("cpu", "maxpy", (dt,))(V, 3, h, w)              # w <- w - sum_{i<3} h_i V_i
    hk = h[:3].astype(dt).astype(np.float64)
    want = w0.astype(np.float64) - hk @ V[:3].astype(np.float64)
    scale = np.abs(w0.astype(np.float64)) + np.abs(hk) @ np.abs(V[:3].astype(np.float64))
    _close(w, want, scale, dt, k=4)


# --- a compressed basis (CB-GMRES): V FP32, w FP64, FP64 arithmetic -------------------------
# The FP32 rows are widened exactly, so the FP64 oracle is the one of the FP64 kernels:
# the tolerances are FP64's (an FP32 accumulation or an FP64 -> FP32 -> FP64 round trip
# of w would miss them by 2^29).

@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("mode", ["native", "compensated"])
def test_cb_mdot(mode, n):
    V = np.stack([_vec(n, "float32", 140 + i) for i in range(6)])
    w = _vec(n, "float64", 150) * (1 + 1e-12)          # not representable in FP32
    out = np.full(6, np.nan)
    lookup("cpu", "cb_mdot", ("float32", "float64"), mode)(V, 5, w, out)
    assert np.isnan(out[5])                              # rows past k untouched
    e = EPS["float64"]
    for i in range(5):
        want = ref.fsum_dot(V[i].astype(np.float64), w)
        scale = float(np.abs(V[i].astype(np.float64)) @ np.abs(w))
        k = 2 if mode == "compensated" else max(2, n)
        tol = e * abs(want) + k * e ** (2 if mode == "compensated" else 1) * scale * (n + 2)
        assert abs(out[i] - want) <= tol + 1e-300, (i, out[i], want)
    if n == LONG:                                        # FP64 products, not FP32 ones
        w32 = w.astype(np.float32)
        lookup("cpu", "mdot", ("float32",), "native")(V, 5, w32, out)
        want = ref.fsum_dot(V[0].astype(np.float64), w)
        assert abs(out[0] - want) > 1e6 * e * abs(want)


@pytest.mark.parametrize("n", LENGTHS)
def test_cb_maxpy(n):
    V = np.stack([_vec(n, "float32", 160 + i) for i in range(4)])
    w0 = _vec(n, "float64", 170) * (1 + 1e-12)
    h = np.array([0.5, -1.25, 2.0 + 1e-12, 3.0])
    w = w0.copy()
    lookup("cpu", "cb_maxpy", ("float32", "float64"))(V, 3, h, w)   # w <- w - V_3^T h
    assert w.dtype == np.float64
    want = w0 - h[:3] @ V[:3].astype(np.float64)
    scale = np.abs(w0) + np.abs(h[:3]) @ np.abs(V[:3].astype(np.float64))
    _close(w, want, scale, "float64", k=4)


@pytest.mark.parametrize("n", LENGTHS)
def test_cb_fused_norms(n):
    """``cb_mdot_nrm2`` / ``cb_maxpy_nrm2``: the unfused ops' results, and ``||w||``
    (before / after the projection) within FP64's dot bound."""
    key = ("float32", "float64")
    V = np.stack([_vec(n, "float32", 200 + i) for i in range(4)])
    w0 = _vec(n, "float64", 210) * (1 + 1e-12)
    out, out1 = np.full(4, np.nan), np.full(4, np.nan)
    nrm = lookup("cpu", "cb_mdot_nrm2", key, "native")(V, 3, w0, out)
    lookup("cpu", "cb_mdot", key, "native")(V, 3, w0, out1)
    assert np.isnan(out[3])
    np.testing.assert_allclose(out[:3], out1[:3], rtol=0, atol=4 * n * EPS["float64"]
                               * float(np.abs(V).max(initial=0) * np.abs(w0).sum()) + 1e-300)
    e = EPS["float64"] * (n + 2)
    want = math.sqrt(ref.fsum_dot(w0, w0))
    assert isinstance(nrm, float) and abs(nrm - want) <= e * want + 1e-300
    h = np.array([0.5, -1.25, 2.0 + 1e-12, 9.0])
    w, w1 = w0.copy(), w0.copy()
    nrm = lookup("cpu", "cb_maxpy_nrm2", key, "native")(V, 3, h, w)
    lookup("cpu", "cb_maxpy", key)(V, 3, h, w1)
    assert np.array_equal(w, w1)                         # the same update, bit for bit
    want = math.sqrt(ref.fsum_dot(w1, w1))
    assert abs(nrm - want) <= e * want + 1e-300


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("k", [1, 3, 7])
def test_cb_lincomb(n, k):
    V = np.stack([_vec(n, "float32", 180 + i) for i in range(8)])
    y = np.linspace(-1.5, 2.0, 8) * (1 + 1e-12)
    out = np.full(n, np.nan)
    lookup("cpu", "cb_lincomb", ("float32", "float64"))(V, y, k, out)  # out <- V_k^T y
    want = y[:k] @ V[:k].astype(np.float64)
    scale = np.abs(y[:k]) @ np.abs(V[:k].astype(np.float64))
    _close(out, want, scale, "float64", k=k + 1)


@pytest.mark.parametrize("n", LENGTHS)
def test_cb_store_rounds_once(n):
    x = _vec(n, "float64", 190)
    a = 1.0 / 3.0
    out = np.full(n, np.nan, np.float32)
    lookup("cpu", "cb_store", ("float64", "float32"))(a, x, out)      # out <- fl32(a x)
    want = np.empty(n, np.float32)
    lookup("reference", "cb_store", ("float64", "float32"))(a, x, want)
    assert np.array_equal(out, want)                    # one rounding: bit for bit
    assert np.array_equal(out, (a * x).astype(np.float32))


_GEN_SCRIPT = """
import numpy as np
from mpsolve.kernels.cpu import bsr
parts = np.array([0, 2], dtype=np.int64)
indptr = np.array([0, 1, 2], dtype=np.int32)
indices = np.array([0, 1], dtype=np.int32)
data = np.stack([np.eye(3), 2 * np.eye(3)])
x = np.arange(6.0)
y = np.empty(6)
bsr.bsr_spmv_acc64(parts, indptr, indices, data, x, y)
assert np.array_equal(y, x * np.repeat([1.0, 2.0], 3)), y
k = bsr._GENERATED[(3, "np.float64", False)]
print(sum(k.stats.cache_hits.values()))
"""


def test_generated_bsr_kernels_are_cached_on_disk(tmp_path):
    """The unrolled BSR kernels are generated per block size; their source is written
    under MPSOLVE_CACHE_DIR so Numba's disk cache spares a second process the
    compilation.  An unwritable folder falls back to compiling in memory."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, MPSOLVE_CACHE_DIR=str(tmp_path / "cache"))
    run = lambda: subprocess.run([sys.executable, "-c", _GEN_SCRIPT], env=env, check=True,
                                 capture_output=True, text=True).stdout.split()[-1]
    assert run() == "0"  # first process compiles
    assert list((tmp_path / "cache").glob("kernels-*/bsr_b3_float64_ser.py"))
    assert int(run()) >= 1  # second process loads the compiled kernel from disk
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env["MPSOLVE_CACHE_DIR"] = str(blocker)
    assert run() == "0"  # no cache folder possible: still correct


# --- fused kernels (CG) -------------------------------------------------------------------

@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dt", F)
def test_axpy2_nrm2_is_axpy2_then_nrm2(dt, n):
    """The updates are rounded exactly as axpy2's; the norm within nrm2's tolerance."""
    x, y0, u, v0 = (_vec(n, dt, s) for s in (11, 12, 13, 14))
    y1, v1, y2, v2 = y0.copy(), v0.copy(), y0.copy(), v0.copy()
    got = lookup("cpu", "axpy2_nrm2", (dt,), "native")(A, x, y1, B, u, v1)
    lookup("cpu", "axpy2", (dt,))(A, x, y2, B, u, v2)
    assert np.array_equal(y1, y2) and np.array_equal(v1, v2)
    want = float(np.linalg.norm(v2.astype(np.float64)))
    assert abs(got - want) <= 2 * (n + 1) * _eps(dt) * want + 1e-300
    assert isinstance(got, float)


@pytest.mark.parametrize("n", [0, 1, 7, 300, 3000])
@pytest.mark.parametrize("vdt,wdt", [(v, w) for v in F for w in F])
def test_spmv_dot_is_spmv_then_dot(vdt, wdt, n):
    """y = A x as the acc64 SpMV computes it, and x . y within a dot's tolerance."""
    rng = np.random.default_rng(n + 5)
    if n:
        M = sp.random(n, n, density=min(1.0, 8.0 / n), random_state=n, format="csr") \
            + sp.eye(n, format="csr")
        M.sort_indices()
    else:
        M = sp.csr_matrix((0, 0))
    indptr, indices = M.indptr.astype(np.int32), M.indices.astype(np.int32)
    data = M.data.astype(vdt)
    x = rng.standard_normal(n).astype(wdt)
    for parts in (spmv_mod.partition_rows(indptr), spmv_mod.partition_rows(indptr, 4)):
        y = np.full(n, np.nan, dtype=wdt)
        got = lookup("cpu", "spmv_dot", (vdt, wdt, wdt), "acc64")(parts, indptr, indices,
                                                                 data, x, y)
        y2 = np.empty(n, dtype=wdt)
        lookup("cpu", "spmv", (vdt, wdt, wdt), "acc64")(parts, indptr, indices, data, x, y2)
        want_y = ref.spmv(indptr, indices, data, x)
        ab, rowlen = _row_scale(indptr, indices, data, x)
        tol = 2 * EPS["float64"] * (rowlen + 1) * ab + EPS[wdt] * np.abs(want_y)
        assert np.all(np.abs(y.astype(np.float64) - want_y) <= tol)
        want = float(np.dot(x.astype(np.float64), y.astype(np.float64)))
        scale = float(np.dot(np.abs(x.astype(np.float64)), np.abs(y.astype(np.float64))))
        assert abs(got - want) <= 2 * (n + 1) * _eps(wdt) * scale + 1e-300


def test_cg_uses_the_fused_kernels_and_matches_the_composed_path():
    """With native dots the system carries the registered fused kernels (SpMV+dot, update
    +norm); with compensated dots their compositions from the mode's own dot and norm.
    Both give the separate kernels' results, and CG converges alike with either."""
    import mpsolve
    from mpsolve import Precision
    from mpsolve._system import make_problem, make_system
    from mpsolve.matrices import poisson2d

    A = poisson2d(30)
    n = A.shape[0]
    b = A @ np.ones(n)
    prob = make_problem(A, b, None, rtol=1e-10, atol=0.0, maxiter=None, M=None)
    native = make_system(prob, Precision.preset("double"))
    comp = make_system(prob, Precision.preset("eft"))
    # the fused kernel, behind the overflow-safe norm's guard (kernels/safenorm.py)
    assert native.ops.axpy2_nrm2.__wrapped__ is lookup("cpu", "axpy2_nrm2", ("float64",),
                                                       "native")
    assert comp.ops.axpy2_nrm2.__name__ == "axpy2_nrm2" and \
        comp.ops.axpy2_nrm2 is not native.ops.axpy2_nrm2      # the composition
    x = np.random.default_rng(1).standard_normal(n)
    for sys_ in (native, comp):
        y, y2 = np.empty(n), np.empty(n)
        d = sys_.matvec_dot(x, y)
        sys_.matvec(x, y2)
        assert np.array_equal(y, y2)                          # the same product
        assert abs(d - float(x @ y2)) <= 4 * n * EPS["float64"] * float(np.abs(x) @ np.abs(y2))
        u, v, v2, w, w2 = (np.random.default_rng(s).standard_normal(n) for s in (2, 3, 3, 4, 4))
        nr = sys_.ops.axpy2_nrm2(0.5, u, w, -0.25, x, v)
        sys_.ops.axpy2(0.5, u, w2, -0.25, x, v2)
        assert np.array_equal(v, v2) and np.array_equal(w, w2)
        assert abs(nr - float(np.linalg.norm(v2))) <= 4 * n * EPS["float64"] * nr
    fused = mpsolve.solve(A, b, method="cg", precond="jacobi", precision="double", rtol=1e-10)
    slow = mpsolve.solve(A, b, method="cg", precond="jacobi", precision="eft", rtol=1e-10)
    assert fused.converged and slow.converged
    assert abs(fused.iterations - slow.iterations) <= 1
