"""PVEC parameters, user-level kappa/sigma, shuffle amplification, conversions, DIFF2 RDP — spec vectors."""

import math

import numpy as np
import pytest

from dpjax.accounting import conversions, diff2, pvec, shuffle, user_level
from dpjax.accounting.gdp import gaussian_mechanism_sigma

PVEC = [  # eps, delta, d, n, paper eps_hat, g, b, std, opt eps_hat, g, b, std, ratio paper, ratio opt
    (1, 1e-5, 10, 1000, 0.0149, 32, 1.21e7, 3442, 0.1526, 32, 1.16e5, 336, 461, 45),
    (1, 1e-5, 100, 1000, 0.0138, 32, 1.62e7, 3978, 0.1421, 100, 1.50e6, 387, 533, 52),
    (4, 1e-6, 50, 10000, 0.0527, 100, 1.19e6, 1092, 0.5199, 100, 1.23e4, 111, 458, 46),
    (15, 1e-6, 10, 1000, 0.2070, 32, 7.28e4, 267, 1.3483, 32, 1.72e3, 41, 343, 53),
]


@pytest.mark.parametrize("row", PVEC)
def test_pvec_table(row):
    e, d, dim, n, pe, pg, pb, ps, oe, og, ob, os_, pr, orat = row
    p = pvec.pvec_params(e, d, n, dim, "paper")
    assert p.eps_hat == pytest.approx(pe, abs=1e-4) and p.g == pg and p.b == pytest.approx(pb, rel=5e-3)
    assert pvec.pvec_sum_std(p) == pytest.approx(ps, rel=2e-3) and round(pvec.pvec_gaussian_ratio(p)) == pr
    assert p.p < 0.5
    o = pvec.pvec_params(e, d, n, dim, "lemma_opt")
    assert o.eps_hat == pytest.approx(oe, abs=1e-4) and o.g == og and o.b == pytest.approx(ob, rel=5e-3)
    assert pvec.pvec_sum_std(o) == pytest.approx(os_, rel=3e-3) and round(pvec.pvec_gaussian_ratio(o)) == orat
    # lemma_opt guarantee chain: sqrt(2 ln(1/gamma) S) eps_hat + c_e S eps_hat^2 <= eps
    s = 4 * dim / o.g**2 + 4 * math.sqrt(dim) / o.g + 1
    em = o.eps_hat * (2 / o.g + 1)
    assert math.sqrt(2 * math.log(1 / o.delta_hat) * s) * o.eps_hat + math.expm1(em) / em * s * o.eps_hat**2 <= e
    # paper chain: 18 eps_hat^2 + 6 eps_hat sqrt(ln(1/gamma)) <= eps
    assert 18 * p.eps_hat**2 + 6 * p.eps_hat * math.sqrt(math.log(1 / p.delta_hat)) <= e


def test_pvec_invalid():
    with pytest.raises(ValueError, match="epsilon"):
        pvec.pvec_params(16, 1e-5, 100, 10)
    with pytest.raises(ValueError, match="delta"):
        pvec.pvec_params(1, 0.6, 100, 10)
    with pytest.raises(ValueError, match="mode"):
        pvec.pvec_params(1, 1e-5, 100, 10, "numerical")


USER = [(1, 1e-5, 2.119416e-6, 27.1287, 28, 2.0366e-7, 0.2449, 2349.97, 226),
        (1, 1e-6, 2.119416e-7, 31.7339, 32, 2.7562e-8, 0.2449, 2901.74, 258),
        (0.5, 1e-6, 2.740686e-7, 61.4395, 62, 2.3072e-8, 0.1244, 11153.90, 498),
        (1, 1e-9, 2.119416e-10, 45.5494, 46, 2.5133e-11, 0.2449, 4988.31, 370)]


@pytest.mark.parametrize("row", USER)
def test_user_level_table(row):
    e, d, dp, raw, kappa, p0, pk, sig, nmin = row
    p = user_level.user_level_params(e, d)
    assert p.delta_prime == pytest.approx(dp, rel=1e-6) and p.kappa_raw == pytest.approx(raw, abs=1e-4)
    assert p.kappa == kappa and p.n_min == nmin and p.radius == 4 * kappa
    assert p.sigma_over_delta == pytest.approx(sig, abs=0.006)
    pmf = user_level.tdlap_pmf(p.eps_prime, p.kappa)
    assert pmf[0] == pytest.approx(p0, rel=1e-3) and pmf[kappa] == pytest.approx(pk, abs=1e-4)
    eps_c, delta_c = user_level.user_level_audit(p)
    assert eps_c <= e + 1e-12 and delta_c <= d


