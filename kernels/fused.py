"""The argument pack of the compiled Krylov loops (``cg_loop`` of
:data:`~mpsolve.kernels.primitives.CONTRACT`), device-neutral: no kernel here.

A loop takes the system matrix and the preconditioner as raw arrays and small integer
codes.  :func:`pack` builds them from descriptions the solve layer has:

* the matrix: ``(parts, indptr, indices, data, mode, fused_dot)`` of a stored CSR
  operator (``mode`` ``"acc64"``/``"acc32"``; ``fused_dot``: the solve's ``p . Ap`` comes
  from the fused ``spmv_dot`` kernel);
* the preconditioner's *fusable description*
  (:meth:`mpsolve.precond.base.Preconditioner.fusable`): ``None`` (no preconditioner),
  ``("diag", (d,), None)``, ``("csr", ((indptr, indices, data), ...), mode)`` (one or two
  CSR products applied in order), ``("ilu", (lptr, lind, lval, uptr, uind, uval, dinv),
  bounds)`` (``bounds``: the row bounds of the factors' diagonal blocks, or ``None`` for
  one block; a loop's one pass over all rows computes what the blocks' separate passes
  compute, the factors coupling no two blocks).

Each device's loops register a launch plan for ``cg_loop`` that calls :func:`pack` and
adds its own conditions (the CPU: every kernel serial at this size).
"""
from __future__ import annotations

import numpy as np

__all__ = ["ACC64", "ACC32", "ACC64_DOT", "P_NONE", "P_DIAG", "P_CSR", "P_CSR2", "P_ILU",
           "P_ILU2", "pack"]

#: Row-sum modes of a CSR product in a loop.
ACC64, ACC32, ACC64_DOT = 0, 1, 2
#: Preconditioner programs: none (``z`` is ``r``), ``z = d * r``, one CSR product, two
#: CSR products (intermediate in the scratch vector ``t``), the ILU(0) sweeps.
P_NONE, P_DIAG, P_CSR, P_CSR2, P_ILU = 0, 1, 2, 3, 4
#: The ILU(0) sweeps of two diagonal blocks, each swept by the thread that owns its rows:
#: a program of the CPU's two-thread loops only, whose row split is then the blocks'.
P_ILU2 = 5

_MODES = {"acc64": ACC64, "acc32": ACC32}


def pack(A, M, dtype):
    """``(A_arrays, amode, prog, P, pmode)`` for a loop, or ``None`` when a description
    has no program here.  ``dtype``: the storage dtype of the preconditioner's values
    (the unused slots of ``P`` are empty arrays of it, so the loop's types are stable)."""
    parts, ip, ix, data, mode, fused_dot = A
    if mode not in _MODES:
        return None
    amode = ACC64_DOT if (fused_dot and mode == "acc64") else _MODES[mode]
    i32 = np.zeros(1, np.int32)
    v = np.zeros(1, dtype)
    if M is None:
        return (parts, ip, ix, data), amode, P_NONE, (i32, i32, v, i32, i32, v, v), ACC64
    kind, arrays, pm = M
    if kind == "diag":
        (d,) = arrays
        return (parts, ip, ix, data), amode, P_DIAG, (i32, i32, v, i32, i32, v, d), ACC64
    if kind == "csr" and len(arrays) in (1, 2) and pm in _MODES:
        first = arrays[0]
        second = arrays[1] if len(arrays) == 2 else (first[0], first[1], first[2])
        if not all(a.dtype == first[k].dtype for k, a in enumerate(second)):
            return None
        prog = P_CSR if len(arrays) == 1 else P_CSR2
        return ((parts, ip, ix, data), amode, prog,
                (first[0], first[1], first[2], second[0], second[1], second[2], v),
                _MODES[pm])
    if kind == "ilu":
        return (parts, ip, ix, data), amode, P_ILU, tuple(arrays), ACC64
    return None
