"""DIFF2 accountant (spec §3, §6 items 15-24)."""

import math

import numpy as np
import pytest

from dpjax.accounting import diff2 as acc
from dpjax.accounting.schedules import Sampling

DELTA = 1e-5
N, P, R = 1651, 10, 2000


@pytest.mark.parametrize("eps,a0", [(3.0, 9), (5.0, 6)])
def test_alpha0(eps, a0):
    assert acc.alpha0(eps, DELTA) == a0


# Spec §3.3 reference table (E5/E6 with u = 1.25; DP-GD with u -> 1).
TABLE = [
    (3.0, 6, 334, 4.287e-3, 1.915e-2),
    (3.0, 20, 100, 2.346e-3, 2.045e-2),
    (3.0, 60, 34, 1.368e-3, 2.080e-2),
    (3.0, 200, 10, 7.418e-4, 2.093e-2),
    (5.0, 20, 100, 1.484e-3, 1.293e-2),
]


@pytest.mark.parametrize("eps,T,m,s1,s2", TABLE)
def test_paper_reference_table(eps, T, m, s1, s2):
    assert acc.count_restarts(R, T) == m
    got1, got2 = acc.diff2_gd_sigmas(eps, DELTA, R, T, N, P, u=1.25, mode="paper")
    assert got1 == pytest.approx(s1, rel=6e-4)
    assert got2 == pytest.approx(s2, rel=6e-4)


def test_dpgd_reference_and_other_datasets():
    assert acc.dpgd_sigma(3.0, DELTA, R, N, P) == pytest.approx(9.383e-3, rel=6e-4)
    assert acc.dpgd_sigma(5.0, DELTA, R, N, P) == pytest.approx(5.935e-3, rel=6e-4)
    assert acc.dpgd_sigma(3.0, DELTA, R, 2938, P) == pytest.approx(5.273e-3, rel=6e-4)
    assert acc.dpgd_sigma(3.0, DELTA, R, 4801, P) == pytest.approx(3.227e-3, rel=6e-4)
    s, none = acc.diff2_gd_sigmas(3.0, DELTA, R, 1, N, P)
    assert none is None and s == acc.dpgd_sigma(3.0, DELTA, R, N, P)
    # DP-GD is the u -> 1 limit of E5 with T = 1
    a0 = acc.alpha0(3.0, DELTA)
    u = 1 + 1e-9
    assert math.sqrt(4 * u * a0 * R / ((N * P) ** 2 * 3.0)) == pytest.approx(s, rel=1e-8)


@pytest.mark.parametrize("eps,T", [(3.0, 6), (3.0, 200), (5.0, 20), (1.0, 7)])
def test_paper_calibration_spends_half_the_budget_at_alpha0(eps, T):
    s1, s2 = acc.diff2_gd_sigmas(eps, DELTA, R, T, N, P)
    a0 = acc.alpha0(eps, DELTA)
    rdp = acc.diff2_rdp(a0, R, T, N, P, s1, s2)
    assert rdp == pytest.approx(eps / 2, rel=1e-12)
    e = acc.diff2_epsilon(R, T, N, P, s1, s2, DELTA, "paper", eps_target=eps)
    assert e <= eps
    assert e == pytest.approx(eps / 2 + math.log(1 / DELTA) / (a0 - 1), rel=1e-12)


def test_round_rdp_is_linear_and_independent_of_C():
    r = acc.rdp_diff2_round(3.0, 0.01, N, P)
    assert r == pytest.approx(2 * 3.0 / (N**2 * P**2 * 0.01**2))
    assert acc.rdp_diff2_round(6.0, 0.01, N, P) == pytest.approx(2 * r)
    # composition is additive over rounds and kinds (E3)
    T = 7
    m = acc.count_restarts(R, T)
    total = acc.diff2_rdp(4.0, R, T, N, P, 0.01, 0.02)
    assert total == pytest.approx(m * acc.rdp_diff2_round(4.0, 0.01, N, P) + (R - m) * acc.rdp_diff2_round(4.0, 0.02, N, P))


