"""mpsolve: mixed-precision sparse Krylov solvers.

``from mpsolve import cg, gmres, bicgstab`` -- drop-ins for ``scipy.sparse.linalg``;
``mpsolve.solve(...)`` -- the same solvers returning a :class:`SolveResult`;
:class:`Solver` -- the set-up once (``Solver(A, ...)``), then ``solve(b)`` many times;
:class:`Precision` -- precision policies (``double``, ``single``, ``mixed``,
``eft``, ``mixed-eft``, ``ir``, and GMRES's compressed-basis ``mixed-cb`` and
``mixed-eft-cb``).
"""
from ._demote import PrecisionRangeError
from .api import METHODS, bicgstab, cg, gmres, solve
from .precision import PRESETS, Precision
from .result import BREAKDOWNS, Escalation, SolveResult
from .solver import Solver

__version__ = "0.1.0"

__all__ = ["cg", "gmres", "bicgstab", "solve", "Solver", "Precision", "PRESETS", "SolveResult",
           "Escalation", "BREAKDOWNS", "PrecisionRangeError", "METHODS", "__version__"]
