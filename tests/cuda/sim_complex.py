"""Complex64/complex128 ``"gpu"`` kernels under numba's CUDA simulator, against the CPU.

Run in its own process with ``NUMBA_ENABLE_CUDASIM=1`` (``tests/test_cuda.py`` does).  The
GPU kernels are field-generic (:mod:`mpsolve.kernels.cuda.field`): one body per kernel,
typed by the arrays.  Shown here for complex data:

* the BLAS-1 updates, casts and ``dmul`` **bit for bit** the CPU's (the same complex
  product rounding: two products, then one add/subtract per part), ``maxpy`` too,
  ``lincomb`` within rounding of the CPU's GEMV;
* ``dot`` native within ``gamma_2n sum |x_i| |y_i|`` of the exact ``x^H y`` (rationals);
  compensated within the complex Dot2 bound of the CPU's ``cdot2``
  (``u |x^H y| + sqrt(2) gamma_2n^2 sum |x_i| |y_i|`` per part) on ill-conditioned
  vectors the native dot misses; ``nrm2`` the real kernel on the ``2n`` parts (bitwise);
  ``mdot`` row ``i`` bitwise ``dot(V[i], w)``; ``axpy2_nrm2`` updates bitwise ``axpy2``;
  the same bits for several launch configurations;
* CSR ``spmv``/``residual``/``spmv_dot`` and BSR ``bsrmv`` with complex values within an
  eps-scaled row bound of the CPU, complex64 copies (``mixed``) included;
* ``range_scan``, ``givens``, ``back_substitute`` as the CPU;
* complex CG / GMRES / BiCGSTAB solves on device ``"gpu"`` (tiny ``n``) with Jacobi,
  Block-Jacobi and (Block-)ISAI (``bilu`` included; complex set-ups run on the host): the
  same ``info`` as the CPU, iteration counts within 10% (or 2), a certified FP64 true
  residual, the same ``x`` to 1e-6.
"""
from __future__ import annotations

import math
import sys
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from mpsolve.backend import cuda_simulator

if not cuda_simulator():  # collected by a normal run: tests/test_cuda.py runs it
    pytest.skip("needs NUMBA_ENABLE_CUDASIM=1 (run by tests/test_cuda.py in its own process)",
                allow_module_level=True)

import mpsolve  # noqa: E402
from mpsolve import backend  # noqa: E402
from mpsolve.kernels import available  # noqa: E402
from mpsolve.kernels.cuda import _launch, reduce as R  # noqa: E402
from mpsolve.kernels.primitives import CONTRACT  # noqa: E402
from mpsolve.kernels.registry import launch_plan, lookup  # noqa: E402

GPU, CPU = backend.GPU_DEVICE, backend.DEFAULT_DEVICE
C = (np.complex128, np.complex64)
U = {np.complex128: 2.0**-53, np.complex64: 2.0**-24}
N = 45                     # > 32: two warps; not a multiple of the warp


@pytest.fixture(autouse=True, scope="module")
def _fast_barriers():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(old)


def cvec(n, dtype, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)


def bits(a):
    a = np.asarray(a)
    return a.view(np.uint8)


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and np.array_equal(bits(a), bits(b))


def key(dtype):
    return (np.dtype(dtype).name,)


# ================================================================ registry

