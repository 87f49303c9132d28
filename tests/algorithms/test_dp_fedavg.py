"""DP-FedAvg with adaptive clipping (Andrew et al. 2021): privacy against a hand computation, the
adaptive clip's fixed point, the noise stds measured, the twin against a NumPy FedAvg."""

from __future__ import annotations

import math

import dp_accounting as dpa
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.algorithms.dp_fedavg import DpFedAvg, FedAvgHParams
from dpjax import engine
from dpjax.engine.silos import SiloData
from dpjax.problems import LinearRegression

DELTA = 1e-5


class Probe:
    """Loss ``<w, x>``: a local step moves ``w`` by ``-lr x``, so silo i's delta is ``lr K mean(x_i)``."""

    def loss(self, params, x, y):
        return jnp.vdot(params, x)

    def init_params(self, key):
        return jnp.zeros((2,), jnp.float32)


def norm_silos(norms, n=3):
    """One silo per norm, every record ``r e_1``: the silo's delta has norm r (lr = K = 1)."""
    xs = [np.tile(np.array([[r, 0.0]], np.float32), (n, 1)) for r in norms]
    return SiloData.from_silos(xs, [np.zeros(n, np.float32)] * len(norms))


def hand_epsilon(q, z, rounds):
    acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), rounds))
    return acc.get_epsilon(DELTA)


def test_privacy_is_one_subsampled_gaussian_at_the_combined_multiplier():
    """Theorem 1: z = (z_Delta^-2 + z_b^-2)^-1/2, Poisson at the declared q = m/N over R rounds (C_0 = 0.7,
    m = 5, N = 20)."""
    alg = DpFedAvg(LinearRegression(2), 30, 5, sampling_rate=5 / 20)
    hp = FedAvgHParams.create(noise_multiplier=1.1, noise_multiplier_count=2.0, clip_norm=0.7)
    z = (float(np.float32(1.1)) ** -2 + 2.0 ** -2) ** -0.5  # 0.964: the count costs ~4% of the multiplier
    spec = alg.privacy([12] * 20, hp)
    assert spec.unit == "user" and spec.neighboring == "add-remove"
    assert spec.epsilon(DELTA, "rdp").epsilon == pytest.approx(hand_epsilon(5 / 20, z, 30), rel=1e-9)
    # fixed clipping (eta_C = 0): the count moves nothing and is not accounted
    fixed = alg.privacy([12] * 20, FedAvgHParams.create(noise_multiplier=1.1, noise_multiplier_count=2.0,
                                                        clip_learning_rate=0.0))
    assert fixed.epsilon(DELTA, "rdp").epsilon == pytest.approx(hand_epsilon(0.25, float(np.float32(1.1)), 30),
                                                                rel=1e-9)


def test_calibration_sets_the_delta_multiplier_with_the_count_fixed():
    alg = DpFedAvg(LinearRegression(2), 30, 5, sampling_rate=0.25)
    spec = alg.privacy([12] * 20, FedAvgHParams.create(noise_multiplier=1.0, noise_multiplier_count=5.0))
    z_delta = spec.calibrate(3.0, DELTA, "rdp")["noise_multiplier"]
    combined = (z_delta ** -2 + float(np.float32(5.0)) ** -2) ** -0.5
    eps = hand_epsilon(0.25, combined, 30)
    assert 3.0 * (1 - 1e-4) <= eps <= 3.0
    # the count's noise alone spends more than the target: refused, naming the field to raise
    with pytest.raises(ValueError, match="noise_multiplier_count"):
        alg.privacy([12] * 20, FedAvgHParams.create(noise_multiplier=1.0, noise_multiplier_count=0.5)).calibrate(
            3.0, DELTA, "rdp")


def test_a_noiseless_count_is_not_private():
    spec = DpFedAvg(LinearRegression(2), 3, 2, sampling_rate=0.5).privacy([5] * 4,
                                                                        FedAvgHParams.create(noise_multiplier=2.0))
    assert math.isinf(spec.epsilon(DELTA).epsilon)
    with pytest.raises(ValueError, match="without noise"):
        spec.calibrate(1.0, DELTA)


