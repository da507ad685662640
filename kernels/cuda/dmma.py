"""FP64 Tensor Core helper: batched ``b x b`` block products by the 8x8x4 DMMA (``b <= 8``).

What it computes
----------------
:func:`block_gemm` (op ``"block_gemm_dmma"``, dtype key ``("float64",)``): for stacks
``A``, ``B``, ``C`` of shape ``(nb, b, b)`` (FP64, C-contiguous, ``b <= 8``)

    ``C[t] += alpha * A[t] @ B[t]``       (``C`` omitted: a new ``A @ B``, ``alpha = 1``)

in place on ``C``.  Each product is one warp: the blocks are padded to 8 with zeros in
registers (nothing padded in memory), the 8x8 product accumulated from zero in two
``mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64`` steps (``k = 0..3``, ``4..7``), the FP64
Tensor Core instruction (SASS ``DMMA``, compute capability >= 8.0), then ``C + alpha * D``
stored for the ``b x b`` part.

The MMA step is :func:`mma_m8n8k4` (a numba device function, usable by other kernels):
``(d0, d1) = mma_m8n8k4(a, b, c0, c1)``, warp-collective, on the calling lane's fragments
(lane ``l``, ``g = l // 4``, ``q = l % 4``: ``a = A[g, q]`` of the 8x4 ``A``, ``b = B[q, g]``
of the 4x8 ``B``, ``(c0, c1) = C[g, 2q], C[g, 2q + 1]`` of the 8x8 ``C``; PTX ISA, "Matrix
Fragments for mma.m8n8k4 with .f64").  On hardware it is CUDA C++ (:data:`CU_PATH`,
``dmma.cu``: one inline-PTX ``mma.sync``), compiled by NVRTC to PTX for :data:`ARCH` at
import (``cuda.bindings.nvrtc``, which needs no driver; cached in a file keyed by the
source's hash; without those bindings numba-cuda compiles ``dmma.cu`` itself by NVRTC at
link time), declared by ``cuda.declare_device`` (numba ABI, returning
``UniTuple(float64, 2)``) and linked with ``cuda.jit(link=[...])``.

Launch shape: one warp per block product, :data:`WPB` warps per block, a grid-stride loop
over ``t``; every warp runs the same trip count (``mma.sync`` is warp-collective: an idle
warp multiplies zeros and stores nothing).

Simulator fallback (and semantics): under ``NUMBA_ENABLE_CUDASIM`` the same kernel and the
same Python-level API run :func:`mma_m8n8k4` as an exact emulation of the MMA on the same
fragments: ``D[g, n] = C[g, n] + sum_k A[g, k] B[k, n]`` with the operands gathered from
their lanes by :func:`~._intrin.shfl_idx` (plain FP64 products and sums; on hardware the
Tensor Core's internal rounding may differ by a few ulps).

Where it is used
----------------
The block-ILU variant's block triangular local systems (``block_tri_isai`` on ``"gpu"``,
:mod:`.isai_setup`): the block substitution's ``X_q T_qk`` and ``R U_qq^{-1}`` products,
all block rows of one substitution step at once, are batched ``b x b`` GEMMs with
``b <= 8``, too small for cuBLAS to be efficient; they go through this helper.  (Local
ISAI systems with ``s <= 32`` are :mod:`.localsolve`'s warp solves; larger ones the
blocked batched LU of :mod:`.isai_setup`, whose trailing updates are ``xp.matmul`` on
stacks: cuBLAS strided-batched DGEMM.)

Verified without a GPU
----------------------
``tests/cuda/sim_localsolve.py``: the simulator path against ``numpy.matmul`` (b = 1, 3, 8,
with and without ``C``/``alpha``, an idle warp).  ``tests/cuda/compile_localsolve.py``: the
numba kernel's PTX plus the NVRTC PTX of ``dmma.cu`` linked by nvJitLink for sm_80 and
sm_90 (no spills), ``DMMA`` in the ``nvdisasm`` SASS (``DMMA.884`` on sm_80,
``DMMA.8x8x4`` on sm_90; 98 / 90 registers, a 16-byte stack for the ABI's return
buffer); the registry's generic check (``compile_checks.py``) compiles and links it too.
The MMA function is *called* (``CALL`` in the SASS), not inlined: the NVRTC PTX is linked
separately; inlining it needs LTO-IR on both sides (follow-up).  Not verified: numerics and
speed on a real Tensor Core (a ``*gpu*`` test is the follow-up).
"""
from __future__ import annotations

