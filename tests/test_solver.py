"""mpsolve.Solver: the set-up once, the same answers as mpsolve.solve, update()."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import mpsolve
from mpsolve import Solver
from mpsolve.matrices import convection_diffusion2d, poisson2d
from mpsolve.precond import ILU0, Jacobi
from test_gpu_api import fake_gpu  # noqa: F401  (the fixture)


def _rhs(n, seed):
    return np.random.default_rng(seed).standard_normal(n)


def _same(r, q, detail=True):
    """Two SolveResults of the same solve: bitwise the same answer and history."""
    assert r.iterations == q.iterations
    assert r.info == q.info
    assert r.precision == q.precision
    assert np.array_equal(r.x, q.x)
    assert r.x.dtype == q.x.dtype
    assert np.array_equal(r.residuals, q.residuals)
    assert r.true_residual == q.true_residual
    assert r.status == q.status
    assert [str(e) for e in r.escalations] == [str(e) for e in q.escalations]
    assert r.precond == q.precond
    assert r.precond_detail == q.precond_detail or not detail


CASES = [
    ("cg", "jacobi", "double"), ("cg", "ilu0", "mixed"), ("cg", "isai", "mixed-eft"),
    ("cg", None, "eft"), ("cg", "ilu0", "ir"), ("cg", "jacobi", "single"),
    ("gmres", "ilu0", "mixed"), ("gmres", "isai", "double"), ("gmres", "jacobi", "mixed-cb"),
    ("gmres", None, "mixed-eft"), ("bicgstab", "ilu0", "mixed"), ("bicgstab", "jacobi", "single"),
]


@pytest.mark.parametrize("method,precond,precision", CASES,
                         ids=[f"{m}-{p}-{q}" for m, p, q in CASES])
def test_bitwise_as_a_fresh_solve(method, precond, precision):
    """Interleaved right-hand sides (and starts) give what a fresh mpsolve.solve gives."""
    A = poisson2d(14) if method == "cg" else convection_diffusion2d(14)
    n = A.shape[0]
    kw = dict(method=method, precond=precond, precision=precision, rtol=1e-9)
    s = Solver(A, **kw)
    bs = [A @ np.ones(n), _rhs(n, 1), A @ np.ones(n)]
    x0 = _rhs(n, 2)
    got = [s.solve(b) for b in bs] + [s.solve(bs[1], x0=x0), s.solve(bs[1], x0="Mb")]
    want = [mpsolve.solve(A, b, **kw) for b in bs] + [
        mpsolve.solve(A, bs[1], x0=x0, **kw), mpsolve.solve(A, bs[1], x0="Mb", **kw)]
    for r, q in zip(got, want):
        _same(r, q)
        assert r.converged
    for r, b in zip(got[:3], bs):  # FP64 true residual within the tolerance
        assert np.linalg.norm(b - A @ r.x) <= 1e-9 * np.linalg.norm(b) * (1 + 1e-6)


def test_reference_device_bitwise():
    A = convection_diffusion2d(8)
    n = A.shape[0]
    kw = dict(method="gmres", precond="ilu0", precision="mixed", rtol=1e-8, device="reference")
    s = Solver(A, **kw)
    for seed in (0, 1):
        _same(s.solve(_rhs(n, seed)), mpsolve.solve(A, _rhs(n, seed), **kw))


def test_results_do_not_share_memory_and_inputs_untouched():
    A = poisson2d(12)
    n = A.shape[0]
    A0 = A.copy()
    b1, b2, x0 = _rhs(n, 0), _rhs(n, 1), _rhs(n, 2)
    keep = b1.copy(), b2.copy(), x0.copy()
    s = Solver(A, method="cg", precond="ilu0", precision="mixed", rtol=1e-10)
    r1 = s.solve(b1, x0=x0)
    x1 = r1.x.copy()
    s.solve(b2)
    assert np.array_equal(r1.x, x1)               # the second solve did not overwrite it
    for a, k in zip((b1, b2, x0), keep):
        assert np.array_equal(a, k)
    assert (A != A0).nnz == 0
    assert np.array_equal((s @ b2), s.solve(b2).x)


class _Counting(Jacobi):
    calls = 0

    def _setup(self, A, dtype):
        type(self).calls += 1
        super()._setup(A, dtype)


def test_setup_once_and_no_allocation_per_solve():
    A = poisson2d(12)
    n = A.shape[0]
    _Counting.calls = 0
    s = Solver(A, method="cg", precond=_Counting(), precision="mixed", rtol=1e-8)
    assert _Counting.calls == 1
    ws = s._problem.workspace
    s.solve(_rhs(n, 0))
    made, systems = ws.allocations, dict(s._problem._systems)
    for seed in range(1, 4):
        assert s.solve(_rhs(n, seed)).converged
    assert _Counting.calls == 1
    assert ws.allocations == made                 # the vectors of the first solve, reused
    assert s._problem._systems == systems         # no System made again
    b64 = s._problem.b64
    s.solve(_rhs(n, 9), x0=_rhs(n, 8))
    x0_64 = s._problem.x0_64
    s.solve(_rhs(n, 7), x0=_rhs(n, 6))
    assert s._problem.b64 is b64 and s._problem.x0_64 is x0_64   # private copies, reused


def test_other_shapes_and_dtypes_take_the_general_path():
    A = poisson2d(10)
    n = A.shape[0]
    kw = dict(method="cg", precond="ilu0", precision="mixed", rtol=1e-9)
    s = Solver(A, **kw)
    b = _rhs(n, 0)
    for bb, x0 in ((b.reshape(-1, 1), None), (b.astype(np.float32), None),
                   (list(b), None), (b, _rhs(n, 1).astype(np.float32)),
                   (b[::-1].copy()[::-1], b[::2].repeat(2))):
        _same(s.solve(bb, x0=x0), mpsolve.solve(A, bb, x0=x0, **kw))


def test_per_call_overrides_then_defaults():
    A = convection_diffusion2d(12)
    n = A.shape[0]
    b = _rhs(n, 0)
    kw = dict(method="bicgstab", precond="jacobi", precision="double")
    s = Solver(A, rtol=1e-6, **kw)
    _same(s.solve(b, rtol=1e-11), mpsolve.solve(A, b, rtol=1e-11, **kw))
    _same(s.solve(b, maxiter=3), mpsolve.solve(A, b, rtol=1e-6, maxiter=3, **kw))
    _same(s.solve(b, atol=1e-3), mpsolve.solve(A, b, rtol=1e-6, atol=1e-3, **kw))
    _same(s.solve(b), mpsolve.solve(A, b, rtol=1e-6, **kw))   # the defaults again
    assert s.solve(b, maxiter=3).info == 3


def test_zero_rhs_and_callback():
    A = poisson2d(10)
    s = Solver(A, method="cg", precond="jacobi", rtol=1e-8)
    r = s.solve(np.zeros(A.shape[0]))
    assert r.converged and not r.x.any() and r.iterations == 0
    seen = []
    r = s.solve(np.ones(A.shape[0]), callback=lambda xk: seen.append(1) or len(seen) >= 3)
    assert len(seen) == 3 and r.iterations == 3 and r.info == mpsolve.result.USER_STOP


def test_errors_name_the_argument():
    A = poisson2d(6)
    s = Solver(A, method="cg", precond="jacobi")
    with pytest.raises(ValueError, match="b has shape"):
        s.solve(np.ones(5))
    with pytest.raises(ValueError, match="b contains 1 NaN"):
        s.solve(np.r_[np.nan, np.ones(35)])
    with pytest.raises(ValueError, match="rtol"):
        s.solve(np.ones(36), rtol=-1.0)
    with pytest.raises(TypeError, match="maxiter"):
        s.solve(np.ones(36), maxiter=2.5)
    with pytest.raises(ValueError, match="x0"):
        s.solve(np.ones(36), x0=np.ones(3))
    with pytest.raises(ValueError, match="method='lu'"):
        Solver(A, method="lu")
    with pytest.raises(ValueError, match="unknown preconditioner"):
        Solver(A, method="cg", precond="amg")
    with pytest.raises(ValueError, match="A must be square|square"):
        Solver(sp.random(4, 5, density=0.5, format="csr"), method="cg", precond=None)
    assert s.solve(np.ones(36)).converged       # a refused call leaves the Solver usable


def test_float32_data_policy_follows_b():
    """precision=None: FP32 A and FP32 b run 'single'; an FP64 b runs in FP64 -- as
    mpsolve.solve decides from the data -- with the preconditioner in the storage of the
    construction's policy, FP32 here: 'mixed', named so."""
    A = poisson2d(10).astype(np.float32)
    n = A.shape[0]
    s = Solver(A, method="cg", precond="jacobi", rtol=1e-5)
    for b, prec in ((np.ones(n, np.float32), None), (np.ones(n), "mixed")):
        r = s.solve(b)
        q = mpsolve.solve(A, b, method="cg", precond="jacobi", rtol=1e-5, precision=prec)
        _same(r, q, detail=b.dtype == np.float32)
    assert s.solve(np.ones(n, np.float32)).precision == "single"
    assert s.solve(np.ones(n)).precision == "mixed"


