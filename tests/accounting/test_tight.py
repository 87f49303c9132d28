"""Tight accountants against dp-accounting, prv-accountant, closed forms and spec vectors."""

import math

import dp_accounting as dpa
import numpy as np
import pytest

from dpjax.accounting import GaussianSchedule, calibrate_noise, compute_epsilon
from dpjax.accounting import gdp, isrl
from dpjax.accounting.tight import conditioned_rdp, group_privacy_epsilon

NR = dpa.NeighboringRelation
MNIST = dict(noise_std=1.1, contribution_bound=1.0, sampling="poisson", dataset_size=60000,
             batch_size=256, steps=14062, neighboring="add-remove", unit="record")


def test_issue_vector_rdp_matches_dp_accounting_1e9():
    s = GaussianSchedule(**MNIST)
    acc = dpa.rdp.RdpAccountant()
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(256 / 60000, dpa.GaussianDpEvent(1.1)), 14062))
    ref = acc.get_epsilon(1e-5)
    got = compute_epsilon(s, 1e-5, "rdp").epsilon
    assert got == pytest.approx(ref, rel=1e-9)
    assert got == pytest.approx(2.5966, abs=5e-5)  # reference/environment_and_data.md


def test_issue_vector_pld_within_prv_bounds():
    prv = pytest.importorskip("prv_accountant")
    s = GaussianSchedule(**MNIST)
    got = compute_epsilon(s, 1e-5, "pld").epsilon
    acc = prv.Accountant(noise_multiplier=1.1, sampling_probability=256 / 60000, delta=1e-5,
                         eps_error=0.01, max_compositions=14062)
    lo, est, hi = acc.compute_epsilon(num_compositions=14062)
    assert lo <= got <= hi + 1e-3  # PLD is a pessimistic upper estimate
    assert got == pytest.approx(2.38, abs=0.01)


@pytest.mark.parametrize("sampling,neighboring", [("without-replacement", "replace-one"), ("full", "replace-one"),
                                                  ("full", "add-remove"), ("one-pass", "replace-one"), ("shuffle", "replace-one")])
def test_rdp_matches_dp_accounting_events(sampling, neighboring):
    s = GaussianSchedule(noise_std=0.3, contribution_bound=0.1, sampling=sampling, dataset_size=500,
                         batch_size=None if sampling == "full" else 50, steps=37, neighboring=neighboring)
    sens = 0.2 if neighboring == "replace-one" else 0.1
    if sampling == "without-replacement":
        ev = dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(500, 50, dpa.GaussianDpEvent(0.3 / sens)), 37)
        acc = dpa.rdp.RdpAccountant(neighboring_relation=NR.REPLACE_ONE)
    else:
        count = 37 if sampling == "full" else math.ceil(37 * 50 / 500)
        ev = dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(0.3 / sens), count)
        acc = dpa.rdp.RdpAccountant()
    acc.compose(ev)
    assert compute_epsilon(s, 1e-6, "rdp").epsilon == pytest.approx(acc.get_epsilon(1e-6), rel=1e-9)


def test_deterministic_accountants_against_closed_forms():
    # 4 epochs of a Gaussian with sensitivity 2s: mu = sqrt(4) * 2s / sigma
    s = GaussianSchedule(noise_std=2.0, contribution_bound=0.5, sampling="shuffle", dataset_size=100, batch_size=10, steps=40)
    mu = 2 * 1.0 / 2.0
    exact = dpa.get_epsilon_gaussian(1 / mu, 1e-5)
    assert compute_epsilon(s, 1e-5, "gdp").epsilon == pytest.approx(exact, rel=1e-6)
    assert compute_epsilon(s, 1e-5, "pld").epsilon == pytest.approx(exact, rel=2e-3)
    assert compute_epsilon(s, 1e-5, "pld").epsilon >= exact - 1e-9
    rho = mu**2 / 2
    assert compute_epsilon(s, 1e-5, "zcdp").epsilon == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1e5)), rel=1e-12)
    # zCDP and RDP are looser than exact
    assert compute_epsilon(s, 1e-5, "zcdp").epsilon > exact
    assert compute_epsilon(s, 1e-5, "rdp").epsilon > exact
    assert "no amplification" in " ".join(compute_epsilon(s, 1e-5, "gdp").notes)


def test_pld_replace_one_poisson_is_dominating_pair():
    # replace-one Poisson lies between add/remove with s and add/remove with 2s
    base = dict(noise_std=0.5, contribution_bound=0.5, sampling="poisson", dataset_size=1000, batch_size=20, steps=50)
    rep = compute_epsilon(GaussianSchedule(**base), 1e-6, "pld").epsilon
    ar1 = compute_epsilon(GaussianSchedule(**base, neighboring="add-remove"), 1e-6, "pld").epsilon
    ar2 = compute_epsilon(GaussianSchedule(**{**base, "contribution_bound": 1.0}, neighboring="add-remove"), 1e-6, "pld").epsilon
    assert ar1 < rep < ar2


