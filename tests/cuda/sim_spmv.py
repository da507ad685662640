"""The sparse ``"gpu"`` kernels (CSR ``spmv``/``residual``/``spmv_dot``, BSR ``bsrmv``) under
numba's CUDA simulator, against the ``reference`` device and against models of their
documented summation order.

Run in its own process with ``NUMBA_ENABLE_CUDASIM=1`` (``tests/test_cuda.py`` does; by
hand: ``NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda/sim_spmv.py``).

What is asserted
----------------
* **Against the reference device** (NumPy/SciPy, rows summed in stored order): every
  dtype combination and mode, within an eps-scaled bound per row,
  ``|y - y_ref| <= 2 (len_i + log2 W + 2) u_acc (|A| |x|)_i + 2 u_y |y_ref_i|``
  (both sums are within ``len_i u_acc`` of the exact one; each rounds once to ``y``'s
  dtype), and empty rows exactly 0.  Not bitwise: the GPU sums a row in ``W`` lane
  partials (``fma``) then a shuffle tree, the reference in stored order.
* **Against a model of the documented order** (plain Python, exact ``fma``): the row sums
  and the ``spmv_dot`` reduction bit for bit -- the simulator's intrinsics are exact
  emulations, so these are the bits a GPU gives.
* **Launch-configuration independence**: the same bits for several ``(block, grid)``
  (grid-stride loops taken or not, one or several warps per block), and, for
  ``spmv_dot``, for every sub-warp width that gives the same ``y`` (rows of at most two
  entries) and for any block size of the final one-block sum.
* Widths: every ``W`` in 2..32 within the reference bound; rows of at most ``min(W)``
  entries give the same bits for every ``W``.
* BSR: ``b`` = 1..5, 8 (a warp per block row), 9 and 40 (slot and slab paths), a partial
  last block (``n`` not a multiple of ``b``), empty block rows.
"""
from __future__ import annotations

import math
import sys
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from mpsolve.backend import cuda_simulator

if not cuda_simulator():  # collected by a normal run: tests/test_cuda.py runs it
    pytest.skip("needs NUMBA_ENABLE_CUDASIM=1 (run by tests/test_cuda.py in its own process)",
                allow_module_level=True)

from mpsolve.kernels import eft  # noqa: E402
from mpsolve.kernels.cuda import bsr as gbsr, fused as gfused, spmv as gspmv  # noqa: E402
from mpsolve.kernels.reference import exact_dot  # noqa: E402
from mpsolve.kernels.registry import launch_plan, lookup  # noqa: E402

F = ("float32", "float64")
MAT = [(v, a, b) for v in F for a in F for b in F]
U = {"float32": 2.0 ** -24, "float64": 2.0 ** -53}


@pytest.fixture(autouse=True, scope="module")
def _fast_barriers():
    """The simulator's block barrier is a busy-polling manager thread: with the default
    5 ms GIL switch interval each barrier (every simulated shuffle) costs milliseconds.
    A short interval makes this file ~2x faster; restored afterwards."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(old)


# --- data ------------------------------------------------------------------------------
def csr_matrix(n=80, seed=0, mean=4, long_rows=(7, 50), long_len=45, empty=(0, 3, 11, 79)):
    """Random square CSR (sorted, int32): ``mean`` entries a row on average, a few rows of
    ``long_len`` entries, a few empty rows; the diagonal stored elsewhere."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        if i in empty:
            rows.append(np.array([], dtype=np.int64))
            continue
        k = long_len if i in long_rows else int(rng.integers(1, 2 * mean))
        cols = set(rng.choice(n, size=min(k, n), replace=False).tolist()) | {i}
        rows.append(np.array(sorted(cols), dtype=np.int64))
    indptr = np.zeros(n + 1, dtype=np.int32)
    indptr[1:] = np.cumsum([r.size for r in rows])
    indices = np.concatenate(rows).astype(np.int32)
    data = rng.standard_normal(indices.size) * np.exp(rng.uniform(-3, 3, indices.size))
    return indptr, indices, data


