"""GMRES's small least-squares problem: Givens rotations and back substitution.

The ``(restart + 1) x restart`` Hessenberg matrix lives on the host in FP64
whatever the device of the Krylov vectors (Saad, Algorithm 6.9); this per-step
bookkeeping is compiled because in Python it costs more than an SpMV on a small
matrix (~15 us per inner step).  Complex128 for complex vectors: the rotation
``G = [[conj(c), conj(s)], [-s, c]]`` with ``c = h_jj / d``, ``s = h_j+1,j / d``,
``d = sqrt(|h_jj|^2 + |h_j+1,j|^2)`` is unitary and maps ``(h_jj, h_j+1,j)`` to ``(d, 0)``;
for real ``H`` it is the real rotation, the same code.  Registered as ``givens`` and ``back_substitute``.
"""
import math

from numba import njit

from ._config import JIT
from .field import conj
from ..registry import register

# The small (restart x restart) least-squares problem lives on the host in FP64 whatever
# the device of the vectors; its per-step bookkeeping is compiled because in Python it
# costs more than an SpMV on a small matrix.
@njit(**JIT)
def _rotate(H, cs, sn, g, j):
    """Apply the previous Givens rotations to column ``j`` of ``H``, make the one that
    zeroes ``H[j + 1, j]``, update ``g``; return the new residual estimate ``|g[j+1]|``."""
    for i in range(j):
        hi, hi1 = H[i, j], H[i + 1, j]
        H[i, j] = conj(cs[i]) * hi + conj(sn[i]) * hi1
        H[i + 1, j] = -sn[i] * hi + cs[i] * hi1
    den = math.hypot(abs(H[j, j]), abs(H[j + 1, j]))
    if den == 0.0:
        cs[j], sn[j] = 1.0, 0.0
    else:
        cs[j], sn[j] = H[j, j] / den, H[j + 1, j] / den
    H[j, j] = den
    H[j + 1, j] = 0.0
    g[j + 1] = -sn[j] * g[j]
    g[j] = conj(cs[j]) * g[j]
    return abs(g[j + 1])


@njit(**JIT)
def _back_substitute(H, g, k, y):
    """``y[:k] = R^{-1} g[:k]`` for the upper triangular ``R = H[:k, :k]`` (a zero
    diagonal entry gives a zero component)."""
    for i in range(k - 1, -1, -1):
        acc = g[i]
        for l in range(i + 1, k):
            acc -= H[i, l] * y[l]
        y[i] = acc / H[i, i] if H[i, i] != 0.0 else 0.0


@register("cpu", "givens", [("float64",), ("complex128",)])
def givens(H, cs, sn, g, j):
    """Rotate column ``j`` of ``H`` by the previous rotations, make rotation ``j``
    (zeroing ``H[j+1, j]``), update ``g``; return ``|g[j+1]|``, the residual estimate."""
    return _rotate(H, cs, sn, g, j)


@register("cpu", "back_substitute", [("float64",), ("complex128",)])
def back_substitute(H, g, k, y):
    """``y[:k] = R^{-1} g[:k]``, ``R = H[:k, :k]`` upper triangular (0 where ``R_ii = 0``)."""
    _back_substitute(H, g, k, y)
