"""The CUDA checks run in their own processes, started by ``tests/test_cuda.py``.

``MPSOLVE_CUDA_PROCESS`` names the process: ``sim`` (``NUMBA_ENABLE_CUDASIM=1`` set
before numba is imported: ``sim_checks.py``), ``compile`` (simulator off, offline
PTX/SASS: ``compile_checks.py``) or ``gpu`` (a real device: ``gpu_checks.py``).  In the
main pytest process the variable is unset and this folder collects nothing, so every
check runs exactly once per ``python3 -m pytest``.  (The files are not named ``test_*``
either; the runner passes them explicitly.)
"""
import os
import sys

PROCESS = os.environ.get("MPSOLVE_CUDA_PROCESS", "")

if not PROCESS:
    collect_ignore_glob = ["*.py"]

if PROCESS == "sim":
    # The simulator runs every CUDA thread of a block as a Python thread and its block
    # barrier (which the warp-intrinsic emulation uses) is a polling loop: with the default
    # 5 ms GIL switch interval each barrier costs several intervals.  0.1 ms: ~4x faster.
    sys.setswitchinterval(1e-4)
