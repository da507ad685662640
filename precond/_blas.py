"""BLAS/LAPACK threads during the set-up of the local systems."""
from __future__ import annotations

import contextlib

from threadpoolctl import threadpool_limits

__all__ = ["blas_single_thread"]


@contextlib.contextmanager
def blas_single_thread():
    """Run the block with a single-threaded BLAS/LAPACK (``threadpoolctl``).

    The local systems are small and many: a multithreaded LAPACK call on a
    200 x 200 system costs more in thread wake-ups than it computes (measured
    here: 100 batched 225 x 225 solves took 6.3 s with OpenBLAS threads on a busy
    2-core machine, 0.06 s with one).
    """
    with threadpool_limits(limits=1, user_api="blas"):
        yield
