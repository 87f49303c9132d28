"""ISRL-DP Local SGD / FedAvg baselines (Lowy & Razaviyayn App. I; spec §2.10, §3.5)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.accounting import GaussianSchedule, compute_epsilon
from dpjax.algorithms.local_sgd import LocalSgd, LocalSgdHParams
from dpjax import engine
from dpjax.engine.problem import AutodiffOnly
from dpjax.primitives.sampling import FixedAvailability
from dpjax.problems import LinearRegression

from .conftest import make_silos

PROBLEM = LinearRegression(3)


def test_sigma_zero_is_bit_identical_to_fedavg(reg_data):
    hp = LocalSgdHParams.create(0.05, noise_multiplier=0.0, clip_norm=1e9)
    key = jax.random.key(3)
    avail = FixedAvailability(3)
    priv = engine.run(LocalSgd(PROBLEM, 5, 4, availability=avail), reg_data, hp, key)
    fedavg = engine.run(LocalSgd(PROBLEM, 5, 4, availability=avail, private=False), reg_data, hp, key)
    np.testing.assert_array_equal(priv.output, fedavg.output)
    # and noise does change it (the test can fail)
    noisy = engine.run(LocalSgd(PROBLEM, 5, 4, availability=avail),
                       reg_data, LocalSgdHParams.create(0.05, 5e-11, 1e9), key)  # std z x 2C = 0.1
    assert not np.array_equal(noisy.output, fedavg.output)


def test_matches_a_numpy_reference_on_the_logged_records(reg_data):
    """Replays the logged indices in NumPy: K sequential single-record steps per
    available silo, then the average of the available silos' last iterates."""
    eta, rounds, k = 0.05, 3, 4
    alg = LocalSgd(PROBLEM, rounds, k, availability=FixedAvailability(2), private=False, log_indices=True)
    res = engine.run(alg, reg_data, LocalSgdHParams.create(eta), jax.random.key(0))
    x, y = np.asarray(reg_data.x, np.float64), np.asarray(reg_data.y, np.float64)
    w = np.zeros(3)
    for r in range(rounds):
        idx, avail = res.round_metrics["indices"][r], res.round_metrics["available"][r]
        assert avail.sum() == 2
        locals_ = []
        for i in np.flatnonzero(avail):
            v = w.copy()
            for j in idx[i]:
                assert 0 <= j < int(reg_data.sizes[i])
                v = v - eta * (x[i, j] @ v - y[i, j]) * x[i, j]
            locals_.append(v)
        w = np.mean(locals_, axis=0)
    np.testing.assert_allclose(res.output, w, rtol=1e-5, atol=1e-6)


def test_sum_aggregation_adds_the_local_updates(reg_data):
    key = jax.random.key(1)
    hp = LocalSgdHParams.create(0.05)
    mean = engine.run(LocalSgd(PROBLEM, 1, 3, private=False), reg_data, hp, key).output
    summed = engine.run(LocalSgd(PROBLEM, 1, 3, private=False, aggregation="sum"), reg_data, hp, key).output
    np.testing.assert_allclose(summed, reg_data.num_silos * mean, rtol=1e-5, atol=1e-6)


def test_noise_scale_of_the_aggregate():
    """Zero data => zero gradients: after one round of K steps the model is
    -eta * (1/N) sum_i sum_t u_i^t, per-coordinate variance eta^2 K sigma^2 / N,
    with every step's std sigma = z x 2C (the sensitivity of one clipped gradient)."""
    dim, n_silos, k, eta, z, clip = 4000, 5, 3, 0.5, 0.35, 1.5
    data = make_silos(num_silos=n_silos, n=4, dim=dim)
    data = type(data)(data.x * 0, data.y * 0, data.mask, data.sizes)
    alg = LocalSgd(LinearRegression(dim), 1, k)
    hp = LocalSgdHParams.create(eta, z, clip)
    res = engine.run(alg, data, hp, jax.random.key(7))
    sigma = z * 2 * clip
    assert alg.message_sensitivity(hp, data.silo_sizes()) == pytest.approx(2 * clip)
    assert alg.noise_multiplier_for(sigma, hp, data.silo_sizes()) == pytest.approx(z)
    var = float(np.var(res.output))
    expected = eta**2 * k * sigma**2 / n_silos
    # sample variance of d Gaussians: relative s.e. sqrt(2/d); allow 5 s.e.
    assert abs(var / expected - 1) < 5 * math.sqrt(2 / dim)
    assert abs(float(np.mean(res.output))) < 5 * math.sqrt(expected / dim)


