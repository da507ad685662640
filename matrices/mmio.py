"""Matrix Market input and output (``.mtx`` and ``.mtx.gz``).

SciPy's :func:`scipy.io.mmread` / :func:`scipy.io.mmwrite` do the work. This module adds:

* a result in the form the rest of mpsolve expects (canonical CSR, float64 for the real,
  integer and pattern fields, complex128 for the ``complex`` field; symmetric,
  skew-symmetric and hermitian storage expanded);
* a cheap header check before the read (banner, field, size line), so that a malformed header
  is refused before any data is parsed;
* on any failure of the read, a second, streaming pass over the file that finds the first
  offending line and raises :class:`MatrixMarketError` naming the file, the line number and what
  was expected there. The slow pass runs only on failure, so good files are read at SciPy's
  speed.

Line numbers are 1-based and count every line of the (decompressed) text, the banner included.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import zlib

import numpy as np
import scipy.io
import scipy.sparse as sp

__all__ = ["MatrixMarketError", "read_mtx", "read_vector", "write_mtx", "mtx_header"]

_FORMATS = ("coordinate", "array")
_FIELDS = ("real", "double", "integer", "pattern", "complex")
_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")


class MatrixMarketError(ValueError):
    """A Matrix Market file is malformed or holds something mpsolve cannot use.

    The message names the file and, where the problem sits on one line, that line number
    (1-based, counting the banner as line 1) and what was expected there.
    """


#: What a damaged ``.gz`` file raises while it is read: a truncated one ``EOFError``, a
#: corrupt one ``zlib.error``, one that is no gzip file at all ``gzip.BadGzipFile``.
GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


@contextlib.contextmanager
def gzip_checked(path):
    """Turn a damaged ``.gz`` file's errors (:data:`GZIP_ERRORS`) into a
    :class:`MatrixMarketError` that names the file."""
    try:
        yield
    except GZIP_ERRORS as exc:
        raise MatrixMarketError(f"{os.fspath(path)}: not a readable gzip file, truncated or "
                                f"damaged ({type(exc).__name__}: {exc})") from None


def _gzipped(path) -> bool:
    """Whether the file at ``path`` is gzip data (its magic bytes, whatever its name:
    ``NOS4.MTX.GZ`` is one, as is a ``.gz`` file renamed), or is named ``*.gz`` (any
    case: a damaged one is then reported as a damaged gzip file)."""
    try:
        with open(path, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                return True
    except OSError:
        pass
    return path.lower().endswith(".gz")


def _open_text(path):
    """Open ``path`` for reading text, decompressing gzip data."""
    path = os.fspath(path)
    if _gzipped(path):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="latin-1")
    return open(path, encoding="latin-1")


def _fail(path, lineno, what):
    where = f"{path}, line {lineno}" if lineno is not None else f"{path}"
    return MatrixMarketError(f"{where}: {what}")


def mtx_header(path):
    """Read and check the header of a Matrix Market file (banner, comments, size line).

    Only the first lines are read, so this is cheap for any file size.

    Parameters
    ----------
    path : str or path-like
        A ``.mtx`` or ``.mtx.gz`` file.

    Returns
    -------
    dict
        ``format`` ('coordinate' or 'array'), ``field``, ``symmetry``, ``rows``, ``cols``,
        ``entries`` (stored entries: the count on the size line for coordinate files, the
        number of values expected for array files) and ``size_line`` (its line number).

    Raises
    ------
    MatrixMarketError
        Bad banner, unknown format/field/symmetry, or a bad size line; the message gives the
        line number.

    Examples
    --------
    >>> import tempfile, os
    >>> from mpsolve.matrices import poisson2d, write_mtx, mtx_header
    >>> d = tempfile.mkdtemp(); f = os.path.join(d, "p.mtx")
    >>> write_mtx(f, poisson2d(3))
    >>> h = mtx_header(f)
    >>> h["rows"], h["symmetry"], h["entries"]
    (9, 'symmetric', 21)
    """
    with gzip_checked(path), _open_text(path) as fh:
        return _parse_header(fh, path)[0]


def _parse_header(fh, path):
    """Parse the header from an open text stream; returns (header dict, last line number)."""
    first = fh.readline()
    if not first:
        raise _fail(path, 1, "the file is empty; expected the banner "
                    "'%%MatrixMarket matrix <coordinate|array> <field> <symmetry>'")
    if any(not (c.isprintable() or c.isspace()) for c in first[:80]):
        raise _fail(path, 1, "binary data, not a Matrix Market text file (its first line "
                    "should be '%%MatrixMarket matrix <coordinate|array> <field> <symmetry>')")
    tokens = first.split()
    if len(tokens) != 5 or tokens[0].lower() != "%%matrixmarket" or tokens[1].lower() != "matrix":
        raise _fail(path, 1, f"bad banner {first.strip()[:80]!r}; expected "
                    "'%%MatrixMarket matrix <coordinate|array> <field> <symmetry>'")
    fmt, field, symmetry = (t.lower() for t in tokens[2:])
    if fmt not in _FORMATS:
        raise _fail(path, 1, f"unknown format {fmt!r} in the banner; expected one of {_FORMATS}")
    if field not in _FIELDS:
        raise _fail(path, 1, f"unknown field {field!r} in the banner; expected one of {_FIELDS}")
    if symmetry not in _SYMMETRIES:
        raise _fail(path, 1, f"unknown symmetry {symmetry!r} in the banner; "
                    f"expected one of {_SYMMETRIES}")
    if symmetry == "hermitian" and field != "complex":
        raise _fail(path, 1, f"symmetry 'hermitian' needs the field 'complex', the banner says "
                    f"{field!r}; write 'symmetric' for a real matrix")
    if fmt == "array" and field == "pattern":
        raise _fail(path, 1, "field 'pattern' is not allowed with format 'array'")
    lineno = 1
    while True:
        line = fh.readline()
        lineno += 1
        if not line:
            raise _fail(path, lineno, "the file ends before the size line; expected "
                        + ("'rows cols entries'" if fmt == "coordinate" else "'rows cols'"))
        s = line.strip()
        if s and not s.startswith("%"):
            break
    parts = s.split()
    want = 3 if fmt == "coordinate" else 2
    expect = "'rows cols entries'" if fmt == "coordinate" else "'rows cols'"
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        raise _fail(path, lineno, f"bad size line {s[:80]!r}; expected {want} non-negative "
                    f"integers {expect}") from None
    if len(nums) != want or min(nums) < 0:
        raise _fail(path, lineno, f"bad size line {s[:80]!r}; expected {want} non-negative "
                    f"integers {expect}")
    rows, cols = nums[0], nums[1]
    if symmetry != "general" and rows != cols:
        raise _fail(path, lineno, f"a {symmetry} matrix must be square, the size line says "
                    f"{rows} x {cols}")
    if fmt == "coordinate":
        entries = nums[2]
        if entries and not rows * cols:      # (more than rows x cols: duplicates, summed)
            raise _fail(path, lineno, f"{entries} entries cannot fit a {rows} x {cols} matrix")
    elif symmetry in ("symmetric", "hermitian"):
        entries = rows * (rows + 1) // 2
    elif symmetry == "skew-symmetric":
        entries = rows * (rows - 1) // 2
    else:
        entries = rows * cols
    header = dict(format=fmt, field=field, symmetry=symmetry, rows=rows, cols=cols,
                  entries=entries, size_line=lineno)
    return header, lineno


def _fortran_float(text):
    """``float`` that also reads Fortran's ``D`` exponent (``1.0D+00``), as SciPy does."""
    return float(text.replace("D", "e").replace("d", "e"))


