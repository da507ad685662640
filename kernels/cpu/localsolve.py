"""Batched small dense solves of the (Block-)ISAI / FSAI local systems on the CPU (Numba).

Each kernel takes the block rows ``rows`` of one *size group* (every ``J_i`` has the
same ``m`` block columns, ``s = m b`` unknowns), gathers their local matrices from the
BSR arrays of ``A``, solves them in FP64, checks each solution by the rule of
:mod:`mpsolve.precond._localsolve` (finite; normwise backward error
``||Mat X - E||_inf / (||Mat||_inf ||X||_inf + 1) <= bwd_tol``; condition lower bound
``||Mat||_inf ||X||_inf <= cond_limit``) and writes each accepted block row of ``M``
(or ``G``) straight into ``out[pptr[i]:pptr[i+1]]`` (``(nnz, b, b)`` blocks).
``bad[t]`` is set to 1 for a rejected row (``out`` untouched there), 2 where the
Cholesky kernel leaves the row to LU (the caller retries those with ``local_lu_solve``).

Layout and speed.  Rows are grouped by size; up to :data:`LOCKSTEP_MAX` unknowns the
systems are processed :data:`LANES` at a time *in lock step*: a group's matrices are
stored as ``a[r, c, g]`` with the lane ``g`` (one system) the contiguous index, so every
loop of the factorisation runs over ``g`` -- full SIMD vectors whatever ``s`` is (a
4 x 4 system vectorises as well as a 100 x 100 one).  Partial pivoting swaps rows per
lane (``O(s^2)`` scalar moves against the ``O(s^3)`` vectorised update).  Larger systems
are solved one per iteration, vectorised along their rows.  The groups are spread over
the threads by their flops.  Per system the arithmetic is exactly that of the textbook
right-looking LU (``l = a_rk / a_kk``; ``a_rc -= l a_kc``), Cholesky (each entry
``a_ij - sum_k l_ik l_jk``, ``k`` ascending) and substitution, in a fixed order without
FMA contraction, in both layouts -- so the NumPy versions of the ``reference`` device
reproduce it bit for bit.

Sparsity.  The local matrices of ISAI are sparse and their LU factors stay so (about
3/4 of the row updates of a 25 x 25 system of a 7-point stencil's ``A^2`` have a zero
multiplier): the LU update, the Cholesky sums (lock step), the substitutions and the
check skip the terms whose entry is zero in every lane of the group (the matrix's from
the gather, the factors' from a scan after, or during, the factorisation).  A skipped term is ``x - 0 y = x``, exact for a finite
``y``; a non-finite factor or solution entry is never zero, so it is not skipped, and it
makes its system's solution non-finite -- rejected with or without the skipped terms.
So every accepted row equals the dense algorithm's (and the reference's) bit for bit,
and the verdicts are the same.

Flops per system (``s`` unknowns, ``b`` right-hand sides): LU ``2/3 s^3``, Cholesky
``1/3 s^3``, triangular ``s^2 b``; solves ``2 s^2 b``; the check ``2 s^2 b``.

Complex data (keys ``("complex128",)``) runs the same kernels in complex128: LU and the
substitutions unchanged (``A_J^T`` is the plain transpose), Cholesky in its Hermitian
form ``A = L L^H`` (``conj`` is the identity on real data, so the real kernels compute
what they did) and the FSAI row ``G_i = L^{-1} Z^H``.
"""
import numpy as np
from numba import get_num_threads, njit, prange

from ..registry import register
from ._config import JIT, LONG_ROW
from .field import conj, div

_JIT = dict(JIT, error_model="numpy")   # x / 0 -> inf (flagged by the check), no exception
#: Cholesky (which reads the lower triangle) is used where ``A_J`` is symmetric to this,
#: entry by entry, relative; other systems, and any it fails on, are left to LU.
SYM_RTOL = 64 * np.finfo(np.float64).eps
_F64 = [("float64",), ("complex128",)]

#: Systems per lock-step group up to 64 unknowns (fewer lanes leave the SIMD loops
#: mostly in their scalar remainders), and half as many above (the two ``s x s x lanes``
#: FP64 buffers of a thread stay within 8 MiB).
LANES = 64
#: Largest ``s`` solved in lock step; larger systems are solved one per iteration,
#: vectorised along their rows (about 20-30% slower at s = 81..128 on the 2-core AVX2
#: machine of the issue).
LOCKSTEP_MAX = 128


def lanes(s):
    """Systems per group for ``s`` unknowns: :data:`LANES` (``LANES // 2`` above 64), or
    1 above :data:`LOCKSTEP_MAX`."""
    if s > LOCKSTEP_MAX:
        return 1
    return LANES if s <= 64 else LANES // 2


