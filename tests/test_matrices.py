"""Tests for mpsolve.matrices: Matrix Market I/O, generators, analysis (and their doctests)."""

import doctest
import gzip
import importlib
import math
import os
import re

import numpy as np
import pytest
import scipy.io
import scipy.linalg
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from mpsolve.matrices import (
    GENERATORS,
    coupled_convdiff2d,
    jump3d,
    MatrixMarketError,
    anisotropic2d,
    anisotropic3d,
    convection_diffusion2d,
    convection_diffusion3d,
    detect_block_size,
    elasticity3d,
    generate,
    helmholtz2d,
    helmholtz3d,
    laplacian_1d,
    magnetic2d,
    matrix_info,
    mtx_header,
    poisson2d,
    poisson3d,
    read_mtx,
    read_vector,
    write_mtx,
)

EPS = np.finfo(np.float64).eps


# --------------------------------------------------------------------------- doctests

@pytest.mark.parametrize("module", ["mpsolve.matrices", "mpsolve.matrices.mmio",
                                    "mpsolve.matrices.generators", "mpsolve.matrices.analysis",
                                    "mpsolve.matrices.collection", "mpsolve.matrices.formats"])
def test_doctests(module):
    mod = importlib.import_module(module)
    res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert res.attempted > 0
    assert res.failed == 0


# --------------------------------------------------------------------------- other files

def _hb_file(path, A, kind):
    """A Harwell-Boeing file of ``A`` (stored as it is) with matrix type ``kind``."""
    scipy.io.hb_write(str(path), sp.csc_matrix(A))
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = kind + lines[2][3:]
    path.write_text("".join(lines))


def test_read_matrix_reads_every_format_to_the_same_canonical_csr(tmp_path):
    from mpsolve.matrices import read_matrix

    A = _random_sparse(30, 30, 0.2, seed=3) + 4 * sp.eye(30)
    S = _random_sparse(30, 30, 0.2, seed=4, symmetric=True)
    K = sp.triu(_random_sparse(30, 30, 0.2, seed=5), 1)
    K = (K - K.T).tocsr()                                   # skew-symmetric
    files = {}
    scipy.io.savemat(tmp_path / "ss.mat",                  # SuiteSparse's layout
                     {"Problem": {"A": sp.csc_matrix(A), "name": "ss", "kind": "test"}})
    files["ss.mat"] = A
    scipy.io.savemat(tmp_path / "one.mat", {"K": sp.csc_matrix(S), "note": "text"})
    files["one.mat"] = S
    scipy.io.savemat(tmp_path / "dense.mat", {"D": A.toarray()})
    files["dense.mat"] = A
    _hb_file(tmp_path / "a.rua", A, "RUA")
    files["a.rua"] = A
    _hb_file(tmp_path / "s.rsa", sp.tril(S), "RSA")          # the lower triangle, as stored
    files["s.rsa"] = S
    _hb_file(tmp_path / "k.RB", sp.tril(K), "RZA")
    files["k.RB"] = K
    sp.save_npz(tmp_path / "a.npz", sp.coo_matrix(A))
    files["a.npz"] = A
    (tmp_path / "ss").mkdir()                               # an extracted tarball
    write_mtx(tmp_path / "ss" / "ss.mtx.gz", A)
    write_mtx(tmp_path / "ss" / "ss_b.mtx", np.ones((30, 1)))
    files["ss"] = A
    for name, expected in files.items():
        B = read_matrix(tmp_path / name)
        assert sp.isspmatrix_csr(B) and B.has_canonical_format and B.dtype == np.float64, name
        assert abs(B - expected).max() <= 1e-14 * abs(expected).max(), name


def test_read_matrix_complex_mat_and_integer_data(tmp_path):
    from mpsolve.matrices import read_matrix

    C = sp.csr_matrix(np.array([[1 + 2j, 0], [3j, 4]]))
    scipy.io.savemat(tmp_path / "c.mat", {"Problem": {"A": sp.csc_matrix(C)}})
    B = read_matrix(tmp_path / "c.mat")
    assert B.dtype == np.complex128 and (B != C).nnz == 0
    scipy.io.savemat(tmp_path / "i.mat", {"M": np.array([[2, 1], [1, 2]], dtype=np.int16)})
    assert read_matrix(tmp_path / "i.mat").dtype == np.float64


def test_read_matrix_refuses_clearly(tmp_path):
    from mpsolve.matrices import MatrixMarketError, read_matrix

    scipy.io.savemat(tmp_path / "two.mat", {"A": np.eye(2), "B": np.eye(3)})
    with pytest.raises(MatrixMarketError, match=r"exactly one matrix variable.*'A', 'B'"):
        read_matrix(tmp_path / "two.mat")
    (tmp_path / "v73.mat").write_bytes(                      # a MATLAB v7.3 (HDF5) header
        b"MATLAB 7.3 MAT-file".ljust(116) + bytes(8) + b"\x00\x02IM" + bytes(512))
    with pytest.raises(MatrixMarketError, match=r"v73.mat.*v7.3 file: save it with"):
        read_matrix(tmp_path / "v73.mat")
    (tmp_path / "junk.mat").write_bytes(bytes(300))
    with pytest.raises(MatrixMarketError, match="junk.mat: SciPy's loadmat could not"):
        read_matrix(tmp_path / "junk.mat")
    _hb_file(tmp_path / "c.rb", sp.eye(3), "CUA")
    with pytest.raises(MatrixMarketError, match="CUA.*complex.*Matrix Market"):
        read_matrix(tmp_path / "c.rb")
    (tmp_path / "x.txt").write_text("1 2 3\n")
    with pytest.raises(MatrixMarketError, match=r"bad banner.*MATLAB, Harwell-Boeing and .npz"):
        read_matrix(tmp_path / "x.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="folder without empty.mtx"):
        read_matrix(tmp_path / "empty")
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path / "empty")                # "." is named by the folder's name
        with pytest.raises(FileNotFoundError, match="folder without empty.mtx"):
            read_matrix(".")
    finally:
        os.chdir(cwd)
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_matrix(tmp_path / "none.mat")


# --------------------------------------------------------------------------- Matrix Market I/O

