"""Block ILU(0) -- BILU(0) on the BSR structure of ``A`` -- and the block ISAI of its
factors (the Block-ISAI of the mixed-precision ISAI papers, ``BlockISAI(variant="bilu")``).

BILU(0)
-------
``A ~ L U`` on the block pattern of ``A`` (``b x b`` blocks, ``b`` detected or given;
a partial last block padded with the identity): ``L`` unit block lower, ``U`` block
upper triangular, both on the block pattern of ``A``.  Block IKJ variant (the block
form of Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed., Alg. 10.4, as
PETSc's ``MatILUFactor`` on BAIJ matrices): for block row ``i`` and each block
``k < i`` of its pattern, ``L_ik = A_ik U_kk^{-1}`` and ``A_ij -= L_ik U_kj`` for
``j > k`` in the patterns of rows ``i`` and ``k``.  The factorisation runs in FP64 and
the pivot blocks ``U_ii`` are inverted in FP64 (Gauss-Jordan with partial pivoting);
a singular pivot block raises :class:`~mpsolve.precond.ZeroPivotError` naming the
block row.  With ``b = 1`` it is ILU(0) (:class:`~mpsolve.precond.ILU0`) value for
value.

:class:`BlockILU0` stores ``L``, ``U' = D^{-1} U`` and ``D^{-1} = blockdiag(U_ii)^{-1}``
in ``dtype`` (FP32 by default, range-checked) and applies ``M = (L D U')^{-1}`` by a
block forward and a block backward sweep (``bilu_sweeps``), each block row's ``b``
sums carried in FP64.  For symmetric ``A`` it uses the ``L D L^T`` form (``U' = L^T``,
``D^{-1}`` symmetrised), so the stored ``M`` is symmetric, as :class:`ILU0` does.

Block ISAI of the factors
-------------------------
``M = U_isai L_isai`` with ``L_isai ~ L^{-1}`` on the block pattern of ``tril(S^k)``
and ``U_isai ~ U^{-1}`` on ``triu(S^k)`` (``S`` the block graph of ``A``).  Block row
``i`` with block columns ``J_i`` solves ``X T[J_i, J_i] = E_i^T`` for ``T = L`` or ``U``:
a small block *triangular* system, solved by block substitution
(``X_q = (E_q - sum_p X_p T[J_p, J_q]) T_qq^{-1}``, with ``T_qq^{-1} = I`` for ``L`` and
BILU(0)'s FP64 pivot inverses for ``U``) -- its ``b x b`` products are the small dense
GEMMs a GPU runs on FP64 Tensor Cores.  The set-up runs in FP64
(``block_tri_isai``); both factors are stored as BSR in ``dtype`` and applied as two
BSR SpMVs.  For symmetric ``A`` whose pivot blocks are SPD the symmetric form
``M = G^T G``, ``G = C^T L_isai`` with ``D^{-1} = C C^T`` (so ``M = L_isai^T D^{-1}
L_isai ~ (L D L^T)^{-1}``), is stored instead: symmetric (positive definite), for CG.

Fallback (local systems): the block triangular systems are nonsingular (their pivot
blocks were inverted and checked by BILU(0)); a block row whose substitution is not
finite, or whose condition bound ``||T_J||_inf ||X||_inf`` exceeds
:data:`~mpsolve.precond._localsolve.COND_LIMIT`, keeps only its diagonal block
``T_ii^{-1}`` (``I`` for ``L``, ``U_ii^{-1}`` for ``U``), is listed in
``fallback_rows`` and reported by a :class:`PreconditionerWarning`.

Complex data: both run in complex128 (the same kernels, field-generic; partial pivoting on
the modulus), stored in complex64/complex128, and "symmetric" means Hermitian: the
``L D L^H`` form (``U' = L^H``, ``D^{-1}`` made Hermitian) and ``M = G^H G`` with
``G = C^H L_isai``, ``D^{-1} = C C^H``.
"""
from __future__ import annotations

import time
import warnings

import numpy as np
import scipy.sparse as sp

