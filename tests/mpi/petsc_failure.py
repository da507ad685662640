"""Run under ``mpiexec -n 2`` by ``tests/test_petsc.py``: the plug-in on a 2-rank AIJ
matrix whose last diagonal entry (rank 1's) is 1e-45, so Jacobi's inverse diagonal does
not fit FP32 on rank 1 only.  Each rank writes its ``result-<rank>.json`` into the folder
named by its first argument (stdout interleaves the ranks' lines); the PC's view is printed.
"""
import json
import os
import sys

import numpy as np
import scipy.sparse as sp

import petsc4py

petsc4py.init(sys.argv[:1])
from petsc4py import PETSc  # noqa: E402

import mpsolve.petsc as mp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from petsc_bjacobi import distributed  # noqa: E402  (the rows PETSc gives each rank)

comm = PETSc.COMM_WORLD
rank = comm.getRank()
n = 40
A = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(n, n), format="lil")
A[n - 1, n - 1] = 1e-45
A = sp.csr_matrix(A)
P, lo, hi = distributed(A, comm)
out = {"rank": rank}
for tag, ctx in (("", mp.Jacobi(dtype="float32")), ("escalated_", mp.Jacobi())):
    ksp = PETSc.KSP().create(comm)
    ksp.setOperators(P)
    ksp.setType("gmres")
    ksp.setTolerances(rtol=1e-8, max_it=200)
    ksp.getPC().setType("python")
    ksp.getPC().setPythonContext(ctx)
    b = P.createVecLeft()
    b.set(1.0)
    x = P.createVecRight()
    ksp.solve(b, x)
    if tag:
        out["escalated_reason"] = int(ksp.getConvergedReason())
        out["escalated"] = ctx.escalated is not None
        ksp.getPC().view()
    else:
        out["ksp_reason"] = int(ksp.getConvergedReason())
        out["pc_reason"] = int(ksp.getPC().getFailedReason())
        out["failed"] = ctx.failed is not None
for name, make in (("petsc_mat", lambda: mp.petsc_mat(A, comm=comm)),
                   ("petsc_vec", lambda: mp.petsc_vec(np.ones(n), comm=comm))):
    try:
        make()
        out[name] = "made"
    except ValueError as err:
        out[name] = str(err)
with open(os.path.join(sys.argv[1], f"result-{rank}.json"), "w") as f:
    json.dump(out, f)
