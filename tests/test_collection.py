"""Tests for mpsolve.matrices.collection: local SuiteSparse folders and the downloader.

The downloader is tested only against a local http.server on 127.0.0.1; an autouse guard
fails any test that tries to open another URL.
"""

import csv
import functools
import http.server
import io
import os
import socket
import tarfile
import threading
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from mpsolve.matrices import (
    CollectionError,
    MatrixEntry,
    MatrixMarketError,
    download,
    elasticity3d,
    find,
    list_collection,
    load,
    mtx_header,
    poisson2d,
    read_mtx,
    search_path,
    write_mtx,
)

REPO = Path(__file__).resolve().parents[1]
COLLECTION = Path(os.environ.get("MPSOLVE_TEST_COLLECTION",
                                 REPO.parent / "shared" / "matrices" / "suitesparse"))

needs_collection = pytest.mark.skipif(not (COLLECTION / "MANIFEST.tsv").is_file(),
                                      reason=f"no SuiteSparse test collection at {COLLECTION} "
                                             "(set MPSOLVE_TEST_COLLECTION)")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """No proxies, a private cache, no user collection path, and no request off 127.0.0.1."""
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy",
                "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MPSOLVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MPSOLVE_MATRIX_PATH", raising=False)
    real_urlopen = urllib.request.urlopen

    def guarded(url, *args, **kwargs):
        target = url if isinstance(url, str) else url.full_url
        host = urllib.parse.urlsplit(target).hostname
        assert host == "127.0.0.1", f"test tried to reach {target}"
        return real_urlopen(url, *args, **kwargs)

    monkeypatch.setattr(urllib.request, "urlopen", guarded)


