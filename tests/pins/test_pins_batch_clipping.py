"""Batch clipping / shuffling f-DP terms (van Dijk, Nguyen, Nguyen & Phan, "Generalizing DP-SGD with shuffling and
batch clipping", Appendices B-F) and the GDP toolkit they use (Dong, Roth & Su 2022; Balle & Wang 2018) pinned to the
printed formulas, computed by hand.

Issue #42 item 3. The paper's closed forms are pinned verbatim (``paper_bounds``), including the ones
shared/spec/dpsgd_shuffling_batch_clipping.md marks invalid (B2: subsampling tails e^{-qE}; B3: Theorem F.1's q_j):
dpjax reproduces them behind a ``valid`` flag and certifies with the exact law instead; the exact laws are pinned by
brute-force enumeration. The trade-off f_{eps,delta} uses "max" where the paper prints "min" (a typo: with min it
would be identically 0). Plain Python (``math``, ``statistics.NormalDist``, ``itertools``) only, no dpjax call;
tolerance 1e-12 relative unless a comment says why, exact for integers.

Inventory (calculator -> test):

* ``accounting.gdp.gdp_delta`` (DRS Cor. 2.13 / Balle-Wang Thm 8, the paper's eq. 7) -> ``test_gdp_delta``
* ``accounting.gdp.gdp_compose`` / ``gdp_group`` / ``gaussian_mechanism_mu`` / ``classical_gaussian_sigma`` ->
  ``test_gdp_algebra``
* ``accounting.fdp.tradeoff_gaussian`` (G_mu) / ``tradeoff_eps_delta`` (f_{eps,delta}) -> ``test_tradeoffs``
* ``accounting.fdp.f_lower`` / ``f_lower_beta_star`` (Def. 5.4) / ``delta_from_lower`` -> ``test_f_lower``
* ``accounting.fdp.f_upper`` (Def. 5.3) -> ``test_f_upper``
* ``accounting.fdp.mixture_delta`` / ``mixture_tradeoff`` (Lemma B.5 with the c = 0 atom) -> ``test_mixture``
* ``accounting.batch_clipping.round_occupancy_law`` (App. E.1 per-round L law) -> ``test_round_occupancy_law``
* ``accounting.batch_clipping.c2_law`` (Def. 5.1 law of c^2; shuffle and subsample) -> ``test_c2_law_shuffle``,
  ``test_c2_law_subsample_g1``
* ``accounting.batch_clipping.batch_clipping_delta`` (Def. 5.2 mixture) -> ``test_c2_law_subsample_g1``
* ``accounting.batch_clipping.shuffle_bose_einstein_qj`` (Thm F.1's printed q_j) -> ``test_bose_einstein_qj``
* ``accounting.batch_clipping.standard_dp_sgd_clt_mu`` (CLT reference) -> ``test_clt_mu``
* ``accounting.batch_clipping.paper_bounds`` (Lemmas E.2-E.5, F.2, Thm F.1) -> ``test_paper_bounds_*``
"""

from __future__ import annotations

import itertools
import math
from statistics import NormalDist

import pytest

from dpjax.accounting import batch_clipping as bc
from dpjax.accounting import fdp, gdp

pytestmark = pytest.mark.privacy
REL = 1e-12
_N = NormalDist()


def close(actual, expected, rel=REL):
    assert actual == pytest.approx(expected, rel=rel, abs=0.0), (actual, expected)


def phi(x):
    return 0.5 * math.erfc(-x / math.sqrt(2))


def gauss_delta(mu, eps):
    """Eq. 7: delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)."""
    return phi(-eps / mu + mu / 2) - math.exp(eps) * phi(-eps / mu - mu / 2)


def G(mu, a):
    """G_mu(a) = Phi(Phi^{-1}(1 - a) - mu)."""
    if a <= 0:
        return 1.0
    if a >= 1:
        return 0.0
    return phi(_N.inv_cdf(1 - a) - mu)


