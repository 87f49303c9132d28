"""Every branch of ``dpjax.accounting.gdp`` and ``dpjax.accounting.calibration`` reached by a test that can fail
(issue 42, item 1).

The expected values are computed here, never read from dpjax: the mu-GDP curve by its closed form
(Dong, Roth & Su 2022, Cor. 2.13 = Balle & Wang 2018, Thm 8)

    delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)

evaluated with mpmath at 50 digits, and the calibration routine on curves whose root is known in closed form
(``eps(s) = c / s``: the smallest scale meeting ``t`` is ``c / t``; step and clipped curves with a known root).
Branches no input reaches (defensive guards of root finders) are listed with their reason in
``dpjax/RELIABILITY.md`` section 9.4.
"""

from __future__ import annotations

import math

import mpmath
import pytest

from dpjax.accounting import calibration as cal
from dpjax.accounting import gdp

pytestmark = pytest.mark.privacy


@pytest.fixture(autouse=True)
def _high_precision():
    """mpmath at 50 digits inside each test only (the closed forms cancel: Phi(a) - e^eps Phi(b)); restored after."""
    with mpmath.workdps(50):
        yield



def _delta_mp(mu: float, eps: float) -> mpmath.mpf:
    """delta(eps) of mu-GDP, Balle & Wang 2018 Thm 8, at 50 digits."""
    mu, eps = mpmath.mpf(mu), mpmath.mpf(eps)
    return mpmath.ncdf(mu / 2 - eps / mu) - mpmath.exp(eps) * mpmath.ncdf(-mu / 2 - eps / mu)


def _bisect_mp(f, lo, hi, steps: int = 120) -> float:
    """The sign change of a monotone f on [lo, hi] by plain bisection at 50 digits (f(lo) > 0 >= f(hi))."""
    lo, hi = mpmath.mpf(lo), mpmath.mpf(hi)
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return float(hi)


def _eps_mp(mu: float, delta: float) -> float:
    """The exact epsilon: the root of delta(eps) = delta (delta(eps) decreases in eps)."""
    return _bisect_mp(lambda e: _delta_mp(mu, e) - delta, 0, mu * mu + 50 * mu)


# -- gdp ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mu,eps", [(0.5, 0.3), (1.0, 1.0), (2.0, 3.0), (4.0, 0.0)])
def test_gdp_delta_is_the_closed_form(mu, eps):
    assert gdp.gdp_delta(mu, eps) == pytest.approx(float(_delta_mp(mu, eps)), rel=1e-10)


def test_gdp_delta_degenerate_mechanisms():
    # mu = 0: identical output laws, delta 0 at every epsilon; mu = inf: a distinguishable release, delta 1
    assert gdp.gdp_delta(0.0, 0.0) == 0.0
    assert gdp.gdp_delta(math.inf, 5.0) == 1.0
    # eps = inf: delta(inf) = lim Phi(-inf) - ... = 0
    assert gdp.gdp_delta(1.0, math.inf) == 0.0


def test_gdp_delta_below_the_smallest_float_is_zero():
    # mu = 1e-3, eps = 50: eps/mu = 5e4 standard deviations, delta ~ exp(-1.25e9) (the log-space difference rounds to
    # >= 0 here); the true value is far below the smallest positive double, so 0.0 is the correctly rounded result
    true = _delta_mp(1e-3, 50.0)
    assert 0 < true < mpmath.mpf("1e-400")
    assert gdp.gdp_delta(1e-3, 50.0) == 0.0


@pytest.mark.parametrize("mu,delta", [(0.5, 1e-5), (1.0, 1e-6), (3.0, 1e-3)])
def test_gdp_epsilon_is_the_exact_root_on_its_safe_side(mu, delta):
    want = _eps_mp(mu, delta)
    got = gdp.gdp_epsilon(mu, delta)
    assert got == pytest.approx(want, rel=1e-9)
    assert _delta_mp(mu, got) <= delta * (1 + 1e-12)  # certified: the returned eps meets delta