def test_range_escalation_replayed_every_solve():
    """A matrix beyond FP32's range: the FP32 preconditioner's set-up fails, the policy
    escalates -- in every solve, with the same record as a fresh solve, set up once."""
    A = poisson2d(8) * 1e46          # ILU(0)'s inverse pivots 2.5e-47 underflow in FP32
    n = A.shape[0]
    kw = dict(method="cg", precond="ilu0", precision="mixed", rtol=1e-8)
    s = Solver(A, **kw)
    for seed in (0, 1):
        b = A @ _rhs(n, seed)
        r, q = s.solve(b), mpsolve.solve(A, b, **kw)
        _same(r, q)
        assert r.escalations and r.converged
    with pytest.raises(mpsolve.PrecisionRangeError):
        Solver(A, escalate=False, **kw)


def test_update_same_pattern_is_numeric_and_matches_fresh():
    A = convection_diffusion2d(12)
    n = A.shape[0]
    A2 = A.copy()
    A2.data = A2.data * (1.0 + 0.1 * np.random.default_rng(0).random(A2.nnz))
    keep = A2.copy()
    kw = dict(method="gmres", precond="ilu0", precision="mixed", rtol=1e-10)
    s = Solver(A, **kw)
    b = _rhs(n, 3)
    s.solve(b)
    M = s._problem.M_user
    assert s.update(A2) is s and s.last_update == "numeric"
    assert s._problem.M_user is M                 # the same preconditioner, set up again
    r = s.solve(b)
    _same(r, mpsolve.solve(A2, b, **kw))
    assert np.linalg.norm(b - A2 @ r.x) <= 1e-10 * np.linalg.norm(b) * (1 + 1e-6)
    assert (A2 != keep).nnz == 0                  # A_new untouched


@pytest.mark.parametrize("precision", ["double", "eft"])
def test_update_certifies_with_the_new_values(precision):
    """The FP64 residual's rounding bound after a numeric ``update`` is the new matrix's:
    the bound's kernel was bound to the old values and was kept (a bound a million times
    too small for ``1e6 A``, so a certification that could pass a false success)."""
    A = poisson2d(10)
    n = A.shape[0]
    A2 = A * 1e6
    s = Solver(A, method="cg", precond="jacobi", precision=precision, rtol=1e-10)
    b = _rhs(n, 5)
    s.solve(b)
    assert s.update(A2).last_update == "numeric"
    fresh = Solver(A2, method="cg", precond="jacobi", precision=precision, rtol=1e-10)
    r, q = s.solve(b), fresh.solve(b)
    _same(r, q)
    x = r.x.copy()
    for dd in (False, True):
        got = s._problem.residual_bound(x, dd=dd)
        assert got == fresh._problem.residual_bound(x, dd=dd) > 0


