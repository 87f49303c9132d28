"""Optimal composition of k (eps0, delta0)-DP mechanisms (Kairouz, Oh & Viswanath 2015, Theorem 3.3).

The worst case of k adaptive (eps0, delta0)-DP mechanisms is k randomized-response pairs, so the composed
delta at a given epsilon is an expectation over J ~ Bin(k, 1/(1 + e^eps0)). P_GD composes T rounds with T
up to 3e6 (``shuffle_sco.pgd_round_budget``), so the pmf is summed over a window around its mean and the
mass outside is bounded (Hoeffding) and added: the result stays an upper bound on delta.

Pure Python (never imports jax).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

def optimal_composition_delta(eps0: float, delta0: float, k: int, epsilon: float) -> float:
    """delta of the k-fold composition of (eps0, delta0)-DP mechanisms at ``epsilon`` (Kairouz, Oh & Viswanath 2015,
    Thm 3.3: the randomized-response pair is the worst case): 1 - (1 - delta0)^k (1 - delta_rr),
    delta_rr = E_P[(1 - e^{epsilon - Lk})_+], Lk = (k - 2J) eps0, J ~ Bin(k, 1/(1 + e^eps0))."""
    if eps0 == 0:
        return 1 - (1 - delta0) ** k
    pmf, loss, outside = _rr_composition(eps0, k)
    # ``outside`` bounds the mass of the J not summed; the integrand is <= 1, so adding it keeps delta an upper bound
    rr = float(np.sum(pmf * -np.expm1(np.minimum(epsilon - loss, 0.0)))) + outside
    return 1 - (1 - delta0) ** k * (1 - min(1.0, max(0.0, rr)))


#: J is summed over mean +- this many sqrt(k) when k > RR_WINDOW_MIN_K (Hoeffding: the rest has mass
#: <= 2 exp(-2 * 40^2), far below float64's smallest number, and is added as a bound anyway)
RR_WINDOW_SQRT_K = 40
RR_WINDOW_MIN_K = 10_000


def _rr_composition(eps0: float, k: int):
    """Privacy-loss pmf of k randomized-response pairs (loss (k - 2j) eps0, J ~ Bin(k, 1/(1+e^eps0))) and a bound on
    the probability of the J left out: for k > ``RR_WINDOW_MIN_K`` only the J within ``RR_WINDOW_SQRT_K`` sqrt(k) of
    the mean are evaluated (P_GD's T reaches 3e6 rounds); the rest is bounded by Hoeffding's inequality
    P(|J - kp| >= t) <= exp(-2 t^2/k) per side."""
    p = 1 / (1 + math.exp(eps0))
    if k <= RR_WINDOW_MIN_K:
        j = np.arange(k + 1)
        return stats.binom.pmf(j, k, p), (k - 2 * j) * eps0, 0.0
    half = RR_WINDOW_SQRT_K * math.sqrt(k)
    lo, hi = max(0, math.floor(k * p - half)), min(k, math.ceil(k * p + half))
    j = np.arange(lo, hi + 1)
    outside = ((math.exp(-2 * (k * p - (lo - 1)) ** 2 / k) if lo > 0 else 0.0)
               + (math.exp(-2 * ((hi + 1) - k * p) ** 2 / k) if hi < k else 0.0))
    return stats.binom.pmf(j, k, p), (k - 2 * j) * eps0, outside
