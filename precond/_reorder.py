"""MC64-style maximum-product transversal with scaling, and a preconditioner wrapper that
applies any mpsolve preconditioner to the permuted and scaled matrix.

Zero and tiny diagonal entries defeat ILU(0) (zero pivot), Jacobi and ISAI (singular local
systems) on circuit, chemical-process and MHD matrices (west0479, rajat19, mhd4800a, ...).
Duff and Koster's MC64 (job 5: *maximum product transversal*; Duff & Koster, "On algorithms
for permuting large entries to the diagonal of a sparse matrix", SIAM J. Matrix Anal. Appl.
22(4), 2001, doi:10.1137/S0895479899358443) finds a row permutation that puts large entries
on the diagonal, and a row and column scaling that makes them 1:

1. costs ``c_ij = log a_j - log|a_ij|`` on the nonzeros, ``a_j = max_k |a_kj|`` (so
   ``c_ij >= 0``); a perfect matching ``sigma`` (row ``i`` -> column ``sigma(i)``) of minimum
   total cost maximises ``prod_i |a_{i sigma(i)}|``.  It is SciPy's
   :func:`scipy.sparse.csgraph.min_weight_full_bipartite_matching` (LAPJVsp), here on the
   costs ``c_ij + 1`` (every edge positive, so an explicit zero cost is not mistaken for a
   missing edge; a constant added to every edge changes every perfect matching's cost by
   ``n``, so the optimum is the same).
2. SciPy gives no dual variables, so they are computed afterwards: the assignment problem's
   dual is ``max sum u_i + sum v_j`` subject to ``u_i + v_j <= c_ij``, and complementary
   slackness on the optimal matching fixes ``v_j = c_{k j} - u_k`` for the row ``k`` matched
   to ``j``.  The remaining constraints become difference constraints on ``u`` alone,
   ``u_i <= u_k + (c_ij - c_kj)`` for every nonzero ``(i, j)``, ``k = sigma^-1(j)``: a
   shortest-path problem whose edges ``k -> i`` have weight ``c_ij - c_kj``, without a
   negative cycle because the matching is optimal (a negative cycle would be an augmenting
   cycle that lowers the cost).  ``u = `` the distances from a virtual source joined to
   every row by a 0 edge, by Bellman--Ford sweeps (vectorised; as many sweeps as the
   longest shortest path has edges).  Then ``u_i + v_j <= c_ij`` with equality on the
   matching.
3. scalings ``r_i = exp(u_i)``, ``s_j = exp(v_j) / a_j``: ``|a_ij| r_i s_j =
   exp(u_i + v_j - c_ij) <= 1`` with equality on the matching.  With ``perm[j] =
   sigma^-1(j)`` (the row matched to column ``j``) the matrix
   ``B = diag(r[perm]) A[perm, :] diag(s)`` has ``|b_jj| = 1`` and ``|b_ij| <= 1``.

What :func:`mc64` guarantees in floating point: ``|b_jj| == 1`` exactly (the rounding of
the exponentials on the diagonal is folded into ``r`` and the diagonal divided by its own
modulus, which is exact), and ``|b_ij| <= exp(delta) (1 + 4 eps)`` with ``delta =
DUAL_SLACK eps max|w|``, ``max|w| <= ln(max|a| / min|a|)``: the duals meet their
constraints up to that slack, so that rounding in the path sums is not taken for a negative
cycle.  On the six zero-diagonal SuiteSparse matrices the largest ``|b_ij|`` is at most
``1 + 32 eps``.

Solving with the reordered system: ``A = P^T Dr^-1 B Dc^-1`` (``(P r)_j = r_perm[j]``,
``Dr = diag(r[perm])``, ``Dc = diag(s)``), so ``A^-1 = Dc B^-1 Dr P`` and a preconditioner
``M_B ~ B^-1`` gives ``M = Dc M_B Dr P ~ A^-1`` -- the user's ``A``, ``b`` and ``x`` are
never permuted or scaled, only the preconditioner's input and output are
(:class:`Reordered`).
"""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_bipartite_matching, min_weight_full_bipartite_matching

