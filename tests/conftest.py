"""Shared fixtures: problem tables, the SuiteSparse collection, and printed tables."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

# The kernels' parallel threshold is measured per machine (mpsolve.kernels.cpu._calibrate);
# the suite pins it (before mpsolve is imported, and for its subprocesses) so that every
# kernel's parallel form runs at the sizes the tests use, on every machine alike
os.environ.setdefault("MPSOLVE_PARALLEL_MIN", "32768")

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = Path(os.environ.get("MPSOLVE_TEST_COLLECTION",
                                 ROOT.parent / "shared" / "matrices" / "suitesparse"))

_TABLES: dict = {}


def manifest():
    """Rows of the test collection's MANIFEST.tsv (empty if the folder is missing)."""
    f = COLLECTION / "MANIFEST.tsv"
    if not f.exists():
        return []
    lines = f.read_text().splitlines()
    head = lines[0].split("\t")
    return [dict(zip(head, ln.split("\t"))) for ln in lines[1:] if ln.strip()]


def load_collection_matrix(name):
    from mpsolve.matrices import read_mtx

    return read_mtx(COLLECTION / f"{name}.mtx.gz")


@pytest.fixture(scope="session")
def table():
    """``table(title, header)`` returns a list; rows appended to it are printed
    at the end of the test run (pytest's terminal summary)."""

    def get(title, header):
        return _TABLES.setdefault(title, (header, []))[1]

    return get


def pytest_terminal_summary(terminalreporter):
    for title, (header, rows) in _TABLES.items():
        if not rows:
            continue
        tr = terminalreporter
        tr.section(title)
        widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
        tr.write_line("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
        for r in sorted(rows, key=lambda r: tuple(str(c) for c in r)):
            tr.write_line("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


# ----------------------------------------------------------------- problems
def _poisson1d(n):
    return sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1], format="csr")


def _poisson2d(n):
    T = _poisson1d(n)
    I = sp.eye(n, format="csr")
    return (sp.kron(T, I) + sp.kron(I, T)).tocsr()


def _random_spd(n, seed):
    rng = np.random.default_rng(seed)
    B = sp.random(n, n, density=0.05, random_state=rng, format="csr")
    return (B @ B.T + n * 0.1 * sp.eye(n)).tocsr()


def _nonsym(n, seed):
    rng = np.random.default_rng(seed)
    B = sp.random(n, n, density=0.05, random_state=rng, format="csr")
    return (B + 4 * sp.eye(n) + sp.diags(np.ones(n - 1), 1)).tocsr()


def _indefinite(n):
    d = np.linspace(-1, 3, n)
    d[np.abs(d) < 0.1] = 0.5
    return sp.diags(d).tocsr() + 0.01 * _poisson1d(n)


def problems():
    """(name, A, symmetric positive definite?) -- SciPy's test table, with FP32 twins."""
    base = [
        ("poisson1d", _poisson1d(40), True),
        ("poisson2d", _poisson2d(12), True),
        ("random-spd", _random_spd(80, 1), True),
        ("nonsymmetric", _nonsym(80, 2), False),
        ("indefinite", _indefinite(60), False),
    ]
    out = []
    for name, A, spd in base:
        out.append((name, A, spd))
        out.append((name + "-f32", A.astype(np.float32), spd))
    return out


def problem(name):
    """The matrix of one named entry of :func:`problems`."""
    for n, A, _ in problems():
        if n == name:
            return A
    raise KeyError(name)


def petsc_mat_apply(pc, R):
    """``pc.matApply`` on the columns of ``R`` (dense PETSc matrices in and out, one
    process); returns the result as a NumPy array."""
    from petsc4py import PETSc

    n, k = R.shape
    X = PETSc.Mat().createDense((n, k), array=np.asfortranarray(R), comm=PETSc.COMM_SELF)
    Y = PETSc.Mat().createDense((n, k), comm=PETSc.COMM_SELF)
    Y.setUp()
    X.assemble()
    Y.assemble()
    pc.matApply(X, Y)
    out = Y.getDenseArray().copy()
    X.destroy()
    Y.destroy()
    return out
