"""Cheu et al. shuffle protocols P_1D / P_vec: parameter calculators (shuffle-private SCO spec §2.1-§2.3, §3.3).

Inputs are l2-bounded vectors (||x|| <= Delta_2) shifted into [0, 2 Delta_2]
per coordinate; each coordinate runs P_1D with range 2 Delta_2, precision g,
b binomial trials with success probability p. Guarantee: (eps, delta)-shuffle
DP for eps <= 15, delta < 1/2 (Thm 3.2 via Lemma 3.1 per coordinate and the
heterogeneous advanced composition Lemma 3.3).

Modes:
* ``paper``: eps_hat = eps/(18 sqrt(ln(1/gamma))), gamma = delta/(d+1),
  g = max(ceil(sqrt n), ceil(sqrt d), 4) (normalised inputs),
  b = floor(180 g^2 ln(2/delta_hat)/(eps_hat^2 n)) + 1, p = 90 g^2 ln(2/delta_hat)/(b eps_hat^2 n).
* ``lemma_opt``: g = max(ceil(sqrt n), ceil(10 sqrt d), 4), S = 4d/g^2 + 4 sqrt(d)/g + 1,
  eps_hat solves sqrt(2 ln(1/gamma) S) eps_hat + c_e S eps_hat^2 = eps with
  c_e = (e^{eps_max} - 1)/eps_max, eps_max = eps_hat (2/g + 1) (still proven by the paper's lemmas).

The protocol's per-coordinate std is ~350-530x (paper) / ~45-55x (lemma_opt)
that of a Gaussian mechanism with the same l2 sensitivity (spec §2.3 table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpjax import _validate as v
from dpjax.accounting.gdp import gaussian_mechanism_sigma

__all__ = ["PvecParams", "p1d_params", "pvec_params", "pvec_sum_std", "pvec_gaussian_ratio"]


@dataclass(frozen=True)
class PvecParams:
    """Parameters of P_vec (or P_1D when d = 1): g, b, p, eps_hat, delta_hat (per coordinate) and the mode."""

    epsilon: float
    delta: float
    n: int
    d: int
    g: int
    b: int
    p: float
    eps_hat: float
    delta_hat: float
    mode: str


def _check(epsilon, delta, n, d):
    eps = v.check_positive("epsilon", epsilon)
    if eps > 15:
        raise ValueError(f"epsilon={epsilon!r} must be <= 15 for P_1D/P_vec (Lemma 3.1)")
    dl = v.check_open_unit("delta", delta)
    if dl >= 0.5:
        raise ValueError(f"delta={delta!r} must be < 1/2 for P_1D/P_vec (Lemma 3.1)")
    return eps, dl, v.check_int("n", n, min_value=1), v.check_int("d", d, min_value=1)


def _b_p(g: int, eps_hat: float, delta_hat: float, n: int) -> tuple[int, float]:
    x = g * g * math.log(2 / delta_hat) / (eps_hat**2 * n)
    b = math.floor(180 * x) + 1
    return b, 90 * x / b


def p1d_params(epsilon: float, delta: float, n: int) -> PvecParams:
    """Lemma 3.1 for one scalar sum (normalised inputs): g = max(ceil(sqrt n), 4), b, p as in the lemma."""
    eps, dl, n, _ = _check(epsilon, delta, n, 1)
    g = max(math.ceil(math.sqrt(n)), 4)
    b, p = _b_p(g, eps, dl, n)
    return PvecParams(eps, dl, n, 1, g, b, p, eps, dl, "paper")


def pvec_params(epsilon: float, delta: float, n: int, d: int, mode: str = "paper") -> PvecParams:
    """P_vec parameters (see module docstring); `n` = number of summed vectors."""
    eps, dl, n, d = _check(epsilon, delta, n, d)
    v.check_choice("mode", mode, ("paper", "lemma_opt"))
    gamma = dl / (d + 1)
    if mode == "paper":
        eps_hat = eps / (18 * math.sqrt(math.log(1 / gamma)))
        g = max(math.ceil(math.sqrt(n)), math.ceil(math.sqrt(d)), 4)
    else:
        g = max(math.ceil(math.sqrt(n)), math.ceil(10 * math.sqrt(d)), 4)
        s = 4 * d / g**2 + 4 * math.sqrt(d) / g + 1
        lin = math.sqrt(2 * math.log(1 / gamma) * s)

        def total(e: float) -> float:
            em = e * (2 / g + 1)
            ce = math.expm1(em) / em
            return lin * e + ce * s * e * e

        lo, hi = 0.0, eps / lin
        for _ in range(200):  # total() is increasing; the returned eps_hat satisfies total <= eps
            mid = 0.5 * (lo + hi)
            if total(mid) <= eps:
                lo = mid
            else:
                hi = mid
        eps_hat = lo
    b, p = _b_p(g, eps_hat, gamma, n)
    return PvecParams(eps, dl, n, d, g, b, p, eps_hat, gamma, mode)


def pvec_sum_std(params: PvecParams, delta2: float = 1.0) -> float:
    """Per-coordinate std of the sum estimate with worst-case rounding:
    (Delta/g) sqrt(n/4 + n b p (1 - p)), Delta = 2 Delta_2."""
    d2 = v.check_positive("delta2", delta2)
    rng = 2 * d2
    return (rng / params.g) * math.sqrt(params.n / 4 + params.n * params.b * params.p * (1 - params.p))


def pvec_gaussian_ratio(params: PvecParams, delta2: float = 1.0) -> float:
    """Protocol std / exact analytic-Gaussian sigma for l2 sensitivity 2 Delta_2 at the same (eps, delta)."""
    return pvec_sum_std(params, delta2) / gaussian_mechanism_sigma(params.epsilon, params.delta, 2 * delta2)
