"""Every branch of ``dpjax.accounting.band_mf`` reached by a test that can fail (issue 42, item 1).

BandMF (Choquette-Choo et al., "(Amplified) Banded Matrix Factorization", NeurIPS 2023): the multi-epoch run is ONE
Gaussian mechanism of multiplier ``z / sens(C)`` with ``sens(C) <= g sqrt(ceil(R / min_sep))`` for a unit-column-norm
``b``-banded strategy and ``min_sep >= b`` (Sec. 4; ICML 2023 Thm 2.1; g records: triangle inequality); the amplified
run under cyclic Poisson sampling is ``ceil(R / p)`` Poisson-subsampled Gaussians of multiplier ``z`` (Thm 4).

Expected values are built here: the Gaussian's exact epsilon from its closed form (Balle & Wang 2018, Thm 8, mpmath),
dp_accounting events composed in the test, the binomial overflow tail from scipy, sensitivities and participation
counts by hand. The plan the privatizer's event reads is a plain namespace holding real selection events.
"""

from __future__ import annotations

import math
import types

import dp_accounting as dpa
import mpmath
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld
from scipy import stats

from dpjax.accounting import band_mf as acct
from dpjax.accounting.events import SelectionEvent
from dpjax.accounting.privacy_spec import NoPrivacy
from dpjax.accounting.sampling_bins import BinnedPrivacy, BinnedSelectionEvent
from dpjax.accounting.schedules import Neighboring

pytestmark = pytest.mark.privacy


@pytest.fixture(autouse=True)
def _high_precision():
    """mpmath at 50 digits inside each test only (the closed forms cancel: Phi(a) - e^eps Phi(b)); restored after."""
    with mpmath.workdps(50):
        yield



def _exact_gaussian_eps(mu: float, delta: float) -> float:
    """Balle & Wang 2018 Thm 8: the root of Phi(mu/2 - e/mu) - e^e Phi(-mu/2 - e/mu) = delta, by bisection."""
    def d(e):
        return mpmath.ncdf(mu / 2 - e / mu) - mpmath.exp(e) * mpmath.ncdf(-mu / 2 - e / mu) - delta
    lo, hi = mpmath.mpf(0), mpmath.mpf(mu * mu + 40 * mu)
    for _ in range(120):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if d(mid) > 0 else (lo, mid)
    return float(hi)


def _rdp(event, delta):
    acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    return acc.compose(event).get_epsilon(delta)


# -- the events ---------------------------------------------------------------------------------------------------

def test_amplified_event_at_rate_one_is_the_unsampled_composition():
    # q = 1: every record of the group is in the batch, no amplification: ceil(10 / 4) = 3 Gaussians of multiplier z,
    # i.e. one Gaussian of mu = sqrt(3) / z (DRS Cor. 3.3), whose exact epsilon the PLD may only overestimate
    z, delta = 2.0, 1e-5
    event = acct.amplified_event(z, 1.0, 10, 4)
    assert event == dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), 3)
    exact = _exact_gaussian_eps(math.sqrt(3) / z, delta)
    got = acct.band_mf_epsilon(event, delta)
    assert exact * (1 - 1e-9) <= got <= exact * (1 + 2e-3)


def test_amplified_event_below_rate_one_is_poisson_subsampled():
    assert acct.amplified_event(1.5, 0.25, 9, 3) == dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(0.25, dpa.GaussianDpEvent(1.5)), 3)


# -- BandMfPrivacy (multi-epoch, one Gaussian) --------------------------------------------------------------------

Z, SENS, DELTA = 3.0, math.sqrt(5.0), 1e-5  # e.g. R = 50 rounds, min_sep 10: k = 5 participations


def _multi(**kw):
    return acct.BandMfPrivacy(Z, SENS, num_rounds=50, bands=4, min_sep=10, **kw)