def test_gpu_registers_every_complex_key_the_cpu_has():
    """Every op the GPU registers, and the CPU registers complex keys for, has those complex
    keys on the GPU too, except the host set-up ops that the GPU runs itself for real data
    (the local solves: complex set-ups run on the host device).  (An op the GPU has for no
    dtype -- the ILU(0)/BILU(0) sweeps -- is not the GPU's for complex data either.)"""
    cpu = {k[1:] for k in available(CPU) if any(d.startswith("complex") for d in k[2])}
    gpu = {k[1:] for k in available(GPU)}
    gpu_ops = {k[0] for k in gpu}
    host_ops = {op.name for op in CONTRACT if op.host and op.name != "range_scan"}
    missing = sorted(k for k in cpu - gpu if k[0] not in host_ops and k[0] in gpu_ops)
    assert not missing, missing
    assert {k[0] for k in cpu - gpu} - host_ops == {"ilu_sweeps", "bilu_sweeps"}
    for op in CONTRACT:                       # and the contract's complex keys, mode by mode
        if op.complex and not op.host and op.name in gpu_ops:
            for k in op.ckeys:
                for mode in op.modes:
                    if (CPU, op.name, k, mode) in available(CPU):
                        assert (GPU, op.name, k, mode) in available(GPU), (op.name, k, mode)


# ================================================================ BLAS-1

UPDATES = {
    "axpy": lambda f, x, y, u, v: f(0.3 - 0.7j, x, y),
    "xpay": lambda f, x, y, u, v: f(x, -1.25 + 0.5j, y),
    "axpby": lambda f, x, y, u, v: f(0.1 + 2j, x, -0.75 - 0.3j, y),
    "waxpy": lambda f, x, y, u, v: f(1.5j, x, u, y),
    "axpy2": lambda f, x, y, u, v: f(0.2 - 0.1j, x, y, -0.4 + 1j, u, v),
    "bicg_dir": lambda f, x, y, u, v: f(x, 0.9 + 0.1j, -0.3 + 0.2j, u, y),
    "scal": lambda f, x, y, u, v: f(-0.6 + 0.8j, y),
}


@pytest.mark.parametrize("dtype", C)
@pytest.mark.parametrize("op", sorted(UPDATES))
def test_updates_bitwise_cpu(op, dtype):
    x, y, u, v = (cvec(N, dtype, s) for s in (1, 2, 3, 4))
    out = {}
    for dev in (GPU, CPU):
        yy, vv = y.copy(), v.copy()
        UPDATES[op](lookup(dev, op, key(dtype)), x, yy, u, vv)
        out[dev] = (yy, vv)
    assert same_bits(out[GPU][0], out[CPU][0]) and same_bits(out[GPU][1], out[CPU][1])
    assert not (same_bits(out[GPU][0], y) and same_bits(out[GPU][1], v))   # it did update


def test_copy_and_dmul_casts_bitwise_cpu():
    for src in C:
        for dst in C:
            x = cvec(N, src, 5) * np.asarray(1e-3, src)
            og, oc = np.zeros(N, dst), np.zeros(N, dst)
            lookup(GPU, "copy", key(src) + key(dst))(x, og)
            lookup(CPU, "copy", key(src) + key(dst))(x, oc)
            assert same_bits(og, oc)
    for d in C:
        for xt in C:
            for o in C:
                dv, x = cvec(N, d, 6), cvec(N, xt, 7)
                og, oc = np.zeros(N, o), np.zeros(N, o)
                lookup(GPU, "dmul", key(d) + key(xt) + key(o))(dv, x, og)
                lookup(CPU, "dmul", key(d) + key(xt) + key(o))(dv, x, oc)
                assert same_bits(og, oc), (d, xt, o)


@pytest.mark.parametrize("dtype", C)
def test_maxpy_bitwise_lincomb_within_rounding(dtype):
    k = 3
    V = np.stack([cvec(N, dtype, 10 + i) for i in range(4)])
    h = np.array([0.5 - 1j, -2 + 0.25j, 1j, 7.0], dtype=np.complex128)
    w = cvec(N, dtype, 20)
    wg, wc = w.copy(), w.copy()
    lookup(GPU, "maxpy", key(dtype))(V, k, h, wg)
    lookup(CPU, "maxpy", key(dtype))(V, k, h, wc)
    assert same_bits(wg, wc)
    og, oc = np.zeros(N, dtype), np.zeros(N, dtype)
    lookup(GPU, "lincomb", key(dtype))(V, h, k, og)
    lookup(CPU, "lincomb", key(dtype))(V, h, k, oc)
    scale = np.abs(V[:k]).T @ np.abs(h[:k].astype(dtype))
    assert np.all(np.abs(og - oc) <= 4 * k * U[dtype] * scale)


