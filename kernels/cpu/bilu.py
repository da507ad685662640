"""Block ILU(0) on the CPU (Numba): the FP64 set-up kernels, the block triangular
sweeps, and the block ISAI of the factors.

All matrices are BSR with ``b x b`` blocks: ``indptr``/``indices`` over block rows
(sorted), ``data`` of shape ``(nnzb, b, b)``.  :mod:`mpsolve.precond.block_ilu`
calls them through the registry.

Set-up (FP64, host):

* ``bilu0_factor`` -- block ILU(0), block IKJ variant in place (the block form of
  Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed., Algorithm 10.4):
  for block row ``i`` and each block column ``k < i`` of its pattern (ascending),
  ``L_ik = A_ik U_kk^{-1}``, then ``A_ij -= L_ik U_kj`` for ``j > k`` in the patterns
  of both rows; the pivot blocks ``U_ii`` are inverted in FP64 (Gauss-Jordan with
  partial pivoting) into ``dinv``;
* ``bilu_split`` -- the combined factors laid out for the sweeps (``L`` forward,
  ``U' = D^{-1} U`` block rows reversed, ``D^{-1}``), as ``ilu_split`` for ILU(0);
* ``block_tri_isai`` -- the ISAI of a block triangular factor: block row ``i`` of
  ``X ~ T^{-1}`` on a block pattern ``J_i`` solves ``X T[J_i, J_i] = E_i^T`` by block
  substitution (each step a few ``b x b`` GEMMs), one task per block row.

Apply: ``bilu_sweeps`` -- ``y = U'^{-1} D^{-1} L^{-1} x`` by a block forward and a
block backward sweep, each block row's ``b`` sums carried in FP64.

Complex data: every kernel is written once for both fields (:mod:`.field`): the set-up in
complex128 (its scratch in the data's dtype, Gauss-Jordan pivoting on the modulus), the
sweeps' sums in complex128, and ``symmetric`` meaning Hermitian (``A = L D L^H``:
``U'_ij = L_ji^H``, ``D^{-1}`` made Hermitian).
"""
import numpy as np
from numba import get_num_threads, njit, prange

from ..registry import register
from ._config import JIT, LONG_ROW
from .field import conj, wide

_F = ("float32", "float64")
_C = ("complex64", "complex128")
_MAT = [(v, x, y) for f in (_F, _C) for v in f for x in f for y in f]
_SETUP = [("float64",), ("complex128",)]


# --------------------------------------------------------------------------- helpers
@njit(inline="always", **JIT)
def _invert(a, out, w):
    """``out = a^{-1}`` (``b x b``, FP64 or complex128) by Gauss-Jordan with partial
    pivoting (largest modulus) on the work array ``w`` (``b x 2b``, ``a``'s dtype).  False when a pivot is zero or the inverse is not
    finite (``a`` singular, or not finite)."""
    b = a.shape[0]
    for u in range(b):
        for v in range(b):
            w[u, v] = a[u, v]
            w[u, b + v] = 1.0 if u == v else 0.0
    for c in range(b):
        p = c
        big = abs(w[c, c])
        for u in range(c + 1, b):
            if abs(w[u, c]) > big:
                big = abs(w[u, c])
                p = u
        if not big > 0.0:  # zero or NaN pivot
            return False
        if p != c:
            for v in range(2 * b):
                t = w[c, v]
                w[c, v] = w[p, v]
                w[p, v] = t
        piv = w[c, c]
        for v in range(2 * b):
            w[c, v] = w[c, v] / piv
        for u in range(b):
            if u != c:
                f = w[u, c]
                if f != 0.0:
                    for v in range(2 * b):
                        w[u, v] -= f * w[c, v]
    for u in range(b):
        for v in range(b):
            x = w[u, b + v]
            if not np.isfinite(x):
                return False
            out[u, v] = x
    return True


@njit(inline="always", **JIT)
def _gemm_sub(a, b_, c):
    """``c -= a b_`` (``b x b`` blocks, sums in ``c``'s dtype)."""
    b = c.shape[0]
    for u in range(b):
        for v in range(b):
            s = c.dtype.type(0.0)
            for w in range(b):
                s += a[u, w] * b_[w, v]
            c[u, v] -= s