def test_multi_epoch_gdp_is_the_exact_gaussian_epsilon_and_every_field():
    rep = _multi().epsilon(DELTA, "gdp")
    assert rep.epsilon == pytest.approx(_exact_gaussian_eps(SENS / Z, DELTA), rel=1e-8)
    assert (rep.delta, rep.accountant, rep.sampling, rep.neighboring, rep.unit, rep.noise_std) == (
        DELTA, "gdp", "one-pass", "replace-one", "record", Z)
    # the note prints z, sens(C), the bands, ceil(50 / 10) = 5 participations, min_sep 10
    (note,) = rep.notes
    assert f"{Z:g} / {SENS:.6g}" in note and "4 bands" in note and "<= 5 participations >= 10 rounds apart" in note


def test_multi_epoch_pld_and_rdp_certify_at_least_the_exact_epsilon():
    exact = _exact_gaussian_eps(SENS / Z, DELTA)
    spec = _multi()
    got_pld = spec.epsilon(DELTA, "pld").epsilon
    assert exact * (1 - 1e-9) <= got_pld <= exact * (1 + 2e-3)
    got_rdp = spec.epsilon(DELTA, "rdp").epsilon
    assert got_rdp == pytest.approx(_rdp(dpa.GaussianDpEvent(Z / SENS), DELTA), rel=1e-12)
    assert got_rdp >= exact


def test_multi_epoch_best_names_the_smallest_accountant():
    # gdp is exact, the others upper bounds: "best" must be gdp's value and name it
    rep = _multi().epsilon(DELTA, "best")
    assert rep.accountant == "gdp"
    assert rep.epsilon == pytest.approx(_exact_gaussian_eps(SENS / Z, DELTA), rel=1e-8)


def test_multi_epoch_calibrate_gdp_is_the_closed_form_multiplier():
    # eps_gdp(z) = exact eps at mu = sens / z: the smallest z meeting eps = 1 is sens / mu*, mu* the largest mu with
    # delta(1; mu) <= delta (bisection here)
    def d(m):
        return mpmath.ncdf(m / 2 - 1 / m) - mpmath.e * mpmath.ncdf(-m / 2 - 1 / m) - DELTA
    lo, hi = mpmath.mpf("0.1"), mpmath.mpf(5)
    for _ in range(120):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if d(mid) <= 0 else (lo, mid)
    z_star = SENS / float(lo)
    got = _multi().calibrate(1.0, DELTA, "gdp")
    assert set(got) == {"noise_multiplier"}
    assert z_star * (1 - 1e-9) <= got["noise_multiplier"] <= z_star * (1 + 1e-4)


@pytest.mark.slow  # ~25 calibration steps, each a PLD + RDP + GDP evaluation
def test_multi_epoch_calibrate_best_is_the_gdp_multiplier():
    # gdp is exact and the others upper bounds, so the smallest z meeting the target under "best" is gdp's
    spec = _multi()
    z_gdp = spec.calibrate(1.0, DELTA, "gdp")["noise_multiplier"]
    assert spec.calibrate(1.0, DELTA, "best")["noise_multiplier"] == pytest.approx(z_gdp, rel=2e-4)


def test_multi_epoch_events_and_relation():
    spec = _multi(noise_field="sigma")
    assert spec.dp_event() == dpa.GaussianDpEvent(Z / SENS)
    assert spec.dp_event_at(2.0) == dpa.GaussianDpEvent(2.0 * Z / SENS)  # the noise scaled by 2
    assert spec.dp_neighboring_relation is dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    with pytest.raises(ValueError, match="strategy_sensitivity"):
        acct.BandMfPrivacy(Z, 0.0)


# -- BandMfAmplifiedPrivacy (cyclic Poisson, Thm 4) ---------------------------------------------------------------

AZ, AQ, AR, AP = 3.0, 0.1, 8, 4  # ceil(8 / 4) = 2 Poisson-subsampled Gaussians (z = 3: a short PLD, < 1 s)