def test_update_other_pattern_or_shape_is_full():
    A = poisson2d(10)
    kw = dict(method="cg", precond="ilu0", precision="double", rtol=1e-10)
    s = Solver(A, **kw)
    B = (A + sp.eye(A.shape[0], k=3) * -0.01 + sp.eye(A.shape[0], k=-3) * -0.01).tocsr()
    s.update(B)
    assert s.last_update == "full"
    b = _rhs(A.shape[0], 0)
    _same(s.solve(b), mpsolve.solve(B, b, **kw))
    C = poisson2d(11)
    s.update(C)
    assert s.last_update == "full" and s.n == C.shape[0]
    b = _rhs(C.shape[0], 1)
    _same(s.solve(b), mpsolve.solve(C, b, **kw))


def test_update_beyond_fp32_escalates_like_fresh():
    A = poisson2d(8)
    kw = dict(method="cg", precond="ilu0", precision="mixed", rtol=1e-8)
    s = Solver(A, **kw)
    big = A * 1e46
    s.update(big)
    assert s.last_update == "full"                # the kept FP32 storage no longer fits
    b = big @ np.ones(A.shape[0])
    r = s.solve(b)
    _same(r, mpsolve.solve(big, b, **kw))
    assert r.escalations


@pytest.mark.parametrize("back", [1.0, 1e-40])
def test_update_after_an_escalating_one_starts_from_the_first_policy(back):
    """After an update that escalated (values beyond FP32: an FP64 ILU(0) under 'eft'), a
    same-pattern update back kept that FP64 factor under 'mixed' (its x differed from a
    fresh solve's) -- or, to values whose FP32 factor does not fit (1e-40: inverse pivots
    beyond FP32), reported 'mixed' without the escalation a fresh solve makes.  It now sets
    up as a fresh Solver does: the same precision, storage and bits."""
    A = poisson2d(20)
    kw = dict(method="cg", precond="ilu0", precision="mixed", rtol=1e-8)
    s = Solver(A, **kw)
    s.update(A * 1e50)
    assert s.last_update == "full" and s.precision.name != "mixed"
    new = A * back
    s.update(new)
    b = new @ np.ones(A.shape[0])
    fresh = Solver(new, **kw)
    assert s.precision.name == fresh.precision.name
    assert s._problem.M_user.storage_dtype == fresh._problem.M_user.storage_dtype
    _same(s.solve(b), mpsolve.solve(new, b, **kw))


def test_update_leaves_a_callers_set_up_preconditioner():
    A = poisson2d(8)
    M = ILU0(dtype="float64").setup(A)
    s = Solver(A, method="cg", precond=M, rtol=1e-10)
    calls = []
    for name in ("setup", "setup_canonical"):                 # count set-ups, not seconds
        orig = getattr(M, name)
        setattr(M, name, lambda *a, _o=orig, _n=name, **k: calls.append(_n) or _o(*a, **k))
    s.update(2 * A)
    assert s.last_update == "numeric" and calls == []
    r = s.solve(A @ np.ones(A.shape[0]))          # M (of A) preconditions 2A: still converges
    assert r.converged and np.allclose(r.x, 0.5, rtol=1e-8)


def test_auto_resolved_once():
    A = poisson2d(12)
    n = A.shape[0]
    s = Solver(A, rtol=1e-10)
    assert (s.method, s.precond) == ("cg", "ilu0")
    assert s.choices[0].outcome == "chosen" and s.analysis["symmetric"]
    for seed in (0, 1):
        b = _rhs(n, seed)
        r, q = s.solve(b), mpsolve.solve(A, b, rtol=1e-10)
        assert r.iterations == q.iterations and np.array_equal(r.x, q.x)
        assert r.choices[0].label == q.choices[0].label
    B = convection_diffusion2d(12)
    s = Solver(B, rtol=1e-10)
    assert (s.method, s.precond) == ("bicgstab", "ilu0")
    b = _rhs(B.shape[0], 0)
    r, q = s.solve(b), mpsolve.solve(B, b, rtol=1e-10)
    assert r.iterations == q.iterations and np.array_equal(r.x, q.x)


def test_auto_skips_a_candidate_that_cannot_be_set_up():
    """ILU(0) meets a zero pivot (u_22 = 4 - 2 * 2): the next candidate is kept, the
    failure recorded, and the answer is the fresh automatic solve's."""
    blk = np.array([[1.0, 2.0, 0.0], [2.0, 4.0, 1.0], [0.0, 3.0, 1.0]])
    A = sp.csr_matrix(sp.kron(sp.eye(4), blk))
    s = Solver(A, rtol=1e-10)
    assert s.choices[0].outcome.startswith("set-up failed: ZeroPivotError")
    assert (s.method, s.precond) == ("gmres", "ilut")   # (ILUT on A: a zero-free diagonal)
    b = np.arange(1.0, 13.0)
    r, q = s.solve(b), mpsolve.solve(A, b, rtol=1e-10)
    assert r.converged and q.converged
    assert r.iterations == q.iterations and np.array_equal(r.x, q.x)
    with pytest.raises(ValueError, match="pivot"):
        Solver(A, method="gmres", precond="ilu0")


def test_matches_scipy():
    A = convection_diffusion2d(16)
    b = np.arange(A.shape[0], dtype=float)
    s = Solver(A, method="gmres", precond="isai", precision="mixed", rtol=1e-12, restart=30)
    x = s.solve(b).x
    xs = spla.spsolve(A.tocsc(), b)
    cond = np.linalg.cond(A.toarray())
    assert np.linalg.norm(x - xs) <= 10 * cond * 1e-12 * np.linalg.norm(xs)


def test_linear_operator():
    A = poisson2d(8)
    L = spla.aslinearoperator(A)
    b = _rhs(A.shape[0], 0)
    s = Solver(L, method="gmres", precond=None, rtol=1e-10)
    _same(s.solve(b), mpsolve.solve(L, b, method="gmres", precond=None, rtol=1e-10))
    s.update(spla.aslinearoperator(2 * A))
    assert s.last_update == "full"
    assert np.allclose(s.solve(b).x, np.linalg.solve(2 * A.toarray(), b), rtol=1e-7, atol=1e-9)


