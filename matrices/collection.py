"""SuiteSparse Matrix Collection: find matrices in local folders, list them, download them.

Where :func:`load` looks for a matrix called ``name``, in order:

1. the folders in ``path`` (a list, or one string of folders separated by ``os.pathsep``);
   if ``path`` is None, the folders in the environment variable ``MPSOLVE_MATRIX_PATH``;
2. the download cache (``MPSOLVE_CACHE``, default ``~/.cache/mpsolve/suitesparse``).

In each folder these files count as the matrix (first match wins): the ``file`` column of a
``MANIFEST.tsv`` row with that name, ``<name>.mtx``, ``<name>.mtx.gz``, and the layouts of an
extracted SuiteSparse tarball, ``<name>/<name>.mtx`` and ``<group>/<name>/<name>.mtx`` (the
cache uses the latter), ``.gz`` allowed. ``name`` may also be written ``"group/name"``.

:func:`download` fetches ``{base_url}/MM/{group}/{name}.tar.gz`` into the cache, extracts
``<name>/<name>.mtx`` through a temporary file and an atomic rename, checks that it parses, and
returns the cached file; a cached matrix is never fetched again.
"""

from __future__ import annotations

import csv
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path

from .mmio import MatrixMarketError, mtx_header, read_mtx

__all__ = ["MatrixEntry", "CollectionError", "load", "find", "list_collection", "download",
           "search_path", "get_cache_dir", "DEFAULT_BASE_URL"]

DEFAULT_BASE_URL = "https://sparse.tamu.edu"
#: what :func:`list_collection` takes as a collection folder's matrices (for messages)
LAYOUTS = ("a MANIFEST.tsv, *.mtx[.gz], or extracted SuiteSparse tarballs "
           "<name>/<name>.mtx[.gz]")
MANIFEST = "MANIFEST.tsv"


class CollectionError(LookupError):
    """A matrix is not in any searched folder, or could not be downloaded."""


@dataclass(frozen=True)
class MatrixEntry:
    """One matrix of a local collection.

    Attributes
    ----------
    name, group : str
        SuiteSparse name and group (group ``""`` when unknown).
    path : pathlib.Path
        The ``.mtx`` / ``.mtx.gz`` file.
    rows, cols : int
        Shape.
    nnz : int
        Entries stored in the file (half of a symmetric matrix, explicit zeros included), as
        the Matrix Market size line and the MANIFEST ``nnz`` column give it.
    symmetric : bool
        Stored as symmetric (or skew-symmetric) in the file.
    spd : bool or None
        Known symmetric positive definite (MANIFEST ``likely_spd``), None when unknown.
    field : str
        Matrix Market field ('real', 'integer', 'pattern').
    """

    name: str
    group: str
    path: Path
    rows: int
    nnz: int
    symmetric: bool
    spd: bool | None
    cols: int = -1
    field: str = "real"


def get_cache_dir(cache_dir=None):
    """The download cache folder: ``cache_dir``, else ``$MPSOLVE_CACHE``, else the default.

    Examples
    --------
    >>> from mpsolve.matrices import get_cache_dir
    >>> get_cache_dir("/tmp/mycache").as_posix()
    '/tmp/mycache'
    """
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("MPSOLVE_CACHE")
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/mpsolve/suitesparse").expanduser()


def search_path(path=None):
    """Folders :func:`load` searches, in order (see the module docstring).

    Parameters
    ----------
    path : str, path-like or sequence of them, optional
        Folders; a string may hold several separated by ``os.pathsep``. None: use
        ``$MPSOLVE_MATRIX_PATH``. The cache folder is always appended.

    Returns
    -------
    list of pathlib.Path
    """
    if path is None:
        path = os.environ.get("MPSOLVE_MATRIX_PATH", "")
    if isinstance(path, (str, os.PathLike)):
        items = [p for p in os.fspath(path).split(os.pathsep) if p]
    else:
        items = [os.fspath(p) for p in path]
    folders = [Path(p).expanduser() for p in items]
    folders.append(get_cache_dir())
    return folders


def _read_manifest(folder):
    f = Path(folder) / MANIFEST
    if not f.is_file():
        return None
    with open(f, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def _split_name(name):
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"argument name must be a non-empty matrix name like 'bcsstk14' or "
                         f"'HB/bcsstk14', got {name!r}")
    group, _, base = name.strip().rpartition("/")
    if not base or any(c in base for c in "\\") or base in (".", ".."):
        raise ValueError(f"argument name {name!r} is not a valid matrix name")
    return group, base