def test_amplified_pld_rdp_best_and_fields():
    spec = acct.BandMfAmplifiedPrivacy(AZ, AQ, AR, AP, bands=2)
    ref_pld = pld.from_gaussian_mechanism(AZ, sampling_prob=AQ, value_discretization_interval=1e-4).self_compose(
        2).get_epsilon_for_delta(DELTA)
    ref_rdp = _rdp(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(AQ, dpa.GaussianDpEvent(AZ)), 2), DELTA)
    rep = spec.epsilon(DELTA, "pld")
    assert rep.epsilon == pytest.approx(ref_pld, rel=1e-6)
    assert (rep.accountant, rep.sampling, rep.neighboring, rep.unit, rep.noise_std) == (
        "pld", "cyclic-poisson", "add-remove", "record", AZ)
    assert "2 Poisson-subsampled Gaussians" in rep.notes[0] and "4 groups, 2 bands" in rep.notes[0]
    assert spec.epsilon(DELTA, "rdp").epsilon == pytest.approx(ref_rdp, rel=1e-12)
    best = spec.epsilon(DELTA, "best")
    assert best.accountant == ("pld" if ref_pld <= ref_rdp else "rdp")
    assert best.epsilon == pytest.approx(min(ref_pld, ref_rdp), rel=1e-6)


def test_amplified_calibrate_rdp_meets_the_target_and_is_the_smallest():
    spec = acct.BandMfAmplifiedPrivacy(AZ, AQ, AR, AP, bands=2)

    def eps(z):  # the run's event, built here
        return _rdp(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(AQ, dpa.GaussianDpEvent(z)), 2), DELTA)
    z = spec.calibrate(0.5, DELTA, "rdp")["noise_multiplier"]
    assert eps(z) <= 0.5 < eps(z * (1 - 2e-4))


def test_amplified_refuses_bands_above_the_period_and_replace_one():
    with pytest.raises(ValueError, match="bands=5 must be <= the cyclic period num_bins=4"):
        acct.BandMfAmplifiedPrivacy(AZ, AQ, AR, 4, bands=5)
    with pytest.raises(ValueError, match="neighboring='replace-one'"):
        acct.BandMfAmplifiedPrivacy(AZ, AQ, AR, AP, bands=2, neighboring="replace-one")


# -- BandMfEvent.spec: which guarantee a plan gets ---------------------------------------------------------------

def _plan(selection, neighboring=Neighboring.REPLACE_ONE, group_size=1, num_rounds=25):
    return types.SimpleNamespace(selection=selection, label="dp-sgd", clip=types.SimpleNamespace(
        neighboring=neighboring), group_size=group_size, num_rounds=num_rounds)


def _event(z=2.0, bands=3):
    return acct.BandMfEvent(types.SimpleNamespace(noise_multiplier=z, field="noise_multiplier"), bands)


ONE_PASS = SelectionEvent("one-pass", (100, 120), 10, "record")


def test_one_pass_plan_is_multi_epoch_at_the_smallest_silos_separation():
    # T = floor(n_min / B) = floor(100 / 10) = 10 rounds between a record's participations; k = ceil(25 / 10) = 3;
    # a group of g = 2 records: sens = 2 sqrt(3)
    spec = _event().spec(_plan(ONE_PASS, group_size=2))
    assert isinstance(spec, acct.BandMfPrivacy)
    assert spec.strategy_sensitivity == pytest.approx(2 * math.sqrt(3), rel=1e-15)
    assert (spec.noise_multiplier, spec.num_rounds, spec.bands, spec.min_sep, spec.neighboring, spec.privacy_unit) == (
        2.0, 25, 3, 10, "replace-one", "record")


def test_one_pass_plan_refusals():
    with pytest.raises(ValueError, match=r"noise_multiplier=\(1.0, 2.0\) must be one value"):
        _event(z=(1.0, 2.0)).spec(_plan(ONE_PASS))
    with pytest.raises(ValueError, match="sampling='poisson'"):
        _event().spec(_plan(SelectionEvent("poisson", (100,), 10, "record")))
    with pytest.raises(ValueError, match="one batch size"):
        _event().spec(_plan(SelectionEvent("one-pass", (100, 120), (10, 12), "record")))
    with pytest.raises(ValueError, match="one batch size"):
        _event().spec(_plan(SelectionEvent("one-pass", (100,), None, "record")))
    with pytest.raises(ValueError, match="batch_size=150 must be <= the smallest silo size 100"):
        _event().spec(_plan(SelectionEvent("one-pass", (100, 200), 150, "record")))
    # 4 bands but only floor(100 / 30) = 3 rounds between participations: the separated bound does not hold
    with pytest.raises(ValueError, match=r"bands=4 must be <= the rounds between a record's participations, 3"):
        _event(bands=4).spec(_plan(SelectionEvent("one-pass", (100,), 30, "record")))