from mpsolve.backend import array_module, to_device

from ._util import ThreadBuffers, empty_lines_text, rows_text
from .base import Preconditioner

__all__ = ["mc64", "Reordering", "Reordered", "StructurallySingularError", "REORDERINGS"]

#: Names accepted by ``reorder=``.
REORDERINGS = ("mc64",)


#: The duals are settled once no sweep improves a distance by more than this many units of
#: ``eps * max|w|`` (a cycle of weight -1e-16 made by rounding is not a negative cycle).
DUAL_SLACK = 8


class StructurallySingularError(ValueError):
    """``A`` has no perfect matching: no permutation gives a zero-free diagonal (``A`` is
    singular for every value of its nonzeros).  The message names unmatched rows/columns."""


class Reordering:
    """The result of :func:`mc64`: ``B = diag(row_scale[perm]) A[perm, :] diag(col_scale)``.

    Attributes
    ----------
    perm : ndarray of int64
        ``perm[j]`` is the row of ``A`` placed at row ``j`` (matched to column ``j``).
    row_scale, col_scale : ndarray of float64
        ``r`` (indexed by the rows of ``A``) and ``s`` (by its columns).
    matrix : scipy.sparse.csr_matrix
        ``B`` (FP64, canonical CSR; explicit zeros of ``A`` dropped).
    time : float
        Seconds the matching, the duals and the scaling took.
    sweeps : int
        Bellman--Ford sweeps the duals took.
    rotations : int
        Negative cycles cancelled to make the coarse matching exactly optimal.
    """

    def __init__(self, perm, row_scale, col_scale, matrix, seconds, sweeps, rotations=0):
        self.rotations = rotations
        self.perm = perm
        self.row_scale = row_scale
        self.col_scale = col_scale
        self.matrix = matrix
        self.time = seconds
        self.sweeps = sweeps


def _structural_error(P):
    """The StructurallySingularError for a pattern ``P`` without a perfect matching."""
    n = P.shape[0]
    match = maximum_bipartite_matching(P, perm_type="column")   # row i -> column, or -1
    rows = np.flatnonzero(match < 0)
    cols = np.setdiff1d(np.arange(n), match[match >= 0])
    empty = empty_lines_text(P)
    what = f" ({empty})" if empty else ""
    return StructurallySingularError(
        f"mc64: A is structurally singular: a maximum matching of its nonzeros covers "
        f"{n - rows.size} of {n} rows; rows {rows_text(rows)} cannot be matched to columns "
        f"{rows_text(cols)}{what}.  No permutation gives a zero-free diagonal and A is "
        "singular whatever its values: check the assembly of A")


def _pred_cycle(n, pred_edge, src):
    """The cycles of the predecessor graph (``v``'s predecessor: ``src[pred_edge[v]]``; -1:
    the virtual source), all their edges in one array, or None.  Pointer doubling finds the
    nodes ``p^(2^k)(v)``, ``2^k > n``, which lie on cycles; a walk from each lists its cycle.
    The predecessor graph is functional, so its cycles are vertex-disjoint."""
    p = np.append(np.where(pred_edge >= 0, src[np.maximum(pred_edge, 0)], n), n)
    q = p
    for _ in range(int(np.ceil(np.log2(n + 2))) + 1):
        q = q[q]
    starts = np.unique(q[:n])
    starts = starts[starts != n]
    if not starts.size:
        return None
    seen = np.zeros(n, bool)
    edges = []
    for u in starts.tolist():
        if seen[u]:
            continue
        v = u
        while True:
            seen[v] = True
            e = int(pred_edge[v])
            edges.append(e)
            v = int(src[e])
            if v == u:
                break
    return np.array(edges, np.int64)