# -- Eq. 7. Spec V2: mu = 0.5: delta(0) = 1.974127e-1, delta(1) = 6.829595e-3; mu = sqrt(10)/2: delta(2) = 1.704654e-1.
@pytest.mark.parametrize("mu, eps", [(0.5, 1.0), (1.0, 0.5), (1.5811388300841898, 2.0), (3.1622776601683795, 4.0)])
def test_gdp_delta(mu, eps):
    close(gdp.gdp_delta(mu, eps), gauss_delta(mu, eps), rel=1e-11)  # log-space vs erfc difference
    close(gdp.gdp_delta(mu, 0.0), 2 * phi(mu / 2) - 1, rel=1e-11)


def test_gdp_delta_spec_values():
    close(gdp.gdp_delta(0.5, 0.0), 1.974127e-1, rel=1e-6)
    close(gdp.gdp_delta(0.5, 1.0), 6.829595e-3, rel=1e-6)
    close(gdp.gdp_delta(math.sqrt(10) / 2, 2.0), 1.704654e-1, rel=1e-6)


# -- GDP algebra: composition sqrt(sum mu_i^2) (DRS Cor. 3.3); group g mu (DRS Thm 2.14); Gaussian mechanism
#    mu = sqrt(k) Delta/sigma; Dwork-Roth Thm A.1 sigma = sqrt(2 ln(1.25/delta)) Delta/eps (eps < 1).
def test_gdp_algebra():
    close(gdp.gdp_compose(0.5, 1.2), 1.3)
    close(gdp.gdp_compose(0.3, 0.4, 1.2), 1.3)
    close(gdp.gdp_compose(*[0.25] * 16), 1.0)
    assert gdp.gdp_group(0.7, 4) == pytest.approx(2.8, rel=REL)
    close(gdp.gaussian_mechanism_mu(3.0, 2.0, 10), math.sqrt(10) * 2 / 3)
    close(gdp.gaussian_mechanism_mu(0.4, 0.1, 7), math.sqrt(7) * 0.1 / 0.4)
    for eps, delta, s in [(0.5, 1e-5, 1.0), (0.9, 1e-7, 0.25), (0.1, 1e-3, 3.0)]:
        close(gdp.classical_gaussian_sigma(eps, delta, s), math.sqrt(2 * math.log(1.25 / delta)) * s / eps)


# -- G_mu(a) (spec V1: G_1(0.05) = 0.740489, G_1.5(0.2) = 0.255147); f_{eps,delta}(a) = max{0, 1 - delta - e^eps a,
#    e^{-eps}(1 - delta - a)} (paper prints "min": typo).
@pytest.mark.parametrize("mu, a", [(1.0, 0.05), (1.5, 0.2), (0.5, 0.37), (2.3, 0.011)])
def test_tradeoffs(mu, a):
    close(fdp.tradeoff_gaussian(mu, a), G(mu, a), rel=1e-10)  # ndtri vs NormalDist.inv_cdf (both ~1e-15 abs)
    for eps, delta in [(0.5, 1e-3), (2.0, 0.05), (0.1, 0.2)]:
        close(fdp.tradeoff_eps_delta(eps, delta, a),
              max(0.0, 1 - delta - math.exp(eps) * a, math.exp(-eps) * (1 - delta - a)))


def test_tradeoff_spec_values():
    close(fdp.tradeoff_gaussian(1.0, 0.05), 0.740489, rel=2e-6)
    close(fdp.tradeoff_gaussian(1.5, 0.2), 0.255147, rel=2e-6)
    close(fdp.tradeoff_gaussian(0.5, 0.05), 0.873865, rel=2e-6)


# -- Def. 5.4: beta* the root of G_mu(b) - l = b; f^L(a) = max{0, G_mu(a) - l} on [0, beta*],
#    G_mu(min{1, a + l}) on [beta*, 1]; delta(eps) certified by f^L = delta_GDP(eps; mu) + l.
#    Spec V5 (mu = 1.5, l = 0.01): beta* = 0.221658, f^L(0.05) = 0.547587, f^L(0.5) = 0.063621.
def _beta_star(mu, l):
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if G(mu, mid) - l - mid > 0 else (lo, mid)
    return 0.5 * (lo + hi)


