"""Complex systems (issue 13, item 1, the solver core).

The case tables' complex twins -- Hermitian positive definite, complex-symmetric
(``A == A^T``, not Hermitian) and general non-Hermitian, each in complex128 and a
complex64 twin -- crossed with every method and the policies ``double``, ``mixed``,
``mixed-eft`` and ``single``, with and without point Jacobi, against SciPy's
``cg``/``gmres``/``bicgstab`` on the same problem: the same convergence (SciPy converges
-> mpsolve converges), comparable iteration counts, and a true residual
``||b - A x|| <= rtol ||b||`` recomputed here in complex128 (no false success, ever).
Then SciPy's contract points for complex data, the dtype rules, the compensated complex
dot against exact arithmetic, the ``reference`` device against the CPU, and
``method="auto"``.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import mpsolve
from mpsolve import bicgstab, cg, gmres
from mpsolve.kernels import lookup, reference as ref
from mpsolve.kernels.cpu import eft
from mpsolve.precision import complex_dtype, in_field, real_dtype
from mpsolve.precond import Jacobi

from conftest import problem
from test_eft import gen_dot

U = {np.complex128: 2.0**-53, np.complex64: 2.0**-24}


# ----------------------------------------------------------------- the complex case table
def _unitary_diag(n, seed):
    rng = np.random.default_rng(seed)
    return sp.diags(np.exp(2j * np.pi * rng.random(n)))


def _hpd(name, seed):
    """``D^H A D`` for an SPD ``A`` of the real table and a random unitary diagonal ``D``:
    Hermitian positive definite with complex off-diagonal entries (A's eigenvalues)."""
    A = problem(name)
    D = _unitary_diag(A.shape[0], seed)
    return (D.conj() @ A @ D).tocsr()


def _complex_symmetric(name, shift):
    """``A + shift I`` with a complex shift: ``A == A^T``, not Hermitian."""
    A = problem(name)
    return (A + shift * sp.eye(A.shape[0])).tocsr()


def _non_hermitian(seed):
    """The real table's nonsymmetric matrix plus ``i R`` (``R`` random, nonsymmetric)."""
    A = problem("nonsymmetric")
    rng = np.random.default_rng(seed)
    R = sp.random(A.shape[0], A.shape[0], density=0.05, random_state=rng, format="csr")
    return (A + 1j * R).tocsr()


def _canonical(A):
    """Sorted indices, no duplicates: SciPy's ``abs(A.imag)`` of a CSR matrix with unsorted
    indices sorts a view of the imaginary parts in place (and scrambles ``A``)."""
    A = sp.csr_matrix(A)
    A.sum_duplicates()
    return A


BASE = [
    # (name, A, Hermitian positive definite?)
    ("hpd-poisson2d", _canonical(_hpd("poisson2d", 1)), True),
    ("hpd-random-spd", _canonical(_hpd("random-spd", 2)), True),
    ("csym-poisson1d", _canonical(_complex_symmetric("poisson1d", 0.05 + 0.3j)), False),
    ("csym-indefinite", _canonical(_complex_symmetric("indefinite", 0.2j)), False),
    ("nonhermitian", _canonical(_non_hermitian(3)), False),
]
TABLE = [(n, A, h) for n, A, h in BASE] + [(n + "-c64", A.astype(np.complex64), h)
                                             for n, A, h in BASE]
PRECISIONS = ("double", "mixed", "mixed-eft", "single")
METHODS = {"cg": (cg, spla.cg), "gmres": (gmres, spla.gmres),
           "bicgstab": (bicgstab, spla.bicgstab)}


def _rhs(n, dtype, seed=7):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)


def _true_rel(A, b, x):
    """``||b - A x|| / ||b||`` in complex128 (the certificate)."""
    A = A.astype(np.complex128)
    b = b.astype(np.complex128)
    return float(np.linalg.norm(b - A @ x.astype(np.complex128)) / np.linalg.norm(b))


def _rtol(precision, dtype):
    return 1e-4 if precision == "single" or dtype == np.complex64 else 1e-8


def _scipy(method, A, b, rtol, M):
    """SciPy's answer and iteration count (GMRES: inner iterations)."""
    calls = [0]

    def count(_):
        calls[0] += 1

    kw = dict(rtol=rtol, M=M, callback=count)
    if method == "gmres":
        kw.update(restart=20, maxiter=50, callback_type="pr_norm")
    else:
        kw.update(maxiter=1000)
    x, info = METHODS[method][1](A, b, **kw)
    return x, info, calls[0]


def _cases():
    for name, A, hpd in TABLE:
        for method in METHODS:
            if method == "cg" and not hpd:
                continue
            for prec in PRECISIONS:
                for pc in ("none", "jacobi"):
                    yield pytest.param(name, method, prec, pc, id=f"{name}-{method}-{prec}-{pc}")


_BY_NAME = {n: (A, h) for n, A, h in TABLE}


@pytest.mark.parametrize("name,method,prec,pc", list(_cases()))
def test_complex_table_against_scipy(name, method, prec, pc, table):
    A, _ = _BY_NAME[name]
    n = A.shape[0]
    b = _rhs(n, A.dtype)
    A0, b0 = A.copy(), b.copy()
    rtol = _rtol(prec, A.dtype)
    kw = dict(method=method, precision=prec, rtol=rtol,
              precond=Jacobi() if pc == "jacobi" else None)
    if method == "gmres":
        kw.update(restart=20, maxiter=50)
    else:
        kw.update(maxiter=1000)
    res = mpsolve.solve(A, b, **kw)
    # the answer: complex, in the data's dtype, never a false success
    assert res.x.dtype == A.dtype
    true = _true_rel(A, b, res.x)
    if res.info == 0:
        assert true <= rtol * (1 + 1e-6), f"false success: {true:.2e} > {rtol:.0e}"
    # the reported residual is the FP64 iterate's; the answer is that iterate rounded to the
    # data's dtype, which moves the residual by at most ~eps ||A|| ||x|| / ||b||
    slack = 4 * np.finfo(A.dtype).eps * spla.norm(A) * np.linalg.norm(res.x) / np.linalg.norm(b)
    assert abs(true - res.true_residual) <= 1e-6 * max(true, rtol) + slack
    # the user's data untouched
    assert (abs(A - A0)).nnz == 0 and np.array_equal(b, b0)
    # SciPy on the same problem, in the data's dtype, same preconditioner
    Msp = sp.diags(1.0 / A.diagonal()).tocsr() if pc == "jacobi" else None
    xs, infos, its = _scipy(method, A, b, rtol, Msp)
    sp_true = _true_rel(A, b, xs)
    table("complex systems: mpsolve vs SciPy",
          ("problem", "method", "precision", "M", "mpsolve it", "info", "true res",
           "SciPy it", "info", "true res"))\
        .append((name, method, prec, pc, res.iterations, res.info, f"{true:.1e}", its, infos,
                 f"{sp_true:.1e}"))
    if infos == 0 and sp_true <= rtol:
        assert res.info == 0, f"SciPy converged ({its} it), mpsolve did not: {res.status}"
        if prec in ("double", "mixed", "mixed-eft") and A.dtype == np.complex128:
            # same arithmetic as SciPy up to rounding (mixed: FP32 M only): comparable counts
            assert res.iterations <= 1.25 * its + 3, (res.iterations, its)


def test_table_is_what_it_says():
    """The twins have the structure their names claim."""
    for name, A, hpd in TABLE:
        assert A.dtype.kind == "c" and np.abs(A.data.imag).max() > 0
        assert A.has_canonical_format
        H = A - A.conj().T
        S = A - A.T
        if hpd:
            assert abs(H).max() <= 1e-6 * abs(A).max()
            assert np.linalg.eigvalsh(A.toarray().astype(np.complex128)).min() > 0
        elif name.startswith("csym"):
            assert S.nnz == 0 or abs(S).max() == 0          # complex symmetric ...
            assert abs(H).max() > 0.1                       # ... and not Hermitian
        else:
            assert abs(H).max() > 0.1 and abs(S).max() > 0.1


# ----------------------------------------------------------------- SciPy's contract, complex
HPD = _BY_NAME["hpd-poisson2d"][0]
CSYM = _BY_NAME["csym-poisson1d"][0]


@pytest.mark.parametrize("solver", [cg, gmres, bicgstab], ids=["cg", "gmres", "bicgstab"])
def test_x0_not_modified_and_used(solver):
    """SciPy: ``x0`` is the start and is never written to."""
    A = HPD
    b = _rhs(A.shape[0], np.complex128)
    x0 = _rhs(A.shape[0], np.complex128, seed=11)
    keep = x0.copy()
    x, info = solver(A, b, x0=x0, rtol=1e-8)
    assert info == 0 and np.array_equal(x0, keep)
    assert _true_rel(A, b, x) <= 1e-8
    # started at the solution: no iteration needed
    xs = spla.spsolve(A.tocsc(), b)
    res = mpsolve.solve(A, b, xs, method=solver.__name__, precond=None, rtol=1e-8)
    assert res.info == 0 and res.iterations == 0


@pytest.mark.parametrize("solver", [cg, gmres, bicgstab], ids=["cg", "gmres", "bicgstab"])
def test_maxiter_one_calls_callback_once_with_complex_x(solver):
    """SciPy: ``maxiter=1`` calls the callback exactly once (GMRES: one restart cycle,
    ``callback_type='x'``), with the complex iterate."""
    seen = []
    kw = {"callback_type": "x"} if solver is gmres else {}
    b = _rhs(HPD.shape[0], np.complex128)
    x, info = solver(HPD, b, maxiter=1, rtol=1e-12, callback=lambda xk: seen.append(xk.copy()),
                     **kw)
    assert len(seen) == 1 and info > 0
    assert seen[0].dtype == np.complex128 and abs(seen[0].imag).max() > 0


@pytest.mark.parametrize("solver", [cg, gmres, bicgstab], ids=["cg", "gmres", "bicgstab"])
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_zero_rhs_gives_zero(solver, dtype):
    """SciPy: ``b = 0`` returns ``x = 0`` at once, ``info = 0``, in b's dtype."""
    A = HPD.astype(dtype)
    x, info = solver(A, np.zeros(A.shape[0], dtype))
    assert info == 0 and x.dtype == dtype and not np.any(x)


@pytest.mark.parametrize("kind", ["matrix", "linearoperator", "callable-op"])
def test_M_forms_match_scipy(kind):
    """``M`` as a sparse matrix, a ``LinearOperator`` or an object with ``matvec``:
    SciPy's forms, applied to complex vectors (the Jacobi inverse here)."""
    A = _BY_NAME["nonhermitian"][0]
    b = _rhs(A.shape[0], np.complex128)
    dinv = 1.0 / A.diagonal()
    Mmat = sp.diags(dinv).tocsr()
    if kind == "matrix":
        M = Mmat
    elif kind == "linearoperator":
        M = spla.LinearOperator(A.shape, matvec=lambda v: dinv * v.ravel(), dtype=np.complex128)
    else:
        class Op:
            shape = A.shape
            dtype = np.complex128

            def matvec(self, v):
                return dinv * v.ravel()
        M = Op()
    x, info = gmres(A, b, M=M, rtol=1e-10, restart=20)
    xs, infos = spla.gmres(A, b, M=Mmat, rtol=1e-10, restart=20)
    assert info == 0 == infos
    assert _true_rel(A, b, x) <= 1e-10
    assert np.allclose(x, xs, rtol=1e-7, atol=1e-9 * np.abs(xs).max())


def test_linear_operator_A():
    """A complex ``LinearOperator`` ``A`` (no entries): the solve runs on its matvec."""
    A = CSYM
    op = spla.aslinearoperator(A)
    b = _rhs(A.shape[0], np.complex128)
    for solver in (gmres, bicgstab):
        x, info = solver(op, b, rtol=1e-9)
        assert info == 0 and x.dtype == np.complex128 and _true_rel(A, b, x) <= 1e-9


# ----------------------------------------------------------------- dtype rules
def test_real_A_with_complex_b_and_reverse():
    """Either of A, b complex makes the solve complex (SciPy's rule); the answer is the
    complex solution, not its real part."""
    A = problem("nonsymmetric")
    Ac = _BY_NAME["nonhermitian"][0]
    bc = _rhs(A.shape[0], np.complex128)
    br = np.real(bc).copy()
    for A_, b_ in ((A, bc), (Ac, br)):
        for solver in (gmres, bicgstab):
            x, info = solver(A_, b_, rtol=1e-10)
            assert info == 0 and x.dtype == np.complex128
            assert _true_rel(A_, b_, x) <= 1e-10
    x, info = gmres(A, bc, rtol=1e-10)
    assert np.allclose(x, spla.spsolve(A.tocsc(), bc), rtol=1e-7)
    # complex x0 with real A, b: complex too
    x, info = bicgstab(A, br, x0=1j * np.ones(A.shape[0]), rtol=1e-10)
    assert info == 0 and x.dtype == np.complex128


def test_complex64_data_defaults_to_single():
    """complex64 data and no precision: ``single`` (complex64 throughout), as FP32 data."""
    A = _BY_NAME["hpd-poisson2d-c64"][0]
    b = _rhs(A.shape[0], np.complex64)
    res = mpsolve.solve(A, b, method="cg", precond=None, rtol=1e-4)
    assert res.precision == "single" and res.x.dtype == np.complex64 and res.info == 0
    assert _true_rel(A, b, res.x) <= 1e-4


def test_precision_field_map():
    """The one float <-> complex map of :mod:`mpsolve.precision`."""
    assert complex_dtype("float64") == np.complex128 and complex_dtype("float32") == np.complex64
    assert real_dtype(np.complex64) == np.float32 and real_dtype("complex128") == np.float64
    assert in_field("float32", True) == np.complex64 and in_field("float32", False) == np.float32
    with pytest.raises(TypeError, match="float16"):
        complex_dtype("float16")


@pytest.mark.parametrize("solver", [cg, gmres, bicgstab], ids=["cg", "gmres", "bicgstab"])
def test_clongdouble_refused_by_name(solver):
    A = HPD
    b = _rhs(A.shape[0], np.complex128).astype(np.clongdouble)
    with pytest.raises(TypeError, match=r"b has dtype complex.*complex64 or complex128"):
        solver(A, b)
    with pytest.raises(TypeError, match=r"A has dtype complex.*complex64 or complex128"):
        solver(A.toarray().astype(np.clongdouble), b.astype(np.complex128))


def test_cb_gmres_refuses_complex_clearly():
    """GMRES's compressed basis is real-only: refused by name for a complex system (also by
    a Solver, at set-up); BiCGSTAB and CG keep no basis and ignore it, on complex systems
    as on real ones (they were refused too)."""
    b = _rhs(CSYM.shape[0], np.complex128)
    with pytest.raises(ValueError, match=r"CB-GMRES.*real systems only.*'mixed'"):
        mpsolve.solve(CSYM, b, method="gmres", precond=None, precision="mixed-cb")
    for precond in ("jacobi", "auto"):
        with pytest.raises(ValueError, match=r"CB-GMRES.*real systems only"):
            mpsolve.Solver(CSYM, method="gmres", precond=precond, precision="mixed-cb")
    with pytest.raises(ValueError, match=r"CB-GMRES.*real systems only"):
        mpsolve.solve(CSYM, b, method="gmres", precision="mixed-cb")      # precond auto
    # method auto: BiCGSTAB runs; a GMRES candidate is skipped and says why (here the only
    # candidate, for a zero diagonal: nothing else to run, a clear status)
    assert mpsolve.solve(CSYM, b, precision="mixed-cb", rtol=1e-8).converged
    Z = CSYM.tolil()
    Z[3, 3] = 0.0
    r = mpsolve.solve(Z.tocsr(), b, precision="mixed-cb", rtol=1e-8)
    assert r.info == -16 and "real systems only" in r.status
    assert all(c.outcome.startswith("skipped: precision='mixed-cb'") for c in r.choices)
    for method, A in (("bicgstab", CSYM), ("cg", HPD)):
        bb = _rhs(A.shape[0], np.complex128)
        r = mpsolve.solve(A, bb, method=method, precond="jacobi", precision="mixed-cb",
                          rtol=1e-8)
        q = mpsolve.solve(A, bb, method=method, precond="jacobi", precision="mixed",
                          rtol=1e-8)
        assert r.converged and r.iterations == q.iterations and np.array_equal(r.x, q.x)


def test_device_without_complex_kernels_refuses_at_setup(monkeypatch):
    """A device with no complex kernels stops at set-up with a clear error, never inside a
    kernel (shown with the query that decides it answering "no"; the devices that exist
    all have them: the GPU's in tests/cuda/sim_complex.py)."""
    import mpsolve._system as system

    monkeypatch.setattr(system, "provides", lambda *a, **k: False)
    b = _rhs(CSYM.shape[0], np.complex128)
    with pytest.raises(TypeError, match="no complex kernels"):
        gmres(CSYM, b)


def test_complex_nonfinite_refused():
    b = _rhs(CSYM.shape[0], np.complex128)
    b[3] = complex(1.0, np.nan)
    with pytest.raises(ValueError, match="b contains 1 NaN or Inf"):
        gmres(CSYM, b)
    A = CSYM.copy()
    A.data[2] = complex(np.inf, 0.0)
    with pytest.raises(ValueError, match="A contains 1 NaN or Inf"):
        gmres(A, np.ones(A.shape[0]))


def test_single_complex64_range_is_checked():
    """A complex128 value beyond complex64's range under ``single``: the driver escalates
    (recorded), never a NaN."""
    A = (CSYM * 1e39).tocsr()
    b = _rhs(A.shape[0], np.complex128) * 1e39
    res = mpsolve.solve(A, b, method="gmres", precond=None, precision="single", rtol=1e-6)
    assert res.info == 0 and res.escalations and "range" in res.escalations[0].reason
    assert _true_rel(A, b, res.x) <= 1e-6


# ----------------------------------------------------------------- compensated complex dot
def _cgen(n, cond, rng, dtype, imag=False):
    """Complex ``x, y`` whose ``x^H y`` has an ill-conditioned real part: a real GenDot pair
    ``u, v`` of length 2n split as ``x = u[:n] + i u[n:]``, ``y = v[:n] + i v[n:]``
    (``Re x^H y = u . v``); ``imag=True`` multiplies ``y`` by ``i`` (the imaginary part is
    then the ill-conditioned one).  FP32 parts for complex64."""
    rdt = real_dtype(dtype)
    u, v, _, _ = gen_dot(2 * n, cond, rng, dtype=rdt)
    x = (u[:n] + 1j * u[n:].astype(np.float64)).astype(dtype)
    y = (v[:n] + 1j * v[n:].astype(np.float64)).astype(dtype)
    if imag:
        y = (1j * y).astype(dtype)                  # exact: swaps the parts, one sign
    return x, y


def _check_cdot_bound(res, x, y, u):
    """``|Re res - Re e| <= u |Re e| + g^2 S`` and the same for Im, with ``e = x^H y`` exact
    (Fractions), ``S = sum |x_i| |y_i|`` and ``g = gamma_{2n}`` (each part is a Dot2 of 2n
    real products); hence ``|res - e| <= u |e| + sqrt(2) g^2 S`` for the complex result."""
    n = x.size
    er, ei = ref.exact_cdot(x, y)
    S = float(np.sum(np.abs(x.astype(np.complex128)) * np.abs(y.astype(np.complex128))))
    S *= 1 + 8 * 2.0**-53                           # |.| and the sum rounded: bound it above
    g2 = ref.gamma(2 * n, u) ** 2
    ok = []
    for part, exact in ((res.real, er), (res.imag, ei)):
        err = abs(Fraction(float(part)) - exact)
        ok.append(err <= Fraction(u) * abs(exact) + Fraction(g2 * S))
    return all(ok), float(er), float(ei), S, g2


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize("imag", [False, True], ids=["real-part", "imag-part"])
@pytest.mark.parametrize("cond", [1e8, 1e16, 1e24, 1e30])
def test_cdot2_meets_the_oro_bound_exactly(dtype, imag, cond):
    """The compensated complex dot (CPU kernel and the reference device) against exact
    arithmetic on ill-conditioned complex vectors, with the Ogita-Rump-Oishi bound adapted
    to complex (constants stated in :func:`_check_cdot_bound`)."""
    u = U[dtype]
    if dtype == np.complex64 and cond > 1e16:
        pytest.skip("FP32 GenDot reaches about 1e16 at most")
    rng = np.random.default_rng(int(math.log10(cond)) + 7 * imag)
    x, y = _cgen(50, cond, rng, dtype, imag)
    for f in (lookup("cpu", "dot", (dtype,), "compensated"), eft.cdot2,
              lookup("reference", "dot", (dtype,), "compensated")):
        res = complex(f(x, y))
        ok, er, ei, S, g2 = _check_cdot_bound(res, x, y, u)
        assert ok, (f, res, er, ei)


def test_plain_complex_dot_violates_the_bound():
    """The bound is a real check: the native dot misses it on the hardest vectors."""
    rng = np.random.default_rng(5)
    x, y = _cgen(50, 1e30, rng, np.complex128)
    res = lookup("cpu", "dot", (np.complex128,), "native")(x, y)
    assert not _check_cdot_bound(complex(res), x, y, U[np.complex128])[0]


def test_cdot2_long_vectors_parallel_path():
    """The chunked parallel path (long vectors) against exact parts."""
    rng = np.random.default_rng(9)
    n = 40_000                                      # above PARALLEL_MIN (32768)
    x = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    y = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    res = eft.cdot2(x, y)
    ok = _check_cdot_bound(res, x, y, U[np.complex128])[0]
    assert ok
    nr = lookup("cpu", "nrm2", (np.complex128,), "compensated")(x)
    exact = float(ref.exact_dot(x.view(np.float64), x.view(np.float64)))   # ||x||^2
    assert abs(nr - math.sqrt(exact)) <= 2 * 2.0**-53 * nr


# ----------------------------------------------------------------- reference device, auto
@pytest.mark.parametrize("method", ["cg", "gmres", "bicgstab"])
@pytest.mark.parametrize("prec", ["double", "mixed-eft", "single"])
def test_reference_device_matches_cpu(method, prec):
    A = HPD
    b = _rhs(A.shape[0], np.complex128)
    rtol = _rtol(prec, np.complex128)
    r_cpu = mpsolve.solve(A, b, method=method, precond=Jacobi(), precision=prec, rtol=rtol)
    r_ref = mpsolve.solve(A, b, method=method, precond=Jacobi(), precision=prec, rtol=rtol,
                          device="reference")
    assert r_cpu.info == 0 == r_ref.info
    assert abs(r_cpu.iterations - r_ref.iterations) <= max(2, 0.1 * r_cpu.iterations)
    assert _true_rel(A, b, r_ref.x) <= rtol


def test_auto_picks_cg_for_hermitian_and_never_for_complex_symmetric():
    b = _rhs(HPD.shape[0], np.complex128)
    res = mpsolve.solve(HPD, b, rtol=1e-8)
    assert res.info == 0 and res.method == "cg" and res.analysis["is_complex"]
    for name in ("csym-poisson1d", "csym-indefinite", "nonhermitian"):
        A = _BY_NAME[name][0]
        b = _rhs(A.shape[0], np.complex128)
        res = mpsolve.solve(A, b, rtol=1e-8)
        assert all(c.method != "cg" for c in res.choices), name
        assert res.info == 0 and _true_rel(A, b, res.x) <= 1e-8


def test_auto_solves_a_complex_zero_diagonal_matrix_by_mc64():
    """A complex matrix with a zero diagonal gets the zero-diagonal candidates as a real
    one does (MC64 matches on |a_ij| and keeps A complex; ILUT, its finer twin, the direct
    fallback): before, only unpreconditioned GMRES was tried, and it stagnated."""
    n = 500
    rng = np.random.default_rng(0)
    perm = rng.permutation(n)
    R = sp.random(n, n, density=3 / n, random_state=1) \
        + 1j * sp.random(n, n, density=3 / n, random_state=2)
    A = sp.csr_matrix(R + 3 * sp.csr_matrix((np.ones(n), (np.arange(n), perm)), shape=(n, n)))
    A.setdiag(0)
    A.eliminate_zeros()
    b = _rhs(n, np.complex128)
    res = mpsolve.solve(A, b, rtol=1e-8)
    assert res.info == 0 and _true_rel(A, b, res.x) <= 1e-8 and res.precond == "ilut+mc64"
    labels = [c.label for c in res.choices]
    assert sum(label.startswith("gmres + ilut+mc64") for label in labels) == 3, labels


