"""Right-preconditioned GMRES without the Z basis where ``M`` is linear (issue 14).

With FP64 working vectors and an ``M`` whose apply carries its sums in FP64
(:meth:`mpsolve.precond.Preconditioner.linear_apply`), ``gmres_body`` keeps one scratch
vector for ``z_j = M v_j`` and ends each cycle with ``x += M (V_k y)``; otherwise it keeps
``Z = [M v_0, ...]`` (flexible GMRES).  Checked here: which preconditioners vouch for a
linear apply, that the linear path allocates no ``Z`` rows, that it converges like the
flexible path (forced by a test-only patch of ``linear_apply``) and meets ``rtol`` in the
FP64 true residual, and that what cannot vouch stays flexible.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import mpsolve
from mpsolve.matrices import convection_diffusion2d, poisson2d
from mpsolve.precond import (ILU0, ILUT, ISAI, BlockILU0, BlockISAI, BlockJacobi, Jacobi,
                             Preconditioner, Reordered)

F32, F64, C64, C128 = (np.dtype(t) for t in ("float32", "float64", "complex64",
                                             "complex128"))
M_RESTART = 10


def _A():
    return convection_diffusion2d(20)          # nonsymmetric, n = 400


def _solver(A, M, policy, monkeypatch=None, flexible=False):
    """A GMRES(10) right-preconditioned Solver; ``flexible``: ``linear_apply`` patched to
    False on the preconditioner's class (the Z basis forced)."""
    if flexible:
        monkeypatch.setattr(Preconditioner, "linear_apply", lambda self, rd, od: False)
    return mpsolve.Solver(A, method="gmres", side="right", restart=M_RESTART, precond=M,
                          precision=policy, escalate=False)


def _z_rows(solver):
    """Rows of the Z arrays the solves' workspace holds (0: none)."""
    ws = solver._problem.workspace
    return sum(a.shape[0] for (name, _shape, _dt), a in ws._arrays.items() if name == "Z")


# ------------------------------------------------------------------ who vouches
@pytest.mark.parametrize("make,linear", [
    (lambda: Jacobi(), True),
    (lambda: Jacobi(dtype="float64"), True),
    (lambda: BlockJacobi(block_size=2), True),
    (lambda: ILU0(), True),
    (lambda: ILU0(blocks=2), True),
    (lambda: ILUT(), True),
    (lambda: BlockILU0(block_size=2), True),
    (lambda: ISAI(variant="general", accumulate="float64"), True),
    (lambda: ISAI(variant="spd", accumulate="float64"), True),
    (lambda: ISAI(variant="general"), True),             # default: FP64 row sums
    (lambda: ISAI(variant="general", accumulate="float32"), False),
    (lambda: BlockISAI(block_size=2, accumulate="float64"), True),
    (lambda: BlockISAI(block_size=2), True),
    (lambda: BlockISAI(block_size=2, accumulate="float32"), False),
    (lambda: Reordered(ILU0()), True),
    (lambda: Reordered(ISAI(variant="general")), True),
    (lambda: Reordered(ISAI(variant="general", accumulate="float32")), False),
])
def test_linear_apply_by_preconditioner(make, linear):
    A = _A()
    M = make()
    assert not M.linear_apply(F64, F64)                  # not set up: unknown
    M.setup(A)
    assert M.linear_apply(F64, F64) is linear
    # FP32 vectors round every product to FP32: never linear to working precision
    for rd, od in ((F32, F32), (F32, F64), (F64, F32)):
        assert not M.linear_apply(rd, od)


def test_linear_apply_complex():
    A = (_A() + 1j * sp.eye(400)).tocsr()
    assert Jacobi().setup(A).linear_apply(C128, C128)
    assert ILU0().setup(A).linear_apply(C128, C128)
    assert not Jacobi().setup(A).linear_apply(C64, C64)


def test_a_subclass_that_changes_apply_is_not_linear():
    class Scaled(Jacobi):
        def apply(self, r, out):
            super().apply(r, out)
            out *= 2.0

    class Vouching(Scaled):
        def _linear(self):
            return True

    A = _A()
    assert not Scaled().setup(A).linear_apply(F64, F64)
    assert Vouching().setup(A).linear_apply(F64, F64)
    # the base class cannot know what a bare subclass's apply does
    assert not Preconditioner().linear_apply(F64, F64)


# ------------------------------------------------------------------ GMRES
@pytest.mark.parametrize("pc", ["jacobi", "ilu0"])
@pytest.mark.parametrize("policy", ["double", "mixed"])
def test_linear_m_keeps_no_z_basis(monkeypatch, pc, policy):
    """No Z rows (one scratch vector), iterations within one of the flexible run, the FP64
    true residual within rtol."""
    A = _A()
    n = A.shape[0]
    b = A @ np.linspace(1.0, 2.0, n)
    rtol = 1e-10
    lin = _solver(A, pc, policy)
    r_lin = lin.solve(b, rtol=rtol)
    with monkeypatch.context() as mp:
        flex = _solver(A, pc, policy, mp, flexible=True)
        r_flex = flex.solve(b, rtol=rtol)
    assert _z_rows(lin) == 1 and _z_rows(flex) == M_RESTART
    bytes_lin = lin._problem.workspace.nbytes
    bytes_flex = flex._problem.workspace.nbytes
    assert bytes_flex - bytes_lin == (M_RESTART - 1) * n * 8
    assert r_lin.info == 0 and r_flex.info == 0
    assert abs(r_lin.iterations - r_flex.iterations) <= 1
    bnrm = np.linalg.norm(b)
    for r in (r_lin, r_flex):
        assert np.linalg.norm(b - A @ r.x) <= rtol * bnrm