# ================================================================ reductions

def exact_cdot(x, y):
    """``x^H y`` exactly (rationals), as a pair of Fractions."""
    re = sum((Fraction(float(a.real)) * Fraction(float(b.real))
              + Fraction(float(a.imag)) * Fraction(float(b.imag)) for a, b in zip(x, y)),
             Fraction(0))
    im = sum((Fraction(float(a.real)) * Fraction(float(b.imag))
              - Fraction(float(a.imag)) * Fraction(float(b.real)) for a, b in zip(x, y)),
             Fraction(0))
    return re, im


def _gamma(n, u):
    return n * u / (1 - n * u)


def _errors(z, exact):
    return (abs(Fraction(z.real) - exact[0]), abs(Fraction(z.imag) - exact[1]))


def ill_conditioned(n, dtype, seed):
    """Complex vectors whose ``x^H y`` cancels: ``x = [a, -a, e]``-style with large,
    opposite terms in both parts and a small remainder."""
    rng = np.random.default_rng(seed)
    rdt = np.dtype(dtype).type(0).real.dtype
    big = 1e12 if rdt == np.float64 else 1e5
    m = (n - 4) // 2
    a = (rng.standard_normal(m) + 1j * rng.standard_normal(m)) * big
    b = rng.standard_normal(m) + 1j * rng.standard_normal(m)
    t = rng.standard_normal(n - 2 * m) + 1j * rng.standard_normal(n - 2 * m)
    x = np.concatenate([a, a, t]).astype(dtype)
    y = np.concatenate([b, -b, np.ones(n - 2 * m) * (1 + 1j)]).astype(dtype)
    p = rng.permutation(n)
    return x[p], y[p]


@pytest.mark.parametrize("dtype", C)
def test_dots_within_their_bounds(dtype):
    u = U[dtype]
    n = N
    x, y = ill_conditioned(n, dtype, 3)
    exact = exact_cdot(x, y)
    s = sum(Fraction(float(abs(complex(a)))) * Fraction(float(abs(complex(b))))
            for a, b in zip(x, y))
    nat = lookup(GPU, "dot", key(dtype), "native")(x, y)
    comp = lookup(GPU, "dot", key(dtype), "compensated")(x, y)
    assert isinstance(nat, complex) and isinstance(comp, complex)
    for e in _errors(nat, exact):
        assert e <= Fraction(_gamma(2 * n, u)) * s * 2
    exact_abs = max(abs(exact[0]), abs(exact[1]))
    bound = Fraction(u) * exact_abs + Fraction(math.sqrt(2) * _gamma(2 * n, u) ** 2) * s
    for e in _errors(comp, exact):
        assert e <= bound
    # the native dot misses the compensated bound here (the test can fail)
    assert any(e > bound for e in _errors(nat, exact))
    # and the CPU's cdot2 meets the same bound
    for e in _errors(lookup(CPU, "dot", key(dtype), "compensated")(x, y), exact):
        assert e <= bound


