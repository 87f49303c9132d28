"""User-level DP convex optimisation (Ghazi, Kamath, Kumar, Leeman, Manurangsi, Varadarajan & Zhang, "On user-level
private convex optimization", ICML 2023): kappa, TDLap, the Gaussian scale, deletion-sensitivity targets, phase
counts and thresholds pinned to the printed formulas, computed by hand.

Issue #42 item 3. Algorithm 1 line 3 is garbled in print; it is read as in shared/spec/user_level_private_convex_opt.md
(A5): eps' = eps/2, delta' = delta/(e^eps + 2), kappa = ceil(1 + ln(1/delta')/eps') (rounded up, A2), sigma =
sqrt(2 ln(2/delta')) 8 kappa Delta/eps'. The O(.) constants of Corollary 3.7 / Lemma C.1 / Theorem 3.1 are the spec's
explicit ones (A12, A13, A17); each comment says so. Plain ``math`` only (no dpjax call); tolerance 1e-12 relative
unless a comment says why, exact for integers.

Inventory (calculator -> test):

* ``accounting.user_level.user_level_params`` (eps', delta', kappa, sigma/Delta, n_min = 8 kappa + 2) ->
  ``test_user_level_params``, ``test_user_level_params_spec_table``
* ``accounting.user_level.a1_params`` (paper Gaussian) -> ``test_user_level_params``
* ``accounting.user_level.tdlap_pmf`` (Definition 3.4) -> ``test_tdlap_pmf``
* ``accounting.user_level.user_level_audit`` / ``a1_certified`` (Theorem 3.3 proof) -> ``test_certified_pair``
* ``accounting.user_level.phased_erm_params`` / ``user_level.phased.num_phases`` (Algorithm 3, T = ceil(log2 nm)) ->
  ``test_phased_erm_params``
* ``accounting.user_level.compose_user_level`` (basic within a group, max over disjoint groups) -> ``test_compose``
* ``accounting.user_level.exact_evaluations`` (sum_{u <= 4 kappa + 1} C(n, u)) -> ``test_exact_evaluations``
* ``accounting.user_level.log_pair_count`` (P_r of Corollary 3.7) -> ``test_deletion_sensitivity``
* ``accounting.user_level.deletion_sensitivity_bound`` (Delta_expl, Corollary 3.7 explicit) -> ``test_deletion_sensitivity``
* ``accounting.user_level.gamma_target`` / ``certificate_sensitivity`` (Lemma 3.8 + Lemma C.1, Appendix C) ->
  ``test_certificate_sensitivity``
* ``accounting.user_level.noise_multiplier`` / ``b1_sigma`` / ``crossover_m`` -> ``test_noise_multiplier_and_crossover``
* ``accounting.user_level.phased_sco_groups`` (Algorithm 4 halving ranges; equal split A4b) -> ``test_phased_sco_groups``
* ``user_level.phased.phase_lambdas`` / ``sco_lambda`` / ``problems.erm_lambda`` / ``phased.localisation_radius``
  (Algorithm 3 line 5, Theorems 4.1/5.1 lambda, R' of Algorithms 5/6) -> ``test_phase_schedules``
* ``accounting.user_level.min_users`` (Theorem 3.1's n >= C log(1/delta)/eps made explicit, per mechanism) ->
  ``test_min_users``
* Not pinned by hand: ``exact_feasible`` / ``MAX_EXACT_*`` (a compute budget, not a formula of the paper);
  ``UserLevelPrivacy`` / ``privacy()`` reports (compositions of the pinned per-call numbers; report fields are
  issue #42 item 4).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpjax.accounting import user_level as ul
from dpjax.user_level import phased, problems

pytestmark = pytest.mark.privacy
REL = 1e-12


def close(actual, expected, rel=REL):
    assert actual == pytest.approx(expected, rel=rel, abs=0.0), (actual, expected)


def _a1(eps, delta):
    """Algorithm 1 line 3 (read per spec A5): eps', delta', kappa, sigma/Delta."""
    ep, dp = eps / 2, delta / (math.exp(eps) + 2)
    kappa = math.ceil(1 + math.log(1 / dp) / ep)
    return ep, dp, kappa, math.sqrt(2 * math.log(2 / dp)) * 8 * kappa / ep


@pytest.mark.parametrize("eps, delta", [(1.0, 1e-5), (0.5, 1e-6), (0.37, 3e-9), (0.9, 0.01)])
def test_user_level_params(eps, delta):
    ep, dp, kappa, s = _a1(eps, delta)
    got = ul.user_level_params(eps, delta)
    close(got.eps_prime, ep)
    close(got.delta_prime, dp)
    close(got.kappa_raw, 1 + math.log(1 / dp) / ep)
    assert got.kappa == kappa and got.radius == 4 * kappa and got.n_min == 8 * kappa + 2
    close(got.sigma_over_delta, s)
    a1 = ul.a1_params(eps, delta, 0.037)
    close(a1.sigma, s * 0.037)
    assert (a1.kappa, a1.radius) == (kappa, 4 * kappa)


# -- Spec 3.5 reference table (printed to 4-7 digits): eps, delta -> delta', kappa raw -> used, p(0), p(kappa), sigma/Delta.
@pytest.mark.parametrize("eps, delta, dp, raw, kappa, p0, pk, s", [
    (1.0, 1e-5, 2.119416e-6, 27.1287, 28, 2.0366e-7, 0.2449, 2349.97),
    (1.0, 1e-6, 2.119416e-7, 31.7339, 32, 2.7562e-8, 0.2449, 2901.74),
    (0.5, 1e-6, 2.740686e-7, 61.4395, 62, 2.3072e-8, 0.1244, 11153.90),
    (1.0, 1e-9, 2.119416e-10, 45.5494, 46, 2.5133e-11, 0.2449, 4988.31)])
def test_user_level_params_spec_table(eps, delta, dp, raw, kappa, p0, pk, s):
    got = ul.user_level_params(eps, delta)
    close(got.delta_prime, dp, rel=1e-6)
    close(got.kappa_raw, raw, rel=1e-5)
    assert got.kappa == kappa
    close(got.sigma_over_delta, s, rel=5e-6)  # printed to 2 decimals
    pmf = ul.tdlap_pmf(got.eps_prime, got.kappa)
    close(float(pmf[0]), p0, rel=5e-4)
    close(float(pmf[kappa]), pk, rel=5e-4)


# -- Definition 3.4: TDLap on {0..2 kappa}, p(r) = exp(-eps |r - kappa|)/Z, Z = 1 + 2 sum_{j=1}^{kappa} e^{-eps j}
#    = 1 + 2 e^{-eps}(1 - e^{-eps kappa})/(1 - e^{-eps}) (geometric series).
@pytest.mark.parametrize("eps, kappa", [(0.5, 28), (0.25, 62), (1.3, 5)])
def test_tdlap_pmf(eps, kappa):
    z = 1 + 2 * math.exp(-eps) * (1 - math.exp(-eps * kappa)) / (1 - math.exp(-eps))
    pmf = ul.tdlap_pmf(eps, kappa)
    assert pmf.shape == (2 * kappa + 1,)
    for r in (0, 1, kappa - 1, kappa, 2 * kappa):
        close(float(pmf[r]), math.exp(-eps * abs(r - kappa)) / z, rel=1e-13 * kappa + 1e-12)


# -- Theorem 3.3's proof: the released pair is (2 eps', p(0) + p(2 kappa) + e^{eps'} delta_G) with
#    delta_G = Phi(-eps'/mu + mu/2) - e^{eps'} Phi(-eps'/mu - mu/2), mu = 8 kappa Delta/sigma (Balle & Wang Thm 8).
def _phi(x):
    return 0.5 * math.erfc(-x / math.sqrt(2))


def _delta_g(mu, eps):
    return _phi(-eps / mu + mu / 2) - math.exp(eps) * _phi(-eps / mu - mu / 2)


@pytest.mark.parametrize("ep, kappa, sens, sigma", [(0.5, 3, 1.0, 30.0), (0.2, 6, 0.1, 4.0), (1.1, 2, 2.0, 25.0)])
def test_certified_pair(ep, kappa, sens, sigma):
    z = 1 + 2 * math.exp(-ep) * (1 - math.exp(-ep * kappa)) / (1 - math.exp(-ep))
    mu = 8 * kappa * sens / sigma
    expected = 2 * math.exp(-ep * kappa) / z + math.exp(ep) * _delta_g(mu, ep)
    assert 1e-4 < expected < 1
    e, d = ul.a1_certified(ul.a1_test_params(ep, kappa, sens, sigma))
    close(e, 2 * ep)
    close(d, expected, rel=1e-10)  # Phi differences: dpjax works in log space, here erfc (1e-10 covers both)


@pytest.mark.parametrize("eps, delta", [(1.0, 1e-5), (0.5, 1e-6), (0.8, 1e-3)])
def test_user_level_audit(eps, delta):
    ep, dp, kappa, s = _a1(eps, delta)
    z = 1 + 2 * math.exp(-ep) * (1 - math.exp(-ep * kappa)) / (1 - math.exp(-ep))
    dg = _delta_g(8 * kappa / s, ep)
    e, d = ul.user_level_audit(ul.user_level_params(eps, delta))
    close(e, eps)
    close(d, 2 * math.exp(-ep * kappa) / z + math.exp(ep) * dg, rel=1e-8)  # delta_G ~ 1e-7: erfc of two tails
    assert d <= delta


# -- Algorithm 3 (Phased-ERM): T = ceil(log2(n m)) (base 2 per spec A6), each phase at (eps/T, delta/T).
#    Spec 3.5: n = 1e4, m = 1e2 -> T = 20, kappa_ph = 719, n_min = 5754, sigma/Delta = 1.404e6.
@pytest.mark.parametrize("eps, delta, n, m", [(1.0, 1e-6, 10_000, 100), (1.0, 1e-6, 100_000, 1000), (0.5, 1e-5, 3000, 7)])
def test_phased_erm_params(eps, delta, n, m):
    t = math.ceil(math.log2(n * m))
    ep, dp, kappa, s = _a1(eps / t, delta / t)
    got = ul.phased_erm_params(eps, delta, n, m)
    assert got["phases"] == t == phased.num_phases(n, m)
    close(got["phase_epsilon"], eps / t)
    close(got["phase_delta"], delta / t)
    assert (got["kappa"], got["radius"], got["n_min"]) == (kappa, 4 * kappa, 8 * kappa + 2)
    close(got["sigma_over_delta"], s)
    assert got["feasible"] == (n >= 8 * kappa + 2)


def test_phased_erm_spec_value():
    got = ul.phased_erm_params(1.0, 1e-6, 10_000, 100)
    assert (got["phases"], got["kappa"], got["n_min"]) == (20, 719, 5754)
    close(got["sigma_over_delta"], 1.404e6, rel=5e-4)


def test_compose():
    # basic composition within a user group, max over disjoint groups (proofs of Theorems 4.1/5.1).
    calls = [(0.1, 1e-7, "a"), (0.25, 2e-7, "a"), (0.3, 5e-8, "b"), (0.05, 4e-7, "b"), (0.2, 1e-7, "c")]
    e, d = ul.compose_user_level(calls)
    close(e, max(0.1 + 0.25, 0.3 + 0.05, 0.2))
    close(d, max(1e-7 + 2e-7, 5e-8 + 4e-7, 1e-7))


@pytest.mark.parametrize("n, kappa", [(12, 2), (18, 4), (10, 3)])
def test_exact_evaluations(n, kappa):
    assert ul.exact_evaluations(n, kappa) == sum(math.comb(n, u) for u in range(min(4 * kappa + 1, n) + 1))


# -- Corollary 3.7 with the union bound made explicit (spec 2.4, A12): P_r = sum_{s=0}^r C(n, s)(n - s);
#    Delta_expl = 5 c_K G sqrt(ln P_r + ln(1/beta))/(mu (n - r - 1) sqrt(m)).
#    Spec: n = 1000, r = 128: ln P_r ~ 386 (and ln P_128 + ln(1/0.01) = 390.82).
@pytest.mark.parametrize("n, m, r, beta, G, mu, ck", [(1000, 50, 128, 0.01, 1.0, 1.0, 1), (300, 7, 20, 1e-3, 2.5, 0.3, 2),
                                                     (5000, 1000, 112, 0.05, 0.7, 4.0, 2)])
def test_deletion_sensitivity(n, m, r, beta, G, mu, ck):
    log_p = math.log(sum(math.comb(n, s) * (n - s) for s in range(r + 1)))  # exact integers
    close(ul.log_pair_count(n, r), log_p)
    close(ul.deletion_sensitivity_bound(n, m, r, beta, G, mu, ck),
          5 * ck * G * math.sqrt(log_p + math.log(1 / beta)) / (mu * (n - r - 1) * math.sqrt(m)))


def test_pair_count_spec_value():
    close(ul.log_pair_count(1000, 128) + math.log(100), 390.82, rel=2e-5)


# -- Appendix C (explicit form, spec 2.6, A13): gamma_target = 5 c_K G sqrt((ln n + ln(1/beta))/m) (Lemma 3.8 with a
#    union bound over n users); Delta_C = (2r + 1) gamma_target/(mu (n - r - 1)) (Lemma C.1.2).
@pytest.mark.parametrize("n, m, r, beta, G, mu, ck", [(1000, 50, 128, 0.01, 1.0, 1.0, 1), (300, 7, 20, 1e-3, 2.5, 0.3, 2),
                                                     (5000, 1000, 112, 0.05, 0.7, 4.0, 2)])
def test_certificate_sensitivity(n, m, r, beta, G, mu, ck):
    gt = 5 * ck * G * math.sqrt((math.log(n) + math.log(1 / beta)) / m)
    close(ul.gamma_target(n, m, beta, G, ck), gt)
    close(ul.certificate_sensitivity(n, m, r, beta, G, mu, ck), (2 * r + 1) * gt / (mu * (n - r - 1)))


# -- Spec 3.4: A = sqrt(2 ln(2/delta')) (8 kappa/eps') 5 c_K sqrt(ln P_{4 kappa} + ln(1/beta)) n/(n - 4 kappa - 1)
#    (sigma_A2 = A G/(mu n sqrt m)); B1: sigma = 2G sqrt(2 ln(1.25/delta))/(mu n eps) (Dwork-Roth Thm A.1, replace-one
#    sensitivity 2G/(mu n)); crossover m* = (A/(2 sqrt(2 ln(1.25/delta))/eps))^2.
#    Spec 3.5 (eps = 1, delta = 1e-6, beta = 0.01, c_K = 1): n = 1000: sigma_A2 mu sqrt(m)/G = 329.31, m* = 9.656e8.
@pytest.mark.parametrize("eps, delta, beta, n, ck", [(1.0, 1e-6, 0.01, 1000, 1), (1.0, 1e-6, 0.01, 10_000, 1),
                                                    (0.5, 1e-5, 0.05, 2000, 2)])
def test_noise_multiplier_and_crossover(eps, delta, beta, n, ck):
    ep, dp, kappa, s = _a1(eps, delta)
    r = 4 * kappa
    log_p = math.log(sum(math.comb(n, j) * (n - j) for j in range(r + 1)))
    A = s * 5 * ck * math.sqrt(log_p + math.log(1 / beta)) * n / (n - r - 1)
    close(ul.noise_multiplier(eps, delta, beta, n, 1, ck), A, rel=1e-11)  # lgamma-summed vs exact-integer ln P_r
    gt = 5 * ck * math.sqrt(math.log(n) + math.log(1 / beta))
    close(ul.noise_multiplier(eps, delta, beta, n, 1, ck, variant="A2c"), s * (2 * r + 1) * gt / (n - r - 1) * n)
    close(ul.b1_sigma(eps, delta, n, 1.3, 0.2), 2 * 1.3 * math.sqrt(2 * math.log(1.25 / delta)) / (0.2 * n * eps))
    close(ul.crossover_m(eps, delta, beta, n, ck), (A / (2 * math.sqrt(2 * math.log(1.25 / delta)) / eps)) ** 2, rel=1e-11)


def test_noise_multiplier_spec_values():
    close(ul.noise_multiplier(1.0, 1e-6, 0.01, 1000, 1) / 1000, 329.31, rel=2e-5)
    close(ul.crossover_m(1.0, 1e-6, 0.01, 1000), 9.656e8, rel=1e-4)


# -- Algorithm 4 (halving, half-open ranges per spec A9): T = floor(log2(n/N0)), phase i gets (n/2^i, n/2^{i-1}];
#    A4b (equal split, spec A8): T = ceil(log2(n m)) groups of floor(n/T) users; N0 = 8 kappa + 2 (spec A17).
#    Spec 3.5: n = 1e4, N0 = 258 -> 5000, 2500, 1250, 625, 312 users.
@pytest.mark.parametrize("n, m, eps, delta", [(10_000, 10, 1.0, 1e-6), (100_000, 50, 1.0, 1e-6), (40_000, 3, 0.6, 1e-5)])
def test_phased_sco_groups(n, m, eps, delta):
    n0 = 8 * _a1(eps, delta)[2] + 2
    t = math.floor(math.log2(n / n0))
    assert ul.phased_sco_groups(n, m, eps, delta, "A4") == [(n // 2**i, n // 2 ** (i - 1)) for i in range(1, t + 1)]
    tb = math.ceil(math.log2(n * m))
    size = n // tb
    assert size >= n0
    assert ul.phased_sco_groups(n, m, eps, delta, "A4b") == [(i * size, (i + 1) * size) for i in range(tb)]


def test_phased_sco_spec_value():
    groups = ul.phased_sco_groups(10_000, 10, 1.0, 1e-6, "A4")
    assert [b - a for a, b in groups] == [5000, 2500, 1250, 625, 313]  # (n/2^i, n/2^{i-1}]: 625 -> 312.5, floor ends


# -- Algorithm 3 line 5: lambda_i = lambda 4^i; Theorem 4.1: lambda = (G/R) A sqrt(d)/(n sqrt m) (spec A18);
#    Theorem 5.1 corrected (spec A7): lambda = (G/R) max{A T sqrt(d)/(n sqrt m), sqrt(T/(n m))};
#    Algorithms 5/6 (spec A16): R' = sigma_0 (sqrt d + sqrt(2 ln(1/beta))).
@pytest.mark.parametrize("G, R, n, m, d, A, T", [(1.0, 2.0, 1000, 50, 10, 329.31, 1), (0.5, 1.0, 20_000, 400, 3, 38.7, 23),
                                                 (3.0, 0.2, 500, 5, 100, 1e-3, 12)])
def test_phase_schedules(G, R, n, m, d, A, T):
    lam = 0.013
    np.testing.assert_allclose(phased.phase_lambdas(lam, T), [lam * 4**i for i in range(1, T + 1)], rtol=1e-15)
    close(problems.erm_lambda(G, R, n, m, d, A), G / R * A * math.sqrt(d) / (n * math.sqrt(m)))
    close(phased.sco_lambda(G, R, n, m, d, A, T), G / R * max(A * T * math.sqrt(d) / (n * math.sqrt(m)), math.sqrt(T / (n * m))))
    close(phased.localisation_radius(0.7, d, 0.01), 0.7 * (math.sqrt(d) + math.sqrt(2 * math.log(100))))


# -- Minimum users (spec 3.3, A17 explicit constants): A1/A2/A2c n >= N0 = 8 kappa + 2; A4: 2 N0 (T = floor(log2(n/N0))
#    >= 1); A3: the smallest n with n >= 8 kappa(eps/T, delta/T) + 2, T = ceil(log2(n m)); A4b: n >= T N0;
#    A5/A6: their second stage at (eps/2, delta/2) (A6 splits the users in half: twice that); B1/B2: 1.
def _min_n(need):
    n = 2
    while need(n) > n:  # both requirements grow only through log2(n m): scan upward from the fixed point's left
        n += 1
    return n


@pytest.mark.parametrize("eps, delta, m", [(1.0, 1e-6, 100), (0.5, 1e-5, 3), (0.8, 1e-8, 1000)])
def test_min_users(eps, delta, m):
    n0 = lambda e, d: 8 * _a1(e, d)[2] + 2  # noqa: E731
    T = lambda n: math.ceil(math.log2(n * m))  # noqa: E731
    a3 = lambda e, d: _min_n(lambda n: n0(e / T(n), d / T(n)))  # noqa: E731
    a4b = lambda e, d: _min_n(lambda n: T(n) * n0(e, d))  # noqa: E731
    assert ul.min_users("A2", eps, delta, m) == ul.min_users("A1", eps, delta, m) == n0(eps, delta)
    assert ul.min_users("A4", eps, delta, m) == 2 * n0(eps, delta)
    assert ul.min_users("A3", eps, delta, m) == a3(eps, delta)
    assert ul.min_users("A4b", eps, delta, m) == a4b(eps, delta)
    assert ul.min_users("A5", eps, delta, m) == max(n0(eps / 2, delta / 2), a3(eps / 2, delta / 2))
    assert ul.min_users("A6", eps, delta, m) == 2 * max(n0(eps / 2, delta / 2), a4b(eps / 2, delta / 2))
    assert ul.min_users("B1", eps, delta, m) == 1