def test_poisson_silo_sampling_under_add_remove_needs_a_public_rate():
    """The number of users N is not public under add/remove: no rate is read from it."""
    with pytest.raises(ValueError, match="sampling_rate=None"):
        DpFedAvg(LinearRegression(2), 3, 2)
    with pytest.raises(ValueError, match="sampling_rate=0.5 is Poisson's"):
        DpFedAvg(LinearRegression(2), 3, 2, sampling="without-replacement", sampling_rate=0.5)
    alg = DpFedAvg(LinearRegression(2), 3, 2, sampling_rate=0.3)
    # the accountant's q is the declared one, whatever the number of silos in the data
    for n_silos in (4, 5, 40):
        assert alg.privacy([5] * n_silos, FedAvgHParams.create(noise_multiplier=2.0,
                                                                noise_multiplier_count=2.0)).schedule.inclusion_probability == 0.3


def test_fixed_size_sampling_is_replace_one_and_refuses_add_remove():
    with pytest.raises(ValueError, match="replace-one"):
        DpFedAvg(LinearRegression(2), 3, 2, sampling="without-replacement", neighboring="add-remove")
    alg = DpFedAvg(LinearRegression(2), 30, 5, sampling="without-replacement")
    assert alg.neighboring == "replace-one"
    spec = alg.privacy([12] * 20, FedAvgHParams.create(noise_multiplier=1.1, noise_multiplier_count=2.0))
    z = (float(np.float32(1.1)) ** -2 + 2.0 ** -2) ** -0.5
    acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(20, 5, dpa.GaussianDpEvent(z)), 30))
    assert spec.epsilon(DELTA, "rdp").epsilon == pytest.approx(acc.get_epsilon(DELTA), rel=1e-9)


@pytest.mark.parametrize("quantile, band", [(0.5, (5.0, 6.0)), (0.8, (8.0, 9.0))])
def test_adaptive_clip_settles_at_the_target_quantile_of_the_delta_norms(quantile, band):
    """Norms 1..10, every silo every round, sigma_b = 0: the fraction below C is floor(C)/10, so the
    geometric update stops in [r_(k), r_(k+1)) with k = 10 gamma, from below and from above."""
    data = norm_silos(np.arange(1.0, 11.0))
    alg = DpFedAvg(Probe(), 80, 10, sampling="without-replacement", neighboring="replace-one")
    for c0 in (0.1, 100.0):
        hp = FedAvgHParams.create(client_learning_rate=1.0, clip_norm=c0, target_quantile=quantile)
        final = float(engine.run(alg, data, hp, jax.random.key(0)).state.parts["clipper"])
        assert band[0] <= final < band[1], (c0, final)


def test_one_round_moves_the_clip_geometrically():
    data = norm_silos(np.arange(1.0, 11.0))
    alg = DpFedAvg(Probe(), 1, 10, sampling="without-replacement", neighboring="replace-one")
    hp = FedAvgHParams.create(client_learning_rate=1.0, clip_norm=3.5, target_quantile=0.5, clip_learning_rate=0.3)
    c1 = float(engine.run(alg, data, hp, jax.random.key(0)).state.parts["clipper"])
    assert c1 == pytest.approx(3.5 * math.exp(-0.3 * (0.3 - 0.5)), rel=1e-6)  # 3 of 10 norms <= 3.5


def _one_round(alg, data, hp, runs):
    return engine.run_many(alg, data, jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (runs,)), hp),
                           jax.random.split(jax.random.key(7), runs))