def _locate_error(path):
    """Streaming pass over a file SciPy refused: raise at the first bad line, or return None."""
    with _open_text(path) as fh:
        h, lineno = _parse_header(fh, path)
        fmt, field, rows, cols, entries = (h["format"], h["field"], h["rows"], h["cols"],
                                           h["entries"])
        nval = {"pattern": 0, "complex": 2}.get(field, 1)
        if fmt == "coordinate":
            layout = {0: "'row col'", 1: "'row col value'", 2: "'row col real imag'"}[nval]
        else:
            layout = "'value'" if nval == 1 else "'real imag'"
        conv = int if field == "integer" else _fortran_float
        seen = 0
        for line in fh:
            lineno += 1
            s = line.strip()
            if not s or s.startswith("%"):
                continue
            if seen == entries:
                raise _fail(path, lineno, f"too many entries: the size line (line "
                            f"{h['size_line']}) announces {entries}, this is entry {seen + 1}; "
                            "fix the count on the size line or remove the extra lines")
            parts = s.split()
            nidx = 2 if fmt == "coordinate" else 0
            if len(parts) != nidx + nval:
                raise _fail(path, lineno, f"expected {nidx + nval} fields {layout}, found "
                            f"{len(parts)} in {s[:80]!r}")
            if nidx:
                try:
                    i, j = int(parts[0]), int(parts[1])
                except ValueError:
                    raise _fail(path, lineno, f"expected integer indices {layout}, found "
                                f"{s[:80]!r}") from None
                if not (1 <= i <= rows):
                    raise _fail(path, lineno, f"row index {i} out of range; expected "
                                f"1 <= row <= {rows}")
                if not (1 <= j <= cols):
                    raise _fail(path, lineno, f"column index {j} out of range; expected "
                                f"1 <= col <= {cols}")
            for part in parts[nidx:]:
                try:
                    conv(part)
                except ValueError:
                    kind = "an integer" if field == "integer" else "a real number"
                    raise _fail(path, lineno, f"non-numeric value {part[:40]!r}; "
                                f"expected {kind}") from None
            seen += 1
        if seen < entries:
            raise _fail(path, lineno + 1, f"too few entries: the file ends after {seen} "
                        f"entries, the size line (line {h['size_line']}) announces {entries}")
    return None