def test_linear_m_matches_the_flexible_iterates(monkeypatch):
    """Over one cycle ``M (V_k y)`` and ``Z_k y`` agree to FP64 rounding: the first cycle's
    iterate of both paths (Jacobi, ``double``)."""
    A = _A()
    n = A.shape[0]
    b = A @ np.ones(n)
    xs = []
    for flexible in (False, True):
        with monkeypatch.context() as mp:
            s = _solver(A, "jacobi", "double", mp, flexible=flexible)
            xs.append(s.solve(b, rtol=1e-14, maxiter=1).x)
    np.testing.assert_allclose(xs[0], xs[1], rtol=1e-10, atol=1e-12 * np.abs(xs[1]).max())


def test_sparse_matrix_m_follows_its_accumulate():
    """A SciPy sparse ``M``: its SparseOperator's row sums decide (``acc64`` under
    ``double``/``mixed``); a LinearOperator ``M`` stays flexible."""
    A = _A()
    n = A.shape[0]
    b = A @ np.ones(n)
    Mmat = sp.diags(1.0 / A.diagonal()).tocsr()
    for M, rows in ((Mmat, 1), (spla.aslinearoperator(Mmat), M_RESTART)):
        s = mpsolve.Solver(A, method="gmres", side="right", restart=M_RESTART, precond=M,
                           precision="mixed", escalate=False)
        res = s.solve(b, rtol=1e-10)
        assert res.info == 0
        assert np.linalg.norm(b - A @ res.x) <= 1e-10 * np.linalg.norm(b)
        assert _z_rows(s) == rows


@pytest.mark.parametrize("make,policy", [
    (lambda: BlockISAI(block_size=2, accumulate="float32"), "mixed"),   # FP32 row sums
    (lambda: Jacobi(), "single"),                            # FP32 working vectors
])
def test_not_linear_stays_flexible(make, policy):
    A = poisson2d(16) + sp.diags(np.linspace(0.0, 0.5, 256), 1, shape=(256, 256))
    A = sp.csr_matrix(A)
    b = A @ np.ones(A.shape[0])
    s = mpsolve.Solver(A, method="gmres", side="right", restart=M_RESTART, precond=make(),
                       precision=policy, escalate=False)
    res = s.solve(b, rtol=1e-5)
    assert res.info == 0
    assert np.linalg.norm(b - A @ res.x) <= 1e-5 * np.linalg.norm(b)
    assert _z_rows(s) == M_RESTART


def test_compressed_basis_with_a_linear_m():
    """``mixed-cb`` (FP32 basis rows) with Jacobi, right: the linear path widens ``v_j``
    into the scratch and applies ``M`` once per cycle to ``V_k y``."""
    A = _A()
    b = A @ np.ones(A.shape[0])
    s = mpsolve.Solver(A, method="gmres", side="right", restart=M_RESTART, precond="jacobi",
                       precision="mixed-cb", escalate=False)
    res = s.solve(b, rtol=1e-8)
    assert res.info == 0 and _z_rows(s) == 1
    assert np.linalg.norm(b - A @ res.x) <= 1e-8 * np.linalg.norm(b)


def test_a_preconditioner_a_solve_set_up_is_set_up_again_for_the_other_side():
    """An ISAI that a left-preconditioned solve set up (the left inverse, M A ~ I), passed
    again to a right-preconditioned one, is set up again as the right inverse (it was
    reused: the wrong inverse for that side); the caller's own set-up stays theirs."""
    import mpsolve
    from mpsolve.matrices import convection_diffusion2d
    from mpsolve.precond import ISAI

    A = convection_diffusion2d(20, peclet=5.0).tocsr()
    b = A @ np.ones(A.shape[0])
    M = ISAI()
    mpsolve.gmres(A, b, M=M, rtol=1e-10)
    assert M.variant == "general" and M.setups == 1
    r = mpsolve.solve(A, b, method="gmres", side="right", precond=M, rtol=1e-10)
    assert r.info == 0 and M.variant == "right" and M.setups == 2
    mpsolve.bicgstab(A, b, M=M, rtol=1e-10)               # (right-preconditioned too)
    assert M.setups == 2
    own = ISAI()
    own.setup(A)
    mpsolve.solve(A, b, method="gmres", side="right", precond=own, rtol=1e-10)
    assert own.variant == "general" and own.setups == 1


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("precision", ["double", "single"])
def test_an_exact_preconditioner_below_the_floor_is_a_stagnation_not_a_singular_one(
        side, precision):
    """ILU(0) of a tridiagonal matrix is its LU: GMRES breaks down happily at once, and
    below the working precision's floor the cycles stop lowering the residual.  That was
    -13, "A or M is singular"; R is regular there (the space held the answer), so it is
    the floor: info > 0, the stagnation's status (the block path's columns too).  (A
    singular R keeps -13: the -13 tests of test_scipy_contract.py and test_auto.py.)"""
    n = 200
    rng = np.random.default_rng(0)
    A = sp.diags([rng.uniform(-1, 0, n - 1), 4 + rng.uniform(0, 1, n),
                  rng.uniform(-1, 0.5, n - 1)], [-1, 0, 1]).tocsr()
    b = A @ np.ones(n)
    kw = dict(method="gmres", precond="ilu0", side=side, rtol=1e-17, precision=precision,
              escalate=False)
    r = mpsolve.solve(A, b, **kw)
    assert r.info > 0 and "stagnated at the accuracy floor" in r.status, r.status
    B = mpsolve.solve(A, np.column_stack([b, 2 * b]), **kw)
    assert np.all(B.column_info > 0), B.column_info