def short_rows_matrix(n=300, seed=1):
    """Square CSR whose rows have at most two entries (the same ``y`` for every width)."""
    rng = np.random.default_rng(seed)
    A = sp.lil_matrix((n, n))
    for i in range(n):
        if i % 17 == 5:
            continue                                  # empty rows
        A[i, i] = rng.standard_normal()
        if i % 3:
            A[i, int(rng.integers(n))] = rng.standard_normal()
    A = A.tocsr()
    A.sort_indices()
    return A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data


def vec(n, dtype, seed=2):
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


def cast(a, dtype):
    return np.ascontiguousarray(a, dtype=dtype)


# --- models of the documented order (plain Python, exact fma) ---------------------------
def model_row_sums(indptr, indices, data, x, width, acc):
    """Row sums as the CSR kernels form them: lane ``s`` of ``width`` adds entries
    ``s, s + W, ...`` by ``fma`` in stored order; then lane ``l += lane l + off`` for
    ``off = W/2 .. 1``; lane 0's value."""
    out = []
    for i in range(indptr.size - 1):
        lanes = [acc(0.0)] * width
        for k in range(int(indptr[i]), int(indptr[i + 1])):
            s = (k - int(indptr[i])) % width
            lanes[s] = acc(eft.fma(acc(data[k]), acc(x[indices[k]]), lanes[s]))
        off = width // 2
        while off:
            lanes = [acc(lanes[s] + lanes[s + off]) if s < off else lanes[s]
                     for s in range(width)]
            off //= 2
        out.append(lanes[0])
    return out


def model_tree(vals, yt):
    """The fixed tree of ``fused.block_tree`` over ``len(vals)`` (a multiple of 32):
    groups of 32 by ``shfl_down`` 16..1, then the group sums padded to 32 alike."""
    def tree32(v):
        v = list(v) + [yt(0.0)] * (32 - len(v))
        off = 16
        while off:
            v = [yt(v[s] + v[s + off]) if s < off else v[s] for s in range(32)]
            off //= 2
        return v[0]
    groups = [tree32(vals[g:g + 32]) for g in range(0, len(vals), 32)]
    return tree32(groups)


def model_spmv_dot(x, y, yt):
    n = y.size
    prods = [yt(yt(x[i]) * yt(y[i])) for i in range(n)]
    C = gfused.CHUNK
    parts = []
    for c in range(0, n, C):
        chunk = prods[c:c + C] + [yt(0.0)] * (C - len(prods[c:c + C]))
        parts.append(model_tree(chunk, yt))
    S = gfused.SLOTS
    slots = []
    for s in range(S):
        v = yt(0.0)
        for c in range(s, len(parts), S):
            v = yt(v + parts[c])
        slots.append(v)
    return model_tree(slots, yt)


# --- the bound against the reference --------------------------------------------------
def assert_close_rows(y, yref, indptr, indices, data, x, acc, ydt, width=32):
    absax = sp.csr_matrix((np.abs(data.astype(np.float64)), indices, indptr),
                          shape=(indptr.size - 1, x.size)) @ np.abs(x.astype(np.float64))
    lens = np.diff(indptr)
    bound = (2 * (lens + math.log2(width) + 2) * U[acc] * absax
             + 2 * U[ydt] * np.abs(yref.astype(np.float64)))
    err = np.abs(y.astype(np.float64) - yref.astype(np.float64))
    assert np.all(err <= bound), (err - bound).max()
    assert np.all(y[lens == 0] == 0)