# ----------------------------------------------------------------- gather into lanes
@njit(**_JIT)
def _put_block(a, nza, g, p, q, adata, k, transpose):
    # block (p, q) of A_J in lane g (transpose: block (q, p), transposed) <- A's block k
    b = adata.shape[1]
    for u in range(b):
        for v in range(b):
            if transpose:
                a[q * b + v, p * b + u, g] = adata[k, u, v]
                nza[q * b + v, p * b + u] = 1
            else:
                a[p * b + u, q * b + v, g] = adata[k, u, v]
                nza[p * b + u, q * b + v] = 1


@njit(**_JIT)
def _gather_long_row(g, p, m, j0, k0, k1, pind, aind, adata, transpose, a, nza):
    # row p of A_J (lane g) from a row of A much longer than J (a dense row): J's columns
    # looked up in it (both sorted: a binary search each, from the last hit on) instead of
    # scanning all of it -- the same entries, O(m log n) instead of O(n) for every system
    # it meets.  Apart from the hot loop of _gather_lanes, which it would slow.
    k = k0
    for q in range(m):
        c = pind[j0 + q]
        k += np.searchsorted(aind[k:k1], c)
        if k >= k1:
            return
        if aind[k] == c:
            _put_block(a, nza, g, p, q, adata, k, transpose)


@njit(**_JIT)
def _gather_lanes(rows, t0, ng, pptr, pind, aptr, aind, adata, transpose, a, where, nza):
    # a[:, :, g] = A[J, J] (transpose: A[J, J]^T) of block row rows[t0 + g]; a zeroed here.
    # where: (nb,) int64 scratch, -1 on entry and exit: where[j] = position of j in J.
    # nza[r, c] = 1 where some lane stores an entry of A (0: zero in every lane).
    b = adata.shape[1]
    s = a.shape[0]
    a[:] = 0.0
    nza[:s, :s] = 0
    for g in range(ng):
        i = rows[t0 + g]
        j0 = pptr[i]
        m = pptr[i + 1] - j0
        for p in range(m):
            where[pind[j0 + p]] = p
        for p in range(m):
            r = pind[j0 + p]
            k0 = aptr[r]
            k1 = aptr[r + 1]
            if k1 - k0 > LONG_ROW * m:                     # a dense row: by lookup
                _gather_long_row(g, p, m, j0, k0, k1, pind, aind, adata, transpose, a, nza)
                continue
            if b == 1:                                     # (the common case, unrolled)
                if transpose:
                    for k in range(k0, k1):
                        q = where[aind[k]]
                        if q >= 0:
                            a[q, p, g] = adata[k, 0, 0]
                            nza[q, p] = 1
                else:
                    for k in range(k0, k1):
                        q = where[aind[k]]
                        if q >= 0:
                            a[p, q, g] = adata[k, 0, 0]
                            nza[p, q] = 1
                continue
            for k in range(k0, k1):
                q = where[aind[k]]
                if q >= 0:
                    _put_block(a, nza, g, p, q, adata, k, transpose)
        for p in range(m):
            where[pind[j0 + p]] = -1


@njit(**_JIT)
def _copy_lanes(a, a0, nza, ng):
    # a0 = a on the entries in use (nza); the others are never read (_check_lanes)
    s = a.shape[0]
    for r in range(s):
        for c in range(s):
            if nza[r, c] != 0:
                src = a[r, c]
                dst = a0[r, c]
                for g in range(ng):
                    dst[g] = src[g]


@njit(**_JIT)
def _rhs_lanes(rows, t0, ng, pos, b, x):
    # x[:, j, g] = column j of E: e at scalar row pos[t0 + g] b + j
    x[:] = 0.0
    for g in range(ng):
        for j in range(b):
            x[pos[t0 + g] * b + j, j, g] = 1.0


