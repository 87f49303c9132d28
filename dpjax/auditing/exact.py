"""Exact privacy curves where the output distributions are computable.

* ``hockey_stick``: ``delta(eps) = max(sum (P - e^eps Q)_+, sum (Q - e^eps P)_+)``
  for two pmfs on a common support (the tight delta of the pair, both orders).
* ``exact_epsilon``: the smallest eps with ``hockey_stick <= delta`` (bisection).
* ``shifted_binomial_pmfs``: the P_1D count of ones on neighbouring inputs
  (Cheu et al. 2022, Algorithm 1) when every other user's rounding is
  deterministic: ``Bin(trials, p)`` vs ``shift + Bin(trials, p)``.

Pure NumPy/SciPy.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from dpjax import _validate as v

__all__ = ["hockey_stick", "exact_epsilon", "shifted_binomial_pmfs"]


def hockey_stick(p, q, epsilon: float) -> float:
    """Tight delta(epsilon) of the pair of pmfs ``p``, ``q`` (symmetrised)."""
    p = np.asarray(p, np.float64)
    q = np.asarray(q, np.float64)
    if p.shape != q.shape:
        raise ValueError(f"p has shape {p.shape} but q has shape {q.shape}; they must match")
    e = math.exp(v.check_nonnegative("epsilon", epsilon))
    return float(max(np.sum(np.clip(p - e * q, 0, None)), np.sum(np.clip(q - e * p, 0, None))))


def exact_epsilon(p, q, delta: float, eps_max: float = 60.0, tol: float = 1e-9) -> float:
    """Smallest epsilon with ``hockey_stick(p, q, epsilon) <= delta`` (upper end of a bisection bracket)."""
    delta = v.check_open_unit("delta", delta)
    if hockey_stick(p, q, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, eps_max
    if hockey_stick(p, q, hi) > delta:
        return math.inf
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if hockey_stick(p, q, mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def shifted_binomial_pmfs(trials: int, probability: float, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """pmfs of ``Bin(trials, p)`` and ``shift + Bin(trials, p)`` on a common support.

    The support is ``0..trials+shift`` cut to the mean +- 40 standard deviations
    (+ shift): outside it both pmfs are below 1e-300, i.e. zero in float64.
    """
    trials = v.check_int("trials", trials, min_value=0)
    shift = v.check_int("shift", shift, min_value=0)
    p = v.check_probability("probability", probability)
    mean, sd = trials * p, math.sqrt(trials * p * (1 - p))
    lo = max(0, math.floor(mean - 40 * sd - 1))
    hi = min(trials + shift, math.ceil(mean + 40 * sd + 1) + shift)
    k = np.arange(lo, hi + 1)
    return stats.binom.pmf(k, trials, p), stats.binom.pmf(k - shift, trials, p)
