"""Branches of ``dpjax.accounting.privacy_spec`` (the specs every family's ``privacy(...)`` returns) reached by tests
that can fail (issue 42, item 1): refusals of compositions that would certify nothing, calibration of several
schedules at fixed ratios, and the per-silo (ISRL-DP) guarantee's worst silo.

Expected values: full-batch Gaussian releases compose to mu-GDP with mu^2 = sum_i R_i (Delta / sigma_i)^2 (Dong, Roth
& Su 2022, Cor. 3.3; Delta = 2 s under replace-one), whose exact epsilon is Balle & Wang's (2018, Thm 8) root,
computed here with mpmath.
"""

from __future__ import annotations

import math

import mpmath
import pytest

from dpjax.accounting import privacy_spec as ps
from dpjax.accounting.schedules import GaussianSchedule

pytestmark = pytest.mark.privacy

S, N, DELTA = 0.5, 100, 1e-5  # sensitivity 2 s = 1


@pytest.fixture(autouse=True)
def _high_precision():
    with mpmath.workdps(50):  # the closed form cancels (Phi(a) - e^eps Phi(b)); restored after each test
        yield


def _delta(mu, e):
    return mpmath.ncdf(mu / 2 - e / mu) - mpmath.exp(e) * mpmath.ncdf(-mu / 2 - e / mu)


def _exact_eps(mu, delta):
    lo, hi = mpmath.mpf(0), mpmath.mpf(mu * mu + 40 * mu)
    for _ in range(150):
        e = (lo + hi) / 2
        lo, hi = (e, hi) if _delta(mu, e) > delta else (lo, e)
    return float(hi)


def _largest_mu(eps, delta):
    lo, hi = mpmath.mpf("1e-6"), mpmath.mpf(50)
    for _ in range(150):
        m = (lo + hi) / 2
        lo, hi = (m, hi) if _delta(m, eps) <= delta else (lo, m)
    return float(lo)


def _full(sigma, steps, **kw):
    return GaussianSchedule(sigma, S, "full", N, None, steps, **kw)


def test_gaussian_privacy_refuses_compositions_that_certify_nothing():
    with pytest.raises(ValueError, match=r"schedules=\(\) must contain at least one GaussianSchedule"):
        ps.GaussianPrivacy(())
    with pytest.raises(ValueError, match="schedules contains 3; expected GaussianSchedule"):
        ps.GaussianPrivacy((3,))
    with pytest.raises(ValueError, match=r"noise_fields=\('a',\) must name one field per schedule \(2\)"):
        ps.GaussianPrivacy((_full(1.0, 1), _full(1.0, 1)), ("a",))
    with pytest.raises(ValueError, match=r"schedules mix neighbouring relations \['add-remove', 'replace-one'\]"):
        ps.GaussianPrivacy((_full(1.0, 1), _full(1.0, 1, neighboring="add-remove")), ("a", "b"))
    with pytest.raises(ValueError, match=r"schedules mix privacy units"):
        ps.GaussianPrivacy((_full(1.0, 1), _full(1.0, 1, unit="user")), ("a", "b"))


def test_gaussian_shorthand_broadcasts_one_field():
    one = ps.gaussian(_full(2.0, 3))
    assert one.schedules == (_full(2.0, 3),) and one.noise_fields == ("noise_std",)
    two = ps.gaussian([_full(2.0, 3), _full(1.0, 1)], "sigma")
    assert two.noise_fields == ("sigma", "sigma")
    assert ps.gaussian([_full(2.0, 3), _full(1.0, 1)], ["x", "y"]).noise_fields == ("x", "y")


