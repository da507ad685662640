#!/usr/bin/env bash
# Installs everything mpsolve's tests and benchmarks need on a fresh Debian machine:
# MPICH + OpenBLAS (Debian), PETSc + petsc4py built from PyPI's sources (CUDA off),
# and mpsolve itself (editable) with its test and bench extras.  Safe to run again: the Debian
# step is skipped when the packages are there, and pip's wheel cache turns the PETSc
# build (~17 min the first time on 2 cores) into a quick install afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

need=()
for pkg in libopenblas-dev libmpich-dev mpich; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "[setup] apt-get install ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

export PETSC_CONFIGURE_OPTIONS="--with-cuda=0 --with-fc=0 --with-x=0"
if ! $PY -c "import petsc4py; from petsc4py import PETSc" >/dev/null 2>&1; then
  echo "[setup] building PETSc 3.26.1 + petsc4py (pip's wheel cache makes later runs quick)"
  $PY -m pip install -q mpi4py "petsc==3.26.1" "petsc4py==3.26.1"
fi
echo "[setup] pip install -e .[test,bench]"
$PY -m pip install -q -e ".[test,bench]"
$PY - <<'PY'
import numba, numpy, scipy
from petsc4py import PETSc
print(f"[setup] ready: numpy {numpy.__version__}, scipy {scipy.__version__}, numba {numba.__version__}, "
      f"PETSc {'.'.join(map(str, PETSc.Sys.getVersion()))}")
PY