def test_zero_noise_plans_are_not_private():
    spec = _event(z=0.0).spec(_plan(ONE_PASS))
    assert isinstance(spec, NoPrivacy) and (spec.neighboring, spec.privacy_unit) == ("replace-one", "record")
    binned = BinnedSelectionEvent("min-separation", (100,), 10, (5,))
    spec = _event(z=0.0).spec(_plan(binned, neighboring=Neighboring.ADD_REMOVE))
    assert isinstance(spec, NoPrivacy) and spec.neighboring == "add-remove"
    assert spec.epsilon(1e-5).epsilon == math.inf


def test_min_separation_plan_is_multi_epoch_at_the_period():
    # period p = min(5, 6) = 5: k = ceil(25 / 5) = 5, sens = sqrt(5)
    sel = BinnedSelectionEvent("min-separation", (100, 120), 10, (5, 6))
    spec = _event().spec(_plan(sel, neighboring=Neighboring.ADD_REMOVE))
    assert isinstance(spec, acct.BandMfPrivacy)
    assert spec.strategy_sensitivity == pytest.approx(math.sqrt(5), rel=1e-15)
    assert (spec.min_sep, spec.sampling, spec.neighboring) == (5, "min-separation", "add-remove")


def test_cyclic_poisson_plan_is_amplified_with_its_overflow_charge():
    # groups of ceil(100 / 4) = 25 and ceil(120 / 5) = 24 records at rates 0.2 / 0.1, capacity 9:
    # overflow p = R * sum_i P(Bin(g_i, q_i) > 9) (union bound over rounds and silos)
    sel = BinnedSelectionEvent("cyclic-poisson", (100, 120), 4, (4, 5), rates=(0.2, 0.1), capacity=9)
    spec = _event().spec(_plan(sel, neighboring=Neighboring.ADD_REMOVE))
    assert isinstance(spec, BinnedPrivacy) and spec.sampling == "cyclic-poisson"
    want = 25 * (stats.binom.sf(9, 25, 0.2) + stats.binom.sf(9, 24, 0.1))
    assert spec.overflow_probability == pytest.approx(want, rel=1e-12)
    amp = spec.base
    assert isinstance(amp, acct.BandMfAmplifiedPrivacy)
    # the worst silo: the largest rate, the shortest period
    assert (amp.noise_multiplier, amp.sampling_rate, amp.num_rounds, amp.period, amp.bands) == (2.0, 0.2, 25, 4, 3)


def test_binned_plan_refusals():
    sel = BinnedSelectionEvent("cyclic-poisson", (100,), 4, (4,), rates=(0.2,))
    with pytest.raises(ValueError, match="sampling='balls-in-bins' with BandMF noise"):
        _event().spec(_plan(BinnedSelectionEvent("balls-in-bins", (100,), 10, (10,))))
    with pytest.raises(ValueError, match="bands=5 must be <= the cyclic period num_bins=4"):
        _event(bands=5).spec(_plan(sel, neighboring=Neighboring.ADD_REMOVE))
    derived = BinnedSelectionEvent("cyclic-poisson", (100,), 4, (4,), rates=(0.2,), size_derived=True)
    with pytest.raises(ValueError, match="read from the data set's size"):
        _event().spec(_plan(derived, neighboring=Neighboring.ADD_REMOVE))
    with pytest.raises(ValueError, match="neighboring='replace-one', group_size=1"):
        _event().spec(_plan(sel, neighboring=Neighboring.REPLACE_ONE))
    with pytest.raises(ValueError, match="neighboring='add-remove', group_size=2"):
        _event().spec(_plan(sel, neighboring=Neighboring.ADD_REMOVE, group_size=2))