def test_gdp_epsilon_degenerate_and_already_private():
    assert gdp.gdp_epsilon(math.inf, 1e-5) == math.inf
    assert gdp.gdp_epsilon(0.0, 1e-5) == 0.0
    # delta(0) = 2 Phi(mu/2) - 1 (DRS Cor. 2.13 at eps = 0); any delta above it needs eps = 0
    mu = 0.1
    delta0 = float(2 * mpmath.ncdf(mu / 2) - 1)
    assert 0.039 < delta0 < 0.04
    assert gdp.gdp_epsilon(mu, 0.05) == 0.0
    assert gdp.gdp_epsilon(mu, 0.03) > 0.0  # just below delta(0): a positive epsilon


@pytest.mark.parametrize("eps,delta", [(1.0, 1e-5), (0.5, 1e-6), (4.0, 1e-3)])
def test_gdp_mu_is_the_largest_mu_meeting_eps_delta(eps, delta):
    got = gdp.gdp_mu(eps, delta)
    assert _delta_mp(got, eps) <= delta * (1 + 1e-12)
    assert _delta_mp(got * (1 + 1e-8), eps) > delta  # the largest, to 1e-8


def test_gdp_mu_zero_when_no_noise_level_meets_the_target():
    # eps = 0: delta(0) = 2 Phi(mu/2) - 1 ~ mu / sqrt(2 pi) ~ 4e-9 at the search's smallest mu 1e-8 > 1e-10
    assert float(2 * mpmath.ncdf(0.5e-8) - 1) > 1e-10
    assert gdp.gdp_mu(0.0, 1e-10) == 0.0
    # ... so no sigma gives the Gaussian mechanism (1e-12, 1e-10)-DP: refused, naming both
    with pytest.raises(ValueError, match=r"epsilon=1e-12, delta=1e-10"):
        gdp.gaussian_mechanism_sigma(1e-12, 1e-10, 1.0)


def test_gaussian_mechanism_mu_and_sigma():
    # mu = sqrt(count) * Delta / sigma (DRS Cor. 3.3 composition of count (Delta / sigma)-GDP releases)
    assert gdp.gaussian_mechanism_mu(2.0, 0.5, count=9) == pytest.approx(3 * 0.5 / 2.0, rel=1e-15)
    assert gdp.gaussian_mechanism_mu(0.0, 1.0) == math.inf  # no noise: not private at all
    # sigma: the exact mu of (1, 1e-5)-DP, mu* solving delta(1; mu*) = 1e-5; sigma = sqrt(4) * 2 / mu*
    mu_star = _bisect_mp(lambda m: 1e-5 - _delta_mp(m, 1.0), 0.1, 2.0)  # delta grows with mu
    assert gdp.gaussian_mechanism_sigma(1.0, 1e-5, 2.0, count=4) == pytest.approx(2 * 2.0 / mu_star, rel=1e-9)
    assert gdp.gaussian_mechanism_epsilon(4 / mu_star, 2.0, 1e-5, count=4) == pytest.approx(1.0, rel=1e-9)


def test_classical_gaussian_sigma_formula_and_range():
    # Dwork & Roth 2014, Thm A.1: sigma = sqrt(2 ln(1.25 / delta)) Delta / eps, eps < 1
    assert gdp.classical_gaussian_sigma(0.5, 1e-5, 2.0) == pytest.approx(
        math.sqrt(2 * math.log(1.25e5)) * 2.0 / 0.5, rel=1e-15)
    with pytest.raises(ValueError, match="epsilon=1.0 must be < 1"):
        gdp.classical_gaussian_sigma(1.0, 1e-5, 1.0)


def test_gdp_compose_and_group():
    assert gdp.gdp_compose(3.0, 4.0) == pytest.approx(5.0, rel=1e-15)
    assert gdp.gdp_group(0.7, 3) == pytest.approx(2.1, rel=1e-15)


# -- calibration ------------------------------------------------------------------------------------------------

def _counting(f):
    calls = []

    def g(s):
        calls.append(s)
        return f(s)
    return g, calls


