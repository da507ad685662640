"""mpsolve.precond: preconditioners (setup once in FP64, stored and applied in FP32 by default).

* :class:`Jacobi` -- point Jacobi
"""
from .base import Preconditioner
from .jacobi import Jacobi

__all__ = ["Preconditioner", "Jacobi", "make_preconditioner", "REGISTRY"]

REGISTRY = {"jacobi": Jacobi}


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
