"""Error-free transformations (EFT), written once in plain Python, compiled per target.

Reference
---------
T. Ogita, S. M. Rump, S. Oishi, "Accurate sum and dot product",
SIAM J. Sci. Comput. 26(6):1955-1988, 2005, doi:10.1137/030601818.

* Algorithm 3.1 ``TwoSum``  (Knuth)              -> :func:`two_sum`
* Algorithm 3.2 ``Split``   (Veltkamp)           -> :func:`split`
* Algorithm 3.3 ``TwoProduct`` (Dekker/Veltkamp) -> :func:`two_prod_dekker`
* FMA form of ``TwoProduct`` (their eq. (3.5))   -> :func:`two_prod`
* Algorithm 4.4 ``Sum2``                         -> ``mpsolve.kernels.cpu.eft.sum2``
* Algorithm 5.3 ``Dot2``                         -> ``mpsolve.kernels.cpu.eft.dot2``
* Algorithm 6.1 ``GenDot`` (test generator)      -> ``tests/test_eft.py``

The paper assumes no underflow or overflow.  Same here: :func:`two_sum` is exact
while ``a + b`` does not overflow; :func:`two_prod` is exact while ``a*b`` neither
overflows nor its error underflows (``|a*b| >= 2^(emin + p)``); a product that
overflows gives ``inf``/``nan`` (as the native dot does).

Targets
-------
The scalar functions below are the only copy of the EFTs.  Where rounding
matters they call four *primitives* and nothing else: ``fma(a, b, c)``
(``fl(a*b + c)``, one rounding) and the correctly rounded ``add_rn``,
``sub_rn``, ``mul_rn``.  Those are the only things in which devices differ:
a compiler that contracts ``a*b + c`` into an FMA, or reassociates, destroys an
EFT, so every ``+ - *`` of an EFT goes through a primitive (division and
``sqrt`` only appear in :func:`_sqrt_pair`, where nothing can be contracted).

:func:`specialise` makes a target: it rebuilds each function from its code
object with globals that bind the target's primitives and the target's own
versions of the other EFTs, then applies the target's decorator.  So

* **CPU** (:mod:`mpsolve.kernels.cpu.eft`): ``specialise(numba.njit(...),
  mpsolve.kernels.cpu.intrin)``: LLVM's ``llvm.fma`` and the plain operators,
  compiled without ``fastmath`` (Numba/LLVM never contract without the
  ``contract`` flag).  The compensated reductions (Sum2, Dot2, ...) are built
  on those there.
* **CUDA** (the GPU backend): the same call with ``numba.cuda.jit(device=True)``
  and the CUDA intrinsics module, whose ``fma`` is ``numba.cuda.fma`` and whose
  ``*_rn`` are libdevice's ``__dadd_rn`` etc. (which NVVM never contracts).
* **Python** (the ``reference`` device): this module itself.  Its primitives
  :func:`fma`, :func:`add_rn`, :func:`sub_rn`, :func:`mul_rn` are plain Python,
  the FMA computed exactly with :class:`fractions.Fraction` and rounded once, so
  called directly :func:`two_sum`, :func:`two_prod` and :func:`split` are exact
  oracles (on Python floats, NumPy FP64 or FP32 scalars) for the compiled ones.

The only format-dependent constant, Veltkamp's split factor, is chosen by
``isinstance(a, np.float32)``, which Numba resolves at compile time.  This
module imports neither Numba nor any device package, and registers nothing.
"""
from __future__ import annotations

import builtins
import dis
import math
import struct
import types
from fractions import Fraction

import numpy as np

__all__ = [
    "two_sum", "fast_two_sum", "two_prod", "two_prod_dekker", "split",
    "fma", "add_rn", "sub_rn", "mul_rn", "specialise", "PRIMITIVES", "SCALAR_EFTS",
]

#: What a target must provide (attributes of the module or namespace given to
#: :func:`specialise`).
PRIMITIVES = ("fma", "add_rn", "sub_rn", "mul_rn")


# --- the Python target's primitives ---------------------------------------------------

