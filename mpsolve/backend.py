"""The array-module boundary: which device a solve runs on, and its array namespace.

This is the one module above ``kernels/`` that knows device names and array
libraries (house rule 11).  Everything else asks it:

* :func:`device_of` -- the device the user's arrays live on (CuPy arrays and
  ``cupyx.scipy.sparse`` matrices -> ``"gpu"``, everything else -> ``"cpu"``),
  without importing CuPy;
* :func:`resolve_device` -- the device of a solve: an explicit ``device=`` (validated)
  or the arrays' own; arrays on two different devices are an error;
* :func:`array_module` -- the namespace workspace is allocated with (``numpy`` or
  ``cupy``, imported lazily);
* :func:`to_device` / :func:`to_host` -- moving arrays across the boundary (new arrays);
  :func:`upload` / :func:`download` -- the same into arrays that exist (no allocation).

Devices
-------
``"cpu"``
    NumPy arrays, Numba kernels (the default).
``"reference"``
    NumPy arrays, plain NumPy / exact-arithmetic kernels (:mod:`mpsolve.kernels.reference`):
    the oracle the other devices are tested against.  Slow; for tests.
``"gpu"``
    CuPy arrays, numba-cuda kernels (the CUDA backend).  Under numba's CUDA simulator
    (``NUMBA_ENABLE_CUDASIM=1``, :func:`cuda_simulator`) its array module is NumPy:
    the simulator launches the same kernels on NumPy arrays, so the whole GPU code
    path (operators, kernels, the driver) runs without a GPU.  It stays a device
    without host arrays all the same (:func:`is_host` is False): its set-up kernels
    come from :data:`HOST_DEVICE`, as on hardware.

:func:`gpu_report` says what CUDA stack is installed and usable (``mpsolve info
--device``).
"""
from __future__ import annotations

import os
import sys

import numpy as np

__all__ = ["DeviceUnavailableError", "DEVICES", "DEFAULT_DEVICE", "HOST_DEVICE", "GPU_DEVICE", "GPU_EXTRA_HINT", "on_host",
           "device_of", "resolve_device", "array_module", "to_device", "to_host", "upload",
           "download", "is_host",
           "cuda_simulator", "gpu_report", "format_gpu_report"]

#: The device names a solve accepts, and the array library of each.
DEVICES = {"cpu": "numpy", "reference": "numpy", "gpu": "cupy"}
#: The device of host (NumPy/SciPy) data when nothing else is asked for.
DEFAULT_DEVICE = "cpu"
#: Where host-side set-up work (factorisations, patterns) runs for a device whose
#: arrays are not host arrays.
HOST_DEVICE = "cpu"
#: The CUDA device (CuPy arrays, numba-cuda kernels).
GPU_DEVICE = "gpu"
#: How to install the GPU stack (one CUDA major version for CuPy and numba-cuda).
GPU_EXTRA_HINT = ("pip install 'mpsolve[gpu]' (from a source checkout: pip install -e '.[gpu]'; "
                  "that is: pip install cupy-cuda13x 'numba-cuda[cu13]')")


def cuda_simulator() -> bool:
    """True when numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM``): numba-cuda's
    own configuration when it is loaded, numba's when only numba is, else the
    environment variable (what numba will read when it is first imported).  Cheap:
    imports nothing."""
    for name in ("numba.cuda.core.config", "numba.core.config"):
        cfg = sys.modules.get(name)
        if cfg is not None and hasattr(cfg, "ENABLE_CUDASIM"):
            return bool(cfg.ENABLE_CUDASIM)
    try:
        return int(os.environ.get("NUMBA_ENABLE_CUDASIM", "0") or 0) != 0
    except ValueError:
        return False


_CUPY_TYPE = {}     # type -> whether it is CuPy's (a solve asks a dozen times)


def _is_cupy(a) -> bool:
    t = type(a)
    got = _CUPY_TYPE.get(t)
    if got is None:
        got = _CUPY_TYPE[t] = t.__module__.split(".")[0] in ("cupy", "cupyx")
    return got