# ----------------------------------------------------------------- factorisations
@njit(**_JIT)
def _lu_lanes(a, piv, big, ng, cols):
    # P A = L U in place, right-looking, partial pivoting (first largest |a_rk|, r >= k);
    # the row interchange moves whole rows (L part included), as LAPACK's getrf.
    # Sparsity: the update a_rc -= l_rk a_kc runs only for the rows r with l_rk != 0 and
    # the columns c with a_kc != 0 in some lane (cols: (s,) int64 scratch).  A skipped
    # update is x - 0 * y = x, exact for finite y; a non-finite l_rk or a_kc (not zero, so
    # never skipped itself) makes its lane's solution non-finite, rejected with or without
    # the skipped updates -- so every accepted row is the dense algorithm's, bit for bit.
    s = a.shape[0]
    for k in range(s):
        ak = a[k]
        col = ak[k]
        pk = piv[k]
        for g in range(ng):
            big[g] = abs(col[g])
            pk[g] = k
        for r in range(k + 1, s):
            cr = a[r, k]
            for g in range(ng):
                v = abs(cr[g])
                if v > big[g]:
                    big[g] = v
                    pk[g] = r
        for g in range(ng):
            p = pk[g]
            if p != k:
                for c in range(s):
                    t = a[k, c, g]
                    a[k, c, g] = a[p, c, g]
                    a[p, c, g] = t
        nc = 0
        for c in range(k + 1, s):                          # columns of U's row k in use
            akc = ak[c]
            nz = 0
            for g in range(ng):
                nz += akc[g] != 0.0
            if nz != 0:
                cols[nc] = c
                nc += 1
        d = ak[k]
        for r in range(k + 1, s):
            ar = a[r]
            lr = ar[k]
            nz = 0
            for g in range(ng):
                v = div(lr[g], d[g])                          # l_rk = a_rk / a_kk
                lr[g] = v
                nz += v != 0.0
            if nz == 0:
                continue
            for t in range(nc):
                c = cols[t]
                arc = ar[c]
                akc = ak[c]
                for g in range(ng):
                    arc[g] -= lr[g] * akc[g]              # a_rc -= l_rk a_kc


@njit(**_JIT)
def _nonzero_lanes(a, ng, nzf):
    # nzf[r, c] = 1 where a[r, c] != 0 in some lane (the factors' entries in use)
    s = a.shape[0]
    for r in range(s):
        ar = a[r]
        for c in range(s):
            arc = ar[c]
            nz = 0
            for g in range(ng):
                nz += arc[g] != 0.0
            nzf[r, c] = nz != 0


@njit(**_JIT)
def _lu_solve_lanes(a, piv, x, ng, nzf):
    # x = U^-1 L^-1 P x for each right-hand side x[:, j, :]; the terms of entries that are
    # zero in every lane (nzf, from _nonzero_lanes) are skipped, as in _lu_lanes
    s = a.shape[0]
    nrhs = x.shape[1]
    for k in range(s):
        pk = piv[k]
        for g in range(ng):
            p = pk[g]
            if p != k:
                for j in range(nrhs):
                    t = x[k, j, g]
                    x[k, j, g] = x[p, j, g]
                    x[p, j, g] = t
    _nonzero_lanes(a, ng, nzf)
    for j in range(nrhs):
        for r in range(1, s):                              # L y = P e (unit lower)
            xr = x[r, j]
            ar = a[r]
            for c in range(r):
                if nzf[r, c] == 0:
                    continue
                arc = ar[c]
                xc = x[c, j]
                for g in range(ng):
                    xr[g] -= arc[g] * xc[g]
        for r in range(s - 1, -1, -1):                     # U x = y
            xr = x[r, j]
            ar = a[r]
            for c in range(r + 1, s):
                if nzf[r, c] == 0:
                    continue
                arc = ar[c]
                xc = x[c, j]
                for g in range(ng):
                    xr[g] -= arc[g] * xc[g]
            d = ar[r]
            for g in range(ng):
                xr[g] = div(xr[g], d[g])


