"""Theory-driven parameter rules of Lowy & Razaviyayn (ICLR 2023) as pure
Python functions (no jax): rounds R, step sizes, averaging weights, batch
sizes, smoothing and regularisation constants, multi-stage schedules,
unbalanced-silo parameters (Appendix H) and the hybrid user-level rule
(Appendix D.3.5).

Every function cites the theorem it implements. Logarithms of quantities
below 1 are clamped to 0 (so a rate's log factor never turns negative). ``M`` is the (harmonic-mean)
availability, ``1/M = E[1/M_r]``; noise calibrations come from
``dpjax.accounting`` so the numbers are never typed twice.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dpjax import _validate as v
from dpjax.accounting.isrl import isrl_paper_min_batch_size, isrl_paper_sigma


def _log_plus(x: float) -> float:
    """``max(ln x, 0)``: log factors of the rates never negative."""
    return math.log(x) if x > 1.0 else 0.0


# ---------------------------------------------------------------------------
# Noisy MB-SGD, Algorithm 2 (Theorem D.1)
# ---------------------------------------------------------------------------


def mbsgd_convex_schedule(*, smoothness, diameter, lipschitz, n, num_available, dim, epsilon) -> dict:
    """Theorem D.1.1 (smooth convex): uniform averaging, constant step.

    ``R = (beta D sqrt(M)/L) min(sqrt(n), eps n/sqrt(d)) + min(n M, eps^2 n^2 M/d)``
    (rounded up), ``eta = min(1/beta, (D/(L sqrt(R))) min(1, eps n sqrt(M)/sqrt(R d), sqrt(n M/R)))``.
    Returns ``{"num_rounds", "learning_rate", "output": "average"}``.
    """
    beta, big_d = v.check_positive("smoothness", smoothness), v.check_positive("diameter", diameter)
    lip, m = v.check_positive("lipschitz", lipschitz), v.check_positive("num_available", num_available)
    n, d = v.check_int("n", n, min_value=1), v.check_int("dim", dim, min_value=1)
    eps = v.check_positive("epsilon", epsilon)
    r = (beta * big_d * math.sqrt(m) / lip) * min(math.sqrt(n), eps * n / math.sqrt(d)) + min(
        n * m, eps**2 * n**2 * m / d)
    rounds = max(1, math.ceil(r - 1e-9))
    eta = min(1.0 / beta, (big_d / (lip * math.sqrt(rounds))) * min(
        1.0, eps * n * math.sqrt(m) / math.sqrt(rounds * d), math.sqrt(n * m / rounds)))
    return {"num_rounds": rounds, "learning_rate": eta, "output": "average"}


def mbsgd_strongly_convex_schedule(*, smoothness, strong_convexity, diameter, lipschitz, n, num_available,
                                   dim, epsilon, noise_std) -> dict:
    """Theorem D.1.2 / Lemma D.6.2 with Stich's (2019) Lemma D.5.

    ``R = max((2 beta/mu) ln(beta D^2 mu M eps^2 n^2/(d L^2)), min(M n, M eps^2 n^2/d))``,
    ``c = d sigma^2/M + L^2``, ``eta = min(1/(2 beta), ln(max(2, mu^2 D^2 R^2/c))/(mu R))``
    and the weights ``gamma_r = (1 - mu eta)^{-(r+1)}`` (``stich_weights``).
    """
    beta, mu = v.check_positive("smoothness", smoothness), v.check_positive("strong_convexity", strong_convexity)
    big_d, lip = v.check_positive("diameter", diameter), v.check_positive("lipschitz", lipschitz)
    m = v.check_positive("num_available", num_available)
    n, d = v.check_int("n", n, min_value=1), v.check_int("dim", dim, min_value=1)
    eps, sigma = v.check_positive("epsilon", epsilon), v.check_nonnegative("noise_std", noise_std)
    r = max((2 * beta / mu) * _log_plus(beta * big_d**2 * mu * m * eps**2 * n**2 / (d * lip**2)),
            min(m * n, m * eps**2 * n**2 / d))
    rounds = max(1, math.ceil(r - 1e-9))
    c = d * sigma**2 / m + lip**2
    eta = min(1.0 / (2 * beta), math.log(max(2.0, mu**2 * big_d**2 * rounds**2 / c)) / (mu * rounds))
    return {"num_rounds": rounds, "learning_rate": eta, "output": "exponential", "decay": mu * eta}


def stich_weights(num_rounds: int, strong_convexity: float, learning_rate: float) -> np.ndarray:
    """Normalised ``gamma_r = (1 - mu eta)^{-(r+1)}``, r = 0..R-1 (Theorem D.1.2).

    Computed in log space and normalised by the largest weight, so it never
    overflows (R = 10^7 is fine); sums to 1. Needs ``0 < mu eta < 1``.
    """
    rounds = v.check_int("num_rounds", num_rounds, min_value=1)
    mu, eta = v.check_positive("strong_convexity", strong_convexity), v.check_positive("learning_rate", learning_rate)
    if not mu * eta < 1:
        raise ValueError(f"strong_convexity*learning_rate={mu * eta!r} must be < 1")
    log_w = -np.log1p(-mu * eta) * np.arange(1, rounds + 1, dtype=np.float64)
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


# ---------------------------------------------------------------------------
# Smoothing constants (Theorems D.2, F.2)
# ---------------------------------------------------------------------------


def smoothing_beta(*, lipschitz, n, num_available, dim, epsilon, delta, diameter=None,
                   strong_convexity=None, erm=False) -> float:
    """Moreau-envelope beta for non-smooth losses.

    SCO (Theorem D.2): convex ``(L sqrt(M)/D) / (1/sqrt(n) + sqrt(d ln(1/delta))/(eps n))``;
    strongly convex ``mu M / (1/n + d ln(1/delta)/(eps^2 n^2))``.
    ERM (``erm=True``, Theorem F.2): convex ``eps n sqrt(M) L/(sqrt(d) D)``;
    strongly convex ``mu M eps^2 n^2/d``. Give exactly one of ``diameter``
    (convex) or ``strong_convexity``.
    """
    lip = v.check_positive("lipschitz", lipschitz)
    n, d = v.check_int("n", n, min_value=1), v.check_int("dim", dim, min_value=1)
    m, eps = v.check_positive("num_available", num_available), v.check_positive("epsilon", epsilon)
    delta = v.check_open_unit("delta", delta)
    if (diameter is None) == (strong_convexity is None):
        raise ValueError(f"diameter={diameter!r}, strong_convexity={strong_convexity!r}: give exactly one")
    if diameter is not None:
        big_d = v.check_positive("diameter", diameter)
        if erm:
            return eps * n * math.sqrt(m) * lip / (math.sqrt(d) * big_d)
        return (lip * math.sqrt(m) / big_d) / (1 / math.sqrt(n) + math.sqrt(d * math.log(1 / delta)) / (eps * n))
    mu = v.check_positive("strong_convexity", strong_convexity)
    if erm:
        return mu * m * eps**2 * n**2 / d
    return mu * m / (1 / n + d * math.log(1 / delta) / (eps**2 * n**2))


def smoothed_strong_convexity(strong_convexity: float, beta: float) -> float:
    """Strong convexity of the Moreau envelope of a mu-strongly convex loss:
    ``mu beta/(mu + beta)`` (the envelope of a
    mu-strongly convex f is only that strongly convex)."""
    mu, beta = v.check_positive("strong_convexity", strong_convexity), v.check_positive("beta", beta)
    return mu * beta / (mu + beta)


# ---------------------------------------------------------------------------
# Accelerated family, Algorithm 1 (Appendix E, F)
# ---------------------------------------------------------------------------


def variance_bound(*, gradient_variance, batch_size, num_available, num_silos, heterogeneity, dim,
                   noise_std) -> float:
    """Lemma E.3: ``V^2 = phi^2/(M K) + (N-M)/(N-1) upsilon^2/M 1{N>1} + d sigma^2/M``."""
    phi2 = v.check_nonnegative("gradient_variance", gradient_variance)
    k = v.check_int("batch_size", batch_size, min_value=1)
    m, big_n = v.check_positive("num_available", num_available), v.check_int("num_silos", num_silos, min_value=1)
    ups2, d = v.check_nonnegative("heterogeneity", heterogeneity), v.check_int("dim", dim, min_value=1)
    sigma = v.check_nonnegative("noise_std", noise_std)
    v.check_le("num_available", m, "num_silos", big_n)
    silo_term = (big_n - m) / (big_n - 1) * ups2 / m if big_n > 1 else 0.0
    return phi2 / (m * k) + silo_term + d * sigma**2 / m


def regularization_lambda(*, variance, diameter, num_rounds) -> float:
    """``lambda = V / (2 D sqrt(R))`` (Theorem E.1 proof; F.1's V_X/(||w0 - w*|| sqrt R) read the same way);
    ``variance`` is V^2."""
    var = v.check_nonnegative("variance", variance)
    big_d, r = v.check_positive("diameter", diameter), v.check_int("num_rounds", num_rounds, min_value=1)
    return math.sqrt(var) / (2 * big_d * math.sqrt(r))


def multistage_stages(*, num_rounds, smoothness, strong_convexity, variance, initial_gap) -> list[tuple[int, float]]:
    """Multi-stage AC-SA (Appendix E.1; Ghadimi & Lan 2013 Prop. 7).

    ``R_k = ceil(max(4 sqrt(2 beta/mu), 128 V^2/(3 mu Delta 2^{-(k+1)})))``,
    ``nu_k = max(2 beta, sqrt(mu V^2/(3 Delta 2^{-(k-1)} R_k (R_k+1)(R_k+2))))``,
    for k = 1..U with U the largest integer such that ``sum R_k <= R``.
    ``variance`` is V^2 and ``initial_gap`` Delta >= F(w_0) - F*. Returns
    ``[(R_k, nu_k), ...]`` (run ``sum R_k`` rounds). Raises ``ValueError``
    when even the first stage needs more than ``num_rounds``.
    """
    rounds = v.check_int("num_rounds", num_rounds, min_value=1)
    beta, mu = v.check_positive("smoothness", smoothness), v.check_positive("strong_convexity", strong_convexity)
    var, gap = v.check_nonnegative("variance", variance), v.check_positive("initial_gap", initial_gap)
    stages, used, k = [], 0, 1
    while True:
        r_k = math.ceil(max(4 * math.sqrt(2 * beta / mu), 128 * var / (3 * mu * gap * 2.0 ** (-(k + 1)))) - 1e-9)
        if used + r_k > rounds:
            break
        nu_k = max(2 * beta, math.sqrt(mu * var / (3 * gap * 2.0 ** (-(k - 1)) * r_k * (r_k + 1) * (r_k + 2))))
        stages.append((r_k, nu_k))
        used += r_k
        k += 1
    if not stages:
        raise ValueError(f"num_rounds={rounds} is smaller than the first stage's R_1; increase num_rounds")
    return stages


def one_pass_batch_size_convex(*, lipschitz, smoothness, diameter, n, dim, epsilon, delta, num_available,
                               shuffle_dp=False) -> int:
    """K of Theorem E.1.1 (one-pass accelerated):
    ``(L/(beta D))^{2/5} n^{3/5} (d ln(1/delta))^{1/5} / (eps^{2/5} M^{1/5})``;
    with ``shuffle_dp=True`` the Algorithm 6 rule of Theorem G.2 (M^{2/5}).
    Rounded to the nearest integer in [1, n]; R = n // K.
    """
    lip, beta = v.check_positive("lipschitz", lipschitz), v.check_positive("smoothness", smoothness)
    big_d, n = v.check_positive("diameter", diameter), v.check_int("n", n, min_value=1)
    d, eps = v.check_int("dim", dim, min_value=1), v.check_positive("epsilon", epsilon)
    delta, m = v.check_open_unit("delta", delta), v.check_positive("num_available", num_available)
    m_exp = 0.4 if shuffle_dp else 0.2
    k = (lip / (beta * big_d)) ** 0.4 * n**0.6 * (d * math.log(1 / delta)) ** 0.2 / (eps**0.4 * m**m_exp)
    return int(min(max(round(k), 1), n))


def one_pass_batch_size_strongly_convex(*, lipschitz, smoothness, strong_convexity, initial_gap, n, dim,
                                        epsilon, delta, num_available, gradient_variance,
                                        shuffle_dp=False) -> int:
    """K of Theorem E.1.2 (one-pass accelerated) / G.2 (Algorithm 6, ``shuffle_dp=True``):
    ``n / (sqrt(kappa) ln(mu Delta min(eps^2 n^2 M^a/(L^2 d ln(1/delta)), n M/phi^2)))``
    with a = 1 (ISRL) or 2 (SDP). Clipped to [1, n] (K = n when the log is <= 0).
    """
    lip, beta = v.check_positive("lipschitz", lipschitz), v.check_positive("smoothness", smoothness)
    mu, gap = v.check_positive("strong_convexity", strong_convexity), v.check_positive("initial_gap", initial_gap)
    n, d = v.check_int("n", n, min_value=1), v.check_int("dim", dim, min_value=1)
    eps, delta = v.check_positive("epsilon", epsilon), v.check_open_unit("delta", delta)
    m, phi2 = v.check_positive("num_available", num_available), v.check_nonnegative("gradient_variance", gradient_variance)
    a = 2 if shuffle_dp else 1
    priv = eps**2 * n**2 * m**a / (lip**2 * d * math.log(1 / delta))
    inner = min(priv, n * m / phi2) if phi2 > 0 else priv
    log = _log_plus(mu * gap * inner)
    if log == 0.0:
        return n
    return int(min(max(round(n / (math.sqrt(beta / mu) * log)), 1), n))


def erm_accelerated_rounds(*, smoothness, diameter, lipschitz, n, num_silos, num_available, dim, epsilon, delta,
                           batch_size=None, max_iter=100) -> dict:
    """Accelerated ERM (Theorem F.1.1) rounds with the R-K coupling resolved by the
    fixed-point iteration:

    ``R = max((beta D sqrt(M) eps n/(L sqrt(d ln(1/delta))))^{1/2}, 1{M K < N n} eps^2 n^2/(K d ln(1/delta)))``,
    then ``K_min(R) = ceil(eps n/(4 sqrt(2 R ln(2/delta))))``; if ``K < K_min``
    set ``K = K_min`` and repeat. Starts from ``batch_size`` (default n, full
    batch). ``noise_std`` is the paper's sigma (``isrl_paper_sigma``) for the
    final R, with L the clip norm.
    """
    beta, big_d = v.check_positive("smoothness", smoothness), v.check_positive("diameter", diameter)
    lip, n = v.check_positive("lipschitz", lipschitz), v.check_int("n", n, min_value=1)
    big_n, m = v.check_int("num_silos", num_silos, min_value=1), v.check_positive("num_available", num_available)
    d, eps, delta = v.check_int("dim", dim, min_value=1), v.check_positive("epsilon", epsilon), v.check_open_unit("delta", delta)
    k = n if batch_size is None else v.check_int("batch_size", batch_size, min_value=1, max_value=n)
    log = math.log(1 / delta)
    for _ in range(max_iter):
        r = math.sqrt(beta * big_d * math.sqrt(m) * eps * n / (lip * math.sqrt(d * log)))
        if m * k < big_n * n:
            r = max(r, eps**2 * n**2 / (k * d * log))
        rounds = max(1, math.ceil(r - 1e-9))
        k_min = isrl_paper_min_batch_size(n, rounds, eps, delta)
        if k >= k_min:
            return {"num_rounds": rounds, "batch_size": k,
                    "noise_std": isrl_paper_sigma(lip, n, rounds, eps, delta)}
        k = k_min
    raise ValueError(f"max_iter={max_iter}: the R-K fixed point did not converge")


# ---------------------------------------------------------------------------
# Unbalanced silos (Appendix H) / hybrid user-level design (Appendix D.3.5)
# ---------------------------------------------------------------------------


def unbalanced_parameters(*, silo_sizes: Sequence[int], epsilons: Sequence[float], deltas: Sequence[float],
                          num_rounds: int, lipschitz: float) -> dict:
    """Algorithm 7 (Appendix H; K_i = ceil(c n_i) with a common c): per-silo ``sigma_i`` (paper
    calibration with that silo's n_i, eps_i, delta_i) and ``K_i = ceil(c n_i)``
    with one common fraction ``c = max_i K_min,i / n_i`` so that
    ``K_i / n_i`` is (up to rounding) equal and every ``K_i >= K_min,i``.

    Returns ``{"batch_sizes": (K_i), "noise_stds": (sigma_i), "fraction": c}``.
    """
    sizes = [v.check_int(f"silo_sizes[{i}]", s, min_value=1) for i, s in enumerate(silo_sizes)]
    if not sizes:
        raise ValueError("silo_sizes=[] must name at least one silo")
    for name, seq in (("epsilons", epsilons), ("deltas", deltas)):
        if len(seq) != len(sizes):
            raise ValueError(f"{name} has {len(seq)} entries; it must have one per silo ({len(sizes)})")
    rounds = v.check_int("num_rounds", num_rounds, min_value=1)
    k_min = [isrl_paper_min_batch_size(n, rounds, e, dl) for n, e, dl in zip(sizes, epsilons, deltas)]
    c = max(km / n for km, n in zip(k_min, sizes))
    ks = tuple(int(min(n, math.ceil(c * n - 1e-12))) for n in sizes)
    sigmas = tuple(isrl_paper_sigma(lipschitz, n, rounds, e, dl) for n, e, dl in zip(sizes, epsilons, deltas))
    return {"batch_sizes": ks, "noise_stds": sigmas, "fraction": c}


def hybrid_user_level_budget(*, epsilon: float, delta: float, n: int) -> tuple[float, float]:
    """Hybrid design (Appendix D.3.5): run ISRL-DP with ``eps_0 = eps/n``, ``delta_0 = delta/(4n)``.

    By group privacy over a silo's n records the run is then
    ``(n eps_0, n e^{(n-1) eps_0} delta_0) <= (eps, delta)`` user-level DP,
    because ``e^{(n-1) eps/n} <= e < 4`` for ``eps <= 1`` (required).
    """
    eps = v.check_positive("epsilon", epsilon)
    if eps > 1:
        raise ValueError(f"epsilon={epsilon!r} must be <= 1 for the hybrid rule (Appendix D.3.5)")
    delta, n = v.check_open_unit("delta", delta), v.check_int("n", n, min_value=1)
    return eps / n, delta / (4 * n)