@njit(inline="always", **JIT)
def _gemm_to(a, b_, c):
    """``c = a b_`` (``b x b`` blocks)."""
    b = c.shape[0]
    for u in range(b):
        for v in range(b):
            s = c.dtype.type(0.0)
            for w in range(b):
                s += a[u, w] * b_[w, v]
            c[u, v] = s


# --------------------------------------------------------------------------- set-up
@njit(**JIT)
def _bilu0(indptr, indices, data, diag, dinv):
    # Block IKJ with a position map of row i (pos[j] = where block (i, j) is stored):
    # for k < i in row i (ascending): L_ik = A_ik inv(U_kk); A_ij -= L_ik U_kj for the
    # blocks j > k of row k that row i stores.  Then inv(U_ii).  -1, or the first
    # block row whose pivot block is missing or singular.
    nb = indptr.size - 1
    b = data.shape[1]
    pos = np.full(nb, -1, dtype=np.int64)
    tmp = np.empty((b, b), dtype=data.dtype)
    w = np.empty((b, 2 * b), dtype=data.dtype)
    for i in range(nb):
        s, e = indptr[i], indptr[i + 1]
        for kk in range(s, e):
            pos[indices[kk]] = kk
        for kk in range(s, e):
            k = indices[kk]
            if k >= i:
                break
            _gemm_to(data[kk], dinv[k], tmp)          # L_ik = A_ik inv(U_kk)
            for u in range(b):
                for v in range(b):
                    data[kk, u, v] = tmp[u, v]
            if indptr[k + 1] - diag[k] - 1 > LONG_ROW * (e - kk):
                # row k much longer than what is left of row i (a dense block row): row
                # i's blocks j > k looked up in it (the same updates, in the same order)
                q = diag[k] + 1
                for p in range(kk + 1, e):
                    q += np.searchsorted(indices[q:indptr[k + 1]], indices[p])
                    if q >= indptr[k + 1]:
                        break
                    if indices[q] == indices[p]:
                        _gemm_sub(data[kk], data[q], data[p])
                continue
            for jj in range(diag[k] + 1, indptr[k + 1]):
                p = pos[indices[jj]]
                if p >= 0:
                    _gemm_sub(data[kk], data[jj], data[p])   # A_ij -= L_ik U_kj
        for kk in range(s, e):
            pos[indices[kk]] = -1
        if diag[i] < 0:
            return i
        if not _invert(data[diag[i]], dinv[i], w):
            return i
    return -1


@register("cpu", "bilu0_factor", _SETUP)
def bilu0_factor(indptr, indices, data, diag, dinv):
    """Block ILU(0) of sorted BSR in place on ``data`` (FP64 or complex128, ``(nnzb, b, b)``):
    strictly lower blocks ``L`` (unit diagonal implied), upper blocks ``U``;
    ``dinv[i] = U_ii^{-1}``.  Returns -1, or the first block row whose pivot block is
    singular, not finite or missing (``diag[i] < 0``)."""
    return _bilu0(indptr, indices, data, diag, dinv)


