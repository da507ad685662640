"""Shared by :func:`mpsolve.solve` and :class:`mpsolve.Solver`: a named method and
preconditioner turned into the Krylov body's options and the preconditioner object."""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from .krylov import BODIES

__all__ = ["configure", "check_gmres_options", "gmres_callback_type", "check_cg_preconditioner"]


def check_gmres_options(restart=None, side=None, method="gmres", stacklevel=4):
    """GMRES's ``restart`` (None or a positive integer) and ``side`` (None, 'left' or
    'right') checked before anything is chosen or set up -- also under ``method='auto'``,
    where they take effect only if GMRES is picked; a warning where ``method`` is another
    (they would be ignored).  Returns ``restart`` as an ``int`` (a float with an integral
    value is taken), or None."""
    if restart is not None and not (
            isinstance(restart, numbers.Real) and not isinstance(restart, (bool, np.bool_))
            and math.isfinite(restart) and int(restart) == restart and restart >= 1):
        raise ValueError(f"restart={restart!r}: must be a positive integer")
    if side is not None and side not in ("left", "right"):
        raise ValueError(f"side={side!r}: preconditioning side must be 'left' or 'right' "
                         "(or None: the method's default)")
    if method in ("cg", "bicgstab"):
        for opt, value in (("restart", restart), ("side", side)):
            if value is not None:
                warnings.warn(f"{opt} is a GMRES option; ignored by method={method!r}" + (
                    " (BiCGSTAB preconditions on the right, CG symmetrically)"
                    if opt == "side" else ""), stacklevel=stacklevel)
    return None if restart is None else int(restart)


def gmres_callback_type(callback, callback_type):
    """SciPy's ``callback_type`` for :func:`mpsolve.gmres` (``'legacy'`` when a callback
    comes without one), checked."""
    if callback is not None and callback_type is None:
        callback_type = "legacy"
    if callback_type not in (None, "x", "pr_norm", "legacy"):
        raise ValueError(f"callback_type={callback_type!r}: use 'x', 'pr_norm' or 'legacy'")
    return callback_type or "x"


def is_auto(precond) -> bool:
    """Whether ``precond`` asks for the automatic choice (it may be an array or a matrix,
    whose ``==`` would compare elementwise)."""
    return isinstance(precond, str) and precond == "auto"


def check_precond(precond):
    """A number where a preconditioner belongs is refused by name (it would otherwise be
    read as a 0-d matrix ``M``)."""
    if isinstance(precond, (numbers.Number, np.generic)) and not isinstance(precond, str):
        # (a NumPy string is a str: a name drawn from an array is that name)
        raise TypeError(f"precond={precond!r}: pass a preconditioner name "
                        "(mpsolve.precond.REGISTRY), a preconditioner object, a matrix or "
                        "LinearOperator approximating A^-1, 'auto' or None")
    if isinstance(precond, type):
        raise TypeError(f"precond={precond.__name__} is a class, not an instance of it: pass "
                        f"precond={precond.__name__}() (its parameters in the call) or its "
                        "name, e.g. precond='jacobi'")


def configure(method, precond, restart=None, side=None, precond_params=None, stacklevel=3):
    """:func:`solve`'s named ``method`` and ``precond`` as ``(body_kw, M, precond_name,
    precond_side)``: the Krylov body's options (GMRES: ``restart``, default 20, and
    ``side``, default left), the preconditioner made from its name (not set up yet) or
    ``precond`` itself, and the side the method applies it on (CG: ``"symmetric"``, a
    method that needs a symmetric ``M``).  Shared with
    :class:`mpsolve.Solver`."""
    from .precond import make_preconditioner, stray_keywords

    if method not in BODIES:
        raise ValueError(f"method={method!r}: choose 'auto' or one of {list(BODIES)}")
    check_precond(precond)
    name = None
    M = precond
    if isinstance(precond, str):
        M = make_preconditioner(precond, **(precond_params or {}))
        name = getattr(M, "name", precond) if M is not None else precond
    elif precond_params:
        raise stray_keywords(precond_params, precond)
    if method == "gmres":
        restart = check_gmres_options(restart, side)
        side = side or "left"
        return ({"restart": 20 if restart is None else restart, "callback_type": "x",
                 "side": side}, M, name, side)
    return {}, M, name, "right" if method == "bicgstab" else "symmetric"


def check_cg_preconditioner(problem):
    """CG needs a symmetric positive definite preconditioner: a set-up mpsolve
    preconditioner that is not symmetric (ILUT's pivoting, a reordering, ISAI's ``general``
    variant, ``ILU0(symmetric=False)``, BILU's ISAI without SPD pivot blocks) is refused on a
    symmetric ``A`` (the test of ILU(0)'s symmetric form), with the choices that are.  It
    would break CG down or stall it (ILUT on a biharmonic problem: breakdown at the first
    iteration).  On a nonsymmetric ``A``, or an operator without entries, CG is the
    caller's own choice and nothing is checked."""
    M = problem.M_user
    C = problem.A_csr
    if M is None or C is None or getattr(M, "symmetric", None) is True:
        return                          # (a symmetric one, or none: before the imports)
    from .precond.base import Preconditioner
    from .precond.ilu import is_symmetric

    if not isinstance(M, Preconditioner) or not M.is_setup or M.symmetric:
        return
    if not is_symmetric(C):
        return
    variant = getattr(M, "variant", None)
    what = repr(M) + (f" (variant={variant!r})" if variant else "")
    raise ValueError(
        f"method='cg': the preconditioner {what} is not symmetric, and CG needs a symmetric "
        "positive definite one for this symmetric A (with it CG breaks down or stalls): use "
        "precond='ilu0' (IC(0) here), 'isai' or 'block-isai' (variant 'auto' or 'spd'), "
        "'jacobi' or 'block-jacobi' -- or method='gmres' or 'bicgstab' to keep this one")