def test_privacy_is_rk_single_record_gaussians():
    """R K = 35 releases per silo, each a Gaussian of std z x 2C on the clipped gradient of one
    uniformly random record (a 1-subset), accounted at the smallest silo: the hand-built schedule
    at C = 0.5, K = 5 gives the same epsilon."""
    alg = LocalSgd(PROBLEM, 7, 5)
    hp = LocalSgdHParams.create(0.1, noise_multiplier=2.0, clip_norm=0.5)
    s = alg.privacy([100, 140], hp).schedule
    assert (s.steps, s.batch_size, s.dataset_size) == (35, 1, 100)
    assert s.noise_multiplier == pytest.approx(2.0)
    assert alg.message_sensitivity(hp, [100, 140]) == pytest.approx(1.0)  # 2C, replace-one: std z x 2C = 2.0
    by_hand = GaussianSchedule(noise_std=2.0 * 2 * 0.5, contribution_bound=0.5, sampling="without-replacement",
                               dataset_size=100, batch_size=1, steps=35, neighboring="replace-one",
                               unit="record-in-silo")
    for accountant in ("rdp", "paper-experiment"):
        assert alg.privacy([100, 140], hp).epsilon(1e-5, accountant).epsilon == pytest.approx(
            compute_epsilon(by_hand, 1e-5, accountant).epsilon, rel=1e-9)
    eps_more_steps = compute_epsilon(LocalSgd(PROBLEM, 14, 5).privacy([100], hp).schedule, 1e-5, "rdp").epsilon
    eps = compute_epsilon(s, 1e-5, "rdp").epsilon
    assert 0 < eps < eps_more_steps
    with pytest.raises(ValueError, match="private=False"):
        LocalSgd(PROBLEM, 7, 5, private=False).privacy([100], hp).calibrate(1.0, 1e-5)


@pytest.mark.parametrize("kwargs, name", [
    ({"num_rounds": 0}, "num_rounds"),
    ({"local_steps": 0}, "local_steps"),
    ({"aggregation": "median"}, "aggregation"),
    ({"output": "exponential"}, "output"),
    ({"projection_radius": -1.0}, "projection_radius"),
])
def test_bad_arguments_raise_naming_them(kwargs, name):
    args = {"problem": PROBLEM, "num_rounds": 2, "local_steps": 2, **kwargs}
    with pytest.raises(ValueError, match=name):
        LocalSgd(**args)


def test_available_only_computation_equals_masked_all_silos():
    # With a fixed M the step computes only the M available silos; with the
    # index log on it computes all N and masks. Same keys => same trajectory.
    data = make_silos(4, 10, 3)
    hp = LocalSgdHParams.create(0.05, 0.075, 2.0)  # std 0.3
    kw = dict(num_rounds=4, local_steps=3, availability=FixedAvailability(2))
    fast = engine.run(LocalSgd(PROBLEM, **kw), data, hp, jax.random.key(8))
    full = engine.run(LocalSgd(PROBLEM, log_indices=True, **kw), data, hp, jax.random.key(8))
    np.testing.assert_allclose(fast.output, full.output, rtol=1e-6, atol=1e-7)
    assert np.all(full.round_metrics["available"].sum(axis=1) == 2)