def device_of(*arrays) -> str:
    """The device of the given arrays: ``"gpu"`` if any is a CuPy array (or a
    ``cupyx.scipy.sparse`` matrix), else ``"cpu"``.  ``None`` entries are skipped."""
    for a in arrays:
        if _is_cupy(a):
            return "gpu"
    return DEFAULT_DEVICE


def on_host(*arrays) -> bool:
    """True when none of the arrays lives on an accelerator (NumPy, SciPy, lists...)."""
    return not any(_is_cupy(a) for a in arrays)


def resolve_device(device, *arrays) -> str:
    """The device a solve runs on.

    ``device=None``: the arrays' device (:func:`device_of`).  An explicit device is
    validated against :data:`DEVICES`.  Host arrays (NumPy/SciPy) are accepted by
    every device -- they are copied over once; device arrays (CuPy) with a host
    device, or arrays from two devices, are refused.

    Examples
    --------
    >>> import numpy as np
    >>> resolve_device(None, np.ones(3)), resolve_device("reference", np.ones(3))
    ('cpu', 'reference')
    >>> resolve_device("tpu", np.ones(3))
    Traceback (most recent call last):
    ...
    ValueError: device='tpu': choose one of ['cpu', 'gpu', 'reference'] (or None: the device of the arrays)
    """
    if device is None:
        return device_of(*arrays)
    on_gpu = [a for a in arrays if _is_cupy(a)]
    if not isinstance(device, str) or device not in DEVICES:
        raise ValueError(f"device={device!r}: choose one of {sorted(DEVICES)} "
                         "(or None: the device of the arrays)")
    if on_gpu and DEVICES[device] != "cupy":
        raise ValueError(
            f"device={device!r}, but A, b or x0 is a CuPy (GPU) array: pass device='gpu' "
            f"(or None), or move the arrays to the host with .get() first")
    return device


def array_module(device: str):
    """``numpy`` or ``cupy``: the namespace a device's arrays are made with (``numpy``
    for ``"gpu"`` under the CUDA simulator, :func:`cuda_simulator`)."""
    lib = DEVICES.get(device)
    if lib == "numpy":
        return np
    if lib == "cupy":
        if cuda_simulator():  # the simulator runs the CUDA kernels on NumPy arrays
            return np
        return _cupy(device)
    raise ValueError(f"device={device!r}: choose one of {sorted(DEVICES)}")


_CUPY = []  # the CuPy module once a GPU was found usable


class DeviceUnavailableError(RuntimeError):
    """The device asked for cannot run here (no CuPy, no driver, no GPU); the message says
    what is missing."""


def _cupy(device):
    """CuPy, once it imports and sees a GPU; else a RuntimeError that says what is
    missing (:class:`DeviceUnavailableError`; CuPy imports without a GPU, and then fails
    on the first allocation)."""
    if _CUPY:
        return _CUPY[0]
    try:
        import cupy
    except ImportError as err:
        raise DeviceUnavailableError(f"device={device!r} needs CuPy: {GPU_EXTRA_HINT}") from err
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # noqa: BLE001 - CUDARuntimeError: no driver, no device
        raise DeviceUnavailableError(
            f"device={device!r} needs a CUDA GPU, and none is usable here ({type(err).__name__}: "
            f"{str(err).strip()}); `mpsolve info --device` says what is missing") from err
    if count < 1:
        raise DeviceUnavailableError(f"device={device!r} needs a CUDA GPU: the driver sees none; "
                           "`mpsolve info --device` says more")
    _CUPY.append(cupy)
    return cupy


def is_host(device: str) -> bool:
    """True for a host device: its arrays are NumPy arrays in host memory and it runs
    the host set-up kernels itself.  ``"gpu"`` is not one, even under the CUDA simulator
    (where its arrays happen to be NumPy arrays): its set-up runs on
    :data:`HOST_DEVICE` there too, as on hardware."""
    return DEVICES.get(device) == "numpy"


def to_device(a, device: str):
    """``a`` as an array of ``device`` (no copy when it already is one)."""
    if a is None:
        return None
    xp = np if is_host(device) else array_module(device)
    if xp is np:
        return to_host(a)
    return xp.asarray(a)


