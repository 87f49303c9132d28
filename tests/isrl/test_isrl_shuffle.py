"""P_vec protocol (shuffle spec §2.1-2.4) and the shuffle-DP algorithms A4, A5
(ISRL spec §2.6-2.7, §6 items 12-13)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpjax.algorithms.accelerated import AcceleratedHParams, AcceleratedMbSgd, AcsaSchedule
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.algorithms.shuffled import SdpHParams, SdpOnePassAccelerated, ShuffledNoisyMbSgd
from dpjax.engine import federated, runner
from dpjax.primitives import shuffle_protocols as sp
from dpjax.primitives.sampling import FixedAvailability
from dpjax.problems import LinearRegression

from .conftest import make_silos

PROBLEM = LinearRegression(3)


@jax.jit
def _many_sums(keys, x):
    return jax.vmap(lambda k: sp.pvec_sum(k, x, PARAMS, BOUND))(keys)


PARAMS, BOUND = sp.PvecParams(granularity=5, trials=40, probability=0.3), 1.5


# ------------------------------------------------------------------ P_vec
def test_rounding_endpoints_and_exact_sum_without_noise():
    params = sp.PvecParams(granularity=8, trials=0, probability=0.0)
    x = jnp.array([[-1.0, 1.0, 0.25, -0.5], [0.0, 0.75, -1.0, 0.5]])  # (x+1)*8/2 are integers
    xhat = sp.randomized_rounding(jax.random.key(0), x, params, 1.0)
    np.testing.assert_array_equal(xhat, (np.asarray(x) + 1) * 4)
    np.testing.assert_allclose(sp.pvec_sum(jax.random.key(1), x, params, 1.0), x.sum(0), atol=1e-6)


def test_pvec_unbiased_with_the_exact_variance():
    """Inputs with fractional parts near 1/2 (maximal rounding variance) and
    the binomial noise; mean within 4 s.e., variance within 5 s.e. of the
    exact expression (range Delta = 2L, re-centring by m L: I-3)."""
    reps = 4000
    x = jnp.asarray(np.tile([[0.3, -1.2, 1.5, 0.0]], (6, 1)), jnp.float32)  # m = 6 equal vectors
    est = np.asarray(_many_sums(jax.random.split(jax.random.key(3), reps), x), np.float64)
    var = sp.pvec_variance(np.asarray(x), PARAMS, BOUND)
    true = np.asarray(x, np.float64).sum(0)
    assert np.all(np.abs(est.mean(0) - true) <= 4 * np.sqrt(var / reps))
    assert np.all(np.abs(est.var(0, ddof=1) / var - 1) <= 5 * math.sqrt(2 / reps))


def test_count_level_equals_bit_level_in_distribution():
    rng = np.random.default_rng(0)
    x = np.array([[0.3, -1.2], [1.1, 0.4], [-0.7, 0.9]])
    bits = np.array([sp.pvec_bits_numpy(x, PARAMS, BOUND, rng) for _ in range(400)])
    counts = np.asarray(_many_sums(jax.random.split(jax.random.key(9), 2000), jnp.asarray(x, jnp.float32)))
    for j in range(2):
        assert stats.ks_2samp(bits[:, j], counts[:, j]).pvalue > 1e-3
    var = sp.pvec_variance(x, PARAMS, BOUND)
    assert np.all(np.abs(bits.mean(0) - x.sum(0)) <= 4 * np.sqrt(var / 400))


def test_huge_trial_counts_are_exact_and_deterministic():
    """m b = 2e9 > 2^31: the centred binomial is drawn in int64 on the host;
    a float32 count would be biased by tens of counts."""
    params = sp.PvecParams(granularity=4, trials=2_000_000, probability=0.45)
    x = jnp.zeros((1000, 3))
    f = jax.jit(jax.vmap(lambda k: sp.pvec_sum(k, x, params, 1.0)))
    est = np.asarray(f(jax.random.split(jax.random.key(0), 300)), np.float64)
    sd = np.sqrt(sp.pvec_variance(np.zeros((1000, 3)), params, 1.0))
    assert np.all(np.abs(est.mean(0)) <= 4 * sd / math.sqrt(300))
    assert np.all(np.abs(est.std(0) / sd - 1) < 0.25)
    again = np.asarray(f(jax.random.split(jax.random.key(0), 300)), np.float64)
    np.testing.assert_array_equal(est, again)


def test_pvec_params_validation():
    with pytest.raises(ValueError, match="probability"):
        sp.PvecParams(4, 10, 0.5)
    with pytest.raises(ValueError, match="granularity"):
        sp.PvecParams(0, 10, 0.1)


# ------------------------------------------------------------------ A4
def test_shuffled_aggregate_is_exactly_permutation_invariant():
    rng = np.random.default_rng(1)
    msgs = {"a": jnp.asarray(rng.normal(size=(7, 5)), jnp.float32), "b": jnp.asarray(rng.normal(size=(7,)), jnp.float32)}
    avail = jnp.array([1, 0, 1, 1, 0, 1, 1], bool)
    ref = federated.shuffled_aggregate(msgs, avail, jax.random.key(0))
    perm = rng.permutation(7)
    permuted = jax.tree_util.tree_map(lambda a: a[perm], msgs)
    for k in range(5):
        out = federated.shuffled_aggregate(permuted, avail[perm], jax.random.key(k))
        jax.tree_util.tree_map(np.testing.assert_array_equal, out, ref)
    expect = np.asarray(msgs["a"])[np.asarray(avail)].mean(0)
    np.testing.assert_allclose(ref["a"], expect, rtol=1e-5)


def test_a4_matches_noisy_mbsgd_with_k1_and_fixed_m(reg_data):
    hp = MbSgdHParams.create(0.1, noise_std=0.3, clip_norm=2.0)
    key = jax.random.key(4)
    shuffled = runner.run(ShuffledNoisyMbSgd(PROBLEM, 6, 3), reg_data, hp, key)
    plain = runner.run(NoisyMbSgd(PROBLEM, 6, 1, sampling="with-replacement", availability=FixedAvailability(3)),
                       reg_data, hp, key)
    np.testing.assert_allclose(shuffled.output, plain.output, rtol=1e-5, atol=1e-6)
    twin = runner.run(ShuffledNoisyMbSgd(PROBLEM, 6, 3, private=False), reg_data, hp, key)
    zero = runner.run(ShuffledNoisyMbSgd(PROBLEM, 6, 3), reg_data, MbSgdHParams.create(0.1, 0.0, 1e9), key)
    np.testing.assert_array_equal(twin.output, zero.output)
    s = ShuffledNoisyMbSgd(PROBLEM, 6, 3).privacy_schedule(12, hp)
    assert (s.steps, s.batch_size, s.sensitivity) == (6, 1, pytest.approx(4.0))


# ------------------------------------------------------------------ A5
def test_a5_without_noise_tracks_the_non_private_twin():
    """b = 0 and fine rounding (g = 2^14): the only error is randomized
    rounding, at most 2L/g per coordinate of the averaged gradient."""
    data = make_silos(num_silos=4, n=12)
    rounds, k = 4, 3
    sched = AcsaSchedule.single_stage(rounds, 8.0)
    a5 = SdpOnePassAccelerated(PROBLEM, rounds, k, sp.PvecParams(2**14, 0, 0.0))
    res = runner.run(a5, data, SdpHParams.create(sched, clip_norm=50.0), jax.random.key(0))
    twin = runner.run(AcceleratedMbSgd(PROBLEM, rounds, k, private=False), data,
                      AcceleratedHParams.create(sched), jax.random.key(0))
    err = np.max(np.abs(np.asarray(res.output) - np.asarray(twin.output)))
    assert 0 < err < rounds * 2 * 50.0 / 2**14 / 16.0  # each step moves by g~/(mu+eta) with eta >= 2*8


def test_a5_noise_scale_matches_the_protocol_variance():
    """Zero gradients, one round (alpha = 1): w_1 = -o/(M K (mu + eta_1)); its
    per-coordinate variance is Var_vec / (M K (mu+eta_1))^2."""
    dim, n_silos, k, nu, bound = 3000, 3, 2, 1.0, 0.5
    data = make_silos(num_silos=n_silos, n=4, dim=dim)
    data = type(data)(data.x * 0, data.y * 0, data.mask, data.sizes)
    params = sp.PvecParams(granularity=6, trials=500, probability=0.2)
    a5 = SdpOnePassAccelerated(LinearRegression(dim), 1, k, params)
    res = runner.run(a5, data, SdpHParams.create(AcsaSchedule.single_stage(1, nu), bound), jax.random.key(2))
    m = n_silos * k
    var_sum = sp.pvec_variance(np.zeros((m, 1)), params, bound)[0]  # g even: no rounding variance
    expected = var_sum / (m * 2 * nu) ** 2  # eta_1 = 4 nu / 2, mu = 0
    out = np.asarray(res.output, np.float64)
    assert abs(out.var() / expected - 1) < 5 * math.sqrt(2 / dim)
    assert abs(out.mean()) < 5 * math.sqrt(expected / dim)
