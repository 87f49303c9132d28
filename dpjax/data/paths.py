"""Where dataset files live, and how to fetch them.

Resolution order of the data directory (:func:`data_dir`):

1. the ``path`` argument, if given;
2. the environment variable ``DPJAX_DATA_DIR``;
3. the user cache directory ``$XDG_CACHE_HOME/dpjax`` (``~/.cache/dpjax`` when ``XDG_CACHE_HOME`` is unset).

Inside that directory every dataset is looked up both in its own sub-folder (``<dir>/mnist/mnist.npz``; the layout of
``shared/data`` in this project) and directly (``<dir>/mnist.npz``). The ``download_*`` functions write into the
sub-folder. Nothing is ever downloaded implicitly: loaders only read local files and raise :class:`DatasetNotFoundError`
with instructions otherwise.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import tempfile
import urllib.request
from collections.abc import Sequence

ENV_VAR = "DPJAX_DATA_DIR"
HOW_TO_SET = (
    f"Give the data directory with --data-dir DIR (every dpjax command that reads data), data_dir=DIR "
    f"(Python) or the environment variable {ENV_VAR}; the default is the cache directory ~/.cache/dpjax"
)

__all__ = ["ENV_VAR", "DatasetNotFoundError", "data_dir", "download", "find_file", "sha256_file"]


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not in the data directory.

    The message names the directory searched, the file names expected, the environment variable that sets the directory
    and how to download the data.
    """

    def __init__(self, dataset: str, searched: Sequence[pathlib.Path], expected: Sequence[str], how_to_get: str):
        self.dataset = dataset
        self.searched = [pathlib.Path(p) for p in searched]
        self.expected = list(expected)
        self.how_to_get = how_to_get
        dirs = ", ".join(str(p) + ("" if p.is_dir() else " (does not exist)") for p in self.searched)
        files = ", ".join(self.expected)
        msg = (
            f"{dataset} data not found. Searched: {dirs}. Expected file(s): {files}. "
            f"{HOW_TO_SET}. To get the data: {how_to_get}"
        )
        super().__init__(msg)


def default_cache_dir() -> pathlib.Path:
    """dpjax's cache directory: ``$XDG_CACHE_HOME/dpjax`` (``~/.cache/dpjax``); data and compiled programs go below it."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg) if xdg else pathlib.Path.home() / ".cache"
    return base / "dpjax"


def data_dir(path: str | os.PathLike | None = None) -> pathlib.Path:
    """Returns the data directory: ``path``, else ``$DPJAX_DATA_DIR``, else the user cache dir.

    The one rule of every loader and command (``--data-dir`` is ``path``). The directory is not created and need not
    exist (loaders then raise :class:`DatasetNotFoundError`). ``~`` is expanded.
    """
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            raise ValueError(f"path={path!r} must be a str or os.PathLike")
        if str(path) == "":
            raise ValueError("path='' must be a non-empty path")
        return pathlib.Path(path).expanduser()
    env = os.environ.get(ENV_VAR)
    if env:
        return pathlib.Path(env).expanduser()
    return default_cache_dir()


def named_dir_missing(path: str | os.PathLike | None = None) -> bool:
    """True when the user named a data directory (``path`` or ``$DPJAX_DATA_DIR``) that does not exist.

    Loaders with a fallback source (MNIST's packaged copy) must not fall back then: a mistyped ``--data-dir`` is an
    error, not a request for other data.
    """
    named = path is not None or bool(os.environ.get(ENV_VAR))
    return named and not data_dir(path).is_dir()


def candidate_dirs(base: pathlib.Path, subdir: str) -> list[pathlib.Path]:
    """``[base/subdir, base]``: the places a dataset's files are looked for."""
    return [base / subdir, base]


def find_file(base: pathlib.Path, subdir: str, names: Sequence[str]) -> pathlib.Path | None:
    """First existing ``d/name`` for ``d`` in :func:`candidate_dirs` and ``name`` in ``names``."""
    for d in candidate_dirs(base, subdir):
        for name in names:
            p = d / name
            if p.is_file():
                return p
    return None


def sha256_file(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk_size)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def download(url: str, dest: str | os.PathLike, sha256: str | None = None, *, timeout: float = 60.0,
             overwrite: bool = False) -> pathlib.Path:
    """Downloads ``url`` to ``dest`` atomically and verifies its SHA-256.

    The bytes go to a temporary file in ``dest``'s directory, are hashed while written, and the file is moved into place
    with :func:`os.replace` only when the checksum matches (``sha256=None`` skips the check). On a mismatch the
    temporary file is removed and a ``ValueError`` is raised, so ``dest`` is never left half-written. An existing
    ``dest`` is kept (and verified) unless ``overwrite=True``. Any URL scheme ``urllib`` supports works, including
    ``file://`` (used by the tests).
    """
    if not isinstance(url, str) or not url:
        raise ValueError(f"url={url!r} must be a non-empty string")
    if sha256 is not None:
        if not isinstance(sha256, str) or len(sha256) != 64:
            raise ValueError(f"sha256={sha256!r} must be a 64-character hex string")
        sha256 = sha256.lower()
    dest = pathlib.Path(dest).expanduser()
    if dest.is_file() and not overwrite:
        if sha256 is not None:
            got = sha256_file(dest)
            if got != sha256:
                raise ValueError(
                    f"existing file {dest} has sha256 {got}, expected {sha256}; "
                    f"delete it or pass overwrite=True")
        return dest
    h = hashlib.sha256()
    with _atomic_file(dest) as out, urllib.request.urlopen(url, timeout=timeout) as resp:
        while True:
            block = resp.read(1 << 20)
            if not block:
                break
            h.update(block)
            out.write(block)
        got = h.hexdigest()
        if sha256 is not None and got != sha256:
            raise ValueError(f"checksum mismatch for {url}: sha256 {got}, expected {sha256}")
    return dest


@contextlib.contextmanager
def _atomic_file(dest: pathlib.Path):
    """A binary file open for writing that becomes ``dest`` (:func:`os.replace`) only when the ``with`` block completes:
    it is a temporary file in ``dest``'s directory, removed on any error, so ``dest`` is never left half-written."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
        os.replace(tmp_name, dest)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
