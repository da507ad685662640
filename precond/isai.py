"""ISAI: incomplete sparse approximate inverses (point version).

Anzt, Huckle, Braeckle, Dongarra, "Incomplete sparse approximate inverses for
parallel preconditioning", Parallel Computing 71 (2018), doi:10.1016/j.parco.2017.10.003;
the ``spd`` variant is the factorized sparse approximate inverse (FSAI) of
Kolotilina & Yeremin, SIAM J. Matrix Anal. Appl. 14 (1993).

``M`` (or its factors) has a sparsity pattern fixed in advance -- the pattern of
``A^k`` -- and each row solves one small dense *local system* independently of
the others; the set-up solves them in FP64 on the host, batched by size
(:mod:`mpsolve.precond._localsolve`).  ``M`` is stored in FP32 by default on the
device the preconditioner is set up for (:mod:`mpsolve.operator`) and applied as CSR
SpMVs with the casts fused into the kernel.  Point ISAI is Block-ISAI
(:mod:`.block_isai`) with ``b = 1``: both use :func:`isai_operators`.
"""
from __future__ import annotations

import time
import warnings
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

from mpsolve.backend import HOST_DEVICE, on_host, to_device, to_host
from mpsolve.operator import BSROperator, OperatorChain, SparseOperator

from ._localsolve import DEFAULT_MAX_LOCAL, local_solve, transpose_operator
from ._pattern import block_pattern, strong_extension, to_bsr, truncate_wide_rows
from ._util import PreconditionerWarning, check_count, rows_text, setup_device, wide_dtype
from .base import Preconditioner
from .ilu import is_symmetric, negative_diagonal, symmetry_rtol

__all__ = ["ISAI", "isai_operators"]

VARIANTS = ("auto", "general", "right", "spd", "lower", "upper", "ilu")
#: A row whose pattern of ``A^k`` (k > 1) has more unknowns than this keeps only that many,
#: the heaviest in ``|A|^k`` (its local system would cost O(width^3) and dominate the set-up).
NARROW_ABOVE = 128
#: Local systems wider than this (median over a sample of rows of ``A^2``) make the
#: default ``general`` pattern fall back from ``A^2`` to ``A``.
WIDE_ROWS = 128
_DEFAULT_POWER = {"general": 1, "right": 1, "spd": 1, "lower": 1, "upper": 1, "ilu": 1}
#: ``general``/``right`` with the default power keep the pattern of ``A`` unless the median,
#: over a sample of 256 rows, of the row residual ``||e_i - m_i A||_2`` of that inverse
#: exceeds this; then they are rebuilt on ``A^2``, kept where its median is lower (an
#: a-posteriori test of the pattern, as SPAI's adaptive one, Grote & Huckle 1997, but taken
#: once for the whole matrix).  On the
#: nonsymmetric SuiteSparse and generated matrices (GMRES(30) and BiCGSTAB, set-up and
#: solve timed) the pattern of ``A`` reached a solution sooner on all but a few of those
#: either pattern solves -- ``A^2``'s set-up and apply cost 1.1-20x more -- and its median
#: residual stayed at 0.45 or below on the PDE problems (0.53 on convection-diffusion at
#: Peclet 500, where both patterns take the same time); above 0.55 it failed (af23560:
#: 0.67 left, 0.59 right, no convergence in 5000 iterations against 259-420 on ``A^2``;
#: hor_131 0.74) or needed up to 20x ``A^2``'s iterations, more than Jacobi's (add20 0.69,
#: memplus 0.70 on the left).  A median misses what a few rows do: memplus on the right
#: (0.43) keeps ``A`` and needs 600 GMRES iterations to Jacobi's 350 (``A^2``: 27), though
#: in a third of ``A^2``'s time (``bench/results/isai_power.md``).
POWER_RESIDUAL = 0.5


def _triangle(C, part):
    """``tril(C)`` / ``triu(C)`` keeping explicit zeros (CSR, canonical)."""
    T = sp.tril(C, format="coo") if part == "lower" else sp.triu(C, format="coo")
    T = sp.csr_matrix((T.data.astype(wide_dtype(C.dtype)), (T.row, T.col)), shape=C.shape)
    T.sort_indices()
    return T


def _pad(C, b):
    """``C`` padded with an identity block to a multiple of ``b`` rows."""
    n = C.shape[0]
    extra = (-n) % b
    if extra == 0:
        return C
    P = sp.block_diag([C, sp.identity(extra)], format="csr")
    P.sort_indices()
    return P


