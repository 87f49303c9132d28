"""`dpjax reproduce dpsgd-mnist` bookkeeping: parts run as separate processes merge into the single
run's tables, the best configuration per variant is the highest mean over seeds, and the report
states the BC-SH vs IC-SS gap; nothing is overwritten."""

import csv
import json

import pytest

from dpjax.reproduce import dpsgd_mnist as exp
from dpjax.reproduce import dpsgd_mnist_config as cfg


def write_part(folder, variant, accs, privacy_eps):
    """A part as run_protocol(only=(variant,)) writes it: accs = {(eta, seed): accuracy}."""
    folder.mkdir(parents=True)
    with open(folder / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["variant", "epochs", "learning_rate", "clip_norm", "sigma", "seed",
                                          "test_accuracy"])
        w.writeheader()
        for (lr, seed), a in accs.items():
            w.writerow({"variant": variant, "epochs": 3, "learning_rate": lr, "clip_norm": 1.0, "sigma": 2.0,
                        "seed": seed, "test_accuracy": a})
    with open(folder / "privacy.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["variant", "group_size", "accountant", "epsilon", "notes"])
        w.writeheader()
        for g in cfg.GROUPS:
            w.writerow({"variant": variant, "group_size": g, "accountant": "strong-exact", "epsilon": privacy_eps * g,
                        "notes": ""})
    meta = {"quick": True, "seed": 0, "config": {**cfg.QUICK, "lrs": [0.3, 1.0], "epochs": [3], "clips": [1.0]},
            "variants": {variant: cfg.describe(cfg.variants()[variant])}, "wall_seconds": 100.0, "cpu_seconds": 40.0,
            "load_average_at_end": [1.0, 1.0, 1.0],
            "timings": {f"{variant} E=3": {"seconds": 90.0, "cpu_seconds": 36.0, "rounds": 120, "runs": 4,
                                           "batch": cfg.ROUND_RECORDS}}}
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


@pytest.mark.slow
def test_parts_merge_into_one_run_and_the_report_states_the_gap(tmp_path):
    ic = write_part(tmp_path / "ic", "IC-SS", {(0.3, 0): 0.90, (0.3, 1): 0.92, (1.0, 0): 0.95, (1.0, 1): 0.85}, 1.5)
    bc = write_part(tmp_path / "bc", "BC-SH", {(0.3, 0): 0.88, (0.3, 1): 0.90, (1.0, 0): 0.80, (1.0, 1): 0.82}, 1.0)
    report = exp.merge_parts(tmp_path / "out", [ic, bc]).read_text()
    with open(tmp_path / "out" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["variant"] for r in rows] == ["BC-SH"] * 4 + ["IC-SS"] * 4  # the variants' own order
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["cpu_seconds"] == 80.0 and meta["wall_seconds"] == 200.0
    # best = highest mean over seeds: IC-SS at eta 0.3 (0.91) beats eta 1.0 (0.90); BC-SH at 0.3 (0.89)
    # "±" is the sample SD over the seeds and says so (0.88, 0.90: 1.41 points)
    assert "| BC-SH | m = 64, s = 4, shuffle, eq. (4) | 89.00 ± 1.41 (sample SD, 2 seeds) | 3 | 0.3 |" in report
    assert "| IC-SS | m = 256, s = 1, subsample, eq. (1) | 91.00 ± 1.41 (sample SD, 2 seeds) | 3 | 0.3 |" in report
    assert "gap +2.00 points" in report and "within a few points" in report
    assert "| BC-SH | 4 | 4.000 |" in report and "summed over 2 processes" in report
    with pytest.raises(ValueError, match="never overwritten"):
        exp.merge_parts(tmp_path / "out", [ic, bc])


def test_one_seed_prints_no_plus_minus_and_report_only_regenerates(tmp_path):
    """One seed has no spread: the cell says "(1 seed)", never "± 0.00"; a kept run's report is rewritten
    from its files (the load average it recorded, not the current one)."""
    part = write_part(tmp_path / "bc", "BC-SH", {(0.3, 0): 0.88, (1.0, 0): 0.80}, 1.0)
    report = exp.report_only(part, quick=True).read_text()
    assert "| BC-SH | m = 64, s = 4, shuffle, eq. (4) | 88.00 (1 seed) | 3 | 0.3 |" in report
    assert "±" not in report.split("Privacy of")[0]
    assert "load average at the end 1.0" in report and (part / "dpsgd_mnist.png").exists()
    with pytest.raises(ValueError, match="quick"):
        exp.report_only(part, quick=False)


@pytest.mark.slow
def test_train_grid_on_cpu_equals_the_vmapped_scan():
    """On CPU the grid runs one by one with a host round loop (fast convolution kernels); it trains
    the same models as run_many's vmapped scan: equal final accuracies and divergence flags (the
    parameters agree to float32 round-off, far below one test image's share of the accuracy)."""
    import jax
    import numpy as np

    from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
    from dpjax.engine import SiloData, run_many, stack_hparams
    from dpjax.problems import FlaxProblem

    import flax.linen as nn

    class TinyCNN(nn.Module):  # a convolution and a dense layer: compiles in seconds
        @nn.compact
        def __call__(self, x):
            x = nn.tanh(nn.Conv(4, (3, 3), padding="VALID")(x))
            return nn.Dense(10)(x.reshape(x.shape[:-3] + (-1,)))

    assert jax.default_backend() == "cpu"
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 10, 48).astype(np.int32)
    problem = FlaxProblem(TinyCNN(), (8, 8, 1), "softmax")
    alg = DpSgdGeneral.for_epochs(problem, 32, 1, subset_size=4, num_subsets=4)  # batch clipping, 2 rounds
    data = SiloData.from_silos([x[:32]], [y[:32]])
    hps = stack_hparams([DpSgdHParams.create(lr, noise_multiplier=0.5, clip_norm=1.0) for lr in (0.3, 3e38)])  # the second run overflows
    keys = jax.random.split(jax.random.key(4), 2)

    def eval_fn(params, ed):
        return {"test_accuracy": 1.0 - problem.evaluate(params, ed[0], ed[1])["error"]}

    acc, diverged = exp.train_grid(alg, data, hps, keys, eval_fn, (x[32:], y[32:]))
    ref = run_many(alg, data, hps, keys, eval_fn=eval_fn, eval_data=(x[32:], y[32:]), on_nonfinite="mark")
    np.testing.assert_array_equal(diverged, ref.diverged_round)
    assert diverged[0] == -1 and diverged[1] >= 0
    assert acc[0] == ref.eval_metrics["test_accuracy"][0, -1]


