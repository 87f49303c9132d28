"""The accountants of balls-in-bins, cyclic Poisson and b-min-separation against independent computations.

Every certified number is pinned to dp_accounting's primitives called here directly (the analytic Gaussian of Balle
& Wang, ``gaussian_mechanism.get_epsilon_gaussian``; ``privacy_loss_distribution.from_gaussian_mechanism`` self-
composed; ``RdpAccountant``), to <= 1e-6 relative; the overflow charge to scipy's binomial tail; the Monte Carlo
estimate (never a certificate) to the exact Gaussian when B = 1 and the exact two-bin pair, within its own standard
error."""

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting import gaussian_mechanism
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import stats

from dpjax.accounting import balls_in_bins_mc as mc
from dpjax.accounting import sampling_bins as acc
from dpjax.accounting import tight
from dpjax.accounting.events import ClipEvent, DpPlan, NoiseEvent
from dpjax.auditing.sampling_bins import exact_two_bins
from dpjax.parts.selection_bins import BinnedBatches

pytestmark = pytest.mark.privacy

RTOL = 1e-6

# (noise multiplier z, rounds T, period B or b, delta, relation): partial epochs (T % B != 0) included
DETERMINISTIC = [(1.0, 100, 10, 1e-5, "add-remove"), (2.5, 1000, 100, 1e-6, "add-remove"),
                 (0.8, 37, 5, 1e-3, "replace-one"), (4.0, 12, 1, 1e-5, "replace-one"),
                 (1.3, 600, 64, 1e-5, "add-remove"), (10.0, 5000, 50, 1e-8, "replace-one")]


@pytest.mark.parametrize("scheme", ["balls-in-bins", "min-separation"])
@pytest.mark.parametrize("z,steps,period,delta,relation", DETERMINISTIC)
def test_unamplified_bound_is_the_analytic_gaussian_of_ceil_t_over_b_releases(scheme, z, steps, period, delta,
                                                                              relation):
    # k = ceil(T / B) releases of sensitivity Delta at std z Delta compose to one Gaussian of multiplier z / sqrt(k)
    # (the relation only fixes Delta, which the multiplier is relative to)
    k = math.ceil(steps / period)
    reference = gaussian_mechanism.get_epsilon_gaussian(z / math.sqrt(k), delta)
    report = acc.binned_epsilon(scheme, z, steps, period, delta, "gdp", neighboring=relation)
    assert report.epsilon == pytest.approx(reference, rel=RTOL)
    assert report.sampling == scheme and report.neighboring == relation
    assert any("no amplification" in n or "without amplification" in n for n in report.notes)


@pytest.mark.parametrize("z,steps,period,delta,relation", DETERMINISTIC[:3])
def test_unamplified_pld_is_dp_accountings_pld_of_one_gaussian(z, steps, period, delta, relation):
    k = math.ceil(steps / period)
    interval = 1e-3
    reference = pld_lib.from_gaussian_mechanism(z / math.sqrt(k), value_discretization_interval=interval)
    (schedule,) = acc.binned_privacy("balls-in-bins", z, steps, period, neighboring=relation,
                                     amplified=False).base.schedules
    ours = tight.tight_epsilon(schedule, delta, "pld", pld_discretization=interval).epsilon
    assert ours == pytest.approx(reference.get_epsilon_for_delta(delta), rel=RTOL)


# (z, q, T, b, delta, relation)
CYCLIC = [(1.0, 0.05, 40, 4, 1e-5, "add-remove"), (0.8, 0.2, 30, 3, 1e-5, "add-remove"),
          (2.0, 0.01, 250, 10, 1e-6, "add-remove"), (1.5, 0.1, 23, 2, 1e-5, "replace-one"),
          (1.2, 0.5, 8, 1, 1e-3, "add-remove"), (3.0, 0.3, 99, 5, 1e-5, "replace-one")]


