"""Cheu, Joseph, Mao & Peng, "Shuffle private stochastic convex optimization" (ICLR 2022): every parameter
calculator and closed form pinned to the paper's printed formula, computed here with plain ``math``.

Issue #42 item 3. Each expected value below is evaluated from the formula quoted in its comment (paper
lemma/theorem/equation; where the paper's printed formula is wrong or unreadable, the corrected one from
``shared/spec/shuffle_private_sco.md`` is used and the comment says so), never by calling another dpjax
function. Tolerance: 1e-12 relative (the expressions are a handful of float operations), exact for integers.

Inventory (calculator -> test):

* ``accounting.pvec.p1d_params`` (Lemma 3.1 g, b, p) -> ``test_p1d_params``
* ``accounting.pvec.pvec_params`` mode ``paper`` (Thm 3.2 proof: gamma, eps_hat, g, b, p) -> ``test_pvec_params_paper``
* ``accounting.pvec.pvec_params`` mode ``lemma_opt`` (Lemma 3.3 with S, c_e) -> ``test_pvec_params_lemma_opt``
* ``accounting.pvec.pvec_epsilon`` (Lemma A.1 alpha, Lemma 3.1 eps_hat, Lemma 3.3 both forms) ->
  ``test_pvec_epsilon_lemma``, ``test_pvec_epsilon_printed``
* ``accounting.pvec.pvec_sum_std`` / ``accounting.shuffle_sco.pvec_total_variance`` (Lemma 3.1 variance,
  Appendix A.1) -> ``test_pvec_std_and_variance``
* ``accounting.pvec.spread_shift`` (numerical mode worst shift ceil(2 + g/sqrt d)) -> ``test_spread_shift``
* ``accounting.shuffle_sco.p_sgd_plan`` (Thm 4.1: B, T, L_G, eta) -> ``test_p_sgd_plan``
* ``accounting.shuffle_sco.smoothing_beta`` (Thm 4.7 beta_s) -> ``test_smoothing_beta``
* ``accounting.shuffle_sco.acsa_nu`` (Thm 4.3 L_t constant; Lan 2012 policy) -> ``test_acsa_nu``
* ``accounting.shuffle_sco.p_agd_plan`` batch (Thm 4.3 B) -> ``test_p_agd_batch``
* ``accounting.shuffle_sco.pan_private_plan`` noise (Alg. 6 / Lemma C.4 zeta^2) -> ``test_pan_private_noise``
* ``accounting.shuffle_sco.pgd_rounds`` (Lemma B.6 T) -> ``test_pgd_rounds``
* ``accounting.shuffle_sco.p_gd_plan`` paper mode (Alg. 5, Lemma B.6, Thm 4.9: T, eps_r, delta_r, beta, eta, bound) ->
  ``test_p_gd_plan``
* ``accounting.shuffle_sco.pgd_round_budget`` advanced (Alg. 5 eps_r, delta_r) -> ``test_pgd_round_budget``
* ``accounting.shuffle_sco.compose_epsilon`` advanced (Dwork-Rothblum-Vadhan) -> ``test_compose_epsilon_advanced``
* ``primitives.shuffle_protocols.pvec_variance`` (Lemma 3.1 exact variance with the actual rounding) ->
  ``test_pvec_variance_exact``
* ``accounting.shuffle_sco.pvec_round_epsilon`` (Claim A.8 / Corollary A.9 honest fraction) ->
  ``test_pvec_round_epsilon_honest_fraction``
* ``accounting.shuffle_sco.pan_private_epsilon`` (Lemma C.5 paper form; exact Gaussian) -> ``test_pan_private_epsilon_paper``,
  ``test_gaussian_approx_epsilon``
* ``accounting.pvec.pvec_gaussian_approx_epsilon`` (diagnostic) -> ``test_gaussian_approx_epsilon``
* ``accounting.pvec.pvec_numerical_epsilon`` (numerical PLD mode, not in the paper) -> ``test_numerical_epsilon_vs_exact``
  (against the exact hockey-stick divergence of shifted binomials; tolerance = the PLD discretisation)
* ``accounting.sco_transcript.grouped_trials`` -> ``test_grouped_trials``; ``accounting.shuffle_sco.bits_per_user``
  (Corollaries B.8-B.11, exact) -> ``test_bits_per_user``
* ``accounting.kov_composition.optimal_composition_delta`` (Kairouz-Oh-Viswanath Thm 3.3, P_GD's optimal
  composition) -> ``test_kov_optimal_composition``
* Not pinned by hand: ``shuffle_sco.transcript_epsilon`` / ``gaussian_approx_transcript_epsilon`` (compositions of the
  pinned per-round forms with ``compose_epsilon``), ``shuffle_sco.p1d_count_pmf`` / ``hockey_stick`` /
  ``audit_lower_bound`` (audit tooling, not calculators; tests/accounting/test_shuffle_sco.py), ``phased_plan`` (a
  schedule of pinned convex plans), ``local_sgd_plan`` (the baseline on the exact Gaussian
  mechanism, not the paper's formulas).
"""

