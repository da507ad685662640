"""``method="auto"`` / ``precond="auto"``: analyse ``A`` once, choose, fall back, record.

House rule 13: defaults are chosen from the data and recorded in the result.  The solve
layer's automatic choice, written once for every device:

1. :func:`analyse` -- a few passes over the nonzeros (about as much as three SpMVs: the
   diagonal, row sums of ``|A|``, ``A - A^T``, the block size): symmetry, sign and size of
   the diagonal, diagonal dominance, zero and tiny diagonal entries, block size, row-length
   spread, the range of the values.  Its cost is in :attr:`SolveResult.analysis`.  The
   block size is detected when a candidate first needs it (the SPD approximate inverse:
   ISAI or Block-ISAI), so the solves that end before that candidate skip it.
2. :func:`candidates` -- an ordered list of (method, preconditioner) with the reason for each:

   * symmetric with a positive diagonal (SPD-looking): CG + IC(0) (``ilu0``, symmetric form,
     with Manteuffel's shift where an unshifted pivot is not positive, as PETSc's ``ICC``
     does: without it IC(0) breaks down on most SuiteSparse stiffness matrices,
     bcsstk13-18, nos1, plat362), then CG + ISAI ``spd`` (Block-ISAI when a block size > 1
     is detected), then GMRES + ILU(0), then GMRES + ILUT + MC64.  IC(0) first because it
     needed fewer CG iterations than ISAI ``spd`` on 12 of the 17 SPD SuiteSparse matrices
     (FP32 factors; nos3 49 vs 109, s1rmq4m1 92 vs 270, bcsstk16 40 vs 82; more on bcsstk09,
     10 and 21: 143 vs 100 on bcsstk09) and on every generated SPD problem
     (``bench/results/setup.md``), and its set-up is cheaper;
   * nonsymmetric with a zero-free, not tiny diagonal: BiCGSTAB + ILU(0), then GMRES(30)
     with the same ILU(0) (set up once), then GMRES + ISAI (circuit matrices: add20
     172 -> 23, memplus 582 -> 53), then GMRES + ILUT + MC64.  ILU(0) needs the fewest
     iterations on the sherman/orsirr/fs matrices; BiCGSTAB with it took less time than
     GMRES(30) on 17 of 26 nonsymmetric test matrices (0.82x in geometric mean; sherman3
     83 against 407 iterations, rdb2048 146 against 2341), more on watt_2 (85 against 10)
     and olm1000, and where it stagnates GMRES continues from its iterate (jpwh_991).
     ILU(0) factors whose triangular solves are unstable (``||M A e - e||`` over
     :data:`ILU_GROWTH_LIMIT`, Chow & Saad's test; a nonsymmetric ``M`` that fails it is
     tested again on the equilibrated matrix, :func:`equilibrated_growth`, since ILU(0) is
     indifferent to the units of rows and columns and the ones vector is not) are refused
     at set-up, for every class, and so are ILUT's (its set-up measures the same growth):
     af23560's stagnate with either method, in FP64 too;
   * a zero or tiny diagonal entry (``|a_ii| <= sqrt(eps) max_j |a_ij|``, as stored and
     with rows and columns equilibrated:
     :func:`~mpsolve.precond._scaling.tiny_after_equilibration`): GMRES + ILUT with the
     MC64 permutation and scaling first (:mod:`mpsolve.precond._reorder`: solves
     west0479, west1505, rajat19, qh1484, dw8192, where ILU(0) + MC64 solves one of five),
     then a finer ILUT (``drop_tol=1e-5``, ``fill_factor=30``) + MC64, then the direct
     fallback below (mhd4800a), then GMRES + ISAI + MC64.  Tiny but no zero diagonal
     entries: the ILU(0) candidates of the class first (elimination can make those
     pivots large again), with ILU(0)'s ``pivot_tol = sqrt(eps)``, so that factors with a
     pivot that small next to its row are refused at set-up and MC64 + ILUT is next:
     sherman2 (two tiny diagonal entries, smallest ILU(0) pivot 1.6e-5 of its row)
     takes 1.1 ms with BiCGSTAB + ILU(0) against 18 ms for MC64 + ILUT.
   * every class ends with (or, weak diagonal, includes) the direct fallback: GMRES on a
     complete LU with pivoting of the MC64-scaled matrix in FP64 (mhd4800a needs it; so
     did plat362 while the stagnation window was a fixed 300 iterations), as long as its
     fill bound stays under ``DIRECT_MAX_ENTRIES``;
   * and, when no preconditioner at all could be set up (a structurally singular ``A``:
     an empty row or column, which MC64 and every factorisation refuse) or none converged
     (a singular ``A`` whose factors are exactly singular and whose ISAI stagnates), GMRES
     with the diagonal scaling (a zero diagonal entry: its row's largest) on the
     iterations left -- GMRES alone only where even that cannot be set up: a consistent
     singular system still has solutions, and GMRES finds one; an inconsistent one ends
     with its stagnation or breakdown, named in the status.

   * an operator without entries (a ``LinearOperator``): GMRES without a preconditioner --
     after CG where two products with fixed random vectors find it symmetric with ``u^T A
     u > 0`` (:func:`probe_operator`).

   GMRES runs right-preconditioned (its residual estimate is then the true residual's, which
   the stagnation test below reads) with restart 30 (PETSc's).
3. :func:`auto_solve` -- runs the candidates in order, each from the best iterate so far
   (the smallest FP64 true residual, the start included), within the
   caller's iteration budget (all candidates together).  A candidate is left for the next one
   when its set-up fails (zero pivot, zero diagonal, structurally singular, unstable
   ILU(0) factors, ...), when it
   breaks down (CG curvature breakdown -> GMRES; BiCGSTAB rho/omega; non-finite values), when
   it stagnates (the FP64 true residual, checked every ``CHECK_EVERY`` iterations, has not
   halved over the last ``STAGNATION_WINDOW`` iterations or the last half of the candidate's
   iterations, whichever is longer), or when it has used its share of the budget
   (half of what is left; the last candidate gets all of it; GMRES's share counts its inner
   iterations, capped across restarts, refinement steps and escalations).  FP32 range
   problems are the driver's: it escalates to a stronger precision (recorded in ``escalations``).
   Where no candidate converges, the answer is the best iterate (a candidate's, or the
   start where every one ended above it), and the status says whose.

Every candidate tried, with its reason and outcome, is in :attr:`SolveResult.choices`; the
answer is judged by its FP64 true residual as always (never a false success).  The same
matrix gives the same choices on every run: the analysis has no randomness and no timing.
"""
from __future__ import annotations

import math
import warnings
import time
import dataclasses
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

from ._demote import PrecisionRangeError
from .backend import HOST_DEVICE, array_module, on_host
from .kernels import lookup
from .kernels.safenorm import all_finite, norm
from .precond.base import Preconditioner, needs_setup, setup_for_solve
from .precond._scaling import tiny_after_equilibration
from .precond.ilu import GROWTH_LIMIT, equilibrated_growth, ilu_growth, is_symmetric
from ._sparse import canonical_csr, check_matrix
from ._configure import configure, is_auto
from ._system import check_basis, derive_problem, make_problem, needs_entries_error
from .driver import (DD_MET, FAR_ABOVE, ROUNDED, UNDERFLOWED, answer_residual, iterate,
                     rounded_text)
from .krylov import BODIES
from .backend import to_device, to_host
from .precision import as_precision
from .precond._util import PreconditionerWarning
from .result import (AUTO_FAILED, BREAKDOWNS, PERIOD_ATTR, USER_STOP, SolveResult,
                     status_text, symmetry_word, wants_stop)

#: the words that start :data:`~mpsolve.driver.ROUNDED`'s status
ROUNDED_HEAD = ROUNDED.split("{", 1)[0]

__all__ = ["Analysis", "Choice", "analyse", "candidates", "auto_solve", "plan", "candidate_side",
           "set_up_candidate", "DEFAULT_AUTO_MAXITER"]