# --- CSR spmv --------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["acc64", "acc32"])
@pytest.mark.parametrize("dts", MAT, ids=lambda d: "-".join(t[5:] for t in d))
def test_spmv_against_reference_and_order_model(mode, dts):
    vt, xt, yt = dts
    indptr, indices, data = csr_matrix()
    n = indptr.size - 1
    d, x = cast(data, vt), vec(n, xt)
    plan = launch_plan("gpu", "spmv", indptr)
    y = np.full(n, np.nan, dtype=yt)
    lookup("gpu", "spmv", dts, mode)(plan, indptr, indices, d, x, y)
    yref = np.empty(n, dtype=yt)
    lookup("reference", "spmv", dts, mode)(None, indptr, indices, d, x, yref)
    acc = "float64" if mode == "acc64" else "float32"
    assert_close_rows(y, yref, indptr, indices, d, x, acc, yt, plan.width)
    model = np.array(model_row_sums(indptr, indices, d, x, plan.width, getattr(np, acc)),
                     dtype=np.float64).astype(yt)
    assert np.array_equal(y, model)                   # bit for bit: the documented order


@pytest.mark.parametrize("mode,dts", [("acc64", ("float32", "float32", "float32")),
                                      ("acc32", ("float64", "float32", "float64"))])
def test_spmv_same_bits_for_every_launch_configuration(mode, dts):
    vt, xt, yt = dts
    indptr, indices, data = csr_matrix(n=120, seed=3)
    n = indptr.size - 1
    d, x = cast(data, vt), vec(n, xt, seed=4)
    kern = lookup("gpu", "spmv", dts, mode)
    outs = []
    for block, grid in [(32, 1), (32, 2), (64, 1), (96, 2), (128, 3)]:
        plan = gspmv.csr_plan(indptr, width=8, block=block, grid=grid)
        y = np.full(n, np.nan, dtype=yt)
        kern(plan, indptr, indices, d, x, y)
        outs.append(y)
    for y in outs[1:]:
        assert np.array_equal(y, outs[0])


def test_spmv_every_width():
    indptr, indices, data = csr_matrix(n=64, seed=5)
    n = indptr.size - 1
    x = vec(n, np.float32, seed=6)
    d = cast(data, np.float32)
    kern = lookup("gpu", "spmv", ("float32", "float32", "float32"), "acc32")
    yref = np.empty(n, dtype=np.float32)
    lookup("reference", "spmv", ("float32",) * 3, "acc32")(None, indptr, indices, d, x, yref)
    ys = {}
    for w in gspmv.WIDTHS:
        plan = gspmv.csr_plan(indptr, width=w)
        y = np.full(n, np.nan, dtype=np.float32)
        kern(plan, indptr, indices, d, x, y)
        assert_close_rows(y, yref, indptr, indices, d, x, "float32", "float32", w)
        ys[w] = y
    short = np.diff(indptr) <= 2                      # the wider trees only add exact zeros
    for w in gspmv.WIDTHS[1:]:
        assert np.array_equal(ys[w][short], ys[2][short])


def test_subwarp_width_rule_and_plan():
    assert [gspmv.subwarp_width(10, m) for m in (0, 10, 20, 21, 45, 50, 80, 81, 320, 10**4)] \
        == [2, 2, 2, 4, 8, 8, 8, 16, 32, 32]
    indptr = np.arange(0, 5 * 41, 5, dtype=np.int32)  # 40 rows of 5: W = 8
    plan = launch_plan("gpu", "spmv", indptr)
    assert isinstance(plan, gspmv.CsrPlan)
    assert (plan.n, plan.nnz, plan.width) == (40, 200, 8)
    cfg = gspmv.config()
    assert plan.block == cfg.threads and 1 <= plan.grid <= cfg.max_blocks
    assert gspmv.csr_plan(indptr, width=32, block=64, grid=1) == gspmv.CsrPlan(40, 200, 32,
                                                                              64, 1)
    with pytest.raises(ValueError):
        gspmv.csr_plan(indptr, width=3)
    with pytest.raises(ValueError):
        gspmv.csr_plan(indptr, block=48)
    # 1024 threads of the complex BSR kernel (66 registers each on sm_80) exceed an SM's
    # register file: the launch would fail on a GPU
    with pytest.raises(ValueError, match="512"):
        gspmv.csr_plan(indptr, block=1024)
    assert gspmv.csr_plan(indptr, block=512, grid=1).block == 512
    empty = launch_plan("gpu", "spmv", np.zeros(1, dtype=np.int32))
    y = np.zeros(0)
    lookup("gpu", "spmv", ("float64",) * 3, "acc64")(empty, np.zeros(1, np.int32),
                                                     np.zeros(0, np.int32), np.zeros(0),
                                                     np.zeros(0), y)
    # an empty complex x^H A x is a complex zero (as every complex result), not 0.0
    zc = np.zeros(0, np.complex128)
    d = lookup("gpu", "spmv_dot", ("complex128",) * 3, "acc64")(
        empty, np.zeros(1, np.int32), np.zeros(0, np.int32), zc, zc, zc.copy())
    assert type(d) is complex and d == 0