def test_device_data_flow(fake_gpu):
    """A Solver on device data (CuPy stand-ins, the CPU's kernels registered for the GPU,
    ``tests/test_gpu_api.py``): device b in, device x out, every vector on the device, the
    CPU's iterations; a host b gets a host x back."""
    from test_gpu_api import FakeCsr, FakeCupy, _dev

    A = convection_diffusion2d(10)
    b = _rhs(A.shape[0], 0)
    kw = dict(method="gmres", precond="ilu0", precision="mixed", rtol=1e-9)
    s = Solver(FakeCsr(A), **kw)
    bd = _dev(b)
    r = s.solve(bd)
    c = mpsolve.solve(A, b, **kw)
    assert type(r.x) is FakeCupy and r.iterations == c.iterations and r.converged
    assert np.array_equal(bd.get(), b)
    ws = s._problem.workspace
    assert ws._arrays and all(type(a) is FakeCupy for a in ws._arrays.values())
    x_first = r.x.get().copy()
    h = s.solve(b)                                 # a host b: the answer on the host
    assert type(h.x) is np.ndarray and h.iterations == c.iterations
    assert np.array_equal(r.x.get(), x_first)      # not overwritten by the second solve


@pytest.mark.parametrize("scale", [2.0**600, 2.0**-600, 1e300])
def test_extreme_right_hand_sides_as_fresh(scale):
    """A b of huge or tiny norm (held scaled by a power of two by the overflow-safe
    driver of main's f9a4674, which this branch predates: skipped here) gives what a fresh
    solve gives, and the next ordinary b is unaffected."""
    from mpsolve._system import Problem

    if "b_exp" not in Problem.__dataclass_fields__:
        pytest.skip("needs the overflow-safe driver (main's f9a4674)")
    A = poisson2d(10)
    n = A.shape[0]
    kw = dict(method="cg", precond="jacobi", precision="double", rtol=1e-8)
    s = Solver(A, **kw)
    b = _rhs(n, 0) * scale
    r = s.solve(b)
    _same(r, mpsolve.solve(A, b, **kw))
    assert r.converged and np.isfinite(r.true_residual) and r.iterations > 0
    _same(s.solve(b, x0=b / 4), mpsolve.solve(A, b, x0=b / 4, **kw))
    _same(s.solve(_rhs(n, 1)), mpsolve.solve(A, _rhs(n, 1), **kw))


def test_a_complex_solver_and_a_real_one_given_complex_data():
    """A Solver set up for a complex A solves real and complex right-hand sides (and a
    scaled one) as fresh solves do; a real one refuses a complex b by name."""
    n = 50
    T = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    C = (T + 0.3j * sp.identity(n, format="csr")).tocsr()
    s = mpsolve.Solver(C, method="gmres", precond="jacobi", rtol=1e-10)
    for b in (np.ones(n), np.full(n, 1 + 2j), np.full(n, 2.0**990)):
        r = s.solve(b)
        f = mpsolve.solve(C, b, method="gmres", precond="jacobi", rtol=1e-10)
        assert r.info == f.info == 0 and r.iterations == f.iterations
        assert np.array_equal(r.x, f.x) and r.x.dtype == np.complex128
    real = mpsolve.Solver(T, method="cg", precond="jacobi", rtol=1e-10)
    with pytest.raises(TypeError, match="complex"):
        real.solve(np.full(n, 1j))



@pytest.mark.parametrize("precision", [None, "single", "mixed", "double"])
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_update_of_a_complex_solver_is_numeric_and_matches_fresh(precision, dtype):
    """New complex values on the same pattern: the numeric path (the FP64 operator stays
    complex: it was cast to a real one, which crashed or dropped the imaginary parts), the
    same answer as a fresh solve, and the policy of A's dtype (complex64: single)."""
    n = 40
    T = sp.diags([-1.0, 2.5, -1.3], [-1, 0, 1], shape=(n, n), format="csr")
    C = (T * (1 + 0.3j)).astype(dtype).tocsr()
    C2 = (T * (1.1 + 0.5j)).astype(dtype).tocsr()
    kw = dict(method="gmres", precond="ilu0", precision=precision, rtol=1e-5)
    s = Solver(C, **kw)
    policy = precision or ("single" if dtype == np.complex64 else "double")  # A's dtype's
    assert s.precision.name == policy
    assert s.update(C2).last_update == "numeric" and s.precision.name == policy
    b = np.full(n, 1 + 2j, dtype=dtype)
    _same(s.solve(b), mpsolve.solve(C2, b, **kw))
    # real values for a complex Solver (and the other way round): set up again
    assert s.update(T).last_update == "full" and s.solve(np.ones(n)).converged
    assert s.update(C).last_update == "full"


def test_update_under_auto_sets_up_again_where_the_choice_would_change():
    """``"auto"`` chose CG + IC(0) for a symmetric A; new values that make A nonsymmetric
    (same pattern) are not run under that choice: the update is full and chooses again."""
    A = poisson2d(10)
    s = Solver(A, rtol=1e-8)
    assert s.method == "cg"
    N = A.copy()
    N.data = N.data * (1 + 0.2 * np.random.default_rng(0).random(N.nnz))
    assert s.update(2.0 * A).last_update == "numeric" and s.method == "cg"
    assert s.update(N).last_update == "full" and s.method != "cg"
    b = N @ np.ones(A.shape[0])
    r = s.solve(b)
    assert r.converged and np.linalg.norm(b - N @ r.x) <= 1e-8 * np.linalg.norm(b)

@pytest.mark.parametrize("method,precond", [("cg", "jacobi"), ("gmres", "ilu0"),
                                            ("bicgstab", None)])
def test_a_start_that_meets_the_tolerance_needs_no_call_of_the_method(method, precond):
    """x0 already good enough (its FP64 true residual below the tolerance, by more than the
    rounding of the method's own first norm): the answer is x0 itself, bit for bit, with
    no iteration -- and the method is not even called; a start just short of it iterates
    as before."""
    A = convection_diffusion2d(12) if method != "cg" else poisson2d(12)
    n = A.shape[0]
    x_true = _rhs(n, 3)
    b = A @ x_true
    s = Solver(A, method=method, precond=precond, precision="double", rtol=1e-6)
    good = s.solve(b).x                                   # meets 1e-6
    body = s._body

    def refused(*args, **kw):
        raise AssertionError("the method was called")

    s._body = refused
    r = s.solve(b, good)
    assert r.iterations == 0 and r.info == 0 and r.residuals.size == 0
    assert np.array_equal(r.x, good) and r.x is not good
    rel = np.linalg.norm(b - A @ good) / np.linalg.norm(b)     # (SciPy's product: close)
    assert r.true_residual <= 1e-6 and abs(r.true_residual - rel) <= 1e-6 * rel
    s._body = body
    far = good + 1e-3 * np.abs(good).max()                 # does not meet it: iterates
    q = s.solve(b, far)
    assert q.iterations > 0 and q.info == 0
    assert q.true_residual <= 1e-6