#: Iteration budget of ``method="auto"`` when the caller gives none: Krylov iterations of
#: all candidates together (the budget of the coverage table and of PETSc's comparisons).
DEFAULT_AUTO_MAXITER = 5000
#: The stagnation test reads the FP64 true residual every this many iterations ...
CHECK_EVERY = 30
#: ... and calls a candidate stagnated when it has not halved over this many iterations, or
#: over the last half of the candidate's iterations where that is longer.  A fixed window
#: alone stopped CG + IC(0) on plat362 at 990 iterations (true residual 2.9e-7, halving
#: about every 300-400 iterations between plateaus), which converges at 2175; half the run
#: keeps the test a test of the rate, while the budget share still bounds what a truly
#: stagnated candidate costs.
STAGNATION_WINDOW = 300
#: A diagonal entry is "tiny" when ``|a_ii| <= TINY * max_j |a_ij|`` (TINY = sqrt(eps)).
TINY = float(np.sqrt(np.finfo(np.float64).eps))
_NAMES = {"cg": "CG", "gmres": "GMRES", "bicgstab": "BiCGSTAB"}
EPS = float(np.finfo(np.float64).eps)
#: GMRES restart length of the automatic choice (PETSc's default).
AUTO_RESTART = 30


@dataclass
class Analysis:
    """What :func:`analyse` found out about ``A`` (and how long it took)."""

    n: int
    nnz: int
    symmetric: bool
    positive_diagonal: bool
    zero_diagonal: int               # rows with a zero (or missing) diagonal entry
    tiny_diagonal: int               # rows with 0 < |a_ii| <= TINY max_j |a_ij|
    dominant_rows: float             # fraction of rows with |a_ii| >= sum_{j != i} |a_ij|
    row_length_spread: float         # longest row / mean row length
    value_range: float               # log10(max |a_ij| / min |a_ij|) over the nonzeros
    fits_float32: bool               # every nonzero is a normal FP32 number
    time: float = 0.0
    #: complex ``A``: ``symmetric`` then means Hermitian (``A == A^H``, what CG needs; a
    #: complex-symmetric ``A == A^T`` is not) and ``positive_diagonal`` a real positive one
    is_complex: bool = False
    #: the node block size, found when first asked for (:attr:`block_size`): only the
    #: SPD approximate inverse candidate uses it, so a solve whose IC(0) converges does not
    #: pay for the detection (1.8 ms of bcsstk16's 4.7 ms analysis); ``None`` until then
    _block_size: Optional[int] = None
    block_time: float = 0.0          # seconds the block-size detection took, once run

    @property
    def block_size(self) -> int:
        """The block size of ``A``'s node blocks (:func:`mpsolve.precond.detect_block_size`),
        detected on first use; its cost goes to :attr:`block_time`."""
        if self._block_size is None:
            from .precond import detect_block_size

            t0 = time.perf_counter()
            C = getattr(self, "_csr", None)
            self._block_size = int(detect_block_size(C)) if C is not None and self.n else 1
            self.block_time = time.perf_counter() - t0
            self.time += self.block_time
            self._csr = None
        return self._block_size

    @property
    def block_size_known(self) -> bool:
        return self._block_size is not None

    @property
    def weak_diagonal(self) -> bool:
        return self.zero_diagonal > 0 or self.tiny_diagonal > 0

    @property
    def spd_like(self) -> bool:
        return self.symmetric and self.positive_diagonal

    def as_dict(self) -> dict:
        """The fields; ``block_size`` is ``None`` where no candidate needed it."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "_block_size"}
        d["block_size"] = self._block_size
        return d

    def __str__(self):
        kind = symmetry_word(self.symmetric, self.is_complex) + \
            (", positive diagonal" if self.positive_diagonal else "")
        weak = (f", {self.zero_diagonal} zero and {self.tiny_diagonal} tiny diagonal entries"
                if self.weak_diagonal else "")
        return (f"{self.n} x {self.n}, {self.nnz} nonzeros, {kind}{weak}, "
                f"{100 * self.dominant_rows:.0f}% rows diagonally dominant, block size "
                f"{self._block_size if self.block_size_known else 'not needed'}, values "
                f"over 1e{self.value_range:.0f}"
                f"{'' if self.fits_float32 else ' (beyond FP32)'}; analysed in "
                f"{self.time * 1e3:.1f} ms")


@dataclass
class Choice:
    """One candidate of the automatic choice and what became of it."""

    method: str
    precond: Optional[str]
    params: dict
    reason: str
    precision: Optional[str] = None
    outcome: str = "not tried"
    iterations: int = 0
    setup_seconds: float = 0.0           # the preconditioner's set-up (failed or not)
    true_residual: float = float("nan")
    seconds: float = 0.0
    #: ISAI or Block-ISAI by the block size, decided when the candidate is reached
    #: (:func:`resolve_block`): the detection is run only for a solve that gets there
    by_block: bool = False
    #: a last resort: run on the iterations the candidates before it left, and only the
    #: first bare one that sets up (the diagonal scaling, else the method without M)
    bare: bool = False
    #: a CG candidate whose preconditioner must come out symmetric (else the next
    #: candidate): CG chosen by ``method="auto"`` for a preconditioner the caller pinned,
    #: or any CG candidate on a symmetric ``A`` whose preconditioner auto chose
    needs_symmetric_M: bool = False
    #: the policy changes of this candidate's run (the result's ``escalations`` are the
    #: answer's: the candidate whose x is returned)
    escalations: list = field(default_factory=list)

    @property
    def label(self) -> str:
        p = "isai/block-isai" if self.by_block else (self.precond or "none")
        if self.params.get("reorder"):
            p += "+" + self.params["reorder"]
        extra = ", ".join(f"{k}={v}" for k, v in sorted(self.params.items()) if k != "reorder")
        return (f"{self.method} + {p}" + (f" ({extra})" if extra else "")
                + (f" [{self.precision}]" if self.precision else ""))

    def __str__(self):
        if self.outcome == "chosen":    # a Solver's choice at set-up: its solves say the rest
            return f"{self.label}: {self.reason} -> chosen [set-up {self.setup_seconds:.3f} s]"
        head = f"{self.label}: {self.reason} -> {self.outcome}"
        if self.outcome == "not tried" or self.outcome.startswith("skipped"):
            return head
        if self.outcome.startswith("set-up failed"):      # no iteration ran
            return head + f" [{self.seconds:.3f} s]"
        return head + (f" [{self.iterations} it, true residual {self.true_residual:.1e}, "
                       f"{self.seconds:.3f} s]")


def analyse(A, canonical=False) -> Analysis:
    """The cheap analysis of ``A`` (a checked matrix, any SciPy format; ``canonical``: the
    checked canonical CSR of :func:`mpsolve._sparse.canonical_csr`, taken as it is -- a
    solve's own, checked once); see module docstring.

    Examples
    --------
    >>> from mpsolve.auto import analyse, candidates
    >>> from mpsolve.matrices import poisson2d
    >>> an = analyse(poisson2d(8))
    >>> an.symmetric, an.positive_diagonal, an.zero_diagonal, an.block_size
    (True, True, 0, 1)
    >>> [c.label for c in candidates(an)][:2]
    ['cg + ilu0 [mixed]', 'cg + isai (variant=spd) [mixed]']
    """
    t0 = time.perf_counter()
    C = A if canonical else canonical_csr(check_matrix(A, "A"))   # no copy when canonical
    n = C.shape[0]
    cplx = C.dtype.kind == "c"
    if C.dtype.kind not in "fc" or C.dtype.itemsize > (16 if cplx else 8):
        # integers, booleans, long double: the statistics of their FP64 values (what the
        # solve uses), in the dtypes the row scan is compiled for
        C = C.astype(np.float64)
    # one compiled scan of the rows for the diagonal and value statistics
    zero, tiny, dominant, amax, amin, d_pos, longest = lookup(
        HOST_DEVICE, "row_stats", (C.dtype,))(C.indptr, C.indices, C.data, TINY, EPS)
    if tiny:
        # tiny next to its row as stored: and in the equilibrated matrix?  (ILU(0) and
        # its pivots are indifferent to the units of rows and columns: so is this count)
        d = C.diagonal()
        tiny = int(np.count_nonzero(d[tiny_after_equilibration(C, d, TINY)]))
    # the symmetry test of ILU(0)'s symmetric form (same kernel, same tolerance): when auto
    # calls A symmetric, IC(0) is symmetric too and CG may use it
    # (complex: Hermitian, A == A^H, by the same kernel and tolerance)
    mirror = np.empty(C.nnz, np.int32 if C.nnz < 2**31 else np.int64)
    data = C.data.astype(np.complex128 if cplx else np.float64, copy=False)
    symmetric = is_symmetric(C, mirror=mirror)
    f32 = np.finfo(np.float32)
    an = Analysis(
        n=n, nnz=int(C.nnz), symmetric=symmetric,
        positive_diagonal=bool(n and d_pos), is_complex=cplx,
        zero_diagonal=int(zero), tiny_diagonal=int(tiny),
        dominant_rows=float(dominant / n) if n else 1.0,
        row_length_spread=float(longest / max(C.nnz / n, 1)) if n else 1.0,
        # log10 of each (amax / amin overflows where the values span over 1e308)
        value_range=float(math.log10(amax) - math.log10(amin)) if amax > 0 else 0.0,
        fits_float32=bool(amax == 0 or (amax < f32.max / 16 and amin >= f32.tiny)),
    )
    an._csr = C                                  # for the block size, if ever needed
    # the symmetry test's verdict and transpose positions, for ILU(0)'s set-up on these
    # very arrays in this solve (ILU0.mirror_hint): not a dataclass field
    an.mirror_hint = (C.indptr, C.indices, data, symmetric, mirror)
    an.time = time.perf_counter() - t0
    return an


def _precision(an: Analysis):
    """``mixed`` (FP32 preconditioner, FP64 Krylov vectors and A) when the values fit FP32,
    else ``double``; the driver still escalates if the FP32 factors do not fit."""
    if an.fits_float32:
        return "mixed", "FP32 preconditioner (the values fit FP32), FP64 Krylov vectors"
    return "double", "FP64 throughout: some values do not fit FP32"


#: Fill bound (times nnz(A)) of the last resort, a complete LU used as the preconditioner,
#: where ``A`` is too large for the bound of a dense LU (below).
DIRECT_FILL = 50
#: The last resort is a candidate only while its fill bound stays below this many entries
#: (50M: about 600 MB of factors in FP64 with their indices).
DIRECT_MAX_ENTRIES = 50_000_000


def direct_fill_factor(n: int, nnz: int) -> Optional[float]:
    """The last resort's ``fill_factor``: where a dense LU (``n^2 + n`` entries, the most
    ``L + U`` can hold) fits in :data:`DIRECT_MAX_ENTRIES`, a bound that can never bind, so
    the factorisation is complete; else :data:`DIRECT_FILL` while ``DIRECT_FILL nnz`` fits;
    else ``None`` (no last resort).  SuperLU drops what exceeds
    its fill bound even at ``drop_tol=0``: on a random sparse skew-symmetric matrix plus
    ``0.01 I`` (n = 2000, complete LU 116 nnz(A)) the factors bounded at 50 nnz(A) left a
    relative residual of 1e13 in one application, and GMRES stagnated on them."""
    dense = n * n + n
    if dense <= DIRECT_MAX_ENTRIES:
        return max(float(DIRECT_FILL), float(np.ceil(dense / max(nnz, 1))) + 1.0)
    return float(DIRECT_FILL) if nnz * DIRECT_FILL <= DIRECT_MAX_ENTRIES else None


def _direct(an: Analysis) -> List[Choice]:
    """The last resort: ILUT without dropping = SuperLU's LU with threshold pivoting (complete
    where a dense LU would fit -- then by SuperLU's supernodal ``splu``, see
    :class:`~mpsolve.precond.ILUT` -- else fill bounded by ``DIRECT_FILL`` nnz(A):
    :func:`direct_fill_factor`) of the MC64-scaled matrix, as GMRES's preconditioner (GMRES
    then corrects what rounding and any fill bound leave).  mhd4800a needs it: every ILUT
    with dropping (1e-3 ... 1e-6) of it gives non-finite values, the complete one converges
    -- in FP64: its factors stored in FP32 give non-finite values.  So this candidate's
    precision is ``double`` whatever the data.  Always the general (pivoting) LU: the
    symmetric form ILUT detects on a symmetric matrix with a positive diagonal is shifted
    (Manteuffel) where a pivot is not positive, which leaves an indefinite matrix's "LU"
    inexact (``||M A e - e|| = 0.14`` on a shifted 2-D Laplacian, n = 7225: no solution,
    where SuperLU's LU is exact)."""
    fill = direct_fill_factor(an.n, an.nnz)
    if fill is None:
        return []
    complete = fill * max(an.nnz, 1) >= an.n * an.n + an.n
    lu = "a complete LU" if complete else \
        f"an LU with fill bounded at {fill:g} nnz(A) (a dense one would not fit)"
    return [Choice("gmres", "ilut", {"reorder": "mc64", "drop_tol": 0.0, "fill_factor": fill,
                                     "symmetric": False},
                   f"direct fallback: {lu} with pivoting of the permuted, scaled "
                   "matrix, in FP64, GMRES on top", precision="double")]


def _supports_complex(name) -> bool:
    from .precond import REGISTRY
    return name in (None, "none") or bool(getattr(REGISTRY.get(name), "supports_complex", False))


def _complex_candidates(an: Analysis, out: List[Choice]) -> List[Choice]:
    """A complex ``A``: the real list's candidates whose preconditioner handles complex
    matrices (``Preconditioner.supports_complex``; the MC64 reordering matches on
    ``|a_ij|`` and keeps ``A`` complex, so the zero-diagonal candidates stay), then point
    Jacobi (zero-free diagonal) and no preconditioner.  CG only for Hermitian ``A`` with a
    real positive diagonal (``spd_like``): never for a complex-symmetric, non-Hermitian
    one."""
    kept = [c for c in out if _supports_complex(c.precond)]
    first = "cg" if an.spd_like else "gmres"
    if not an.zero_diagonal:
        kept.append(Choice(first, "jacobi", {}, "complex A: point Jacobi"
                           + (" (Hermitian with a positive diagonal: CG)" if an.spd_like
                              else "")))
    if an.spd_like:
        kept.append(Choice("gmres", "jacobi" if not an.zero_diagonal else None, {},
                           "CG failed: GMRES, which needs no positive definite A"))
    kept.append(Choice("gmres", None, {}, "complex A: GMRES without a preconditioner"))
    seen, uniq = set(), []
    for c in kept:
        key = (c.method, c.precond, repr(sorted(c.params.items())))
        if key not in seen:
            seen.add(key)
            uniq.append(c)
    return uniq


def _ilu0_first(an: Analysis, params: dict, why: str) -> List[Choice]:
    """The first candidates of ``an``'s class, ILU(0) with ``params``: CG + IC(0) for an
    SPD-looking ``A``, else BiCGSTAB + ILU(0) then GMRES with the same ILU(0); ``why``
    (if any) replaces the class's reason for the first."""
    if an.spd_like:
        return [Choice("cg", "ilu0", dict(params), why or
                       "symmetric with a positive diagonal: IC(0), Manteuffel-shifted where "
                       "a pivot is not positive (fewer iterations than the SPD approximate "
                       "inverse on 12 of 17 SuiteSparse SPD matrices, and a cheaper set-up)")]
    kind = symmetry_word(an.symmetric, an.is_complex) + (
        " without a positive diagonal" if an.symmetric else "")
    return [Choice("bicgstab", "ilu0", dict(params), why or
                   f"{kind}, with a zero-free diagonal: ILU(0) needs the fewest "
                   "iterations on most such matrices, and BiCGSTAB with it less time than "
                   "GMRES(30) on 17 of 26 test matrices (0.82x in geometric mean, sherman3 "
                   "83 against 407 iterations)"),
            Choice("gmres", "ilu0", dict(params), "BiCGSTAB did not converge (a breakdown, "
                   "a stagnation or its share of the budget): GMRES with the same ILU(0), "
                   "from BiCGSTAB's iterate")]


def _pin_method(an: Analysis, out: List[Choice], method: str) -> List[Choice]:
    """``out`` with the method pinned: its candidates of ``method`` or, where it has none
    (``method="cg"`` on a nonsymmetric ``A``: the user knows best), each preconditioner of
    ``out`` once under ``method``.  Each reason says the method was the caller's and, where
    the preconditioner was first chosen for another method, which and why."""
    def key(c):                                  # the preconditioner a candidate sets up
        return c.precond, repr(sorted(c.params.items())), c.by_block

    first = {}
    for c in out:
        first.setdefault(key(c), c)
    kept = [c for c in out if c.method == method]
    warn = ""
    if not kept:
        if method == "cg" and not an.spd_like:
            herm = "Hermitian" if an.is_complex else "symmetric"
            what = f"not {herm}" if not an.symmetric else f"{herm} without a positive diagonal"
            warn = f" (A is {what}: CG assumes a {herm} positive definite A and may fail)"
        kept = [Choice(method, c.precond, dict(c.params), c.reason, by_block=c.by_block)
                for c in first.values()
                if not (method == "cg" and (c.precond == "ilut" or c.params.get("reorder")))]
    for c in kept:
        o = first[key(c)]
        c.reason = (f"method {method} pinned by the caller{warn}; "
                    + (o.reason if o.method == method else
                       f"the preconditioner of the {o.method} candidate: {o.reason}"))
    return kept or [Choice(method, "jacobi", {}, "method pinned by the caller")]


def candidates(an: Analysis, method="auto", precond="auto") -> List[Choice]:
    """The ordered candidates for ``an`` (see module docstring); ``method`` or ``precond``
    other than ``"auto"`` pins that part of the choice."""
    out: List[Choice] = []
    ilut_mc64 = ("ilut", {"reorder": "mc64"})
    if an.weak_diagonal:
        why = (f"{an.zero_diagonal} zero / {an.tiny_diagonal} tiny diagonal entries: MC64 "
               "permutes large entries to the diagonal, ILUT pivots")
        if not an.zero_diagonal:
            why = "ILU(0) failed: " + why
            out += _ilu0_first(an, {"pivot_tol": TINY},
                               f"{an.tiny_diagonal} tiny, no zero diagonal entries: ILU(0) "
                               "first, refused at set-up if a pivot is tiny next to its row")
        out += [Choice("gmres", *ilut_mc64, why),
                Choice("gmres", "ilut", {"reorder": "mc64", "drop_tol": 1e-5, "fill_factor": 30},
                       "a finer ILUT keeps more of the factors"),
                *_direct(an),
                Choice("gmres", "isai", {"reorder": "mc64"},
                       "an approximate inverse of the permuted matrix needs no pivots")]
    elif an.spd_like:
        fsai = Choice("cg", "isai", {"variant": "spd"}, "IC(0) failed: CG with the SPD "
                      "approximate inverse (FSAI), which cannot break down", by_block=True)
        if an.block_size_known:
            resolve_block(fsai, an)
        out += [*_ilu0_first(an, {}, ""),
                fsai,
                Choice("gmres", "ilu0", {}, "CG failed: GMRES + ILU(0), which need no "
                       "positive definite A"),
                Choice("gmres", *ilut_mc64, "ILU(0) failed: pivoting ILUT after MC64"),
                *_direct(an)]
    else:
        out += [*_ilu0_first(an, {}, ""),
                # a zero-free diagonal needs no MC64 permutation, which can hurt: on a
                # central-difference convection-diffusion matrix (Peclet 2000, ILU(0)
                # refused as unstable) ILUT after MC64 was exactly singular at drop_tol 1e-3
                # and 1e-4; ILUT on A itself converged in 144 GMRES iterations, the whole
                # solve 0.22 s against 1.35 s by way of ISAI's stagnation; af23560 1.42
                # against 1.74 s (176 iterations against ISAI's 347)
                Choice("gmres", "ilut", {}, "ILU(0) failed: threshold ILU with SuperLU's "
                       "partial pivoting, on A itself (a zero-free diagonal)"),
                Choice("gmres", "isai", {}, "ILU(0) failed or was slow: the approximate "
                       "inverse (best on circuit matrices)"),
                Choice("gmres", *ilut_mc64, "both failed: pivoting ILUT after MC64"),
                *_direct(an)]
    if an.is_complex:
        out = _complex_candidates(an, out)
    if method != "auto":
        out = _pin_method(an, out, method)
    if not is_auto(precond):
        seen, pinned = [], []
        for c in out:
            if c.method not in seen:
                # (the candidates' own reasons speak of their preconditioners: not these)
                why = (f"{_NAMES[c.method]} first" if not seen else
                       f"{_NAMES[c.method]} after {_NAMES[seen[-1]]} did not converge")
                seen.append(c.method)
                pinned.append(Choice(c.method, None, {}, f"preconditioner pinned by the "
                                     f"caller; {why}"))
        out = pinned
    else:
        # when every preconditioner's set-up fails (an empty row or column: A structurally
        # singular, which MC64 and the factorisations refuse) or none converged (a singular
        # A whose factors are exactly singular), the method without one, with the budget
        # left: a consistent singular system still has solutions, and GMRES finds one
        bare = method if method != "auto" else "gmres"
        if not any(c.method == bare and c.precond in (None, "none") for c in out):
            # first the diagonal scaling that every matrix with entries has (a zero
            # diagonal entry: its row's largest instead): a structurally singular diagonal
            # A spread over 1e-5..1e5 left GMRES at 0.85 after 330 iterations, scaled it
            # is solved in one; the method alone where not even that sets up (an operator)
            out.append(Choice(bare, "jacobi", {"zero_diagonal": "row"},
                              "no preconditioner could be set up or none converged: the "
                              "method with the diagonal scaling (a zero diagonal entry: "
                              "its row's largest)", bare=True))
            out.append(Choice(bare, None, {}, "no preconditioner could be set up or none "
                              "converged: the method without one", bare=True))
    prec, why = _precision(an)
    for c in out:
        c.precision = c.precision or prec
    return out


def resolve_block(c: Choice, an: Analysis) -> None:
    """Candidate ``c`` (``by_block``) becomes Block-ISAI where ``an`` finds a block size
    above 1 (detected now if not yet), else ISAI."""
    if c.by_block:
        b = an.block_size
        c.precond = "block-isai" if b > 1 else "isai"
        if b > 1:
            c.reason += f"; block size {b}"
        c.by_block = False


class _Monitor:
    """The candidate's callback: the user's callback, the budget share (``None``: the body
    caps the iterations itself) and the stagnation test on the FP64 true residual (read
    every ``every`` calls)."""

    def __init__(self, A, b, bnrm, every, per_call, share, user, period=None):
        self.A, self.b, self.bnrm = A, b, bnrm
        self.every, self.per_call, self.share, self.user = every, per_call, share, user
        # period: CG and BiCGSTAB call the monitor every `period` iterations only
        # (mpsolve.result.callback_period), and their compiled loops run in between
        if period is not None:
            setattr(self, PERIOD_ATTR, period)
        self.calls = 0
        self.best = np.inf
        self.marks = []                   # (iterations, best true residual so far)
        self.why = None

    def __call__(self, xk):
        if self.user is not None and wants_stop(self.user(xk)):
            self.why = "stopped by the callback"
            return True
        self.calls += 1
        it = self.calls * self.per_call
        if self.share is not None and it >= self.share:
            self.why = share_text(self.share)
            return True
        if self.calls % self.every:
            return False
        x = to_host(xk)
        x = x.astype(np.result_type(x.dtype, np.float64))   # FP64 or complex128
        res = norm(self.b - self.A @ x, np)   # compiled, not BLAS (see kernels.safenorm)
        self.best = min(self.best, res)
        self.marks.append((it, self.best))
        window = max(STAGNATION_WINDOW, it // 2)
        old = [m for i, m in self.marks if i <= it - window]
        if old and self.best > 0.5 * old[-1]:
            self.why = f"stagnated: the true residual did not halve in {window} iterations"
            return True
        return False


def share_text(share: int) -> str:
    """A candidate's outcome when it stopped at its share of the budget."""
    return f"used its share of the budget ({share} iteration{'s' if share != 1 else ''})"


def first_share(budget: int) -> int:
    """A candidate's share of the ``budget`` left when more candidates follow: half."""
    return max(1, budget // 2)


def auto_solve(solve, A, b, x0=None, *, method="auto", precond="auto", precision=None, rtol=1e-5,
               atol=0.0, maxiter=None, restart=None, callback=None, escalate=True, side=None,
               device=None, _ran=(), **precond_params) -> SolveResult:
    """:func:`mpsolve.solve` with ``method`` and/or ``precond`` ``"auto"`` (module docstring).

    ``solve`` is :func:`mpsolve.solve` (passed in, so this module does not import the API
    that imports it).  The inputs are validated once, first (the usual errors, naming the
    argument); only a preconditioner's own set-up failure moves on to the next candidate.
    ``_ran``: the :func:`_choice_key` of candidates that ran already on this right-hand
    side (the block solve's choice, for :func:`columns_fallback`): skipped, as the single
    solve goes on after its first candidate.
    """
    t0 = time.perf_counter()
    if isinstance(maxiter, (bool, np.bool_)) or (maxiter is not None and (
            not isinstance(maxiter, (int, np.integer)) or maxiter <= 0)):
        raise ValueError(f"maxiter={maxiter!r}: must be a positive integer (or None: "
                         f"{DEFAULT_AUTO_MAXITER} iterations for method='auto')")
    pinned = None if is_auto(precond) else precond
    problem = make_problem(A, b, x0, rtol=rtol, atol=atol, maxiter=None,   # caller's units:
                           M=pinned if not isinstance(pinned, str) else None, device=device,
                           scale=False)                 # its monitor works on b and x itself
    if method != "auto" and precision is not None:   # the caller's pair: refused as such
        check_basis(method, problem, as_precision(precision, problem.data_dtype))
    budget = DEFAULT_AUTO_MAXITER if maxiter is None else int(maxiter)
    C = problem.A_csr
    probe = probe_operator(problem) if C is None and method == "auto" and \
        problem.bnrm else None
    an, cands = plan(C, method, precond, precond_params, probe)
    bh = to_host(problem.b64)
    analysis_time = time.perf_counter() - t0

    x = x0
    done = 0
    results = []
    ran = []                              # the choice number of each result
    # the answer so far: (index into results, -1 for the start; its relative true residual)
    # -- a failed candidate's x may be far worse than an earlier one's (left-preconditioned
    # GMRES minimises M r; a candidate from a diverged x cancels), and the next candidate
    # starts from the best, not the last
    best = (-1, _start_residual(problem))
    narrow = np.dtype(problem.out_dtype).itemsize < np.dtype(problem.hp).itemsize
    reorderings = {"mirror_hint": getattr(an, "mirror_hint", None)}
    failed = {}                           # id(set-up error) -> (first choice, the error)
    indefinite = False
    bare_ran = False
    ilut_seconds, per_it = 0.0, None      # the ILUT set-ups' time so far; _iteration_cost
    for k, c in enumerate(cands):
        left = budget - done
        if left <= 0:
            break
        if c.precond == "ilut" and ilut_seconds > 0.0:
            per_it = _iteration_cost(problem) if per_it is None else per_it
            cap = max(SETUP_CAP_MIN, left * per_it)
            if ilut_seconds > cap:
                c.outcome = (f"skipped: the ILUT set-ups before it took {ilut_seconds:.1f} s, "
                             f"more than the iterations left are estimated to take "
                             f"({cap:.1f} s), and its factorisation keeps as much or more")
                continue
        if _choice_key(c) in _ran:
            c.outcome = "ran already (the block solve's choice)"
            continue
        if indefinite and c.method == "cg":
            c.outcome = ("skipped: CG broke down on p^T A p <= 0 with a positive definite M, "
                         "so A is not positive definite")
            continue
        if c.bare and (not problem.bnrm or bare_ran):
            # (b = 0: x = 0, said as such by _combine; a bare candidate set up and ran
            # already: the diagonal scaling, the method alone only where it cannot be)
            continue
        # the last preconditioned candidate may take the whole budget: the bare method
        # after it runs on what that one leaves (a failed set-up, a stagnation)
        last = all(cc.bare for cc in cands[k + 1:])
        share = left if last else first_share(left)
        if c.by_block and an is not None and pinned is None:
            resolve_block(c, an)            # its time is the analysis's (block_time)
        ts = time.perf_counter()
        policy = as_precision(precision or c.precision, problem.data_dtype)
        c.precision = policy.name
        m_side = candidate_side(c.method, side)
        try:
            check_basis(c.method, problem, policy)
        except ValueError as err:         # GMRES with a compressed basis on complex data
            c.outcome = f"skipped: {err}"
            continue
        try:
            M = set_up_candidate(c, pinned, precond_params, C, policy, problem.device, m_side,
                                 escalate, reorderings)
        except SETUP_ERRORS as err:
            # an error met again (the MC64 matching's, kept for every candidate that
            # reorders) is named once, by the first choice that met it
            first = failed.setdefault(id(err), (k, err))[0]
            c.outcome = f"set-up failed: {type(err).__name__}: " + (
                f"{err}" if first == k else f"as choice {first + 1}")
            c.seconds = c.setup_seconds = time.perf_counter() - ts
            continue
        finally:
            c.setup_seconds = time.perf_counter() - ts
            if c.precond == "ilut":
                ilut_seconds += c.setup_seconds
        bare_ran = bare_ran or c.bare
        m_restart = min(restart if restart is not None else AUTO_RESTART, share)
        period = None
        if c.method == "gmres":           # called once per cycle; checks at every call
            per_call, every = m_restart, 1
        elif callback is None:            # called every CHECK_EVERY iterations (its period)
            per_call, every, period = CHECK_EVERY, 1, CHECK_EVERY
        else:                             # each iteration, for the user's callback
            per_call, every = 1, CHECK_EVERY
        kw = dict(rtol=rtol, atol=atol, precision=policy, escalate=escalate, device=device)
        if c.method == "gmres":
            kw.update(restart=m_restart, side=m_side, maxiter=max(1, -(-share // m_restart)))
        else:
            kw.update(maxiter=share)
        sub = derive_problem(problem, M=M, maxiter=kw["maxiter"], precond_side=m_side,
                             x0=None if not results else x)
        # GMRES's share is its inner iterations, capped exactly by the body (max_inner,
        # across restarts, refinement steps and escalations); its monitor, called once a
        # cycle, would only estimate them.  CG's and BiCGSTAB's maxiter is exact.
        capped = c.method == "gmres" and sub is not None
        mon = _Monitor(C, bh, problem.bnrm, every, per_call, None if capped else share,
                       callback, period) if C is not None else None
        kw["callback"] = mon if mon is not None else callback
        if sub is None:                   # b needs scaling: the whole solve does it
            r = solve(A, b, x0 if x is None else x, method=c.method, precond=M, **kw)
        else:                             # A and b as checked above, not again
            body_kw, _, _, _ = configure(c.method, M, kw.get("restart"), kw.get("side"))
            if capped:
                body_kw = dict(body_kw, max_inner=share)
            # judged once, as returned, in _combine -- but an answer that is rounded to
            # float32 (complex64) data's dtype is judged by the driver too, which iterates
            # on to a tighter tolerance where that rounding alone takes it over
            r = iterate(c.method, BODIES[c.method], sub, as_precision(policy, sub.data_dtype),
                        callback=kw["callback"], escalate=escalate, body_kw=body_kw,
                        judge_answer=narrow)
        if mon is not None and mon.why is None and not r.converged and r.iterations >= share:
            mon.why = share_text(share)
        c.seconds = time.perf_counter() - ts
        c.iterations = r.iterations
        c.true_residual = r.true_residual
        c.escalations = list(r.escalations)
        done += r.iterations
        results.append(r)
        ran.append(k + 1)
        if all_finite(r.x, np if on_host(r.x) else array_module(problem.device)) and \
                not r.true_residual > best[1]:
            best = (len(results) - 1, r.true_residual)
            x = r.x                       # the next candidate starts from the best answer
        elif best[0] < 0:
            x = None                      # the start: the problem's own (x0, checked)
        else:
            x = results[best[0]].x
        if r.converged:
            c.outcome = "converged"
            break
        if UNDERFLOWED in r.status or ROUNDED_HEAD in r.status:
            # the solution met the tolerance on the scaled system, and loses it to FP64's
            # subnormals in the caller's units -- or, rounded to float32 data's dtype,
            # misses it after the driver's tighter tolerances: as would every other
            # candidate's (an x that *overflows* is this candidate's: the next one may
            # give a finite one)
            c.outcome = "not converged: " + r.status.split("; ", 1)[-1]
            break
        if r.at_floor and (_floor_credible(C, r.true_residual) or (
                r.x_lo is not None and DD_MET in r.status)):
            # no candidate certifies a smaller residual: stop here (or this one's double-
            # double answer met the tolerance, x + x_lo: only FP64's rounding of it misses)
            if r.x_lo is not None and DD_MET in r.status:
                best = (len(results) - 1, r.true_residual)    # (its x_lo with it)
            c.outcome = ("stopped at the accuracy floor of precision " + repr(r.precision)
                         + (": the tolerance is below what any candidate can certify"
                            if r.x_lo is None or DD_MET not in r.status else
                            ": its double-double answer x + x_lo met the tolerance; x "
                            "rounded to float64 cannot (FP64's rounding of b - A x at this "
                            "x): as close as float64 holds it, the low part in "
                            "SolveResult.x_lo"))
            break
        if mon is not None and mon.why:
            c.outcome = mon.why
            if mon.why == "stopped by the callback":
                break
        elif r.info < 0:
            c.outcome = f"breakdown {r.info}: {BREAKDOWNS.get(r.info, '')}"
            # the automatic CG candidates' M are positive definite by construction (shifted
            # IC(0), FSAI): a curvature breakdown is A's, and every CG candidate would meet it
            indefinite = indefinite or (c.method == "cg" and r.info == -12 and pinned is None)
        elif "; " in r.status:           # the driver's reason: e.g. the accuracy floor
            c.outcome = "not converged: " + r.status.split("; ", 1)[1]
        else:
            c.outcome = "iteration budget spent"
    return _combine(cands, results, an, analysis_time, b, x0, problem,
                    time.perf_counter() - t0, best, ran)


#: An ILUT candidate (a threshold or bounded-fill LU: SuperLU's) is skipped once the ILUT
#: set-ups before it took longer than the iterations left are estimated to take (at least
#: this many seconds): their fill, and so their time, grows from one to the next (drop
#: tolerance 1e-3, 1e-5, 0), and on matrices whose factors fill in (a random graph's
#: Laplacian, a skew-symmetric random matrix, n = 10^4 to 2 10^4) they took 24-108 s each
#: where GMRES alone converged in 2 s, or failed after minutes.  The floor keeps the choice
#: the same on every run where set-ups are not that slow: at 1 s, mhd4800a's first ILUT
#: (1.0-1.3 s, a machine's noise either side) skipped the direct fallback on some runs
#: (no convergence) and not on others (1 iteration).
SETUP_CAP_MIN = 10.0


def _iteration_cost(problem) -> float:
    """The seconds one GMRES(30) iteration is estimated to take: one FP64 product with
    ``A`` (timed, best of three; a value read back, so a device's asynchronous launch is
    waited for) times ``1 + 20 n / nnz`` -- the Gram-Schmidt of a restart length of 30
    reads and writes about 30 vectors, ``240 n`` bytes, against the product's ``12 nnz``.
    An ILUT candidate's cap is this times the iterations left, at least
    :data:`SETUP_CAP_MIN`."""
    n, hp = problem.n, problem.hp
    nnz = problem.A_csr.nnz if problem.A_csr is not None else n
    mv = problem.A64.bind(hp, hp)
    u = problem.xp.ones(n, hp)
    v = problem.xp.empty(n, hp)
    best = math.inf
    for _ in range(3):
        t = time.perf_counter()
        mv(u, v)
        if n:
            complex(v[n - 1])             # (read back: the product done, on any device)
        best = min(best, time.perf_counter() - t)
    return best * (1.0 + 20.0 * n / max(nnz, 1))


def _start_residual(problem) -> float:
    """The relative true residual of the solve's start: 1 for ``x0 = 0`` (``b`` itself),
    that of a given ``x0`` (one product with ``A``), ``inf`` for ``x0 = 'Mb'`` (not
    formed: never chosen as the answer)."""
    if not problem.bnrm:
        return 0.0
    if problem.x0_mode == "zero":
        return 1.0
    if problem.x0_mode != "given":
        return math.inf
    r64 = problem.xp.empty(problem.n, problem.hp)
    t = problem.true_residual(problem.x0_64, r64) / problem.bnrm
    return t if math.isfinite(t) else math.inf


class NoCandidateError(ValueError):
    """A :class:`mpsolve.Solver` with ``"auto"``: no candidate's preconditioner could be set
    up (``solve`` then runs the bare method, which a Solver, choosing once, does not)."""


#: A candidate whose preconditioner's set-up raises one of these is left for the next one.
SETUP_ERRORS = (ValueError, ArithmeticError, np.linalg.LinAlgError)

#: ILU(0) and ILUT factors are refused as unstable when ``||M (A e) - e||_inf`` exceeds this, for
#: ``e`` the vector of ones and ``M`` the preconditioner (the factors' triangular solves):
#: the reciprocal of FP32's machine epsilon (8.4e6), FP32 being where auto stores factors
#: whose values fit (the same limit for FP64 factors: af23560's stagnate in FP64 too).
#: Chow & Saad (1997) show unstable triangular solves to be a main cause of ILU failures
#: and detect them by the growth of ``(LU)^-1 e``; ``A e`` in place of ``e`` makes the test
#: invariant to row scaling (sherman3's ``(LU)^-1 e`` is 1e10 from its scaling alone, and
#: ILU(0) solves it in 84 BiCGSTAB iterations).  Measured on the shared SuiteSparse set and
#: the generated problems: at most 1.1e4 where ILU(0) converges (DK01R), 4.2e13 on
#: af23560, where BiCGSTAB and GMRES with ILU(0) stagnate (auto then went on to GMRES +
#: ISAI after 660 wasted iterations).  The cost is one SpMV and one apply.  IC(0) (the
#: symmetric form, for symmetric ``A``) is tested with ``x = |diag A|^{-1/2}`` in place of
#: ``e``, componentwise relative: ``max_i |(M A x - x)_i| / x_i``, invariant under the
#: symmetric scaling ``D A D`` (mixed units: the ones vector saw the scaling itself, 1.9e147
#: on a Laplacian scaled symmetrically over 1e-150..1e150, whose IC(0) is exact to 1);
#: on the shared SPD matrices 1.0-24 with it, 1.0-182 with ``e``.
ILU_GROWTH_LIMIT = GROWTH_LIMIT     # (ILUT's too: precond.ilu)


class UnstableFactorsError(ArithmeticError):
    """ILU(0) factors whose triangular solves amplify beyond :data:`ILU_GROWTH_LIMIT`."""


#: :func:`probe_operator` calls an operator symmetric (Hermitian) where ``|u^H A v -
#: (A u)^H v|`` is at most this times ``||u|| ||A v|| + ||v|| ||A u||``: the rounding of
#: two products (a few ``n eps`` of a symmetric operator), far below any asymmetry a
#: discretisation has
PROBE_TOL = 1e-10


def probe_operator(problem):
    """``(symmetric, positive)`` for an operator without entries (a ``LinearOperator``):
    two products ``A u``, ``A v`` with fixed pseudo-random vectors (seed 0: the same
    answer on every run), ``symmetric`` where ``u^H A v = (A u)^H v`` to
    :data:`PROBE_TOL` -- a symmetric (Hermitian) operator always passes, a nonsymmetric
    one fails but for a set of ``(u, v)`` of measure zero -- and ``positive`` where ``u^H A
    u > 0`` (necessary for positive definiteness, not sufficient: CG's breakdown test and
    the fallback to GMRES cover the rest).  Non-finite products: ``(False, False)``."""
    n, hp, xp = problem.n, problem.hp, problem.xp
    rng = np.random.default_rng(0)

    def draw():
        v = rng.standard_normal(n)
        if np.dtype(hp).kind == "c":
            v = v + 1j * rng.standard_normal(n)
        return to_device(v.astype(hp), problem.device)

    u, v = draw(), draw()
    au, av = xp.empty(n, hp), xp.empty(n, hp)
    mv = problem.A64.bind(hp, hp)
    mv(u, au)
    mv(v, av)
    with np.errstate(all="ignore"):
        s1, s2, q = (complex(xp.vdot(a, c)) for a, c in ((u, av), (au, v), (u, au)))
        scale = float(norm(u, xp) * norm(av, xp) + norm(v, xp) * norm(au, xp))
    if not (np.isfinite(scale) and all(np.isfinite(z) for z in (s1, s2, q))):
        return False, False
    return abs(s1 - s2) <= PROBE_TOL * scale, q.real > 0


def plan(C, method="auto", precond="auto", precond_params=None, probe=None):
    """``(analysis, candidates)`` for the checked canonical CSR ``C`` (``None``: ``A`` is an
    operator without entries, nothing to analyse), with ``method``/``precond`` pinned where
    they are not ``"auto"`` (``precond`` a name or an object).  ``probe``: for an operator,
    :func:`probe_operator`'s ``(symmetric, positive)``: both put CG before GMRES (with no
    preconditioner, or a pinned one that is set up and symmetric)."""
    precond_params = precond_params or {}
    pinned = None if is_auto(precond) else precond
    if precond_params and not isinstance(pinned, str):   # parameters without a name to take them
        from .precond import stray_keywords
        raise stray_keywords(precond_params, precond)
    if isinstance(pinned, str):
        from .precond import make_preconditioner

        # an unknown name or a bad parameter is the caller's error, refused here (not
        # recorded as every candidate's failed set-up)
        needs_entries = make_preconditioner(pinned, **precond_params) is not None
    else:                       # an object not set up is set up from A's entries
        needs_entries = isinstance(pinned, Preconditioner) and not pinned.is_setup
    if C is None and needs_entries:
        raise needs_entries_error(f"precond={pinned!r}")
    if C is not None:
        an = analyse(C, canonical=True)
        cands = candidates(an, method, precond)
    else:                                       # a LinearOperator: nothing to analyse
        an = None
        m = "gmres" if method == "auto" else method
        cands = [Choice(m, None, {}, "A is an operator without entries: no analysis, no "
                        "preconditioner built from A")]
        if method == "auto" and probe is not None and probe[0] and probe[1] and (
                pinned is None or (isinstance(pinned, Preconditioner) and pinned.is_setup
                                   and pinned.symmetric)):
            cands.insert(0, Choice("cg", None, {}, "A is an operator without entries whose "
                                   "symmetry probe (two products) found it symmetric with "
                                   "u^T A u > 0: CG, GMRES after it"))
            cands[1].reason = "CG failed or stagnated: GMRES"
    if isinstance(pinned, str) and (precond_params.get("reorder") or pinned == "ilut"):
        # a reordered (or pivoted) M is not symmetric: CG cannot use it
        cands = [c for c in cands if c.method != "cg"] or cands
    if pinned is not None:
        for c in cands:
            c.precond = pinned if isinstance(pinned, str) else type(pinned).__name__
            c.needs_symmetric_M = c.method == "cg" and method == "auto"
    elif an is not None and an.symmetric:
        # CG refuses a nonsymmetric M for a symmetric A (check_cg_preconditioner): where
        # the preconditioner is auto's choice, one that came out nonsymmetric (a reordered
        # one under a pinned CG) gives way to the next candidate instead
        for c in cands:
            c.needs_symmetric_M = c.method == "cg"
    return an, cands


def candidate_side(method, side=None):
    """The side a candidate's method applies ``M`` on: GMRES ``side`` (right by default,
    see the module docstring), BiCGSTAB right, CG ``"symmetric"`` (it needs a symmetric
    ``M``)."""
    if method == "gmres":
        return side or "right"
    return "right" if method == "bicgstab" else "symmetric"


def set_up_candidate(c, pinned, precond_params, C, policy, device, side, escalate, cache):
    """Candidate ``c``'s preconditioner, set up on ``C`` for ``policy`` (or the ``pinned``
    object itself; ``None`` for no preconditioner); a ``note`` of the set-up is added to
    ``c.reason``.  Raises the set-up's error (:data:`SETUP_ERRORS`: try the next one)."""
    from .precond import make_preconditioner

    if pinned is not None and not isinstance(pinned, str):
        if not isinstance(pinned, Preconditioner):
            return pinned                # a matrix or an operator: applied as it is
        # the caller's preconditioner: used as it is when they set it up, else set up here
        # for this candidate's matrix, side and precision (again only where these change)
        if C is not None and needs_setup(pinned, C, (side, str(policy.precond))):
            setup_for_solve(pinned, C, dtype=policy.precond, device=device, side=side)
        _check_symmetric(c, pinned)
        return pinned
    M = None
    name = pinned if isinstance(pinned, str) else c.precond
    if isinstance(name, str) and name != "none":
        params = dict(c.params) if pinned is None else {}
        params.update(precond_params)
        # a later candidate with the same preconditioner, side and precision (GMRES after
        # BiCGSTAB, both with ILU(0) on the right) takes the one already set up
        key = ("M", name, repr(sorted(params.items())), side, policy.precond)
        got = cache.get(key)
        if isinstance(got, Exception):
            raise got                       # its set-up failed for the earlier candidate
        if got is not None:
            M, note = got
        else:
            try:
                with warnings.catch_warnings():
                    if name == "ilut":        # its one warning, unstable factors: refused
                        warnings.simplefilter("ignore", PreconditionerWarning)
                    M, note = _set_up(make_preconditioner, name, params, C, policy, device,
                                      side, escalate, cache)
                check_factors(name, params, M, C)
            except SETUP_ERRORS as err:
                cache[key] = err
                raise
            cache[key] = (M, note)
        if note:
            c.reason += f"; {note}"
        if getattr(M, "shift", None):
            c.reason += f"; shift={M.shift:g} (an unshifted pivot was not positive)"
        _check_symmetric(c, M)
    return M


def check_factors(name, params, M, C):
    """Refuse (:class:`UnstableFactorsError`: the next candidate is tried) the factors of
    an ILU(0) or ILUT ``M`` set up on ``C`` whose triangular solves amplify beyond
    :data:`ILU_GROWTH_LIMIT`; ``name``/``params``: the candidate's preconditioner.  The
    test of every set-up of a candidate: the constructor's and ``Solver.update``'s."""
    g, what = None, "for e = ones"
    if name == "ilu0" and not params.get("reorder") and C is not None:
        g = ilu_growth(M, C)
        if not g <= ILU_GROWTH_LIMIT and not M.symmetric:
            g = equilibrated_growth(M, C)
            what = "for A equilibrated and e = ones"
    elif name == "ilut":                  # measured by its set-up, on what it factored
        g = M.stats.get("growth", 0.0)
    if g is not None and not g <= ILU_GROWTH_LIMIT:
        raise UnstableFactorsError(
            f"unstable factors: ||M A e - e||_inf = {g:.1e} {what}, "
            f"over {ILU_GROWTH_LIMIT:.1e} (1/eps of FP32)")


def _check_symmetric(c, M):
    """Refuse (as a failed set-up: the next candidate is tried) a nonsymmetric ``M`` for a
    CG candidate that needs a symmetric one (:attr:`Choice.needs_symmetric_M`)."""
    if c.needs_symmetric_M and M is not None and not M.symmetric:
        raise ValueError(f"{type(M).__name__} is not symmetric here, and CG needs a "
                         "symmetric preconditioner: the next method")


def _set_up(make, name, params, C, policy, device, side, escalate, cache):
    """A preconditioner ``name`` set up on ``C`` in the policy's preconditioner precision --
    or, when its FP32 copy does not fit (FP32 range), in FP64 (if ``escalate``).  Returns
    ``(M, note)``.  ``cache`` keeps the MC64 reordering (or its error) of ``C`` between
    candidates: the matching is computed once per solve."""
    from .precond import Reordered

    params = dict(params)
    reorder = params.pop("reorder", None)

    def build():
        M = make(name, **params)
        if reorder is None:
            if hasattr(M, "mirror_hint"):        # ILU(0) on C: the analysis's symmetry test
                M.mirror_hint = cache.get("mirror_hint")
            return M
        got = cache.get(reorder)
        if isinstance(got, Exception):
            raise got
        return Reordered(M, reorder, reordering=got)

    def setup(M, dtype):
        try:
            M.setup_canonical(C, dtype=dtype, device=device, side=side)
        except Exception as err:
            if reorder is not None and getattr(M, "reordering", None) is None and \
                    cache.get(reorder) is None and type(err).__name__ == "StructurallySingularError":
                cache[reorder] = err
            raise
        if reorder is not None:
            cache[reorder] = M.reordering
        return M

    try:
        return setup(build(), policy.precond), ""
    except PrecisionRangeError as err:
        if not escalate or policy.precond == "float64":
            raise
        return setup(build(), "float64"), f"FP32 range: preconditioner stored in FP64 ({err})"


def _combine(cands, results, an, analysis_time, b, x0, problem, total, best=None, ran=()):
    if an is not None:
        analysis_time += an.block_time    # the block-size detection, if a candidate ran it
    tried = "; ".join(f"{c.label} ({c.outcome})" for c in cands if c.outcome != "not tried")
    analysis = an.as_dict() if an is not None else {}
    if not results:     # nothing could even be set up
        bnrm = problem.bnrm
        rel_tol = problem.tol / bnrm if bnrm else problem.rtol
        # SciPy: a zero right-hand side (or an empty system) has the solution 0, whatever
        # A is -- also one that no preconditioner could be set up for (a zero matrix)
        zero = problem.n == 0 or bnrm == 0.0
        x64 = problem.xp.zeros(problem.n, problem.hp) if (zero or problem.x0_64 is None) \
            else problem.x0_64
        r64 = problem.xp.empty(problem.n, problem.hp)
        true = 0.0 if zero else problem.true_residual(x64, r64) / bnrm
        info = 0 if zero else AUTO_FAILED
        return SolveResult(
            x=problem.answer(x64), info=info, iterations=0, residuals=np.zeros(0),
            true_residual=float(true), tolerance=rel_tol, setup_time=total, solve_time=0.0,
            precision=cands[0].precision if cands else "double",
            status=status_text(info, 0, true, rel_tol, "zero right-hand side" if zero
                               else f"tried {tried}"),
            method="auto", choices=cands, analysis=analysis,
            analysis_time=analysis_time)
    r = results[-1]
    picked = ""
    user_stop = any(c.outcome == "stopped by the callback" for c in cands)
    if r.info != 0 and not user_stop and best is not None and best[0] != len(results) - 1 \
            and (best[0] >= 0 or math.isfinite(best[1])):
        # (not past the caller's callback stop: its iterate, as SciPy's; a start whose
        # residual is unknown, 'Mb', is never picked)
        # not converged: the answer with the smallest true residual, not the last one
        # (info: the last candidate's, the reason auto ended -- a breakdown's code is
        # kept, a count becomes the iterations done below)
        if best[0] >= 0:
            r = dataclasses.replace(results[best[0]], info=r.info)
            picked = (f"x is choice {ran[best[0]]}'s answer, the smallest true residual of "
                      f"those tried (the last ended at {results[-1].true_residual:.1e})")
        else:
            x64 = problem.x0_64 if problem.x0_mode == "given" else \
                problem.xp.zeros(problem.n, problem.hp)
            r = dataclasses.replace(r, x=problem.answer(x64).copy(), true_residual=best[1],
                                    x_lo=None, at_floor=False)
            picked = ("x is the start: every candidate ended above its residual (the last "
                      f"at {results[-1].true_residual:.1e})")
    stopped_by_us = r.info == USER_STOP and not any(
        c.outcome == "stopped by the callback" for c in cands)
    r.iterations = sum(q.iterations for q in results)
    r.residuals = np.concatenate([q.residuals for q in results])
    # the preconditioners were set up here (solve got them ready): their set-up time, the
    # failed ones' included, is added to the driver's own
    r.setup_time = (analysis_time + sum(c.setup_seconds for c in cands)
                    + sum(q.setup_time for q in results))
    r.solve_time = sum(q.solve_time for q in results)
    # (the answer's policy changes, so that the last one ends at r.precision; the earlier
    # candidates' are in their Choice.escalations)
    r.escalations = list(r.escalations)
    r.choices = cands
    r.analysis = analysis
    r.analysis_time = analysis_time
    if stopped_by_us or r.info > 0:   # not converged: SciPy's info, the iterations done
        r.info = max(1, r.iterations)   # (by all candidates; our monitor's stop is no user's)
    used = [c for c in cands if c.outcome != "not tried"]
    extra = f"automatic choice tried {tried}" if (len(used) > 1 or not r.converged) else ""
    if picked:
        extra = f"{extra}; {picked}" if extra else picked
    if r.converged and r.x.dtype.itemsize < problem.hp.itemsize:
        # the answer as returned (rounded to float32 for float32 data) meets the tolerance?
        t = answer_residual(problem, problem.xp.asarray(to_device(r.x, problem.device)))
        if t is not None:
            r.true_residual = t / (problem.bnrm or 1.0)
            if t > problem.tol:
                r.info = max(1, r.iterations)
                extra = rounded_text(r.x.dtype, r.true_residual)
    r.status = status_text(r.info, r.iterations, r.true_residual, r.tolerance, extra)
    return r


def _floor_credible(C, rel) -> bool:
    """Whether a relative true residual ``rel`` that a candidate calls its precision's floor
    is one for any answer: within :data:`mpsolve.driver.FAR_ABOVE` times ``(m + 1) u 2``
    (``u`` FP64's unit roundoff, ``m`` the longest row of ``A``): FP64's rounding of
    ``b - A x`` for an ``x`` whose products do not cancel (``|A| |x| ~ |b|``).  The
    driver's floor is the iterate's own (``u |A| |x|``): a stagnated candidate's large,
    cancelling ``x`` has a high floor that a better ``x`` does not share, so auto goes on
    with the next candidate (which starts from it) instead of stopping."""
    m = int(np.diff(C.indptr).max()) if C is not None and C.shape[0] else 1
    return rel <= FAR_ABOVE * (m + 1) * 2.0**-51


def _choice_key(c) -> tuple:
    """A candidate's identity: its method, preconditioner and parameters."""
    return (c.method, c.precond, tuple(sorted((k, repr(v)) for k, v in c.params.items())))


def columns_fallback(solve, A, b, x0, block, kw) -> SolveResult:
    """``solve(A, B)`` with ``"auto"`` and several right-hand sides, where the block solve
    did not converge on every column (``block``: its result) or no Solver could be set up
    (``block`` ``None``): each column not converged is solved by the single right-hand
    side's automatic choice (:func:`auto_solve`, with its fallbacks) from where the block
    left it (within the caller's ``maxiter`` where given).  A Solver chooses once and does not
    fall back, so without this a matrix that ``solve(A, b)`` solves could fail as soon as
    ``b`` had two columns."""
    from dataclasses import replace

    from .multi import _worst

    k = b.shape[1]
    given = kw.get("maxiter")
    if block is not None:
        x = np.array(block.x, copy=True)
        infos = np.array(block.column_info, np.int64)
        iters = np.array(block.column_iterations, np.int64)
        trues = np.array(block.column_true_residual, dtype=np.float64)
    else:
        x, infos = None, np.ones(k, np.int64)
        iters, trues = np.zeros(k, np.int64), np.full(k, np.inf)
    redo = np.flatnonzero(infos != 0)
    # the block's own choice ran on every column: the fallbacks go on with the next ones
    ran = tuple(_choice_key(c) for c in (block.choices if block is not None else ())
                if c.outcome == "chosen")
    floors = np.zeros(k, bool)
    if block is not None and block.at_floor:
        floors[redo] = True
    extra_time, choices, first = 0.0, list(block.choices) if block is not None else [], None
    for j in redo:
        start = None
        if given is not None and int(given) <= int(iters[j]):
            continue                         # the caller's budget is spent on this column
        if block is not None and np.isfinite(x[:, j]).all():
            start = x[:, j]
        elif x0 is not None and not isinstance(x0, str):
            x0a = np.asarray(x0)
            start = x0a if x0a.ndim == 1 else x0a[:, j if x0a.shape[1] > 1 else 0]
        # the caller's maxiter bounds each column's iterations, the block's included; by
        # default a column gets auto's whole budget (a Solver, which has no stagnation
        # monitor, may have spent it on a candidate that stagnated)
        left = None if given is None else int(given) - int(iters[j])
        r = auto_solve(solve, A, np.ascontiguousarray(b[:, j]), start, _ran=ran,
                       **dict(kw, maxiter=left))
        if first is None:
            first = r
        if x is None:
            x = np.zeros((b.shape[0], k), dtype=r.x.dtype)
        x[:, j] = r.x
        iters[j] += r.iterations
        # (info > 0: the column's iterations, the block's included)
        infos[j], trues[j] = (r.info if r.info <= 0 else int(iters[j])), r.true_residual
        floors[j] = r.at_floor
        extra_time += r.setup_time + r.solve_time
        for c in r.choices:
            if c.outcome != "not tried":
                choices.append(replace(c, reason=f"column {j}, by itself: {c.reason}"))
    base = block if block is not None else first
    info = _worst(infos)
    conv = int((infos == 0).sum())
    cols = ", ".join(map(str, redo[:10])) + (", ..." if redo.size > 10 else "")
    why = ("no candidate could be set up for a Solver" if block is None else
           f"the block solve ({block.method}"
           + (f" + {block.precond}" if block.precond else "") + ") left them: info "
           + ", ".join(str(int(i)) for i in np.asarray(block.column_info)[redo][:5]))
    mode = (f"{block.rhs_mode}, then by column" if block is not None
            and block.rhs_mode != "by column" else "by column")
    status = (f"{conv} of {k} right-hand sides converged ({mode} for columns "
              f"{cols}: {why}); "
              + status_text(info, int(iters.max()), float(trues.max()), base.tolerance,
                            "" if info == 0 else "the automatic choice's fallbacks ran on "
                            "those columns one by one"))
    return replace(base, x=x, info=int(info), iterations=int(iters.max()),
                   true_residual=float(trues.max()), column_info=infos,
                   column_iterations=iters, column_true_residual=trues, status=status,
                   rhs_mode=mode, choices=choices,
                   solve_time=(block.solve_time if block is not None else 0.0) + extra_time,
                   at_floor=bool(info != 0 and floors[infos != 0].all()))
