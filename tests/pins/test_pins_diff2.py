"""DIFF2 (Murata & Suzuki, "DIFF2: Differential private optimization via gradient differences for nonconvex
distributed learning", ICML 2023) noise calibrations and RDP closed forms pinned to the printed formulas.

Issue #42 item 3. Equation labels E2-E12 are those of shared/spec/diff2_gradient_differences.md 3.1-3.5 (which
transcribe Lemma B.4/B.6/B.7/B.8, Prop. 4.1, Prop. E.2 and the closed form at the end of Appendix E). Every expected
value is computed here with plain ``math`` (no dpjax call); tolerance 1e-12 relative, exact for integers.

Inventory (calculator -> test):

* ``accounting.diff2.alpha0`` (Prop. 4.1 alpha_0) / ``count_restarts`` (m = ceil(R/T)) -> ``test_alpha0_and_restarts``
* ``accounting.diff2.rdp_gaussian`` / ``rdp_diff2_round`` / ``diff2_rdp`` (Lemma B.6, E3) -> ``test_round_rdp``
* ``accounting.diff2.epsilon_at_alpha`` (Lemma B.4, E4) -> ``test_round_rdp``
* ``accounting.diff2.tight_epsilon_from_slope`` / ``tight_slope`` (E7 / E8) -> ``test_tight_slope``
* ``accounting.diff2.diff2_gd_sigmas`` paper (E5/E6) and tight (E8 split) -> ``test_diff2_gd_sigmas_paper``,
  ``test_diff2_gd_sigmas_tight``, ``test_diff2_reference_table``
* ``accounting.diff2.dpgd_sigma`` (3.4: 4 alpha_0 R/(n^2 P^2 eps), tight 2R/(n^2P^2 A*)) -> ``test_dpgd_sigma``
* ``accounting.diff2.diff2_epsilon`` (E4 at alpha_0; E7) -> ``test_diff2_epsilon``
* ``accounting.diff2.rdp_subsampled_wor_gaussian`` / ``bvr_local_rdp`` (Lemma B.7, E2) -> ``test_lemma_b7``
* ``accounting.diff2.lemma_b8_bound`` / ``lemma_b8_conditions`` (Lemma B.8) -> ``test_lemma_b8``
* ``accounting.diff2.diff2_bvr_rdp`` (E9) -> ``test_diff2_bvr_rdp``
* ``accounting.diff2.bvr_sigma3_closed_form`` (E11, E12) -> ``test_bvr_sigma3_closed_form``
* ``accounting.diff2.diff2_bvr_sigmas`` (Prop. E.2: sigma_1, sigma_2 closed; sigma_3 smallest with E10) ->
  ``test_diff2_bvr_sigmas``
"""

from __future__ import annotations

import math

import pytest

from dpjax.accounting import diff2 as df

pytestmark = pytest.mark.privacy
REL = 1e-12


def close(actual, expected, rel=REL):
    assert actual == pytest.approx(expected, rel=rel, abs=0.0), (actual, expected)


# -- Prop. 4.1: alpha_0 = 1 + ceil(2 log(1/delta)/eps); m = ceil(R/T) restart rounds ((r-1) mod T == 0, r = 1..R).
@pytest.mark.parametrize("eps, delta, R, T", [(3.0, 1e-5, 2000, 6), (5.0, 1e-5, 2000, 20), (0.7, 1e-7, 999, 37)])
def test_alpha0_and_restarts(eps, delta, R, T):
    assert df.alpha0(eps, delta) == 1 + math.ceil(2 * math.log(1 / delta) / eps)
    assert df.count_restarts(R, T) == sum(1 for r in range(1, R + 1) if (r - 1) % T == 0) == math.ceil(R / T)


# -- Lemma B.6: a round with std sigma C and sensitivity 2C/(nP) is (alpha, 2 alpha/(n^2 P^2 sigma^2))-RDP;
#    E3: RDP_total = 2 alpha m/(n^2P^2 sigma1^2) + 2 alpha (R-m)/(n^2P^2 sigma2^2); E4: eps = RDP + log(1/delta)/(alpha-1).
@pytest.mark.parametrize("alpha, R, T, n, P, s1, s2, delta", [(9, 2000, 20, 1651, 10, 2.3e-3, 2.0e-2, 1e-5),
                                                            (6.5, 500, 7, 300, 4, 1.1e-2, 0.05, 1e-6),
                                                            (2.5, 120, 11, 4801, 3, 5e-3, 4e-2, 1e-4)])
