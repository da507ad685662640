"""The device axis: the solvers run unchanged on the ``reference`` device (plain NumPy
kernels), device selection is validated, and the core stays device-neutral.

The ``reference`` device keeps the axis honest (Ginkgo's reference executor): every
op of the primitives contract exists on it, and the case table below -- methods x
problems x precision policies, with and without preconditioners -- gives the same
``info``, the same iteration counts up to rounding noise and certified FP64 true
residuals on ``cpu`` and ``reference``.
"""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import mpsolve
from mpsolve import backend
from mpsolve.kernels import available
from mpsolve.kernels.primitives import CONTRACT
from mpsolve.matrices import convection_diffusion2d, poisson2d

from conftest import problems

ROOT = Path(__file__).resolve().parents[1]
HOST_DEVICES = ("cpu", "reference")


# ----------------------------------------------------------------- the contract
@pytest.mark.parametrize("device", HOST_DEVICES)
def test_every_contract_op_is_registered(device):
    """A host device provides every op of the contract (a device without host arrays
    may leave the ``host`` set-up ops to ``backend.HOST_DEVICE``), and the complex keys of
    the ops marked ``complex`` (a host device solves complex systems)."""
    have = set(available(device))
    missing = [(op.name, key, mode) for op in CONTRACT for key in op.all_keys
               for mode in op.modes if (device, op.name, key, mode) not in have]
    assert not missing, f"{device} lacks {missing[:10]}"


def test_no_cpu_kernel_outside_the_contract():
    """The contract lists every op the CPU registers: it is the whole device interface."""
    listed = {op.name for op in CONTRACT}
    extra = {k[1] for k in available("cpu")} - listed
    assert not extra, f"registered on cpu but not in kernels/primitives.py: {sorted(extra)}"


# ----------------------------------------------------------------- case table
def _cases():
    for name, A, spd in problems():
        for method in ("cg", "gmres", "bicgstab"):
            if method == "cg" and not spd:
                continue
            for prec in ("double", "mixed-eft", "single"):
                if prec == "single" and A.dtype == np.float64 and name != "poisson2d":
                    continue
                yield pytest.param(method, A, prec, id=f"{method}-{name}-{prec}")


def _close_counts(a, b):
    """Iteration counts equal up to rounding noise (the kernels sum in other orders)."""
    return abs(a - b) <= max(2, 0.05 * max(a, b))


def _within_noise(count, solve, b, eps=None):
    """``count`` lies in the spread of the CPU's own iteration counts when ``b`` is
    perturbed by a few units in its last place (rounding noise, measured; ``eps``: the
    unit, default ``b``'s), widened by :func:`_close_counts`'s margin.  Twelve samples: on
    unpreconditioned BiCGSTAB for an indefinite matrix the counts of 24 perturbed
    right-hand sides span 66-97, and four samples missed the reference device's 62."""
    rng = np.random.default_rng(7)
    eps = np.finfo(b.dtype).eps if eps is None else eps
    counts = [solve(b)]
    for _ in range(12):
        e = rng.choice([-1.0, 1.0], size=b.size).astype(b.dtype) * eps
        counts.append(solve(b * (1 + e)))
    lo, hi = min(counts), max(counts)
    return _close_counts(count, lo) or _close_counts(count, hi) or lo <= count <= hi, counts


@pytest.mark.parametrize("method,A,prec", list(_cases()))
def test_reference_device_matches_cpu(method, A, prec):
    rng = np.random.default_rng(3)
    b = rng.standard_normal(A.shape[0]).astype(A.dtype)
    rtol = 1e-8 if (A.dtype == np.float64 and prec != "single") else 1e-4
    out = {}
    for dev in HOST_DEVICES:
        out[dev] = mpsolve.solve(A, b, method=method, precision=prec, rtol=rtol, maxiter=2000,
                                 device=dev, precond=None)
    c, r = out["cpu"], out["reference"]
    assert c.info == r.info
    ok, spread = _within_noise(r.iterations, lambda bb: mpsolve.solve(
        A, bb, method=method, precision=prec, rtol=rtol, maxiter=2000, precond=None).iterations, b)
    assert ok, (r.iterations, spread)
    assert type(r.x) is np.ndarray and r.x.dtype == c.x.dtype
    for res in (c, r):
        if res.info == 0:
            true = np.linalg.norm(b.astype(float) - A.astype(float) @ res.x.astype(float))
            assert true <= rtol * np.linalg.norm(b.astype(float)) * (1 + 1e-6)