def _random_sparse(n, m, density, seed, symmetric=False):
    rng = np.random.default_rng(seed)
    A = sp.random(n, m, density=density, format="csr", random_state=rng,
                  data_rvs=lambda k: rng.standard_normal(k) * 10.0 ** rng.integers(-20, 20, k))
    if symmetric:
        A = (A + A.T).tocsr()
    return A


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
@pytest.mark.parametrize("symmetric", [False, True])
def test_roundtrip_matrix(tmp_path, suffix, symmetric):
    A = _random_sparse(40, 40, 0.1, 1, symmetric)
    f = tmp_path / ("a" + suffix)
    write_mtx(f, A, comment="round trip\nsecond line")
    if suffix.endswith(".gz"):
        with gzip.open(f, "rb") as fh:   # really compressed
            assert fh.read(14) == b"%%MatrixMarket"
    h = mtx_header(f)
    assert h["symmetry"] == ("symmetric" if symmetric else "general")
    B = read_mtx(f)
    assert isinstance(B, sp.csr_matrix) and B.dtype == np.float64
    assert B.has_canonical_format
    assert B.shape == A.shape
    assert (B != A).nnz == 0          # bit-exact values, symmetric storage expanded


def test_roundtrip_rectangular_and_general_forced(tmp_path):
    A = _random_sparse(7, 13, 0.3, 2)
    write_mtx(tmp_path / "r.mtx", A)
    assert (read_mtx(tmp_path / "r.mtx") != A).nnz == 0
    S = poisson2d(4)
    write_mtx(tmp_path / "g.mtx", S, symmetry="general")
    assert mtx_header(tmp_path / "g.mtx")["entries"] == S.nnz
    assert (read_mtx(tmp_path / "g.mtx") != S).nnz == 0


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 12), m=st.integers(1, 12), seed=st.integers(0, 2**31),
       gz=st.booleans())
def test_roundtrip_property(tmp_path_factory, n, m, seed, gz):
    A = _random_sparse(n, m, 0.4, seed)
    f = tmp_path_factory.mktemp("rt") / ("p.mtx.gz" if gz else "p.mtx")
    write_mtx(f, A)
    B = read_mtx(f)
    assert B.shape == A.shape and (B != A).nnz == 0


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
def test_roundtrip_vector(tmp_path, suffix):
    b = np.random.default_rng(3).standard_normal(17)
    f = tmp_path / ("b" + suffix)
    write_mtx(f, b)
    assert mtx_header(f)["format"] == "array"
    out = read_vector(f)
    assert out.shape == (17,) and out.dtype == np.float64
    np.testing.assert_array_equal(out, b)


def test_read_vector_coordinate_and_row(tmp_path):
    f = tmp_path / "c.mtx"
    f.write_text("%%MatrixMarket matrix coordinate real general\n5 1 2\n2 1 3.5\n5 1 -1\n")
    np.testing.assert_array_equal(read_vector(f), [0, 3.5, 0, 0, -1])
    f.write_text("%%MatrixMarket matrix array real general\n1 3\n1\n2\n3\n")
    np.testing.assert_array_equal(read_vector(f), [1, 2, 3])
    f.write_text("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n")
    with pytest.raises(MatrixMarketError, match=r"n x 1 or 1 x n.*2 x 2"):
        read_vector(f)


def test_integer_pattern_skew_fields(tmp_path):
    f = tmp_path / "i.mtx"
    f.write_text("%%MatrixMarket matrix coordinate integer symmetric\n3 3 3\n1 1 4\n2 1 -2\n"
                 "3 3 7\n")
    A = read_mtx(f)
    assert A.dtype == np.float64
    np.testing.assert_array_equal(A.toarray(), [[4, -2, 0], [-2, 0, 0], [0, 0, 7]])
    f.write_text("%%MatrixMarket matrix coordinate pattern general\n2 3 2\n1 3\n2 1\n")
    np.testing.assert_array_equal(read_mtx(f).toarray(), [[0, 0, 1], [1, 0, 0]])
    f.write_text("%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 1\n3 1 2.5\n")
    np.testing.assert_array_equal(read_mtx(f).toarray(), [[0, 0, -2.5], [0, 0, 0], [2.5, 0, 0]])


def test_duplicates_are_summed(tmp_path):
    f = tmp_path / "d.mtx"
    f.write_text("%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1\n1 1 2\n2 2 5\n")
    A = read_mtx(f)
    assert A.has_canonical_format and A.nnz == 2 and A[0, 0] == 3.0


BAD = "%%MatrixMarket matrix coordinate real general\n"

# (name, text, line number of the problem, words the message must contain)
MALFORMED = [
    ("bad_banner", "%%MatrixMarket matrx coordinate real general\n2 2 1\n1 1 1\n", 1,
     "banner"),
    ("not_mm", "hello world\n", 1, "banner"),
    ("empty", "", 1, "empty"),
    ("bad_format", "%%MatrixMarket matrix coords real general\n2 2 1\n1 1 1\n", 1, "format"),
    ("bad_field", "%%MatrixMarket matrix coordinate reel general\n2 2 1\n1 1 1\n", 1, "field"),
    ("bad_size_word", BAD + "% comment\n% another\n2 x 1\n1 1 1\n", 4, "size line"),
    ("size_too_short", BAD + "2 2\n1 1 1\n", 2, "rows cols entries"),
    ("size_negative", BAD + "2 -2 1\n1 1 1\n", 2, "non-negative"),
    ("no_size_line", BAD + "% only comments\n", 3, "size line"),
    ("nonsquare_symmetric", "%%MatrixMarket matrix coordinate real symmetric\n2 3 1\n1 1 1\n",
     2, "square"),
    ("non_numeric_value", BAD + "% c\n3 3 3\n1 1 1.0\n2 2 abc\n3 3 1\n", 5, "non-numeric"),
    ("non_numeric_index", BAD + "3 3 2\n1 1 1.0\nx 2 1.0\n", 4, "integer indices"),
    ("row_out_of_range", BAD + "2 2 2\n1 1 1.0\n3 2 1.0\n", 4, "row index 3"),
    ("col_out_of_range", BAD + "2 2 2\n1 1 1.0\n2 9 1.0\n", 4, "column index 9"),
    ("zero_index", BAD + "2 2 1\n0 1 1.0\n", 3, "row index 0"),
    ("missing_value", BAD + "2 2 2\n1 1 1.0\n2 2\n", 4, "expected 3 fields"),
    ("too_few", BAD + "2 2 3\n1 1 1.0\n2 2 1.0\n", 5, "too few"),
    ("too_many", BAD + "2 2 1\n1 1 1.0\n2 2 1.0\n", 4, "too many"),
    ("array_too_few", "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n", 6, "too few"),
    ("array_too_many", "%%MatrixMarket matrix array real general\n2 1\n1\n2\n3\n", 5,
     "too many"),
    ("array_non_numeric", "%%MatrixMarket matrix array real general\n3 1\n1\nnan?\n3\n", 4,
     "non-numeric"),
    ("trailing_garbage", BAD + "2 2 2\n1 1 1.0\n2 2 1.0abc\n", 4, "non-numeric"),
    ("decimal_comma", BAD + "2 2 1\n1 1 1,5\n", 3, "non-numeric"),
    ("integer_field_real_value", "%%MatrixMarket matrix coordinate integer general\n2 2 1\n"
     "1 1 2.5\n", 3, "integer"),
    ("real_hermitian", "%%MatrixMarket matrix coordinate real hermitian\n2 2 1\n1 1 1\n", 1,
     "needs the field 'complex'"),
    ("complex_missing_imag", "%%MatrixMarket matrix coordinate complex general\n2 2 2\n"
     "1 1 1 2\n2 2 3\n", 4, "'row col real imag'"),
    ("complex_bad_imag", "%%MatrixMarket matrix coordinate complex general\n2 2 1\n"
     "1 1 1 2j\n", 3, "non-numeric value '2j'"),
    ("complex_array_too_few", "%%MatrixMarket matrix array complex general\n2 2\n1 0\n"
     "2 1\n", 5, "too few"),
]