from __future__ import annotations

import math

import pytest

from dpjax.accounting import pvec as pv
from dpjax.accounting import shuffle_sco as sco

pytestmark = pytest.mark.privacy
REL = 1e-12


def close(actual, expected, rel=REL):
    assert actual == pytest.approx(expected, rel=rel, abs=0.0), (actual, expected)


# -- Lemma 3.1 (P_1D): g >= sqrt(n) on normalised inputs (printed "g [?] n" is unreadable: corrected per the spec,
#    S-3), b = floor(180 g^2 ln(2/delta)/(eps^2 n)) + 1 (smallest b with b > 180 g^2 ln(2/delta)/(eps^2 n)),
#    p = 90 g^2 ln(2/delta)/(b eps^2 n).
@pytest.mark.parametrize("eps, delta, n", [(1.0, 1e-5, 1000), (0.3, 1e-7, 50), (7.5, 0.01, 12345)])
def test_p1d_params(eps, delta, n):
    got = pv.p1d_params(eps, delta, n)
    g = max(math.ceil(math.sqrt(n)), 4)
    x = g * g * math.log(2 / delta) / (eps * eps * n)
    b = math.floor(180 * x) + 1
    assert (got.g, got.b) == (g, b)
    close(got.p, 90 * x / b)
    assert got.p < 0.5


# -- Theorem 3.2's proof, paper mode: gamma = delta_hat = delta/(d+1), eps_hat = eps/(18 sqrt(ln(1/gamma))),
#    g = max(ceil(sqrt n), ceil(sqrt d), 4) (normalised rule, spec S-3), b, p of Lemma 3.1 at (eps_hat, delta_hat).
@pytest.mark.parametrize("eps, delta, n, d", [(1.0, 1e-5, 1000, 10), (4.0, 1e-6, 10000, 50),
                                              (0.5, 1e-3, 7, 300), (1.0, 1e-6, 51, 10)])
def test_pvec_params_paper(eps, delta, n, d):
    got = pv.pvec_params(eps, delta, n, d, "paper")
    gamma = delta / (d + 1)
    eps_hat = eps / (18 * math.sqrt(math.log(1 / gamma)))
    g = max(math.ceil(math.sqrt(n)), math.ceil(math.sqrt(d)), 4)
    x = g * g * math.log(2 / gamma) / (eps_hat**2 * n)
    b = math.floor(180 * x) + 1
    assert (got.g, got.b) == (g, b)
    close(got.eps_hat, eps_hat)
    close(got.delta_hat, gamma)
    close(got.p, 90 * x / b)


def test_pvec_params_paper_worked_example():
    # Spec 2.14's worked example (P_SGD row n = 1e5: B = 51 inputs, d = 10, eps = 1, delta = 1e-6):
    # paper g = 8, b = 20,061,188, eps_hat = 0.013797, gamma = 9.0909e-8 (printed to 5 digits).
    got = pv.pvec_params(1.0, 1e-6, 51, 10, "paper")
    assert (got.g, got.b) == (8, 20_061_188)
    close(got.eps_hat, 0.013797, rel=5e-5)
    close(got.delta_hat, 9.0909e-8, rel=1e-5)


# -- lemma_opt mode (Lemmas 3.1 + 3.3 with the proof's Hoeffding constant, spec S-11): g = max(ceil(sqrt n),
#    ceil(10 sqrt d), 4), S = 4d/g^2 + 4 sqrt(d)/g + 1, eps_hat the root of
#    sqrt(2 ln(1/gamma) S) eps_hat + c_e S eps_hat^2 = eps, c_e = (e^{eps_max} - 1)/eps_max, eps_max = eps_hat(2/g + 1).
def _lemma_opt_root(eps, gamma, g, d):
    s = 4 * d / g**2 + 4 * math.sqrt(d) / g + 1
    lin = math.sqrt(2 * math.log(1 / gamma) * s)

    def f(e):
        em = e * (2 / g + 1)
        return lin * e + (math.exp(em) - 1) / em * s * e * e - eps

    lo, hi = 1e-300, eps / lin  # f(lo) < 0 <= f(hi)
    for _ in range(2000):  # plain bisection to the last float
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if f(mid) <= 0 else (lo, mid)
    return lo


