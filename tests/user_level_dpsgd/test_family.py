"""user-level-dpsgd's parts: the ULS / ELS batches, the per-user and per-record clipped sums against direct
computations, the sensitivity of one user (and the per-record-clipping mutant's), and runs of the family."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpjax import engine
from dpjax.algorithms.user_level_dpsgd import DpSgdHParams, UserLevelDpSgd
from dpjax.engine.chain import DataShape, fold
from dpjax.engine.roles import Context
from dpjax.engine.users import UserSplit
from dpjax.parts.user_records import ClipRecords, pack_user_labels, user_mean_loss
from dpjax.primitives import clipping, ghost_clipping
from dpjax.problems import FlaxProblem
from dpjax.problems.mlp import MLP

PROBLEM = FlaxProblem(MLP((4,), 2), (3,), "softmax")
K = 3
PER_EXAMPLE = jax.jit(lambda p, x, y: clipping.per_example_grads(PROBLEM.loss, p, x, y))


def _split(seed=0, n=60, users=8):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = (x[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(np.int32)
    return UserSplit.power_law(x, y, users, exponent=1.0, seed=seed + 1, max_records=2 * K)


def _round(fam, data, hp, key, params):
    """The round's selection, client and clipper-aggregator, compiled (noise 0 adds exactly nothing after them)."""
    parts = fam.parts(DataShape.of(data))

    def one(data, hp, key, params):
        ctx = Context(jnp.zeros((), jnp.int32), key, hp, data, None, params, params)
        batch, _ = parts.selection.update(data, (), ctx)
        value, _ = fold(parts.chain[:2], batch, ((), ()), ctx._replace(batch=batch))
        return batch._replace(num_silos=None), value

    return jax.jit(one)(data, hp, key, params)


def grads_count(tree):
    return jax.tree_util.tree_leaves(tree)[0].shape[0]


def _flat(tree):
    return np.concatenate([np.asarray(a, np.float64).ravel() for a in jax.tree_util.tree_leaves(tree)])


def test_uls_sum_is_the_clipped_mean_gradient_of_every_sampled_user():
    split = _split()
    params = PROBLEM.init_params(jax.random.key(0))
    fam = UserLevelDpSgd(PROBLEM, 3, "user", batch_size=3, sampling_rate=0.5, records_per_user=K)
    hp = DpSgdHParams.create(0.1, 0.0, 0.05)
    batch, value = _round(fam, split.data, hp, jax.random.key(7), params)
    # reference: per-example gradients of every slot (compiled once), a user's gradient the mean over its real
    # records (the gradient of the mean loss: linear), clipped in float64
    grads = PER_EXAMPLE(params, split.data.x.reshape(-1, 3), split.data.y.reshape(-1))
    grads = np.stack([_flat(jax.tree_util.tree_map(lambda g: g[i], grads)) for i in range(grads_count(grads))])
    grads = grads.reshape(split.data.num_silos, split.data.n_max, -1)
    expected = 0.0
    for row, avail in zip(np.asarray(batch.silo_ids), np.asarray(batch.available)):
        if avail:
            g = grads[row, : min(int(split.sizes[row]), K)].mean(0)
            expected = expected + g * min(1.0, 0.05 / np.linalg.norm(g))
    assert np.asarray(batch.available).sum() >= 2  # a real round, not an empty one
    np.testing.assert_allclose(_flat(value.value), expected / 3, rtol=2e-5, atol=1e-8)
    assert float(value.sensitivity) == pytest.approx(0.05 / 3)  # add/remove one user: C / m


def test_els_sum_is_the_clipped_gradient_of_every_sampled_record_and_respects_k():
    split = _split()
    params = PROBLEM.init_params(jax.random.key(0))
    fam = UserLevelDpSgd(PROBLEM, 3, "example", batch_size=10, sampling_rate=1.0, records_per_user=K)
    hp = DpSgdHParams.create(0.1, 0.0, 0.05)
    batch, value = _round(fam, split.data, hp, jax.random.key(7), params)
    users, slots = np.asarray(batch.silo_ids), np.asarray(batch.indices)[:, 0]
    real = np.asarray(batch.available)
    # q = 1: every user's first min(size, k) records, each once, nothing past slot k
    assert real.sum() == np.minimum(split.sizes, K).sum() and slots[real].max() < K
    assert len({(u, s) for u, s in zip(users[real], slots[real])}) == real.sum()
    grads = PER_EXAMPLE(params, split.data.x[users[real], slots[real]], split.data.y[users[real], slots[real]])
    flat = np.stack([_flat(jax.tree_util.tree_map(lambda g: g[i], grads)) for i in range(grads_count(grads))])
    expected = (flat * np.minimum(1.0, 0.05 / np.linalg.norm(flat, axis=1))[:, None]).sum(0)
    np.testing.assert_allclose(_flat(value.value), expected / 10, rtol=2e-5, atol=1e-8)


