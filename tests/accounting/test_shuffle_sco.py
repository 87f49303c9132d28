"""Parameter rules, composition and robust/pan-private accounting of the shuffle-private SCO
protocols (Cheu et al. 2022): the spec's worked examples as test vectors and independent
recomputations from the lemmas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpjax.accounting import pvec as pvec_acc
from dpjax.accounting import shuffle_sco as sco

# mode, n, d, eps, delta | P_SGD B, T, L_G, eta, bound | P_AGD B, T, sigma_or, L_1 (paper schedule), bound
# (floats as printed in the spec's table: the tolerance is half a unit in the last printed digit)
WORKED = [
    ("paper", 10**5, 10, 1, 1e-6, 51, 1960, "247.9", "9.11e-5", "5.60", 4819, 20, "2.624", "135.9", "0.589"),
    ("paper", 10**6, 10, 1, 1e-6, 51, 19607, "247.9", "2.88e-5", "1.77", 19183, 52, "0.659", "131.3", "0.092"),
    ("paper", 10**7, 10, 4, 1e-8, 16, 625000, "252.5", "5.01e-6", "0.319", 48502, 206, "0.083", "125.6", "0.006"),
    ("lemma_opt", 10**5, 10, 1, 1e-6, 51, 1960, "24.10", "9.37e-4", "0.544", 4819, 20, "0.232", "12.50", "0.054"),
    ("lemma_opt", 10**6, 10, 1, 1e-6, 51, 19607, "24.10", "2.96e-4", "0.172", 19183, 52, "0.056", "11.68", "0.008"),
    ("lemma_opt", 10**7, 10, 4, 1e-8, 16, 625000, "26.44", "4.79e-5", "0.033", 48502, 206, "0.009", "13.66", "0.001"),
]


def _close(value: float, printed: str, slack: float = 1.0) -> bool:
    """``value`` rounds to ``printed`` (within ``slack`` half-units of its last digit: the table's
    derived columns were computed from rounded intermediate values)."""
    mant = printed.split("e")[0]
    exp = int(printed.split("e")[1]) if "e" in printed else 0
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    return abs(value - float(printed)) <= slack * 0.5 * 10.0 ** (exp - decimals) + 1e-15


@pytest.mark.parametrize("row", WORKED, ids=lambda r: f"{r[0]}-{r[1]:.0e}")
def test_worked_examples(row):
    mode, n, d, eps, dl, B, T, lg, eta, bound, aB, aT, sig, l1, abound = row
    ph = sco.p_sgd_plan(n, d, eps, dl, 1.0, 1.0, mode=mode).phases[0]
    assert (ph.batch, ph.rounds) == (B, T)
    assert _close(1.0 / (ph.step * math.sqrt(ph.rounds)), lg, 2)  # eta = D/(L_G sqrt T)
    assert _close(ph.step, eta, 2) and _close(ph.bound, bound)
    a = sco.p_agd_plan(n, d, eps, dl, 1.0, 1.0, 1.0, mode=mode).phases[0]
    assert (a.batch, a.rounds) == (aB, aT)
    sigma = (a.bound - 1.0 / a.rounds**2) * math.sqrt(a.rounds)  # bound = beta D^2/T^2 + sigma D/sqrt T
    assert _close(sigma, sig) and _close(a.bound, abound)
    assert _close(0.5 * ((a.rounds + 2) ** 1.5 * sigma + 1), l1, 2)
    # the Lan schedule's nu = max(2 beta, (T+2)^{3/2} sigma/(sqrt 6 D))
    assert a.step == pytest.approx(max(2.0, (a.rounds + 2) ** 1.5 * sigma / math.sqrt(6)), rel=1e-9)


def test_worked_example_pvec_parameters_at_b51():
    paper = sco.p_sgd_plan(10**5, 10, 1, 1e-6, mode="paper").phases[0].pvec
    assert (paper.g, paper.b) == (8, 20_061_188) and paper.eps_hat == pytest.approx(0.013797, abs=1e-6)
    assert paper.delta_hat == pytest.approx(9.0909e-8, rel=1e-4) and paper.p < 0.5
    opt = sco.p_sgd_plan(10**5, 10, 1, 1e-6, mode="lemma_opt").phases[0].pvec
    assert (opt.g, opt.b) == (32, 3_028_194) and opt.eps_hat == pytest.approx(0.14205, abs=1e-5)


def test_total_variance_is_d_times_the_exact_per_coordinate_formula():
    pv = pvec_acc.pvec_params(1.0, 1e-6, 51, 10, "paper")
    per = (2 / pv.g) ** 2 * (51 / 4 + 51 * pv.b * pv.p * (1 - pv.p))
    assert sco.pvec_total_variance(pv, 1.0) == pytest.approx(10 * per, rel=1e-12)


@pytest.mark.parametrize("m,p,k,alpha", [(2000, 0.3, 3, 0.2), (5000, 0.1, 5, 0.3), (20000, 0.25, 10, 0.1)])
def test_lemma_a1_numerically(m, p, k, alpha):
    """Exact hockey-stick divergence of Bin(m,p)+k vs Bin(m,p), both orders, at eps = k ln((1+a)/(1-a))
    is below Lemma A.1's delta = 2 exp(-a^2 m p/10) (spec: ~1e-16, 8e-30, 3e-34 vs 0.18, 0.022, 0.013)."""
    pmf = stats.binom.pmf(np.arange(m + 1), m, p)
    eps = k * math.log((1 + alpha) / (1 - alpha))
    bound = 2 * math.exp(-alpha**2 * m * p / 10)
    worst = max(sco.hockey_stick((k, pmf), (0, pmf), eps), sco.hockey_stick((0, pmf), (k, pmf), eps))
    assert worst <= bound and worst < 1e-10