@pytest.mark.parametrize("name,text,line,words", MALFORMED, ids=[c[0] for c in MALFORMED])
@pytest.mark.parametrize("gz", [False, True], ids=["mtx", "gz"])
def test_malformed_file(tmp_path, name, text, line, words, gz):
    f = tmp_path / (name + (".mtx.gz" if gz else ".mtx"))
    if gz:
        with gzip.open(f, "wt") as fh:
            fh.write(text)
    else:
        f.write_text(text)
    with pytest.raises(MatrixMarketError) as info:
        read_mtx(f)
    msg = str(info.value)
    assert isinstance(info.value, ValueError)
    assert str(f) in msg                                    # names the file
    assert re.search(rf"\bline {line}\b", msg), msg         # and the line
    assert words.lower() in msg.lower(), msg                # and what was expected


def test_malformed_vector_reports_line(tmp_path):
    f = tmp_path / "v.mtx"
    f.write_text("%%MatrixMarket matrix array real general\n3 1\n1\n2\n")
    with pytest.raises(MatrixMarketError, match=r"line 5\b.*too few"):
        read_vector(f)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.mtx"):
        read_mtx(tmp_path / "nope.mtx")


def _random_complex(n, density, seed):
    rng = np.random.default_rng(seed)
    B = sp.random(n, n, density=density, random_state=rng, format="csr")
    B.data = rng.standard_normal(B.nnz) + 1j * rng.standard_normal(B.nnz) / 3
    return B


@pytest.mark.parametrize("gz", [False, True], ids=["mtx", "gz"])
@pytest.mark.parametrize("kind,symmetry", [("general", "general"), ("symmetric", "symmetric"),
                                           ("hermitian", "hermitian")])
def test_complex_round_trip(tmp_path, kind, symmetry, gz):
    B = _random_complex(9, 0.3, 4)
    A = {"general": B, "symmetric": B + B.T,
         "hermitian": B + B.conj().T + sp.identity(9)}[kind].tocsr()
    f = tmp_path / ("c.mtx.gz" if gz else "c.mtx")
    write_mtx(f, A)                                         # AUTO detects the storage
    h = mtx_header(f)
    assert (h["field"], h["symmetry"]) == ("complex", symmetry)
    R = read_mtx(f)
    assert R.dtype == np.complex128 and R.has_canonical_format
    assert (R != A).nnz == 0                                # bit for bit, both halves


def test_read_hermitian_by_hand(tmp_path):
    # the lower triangle is stored; the upper one is its conjugate (Matrix Market's rule)
    f = tmp_path / "h.mtx"
    f.write_text("%%MatrixMarket matrix coordinate complex hermitian\n3 3 4\n"
                 "1 1 2 0\n2 1 1 -1.5\n3 2 0 2\n3 3 5 0\n")
    A = read_mtx(f).toarray()
    expected = np.array([[2, 1 + 1.5j, 0], [1 - 1.5j, 0, -2j], [0, 2j, 5]])
    np.testing.assert_array_equal(A, expected)
    assert read_mtx(f).dtype == np.complex128


def test_complex_vector_and_explicit_symmetry(tmp_path):
    v = np.array([1 + 2j, -0.5j, 3.0])
    write_mtx(tmp_path / "v.mtx", v)
    out = read_vector(tmp_path / "v.mtx")
    assert out.dtype == np.complex128
    np.testing.assert_array_equal(out, v)
    B = _random_complex(6, 0.4, 7)
    write_mtx(tmp_path / "g.mtx", (B + B.conj().T).tocsr(), symmetry="general")
    assert mtx_header(tmp_path / "g.mtx")["symmetry"] == "general"
    assert (read_mtx(tmp_path / "g.mtx") != B + B.conj().T).nnz == 0
    with pytest.raises(ValueError, match="hermitian.*argument A"):
        write_mtx(tmp_path / "r.mtx", poisson2d(3), symmetry="hermitian")


def test_real_files_stay_float64(tmp_path):
    write_mtx(tmp_path / "p.mtx", poisson2d(3))
    assert read_mtx(tmp_path / "p.mtx").dtype == np.float64


# --------------------------------------------------------------------------- generators

def _is_canonical_csr(A, dtype=np.float64):
    return (isinstance(A, sp.csr_matrix) and A.dtype == dtype and A.has_canonical_format
            and A.indices.size == A.nnz)


def _sym_err(A):
    D = A - A.T
    return abs(D).max() / abs(A).max() if D.nnz else 0.0


def _lambda_min(A):
    return scipy.linalg.eigh(A.toarray(), eigvals_only=True, subset_by_index=[0, 0])[0]


