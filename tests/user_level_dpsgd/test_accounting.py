"""User-level DP-SGD's accountants against independent computations.

ULS (user-level Poisson-subsampled Gaussian): the PLD built directly by dp_accounting's
``privacy_loss_distribution.from_gaussian_mechanism`` (not through a DpEvent or an accountant) and self-composed; the
RDP as the exact finite sum of Mironov, Talwar & Zhang ("Renyi Differential Privacy of the Sampled Gaussian
Mechanism", 2019, Section 3.3, integer orders), summed here in log space, converted by Canonne, Kamath & Steinke
(2020, Proposition 12). ELS (group of k records under Poisson sampling, Ganesh 2024): the mixture PLD built directly by
``from_mixture_gaussian_mechanism`` with the Binomial(k, q) weights summed here in exact rationals. Every family
configuration has users of unequal sizes (a power-law split) and k > 1.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld

from dpjax.accounting import user_dpsgd as ud

pytestmark = pytest.mark.privacy

DELTA = 1e-5
SIZES = tuple(int(s) for s in np.random.default_rng(3).multinomial(400, np.arange(1, 41) ** -1.0 /
                                                                   np.sum(np.arange(1, 41) ** -1.0)) + 1)


def _family_spec(unit, z, q, steps, k, interval=None):
    """The spec the family's parts give (UserLevelDpSgd.privacy on unequal user sizes)."""
    from dpjax.algorithms.user_level_dpsgd import UserLevelDpSgd, DpSgdHParams
    from dpjax.problems.glm import LogisticRegression

    fam = UserLevelDpSgd(LogisticRegression(3), steps, unit, batch_size=8, sampling_rate=q, records_per_user=k)
    spec = fam.privacy(SIZES, DpSgdHParams.create(0.1, z, 1.0))
    assert isinstance(spec, ud.UserDpSgdPrivacy)
    assert (spec.level, spec.noise_multiplier, spec.sampling_rate, spec.num_steps, spec.records_per_user) == (
        "user" if unit == "user" else "example", z, q, steps, k)
    return spec if interval is None else dataclasses.replace(spec, pld_interval=interval)


def _exact_binomial(k, q):
    q = Fraction(q)
    return [math.comb(k, b) * q**b * (1 - q) ** (k - b) for b in range(k + 1)]


def _rdp_epsilon(z, q, steps, delta, orders):
    """min over integer orders a of T/(a-1) log sum_i C(a,i) (1-q)^(a-i) q^i exp((i^2-i)/(2 z^2)) + CKS conversion;
    the sum in log space (every term positive: a log-sum-exp, relative error ~1e-15)."""
    best = math.inf
    for a in orders:
        i = np.arange(a + 1)
        log_terms = (np.array([math.lgamma(a + 1) - math.lgamma(j + 1) - math.lgamma(a - j + 1) for j in i])
                     + i * math.log(q) + (a - i) * math.log1p(-q) + (i * i - i) / (2 * z * z))
        top = log_terms.max()
        rdp = steps * (top + math.log(math.fsum(np.exp(log_terms - top)))) / (a - 1)
        if delta**2 + math.expm1(-rdp) > 0:
            return 0.0
        best = min(best, rdp + math.log1p(-1 / a) - math.log(delta * a) / (a - 1))
    return max(0.0, best)


# noise multipliers exact in float32 (the hparams dtype), so the spec holds the very z the direct computation uses
ULS = [(1.0, 0.05, 100, 4), (0.75, 0.1, 50, 8), (2.0, 0.01, 1000, 16)]
ELS = [(1.5, 0.02, 100, 2), (2.0, 0.05, 50, 4), (3.0, 0.01, 200, 3)]


@pytest.mark.parametrize("z, q, steps, k", ULS)
def test_uls_pld_equals_the_directly_built_subsampled_gaussian(z, q, steps, k):
    """Interval 1e-3 (the default 1e-4 takes ~8 s on a busy CPU; the same code path)."""
    spec = _family_spec("user", z, q, steps, k, interval=1e-3)
    direct = pld.from_gaussian_mechanism(z, sensitivity=1.0, sampling_prob=q, value_discretization_interval=1e-3
                                         ).self_compose(steps).get_epsilon_for_delta(DELTA)
    assert spec.epsilon(DELTA, "pld").epsilon == pytest.approx(direct, rel=1e-6)


@pytest.mark.parametrize("z, q, steps, k", ULS)
def test_uls_rdp_equals_the_exact_sum(z, q, steps, k):
    spec = _family_spec("user", z, q, steps, k)
    assert spec.epsilon(DELTA, "rdp").epsilon == pytest.approx(_rdp_epsilon(z, q, steps, DELTA, ud.RDP_ORDERS),
                                                               rel=1e-6)