from mpsolve.backend import HOST_DEVICE, array_module, to_device, to_host
from mpsolve.kernels import lookup, provides
from mpsolve.operator import BlockTriangularSweeps, BSROperator, OperatorChain

from ._localsolve import COND_LIMIT, transpose_operator
from ._pattern import block_of, block_pattern, to_bsr
from ._util import (PreconditionerWarning, check_amount, check_count, rows_text, setup_device,
                    wide_dtype)
from .base import Preconditioner
from .ilu import (ZeroPivotError, first_shift, is_symmetric, negative_diagonal,
                  positive_diagonal, shift_off_diagonal, symmetry_rtol)

__all__ = ["BlockILU0", "BlockTriangularSweeps", "bilu0_factor", "bilu0_split",
           "bilu_isai_operators"]

_F64 = ("float64",)


def _pad(C, b):
    """``C`` padded with an identity block to a multiple of ``b`` rows (CSR, canonical)."""
    extra = (-C.shape[0]) % b
    if extra == 0:
        return C
    P = sp.block_diag([C, sp.identity(extra)], format="csr")
    P.sort_indices()
    return P


def bilu0_factor(C, b, device=HOST_DEVICE):
    """FP64 (complex128 for complex ``C``) BILU(0) of canonical CSR ``C`` with ``b x b``
    blocks.

    Returns ``(indptr, indices, data, diag, dinv)``: the combined block factors of the
    padded ``C`` on its block pattern (BSR, ``data`` of shape ``(nnzb, b, b)``: strictly
    lower blocks = ``L`` without its unit diagonal, the others = ``U``), the position of
    each diagonal block, and ``dinv[i] = U_ii^{-1}`` (FP64).  ``device``: the host
    device whose set-up kernels factorise.

    Raises
    ------
    ZeroPivotError
        If a pivot block ``U_ii`` is singular (a zero pivot in Gauss-Jordan with partial
        pivoting) or not finite; the message names the block row and its rows.
    """
    n = C.shape[0]
    wide = wide_dtype(C.dtype)                         # the set-up's dtype and kernel key
    indptr, indices, data = to_bsr(_pad(C, b), b)      # every diagonal block stored
    data = data.astype(wide, copy=False)
    nb = indptr.size - 1
    diag = lookup(device, "diag_positions", _F64)(indptr, indices)
    dinv = np.zeros((nb, b, b), dtype=wide)
    bad = lookup(device, "bilu0_factor", (wide,))(indptr, indices, data, diag, dinv)
    if bad >= 0:
        blk = data[diag[bad]]
        what = ("is zero" if not np.any(blk) else
                "is not finite" if not np.isfinite(blk).all() else "is singular")
        last = min(n, (bad + 1) * b) - 1
        raise ZeroPivotError(
            f"BILU(0): the pivot block of block row {bad} (rows {bad * b}..{last}, b = {b}) "
            f"{what}; BILU(0) needs nonsingular pivot blocks -- permute A, use "
            "another block size, or use Block-Jacobi/Block-ISAI (general, spd) instead")
    return indptr, indices, data, diag, dinv


def bilu0_split(C, b, device=HOST_DEVICE):
    """``(L, U)`` of BILU(0) of ``C`` as SciPy CSR FP64 ``n x n`` matrices (``L`` with its
    unit diagonal; ``U`` block upper, with full ``b x b`` pivot blocks), on the block
    pattern of ``C``."""
    n = C.shape[0]
    indptr, indices, data, diag, _ = bilu0_factor(C, b, device)
    nb = indptr.size - 1
    N = nb * b
    rows = np.repeat(np.arange(nb), np.diff(indptr))
    lo = indices < rows
    L = sp.csr_matrix(sp.bsr_matrix((data[lo], indices[lo], _ptr(rows[lo], nb)), shape=(N, N)))
    L = (L + sp.identity(N, format="csr")).tocsr()
    U = sp.csr_matrix(sp.bsr_matrix((data[~lo], indices[~lo], _ptr(rows[~lo], nb)),
                                    shape=(N, N)))
    L, U = L[:n, :n].tocsr(), U[:n, :n].tocsr()
    L.sort_indices()
    U.sort_indices()
    return L, U


