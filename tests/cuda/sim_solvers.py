"""CG, GMRES and BiCGSTAB end to end on device ``"gpu"`` under numba's CUDA simulator.

Run in its own process with ``NUMBA_ENABLE_CUDASIM=1`` (``tests/test_cuda.py`` does; the
simulator must be on before numba is first imported).  Under the simulator the ``"gpu"``
device's array module is NumPy (:func:`mpsolve.backend.array_module`) and the
numba-cuda kernels registered for ``"gpu"`` run on those arrays: the whole GPU code
path -- operators, preconditioners set up for the device (the (Block-)ISAI local solves
on it, :mod:`mpsolve.kernels.cuda.isai_setup`; the rest on the host), the
driver, the FP64 true residual -- runs without a GPU.

Each case solves on ``"gpu"`` and on ``"cpu"`` and checks: the same ``info``; iteration
counts equal up to rounding noise (the spread of the CPU's own counts when ``b`` is
perturbed by an ulp, widened by max(2, 5%): the rule of ``tests/test_devices.py``'s
reference-vs-cpu table); a certified FP64 true residual (recomputed here on the host);
``x`` returned as the caller's type (NumPy in, NumPy out).  Problems are small (n <= 81:
the simulator costs about a millisecond per simulated thread, a few seconds an iteration).
"""
from __future__ import annotations

import numpy as np
import pytest

from mpsolve.backend import cuda_simulator

if not cuda_simulator():  # collected by a normal run: tests/test_cuda.py runs it
    pytest.skip("needs NUMBA_ENABLE_CUDASIM=1 (run by tests/test_cuda.py in its own process)",
                allow_module_level=True)

import mpsolve  # noqa: E402
from mpsolve import backend  # noqa: E402
from mpsolve.kernels import available  # noqa: E402
from mpsolve.kernels.primitives import CONTRACT, VECTOR_OPS  # noqa: E402
from mpsolve.matrices import convection_diffusion2d, elasticity3d, poisson2d  # noqa: E402

GPU = backend.GPU_DEVICE
CPU = backend.DEFAULT_DEVICE

#: The ops a solve on the device needs (the host set-up ops come from HOST_DEVICE).
SOLVE_OPS = set(VECTOR_OPS) | {"spmv", "residual", "bsrmv", "dmul", "range_scan"}


def _close_counts(a, b):
    return abs(a - b) <= max(2, 0.05 * max(a, b))


def _within_noise(count, solve, b):
    """``count`` within the spread of the CPU's counts for ``b`` perturbed by an ulp
    (as ``tests/test_devices.py``)."""
    rng = np.random.default_rng(7)
    counts = [solve(b)]
    for _ in range(4):
        e = rng.choice([-1.0, 1.0], size=b.size).astype(b.dtype) * np.finfo(b.dtype).eps
        counts.append(solve(b * (1 + e)))
    lo, hi = min(counts), max(counts)
    return _close_counts(count, lo) or _close_counts(count, hi) or lo <= count <= hi, counts


def _problem(kind):
    if kind == "spd":
        return poisson2d(6)                       # n = 36
    if kind == "elasticity":
        return elasticity3d(3)                    # n = 81, 3 unknowns a node: Block-ISAI b = 3
    return convection_diffusion2d(6)              # nonsymmetric, n = 36


def test_simulator_gives_the_gpu_device_numpy_arrays():
    import numba

    assert numba.config.ENABLE_CUDASIM or cuda_simulator()
    assert backend.array_module(GPU) is np
    assert not backend.is_host(GPU)             # set-up still runs on the host device
    x = np.arange(3.0)
    assert backend.to_device(x, GPU) is x and backend.to_host(x) is x


def test_gpu_registers_what_a_solve_needs():
    """Every vector/matrix op of the contract a solve calls exists on ``"gpu"``."""
    have = set(available(GPU))
    missing = sorted({(op.name, key, mode) for op in CONTRACT if op.name in SOLVE_OPS
                      for key in op.keys for mode in op.modes} - {k[1:] for k in have})
    assert not missing, f"{len(missing)} gpu kernels missing, e.g. {missing[:8]}"


def test_kernels_see_aliased_arguments_as_one_array():
    """BiCGSTAB updates ``x += alpha p^ + omega s^`` as ``axpy2(alpha, ph, x, omega, sh, x)``:
    the same array twice.  CuPy passes both as one device pointer; the simulator must
    too (it copies each NumPy argument in and out by default, and the second copy-back
    would undo the first update)."""
    from mpsolve.kernels import lookup

    rng = np.random.default_rng(0)
    x, u, y = rng.standard_normal(40), rng.standard_normal(40), rng.standard_normal(40)
    out = {}
    for dev in (GPU, CPU):
        yy = y.copy()
        lookup(dev, "axpy2", ("float64",))(0.5, x, yy, 2.0, u, yy)  # y += 0.5 x + 2 u
        out[dev] = yy
    np.testing.assert_allclose(out[GPU], out[CPU], rtol=1e-15, atol=1e-15)


#: (method, problem, preconditioner, its parameters, precision)
CASES = [
    ("cg", "spd", None, {}, "double"),
    ("cg", "spd", "jacobi", {}, "mixed-eft"),
    ("cg", "spd", "block-isai", {}, "mixed"),                       # auto: spd form
    ("cg", "elasticity", "block-isai", {}, "mixed-eft"),            # b = 3 detected
    ("gmres", "nonsym", None, {}, "double"),
    ("gmres", "nonsym", "jacobi", {}, "mixed"),
    ("gmres", "nonsym", "block-isai", {}, "mixed"),                 # auto: left form
    ("gmres", "nonsym", "block-isai", {"block_size": 2}, "mixed-eft"),
    ("gmres", "nonsym", "block-isai", {"side": "right"}, "mixed"),  # auto: right form
    ("bicgstab", "nonsym", None, {}, "double"),
    ("bicgstab", "nonsym", "jacobi", {}, "mixed"),
    ("bicgstab", "nonsym", "block-isai", {}, "mixed"),              # auto: right form
    ("cg", "spd", "jacobi", {}, "single"),                          # FP32 vectors and SpMV
]


