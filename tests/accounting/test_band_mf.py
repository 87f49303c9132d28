"""BandMF accounting against independent computations (dp_accounting PLD primitives, the analytic Gaussian)."""

import math

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld
from scipy import optimize, stats

from dpjax.accounting import band_mf as acct

pytestmark = pytest.mark.privacy

# (z, q, rounds, bands): bands > 1, several epochs (rounds / bands participations per record)
AMPLIFIED = [(1.0, 0.1, 100, 4), (0.8, 0.05, 200, 8), (1.5, 0.2, 64, 2), (2.0, 0.5, 120, 16),
             (1.2, 0.01, 500, 5), (0.9, 0.3, 90, 7), (3.0, 0.02, 1000, 32)]


# two configurations in the default run, the rest (each PLD composition ~5-10 s on 2 cores) in the slow pass
@pytest.mark.parametrize("z,q,n,b", [c if i < 2 else pytest.param(*c, marks=pytest.mark.slow)
                                     for i, c in enumerate(sorted(AMPLIFIED, key=lambda c: c[2] / c[3]))])
def test_amplified_matches_pld_primitives(z, q, n, b):
    delta = 1e-6
    got = acct.band_mf_epsilon(acct.amplified_event(z, q, n, b), delta)
    ref = pld.from_gaussian_mechanism(z, sampling_prob=q, value_discretization_interval=1e-4).self_compose(
        math.ceil(n / b)).get_epsilon_for_delta(delta)
    assert got == pytest.approx(ref, rel=1e-6)
    # amplification helps: below the unamplified k-fold Gaussian (k = ceil(n / b))
    plain = acct.band_mf_epsilon(acct.multi_epoch_event(z, acct.separated_sensitivity(n, b, b)), delta)
    assert got < plain


def _analytic_gaussian_eps(mu, delta):  # Balle & Wang 2018, Thm 8: delta(eps) of the Gaussian with mu = sens/sigma
    f = lambda e: stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2) - delta  # noqa
    return optimize.brentq(f, 0.0, 500.0, xtol=1e-12)


@pytest.mark.parametrize("z,n,sep,b", [(2.0, 200, 10, 8), (3.0, 500, 50, 50)] + [
    pytest.param(*c, marks=pytest.mark.slow) for c in [(1.0, 100, 4, 4), (4.0, 1000, 20, 16), (0.7, 30, 5, 2),
                                                        (1.5, 64, 8, 3)]])
def test_multi_epoch_is_one_gaussian(z, n, sep, b):
    delta = 1e-5
    sens = acct.separated_sensitivity(n, sep, b)
    assert sens == pytest.approx(math.sqrt(math.ceil(n / sep)))
    got = acct.band_mf_epsilon(acct.multi_epoch_event(z, sens), delta)
    ref = pld.from_gaussian_mechanism(z / sens, value_discretization_interval=1e-4).get_epsilon_for_delta(delta)
    assert got == pytest.approx(ref, rel=1e-6)
    assert got >= _analytic_gaussian_eps(sens / z, delta) * (1 - 1e-9)  # certified: never below the exact value
    assert got == pytest.approx(_analytic_gaussian_eps(sens / z, delta), rel=2e-3)


def test_validation():
    with pytest.raises(ValueError, match="bands=5"):
        acct.separated_sensitivity(10, 4, 5)
    with pytest.raises(ValueError, match="noise_multiplier"):
        acct.multi_epoch_event(-1.0, 1.0)
