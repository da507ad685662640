"""SciPy's own tests of ``cg``/``gmres``/``bicgstab`` (``scipy/sparse/linalg/_isolve/tests/
test_iterative.py`` of the installed SciPy) run against mpsolve's drop-ins: the file is
read at test time, its solver list narrowed to mpsolve's three (as they are, with
precision ``eft`` or ``mixed``, and on the NumPy ``reference`` device), and run by pytest
in a subprocess.  Nothing of SciPy's is copied into this repository; a SciPy whose test
file is not installed, or reads differently, skips with the reason."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

IMPORT = "from mpsolve import bicgstab, cg, gmres\n"


def _scipy_test_file() -> Path:
    spec = importlib.util.find_spec("scipy.sparse.linalg._isolve")
    path = Path(spec.origin).parent / "tests" / "test_iterative.py" if spec else None
    if path is None or not path.is_file():
        pytest.skip("the installed SciPy ships without its tests (test_iterative.py)")
    return path


def _with_defaults(kw):
    """The drop-ins with the keywords ``kw`` as their defaults (none: mpsolve's own)."""
    if not kw:
        return IMPORT
    return (f"import functools as _ft\nimport mpsolve as _mp\n"
            f"cg, gmres, bicgstab = (_ft.wraps(f)(_ft.partial(f, **{kw!r}))\n"
            f"                       for f in (_mp.cg, _mp.gmres, _mp.bicgstab))\n")


#: (keywords, SciPy tests deselected): the default, two precisions and the NumPy reference
#: device.  With an FP32 preconditioner, SciPy's ``TestGMRES::test_callback`` -- GMRES's
#: first residual norm with ``M = 1e-3 I``, compared to 1e-10 -- differs at FP32's
#: rounding (5e-8), as it must
VARIANTS = [({}, ()), ({"precision": "eft"}, ()),
            ({"precision": "mixed"}, ("TestGMRES::test_callback",)),
            ({"device": "reference"}, ())]


@pytest.mark.parametrize("kw,deselect", VARIANTS,
                         ids=["-".join(map(str, k.values())) or "default" for k, _ in VARIANTS])
def test_scipys_iterative_solver_tests_pass_with_mpsolve_solvers(tmp_path, kw, deselect):
    text = _scipy_test_file().read_text()
    solvers = re.search(r"^_SOLVERS = \[[^\]]*\]", text, flags=re.M)
    if solvers is None:
        pytest.skip("SciPy's test_iterative.py has no _SOLVERS list to narrow")
    text = (text[:solvers.start()] + _with_defaults(kw)
            + "_SOLVERS = [bicgstab, cg, gmres]" + text[solvers.end():])
    test = tmp_path / "test_iterative_mpsolve.py"
    test.write_text(text)
    skip = [a for d in deselect for a in ("--deselect", f"{test.name}::{d}")]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-W", "ignore::pytest.PytestUnknownMarkWarning", str(test), *skip],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900)
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert re.search(r"\b\d{2,} passed", proc.stdout), tail   # SciPy's tests ran, not none