_ALLOWED = {   # (d, D: Fortran's double-precision exponent, 1.0D+00, as SciPy reads it)
    "real": b"0123456789+-.eEdDnaifNAIFtyTY \t\r\n\v\f",
    "double": b"0123456789+-.eEdDnaifNAIFtyTY \t\r\n\v\f",
    "integer": b"0123456789+- \t\r\n\v\f",
    "pattern": b"0123456789+ \t\r\n\v\f",
}
_ALLOWED["complex"] = _ALLOWED["real"]


_FORTRAN_EXPONENT = bytes.maketrans(b"dD", b"ee")


def _read_bytes(path):
    if _gzipped(path):
        with gzip.open(path, "rb") as fh:
            return fh.read()
    with open(path, "rb") as fh:
        return fh.read()


def _count_tokens(body, chunk=1 << 24):
    """Whitespace-separated fields in ``body`` (bytes), counted in chunks (no list of
    them: a large file's tokens as bytes objects take ten times its size)."""
    count, prev_ws = 0, True
    for k in range(0, len(body), chunk):
        a = np.frombuffer(body, np.uint8, count=min(chunk, len(body) - k), offset=k)
        ws = (a == 32) | ((a >= 9) & (a <= 13))
        count += int(np.count_nonzero(~ws[1:] & ws[:-1])) + (not ws[0] and prev_ws)
        prev_ws = bool(ws[-1])
    return count


def _data_lines(body):
    """``body`` without its comment lines (a ``%`` first on a line)."""
    if b"%" not in body:
        return body
    return b"\n".join(ln for ln in body.split(b"\n") if not ln.lstrip().startswith(b"%"))


def _general_coo(raw, start, header, path):
    """A symmetric, skew-symmetric or hermitian coordinate file read as the triangle it
    stores (SciPy with the banner's storage word made 'general'), checked and expanded:
    one triangle only (both listed: SciPy's expansion doubled the values of each pair),
    a zero diagonal for skew-symmetric, a real one for hermitian."""
    symmetry = header["symmetry"]
    first = raw.find(b"\n")
    words = raw[:first].split()
    banner = b" ".join([b"%%MatrixMarket"] + [w.lower() for w in words[1:4]] + [b"general"])
    T = scipy.io.mmread(io.BytesIO(banner + raw[first:])).tocoo()
    r, c, v = T.row, T.col, T.data
    off = r != c
    if np.any(r[off] > c[off]) and np.any(r[off] < c[off]):
        k = int(np.flatnonzero(off & (r < c))[0])
        raise MatrixMarketError(
            f"{path}: a {symmetry} file stores one triangle, but it lists entries on both "
            f"sides of the diagonal (e.g. ({r[k] + 1}, {c[k] + 1})): the reader would count "
            "each pair twice; declare it 'general', or keep one triangle")
    d = v[~off]
    if symmetry == "skew-symmetric" and np.any(d):
        k = int(np.flatnonzero(~off)[np.flatnonzero(d)[0]])
        raise MatrixMarketError(f"{path}: a skew-symmetric matrix has a zero diagonal, "
                                f"but entry ({r[k] + 1}, {r[k] + 1}) is {v[k].item()!r}: "
                                "declare it 'general', or drop the diagonal entries")
    if symmetry == "hermitian" and np.any(np.imag(d)):
        k = int(np.flatnonzero(~off)[np.flatnonzero(np.imag(d))[0]])
        raise MatrixMarketError(f"{path}: a hermitian matrix has a real diagonal, but entry "
                                f"({r[k] + 1}, {r[k] + 1}) is {v[k].item()!r}")
    mirror = {"symmetric": v[off], "skew-symmetric": -v[off],
              "hermitian": np.conj(v[off])}[symmetry]
    return sp.coo_matrix((np.concatenate([v, mirror]),
                          (np.concatenate([r, c[off]]), np.concatenate([c, r[off]]))),
                         shape=T.shape)


