"""The GPU (Block-)ISAI set-up kernels (``kernels/cuda/isai_setup.py``) compiled for real
GPUs, without one.

Run by ``tests/test_cuda.py`` in its own process with the simulator off.  (The registry's
generic check, ``compile_checks.py``, compiles every kernel these ops launch; this file
adds their specific facts.)  For cc 8.0 and 9.0: the gather kernel's PTX linked to SASS by
nvJitLink, no spills, no stack frame; the registered set-up ops declare the kernels they
launch -- the gather kernel, the warp solves (declared warp kernels: ``compile_checks.py``
asserts ``shfl.sync``/``SHFL`` in them), the DMMA helper for ``block_tri_isai``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numba
import pytest

assert not numba.config.ENABLE_CUDASIM, "the compile checks need the simulator off"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_checks import CCS, _linked, link, offline, resources, sass  # noqa: E402

from mpsolve.kernels import lookup  # noqa: E402
from mpsolve.kernels.cuda import dmma, isai_setup as S, localsolve as LS  # noqa: E402

F64 = ("float64",)


def _build(d, sig, cc):
    from numba import cuda

    with offline(cc):
        ptx, _ = cuda.compile_ptx(d.py_func, sig, cc=cc,
                                  launch_bounds=d.targetoptions.get("launch_bounds"))
    cubin, info = link(ptx, cc, _linked(d, cc))
    return ptx, cubin, info


def test_the_setup_ops_declare_their_kernels():
    want = {"gather_local": {S._gather_kernel},
            "local_lu_solve": {S._gather_kernel, LS._gj_kernel, LS._gjb_kernel},
            "local_tri_solve": {S._gather_kernel, LS._tri_kernel, LS._trib_kernel},
            "block_tri_isai": {dmma._dmma_kernel}}
    for op, kernels in want.items():
        f = lookup("gpu", op, F64)
        assert {d for d, _ in f.cuda_kernels} == kernels, op
    assert lookup("gpu", "local_lu_solve", F64).cuda_warp == {LS._gj_kernel, LS._gjb_kernel}
    assert lookup("gpu", "local_tri_solve", F64).cuda_warp == {LS._tri_kernel,
                                                                LS._trib_kernel}


@pytest.mark.parametrize("cc", CCS, ids=lambda c: f"sm_{c[0]}{c[1]}")
@pytest.mark.parametrize("name", ["gjb", "trib"])
def test_block_row_warp_kernels_compile_shfl_no_spills(name, cc):
    """The block-row (``nrhs = b``) warp solves: no spills, ``shfl.sync``/``SHFL``."""
    d, sig = {"gjb": (LS._gjb_kernel, LS._SIG_GJB[0]),
              "trib": (LS._trib_kernel, LS._SIG_TRIB[0])}[name]
    ptx, cubin, info = _build(d, sig, cc)
    res = resources(info)
    print(f"{name} sm_{cc[0]}{cc[1]}: {res}")
    assert res["registers"] is not None, info
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, info
    assert "shfl.sync" in ptx and "SHFL" in sass(cubin)


@pytest.mark.parametrize("cc", CCS, ids=lambda c: f"sm_{c[0]}{c[1]}")
def test_gather_compiles_links_no_spills(cc):
    """The gather kernel (new here; the warp solves and the DMMA helper have their own
    file, ``compile_localsolve.py``)."""
    ptx, cubin, info = _build(S._gather_kernel, S._SIG_GATHER[0], cc)
    res = resources(info)
    print(f"gather sm_{cc[0]}{cc[1]}: {res}")
    assert res["registers"] is not None, info
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, info
    assert not res["stack"], info
    text = sass(cubin)
    assert "LDG" in text and "STG" in text          # global loads and stores, no local memory