SMALL = {
    "laplacian1d": (lambda: laplacian_1d(9), 9),
    "poisson2d": (lambda: poisson2d(6), 36),
    "poisson3d": (lambda: poisson3d(4), 64),
    "anisotropic2d": (lambda: anisotropic2d(6, epsilon=1e-3, theta=0.4), 36),
    "anisotropic3d": (lambda: anisotropic3d(4), 64),
    "convdiff2d": (lambda: convection_diffusion2d(6, peclet=50), 36),
    "convdiff3d": (lambda: convection_diffusion3d(4, peclet=50), 64),
    "elasticity3d": (lambda: elasticity3d(3), 81),
    "jump3d": (lambda: jump3d(4, contrast=1e4), 64),
    "coupled2d": (lambda: coupled_convdiff2d(5), 75),
    "helmholtz2d": (lambda: helmholtz2d(6, k=12.0, eps=0.1), 36),
    "helmholtz3d": (lambda: helmholtz3d(4, k=8.0), 64),
    "magnetic2d": (lambda: magnetic2d(6, flux=0.3), 36),
}
COMPLEX = {"helmholtz2d", "helmholtz3d", "magnetic2d"}


def test_generators_table_complete():
    assert set(SMALL) == set(GENERATORS)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_generator_shape_and_format(name):
    make, n = SMALL[name]
    A = make()
    assert A.shape == (n, n)
    assert _is_canonical_csr(A, np.complex128 if name in COMPLEX else np.float64)
    assert np.all(np.isfinite(A.data))


@pytest.mark.parametrize("name", ["laplacian1d", "poisson2d", "poisson3d", "anisotropic2d",
                                  "anisotropic3d", "elasticity3d", "jump3d"])
def test_symmetric_positive_definite(name):
    A = SMALL[name][0]()
    assert _sym_err(A) <= 10 * EPS
    assert _lambda_min(A) > 0


@pytest.mark.parametrize("theta", [0.3, math.pi / 4, 2.0])
@pytest.mark.parametrize("epsilon", [1e-4, 0.5])
def test_anisotropic2d_rotated_spd(theta, epsilon):
    A = anisotropic2d(7, epsilon=epsilon, theta=theta)
    assert _sym_err(A) <= 10 * EPS
    assert A.getnnz(axis=1).max() == 9
    lam = scipy.linalg.eigvalsh(A.toarray())
    assert lam[0] > 0
    # the diffusion tensor has eigenvalues 1 and epsilon: the symbol lies in (0, 8(1+eps)]
    assert lam[-1] <= 8 * (1 + epsilon) * (1 + 1e-12)


def test_anisotropic2d_axes():
    n, e = 5, 0.01
    A0 = anisotropic2d(n, epsilon=e, theta=0.0)
    assert A0[12, 11] == -1.0 and A0[12, 7] == -e          # strong along x
    A90 = anisotropic2d(n, epsilon=e, theta=math.pi / 2)
    # rotating by 90 degrees swaps the x and y roles: transpose the grid
    perm = np.arange(n * n).reshape(n, n).T.ravel()
    B = A0[perm][:, perm]
    assert abs(A90 - B).max() <= 10 * EPS


def test_laplacian_1d_eigenvalues():
    n = 12
    lam = scipy.linalg.eigvalsh(laplacian_1d(n).toarray())
    k = np.arange(1, n + 1)
    np.testing.assert_allclose(lam, np.sort(2 - 2 * np.cos(k * np.pi / (n + 1))), rtol=1e-13)


def test_poisson2d_smallest_eigenvalue():
    n = 7
    expected = 2 * (2 - 2 * math.cos(math.pi / (n + 1)))
    assert _lambda_min(poisson2d(n)) == pytest.approx(expected, rel=1e-12)


def _expected_row_sums(n, dim):
    """Row sum of the unscaled Laplacian: number of grid neighbours lost to the boundary."""
    idx = np.indices((n,) * dim).reshape(dim, -1)
    return ((idx == 0).sum(axis=0) + (idx == n - 1).sum(axis=0)).astype(float)


@pytest.mark.parametrize("dim,make", [(2, poisson2d), (3, poisson3d)])
def test_poisson_row_sums_and_stencil(dim, make):
    n = 5
    A = make(n)
    rows = np.asarray(A.sum(axis=1)).ravel()
    np.testing.assert_array_equal(rows, _expected_row_sums(n, dim))
    np.testing.assert_array_equal(A.diagonal(), 2.0 * dim)
    off = A - sp.diags(A.diagonal())
    assert set(np.unique(off.data)) <= {-1.0, 0.0}
    assert A.getnnz(axis=1).max() == 2 * dim + 1
    assert A.nnz == n ** dim + 2 * dim * n ** (dim - 1) * (n - 1)


def test_anisotropic3d_coefficients():
    assert (anisotropic3d(4, eps=(1, 1, 1)) != poisson3d(4)).nnz == 0
    A = anisotropic3d(4, eps=(1.0, 1e-2, 1e-4))
    c = 1 + 4 + 16   # grid point (1, 1, 1)
    assert A[c, c] == pytest.approx(2 * (1 + 1e-2 + 1e-4))
    assert (A[c, c - 1], A[c, c - 4], A[c, c - 16]) == (-1.0, -1e-2, -1e-4)


def _check_m_matrix(A):
    off = A - sp.diags(A.diagonal())
    assert np.all(A.diagonal() > 0)
    assert np.all(off.data <= 0)                              # Z-matrix sign pattern
    rows = np.asarray(A.sum(axis=1)).ravel()
    assert np.all(rows >= -1e-12)                             # weakly diagonally dominant
    Ainv = np.linalg.inv(A.toarray())
    assert Ainv.min() >= -1e-12                               # inverse-nonnegative


@pytest.mark.parametrize("peclet", [1.0, 50.0, 1e4])
def test_convection_diffusion_upwind_m_matrix(peclet):
    A2 = convection_diffusion2d(6, peclet=peclet)
    A3 = convection_diffusion3d(4, peclet=peclet, wind=(1.0, -2.0, 0.5))
    for A in (A2, A3):
        assert _sym_err(A) > 1e-3                             # nonsymmetric
        _check_m_matrix(A)


