"""Micro-benchmarks of the CPU kernels (pytest-benchmark).

Run (outside the default ``testpaths``)::

    python -m pytest bench/bench_kernels.py --benchmark-only

Groups
------
spmv    CSR SpMV on the 3-D Poisson matrix (7-point, 100^3 = 1M rows, ~7M nonzeros,
        built with ``scipy.sparse.kron``): FP64 values/acc64 vs FP32 values/acc32
        (pure FP32) vs FP32 values with FP64 vectors/acc64 (the mixed operator)
        vs SciPy's ``A @ x``.  Bytes per product: ``nnz * (4 + 8)`` for FP64
        values, ``nnz * (4 + 4)`` for FP32, so FP32 can be at most ~1.5x faster.
dot     native dot vs Dot2 (parallel, and the serial kernel) on 10M FP64 vectors;
        both stream 160 MB, Dot2 does ~10x the flops.
nrm2    native vs compensated norm on 10M FP64.
sum     ``np.sum`` vs Sum2 on 10M FP64.
rows    one thread, one serial SpMV (FP32 values, FP64 row sums: the mixed operator) on
        matrices of short and long rows (7-point Poisson 50^3, elasticity3d:12 with 68 a row,
        the SuiteSparse bcsstk16 where the suite finds a collection): the kernel,
        which adds each row's products two at a time (PETSc's order), against the same
        loop one product a step (the kernel before; SciPy's order).  These matrices fit
        in the caches, where the chain of dependent adds, not memory, bounds the product.
gs      GMRES's classical Gram-Schmidt on k = 15 basis rows of 1M FP64 entries: ``mdot``
        (``V_k w``, one row a pass) against NumPy's dgemv; ``maxpy`` (``w -= V_k^T h``,
        four rows a pass) against the same loop one row a pass (the kernel before; the
        same bits).  Each streams 120 MB.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from numba import njit, prange

from mpsolve.kernels import lookup
from mpsolve.kernels.cpu import eft
from mpsolve.kernels.cpu.spmv import partition_rows

pytestmark = pytest.mark.benchmark

N_VEC = 10_000_000
GRID = 100


def poisson3d(m):
    """7-point Laplacian on an ``m^3`` grid (Dirichlet), CSR with int32 indices."""
    T = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1], format="csr")
    Id = sp.identity(m, format="csr")
    A = (sp.kron(sp.kron(T, Id), Id) + sp.kron(sp.kron(Id, T), Id)
         + sp.kron(sp.kron(Id, Id), T)).tocsr()
    A.sort_indices()
    A.indices = A.indices.astype(np.int32)
    A.indptr = A.indptr.astype(np.int32)
    return A


@pytest.fixture(scope="module")
def poisson():
    A = poisson3d(GRID)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(A.shape[0])
    return A, partition_rows(A.indptr), x


@pytest.fixture(scope="module")
def vecs():
    rng = np.random.default_rng(1)
    return rng.standard_normal(N_VEC), rng.standard_normal(N_VEC)


def _spmv_case(poisson, vdt, xdt, ydt, mode):
    A, parts, x64 = poisson
    data = A.data.astype(vdt)
    x = x64.astype(xdt)
    y = np.empty(A.shape[0], dtype=ydt)
    kern = lookup("cpu", "spmv", (vdt, xdt, ydt), mode)
    args = (parts, A.indptr, A.indices, data, x, y)
    kern(*args)                                          # compile / load outside the timing
    return kern, args


@pytest.mark.benchmark(group="spmv")
def test_spmv_f64_acc64(benchmark, poisson):
    kern, args = _spmv_case(poisson, "float64", "float64", "float64", "acc64")
    benchmark(kern, *args)


@pytest.mark.benchmark(group="spmv")
def test_spmv_f32_acc32(benchmark, poisson):
    kern, args = _spmv_case(poisson, "float32", "float32", "float32", "acc32")
    benchmark(kern, *args)


@pytest.mark.benchmark(group="spmv")
def test_spmv_f32vals_f64vecs_acc64(benchmark, poisson):
    kern, args = _spmv_case(poisson, "float32", "float64", "float64", "acc64")
    benchmark(kern, *args)


@pytest.mark.benchmark(group="spmv")
def test_spmv_scipy_f64(benchmark, poisson):
    A, _, x = poisson
    benchmark(A.__matmul__, x)


@pytest.mark.benchmark(group="dot")
def test_dot_native(benchmark, vecs):
    x, y = vecs
    f = lookup("cpu", "dot", ("float64",), "native")
    f(x, y)
    benchmark(f, x, y)


@pytest.mark.benchmark(group="dot")
def test_dot2_compensated(benchmark, vecs):
    x, y = vecs
    f = lookup("cpu", "dot", ("float64",), "compensated")
    f(x, y)
    benchmark(f, x, y)


@pytest.mark.benchmark(group="dot")
def test_dot2_serial_kernel(benchmark, vecs):
    x, y = vecs
    eft._dot2_ser(x, y)
    benchmark(eft._dot2_ser, x, y)


@pytest.mark.benchmark(group="dot")
def test_dot_numpy(benchmark, vecs):
    x, y = vecs
    benchmark(np.dot, x, y)


@pytest.mark.benchmark(group="nrm2")
def test_nrm2_native(benchmark, vecs):
    f = lookup("cpu", "nrm2", ("float64",), "native")
    f(vecs[0])
    benchmark(f, vecs[0])


@pytest.mark.benchmark(group="nrm2")
def test_nrm2_compensated(benchmark, vecs):
    f = lookup("cpu", "nrm2", ("float64",), "compensated")
    f(vecs[0])
    benchmark(f, vecs[0])


@pytest.mark.benchmark(group="sum")
def test_sum_native(benchmark, vecs):
    f = lookup("cpu", "sum", ("float64",), "native")
    benchmark(f, vecs[0])


@pytest.mark.benchmark(group="sum")
def test_sum2_compensated(benchmark, vecs):
    f = lookup("cpu", "sum", ("float64",), "compensated")
    f(vecs[0])
    benchmark(f, vecs[0])


# --- classical Gram-Schmidt: maxpy four rows a pass against one; mdot against dgemv ----
GS_K, GS_N, GS_CHUNK = 15, 1_000_000, 4096


@njit
def _rows_one_a_step(indptr, indices, data, x, y):
    for i in range(indptr.size - 1):
        acc = 0.0
        for k in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            acc += np.float64(data[k]) * x[np.uint64(indices[k])]
        y[i] = acc


def _row_matrix(name):
    """The ``rows`` group's matrix ``name`` (CSR), or ``None`` where no collection found by
    :func:`mpsolve.bench.common.find_collection` has it."""
    from mpsolve.matrices import elasticity3d
    from mpsolve.matrices.collection import CollectionError, load
    if name == "poisson3d:50":
        return poisson3d(50)
    if name == "elasticity3d:12":
        return sp.csr_matrix(elasticity3d(12))
    from mpsolve.bench.common import find_collection

    try:        # the folders the suite finds ($MPSOLVE_MATRIX_PATH, ../shared/...)
        return sp.csr_matrix(load(name, path=find_collection()))
    except (OSError, ValueError, CollectionError):
        return None


@pytest.fixture(scope="module", params=["poisson3d:50", "elasticity3d:12", "bcsstk16"])
def rows(request):
    A = _row_matrix(request.param)
    if A is None:
        pytest.skip(f"{request.param}: no SuiteSparse collection found")
    A.sort_indices()
    ip, ix = A.indptr.astype(np.int32), A.indices.astype(np.int32)
    x = np.random.default_rng(3).standard_normal(A.shape[0])
    return (np.array([0, A.shape[0]], np.int64), ip, ix, A.data.astype(np.float32), x,
            np.empty(A.shape[0]))


@pytest.mark.benchmark(group="rows")
def test_rows_two_a_step_kernel(benchmark, rows):
    f = lookup("cpu", "spmv", ("float32", "float64", "float64"), "acc64")
    f(*rows)
    benchmark(f, *rows)


@pytest.mark.benchmark(group="rows")
def test_rows_one_a_step(benchmark, rows):
    args = rows[1:]
    _rows_one_a_step(*args)
    benchmark(_rows_one_a_step, *args)


@njit
def _maxpy_one_row_chunk(V, k, h, w, lo, hi):
    ws = w[lo:hi]
    for i in range(k):
        a = h[i]
        vs = V[i, lo:hi]
        for j in range(hi - lo):
            ws[j] -= a * vs[j]


@njit(parallel=True)
def _maxpy_one_row(V, k, h, w):
    nch = (w.size + GS_CHUNK - 1) // GS_CHUNK
    for c in prange(nch):
        lo = c * GS_CHUNK
        _maxpy_one_row_chunk(V, k, h, w, lo, min(lo + GS_CHUNK, w.size))


@pytest.fixture(scope="module")
def basis():
    rng = np.random.default_rng(2)
    return (rng.standard_normal((GS_K + 1, GS_N)), rng.standard_normal(GS_N),
            1e-3 * rng.standard_normal(GS_K + 1))


@pytest.mark.benchmark(group="gs")
def test_mdot_kernel(benchmark, basis):
    V, w, _ = basis
    out = np.empty(GS_K)
    f = lookup("cpu", "mdot", ("float64",), "native")
    f(V, GS_K, w, out)
    benchmark(f, V, GS_K, w, out)


@pytest.mark.benchmark(group="gs")
def test_mdot_numpy_dgemv(benchmark, basis):
    V, w, _ = basis
    benchmark(np.dot, V[:GS_K], w)


@pytest.mark.benchmark(group="gs")
def test_maxpy_kernel(benchmark, basis):
    V, w, h = basis
    w = w.copy()
    f = lookup("cpu", "maxpy", ("float64",))
    f(V, GS_K, h, w)
    benchmark(f, V, GS_K, h, w)


@pytest.mark.benchmark(group="gs")
def test_maxpy_one_row_a_pass(benchmark, basis):
    V, w, h = basis
    w = w.copy()
    _maxpy_one_row(V, GS_K, h, w)
    benchmark(_maxpy_one_row, V, GS_K, h, w)