PRECONDS = [("jacobi", {}), ("block-jacobi", {"block_size": 2}), ("ilu0", {}),
            ("isai", {"variant": "spd"}), ("isai", {"variant": "general"}),
            ("block-isai", {"block_size": 2, "variant": "spd"}),
            ("block-isai", {"block_size": 2, "variant": "general"})]


@pytest.mark.parametrize("pc,params", PRECONDS, ids=[f"{p}-{k.get('variant', '')}" for p, k in PRECONDS])
@pytest.mark.parametrize("prec", ["double", "mixed"])
def test_preconditioned_reference_matches_cpu(pc, params, prec):
    spd = params.get("variant", "spd") == "spd" and pc != "ilu0" or pc in ("jacobi", "block-jacobi")
    A = poisson2d(16) if spd else convection_diffusion2d(16)
    b = A @ np.ones(A.shape[0])
    method = "cg" if spd else "gmres"
    res = {dev: mpsolve.solve(A, b, method=method, precond=pc, precision=prec, rtol=1e-10,
                              device=dev, **params) for dev in HOST_DEVICES}
    c, r = res["cpu"], res["reference"]
    assert c.info == r.info == 0
    if prec == "double":          # FP64 values and sums: the counts agree to the margin
        assert _close_counts(c.iterations, r.iterations), (c.iterations, r.iterations)
    else:
        # FP32 row sums (ISAI's in mixed) in other orders move GMRES by a few iterations
        # (39 or 42 here): one device's count within the other's measured spread under
        # FP32-sized perturbations of b
        spreads = []
        for count, dev in ((r.iterations, "cpu"), (c.iterations, "reference")):
            ok, spread = _within_noise(count, lambda bb: mpsolve.solve(
                A, bb, method=method, precond=pc, precision=prec, rtol=1e-10, device=dev,
                **params).iterations, b, np.finfo(np.float32).eps)
            spreads.append(spread)
            if ok:
                break
        assert ok, (c.iterations, r.iterations, spreads)
    assert r.true_residual <= 1e-10


# ----------------------------------------------------------------- selecting a device
class _FakeDeviceArray:
    """Stands for a CuPy array (its type's module is ``cupy``)."""

    __module__ = "cupy._core.core"

    def __init__(self, a):
        self.a = np.asarray(a)
        self.shape = self.a.shape
        self.dtype = self.a.dtype


def test_device_comes_from_the_data():
    A = poisson2d(4)
    assert backend.device_of(A, np.ones(16), None) == "cpu"
    assert backend.device_of(np.ones(3), _FakeDeviceArray([1.0])) == "gpu"
    assert backend.resolve_device(None, A) == "cpu"
    assert backend.resolve_device("reference", A) == "reference"


@pytest.mark.parametrize("device", ["tpu", "CPU", 3])
def test_unknown_device_is_refused(device):
    A = poisson2d(4)
    with pytest.raises(ValueError, match="device="):
        mpsolve.cg(A, np.ones(16), device=device)


def test_device_arrays_with_a_host_device_are_refused():
    with pytest.raises(ValueError, match="CuPy"):
        backend.resolve_device("cpu", np.ones(3), _FakeDeviceArray([1.0]))


def test_gpu_without_a_usable_gpu_says_what_is_missing():
    """No GPU here (and CuPy may or may not be installed): a solve on "gpu" stops at
    once with a RuntimeError that says what is missing and how to find out more."""
    from numba import config

    if config.ENABLE_CUDASIM:
        pytest.skip("the CUDA simulator stands in for a GPU in this process")
    try:
        backend.array_module("gpu").zeros(1)
        pytest.skip("a usable GPU is present")
    except Exception:  # noqa: BLE001 - any failure to allocate: no usable GPU
        pass
    with pytest.raises(RuntimeError, match=r"mpsolve\[gpu\]|mpsolve info --device"):
        mpsolve.cg(poisson2d(4), np.ones(16), device="gpu")