def to_host(a):
    """``a`` as a NumPy array (``.get()`` for a CuPy array; no copy for NumPy)."""
    if type(a) is np.ndarray:
        return a
    if _is_cupy(a):
        return a.get()
    return np.asarray(a)


def upload(src, dst) -> None:
    """``dst[...] = src``: a host array into a device array of the same shape and dtype,
    without a temporary (``cupy.ndarray.set``; a plain copy for NumPy arrays)."""
    if _is_cupy(dst):
        dst.set(np.ascontiguousarray(src))
    else:
        np.copyto(dst, src)


def download(src, dst) -> None:
    """``dst[...] = src``: a device array into a contiguous host array of the same shape
    and dtype, without a temporary (``cupy.ndarray.get(out=)``)."""
    if _is_cupy(src):
        src.get(out=dst)
    else:
        np.copyto(dst, src)


# ------------------------------------------------------------------ diagnostics
#: Packages of the GPU stack: (distribution, what it provides, pip requirement).
_GPU_PACKAGES = (
    ("cupy-cuda13x", "CuPy: the array module, cuBLAS and cuSPARSE", "cupy-cuda13x"),
    ("numba-cuda", "numba-cuda: the CUDA kernels", "numba-cuda[cu13]"),
    ("cuda-bindings", "CUDA Python bindings (numba-cuda's driver API)", "numba-cuda[cu13]"),
    ("nvidia-cuda-nvrtc", "NVRTC (runtime compilation)", "numba-cuda[cu13]"),
    ("nvidia-nvjitlink", "nvJitLink (PTX -> SASS linking)", "numba-cuda[cu13]"),
    ("nvidia-nvvm", "NVVM (numba-cuda's compiler back end)", "numba-cuda[cu13]"),
)
#: The CUDA major version of the ``gpu`` extra, and the oldest driver branch it runs on.
_CUDA_MAJOR = 13
_MIN_DRIVER = "580"


def _dist_version(name):
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _cuda_version(v):
    """CUDA's integer version (13020) as text ('13.2')."""
    return f"{v // 1000}.{(v % 1000) // 10}" if v else None


def _guard(fn, problems, what):
    """``fn()``, or None with ``what: error`` appended to ``problems`` on any error
    (missing libraries raise ImportError/OSError, CUDA errors their own types)."""
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - a diagnostic reports every failure
        text = str(err).strip().splitlines()
        problems.append(f"{what}: {type(err).__name__}" + (f": {text[0]}" if text else ""))
        return None


#: The wheels of numba-cuda's compiler tool chain (a CUDA toolkit can stand in for them).
_TOOLCHAIN = ("nvidia-cuda-nvrtc", "nvidia-nvjitlink", "nvidia-nvvm")


def _smoke_kernel(cupy, report, missing) -> None:
    """Compile a one-line numba-cuda kernel and run it on a CuPy array: the check that
    the whole stack (numba-cuda, NVVM, the driver, NumPy) works together.  Sets
    ``report["kernel"]``; a failure is appended to ``missing`` with what fixes it."""
    def run():
        from numba import cuda

        @cuda.jit
        def _twice_plus_one(a):
            i = cuda.grid(1)
            if i < a.size:
                a[i] = 2.0 * a[i] + 1.0

        a = cupy.arange(4, dtype=np.float64)
        _twice_plus_one[1, 32](a)
        return cupy.asnumpy(a).tolist() == [1.0, 3.0, 5.0, 7.0]

    try:
        ok = run()
    except Exception as err:  # noqa: BLE001 - a diagnostic reports every failure
        text = (str(err).strip().splitlines() or [""])[0]
        why = f"numba-cuda cannot compile a kernel here: {type(err).__name__}: {text}"
        if "row_stack" in text:
            why += (f" (numba-cuda {_dist_version('numba-cuda')} calls numpy.row_stack, which "
                    f"NumPy 2.5 removed; NumPy here is {np.__version__}: "
                    "pip install 'numpy<2.5')")
            report["fix_requirements"] = ["numpy<2.5"]
        missing.append(why)
        report["kernel"] = "failed"
        return
    report["kernel"] = "compiled and ran" if ok else "ran with a wrong result"
    if not ok:
        missing.append("a numba-cuda test kernel ran but gave a wrong result")