def _ptr(rows, nb):
    """Row pointer of sorted block-row numbers ``rows``."""
    ptr = np.zeros(nb + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=nb), out=ptr[1:])
    return ptr


def bilu0_shifted(C, b, host, symmetric):
    """``(factors, shift)``: :func:`bilu0_factor` of ``C`` -- or, for ``symmetric`` ``C``
    with a positive diagonal whose pivot blocks are not all positive definite, of ``C``
    with its off-diagonal blocks divided by ``1 + s`` for the first ``s`` of
    :func:`~.ilu.first_shift`'s sequence that makes them so (``shift = s``; else ``None``).
    For ``s`` large enough the pivots are ``C``'s own diagonal blocks, positive definite
    for SPD ``C``; where they are not, ``C`` is not positive definite and the unshifted
    factors are returned as they are.  A zero pivot block, or no shift that works:
    :class:`ZeroPivotError`."""
    spd = symmetric and positive_diagonal(C)
    first = None
    try:
        fac = bilu0_factor(C, b, host)
        if not spd or _pd_blocks(fac[4]):
            return fac, None
    except ZeroPivotError as err:
        if not spd:
            raise
        first = err
    # the limit of the shift: the pivots are C's own diagonal blocks; if those are not
    # positive definite no shift helps (and C is not positive definite)
    try:
        limit = _pd_blocks(bilu0_factor(shift_off_diagonal(C, np.inf, b), b, host)[4])
    except ZeroPivotError:
        limit = False

    def attempt(s):
        try:
            fac = bilu0_factor(shift_off_diagonal(C, s, b), b, host)
        except ZeroPivotError:
            return None
        return fac if _pd_blocks(fac[4]) else None

    if limit:                           # (then some finite shift makes them positive definite)
        shifted, s = first_shift(attempt, 1e16)
        if shifted is not None:
            return shifted, s
    if first is not None:
        raise first
    if not limit:
        # A's own diagonal blocks are not positive definite, so neither is A and no shift
        # makes M so: BILU(0)'s factors as they are (a symmetric indefinite M, for GMRES or
        # BiCGSTAB; CG stops at its curvature test) -- refusing them failed GMRES on a
        # symmetric indefinite A whose unshifted factors are exact
        return fac, None
    raise ZeroPivotError("BILU(0): no shift up to 1e16 makes the pivot blocks positive "
                         "definite; use GMRES with BlockILU0(symmetric=False), or Block-ISAI")


def _pd_blocks(dinv):
    """Whether every pivot block inverse (``(nb, b, b)``) is Hermitian positive definite
    (its Hermitian part: the symmetric form stores that)."""
    if dinv.shape[0] == 0:
        return True
    if dinv.shape[1] == 1:
        return bool((dinv.real > 0).all())
    H = 0.5 * (dinv + np.swapaxes(dinv, 1, 2).conj())
    with np.errstate(all="ignore"):
        return bool((np.linalg.eigvalsh(H)[:, 0] > 0).all())