def test_refusals_name_accountant():
    wor = GaussianSchedule(noise_std=1.0, contribution_bound=1.0, sampling="without-replacement", dataset_size=100, batch_size=10, steps=5)
    with pytest.raises(ValueError, match="accountant='pld'"):
        compute_epsilon(wor, 1e-5, "pld")
    with pytest.raises(ValueError, match="accountant='gdp'"):
        compute_epsilon(wor, 1e-5, "gdp")
    with pytest.raises(ValueError, match="accountant='zcdp'"):
        compute_epsilon(wor.replace(sampling="poisson"), 1e-5, "zcdp")
    with pytest.raises(ValueError, match="accountant"):
        compute_epsilon(wor, 1e-5, "moments")
    with pytest.raises(ValueError, match="delta"):
        compute_epsilon(wor, 1.5, "rdp")
    with pytest.raises(ValueError, match="schedule"):
        compute_epsilon("poisson", 1e-5)


def test_conditioned_rdp_valid_and_loose():
    # For WOR the conditioning bound must dominate the tight Wang-Balle-Kasiviswanathan RDP.
    s = GaussianSchedule(noise_std=2.0, contribution_bound=0.5, sampling="without-replacement", dataset_size=200, batch_size=20, steps=1)
    orders = np.array([2.0, 4.0, 8.0, 16.0])
    acc = dpa.rdp.RdpAccountant(orders=orders, neighboring_relation=NR.REPLACE_ONE)
    acc.compose(s.to_dp_event())
    assert np.all(conditioned_rdp(s, orders) >= acc.rdp - 1e-12)
    # q = 1: the bound is exactly the Gaussian RDP alpha*Delta^2/(2 sigma^2) with Delta = 2s
    full = s.replace(batch_size=200)
    np.testing.assert_allclose(conditioned_rdp(full, orders), orders * 1.0 / (2 * 4.0), rtol=1e-12)
    # with replacement: E over Bin(K, 1/n) computed by brute force at order 2
    wr = s.replace(sampling="with-replacement")
    from scipy import stats
    j = np.arange(21)
    brute = np.log(np.sum(stats.binom.pmf(j, 20, 1 / 200) * np.exp(2 * 1 * (2 * 0.5 * j) ** 2 / (2 * 4.0))))
    assert conditioned_rdp(wr, np.array([2.0]))[0] == pytest.approx(brute, rel=1e-10)
    r = compute_epsilon(wr.replace(steps=100), 1e-5, "rdp")
    assert math.isfinite(r.epsilon) and "conservative" in r.notes[0]


def test_group_privacy_deterministic_exact_and_random_conversion():
    s = GaussianSchedule(noise_std=4.0, contribution_bound=0.5, sampling="full", dataset_size=100, batch_size=None, steps=1)
    g3 = compute_epsilon(s.replace(group_size=3), 1e-5, "gdp").epsilon
    assert g3 == pytest.approx(gdp.gdp_epsilon(3 * 1.0 / 4.0, 1e-5), rel=1e-9)
    # conversion: (eps, delta) group privacy from a pure-eps curve delta(eps)=0 for eps>=1
    assert group_privacy_epsilon(lambda e: 0.0 if e >= 1 else 1.0, 4, 1e-5) == pytest.approx(4.0, rel=1e-6)
    # conversion route dominates the exact deterministic route
    conv = group_privacy_epsilon(lambda e: gdp.gdp_delta(1.0 / 4.0, e), 3, 1e-5)
    assert conv >= g3 - 1e-9


def test_isrl_one_pass_table_spec_3_3():
    # spec §3.3 table (L = K = 1)
    rows = [(1, 1e-5, 19.38, 0.353, 7.46, 9.69), (0.5, 1e-5, 38.76, 0.166, 14.06, 19.38),
            (4, 1e-6, 5.30, 1.657, 2.39, 2.65), (8, 1e-6, 2.65, 3.558, 1.31, 1.32)]
    for eps, delta, paper, exact_eps, exact_sigma, classical in rows:
        sp = isrl.isrl_one_pass_paper_sigma(1.0, 1, eps, delta)
        assert sp == pytest.approx(paper, abs=0.006)
        assert gdp.gaussian_mechanism_epsilon(sp, 2.0, delta) == pytest.approx(exact_eps, abs=6e-4)
        assert gdp.gaussian_mechanism_sigma(eps, delta, 2.0) == pytest.approx(exact_sigma, abs=0.006)
        assert math.sqrt(2 * math.log(1.25 / delta)) * 2 / eps == pytest.approx(classical, abs=0.006)
        # the same through a one-pass schedule
        sch = GaussianSchedule(noise_std=sp, contribution_bound=1.0, sampling="one-pass", dataset_size=100, batch_size=1, steps=100)
        assert compute_epsilon(sch, delta, "gdp").epsilon == pytest.approx(exact_eps, abs=6e-4)
        assert compute_epsilon(sch, delta, "paper").epsilon == pytest.approx(eps, rel=1e-9)


