"""ILU(0) on the CPU (Numba): the FP64 set-up kernels and the triangular sweeps.

Set-up (FP64, on the host; :mod:`mpsolve.precond.ilu` calls them through the registry):

* ``ilu0_factor`` -- Saad's IKJ ILU(0) in place on sorted CSR (*Iterative Methods
  for Sparse Linear Systems*, 2nd ed., Algorithm 10.4), with a dense work row as
  PETSc's numeric factorization;
* ``ic0_factor`` -- its symmetric (Hermitian) form, IC(0): the upper factor by
  elimination, the lower read off it through the transpose positions, half the work;
* ``diag_positions`` -- where each row's diagonal entry is stored;
* ``symmetric_mirror`` -- whether ``A`` is symmetric, and each entry's transpose;
* ``ilu_split`` -- the combined factors laid out for the sweeps (``L`` forward,
  ``D^{-1} U`` rows reversed, ``1/diag(U)``);
* ``drop_coupling`` -- the block-diagonal part of ``A`` for ``ILU0(blocks=k)``;
* the launch plan of ``ilu_sweeps``: the row blocks (contiguous runs of about equal
  nonzeros), one thread each.

Stability test: ``ilu_growth`` -- ``max_i |(M C x - x)_i| / x_i`` in one call (the
automatic choice's test of ILU(0) factors, :func:`mpsolve.auto.ilu_growth`).

Apply: ``ilu_sweeps`` -- ``y = U'^{-1} D^{-1} L^{-1} x`` per diagonal block, each row's
sum carried in FP64 and rounded once to ``y``'s dtype; serial for one block,
``prange`` over the blocks otherwise.

Complex data runs the same kernels: set-up in complex128 (keys ``("complex128",)``),
sweeps on complex64/complex128 factors and vectors with the sums in complex128; the
symmetric form becomes the Hermitian one (``U = D L^H``).
"""
import numpy as np
from numba import get_num_threads, njit, prange

from ..registry import register, register_plan
from ._config import JIT, LONG_ROW, NATIVE_REDUCTION_MATH, PARALLEL_MIN, serial_twin
from .spmv import partition_rows

from .field import conj, wide
from .intrin import madd, wide_zero  # the one intrinsics module of the CPU kernels

_F = ("float32", "float64")
_C = ("complex64", "complex128")
_MAT = [(v, x, y) for v in _F for x in _F for y in _F] + \
    [(v, x, y) for v in _C for x in _C for y in _C]
_SETUP = [("float64",), ("complex128",)]


# --------------------------------------------------------------------------- set-up
@njit(**JIT)
def _update_by_lookup(w, lik, indices, data, kstart, kend, s, e):
    # w_j -= lik u_kj for the columns j of row i (indices[s:e], sorted) found in
    # row k's indices[kstart:kend] (sorted): a binary search each, from the last hit on
    q = kstart
    for p in range(s, e):
        j = indices[p]
        q += np.searchsorted(indices[q:kend], j)
        if q >= kend:
            return
        if indices[q] == j:
            w[np.uint64(j)] -= lik * data[q]


@njit(**JIT)
def _ilu0_ikj(n, indptr, indices, data, diag):
    # Saad Alg. 10.4 (IKJ) with a dense work row, as PETSc's numeric factorization:
    # scatter row i into w, for each k < i in its pattern (ascending): l_ik = w_k / u_kk,
    # w_j -= l_ik u_kj over the strict upper part of row k -- without testing whether j
    # is in row i's pattern: updates outside it land in w and are never gathered (each
    # row overwrites w on its own pattern first) -- then gather w back.  Branch-free
    # inner loop.  Returns -1 on success, else the first row with a bad pivot.
    w = np.zeros(n, dtype=data.dtype)
    inv = np.empty(n, dtype=data.dtype)
    for i in range(n):
        s, e = indptr[i], indptr[i + 1]
        for k in range(s, e):
            w[np.uint64(indices[k])] = data[k]
        for kk in range(s, e):
            k = indices[kk]
            if k >= i:
                break
            lik = w[k] * inv[k]
            w[k] = lik
            if indptr[k + 1] - diag[k] - 1 > LONG_ROW * (e - kk):
                _update_by_lookup(w, lik, indices, data, diag[k] + 1, indptr[k + 1], kk + 1, e)
                continue
            for jj in range(np.uint64(diag[k] + 1), np.uint64(indptr[k + 1])):
                w[np.uint64(indices[jj])] -= lik * data[jj]
        for k in range(s, e):
            data[k] = w[np.uint64(indices[k])]
        if diag[i] < 0:
            return i
        piv = data[diag[i]]
        if piv == 0.0 or not np.isfinite(piv):
            return i
        inv[i] = 1.0 / piv
    return -1


