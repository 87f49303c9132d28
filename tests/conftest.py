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


# Privacy-critical tests carry the ``privacy`` marker (they stay in the default suite; ``-m privacy``
# selects them, e.g. for experiments/mutation/run_mutants.py).
_PRIVACY_PATHS = ("privacy", "accounting", "auditing", "user_level", "dpsgd_general", "diff2", "shuffle_sco", "isrl",
                  "test_clipping.py", "test_noise.py", "test_sampling.py", "test_ghost_clipping.py", "test_contract.py")


def pytest_collection_modifyitems(config, items):
    tests_dir = pathlib.Path(__file__).resolve().parent
    for item in items:
        rel = pathlib.Path(str(item.fspath)).resolve().relative_to(tests_dir)
        if rel.parts and rel.parts[0] in _PRIVACY_PATHS:
            item.add_marker(pytest.mark.privacy)