def test_one_solver_solves_correctly_from_several_threads():
    """Concurrent ``Solver.solve`` calls share the stored workspace: they run one after
    another (before the lock, 8 calls from 4 threads returned CG breakdowns and garbage)."""
    from concurrent.futures import ThreadPoolExecutor

    from mpsolve.matrices import poisson3d

    A = poisson3d(16)
    b = A @ np.ones(A.shape[0])
    s = mpsolve.Solver(A, method="cg", precond="block-isai", rtol=1e-10)
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda k: s.solve((k + 1) * b), range(8)))
    for k, r in enumerate(results):
        assert r.info == 0
        assert np.abs(r.x - (k + 1)).max() <= 1e-6 * (k + 1)


@pytest.mark.parametrize("precond", ["auto", "jacobi", "block-isai", "ilut"])
def test_a_solver_pickles_as_its_matrix_and_arguments(precond):
    """A pickled (or deep-copied) Solver is set up again where it is loaded: the same
    choices, the same answer bit for bit; it solves and updates on its own."""
    import copy
    import pickle

    A = convection_diffusion2d(16)
    b = A @ np.ones(A.shape[0])
    s = Solver(A, precond=precond, precision="mixed", rtol=1e-9, maxiter=400)
    x = s.solve(b).x
    for twin in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
        assert repr(twin) == repr(s)
        np.testing.assert_array_equal(twin.solve(b).x, x)
        assert twin.update(2.0 * A).last_update == "numeric"
        np.testing.assert_allclose(twin.solve(b).x, 0.5 * x, rtol=1e-7)
    np.testing.assert_array_equal(s.solve(b).x, x)


def test_the_summary_of_a_solver_solve_gives_the_choice_its_set_up_time():
    """A Solver's choice is made at set-up: its line in a solve's summary gives the set-up
    time, not '0 it, true residual nan' (the iterations are the solve's, above it)."""
    A = poisson2d(12)
    for b in (A @ np.ones(A.shape[0]), A @ np.ones((A.shape[0], 2))):
        text = Solver(A, rtol=1e-8).solve(b).summary()
        line = next(ln for ln in text.splitlines() if ln.startswith("choice 1"))
        assert "-> chosen [set-up " in line and "nan" not in line


def test_auto_solver_leaves_cg_when_it_breaks_down_on_an_indefinite_matrix():
    """A symmetric matrix with a positive diagonal that is indefinite (a shifted Laplacian,
    a Helmholtz operator): the automatic choice is CG, which breaks down on it.  A Solver
    chose once and broke down on every solve (one right-hand side or several), where
    ``solve(A, b)`` falls back to GMRES.  Now the Solver's first breakdown moves its
    choice past CG for good: that solve is run again and converges, the next ones run
    GMRES from the start, and the choices say why CG was left."""
    A = (poisson2d(20) - 0.3 * sp.eye(400)).tocsr()
    rng = np.random.default_rng(7)
    s = Solver(A, rtol=1e-8)
    assert s.method == "cg"
    b = A @ rng.standard_normal(400)
    res = s.solve(b)
    assert res.converged and np.linalg.norm(b - A @ res.x) <= 1e-8 * np.linalg.norm(b)
    assert s.method != "cg" and "CG broke down" in res.status
    assert all(c.outcome.startswith("skipped: CG broke down") for c in s.choices
               if c.method == "cg")
    again = s.solve(b)
    assert again.converged and "CG broke down" not in again.status
    assert again.iterations < res.iterations            # no CG iterations this time
    B = A @ rng.standard_normal((400, 3))
    block = Solver(A, rtol=1e-8).solve(B)
    assert block.converged and np.all(np.asarray(block.column_info) == 0)
    for j in range(3):
        assert np.linalg.norm(B[:, j] - A @ block.x[:, j]) <= 1e-8 * np.linalg.norm(B[:, j])
    # a skipped candidate's line in the summary has no iteration figures
    line = next(ln for ln in res.summary().splitlines() if "skipped" in ln)
    assert " it, " not in line and "nan" not in line


def test_a_solver_on_an_operator_leaves_cg_too():
    """The same switch for an A given as a LinearOperator (auto chose CG by its symmetry
    probe): the choice was made again from A's CSR form, which an operator does not have
    ("A of type NoneType is not a matrix", for one right-hand side and for several)."""
    n = 40
    d = np.full(n, 3.0)
    d[::7] = -1.0                                       # symmetric, indefinite
    A = (sp.diags(d) + sp.diags([-np.ones(n - 1), -np.ones(n - 1)], [-1, 1])).tocsr()
    L = spla.aslinearoperator(A)
    b = np.random.default_rng(0).standard_normal(n)
    s = Solver(L, rtol=1e-10)
    assert s.method == "cg"
    res = s.solve(b)
    assert res.converged and s.method != "cg" and "CG broke down" in res.status
    assert np.linalg.norm(b - A @ res.x) <= 1e-10 * np.linalg.norm(b)
    block = mpsolve.solve(L, np.c_[b, 2 * b], rtol=1e-10)
    assert block.converged and np.all(np.asarray(block.column_info) == 0)


