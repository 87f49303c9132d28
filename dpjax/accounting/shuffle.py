"""Amplification by shuffling and the shuffle-model chains.

* `fmt_closed_form_epsilon`: Feldman, McMillan & Talwar (2021), "Hiding among
  the clones", Thm 3.1: n shuffled eps0-DP local reports are (eps, delta)-DP with
  eps = ln(1 + (e^eps0 - 1)/(e^eps0 + 1) (8 sqrt(e^eps0 ln(4/delta))/sqrt(n) + 8 e^eps0/n))
  when eps0 <= ln(n/(16 ln(2/delta))) (ValueError otherwise).
* `fmt_numerical_delta` / `fmt_numerical_epsilon`: the same paper's dominating
  pair (Thm 3.2), evaluated exactly: C ~ Bin(n-1, e^{-eps0}) clones,
  A ~ Bin(C, 1/2), D ~ Bern(e^eps0/(e^eps0+1)); P = (A + D, C - A + 1 - D) vs
  Q = (A + 1 - D, C - A + D); delta(eps) = E_C sum_k (P - e^eps Q)_+, both
  orders. Binomial mass of C below 1e-20 is truncated and charged to delta.
* `approx_dp_shuffle_delta`: the approximate-DP extension used by ISRL spec
  §3.6 (delta = delta_s + (e^eps + 1)(1 + e^{-eps0}/2) n delta0, reconstructed;
  <= 9 n delta0 in the paper's regime).
* `isrl_shuffle_chain`: ISRL-DP shuffled Noisy MB-SGD (A4) "paper-structure"
  chain of spec §3.6, numerically inverted in sigma by `isrl_shuffle_sigma`.
  Neither mode is exact: the chain stacks closed-form bounds.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import stats

from dpjax import _validate as v
from dpjax.accounting.gdp import gaussian_mechanism_epsilon

__all__ = [
    "fmt_closed_form_epsilon",
    "fmt_numerical_delta",
    "fmt_numerical_epsilon",
    "approx_dp_shuffle_delta",
    "subsampled_epsilon",
    "advanced_composition",
    "isrl_shuffle_chain",
    "isrl_shuffle_sigma",
]


def fmt_closed_form_epsilon(eps0: float, n: int, delta: float) -> float:
    """FMT 2021 Thm 3.1 closed form (see module docstring)."""
    eps0 = v.check_positive("eps0", eps0)
    n = v.check_int("n", n, min_value=1)
    delta = v.check_open_unit("delta", delta)
    limit = math.log(n / (16 * math.log(2 / delta))) if n > 16 * math.log(2 / delta) else -math.inf
    if eps0 > limit:
        raise ValueError(
            f"eps0={eps0!r} must be <= ln(n/(16 ln(2/delta))) = {limit:.4g} for the closed-form shuffle bound (n={n})"
        )
    e = math.exp(eps0)
    return math.log1p((e - 1) / (e + 1) * (8 * math.sqrt(e * math.log(4 / delta)) / math.sqrt(n) + 8 * e / n))


@lru_cache(maxsize=32)
def _fmt_pair(eps0: float, n: int):
    """FMT dominating pair tables: (weights of C, P(k|c), Q(k|c), truncated C mass)."""
    pc = math.exp(-eps0)
    lo = int(stats.binom.ppf(1e-21, n - 1, pc))
    hi = int(stats.binom.isf(1e-21, n - 1, pc))
    cs = np.arange(max(lo, 0), min(hi, n - 1) + 1)
    wc = stats.binom.pmf(cs, n - 1, pc)
    dropped = max(0.0, 1.0 - float(wc.sum()))
    p = math.exp(eps0) / (math.exp(eps0) + 1)
    k = np.arange(int(cs[-1]) + 2)[None, :]
    c = cs[:, None]
    b = np.where(k <= c, stats.binom.pmf(np.minimum(k, c), c, 0.5), 0.0)
    b_prev = np.concatenate([np.zeros((len(cs), 1)), b[:, :-1]], axis=1)
    return wc, p * b_prev + (1 - p) * b, (1 - p) * b_prev + p * b, dropped


def fmt_numerical_delta(eps0: float, n: int, epsilon: float) -> float:
    """Exact delta(eps) of FMT's dominating pair for n shuffled eps0-DP reports (valid upper bound)."""
    eps0 = v.check_positive("eps0", eps0)
    n = v.check_int("n", n, min_value=1)
    eps = v.check_nonnegative("epsilon", epsilon)
    if n == 1:
        return max(0.0, (1 - math.exp(eps - eps0)) / (1 + math.exp(-eps0))) if eps < eps0 else 0.0
    wc, pk, qk, dropped = _fmt_pair(eps0, n)
    ee = math.exp(eps)
    d = np.maximum(np.clip(pk - ee * qk, 0, None).sum(axis=1), np.clip(qk - ee * pk, 0, None).sum(axis=1))
    return float(min(1.0, float(np.dot(wc, d)) + dropped))