def test_count_noise_has_the_std_of_its_multiplier_times_the_count_sensitivity():
    """C_0 between the 5th and 6th norms: the fraction is exactly 1/2 = gamma, so
    ``log(C_1/C_0) = -eta_C noise / m`` and the noise std is z_b x 1 (replace-one: a silo moves the
    centred count by 1). 4000 runs: the variance is within 10% (4.5 standard errors)."""
    data = norm_silos(np.arange(1.0, 11.0))
    alg = DpFedAvg(Probe(), 1, 10, sampling="without-replacement", neighboring="replace-one")
    hp = FedAvgHParams.create(client_learning_rate=1.0, clip_norm=5.5, noise_multiplier_count=0.4)
    c1 = np.asarray(_one_round(alg, data, hp, 4000).state.parts["clipper"], np.float64)
    noise = -10 * np.log(c1 / np.float32(5.5)) / np.float32(0.2)
    assert abs(noise.mean()) < 4.5 * 0.4 / math.sqrt(4000)
    assert noise.var() / 0.4 ** 2 == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize("sampling, neighboring, factor", [("poisson", "add-remove", 1.0),
                                                        ("without-replacement", "replace-one", 2.0)])
def test_delta_noise_has_the_std_of_its_multiplier_times_the_clip_over_m(sampling, neighboring, factor):
    """Zero deltas (x = 0): theta_1 = -eta_s N(0, (z C_0 sensitivity)^2) / m, sensitivity C_0 or 2 C_0."""
    data = norm_silos(np.zeros(8))
    alg = DpFedAvg(Probe(), 1, 4, sampling=sampling, neighboring=neighboring,
                   sampling_rate=0.5 if sampling == "poisson" else None)
    hp = FedAvgHParams.create(learning_rate=1.0, noise_multiplier=1.5, noise_multiplier_count=3.0, clip_norm=0.8)
    out = np.asarray(_one_round(alg, data, hp, 4000).output, np.float64)
    expected = 1.5 * factor * 0.8 / 4
    assert out.var(axis=0) / expected ** 2 == pytest.approx(np.ones(2), abs=0.1)


def test_twin_is_zero_noise_and_no_clip_and_is_numpy_fedavg():
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(6, 3)).astype(np.float32) for _ in range(4)]
    ys = [(x @ np.array([1.0, -0.5, 0.2]) + 0.1).astype(np.float32) for x in xs]
    data = SiloData.from_silos(xs, ys)
    kw = dict(sampling="without-replacement", neighboring="replace-one", local_steps=3, server_momentum=0.5)
    hp = FedAvgHParams.create(learning_rate=0.7, client_learning_rate=0.05, noise_multiplier=2.0,
                              noise_multiplier_count=2.0, clip_norm=0.01)
    key = jax.random.key(1)
    twin = engine.run(DpFedAvg(LinearRegression(3), 5, 4, private=False, **kw), data, hp, key)
    zero = FedAvgHParams.create(learning_rate=0.7, client_learning_rate=0.05, clip_norm=math.inf)
    np.testing.assert_array_equal(twin.output, engine.run(DpFedAvg(LinearRegression(3), 5, 4, **kw), data, zero,
                                                          key).output)
    w, trace = np.zeros(3), np.zeros(3)  # FedAvg (local GD on the squared loss) + server SGD with momentum
    for _ in range(5):
        deltas = []
        for x, y in zip(xs, ys):
            v = w.copy()
            for _ in range(3):
                v -= 0.05 * x.T @ (x @ v - y) / len(y)
            deltas.append(w - v)
        trace = np.mean(deltas, axis=0) + 0.5 * trace
        w = w - 0.7 * trace
    np.testing.assert_allclose(twin.output, w, rtol=1e-5, atol=1e-6)


def test_sampled_silos_follow_the_poisson_rate():
    data = norm_silos(np.ones(10))
    res = engine.run(DpFedAvg(Probe(), 400, 3, sampling_rate=0.3), data,
                     FedAvgHParams.create(noise_multiplier_count=1.0),
                     jax.random.key(2))
    counts = res.round_metrics["num_available"]
    assert abs(counts.mean() - 3.0) < 4.5 * math.sqrt(10 * 0.3 * 0.7 / 400)
    assert counts.var() > 0  # a random count, not a fixed m


