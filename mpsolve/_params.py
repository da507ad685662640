"""Which keyword arguments a preconditioner class takes.

The command line, the benchmark runner and the PETSc plug-in all hold a bag of
options (``block_size``, ``sparsity_power``, ``variant``, ...) and hand each
preconditioner class only those its constructor names.
"""
from __future__ import annotations

import functools
import inspect

__all__ = ["init_params", "accepted_params"]


@functools.lru_cache(maxsize=None)
def init_params(cls) -> frozenset:
    """Names of the keyword arguments ``cls.__init__`` declares (``self`` and
    ``*args``/``**kwargs`` excluded), read once per class.

    >>> class P:
    ...     def __init__(self, variant="auto", *, block_size=None, **extra): ...
    >>> sorted(init_params(P))
    ['block_size', 'variant']
    """
    params = inspect.signature(cls.__init__).parameters
    return frozenset(name for name, p in list(params.items())[1:]
                     if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def accepted_params(cls, params, drop_none=True) -> dict:
    """The items of ``params`` that ``cls.__init__`` accepts by name.

    ``drop_none``: also leave out the items whose value is None (an option the
    user did not give), so the class's own default applies.

    >>> class P:
    ...     def __init__(self, variant="auto", block_size=None): ...
    >>> accepted_params(P, {"variant": "spd", "sparsity_power": 2, "block_size": None})
    {'variant': 'spd'}
    """
    names = init_params(cls)
    return {k: v for k, v in params.items()
            if k in names and not (drop_none and v is None)}