@njit(**_JIT)
def _chol_lanes(a, ok, ng, nzl, cols):
    # A = L L^H in place (lower triangle), left-looking:
    # l_jj = sqrt(a_jj - sum_k |l_jk|^2), l_ij = (a_ij - sum_k l_ik conj(l_jk)) / l_jj (k < j,
    # in order); ok[g] = 0 where A is not symmetric (Hermitian) to SYM_RTOL or a pivot is
    # not positive and finite.
    # Sparsity (as _lu_lanes): the terms l_ik conj(l_jk) run only for the k with l_jk != 0
    # in some lane (cols: (s,) int64 scratch) and l_ik != 0 in some lane (nzl[i, k], set as
    # each l_ik is computed; (s, s) int8 scratch, read by _chol_solve_lanes).  A skipped
    # term is x - 0 y = x, exact for finite y; a non-finite l (never zero, so never
    # skipped) makes its lane's solution non-finite: left to LU with or without the
    # skipped terms -- so every accepted row is the dense algorithm's, bit for bit.
    s = a.shape[0]
    for g in range(ng):
        ok[g] = 1
    for r in range(s):
        for c in range(r + 1, s):
            u = a[r, c]
            lo = a[c, r]
            for g in range(ng):
                if abs(u[g] - conj(lo[g])) > SYM_RTOL * max(abs(u[g]), abs(lo[g])):
                    ok[g] = 0
    for j in range(s):
        aj = a[j]
        dj = aj[j]
        nk = 0
        for k in range(j):                                 # l_jk in use
            if nzl[j, k] != 0:
                cols[nk] = k
                nk += 1
        for t in range(nk):
            ljk = aj[cols[t]]
            for g in range(ng):
                dj[g] -= ljk[g] * conj(ljk[g])
        for g in range(ng):
            d = dj[g].real
            if not (d > 0.0 and d < np.inf):
                ok[g] = 0
            dj[g] = np.sqrt(d)
        for i in range(j + 1, s):
            ai = a[i]
            aij = ai[j]
            for t in range(nk):
                k = cols[t]
                if nzl[i, k] == 0:
                    continue
                aik = ai[k]
                ajk = aj[k]
                for g in range(ng):
                    aij[g] -= aik[g] * conj(ajk[g])
            nz = 0
            for g in range(ng):
                v = div(aij[g], dj[g])                        # l_ij
                aij[g] = v
                nz += v != 0.0
            nzl[i, j] = nz != 0
        nzl[j, j] = 1


@njit(**_JIT)
def _chol_solve_lanes(a, x, ng, nzl):
    # x = L^-H L^-1 x; the terms of the entries of L zero in every lane (nzl from
    # _chol_lanes) skipped, as in _lu_solve_lanes
    s = a.shape[0]
    nrhs = x.shape[1]
    for j in range(nrhs):
        for r in range(s):                                 # L y = e
            xr = x[r, j]
            ar = a[r]
            for c in range(r):
                if nzl[r, c] == 0:
                    continue
                arc = ar[c]
                xc = x[c, j]
                for g in range(ng):
                    xr[g] -= arc[g] * xc[g]
            d = ar[r]
            for g in range(ng):
                xr[g] = div(xr[g], d[g])
        for r in range(s - 1, -1, -1):                     # L^H z = y
            xr = x[r, j]
            for c in range(r + 1, s):
                if nzl[c, r] == 0:
                    continue
                lcr = a[c, r]
                xc = x[c, j]
                for g in range(ng):
                    xr[g] -= conj(lcr[g]) * xc[g]
            d = a[r, r]
            for g in range(ng):
                xr[g] = div(xr[g], d[g])


@njit(**_JIT)
def _tri_solve_lanes(a, x, upper, ng, nzf):
    # x = T^-1 x for triangular T (upper: back substitution, else forward); the entries
    # zero in every lane (nzf[r, c] = 0) skipped, as in _lu_solve_lanes
    s = a.shape[0]
    nrhs = x.shape[1]
    for j in range(nrhs):
        for rr in range(s):
            r = s - 1 - rr if upper else rr
            xr = x[r, j]
            ar = a[r]
            c0 = r + 1 if upper else 0
            c1 = s if upper else r
            for c in range(c0, c1):
                if nzf[r, c] == 0:
                    continue
                arc = ar[c]
                xc = x[c, j]
                for g in range(ng):
                    xr[g] -= arc[g] * xc[g]
            d = ar[r]
            for g in range(ng):
                xr[g] = div(xr[g], d[g])


# ----------------------------------------------------------------- one system (large s)
# The same arithmetic per entry as the lock-step versions (each a_rc receives the same
# updates in the same order), vectorised along the rows instead of across systems.
@njit(**_JIT)
def _lu_one(a, piv):
    s = a.shape[0]
    for k in range(s):
        p = k
        big = abs(a[k, k])
        for r in range(k + 1, s):
            v = abs(a[r, k])
            if v > big:
                big = v
                p = r
        piv[k, 0] = p
        if p != k:
            rk = a[k]
            rp = a[p]
            for c in range(s):
                t = rk[c]
                rk[c] = rp[c]
                rp[c] = t
        d = a[k, k]
        uk = a[k, k + 1:]
        for r in range(k + 1, s):
            lr = div(a[r, k], d)                              # l_rk = a_rk / a_kk
            a[r, k] = lr
            if lr == 0.0:                                  # (skipped: see _lu_lanes)
                continue
            ar = a[r, k + 1:]
            for c in range(ar.size):
                ar[c] -= lr * uk[c]                        # a_rc -= l_rk a_kc