import os

import numpy as np
from numba import cuda, float64, types

from ..registry import register
from ._intrin import SIM, WARP, lane_id, shfl_idx
from ._launch import cdiv, config, dev, expose, stream

__all__ = ["CU_PATH", "ARCH", "WPB", "MAX_B", "mma_m8n8k4", "block_gemm"]

#: The CUDA C++ source of the MMA device function (NVRTC).
CU_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dmma.cu")
#: The PTX virtual architecture NVRTC compiles ``dmma.cu`` for (the lowest with FP64 MMA;
#: linked to SASS for the actual GPU, sm_80 or sm_90, by the driver or nvJitLink).
ARCH = "compute_80"
#: Largest block (the MMA tile is 8x8).
MAX_B = 8
#: Warps per block.
WPB = 2 if SIM else 4

_SIG = [(float64[:, :, ::1], float64[:, :, ::1], float64[:, :, ::1], float64)]


def _cache_dir():
    """This user's folder for the compiled PTX (``MPSOLVE_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/mpsolve`` or ``~/.cache/mpsolve``, made private), or ``None`` where
    it cannot be made or is not private: a PTX file that another user could write would
    be linked into this process's kernels (the shared temporary folder is not used)."""
    root = os.environ.get("MPSOLVE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "mpsolve")
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        st = os.stat(root)
    except OSError:
        return None
    if (hasattr(os, "getuid") and st.st_uid != os.getuid()) or st.st_mode & 0o022:
        return None
    return root


def _nvrtc_ptx() -> str:
    """``dmma.cu`` compiled to PTX by NVRTC (``cuda.bindings.nvrtc``: no driver needed),
    cached in a file of :func:`_cache_dir` keyed by the source, the target and the NVRTC
    version; returns that ``.ptx`` path (or the ``.cu`` path where the NVRTC bindings are
    missing or nothing can be cached: numba then runs NVRTC at the first launch)."""
    import hashlib

    with open(CU_PATH, "rb") as f:
        src = f.read()
    try:
        from cuda.bindings import nvrtc
    except Exception:                            # noqa: BLE001
        return CU_PATH
    folder = _cache_dir()
    if folder is None:
        return CU_PATH
    # the NVRTC version in the key: PTX of a newer CUDA (a higher .version) does not link
    # under an older one sharing this folder
    version = ".".join(str(v) for v in nvrtc.nvrtcVersion()[1:])
    key = hashlib.sha256(src + ARCH.encode() + version.encode()).hexdigest()[:16]
    cache = os.path.join(folder, f"dmma-{key}.ptx")
    if os.path.exists(cache):
        return cache
    err, prog = nvrtc.nvrtcCreateProgram(src, b"dmma.cu", 0, [], [])
    try:
        opts = [f"--gpu-architecture={ARCH}".encode(), b"-rdc=true"]
        err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, n = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * n
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"NVRTC failed on dmma.cu: {log.decode(errors='replace')}")
        _, n = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * n
        nvrtc.nvrtcGetPTX(prog, ptx)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    tmp = f"{cache}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(ptx.rstrip(b"\0 "))
        os.replace(tmp, cache)                   # atomic: concurrent processes agree
    except OSError:                              # no writable cache: numba runs NVRTC
        return CU_PATH
    return cache


def _link_target() -> str:
    """:func:`_nvrtc_ptx`, never failing the import of the CUDA backend: an NVRTC error
    is reported as a warning and left to the first launch (which links ``dmma.cu``)."""
    try:
        return _nvrtc_ptx()
    except Exception as e:                       # noqa: BLE001
        import warnings

        warnings.warn(f"mpsolve: dmma.cu not precompiled ({e}); the DMMA helper links the "
                      f".cu at its first launch", RuntimeWarning)
        return CU_PATH


