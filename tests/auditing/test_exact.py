"""Exact hockey-stick divergences (dpjax.auditing.exact) and the P_1D exact comparison."""

import math

import numpy as np
import pytest

from dpjax.auditing import exact
from dpjax.auditing.mechanisms import build_audit


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


def test_shuffle_sgd_certificate_holds_exactly():
    """P_SGD with P_vec on one round (P_1D on the canary's coordinate): the exact eps of the
    worst-case pair is below the certified one (Lemma 3.1 is valid, and loose)."""
    audit = build_audit("shuffle-sgd")
    ex = audit.exact()
    assert 0 < ex["epsilon"] < audit.certificate.epsilon
    assert ex["epsilon"] < ex["half_noise_epsilon"]


def test_mixture_pair_epsilon_matches_closed_forms_and_the_pld_accountant():
    """Single components are Gaussian pairs (exact GDP, composed over rounds); the Poisson
    replace-one pair (1-q)N(0) + qN(-+m) is what dp_accounting's PLD analyses (an upper bound with
    pessimistic discretisation), so the two agree to the discretisations."""
    from dpjax.accounting import compute_epsilon, gdp
    from dpjax.accounting.schedules import GaussianSchedule

    assert exact.mixture_pair_epsilon([(1.0, -0.5)], [(1.0, 0.5)], 1, 1e-3) == pytest.approx(
        gdp.gdp_epsilon(1.0, 1e-3), abs=2e-3)
    assert exact.mixture_pair_epsilon([(1.0, -0.25)], [(1.0, 0.25)], 4, 1e-3) == pytest.approx(
        gdp.gdp_epsilon(1.0, 1e-3), abs=2e-3)
    q, m, rounds = 0.3, 0.8, 3
    ours = exact.mixture_pair_epsilon([(1 - q, 0.0), (q, -m)], [(1 - q, 0.0), (q, m)], rounds, 1e-3)
    pld = compute_epsilon(GaussianSchedule(1.0, m, "poisson", 10, 10 * q, rounds), 1e-3, "pld").epsilon
    assert ours == pytest.approx(pld, abs=3e-3)
    # more mass or more shift never lowers epsilon
    assert exact.mixture_pair_epsilon([(1 - q, 0.0), (q, -2 * m)], [(1 - q, 0.0), (q, 2 * m)], rounds, 1e-3) > ours


def test_one_of_two_epsilon_between_its_bounds():
    """The canary in one of two releases (uniformly): less than a sure shift in one release
    (GDP(2s)), more than the first release alone (a post-processing: the pair
    N(0)/2 + N(-+s)/2, ``mixture_pair_epsilon``)."""
    from dpjax.accounting import gdp

    for s in (0.3, 1.0):
        e = exact.one_of_two_epsilon(s, 1e-3)
        first = exact.mixture_pair_epsilon([(0.5, 0.0), (0.5, -s)], [(0.5, 0.0), (0.5, s)], 1, 1e-3)
        assert first < e < gdp.gdp_epsilon(2 * s, 1e-3)


@pytest.mark.privacy
@pytest.mark.slow  # 11 s / 22 s: the mixture-of-Gaussians PLD certificate and two fine exact computations
@pytest.mark.parametrize("name", ["user-level-dpsgd-uls", "user-level-dpsgd-els"])
def test_user_level_certificates_equal_the_exact_epsilon_in_the_limit(name):
    """The catalogue's exact epsilon of the user-level canary pairs sits 7.7e-5 / 9e-5 relative above the
    family's certified PLD epsilon. ``mixture_pair_epsilon`` rounds each round's privacy loss *up* to a
    multiple of ``loss_bin`` (an upper bound, high by at most ``rounds x loss_bin`` in epsilon), so the gap
    must be that discretisation: halving the bin halves it, and the Richardson limit ``2 e(h/2) - e(h)`` of the
    linear error equals the certificate. A certificate below that limit would be a certificate below the
    exact epsilon of the released mechanism (a privacy bug)."""
    from dpjax.auditing.canaries import DELTA

    audit = build_audit(name)
    cert = audit.certificate.epsilon
    rounds, q = audit.details["num_rounds"], audit.details["sampling_rate"]
    m = 1.0 / audit.details["noise_multiplier"]  # the canary unit's shift C over the noise std z C
    k = audit.details["records_per_user"]
    probs = [1 - q, q] if name.endswith("uls") else [math.comb(k, j) * q**j * (1 - q) ** (k - j) for j in range(k + 1)]
    comps = lambda shift: [(p, j * shift) for j, p in enumerate(probs)]  # noqa: E731
    coarse, fine = (exact.mixture_pair_epsilon(comps(0.0), comps(m), rounds, DELTA, cell=h / 5, loss_bin=h)
                    for h in (8e-5, 4e-5))
    assert cert <= fine <= coarse <= cert + rounds * 8e-5  # upper bounds, within their rounding of the certificate
    assert 2 * fine - coarse == pytest.approx(cert, rel=2e-6)
