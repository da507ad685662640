"""Run under ``mpiexec -n N``: PETSc KSP with mpsolve's PC on a distributed matrix.

Prints one JSON line (rank 0) with, for each configuration, the iterations,
PETSc's converged reason and the FP64 true relative residual.  Used by
``tests/test_petsc.py::test_mpi_*``.
"""
import json
import sys

import petsc4py

petsc4py.init(sys.argv)
from petsc4py import PETSc  # noqa: E402

import numpy as np  # noqa: E402

from mpsolve.matrices import elasticity3d, convection_diffusion2d  # noqa: E402


def distributed(A, comm):
    """A PETSc MPIAIJ matrix holding the rows of A that PETSc gives this rank."""
    n = A.shape[0]
    P = PETSc.Mat().create(comm=comm)
    P.setSizes([n, n])
    P.setType("aij")
    P.setUp()
    lo, hi = P.getOwnershipRange()
    rows = A[lo:hi]
    P.setPreallocationCSR((rows.indptr.astype(PETSc.IntType), rows.indices.astype(PETSc.IntType)))
    P.setValuesCSR(rows.indptr.astype(PETSc.IntType), rows.indices.astype(PETSc.IntType), rows.data)
    P.assemble()
    return P, lo, hi


def run(A, ksp_type, opts, comm):
    P, lo, hi = distributed(A, comm)
    b = P.createVecLeft()
    b.array[:] = (A @ np.ones(A.shape[0]))[lo:hi]
    x = P.createVecRight()
    x.set(0.0)
    db = PETSc.Options()
    for k, v in opts.items():
        db[k] = v
    ksp = PETSc.KSP().create(comm)
    ksp.setOperators(P)
    ksp.setType(ksp_type)
    ksp.setTolerances(rtol=1e-8, atol=0.0, max_it=2000)
    if ksp_type != "cg":
        ksp.setPCSide(PETSc.PC.Side.RIGHT)
    ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    ksp.setFromOptions()
    ksp.solve(b, x)
    r = b.duplicate()
    P.mult(x, r)
    r.aypx(-1.0, b)
    true = r.norm() / b.norm()
    out = dict(iterations=ksp.getIterationNumber(), reason=int(ksp.getConvergedReason()),
               true_residual=float(true))
    for k in opts:
        db.delValue(k)
    return out


def main():
    comm = PETSc.COMM_WORLD
    E = elasticity3d(8)
    C = convection_diffusion2d(40, peclet=20)
    res = {
        "size": comm.getSize(),
        "elasticity_cg_bjacobi_blockisai_spd": run(E, "cg", {
            "pc_type": "bjacobi", "sub_pc_type": "python",
            "sub_pc_python_type": "mpsolve.petsc.BlockISAI", "sub_mpsolve_variant": "spd",
            "sub_mpsolve_block_size": "3"}, comm),
        # flexible variants: an FP32 preconditioner is not exactly linear (see
        # mpsolve.bench.baselines.petsc_solve)
        "elasticity_fgmres_bjacobi_blockisai": run(E, "fgmres", {
            "pc_type": "bjacobi", "sub_pc_type": "python",
            "sub_pc_python_type": "mpsolve.petsc.BlockISAI"}, comm),
        "convdiff_fbcgs_bjacobi_isai": run(C, "fbcgs", {
            "pc_type": "bjacobi", "sub_pc_type": "python",
            "sub_pc_python_type": "mpsolve.petsc.ISAI", "sub_mpsolve_precision": "mixed"}, comm),
        # the python PC given the MPI matrix directly: each rank uses its local block
        "convdiff_fgmres_python_direct": run(C, "fgmres", {
            "pc_type": "python", "pc_python_type": "mpsolve.petsc.ISAI"}, comm),
    }
    if comm.getRank() == 0:
        print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