@pytest.mark.parametrize("z,q,steps,b,delta,relation", CYCLIC)
def test_cyclic_poisson_pld_is_ceil_t_over_b_poisson_sampled_gaussians(z, q, steps, b, delta, relation):
    k = math.ceil(steps / b)
    interval = 1e-3
    # dp_accounting's PLD of PoissonSampled(q, Gaussian): add/remove, sensitivity 1 at std z; replace-one, the
    # record's contribution g -> g' (|g| <= 1): sensitivity 1 of each side at std 2 z (the replace sensitivity 2)
    std = z if relation == "add-remove" else 2 * z
    rel = (dpa.NeighboringRelation.ADD_OR_REMOVE_ONE if relation == "add-remove"
           else dpa.NeighboringRelation.REPLACE_ONE)
    one = pld_lib.from_gaussian_mechanism(std, sampling_prob=q, value_discretization_interval=interval,
                                          neighboring_relation=rel)
    reference = one.self_compose(k).get_epsilon_for_delta(delta)
    (schedule,) = acc.binned_privacy("cyclic-poisson", z, steps, b, sampling_rate=q,
                                     neighboring=relation).base.schedules
    ours = tight.tight_epsilon(schedule, delta, "pld", pld_discretization=interval).epsilon
    assert ours == pytest.approx(reference, rel=RTOL)


@pytest.mark.parametrize("z,q,steps,b,delta,relation", [c for c in CYCLIC if c[5] == "add-remove"])
def test_cyclic_poisson_rdp_is_dp_accountings_rdp(z, q, steps, b, delta, relation):
    orders = list(tight.rdp_orders())
    ra = dpa.rdp.RdpAccountant(orders)
    ra.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), math.ceil(steps / b))
    report = acc.binned_epsilon("cyclic-poisson", z, steps, b, delta, "rdp", sampling_rate=q)
    assert report.epsilon == pytest.approx(ra.get_epsilon(delta), rel=RTOL)


def test_cyclic_poisson_is_more_private_than_poisson_every_round_and_b1_is_poisson():
    z, q, t, delta = 1.0, 0.05, 60, 1e-5
    every = acc.binned_epsilon("cyclic-poisson", z, t, 1, delta, "rdp", sampling_rate=q).epsilon
    ra = dpa.rdp.RdpAccountant(list(tight.rdp_orders()))
    ra.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), t)
    assert every == pytest.approx(ra.get_epsilon(delta), rel=RTOL)
    assert acc.binned_epsilon("cyclic-poisson", z, t, 4, delta, "rdp", sampling_rate=q).epsilon < every


def test_overflow_is_charged_to_delta_exactly_as_stated():
    """delta_ideal = delta - (1 + e^{eps(delta/2)}) p, p = T sum_i P(Bin(n_i, 1/B) > c) (scipy here)."""
    sizes, bins, cap, steps, z, delta = (1000, 800), 10, 160, 200, 3.0, 1e-3
    event = acc.BinnedSelectionEvent("balls-in-bins", sizes, 100, (bins, bins), "record", capacity=cap)
    plan = DpPlan(event, ClipEvent("add-remove"), (NoiseEvent("noise_multiplier", z, "server"),), steps)
    spec = plan.spec()
    p = steps * sum(stats.binom.sf(cap, n, 1 / bins) for n in sizes)
    assert spec.overflow_probability == pytest.approx(p, rel=1e-9) and p > 0
    k = math.ceil(steps / bins)
    eps_half = gaussian_mechanism.get_epsilon_gaussian(z / math.sqrt(k), delta / 2)
    reduced = delta - (1 + math.exp(eps_half)) * p
    expected = gaussian_mechanism.get_epsilon_gaussian(z / math.sqrt(k), reduced)
    report = spec.epsilon(delta, "gdp")
    assert report.epsilon == pytest.approx(expected, rel=RTOL) and report.delta == delta
    assert report.epsilon > gaussian_mechanism.get_epsilon_gaussian(z / math.sqrt(k), delta)  # the charge costs
    assert any("overflow probability" in n for n in report.notes)
    # a buffer that overflows too often is refused, naming capacity
    small = dataclass_replace(event, capacity=100)
    with pytest.raises(ValueError, match="capacity"):
        DpPlan(small, ClipEvent("add-remove"), (NoiseEvent("noise_multiplier", z, "server"),), steps).spec().epsilon(
            delta, "gdp")
    # capacity >= n can never overflow: no charge, and the run is a dp_accounting event
    never = DpPlan(dataclass_replace(event, capacity=1000), ClipEvent("add-remove"),
                   (NoiseEvent("noise_multiplier", z, "server"),), steps).spec()
    assert never.overflow_probability == 0.0
    assert isinstance(never.dp_event(), dpa.SelfComposedDpEvent)