@pytest.mark.parametrize("eps, delta, n, d", [(1.0, 1e-5, 1000, 10), (4.0, 1e-6, 10000, 50),
                                              (15.0, 1e-6, 1000, 10), (0.2, 1e-4, 30, 3)])
def test_pvec_params_lemma_opt(eps, delta, n, d):
    got = pv.pvec_params(eps, delta, n, d, "lemma_opt")
    gamma = delta / (d + 1)
    g = max(math.ceil(math.sqrt(n)), math.ceil(10 * math.sqrt(d)), 4)
    eps_hat = _lemma_opt_root(eps, gamma, g, d)
    x = g * g * math.log(2 / gamma) / (eps_hat**2 * n)
    b = math.floor(180 * x) + 1
    assert got.g == g
    close(got.eps_hat, eps_hat, rel=1e-11)  # two bisections to the same root: a few ulps of slack in eps_hat
    assert abs(got.b - b) <= 1 and got.b == math.floor(180 * got.g**2 * math.log(2 / gamma)
                                                       / (got.eps_hat**2 * n)) + 1
    close(got.p, 90 * x / b, rel=1e-10)


def test_pvec_params_table():
    # Spec 2.3 table, row eps = 1, delta = 1e-5, d = 10, n = 1000 (printed to 3-4 digits):
    # paper eps_hat 0.0149, g 32, b 1.21e7, std 3442; lemma_opt eps_hat 0.1526, g 32, b 1.16e5, std 336.
    paper = pv.pvec_params(1.0, 1e-5, 1000, 10, "paper")
    opt = pv.pvec_params(1.0, 1e-5, 1000, 10, "lemma_opt")
    assert paper.g == opt.g == 32
    close(paper.eps_hat, 0.0149, rel=5e-3)
    close(paper.b, 1.21e7, rel=5e-3)
    close(opt.eps_hat, 0.1526, rel=5e-4)
    close(opt.b, 1.16e5, rel=5e-3)
    close(pv.pvec_sum_std(paper), 3442, rel=5e-4)
    close(pv.pvec_sum_std(opt), 336, rel=2e-3)


# -- pvec_epsilon: Lemma A.1 with m = b n, t = g: alpha = sqrt(10 ln(2/delta_hat)/(b n p)), Lemma 3.1's
#    eps_hat = 3 g alpha; gamma = delta_hat = delta/(d+1); eps_max = eps_hat (2/g + 1).
#    "lemma": eps = sqrt(2 ln(1/gamma) S) eps_hat + (e^{eps_max} - 1)/eps_max S eps_hat^2 (Lemma 3.3 with the
#    Hoeffding constant of its proof, spec S-11); "printed": Lemma 3.3 as printed with sum eps_j^2 <= 9 eps_hat^2
#    and e^x - 1 <= 2x: eps = 18 eps_hat^2 + 6 eps_hat sqrt(ln(1/gamma)). delta = d delta_hat + gamma.
CASES = [(32, 116_000, 0.37, 1000, 10, 1e-5), (100, 1_500_000, 0.41, 1000, 100, 1e-5),
         (64, 3_000_000, 0.2, 4000, 30, 1e-7)]


@pytest.mark.parametrize("g, b, p, n, d, delta", CASES)
def test_pvec_epsilon_lemma(g, b, p, n, d, delta):
    got = pv.pvec_epsilon(g, b, p, n, d, delta, "lemma")
    gamma = delta / (d + 1)
    alpha = math.sqrt(10 * math.log(2 / gamma) / (b * n * p))
    eps_hat = 3 * g * alpha
    s = 4 * d / g**2 + 4 * math.sqrt(d) / g + 1
    em = eps_hat * (2 / g + 1)
    close(got.alpha, alpha)
    close(got.eps_hat, eps_hat)
    close(got.epsilon, math.sqrt(2 * math.log(1 / gamma) * s) * eps_hat + (math.exp(em) - 1) / em * s * eps_hat**2)
    close(got.delta, d * gamma + gamma)


