"""Sparsity patterns of the (Block-)ISAI set-up on the CPU (Numba): BSR conversion, the
pattern of ``S^k``, the truncation of wide rows, the block transpose; and the two scans
of ``method="auto"``'s analysis: block size detection and the row statistics.

All are host set-up ops on FP64 data and int64 indices (``mpsolve.precond._pattern``
documents the math); the row loops run in parallel over chunks of rows, each chunk
with its own dense marker / accumulator of ``nb`` entries.
"""
import numpy as np
from numba import get_num_threads, njit, prange

from ..registry import register
from ._config import JIT, PARALLEL_MIN, serial_twin

_F64 = [("float64",)]


def _nchunk(n, per_thread=2):
    return max(1, min(n, per_thread * get_num_threads()))


# ----------------------------------------------------------------- CSR -> BSR
@njit(parallel=True, **JIT)
def _bsr_cols(indptr, indices, b, nb, nchunk, bound, tmp, cnt):
    # sorted distinct block columns of block row I (and I itself) -> tmp[bound[I]:], cnt[I]
    for ch in prange(nchunk):
        for I in range(ch * nb // nchunk, (ch + 1) * nb // nchunk):
            o = bound[I]
            k = 0
            for r in range(I * b, I * b + b):
                last = -1
                for p in range(indptr[r], indptr[r + 1]):
                    c = indices[p] // b
                    if c != last:                      # columns sorted: runs per block
                        tmp[o + k] = c
                        k += 1
                        last = c
            tmp[o + k] = I
            k += 1
            seg = tmp[o:o + k]
            if b > 1 and k > 64:
                seg.sort()
            elif b > 1:                                # b sorted runs (and I): insertion
                for q in range(1, k):                  # sort moves only across runs
                    v = seg[q]
                    t = q
                    while t > 0 and seg[t - 1] > v:
                        seg[t] = seg[t - 1]
                        t -= 1
                    seg[t] = v
            else:                                      # one sorted row: insert I in place
                q = k - 1
                while q > 0 and seg[q - 1] > I:
                    seg[q] = seg[q - 1]
                    q -= 1
                seg[q] = I
            u = 0
            for q in range(k):
                if u == 0 or seg[q] != seg[u - 1]:
                    seg[u] = seg[q]
                    u += 1
            cnt[I] = u


@njit(parallel=True, **JIT)
def _bsr_fill(indptr, indices, data, b, nb, nchunk, bound, tmp, aptr, aind, adata):
    for ch in prange(nchunk):
        for I in range(ch * nb // nchunk, (ch + 1) * nb // nchunk):
            a0 = aptr[I]
            m = aptr[I + 1] - a0
            o = bound[I]
            for q in range(m):
                aind[a0 + q] = tmp[o + q]
            for u in range(b):
                r = I * b + u
                q = 0
                for p in range(indptr[r], indptr[r + 1]):
                    c = indices[p]
                    cb = c // b
                    while aind[a0 + q] < cb:
                        q += 1
                    adata[a0 + q, u, c - cb * b] = data[p]


@njit(parallel=True, **JIT)
def _all_diagonal(indptr, indices):
    n = indptr.size - 1
    # one flag a row, summed after the loop: numba 0.68.0's parfor reduction analysis
    # rejects a reduction fed by a variable the inner loop assigns ("unexpected cycle")
    hit = np.zeros(n, dtype=np.int64)
    for i in prange(n):
        for p in range(indptr[i], indptr[i + 1]):
            if indices[p] == i:
                hit[i] = 1
    return hit.sum() == n


@register("cpu", "bsr_from_csr", _F64 + [("complex128",)])
def bsr_from_csr(indptr, indices, data, b):
    """Canonical BSR ``(aptr, aind, adata)`` of canonical CSR ``A`` (``n`` a multiple of
    ``b``): sorted block columns, every diagonal block stored (zero where absent), every
    stored entry of ``A`` kept (explicit zeros too).  Blocks in FP64, or complex128 for
    complex ``data``; with ``b = 1``, every diagonal entry stored and ``data`` already in
    that dtype, ``adata`` is a view of ``data`` (read-only use; ``to_bsr`` copies on
    request)."""
    n = indptr.size - 1
    nb = n // b
    wide = np.complex128 if np.iscomplexobj(data) else np.float64
    if b == 1 and _all_diagonal(indptr, indices):       # already canonical BSR: copies
        return (indptr.astype(np.int64), indices.astype(np.int64),
                np.asarray(data, dtype=wide).reshape(-1, 1, 1))
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    bound = indptr[::b][:nb + 1] + np.arange(nb + 1, dtype=np.int64)
    tmp = np.empty(int(bound[-1]) if nb else 0, dtype=np.int64)
    cnt = np.zeros(nb, dtype=np.int64)
    nch = _nchunk(nb)
    _bsr_cols(indptr, indices, b, nb, nch, bound, tmp, cnt)
    aptr = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(cnt, out=aptr[1:])
    aind = np.empty(int(aptr[-1]), dtype=np.int64)
    adata = np.zeros((aind.size, b, b), dtype=wide)
    _bsr_fill(indptr, indices, np.asarray(data, dtype=wide), b, nb, nch, bound, tmp, aptr,
              aind, adata)
    return aptr, aind, adata


# ----------------------------------------------------------------- pattern of S^k
@njit(**JIT)
def _product_row(i, pptr, pind, sptr, sind, mark, lst, part):
    # distinct columns j of row i of P (S + I) (part: 0 all, 1 j <= i, 2 j >= i) -> lst
    k = 0
    for p in range(pptr[i], pptr[i + 1]):
        r = pind[p]
        for q in range(sptr[r], sptr[r + 1] + 1):
            j = sind[q] if q < sptr[r + 1] else r          # S + I: the diagonal too
            k = _mark_in_part(i, j, part, mark, lst, k)
    return k


@njit(**JIT)
def _mark_in_part(i, j, part, mark, lst, k):
    # column j joins row i's list (lst[:k]) once, if in part (0 all, 1 j <= i, 2 j >= i)
    if (part == 1 and j > i) or (part == 2 and j < i) or mark[j] == i:
        return k
    mark[j] = i
    lst[k] = j
    return k + 1


@njit(**JIT)
def _sorted_into(lst, k, out, o):
    # out[o:o+k] = sorted(lst[:k]): insertion sort for short rows, else NumPy's sort
    if k > 48:
        out[o:o + k] = np.sort(lst[:k])
        return
    for p in range(k):
        v = lst[p]
        q = o + p
        while q > o and out[q - 1] > v:
            out[q] = out[q - 1]
            q -= 1
        out[q] = v


@njit(parallel=True, **JIT)
def _product_count(pptr, pind, sptr, sind, part, nchunk, cnt):
    nb = pptr.size - 1
    for ch in prange(nchunk):
        mark = np.full(nb, -1, dtype=np.int64)
        lst = np.empty(nb, dtype=np.int64)
        for i in range(ch * nb // nchunk, (ch + 1) * nb // nchunk):
            cnt[i] = _product_row(i, pptr, pind, sptr, sind, mark, lst, part)


@njit(parallel=True, **JIT)
def _product_fill(pptr, pind, sptr, sind, part, nchunk, qptr, qind):
    nb = pptr.size - 1
    for ch in prange(nchunk):
        mark = np.full(nb, -1, dtype=np.int64)
        lst = np.empty(nb, dtype=np.int64)
        for i in range(ch * nb // nchunk, (ch + 1) * nb // nchunk):
            k = _product_row(i, pptr, pind, sptr, sind, mark, lst, part)
            _sorted_into(lst, k, qind, qptr[i])


@njit(parallel=True, **JIT)
def _canonical_with_diagonal(sptr, sind):
    # every row strictly increasing and holding its diagonal?
    # (flags a row, summed after the loop: see _all_diagonal)
    nb = sptr.size - 1
    good = np.zeros(nb, dtype=np.int64)
    for i in prange(nb):
        hit = 0
        ok = 1
        for p in range(sptr[i], sptr[i + 1]):
            if sind[p] == i:
                hit = 1
            if p > sptr[i] and sind[p] <= sind[p - 1]:
                ok = 0
        good[i] = hit * ok
    return good.sum() == nb


@njit(parallel=True, **JIT)
def _part_count(sptr, sind, part, cnt):
    for i in prange(sptr.size - 1):
        k = 0
        for p in range(sptr[i], sptr[i + 1]):
            j = sind[p]
            if not ((part == 1 and j > i) or (part == 2 and j < i)):
                k += 1
        cnt[i] = k


@njit(parallel=True, **JIT)
def _part_fill(sptr, sind, part, qptr, qind):
    for i in prange(sptr.size - 1):
        k = qptr[i]
        for p in range(sptr[i], sptr[i + 1]):
            j = sind[p]
            if not ((part == 1 and j > i) or (part == 2 and j < i)):
                qind[k] = j
                k += 1


@register("cpu", "pattern_power", _F64)
def pattern_power(sptr, sind, power, part):
    """Canonical pattern ``(pptr, pind)`` of ``(S + I)^power`` restricted to
    ``part`` (0 all, 1 lower ``j <= i``, 2 upper ``j >= i``); ``S`` square CSR."""
    nb = sptr.size - 1
    sptr = np.asarray(sptr, dtype=np.int64)
    sind = np.asarray(sind, dtype=np.int64)
    canonical = _canonical_with_diagonal(sptr, sind)           # then S + I = S
    if int(power) == 1 and canonical:                             # filter
        if int(part) == 0:                                         # nothing to filter
            return sptr.copy(), sind.copy()
        cnt = np.empty(nb, dtype=np.int64)
        _part_count(sptr, sind, int(part), cnt)
        qptr = np.zeros(nb + 1, dtype=np.int64)
        np.cumsum(cnt, out=qptr[1:])
        qind = np.empty(int(qptr[-1]), dtype=np.int64)
        _part_fill(sptr, sind, int(part), qptr, qind)
        return qptr, qind
    if canonical:                                     # P = S + I = S: one product less
        pptr, pind, first = sptr, sind, 1             # (read only below)
    else:
        pptr = np.arange(nb + 1, dtype=np.int64)      # P = I
        pind = np.arange(nb, dtype=np.int64)
        first = 0
    nch = _nchunk(nb)
    for t in range(first, int(power)):
        pt = int(part) if t == int(power) - 1 else 0
        cnt = np.empty(nb, dtype=np.int64)
        _product_count(pptr, pind, sptr, sind, pt, nch, cnt)
        qptr = np.zeros(nb + 1, dtype=np.int64)
        np.cumsum(cnt, out=qptr[1:])
        qind = np.empty(int(qptr[-1]), dtype=np.int64)
        _product_fill(pptr, pind, sptr, sind, pt, nch, qptr, qind)
        pptr, pind = qptr, qind
    return pptr, pind


@njit(parallel=True, **JIT)
def _strong_count(aptr, aind, anorm, theta, cnt):
    for i in prange(aptr.size - 1):
        top = 0.0
        for p in range(aptr[i], aptr[i + 1]):
            if aind[p] != i and anorm[p] > top:
                top = anorm[p]
        k = 0
        for p in range(aptr[i], aptr[i + 1]):
            if aind[p] != i and anorm[p] > 0.0 and anorm[p] >= theta * top:
                k += 1
        cnt[i] = k


@njit(parallel=True, **JIT)
def _strong_fill(aptr, aind, anorm, theta, sptr, sind):
    for i in prange(aptr.size - 1):
        top = 0.0
        for p in range(aptr[i], aptr[i + 1]):
            if aind[p] != i and anorm[p] > top:
                top = anorm[p]
        k = sptr[i]
        for p in range(aptr[i], aptr[i + 1]):
            if aind[p] != i and anorm[p] > 0.0 and anorm[p] >= theta * top:
                sind[k] = aind[p]
                k += 1


@register("cpu", "strong_graph", _F64)
def strong_graph(aptr, aind, anorm, theta):
    """Canonical pattern ``(sptr, sind)`` of ``A``'s strong couplings: row ``i`` keeps the
    off-diagonal ``j`` with ``0 < anorm_ij >= theta max_k anorm_ik`` (``anorm``: a
    nonnegative weight per stored entry, the block norms)."""
    aptr = np.asarray(aptr, dtype=np.int64)
    aind = np.asarray(aind, dtype=np.int64)
    anorm = np.asarray(anorm, dtype=np.float64)
    nb = aptr.size - 1
    cnt = np.empty(nb, dtype=np.int64)
    _strong_count(aptr, aind, anorm, float(theta), cnt)
    sptr = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(cnt, out=sptr[1:])
    sind = np.empty(int(sptr[-1]), dtype=np.int64)
    _strong_fill(aptr, aind, anorm, float(theta), sptr, sind)
    return sptr, sind


@njit(**JIT)
def _union_row(i, aptr, aind, sptr, sind, power, part, mark, lst, queue):
    # distinct columns j (in part) of row i of pattern(A) | pattern((S + I)^power) -> lst:
    # A's row, then a breadth-first walk of S from i to depth power (through any node)
    k = 0
    for p in range(aptr[i], aptr[i + 1]):
        k = _mark_in_part(i, aind[p], part, mark, lst, k)
    # (seen by the walk: mark = -2 - i; a node is seen once, whether or not in part)
    head, tail = 0, 1
    queue[0] = i
    if mark[i] != i:
        mark[i] = i
        lst[k] = i
        k += 1
    level_end = 1
    depth = 0
    while head < tail and depth < power:
        while head < level_end:
            r = queue[head]
            head += 1
            for q in range(sptr[r], sptr[r + 1]):
                j = sind[q]
                if mark[j] == -2 - i or j == i:
                    continue
                inpart = not ((part == 1 and j > i) or (part == 2 and j < i))
                if mark[j] == i:                  # in A's row already: walk on from it
                    mark[j] = -2 - i
                    queue[tail] = j
                    tail += 1
                    continue
                mark[j] = -2 - i
                queue[tail] = j
                tail += 1
                if inpart:
                    lst[k] = j
                    k += 1
        level_end = tail
        depth += 1
    return k


@njit(parallel=True, **JIT)
def _union_count(aptr, aind, sptr, sind, power, part, nchunk, cnt):
    nb = aptr.size - 1
    for ch in prange(nchunk):
        mark = np.full(nb, -1, dtype=np.int64)
        lst = np.empty(nb, dtype=np.int64)
        queue = np.empty(nb, dtype=np.int64)
        for i in range(ch * nb // nchunk, (ch + 1) * nb // nchunk):
            cnt[i] = _union_row(i, aptr, aind, sptr, sind, power, part, mark, lst, queue)


@njit(parallel=True, **JIT)
def _union_fill(aptr, aind, sptr, sind, power, part, nchunk, qptr, qind):
    nb = aptr.size - 1
    for ch in prange(nchunk):
        mark = np.full(nb, -1, dtype=np.int64)
        lst = np.empty(nb, dtype=np.int64)
        queue = np.empty(nb, dtype=np.int64)
        for i in range(ch * nb // nchunk, (ch + 1) * nb // nchunk):
            k = _union_row(i, aptr, aind, sptr, sind, power, part, mark, lst, queue)
            _sorted_into(lst, k, qind, qptr[i])


@register("cpu", "pattern_union_power", _F64)
def pattern_union_power(aptr, aind, sptr, sind, power, part):
    """Canonical pattern ``(pptr, pind)`` of ``pattern(A) | pattern((S + I)^power)``
    restricted to ``part`` (0 all, 1 lower, 2 upper); ``A``, ``S`` square CSR patterns of
    one size.  One breadth-first walk of ``S`` a row (``S`` sparse, ``power`` small: the
    strong-coupling extension of :func:`mpsolve.precond._pattern.strong_extension`)."""
    aptr = np.asarray(aptr, dtype=np.int64)
    aind = np.asarray(aind, dtype=np.int64)
    sptr = np.asarray(sptr, dtype=np.int64)
    sind = np.asarray(sind, dtype=np.int64)
    nb = aptr.size - 1
    nch = _nchunk(nb)
    cnt = np.empty(nb, dtype=np.int64)
    _union_count(aptr, aind, sptr, sind, int(power), int(part), nch, cnt)
    qptr = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(cnt, out=qptr[1:])
    qind = np.empty(int(qptr[-1]), dtype=np.int64)
    _union_fill(aptr, aind, sptr, sind, int(power), int(part), nch, qptr, qind)
    return qptr, qind


# ----------------------------------------------------------------- truncation
@njit(parallel=True, **JIT)
def _truncate(pptr, pind, wptr, wind, wdata, power, keep, wide, qptr, qind, nchunk):
    nb = pptr.size - 1
    nw = wide.size
    for ch in prange(nchunk):
        acc = np.zeros(nb)
        nxt = np.zeros(nb)
        mark = np.full(nb, -1, dtype=np.int64)
        cur = np.empty(nb, dtype=np.int64)
        new = np.empty(nb, dtype=np.int64)
        for t in range(ch * nw // nchunk, (ch + 1) * nw // nchunk):
            i = wide[t]
            # row i of W^power: v <- e_i, then v <- v W (power times), sums in the order
            # of v's entries (for power 2 exactly SciPy's W @ W)
            nc = 1
            cur[0] = i
            acc[i] = 1.0
            for step in range(power):
                nn = 0
                for p in range(nc):
                    k = cur[p]
                    vk = acc[k]
                    for q in range(wptr[k], wptr[k + 1]):
                        j = wind[q]
                        if mark[j] != t * (power + 1) + step:
                            mark[j] = t * (power + 1) + step
                            nxt[j] = 0.0
                            new[nn] = j
                            nn += 1
                        nxt[j] += vk * wdata[q]
                for p in range(nc):
                    acc[cur[p]] = 0.0
                for p in range(nn):
                    j = new[p]
                    acc[j] = nxt[j]
                    cur[p] = j
                nc = nn
            J = pind[pptr[i]:pptr[i + 1]]
            w = np.empty(J.size)
            for p in range(J.size):
                w[p] = -np.inf if J[p] == i else -acc[J[p]]   # the diagonal always stays
            order = np.argsort(w, kind="mergesort")[:keep]
            sel = np.sort(order)
            o = qptr[i]
            for p in range(keep):
                qind[o + p] = J[sel[p]]
            for p in range(nc):
                acc[cur[p]] = 0.0


@njit(parallel=True, **JIT)
def _copy_rows(pptr, pind, qptr, qind, is_wide, nchunk):
    nb = pptr.size - 1
    for ch in prange(nchunk):
        for i in range(ch * nb // nchunk, (ch + 1) * nb // nchunk):
            if not is_wide[i]:
                o = qptr[i]
                for p in range(pptr[i], pptr[i + 1]):
                    qind[o + p - pptr[i]] = pind[p]


@register("cpu", "pattern_truncate", _F64)
def pattern_truncate(pptr, pind, wptr, wind, wdata, power, keep):
    """Rows of the pattern wider than ``keep`` keep the diagonal and the ``keep - 1``
    columns of largest weight in row ``i`` of ``W^power`` (``W`` CSR, positive values;
    ties: the lower column).  Returns ``(qptr, qind, n_truncated)``."""
    nb = pptr.size - 1
    sizes = np.diff(pptr)
    is_wide = sizes > keep
    wide = np.flatnonzero(is_wide).astype(np.int64)
    if wide.size == 0:
        return pptr, pind, 0
    qptr = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(np.minimum(sizes, keep), out=qptr[1:])
    qind = np.empty(int(qptr[-1]), dtype=np.int64)
    nch = _nchunk(nb)
    _copy_rows(pptr, pind, qptr, qind, is_wide, nch)
    _truncate(pptr, pind, np.asarray(wptr, np.int64), np.asarray(wind, np.int64),
              np.asarray(wdata, np.float64), int(power), int(keep), wide, qptr, qind,
              _nchunk(wide.size, 1))
    return qptr, qind, int(wide.size)


# ----------------------------------------------------------------- transpose
@njit(parallel=True, **JIT)
def _transpose_count(pptr, pind, rb, cnt):
    # cnt[c, j]: entries of column j in the rows rb[c]:rb[c+1]
    for c in prange(rb.size - 1):
        for k in range(pptr[rb[c]], pptr[rb[c + 1]]):
            cnt[c, pind[k]] += 1


@njit(parallel=True, **JIT)
def _transpose_fill(pptr, pind, data, rb, start, tind, tdata):
    # rows of chunk c go to start[c, j] onwards in column j: rows ascending in every
    # column of the transpose (chunks are row ranges in order)
    b = data.shape[1]
    for c in prange(rb.size - 1):
        nxt = start[c]
        for i in range(rb[c], rb[c + 1]):
            for k in range(pptr[i], pptr[i + 1]):
                j = pind[k]
                q = nxt[j]
                nxt[j] = q + 1
                tind[q] = i
                for u in range(b):
                    for v in range(b):
                        tdata[q, v, u] = data[k, u, v]


@njit(parallel=True, **JIT)
def _transpose_fill1(pptr, pind, data, rb, start, tind, tdata):
    # _transpose_fill for 1 x 1 blocks on flat data (4x faster than the block loops)
    for c in prange(rb.size - 1):
        nxt = start[c]
        for i in range(rb[c], rb[c + 1]):
            for k in range(pptr[i], pptr[i + 1]):
                j = pind[k]
                q = nxt[j]
                nxt[j] = q + 1
                tind[q] = i
                tdata[q] = data[k]


@njit(parallel=True, **JIT)
def _transpose_starts(cnt, tptr):
    # cnt[c, j] -> first position of chunk c's entries in column j of the transpose
    # (tptr[j] plus the entries of column j in the chunks before c), in place
    for j in prange(cnt.shape[1]):
        acc = tptr[j]
        for c in range(cnt.shape[0]):
            k = cnt[c, j]
            cnt[c, j] = acc
            acc += k


@njit(parallel=True, **JIT)
def _transpose_ptr(cnt, tptr):
    # tptr[j + 1] = entries of column j (cumulated after)
    for j in prange(cnt.shape[1]):
        s = 0
        for c in range(cnt.shape[0]):
            s += cnt[c, j]
        tptr[j + 1] = s


@register("cpu", "bsr_transpose", _F64 + [("complex128",), ("float32",), ("complex64",)])
def bsr_transpose(pptr, pind, data):
    """Canonical BSR of the transpose: ``(tptr, tind, tdata)``, block ``(j, i)`` =
    ``data[(i, j)]^T``; indices in the dtype of ``pptr``/``pind`` (int32 or int64), blocks
    in ``data``'s (the FP32 keys transpose stored operators: values moved, never rounded).
    The counts and starts per chunk of rows and column are compiled (NumPy's cumulative
    sum down a 2 x n array runs column by column: 8x slower)."""
    nb = pptr.size - 1
    nch = _nchunk(nb, 1)
    rb = np.searchsorted(pptr, np.linspace(0, pptr[-1], nch + 1)).astype(np.int64)
    rb[0], rb[-1] = 0, nb
    rb = np.minimum(np.maximum.accumulate(rb), nb)
    idx = pind.dtype
    cnt = np.zeros((nch, nb), dtype=idx)
    _transpose_count(pptr, pind, rb, cnt)
    tptr = np.empty(nb + 1, dtype=idx)
    tptr[0] = 0
    _transpose_ptr(cnt, tptr)
    np.cumsum(tptr, out=tptr)
    _transpose_starts(cnt, tptr)                     # cnt becomes the starts
    tind = np.empty(pind.size, dtype=idx)
    tdata = np.empty(data.shape, dtype=data.dtype)             # C order: reshape is a view
    if data.shape[1] == 1:
        _transpose_fill1(pptr, pind, data.reshape(-1), rb, cnt, tind, tdata.reshape(-1))
    else:
        _transpose_fill(pptr, pind, data, rb, cnt, tind, tdata)
    return tptr, tind, tdata


# ----------------------------------------------------------------- block size detection
@njit(parallel=True, **JIT)
def _block_capacity(indptr, indices, b, width, nchunk, max_excess):
    # sum over the distinct b x b blocks (I, J) holding a stored entry of width[I] width[J];
    # a chunk whose own excess (places - entries) passes max_excess >= 0 stops: the total
    # excess is at least any chunk's, so the answer "above nnz + max_excess" is exact
    m = indptr.size - 1
    nbr = (m + b - 1) // b
    nbc = width.size
    tot = np.zeros(nchunk, dtype=np.int64)
    stop = np.zeros(nchunk, dtype=np.bool_)
    for ch in prange(nchunk):
        mark = np.full(nbc, -1, dtype=np.int64)
        acc = 0
        first = ch * nbr // nchunk
        for I in range(first, (ch + 1) * nbr // nchunk):
            wi = width[I] if I < nbc else b
            for r in range(I * b, min(I * b + b, m)):
                for p in range(indptr[r], indptr[r + 1]):
                    J = indices[p] // b
                    if mark[J] != I:
                        mark[J] = I
                        acc += wi * width[J]
            if max_excess >= 0 and acc - (indptr[min(I * b + b, m)] - indptr[first * b]) > max_excess:
                stop[ch] = True
                break
        tot[ch] = acc
    if stop.any():
        return indptr[m] + max_excess + 1
    return tot.sum()


_block_capacity_serial = serial_twin(_block_capacity)


_INDEX = (np.dtype(np.int32), np.dtype(np.int64))


@register("cpu", "block_capacity", _F64)
def block_capacity(indptr, indices, ncols, b, max_excess=-1):
    """Places in the ``b x b`` blocks (the last block row / column ``ncols % b`` wide when
    ``b`` does not divide it) that hold a stored entry: ``nnz / capacity`` is the fill of
    the block-expanded pattern (``mpsolve.matrices.detect_block_size``).  With
    ``max_excess >= 0`` the count stops as soon as ``capacity - nnz`` is known to exceed
    it and returns ``nnz + max_excess + 1`` (a scalar matrix is rejected after a few
    per cent of its rows)."""
    nbc = -(-int(ncols) // b)
    width = np.empty(nbc, dtype=np.int64)
    width.fill(b)
    if ncols % b:
        width[-1] = ncols % b
    # int32 or int64 index arrays as they are (a compiled version for each), no copy
    if not (type(indptr) is np.ndarray and indptr.dtype in _INDEX):
        indptr = np.asarray(indptr, np.int64)
    if not (type(indices) is np.ndarray and indices.dtype in _INDEX):
        indices = np.asarray(indices, np.int64)
    m = indptr.size - 1
    if indices.size < PARALLEL_MIN:
        return int(_block_capacity_serial(indptr, indices, b, width, 1, int(max_excess)))
    return int(_block_capacity(indptr, indices, b, width, _nchunk(-(-m // b)),
                               int(max_excess)))


# ----------------------------------------------------------------- row statistics
#: The fields of ``row_stats``'s output, in order.
ROW_STATS = ("zero_diagonal", "tiny_diagonal", "dominant_rows", "max_abs", "min_abs_nonzero",
             "positive_diagonal", "max_row_length")


@njit(inline="always", **JIT)
def _stats_rows(lo, hi, indptr, indices, data, tiny, eps, out):
    zero = 0
    small = 0
    dom = 0
    amax = 0.0
    amin = np.inf
    pos = True
    longest = 0
    for i in range(lo, hi):
        s, e = indptr[i], indptr[i + 1]
        if e - s > longest:
            longest = e - s
        ad = 0.0
        rmax = 0.0
        rsum = 0.0
        diag_pos = False
        for k in range(s, e):
            v = data[k]
            a = np.float64(abs(v))
            if a > rmax:
                rmax = a
            if a > 0.0 and a < amin:
                amin = a
            rsum += a
            if indices[k] == i:
                ad = a
                diag_pos = v.real > 0 and v.imag == 0
        if rmax > amax:
            amax = rmax
        pos = pos and diag_pos
        if ad == 0.0:
            zero += 1
        elif ad <= tiny * rmax:
            small += 1
        # dominant up to the rounding of the row sum (a Laplacian's rows, dominant with
        # equality, must not flip with the summation order)
        if ad >= (rsum - ad) * (1.0 - 4.0 * eps * (e - s)):
            dom += 1
    out[0] += zero
    out[1] += small
    out[2] += dom
    out[3] = max(out[3], amax)
    out[4] = min(out[4], amin)
    out[5] = min(out[5], 1.0 if pos else 0.0)
    out[6] = max(out[6], longest)


@njit(parallel=True, **JIT)
def _row_stats_par(indptr, indices, data, tiny, eps, nchunk, part):
    n = indptr.size - 1
    for ch in prange(nchunk):
        _stats_rows(ch * n // nchunk, (ch + 1) * n // nchunk, indptr, indices, data, tiny, eps,
                    part[ch])


@njit(**JIT)
def _row_stats_ser(indptr, indices, data, tiny, eps, out):
    _stats_rows(0, indptr.size - 1, indptr, indices, data, tiny, eps, out)


@register("cpu", "row_stats", [("float32",), ("float64",), ("complex64",), ("complex128",)])
def row_stats(indptr, indices, data, tiny, eps):
    """One scan of a canonical CSR matrix for ``method="auto"``: the values of
    :data:`ROW_STATS` as an FP64 array -- the number of rows whose diagonal entry is zero
    (or not stored), is tiny (``0 < |a_ii| <= tiny max_j |a_ij|``), is dominant
    (``|a_ii| >= (sum_j |a_ij| - |a_ii|)(1 - 4 eps len_i)``); the largest and the smallest
    nonzero ``|a_ij|`` (``inf`` if none); 1 when every diagonal entry is real and positive,
    else 0; the longest row.  Rows in parallel chunks above ``PARALLEL_MIN`` entries."""
    init = np.array([0.0, 0.0, 0.0, 0.0, np.inf, 1.0, 0.0])
    n = indptr.size - 1
    if indices.size < PARALLEL_MIN or n < 2:
        out = init.copy()
        _row_stats_ser(indptr, indices, data, float(tiny), float(eps), out)
        return out
    nchunk = _nchunk(n)
    part = np.tile(init, (nchunk, 1))
    _row_stats_par(indptr, indices, data, float(tiny), float(eps), nchunk, part)
    return np.array([part[:, 0].sum(), part[:, 1].sum(), part[:, 2].sum(), part[:, 3].max(),
                     part[:, 4].min(), part[:, 5].min(), part[:, 6].max()])
