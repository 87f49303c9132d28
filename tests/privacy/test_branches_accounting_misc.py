"""Branches of the paper accountants' closed forms and refusals reached by tests that can fail (issue 42, item 1):
DIFF2 (Murata & Suzuki 2023, Lemmas B.4-B.8, Prop. E.2), the shuffle chain of ISRL-DP (Lowy & Razaviyayn 2023,
Thm G.1), the shuffle-SCO compositions (Dwork-Rothblum-Vadhan advanced composition, Kairouz-Oh-Viswanath optimal
composition), group privacy, ISRL's calibrations and user-level DP's constants (Asi & Liu 2024).

Each expected value is computed here from the printed formula (math / mpmath), or is the refusal the formula's
stated domain requires, matched by the argument's name and value.
"""

from __future__ import annotations

import math

import mpmath as mp
import pytest

from dpjax.accounting import conversions, diff2, isrl, kov_composition, shuffle, shuffle_lower_bound, shuffle_sco
from dpjax.accounting import user_level

pytestmark = pytest.mark.privacy


# ----------------------------------------------------------------------------- DIFF2
def test_diff2_gaussian_rdp_and_its_domain():
    assert diff2.rdp_gaussian(3.0, 2.0) == 3.0 / 8.0          # alpha / (2 z^2)
    assert diff2.rdp_gaussian(2.0, 0.0) == math.inf           # no noise: no finite RDP
    with pytest.raises(ValueError, match=r"alpha=1 must be > 1"):
        diff2.rdp_gaussian(1, 1.0)
    with pytest.raises(ValueError, match=r"alpha=0.5 must be > 1"):
        diff2.epsilon_at_alpha(0.1, 0.5, 1e-5)
    # Lemma B.4 by hand: rdp + log(1/delta)/(alpha - 1)
    assert diff2.epsilon_at_alpha(0.25, 5.0, 1e-5) == pytest.approx(0.25 + math.log(1e5) / 4, rel=1e-15)
    with pytest.raises(ValueError, match=r"sigma_diff=None but there are 6 difference rounds"):
        diff2.diff2_rdp(4.0, 8, 4, 10, 2, 1.0, None)               # R = 8, T = 4: m = 2 restarts, 6 differences
    assert diff2.rdp_subsampled_wor_gaussian(3, 0.5, lambda j: math.inf) == math.inf
    with pytest.raises(ValueError, match=r"eps_target=None: mode='paper'"):
        diff2.diff2_bvr_epsilon(4, 2, 1, 2, 10, 2, 1.0, 1.0, 1.0, 1e-5)


def _lemma_b7(alpha, gamma, eps):
    """Lemma B.7 (Wang, Balle & Kasiviswanathan 2019, Thm 9) for a Gaussian base, in mpmath, as printed."""
    e2 = eps(2)
    s = 1 + gamma**2 * mp.binomial(alpha, 2) * min(4 * (mp.e**e2 - 1), 2 * mp.e**e2)
    s += sum(2 * gamma**j * mp.binomial(alpha, j) * mp.e**((j - 1) * eps(j)) for j in range(3, alpha + 1))
    return min(mp.log(s) / (alpha - 1), eps(alpha))


def test_diff2_bvr_sigmas_bisection_from_above_one_and_its_refusals():
    mp.mp.dps = 30
    eps, delta, rounds, k, b, n, silos = 1.0, 1e-3, 4, 2, 1, 10, 2
    s1, s2, s3 = diff2.diff2_bvr_sigmas(eps, delta, rounds, 2, k, b, n, silos)
    a0 = 1 + math.ceil(2 * math.log(1 / delta) / eps)          # the paper's alpha_0
    kc = k * math.ceil(rounds / silos)
    budget = (1 - 1 / 3 - 1 / 3) * eps
    local = lambda s: 2 * kc * _lemma_b7(a0, mp.mpf(b) / n, lambda j: 2 * mp.mpf(j) / (b * b * s * s))  # noqa: E731
    assert s3 > 2.0                         # the bracket had to grow past 1 (and past 2)
    assert local(s3) <= budget < local(s3 * (1 - 1e-6))
    m = 2                                   # ceil(R/T) restarts
    assert s1 == pytest.approx(math.sqrt(4 * 3 * a0 * m / ((n * silos) ** 2 * eps)), rel=1e-15)
    assert s2 == pytest.approx(math.sqrt(4 * 3 * a0 * (rounds - m) / ((n * silos) ** 2 * eps)), rel=1e-15)
    with pytest.raises(ValueError, match=r"u1=1.0, u2=3.0 must be > 1 with 1/u1 \+ 1/u2 < 1"):
        diff2.diff2_bvr_sigmas(eps, delta, rounds, 2, k, b, n, silos, u1=1.0)
    # the closed form where its batch-size condition holds: b <= n / (2 e alpha_0) needs a large n
    n_big = 10_000
    c1, c2, c3 = diff2.diff2_bvr_sigmas(eps, delta, rounds, 2, k, 1, n_big, silos, method="closed-form")
    s3sq = max((8 / 3) * (4 + math.e) * a0**2 / (a0 - 1) * 6 * kc / (n_big**2 * eps), 6 * a0 / 1)
    assert c3 == pytest.approx(math.sqrt(s3sq), rel=1e-15)