def test_round_rdp(alpha, R, T, n, P, s1, s2, delta):
    m = math.ceil(R / T)
    close(df.rdp_gaussian(alpha, s1 * n * P / 2), alpha / (2 * (s1 * n * P / 2) ** 2))
    close(df.rdp_diff2_round(alpha, s1, n, P), 2 * alpha / (n**2 * P**2 * s1**2))
    rdp = 2 * alpha * m / (n**2 * P**2 * s1**2) + 2 * alpha * (R - m) / (n**2 * P**2 * s2**2)
    close(df.diff2_rdp(alpha, R, T, n, P, s1, s2), rdp)
    close(df.epsilon_at_alpha(rdp, alpha, delta), rdp + math.log(1 / delta) / (alpha - 1))


# -- E7: min_{alpha>1} A alpha + log(1/delta)/(alpha-1) = A + 2 sqrt(A log(1/delta)); E8 its inverse
#    A*(eps) = (sqrt(log(1/delta) + eps) - sqrt(log(1/delta)))^2. Spec values (delta = 1e-5): A* = 0.1735 (eps = 3),
#    0.4496 (eps = 5).
@pytest.mark.parametrize("eps, delta, slope", [(3.0, 1e-5, 0.1667), (5.0, 1e-5, 0.4167), (0.4, 1e-8, 0.002)])
def test_tight_slope(eps, delta, slope):
    lg = math.log(1 / delta)
    close(df.tight_epsilon_from_slope(slope, delta), slope + 2 * math.sqrt(slope * lg))
    close(df.tight_slope(eps, delta), (math.sqrt(lg + eps) - math.sqrt(lg)) ** 2)


def test_tight_slope_spec_values():
    close(df.tight_slope(3.0, 1e-5), 0.1735, rel=5e-4)
    close(df.tight_slope(5.0, 1e-5), 0.4496, rel=5e-4)


# -- Prop. 4.1 (E5, E6): sigma1^2 = 4 u alpha_0 m/(n^2 P^2 eps), sigma2^2 = (4u/(u-1)) alpha_0 (R-m)/(n^2 P^2 eps);
#    eps (not eps^2) in the denominators (spec pitfall 3).
@pytest.mark.parametrize("eps, delta, R, T, n, P, u", [(3.0, 1e-5, 2000, 6, 1651, 10, 1.25), (5.0, 1e-5, 2000, 20, 1651, 10, 1.25),
                                                     (1.5, 1e-6, 700, 9, 2938, 7, 2.0), (0.8, 1e-4, 300, 13, 500, 3, 1.7)])
def test_diff2_gd_sigmas_paper(eps, delta, R, T, n, P, u):
    a0 = 1 + math.ceil(2 * math.log(1 / delta) / eps)
    m = math.ceil(R / T)
    s1, s2 = df.diff2_gd_sigmas(eps, delta, R, T, n, P, u, "paper")
    close(s1, math.sqrt(4 * u * a0 * m / (n**2 * P**2 * eps)))
    close(s2, math.sqrt(4 * u / (u - 1) * a0 * (R - m) / (n**2 * P**2 * eps)))
    # plugging E5-E6 into E3 at alpha_0: exactly eps/2 of RDP, so E4 <= eps.
    rdp = 2 * a0 * m / (n**2 * P**2 * s1**2) + 2 * a0 * (R - m) / (n**2 * P**2 * s2**2)
    close(rdp, eps / 2)


# -- Tight split (spec 3.3): sigma1^2 = 2u m/(n^2P^2 A*), sigma2^2 = (2u/(u-1))(R-m)/(n^2P^2 A*).
@pytest.mark.parametrize("eps, delta, R, T, n, P, u", [(3.0, 1e-5, 2000, 6, 1651, 10, 1.25), (1.5, 1e-6, 700, 9, 2938, 7, 2.0),
                                                     (0.8, 1e-4, 300, 13, 500, 3, 1.7)])
def test_diff2_gd_sigmas_tight(eps, delta, R, T, n, P, u):
    lg = math.log(1 / delta)
    a_star = (math.sqrt(lg + eps) - math.sqrt(lg)) ** 2
    m = math.ceil(R / T)
    s1, s2 = df.diff2_gd_sigmas(eps, delta, R, T, n, P, u, "tight")
    close(s1, math.sqrt(2 * u * m / (n**2 * P**2 * a_star)))
    close(s2, math.sqrt(2 * u / (u - 1) * (R - m) / (n**2 * P**2 * a_star)))


