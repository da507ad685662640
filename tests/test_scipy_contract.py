"""SciPy's contract for ``cg``/``gmres``/``bicgstab``, point by point: each test states
the SciPy behaviour it mirrors and checks mpsolve against SciPy on the same call."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import mpsolve

METHODS = ["cg", "gmres", "bicgstab"]


def _spd(n=12):
    return sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n), format="csr")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("tols", [dict(atol=np.inf), dict(rtol=np.inf), dict(atol=1e3)])
@pytest.mark.parametrize("x0", [None, "ones"])
def test_a_tolerance_every_residual_meets_returns_x0_at_once(method, tols, x0):
    """SciPy: ``atol=np.inf`` (or any ``atol >= ||b - A x0||``) is accepted and the
    solver returns ``x0`` (zeros by default) with ``info == 0`` and no iteration."""
    A = _spd()
    b = A @ np.arange(1.0, 13.0)
    start = None if x0 is None else np.ones(12)
    calls = []
    x, info = getattr(mpsolve, method)(A, b, x0=start, callback=calls.append, **tols)
    xs, infos = getattr(spla, method)(A, b, x0=start, **tols)
    assert info == infos == 0
    np.testing.assert_array_equal(x, xs)
    np.testing.assert_array_equal(x, np.zeros(12) if x0 is None else np.ones(12))
    assert calls == []


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("bad", [None, "legacy", np.nan, -1.0])
def test_bad_atol_is_a_value_error_as_in_scipy(method, bad):
    """SciPy (>= 1.14): ``atol=None``, ``atol='legacy'`` and a negative ``atol`` raise
    ``ValueError``.  mpsolve also refuses NaN (SciPy iterates with it and can never
    converge).  mpsolve's message names the argument."""
    A = _spd()
    b = np.ones(12)
    if not (isinstance(bad, float) and np.isnan(bad)):
        with pytest.raises(ValueError):
            getattr(spla, method)(A, b, atol=bad)
    with pytest.raises(ValueError, match="atol"):
        getattr(mpsolve, method)(A, b, atol=bad)
    with pytest.raises(ValueError, match="rtol"):
        getattr(mpsolve, method)(A, b, rtol=bad if bad is not None else "legacy")


def test_a_tolerance_of_the_wrong_type_is_also_a_type_error():
    """Kept for callers that catch ``TypeError`` (mpsolve's earlier behaviour)."""
    with pytest.raises(TypeError, match="rtol"):
        mpsolve.cg(_spd(), np.ones(12), rtol="1e-5")


def test_zero_b_with_infinite_rtol_is_not_nan():
    """``rtol * ||b||`` is ``inf * 0`` for ``b = 0``: the tolerance is ``atol``, and the
    answer is the exact zero (SciPy returns zeros with ``info == 0``)."""
    A = _spd()
    for method in METHODS:
        x, info = getattr(mpsolve, method)(A, np.zeros(12), rtol=np.inf)
        xs, infos = getattr(spla, method)(A, np.zeros(12), rtol=np.inf)
        assert info == infos == 0
        np.testing.assert_array_equal(x, xs)
