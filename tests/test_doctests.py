"""The Examples sections of the public docstrings run (house rule 9)."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "mpsolve.api", "mpsolve.precision", "mpsolve.result", "mpsolve._system",
    "mpsolve.operator", "mpsolve.krylov.cg", "mpsolve.krylov.gmres", "mpsolve.krylov.bicgstab",
    "mpsolve.kernels.eft", "mpsolve.kernels.cpu.eft", "mpsolve.kernels.cpu.intrin",
    "mpsolve.kernels.registry", "mpsolve.kernels.primitives", "mpsolve.backend",
    "mpsolve.precond._pattern",
    "mpsolve.precond.jacobi", "mpsolve.precond.block_jacobi", "mpsolve.precond.isai",
    "mpsolve.precond.block_isai", "mpsolve.precond.ilu", "mpsolve.precond.block_ilu",
    "mpsolve.auto", "mpsolve.precond._reorder", "mpsolve.precond.ilut",
    "mpsolve.matrices.generators", "mpsolve.matrices.mmio",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS,
                          verbose=False)
    assert res.failed == 0, f"{res.failed} of {res.attempted} examples failed in {name}"


def test_every_public_solver_has_an_example():
    import mpsolve

    for f in (mpsolve.cg, mpsolve.gmres, mpsolve.bicgstab, mpsolve.solve):
        assert ">>>" in f.__doc__, f.__name__
