"""Where the time of the batched ``A^2`` local solves goes, stage by stage (CPU kernels).

Run ``NUMBA_NUM_THREADS=1 python -m mpsolve.bench.bench_localsolve_stages [--problem SPEC]
[--lanes 64]``.  Takes the block rows of the most frequent local size ``s`` of
``general`` Block-ISAI on the pattern of ``A^2`` (default ``convdiff3d:40,peclet=10``:
``s = 25``), runs the lock-step stages of ``local_lu_solve`` on groups of ``--lanes``
systems -- gather, right-hand sides and copy, LU, solves, check, store -- each added to the
ones before it, and prints the CPU time per system each stage adds (best of 5).  One
thread, so the numbers do not depend on the machine's other load as much as wall times.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

from mpsolve.kernels.cpu import localsolve as K
from mpsolve.matrices import generate
from mpsolve.precond import _localsolve as L
from mpsolve.precond._pattern import block_pattern, to_bsr

STAGES = ["gather", "rhs + copy", "LU", "solves", "check", "store"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="convdiff3d:40,peclet=10")
    ap.add_argument("--lanes", type=int, default=64)
    ap.add_argument("--groups", type=int, default=200)
    args = ap.parse_args(argv)
    A = sp.csr_matrix(generate(args.problem))
    aptr, aind, adata = to_bsr(A, 1)
    nb = aptr.size - 1
    pp, pi = block_pattern(aptr, aind, nb, 2, "all")
    sizes = np.diff(pp)
    s = int(np.bincount(sizes).argmax())
    G = args.lanes
    rows = np.flatnonzero(sizes == s).astype(np.int64)
    ngroups = min(args.groups, rows.size // G)
    rows = rows[:ngroups * G]
    pos = np.array([np.searchsorted(pi[pp[i]:pp[i + 1]], i) for i in rows], np.int64)
    a = np.empty((s, s, G))
    a0 = np.empty_like(a)
    x = np.empty((s, 1, G))
    piv = np.empty((s, G), np.int64)
    big = np.empty(G)
    cols = np.empty(s, np.int64)
    nzf = np.empty((s, s), np.int8)
    nza = np.empty((s, s), np.int8)
    where = np.full(nb, -1, np.int64)
    bad = np.zeros(rows.size, np.int8)
    work = np.empty((7, G))
    out = np.zeros((pi.size, 1, 1))

    def run(last):
        for k in range(ngroups):
            t0 = k * G
            K._gather_lanes(rows, t0, G, pp, pi, aptr, aind, adata, True, a, where, nza)
            if last == 0:
                continue
            K._rhs_lanes(rows, t0, G, pos, 1, x)
            K._copy_lanes(a, a0, nza, G)
            if last == 1:
                continue
            K._lu_lanes(a, piv, big, G, cols)
            if last == 2:
                continue
            K._lu_solve_lanes(a, piv, x, G, nzf)
            if last == 3:
                continue
            K._check_lanes(a0, x, rows, t0, pos, 1, G, L.BWD_TOL, L.COND_LIMIT, bad, work, nza)
            if last == 4:
                continue
            K._store_rows(x, rows, t0, G, pp, 1, bad, out)

    print(f"{args.problem}: {rows.size} systems of s = {s}, {G} lanes; CPU us per system")
    prev = 0.0
    for last, name in enumerate(STAGES):
        run(last)                                      # compile
        best = np.inf
        for _ in range(5):
            t = time.process_time()
            run(last)
            best = min(best, time.process_time() - t)
        print(f"  {name:10s} +{(best - prev) / rows.size * 1e6:6.2f}   "
              f"(cumulative {best / rows.size * 1e6:.2f})")
        prev = best


if __name__ == "__main__":
    main()
