"""What every runner of the suite shares: the record of one run and the time limit."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

import numpy as np

__all__ = ["Run", "TimeLimit", "deadline_callback", "maxiter_for", "sampled",
           "mpsolve_threads", "spd_like"]


@dataclass
class Run:
    """One solve: a problem, an engine (``solver``) and its configuration, the outcome."""

    problem: str
    n: int
    nnz: int
    spd: bool
    solver: str            # mpsolve | scipy | petsc
    method: str
    precision: str
    precond: str
    setup_time: float = float("nan")
    solve_time: float = float("nan")
    iterations: int = 0
    true_residual: float = float("nan")
    converged: bool = False
    status: str = ""
    precond_nbytes: int = 0
    #: relative residual norms (sampled); at iterations ``history_its`` when given, else
    #: evenly spaced over ``iterations``
    history: List[float] = field(default_factory=list)
    history_its: List[int] = field(default_factory=list)
    #: seconds of each stage of the preconditioner's set-up, where it reports them
    #: (``SolveResult.precond_stats["stage_times"]``: pattern, solve, excess, fallback, store)
    setup_stages: Dict[str, float] = field(default_factory=dict)
    #: bytes one iteration must move (:func:`mpsolve.bench.suite.iteration_bytes`; NaN
    #: where the preconditioner's storage is not known)
    bytes_per_iteration: float = float("nan")
    #: MPI ranks of a PETSc run (``mpiexec -n ranks``; 1: in this process)
    ranks: int = 1

    @property
    def bandwidth(self):
        """Achieved memory bandwidth of the iteration, bytes per second: the bytes an
        iteration must move over the time of one (NaN without iterations or a model)."""
        if self.iterations <= 0 or not self.solve_time > 0:
            return float("nan")
        return self.bytes_per_iteration * self.iterations / self.solve_time

    @property
    def total_time(self):
        return self.setup_time + self.solve_time

    @property
    def precond_label(self):
        """The preconditioner as it ran: a PETSc PC on several ranks as it runs there,
        e.g. ``bjacobi+icc x2`` for ``icc`` on two ranks; else ``precond``."""
        if self.ranks > 1:
            from .petsc_mpi import pc_label

            return pc_label(self.precond, self.ranks)
        return self.precond

    @property
    def config(self):
        """``method/precond/precision`` (the preconditioner as :attr:`precond_label`)."""
        return f"{self.method}/{self.precond_label}/{self.precision}"

    @property
    def label(self):
        return f"{self.solver}:{self.config}"


class TimeLimit(Exception):
    """Raised from an iteration callback when a run exceeds ``--time-limit``."""


def deadline_callback(limit, counter=None, on_iteration=None):
    """A callback that counts iterations (in ``counter[0]``), calls
    ``on_iteration(iteration, *args)`` and stops the run past ``limit`` seconds."""
    start = time.perf_counter()

    def cb(*args):
        if counter is not None:
            counter[0] += 1
        if on_iteration is not None:
            on_iteration(counter[0] if counter is not None else None, *args)
        if time.perf_counter() - start > limit:
            raise TimeLimit
    return cb


def maxiter_for(method, args):
    """``--maxiter`` counts inner iterations; SciPy's and mpsolve's GMRES count cycles."""
    if method == "gmres":
        return max(1, args.maxiter // args.restart)
    return args.maxiter


def sampled(values, points=400):
    """About ``points`` evenly spaced items of ``values`` (a residual history), as floats."""
    step = max(1, len(values) // points)
    return [float(v) for v in values[::step]]


def mpsolve_threads():
    """Threads mpsolve's CPU kernels run on (Numba's thread count; mpsolve has no API of
    its own for it), for the results' headers; None when Numba is not importable."""
    try:
        import numba
    except ImportError:
        return None
    return int(numba.get_num_threads())


def emit(text, out=None):
    """Print a result ``text`` and, given a path ``out``, write it there too."""
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)


def find_collection():
    """SuiteSparse collection folders the bench takes matrices from: the folders of
    ``$MPSOLVE_MATRIX_PATH`` (as :func:`mpsolve.matrices.load`), ``$MPSOLVE_TEST_COLLECTION``
    (the tests' collection) and, in a source checkout, ``../shared/matrices/suitesparse``
    next to the repository; only those that exist, in that order."""
    items = [p for p in os.environ.get("MPSOLVE_MATRIX_PATH", "").split(os.pathsep) if p]
    if os.environ.get("MPSOLVE_TEST_COLLECTION"):
        items.append(os.environ["MPSOLVE_TEST_COLLECTION"])
    repo = Path(__file__).resolve().parents[1]
    items.append(str(repo.parent / "shared" / "matrices" / "suitesparse"))
    out = []
    for p in items:
        f = Path(p).expanduser()
        if f.is_dir() and f not in out:
            out.append(f)
    return out


def spd_like(A) -> bool:
    """Whether a matrix whose collection does not say (no ``likely_spd`` column) is taken
    as SPD (HPD), so that CG runs on it: symmetric (Hermitian) to 1e-12 of its largest
    entry and a real positive diagonal (a symmetric indefinite one fails CG visibly, as a
    run that did not converge)."""
    d = A.diagonal()
    return bool(d.size and np.isreal(d).all() and (d.real > 0).all() and
                abs(A - A.conj().T).max() <= 1e-12 * abs(A).max())