def _round_f64(q):
    """The FP64 value nearest to the Fraction ``q`` (ties to even; overflow -> inf)."""
    try:
        return float(q)                  # int / int: correctly rounded, subnormals too
    except OverflowError:
        return math.inf if q > 0 else -math.inf


def _round_f32(q):
    """The FP32 value nearest to the Fraction ``q``, rounded once.

    ``np.float32(float(q))`` would round twice, and that is wrong when ``float(q)``
    lands exactly on a midpoint of two FP32 numbers that ``q`` is not on.  Round to
    FP64 *to odd* first (of the two doubles around ``q``, the one with an odd last
    bit): with 53 >= 24 + 2 bits the second rounding is then the correct one.
    """
    f = _round_f64(q)
    if math.isfinite(f) and Fraction(f) != q:
        if not struct.unpack("<Q", struct.pack("<d", f))[0] & 1:
            f = math.nextafter(f, math.inf if Fraction(f) < q else -math.inf)
    with np.errstate(over="ignore"):
        return np.float32(f)


def fma(a, b, c):
    """Fused multiply-add ``fl(a*b + c)`` in exact arithmetic, rounded once (Python target).

    ``a*b + c`` is computed as a :class:`fractions.Fraction` and rounded to the
    nearest FP32 value when all three arguments are ``np.float32``, else to the
    nearest FP64 value (as the CPU intrinsic converts them).  Signed zeros,
    infinities and NaNs follow IEEE 754.  Slow: an oracle, not a kernel.

    Examples
    --------
    >>> fma(1 + 2.0**-30, 1 - 2.0**-30, -1.0) == -2.0**-60   # a*b then +c gives 0
    True
    >>> import numpy as np
    >>> a, c = np.float32(1 + 2.0**-12), np.float32(2.0**-80)   # a*a + c just above
    >>> float(fma(a, a, c)) == 1 + 2.0**-11 + 2.0**-23            # an FP32 midpoint
    True
    """
    f32 = isinstance(a, np.float32) and isinstance(b, np.float32) and isinstance(c, np.float32)
    a, b, c = float(a), float(b), float(c)
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        # an exact finite product plus inf/nan is c; otherwise a*b is inf or nan
        r = c if math.isfinite(a) and math.isfinite(b) else a * b + c
        return np.float32(r) if f32 else r
    q = Fraction(a) * Fraction(b) + Fraction(c)
    if q == 0:
        # an exact zero is +0, except (-0) + (-0)
        neg = ((a == 0 or b == 0) and c == 0 and math.copysign(1.0, c) < 0
               and math.copysign(1.0, a) * math.copysign(1.0, b) < 0)
        r = -0.0 if neg else 0.0
        return np.float32(r) if f32 else r
    return _round_f32(q) if f32 else _round_f64(q)


def add_rn(a, b):
    """``fl(a + b)``: the host's IEEE addition (Python float or NumPy scalar)."""
    return a + b


def sub_rn(a, b):
    """``fl(a - b)``: the host's IEEE subtraction (Python float or NumPy scalar)."""
    return a - b


def mul_rn(a, b):
    """``fl(a * b)``: the host's IEEE multiplication (Python float or NumPy scalar)."""
    return a * b


# --- error-free transformations (the one copy) -------------------------------------------
#
# Each function below may use: the four primitives, numpy as ``np``, builtins, and the
# functions listed before it in SCALAR_EFTS.  specialise() checks this.

def _split_factor(a):
    """Veltkamp's constant ``2^ceil(p/2) + 1`` in the format of ``a``.

    Numba resolves ``isinstance`` at compile time (the other branch is pruned).
    """
    if isinstance(a, np.float32):
        return np.float32(4097.0)        # 2^12 + 1, p = 24
    return 134217729.0                   # 2^27 + 1, p = 53


def two_sum(a, b):
    """Knuth's TwoSum (ORO 2005, Algorithm 3.1): ``s + e == a + b`` exactly.

    Branch-free, 6 flops, any order of magnitude of ``a`` and ``b``.

    Parameters
    ----------
    a, b : float
        Both FP64 or both FP32.

    Returns
    -------
    s : float
        ``fl(a + b)``.
    e : float
        The rounding error, ``a + b - s`` (exact, if ``a + b`` does not overflow).

    Examples
    --------
    >>> two_sum(1.0, 2.0**-60)
    (1.0, 8.673617379884035e-19)
    """
    s = add_rn(a, b)                     # s = fl(a + b)
    bb = sub_rn(s, a)                    # the part of b that went into s
    # what a and b lost:  s + e == a + b exactly
    e = add_rn(sub_rn(a, sub_rn(s, bb)), sub_rn(b, bb))
    return s, e


