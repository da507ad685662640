"""The ``"gpu"`` kernels under numba-cuda's simulator, against the ``reference`` device.

Run by ``tests/test_cuda.py`` in its own process with ``NUMBA_ENABLE_CUDASIM=1`` (set
before numba is imported).  The simulator costs about 1 ms per simulated thread and more
per block barrier (each warp shuffle is one): sizes stay small (n <= 300), and the
reductions' chunk is shrunk to 16 where many chunks and a merge level are wanted.

What is shown:

* the intrinsics' emulations: shuffles, ballot, lane/warp ids against their CUDA
  definitions (a partial warp included), ``fma`` rounded once, ``*_rn`` IEEE;
* the scalar EFTs compiled for CUDA give the Python oracle's bits;
* the BLAS-1 updates bit for bit equal to the reference (``maxpy`` to the CPU), ``lincomb``
  within rounding;
* reductions: compensated within ORO's bound of the exact value (rationals) on GenDot's
  ill-conditioned vectors, the native dot shown to miss that bound; native within
  ``gamma_n``; ``mdot`` row ``i`` bitwise ``dot(V[i], w)``; ``axpy2_nrm2`` bitwise
  ``axpy2`` then ``nrm2``;
* reproducibility: the same bits with 1 block x 32 threads and 3 blocks x 64, and the
  bits of a Python model of the fixed reduction tree (so they depend on ``n`` only);
* CG (``mpsolve.krylov.cg.cg_body``) on the gpu primitives against the reference device.
"""
from __future__ import annotations

import math
import sys
import types
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import numba

assert numba.config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1 (tests/test_cuda.py does)"

from numba import cuda  # noqa: E402

from mpsolve.kernels import available, eft as pyeft, lookup, reference as ref  # noqa: E402
from mpsolve.kernels.cpu import blas1 as cpu_blas1  # noqa: E402
from mpsolve.kernels.cuda import _intrin as I, _launch, eft as ceft, reduce as R  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_eft import dot2_bound, gen_dot  # noqa: E402  (ORO's GenDot, the Dot2 bound)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tree_model import model  # noqa: E402  (the reduction tree in Python)

F = (np.float64, np.float32)
U = {np.float64: 2.0**-53, np.float32: 2.0**-24}
N = 77                     # not a multiple of the warp; > 64 threads: grid-stride exercised

#: The ops this file owns (kernels/cuda/{blas1,reduce,host}.py).
MY_MODULES = ("mpsolve.kernels.cuda.blas1", "mpsolve.kernels.cuda.reduce",
              "mpsolve.kernels.cuda.host")
MY_OPS = {"axpy", "xpay", "axpby", "waxpy", "axpy2", "bicg_dir", "scal", "copy", "dmul",
          "lincomb", "maxpy", "dot", "nrm2", "sum", "mdot", "axpy2_nrm2", "givens",
          "back_substitute", "range_scan"}


def bits(a):
    a = np.asarray(a)
    return a.view(np.uint64 if a.dtype.itemsize == 8 else np.uint32)


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and np.array_equal(bits(a), bits(b))


@pytest.fixture
def small_chunks(monkeypatch):
    """Reductions cut into chunks of 16: many chunks, several warps busy, one merge level."""
    monkeypatch.setattr(R, "CHUNK", 16)


# ===================================================================== intrinsics

def test_simulator_needs_the_emulations():
    """What the simulator lacks (why _intrin emulates): no shuffles, an unfused fma."""
    from numba.cuda.simulator.kernelapi import FakeCUDAModule

    assert not hasattr(FakeCUDAModule, "shfl_down_sync")
    out = np.zeros(2)

    @cuda.jit
    def k(a, b, out):
        out[0] = cuda.fma(a, b, -(a * b))          # the simulator: a*b - a*b == 0
        out[1] = I.fma(a, b, -(a * b))             # ours: the product's rounding error

    a, b = 1 + 2.0**-30, 1 - 2.0**-30
    k[1, 1](a, b, out)
    assert out[0] == 0.0
    assert Fraction(out[1]) == Fraction(a) * Fraction(b) - Fraction(a * b) != 0


