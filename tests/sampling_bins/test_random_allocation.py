"""The certified random-allocation accountant of balls-in-bins (``dpjax.accounting.random_allocation``, the port of
dp_accounting's unreleased random-allocation PLD) against computations that share none of its code.

* B = 2, one epoch: the pair ``(N(e_1, z^2 I) + N(e_2, z^2 I)) / 2`` vs ``N(0, z^2 I)`` computed exactly here
  (rotate, integrate the sum coordinate in closed form, the difference by adaptive quadrature), cross-checked to
  1e-6 relative against ``dpjax.auditing.sampling_bins.exact_two_bins`` (a different reduction on a fixed grid).
* B = 2, E epochs: that exact privacy-loss CDF put on a fine linear grid, pessimistically and optimistically, and
  self-composed by dp_accounting's own ``DensePLDPmf`` (FFT): a sandwich [lo, hi] of the exact E-fold value.
* The upstream test's published value (sigma 2, 10 of 100 steps = 10 epochs of 1-of-10, delta 1e-6: eps 2.4265).

The certificate is a pessimistic discretisation on a loss grid of width h: never below the exact value, and above
it by at most one grid step per rounding. Per epoch the remove path rounds the exp-space factors, each of the
ceil(log2 B) + 1 geometric convolutions, and the log back to the linear grid (geometric step h = a log-shift <= h),
so the loss moves up by at most ``(ceil(log2 B) + 3) h``; E epochs compose those shifts: the slack is E times that.
1e-6 relative agreement of the certificate itself is not reachable: the finest grid accepted (1e-4) is already
>= 1e-4 above the exact value (and takes minutes: the geometric convolution is quadratic in the grid size).

Ordering (theory, module docstring): Poisson marginal (rate 1/B, E steps) <= exact <= certificate <= ceil(T/B)
Gaussians; and the Monte Carlo estimate is not above the certificate by more than its sampling error.
"""

import functools
import math

import numpy as np
import pytest
from dp_accounting import gaussian_mechanism
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import integrate, optimize, special

from dpjax.accounting import balls_in_bins_mc as mc
from dpjax.accounting import random_allocation as ra
from dpjax.accounting import sampling_bins as acc

pytestmark = pytest.mark.privacy

H = 2e-3  # the certificate's grid in these tests (the default)


def _slack(num_bins, epochs, h=H):
    """The most the certificate's epsilon may exceed the exact one (module docstring)."""
    return epochs * (math.ceil(math.log2(num_bins)) + 3) * h


# ---------------------------------------------------------------------------------------------------------------
# The exact two-bin pair. Rotate y -> (u, w) = ((y1 + y2), (y1 - y2)) / sqrt 2; the privacy loss of one epoch is
#   L = -1/(2 z^2) + b u + log cosh(b w),   b = 1 / (sqrt 2 z^2),
# u and w independent N(., z^2): means (1/sqrt 2, 1/sqrt 2) under P's first component (the second gives the same law
# of L: w -> -w), (0, 0) under Q. Given w, L is Gaussian in u, so the hockey stick is closed form in u.


def _gauss_hockey(m, s, eps):
    """E[(1 - e^{eps - L})_+] for L ~ N(m, s^2)."""
    return special.ndtr((m - eps) / s) - np.exp(eps - m + s * s / 2) * special.ndtr((m - eps - s * s) / s)


def _a(w, z):
    b = 1 / (math.sqrt(2) * z * z)
    return -1 / (2 * z * z) + np.logaddexp(w * b, -w * b) - math.log(2)


def _delta_exact(z, eps, direction):
    b = 1 / (math.sqrt(2) * z * z)
    mu = 1 / math.sqrt(2) if direction == "remove" else 0.0

    def f(w):
        m = _a(w, z) + b * mu
        val = _gauss_hockey(m, b * z, eps) if direction == "remove" else _gauss_hockey(-m, b * z, eps)
        return val * math.exp(-(w - mu) ** 2 / (2 * z * z)) / (math.sqrt(2 * math.pi) * z)

    return integrate.quad(f, mu - 40 * z, mu + 40 * z, epsabs=1e-16, epsrel=1e-12, limit=400)[0]


def exact_two_bin_epsilon(z, delta):
    return optimize.brentq(lambda e: max(_delta_exact(z, e, "remove"), _delta_exact(z, e, "add")) - delta,
                           0.0, 60.0, xtol=1e-13)