@pytest.mark.parametrize("g, b, p, n, d, delta", CASES)
def test_pvec_epsilon_printed(g, b, p, n, d, delta):
    got = pv.pvec_epsilon(g, b, p, n, d, delta, "printed")
    gamma = delta / (d + 1)
    eps_hat = 3 * g * math.sqrt(10 * math.log(2 / gamma) / (b * n * p))
    close(got.epsilon, 18 * eps_hat**2 + 6 * eps_hat * math.sqrt(math.log(1 / gamma)))


# -- Lemma 3.1 variance (Appendix A.1) with worst-case rounding r(1-r) <= 1/4 and range Delta = 2 Delta_2:
#    std = (2 Delta_2/g) sqrt(n/4 + n b p (1-p)); P_vec total variance on m inputs = d (2 Delta_2/g)^2 (m/4 + m b p(1-p)).
@pytest.mark.parametrize("eps, delta, n, d, delta2, m", [(1.0, 1e-5, 1000, 10, 1.0, 1000), (4.0, 1e-6, 500, 20, 0.3, 400),
                                                        (0.7, 1e-4, 64, 5, 2.5, 70)])
def test_pvec_std_and_variance(eps, delta, n, d, delta2, m):
    params = pv.pvec_params(eps, delta, n, d, "paper")
    g, b, p = params.g, params.b, params.p
    close(pv.pvec_sum_std(params, delta2), (2 * delta2 / g) * math.sqrt(n / 4 + n * b * p * (1 - p)))
    close(sco.pvec_total_variance(params, delta2, m), d * (2 * delta2 / g) ** 2 * (m / 4 + m * b * p * (1 - p)))


# -- numerical mode's spread worst case: k_j = ceil(2 + g/sqrt(d)) (spec 2.3 "Numerical" mode).
@pytest.mark.parametrize("g, d", [(32, 10), (100, 7), (45, 100)])
def test_spread_shift(g, d):
    assert pv.spread_shift(g, d) == math.ceil(2 + g / math.sqrt(d))


# -- P_vec parameters by hand (paper mode, as in test_pvec_params_paper), for the plans below.
def _paper_pvec(eps, delta, n, d):
    gamma = delta / (d + 1)
    eps_hat = eps / (18 * math.sqrt(math.log(1 / gamma)))
    g = max(math.ceil(math.sqrt(n)), math.ceil(math.sqrt(d)), 4)
    x = g * g * math.log(2 / gamma) / (eps_hat**2 * n)
    b = math.floor(180 * x) + 1
    return g, b, 90 * x / b


# -- Theorem 4.1 (batch reconstructed from the proof, spec S-2): B = sqrt(d) ln(d/delta)/eps (rounded, clipped to
#    [1, n]), T = floor(n/B), L_G^2 = L^2 + Var_vec(B)/B^2, eta = D/(L_G sqrt T), bound D L_G/sqrt(T).
@pytest.mark.parametrize("n, d, eps, delta, lip, diam", [(100_000, 10, 1.0, 1e-6, 1.0, 1.0),
                                                        (50_000, 20, 2.0, 1e-5, 0.5, 3.0),
                                                        (200_000, 5, 0.5, 1e-7, 2.0, 0.7)])
def test_p_sgd_plan(n, d, eps, delta, lip, diam):
    plan = sco.p_sgd_plan(n, d, eps, delta, lip, diam, mode="paper")
    (phase,) = plan.phases
    B = min(max(round(math.sqrt(d) * math.log(d / delta) / eps), 1), n)
    T = n // B
    g, b, p = _paper_pvec(eps, delta, B, d)
    var = d * (2 * lip / g) ** 2 * (B / 4 + B * b * p * (1 - p))
    lg = math.sqrt(lip**2 + var / B**2)
    assert (phase.batch, phase.rounds) == (B, T)
    close(phase.step, diam / (lg * math.sqrt(T)))
    close(plan.bound, diam * lg / math.sqrt(T))


def test_p_sgd_plan_worked_example():
    # Spec 2.14, paper mode n = 1e5, d = 10, eps = 1, delta = 1e-6: B = 51, T = 1960, L_G = 247.9, eta = 9.11e-5,
    # bound 5.60 (printed digits).
    plan = sco.p_sgd_plan(100_000, 10, 1.0, 1e-6, mode="paper")
    (phase,) = plan.phases
    assert (phase.batch, phase.rounds) == (51, 1960)
    close(phase.step, 9.11e-5, rel=1e-3)
    close(plan.bound, 5.60, rel=1e-3)