@cuda.jit
def _warp_probe(v, down1, down5, down16, xor3, idx7, bal, lane, warp):
    t = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    x = v[t]
    down1[t] = I.shfl_down(x, 1)
    down5[t] = I.shfl_down(x, 5)
    down16[t] = I.shfl_down(x, 16)
    xor3[t] = I.shfl_xor(x, 3)
    idx7[t] = I.shfl_idx(x, 7)
    bal[t] = I.ballot(int(x) % 3 == 0)
    I.syncwarp()
    lane[t] = I.lane_id()
    warp[t] = I.warp_id_in_block()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_shuffles_ballot_ids(dtype):
    """The CUDA definitions (width 32, full mask), in 2 blocks of 48 threads (the second
    warp of each block is a partial one: a lane with no source keeps its own value)."""
    nb, nt = 2, 48
    v = np.arange(nb * nt, dtype=dtype) * dtype(1.5)
    outs = [np.zeros(nb * nt, dtype) for _ in range(5)] + [np.zeros(nb * nt, np.int64)
                                                          for _ in range(3)]
    _warp_probe[nb, nt](v, *outs)
    down1, down5, down16, xor3, idx7, bal, lane, warp = outs
    for g in range(nb * nt):
        b, t = divmod(g, nt)
        w, ln = divmod(t, 32)
        base = b * nt + 32 * w                     # global index of the warp's lane 0
        size = min(32, nt - 32 * w)                # lanes in this warp

        def src(l):
            return v[base + l] if l < size else v[g]

        assert down1[g] == (src(ln + 1) if ln + 1 < 32 else v[g])
        assert down5[g] == (src(ln + 5) if ln + 5 < 32 else v[g])
        assert down16[g] == (src(ln + 16) if ln + 16 < 32 else v[g])
        assert xor3[g] == src(ln ^ 3)
        assert idx7[g] == src(7)
        assert bal[g] == sum(1 << l for l in range(size) if int(v[base + l]) % 3 == 0)
        assert lane[g] == ln and warp[g] == w
    assert down1.dtype == dtype


def test_fma_rounds_once_rn_ops_ieee():
    a, b = 1 + 2.0**-30, 1 - 2.0**-30
    assert I.fma(a, b, -1.0) == -2.0**-60
    a32 = np.float32(1 + 2.0**-12)                 # a*a + 2^-80 lies just above an FP32 tie
    r = I.fma(a32, a32, np.float32(2.0**-80))
    assert isinstance(r, np.float32) and float(r) == 1 + 2.0**-11 + 2.0**-23
    rng = np.random.default_rng(1)
    for dt in F:
        x, y, z = rng.standard_normal((3, 50)).astype(dt)
        for p, q, s in zip(x, y, z):
            exact = Fraction(float(p)) * Fraction(float(q)) + Fraction(float(s))
            want = dt(float(exact)) if dt is np.float64 else pyeft._round_f32(exact)
            assert same_bits(np.array([I.fma(p, q, s)], dt), np.array([want], dt))
            assert same_bits(np.array([I.add_rn(p, q)], dt), np.array([p + q], dt))
            assert same_bits(np.array([I.sub_rn(p, q)], dt), np.array([p - q], dt))
            assert same_bits(np.array([I.mul_rn(p, q)], dt), np.array([p * q], dt))


@cuda.jit
def _eft_probe(a, b, out):
    i = cuda.grid(1)
    if i < a.size:
        s, e = ceft.two_sum(a[i], b[i])
        p, f = ceft.two_prod(a[i], b[i])
        h, lo = ceft.split(a[i])
        d, g = ceft.two_prod_dekker(a[i], b[i])
        out[i, 0] = s
        out[i, 1] = e
        out[i, 2] = p
        out[i, 3] = f
        out[i, 4] = h
        out[i, 5] = lo
        out[i, 6] = d
        out[i, 7] = g
        out[i, 8] = ceft.sqrt_pair(abs(s), e * 0)
        out[i, 9] = ceft.round_pair(p, f)


