"""The accelerator suite (experiments/benchmarks/device_suite.py) at its reduced CPU size: the sections
that need no dataset (the Fig. 4 sweep on synthetic silos, the DP steps) print a roofline row per program
with a finite measured / floor, and the Fig. 4 protocol row counts the sweep's chunk calls."""

from __future__ import annotations

import pytest
import csv
import importlib.util
import math
import pathlib

pytestmark = pytest.mark.slow  # minutes of CPU: CI runs it in its -m slow pass

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_reduced_suite_writes_its_roofline_rows(tmp_path):
    spec = importlib.util.spec_from_file_location("device_suite", REPO / "experiments" / "benchmarks" / "device_suite.py")
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    assert suite.main(["--reduced", "--sections", "fig4", "dp-steps", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "device_suite.csv") as f:
        rows = list(csv.DictReader(f))
    groups = {r["group"] for r in rows}
    assert groups == {"fig4", "dp-step"}, groups
    assert {r["program"] for r in rows if r["group"] == "dp-step"} == {"mlp private (ghost) (batch 8)",
                                                                     "mlp non-private (batch 8)"}
    for r in rows:
        ratio = float(r["measured_over_floor"])
        assert math.isfinite(ratio) and ratio >= 0.5, r  # the floor can't be beaten by much (test_roofline.py)
    with open(tmp_path / "device_suite_protocols.csv") as f:
        (proto,) = list(csv.DictReader(f))
    # the reduced sweep: 2 step sizes x 2 epsilons x 1 repetition x 1 trial = 4 runs, one chunk
    assert proto["figure"] == "fig4" and int(proto["calls"]) >= 1 and float(proto["measured_s"]) > 0


def test_reduced_suite_runs_its_dataset_sections(tmp_path, shared_data):
    """The DIFF2 probe (300-record California / gas-turbine splits) and the dpsgd-mnist section on real
    data: a section that breaks (a renamed function, say) fails the suite rather than printing ``skipped``."""
    spec = importlib.util.spec_from_file_location("device_suite", REPO / "experiments" / "benchmarks" / "device_suite.py")
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    assert suite.main(["--reduced", "--sections", "diff2", "dpsgd", "--data-dir", str(shared_data),
                       "--out", str(tmp_path)]) == 0
    with open(tmp_path / "device_suite.csv") as f:
        groups = {r["group"] for r in csv.DictReader(f)}
    assert {"diff2 california_housing", "diff2 gas_turbine", "dpsgd-mnist"} <= groups, groups
    with open(tmp_path / "device_suite_protocols.csv") as f:
        protocols = list(csv.DictReader(f))
    extrapolated = [p for p in protocols if p["protocol"].startswith("[reduced") and "full Figs. 1-2" in p["protocol"]]
    assert len(extrapolated) == 2 and all(float(p["measured_s"]) > 0 for p in extrapolated), protocols