def test_preconditioner_set_up_elsewhere_is_refused():
    from mpsolve.precond import Jacobi

    A = poisson2d(6)
    M = Jacobi().setup(A, device="reference")
    with pytest.raises(ValueError, match="set up for device"):
        mpsolve.cg(A, np.ones(36), M=M, device="cpu")


# ----------------------------------------------------------------- workspace, callback, restarts
def _capture_workspaces(monkeypatch):
    from mpsolve import _system

    made = []
    orig = _system.Workspace.__init__

    def init(self, xp):
        orig(self, xp)
        made.append(self)

    monkeypatch.setattr(_system.Workspace, "__init__", init)
    return made


@pytest.mark.parametrize("method", ["cg", "gmres", "bicgstab"])
def test_workspace_is_allocated_once_per_solve(monkeypatch, method):
    """Escalation (single -> double) and residual replacement restart the body several
    times; the vectors are allocated once per name and dtype all the same."""
    made = _capture_workspaces(monkeypatch)
    A = poisson2d(20) if method == "cg" else convection_diffusion2d(20)
    b = A @ np.ones(A.shape[0])
    # FP32 cannot reach 1e-11: residual replacements, then an escalation to FP64
    res = mpsolve.solve(A, b, method=method, precision="single", rtol=1e-11, precond="jacobi")
    assert res.info == 0 and res.escalations
    (ws,) = made
    names = {k[:1] + k[2:] for k in ws._arrays}            # (name, dtype)
    assert ws.allocations == len(ws._arrays) == len(names)
    # the same solve in one stage allocates the same vectors (minus the FP32 copies)
    made.clear()
    mpsolve.solve(A, b, method=method, precision="double", rtol=1e-11, precond="jacobi")
    (ws1,) = made
    f64 = {k for k in ws._arrays if k[2] == "d"}
    assert set(ws1._arrays) <= f64 | {k for k in ws1._arrays}
    assert ws1.allocations <= ws.allocations


def test_workspace_holds_no_vector_twice(monkeypatch):
    """A 30-cycle GMRES solve (30 body calls' worth of restarts) allocates the basis once."""
    made = _capture_workspaces(monkeypatch)
    A = convection_diffusion2d(24)
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, method="gmres", restart=5, rtol=1e-10, maxiter=500, precond=None)
    assert res.restarts >= 10
    (ws,) = made
    assert sum(1 for k in ws._arrays if k[0] == "V") == 1


@pytest.mark.parametrize("method", ["cg", "gmres", "bicgstab"])
def test_callback_returning_true_stops_the_solve(method):
    A = poisson2d(20)
    b = A @ np.ones(A.shape[0])
    seen = []

    def stop_after_3(xk):
        seen.append(xk.copy() if hasattr(xk, "copy") else xk)
        return len(seen) >= 3

    kw = {"restart": 5} if method == "gmres" else {}
    res = mpsolve.solve(A, b, method=method, rtol=1e-12, callback=stop_after_3, **kw, precond=None)
    assert res.info == mpsolve.result.USER_STOP == -15
    assert len(seen) == 3
    assert "callback" in res.status
    assert res.true_residual > 1e-12
    # a callback returning None (SciPy's style) never stops
    x, info = getattr(mpsolve, method)(A, b, rtol=1e-8, callback=lambda xk: None)
    assert info == 0


def test_callback_stop_after_convergence_reports_success():
    A = poisson2d(10)
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, method="cg", rtol=1e-6, callback=lambda xk: True, maxiter=1, precond=None)
    assert res.info in (0, -15)
    assert (res.info == 0) == (res.true_residual <= 1e-6)