def test_uls_user_clipping_runs_on_ghost_norms_for_a_flax_model():
    split = _split()
    params = PROBLEM.init_params(jax.random.key(0))
    x, y, w = split.data.x[:4, :K], split.data.y[:4, :K], split.data.mask[:4, :K].astype(jnp.float32)
    loss = user_mean_loss(PROBLEM.loss, (), jnp.int32)
    plan = ghost_clipping.make_plan(loss, params, x, pack_user_labels(y, w))
    assert plan.fast, plan.reason
    fast, slow = (jax.jit(lambda p, f=f: ghost_clipping.ghost_clipped_sum(
        loss, p, x, pack_user_labels(y, w), 0.02, jnp.ones(4), force_fallback=f).total)(params) for f in (False, True))
    np.testing.assert_allclose(_flat(fast), _flat(slow), rtol=1e-5, atol=1e-9)


@pytest.mark.privacy
def test_one_user_moves_the_uls_sum_by_at_most_c_over_m_and_the_per_record_mutant_by_k_times_more():
    """D' = D plus a canary user of k identical records whose gradient is far above C: every user sampled (q = 1),
    no noise. Honest ULS: the difference is the canary's clipped mean gradient, norm exactly C / m. The mutant
    (each record clipped and summed: DP-SGD's clipping on user data) moves it by k C / m, k times the bound the
    ULS accountant is charged for."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    owner = np.repeat(np.arange(5), 8)
    canary_x = np.repeat(20 * np.ones((1, 3), np.float32), K, 0)
    with_canary = UserSplit.from_user_ids(np.concatenate([x, canary_x]), np.concatenate([y, np.zeros(K, np.int32)]),
                                          np.concatenate([owner, np.full(K, 5)]), max_records=K)
    without = UserSplit.from_user_ids(x, y, owner, max_records=K)
    params = PROBLEM.init_params(jax.random.key(0))
    clip, m = 0.1, 3.0
    hp = DpSgdHParams.create(0.1, 0.0, clip)
    fam = UserLevelDpSgd(PROBLEM, 1, "user", batch_size=3, sampling_rate=1.0, records_per_user=K)

    parts = fam.parts(DataShape.of(without.data))
    mutant_clip = ClipRecords(PROBLEM, 3.0)  # the mutant: every record clipped and summed, as DP-SGD does

    @jax.jit
    def messages(data):
        """The honest ULS message and the mutant's, from the same batch (one compile per data set)."""
        ctx = Context(jnp.zeros((), jnp.int32), jax.random.key(1), hp, data, None, params, params)
        batch, _ = parts.selection.update(data, (), ctx)
        ctx = ctx._replace(batch=batch)
        units, _ = parts.chain[0].update(batch, (), ctx)
        return parts.chain[1].update(units, (), ctx)[0], mutant_clip.update(units, (), ctx)[0]

    (honest_a, mutant_a), (honest_b, mutant_b) = messages(with_canary.data), messages(without.data)
    honest = np.linalg.norm(_flat(honest_a.value) - _flat(honest_b.value))
    mutant = np.linalg.norm(_flat(mutant_a.value) - _flat(mutant_b.value))
    bound = float(honest_a.sensitivity)
    assert bound == pytest.approx(clip / m)
    assert honest == pytest.approx(clip / m, rel=1e-4)  # the canary's mean gradient is clipped to exactly C
    assert mutant == pytest.approx(K * clip / m, rel=1e-4) and mutant > 2 * bound