class BlockILU0(Preconditioner):
    """Block ILU(0) preconditioner ``M = (L U)^{-1}`` on the block pattern of ``A``.

    Parameters
    ----------
    block_size : int, optional
        ``b``.  Default: a BSR ``A``'s own block size, else detected
        (:func:`~mpsolve.precond.detect_block_size`; 1 -- point ILU(0) -- without block
        structure).  A ``b`` that does not divide ``n`` pads ``A`` with an identity block.
    dtype : {"float32", "float64"} or None
        Storage precision of the factors (FP32 when set up on its own; complex64 /
        complex128 for complex ``A``).  The factorisation and the pivot-block inverses
        are FP64 (complex128); the sweeps carry each block row's sums in FP64
        (complex128).
    symmetric : bool or None
        ``True``: ``A`` is symmetric (complex: Hermitian); use ``U' = L^T`` (``L^H``) and
        a symmetrised ``D^{-1}`` (the block ``L D L^T`` / ``L D L^H`` form), so ``M`` is
        symmetric / Hermitian (CG, PETSc's ``applyTranspose``).  ``False``: general BILU(0).  ``None`` (default):
        symmetric when :func:`~mpsolve.precond.ilu.is_symmetric` says so (as :class:`ILU0`).
    shift : "auto", None or float
        ``"auto"`` (default): on symmetric ``A`` with a positive diagonal, where the pivot
        blocks of BILU(0) are not all positive definite (``M`` would not be, and CG would
        break down), the off-diagonal blocks are divided by ``1 + s`` for the smallest
        ``s`` in ``1e-3, 4e-3, ...`` that makes them so (Manteuffel's shift, as
        :class:`ILU0`'s; the value is in ``shift``) -- unless ``A``'s own diagonal blocks
        are not positive definite (then ``A`` is not, and no shift makes ``M`` so: the
        factors are kept unshifted, for GMRES or BiCGSTAB).  A number: that ``s`` always.
        ``None`` or 0: no shift.

    Attributes
    ----------
    block_size : int
    symmetric : bool
        After setup: whether the symmetric form was used.
    nbytes : int
        Bytes of the stored factors.

    Raises
    ------
    ZeroPivotError
        At setup, on a singular pivot block (the message names the block row).

    Notes
    -----
    The sweeps are sequential over block rows (latency bound, as ILU(0)'s, but with
    ``b`` independent sums per step); :class:`~mpsolve.precond.BlockISAI` with
    ``variant="bilu"`` replaces them by two BSR SpMVs.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from mpsolve.precond import BlockILU0
    >>> T = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(4, 4))
    >>> K = np.array([[2.0, 0.5], [0.3, 2.0]])
    >>> A = sp.kron(T, K).tocsr()       # block tridiagonal: BILU(0) is exact
    >>> M = BlockILU0(dtype="float64").setup(A)
    >>> M.block_size, M.symmetric
    (2, False)
    >>> bool(np.allclose(M.matvec(A @ np.ones(8)), 1.0))
    True
    """

    name = "block-ilu0"
    supports_complex = True      # complex128 set-up, complex64/128 storage
    symmetric = False

    def __init__(self, block_size=None, dtype=None, symmetric=None, shift="auto"):
        super().__init__(dtype)
        if not (shift is None or (isinstance(shift, str) and shift == "auto")):
            try:
                shift = check_amount(shift, "shift")
            except ValueError:
                raise ValueError(f"shift={shift!r}: use 'auto', None or a number >= 0") from None
        self._shift_request = shift
        self.shift = None
        block_size = check_count(block_size, "block_size")
        if symmetric not in (None, True, False):
            raise ValueError(f"symmetric={symmetric!r}: use True, False or None (detect)")
        self._block_request = None if block_size is None else int(block_size)
        self._symmetric_request = symmetric
        self.block_size = self._block_request

    def _setup(self, A, dtype):
        host = self._setup_device
        n = A.shape[0]
        b = block_of(self._block_request, A)
        self.block_size = b
        sym = self._symmetric_request
        if sym is None:
            sym = is_symmetric(A, host)
        elif sym and not is_symmetric(A, host, max(1e-8, symmetry_rtol(A.dtype))):
            raise ValueError("BlockILU0(symmetric=True): A is not symmetric (pattern or "
                             "values differ by more than 1e-8 relative); use symmetric=False "
                             "or None")
        indptr, indices, data, diag, dinv = self._factor(A, b, host, sym)
        nb = indptr.size - 1
        mirror = np.empty(indices.size if sym else 0, np.int64)
        if sym:  # the block pattern of a symmetric A is symmetric: mirror[k] = (j, i)
            lookup(host, "symmetric_mirror", _F64)(indptr, indices, np.ones(indices.size),
                                                   0.0, mirror)
        nl = int(np.sum(diag - indptr[:-1]))
        nu = indices.size - nb - nl
        lptr = np.empty(nb + 1, np.int64)
        uptr = np.empty(nb + 1, np.int64)
        lind = np.empty(nl, np.int32)
        uind = np.empty(nu, np.int32)
        lval = np.empty((nl, b, b), dtype=data.dtype)
        uval = np.empty((nu, b, b), dtype=data.dtype)
        lookup(host, "bilu_split", (data.dtype,))(indptr, indices, data, diag, dinv, sym, mirror,
                                                  lval, lind, lptr, uval, uind, uptr)
        self.symmetric = bool(sym)
        # out = U'^-1 D^-1 L^-1 r: two block sweeps
        self._op = BlockTriangularSweeps(lptr.astype(np.int32), lind, lval,
                                         uptr.astype(np.int32), uind, uval, dinv, n, dtype,
                                         device=self.device)

    def _factor(self, A, b, host, sym):
        """BILU(0) of ``A``, shifted as ``shift`` says (sets ``self.shift``).  ``"auto"``: for
        symmetric ``A`` with a positive diagonal (SPD-looking), factors whose pivot blocks
        are not all positive definite -- so the stored ``M = (L D L^T)^{-1}`` is not, and
        CG breaks down (a biharmonic problem: at the first iteration) -- are made again
        from ``A`` with its off-diagonal blocks divided by ``1 + s`` (Manteuffel's shift,
        as :class:`ILU0`'s), ``s`` by :func:`~.ilu.first_shift`'s sequence: for
        ``s`` large enough the pivots are ``A``'s own diagonal blocks."""
        req = self._shift_request
        if not (isinstance(req, str) and req == "auto"):
            self.shift = float(req) if req else None
            return bilu0_factor(shift_off_diagonal(A, self.shift, b) if self.shift else A, b,
                                host)
        fac, self.shift = bilu0_shifted(A, b, host, sym)
        return fac

    def _transpose_operator(self):
        """The symmetric form's stored ``M`` is symmetric bit for bit (real data): ``M``
        itself; otherwise the transposed block sweeps
        (:meth:`BlockTriangularSweeps.transposed`)."""
        if self.symmetric and self.storage_dtype.kind != "c":
            return self._op
        return self._op.transposed()

    def _linear(self):
        """Two block sweeps, each block row's sums carried in FP64: linear
        (:meth:`Preconditioner.linear_apply`)."""
        return True

    def factors(self):
        """``(L, U)`` as SciPy CSR FP64 (complex128) ``n x n`` matrices from the stored values (``L``
        with its unit diagonal, ``U = D (I + U')``, ``D`` the inverses of the stored
        ``D^{-1}`` blocks)."""
        self._check_ready()
        op = self._op
        n, b = self.shape[0], op.b
        lptr, lind, lval, uptr, uind, uval, dinv = (
            to_host(a) for a in (op.lptr, op.lind, op.lval, op.uptr, op.uind, op.uval,
                                 op.dinv))
        nb = dinv.shape[0]
        N = nb * b
        wide = wide_dtype(dinv.dtype)
        L = sp.bsr_matrix((lval.astype(wide), lind, lptr), shape=(N, N)).tocsr()
        L = (L + sp.identity(N, format="csr")).tocsr()
        rows = (nb - 1 - np.repeat(np.arange(nb), np.diff(uptr))).astype(np.int64)
        order = np.argsort(rows, kind="stable")
        Up = sp.bsr_matrix((uval.astype(wide)[order], uind[order],
                            _ptr(rows[order], nb)), shape=(N, N)).tocsr()
        D = sp.bsr_matrix((np.linalg.inv(dinv.astype(wide)), np.arange(nb),
                           np.arange(nb + 1)), shape=(N, N)).tocsr()
        U = (D @ (Up + sp.identity(N, format="csr"))).tocsr()
        L, U = L[:n, :n].tocsr(), U[:n, :n].tocsr()
        L.sort_indices()
        U.sort_indices()
        return L, U

    def __repr__(self):
        base = super().__repr__()
        return base[:-2] + f", b={self.block_size})>" if self.is_setup else base


