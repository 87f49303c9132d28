"""ISRL-DP federated learning (Lowy & Razaviyayn, "Private federated learning without a trusted server: optimal
algorithms for convex losses", ICLR 2023): noise calibrations and step-size / schedule rules pinned to the printed
formulas, computed by hand.

Issue #42 item 3. Formulas as printed (Theorem D.1 and its proof's chain, Theorem 3.1/E.1, Theorem D.2, Theorem F.2,
Appendix E.1 (Ghadimi & Lan 2013 Prop. 7), Appendix H Algorithm 7, Appendix I) in the transcription of
shared/spec/isrl_dp_federated_learning.md 2.1-2.8 and 3.1-3.7; where the spec records a text/code discrepancy (I-9:
the authors' scripts) the comment says which one is pinned. Plain ``math`` only (no dpjax call); tolerance 1e-12
relative, exact for integers.

Inventory (calculator -> test):

* ``accounting.isrl.isrl_paper_sigma`` / ``isrl_paper_epsilon`` (Thm D.1) -> ``test_paper_sigma_and_inverse``
* ``accounting.isrl.isrl_paper_chain`` (Thm D.1 proof: eps~, delta~, eps') -> ``test_paper_chain``
* ``accounting.isrl.isrl_paper_min_batch_size`` (Thm D.1's K bound) -> ``test_paper_chain``
* ``accounting.isrl.isrl_experiment_calibration`` / ``isrl_experiment_batch_size`` / ``isrl_experiment_epsilon``
  (Appendix I moments-accountant form) -> ``test_experiment_calibration``
* ``accounting.isrl.isrl_per_silo_sigma_factors`` (Appendix I with delta_i = 1/n_i^2) -> ``test_per_silo_factors``
* ``accounting.isrl.isrl_authors_code_calibration`` (authors' scripts, spec I-9) -> ``test_authors_code_calibration``
* ``accounting.isrl.isrl_one_pass_paper_sigma`` / ``isrl_one_pass_paper_epsilon`` (Thm 3.1/E.1) -> ``test_one_pass``
* ``accounting.isrl.isrl_local_sgd_paper_sigma`` / ``moments_accountant_min_batch`` (Appendix I; Abadi et al. Thm 1)
  -> ``test_local_sgd``
* ``algorithms.schedules.stich_weights`` (Thm D.1.2 gamma_r) -> ``test_stich_weights``
* ``algorithms.schedules.smoothing_beta`` (Thm D.2 and F.2 beta) -> ``test_smoothing_beta``
* ``algorithms.schedules.multistage_stages`` (Appendix E.1 R_k, nu_k) -> ``test_multistage_stages``
* ``algorithms.schedules.unbalanced_parameters`` (Algorithm 7, K_i = ceil(c n_i)) -> ``test_unbalanced_parameters``
* ``reproduce.isrl.constructions.experiment_batch_size`` (Appendix I vs the authors' floor) ->
  tests/pins/test_pins_isrl_constructions.py (its own file: importing dpjax.reproduce takes seconds)
* ``accounting.conversions`` (group privacy paper/tight, ISRL -> central / user-level, D.3.5 hybrid budget) ->
  ``test_conversions``
* the shuffle chain (Thm G.1) -> tests/pins/test_pins_shuffle_amplification.py; P_vec (Alg. 6) -> test_pins_pvec.py
* Not pinned by hand: ``accounting.tight`` / ``accounting.wor_rdp`` (dp_accounting RDP/PLD; wor_rdp is checked bit for
  bit against dp_accounting in tests/accounting/test_wor_rdp.py), ``reproduce.isrl.constructions.server_noise_equivalent``
  (a rescaling of table entries, no paper formula).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpjax.accounting import isrl
from dpjax.algorithms import schedules

pytestmark = pytest.mark.privacy
REL = 1e-12


def close(actual, expected, rel=REL):
    assert actual == pytest.approx(expected, rel=rel, abs=0.0), (actual, expected)


# -- Thm D.1: sigma^2 = 256 L^2 R ln(2.5 R/delta) ln(2/delta)/(n^2 eps^2), eps <= 2 ln(2/delta);
#    inverse eps = 16 L sqrt(R ln(2.5R/delta) ln(2/delta))/(n sigma).
@pytest.mark.parametrize("L, n, R, eps, delta", [(1.0, 1238, 35, 1.5, 1 / 1238**2), (20.0, 500, 25, 5.0, 1e-5),
                                                (0.3, 8673, 100, 0.25, 1e-8)])
def test_paper_sigma_and_inverse(L, n, R, eps, delta):
    var = 256 * L**2 * R * math.log(2.5 * R / delta) * math.log(2 / delta) / (n**2 * eps**2)
    close(isrl.isrl_paper_sigma(L, n, R, eps, delta), math.sqrt(var))
    sigma = 0.77 * math.sqrt(var)
    expected = 16 * L * math.sqrt(R * math.log(2.5 * R / delta) * math.log(2 / delta)) / (n * sigma)
    close(isrl.isrl_paper_epsilon(L, n, R, sigma, delta), expected)


def test_paper_sigma_spec_value():
    # Spec 6.1 / 3.4: (L, n, R, eps, delta) = (1, 1238, 35, 1.5, 1/1238^2): sigma ~ 0.8522, K_min = ceil(14.36) = 15.
    close(isrl.isrl_paper_sigma(1.0, 1238, 35, 1.5, 1 / 1238**2), 0.8522, rel=1e-4)
    assert isrl.isrl_paper_min_batch_size(1238, 35, 1.5, 1 / 1238**2) == 15


# -- Thm D.1 proof chain (spec 3.2): eps~ = eps/(2 sqrt(2R ln(2/delta))), delta~ = delta/(2R), eps' = n eps~/(2K)
#    (<= 1 needed), K >= eps n/(4 sqrt(2R ln(2/delta))). The chain's Gaussian step reproduces sigma:
#    8 L^2 ln(1.25/delta~)/(eps'^2 K^2) = 256 L^2 R ln(2.5R/delta) ln(2/delta)/(n^2 eps^2).
@pytest.mark.parametrize("n, K, R, eps, delta", [(1238, 15, 35, 1.5, 1 / 1238**2), (5000, 40, 60, 3.0, 1e-6),
                                                (300, 2, 10, 0.5, 1e-4)])
def test_paper_chain(n, K, R, eps, delta):
    got = isrl.isrl_paper_chain(n, K, R, eps, delta)
    et = eps / (2 * math.sqrt(2 * R * math.log(2 / delta)))
    ep = n * et / (2 * K)
    close(got["eps_tilde"], et)
    close(got["delta_tilde"], delta / (2 * R))
    close(got["eps_prime"], ep)
    assert got["batch_ok"] == (ep <= 1)
    kmin = max(1, math.ceil(eps * n / (4 * math.sqrt(2 * R * math.log(2 / delta)))))
    assert isrl.isrl_paper_min_batch_size(n, R, eps, delta) == kmin
    L = 1.7
    close(8 * L**2 * math.log(1.25 / (delta / (2 * R))) / (ep**2 * K**2), isrl.isrl_paper_sigma(L, n, R, eps, delta) ** 2)


# -- Appendix I: sigma^2 = 8 L^2 ln(1/delta) R/(n^2 eps^2), K = ceil(n sqrt(eps_max)/(2 sqrt R)) in [1, n];
#    eps = L sqrt(8 ln(1/delta) R)/(n sigma). Spec 3.4 table: eps = 1.5 -> K = 129, sigma = 0.0340 (n = 1238, R = 35).
@pytest.mark.parametrize("L, n, R, eps, delta, eps_max", [(1.0, 1238, 35, 1.5, 1 / 1238**2, 1.5),
                                                         (20.0, 1000, 50, 2.5, 1e-6, 15.0), (2.0, 8673, 25, 0.5, 1e-8, 10.0)])
def test_experiment_calibration(L, n, R, eps, delta, eps_max):
    sigma, K = isrl.isrl_experiment_calibration(L, n, R, eps, delta, eps_max)
    close(sigma, math.sqrt(8 * L**2 * math.log(1 / delta) * R / (n**2 * eps**2)))
    assert K == min(max(math.ceil(n * math.sqrt(eps_max) / (2 * math.sqrt(R))), 1), n)
    assert isrl.isrl_experiment_batch_size(n, R, eps_max) == K
    close(isrl.isrl_experiment_epsilon(L, n, R, 0.9 * sigma, delta), L * math.sqrt(8 * math.log(1 / delta) * R) / (n * 0.9 * sigma))


def test_experiment_calibration_spec_value():
    sigma, K = isrl.isrl_experiment_calibration(1.0, 1238, 35, 1.5, 1 / 1238**2)
    assert K == 129
    close(sigma, 0.0340, rel=2e-3)


# -- Appendix I with delta_i = 1/n_i^2: sigma_i^2 = 8 L^2 ln(n_i^2) R/(n_i^2 eps^2), so
#    sigma_i/sigma_ref = sqrt(ln(n_i^2)/n_i^2 / (ln(n_ref^2)/n_ref^2)).
def test_per_silo_factors():
    sizes, n_ref = [1238, 700, 3001], 1000
    sig = lambda n: math.sqrt(8 * math.log(n * n) * 35 / (n * n * 1.5**2))  # noqa: E731
    got = isrl.isrl_per_silo_sigma_factors(sizes, n_ref)
    for g, n in zip(got, sizes):
        close(float(g), sig(n) / sig(n_ref))


# -- Authors' scripts (spec 3.2 / I-9, not the paper's text): K = ceil(n eps_max/(4 sqrt(2R ln(2/delta)))) in [1, n],
#    sigma^2 = 256 L^2 R ln(2.5 R K/(delta n)) ln(2/delta)/(n^2 eps^2).
@pytest.mark.parametrize("L, n, R, eps, delta, eps_max", [(1.0, 1238, 35, 1.5, 1 / 1238**2, 1.5),
                                                         (20.0, 1000, 50, 2.5, 1e-6, 15.0), (2.0, 8673, 25, 0.5, 1e-8, 10.0)])
def test_authors_code_calibration(L, n, R, eps, delta, eps_max):
    K = min(max(math.ceil(n * eps_max / (4 * math.sqrt(2 * R * math.log(2 / delta)))), 1), n)
    var = 256 * L**2 * R * math.log(2.5 * R * K / (delta * n)) * math.log(2 / delta) / (n**2 * eps**2)
    sigma, k = isrl.isrl_authors_code_calibration(L, n, R, eps, delta, eps_max)
    assert k == K
    close(sigma, math.sqrt(var))


# -- Thm 3.1/E.1 (one pass): sigma^2 = 32 L^2 ln(1.25/delta)/(eps^2 K^2), eps <= 8 ln(1/delta); inverse
#    eps = sqrt(32 ln(1.25/delta)) L/(K sigma). Spec 3.3: sigma K/L = 19.38 (eps = 1, delta = 1e-5), 5.30 (4, 1e-6).
@pytest.mark.parametrize("L, K, eps, delta", [(1.0, 1, 1.0, 1e-5), (1.0, 1, 4.0, 1e-6), (3.0, 64, 0.5, 1e-7)])
def test_one_pass(L, K, eps, delta):
    sigma = math.sqrt(32 * L**2 * math.log(1.25 / delta) / (eps**2 * K**2))
    close(isrl.isrl_one_pass_paper_sigma(L, K, eps, delta), sigma)
    close(isrl.isrl_one_pass_paper_epsilon(L, K, 1.3 * sigma, delta), math.sqrt(32 * math.log(1.25 / delta)) * L / (K * 1.3 * sigma))


def test_one_pass_spec_values():
    close(isrl.isrl_one_pass_paper_sigma(1.0, 1, 1.0, 1e-5), 19.38, rel=3e-4)
    close(isrl.isrl_one_pass_paper_sigma(1.0, 1, 4.0, 1e-6), 5.30, rel=1e-3)


# -- Appendix I local SGD: sigma^2 = 8 L^2 (R K) ln(1/delta)/(eps^2 n^2); moments accountant (Abadi et al. 2016
#    Thm 1 via Bassily et al. 2019 Thm 3.1) needs batch m >= n sqrt(eps/(4T)).
@pytest.mark.parametrize("L, n, R, K, eps, delta", [(1.0, 1238, 35, 444, 1.5, 1 / 1238**2), (20.0, 300, 10, 7, 2.5, 1e-5),
                                                   (0.5, 5000, 100, 3, 0.75, 1e-8)])
def test_local_sgd(L, n, R, K, eps, delta):
    close(isrl.isrl_local_sgd_paper_sigma(L, n, R, K, eps, delta), math.sqrt(8 * L**2 * R * K * math.log(1 / delta) / (eps**2 * n**2)))
    close(isrl.moments_accountant_min_batch(n, R * K, eps), n * math.sqrt(eps / (4 * R * K)))


# -- Thm D.1.2: gamma_r = (1 - mu eta)^{-(r+1)}, r = 0..R-1, normalised to sum 1.
@pytest.mark.parametrize("R, mu, eta", [(10, 0.5, 0.3), (200, 0.01, 2.0), (37, 1.2, 0.7)])
def test_stich_weights(R, mu, eta):
    raw = [(1 - mu * eta) ** (-(r + 1)) for r in range(R)]
    total = math.fsum(raw)
    got = schedules.stich_weights(R, mu, eta)
    np.testing.assert_allclose(got, [w / total for w in raw], rtol=1e-11, atol=0)  # R-term power vs exp(log) form


# -- Thm D.2: convex beta = (L sqrt(M)/D)/(1/sqrt(n) + sqrt(d ln(1/delta))/(eps n)); strongly convex
#    beta = mu M/(1/n + d ln(1/delta)/(eps^2 n^2)). Thm F.2 (ERM): eps n sqrt(M) L/(sqrt(d) D); mu M eps^2 n^2/d.
@pytest.mark.parametrize("L, n, M, d, eps, delta, D, mu", [(1.0, 1238, 10, 50, 1.5, 1e-6, 2.0, 0.1),
                                                          (3.0, 200, 4.5, 7, 0.5, 1e-5, 0.5, 2.0),
                                                          (0.2, 10_000, 64, 300, 8.0, 1e-9, 10.0, 0.01)])
def test_smoothing_beta(L, n, M, d, eps, delta, D, mu):
    kw = dict(lipschitz=L, n=n, num_available=M, dim=d, epsilon=eps, delta=delta)
    close(schedules.smoothing_beta(**kw, diameter=D),
          (L * math.sqrt(M) / D) / (1 / math.sqrt(n) + math.sqrt(d * math.log(1 / delta)) / (eps * n)))
    close(schedules.smoothing_beta(**kw, strong_convexity=mu), mu * M / (1 / n + d * math.log(1 / delta) / (eps**2 * n**2)))
    close(schedules.smoothing_beta(**kw, diameter=D, erm=True), eps * n * math.sqrt(M) * L / (math.sqrt(d) * D))
    close(schedules.smoothing_beta(**kw, strong_convexity=mu, erm=True), mu * M * eps**2 * n**2 / d)


# -- Appendix E.1 (Ghadimi & Lan 2013 Prop. 7): R_k = ceil(max{4 sqrt(2 beta/mu), 128 V^2/(3 mu Delta 2^{-(k+1)})}),
#    nu_k = max{2 beta, sqrt(mu V^2/(3 Delta 2^{-(k-1)} R_k (R_k+1)(R_k+2)))}, U the largest with sum R_k <= R.
@pytest.mark.parametrize("R, beta, mu, V2, gap", [(500, 4.0, 0.5, 0.01, 3.0), (100_000, 1.0, 0.01, 0.2, 10.0),
                                                 (2000, 50.0, 2.0, 1.5, 0.7)])
def test_multistage_stages(R, beta, mu, V2, gap):
    expected, used, k = [], 0, 1
    while True:
        rk = math.ceil(max(4 * math.sqrt(2 * beta / mu), 128 * V2 / (3 * mu * gap * 2.0 ** (-(k + 1)))))
        if used + rk > R:
            break
        nu = max(2 * beta, math.sqrt(mu * V2 / (3 * gap * 2.0 ** (-(k - 1)) * rk * (rk + 1) * (rk + 2))))
        expected.append((rk, nu))
        used, k = used + rk, k + 1
    got = schedules.multistage_stages(num_rounds=R, smoothness=beta, strong_convexity=mu, variance=V2, initial_gap=gap)
    assert len(expected) >= 2 and [r for r, _ in got] == [r for r, _ in expected]
    for (_, a), (_, b) in zip(got, expected):
        close(a, b)


# -- Algorithm 7 (Appendix H): sigma_i from Thm D.1 with (n_i, eps_i, delta_i); K_min,i = ceil(eps_i n_i/(4 sqrt(2R
#    ln(2/delta_i)))); c = max_i K_min,i/n_i; K_i = ceil(c n_i) (<= n_i), so K_i/n_i is common up to rounding.
def test_unbalanced_parameters():
    sizes, epss, deltas, R, L = [400, 1238, 3000], [1.0, 2.0, 0.5], [1e-5, 1 / 1238**2, 1e-7], 30, 1.5
    kmin = [max(1, math.ceil(e * n / (4 * math.sqrt(2 * R * math.log(2 / dl))))) for n, e, dl in zip(sizes, epss, deltas)]
    c = max(k / n for k, n in zip(kmin, sizes))
    got = schedules.unbalanced_parameters(silo_sizes=sizes, epsilons=epss, deltas=deltas, num_rounds=R, lipschitz=L)
    close(got["fraction"], c)
    assert got["batch_sizes"] == tuple(min(n, math.ceil(c * n - 1e-12)) for n in sizes)
    for s, n, e, dl in zip(got["noise_stds"], sizes, epss, deltas):
        close(s, math.sqrt(256 * L**2 * R * math.log(2.5 * R / dl) * math.log(2 / dl) / (n**2 * e**2)))


# -- Section 1 / Appendix C conversions: ISRL-DP (eps0, delta0) => user-level DP over a silo's n records by group
#    privacy: (n eps0, n e^{(n-1) eps0} delta0) (paper), or delta0 (e^{n eps0} - 1)/(e^{eps0} - 1) = delta0 sum_{i<n}
#    e^{i eps0} (induction, "tight"); Appendix D.3.5 hybrid design eps0 = eps/n, delta0 = delta/(4n).
@pytest.mark.parametrize("eps0, delta0, n", [(0.01, 1e-9, 50), (0.002, 1e-12, 1000), (0.3, 1e-8, 7)])
def test_conversions(eps0, delta0, n):
    from dpjax.accounting import conversions as cv

    e, d = cv.isrl_to_user_level(eps0, delta0, n, "paper")
    close(e, n * eps0)
    close(d, n * math.exp((n - 1) * eps0) * delta0)
    e, d = cv.group_privacy(eps0, delta0, n, "tight")
    close(e, n * eps0)
    close(d, delta0 * math.fsum(math.exp(i * eps0) for i in range(n)), rel=1e-11)  # closed form vs the sum
    assert cv.isrl_to_central(eps0, delta0) == (eps0, delta0)
    e, d = cv.hybrid_isrl_budget(n * eps0, 4 * n * delta0, n)
    close(e, eps0)
    close(d, delta0)
