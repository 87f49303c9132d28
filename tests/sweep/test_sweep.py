"""End-to-end sweeps on tiny synthetic data (one compiled program shared by most tests)."""

import logging
import os
import signal
import subprocess
import sys
import time
import tomllib

import jax
import numpy as np
import pandas as pd
import pytest

from dpjax import engine
from dpjax.engine import program
from dpjax.engine import registry
from dpjax.sweep import SweepConfig, datasets, load_results, run_sweep, select
from dpjax.sweep.driver import Sweep
from tests.sweep.conftest import TINY

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tiny_cfg(**changes) -> SweepConfig:
    d = tomllib.loads(TINY)
    for k, v in changes.items():
        if "." in k:
            a, b = k.split(".")
            d[a][b] = v
        else:
            d[k] = v
    return SweepConfig.from_dict(d)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    res = run_sweep(tiny_cfg(), out, progress=False)
    return out, res


@pytest.mark.slow
def test_full_sweep_layout(full):
    out, res = full
    assert res.total_chunks == 3 and len(res.computed_chunks) == 3 and res.skipped_chunks == 0
    assert len(res.runs) == 36 and res.runs["run_id"].is_unique
    assert len(res.evals) == 36 * 2 and sorted(res.evals["eval_round"].unique()) == [3, 6]
    assert (out / "config.json").exists() and (out / "env-0.json").exists()
    assert not list(out.rglob("*.tmp"))
    # final metrics in the runs table are the last evaluation
    last = res.evals[res.evals.eval_round == 6].set_index("run_id")["train_loss"]
    assert np.array_equal(res.runs.set_index("run_id")["train_loss"].loc[last.index].to_numpy(), last.to_numpy())


@pytest.mark.slow
def test_sweep_runs_equal_single_runs(full):
    """Every stored run equals dpjax.engine.run of the same config and key."""
    _, res = full
    cfg = tiny_cfg()
    sw = Sweep(cfg, jax.local_devices()[:1])
    g = sw.groups[0]
    alg = sw.algorithm(g)
    rows = res.runs.iloc[[0, 7, 20, 35]]
    for _, row in rows.iterrows():
        td = sw.trial(int(row.trial))
        hp = registry.get_algorithm("isrl-mbsgd").make_hparams(
            {"learning_rate": row.learning_rate, "noise_multiplier": row.noise_multiplier, "clip_norm": row.clip_norm})
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(cfg.seed), int(row.trial)), int(row.repetition))
        single = engine.run(alg, td.train, hp, key, eval_fn=datasets.classification_eval(td.problem),
                            eval_data=td.eval_data, eval_every=cfg.eval_every)
        ev = res.evals[res.evals.run_id == row.run_id].sort_values("eval_round")
        for m in ("train_loss", "test_error", "test_loss"):
            np.testing.assert_allclose(ev[m].to_numpy(), single.eval_metrics[m], rtol=2e-5, atol=1e-6, err_msg=m)
        assert row.clip_norm == pytest.approx(td.max_norm)  # "1*maxnorm"


def test_resume_in_process_is_bit_identical(full, tmp_path):
    _, ref = full
    first = run_sweep(tiny_cfg(), tmp_path, progress=False, max_chunks=1)
    assert first.computed_chunks == ["g000-c000000"]
    f0 = tmp_path / "runs" / "g000-c000000.csv"
    stat0 = f0.stat()
    second = run_sweep(tiny_cfg(), tmp_path, progress=False)
    assert second.skipped_chunks == 1 and second.computed_chunks == ["g000-c000001", "g000-c000002"]
    assert f0.stat().st_mtime_ns == stat0.st_mtime_ns and f0.stat().st_ino == stat0.st_ino
    pd.testing.assert_frame_equal(second.runs, ref.runs, check_exact=True)
    pd.testing.assert_frame_equal(second.evals, ref.evals, check_exact=True)
    third = run_sweep(tiny_cfg(), tmp_path, progress=False)
    assert third.computed_chunks == [] and third.skipped_chunks == 3