@pytest.mark.parametrize("dtype", F)
def test_cuda_efts_are_the_python_ones(dtype):
    """kernels/eft.py compiled for CUDA (specialise + _intrin) == the Python target."""
    rng = np.random.default_rng(2)
    scale = 2.0 ** rng.integers(-20, 20, 40)
    a = (rng.standard_normal(40) * scale).astype(dtype)
    b = (rng.standard_normal(40) / scale).astype(dtype)
    a[:3] = [1e8, 1.0, 3.0]
    b[:3] = [1.0, 2.0**-40, 1 / 3]
    out = np.zeros((40, 10), dtype)
    _eft_probe[2, 32](a, b, out)
    for i in range(40):
        want = (*pyeft.two_sum(a[i], b[i]), *pyeft.two_prod(a[i], b[i]), *pyeft.split(a[i]),
                *pyeft.two_prod_dekker(a[i], b[i]),
                pyeft._sqrt_pair(abs(pyeft.two_sum(a[i], b[i])[0]), dtype(0)),
                pyeft._round_pair(*pyeft.two_prod(a[i], b[i])))
        assert same_bits(out[i], np.array(want, dtype)), i


# ===================================================================== BLAS-1

def _vecs(dtype, k, seed, n=N):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n).astype(dtype) for _ in range(k)]


UPDATES = {
    "axpy": (lambda a, b, v: (0.7, v[0], v[1]), (1,)),
    "xpay": (lambda a, b, v: (v[0], -1.3, v[1]), (1,)),
    "axpby": (lambda a, b, v: (0.3, v[0], -2.5, v[1]), (1,)),
    "waxpy": (lambda a, b, v: (0.7, v[0], v[1], v[2]), (2,)),
    "axpy2": (lambda a, b, v: (0.7, v[0], v[1], -0.2, v[2], v[3]), (1, 3)),
    "bicg_dir": (lambda a, b, v: (v[0], 0.9, 0.4, v[1], v[2]), (2,)),
    "scal": (lambda a, b, v: (1 / 3, v[0]), (0,)),
}


@pytest.mark.parametrize("dtype", F)
@pytest.mark.parametrize("op", sorted(UPDATES))
def test_updates_bitwise_reference(op, dtype):
    make, written = UPDATES[op]
    g = _vecs(dtype, 4, 3)
    r = [v.copy() for v in g]
    lookup("gpu", op, (dtype,))(*make(None, None, g))
    lookup("reference", op, (dtype,))(*make(None, None, r))
    for i in written:
        assert same_bits(g[i], r[i]), (op, i)


@pytest.mark.parametrize("src", F)
@pytest.mark.parametrize("dst", F)
def test_copy_casts_bitwise(src, dst):
    x = _vecs(src, 1, 4)[0] * src(1e3)
    g, r = np.zeros(N, dst), np.zeros(N, dst)
    lookup("gpu", "copy", (src, dst))(x, g)
    lookup("reference", "copy", (src, dst))(x, r)
    assert same_bits(g, r)


def test_dmul_all_combinations_bitwise():
    for d in F:
        for x in F:
            for o in F:
                dv, xv = _vecs(d, 1, 5)[0], _vecs(x, 1, 6)[0]
                g, r = np.zeros(N, o), np.zeros(N, o)
                lookup("gpu", "dmul", (d, x, o))(dv, xv, g)
                lookup("reference", "dmul", (d, x, o))(dv, xv, r)
                assert same_bits(g, r), (d, x, o)


