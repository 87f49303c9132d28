"""The shuffle-SCO rate reports apply the verdict rule (``dpjax.sweep.select.slope_verdict``) and regenerate
from kept results: synthetic points, no optimisation run."""

import csv
import math

import numpy as np
import pytest

from dpjax.reproduce import shuffle_sco as R

PROTOCOL = "p_agd_phased"  # Table 1: n-slope -2, d-slope +1 (Theorem 4.8)


def _rows(ns, ds, *, n_exp=-2.0, d_exp=1.0, seeds=6, spread=0.05, seed=0):
    """Points whose seeds follow value = c n^n_exp (d/8)^d_exp with lognormal noise; the twin 10x below, the
    explicit bound inside the [0.01, 0.3] L D window."""
    inst = R.config.INSTANCES[R.config.TABLE1[PROTOCOL][0]]
    rng = np.random.default_rng(seed)
    bound = 0.1 * 2.0 * inst.lipschitz
    c = 1e-3 / (ns[0] ** n_exp)  # the smallest n at 1e-3, far below 0.3 L D

    def point(n, d):
        return c * n**n_exp * (d / 8) ** d_exp * np.exp(spread * rng.standard_normal(seeds))

    rows = []
    for n in ns:
        ex = point(n, 8)
        rows.append(R.claims.result_row(PROTOCOL, inst.name, "n", n, 8, ex, 0.9, bound=bound, schedule="lan", accountant="x"))
        rows.append(R.claims.result_row(f"{PROTOCOL}_twin", inst.name, "n", n, 8, ex / 10, 0.9, schedule="lan", accountant="none"))
    n_d = ns[len(ns) // 2]
    rows += [R.claims.result_row(PROTOCOL, inst.name, "d", n_d, d, point(n_d, d), 0.9, bound=bound, schedule="lan") for d in ds]
    return rows


def _summary(rows, seeds=6):
    return R.claims.slope_summary(rows, PROTOCOL, eps=0.9, schedule="lan", ceiling="bound", fit="bound", n_seeds=seeds)


def test_slope_summary_holds_differs_and_is_inconclusive_by_the_rule():
    s = _summary(_rows([10**4, 3 * 10**4, 10**5, 3 * 10**5, 10**6], [2, 8, 32, 128]))
    assert s["verdict_n"] == "holds" and s["verdict_d"] == "holds"
    assert s["ci_lo_n"] >= -2.15 and s["ci_hi_n"] <= -1.85 and s["n_points_n"] == 5
    s = _summary(_rows([10**4, 3 * 10**4, 10**5, 3 * 10**5, 10**6], [2, 8, 32, 128], n_exp=-0.8, d_exp=0.4))
    assert s["verdict_n"] == "differs" and s["verdict_d"] == "differs"
    # three points (and three d values) are never a verdict, even on an exact power law
    s = _summary(_rows([10**4, 10**5, 10**6], [2, 8, 32], spread=0.001))
    assert s["verdict_n"] == "inconclusive" and "only 3 points" in s["reason_n"]
    assert s["verdict_d"] == "inconclusive"
    # four points over half a decade: too short a span
    s = _summary(_rows([10**5, 1.5 * 10**5, 2 * 10**5, 3 * 10**5], [2, 8, 32, 128], spread=0.001))
    assert s["verdict_n"] == "inconclusive" and "decades" in s["reason_n"]


def _write(tmp_path, rows):
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(tmp_path / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        w.writerows(rows)


def test_regimes_report_only_regenerates_from_kept_results(tmp_path):
    rows = _rows([10**4, 3 * 10**4, 10**5, 3 * 10**5, 10**6], [2, 8, 32, 128])
    # a kept run of REGIMES' first row (p_agd_phased at eps 0.9, schedule "paper"), its seeds kept
    for r in rows:
        r["schedule"] = "paper"
    _write(tmp_path, rows)
    (tmp_path / "report.md").write_text("# shuffle-sco-regimes (full; 153 s so far)\n")
    R.regimes.regimes_report_only(tmp_path, quick=False)
    text = (tmp_path / "report.md").read_text()
    assert text.splitlines()[0] == "# shuffle-sco-regimes (full; 153 s)"  # a finished run is not "so far"
    assert "bootstrap over 6 seeds" in text and "Verdict rule" in text
    with open(tmp_path / "slopes.csv") as f:
        (s,) = list(csv.DictReader(f))
    assert s["verdict_n"] == "holds" and float(s["ci_lo_n"]) < float(s["slope_n"]) < float(s["ci_hi_n"])
    assert (tmp_path / "shuffle_sco_regimes.png").stat().st_size > 0


def test_kept_results_without_seed_values_use_the_band(tmp_path):
    rows = _rows([10**4, 3 * 10**4, 10**5, 3 * 10**5, 10**6], [2, 8, 32, 128], seeds=10, spread=0.2)
    live = _summary(rows, seeds=10)
    for r in rows:  # a results.csv written before per-seed values were kept
        del r["seed_values"], r["seeds"]
    _write(tmp_path, rows)
    kept = _summary(R.outputs.read_rows(tmp_path / "results.csv"), seeds=10)
    assert kept["slope_n"] == pytest.approx(live["slope_n"])
    assert "parametric" in kept["interval_n"] and "bootstrap over 10 seeds" in live["interval_n"]
    width = lambda s: s["ci_hi_n"] - s["ci_lo_n"]  # noqa: E731
    assert 0.5 < width(kept) / width(live) < 2.0
    assert not math.isnan(kept["ci_lo_d"])


def test_cli_report_only_checks_the_kept_run(tmp_path, capsys):
    """``dpjax reproduce NAME --report-only --out DIR``: regenerates a kept run; refuses a run of another figure
    or protocol, a folder without results, and a figure that cannot regenerate."""
    import json

    from dpjax import cli

    rows = _rows([10**4, 3 * 10**4, 10**5, 3 * 10**5, 10**6], [2, 8, 32, 128])
    for r in rows:
        r["schedule"] = "paper"
    _write(tmp_path, rows)
    (tmp_path / ".dpjax-run.json").write_text(json.dumps({"command": "reproduce", "figure": "shuffle-sco-regimes",
                                                          "quick": False, "seed": 0, "construction": "paper"}))
    assert cli.main(["reproduce", "shuffle-sco-regimes", "--report-only", "--out", str(tmp_path)]) == 0
    assert "holds" in (tmp_path / "report.md").read_text()
    assert cli.main(["reproduce", "shuffle-sco-regimes", "--quick", "--report-only", "--out", str(tmp_path)]) == 2
    assert "quick=False" in capsys.readouterr().err
    assert cli.main(["reproduce", "shuffle-sco-rates", "--report-only", "--out", str(tmp_path)]) == 2
    assert cli.main(["reproduce", "shuffle-sco-rates", "--report-only", "--out", str(tmp_path / "none")]) == 2
    assert "no results.csv" in capsys.readouterr().err
    assert cli.main(["reproduce", "user-level-noise", "--report-only", "--out", str(tmp_path)]) == 2
    assert "cannot regenerate" in capsys.readouterr().err
