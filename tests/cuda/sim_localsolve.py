"""The warp local solves (``kernels/cuda/localsolve.py``) and the DMMA helper's fallback
(``kernels/cuda/dmma.py``) under numba-cuda's simulator.

Run by ``tests/test_cuda.py`` in its own process with ``NUMBA_ENABLE_CUDASIM=1``.  Tiny
batches (<= 4 systems, 2 warps per block: the grid-stride loop and an idle warp exercised).

What is shown: ``local_solve_warp`` and ``local_tri_warp`` against ``numpy.linalg.solve``
for random well-conditioned systems, ``s`` in ``{1, 3, 8, 25, 32}``; their acceptance
quantities equal (to rounding) the CPU formula of ``precond/_localsolve._checked_solve``;
an exactly singular system, a rank-deficient one and a zero-diagonal triangular one are
flagged (``bwd = cond = inf`` or rejected by the CPU thresholds), never NaN-silent; the
DMMA fallback's batched ``b x b`` products against ``numpy.matmul``.
"""
from __future__ import annotations

import numpy as np
import pytest

import numba

assert numba.config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1 (tests/test_cuda.py does)"

from mpsolve.kernels import lookup  # noqa: E402
from mpsolve.kernels.cuda import dmma, localsolve as LS  # noqa: E402

from mpsolve.precond._localsolve import BWD_TOL, COND_LIMIT  # noqa: E402  (the CPU's rule)
SIZES = (1, 3, 8, 25, 32)


def _cpu_quantities(A, X, pos):
    """The CPU's (bwd, ||M||_inf ||x||_inf) for ``M = A^T``, one right-hand side."""
    M = np.swapaxes(A, 1, 2)
    E = np.zeros_like(X)
    E[np.arange(len(pos)), pos] = 1.0
    R = np.einsum("tij,tj->ti", M, X) - E
    nA = np.abs(M).sum(axis=2).max(axis=1)
    nX = np.abs(X).max(axis=1)
    return np.abs(R).max(axis=1) / (nA * nX + 1.0), nA * nX


def _systems(s, batch, rng, kind="general"):
    A = rng.standard_normal((batch, s, s))
    if kind == "general":
        # well-conditioned, but pivoting needed: a permuted diagonally dominant matrix
        for t in range(batch):
            A[t] += 2.0 * s * np.eye(s)[rng.permutation(s)]
    else:
        A += 2.0 * s * np.eye(s)
        A = np.triu(A) if kind == "upper" else np.tril(A)
    pos = rng.integers(0, s, size=batch)
    return np.ascontiguousarray(A), pos


def test_registered():
    assert lookup("gpu", "local_solve_warp", ("float64",)) is LS.local_solve_warp
    assert lookup("gpu", "local_tri_warp", ("float64",)) is LS.local_tri_warp
    assert lookup("gpu", "block_gemm_dmma", ("float64",)) is dmma.block_gemm


@pytest.mark.parametrize("s", SIZES)
def test_gauss_jordan_vs_numpy(s):
    rng = np.random.default_rng(100 + s)
    batch = 3 if s >= 25 else 4
    A, pos = _systems(s, batch, rng)
    X, Q = LS.local_solve_warp(A, pos)
    E = np.zeros((batch, s))
    E[np.arange(batch), pos] = 1.0
    ref = np.linalg.solve(np.swapaxes(A, 1, 2), E[..., None])[..., 0]
    assert np.allclose(X, ref, rtol=1e-12, atol=1e-14), np.abs(X - ref).max()
    bwd, cond = _cpu_quantities(A, X, pos)
    assert np.allclose(Q[:, 1], cond, rtol=1e-14)
    # both residuals are at rounding level (different summation orders): compare absolutely
    assert np.allclose(Q[:, 0], bwd, rtol=0, atol=4 * s * np.finfo(float).eps)
    assert (Q[:, 0] <= BWD_TOL).all() and (Q[:, 1] <= COND_LIMIT).all()


@pytest.mark.parametrize("s", (1, 3, 8, 32))
@pytest.mark.parametrize("tri", ("lower", "upper"))
def test_triangular_vs_numpy(s, tri):
    rng = np.random.default_rng(7 * s + len(tri))
    batch = 3
    A, pos = _systems(s, batch, rng, tri)
    # A upper -> M = A^T lower (forward substitution)
    X, Q = LS.local_tri_warp(A, pos, lower_m=(tri == "upper"))
    E = np.zeros((batch, s))
    E[np.arange(batch), pos] = 1.0
    ref = np.linalg.solve(np.swapaxes(A, 1, 2), E[..., None])[..., 0]
    assert np.allclose(X, ref, rtol=1e-12, atol=1e-14), np.abs(X - ref).max()
    bwd, cond = _cpu_quantities(A, X, pos)
    assert np.allclose(Q[:, 1], cond, rtol=1e-14)
    assert (Q[:, 0] <= BWD_TOL).all()