def test_convection_diffusion_central_and_limits():
    # centred differences at a large mesh Peclet number: positive off-diagonals appear
    A = convection_diffusion2d(8, peclet=1e3, upwind=False)
    off = A - sp.diags(A.diagonal())
    assert off.data.max() > 0
    # no convection: the Poisson matrix
    assert abs(convection_diffusion2d(5, peclet=0.0) - poisson2d(5)).max() == 0
    assert abs(convection_diffusion3d(4, peclet=0.0) - poisson3d(4)).max() == 0
    # skew part is the convection operator: A - A^T scales with peclet
    s1 = abs(convection_diffusion2d(6, 10.0) - convection_diffusion2d(6, 10.0).T).max()
    s2 = abs(convection_diffusion2d(6, 20.0) - convection_diffusion2d(6, 20.0).T).max()
    assert s2 == pytest.approx(2 * s1)


def test_elasticity_structure():
    n = 4
    A = elasticity3d(n)
    assert A.shape == (3 * n ** 3, 3 * n ** 3)
    assert A.nnz == 9 * (3 * n - 2) ** 3                      # 27-point stencil of 3x3 blocks
    B = A.tobsr(blocksize=(3, 3))
    assert B.indptr[-1] * 9 == A.nnz                          # every block full
    assert detect_block_size(A) == 3
    assert matrix_info(A)["block_size"] == 3
    assert _sym_err(A) <= 10 * EPS
    assert np.all(A.diagonal() > 0)


@pytest.mark.parametrize("nu", [0.0, 0.3, 0.45])
def test_elasticity_spd_and_rigid_motion(nu):
    n = 5
    A = elasticity3d(n, E=2.0, nu=nu)
    assert _lambda_min(elasticity3d(3, nu=nu)) > 0
    # rigid translation / rotation has zero strain: rows of nodes whose neighbours are all
    # interior (no clamped neighbour) give zero force
    x = np.indices((n,) * 3)[::-1].reshape(3, -1).T.astype(float)   # node coordinates i, j, k
    inner = np.all((x >= 1) & (x <= n - 2), axis=1)
    rows = (3 * np.flatnonzero(inner)[:, None] + np.arange(3)).ravel()
    for u in (np.tile([1.0, 0, 0], n ** 3), np.tile([0, 0, 1.0], n ** 3),
              np.column_stack([-x[:, 1], x[:, 0], 0 * x[:, 0]]).ravel()):
        r = A @ u
        assert abs(r[rows]).max() <= 1e-12 * abs(A).max() * abs(u).max()
        assert abs(r).max() > 1e-3                            # boundary nodes feel the clamp


@pytest.mark.parametrize("nu", [0.0, 0.3, 0.45])
def test_hex8_element_energy_of_linear_fields(nu):
    """Unit-cube Q1 element: u = G x has constant strain eps = sym(G), so the element energy
    u^T Ke u must equal lam tr(eps)^2 + 2 mu eps:eps exactly; rigid motions give 0 (rank 18)."""
    from mpsolve.matrices.generators import _hex8_stiffness
    E = 1.7
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    Ke = _hex8_stiffness(E, nu)
    assert np.abs(Ke - Ke.T).max() <= 10 * EPS * np.abs(Ke).max()
    corners = np.array([[a & 1, (a >> 1) & 1, (a >> 2) & 1] for a in range(8)], dtype=float)
    rng = np.random.default_rng(5)
    for G in [rng.standard_normal((3, 3)) for _ in range(5)] + [np.eye(3)[[1]].T @ np.eye(3)[[2]]]:
        u = (corners @ G.T).ravel()                     # node-major: u[3a + c] = (G x_a)_c
        eps_ = 0.5 * (G + G.T)
        expected = lam * np.trace(eps_) ** 2 + 2 * mu * np.sum(eps_ * eps_)
        assert u @ Ke @ u == pytest.approx(expected, rel=1e-12)
    lam_k = np.linalg.eigvalsh(Ke)
    assert np.sum(lam_k < 1e-12 * lam_k[-1]) == 6      # exactly the 6 rigid body modes


def test_elasticity_scales_with_E():
    assert abs(elasticity3d(2, E=3.0) - 3.0 * elasticity3d(2, E=1.0)).max() <= 1e-14