def _id(c):
    method, kind, pc, kw, prec = c
    extra = "-".join(f"{k}={v}" for k, v in kw.items())
    return "-".join(filter(None, [method, kind, pc or "none", extra, prec]))


@pytest.mark.parametrize("method,kind,pc,kw,prec", CASES, ids=[_id(c) for c in CASES])
def test_solver_on_gpu_matches_cpu(method, kind, pc, kw, prec, table):
    A = _problem(kind)
    n = A.shape[0]
    rng = np.random.default_rng(11)
    b = rng.standard_normal(n)
    rtol = 1e-4 if prec == "single" else 1e-8
    kw = dict(kw)
    if method == "gmres":
        kw.setdefault("restart", 20)

    def run(device, bb):
        return mpsolve.solve(A, bb, method=method, precond=pc, precision=prec, rtol=rtol,
                             maxiter=600, device=device, **kw)

    g = run(GPU, b)
    c = run(CPU, b)
    table("GPU (simulator) vs CPU: iterations",
          ["case", "gpu info", "cpu info", "gpu its", "cpu its", "gpu true res"]).append(
        [_id((method, kind, pc, kw, prec)), g.info, c.info, g.iterations, c.iterations,
         f"{g.true_residual:.1e}"])
    assert g.info == c.info == 0, (g.status, c.status)
    ok, spread = _within_noise(g.iterations, lambda bb: run(CPU, bb).iterations, b)
    assert ok, (g.iterations, spread)
    assert type(g.x) is np.ndarray and g.x.dtype == c.x.dtype == np.float64
    true = np.linalg.norm(b - A @ g.x) / np.linalg.norm(b)
    assert true <= rtol * (1 + 1e-6), true                 # certified, recomputed here
    # the device's FP64 residual is the host's up to rounding (1e-16 once CG terminates)
    assert g.true_residual == pytest.approx(true, rel=1e-6, abs=1e-13)
    if pc is not None:
        assert g.precond_detail and c.precond_detail
        assert g.precond_detail.split("[")[1:] == c.precond_detail.split("[")[1:]  # same variant


def test_starting_guess_and_float32_data_on_gpu():
    """``x0`` is used and never modified; FP32 data give an FP32 answer."""
    A = poisson2d(8).astype(np.float32)
    b = np.ones(A.shape[0], dtype=np.float32)
    x0 = np.full(A.shape[0], 0.5, dtype=np.float32)
    keep = x0.copy()
    x, info = mpsolve.cg(A, b, x0, rtol=1e-5, device=GPU)
    assert info == 0 and x.dtype == np.float32 and type(x) is np.ndarray
    assert np.array_equal(x0, keep)
    xc, _ = mpsolve.cg(A, b, x0, rtol=1e-5, device=CPU)
    np.testing.assert_allclose(x, xc, rtol=1e-3, atol=1e-4)


def test_preconditioner_set_up_for_gpu_applies_like_the_cpu():
    from mpsolve.precond import BlockISAI, Jacobi

    A = convection_diffusion2d(8)
    r = np.random.default_rng(2).standard_normal(A.shape[0])
    for cls, kw in ((Jacobi, {}), (BlockISAI, {"block_size": 2})):
        Mg = cls(**kw).setup(A, device=GPU)
        Mc = cls(**kw).setup(A, device=CPU)
        assert Mg.device == GPU and Mc.device == CPU
        np.testing.assert_allclose(Mg.matvec(r), Mc.matvec(r), rtol=1e-5, atol=1e-6)


def test_petsc_plugin_applies_on_gpu():
    """mpsolve.petsc with ``device="gpu"``: x copied to the device, M x back (the copy
    path of device arrays, on NumPy arrays here); same iterations as on the CPU."""
    pytest.importorskip("petsc4py")
    from petsc4py import PETSc

    from mpsolve.petsc import BlockISAI, Jacobi

    A = poisson2d(10)
    b = A @ np.ones(A.shape[0])

    def solve(ctx):
        P = PETSc.Mat().createAIJ(size=A.shape, csr=(A.indptr, A.indices, A.data),
                                  comm=PETSc.COMM_SELF)
        P.assemble()
        ksp = PETSc.KSP().create(PETSc.COMM_SELF)
        ksp.setOperators(P)
        ksp.setType("cg")
        ksp.setTolerances(rtol=1e-8)
        pc = ksp.getPC()
        pc.setType("python")
        pc.setPythonContext(ctx)
        bv, xv = P.createVecLeft(), P.createVecRight()
        bv.array[:] = b
        ksp.solve(bv, xv)
        its, x = ksp.getIterationNumber(), xv.array.copy()
        for o in (ksp, P, bv, xv):
            o.destroy()
        return its, x

    for cls, kw in ((Jacobi, {}), (BlockISAI, {"variant": "spd", "block_size": 2})):
        ctx_g = cls(device=GPU, dtype="float64", **kw)
        its_g, xg = solve(ctx_g)
        its_c, xc = solve(cls(dtype="float64", **kw))
        assert ctx_g.M.device == GPU and ctx_g._bufs is not None
        assert _close_counts(its_g, its_c), (its_g, its_c)
        assert np.linalg.norm(b - A @ xg) <= 1e-7 * np.linalg.norm(b)