@pytest.mark.parametrize("start", [1.0, 100.0])  # below the root: bracket upwards; above: downwards
def test_smallest_scale_finds_the_closed_form_root(start):
    c, t, rtol = 2.0, 0.5, 1e-6  # eps(s) = c / s <= t  <=>  s >= c / t = 4
    got = cal.smallest_scale(lambda s: c / s, t, start=start, rtol=rtol)
    assert c / got <= t  # feasible: the returned scale meets the target
    assert 4.0 <= got <= 4.0 * (1 + rtol)


def test_smallest_scale_refuses_an_unreachable_target():
    # eps(s) = 1 + 1/s > 1 at every scale: no noise reaches 0.5
    with pytest.raises(ValueError, match=r"target_epsilon=0.5 cannot be reached"):
        cal.smallest_scale(lambda s: 1.0 + 1.0 / s, 0.5)


def test_smallest_scale_refuses_a_target_needing_no_noise():
    # eps(s) = 1e-6 / s: the target 1 holds down to s = 1e-6 < min_scale 1e-4
    with pytest.raises(ValueError, match=r"target_epsilon=1.0 is met at every noise level down to"):
        cal.smallest_scale(lambda s: 1e-6 / s, 1.0)


def test_smallest_scale_with_infinite_epsilon_below_the_root():
    # eps = inf below s = 5 (e.g. a sampled mechanism without enough noise), 6 / s above: the root is 6, and the
    # Brent step is skipped (log eps is not finite at the bracket's low end): bisection alone
    f = lambda s: math.inf if s < 5 else 6.0 / s  # noqa: E731
    got = cal.smallest_scale(f, 1.0, rtol=1e-6)
    assert 6.0 <= got <= 6.0 * (1 + 1e-6)


def test_smallest_scale_with_zero_epsilon_above_the_root():
    # eps(s) = max(0, 8 - s): zero at the bracket's high end (log eps undefined): bisection alone; root 7
    got = cal.smallest_scale(lambda s: max(0.0, 8.0 - s), 1.0, rtol=1e-6)
    assert 7.0 <= got <= 7.0 * (1 + 1e-6)


def test_refine_bracket_survives_a_root_finder_failure():
    # a curve that is 0 inside the bracket: log eps is -inf there and Brent's method cannot run; bisection on the
    # feasibility predicate still returns a feasible upper end within rtol
    f = lambda s: 2.0 if s < 3.0 else (0.0 if s < 3.5 else 0.5)  # noqa: E731  (target 1: feasible from s = 3)
    lo, hi = cal.refine_bracket(f, 1.0, 1.0, 4.0, 1e-6)
    assert f(lo) > 1.0 >= f(hi)
    assert 3.0 <= hi <= 3.0 * (1 + 1e-6) and hi / lo <= 1 + 1e-6


def test_refine_bracket_on_a_step_curve():
    # a step at s = 2.5 (a discrete accountant's curve): Brent's estimate lands on the step; the steps beside it
    # re-bracket (or fall through to bisection) and the result is the step to rtol
    f = lambda s: 3.0 if s < 2.5 else 0.5  # noqa: E731
    lo, hi = cal.refine_bracket(f, 1.0, 1.0, 4.0, 1e-6)
    assert f(lo) > 1.0 >= f(hi)
    assert 2.5 <= hi <= 2.5 * (1 + 1e-6)


def test_refine_bracket_already_narrow_is_unchanged():
    lo, hi = cal.refine_bracket(lambda s: 2.0 / s, 1.0, 2.0 / (1 + 1e-8), 2.0, 1e-6)
    assert (lo, hi) == pytest.approx((2.0 / (1 + 1e-8), 2.0), rel=1e-15)