def test_sweep_epsilon_axis_sets_the_delta_multiplier_and_keeps_the_grid_count_multiplier():
    from dpjax.engine import registry

    entry, alg = registry.get_algorithm("dp-fedavg"), DpFedAvg(LinearRegression(2), 30, 5, sampling_rate=0.25)
    assert entry.calibrated_fields == ("noise_multiplier",)
    values = {"learning_rate": 1.0, "noise_multiplier_count": 5.0, "clip_norm": 0.3}
    out = entry.calibrate(alg, [12] * 20, values, 3.0, DELTA, "rdp")
    assert set(out) == {"noise_multiplier"}
    eps = alg.privacy([12] * 20, entry.make_hparams({**values, **out}, alg)).epsilon(DELTA, "rdp").epsilon
    assert 3.0 * (1 - 1e-4) <= eps <= 3.0


def test_packaged_sweep_config_validates_and_reaches_its_epsilons():
    """``dpjax/sweep/configs/dp_fedavg_adaptive.toml``: statics and grid valid, every epsilon reachable with
    the grid's count multiplier (z_b = 2 sigma_b, sigma_b = m / 20)."""
    import pathlib

    from dpjax import sweep
    from dpjax.engine import registry
    from dpjax.sweep import SweepConfig

    cfg = SweepConfig.from_toml(pathlib.Path(sweep.__file__).parent / "configs" / "dp_fedavg_adaptive.toml")
    entry = registry.get_algorithm(cfg.algorithm)
    alg = entry.build(LinearRegression(cfg.data["dim"]), cfg.num_rounds, cfg.static)
    values = {k: v[0] for k, v in cfg.grid.items() if k in entry.hparam_fields}
    sizes = [cfg.data["n"]] * cfg.data["num_silos"]
    for eps in cfg.grid["epsilon"]:
        out = entry.calibrate(alg, sizes, values, eps, cfg.privacy["delta"], cfg.privacy["accountant"])
        spec = alg.privacy(sizes, entry.make_hparams({**values, **out}, alg))
        assert spec.epsilon(cfg.privacy["delta"], cfg.privacy["accountant"]).epsilon <= eps


def _regression_silos(num_silos, n, d=3, seed=0):
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(n, d)).astype(np.float32) for _ in range(num_silos)]
    return SiloData.from_silos(xs, [x @ np.arange(1.0, d + 1, dtype=np.float32) for x in xs])