def test_different_config_in_same_dir_is_refused(full):
    out, _ = full
    with pytest.raises(ValueError, match="different sweep"):
        run_sweep(tiny_cfg(seed=4), out, progress=False)


def test_edited_stored_config_is_refused_naming_the_file(tmp_path):
    """Editing the directory's own config.toml (seed 3 -> 9) would present seed 3's results as seed 9's: resuming
    and loading refuse, naming the file; so does an edited config.json."""
    first = run_sweep(tiny_cfg(), tmp_path, source_text=TINY, progress=False, max_chunks=1)
    assert first.computed_chunks == ["g000-c000000"]
    stored = tmp_path / "config.toml"
    assert stored.read_text() == TINY
    stored.write_text(TINY.replace("seed = 3", "seed = 9"))
    with pytest.raises(ValueError, match=r"config\.toml was modified after the sweep started"):
        run_sweep(tiny_cfg(), tmp_path, source_text=TINY, progress=False)
    with pytest.raises(ValueError, match=r"config\.toml was modified"):
        load_results(tmp_path)
    stored.write_text(TINY)  # restored: the resume goes on
    assert run_sweep(tiny_cfg(), tmp_path, source_text=TINY, progress=False, max_chunks=0).skipped_chunks == 1
    conf = tmp_path / "config.json"
    conf.write_text(conf.read_text().replace('"seed": 3', '"seed": 9'))
    with pytest.raises(ValueError, match=r"config\.json was modified"):
        load_results(tmp_path)


