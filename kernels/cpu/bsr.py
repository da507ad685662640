"""BSR (block CSR) sparse matrix-vector products on the CPU (Numba).

``y = A x`` with ``A`` stored as ``b x b`` dense blocks: ``indptr`` / ``indices``
over block rows / block columns and ``data`` of shape ``(nnzb, b, b)`` (C order).
As for CSR (:mod:`.spmv`) the values, the input and the output may each be FP32
or FP64 with the casts fused into the loop, and the accumulator is chosen
separately (``acc64``: row sums in FP64, ``acc32``: in FP32).  Complex blocks and
vectors (complex64 / complex128) run the same code: their sums are carried in
complex128 (``acc64``) or complex64 (``acc32``).

Work is split over block-row partitions balanced by block nonzeros
(:func:`mpsolve.kernels.cpu.spmv.partition_rows` on the block ``indptr``).
A trailing partial block is allowed: scalar rows/columns ``>= len(y)`` /
``>= len(x)`` are skipped, so ``n`` need not be a multiple of ``b`` (the block
preconditioners pad their last block that way).

Memory traffic per product: ``nnzb * (b*b*sizeof(value) + 4)`` bytes of matrix
plus the vectors -- the index overhead per value is ``4 / b^2`` bytes instead
of CSR's 4, which is where BSR gains for ``b >= 2``.
"""
import importlib.util
import os
import pathlib
import sys

import numpy as np
from numba import njit, prange

from ._config import JIT
from ..registry import register


@njit(inline="always", **JIT)
def _block_rows(lo, hi, indptr, indices, data, x, y, acc, acc_t):
    """Block rows ``lo:hi``: all ``b`` row sums of a block row at once in ``acc``
    (a per-task scratch vector of the accumulator type ``acc_t``), so each block and
    its column index are read once.  A block that reaches past ``len(x)`` (the padded
    last block) takes the guarded loop; every other block the plain one."""
    b = data.shape[1]
    n = y.size
    nx = x.size
    for ib in range(lo, hi):
        for u in range(b):
            acc[u] = acc_t(0.0)
        for k in range(np.uint64(indptr[ib]), np.uint64(indptr[ib + 1])):
            c0 = np.uint64(indices[k]) * np.uint64(b)
            if c0 + b <= nx:
                for u in range(b):
                    s = acc[u]
                    for v in range(b):
                        s += acc_t(data[k, u, v]) * acc_t(x[c0 + np.uint64(v)])
                    acc[u] = s
            else:
                for u in range(b):
                    s = acc[u]
                    for v in range(b):
                        if c0 + np.uint64(v) < nx:
                            s += acc_t(data[k, u, v]) * acc_t(x[c0 + np.uint64(v)])
                    acc[u] = s
        r0 = ib * b
        for u in range(b):
            if r0 + u < n:
                y[r0 + u] = acc[u]


@njit(parallel=True, **JIT)
def _bsr_par(parts, indptr, indices, data, x, y, acc_t):
    for t in prange(parts.size - 1):
        acc = np.empty(data.shape[1], dtype=acc_t)
        _block_rows(parts[t], parts[t + 1], indptr, indices, data, x, y, acc, acc_t)


@njit(**JIT)
def _bsr_ser(parts, indptr, indices, data, x, y, acc_t):
    acc = np.empty(data.shape[1], dtype=acc_t)
    _block_rows(0, indptr.size - 1, indptr, indices, data, x, y, acc, acc_t)


# --- kernels unrolled for one block size -------------------------------------------
# For b <= MAX_UNROLLED the kernel is generated with the block size as a constant: the
# b accumulators and the b loaded x values live in registers and the b x b block is a
# straight-line sequence of multiply-adds.  Compiled on first use per (b, accumulator,
# parallel) and kept for the process.
MAX_UNROLLED = 8
_GENERATED = {}


