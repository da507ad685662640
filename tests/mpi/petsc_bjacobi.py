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


def refill(A, mtype, opts, comm):
    """A matrix of ``mtype`` (MPI BAIJ/SBAIJ, block size 3) with the python PC given
    directly: solved, filled again with new values in the same pattern (a Newton step's
    refill), solved again.  The plug-in reads each rank's diagonal block through an AIJ
    copy: converting that block in place made the refill fail (a new nonzero, or SBAIJ's
    lower triangle)."""
    n = A.shape[0]
    P = PETSc.Mat().create(comm=comm)
    P.setSizes([n, n], bsize=3)
    P.setType(mtype)
    P.setUp()
    P.setOption(PETSc.Mat.Option.NEW_NONZERO_ALLOCATION_ERR, False)
    lo, hi = P.getOwnershipRange()
    U = A.tocsr() if mtype == "baij" else __import__("scipy.sparse").sparse.triu(A).tocsr()

    def fill(scale):
        for i in range(lo, hi):
            s, e = U.indptr[i], U.indptr[i + 1]
            P.setValues(i, U.indices[s:e].astype(PETSc.IntType), scale * U.data[s:e])
        P.assemble()

    fill(1.0)
    db = PETSc.Options()
    for k, v in opts.items():
        db[k] = v
    ksp = PETSc.KSP().create(comm)
    ksp.setOperators(P)
    ksp.setType("cg")
    ksp.setTolerances(rtol=1e-8, atol=0.0, max_it=2000)
    ksp.setFromOptions()
    for k in opts:
        db.delValue(k)
    b = P.createVecLeft()
    b.array[:] = (A @ np.ones(n))[lo:hi]
    reasons = []
    for scale in (1.0, 2.0):
        if scale != 1.0:
            fill(scale)                  # the same pattern, new values
        x = P.createVecRight()
        x.set(0.0)
        ksp.solve(b, x)
        reasons.append(int(ksp.getConvergedReason()))
        r = b.duplicate()
        P.mult(x, r)
        r.aypx(-1.0, b)
        true = r.norm() / b.norm()
    return dict(iterations=ksp.getIterationNumber(), reason=min(reasons),
                true_residual=float(true), type=P.getType())


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
    for mtype in ("baij", "sbaij"):
        res[f"elasticity_cg_{mtype}_refill_ilu0"] = refill(E, mtype, {
            "pc_type": "python", "pc_python_type": "mpsolve.petsc.ILU0"}, comm)
    if comm.getRank() == 0:
        print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
