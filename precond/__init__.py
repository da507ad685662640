"""mpsolve.precond: preconditioners (setup once in FP64, stored and applied in FP32 by default).

* :class:`Jacobi` -- point Jacobi
* :class:`BlockJacobi` -- dense ``b x b`` diagonal blocks (``b`` detected or given)
* :class:`ILU0` -- ILU(0) (PETSc's), factors stored in FP32, sequential sweeps (or one block per thread)
* :class:`ILUT` -- threshold ILU with pivoting (SuperLU's ILUTP set-up, ILU(0)'s sweeps)
* :func:`mc64`, :class:`Reordered` -- MC64 permutation + scaling to a unit diagonal, wrapping
  any preconditioner (``make_preconditioner(name, reorder="mc64")``)
* :class:`ISAI` -- incomplete sparse approximate inverse (``general``, ``spd`` = FSAI,
  ``lower``/``upper`` triangular inverses, ``ilu`` = ILU(0) with ISAI'd factors)
* :class:`BlockISAI` -- ISAI on the BSR block structure (``general``, ``spd``, ``bilu`` = the
  block ISAI of BILU(0)'s factors)
* :class:`BlockILU0` -- block ILU(0) on the BSR structure, FP64 pivot-block inverses, block sweeps
"""
from mpsolve._params import init_params

from ._pattern import detect_block_size
from ._util import PreconditionerWarning
from .base import Preconditioner
from .block_ilu import BlockILU0
from .block_isai import BlockISAI
from .block_jacobi import BlockJacobi
from .ilu import ILU0, ZeroPivotError
from .ilut import ILUT
from ._reorder import REORDERINGS, Reordered, StructurallySingularError, mc64
from .isai import ISAI
from .jacobi import Jacobi

__all__ = ["Preconditioner", "Jacobi", "BlockJacobi", "ILU0", "ILUT", "ISAI", "BlockISAI", "BlockILU0",
           "PreconditionerWarning", "ZeroPivotError", "detect_block_size",
           "make_preconditioner", "REGISTRY", "mc64", "Reordered", "StructurallySingularError",
           "REORDERINGS"]

REGISTRY = {"jacobi": Jacobi, "block-jacobi": BlockJacobi, "ilu0": ILU0, "isai": ISAI,
            "block-isai": BlockISAI, "block-ilu0": BlockILU0, "ilut": ILUT}


def make_preconditioner(name, reorder=None, **params):
    """A preconditioner by name (``"none"`` gives ``None``).

    ``reorder="mc64"`` wraps it in :class:`Reordered`: it is set up on the MC64-permuted and
    scaled matrix (zero-free, unit-modulus diagonal) and applied as ``Dc M_B Dr P``."""
    if name is None or name == "none":
        if reorder is not None:
            raise ValueError(f"reorder={reorder!r} needs a preconditioner (precond='none')")
        if params:
            raise TypeError(f"precond='none' takes no options; got {sorted(params)} (they "
                            "belong to a preconditioner: name one, e.g. precond='ilu0')")
        return None
    try:
        cls = REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown preconditioner {name!r}; choose one of {['none'] + sorted(REGISTRY)}"
            + _did_you_mean(name)) from None
    try:
        M = cls(**params)
    except TypeError as err:    # a keyword the class does not take: named, with the fix
        unknown = sorted(set(params) - set(parameters(name)))
        if not unknown:
            raise
        raise TypeError(f"{_keywords(unknown)}: not {_a_parameter(unknown)} of preconditioner "
                        f"{name!r} (it takes {', '.join(parameters(name))}){_hint(unknown)}"
                        ) from err
    return M if reorder is None else Reordered(M, reorder)


def parameters(name):
    """The keyword parameters preconditioner ``name`` takes (``reorder`` included), sorted."""
    return tuple(sorted(init_params(REGISTRY[name]) | {"reorder"}))


#: Preconditioner names from PETSc (``-pc_type``) and SciPy: what they are here.
_NAME_HINTS = {
    "ilu": ("ilu0", "PETSc's default ILU(0)"),
    "icc": ("ilu0", "on a symmetric A it is the incomplete Cholesky IC(0), CG-safe"),
    "ic0": ("ilu0", "on a symmetric A it is the incomplete Cholesky IC(0), CG-safe"),
    "bjacobi": ("ilu0", "PETSc's bjacobi, ILU(0) on each rank's diagonal block, is "
                        "ilu0 with blocks=k or blocks='threads'"),
    "pbjacobi": ("block-jacobi", "the inverted point blocks"),
    "spilu": ("ilut", "SciPy's threshold ILU"),
    "spai": ("isai", "a sparse approximate inverse on a fixed pattern"),
    "fsai": ("isai", "variant='spd' is FSAI"),
    "bilu": ("block-ilu0", "ILU(0) on the BSR blocks"),
    "bilu0": ("block-ilu0", "ILU(0) on the BSR blocks"),
    "blockilu0": ("block-ilu0", "ILU(0) on the BSR blocks"),
}


def _did_you_mean(name) -> str:
    """`` (did you mean ...?)`` for a preconditioner name users bring from PETSc or SciPy,
    or another spelling of one of ours; else ""."""
    if not isinstance(name, str):
        return ""
    low = name.lower()
    if low in REGISTRY:
        return f" (did you mean {low!r}?)"
    if low in _NAME_HINTS:
        ours, why = _NAME_HINTS[low]
        return f" (did you mean {ours!r}? {why})"
    return ""


#: Keywords a SciPy (or PETSc) user may pass that mean something else here.
_HINTS = {"tol": "SciPy's old tol is rtol", "M": "pass a preconditioner object as precond=M",
          "callback_type": "solve's callback gets x; mpsolve.gmres takes callback_type",
          "restrt": "restart", "pc_type": "precond", "ksp_type": "method"}


def _hint(keys):
    """A hint for the keywords in ``keys`` that users bring from SciPy or PETSc ("" if none)."""
    said = [f"{k}: {_HINTS[k]}" for k in keys if k in _HINTS]
    return f" ({'; '.join(said)})" if said else ""


def _keywords(keys):
    """``keys`` (sorted) named in a message: "keyword argument 'a'" or "... arguments [...]"."""
    return f"keyword argument {keys[0]!r}" if len(keys) == 1 else f"keyword arguments {keys}"


def _a_parameter(keys):
    return "a parameter" if len(keys) == 1 else "parameters"


def stray_keywords(keys, precond):
    """The ``TypeError`` for keyword arguments of :func:`mpsolve.solve` (or ``Solver``) that
    are neither its own parameters nor usable with ``precond`` (``"auto"``, ``None`` or an
    object: no preconditioner made from a name takes them)."""
    keys = sorted(keys)
    takers = {k: [n for n in REGISTRY if k in parameters(n)] for k in keys}
    bad = [k for k in keys if not takers[k]]
    if bad:
        return TypeError(f"unexpected {_keywords(bad)}: not {_a_parameter(bad)} of the solve "
                         f"nor of any preconditioner{_hint(bad)}")
    return TypeError(f"{_keywords(keys)}: preconditioner parameters need precond=<name>, not "
                     f"{precond!r} (taken by "
                     + "; ".join(f"{k}: {', '.join(v)}" for k, v in takers.items()) + ")")
