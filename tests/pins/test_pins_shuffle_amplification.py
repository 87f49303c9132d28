"""Amplification by shuffling and the ISRL-DP shuffle chain pinned to the printed formulas, computed by hand.

Issue #42 item 3. Sources: Feldman, McMillan & Talwar, "Hiding among the clones" (FOCS 2021; Thm 3.1 closed form,
Thm 3.2 dominating pair, Thm 3.8 approximate-DP extension as reconstructed in shared/spec/isrl_dp_federated_learning.md
3.6), Dwork & Roth (2014) Thm 3.20, amplification by subsampling (Ullman 2017 / Girgis et al. Lemma 3: 2 q eps; the
tight ln(1 + q(e^eps - 1)) of Balle, Barthe & Gaboardi 2018), Lowy & Razaviyayn (ICLR 2023) Theorem G.1's chain (spec
3.6). Every expected value is computed here with plain ``math`` / ``math.comb`` (no dpjax call); tolerance 1e-12
relative unless a comment says why not.

Inventory (calculator -> test):

* ``accounting.shuffle.fmt_closed_form_epsilon`` (FMT Thm 3.1 + its range condition) -> ``test_fmt_closed_form``
* ``accounting.shuffle.fmt_numerical_delta`` (FMT Thm 3.2 dominating pair, evaluated exactly) ->
  ``test_fmt_numerical_delta`` (brute-force enumeration of the pair with exact binomials)
* ``accounting.shuffle.fmt_numerical_epsilon`` (its inverse) -> ``test_fmt_numerical_epsilon``
* ``accounting.shuffle.approx_dp_shuffle_delta`` (Thm G.1 / FMT Thm 3.8, reconstructed) -> ``test_approx_dp_shuffle_delta``
* ``accounting.shuffle.subsampled_epsilon`` (tight and paper 2 q eps) -> ``test_subsampled_epsilon``
* ``accounting.shuffle.advanced_composition`` (Dwork-Roth Thm 3.20) -> ``test_advanced_composition``
* ``accounting.shuffle.record_inclusion_probability`` -> ``test_record_inclusion_probability``
* ``accounting.shuffle.isrl_shuffle_chain`` mode ``paper`` (Thm G.1 chain, spec 3.6) -> ``test_isrl_shuffle_chain_paper``
"""

from __future__ import annotations

import math

import pytest

from dpjax.accounting import shuffle as sh

pytestmark = pytest.mark.privacy
REL = 1e-12


def close(actual, expected, rel=REL):
    assert actual == pytest.approx(expected, rel=rel, abs=0.0), (actual, expected)


# -- FMT Thm 3.1: eps = ln(1 + (e^eps0 - 1)/(e^eps0 + 1) (8 sqrt(e^eps0 ln(4/delta))/sqrt(n) + 8 e^eps0/n)),
#    valid for eps0 <= ln(n/(16 ln(2/delta))).
@pytest.mark.parametrize("eps0, n, delta", [(0.5, 1000, 1e-6), (2.0, 50_000, 1e-8), (1.2, 3000, 1e-5)])
def test_fmt_closed_form(eps0, n, delta):
    assert eps0 <= math.log(n / (16 * math.log(2 / delta)))
    e = math.exp(eps0)
    expected = math.log(1 + (e - 1) / (e + 1) * (8 * math.sqrt(e * math.log(4 / delta)) / math.sqrt(n) + 8 * e / n))
    close(sh.fmt_closed_form_epsilon(eps0, n, delta), expected)


def test_fmt_closed_form_range():
    # eps0 just above ln(n/(16 ln(2/delta))) (n = 1000, delta = 1e-6: 1.3165...) is refused.
    limit = math.log(1000 / (16 * math.log(2 / 1e-6)))
    with pytest.raises(ValueError, match="eps0="):
        sh.fmt_closed_form_epsilon(limit * 1.001, 1000, 1e-6)


# -- FMT Thm 3.2: C ~ Bin(n-1, e^{-eps0}), A ~ Bin(C, 1/2), D ~ Bern(p), p = e^eps0/(e^eps0 + 1);
#    P = (A + D, C - A + 1 - D), Q = (A + 1 - D, C - A + D). Given C = c the pair is fixed by its first coordinate k:
#    P(k|c) = p Bin(k-1; c, 1/2) + (1-p) Bin(k; c, 1/2), Q(k|c) = (1-p) Bin(k-1; c, 1/2) + p Bin(k; c, 1/2);
#    delta(eps) = sum_c w_c sum_k (P(k|c) - e^eps Q(k|c))_+ (P and Q are mirror images: both orders agree).
def _fmt_delta_brute(eps0, n, eps):
    pc = math.exp(-eps0)
    p = math.exp(eps0) / (math.exp(eps0) + 1)
    ee = math.exp(eps)
    half = lambda k, c: math.comb(c, k) * 0.5**c if 0 <= k <= c else 0.0  # noqa: E731
    total = 0.0
    for c in range(n):
        w = math.comb(n - 1, c) * pc**c * (1 - pc) ** (n - 1 - c)
        row = 0.0
        for k in range(c + 2):
            P = p * half(k - 1, c) + (1 - p) * half(k, c)
            Q = (1 - p) * half(k - 1, c) + p * half(k, c)
            row += max(P - ee * Q, 0.0)
        total += w * row
    return total