@pytest.mark.parametrize("coarse_c", [1.9, 2.1])  # coarse root below (hi moves up) / above (lo moves down) 4
def test_smallest_scale_with_a_coarse_curve_ends_on_the_fine_one(coarse_c):
    fine, calls = _counting(lambda s: 2.0 / s)
    got = cal.smallest_scale(fine, 0.5, coarse_epsilon_at=lambda s: coarse_c / s, rtol=1e-6)
    assert 4.0 <= got <= 4.0 * (1 + 1e-6)  # the FINE curve's root, not the coarse one's (3.8 / 4.2)
    assert 2.0 / got <= 0.5
    assert got in calls  # the returned scale was evaluated on the fine curve


def test_rebracket_moves_both_ends():
    # eps = 2 / s, target 0.5 (root 4): a bracket (4.2, 4.4) found on another curve is wholly feasible: lo moves down
    lo, hi = cal.rebracket(lambda s: 2.0 / s, 0.5, 4.2, 4.4)
    assert 2.0 / lo > 0.5 >= 2.0 / hi
    # and (3.6, 3.8) wholly infeasible: hi moves up
    lo, hi = cal.rebracket(lambda s: 2.0 / s, 0.5, 3.6, 3.8)
    assert 2.0 / lo > 0.5 >= 2.0 / hi


def test_bisect_threshold_stops_at_rtol_or_iterations():
    feasible = lambda x: x >= 0.3  # noqa: E731
    got = cal.bisect_threshold(feasible, 0.0, 1.0, iterations=200, rtol=1e-9)
    assert 0.3 <= got <= 0.3 * (1 + 1e-9) + 1e-12
    # three halvings by hand: mid .5 feasible -> hi .5; mid .25 not -> lo .25; mid .375 feasible -> hi .375
    assert cal.bisect_threshold(feasible, 0.0, 1.0, iterations=3, rtol=1e-9) == 0.375
    # floor: stop once hi - lo <= rtol * max(floor, hi): with floor 10 and rtol 0.1 the first width 0.5 <= 1 stops
    assert cal.bisect_threshold(feasible, 0.0, 1.0, iterations=50, rtol=0.1, floor=10.0) == 0.5


def test_coarse_curve_that_misleads_is_refused_never_returned():
    # the coarse curve meets 0.5 at 4, the fine one never (eps 1 at every scale): before the fix the bisection returned
    # a scale with eps 1 > 0.5 as "calibrated"; now refused
    with pytest.raises(ValueError, match=r"target_epsilon=0.5 cannot be reached"):
        cal.smallest_scale(lambda s: 1.0, 0.5, coarse_epsilon_at=lambda s: 2.0 / s)
    # the fine curve meets the target at every scale: refused like _bracket's "needs no noise"
    with pytest.raises(ValueError, match=r"target_epsilon=0.5 is met at every scale"):
        cal.smallest_scale(lambda s: 0.1, 0.5, coarse_epsilon_at=lambda s: 2.0 / s)


def test_refine_bracket_with_a_feasible_low_end_still_returns_a_feasible_scale():
    # a bracket whose low end already meets the target (from a nearby curve): Brent's method refuses it (no sign
    # change), bisection alone runs; the upper end is still evaluated feasible and within rtol of the low end
    lo, hi = cal.refine_bracket(lambda s: 2.0 / s, 1.0, 3.0, 4.0, 1e-6)
    assert 2.0 / hi <= 1.0 and 3.0 <= hi <= 3.0 * (1 + 1e-6)


@pytest.mark.parametrize("lo,hi", [(2.0 * (1 - 1e-8), 4.0), (1.0, 2.0 * (1 + 1e-8))])
def test_refine_bracket_with_the_root_at_an_end(lo, hi):
    # eps = 2 / s, target 1: root 2 within Brent's step (xtol) of one end, so the steps beside the root fall outside
    # the bracket and are skipped; the result still brackets 2 to rtol
    lo2, hi2 = cal.refine_bracket(lambda s: 2.0 / s, 1.0, lo, hi, 1e-6)
    assert 2.0 / lo2 > 1.0 >= 2.0 / hi2
    assert 2.0 <= hi2 <= 2.0 * (1 + 1e-6) and hi2 / lo2 <= 1 + 1e-6