def test_p1d_exact_privacy_profile_below_the_claim():
    """Lemma 3.1 on small inputs: neighbours x_u = 0 vs x_u = Delta, others at fractional positions;
    the exact hockey-stick divergence at eps (2/g + 1) is <= delta (both orders)."""
    eps, delta, n = 1.0, 1e-3, 12
    pr = pvec_acc.p1d_params(eps, delta, n)
    others = [0.5 / pr.g + 0.25] * (n - 1)  # fractional parts 1/2 (rounding variance maximal)
    P = sco.p1d_count_pmf([0.0] + others, pr.g, pr.b, pr.p)
    Q = sco.p1d_count_pmf([1.0] + others, pr.g, pr.b, pr.p)
    claim = eps * (2 / pr.g + 1)
    assert max(sco.hockey_stick(P, Q, claim), sco.hockey_stick(Q, P, claim)) <= delta
    assert abs(sum(P[1]) - 1) < 1e-9


def test_composition_optimal_is_tighter_than_advanced_and_matches_a_pld():
    common = pytest.importorskip("dp_accounting.pld.common")
    pld_lib = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    eps0, d0, k, delta = 0.05, 1e-8, 50, 1e-5
    adv = sco.compose_epsilon(eps0, d0, k, delta, "advanced")
    opt = sco.compose_epsilon(eps0, d0, k, delta, "optimal")
    assert opt < adv
    assert adv == pytest.approx(math.sqrt(2 * k * math.log(1 / (delta - k * d0))) * eps0 + k * eps0 * math.expm1(eps0))
    # independent: PLD of the (eps0, delta0) worst-case pair, composed k times (pessimistic discretisation)
    pld = pld_lib.from_privacy_parameters(
        common.DifferentialPrivacyParameters(eps0, d0), value_discretization_interval=1e-5)
    pld_eps = pld.self_compose(k).get_epsilon_for_delta(delta)
    assert opt == pytest.approx(pld_eps, abs=2e-3)
    assert sco.optimal_composition_delta(eps0, d0, k, opt) <= delta


@pytest.mark.parametrize("eps,delta,n,d", [(0.5, 1e-5, 2000, 5), (1.0, 1e-6, 10000, 10), (4.0, 1e-6, 10000, 2)])
def test_pgd_round_budget_composes_to_at_most_the_target(eps, delta, n, d):
    T = sco.pgd_rounds(n, d, eps, delta)
    assert 1 <= T <= n
    er, dr = sco.pgd_round_budget(eps, delta, T, "advanced")
    assert er == pytest.approx(eps / (2 * math.sqrt(2 * T * math.log(1 / delta)))) and dr == delta / (T + 1)
    assert sco.compose_epsilon(er, dr, T, delta, "advanced") <= eps
    eo, _ = sco.pgd_round_budget(eps, delta, T, "optimal")
    assert eo >= er and sco.compose_epsilon(eo, dr, T, delta, "optimal") <= eps


def test_phased_plan_groups_are_disjoint_and_distances_shrink():
    plan = sco.phased_plan(lambda m, diameter, start: sco.p_agd_plan(m, 8, 1.0, 1e-6, 2.0, diameter, 1.0,
                                                                     start=start), 10**6, 1.0, diameter=2.0)
    k = math.ceil(math.log2(math.log2(10**6))) + 1
    size = 10**6 // k
    assert len(plan.phases) == k and [p.start for p in plan.phases] == [i * size for i in range(k)]
    assert all(p.users <= size for p in plan.phases)
    dists = [p.distance for p in plan.phases]
    assert dists[0] == 2.0 and all(a >= b for a, b in zip(dists, dists[1:])) and dists[-1] < dists[0]