def dataclass_replace(obj, **kw):
    import dataclasses

    return dataclasses.replace(obj, **kw)


def test_plan_of_the_part_takes_the_worst_silo_and_calibrates():
    sizes = (120, 90)
    part = BinnedBatches(scheme="cyclic-poisson", batch_size=4, num_bins=3, capacity=40)  # q = K b / n: replace-one
    noise = (NoiseEvent("noise_multiplier", 1.5, "server"),)
    plan = DpPlan(part.event(sizes), ClipEvent("replace-one"), noise, 50)
    spec = plan.spec()
    q_worst = 4 * 3 / 90  # the smaller silo's rate
    (schedule,) = spec.base.schedules
    assert schedule.sampling_rate == pytest.approx(q_worst) and schedule.steps == math.ceil(50 / 3)
    target = 3.0
    z = spec.calibrate(target, 1e-5, "rdp")["noise_multiplier"]
    again = DpPlan(part.event(sizes), ClipEvent("replace-one"), (NoiseEvent("noise_multiplier", z, "server"),), 50)
    assert again.spec().epsilon(1e-5, "rdp").epsilon <= target
    assert again.spec().epsilon(1e-5, "rdp").epsilon > 0.99 * target  # not overshooting
    # rates / bins read from the sizes are public only under replace-one
    with pytest.raises(ValueError, match="num_bins"):
        DpPlan(part.event(sizes), ClipEvent("add-remove"), noise, 50).spec()


def test_monte_carlo_is_an_estimate_that_matches_exact_pairs():
    # B = 1: the pair is N(1, s^2)^E vs N(0, s^2)^E, a Gaussian of mu = sqrt(E) / s (Balle & Wang, via dp_accounting)
    z, epochs, eps = 2.0, 4, 1.0
    est = mc.mc_delta(z, epochs, 1, eps, num_samples=100_000, seed=3)
    mu = math.sqrt(epochs) / z
    exact = stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
    assert abs(est.delta - exact) <= 5 * est.stderr
    assert est.certified is False and "ESTIMATE" in str(est) and "not a certified" in str(est)
    # B = 2, one epoch: the exact pair epsilon (1-d quadrature, dpjax.auditing.sampling_bins) within MC error:
    # eps is bracketed by the MC epsilons at delta -/+ 5 standard errors
    sigma, delta = 1.0, 1e-2
    exact_eps = exact_two_bins(sigma, delta)
    est = mc.mc_epsilon(sigma, 2, 2, delta, num_samples=100_000, seed=1)
    d_at_exact = mc.mc_delta(sigma, 2, 2, exact_eps, num_samples=100_000, seed=1)
    assert abs(d_at_exact.delta - delta) <= 5 * d_at_exact.stderr
    # the estimate is below the certified (unamplified) bound: amplification is real, and unclaimed
    certified = acc.binned_epsilon("balls-in-bins", sigma, 2, 2, delta, "gdp").epsilon
    assert est.epsilon < certified


def test_monte_carlo_amplification_grows_with_bins_and_stays_below_the_certificate():
    z, epochs, delta = 1.0, 3, 1e-3
    certified = acc.binned_epsilon("balls-in-bins", z, 3, 1, delta, "gdp").epsilon
    prev = math.inf
    for bins in (1, 4, 16):
        e = mc.mc_epsilon(z, epochs * bins, bins, delta, num_samples=20_000, seed=0).epsilon
        assert e < prev
        assert e <= certified * 1.02  # B = 1 is the certificate itself, up to sampling error
        prev = e


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match="sampling_rate"):
        acc.binned_privacy("cyclic-poisson", 1.0, 10, 2)
    with pytest.raises(ValueError, match="sampling_rate"):
        acc.binned_privacy("balls-in-bins", 1.0, 10, 2, sampling_rate=0.1)
    with pytest.raises(ValueError, match="period=0"):
        acc.participations(10, 0)
    with pytest.raises(ValueError, match="rates"):
        acc.BinnedSelectionEvent("cyclic-poisson", (10,), 2, (2,))
    assert acc.participations(10, 3) == 4 and acc.participations(9, 3) == 3
    assert acc.binomial_tail(10, 0.5, 10) == 0.0
    assert acc.binomial_tail(10, 0.5, 9) == pytest.approx(0.5**10)