@pytest.mark.parametrize("dtype", F)
def test_maxpy_lincomb(dtype):
    """maxpy: bitwise the CPU kernel (same order, no contraction), within rounding of the
    reference's GEMV; lincomb within rounding.  Coefficients on the host (as GMRES has
    them) and on the device."""
    k = 4
    rng = np.random.default_rng(7)
    V = rng.standard_normal((k + 1, N)).astype(dtype)
    h = rng.standard_normal(k + 1)
    w = rng.standard_normal(N).astype(dtype)
    g, c, r = w.copy(), w.copy(), w.copy()
    lookup("gpu", "maxpy", (dtype,))(V, k, h, g)
    cpu_blas1.maxpy(V, k, h, c)
    lookup("reference", "maxpy", (dtype,))(V, k, h, r)
    assert same_bits(g, c)
    scale = np.abs(h[:k]) @ np.abs(V[:k].astype(np.float64)) + np.abs(w)
    assert np.all(np.abs(g.astype(np.float64) - r) <= 2 * (k + 1) * U[dtype] * scale)
    for coef in (h, cuda.to_device(h)):
        lg, lr = np.zeros(N, dtype), np.zeros(N, dtype)
        lookup("gpu", "lincomb", (dtype,))(V, coef, k, lg)
        lookup("reference", "lincomb", (dtype,))(V, h, k, lr)
        bound = 2 * (k + 1) * U[dtype] * (np.abs(h[:k]) @ np.abs(V[:k].astype(np.float64)))
        assert np.all(np.abs(lg.astype(np.float64) - lr) <= bound)


# ===================================================================== reductions

def _gamma(n, u):
    return ref.gamma(n, u)


@pytest.mark.parametrize("dtype", F)
def test_reductions_against_reference(dtype):
    x, y = _vecs(dtype, 2, 8, n=300)
    u, n = U[dtype], 300
    exact = ref.exact_dot(x, y)
    absdot = ref.exact_dot(np.abs(x), np.abs(y))
    d2 = lookup("gpu", "dot", (dtype,), "compensated")(x, y)
    assert abs(Fraction(d2) - exact) <= dot2_bound(exact, absdot, n, u)
    d1 = lookup("gpu", "dot", (dtype,), "native")(x, y)
    assert abs(Fraction(d1) - exact) <= Fraction(_gamma(n, u)) * absdot
    # norms: compensated within 2 ulp of the correctly rounded reference, native gamma_n
    n2 = lookup("gpu", "nrm2", (dtype,), "compensated")(x)
    rn = lookup("reference", "nrm2", (dtype,), "compensated")(x)
    assert abs(n2 - rn) <= 2 * u * rn * 2
    n1 = lookup("gpu", "nrm2", (dtype,), "native")(x)
    assert abs(n1 - rn) <= (_gamma(n, u) + 2 * u) * rn
    # sums
    s_exact = ref.exact_sum(x)
    s_abs = ref.exact_sum(np.abs(x))
    s2 = lookup("gpu", "sum", (dtype,), "compensated")(x)
    g1 = _gamma(n - 1, u)
    assert abs(Fraction(s2) - s_exact) <= Fraction(u) * abs(s_exact) + Fraction(g1 * g1) * s_abs
    s1 = lookup("gpu", "sum", (dtype,), "native")(x)
    assert abs(Fraction(s1) - s_exact) <= Fraction(g1) * s_abs


@pytest.mark.parametrize("mode", ["native", "compensated"])
@pytest.mark.parametrize("dtype", F)
def test_mdot_rows_are_dots(mode, dtype):
    """mdot's row i is bitwise dot(V[i], w) (same chunks, same tree), stored in FP64."""
    rng = np.random.default_rng(9)
    k = 3
    V = rng.standard_normal((k + 1, 150)).astype(dtype)
    w = rng.standard_normal(150).astype(dtype)
    out = np.full(k + 1, -7.0)
    lookup("gpu", "mdot", (dtype,), mode)(V, k, w, out)
    dot = lookup("gpu", "dot", (dtype,), mode)
    assert [out[i] for i in range(k)] == [dot(V[i], w) for i in range(k)]
    assert out[k] == -7.0                                    # rows >= k untouched
    dev = cuda.to_device(np.zeros(k))                        # a device ``out`` too
    lookup("gpu", "mdot", (dtype,), mode)(V, k, w, dev)
    assert same_bits(dev.copy_to_host(), out[:k])


