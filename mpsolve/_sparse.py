"""Matrix checks shared by the solve layer and the preconditioners.

:func:`check_matrix` validates a matrix argument (the rejections name the
argument and the fix); :func:`canonical_csr` gives the canonical CSR form every
kernel assumes (sorted indices, no duplicates, 32-bit indices where they fit, a
symmetric pattern for a matrix symmetric but for stored zeros).
``make_problem`` runs both once per solve and hands the preconditioner the
canonical matrix (``Preconditioner.setup_canonical``), so ``A`` is checked and
converted once.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

__all__ = ["check_matrix", "canonical_csr", "complete_symmetric_pattern", "dtype_check", "native",
           "kernel_ready", "is_symmetric", "symmetry_rtol", "SYMMETRY_RTOL", "MatrixValueError",
           "ZeroDiagonalError"]


class MatrixValueError(ValueError):
    """A matrix's values make it unusable as given (NaN or Inf entries; a zero diagonal
    entry where a point-Jacobi form divides by it): the data's fault, not an argument's --
    the PETSc plug-in sets the PC's failed reason for it, as PETSc's own PCs do, instead of
    raising out of ``KSPSolve`` (under MPI: on one rank only, a hang)."""


class ZeroDiagonalError(MatrixValueError):
    """A zero diagonal entry where a point-Jacobi form divides by it (PETSc: a zero
    pivot)."""


def dtype_check(dtype, name):
    """``dtype`` if mpsolve accepts it for ``name``: boolean, integer, float, or complex64 /
    complex128 (a complex problem runs in the complex twins of its policy's dtypes,
    :func:`mpsolve.precision.in_field`); anything else is a ``TypeError`` naming ``name``."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c" and dtype.newbyteorder("=") not in (np.complex64, np.complex128):
        raise TypeError(
            f"{name} has dtype {dtype}; complex data must be complex64 or complex128 "
            f"(convert with {name}.astype(np.complex128))"
        )
    if dtype.kind not in "biufc":
        raise TypeError(f"{name} has dtype {dtype}; expected a numeric dtype")
    return dtype


def kernel_ready(arr):
    """``arr`` in a dtype the kernels take: FP64 when it holds half-precision (float16)
    values, the machine's byte order when it has another, else ``arr`` itself.

    FP16 is a storage format here, not a working precision, and SciPy's solvers compute
    float16 data in FP64 (as integer data); SciPy's sparse formats cannot hold it at all.
    Both conversions are exact."""
    if arr.dtype == np.float16:
        return arr.astype(np.float64)
    return native(arr)


def check_matrix(A, name="A"):
    """Validate a matrix argument; return a SciPy sparse matrix or a LinearOperator.

    Dense arrays become CSR (float16 ones in FP64: :func:`kernel_ready`).  Integer/boolean
    data is accepted (converted to FP64 later, as SciPy does), and complex64/complex128
    data; other complex dtypes,
    non-square shapes and non-finite values are rejected.
    """
    if isinstance(A, type):
        raise TypeError(f"{name} is the class {A.__name__}, not an instance of it: pass "
                        f"{A.__name__}() (its parameters in the call)"
                        + (", or the name as precond=..." if name == "M" else ""))
    if sp.issparse(A):
        M = A
    elif isinstance(A, spla.LinearOperator) or (
        hasattr(A, "matvec") and hasattr(A, "shape") and not isinstance(A, np.ndarray)
    ):
        if len(A.shape) != 2 or A.shape[0] != A.shape[1]:
            raise ValueError(f"{name} must be square, got shape {A.shape}")
        if getattr(A, "dtype", None) is not None:
            dtype_check(A.dtype, name)
        return A
    else:
        arr = kernel_ready(np.asarray(A))
        if arr.dtype == object and arr.ndim == 2:
            raise TypeError(f"{name} is a 2-D array of Python objects (dtype object): pass a "
                            f"numeric array, for example np.asarray({name}, dtype=np.float64)")
        if arr.dtype == object:
            raise TypeError(
                f"{name} of type {type(A).__name__} is not a matrix: pass a SciPy "
                "sparse matrix/array, a 2-D NumPy array or a LinearOperator"
            )
        if arr.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got an array of shape {arr.shape}")
        M = sp.csr_matrix(arr) if arr.size else sp.csr_matrix(arr.shape, dtype=arr.dtype)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(
            f"{name} must be square, got shape {M.shape}; a least-squares problem "
            "needs scipy.sparse.linalg.lsqr/lsmr"
        )
    dtype_check(M.dtype, name)
    data = M.data if hasattr(M, "data") else M.tocsr().data
    if data.dtype.kind in "fc" and not np.isfinite(data).all():
        bad = int((~np.isfinite(data)).sum())
        raise MatrixValueError(f"{name} contains {bad} NaN or Inf value(s); clean the matrix "
                               "first")
    return M


