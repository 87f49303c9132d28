"""f-DP toolkit (Dong, Roth & Su 2022): trade-off functions, mixtures, bound families.

Conventions follow van Dijk et al. (Appendices B-C, "Generalizing DP-SGD with Shuffling and Batch Clipping"):

* ``tradeoff_gaussian(mu, a) = G_mu(a) = Phi(Phi^{-1}(1-a) - mu)``;
* ``tradeoff_eps_delta(eps, delta, a) = max{0, 1-delta-e^eps a, e^-eps (1-delta-a)}`` (the paper prints "min", a
  typo that would make it identically 0); ``delta_from_tradeoff(f, eps) = sup_a (1 - e^eps a - f(a))``, f symmetric;
* Gaussian mixtures (Lemma B.5), the c = 0 atom handled explicitly; their exact (eps, delta) curve is
  sum_c q_c delta_GDP(eps; mu_c) (conjugate of an infimal combination = weighted sum of conjugates);
* bound families f^L (Def. 5.4) and f^U (Def. 5.3). GDP composition etc. live in `dpjax.accounting.gdp`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
from scipy import optimize, special

from dpjax import _validate as v
from dpjax.accounting.calibration import bisect_threshold
from dpjax.accounting.gdp import gdp_delta

__all__ = [
    "tradeoff_gaussian", "tradeoff_eps_delta", "delta_from_tradeoff", "epsilon_from_tradeoff", "mixture_tradeoff",
    "mixture_delta", "mixture_epsilon", "f_lower", "f_upper", "f_lower_beta_star", "delta_from_lower",
]


def _alpha(a) -> np.ndarray:
    arr = np.asarray(a, dtype=float)
    if np.any(np.isnan(arr)) or np.any(arr < 0) or np.any(arr > 1):
        raise ValueError(f"alpha={a!r} must lie in [0, 1]")
    return arr


def tradeoff_gaussian(mu: float, alpha):
    """G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu) (vectorised in alpha)."""
    mu = v.check_nonnegative("mu", mu)
    a = _alpha(alpha)
    with np.errstate(divide="ignore"):
        out = special.ndtr(special.ndtri(1.0 - a) - mu)
    return float(out) if out.ndim == 0 else out


def tradeoff_eps_delta(epsilon: float, delta: float, alpha):
    """f_{eps,delta}(alpha) = max{0, 1 - delta - e^eps alpha, e^{-eps}(1 - delta - alpha)}."""
    eps = v.check_nonnegative("epsilon", epsilon)
    d = v.check_probability("delta", delta)
    a = _alpha(alpha)
    out = np.maximum(0.0, np.maximum(1 - d - math.exp(eps) * a, math.exp(-eps) * (1 - d - a)))
    return float(out) if out.ndim == 0 else out


def delta_from_tradeoff(f: Callable[[np.ndarray], np.ndarray], epsilon: float, grid: int = 20001) -> float:
    """sup_a (1 - e^eps a - f(a)) for a symmetric trade-off function f: a grid maximum (a lower estimate) refined by
    a bounded scalar search around it. A generic cross-check: certify with closed forms (e.g. `mixture_delta`)."""
    eps = v.check_nonnegative("epsilon", epsilon)
    a = np.linspace(0.0, 1.0, grid)
    vals = 1.0 - math.exp(eps) * a - np.asarray(f(a), dtype=float)
    i = int(np.argmax(vals))
    lo, hi = a[max(i - 1, 0)], a[min(i + 1, grid - 1)]
    best = float(vals[i])
    if hi > lo:
        res = optimize.minimize_scalar(lambda t: -(1.0 - math.exp(eps) * t - float(f(np.asarray(t)))),
                                       bounds=(lo, hi), method="bounded", options={"xatol": 1e-12})
        best = max(best, -float(res.fun))
    return max(0.0, best)


def epsilon_from_tradeoff(delta_fn: Callable[[float], float], delta: float, eps_max: float = 1000.0) -> float:
    """Smallest eps in [0, eps_max] with delta_fn(eps) <= delta (bisection; delta_fn non-increasing); inf when even
    eps_max does not reach delta. The upper end of the final bracket is returned, so delta_fn(returned) <= delta."""
    d = v.check_open_unit("delta", delta)
    if delta_fn(0.0) <= d:
        return 0.0
    if delta_fn(eps_max) > d:
        return math.inf
    lo, hi = 0.0, 1.0
    while delta_fn(hi) > d:
        lo, hi = hi, min(2 * hi, eps_max)
    return bisect_threshold(lambda eps: delta_fn(eps) <= d, lo, hi, iterations=200, rtol=1e-12, floor=1.0)


def _law(law: Mapping[float, float]) -> tuple[np.ndarray, np.ndarray]:
    if not law:
        raise ValueError("law={} must be a non-empty mapping mu -> probability")
    mus = np.array([v.check_nonnegative("law key (mu)", m) for m in law], dtype=float)
    ps = np.array([v.check_probability("law value (probability)", p) for p in law.values()], dtype=float)
    total = float(ps.sum())  # a float in the message, not np.float64(...)
    if not total <= 1.0 + 1e-9:
        raise ValueError(f"law probabilities sum to {total!r} > 1")
    return mus, ps


def mixture_delta(law: Mapping[float, float], epsilon: float, dropped_mass: float = 0.0) -> float:
    """Exact delta(eps) of the labelled Gaussian mixture {mu: q} (mu = 0 contributes 0),
    plus `dropped_mass` charged as a catastrophic component."""
    mus, ps = _law(law)
    eps = v.check_nonnegative("epsilon", epsilon)
    rho = v.check_probability("dropped_mass", dropped_mass)
    total = sum(p * gdp_delta(m, eps) for m, p in zip(mus, ps) if m > 0 and p > 0)
    return min(1.0, total + rho)


def mixture_epsilon(law: Mapping[float, float], delta: float, dropped_mass: float = 0.0) -> float:
    """Smallest eps with `mixture_delta(law, eps) <= delta`."""
    d = v.check_open_unit("delta", delta)
    rho = v.check_probability("dropped_mass", dropped_mass)
    if rho >= d:
        raise ValueError(f"delta={delta!r} must exceed the dropped probability mass {rho!r}")
    return epsilon_from_tradeoff(lambda e: mixture_delta(law, e, rho), d)


def mixture_tradeoff(law: Mapping[float, float], alpha: float) -> float:
    """Trade-off function of a Gaussian mixture (Lemma B.5) including the mu = 0 atom: 1 - alpha = sum_c q_c
    Phi(Lambda/mu_c + mu_c/2) defines Lambda, f(alpha) = sum_c q_c Phi(Lambda/mu_c - mu_c/2). The mu = 0 atom rejects
    all (Lambda < 0) or nothing (Lambda > 0); alpha inside its jump is interpolated."""
    mus, ps = _law(law)
    a = float(_alpha(alpha))
    q0 = float(ps[mus == 0].sum())
    pos = mus > 0
    m, p = mus[pos], ps[pos]

    def alpha_of(lam: float) -> float:
        atom = q0 if lam < 0 else 0.0
        return atom + float(np.sum(p * (1.0 - special.ndtr(lam / m + m / 2))))

    def beta_of(lam: float) -> float:
        atom = q0 if lam > 0 else 0.0
        return atom + float(np.sum(p * special.ndtr(lam / m - m / 2)))

    if len(m) == 0:
        return 1.0 - a
    a_minus = q0 + float(np.sum(p * (1.0 - special.ndtr(m / 2))))  # alpha(0^-)
    a_plus = a_minus - q0  # alpha(0^+)
    if a_plus <= a <= a_minus and q0 > 0:
        b_minus = float(np.sum(p * special.ndtr(-m / 2)))
        b_plus = b_minus + q0
        w = (a_minus - a) / q0
        return b_minus + w * (b_plus - b_minus)
    lam_max = 60.0 * (1 + float(m.max()) ** 2)
    if a <= 0:
        return beta_of(lam_max)
    if a >= 1:
        return beta_of(-lam_max)
    lo, hi = (-lam_max, -1e-300) if a > a_minus else (1e-300, lam_max)
    lam = optimize.brentq(lambda t: alpha_of(t) - a, lo, hi, xtol=1e-14, rtol=1e-14, maxiter=500)
    return beta_of(lam)


def f_lower_beta_star(mu: float, l: float) -> float:
    """The root beta* in [0,1] of G_mu(beta) - l = beta (Def. 5.4)."""
    mu = v.check_nonnegative("mu", mu)
    l = v.check_probability("l", l)
    g = lambda b: tradeoff_gaussian(mu, b) - l - b  # noqa: E731
    if g(0.0) <= 0:
        return 0.0
    return optimize.brentq(g, 0.0, 1.0, xtol=1e-15)


def f_lower(mu: float, l: float, alpha):
    """f^L (Def. 5.4): max{0, G_mu(a) - l} on [0, beta*], G_mu(min{1, a + l}) on [beta*, 1]."""
    mu = v.check_nonnegative("mu", mu)
    l = v.check_probability("l", l)
    a = _alpha(alpha)
    bs = f_lower_beta_star(mu, l)
    left = np.maximum(0.0, tradeoff_gaussian(mu, a) - l)
    right = tradeoff_gaussian(mu, np.minimum(1.0, a + l))
    out = np.where(a <= bs, left, right)
    return float(out) if out.ndim == 0 else out


def f_upper(mu: float, u: float, alpha):
    """f^U (Def. 5.3): u + (1-u) G_mu on [0, beta0], slope -1 on [beta0, beta1], G_mu((a-u)/(1-u)) after."""
    mu = v.check_positive("mu", mu)
    u = v.check_probability("u", u)
    if u >= 1:
        raise ValueError(f"u={u!r} must be < 1")
    a = _alpha(alpha)
    b0 = 1.0 - special.ndtr(mu / 2 - math.log(1 - u) / mu)
    b1 = u + (1 - u) * (1.0 - special.ndtr(mu / 2 + math.log(1 - u) / mu))
    first = u + (1 - u) * tradeoff_gaussian(mu, a)
    mid = b0 + b1 - a
    last = tradeoff_gaussian(mu, np.clip((a - u) / (1 - u), 0.0, 1.0))
    out = np.where(a <= b0, first, np.where(a <= b1, mid, last))
    return float(out) if out.ndim == 0 else out


def delta_from_lower(mu: float, l: float, epsilon: float) -> float:
    """delta(eps) certified by f^L: delta_GDP(eps; mu) + l."""
    return min(1.0, gdp_delta(mu, epsilon) + v.check_probability("l", l))
