"""Every grid driver goes through ``dpjax.sweep.run_grid`` and reproduces its pre-refactoring numbers.

The expectations (``data/pipeline_expectations.npz``) were written by
``python -m tests.sweep.pipeline_cases --data-dir ../shared/data`` on the code
before the drivers were moved onto the sweep executor; equality is exact
(the same compiled arithmetic, the same keys, the same chunk widths).
"""

import numpy as np
import pytest

from dpjax.sweep import program
from tests.sweep import pipeline_cases as cases


@pytest.fixture
def expected():
    return np.load(cases.EXPECTATIONS)


@pytest.fixture
def counted(monkeypatch):
    """Counts chunk executions and makes the old per-driver path (``run_many``) fail loudly."""
    calls = {"chunks": 0}
    original = program.ChunkExecutor.__call__

    def spy(self, args):
        calls["chunks"] += 1
        return original(self, args)

    def bypass(*args, **kwargs):
        raise AssertionError("a grid driver called run_many instead of dpjax.sweep.run_grid")

    monkeypatch.setattr(program.ChunkExecutor, "__call__", spy)
    import dpjax.engine

    monkeypatch.setattr(dpjax.engine, "run_many", bypass)
    monkeypatch.setattr(dpjax.engine.runner, "run_many", bypass)
    return calls


def _check(got: dict, expected, prefix: str):
    names = [k for k in expected.files if k.startswith(prefix)]
    assert names and sorted(names) == sorted(got)
    for k in names:
        np.testing.assert_array_equal(got[k], expected[k], err_msg=k)


@pytest.mark.parametrize("case", sorted(cases.CASES))
def test_driver_through_executor_and_unchanged(case, expected, counted):
    got = cases.CASES[case]()
    assert counted["chunks"] > 0
    _check(got, expected, case + "/")


def test_diff2_driver_through_executor_and_unchanged(expected, counted, shared_data):
    got = cases.diff2_dataset(str(shared_data))
    assert counted["chunks"] > 0
    _check(got, expected, "diff2/")