# -- Theorem 4.7: beta_s = (eps n)^{2/3} L / (d^{1/3} D ln^{2/3}(d/delta)).
@pytest.mark.parametrize("n, d, eps, delta, lip, diam", [(10_000, 10, 1.0, 1e-6, 1.0, 1.0),
                                                        (123_456, 64, 3.0, 1e-5, 0.3, 2.0),
                                                        (5_000, 3, 0.25, 1e-8, 4.0, 0.5)])
def test_smoothing_beta(n, d, eps, delta, lip, diam):
    expected = (eps * n) ** (2 / 3) * lip / (d ** (1 / 3) * diam * math.log(d / delta) ** (2 / 3))
    close(sco.smoothing_beta(n, d, eps, delta, lip, diam), expected)


# -- AC-SA constant: "paper" (Thm 4.3): L_t (t+1) = (T+2)^{3/2} sigma/D + beta; "lan" (spec S-6, Lan 2012):
#    nu = max(2 beta, (T+2)^{3/2} sigma/(sqrt 6 D)).
@pytest.mark.parametrize("T, sigma, diam, beta", [(20, 2.624, 1.0, 1.0), (206, 0.083, 3.0, 0.2), (52, 0.01, 1.0, 7.0)])
def test_acsa_nu(T, sigma, diam, beta):
    close(sco.acsa_nu(T, sigma, diam, beta, "paper"), (T + 2) ** 1.5 * sigma / diam + beta)
    close(sco.acsa_nu(T, sigma, diam, beta, "lan"), max(2 * beta, (T + 2) ** 1.5 * sigma / (math.sqrt(6) * diam)))


# -- Theorem 4.3: B = n^{3/5} d^{1/5} L^{2/5} ln^{2/5}(d/delta) / (eps^{2/5} beta^{2/5} D^{2/5}) (rounded, in [1, n]),
#    T = floor(n/B), sigma_or^2 = L^2/B + Var_vec(B)/B^2.
@pytest.mark.parametrize("n, d, eps, delta, beta", [(100_000, 10, 1.0, 1e-6, 1.0), (1_000_000, 10, 1.0, 1e-6, 1.0),
                                                   (300_000, 25, 2.0, 1e-5, 4.0)])
def test_p_agd_batch(n, d, eps, delta, beta):
    plan = sco.p_agd_plan(n, d, eps, delta, 1.0, 1.0, smoothness=beta, mode="paper", schedule="paper")
    (phase,) = plan.phases
    B = min(max(round(n ** 0.6 * d ** 0.2 * math.log(d / delta) ** 0.4 / (eps * beta) ** 0.4), 1), n)
    T = n // B
    g, b, p = _paper_pvec(eps, delta, B, d)
    sigma = math.sqrt(1 / B + d * (2 / g) ** 2 * (B / 4 + B * b * p * (1 - p)) / B**2)
    assert (phase.batch, phase.rounds) == (B, T)
    close(phase.step, (T + 2) ** 1.5 * sigma + beta)
    close(plan.bound, beta / T**2 + sigma / math.sqrt(T))


# -- Algorithm 6 / Lemma C.4: zeta^2 = 8 L^2 ln(2/delta)/(B^2 eps^2) per draw on the batch MEAN, i.e. std B zeta on
#    the batch sum; requires 0 < eps, delta < 1.
@pytest.mark.parametrize("n, d, eps, delta, lip", [(100_000, 10, 0.5, 1e-6, 1.0), (20_000, 4, 0.9, 1e-4, 2.0),
                                                  (500_000, 50, 0.1, 1e-8, 0.25)])
def test_pan_private_noise(n, d, eps, delta, lip):
    plan = sco.pan_private_plan(n, d, eps, delta, lip, 1.0, smoothness=1.0)
    (phase,) = plan.phases
    B = phase.batch
    close(phase.noise_std, B * math.sqrt(8 * lip**2 * math.log(2 / delta) / (B * B * eps * eps)))


# -- Lemma B.6: T = min{n, eps^2 n^2/(d ln^2(nd/delta))} (floored, >= 1).
@pytest.mark.parametrize("n, d, eps, delta", [(10_000, 10, 1.0, 1e-6), (1_000, 3, 4.0, 1e-5), (100_000, 200, 0.5, 1e-8)])
def test_pgd_rounds(n, d, eps, delta):
    expected = max(1, min(n, math.floor(eps**2 * n**2 / (d * math.log(n * d / delta) ** 2))))
    assert sco.pgd_rounds(n, d, eps, delta) == expected
    assert 1 < expected  # non-trivial inputs