def test_spmv_int64_index_arrays():
    indptr, indices, data = csr_matrix(n=40, seed=8)
    x = vec(40, np.float64)
    plan = launch_plan("gpu", "spmv", indptr)
    y32, y64 = np.empty(40), np.empty(40)
    k = lookup("gpu", "spmv", ("float32", "float64", "float64"), "acc64")
    d = cast(data, np.float32)
    k(plan, indptr, indices, d, x, y32)
    k(plan, indptr.astype(np.int64), indices.astype(np.int64), d, x, y64)
    assert np.array_equal(y32, y64)


# --- residual ----------------------------------------------------------------------------
@pytest.mark.parametrize("vt", F)
@pytest.mark.parametrize("dt", F)
def test_residual_against_reference(vt, dt):
    indptr, indices, data = csr_matrix(n=70, seed=9)
    n = indptr.size - 1
    d, x, b = cast(data, vt), vec(n, dt, seed=10), vec(n, dt, seed=11)
    key = (vt, dt, dt, dt)
    outs = []
    for block, grid in [(None, None), (64, 3)]:
        plan = gspmv.csr_plan(indptr, block=block, grid=grid)
        r = np.full(n, np.nan, dtype=dt)
        lookup("gpu", "residual", key, "acc64")(plan, indptr, indices, d, x, b, r)
        outs.append(r)
    assert np.array_equal(outs[0], outs[1])
    rref = np.empty(n, dtype=dt)
    lookup("reference", "residual", key, "acc64")(None, indptr, indices, d, x, b, rref)
    absax = sp.csr_matrix((np.abs(d.astype(np.float64)), indices, indptr),
                          shape=(n, n)) @ np.abs(x.astype(np.float64))
    lens = np.diff(indptr)
    bound = (2 * (lens + 8) * U["float64"] * (absax + np.abs(b))
             + 2 * U[dt] * np.abs(rref.astype(np.float64)))
    err = np.abs(outs[0].astype(np.float64) - rref.astype(np.float64))
    assert np.all(err <= bound)
    # b - (row sum in the documented order), rounded once
    w = gspmv.csr_plan(indptr).width
    sums = model_row_sums(indptr, indices, d, x, w, np.float64)
    model = np.array([float(b[i]) - sums[i] for i in range(n)]).astype(dt)
    assert np.array_equal(outs[0], model)