def test_gmres_reports_restarts():
    A = convection_diffusion2d(20)
    b = A @ np.ones(A.shape[0])
    res = mpsolve.solve(A, b, method="gmres", restart=10, rtol=1e-8, precond=None)
    assert res.info == 0
    assert res.restarts == -(-res.iterations // 10) - 1
    assert mpsolve.solve(poisson2d(10), np.ones(100), method="cg", precond=None).restarts == 0


# ----------------------------------------------------------------- device-neutral core
_DEVICE_NAMES = {"cpu", "gpu", "reference", "cuda"}
_DEVICE_PACKAGES = {"numba", "cupy", "cupyx", "llvmlite"}
_NEUTRAL = [p for d in ("mpsolve", "precond", "matrices") for p in (ROOT / d).rglob("*.py")
            if p.name != "backend.py"]


def _device_mentions(path):
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in _DEVICE_NAMES:
            out.append(f"{path.name}:{node.lineno} names device {node.value!r}")
        if isinstance(node, ast.Import):
            out += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names
                    if a.name.split(".")[0] in _DEVICE_PACKAGES]
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] in _DEVICE_PACKAGES or parts[:3] in (["mpsolve", "kernels", "cpu"],
                                                             ["mpsolve", "kernels", "cuda"]):
                out.append(f"{path.name}:{node.lineno} imports {node.module}")
    return out


def test_no_device_names_outside_kernels():
    """Only ``kernels/`` (and the array-module boundary ``mpsolve/backend.py``) knows
    devices: no device-name literal, no numba/cupy import, no import of a device's
    kernel package anywhere else in the library."""
    assert _NEUTRAL
    found = [m for p in _NEUTRAL for m in _device_mentions(p)]
    assert not found, "\n".join(found)


def test_the_scanner_catches_device_code(tmp_path):
    f = tmp_path / "bad.py"
    f.write_text("import numba\nfrom mpsolve.kernels.cpu.spmv import x\nlookup('cpu', 'dot')\n")
    assert len(_device_mentions(f)) == 3


# ----------------------------------------------------------------- one-way imports
#: Layers, lowest first: a module may import from its own layer or lower ones only.
_LAYERS = [
    ("kernels", ["kernels"]),
    ("core", ["mpsolve/backend.py", "mpsolve/_sparse.py", "mpsolve/_demote.py",
              "mpsolve/operator.py", "mpsolve/precision.py", "mpsolve/_params.py", "matrices"]),
    ("precond", ["precond"]),
    ("solve", ["mpsolve/_system.py", "mpsolve/driver.py", "mpsolve/refine.py",
               "mpsolve/krylov", "mpsolve/result.py", "mpsolve/api.py", "mpsolve/__init__.py",
               "mpsolve/auto.py", "mpsolve/solver.py", "mpsolve/_configure.py",
               "mpsolve/multi.py"]),
    ("face", ["mpsolve/cli.py", "mpsolve/_cliargs.py", "mpsolve/petsc.py",
              "mpsolve/__main__.py", "bench"]),
]


def _module_of(path):
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    top = {"kernels": "mpsolve.kernels", "precond": "mpsolve.precond",
           "matrices": "mpsolve.matrices", "bench": "mpsolve.bench", "mpsolve": "mpsolve"}
    return ".".join([top[parts[0]]] + parts[1:])


def _layer_of_path(path):
    rel = path.relative_to(ROOT).as_posix()
    for i, (_, members) in enumerate(_LAYERS):
        for m in members:
            if rel == m or rel.startswith(m.rstrip("/") + "/"):
                return i
    return None


def _library_files():
    files = []
    for d in ("mpsolve", "kernels", "precond", "matrices"):
        files += [p for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts]
    files += [p for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("bench_")]
    return files


def _imports(path):
    """Absolute names of the mpsolve modules ``path`` imports (relative imports resolved)."""
    mod = _module_of(path)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("mpsolve")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("mpsolve"):
                out.add(name)
                out |= {f"{name}.{a.name}" for a in node.names}
    return out


def _index():
    """module name -> (path, layer)."""
    return {_module_of(p): (p, _layer_of_path(p)) for p in _library_files()}