@njit(**_JIT)
def _lu_solve_one(a, piv, x):
    s = a.shape[0]
    nrhs = x.shape[1]
    for k in range(s):
        p = piv[k, 0]
        if p != k:
            for j in range(nrhs):
                t = x[k, j, 0]
                x[k, j, 0] = x[p, j, 0]
                x[p, j, 0] = t
    for j in range(nrhs):
        for r in range(1, s):
            acc = x[r, j, 0]
            for c in range(r):
                acc -= a[r, c] * x[c, j, 0]
            x[r, j, 0] = acc
        for r in range(s - 1, -1, -1):
            acc = x[r, j, 0]
            for c in range(r + 1, s):
                acc -= a[r, c] * x[c, j, 0]
            x[r, j, 0] = div(acc, a[r, r])


@njit(**_JIT)
def _chol_one(a):
    # A = U^H U in the upper triangle (U = L^H), right-looking: per entry the same updates
    # conj(u_ki) u_kj (k ascending) as the left-looking lock-step form.  Returns 0 where A is
    # not symmetric (Hermitian) to SYM_RTOL or a pivot is not positive and finite.
    s = a.shape[0]
    ok = 1
    for r in range(s):
        for c in range(r + 1, s):
            if abs(a[r, c] - conj(a[c, r])) > SYM_RTOL * max(abs(a[r, c]), abs(a[c, r])):
                ok = 0
            a[r, c] = conj(a[c, r])                     # the lower triangle, as in lock step
    for k in range(s):
        d = a[k, k].real
        if not (d > 0.0 and d < np.inf):
            ok = 0
        d = np.sqrt(d)
        a[k, k] = d
        uk = a[k]
        for j in range(k + 1, s):
            uk[j] = div(uk[j], d)
        for i in range(k + 1, s):
            uki = uk[i]
            ai = a[i, i:]
            ui = uk[i:]
            cki = conj(uki)
            for j in range(ai.size):
                ai[j] -= ui[j] * cki                       # a_ij -= u_kj conj(u_ki)
    return ok


@njit(**_JIT)
def _chol_solve_one(a, x):
    # x = U^-1 U^-H x  (U = L^H in the upper triangle)
    s = a.shape[0]
    nrhs = x.shape[1]
    for j in range(nrhs):
        for r in range(s):                                 # L y = e: l_rc = conj(u_cr)
            acc = x[r, j, 0]
            for c in range(r):
                acc -= conj(a[c, r]) * x[c, j, 0]
            x[r, j, 0] = div(acc, a[r, r])
        for r in range(s - 1, -1, -1):                     # L^H z = y: (L^H)_rc = u_rc
            acc = x[r, j, 0]
            for c in range(r + 1, s):
                acc -= a[r, c] * x[c, j, 0]
            x[r, j, 0] = div(acc, a[r, r])


# ----------------------------------------------------------------- check and store
@njit(**_JIT)
def _check_lanes(a0, x, rows, t0, pos, b, ng, bwd_tol, cond_limit, bad, work, nzf):
    # reject (bad = 1) where X is not finite, ||Mat X - E|| / (||Mat|| ||X|| + 1) > bwd_tol
    # or ||Mat|| ||X|| > cond_limit (infinity norms; every sum in index order).
    # work: (7, G) scratch; vectorised across the lanes.  The entries of Mat that are zero
    # in every lane (nzf[r, c] = 0, from the gather) add |0| and 0 x_c: skipped (exact, or
    # x_c is not finite and the lane is rejected anyway); a0 is read only where nzf is set.
    # (work has the data's dtype: the norms use the real parts of their rows, acc the row)
    s = a0.shape[0]
    nA = work[0].real
    nX = work[1].real
    nR = work[2].real
    sa = work[3].real
    sx = work[4].real
    sr = work[5].real
    acc = work[6]
    for g in range(ng):
        nA[g] = 0.0
        nX[g] = 0.0
        nR[g] = 0.0
    for r in range(s):
        for g in range(ng):
            sa[g] = 0.0
            sx[g] = 0.0
            sr[g] = 0.0
        ar = a0[r]
        for c in range(s):
            if nzf[r, c] == 0:
                continue
            arc = ar[c]
            for g in range(ng):
                sa[g] += abs(arc[g])
        for j in range(b):
            for g in range(ng):
                acc[g] = 0.0
            for c in range(s):
                if nzf[r, c] == 0:
                    continue
                arc = ar[c]
                xc = x[c, j]
                for g in range(ng):
                    acc[g] += arc[g] * xc[g]              # (Mat X)_rj
            for g in range(ng):
                if pos[t0 + g] * b + j == r:
                    acc[g] -= 1.0                          # - E_rj
            xr = x[r, j]
            for g in range(ng):
                sx[g] += abs(xr[g])
                sr[g] += abs(acc[g])
        for g in range(ng):
            nA[g] = max(nA[g], sa[g])
            nX[g] = max(nX[g], sx[g])
            nR[g] = max(nR[g], sr[g])
    for g in range(ng):
        fin = True
        for r in range(s):
            for j in range(b):
                if not np.isfinite(x[r, j, g]):
                    fin = False
        cond = nA[g] * nX[g]
        bwd = nR[g] / (cond + 1.0)
        if not (fin and bwd <= bwd_tol and cond <= cond_limit):
            bad[t0 + g] = 1