def test_robust_shuffle_privacy():
    pv = pvec_acc.pvec_params(0.5, 1e-6, 400, 5, "paper")
    base = sco.pvec_round_epsilon(pv.g, pv.b, pv.p, 400, 5, 1e-6, "printed")
    assert sco.pvec_round_epsilon(pv.g, pv.b, pv.p, 400, 5, 1e-6, "printed", honest_frac=0.5) == pytest.approx(2 * base)
    lem = sco.pvec_round_epsilon(pv.g, pv.b, pv.p, 400, 5, 1e-6, "lemma", honest_frac=0.5)
    assert lem == pytest.approx(pvec_acc.pvec_epsilon(pv.g, pv.b, pv.p, 200, 5, 1e-6).epsilon)
    assert lem > sco.pvec_round_epsilon(pv.g, pv.b, pv.p, 400, 5, 1e-6, "lemma")
    with pytest.raises(ValueError, match="honest_frac"):
        sco.pvec_round_epsilon(pv.g, pv.b, pv.p, 400, 5, 1e-6, "printed", honest_frac=0.25)


def test_pan_private_noise_and_epsilon():
    plan = sco.pan_private_plan(10**5, 10, 0.5, 1e-6, 1.0, 2.0, 1.0)
    ph = plan.phases[0]
    zeta2 = 8 * math.log(2 / 1e-6) / (ph.batch**2 * 0.5**2)
    assert ph.noise_std == pytest.approx(ph.batch * math.sqrt(zeta2))
    # Lemma C.5 at the protocol's zeta gives back eps exactly; the analytic Gaussian is tighter
    assert sco.pan_private_epsilon(ph.noise_std, 1.0, 1e-6, "pan-paper") == pytest.approx(0.5)
    assert sco.pan_private_epsilon(ph.noise_std, 1.0, 1e-6, "pan-analytic") < 0.5
    with pytest.raises(ValueError, match="epsilon"):
        sco.pan_private_plan(1000, 2, 1.5, 1e-6, 1.0, 2.0, 1.0)


def test_bits_per_user_counts_every_call():
    seq = sco.p_sgd_plan(10**5, 10, 1, 1e-6)
    ph = seq.phases[0]
    assert sco.bits_per_user(seq) == 10 * (ph.pvec.g + ph.pvec.b)
    gd = sco.p_gd_plan(2000, 3, 1.0, 1e-5, rounds=7)
    assert sco.bits_per_user(gd) == 7 * 3 * (gd.phases[0].pvec.g + gd.phases[0].pvec.b)


def test_invalid_inputs_name_the_argument():
    with pytest.raises(ValueError, match="epsilon"):
        sco.p_sgd_plan(1000, 2, -1.0, 1e-6)
    with pytest.raises(ValueError, match="delta"):
        sco.p_agd_plan(1000, 2, 1.0, 1.5, smoothness=1.0)
    with pytest.raises(ValueError, match="smoothness"):
        sco.p_agd_plan(1000, 2, 1.0, 1e-6)
    with pytest.raises(ValueError, match="composition"):
        sco.compose_epsilon(0.1, 0.0, 3, 1e-6, "basic")
    with pytest.raises(ValueError, match="accountant"):
        sco.transcript_epsilon([], 2, 1e-6, "rdp")


def _rr_delta_full_pmf(eps0, delta0, k, epsilon):
    """optimal_composition_delta with the whole Bin(k, p) pmf summed (the definition)."""
    j = np.arange(k + 1)
    pmf = stats.binom.pmf(j, k, 1 / (1 + math.exp(eps0)))
    rr = float(np.sum(pmf * -np.expm1(np.minimum(epsilon - (k - 2 * j) * eps0, 0.0))))
    return 1 - (1 - delta0) ** k * (1 - max(0.0, rr))


@pytest.mark.parametrize("k,eps0,epsilon", [(20_000, 5e-3, 1.0), (10**6, 4e-4, 1.0), (50_000, 0.02, 3.0)])
def test_optimal_composition_window_equals_the_whole_pmf_and_stays_an_upper_bound(k, eps0, epsilon, monkeypatch):
    """Large k sums J over mean +- 40 sqrt(k) and adds a Hoeffding bound on the rest: equal to the whole pmf
    to float64 round-off. With a window of 1 sqrt(k), which leaves real mass out, the result must stay >= the
    exact delta (an upper bound, never an under-report) and exceed it by at most the bound's 2 exp(-2)."""
    exact = _rr_delta_full_pmf(eps0, 1e-12, k, epsilon)
    assert sco.optimal_composition_delta(eps0, 1e-12, k, epsilon) == pytest.approx(exact, rel=1e-12)
    from dpjax.accounting import kov_composition

    monkeypatch.setattr(kov_composition, "RR_WINDOW_SQRT_K", 1)
    narrow = sco.optimal_composition_delta(eps0, 1e-12, k, epsilon)
    assert exact < narrow <= exact + 2 * math.exp(-2) + 1e-12