def test_a_solver_leaving_cg_keeps_the_callers_budget(monkeypatch):
    """``maxiter`` counts the iterations of both runs when the Solver leaves CG (above):
    the GMRES run gets what CG left (it got the whole budget again, 22 iterations for
    ``maxiter=20``), for one right-hand side and for the columns of a block CG that broke
    down (each sent on with the block's budget in GMRES's inner iterations, converted
    after the Solver had switched: 91-94 iterations, the status naming "block GMRES");
    a numeric ``update`` back to an SPD matrix chooses CG again."""
    A = poisson2d(12).tocsr()
    Ai = (A - sp.eye(144)).tocsr()
    rng = np.random.default_rng(10)
    s = Solver(A, rtol=1e-8, maxiter=20)
    s.update(Ai)
    res = s.solve(rng.standard_normal(144))
    assert res.iterations <= 20 and res.info == res.iterations > 0
    assert "CG broke down" in res.status and f"{res.iterations} iterations" in res.status
    monkeypatch.setenv("MPSOLVE_BLOCK", "1")          # (block CG on a small problem)
    block = Solver(Ai, rtol=1e-8, maxiter=20).solve(rng.standard_normal((144, 3)))
    assert np.all(np.asarray(block.column_iterations) <= 20)
    assert "block CG" in block.status
    for info, its in zip(block.column_info, block.column_iterations):
        assert info == 0 or info == its
    s.update(A)
    assert s.method == "cg" and s.last_update == "full"
    assert s.solve(A @ np.ones(144)).converged


def test_a_solver_leaving_cg_stays_on_its_device(fake_gpu):
    """The choice made again after CG's breakdown (above) is made for the device the
    Solver was set up on (device data in, device data out), not for the host copy of
    ``A`` it is made from."""
    from test_gpu_api import FakeCsr, FakeCupy, _dev

    A = (poisson2d(12) - 0.3 * sp.eye(144)).tocsr()
    s = Solver(FakeCsr(A), rtol=1e-8)
    device = s._problem.device
    res = s.solve(_dev(A @ np.ones(144)))
    assert res.converged and "CG broke down" in res.status and s.method != "cg"
    assert s._problem.device == device != "cpu" and type(res.x) is FakeCupy


def test_update_with_an_operator_without_entries_sets_up_anew():
    """``update`` with a LinearOperator (no entries to compare patterns by): everything is
    set up again, as the constructor does for an operator (it failed with SciPy's 'dtype
    object' error)."""
    A = convection_diffusion2d(12)
    b = A @ np.ones(A.shape[0])
    s = Solver(A, rtol=1e-9)
    assert s.update(spla.aslinearoperator(2.0 * A)).last_update == "full"
    res = s.solve(b)
    assert res.converged and s.precond is None
    np.testing.assert_allclose(res.x, 0.5, rtol=1e-6)


def test_a_solve_from_its_own_callback_is_refused():
    """A callback that calls the running Solver again (same thread) would overwrite the
    stored right-hand side and workspace the running solve certifies with: refused, and
    the Solver still solves right afterwards."""
    A = poisson2d(10).tocsr()
    b, b2 = _rhs(100, 1), _rhs(100, 2)
    s = Solver(A, method="cg", precond="jacobi", rtol=1e-10)
    with pytest.raises(RuntimeError, match="from its callback"):
        s.solve(b, callback=lambda xk: s.solve(b2))
    with pytest.raises(RuntimeError, match="Solver.update"):
        s.solve(b, callback=lambda xk: s.update(2 * A))
    r = s.solve(b)
    assert r.info == 0 and np.linalg.norm(b - A @ r.x) <= 1e-9 * np.linalg.norm(b)
    R = s.solve(np.column_stack([b, b2]))        # (its inner per-column calls still run)
    assert R.info == 0 and np.allclose(A @ R.x, np.column_stack([b, b2]), atol=1e-8)


def _refuses(s, A_new, err):
    with pytest.raises(err):
        s.update(A_new)


@pytest.mark.parametrize("case", ["jacobi-zero-diagonal", "ilu0-operator", "own-ilu0-instance",
                                  "auto-method-own-instance"])
def test_a_refused_update_leaves_the_solver_as_it_was(case):
    """An update that raises leaves the Solver solving the old matrix, as before it."""
    A = convection_diffusion2d(12, peclet=5.0).tocsr()
    n = A.shape[0]
    b = _rhs(n, 3)
    Z = A.tolil()
    Z[3, 3] = 0.0
    Z = Z.tocsr()
    Z.eliminate_zeros()
    if case == "jacobi-zero-diagonal":
        s, bad, err = Solver(A, method="gmres", precond="jacobi", rtol=1e-10), Z, ValueError
    elif case == "ilu0-operator":
        s, bad, err = (Solver(A, method="gmres", precond="ilu0", rtol=1e-10),
                       spla.aslinearoperator(2 * A), TypeError)
    elif case == "own-ilu0-instance":
        s, bad, err = Solver(A, method="gmres", precond=ILU0(), rtol=1e-10), Z, ValueError
    else:
        s, bad, err = Solver(A, method="auto", precond=ILU0(), rtol=1e-10), Z, Exception
    before = s.solve(b)
    last = s.last_update
    _refuses(s, bad, err)
    after = s.solve(b)
    assert s.last_update == last
    assert after.info == 0 and np.linalg.norm(b - A @ after.x) <= 1e-9 * np.linalg.norm(b)
    _same(before, after)


@pytest.mark.parametrize("fmt", ["csr", "csr_array", "csc"])
def test_a_solver_keeps_the_values_it_was_set_up_with(fmt):
    """The caller's arrays changed in place after the set-up (or after an update) do not
    reach the Solver: it solves the matrix it was given until update() gives it another
    (before: its FP64 operator read the caller's values, its preconditioner the old ones)."""
    A = poisson2d(10).tocsr()
    A2 = {"csr": A.copy(), "csr_array": sp.csr_array(A), "csc": A.tocsc()}[fmt]
    b = A @ np.ones(100)
    s = Solver(A2, method="cg", precond="ilu0", rtol=1e-10)
    r1 = s.solve(b)
    A2.data *= 3.0
    _same(r1, s.solve(b))
    s.update(A2)
    assert s.last_update == "numeric"
    r3 = s.solve(b)
    assert np.allclose(r3.x, 1.0 / 3.0, rtol=1e-8)
    A2.data[:] = 7.0
    _same(r3, s.solve(b))


