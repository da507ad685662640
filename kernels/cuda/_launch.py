"""Launch configuration, streams and scratch buffers of the CUDA kernels.

Launch configuration
--------------------
:func:`config` reads the current device's properties once and caches them per device:
the SM count, the warp size, the threads per block of the streaming kernels
(:data:`THREADS`, a multiple of the warp size, at most the device's maximum) and the
largest useful grid: enough blocks of :data:`THREADS` threads to fill every SM once
(``SMs * max_threads_per_SM / THREADS``).  Streaming kernels are grid-stride loops, so a
grid never needs more blocks than that: :func:`grid` (one thread per element) and
:func:`grid_warps` (one warp per item: a reduction chunk, a CSR row, ...) return
``(blocks, threads)`` for a problem size.

Under the simulator (no device; about 1 ms per simulated thread) the configuration is
a small fixed one: 32 threads per block, at most 2 blocks.

Results never depend on the configuration: the reductions split by ``n`` in fixed
chunks (:mod:`mpsolve.kernels.cuda.reduce`).  :func:`override` forces a configuration
inside a ``with`` block (per thread), which is how the tests show that bitwise.

Streams
-------
:func:`stream` gives the stream a kernel is launched on: for CuPy arrays CuPy's current
stream (wrapped once per stream by ``numba.cuda.external_stream``), so work queued by
the caller with CuPy and by these kernels stays ordered; else numba's default stream ``0``.

Scratch
-------
:func:`scratch` hands out device buffers cached per (device, stream, host thread, dtype,
name) and grown on demand: the reductions' partial pairs and their one-element result,
allocated once instead of once per call (two threads launching on one stream interleave
their passes: each has its own).  A reduction reads its result back with a synchronous
copy before returning, so the next call on the same stream can reuse the buffer.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, replace
from typing import Dict, Optional, Tuple

import numpy as np
from numba import cuda

from ._intrin import SIM, WARP

__all__ = ["Launch", "THREADS", "config", "override", "grid", "grid_warps", "stream",
           "dev", "device_view", "read_scalar", "scratch", "expose", "cdiv"]

#: Threads per block of the streaming kernels on hardware (8 warps: enough loads in
#: flight per SM with the grid capped at one full wave, and a multiple of every warp size).
THREADS = 256
#: The simulator's configuration: one warp per block, two blocks at most.
SIM_THREADS = 32
SIM_BLOCKS = 2


@dataclass(frozen=True)
class Launch:
    """The launch configuration of one device.

    Attributes
    ----------
    device : int
        The device ordinal (``-1`` under the simulator).
    sm_count : int
        Streaming multiprocessors.
    warp : int
        Threads per warp.
    threads : int
        Threads per block of the streaming kernels.
    max_blocks : int
        The grid cap of a grid-stride loop: one full wave of ``threads``-blocks.
    """

    device: int
    sm_count: int
    warp: int
    threads: int
    max_blocks: int


if SIM:
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray as _FakeCUDAArray

_CONFIGS: Dict[int, Launch] = {}
_LOCAL = threading.local()


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive integers."""
    return -(-a // b)


def _device_config() -> Launch:
    if SIM:
        return Launch(device=-1, sm_count=SIM_BLOCKS, warp=WARP, threads=SIM_THREADS,
                      max_blocks=SIM_BLOCKS)
    dev = cuda.get_current_device()
    key = dev.id
    cfg = _CONFIGS.get(key)
    if cfg is None:
        warp = int(dev.WARP_SIZE)
        sms = int(dev.MULTIPROCESSOR_COUNT)
        threads = min(THREADS, int(dev.MAX_THREADS_PER_BLOCK)) // warp * warp
        per_sm = max(1, int(dev.MAX_THREADS_PER_MULTIPROCESSOR) // threads)
        cfg = Launch(device=key, sm_count=sms, warp=warp, threads=threads,
                     max_blocks=sms * per_sm)
        _CONFIGS[key] = cfg
    return cfg


def config() -> Launch:
    """The launch configuration of the current device (cached), or the one forced by
    :func:`override` in this thread."""
    forced = getattr(_LOCAL, "forced", None)
    return forced if forced is not None else _device_config()


@contextlib.contextmanager
def override(threads: Optional[int] = None, blocks: Optional[int] = None):
    """Force ``threads`` per block (a multiple of the warp size) and at most ``blocks``
    blocks for the kernels launched in this thread inside the ``with`` block.

    For tests (results must not change) and tuning; nothing in the library calls it.
    """
    base = _device_config()
    if threads is not None and (threads <= 0 or threads % base.warp or threads > THREADS):
        # (the reductions are compiled with launch_bounds of THREADS threads: a wider
        # block would not launch on a GPU, though the simulator, which ignores them, runs)
        raise ValueError(f"threads={threads}: a positive multiple of the warp size "
                         f"({base.warp}) of at most {THREADS}")
    cfg = replace(base, threads=threads or base.threads, max_blocks=blocks or base.max_blocks)
    old = getattr(_LOCAL, "forced", None)
    _LOCAL.forced = cfg
    try:
        yield cfg
    finally:
        _LOCAL.forced = old


def grid(n: int, cfg: Optional[Launch] = None) -> Tuple[int, int]:
    """``(blocks, threads)`` of a grid-stride loop with one thread per element."""
    cfg = cfg or config()
    return max(1, min(cdiv(max(n, 1), cfg.threads), cfg.max_blocks)), cfg.threads


def grid_warps(items: int, cfg: Optional[Launch] = None) -> Tuple[int, int]:
    """``(blocks, threads)`` of a grid-stride loop with one warp per item."""
    cfg = cfg or config()
    per_block = cfg.threads // cfg.warp
    return max(1, min(cdiv(max(items, 1), per_block), cfg.max_blocks)), cfg.threads


# --- streams -------------------------------------------------------------------------------

_STREAMS: Dict[Tuple[int, int], object] = {}


def _is_cupy(a) -> bool:
    return type(a).__module__.split(".")[0] in ("cupy", "cupyx")


def stream(*arrays):
    """The stream to launch on: CuPy's current stream when any argument is a CuPy
    array, else numba's default stream (``0``)."""
    if SIM or not any(_is_cupy(a) for a in arrays):
        return 0
    import cupy

    ptr = cupy.cuda.get_current_stream().ptr
    if ptr == 0:                        # CuPy's null stream is the legacy default stream
        return 0
    key = (cupy.cuda.runtime.getDevice(), ptr)
    s = _STREAMS.get(key)
    if s is None:
        s = _STREAMS[key] = cuda.external_stream(ptr)
    return s


def dev(*arrays):
    """The arrays as the kernels take them: CuPy (any ``__cuda_array_interface__``) arrays
    wrapped as numba device arrays **without** the interface's stream synchronisation
    (numba's default, a host-blocking ``cuStreamSynchronize`` of the producer's stream at
    every launch), which stream order makes unnecessary: the kernels are launched on
    CuPy's current stream (:func:`stream`).  NumPy arrays and numba device arrays pass
    through.  Returns a tuple (one entry per argument).

    Under the simulator a NumPy array is wrapped, without a copy, as the simulator's device
    array: its kernels then work on the caller's memory, as a GPU works on a CuPy array.
    (Given NumPy arrays, the simulator copies each argument in and back out separately, so
    an array passed twice -- BiCGSTAB's ``axpy2(alpha, p, x, omega, s, x)`` -- would have
    the first update undone by the second copy-back.)"""
    if SIM:
        return tuple(_FakeCUDAArray(a) if isinstance(a, np.ndarray) else a for a in arrays)
    return tuple(_view(a)
                 if hasattr(a, "__cuda_array_interface__") and not hasattr(a, "copy_to_host")
                 else a for a in arrays)


#: numba views of CuPy arrays, by (device, pointer, shape, strides, dtype).  Measured on
#: an H100: ``cuda.as_cuda_array`` costs ~30 us an array, and numba's launch with CuPy
#: arguments ~150 us against ~45 us with numba arrays -- most of a small solve's time.
#: A view is made with no owner (it neither keeps the CuPy memory alive nor frees it),
#: so a cached view is used only while a live CuPy array with the same pointer, shape,
#: strides and dtype is being passed: it then describes exactly that memory.
_VIEWS: Dict[tuple, object] = {}
_VIEWS_MAX = 4096


def _view(a):
    try:
        key = (a.data.device_id, a.data.ptr, a.shape, a.strides, a.dtype.char)
    except AttributeError:              # another __cuda_array_interface__ exporter
        return cuda.as_cuda_array(a, sync=False)
    v = _VIEWS.get(key)
    if v is None:
        if len(_VIEWS) >= _VIEWS_MAX:
            _VIEWS.clear()
        v = _VIEWS[key] = cuda.from_cuda_array_interface(a.__cuda_array_interface__,
                                                         owner=None, sync=False)
    return v


def device_view(a):
    """``a`` as a numba device array if it lives on the device (a numba device array, the
    simulator's, or anything with ``__cuda_array_interface__`` such as CuPy's), else
    ``None`` (a host array)."""
    if hasattr(a, "copy_to_host") and hasattr(a, "copy_to_device"):
        return a
    if hasattr(a, "__cuda_array_interface__"):
        return _view(a)
    return None


def read_scalar(out, strm):
    """``out[0]`` to the host: the one device-to-host copy of a reduction (synchronises
    ``strm``); a Python float, or a Python complex for a complex ``out``."""
    if SIM:
        v = out.copy_to_host()[0]
        return complex(v) if np.iscomplexobj(v) else float(v)
    key = (out.dtype.char, threading.get_ident())   # a thread's own: no race between streams
    host = _PINNED.get(key)
    if host is None:                    # one pinned scalar a dtype: no allocation a call
        host = _PINNED[key] = cuda.pinned_array(1, dtype=out.dtype)
    src = out if out.size == 1 else out[:1]
    if not strm:
        src.copy_to_host(host)
    else:
        src.copy_to_host(host, stream=strm)
        strm.synchronize()
    v = host[0]
    return complex(v) if np.iscomplexobj(v) else float(v)


_PINNED: Dict[tuple, np.ndarray] = {}


# --- scratch -------------------------------------------------------------------------------

_SCRATCH: Dict[tuple, object] = {}


def scratch(name: str, size: int, dtype, strm=0):
    """A cached device buffer of at least ``size`` elements of ``dtype`` (its first
    ``size`` elements are returned; the contents are undefined)."""
    dt = np.dtype(dtype)
    dev = -1 if SIM else cuda.get_current_device().id
    # a thread's own (as read_scalar's pinned scalar): two threads launching on one
    # stream (CuPy's default) interleave their passes, and one's final pass would read
    # the other's partials
    key = (dev, id(strm) if strm else 0, threading.get_ident(), dt.str, name)
    view = _SCRATCH_VIEWS.get((key, size))          # slicing a device array costs ~20 us
    if view is not None:
        return view
    with _SCRATCH_LOCK:                 # (the tables are shared by the threads)
        buf = _SCRATCH.get(key)
        if buf is None or buf.size < size:
            if buf is None:
                _drop_ended_threads()
            cap = max(size, 2 * buf.size if buf is not None else 64)
            buf = _SCRATCH[key] = cuda.device_array(cap, dtype=dt)
            for k in [k for k in list(_SCRATCH_VIEWS) if k[0] == key]:
                _SCRATCH_VIEWS.pop(k, None)         # views of the old buffer
        if len(_SCRATCH_VIEWS) >= 1024:
            _SCRATCH_VIEWS.clear()
        view = _SCRATCH_VIEWS[(key, size)] = buf[:size]
    return view


_SCRATCH_VIEWS: Dict[tuple, object] = {}
_SCRATCH_LOCK = threading.Lock()


def _drop_ended_threads():
    """Forget the scratch buffers of host threads that have ended (a new thread's first
    buffer: the device memory of a pool of short-lived threads is not kept for good);
    the caller holds :data:`_SCRATCH_LOCK`."""
    alive = {t.ident for t in threading.enumerate()}
    for key in [k for k in _SCRATCH if k[2] not in alive]:
        del _SCRATCH[key]
    for key in [k for k in _SCRATCH_VIEWS if k[0][2] not in alive]:
        del _SCRATCH_VIEWS[key]


# --- the compile test's view of a registered function ------------------------------------

def expose(func, pairs, *, warp=(), eft=()):
    """Record on a registered function the ``cuda.jit`` kernels it launches and their
    signatures (``func.cuda_kernels``), and which of them are warp kernels
    (``func.cuda_warp``) or error-free-transformation kernels (``func.cuda_eft``).

    See :mod:`mpsolve.kernels.cuda` for the convention; returns ``func``.
    """
    pairs = [(d, list(sigs)) for d, sigs in pairs]
    for d, sigs in pairs:
        if not sigs or not hasattr(d, "py_func"):
            raise TypeError(f"expose({func.__name__}): each entry is (cuda.jit kernel, "
                            f"[signature, ...]), got {d!r}, {sigs!r}")
    func.cuda_kernels = pairs
    func.cuda_warp = set(warp)
    func.cuda_eft = set(eft)
    return func
