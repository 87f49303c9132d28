"""Exact hockey-stick divergences (dpjax.auditing.exact) and the P_1D exact comparison."""

import math

import numpy as np
import pytest

from dpjax.auditing import exact
from dpjax.auditing.mechanisms import DELTA, build_audit


def test_randomized_response_closed_form():
    """Randomised response with parameter e0: delta(e) = (e^e0 - e^e) / (1 + e^e0) for e < e0,
    so the exact eps at delta is log(e^e0 - delta (1 + e^e0))."""
    e0 = 1.5
    p = np.array([math.exp(e0), 1.0]) / (1 + math.exp(e0))
    q = p[::-1].copy()
    assert exact.hockey_stick(p, q, e0) == pytest.approx(0.0, abs=1e-15)
    for e in (0.0, 0.7, 1.2):
        assert exact.hockey_stick(p, q, e) == pytest.approx((math.exp(e0) - math.exp(e)) / (1 + math.exp(e0)))
    for delta in (1e-3, 0.1):
        assert exact.exact_epsilon(p, q, delta) == pytest.approx(math.log(math.exp(e0) - delta * (1 + math.exp(e0))),
                                                                 abs=1e-8)


def test_shifted_binomial_pmfs_sum_to_one_and_shift():
    p, q = exact.shifted_binomial_pmfs(30, 0.3, 4)
    assert len(p) == 35
    assert p.sum() == pytest.approx(1.0) and q.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(q[4:], p[:-4])
    big_p, big_q = exact.shifted_binomial_pmfs(5_000_000, 0.5, 20)  # cut to +-40 sd: still all the mass
    assert len(big_p) < 100_000
    assert big_p.sum() == pytest.approx(1.0, abs=1e-12) and big_q.sum() == pytest.approx(1.0, abs=1e-12)


def test_p1d_certificate_holds_exactly():
    """P_1D on the worst-case pair: the exact delta at the certified eps is <= delta and the
    exact eps at delta is below the certified one (Lemma 3.1 is valid, and loose)."""
    audit = build_audit("p1d")
    ex = audit.exact()
    assert ex["delta_at_certified_epsilon"] <= DELTA
    assert 0 < ex["epsilon"] < audit.certificate.epsilon
    assert ex["epsilon"] < ex["half_noise_epsilon"]