@pytest.mark.parametrize("dtype", F)
def test_axpy2_nrm2_is_axpy2_then_nrm2(dtype):
    x, y, u, v = _vecs(dtype, 4, 10, n=200)
    y2, v2 = y.copy(), v.copy()
    nrm = lookup("gpu", "axpy2_nrm2", (dtype,), "native")(0.4, x, y, -0.6, u, v)
    lookup("reference", "axpy2", (dtype,))(0.4, x, y2, -0.6, u, v2)
    assert same_bits(y, y2) and same_bits(v, v2)
    assert nrm == lookup("gpu", "nrm2", (dtype,), "native")(v)


def test_empty_and_tiny_vectors():
    for dtype in F:
        z = np.zeros(0, dtype)
        for mode in ("native", "compensated"):
            assert lookup("gpu", "dot", (dtype,), mode)(z, z) == 0.0
            assert lookup("gpu", "nrm2", (dtype,), mode)(z) == 0.0
        one = np.array([3.0], dtype)
        assert lookup("gpu", "dot", (dtype,), "compensated")(one, one) == 9.0
        assert lookup("gpu", "nrm2", (dtype,), "native")(one) == 3.0


# --- ill-conditioned: ORO's bound, and the native dot missing it --------------------------

#: Condition numbers where ORO's bound is far below |x.y| (gamma_n^2 cond << 1 at n = 120),
#: so "within the bound" means accurate and the native dot visibly misses it.
CASES = [(np.float64, 1e16), (np.float64, 1e25), (np.float32, 1e7), (np.float32, 1e9)]


@pytest.mark.parametrize("dtype,cond", CASES)
def test_dot2_ill_conditioned_within_oro_bound(dtype, cond):
    rng = np.random.default_rng(int(math.log10(cond)))
    n = 120
    x, y, exact, c = gen_dot(n, cond, rng, dtype)
    absdot = ref.exact_dot(np.abs(x), np.abs(y))
    bound = dot2_bound(exact, absdot, n, U[dtype])
    d2 = lookup("gpu", "dot", (dtype,), "compensated")(x, y)
    assert abs(Fraction(d2) - exact) <= bound, (c, float(d2), float(exact))
    d1 = lookup("gpu", "dot", (dtype,), "native")(x, y)
    assert abs(Fraction(d1) - exact) > bound, "the native dot should miss Dot2's bound"


@pytest.mark.parametrize("dtype,cond", [(np.float64, 1e25), (np.float32, 1e10)])
def test_sum2_and_levels_ill_conditioned(dtype, cond, small_chunks):
    """With chunks of 16 (a merge level): Dot2 still within the bound, and Sum2 of the
    exact split products (hi, lo of each x_i y_i: their sum is x.y) within Sum2's."""
    rng = np.random.default_rng(5)
    n = 120
    x, y, exact, _ = gen_dot(n, cond, rng, dtype)
    absdot = ref.exact_dot(np.abs(x), np.abs(y))
    d2 = lookup("gpu", "dot", (dtype,), "compensated")(x, y)
    assert abs(Fraction(d2) - exact) <= dot2_bound(exact, absdot, n, U[dtype])
    if dtype is np.float64:
        p, e = ref.two_prod_exact(x, y)
        terms = np.concatenate([p, e])
    else:                                   # FP32 products split exactly into two FP32s
        p64 = x.astype(np.float64) * y.astype(np.float64)
        hi = p64.astype(np.float32)
        terms = np.concatenate([hi, (p64 - hi).astype(np.float32)])
    assert ref.exact_sum(terms) == exact
    u, m = U[dtype], terms.size
    g = _gamma(m - 1, u)
    s2 = lookup("gpu", "sum", (dtype,), "compensated")(terms)
    s_abs = ref.exact_sum(np.abs(terms))
    assert abs(Fraction(s2) - exact) <= Fraction(u) * abs(exact) + Fraction(g * g) * s_abs
    s1 = lookup("gpu", "sum", (dtype,), "native")(terms)
    assert abs(Fraction(s1) - exact) > Fraction(u) * abs(exact) + Fraction(g * g) * s_abs