def _mmread(path):
    """mmread with header and character checks first, errors turned into MatrixMarketError.

    SciPy's reader is lenient: it ignores trailing garbage after a number ('1.0abc' reads as
    1.0, '1,5' as 1.0). So before handing the bytes to SciPy, one C-speed ``bytes.translate``
    pass checks that the data section holds only characters a number of the declared field can
    contain; if not, the streaming validator finds the line. Malformed numbers built from
    legal characters only (e.g. '1.5.2') are still read the lenient way.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Matrix Market file not found: {path!r}")
    header = mtx_header(path)
    with gzip_checked(path):
        raw = _read_bytes(path)
    start = 0
    for _ in range(header["size_line"]):
        start = raw.find(b"\n", start) + 1
        if start == 0:
            start = len(raw)
            break
    if raw[start:].translate(None, _ALLOWED[header["field"]]):
        _locate_error(path)  # raises at the first bad line (comment lines pass)
    if header["format"] == "coordinate" and \
            _first_entry_fields(raw, start) not in (None, _fields(header)):
        # SciPy reads 'i j re im' in a file declared real as 'i j re' without a word: a
        # complex file mislabelled real would lose its imaginary parts (checked on the
        # first entry, which costs nothing; the streaming validator names the line)
        _locate_error(path)
    if header["format"] == "coordinate":
        # every entry line's field count (SciPy reads the first fields of a line and drops
        # the rest: 'i j v extra' on a later line lost 'extra' without a word), and comment
        # lines among the entries (SciPy refuses them as 'Invalid integer value'): counted
        body = _data_lines(raw[start:])
        want = header["entries"] * _fields(header)
        if _count_tokens(body) != want:
            _locate_error(path)          # names the line
            raise _fail(path, None, f"the entries hold {_count_tokens(body)} fields, the size "
                        f"line's {header['entries']} entries of {_fields(header)} make {want}")
        raw = raw[:start] + body
    elif 0 in (header["rows"], header["cols"]):
        # (SciPy's reader dies of a floating-point exception on a 0-row array file)
        return np.zeros((header["rows"], header["cols"]), _dtype(header)), header
    if header["field"] in ("real", "double", "complex") and (
            b"d" in raw[start:] or b"D" in raw[start:]):
        # Fortran's exponent (1.0D+00): SciPy's reader would stop at the D (2.5d-1 -> 2.5)
        raw = raw[:start] + raw[start:].translate(_FORTRAN_EXPONENT)
    try:
        if header["format"] == "coordinate" and header["symmetry"] != "general":
            return _general_coo(raw, start, header, path), header
        data = scipy.io.mmread(io.BytesIO(raw))
    except MatrixMarketError:
        raise
    except Exception as exc:  # SciPy raises ValueError / RuntimeError / OverflowError
        _locate_error(path)  # raises with the line number when it finds the fault
        raise MatrixMarketError(f"{path}: SciPy could not read the file: {exc}") from exc
    if header["symmetry"] == "hermitian":
        d = np.diagonal(data)
        if np.any(np.imag(d)):
            i = int(np.flatnonzero(np.imag(d))[0])
            raise MatrixMarketError(f"{path}: a hermitian matrix has a real diagonal, but "
                                    f"entry ({i + 1}, {i + 1}) is {d[i].item()!r}")
    if header["symmetry"] == "skew-symmetric":
        d = data.diagonal() if sp.issparse(data) else np.diagonal(data)
        if np.any(d):
            i = int(np.flatnonzero(d)[0])
            raise MatrixMarketError(f"{path}: a skew-symmetric matrix has a zero diagonal, "
                                    f"but entry ({i + 1}, {i + 1}) is {d[i].item()!r}: declare "
                                    "it 'general', or drop the diagonal entries")
    return data, header


def _fields(header):
    """Fields on each entry line: two indices (coordinate format) and the values."""
    nval = {"pattern": 0, "complex": 2}.get(header["field"], 1)
    return nval + (2 if header["format"] == "coordinate" else 0)


def _first_entry_fields(raw, start):
    """The number of fields on the first entry line of ``raw[start:]`` (None: no entry)."""
    for line in raw[start:start + 4096].splitlines():
        s = line.strip()
        if s and not s.startswith(b"%"):
            return len(s.split())
    return None


def _dtype(header):
    return np.complex128 if header["field"] == "complex" else np.float64


def read_mtx(path):
    """Read a sparse matrix from a Matrix Market file.

    Parameters
    ----------
    path : str or path-like
        ``.mtx`` or gzip-compressed ``.mtx.gz`` file, coordinate or array format; real,
        integer, pattern or complex field; general, symmetric, skew-symmetric or (complex
        field only) hermitian storage.

    Returns
    -------
    scipy.sparse.csr_matrix
        Canonical (sorted indices, duplicates summed); complex128 for the complex field,
        float64 otherwise. Symmetric, skew-symmetric and hermitian storage is expanded to the
        full matrix (hermitian: ``A[j, i] = conj(A[i, j])``); pattern entries become 1.0.
        Explicit zeros stored in the file are kept.

    Raises
    ------
    MatrixMarketError
        Malformed file (the message names the file and the line).
    FileNotFoundError
        ``path`` does not exist.

    Examples
    --------
    >>> import tempfile, os
    >>> from mpsolve.matrices import read_mtx, write_mtx, poisson2d
    >>> f = os.path.join(tempfile.mkdtemp(), "p.mtx.gz")
    >>> write_mtx(f, poisson2d(4))
    >>> A = read_mtx(f)
    >>> A.shape, A.nnz, A.dtype
    ((16, 16), 64, dtype('float64'))
    """
    data, header = _mmread(path)
    return canonical_csr(data, _dtype(header), path)


def canonical_csr(data, dtype, path=None):
    """``data`` (sparse or dense) as a canonical CSR matrix of ``dtype``: duplicates summed,
    indices sorted, explicit zeros kept (what every matrix reader returns).  A size that
    does not fit in memory (a size line of 1e11 rows: CSR's row pointers alone) is a
    :class:`MatrixMarketError` naming the file (``path``), not NumPy's allocation error."""
    try:
        A = sp.csr_matrix(data, dtype=dtype)
        A.sum_duplicates()
        A.sort_indices()
    except MemoryError:
        m, n = np.shape(data)
        raise MatrixMarketError(f"{path or 'the matrix'}: a {m} x {n} matrix does not fit in "
                                "memory (its CSR row pointers alone take "
                                f"{8 * (m + 1) / 2**30:.3g} GiB): check its size line"
                                ) from None
    return A


def read_vector(path):
    """Read a vector (e.g. a right-hand side) from a Matrix Market file.

    Parameters
    ----------
    path : str or path-like
        ``.mtx`` or ``.mtx.gz`` holding an ``n x 1`` or ``1 x n`` matrix in array or coordinate
        format (missing coordinate entries are zeros).

    Returns
    -------
    numpy.ndarray
        1-D array of length ``n``: complex128 for the complex field, float64 otherwise.

    Raises
    ------
    MatrixMarketError
        Malformed file, or a matrix with more than one row and more than one column.

    Examples
    --------
    >>> import tempfile, os, numpy as np
    >>> from mpsolve.matrices import read_vector, write_mtx
    >>> f = os.path.join(tempfile.mkdtemp(), "b.mtx")
    >>> write_mtx(f, np.array([1.0, 2.5, -3.0]))
    >>> read_vector(f)
    array([ 1. ,  2.5, -3. ])
    """
    data, h = _mmread(path)
    if h["rows"] != 1 and h["cols"] != 1:
        raise MatrixMarketError(f"{os.fspath(path)}: read_vector expects an n x 1 or 1 x n "
                                f"matrix, the file holds {h['rows']} x {h['cols']}; use "
                                "read_mtx for matrices")
    if sp.issparse(data):
        data = data.toarray()
    return np.asarray(data, dtype=_dtype(h)).ravel()


def _check_symmetry(data, symmetry):
    """Refuse a forced ``symmetry`` that ``data`` (COO or dense) does not have exactly: a
    symmetric file stores one triangle, so the other would be lost without a word."""
    A = sp.csr_matrix(data)
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"write_mtx: symmetry={symmetry!r} needs a square matrix, argument "
                         f"A is {A.shape[0]}x{A.shape[1]}; use symmetry='general'")
    T = {"symmetric": A.T, "skew-symmetric": -A.T, "hermitian": A.conj().T}[symmetry]
    if (A != T).nnz:
        raise ValueError(f"write_mtx: argument A is not exactly {symmetry} (A differs from "
                         f"its {'conjugate ' if symmetry == 'hermitian' else ''}transpose"
                         f"{', negated' if symmetry == 'skew-symmetric' else ''}), and a "
                         f"{symmetry} file stores one triangle: the other would be lost; use "
                         "symmetry='general' (or 'AUTO')")


