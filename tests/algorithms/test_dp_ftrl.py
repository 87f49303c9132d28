"""DP-FTRL with tree aggregation (Kairouz et al. 2021): the tree's node count by enumeration, privacy
against a hand computation, the prefix-sum noise covariance measured on the family's own rounds, and
zero noise = SGD on the same order of records."""

from __future__ import annotations

import math

import dp_accounting as dpa
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, stats

from dpjax.algorithms.dp_ftrl import DpFtrl, FtrlHParams, epoch_tree_counts, tree_depth, tree_releases
from dpjax.algorithms.isrl_mbsgd import NoisyMbSgd
from dpjax import engine
from dpjax.engine.chain import DataShape
from dpjax.engine.roles import Context
from dpjax.engine.silos import SiloData
from dpjax.problems import LinearRegression

DELTA = 1e-5


def prefix_nodes(t: int) -> list[tuple[int, int]]:
    """The dyadic intervals [start, end] (1-based) whose union is [1, t]: one per set bit of t."""
    nodes, start = [], 1
    for level in reversed(range(t.bit_length())):
        if t >> level & 1:
            nodes.append((start, start + 2 ** level - 1))
            start += 2 ** level
    return nodes


def epoch_trees(num_rounds: int, rounds_per_epoch: int) -> tuple[int, ...]:
    """The leaves of each epoch's tree, one entry per epoch (the last epoch holds what is left)."""
    return tuple(min(rounds_per_epoch, num_rounds - s) for s in range(0, num_rounds, rounds_per_epoch))


def released_nodes(leaves: int) -> set[tuple[int, int]]:
    return {node for t in range(1, leaves + 1) for node in prefix_nodes(t)}


@pytest.mark.parametrize("leaves", range(1, 41))
def test_tree_depth_is_the_most_released_nodes_over_one_leaf(leaves):
    nodes = released_nodes(leaves)
    per_leaf = [sum(a <= leaf <= b for a, b in nodes) for leaf in range(1, leaves + 1)]
    assert max(per_leaf) == per_leaf[0] == tree_depth(leaves) == math.ceil(math.log2(leaves + 1))


def test_epoch_trees_restart_every_epoch():
    assert epoch_trees(20, 6) == (6, 6, 6, 2) and epoch_trees(12, 6) == (6, 6) and epoch_trees(4, 6) == (4,)


def test_epoch_tree_counts_are_the_closed_form_of_epoch_trees():
    for rounds, per_epoch in [(20, 6), (12, 6), (4, 6), (1, 1), (37, 5)]:
        listed = epoch_trees(rounds, per_epoch)
        pairs = epoch_tree_counts(rounds, per_epoch)
        assert tuple(t for t, k in pairs for _ in range(k)) == listed
        assert tree_releases(rounds, per_epoch) == sum(tree_depth(t) for t in listed)


@pytest.mark.privacy
def test_privacy_of_a_billion_rounds_is_closed_form_and_fast():
    """10^9 rounds of 10-round epochs: 10^8 trees of 4 node releases each, accounted without listing the trees (it
    held > 2.2 GB and answered nothing in 9 minutes). RDP of the closed form equals dp_accounting's on the
    self-composed tree event; the Gaussian rules see 4 x 10^8 releases."""
    import time

    start = time.perf_counter()
    family = DpFtrl(LinearRegression(3), 10**9, 10)
    hp = FtrlHParams.create(0.1, 1000.0, 1.0)
    spec = family.privacy([100, 100], hp)
    assert spec.tree_counts == ((10, 10**8),) and spec.schedule.steps == 4 * 10**8
    eps = spec.epsilon(DELTA, "rdp").epsilon
    assert time.perf_counter() - start < 10
    accountant = dpa.rdp.RdpAccountant(neighboring_relation=spec.dp_neighboring_relation)
    assert accountant.compose(spec.dp_event()).get_epsilon(DELTA) == pytest.approx(eps, rel=1e-6)
    with pytest.raises(ValueError, match="step_counts of 100000000 epochs"):
        spec.step_counts


def silos(n=24, num=3, dim=3, seed=0, zero=False):
    rng = np.random.default_rng(seed)
    xs = [np.zeros((n, dim), np.float32) if zero else rng.normal(size=(n, dim)).astype(np.float32) for _ in range(num)]
    ys = [np.zeros(n, np.float32) if zero else (x @ np.linspace(1, -1, dim)).astype(np.float32) for x in xs]
    return SiloData.from_silos(xs, ys)