# --- reproducibility: launch configuration, and a model of the tree -----------------------

@pytest.mark.parametrize("dtype", F)
@pytest.mark.parametrize("mode", ["native", "compensated"])
def test_same_bits_any_launch_configuration(mode, dtype, small_chunks):
    """n = 300 in chunks of 16: 19 chunks over 1 warp (1 x 32) or 6 warps (3 x 64), a merge
    level, a final warp; the results are bitwise the same, and the model's."""
    x, y = _vecs(dtype, 2, 11, n=300)
    x[::7] *= dtype(1e6)                                # make the order matter
    calls = {"dot": lambda: lookup("gpu", "dot", (dtype,), mode)(x, y),
             "nrm2": lambda: lookup("gpu", "nrm2", (dtype,), mode)(x),
             "sum": lambda: lookup("gpu", "sum", (dtype,), mode)(x)}
    for op, call in calls.items():
        with _launch.override(threads=32, blocks=1):
            a = call()
        with _launch.override(threads=64, blocks=3):
            b = call()
        want = model(op, mode, x, x if op == "nrm2" else y, 16)
        assert same_bits(np.float64(a), np.float64(b)), (op, a, b)
        assert same_bits(np.float64(a), np.float64(want)), (op, a, want)


def test_mdot_axpy2_nrm2_same_bits_any_launch_configuration(small_chunks):
    rng = np.random.default_rng(12)
    V = rng.standard_normal((3, 200))
    w = rng.standard_normal(200)
    res = []
    for cfg in ((32, 1), (64, 3)):
        with _launch.override(*cfg):
            o2, o1 = np.zeros(2), np.zeros(2)
            lookup("gpu", "mdot", (np.float64,), "compensated")(V, 2, w, o2)
            lookup("gpu", "mdot", (np.float64,), "native")(V, 2, w, o1)
            y, v = w.copy(), V[2].copy()
            nv = lookup("gpu", "axpy2_nrm2", (np.float64,), "native")(0.5, V[0], y, -0.5, V[1], v)
            res.append((o2, o1, y, v, np.float64(nv)))
    for a, b in zip(*res):
        assert same_bits(a, b)
    assert list(res[0][0]) == [model("dot", "compensated", V[i], w, 16) for i in range(2)]


# ===================================================================== host ops, coverage

def test_range_scan_givens_back_substitute():
    for dtype in F:
        v = np.array([0.0, 1.0, -3e5, 1e-30, np.nan, 2.0], dtype)
        for big, tiny in ((1e5, 1e-20), (1e6, 1e-40), (0.5, 1e-35)):
            assert (lookup("gpu", "range_scan", (dtype,))(v, big, tiny)
                    == lookup("reference", "range_scan", (dtype,))(v, big, tiny))
    rng = np.random.default_rng(13)
    H = rng.standard_normal((5, 4))
    H2 = H.copy()
    cs, sn, g = np.zeros(4), np.zeros(4), np.zeros(5)
    cs2, sn2, g2 = cs.copy(), sn.copy(), g.copy()
    g[0] = g2[0] = 1.0
    for j in range(4):
        a = lookup("gpu", "givens", ("float64",))(H, cs, sn, g, j)
        b = lookup("reference", "givens", ("float64",))(H2, cs2, sn2, g2, j)
        assert a == pytest.approx(b, rel=1e-14)
    y, y2 = np.zeros(4), np.zeros(4)
    lookup("gpu", "back_substitute", ("float64",))(H, g, 4, y)
    lookup("reference", "back_substitute", ("float64",))(H2, g2, 4, y2)
    np.testing.assert_allclose(y, y2, rtol=1e-12)


