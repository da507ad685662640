"""Which compensated piece of the ``eft`` preset moves the iteration count (issue 15)?

Run ``python -m mpsolve.bench.bench_eft_ablation [--quick] [--out FILE]``.  Writes Markdown
(default ``bench/results/eft_ablation.md``).

Each Krylov method's reductions are switched between Dot2 and the native FP64 kernels
*one role at a time* -- the other roles native -- while the solve otherwise runs the
``eft`` preset (double-double ``x`` and residual; every reduction compensated), and the
iterations to the tolerance are set against ``double``'s:

* CG: ``alpha`` (``p . A p``, the matvec's dot), ``beta`` (``r . z``), the residual norms;
* GMRES(30): the classical Gram-Schmidt coefficients (both CGS passes), the norms (of
  ``w`` after each pass and of each cycle's residual);
* BiCGSTAB: ``rho`` (``r0^ . r``), ``alpha``'s ``r0^ . v``, ``omega`` (``t . s``,
  ``t . t``), the norms (``||s||``, ``||r||``);
* ``dd``: the ``eft`` preset with every reduction compensated but ``x`` and the residual
  kept in FP64 (``residual="fp64"``: the driver's FP64 residual replacement) -- what the
  double-double update and the compensated residual replacement do;
* ``native`` and ``all``: every reduction native (double-double ``x`` kept), every one
  compensated (the ``eft`` preset itself); ``fused``: the ``eft`` preset with
  ``dot="native"`` (native reductions through the fused native kernels).

The roles are told apart by the method body's source line that asks for the reduction
(a measurement device of this script only: the solvers know nothing of it).  Problems:
the systems of :mod:`mpsolve.bench.bench_accuracy` (issue 15's ill-conditioned and
nonsymmetric sets) at ``rtol = 1e-10``, and, as the "never above 1.05x" check, ``double``
against ``eft`` (and ``eft`` with native reductions) at ``rtol = 1e-8`` on the default
suite of ``mpsolve bench`` (generated
and SuiteSparse) and on every matrix of the shared collection (square, zero-free diagonal,
at most 60000 rows) that ``double`` + Jacobi solves within the budget and ``--time-limit``
seconds (20: on a slower or busier machine a few long BiCGSTAB runs drop out of the set).
"""
from __future__ import annotations

import argparse
import linecache
import math
import os
import pathlib
import platform
import sys
import time
from dataclasses import replace

import numpy as np
import scipy.sparse as sp

from mpsolve import Precision, solve
from mpsolve import _system

from .bench_accuracy import RESTART, _geomean, _kw, _x_int, generated, large, suitesparse

ROOT = pathlib.Path(__file__).resolve().parents[1]
BODIES = {"cg_body": "cg", "gmres_body": "gmres", "bicgstab_body": "bicgstab"}
#: the roles of each method (the column order of the table)
ROLES = {"cg": ["alpha", "beta", "norm"], "gmres": ["coef", "norm"],
         "bicgstab": ["rho", "alpha", "omega", "norm"]}


def _role_of_dot(method, line):
    """The role of a ``dot`` call, from the body's source line."""
    if method == "cg":
        return "alpha" if "ratio(" in line else "beta"        # rz = r . z (the rest: matvec_dot)
    if "rho" in line and "dot(r0, r)" in line:
        return "rho"
    if "dot(r0, v)" in line or "ratio(r0, r" in line:
        return "alpha"
    return "omega"                                            # t . t, t . s, ratio(t, ...)


def _caller():
    """(method, source line) of the method body that is calling a reduction now."""
    f = sys._getframe(2)
    while f is not None:
        m = BODIES.get(f.f_code.co_name)
        if m is not None:
            return m, linecache.getline(f.f_code.co_filename, f.f_lineno)
        f = f.f_back
    return None, ""


class Switch:
    """Reductions that are compensated for the roles in ``on`` and native otherwise."""

    def __init__(self, on):
        self.on = frozenset(on)

    def wrap(self, sys_):
        nat = _system.make_ops(sys_.problem.device, sys_.dtype, "native")
        comp = _system.make_ops(sys_.problem.device, sys_.dtype, "compensated")
        on = self.on

        def pick(kind):
            def f(*a):
                method, line = _caller()
                role = kind if kind != "dot" else _role_of_dot(method, line)
                k = comp if role in on else nat
                return getattr(k, "dot" if kind in ("dot", "alpha") else kind)(*a)
            return f

        def nrm2(*a):
            return (comp if "norm" in on else nat).nrm2(*a)

        def mdot(*a):
            return (comp if "coef" in on else nat).mdot(*a)

        def axpy2_nrm2(*a):
            return (comp if "norm" in on else nat).axpy2_nrm2(*a)

        dot = pick("dot")
        ratio_n, ratio_c = nat.dot_ratio, comp.dot_ratio

        def dot_ratio(*a):
            method, line = _caller()
            return (ratio_c if _role_of_dot(method, line) in on else ratio_n)(*a)

        ops = replace(sys_.ops, dot=dot, nrm2=nrm2, mdot=mdot, axpy2_nrm2=axpy2_nrm2,
                      dot_ratio=dot_ratio)
        matvec = sys_.matvec

        def matvec_dot(x, y):                      # CG's alpha: q = A p; p . q
            matvec(x, y)
            return (comp if "alpha" in on else nat).dot(x, y)

        return replace(sys_, ops=ops, matvec_dot=matvec_dot)


