"""Read a sparse matrix from any of the files SuiteSparse and SciPy users keep them in.

:func:`read_matrix` dispatches on the file name:

- ``.mtx`` / ``.mtx.gz``: Matrix Market (:func:`~mpsolve.matrices.read_mtx`, which checks
  the file line by line);
- ``.mat``: MATLAB (SciPy's ``loadmat``, formats v4 to v7); SuiteSparse's ``.mat`` files hold
  a struct ``Problem`` whose field ``A`` is the matrix, other files one sparse or 2-D array;
- ``.rb``, ``.rua``, ``.rsa``, ``.hb``: Harwell-Boeing / Rutherford-Boeing, assembled and
  real (SciPy's ``hb_read``; symmetric and skew-symmetric storage, which SciPy refuses, is
  read as the stored triangle and expanded here);
- ``.npz``: ``scipy.sparse.save_npz``;
- a folder: an extracted SuiteSparse tarball, ``<folder>/<folder name>.mtx[.gz]``.

Every reader returns what :func:`~mpsolve.matrices.read_mtx` returns: a canonical CSR matrix
(sorted indices, duplicates summed), complex128 for complex data, float64 otherwise.
"""

from __future__ import annotations

import io
import os
import zipfile
import zlib

import numpy as np
import scipy.io
import scipy.sparse as sp

from .mmio import MatrixMarketError, canonical_csr, read_mtx

__all__ = ["read_matrix", "read_dense", "MATRIX_SUFFIXES"]

#: file name endings :func:`read_matrix` reads (case-insensitive)
MATRIX_SUFFIXES = (".mtx", ".mtx.gz", ".mat", ".rb", ".rua", ".rsa", ".hb", ".npz")


def _canonical(A, path):
    if not sp.issparse(A):
        A = np.asarray(A)
        if A.ndim != 2 or A.dtype.kind not in "biufc":
            raise MatrixMarketError(f"{path}: holds a {A.ndim}-D {A.dtype} array, not a matrix")
    return canonical_csr(A, np.complex128 if A.dtype.kind == "c" else np.float64, path)


def _mat_variable(path, field, ndims, what):
    """From a MATLAB file: a SuiteSparse ``Problem``'s ``field`` (``"A"``, ``"b"``), else the
    file's one numeric variable of ``ndims`` dimensions (sparse counts as 2-D); ``what``
    names it in the error."""
    try:
        data = scipy.io.loadmat(path, squeeze_me=True, struct_as_record=False)
    except NotImplementedError as exc:           # MATLAB v7.3 is HDF5
        raise MatrixMarketError(f"{path}: {exc} (a MATLAB v7.3 file: save it with "
                                "save(..., '-v7') or as Matrix Market)") from None
    except (scipy.io.matlab.MatReadError, ValueError, TypeError, OSError, IndexError,
            KeyError, EOFError, zlib.error) as exc:   # (junk bytes: IndexError, ...)
        raise MatrixMarketError(f"{path}: SciPy's loadmat could not read it: "
                                f"{type(exc).__name__}: {exc}") from None
    variables = {k: v for k, v in data.items() if not k.startswith("__")}
    problem = variables.get("Problem")
    if problem is not None and hasattr(problem, field):
        return getattr(problem, field)           # SuiteSparse's layout
    found = [v for v in variables.values()
             if (sp.issparse(v) and 2 in ndims) or (isinstance(v, np.ndarray)
                                                   and v.ndim in ndims
                                                   and v.dtype.kind in "biufc")]
    if len(found) != 1:
        raise MatrixMarketError(
            f"{path}: expected a SuiteSparse struct 'Problem' with a field '{field}' or exactly "
            f"one {what} variable, found {sorted(variables) or 'no variables'}")
    return found[0]


def _read_hb(path):
    with open(path, "rb") as fh:
        lines = fh.read().decode("ascii", errors="replace").splitlines(keepends=True)
    if len(lines) < 4:
        raise MatrixMarketError(f"{path}: too short for a Harwell-Boeing file (4 header lines)")
    kind = lines[2][:3].upper()
    if len(kind) < 3 or kind[0] not in "RPIC" or kind[2] not in "AE":
        raise MatrixMarketError(f"{path}, line 3: matrix type {kind!r} is not a Harwell-Boeing "
                                "type such as RUA, RSA or PSA")
    if kind[0] == "C" or kind[2] == "E":
        what = "complex" if kind[0] == "C" else "elemental"
        raise MatrixMarketError(f"{path}: type {kind} ({what}) is not read (SciPy's hb_read "
                                "reads assembled real matrices); use the Matrix Market (.mtx) "
                                "file of the matrix")
    storage = kind[1]
    if storage not in "USZR":
        raise MatrixMarketError(f"{path}, line 3: storage {storage!r} of type {kind!r} is "
                                "not U, S, Z or R")
    # SciPy reads unsymmetric storage only: read the stored triangle as such, expand it below
    lines[2] = lines[2][:1] + "U" + lines[2][2:]
    try:
        A = scipy.io.hb_read(io.StringIO("".join(lines)))
    except (ValueError, IndexError, TypeError) as exc:
        raise MatrixMarketError(f"{path}: SciPy's hb_read could not read it: {exc}") from None
    A = sp.csr_matrix(A)
    if storage == "S":
        A = A + sp.triu(A, 1).T + sp.tril(A, -1).T
    elif storage == "Z":
        A = A - A.T
    return _canonical(A, path)


