"""The Poisson buffer's empty tail skipped (issue #38): with ``client_batch`` k the low-rank client gathers each chunk's
records inside the chunk, and the clipper sums the kernels over the chunks up to the last sampled silo only
(``input_dense.factored_weighted_sum(live=, chunk=)``). Same cohort, same deltas, same clipped sum as the whole-buffer
path (``LocalDeltas(chunk_gather=False)``, the code before the change) to float64 rounding; a prefix that stops at the
sampled count instead of the last live slot, or one chunk short, drops a silo and must fail these checks."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.algorithms.dp_fedavg import FedAvgHParams
from dpjax.engine import input_dense
from dpjax.engine.roles import Context, FactoredDeltas
from dpjax.engine.silos import SiloData
from dpjax.parts.adaptive_clipping import AdaptiveClipMean
from dpjax.parts.cross_device import LocalDeltas, SampledSilos
from dpjax.problems import FlaxProblem


class Mlp(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.tanh(nn.Dense(5)(x)))


def _problem():
    return FlaxProblem(Mlp(), (7,), loss_kind="softmax")


def _rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(np.asarray(b))))


@pytest.mark.parametrize("live_slots", [(), (0,), (0, 1, 2), (0, 1, 2, 3), tuple(range(10)), (9,), (4, 7)],
                         ids=["none", "one", "one-chunk", "chunk-plus-one", "all", "last-only", "gaps"])
def test_prefix_sum_equals_the_whole_buffer_matmul(live_slots):
    """Every live slot's kernel is in the sum, whatever the pattern (a prefix, the last slot alone, gaps), and the dead
    slots' coefficients are 0: the switch over prefix lengths equals the one matmul over all 10 slots (chunks of 3)."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        records, h = jnp.asarray(rng.normal(size=(10, 4, 6))), jnp.asarray(rng.normal(size=(10, 4, 2)))
        live = jnp.zeros(10, bool).at[jnp.asarray(live_slots, jnp.int32)].set(True)
        coefficients = jnp.where(live, jnp.asarray(rng.uniform(0.5, 1.5, size=10)), 0.0)
        whole = input_dense.factored_weighted_sum(records, h, coefficients)
        prefix = jax.jit(input_dense.factored_weighted_sum, static_argnames="chunk")(records, h, coefficients,
                                                                                    live=live, chunk=3)
        if not live_slots:
            np.testing.assert_array_equal(prefix, np.zeros((6, 2)))
        else:
            assert _rel(prefix, whole) <= 1e-12


def test_a_prefix_cut_at_the_count_drops_a_gapped_silo(monkeypatch):
    """Mutant: the prefix from the number of live slots (right for a Poisson buffer's packed cohort) instead of the last
    live one drops the silo at slot 7 when slots 4 and 7 are live; the check above must see it."""
    real = input_dense.factored_weighted_sum

    def by_count(records, h, coefficients, live=None, chunk=None):
        cut = jnp.arange(records.shape[0]) < jnp.sum(live)
        return real(records, h, coefficients, live=cut, chunk=chunk)

    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        records, h = jnp.asarray(rng.normal(size=(10, 4, 6))), jnp.asarray(rng.normal(size=(10, 4, 2)))
        live = jnp.zeros(10, bool).at[jnp.asarray([4, 7])].set(True)
        coefficients = jnp.where(live, 1.0, 0.0)
        assert _rel(by_count(records, h, coefficients, live=live, chunk=3), real(records, h, coefficients)) > 0.1


def _population(num=40, seed=0):
    """float64 silos of 3..6 records (n_max 6): 40 silos at q = 0.2 make a Poisson buffer of 33 slots (m + 6 sqrt(m)
    + 8 for m = 8) with a long empty tail."""
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(int(rng.integers(3, 7)), 7)) for _ in range(num)]
    return SiloData.from_silos(xs, [rng.integers(0, 3, size=len(x)).astype(np.int32) for x in xs], dtype=jnp.float64)


LOCALS = {"epochs-silo-rows": dict(local_steps=1, local_batch_size=4, local_epochs=2),
          "draws-step-order": dict(local_steps=2, local_batch_size=2)}