def test_every_owned_gpu_kernel_is_registered_and_tested():
    """All keys and modes of the contract for the ops of this file are registered on "gpu"
    (the host set-up ops excepted), and every key registered by these modules is one of
    those ops (so nothing registered goes untested here)."""
    from mpsolve.kernels.primitives import CONTRACT

    have = set(available("gpu"))
    for op in CONTRACT:
        if op.name not in MY_OPS:
            continue
        for key in op.keys:
            for mode in op.modes:
                assert ("gpu", op.name, key, mode) in have, (op.name, key, mode)
    for (_, name, key, mode) in have:
        f = lookup("gpu", name, key, mode)
        if f.__module__ in MY_MODULES:
            assert name in MY_OPS, name


# ===================================================================== a Krylov method

def _cg(device, A, b, mode):
    from mpsolve._system import Workspace
    from mpsolve.kernels.primitives import bind_primitives
    from mpsolve.krylov.cg import cg_body

    ops = bind_primitives(device, np.float64, mode, np)

    def matvec_dot(p, q):
        q[:] = A @ p                                     # q = A p (host dense: not a gpu op)
        return ops.dot(p, q)                             # p . q

    sysobj = types.SimpleNamespace(ops=ops, matvec_dot=matvec_dot, psolve=None,
                                   workspace=Workspace(np), dtype=np.dtype(np.float64))
    x, r = np.zeros_like(b), b.copy()
    hist = []
    it, _, flag = cg_body(sysobj, x, r, 40, 1e-10 * np.linalg.norm(b), None, hist)
    return it, flag, x, hist


def test_cg_on_gpu_primitives_matches_reference():
    """The unchanged CG body on the gpu primitives: same iterations, residual histories
    within rounding of the reference device's, a true residual at the tolerance."""
    n = 12
    A = 2 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1)
    b = np.random.default_rng(14).standard_normal(n)
    it_g, flag_g, x_g, h_g = _cg("gpu", A, b, "compensated")
    it_r, flag_r, x_r, h_r = _cg("reference", A, b, "compensated")
    assert flag_g == flag_r == 0 and it_g == it_r
    np.testing.assert_allclose(h_g[:-1], h_r[:-1], rtol=1e-6)   # the last: rounding noise
    tol = 1e-10 * np.linalg.norm(b)
    assert h_g[-1] <= tol and h_r[-1] <= tol
    assert np.linalg.norm(b - A @ x_g) <= 1e-9 * np.linalg.norm(b)


def test_an_array_passed_twice_is_one_array():
    """BiCGSTAB's ``axpy2(alpha, p, x, omega, s, x)``: both updates land (on a GPU the two
    arguments are one pointer; the simulator is given the caller's memory, not copies)."""
    rng = np.random.default_rng(15)
    x, u, y = rng.standard_normal((3, 40))
    g, r = y.copy(), y.copy()
    lookup("gpu", "axpy2", (np.float64,))(0.5, x, g, 2.0, u, g)
    lookup("reference", "axpy2", (np.float64,))(0.5, x, r, 2.0, u, r)
    assert same_bits(g, r)


_ODD_SHAPE = (3, 5)                               # only the probe below allocates this shape