# --------------------------------------------------------------------------- block ISAI
def _tri_isai(sdev, pptr, pind, fac, lower):
    """Blocks of the ISAI of BILU(0)'s ``L`` (``lower``) or ``U`` on the pattern
    ``(pptr, pind)``, by the ``block_tri_isai`` kernel of ``sdev`` (in its array module:
    the GPU's batches the block substitution's products through its FP64 Tensor Core
    helper); rows rejected by the kernel keep only ``T_ii^{-1}``."""
    indptr, indices, data, diag, dinv = fac
    nb = pptr.size - 1
    b = data.shape[1]
    out = array_module(sdev).zeros((pind.size, b, b), dtype=data.dtype)
    bad = np.zeros(nb, np.uint8)
    lookup(sdev, "block_tri_isai", (data.dtype,))(pptr, pind, indptr, indices, data, diag,
                                                  dinv, bool(lower), COND_LIMIT, out, bad)
    rows = np.flatnonzero(bad)
    for i in rows:                      # fallback: the diagonal block rule
        seg = slice(pptr[i], pptr[i + 1])
        out[seg] = 0.0
        at = pptr[i] + int(np.searchsorted(pind[seg], i))
        out[at] = to_device(np.eye(b) if lower else dinv[i], sdev)
    return out, rows.astype(np.int64)


