import os
import pathlib

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

from tests import _shared  # noqa: E402  (the one rule for real data; see tests/_shared.py)

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = _shared.SHARED_DATA


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    """``../shared/data``, or a skip naming it (absent beside this clone, or hidden by $DPJAX_TESTS_HIDE_SHARED)."""
    return _shared.require_shared_data()


@pytest.fixture(scope="session")
def mnist_dir(tmp_path_factory) -> pathlib.Path:
    """A data directory that yields the real MNIST (../shared's, else the packaged copy the [test] extra installs)."""
    return _shared.mnist_data_dir(tmp_path_factory)
