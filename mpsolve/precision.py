"""Precision policies: which precision each part of a solve runs in.

A :class:`Precision` is a frozen, explicit record (no global "current
precision"): the solver reads it once in ``make_system`` and picks its kernels
from it.  The named presets follow ``DESIGN.md``:

============  ===============  ===========  ==============  ==========  ============
preset        Krylov vectors   A in SpMV    preconditioner  SpMV acc.   dots/norms
============  ===============  ===========  ==============  ==========  ============
double        fp64             fp64         fp64            fp64        native
single        fp32             fp32         fp32            fp32        native
mixed         fp64             fp64         fp32            fp64        native
eft           fp64             fp64         fp64            fp64        compensated
mixed-eft     fp64             fp64         fp32            fp64        compensated
ir            fp64 outer       fp64 outer   fp32            fp64        native
              fp32 inner       fp32 inner
mixed-cb      fp64             fp64         fp32            fp64        native
mixed-eft-cb  fp64             fp64         fp32            fp64        compensated
============  ===============  ===========  ==============  ==========  ============

The ``eft`` presets (``eft``, ``mixed-eft`` and ``mixed-eft-cb``) also set
``residual="dd"``: ``x`` is carried as a double-double pair and the true residual
``b - A x`` is computed with Dot2 per row, so the Krylov solve becomes iterative
refinement in three precisions (Carson & Higham 2018): the preconditioner in its own
precision (FP32 for ``mixed-eft``), the Krylov vectors in FP64, the residual and ``x`` in
double-double (:mod:`mpsolve.refine`).  The answer is the pair rounded to FP64; the low
part is :attr:`SolveResult.x_lo <mpsolve.SolveResult>`.

The ``-cb`` presets store GMRES's Krylov basis in FP32 (the ``basis`` field:
compressed-basis GMRES, Aliaga, Anzt, Gruetzmacher, Quintana-Orti & Tomas 2022,
doi:10.1177/10943420211036432); arithmetic, the Hessenberg matrix and ``x`` stay FP64.
Every other policy keeps the basis in its working precision; any policy can be given an
FP32 basis with :meth:`Precision.with_basis`.

Whatever the policy, the returned ``x`` is judged by an FP64 true residual.

Complex systems: a policy names real dtypes, and a complex problem realises each of them
as its complex twin (:func:`in_field`: ``float64 -> complex128``, ``float32 ->
complex64``), so ``mixed`` is complex128 vectors and ``A`` with a complex64
preconditioner, and the true residual is computed in complex128.  The ``-cb`` presets
are real-only.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from .kernels.registry import dtype_name

__all__ = ["Precision", "PRESETS", "as_precision", "complex_dtype", "real_dtype", "in_field",
           "COMPLEX_OF"]

#: The complex twin of each real float dtype a policy may name (and back): a policy is
#: written in real terms, and a complex problem runs every part of it in the twin.
COMPLEX_OF = {"float64": "complex128", "float32": "complex64"}
_REAL_OF = {c: r for r, c in COMPLEX_OF.items()}

_DOT_MODES = ("native", "compensated")
_RESIDUAL_MODES = ("fp64", "dd")


#: :attr:`Precision.floor` by (no inner policy, residual, working dtype)
_FLOORS = {}


def float_name(value) -> Optional[str]:
    """``'float32'`` or ``'float64'`` for a value that names one of them (a string, a NumPy
    type or dtype), else ``None``: the storage and working precisions a policy or the PETSc
    plug-in takes."""
    try:
        name = np.dtype(value).name
    except TypeError:
        return None
    return name if name in ("float32", "float64") else None


@dataclass(frozen=True)
class Precision:
    """A precision policy.

    Parameters
    ----------
    name : str
        Label used in reports.
    working : str
        dtype of the Krylov vectors and scalars (``"float64"`` or ``"float32"``).
    matrix : str
        dtype in which ``A``'s values are stored for the operator SpMV.
    precond : str
        dtype in which the preconditioner is stored and applied.
    accumulate : str
        dtype of the SpMV row sums (``"float64"`` or ``"float32"``).
    dot : {"native", "compensated"}
        Reductions (inner products and norms): plain, or Ogita--Rump--Oishi Dot2.
    inner : Precision, str or None
        If set, the solve is an iterative refinement: FP64 residuals and updates
        outside, an inner Krylov solve in this policy (a preset's name: that preset).
    basis : str or None
        dtype in which GMRES stores its Krylov basis (``None``: the working dtype).
        ``"float32"`` under an FP64 working precision is compressed-basis GMRES: each
        new vector is orthogonalised and normalised in FP64 against the FP32-stored
        basis, then rounded to FP32 once.  The other methods keep no basis and ignore it.
    residual : {"fp64", "dd"}
        How ``x`` and the true residual ``b - A x`` are kept between Krylov stages:
        FP64, or ``"dd"``: ``x`` as a double-double pair, the residual by Dot2 per row
        with FP64 ``A`` and ``b``, each stage a correction solve (iterative refinement;
        :mod:`mpsolve.refine`; complex data through the real form of ``A``).  ``"dd"``
        needs ``working="float64"``, the matrix entries (an ``A`` given as a
        ``LinearOperator`` runs the ``"fp64"`` way) and a device with the ``residual_dd``
        kernel; it is ignored by a policy with ``inner`` set.

    Examples
    --------
    >>> from mpsolve import Precision
    >>> p = Precision.preset("mixed-eft")
    >>> (p.working, p.matrix, p.precond, p.dot)
    ('float64', 'float64', 'float32', 'compensated')
    >>> Precision(working="float32", matrix="float32").precond
    'float64'
    >>> Precision.preset("mixed-cb").basis, Precision.preset("mixed").basis
    ('float32', 'float64')
    >>> Precision.preset("mixed-eft").with_basis("float32").name
    'mixed-eft-cb'
    """

    name: str = "custom"
    working: str = "float64"
    matrix: str = "float64"
    precond: str = "float64"
    accumulate: str = "float64"
    dot: str = "native"
    inner: Optional["Precision"] = field(default=None, compare=True)
    basis: Optional[str] = None
    residual: str = "fp64"

    def __post_init__(self):
        for f in ("working", "matrix", "precond", "accumulate"):
            v = getattr(self, f)
            name = None if v is None else float_name(v)    # (np.dtype(None) is float64)
            if name is None:
                raise ValueError(
                    f"Precision.{f}={v!r} is not supported; use 'float32' or 'float64'"
                )
            object.__setattr__(self, f, name)
        if self.basis is None:
            object.__setattr__(self, "basis", self.working)
        else:
            b = float_name(self.basis)
            if b is None:
                raise ValueError(f"Precision.basis={self.basis!r} is not supported; use "
                                 "'float32' or 'float64' (or None: the working precision)")
            if np.dtype(b).itemsize > np.dtype(self.working).itemsize:
                raise ValueError(f"Precision.basis={b!r} is wider than working="
                                 f"{self.working!r}: a basis is stored at most in the "
                                 "working precision")
            object.__setattr__(self, "basis", b)
        if self.residual not in _RESIDUAL_MODES:
            raise ValueError(f"Precision.residual={self.residual!r}; use one of "
                             f"{_RESIDUAL_MODES}")
        if self.residual == "dd" and self.working != "float64":
            raise ValueError(f"Precision.residual='dd' needs working='float64' (got "
                             f"{self.working!r}): the correction solves take the FP64 "
                             "residual as it is; use residual='fp64' or an FP64 working "
                             "precision")
        if self.dot not in _DOT_MODES:
            raise ValueError(f"Precision.dot={self.dot!r}; use one of {_DOT_MODES}")
        if isinstance(self.inner, str):       # a preset's name: that preset
            try:
                object.__setattr__(self, "inner", PRESETS[self.inner])
            except KeyError:
                raise ValueError(f"Precision.inner={self.inner!r}: not a preset; use one of "
                                 f"{sorted(PRESETS)} or a Precision") from None
        if self.inner is not None and not isinstance(self.inner, Precision):
            raise TypeError(f"Precision.inner={self.inner!r}: use a Precision, a preset's "
                            "name or None")
        if self.inner is not None and self.inner.inner is not None:
            raise ValueError("Precision.inner must not itself have an inner policy")

    # ------------------------------------------------------------------ helpers
    @property
    def working_dtype(self) -> np.dtype:
        return np.dtype(self.working)

    @property
    def compressed(self) -> bool:
        """Whether GMRES's basis is stored below the working precision."""
        return self.basis != self.working

    def with_basis(self, basis) -> "Precision":
        """This policy with GMRES's basis stored in ``basis`` (``"float32"``: CB-GMRES),
        named ``<name>-cb`` (or back to ``<name>`` without the suffix)."""
        b = np.dtype(basis).name if basis is not None else self.working
        base = self.name.removesuffix("-cb")
        return replace(self, name=base + ("-cb" if b != self.working else ""), basis=b)

    @property
    def eps(self) -> float:
        """Unit roundoff of the working precision."""
        return float(np.finfo(self.working).eps)

    @property
    def floor(self) -> float:
        """Relative residual below which this policy cannot be expected to go.

        Set by the working precision, in which ``x`` and ``r`` live (``10 eps``;
        the conditioning part is left to the stagnation test).  The storage
        precision of ``A`` sets no floor of its own: the driver's residual
        replacement recomputes ``r = b - A x`` in FP64 with the exact matrix, so an
        FP32 ``A`` costs iterations, not accuracy.  Refinement has the FP64 floor; a
        policy with ``residual="dd"`` carries ``x`` and ``r`` in double-double, so its
        floor is that of the pair (``10 eps^2``): no stronger policy would get further,
        though the FP64-rounded answer's own residual stays near ``eps ||A|| ||x||``.
        """
        key = (self.inner is None, self.residual, self.working)
        f = _FLOORS.get(key)        # asked once per solve: np.finfo not every time
        if f is None:
            if self.inner is None and self.residual == "dd":
                f = 10.0 * float(np.finfo(np.float64).eps) ** 2
            elif self.inner is not None:
                f = 10.0 * float(np.finfo(np.float64).eps)
            else:
                f = 10.0 * float(np.finfo(self.working).eps)
            _FLOORS[key] = f
        return f

    def stronger(self) -> Optional["Precision"]:
        """The next policy of the escalation ladder, or ``None`` at the top.

        ``single -> ir -> mixed -> mixed-eft -> eft`` and ``double -> eft``: FP32
        work is kept as long as it can still help (refinement reaches FP64
        accuracy with FP32 inner solves), then vectors and ``A`` move to FP64,
        then the reductions become compensated and ``x`` and the residual
        double-double.  Any other policy -- a custom one, or a preset with a field
        replaced (the ladder follows the fields, not the name) -- moves its
        vectors, ``A`` and sums to FP64 (``+fp64``), then to compensated dots and the
        double-double residual as ``eft`` has them (``+eft``; ``+dd`` where its dots
        were compensated already), last its preconditioner to FP64 (``+m64``): it ends
        where ``eft`` does.  A compressed basis goes first: ``mixed-cb ->
        mixed``, ``mixed-eft-cb -> mixed-eft``, any other policy to itself with an FP64
        basis (the compressed basis is what most likely cost the convergence).
        """
        if self.compressed:
            return self.with_basis(self.working)
        if PRESETS.get(self.name) == self:
            nxt = _LADDER[self.name]
            return None if nxt is None else PRESETS[nxt]
        if self.inner is not None or "float32" in (self.working, self.matrix, self.accumulate):
            return replace(self, name=self.name + "+fp64", working="float64",
                           matrix="float64", accumulate="float64", inner=None,
                           basis="float64")
        if self.dot == "native":
            return replace(self, name=self.name + "+eft", dot="compensated", residual="dd")
        if self.residual != "dd":
            return replace(self, name=self.name + "+dd", residual="dd")
        if self.precond != "float64":
            return replace(self, name=self.name + "+m64", precond="float64")
        return None

    @staticmethod
    def preset(name: str) -> "Precision":
        """The named preset (see the module table)."""
        try:
            return PRESETS[name]
        except KeyError:
            raise ValueError(
                f"unknown precision preset {name!r}; choose one of {sorted(PRESETS)}"
            ) from None

    def describe(self) -> str:
        s = (f"{self.name}: vectors {self.working}, A {self.matrix} (acc {self.accumulate}), "
             f"M {self.precond}, dots {self.dot}")
        if self.inner is not None:
            s += f"; inner solve [{self.inner.describe()}]"
        if self.compressed:
            s += f"; GMRES basis {self.basis}"
        if self.residual == "dd" and self.inner is None:
            s += "; x and residual double-double (refinement)"
        return s


_f8, _f4 = "float64", "float32"
PRESETS = {
    "double": Precision("double", _f8, _f8, _f8, _f8, "native"),
    "single": Precision("single", _f4, _f4, _f4, _f4, "native"),
    "mixed": Precision("mixed", _f8, _f8, _f4, _f8, "native"),
    "eft": Precision("eft", _f8, _f8, _f8, _f8, "compensated", residual="dd"),
    "mixed-eft": Precision("mixed-eft", _f8, _f8, _f4, _f8, "compensated", residual="dd"),
}
PRESETS["ir"] = Precision("ir", _f8, _f8, _f4, _f8, "native",
                          inner=replace(PRESETS["single"], name="ir-inner",
                                        accumulate=_f8))
PRESETS["mixed-cb"] = PRESETS["mixed"].with_basis(_f4)
PRESETS["mixed-eft-cb"] = PRESETS["mixed-eft"].with_basis(_f4)
#: The presets' escalation ladder (:meth:`Precision.stronger`; the compressed-basis presets
#: first drop their compression).
_LADDER = {"single": "ir", "ir": "mixed", "mixed": "mixed-eft", "mixed-eft": "eft",
           "double": "eft", "eft": None}


_TWINS = {}     # (dtype-like, table's id) -> the twin: a set-up asks a dozen times


def _twin(dtype, table, keep) -> np.dtype:
    """``dtype`` mapped by ``table`` (real -> complex or back); a dtype of ``keep`` as is."""
    try:
        return _TWINS[dtype, id(table)]
    except (KeyError, TypeError):      # TypeError: an unhashable dtype-like
        pass
    name = dtype_name(dtype)
    if name in keep:
        got = np.dtype(name)
    else:
        try:
            got = np.dtype(table[name])
        except KeyError:
            raise TypeError(f"dtype {name} is neither float32/float64 nor "
                            "complex64/complex128") from None
    try:
        _TWINS[dtype, id(table)] = got
    except TypeError:
        pass
    return got


def complex_dtype(dtype) -> np.dtype:
    """The complex twin of a real float dtype (``float64 -> complex128``, ``float32 ->
    complex64``); a complex128/complex64 dtype is returned as it is.

    >>> complex_dtype("float32"), complex_dtype(np.float64)
    (dtype('complex64'), dtype('complex128'))
    """
    return _twin(dtype, COMPLEX_OF, _REAL_OF)


def real_dtype(dtype) -> np.dtype:
    """The real float dtype of the same precision (``complex64 -> float32``); a real
    float32/float64 dtype is returned as it is.

    >>> real_dtype("complex64"), real_dtype("float64")
    (dtype('float32'), dtype('float64'))
    """
    return _twin(dtype, _REAL_OF, COMPLEX_OF)


def in_field(dtype, is_complex: bool) -> np.dtype:
    """``dtype`` (a policy's real float dtype) realised for a real or a complex problem:
    itself, or its complex twin.  The one place the policy's ``"float32"`` /
    ``"float64"`` become ``complex64`` / ``complex128``.

    >>> in_field("float32", True), in_field("float64", False)
    (dtype('complex64'), dtype('float64'))
    """
    return complex_dtype(dtype) if is_complex else np.dtype(dtype)


def as_precision(precision, dtype=None) -> Precision:
    """Normalise the ``precision=`` argument.

    ``None`` keeps SciPy's behaviour: everything in the problem's dtype
    (``double`` for FP64/complex128 data, ``single`` for FP32/complex64 data).
    """
    if precision is None:
        if dtype is not None and np.dtype(dtype) in (np.float32, np.complex64):
            return PRESETS["single"]
        return PRESETS["double"]
    if isinstance(precision, Precision):
        return precision
    if isinstance(precision, str):
        return Precision.preset(precision)
    raise TypeError(
        f"precision must be a preset name {sorted(PRESETS)} or a Precision, "
        f"got {type(precision).__name__}"
    )