@pytest.mark.parametrize("mode", ["native", "compensated"])
@pytest.mark.parametrize("dtype", C)
def test_nrm2_mdot_axpy2_nrm2(mode, dtype):
    x = cvec(N, dtype, 8)
    rdt = np.dtype(dtype).type(0).real.dtype
    nr = lookup(GPU, "nrm2", key(dtype), mode)(x)
    assert nr == lookup(GPU, "nrm2", (rdt.name,), mode)(x.view(rdt))   # the 2n parts
    assert nr == pytest.approx(float(np.linalg.norm(x.astype(np.complex128))),
                               rel=4 * U[dtype] * N)
    V = np.stack([cvec(N, dtype, 30 + i) for i in range(3)])
    w = cvec(N, dtype, 40)
    out = np.zeros(3, np.complex128)
    lookup(GPU, "mdot", key(dtype), mode)(V, 3, w, out)
    dot = lookup(GPU, "dot", key(dtype), mode)
    for i in range(3):
        assert out[i] == dot(V[i], w)                     # bitwise the dot of row i
    if mode == "native":
        x, y, u, v = (cvec(N, dtype, s) for s in (1, 2, 3, 4))
        y1, v1, y2, v2 = y.copy(), v.copy(), y.copy(), v.copy()
        nv = lookup(GPU, "axpy2_nrm2", key(dtype), mode)(0.5 + 1j, x, y1, -2j, u, v1)
        lookup(GPU, "axpy2", key(dtype))(0.5 + 1j, x, y2, -2j, u, v2)
        assert same_bits(y1, y2) and same_bits(v1, v2)
        assert nv == pytest.approx(lookup(GPU, "nrm2", key(dtype), mode)(v2),
                                   rel=4 * U[dtype] * N)


@pytest.mark.parametrize("mode", ["native", "compensated"])
def test_complex_dot_same_bits_any_launch_configuration(mode, monkeypatch):
    monkeypatch.setattr(R, "CHUNK", 16)                   # several chunks and a merge level
    x, y = cvec(300, np.complex128, 1), cvec(300, np.complex128, 2)
    f = lookup(GPU, "dot", ("complex128",), mode)
    with _launch.override(threads=32, blocks=1):
        a = f(x, y)
    with _launch.override(threads=64, blocks=3):
        b = f(x, y)
    assert a == b
    assert a == pytest.approx(complex(np.vdot(x, y)), rel=1e-13)


def test_range_scan_givens_back_substitute_as_the_cpu():
    for dtype in C:
        v = np.array([0, 1 + 1j, -3e5j, 1e-30, 2.0, 1e-30 + 1e5j], dtype)
        for big, tiny in ((1e5, 1e-20), (1e6, 1e-40), (0.5, 1e-35)):
            assert (lookup(GPU, "range_scan", key(dtype))(v, big, tiny)
                    == lookup(CPU, "range_scan", key(dtype))(v, big, tiny))
    rng = np.random.default_rng(13)
    H = rng.standard_normal((5, 4)) + 1j * rng.standard_normal((5, 4))
    H2 = H.copy()
    cs, sn, g = np.zeros(4, complex), np.zeros(4, complex), np.zeros(5, complex)
    cs2, sn2, g2 = cs.copy(), sn.copy(), g.copy()
    g[0] = g2[0] = 1.0
    for j in range(4):
        a = lookup(GPU, "givens", ("complex128",))(H, cs, sn, g, j)
        b = lookup(CPU, "givens", ("complex128",))(H2, cs2, sn2, g2, j)
        assert a == b
    y, y2 = np.zeros(4, complex), np.zeros(4, complex)
    lookup(GPU, "back_substitute", ("complex128",))(H, g, 4, y)
    lookup(CPU, "back_substitute", ("complex128",))(H2, g2, 4, y2)
    assert same_bits(y, y2)


# ================================================================ sparse products

def cmatrix(n, dtype, seed, density=0.15):
    A = sp.random(n, n, density=density, random_state=seed, format="csr")
    B = sp.random(n, n, density=density, random_state=seed + 1, format="csr")
    A = (A + 1j * B + sp.eye(n)).tocsr().astype(dtype)
    A.sort_indices()
    A.indices = A.indices.astype(np.int32)
    A.indptr = A.indptr.astype(np.int32)
    return A


def _row_bound(A, x, y_ref, u_acc, u_y, width):
    absAx = abs(A).astype(np.float64) @ np.abs(x).astype(np.float64)
    lens = np.diff(A.indptr)
    return 4 * (lens + math.log2(width) + 2) * u_acc * absAx + 2 * u_y * np.abs(y_ref)