@pytest.mark.parametrize("z, q, steps, k", ELS)
def test_els_pld_equals_the_directly_built_mixture(z, q, steps, k):
    """Interval 1e-2 (fast; pessimistic at any interval); the default interval is checked by the slow test."""
    spec = _family_spec("example", z, q, steps, k, interval=1e-2)
    probs = [float(p) for p in _exact_binomial(k, q)]
    assert math.fsum(probs) == pytest.approx(1.0, abs=1e-15)
    direct = pld.from_mixture_gaussian_mechanism(z, list(map(float, range(k + 1))), probs,
                                                 value_discretization_interval=1e-2
                                                 ).self_compose(steps).get_epsilon_for_delta(DELTA)
    assert spec.epsilon(DELTA).epsilon == pytest.approx(direct, rel=1e-6)


@pytest.mark.slow
def test_els_at_the_default_interval_equals_the_direct_mixture():
    z, q, steps, k = 2.0, 0.05, 50, 4
    spec = _family_spec("example", z, q, steps, k)
    assert spec.interval == 1e-3
    direct = pld.from_mixture_gaussian_mechanism(z, [0.0, 1.0, 2.0, 3.0, 4.0], [float(p) for p in _exact_binomial(k, q)],
                                                 value_discretization_interval=1e-3
                                                 ).self_compose(steps).get_epsilon_for_delta(DELTA)
    assert spec.epsilon(DELTA).epsilon == pytest.approx(direct, rel=1e-6)


def test_binomial_pmf_is_the_exact_rational_pmf_rounded():
    for k, q in ((1, 0.3), (5, 0.01), (16, 0.125)):
        assert ud.binomial_pmf(k, q) == tuple(float(p) for p in _exact_binomial(k, q))


def test_group_of_one_record_is_the_subsampled_gaussian():
    """ELS with k = 1 is one record's Poisson-subsampled Gaussian: the mixture {0: 1-q, 1: q}; at the same
    interval the two PLD constructions agree to the discretisation (both pessimistic)."""
    uls = ud.UserDpSgdPrivacy("user", 1.2, 0.05, 100, pld_interval=1e-2).epsilon(DELTA).epsilon
    els = ud.UserDpSgdPrivacy("example", 1.2, 0.05, 100, records_per_user=1, pld_interval=1e-2).epsilon(DELTA).epsilon
    assert els == pytest.approx(uls, rel=2e-2)


def test_els_costs_more_with_a_larger_contribution_bound_and_more_than_uls():
    """At equal z, q, T: ELS with k records per user is a group of k (its epsilon grows with k), ULS is one unit."""
    base = dict(noise_multiplier=2.0, sampling_rate=0.02, num_steps=100, pld_interval=1e-2)
    uls = ud.UserDpSgdPrivacy("user", **base).epsilon(DELTA).epsilon
    els = [ud.UserDpSgdPrivacy("example", records_per_user=k, **base).epsilon(DELTA).epsilon for k in (1, 2, 4)]
    assert els[0] < els[1] < els[2] and els[1] > 1.5 * uls


def test_uls_group_of_users_is_the_binomial_mixture():
    event = ud.uls_dp_event(1.0, 0.1, 10, group_size=3)
    step = event.event
    assert list(step.sensitivities) == [0.0, 1.0, 2.0, 3.0] and list(step.sampling_probs) == list(ud.binomial_pmf(3, 0.1))
    assert event.count == 10


def test_rdp_is_refused_for_els_naming_the_accountant():
    spec = ud.UserDpSgdPrivacy("example", 1.0, 0.01, 10, records_per_user=2)
    with pytest.raises(ValueError, match="accountant='rdp'"):
        spec.epsilon(DELTA, "rdp")


def test_calibration_meets_the_target_and_is_the_smallest():
    spec = ud.UserDpSgdPrivacy("user", 1.0, 0.05, 200, pld_interval=1e-3)
    z = spec.calibrate(3.0, DELTA)["noise_multiplier"]
    at = lambda m: dataclasses.replace(spec, noise_multiplier=m).epsilon(DELTA).epsilon  # noqa: E731
    assert at(z) <= 3.0 < at(z * (1 - 2e-3))


@pytest.mark.parametrize("kwargs, name", [({"level": "users"}, "level"), ({"noise_multiplier": -1.0}, "noise_multiplier"),
                                          ({"sampling_rate": 1.5}, "sampling_rate"), ({"num_steps": 0}, "num_steps")])
def test_bad_specs_name_the_argument(kwargs, name):
    args = {"level": "user", "noise_multiplier": 1.0, "sampling_rate": 0.1, "num_steps": 5, **kwargs}
    with pytest.raises(ValueError, match=name):
        ud.UserDpSgdPrivacy(**args)
