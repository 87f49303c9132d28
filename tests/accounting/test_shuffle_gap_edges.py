"""Bounded work in `shuffle_gap` at extreme sizes (issue #39's battery: epochs = 10^6 and n = 10^15 ran > 10 s).

The Poisson number falls back to dp_accounting's RDP where the PLD's cost is unbounded (steps > PLD_MAX_STEPS, or a
large epsilon); the multi-epoch lower bound composes at most MAX_COMPOSED_EPOCHS epochs (a longer run's first epochs
are a post-processing of it, so their bound is still a lower bound). Each case runs under an alarm, so the old
behaviour fails instead of hanging the suite."""

import math

import pytest

from dpjax.accounting import shuffle_gap as sg
from dpjax.accounting import shuffle_lower_bound as lb
from tests._timing import within

pytestmark = pytest.mark.privacy

LIMIT_S = 30  # about 1 s on an idle machine; x30 for the shared 2-core test machine
_within = within


def _rdp(z, q, steps, delta):
    import dp_accounting as dpa

    acc = dpa.rdp.RdpAccountant()
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), steps))
    return acc.get_epsilon(delta)


def test_a_million_epochs_answers_with_rdp_and_a_capped_lower_bound():
    sigma, b, n, e, d = 1.0, 100, 10_000, 10**6, 1e-5
    with _within(LIMIT_S):
        g = sg.shuffle_gap(sigma, b, n, e, d)
    # replace-one: multiplier std / clip = 2 sigma, T E = 10^8 steps at q = b / n, beyond the PLD's limit
    assert g.poisson.epsilon == _rdp(2 * sigma, b / n, (n // b) * e, d)
    assert "dp_accounting rdp" in g.poisson.method
    assert f"first {lb.MAX_COMPOSED_EPOCHS} epochs" in g.lower_bound.method
    # a lower bound: at least the bound of fewer epochs (cheap to compute), never above the certificate
    assert lb.shuffle_epsilon_lower_bound(2 * sigma, n // b, 1000, d, pair="best-replace-one") \
        <= g.lower_bound.epsilon <= g.certified.epsilon


def test_the_lower_bound_beyond_the_cap_is_that_of_the_first_epochs(monkeypatch):
    monkeypatch.setattr(lb, "MAX_COMPOSED_EPOCHS", 50)  # the rule at a small cap (the real one: the test above)
    with _within(LIMIT_S):
        capped = lb.shuffle_epsilon_lower_bound(2.0, 10, 10**7, 1e-5)
        first = lb.shuffle_epsilon_lower_bound(2.0, 10, 50, 1e-5)
        fewer = lb.shuffle_epsilon_lower_bound(2.0, 10, 20, 1e-5)
        delta_capped = lb.shuffle_delta_lower_bound(2.0, 10, 10**7, 1.0)
        delta_first = lb.shuffle_delta_lower_bound(2.0, 10, 50, 1.0)
    assert capped == first and fewer < first < math.inf
    assert delta_capped == delta_first and 0 < delta_capped <= 1
    with pytest.raises(ValueError, match=r"epochs=51 must be <= 50"):
        lb.multi_epoch_pld(2.0, 10, 51)  # the PLD itself claims E epochs: refused, not capped


def test_a_huge_data_set_answers_and_says_rdp_underflows():
    d = 1e-5
    with _within(LIMIT_S):
        g = sg.shuffle_gap(1.0, 10**5, 10**15, 1, d)  # T = 10^10 steps in the one epoch, q = 1e-10
    assert 0 < g.certified.epsilon < math.inf
    assert g.poisson.epsilon == _rdp(2.0, 1e-10, 10**10, d)
    if g.poisson.epsilon == 0.0:  # dp_accounting's RDP at q = 1e-10: the report must not pass 0 off as an epsilon
        assert "not an epsilon" in g.poisson.method
    assert 0.0 <= g.lower_bound.epsilon <= g.certified.epsilon


def test_a_large_epsilon_uses_rdp_and_a_paper_sized_one_the_pld():
    # z = 1, q = 0.5, 2000 steps: RDP's epsilon ~ hundreds (the PLD's support, hence its cost, grows with it)
    z, b, n, steps, d = 1.0, 50, 100, 2000, 1e-5
    rdp = _rdp(z, b / n, steps, d)
    assert rdp > sg.PLD_MAX_EPSILON
    with _within(LIMIT_S):
        assert sg.poisson_epsilon_reported(z, b, n, steps, d) == rdp
    assert sg.poisson_accountant(z, steps, rdp) == "rdp"
    assert sg.poisson_accountant(2.0, 500, 5.0) == "pld"
    assert sg.poisson_accountant(2.0, sg.PLD_MAX_STEPS + 1) == "rdp"


def test_the_rdp_fallback_logs_nothing(caplog):
    import logging

    # q = 0.5 at z = 1: dp_accounting's fractional-order series does not converge at the low orders (one absl WARNING
    # each when called directly)
    with caplog.at_level(logging.WARNING):
        sg.poisson_epsilon_reported(1.0, 50, 100, 2000, 1e-5)
    assert not [r for r in caplog.records if "failed to converge" in r.getMessage()]