@pytest.mark.parametrize("cls", [ILU0, Jacobi])
def test_a_callers_preconditioner_set_up_again_for_another_size_is_refused(cls):
    """The caller sets their M up again for another matrix after making the Solver: the
    solve is refused with the fix (the compiled loop indexed past the new, smaller
    arrays: a segmentation fault)."""
    A, A2 = poisson2d(8).tocsr(), poisson2d(3).tocsr()
    M = cls()
    M.setup(A)
    s = Solver(A, method="cg", precond=M, rtol=1e-10)
    b = _rhs(64, 4)
    assert s.solve(b).info == 0
    M.setup(A2)
    with pytest.raises(ValueError, match="set up for a 9x9 matrix now"):
        s.solve(b)
    M.setup(A)
    assert s.solve(b).info == 0


@pytest.mark.parametrize("precond", ["jacobi", "ilu0", "block-isai"])
@pytest.mark.parametrize("dt", [np.float32, np.complex64])
def test_a_wider_b_than_a_runs_mixed_and_says_so(precond, dt):
    """``Solver(A float32)`` sets its preconditioner up for A's dtype (FP32); a float64 b
    runs in FP64 with it: that is ``mixed``, reported as such and bit for bit the
    ``mixed`` solve (it said ``double`` while applying the FP32 preconditioner)."""
    A = sp.csr_matrix(poisson2d(10)).astype(dt)
    if np.dtype(dt).kind == "c":
        A = sp.csr_matrix(A * (1 + 0.5j))
    b = (np.arange(A.shape[0]) % 5 + 1.0).astype(np.result_type(dt, np.float64))
    s = mpsolve.Solver(A, method="gmres", precond=precond, rtol=1e-8)
    r = s.solve(b)
    want = mpsolve.solve(A, b, method="gmres", precond=precond, rtol=1e-8, precision="mixed")
    assert r.precision == "mixed" and r.info == 0
    assert np.array_equal(r.x, want.x) and r.iterations == want.iterations
    # b of A's own dtype: A's own policy, as before
    assert s.solve(b.astype(dt), rtol=1e-4).precision == "single"


@pytest.mark.parametrize("precond", ["ilu0", "block-isai"])
@pytest.mark.parametrize("old,new", [(np.float32, np.float64), (np.float64, np.float32),
                                     (np.complex64, np.complex128)])
def test_an_update_to_values_of_another_precision_is_a_fresh_set_up(precond, old, new):
    """``update`` with the same pattern but float64 values for float32 ones (or the other
    way round) sets up anew, as a fresh Solver of the new values: it kept the old
    preconditioner storage (an FP32 M for FP64 data, reported 'mixed')."""
    A = sp.csr_matrix(poisson2d(16))
    if np.dtype(new).kind == "c":
        A = sp.csr_matrix(A * (1 + 0.5j))
    b = np.random.default_rng(0).standard_normal(A.shape[0]).astype(
        np.result_type(new, np.float64))
    s = Solver(A.astype(old), method="cg" if A.dtype.kind == "f" else "gmres",
               precond=precond, rtol=1e-6)
    s.update(A.astype(new))
    assert s.last_update == "full"
    f = Solver(A.astype(new), method=s.method, precond=precond, rtol=1e-6)
    ru, rf = s.solve(b), f.solve(b)
    assert ru.precision == rf.precision and np.array_equal(ru.x, rf.x)
    assert s._problem.M_user.storage_dtype == f._problem.M_user.storage_dtype


def test_auto_gmres_counts_maxiter_in_iterations_as_solve_does(monkeypatch):
    """With ``method="auto"`` ``maxiter`` is auto's budget in iterations, for a Solver as
    for :func:`mpsolve.solve`: a GMRES choice is capped by its inner iterations (it ran
    ``maxiter`` restart cycles: 600 iterations for ``maxiter=20``, and 5010 by default),
    its ``info`` counts them, and ``k`` right-hand sides get as many: the whole cycles
    that fit in the block, the rest by the single path (they stopped at the whole cycles,
    90 of 95)."""
    from mpsolve.auto import DEFAULT_AUTO_MAXITER
    from mpsolve.matrices import convection_diffusion2d

    A = sp.csr_matrix(convection_diffusion2d(30, 50.0))
    A[7, 7] = 0.0
    b = np.ones(A.shape[0])
    s = mpsolve.Solver(A, precond="isai", rtol=1e-13, maxiter=20)
    assert s.method == "gmres"
    r = s.solve(b)
    ref = mpsolve.solve(A, b, precond="isai", rtol=1e-13, maxiter=20)
    assert r.iterations == ref.iterations == 20 and r.info == ref.info == 20
    assert s.solve(b, maxiter=45).iterations == 45
    r = mpsolve.Solver(A, precond="isai", rtol=1e-15).solve(b)
    assert r.iterations <= DEFAULT_AUTO_MAXITER
    B = np.column_stack([b, 2 * b + 1, np.arange(A.shape[0], dtype=float)])
    monkeypatch.setenv("MPSOLVE_BLOCK", "1")          # (block GMRES, the budget's split)
    r = s.solve(B, maxiter=95)
    assert r.rhs_mode == "block"
    assert list(r.column_iterations) == [95] * 3 and list(r.column_info) == [95] * 3
    r = s.solve(B, maxiter=25)            # under one cycle: the columns one by one, capped
    assert list(r.column_iterations) == [25] * 3
    # a named GMRES keeps SciPy's unit, restart cycles
    r = mpsolve.Solver(A, method="gmres", precond="isai", rtol=1e-13, maxiter=2).solve(b)
    assert r.info == 2 and r.iterations == 40


# ---------------------------------------------------------------- update and sharing (stop 50)