def read_matrix(path):
    """Read a sparse matrix from a Matrix Market, MATLAB, Harwell-Boeing or ``.npz`` file, or
    from an extracted SuiteSparse tarball's folder (see the module docstring).

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    scipy.sparse.csr_matrix
        Canonical; complex128 for complex data, float64 otherwise.

    Raises
    ------
    FileNotFoundError
        No such file or folder, or a folder without ``<name>.mtx[.gz]``.
    MatrixMarketError
        The file cannot be read as its format (the message says why), or its name ends in
        none of :data:`MATRIX_SUFFIXES` and it is no Matrix Market file either.

    Examples
    --------
    >>> import tempfile, os, scipy.sparse as sp
    >>> from mpsolve.matrices import read_matrix, poisson2d
    >>> f = os.path.join(tempfile.mkdtemp(), "p.npz")
    >>> sp.save_npz(f, poisson2d(3))
    >>> read_matrix(f).shape
    (9, 9)
    """
    p = os.fspath(path)
    if os.path.isdir(p):
        name = os.path.basename(os.path.abspath(p))     # ("." is the folder's own name)
        for ext in (".mtx", ".mtx.gz"):
            f = os.path.join(p, name + ext)
            if os.path.isfile(f):
                return read_mtx(f)
        raise FileNotFoundError(f"{p} is a folder without {name}.mtx or {name}.mtx.gz (the "
                                "layout of an extracted SuiteSparse tarball): pass the file")
    if not os.path.isfile(p):
        raise FileNotFoundError(f"no such file: {p!r}")
    low = p.lower()
    if low.endswith(".mat"):
        return _canonical(_mat_variable(p, "A", (2,), "matrix"), p)
    if low.endswith((".rb", ".rua", ".rsa", ".hb")):
        return _read_hb(p)
    if low.endswith(".npz"):
        try:
            return _canonical(sp.load_npz(p), p)
        except (ValueError, OSError, KeyError, EOFError, zlib.error, zipfile.BadZipFile) as exc:
            raise MatrixMarketError(f"{p}: not a scipy.sparse.save_npz file: {exc}") from None
    try:
        return read_mtx(p)
    except MatrixMarketError as exc:
        if low.endswith((".mtx", ".mtx.gz")):
            raise
        raise MatrixMarketError(f"{exc} -- the matrix files read are Matrix Market, MATLAB, "
                                f"Harwell-Boeing and .npz ({', '.join(MATRIX_SUFFIXES)})") from None


def read_dense(path):
    """A right-hand side (or several) as a dense array: ``.npy`` (``numpy.save``; no
    pickles), ``.mat`` (a SuiteSparse ``Problem``'s ``b``, or the file's one numeric
    variable), else Matrix Market (:func:`~mpsolve.matrices.read_mtx`, array or coordinate);
    ``.npz`` (a sparse matrix's format) is refused.

    Returns
    -------
    numpy.ndarray
        1-D or 2-D, as stored; float64 or complex128 for Matrix Market files.
    """
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"no such file: {p!r}")
    low = p.lower()
    if low.endswith(".npz"):
        raise MatrixMarketError(f"{p}: a .npz file (scipy.sparse.save_npz: a sparse matrix) "
                                "is no right-hand side: save b with numpy.save (.npy), or as "
                                ".mat or Matrix Market")
    if low.endswith(".npy"):
        try:
            return np.load(p, allow_pickle=False)
        except ValueError as exc:
            raise MatrixMarketError(f"{p}: not a numeric .npy file: {exc}") from None
    if low.endswith(".mat"):
        b = _mat_variable(p, "b", (1, 2), "numeric")
        return b.toarray() if sp.issparse(b) else np.asarray(b)
    b = read_mtx(p)
    return b.toarray() if sp.issparse(b) else np.asarray(b)
