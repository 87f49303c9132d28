"""Progress of long commands: stage lines on stderr before any heavy work, bars only on a terminal,
`--quiet`, the executor's announcement of a paper driver's grids, and `dpjax audit`'s summary line."""

import io
import re

import jax
import numpy as np
import pytest

from dpjax import progress
from dpjax.cli import main


class _Stop(Exception):
    """Raised by the stand-in for the heavy work: the test only needs what was printed before it."""


def _stop_at_heavy_work(monkeypatch, capsys, module, name):
    seen = []

    def heavy(*args, **kwargs):
        seen.append(capsys.readouterr())
        raise _Stop

    monkeypatch.setattr(module, name, heavy)
    return seen


def test_reproduce_prints_stage_lines_before_the_heavy_work(tmp_path, monkeypatch, capsys):
    """`reproduce user-level-convex-erm --quick` was silent for 4.5 minutes: its first Phased-ERM solve
    (the heavy work, replaced here) must come after the command's and the cell's stage lines."""
    from dpjax.reproduce.user_level import rates

    seen = _stop_at_heavy_work(monkeypatch, capsys, rates, "phased_erm_runs")
    with pytest.raises(_Stop):
        main(["reproduce", "user-level-convex-erm", "--quick", "--out", str(tmp_path / "out")])
    (before,) = seen
    lines = before.err.splitlines()
    assert lines[0].startswith("[dpjax ") and "reproduce user-level-convex-erm --quick: loading" in lines[0]
    assert any("running into" in ln for ln in lines)
    assert "D5 sweep over m: cell n=100, m=4, d=5: Phased-ERM runs" in lines[-1]
    assert "D5 sweep over m: cell n=100, m=4, d=5 (8 runs)" in lines[-2]
    assert before.out == ""  # stdout keeps the result line only
    assert not (tmp_path / "out").exists()  # the claimed directory is released when the run fails


def test_quiet_silences_the_stage_lines(tmp_path, monkeypatch, capsys):
    from dpjax.reproduce.user_level import rates

    seen = _stop_at_heavy_work(monkeypatch, capsys, rates, "phased_erm_runs")
    with pytest.raises(_Stop):
        main(["reproduce", "user-level-convex-erm", "--quick", "--quiet", "--out", str(tmp_path / "out")])
    assert seen[0].err == ""
    main(["reproduce", "--list"])  # the next command starts loud again
    assert not progress.is_quiet()


def test_stage_line_format_and_clock(capsys):
    progress.configure(quiet=False, restart_clock=True)
    progress.stage("loading")
    err = capsys.readouterr().err
    assert err.startswith("[dpjax ") and err.endswith("s] loading\n")
    assert float(err.split()[1]) < 5.0


def test_bars_are_drawn_only_on_a_terminal(monkeypatch):
    progress.configure(quiet=False)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert progress.bar(total=3).disable  # a log file gets the stage lines instead
    monkeypatch.setattr(progress, "_stderr_is_terminal", lambda: True)
    assert not progress.bar(total=3).disable
    progress.configure(quiet=True)
    try:
        assert progress.bar(total=3).disable
    finally:
        progress.configure(quiet=False)


@pytest.mark.slow
def test_the_executor_announces_a_drivers_grid(capsys):
    """A paper driver passes no progress title; under `progress.grid(name)` (what `dpjax reproduce` sets)
    the executor says how many runs and chunks it computes, and when they are done."""
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.engine import SiloData, run_grid, stack_hparams
    from dpjax.problems import LogisticRegression

    rng = np.random.default_rng(0)
    data = SiloData.from_silos([rng.normal(size=(12, 3)).astype(np.float32) for _ in range(2)],
                               [rng.integers(0, 2, 12).astype(np.float32) for _ in range(2)])
    alg = NoisyMbSgd(LogisticRegression(3), num_rounds=3, batch_size=4)
    hps = stack_hparams([MbSgdHParams.create(lr, 0.5, 1.0) for lr in (0.1, 0.2, 0.4)])
    keys = jax.random.split(jax.random.key(0), 3)
    progress.configure(quiet=False)
    run_grid(alg, data, hps, keys, chunk_size=2)
    assert capsys.readouterr().err == ""  # outside a command: silent, as before
    with progress.grid("my-figure"):
        run_grid(alg, data, hps, keys, chunk_size=2)
    err = capsys.readouterr().err
    chunks = re.search(r"my-figure: 3 runs in (\d+) compiled chunk\(s\)", err).group(1)
    assert f"my-figure: {chunks} chunk(s) done" in err
    assert progress.grid_title() is None


@pytest.mark.parametrize("passed,line", [
    ((True, True, True), "audit: 3 of 3 passed, none failed in 12 s"),
    ((True, False, False), "audit: 1 of 3 passed, 2 failed (dp-sgd, dp-ftrl) in 12 s"),
])
def test_audit_summary_line_counts_and_names_failures(passed, line):
    from dpjax.auditing.cli import summary_line

    assert summary_line(["dp-gd", "dp-sgd", "dp-ftrl"], passed, 12.2) == line


@pytest.mark.slow
def test_the_host_round_loop_says_which_round_it_is_in(capsys, monkeypatch):
    """dpsgd-mnist's chunks (a per-round host loop) ran 5 minutes without a line in a log: under a command
    the loop prints its round at most every 10 s (a clock that advances 11 s per reading here)."""
    import types

    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.engine import SiloData, program, run_grid, stack_hparams
    from dpjax.problems import LogisticRegression

    ticks = iter(range(0, 10_000, 11))
    monkeypatch.setattr(program, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    rng = np.random.default_rng(1)
    data = SiloData.from_silos([rng.normal(size=(8, 2)).astype(np.float32)], [rng.integers(0, 2, 8).astype(np.float32)])
    alg = NoisyMbSgd(LogisticRegression(2), num_rounds=3, batch_size=2)
    hps = stack_hparams([MbSgdHParams.create(0.1, 0.5, 1.0)])
    progress.configure(quiet=False)
    with progress.grid("cnn"):
        run_grid(alg, data, hps, jax.random.split(jax.random.key(0), 1), round_loop="host")
    err = capsys.readouterr().err
    assert [f"round {r}/3" in err for r in (1, 2, 3)] == [True, True, True], err
