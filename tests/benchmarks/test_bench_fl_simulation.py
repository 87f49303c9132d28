"""experiments/benchmarks/bench_fl_simulation.py's dpjax path at a toy size (20 clients, q = 0.25, 2 rounds, no
peers): the single-configuration and 8-configuration sweep rows are measured with positive times, a finite test
accuracy and a finite epsilon, the peers' rows say why they were skipped, and --json writes every number."""

from __future__ import annotations

import json
import math
import os
import pathlib

import numpy as np
import pytest

from tests.benchmarks._bench_module import load_bench

pytestmark = pytest.mark.slow  # four compilations of an MLP round program

REPO = pathlib.Path(__file__).resolve().parents[2]


def _data_dir():
    for d in (os.environ.get("DPJAX_DATA_DIR"), REPO.parent / "shared" / "data", REPO / "data"):
        if d and (pathlib.Path(d) / "mnist").exists():
            return str(d)
    pytest.skip("MNIST not found ($DPJAX_DATA_DIR, ../shared/data)")


def test_dpjax_rows_at_toy_size(tmp_path, capsys):
    bench = load_bench("bench_fl_simulation", "bench_fl_simulation")
    out_json = tmp_path / "fl.json"
    res = bench.main(["--clients", "20", "--cohort-rate", "0.25", "--rounds", "2", "--rounds-long", "2",
                      "--repeats", "1", "--no-peers", "--data-dir", _data_dir(), "--json", str(out_json)])
    dp = res["single"]["dpjax"]
    (row,) = dp["rounds"]
    for field in ("load", "cold_s", "warm_s", "compile_s", "per_round_s"):
        assert math.isfinite(row[field]) and row[field] >= 0 or field == "compile_s", (field, row)
    assert row["per_round_s"] > 0 and 0.0 <= row["accuracy"] <= 1.0
    assert dp["long"]["end_to_end_s"] > 0 and 0.0 <= dp["long"]["accuracy"] <= 1.0
    assert row["warm_start_s"] > 0 and dp["long"]["warm_start_end_to_end_s"] > 0
    assert math.isfinite(dp["epsilon"]) and dp["epsilon"] > 0
    (sw,) = res["sweep"]["dpjax"]
    assert len(sw["accuracy"]) == 8 and all(0.0 <= a <= 1.0 for a in sw["accuracy"])
    assert res["single"]["pfl"]["rounds"][0]["skipped"] == "no --peers-python"
    text = capsys.readouterr().out
    assert "| single | dpjax |" in text and "| sweep x8 | dpjax |" in text and "skipped: no --peers-python" in text
    saved = json.loads(out_json.read_text())
    assert saved["versions"]["jax"] and saved["cpu_count"] and saved["single"]["dpjax"]["epsilon"] == dp["epsilon"]


def test_fresh_cache_compiles_cold_then_reads_back_and_restores_the_settings(monkeypatch):
    """--dpjax-cache fresh (the default): each cold compile writes a new empty persistent cache, the warm start
    reads it back (JAX's cache-hit events), and the caller's cache settings are as before afterwards."""
    import jax

    bench = load_bench("bench_fl_simulation", "bench_fl_simulation_cache")
    monkeypatch.setenv("DPJAX_COMPILATION_CACHE", "0")
    before = jax.config.jax_compilation_cache_dir
    min_time = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # store the toy programs too
    events = []

    def listen(name, **_):
        events.append(name)

    jax.monitoring.register_event_listener(listen)
    try:
        bench.main(["--clients", "20", "--cohort-rate", "0.25", "--rounds", "2", "--rounds-long", "0",
                    "--repeats", "1", "--no-peers", "--no-sweep", "--data-dir", _data_dir()])
    finally:
        jax.monitoring.unregister_event_listener(listen)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", min_time)
    assert events.count("/jax/compilation_cache/cache_misses") > 0  # the cold compile: an empty cache
    assert events.count("/jax/compilation_cache/cache_hits") > 0  # the warm start: read back
    assert jax.config.jax_compilation_cache_dir == before and os.environ["DPJAX_COMPILATION_CACHE"] == "0"


def test_cache_choices_set_the_environment_dpjax_reads(monkeypatch, tmp_path):
    bench = load_bench("bench_fl_simulation", "bench_fl_simulation_env")
    monkeypatch.delenv("DPJAX_COMPILATION_CACHE", raising=False)
    assert bench._set_cache("default") is None and "DPJAX_COMPILATION_CACHE" not in os.environ
    assert bench._set_cache("off") is None and os.environ["DPJAX_COMPILATION_CACHE"] == "0"
    root = bench._set_cache("fresh")
    assert os.environ["DPJAX_COMPILATION_CACHE"].startswith(root) and not os.listdir(root)
    os.rmdir(root)


def test_cifar_case_runs_the_cnn_one_client_at_a_time():
    """--cifar at a toy size: pfl-research's CNN on CIFAR-shaped data, 50 records a client, one local epoch of 5
    batches, the cohort trained one client at a time (client_batch=1), no long run and no sweep by default."""
    bench = load_bench("bench_fl_simulation", "bench_fl_simulation_cifar")
    res = bench.main(["--cifar", "--clients", "6", "--cohort-rate", "0.5", "--rounds", "2", "--repeats", "1",
                      "--no-peers"])
    assert res["args"]["records"] == 50 and res["args"]["local_steps"] == 5 and res["args"]["dpjax_client_batch"] == 1
    (row,) = res["single"]["dpjax"]["rounds"]
    assert row["per_round_s"] > 0 and 0.0 <= row["accuracy"] <= 1.0
    assert "long" not in res["single"]["dpjax"] and res["sweep"] == {}
    x, y, tx, ty = bench.cifar_shaped_workload(3, 50, test=10)
    assert x.shape == (150, 32, 32, 3) and tx.shape == (10, 32, 32, 3) and set(np.unique(y)) <= set(range(10))