# -- Spec 3.3 reference table (delta = 1e-5, R = 2000, P = 10, n_min = 1651, u = 1.25; printed to 4 digits).
@pytest.mark.parametrize("eps, T, dpgd, s1, s2", [(3.0, 6, 9.383e-3, 4.287e-3, 1.915e-2), (3.0, 20, 9.383e-3, 2.346e-3, 2.045e-2),
                                                (3.0, 200, 9.383e-3, 7.418e-4, 2.093e-2), (5.0, 20, 5.935e-3, 1.484e-3, 1.293e-2)])
def test_diff2_reference_table(eps, T, dpgd, s1, s2):
    got1, got2 = df.diff2_gd_sigmas(eps, 1e-5, 2000, T, 1651, 10, 1.25, "paper")
    close(got1, s1, rel=6e-4)
    close(got2, s2, rel=6e-4)
    close(df.dpgd_sigma(eps, 1e-5, 2000, 1651, 10), dpgd, rel=6e-4)


# -- DP-GD (spec 3.4 / A29): sigma^2 = 4 alpha_0 R/(n^2 P^2 eps) (paper, u -> 1, T = 1), 2R/(n^2 P^2 A*) (tight).
@pytest.mark.parametrize("eps, delta, R, n, P", [(3.0, 1e-5, 2000, 1651, 10), (3.0, 1e-5, 2000, 2938, 10),
                                                (0.6, 1e-7, 150, 333, 5)])
def test_dpgd_sigma(eps, delta, R, n, P):
    a0 = 1 + math.ceil(2 * math.log(1 / delta) / eps)
    lg = math.log(1 / delta)
    a_star = (math.sqrt(lg + eps) - math.sqrt(lg)) ** 2
    close(df.dpgd_sigma(eps, delta, R, n, P, "paper"), math.sqrt(4 * a0 * R / (n**2 * P**2 * eps)))
    close(df.dpgd_sigma(eps, delta, R, n, P, "tight"), math.sqrt(2 * R / (n**2 * P**2 * a_star)))
    assert df.diff2_gd_sigmas(eps, delta, R, 1, n, P)[1] is None


# -- diff2_epsilon: paper = E4 at alpha_0(eps_target); tight = E7 with A = RDP_total(alpha)/alpha.
@pytest.mark.parametrize("R, T, n, P, s1, s2, delta, target", [(2000, 20, 1651, 10, 2.3e-3, 2.0e-2, 1e-5, 3.0),
                                                              (500, 7, 300, 4, 1.1e-2, 0.05, 1e-6, 1.0),
                                                              (120, 11, 4801, 3, 5e-3, 4e-2, 1e-4, 2.0)])
def test_diff2_epsilon(R, T, n, P, s1, s2, delta, target):
    m = math.ceil(R / T)
    A = 2 * m / (n**2 * P**2 * s1**2) + 2 * (R - m) / (n**2 * P**2 * s2**2)
    a0 = 1 + math.ceil(2 * math.log(1 / delta) / target)
    close(df.diff2_epsilon(R, T, n, P, s1, s2, delta, "paper", eps_target=target), A * a0 + math.log(1 / delta) / (a0 - 1))
    close(df.diff2_epsilon(R, T, n, P, s1, s2, delta, "tight"), A + 2 * math.sqrt(A * math.log(1 / delta)))


# -- Lemma B.7 (Wang, Balle & Kasiviswanathan 2019 Thm 9), E2 for a Gaussian base (every min{2, .} = 2):
#    eps'(alpha) = 1/(alpha-1) log(1 + g^2 C(alpha,2) min{4(e^{eps(2)} - 1), 2 e^{eps(2)}}
#                  + 2 sum_{j=3}^{alpha} g^j C(alpha,j) e^{(j-1) eps(j)}), then min(eps'(alpha), eps(alpha)).
#    BVR local step: eps(j) = 2 j/(b^2 sigma3^2), g = b/n.
def _e2(alpha, gamma, eps):
    s = 1 + gamma**2 * math.comb(alpha, 2) * min(4 * (math.exp(eps(2)) - 1), 2 * math.exp(eps(2)))
    s += 2 * sum(gamma**j * math.comb(alpha, j) * math.exp((j - 1) * eps(j)) for j in range(3, alpha + 1))
    return min(math.log(s) / (alpha - 1), eps(alpha))


@pytest.mark.parametrize("alpha, sigma3, b, n", [(9, 0.516, 32, 1651), (9, 0.3551, 12, 1651), (6, 1.7, 8, 400),
                                                 (20, 0.9, 50, 10_000)])