@pytest.mark.parametrize("eps0, n, eps", [(1.0, 40, 0.3), (2.0, 120, 0.5), (0.5, 25, 0.1), (3.0, 200, 1.0)])
def test_fmt_numerical_delta(eps0, n, eps):
    expected = _fmt_delta_brute(eps0, n, eps)
    assert 1e-6 < expected < 0.5
    close(sh.fmt_numerical_delta(eps0, n, eps), expected, rel=1e-10)  # sums of ~n^2 terms in different orders


@pytest.mark.parametrize("eps0, n, delta", [(1.0, 40, 1e-2), (2.0, 120, 1e-3)])
def test_fmt_numerical_epsilon(eps0, n, delta):
    eps = sh.fmt_numerical_epsilon(eps0, n, delta)  # bisection to 1e-7 absolute, upper end returned
    assert _fmt_delta_brute(eps0, n, eps) <= delta
    assert _fmt_delta_brute(eps0, n, eps - 2e-7) > delta


# -- Thm G.1 (reconstructed FMT Thm 3.8): delta = delta_s + (e^eps + 1)(1 + e^{-eps0}/2) n delta0.
@pytest.mark.parametrize("eps, eps0, n, ds, d0", [(0.2, 0.9, 100, 1e-7, 1e-9), (0.05, 0.3, 5000, 1e-6, 3e-12),
                                                 (1.3, 2.5, 64, 2e-5, 7e-8)])
def test_approx_dp_shuffle_delta(eps, eps0, n, ds, d0):
    close(sh.approx_dp_shuffle_delta(eps, eps0, n, ds, d0), ds + (math.exp(eps) + 1) * (1 + math.exp(-eps0) / 2) * n * d0)


# -- Subsampling: tight ln(1 + q (e^eps - 1)); paper (Ullman 2017, used by ISRL Thm D.1/G.1) 2 q eps for eps <= 1.
@pytest.mark.parametrize("eps, q", [(0.7, 0.01), (0.05, 0.3), (0.93, 0.125)])
def test_subsampled_epsilon(eps, q):
    close(sh.subsampled_epsilon(eps, q, "tight"), math.log(1 + q * (math.exp(eps) - 1)))
    close(sh.subsampled_epsilon(eps, q, "paper"), 2 * q * eps)


# -- Dwork-Roth Thm 3.20: k-fold (eps, delta) => (sqrt(2k ln(1/delta')) eps + k eps (e^eps - 1), k delta + delta').
@pytest.mark.parametrize("eps, delta, k, dp", [(0.01, 1e-9, 1000, 1e-6), (0.2, 1e-8, 35, 5e-6), (0.003, 0.0, 20_000, 1e-5)])
def test_advanced_composition(eps, delta, k, dp):
    e, d = sh.advanced_composition(eps, delta, k, dp)
    close(e, math.sqrt(2 * k * math.log(1 / dp)) * eps + k * eps * (math.exp(eps) - 1))
    close(d, k * delta + dp)


# -- P(record in a K-record batch from n): K/n without replacement, 1 - (1 - 1/n)^K with replacement.
@pytest.mark.parametrize("n, k", [(1238, 15), (100, 99), (7, 3)])
def test_record_inclusion_probability(n, k):
    close(sh.record_inclusion_probability(n, k, "without-replacement"), k / n)
    close(sh.record_inclusion_probability(n, k, "with-replacement"), 1 - (1 - 1 / n) ** k, rel=1e-11)  # expm1/log1p form


# -- The analytic Gaussian mechanism by hand (Balle & Wang 2018 Thm 8): for l2 sensitivity s and std sigma,
#    delta(eps) = Phi(s/(2 sigma) - eps sigma/s) - e^eps Phi(-s/(2 sigma) - eps sigma/s); eps(delta) by bisection.
def _phi(x):
    return 0.5 * math.erfc(-x / math.sqrt(2))


def _gauss_eps(sigma, sens, delta):
    mu = sens / sigma
    f = lambda e: _phi(mu / 2 - e / mu) - math.exp(e) * _phi(-mu / 2 - e / mu) - delta  # noqa: E731
    lo, hi = 0.0, 1.0
    while f(hi) > 0:
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return hi


# -- ISRL Thm G.1 chain, paper mode (spec 3.6 with q = M q_rec/N, q_rec = K/n; K = 1 gives the printed
#    delta0 = n N delta/(18 R M^2)): delta0 = delta/(18 R M q); eps0 = exact Gaussian eps (sensitivity 2L, std sigma)
#    at delta0; delta_s = M delta0; eps_hat = FMT Thm 3.1 at (eps0, M, delta_s); delta_hat = delta_s +
#    (e^eps_hat + 1)(1 + e^{-eps0}/2) M delta0; eps_r = 2 q eps_hat; delta_r = q delta_hat; total =
#    sqrt(2 R ln(2/delta)) eps_r + R eps_r (e^eps_r - 1), R delta_r + delta/2.
@pytest.mark.parametrize("sigma, lip, n, silos, reports, rounds, delta", [
    (10.0, 1.0, 100, 2000, 2000, 50, 1e-6), (6.0, 0.5, 50, 5000, 4000, 20, 1e-5), (20.0, 2.0, 300, 1000, 3000, 200, 1e-7)])
