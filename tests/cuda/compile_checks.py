"""Every registered ``"gpu"`` kernel compiled for real GPUs, without one.

Run by ``tests/test_cuda.py`` in its own process with the simulator off.  For each
``cuda.jit`` kernel that a registered ``"gpu"`` function launches (its ``cuda_kernels``
attribute, see :mod:`mpsolve.kernels.cuda`), each signature listed there, and compute
capabilities 8.0 (A100) and 9.0 (H100):

1. ``numba.cuda.compile_ptx`` (numba-cuda's NVVM) gives PTX, with the kernel's own
   ``fastmath``/``lineinfo``/``launch_bounds`` options; files the kernel links (``link=``: ``.cu`` through
   NVRTC, ``.ptx``) are compiled and added;
2. nvJitLink (``cuda.bindings.nvjitlink``, ``-arch=sm_80``/``sm_90 -verbose``) links it to
   SASS; its ``ptxas info`` gives registers, stack and spills: **no spill stores or
   loads** is asserted;
3. the PTX of warp kernels (``func.cuda_warp``) contains ``shfl.sync``, and their SASS
   (``nvdisasm`` from the ``nvidia-cuda-nvdisasm`` wheel; first signature per cc) ``SHFL``;
4. the PTX of error-free-transformation kernels (``func.cuda_eft``) has only explicitly
   rounded floating-point arithmetic: every ``add``/``sub``/``mul``/``fma``/``mad``/``div``/
   ``sqrt``/``rcp`` on ``.f32``/``.f64`` carries ``.rn`` and neither ``.ftz``, ``.approx`` nor
   ``.sat``.  Why this is the right check: PTX ISA, "add/mul (floating point)": *an
   instruction with an explicit rounding modifier is treated conservatively by the code
   optimizer; mul/add sequences with no rounding modifiers may be optimized to use
   fused-multiply-add*.  So ``.rn`` everywhere means ptxas cannot contract an EFT step into
   an FMA, on any architecture; a plain ``add.f64`` (what ``a + b`` in a kernel becomes)
   would fail the check.

A table of registers per kernel and signature is written to ``$MPSOLVE_CUDA_REPORT``
(JSON) for the runner to print.  Devices: without a CUDA driver, numba-cuda asks the
(absent) current device for the compute capability when it compiles a ``device=True``
function called from a kernel; :func:`offline` answers with the target's.

A missing toolchain (numba-cuda's NVVM, nvJitLink, nvdisasm) skips this file with the
reason -- except under ``CI=true``, where it fails.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import subprocess
import tempfile
import types

import numba
import pytest

assert not numba.config.ENABLE_CUDASIM, "the compile checks need the simulator off"

CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
CCS = ((8, 0), (9, 0))
REPORT = os.environ.get("MPSOLVE_CUDA_REPORT")


# ----------------------------------------------------------------------------- toolchain

def _nvdisasm():
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations) if spec else []
    for root in roots:
        for pat in ("*/bin/nvdisasm", "*/*/bin/nvdisasm", "bin/nvdisasm"):
            hits = sorted(glob.glob(os.path.join(root, pat)))
            if hits:
                return hits[0]
    from shutil import which

    return which("nvdisasm")


def _missing():
    missing = []
    try:
        from cuda.bindings import nvjitlink  # noqa: F401
    except Exception as e:                       # noqa: BLE001
        missing.append(f"nvJitLink (cuda.bindings.nvjitlink: {e}; pip install numba-cuda[cu13])")
    try:
        from numba.cuda.cudadrv import nvvm

        nvvm.NVVM()
    except Exception as e:                       # noqa: BLE001
        missing.append(f"NVVM ({e}; pip install numba-cuda[cu13])")
    if _nvdisasm() is None:
        missing.append("nvdisasm (pip install nvidia-cuda-nvdisasm)")
    return missing


MISSING = _missing()
if MISSING and not CI:
    pytest.skip("CUDA toolchain wheels missing: " + "; ".join(MISSING), allow_module_level=True)


def test_toolchain_present():
    assert not MISSING, "CUDA toolchain wheels missing (CI=true: not skipped): " + "; ".join(MISSING)


# ----------------------------------------------------------------------------- compile

@contextlib.contextmanager
def offline(cc):
    """Let numba-cuda compile device functions with no device: the compute capability it
    would read from the current device is ``cc``."""
    from numba import cuda
    import numba.cuda.dispatcher as disp

    if cuda.is_available():
        yield
        return
    orig = disp.get_current_device
    disp.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        disp.get_current_device = orig


def _linked(dispatcher, cc):
    """(kind, bytes, name) of the files the kernel links (``cuda.jit(link=[...])``)."""
    from numba.cuda.cudadrv import nvrtc

    out = []
    for item in dispatcher.targetoptions.get("link", ()) or ():
        path = os.fspath(item) if not hasattr(item, "kind") else None
        if path is None:                         # a numba LinkableCode object
            data, kind, name = item.data, item.kind, getattr(item, "name", "linked")
            out.append((kind, bytes(data), name))
        elif path.endswith(".cu"):
            with open(path) as f:
                ptx, _ = nvrtc.compile(f.read(), os.path.basename(path), cc)
            out.append(("ptx", ptx if isinstance(ptx, bytes) else ptx.encode(), path))
        elif path.endswith(".ptx"):
            with open(path, "rb") as f:
                out.append(("ptx", f.read(), path))
        else:
            pytest.fail(f"{dispatcher.py_func.__qualname__}: cannot link {path!r} offline")
    return out


def link(ptx: str, cc, extra=()):
    """PTX -> cubin for sm_XY with nvJitLink; returns ``(cubin, info log)``."""
    from cuda.bindings import nvjitlink

    h = nvjitlink.create(2, [f"-arch=sm_{cc[0]}{cc[1]}", "-verbose"])
    try:
        items = [("ptx", ptx.encode(), "kernel.ptx")] + list(extra)
        kinds = {"ptx": nvjitlink.InputType.PTX, "ltoir": nvjitlink.InputType.LTOIR,
                 "cubin": nvjitlink.InputType.CUBIN, "fatbin": nvjitlink.InputType.FATBIN,
                 "o": nvjitlink.InputType.OBJECT, "object": nvjitlink.InputType.OBJECT}
        for kind, data, name in items:
            it = kinds[str(kind).lower().lstrip(".")]
            nvjitlink.add_data(h, it, data, len(data), name)
        try:
            nvjitlink.complete(h)
        except Exception:
            size = nvjitlink.get_error_log_size(h)
            buf = bytearray(size)
            nvjitlink.get_error_log(h, buf)
            raise AssertionError("nvJitLink failed:\n" + buf.decode(errors="replace"))
        size = nvjitlink.get_info_log_size(h)
        info = bytearray(size)
        nvjitlink.get_info_log(h, info)
        size = nvjitlink.get_linked_cubin_size(h)
        cubin = bytearray(size)
        nvjitlink.get_linked_cubin(h, cubin)
        return bytes(cubin), info.decode(errors="replace")
    finally:
        nvjitlink.destroy(h)


def resources(info: str):
    """Registers, stack, spill stores/loads from ptxas's verbose output."""
    def grab(pat):
        m = re.search(pat, info)
        return int(m.group(1)) if m else None

    return {"registers": grab(r"Used (\d+) registers"),
            "stack": grab(r"(\d+) bytes stack frame"),
            "spill_stores": grab(r"(\d+) bytes spill stores"),
            "spill_loads": grab(r"(\d+) bytes spill loads")}