@register("cpu", "ilu0_factor", _SETUP)
def ilu0_factor(indptr, indices, data, diag):
    """ILU(0) of sorted CSR in place on ``data`` (FP64 or complex128): strictly lower part ``L``
    (unit diagonal implied), upper part ``U``.  Returns -1, or the first row whose
    pivot is zero, not finite or missing (``diag[i] < 0``)."""
    return _ilu0_ikj(indptr.size - 1, indptr, indices, data, diag)


@register("cpu", "ic0_factor", _SETUP)
@njit(**JIT)
def ic0_factor(indptr, indices, data, diag, mirror, positive=False):
    """IC(0) of sorted CSR that :func:`symmetric_mirror` found symmetric (Hermitian), in place
    on ``data`` in :func:`ilu0_factor`'s layout: the upper part ``U`` by elimination, the
    strictly lower part ``L`` read off it (``l_ik = conj(u_ki) / u_kk``).  Same result as
    ``ilu0_factor`` in exact arithmetic on a symmetric pattern (the terms of ``u_ki`` are
    those of ``l_ik u_kk``), at half its work: IKJ's row ``i`` is updated by row ``k``
    only from column ``i`` on -- from position ``mirror[kk]`` of the entry ``(k, i)`` --
    since its lower part is never eliminated.  ``mirror[k]``: position of entry ``k``'s
    transpose.  Returns -1, or the first row whose pivot is zero, not finite or missing --
    with ``positive``, not positive (the shifted IC(0) search of ``ILU0`` stops a try at its
    first bad pivot instead of finishing the factorisation).
    """
    n = indptr.size - 1
    w = np.zeros(n, dtype=data.dtype)
    inv = np.empty(n, dtype=data.dtype)
    for i in range(n):
        s, d, e = indptr[i], diag[i], indptr[i + 1]
        if d < 0:
            return i
        for k in range(d, e):
            w[np.uint64(indices[k])] = data[k]
        for kk in range(s, d):
            k = indices[kk]
            m = mirror[kk]                    # (k, i) in row k, in its final upper part
            lik = conj(data[m]) * inv[k]
            data[kk] = lik
            if indptr[k + 1] - m > LONG_ROW * (e - d):
                _update_by_lookup(w, lik, indices, data, m, indptr[k + 1], d, e)
                continue
            for jj in range(np.uint64(m), np.uint64(indptr[k + 1])):
                w[np.uint64(indices[jj])] -= lik * data[jj]
        for k in range(d, e):
            data[k] = w[np.uint64(indices[k])]
        piv = data[d]
        if piv == 0.0 or not np.isfinite(piv) or (positive and not piv.real > 0.0):
            return i
        inv[i] = 1.0 / piv
    return -1


@njit(parallel=True, **JIT)
def _diag_positions(indptr, indices):
    n = indptr.size - 1
    diag = np.full(n, -1, dtype=np.int64)
    for i in prange(n):
        for k in range(indptr[i], indptr[i + 1]):
            if indices[k] == i:
                diag[i] = k
                break
    return diag


_diag_positions_serial = serial_twin(_diag_positions)