def test_diff2_compose_epsilon_refuses_a_group_schedule():
    from dpjax.accounting.schedules import GaussianSchedule

    sched = GaussianSchedule(1.0, 1.0, "full", 100, None, 3, group_size=2)
    with pytest.raises(ValueError, match=r"group_size=2 has no RDP curve"):
        diff2.compose_epsilon([sched], 1e-5)


# ----------------------------------------------------------------------------- shuffle chain
def test_shuffle_chain_stage_refusals_and_the_zero_epsilon_floor():
    # a local eps0-DP report changes the shuffled view by at most (e^eps0 - 1)/(e^eps0 + 1) in total variation,
    # so at eps = 0 the delta is below 1e-3 / 2 < 0.5: the smallest eps meeting delta = 0.5 is 0
    assert shuffle.fmt_numerical_epsilon(1e-3, 1000, 0.5) == 0.0
    with pytest.raises(ValueError, match=r"eps=2.0 must be <= 1 for the paper's 2 q eps"):
        shuffle.subsampled_epsilon(2.0, 0.1, "paper")
    assert shuffle.subsampled_epsilon(2.0, 0.1) == pytest.approx(math.log1p(0.1 * math.expm1(2.0)), rel=1e-15)


# ----------------------------------------------------------------------------- compositions
def test_shuffle_sco_composition_single_round_and_refusals():
    assert shuffle_sco.compose_epsilon(0.7, 1e-6, 1, 1e-5, "advanced") == 0.7    # one round: its own guarantee
    with pytest.raises(ValueError, match=r"delta=1e-07 is below the round's delta0=1e-06"):
        shuffle_sco.compose_epsilon(0.7, 1e-6, 1, 1e-7, "optimal")
    with pytest.raises(ValueError, match=r"delta=1e-05 must exceed k delta0 = 1.99+8e-05"):
        shuffle_sco.compose_epsilon(0.7, 1e-6, 20, 1e-5, "advanced")
    # KOV: at eps = k eps0 the composed delta is 1 - (1 - delta0)^k, above delta = 1e-5 for k = 20, delta0 = 1e-6
    with pytest.raises(ValueError, match=r"delta=1e-05 is below the composed delta floor"):
        shuffle_sco.compose_epsilon(0.7, 1e-6, 20, 1e-5, "optimal")
    # KOV Thm 3.3 with eps0 = 0: only the delta0's compose
    assert kov_composition.optimal_composition_delta(0.0, 0.01, 3, 0.5) == pytest.approx(1 - 0.99**3, rel=1e-15)


def test_shuffle_sco_round_budget_domains():
    with pytest.raises(ValueError, match=r"honest_frac=1.5 must be in \(0, 1\]"):
        shuffle_sco.pvec_round_epsilon(2, 4, 0.25, 100, 3, 1e-5, honest_frac=1.5)
    # Lemma C.5: eps = 2L sqrt(2 ln(2/delta)) / zeta, valid below 1 only
    with pytest.raises(ValueError, match=r"noise_std_sum=1.0: Lemma C.5 needs eps < 1"):
        shuffle_sco.pan_private_epsilon(1.0, 1.0, 1e-5, "pan-paper")
    zeta = 100.0
    assert shuffle_sco.pan_private_epsilon(zeta, 1.0, 1e-5, "pan-paper") == pytest.approx(
        2 * math.sqrt(2 * math.log(2 / 1e-5)) / zeta, rel=1e-15)
    assert shuffle_sco.audit_lower_bound(1, 50, 100, 0.5) == 0.0   # TPR's lower bound is below delta: nothing shown