def sass(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        name = f.name
    try:
        r = subprocess.run([_nvdisasm(), "-c", name], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout
    finally:
        os.unlink(name)


_FP = re.compile(r"^\s*(?:@!?%p\d+\s+)?(add|sub|mul|fma|mad|div|sqrt|rcp|rsqrt)"
                 r"((?:\.[a-z0-9]+)*)\s", re.M)


def unrounded_fp(ptx: str):
    """The floating-point arithmetic instructions of ``ptx`` without ``.rn`` (or with
    ``.ftz``/``.approx``/``.sat``)."""
    bad = []
    for m in _FP.finditer(ptx):
        mods = m.group(2).split(".")[1:]
        if not any(t in ("f32", "f64", "f16", "bf16", "f16x2") for t in mods):
            continue                                   # integer arithmetic
        if "rn" not in mods or any(t in ("ftz", "approx", "sat", "full") for t in mods):
            bad.append(m.group(0).strip())
    return bad


# ----------------------------------------------------------------------------- the registry

def _collect():
    import mpsolve.kernels.cuda  # noqa: F401  (registers the gpu kernels)
    from mpsolve.kernels import available, lookup

    kernels, warp, eft, undeclared = {}, set(), set(), []
    for key in available("gpu"):
        f = lookup(*key)
        pairs = getattr(f, "cuda_kernels", None)
        if pairs is None:
            undeclared.append(f"{key}: {getattr(f, '__qualname__', f)}")
            continue
        for d, sigs in pairs:
            entry = kernels.setdefault(id(d), (d, []))
            for s in sigs:
                if s not in entry[1]:
                    entry[1].append(s)
        warp |= {id(d) for d in getattr(f, "cuda_warp", ())}
        eft |= {id(d) for d in getattr(f, "cuda_eft", ())}
    return kernels, warp, eft, undeclared


KERNELS, WARP, EFT, UNDECLARED = _collect()


def _name(d):
    return f"{d.py_func.__module__.rsplit('.', 1)[-1]}.{d.py_func.__qualname__}"


def test_every_registered_gpu_function_declares_its_kernels():
    assert KERNELS, "no gpu kernels registered"
    assert not UNDECLARED, ("registered gpu functions without func.cuda_kernels (see "
                            "kernels/cuda/__init__.py):\n" + "\n".join(UNDECLARED))


_ROWS = []


@pytest.mark.parametrize("kid", sorted(KERNELS, key=lambda k: _name(KERNELS[k][0])),
                         ids=lambda k: _name(KERNELS[k][0]))
def test_kernel_compiles_links_and_inspects(kid):
    from numba import cuda

    d, sigs = KERNELS[kid]
    opts = d.targetoptions
    for cc in CCS:
        extra = _linked(d, cc)
        for i, sig in enumerate(sigs):
            label = f"{_name(d)}{tuple(str(t) for t in sig)} sm_{cc[0]}{cc[1]}"
            with offline(cc):
                ptx, _ = cuda.compile_ptx(d.py_func, sig, cc=cc,
                                          fastmath=bool(opts.get("fastmath")),
                                          lineinfo=bool(opts.get("lineinfo")),
                                          launch_bounds=opts.get("launch_bounds"))
            cubin, info = link(ptx, cc, extra)
            res = resources(info)
            assert res["registers"] is not None, f"{label}: no ptxas report\n{info}"
            assert res["spill_stores"] == 0 and res["spill_loads"] == 0, f"{label}: spills\n{info}"
            if kid in WARP:
                assert "shfl.sync" in ptx, f"{label}: a warp kernel without shfl.sync"
                if i == 0:                      # nvdisasm costs ~0.5 s: one signature
                    assert "SHFL" in sass(cubin), f"{label}: no SHFL in the SASS"
            if kid in EFT:
                bad = unrounded_fp(ptx)
                assert not bad, f"{label}: floating-point ops without .rn: {bad[:8]}"
            _ROWS.append({"kernel": _name(d), "sig": ", ".join(str(t) for t in sig),
                          "cc": f"{cc[0]}.{cc[1]}", **res, "warp": kid in WARP,
                          "rn_only": kid in EFT})


def test_unrounded_fp_detector():
    """The EFT check itself: it flags what a plain ``a + b`` and fast-math give."""
    assert unrounded_fp("\tadd.f64 \t%fd3, %fd1, %fd2;\n") == ["add.f64"]
    assert unrounded_fp("\tdiv.approx.ftz.f32 \t%f3, %f1, %f2;\n") == ["div.approx.ftz.f32"]
    assert unrounded_fp("\tfma.rn.f64 \t%fd4, %fd1, %fd2, %fd3;\n"
                        "\tadd.rn.f32 \t%f3, %f1, %f2;\n\tadd.s64 \t%rd3, %rd1, %rd2;\n"
                        "\tmul.lo.s64 \t%rd3, %rd1, %rd2;\n\tmul.wide.s32 \t%rd3, %r1, 8;\n") == []


def teardown_module(module):
    if REPORT and _ROWS:
        with open(REPORT, "w") as f:
            json.dump(_ROWS, f)