def _bellman_ford(n, src, dst, w, check_every=None, d0=None, keep=False):
    """Shortest distances ``d`` from a virtual source (0 edges to every node) over the
    edges ``src -> dst`` of weight ``w``: ``d = 0``, then ``d[dst] = min(d[dst], d[src] + w)``
    per sweep, until nothing changes by more than the rounding of the weights
    (``DUAL_SLACK`` units of ``eps max|w|``).  ``d0`` (instead of 0): a warm start -- the
    relaxation then settles on the largest feasible ``d <= d0``, which is all the duals
    need (cycle cancelling restarts from the last round's ``d``).

    Returns ``(d, sweeps, cycle)``: ``d`` settled and ``cycle`` None, or ``d`` None on a
    negative cycle, with ``cycle`` the indices of its edges when it was found in the
    predecessor graph (checked every ``check_every`` sweeps: a cycle there is always a
    negative one; Tarjan's observation behind negative-cycle detection in Bellman--Ford).
    ``keep=True`` appends the last distances (for a warm start)."""
    slack = DUAL_SLACK * np.finfo(np.float64).eps * max(1.0, float(np.abs(w).max(initial=0)))
    order = np.argsort(dst, kind="stable")
    src_o, dst_o, w_o = src[order], dst[order], w[order]
    d = np.zeros(n) if d0 is None else d0.copy()
    if not dst.size:
        return (d, 1, None) + ((d,) if keep else ())
    heads = np.flatnonzero(np.r_[True, dst_o[1:] != dst_o[:-1]])
    targets = dst_o[heads]
    seg = np.repeat(np.arange(heads.size), np.diff(np.r_[heads, dst_o.size]))
    pred_edge = np.full(n, -1, np.int64)
    check_every = check_every or n + 1
    for sweep in range(1, n + 2):
        val = d[src_o] + w_o
        cand = np.minimum.reduceat(val, heads)
        better = cand < d[targets] - slack
        if not better.any():
            return (d, sweep, None) + ((d,) if keep else ())
        idx = np.flatnonzero((val == cand[seg]) & better[seg])     # the argmin edges
        segs, first = np.unique(seg[idx], return_index=True)
        pred_edge[targets[segs]] = idx[first]
        d[targets[better]] = cand[better]
        if sweep % check_every == 0 or sweep == n + 1:
            cyc = _pred_cycle(n, pred_edge, src_o)
            if cyc is not None:
                return (None, sweep, order[cyc]) + ((d,) if keep else ())
    # a negative cycle: the matching is not optimal for these costs
    return (None, n + 1, None) + ((d,) if keep else ())


#: Resolutions of the costs handed to the matching: SciPy's LAPJVsp takes seconds to
#: minutes on costs with many distinct values (mhd4800a, n = 4800: 23 s on the float
#: costs, 4 s rounded to 2^-20, 0.03 s to 2^-6), so the matching is found on
#: ``round(c q) + 1`` for the coarsest ``q`` first.  A matching optimal for the rounded
#: costs may not be optimal for the exact ones; the Bellman--Ford sweeps of the exact duals
#: then meet a negative cycle of the exact costs -- an alternating cycle along which the
#: matching is rotated (cycle cancelling: each rotation lowers the exact cost), and the
#: duals are sought again.  Only if that does not settle in ``MAX_ROTATIONS`` rotations is
#: the matching recomputed on the exact costs (``None``).  The duals are always those of
#: the exact costs, so the scaled matrix has entries <= 1 as if the matching had used them.
QUANTA = (2.0 ** 6, None)
#: Rotations (negative cycles cancelled) tried before matching the exact costs instead.
MAX_ROTATIONS = 1000
#: The predecessor graph is searched for (negative) cycles every this many sweeps (on
#: mhd4800a, all the cycles found cancelled at once: every 2nd sweep 0.64 s, 59 rounds;
#: one cycle per round, every 16th sweep: 11 s, 710 rounds; the exact-cost matching: 23 s).
CYCLE_CHECK = 2


