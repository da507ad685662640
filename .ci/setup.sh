#!/usr/bin/env bash
# Installs everything mpsolve's tests and benchmarks need on a fresh Debian machine:
# MPICH + OpenBLAS (Debian), PETSc + petsc4py built from PyPI's sources (CUDA off),
# and mpsolve itself (editable) with its test and bench extras.  Safe to run again: the Debian
# step is skipped when the packages are there, and the PETSc build (~30 min on 2 cores)
# only runs when the installed PETSc is missing or not the optimised build.
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

# PETSc as PETSc recommends building it for speed (the bench's baseline must be its best):
# debugging off, -O3 -march=native.  An installed PETSc built otherwise (e.g. an older
# `-g -O` build, or one from a wheel cache) is rebuilt once, bypassing pip's cache.
# (PETSc's setup.py splits this with shlex and then runs configure through a shell
# command line: the inner single quotes keep each flag list one argument there)
export PETSC_CONFIGURE_OPTIONS="--with-cuda=0 --with-fc=0 --with-x=0 --with-debugging=0 \
COPTFLAGS=\"'-O3 -march=native'\" CXXOPTFLAGS=\"'-O3 -march=native'\""
petsc_optimised() {
  $PY - <<'PY' >/dev/null 2>&1
import os, re, sys
import petsc4py
from petsc4py import PETSc  # noqa: F401
c = petsc4py.get_config()
text = open(os.path.join(c["PETSC_DIR"], c.get("PETSC_ARCH") or "", "lib", "petsc", "conf",
                         "petscvariables")).read()
flags = re.search(r"^CC_FLAGS\s*=(.*)$", text, re.M).group(1).split()
sys.exit(0 if "-O3" in flags and "-march=native" in flags else 1)
PY
}
if ! petsc_optimised; then
  echo "[setup] building PETSc 3.26.1 (-O3 -march=native, debugging off) + petsc4py"
  $PY -m pip install -q mpi4py
  $PY -m pip install -q --no-cache-dir --force-reinstall --no-deps "petsc==3.26.1"
  $PY -m pip install -q "petsc4py==3.26.1"
fi
echo "[setup] pip install -e .[test,bench]"
$PY -m pip install -q -e ".[test,bench]"
$PY - <<'PY'
import numba, numpy, scipy
from petsc4py import PETSc
print(f"[setup] ready: numpy {numpy.__version__}, scipy {scipy.__version__}, numba {numba.__version__}, "
      f"PETSc {'.'.join(map(str, PETSc.Sys.getVersion()))}")
PY