def run(A, b, method, precision, rtol, switch=None):
    """One solve; ``switch`` rewires the System's reductions (see :class:`Switch`).  Every
    solve runs the methods' Python bodies (``MPSOLVE_FUSED=0``), where the switch acts: a
    compiled loop (small systems) would take its reductions from the policy alone.  The
    compiled loops give the Python bodies' bits, so the counts are those of any solve."""
    orig = _system.make_system
    fused = os.environ.get("MPSOLVE_FUSED")
    os.environ["MPSOLVE_FUSED"] = "0"
    if switch is not None:
        def make(problem, policy):
            return switch.wrap(orig(problem, policy))
        _system.make_system = make
    try:
        maxiter = 40 * A.shape[0] if method != "gmres" else 250
        return solve(A, b, method=method, precond="jacobi", precision=precision, rtol=rtol,
                     escalate=False, maxiter=maxiter, **_kw(method))
    finally:
        _system.make_system = orig
        if fused is None:
            del os.environ["MPSOLVE_FUSED"]
        else:
            os.environ["MPSOLVE_FUSED"] = fused


def ablation_rows(problems, rtol, log):
    eft = Precision.preset("eft")                                   # every reduction Dot2
    fused = replace(eft, name="eft-native", dot="native")
    eft_fp64 = replace(eft, name="eft-fp64-x", residual="fp64")
    rows = []
    for name, A, method in problems:
        b = A @ _x_int(A.shape[0])
        out = dict(problem=name, method=method, n=A.shape[0])
        out["double"] = run(A, b, method, "double", rtol).iterations
        out["all"] = run(A, b, method, eft, rtol).iterations
        out["native"] = run(A, b, method, eft, rtol, Switch(())).iterations
        out["fused"] = run(A, b, method, fused, rtol).iterations
        for role in ROLES[method]:
            out[role] = run(A, b, method, eft, rtol, Switch((role,))).iterations
        out["dd"] = run(A, b, method, eft_fp64, rtol).iterations
        rows.append(out)
        log(out)
    return rows


def suite_problems(quick):
    """(name, A, method) of the suites: ``mpsolve bench``'s default generated problems and
    the shared collection's matrices (CG for the SPD ones, GMRES(30) and BiCGSTAB for all)."""
    from mpsolve.matrices import generate, list_collection, read_mtx

    from .suite import DEFAULT_SUITE, QUICK_SUITE, find_collection

    for spec in (QUICK_SUITE if quick else DEFAULT_SUITE):
        A = sp.csr_matrix(generate(spec))
        spd = not spec.startswith("convdiff")
        for method in (["cg"] if spd else []) + ["gmres", "bicgstab"]:
            yield spec, A, method
    folders = find_collection()
    if not folders:
        return
    for e in list_collection(folders[:1]):
        if quick and e.rows > 2000:
            continue
        try:
            A = sp.csr_matrix(read_mtx(e.path), dtype=np.float64)
        except Exception:  # noqa: BLE001  (complex or unreadable: not this check's)
            continue
        if A.shape[0] != A.shape[1] or A.shape[0] > 60000 or np.any(A.diagonal() == 0):
            continue
        for method in (["cg"] if e.spd else []) + ["gmres", "bicgstab"]:
            yield e.name, A, method


def suite_rows(problems, rtol, log, time_limit):
    rows = []
    for name, A, method in problems:
        b = A @ np.ones(A.shape[0])
        t0 = time.perf_counter()
        d = run(A, b, method, "double", rtol)
        if d.info != 0 or time.perf_counter() - t0 > time_limit:
            continue                             # not solved by double + Jacobi: no ratio
        e = run(A, b, method, "eft", rtol)
        c = run(A, b, method, replace(Precision.preset("eft"), name="eft-native",
                                      dot="native"), rtol)
        rows.append(dict(problem=name, method=method, n=A.shape[0], double=d.iterations,
                         eft=e.iterations, eft_info=e.info, nat=c.iterations,
                         nat_info=c.info))
        log(rows[-1])
    return rows


