"""experiments/benchmarks/bench_user_level_solver.py at a toy size: the peaks are measured, a row per lane
count prints with positive times, and the floors grow with the lanes as their formulas say."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest

pytestmark = pytest.mark.slow  # a compilation per lane count

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_rows_and_floors(capsys):
    spec = importlib.util.spec_from_file_location("bench_user_level_solver",
                                                  REPO / "experiments" / "benchmarks" / "bench_user_level_solver.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--users", "10", "--items", "16", "--dim", "3", "--lanes", "1", "4", "--iters", "3",
                "--repeats", "1", "--peak-size", "128"])
    out = capsys.readouterr().out
    assert re.search(r"float64 matmul peak [0-9.]+ GFLOP/s, read [0-9.]+ GB/s", out), out
    rows = [[float(c.split()[0]) for c in line.split("|")[1:-1]] for line in out.splitlines()
            if re.match(r"\| [14] \|", line)]
    assert [r[0] for r in rows] == [1, 4]
    (_, t1, flop1, data1, inter1, _), (_, t4, flop4, data4, inter4, _) = rows
    assert t1 > 0 and t4 > 0
    assert flop4 == pytest.approx(4 * flop1, rel=0.02) and data4 == data1  # FLOPs per lane; data read once
    assert inter4 > inter1 > data1  # the [lanes, N] intermediates come on top of the data