def test_lemma_b7(alpha, sigma3, b, n):
    eps = lambda j: 2 * j / (b * b * sigma3 * sigma3)  # noqa: E731
    expected = _e2(alpha, b / n, eps)
    assert expected < eps(alpha)  # amplification active: the E2 branch is the one pinned
    close(df.rdp_subsampled_wor_gaussian(alpha, b / n, eps), expected)
    close(df.bvr_local_rdp(alpha, sigma3, b, n), expected)


def test_lemma_b7_spec_value():
    # Spec 3.1: alpha = 9, b = 32, n = 1651, sigma3 = 0.516: E2 ~ 2.64e-4 per step, simplified (B.8) 2.5e-4.
    close(df.bvr_local_rdp(9, 0.516, 32, 1651), 2.64e-4, rel=5e-3)


# -- Lemma B.8: eps'(alpha) <= (2/3)(4 + e/c) g^2 alpha^2 eps(2)/(alpha - 1) when eps(alpha) <= 1/3,
#    eps(alpha) <= log(1/(2 g alpha)) and g <= eps(2)/(c alpha).
@pytest.mark.parametrize("alpha, sigma3, b, n, c", [(9, 0.6124, 12, 1651, 1.0), (9, 0.516, 32, 1651, 1.0),
                                                    (5, 2.0, 10, 5000, 2.5)])
def test_lemma_b8(alpha, sigma3, b, n, c):
    eps = lambda j: 2 * j / (b * b * sigma3 * sigma3)  # noqa: E731
    g = b / n
    close(df.lemma_b8_bound(alpha, g, eps, c), (2 / 3) * (4 + math.e / c) * g**2 * alpha**2 * eps(2) / (alpha - 1))
    cond = eps(alpha) <= 1 / 3 and eps(alpha) <= math.log(1 / (2 * g * alpha)) and g <= eps(2) / (c * alpha)
    assert df.lemma_b8_conditions(alpha, g, eps, c) == cond


# -- E9: RDP_total = E3 + K ceil(R/P) eps'_3(alpha).
@pytest.mark.parametrize("alpha, R, T, K, b, n, P, s1, s2, s3", [(9, 2000, 20, 10, 12, 1651, 10, 2e-3, 2e-2, 0.4),
                                                               (7, 300, 9, 5, 20, 800, 4, 1e-2, 5e-2, 0.8),
                                                               (12, 64, 5, 3, 6, 250, 3, 2e-2, 0.1, 1.1)])
def test_diff2_bvr_rdp(alpha, R, T, K, b, n, P, s1, s2, s3):
    m = math.ceil(R / T)
    base = 2 * alpha * m / (n**2 * P**2 * s1**2) + 2 * alpha * (R - m) / (n**2 * P**2 * s2**2)
    local = _e2(alpha, b / n, lambda j: 2 * j / (b * b * s3 * s3))
    close(df.diff2_bvr_rdp(alpha, R, T, K, b, n, P, s1, s2, s3), base + K * math.ceil(R / P) * local)


# -- E11/E12 (end of Appendix E, u1 = u2 = 3, c = 1): sigma3^2 = max{(8/3)(4+e) alpha_0^2/(alpha_0-1) 6 K ceil(R/P)
#    /(n^2 eps), 6 alpha_0/b^2}, valid iff b <= min{n/(2 e alpha_0), (4n/(alpha_0 sigma3^2))^{1/3}}.
#    Spec values (eps = 3, delta = 1e-5, R = 2000, P = 10, n = 1651, K = 10, b = 12): sigma3^2 = max{0.2662, 0.375}.
@pytest.mark.parametrize("eps, delta, R, K, b, n, P", [(3.0, 1e-5, 2000, 10, 12, 1651, 10), (1.0, 1e-6, 500, 4, 30, 20_000, 5),
                                                      (5.0, 1e-5, 100, 20, 3, 900, 2)])
def test_bvr_sigma3_closed_form(eps, delta, R, K, b, n, P):
    a0 = 1 + math.ceil(2 * math.log(1 / delta) / eps)
    kc = K * math.ceil(R / P)
    s2 = max((8 / 3) * (4 + math.e) * a0**2 / (a0 - 1) * 6 * kc / (n**2 * eps), 6 * a0 / b**2)
    ok = b <= min(n / (2 * math.e * a0), (4 * n / (a0 * s2)) ** (1 / 3))
    got, got_ok = df.bvr_sigma3_closed_form(eps, delta, R, K, b, n, P)
    close(got, math.sqrt(s2))
    assert got_ok == ok


