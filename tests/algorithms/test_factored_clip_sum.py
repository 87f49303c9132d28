"""The factored clip-and-sum of DP-FedAvg's low-rank first kernel (``FactoredDeltas`` into ``AdaptiveClipMean``): the
same norms, clipped sum, count and noise draw as the materialised deltas, to float64 rounding; a norm without the
record Gram (``||h||`` for ``||X^T h||``) understates the clip and must fail these checks."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.algorithms.dp_fedavg import FedAvgHParams
from dpjax.engine import input_dense
from dpjax.engine.roles import Context, FactoredDeltas, PerUnitVectors
from dpjax.engine.silos import SiloData
from dpjax.parts.adaptive_clipping import AdaptiveClipMean
from dpjax.parts.cross_device import LocalDeltas, SampledSilos
from dpjax.primitives import clipping
from dpjax.problems import FlaxProblem


class Mlp(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.tanh(nn.Dense(5)(x)))


#: two local epochs in batches of 4 (the silo's own rows, its kept Gram as it is); two independent draws of 2 records
#: (4 positions < n_max 6: the steps' rows in step order, the Gram permuted)
EPOCHS = dict(local_steps=1, local_batch_size=4, local_epochs=2)
STEP_ORDER = dict(local_steps=2, local_batch_size=2)


def _data_and_context(noise):
    """float64 silos of unequal sizes (3..6 records, n_max 6: two local epochs in batches of 4 leave padded, masked
    rows) and a round's context."""
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(int(rng.integers(3, 7)), 7)) for _ in range(12)]
    data = SiloData.from_silos(xs, [rng.integers(0, 3, size=len(x)).astype(np.int32) for x in xs], dtype=jnp.float64)
    assert data.x.dtype == jnp.float64 and int(data.min_size) < int(data.n_max)
    params = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), _problem().init_params(jax.random.key(1)))
    hp = FedAvgHParams.create(1.0, client_learning_rate=0.5, noise_multiplier=noise, noise_multiplier_count=2.0,
                              clip_norm=1.0, clip_learning_rate=0.2)
    return data, Context(jnp.int32(0), jax.random.key(4), hp, data, None, params, params)


def _problem():
    return FlaxProblem(Mlp(), (7,), loss_kind="softmax")


def _units(ctx, local=None):
    """The round's Poisson cohort (unsampled silos weigh 0) and its deltas: low-rank (factored) and materialised."""
    batch, _ = SampledSilos(6, sampling_rate=0.5).update(ctx.data, (), ctx)
    ctx = ctx._replace(batch=batch)
    local = local or EPOCHS
    low_rank = LocalDeltas(_problem(), input_layer="low-rank", **local)
    factored, _ = low_rank.update(batch, low_rank.init(ctx.params, ctx), ctx)
    materialized, _ = LocalDeltas(_problem(), **local).update(batch, (), ctx)
    return ctx, factored, materialized


def _rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(np.asarray(b))))


def _factored_norms(units):
    leaves = jax.tree_util.tree_leaves(units.vectors)
    rest = sum(jnp.sum(jnp.square(t).reshape(t.shape[0], -1), axis=1)
               for i, t in enumerate(leaves) if i != units.kernel_index)
    return jnp.sqrt(rest + input_dense.factored_sq_norms(units.gram, units.h))