def test_singular_flagged_never_nan_silent():
    rng = np.random.default_rng(5)
    s = 8
    A, pos = _systems(s, 4, rng)
    A[1] = 0.0                                   # exactly singular: zero pivot
    A[2, :, 3] = A[2, :, 5]                      # two equal columns of A: rows of M equal
    A[3, 4, :] = 0.0                             # a zero row of A: column of M zero
    X, Q = LS.local_solve_warp(A, pos)
    assert not np.isnan(Q).any()
    assert Q[0, 0] <= BWD_TOL and Q[0, 1] <= COND_LIMIT   # the good one accepted
    for t in (1, 2, 3):
        rejected = not (Q[t, 0] <= BWD_TOL) or not (Q[t, 1] <= COND_LIMIT) \
            or not np.isfinite(X[t]).all()
        assert rejected, (t, Q[t])
    assert Q[1, 0] == np.inf and Q[1, 1] == np.inf


def test_triangular_zero_diagonal_flagged():
    rng = np.random.default_rng(6)
    A, pos = _systems(3, 2, rng, "lower")
    A[1, 1, 1] = 0.0
    X, Q = LS.local_tri_warp(A, pos, lower_m=False)
    assert Q[0, 0] <= BWD_TOL
    assert Q[1, 0] == np.inf and Q[1, 1] == np.inf


@pytest.mark.parametrize("b", (1, 3, 8))
def test_dmma_fallback_vs_numpy(b):
    rng = np.random.default_rng(b)
    nb = 3
    A = rng.standard_normal((nb, b, b))
    B = rng.standard_normal((nb, b, b))
    C = rng.standard_normal((nb, b, b))
    out = dmma.block_gemm(A, B, C.copy(), alpha=-1.0)
    assert np.allclose(out, C - A @ B, rtol=1e-13, atol=1e-13)
    out = dmma.block_gemm(A, B)
    assert np.allclose(out, A @ B, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("s,b", [(4, 2), (9, 3), (32, 2)])
@pytest.mark.parametrize("tri", ["general", "lower", "upper"])
def test_block_rows_vs_numpy(s, b, tri):
    """The block-row form (``nrhs = b`` columns ``pos b + u``, one factorisation): against
    ``numpy.linalg.solve``, its block quantities equal to the CPU's block formula (norms
    over the ``b`` columns), a singular system flagged."""
    rng = np.random.default_rng(11 * s + b + len(tri))
    batch = 3
    A, _ = _systems(s, batch, rng, tri)
    pos = rng.integers(0, s // b, size=batch)
    if tri == "general":
        A[2, :, 1] = 0.0                         # a zero column of A: M singular
        X, Q = LS.local_solve_warp(A, pos, nrhs=b)
    else:
        A[2, 1, 1] = 0.0                         # a zero diagonal
        X, Q = LS.local_tri_warp(A, pos, lower_m=(tri == "upper"), nrhs=b)
    assert X.shape == (batch, s, b)
    M = np.swapaxes(A, 1, 2)
    E = np.zeros((batch, s, b))
    for t in range(batch):
        E[t, pos[t] * b + np.arange(b), np.arange(b)] = 1.0
    ref = np.linalg.solve(M[:2], E[:2])
    assert np.allclose(X[:2], ref, rtol=1e-12, atol=1e-14), np.abs(X[:2] - ref).max()
    nA = np.abs(M[:2]).sum(axis=2).max(axis=1)
    nX = np.abs(X[:2]).sum(axis=2).max(axis=1)
    bwd = np.abs(M[:2] @ X[:2] - E[:2]).sum(axis=2).max(axis=1) / (nA * nX + 1.0)
    assert np.allclose(Q[:2, 1], nA * nX, rtol=1e-14)
    assert np.allclose(Q[:2, 0], bwd, rtol=0, atol=4 * s * np.finfo(float).eps)
    assert (Q[:2, 0] <= BWD_TOL).all()
    assert Q[2, 0] == np.inf and Q[2, 1] == np.inf and not np.isnan(X).any()