def test_bvr_sigma3_spec_value():
    s3, ok = df.bvr_sigma3_closed_form(3.0, 1e-5, 2000, 10, 12, 1651, 10)
    close(s3, 0.6124, rel=1e-4)
    assert ok


# -- Prop. E.2: sigma1^2 = 4 u1 alpha_0 m/(n^2P^2 eps), sigma2^2 = 4 u2 alpha_0 (R-m)/(n^2P^2 eps), sigma3 the
#    smallest with 2 K ceil(R/P) eps'_3(alpha_0) <= (1 - 1/u1 - 1/u2) eps (E10; eps'_3 by E2 at gamma = b/n_min).
#    Spec: the bisection gives sigma3 ~ 0.3551 for the reference setting.
@pytest.mark.parametrize("eps, delta, R, T, K, b, n, P, u1, u2", [(3.0, 1e-5, 2000, 20, 10, 12, 1651, 10, 3.0, 3.0),
                                                                (1.0, 1e-6, 500, 7, 4, 30, 20_000, 5, 2.5, 4.0),
                                                                (5.0, 1e-5, 100, 9, 20, 3, 900, 2, 3.0, 2.2)])
def test_diff2_bvr_sigmas(eps, delta, R, T, K, b, n, P, u1, u2):
    a0 = 1 + math.ceil(2 * math.log(1 / delta) / eps)
    m = math.ceil(R / T)
    s1, s2, s3 = df.diff2_bvr_sigmas(eps, delta, R, T, K, b, n, P, u1, u2)
    close(s1, math.sqrt(4 * u1 * a0 * m / (n**2 * P**2 * eps)))
    close(s2, math.sqrt(4 * u2 * a0 * (R - m) / (n**2 * P**2 * eps)))
    budget = (1 - 1 / u1 - 1 / u2) * eps
    lhs = lambda s: 2 * K * math.ceil(R / P) * _e2(a0, b / n, lambda j: 2 * j / (b * b * s * s))  # noqa: E731
    assert lhs(s3) <= budget < lhs(s3 * (1 - 1e-8))  # smallest admissible (bisection to rtol 1e-9)


def test_diff2_bvr_sigma3_spec_value():
    _, _, s3 = df.diff2_bvr_sigmas(3.0, 1e-5, 2000, 20, 10, 12, 1651, 10, 3.0, 3.0)
    close(s3, 0.3551, rel=2e-4)


# -- diff2_bvr_epsilon: Lemma B.4 (Mironov) eps = RDP_total(alpha) + log(1/delta)/(alpha - 1) with E9's
#    RDP_total(alpha) = 2 alpha m/(n^2 P^2 s1^2) + 2 alpha (R - m)/(n^2 P^2 s2^2) + K ceil(R/P) eps'_3(alpha),
#    m = ceil(R/T), eps'_3 by E2 (Lemma B.7) at gamma = b/n; paper: at alpha_0 = 1 + ceil(2 log(1/delta)/eps_target);
#    tight: the min over integer orders 2..max_order.
@pytest.mark.parametrize("R, T, K, b, n, P, s1, s2, s3, delta, target", [
    (2000, 20, 10, 12, 1651, 10, 2e-3, 2e-2, 0.4, 1e-5, 3.0),
    (300, 9, 5, 20, 800, 4, 1e-2, 5e-2, 0.8, 1e-6, 1.0),
    (64, 5, 3, 6, 250, 3, 2e-2, 0.1, 1.1, 1e-4, 2.0)])
def test_diff2_bvr_epsilon(R, T, K, b, n, P, s1, s2, s3, delta, target):
    m = math.ceil(R / T)

    def rdp_total(alpha):
        base = 2 * alpha * m / (n**2 * P**2 * s1**2) + 2 * alpha * (R - m) / (n**2 * P**2 * s2**2)
        return base + K * math.ceil(R / P) * _e2(alpha, b / n, lambda j: 2 * j / (b * b * s3 * s3))

    a0 = 1 + math.ceil(2 * math.log(1 / delta) / target)
    paper = rdp_total(a0) + math.log(1 / delta) / (a0 - 1)
    tight = min(rdp_total(a) + math.log(1 / delta) / (a - 1) for a in range(2, 65))
    close(df.diff2_bvr_epsilon(R, T, K, b, n, P, s1, s2, s3, delta, "paper", eps_target=target), paper)
    close(df.diff2_bvr_epsilon(R, T, K, b, n, P, s1, s2, s3, delta, "tight", max_order=64), tight)
    assert tight <= paper
