"""Every branch of ``dpjax.accounting.truncated_poisson`` reached by a test that can fail, and every field of its
report pinned (issue 42, items 1 and 4).

Chua et al., "Scalable DP-SGD: Shuffling vs. Poisson Subsampling" (NeurIPS 2024), Sec. 4: truncating a Poisson batch
at capacity B costs ``delta = delta_P(eps) + (1 + e^eps) R Pr[Bin(n + 1, q) > B]``. Here ``delta_P`` is dp_accounting's
PLD of the Poisson-subsampled Gaussian composed in the test and the tail is scipy's binomial survival function.
"""

from __future__ import annotations

import math
import re

import dp_accounting as dpa
import pytest
from scipy import stats

from dpjax.accounting import truncated_poisson as tp

pytestmark = pytest.mark.privacy

N, Q, R, Z, D = 2000, 0.02, 50, 1.5, 1e-5  # eps ~ 0.46 at delta 1e-5 without truncation


@pytest.fixture(scope="module")
def pld():
    acc = dpa.pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(Q, dpa.GaussianDpEvent(Z)), R))
    return acc


def _eta(b):  # R Pr[Bin(n + 1, q) > B]: the union bound over rounds on the data set or its add/remove neighbour
    return R * stats.binom.sf(b, N + 1, Q)


def test_report_is_the_smallest_eps_whose_two_terms_fit_and_every_field(pld):
    b = 78  # R Pr = 1.2e-6: with the (1 + e^eps) factor the truncation takes ~30 % of delta, eps must move
    rep = tp.truncated_poisson_report(Z, Q, N, b, R, D)
    eta = _eta(b)

    def total(e):
        return pld.get_delta(e) + (1 + math.exp(e)) * eta
    assert total(rep.epsilon) <= D * (1 + 1e-9)  # certified
    assert total(rep.epsilon * (1 - 1e-2)) > D  # and (to 1 %) the smallest such eps: the fixed point did move
    assert rep.epsilon > pld.get_epsilon(D) * (1 + 1e-2)
    assert (rep.delta, rep.accountant, rep.sampling, rep.neighboring, rep.unit, rep.noise_std) == (
        D, "pld+truncation", "truncated-poisson", "add-remove", "record", Z)
    assert rep.notes[0] == f"truncated Poisson: q = {Q:g}, capacity B = {b}, {R} rounds, n <= {N}"
    poisson, trunc, rpr = map(float, re.fullmatch(
        r"delta = poisson (\S+) \+ truncation (\S+) \(\(1 \+ e\^eps\) R Pr\[Bin\(n\+1, q\) > B\], R Pr = (\S+)\)",
        rep.notes[1]).groups())
    assert poisson == pytest.approx(pld.get_delta(rep.epsilon), rel=1e-3)  # printed to 4 digits
    assert trunc == pytest.approx((1 + math.exp(rep.epsilon)) * eta, rel=1e-3)
    assert rpr == pytest.approx(eta, rel=1e-3)


def test_truncation_term_that_outgrows_delta_at_the_moved_eps_is_refused():
    # B = 76: R Pr = 4.9e-6 < delta / 2 passes the first check, but at eps >= eps(delta) = 0.45 (the untruncated
    # run's) the charge (1 + e^eps) R Pr >= 2.5 x 4.9e-6 > delta = 1e-5: no eps certifies this capacity
    eta = _eta(76)
    assert 2 * eta < D < (1 + math.exp(0.45)) * eta
    with pytest.raises(ValueError, match=r"capacity=76: the truncation term .* exceeds delta=1e-05"):
        tp.truncated_poisson_report(Z, Q, N, 76, R, D)