def gpu_report() -> dict:
    """What this process finds of the GPU stack, and what is missing.

    Returns a dict: ``usable`` (a CUDA GPU, a driver and the packages device
    ``"gpu"`` needs are all there), ``simulator`` (:func:`cuda_simulator`),
    ``packages`` (distribution -> version or None), ``versions`` (CUDA driver and
    runtime, NVRTC, nvJitLink as found by loading them), ``gpus`` (one dict per device:
    ``name``, ``compute_capability``, ``memory_gib``, ``sms``, ``fp64_tensor_cores``),
    ``missing`` (what is wrong, one line each) and ``fix`` (the commands that fix what
    pip can fix).  Imports CuPy and numba-cuda only inside this call, guarded: a
    missing CUDA library is reported, never raised.
    """
    missing, fix, notes = [], [], []
    packages = {name: _dist_version(name) for name, _, _ in _GPU_PACKAGES}
    others = []
    try:
        from importlib import metadata

        others = sorted({d.metadata["Name"] for d in metadata.distributions()
                         if (d.metadata["Name"] or "").lower().startswith("cupy-cuda")}
                        - {"cupy-cuda13x"})
    except Exception:  # noqa: BLE001
        pass
    for other in others:
        packages[other] = _dist_version(other)
        notes.append(f"{other} is installed too: CuPy for another CUDA major version may "
                     f"shadow cupy-cuda13x (pip uninstall {other})")
    absent = []                # wheels of the compiler tool chain, judged by the smoke test
    for name, what, req in _GPU_PACKAGES:
        if packages[name] is None:
            if name in _TOOLCHAIN:
                absent.append((name, what, req))
                continue
            missing.append(f"{name} is not installed ({what})")
            if req not in fix:
                fix.append(req)
    report = {"usable": False, "simulator": cuda_simulator(), "packages": packages,
              "versions": {}, "gpus": [], "missing": missing, "fix": [], "notes": notes}
    versions = report["versions"]

    def _nvrtc():
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
        return f"{major}.{minor}"

    def _nvjitlink():
        from cuda.bindings import nvjitlink

        major, minor = nvjitlink.version()
        return f"{major}.{minor}"

    if packages["cuda-bindings"] is not None:
        versions["nvrtc"] = _guard(_nvrtc, missing, "NVRTC cannot be loaded")
        versions["nvjitlink"] = _guard(_nvjitlink, missing, "nvJitLink cannot be loaded")
    cupy = None
    if packages["cupy-cuda13x"] is not None or others:
        cupy = _guard(lambda: __import__("cupy"), missing, "CuPy cannot be imported")
    if cupy is not None:
        rt = cupy.cuda.runtime
        versions["cupy"] = getattr(cupy, "__version__", None)
        versions["runtime"] = _cuda_version(_guard(rt.runtimeGetVersion, missing,
                                                   "CUDA runtime"))
        drv = _guard(rt.driverGetVersion, missing, "CUDA driver")
        versions["driver"] = _cuda_version(drv)
        if not drv:
            missing.append("no NVIDIA driver: libcuda (the driver library) is not found, so no "
                           "GPU can be used here (a driver >= " + _MIN_DRIVER + " and an NVIDIA "
                           "GPU are needed; pip cannot install them)")
        elif drv // 1000 < _CUDA_MAJOR:
            missing.append(f"the NVIDIA driver supports CUDA {_cuda_version(drv)}, older than "
                           f"CUDA {_CUDA_MAJOR} of cupy-cuda13x/numba-cuda[cu13]: update the "
                           f"driver to >= {_MIN_DRIVER}, or install the CUDA 12 stack "
                           "(pip install cupy-cuda12x 'numba-cuda[cu12]')")
        else:
            count = _guard(rt.getDeviceCount, missing, "no CUDA device") or 0
            if count == 0 and not any(m.startswith("no CUDA device") for m in missing):
                missing.append("the driver sees no CUDA device (check CUDA_VISIBLE_DEVICES="
                               f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})")
            for i in range(count):
                p = _guard(lambda i=i: rt.getDeviceProperties(i), missing, f"device {i}")
                if p is None:
                    continue
                name = p.get("name", b"?")
                name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
                cc = (int(p.get("major", 0)), int(p.get("minor", 0)))
                report["gpus"].append({
                    "index": i, "name": name, "compute_capability": f"{cc[0]}.{cc[1]}",
                    "memory_gib": round(int(p.get("totalGlobalMem", 0)) / 2**30, 1),
                    "sms": int(p.get("multiProcessorCount", 0)),
                    "fp64_tensor_cores": cc >= (8, 0)})
                if cc < (7, 5):
                    missing.append(f"device {i} ({name}) has compute capability "
                                   f"{cc[0]}.{cc[1]}: CUDA {_CUDA_MAJOR} needs >= 7.5")
    if packages["numba-cuda"] is not None and report["gpus"] and not report["simulator"]:
        def _numba_sees_gpu():
            from numba import cuda

            return bool(cuda.is_available())

        if _guard(_numba_sees_gpu, missing, "numba-cuda cannot reach the GPU") is False:
            missing.append("numba-cuda does not find the GPU that CuPy sees "
                           "(numba.cuda.is_available() is False)")
        elif not missing:
            _smoke_kernel(cupy, report, missing)
    # NVRTC, nvJitLink and NVVM come as wheels with numba-cuda[cu13] or from a CUDA
    # toolkit that numba-cuda finds by itself: a missing wheel matters only where no
    # kernel could be compiled and run
    for name, what, req in absent:
        if report.get("kernel") == "compiled and ran":
            notes.append(f"{name} is not installed as a wheel ({what}): numba-cuda found "
                         "it elsewhere (a CUDA toolkit)")
        else:
            missing.append(f"{name} is not installed ({what})")
            if req not in fix:
                fix.append(req)
    fix += report.pop("fix_requirements", [])
    report["fix"] = ([f"pip install {' '.join(repr(r) if set(r) & set('[<>=') else r for r in fix)}"]
                     if fix else [])
    report["usable"] = bool(report["gpus"]) and not missing
    return report