def test_privacy_is_the_tree_restart_gaussian_by_hand():
    """n = 24, B = 4: epochs of T = 6 rounds; R = 20 is trees (6, 6, 6, 2), 3 + 3 + 3 + 2 = 11 node
    releases of multiplier z per record. RDP: alpha 11 / (2 z^2) (Kairouz et al. Appendix D); GDP:
    mu = sqrt(11) / z, epsilon from the Gaussian's exact tradeoff."""
    alg = DpFtrl(LinearRegression(3), 20, 4)
    z = float(np.float32(1.3))
    spec = alg.privacy([24, 30, 26], FtrlHParams.create(0.1, 1.3, clip_norm=0.6))
    assert spec.unit == "record" and spec.neighboring == "replace-one"
    orders = np.asarray(dpa.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS, float)
    hand = dpa.rdp.rdp_privacy_accountant.compute_epsilon(orders, orders * 11 / (2 * z * z), DELTA)[0]
    assert spec.epsilon(DELTA, "rdp").epsilon == pytest.approx(hand, rel=1e-9)
    mu = math.sqrt(11) / z
    delta_of = lambda e: stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2)  # noqa: E731
    assert spec.epsilon(DELTA, "gdp").epsilon == pytest.approx(optimize.brentq(lambda e: delta_of(e) - DELTA, 0, 50),
                                                               rel=1e-6)
    z_cal = spec.calibrate(2.0, DELTA, "gdp")["noise_multiplier"]
    assert z_cal == pytest.approx(math.sqrt(11) / optimize.brentq(
        lambda m: stats.norm.cdf(-2 / m + m / 2) - math.exp(2) * stats.norm.cdf(-2 / m - m / 2) - DELTA, 0.01, 10),
        rel=1e-5)


def trajectory(params, eval_data):
    return {"w": params}


def test_prefix_noise_has_the_tree_covariance_measured_on_the_family_rounds():
    """Zero data: theta_t = -eta x (noise of the prefix sum). Two epochs of T = 6 rounds plus 3: the
    covariance of the prefix noises is (shared released nodes) x (z 2C/(BN))^2, the tree restarting
    every epoch (the old tree's last prefix stays in theta). 20000 runs, 0.15 of a node's variance."""
    rounds, batch, n, num = 15, 4, 24, 2
    alg = DpFtrl(LinearRegression(1), rounds, batch)
    hp = FtrlHParams.create(1.0, 0.9, clip_norm=0.5)
    runs = 20_000
    batched = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (runs,)), hp)
    res = engine.run_many(alg, silos(n, num, 1, zero=True), batched, jax.random.split(jax.random.key(3), runs),
                          eval_fn=trajectory, eval_every=1)
    noise = -np.asarray(res.eval_metrics["w"], np.float64)[:, :, 0] / (0.9 * 2 * 0.5 / (batch * num))
    per_epoch = n // batch
    nodes = []  # every round's prefix as a set of (epoch, node)
    for r in range(rounds):
        epoch, t = divmod(r, per_epoch)
        done = [(e, node) for e in range(epoch) for node in prefix_nodes(per_epoch)]
        nodes.append(set(done) | {(epoch, node) for node in prefix_nodes(t + 1)})
    expected = np.array([[len(a & b) for b in nodes] for a in nodes], float)
    np.testing.assert_allclose(np.cov(noise, rowvar=False), expected, atol=0.15)
    assert abs(noise.mean(axis=0)).max() < 4.5 * math.sqrt(expected.max() / runs)