# --- spmv_dot ------------------------------------------------------------------------------
@pytest.mark.parametrize("vt", F)
@pytest.mark.parametrize("dt", F)
def test_spmv_dot_against_reference_and_spmv(vt, dt):
    indptr, indices, data = csr_matrix(n=300, seed=12, long_rows=(4, 260),
                                       empty=(0, 1, 150, 299))   # two chunks of 256 rows
    n = indptr.size - 1
    d, x = cast(data, vt), vec(n, dt, seed=13)
    plan = launch_plan("gpu", "spmv", indptr)
    y = np.full(n, np.nan, dtype=dt)
    s = lookup("gpu", "spmv_dot", (vt, dt, dt), "acc64")(plan, indptr, indices, d, x, y)
    assert isinstance(s, float)
    y2 = np.full(n, np.nan, dtype=dt)
    lookup("gpu", "spmv", (vt, dt, dt), "acc64")(plan, indptr, indices, d, x, y2)
    assert np.array_equal(y, y2)                      # the same y as the plain product
    yref = np.empty(n, dtype=dt)
    sref = lookup("reference", "spmv_dot", (vt, dt, dt), "acc64")(None, indptr, indices, d,
                                                                  x, yref)
    assert_close_rows(y, yref, indptr, indices, d, x, "float64", dt, plan.width)
    # the dot of this y: within n u |x| . |y| of the exact value
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    exact = float(exact_dot(x64, y64))
    mag = float(np.abs(x64) @ np.abs(y64))
    # the products round once, the fixed tree is 16 levels deep, a slot adds n / CHUNK**2
    assert abs(s - exact) <= (20 + n / gfused.CHUNK) * U[dt] * mag
    # the reference (np.dot of its own y): both within their bounds of x . y
    assert abs(s - sref) <= 2 * n * U[dt] * mag + float(np.abs(x64) @ np.abs(
        y64 - yref.astype(np.float64)))
    assert s == float(model_spmv_dot(x, y, getattr(np, dt)))   # the documented order


@pytest.mark.parametrize("dt", F)
def test_spmv_dot_same_bits_for_every_launch_configuration_and_width(dt):
    indptr, indices, data = short_rows_matrix()
    n = indptr.size - 1
    d, x = cast(data, dt), vec(n, dt, seed=14)
    kern = lookup("gpu", "spmv_dot", (dt, dt, dt), "acc64")
    results = []
    # (widths up to 8: a simulated shuffle is a block barrier of Python threads, and a
    # chunk costs ~256 W log2(W) of them; W = 16, 32 are covered by the spmv tests)
    for w, block, grid in [(2, 32, 1), (2, 64, 2), (4, 32, 2), (8, 32, 1), (4, 128, 1),
                           (8, 96, 3)]:
        plan = gspmv.csr_plan(indptr, width=w, block=block, grid=grid)
        y = np.full(n, np.nan, dtype=dt)
        results.append((kern(plan, indptr, indices, d, x, y), y))
    for s, y in results[1:]:
        assert np.array_equal(y, results[0][1])
        assert s == results[0][0]


@pytest.mark.parametrize("dt", F)
def test_dot_final_sum_any_block_size(dt):
    """The final one-block sum over many chunk partials (more than SLOTS: several per
    slot) gives the modelled bits for any block size."""
    yt = getattr(np, dt)
    part = (np.random.default_rng(15).standard_normal(700)
            * np.exp(np.random.default_rng(16).uniform(-8, 8, 700))).astype(dt)
    final = (gfused._K32 if dt == "float32" else gfused._K64)[1]
    want = None
    for block in (32, 64, 256):
        out = np.full(1, np.nan, dtype=dt)
        final[1, block](part, out)
        want = out[0] if want is None else want
        assert out[0] == want
    S = gfused.SLOTS
    slots = []
    for s in range(S):
        v = yt(0.0)
        for c in range(s, part.size, S):
            v = yt(v + part[c])
        slots.append(v)
    assert want == model_tree(slots, yt)


def test_spmv_dot_empty():
    plan = launch_plan("gpu", "spmv", np.zeros(1, dtype=np.int32))
    k = lookup("gpu", "spmv_dot", ("float64",) * 3, "acc64")
    assert k(plan, np.zeros(1, np.int32), np.zeros(0, np.int32), np.zeros(0), np.zeros(0),
             np.zeros(0)) == 0.0