@njit(**_JIT)
def _check_one(a0, x, rows, t0, pos, b, bwd_tol, cond_limit, bad, nzf):
    # _check_lanes for one system (a0: (s, s)), the same sums in the same order
    s = a0.shape[0]
    nA = 0.0
    nX = 0.0
    nR = 0.0
    fin = True
    e = pos[t0] * b
    for r in range(s):
        sa = 0.0
        for c in range(s):
            if nzf[r, c] != 0:
                sa += abs(a0[r, c])
        sx = 0.0
        sr = 0.0
        for j in range(b):
            acc = 0.0
            for c in range(s):
                if nzf[r, c] != 0:
                    acc += a0[r, c] * x[c, j, 0]
            if e + j == r:
                acc -= 1.0
            xv = x[r, j, 0]
            if not np.isfinite(xv):
                fin = False
            sx += abs(xv)
            sr += abs(acc)
        nA = max(nA, sa)
        nX = max(nX, sx)
        nR = max(nR, sr)
    cond = nA * nX
    bwd = nR / (cond + 1.0)
    if not (fin and bwd <= bwd_tol and cond <= cond_limit):
        bad[t0] = 1


@njit(**_JIT)
def _store_rows(x, rows, t0, ng, pptr, b, bad, out):
    # block p of M's row i = X[p b:(p+1) b, :]^T  (X A_J = E_i^T solved as A_J^T X^T = E_i)
    s = x.shape[0]
    m = s // b
    for g in range(ng):
        if bad[t0 + g] != 0:
            continue
        k0 = pptr[rows[t0 + g]]
        if b == 1:
            o = out[k0:k0 + m, 0, 0]
            for p in range(m):
                o[p] = x[p, 0, g]
            continue
        for p in range(m):
            for u in range(b):
                for v in range(b):
                    out[k0 + p, u, v] = x[p * b + v, u, g]


@njit(**_JIT)
def _spd_finish_store(x, rows, t0, ng, pptr, b, cond_limit, bad, out):
    # FSAI row from Z (A_J Z = E_last): Z_last = L L^H (its Hermitian part, positive
    # definite with lambda_max <= cond_limit lambda_min, else bad = 1), G_i = L^-1 Z^H -> out.
    # (conj and .real are the identity on real data.)
    s = x.shape[0]
    m = s // b
    if b == 1:                                             # g = conj(z) / sqrt(z_last)
        for g in range(ng):
            if bad[t0 + g] != 0:
                continue
            z = x[s - 1, 0, g].real
            if not (z > 0.0) or not (z * cond_limit >= z):
                bad[t0 + g] = 1
                continue
            d = np.sqrt(0.5 * (z + z))
            o = out[pptr[rows[t0 + g]]:pptr[rows[t0 + g]] + m, 0, 0]
            for c in range(s):
                o[c] = div(conj(x[c, 0, g]), d)
        return
    zl = np.empty((b, b), dtype=x.dtype)
    lt = np.empty((b, b), dtype=x.dtype)
    gi = np.empty((b, s), dtype=x.dtype)
    for g in range(ng):
        if bad[t0 + g] != 0:
            continue
        for u in range(b):
            for v in range(b):
                zl[u, v] = 0.5 * (x[s - b + u, v, g] + conj(x[s - b + v, u, g]))
        if b == 1:
            w0 = zl[0, 0].real
            w1 = w0
        else:
            w = np.linalg.eigvalsh(zl)
            w0 = w[0]
            w1 = w[b - 1]
        if not (w0 > 0.0) or not (w0 * cond_limit >= w1):
            bad[t0 + g] = 1
            continue
        for j in range(b):                                 # Z_last = L L^H
            d = zl[j, j]
            for k in range(j):
                d -= lt[j, k] * conj(lt[j, k])
            d = np.sqrt(d.real)
            lt[j, j] = d
            for i in range(j + 1, b):
                acc = zl[i, j]
                for k in range(j):
                    acc -= lt[i, k] * conj(lt[j, k])
                lt[i, j] = div(acc, d)
        for u in range(b):                                 # G = L^-1 Z^H
            for c in range(s):
                acc = conj(x[c, u, g])
                for v in range(u):
                    acc -= lt[u, v] * gi[v, c]
                gi[u, c] = div(acc, lt[u, u])
        k0 = pptr[rows[t0 + g]]
        for p in range(m):
            for u in range(b):
                for v in range(b):
                    out[k0 + p, u, v] = gi[u, p * b + v]