def _loss_cdf(z, losses, direction):
    """P(loss <= l) of one two-bin epoch: remove: L under P; add: -L under Q (dp_accounting's two PMFs)."""
    b = 1 / (math.sqrt(2) * z * z)
    s = b * z
    mu = 1 / math.sqrt(2) if direction == "remove" else 0.0
    x, wts = np.polynomial.hermite_e.hermegauss(100)  # E over w ~ N(mu, z^2) of a smooth integrand
    w = mu + z * x
    a = _a(w, z)[None, :]
    l = losses[:, None]
    if direction == "remove":
        vals = special.ndtr((l - a - b * mu) / s)
    else:  # -L <= l  <=>  a + b u >= -l,  u ~ N(0, z^2)
        vals = special.ndtr((l + a) / s)
    return vals @ wts / wts.sum()


@functools.lru_cache(maxsize=8)
def _reference_pld(z, h, pessimistic):
    """The exact one-epoch loss law on the linear grid h (dp_accounting's ``DensePLDPmf``). The grid spans
    +-(10 / z + 1 / z^2): a loss beyond it needs u + |w| beyond 10 sqrt 2 z (a 7-sigma event); its mass goes to the
    infinite-loss atom (pessimistic) or to the top point (optimistic)."""
    pmfs = []
    for direction in ("remove", "add"):
        hi = 10.0 / z + 1.0 / z ** 2
        lo = -hi
        grid = np.arange(math.floor(lo / h), math.ceil(hi / h) + 1) * h
        cdf = _loss_cdf(z, grid, direction)
        masses = np.diff(cdf)  # mass of (grid[i], grid[i+1]]: up to grid[i+1] (pessimistic) or down to grid[i]
        inf_mass = 1.0 - cdf[-1]
        probs = np.concatenate([[cdf[0]], masses]) if pessimistic else np.concatenate([masses, [0.0]])
        if not pessimistic:  # the mass below the grid goes to its lowest point, the mass above it to the highest
            probs[0] += cdf[0]
            probs[-1] += inf_mass
            inf_mass = 0.0
        pmfs.append(pld_pmf.DensePLDPmf(h, int(round(grid[0] / h)), np.maximum(probs, 0.0), inf_mass,
                                        pessimistic_estimate=pessimistic))
    return pld_lib.PrivacyLossDistribution(pmfs[0], pmfs[1])


TWO_BIN = [(0.8, 1e-5), (0.8, 1e-3), (1.0, 1e-5), (1.0, 1e-3), (2.0, 1e-6), (2.0, 1e-3)]


@pytest.mark.parametrize("z,delta", TWO_BIN)
def test_exact_two_bin_reference_agrees_with_the_audits_independent_reduction(z, delta):
    from dpjax.auditing.sampling_bins import exact_two_bins

    assert exact_two_bin_epsilon(z, delta) == pytest.approx(exact_two_bins(z, delta), rel=1e-6)


@pytest.mark.parametrize("z,delta", TWO_BIN)
def test_two_bin_certificate_sandwiches_the_exact_pair(z, delta):
    exact = exact_two_bin_epsilon(z, delta)
    upper = ra.allocation_epsilon(z, 2, 1, delta, discretization=H)
    lower = ra.allocation_epsilon(z, 2, 1, delta, discretization=H, upper=False)
    assert lower <= exact <= upper <= exact + _slack(2, 1)


@pytest.mark.parametrize("z,epochs,delta", [(1.0, 3, 1e-5), (2.0, 10, 1e-6), (1.5, 5, 1e-4)])
def test_fresh_epochs_compose_like_dp_accountings_composition_of_the_exact_epoch(z, epochs, delta):
    h_ref = 5e-4
    ref_hi = _reference_pld(z, h_ref, True).self_compose(epochs).get_epsilon_for_delta(delta)
    ref_lo = _reference_pld(z, h_ref, False).self_compose(epochs).get_epsilon_for_delta(delta)
    assert ref_lo <= ref_hi <= ref_lo + 2 * epochs * h_ref + 1e-9  # the reference is tight to its own grid
    cert = ra.allocation_epsilon(z, 2, epochs, delta, discretization=H)
    assert ref_lo <= cert <= ref_hi + _slack(2, epochs)
    if epochs == 3:  # one epoch of the reference is the exact pair
        one = _reference_pld(z, h_ref, True).get_epsilon_for_delta(delta)
        assert exact_two_bin_epsilon(z, delta) <= one <= exact_two_bin_epsilon(z, delta) + 2 * h_ref


