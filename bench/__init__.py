"""mpsolve.bench: the benchmark runner behind ``mpsolve bench`` (the ``bench`` extra).

Not part of the library: ``import mpsolve`` never imports it, and it needs the
``bench`` extra (``pip install 'mpsolve[bench]'``: rich for the progress display,
matplotlib for the plots).

Modules:

``suite``
    problems, configurations, the runner, the ``mpsolve bench`` options and ``main``.
``baselines``
    SciPy (``cg``/``gmres``/``bicgstab`` with Jacobi or ``spilu``) and PETSc (KSP with
    its own PCs or mpsolve's, :func:`~mpsolve.bench.baselines.petsc_solve`).
``petsc_mpi``
    PETSc's KSP on several MPI ranks: the worker run under ``mpiexec`` (once per bench
    run for all its PETSc runs) and :func:`~mpsolve.bench.petsc_mpi.run_jobs`, which
    launches it.
``report``
    Markdown tables, summaries and the table printed at the end.
``plots``
    convergence plots and the performance profile (matplotlib).

The ``bench_*.py`` files next to them are stand-alone scripts and pytest-benchmark
micro-benchmarks (``python -m pytest bench/ --benchmark-only``).
"""
from __future__ import annotations

__all__ = ["add_arguments", "main", "run_suite", "Run"]


def __getattr__(name):
    # imported on first use: ``mpsolve bench --help`` and the runner load only what they need
    if name in __all__:
        from . import suite

        return getattr(suite, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