def _manifest_rows():
    with open(COLLECTION / "MANIFEST.tsv", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


# --------------------------------------------------------------------------- local collection

@needs_collection
def test_list_collection_matches_manifest():
    rows = _manifest_rows()
    entries = list_collection(COLLECTION)
    assert len(entries) == len(rows) > 0
    for e, r in zip(entries, rows):
        assert isinstance(e, MatrixEntry)
        assert (e.name, e.group, e.rows, e.cols, e.nnz) == (
            r["name"], r["group"], int(r["rows"]), int(r["cols"]), int(r["nnz"]))
        assert e.symmetric == (r["symmetry"] != "general")
        assert e.spd == (r["likely_spd"] == "yes")
        assert e.path.is_file()


@needs_collection
def test_every_collection_matrix_loads_with_manifest_counts():
    """Shape and counts of every matrix agree with MANIFEST.tsv.

    MANIFEST ``nnz`` is the stored entry count of the file (the lower half for symmetric
    files), which is what the Matrix Market size line says; ``nnz_full_nonzeros`` counts the
    nonzero values of the expanded matrix (explicit zeros dropped), which is what
    ``count_nonzero`` of the loaded matrix gives. The loaded matrix keeps explicit zeros, so its
    ``nnz`` is the expanded stored count: ``2*nnz - (stored diagonal)`` for symmetric files.
    """
    for r in _manifest_rows():
        A = load(r["name"], path=COLLECTION)
        name = r["name"]
        assert isinstance(A, sp.csr_matrix) and A.dtype == np.float64, name
        assert A.shape == (int(r["rows"]), int(r["cols"])), name
        h = mtx_header(COLLECTION / r["file"])
        assert h["entries"] == int(r["nnz"]), name
        assert A.count_nonzero() == int(r["nnz_full_nonzeros"]), name
        if r["symmetry"] == "symmetric":
            assert A.nnz == 2 * int(r["nnz"]) - _stored_diagonal(A), name
            assert (A != A.T).nnz == 0, name
        else:
            assert A.nnz == int(r["nnz"]), name
        if r["likely_spd"] == "yes":
            assert A.diagonal().min() > 0, name


def _stored_diagonal(A):
    """Stored diagonal entries, explicit zeros included."""
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    return int(np.count_nonzero(rows == A.indices))


@needs_collection
def test_load_by_env_var_and_group_prefix(monkeypatch, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("MPSOLVE_MATRIX_PATH", os.pathsep.join([str(empty), str(COLLECTION)]))
    A = load("nos4")
    assert A.shape == (100, 100)
    assert (load("HB/nos4") != A).nnz == 0
    assert find("nos4") == COLLECTION / "nos4.mtx.gz"
    with pytest.raises(CollectionError, match="not found"):
        load("Boeing/nos4")        # wrong group: not the manifest row, no such folder


def test_load_layouts_and_search_order(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "HB" / "tri").mkdir(parents=True)
    (b / "tri").mkdir(parents=True)
    write_mtx(a / "HB" / "tri" / "tri.mtx", poisson2d(3))          # cache layout
    write_mtx(b / "tri" / "tri.mtx.gz", poisson2d(4))              # extracted tarball layout
    write_mtx(b / "flat.mtx", poisson2d(2))
    assert load("tri", path=[a, b]).shape == (9, 9)                 # first folder wins
    assert load("tri", path=os.pathsep.join([str(b), str(a)])).shape == (16, 16)
    assert load("HB/tri", path=[a]).shape == (9, 9)
    assert load("flat", path=str(b)).shape == (4, 4)


def test_load_from_download_cache(tmp_path):
    cache = tmp_path / "cache"
    (cache / "G" / "el").mkdir(parents=True)
    write_mtx(cache / "G" / "el" / "el.mtx", elasticity3d(2))
    assert search_path([])[-1] == cache
    assert load("el", path=[]).shape == (24, 24)


def test_load_not_found_message(tmp_path):
    with pytest.raises(CollectionError) as info:
        load("nosuchmatrix", path=[tmp_path])
    msg = str(info.value)
    assert "nosuchmatrix" in msg and str(tmp_path) in msg
    assert "MPSOLVE_MATRIX_PATH" in msg and "download(" in msg
    with pytest.raises(ValueError, match="argument name"):
        load("", path=[tmp_path])


def test_list_collection_without_manifest(tmp_path):
    write_mtx(tmp_path / "b_sym.mtx.gz", poisson2d(3))
    write_mtx(tmp_path / "a_gen.mtx", sp.random(4, 6, density=0.5, random_state=0))
    (tmp_path / "notes.txt").write_text("not a matrix")
    entries = list_collection(tmp_path)
    assert [e.name for e in entries] == ["a_gen", "b_sym"]
    a, b = entries
    assert (a.rows, a.cols, a.nnz, a.symmetric, a.spd) == (4, 6, 12, False, None)
    assert (b.rows, b.nnz, b.symmetric) == (9, 21, True)


def test_list_collection_finds_extracted_tarballs_and_skips_their_auxiliary_files(tmp_path):
    for folder in ("bcs", "HB/nos", "other"):
        (tmp_path / folder).mkdir(parents=True)
    write_mtx(tmp_path / "bcs" / "bcs.mtx", poisson2d(3))     # <name>/<name>.mtx
    write_mtx(tmp_path / "bcs" / "bcs_b.mtx", np.ones((9, 1)))
    write_mtx(tmp_path / "HB" / "nos" / "nos.mtx.gz", poisson2d(2))   # <group>/<name>/...
    write_mtx(tmp_path / "HB" / "nos" / "nos_coord.mtx", np.ones((4, 2)))
    write_mtx(tmp_path / "flat.mtx", poisson2d(4))            # extracted flat, with its b
    write_mtx(tmp_path / "flat_b.mtx", np.ones((16, 1)))
    write_mtx(tmp_path / "flat_2.mtx", poisson2d(2))          # square: a matrix of its own
    write_mtx(tmp_path / "other" / "x.mtx", poisson2d(2))     # not named after its folder
    entries = list_collection(tmp_path)
    assert [(e.group, e.name, e.rows) for e in entries] == [
        ("", "bcs", 9), ("", "flat", 16), ("", "flat_2", 4), ("HB", "nos", 4)]
    assert entries[0].path == tmp_path / "bcs" / "bcs.mtx"
    assert load("nos", path=[tmp_path]).shape == (4, 4)       # find agrees


def test_list_collection_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        list_collection(tmp_path / "missing")
    # of several folders, a missing one is skipped (as find and load do)
    assert list_collection([tmp_path / "missing", tmp_path]) == []
    with pytest.raises(ValueError, match="MPSOLVE_MATRIX_PATH"):
        list_collection()
    (tmp_path / "MANIFEST.tsv").write_text("name\tgroup\trows\nx\tG\tmany\n")
    with pytest.raises(ValueError, match=r"MANIFEST.tsv: bad row for 'x'"):
        list_collection(tmp_path)


# --------------------------------------------------------------------------- downloader

class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):          # keep pytest output clean
        pass

    def do_GET(self):
        self.server.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    """A local HTTP server on 127.0.0.1 (free port) serving tmp_path/'srv'; yields (url, root,
    list of request paths)."""
    root = tmp_path / "srv"
    root.mkdir()
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
    httpd.requests = []
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", root, httpd.requests
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(timeout=5)


def _publish(root, group, name, A=None, mtx_text=None, raw=None):
    """Put {root}/MM/{group}/{name}.tar.gz holding {name}/{name}.mtx (and a _b extra)."""
    d = root / "MM" / group
    d.mkdir(parents=True, exist_ok=True)
    target = d / f"{name}.tar.gz"
    if raw is not None:
        target.write_bytes(raw)
        return target
    if mtx_text is None:
        buf = io.BytesIO()
        scipy.io.mmwrite(buf, sp.coo_matrix(A))
        mtx_text = buf.getvalue()
    with tarfile.open(target, "w:gz") as tar:
        for member, data in ((f"{name}/{name}.mtx", mtx_text),
                             (f"{name}/{name}_b.mtx", b"%%MatrixMarket matrix array real "
                                                      b"general\n1 1\n1\n")):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return target


def _cache_files(cache):
    return sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file())