def _match_and_duals(P, rows, cols, cost, q):
    """The matching on the costs rounded to ``1/q`` (exact for ``q=None``), made optimal for
    the exact costs by cycle cancelling, and the exact duals ``u``.  Returns ``(perm,
    matched, u, sweeps, rotations)`` with ``u`` None when it did not settle."""
    n = P.shape[0]
    W = P if q is None else sp.csr_matrix((np.round(cost * q) + 1.0, P.indices, P.indptr),
                                          shape=P.shape)
    try:
        r_ind, c_ind = min_weight_full_bipartite_matching(W)
    except ValueError:
        raise _structural_error(P) from None
    perm = np.empty(n, np.int64)
    perm[c_ind] = r_ind                                      # column j <- row perm[j]
    sweeps = 0
    matched = np.empty(n)
    d = None
    for rotation in range(MAX_ROTATIONS + 1):
        # c of the matched entry in each column j: c_{perm[j], j}
        is_match = perm[cols] == rows
        matched[cols[is_match]] = cost[is_match]
        # u_i <= u_k + (c_ij - c_kj), k = perm[j]: edges k -> i (the matched ones are 0 loops)
        off = np.flatnonzero(~is_match)
        via = cols[off]
        u, s, cyc, d = _bellman_ford(n, perm[via], rows[off], cost[off] - matched[via],
                                     check_every=CYCLE_CHECK, d0=d, keep=True)
        sweeps += s
        if u is not None or cyc is None:
            return perm, matched, u, sweeps, rotation
        # each edge k -> i of a cycle came from a_ij, j = sigma(k): row i takes column j
        # (the cycles are vertex-disjoint: all of them are cancelled at once)
        perm[via[cyc]] = rows[off][cyc]
    return perm, matched, None, sweeps, MAX_ROTATIONS


def mc64(A) -> Reordering:
    """Maximum-product transversal and scaling of ``A`` (MC64 job 5; see module docstring).

    Parameters
    ----------
    A : sparse matrix (any SciPy format) or ndarray, square

    Returns
    -------
    Reordering
        ``B = diag(r[perm]) A[perm, :] diag(s)`` with ``|b_jj| = 1`` and every ``|b_ij| <= 1``.

    Raises
    ------
    StructurallySingularError
        When no permutation gives a zero-free diagonal (the message names rows and columns
        left unmatched).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from mpsolve.precond import mc64
    >>> A = sp.csr_matrix(np.array([[0.0, 4.0], [2.0, 1.0]]))
    >>> R = mc64(A)
    >>> R.perm.tolist(), np.abs(R.matrix.diagonal()).tolist()
    ([1, 0], [1.0, 1.0])
    """
    t0 = time.perf_counter()
    C = sp.csr_matrix(A, dtype=np.result_type(A.dtype, np.float64), copy=True)  # or complex128
    C.sum_duplicates()
    C.eliminate_zeros()
    C.sort_indices()
    n = C.shape[0]
    if C.shape != (n, n):
        raise ValueError(f"mc64: A must be square, got shape {C.shape}")
    if not np.isfinite(C.data).all():
        raise ValueError("mc64: A has NaN or Inf entries")
    rows = np.repeat(np.arange(n), np.diff(C.indptr))
    cols = C.indices.astype(np.int64)
    mag = np.log(np.abs(C.data))
    colmax = np.full(n, -np.inf)
    np.maximum.at(colmax, cols, mag)
    cost = colmax[cols] - mag                                # c_ij = log a_j - log|a_ij| >= 0
    P = sp.csr_matrix((cost + 1.0, C.indices, C.indptr), shape=(n, n))
    if (np.diff(C.indptr) == 0).any() or np.unique(C.indices).size < n:
        raise _structural_error(P)                           # an empty row or column
    for q in QUANTA:
        perm, matched, u, sweeps, rotations = _match_and_duals(P, rows, cols, cost, q)
        if u is not None:
            break
    v = matched - u[perm]                                    # v_j = c_kj - u_k
    with np.errstate(over="ignore", under="ignore"):
        r = np.exp(u)
        s = np.exp(v - colmax)                               # s_j = exp(v_j) / a_j
    if not (np.all((r > 0) & (r < np.inf)) and np.all((s > 0) & (s < np.inf))):
        # entries near the subnormal range (1e-320: 1 / |a_ij| overflows) or spanning more
        # than FP64 holds: the scaling factors do not exist in FP64
        small = float(np.abs(C.data).min())
        raise ValueError(f"mc64: the scaling that brings A's diagonal to 1 is not "
                         f"representable in FP64 (entries down to {small:.1e}, up to "
                         f"{float(np.abs(C.data).max()):.1e}): scale A into FP64's normal "
                         "range first")
    B = sp.csr_matrix(sp.diags(r[perm]) @ C[perm, :] @ sp.diags(s))
    # |b_jj| = exp(0) up to the rounding of exp and the products: fold that into the row
    # scale and divide exactly, so every |b_jj| == 1 to the bit (x / |x| is exact)
    d = np.abs(B.diagonal())
    r[perm] /= d
    B = sp.csr_matrix(sp.diags(1.0 / d) @ B)
    # (complex A: matched on |a_ij|; the diagonal of B becomes b_jj / |b_jj|, unit modulus)
    B.data[B.indices == np.repeat(np.arange(n), np.diff(B.indptr))] = np.sign(B.diagonal())
    B.sort_indices()
    return Reordering(perm, r, s, B, time.perf_counter() - t0, sweeps, rotations)