def test_user_level_phased_and_composition():
    a = user_level.phased_erm_params(1, 1e-6, 10**4, 10**2)
    assert (a["phases"], a["kappa"], a["radius"], a["n_min"], a["feasible"]) == (20, 719, 2876, 5754, True)
    assert a["sigma_over_delta"] == pytest.approx(1.404e6, rel=1e-3)
    b = user_level.phased_erm_params(1, 1e-6, 10**5, 10**3)
    assert (b["phases"], b["kappa"]) == (27, 986) and b["sigma_over_delta"] == pytest.approx(2.620e6, rel=1e-3)
    assert not user_level.phased_erm_params(1, 1e-6, 10**3, 10**3)["feasible"]
    assert user_level.compose_user_level([(0.5, 1e-6, "a"), (0.5, 1e-6, "a"), (0.7, 1e-7, "b")]) == pytest.approx((1.0, 2e-6))
    with pytest.raises(ValueError, match="epsilon"):
        user_level.user_level_params(1.5, 1e-5)


def test_shuffle_amplification():
    cf = shuffle.fmt_closed_form_epsilon(1.0, 2000, 1e-6)
    num = shuffle.fmt_numerical_epsilon(1.0, 2000, 1e-6)
    assert 0 < num < cf < 1.0  # numerical bound tighter than the closed form, both amplify
    # n = 1: no amplification; delta(eps) of randomized response at eps < eps0
    assert shuffle.fmt_numerical_delta(1.0, 1, 0.0) == pytest.approx((math.e - 1) / (math.e + 1), rel=1e-12)
    assert shuffle.fmt_numerical_delta(1.0, 1, 1.0) == 0.0
    # more reports -> smaller epsilon
    assert shuffle.fmt_numerical_epsilon(1.0, 4000, 1e-6) < num
    with pytest.raises(ValueError, match="eps0"):
        shuffle.fmt_closed_form_epsilon(5.0, 100, 1e-6)
    assert shuffle.subsampled_epsilon(1.0, 0.1) == pytest.approx(math.log1p(0.1 * (math.e - 1)))
    e, d = shuffle.advanced_composition(0.1, 1e-7, 10, 1e-6)
    assert e == pytest.approx(math.sqrt(20 * math.log(1e6)) * 0.1 + 1.0 * math.expm1(0.1)) and d == pytest.approx(2e-6)


def _chain_sigma(epsilon, *args, mode="paper", **kw):
    """The smallest sigma whose chain meets (epsilon, delta), by the one calibration routine."""
    from dpjax.accounting import calibration

    delta = kw["delta"] if "delta" in kw else args[5]  # (lipschitz, n, silos, reports, rounds, delta)

    def eps(sigma):
        try:
            out = shuffle.isrl_shuffle_chain(sigma, *args, mode=mode, **kw)
        except ValueError:
            return math.inf
        return out["epsilon"] if out["delta"] <= delta else math.inf

    return calibration.smallest_scale(eps, epsilon, rtol=1e-6, what="sigma")


def test_isrl_shuffle_chain_calibration():
    args = dict(lipschitz=1.0, n=400, silos=10, reports=1000, rounds=5, delta=1e-5)
    s = _chain_sigma(1.0, mode="paper", **args)
    out = shuffle.isrl_shuffle_chain(s, mode="paper", **args)
    assert out["epsilon"] <= 1.0 and out["delta"] <= 1e-5
    # tight mode (numerical FMT + ln(1 + q(e^eps - 1))) at the paper's sigma is no worse
    tight = shuffle.isrl_shuffle_chain(s, mode="tight", **args)
    assert tight["epsilon"] <= out["epsilon"] and tight["eps_shuffle"] <= out["eps_shuffle"]


def test_conversions():
    assert conversions.isrl_to_user_level(0.01, 1e-8, 100) == pytest.approx((1.0, 100 * math.exp(0.99) * 1e-8))
    e, dt = conversions.isrl_to_user_level(0.01, 1e-8, 100, form="tight")
    assert e == pytest.approx(1.0) and dt == pytest.approx(1e-8 * math.expm1(1.0) / math.expm1(0.01))
    assert dt <= 100 * math.exp(0.99) * 1e-8
    assert conversions.hybrid_isrl_budget(1.0, 1e-5, 100) == pytest.approx((0.01, 2.5e-8))
    assert conversions.isrl_to_central(0.3, 1e-6) == (0.3, 1e-6)
    assert conversions.group_privacy(1.0, 1e-5, 50)[1] == 1.0  # capped, never > 1
    with pytest.raises(ValueError, match="group_size"):
        conversions.group_privacy(1.0, 1e-5, 0)


