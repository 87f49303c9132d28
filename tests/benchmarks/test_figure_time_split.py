"""experiments/benchmarks/figure_time_split.py on two small --quick figures: each runs as a plain
reproduction in a fresh process, the compile listeners see its compilations (none for the pure-accounting
figure), and the table's parts add up to the wall time."""

from __future__ import annotations

import csv
import importlib.util
import pathlib

import pytest

pytestmark = pytest.mark.slow  # two fresh processes with their imports and compilations

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_rows_split_the_wall_time_and_count_compilations(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("figure_time_split",
                                                  REPO / "experiments" / "benchmarks" / "figure_time_split.py")
    split = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(split)
    split.main(["user-level-lower-bound", "user-level-noise", "--quick", "--csv", str(tmp_path / "rows.csv")])
    out = capsys.readouterr().out
    assert out.count("| user-level-") == 2, out
    rows = {r["figure"]: r for r in csv.DictReader(open(tmp_path / "rows.csv"))}
    compiled, accounting = rows["user-level-lower-bound"], rows["user-level-noise"]
    assert int(compiled["compile_events"]) > 0 and float(compiled["compile_s"]) > 0
    assert int(accounting["compile_events"]) == 0  # user-level-noise is host accounting only
    for r in rows.values():
        parts = sum(float(r[k]) for k in ("trace_s", "lower_s", "compile_s", "rest_s"))
        assert parts == pytest.approx(float(r["wall_s"]), abs=0.05)
        assert float(r["rest_s"]) > 0 and r["protocol"] == "quick"
