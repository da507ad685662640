"""mpsolve.precond: preconditioners (setup once in FP64, stored and applied in FP32 by default).

* :class:`Jacobi` -- point Jacobi
* :class:`BlockJacobi` -- dense ``b x b`` diagonal blocks (``b`` detected or given)
* :class:`ILU0` -- ILU(0) (PETSc's), factors stored in FP32, sequential sweeps (or one block per thread)
* :class:`ISAI` -- incomplete sparse approximate inverse (``general``, ``spd`` = FSAI,
  ``lower``/``upper`` triangular inverses, ``ilu`` = ILU(0) with ISAI'd factors)
* :class:`BlockISAI` -- ISAI on the BSR block structure (``general``, ``spd``, ``bilu`` = the
  block ISAI of BILU(0)'s factors)
* :class:`BlockILU0` -- block ILU(0) on the BSR structure, FP64 pivot-block inverses, block sweeps
"""
from ._pattern import detect_block_size
from ._util import PreconditionerWarning
from .base import Preconditioner
from .block_ilu import BlockILU0
from .block_isai import BlockISAI
from .block_jacobi import BlockJacobi
from .ilu import ILU0, ZeroPivotError
from .isai import ISAI
from .jacobi import Jacobi

__all__ = ["Preconditioner", "Jacobi", "BlockJacobi", "ILU0", "ISAI", "BlockISAI", "BlockILU0",
           "PreconditionerWarning", "ZeroPivotError", "detect_block_size",
           "make_preconditioner", "REGISTRY"]

REGISTRY = {"jacobi": Jacobi, "block-jacobi": BlockJacobi, "ilu0": ILU0, "isai": ISAI,
            "block-isai": BlockISAI, "block-ilu0": BlockILU0}


def make_preconditioner(name, **params):
    """A preconditioner by name (``"none"`` gives ``None``)."""
    if name is None or name == "none":
        return None
    try:
        cls = REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown preconditioner {name!r}; choose one of {['none'] + sorted(REGISTRY)}"
        ) from None
    return cls(**params)