# -- Algorithm 5: eps_r = eps/(2 sqrt(2 T ln(1/delta))), delta_r = delta/(T+1).
@pytest.mark.parametrize("eps, delta, T", [(1.0, 1e-6, 50), (4.0, 1e-5, 7), (0.3, 1e-8, 1234)])
def test_pgd_round_budget(eps, delta, T):
    er, dr = sco.pgd_round_budget(eps, delta, T, "advanced")
    close(er, eps / (2 * math.sqrt(2 * T * math.log(1 / delta))))
    close(dr, delta / (T + 1))


# -- Advanced composition (Dwork, Rothblum & Vadhan 2010; Dwork-Roth Thm 3.20), spec 3.4's form with
#    delta' = delta - k delta0: eps = sqrt(2 k ln(1/delta')) eps0 + k eps0 (e^{eps0} - 1).
@pytest.mark.parametrize("eps0, delta0, k, delta", [(0.05, 1e-9, 100, 1e-6), (0.3, 1e-7, 12, 1e-5),
                                                    (0.01, 2e-10, 2000, 1e-6)])
def test_compose_epsilon_advanced(eps0, delta0, k, delta):
    slack = delta - k * delta0
    expected = math.sqrt(2 * k * math.log(1 / slack)) * eps0 + k * eps0 * (math.exp(eps0) - 1)
    close(sco.compose_epsilon(eps0, delta0, k, delta, "advanced"), expected)


# -- Lemma 3.1's exact variance (Appendix A.1) with the actual rounding: inputs shifted by Delta_2 into [0, Delta],
#    Delta = 2 Delta_2, r_i = frac((x_i + Delta_2) g/Delta): Var_j = (Delta/g)^2 (sum_i r_i(1 - r_i) + m b p (1-p)).
def test_pvec_variance_exact():
    import numpy as np

    from dpjax.primitives import shuffle_protocols as sp

    bound = 0.8
    x = np.array([[0.13, -0.5, 0.79], [-0.8, 0.31, 0.0], [0.444, 0.7, -0.123], [0.05, -0.33, 0.6]])
    for g, b, p in [(32, 116_000, 0.37), (7, 5000, 0.12), (100, 40, 0.45)]:
        got = sp.pvec_variance(x, sp.PvecParams(g, b, p), bound)  # host numbers (create() would device_put)
        for j in range(3):
            rr = [((xi + bound) * g / (2 * bound)) % 1.0 for xi in x[:, j]]
            expected = (2 * bound / g) ** 2 * (sum(r * (1 - r) for r in rr) + 4 * b * p * (1 - p))
            close(float(got[j]), expected)


# -- Claim A.8 / Corollary A.9 (robust shuffle privacy): with only a fraction h >= 1/3 of honest users, the printed
#    guarantee becomes eps/h (needs eps <= 1, g >= 3); the "lemma" form certifies P_vec on ceil(h m) inputs.
@pytest.mark.parametrize("g, b, p, m, d, delta, h", [(32, 3_000_000, 0.45, 1000, 10, 1e-5, 0.5),
                                                    (64, 9_000_000, 0.4, 4000, 30, 1e-7, 0.75),
                                                    (40, 5_000_000, 0.3, 2000, 16, 1e-6, 0.34)])
def test_pvec_round_epsilon_honest_fraction(g, b, p, m, d, delta, h):
    gamma = delta / (d + 1)
    eps_hat = 3 * g * math.sqrt(10 * math.log(2 / gamma) / (b * m * p))
    printed = 18 * eps_hat**2 + 6 * eps_hat * math.sqrt(math.log(1 / gamma))
    assert printed <= 1
    close(sco.pvec_round_epsilon(g, b, p, m, d, delta, "printed", h), printed / h)
    mh = math.ceil(h * m)
    eh = 3 * g * math.sqrt(10 * math.log(2 / gamma) / (b * mh * p))
    s = 4 * d / g**2 + 4 * math.sqrt(d) / g + 1
    em = eh * (2 / g + 1)
    close(sco.pvec_round_epsilon(g, b, p, m, d, delta, "lemma", h),
          math.sqrt(2 * math.log(1 / gamma) * s) * eh + (math.exp(em) - 1) / em * s * eh**2)