def bilu_isai_operators(C, b, power, dtype, accumulate, name="BlockISAI(bilu)",
                        device=HOST_DEVICE, symmetric=None, scale=None):
    """The stored operators of ``BlockISAI(variant="bilu")`` for canonical CSR ``C``.

    BILU(0) of ``C`` (FP64, on the host set-up device of ``device``), the block ISAI of
    its factors on the block patterns of ``tril(S^power)`` / ``triu(S^power)`` by block
    substitution (FP64; on ``device`` where it registers ``block_tri_isai``, the GPU's
    products on FP64 Tensor Cores), stored as BSR in ``dtype`` on ``device``.  ``symmetric``:
    ``None`` detects (symmetric ``A``, :func:`~.ilu.is_symmetric`, with SPD pivot blocks gives
    ``M = G^T G``; where the pivot blocks are not SPD on an SPD-looking ``A``, BILU(0) is
    shifted first as :class:`BlockILU0`'s, ``stats["shift"]``; a symmetric ``A`` with a
    negative diagonal: all of it for ``-A``, ``M`` negated, ``stats["negated"]``);
    ``False`` always gives ``M = U_isai L_isai``.  ``scale = (c, r)`` (with
    ``symmetric=False``): ``C`` is ``diag(r) A diag(c)`` (:func:`~.isai.equilibrated`), and
    the operators stored are those of ``A``'s ``M = diag(c) U_isai L_isai diag(r)``, the
    scalings folded into the columns of ``L_isai`` and the rows of ``U_isai`` in FP64.

    Returns ``(chain, fallback_rows, stats)``: ``chain(r, out)`` applies ``M``
    (``[L_isai, U_isai]`` or ``[G, G^T]``, in the order applied), the block rows that
    took the fallback rule, and ``stats`` (pattern sizes, ``symmetric``, ``solve_device``
    where the substitutions ran, ``stage_times``: seconds of the ``factor`` (BILU(0)),
    ``pattern``, ``solve`` (block substitutions and their fallback) and ``store`` stages).
    """
    host = setup_device(device)
    sdev = setup_device(device, "block_tri_isai")   # the block substitutions
    if not provides(sdev, "block_tri_isai", (wide_dtype(C.dtype),)):
        sdev = host                                 # (complex data: on the host)
    xp = array_module(sdev)
    n = C.shape[0]
    t0 = time.perf_counter()
    sym = False
    if symmetric is None or symmetric:
        sym = is_symmetric(C, host, None if symmetric is None
                           else max(1e-8, symmetry_rtol(C.dtype)))
        if symmetric and not sym:
            raise ValueError(f"{name}: symmetric=True, but A is not symmetric")
    negate = sym and negative_diagonal(C)
    if negate:
        # negative definite-looking: BILU(0) of -A and M negated (its stored last factor),
        # symmetric negative definite for CG, as ISAI's spd form does
        C = sp.csr_matrix(-C)
    fac, shift = bilu0_shifted(C, b, host, sym)    # (shifted where its pivots are not SPD)
    indptr, indices, data, diag, dinv = fac
    nb = indptr.size - 1
    t1 = time.perf_counter()
    t_factor = t1 - t0
    lp, li = block_pattern(indptr, indices, nb, power, "lower")
    t_pattern = time.perf_counter() - t1
    t1 = time.perf_counter()
    Lx, badL = _tri_isai(sdev, lp, li, fac, True)
    t_solve = time.perf_counter() - t1
    t1 = time.perf_counter()                        # store: the symmetric form, demotion
    chol = None
    if sym:                                         # (complex: Hermitian, D^-1 = C C^H)
        Dinv = 0.5 * (dinv + dinv.transpose(0, 2, 1).conj())
        if b == 1:                                  # 1 x 1: LAPACK's potrf is a sqrt
            d = Dinv.reshape(-1).real
            chol = np.sqrt(d).reshape(nb, 1, 1) if np.all(d > 0) else None
        else:
            try:
                chol = np.linalg.cholesky(Dinv)     # D^-1 = C C^T, blockwise
            except np.linalg.LinAlgError:
                chol = None
    stats = dict(pattern_nnz_blocks_L=int(li.size), solve_device=sdev, shift=shift,
                 negated=negate)
    if chol is not None:
        # G = C^T L_isai (block row i scaled by C_i^T); M = G^T G = L_isai^T D^-1 L_isai
        # (complex: G = C^H L_isai, M = G^H G)
        rows = np.repeat(np.arange(nb), np.diff(lp))
        if b == 1:                                  # scalar blocks: the product, elementwise
            G = to_device(chol[rows], sdev) * Lx
        else:
            G = xp.matmul(to_device(np.ascontiguousarray(
                chol.transpose(0, 2, 1).conj()[rows]), sdev), Lx)
        Gop = BSROperator(lp, li, G, n, dtype, accumulate, f"{name} factor G", device=device)
        ops = [Gop, transpose_operator(Gop, f"{name} factor G^T", conj=True,  # G^H (-G^H)
                                       negate=negate)]
        bad = badL
        stats.update(symmetric=True)
    else:
        up, ui = block_pattern(indptr, indices, nb, power, "upper")
        t2 = time.perf_counter()
        Ux, badU = _tri_isai(sdev, up, ui, fac, False)
        t3 = time.perf_counter()
        t_pattern, t_solve = t_pattern + (t2 - t1), t_solve + (t3 - t2)
        t1 = t3
        if scale is not None:           # M of A = diag(c) U_isai L_isai diag(r)
            pad = np.ones(nb * b - n)
            c_, r_ = (np.r_[v, pad].reshape(nb, b) for v in scale)
            Lx = Lx * to_device(r_[li][:, None, :], sdev)     # block (I, J)'s columns: r_J
            Ux = Ux * to_device(c_[np.repeat(np.arange(nb), np.diff(up))][:, :, None], sdev)
        ops = [BSROperator(lp, li, Lx, n, dtype, accumulate, f"{name} of L", device=device),
               BSROperator(up, ui, -Ux if negate else Ux, n, dtype, accumulate, f"{name} of U",
                           device=device)]
        bad = np.union1d(badL, badU)
        stats.update(symmetric=False, pattern_nnz_blocks_U=int(ui.size))
    stats["stage_times"] = dict(factor=t_factor, pattern=t_pattern, solve=t_solve,
                                store=time.perf_counter() - t1)
    if bad.size:
        warnings.warn(
            f"{name}: {bad.size} block triangular local system(s) ill-conditioned (block rows "
            f"{rows_text(bad)}); they keep only their diagonal block T_ii^-1 (see "
            f"mpsolve.precond.block_ilu); listed in .fallback_rows", PreconditionerWarning,
            stacklevel=4)
    return OperatorChain(ops), bad, stats