@pytest.mark.privacy
@pytest.mark.parametrize("local", list(LOCALS.values()), ids=list(LOCALS))
@pytest.mark.parametrize("keep_grams", [True, False], ids=["grams-kept", "grams-formed"])
def test_chunked_round_releases_the_whole_buffer_round_in_float64(local, keep_grams):
    """One round (noise on, adaptive clip moving, the clip bound between the silos' norms): the chunked gather and the
    prefix sum, with the Grams kept as state or formed for the chunk's silos (``keep_grams``), against the
    whole-buffer path with kept Grams (the code before issue #38) on the same cohort. Exact in real arithmetic, so
    float64 agrees to rounding (~1e-15), asserted at 1e-10; the released mean, the next clip bound, the sensitivity,
    and the cohort (which must leave an empty chunk of 3 at the buffer's tail, or the prefix would not be exercised)."""
    with jax.enable_x64(True):
        data = _population()
        params = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), _problem().init_params(jax.random.key(1)))
        hp = FedAvgHParams.create(1.0, client_learning_rate=0.5, noise_multiplier=0.5, noise_multiplier_count=2.0,
                                  clip_norm=1.0, clip_learning_rate=0.2)
        ctx = Context(jnp.int32(0), jax.random.key(4), hp, data, None, params, params)
        selection = SampledSilos(8, sampling_rate=0.2)
        assert selection.capacity(data.num_silos) == 33

        @jax.jit
        def release(ctx, clip):
            batch, _ = selection.update(ctx.data, (), ctx)
            ctx = ctx._replace(batch=batch)
            out = []
            for chunked in (True, False):
                client = LocalDeltas(_problem(), input_layer="low-rank", client_batch=3, chunk_gather=chunked,
                                     keep_grams=keep_grams or not chunked, **local)
                state = client.init(ctx.params, ctx)
                assert isinstance(state, jax.Array) == (keep_grams or not chunked)
                units, _ = client.update(batch, state, ctx)
                assert isinstance(units, FactoredDeltas) and units.live_chunk == (3 if chunked else None)
                released, new_clip = AdaptiveClipMean(8).update(units, clip, ctx)
                sq = input_dense.factored_sq_norms(units.gram, units.h) if units.gram is not None else None
                if chunked:  # the chunks' norms, formed where the chunk had its Gram; no Gram carried out
                    assert units.gram is None and callable(units.records)
                    sq = units.kernel_sq_norms
                    kernel = jax.tree_util.tree_leaves(units.vectors)[units.kernel_index]  # X^T h itself
                    out.append(jnp.sum(jnp.square(kernel), axis=(1, 2)))
                out.append((released.value, new_clip, released.sensitivity, sq))
            return batch.available, out

        available, [direct, (mean_c, clip_c, sens_c, norms_c), (mean_w, clip_w, sens_w, norms_w)] = release(ctx, 1.0)
        # the kernels' squared norms (the clip's input): against the whole-buffer path and against ||X^T h||^2 formed
        # without the Gram (a norm that drops the Gram, or takes another chunk's, fails here)
        assert _rel(norms_c, norms_w) <= 1e-10 and _rel(norms_c, direct) <= 1e-10
        count = int(np.sum(available))
        assert 0 < count and -(-count // 3) * 3 + 3 <= 33 and not np.any(np.asarray(available)[count:])
        s = np.sort(np.sqrt(np.asarray(norms_w))[:count])
        clip = float(s[len(s) // 2])  # some silos clipped, some not
        available, [_, (mean_c, clip_c, sens_c, _), (mean_w, clip_w, sens_w, _)] = release(ctx, clip)
        assert float(sens_c) == float(sens_w)
        for a, b in zip(jax.tree_util.tree_leaves(mean_c), jax.tree_util.tree_leaves(mean_w)):
            assert _rel(a, b) <= 1e-10, _rel(a, b)
        assert _rel(clip_c, clip_w) <= 1e-10


def test_grams_are_kept_only_for_a_run_that_visits_every_silo():
    """``R m >= N``: the benchmark's 5 rounds of ~100 of 1,000 clients form their Grams per round (1,000 up front would
    cost more than the 500 visits); 50 rounds keep them; the client of the built round carries the decision."""
    from dpjax.algorithms.dp_fedavg import DpFedAvg, keep_record_grams
    from dpjax.engine.chain import DataShape

    assert not keep_record_grams(5, 100, 1000) and keep_record_grams(10, 100, 1000) and keep_record_grams(50, 100, 1000)
    for rounds, kept in ((5, False), (50, True)):
        parts = DpFedAvg(_problem(), rounds, 100, sampling_rate=0.1, local_batch_size=10, input_layer="auto",
                         client_batch=25).parts(DataShape(1000, 60))
        (client,) = [c for c in parts.chain if isinstance(c, LocalDeltas)]
        assert client.keep_grams is kept and client.chunk_gather