# -- Lemma C.5 (pan-private, paper form): eps = Delta sqrt(2 ln(2/delta))/zeta with Delta = 2L on the batch sum.
@pytest.mark.parametrize("zeta, lip, delta", [(40.0, 1.0, 1e-6), (12.5, 0.5, 1e-5), (300.0, 3.0, 1e-9)])
def test_pan_private_epsilon_paper(zeta, lip, delta):
    close(sco.pan_private_epsilon(zeta, lip, delta, "pan-paper"), 2 * lip * math.sqrt(2 * math.log(2 / delta)) / zeta)


# -- Analytic Gaussian (Balle & Wang 2018 Thm 8) by hand: delta(eps) = Phi(s/(2 sd) - eps sd/s) - e^eps Phi(-s/(2 sd)
#    - eps sd/s), inverted by bisection.
def _gauss_eps(sd, s, delta):
    phi = lambda t: 0.5 * math.erfc(-t / math.sqrt(2))  # noqa: E731
    f = lambda e: phi(s / (2 * sd) - e * sd / s) - math.exp(e) * phi(-s / (2 * sd) - e * sd / s) - delta  # noqa: E731
    lo, hi = 0.0, 1.0
    while f(hi) > 0:
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return hi


# -- gaussian_approx diagnostic (spec 3.3): count noise N(0, n b p (1-p)), shift norm g + 2 sqrt(d); and the
#    pan-analytic form (exact Gaussian, std B zeta, sensitivity 2L).
@pytest.mark.parametrize("g, b, p, n, d, delta", CASES)
def test_gaussian_approx_epsilon(g, b, p, n, d, delta):
    expected = _gauss_eps(math.sqrt(n * b * p * (1 - p)), g + 2 * math.sqrt(d), delta)
    close(pv.pvec_gaussian_approx_epsilon(g, b, p, n, d, delta), expected, rel=1e-10)  # two root finds
    close(sco.pan_private_epsilon(40.0 * g, 1.5, delta, "pan-analytic"), _gauss_eps(40.0 * g, 3.0, delta), rel=1e-10)


# -- Trial regrouping (counts above int32): per = ceil(b/groups), p' = b p/(groups per) keeps b p.
@pytest.mark.parametrize("b, p, groups", [(20_061_188, 0.4999, 4), (3_028_194, 0.31, 7), (1001, 0.2, 3)])
def test_grouped_trials(b, p, groups):
    from dpjax.accounting.sco_transcript import grouped_trials

    per = math.ceil(b / groups)
    got_b, got_p = grouped_trials(b, p, groups)
    assert got_b == per and groups * per >= b
    close(got_p, b * p / (groups * per))


# -- Communication (spec 3.5; Corollaries B.8-B.11 computed exactly): each P_vec call costs a user d (g + b) bits;
#    a sequential protocol uses each user in one call.
def test_bits_per_user():
    plan = sco.p_sgd_plan(100_000, 10, 1.0, 1e-6, mode="paper")
    g, b, _ = _paper_pvec(1.0, 1e-6, 51, 10)
    assert sco.bits_per_user(plan) == 10 * (g + b)


# -- numerical mode (spec 2.3, not from the paper): PLD of k + Bin(m, p) vs Bin(m, p) with pessimistic rounding.
#    Pinned to the exact hockey-stick divergence of the two binomials (d = 1, one call), both orders, computed with
#    exact binomial masses: dpjax's epsilon must be >= the exact one (pessimistic) and within the PLD discretisation.
def _exact_shift_eps(m, p, k, delta):
    lc = lambda z: math.lgamma(m + 1) - math.lgamma(z + 1) - math.lgamma(m - z + 1)  # noqa: E731
    pmf = [math.exp(lc(z) + z * math.log(p) + (m - z) * math.log1p(-p)) for z in range(m + 1)]
    P = lambda z: pmf[z] if 0 <= z <= m else 0.0  # noqa: E731
    Q = lambda z: pmf[z - k] if 0 <= z - k <= m else 0.0  # noqa: E731

    def dlt(e):
        ee = math.exp(e)
        return max(sum(max(P(z) - ee * Q(z), 0.0) for z in range(m + k + 1)),
                   sum(max(Q(z) - ee * P(z), 0.0) for z in range(m + k + 1)))

    lo, hi = 0.0, 20.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if dlt(mid) > delta else (lo, mid)
    return hi