def _resolve(name, index):
    while name and name not in index:
        name = name.rsplit(".", 1)[0] if "." in name else ""
    return name or None


def test_every_library_module_has_a_layer():
    unplaced = [str(p.relative_to(ROOT)) for p, layer in _index().values() if layer is None]
    assert not unplaced


def test_imports_run_one_way():
    """kernels <- core <- precond <- solve layer <- face: no import climbs a layer."""
    index = _index()
    bad = []
    for mod, (path, layer) in index.items():
        for name in _imports(path):
            target = _resolve(name, index)
            if target is None or target == mod:
                continue
            tl = index[target][1]
            if tl > layer:
                bad.append(f"{mod} ({_LAYERS[layer][0]}) imports {target} ({_LAYERS[tl][0]})")
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycles_between_modules():
    index = _index()
    graph = {m: {t for n in _imports(p) if (t := _resolve(n, index)) and t != m
                 and not m.startswith(t + ".")}  # a package's __init__ may be climbed through
             for m, (p, _) in index.items()}
    state = {}

    def visit(m, stack):
        state[m] = 1
        for t in graph[m]:
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t, stack + [t])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [m])


def test_krylov_holds_methods_only():
    files = sorted(p.name for p in (ROOT / "mpsolve" / "krylov").glob("*.py"))
    assert files == ["__init__.py", "bicgstab.py", "block_cg.py", "block_gmres.py", "cg.py",
                     "gmres.py"]