def fmt_numerical_epsilon(eps0: float, n: int, delta: float) -> float:
    """Smallest eps in [0, eps0] with `fmt_numerical_delta` <= delta (bisection, 1e-7 absolute)."""
    eps0 = v.check_positive("eps0", eps0)
    delta = v.check_open_unit("delta", delta)
    if fmt_numerical_delta(eps0, n, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, eps0
    if fmt_numerical_delta(eps0, n, hi) > delta:
        return eps0  # shuffling never hurts: the local guarantee remains
    while hi - lo > 1e-7:
        mid = 0.5 * (lo + hi)
        if fmt_numerical_delta(eps0, n, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def approx_dp_shuffle_delta(eps: float, eps0: float, n: int, delta_shuffle: float, delta0: float) -> float:
    """delta_s + (e^eps + 1)(1 + e^{-eps0}/2) n delta0 (ISRL spec §3.6, reconstructed FMT Thm 3.8)."""
    eps = v.check_nonnegative("eps", eps)
    eps0 = v.check_positive("eps0", eps0)
    n = v.check_int("n", n, min_value=1)
    return delta_shuffle + (math.exp(eps) + 1) * (1 + math.exp(-eps0) / 2) * n * delta0


def subsampled_epsilon(eps: float, q: float, mode: str = "tight") -> float:
    """Amplification by subsampling: tight ln(1 + q(e^eps - 1)); paper 2 q eps (needs eps <= 1)."""
    eps = v.check_nonnegative("eps", eps)
    q = v.check_probability("q", q)
    v.check_choice("mode", mode, ("tight", "paper"))
    if mode == "paper":
        if eps > 1:
            raise ValueError(f"eps={eps!r} must be <= 1 for the paper's 2 q eps subsampling bound")
        return 2 * q * eps
    return math.log1p(q * math.expm1(eps))


def advanced_composition(eps: float, delta: float, k: int, delta_prime: float) -> tuple[float, float]:
    """Dwork-Roth Thm 3.20: k-fold (eps, delta) => (sqrt(2k ln(1/delta')) eps + k eps (e^eps - 1), k delta + delta')."""
    eps = v.check_nonnegative("eps", eps)
    delta = v.check_probability("delta", delta)
    k = v.check_int("k", k, min_value=1)
    dp = v.check_open_unit("delta_prime", delta_prime)
    return math.sqrt(2 * k * math.log(1 / dp)) * eps + k * eps * math.expm1(eps), k * delta + dp


def isrl_shuffle_chain(
    sigma: float, lipschitz: float, n: int, silos: int, reports: int, rounds: int, delta: float, mode: str = "paper"
) -> dict:
    """ISRL spec §3.6 chain for shuffled Noisy MB-SGD (A4). Returns the per-stage quantities and
    (epsilon, delta_total). `reports` = M (shuffled reports per round); q = M/(nN).

    mode="paper": 2 q eps subsampling (needs eps_hat <= 1) and advanced composition;
    mode="tight": ln(1 + q(e^eps - 1)) subsampling, numerical FMT bound, advanced composition.
    Raises ValueError when a condition of the chain fails (naming it).
    """
    sigma = v.check_positive("sigma", sigma)
    lip = v.check_positive("lipschitz", lipschitz)
    n = v.check_int("n", n, min_value=1)
    silos = v.check_int("silos", silos, min_value=1)
    m = v.check_int("reports", reports, min_value=1, max_value=n * silos)
    r = v.check_int("rounds", rounds, min_value=1)
    delta = v.check_open_unit("delta", delta)
    v.check_choice("mode", mode, ("paper", "tight"))
    d0 = n * silos * delta / (18 * r * m * m)
    if not 0 < d0 < 1:
        raise ValueError(f"delta={delta!r}: the chain's local delta0 = nN delta/(18 R M^2) = {d0!r} is not in (0, 1)")
    e0 = gaussian_mechanism_epsilon(sigma, 2 * lip, d0)
    ds = m * d0
    if mode == "paper":
        e_hat = fmt_closed_form_epsilon(e0, m, ds) if e0 > 0 else 0.0
    else:
        e_hat = fmt_numerical_epsilon(e0, m, ds) if e0 > 0 else 0.0
    d_hat = approx_dp_shuffle_delta(e_hat, max(e0, 1e-300), m, ds, d0)
    q = m / (n * silos)
    e_r = subsampled_epsilon(e_hat, q, mode)
    d_r = q * d_hat
    e_tot, d_tot = advanced_composition(e_r, d_r, r, delta / 2)
    return {"eps0": e0, "delta0": d0, "eps_shuffle": e_hat, "delta_shuffle": d_hat, "q": q,
            "eps_round": e_r, "delta_round": d_r, "epsilon": e_tot, "delta": d_tot}


def isrl_shuffle_sigma(
    epsilon: float, lipschitz: float, n: int, silos: int, reports: int, rounds: int, delta: float, mode: str = "paper"
) -> float:
    """Smallest sigma (bisection, 1e-6 relative) with chain epsilon <= target and delta_total <= delta."""
    target = v.check_positive("epsilon", epsilon)

    def ok(s: float) -> bool:
        try:
            out = isrl_shuffle_chain(s, lipschitz, n, silos, reports, rounds, delta, mode)
        except ValueError:
            return False
        return out["epsilon"] <= target and out["delta"] <= delta

    hi = 2 * lipschitz
    for _ in range(80):
        if ok(hi):
            break
        hi *= 2
    else:
        raise ValueError(f"epsilon={epsilon!r}: no sigma satisfies the shuffle chain's conditions")
    lo = hi / 2
    while ok(lo) and lo > 1e-12:
        hi, lo = lo, lo / 2
    while hi / lo - 1 > 1e-6:
        mid = math.sqrt(lo * hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi
