"""Bad input: every case gets a clear exception naming the argument (or a documented info)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import mpsolve
from mpsolve import PrecisionRangeError, bicgstab, cg, gmres
from mpsolve.precond import Jacobi

from conftest import problem

A0 = problem("poisson2d")
N = A0.shape[0]
B0 = np.ones(N)


def _with(A=None, b=None, **kw):
    return dict(A=A0 if A is None else A, b=B0 if b is None else b, **kw)


def _nan_matrix():
    A = A0.copy()
    A.data[5] = np.nan
    return A


def _inf_matrix():
    A = A0.copy()
    A.data[7] = np.inf
    return A


def _zero_diag():
    A = A0.tolil()
    A[3, 3] = 0.0
    A[17, 17] = 0.0
    return A.tocsr()


# (id, kwargs for the solver, exception type, words the message must contain)
CASES = [
    ("non-square A", _with(A=sp.random(5, 7, density=0.5, format="csr")), ValueError, ["A", "square"]),
    ("1-D A", _with(A=np.ones(4)), ValueError, ["A", "2-D"]),
    ("b too short", _with(b=np.ones(N - 1)), ValueError, ["b", f"({N},)"]),
    ("b 2-D wide", _with(b=np.ones((N, 2))), ValueError, ["b", "shape"]),
    ("x0 wrong length", _with(x0=np.ones(N + 3)), ValueError, ["x0", f"({N},)"]),
    ("x0 bad string", _with(x0="zeros"), ValueError, ["x0", "Mb"]),
    ("NaN in A", _with(A=_nan_matrix()), ValueError, ["A", "NaN"]),
    ("Inf in A", _with(A=_inf_matrix()), ValueError, ["A", "Inf"]),
    ("NaN in b", _with(b=np.r_[np.nan, np.ones(N - 1)]), ValueError, ["b", "NaN"]),
    ("Inf in x0", _with(x0=np.r_[np.inf, np.ones(N - 1)]), ValueError, ["x0", "Inf"]),
    # complex64/complex128 are solved (tests/test_complex.py); wider complex is refused
    ("complex256 A", _with(A=A0.toarray().astype(np.clongdouble)), TypeError,
     ["A", "complex64 or complex128"]),
    ("complex256 b", _with(b=B0.astype(np.clongdouble)), TypeError,
     ["b", "complex64 or complex128"]),
    ("NaN in complex b", _with(b=np.r_[complex(1, np.nan), np.ones(N - 1)]), ValueError,
     ["b", "NaN"]),
    ("string A", _with(A="matrix"), (TypeError, ValueError), ["A"]),
    ("object b", _with(b=B0.astype(object)), TypeError, ["b", "dtype object", "np.asarray"]),
    ("object A", _with(A=A0.toarray().astype(object)), TypeError,
     ["A", "dtype object", "np.asarray"]),
    ("b a row", _with(b=B0.reshape(1, -1)), ValueError, ["b", "a row", "b.ravel()"]),
    # SciPy refuses an x0 of shape (1, n) too (mpsolve took it as a column)
    ("x0 a row", _with(x0=np.zeros((1, N))), ValueError, ["x0", f"({N}, 1)"]),
    # one sparse column: named as sparse (the message said "Python objects")
    ("sparse column b", _with(b=sp.csr_matrix(B0[:, None])), TypeError,
     ["b", "sparse", "b.toarray()"]),
    ("sparse column x0", _with(x0=sp.csc_array(B0[:, None])), TypeError,
     ["x0", "sparse", "x0.toarray()"]),
    ("negative rtol", _with(rtol=-1e-5), ValueError, ["rtol", "non-negative"]),
    ("negative atol", _with(atol=-1.0), ValueError, ["atol", "non-negative"]),
    ("NaN rtol", _with(rtol=float("nan")), ValueError, ["rtol"]),
    ("string rtol", _with(rtol="1e-5"), TypeError, ["rtol"]),
    ("maxiter zero", _with(maxiter=0), ValueError, ["maxiter", "positive"]),
    ("maxiter negative", _with(maxiter=-5), ValueError, ["maxiter", "positive"]),
    ("maxiter float", _with(maxiter=2.5), TypeError, ["maxiter"]),
    ("M wrong shape", _with(M=sp.eye(N + 1, format="csr")), ValueError, ["M", f"{N}x{N}"]),
    ("M non-square", _with(M=np.ones((N, 2))), ValueError, ["M", "square"]),
    ("M by name", _with(M="jacobi"), TypeError, ["M='jacobi'", "precond='jacobi'"]),
    ("Jacobi zero diagonal", _with(A=_zero_diag(), M=Jacobi()), ValueError, ["Jacobi", "rows 3, 17"]),
    ("unknown precision", _with(precision="quad"), ValueError, ["precision", "double"]),
    ("precision wrong type", _with(precision=64), TypeError, ["precision"]),
]


@pytest.mark.parametrize("solver", [cg, gmres, bicgstab], ids=["cg", "gmres", "bicgstab"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_rejected_clearly(case, solver):
    _, kw, exc, words = case
    kw = dict(kw)
    A, b = kw.pop("A"), kw.pop("b")
    with pytest.raises(exc) as err:
        solver(A, b, **kw)
    msg = str(err.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_integer_matrix_converted_like_scipy():
    A = sp.csr_matrix(np.array([[4, 1, 0], [1, 3, 1], [0, 1, 2]], dtype=np.int32))
    b = np.array([1, 2, 3])
    x, info = cg(A, b, rtol=1e-12)
    assert info == 0 and x.dtype == np.float64
    assert np.allclose(A.toarray() @ x, b)


@pytest.mark.parametrize("where", ["A", "b", "x0", "M", "Solver", "ILU0.setup", "block b"])
def test_half_precision_data_is_solved_in_fp64_like_scipy(where):
    """float16 data -- which SciPy's sparse formats cannot even hold -- is solved, in FP64
    as SciPy computes it (exact widening), not refused from inside SciPy."""
    from mpsolve.precond import ILU0

    A = A0.toarray()
    b = A @ B0
    h = np.float16
    if where == "A":
        x, info = cg(A.astype(h), b, rtol=1e-10)
    elif where == "b":
        x, info = cg(A0.astype(np.float32), b.astype(h), rtol=1e-10)  # SciPy's 'd' too
    elif where == "x0":
        x, info = gmres(A0, b, x0=np.zeros(N, h), rtol=1e-10)
    elif where == "M":
        x, info = cg(A0, b, M=np.diag(1.0 / np.diag(A)).astype(h), rtol=1e-10)
    elif where == "Solver":
        r = mpsolve.Solver(A.astype(h), method="cg", precond="jacobi", rtol=1e-10).solve(b)
        x, info = r.x, r.info
    elif where == "ILU0.setup":
        x, info = cg(A0, b, M=ILU0().setup(A.astype(h)), rtol=1e-10)
    else:
        r = mpsolve.solve(A.astype(h), np.stack([b, 2 * b], 1).astype(h), method="cg",
                          precond="jacobi", rtol=1e-10)
        assert r.x.dtype == np.float64 and r.info == 0
        np.testing.assert_allclose(r.x, np.stack([B0, 2 * B0], 1), rtol=1e-8)
        return
    assert info == 0 and x.dtype == np.float64
    np.testing.assert_allclose(x, B0, rtol=1e-8)


def test_zero_by_zero_system():
    for solver in (cg, gmres, bicgstab):
        x, info = solver(np.zeros((0, 0)), np.zeros(0))
        assert info == 0 and x.size == 0


def test_fp32_overflow_detected_before_the_solve():
    A = (A0 * 1e39).tocsr()  # fits FP64, not FP32
    b = A @ B0
    with pytest.raises(PrecisionRangeError, match="exceed the float32 range"):
        mpsolve.solve(A, b, method="cg", precision="single", escalate=False, precond=None)
    # with escalation the solve moves on to FP64 storage and says why
    res = mpsolve.solve(A, b, method="cg", precision="single", rtol=1e-8, precond=None)
    assert res.converged
    assert res.escalations and "range" in res.escalations[0].reason


def test_fp32_underflow_detected():
    """A row whose entries all underflow in FP32 cannot be stored there: a clear error."""
    D = np.ones(N)
    D[0] = 1e-50
    A = (sp.diags(D) @ A0).tocsr()  # row 0 ~ 4e-50: it would become a zero row
    with pytest.raises(PrecisionRangeError, match="underflow"):
        mpsolve.solve(A, A @ B0, method="gmres", precision="single", escalate=False, precond=None)


def test_fp32_negligible_underflow_is_flushed():
    """A nonzero that underflows but is below eps_fp32 times its row's largest entry is
    flushed to zero (documented): FP32 rounding of the row perturbs it more already."""
    A = A0.copy().tolil()
    A[0, 7] = A[7, 0] = 1e-50
    A = A.tocsr()
    r = mpsolve.solve(A, A @ B0, method="cg", precision="single", rtol=1e-5, escalate=False, precond=None)
    assert r.converged


def test_a_factor_entry_that_underflows_next_to_the_unit_diagonal_is_flushed():
    """L and D^-1 U hold an implicit unit diagonal: SuperLU's ILUT of convdiff3d:30 has L
    rows whose stored entries are all about 1e-207 -- negligible next to that 1, so FP32
    storage flushes them (it refused them before, and auto then stored ILUT in FP64)."""
    from mpsolve.matrices import convection_diffusion3d
    from mpsolve.precond import ILUT

    A = sp.csr_matrix(convection_diffusion3d(30, peclet=10))
    M = ILUT().setup(A)
    assert M.storage_dtype == np.float32
    M64 = ILUT(dtype="float64").setup(A)
    r = np.random.default_rng(0).standard_normal(A.shape[0])
    y, y64 = M.matvec(r), M64.matvec(r)
    # the FP32 factors' rounding only (0.22 eps_fp32 measured): nothing dropped that mattered
    assert np.linalg.norm(y - y64) <= 8 * np.finfo(np.float32).eps * np.linalg.norm(y64)


def test_block_storage_flushes_a_value_negligible_in_its_row():
    """The block operators (BSR blocks of A, BILU(0)'s inverse pivot blocks) measure a value
    that underflows in FP32 against its scalar row, as the CSR ones do: a coupling of 1e-50
    inside 2 x 2 blocks of order 1 made every block preconditioner refuse FP32 storage
    ("not negligible in their rows") and a mixed solve escalate to eft; a block row whose
    entries are all that small still cannot be stored."""
    from mpsolve.precond import BlockILU0, BlockISAI, BlockJacobi

    K = np.array([[2.0, 1e-50], [1e-50, 2.0]])
    A = sp.kron(sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(50, 50)), K).tocsr()
    b = A @ np.ones(100)
    for M in (BlockJacobi(block_size=2), BlockILU0(block_size=2), BlockISAI(block_size=2),
              BlockISAI(block_size=2, variant="bilu")):
        M.setup(A)
        assert M.storage_dtype == np.float32
        r = mpsolve.solve(A, b, method="cg", precond=M, precision="mixed", rtol=1e-8)
        assert r.converged and not r.escalations, (type(M).__name__, r.status)
    from mpsolve.operator import BSROperator

    blocks = np.array([[[1e-50, 2e-50], [1.0, 2.0]], [[3e-50, 0.0], [0.0, 3.0]]])
    ptr, ind = np.array([0, 2, 2]), np.array([0, 1])   # scalar row 0: all of it about 1e-50
    with pytest.raises(PrecisionRangeError, match="underflow"):
        BSROperator(ptr, ind, blocks, 4, np.float32)
    blocks[0, 0, 1] = 1.0                             # now negligible next to that 1: flushed
    assert BSROperator(ptr, ind, blocks, 4, np.float32).data[0, 0, 0] == 0


def test_demote_computes_a_scale_function_only_when_a_value_underflows():
    from mpsolve._demote import demote

    calls = []

    def scale():
        calls.append(1)
        return np.array([1.0, 1.0, 1.0])

    assert demote(np.array([1.0, 2.0, 3.0]), np.float32, "v", scale=scale).dtype == np.float32
    assert not calls
    out = demote(np.array([1.0, 1e-50, 3.0]), np.float32, "v", scale=scale)
    assert calls and out[1] == 0
    with pytest.raises(PrecisionRangeError, match="underflow"):
        demote(np.array([1e-50 + 0j, 1e-50j]), np.complex64, "v",
               scale=lambda: np.array([1e-50, 1e-50]))


def test_linear_operator_with_matrix_preconditioner_needs_entries():
    from scipy.sparse.linalg import aslinearoperator

    with pytest.raises(TypeError, match="LinearOperator"):
        cg(aslinearoperator(A0), B0, M=Jacobi())


@pytest.mark.parametrize("name", ["jacobi", "block-jacobi", "ilu0", "isai", "block-isai",
                                  "block-ilu0", "ilut"])
@pytest.mark.parametrize("method", ["auto", "cg", "gmres", "bicgstab"])
def test_linear_operator_with_preconditioner_by_name_is_refused_clearly(name, method):
    """A preconditioner named on an operator without entries: a TypeError that says what
    to pass instead, from ``solve`` and ``Solver`` (not an AttributeError from the set-up);
    the operator with no preconditioner still solves."""
    from scipy.sparse.linalg import aslinearoperator

    L = aslinearoperator(A0)
    for make in (lambda: mpsolve.solve(L, B0, method=method, precond=name),
                 lambda: mpsolve.Solver(L, method=method, precond=name)):
        with pytest.raises(TypeError, match=f"precond={name!r}.* matrix entries .*LinearOperator"):
            make()
    if method in ("auto", "cg"):
        r = mpsolve.solve(L, A0 @ B0, method=method, precond=None, rtol=1e-8)
        assert r.converged and np.linalg.norm(r.x - B0) <= 1e-5 * np.linalg.norm(B0)


def test_linear_operator_with_a_preconditioner_object_not_set_up_is_refused_clearly():
    """``method="auto"``, ``A`` an operator and ``precond`` an object not set up: the same
    TypeError as for a name (it was derive_problem's internal TypeError); set up by the
    caller, the object is applied and the solve converges."""
    from scipy.sparse.linalg import aslinearoperator
    from mpsolve.precond import ILU0

    L = aslinearoperator(A0)
    with pytest.raises(TypeError, match="matrix entries .*LinearOperator"):
        mpsolve.solve(L, A0 @ B0, precond=ILU0())
    r = mpsolve.solve(L, A0 @ B0, precond=ILU0().setup(A0), rtol=1e-8)
    assert r.converged and np.linalg.norm(A0 @ r.x - A0 @ B0) <= 1e-8 * np.linalg.norm(A0 @ B0)


def test_unknown_method_and_preconditioner():
    with pytest.raises(ValueError, match="method"):
        mpsolve.solve(A0, B0, method="minres", precond=None)
    with pytest.raises(ValueError, match="preconditioner"):
        mpsolve.solve(A0, B0, method="cg", precond="amg-magic")


def test_malformed_matrix_market_names_the_line(tmp_path):
    from mpsolve.matrices import MatrixMarketError, read_mtx

    f = tmp_path / "bad.mtx"
    f.write_text("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n2 x 2.0\n")
    with pytest.raises(MatrixMarketError) as err:
        read_mtx(f)
    assert "line 4" in str(err.value)


@pytest.mark.parametrize("method", ["auto", "gmres", "cg"])
@pytest.mark.parametrize("kw, match", [
    (dict(restart=0), "restart=0"), (dict(restart=-2), "restart=-2"),
    (dict(restart=2.5), "restart=2.5"), (dict(restart=float("inf")), "restart=inf"),
    (dict(restart=True), "restart=True"), (dict(side="up"), "side='up'"),
    (dict(precond="amg-magic"), "unknown preconditioner 'amg-magic'"),
    (dict(precond="isai", sparsity_power=0), "sparsity_power=0"),
])
def test_bad_options_are_refused_before_anything_is_chosen(method, kw, match):
    """GMRES's options and a preconditioner's name and parameters are checked whatever the
    method -- under 'auto' too, where they would take effect only if GMRES (or that
    preconditioner) were picked: a ValueError naming the argument, from solve and Solver,
    not a ZeroDivisionError, an unrelated maxiter error or a 'no candidate' breakdown."""
    for make in (lambda: mpsolve.solve(A0, B0, method=method, **kw),
                 lambda: mpsolve.Solver(A0, method=method, **kw)):
        with pytest.raises(ValueError, match=match):
            make()


@pytest.mark.parametrize("method", ["cg", "bicgstab"])
@pytest.mark.parametrize("opt", [dict(side="right"), dict(side="left"), dict(restart=10)])
@pytest.mark.parametrize("precond", ["auto", "jacobi"])
def test_gmres_options_under_another_method_warn_once(method, opt, precond):
    """``side`` (like ``restart``) does nothing under CG or BiCGSTAB: a warning naming it
    (``side`` was taken silently, and ``restart`` only without ``precond='auto'``), once per
    call from solve, Solver and solve with several right-hand sides."""
    b = A0 @ B0
    name = next(iter(opt))
    for call in (lambda: mpsolve.solve(A0, b, method=method, precond=precond, **opt),
                 lambda: mpsolve.Solver(A0, method=method, precond=precond, **opt).solve(b),
                 lambda: mpsolve.solve(A0, np.c_[b, b], method=method, precond=precond, **opt)):
        with pytest.warns(UserWarning, match=f"{name} is a GMRES option") as got:
            r = call()
        assert r.converged
        assert sum("GMRES option" in str(w.message) for w in got) == 1


def test_integral_float_restart_is_taken():
    for r in (mpsolve.solve(A0, A0 @ B0, method="gmres", restart=7.0, rtol=1e-8),
              mpsolve.Solver(A0, method="gmres", restart=np.int64(7), rtol=1e-8).solve(A0 @ B0)):
        assert r.converged and np.allclose(r.x, B0, atol=1e-5)


@pytest.mark.parametrize("method, precond, kw, match", [
    # a SciPy habit: the old tol, named with its fix, whatever the preconditioner
    ("auto", "auto", dict(tol=1e-8), r"'tol': not a parameter of the solve .*rtol"),
    ("cg", None, dict(tol=1e-8), r"'tol': not a parameter of the solve .*rtol"),
    ("cg", "jacobi", dict(tol=1e-8), r"'tol': not a parameter of preconditioner 'jacobi'"),
    # a typo in a named preconditioner's parameter: what it does take is listed
    ("cg", "ilu0", dict(fill=2), r"'fill': not a parameter of preconditioner 'ilu0' "
                                  r"\(it takes .*pivot_tol"),
    ("gmres", "isai", dict(foo=1, bar=2), r"\['bar', 'foo'\]: not parameters of"),
    # a real preconditioner parameter without a named preconditioner: which ones take it
    ("auto", "auto", dict(sparsity_power=2), r"need precond=<name>, not 'auto' "
                                             r"\(taken by sparsity_power: isai, block-isai\)"),
    ("cg", None, dict(block_size=2), r"not None \(taken by block_size: block-jacobi"),
    # under method='auto' too: a preconditioner object or None takes no parameters (they
    # were dropped silently there)
    ("auto", None, dict(block_size=2), r"not None \(taken by block_size: block-jacobi"),
    ("auto", Jacobi(), dict(block_size=2), r"not <Jacobi .*\(taken by block_size"),
])
def test_stray_keywords_are_named_with_their_fix(method, precond, kw, match):
    """A keyword argument that neither the solve nor the chosen preconditioner takes is a
    TypeError that names it, where it went and what to do -- not a constructor's bare
    'unexpected keyword argument' from inside the library, for solve and Solver alike."""
    for make in (lambda: mpsolve.solve(A0, B0, method=method, precond=precond, **kw),
                 lambda: mpsolve.Solver(A0, method=method, precond=precond, **kw)):
        with pytest.raises(TypeError, match=match):
            make()


@pytest.mark.parametrize("precond,exc,words", [
    (5, TypeError, ["precond=5", "preconditioner name"]),
    (2.5, TypeError, ["precond=2.5"]),
    ("ILU0", ValueError, ["unknown preconditioner 'ILU0'", "did you mean 'ilu0'?"]),
    ("icc", ValueError, ["did you mean 'ilu0'?", "IC(0)"]),
    ("bjacobi", ValueError, ["did you mean 'ilu0'?", "blocks="]),
    ("spilu", ValueError, ["did you mean 'ilut'?"]),
    ("bilu0", ValueError, ["did you mean 'block-ilu0'?"]),
    (np.float64(2.0), TypeError, ["precond=", "preconditioner name"]),
    ("nonsense", ValueError, ["unknown preconditioner 'nonsense'", "'jacobi'"]),
])
@pytest.mark.parametrize("method", ["cg", "auto"])
def test_preconditioner_names_from_petsc_and_scipy_get_a_hint(precond, exc, words, method):
    """A number is not read as a 0-d matrix M; PETSc's and SciPy's preconditioner names
    (and another case of ours) say which of ours they are."""
    with pytest.raises(exc) as err:
        mpsolve.solve(A0, B0, method=method, precond=precond)
    for w in words:
        assert w in str(err.value), (w, str(err.value))
    if exc is TypeError:
        with pytest.raises(exc, match="precond="):
            mpsolve.Solver(A0, method=method, precond=precond)


def test_a_numpy_string_is_a_preconditioner_name():
    """np.str_ is a str (a name drawn from an array or a config table): it was refused as a
    NumPy scalar, "pass a preconditioner name"."""
    for p in ("jacobi", "block-isai", "auto"):
        r = mpsolve.solve(A0, B0, method=np.str_("cg"), precond=np.str_(p), rtol=1e-8)
        assert r.converged, p
        assert mpsolve.Solver(A0, method="cg", precond=np.str_(p)).solve(B0).converged


@pytest.mark.parametrize("b", [1, 2, 3])
def test_the_unit_diagonal_row_scale_of_csr_and_bsr_factors(b):
    """Each stored value's scale is the largest magnitude in its scalar row, counting the
    implicit 1 of the diagonal (BSR: rows of the blocks, across the block row)."""
    from mpsolve.operator import _unit_row_scale

    rng = np.random.default_rng(b)
    nb = 6
    T = sp.random(nb, nb, density=0.5, random_state=rng, format="csr")
    T = sp.tril(T, -1, format="csr")
    T.sort_indices()
    vals = rng.standard_normal((T.nnz, b, b)) * 10.0 ** rng.integers(-3, 3, (T.nnz, b, 1))
    got = _unit_row_scale(T.indptr, vals if b > 1 else vals.reshape(-1))
    dense = np.zeros((nb * b, nb * b))
    for i in range(nb):
        for k in range(T.indptr[i], T.indptr[i + 1]):
            j = T.indices[k]
            dense[i * b:(i + 1) * b, j * b:(j + 1) * b] = vals[k]
    rowmax = np.maximum(np.abs(dense).max(axis=1), 1.0)
    for i in range(nb):
        for k in range(T.indptr[i], T.indptr[i + 1]):
            want = np.repeat(rowmax[i * b:(i + 1) * b, None], b, axis=1)
            assert np.array_equal(got.reshape(-1, b, b)[k], want)


@pytest.mark.parametrize("where", ["A data", "A indices", "b", "x0", "dense A", "all"])
def test_data_in_the_other_byte_order_is_solved_as_it_is(where):
    """Big-endian arrays (from a file written on another machine, ``np.dtype('>f8')``)
    are taken as their values: the same answer as the native ones, bit for bit (the
    compiled kernels take only the machine's order: converted once, on a copy)."""
    A, b = A0.tocsr(), A0 @ np.arange(N, dtype=float)
    data = A.data.astype(">f8") if where in ("A data", "all") else A.data
    idx = (lambda a: a.astype(">i4")) if where in ("A indices", "all") else (lambda a: a)
    Ab = sp.csr_matrix((data, idx(A.indices), idx(A.indptr)), shape=A.shape)
    if where == "dense A":
        Ab = A.toarray().astype(">f8")
    bb = b.astype(">f8") if where in ("b", "all") else b
    x0 = np.zeros(N, ">f8" if where in ("x0", "all") else "f8")
    for f in (lambda A_, b_: mpsolve.solve(A_, b_, x0=x0, rtol=1e-10).x,
              lambda A_, b_: cg(A_, b_, x0=x0, rtol=1e-10, M=mpsolve.precond.ILU0())[0],
              lambda A_, b_: mpsolve.Solver(A_, precond="block-isai", rtol=1e-10).solve(b_).x,
              lambda A_, b_: mpsolve.solve(A_, np.c_[b_, b_], rtol=1e-10).x[:, 1]):
        np.testing.assert_array_equal(f(Ab, bb), f(A, b))
    if where == "all":                       # complex data too (the dtype check refused it)
        Z = sp.csr_matrix(A * (1 + 0.5j))
        Zb = sp.csr_matrix((Z.data.astype(">c16"), Z.indices, Z.indptr), shape=Z.shape)
        np.testing.assert_array_equal(mpsolve.solve(Zb, (Z @ b).astype(">c16")).x,
                                      mpsolve.solve(Z, Z @ b).x)


def test_a_matrix_given_to_a_preconditioner_constructor_is_refused():
    """``ILU0(A)`` reads like SciPy's ``spilu(A)``; the constructor takes the parameters
    (a matrix there was read as ``dtype=A.dtype`` and left M not set up)."""
    for cls in (mpsolve.precond.ILU0, mpsolve.precond.Jacobi, mpsolve.precond.ISAI,
                mpsolve.precond.BlockISAI, mpsolve.precond.ILUT):
        for A in (A0, A0.toarray(), sp.linalg.aslinearoperator(A0)):
            with pytest.raises(TypeError, match=rf"{cls.__name__}\(\.\.\.\)\.setup\(A\)"):
                cls(A)
        with pytest.raises(TypeError, match="setup"):
            cls(dtype=A0)


@pytest.mark.parametrize("where", ["A", "b", "both", "complex A", "Solver", "block b"])
def test_long_double_data_is_answered_in_fp64_like_scipy(where):
    """longdouble data is solved in FP64 and answered in float64 (complex128), as SciPy
    does -- a float128 answer would claim digits it does not have."""
    from mpsolve import Solver, solve

    A, b = A0, A0 @ B0
    ld = np.longdouble
    if where == "A":
        x, _ = cg(A.astype(ld), b, rtol=1e-10)
    elif where == "b":
        x, _ = cg(A, b.astype(ld), rtol=1e-10)
    elif where == "both":
        x, _ = bicgstab(A.astype(ld), b.astype(ld), rtol=1e-10)
    elif where == "complex A":
        x, _ = gmres(A.astype(np.complex128), b.astype(ld), rtol=1e-10)
    elif where == "Solver":
        x = Solver(A.astype(ld), rtol=1e-10).solve(b.astype(ld)).x
    else:
        x = solve(A, np.column_stack([b, b]).astype(ld), rtol=1e-10).x
    want = np.complex128 if where == "complex A" else np.float64
    assert x.dtype == want
    assert np.linalg.norm(A @ x - (b if x.ndim == 1 else np.column_stack([b, b]))) \
        <= 1e-9 * np.linalg.norm(b) * (1 if x.ndim == 1 else 2)


def test_a_list_of_columns_is_several_right_hand_sides():
    """``solve(A, B)`` takes ``B`` as a list of lists of shape (n, k) as it takes the array."""
    from mpsolve import solve

    A = A0
    B = np.column_stack([A @ B0, 2 * (A @ B0)])
    r = solve(A, B.tolist(), rtol=1e-10)
    assert r.x.shape == B.shape and np.allclose(r.x, solve(A, B, rtol=1e-10).x, rtol=0, atol=0)


def test_a_preconditioner_class_instead_of_an_instance_is_named():
    """``precond=Jacobi`` / ``M=Jacobi`` (the class): "object of type 'property' has no
    len()" (before: "M of type type is not a matrix"), with no hint to write ``Jacobi()``."""
    from mpsolve.matrices import poisson2d
    from mpsolve.precond import Jacobi

    A = poisson2d(4).tocsr()
    b = np.ones(16)
    with pytest.raises(TypeError, match=r"precond=Jacobi is a class.*precond=Jacobi\(\)"):
        mpsolve.solve(A, b, precond=Jacobi)
    with pytest.raises(TypeError, match=r"precond=Jacobi is a class"):
        mpsolve.Solver(A, method="cg", precond=Jacobi)
    with pytest.raises(TypeError, match=r"M is the class Jacobi.*pass Jacobi\(\)"):
        mpsolve.cg(A, b, M=Jacobi)
    with pytest.raises(TypeError, match=r"A is the class Jacobi"):
        mpsolve.gmres(Jacobi, b)