SPEC_3_4 = [  # target, MA K, MA sigma, PLD a/r, PLD rep, RDP WOR, AC K, AC sigma, PLD rep, RDP WOR
    (0.75, 91, 0.0680, 0.296, 0.585, 1.440, 8, 1.7044, 0.019, 0.048),
    (1.5, 129, 0.0340, 0.639, 1.231, 3.190, 15, 0.8522, 0.039, 0.100),
    (3, 182, 0.0170, 1.401, 2.616, 7.522, 29, 0.4261, 0.083, 0.205),
    (6, 257, 0.0085, 3.149, 5.661, 16.63, 58, 0.2130, 0.173, 0.412),
    (12, 363, 0.0043, 7.271, 12.56, 35.74, 115, 0.1065, 0.362, 0.856),
    (18, 444, 0.0028, 11.98, 20.27, 63.24, 173, 0.0710, 0.558, 1.313),
]


@pytest.mark.parametrize("row", SPEC_3_4, ids=[str(r[0]) for r in SPEC_3_4])
def test_isrl_spec_table_3_4(row):
    eps, ma_k, ma_s, pld_ar, pld_rep, rdp_wor, ac_k, ac_s, ac_pld, ac_rdp = row
    n, rounds = 1238, 35
    d = 1 / n**2
    sig, k = isrl.isrl_experiment_calibration(1.0, n, rounds, eps, d)
    assert k == ma_k and sig == pytest.approx(ma_s, abs=5e-5)
    ma = GaussianSchedule(noise_std=sig, contribution_bound=1 / k, sampling="poisson", dataset_size=n, batch_size=k, steps=rounds)
    close = lambda a, b: a == pytest.approx(b, rel=2e-3, abs=1.5e-3)  # noqa: E731  (spec rounds to 3-4 digits)
    assert close(compute_epsilon(ma.replace(neighboring="add-remove"), d, "pld").epsilon, pld_ar)
    assert close(compute_epsilon(ma, d, "pld").epsilon, pld_rep)
    assert close(compute_epsilon(ma.replace(sampling="without-replacement"), d, "rdp").epsilon, rdp_wor)
    assert isrl.isrl_paper_min_batch_size(n, rounds, eps, d) == ac_k
    s_ac = isrl.isrl_paper_sigma(1.0, n, rounds, eps, d)
    assert s_ac == pytest.approx(ac_s, abs=5e-5)
    ac = GaussianSchedule(noise_std=s_ac, contribution_bound=1 / ac_k, sampling="poisson", dataset_size=n, batch_size=ac_k, steps=rounds)
    assert close(compute_epsilon(ac, d, "pld").epsilon, ac_pld)
    wor = ac.replace(sampling="without-replacement")
    assert close(compute_epsilon(wor, d, "rdp").epsilon, ac_rdp)
    assert compute_epsilon(wor, d, "paper").epsilon == pytest.approx(eps, rel=1e-9)
    assert compute_epsilon(ma, d, "paper-experiment").epsilon == pytest.approx(eps, rel=1e-9)


def test_isrl_tight_calibration_spec_3_4_reading():
    # "calibrating sigma to the same target and the same K ... gives sigma = 0.142 (RDP WOR) or 0.059 (PLD Poisson) at 1.5,
    #  and 0.0295 / 0.0130 at 6"
    n, rounds = 1238, 35
    d = 1 / n**2
    for eps, k, rdp_s, pld_s in [(1.5, 15, 0.142, 0.059)]:  # (6, 58, 0.0295, 0.0130) also holds; slow
        base = GaussianSchedule(noise_std=1.0, contribution_bound=1 / k, sampling="without-replacement", dataset_size=n, batch_size=k, steps=rounds)
        s_rdp = calibrate_noise(base, eps, d, "rdp")
        s_pld = calibrate_noise(base.replace(sampling="poisson"), eps, d, "pld")
        assert s_rdp == pytest.approx(rdp_s, rel=0.01)
        assert s_pld == pytest.approx(pld_s, rel=0.02)
        assert s_rdp < isrl.isrl_paper_sigma(1.0, n, rounds, eps, d)  # sigma_tight <= sigma_paper


def test_bisect_threshold_returns_an_evaluated_feasible_point_within_tolerance():
    """calibration.bisect_threshold (shared by fdp.epsilon_from_tradeoff and the group conversion):
    the point returned was evaluated feasible, and the bracket shrank to the tolerance."""
    from dpjax.accounting.calibration import bisect_threshold

    seen = []

    def feasible(x):
        seen.append(x)
        return x * x >= 2.0

    hi = bisect_threshold(feasible, 1.0, 2.0, iterations=200, rtol=1e-12)
    assert hi in seen and hi * hi >= 2.0 and abs(hi - 2.0 ** 0.5) <= 4e-12
    # the iteration cap binds first: three halvings of [1, 2] leave a bracket of width 1/8
    assert bisect_threshold(lambda x: x * x >= 2.0, 1.0, 2.0, iterations=3, rtol=1e-12) == 1.5