def test_tight_closed_form_equals_numerical_minimisation_and_inverse():
    s1, s2 = acc.diff2_gd_sigmas(3.0, DELTA, R, 20, N, P)
    slope = acc.diff2_rdp(2.0, R, 20, N, P, s1, s2) / 2
    alphas = 1 + np.logspace(-3, 3, 200001)
    numeric = np.min(slope * alphas + math.log(1 / DELTA) / (alphas - 1))
    closed = acc.tight_epsilon_from_slope(slope, DELTA)
    assert closed == pytest.approx(numeric, rel=1e-7)
    assert closed <= numeric
    assert closed == pytest.approx(2.937, abs=1e-3)  # spec §3.3: paper sigmas under E7
    for eps in (0.5, 3.0, 5.0, 10.0):
        assert acc.tight_epsilon_from_slope(acc.tight_slope(eps, DELTA), DELTA) == pytest.approx(eps, rel=1e-12)
    assert acc.tight_slope(3.0, DELTA) == pytest.approx(0.1735, rel=3e-4)
    assert acc.tight_slope(5.0, DELTA) == pytest.approx(0.4496, rel=3e-4)


def test_tight_calibration_round_trip():
    rng = np.random.default_rng(0)
    for _ in range(20):
        eps = float(rng.uniform(0.3, 8))
        r = int(rng.integers(10, 3000))
        t = int(rng.integers(1, r + 1))
        n = int(rng.integers(50, 5000))
        p = int(rng.integers(1, 20))
        s1, s2 = acc.diff2_gd_sigmas(eps, DELTA, r, t, n, p, mode="tight")
        got = acc.diff2_epsilon(r, t, n, p, s1, s2, DELTA, "tight")
        assert got <= eps * (1 + 1e-12)
        assert got >= eps - 1e-9


def test_monotonicity():
    a0 = acc.alpha0(3.0, DELTA)
    base = acc.diff2_rdp(a0, R, 20, N, P, 0.003, 0.02)
    assert acc.diff2_rdp(a0, R, 20, N, P, 0.004, 0.02) < base
    assert acc.diff2_rdp(a0, R, 20, N, P, 0.003, 0.03) < base
    assert acc.diff2_rdp(a0, R, 20, N + 1, P, 0.003, 0.02) < base
    assert acc.diff2_rdp(a0, R + 1, 20, N, P, 0.003, 0.02) > base
    # sigma1^2 proportional to ceil(R/T), sigma2^2 to R - ceil(R/T)
    s = {T: acc.diff2_gd_sigmas(3.0, DELTA, R, T, N, P) for T in (6, 20, 60, 200)}
    for T, (s1, s2) in s.items():
        m = acc.count_restarts(R, T)
        assert s1**2 / m == pytest.approx(s[20][0] ** 2 / 100, rel=1e-12)
        assert s2**2 / (R - m) == pytest.approx(s[20][1] ** 2 / 1900, rel=1e-12)