@pytest.mark.parametrize("call,match", [
    (lambda: poisson2d(0), "argument n"),
    (lambda: poisson3d(2.5), "argument n"),
    (lambda: anisotropic2d(4, epsilon=0.0), "argument epsilon"),
    (lambda: anisotropic3d(4, eps=(1, 1)), "argument eps"),
    (lambda: convection_diffusion2d(4, peclet=-1), "argument peclet"),
    (lambda: convection_diffusion3d(4, wind=(0, 0, 0)), "argument wind"),
    (lambda: elasticity3d(3, nu=0.5), "argument nu"),
    (lambda: elasticity3d(3, E=-1), "argument E"),
])
def test_generator_argument_errors(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_poisson3d_million_rows():
    # the benchmark size: built vectorised (its speed is measured in bench/, not here)
    A = poisson3d(100)
    assert A.shape == (10 ** 6, 10 ** 6) and A.nnz == 6_940_000


# --------------------------------------------------------------------------- generate(spec)

@pytest.mark.parametrize("spec,expected", [
    ("poisson3d:6", lambda: poisson3d(6)),
    (" Poisson2D : 7 ", lambda: poisson2d(7)),
    ("elasticity3d:3,nu=0.45,E=2", lambda: elasticity3d(3, E=2.0, nu=0.45)),
    ("convdiff2d:20,peclet=50", lambda: convection_diffusion2d(20, peclet=50.0)),
    ("convdiff2d:20,peclet=50,upwind=false",
     lambda: convection_diffusion2d(20, peclet=50.0, upwind=False)),
    ("convdiff3d:5,wind=(1;0;-1)", lambda: convection_diffusion3d(5, wind=(1, 0, -1))),
    ("anisotropic2d:9,epsilon=1e-2,theta=0.5",
     lambda: anisotropic2d(9, epsilon=1e-2, theta=0.5)),
    ("anisotropic3d:5,eps=(1;0.01;0.0001)", lambda: anisotropic3d(5, eps=(1, 1e-2, 1e-4))),
    ("laplacian1d:10", lambda: laplacian_1d(10)),
])
def test_generate_spec(spec, expected):
    A, B = generate(spec), expected()
    assert A.shape == B.shape and abs(A - B).max() == 0


@pytest.mark.parametrize("spec,match", [
    ("poison3d:10", r"unknown generator 'poison3d'.*poisson3d"),
    ("poisson3d", "lacks the grid size"),
    ("poisson3d:", "lacks the grid size"),
    ("poisson3d:ten", "not an integer"),
    ("convdiff2d:10,pe=3", r"no parameter 'pe'.*peclet"),
    ("convdiff2d:10,peclet", "key=value"),
    ("convdiff2d:10,peclet=fast", "peclet.*cannot read value"),
    ("poisson2d:10,x=1", "accepted: none"),
])
def test_generate_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        generate(spec)


# --------------------------------------------------------------------------- analysis

def test_matrix_info_poisson():
    info = matrix_info(poisson2d(10))
    assert info["n"] == info["rows"] == info["cols"] == 100
    assert info["nnz"] == 460
    assert (info["nnz_per_row_min"], info["nnz_per_row_max"]) == (3, 5)
    assert info["nnz_per_row_mean"] == pytest.approx(4.6)
    assert info["symmetric"] and info["structurally_symmetric"]
    assert info["positive_diagonal"] and info["zero_diagonals"] == 0
    assert info["diag_dominant_weak"] == 1.0
    assert info["diag_dominant_strict"] == pytest.approx(36 / 100)   # boundary rows
    assert info["block_size"] == 1


def test_matrix_info_nonsymmetric_and_zero_diagonal():
    info = matrix_info(convection_diffusion2d(6, peclet=20))
    assert info["structurally_symmetric"] and not info["symmetric"]
    A = sp.csr_matrix(np.array([[0.0, 2, 0], [1, 3, 0], [0, 0, -1]]))
    A[2, 2] = 0.0   # stored explicit zero on the diagonal
    info = matrix_info(A)
    assert info["zero_diagonals"] == 2 and not info["positive_diagonal"]
    assert info["structurally_symmetric"] and not info["symmetric"]
    assert info["diag_dominant_strict"] == pytest.approx(1 / 3)
    assert info["diag_dominant_weak"] == pytest.approx(2 / 3)
    info = matrix_info(sp.csr_matrix(np.array([[1.0, 2.0], [0.0, 1.0]])))
    assert not info["structurally_symmetric"] and not info["symmetric"]
    assert not matrix_info(sp.csr_matrix(np.ones((2, 3))))["symmetric"]


def test_matrix_info_symmetry_tolerance():
    A = poisson2d(4).tolil()
    A[0, 1] = -1.0 + 1e-12
    A = A.tocsr()
    assert matrix_info(A)["symmetric"]
    assert not matrix_info(A, sym_rtol=1e-14)["symmetric"]
    A[0, 1] = -1.1
    assert not matrix_info(A)["symmetric"]


@pytest.mark.parametrize("b", [2, 3, 4, 5, 6])
def test_detect_block_size_kron(b):
    P = sp.random(8, 8, density=0.3, random_state=b, format="csr") + sp.identity(8)
    A = sp.kron(P, np.ones((b, b)), format="csr")
    assert detect_block_size(A) == b
    # explicit zeros inside the blocks are still structure
    A.data[::7] = 0.0
    assert detect_block_size(A) == b
    # removing them breaks the block pattern (min_fill=1 demands every block entry)
    A.eliminate_zeros()
    assert detect_block_size(A, min_fill=1.0) == 1


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(3, 9), st.floats(0.0, 0.4), st.integers(0, 3),
       st.sampled_from([0.3, 0.6, 0.95, 1.0]), st.integers(0, 2**31 - 1))
def test_detect_block_size_compiled_agrees_with_scipy(b, nb, holes, cut, min_fill, seed):
    """The set-up's compiled detection (precond: block_capacity counts, candidates with a
    failed divisor skipped) gives SciPy's BSR-based answer (mpsolve.matrices) on node-block
    patterns with holes and a trailing partial block, at every fill threshold."""
    from mpsolve.precond import detect_block_size as compiled

    rng = np.random.default_rng(seed)
    P = sp.random(nb, nb, density=0.35, random_state=seed, format="csr") + sp.identity(nb)
    A = sp.kron(P, np.ones((b, b)), format="csr")
    A.data[rng.random(A.nnz) < holes] = 0.0
    A.eliminate_zeros()
    n = A.shape[0] - min(cut, b - 1)
    A = sp.csr_matrix(A[:n, :n])
    for cands in [(6, 5, 4, 3, 2), (2, 4, 8), (3, 6)]:
        assert compiled(A, candidates=cands, min_fill=min_fill) == \
            detect_block_size(A, candidates=cands, min_fill=min_fill)


def test_detect_block_size_negative_cases():
    assert detect_block_size(poisson2d(6)) == 1
    assert detect_block_size(poisson3d(4)) == 1
    assert detect_block_size(sp.identity(12, format="csr")) == 1
    assert detect_block_size(sp.csr_matrix((6, 6))) == 1
    # block size 3 pattern but the order 3*7 = 21 is not divisible by 2, 4, 5, 6
    A = sp.kron(sp.identity(7), np.ones((3, 3)), format="csr")
    assert detect_block_size(A) == 3
    assert detect_block_size(A, candidates=(2, 4)) == 1
    # dense: the largest dividing candidate
    assert detect_block_size(sp.csr_matrix(np.ones((12, 12)))) == 6
    with pytest.raises(ValueError, match="min_fill"):
        detect_block_size(A, min_fill=0)
    with pytest.raises(TypeError, match="argument A"):
        detect_block_size(np.ones((3, 3)))


@pytest.mark.parametrize("n", [3, 4, 6])   # n=2: all 8 nodes couple, the matrix is dense
def test_detect_block_size_elasticity(n):
    assert detect_block_size(elasticity3d(n)) == 3


def test_jump3d_coefficients_jump_by_the_contrast():
    """Off-diagonal face coefficients are harmonic means of 1 and the contrast: both
    kinds of cells occur, so the off-diagonal magnitudes span [1, contrast]."""
    A = jump3d(6, contrast=1e4, seed=1)
    off = -sp.triu(A, 1).data
    assert off.min() == pytest.approx(1.0) and off.max() == pytest.approx(1e4)
    assert np.any(np.isclose(off, 2e4 / (1 + 1e4)))      # a jump across a face
    assert _lambda_min(A) > 0