@register("cpu", "bilu_split", _SETUP)
@njit(**JIT)
def bilu_split(indptr, indices, data, diag, dinv, symmetric, mirror, lval, lind, lptr, uval,
               uind, uptr):
    """Lay the combined FP64 block factors out for ``bilu_sweeps``.

    ``L``: strictly lower blocks, block rows in order.  ``U' = D^{-1} U`` (strictly
    upper blocks of the unit block upper factor): block rows in *reverse* order, so the
    backward sweep streams forward through memory.  With ``symmetric`` (``A = L D L^T``
    in exact arithmetic) ``U'_ij = L_ji^T`` (``mirror[k]``: position of block ``k``'s
    transpose) and ``dinv`` is symmetrised in place, so the stored
    ``M = (L D L^T)^{-1}`` is symmetric bit for bit.  Complex data: Hermitian
    (``U'_ij = L_ji^H``, ``dinv`` made Hermitian).
    """
    nb = indptr.size - 1
    b = data.shape[1]
    if symmetric:
        for i in range(nb):
            for u in range(b):
                for v in range(u + 1, b):
                    t = 0.5 * (dinv[i, u, v] + conj(dinv[i, v, u]))
                    dinv[i, u, v] = t
                    dinv[i, v, u] = conj(t)
            for u in range(b):                          # a Hermitian diagonal is real
                dinv[i, u, u] = dinv[i, u, u].real
    q = 0
    for i in range(nb):
        lptr[i] = q
        for k in range(indptr[i], diag[i]):
            for u in range(b):
                for v in range(b):
                    lval[q, u, v] = data[k, u, v]
            lind[q] = indices[k]
            q += 1
    lptr[nb] = q
    q = 0
    for p in range(nb):
        i = nb - 1 - p
        uptr[p] = q
        for k in range(diag[i] + 1, indptr[i + 1]):
            if symmetric:
                m = mirror[k]
                for u in range(b):
                    for v in range(b):
                        uval[q, u, v] = conj(data[m, v, u])  # L_ji^T (complex: L_ji^H)
            else:
                _gemm_to(dinv[i], data[k], uval[q])         # U_ii^-1 U_ij
            uind[q] = indices[k]
            q += 1
    uptr[nb] = q


@njit(parallel=True, **JIT)
def _tri_isai(pptr, pind, tptr, tind, tdata, tdiag, dinv, lower, cond_limit, maxm, nchunks,
              out, bad):
    # One task per chunk of block rows; each has its position map and scratch.
    nb = pptr.size - 1
    n_t = tptr.size - 1
    b = tdata.shape[1]
    for t in prange(nchunks):
        lo = t * nb // nchunks
        hi = (t + 1) * nb // nchunks
        pos = np.full(n_t, -1, dtype=np.int64)
        S = np.zeros((maxm, b, b), dtype=tdata.dtype)  # S_p = sum_q X_q T[J_q, J_p]
        R = np.empty((b, b), dtype=tdata.dtype)
        rown = np.zeros((maxm, b), dtype=np.float64)   # |T_J| row sums
        for i in range(lo, hi):
            j0 = pptr[i]
            m = pptr[i + 1] - j0
            for p in range(m):
                pos[pind[j0 + p]] = p
                for u in range(b):
                    rown[p, u] = 0.0
                    for v in range(b):
                        S[p, u, v] = 0.0
            for step in range(m):
                # lower: X T_J = E_last^T, last column first; upper: E_first, first first
                q = m - 1 - step if lower else step
                r = pind[j0 + q]
                X = out[j0 + q]
                # R = E_q - S_q;  X_q = R inv(T_rr)  (unit diagonal for the lower factor)
                for u in range(b):
                    for v in range(b):
                        R[u, v] = -S[q, u, v]
                if step == 0:
                    for u in range(b):
                        R[u, u] += 1.0
                if lower:
                    for u in range(b):
                        rown[q, u] += 1.0
                        for v in range(b):
                            X[u, v] = R[u, v]
                else:
                    _gemm_to(R, dinv[r], X)
                    d = tdiag[r]
                    for u in range(b):
                        for v in range(b):
                            rown[q, u] += abs(tdata[d, u, v])
                # push X_q T[r, c] to the unknowns p still to come (strict part of row r)
                if lower:
                    k0, k1 = tptr[r], tdiag[r]
                else:
                    k0, k1 = tdiag[r] + 1, tptr[r + 1]
                for k in range(k0, k1):
                    p = pos[tind[k]]
                    if p >= 0:
                        Tk = tdata[k]
                        for u in range(b):
                            for v in range(b):
                                s = S.dtype.type(0.0)
                                for w in range(b):
                                    s += X[u, w] * Tk[w, v]
                                S[p, u, v] += s
                                rown[q, u] += abs(Tk[u, v])
            # rejection: not finite, or cond lower bound ||T_J||_inf ||X||_inf too large
            tn = 0.0
            for p in range(m):
                for u in range(b):
                    tn = max(tn, rown[p, u])
            xn = 0.0
            finite = True
            for u in range(b):
                s = 0.0
                for p in range(m):
                    for v in range(b):
                        x = out[j0 + p, u, v]
                        if not np.isfinite(x):
                            finite = False
                        s += abs(x)
                xn = max(xn, s)
            bad[i] = 0 if finite and tn * xn <= cond_limit else 1
            for p in range(m):
                pos[pind[j0 + p]] = -1