def test_group_privacy_with_delta_zero_is_g_eps():
    assert conversions.group_privacy(0.3, 0.0, 4) == (1.2, 0.0)


# ----------------------------------------------------------------------------- ISRL
def test_isrl_calibration_domains():
    with pytest.raises(ValueError, match=r"silo_sizes=\[.*1.0\)?\] must be a non-empty list of sizes >= 2"):
        isrl.isrl_per_silo_sigma_factors([1], 10)
    # sigma_i / sigma_ref = (n_ref / n_i) sqrt(ln n_i / ln n_ref) by hand
    assert float(isrl.isrl_per_silo_sigma_factors([20], 10)[0]) == pytest.approx(
        0.5 * math.sqrt(math.log(20) / math.log(10)), rel=1e-15)
    with pytest.raises(ValueError, match=r"epsilon=100.0 must be <= 8 ln\(1/delta\)"):
        isrl.isrl_one_pass_paper_sigma(1.0, 4, 100.0, 1e-3)
    # K = 1 and ln(2.5 R K / (delta n)) = ln(2.5 / 5e5) < 0: the authors' formula is undefined
    with pytest.raises(ValueError, match=r"rounds=1, delta=0.5: ln\(2.5 R K/\(delta n\)\) = .* <= 0"):
        isrl.isrl_authors_code_calibration(1.0, 1_000_000, 1, 1e-6, 0.5)


# ----------------------------------------------------------------------------- user-level DP
def test_user_level_composition_and_fallback_refusals():
    with pytest.raises(ValueError, match=r"calls=\[\] must contain at least one call"):
        user_level.compose_user_level([])
    # basic within a group, max over groups (hand sums)
    assert user_level.compose_user_level([(0.5, 1e-6, "a"), (0.25, 1e-6, "a"), (0.6, 0.0, "b")]) == (0.75, 2e-6)
    assert user_level.fallback_cost(25, 2) == "n = 25 > 20 users: at least C(25, 9) oracle calls"
    with pytest.raises(ValueError, match=r"n=25, kappa=2: Algorithm 1 needs Algorithm 1's exact"):
        user_level.exact_fallback_check(25, 2)
    user_level.exact_fallback_check(10, 2)  # 2^10 subsets: feasible, no refusal


def test_user_level_a1_analytic_sigma_meets_delta_prime_exactly():
    p = user_level.a1_params(0.5, 1e-3, 1.0, gaussian="analytic")
    # eps' = eps/2, delta' = delta/(e^eps + 2); sigma is the analytic Gaussian's for shift 8 kappa:
    # delta(eps') = Phi(-eps' s/D + D/(2s)) - e^eps' Phi(-eps' s/D - D/(2s)) with D = 8 kappa, s = sigma
    mp.mp.dps = 30
    d_shift, s = mp.mpf(8 * p.kappa), mp.mpf(p.sigma)
    phi = lambda t: mp.ncdf(t)  # noqa: E731
    dl = phi(-p.eps_prime * s / d_shift + d_shift / (2 * s)) - mp.e**p.eps_prime * phi(-p.eps_prime * s / d_shift
                                                                                          - d_shift / (2 * s))
    assert p.eps_prime == 0.25 and p.delta_prime == pytest.approx(1e-3 / (math.exp(0.5) + 2), rel=1e-15)
    assert float(dl) == pytest.approx(p.delta_prime, rel=1e-6)
    assert float(dl) <= p.delta_prime * (1 + 1e-9)


def test_user_level_phased_groups_refusals():
    n0 = user_level.user_level_params(1.0, 1e-3).n_min
    with pytest.raises(ValueError, match=rf"n=100 must be >= 2 N0 = {2 * n0} for Phased-SCO \(Algorithm 4\)"):
        user_level.phased_sco_groups(100, 1, 1.0, 1e-3, "A4")
    t = math.ceil(math.log2(100))
    with pytest.raises(ValueError, match=rf"n=100 must be >= T N0 = {t * n0}"):
        user_level.phased_sco_groups(100, 1, 1.0, 1e-3, "A4b")