def test_poisson_cohort_buffer_computes_only_the_sampled_silos_and_equals_all_silos():
    """60 silos at q = 0.1: the default buffer holds 6 + 15 + 8 = 29 silos, so only they are computed; the
    sampled set is the same draw as computing all 60 and masking, so the runs agree up to float summation order."""
    alg = DpFedAvg(LinearRegression(3), 6, 6, sampling_rate=0.1, local_steps=2, local_batch_size=4)
    assert alg.parts(engine.chain.DataShape.of(_regression_silos(60, 8))).selection.capacity(60) == 29
    data, hp, key = _regression_silos(60, 8), FedAvgHParams.create(0.5, noise_multiplier=0.7,
                                                                    noise_multiplier_count=2.0), jax.random.key(3)
    buffered = engine.run(alg, data, hp, key)
    everyone = engine.run(DpFedAvg(LinearRegression(3), 6, 6, sampling_rate=0.1, local_steps=2, local_batch_size=4,
                                   cohort_capacity=60), data, hp, key)
    np.testing.assert_array_equal(buffered.round_metrics["num_available"], everyone.round_metrics["num_available"])
    np.testing.assert_allclose(buffered.output, everyone.output, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(buffered.output, engine.run(alg, data, hp, jax.random.key(4)).output)


def test_poisson_cohort_overflow_refuses_the_run():
    with pytest.raises(engine.SamplingOverflowError):
        engine.run(DpFedAvg(LinearRegression(3), 3, 5, sampling_rate=0.5, cohort_capacity=2), _regression_silos(10, 4),
                   FedAvgHParams.create(noise_multiplier=1.0, noise_multiplier_count=2.0), jax.random.key(0))


def test_minibatch_steps_gather_their_records():
    """local_batch_size = n: every step's batch is the whole silo, so the gathered minibatch step equals the
    full-batch step (local_batch_size None) up to float summation order; and a step uses only its batch:
    a record's change moves the delta only in the rounds where it was drawn."""
    data, hp, key = _regression_silos(6, 5), FedAvgHParams.create(1.0, 0.1), jax.random.key(1)
    kw = dict(sampling="without-replacement", local_steps=3, private=False)
    full = engine.run(DpFedAvg(LinearRegression(3), 4, 6, **kw), data, hp, key)
    gathered = engine.run(DpFedAvg(LinearRegression(3), 4, 6, local_batch_size=5, **kw), data, hp, key)
    np.testing.assert_allclose(gathered.output, full.output, rtol=1e-5, atol=1e-6)
    small = engine.run(DpFedAvg(LinearRegression(3), 4, 6, local_batch_size=2, **kw), data, hp, key)
    assert not np.allclose(small.output, full.output)


def test_local_epochs_use_every_record_once_an_epoch():
    from dpjax.parts.cross_device import LocalDeltas

    part = LocalDeltas(LinearRegression(3), 1, local_batch_size=4, local_epochs=3)
    rows, valid = part._batches(jax.random.key(0), 10, 13)  # a silo of 10 records padded to 13: 4 batches an epoch
    rows, valid = np.asarray(rows).reshape(3, 16), np.asarray(valid).reshape(3, 16)
    epochs = [sorted(r[v]) for r, v in zip(rows, valid)]
    assert all(e == list(range(10)) for e in epochs)
    assert len({tuple(r[v]) for r, v in zip(rows, valid)}) == 3  # a fresh permutation each epoch
    with pytest.raises(ValueError, match="local_epochs=2 replaces local_steps"):
        DpFedAvg(LinearRegression(3), 4, 2, local_epochs=2, local_steps=3, local_batch_size=2)
    with pytest.raises(ValueError, match="needs a local_batch_size"):
        DpFedAvg(LinearRegression(3), 4, 2, local_epochs=2)
    res = engine.run(DpFedAvg(LinearRegression(3), 3, 2, sampling="without-replacement", local_epochs=2,
                              local_batch_size=3, private=False), _regression_silos(4, 7), FedAvgHParams.create(1.0, 0.05),
                     jax.random.key(0))
    assert np.all(np.isfinite(res.output))


@pytest.mark.privacy
def test_client_batch_trains_the_same_cohort_one_silo_at_a_time():
    """client_batch=1 (lax.map, empty buffer slots skipped by lax.cond) and =2 (lax.map in vmapped pairs) release
    the vmapped run's model up to float summation order; the noise and the sampled cohort are the same draws."""
    data, key = _regression_silos(30, 6), jax.random.key(5)
    hp = FedAvgHParams.create(0.5, noise_multiplier=0.7, noise_multiplier_count=2.0)
    kw = dict(sampling_rate=0.2, local_steps=2, local_batch_size=3)
    vmapped = engine.run(DpFedAvg(LinearRegression(3), 4, 6, **kw), data, hp, key)
    for k in (1, 2):
        mapped = engine.run(DpFedAvg(LinearRegression(3), 4, 6, client_batch=k, **kw), data, hp, key)
        np.testing.assert_array_equal(mapped.round_metrics["num_available"], vmapped.round_metrics["num_available"])
        np.testing.assert_allclose(mapped.output, vmapped.output, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="client_batch=0"):
        DpFedAvg(LinearRegression(3), 4, 6, client_batch=0, **kw)


def _pooled_population(num_silos, n_max=8, dim=3, pool=40, seed=0):
    """``num_silos`` clients of 4..n_max distinct records drawn from one pool of ``pool`` records."""
    from dpjax.engine import PooledSiloData

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(pool, dim)).astype(np.float32)
    rows = [rng.choice(pool, size=int(rng.integers(4, n_max + 1)), replace=False) for _ in range(num_silos)]
    return PooledSiloData.from_indices(x, x @ np.arange(1.0, dim + 1, dtype=np.float32), rows)


