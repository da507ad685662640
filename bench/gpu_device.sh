#!/usr/bin/env bash
# What ran on a lent GPU machine (the workplace's `device` tool; no PyPI there, the image's
# CuPy/numba-cuda/SciPy are used): the stack report, the hardware test files, then
# `mpsolve bench --device gpu`.  Wheels in .whl/ are installed after the env stage.  Usage, from the repository root:
#   OUT=DIR MPSOLVE_TEST_COLLECTION=MATRICES bash bench/gpu_device.sh [STAGE ...]
# STAGE: env, tests, launch, quick, bench (default: all).  Logs and results go to $OUT.
set -u
OUT=${OUT:-/tmp/mpsolve_gpu}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
for d in kernels precond matrices bench; do [ -e "mpsolve/$d" ] || ln -s "../$d" "mpsolve/$d"; done
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 NUMBA_ENABLE_CUDASIM=0
export MPSOLVE_TEST_COLLECTION=${MPSOLVE_TEST_COLLECTION:-$PWD/.mats}
PY=${PY:-python3}
stage() {   # stage NAME SECONDS CMD...: run, log to $OUT/NAME.log, print its tail
  local name=$1 t=$2; shift 2
  local s=$(date +%s)
  echo "=== $name: $*"
  timeout "$t" "$@" >"$OUT/$name.log" 2>&1
  echo "=== $name rc=$? $(( $(date +%s) - s )) s"
  tail -n "${TAIL:-30}" "$OUT/$name.log"
}
want() { [ $# -eq 0 ] || [[ " $STAGES " == *" $1 "* ]]; }
STAGES=" ${*:-env tests launch quick bench} "
if want env; then
  stage env 120 bash -c "nvidia-smi -L; $PY -c 'import sys, numpy, scipy, numba, cupy; import numba_cuda; print(sys.version); print(\"numpy\", numpy.__version__, \"scipy\", scipy.__version__, \"numba\", numba.__version__, \"numba-cuda\", numba_cuda.__version__, \"cupy\", cupy.__version__)'; $PY -m mpsolve info --device"
fi
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  # the image's numba-cuda 0.30.4 cannot compile under its NumPy 2.5 (numpy.row_stack is
  # gone): carried wheels (NumPy 2.4) go first on the path for the stages below
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
  echo "=== carried wheels: $(ls .whl)"
fi
if want tests; then
  stage tests ${TESTS_S:-400} env MPSOLVE_CUDA_PROCESS=gpu $PY -m pytest -q -p no:cacheprovider \
    -rfEs --maxfail=20 ${TESTS:-tests/cuda/gpu_checks.py tests/cuda/gpu_solvers.py}
fi
if want launch; then
  stage launch ${LAUNCH_S:-120} $PY -m mpsolve.bench.gpu_launch --out "$OUT/launch"
fi
if want quick; then
  stage quick ${QUICK_S:-240} $PY -m mpsolve bench --device gpu --quick --out "$OUT/quick"
fi
if want bench; then
  stage bench ${BENCH_S:-500} $PY -m mpsolve bench --device gpu --out "$OUT/bench" ${BENCH_ARGS:-}
fi
