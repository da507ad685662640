"""ILUT: threshold incomplete LU with partial pivoting, for the matrices ILU(0) cannot take.

ILU(0) keeps the pattern of ``A`` and pivots on the diagonal as it is.  On the zero-diagonal
SuiteSparse matrices it fails even after the MC64 permutation and scaling
(:mod:`._reorder`): rajat19 and qh1484 meet an exact zero pivot, west1505 gives singular
factors (GMRES happy breakdown, -13), west0479 needs 510 iterations right-preconditioned
(left: not in 5000), dw8192 does not converge in 5000.  A dual-threshold ILU with row
pivoting (Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed., Section 10.4:
ILUT(p, tau), and ILUTP) solves all five: GMRES(30), true
residual 1e-8, MC64 first, ``drop_tol = 1e-3``, ``fill_factor = 10``, FP32 factors: 3, 3,
6, 10 and 10 iterations right-preconditioned (5, 5, 6, 47, 11 left), in 0.03-0.1 s here.
mhd4800a is beyond any dropping ILUT (1e-3 ... 1e-6 give non-finite values); only the
complete factorisation (``drop_tol=0``) in FP64 solves it -- :mod:`mpsolve.auto`'s last
resort.

The factorisation is SuperLU's ILUTP (:func:`scipy.sparse.linalg.spilu`: row pivoting with
threshold, COLAMD column ordering, dropping relative to the column norm), run once in FP64
on the host: ``Pr A Pc ~ L U``.  Only the set-up is SciPy's: the factors are stored in
``dtype`` as ILU(0)'s two-sweep operator (:class:`~mpsolve.operator.TriangularSweeps`, each
row's sum in FP64) on the preconditioner's device, and applied as
``out = Pc (L U)^-1 Pr r`` with the two permutations as gathers.  The rows and then the
columns of ``A`` are first scaled by powers of 2 so that each one's largest entry is near 1
(:func:`equilibrate`): ILUTP's dropping and pivoting are not scale-invariant, and without
it they fail on badly scaled matrices that ILU(0) takes.

On symmetric (Hermitian) ``A`` with a positive diagonal the default is the symmetric form
(:meth:`ILUT._symmetric_factor`): SuperLU in symmetric mode on ``S A S`` (diagonal pivots,
one permutation for rows and columns), only ``U`` kept and ``L = (D^-1 U)^H`` read off it,
as ILU(0)'s IC(0) form -- so ``M`` is symmetric positive definite and CG can use it (the
pivoting form broke CG down on a biharmonic problem; the symmetric one takes 10 iterations
there, and 3-6 on finite-element and coefficient-jump problems).
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from mpsolve.backend import array_module, to_device
from mpsolve.operator import TriangularSweeps

from ._util import (PreconditionerWarning, ThreadBuffers, check_amount, empty_lines_text,
                    wide_dtype)
from ._scaling import col_abs_max, pow2_inverse, row_abs_max
from .base import Preconditioner
from .ilu import (GROWTH_LIMIT, ZeroPivotError, apply_growth, dominance_shift, first_shift,
                  is_symmetric, negative_diagonal, positive_diagonal, shift_off_diagonal)

__all__ = ["ILUT"]


def sweep_layout(L, U):
    """ILU(0)'s stored layout from unit lower ``L`` and upper ``U`` (SciPy sparse, FP64 or
    complex128):
    strictly lower ``L`` (CSR), strictly upper ``D^-1 U`` with rows in reverse order, and
    ``1 / diag(U)``."""
    n = L.shape[0]
    Ls = sp.tril(sp.csr_matrix(L), -1, format="csr")
    Ls.sort_indices()
    U = sp.csr_matrix(U)
    d = U.diagonal()
    Us = sp.csr_matrix(sp.diags(1.0 / d) @ sp.triu(U, 1, format="csr"))[::-1, :]
    Us = sp.csr_matrix(Us)
    Us.sort_indices()
    idx = lambda a: a.astype(np.int32)            # noqa: E731
    return (idx(Ls.indptr), idx(Ls.indices), Ls.data, idx(Us.indptr), idx(Us.indices),
            Us.data, 1.0 / d, n)


#: A row with more entries than this many times the mean (and than COLAMD's own dense-row
#: bound, 10 sqrt(n)) is dense: SuperLU's ILU under the COLAMD column ordering costs
#: O(n) per column with one (an arrow matrix: 6.9 s at n = 20000, 178 s at 100000);
#: the minimum degree ordering of A + A^T puts it last (0.23 s at 20000).  COLAMD stays
#: the rule otherwise: it pivots where MMD(A + A^T) leaves rajat19's factor singular.
DENSE_ROW = 16


def column_ordering(C) -> str:
    """SuperLU's ``permc_spec`` for the ILUT of CSR ``C``: ``"MMD_AT_PLUS_A"`` where ``C``
    has a dense row (:data:`DENSE_ROW`), else ``"COLAMD"`` (SciPy's default)."""
    n = C.shape[0]
    if n == 0 or C.nnz == 0:
        return "COLAMD"
    longest = int(np.diff(C.indptr).max())
    dense = longest > max(DENSE_ROW * C.nnz / n, 10.0 * np.sqrt(n))
    return "MMD_AT_PLUS_A" if dense else "COLAMD"


def equilibrate(C):
    """Row and column scale factors ``(r, c)`` that bring the largest entry of every row,
    then of every column, of ``diag(r) C diag(c)`` into ``[1, 2)`` (LAPACK's ``dgeequb``
    rule: powers of 2, so scaling rounds nothing; a matrix already so scaled, as MC64
    leaves it, is left alone); 1 for an empty line.

    SuperLU's ILUTP drops relative to column norms and pivots by a threshold on the
    column, so its factors depend on the scaling of the rows: on a convection-diffusion
    matrix with rows scaled by 1e-3..1e3 it reports the factor exactly singular, and on a
    diagonally dominant random matrix its factors grow to 1e60, where the equilibrated
    matrix factors well (``tests/test_symmetry.py``)."""
    C = sp.csr_matrix(C)
    r = pow2_inverse(row_abs_max(C))
    return r, pow2_inverse(col_abs_max(C, r))


#: ``ILUT(symmetric=None)`` keeps the symmetric form only where it needs no shift above
#: this (``s`` of :func:`~.ilu.first_shift`'s sequence: 0.064 passes, 0.256 does not); a larger
#: shift means ``A`` is far from positive definite, where the pivoting general form is the
#: better preconditioner.  GMRES(30) right-preconditioned, iterations symmetric / general:
#: Poisson 2-D minus 0.05 I (shift 0.016) 55 / 117, Poisson 3-D minus 0.3 I (0.016)
#: 83 / 387, real Helmholtz n = 10^4, k = 30 (0.064) 1761 / 5259, biharmonic minus 3 I
#: (0.256) no convergence in 9000 / 5.
SHIFT_DETECTED = 0.1


def _spd_looking(C, host) -> bool:
    """Symmetric (complex: Hermitian) ``C`` (:func:`~.ilu.is_symmetric`) with a real
    positive diagonal: ILUT's symmetric form applies."""
    return positive_diagonal(C) and is_symmetric(C, host)


class ILUT(Preconditioner):
    """Threshold ILU with pivoting (SuperLU's ILUTP), applied as two sweeps.

    Parameters
    ----------
    drop_tol : float
        Entries smaller than ``drop_tol`` times their column's norm are dropped (default 1e-3).
    fill_factor : float
        At most about ``fill_factor * nnz(A)`` entries in ``L + U`` (default 10).  With
        ``drop_tol=0`` and a bound that cannot bind (``fill_factor * nnz(A) >= n^2 + n``)
        the factorisation is a complete LU, computed by SuperLU's supernodal ``splu`` (the
        same pivoting; ``stats["factorisation"]`` says which code ran).
    dtype : {"float32", "float64"} or None
        Storage precision of the factors (complex64 / complex128 for a complex ``A``,
        factorised in complex128).
    symmetric : bool or None
        ``None`` (default): the symmetric form where ``A`` is symmetric (complex:
        Hermitian; :func:`~mpsolve.precond.ilu.is_symmetric`) with a positive diagonal --
        an incomplete Cholesky with threshold, ``M`` symmetric positive definite for CG
        (:meth:`_symmetric_factor`; shifted where a pivot is not positive, ``shift``, by
        at most :data:`SHIFT_DETECTED`) -- else the general form, SuperLU's ILUTP with row
        pivoting on the equilibrated matrix.  A symmetric ``A`` with a negative diagonal
        (negative definite-looking) gets the symmetric form of ``-A``, negated: ``M``
        symmetric negative definite, for CG on a negative definite ``A``
        (``stats["negated"]``).  ``True``: the symmetric form (any shift) or an error;
        ``False``: the general form.

    Attributes
    ----------
    symmetric : bool
        After set-up: whether the symmetric form was used (``stats["form"]``).
    shift : float or None
        The shift of the symmetric form, where one was needed.

    Raises
    ------
    ZeroPivotError
        At setup, when SuperLU finds the factor exactly singular.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from mpsolve.precond import ILUT
    >>> A = sp.csr_matrix(np.array([[0.0, 4.0, 0.0], [2.0, 1.0, 0.0], [0.0, 1.0, 3.0]]))
    >>> M = ILUT(dtype="float64").setup(A)        # pivots past the zero diagonal
    >>> bool(np.allclose(M.matvec(A @ np.ones(3)), 1.0))
    True
    """

    name = "ilut"
    supports_complex = True      # SuperLU factorises complex128 (stored complex64/128)
    symmetric = False

    def __init__(self, drop_tol=1e-3, fill_factor=10.0, dtype=None, symmetric=None):
        super().__init__(dtype)
        if symmetric not in (None, True, False):
            raise ValueError(f"symmetric={symmetric!r}: use True, False or None (detect)")
        self._symmetric_request = symmetric
        self.shift = self._shift = None
        self.drop_tol = check_amount(drop_tol, "drop_tol")
        self.fill_factor = check_amount(fill_factor, "fill_factor", least=1.0)
        self.stats = {}
        self._buf = ThreadBuffers()

    def _setup(self, C, dtype):
        sym = negate = False
        A = C
        if self._symmetric_request is not False:
            sym = _spd_looking(C, self._setup_device)
            if not sym and negative_diagonal(C) and is_symmetric(C, self._setup_device):
                # negative definite-looking: the symmetric form of -A, M negated (D^-1:
                # the sweeps' result changes sign exactly)
                C, sym, negate = sp.csr_matrix(-C), True, True
            if self._symmetric_request and not sym:
                raise ValueError("ILUT(symmetric=True): A is not symmetric (Hermitian) with a "
                                 "positive (or an all negative) diagonal; use symmetric=None "
                                 "or False")
        # detected (symmetric=None): shifts up to SHIFT_DETECTED only; asked for: any
        got = self._symmetric_factor(C, None if self._symmetric_request else
                                     SHIFT_DETECTED) if sym else None
        if sym and got is None and self._symmetric_request:
            raise ZeroPivotError("ILUT(symmetric=True): no shift up to the diagonal "
                                 "dominance bound gives positive pivots (A is probably not "
                                 "positive definite); use symmetric=None")
        if got is None:
            got = self._general_factor(C)
        L, U, perm_r, perm_c, r, c, form, order, complete = got
        self.symmetric = form == "symmetric"
        n = C.shape[0]
        lptr, lind, lval, uptr, uind, uval, dinv, n = sweep_layout(L, U)
        if negate:
            dinv = -dinv                        # M = -(L D U')^-1: the inverse of A's form
        if not (np.isfinite(uval).all() and np.isfinite(dinv).all()):
            raise ZeroPivotError(f"ILUT(drop_tol={self.drop_tol:g}): the factors are not "
                                 "finite; lower drop_tol"
                                 + (" or use reorder='mc64'" if self.reorder_hint else ""))
        self._op = TriangularSweeps(lptr, lind, lval, uptr, uind, uval, dinv,
                                    np.array([0, n], np.int64), dtype, what="ILUT",
                                    device=self.device)
        # Pr A Pc = L U, Pr[perm_r[i], i] = 1, Pc[i, perm_c[i]] = 1 (SciPy's SuperLU):
        # A^-1 r = Pc U^-1 L^-1 Pr r, i.e. t[perm_r] = r, out = ((LU)^-1 t)[perm_c]
        pr_inv = np.empty(n, np.int64)
        pr_inv[perm_r] = np.arange(n)
        scaled = not (np.all(r == 1.0) and np.all(c == 1.0))
        self._xp = array_module(self.device)
        self._pr = to_device(pr_inv, self.device)              # t = r[pr_inv]
        self._pc = to_device(perm_c.astype(np.int64), self.device)  # out = z[pc]
        # the row scaling in the order t is gathered in, and the column scaling (None: 1)
        self._r = to_device(r[pr_inv], self.device) if scaled else None
        self._c = to_device(c, self.device) if scaled else None
        self._buf = ThreadBuffers()
        self.shift = self._shift
        self.stats = {"fill": float((lval.size + uval.size + n) / max(C.nnz, 1)),
                      "drop_tol": self.drop_tol, "ordering": order, "equilibrated": scaled,
                      "form": form, "shift": self._shift,
                      "factorisation": "complete LU (splu)" if complete else "ILUTP (spilu)",
                      "growth": self._growth(A), "negated": negate}
        if not self.stats["growth"] <= GROWTH_LIMIT:
            warnings.warn(
                f"ILUT(drop_tol={self.drop_tol:g}, fill_factor={self.fill_factor:g}): "
                f"unstable factors: ||M A e - e||_inf = {self.stats['growth']:.1e} for e = "
                f"ones, over {GROWTH_LIMIT:.1e}; a Krylov method will probably stall with "
                "this M: lower drop_tol or raise fill_factor"
                + (", or use reorder='mc64'" if self.reorder_hint else ""),
                PreconditionerWarning, stacklevel=4)

    def _growth(self, C) -> float:
        """``||M (C e) - e||_inf`` for ``e`` the ones vector (``inf`` where not finite):
        how far the stored preconditioner moves a smooth vector, ILU(0)'s stability test
        (:data:`mpsolve.auto.ILU_GROWTH_LIMIT`, Chow & Saad 1997) applied to ILUT's factors
        as stored.  Dropping and pivoting together can give factors whose triangular
        solves amplify without bound although every pivot passed SuperLU's test: on a
        central-difference convection-diffusion matrix scaled ``D1 A D2`` by random
        powers of 10 over 1e-6..1e6, ILUTP(1e-3) gave a growth of 1e16 and GMRES(30)
        stalled at 3.5e-4 (ILU(0), growth 30, converged in 24 iterations).  One SpMV and
        one apply, in FP64."""
        return apply_growth(self._apply, self.device, C, np.ones(C.shape[0]))

    def _complete(self, C) -> bool:
        """Nothing dropped and a fill bound that cannot bind: a complete factorisation."""
        n = C.shape[0]
        return self.drop_tol == 0.0 and self.fill_factor * max(C.nnz, 1) >= n * n + n

    def _factor(self, Cc, order, symmetric):
        """SuperLU on CSC ``Cc``: ILUTP (``spilu``), or the complete LU when nothing is
        dropped and the fill bound cannot bind (supernodal ``splu``, BLAS-3 panels: the
        same factors 1.6-1.9x faster -- random sparse n = 5000: 4.4 s against 7.9 s;
        af23560 0.82 s against 1.38 s).  ``symmetric``: SuperLU's symmetric mode
        (diagonal pivots, the same permutation of rows and columns)."""
        complete = self._complete(Cc)
        thresh = 0.0 if symmetric else 0.1
        opts = {"SymmetricMode": True} if symmetric else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)
            if complete:
                return spla.splu(Cc, permc_spec=order, diag_pivot_thresh=thresh,
                                 options=opts or {}), complete
            return spla.spilu(Cc, drop_tol=self.drop_tol, fill_factor=self.fill_factor,
                              permc_spec=order, diag_pivot_thresh=None if opts is None
                              else thresh, options=opts or {}), complete

    def _general_factor(self, C):
        """ILUTP of the equilibrated ``R C S`` (:func:`equilibrate`): ``Pr (R C S) Pc ~ L
        U`` with SuperLU's threshold row pivoting, ``M = S Pc (L U)^-1 Pr R``."""
        self._shift = None
        r, c = equilibrate(C)
        if not (np.all(r == 1.0) and np.all(c == 1.0)):
            C = sp.csr_matrix(sp.diags(r) @ C @ sp.diags(c))
            C.sort_indices()
        order = column_ordering(C)
        Cc = sp.csc_matrix(C, dtype=wide_dtype(C.dtype))
        try:
            try:
                F, complete = self._factor(Cc, order, False)
            except RuntimeError as first:
                # the other ordering's pivots: COLAMD where MMD(A + A^T) leaves rajat19's
                # factor singular, MMD(A + A^T) where COLAMD leaves a 3-D coefficient-jump
                # matrix's (jump3d:30) singular
                other = "MMD_AT_PLUS_A" if order == "COLAMD" else "COLAMD"
                try:
                    F, complete = self._factor(Cc, other, False)
                except RuntimeError:
                    raise first from None
                order = other
        except RuntimeError as err:
            # SuperLU's text, less its source location ("[0]: matrix is singular at
            # line 148 in file .../ilu_dpivotL.c")
            what = re.sub(r"^\[\d+\]:\s*|\s+at line \d+ in file \S+", "",
                          str(err).strip().splitlines()[0] if str(err).strip() else "")
            empty = empty_lines_text(C)
            raise ZeroPivotError(
                f"ILUT(drop_tol={self.drop_tol:g}): SuperLU: {what or 'factorisation failed'}"
                + (f"; A is structurally singular ({empty}): no factorisation exists"
                   if empty else "; lower drop_tol or raise fill_factor"
                   + (", or reorder='mc64'" if self.reorder_hint else ""))
            ) from None
        return F.L, F.U, F.perm_r, F.perm_c, r, c, "general", order, complete

    def _symmetric_factor(self, C, most=None):
        """The symmetric form for symmetric (Hermitian) ``C`` with a positive diagonal: the
        ILUT of ``S C S`` (``S`` the powers of 2 nearest ``diag(C)^-1/2``: symmetric
        equilibration) by SuperLU in symmetric mode -- minimum degree on ``C + C^T``, the
        diagonal pivots -- and only its upper factor kept: ``S C S ~ U^H D^-1 U`` (``D =
        diag(U)``; ``U = D L^H`` in exact arithmetic without dropping), so ``M = S P (U^H
        D^-1 U)^-1 P^T S`` is symmetric (Hermitian), and positive definite when the pivots
        ``D`` are positive: an incomplete Cholesky with threshold, for CG.  Where a pivot is
        not positive the off-diagonal entries are divided by ``1 + s`` (Manteuffel's
        shift, as :class:`ILU0`'s) for ``s`` of :func:`~.ilu.first_shift`'s sequence, up
        to the bound that makes the shifted matrix diagonally dominant, or up to ``most``
        (not for a complete factorisation, ``drop_tol=0``: shifted, it would no longer be
        exact).  ``None`` where that fails (or SuperLU does): the general form is used."""
        d = C.diagonal().real
        sc = np.ldexp(1.0, 1 - np.frexp(np.sqrt(d))[1])    # scaled diagonal in [1, 4)
        B = sp.csr_matrix(sp.diags(sc) @ C @ sp.diags(sc), dtype=wide_dtype(C.dtype))
        B.sort_indices()

        def attempt(s):
            try:
                F, complete = self._factor(sp.csc_matrix(shift_off_diagonal(B, s) if s else B),
                                           "MMD_AT_PLUS_A", True)
            except RuntimeError:
                return None
            if not np.array_equal(F.perm_r, F.perm_c):
                return None
            U = sp.csr_matrix(F.U)
            piv = U.diagonal()
            if not (np.all(np.isfinite(U.data)) and np.all(piv.real > 0)):
                return None
            if piv.dtype.kind == "c":
                # a Hermitian C's pivots are real, SuperLU's carry rounding (and dropping)
                # in their imaginary parts (1e-6 relative seen): with them U^H D^-1 U is not
                # Hermitian, so the real parts are the pivots
                piv = piv.real
                U.setdiag(piv)
            Lh = sp.csr_matrix((sp.diags(1.0 / piv) @ U).conj().T)      # unit lower
            return Lh, U, F.perm_r, F.perm_c, sc, sc, "symmetric", "MMD_AT_PLUS_A", complete

        got, self._shift = attempt(0.0), None
        if got is None and not self._complete(B):   # (a shifted complete LU is not exact)
            got, self._shift = first_shift(attempt, dominance_shift(B), most)
        return got

    def _linear(self):
        """Two exact permutations around ILU(0)'s sweeps (FP64 row sums): linear
        (:meth:`Preconditioner.linear_apply`)."""
        return True

    def apply(self, r, out):
        r = self._check_vectors(r, out)
        self._apply(r, out)

    def _apply(self, r, out):
        xp = self._xp
        key = r.dtype.char + out.dtype.char
        b = self._buf.d.get(key)
        if b is None:
            b = self._buf.d[key] = (xp.empty(r.shape[0], r.dtype), xp.empty(r.shape[0], out.dtype),
                                    self._op.bind(r.dtype, out.dtype))
        t, z, sweeps = b
        xp.take(r, self._pr, out=t)               # t = Pr R r (powers of 2: exact)
        if self._r is not None:
            xp.multiply(t, self._r, out=t)
        sweeps(t, z)                              # z = (L U)^-1 t
        xp.take(z, self._pc, out=out)             # out = S Pc z
        if self._c is not None:
            xp.multiply(out, self._c, out=out)

    def _transpose_operator(self):
        """``M = C G_c (LU)^-1 R G_r`` (``G_p v = v[p]``, ``R``, ``C`` the scalings), so
        ``M^T = G_r^T R (LU)^-T G_c^T C``: a gather by the inverse column permutation, the
        transposed sweeps, a gather by the inverse row permutation, with the scalings
        gathered to match."""
        xp, n = self._xp, self.shape[0]
        ipc = xp.empty(n, np.int64)
        ipc[self._pc] = xp.arange(n)
        ipr = xp.empty(n, np.int64)
        ipr[self._pr] = xp.arange(n)
        c = None if self._c is None else self._c[ipc]
        rs = None if self._r is None else self._r[ipr]
        sweeps = self._op.transposed()
        buf = ThreadBuffers()

        def f(r, out):
            key = r.dtype.char + out.dtype.char
            b = buf.d.get(key)
            if b is None:
                b = buf.d[key] = (xp.empty(n, r.dtype), xp.empty(n, out.dtype),
                                  sweeps.bind(r.dtype, out.dtype))
            t, z, solve = b
            xp.take(r, ipc, out=t)                  # t = G_c^T C r
            if c is not None:
                xp.multiply(t, c, out=t)
            solve(t, z)                              # z = (LU)^-T t
            xp.take(z, ipr, out=out)                 # out = G_r^T R z
            if rs is not None:
                xp.multiply(out, rs, out=out)

        return f