@pytest.mark.parametrize("mu, l", [(1.5, 0.01), (0.8, 0.05), (3.0, 1e-4)])
def test_f_lower(mu, l):
    bs = _beta_star(mu, l)
    close(fdp.f_lower_beta_star(mu, l), bs, rel=1e-10)
    for a in (0.01, 0.05, 0.2, 0.5, 0.9):
        expected = max(0.0, G(mu, a) - l) if a <= bs else G(mu, min(1.0, a + l))
        close(fdp.f_lower(mu, l, a), expected, rel=1e-10)
    for eps in (0.5, 1.0, 2.0):
        close(fdp.delta_from_lower(mu, l, eps), gauss_delta(mu, eps) + l, rel=1e-11)


def test_f_lower_spec_values():
    close(fdp.f_lower_beta_star(1.5, 0.01), 0.221658, rel=5e-6)
    close(fdp.f_lower(1.5, 0.01, 0.05), 0.547587, rel=2e-6)
    close(fdp.f_lower(1.5, 0.01, 0.5), 0.063621, rel=1e-5)


# -- Def. 5.3: beta0 = 1 - Phi(mu/2 - ln(1-u)/mu), beta1 = u + (1-u)(1 - Phi(mu/2 + ln(1-u)/mu));
#    f^U(a) = u + (1-u) G_mu(a) on [0, beta0], beta0 + beta1 - a on [beta0, beta1], G_mu((a-u)/(1-u)) after.
#    Spec V5 (mu = 1.5, u = 0.01): beta0 = 0.224615, beta1 = 0.236364, f^U(0.05) = 0.562011, f^U(0.5) = 0.068463.
@pytest.mark.parametrize("mu, u", [(1.5, 0.01), (0.8, 0.05), (3.0, 1e-3)])
def test_f_upper(mu, u):
    b0 = 1 - phi(mu / 2 - math.log(1 - u) / mu)
    b1 = u + (1 - u) * (1 - phi(mu / 2 + math.log(1 - u) / mu))
    for a in (0.01, 0.05, 0.2, 0.23, 0.5, 0.9):
        if a <= b0:
            expected = u + (1 - u) * G(mu, a)
        elif a <= b1:
            expected = b0 + b1 - a
        else:
            expected = G(mu, (a - u) / (1 - u))
        close(fdp.f_upper(mu, u, a), expected, rel=1e-10)


def test_f_upper_spec_values():
    close(fdp.f_upper(1.5, 0.01, 0.05), 0.562011, rel=2e-6)
    close(fdp.f_upper(1.5, 0.01, 0.5), 0.068463, rel=1e-5)
    close(fdp.f_upper(1.5, 0.01, 0.2), 0.262596, rel=2e-6)


# -- Lemma B.5 mixture {mu: q} incl. a mu = 0 atom: delta(eps) = sum_c q_c delta_GDP(eps; mu_c) (+ dropped mass);
#    f(a) = sum q_c Phi(Lambda/mu_c - mu_c/2) where 1 - a = sum q_c Phi(Lambda/mu_c + mu_c/2) (atom: rejects all
#    for Lambda < 0; a inside its jump is the randomised test at Lambda = 0). Spec V4, law {0: 0.2, 1: 0.5, 2: 0.3}:
#    delta(0.5) = 0.298967, f(0.05) = 0.647857, f(0.3) = 0.303731.
LAW = {0.0: 0.2, 1.0: 0.5, 2.0: 0.3}


def _mixture_f(law, a):
    pos = [(m, q) for m, q in law.items() if m > 0]
    q0 = sum(q for m, q in law.items() if m == 0)
    alpha = lambda lam: (q0 if lam < 0 else 0.0) + sum(q * (1 - phi(lam / m + m / 2)) for m, q in pos)  # noqa: E731
    beta = lambda lam: (q0 if lam > 0 else 0.0) + sum(q * phi(lam / m - m / 2) for m, q in pos)  # noqa: E731
    a_minus, a_plus = alpha(-1e-300), alpha(1e-300)
    if a_plus <= a <= a_minus:  # inside the atom's jump: the randomised test at Lambda = 0, slope -1
        return beta(-1e-300) + (a_minus - a)
    lo, hi = (-200.0, -1e-300) if a > a_minus else (1e-300, 200.0)  # alpha decreasing in lam
    for _ in range(300):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if alpha(mid) > a else (lo, mid)
    return beta(0.5 * (lo + hi))


