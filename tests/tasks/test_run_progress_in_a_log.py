"""`dpjax run` in a log (stderr not a terminal): stage lines, no carriage-return bar (issue #39, newcomer 8)."""

import io

import pytest

from dpjax import progress
from dpjax.tasks import isrl_mnist
from tests.tasks.test_isrl_mnist import _synthetic


@pytest.mark.slow  # ~10 s: compiles the trial
def test_run_writes_stage_lines_not_a_bar_into_a_log(tmp_path, monkeypatch):
    progress.configure(quiet=False)
    log = io.StringIO()  # not a terminal
    monkeypatch.setattr("sys.stderr", log)
    cfg = isrl_mnist.IsrlMnistConfig(epsilon=2.0, rounds=2, silos_per_round=2, learning_rates=(0.1,), repetitions=1,
                                     baseline=False)
    isrl_mnist.run(cfg, None, progress=True, dataset=_synthetic(num_silos=2, n=40, d=3))
    text = log.getvalue()
    assert "\r" not in text and "it/s" not in text and "stage/s" not in text
    lines = [line for line in text.splitlines() if "isrl-mnist-trial [" in line]
    assert [line.split("]: ")[-1] for line in lines] == ["load data", "calibrate noise", "train ISRL-DP MB-SGD",
                                                         "train non-private MB-SGD", "write results"]
    assert all(line.startswith("[dpjax ") for line in lines)
