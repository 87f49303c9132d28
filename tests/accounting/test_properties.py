"""Hypothesis property tests: monotonicity, never-overshooting calibration, group privacy, edge cases."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from dpjax.accounting import GaussianSchedule, calibrate_noise, compute_epsilon
from dpjax.accounting import gdp

sig = st.floats(0.5, 5.0)
steps = st.integers(1, 2000)
rate = st.integers(1, 200)  # batch size out of n = 1000


def sched(std, k, t, sampling="poisson", nb="add-remove", g=1):
    return GaussianSchedule(noise_std=std, contribution_bound=1.0, sampling=sampling, dataset_size=1000,
                            batch_size=None if sampling == "full" else k, steps=t, neighboring=nb, group_size=g)


@given(sig, rate, steps, st.integers(1, 500))
def test_rdp_eps_increases_with_steps(std, k, t, extra):
    a = compute_epsilon(sched(std, k, t), 1e-5).epsilon
    b = compute_epsilon(sched(std, k, t + extra), 1e-5).epsilon
    assert 0 <= a <= b + 1e-12 and math.isfinite(b)


@given(sig, rate, st.integers(1, 100), steps)
def test_rdp_eps_increases_with_rate_decreases_with_sigma(std, k, dk, t):
    base = compute_epsilon(sched(std, k, t), 1e-5).epsilon
    assert base <= compute_epsilon(sched(std, min(1000, k + dk), t), 1e-5).epsilon + 1e-12
    assert compute_epsilon(sched(std * 1.3, k, t), 1e-5).epsilon <= base + 1e-12


# 3 draws (was 6; issue #39: each draw is three PLD compositions, ~1 s): any draw with a non-monotone or
# above-RDP PLD epsilon still fails.
@settings(max_examples=3)
@given(sig, rate, st.integers(1, 300))
def test_pld_monotone_in_sigma_and_below_rdp(std, k, t):
    a = compute_epsilon(sched(std, k, t), 1e-5, "pld").epsilon
    assert compute_epsilon(sched(std * 1.5, k, t), 1e-5, "pld").epsilon <= a + 1e-9
    assert a <= compute_epsilon(sched(std, k, t), 1e-5, "rdp").epsilon + 1e-9


@settings(max_examples=10)
@given(st.floats(0.1, 20.0), rate, st.integers(1, 3000), st.sampled_from([1e-5, 1e-8, 1e-12]),
       st.sampled_from(["poisson", "full", "shuffle"]))
def test_calibration_never_overshoots(target, k, t, delta, sampling):
    s = sched(1.0, k, t, sampling=sampling, nb="add-remove" if sampling != "shuffle" else "replace-one")
    std = calibrate_noise(s, target, delta, "rdp")
    eps = compute_epsilon(s.replace(noise_std=std), delta, "rdp").epsilon
    assert eps <= target
    assert compute_epsilon(s.replace(noise_std=std * 0.999), delta, "rdp").epsilon > target * (1 - 1e-3) or eps >= 0.99 * target


# 2 draws (was 4; issue #39: each draw is a bisection of ~15 PLD compositions, ~5 s): the property is checked
# exactly on every draw (epsilon at the returned std <= target), so one overshooting draw still fails.
@settings(max_examples=2)
@given(st.floats(0.5, 8.0), st.integers(10, 200))
def test_pld_calibration_never_overshoots(target, t):
    s = sched(1.0, 50, t)
    std = calibrate_noise(s, target, 1e-6, "pld")
    assert compute_epsilon(s.replace(noise_std=std), 1e-6, "pld").epsilon <= target


@settings(max_examples=8)
@given(sig, rate, st.integers(1, 300), st.integers(2, 6), st.sampled_from(["poisson", "full", "one-pass"]))
def test_group_size_never_lowers_eps(std, k, t, g, sampling):
    nb = "replace-one" if sampling == "one-pass" else "add-remove"
    acc = "rdp"
    a = compute_epsilon(sched(std, k, t, sampling, nb), 1e-5, acc).epsilon
    b = compute_epsilon(sched(std, k, t, sampling, nb, g=g), 1e-5, acc).epsilon
    assert b >= a - 1e-12


@pytest.mark.parametrize("accountant", ["rdp", "pld", "gdp", "zcdp"])
@pytest.mark.parametrize("delta", [1e-12, 0.5])
def test_edge_cases_finite(accountant, delta):
    full = sched(1.0, None, 1, "full")
    r = compute_epsilon(full, delta, accountant)
    assert math.isfinite(r.epsilon) and r.epsilon >= 0
    if accountant in ("rdp", "pld"):
        q1 = sched(1.0, 1000, 1)  # q = 1, one step
        r1 = compute_epsilon(q1, delta, accountant)
        assert math.isfinite(r1.epsilon) and r1.epsilon >= 0
        # q = 1 Poisson add/remove equals the full-batch Gaussian with sensitivity s
        assert r1.epsilon == pytest.approx(compute_epsilon(full.replace(neighboring="add-remove"), delta, accountant).epsilon, rel=2e-3)


def test_large_epsilon_targets_and_zero_noise():
    s = sched(1.0, 100, 10)
    std = calibrate_noise(s, 100.0, 1e-5, "rdp")
    assert 0 < std and compute_epsilon(s.replace(noise_std=std), 1e-5).epsilon <= 100
    assert gdp.gdp_epsilon(200.0, 1e-12) > 100 and math.isfinite(gdp.gdp_epsilon(200.0, 1e-12))
    r = compute_epsilon(s.replace(noise_std=0.0), 1e-5, "pld")
    assert math.isinf(r.epsilon) and "non-private" in r.notes[0]


@pytest.mark.parametrize("kw,name", [(dict(target_epsilon=0.0), "target_epsilon"), (dict(target_epsilon=float("nan")), "target_epsilon"),
                                     (dict(delta=0.0), "delta"), (dict(accountant="magic"), "accountant")])
def test_calibration_invalid_inputs(kw, name):
    args = dict(target_epsilon=1.0, delta=1e-5, accountant="rdp")
    args.update(kw)
    with pytest.raises(ValueError, match=name):
        calibrate_noise(sched(1.0, 10, 10), **args)