DIFF2 = [(3, 6, 334, 4.287e-3, 1.915e-2), (3, 20, 100, 2.346e-3, 2.045e-2), (3, 60, 34, 1.368e-3, 2.080e-2),
         (3, 200, 10, 7.418e-4, 2.093e-2), (5, 20, 100, 1.484e-3, 1.293e-2)]


@pytest.mark.parametrize("row", DIFF2)
def test_diff2_reference_values(row):
    eps, t, m, s1, s2 = row
    assert diff2.count_restarts(2000, t) == m
    a, b = diff2.diff2_gd_sigmas(eps, 1e-5, 2000, t, 1651, 10, 1.25, "paper")
    assert a == pytest.approx(s1, rel=1e-3) and b == pytest.approx(s2, rel=1e-3)
    # E4 at alpha_0 meets the target (E5/E6 use exactly eps/2 of RDP)
    a0 = diff2.alpha0(eps, 1e-5)
    rdp = 2 * a0 * m / (1651**2 * 100 * a**2) + 2 * a0 * (2000 - m) / (1651**2 * 100 * b**2)
    assert rdp + math.log(1e5) / (a0 - 1) <= eps + 1e-12


def test_diff2_dpgd_tight_and_bvr():
    assert diff2.dpgd_sigma(3, 1e-5, 2000, 1651, 10) == pytest.approx(9.383e-3, rel=1e-3)
    assert diff2.dpgd_sigma(5, 1e-5, 2000, 1651, 10) == pytest.approx(5.935e-3, rel=1e-3)
    assert diff2.tight_slope(3, 1e-5) == pytest.approx(0.1735, abs=1e-4)
    assert diff2.tight_slope(5, 1e-5) == pytest.approx(0.4496, abs=1e-4)
    s3, ok = diff2.bvr_sigma3_closed_form(3, 1e-5, 2000, 10, 12, 1651, 10)
    assert ok and s3 == pytest.approx(0.6124, abs=1e-4)
    _, _, s3b = diff2.diff2_bvr_sigmas(3, 1e-5, 2000, 20, 10, 12, 1651, 10)
    assert s3b == pytest.approx(0.3551, abs=1e-3)


@pytest.mark.parametrize("row", PVEC)
def test_pvec_epsilon_inverts_the_calculator(row):
    """params -> eps: lemma_opt parameters certify exactly their target under the
    corrected composition; paper-mode parameters certify much less (the printed
    eps_hat = eps/(18 sqrt(ln(1/gamma))) is loose, even with the printed constants)."""
    e, d, dim, n = row[:4]
    o = pvec.pvec_params(e, d, n, dim, "lemma_opt")
    c = pvec.pvec_epsilon(o.g, o.b, o.p, n, dim, d)
    assert c.epsilon == pytest.approx(e, rel=1e-9) and c.eps_hat == pytest.approx(o.eps_hat, rel=1e-12)
    assert c.delta == pytest.approx(d, rel=1e-12) and c.delta_hat == pytest.approx(o.delta_hat, rel=1e-12)
    p = pvec.pvec_params(e, d, n, dim, "paper")
    lemma = pvec.pvec_epsilon(p.g, p.b, p.p, n, dim, d, "lemma").epsilon
    printed = pvec.pvec_epsilon(p.g, p.b, p.p, n, dim, d, "printed").epsilon
    assert lemma < printed < e
    # printed constants: exactly the proof's 18 eps_hat^2 + 6 eps_hat sqrt(ln(1/gamma))
    assert printed == pytest.approx(18 * p.eps_hat**2 + 6 * p.eps_hat * math.sqrt(math.log(1 / p.delta_hat)), rel=1e-9)