MIX = [(v, a, b) for v in C for a in C for b in C]


@pytest.mark.parametrize("mode", ["acc64", "acc32"])
@pytest.mark.parametrize("dts", MIX, ids=lambda d: "-".join(np.dtype(t).name for t in d))
def test_csr_spmv_and_residual_within_row_bound(dts, mode):
    v, xt, yt = dts
    n = 40
    A = cmatrix(n, v, 3)
    A.data[:3] = 0                                          # explicit zeros kept
    x = cvec(n, xt, 4)
    plan = launch_plan(GPU, "spmv", A.indptr)
    k = tuple(np.dtype(t).name for t in dts)
    yg, yc = np.full(n, np.nan, yt), np.full(n, np.nan, yt)
    lookup(GPU, "spmv", k, mode)(plan, A.indptr, A.indices, A.data, x, yg)
    lookup(CPU, "spmv", k, mode)(launch_plan(CPU, "spmv", A.indptr), A.indptr, A.indices,
                                 A.data, x, yc)
    u_acc = 2.0**-53 if mode == "acc64" else 2.0**-24
    bound = _row_bound(A, x, yc, u_acc, U[yt], plan.width)
    assert np.all(np.abs(yg.astype(np.complex128) - yc) <= bound)
    if mode == "acc64" and xt == yt:
        b = cvec(n, xt, 5)
        rg, rc = np.zeros(n, xt), np.zeros(n, xt)
        kk = k[:2] + (k[1], k[1])
        lookup(GPU, "residual", kk, mode)(plan, A.indptr, A.indices, A.data, x, b, rg)
        lookup(CPU, "residual", kk, mode)(launch_plan(CPU, "spmv", A.indptr), A.indptr,
                                          A.indices, A.data, x, b, rc)
        assert np.all(np.abs(rg.astype(np.complex128) - rc)
                      <= bound + 2 * U[xt] * np.abs(b))


@pytest.mark.parametrize("v,d", [(v, d) for v in C for d in C])
def test_spmv_dot_is_spmv_then_the_conjugated_dot(v, d):
    n = 70
    A = cmatrix(n, v, 7)
    x = cvec(n, d, 8)
    plan = launch_plan(GPU, "spmv", A.indptr)
    k = (np.dtype(v).name, np.dtype(d).name, np.dtype(d).name)
    y1, y2 = np.zeros(n, d), np.zeros(n, d)
    s = lookup(GPU, "spmv_dot", k, "acc64")(plan, A.indptr, A.indices, A.data, x, y1)
    lookup(GPU, "spmv", k, "acc64")(plan, A.indptr, A.indices, A.data, x, y2)
    assert isinstance(s, complex) and same_bits(y1, y2)   # y: the SpMV's bits
    ref = complex(np.vdot(x.astype(np.complex128), y1.astype(np.complex128)))
    scale = float(np.abs(x).astype(np.float64) @ np.abs(y1).astype(np.float64))
    assert abs(s - ref) <= 4 * _gamma(2 * n, U[d]) * scale
    yc = np.zeros(n, d)
    sc = lookup(CPU, "spmv_dot", k, "acc64")(launch_plan(CPU, "spmv", A.indptr), A.indptr,
                                             A.indices, A.data, x, yc)
    assert abs(s - sc) <= 8 * _gamma(2 * n, U[d]) * scale


