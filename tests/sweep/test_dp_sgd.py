"""The acceptance example of a new family: central DP-SGD with optax.adam on a flax MLP,
one module (dpjax/algorithms/dp_sgd.py: a configuration of DP-SGD-General) plus its
registration, swept over learning rates end to end through ``dpjax sweep`` with the example config."""

import pytest
import pathlib

import jax
import numpy as np
import optax

from dpjax import cli
from dpjax.accounting.privacy_spec import GaussianPrivacy
from dpjax.accounting.truncated_poisson import TruncatedPoissonPrivacy
from dpjax.algorithms.dp_sgd import DpSgd, DpSgdHParams
from dpjax import engine
from dpjax.sweep import SweepConfig, datasets, load_results
from dpjax.sweep.driver import Sweep

CONFIG = pathlib.Path(__file__).parents[2] / "dpjax" / "sweep" / "configs" / "dp_sgd_adam_mlp.toml"


@pytest.mark.slow
def test_dp_sgd_adam_mlp_sweeps_end_to_end_through_the_cli(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert cli.main(["sweep", str(CONFIG), "--out", str(out), "--no-progress"]) == 0
    runs, _ = load_results(out)
    cfg = SweepConfig.from_toml(CONFIG)
    assert len(runs) == 3 * 2 and runs.run_id.is_unique and (runs.diverged_round == -1).all()
    assert sorted(runs.learning_rate.unique()) == sorted(float(np.float32(v)) for v in cfg.grid["learning_rate"])
    assert np.isfinite(runs[["train_loss", "test_loss", "test_error"]].to_numpy()).all()

    # the recorded noise meets epsilon = 4 through the family's own privacy() (record level, Poisson)
    sw = Sweep(cfg, jax.local_devices()[:1])
    alg, td = sw.algorithm(sw.groups[0]), sw.trial(0)
    assert isinstance(alg, DpSgd) and alg.optimizer == "adam"
    row = runs.iloc[0]
    hp = DpSgdHParams.create(row.learning_rate, row.noise_multiplier, row.clip_norm)
    spec = alg.privacy(td.train.silo_sizes(), hp)
    # the default truncated Poisson selection (256 records > 2 B): the Gaussian bound, the cut's probability in delta
    assert isinstance(spec, TruncatedPoissonPrivacy) and isinstance(spec.base, GaussianPrivacy)
    assert spec.unit == "record" and spec.neighboring == "add-remove" and 0 < spec.overflow_probability < 1e-15
    assert spec.base.schedule.inclusion_probability == alg.sampling_rate == cfg.static["sampling_rate"]  # declared q
    eps = spec.epsilon(1e-5, "rdp").epsilon
    assert 4.0 / 1.01 <= eps <= 4.0 * (1 + 1e-6)  # calibration tolerance 1e-3 relative on sigma

    # a sweep row is the direct run of the family with those hparams (run key of (seed, trial, repetition))
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(cfg.seed), int(row.trial)), int(row.repetition))
    one = engine.run(alg, td.train, hp, key, eval_fn=datasets.classification_eval(td.problem),
                     eval_data=td.eval_data)
    np.testing.assert_allclose(row.train_loss, float(one.eval_metrics["train_loss"][-1]), rtol=1e-5)
    # the server optimizer is adam (its moments are the server part's state, one per round) with the run's step size
    adam = one.state.parts["server"]
    assert isinstance(adam, optax.ScaleByAdamState) and int(adam.count) == alg.num_rounds
    assert float(one.state.hparams.learning_rate) == row.learning_rate


@pytest.mark.slow
def test_the_non_private_twin_runs_the_same_step_without_noise():
    """``sgd`` (the registered twin) with noise 0 and clip inf equals DpSgd(private=False)."""
    entry = datasets.get_dataset("synthetic-mlp")
    td = entry.load(entry.resolve({"name": "synthetic-mlp"}), 0)
    alg = DpSgd(td.problem, 5, 16, sampling_rate=16 / 256)  # the public q = K / n of the 256 records
    key = jax.random.key(0)
    private = engine.run(alg, td.train, DpSgdHParams.create(0.01, 0.0, float("inf")), key).output
    twin = engine.run(DpSgd(td.problem, 5, 16, private=False, sampling_rate=16 / 256), td.train,
                      DpSgdHParams.create(0.01, 3.0, 1.0), key).output
    for a, b in zip(jax.tree_util.tree_leaves(private), jax.tree_util.tree_leaves(twin)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
