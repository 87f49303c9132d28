"""experiments/benchmarks/bench_cross_device_scale.py at ``--quick`` (200 / 2,000 synthetic clients, cohort 10,
2 rounds, each size in its own subprocess): every case measured with positive times and memory, the data's device
bytes growing with the population by exactly its index rows, the ratio row and the table printed, --json written."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks._bench_module import load_bench

@pytest.mark.slow  # two subprocesses, each compiling an MLP round program
def test_quick_grid(tmp_path, capsys):
    bench = load_bench("bench_cross_device_scale")
    out_json = tmp_path / "scale.json"
    res = bench.main(["--quick", "--json", str(out_json)])
    small, large = res["cases"]
    for case in (small, large):
        assert "failed" not in case, case
        assert case["per_round_s"] > 0 and case["compile_s"] > 0 and case["clients_per_s"] > 0
        assert case["peak_rss_bytes"] >= case["peak_rss_after_data_bytes"] > case["data_bytes"] > 0
        assert case["argument_bytes"] >= case["data_bytes"] and not case["overflow"]
        assert case["capacity"] == 10 + 19 + 8  # m + ceil(6 sqrt m) + 8, at every N
    assert (small["clients"], large["clients"]) == (200, 2000)
    per_client = 4 * (small["records"] + 1)  # an index row and a size
    assert large["data_bytes"] - small["data_bytes"] == 1800 * per_client
    assert large["materialised_bytes"] > 10 * large["data_bytes"]  # the SiloData not built
    ratio = res["ratios"][10]
    assert ratio["ratio"] == pytest.approx(large["per_round_s"] / small["per_round_s"])
    text = capsys.readouterr().out
    assert "| 2000 | 10 (37) |" in text and "cohort 10: per round at 2000 clients / at 200 =" in text
    saved = json.loads(out_json.read_text())
    assert saved["cases"][1]["per_round_s"] == large["per_round_s"] and saved["versions"]["jax"]


def test_cli_refuses_a_cohort_above_the_population(capsys):
    bench = load_bench("bench_cross_device_scale", "bench_cross_device_scale_cli")
    with pytest.raises(SystemExit) as exc:
        bench.main(["--clients", "100", "--cohorts", "1000"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--cohorts [1000] must each be <= the smallest of --clients [100]" in err