def canonical_csr(A, name: str = "A") -> sp.csr_matrix:
    """A canonical CSR copy-or-view of any SciPy sparse matrix/array.

    Sorted column indices, no duplicates (summed, as SciPy does), 32-bit
    indices where they fit, and the pattern completed where ``A`` is symmetric but for
    stored zeros (:func:`complete_symmetric_pattern`).  A BSR ``A`` with square blocks
    larger than 1 x 1 hands its block size on as the result's ``node_block_size``.  The
    caller's object is never modified: anything not already canonical is copied first; a
    ``csr_matrix`` that is canonical already (32-bit indices) is returned as it is.
    """
    if type(A) is sp.csr_matrix and A.indptr.dtype == np.int32 and \
            A.indices.dtype == np.int32 and A.data.dtype.isnative and A.has_canonical_format:
        # nothing to convert (and no SciPy re-check)
        return A if A.data.all() else complete_symmetric_pattern(A)
    if sp.issparse(A):
        C = A.tocsr()
        if C is A:
            C = A.copy() if not A.has_canonical_format else A
        elif not C.has_canonical_format:
            # tocsr() may share index arrays with A for some formats: copy first
            C = C.copy()
        if not C.has_canonical_format:
            C.sum_duplicates()  # also sorts indices
    else:
        C = sp.csr_matrix(np.asarray(A))
    C = sp.csr_matrix(C)  # matrix-style interface, whatever came in
    wide = C.nnz >= 2**31 - 1 or C.shape[1] >= 2**31 - 1
    index = np.dtype(np.int64 if wide else np.int32)
    if C.indptr.dtype != index or C.indices.dtype != index or not C.data.dtype.isnative:
        # 32-bit indices where they fit; native byte order (a big-endian array from a
        # file or another machine would not type in the compiled kernels)
        C = sp.csr_matrix((native(C.data), C.indices.astype(index, copy=False),
                           C.indptr.astype(index, copy=False)),
                          shape=C.shape)
    C = C if C.data.all() else complete_symmetric_pattern(C)
    if sp.issparse(A) and A.format == "bsr" and A.blocksize[0] == A.blocksize[1] > 1:
        # the block size the caller stored A with: the block preconditioners' default
        # (precond.detect_block_size; PETSc's rule for a BAIJ matrix)
        C.node_block_size = int(A.blocksize[0])
    return C


def keep_block_size(C, like):
    """``C`` (a new CSR matrix of the same pattern as ``like``: a copy, another dtype, new
    values) given ``like``'s ``node_block_size`` (:func:`canonical_csr`), which the
    SciPy constructors do not carry (one ``C`` has of its own is kept); returns ``C``."""
    b = getattr(like, "node_block_size", None)
    if b is not None and getattr(C, "node_block_size", None) is None:
        C.node_block_size = b
    return C


#: Relative tolerance of the symmetry test (:func:`is_symmetric`) for FP64 values.
SYMMETRY_RTOL = 1e-12


def symmetry_rtol(dtype) -> float:
    """The symmetry test's tolerance for values stored in ``dtype``: ``SYMMETRY_RTOL``, or
    64 units in the last place of a narrower float, at most 1e-2 (a matrix assembled in
    FP32 is symmetric only to FP32 rounding: 7.6e-6 for float32)."""
    dt = np.dtype(dtype)
    if dt.kind not in "fc":
        return SYMMETRY_RTOL
    return max(SYMMETRY_RTOL, min(64.0 * float(np.finfo(dt).eps), 1e-2))