def test_agrees_with_direct_rdp_composition_through_schedules():
    """The algorithm's privacy() schedules composed in dp_accounting equal E3 + Mironov."""
    import jax.numpy as jnp

    from dpjax.algorithms import diff2
    from dpjax.problems import LinearRegression

    s1, s2 = acc.diff2_gd_sigmas(3.0, DELTA, R, 20, N, P)
    alg = diff2.Diff2GD(LinearRegression(2), R)
    hp = diff2.Diff2HParams.create(0.1, restart_interval=20, **alg.noise_multipliers_from_paper(
        [N] * P, sigma_restart=s1, sigma_diff=s2))
    scheds = alg.privacy([N] * P, hp).schedules
    assert [s.steps for s in scheds] == [100, 1900]
    with pytest.raises(ValueError, match="composes 2 schedules"):
        alg.privacy([N] * P, hp).schedule  # a composition has no single schedule
    assert all(s.sampling is Sampling.FULL for s in scheds)
    orders = [1.5, 2.0, 3.0, 5.0, 8.0, 9.0, 12.0, 20.0, 64.0]
    direct = min(acc.diff2_rdp(a, R, 20, N, P, s1, s2) + math.log(1 / DELTA) / (a - 1) for a in orders)
    # (rel 1e-6: the sigmas went through float32 hparams)
    assert acc.compose_epsilon(scheds, DELTA, orders=orders) == pytest.approx(direct, rel=1e-6)
    # default orders: close to the real-alpha optimum E7 and below the paper target
    e = acc.compose_epsilon(scheds, DELTA)
    assert acc.diff2_epsilon(R, 20, N, P, s1, s2, DELTA, "tight") <= e <= 3.0
    assert e == pytest.approx(2.937, rel=2e-3)
    # DP-GD: one schedule of R full-batch rounds
    sd = acc.dpgd_sigma(3.0, DELTA, R, N, P)
    dpgd = diff2.dp_gd(LinearRegression(2), R)
    dp_hp = diff2.Diff2HParams.create(0.1, **dpgd.noise_multipliers_from_paper([N] * P, sigma_restart=sd))
    dp = dpgd.privacy([N] * P, dp_hp).schedules
    assert len(dp) == 1 and dp[0].steps == R
    assert acc.compose_epsilon(dp, DELTA) <= 3.0



# ----------------------------------------------------------------------------- BVR (Lemma B.7, Prop. E.2)
def _gauss(b, s3):
    return lambda j: 2.0 * j / (b * b * s3 * s3)


def test_lemma_b7_properties_and_dp_accounting_cross_check():
    from dp_accounting.rdp import rdp_privacy_accountant as rpa

    b, n, s3 = 32, 1651, 0.516
    base = _gauss(b, s3)
    assert acc.rdp_subsampled_wor_gaussian(9, 0.0, base) == 0.0
    vals = [acc.rdp_subsampled_wor_gaussian(9, g, base) for g in (1e-3, 1e-2, 0.05, 0.2)]
    assert all(x < y for x, y in zip(vals, vals[1:]))
    assert all(v <= base(9) for v in vals)
    e2 = acc.rdp_subsampled_wor_gaussian(9, b / n, base)
    assert e2 == pytest.approx(2.64e-4, rel=2e-3)  # spec §3.1 example
    # small-gamma asymptote gamma^2 alpha min{2(e^{eps2}-1), e^{eps2}}
    g = 1e-4
    asym = g**2 * 9 * min(2 * math.expm1(base(2)), math.exp(base(2)))
    assert acc.rdp_subsampled_wor_gaussian(9, g, base) == pytest.approx(asym, rel=0.02)
    # finite for tiny sigma3 * b (log space)
    assert math.isfinite(acc.rdp_subsampled_wor_gaussian(64, 0.5, _gauss(1, 0.1)))
    # dp_accounting implements the tighter Gaussian-specific form of the same theorem:
    # it must not exceed E2 and be of the same order
    theirs = rpa._compute_rdp_sample_wor_gaussian_scalar(b / n, s3 * b / 2, 9)
    assert theirs <= e2 and theirs > e2 / 10


def test_lemma_b8_inside_and_outside_its_conditions():
    b, n = 32, 1651
    base = _gauss(b, 0.516)  # spec example: conditions fail and the simplified value is smaller than E2
    assert not acc.lemma_b8_conditions(9, b / n, base)
    assert acc.lemma_b8_bound(9, b / n, base) < acc.rdp_subsampled_wor_gaussian(9, b / n, base)
    checked = 0
    for b, n, s3, a in [(12, 1651, 0.6124, 9), (10, 5000, 1.0, 6), (8, 20000, 0.9, 9), (20, 100000, 0.5, 12)]:
        base = _gauss(b, s3)
        if acc.lemma_b8_conditions(a, b / n, base):
            checked += 1
            assert acc.lemma_b8_bound(a, b / n, base) >= acc.rdp_subsampled_wor_gaussian(a, b / n, base)
    assert checked >= 2


