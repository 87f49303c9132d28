"""Bad input gets a ValueError that names the argument."""

import jax
import numpy as np
import pytest

from dpjax.accounting import GaussianSchedule, calibrate_noise, compute_epsilon
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.engine import SiloData, run
from dpjax.primitives import FixedAvailability
from dpjax.problems import LogisticRegression


def _schedule(**kw):
    base = dict(noise_std=1.0, contribution_bound=0.1, sampling="without-replacement",
                dataset_size=100, batch_size=10, steps=5)
    base.update(kw)
    return GaussianSchedule(**base)


@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan")])
def test_bad_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        calibrate_noise(_schedule(), eps, 1e-5)


@pytest.mark.parametrize("delta", [0.0, 1.0, 1.5, -1e-3])
def test_bad_delta(delta):
    with pytest.raises(ValueError, match="delta"):
        compute_epsilon(_schedule(), delta)


def _data(sizes=(10, 12, 9)):
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(n, 3)).astype(np.float32) for n in sizes]
    return xs, [np.ones(n, np.float32) for n in sizes]


def test_batch_larger_than_silo():
    algo = NoisyMbSgd(LogisticRegression(3), num_rounds=2, batch_size=10)
    with pytest.raises(ValueError, match=r"batch_size=10 .* n=9"):
        run(algo, SiloData.from_silos(*_data()), MbSgdHParams.create(0.1, 0.1, 1.0), jax.random.key(0))


def test_more_available_silos_than_silos():
    algo = NoisyMbSgd(LogisticRegression(3), num_rounds=2, batch_size=2, availability=FixedAvailability(4))
    with pytest.raises(ValueError, match=r"num_available=4 .*num_silos=3"):
        run(algo, SiloData.from_silos(*_data()), MbSgdHParams.create(0.1, 0.1, 1.0), jax.random.key(0))


@pytest.mark.parametrize("kw,name", [
    (dict(clip_norm=-1.0), "clip_norm"), (dict(noise_multiplier=-0.5), "noise_multiplier"),
    (dict(learning_rate=0.0), "learning_rate"),
])
def test_bad_hparams(kw, name):
    args = dict(learning_rate=0.1, noise_multiplier=0.1, clip_norm=1.0)
    args.update(kw)
    with pytest.raises(ValueError, match=name):
        MbSgdHParams.create(**args)


def test_mismatched_shapes():
    xs, ys = _data()
    with pytest.raises(ValueError, match=r"xs\[1\] has 12 rows but ys\[1\] has 11"):
        SiloData.from_silos(xs, [ys[0], ys[1][:11], ys[2]])
    with pytest.raises(ValueError, match="feature shape"):
        SiloData.from_silos([xs[0], xs[1][:, :2]], ys[:2])
    with pytest.raises(ValueError, match="xs has 3 silos but ys has 2"):
        SiloData.from_silos(xs, ys[:2])


def test_nan_in_data():
    xs, ys = _data()
    xs[2][4, 1] = np.nan
    with pytest.raises(ValueError, match=r"xs\[2\] contains NaN .*row 4"):
        SiloData.from_silos(xs, ys)


@pytest.mark.parametrize("kw,name", [
    (dict(num_rounds=0), "num_rounds"), (dict(batch_size=0), "batch_size"), (dict(sampling="bootstrap"), "sampling"),
    (dict(output="median"), "output"), (dict(aggregation="max"), "aggregation"), (dict(neighboring="swap"), "neighboring"),
])
def test_bad_algorithm_config(kw, name):
    args = dict(problem=LogisticRegression(3), num_rounds=2, batch_size=2)
    args.update(kw)
    with pytest.raises(ValueError, match=name):
        NoisyMbSgd(**args)


def test_bad_task_config():
    from dpjax.tasks.isrl_mnist import IsrlMnistConfig

    with pytest.raises(ValueError, match=r"epsilon=-1.0 must be > 0"):
        IsrlMnistConfig(epsilon=-1.0)
    with pytest.raises(ValueError, match="silos_per_round"):
        IsrlMnistConfig(silos_per_round=26)
    with pytest.raises(ValueError, match="calibration"):
        IsrlMnistConfig(calibration="moments")