def format_gpu_report(report: dict) -> str:
    """:func:`gpu_report` as the text of ``mpsolve info --device``."""
    w = 20
    lines = []
    if report["usable"]:
        lines.append(f"{'GPU':<{w}}{len(report['gpus'])} CUDA device(s): "
                     f"device={GPU_DEVICE!r} is usable")
    else:
        lines.append(f"{'GPU':<{w}}none usable: device={GPU_DEVICE!r} cannot run on this machine")
    for g in report["gpus"]:
        lines.append(f"{'  [%d]' % g['index']:<{w}}{g['name']}, compute capability "
                     f"{g['compute_capability']}, {g['memory_gib']} GiB, {g['sms']} SMs, "
                     f"FP64 Tensor Cores: {'yes' if g['fp64_tensor_cores'] else 'no'}")
    v = report["versions"]
    for key, label in (("driver", "CUDA driver"), ("runtime", "CUDA runtime"),
                       ("nvrtc", "NVRTC"), ("nvjitlink", "nvJitLink")):
        if key in v:
            lines.append(f"{label:<{w}}{v[key] or 'not found'}")
    for name, ver in report["packages"].items():
        lines.append(f"{name:<{w}}{ver or 'NOT INSTALLED'}")
    if "kernel" in report:
        lines.append(f"{'test kernel':<{w}}{report['kernel']}")
    lines.append(f"{'CUDA simulator':<{w}}" + (
        "on (NUMBA_ENABLE_CUDASIM): device 'gpu' runs numba's CUDA simulator on NumPy "
        "arrays (slow; for tests)" if report["simulator"] else "off"))
    if report["missing"]:
        lines.append("missing:")
        lines += [f"  - {m}" for m in report["missing"]]
    for n in report["notes"]:
        lines.append(f"note: {n}")
    if report["fix"]:
        lines.append("fix:")
        lines += [f"  {c}" for c in report["fix"]]
    elif not report["usable"] and not report["gpus"]:
        lines.append("the GPU packages are complete: what is missing is a GPU and its driver, "
                     "which pip cannot install (the simulator and the PTX/SASS compile checks "
                     "run without them)")
    return "\n".join(lines)