def test_quick_protocol_still_covers_every_code_path():
    """The quick protocol is a smoke test sized for a minute of CPU: its variants must still cover batch and
    individual clipping, shuffling and subsampling, the local update rules (plain and momentum) and the
    non-private twin, run more than one epoch of more than one round, and reach the grid-edge rule."""
    from dpjax.algorithms.dpsgd_general import DpSgdGeneral

    kws = [cfg.variants()[name] for name in cfg.QUICK["variants"]]
    assert {kw["sampling"] for kw in kws} == {"shuffle", "subsample"}
    assert {kw["subset_size"] == 1 for kw in kws if kw.get("private", True)} == {True, False}  # IC and BC
    assert {kw.get("update_rule", "gradient") for kw in kws} == {"gradient", "local"}
    assert any("local_optimizer" in kw for kw in kws) and any(not kw.get("private", True) for kw in kws)
    rounds_per_epoch = cfg.QUICK["n_train"] // cfg.ROUND_RECORDS
    assert rounds_per_epoch >= 2 and min(cfg.QUICK["epochs"]) >= 2 and cfg.QUICK["max_extensions"] >= 1
    assert cfg.QUICK["n_train"] > cfg.ROUND_RECORDS  # subsampling draws a proper subset
    alg = DpSgdGeneral.for_epochs(None, cfg.QUICK["n_train"], 2, **cfg.variants()["IC-SS"])
    assert alg.num_rounds == 2 * rounds_per_epoch and alg.individual_clipping
    assert set(cfg.FULL) - {"variants"} <= set(cfg.QUICK) and "variants" not in cfg.FULL  # FULL runs them all