def test_published_upstream_value_k10_of_t100():
    """dp_accounting's pld_privacy_accountant_test (PR #414): RandomAllocationDpEvent(Gaussian(2), 10 of 100), delta
    1e-6 -> eps 2.4265 (+- 1e-3, at grid 1e-4). 10 of 100 is 10 epochs of 1-of-10 in the upstream decomposition."""
    published, tol = 2.4265, 1e-3
    cert = ra.allocation_epsilon(2.0, 10, 10, 1e-6, discretization=H)
    lower = ra.allocation_epsilon(2.0, 10, 10, 1e-6, discretization=H, upper=False)
    assert published - tol <= cert <= published + tol + _slack(10, 10)
    assert lower <= published + tol


# ---------------------------------------------------------------------------------------------------------------
# Ordering on the Monte Carlo bench (experiments/benchmarks/bench_balls_in_bins_mc_vs_jax_privacy.py's grid).

BENCH = [(z, b) for z in (0.6, 1.0, 2.0) for b in (10, 30, 100)]
FAST = [(1.0, 10), (2.0, 30)]


def _ordering(z, b, epochs, delta, h):
    poisson = ra.poisson_marginal_epsilon(z, b, epochs, delta)
    lower = ra.allocation_epsilon(z, b, epochs, delta, discretization=h, upper=False)
    cert = ra.allocation_epsilon(z, b, epochs, delta, discretization=h)
    gaussian = gaussian_mechanism.get_epsilon_gaussian(z / math.sqrt(epochs), delta)
    # the lower PLD and the Poisson marginal are both lower bounds of the exact value: each is <= the certificate
    assert poisson <= cert and lower <= cert <= gaussian + 1e-9
    assert poisson <= lower + _slack(b, epochs, h)
    return cert


def _monte_carlo_not_above(z, b, epochs, delta, cert, samples):
    # delta estimated at the certificate's eps: the certificate holds for the true pair, so the estimate may exceed
    # delta only by sampling error (4 standard errors: a false alarm below 1e-4 per case)
    est = mc.mc_delta(z, epochs * b, b, cert, num_samples=samples, seed=7)
    assert est.delta <= delta + 4 * est.stderr


@pytest.mark.parametrize("z,b", FAST)
def test_ordering_and_monte_carlo_on_the_bench(z, b):
    cert = _ordering(z, b, 1, 1e-5, 1e-2)
    _monte_carlo_not_above(z, b, 1, 1e-5, cert, 100_000)


@pytest.mark.slow  # the whole 9-case bench at the default grid: ~1 min
@pytest.mark.parametrize("z,b", BENCH)
def test_ordering_and_monte_carlo_on_the_whole_bench(z, b):
    cert = _ordering(z, b, 1, 1e-5, H)
    _monte_carlo_not_above(z, b, 1, 1e-5, cert, 100_000)
    cert3 = _ordering(z, b, 3, 1e-5, 1e-2)
    _monte_carlo_not_above(z, b, 3, 1e-5, cert3, 30_000)


# ---------------------------------------------------------------------------------------------------------------
# Wiring: the binned accountant, its refusals, and what is not claimed.


def test_binned_accountant_reports_the_certificate_and_keeps_the_composition_as_its_cap():
    report = acc.binned_epsilon("balls-in-bins", 2.0, 100, 10, 1e-6, "best", discretization=H)
    cert = ra.allocation_epsilon(2.0, 10, 10, 1e-6, discretization=H)
    plain = gaussian_mechanism.get_epsilon_gaussian(2.0 / math.sqrt(10), 1e-6)
    assert report.epsilon == cert < plain and report.accountant == ra.ACCOUNTANT
    assert any("CERTIFIED random-allocation PLD" in n for n in report.notes)
    assert not any("Monte Carlo" in n and "CERTIFIED" in n for n in report.notes)


