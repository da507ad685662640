"""Is the complex fused ``spmv_dot`` as fast, relative to the unfused pair, as the real one?

CG's ``q = A p; p . q`` as one pass (``spmv_dot``) against ``spmv`` then ``dot``, on the CPU,
for a real FP64 and a complex128 7-point 3-D Laplacian (the complex one shifted by
``-k^2 (1 + 0.1 i)``, Helmholtz-like), and a variant of the complex kernel that keeps the
dot's real and imaginary sums in two real accumulators (as the complex ``dot`` does, which
LLVM vectorises) instead of one complex accumulator.

Run (one command, prints a table; the numbers are indicative on a shared machine)::

    python3 -m mpsolve.bench.bench_complex_spmv_dot [grid=80] [repeats=15]

One run here (grid 80, 512k rows, 2 shared cores, best of 15): float64 fused 3.89 ms vs
8.44 ms for the pair (0.46x); complex128 fused 6.88 ms vs 24.84 ms (0.28x); the
two-real-accumulator variant 20.40 ms (0.82x).  The registered complex kernel (one complex
accumulator, interleaved with the row sums, which no variant vectorises across rows) is
kept.
"""
from __future__ import annotations

import sys
import time

import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from mpsolve.kernels.cpu._config import JIT
from mpsolve.kernels.cpu.field import wide
from mpsolve.kernels.registry import launch_plan, lookup


def laplacian3d(m, dtype, shift=0.0):
    T = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1], format="csr")
    Id = sp.identity(m, format="csr")
    A = (sp.kron(sp.kron(T, Id), Id) + sp.kron(sp.kron(Id, T), Id)
         + sp.kron(sp.kron(Id, Id), T)).tocsr().astype(dtype)
    if shift:
        A = (A - shift * sp.identity(A.shape[0], dtype=dtype, format="csr")).tocsr()
    A.sort_indices()
    A.indices = A.indices.astype(np.int32)
    A.indptr = A.indptr.astype(np.int32)
    return A


@njit(inline="always", **JIT)
def _rows_split(lo, hi, indptr, indices, data, x, y):
    sr = 0.0
    si = 0.0
    for i in range(lo, hi):
        acc = wide(y.dtype.type(0.0))
        for k in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            acc += wide(data[k]) * wide(x[np.uint64(indices[k])])
        yi = y.dtype.type(acc)
        y[i] = yi
        a = x[i]
        sr += a.real * yi.real + a.imag * yi.imag
        si += a.real * yi.imag - a.imag * yi.real
    return sr, si


@njit(parallel=True, **JIT)
def _split_par(parts, indptr, indices, data, x, y):
    pr = np.empty(parts.size - 1)
    pi = np.empty(parts.size - 1)
    for t in prange(parts.size - 1):
        pr[t], pi[t] = _rows_split(parts[t], parts[t + 1], indptr, indices, data, x, y)
    sr = 0.0
    si = 0.0
    for t in range(pr.size):
        sr += pr[t]
        si += pi[t]
    return complex(sr, si)


def best(f, repeats):
    f()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main(grid=80, repeats=15):
    rows = []
    for name, dt, shift in (("float64", np.float64, 0.0),
                            ("complex128", np.complex128, 0.3 * (1 + 0.1j))):
        A = laplacian3d(grid, dt, shift)
        n = A.shape[0]
        rng = np.random.default_rng(0)
        x = rng.standard_normal(n).astype(dt)
        if dt == np.complex128:
            x = x + 1j * rng.standard_normal(n)
        y = np.empty(n, dt)
        key = (name,) * 3
        plan = launch_plan("cpu", "spmv", A.indptr)
        spmv = lookup("cpu", "spmv", key, "acc64")
        fused = lookup("cpu", "spmv_dot", key, "acc64")
        dot = lookup("cpu", "dot", (name,), "native")
        args = (plan, A.indptr, A.indices, A.data, x, y)
        t_fused = best(lambda: fused(*args), repeats)
        t_pair = best(lambda: (spmv(*args), dot(x, y)), repeats)
        rows.append((name, "spmv_dot (registered)", t_fused, t_pair))
        if dt == np.complex128:
            s1 = fused(*args)
            s2 = _split_par(plan, A.indptr, A.indices, A.data, x, y)
            assert abs(s1 - s2) <= 1e-10 * abs(s1)
            t_split = best(lambda: _split_par(plan, A.indptr, A.indices, A.data, x, y), repeats)
            rows.append((name, "spmv_dot, two real dot sums", t_split, t_pair))
    print(f"grid {grid}^3 ({grid ** 3} rows), best of {repeats}")
    print(f"{'dtype':<11} {'kernel':<30} {'fused ms':>9} {'spmv+dot ms':>12} {'fused/pair':>10}")
    for name, k, tf, tp in rows:
        print(f"{name:<11} {k:<30} {tf * 1e3:9.2f} {tp * 1e3:12.2f} {tf / tp:10.2f}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
