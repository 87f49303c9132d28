"""Central DP-SGD (dpjax/algorithms/dp_sgd.py) is a configuration of DP-SGD-General: the same
compiled round, the pooled step (noise once on the mean of the silos' clipped sums) and its privacy."""

import math

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest
from scipy import stats

from dpjax import keys
from dpjax.accounting import api
from dpjax.accounting.schedules import GaussianSchedule
from dpjax.algorithms.dp_sgd import DpSgd
from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
from dpjax.engine import SiloData, run
from dpjax.engine.chain import DataShape
from dpjax.engine.roles import Context
from dpjax.primitives.clipping import clip_to_norm
from dpjax.problems import FlaxProblem


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.tanh(nn.Dense(6)(x)))


PROBLEM = FlaxProblem(MLP(), (4,), "softmax")
PARAMS = PROBLEM.init_params(jax.random.key(1))
Q = 8 / 40  # the declared public Poisson rate: K / n_min of make_data's silos (40, 56)


def make_data(sizes=(40, 56), seed=0):
    rng = np.random.default_rng(seed)
    return SiloData.from_silos([rng.normal(size=(n, 4)).astype(np.float32) for n in sizes],
                               [rng.integers(0, 3, n).astype(np.int32) for n in sizes])


def leaves_equal(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("sampling,neighboring", [("poisson", "add-remove"), ("without-replacement", "replace-one")])
@pytest.mark.slow
def test_dp_sgd_runs_dpsgd_general_with_noise_on_the_server(sampling, neighboring):
    """Bit for bit the DP-SGD-General run with s = 1, m = K, placement='server' and optax's Adam
    direction (``scale_by_adam``) as the server transformation."""
    data, hp, key = make_data(), DpSgdHParams.create(0.05, noise_multiplier=0.8, clip_norm=0.5), jax.random.key(3)
    q = Q if sampling == "poisson" else None
    alg = DpSgd(PROBLEM, 6, 8, sampling=sampling, neighboring=neighboring, sampling_rate=q)
    general = DpSgdGeneral(PROBLEM, 6, 1, 8, 1, sampling={"poisson": "poisson"}.get(sampling, "subsample"),
                           server_optimizer=optax.scale_by_adam(), neighboring=neighboring, placement="server",
                           sampling_rate=q)
    leaves_equal(run(alg, data, hp, key, params=PARAMS).output, run(general, data, hp, key, params=PARAMS).output)


def test_pooled_step_is_the_mean_of_the_silos_clipped_sums_over_k():
    """sigma = 0, plain SGD: w <- w - eta (sum_i sum_{j in B_i} [grad f(w, x_ij)]_C) / (K N) on the
    Poisson batches the selection part draws (N = 2 silos of different sizes)."""
    data, key, lr, c, k = make_data(), jax.random.key(5), 0.3, 0.05, 8
    alg = DpSgd(PROBLEM, 1, k, optimizer="sgd", sampling_rate=Q)
    hp = DpSgdHParams.create(lr, noise_multiplier=0.0, clip_norm=c)
    out = run(alg, data, hp, key, params=PARAMS).output
    selection = alg.parts(DataShape.of(data)).selection
    ctx = Context(np.int32(0), keys.round_key(key, 0), hp, data)
    batch, _ = selection.update(data, selection.init(None, ctx._replace(key=key)), ctx)
    clipped_grad = jax.jit(lambda x, y: clip_to_norm(jax.grad(PROBLEM.loss)(PARAMS, x, y), c))  # one record's
    total = jax.tree_util.tree_map(np.zeros_like, PARAMS)
    for silo in range(2):
        idx, mask = np.asarray(batch.indices[silo, :, 0]), np.asarray(batch.weights[silo, :, 0])
        for i in idx[mask]:
            g = clipped_grad(data.x[silo, i], data.y[silo, i])
            total = jax.tree_util.tree_map(lambda a, b: a + np.asarray(b), total, g)
    want = jax.tree_util.tree_map(lambda w, t: w - lr * t / (k * 2), PARAMS, total)
    for x, y in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def test_noise_is_added_once_to_the_pooled_message():
    """The message's noise std is sigma x C / (K N) (add/remove sensitivity of the mean of N silos'
    sums over K), not sigma C / (K sqrt(N)) as independent silo noise would give: measured on 3000
    coordinates (sample std within 6 standard errors, 1/sqrt(2 x 3000) relative)."""
    wide = FlaxProblem(nn.Dense(600), (4,), "softmax")
    data, c, sigma, lr, k = make_data(), 0.7, 1.5, 0.5, 8
    alg = DpSgd(wide, 1, k, optimizer="sgd", sampling_rate=Q)
    params, key = wide.init_params(jax.random.key(0)), jax.random.key(11)
    noisy = run(alg, data, DpSgdHParams.create(lr, noise_multiplier=sigma, clip_norm=c), key, params=params).output
    clean = run(alg, data, DpSgdHParams.create(lr, noise_multiplier=0.0, clip_norm=c), key, params=params).output
    diff = np.concatenate([np.ravel(a - b) for a, b in zip(jax.tree_util.tree_leaves(clean),
                                                           jax.tree_util.tree_leaves(noisy))]) / lr
    want = sigma * c / (k * 2)
    assert abs(diff.std() / want - 1) <= 6 / math.sqrt(2 * diff.size)
    assert stats.kstest(diff / want, "norm").pvalue > 1e-3


def test_privacy_poisson_and_without_replacement():
    """Poisson: R subsampled Gaussians at the declared rate q (here K/n_min, the rate the hand-written
    DpSgd read from the data), add/remove, unit record (noise std = multiplier x C). Without
    replacement: the batch-clipping accountants; 'standard' (amplification by subsampling, RDP) is
    the old report's schedule at n_min, 'strong-exact' the strong adversary's (no amplification)."""
    sigma, delta = float(np.float32(1.1)), 1e-5
    hp = DpSgdHParams.create(0.1, noise_multiplier=sigma, clip_norm=0.3)
    spec = DpSgd(PROBLEM, 20, 8, sampling_rate=Q).privacy([56, 40], hp)
    hand = GaussianSchedule(sigma * 0.3, 0.3, "poisson", 40, 8, 20, "add-remove", "record")
    assert spec.unit == "record" and spec.neighboring == "add-remove"
    assert spec.epsilon(delta, "rdp").epsilon == pytest.approx(api.compute_epsilon(hand, delta, "rdp").epsilon,
                                                               rel=1e-6)
    wor = DpSgd(PROBLEM, 20, 8, sampling="without-replacement", neighboring="replace-one").privacy([56, 40], hp)
    old = GaussianSchedule(2 * sigma * 0.3, 0.3, "without-replacement", 40, 8, 20, "replace-one", "record")
    assert wor.unit == "record"
    assert wor.epsilon(delta, "standard").epsilon == pytest.approx(api.compute_epsilon(old, delta, "rdp").epsilon,
                                                                   rel=1e-6)
    assert wor.epsilon(delta, "strong-exact").epsilon > wor.epsilon(delta, "standard").epsilon
    twin = DpSgd(PROBLEM, 20, 8, private=False, sampling_rate=Q).privacy([56, 40], hp)
    assert math.isinf(twin.epsilon(delta).epsilon)


def test_invalid_configurations_are_refused():
    with pytest.raises(ValueError, match="optimizer"):
        DpSgd(PROBLEM, 5, 8, optimizer="lion")
    with pytest.raises(ValueError, match="neighboring"):  # fixed-size batches need a fixed, public n
        DpSgd(PROBLEM, 5, 8, sampling="without-replacement")
    with pytest.raises(ValueError, match="neighboring"):  # Poisson DP-SGD is accounted under add/remove
        DpSgd(PROBLEM, 5, 8, neighboring="replace-one", sampling_rate=Q)
    with pytest.raises(ValueError, match="sampling_rate=None"):  # add/remove: the rate must be public
        DpSgd(PROBLEM, 5, 8)
    with pytest.raises(ValueError, match="sampling_rate=0.2 is Poisson's"):
        DpSgd(PROBLEM, 5, 8, sampling="without-replacement", neighboring="replace-one", sampling_rate=Q)
    with pytest.raises(ValueError, match=r"sampling_rate=1.5 must be in \(0, 1\]"):
        DpSgd(PROBLEM, 5, 8, sampling_rate=1.5)
    with pytest.raises(ValueError, match="smallest silo"):
        DpSgd(PROBLEM, 5, 8, sampling="without-replacement", neighboring="replace-one").validate(make_data((6, 40)))