def test_calibrating_several_schedules_keeps_their_ratio():
    # sigma_a = 1 (4 releases), sigma_b = 2 (4 releases): scaled by f, mu(f) = sqrt(4 / f^2 + 4 / (4 f^2)) = sqrt(5) / f;
    # the smallest f meeting eps = 1 is sqrt(5) / mu*, mu* the largest mu with delta(1; mu) <= delta
    spec = ps.GaussianPrivacy((_full(1.0, 4), _full(2.0, 4)), ("a", "b"))
    f = math.sqrt(5) / _largest_mu(1.0, DELTA)
    got = spec.calibrate(1.0, DELTA, "gdp")
    assert set(got) == {"a", "b"}
    assert got["b"] == pytest.approx(2 * got["a"], rel=1e-12)  # the ratio kept
    assert f * (1 - 1e-9) <= got["a"] <= f * (1 + 2e-3)  # the scale's rtol is 1e-3
    with pytest.raises(ValueError, match=r"b=0.0 must be > 0: with several schedules"):
        ps.GaussianPrivacy((_full(1.0, 4), _full(0.0, 4)), ("a", "b")).calibrate(1.0, DELTA, "gdp")


def test_per_silo_guarantee_is_the_worst_silo_and_calibrates_each():
    # silo 0: sigma 3, 4 releases (mu = 2/3); silo 1: sigma 2, 4 releases (mu = 1): the run is silo 1's guarantee
    silos = (ps.gaussian(_full(3.0, 4)), ps.gaussian(_full(2.0, 4)))
    spec = ps.PerSiloPrivacy(silos)
    rep = spec.epsilon(DELTA, "gdp")
    assert rep.epsilon == pytest.approx(_exact_eps(1.0, DELTA), rel=1e-8)
    assert rep.notes[-1] == "largest of 2 per-silo guarantees (silo 1)"
    assert (spec.neighboring, spec.unit) == ("replace-one", "record")
    assert spec.dp_event(1) == silos[1].dp_event()
    # each silo to the target on its own: sigma_i = sqrt(4) * 1 / mu*
    stds = spec.calibrate(1.0, DELTA, "gdp")["noise_stds"]
    want = 2.0 / _largest_mu(1.0, DELTA)
    assert len(stds) == 2 and all(want * (1 - 1e-9) <= x <= want * (1 + 2e-6) for x in stds)
    with pytest.raises(ValueError, match=r"silos=\(\) must contain at least one silo's GaussianPrivacy"):
        ps.PerSiloPrivacy(())
    with pytest.raises(ValueError, match="silos mix neighbouring relations or units"):
        ps.PerSiloPrivacy((ps.gaussian(_full(1.0, 1)), ps.gaussian(_full(1.0, 1, neighboring="add-remove"))))


def test_dp_event_relation_must_be_one_accountants():
    import dp_accounting as dpa

    # replace-one full batch: its event carries the doubled sensitivity, composed under add/remove; replace-one
    # Poisson: dp_accounting's REPLACE_ONE accountant. No single accountant composes both
    full, poisson = _full(1.0, 2), GaussianSchedule(1.0, S, "poisson", N, 10, 2)
    assert ps.gaussian(full).dp_neighboring_relation is dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    with pytest.raises(ValueError, match=r"relations \['ADD_OR_REMOVE_ONE', 'REPLACE_ONE'\]: no one dp_accounting"):
        ps.gaussian([full, poisson]).dp_neighboring_relation


def test_tree_aggregation_event_and_its_listing_limit():
    import dp_accounting as dpa

    # epochs of 4, 4 and 3 leaves; replace-one full batch: z = sigma / (g * 2 s) = 1.5
    spec = ps.TreeAggregationPrivacy((_full(1.5, 11),), ("noise_std",), tree_counts=((4, 2), (3, 1)))
    assert spec.step_counts == (4, 4, 3)
    assert spec.dp_event() == dpa.ComposedDpEvent([
        dpa.SelfComposedDpEvent(dpa.SingleEpochTreeAggregationDpEvent(1.5, 4), 2),
        dpa.SingleEpochTreeAggregationDpEvent(1.5, 3)])
    assert spec.dp_neighboring_relation is dpa.NeighboringRelation.REPLACE_SPECIAL
    zero = ps.TreeAggregationPrivacy((_full(0.0, 4),), ("noise_std",), tree_counts=((4, 1),))
    assert zero.dp_event() == dpa.NonPrivateDpEvent()
    huge = ps.TreeAggregationPrivacy((_full(1.0, 4),), ("noise_std",), tree_counts=((4, 10**6 + 1),))
    with pytest.raises(ValueError, match=r"step_counts of 1000001 epochs is not listed one by one"):
        huge.step_counts
