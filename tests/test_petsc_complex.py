"""The PETSc plug-in and complex data: it follows ``PETSc.ScalarType``; on a real PETSc
build complex data is refused with a message that says the installed PETSc is real."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

petsc4py = pytest.importorskip("petsc4py", reason="petsc4py is not installed (run .ci/setup.sh)")
from petsc4py import PETSc  # noqa: E402

import mpsolve.petsc as mp  # noqa: E402
from mpsolve.matrices import helmholtz2d, magnetic2d, poisson2d  # noqa: E402

REAL_BUILD = np.dtype(PETSc.ScalarType).kind != "c"


def test_scalar_dtype_is_petscs():
    assert mp.scalar_dtype() == np.dtype(PETSc.ScalarType)


def test_real_data_round_trips_in_the_scalar_type():
    A = poisson2d(5)
    P = mp.petsc_mat(A)
    C = mp.local_csr(P)
    assert C.dtype == mp.scalar_dtype()
    assert abs(C - A).max() == 0
    v = mp.petsc_vec(np.arange(4.0))
    np.testing.assert_array_equal(v.array, np.arange(4.0))


@pytest.mark.skipif(not REAL_BUILD, reason="the installed PETSc has complex scalars")
def test_complex_data_on_a_real_build_is_refused_clearly():
    with pytest.raises(TypeError, match=r"A is complex .*installed PETSc is built with real "
                                        r"scalars.*--with-scalar-type=complex"):
        mp.petsc_mat(helmholtz2d(4))
    with pytest.raises(TypeError, match=r"x is complex .*installed PETSc is built with real"):
        mp.petsc_vec(np.array([1.0 + 2.0j, 3.0]))
    # petsc4py alone would only say "Cannot cast array data from complex128 to float64"
    from mpsolve.bench.baselines import petsc_solve

    A = magnetic2d(4)
    with pytest.raises(TypeError, match="installed PETSc is built with real scalars"):
        petsc_solve(A, A @ np.ones(16), method="cg", pc="mpsolve-isai")


@pytest.mark.skipif(REAL_BUILD, reason="the installed PETSc is real (PETSc.ScalarType float64)")
@pytest.mark.parametrize("ctx,ksp_type", [(lambda: mp.ILU0(), "fgmres"),
                                          (lambda: mp.ISAI(variant="general"), "fgmres"),
                                          (lambda: mp.ISAI(), "cg")])
def test_complex_build_solves_complex_systems(ctx, ksp_type):
    A = helmholtz2d(12, k=10.0, eps=0.3) if ksp_type != "cg" else magnetic2d(12, flux=0.2)
    A = sp.csr_matrix(A)
    x_true = np.exp(1j * np.arange(A.shape[0]))
    b = A @ x_true
    P = mp.petsc_mat(A)
    ksp = PETSc.KSP().create(PETSc.COMM_SELF)
    ksp.setOperators(P)
    ksp.setType(ksp_type)
    ksp.setTolerances(rtol=1e-9, atol=0.0, max_it=2000)
    pc = ksp.getPC()
    pc.setType("python")
    c = ctx()
    pc.setPythonContext(c)
    bv, xv = mp.petsc_vec(b), mp.petsc_vec(np.zeros_like(b))
    ksp.solve(bv, xv)
    assert ksp.getConvergedReason() > 0
    x = xv.array.copy()
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)
    assert c.M.storage_dtype.kind == "c"


class _Vec:
    """The two attributes of a PETSc Vec the plug-in's apply reads (array_r, array)."""

    def __init__(self, a):
        self.array = a
        self.array_r = a


@pytest.mark.parametrize("make,ctx", [(lambda: magnetic2d(5, flux=0.3), mp.ISAI),
                                      (lambda: magnetic2d(5, flux=0.3), mp.ILU0),
                                      (lambda: poisson2d(5), mp.ISAI)])
def test_transpose_apply_of_a_hermitian_preconditioner(make, ctx):
    # what a complex PETSc build hands the context: M^T x for Hermitian M is conj(M conj(x))
    A = sp.csr_matrix(make())
    c = ctx(dtype="float64")
    kw = {"accumulate": "float64"} if ctx is mp.ISAI else {}   # sums in FP64: tight check
    c.M = c.precond_cls(dtype="float64", **kw).setup(A)
    assert c.M.symmetric
    n = A.shape[0]
    x = np.exp(1j * np.arange(n)) if A.dtype.kind == "c" else np.linspace(-1, 1, n)
    Md = np.column_stack([c.M.matvec(np.eye(n, dtype=A.dtype)[:, j]) for j in range(n)])
    y = _Vec(np.zeros(n, dtype=A.dtype))
    c.applyTranspose(None, _Vec(x.copy()), y)
    np.testing.assert_allclose(y.array, Md.T @ x, rtol=1e-12, atol=1e-12 * np.abs(Md).max())