def _store(pp, pi, data, n, storage, dtype, accumulate, what, device):
    """``M`` stored on ``device`` in ``dtype`` from its FP64 blocks ``data`` (host or
    device array: the demotion runs where the values are)."""
    nbr = pp.size - 1
    if storage == "csr":
        M = SimpleNamespace(indptr=np.asarray(pp, dtype=np.int32), data=data.reshape(-1),
                            indices=np.asarray(pi, dtype=np.int32), shape=(nbr, nbr))
        return SparseOperator(M, dtype=dtype, accumulate=accumulate, device=device, what=what)
    return BSROperator(pp, pi, data, n, dtype, accumulate, what, device=device)


def recorded(build, *args, **kwargs):
    """``(build(*args, **kwargs), caught)``: a set-up tried and perhaps discarded, its
    warnings recorded instead of shown -- the one kept says its own (:func:`replay`)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = build(*args, **kwargs)
    return got, caught


def replay(caught):
    """Show the warnings :func:`recorded` kept, as they were raised."""
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


#: Rows (or columns) whose largest entries span more than this are equilibrated before the
#: general ISAI is set up: the square root of the local systems' condition limit
#: (``1 / (1024 eps)``, :mod:`._localsolve`), so the scaling alone cannot take a local
#: system past the check.  Below it the set-up reads the matrix as it is (the ISAI of a
#: scaled matrix is the scaled ISAI in exact arithmetic; 1e-3..1e3 scalings were harmless).
SCALE_SPREAD = 2.0 ** 21


def equilibrated(C):
    """``(diag(r) C diag(c), (c, r))`` -- powers of two that bring the largest entry of
    every row, then of every column, into ``[1, 2)`` (the rule of LAPACK's ``dgeequb``, as
    :func:`~.ilut.equilibrate`), each side only where its lines' largest entries span more
    than :data:`SCALE_SPREAD` -- or ``(C, None)`` where neither does (one pass over the
    values for the rows, one for the columns).

    The left approximate inverse of ``D A E`` is ``E^-1 M D^-1`` in exact arithmetic, but
    not as computed: with rows and columns scaled by 1e-6..1e6, the local systems' condition
    checks sent hundreds of rows to the fallback and the pattern test to ``A^2``, and GMRES
    stalled at 1e-1 where Jacobi and ILU(0) converge."""
    from ._scaling import col_abs_max, pow2_inverse, row_abs_max

    n = C.shape[0]
    if C.nnz == 0 or n == 0:
        return C, None
    r = pow2_inverse(row_abs_max(C))
    bad_rows = r.max() > SCALE_SPREAD * r.min()
    if not bad_rows:
        r = np.ones(n)
    c = pow2_inverse(col_abs_max(C, r if bad_rows else None))
    if not c.max() > SCALE_SPREAD * c.min():
        if not bad_rows:
            return C, None
        c = np.ones_like(c)
    rows = np.repeat(np.arange(n), np.diff(C.indptr))
    S = sp.csr_matrix((C.data * (r[rows] * c[C.indices]), C.indices, C.indptr), shape=C.shape)
    S.has_sorted_indices = C.has_sorted_indices
    return S, (c, r)


def _fold_scale(data, pp, pi, b, c, r, device):
    """Blocks ``data`` of ``M_s`` (block pattern ``pp``, ``pi``) times ``c`` on the rows and
    ``r`` on the columns: ``diag(c) M_s diag(r)`` (padded unknowns: 1)."""
    nb = pp.size - 1
    pad = nb * b - c.size
    left = np.concatenate([c, np.ones(pad)]).reshape(nb, b)
    right = np.concatenate([r, np.ones(pad)]).reshape(nb, b)
    brow = np.repeat(np.arange(nb), np.diff(np.asarray(pp)))
    f = left[brow][:, :, None] * right[np.asarray(pi)][:, None, :]
    if not on_host(data):
        f = to_device(f, device)
    return data * f.reshape(data.shape)


def _one(C, b, variant, power, max_local, storage, dtype, accumulate, what, device, host,
         scale=None, negate=False, strong=False):
    """Operators of one (Block-)ISAI on ``C``: ``[M]`` or ``[G, G^T]`` (spd; ``[G, -G^T]``
    with ``negate``: ``C = -A`` for a negative definite ``A``), stored on
    ``device``; the set-up kernels (patterns, local solves) are those of the host device
    ``host``, the local solves those of ``device`` where it registers them (the GPU's:
    :mod:`._localsolve`).  ``stats["stage_times"]``: seconds of each stage (pattern,
    solve, excess, fallback, store).  ``scale = (c, r)``: ``C`` is ``diag(r) A diag(c)``
    and ``diag(c) M diag(r)`` (the approximate inverse of ``A``) is stored (powers of two:
    exact).  ``strong``: the pattern of ``A`` (``power`` 1) widened along its strong
    couplings where they run along lines (:func:`._pattern.strong_extension`;
    ``stats["strong_power"]``: the power of the strong graph, 0 where not widened)."""
    t0 = time.perf_counter()
    n = C.shape[0]
    Cp = _pad(C, b)
    if variant in ("lower", "upper"):
        Cp = _triangle(Cp, variant)
    aptr, aind, adata = to_bsr(Cp, b, device=host, copy=False)      # (read only)
    nb = aptr.size - 1
    part = {"general": "all", "spd": "lower", "lower": "lower", "upper": "upper"}[variant]
    ext = strong_extension(aptr, aind, adata, part, host) if strong and power == 1 \
        else None
    if ext is not None:
        pp, pi, strong_power = ext
    elif power == 1 and part == "all":  # the pattern of S + I: A's own, diagonal stored
        pp, pi, strong_power = aptr, aind, 0
    else:
        pp, pi = block_pattern(aptr, aind, nb, power, part, device=host)
        strong_power = 0
    narrowed = 0
    if power > 1:
        # a row whose pattern of A^k is very wide (a dense row or column of A spreads it
        # to thousands of unknowns: memplus has 225 rows above 512 in A^2, up to 6067)
        # would cost O(width^3): it keeps its NARROW_ABOVE heaviest entries of |A|^k
        pp, pi, narrowed = truncate_wide_rows(pp, pi, aptr, aind, adata, power,
                                              max(1, NARROW_ABOVE // b), device=host)
    t_pattern = time.perf_counter() - t0
    data, bad, stats = local_solve(aptr, aind, adata, pp, pi, variant,
                                   max_local=max_local, scalar_csr=Cp, device=device)
    t1 = time.perf_counter()
    if scale is not None:
        data = _fold_scale(data, pp, pi, b, *scale, device)
    ops = [_store(pp, pi, data, n, storage, dtype, accumulate, what, device)]
    if variant == "spd":                            # M = G^T G (G^H G for Hermitian A)
        ops.append(transpose_operator(ops[0], what + (" (-G^T)" if negate else " (G^T)"),
                                      conj=True, negate=negate))
    times = dict(pattern=t_pattern, **stats.pop("stage_times"),
                 store=time.perf_counter() - t1)
    stats = dict(stats, pattern_nnz_blocks=int(pi.size), narrowed_rows=narrowed,
                 strong_power=strong_power, stage_times=times)
    return ops, bad, stats


def isai_operators(C, b, variant, power, max_local, storage, dtype, accumulate, name,
                   device=HOST_DEVICE, scale=None, negate=False, strong=False):
    """Build the stored operators of (Block-)ISAI; shared by :class:`ISAI` and ``BlockISAI``.

    The set-up runs in FP64: patterns on the host (:func:`._util.setup_device` of
    ``device``), the batched local solves on ``device`` where it registers them (the
    GPU's gather, warp and blocked batched LU kernels; ``stats["solve_device"]``) and
    on the host otherwise; the operators are stored on ``device`` (demoted where the
    values are).  Returns ``(chain, fallback_rows, stats)``:
    ``chain(r, out)`` applies ``M``; ``fallback_rows`` are the (block) rows that took
    the fallback rule.  ``scale``: see :func:`_one` (``general`` only); ``negate``:
    ``C`` is ``-A`` and ``M = -(G^T G)`` (``spd`` only); ``strong``: see :func:`_one`.
    """
    host = setup_device(device)
    if variant == "ilu":
        from .ilu import ilu0_split

        L, U = ilu0_split(C, device=host)
        opsL, badL, stL = _one(L, b, "lower", power, max_local, storage, dtype, accumulate,
                               f"{name} of L", device, host)
        opsU, badU, stU = _one(U, b, "upper", power, max_local, storage, dtype, accumulate,
                               f"{name} of U", device, host)
        ops = opsL + opsU  # out = U_isai (L_isai r)
        bad = np.union1d(badL, badU)
        stats = {k: stL[k] + stU[k] for k in stL
                 if k not in ("stage_times", "solve_device")}
        stats["solve_device"] = stL["solve_device"]
        stats["stage_times"] = {k: stL["stage_times"][k] + stU["stage_times"][k]
                                for k in stL["stage_times"]}
    else:
        ops, bad, stats = _one(C, b, variant, power, max_local, storage, dtype, accumulate, name,
                               device, host, scale, negate, strong)
    if bad.size:
        unit = "block row" if b > 1 else "row"
        warnings.warn(
            f"{name}: {bad.size} local system(s) singular or ill-conditioned ({unit}s "
            f"{rows_text(bad)}); replaced by the fallback rule (least squares, then the "
            f"(block-)diagonal inverse -- see mpsolve.precond._localsolve); they are listed in "
            f".fallback_rows", PreconditionerWarning, stacklevel=4)
    return OperatorChain(ops), bad, stats


def _sample_rows(n, size=256):
    """The (block) rows the power tests read: ``size`` of ``n``, the same on every run."""
    return np.random.default_rng(0).choice(n, size=min(n, size), replace=False)


def _rows_of(op, rows):
    """Scalar ``rows`` of the stored operator ``op`` (CSR or BSR) as a SciPy CSR matrix with
    FP64 (complex128) values: only those rows' entries leave the device."""
    ptr = to_host(op.indptr).astype(np.int64)
    b = getattr(op, "b", 1)
    blk = rows // b
    lo, hi = ptr[blk], ptr[blk + 1]
    counts = hi - lo
    idx = np.repeat(lo - np.r_[0, np.cumsum(counts)[:-1]], counts) + np.arange(counts.sum())
    cols = to_host(op.indices[to_device(idx, op.device)]).astype(np.int64)
    vals = to_host(op.data[to_device(idx, op.device)])
    wide = np.result_type(vals.dtype, np.float64)
    if b > 1:                                  # block entries: row rows % b of each block
        sub = np.repeat(rows % b, counts)
        vals = vals[np.arange(idx.size), sub, :].reshape(-1)
        cols = (cols[:, None] * b + np.arange(b)).reshape(-1)
        counts = counts * b
    n, width = op.shape[1], (ptr.size - 1) * b   # (BSR: a trailing partial block's padding)
    M = sp.csr_matrix((vals.astype(wide), cols, np.r_[0, np.cumsum(counts)]),
                      shape=(rows.size, width))
    return M[:, :n] if width > n else M


def pattern_residual(C, op, scale=None):
    """Median over :func:`_sample_rows` of the row residual ``||e_i - (M C)[i, :]||_2`` of
    the stored left approximate inverse ``op`` of ``C`` (FP64 copy of its values).
    ``scale = (c, r)``: ``C`` is the equilibrated matrix and ``op`` stores ``diag(c) M
    diag(r)``, whose ``M`` is read back (the residual of the equilibrated matrix: no
    longer the scaling's)."""
    n = C.shape[0]
    rows = _sample_rows(n)
    M = _rows_of(op, rows)
    if scale is not None:
        c, r = scale
        M = sp.diags(1.0 / c[rows]) @ M @ sp.diags(1.0 / r)
    R = M @ C - sp.csr_matrix((np.ones(rows.size), rows, np.arange(rows.size + 1)),
                              shape=(rows.size, n))
    return float(np.median(np.sqrt(np.asarray(abs(R).power(2).sum(axis=1)).ravel())))


class _ISAIBase(Preconditioner):
    """Common parameter handling and apply of ISAI and Block-ISAI."""

    symmetric = False
    _variants = VARIANTS
    supports_complex = True
    _storage = "csr"

    def __init__(self, variant="auto", sparsity_power=None, dtype=None,
                 accumulate=None, max_local=DEFAULT_MAX_LOCAL):
        super().__init__(dtype)
        if variant not in self._variants:
            raise ValueError(f"variant={variant!r}: choose one of {list(self._variants)}")
        try:
            acc = None if accumulate is None else np.dtype(accumulate).name
        except TypeError:
            acc = "?"
        if acc not in (None, "float32", "float64"):
            raise ValueError(f"accumulate={accumulate!r}: use 'float32', 'float64' or None "
                             f"(FP64 sums)")
        sparsity_power = check_count(sparsity_power, "sparsity_power", what="an integer >= 1")
        max_local = check_count(max_local, "max_local", none_ok=False, what="an integer >= 1")
        self.variant = variant
        self._variant_request = variant
        self.variant_reason = "" if variant == "auto" else "requested"
        self.power_reason = ""
        self._power_request = None if sparsity_power is None else int(sparsity_power)
        self.sparsity_power = (_DEFAULT_POWER.get(variant) if sparsity_power is None
                               else int(sparsity_power))
        self._acc_request = acc
        self.accumulate = acc
        self.max_local = int(max_local)
        self.symmetric = variant == "spd"
        self.fallback_rows = np.zeros(0, dtype=np.int64)
        self.stats = {}
        self._chain = None

    def _resolve_power(self, A, b):
        """``(k, test)``: the power to build with, and whether the pattern of ``A`` is to
        be tested and enlarged to ``A^2`` if poor (:data:`POWER_RESIDUAL`).

        The caller's ``sparsity_power`` is used as given.  The default is ``1``; for
        ``general``/``right`` it is tested -- unless the rows of ``A^2`` are too wide for
        cheap local solves (3-D elasticity: 81 entries a row, 375 in ``A^2``: their
        local systems exceed the batched limit and the set-up cost explodes), decided
        from the ``A^2`` row sizes of a sample of 256 (block) rows: median above
        :data:`WIDE_ROWS`.
        """
        if self._power_request is not None:
            self.power_reason = "requested"
            rows = -(-A.shape[0] // max(b, 1))
            most = max(1, rows - 1)
            if self._power_request > most:
                # (S + I)^k grows with k and is every (block) row's reachable set from
                # k = nb - 1 on: a larger power builds the same pattern (after steps that
                # change nothing -- 2**40 of them never returned)
                self.power_reason = (f"requested {self._power_request}; {most} builds the "
                                     f"same pattern (A has {rows} (block) rows)")
                return most, False
            return self._power_request, False
        k = _DEFAULT_POWER[self.variant]
        self.power_reason = "default"
        if self.variant not in ("general", "right") or A.shape[0] == 0:
            return k, False
        P = sp.csr_matrix((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
        if b > 1:
            B = _pad(P, b).tobsr((b, b))
            P = sp.csr_matrix((np.ones(B.indices.size), B.indices, B.indptr),
                              shape=(B.shape[0] // b, B.shape[1] // b))
        rows = _sample_rows(P.shape[0])
        sizes = np.diff((P[rows] @ P).indptr) * b
        if np.median(sizes) > WIDE_ROWS:
            self.power_reason = (f"pattern of A: the rows of A^2 are too wide (median "
                                 f"{np.median(sizes):g} unknowns > {WIDE_ROWS})")
            return k, False
        return k, True

    def _resolve_variant(self, A):
        """The variant for ``variant="auto"``, chosen once per set-up and recorded in
        ``variant`` and ``variant_reason``:

        * symmetric ``A`` (pattern and values: :func:`~.ilu.is_symmetric`) -> ``spd``:
          ``M = G^T G`` is symmetric positive definite for SPD ``A``, safe under CG
          (and under PETSc's KSPCG); for complex ``A`` the test is ``A == A^H``
          (Hermitian; ``M = G^H G``), so a complex-symmetric ``A`` is not ``spd``;
        * a method that needs a symmetric ``M`` (``side="symmetric"``: CG, and PETSc's
          CG-like KSPs) -> ``spd`` whatever the symmetry test says: ``general`` is not
          symmetric, and on an ``A`` symmetric but for assembly noise above the test's
          tolerance (1e-11 relative on a 3-D jump problem) it broke CG down at the first
          iteration; a warning where ``A`` is not symmetric even to 1e-8 relative;
        * otherwise the approximate inverse of the side ``M`` is applied on:
          ``general`` (``M A ~ I``) for left preconditioning, ``right``
          (``A M ~ I``: the ISAI of ``A^T``, transposed) for right preconditioning
          (GMRES with ``side="right"``, BiCGSTAB, PETSc's FGMRES/FBCGS).
        """
        what = "Hermitian" if A.dtype.kind == "c" else "symmetric"
        requested = self._variant_request
        if requested not in ("auto", "spd"):
            return requested, "requested"
        if is_symmetric(A, self._setup_device):
            return "spd", "requested" if requested == "spd" else \
                f"auto: A is {what} (to {symmetry_rtol(A.dtype):g} relative)"
        cg = self._side == "symmetric"
        if requested == "auto" and not cg:
            variant = "right" if self._side == "right" else "general"
            return variant, f"auto: A is not {what}; {self._side} preconditioning"
        # spd for an A the test calls nonsymmetric: asked for, or for a method that needs a
        # symmetric M
        why = "requested" if requested == "spd" else f"auto: the method needs a {what} M"
        loose = max(1e-8, symmetry_rtol(A.dtype))
        if requested == "auto" and is_symmetric(A, self._setup_device, loose):
            return "spd", f"{why}; A is {what} to {loose:g} relative"
        # FSAI of A's lower triangle: a symmetric M for a nonsymmetric A -- said, as the
        # caller may have meant it (the symmetric part dominates) or not
        asked = "variant='spd'" if requested == "spd" else \
            f"variant='auto' under a method that needs a {what} M"
        warnings.warn(
            f"{type(self).__name__}({asked}): A is not {what}; M = G^T G is built from A's "
            f"lower triangle and is {what} (it approximates the inverse of no nonsymmetric "
            f"A); variant='auto' with GMRES or BiCGSTAB takes the approximate inverse of the "
            f"side M is applied on", PreconditionerWarning, stacklevel=6)
        return "spd", f"{why}; A is not {what}"

    def _resolve_accumulate(self, dtype):
        """The row sums' precision: the caller's, else FP64 whatever the storage -- the
        stored values read in their precision, the sums in FP64 registers, so ``M`` is one
        fixed linear operator, as Krylov methods other than the flexible ones assume
        (with FP32 sums SciPy's CGS gave NaN and PETSc's BiCGSTAB stopped at a true
        residual of 2e-3 on convection-diffusion; the apply costs the same on CSR, up to
        25% more on BSR with 3 x 3 blocks)."""
        if self._acc_request is not None:
            return self._acc_request
        return "float64"

    def _build(self, A, dtype, b):
        self.accumulate = self._resolve_accumulate(dtype)
        self.variant, self.variant_reason = self._resolve_variant(A)
        self.symmetric = self.variant == "spd"
        self.sparsity_power, test = self._resolve_power(A, b)
        name = type(self).__name__ + f"({self.variant})"
        # right: A M ~ I  <=>  M^T A^T ~ I: the left approximate inverse of A^T, transposed
        C = A
        if self.variant == "right":
            C = sp.csr_matrix(A.T)
            C.sort_indices()
        negate = self.variant == "spd" and negative_diagonal(A)
        if negate:
            # a symmetric A with a negative diagonal (negative definite, as -A is SPD, or
            # no definite A at all): the FSAI G of -A, whose local systems are positive
            # definite where -A is, and M = -(G^T G): negative definite, symmetric, CG's
            # preconditioner for a negative definite A (G of A itself had no Cholesky
            # factor in any row, and every row fell back to the diagonal)
            C = -A
            self.variant_reason += "; A has a negative diagonal: M = -(G^T G), G of -A"
        kind = "general" if self.variant == "right" else self.variant
        scale = None
        what = "||e_i - m_i A||" if kind == self.variant else "||e_i - A m_i|| (columns)"

        # FSAI's default pattern widened along line-like strong couplings (anisotropy)
        strong = kind == "spd" and self._power_request is None

        def build(k):
            return isai_operators(C, b, kind, k, self.max_local, self._storage, dtype,
                                  self.accumulate, name, device=self.device, scale=scale,
                                  negate=negate, strong=strong)

        def first_build():
            got, caught = recorded(build, self.sparsity_power)   # (said if kept)
            t0 = time.perf_counter()
            res = pattern_residual(C, got[0].ops[0], scale) if test else None
            return got, caught, res, time.perf_counter() - t0

        (chain, self.fallback_rows, self.stats), caught, res, t_test = first_build()
        if kind == "general" and (self.fallback_rows.size or (test and res > POWER_RESIDUAL)):
            # local systems that failed their check, or a poor inverse: where the rows or
            # columns are badly scaled (equilibrated), again on the equilibrated matrix --
            # a well-scaled matrix pays nothing for the test
            S, scale = equilibrated(C)
            if scale is not None:
                # (the stage "unscaled": the set-up and test of A as given, discarded)
                unscaled = sum(self.stats["stage_times"].values()) + t_test
                C = S
                (chain, self.fallback_rows, self.stats), caught, res, t_test = first_build()
                self.stats["stage_times"]["unscaled"] = unscaled
        wider = None
        if test and res > POWER_RESIDUAL:
            # A^2, kept only where it is better by the same test: on a central-difference
            # convection-diffusion matrix at Peclet 1000 its median residual was 1.52
            # against A's 1.07, and GMRES with it did not converge where A's took 235
            first = sum(self.stats["stage_times"].values()) + t_test
            t0 = time.perf_counter()
            wider, caught2 = recorded(build, 2)                 # (said if kept)
            res2 = pattern_residual(C, wider[0].ops[0], scale)
            if res2 < res:
                caught = caught2
                self.sparsity_power = 2
                self.power_reason = (f"A^2: the pattern of A left a median residual "
                                     f"{what} of {res:.2f} > {POWER_RESIDUAL} (A^2: "
                                     f"{res2:.2f})")
                chain, self.fallback_rows, self.stats = wider
                self.stats["stage_times"]["power_test"] = first + (
                    time.perf_counter() - t0 - sum(wider[2]["stage_times"].values()))
            else:
                self.power_reason = (f"pattern of A: its median residual {what} of "
                                     f"{res:.2f} > {POWER_RESIDUAL}, but A^2 did no better "
                                     f"({res2:.2f})")
                self.stats["stage_times"]["power_test"] = t_test + (time.perf_counter() - t0)
        if test and wider is None:
            self.power_reason = (f"pattern of A: median residual {what} "
                                 f"{res:.2f} <= {POWER_RESIDUAL}")
            self.stats["stage_times"]["power_test"] = t_test
        if self.stats.get("strong_power"):
            self.power_reason = (f"pattern of A with its strong couplings to the power "
                                 f"{self.stats['strong_power']} (they run along lines)")
        replay(caught)                          # the kept build's warnings only
        self.stats["power_reason"] = self.power_reason
        self.stats["equilibrated"] = scale is not None
        if self.variant == "right":
            chain = OperatorChain([transpose_operator(op, name) for op in chain.ops])
        self._chain = chain

    def apply(self, r, out):
        r = self._check_vectors(r, out)
        self._chain(r, out)  # out = M r (one SpMV, or two: G^T (G r) / U_isai (L_isai r))

    def _transpose_operator(self):
        """``M^T``: the chain of the transposed stored factors in reverse order."""
        return self._chain.transposed()

    def _linear(self):
        """Sparse products with FP64 row sums (``accumulate="float64"``), intermediates in
        ``out``'s dtype: linear; FP32 row sums: not (:meth:`Preconditioner.linear_apply`)."""
        return self._chain is not None and all(op.accumulate == "float64"
                                               for op in self._chain.ops)

    def fusable(self):
        """One or two CSR products (:meth:`Preconditioner.fusable`); ``None`` for BSR
        storage (block size above 1)."""
        ops = [] if self._chain is None else self._chain.ops
        if not 1 <= len(ops) <= 2 or not all(isinstance(op, SparseOperator) for op in ops):
            return None
        modes = {op._mode for op in ops}
        if len(modes) != 1:
            return None
        return "csr", tuple((op.indptr, op.indices, op.data) for op in ops), modes.pop()
    def _block_operator(self):
        return self._chain            # Z = M R: one SpMM per stored factor

    @property
    def nbytes(self):
        return self._chain.nbytes if self._chain is not None else 0

    def operators(self):
        """The stored factors as SciPy CSR matrices with FP64 values, in the order applied.

        ``[M]`` for ``general``/``lower``/``upper``; ``[G, G^T]`` for ``spd``
        (``M = G^T G``); ``[L_isai, U_isai]`` for ``ilu`` (``M = U_isai L_isai``).
        """
        self._check_ready()
        return [sp.csr_matrix(op.to_scipy()) for op in self._chain.ops]

    def to_sparse(self):
        """``M`` itself as a SciPy CSR matrix (FP64 copy of the stored values)."""
        ops = self.operators()
        M = ops[0]
        for F in ops[1:]:
            M = F @ M
        return sp.csr_matrix(M)


class ISAI(_ISAIBase):
    """Incomplete sparse approximate inverse ``M ~ A^{-1}`` on a fixed pattern.

    Parameters
    ----------
    variant : {"auto", "general", "right", "spd", "lower", "upper", "ilu"}
        * ``"auto"`` (default) -- chosen from ``A`` at set-up (``variant`` and
          ``variant_reason`` record the choice): ``"spd"`` when ``A`` is symmetric,
          so ``M`` is SPD and safe under CG, and under CG always (``side="symmetric"``);
          otherwise the approximate inverse of the side the solver applies ``M`` on:
          ``"general"`` for left, ``"right"`` for right preconditioning (GMRES
          ``side="right"``, BiCGSTAB, PETSc's FGMRES).
        * ``"general"`` -- left approximate inverse ``M A ~ I`` on the pattern of
          ``A^k``; row ``i`` with columns ``J_i`` solves
          ``M[i, J_i] A[J_i, J_i] = e_i^T``.
        * ``"right"`` -- right approximate inverse ``A M ~ I``: the ``general`` ISAI of
          ``A^T``, transposed (columns of ``M`` on the pattern of ``(A^T)^k``).
        * ``"spd"`` -- factorized (FSAI): ``G`` lower triangular on the pattern of
          ``tril(A^k)``, ``A[J_i, J_i] g = e_last``, ``g /= sqrt(g_last)`` (so
          ``diag(G A G^T) = 1``); ``M = G^T G`` is SPD for SPD ``A`` and is applied
          as two SpMVs.  ``symmetric`` is True: for CG.
        * ``"lower"`` / ``"upper"`` -- the triangular-inverse operators: ``M ~ T^{-1}``
          for ``T = tril(A)`` / ``triu(A)`` (pass a triangular factor, e.g. ILU(0)'s
          ``L`` or ``U`` from :meth:`ILU0.factors`), on the pattern of ``T^k``.
          The local systems are triangular.
        * ``"ilu"`` -- both combined: ILU(0) of ``A`` (``A ~ L U``) and
          ``M = U_isai L_isai ~ U^{-1} L^{-1}``, i.e. ILU(0) with its two
          sequential triangular solves replaced by two parallel SpMVs.
    sparsity_power : int, optional
        ``k`` of the pattern ``A^k`` (of ``T^k`` for the triangular variants).
        Default 1; for ``spd`` widened along strong couplings that run along lines (an
        anisotropic diffusion: :func:`._pattern.strong_extension`, the powers of the
        strong graph joined to ``A``'s pattern, at most 2.5 times its entries; CG
        iterations 129 -> 59 on ``anisotropic3d:48``; ``stats["strong_power"]``); tested
        for ``general``/``right``: where the inverse on the pattern of
        ``A`` leaves the sampled rows of ``M A`` far from the identity (median
        ``||e_i - m_i A||_2`` above :data:`POWER_RESIDUAL` = 0.5, over 256 rows) it is
        rebuilt on ``A^2``, kept where its median residual is lower -- unless the rows of
        ``A^2`` are too wide for cheap local solves (median over a sample above
        ``WIDE_ROWS = 128``).  The value used is in
        ``sparsity_power`` after set-up, the reason in ``power_reason`` (and
        ``stats["power_reason"]``; the test's cost in ``stats["stage_times"]["power_test"]``,
        the whole first set-up where it was rebuilt).  On PDE problems the pattern of
        ``A`` reaches a solution sooner (a set-up and apply several times cheaper for
        10-40% more iterations); on circuit-like matrices (add20, memplus, af23560) it
        can be worse than Jacobi, and the test moves them to ``A^2``.
    dtype : {"float32", "float64"} or None
        Storage precision of ``M`` (FP32 when set up on its own); the set-up
        always runs in FP64 and the values are range-checked (``demote``).
    accumulate : {"float32", "float64"} or None
        Accumulator of the apply SpMVs; default FP64 for any storage (the FP32 values read
        as stored, the row sums in FP64): ``M`` is then a fixed linear operator, as every
        non-flexible Krylov method (SciPy's, PETSc's) assumes.  ``"float32"``: a pure FP32
        SpMV, linear only to FP32 rounding (fine under mpsolve's solvers, which check the
        true residual and use flexible GMRES for it).
    max_local : int
        Largest local system solved in the batched path (default 256); longer
        rows take the (slower, still exact) excess path.

    Attributes
    ----------
    fallback_rows : ndarray of int
        Rows whose local system was singular or ill-conditioned and were replaced
        by the fallback rule (least squares over the columns the row's rows
        touch, then the inverse diagonal); a :class:`PreconditionerWarning` is
        issued when it is not empty.
    stats : dict
        Number of batched groups, batched and excess rows, pattern size.
    nbytes : int
        Bytes of the stored operators (and apply scratch vectors, once used).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from mpsolve.precond import ISAI
    >>> A = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(6, 6)).tocsr()
    >>> M = ISAI("spd", dtype="float64").setup(A)
    >>> G = M.operators()[0]
    >>> bool(np.allclose((G @ A @ G.T).diagonal(), 1.0))
    True
    >>> r = np.ones(6)
    >>> out = np.empty(6)
    >>> M.apply(r, out)
    >>> bool(np.allclose(out, M.to_sparse() @ r))
    True
    """

    name = "isai"

    def _setup(self, A, dtype):
        self._build(A, dtype, 1)