# --- BSR -----------------------------------------------------------------------------------
def bsr_matrix(nbr, b, seed, density=0.3, empty=(1,)):
    rng = np.random.default_rng(seed)
    pattern = rng.random((nbr, nbr)) < density
    np.fill_diagonal(pattern, True)
    for e in empty:
        pattern[e % nbr] = False
    indptr = np.zeros(nbr + 1, dtype=np.int32)
    indptr[1:] = np.cumsum(pattern.sum(1))
    indices = np.nonzero(pattern)[1].astype(np.int32)
    data = rng.standard_normal((indices.size, b, b))
    return indptr, indices, data


def _bsr_ref_bound(indptr, indices, data, x, n, acc, ydt, yref):
    b = data.shape[1]
    nbr = indptr.size - 1
    B = sp.bsr_matrix((np.abs(data.astype(np.float64)), indices, indptr),
                      shape=(nbr * b, nbr * b))
    xx = np.zeros(nbr * b)
    xx[:x.size] = np.abs(x.astype(np.float64))
    absax = (B @ xx)[:n]
    lens = np.repeat(np.diff(indptr) * b, b)[:n]
    return 2 * (lens + 8) * U[acc] * absax + 2 * U[ydt] * np.abs(yref.astype(np.float64))


@pytest.mark.parametrize("mode", ["acc64", "acc32"])
@pytest.mark.parametrize("dts", MAT, ids=lambda d: "-".join(t[5:] for t in d))
def test_bsrmv_against_reference_partial_last_block(mode, dts):
    vt, xt, yt = dts
    b, nbr = 3, 14
    indptr, indices, data = bsr_matrix(nbr, b, seed=20)
    n = nbr * b - 2                                   # a partial last block
    d, x = cast(data, vt), vec(n, xt, seed=21)
    plan = launch_plan("gpu", "bsrmv", indptr)
    assert isinstance(plan, gbsr.BsrPlan)
    y = np.full(n, np.nan, dtype=yt)
    lookup("gpu", "bsrmv", dts, mode)(plan, indptr, indices, d, x, y)
    yref = np.empty(n, dtype=yt)
    lookup("reference", "bsrmv", dts, mode)(None, indptr, indices, d, x, yref)
    acc = "float64" if mode == "acc64" else "float32"
    err = np.abs(y.astype(np.float64) - yref.astype(np.float64))
    assert np.all(err <= _bsr_ref_bound(indptr, indices, d, x, n, acc, yt, yref))
    assert np.all(y[b:2 * b] == 0)                    # the empty block row


@pytest.mark.parametrize("b", [1, 2, 4, 5, 8, 9, 40])
def test_bsrmv_block_sizes_and_launch_configurations(b):
    nbr = 12 if b <= 9 else 3
    indptr, indices, data = bsr_matrix(nbr, b, seed=30 + b, density=0.5 if b <= 9 else 0.7)
    n = nbr * b - (1 if b > 1 else 0)
    d, x = cast(data, np.float32), vec(n, np.float64, seed=31)
    kern = lookup("gpu", "bsrmv", ("float32", "float64", "float32"), "acc64")
    outs = []
    for block, grid in [(None, None), (32, 1), (64, 2), (96, 3)]:
        plan = gbsr.bsr_plan(indptr, block=block, grid=grid)
        y = np.full(n, np.nan, dtype=np.float32)
        kern(plan, indptr, indices, d, x, y)
        outs.append(y)
    for y in outs[1:]:
        assert np.array_equal(y, outs[0])
    yref = np.empty(n, dtype=np.float32)
    lookup("reference", "bsrmv", ("float32", "float64", "float32"), "acc64")(
        None, indptr, indices, d, x, yref)
    err = np.abs(outs[0].astype(np.float64) - yref)
    assert np.all(err <= _bsr_ref_bound(indptr, indices, d, x, n, "float64", "float32", yref))


