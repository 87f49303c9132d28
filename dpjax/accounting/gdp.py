"""Gaussian differential privacy (mu-GDP) and the exact analytic Gaussian mechanism.

A mechanism is mu-GDP (Dong, Roth & Su 2022, Def. 2.6) when its trade-off function is at least
G_mu(a) = Phi(Phi^{-1}(1 - a) - mu). The Gaussian mechanism with l2 sensitivity Delta and noise std sigma is exactly
(Delta/sigma)-GDP, and mu-GDP is equivalent to the (eps, delta(eps)) curve (DRS Cor. 2.13 = Balle & Wang 2018,
Thm 8, "analytic Gaussian mechanism"): delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu).
Composition is exact: mu_1-GDP then mu_2-GDP is sqrt(mu_1^2 + mu_2^2)-GDP (DRS Cor. 3.3); group privacy: mu-GDP =>
g*mu-GDP for groups of g (DRS Thm 2.14). Pure numpy/scipy; never NaN; ValueError naming a bad argument.
"""

from __future__ import annotations

import math

from scipy import optimize, special

from dpjax import _validate as v

__all__ = [
    "gdp_delta", "gdp_epsilon", "gdp_mu", "gdp_compose", "gdp_group", "gaussian_mechanism_mu",
    "gaussian_mechanism_epsilon", "gaussian_mechanism_sigma", "classical_gaussian_sigma"
]


def _log_delta(mu: float, eps: float) -> float:
    """log delta(eps) of mu-GDP, computed in log space (no cancellation blow-up)."""
    la = special.log_ndtr(mu / 2.0 - eps / mu)
    diff = eps + special.log_ndtr(-mu / 2.0 - eps / mu) - la
    if diff >= 0:  # only through rounding; the true value is positive but tiny
        return -math.inf
    return la + math.log1p(-math.exp(diff))


def gdp_delta(mu: float, epsilon: float) -> float:
    """delta(epsilon) for a mu-GDP mechanism (exact; Balle & Wang 2018 Thm 8)."""
    mu = v.check_nonnegative("mu", mu, allow_inf=True)
    eps = v.check_nonnegative("epsilon", epsilon, allow_inf=True)
    if mu == 0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    if math.isinf(eps):
        return 0.0
    return float(min(1.0, max(0.0, math.exp(_log_delta(mu, eps)))))


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon >= 0 with delta(epsilon) <= delta for a mu-GDP mechanism (0 when already (0, delta)-DP, inf
    for mu = inf). The root is bracketed and refined to 1e-12 relative and stepped to its safe side."""
    mu = v.check_nonnegative("mu", mu, allow_inf=True)
    delta = v.check_open_unit("delta", delta)
    if math.isinf(mu):
        return math.inf
    if mu == 0:
        return 0.0
    log_delta = math.log(delta)
    f = lambda e: _log_delta(mu, e) - log_delta  # noqa: E731  decreasing in e
    if f(0.0) <= 0:
        return 0.0
    hi = max(1.0, mu * mu / 2 + mu * math.sqrt(2 * -log_delta) + 1.0)
    while f(hi) > 0:
        hi *= 2.0
    root = optimize.brentq(f, 0.0, hi, xtol=1e-14, rtol=1e-13, maxiter=500)
    # step to the safe side of the root
    eps = root
    for _ in range(60):
        if f(eps) <= 0:
            return float(eps)
        eps = eps * (1 + 1e-12) + 1e-15
    return float(hi)


def gdp_mu(epsilon: float, delta: float) -> float:
    """Largest mu such that mu-GDP implies (epsilon, delta)-DP."""
    eps = v.check_nonnegative("epsilon", epsilon)
    delta = v.check_open_unit("delta", delta)
    log_delta = math.log(delta)
    f = lambda m: _log_delta(m, eps) - log_delta  # noqa: E731  increasing in mu
    lo, hi = 1e-8, 1.0
    if f(lo) > 0:
        return 0.0
    while f(hi) <= 0:
        lo, hi = hi, hi * 2
    root = optimize.brentq(f, lo, hi, xtol=1e-15, rtol=1e-13, maxiter=500)
    m = root
    for _ in range(60):
        if f(m) <= 0:
            return float(m)
        m = m * (1 - 1e-12)
    return float(lo)


def gdp_compose(*mus: float) -> float:
    """sqrt(sum mu_i^2): exact composition of GDP mechanisms (DRS Cor. 3.3)."""
    vals = [v.check_nonnegative(f"mus[{i}]", m, allow_inf=True) for i, m in enumerate(mus)]
    return float(math.sqrt(sum(m * m for m in vals)))


def gdp_group(mu: float, group_size: int) -> float:
    """mu-GDP => (g mu)-GDP for groups of g records (DRS Thm 2.14)."""
    mu = v.check_nonnegative("mu", mu, allow_inf=True)
    g = v.check_int("group_size", group_size, min_value=1)
    return g * mu


def gaussian_mechanism_mu(sigma: float, sensitivity: float, count: int = 1) -> float:
    """mu = sqrt(count) * sensitivity / sigma for `count` Gaussian releases."""
    sigma = v.check_nonnegative("sigma", sigma)
    sensitivity = v.check_positive("sensitivity", sensitivity)
    count = v.check_int("count", count, min_value=1)
    if sigma == 0:
        return math.inf
    return math.sqrt(count) * sensitivity / sigma


def gaussian_mechanism_epsilon(sigma: float, sensitivity: float, delta: float, count: int = 1) -> float:
    """Exact epsilon of `count` Gaussian releases (analytic Gaussian mechanism)."""
    return gdp_epsilon(gaussian_mechanism_mu(sigma, sensitivity, count), delta)


def gaussian_mechanism_sigma(epsilon: float, delta: float, sensitivity: float, count: int = 1) -> float:
    """Smallest sigma for which `count` Gaussian releases are (epsilon, delta)-DP (exact)."""
    epsilon = v.check_positive("epsilon", epsilon)
    sensitivity = v.check_positive("sensitivity", sensitivity)
    count = v.check_int("count", count, min_value=1)
    mu = gdp_mu(epsilon, delta)
    if mu == 0:
        raise ValueError(f"epsilon={epsilon!r}, delta={delta!r}: no Gaussian noise level achieves this")
    return math.sqrt(count) * sensitivity / mu


def classical_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Dwork & Roth (2014, Thm A.1): sigma = sqrt(2 ln(1.25/delta)) * Delta / epsilon; valid only for epsilon < 1."""
    epsilon = v.check_positive("epsilon", epsilon)
    delta = v.check_open_unit("delta", delta)
    sensitivity = v.check_positive("sensitivity", sensitivity)
    if epsilon >= 1:
        raise ValueError(f"epsilon={epsilon!r} must be < 1 for the classical Gaussian mechanism bound")
    return math.sqrt(2 * math.log(1.25 / delta)) * sensitivity / epsilon