@register("cpu", "block_tri_isai", _SETUP)
def block_tri_isai(pptr, pind, tptr, tind, tdata, tdiag, dinv, lower, cond_limit, out, bad):
    """Block ISAI of a block triangular factor stored in combined BILU(0) form.

    ``T``: the unit block lower factor (``lower``: the blocks left of ``tdiag``) or the
    block upper factor (the blocks from ``tdiag`` on, ``dinv[r] = T_rr^{-1}``).  For
    each block row ``i`` with block columns ``J = pind[pptr[i]:pptr[i+1]]`` (sorted,
    ``J`` ending with ``i`` for ``lower``, starting with it otherwise), ``out[J-part] = X``
    with ``X T[J, J] = E_i^T`` by block substitution.  ``bad[i] = 1`` when ``X`` is not
    finite or ``||T[J, J]||_inf ||X||_inf > cond_limit``.
    """
    nb = pptr.size - 1
    maxm = int(np.max(np.diff(pptr))) if nb > 0 else 1
    nchunks = min(nb, 4 * get_num_threads())          # chunks of rows, one task each
    _tri_isai(pptr, pind, tptr, tind, tdata, tdiag, dinv, lower, cond_limit, maxm, nchunks,
              out, bad)


# --------------------------------------------------------------------------- sweeps
@njit(**JIT)
def _bsweeps(lptr, lind, lval, uptr, uind, uval, dinv, r, out, work):
    """``out = (L D U')^{-1} r``: block forward sweep with unit ``L``, block backward
    sweep ``y_i = D_i^{-1} z_i - sum_j U'_ij y_j``; each block row's ``b`` sums in
    FP64 (complex128: ``work``, ``(3, b)``, is in that dtype).  ``out.size = n`` may end
    inside the last block (the padding is skipped)."""
    n = out.size
    nb = dinv.shape[0]
    b = dinv.shape[1]
    acc = work[0]
    z = work[1]
    xb = work[2]
    for i in range(nb):                                  # L z = r
        bw = min(b, n - i * b)
        for u in range(bw):
            acc[u] = wide(r[i * b + u])
        for k in range(lptr[i], lptr[i + 1]):
            c = lind[k] * b                             # a full block (left of i)
            for v in range(b):
                xb[v] = wide(out[c + v])
            for u in range(bw):                         # acc -= L_ik z_k
                a = acc[u]
                for v in range(b):
                    a -= wide(lval[k, u, v]) * xb[v]
                acc[u] = a
        for u in range(bw):
            out[i * b + u] = acc[u]
    for p in range(nb):                                  # U' y = D^-1 z
        i = nb - 1 - p
        bw = min(b, n - i * b)
        for v in range(bw):
            z[v] = wide(out[i * b + v])
        for u in range(bw):
            s = z.dtype.type(0.0)
            for v in range(bw):
                s += wide(dinv[i, u, v]) * z[v]
            acc[u] = s
        for k in range(uptr[p], uptr[p + 1]):
            c = uind[k] * b
            cw = min(b, n - c)
            for v in range(cw):
                xb[v] = wide(out[c + v])
            for u in range(bw):                         # acc -= U'_ij y_j
                a = acc[u]
                for v in range(cw):
                    a -= wide(uval[k, u, v]) * xb[v]
                acc[u] = a
        for u in range(bw):
            out[i * b + u] = acc[u]


@register("cpu", "bilu_sweeps", _MAT)
def bilu_sweeps(lptr, lind, lval, uptr, uind, uval, dinv, x, y):
    """``y = U'^{-1} D^{-1} L^{-1} x`` (BILU(0) layout of ``bilu_split``); FP64 sums."""
    b = dinv.shape[1]
    work = np.empty((3, b), np.complex128 if y.dtype.kind == "c" else np.float64)
    _bsweeps(lptr, lind, lval, uptr, uind, uval, dinv, x, y, work)