# ----------------------------------------------------------------- the kernels
_LU, _LU_SPD, _CHOL, _TRI_LOWER, _TRI_UPPER = 0, 1, 2, 3, 4


@njit(parallel=True, **_JIT)
def _solve_groups(kind, rows, pos, gstart, gsize, gs, glanes, cbounds, pptr, pind, aptr, aind,
                  adata, bwd_tol, cond_limit, out, bad):
    # group k: rows[gstart[k]:gstart[k] + gsize[k]], all with s = gs[k] unknowns, solved
    # in lock step on glanes[k] lanes (1: one system, vectorised along its rows); the
    # chunks cbounds[c]:cbounds[c+1] of groups (about equal flops) run in parallel.
    b = adata.shape[1]
    nchunk = cbounds.size - 1
    nb = pptr.size - 1
    for ch in prange(nchunk):
        k0 = cbounds[ch]
        k1 = cbounds[ch + 1]
        if k1 <= k0:
            continue
        smax = 1
        gmax = 1
        for k in range(k0, k1):
            smax = max(smax, gs[k])
            gmax = max(gmax, glanes[k])
        abuf = np.empty(smax * smax * gmax, adata.dtype)
        a0buf = np.empty(smax * smax * gmax, adata.dtype)
        xbuf = np.empty(smax * b * gmax, adata.dtype)
        piv = np.empty((smax, gmax), np.int64)
        big = np.empty(gmax)
        ok = np.empty(gmax, np.int8)
        work = np.empty((7, gmax), adata.dtype)
        cols = np.empty(smax, np.int64)
        nzf = np.empty((smax, smax), np.int8)
        nza = np.empty((smax, smax), np.int8)
        where = np.full(nb, -1, dtype=np.int64)
        for k in range(k0, k1):
            s = gs[k]
            t0 = gstart[k]
            ng = gsize[k]
            G = glanes[k]
            a = abuf[:s * s * G].reshape((s, s, G))
            a0 = a0buf[:s * s * G].reshape((s, s, G))
            x = xbuf[:s * b * G].reshape((s, b, G))
            pv = piv[:s, :G]
            transpose = kind == _LU or kind == _TRI_LOWER or kind == _TRI_UPPER
            _gather_lanes(rows, t0, ng, pptr, pind, aptr, aind, adata, transpose, a, where, nza)
            _rhs_lanes(rows, t0, ng, pos, b, x)
            if kind == _TRI_LOWER or kind == _TRI_UPPER:
                _tri_solve_lanes(a, x, kind == _TRI_LOWER, ng, nza)   # A lower: A_J^T upper
                _check_lanes(a, x, rows, t0, pos, b, ng, bwd_tol, cond_limit, bad, work, nza)
                _store_rows(x, rows, t0, ng, pptr, b, bad, out)
                continue
            _copy_lanes(a, a0, nza, ng)
            if kind == _CHOL:
                if G == 1:
                    a2 = a.reshape((s, s))
                    ok[0] = _chol_one(a2)
                    _chol_solve_one(a2, x)
                else:
                    _chol_lanes(a, ok, ng, nzf, cols)
                    _chol_solve_lanes(a, x, ng, nzf)
            elif G == 1:
                a2 = a.reshape((s, s))
                _lu_one(a2, pv)
                _lu_solve_one(a2, pv, x)
            else:
                _lu_lanes(a, pv, big, ng, cols)
                _lu_solve_lanes(a, pv, x, ng, nzf)
            if G == 1:
                _check_one(a0.reshape((s, s)), x, rows, t0, pos, b, bwd_tol, cond_limit, bad,
                           nza)
            else:
                _check_lanes(a0, x, rows, t0, pos, b, ng, bwd_tol, cond_limit, bad, work, nza)
            if kind == _CHOL:
                for g in range(ng):
                    if ok[g] == 0 or bad[t0 + g] != 0:
                        bad[t0 + g] = 2                    # LU decides (as without Cholesky)
            if kind == _LU:
                _store_rows(x, rows, t0, ng, pptr, b, bad, out)
            else:
                _spd_finish_store(x, rows, t0, ng, pptr, b, cond_limit, bad, out)