def _release_errors(noise=0.0, local=None):
    """Max relative errors of (norms, released mean leaves, next clip bound): factored against materialised, the clip
    bound between two reporting silos' norms (it clips some of them and not others). One jitted round (eager float64
    dispatch costs ~30 s); built fresh per call, so a monkeypatched mutant is traced."""
    data, ctx = _data_and_context(noise)

    @jax.jit
    def release(ctx, clip):
        ctx, factored, materialized = _units(ctx, local)
        assert isinstance(factored, FactoredDeltas) and type(materialized) is PerUnitVectors
        clipper = AdaptiveClipMean(6)
        out_f, c_f = clipper.update(factored, clip, ctx)
        out_m, c_m = clipper.update(materialized, clip, ctx)
        return (_factored_norms(factored), jax.vmap(clipping.global_norm)(materialized.vectors), ctx.batch.available,
                out_f.value, out_m.value, c_f, c_m, out_f.sensitivity, out_m.sensitivity)

    norms_m, avail = (np.asarray(a) for a in release(ctx, jnp.float64(1.0))[1:3])
    s = np.sort(norms_m[avail])
    clip = float(s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    assert np.any(norms_m[avail] > clip) and np.any(norms_m[avail] < clip)
    norms_f, norms_m, _, out_f, out_m, c_f, c_m, sens_f, sens_m = release(ctx, jnp.float64(clip))
    assert float(sens_f) == float(sens_m) == pytest.approx(clip / 6)  # C / m: the clipper's, on both paths
    leaves = [_rel(a, b) for a, b in zip(jax.tree_util.tree_leaves(out_f), jax.tree_util.tree_leaves(out_m))]
    return _rel(norms_f, norms_m), max(leaves), _rel(c_f, c_m)


@pytest.mark.privacy
@pytest.mark.parametrize("local", [EPOCHS, STEP_ORDER], ids=["epochs-silo-rows", "draws-step-order"])
def test_factored_clip_sum_equals_the_materialised_one_in_float64(local):
    """Exact in real arithmetic (||X^T h||^2 = <X X^T, h h^T>; sum_i s_i X_i^T h_i = X_all^T (s * h_all)), so float64
    agrees to rounding: ~1e-15 relative, asserted at 1e-10. The released mean (noise 0), the adaptive bound moved by the
    count of unclipped silos, and the per-silo norms."""
    with jax.enable_x64(True):
        norm_err, mean_err, clip_err = _release_errors(local=local)
    assert norm_err <= 1e-10 and mean_err <= 1e-10 and clip_err <= 1e-10, (norm_err, mean_err, clip_err)


@pytest.mark.privacy
def test_factored_path_draws_the_same_noise():
    """Same round key, same tree: the same Gaussian draw on both sums (std z C / m = 0.5 C / 6, the size of the signal
    here); a different draw would differ by O(1) relative."""
    with jax.enable_x64(True):
        _, mean_err, _ = _release_errors(noise=0.5)
    assert mean_err <= 1e-10, mean_err


@pytest.mark.privacy
def test_a_norm_without_the_gram_fails_the_checks(monkeypatch):
    """Mutant: ``||h||^2`` for ``||X^T h||^2`` (the Gram dropped) understates the norms, clips less and releases more
    than C per silo: the float64 agreement above must catch it."""
    monkeypatch.setattr(input_dense, "factored_sq_norms", lambda gram, h: jnp.sum(h * h, axis=(1, 2)))
    with jax.enable_x64(True):
        norm_err, mean_err, _ = _release_errors()
    assert norm_err > 1e-3 and mean_err > 1e-3, (norm_err, mean_err)


def test_factored_units_carry_the_materialised_deltas():
    """A clipper that does not read the factors (``ClipPerUnit``) gets the deltas themselves: ``vectors`` holds the
    kernel's ``X_i^T h_i`` too, equal to the materialised steps' deltas; ``factored_units=False`` hands over only those."""
    with jax.enable_x64(True):
        _, ctx = _data_and_context(0.0)

        @jax.jit
        def deltas(ctx):
            ctx, factored, materialized = _units(ctx)
            plain = LocalDeltas(_problem(), 1, 4, local_epochs=2, input_layer="low-rank", factored_units=False)
            assert type(plain.update(ctx.batch, (), ctx)[0]) is PerUnitVectors
            return factored.vectors, materialized.vectors

        factored, materialized = deltas(ctx)
        for a, b in zip(jax.tree_util.tree_leaves(factored), jax.tree_util.tree_leaves(materialized)):
            assert _rel(a, b) <= 1e-10


def test_factored_weighted_sum_keeps_a_zero_weight_overflow_out():
    """A silo of coefficient 0 adds nothing even when its h overflowed (0 x inf would be NaN in a plain product)."""
    records = jnp.ones((2, 3, 4))
    h = jnp.stack([jnp.full((3, 2), jnp.inf), jnp.ones((3, 2))])
    total = input_dense.factored_weighted_sum(records, h, jnp.array([0.0, 2.0]))
    np.testing.assert_array_equal(total, np.full((4, 2), 6.0))  # 2 x (sum over 3 rows of 1 x 1)