def test_isrl_shuffle_chain_paper(sigma, lip, n, silos, reports, rounds, delta):
    got = sh.isrl_shuffle_chain(sigma, lip, n, silos, reports, rounds, delta, "paper")
    M, N, R = reports, silos, rounds
    q = (1 / n) * M / N
    d0 = delta / (18 * R * M * q)
    close(d0, n * N * delta / (18 * R * M * M))  # the printed split for K = 1
    e0 = _gauss_eps(sigma, 2 * lip, d0)
    ds = M * d0
    e = math.exp(e0)
    e_hat = math.log(1 + (e - 1) / (e + 1) * (8 * math.sqrt(e * math.log(4 / ds)) / math.sqrt(M) + 8 * e / M))
    d_hat = ds + (math.exp(e_hat) + 1) * (1 + math.exp(-e0) / 2) * M * d0
    e_r, d_r = 2 * q * e_hat, q * d_hat
    # eps0 is a root (dpjax: brentq at rtol 1e-13, here bisection): 1e-10 relative covers both root tolerances.
    close(got["eps0"], e0, rel=1e-10)
    close(got["delta0"], d0)
    close(got["eps_shuffle"], e_hat, rel=1e-10)
    close(got["delta_shuffle"], d_hat, rel=1e-10)
    close(got["eps_round"], e_r, rel=1e-10)
    close(got["epsilon"], math.sqrt(2 * R * math.log(2 / delta)) * e_r + R * e_r * (math.exp(e_r) - 1), rel=1e-10)
    close(got["delta"], R * d_r + delta / 2, rel=1e-10)


# -- Chua et al. (ICML 2024, arXiv 2403.17673) single-epoch LOWER bound of shuffled DP-SGD at T > 1 steps
#    (accounting.shuffle_lower_bound.single_epoch_delta; T = 1 is pinned to the Gaussian mechanism in
#    tests/accounting/test_shuffle_lower_bound.py). The pair P = (1/T) sum_t N(hi e_t, z^2 I_T),
#    Q = (1/T) sum_t N(lo e_t, z^2 I_T) (paper pair hi, lo = 2, 1; swap pair 2, 0) and the cube sets
#    E_C = {max_t x_t > C}: P(E_C) = 1 - Phi((C - hi)/z) Phi(C/z)^(T-1) (every mixture component alike),
#    delta(eps) >= max_C P(E_C) - e^eps Q(E_C). By hand: Phi from math.erfc, 1 - x as -expm1(log x) (no
#    cancellation at small delta), the max over C by a 20 001-point grid on [-5z, hi + 12 z] refined by
#    golden-section search. At the maximum the objective is flat to second order, so the two searches agree to
#    ~1e-12 relative; 1e-9 leaves room for the library's bounded search (xatol 1e-12 on C).
def _log_phi(u):
    return math.log(0.5 * math.erfc(-u / math.sqrt(2)))


def _cube_delta_by_hand(z, t, eps, hi, lo):
    def f(c):
        p_out = -math.expm1(_log_phi((c - hi) / z) + (t - 1) * _log_phi(c / z))
        q_out = -math.expm1(_log_phi((c - lo) / z) + (t - 1) * _log_phi(c / z))
        return p_out - math.exp(eps) * q_out

    a, b, n = -5 * z, hi + 12 * z, 20_000
    grid = [a + (b - a) * i / n for i in range(n + 1)]
    i = max(range(n + 1), key=lambda j: f(grid[j]))
    lo_c, hi_c = grid[max(i - 1, 0)], grid[min(i + 1, n)]
    g = (math.sqrt(5) - 1) / 2
    for _ in range(200):  # golden section on the bracket around the grid's best point
        c1, c2 = hi_c - g * (hi_c - lo_c), lo_c + g * (hi_c - lo_c)
        if f(c1) >= f(c2):
            hi_c = c2
        else:
            lo_c = c1
    return max(0.0, f(grid[i]), f(0.5 * (lo_c + hi_c)))


@pytest.mark.parametrize("z, t, eps, pair", [(0.8, 10, 1.0, "paper"), (1.5, 100, 0.5, "paper"), (0.6, 4, 2.0, "paper"),
                                             (1.0, 20, 1.0, "swap")])
def test_shuffle_single_epoch_lower_bound(z, t, eps, pair):
    from dpjax.accounting import shuffle_lower_bound as lb

    hi, lo = {"paper": (2.0, 1.0), "swap": (2.0, 0.0)}[pair]
    expected = _cube_delta_by_hand(z, t, eps, hi, lo)
    assert expected > 1e-8  # a non-trivial bound at every pinned input
    close(lb.single_epoch_delta(z, t, eps, pair=pair), expected, rel=1e-9)