@pytest.mark.parametrize("mode", ["acc64", "acc32"])
@pytest.mark.parametrize("b", [1, 3, 4])
def test_bsrmv_within_row_bound(b, mode):
    nb = 9
    n = nb * b - (1 if b > 1 else 0)                        # a partial last block
    for v, xt, yt in [(np.complex128,) * 3, (np.complex64, np.complex128, np.complex128),
                      (np.complex64,) * 3]:
        A = cmatrix(nb * b, np.complex128, 11, density=0.2).tobsr(blocksize=(b, b))
        A.sort_indices()
        data = np.ascontiguousarray(A.data.astype(v))
        ip, ix = A.indptr.astype(np.int32), A.indices.astype(np.int32)
        x = cvec(n, xt, 12)
        k = tuple(np.dtype(t).name for t in (v, xt, yt))
        yg, yc = np.full(n, np.nan, yt), np.full(n, np.nan, yt)
        lookup(GPU, "bsrmv", k, mode)(launch_plan(GPU, "bsrmv", ip), ip, ix, data, x, yg)
        lookup(CPU, "bsrmv", k, mode)(launch_plan(CPU, "bsrmv", ip), ip, ix, data, x, yc)
        S = sp.bsr_matrix((data.astype(np.complex128), ix, ip),
                          shape=(nb * b, nb * b)).tocsr()[:n, :n]
        u_acc = 2.0**-53 if mode == "acc64" else 2.0**-24
        absAx = abs(S) @ np.abs(x).astype(np.float64)
        bound = 4 * (nb * b + 8) * u_acc * absAx + 2 * U[yt] * np.abs(yc)
        assert np.all(np.abs(yg.astype(np.complex128) - yc) <= bound), (b, k)


# ================================================================ solves on "gpu"

def _within(a, b):
    return abs(a - b) <= max(2, 0.1 * max(a, b))


SOLVES = [
    ("cg", "hpd", "jacobi", {}, "mixed"),
    ("cg", "hpd", "isai", {}, "mixed"),
    ("gmres", "helmholtz", "block-jacobi", {"block_size": 2}, "mixed"),
    ("gmres", "helmholtz", "block-isai", {"block_size": 2}, "mixed-eft"),   # complex Dot2
    ("gmres", "helmholtz", "block-isai", {"variant": "bilu", "block_size": 2}, "mixed"),
    ("bicgstab", "helmholtz", None, {}, "double"),
    ("bicgstab", "helmholtz", "isai", {}, "mixed"),
]


def _complex_problem(kind):
    from mpsolve.matrices import helmholtz2d, poisson2d
    if kind == "hpd":                              # Hermitian positive definite
        P = poisson2d(5).astype(np.complex128)     # n = 25
        n = P.shape[0]
        S = sp.diags([0.3j * np.ones(n - 1), -0.3j * np.ones(n - 1)], [1, -1])
        return (P + S).tocsr()
    return helmholtz2d(5, k=2.0, eps=0.5).tocsr()  # complex symmetric, non-Hermitian


@pytest.mark.parametrize("method,kind,pc,kw,prec", SOLVES,
                         ids=["-".join(filter(None, [c[0], c[1], c[2] or "none",
                                                     c[3].get("variant"), c[4]]))
                              for c in SOLVES])
def test_complex_solve_on_gpu_matches_cpu(method, kind, pc, kw, prec):
    A = _complex_problem(kind)
    n = A.shape[0]
    rng = np.random.default_rng(3)
    b = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    keep = b.copy()
    kw = dict(kw)
    if method == "gmres":
        kw["restart"] = 20
    res = {}
    for dev in (GPU, CPU):
        res[dev] = mpsolve.solve(A, b, method=method, precond=pc, precision=prec, rtol=1e-8,
                                 maxiter=400, device=dev, **kw)
    g, c = res[GPU], res[CPU]
    assert g.info == c.info == 0, (g.status, c.status)
    assert _within(g.iterations, c.iterations), (g.iterations, c.iterations)
    assert g.x.dtype == np.complex128 and type(g.x) is np.ndarray
    true = np.linalg.norm(b - A @ g.x) / np.linalg.norm(b)
    assert true <= 1e-8 * (1 + 1e-6)
    assert np.array_equal(b, keep)
    np.testing.assert_allclose(g.x, c.x, rtol=0, atol=1e-6 * np.linalg.norm(c.x))