# ----------------------------------------------------------------- kernels vs the reference
def _kernel_inputs(op, key, rng, n=300):
    """Arguments of one contract op (fresh arrays for each call)."""
    from mpsolve.kernels.registry import launch_plan

    dt = [np.dtype(k) for k in key]
    cplx = dt[0].kind == "c"                 # complex keys: complex data and scalars

    def rand(shape, d=dt[0]):
        v = rng.standard_normal(shape)
        if np.dtype(d).kind == "c":
            v = v + 1j * rng.standard_normal(shape)
        return v.astype(d)

    vec = lambda d=dt[0]: rand(n, d)  # noqa: E731
    hdt = np.complex128 if cplx else np.float64     # mdot's out, GMRES's small problem
    if op in ("dot", "nrm2", "sum"):
        return [vec(), vec()][: {"dot": 2, "nrm2": 1, "sum": 1}[op]]
    if op.startswith("cb_") and op != "cb_store":        # key (V's dtype, w's dtype)
        V = rng.standard_normal((6, n)).astype(dt[0])
        w = rng.standard_normal(n).astype(dt[1])
        if op in ("cb_mdot", "cb_mdot_nrm2"):
            return [V, 5, w, np.zeros(6)]
        if op in ("cb_maxpy", "cb_maxpy_nrm2"):
            return [V, 5, rng.standard_normal(6), w]
        return [V, rng.standard_normal(6), 5, w]
    if op == "cb_store":
        return [float(rng.standard_normal()), vec(dt[0]), np.empty(n, dt[1])]
    if op in ("mdot", "maxpy", "lincomb"):
        V = rand((6, n))
        if op == "mdot":
            return [V, 5, vec(), np.zeros(6, hdt)]
        if op == "maxpy":
            return [V, 5, rand(6, hdt), vec()]
        return [V, rand(6, hdt), 5, vec()]
    scal = complex(rand(1, hdt)[0]) if cplx else float(rng.standard_normal())
    if op == "axpy":
        return [scal, vec(), vec()]
    if op == "xpay":
        return [vec(), scal, vec()]
    if op == "axpby":
        return [scal, vec(), 0.5 - 0.25j if cplx else 0.5, vec()]
    if op == "waxpy":
        return [scal, vec(), vec(), vec()]
    if op in ("axpy2", "axpy2_nrm2"):
        return [scal, vec(), vec(), -0.25, vec(), vec()]
    if op == "bicg_dir":
        return [vec(), 0.7 + 0.1j if cplx else 0.7, 0.3 - 0.2j if cplx else 0.3, vec(), vec()]
    if op == "scal":
        return [scal, vec()]
    if op == "copy":
        return [vec(dt[0]), np.empty(n, dt[1])]
    if op == "dmul":
        return [vec(dt[0]), vec(dt[1]), np.empty(n, dt[2])]
    if op == "range_scan":
        v = vec()
        wide = dt[0] in (np.float64, np.complex128)
        v[5] = 1e-300 if wide else 1e-40
        return [v, 1e30, 1e-200 if wide else 1e-39]
    if op in ("spmv", "spmv_dot", "residual", "residual_norms"):
        A = sp.random(n, n, density=0.03, random_state=rng, format="csr") + sp.eye(n)
        if cplx:
            A = A + 1j * sp.random(n, n, density=0.03, random_state=rng, format="csr")
        A = sp.csr_matrix(A)
        A.sort_indices()
        ip, ix = A.indptr.astype(np.int32), A.indices.astype(np.int32)
        plan = launch_plan("cpu", "spmv", ip)
        if op in ("residual", "residual_norms"):
            return [plan, ip, ix, A.data.astype(dt[0]), vec(dt[1]), vec(dt[2]),
                    np.empty(n, dt[3])]
        return [plan, ip, ix, A.data.astype(dt[0]), vec(dt[1]), np.empty(n, dt[2])]
    if op == "bsrmv":
        b = 3
        B = sp.bsr_matrix(sp.random(n, n, density=0.03, random_state=rng) + sp.eye(n),
                          blocksize=(b, b))
        B.sort_indices()
        ip, ix = B.indptr.astype(np.int32), B.indices.astype(np.int32)
        return [launch_plan("cpu", "bsrmv", ip), ip, ix, B.data.astype(dt[0]), vec(dt[1]),
                np.empty(n, dt[2])]
    if op in ("spmm", "spmm_dot", "residual_mm", "dmul_mm") or op.startswith("col_"):
        k = 3                                  # blocks (n, k) of three right-hand sides
        blk = lambda d=dt[0]: rand((n, k), d)  # noqa: E731
        if op in ("spmm", "spmm_dot", "residual_mm"):
            A = sp.csr_matrix(sp.random(n, n, density=0.03, random_state=rng, format="csr")
                              + sp.eye(n))
            A.sort_indices()
            ip, ix = A.indptr.astype(np.int32), A.indices.astype(np.int32)
            plan = launch_plan("cpu", "spmv", ip)
            if op == "residual_mm":
                return [plan, ip, ix, A.data.astype(dt[0]), blk(dt[1]), blk(dt[2]),
                        np.empty((n, k), dt[3])]
            if op == "spmm_dot":
                return [plan, ip, ix, A.data.astype(dt[0]), blk(dt[1]), np.empty((n, k), dt[2]),
                        np.zeros(k)]
            return [plan, ip, ix, A.data.astype(dt[0]), blk(dt[1]), np.empty((n, k), dt[2])]
        if op == "dmul_mm":
            return [vec(dt[0]), blk(dt[1]), np.empty((n, k), dt[2])]
        coef = lambda: rng.standard_normal(k)  # noqa: E731
        if op == "col_dot":
            return [blk(), blk(), np.zeros(k)]
        if op == "col_axpy2_nrm2":
            return [coef(), blk(), blk(), coef(), blk(), blk(), np.zeros(k)]
        if op == "col_xpay":
            return [blk(), coef(), blk()]
        if op == "col_scal":
            return [coef(), blk(), blk()]
        if op == "col_cg_step":
            return [coef(), blk(), blk(), blk(), blk(), vec(np.float32), np.zeros(k),
                    np.zeros(k)]
        if op == "col_dxpay":
            return [vec(np.float32), blk(), coef(), blk()]
        V = rand((6, n, k))
        if op == "col_mdot_nrm2":
            return [V, 5, blk(), np.zeros((6, k)), np.zeros(k)]
        if op == "col_maxpy_nrm2":
            return [V, 5, rng.standard_normal((6, k)), blk(), np.zeros(k)]
        if op == "col_mdot":
            return [V, 5, blk(), np.zeros((6, k))]
        if op == "col_maxpy":
            return [V, 5, rng.standard_normal((6, k)), blk()]
        return [V, rng.standard_normal((6, k)), 5, blk()]
    if op == "givens":
        m = 6
        H = rand((m + 1, m), hdt)
        cs, sn = rand(m, hdt), rand(m, hdt)
        return [H, cs, sn, rand(m + 1, hdt), 3]
    if op == "back_substitute":
        m = 6
        H = np.triu(rand((m + 1, m), hdt)) + 3 * np.eye(m + 1, m)
        return [H, rand(m + 1, hdt), 5, np.zeros(m, hdt)]
    return None


