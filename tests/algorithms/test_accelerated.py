"""Accelerated noisy MB-SGD family (A3, A3a, A3c, multi-stage; spec §2.3-2.5, §6 items 5-7)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

from dpjax.accounting import GaussianSchedule, compute_epsilon
from dpjax.accounting.gdp import gaussian_mechanism_epsilon
from dpjax.algorithms.accelerated import AcceleratedHParams, AcceleratedMbSgd
from dpjax.parts.acsa import AcsaSchedule, acsa_constants, acsa_query_point, acsa_update
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax import engine
from dpjax.engine.silos import SiloData
from dpjax.primitives.sampling import FixedAvailability
from dpjax.problems import LinearRegression

from .conftest import make_silos

PROBLEM = LinearRegression(3)


# ---------------------------------------------------------------- AC-SA algebra
@pytest.mark.parametrize("t, nu, mu", [(1, 2.0, 0.0), (3, 2.0, 0.5), (10, 0.7, 3.0)])
def test_query_weights_sum_to_one(t, nu, mu):
    alpha, eta = acsa_constants(t, nu)
    c = jnp.array([1.5, -2.0, 0.25])
    np.testing.assert_allclose(acsa_query_point(c, c, alpha, eta, mu), c, rtol=1e-6)


def test_first_round_queries_the_start_point():
    alpha, eta = acsa_constants(1, 3.0)
    assert float(alpha) == 1.0
    w0, other = jnp.array([1.0, 2.0]), jnp.array([-5.0, 7.0])
    np.testing.assert_allclose(acsa_query_point(w0, other, alpha, eta, 0.4), w0, rtol=1e-6)


@pytest.mark.parametrize("radius", [None, 0.5])
def test_prox_step_closed_form_equals_numerical_minimiser(radius):
    rng = np.random.default_rng(0)
    w_prev, w_md, g = rng.normal(size=(3, 4))
    alpha, eta, mu = 0.4, 1.7, 0.6

    def objective(w):
        return alpha * (g @ w + mu / 2 * np.sum((w_md - w) ** 2)) + ((1 - alpha) * mu + eta) / 2 * np.sum((w_prev - w) ** 2)

    cons = () if radius is None else ({"type": "ineq", "fun": lambda w: radius**2 - w @ w},)
    ref = optimize.minimize(objective, np.zeros(4), method="SLSQP", constraints=cons, tol=1e-12).x
    new_w, new_ag = acsa_update(jnp.asarray(w_prev, jnp.float32), jnp.asarray(w_md, jnp.float32),
                                jnp.zeros(4), jnp.asarray(g, jnp.float32), alpha, eta, mu, radius)
    np.testing.assert_allclose(new_w, ref, atol=1e-5)
    np.testing.assert_allclose(new_ag, alpha * ref, atol=1e-5)


def test_mu_zero_step_is_projected_gradient_step():
    w_prev, w_md, g = jnp.array([1.0, 0.0]), jnp.array([0.3, 0.3]), jnp.array([2.0, -4.0])
    alpha, eta = acsa_constants(4, 1.5)
    new_w, _ = acsa_update(w_prev, w_md, w_prev, g, alpha, eta, 0.0)
    np.testing.assert_allclose(new_w, w_prev - alpha / eta * g, rtol=1e-6)


# ---------------------------------------------------------------- the algorithm
def _hp(rounds, z=0.0, clip=1e9, beta=4.0, mu=0.0, lam=0.0):
    return AcceleratedHParams.create(AcsaSchedule.single_stage(rounds, beta, mu, lam), z, clip)


def test_sigma_zero_is_bit_identical_to_non_private_twin(reg_data):
    key = jax.random.key(2)
    kw = dict(sampling="with-replacement", availability=FixedAvailability(3))
    priv = engine.run(AcceleratedMbSgd(PROBLEM, 4, 3, **kw), reg_data, _hp(4, lam=0.1), key)
    twin = engine.run(AcceleratedMbSgd(PROBLEM, 4, 3, private=False, **kw), reg_data, _hp(4, lam=0.1), key)
    np.testing.assert_array_equal(priv.output, twin.output)
    noisy = engine.run(AcceleratedMbSgd(PROBLEM, 4, 3, **kw), reg_data, _hp(4, z=5e-10, lam=0.1), key)  # std 1/3
    assert not np.array_equal(noisy.output, twin.output)  # same program, sigma > 0


def test_one_pass_touches_each_record_at_most_once():
    data = make_silos(num_silos=3, n=10)
    k = 3
    rounds = 10 // k  # R = floor(n/K)
    alg = AcceleratedMbSgd(PROBLEM, rounds, k, sampling="one-pass", log_indices=True)
    res = engine.run(alg, data, _hp(rounds, z=0.45, clip=1.0), jax.random.key(5))
    idx, mask = res.round_metrics["indices"], res.round_metrics["index_mask"]  # [R, N, K]
    for i in range(3):
        used = idx[:, i][mask[:, i]]
        assert len(used) == rounds * k
        assert len(np.unique(used)) == len(used)  # disjoint blocks
        assert used.min() >= 0 and used.max() < 10
    with pytest.raises(ValueError, match="one-pass"):
        engine.run(AcceleratedMbSgd(PROBLEM, rounds + 1, k), data, _hp(rounds + 1), jax.random.key(0))


def _ill_conditioned():
    rng = np.random.default_rng(0)
    scale = np.array([1.0, 0.5, 0.2, 0.1])
    xs = [(rng.normal(size=(16, 4)) * scale).astype(np.float32) for _ in range(3)]
    ys = [(x @ np.ones(4) + 0.1 * rng.normal(size=16)).astype(np.float32) for x in xs]
    x, y = np.concatenate(xs).astype(np.float64), np.concatenate(ys).astype(np.float64)
    hess = x.T @ x / len(x)
    eig = np.linalg.eigvalsh(hess)
    w_star = np.linalg.solve(hess, x.T @ y / len(x))
    gap = lambda w: 0.5 * np.mean((x @ np.asarray(w, np.float64) - y) ** 2) - 0.5 * np.mean((x @ w_star - y) ** 2)
    return SiloData.from_silos(xs, ys), float(eig[-1]), float(eig[0]), gap


def test_accelerated_beats_mbsgd_on_a_strongly_convex_quadratic():
    """kappa ~ 94, full local batches, sigma = 0: at equal rounds AC-SA's gap is
    well below that of MB-SGD with its best constant step 1/beta."""
    data, beta, mu, gap = _ill_conditioned()
    rounds, p = 25, LinearRegression(4)
    mb = engine.run(NoisyMbSgd(p, rounds, 16, sampling="without-replacement", private=False), data,
                    MbSgdHParams.create(1.0 / beta), jax.random.key(0))
    ac = engine.run(AcceleratedMbSgd(p, rounds, 16, sampling="without-replacement", private=False), data,
                    AcceleratedHParams.create(AcsaSchedule.single_stage(rounds, beta, mu)), jax.random.key(0))
    assert gap(ac.output) < 0.5 * gap(mb.output)


def _pooled_loss(params, pooled):
    x, y, m = pooled
    return {"loss": LinearRegression(4).evaluate(params, x, y, m)["loss"]}


def test_multi_stage_restarts_and_converges():
    data, beta, mu, gap = _ill_conditioned()
    stages = [(12, 2 * beta), (12, 2 * beta), (12, 2 * beta)]
    sched = AcsaSchedule.multi_stage(stages, mu)
    np.testing.assert_array_equal(np.asarray(sched.stage_round)[[0, 11, 12, 24, 35]], [1, 12, 1, 1, 12])
    res = engine.run(AcceleratedMbSgd(LinearRegression(4), 36, 16, sampling="without-replacement", private=False),
                     data, AcceleratedHParams.create(sched), jax.random.key(0),
                     eval_fn=_pooled_loss, eval_data=data.pooled(), eval_every=12)
    f_star = float(res.eval_metrics["loss"][-1]) - gap(res.output)
    gaps = res.eval_metrics["loss"].astype(np.float64) - f_star  # the stage outputs q_1, q_2, q_3
    assert gaps[0] > gaps[1] > gaps[2] >= -1e-6
    assert gaps[2] < 0.1 * gap(np.zeros(4))


def test_schedule_length_must_match_rounds(reg_data):
    with pytest.raises(ValueError, match="num_rounds"):
        engine.run(AcceleratedMbSgd(PROBLEM, 3, 2, sampling="with-replacement"), reg_data, _hp(4), jax.random.key(0))


def test_one_pass_privacy_is_a_single_gaussian_release():
    """One pass: each record enters one release, a Gaussian of std z x 2C/K = 0.3 on a message of
    sensitivity 2C/K = 0.5 (C = 2, K = 8)."""
    alg = AcceleratedMbSgd(PROBLEM, 5, 8)
    hp = _hp(5, z=0.6, clip=2.0)
    s = alg.privacy([40], hp).schedule
    assert s.passes == 1 and s.noise_multiplier == pytest.approx(0.6)
    assert alg.message_sensitivity(hp, [40]) == pytest.approx(2 * 2.0 / 8)
    eps = compute_epsilon(s, 1e-5, "pld").epsilon
    exact = gaussian_mechanism_epsilon(0.3, 0.5, 1e-5)
    assert eps == pytest.approx(exact, rel=0.02)


@pytest.mark.parametrize("sampling", ["with-replacement", "without-replacement", "one-pass"])
def test_privacy_equals_a_hand_computation(sampling):
    """R releases per silo of a clipped K-mean (sensitivity 2C/K) plus Gaussian noise of std
    z x 2C/K, at the smallest silo (C = 1.5, K = 4, z = 0.8, silos of 40 and 60 records)."""
    c, k, z, rounds = 1.5, 4, 0.8, 6
    alg = AcceleratedMbSgd(PROBLEM, rounds, k, sampling=sampling)
    hp = _hp(rounds, z=z, clip=c)
    by_hand = GaussianSchedule(noise_std=z * 2 * c / k, contribution_bound=c / k, sampling=sampling, dataset_size=40,
                               batch_size=k, steps=rounds, neighboring="replace-one", unit="record-in-silo")
    # same ratio std/bound; its last-bit rounding moves the with-replacement RDP bound by ~1e-8
    assert alg.privacy([60, 40], hp).epsilon(1e-5, "rdp").epsilon == pytest.approx(
        compute_epsilon(by_hand, 1e-5, "rdp").epsilon, rel=1e-6)


def test_noise_std_is_the_multiplier_times_the_sensitivity():
    """Zero data, one round, full availability: the query point is w_0 = 0 and the step is
    w_1 = -(alpha/(mu + eta)) mean_i u_i, so the measured std of w_1 is that of the silos' noise,
    z x 2C/K, over (mu + eta) sqrt(N) (alpha = 1 in the first round)."""
    dim, n_silos, k, z, clip, nu = 4000, 4, 3, 0.7, 1.3, 2.0
    data = make_silos(num_silos=n_silos, n=6, dim=dim)
    data = type(data)(data.x * 0, data.y * 0, data.mask, data.sizes)
    alg = AcceleratedMbSgd(LinearRegression(dim), 1, k, sampling="without-replacement")
    res = engine.run(alg, data, _hp(1, z=z, clip=clip, beta=nu), jax.random.key(1))
    eta = 4 * nu / 2
    sigma = float(np.std(np.asarray(res.output, np.float64))) * eta * math.sqrt(n_silos)
    assert sigma == pytest.approx(z * 2 * clip / k, rel=5 * math.sqrt(1 / (2 * dim)))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="sampling"):
        AcceleratedMbSgd(PROBLEM, 2, 2, sampling="full")
    with pytest.raises(ValueError, match="smoothness"):
        AcsaSchedule.single_stage(3, 0.0)
    with pytest.raises(ValueError, match="stages"):
        AcsaSchedule.multi_stage([], 1.0)
    with pytest.raises(ValueError, match="noise_multiplier"):
        AcceleratedHParams.create(AcsaSchedule.single_stage(3, 1.0), noise_multiplier=-1.0)
