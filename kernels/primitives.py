"""The primitives contract: every op a device provides, with its math.

A Krylov method calls nothing but the operations listed here (house rule 1);
a device -- ``cpu``, ``reference``, ``gpu`` -- is a set of kernels registered under
these names (:mod:`.registry`).  :func:`bind_primitives` looks the vector ops of one
solve up once, before the loop (house rule 5), into a :class:`Primitives` record
that the methods use as ``ops.dot(x, y)``.  :data:`CONTRACT` is the list a new
device must implement; ``tests/test_devices.py`` checks every registered device
against it.

Conventions: vectors are 1-D arrays of one dtype (``float64``, ``float32``,
``complex128`` or ``complex64``) on the device; scalars are Python floats (complex
for complex vectors), cast to the vectors' dtype inside the kernel; results are
written in place; reductions return a Python float, a Python complex for the
products of complex vectors (``dot``, ``mdot``: ``x . y`` means the conjugated
``x^H y = sum conj(x_i) y_i``, NumPy's ``vdot``; norms stay real).
Multi-vector ops take ``V`` with one vector per row and use its first ``k`` rows.
Matrix ops take the device's *launch plan* first (:func:`.registry.launch_plan`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Tuple

import numpy as np

from .registry import dtype_name, lookup, memoised
from .safenorm import safe_after, safe_dot_ratio, safe_nrm2

__all__ = ["Op", "CONTRACT", "VECTOR_OPS", "BASIS_OPS", "BLOCK_OPS", "Primitives",
           "BasisPrimitives", "BlockPrimitives", "bind_primitives", "bind_basis",
           "bind_block_primitives"]

_F = ("float32", "float64")
_VEC = tuple((d,) for d in _F)
_MAT = tuple((v, x, y) for v in _F for x in _F for y in _F)
_TWIN = {"float32": "complex64", "float64": "complex128"}
_REDUCE = ("native", "compensated")
_CB = (("float32", "float64"),)


@dataclass(frozen=True)
class Op:
    """One primitive: name, call signature, math, dtype keys and modes."""

    name: str
    call: str
    math: str
    keys: Tuple[Tuple[str, ...], ...] = _VEC
    modes: Tuple[str, ...] = ("",)
    host: bool = False         # a set-up op on host arrays: host devices provide it
    #: complex vectors too: the op also has the keys ``ckeys`` (every dtype of a real key
    #: replaced by its complex twin).  A device that solves complex systems provides them
    #: (the host devices do); one that does not is refused at set-up for complex data
    #: (``mpsolve._system``), never inside a kernel
    complex: bool = False

    @property
    def ckeys(self) -> Tuple[Tuple[str, ...], ...]:
        """The complex twins of :attr:`keys` (empty for a real-only op)."""
        if not self.complex:
            return ()
        return tuple(tuple(_TWIN[d] for d in k) for k in self.keys)

    @property
    def all_keys(self) -> Tuple[Tuple[str, ...], ...]:
        return self.keys + self.ckeys


CONTRACT = (
    # --- reductions (mode: native = in the vectors' dtype; compensated = Dot2/Sum2, ORO 2005)
    Op("dot", "dot(x, y) -> float", "x . y  (complex: x^H y)", modes=_REDUCE, complex=True),
    Op("nrm2", "nrm2(x) -> float", "||x||_2", modes=_REDUCE, complex=True),
    Op("sum", "sum(x) -> float", "sum_i x_i", modes=_REDUCE),
    Op("mdot", "mdot(V, k, w, out)", "out[i] = V[i] . w, i < k  (out FP64, complex128 for "
       "complex w)", modes=_REDUCE, complex=True),
    # --- updates
    Op("axpy", "axpy(a, x, y)", "y = y + a x", complex=True),
    Op("xpay", "xpay(x, a, y)", "y = x + a y", complex=True),
    Op("axpby", "axpby(a, x, b, y)", "y = a x + b y", complex=True),
    Op("waxpy", "waxpy(a, x, y, w)", "w = y + a x", complex=True),
    Op("axpy2", "axpy2(a, x, y, b, u, v)", "y = y + a x;  v = v + b u", complex=True),
    Op("axpy2_nrm2", "axpy2_nrm2(a, x, y, b, u, v) -> float",
       "y = y + a x;  v = v + b u;  return ||v||_2", modes=("native",), complex=True),
    Op("bicg_dir", "bicg_dir(r, beta, omega, v, p)", "p = r + beta (p - omega v)", complex=True),
    Op("scal", "scal(a, x)", "x = a x", complex=True),
    Op("copy", "copy(x, out)", "out = x  (casts fused)",
       keys=tuple((a, b) for a in _F for b in _F), complex=True),
    Op("lincomb", "lincomb(V, y, k, out)", "out = sum_{i<k} y_i V[i]", complex=True),
    Op("maxpy", "maxpy(V, k, h, w)", "w = w - sum_{i<k} h_i V[i]", complex=True),
    Op("dmul", "dmul(d, x, out)", "out = diag(d) x  (dtypes d, x, out)", keys=_MAT,
       complex=True),
    # --- a compressed Krylov basis (CB-GMRES): V stored in FP32, w, h, y, out in FP64;
    # dtype key (V's, w's).  Host devices provide them; elsewhere a compressed-basis solve
    # stops at set-up with the registry's error (bind_basis)
    Op("cb_mdot", "cb_mdot(V, k, w, out)", "out[i] = V[i] . w, i < k, V widened exactly, "
       "FP64 products and sums (compensated: Dot2)", keys=_CB, modes=_REDUCE),
    Op("cb_maxpy", "cb_maxpy(V, k, h, w)", "w = w - sum_{i<k} h_i V[i]  (FP64)", keys=_CB),
    Op("cb_lincomb", "cb_lincomb(V, y, k, out)", "out = sum_{i<k} y_i V[i]  (FP64)", keys=_CB),
    Op("cb_store", "cb_store(a, x, out)", "out = fl32(a x): scaled in FP64, rounded once "
       "(dtypes x, out)", keys=(("float64", "float32"),)),
    Op("cb_mdot_nrm2", "cb_mdot_nrm2(V, k, w, out) -> float",
       "cb_mdot;  return ||w||_2  (one pass over w)", keys=_CB, modes=("native",)),
    Op("cb_maxpy_nrm2", "cb_maxpy_nrm2(V, k, h, w) -> float",
       "cb_maxpy;  return ||w||_2 of the updated w  (one pass)", keys=_CB, modes=("native",)),
    # --- sparse matrices (plan from launch_plan(device, "spmv"/"bsrmv", indptr))
    Op("spmv", "spmv(plan, indptr, indices, data, x, y)",
       "y = A x, CSR; row sums in FP64 (acc64) or FP32 (acc32); dtypes (data, x, y)",
       keys=_MAT, modes=("acc64", "acc32"), complex=True),
    Op("spmv_dot", "spmv_dot(plan, indptr, indices, data, x, y) -> float",
       "y = A x (FP64 row sums); return x . y in y's dtype", keys=tuple(
           (v, d, d) for v in _F for d in _F), modes=("acc64",), complex=True),
    Op("residual", "residual(plan, indptr, indices, data, x, b, r)",
       "r = b - A x, FP64 row sums; dtypes (data, x, b, r)",
       keys=tuple((v, d, d, d) for v in _F for d in _F), modes=("acc64",), complex=True),
    Op("residual_scale", "residual_scale(plan, indptr, indices, data, x, b) -> float",
       "sum_i (|b_i| + sum_j |a_ij| |x_j|)^2 in FP64 (inf on overflow): the rounding bound "
       "of residual's b - A x is gamma_{m+1} sqrt of it; dtypes (data, x, b); run on host "
       "arrays (once per convergence claim; a GPU solve hands over host copies)",
       keys=tuple((v, d, d) for v in _F for d in _F), modes=("acc64",), host=True,
       complex=True),
    Op("residual_norms", "residual_norms(plan, indptr, indices, data, x, b, r) -> "
       "(float, float)", "residual (r to the same bits) and, in the same pass, "
       "(sum_i |r_i|^2, residual_scale's sum), FP64: a true residual, its norm and its "
       "rounding bound in one pass over A (inf/NaN on overflow or a non-finite entry); "
       "dtypes (data, x, b, r)", keys=tuple((v, d, d, d) for v in _F for d in _F),
       modes=("acc64",), host=True, complex=True),
    Op("residual_dd", "residual_dd(plan, indptr, indices, data, xh, xl, b, r, rl)",
       "r + rl = b - A (xh + xl): Dot2 per row (TwoProd by FMA, TwoSum), x a double-double "
       "pair; r the pair rounded to FP64, rl the rest; all FP64", keys=(("float64",),)),
    Op("dd_axpy", "dd_axpy(a, x, yh, yl)", "(yh, yl) = (yh + yl) + a x in double-double "
       "(TwoProd, TwoSum; error O(u^2)); yh = the pair rounded", keys=(("float64",),)),
    Op("bsrmv", "bsrmv(plan, indptr, indices, data, x, y)",
       "y = A x, BSR data (nnzb, b, b); row sums FP64/FP32 (complex128/complex64 for complex "
       "data); dtypes (data, x, y)", keys=_MAT, modes=("acc64", "acc32"), complex=True),
    # --- several right-hand sides: (n, k) C-contiguous blocks, one column per right-hand
    # side (kernels/cpu/spmm.py); one sweep over a matrix serves every column.  Real only
    Op("spmm", "spmm(plan, indptr, indices, data, X, Y)",
       "Y = A X, CSR, (n, k) blocks; row sums FP64 (acc64) or FP32 (acc32); plan of 'spmv'; "
       "dtypes (data, X, Y)", keys=_MAT, modes=("acc64", "acc32")),
    Op("spmm_dot", "spmm_dot(plan, indptr, indices, data, X, Y, out)",
       "Y = A X (FP64 row sums) and out[c] = X[:, c] . Y[:, c] (FP64) in one sweep; square "
       "A; dtypes (data, X, Y)", keys=_MAT, modes=("acc64",)),
    Op("residual_mm", "residual_mm(plan, indptr, indices, data, X, B, R)",
       "R = B - A X, FP64 row sums; dtypes (data, X, B, R)",
       keys=tuple((v, d, d, d) for v in _F for d in _F), modes=("acc64",)),
    Op("dmul_mm", "dmul_mm(d, X, Y)", "Y = diag(d) X  (dtypes d, X, Y)", keys=_MAT),
    Op("ilu_sweeps_mm", "ilu_sweeps_mm(bounds, lptr, lind, lval, uptr, uind, uval, dinv, X, Y)",
       "ilu_sweeps on each column of X, k right-hand sides per row; dtypes (values, X, Y)",
       keys=_MAT),
    Op("col_dot", "col_dot(X, Y, out)", "out[c] = X[:, c] . Y[:, c]  (out FP64)",
       modes=("native",)),
    Op("col_axpy2_nrm2", "col_axpy2_nrm2(a, X, Y, b, U, V, out)",
       "Y_c += a_c X_c;  V_c += b_c U_c;  out_c = ||V_c||_2  (a, b, out FP64 length k)",
       modes=("native",)),
    Op("col_xpay", "col_xpay(X, a, Y)", "Y_c = X_c + a_c Y_c"),
    Op("col_scal", "col_scal(a, X, out)", "out_c = a_c X_c  (out may be X)"),
    Op("col_mdot", "col_mdot(V, j, W, out)", "out[i, c] = V[i, :, c] . W[:, c], i < j; V "
       "(m + 1, n, k): k bases; out FP64", modes=("native",)),
    Op("col_maxpy", "col_maxpy(V, j, H, W)", "W[:, c] -= sum_{i<j} H[i, c] V[i, :, c]"),
    Op("col_lincomb", "col_lincomb(V, Y, j, out)", "out[:, c] = sum_{i<j} Y[i, c] V[i, :, c]"),
    Op("col_cg_step", "col_cg_step(a, P, X, Q, R, d, rn, rz)",
       "X_c += a_c P_c;  R_c -= a_c Q_c;  rn_c = ||R_c||;  rz_c = R_c . fl(d R_c) (d empty: "
       "R_c . R_c), one pass; a, rn, rz FP64 length k; d FP32/FP64 length n or 0",
       modes=("native",)),
    Op("col_dxpay", "col_dxpay(d, R, a, P)",
       "P_c = fl(d R_c) + a_c P_c  (d empty: R_c + a_c P_c); d FP32/FP64 length n or 0"),
    Op("col_mdot_nrm2", "col_mdot_nrm2(V, j, W, out, nrm)",
       "col_mdot;  nrm_c = ||W_c||  (one pass over W; nrm FP64 length k)", modes=("native",)),
    Op("col_maxpy_nrm2", "col_maxpy_nrm2(V, j, H, W, nrm)",
       "col_maxpy;  nrm_c = ||W_c|| of the updated W  (one pass)", modes=("native",)),
    # --- preconditioner apply and set-up
    Op("ilu_sweeps", "ilu_sweeps(bounds, lptr, lind, lval, uptr, uind, uval, dinv, x, y)",
       "y = U'^-1 D^-1 L^-1 x per diagonal block [bounds[t], bounds[t+1]) (ILU(0) layout of "
       "mpsolve.precond.ilu: L forward, D^-1 U rows reversed); FP64 (complex128) row sums; "
       "dtypes (values, x, y)", keys=_MAT, complex=True),
    # --- GMRES's small least-squares problem (host FP64 arrays, whatever the device)
    Op("givens", "givens(H, cs, sn, g, j) -> float",
       "rotate H[:, j] by rotations 0..j-1, make rotation j zeroing H[j+1, j], update g; "
       "return |g[j+1]| (complex: the unitary rotation [[conj c, conj s], [-s, c]], "
       "real diagonal of R)", keys=(("float64",),), complex=True),
    Op("back_substitute", "back_substitute(H, g, k, y)",
       "y[:k] = R^-1 g[:k], R = H[:k, :k] upper triangular", keys=(("float64",),),
       complex=True),
    # --- whole iterations in one call (small systems; kernels/fused.py's argument pack,
    # from the launch plan of the op).  Host devices provide them; a solve elsewhere runs
    # the Python body
    Op("cg_loop", "cg_loop(A, amode, prog, P, pmode, x, r, q, z, p, t, maxiter, tol, hist, "
       "state) -> (count, flag)", "at most min(maxiter, hist.size) PCG iterations of "
       "mpsolve.krylov.cg's body (A and M as kernels/fused.py's programs; z is r without "
       "M); hist[k] = ||r_k+1||; state = [r.z, resume, sign of p.Ap]; flag 0 converged, "
       "1 iterations used up, -12/-14 breakdown", modes=_REDUCE, host=True),
    Op("bicgstab_loop", "bicgstab_loop(A, amode, prog, P, pmode, x, r, r0, p, v, s, t, ph, sh, "
       "w, maxiter, tol, hist, state) -> (count, flag)", "at most min(maxiter, hist.size) "
       "BiCGSTAB iterations of mpsolve.krylov.bicgstab's body (ph, sh are p, s without M; "
       "p = v = 0 on the first call); state = [rho, alpha, omega, resume, ||r0||, ||r||]; "
       "flag 0, 1, -10/-11/-14", modes=_REDUCE, host=True),
    Op("gmres_arnoldi", "gmres_arnoldi(A, amode, prog, P, pmode, side, V, Z, u, t, H, cs, sn, "
       "g, hcol, target, floor, max_steps, ratio, eps, reorth, hist) -> (steps, happy, est, "
       "wnorm_in, flag)", "the inner steps of one GMRES(m) cycle of mpsolve.krylov.gmres's "
       "body from V[0] (CGS2, Givens; side 0 none / 1 left / 2 right, z_j = M v_j into Z[j], "
       "or Z[0] when Z has one row); hist[:steps] = estimates * ratio", modes=_REDUCE,
       host=True),
    Op("range_scan", "range_scan(v, big, tiny) -> (bool, bool)",
       "(any |v_i| > big, any 0 < |v_i| < tiny): can demoting v overflow or flush?",
       host=True, complex=True),
    # --- preconditioner set-up on the host, FP64 (a device without host arrays uses
    # backend.HOST_DEVICE's): ILU(0) and the (Block-)ISAI local systems
    Op("diag_positions", "diag_positions(indptr, indices) -> diag",
       "diag[i] = position of a_ii in sorted CSR, -1 if not stored", keys=(("float64",),),
       host=True, complex=True),
    Op("ilu0_factor", "ilu0_factor(indptr, indices, data, diag) -> int",
       "A = L U on the pattern of A, in place on data (Saad Alg. 10.4, IKJ); -1 or the "
       "first row with a bad pivot", keys=(("float64",),), host=True, complex=True),
    Op("ic0_factor", "ic0_factor(indptr, indices, data, diag, mirror, positive=False) -> int",
       "IC(0) of symmetric (Hermitian) A in ilu0_factor's layout: U by elimination over "
       "j >= i, L = D^-1 U^H through mirror; -1 or the first row with a bad pivot (with "
       "positive: one not > 0)",
       keys=(("float64",),), host=True, complex=True),
    Op("symmetric_mirror", "symmetric_mirror(indptr, indices, data, rtol, mirror) -> bool",
       "is A symmetric (complex: Hermitian) to rtol, relative to max(|a_ij|, |a_ji|, "
       "sqrt(|a_ii a_jj|))? mirror[k] = position of entry k's transpose",
       keys=(("float64",),), host=True, complex=True),
    Op("ilu_split", "ilu_split(indptr, indices, data, diag, symmetric, mirror, lval, lind, "
       "lptr, uval, uind, uptr, dinv)", "lay the ILU(0) factors out for ilu_sweeps",
       keys=(("float64",),), host=True, complex=True),
    Op("ilu_growth", "ilu_growth(indptr, indices, data, scaled, bounds, lptr, lind, lval, "
       "uptr, uind, uval, dinv, x, y, z) -> float", "max_i |(M C x - x)_i| / x_i, M the "
       "ilu_sweeps factors, x ones or (scaled) |c_ii|^-1/2; inf for a non-finite term: "
       "auto's ILU(0) stability test in one call (x, y = C x, z = M y: work vectors); "
       "dtypes (C, factors)", keys=(("float64", "float32"), ("float64", "float64")),
       host=True, complex=True),
    Op("drop_coupling", "drop_coupling(indptr, indices, data, bounds) -> (ip, ix, dv)",
       "the block-diagonal part of A for the row blocks bounds", keys=(("float64",),),
       host=True, complex=True),
    Op("line_abs_max", "line_abs_max(indptr, indices, mag, r, c, rm, cm)",
       "rm[i], cm[j] = the row and column maxima of diag(r) mag diag(c) (mag: |entries| "
       "of CSR; 0 for an empty line)", keys=(("float64",),), host=True),
    Op("ruiz_scaling", "ruiz_scaling(indptr, indices, mag, passes, close, r, c) -> int",
       "Ruiz's max-norm scaling in place on r, c (from ones): until every nonzero line "
       "maximum of diag(r) mag diag(c) is within 1 +- close; the passes that scaled",
       keys=(("float64",),), host=True),
    Op("gather_local", "gather_local(rows, pptr, pind, aptr, aind, adata, out)",
       "out[t] = A[J_i, J_i] for i = rows[t], J_i = pind[pptr[i]:pptr[i+1]] (BSR blocks)",
       keys=(("float64",),), host=True, complex=True),
    # --- block ILU(0) (mpsolve.precond.block_ilu): set-up on the host, FP64, BSR blocks
    # (data (nnzb, b, b)); the apply on the device
    Op("bilu0_factor", "bilu0_factor(indptr, indices, data, diag, dinv) -> int",
       "A = L U on the block pattern of A, in place on data (block IKJ: L_ik = A_ik "
       "U_kk^-1, A_ij -= L_ik U_kj); dinv[i] = U_ii^-1 (FP64); -1 or the first block row "
       "with a bad pivot block (complex: pivoting on the modulus)", keys=(("float64",),),
       host=True, complex=True),
    Op("bilu_split", "bilu_split(indptr, indices, data, diag, dinv, symmetric, mirror, lval, "
       "lind, lptr, uval, uind, uptr)", "lay the BILU(0) factors out for bilu_sweeps "
       "(L forward, U' = D^-1 U block rows reversed; U' = L^T with symmetric, L^H for "
       "complex data)", keys=(("float64",),), host=True, complex=True),
    Op("block_tri_isai", "block_tri_isai(pptr, pind, tptr, tind, tdata, tdiag, dinv, lower, "
       "cond_limit, out, bad)", "X T[J_i, J_i] = E_i^T by block substitution for each block "
       "row i of the pattern (T: BILU(0)'s unit lower or upper factor); bad[i] = 1 when X is "
       "not finite or ||T_J|| ||X|| > cond_limit", keys=(("float64",),), host=True,
       complex=True),
    Op("bilu_sweeps", "bilu_sweeps(lptr, lind, lval, uptr, uind, uval, dinv, x, y)",
       "y = U'^-1 D^-1 L^-1 x by block sweeps (BILU(0) layout of bilu_split, blocks "
       "(nnzb, b, b)); each block row's sums in FP64 (complex128); dtypes (values, x, y)",
       keys=_MAT, complex=True),
    # --- (Block-)ISAI set-up (mpsolve.precond._pattern, ._localsolve): host, FP64, int64
    # patterns, BSR blocks (nnzb, b, b).  The local solves take block rows in any order
    # (grouped by |J_i| inside), gather, solve, check (backward error, ||Mat|| ||X||) and
    # write each accepted row into out[pptr[i]:pptr[i+1]]; bad[t] = 1 rejected (0 on entry).
    # A device without host arrays may register gather_local, local_lu_solve,
    # local_tri_solve and block_tri_isai itself (the GPU: kernels/cuda/isai_setup.py), with
    # the same math and rule on its arrays: rows/pos/pattern on the host, A and out in its
    # array module, bad on the host; precond then runs them there (precond._util.setup_device)
    Op("bsr_from_csr", "bsr_from_csr(indptr, indices, data, b) -> (aptr, aind, adata)",
       "canonical BSR of canonical CSR A, every diagonal block stored, explicit zeros kept; "
       "adata may be a view of data (read it only)",
       keys=(("float64",),), host=True, complex=True),
    Op("pattern_power", "pattern_power(sptr, sind, power, part) -> (pptr, pind)",
       "pattern of (S + I)^power, part 0 all / 1 tril / 2 triu, canonical",
       keys=(("float64",),), host=True),
    Op("strong_graph", "strong_graph(aptr, aind, anorm, theta) -> (sptr, sind)",
       "row i: off-diagonal j with 0 < anorm_ij >= theta max_k anorm_ik, canonical",
       keys=(("float64",),), host=True),
    Op("pattern_union_power", "pattern_union_power(aptr, aind, sptr, sind, power, part) -> "
       "(pptr, pind)", "pattern of A | (S + I)^power, part 0 all / 1 tril / 2 triu, canonical",
       keys=(("float64",),), host=True),
    Op("pattern_truncate", "pattern_truncate(pptr, pind, wptr, wind, wdata, power, keep) -> "
       "(qptr, qind, ntrunc)", "rows wider than keep keep the diagonal and the keep - 1 "
       "heaviest columns of row i of W^power (ties: lower column)", keys=(("float64",),),
       host=True),
    Op("bsr_transpose", "bsr_transpose(pptr, pind, data) -> (tptr, tind, tdata)",
       "canonical BSR of the transpose, blocks transposed; indices in pind's dtype, blocks "
       "in data's (FP32: a stored operator's values, moved)", keys=(("float64",), ("float32",)),
       host=True, complex=True),
    Op("local_lu_solve", "local_lu_solve(rows, pos, pptr, pind, aptr, aind, adata, spd, "
       "bwd_tol, cond_limit, out, bad)", "LU with partial pivoting: A_J^T X = E_pos, "
       "M[i, J] = X^T; spd: A_J Z = E_pos, G[i, J] = L^-1 Z^H with Z_last = L L^H",
       keys=(("float64",),), host=True, complex=True),
    Op("local_chol_solve", "local_chol_solve(rows, pos, pptr, pind, aptr, aind, adata, "
       "bwd_tol, cond_limit, out, bad)", "A_J = L L^H, A_J Z = E_pos, G[i, J] = L_z^-1 Z^H "
       "(FSAI); bad[t] = 2 where A_J is not SPD or the check fails (LU decides those)",
       keys=(("float64",),), host=True, complex=True),
    Op("local_tri_solve", "local_tri_solve(rows, pos, pptr, pind, aptr, aind, adata, lower, "
       "bwd_tol, cond_limit, out, bad)", "A triangular: A_J^T X = E_pos by substitution, "
       "M[i, J] = X^T", keys=(("float64",),), host=True, complex=True),
    Op("row_stats", "row_stats(indptr, indices, data, tiny, eps) -> stats",
       "one scan for method='auto': zero / tiny / dominant diagonal counts, max and min "
       "nonzero |a_ij|, real positive diagonal (1/0), longest row (kernels/cpu/pattern.py "
       "ROW_STATS)", keys=(("float32",), ("float64",)), host=True, complex=True),
    Op("block_capacity", "block_capacity(indptr, indices, ncols, b, max_excess=-1) -> int",
       "sum over the b x b blocks holding a stored entry of their places (a partial last "
       "block ncols % b wide): nnz / capacity = fill (block size detection); with "
       "max_excess >= 0, nnz + max_excess + 1 once capacity - nnz > max_excess",
       keys=(("float64",),), host=True),
)

#: The ops a Krylov method may call, bound per solve by :func:`bind_primitives`.
VECTOR_OPS = ("dot", "nrm2", "mdot", "axpy", "xpay", "axpby", "waxpy", "axpy2",
              "axpy2_nrm2", "bicg_dir", "scal", "copy", "lincomb", "maxpy", "givens",
              "back_substitute")

#: The ops of the block methods (several right-hand sides), bound by
#: :func:`bind_block_primitives`.
BLOCK_OPS = ("col_dot", "col_axpy2_nrm2", "col_xpay", "col_scal", "col_mdot", "col_maxpy",
             "col_lincomb", "col_cg_step", "col_dxpay", "col_mdot_nrm2", "col_maxpy_nrm2")

#: The ops of a Krylov basis stored below the working precision (:func:`bind_basis`).
BASIS_OPS = ("cb_mdot", "cb_maxpy", "cb_lincomb", "cb_store", "cb_mdot_nrm2",
             "cb_maxpy_nrm2")


@dataclass(frozen=True)
class Primitives:
    """The vector primitives of one solve (device, working dtype, reduction mode),
    looked up once.  Each field is a kernel with the signature of :data:`CONTRACT`."""

    device: str
    dtype: object
    dot_mode: str
    xp: object                 # the device's array module: workspace allocation
    dot: Callable              # x . y
    nrm2: Callable             # ||x||_2
    mdot: Callable             # out[i] = V[i] . w
    axpy: Callable             # y += a x
    xpay: Callable             # y = x + a y
    axpby: Callable            # y = a x + b y
    waxpy: Callable            # w = y + a x
    axpy2: Callable            # y += a x; v += b u
    axpy2_nrm2: Callable       # the same, returning ||v||
    bicg_dir: Callable         # p = r + beta (p - omega v)
    scal: Callable             # x *= a
    copy: Callable             # out = x
    lincomb: Callable          # out = V_k y
    maxpy: Callable            # w -= V_k h
    givens: Callable           # GMRES: next Givens rotation of the Hessenberg matrix (host FP64)
    back_substitute: Callable  # GMRES: y = R^-1 g (host FP64)
    dot_ratio: Callable        # (x . y) / (u . w) from scaled vectors (an overflowed dot's path)
    #: :meth:`basis`'s bindings, by basis dtype (made once: GMRES asks every solve)
    _bases: dict = field(default_factory=dict, init=False, repr=False, compare=False,
                         hash=False)

    def basis(self, dtype) -> "BasisPrimitives":
        """The multi-vector ops on a basis stored in ``dtype`` (:func:`bind_basis`)."""
        got = self._bases.get(dtype)
        if got is None:
            got = self._bases[dtype] = bind_basis(self, dtype)
        return got


@dataclass(frozen=True)
class BasisPrimitives:
    """The ops GMRES applies to its basis ``V`` (one vector a row, dtype ``dtype``) with
    working-precision vectors ``w``: looked up once per solve by :func:`bind_basis`."""

    dtype: object
    compressed: bool           # dtype narrower than the working dtype
    mdot: Callable             # out[i] = V[i] . w
    maxpy: Callable            # w -= V_k h
    lincomb: Callable          # out = V_k y (out in the working dtype)
    store: Callable            # store(a, x, out): out = a x, rounded to V's dtype
    mdot_nrm2: Callable        # mdot, returning ||w|| (fused where the device has it)
    maxpy_nrm2: Callable       # maxpy, returning ||w|| of the updated w (fused likewise)


def bind_basis(ops: Primitives, dtype) -> BasisPrimitives:
    """The basis ops for a basis stored in ``dtype`` under the vector ops ``ops``.

    A basis in the working dtype uses ``ops``' own ``mdot``/``maxpy``/``lincomb``, and
    ``store(a, x, out)`` is ``scal`` in place (``x is out``: GMRES writes the new vector
    into its row) or ``copy`` then ``scal``; a narrower basis uses the ``cb_*`` kernels
    (a device without them raises the registry's ``KeyError``, at set-up).  ``mdot_nrm2``
    and ``maxpy_nrm2`` are the fused ``cb_*_nrm2`` kernels where the device has them for
    the reduction mode, else the op followed by the mode's ``nrm2`` (so compensated norms
    stay compensated).

    Examples
    --------
    >>> import numpy as np
    >>> ops = bind_primitives("reference", "float64", "native", np)
    >>> b = ops.basis("float32")
    >>> V = np.zeros((2, 3), np.float32)
    >>> b.store(0.5, np.array([1.0, 2.0, 1e-9]), V[0]); V[0]
    array([5.e-01, 1.e+00, 5.e-10], dtype=float32)
    >>> out = np.zeros(2); b.mdot(V, 1, np.ones(3), out); out[0]
    np.float64(1.5000000005)
    """
    bdt = dtype_name(dtype)
    wdt = dtype_name(ops.dtype)
    nrm2 = ops.nrm2

    def fused(op, mode, compose):
        try:                            # the norm of w (argument 2 or 3) kept overflow-safe
            return safe_after(lookup(ops.device, op, key, mode), nrm2,
                              2 if op == "cb_mdot_nrm2" else 3, wdt)
        except KeyError:                # e.g. compensated: the mode's own nrm2 after the op
            return compose

    if bdt == wdt:
        copy, scal, mdot, maxpy = ops.copy, ops.scal, ops.mdot, ops.maxpy

        def store(a, x, out):
            if x is not out:
                copy(x, out)            # out = x
            scal(a, out)                # out = a out

        def mdot_nrm2(V, k, w, out):
            mdot(V, k, w, out)          # out_i = v_i . w
            return nrm2(w)

        def maxpy_nrm2(V, k, h, w):
            maxpy(V, k, h, w)           # w -= V_k h
            return nrm2(w)

        return BasisPrimitives(dtype=np.dtype(ops.dtype), compressed=False, mdot=mdot,
                               maxpy=maxpy, lincomb=ops.lincomb, store=store,
                               mdot_nrm2=mdot_nrm2, maxpy_nrm2=maxpy_nrm2)
    key = (bdt, wdt)
    mdot = lookup(ops.device, "cb_mdot", key, ops.dot_mode)
    maxpy = lookup(ops.device, "cb_maxpy", key)

    def mdot_nrm2(V, k, w, out):
        mdot(V, k, w, out)              # out_i = v_i . w
        return nrm2(w)

    def maxpy_nrm2(V, k, h, w):
        maxpy(V, k, h, w)               # w -= V_k h
        return nrm2(w)

    return BasisPrimitives(
        dtype=np.dtype(bdt), compressed=True, mdot=mdot, maxpy=maxpy,
        lincomb=lookup(ops.device, "cb_lincomb", key),
        store=lookup(ops.device, "cb_store", (wdt, bdt)),
        mdot_nrm2=fused("cb_mdot_nrm2", ops.dot_mode, mdot_nrm2),
        maxpy_nrm2=fused("cb_maxpy_nrm2", ops.dot_mode, maxpy_nrm2))


def bind_primitives(device: str, dtype, dot_mode: str, xp) -> Primitives:
    """Look the vector ops up for a solve (house rule 5): made once per device, dtype and
    mode and shared by every solve after (a frozen record of stateless kernels; a
    registration makes them anew, :func:`.registry.memoised`).

    ``axpy2_nrm2`` is fused where the device has it for ``dot_mode``; elsewhere it
    is composed of ``axpy2`` and that mode's ``nrm2`` (so compensated norms stay
    compensated).  Every norm is overflow- and underflow-safe and ``dot_ratio`` forms a
    ratio of dots from scaled vectors (:mod:`mpsolve.kernels.safenorm`).

    Examples
    --------
    >>> import numpy as np
    >>> ops = bind_primitives("reference", "float64", "compensated", np)
    >>> x = np.array([1e16, 1.0, -1e16])
    >>> ops.dot(x, np.ones(3))          # x . 1 correctly rounded (a native sum gives 0)
    1.0
    """
    return memoised(("primitives", device, dtype_name(dtype), dot_mode, xp),
                    lambda: _bind_primitives(device, dtype, dot_mode, xp))


def _bind_primitives(device, dtype, dot_mode, xp) -> Primitives:
    import numpy as np

    dt = (dtype_name(dtype),)
    k = {
        "dot": lookup(device, "dot", dt, dot_mode),
        "nrm2": lookup(device, "nrm2", dt, dot_mode),
        "mdot": lookup(device, "mdot", dt, dot_mode),
        "copy": lookup(device, "copy", dt * 2),
    }
    for name in ("axpy", "xpay", "axpby", "waxpy", "axpy2", "bicg_dir", "scal", "lincomb",
                 "maxpy"):
        k[name] = lookup(device, name, dt)
    # the small host problem is always FP64 (complex128 for complex vectors)
    host = ("complex128",) if np.dtype(dtype).kind == "c" else ("float64",)
    for name in ("givens", "back_substitute"):
        k[name] = lookup(device, name, host)
    # norms that neither overflow nor underflow (kernels/safenorm.py): the kernels' result
    # where it is trustworthy, else the same kernel on x scaled by a power of two
    k["nrm2"] = safe_nrm2(k["nrm2"], xp, dtype)
    k["dot_ratio"] = safe_dot_ratio(k["dot"], xp)
    try:
        k["axpy2_nrm2"] = safe_after(lookup(device, "axpy2_nrm2", dt, dot_mode), k["nrm2"], 5,
                                     dtype)
    except KeyError:
        axpy2, nrm2 = k["axpy2"], k["nrm2"]

        def axpy2_nrm2(a, x, y, b, u, v):
            axpy2(a, x, y, b, u, v)     # y += a x; v += b u
            return nrm2(v)              # ||v||

        k["axpy2_nrm2"] = axpy2_nrm2
    return Primitives(device=device, dtype=np.dtype(dtype), dot_mode=dot_mode, xp=xp, **k)


@dataclass(frozen=True)
class BlockPrimitives:
    """The column ops of a block solve (``k`` right-hand sides iterated together, blocks
    ``(n, k)``), looked up once per solve by :func:`bind_block_primitives`; per-column
    scalars are FP64 arrays of length ``k``."""

    device: str
    dtype: object
    col_dot: Callable          # out_c = X_c . Y_c
    col_axpy2_nrm2: Callable   # Y_c += a_c X_c; V_c += b_c U_c; out_c = ||V_c||
    col_xpay: Callable         # Y_c = X_c + a_c Y_c
    col_scal: Callable         # out_c = a_c X_c
    col_mdot: Callable         # out[i, c] = V[i, :, c] . W_c
    col_maxpy: Callable        # W_c -= sum_i H[i, c] V[i, :, c]
    col_lincomb: Callable      # out_c = sum_i Y[i, c] V[i, :, c]
    col_cg_step: Callable      # X_c += a_c P_c; R_c -= a_c Q_c; ||R_c||; R_c . d R_c
    col_dxpay: Callable        # P_c = d R_c + a_c P_c
    col_mdot_nrm2: Callable    # col_mdot and ||W_c||
    col_maxpy_nrm2: Callable   # col_maxpy and ||W_c|| after
    givens: Callable           # GMRES's small problem, per column (host FP64)
    back_substitute: Callable


def bind_block_primitives(device: str, dtype) -> BlockPrimitives:
    """Look the block ops up for one solve (native reductions; a ``KeyError`` naming what
    exists where the device or dtype has none: the caller then solves column by column).

    Examples
    --------
    >>> import numpy as np
    >>> ops = bind_block_primitives("reference", "float64")
    >>> X = np.array([[1.0, 2.0], [3.0, 4.0]]); out = np.zeros(2)
    >>> ops.col_dot(X, X, out); out
    array([10., 20.])
    """
    dt = (dtype_name(dtype),)
    k = {name: lookup(device, name, dt, "native" if name in (
        "col_dot", "col_axpy2_nrm2", "col_mdot", "col_cg_step", "col_mdot_nrm2",
        "col_maxpy_nrm2") else "")
         for name in BLOCK_OPS}
    for name in ("givens", "back_substitute"):
        k[name] = lookup(device, name, ("float64",))
    return BlockPrimitives(device=device, dtype=np.dtype(dtype), **k)