def _unrolled_source(b, acc, parallel):
    B = range(b)
    L = ["def kern(parts, indptr, indices, data, x, y):",
         "    n = y.size",
         "    nx = x.size",
         f"    for t in {'prange' if parallel else 'range'}(parts.size - 1):",
         "        for ib in range(parts[t], parts[t + 1]):"]
    L += [f"            a{u} = {acc}(0.0)" for u in B]
    L += ["            for k in range(np.uint64(indptr[ib]), np.uint64(indptr[ib + 1])):",
          f"                c0 = np.uint64(indices[k]) * np.uint64({b})",
          f"                if c0 + np.uint64({b}) <= nx:"]
    L += [f"                    x{v} = {acc}(x[c0 + np.uint64({v})])" for v in B]
    L += ["                else:"]
    L += [f"                    x{v} = {acc}(x[c0 + np.uint64({v})]) if c0 + np.uint64({v}) < nx "
          f"else {acc}(0.0)" for v in B]
    for u in B:
        terms = " + ".join(f"{acc}(data[k, {u}, {v}]) * x{v}" for v in B)
        L.append(f"                a{u} += {terms}")
    L.append(f"            r0 = ib * {b}")
    for u in B:
        L += [f"            if r0 + {u} < n:", f"                y[r0 + {u}] = a{u}"]
    return "\n".join(L) + "\n"


def _generated_dir():
    """Folder for the generated kernels' source files (``MPSOLVE_CACHE_DIR``, else
    ``~/.cache/mpsolve``): Numba caches compiled code only for functions that live in
    a file, so each generated kernel is written once and imported from there."""
    root = os.environ.get("MPSOLVE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "mpsolve")
    return os.path.join(root, f"kernels-{_SOURCE_VERSION}")


_SOURCE_VERSION = 1  # bump when _unrolled_source changes


def _load_generated(name, source):
    """The function ``kern`` of ``source``, imported from a file when one can be
    written (disk cache across processes), else exec'd (compiled once per process)."""
    try:
        folder = _generated_dir()
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, name + ".py")
        text = "import numpy as np\nfrom numba import prange\n\n\n" + source
        if not os.path.exists(path) or pathlib.Path(path).read_text() != text:
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)  # atomic: concurrent processes never see half a file
        modname = f"mpsolve_generated_{name}"
        spec = importlib.util.spec_from_file_location(modname, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module  # Numba's disk cache re-imports it by name
        spec.loader.exec_module(module)
        return module.kern, True
    except OSError:
        ns = {"np": np, "prange": prange}
        exec(compile(source, f"<{name}>", "exec"), ns)
        return ns["kern"], False


def _unrolled(b, acc, parallel):
    key = (b, acc, parallel)
    k = _GENERATED.get(key)
    if k is None:
        name = f"bsr_b{b}_{acc.split('.')[-1]}_{'par' if parallel else 'ser'}"
        fn, on_disk = _load_generated(name, _unrolled_source(b, acc, parallel))
        k = _GENERATED[key] = njit(parallel=parallel, nogil=True, cache=on_disk)(fn)
    return k


#: The accumulator of each mode, for real and for complex blocks.
_ACC = {("acc64", False): np.float64, ("acc32", False): np.float32,
        ("acc64", True): np.complex128, ("acc32", True): np.complex64}


def _dispatch(mode, parts, indptr, indices, data, x, y):
    b = data.shape[1]
    parallel = parts.size > 2
    acc_t = _ACC[mode, data.dtype.kind == "c"]
    if b <= MAX_UNROLLED:
        _unrolled(b, "np." + np.dtype(acc_t).name, parallel)(parts, indptr, indices, data, x, y)
    else:
        (_bsr_par if parallel else _bsr_ser)(parts, indptr, indices, data, x, y, acc_t)


_F = ("float32", "float64")
_C = ("complex64", "complex128")
_ALL = [(v, xi, yo) for f in (_F, _C) for v in f for xi in f for yo in f]


@register("cpu", "bsrmv", _ALL, mode="acc64")
def bsr_spmv_acc64(parts, indptr, indices, data, x, y):
    """``y <- A x`` for BSR ``A`` (``data`` of shape ``(nnzb, b, b)``), row sums in FP64
    (complex128 for complex blocks).

    Dtypes key: ``(data, x, y)``: all real, or all complex.
    """
    _dispatch("acc64", parts, indptr, indices, data, x, y)


@register("cpu", "bsrmv", _ALL, mode="acc32")
def bsr_spmv_acc32(parts, indptr, indices, data, x, y):
    """``y <- A x`` for BSR ``A``, row sums in FP32 (complex64 for complex blocks).
    Dtypes key: ``(data, x, y)``."""
    _dispatch("acc32", parts, indptr, indices, data, x, y)