@pytest.mark.privacy
def test_uls_includes_every_user_with_the_declared_rate():
    """200 rounds x 12 users, q = 0.3: the total inclusions are Binomial(2400, 0.3) (independent draws); an exact
    binomial test at 1e-4, and every draw only ever selects real users' real records."""
    split = _split(users=12, n=80)
    fam = UserLevelDpSgd(PROBLEM, 1, "user", batch_size=4, sampling_rate=0.3, records_per_user=K)
    selection = fam.parts(DataShape.of(split.data)).selection
    hp = DpSgdHParams.create(0.1, 0.0, 1.0)

    def draw(key):
        b, _ = selection.update(split.data, (), Context(jnp.zeros((), jnp.int32), key, hp, split.data))
        hits = jnp.zeros(split.data.num_silos, jnp.int32).at[b.silo_ids].add(b.available.astype(jnp.int32))
        return hits, jnp.all(~b.weights | (b.indices < split.data.sizes[b.silo_ids][:, None])), jnp.any(b.overflow)

    hits, real, overflow = jax.jit(jax.vmap(draw))(jax.random.split(jax.random.key(3), 200))
    assert bool(jnp.all(real)) and not bool(jnp.any(overflow))
    assert int(jnp.max(hits)) <= 1  # a user at most once a round
    assert stats.binomtest(int(jnp.sum(hits)), 200 * 12, 0.3).pvalue > 1e-4


@pytest.mark.slow  # two compiled runs per unit (~25 s on the shared 2-core CPU)
@pytest.mark.parametrize("unit", ["user", "example"])
def test_family_runs_and_its_twin_is_the_noiseless_unclipped_run(unit):
    split = _split()
    fam = UserLevelDpSgd(PROBLEM, 4, unit, batch_size=4, sampling_rate=0.5, records_per_user=K)
    twin = UserLevelDpSgd(PROBLEM, 4, unit, batch_size=4, sampling_rate=0.5, records_per_user=K, private=False)
    key = jax.random.key(2)
    private = engine.run(fam, split.data, DpSgdHParams.create(0.5, 0.0, float("inf")), key)
    plain = engine.run(twin, split.data, DpSgdHParams.create(0.5, 1.0, 0.1), key)
    for a, b in zip(jax.tree_util.tree_leaves(private.output), jax.tree_util.tree_leaves(plain.output)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert fam.privacy(split.data.silo_sizes(), DpSgdHParams.create(0.5, 1.0, 0.1)).unit == "user"


@pytest.mark.parametrize("kwargs, name", [({"unit": "users"}, "unit"), ({"sampling_rate": 0.0}, "sampling_rate"),
                                          ({"records_per_user": 0}, "records_per_user"),
                                          ({"optimizer": "lion"}, "optimizer")])
def test_bad_configs_name_the_argument(kwargs, name):
    args = {"unit": "user", "batch_size": 2, "sampling_rate": 0.1, "records_per_user": 2, **kwargs}
    with pytest.raises(ValueError, match=name):
        UserLevelDpSgd(PROBLEM, 3, **args)


@pytest.mark.privacy
@pytest.mark.parametrize("unit", ["user", "example"])
def test_a_large_population_is_cut_at_the_truncated_capacity_with_the_same_coins(unit):
    """Truncated Poisson over users (ULS) / user-records (ELS) at n >> B: the batch has the capacity the certificate
    charges for (``truncated_capacity`` of the n users, resp. n k slots), never overflows, and holds exactly the
    users / records the untruncated (buffered) draw takes from the same coins when nothing is cut."""
    from dpjax.accounting import truncated_poisson as tp

    split = _split(seed=4, n=3000, users=1500)
    data, q, rounds = split.data, 0.01, 50
    hp = DpSgdHParams.create(0.1, 0.0, 0.05)
    params = PROBLEM.init_params(jax.random.key(0))

    def draw(fam):
        sel = fam.parts(DataShape.of(data)).selection
        ctx = Context(jnp.zeros((), jnp.int32), jax.random.key(11), hp, data, None, params, params)
        batch, _ = jax.jit(lambda d, c: sel.update(d, (), c))(data, ctx)
        keep = np.asarray(batch.available)
        rows = np.asarray(batch.silo_ids)[keep] if unit == "user" else np.stack(
            [np.asarray(batch.silo_ids)[keep], np.asarray(batch.indices)[:, 0][keep]], 1)
        return keep.shape[0], {tuple(np.atleast_1d(r)) for r in rows}

    cut = UserLevelDpSgd(PROBLEM, rounds, unit, batch_size=15, sampling_rate=q, records_per_user=K)
    old = UserLevelDpSgd(PROBLEM, rounds, unit, batch_size=15, sampling_rate=q, records_per_user=K,
                         poisson_selection="buffered")
    slots = data.num_silos if unit == "user" else int(np.minimum(split.sizes, K).sum())
    width, chosen = draw(cut)
    assert width == tp.selection_capacity(data.num_silos if unit == "user" else data.num_silos * min(K, data.n_max),
                                          q, rounds) < slots / 2
    old_width, old_chosen = draw(old)
    assert 0 < len(chosen) <= width and chosen == old_chosen  # nothing cut at this q: the same coins, the same batch