class Reordered(Preconditioner):
    """A preconditioner applied to the MC64-permuted and scaled matrix (see module docstring).

    ``M = Dc M_B Dr P``: ``out = s * M_B(r[perm] * row_scale[perm])`` with ``M_B`` the
    ``inner`` preconditioner set up on ``B = Dr P A Dc``.  The permutation and scalings are
    applied in FP64 (their range can exceed FP32's on badly scaled matrices); ``M_B`` in its
    own storage precision.

    Parameters
    ----------
    inner : Preconditioner
        Not set up yet; it is set up on ``B``.
    reorder : {"mc64"}
    reordering : Reordering, optional
        A :func:`mc64` result of the *same* matrix to reuse (only its shape is checked):
        several preconditioners tried on one matrix pay for the matching once.

    Attributes
    ----------
    reordering : Reordering
        After setup: ``perm``, scalings and ``B``.
    stats : dict
        ``reorder_time`` (seconds), ``dual_sweeps``, and the inner preconditioner's stats.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from mpsolve.precond import ILU0, Reordered
    >>> A = sp.csr_matrix(np.array([[0.0, 4.0, 0.0], [2.0, 1.0, 0.0], [0.0, 1.0, 3.0]]))
    >>> M = Reordered(ILU0(dtype="float64")).setup(A)     # ILU(0) of A has a zero pivot
    >>> bool(np.allclose(M.matvec(A @ np.ones(3)), 1.0))
    True
    """

    symmetric = False

    def __init__(self, inner, reorder="mc64", dtype=None, reordering=None):
        if not isinstance(inner, Preconditioner):
            raise TypeError(f"Reordered: inner must be an mpsolve preconditioner, got "
                            f"{type(inner).__name__}")
        if reorder not in REORDERINGS:
            raise ValueError(f"Reordered: reorder={reorder!r}: use one of {list(REORDERINGS)} "
                             "(without a reordering, use the inner preconditioner itself)")
        super().__init__(dtype if dtype is not None else inner._dtype_request)
        self.inner = inner
        self.reorder = reorder
        self.reordering = None
        self._given = reordering
        self.stats = {}
        self._buf = ThreadBuffers()

    @property
    def name(self):
        return f"{self.inner.name}+{self.reorder}"

    def __getattr__(self, key):          # variant, block_size, ... of the inner one
        if key in ("variant", "block_size", "sparsity_power"):
            return getattr(self.__dict__.get("inner"), key, None)
        if key == "variant_reason":
            return getattr(self.__dict__.get("inner"), key, "") or ""
        raise AttributeError(key)

    def _setup(self, C, dtype):
        R = self._given
        if R is None:
            R = mc64(C)
        elif R.matrix.shape != C.shape:
            raise ValueError(f"reordering is for a {R.matrix.shape[0]}x{R.matrix.shape[1]} "
                             f"matrix, but A is {C.shape[0]}x{C.shape[1]}")
        self.reordering = R
        self.inner.reorder_hint = False            # (its errors: no "reorder='mc64'" again)
        self.inner.setup_canonical(R.matrix, dtype=dtype, device=self.device, side=self._side)
        xp = array_module(self.device)
        self._perm = to_device(R.perm, self.device)
        self._dr = to_device(R.row_scale[R.perm], self.device)
        self._dc = to_device(R.col_scale, self.device)
        self._xp = xp
        self._buf = ThreadBuffers()
        self.stats = {"reorder": self.reorder, "reorder_time": R.time,
                      "dual_sweeps": R.sweeps, **dict(getattr(self.inner, "stats", {}) or {})}

    def _linear(self):
        """The permutation is exact and the scalings are FP64 products: linear where the
        inner preconditioner is on FP64 vectors (:meth:`Preconditioner.linear_apply`)."""
        wide = np.result_type(self.storage_dtype, np.float64)
        return self.inner.linear_apply(wide, wide)

    def apply(self, r, out):
        r = self._check_vectors(r, out)
        xp = self._xp
        n = r.shape[0]
        t = self._buf.d.get("t")
        if t is None:                            # FP64, complex128 for a complex M
            wide = np.result_type(self.storage_dtype, np.float64)
            t = self._buf.d["t"] = xp.empty(n, wide)
            self._buf.d["z"] = xp.empty(n, wide)
        z = self._buf.d["z"]
        if r.dtype == t.dtype:
            xp.take(r, self._perm, out=t)        # t = P r
        else:                                    # gather in r's dtype, then widen
            g = self._buf.d.get(r.dtype.char)
            if g is None:
                g = self._buf.d[r.dtype.char] = xp.empty(n, r.dtype)
            xp.take(r, self._perm, out=g)
            t[:] = g                             # t = P r
        t *= self._dr                            # t = Dr P r
        self.inner.apply(t, z)                   # z = M_B t
        xp.multiply(z, self._dc, out=out)        # out = Dc z

    def _transpose_operator(self):
        """``M = D_c M_B D_r P`` (``P v = v[perm]``), so ``M^T = P^T D_r M_B^T D_c``: the
        inner preconditioner's transpose between the scalings, then a gather by the inverse
        permutation."""
        xp, n = self._xp, self.shape[0]
        inv = xp.empty(n, np.int64)
        inv[self._perm] = xp.arange(n)
        dr, dc, inner = self._dr, self._dc, self.inner
        buf = ThreadBuffers()
        wide = np.result_type(self.storage_dtype, np.float64)

        def f(r, out):
            b = buf.d.get("T")
            if b is None:
                b = buf.d["T"] = (xp.empty(n, wide), xp.empty(n, wide))
            t, z = b
            t[:] = r
            t *= dc                                  # t = D_c r
            inner.apply_transpose(t, z)              # z = M_B^T t
            z *= dr
            xp.take(z, inv, out=t)                   # t = P^T D_r z
            out[:] = t

        return f

    @property
    def nbytes(self) -> int:
        shape = self.__dict__.get("_shape")      # (None before set-up: shape would raise)
        return int(self.inner.nbytes) + 3 * 8 * (shape[0] if shape else 0)

    def __repr__(self):
        return f"<Reordered[{self.reorder}] {self.inner!r}>"
