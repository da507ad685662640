"""The vector length from which the CPU kernels open a parallel region, measured.

A parallel region pays off once the work it splits outweighs the cost of opening it, and
that cost depends on the machine far more than the streaming rate does: on a many-core
server whose idle threads spin it is a few microseconds, so a few ten thousand elements
are worth splitting; on the 2-vCPU virtual machines of this project, where the OpenMP
workers sleep between regions (``OMP_WAIT_POLICY=PASSIVE``), a region costs 55-80 us to
open, against 7 us for a serial ``axpy`` of 32768 elements -- the old fixed threshold made
every vector operation between 32768 and about 260,000 elements up to 11x slower than its
serial form (a CG iteration calls six), and medium-sized solves 1.2-2.3x slower in all.
With a short spin (``GOMP_SPINCOUNT=3000``, see :mod:`mpsolve.kernels`) a region costs
about 2 us there while regions come close together, and the threshold measured is 16384;
the wait policy is part of the key (below).

Model: a serial sweep costs ``a n``, a parallel one ``o + a n / p`` (``o`` the region's
cost, ``p`` its speed-up on long vectors); they cross at ``n* = o / (a (1 - 1/p))``.
:func:`parallel_min` measures ``o`` on a short vector and ``a`` and ``p`` on a long one
(``axpy``, each call after about 20 us of Python work, as between a solver's kernel calls,
so sleeping workers are measured as sleeping), and returns ``n*`` rounded to a power of
two, between :data:`LOW` and :data:`HIGH` (:data:`HIGH` where ``p`` brings nothing: one
thread, or cores that share one memory path).  Once per machine, in a child process
(about a second, its imports included; the caller's process starts no thread pool for
it): the value is kept in a small JSON file keyed by the machine (host name, CPUs, Numba's threads and
threading layer: :func:`_key`), so every process of a machine uses the same threshold --
and so the same kernels and the same bits for the same problem.  ``MPSOLVE_PARALLEL_MIN``
overrides it (no measurement); the file lives in ``MPSOLVE_CACHE_DIR``, else
``~/.cache/mpsolve`` (a directory that cannot be written: measured again per process).
"""
import json
import math
import os
import platform
import time

import numpy as np
from numba import get_num_threads

#: Bounds of the measured threshold (elements).  ``LOW`` is the old fixed value's half
#: (a region never pays below it); ``HIGH``: in effect "never split a vector".
LOW = 2 ** 14
HIGH = 2 ** 24
#: Lengths measured: ``o`` on ``SHORT`` elements (its sweep is negligible), ``a`` and ``p``
#: on ``LONG`` (8 MiB per vector: beyond the caches, as the vectors that get split).
SHORT = 2 ** 10
LONG = 2 ** 20
REPEAT = 15
#: The threshold where nothing could be measured (the old fixed value).
FALLBACK = 2 ** 15
GAP = 20e-6
FILE = "parallel_min.json"


def _median_time(f, x, y):
    ts = []
    for _ in range(REPEAT):
        t = time.perf_counter()
        while time.perf_counter() - t < GAP:       # Python work between kernel calls
            pass
        t = time.perf_counter()
        f(1e-9, x, y)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def _crossover(axpy_ser, axpy_par, xs, ys, xl, yl) -> float:
    """One estimate of ``n*`` (``inf`` where splitting brings nothing)."""
    o = max(_median_time(axpy_par, xs, ys) - _median_time(axpy_ser, xs, ys), 0.0)
    ser, par = _median_time(axpy_ser, xl, yl), _median_time(axpy_par, xl, yl)
    gain = ser - max(par - o, 1e-12)               # a n (1 - 1/p) on LONG elements
    if gain <= 0.05 * ser:                         # p <= 1.05
        return math.inf
    return o * LONG / gain