def is_symmetric(C, host=None, rtol=None, mirror=None) -> bool:
    """Whether canonical CSR ``C`` is symmetric (complex: Hermitian, ``C == C^H``): its
    pattern is, and ``|c_ij - conj(c_ji)| <= rtol max(|c_ij|, |c_ji|, sqrt(|c_ii c_jj|))``
    for every stored entry (the ``symmetric_mirror`` kernel of the ``host`` device, default
    the CPU; the diagonal term lets the rounding noise of entries that cancel to zero pass,
    and keeps the test invariant under symmetric scaling).  ``rtol``: default
    :func:`symmetry_rtol` of ``C.dtype``.  ``mirror`` (int array of ``C.nnz``), when given,
    receives each entry's transpose position.  The one test of every symmetric form
    (ILU(0), BILU(0), ILUT, ISAI's ``variant="auto"``), of :func:`mpsolve.auto.analyse`, of
    CG's check of ``M`` and of :func:`complete_symmetric_pattern`."""
    from mpsolve.backend import HOST_DEVICE
    from mpsolve.kernels import lookup

    wide = np.dtype(np.complex128 if C.dtype.kind == "c" else np.float64)
    if mirror is None:
        mirror = np.empty(C.nnz, np.int64)
    return bool(lookup(HOST_DEVICE if host is None else host, "symmetric_mirror", (wide,))(
        C.indptr, C.indices, C.data.astype(wide, copy=False),
        symmetry_rtol(C.dtype) if rtol is None else rtol, mirror))


def complete_symmetric_pattern(C):
    """Canonical CSR ``C`` with explicit zeros stored at the transposes of its entries that
    have none, where ``C`` is symmetric (Hermitian) once its stored zeros are ignored
    (:func:`is_symmetric`); else ``C`` itself.

    A stored zero without a stored transpose (a value zeroed in one triangle, an assembly
    that keeps the zeros of one triangle only) leaves the values of a symmetric matrix
    symmetric and its pattern not: the symmetry test, which walks the pattern, would call
    the matrix nonsymmetric, and the automatic choice would then give an SPD matrix to
    BiCGSTAB with a nonsymmetric ILU(0), and CG's check of ``M`` would pass a nonsymmetric
    one.  Completing the pattern with zeros changes no value, so no product; it makes the
    pattern symmetric, so the symmetric forms (IC(0), the SPD ISAI) apply as on any
    symmetric matrix.  The cost falls on matrices with stored zeros only: a symmetry test
    of ``C`` (a nonsymmetric one mostly fails at its first rows), and where that fails a
    copy without the zeros and its test."""
    n = C.shape[0]
    if n != C.shape[1] or not C.nnz:
        return C
    if is_symmetric(C):
        return C                        # a symmetric pattern already (a passing test)
    Z = sp.csr_matrix((C.data, C.indices, C.indptr), shape=C.shape, copy=True)
    Z.eliminate_zeros()
    if not is_symmetric(Z):
        return C                        # nonsymmetric values: the pattern says so already
    rows = np.repeat(np.arange(n, dtype=C.indices.dtype), np.diff(C.indptr))
    P = sp.coo_matrix((np.concatenate([C.data, np.zeros(C.nnz, C.dtype)]),
                       (np.concatenate([rows, C.indices]), np.concatenate([C.indices, rows]))),
                      shape=C.shape).tocsr()
    P.sum_duplicates()                  # (keeps the zeros: a sum, not a pruning)
    if P.indices.dtype != C.indices.dtype:
        P = sp.csr_matrix((P.data, P.indices.astype(C.indices.dtype),
                           P.indptr.astype(C.indptr.dtype)), shape=C.shape)
    P.has_sorted_indices = True
    return P


def native(arr):
    """``arr`` in the machine's byte order (a converted copy when it is not)."""
    return arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("="))

