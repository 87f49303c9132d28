"""User-level DP output perturbation (user-level private convex optimisation spec §2.2, §3).

Algorithm 1 (DelOutputPert) at (eps, delta) with target deletion sensitivity Delta:
eps' = eps/2, delta' = delta/(e^eps + 2), kappa = ceil(1 + ln(1/delta')/eps')
(rounded up: spec A2), TDLap(eps', delta') on {0..2 kappa} with pmf
proportional to exp(-eps'|r - kappa|), Gaussian std
sigma = sqrt(2 ln(2/delta')) 8 kappa Delta/eps'. Guarantee: (eps, delta) user-level
DP (replace-one-user; also add/remove-one-user, spec §1.2), including the
failure output. Schedules compose by basic composition over calls on the same
users and parallel composition (max) over disjoint user groups (spec §3.2);
advanced composition is not used by the paper.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from dpjax import _validate as v
from dpjax.accounting.gdp import gdp_delta

__all__ = [
    "UserLevelParams",
    "user_level_params",
    "tdlap_pmf",
    "user_level_audit",
    "phased_erm_params",
    "compose_user_level",
]


@dataclass(frozen=True)
class UserLevelParams:
    epsilon: float
    delta: float
    eps_prime: float
    delta_prime: float
    kappa_raw: float
    kappa: int
    sigma_over_delta: float  # sigma / Delta
    n_min: int  # 8 kappa + 2 (utility requirement, spec §3.3)

    @property
    def radius(self) -> int:
        """Robustness radius 4 kappa."""
        return 4 * self.kappa


def user_level_params(epsilon: float, delta: float) -> UserLevelParams:
    """kappa, sigma/Delta, eps', delta' of Algorithm 1; requires eps in (0, 1], delta in (0, 1/2]."""
    eps = v.check_positive("epsilon", epsilon)
    if eps > 1:
        raise ValueError(f"epsilon={epsilon!r} must be <= 1 (the paper's standing range)")
    d = v.check_open_unit("delta", delta)
    if d > 0.5:
        raise ValueError(f"delta={delta!r} must be <= 1/2")
    ep = eps / 2
    dp = d / (math.exp(eps) + 2)
    raw = 1 + math.log(1 / dp) / ep
    kappa = math.ceil(raw - 1e-12)
    sigma = math.sqrt(2 * math.log(2 / dp)) * 8 * kappa / ep
    return UserLevelParams(eps, d, ep, dp, raw, kappa, sigma, 8 * kappa + 2)


def tdlap_pmf(eps: float, kappa: int) -> np.ndarray:
    """TDLap pmf on {0, ..., 2 kappa}: p(r) proportional to exp(-eps |r - kappa|)."""
    eps = v.check_positive("eps", eps)
    kappa = v.check_int("kappa", kappa, min_value=1)
    w = np.exp(-eps * np.abs(np.arange(2 * kappa + 1) - kappa))
    return w / w.sum()


def user_level_audit(params: UserLevelParams) -> tuple[float, float]:
    """Certified (2 eps', p(0) + p(2 kappa) + e^{eps'} delta_G) with delta_G the exact Gaussian delta
    at eps' for mu = 8 kappa Delta / sigma (spec §3.1 audit quantities); must be <= (eps, delta)."""
    pmf = tdlap_pmf(params.eps_prime, params.kappa)
    mu = 8 * params.kappa / params.sigma_over_delta
    dg = gdp_delta(mu, params.eps_prime)
    return 2 * params.eps_prime, float(pmf[0] + pmf[-1] + math.exp(params.eps_prime) * dg)


def phased_erm_params(epsilon: float, delta: float, n: int, m: int) -> dict:
    """Phased-ERM (A3): T = ceil(log2(n m)) phases at (eps/T, delta/T) each (basic composition)."""
    n = v.check_int("n", n, min_value=1)
    m = v.check_int("m", m, min_value=1)
    t = max(1, math.ceil(math.log2(n * m) - 1e-12))
    p = user_level_params(epsilon / t, delta / t)
    return {"phases": t, "phase_epsilon": epsilon / t, "phase_delta": delta / t, "kappa": p.kappa,
            "radius": 4 * p.kappa, "n_min": p.n_min, "sigma_over_delta": p.sigma_over_delta, "feasible": n >= p.n_min}


def compose_user_level(calls: Iterable[tuple[float, float, object]]) -> tuple[float, float]:
    """(eps, delta) of a schedule of calls (eps_i, delta_i, user_group_id): basic composition within a group,
    max over disjoint groups (spec §3.2)."""
    sums: dict = defaultdict(lambda: [0.0, 0.0])
    any_call = False
    for i, call in enumerate(calls):
        try:
            e, d, group = call
        except (TypeError, ValueError):
            raise ValueError(f"calls[{i}]={call!r} must be a (epsilon, delta, group) triple") from None
        sums[group][0] += v.check_nonnegative(f"calls[{i}].epsilon", e)
        sums[group][1] += v.check_probability(f"calls[{i}].delta", d)
        any_call = True
    if not any_call:
        raise ValueError("calls=[] must contain at least one call")
    return max(s[0] for s in sums.values()), min(1.0, max(s[1] for s in sums.values()))