#: Ops whose inputs need structure (ILU factors, patterns): cpu vs reference for them is
#: in tests/test_precond.py (test_ilu_sweeps_kernels_agree, test_gather_local_kernels_agree,
#: test_ilu_setup_kernels_agree).
_STRUCTURED = {"ilu_sweeps", "ilu_sweeps_mm", "diag_positions", "ilu0_factor", "ic0_factor",
               "symmetric_mirror", "ilu_split", "line_abs_max", "ruiz_scaling",
               "drop_coupling", "gather_local",
               # block ILU(0): tests/test_block_ilu.py
               "bilu0_factor", "bilu_split", "block_tri_isai", "bilu_sweeps",
               # (Block-)ISAI set-up: tests/test_precond.py (test_isai_pattern_kernels_agree,
               # test_local_solve_kernels_agree)
               "bsr_from_csr", "pattern_power", "strong_graph", "pattern_union_power",
               "pattern_truncate", "bsr_transpose",
               "local_lu_solve", "local_chol_solve", "local_tri_solve", "block_capacity",
               # the analysis' row scan and the ILU(0) stability test: tests/test_auto.py
               "row_stats", "ilu_growth",
               # double-double x and residual: tests/test_eft_refine.py (exact oracles)
               "residual_dd", "dd_axpy",
               # the residual's rounding bound: tests/test_certify.py (both against NumPy)
               "residual_scale",
               # whole iterations: tests/test_fused.py (against the reference device, and
               # bit for bit against the Python body)
               "cg_loop", "gmres_arnoldi", "bicgstab_loop"}


def _contract_cases():
    for op in CONTRACT:
        if op.name in _STRUCTURED:
            continue
        for key in op.all_keys:
            for mode in op.modes:
                yield pytest.param(op.name, key, mode, id=f"{op.name}-{'-'.join(key)}-{mode}")


@pytest.mark.parametrize("op,key,mode", list(_contract_cases()))
def test_cpu_kernel_matches_reference(op, key, mode):
    """Every CPU kernel of the contract against the reference device, on the same
    inputs: results (return value and every array argument) agree within a bound
    scaled by the precision of the data."""
    from mpsolve.kernels import lookup

    rng = np.random.default_rng(abs(hash((op, key, mode))) % 2**32)
    args = _kernel_inputs(op, key, rng)
    a_cpu = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    a_ref = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    if op in ("spmv", "spmv_dot", "residual", "residual_norms", "bsrmv", "spmm", "spmm_dot",
              "residual_mm"):
        a_ref[0] = None                                   # the reference needs no plan
    r_cpu = lookup("cpu", op, key, mode)(*a_cpu)
    r_ref = lookup("reference", op, key, mode)(*a_ref)
    low = any(np.dtype(k) in (np.float32, np.complex64) for k in key) or mode == "acc32"
    rtol = 1e-4 if low else 1e-11
    if isinstance(r_cpu, tuple) and all(isinstance(v, float) for v in r_cpu):
        assert np.allclose(r_cpu, r_ref, rtol=rtol, atol=0)     # (sums of squares)
    elif isinstance(r_cpu, tuple):
        assert r_cpu == r_ref
    elif r_cpu is not None:
        assert np.isclose(r_cpu, r_ref, rtol=rtol, atol=rtol)
    for x, y in zip(a_cpu, a_ref):
        if isinstance(x, np.ndarray) and x.dtype.kind in "fc":
            np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * max(1.0, np.abs(y).max()))
