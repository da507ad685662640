#!/usr/bin/env bash
# Re-create everything in bench/results/ (the commands the result files name).
# Run on an otherwise idle machine: timings are compared as ratios within one run.
set -euo pipefail
cd "$(dirname "$0")/.."
COLL=${MPSOLVE_TEST_COLLECTION:-../shared/matrices/suitesparse}
# kernels, CG vs SciPy, precision presets (issues: core, mixed precision)
python bench/bench_core.py --grid 100 --elasticity 40 --collection "$COLL" --out bench/results
# preconditioner set-up / apply times against spilu and ILU(0)
python bench/bench_precond.py --out bench/results/precond_apply.md
# iterations per preconditioner on the SuiteSparse set and generated problems
MPSOLVE_WRITE_RESULTS=1 python -m pytest -q tests/test_precond_table.py
# the suite runner: the whole suite (--full: generated problems of ~1M unknowns, every
# configuration; ~45 min) and the SuiteSparse collection
mpsolve bench --full --out bench/results/generated
mpsolve bench --full --collection "$COLL" --precisions double mixed --preconds jacobi ilu0 block-isai \
    --scipy-preconds spilu --petsc-preconds bjacobi --repeat 3 --time-limit 10 \
    --out bench/results/suitesparse
# Solver.solve's per-call cost against PETSc's KSPSolve on the small SuiteSparse matrices
python -m mpsolve.bench.bench_solver --collection "$COLL" --out bench/results/solver.md
# issue 15: the presets' accuracy where the solution is known exactly, and which compensated
# reduction of the eft preset moves the iteration count
MPSOLVE_MATRIX_PATH="$COLL" python -m mpsolve.bench.bench_accuracy
MPSOLVE_MATRIX_PATH="$COLL" MPSOLVE_TEST_COLLECTION="$COLL" python -m mpsolve.bench.bench_eft_ablation
# ... and how far any precision of the recurrences (longdouble, double-double, exact) goes
MPSOLVE_MATRIX_PATH="$COLL" MPSOLVE_TEST_COLLECTION="$COLL" python -m mpsolve.bench.bench_eft_ceiling
# issue 10: Block-ISAI set-up against ILU(0), time to solution
python -m mpsolve.bench.bench_setup
# issue 12: coverage of auto against mpsolve's own best, PETSc's and SciPy's best
python -m mpsolve.bench.coverage --collection "$COLL"
# issue 13: the cost of the overflow-safe norms
python -m mpsolve.bench.bench_safenorm
# several right-hand sides in one sweep: k = 1, 2, 4, 8 on 1M unknowns (issue 14, item 2)
python -m mpsolve.bench.bench_multi_rhs --out bench/results/multi_rhs.md
# the GPU (needs one: bench/results/gpu/ was made by `bash bench/gpu_device.sh` on a lent
# H100); then here, PETSc on this CPU against the GPU's Block-ISAI times
python -m mpsolve.bench.gpu_petsc_cpu bench/results/gpu/generated.json \
    bench/results/gpu/suitesparse.json --collection "$COLL" --out bench/results/gpu/vs_petsc_cpu.md
