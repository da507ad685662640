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
        return None
    try:
        cls = REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown preconditioner {name!r}; choose one of {['none'] + sorted(REGISTRY)}"
        ) from None
    M = cls(**params)
    return M if reorder is None else Reordered(M, reorder)