def test_zero_noise_is_sgd_on_the_same_order_of_records():
    data, hp = silos(), FtrlHParams.create(0.1, 0.0, clip_norm=1e9)
    key = jax.random.key(5)
    # one epoch (R <= T = 6): NoisyMbSgd's one-pass blocks are the same records
    ftrl = engine.run(DpFtrl(LinearRegression(3), 6, 4), data, hp, key)
    mbsgd = engine.run(NoisyMbSgd(LinearRegression(3), 6, 4, sampling="one-pass", gradient_path="gather"), data, hp,
                       key)
    np.testing.assert_allclose(ftrl.output, mbsgd.output, rtol=1e-6, atol=1e-7)
    # three epochs and a bit, against NumPy on the run's own permutations; the twin is the same program
    res = engine.run(DpFtrl(LinearRegression(3), 20, 4), data, hp, key)
    twin = engine.run(DpFtrl(LinearRegression(3), 20, 4, private=False), data, FtrlHParams.create(0.1, 2.0), key)
    np.testing.assert_array_equal(res.output, twin.output)
    perms = np.asarray(res.state.selection)
    x, y, w = np.asarray(data.x, np.float64), np.asarray(data.y, np.float64), np.zeros(3)
    for r in range(20):
        grads = []
        for i in range(3):
            rows = perms[i, (r % 6) * 4:(r % 6) * 4 + 4]
            grads.append(x[i, rows].T @ (x[i, rows] @ w - y[i, rows]) / 4)
        w = w - 0.1 * np.mean(grads, axis=0)
    np.testing.assert_allclose(res.output, w, rtol=1e-5, atol=1e-6)


def test_every_record_once_per_epoch_in_each_silo():
    """Silos of 10 and 14 records, B = 3: epochs of 3 and 4 blocks, each a permutation's first 9 / 12
    records; the trees restart with the smallest silo's epoch."""
    data = SiloData.from_silos([np.ones((10, 3), np.float32), np.ones((14, 3), np.float32)],
                               [np.zeros(10, np.float32), np.zeros(14, np.float32)])
    selection = DpFtrl(LinearRegression(3), 12, 3).parts(DataShape.of(data)).selection
    state = selection.init(None, Context(jnp.int32(0), jax.random.key(0), None, data))
    batches = [selection.update(data, state, Context(jnp.int32(r), jax.random.key(r), None))[0] for r in range(12)]
    for silo, blocks in ((0, 3), (1, 4)):
        for e in range(12 // blocks):
            epoch = np.concatenate([np.asarray(b.indices[silo]) for b in batches[e * blocks:(e + 1) * blocks]])
            assert len(set(epoch.tolist())) == 3 * blocks and epoch.max() < int(data.sizes[silo])
    assert [int(b.info["epoch_round"]) for b in batches[:7]] == [0, 1, 2, 0, 1, 2, 0]
    given = DpFtrl(LinearRegression(3), 12, 3, order="given").parts(DataShape.of(data)).selection
    state = given.init(None, Context(jnp.int32(0), jax.random.key(0), None, data))
    rows = [np.asarray(given.update(data, state, Context(jnp.int32(r), jax.random.key(r), None))[0].indices)
            for r in range(5)]
    np.testing.assert_array_equal(rows[4], [[3, 4, 5], [0, 1, 2]])  # the stored order, cycled per silo


def test_refuses_a_batch_larger_than_a_silo():
    with pytest.raises(ValueError, match="batch_size"):
        DpFtrl(LinearRegression(3), 4, 30).validate(silos())
    with pytest.raises(ValueError, match="batch_size"):
        DpFtrl(LinearRegression(3), 4, 30).privacy([24] * 3, FtrlHParams.create(0.1, 1.0))


def test_packaged_sweep_config_validates_and_reaches_its_epsilons():
    import pathlib

    from dpjax import sweep
    from dpjax.engine import registry
    from dpjax.sweep import SweepConfig

    cfg = SweepConfig.from_toml(pathlib.Path(sweep.__file__).parent / "configs" / "dp_ftrl_tree.toml")
    entry = registry.get_algorithm(cfg.algorithm)
    alg = entry.build(LinearRegression(cfg.data["dim"]), cfg.num_rounds, cfg.static)
    values = {k: v[0] for k, v in cfg.grid.items() if k in entry.hparam_fields}
    sizes = [cfg.data["n"]] * cfg.data["num_silos"]
    assert sum(tree_depth(t) for t in epoch_trees(cfg.num_rounds, cfg.data["n"] // cfg.static["batch_size"])) == 20
    for eps in cfg.grid["epsilon"]:
        out = entry.calibrate(alg, sizes, values, eps, cfg.privacy["delta"], cfg.privacy["accountant"])
        spec = alg.privacy(sizes, entry.make_hparams({**values, **out}, alg))
        assert spec.epsilon(cfg.privacy["delta"], cfg.privacy["accountant"]).epsilon <= eps