@pytest.mark.slow
def test_sigkill_mid_sweep_then_resume(full, tmp_path):
    """SIGKILL the CLI after its first chunk; the rerun redoes nothing finished and the table is unchanged."""
    _, ref = full
    cfg_path = tmp_path / "tiny.toml"
    cfg_path.write_text(TINY)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "dpjax.sweep.cli", "sweep", str(cfg_path), "--out", str(out), "--no-progress"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.Popen(cmd + ["--sleep-between-chunks", "3"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    # A chunk is committed when its manifest exists (written after its runs file).
    while time.time() < deadline and not list((out / "manifests").glob("*.json")) if out.exists() else True:
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = {p.name: (p.stat().st_mtime_ns, p.stat().st_ino) for p in (out / "manifests").glob("*.json")}
    assert 1 <= len(done) < 3, f"kill landed outside the sweep: {done}"
    rerun = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"computed {3 - len(done)} chunk(s), skipped {len(done)} finished" in rerun.stdout
    for name, st in done.items():  # finished chunks were neither recomputed nor rewritten
        p = out / "manifests" / name
        assert (p.stat().st_mtime_ns, p.stat().st_ino) == st
    runs, evals = load_results(out)
    pd.testing.assert_frame_equal(runs, ref.runs, check_exact=True)
    pd.testing.assert_frame_equal(evals, ref.evals, check_exact=True)
    assert not list(out.rglob("*.tmp"))


@pytest.mark.slow
def test_one_compilation_per_static_group(tmp_path, caplog):
    d = tomllib.loads(TINY)
    d["num_rounds"], d["eval_every"] = 5, 5  # shapes no other test compiles
    d["static"].pop("batch_size")
    d["grid"]["batch_size"] = [4, 8]
    d["chunk_size"] = 4  # 9 chunks per group
    before = program.COMPILATIONS["count"]
    jax.config.update("jax_log_compiles", True)
    try:
        with caplog.at_level(logging.WARNING):
            res = run_sweep(SweepConfig.from_dict(d), tmp_path, progress=False)
    finally:
        jax.config.update("jax_log_compiles", False)
    assert res.total_chunks == 2 * 3 * 2 * 2  # groups x trials x repetitions x config tiles (Hc = 4 of 6)
    assert program.COMPILATIONS["count"] - before == 2
    chunk_compiles = [r for r in caplog.records if "Finished XLA compilation of jit(per_device)" in r.getMessage()]
    assert len(chunk_compiles) == 2, [r.getMessage() for r in chunk_compiles]
    assert sorted(res.runs["batch_size"].unique()) == [4, 8] and len(res.runs) == 72


def test_nonfinite_runs_raise_or_are_marked(tmp_path):
    d = tomllib.loads(TINY)
    d["grid"]["learning_rate"] = [0.1, 1.0, 3e38]
    d["grid"]["noise_multiplier"] = [0.0, 2.0]  # std z x 2C/K = C/2: the absurd step size overflows
    d["on_nonfinite"] = "raise"
    with pytest.raises(engine.NonFiniteError, match=r"run [0-9a-f]{16} .*round \d+"):
        run_sweep(SweepConfig.from_dict(d), tmp_path / "raise", progress=False)
    assert not list((tmp_path / "raise" / "runs").glob("*.csv"))  # nothing broken was written
    d["on_nonfinite"] = "mark"
    res = run_sweep(SweepConfig.from_dict(d), tmp_path / "mark", progress=False, max_chunks=1)
    marked = res.runs[res.runs.diverged_round >= 0]
    assert len(marked) >= 1 and (marked.learning_rate > 1e30).all()  # marked, and only the absurd step size
    assert (marked.diverged_round < 6).all() and (res.runs[res.runs.learning_rate < 2].diverged_round == -1).all()
    sel = select.select_best(res.runs, over="learning_rate", by=["noise_multiplier", "trial"])
    assert (sel.learning_rate < 2).all()  # diverged step sizes are never selected


def test_epsilon_axis_uses_the_algorithms_schedule_and_accountant():
    from dpjax.accounting import api, isrl

    d = tomllib.loads(TINY)
    d["grid"].pop("noise_multiplier")
    d["grid"]["epsilon"] = [1.0, 8.0]
    d["static"]["batch_size"] = "isrl-experiment"
    d["privacy"] = {"accountant": "paper-experiment", "delta": "1/n^2"}
    cfg = SweepConfig.from_dict(d)
    sw = Sweep(cfg, jax.local_devices()[:1])
    g = sw.groups[0]
    alg = sw.algorithm(g)
    n, R = 40, 6
    assert alg.batch_size == int(np.ceil(n * np.sqrt(8.0) / (2 * np.sqrt(R))))  # ISRL §3.7 K rule
    for t in g.trials:
        for h, axes in enumerate(g.configs):
            hp = sw.hparams(g, t, h)
            L = sw.trial(t).max_norm
            sigma, _ = isrl.isrl_experiment_calibration(L, n, R, axes["epsilon"], 1 / n**2)
            hparams = registry.get_algorithm("isrl-mbsgd").make_hparams(hp)
            # the multiplier times the family's message sensitivity (2L/K) is Appendix I's sigma
            assert hp["noise_multiplier"] * alg.message_sensitivity(hparams, [n]) == pytest.approx(sigma, rel=1e-6)
            sched = alg.privacy([n], hparams).schedule
            assert api.compute_epsilon(sched, 1 / n**2, "paper-experiment").epsilon <= axes["epsilon"] * (1 + 1e-9)


def test_plot_from_store(full, tmp_path):
    from dpjax.sweep.plot import plot_store

    out, _ = full
    png = plot_store(out, x="noise_multiplier", out=tmp_path / "fig.png")
    assert png.exists() and png.stat().st_size > 1000
    bars = pd.read_csv(tmp_path / "fig.csv")
    assert list(bars["noise_multiplier"]) == [0.0, 0.5] and (bars["n_trials"] == 3).all()


@pytest.mark.slow
def test_sharded_equals_unsharded_bit_for_bit(tmp_path):
    """8 fake CPU devices (fresh process): sharded and single-device sweeps store identical tables."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=8")
    script = os.path.join(REPO, "tests", "sweep", "sharded_equivalence.py")
    r = subprocess.run([sys.executable, script, str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "IDENTICAL" in r.stdout and "IDENTICAL run_grid" in r.stdout
