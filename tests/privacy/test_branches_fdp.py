"""Branches of ``dpjax.accounting.fdp`` (the f-DP toolkit behind the batch-clipping certificates) reached by tests
that can fail (issue 42, item 1). Expected values: the Gaussian trade-off G_mu(a) = Phi(Phi^{-1}(1 - a) - mu) and its
delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu) (Dong, Roth & Su 2022, Def. 2.6 and Cor. 2.13), evaluated
with mpmath; the delta of a Gaussian mixture sum_c q_c delta_{mu_c}(eps) (+ the dropped mass) by hand.
"""

from __future__ import annotations

import math

import mpmath
import pytest

from dpjax.accounting import fdp

pytestmark = pytest.mark.privacy


@pytest.fixture(autouse=True)
def _high_precision():
    with mpmath.workdps(50):  # the closed form cancels; restored after each test
        yield


def _delta(mu, e):
    return float(mpmath.ncdf(mu / 2 - e / mu) - mpmath.exp(e) * mpmath.ncdf(-mu / 2 - e / mu))


def test_delta_from_the_gaussian_tradeoff_is_the_closed_form():
    for mu, eps in [(1.0, 0.5), (2.0, 1.0), (0.5, 0.1)]:
        got = fdp.delta_from_tradeoff(lambda a, mu=mu: fdp.tradeoff_gaussian(mu, a), eps)
        assert got == pytest.approx(_delta(mu, eps), rel=1e-7)
    # a one-point grid (a = 0 only): sup over {0} of 1 - f(0) = 1 - G_mu(0) = 0, no refinement interval
    assert fdp.delta_from_tradeoff(lambda a: fdp.tradeoff_gaussian(1.0, a), 0.5, grid=1) == 0.0


def test_epsilon_from_tradeoff_ends_and_root():
    assert fdp.epsilon_from_tradeoff(lambda e: 1e-9, 1e-5) == 0.0  # already (0, delta)-DP
    assert fdp.epsilon_from_tradeoff(lambda e: 0.5, 1e-5) == math.inf  # never reaches delta
    got = fdp.epsilon_from_tradeoff(lambda e: _delta(1.0, e), 1e-5)
    assert _delta(1.0, got) <= 1e-5 < _delta(1.0, got * (1 - 1e-9))


def test_mixture_delta_and_epsilon_by_hand_and_refusals():
    law = {0.0: 0.5, 1.0: 0.3, 2.0: 0.2}  # the mu = 0 component contributes no delta
    want = 0.3 * _delta(1.0, 1.0) + 0.2 * _delta(2.0, 1.0) + 1e-7
    assert fdp.mixture_delta(law, 1.0, 1e-7) == pytest.approx(want, rel=1e-9)
    with pytest.raises(ValueError, match=r"law=\{\} must be a non-empty mapping"):
        fdp.mixture_delta({}, 1.0)
    with pytest.raises(ValueError, match=r"law probabilities sum to 1.2 > 1"):
        fdp.mixture_delta({1.0: 0.6, 2.0: 0.6}, 1.0)
    with pytest.raises(ValueError, match=r"delta=1e-05 must exceed the dropped probability mass 2e-05"):
        fdp.mixture_epsilon({1.0: 1.0}, 1e-5, 2e-5)


def test_tradeoff_edge_forms():
    # a law with only the mu = 0 atom: identical outputs, f(a) = 1 - a
    assert fdp.mixture_tradeoff({0.0: 1.0}, 0.3) == pytest.approx(0.7, rel=1e-15)
    # beta* of f^L with l = 1: G_mu(0) - 1 - 0 = 0, the root is 0
    assert fdp.f_lower_beta_star(1.0, 1.0) == 0.0
    with pytest.raises(ValueError, match="u=1.0 must be < 1"):
        fdp.f_upper(1.0, 1.0, 0.5)