def _find_in(folder, group, name):
    folder = Path(folder)
    if not folder.is_dir():
        return None
    manifest = _read_manifest(folder)
    if manifest:
        listed = [row for row in manifest if row.get("name") == name]
        for row in listed:
            if not group or row.get("group") == group:
                f = folder / row.get("file", "")
                if row.get("file") and f.is_file():
                    return f
        if group and listed:
            return None   # the manifest says this folder's matrix of that name is another group
    for ext in (".mtx", ".mtx.gz"):
        tries = [folder / (name + ext), folder / name / (name + ext)]
        if group:
            tries += [folder / group / name / (name + ext), folder / group / (name + ext)]
        for f in tries:
            if f.is_file():
                return f
    if not group:
        for ext in (".mtx", ".mtx.gz"):
            for f in sorted(folder.glob(f"*/{name}/{name}{ext}")):
                return f
            for f in sorted(folder.glob(f"*/{name}{ext}")):
                return f
    return None


def find(name, path=None):
    """Path of the file holding matrix ``name`` (see :func:`load` for the search rules).

    Raises
    ------
    CollectionError
        The matrix is in none of the folders; the message lists them.
    """
    group, base = _split_name(name)
    folders = search_path(path)
    for folder in folders:
        f = _find_in(folder, group, base)
        if f is not None:
            return f
    where = ", ".join(str(f) for f in folders)
    hint = (f"download(name={base!r}, group={group!r})" if group
            else f"download({base!r}, group='<group>') (the group is on sparse.tamu.edu)")
    raise CollectionError(f"matrix {name!r} not found in {where}; put {base}.mtx(.gz) in one "
                          f"of them, set MPSOLVE_MATRIX_PATH, or, when online, call {hint}")


def load(name, path=None):
    """Load a SuiteSparse matrix by name from local folders or the download cache.

    Parameters
    ----------
    name : str
        Matrix name (``"bcsstk14"``) or ``"group/name"`` (``"HB/bcsstk14"``).
    path : str, path-like or sequence of them, optional
        Folders to search; default ``$MPSOLVE_MATRIX_PATH``. The download cache is always
        searched last.

    Returns
    -------
    scipy.sparse.csr_matrix
        As :func:`~mpsolve.matrices.read_mtx` returns it (float64, symmetric storage expanded).

    Raises
    ------
    CollectionError
        Not found; the message lists the folders searched and how to fix it.

    Examples
    --------
    >>> import tempfile, os
    >>> from mpsolve.matrices import load, write_mtx, poisson2d
    >>> d = tempfile.mkdtemp()
    >>> write_mtx(os.path.join(d, "p2d.mtx.gz"), poisson2d(5))
    >>> load("p2d", path=d).shape
    (25, 25)
    """
    return read_mtx(find(name, path))