# ----------------------------------------------------------------------------- shuffle lower bound
def test_shuffle_lower_bound_single_epoch_paths():
    z, steps, eps = 1.0, 10, 0.5
    one = shuffle_lower_bound.single_epoch_delta(z, steps, eps)
    # one epoch, or epochs that reuse one order (no reshuffle): the single-epoch bound at z / sqrt(E)
    assert shuffle_lower_bound.shuffle_delta_lower_bound(z, steps, 1, eps) == one
    assert shuffle_lower_bound.shuffle_delta_lower_bound(2.0, steps, 4, eps, reshuffle=False) == one
    best = shuffle_lower_bound.shuffle_delta_lower_bound(z, steps, 1, eps, pair="best-replace-one")
    assert best == max(shuffle_lower_bound.single_epoch_delta(z, steps, eps, p) for p in shuffle_lower_bound.PAIRS)
    # a tiny noise multiplier: delta stays above the target up to _EPS_MAX, which is returned (that much is shown)
    assert shuffle_lower_bound.single_epoch_epsilon(1e-3, 2, 1e-12) == shuffle_lower_bound._EPS_MAX


def test_isrl_shuffle_chain_inclusion_and_local_delta_domains():
    # hidden participation: q = (K/n) M / N; K = n, M = 4 reports over N = 2 silos gives q = 2 > 1
    with pytest.raises(ValueError, match=r"reports=4: the inclusion probability q = M q_rec/N = 2 exceeds 1 \(N=2\)"):
        shuffle.isrl_shuffle_chain(1.0, 1.0, 3, 2, 4, 1, 1e-5, batch_size=3)
    # delta0 = delta/(18 R M q) with q = 1e-9 (K = 1 of n = 1e9): 0.5/1.8e-8 > 1
    with pytest.raises(ValueError, match=r"delta=0.5: the chain's local delta0 = delta/\(18 R M q\)"):
        shuffle.isrl_shuffle_chain(1.0, 1.0, 10**9, 1, 1, 1, 0.5)


def test_small_accountant_domains():
    with pytest.raises(ValueError, match=r"delta=0.6 must be <= 1/2"):
        user_level.user_level_params(0.5, 0.6)
    # sum_{u <= 4 kappa + 1 = 9} C(10, u) = 2^10 - 1 oracle calls
    assert user_level.fallback_cost(10, 2) == "1023 oracle calls; limit 300000"
    from dpjax.accounting import balls_in_bins_mc, batch_clipping, wor_rdp

    with pytest.raises(ValueError, match=r"g=11 must be <= n_records=10"):
        batch_clipping._check_sizes(10, 1, 1, 11, 1)
    with pytest.raises(ValueError, match=r"dataset_sizes=\(\) must name at least one silo"):
        batch_clipping.batch_clipping_privacy(sampling="shuffle", dataset_sizes=(), s=1, m=1, num_rounds=1,
                                              rounds_per_epoch=1, noise_multiplier=1.0)
    # 1e6 samples x 10 bins x 1 epoch = 1e7 draws fit; 2e6 do not
    assert balls_in_bins_mc.check_work(10**6, 10, 10) == 10**6
    with pytest.raises(ValueError, match=r"num_samples=2000000 with 10 bins over 1 epoch\(s\) is 2e\+07 normal draws"):
        balls_in_bins_mc.check_work(2 * 10**6, 10, 10)
    assert list(wor_rdp.wor_gaussian_rdp(0.0, 1.0, [2.0, 8.0])) == [0.0, 0.0]  # q = 0: nothing is released


def test_audit_lower_bound_is_the_clopper_pearson_ratio():
    from scipy import stats

    tp, fp, trials, delta = 95, 5, 100, 1e-3
    # Clopper-Pearson at (1 + 0.95)/2 each: TPR >= t_lo, FPR <= f_hi; eps >= ln((t_lo - delta)/f_hi)
    t_lo = stats.beta.ppf(0.025, tp, trials - tp + 1)
    f_hi = stats.beta.ppf(0.975, fp + 1, trials - fp)
    want = math.log((t_lo - delta) / f_hi)
    assert want > 1.0  # a non-trivial bound
    assert shuffle_sco.audit_lower_bound(tp, fp, trials, delta) == pytest.approx(want, rel=1e-12)