@pytest.mark.parametrize("problem", [PROBLEM, AutodiffOnly(PROBLEM)], ids=["closed-form", "autodiff"])
def test_clipped_steps_match_a_numpy_reference(reg_data, problem):
    """With a binding clip (C = 0.05, below most gradients' norms) both ways of clipping a step's one
    record, the GLM closed form ||grad|| = |r| ||x|| and autodiff's gradient, follow the NumPy replay of
    ``w <- w - eta clip_C((x.w - y) x)`` (noise multiplier 0: the private program without noise)."""
    eta, rounds, k, clip = 0.3, 3, 4, 0.05
    alg = LocalSgd(problem, rounds, k, availability=FixedAvailability(2), log_indices=True)
    res = engine.run(alg, reg_data, LocalSgdHParams.create(eta, 0.0, clip), jax.random.key(0))
    x, y = np.asarray(reg_data.x, np.float64), np.asarray(reg_data.y, np.float64)
    w, clipped = np.zeros(3), 0
    for r in range(rounds):
        idx, avail = res.round_metrics["indices"][r], res.round_metrics["available"][r]
        locals_ = []
        for i in np.flatnonzero(avail):
            v = w.copy()
            for j in idx[i]:
                g = (x[i, j] @ v - y[i, j]) * x[i, j]
                clipped += np.linalg.norm(g) > clip
                v = v - eta * g * min(1.0, clip / np.linalg.norm(g))
            locals_.append(v)
        w = np.mean(locals_, axis=0)
    assert clipped > rounds * 2 * k // 2  # the clip binds on most steps
    np.testing.assert_allclose(res.output, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("common_keys", [True, False], ids=["common-keys", "key-per-run"])
def test_runs_axis_inside_the_silo_axis_changes_no_run(common_keys):
    """``LocalSteps`` puts the engine's runs axis inside the silo axis (``over_silos_runs_inside``): a grid
    of runs with different step sizes, noise and clip norms (one shared key, or one key per run) gives each
    run what ``engine.run`` gives it alone, up to float rounding (the same operations in another layout)."""
    from dpjax import keys
    from dpjax.engine import OutputParams, run_grid, stack_hparams

    data = make_silos(5, 30, 6, task="classification")
    from dpjax.problems import LogisticRegression

    alg = LocalSgd(LogisticRegression(6), 4, 7, availability=FixedAvailability(3))
    hps = [LocalSgdHParams.create(lr, z, c) for lr, z, c in [(0.1, 0.0, 1e9), (0.3, 0.5, 0.2), (0.05, 2.0, 1.0)]]
    run_keys = [keys.run_key(0, 0 if common_keys else i) for i in range(len(hps))]
    grid = run_grid(alg, data, stack_hparams(hps), jnp.stack(run_keys), eval_fn=OutputParams(),
                    common_random_numbers=common_keys, chunk_size=len(hps))
    outputs = jax.tree_util.tree_leaves(grid.evals)[0]
    for i, (hp, key) in enumerate(zip(hps, run_keys)):
        alone = engine.run(alg, data, hp, key).output
        np.testing.assert_allclose(np.asarray(outputs)[i].reshape(np.shape(alone)), alone, rtol=1e-5, atol=1e-6)
    assert not np.allclose(outputs[0], outputs[1])  # the runs differ (the comparison can fail)


def test_over_silos_runs_inside_is_a_vmap_over_silos():
    """Under one or two outer vmaps, with any of its arguments batched or not, ``over_silos_runs_inside``
    returns exactly what ``vmap`` over silos of ``vmap`` over runs returns (integer-valued floats: every
    sum is exact), runs axis first."""
    from dpjax.parts.clients import over_silos_runs_inside

    def one_silo(params, x, z, ctx):
        def body(w, step):
            x_j, z_j = step
            return w * ctx["scale"] + x_j * jnp.sum(w) + z_j, None

        return jax.lax.scan(body, params, (x, z))[0]

    rng = np.random.default_rng(0)
    runs, silos, k, d = 3, 4, 5, 2
    params = jnp.asarray(rng.integers(-2, 3, (runs, d)), jnp.float32)
    x = jnp.asarray(rng.integers(-1, 2, (runs, silos, k, d)), jnp.float32)
    z = jnp.asarray(rng.integers(-3, 4, (runs, silos, k, d)), jnp.float32)
    scale = jnp.asarray([1.0, -1.0, 2.0])
    mapped = over_silos_runs_inside(one_silo)
    plain = lambda p, x, z, s: jax.vmap(one_silo, in_axes=(None, 0, 0, None))(p, x, z, {"scale": s})  # noqa: E731
    for axes in [(0, None, None, 0), (None, 0, 0, None), (0, 0, 0, 0), (0, None, 0, None)]:
        args = [a if ax == 0 else a[0] for a, ax in zip((params, x, z, scale), axes)]
        got = jax.vmap(lambda p, x, z, s: mapped(p, x, z, {"scale": s}), in_axes=axes)(*args)
        want = jax.vmap(plain, in_axes=axes)(*args)
        assert got.shape == (runs, silos, d)
        np.testing.assert_array_equal(got, want)
    # two outer vmaps (trials x runs)
    twice = lambda a: jnp.stack([a, a + 1])  # noqa: E731
    got = jax.vmap(jax.vmap(lambda p, x, z: mapped(p, x, z, {"scale": jnp.float32(1.0)})))(
        twice(params), twice(x), twice(z))
    want = jax.vmap(jax.vmap(lambda p, x, z: plain(p, x, z, jnp.float32(1.0))))(twice(params), twice(x), twice(z))
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got[0], got[1])
