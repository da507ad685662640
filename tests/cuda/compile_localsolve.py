"""The warp local solves and the FP64 Tensor Core helper compiled for real GPUs, without one.

Run by ``tests/test_cuda.py`` in its own process with the simulator off.  (The registry's
generic check, ``compile_checks.py``, compiles these kernels too; this file adds the
kernel-specific SASS facts.)  For cc 8.0 and 9.0: numba's PTX (+ ``dmma.cu`` by NVRTC for
the helper) linked to SASS by nvJitLink, no spills; ``SHFL`` in the warp solves' SASS;
``DMMA`` in the helper's SASS (the FP64 8x8x4 Tensor Core instruction) and the
``mma.sync...m8n8k4...f64`` in the NVRTC PTX.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numba
import pytest

assert not numba.config.ENABLE_CUDASIM, "the compile checks need the simulator off"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_checks import CCS, _linked, link, offline, resources, sass  # noqa: E402

from mpsolve.kernels.cuda import dmma, localsolve as LS  # noqa: E402


def _build(d, sig, cc):
    from numba import cuda

    opts = d.targetoptions
    with offline(cc):
        ptx, _ = cuda.compile_ptx(d.py_func, sig, cc=cc,
                                  launch_bounds=opts.get("launch_bounds"))
    extra = _linked(d, cc)
    cubin, info = link(ptx, cc, extra)
    return ptx, extra, cubin, info


CASES = [("gj", LS._gj_kernel, LS._SIG_GJ[0], "SHFL"),
         ("tri", LS._tri_kernel, LS._SIG_TRI[0], "SHFL"),
         ("dmma", dmma._dmma_kernel, dmma._SIG[0], "DMMA")]


@pytest.mark.parametrize("cc", CCS, ids=lambda c: f"sm_{c[0]}{c[1]}")
@pytest.mark.parametrize("name,d,sig,op", CASES, ids=[c[0] for c in CASES])
def test_compiles_links_sass(name, d, sig, op, cc):
    ptx, extra, cubin, info = _build(d, sig, cc)
    res = resources(info)
    print(f"{name} sm_{cc[0]}{cc[1]}: {res}")
    assert res["registers"] is not None, info
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, info
    text = sass(cubin)
    assert op in text, f"{name}: no {op} in the SASS for sm_{cc[0]}{cc[1]}"
    if name == "dmma":
        cu_ptx = b"".join(data for kind, data, _ in extra)
        assert b"mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64" in cu_ptx
        assert "mpsolve_dmma_m8n8k4" in ptx          # numba's kernel calls the C++ function


def test_dmma_ptx_cached_privately_keyed_by_nvrtc_version(tmp_path, monkeypatch):
    """The NVRTC PTX of ``dmma.cu`` is kept in this user's private cache folder (not the
    shared temporary folder, where another user could plant PTX for this process to
    link), under a name that changes with the NVRTC version; a folder that others can
    write is not used (numba then compiles the ``.cu`` at the first launch)."""
    from cuda.bindings import nvrtc

    folder = tmp_path / "cache"
    monkeypatch.setenv("MPSOLVE_CACHE_DIR", str(folder))
    path = dmma._nvrtc_ptx()
    assert Path(path).parent == folder and path.endswith(".ptx")
    assert (folder.stat().st_mode & 0o077) == 0
    assert b"m8n8k4" in Path(path).read_bytes()
    version = ".".join(str(v) for v in nvrtc.nvrtcVersion()[1:])
    import hashlib
    src = Path(dmma.CU_PATH).read_bytes()
    key = hashlib.sha256(src + dmma.ARCH.encode() + version.encode()).hexdigest()[:16]
    assert Path(path).name == f"dmma-{key}.ptx"
    folder.chmod(0o777)
    assert dmma._cache_dir() is None and dmma._nvrtc_ptx() == dmma.CU_PATH