def _run(kind, rows, pos, pptr, pind, aptr, aind, adata, bwd_tol, cond_limit, out, bad):
    """Group ``rows`` by size (lock-step groups of :data:`LANES`), balance the groups'
    flops over the threads, solve; ``bad`` in the order of ``rows``."""
    if rows.size == 0:
        return
    b = adata.shape[1]
    rows = np.asarray(rows, dtype=np.int64)
    pos = np.asarray(pos, dtype=np.int64)
    sizes = (pptr[rows + 1] - pptr[rows]) * b
    if np.all(sizes[1:] >= sizes[:-1]):                # already grouped (local_solve)
        order, rs, ps, ss = None, rows, pos, sizes
    else:
        order = np.argsort(sizes, kind="stable")
        rs, ps, ss = rows[order], pos[order], sizes[order]
    first = np.concatenate([[0], np.flatnonzero(ss[1:] != ss[:-1]) + 1])
    ms = ss[first]
    last = np.append(first[1:], rows.size)
    gstart, gsize, gs, gl = [], [], [], []
    for s, f, e in zip(ms.tolist(), first.tolist(), last.tolist()):
        G = lanes(s)
        st = np.arange(f, e, G)
        gstart.append(st)
        gsize.append(np.minimum(G, e - st))
        gs.append(np.full(st.size, s))
        gl.append(np.full(st.size, G))
    gstart = np.concatenate(gstart).astype(np.int64)
    gsize = np.concatenate(gsize).astype(np.int64)
    gs = np.concatenate(gs).astype(np.int64)
    gl = np.concatenate(gl).astype(np.int64)
    cost = np.cumsum(gsize * (gs.astype(np.float64) ** 3 + 8.0 * gs * gs))
    nchunk = max(1, min(gs.size, 2 * get_num_threads()))
    cb = np.searchsorted(cost, cost[-1] * np.arange(1, nchunk) / nchunk, side="left") + 1
    cbounds = np.concatenate([[0], np.minimum(cb, gs.size), [gs.size]]).astype(np.int64)
    bs = bad if order is None else np.zeros(rows.size, dtype=np.int8)
    _solve_groups(kind, rs, ps, gstart, gsize, gs, gl, cbounds, pptr, pind, aptr, aind, adata,
                  float(bwd_tol), float(cond_limit), out, bs)
    if order is not None:
        bad[order] = bs


@register("cpu", "local_lu_solve", _F64)
def local_lu_solve(rows, pos, pptr, pind, aptr, aind, adata, spd, bwd_tol, cond_limit, out, bad):
    """LU (partial pivoting) of each local system of ``rows``: ``spd=False``:
    ``A_J^T X = E_pos`` and ``out[row i] = X^T``; ``spd=True``: ``A_J Z = E_pos`` and the
    FSAI row ``L^{-1} Z^H`` (``Z_last = L L^H``; ``^H`` is ``^T`` for real data).  Rejected rows get ``bad[t] = 1`` (see
    the module docstring)."""
    _run(_LU_SPD if spd else _LU, rows, pos, pptr, pind, aptr, aind, adata, bwd_tol,
         cond_limit, out, bad)


@register("cpu", "local_chol_solve", _F64)
def local_chol_solve(rows, pos, pptr, pind, aptr, aind, adata, bwd_tol, cond_limit, out, bad):
    """Cholesky of each ``A_J`` of ``rows``, ``A_J Z = E_pos``, FSAI row ``L^{-1} Z^H`` ->
    ``out``.  ``bad[t] = 2`` where ``A_J`` is not symmetric / Hermitian (to :data:`SYM_RTOL`) or not
    numerically positive definite, or the solution fails the check: LU decides those
    (``local_lu_solve(spd=True)``); 1 where the FSAI finish rejects ``Z_last``."""
    _run(_CHOL, rows, pos, pptr, pind, aptr, aind, adata, bwd_tol, cond_limit, out, bad)


@register("cpu", "local_tri_solve", _F64)
def local_tri_solve(rows, pos, pptr, pind, aptr, aind, adata, lower, bwd_tol, cond_limit, out,
                    bad):
    """Substitution for triangular ``A`` (``lower``: ``A`` lower triangular, so ``A_J^T``
    is upper): ``A_J^T X = E_pos``, ``out[row i] = X^T``; rejected rows ``bad[t] = 1``."""
    _run(_TRI_LOWER if lower else _TRI_UPPER, rows, pos, pptr, pind, aptr, aind, adata,
         bwd_tol, cond_limit, out, bad)