@pytest.mark.parametrize("kwargs", [{"neighboring": "replace-one"}, {"group_size": 2}])
def test_relations_the_upstream_accountant_does_not_state_keep_the_unamplified_bound(kwargs):
    report = acc.binned_epsilon("balls-in-bins", 2.0, 100, 10, 1e-6, "best", **kwargs)
    assert report.accountant != ra.ACCOUNTANT
    assert not isinstance(acc.binned_privacy("balls-in-bins", 2.0, 100, 10, **kwargs).base, ra.AllocationPrivacy)


@pytest.mark.parametrize("accountant", ["rdp", "gdp"])
def test_accountants_without_an_allocation_curve_keep_the_composition_and_say_so(accountant):
    report = acc.binned_epsilon("balls-in-bins", 2.0, 100, 10, 1e-6, accountant)
    plain = acc.binned_epsilon("balls-in-bins", 2.0, 100, 10, 1e-6, accountant, amplified=False)
    assert report.epsilon == plain.epsilon and report.accountant != ra.ACCOUNTANT
    assert any("'pld' or 'best'" in n for n in report.notes)


def test_calibration_meets_the_target_under_the_certificate():
    spec = acc.binned_privacy("balls-in-bins", 1.0, 20, 10, discretization=1e-2)
    z = spec.calibrate(2.0, 1e-5, "pld")["noise_multiplier"]
    at = acc.binned_epsilon("balls-in-bins", z, 20, 10, 1e-5, "pld", discretization=1e-2)
    plain_z = spec.calibrate(2.0, 1e-5, "gdp")["noise_multiplier"]  # gdp: the unamplified composition
    assert at.epsilon <= 2.0 and at.accountant == ra.ACCOUNTANT
    assert 1.9 < at.epsilon and z < plain_z  # amplification lowers the noise the target needs


@pytest.mark.parametrize("bad,match", [({"discretization": 1e-5}, "discretization=1e-05"),
                                       ({"noise_multiplier": 0.0}, "noise_multiplier=0.0"),
                                       ({"num_bins": 0}, "num_bins=0")])
def test_refusals_name_the_argument(bad, match):
    args = {"noise_multiplier": 1.0, "num_bins": 4, "num_epochs": 1} | bad
    h = args.pop("discretization", H)
    with pytest.raises(ValueError, match=match):
        ra.allocation_pld(args["noise_multiplier"], args["num_bins"], args["num_epochs"], discretization=h)


def test_more_epochs_than_max_epochs_report_the_unamplified_bound_without_building_the_pld(monkeypatch):
    # bounded work (issue #39): 10^12 steps over 100 bins were 10^10 epochs composed (> 2 GB, minutes)
    monkeypatch.setattr(ra, "MAX_EPOCHS", 5)
    monkeypatch.setattr(ra, "allocation_pld", lambda *a, **k: pytest.fail("the PLD was built"))
    report = acc.binned_epsilon("balls-in-bins", 2.0, 60, 10, 1e-6, "best")  # 6 epochs
    plain = acc.binned_epsilon("balls-in-bins", 2.0, 60, 10, 1e-6, "best", amplified=False)
    assert report.epsilon == plain.epsilon and report.accountant != ra.ACCOUNTANT
    assert any("MAX_EPOCHS=5" in n for n in report.notes)
    spec = acc.binned_privacy("balls-in-bins", 1.0, 60, 10)
    z = spec.calibrate(2.0, 1e-5, "best")["noise_multiplier"]
    unamplified = acc.binned_privacy("balls-in-bins", 1.0, 60, 10, amplified=False).calibrate(2.0, 1e-5, "best")
    assert z == unamplified["noise_multiplier"]


def test_calibration_to_a_small_target_stays_below_the_no_amplification_noise():
    # a coarse grid too pessimistic for eps = 0.5 never met it: the search grew the noise to z ~ 1e18, where the
    # upstream grid raised "x_max must be greater than x_min"; both curves are now capped at the plain bound's noise
    spec = acc.binned_privacy("balls-in-bins", 1.0, 300, 10)
    z = spec.calibrate(0.5, 1e-5, "best")["noise_multiplier"]
    plain_z = acc.binned_privacy("balls-in-bins", 1.0, 300, 10, amplified=False).calibrate(0.5, 1e-5, "best")
    at = acc.binned_epsilon("balls-in-bins", z, 300, 10, 1e-5, "best")
    assert at.epsilon <= 0.5 and z <= plain_z["noise_multiplier"]