@pytest.mark.parametrize("kw", [
    dict(sampling_rate=0.1, local_steps=2, local_batch_size=4),  # Poisson buffer, independent minibatch draws
    pytest.param(dict(sampling_rate=0.1, local_epochs=2, local_batch_size=3), marks=pytest.mark.slow),  # epochs
    pytest.param(dict(sampling="without-replacement", local_steps=2), marks=pytest.mark.slow),  # every record a step
    pytest.param(dict(sampling_rate=0.2, local_steps=2, local_batch_size=3, client_batch=2),
                 marks=pytest.mark.slow),  # the cohort trained in lax.map chunks
])
def test_a_record_pool_population_runs_the_same_numbers_as_its_materialised_silos(kw):
    """``PooledSiloData`` against its ``materialize()`` (the same silos as a padded ``SiloData``), same key:
    the same cohorts, the same local batches and bit-identical outputs (a masked padded row contributes an exact
    zero whichever record it holds)."""
    pooled = _pooled_population(60)
    alg = DpFedAvg(LinearRegression(3), 5, 6, **kw)
    hp, key = FedAvgHParams.create(0.5, noise_multiplier=0.7, noise_multiplier_count=2.0), jax.random.key(3)
    a, b = engine.run(alg, pooled, hp, key), engine.run(alg, pooled.materialize(), hp, key)
    np.testing.assert_array_equal(a.round_metrics["num_available"], b.round_metrics["num_available"])
    np.testing.assert_array_equal(a.output, b.output)
    assert not np.array_equal(a.output, engine.run(alg, pooled, hp, jax.random.key(4)).output)


@pytest.mark.slow
def test_a_record_pool_round_holds_no_population_sized_records():
    """Structural: the compiled run's argument bytes grow with the population N by exactly its index rows and sizes
    (4 (n_max + 1) bytes a client; the pool is N-independent), its temporaries and bytes accessed by O(N) scalars
    (the N inclusion draws and per-client keys, well under one client's records, 4 n_max d bytes) -- where the
    materialised SiloData's grow by a client's records each. Per-round time is then the cohort's (the benchmark
    bench_cross_device_scale.py measures it); expected cohort m = 10 at every N."""
    from dpjax import keys
    from dpjax.engine.program import compiled_runner

    dim, n_max = 256, 8
    record_row = 4 * n_max * dim  # one client's materialised records
    hp = FedAvgHParams.create(0.5, noise_multiplier=0.7, noise_multiplier_count=2.0)

    def stats(data):
        alg = DpFedAvg(LinearRegression(dim), 3, 10, sampling_rate=10 / data.num_silos, local_steps=2,
                       local_batch_size=4)
        params = alg.problem.init_params(jax.random.key(0))
        compiled = compiled_runner(alg, None, None, False, None, None).lower(hp, data, None, keys.run_key(0, 0),
                                                                             params).compile()
        mem, cost = compiled.memory_analysis(), compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        return mem.argument_size_in_bytes, mem.temp_size_in_bytes, cost["bytes accessed"]

    small, large = (_pooled_population(n, n_max, dim, pool=200) for n in (200, 2000))
    added = 1800
    (arg_s, temp_s, acc_s), (arg_l, temp_l, acc_l) = stats(small), stats(large)
    assert arg_l - arg_s == added * 4 * (n_max + 1)
    assert (temp_l - temp_s) / added < 64 and (acc_l - acc_s) / added < record_row / 8
    mat_arg, _, mat_acc = stats(large.materialize())  # the contrast: a client's records each
    assert mat_arg >= 2000 * record_row > 8 * arg_l and (mat_acc - acc_l) / added > record_row / 2
