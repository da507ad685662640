"""ILU(0): incomplete LU factorization on the pattern of ``A`` -- the preconditioner
PETSc and SciPy users reach for first, and the one (Block-)ISAI competes with.

``A ~ L U`` with ``L`` unit lower triangular and ``U`` upper triangular, both
restricted to the pattern of ``A`` (Saad, *Iterative Methods for Sparse Linear
Systems*, 2nd ed., Algorithm 10.4, IKJ variant on sorted CSR, with a dense work row
as PETSc's numeric factorization).  The factorization runs in FP64; the factors are
stored in ``dtype`` (FP32 by default) as ``L`` and ``D^{-1} U`` and applied by two
sequential sweeps that carry each row's sum in FP64 (forward with ``L``, backward
with ``D^{-1} U`` and ``1/diag(U)``).  Optionally one diagonal block per thread.
Complex ``A``: the factorization runs in complex128, the factors are stored in
complex64 (``dtype="float32"``) or complex128, the sums carried in complex128.

The factorization and the layout run on the host through the registry's set-up
kernels (``diag_positions``, ``ilu0_factor``, ``symmetric_mirror``, ``ilu_split``,
``drop_coupling``, of the set-up device: :func:`._util.setup_device`); the factors
are stored as a :class:`~mpsolve.operator.TriangularSweeps` operator on the device the
preconditioner is set up for, applied by its ``ilu_sweeps`` kernel.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from mpsolve._sparse import SYMMETRY_RTOL, is_symmetric, symmetry_rtol  # noqa: F401
from mpsolve.backend import HOST_DEVICE, array_module, to_device, to_host
from mpsolve.kernels import lookup
from mpsolve.kernels.safenorm import all_finite
from mpsolve.kernels.registry import launch_plan
from mpsolve.operator import TriangularSweeps

from ._scaling import sinkhorn_scaling, tiny_after_equilibration
from ._util import check_count, rows_text, setup_device, wide_dtype
from .base import Preconditioner

__all__ = ["ILU0", "ZeroPivotError", "ilu0_factor", "is_symmetric", "symmetry_rtol",
           "positive_diagonal", "dominance_shift", "shift_off_diagonal", "first_shift"]


class ZeroPivotError(ValueError):
    """ILU(0) met a zero (or missing) pivot; the message names the row."""


def ilu0_factor(C, device=HOST_DEVICE, shift=0.0, mirror=None, positive=False, diag=None):
    """FP64 (complex128 for complex ``C``) ILU(0) of a canonical CSR matrix ``C``
    (Saad Alg. 10.4, IKJ) -- of ``C`` with its off-diagonal entries divided by
    ``1 + shift`` when ``shift > 0`` (Manteuffel's shifted factorisation, see
    :class:`ILU0`).  With ``mirror`` (the transpose positions from ``symmetric_mirror``,
    for symmetric / Hermitian ``C``) it is IC(0): the same factors in exact arithmetic,
    the lower one read off the upper, at half the work; ``positive`` then also refuses a
    pivot that is not positive, at the first one.  ``diag``: the diagonal positions, when
    the caller has them.

    Returns ``(indptr, indices, data, diag)``: the combined factors in the
    pattern of ``C`` (strictly lower part = ``L`` without its unit diagonal,
    upper part = ``U``) and the position of each diagonal entry.  ``indptr`` and
    ``indices`` are ``C``'s own arrays (not copied, never written).  ``device``: the
    host device whose set-up kernels factorise.

    Raises
    ------
    ZeroPivotError
        If a pivot ``u_ii`` is zero, not finite, or structurally missing (or, with
        ``positive``, not positive).
    """
    indptr, indices = C.indptr, C.indices
    wide = wide_dtype(C.dtype)
    data = C.data.astype(wide)  # a copy: the user's matrix is never touched
    if diag is None:
        diag = lookup(device, "diag_positions", (wide,))(indptr, indices)
    if shift:
        keep = data[diag[diag >= 0]]
        data /= 1.0 + shift                    # D + (A - D) / (1 + shift)
        data[diag[diag >= 0]] = keep
    if mirror is None:
        bad = lookup(device, "ilu0_factor", (wide,))(indptr, indices, data, diag)  # in place
    else:
        bad = lookup(device, "ic0_factor", (wide,))(indptr, indices, data, diag, mirror,
                                                    positive)
    if bad >= 0:
        missing = np.flatnonzero(diag < 0)
        what = ("is structurally missing" if diag[bad] < 0 else
                f"became {data[diag[bad]].item()!r}")
        raise ZeroPivotError(
            f"ILU(0): the pivot of row {bad} {what}"
            + (f" (rows without a diagonal entry: {rows_text(missing)})" if missing.size else "")
            + "; ILU(0) needs nonzero pivots -- "
            + ("reorder='mc64' permutes A to a zero-free diagonal (precond='auto' does "
               "so by itself), " if diag[bad] < 0 else "")
            + "or use ISAI/Block-Jacobi instead"
        )
    return indptr, indices, data, diag


#: ILU(0) and ILUT factors are called unstable when ``||M (A e) - e||_inf`` exceeds this,
#: for ``e`` the vector of ones (:func:`ilu_growth`; Chow & Saad's test): the reciprocal
#: of FP32's machine epsilon (:data:`mpsolve.auto.ILU_GROWTH_LIMIT` says why).
GROWTH_LIMIT = 1.0 / float(np.finfo(np.float32).eps)


def ilu_growth(M, C) -> float:
    """``||M (C e) - e||_inf`` for ``e`` the ones vector -- for a symmetric ``M`` (IC(0))
    ``max_i |(M C x - x)_i| / x_i`` for ``x = |diag C|^{-1/2}`` -- how far the
    preconditioned operator moves a smooth vector, ``inf`` where it is not finite
    (:data:`GROWTH_LIMIT`).  ``M``: an :class:`~mpsolve.precond.ILU0` set up on ``C``.
    One call of the ``ilu_growth`` set-up kernel, on the device that set ``M`` up (the
    host's for factors stored on an accelerator: host copies of them), ``C`` in the
    set-up's precision (FP64 or complex128, as the factorisation read it)."""
    n = C.shape[0]
    if not n:
        return 0.0
    op = M._op
    wide = wide_dtype(C.dtype)
    host = setup_device(op.device)
    factors = [to_host(a) for a in (op.bounds, op.lptr, op.lind, op.lval, op.uptr, op.uind,
                                    op.uval, op.dinv)]
    work = [np.empty(n, t) for t in (np.float64, wide, wide)]
    return float(lookup(host, "ilu_growth", (wide, op.dtype))(
        C.indptr, C.indices, C.data.astype(wide, copy=False), bool(M.symmetric), *factors,
        *work))


def equilibrated_growth(M, C) -> float:
    """:func:`ilu_growth` for the equilibrated matrix ``R C S`` (:func:`sinkhorn_scaling`),
    whose ILU(0) is ``S^-1 M R^-1`` (ILU(0) is equivariant under diagonal scaling):
    ``max_i |(M C s - s)_i| / s_i``.  The test with ``e`` sees the scaling of the columns
    (``M C`` is only similar to ``M' C'`` for ``C' = C D``): on a convection-diffusion
    matrix with rows and columns scaled by 1e-6..1e6 it gave 1e8 where the equilibrated
    growth is 2.6, and ILU(0) converges in 17 BiCGSTAB iterations.  Taken where
    :func:`ilu_growth` exceeds the limit (nonsymmetric ``M``: the symmetric test is
    scale-invariant already): tens of passes over ``C`` for the scaling, one apply.  The
    scaling is covariant in its limit (``D1 C D2`` gets ``D2^-1 s``, the same growth); to
    its tolerance the growth moved by under 3x on that matrix over scalings up to
    1e-10..1e10, against the 8e6 gap between stable and unstable factors."""
    return apply_growth(M.apply, M.device, C, sinkhorn_scaling(C)[1])


def apply_growth(apply, device, C, s) -> float:
    """``max_i |(M C s - s)_i| / s_i`` for a positive ``s``, ``M`` given by ``apply(r,
    out)`` on ``device`` (``inf`` where not finite): the growth tests of ILUT's factors
    (``s = e``) and of :func:`equilibrated_growth`.  One product with ``C`` and one apply,
    in FP64 (complex128)."""
    n = C.shape[0]
    if not n:
        return 0.0
    wide = wide_dtype(C.dtype)
    y = np.ascontiguousarray(C @ s.astype(wide))
    out = array_module(device).empty(n, wide)
    with np.errstate(all="ignore"):
        apply(to_device(y, device), out)
        g = float(np.max(np.abs(to_host(out) - s) / s))
    return g if np.isfinite(g) else float("inf")


def _check_pivots(A, pivots, tol, hint=True):
    """Raise :class:`ZeroPivotError` at the first row ``i`` whose pivot is at most ``tol``
    times its row's largest entry, both as stored and in the equilibrated ``A``: small
    through the units of rows and columns alone is not small, as ILU(0) is indifferent
    to them (:func:`._scaling.tiny_after_equilibration`; every row of ``A`` has its
    diagonal entry here: ILU(0) refused a missing one)."""
    small = tiny_after_equilibration(A, pivots, tol)
    if small.size:
        i = int(small[0])
        raise ZeroPivotError(
            f"ILU(0): the pivot of row {i} became {pivots[i].item()!r}, at most pivot_tol = "
            f"{tol:.3g} times its row's largest entry (as stored and with rows and columns "
            f"equilibrated; {small.size} such rows); U^-1 would blow up -- "
            + ("permute A (reorder='mc64') and use ILUT, or use ISAI"
               if hint else "use ILUT (it pivots), or ISAI"))


def split_factors(indptr, indices, data, n):
    """``(L, U)`` (SciPy CSR, FP64 or complex128, canonical) from combined factors; ``L``
    gets its unit diagonal.  The pattern of ``A`` is kept, explicit zeros included."""
    wide = wide_dtype(data.dtype)
    rows = np.repeat(np.arange(n), np.diff(indptr))
    lo, up = indices < rows, indices >= rows
    L = sp.csr_matrix((np.concatenate([data[lo].astype(wide), np.ones(n, wide)]),
                       (np.concatenate([rows[lo], np.arange(n)]),
                        np.concatenate([indices[lo], np.arange(n)]))), shape=(n, n))
    U = sp.csr_matrix((data[up].astype(wide), (rows[up], indices[up])), shape=(n, n))
    L.sort_indices()
    U.sort_indices()
    return L, U


def ilu0_split(C, device=HOST_DEVICE):
    """``(L, U)`` of ILU(0) of ``C`` as SciPy CSR FP64 (complex128) matrices (``L`` with its
    unit diagonal)."""
    indptr, indices, data, _ = ilu0_factor(C, device)
    return split_factors(indptr, indices, data, C.shape[0])


#: Fewest rows per block when ``ILU0(blocks="threads")`` splits a matrix for the threads.
MIN_BLOCK_ROWS = 50_000


#: ``ILU0(shift="auto")``'s first shift, and the factor between two tries.
SHIFT_START = 1e-3
SHIFT_GROWTH = 4.0
#: The largest shift tried: (A - D) / (1 + s) is below FP64's rounding of D beyond it.
SHIFT_LIMIT = 1e16


def positive_diagonal(A, diag=None) -> bool:
    """Every diagonal entry of ``A`` stored, real and positive (what IC(0) and the other
    symmetric forms need); ``diag``: the positions of the diagonal entries in ``A.data``
    (-1: not stored), when the caller has them."""
    if diag is None:
        d = A.diagonal()                     # (an entry not stored reads 0: not positive)
        if not d.size:
            return False
    elif not diag.size or diag.min() < 0:
        return False
    else:
        d = A.data[diag]
    if d.dtype.kind == "c":
        return bool(d.real.min() > 0 and not d.imag.any())
    return bool(d.min() > 0)                  # (a NaN: min is NaN, not positive)


def negative_diagonal(A) -> bool:
    """Every diagonal entry of ``A`` negative (its real part: a Hermitian ``A``'s diagonal
    is real)?  Necessary for ``A`` negative definite: the symmetric forms (IC, FSAI, the
    symmetric BILU) are then built on ``-A`` and their ``M`` negated, a negative definite
    ``M`` for CG on a negative definite ``A``."""
    d = A.diagonal()
    return bool(d.size) and bool(np.all(d.real < 0))


def dominance_shift(A) -> float:
    """The shift past which ``D + (A - D) / (1 + s)`` is strictly diagonally dominant
    (an incomplete Cholesky of it then exists): ``max_i sum_{j != i} |a_ij| / |a_ii| - 1``,
    for ``A`` with a zero-free diagonal."""
    if A.shape[0] == 0:
        return 0.0
    d = np.abs(A.diagonal())
    off = np.asarray(abs(A).sum(axis=1)).ravel() - d
    with np.errstate(over="ignore"):        # (a subnormal diagonal entry: inf, an answer)
        return float(np.max(off / d)) - 1.0


def shift_off_diagonal(A, s, b=1):
    """CSR ``A`` with its entries outside the ``b x b`` diagonal blocks divided by
    ``1 + s`` (Manteuffel's shifted matrix; ``b = 1``: off the diagonal)."""
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    off = rows // b != A.indices // b
    data = A.data.copy()
    data[off] /= 1.0 + s
    S = sp.csr_matrix((data, A.indices, A.indptr), shape=A.shape)
    S.has_sorted_indices = A.has_sorted_indices
    return S


def first_shift(attempt, bound, most=None):
    """Manteuffel's shift sequence, shared by the symmetric forms (IC(0), BILU(0), ILUT):
    ``attempt(s)`` (a result, or ``None`` for factors that will not do) for ``s =
    SHIFT_START, SHIFT_START * SHIFT_GROWTH, ...`` until one succeeds; it ends after the
    first ``s`` above ``bound`` (where the shifted factorisation is known to exist, e.g.
    :func:`dominance_shift`) and before any above ``most``.  Returns ``(result, s)``, or
    ``(None, None)``.  A ``bound`` past :data:`SHIFT_LIMIT` (or not finite: a subnormal
    diagonal entry makes :func:`dominance_shift` overflow) is taken as that limit: a
    larger shift leaves only the diagonal in FP64."""
    bound = min(bound, SHIFT_LIMIT) if bound == bound else SHIFT_LIMIT
    s = SHIFT_START
    while most is None or s <= most:
        got = attempt(s)
        if got is not None:
            return got, s
        if s > bound:
            break
        s *= SHIFT_GROWTH
    return None, None


class ILU0(Preconditioner):
    """ILU(0) preconditioner ``M = (L U)^{-1}`` on the pattern of ``A``.

    Parameters
    ----------
    dtype : {"float32", "float64"} or None
        Storage precision of the factors (FP32 when set up on its own).  The
        factorization itself always runs in FP64; the triangular solves carry
        each row's sum in FP64 and round it to the dtype of ``out``.
    blocks : int or "threads"
        Number of diagonal blocks, factorised and solved independently, one thread
        each (block Jacobi with ILU(0) blocks: what PETSc's ``bjacobi`` gives with
        one block per MPI rank).  Entries coupling two blocks are dropped before the
        factorisation; blocks are contiguous row ranges of about equal nonzeros.
        Default 1: plain ILU(0).  ``"threads"``: one block per thread of the set-up
        device (the CPU's Numba threads; one block on the serial ``reference``
        device), as long as each gets at least ``MIN_BLOCK_ROWS`` (50,000) rows.  The sweeps then run on
        every core at the price of iterations (measured on this 2-core machine,
        ``poisson3d:100`` CG: apply 10.8 -> 7.4 ms, iterations 101 -> 117 -- a wash
        with two cores; it pays with more).
    shift : "auto", float or None
        Manteuffel's shift (Manteuffel 1980, "An incomplete factorization technique for
        positive definite linear systems", Math. Comp. 34(150),
        doi:10.1090/S0025-5718-1980-0559195-7): factorise ``D + (A - D) / (1 + shift)``
        (``D`` the diagonal of ``A``) instead of ``A``.  IC(0) of a symmetric positive
        definite matrix can meet a pivot <= 0 -- then ``M`` is indefinite and CG breaks
        down -- but it exists once the shifted matrix is diagonally dominant, so some
        shift always works.  ``"auto"`` (default, PETSc's ``ICC`` default too): the symmetric
        form of a matrix with a positive diagonal is factorised unshifted first and, if a
        pivot is not positive, again with shifts ``1e-3, 4e-3, 1.6e-2, ...`` (x4) until
        every pivot is (each try stops at its first pivot that is not positive; the
        smallest shift of the sequence that works is kept: the shifted factors
        approximate ``A`` less well as the shift grows); the general form is never shifted
        (PETSc's ``ILU`` default).  A number: that shift, in either form; ``0`` or ``None``:
        never shift.  Measured with CG (FP32 factors, rtol 1e-8) on the SuiteSparse SPD
        matrices where IC(0) breaks down (nos1, bcsstk09/10/13/14/15/17/18/21, plat362): the
        shifted IC(0) converges on all ten, in fewer iterations than ISAI's SPD form on
        five (bcsstk13: 394 against 543), more on the others (bcsstk10: 154 against 98).
    symmetric : bool or None
        ``True``: ``A`` is symmetric, store ``L`` and ``D`` only in effect
        (``U = D L^T``, the IC(0) / LDL^T form) so ``M`` is symmetric bit for bit
        and usable with CG (and PETSc's ``applyTranspose``); factorised as IC(0), the
        upper factor by elimination and ``L`` read off it, half ILU(0)'s work.  ``False``: general
        ILU(0).  ``None`` (default): symmetric when :func:`is_symmetric` says so
        (1e-12 relative to ``max(|a_ij|, |a_ji|, sqrt(|a_ii a_jj|))`` for FP64 values, 64
        ulps for narrower ones: an assembled matrix's rounding noise passes).  For complex ``A``
        symmetric means Hermitian (``A == A^H``; ``U = D L^H``, ``M`` Hermitian): a
        complex-symmetric ``A`` (``A == A^T``, e.g. Helmholtz) gets the general form.
    pivot_tol : float
        Refuse factors with a pivot ``|u_ii| <= pivot_tol * max_j |a_ij|`` (row ``i`` of
        ``A``, both as stored and with ``A``'s rows and columns equilibrated, so that
        the units of the unknowns do not decide): a pivot that small next to its row
        makes ``U^-1`` blow up, and the Krylov method with it diverges or stagnates.  ``0`` (default): only a zero, missing or
        non-finite pivot is refused (PETSc's ``-pc_factor_zeropivot`` is the absolute form
        of this test).  ``method="auto"`` sets ``sqrt(eps)`` when ``A`` has tiny but no
        zero diagonal entries, to leave ILU(0) for MC64 + ILUT at set-up, not after
        hundreds of iterations.

    Attributes
    ----------
    nbytes : int
        Bytes of the stored factors (values, indices, row pointers, inverse
        diagonal).
    symmetric : bool
        After setup: whether the symmetric form was used.
    shift : float or None
        After setup: the shift the factors were computed with (``None``: unshifted).

    Raises
    ------
    ZeroPivotError
        At setup, on a zero or missing pivot (the message names the row), a pivot under
        ``pivot_tol``, or when no shift of ``shift="auto"``'s sequence gives positive
        pivots.

    Notes
    -----
    The solves are sequential (a row depends on the rows before it) -- the cost
    ISAI avoids by replacing them with SpMVs -- and latency bound rather than
    bandwidth bound; see ``_sweeps`` in :mod:`mpsolve.kernels.cpu.ilu` for how the
    chain between rows is kept short.  Storage: ``L`` forward, ``D^{-1} U`` backward, ``1/diag(U)``, so
    neither sweep divides.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from mpsolve.precond import ILU0
    >>> A = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(5, 5)).tocsr()
    >>> M = ILU0(dtype="float64").setup(A)
    >>> x = M.matvec(A @ np.ones(5))      # ILU(0) is exact on a tridiagonal matrix
    >>> bool(np.allclose(x, 1.0)), M.symmetric
    (True, True)
    """

    name = "ilu0"
    symmetric = False
    supports_complex = True

    def __init__(self, dtype=None, symmetric=None, blocks=1, shift="auto", pivot_tol=0.0):
        super().__init__(dtype)
        if isinstance(pivot_tol, bool) or not isinstance(
                pivot_tol, (int, float, np.floating, np.integer)) or not 0 <= pivot_tol < 1:
            raise ValueError(f"pivot_tol={pivot_tol!r}: use a number in [0, 1) (a pivot "
                             "|u_ii| <= pivot_tol * max_j |a_ij| is refused; 0: only zero "
                             "pivots)")
        self.pivot_tol = float(pivot_tol)
        if symmetric not in (None, True, False):
            raise ValueError(f"symmetric={symmetric!r}: use True, False or None (detect)")
        if not (shift is None or (isinstance(shift, str) and shift == "auto") or (
                isinstance(shift, (int, float, np.floating, np.integer))
                and not isinstance(shift, bool) and 0 <= shift < np.inf)):
            raise ValueError(f"shift={shift!r}: use 'auto', None, or a finite number >= 0 "
                             "(the factorised matrix is D + (A - D) / (1 + shift))")
        self._shift_request = shift
        self.shift = None
        if not (isinstance(blocks, str) and blocks == "threads"):
            blocks = check_count(blocks, "blocks", none_ok=False, what="a positive integer, "
                                 "or 'threads' (one block per thread for large systems)")
        self._symmetric_request = symmetric
        self._blocks_request = blocks
        self.bounds = None
        #: ``(indptr, indices, data, symmetric, mirror)``: a ``symmetric_mirror`` result
        #: (tolerance ``SYMMETRY_RTOL``) for those very arrays, which the next set-up uses
        #: instead of computing it again when it factors them (the automatic choice hands
        #: on its analysis's; used once)
        self.mirror_hint = None

    def _setup(self, A, dtype):
        host = self._setup_device
        # the diagonal blocks: contiguous row runs of about equal work (the sweeps'
        # launch plan of the set-up device); [0, n] is plain ILU(0)
        bounds = launch_plan(host, "ilu_sweeps", A.indptr, self._blocks_request,
                             MIN_BLOCK_ROWS)
        self.bounds = np.array([0, A.shape[0]], np.int64) if bounds is None else bounds
        if self.bounds.size > 2:
            ip, ix, dv = lookup(host, "drop_coupling", (wide_dtype(A.dtype),))(
                A.indptr, A.indices, A.data, self.bounds)
            A = sp.csr_matrix((dv, ix, ip), shape=A.shape)
            A.has_sorted_indices = True
        wide = wide_dtype(A.dtype)
        sym = self._symmetric_request
        hint, self.mirror_hint = self.mirror_hint, None
        mirror = np.empty(A.indices.size if sym is not False else 0,
                          np.int32 if A.indices.size < 2**31 else np.int64)
        if sym is None and hint is not None and hint[0] is A.indptr and \
                hint[1] is A.indices and hint[2] is A.data:
            sym, mirror = bool(hint[3]), hint[4]      # this matrix's test, done already
        elif sym is None:
            sym = is_symmetric(A, host, mirror=mirror)
        elif sym and not is_symmetric(A, host, max(1e-8, symmetry_rtol(A.dtype)), mirror):
            raise ValueError("ILU0(symmetric=True): A is not symmetric (Hermitian, for complex "
                             "A: pattern or values differ by more than 1e-8 relative); use "
                             "symmetric=False or None")
        indptr, indices, data, diag = self._factor(A, host, sym, mirror if sym else None)
        n = A.shape[0]
        if self.pivot_tol:
            _check_pivots(A, data[diag], self.pivot_tol, self.reorder_hint)
        nl = int(diag.sum()) - int(indptr[:-1].sum())      # entries left of the diagonals
        nu = indices.size - n - nl
        lptr = np.empty(n + 1, np.int32)      # (the sweeps take 32-bit row pointers)
        uptr = np.empty(n + 1, np.int32)
        lind = np.empty(nl, np.int32)
        uind = np.empty(nu, np.int32)
        lval = np.empty(nl, wide)
        uval = np.empty(nu, wide)
        dinv = np.empty(n, wide)
        lookup(host, "ilu_split", (wide,))(indptr, indices, data, diag, sym, mirror, lval, lind,
                                           lptr, uval, uind, uptr, dinv)
        if not all_finite(dinv, np):
            i = int(np.flatnonzero(~np.isfinite(dinv))[0])
            raise ZeroPivotError(f"ILU(0): the pivot of row {i} is {data[diag[i]]:.3g}, so "
                                 "small that its reciprocal overflows FP64; scale the system's "
                                 "rows and columns first (or use reorder='mc64')")
        self.symmetric = sym
        # out = U'^-1 D^-1 L^-1 r: two sweeps (one task per diagonal block)
        self._op = TriangularSweeps(lptr, lind, lval, uptr,
                                    uind, uval, dinv, self.bounds, dtype, what="ILU(0)",
                                    device=self.device)

    def _factor(self, A, host, sym, mirror):
        """ILU(0) of ``A`` (IC(0) given the ``mirror`` of symmetric ``A``), shifted as
        ``shift`` says (module docstring); sets ``self.shift``."""
        req = self._shift_request
        if not (isinstance(req, str) and req == "auto"):
            self.shift = float(req) if req else None
            return ilu0_factor(A, host, self.shift or 0.0, mirror)
        self.shift = None
        # symmetric with a positive diagonal: IC(0) for CG, so its pivots must be positive;
        # each try stops at its first pivot that is not
        diag = lookup(host, "diag_positions", (wide_dtype(A.dtype),))(A.indptr, A.indices)
        spd = bool(sym) and positive_diagonal(A, diag)
        try:
            return ilu0_factor(A, host, mirror=mirror, positive=spd, diag=diag)
        except ZeroPivotError:
            if not spd:
                raise

        def attempt(s):
            try:
                return ilu0_factor(A, host, s, mirror, positive=True, diag=diag)
            except ZeroPivotError:
                return None

        # the sequence ends past dominance_shift(A), where IC(0) of the shifted A exists
        bound = min(dominance_shift(A), SHIFT_LIMIT)
        factors, self.shift = first_shift(attempt, bound)
        if factors is None:
            raise ZeroPivotError(
                f"IC(0): no shift up to {bound:.3g} gives positive pivots (A's diagonal is "
                "positive, so A is probably not positive definite); use GMRES with "
                "ILU0(symmetric=False), or ISAI")
        return factors

    def diagnose(self, C):
        """Unstable factors (Chow & Saad's growth test, :func:`ilu_growth`, and for a
        nonsymmetric ``M`` again on the equilibrated matrix, :func:`equilibrated_growth`:
        the test ``method="auto"`` refuses such factors by at set-up), named with the
        fix: a named ILU(0) is set up without it, which would cost every set-up a product
        with ``A`` and two sweeps."""
        if C is None or not self.is_setup or C.shape != self.shape or self._op is None:
            return None
        g, what = ilu_growth(self, C), "e = ones"
        if not g <= GROWTH_LIMIT and not self.symmetric:
            g, what = equilibrated_growth(self, C), "A equilibrated and e = ones"
        if g <= GROWTH_LIMIT:
            return None
        return (f"ILU(0)'s factors are unstable: ||M A e - e||_inf = {g:.1e} for {what}, "
                f"over {GROWTH_LIMIT:.1e} (Chow & Saad's growth test): their triangular "
                "solves amplify; use precond='ilut' (it pivots), reorder='mc64', or "
                "precond='auto' (which refuses such factors)")

    def _transpose_operator(self):
        """The symmetric form's stored ``M`` is symmetric bit for bit (real data): ``M``
        itself; otherwise the transposed sweeps (:meth:`TriangularSweeps.transposed`)."""
        if self.symmetric and self.storage_dtype.kind != "c":
            return self._op
        return self._op.transposed()

    def _linear(self):
        """Two triangular sweeps, each row's sum carried in FP64: linear
        (:meth:`Preconditioner.linear_apply`)."""
        return True

    def fusable(self):
        """The two sweeps (:meth:`Preconditioner.fusable`), with the diagonal blocks' row
        bounds where there are several (``None`` for one)."""
        op = self._op
        if op is None:
            return None
        return ("ilu", (op.lptr, op.lind, op.lval, op.uptr, op.uind, op.uval, op.dinv),
                self.bounds if self.bounds.size > 2 else None)

    @property
    def blocks(self):
        """Number of diagonal blocks used (after setup)."""
        return 0 if self.bounds is None else int(self.bounds.size - 1)

    # the stored factors (on the device): L, D^-1 U (rows reversed), 1/diag(U)
    lptr = property(lambda self: self._op.lptr)
    lind = property(lambda self: self._op.lind)
    lval = property(lambda self: self._op.lval)
    uptr = property(lambda self: self._op.uptr)
    uind = property(lambda self: self._op.uind)
    uval = property(lambda self: self._op.uval)
    dinv = property(lambda self: self._op.dinv)

    def factors(self):
        """``(L, U)`` as SciPy CSR FP64 (complex128) matrices from the stored values (``L``
        with its unit diagonal, ``U = D U'`` with ``D = 1 / dinv``)."""
        self._check_ready()
        n = self.shape[0]
        lptr, lind, lval, uptr, uind, uval, dinv = (
            to_host(a) for a in (self.lptr, self.lind, self.lval, self.uptr, self.uind,
                                 self.uval, self.dinv))
        wide = wide_dtype(lval.dtype)
        L = sp.csr_matrix((lval.astype(wide), lind, lptr), shape=(n, n))
        L = (L + sp.eye(n, format="csr")).tocsr()
        d = 1.0 / dinv.astype(wide)
        rows = (n - 1 - np.repeat(np.arange(n), np.diff(uptr))).astype(np.int64)
        Up = sp.csr_matrix((uval.astype(wide), (rows, uind)), shape=(n, n))
        U = (sp.diags(d) @ (Up + sp.eye(n, format="csr"))).tocsr()
        L.sort_indices()
        U.sort_indices()
        return L, U