@pytest.mark.parametrize("pe_old,pe_new", [(10, 1000), (1000, 10)])
def test_auto_update_chooses_as_a_fresh_solver(pe_old, pe_new):
    """Same pattern, new values: under ``"auto"`` the update ends with a fresh Solver's
    choice.  Peclet 1000's ILU(0) has unstable factors (a fresh Solver refuses it and runs
    GMRES + ILUT: 3 iterations); the numeric path kept BiCGSTAB + ILU(0) and broke down
    (info -10 after 353).  The other way round a fresh Solver's first candidate passes
    again, where the kept ILUT was the old values' third."""
    import warnings

    A_old = convection_diffusion2d(20, peclet=pe_old, upwind=False).tocsr()
    A_new = convection_diffusion2d(20, peclet=pe_new, upwind=False).tocsr()
    b = np.ones(A_old.shape[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = Solver(A_old, rtol=1e-8).update(A_new)
        f = Solver(A_new, rtol=1e-8)
        r, q = s.solve(b), f.solve(b)
    assert (s.method, s.precond) == (f.method, f.precond)
    _same(r, q, detail=False)
    assert r.converged


def test_auto_numeric_update_reports_the_new_analysis():
    A = poisson2d(10).tocsr()
    B = (A + sp.diags(np.linspace(0, 50, 100))).tocsr()
    s = Solver(A, rtol=1e-8).update(B)
    f = Solver(B, rtol=1e-8)
    assert s.last_update == "numeric"
    drop = ("time",)
    assert {k: v for k, v in s.analysis.items() if k not in drop} == \
        {k: v for k, v in f.analysis.items() if k not in drop}
    assert s.solve(np.ones(100)).analysis is s.analysis


def test_update_starts_from_the_constructors_policy_not_the_last_b():
    """A solve with a b beyond FP32 escalated ``single``; after an update the Solver's
    policy is a fresh Solver's again (it was set up from the last solve's b)."""
    A = poisson2d(10).tocsr()
    s = Solver(A, method="cg", precond="jacobi", precision="single", rtol=1e-4)
    s.solve(np.full(100, 1e39))
    s.update(2.0 * A)
    f = Solver(2.0 * A, method="cg", precond="jacobi", precision="single", rtol=1e-4)
    assert s.last_update == "numeric" and s.precision.name == f.precision.name == "single"


def test_a_preconditioner_object_shared_by_two_solvers():
    """One ILU0 object given to two Solvers of other matrices (same size): the second set
    it up for its matrix; the first sets it up for its own again before its next solve
    (it ran CG with the other matrix's nonsymmetric factors: no convergence)."""
    A = poisson2d(10).tocsr()
    N = convection_diffusion2d(10, peclet=50).tocsr()
    b = np.ones(100)
    M = ILU0()
    s1 = Solver(A, method="cg", precond=M, rtol=1e-10)
    r1 = s1.solve(b)
    s2 = Solver(N, method="gmres", precond=M, rtol=1e-10)
    _same(r1, s1.solve(b))
    q = s2.solve(b)
    assert q.converged and np.linalg.norm(b - N @ q.x) <= 1e-9 * np.linalg.norm(b)
    _same(q, mpsolve.solve(N, b, method="gmres", precond="ilu0", rtol=1e-10))


def test_a_copys_update_leaves_the_original_alone():
    import copy

    A = convection_diffusion2d(10, peclet=5).tocsr()
    B = A.copy()
    B.data = B.data * (1 + 0.9 * np.random.default_rng(0).random(A.nnz))
    b = np.ones(100)
    s = Solver(A, method="gmres", precond=ILU0(), rtol=1e-10)
    r1 = s.solve(b)
    t = copy.copy(s)
    t.update(B)
    _same(r1, s.solve(b))


def test_a_pickled_solver_remembers_it_left_cg():
    """``"auto"``'s CG broke down (A indefinite): the Solver runs GMRES from then on, and
    so does its pickle or copy (they started with CG again, broke down again, and
    counted those iterations)."""
    import copy
    import pickle
    import warnings

    A = (poisson2d(12) - 3.0 * sp.eye(144)).tocsr()
    b = np.ones(144)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = Solver(A, rtol=1e-8)
        s.solve(b)
        r = s.solve(b)
        assert s.method != "cg"
        for t in (pickle.loads(pickle.dumps(s)), copy.copy(s), copy.deepcopy(s)):
            assert t.method == s.method
            _same(r, t.solve(b), detail=False)


def test_solver_reports_the_preconditioner_memory_solve_does():
    """ISAI stores more at its first use: the Solver's results say so, as solve()'s."""
    A = poisson2d(30).tocsr()
    b = A @ np.ones(A.shape[0])
    s = Solver(A, method="gmres", precond="isai", precision="double", rtol=1e-9)
    r = s.solve(b)
    q = mpsolve.solve(A, b, method="gmres", precond="isai", precision="double", rtol=1e-9)
    assert r.precond_nbytes == q.precond_nbytes == s._problem.M_user.nbytes
    assert r.precond_detail == q.precond_detail


def test_no_right_hand_sides_keep_the_complex_dtype():
    from mpsolve.matrices import helmholtz2d

    A = helmholtz2d(8, k=3.0).tocsr()
    B = np.zeros((A.shape[0], 0), complex)
    for x in (Solver(A, method="gmres", precond="ilu0").solve(B).x,
              mpsolve.solve(A, B, method="gmres", precond="ilu0").x):
        assert x.shape == (A.shape[0], 0) and x.dtype == np.complex128


def test_an_update_checks_a_pinned_preconditioner_names_factors():
    """``precond="ilu0"`` pinned under ``method="auto"``: new values with unstable ILU(0)
    factors are refused as a fresh Solver refuses them (the update kept them as
    'numeric' and BiCGSTAB broke down after 353 iterations)."""
    import warnings

    from mpsolve.auto import NoCandidateError

    A_old = convection_diffusion2d(20, peclet=10, upwind=False).tocsr()
    A_new = convection_diffusion2d(20, peclet=1000, upwind=False).tocsr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NoCandidateError):
            Solver(A_new, precond="ilu0", rtol=1e-8)
        s = Solver(A_old, precond="ilu0", rtol=1e-8)
        with pytest.raises(NoCandidateError):
            s.update(A_new)
    assert s.update(A_old * 2.0).last_update == "numeric"


def test_a_complex_b_on_a_real_solver_is_refused_for_any_k():
    A = poisson2d(6).tocsr()
    s = Solver(A, method="cg", precond="jacobi")
    for k in (0, 1, 3):
        with pytest.raises(TypeError, match="set up for a real system"):
            s.solve(np.zeros((A.shape[0], k), complex))