def test_bvr_sigma3_reference_values():
    s3, ok = acc.bvr_sigma3_closed_form(3.0, DELTA, R, 10, 12, N, P)
    assert ok and s3 == pytest.approx(0.6124, rel=1e-4)
    a0 = 9
    lhs_exact = 2 * 10 * math.ceil(R / P) * acc.bvr_local_rdp(a0, s3, 12, N)
    assert lhs_exact == pytest.approx(0.333, abs=1e-3)
    lhs_b8 = 2 * 2000 * acc.lemma_b8_bound(a0, 12 / N, _gauss(12, s3))
    assert lhs_b8 == pytest.approx(0.710, abs=1e-3)
    s1, s2, s3b = acc.diff2_bvr_sigmas(3.0, DELTA, R, 20, 10, 12, N, P)
    assert s3b == pytest.approx(0.3551, rel=3e-4)
    budget = (1 - 2 / 3) * 3.0
    assert 2 * 2000 * acc.bvr_local_rdp(a0, s3b, 12, N) <= budget
    assert 2 * 2000 * acc.bvr_local_rdp(a0, s3b * (1 - 1e-6), 12, N) > budget
    e = acc.diff2_bvr_epsilon(R, 20, 10, 12, N, P, s1, s2, s3b, DELTA, "paper", eps_target=3.0)
    assert e <= 3.0 + 1e-12
    assert acc.diff2_bvr_epsilon(R, 20, 10, 12, N, P, s1, s2, s3b, DELTA, "tight") <= e
    with pytest.raises(ValueError, match="batch_size"):
        acc.diff2_bvr_sigmas(3.0, DELTA, R, 20, 10, 200, N, P, method="closed-form")


def test_bvr_schedules_compose_below_target():
    from dpjax.algorithms import diff2
    from dpjax.problems import LinearRegression

    s1, s2, s3 = acc.diff2_bvr_sigmas(3.0, DELTA, R, 20, 10, 12, N, P)
    alg = diff2.Diff2BvrLSgd(LinearRegression(2), R, local_steps=10, batch_size=12)
    hp = diff2.Diff2HParams.create(0.1, restart_interval=20, **alg.noise_multipliers_from_paper(
        [N] * P, sigma_restart=s1, sigma_diff=s2, sigma_local=s3))
    spec = alg.privacy([N] * P, hp)
    scheds = spec.schedules
    assert scheds[-1].sampling is Sampling.WITHOUT_REPLACEMENT and scheds[-1].steps == 2000
    assert spec.noise_fields == ("noise_multiplier_restart", "noise_multiplier_diff", "noise_multiplier_local")
    # the local releases: b = 12 of the smallest silo, multiplier sigma3 b / 2 (std sigma3 x radius,
    # sensitivity 2 radius / b); the exact count is (K - 1) ceil(R/P) instead of K ceil(R/P)
    local = scheds[-1]
    assert (local.dataset_size, local.batch_size) == (N, 12)
    assert local.noise_std / local.sensitivity == pytest.approx(s3 * 12 / 2, rel=1e-6)
    assert alg.privacy([N] * P, hp, local_count="exact").schedules[-1].steps == 1800
    assert acc.compose_epsilon(scheds, DELTA) <= 3.0


def test_invalid_arguments():
    with pytest.raises(ValueError, match="delta"):
        acc.alpha0(3.0, 1.5)
    with pytest.raises(ValueError, match="restart_interval"):
        acc.count_restarts(10, 0)
    with pytest.raises(ValueError, match="u="):
        acc.diff2_gd_sigmas(3.0, DELTA, R, 20, N, P, u=1.0)
    with pytest.raises(ValueError, match="mode"):
        acc.diff2_gd_sigmas(3.0, DELTA, R, 20, N, P, mode="loose")
    with pytest.raises(ValueError, match="eps_target"):
        acc.diff2_epsilon(R, 20, N, P, 0.01, 0.02, DELTA, "paper")
    with pytest.raises(ValueError, match="alpha"):
        acc.rdp_subsampled_wor_gaussian(1, 0.1, _gauss(1, 1.0))
