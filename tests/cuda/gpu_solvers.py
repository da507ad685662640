"""The CUDA backend on a real GPU: SpMV, the Block-ISAI set-up, DMMA and whole solves.

Run by ``tests/test_cuda.py`` (simulator off), skipped with the reason without a device.
The simulator files check the same kernels bit for bit on problems of a few dozen
unknowns; here they run on CuPy arrays at sizes where every launch path is taken (many
blocks, grid-stride loops, long rows, the cuBLAS batched GEMMs of the set-up):

* CSR and BSR SpMV (FP64; FP32 values and vectors; mixed) within the rounding bound of
  the FP64 product, and the same bits for two launch configurations;
* the double-double residual against exact rationals on a few rows;
* the DMMA helper's batched ``b x b`` products against ``numpy.matmul``;
* Block-ISAI / ISAI set up on the GPU apply like the CPU's;
* CG, GMRES and BiCGSTAB with Jacobi and Block-ISAI on CuPy arrays (and on
  ``cupyx.scipy.sparse`` input): converged, FP64 true residual certified on the host,
  the caller's array type back, iteration counts those of the CPU up to rounding noise.
"""
from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_checks import WHY  # noqa: E402  (one reason for every hardware file)

# a host array reaching a kernel is copied by numba at every launch: a defect here
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(WHY is not None, reason=str(WHY)),
              pytest.mark.filterwarnings("error:.*Host array used in CUDA kernel")]

U = {"float64": 2.0 ** -53, "float32": 2.0 ** -24}


def _cp():
    import cupy

    return cupy


