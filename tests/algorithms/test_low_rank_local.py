"""Local SGD with a Dense first layer in low-rank form (``dpjax.engine.input_dense``, ``DpFedAvg(input_layer=)``): the
same deltas as the materialised per-silo steps, found only where the model starts with ``x @ W``, refused by name."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpjax import engine
from dpjax.algorithms.dp_fedavg import DpFedAvg, FedAvgHParams
from dpjax.engine.input_dense import low_rank_local_sgd, split_input_dense
from dpjax.engine.silos import SiloData
from dpjax.parts.cross_device import LocalDeltas
from dpjax.problems import FlaxProblem, LinearRegression


class Mlp(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.tanh(nn.Dense(5)(x)))


class UsesInputTwice(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.Dense(5)(x)) + jnp.sum(x)


class Conv(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.Conv(2, (3,))(x).reshape(-1))


def _mlp(dim=7):
    return FlaxProblem(Mlp(), (dim,), loss_kind="softmax")


def _silos(num=12, n=6, dim=7, seed=0):
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(int(rng.integers(3, n + 1)), dim)).astype(np.float32) for _ in range(num)]
    return SiloData.from_silos(xs, [rng.integers(0, 3, size=len(x)).astype(np.int32) for x in xs])


def test_the_split_finds_a_first_dense_kernel_and_nothing_else():
    p = _mlp()
    params = p.init_params(jax.random.key(0))
    split = split_input_dense(p.loss, params, jnp.zeros(7), jnp.int32(0))
    assert jax.tree_util.tree_leaves(params)[split.kernel_index].shape == (7, 5)
    # the rest of the model at h = x W equals the whole loss
    x, lv = jnp.arange(7.0) / 7, jax.tree_util.tree_leaves(params)
    np.testing.assert_allclose(split.rest(lv, x @ lv[split.kernel_index], jnp.int32(2)), p.loss(params, x, jnp.int32(2)),
                               rtol=1e-6)
    twice = FlaxProblem(UsesInputTwice(), (7,), loss_kind="softmax")
    assert split_input_dense(twice.loss, twice.init_params(jax.random.key(0)), jnp.zeros(7), jnp.int32(0)) is None
    conv = FlaxProblem(Conv(), (6, 1), loss_kind="softmax")
    assert split_input_dense(conv.loss, conv.init_params(jax.random.key(0)), jnp.zeros((6, 1)), jnp.int32(0)) is None
    lin = LinearRegression(4)  # a kernel of rank 1 (no width): not a Dense layer
    assert split_input_dense(lin.loss, lin.init_params(jax.random.key(0)), jnp.zeros(4), jnp.float32(0)) is None


def test_low_rank_steps_equal_materialised_steps_in_float64():
    """Exact in real arithmetic, so float64 agrees to rounding; a dropped Gram correction (the earlier steps'
    kernel updates) moves the delta by O(lr), ~1e-2 here."""
    with jax.enable_x64(True):
        p = _mlp()
        params = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), p.init_params(jax.random.key(1)))
        rng = np.random.default_rng(2)
        x, y = jnp.asarray(rng.normal(size=(4, 3, 7))), jnp.asarray(rng.integers(0, 3, size=(4, 3)), jnp.int32)
        valid = jnp.ones((4, 3), bool).at[3, 1:].set(False)  # a partial last batch, as local epochs make
        loss = jax.vmap(p.loss, in_axes=(None, 0, 0))
        grad = jax.grad(lambda w, xb, yb, vb: jnp.sum(jnp.where(vb, loss(w, xb, yb), 0.0)) / jnp.maximum(vb.sum(), 1))
        w = params
        for s in range(4):
            w = optax.tree.sub(w, optax.tree.scale(0.3, grad(w, x[s], y[s], valid[s])))
        expected = optax.tree.sub(params, w)
        split = split_input_dense(p.loss, params, jnp.zeros(7), jnp.int32(0))
        got = low_rank_local_sgd(split, params, x, y, valid, 0.3)
        for e, g in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(got)):
            np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
        gram = (x.reshape(12, 7) @ x.reshape(12, 7).T)
        for e, g in zip(jax.tree_util.tree_leaves(expected),
                        jax.tree_util.tree_leaves(low_rank_local_sgd(split, params, x, y, valid, 0.3, gram))):
            np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kw", [
    dict(local_steps=3, local_batch_size=2),
    dict(local_epochs=2, local_batch_size=4),  # a partial last batch for every silo under 8 records
    dict(local_steps=2, local_batch_size=3, client_batch=4),
    dict(local_steps=2, local_batch_size=2),  # 4 step positions < n_max 6: the steps' rows in step order
])
def test_dp_fedavg_low_rank_releases_the_materialised_model(kw):
    """Same key, same cohort, same noise: the released model agrees to float32 rounding, on a SiloData (per-silo Gram
    kept as the client's state) and on a record pool (Grams formed each round)."""
    from dpjax.engine import PooledSiloData

    data, key = _silos(), jax.random.key(3)
    hp = FedAvgHParams.create(0.5, client_learning_rate=0.2, noise_multiplier=0.5, noise_multiplier_count=2.0)
    runs = {mode: engine.run(DpFedAvg(_mlp(), 3, 4, sampling_rate=0.3, input_layer=mode, **kw), data, hp, key)
            for mode in ("materialized", "low-rank")}
    np.testing.assert_array_equal(runs["low-rank"].round_metrics["num_available"],
                                  runs["materialized"].round_metrics["num_available"])
    for a, b in zip(jax.tree_util.tree_leaves(runs["low-rank"].output),
                    jax.tree_util.tree_leaves(runs["materialized"].output)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    x = np.concatenate([np.asarray(data.x[i, :int(n)]) for i, n in enumerate(np.asarray(data.sizes))])
    y = np.concatenate([np.asarray(data.y[i, :int(n)]) for i, n in enumerate(np.asarray(data.sizes))])
    offsets = np.cumsum([0] + [int(n) for n in np.asarray(data.sizes)])
    pooled = PooledSiloData.from_indices(x, y, [np.arange(offsets[i], offsets[i + 1]) for i in range(len(offsets) - 1)])
    pooled_run = engine.run(DpFedAvg(_mlp(), 3, 4, sampling_rate=0.3, input_layer="low-rank", **kw), pooled, hp, key)
    for a, b in zip(jax.tree_util.tree_leaves(pooled_run.output), jax.tree_util.tree_leaves(runs["low-rank"].output)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


def test_the_gram_state_is_kept_only_where_it_applies():
    data, p = _silos(), _mlp()
    params = p.init_params(jax.random.key(0))
    ctx = engine.roles.Context(jnp.int32(0), jax.random.key(0), None, data, None, params, params)
    gram = LocalDeltas(p, 2, 3, input_layer="low-rank").init(params, ctx)
    np.testing.assert_allclose(gram[4], np.asarray(data.x[4]) @ np.asarray(data.x[4]).T, rtol=1e-5, atol=1e-6)
    assert LocalDeltas(p, 2, 3).init(params, ctx) == ()
    lin = LinearRegression(7)
    assert LocalDeltas(lin, 2, 3, input_layer="auto").init(lin.init_params(jax.random.key(0)), ctx) == ()


def test_input_layer_refusals_name_the_value():
    data, hp = _silos(), FedAvgHParams.create(0.5)
    with pytest.raises(ValueError, match="input_layer='sparse'"):
        DpFedAvg(_mlp(), 2, 4, sampling_rate=0.3, local_batch_size=2, input_layer="sparse")
    with pytest.raises(ValueError, match="input_layer='low-rank' needs a local_batch_size"):
        LocalDeltas(_mlp(), 2, None, input_layer="low-rank")
    lin_data = SiloData.from_silos([np.ones((4, 7), np.float32)] * 6, [np.ones(4, np.float32)] * 6)
    with pytest.raises(ValueError, match="input_layer='low-rank' needs a model whose first operation is a Dense"):
        engine.run(DpFedAvg(LinearRegression(7), 2, 2, sampling_rate=0.3, local_batch_size=2, input_layer="low-rank"),
                   lin_data, hp, jax.random.key(0))
    auto = engine.run(DpFedAvg(LinearRegression(7), 2, 2, sampling_rate=0.3, local_batch_size=2, input_layer="auto"),
                      lin_data, hp, jax.random.key(0))
    plain = engine.run(DpFedAvg(LinearRegression(7), 2, 2, sampling_rate=0.3, local_batch_size=2), lin_data, hp,
                       jax.random.key(0))
    np.testing.assert_array_equal(auto.output, plain.output)  # auto falls back to the materialised steps exactly