def test_coupled2d_is_block_coupled_and_nonsymmetric():
    A = coupled_convdiff2d(6, peclet=20)
    assert detect_block_size(A) == 3
    B = sp.bsr_matrix(A, blocksize=(3, 3))
    assert np.count_nonzero(B.data) == B.data.size        # every stored block dense
    assert _sym_err(A) > 1e-3
    # the symmetric part is positive definite: GMRES/BiCGSTAB-friendly, not CG's
    S = 0.5 * (A + A.T)
    assert _lambda_min(S) > 0


# --------------------------------------------------------------------------- complex generators

@pytest.mark.parametrize("dim,make", [(2, helmholtz2d), (3, helmholtz3d)])
def test_helmholtz_is_shifted_laplacian(dim, make):
    n, k, eps = 5, 9.0, 0.2
    A = make(n, k=k, eps=eps)
    h = 1.0 / (n + 1)
    L = (poisson2d if dim == 2 else poisson3d)(n)
    shift = (k * h) ** 2 * (1 + 1j * eps)
    assert abs(A - (L - shift * sp.identity(n ** dim))).max() <= 10 * EPS
    assert (A != A.T).nnz == 0                              # complex-symmetric
    assert abs(A - A.conj().T).max() == pytest.approx(2 * shift.imag, rel=1e-14)
    # spectrum: the Laplacian's, shifted by -(k h)^2 (1 + i eps)
    lam = np.linalg.eigvals(A.toarray())
    np.testing.assert_allclose(lam.imag, -shift.imag, atol=1e-12)
    np.testing.assert_allclose(np.sort(lam.real),
                               np.sort(scipy.linalg.eigvalsh(L.toarray())) - shift.real,
                               rtol=1e-12, atol=1e-12)
    assert lam.real.min() < 0 < lam.real.max()              # indefinite at this k


def test_helmholtz_parameters_checked():
    with pytest.raises(ValueError, match="argument eps"):
        helmholtz2d(4, eps=-1.0)
    with pytest.raises(ValueError, match="argument k"):
        helmholtz3d(4, k=float("nan"))
    assert generate("helmholtz2d:7,k=20,eps=0.01")[0, 0] == helmholtz2d(7, k=20, eps=0.01)[0, 0]


@pytest.mark.parametrize("flux", [0.1, 0.25, 0.37])
def test_magnetic2d_hermitian_positive_definite(flux):
    n = 7
    A = magnetic2d(n, flux=flux)
    assert (A != A.conj().T).nnz == 0                       # Hermitian, exactly
    assert abs(A - A.T).max() > 0.1                         # but not complex-symmetric
    lam = scipy.linalg.eigvalsh(A.toarray())
    lam0 = _lambda_min(poisson2d(n))
    assert lam[0] > lam0 * (1 - 1e-12)                      # diamagnetic inequality
    np.testing.assert_allclose(np.abs(A.data), 1.0 + 3.0 * (A.indices == np.repeat(
        np.arange(n * n), np.diff(A.indptr))))              # |couplings| 1, diagonal 4
    # every cell carries the flux: the product around a plaquette is exp(-2 pi i flux)
    i, j = 2, 3
    p = lambda a, b: a + n * b                              # noqa: E731
    loop = (A[p(i, j), p(i + 1, j)] * A[p(i + 1, j), p(i + 1, j + 1)]
            * A[p(i + 1, j + 1), p(i, j + 1)] * A[p(i, j + 1), p(i, j)])
    assert loop == pytest.approx(np.exp(2j * math.pi * flux), abs=1e-14)


def test_magnetic2d_zero_flux_is_poisson():
    A = magnetic2d(5, flux=0.0)
    assert abs(A - poisson2d(5)).max() == 0
    with pytest.raises(ValueError, match="argument shift"):
        magnetic2d(4, shift=-1.0)


def test_matrix_info_tells_hermitian_from_complex_symmetric():
    h = matrix_info(helmholtz2d(5, k=10.0, eps=0.5))
    assert h["symmetric"] and not h["hermitian"] and h["dtype"] == "complex128"
    assert not h["positive_diagonal"]                       # complex diagonal
    m = matrix_info(magnetic2d(5, flux=0.3))
    assert m["hermitian"] and not m["symmetric"] and m["positive_diagonal"]
    p = matrix_info(poisson2d(4))
    assert p["hermitian"] == p["symmetric"] is True and p["dtype"] == "float64"


def test_fortran_d_exponents_read_as_scipy_reads_them(tmp_path):
    """``1.0D+00`` (Fortran's double-precision exponent, in files written by Fortran
    codes) reads as the number it is (SciPy's reader stops at the D: 2.5d-1 reads 2.5);
    a malformed value is still named."""
    import scipy.io

    f = tmp_path / "d.mtx"
    f.write_text("%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1.0D+00\n"
                 "2 2 2.5d-1\n1 2 -3.0D2\n")
    A = read_mtx(f)
    assert A[0, 0] == 1.0 and A[0, 1] == -300.0 and A[1, 1] == 0.25
    f.write_text("%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 2.5Dx\n")
    with pytest.raises(MatrixMarketError, match="line 3.*2.5Dx"):
        read_mtx(f)


