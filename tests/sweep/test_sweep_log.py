"""`dpjax sweep` into a log (stderr not a terminal): no carriage-return bar (issue #39, newcomer 8)."""

import io

import pytest

from dpjax import progress
from dpjax.cli import main


@pytest.mark.slow  # compiles a tiny sweep
def test_sweep_progress_in_a_log_has_no_carriage_returns(tiny_toml, tmp_path, monkeypatch):
    progress.configure(quiet=False)
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    assert main(["sweep", str(tiny_toml), "--out", str(tmp_path / "s")]) == 0
    text = log.getvalue()
    assert "\r" not in text and "run/s" not in text
    assert "[dpjax " in text  # the stage lines are there
