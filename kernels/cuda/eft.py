"""Error-free transformations compiled for CUDA, and the pair merges of the reductions.

The scalar EFTs (``two_sum``, ``fast_two_sum``, ``two_prod``, ``split``,
``two_prod_dekker``, ``_round_pair``, ``_merge4``, ``_sqrt_pair``) are not written here:
they are :mod:`mpsolve.kernels.eft`'s code objects, compiled by
:func:`mpsolve.kernels.eft.specialise` as ``numba.cuda.jit(device=True)`` functions with the
CUDA primitives of :mod:`mpsolve.kernels.cuda._intrin` -- on hardware ``fma`` is PTX
``fma.rn`` and ``add_rn``/``sub_rn``/``mul_rn`` are libdevice's ``__nv_*_rn`` (PTX
``add.rn``/``mul.rn``, which ptxas never contracts); under the simulator their exact
emulations.  So the CUDA, CPU and Python (reference) targets run the same code.

This module adds the device functions the reductions of :mod:`mpsolve.kernels.cuda.reduce`
build on:

* :func:`pair_add` -- merge two ``(high, low)`` accumulator pairs: the high parts added
  error-free, their error joins the low parts (the CPU's chunk merge, ORO 2005 Alg. 4.4's
  accumulation of errors);
and the warp trees over them (``pair_warp_merge``, ``value_warp_merge``) are in
:mod:`.field`, written once for real and complex values.

Every function here is an EFT step in the sense of the compile test: its floating-point
arithmetic is ``add.rn``/``sub.rn``/``mul.rn``/``fma.rn`` only.
"""
from __future__ import annotations

import math
import types as _types

import numpy as np
from numba import cuda

from .. import eft as _eft
from . import _intrin
from ._intrin import SIM, add_rn

__all__ = ["two_sum", "fast_two_sum", "two_prod", "two_prod_dekker", "split", "round_pair",
           "sqrt_pair", "pair_add", "DEVICE_JIT"]

#: Options of every device function of the package: inlined into its callers on hardware
#: (LLVM ``alwaysinline``; the simulator's ``cuda.jit`` has no such option).
DEVICE_JIT = dict(device=True) if SIM else dict(device=True, forceinline=True)

#: The scalar EFTs of :mod:`mpsolve.kernels.eft`, compiled for CUDA.
_T = _eft.specialise(cuda.jit(**DEVICE_JIT), _intrin, module=__name__)

two_sum = _T.two_sum
fast_two_sum = _T.fast_two_sum
two_prod = _T.two_prod
split = _T.split
two_prod_dekker = _T.two_prod_dekker
round_pair = _T._round_pair


def _np_for_cuda():
    """What the EFTs use of ``np``, for the CUDA target: numba-cuda cannot lower the
    ``np.sqrt`` ufunc on a scalar (``KeyError: <ufunc 'sqrt'>``); ``math.sqrt`` is the same
    correctly rounded root (``sqrt.rn.f32``/``sqrt.rn.f64``, FP32 for an FP32 argument)."""
    mod = _types.ModuleType(__name__ + "._np")
    mod.sqrt = math.sqrt
    mod.inf = np.inf
    mod.float32 = np.float32
    return mod


if SIM:                                   # NumPy's scalar sqrt keeps FP32 an FP32
    sqrt_pair = _T._sqrt_pair
else:
    # _sqrt_pair rebuilt from the same code object, in the same globals as the others
    # (the target's primitives and EFTs) but with ``np`` -> :func:`_np_for_cuda`.
    _env = dict(_T._sqrt_pair.py_func.__globals__, np=_np_for_cuda())
    _tmpl = _eft._sqrt_pair
    _f = _types.FunctionType(_tmpl.__code__, _env, _tmpl.__name__, _tmpl.__defaults__,
                             _tmpl.__closure__)
    _f.__qualname__, _f.__module__, _f.__doc__ = _tmpl.__qualname__, __name__, _tmpl.__doc__
    sqrt_pair = cuda.jit(**DEVICE_JIT)(_f)


@cuda.jit(**DEVICE_JIT)
def pair_add(p, s, p2, s2):
    """``(p, s) + (p2, s2)`` as a pair: ``p + q == p_old + p2`` exactly, ``s`` collects
    ``s2`` and ``q``."""
    p, q = two_sum(p, p2)
    s = add_rn(s, add_rn(s2, q))
    return p, s