def test_matrix_files_refuse_what_would_be_read_or_written_wrong(tmp_path):
    """A forced symmetry the matrix does not have exactly (its other triangle would be
    lost), a size line no memory holds, a corrupt .mat file, a complex file labelled
    real (its imaginary parts would be dropped), a skew-symmetric file with a diagonal
    entry: each a MatrixMarketError/ValueError naming the file and the fix."""
    from mpsolve.matrices import MatrixMarketError, read_matrix, read_mtx, write_mtx

    A = sp.csr_matrix(np.array([[1.0, 2.0], [3.0, 4.0]]))
    for sym, M in (("symmetric", A), ("skew-symmetric", A), ("hermitian", A.astype(complex))):
        with pytest.raises(ValueError, match=f"not exactly {sym}.*symmetry='general'"):
            write_mtx(tmp_path / "s.mtx", M, symmetry=sym)
    S = sp.csr_matrix(np.array([[1.0, 2.0], [2.0, 4.0]]))
    K = sp.csr_matrix(np.array([[0.0, 2.0], [-2.0, 0.0]]))
    H = sp.csr_matrix(np.array([[1.0, 2 + 1j], [2 - 1j, 4.0]]))
    for sym, M in (("symmetric", S), ("skew-symmetric", K), ("hermitian", H)):
        write_mtx(tmp_path / "s.mtx", M, symmetry=sym)
        assert (read_mtx(tmp_path / "s.mtx") != M).nnz == 0
    huge = tmp_path / "huge.mtx"
    huge.write_text("%%MatrixMarket matrix coordinate real general\n"
                    "100000000000 100000000000 1\n1 1 1.0\n")
    with pytest.raises(MatrixMarketError, match="huge.mtx: a 100000000000 x 100000000000 "
                       "matrix does not fit in memory"):
        read_mtx(huge)
    (tmp_path / "bad.mat").write_bytes(b"junk" * 10)       # SciPy: IndexError
    with pytest.raises(MatrixMarketError, match="bad.mat: SciPy's loadmat could not read"):
        read_matrix(tmp_path / "bad.mat")
    lab = tmp_path / "lab.mtx"
    lab.write_text("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1 2\n2 2 3 4\n")
    with pytest.raises(MatrixMarketError, match="lab.mtx, line 3: expected 3 fields"):
        read_mtx(lab)
    skew = tmp_path / "skew.mtx"
    skew.write_text("%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 2\n"
                    "1 1 1\n2 1 3\n")
    with pytest.raises(MatrixMarketError, match=r"skew.mtx: a skew-symmetric matrix has a "
                       r"zero diagonal, but entry \(1, 1\) is 1.0"):
        read_mtx(skew)


def test_elasticity3d_is_exactly_symmetric():
    """Its element blocks for the offsets d and -d were summed in other orders (A - A^T up
    to 3e-17): now one is the other's transpose, bit for bit, so that exact symmetry
    tests (Matrix Market's 'symmetric' storage, IC(0)'s symmetric form) see it."""
    for n in (2, 3, 5):
        A = elasticity3d(n)
        assert (A != A.T).nnz == 0
    assert np.linalg.eigvalsh(elasticity3d(2).toarray()).min() > 0


def _mtx(tmp_path, name, text):
    f = tmp_path / name
    f.write_text(text)
    return f


def test_read_mtx_refuses_what_scipy_misreads_silently(tmp_path):
    """Files SciPy reads without a word into a wrong matrix: extra values on a later entry
    line (dropped), a symmetric file listing both triangles (each pair doubled), a
    hermitian diagonal entry with an imaginary part; a comment among the entries is read
    (SciPy: 'Invalid integer value'), duplicates beyond rows x cols are summed (they were
    refused), and an empty array file reads (SciPy's reader died of a floating-point
    exception)."""
    from mpsolve.matrices import MatrixMarketError, read_mtx, read_vector, write_mtx

    head = "%%MatrixMarket matrix coordinate real general\n"
    bad = {"extra": head + "3 3 3\n1 1 1.0\n2 2 2.0 9.0\n3 3 3.0\n",
           "both": "%%MatrixMarket matrix coordinate real symmetric\n2 2 3\n1 2 5\n2 1 5\n"
                   "2 2 2\n",
           "herm": "%%MatrixMarket matrix coordinate complex hermitian\n1 1 1\n1 1 1.0 2.0\n"}
    for name, text in bad.items():
        with pytest.raises(MatrixMarketError, match=r"expected 3 fields|both sides|real "
                           r"diagonal"):
            read_mtx(_mtx(tmp_path, name + ".mtx", text))
    A = read_mtx(_mtx(tmp_path, "c.mtx", head + "2 2 2\n1 1 1.0\n% note\n2 2 2.0\n"))
    assert A.toarray().tolist() == [[1.0, 0.0], [0.0, 2.0]]
    A = read_mtx(_mtx(tmp_path, "d.mtx", head + "2 2 5\n1 1 1\n1 1 1\n2 2 2\n1 2 3\n2 1 4\n"))
    assert A.toarray().tolist() == [[2.0, 3.0], [4.0, 2.0]]
    up = read_mtx(_mtx(tmp_path, "u.mtx", "%%MatrixMarket matrix coordinate real symmetric\n"
                       "3 3 3\n1 2 5\n2 3 -1\n3 3 2\n"))
    assert up.toarray().tolist() == [[0, 5, 0], [5, 0, -1], [0, -1, 2]]
    f = tmp_path / "e.mtx"
    write_mtx(f, np.zeros((0, 3)))
    assert read_mtx(f).shape == (0, 3)
    write_mtx(f, np.zeros(0))
    assert read_vector(f).shape == (0,)


def test_write_mtx_writes_every_dtype_readably(tmp_path):
    """float16 was written as 'integer' (3.14 -> 3), long double with 6 digits, uint64 as
    the non-standard 'unsigned-integer' (unreadable); a carriage return in the comment and
    a bad compresslevel are refused before a file is made."""
    from mpsolve.matrices import read_mtx, write_mtx

    f = tmp_path / "x.mtx"
    for arr in (np.array([[np.pi, 2.5]], np.float16), np.array([[np.pi, 1.0]], np.longdouble),
                np.array([[2**40, 3]], np.uint64)):
        write_mtx(f, arr)
        np.testing.assert_array_equal(read_mtx(f).toarray(), arr.astype(np.float64))
    with pytest.raises(ValueError, match="carriage"):
        write_mtx(tmp_path / "y.mtx", np.eye(2), comment="a\rb")
    with pytest.raises(ValueError, match="compresslevel"):
        write_mtx(tmp_path / "y.mtx.gz", np.eye(2), compresslevel=10)
    assert not list(tmp_path.glob("y.*"))


def test_jump3d_stays_finite_up_to_its_bound():
    """The harmonic mean 2ac/(a+c) overflowed above contrast 1.3e154 (inf, then NaN
    entries); contrast is bounded by 1e300 (the diagonal sums twelve faces)."""
    from mpsolve.matrices import jump3d

    A = jump3d(3, contrast=1e200)
    assert np.isfinite(A.data).all() and abs(A - A.T).max() == 0
    with pytest.raises(ValueError, match="contrast"):
        jump3d(3, contrast=1e308)