def list_collection(path=None):
    """List the matrices of a collection folder.

    Parameters
    ----------
    path : str, path-like or sequence of them, optional
        Folder(s); default ``$MPSOLVE_MATRIX_PATH`` (not the cache); ``~`` expanded,
        a missing folder skipped as by :func:`find` (an error where none exists).

    Returns
    -------
    list of MatrixEntry
        From ``MANIFEST.tsv`` when a folder has one (rows in file order), else from the headers
        of its ``*.mtx`` / ``*.mtx.gz`` files and of the extracted SuiteSparse tarballs in it,
        ``<name>/<name>.mtx[.gz]`` and ``<group>/<name>/<name>.mtx[.gz]`` (sorted by name;
        ``spd`` is None; a tarball's auxiliary files such as ``<name>_b.mtx`` are not
        listed; a file whose header cannot be read is skipped with a ``RuntimeWarning``).

    Examples
    --------
    >>> import tempfile, os
    >>> from mpsolve.matrices import list_collection, write_mtx, poisson2d
    >>> d = tempfile.mkdtemp()
    >>> write_mtx(os.path.join(d, "p2d.mtx"), poisson2d(3))
    >>> [(e.name, e.rows, e.nnz, e.symmetric) for e in list_collection(d)]
    [('p2d', 9, 21, True)]
    """
    if path is None:
        path = os.environ.get("MPSOLVE_MATRIX_PATH", "")
    if isinstance(path, (str, os.PathLike)):
        folders = [Path(p).expanduser() for p in os.fspath(path).split(os.pathsep) if p]
    else:
        folders = [Path(p).expanduser() for p in path]
    if not folders:
        raise ValueError("argument path is empty and MPSOLVE_MATRIX_PATH is not set; pass the "
                         "collection folder")
    if not any(f.is_dir() for f in folders):
        raise FileNotFoundError("list_collection: no such folder: " +
                                ", ".join(repr(str(f)) for f in folders))
    entries = []
    for folder in folders:
        if not folder.is_dir():
            continue                    # (as find and load: a missing folder of several)
        manifest = _read_manifest(folder)
        if manifest is not None:
            for row in manifest:
                try:
                    spd = {"yes": True, "true": True, "no": False, "false": False}.get(
                        row.get("likely_spd", "").strip().lower())
                    f = folder / row["file"]
                    if not f.is_file():         # listed, stored as find finds it (or not)
                        f = _find_in(folder, row.get("group", ""), row["name"]) or f
                    entries.append(MatrixEntry(
                        name=row["name"], group=row.get("group", "") or "",
                        path=f, rows=int(row["rows"]),
                        nnz=int(row["nnz"]),
                        symmetric=row.get("symmetry", "general") != "general",
                        spd=spd, cols=int(row.get("cols") or row["rows"]),
                        field=row.get("field", "real") or "real"))
                except (KeyError, ValueError) as exc:
                    raise ValueError(f"{folder / MANIFEST}: bad row for "
                                     f"{row.get('name')!r}: {exc}; expected tab-separated "
                                     "columns name, group, rows, cols, nnz, symmetry, field, "
                                     "likely_spd, file") from None
            continue
        for group, name, f in _matrix_files(folder):
            try:
                h = mtx_header(f)
            except (ValueError, OSError) as err:
                # one damaged file: said, and the others listed (a bench over the folder
                # ran none of them)
                warnings.warn(f"list_collection: {f} skipped: {err}", RuntimeWarning,
                              stacklevel=2)
                continue
            entries.append(MatrixEntry(name=name, group=group, path=f, rows=h["rows"],
                                       nnz=h["entries"], symmetric=h["symmetry"] != "general",
                                       spd=None, cols=h["cols"], field=h["field"]))
    return entries


def _mtx_name(f):
    """``f``'s matrix name: its file name without ``.mtx`` / ``.mtx.gz`` (None: not one)."""
    for ext in (".mtx.gz", ".mtx"):
        if f.name.endswith(ext) and len(f.name) > len(ext):
            return f.name[:-len(ext)]
    return None


def _matrix_files(folder):
    """(group, name, file) of the matrices of a folder without a manifest, sorted by name:
    ``*.mtx[.gz]`` in it, and the extracted tarballs' ``<name>/<name>.mtx[.gz]`` and
    ``<group>/<name>/<name>.mtx[.gz]``.  In a tarball's folder only the file named after it
    is the matrix: ``<name>_b.mtx`` (a right-hand side), ``<name>_coord.mtx`` and the like
    are its auxiliary data, not matrices of the collection -- and so are such files extracted
    flat beside ``<name>.mtx`` (same row count, another column count)."""
    found = {}
    for pattern, depth in (("*.mtx*", 0), ("*/*.mtx*", 1), ("*/*/*.mtx*", 2)):
        for f in sorted(folder.glob(pattern)):
            name = _mtx_name(f)
            if name is None or not f.is_file() or (depth and f.parent.name != name):
                continue
            group = f.parent.parent.name if depth == 2 else ""
            found.setdefault((name, group), f)   # .mtx sorts before .mtx.gz: it wins
    for (name, group), f in list(found.items()):
        # tarballs extracted flat: '<base>_b.mtx' beside '<base>.mtx' with its row count and
        # another column count is the base's auxiliary data ('G2_circuit' beside 'G2' stays)
        base = name.rpartition("_")[0]
        if group or not base or (base, "") not in found:
            continue
        h, hb = mtx_header(f), mtx_header(found[base, ""])
        if h["rows"] == hb["rows"] and h["cols"] != h["rows"]:
            del found[name, group]
    return [(group, name, f) for (name, group), f in sorted(found.items())]


def _group_from_manifests(name):
    for folder in search_path(None):
        for row in _read_manifest(folder) or ():
            if row.get("name") == name and row.get("group"):
                return row["group"]
    return None


