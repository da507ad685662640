"""Where a small GPU solve's time goes: the cost of one kernel call from Python.

``python -m mpsolve.bench.gpu_launch [--out DIR]`` (needs a CUDA GPU): per call, by the
wall clock over many calls with the device synchronised at the end, for ``n`` = 1e3
(launch-bound) and 1e7 (bandwidth-bound):

* CuPy's ``y += a * x`` and ``cupy.dot`` (the baseline a CuPy user gets);
* a numba-cuda axpy kernel launched on numba device arrays, and on CuPy arrays (numba
  converts their ``__cuda_array_interface__`` at each launch);
* ``cuda.as_cuda_array(x, sync=False)`` alone (what ``_launch.dev`` does per array);
* mpsolve's registered ``axpy`` and native/compensated ``dot`` on CuPy arrays;
* a whole CG + Jacobi iteration on the GPU (``mixed``), from a fixed iteration count;
* at n = 1e7, FP64 and FP32, the achieved bandwidth (vectors read and written once).

Writes ``launch.md`` to ``--out``; nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from .common import emit


def _per_call(fn, sync, reps):
    for _ in range(3):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t0) / reps


def run(out_dir):
    import cupy as cp
    from numba import cuda

    import mpsolve
    from mpsolve.kernels.registry import lookup
    from mpsolve.matrices import poisson3d

    sync = cp.cuda.get_current_stream().synchronize

    @cuda.jit
    def axpy_k(a, x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] += a * x[i]

    rows = []
    for n, dtype in ((1_000, np.float64), (10_000_000, np.float64), (10_000_000, np.float32)):
        reps = 2000 if n < 10**5 else 50
        x = cp.random.standard_normal(n).astype(dtype)
        y = cp.random.standard_normal(n).astype(dtype)
        dx, dy = cuda.as_cuda_array(x, sync=False), cuda.as_cuda_array(y, sync=False)
        blocks = (n + 255) // 256
        cases = {
            "cupy y += a*x": lambda: y.__iadd__(0.5 * x),
            "cupy.dot (+ host read)": lambda: float(cp.dot(x, y)),
            "numba kernel, numba arrays": lambda: axpy_k[blocks, 256](0.5, dx, dy),
            "numba kernel, CuPy arrays": lambda: axpy_k[blocks, 256](0.5, x, y),
            "as_cuda_array (one array)": lambda: cuda.as_cuda_array(x, sync=False),
            "mpsolve axpy": lambda f=lookup("gpu", "axpy", (dtype,)): f(0.5, x, y),
            "mpsolve dot native": lambda f=lookup("gpu", "dot", (dtype,), "native"): f(x, y),
            "mpsolve dot compensated":
                lambda f=lookup("gpu", "dot", (dtype,), "compensated"): f(x, y),
        }
        moved = {"cupy y += a*x": 3, "numba kernel, numba arrays": 3,
                 "numba kernel, CuPy arrays": 3, "mpsolve axpy": 3}   # vectors read+written
        for name, fn in cases.items():
            s = _per_call(fn, sync, reps)
            gbs = (moved.get(name, 2) * n * x.itemsize / s / 1e9
                   if "as_cuda_array" not in name else None)
            rows.append((f"{name} ({np.dtype(dtype).name})", n, s * 1e6, gbs))
    # a whole iteration: CG + Jacobi, mixed, fixed iteration counts
    for m in (20, 100):
        A = poisson3d(m)
        b = cp.asarray(A @ np.ones(A.shape[0]))
        its = {}
        for k in (10, 60):
            mpsolve.solve(A, b, method="cg", precond="jacobi", precision="mixed", rtol=1e-30,
                          maxiter=k, device="gpu")
            sync()
            t0 = time.perf_counter()
            r = mpsolve.solve(A, b, method="cg", precond="jacobi", precision="mixed",
                              rtol=1e-30, maxiter=k, device="gpu")
            sync()
            its[k] = (time.perf_counter() - t0, r.iterations)
        (t1, k1), (t2, k2) = its[10], its[60]
        rows.append((f"CG+Jacobi iteration, poisson3d:{m}", A.shape[0],
                     (t2 - t1) / max(1, k2 - k1) * 1e6, None))
        rows.append((f"CG+Jacobi solve overhead (10 its less 10 iterations), poisson3d:{m}",
                     A.shape[0], (t1 - 10 * (t2 - t1) / max(1, k2 - k1)) * 1e6, None))
    lines = ["# Cost of one GPU call from Python", "",
             f"`python -m mpsolve.bench.gpu_launch`, {time.strftime('%Y-%m-%d %H:%M')}, "
             f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}", "",
             "| call | n | us per call | GB/s |", "| --- | --- | --- | --- |"]
    lines += [f"| {a} | {n} | {us:.1f} | {'-' if g is None else f'{g:.0f}'} |"
              for a, n, us, g in rows]
    text = "\n".join(lines) + "\n"
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    emit(text, os.path.join(out_dir, "launch.md") if out_dir else None)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mpsolve.bench.gpu_launch",
                                description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None)
    run(p.parse_args(argv).out)


if __name__ == "__main__":
    main()
