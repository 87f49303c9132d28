"""experiments/benchmarks/bench_local_steps.py at a toy size: every variant (runs axis outermost or inside
the silo axis, autodiff or closed-form clip) runs, all four give the same runs up to float rounding,
and the floor table and the figure's floor line print."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys

import pytest

pytestmark = pytest.mark.slow  # eight compilations: CI runs it in its -m slow pass

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_every_variant_runs_and_agrees(capsys):
    spec = importlib.util.spec_from_file_location("bench_local_steps",
                                                  REPO / "experiments" / "benchmarks" / "bench_local_steps.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclass looks its module up
    spec.loader.exec_module(bench)
    bench.main(["--rounds", "2", "--local-steps", "5", "--width", "4", "--silos-per-round", "2", "3",
                "--repeats", "1", "--trials", "1"])
    out = capsys.readouterr().out
    rows = [line.split("|")[1:-1] for line in out.splitlines() if re.match(r"\| [23] \| runs", line)]
    assert len(rows) == 8, out
    for m, name, seconds, _, _, change in rows:
        assert float(seconds) > 0
        assert float(change) < 1e-4, (m, name, change)  # 10 steps: a few float32 roundings at most
    floors = [line for line in out.splitlines() if re.match(r"\| [23] \| [0-9.]+ \|", line)]
    assert len(floors) == 2, out
    assert re.search(r"first grids .*: \d+ s at the floor, \d+ s now", out)
