import os
import pathlib

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> pathlib.Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"real datasets not present at {SHARED_DATA} (CI and developer machines have them)")
    return SHARED_DATA
