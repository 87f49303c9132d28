"""Chua et al.'s lower bound for shuffled DP-SGD (dpjax.accounting.shuffle_lower_bound), pinned to independent
computations: the Gaussian mechanism at T = 1 (closed form), a Monte Carlo estimate of the cube masses, the
deterministic (no amplification) upper bound and dp_accounting's Poisson epsilon."""

import math

import numpy as np
import pytest
from scipy import stats

from dpjax.accounting import shuffle_lower_bound as lb

pytestmark = pytest.mark.privacy


def _gauss_delta(mu, eps):
    # hockey-stick divergence of N(mu, 1) vs N(0, 1) (Balle & Wang 2018, Thm 8), written out here
    return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


def _gauss_eps(mu, delta):
    from scipy.optimize import brentq

    return brentq(lambda e: _gauss_delta(mu, e) - delta, 0.0, 200.0, xtol=1e-12)


@pytest.mark.parametrize("z,eps", [(0.5, 1.0), (1.0, 0.5), (2.0, 0.1), (0.8, 3.0)])
def test_single_step_epoch_is_the_gaussian_mechanism(z, eps):
    # T = 1: P = N(2, z^2), Q = N(1, z^2); the cube {x > C} family holds the Neyman-Pearson optimum
    assert lb.single_epoch_delta(z, 1, eps) == pytest.approx(_gauss_delta(1 / z, eps), rel=1e-7, abs=1e-15)
    # the swap pair N(2, z^2) vs N(0, z^2): mu = 2/z
    assert lb.single_epoch_delta(z, 1, eps, pair="swap") == pytest.approx(_gauss_delta(2 / z, eps), rel=1e-7)


def test_multi_epoch_pld_of_single_step_epochs_is_gaussian_composition():
    # E epochs of T = 1: G_{sqrt(E)/z}; the optimistic PLD is below it and within its discretisation
    z, e, d = 1.5, 6, 1e-6
    exact = _gauss_eps(math.sqrt(e) / z, d)
    got = lb.shuffle_epsilon_lower_bound(z, 1, e, d)
    assert got <= exact + 1e-9
    assert got == pytest.approx(exact, rel=2e-3)


def test_cube_masses_match_monte_carlo():
    # P(max_t x_t > C) under (1/T) sum_t N(2 e_t, z^2 I): simulate the mixture directly
    rng = np.random.default_rng(0)
    z, t, c, n = 0.7, 8, 1.6, 200_000
    x = rng.normal(0.0, z, (n, t))
    x[np.arange(n), rng.integers(0, t, n)] += 2.0
    emp = float(np.mean(x.max(axis=1) > c))
    formula = float(lb._out_cube(c, 2.0, z, t))
    assert abs(emp - formula) < 5 * math.sqrt(formula * (1 - formula) / n)


def test_monotone_in_sigma_epochs_and_steps():
    d = 1e-5
    by_sigma = [lb.shuffle_epsilon_lower_bound(z, 100, 1, d) for z in (0.5, 0.8, 1.2, 2.0)]
    assert all(a > b for a, b in zip(by_sigma, by_sigma[1:]))
    by_epochs = [lb.shuffle_epsilon_lower_bound(1.0, 50, e, d) for e in (1, 2, 4)]
    assert all(a < b for a, b in zip(by_epochs, by_epochs[1:]))
    by_steps = [lb.shuffle_epsilon_lower_bound(1.0, t, 1, d) for t in (1, 10, 100, 1000)]
    assert all(a >= b for a, b in zip(by_steps, by_steps[1:]))


@pytest.mark.parametrize("z,t,e", [(0.5, 1000, 1), (1.0, 100, 3), (2.0, 50, 2), (0.7, 10, 4)])
def test_at_most_the_no_amplification_bound(z, t, e):
    d = 1e-6
    # zero-out pair vs the deterministic bound under the same relation (sensitivity 1): G_{sqrt(E)/z}
    assert lb.shuffle_epsilon_lower_bound(z, t, e, d) <= _gauss_eps(math.sqrt(e) / z, d) + 1e-6
    # the swap pair vs the replace-one deterministic bound (sensitivity 2)
    assert lb.shuffle_epsilon_lower_bound(z, t, e, d, pair="swap") <= _gauss_eps(2 * math.sqrt(e) / z, d) + 1e-6


@pytest.mark.parametrize("z,t,e", [(0.5, 1000, 1), (0.6, 1000, 2), (0.8, 100, 5)])
def test_above_the_poisson_epsilon_at_small_sigma(z, t, e):
    # the regime of Chua et al.'s figures: small sigma, many steps -- the shuffled run's epsilon is provably above
    # the Poisson number at q = 1/T for the same T E steps (dp_accounting's PLD, add/remove)
    import dp_accounting as dpa

    d = 1e-6
    acc = dpa.pld.PLDAccountant()
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(1 / t, dpa.GaussianDpEvent(z)), t * e))
    assert lb.shuffle_epsilon_lower_bound(z, t, e, d) > 1.5 * acc.get_epsilon(d)


def test_single_epoch_pld_is_at_least_the_cube_bound():
    # the sliced statistic holds every cube set, so its optimistic PLD can only lose the discretisation
    z, t, d = 1.0, 200, 1e-5
    cube = lb.single_epoch_epsilon(z, t, d)
    pld = float(lb.multi_epoch_pld(z, t, 1).get_epsilon_for_delta(d))
    assert pld >= cube - 5e-3


def test_persistent_shuffle_is_one_epoch_at_scaled_noise():
    z, t, e, d = 1.0, 100, 4, 1e-5
    assert lb.shuffle_epsilon_lower_bound(z, t, e, d, reshuffle=False) == pytest.approx(
        lb.single_epoch_epsilon(z / 2, t, d), rel=1e-12)


def test_validation_names_the_argument():
    with pytest.raises(ValueError, match="noise_multiplier"):
        lb.shuffle_epsilon_lower_bound(-1.0, 10, 1, 1e-5)
    with pytest.raises(ValueError, match="pair"):
        lb.single_epoch_delta(1.0, 10, 1.0, pair=(1.0, 2.0))