def download(name, group=None, cache_dir=None, base_url=DEFAULT_BASE_URL, timeout=60.0):
    """Download a SuiteSparse matrix into the cache (once) and return the cached file.

    Fetches ``{base_url}/MM/{group}/{name}.tar.gz``, extracts ``{name}/{name}.mtx`` to
    ``{cache}/{group}/{name}/{name}.mtx`` via a temporary file and an atomic rename, and checks
    that it parses. When that file exists already, no request is made.

    Parameters
    ----------
    name : str
        Matrix name, or ``"group/name"``.
    group : str, optional
        SuiteSparse group (``"HB"``, ``"Boeing"``, ...). Needed to form the URL; when omitted it
        is taken from a ``MANIFEST.tsv`` on ``$MPSOLVE_MATRIX_PATH`` if one lists the matrix.
    cache_dir : str or path-like, optional
        Cache folder; default ``$MPSOLVE_CACHE`` or ``~/.cache/mpsolve/suitesparse``.
    base_url : str, optional
        Collection site (default ``https://sparse.tamu.edu``); tests point it at a local server.
    timeout : float, optional
        Seconds to wait for the server.

    Returns
    -------
    pathlib.Path
        The cached ``.mtx`` file; :func:`load` finds it by name from then on.

    Raises
    ------
    ValueError
        No group given and none known.
    CollectionError
        HTTP error (e.g. 404: unknown name/group), no network, or an archive without the
        matrix. Nothing is left in the cache then.
    MatrixMarketError
        The downloaded matrix does not parse.
    """
    g, base = _split_name(name)
    group = group or g or _group_from_manifests(base)
    if not group:
        raise ValueError(f"download({base!r}): argument group is required, because SuiteSparse "
                         f"URLs are {base_url}/MM/<group>/<name>.tar.gz; look the group up on "
                         f"{DEFAULT_BASE_URL} and pass e.g. group='HB'")
    if "/" in group or group in (".", ".."):
        raise ValueError(f"argument group {group!r} is not a valid SuiteSparse group name")
    root = get_cache_dir(cache_dir)
    target_dir = root / group / base
    target = target_dir / f"{base}.mtx"
    if target.is_file():
        return target
    url = (f"{base_url.rstrip('/')}/MM/{urllib.parse.quote(group)}/"
           f"{urllib.parse.quote(base)}.tar.gz")
    target_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_tar = tempfile.mkstemp(prefix=f".{base}.", suffix=".tar.gz.part", dir=target_dir)
    fd2, tmp_mtx = tempfile.mkstemp(prefix=f".{base}.", suffix=".mtx.part", dir=target_dir)
    os.close(fd2)
    try:
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as r:
                shutil.copyfileobj(r, out, 1 << 20)
        except urllib.error.HTTPError as exc:
            hint = (" (unknown matrix name or group? check both on "
                    f"{DEFAULT_BASE_URL})" if exc.code == 404 else "")
            raise CollectionError(f"download({base!r}, group={group!r}): {url} answered HTTP "
                                  f"{exc.code} {exc.reason}{hint}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:   # (ValueError: a
            reason = getattr(exc, "reason", exc)                      # bad URL scheme)
            raise CollectionError(f"download({base!r}, group={group!r}): cannot reach {url} "
                                  f"({reason}); offline? Copy {base}.mtx(.gz) into a folder on "
                                  "MPSOLVE_MATRIX_PATH instead") from None
        try:
            with tarfile.open(tmp_tar, "r:*") as tar:
                member = None
                for m in tar.getmembers():
                    if m.isfile() and m.name.rsplit("/", 1)[-1] == f"{base}.mtx":
                        member = m
                        break
                if member is None:
                    raise CollectionError(f"download({base!r}, group={group!r}): the archive "
                                          f"from {url} holds no {base}/{base}.mtx")
                src = tar.extractfile(member)
                with open(tmp_mtx, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
        except tarfile.TarError as exc:
            raise CollectionError(f"download({base!r}, group={group!r}): {url} did not return "
                                  f"a valid .tar.gz ({exc})") from None
        try:
            read_mtx(tmp_mtx)        # verify before publishing
        except MatrixMarketError as exc:
            raise MatrixMarketError(f"download({base!r}, group={group!r}): the matrix from "
                                    f"{url} does not parse: {exc}") from None
        os.replace(tmp_mtx, target)  # atomic: readers see no file or the whole file
    finally:
        for f in (tmp_tar, tmp_mtx):
            try:
                os.unlink(f)
            except FileNotFoundError:
                pass
        if not target.exists():
            for d in (target_dir, target_dir.parent):   # (the group's folder too)
                if d == root:
                    break
                try:
                    d.rmdir()                           # (only where empty)
                except OSError:
                    break
    return target
