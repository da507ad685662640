"""Solve results, breakdown codes and status texts."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

__all__ = ["SolveResult", "Escalation", "BREAKDOWNS", "USER_STOP", "AUTO_FAILED", "status_text",
           "wants_stop"]

#: ``info`` of a solve stopped by its callback (which returned ``True``) short of the tolerance.
USER_STOP = -15
#: ``info`` of an automatic solve none of whose candidates could even be set up.
AUTO_FAILED = -16

#: Negative ``info`` codes, one per breakdown.  -10 and -11 are SciPy's BiCGSTAB codes.
BREAKDOWNS = {
    -10: "BiCGSTAB rho breakdown: the shadow residual became orthogonal to the residual",
    -11: "BiCGSTAB omega breakdown: the stabilisation step vanished (t.s == 0 or t == 0; "
         "also r0.v == 0, as SciPy reports it)",
    -12: "CG curvature breakdown: p.Ap or r.z changed sign or vanished, so A or M is not "
         "symmetric definite (positive, or negative as SciPy's CG also takes)",
    -13: "GMRES: the Krylov space is exhausted (happy breakdown) but the true residual is above "
         "the tolerance: A or M is singular",
    -14: "a NaN or Inf appeared in the iteration (overflow in the working precision, or a "
         "preconditioner that produced non-finite values)",
    USER_STOP: "stopped by the callback (it returned True) before the tolerance was met",
    AUTO_FAILED: "method/precond 'auto': no candidate could be set up (each one's error is in "
                 "SolveResult.choices)",
}


def symmetry_word(symmetric: bool, is_complex: bool) -> str:
    """What the symmetry test found, in words: a complex matrix is tested for ``A = A^H``
    (a complex-symmetric ``A = A^T`` is non-Hermitian)."""
    if is_complex:
        return "Hermitian" if symmetric else "non-Hermitian"
    return "symmetric" if symmetric else "nonsymmetric"


def wants_stop(ret) -> bool:
    """Whether a callback's return value asks the solve to stop: ``True`` (or a NumPy
    ``True``) does, anything else -- ``None`` above all -- does not (Krylov.jl's rule)."""
    return ret is True or (type(ret).__name__ == "bool_" and bool(ret))


#: The attribute of the internal "call me every ``period`` iterations" protocol: private,
#: so a user's callback object with a ``period`` of its own is called every iteration.
PERIOD_ATTR = "_mpsolve_period"


def callback_period(callback):
    """A callback's period (its :data:`PERIOD_ATTR`, an int > 0: "call me every ``period``
    iterations, not each one"), or ``None`` for an ordinary per-iteration callback.  An
    internal protocol: the automatic choice's monitor (:mod:`mpsolve.auto`) uses it so CG's
    and BiCGSTAB's compiled loops can run between its calls; a user's callback is called
    every iteration, as SciPy's (an attribute ``period`` of its own means nothing here)."""
    period = getattr(callback, PERIOD_ATTR, None) if callback is not None else None
    return period if type(period) is int and period > 0 else None


def keep_period(wrapper, callback):
    """``wrapper`` (a function that calls ``callback``) with ``callback``'s ``period``: a
    wrapper that dropped it would be called every iteration, and the monitor, which counts
    ``period`` iterations a call, would see its window pass ``period`` times too fast."""
    period = callback_period(callback)
    if period is not None:
        setattr(wrapper, PERIOD_ATTR, period)
    return wrapper


@dataclass
class Escalation:
    """One automatic switch to a stronger precision policy."""

    iteration: int          # iterations done before the switch
    from_precision: str
    to_precision: str
    reason: str
    true_residual: float    # relative FP64 true residual at the switch (NaN: at set-up,
    #                         before any residual: the data did not fit the weaker policy)

    def __str__(self):
        res = "" if self.true_residual != self.true_residual else \
            f"; true residual {self.true_residual:.2e}"
        return (f"after {self.iteration} iterations: {self.from_precision} -> "
                f"{self.to_precision} ({self.reason}{res})")


@dataclass
class SolveResult:
    """What a solve returns with :func:`mpsolve.solve`.

    Attributes
    ----------
    x : ndarray
        The solution: float64 (complex128 for complex data), or float32 (complex64)
        where the problem data were.
    info : int
        SciPy's convention: 0 converged (the FP64 true residual meets the
        tolerance), > 0 iterations done without converging (restart cycles for
        GMRES), < 0 a breakdown (see :data:`BREAKDOWNS`).
    converged : bool
        ``info == 0``.
    iterations : int
        Krylov iterations (matrix-vector products with the preconditioned
        operator), all stages and escalations included.
    residuals : ndarray
        Residual norm estimate after each iteration, relative to ``||b||`` (the
        recursive residual for CG/BiCGSTAB, the Arnoldi estimate for GMRES).
    true_residual : float
        ``||b - A x|| / ||b||`` of the returned ``x``, computed in FP64 -- where it meets
        the tolerance, plus the FP64 residual's rounding bound if that bound is not
        negligible (an upper bound of the exact value: ``info == 0`` is certified).  An
        ``A`` given as a ``LinearOperator`` has no entries to bound its product's
        rounding by: the rounding of ``A x`` to FP64, ``u ||A x||``, stands for it, so
        a tolerance below that is not reported met.
    setup_time, solve_time : float
        Seconds: preconditioner and operator setup; the iteration.
    status : str
        A sentence saying what happened.
    precision : str
        The policy that produced the answer (the last one after escalations).
    escalations : list of Escalation
        The policy changes of the run that produced the answer (with ``"auto"``: the
        candidate whose answer is returned; each candidate's own are in its
        ``Choice.escalations``), so the last one ends at ``precision``.
    restarts : int
        GMRES: restart cycles begun after the first (0 for CG and BiCGSTAB).
    precond_stats : dict
        What the preconditioner's set-up reported (its ``stats``): for (Block-)ISAI the
        set-up time per stage in ``stage_times`` (seconds), local-system counts,
        fallback rows.
    method : str
    choices : list of mpsolve.auto.Choice
        ``method``/``precond`` ``"auto"``: every candidate considered, in order, with the
        reason it was chosen and its outcome (converged, set-up failed, breakdown,
        stagnated, budget share spent, not tried).  Empty otherwise.
    analysis : dict
        ``"auto"``: what the analysis of ``A`` found (:class:`mpsolve.auto.Analysis`).
    analysis_time : float
        Seconds the analysis took (included in ``setup_time``).
    column_info, column_iterations, column_true_residual : ndarray or None
        Several right-hand sides (``b`` of shape ``(n, k)``, :mod:`mpsolve.multi`): each
        column's ``info``, iterations and relative FP64 true residual; the scalar fields
        then summarise them (``info``: 0 when every column converged, else a failing
        column's code, a breakdown before a count; ``iterations``: the largest;
        ``true_residual``: the largest).  ``None`` for one right-hand side.
    rhs_mode : str
        ``"block"`` (the columns iterated together) or ``"by column"`` (one after the
        other); ``"block, then by column"`` where ``"auto"``'s block solve left columns
        unconverged and the single right-hand side's automatic choice (with its
        fallbacks) solved each of them from there; ``""`` for one right-hand side.
    x_lo : ndarray or None
        The low part of the double-double solution of a policy with
        ``residual="dd"`` (the ``eft`` presets, :mod:`mpsolve.refine`): ``x + x_lo`` is
        the refined pair, ``x`` that pair rounded to FP64.  The pair is refined until
        ``x`` meets the tolerance (or, below FP64's floor, until a step no longer moves
        ``x``), not on to twice FP64's precision: its residual is below the tolerance,
        how far below depends on the problem and its scaling.  ``None`` for the other policies (and for FP32 results).
    at_floor : bool
        The iteration stagnated at the accuracy floor of the strongest precision policy
        (nothing left to escalate to), or an EFT policy's double-double answer met the
        tolerance where ``x`` rounded to FP64 cannot (its low part in ``x_lo``): the
        tolerance is below what any precision or preconditioner can certify for this
        system; ``method="auto"`` tries no further candidate.
    """

    x: np.ndarray
    info: int
    iterations: int
    residuals: np.ndarray
    true_residual: float
    tolerance: float
    setup_time: float
    solve_time: float
    status: str
    method: str
    precision: str
    escalations: List[Escalation] = field(default_factory=list)
    restarts: int = 0
    precond: Optional[str] = None
    precond_nbytes: int = 0
    precond_detail: str = ""
    precond_stats: dict = field(default_factory=dict)
    choices: list = field(default_factory=list)
    analysis: dict = field(default_factory=dict)
    analysis_time: float = 0.0
    x_lo: Optional[np.ndarray] = None
    column_info: Optional[np.ndarray] = None
    column_iterations: Optional[np.ndarray] = None
    column_true_residual: Optional[np.ndarray] = None
    rhs_mode: str = ""
    at_floor: bool = False

    @property
    def converged(self) -> bool:
        return self.info == 0

    def __iter__(self):
        """``x, info = mpsolve.solve(...)`` unpacks like SciPy's tuple."""
        return iter((self.x, self.info))

    def __repr__(self):
        return (f"SolveResult(method={self.method!r}, precision={self.precision!r}, "
                f"info={self.info}, iterations={self.iterations}, "
                f"true_residual={self.true_residual:.3e}, status={self.status!r})")

    def summary(self) -> str:
        lines = [
            f"method      {self.method}" + (f" + {self.precond}" if self.precond else ""),
            f"precision   {self.precision}",
            f"status      {self.status}",
            f"info        {self.info}",
            f"iterations  {self.iterations}",
            f"true rel. residual  {self.true_residual:.3e}  (tolerance {self.tolerance:.1e})",
            f"setup {self.setup_time:.4f} s, solve {self.solve_time:.4f} s",
        ]
        if self.precond_detail:
            lines.append(f"preconditioner  {self.precond_detail}")
        if self.precond_nbytes:
            lines.append(f"preconditioner memory  {self.precond_nbytes / 2**20:.2f} MiB")
        stages = self.precond_stats.get("stage_times") if self.precond_stats else None
        if stages:
            lines.append("preconditioner set-up  " + ", ".join(
                f"{k} {v:.4f} s" for k, v in stages.items()))
        for e in self.escalations:
            lines.append(f"escalation  {e}")
        if self.analysis:
            a = self.analysis
            kind = symmetry_word(a["symmetric"], a.get("is_complex", False)) + \
                (", positive diagonal" if a["positive_diagonal"] else "")
            lines.append(f"analysis    {kind}; {a['zero_diagonal']} zero, {a['tiny_diagonal']} "
                         f"tiny diagonal entries; {100 * a['dominant_rows']:.0f}% rows "
                         f"diagonally dominant; block size "
                         f"{'not needed' if a.get('block_size') is None else a['block_size']}; "
                         f"values over "
                         f"1e{a['value_range']:.0f} ({self.analysis_time * 1e3:.1f} ms)")
        spare = [c.label for c in self.choices          # (the bare method runs only when
                 if c.outcome == "not tried" and not getattr(c, "bare", False)]   # no M could)
        for i, c in enumerate(self.choices):
            if c.outcome != "not tried":
                lines.append(f"choice {i + 1}    {c}")
        if spare:
            lines.append("not needed  " + "; ".join(spare))
        return "\n".join(lines)


def status_text(info: int, iterations: int, true_rel: float, rel_tol: float, extra: str = "") -> str:
    if info == 0:
        s = (f"converged in {iterations} iterations: true relative residual "
             f"{true_rel:.2e} <= {rel_tol:.1e}")
    elif info > 0:
        s = (f"not converged: {iterations} iterations, true relative residual "
             f"{true_rel:.2e} > {rel_tol:.1e}")
    else:
        s = f"breakdown (info={info}): {BREAKDOWNS.get(info, 'unknown')}"
    return s + (f"; {extra}" if extra else "")