def measure(axpy_ser, axpy_par) -> int:
    """``n*`` of the module docstring, measured now with the serial and parallel ``axpy``
    kernels given (:mod:`.blas1`'s, which the threshold decides between; passed in, as
    :mod:`.blas1` reads the threshold through :mod:`._config`, which imports this module):
    the median of three estimates, rounded to the nearest power of two in ``[LOW, HIGH]``
    (five runs on this project's machine gave 222k-295k, all 2^18; one estimate alone once
    gave 2^21)."""
    if get_num_threads() < 2:
        return HIGH
    kernels = (axpy_ser, axpy_par)
    xs, ys = np.ones(SHORT), np.zeros(SHORT)
    xl, yl = np.ones(LONG), np.zeros(LONG)
    for f in kernels:                              # compiled (or loaded) and warm
        f(1e-9, xs, ys)
        f(1e-9, xl, yl)
    n_star = float(np.median([_crossover(*kernels, xs, ys, xl, yl) for _ in range(3)]))
    if not math.isfinite(n_star):
        return HIGH
    return int(min(HIGH, max(LOW, 2 ** round(math.log2(max(n_star, 1.0))))))


def _key() -> str:
    """This machine and threading set-up: host, CPUs, threads, Numba's version, the
    threading layer asked for and OpenMP's wait policy -- with ``"default"``, whether TBB
    is installed (Numba's default takes TBB's layer where it is, else OpenMP's: their
    regions cost 10 against 60 us here, and their thresholds differ by 4x)."""
    import numba
    from importlib import metadata

    layer = numba.config.THREADING_LAYER
    try:
        metadata.version("tbb")
        layer += "+tbb"
    except metadata.PackageNotFoundError:
        pass
    # OpenMP's wait policy sets what a region costs (a sleeping worker's wake-up or a
    # spinning one's): a threshold measured under one is not the other's
    wait = f"{os.environ.get('OMP_WAIT_POLICY', '')}/{os.environ.get('GOMP_SPINCOUNT', '')}"
    return "|".join((platform.node(), str(os.cpu_count()), str(get_num_threads()), layer,
                     numba.__version__, wait))


def _cache_path() -> str:
    root = os.environ.get("MPSOLVE_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "mpsolve")
    return os.path.join(root, FILE)


def parallel_min() -> int:
    """The threshold: ``MPSOLVE_PARALLEL_MIN`` if set, else this machine's kept value,
    else :func:`measure` in a child process (kept for the next process where the file can
    be written; :data:`FALLBACK` where the child fails)."""
    env = os.environ.get("MPSOLVE_PARALLEL_MIN")
    if env is not None:
        return int(env)
    path, key = _cache_path(), _key()
    kept = _read(path)
    entry = kept.get(key)
    if isinstance(entry, dict) and isinstance(entry.get("parallel_min"), int):
        return entry["parallel_min"]
    value = _measure_apart()
    if value is None:
        return FALLBACK
    kept[key] = {"parallel_min": value, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as fh:
            json.dump(kept, fh, indent=1)
        os.replace(tmp, path)                      # atomic: concurrent processes agree
    except OSError:
        pass
    return value


def _measure_apart():
    """:func:`measure` in a child process (``None`` where it fails): the caller's process
    does not start the threading layer's pool for it -- GNU OpenMP's is not fork-safe, and
    a process that never runs a parallel kernel should be free to fork."""
    import subprocess
    import sys

    code = ("from mpsolve.kernels.cpu import _calibrate, blas1; "
            "print(_calibrate.measure(blas1._axpy_ser, blas1._axpy_par))")
    # (the child's own import of the kernels must not measure again: the variable is set)
    env = dict(os.environ, MPSOLVE_PARALLEL_MIN=str(FALLBACK))
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120, check=True, env=env)
        return int(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _read(path) -> dict:
    """The kept values, by :func:`_key` (empty where the file is missing or unreadable)."""
    try:
        with open(path) as fh:
            kept = json.load(fh)
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}