@pytest.mark.parametrize("a", [0.01, 0.05, 0.3, 0.5, 0.7])
def test_mixture(a):
    close(fdp.mixture_tradeoff(LAW, a), _mixture_f(LAW, a), rel=1e-9)  # two root finds (brentq vs bisection)
    for eps in (0.5, 1.0, 2.0):
        close(fdp.mixture_delta(LAW, eps, 1e-9), 0.5 * gauss_delta(1.0, eps) + 0.3 * gauss_delta(2.0, eps) + 1e-9,
              rel=1e-11)


def test_mixture_spec_values():
    close(fdp.mixture_delta(LAW, 0.5), 0.298967, rel=2e-6)
    close(fdp.mixture_tradeoff(LAW, 0.05), 0.647857, rel=2e-6)
    close(fdp.mixture_tradeoff(LAW, 0.3), 0.303731, rel=2e-6)


# -- App. E.1: t differing records in uniformly random slots of a round with m subsets of s slots; L = number of
#    subsets hit. Brute force over all C(ms, t) slot sets.
def _occupancy_brute(m, s, t):
    counts = [0] * (min(t, m) + 1)
    for slots in itertools.combinations(range(m * s), t):
        counts[len({x // s for x in slots})] += 1
    total = math.comb(m * s, t)
    return [c / total for c in counts]


@pytest.mark.parametrize("m, s, t", [(3, 4, 3), (4, 3, 5), (2, 5, 4), (5, 2, 6)])
def test_round_occupancy_law(m, s, t):
    got = bc.round_occupancy_law(m, s, t)
    expected = _occupancy_brute(m, s, t)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a == pytest.approx(b, rel=REL, abs=1e-15)


# -- Def. 5.1 with shuffling: per epoch the g differing records occupy a uniform g-subset of the N permuted slots;
#    rounds b = 0..B-1 use slots [b ms, (b+1) ms) split into m subsets of s; c_e^2 = sum_rounds L_b^2; over E epochs
#    c^2 is the E-fold convolution. Brute force over all C(N, g) placements.
#    Spec V9: N = 48, g = 3, m = 2, s = 4, B = 6: Pr[c_e^2 = 1..5] = 0.002775, 0.166512, 0.592044, 0.016651, 0.222017.
def _shuffle_epoch_brute(N, g, m, s):
    ms, B = m * s, N // (m * s)
    law = {}
    for slots in itertools.combinations(range(N), g):
        c2 = sum(len({(x % ms) // s for x in slots if x // ms == b}) ** 2 for b in range(B))
        law[c2] = law.get(c2, 0) + 1
    total = math.comb(N, g)
    return {k: v / total for k, v in law.items()}


def _convolve(p, q):
    out = {}
    for a, pa in p.items():
        for b, qb in q.items():
            out[a + b] = out.get(a + b, 0.0) + pa * qb
    return out


@pytest.mark.parametrize("N, g, m, s, E", [(48, 3, 2, 4, 1), (30, 2, 3, 2, 2), (26, 3, 1, 4, 3), (20, 2, 2, 3, 1)])
def test_c2_law_shuffle(N, g, m, s, E):
    epoch = _shuffle_epoch_brute(N, g, m, s)
    law = epoch
    for _ in range(E - 1):
        law = _convolve(law, epoch)
    got = bc.c2_law("shuffle", N, s, m, g, E).as_dict()
    assert set(k for k, v in got.items() if v > 1e-14) == set(law)
    for k, v in law.items():
        close(got[k], v, rel=1e-10)  # 2-D polynomial powers in floats


def test_c2_law_shuffle_spec_value():
    got = bc.c2_law("shuffle", 48, 4, 2, 3, 1).as_dict()
    for k, v in zip(range(1, 6), (0.002775, 0.166512, 0.592044, 0.016651, 0.222017)):
        close(got[k], v, rel=2e-4)


# -- Subsampling with g = 1: each of the E floor(N/(ms)) rounds holds the record with prob ms/N (L in {0, 1}), so
#    c^2 ~ Bin(E floor(N/(ms)), ms/N) (spec Case SS-1); the Def. 5.2 mixture delta(eps) = sum_k Pr[c^2 = k]
#    delta_GDP(eps; sqrt(k)/sigma) + dropped mass.
@pytest.mark.parametrize("N, s, m, E, sigma, eps", [(600, 6, 1, 3, 2.0, 1.0), (1000, 1, 20, 2, 1.5, 2.0), (240, 4, 3, 5, 3.0, 0.5)])
def test_c2_law_subsample_g1(N, s, m, E, sigma, eps):
    ms = m * s
    trials, q = E * (N // ms), ms / N
    pmf = {k: math.comb(trials, k) * q**k * (1 - q) ** (trials - k) for k in range(trials + 1)}
    law = bc.c2_law("subsample", N, s, m, 1, E)
    got = law.as_dict()
    for k in range(0, 25):
        assert got.get(k, 0.0) == pytest.approx(pmf[k], rel=1e-9, abs=1e-18)  # repeated-squaring convolution
    expected = sum(p * gauss_delta(math.sqrt(k) / sigma, eps) for k, p in pmf.items() if k > 0 and p > 1e-30)
    close(bc.batch_clipping_delta(law, sigma, eps), expected + law.dropped, rel=1e-9)


# -- Thm F.1 as printed: q_j = C(N/s, j) C(g-1, j-1)/C(N/s - 1 + g, g). Spec V10 (N = 1000, s = 10, g = 2): paper
#    {1: 0.019802, 2: 0.980198}.
@pytest.mark.parametrize("N, s, g", [(1000, 10, 2), (50_000, 50, 4), (600, 3, 5)])
def test_bose_einstein_qj(N, s, g):
    b = N // s
    got = bc.shuffle_bose_einstein_qj(N, s, g)
    for j in range(1, g + 1):
        close(got[j], math.comb(b, j) * math.comb(g - 1, j - 1) / math.comb(b - 1 + g, g))
    close(math.fsum(got.values()), 1.0)


def test_bose_einstein_spec_value():
    close(bc.shuffle_bose_einstein_qj(1000, 10, 2)[1], 0.019802, rel=3e-5)


# -- Standard-adversary CLT (spec 3.7): mu = sqrt(ms E/N) sqrt(e^{1/sigma^2} - 1). Spec V14: N = 60000, ms = 60,
#    E = 10, sigma = 2: mu = 0.053294.
@pytest.mark.parametrize("N, B, E, sigma", [(60_000, 60, 10, 2.0), (50_000, 256, 3, 1.1), (1000, 10, 50, 4.0)])
def test_clt_mu(N, B, E, sigma):
    close(bc.standard_dp_sgd_clt_mu(N, B, E, sigma), math.sqrt(B * E / N) * math.sqrt(math.exp(1 / sigma**2) - 1))


def test_clt_spec_value():
    close(bc.standard_dp_sgd_clt_mu(60_000, 60, 10, 2.0), 0.053294, rel=1e-5)


# -- Lemma E.5 (SS-BC): q_1 = 1 - prod_{j<g} (N-s-j)/(N-j), q = (N/s) q_1; mu_L = sqrt((1 + 1/sqrt(2qE)) qE)/sigma,
#    mu_U = sqrt((1 - 1/sqrt(2qE)) qE)/sigma, l = u = e^{-qE} (printed; the tails are wrong, spec B2 -> valid=False).
#    SS-1 (Lemmas E.2/E.3): q = 1. Spec V13 (N = 60000, s = 60, E = 10, sigma = 2): g = 2: q = 1.999017,
#    mu_L = 2.4058, mu_U = 2.0511.
@pytest.mark.parametrize("N, s, g, E, sigma", [(60_000, 60, 2, 10, 2.0), (60_000, 60, 4, 10, 2.0), (5000, 25, 3, 7, 1.3)])
def test_paper_bounds_ss_bc(N, s, g, E, sigma):
    q = (N / s) * (1 - math.prod((N - s - j) / (N - j) for j in range(g)))
    qe = q * E
    got = bc.paper_bounds("SS-BC", N, s, 1, g, E, sigma)
    close(got["q"], q)
    close(got["mu_L"], math.sqrt((1 + 1 / math.sqrt(2 * qe)) * qe) / sigma)
    close(got["mu_U"], math.sqrt((1 - 1 / math.sqrt(2 * qe)) * qe) / sigma)
    close(got["l"], math.exp(-qe))
    assert got["valid"] is False
    one = bc.paper_bounds("SS-1", N, s, 1, g, E, sigma)
    close(one["mu_L"], math.sqrt((1 + 1 / math.sqrt(2 * E)) * E) / sigma)


def test_paper_bounds_ss_bc_spec_values():
    got = bc.paper_bounds("SS-BC", 60_000, 60, 1, 2, 10, 2.0)
    close(got["q"], 1.999017, rel=1e-6)
    close(got["mu_L"], 2.4058, rel=5e-5)
    close(got["mu_U"], 2.0511, rel=5e-5)


# -- Lemma E.4 (SS-IC, s = 1): beta = e^{N/(N-g-m)} + gamma, c_L = sqrt(beta min{m, g} g E), mu_L = c_L/sigma,
#    l = e^{-gamma g E}. Spec V13 (N = 60000, m = 60, E = 10, sigma = 2, g = 1, gamma = 1): beta = 3.72105,
#    c_L = 6.1000.
@pytest.mark.parametrize("N, m, g, E, sigma, gamma", [(60_000, 60, 1, 10, 2.0, 1.0), (60_000, 60, 4, 10, 2.0, 2.0),
                                                     (3000, 7, 9, 4, 1.5, 0.5)])
def test_paper_bounds_ss_ic(N, m, g, E, sigma, gamma):
    beta = math.exp(N / (N - g - m)) + gamma
    cl = math.sqrt(beta * min(m, g) * g * E)
    got = bc.paper_bounds("SS-IC", N, 1, m, g, E, sigma, gamma=gamma)
    close(got["beta"], beta)
    close(got["c_L"], cl)
    close(got["mu_L"], cl / sigma)
    close(got["l"], math.exp(-gamma * g * E))


def test_paper_bounds_ss_ic_spec_values():
    got = bc.paper_bounds("SS-IC", 60_000, 1, 60, 1, 10, 2.0, gamma=1.0)
    close(got["beta"], 3.72105, rel=2e-6)
    close(got["c_L"], 6.1000, rel=2e-5)


# -- Lemma F.2 (SH-1): G_{sqrt(E)/sigma}; Thm F.1 batch (SH-BC): mu = sqrt(g E)/sigma, u = g^2/(N/s - g - g^2) per
#    epoch, u_E = min{1, E u}; general clipping (SH-GC): mu = sqrt(g) sqrt(E)/sigma, l = g^2 ms/(N - g) per epoch,
#    l_E = min{1, E l}. Spec V8: N = 60000, ms = 240, g = 2: l = 1.600e-2; N = 50000, s = 50: u = 4.024e-3.
@pytest.mark.parametrize("N, s, m, g, E, sigma", [(60_000, 60, 4, 2, 10, 2.0), (50_000, 50, 1, 2, 3, 1.5),
                                                 (100_000, 20, 8, 3, 5, 0.9)])
def test_paper_bounds_shuffling(N, s, m, g, E, sigma):
    sh1 = bc.paper_bounds("SH-1", N, s, m, g, E, sigma)
    close(sh1["mu_L"], math.sqrt(E) / sigma)
    bcase = bc.paper_bounds("SH-BC", N, s, m, g, E, sigma)
    u = g * g / (N / s - g - g * g)
    close(bcase["mu_L"], math.sqrt(g * E) / sigma)
    close(bcase["u_epoch"], u)
    close(bcase["u"], min(1.0, E * u))
    gc = bc.paper_bounds("SH-GC", N, s, m, g, E, sigma)
    le = g * g * m * s / (N - g)
    close(gc["mu_L"], math.sqrt(g) * math.sqrt(E) / sigma)
    close(gc["l_epoch"], le)
    close(gc["l"], min(1.0, E * le))


def test_paper_bounds_shuffling_spec_values():
    close(bc.paper_bounds("SH-GC", 60_000, 60, 4, 2, 1, 2.0)["l_epoch"], 1.600e-2, rel=1e-3)
    close(bc.paper_bounds("SH-BC", 50_000, 50, 1, 2, 1, 2.0)["u_epoch"], 4.024e-3, rel=1e-3)