def report(abl, suite, rtol_abl, rtol_suite, wall):
    L = ["# Which compensated reduction moves the iteration count? (issue 15)", "",
         f"`python -m mpsolve.bench.bench_eft_ablation` -- {platform.machine()}, Python "
         f"{platform.python_version()}, {time.strftime('%Y-%m-%d')} ({wall:.0f} s).  "
         "Iterations are deterministic: no timing here.", "",
         f"## Ablation at rtol = {rtol_abl:g} (Jacobi; GMRES({RESTART}) in inner iterations)",
         "",
         "Iterations (and their ratio to `double`'s) of the `eft` policy (double-double x "
         "and residual) with the reductions of one role compensated (Dot2) and the others "
         "native.  `native`: none compensated, through this script's switch (unfused "
         "kernels, so it may differ from `fused` by rounding); `fused`: the `eft` preset with "
         "`dot='native'` (native reductions, fused kernels); `all`: every reduction "
         "compensated (the `eft` preset); `dd`: every reduction compensated, x and the "
         "residual FP64 (`residual='fp64'`).", ""]
    for method in ("cg", "gmres", "bicgstab"):
        rows = [r for r in abl if r["method"] == method]
        if not rows:
            continue
        cols = ["native", *ROLES[method], "all", "dd", "fused"]
        L += [f"### {method}", "", "| problem | n | double | " +
              " | ".join(cols) + " |", "| --- | --- | --- | " + " | ".join("---" for _ in cols)
              + " |"]
        for r in rows:
            d = max(r["double"], 1)
            L.append(f"| {r['problem']} | {r['n']} | {r['double']} | " +
                     " | ".join(f"{r[c]} ({r[c] / d:.3f})" for c in cols) + " |")
        L.append("| geomean | | | " + " | ".join(
            f"{_geomean([r[c] / max(r['double'], 1) for r in rows]):.3f}" for c in cols)
            + " |")
        L.append("")
    for key, what in (("all", "the `eft` preset (every reduction compensated)"),
                      ("fused", "`eft` with native reductions")):
        v = [r[key] / max(r["double"], 1) for r in abl]
        L.append(f"- {what}/`double`, all {len(v)} systems: geomean {_geomean(v):.3f}, "
                 f"max {max(v):.3f}.")
    L.append("")
    if suite:
        L += [f"## `eft` against `double` on the suites at rtol = {rtol_suite:g}", "",
              f"{len(suite)} systems that `double` + Jacobi solves (the default suite of "
              "`mpsolve bench` and the shared SuiteSparse collection; CG on the SPD ones, "
              f"GMRES({RESTART}) and BiCGSTAB on all; b = A 1).", ""]
        for key, what in (("eft", "`eft` (the preset: every reduction compensated)"),
                          ("nat", "`eft` with native reductions")):
            ratios = [r[key] / max(r["double"], 1) for r in suite]
            worst = max(suite, key=lambda r: r[key] / max(r["double"], 1))
            L.append(f"- {what}/`double` iterations: geomean {_geomean(ratios):.3f}, max "
                     f"{max(ratios):.3f} ({worst['problem']} {worst['method']}); above 1.05: "
                     f"{sum(x > 1.05 for x in ratios)}; below 0.95: "
                     f"{sum(x < 0.95 for x in ratios)}.")
        L += ["", "| problem | n | method | double | eft | eft/double | eft, native dots | "
              "native/double |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in suite:
            d = max(r["double"], 1)
            L.append(f"| {r['problem']} | {r['n']} | {r['method']} | {r['double']} | "
                     f"{r['eft']}{'' if r['eft_info'] == 0 else '*'} | {r['eft'] / d:.3f} | "
                     f"{r['nat']}{'' if r['nat_info'] == 0 else '*'} | "
                     f"{r['nat'] / d:.3f} |")
        L += ["", "`*`: did not converge.", ""]
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rtol", type=float, default=1e-10)
    ap.add_argument("--rtol-suite", type=float, default=1e-8)
    ap.add_argument("--no-suite", action="store_true")
    ap.add_argument("--large", action="store_true", help="also the n = 60^3 problems")
    ap.add_argument("--time-limit", type=float, default=20.0,
                    help="skip a suite system whose double solve takes longer (s)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "eft_ablation.md"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    probs = [(n, A, m) for n, A, m, _ in generated(args.quick)]
    probs += [(n, A, m) for n, A, m, _ in suitesparse(args.quick)]
    if args.large:
        probs += [(n, A, m) for n, A, m, _ in large(args.quick)]

    def log(r):
        print(r, flush=True)

    abl = ablation_rows(probs, args.rtol, log)
    suite = [] if args.no_suite else suite_rows(suite_problems(args.quick), args.rtol_suite,
                                                 log, args.time_limit)
    text = report(abl, suite, args.rtol, args.rtol_suite, time.perf_counter() - t0)
    pathlib.Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