@register("cpu", "diag_positions", _SETUP)
def diag_positions(indptr, indices):
    """``diag[i]``: position of ``a_ii`` in sorted CSR (-1 where it is not stored);
    rows in parallel (the ISAI set-up runs it on the pattern of ``A^k``), serially
    below ``PARALLEL_MIN`` stored entries."""
    if indices.size < PARALLEL_MIN:
        return _diag_positions_serial(indptr, indices)
    return _diag_positions(indptr, indices)


@register("cpu", "symmetric_mirror", _SETUP)
@njit(**JIT)
def symmetric_mirror(indptr, indices, data, rtol, mirror):
    """True when the pattern is symmetric and ``|a_ij - conj(a_ji)| <= rtol max(|a_ij|,
    |a_ji|, sqrt(|a_ii a_jj|))`` for every stored entry (symmetric real data, Hermitian
    complex data); then ``mirror[k]`` is the position of entry ``k``'s transpose.

    The diagonal term makes the test blind to rounding noise in entries that cancel to
    (near) zero -- an assembled finite-element matrix is symmetric only to its rounding,
    and an entry that is zero in exact arithmetic may be stored as ``1e-15`` against
    ``-7e-15`` -- and keeps it invariant under symmetric diagonal scaling ``D A D``.

    One pass with a cursor per row (sorted rows): walking the rows in order visits the
    entries of column ``j`` by ascending row, which for a symmetric pattern are the
    entries of row ``j`` in order.  The diagonal entries are looked up only for a pair
    that fails the plain test (few: the noisy ones), so the pass costs what it did without
    the diagonal term (17 ms on poisson3d:100's 6.9M entries; 25 ms with a pass for the
    diagonal first)."""
    n = indptr.size - 1
    cursor = indptr[:-1].copy()
    for i in range(n):
        for k in range(indptr[i], indptr[i + 1]):
            j = np.uint64(indices[k])  # unsigned loads: no negative-index test (2x here)
            m = cursor[j]
            if m >= indptr[j + np.uint64(1)] or indices[np.uint64(m)] != i:
                return False
            cursor[j] = m + 1
            a, b = data[k], data[np.uint64(m)]
            d = abs(a - conj(b))
            # (the roots multiplied, not the product rooted: |a_ii a_jj| overflows for
            # entries over 1e154, and inf would pass every pair)
            if d > rtol * max(abs(a), abs(b)) and d > rtol * (
                    np.sqrt(_diag_abs(indptr, indices, data, i))
                    * np.sqrt(_diag_abs(indptr, indices, data, j))):
                return False
            mirror[k] = m
    return True


@njit(**JIT)
def _diag_abs(indptr, indices, data, i):
    """``|a_ii|`` (0 where it is not stored) of sorted CSR."""
    for k in range(indptr[i], indptr[i + 1]):
        c = indices[k]
        if c >= i:
            return abs(data[k]) if c == i else 0.0
    return 0.0


@register("cpu", "ilu_split", _SETUP)
@njit(**JIT)
def ilu_split(indptr, indices, data, diag, symmetric, mirror, lval, lind, lptr, uval, uind,
              uptr, dinv):
    """Lay the combined FP64 factors out for the solves.

    ``L``: strict lower part, rows in order, columns ascending (the nearest column
    last).  ``U' = D^{-1} U`` (unit upper, strict part): rows in *reverse* order so the
    backward sweep streams forward through memory, columns descending (the nearest
    column last again).  ``dinv = 1 / diag(U)``.  With ``symmetric`` the values of
    ``U'`` are those of ``L^H`` (for symmetric / Hermitian ``A``, ``U = D L^H`` in exact
    arithmetic), which makes the stored ``M = (L D L^H)^{-1}`` symmetric (Hermitian) bit
    for bit.
    """
    n = indptr.size - 1
    q = 0
    for i in range(n):
        lptr[i] = q
        for k in range(indptr[i], diag[i]):
            lval[q] = data[k]
            lind[q] = indices[k]
            q += 1
        dinv[i] = 1.0 / data[diag[i]]
    lptr[n] = q
    q = 0
    for p in range(n):
        i = n - 1 - p
        uptr[p] = q
        d = data[diag[i]]
        for k in range(indptr[i + 1] - 1, diag[i], -1):
            j = indices[k]
            if symmetric:
                uval[q] = conj(data[mirror[k]])  # conj(l_ji)
            else:
                uval[q] = data[k] / d
            uind[q] = j
            q += 1
    uptr[n] = q