def _random_csr(n, seed, mean=9, long_every=97, long_len=300):
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 2 * mean, size=n)
    lens[::long_every] = long_len                       # a few long rows: wide sub-warps
    lens[5::211] = 0                                    # empty rows
    rows = np.repeat(np.arange(n), lens)
    cols = rng.integers(0, n, size=rows.size)
    data = rng.standard_normal(rows.size) * np.exp(rng.uniform(-3, 3, rows.size))
    A = sp.csr_matrix((data, (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    A.sort_indices()
    return A


# --------------------------------------------------------------------------- SpMV
MAT = [("float64", "float64", "float64"), ("float32", "float32", "float32"),
       ("float32", "float64", "float64")]


@pytest.mark.parametrize("mode", ["acc64", "acc32"])
@pytest.mark.parametrize("dts", MAT, ids=lambda d: "-".join(t[5:] for t in d))
def test_csr_spmv_within_the_rounding_bound(mode, dts):
    from mpsolve.kernels.registry import launch_plan, lookup
    from mpsolve.kernels.cuda import _launch

    cp = _cp()
    vt, xt, yt = dts
    A = _random_csr(60_000, seed=1)
    ip, ix = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    d = A.data.astype(vt)
    x = np.random.default_rng(2).standard_normal(A.shape[0]).astype(xt)
    gip, gix, gd, gx = (cp.asarray(a) for a in (ip, ix, d, x))
    kern = lookup("gpu", "spmv", dts, mode)
    plan = launch_plan("gpu", "spmv", gip)
    y = cp.full(A.shape[0], cp.nan, dtype=yt)
    kern(plan, gip, gix, gd, gx, y)
    y2 = cp.full(A.shape[0], cp.nan, dtype=yt)
    with _launch.override(threads=64, blocks=3):
        kern(launch_plan("gpu", "spmv", gip), gip, gix, gd, gx, y2)
    yh = cp.asnumpy(y)
    assert np.array_equal(yh.view(np.uint8), cp.asnumpy(y2).view(np.uint8))
    exact = sp.csr_matrix((d.astype(np.float64), ix, ip), shape=A.shape) @ x.astype(np.float64)
    absax = sp.csr_matrix((np.abs(d.astype(np.float64)), ix, ip), shape=A.shape) \
        @ np.abs(x.astype(np.float64))
    acc = "float64" if mode == "acc64" else "float32"
    lens = np.diff(ip)
    bound = 2 * (lens + 7) * U[acc] * absax + 2 * U[yt] * np.abs(exact)
    err = np.abs(yh.astype(np.float64) - exact)
    assert np.all(err <= bound), float((err - bound).max())
    assert np.all(yh[lens == 0] == 0)


def test_bsr_spmv_within_the_rounding_bound():
    from mpsolve.kernels.registry import launch_plan, lookup

    cp = _cp()
    for b in (2, 3, 8):
        n = 4000 - 4000 % b
        A = _random_csr(n, seed=b, mean=4, long_len=40).tobsr(blocksize=(b, b))
        A.sort_indices()
        x = np.random.default_rng(3).standard_normal(A.shape[1])
        for vt in ("float64", "float32"):
            data = cp.asarray(np.ascontiguousarray(A.data, dtype=vt))
            ip, ix = cp.asarray(A.indptr.astype(np.int32)), cp.asarray(A.indices.astype(np.int32))
            y = cp.full(A.shape[0], cp.nan)
            plan = launch_plan("gpu", "bsrmv", ip)
            lookup("gpu", "bsrmv", (vt, "float64", "float64"), "acc64")(
                plan, ip, ix, data, cp.asarray(x), y)
            Ad = sp.bsr_matrix((A.data.astype(vt).astype(np.float64), A.indices, A.indptr),
                               shape=A.shape)
            exact = Ad @ x
            bound = 2 * (b * 40 + 8) * U["float64"] * (abs(Ad) @ np.abs(x)) + 1e-300
            assert np.all(np.abs(cp.asnumpy(y) - exact) <= bound), (b, vt)


def test_double_double_residual_against_rationals():
    from mpsolve.kernels.registry import launch_plan, lookup

    cp = _cp()
    A = _random_csr(5000, seed=7, mean=6, long_len=60)
    rng = np.random.default_rng(8)
    xh = rng.standard_normal(A.shape[0])
    xl = xh * 2.0 ** -60 * rng.standard_normal(A.shape[0])
    b = A @ xh                                           # heavy cancellation in b - A x
    ip, ix = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    g = [cp.asarray(a) for a in (ip, ix, A.data, xh, xl, b)]
    r, rl = cp.empty(A.shape[0]), cp.empty(A.shape[0])
    lookup("gpu", "residual_dd", ("float64",))(launch_plan("gpu", "spmv", g[0]), *g, r, rl)
    r, rl = cp.asnumpy(r), cp.asnumpy(rl)
    for i in rng.choice(np.flatnonzero(np.diff(ip) > 0), size=40, replace=False):
        lo, hi = int(ip[i]), int(ip[i + 1])
        exact = Fraction(b[i]) - sum(Fraction(A.data[k]) * (Fraction(xh[ix[k]]) + Fraction(xl[ix[k]]))
                                     for k in range(lo, hi))
        got = Fraction(r[i]) + Fraction(rl[i])
        scale = sum(abs(Fraction(A.data[k]) * Fraction(xh[ix[k]])) for k in range(lo, hi)) \
            + abs(Fraction(b[i]))
        # Dot2's bound: u |exact| + n^2 u^2 scale (with the low part, a few u^2 more)
        n = hi - lo + 2
        assert abs(got - exact) <= Fraction(U["float64"]) * abs(exact) \
            + Fraction(4 * n * n) * Fraction(U["float64"]) ** 2 * scale, i


def test_dmma_helper_products():
    from mpsolve.kernels.cuda import dmma

    cp = _cp()
    rng = np.random.default_rng(4)
    for b in (2, 3, 5, 8):
        A = rng.standard_normal((1000, b, b))
        B = rng.standard_normal((1000, b, b))
        C = rng.standard_normal((1000, b, b))
        got = cp.asnumpy(dmma.block_gemm(cp.asarray(A), cp.asarray(B), cp.asarray(C), -1.0))
        want = C - A @ B
        bound = 2 * (b + 2) * U["float64"] * (np.abs(C) + np.abs(A) @ np.abs(B))
        assert np.all(np.abs(got - want) <= bound), b


# --------------------------------------------------------------------------- set-up
@pytest.mark.parametrize("cls,kw", [("BlockISAI", {"block_size": 3}),
                                    ("BlockISAI", {"variant": "spd", "block_size": 3}),
                                    ("BlockISAI", {"variant": "bilu", "block_size": 3}),
                                    ("ISAI", {}), ("Jacobi", {})])
def test_preconditioner_set_up_on_gpu_applies_like_the_cpu(cls, kw):
    import mpsolve.precond as P
    from mpsolve.matrices import elasticity3d

    cp = _cp()
    A = elasticity3d(12)                                 # n = 5184, 3 unknowns a node
    r = np.random.default_rng(2).standard_normal(A.shape[0])
    Mg = getattr(P, cls)(**kw).setup(A, device="gpu")
    Mc = getattr(P, cls)(**kw).setup(A, device="cpu")
    zg = Mg.matvec(cp.asarray(r))
    assert isinstance(zg, cp.ndarray)
    zc = Mc.matvec(r)
    np.testing.assert_allclose(cp.asnumpy(zg), zc, rtol=2e-5, atol=1e-6 * np.abs(zc).max())


# --------------------------------------------------------------------------- solves
def _problem(kind):
    from mpsolve.matrices import convection_diffusion2d, elasticity3d, poisson3d

    if kind == "spd":
        return poisson3d(24)                             # n = 13824
    if kind == "elasticity":
        return elasticity3d(10)                          # n = 3000
    return convection_diffusion2d(100)                   # nonsymmetric, n = 10000


CASES = [
    ("cg", "spd", None, {}, "double"),
    ("cg", "spd", "jacobi", {}, "mixed-eft"),
    ("cg", "spd", "block-isai", {}, "mixed"),
    ("cg", "elasticity", "block-isai", {}, "mixed-eft"),
    ("gmres", "nonsym", None, {}, "double"),
    ("gmres", "nonsym", "jacobi", {}, "mixed"),
    ("gmres", "nonsym", "block-isai", {}, "mixed"),
    ("gmres", "nonsym", "block-isai", {"side": "right"}, "mixed-eft"),
    ("bicgstab", "nonsym", "jacobi", {}, "mixed"),
    ("bicgstab", "nonsym", "block-isai", {}, "mixed"),
    ("cg", "spd", "jacobi", {}, "single"),
    ("cg", "spd", "jacobi", {}, "eft"),
]


def _id(c):
    method, kind, pc, kw, prec = c
    extra = "-".join(f"{k}={v}" for k, v in kw.items())
    return "-".join(filter(None, [method, kind, pc or "none", extra, prec]))


def _close(a, b):
    return abs(a - b) <= max(3, 0.05 * max(a, b))


def _within_noise(count, solve, b):
    """``count`` close to the spread of the CPU's counts for ``b`` perturbed by an ulp
    (BiCGSTAB's count moves by tens of per cent under rounding on nonsymmetric problems:
    201-238 on an H100 run for seven such ``b``, the GPU's own 187)."""
    rng = np.random.default_rng(7)
    counts = [solve(b)]
    for _ in range(6):
        e = rng.choice([-1.0, 1.0], size=b.size) * np.finfo(b.dtype).eps
        counts.append(solve(b * (1 + e)))
    lo, hi = min(counts), max(counts)
    w = hi - lo                         # seven samples understate the range: widen by it
    return _close(count, lo) or _close(count, hi) or lo - w <= count <= hi + w, counts


@pytest.mark.parametrize("method,kind,pc,kw,prec", CASES, ids=[_id(c) for c in CASES])
def test_solver_on_cupy_matches_cpu(method, kind, pc, kw, prec, table):
    import mpsolve

    cp = _cp()
    A = _problem(kind)
    n = A.shape[0]
    b = np.random.default_rng(11).standard_normal(n)
    rtol = 1e-4 if prec == "single" else 1e-8
    kw = dict(kw)
    if method == "gmres":
        kw.setdefault("restart", 30)

    g = mpsolve.solve(A, cp.asarray(b), method=method, precond=pc, precision=prec, rtol=rtol,
                      maxiter=5000, device="gpu", **kw)
    c = mpsolve.solve(A, b, method=method, precond=pc, precision=prec, rtol=rtol,
                      maxiter=5000, device="cpu", **kw)
    table("GPU (hardware) vs CPU: iterations",
          ["case", "gpu info", "cpu info", "gpu its", "cpu its", "gpu true res"]).append(
        [_id((method, kind, pc, kw, prec)), g.info, c.info, g.iterations, c.iterations,
         f"{g.true_residual:.1e}"])
    assert g.info == c.info == 0, (g.status, c.status)
    assert isinstance(g.x, cp.ndarray) and g.x.dtype == np.float64
    x = cp.asnumpy(g.x)
    true = np.linalg.norm(b - A @ x) / np.linalg.norm(b)
    assert true <= rtol * (1 + 1e-6), true
    assert g.true_residual == pytest.approx(true, rel=1e-4, abs=1e-14)
    if not _close(g.iterations, c.iterations):
        ok, spread = _within_noise(g.iterations, lambda bb: mpsolve.solve(
            A, bb, method=method, precond=pc, precision=prec, rtol=rtol, maxiter=5000,
            device="cpu", **kw).iterations, b)
        assert ok, (g.iterations, spread)


def test_scipy_style_functions_take_cupyx_sparse_and_return_cupy():
    import cupyx.scipy.sparse as csp

    import mpsolve
    from mpsolve.matrices import convection_diffusion2d, poisson2d

    cp = _cp()
    A = poisson2d(60)
    b = A @ np.ones(A.shape[0])
    bd, keep = cp.asarray(b), b.copy()
    x, info = mpsolve.cg(csp.csr_matrix(A), bd, rtol=1e-10)
    assert info == 0 and isinstance(x, cp.ndarray)
    assert np.array_equal(cp.asnumpy(bd), keep)
    assert np.linalg.norm(b - A @ cp.asnumpy(x)) <= 1e-10 * np.linalg.norm(b) * 1.000001
    N = convection_diffusion2d(50)
    bn = N @ np.ones(N.shape[0])
    for f in (mpsolve.gmres, mpsolve.bicgstab):
        x, info = f(csp.csr_matrix(N), cp.asarray(bn), rtol=1e-9)
        assert info == 0 and isinstance(x, cp.ndarray)
        assert np.linalg.norm(bn - N @ cp.asnumpy(x)) <= 1e-9 * np.linalg.norm(bn) * 1.000001


def test_complex_solve_on_gpu():
    import mpsolve
    from mpsolve.matrices import helmholtz2d

    cp = _cp()
    A = helmholtz2d(40)
    b = (np.random.default_rng(5).standard_normal(A.shape[0])
         + 1j * np.random.default_rng(6).standard_normal(A.shape[0]))
    g = mpsolve.solve(A, cp.asarray(b), method="gmres", precond="jacobi", precision="mixed",
                      rtol=1e-8, maxiter=5000, device="gpu", restart=30)
    c = mpsolve.solve(A, b, method="gmres", precond="jacobi", precision="mixed",
                      rtol=1e-8, maxiter=5000, device="cpu", restart=30)
    assert g.info == c.info == 0
    x = cp.asnumpy(g.x)
    assert x.dtype == np.complex128
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b) * 1.000001
    assert _close(g.iterations, c.iterations), (g.iterations, c.iterations)