def fast_two_sum(a, b):
    """Dekker's FastTwoSum: ``s + e == a + b`` exactly, **if** ``|a| >= |b|``.

    3 flops; the result is not exact when ``|a| < |b|`` (use :func:`two_sum`).

    Examples
    --------
    >>> fast_two_sum(1.0, 2.0**-60)
    (1.0, 8.673617379884035e-19)
    """
    s = add_rn(a, b)                     # s = fl(a + b)
    e = sub_rn(b, sub_rn(s, a))          # s - a is exact when |a| >= |b|:  s + e == a + b
    return s, e


def two_prod(a, b):
    """TwoProduct with an FMA: ``p + e == a * b`` exactly.

    Parameters
    ----------
    a, b : float
        Both FP64 or both FP32.

    Returns
    -------
    p : float
        ``fl(a * b)``.
    e : float
        ``fma(a, b, -p)``, the rounding error of the product (exact unless
        ``a*b`` overflows or its error falls below the subnormal range).

    Examples
    --------
    >>> two_prod(1 + 2.0**-30, 1 - 2.0**-30)
    (1.0, -8.673617379884035e-19)
    """
    p = mul_rn(a, b)                     # p = fl(a b)
    e = fma(a, b, -p)                    # e = a b - p, exact:  p + e == a b
    return p, e


def split(a):
    """Veltkamp's split (ORO 2005, Algorithm 3.2): ``hi + lo == a``, each half
    with at most ``ceil(p/2)`` significant bits (so ``hi*hi`` etc. are exact).

    The factor is ``2^27 + 1`` for FP64 and ``2^12 + 1`` for FP32.  Overflows for
    ``|a| > 2^996`` (FP64) / ``2^115`` (FP32).

    Examples
    --------
    >>> split(1 + 2.0**-52)               # hi + lo == 1 + 2^-52
    (1.0, 2.220446049250313e-16)
    """
    c = mul_rn(_split_factor(a), a)      # c = fl((2^s + 1) a)
    hi = sub_rn(c, sub_rn(c, a))         # the upper half of a's significand
    lo = sub_rn(a, hi)                   # the rest:  hi + lo == a exactly
    return hi, lo


def two_prod_dekker(a, b):
    """Dekker's TwoProduct without FMA (ORO 2005, Algorithm 3.3): ``p + e == a*b``.

    17 flops; the fallback where no FMA is available.  Same exactness
    conditions as :func:`two_prod`, plus no overflow in :func:`split`.

    Examples
    --------
    >>> two_prod_dekker(1 + 2.0**-30, 1 - 2.0**-30) == two_prod(1 + 2.0**-30, 1 - 2.0**-30)
    True
    """
    p = mul_rn(a, b)                     # p = fl(a b)
    ah, al = split(a)
    bh, bl = split(b)
    # the half-products are exact; subtract them from p in decreasing size
    t = sub_rn(p, mul_rn(ah, bh))
    t = sub_rn(t, mul_rn(al, bh))
    t = sub_rn(t, mul_rn(ah, bl))
    e = sub_rn(mul_rn(al, bl), t)        # p + e == a b exactly
    return p, e


# --- helpers of the compensated reductions (scalar, so written here too) -------------------

def _round_pair(p, s):
    """``fl(p + s)`` in the pair's own dtype; an infinite ``p`` (overflow, or an
    infinite input) is returned as it is, as the native dot would give it
    (its error term is then ``nan``)."""
    if sub_rn(p, p) != 0:                # p is inf or nan
        return p
    return add_rn(p, s)                  # res = fl(p + s)