def test_download_then_cache_reuse(server, tmp_path):
    url, root, requests = server
    A = elasticity3d(2)
    _publish(root, "Test", "tiny", A)
    cache = tmp_path / "cache"
    f = download("tiny", group="Test", base_url=url)
    assert f == cache / "Test" / "tiny" / "tiny.mtx"
    assert requests == ["/MM/Test/tiny.tar.gz"]
    assert _cache_files(cache) == ["Test/tiny/tiny.mtx"]        # no temp files left
    assert (read_mtx(f) != A).nnz == 0
    # second call: served from the cache, no request
    assert download("tiny", group="Test", base_url=url) == f
    assert download("Test/tiny", base_url=url) == f
    assert len(requests) == 1
    # load() finds it by name in the cache
    assert (load("tiny") != A).nnz == 0
    assert len(requests) == 1


def test_download_explicit_cache_dir(server, tmp_path):
    url, root, requests = server
    _publish(root, "G2", "p", poisson2d(3))
    f = download("p", group="G2", cache_dir=tmp_path / "mine", base_url=url + "/")
    assert f == tmp_path / "mine" / "G2" / "p" / "p.mtx"
    assert read_mtx(f).shape == (9, 9)


def test_download_404(server, tmp_path):
    url, root, requests = server
    with pytest.raises(CollectionError) as info:
        download("nosuch", group="HB", base_url=url)
    msg = str(info.value)
    assert "404" in msg and "nosuch" in msg and "/MM/HB/nosuch.tar.gz" in msg
    assert "unknown matrix name or group" in msg
    assert requests == ["/MM/HB/nosuch.tar.gz"]
    assert _cache_files(tmp_path / "cache") == []


def test_download_needs_group(server, tmp_path, monkeypatch):
    url, root, requests = server
    with pytest.raises(ValueError, match=r"argument group is required.*group='HB'"):
        download("bcsstk14", base_url=url)
    assert requests == []
    # a MANIFEST on MPSOLVE_MATRIX_PATH can supply the group
    coll = tmp_path / "coll"
    coll.mkdir()
    (coll / "MANIFEST.tsv").write_text("name\tgroup\trows\tcols\tnnz\tsymmetry\tfield\t"
                                       "likely_spd\tfile\nsq\tGX\t4\t4\t8\tgeneral\treal\tno\t"
                                       "sq.mtx\n")
    monkeypatch.setenv("MPSOLVE_MATRIX_PATH", str(coll))
    _publish(root, "GX", "sq", poisson2d(2))
    assert download("sq", base_url=url).parent.parent.name == "GX"


def test_download_offline(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                  # nothing listens there now
    with pytest.raises(CollectionError, match=r"cannot reach .*offline\?"):
        download("tiny", group="Test", base_url=f"http://127.0.0.1:{port}", timeout=5)
    assert _cache_files(tmp_path / "cache") == []


def test_download_bad_archives(server, tmp_path):
    url, root, requests = server
    _publish(root, "Bad", "garbage", raw=b"this is not a tarball")
    with pytest.raises(CollectionError, match="valid .tar.gz"):
        download("garbage", group="Bad", base_url=url)
    _publish(root, "Bad", "broken",
             mtx_text=b"%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n9 9 1\n")
    with pytest.raises(MatrixMarketError, match=r"does not parse.*line 4\b"):
        download("broken", group="Bad", base_url=url)
    d = root / "MM" / "Bad"
    with tarfile.open(d / "empty.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("empty/readme.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(CollectionError, match="holds no empty/empty.mtx"):
        download("empty", group="Bad", base_url=url)
    assert _cache_files(tmp_path / "cache") == []               # nothing half-written


def test_guard_refuses_remote_urls():
    with pytest.raises(AssertionError, match="tried to reach"):
        urllib.request.urlopen("http://example.invalid/")
