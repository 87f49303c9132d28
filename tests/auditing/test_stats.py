"""Clopper-Pearson bounds and the epsilon lower bound (dpjax.auditing.stats)."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from dpjax.accounting.gdp import gdp_epsilon
from dpjax.auditing import stats


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (0, 100000), (17, 100000), (49990, 50000)])
@pytest.mark.parametrize("alpha", [0.025, 0.05])
def test_clopper_pearson_upper_is_the_beta_quantile(k, n, alpha):
    upper = float(stats.clopper_pearson_upper(k, n, alpha))
    expected = 1.0 if k == n else sps.beta.ppf(1 - alpha, k + 1, n - k)
    assert upper == pytest.approx(expected, rel=1e-12)
    if k < n:  # defining property: P(Bin(n, upper) <= k) = alpha
        assert sps.binom.cdf(k, n, upper) == pytest.approx(alpha, rel=1e-6)


@pytest.mark.parametrize("k,n", [(0, 20), (5, 20), (20, 20), (123, 1000)])
def test_two_sided_clopper_pearson_matches_beta_quantiles(k, n):
    lo, hi = stats.clopper_pearson(k, n, 0.95)
    assert lo == (0.0 if k == 0 else pytest.approx(sps.beta.ppf(0.025, k, n - k + 1), rel=1e-12))
    assert hi == (1.0 if k == n else pytest.approx(sps.beta.ppf(0.975, k + 1, n - k), rel=1e-12))
    assert lo <= k / n <= hi


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="successes"):
        stats.clopper_pearson_upper(11, 10, 0.05)
    with pytest.raises(ValueError, match="alpha"):
        stats.clopper_pearson_upper(1, 10, 1.5)
    with pytest.raises(ValueError, match="scores_d"):
        stats.epsilon_lower_bound([], [1.0], 0.0, 1e-5)
    with pytest.raises(ValueError, match="non-finite"):
        stats.epsilon_lower_bound([np.nan], [1.0], 0.0, 1e-5)


def _oracle_threshold(mu, delta):
    """Threshold of the Neyman-Pearson test of N(0,1) vs N(mu,1) at which the test certifies
    the true eps(delta): for mu-GDP, eps(delta) = max_t log((1 - delta - Phi(t - mu)) / Phi(-t))."""
    t = np.linspace(-5, 10, 300001)
    eps = stats.epsilon_from_rates(sps.norm.sf(t), sps.norm.cdf(t - mu), delta)
    i = int(np.argmax(eps))
    return float(t[i]), float(eps[i])


def test_rates_at_the_oracle_threshold_give_the_exact_gdp_epsilon():
    for mu, delta in [(1.0, 1e-3), (0.5, 1e-2), (2.0, 1e-5)]:
        _, eps = _oracle_threshold(mu, delta)
        assert eps == pytest.approx(gdp_epsilon(mu, delta), abs=2e-3)


def test_lower_bound_on_a_gaussian_is_valid_and_reaches_the_true_epsilon():
    """mu = 1 GDP (exact eps known). With N samples per side at the oracle threshold, the
    bound is below the true eps (with prob >= 95 %), and above the floor obtained by
    inflating both error counts by 4 binomial standard deviations (prob >= 1 - 2 * 3.2e-5);
    at N = 2e6 that floor is within 0.05 of the true eps: the true eps is within reach.
    (delta = 0.1 puts the optimal threshold in the bulk; at small delta the reach grows
    only like log N, which is why the catalogue audits at delta = 1e-3.)"""
    mu, delta, n = 1.0, 0.1, 2_000_000
    true_eps = gdp_epsilon(mu, delta)
    t, _ = _oracle_threshold(mu, delta)
    rng = np.random.default_rng(0)
    bound = stats.epsilon_lower_bound(rng.normal(0, 1, n), rng.normal(mu, 1, n), t, delta)
    fp = n * sps.norm.sf(t)
    fn = n * sps.norm.cdf(t - mu)
    worst = lambda c: min(n, math.ceil(c + 4 * math.sqrt(c)))  # noqa: E731
    floor = stats.epsilon_from_rates(stats.clopper_pearson_upper(worst(fp), n, 0.025),
                                     stats.clopper_pearson_upper(worst(fn), n, 0.025), delta)
    assert bound.epsilon <= true_eps
    assert bound.epsilon >= floor
    assert true_eps - floor < 0.05


def test_confidence_level_holds_over_many_audits():
    """2000 independent audits of a mu = 1 Gaussian with 2000 samples per side, fixed oracle
    threshold: the bound exceeds the true eps in at most 5 % of them; the count is Bin(2000,
    p <= 0.05), so it stays below its 0.9999 quantile unless the confidence level is wrong."""
    mu, delta, n, trials = 1.0, 1e-2, 2000, 2000
    t, _ = _oracle_threshold(mu, delta)
    rng = np.random.default_rng(1)
    fp = rng.binomial(n, sps.norm.sf(t), trials)
    fn = rng.binomial(n, sps.norm.cdf(t - mu), trials)
    eps = stats.epsilon_from_rates(stats.clopper_pearson_upper(fp, n, 0.025), stats.clopper_pearson_upper(fn, n, 0.025),
                                   delta)
    violations = int(np.sum(eps > gdp_epsilon(mu, delta)))
    assert violations <= sps.binom.ppf(0.9999, trials, 0.05)
    # ...and the bound is not vacuous: most audits certify a positive epsilon.
    assert np.median(eps) > 0.5


def test_threshold_selection_and_orientation():
    """select_and_bound finds the informative direction of a score whatever its sign."""
    rng = np.random.default_rng(2)
    d, dp = rng.normal(0, 1, (2, 20000)), rng.normal(-2, 1, (2, 20000))  # D' scores lower
    b = stats.select_and_bound(d[0], dp[0], d[1], dp[1], 1e-3)
    assert b.orientation == -1
    assert 0 < b.epsilon <= gdp_epsilon(2.0, 1e-3)