def _merge4(h0, h1, h2, h3, l0, l1, l2, l3):
    """Merge four (high, low) accumulator pairs into one: the high parts are added
    error-free (``two_sum``), their errors join the low parts."""
    h0, q0 = two_sum(h0, h1)
    h2, q2 = two_sum(h2, h3)
    h0, q1 = two_sum(h0, h2)
    lo = add_rn(add_rn(add_rn(l0, l1), add_rn(l2, l3)), add_rn(add_rn(q0, q2), q1))
    return h0, lo


def _sqrt_pair(p, s):
    """``sqrt(p + s)`` for a Dot2 pair, with one Newton step on the pair.

    ``np.sqrt`` and ``/`` are IEEE (correctly rounded) without fastmath, and no
    product is left for a compiler to contract into them.
    """
    if not (p > 0 and p < np.inf):
        return np.sqrt(_round_pair(p, s))          # 0, inf or nan: nothing to correct
    r = np.sqrt(p)                                 # r ~ sqrt(p)
    res = add_rn(fma(-r, r, p), s)                 # (p - r^2) exact by FMA, + s
    return add_rn(r, res / add_rn(r, r))           # r + (p + s - r^2) / (2 r)


#: The functions :func:`specialise` compiles, in dependency order: each calls
#: only the primitives and functions listed before it.
SCALAR_EFTS = ("_split_factor", "two_sum", "fast_two_sum", "two_prod", "split",
               "two_prod_dekker", "_round_pair", "_merge4", "_sqrt_pair")


def _global_names(code):
    """The names ``code`` (and the code objects nested in it) looks up as globals."""
    names = {ins.argval for ins in dis.get_instructions(code)
             if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def specialise(jit, intrin, *, module=None):
    """Compile the scalar EFTs of this module for a target.

    Each function of :data:`SCALAR_EFTS` is rebuilt from its code object
    (``types.FunctionType(f.__code__, env, ...)``) with one globals dict ``env``
    that binds ``np``, the target's primitives (:data:`PRIMITIVES`, taken from
    ``intrin``) and the target's versions of the functions built before it, then
    decorated with ``jit``.  No source is copied: every target runs the same
    code objects.

    Parameters
    ----------
    jit : callable or None
        The target's decorator, e.g. ``numba.njit(nogil=True, fastmath=False)``
        for the CPU or ``numba.cuda.jit(device=True)``; ``None``: plain Python.
        It must not allow fast-math (contraction or reassociation).
    intrin : module or namespace
        Provides ``fma``, ``add_rn``, ``sub_rn`` and ``mul_rn`` for the target.
    module : str, optional
        ``__module__`` of the built functions (default: this module's name).

    Returns
    -------
    types.SimpleNamespace
        One attribute per name of :data:`SCALAR_EFTS`.

    Examples
    --------
    >>> import mpsolve.kernels.eft as eft
    >>> py = specialise(None, eft)                 # the Python target, rebuilt
    >>> py.two_sum(1.0, 2.0**-60) == two_sum(1.0, 2.0**-60)
    True
    >>> py.two_sum.__code__ is two_sum.__code__
    True
    """
    missing = [p for p in PRIMITIVES if not hasattr(intrin, p)]
    if missing:
        raise TypeError(f"specialise: the target provides no {', '.join(missing)}")
    env = {"__builtins__": builtins, "__name__": module or __name__, "np": np}
    env.update({p: getattr(intrin, p) for p in PRIMITIVES})
    built = {}
    for name in SCALAR_EFTS:
        tmpl = globals()[name]
        unbound = {g for g in _global_names(tmpl.__code__)
                   if g not in env and not hasattr(builtins, g)}
        if unbound:     # e.g. a new helper used before it is built, or a stray import
            raise NameError(f"specialise: {name} uses {sorted(unbound)}, which no target binds")
        f = types.FunctionType(tmpl.__code__, env, tmpl.__name__, tmpl.__defaults__,
                               tmpl.__closure__)
        f.__kwdefaults__ = tmpl.__kwdefaults__
        f.__doc__ = tmpl.__doc__
        f.__qualname__ = tmpl.__qualname__
        f.__module__ = module or tmpl.__module__
        f = f if jit is None else jit(f)
        env[name] = f
        built[name] = f
    return types.SimpleNamespace(**built)
