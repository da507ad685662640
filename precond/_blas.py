"""BLAS/LAPACK threads during the set-up of the local systems."""
from __future__ import annotations

import contextlib

from threadpoolctl import ThreadpoolController

__all__ = ["blas_single_thread"]

_CONTROLLER = []


def _controller():
    """The process's ``ThreadpoolController``, made once: finding the loaded BLAS
    libraries scans the process's shared objects (about 8 ms here, more than the whole
    set-up of a small preconditioner), so it is not repeated per set-up.  ``import
    mpsolve`` has already loaded NumPy's and SciPy's BLAS by then."""
    if not _CONTROLLER:
        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0]


@contextlib.contextmanager
def blas_single_thread():
    """Run the block with a single-threaded BLAS/LAPACK (``threadpoolctl``).

    The local systems are small and many: a multithreaded LAPACK call on a
    200 x 200 system costs more in thread wake-ups than it computes (measured
    here: 100 batched 225 x 225 solves took 6.3 s with OpenBLAS threads on a busy
    2-core machine, 0.06 s with one).
    """
    with _controller().limit(limits=1, user_api="blas"):
        yield