def test_pvec_epsilon_monotone_and_invalid():
    o = pvec.pvec_params(1.0, 1e-5, 1000, 10, "lemma_opt")
    base = pvec.pvec_epsilon(o.g, o.b, o.p, 1000, 10, 1e-5).epsilon
    assert pvec.pvec_epsilon(o.g, 2 * o.b, o.p, 1000, 10, 1e-5).epsilon < base  # more noise
    assert pvec.pvec_epsilon(o.g, o.b, o.p, 2000, 10, 1e-5).epsilon < base  # more users, more noise
    assert pvec.pvec_epsilon(o.g, o.b, o.p, 500, 10, 1e-5).epsilon > base
    assert pvec.pvec_epsilon(o.g, o.b, o.p, 1000, 10, 1e-4).epsilon < base  # larger delta
    for kw, name in (({"granularity": 0}, "granularity"), ({"trials": 0}, "trials"), ({"probability": 0.5}, "probability"),
                     ({"n": 0}, "n"), ({"d": 0}, "d"), ({"delta": 0.6}, "delta"), ({"composition": "rdp"}, "composition")):
        args = dict(granularity=o.g, trials=o.b, probability=o.p, n=1000, d=10, delta=1e-5) | kw
        with pytest.raises(ValueError, match=name):
            pvec.pvec_epsilon(**args)
    with pytest.raises(ValueError, match="trials"):  # far too little noise: alpha > 0.79
        pvec.pvec_epsilon(o.g, 1, 0.01, 10, 10, 1e-5)
    with pytest.raises(ValueError, match="granularity"):  # printed composition needs g >= sqrt(d)
        pvec.pvec_epsilon(4, o.b, o.p, 1000, 100, 1e-5, "printed")


def test_isrl_shuffle_chain_generalisations():
    args = dict(sigma=3.0, lipschitz=1.0, n=50, silos=1000, reports=200, rounds=20, delta=1e-6, mode="tight")
    base = shuffle.isrl_shuffle_chain(**args)
    # K = 1 defaults reproduce the paper's split and q = M/(nN)
    assert base["q"] == pytest.approx(200 / (50 * 1000)) and base["delta0"] == pytest.approx(50 * 1000 * 1e-6 / (18 * 20 * 200**2))
    # K records per report: q = M K/(N n) (without replacement), 1 - (1 - 1/n)^K with replacement
    k4 = shuffle.isrl_shuffle_chain(**args, batch_size=4)
    assert k4["q"] == pytest.approx(4 * base["q"]) and k4["epsilon"] > base["epsilon"]
    wr = shuffle.isrl_shuffle_chain(**args, batch_size=4, sampling="with-replacement")
    assert wr["q"] == pytest.approx(200 / 1000 * (1 - (1 - 1 / 50) ** 4)) and wr["epsilon"] < k4["epsilon"]
    # the analyzer knows who reported: no amplification by silo sampling
    pub = shuffle.isrl_shuffle_chain(**args, participation="public")
    assert pub["q"] == pytest.approx(1 / 50) and pub["epsilon"] > base["epsilon"]
    with pytest.raises(ValueError, match="participation"):
        shuffle.isrl_shuffle_chain(**args, participation="secret")
    with pytest.raises(ValueError, match="batch_size"):
        shuffle.isrl_shuffle_chain(**args, batch_size=51)
    # calibration with the same options round-trips
    s = _chain_sigma(1.0, 1.0, 50, 1000, 200, 20, 1e-6, mode="tight", batch_size=2)
    out = shuffle.isrl_shuffle_chain(s, 1.0, 50, 1000, 200, 20, 1e-6, "tight", batch_size=2)
    assert out["epsilon"] <= 1.0 and out["epsilon"] == pytest.approx(1.0, rel=1e-4)


def test_fmt_numerical_tables_are_windowed_but_exact():
    """The (C, k) tables keep only the binomial window (tails <= 1e-24 charged to
    delta): large n is fast and delta matches the full-table value."""
    import time

    t0 = time.perf_counter()
    eps = shuffle.fmt_numerical_epsilon(1.4, 10_000, 1e-8)
    assert time.perf_counter() - t0 < 10.0
    assert 0 < eps < 0.2  # n = 1e4 reports amplify eps0 = 1.4 to ~0.11
    # full-table reference on a small case
    from scipy import stats

    e0, n, e = 1.0, 40, 0.3
    pc, p = math.exp(-e0), math.exp(e0) / (math.exp(e0) + 1)
    ref = 0.0
    for c in range(n):
        k = np.arange(c + 2)
        b = stats.binom.pmf(k, c, 0.5)
        bp = stats.binom.pmf(k - 1, c, 0.5)
        P, Q = p * bp + (1 - p) * b, (1 - p) * bp + p * b
        d = max(np.clip(P - math.exp(e) * Q, 0, None).sum(), np.clip(Q - math.exp(e) * P, 0, None).sum())
        ref += stats.binom.pmf(c, n - 1, pc) * d
    got = shuffle.fmt_numerical_delta(e0, n, e)
    assert ref <= got <= ref + 1e-15