@cuda.jit
def _shared_probe(out):
    S = cuda.shared.array(_ODD_SHAPE, numba.float64)
    t = cuda.threadIdx.x
    S[t // 5, t % 5] = t
    cuda.syncthreads()
    acc = 0.0
    for i in range(15):
        acc += S[i // 5, i % 5]
    out[t] = acc


def test_a_block_has_one_shared_array(monkeypatch):
    """Every thread of a block sees the same ``cuda.shared.array``.  The simulator creates it
    with an unlocked check-then-store, so threads switched in between got arrays of their
    own (uninitialised: the block Gauss-Jordan's rare overflow in sim_setup); _intrin
    replaces that method with a locked one.  A slow allocation forces the switch: the
    simulator's own method splits the block, ours does not."""
    real_empty = np.empty

    def slow_empty(shape, dtype=float, *args, **kw):
        if tuple(np.atleast_1d(shape)) == _ODD_SHAPE:
            import time
            time.sleep(0.02)                      # every thread reaches the check meanwhile
            return np.full(shape, np.nan, dtype)
        return real_empty(shape, dtype, *args, **kw)

    monkeypatch.setattr(np, "empty", slow_empty)
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    out = np.zeros(15)
    _shared_probe[1, 15](out)
    assert np.all(out == sum(range(15))), out     # one array: every thread's sum is 105
    monkeypatch.setattr(FakeCUDAShared, "array", I._sim_shared_array)
    out[:] = 0.0
    _shared_probe[1, 15](out)
    assert np.isnan(out).any(), out               # the simulator's own: split, NaN read


def test_override_refuses_blocks_wider_than_the_launch_bounds():
    """The reductions are compiled with ``launch_bounds`` of ``THREADS`` threads: a wider
    forced block would fail to launch on a GPU (the simulator ignores the bounds)."""
    with pytest.raises(ValueError, match="at most 256"):
        with _launch.override(threads=2 * _launch.THREADS):
            pass
    with _launch.override(threads=_launch.THREADS) as cfg:
        assert cfg.threads == _launch.THREADS


def test_scratch_buffers_are_per_host_thread():
    """Two threads launching on one stream interleave their passes: one's final pass must
    not read the other's partials, so each thread has its own scratch buffers (one
    thread gets the same buffer back)."""
    import threading

    got = {}
    both = threading.Barrier(2)         # both alive at once: distinct thread idents

    def take(tag):
        got[tag] = (_launch.scratch("pv", 8, np.float64), _launch.scratch("pv", 8, np.float64))
        both.wait()

    threads = [threading.Thread(target=take, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a, b = got["a"], got["b"]
    assert a[0] is a[1] and b[0] is b[1]
    a[0][:] = 1.0
    b[0][:] = 2.0
    assert np.all(a[0].copy_to_host() == 1.0) and np.all(b[0].copy_to_host() == 2.0)


@pytest.mark.parametrize("mode", ["native", "compensated"])
def test_mdot_rows_beyond_the_grid_y_limit(mode, small_chunks, monkeypatch):
    """The row passes put the rows on grid.y (at most 65535 on a GPU): more rows run in
    slices, each row still bitwise its dot (here slices of 2 of 5 rows, with a level of
    partials between the passes)."""
    monkeypatch.setattr(R, "MAX_GRID_Y", 2)
    rng = np.random.default_rng(19)
    k = 5
    V = rng.standard_normal((k, 300))
    w = rng.standard_normal(300)
    out = np.zeros(k)
    lookup("gpu", "mdot", (np.float64,), mode)(V, k, w, out)
    dot = lookup("gpu", "dot", (np.float64,), mode)
    assert list(out) == [dot(V[i], w) for i in range(k)]


def test_scratch_of_ended_threads_is_dropped():
    """Buffers of host threads that have ended are forgotten at the next new buffer (a pool
    of short-lived threads kept one set each for good)."""
    import threading

    three = threading.Barrier(3)        # alive at once: three distinct idents

    def take():
        _launch.scratch("pv", 8, np.float64)
        three.wait()

    threads = [threading.Thread(target=take) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ended = {t.ident for t in threads}
    assert ended <= {k[2] for k in _launch._SCRATCH}
    _launch.scratch("fresh-name", 8, np.float64)           # a new buffer: the drop
    assert not ended & {k[2] for k in _launch._SCRATCH}
    assert not ended & {k[0][2] for k in _launch._SCRATCH_VIEWS}