if SIM:
    _JIT = {}                                    # the simulator cannot link

    @cuda.jit(device=True)
    def mma_m8n8k4(a, b, c0, c1):
        """Exact emulation of the FP64 m8n8k4 MMA on this lane's fragments."""
        lane = lane_id()
        g = lane // 4
        q = lane % 4
        d0 = c0
        d1 = c1
        for k in range(4):                       # convergent: every lane shuffles
            agk = shfl_idx(a, 4 * g + k)         # A[g, k] lives in lane 4g + k
            bk0 = shfl_idx(b, 4 * (2 * q) + k)   # B[k, n] lives in lane 4n + k
            bk1 = shfl_idx(b, 4 * (2 * q + 1) + k)
            d0 += agk * bk0
            d1 += agk * bk1
        return d0, d1
else:
    _JIT = dict(link=[_link_target()])
    mma_m8n8k4 = cuda.declare_device(
        "mpsolve_dmma_m8n8k4", types.UniTuple(float64, 2)(float64, float64, float64, float64))


@cuda.jit(**_JIT)
def _dmma_kernel(A, B, C, alpha):
    """``C[t] += alpha A[t] B[t]``, ``b x b`` blocks padded to 8, one warp per ``t``."""
    nb = A.shape[0]
    bs = A.shape[1]
    tid = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    gw = tid // WARP
    nw = (cuda.gridDim.x * cuda.blockDim.x) // WARP
    lane = lane_id()
    g = lane // 4
    q = lane % 4
    for r in range((nb + nw - 1) // nw):         # the same trip count for every warp
        t = gw + r * nw
        live = t < nb
        d0 = 0.0
        d1 = 0.0
        for kk in range(0, 8, 4):
            k = kk + q
            a = A[t, g, k] if (live and g < bs and k < bs) else 0.0
            b = B[t, k, g] if (live and g < bs and k < bs) else 0.0
            d0, d1 = mma_m8n8k4(a, b, d0, d1)
        n = 2 * q
        if live and g < bs and n < bs:
            C[t, g, n] += alpha * d0
        if live and g < bs and n + 1 < bs:
            C[t, g, n + 1] += alpha * d1


@register("gpu", "block_gemm_dmma", [("float64",)])
def block_gemm(A, B, C=None, alpha=1.0):
    """``C[t] += alpha A[t] B[t]`` for stacks of ``b x b`` FP64 blocks (``b <= 8``), one
    warp and two FP64 8x8x4 Tensor Core MMAs per block.  ``C`` (C-contiguous FP64, ``A``'s
    shape) is updated in place and returned; ``C=None``: returns a new ``A @ B``."""
    nb, b, b2 = A.shape
    if b != b2 or not 1 <= b <= MAX_B or B.shape != A.shape:
        raise ValueError(f"block_gemm: square blocks b <= {MAX_B}, A and B alike; got "
                         f"{A.shape}, {B.shape}")
    xp = np
    if type(A).__module__.split(".")[0] == "cupy":
        import cupy as xp  # noqa: F811
    if C is None:
        C = xp.zeros(A.shape, dtype=np.float64)
        alpha = 1.0
    if C.shape != A.shape or C.dtype != np.float64 or not C.flags.c_contiguous:
        raise ValueError("block_gemm: C must be C-contiguous FP64 of A's shape")
    if nb == 0:
        return C
    if not SIM and cuda.get_current_device().compute_capability < (8, 0):
        raise RuntimeError("block_gemm_dmma needs FP64 Tensor Cores (compute capability "
                           ">= 8.0)")
    strm = stream(A, B, C)
    dA, dB, dC = dev(xp.ascontiguousarray(A, dtype=np.float64),
                     xp.ascontiguousarray(B, dtype=np.float64), C)
    blocks = max(1, min(cdiv(nb, WPB), config().max_blocks))
    _dmma_kernel[blocks, WPB * WARP, strm](dA, dB, dC, float(alpha))
    return C


expose(block_gemm, [(_dmma_kernel, _SIG)])