def test_complex_M_with_real_A_and_b_solves_in_complex():
    """A complex ``M`` (matrix, or a preconditioner set up for a complex matrix) makes the
    solve complex: its products with real vectors are complex."""
    A = problem("nonsymmetric")
    b = np.ones(A.shape[0])
    Mc = sp.diags((1 + 0.1j) / A.diagonal()).tocsr()
    for M in (Mc, Jacobi().setup(_BY_NAME["nonhermitian"][0])):
        x, info = gmres(A, b, M=M, rtol=1e-10)
        assert info == 0 and x.dtype == np.complex128 and _true_rel(A, b, x) <= 1e-10


# ----------------------------------------------------------------- properties (hypothesis)
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_SETTINGS = settings(max_examples=25, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])


@st.composite
def _complex_systems(draw, hermitian):
    """Random complex systems: Hermitian positive definite (``B B^H + shift I``) or
    diagonally dominant non-Hermitian, values over twelve decades."""
    n = draw(st.integers(1, 50))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    density = draw(st.floats(0.02, 0.4))
    B = sp.random(n, n, density=density, random_state=rng, format="csr") \
        + 1j * sp.random(n, n, density=density, random_state=rng, format="csr")
    if hermitian:
        A = B @ B.conj().T + draw(st.floats(1e-3, 10.0)) * sp.eye(n)
    else:
        rowsum = np.asarray(abs(B).sum(axis=1)).ravel()
        A = B + sp.diags(draw(st.floats(0.5, 4.0)) * (rowsum + 1.0)
                         * np.exp(2j * np.pi * rng.random(n)))
    A = _canonical(A * 10.0 ** draw(st.integers(-6, 6)))
    b = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    return A, b


def _truthful(A, b, r, rtol):
    """``info == 0`` exactly when the complex128 true residual meets the tolerance, outside
    the band in which two evaluations of ``b - A x`` differ by rounding."""
    bn = np.linalg.norm(b)
    true = np.linalg.norm(b - A @ r.x) / bn
    band = 8 * A.shape[0] * np.finfo(float).eps * np.linalg.norm(abs(A) @ abs(r.x) + abs(b)) / bn
    assert np.isfinite(r.x).all()
    if abs(true - rtol) > band:
        assert (r.info == 0) == (true <= rtol), (r.status, true)


@_SETTINGS
@given(_complex_systems(hermitian=True), st.sampled_from(["double", "mixed-eft", "ir", "single"]))
def test_cg_on_random_hpd_converges_truthfully(system, precision):
    A, b = system
    b0 = b.copy()
    r = mpsolve.solve(A, b, method="cg", precond="jacobi", precision=precision, rtol=1e-8,
                      maxiter=20 * A.shape[0] + 50)
    assert np.array_equal(b, b0)
    _truthful(A, b, r, 1e-8)
    assert r.converged


@_SETTINGS
@given(_complex_systems(hermitian=False), st.sampled_from(["gmres", "bicgstab"]),
       st.sampled_from(["double", "mixed", "eft"]))
def test_non_hermitian_dominant_converges_truthfully(system, method, precision):
    A, b = system
    r = mpsolve.solve(A, b, method=method, precond="jacobi", precision=precision, rtol=1e-9,
                      maxiter=500)
    _truthful(A, b, r, 1e-9)
    assert r.converged


def test_a_complex64_answer_missing_the_tolerance_asks_for_complex128():
    """x rounded to complex64 misses rtol=1e-8: the status advised "pass b as float64",
    which drops the imaginary part; it names complex128."""
    m = 30
    T = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
    L = sp.kron(T, sp.eye(m)) + sp.kron(sp.eye(m), T)
    A = sp.csr_matrix((L * (m + 1) ** 2 - 400 * (1 + 0.05j) * sp.eye(m * m)).astype(np.complex64))
    b = (np.random.default_rng(1).standard_normal(m * m) + 0j).astype(np.complex64)
    r = mpsolve.solve(A, b, rtol=1e-8)
    assert r.x.dtype == np.complex64 and not r.converged
    assert "pass b as complex128" in r.status and "float64" not in r.status.split("pass b")[1]
