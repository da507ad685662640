"""A/B timing of whole solves: run it in two checkouts (before/after a change) in one session.

Usage: ``python bench/ab_solves.py [repeats]`` prints JSON: solve -> (best seconds, iterations, info).
"""
import sys, time, json
import numpy as np
import mpsolve
from mpsolve.matrices import poisson3d, convection_diffusion3d, elasticity3d, poisson2d
print(mpsolve.__file__, file=sys.stderr)
cases = [
    ("poisson3d:60 cg+ilu0 mixed", lambda: poisson3d(60), dict(method="cg", precond="ilu0", precision="mixed", rtol=1e-8)),
    ("poisson3d:60 cg+jacobi mixed-eft", lambda: poisson3d(60), dict(method="cg", precond="jacobi", precision="mixed-eft", rtol=1e-8)),
    ("convdiff3d:50 gmres+ilu0 mixed", lambda: convection_diffusion3d(50, peclet=10), dict(method="gmres", precond="ilu0", precision="mixed", rtol=1e-8, restart=30)),
    ("convdiff3d:50 bicgstab+isai", lambda: convection_diffusion3d(50, peclet=10), dict(method="bicgstab", precond="isai", precision="mixed", rtol=1e-8)),
    ("elasticity3d:16 cg+block-jacobi", lambda: elasticity3d(16), dict(method="cg", precond="block-jacobi", precision="mixed", rtol=1e-8)),
    ("poisson2d:30 cg small (overhead)", lambda: poisson2d(30), dict(method="cg", precond="jacobi", rtol=1e-8)),
]
out = {}
for name, mk, kw in cases:
    A = mk(); b = A @ np.ones(A.shape[0])
    mpsolve.solve(A, b, **kw)  # warm-up (JIT)
    best = 1e9; it = None
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
        t = time.perf_counter(); r = mpsolve.solve(A, b, **kw); best = min(best, time.perf_counter() - t); it = r.iterations
    out[name] = (best, it, r.info)
print(json.dumps(out))
