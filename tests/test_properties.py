"""Property tests (hypothesis) on random SPD and nonsymmetric systems."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mpsolve

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def spd_systems(draw):
    n = draw(st.integers(1, 60))
    density = draw(st.floats(0.02, 0.5))
    seed = draw(st.integers(0, 2**31 - 1))
    shift = draw(st.floats(1e-3, 10.0))
    scale = 10.0 ** draw(st.integers(-6, 6))
    rng = np.random.default_rng(seed)
    B = sp.random(n, n, density=density, random_state=rng, format="csr")
    A = (B @ B.T + shift * sp.eye(n)) * scale
    b = rng.standard_normal(n) * draw(st.sampled_from([1.0, 1e-8, 1e8]))
    return A.tocsr(), b


@st.composite
def nonsymmetric_systems(draw):
    n = draw(st.integers(1, 60))
    density = draw(st.floats(0.02, 0.4))
    seed = draw(st.integers(0, 2**31 - 1))
    dominance = draw(st.floats(0.5, 4.0))
    rng = np.random.default_rng(seed)
    B = sp.random(n, n, density=density, random_state=rng, format="csr",
                  data_rvs=lambda k: rng.standard_normal(k))
    rowsum = np.asarray(abs(B).sum(axis=1)).ravel()
    A = B + sp.diags(dominance * (rowsum + 1.0))
    b = rng.standard_normal(n)
    return A.tocsr(), b


def _truthful(A, b, r, rtol):
    """info == 0 exactly when the FP64 true residual meets the tolerance.  Two FP64
    evaluations of ``b - A x`` differ by rounding, ``~ n eps |A||x|``: outside that band
    the verdict must agree, and the reported residual must match ours within it."""
    bn = np.linalg.norm(b)
    true = np.linalg.norm(b - A @ r.x) / bn
    band = 4 * A.shape[0] * np.finfo(float).eps * np.linalg.norm(abs(A) @ abs(r.x) + abs(b)) / bn
    assert np.isfinite(r.x).all()
    assert abs(r.true_residual - true) <= 1e-6 * true + band
    if abs(true - rtol) > band:
        assert (r.info == 0) == (true <= rtol), (r.status, true)


@SETTINGS
@given(spd_systems(), st.sampled_from(["double", "mixed-eft", "ir", "single"]))
def test_cg_on_random_spd_converges_truthfully(system, precision):
    A, b = system
    b0 = b.copy()
    r = mpsolve.solve(A, b, method="cg", precond="jacobi", precision=precision, rtol=1e-8,
                      maxiter=20 * A.shape[0] + 50)
    assert (b == b0).all()
    _truthful(A, b, r, 1e-8)
    assert r.converged  # SPD with Jacobi, budget 20n: CG must get there (escalating if needed)


@SETTINGS
@given(nonsymmetric_systems(), st.sampled_from(["gmres", "bicgstab"]),
       st.sampled_from(["double", "mixed", "eft"]))
def test_nonsymmetric_diagonally_dominant_converges(system, method, precision):
    A, b = system
    r = mpsolve.solve(A, b, method=method, precond="jacobi", precision=precision, rtol=1e-9,
                      maxiter=500)
    _truthful(A, b, r, 1e-9)
    assert r.converged


@SETTINGS
@given(st.integers(2, 40), st.integers(0, 2**31 - 1), st.sampled_from(["cg", "gmres", "bicgstab"]))
def test_arbitrary_matrices_never_lie(n, seed, method):
    """Whatever the matrix (indefinite, singular, badly scaled), info tells the truth and
    the returned x is finite."""
    rng = np.random.default_rng(seed)
    A = sp.random(n, n, density=0.3, random_state=rng, format="csr",
                  data_rvs=lambda k: rng.standard_normal(k) * 10.0 ** rng.integers(-5, 5, k))
    b = rng.standard_normal(n)
    r = mpsolve.solve(A, b, method=method, rtol=1e-8, maxiter=60, precond=None)
    _truthful(A, b, r, 1e-8)