# --- registration ----------------------------------------------------------------------------
def test_registered_like_the_cpu():
    """The same dtype keys and modes as the CPU, real and complex (the complex kernels:
    tests/cuda/sim_complex.py)."""
    from mpsolve.kernels import available
    for op in ("spmv", "spmv_dot", "residual", "bsrmv"):
        gpu = {(k[2], k[3]) for k in available("gpu") if k[1] == op}
        cpu = {(k[2], k[3]) for k in available("cpu") if k[1] == op}
        assert gpu == cpu, op
        assert any(d.startswith("complex") for k in gpu for d in k[0]), op


# --- double-double residual and update (issue 15; kernels/cuda/dd.py) --------------------
def test_residual_dd_and_dd_axpy_give_the_cpu_bits():
    """``r + rl = b - A (xh + xl)`` (Dot2 per row) and ``(yh, yl) += a x``: one thread a
    row/entry with the shared EFTs, so the same operations in the same order as the CPU
    kernels -- the same bits (empty rows and long rows included)."""
    indptr, indices, data = csr_matrix(n=60, seed=9)
    n = indptr.size - 1
    xh, xl, b = vec(n, np.float64, 10), vec(n, np.float64, 11) * 1e-17, vec(n, np.float64, 12)
    out = {}
    for dev in ("gpu", "cpu"):
        plan = launch_plan(dev, "spmv", indptr)
        r, rl = np.full(n, np.nan), np.full(n, np.nan)
        lookup(dev, "residual_dd", ("float64",))(plan, indptr, indices, data, xh, xl, b, r, rl)
        yh, yl = xh.copy(), xl.copy()
        lookup(dev, "dd_axpy", ("float64",))(0.3, b, yh, yl)
        out[dev] = (r, rl, yh, yl)
    for g, c in zip(out["gpu"], out["cpu"]):
        assert np.array_equal(g, c)
    # and against the exact residual: the pair within the Dot2 bound of the row
    r, rl = out["gpu"][:2]
    for i in range(n):
        lo, hi = indptr[i], indptr[i + 1]
        exact = Fraction(float(b[i])) - sum(
            Fraction(float(a)) * (Fraction(float(xh[j])) + Fraction(float(xl[j])))
            for a, j in zip(data[lo:hi], indices[lo:hi]))
        mag = sum(abs(float(a)) * (abs(float(xh[j])) + abs(float(xl[j])))
                  for a, j in zip(data[lo:hi], indices[lo:hi])) + abs(float(b[i]))
        got = Fraction(float(r[i])) + Fraction(float(rl[i]))
        gamma2 = (4 * (hi - lo) + 4) ** 2 * 2.0**-106            # a generous gamma_2m^2
        assert abs(got - exact) <= gamma2 * mag + 2.0**-53 * abs(exact)



def test_residual_dd_past_the_fp64_range_is_the_fp64_residual():
    """A row whose products overflow: the EFTs' error terms are inf - inf (NaN); the
    kernels give the plain FP64 residual, +-inf (NaN for NaN data), as the reference."""
    ip, ix = np.array([0, 1, 2, 3, 4], np.int32), np.arange(4, dtype=np.int32)
    data = np.array([1e300, 1e300, 1e300, 1e300])
    xh, xl = np.array([1e10, -1e10, np.nan, 1e-10]), np.zeros(4)
    b = np.array([0.0, 0.0, 0.0, 1.0])
    out = {}
    for dev in ("gpu", "cpu", "reference"):
        r, rl = np.full(4, 7.0), np.full(4, 7.0)
        lookup(dev, "residual_dd", ("float64",))(launch_plan("cpu", "spmv", ip), ip, ix, data,
                                                 xh, xl, b, r, rl)
        out[dev] = (r, rl)
    for dev in ("gpu", "cpu", "reference"):
        r, rl = out[dev]
        assert r[0] == -np.inf and r[1] == np.inf and np.isnan(r[2]), (dev, r)
        assert np.array_equal(rl[:3], np.zeros(3)) and r[3] == -1e290, (dev, rl)
