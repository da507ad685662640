"""The reduction tree of ``kernels/cuda/reduce.py``, in plain Python (the oracle of its bits).

:func:`model` computes ``dot``/``nrm2``/``sum`` (native or compensated) with the same
operations in the same order as the CUDA kernels -- chunks of ``chunk`` items, lane ``l``
of a chunk taking items ``l, l + 32, ...``, the ``shfl_down`` tree (16, 8, 4, 2, 1), merge
levels while more than ``chunk`` partials remain, one final warp -- using the Python
target of :mod:`mpsolve.kernels.eft` (exact ``fma``, IEEE ``+ - *``).  The simulator
(``sim_checks.py``) and a real GPU (``gpu_checks.py``) must both give its bits: the
result depends on ``n`` and ``chunk`` only.
"""
from __future__ import annotations

import math

from mpsolve.kernels import eft as E

__all__ = ["model"]


def _warp_merge(vals, add):
    vals = list(vals)
    off = 16
    while off:
        vals = [add(vals[l], vals[l + off]) if l + off < 32 else vals[l] for l in range(32)]
        off //= 2
    return vals[0]


def _tree(m, chunk, zero, elem, add):
    """The reduction tree of kernels/cuda/reduce.py in Python: chunk c's lane l takes items
    c*chunk + l, +32, ... (``acc = elem(acc, i)``); lanes merged by the shfl_down tree;
    levels of ``chunk`` partials while more than ``chunk``; one final warp."""
    def level(count, item):
        out = []
        for lo in range(0, count, chunk):
            lanes = []
            for l in range(32):
                acc = zero
                for i in range(lo + l, min(lo + chunk, count), 32):
                    acc = item(acc, i)
                lanes.append(acc)
            out.append(_warp_merge(lanes, add))
        return out

    parts = level(m, elem)
    while len(parts) > chunk:
        parts = level(len(parts), lambda acc, i, p=parts: add(acc, p[i]))
    lanes = []
    for l in range(32):
        acc = zero
        for i in range(l, len(parts), 32):
            acc = add(acc, parts[i])
        lanes.append(acc)
    return _warp_merge(lanes, add)


def _pair_add(a, b):
    p, q = E.two_sum(a[0], b[0])
    return p, E.add_rn(a[1], E.add_rn(b[1], q))


def model(op, mode, x, y, chunk):
    t = x.dtype.type
    z = t(0)
    if mode == "compensated":
        if op == "sum":
            def elem(acc, i):
                p, q = E.two_sum(acc[0], x[i])
                return p, E.add_rn(acc[1], q)
        else:
            def elem(acc, i):
                h, e = E.two_prod(x[i], y[i])
                p, q = E.two_sum(acc[0], h)
                return p, E.add_rn(acc[1], E.add_rn(q, e))
        p, s = _tree(x.size, chunk, (z, z), elem, _pair_add)
        return float(E._sqrt_pair(p, s) if op == "nrm2" else E._round_pair(p, s))
    if op == "sum":
        def elem(acc, i):
            return E.add_rn(acc, x[i])
    else:
        def elem(acc, i):
            return E.fma(x[i], y[i], acc)
    s = _tree(x.size, chunk, z, elem, E.add_rn)
    return float(t(math.sqrt(s)) if op == "nrm2" else s)
