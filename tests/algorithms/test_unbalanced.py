"""Unbalanced silos / per-silo budgets (A6, Algorithm 7; spec §2.8, I-24)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import keys
from dpjax.accounting import GaussianSchedule, compute_epsilon
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.algorithms.unbalanced import UnbalancedHParams, UnbalancedNoisyMbSgd
from dpjax import engine
from dpjax.parts import selection as selection_parts
from dpjax.primitives.sampling import FixedAvailability, make_sampler
from dpjax.problems import LinearRegression

from .conftest import make_silos

PROBLEM = LinearRegression(3)
SIZES = [6, 12, 9, 15]


def test_equal_budgets_reduce_to_noisy_mbsgd(reg_data):
    """Equal K_i and multipliers: Noisy MB-SGD's round (same std z x 2C/K, same draws)."""
    key = jax.random.key(0)
    avail = FixedAvailability(3)
    ours = engine.run(UnbalancedNoisyMbSgd(PROBLEM, 5, (4, 4, 4, 4), availability=avail), reg_data,
                      UnbalancedHParams.create(0.1, [0.2] * 4, 1.5), key)
    ref = engine.run(NoisyMbSgd(PROBLEM, 5, 4, availability=avail, gradient_path="gather"), reg_data, MbSgdHParams.create(0.1, 0.2, 1.5), key)
    np.testing.assert_allclose(ours.output, ref.output, rtol=1e-6, atol=1e-7)


def test_per_silo_batch_sizes_use_the_first_k_i_draws():
    data = make_silos(sizes=SIZES)
    ks, eta, key = (2, 5, 3, 7), 0.3, jax.random.key(1)
    alg = UnbalancedNoisyMbSgd(PROBLEM, 1, ks, private=False)
    res = engine.run(alg, data, UnbalancedHParams.create(eta, [0.0] * 4), key)
    idx, _, _ = selection_parts.draw_silo_batches(make_sampler("without-replacement", 7), data,
                                            jnp.zeros(4, jnp.int32), keys.round_key(key, 0), 0)
    x, y = np.asarray(data.x, np.float64), np.asarray(data.y, np.float64)
    msgs = []
    for i, k in enumerate(ks):
        rows = np.asarray(idx[i, :k])
        assert len(set(rows)) == k and rows.max() < SIZES[i]
        msgs.append(np.mean([(x[i, j] @ np.zeros(3) - y[i, j]) * x[i, j] for j in rows], axis=0))
    np.testing.assert_allclose(res.output, -eta * np.mean(msgs, axis=0), rtol=1e-5)


def test_per_silo_noise_stds():
    """Silo i's std is z_i x 2C/K_i (measured on zero data: the one-round output is -eta times the
    mean noise); ``noise_multiplier_for`` turns absolute stds into those multipliers."""
    dim, eta, clip, ks = 3000, 0.5, 1.5, (2, 3, 2, 2)
    stds = [0.5, 1.0, 0.0, 2.0]
    data = make_silos(sizes=[4, 6, 5, 4], dim=dim)
    data = type(data)(data.x * 0, data.y * 0, data.mask, data.sizes)
    alg = UnbalancedNoisyMbSgd(LinearRegression(dim), 1, ks)
    unit = UnbalancedHParams.create(eta, [0.0] * 4, clip)
    zs = alg.noise_multiplier_for(stds, unit, data.silo_sizes())
    assert zs == pytest.approx([s * k / (2 * clip) for s, k in zip(stds, ks)])
    np.testing.assert_allclose(alg.message_sensitivity(unit, data.silo_sizes()), [2 * clip / k for k in ks], rtol=1e-6)
    res = engine.run(alg, data, UnbalancedHParams.create(eta, zs, clip), jax.random.key(3))
    expected = eta**2 * sum(s * s for s in stds) / 16
    assert abs(float(np.var(res.output)) / expected - 1) < 5 * math.sqrt(2 / dim)


def test_privacy_per_silo_and_clippers():
    """Each silo's own schedule (its n_i, K_i, z_i); the messages' sensitivity is 2C/K_i, or 2C
    when the minibatch mean is clipped (it bounds nothing per record). At C = 3, K = (2, 4): the run's
    epsilon is the larger of the two silos' hand-built schedules."""
    hp = UnbalancedHParams.create(0.1, [1.0, 2.0], 3.0)
    alg = UnbalancedNoisyMbSgd(PROBLEM, 7, (2, 4))
    spec = alg.privacy([10, 20], hp)
    per_ex = [s.schedule for s in spec.silos]
    assert [(s.dataset_size, s.batch_size, s.noise_multiplier) for s in per_ex] == [(10, 2, 1.0), (20, 4, 2.0)]
    np.testing.assert_allclose(alg.message_sensitivity(hp, [10, 20]), [3.0, 1.5], rtol=1e-6)  # 2C/K_i
    by_hand = [compute_epsilon(GaussianSchedule(noise_std=z * 2 * 3.0 / k, contribution_bound=3.0 / k,
                                                sampling="without-replacement", dataset_size=n, batch_size=k, steps=7,
                                                neighboring="replace-one", unit="record-in-silo"), 1e-5, "rdp").epsilon
               for n, k, z in ((10, 2, 1.0), (20, 4, 2.0))]
    assert spec.epsilon(1e-5, "rdp").epsilon == pytest.approx(max(by_hand), rel=1e-9)
    from dpjax.reproduce.isrl.constructions import InsuranceScriptMbSgd  # the authors' insurance clipper

    avg_alg = InsuranceScriptMbSgd(PROBLEM, 7, (2, 4))
    np.testing.assert_allclose(avg_alg.message_sensitivity(hp, [10, 20]), [6.0, 6.0], rtol=1e-6)  # 2C
    avg = [s.schedule for s in avg_alg.privacy([10, 20], hp).silos]
    assert [s.noise_multiplier for s in avg] == [1.0, 2.0]
    # equal K_i and z_i: one schedule at the smallest silo (the largest sampling rate)
    same = UnbalancedNoisyMbSgd(PROBLEM, 7, (4, 4)).privacy([30, 20], UnbalancedHParams.create(0.1, [2.0, 2.0], 3.0))
    assert same.schedule.dataset_size == 20 and same.schedule.batch_size == 4


def test_validation_names_the_argument():
    data = make_silos(sizes=SIZES)
    with pytest.raises(ValueError, match=r"batch_sizes\[0\]"):
        UnbalancedNoisyMbSgd(PROBLEM, 2, (7, 1, 1, 1)).validate(data)
    with pytest.raises(ValueError, match="batch_sizes"):
        UnbalancedNoisyMbSgd(PROBLEM, 2, (1, 1)).validate(data)
    with pytest.raises(ValueError, match="noise_multiplier="):
        UnbalancedHParams.create(0.1, [-1.0, 1.0])
    with pytest.raises(ValueError, match="one multiplier per silo"):
        UnbalancedNoisyMbSgd(PROBLEM, 2, (1, 1, 1, 1)).privacy(SIZES, UnbalancedHParams.create(0.1, [1.0, 1.0]))