@pytest.mark.parametrize("g, b, p, n, delta", [(8, 20, 0.3, 50, 1e-3), (12, 30, 0.45, 40, 1e-4), (6, 100, 0.1, 20, 1e-2)])
def test_numerical_epsilon_vs_exact(g, b, p, n, delta):
    k = math.ceil(2 + g)  # spread shift for d = 1
    exact = _exact_shift_eps(n * b, p, k, delta)
    cert = pv.pvec_numerical_epsilon(g, b, p, n, 1, delta)
    assert cert.shift == k and cert.heuristic
    assert exact - 1e-9 <= cert.epsilon <= exact + 5e-3  # pessimistic; 1e-4 discretisation of the loss values


# -- Kairouz, Oh & Viswanath (2015) Thm 3.3, used by P_GD's "optimal" composition: k-fold (eps0, delta0) at
#    eps = (k - 2i) eps0 is delta = 1 - (1 - delta0)^k (1 - delta_i), delta_i = sum_{l=0}^{i-1} C(k, l)
#    (e^{(k-l) eps0} - e^{(k-2i+l) eps0})/(1 + e^{eps0})^k (the printed form); between those points, the hockey-stick
#    of the composed randomized-response pair: sum_j C(k,j) e^{(k-j) eps0}/(1+e^{eps0})^k (1 - e^{eps - (k-2j) eps0})_+.
@pytest.mark.parametrize("eps0, delta0, k, i", [(0.1, 1e-7, 50, 20), (0.5, 1e-6, 12, 3), (0.02, 1e-9, 400, 190)])
def test_kov_optimal_composition(eps0, delta0, k, i):
    eps = (k - 2 * i) * eps0
    di = math.fsum(math.comb(k, l) * (math.exp((k - l) * eps0) - math.exp((k - 2 * i + l) * eps0))
                   for l in range(i)) / (1 + math.exp(eps0)) ** k
    close(sco.optimal_composition_delta(eps0, delta0, k, eps), 1 - (1 - delta0) ** k * (1 - di), rel=1e-10)
    e2 = eps + 0.37 * eps0  # off the grid
    rr = math.fsum(math.comb(k, j) * math.exp((k - j) * eps0) / (1 + math.exp(eps0)) ** k
                   * max(0.0, 1 - math.exp(e2 - (k - 2 * j) * eps0)) for j in range(k + 1))
    close(sco.optimal_composition_delta(eps0, delta0, k, e2), 1 - (1 - delta0) ** k * (1 - rr), rel=1e-10)


# -- P_GD (Algorithm 5, Lemma B.6, Theorem 4.9), paper mode: T = min{n, eps^2 n^2/(d ln^2(nd/delta))}; each round
#    P_vec at eps_r = eps/(2 sqrt(2T ln(1/delta))), delta_r = delta/(T+1) on all n users; non-smooth: envelope
#    beta = (L/D) min{sqrt n, eps n/(sqrt d ln^{3/2}(nd/delta))}; eta = D/(L sqrt T), capped at 2/beta (stability,
#    Lemma B.5); bound D^2/(2 eta T) + eta (L^2 + Var_vec/n^2)/2 + L^2 T eta/n + L^2/(2 beta).
@pytest.mark.parametrize("n, d, eps, delta, lip, diam", [(10_000, 10, 1.0, 1e-6, 1.0, 1.0), (2_000, 3, 4.0, 1e-5, 0.5, 2.0),
                                                        (50_000, 20, 2.0, 1e-7, 2.0, 0.3)])
def test_p_gd_plan(n, d, eps, delta, lip, diam):
    plan = sco.p_gd_plan(n, d, eps, delta, lip, diam, mode="paper")
    (phase,) = plan.phases
    T = max(1, min(n, math.floor(eps**2 * n**2 / (d * math.log(n * d / delta) ** 2))))
    er, dr = eps / (2 * math.sqrt(2 * T * math.log(1 / delta))), delta / (T + 1)
    g, b, p = _paper_pvec(er, dr, n, d)
    beta = (lip / diam) * min(math.sqrt(n), eps * n / (math.sqrt(d) * math.log(n * d / delta) ** 1.5))
    eta = min(diam / (lip * math.sqrt(T)), 2 / beta)
    var_mean = d * (2 * lip / g) ** 2 * (n / 4 + n * b * p * (1 - p)) / n**2
    bound = (diam**2 / (2 * eta * T) + eta * (lip**2 + var_mean) / 2 + lip**2 * T * eta / n + lip**2 / (2 * beta))
    assert phase.rounds == T and (phase.pvec.g, phase.pvec.b) == (g, b)
    close(phase.pvec.epsilon, er)
    close(phase.pvec.delta, dr)
    close(phase.smoothing, beta)
    close(phase.step, eta)
    close(plan.bound, bound)