@register("cpu", "drop_coupling", _SETUP)
@njit(**JIT)
def drop_coupling(indptr, indices, data, bounds):
    """The block-diagonal part of a CSR matrix: entries whose column lies in their
    row's block (``bounds``), in order.  Returns ``(indptr, indices, data)``."""
    n = indptr.size - 1
    block = np.empty(n, np.int64)
    for t in range(bounds.size - 1):
        block[bounds[t]:bounds[t + 1]] = t
    ip = np.empty(n + 1, np.int64)
    keep = 0
    for i in range(n):
        ip[i] = keep
        for k in range(indptr[i], indptr[i + 1]):
            if block[indices[k]] == block[i]:
                keep += 1
    ip[n] = keep
    ix = np.empty(keep, indices.dtype)
    dv = np.empty(keep, data.dtype)
    q = 0
    for i in range(n):
        for k in range(indptr[i], indptr[i + 1]):
            if block[indices[k]] == block[i]:
                ix[q] = indices[k]
                dv[q] = data[k]
                q += 1
    return ip, ix, dv


@register_plan("cpu", "ilu_sweeps")
def ilu_blocks(indptr, nblocks, min_rows):
    """Row bounds of the diagonal blocks of ``ILU0(blocks=nblocks)``: contiguous runs
    of about equal ``nnz + rows`` (:func:`.spmv.partition_rows`).  ``"threads"``: one
    block per Numba thread while each gets at least ``min_rows`` rows."""
    n = indptr.size - 1
    if nblocks == "threads":
        nblocks = max(1, min(get_num_threads(), n // min_rows))
    nblocks = max(1, min(int(nblocks), n))
    if nblocks == 1:
        return np.array([0, n], dtype=np.int64)
    return partition_rows(indptr, nblocks)


# --------------------------------------------------------------------------- sweeps
@njit(inline="always", **JIT)
def _sweeps(lo, hi, lptr, lind, lval, uptr, uind, uval, dinv, r, out):
    """``out[lo:hi] = (L D U')^{-1} r[lo:hi]`` for one diagonal block (rows ``lo..hi-1``,
    no entries outside it): forward sweep with unit ``L``, backward with unit ``U'``
    scaled by ``dinv``; each row's sum in FP64 (complex128 for complex data).

    Triangular solves are latency bound: row ``i`` waits for row ``i - 1``.  The
    previous row's value is kept in an FP64 register and its term (stored last in the
    row) subtracted last with one FMA, so the chain between rows is one multiply-add
    instead of a store, a reload and (for FP32 vectors) two conversions.  The other
    terms of a row are read with unsigned indices, as the SpMV's: without Numba's
    negative-index test LLVM vectorises the row's sum (gathers, partial sums under the
    callers' ``reassoc``), which is 3.7x on the rows of a 3-D FEM matrix (bcsstk16, 58
    entries a row: 1.75 -> 0.47 ns per entry for the forward sweep alone).
    """
    n = out.size
    zero = wide_zero(lval)
    prev = zero
    for i in range(lo, hi):
        s, e = lptr[i], lptr[i + 1]
        near = zero
        if e > s and lind[e - 1] == i - 1:
            e -= 1
            near = wide(lval[e])
        acc = wide(r[i])
        for k in range(np.uint64(s), np.uint64(e)):
            acc -= wide(lval[k]) * wide(out[np.uint64(lind[k])])
        acc = madd(-near, prev, acc)
        out[i] = acc
        prev = acc
    prev = zero
    for p in range(n - hi, n - lo):
        i = n - 1 - p
        s, e = uptr[p], uptr[p + 1]
        near = zero
        if e > s and uind[e - 1] == i + 1:
            e -= 1
            near = wide(uval[e])
        acc = wide(out[i]) * wide(dinv[i])
        for k in range(np.uint64(s), np.uint64(e)):
            acc -= wide(uval[k]) * wide(out[np.uint64(uind[k])])
        acc = madd(-near, prev, acc)
        out[i] = acc
        prev = acc


@njit(fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _ilu_solve(lptr, lind, lval, uptr, uind, uval, dinv, r, out):
    """Both sweeps over all rows (one block)."""
    _sweeps(0, out.size, lptr, lind, lval, uptr, uind, uval, dinv, r, out)


@njit(parallel=True, fastmath=NATIVE_REDUCTION_MATH, **JIT)
def _ilu_solve_blocks(bounds, lptr, lind, lval, uptr, uind, uval, dinv, r, out):
    """The sweeps of independent diagonal blocks, one task per block."""
    for t in prange(bounds.size - 1):
        _sweeps(bounds[t], bounds[t + 1], lptr, lind, lval, uptr, uind, uval, dinv, r, out)


@register("cpu", "ilu_sweeps", _MAT)
def ilu_sweeps(bounds, lptr, lind, lval, uptr, uind, uval, dinv, x, y):
    """``y = U'^{-1} D^{-1} L^{-1} x`` per diagonal block ``[bounds[t], bounds[t+1])``;
    one block: serial, several: one thread each."""
    if bounds.size > 2:
        _ilu_solve_blocks(bounds, lptr, lind, lval, uptr, uind, uval, dinv, x, y)
    else:
        _ilu_solve(lptr, lind, lval, uptr, uind, uval, dinv, x, y)


# --------------------------------------------------------------------------- stability
_GROWTH = [("float64", "float32"), ("float64", "float64"),
           ("complex128", "complex64"), ("complex128", "complex128")]


@register("cpu", "ilu_growth", _GROWTH)
@njit(fastmath=NATIVE_REDUCTION_MATH, **JIT)
def ilu_growth(indptr, indices, data, scaled, bounds, lptr, lind, lval, uptr, uind, uval,
               dinv, x, y, z):
    """``max_i |(M C x - x)_i| / x_i`` for ``M`` the sweeps' factors and ``x`` the ones
    vector -- or, ``scaled``, ``x_i = |c_ii|^{-1/2}`` (1 where ``c_ii = 0``) -- with
    ``inf`` where a term is not finite: the stability test of ``mpsolve.auto.ilu_growth``
    in one call (FP64 ``x`` and ``y = C x`` -- complex128 for complex ``C`` -- and ``z =
    M y`` in ``y``'s dtype: work vectors of length ``n``).  ``C x`` sums each row in
    stored order, as SciPy's product; ``M y`` by :func:`_sweeps`, per diagonal block, as
    ``ilu_sweeps``."""
    n = x.size
    for i in range(n):
        xi = 1.0
        if scaled:
            for k in range(indptr[i], indptr[i + 1]):
                if indices[k] == i:
                    d = abs(data[k])
                    if d != 0.0:
                        xi = 1.0 / np.sqrt(d)
                    break
        x[i] = xi
    for i in range(n):
        s = y.dtype.type(0)
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k] * x[indices[k]]
        y[i] = s
    for t in range(bounds.size - 1):
        _sweeps(bounds[t], bounds[t + 1], lptr, lind, lval, uptr, uind, uval, dinv, y, z)
    g = 0.0
    for i in range(n):
        v = abs(z[i] - x[i]) / x[i]
        if not v <= np.inf:        # NaN: the factors are not usable (an inf is the max)
            return np.inf
        if v > g:
            g = v
    return g
