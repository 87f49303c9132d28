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


# -- the CI pass without ../shared (.ci/run): only the tests that touch real data ---------------------------
ONLY_REAL_DATA_ENV = "DPJAX_TESTS_ONLY_REAL_DATA"
_DATA_FIXTURES = {"shared_data", "mnist_dir", "mnist_real", "mnist_pca", "real_data"}
_DATA_HELPERS = ("shared_file", "require_shared_data", "shared_data_dir", "load_real_mnist", "mnist_data_dir",
                 "SHARED_DATA")


def _uses_real_data(item) -> bool:
    """A test that takes a real-data fixture, or whose code (or a module-level helper it calls) uses
    the real-data helpers of tests/_shared.py."""
    import inspect

    if _DATA_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    fn, module = getattr(item, "function", None), getattr(item, "module", None)
    if fn is None or module is None:
        return False

    def source(f) -> str:
        try:
            return inspect.getsource(f)
        except (OSError, TypeError):
            return ""

    names = set(_DATA_HELPERS) | {n for n, f in vars(module).items() if inspect.isfunction(f)
                                  and f.__module__ == module.__name__ and any(h in source(f) for h in _DATA_HELPERS)}
    text = source(fn)
    return any(n in text for n in names)

# Privacy-critical tests carry the ``privacy`` marker (they stay in the default suite; ``-m privacy``
# selects them, e.g. for experiments/mutation/run_mutants.py).
# Folders (paths under tests/, with everything below them) and file names (anywhere under tests/).
_PRIVACY_PATHS = ("privacy", "pins", "accounting", "auditing", "user_level", "algorithms", "parts", "reproduce/diff2",
                  "reproduce/shuffle_sco", "test_clipping.py", "test_noise.py", "test_sampling.py",
                  "test_ghost_clipping.py", "test_contract.py", "test_batch_clipping_privacy.py",
                  "test_dpsgd_mnist_authors.py", "test_dpsgd_mnist_report.py",
                  # layout-dependent draws: which silo gets which key under blocks and sharding
                  "test_silo_blocks.py", "test_silo_sharding.py", "test_keys.py")


def _is_privacy_path(rel: pathlib.PurePath) -> bool:
    folders = {"/".join(rel.parts[:i]) for i in range(1, len(rel.parts))}
    return bool(folders & set(_PRIVACY_PATHS)) or rel.name in _PRIVACY_PATHS


def _mark_privacy(items) -> None:
    tests_dir = pathlib.Path(__file__).resolve().parent
    for item in items:
        rel = pathlib.Path(str(item.fspath)).resolve().relative_to(tests_dir)
        if _is_privacy_path(rel):
            item.add_marker(pytest.mark.privacy)


def pytest_collection_modifyitems(config, items):
    """Marks the privacy-critical tests ``privacy``; with $DPJAX_TESTS_ONLY_REAL_DATA=1 keeps only the
    real-data tests (``.ci/run``'s second pass, which runs them with ../shared hidden to prove that a bare
    clone passes: the other tests never read it)."""
    _mark_privacy(items)
    if os.environ.get(ONLY_REAL_DATA_ENV, "") in ("", "0"):
        return
    keep = [it for it in items if _uses_real_data(it)]
    config.hook.pytest_deselected(items=[it for it in items if not _uses_real_data(it)])
    items[:] = keep


# -- process-wide state a test must leave as it found it ---------------------------------------------------
# A test that flips JAX's global configuration changes every later test on its xdist worker: one that
# enabled float64 process-wide once made tests/tasks/test_isrl_mnist.py's private error 0.52 instead of
# 0.38 (other random streams), in CI only, depending on which worker ran what before it.
_GLOBAL_JAX_OPTIONS = ("jax_enable_x64", "jax_default_matmul_precision", "jax_default_prng_impl",
                       "jax_threefry_partitionable", "jax_numpy_rank_promotion", "jax_numpy_dtype_promotion",
                       "jax_debug_nans", "jax_debug_infs", "jax_disable_jit", "jax_enable_checks",
                       "jax_log_compiles", "jax_platforms", "jax_default_device")
_GLOBAL_ENV = ("JAX_PLATFORMS", "XLA_FLAGS", "JAX_ENABLE_X64")


def _global_state() -> dict:
    # jax is imported here, not at collection, and before every test, so that a test which imports jax and
    # flips an option is compared with the options it found (the checks that a module does not import jax
    # run in subprocesses)
    import jax

    state = {f"${name}": os.environ.get(name) for name in _GLOBAL_ENV}
    state.update({name: getattr(jax.config, name) for name in _GLOBAL_JAX_OPTIONS})
    return state


def _changed(before: dict, after: dict) -> dict:
    return {k: (v, after[k]) for k, v in before.items() if after[k] != v}


@pytest.fixture(autouse=True)
def _leaves_global_state_alone():
    """Fails (at teardown) the test that changed JAX's global options or the JAX environment variables,
    and restores them so that the leak cannot spread to the tests after it."""
    before = _global_state()
    yield
    changed = _changed(before, _global_state())
    if not changed:
        return
    import jax

    for key, (old, _) in changed.items():
        if key.startswith("$"):
            if old is None:
                os.environ.pop(key[1:], None)
            else:
                os.environ[key[1:]] = old
        else:
            jax.config.update(key, old)
    pytest.fail("changed process-wide state and did not restore it (it would alter later tests on this "
                "worker): " + ", ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in changed.items()))