def _write_dtype(dt, data):
    """The dtype a value of ``dt`` is written in: float16 and long double as float64
    (SciPy wrote float16 as 'integer', truncating, and long double with 6 digits), complex
    long double as complex128, unsigned 32/64-bit integers as int64 where they fit
    ('unsigned-integer' is no Matrix Market field) -- else float64 -- and bool as int."""
    dt = np.dtype(dt)
    if dt.kind == "f" and dt != np.float32:
        return np.dtype(np.float64)
    if dt.kind == "c" and dt != np.complex64:
        return np.dtype(np.complex128)
    if dt.kind == "u" and dt.itemsize >= 4:
        values = data.data if sp.issparse(data) else data
        fits = not values.size or int(values.max()) <= np.iinfo(np.int64).max
        return np.dtype(np.int64 if fits else np.float64)
    if dt.kind == "b":
        return np.dtype(np.int64)
    return dt


def write_mtx(path, A, comment="", *, symmetry="AUTO", precision=None, compresslevel=6):
    """Write a sparse/dense matrix or a vector to a Matrix Market file.

    Parameters
    ----------
    path : str or path-like
        Target file; gzip-compressed when the name ends in ``.gz``.
    A : sparse matrix/array, 2-D ndarray or 1-D ndarray
        Sparse input is written in coordinate format; dense input (and a 1-D vector, written
        as an ``n x 1`` column) in array format. Complex data is written with the field
        ``complex``.
    comment : str, optional
        Comment text written after the banner (each line prefixed with ``%``).
    symmetry : {'AUTO', 'general', 'symmetric', 'skew-symmetric', 'hermitian'}, optional
        Storage symmetry; ``'AUTO'`` (default) lets SciPy detect symmetry (for complex data
        also Hermitian symmetry, ``A == A^H``) and store half. ``'hermitian'`` needs complex
        data; a forced ``'symmetric'``, ``'skew-symmetric'`` or ``'hermitian'`` needs ``A``
        to be exactly so (``ValueError`` otherwise: the triangle not stored would be lost).
    precision : int, optional
        Significant digits; default: enough to round-trip float64 exactly.
    compresslevel : int, optional
        gzip level for ``.gz`` names (default 6: about 10x faster than 9, files ~5% larger).

    Examples
    --------
    >>> import tempfile, os
    >>> from mpsolve.matrices import write_mtx, read_mtx, laplacian_1d
    >>> f = os.path.join(tempfile.mkdtemp(), "t.mtx")
    >>> write_mtx(f, laplacian_1d(5), comment="1-D Laplacian")
    >>> (read_mtx(f) != laplacian_1d(5)).nnz
    0
    """
    if sp.issparse(A):
        data = sp.coo_matrix(A)
    else:
        data = np.asarray(A)
        if data.ndim == 1:
            data = data.reshape(-1, 1)
        elif data.ndim != 2:
            raise ValueError(f"write_mtx: argument A must be 1-D or 2-D, got {data.ndim}-D")
    data = data.astype(_write_dtype(data.dtype, data), copy=False)
    if symmetry == "hermitian" and not np.iscomplexobj(data):
        raise ValueError("write_mtx: symmetry='hermitian' needs complex data in argument A; "
                         "use symmetry='symmetric' for a real matrix")
    if symmetry in ("symmetric", "skew-symmetric", "hermitian"):
        _check_symmetry(data, symmetry)
    if comment and ("\r" in comment or "\f" in comment or "\v" in comment):
        raise ValueError("write_mtx: comment may hold newlines but no carriage returns or "
                         "form feeds (a reader splits lines there)")
    if not (isinstance(compresslevel, (int, np.integer)) and 0 <= compresslevel <= 9):
        raise ValueError(f"write_mtx: compresslevel={compresslevel!r}: use 0..9 (gzip's)")
    path = os.fspath(path)
    kwargs = dict(comment=comment or None, symmetry=symmetry, precision=precision)
    if path.lower().endswith(".gz"):
        fh = gzip.open(path, "wb", compresslevel=compresslevel)
    else:
        fh = open(path, "wb")
    with fh:
        scipy.io.mmwrite(fh, data, **kwargs)
