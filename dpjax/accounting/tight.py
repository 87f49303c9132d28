"""Tight accountants for `GaussianSchedule`s: RDP, PLD, zCDP and exact GDP.

Which accountant certifies which schedule (others are refused with a
``ValueError`` naming ``accountant``):

============  ===========================================================================
accountant    certifies
============  ===========================================================================
``rdp``       poisson (add/remove: dp_accounting's Mironov-Talwar-Zhang 2019 bound),
              without-replacement (replace-one: Wang-Balle-Kasiviswanathan 2019 Thm 27),
              full / one-pass / shuffle (no amplification: each record is in one block
              per epoch, Gaussian RDP alpha*mu^2/2 composed over epochs),
              with-replacement and poisson+replace-one by the conservative
              multiplicity-conditioning bound of ISRL spec §3.9 (see
              ``conditioned_rdp``), marked in the report notes.
``pld``       poisson (both relations; replace-one uses the dominating pair
              (1-q)N(0)+qN(s) vs (1-q)N(0)+qN(-s)), full / one-pass / shuffle;
              dp_accounting PLD with pessimistic discretisation (an upper bound).
``zcdp``      full / one-pass / shuffle: rho = passes*(g Delta)^2/(2 sigma^2),
              eps = rho + 2 sqrt(rho ln(1/delta)) (Bun-Steinke 2016, Props 1.3, 1.6).
``gdp``       full / one-pass / shuffle: exact (analytic Gaussian) epsilon for
              mu = sqrt(passes) g Delta / sigma (Balle-Wang 2018; Dong-Roth-Su 2022).
============  ===========================================================================

Group privacy (g > 1): exact for the deterministic-participation schemes (the
sensitivity is multiplied by g); for random sampling the (eps, delta) group
conversion eps_g = g eps, delta_g = delta (e^{g eps} - 1)/(e^eps - 1) is
optimised over the base epsilon (Dwork-Roth 2014 Thm 2.2 generalised, by
induction), which is valid for every accountant.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import special, stats

from dpjax import _validate as v
from dpjax.accounting.events import GaussianSchedule, Neighboring, PrivacyReport, Sampling
from dpjax.accounting import gdp as _gdp

__all__ = [
    "TIGHT_ACCOUNTANTS",
    "tight_epsilon",
    "conditioned_rdp",
    "rdp_orders",
    "group_privacy_epsilon",
]

TIGHT_ACCOUNTANTS = ("rdp", "pld", "zcdp", "gdp")
_DETERMINISTIC = (Sampling.FULL, Sampling.ONE_PASS, Sampling.SHUFFLE)
PLD_DISCRETIZATION = 1e-4


def rdp_orders() -> np.ndarray:
    """dp_accounting's default RDP orders (1.1 ... 1024)."""
    from dp_accounting.rdp import rdp_privacy_accountant as rpa

    return np.asarray(rpa.DEFAULT_RDP_ORDERS, dtype=float)


def _refuse(accountant: str, schedule: GaussianSchedule, why: str) -> ValueError:
    return ValueError(
        f"accountant={accountant!r} cannot certify sampling={schedule.sampling.value!r} with "
        f"neighboring={schedule.neighboring.value!r}: {why}"
    )


# ----------------------------------------------------------------------------- RDP
def conditioned_rdp(schedule: GaussianSchedule, orders: np.ndarray | None = None) -> np.ndarray:
    """Per-schedule RDP by conditioning on the multiplicity Q of the changed record.

    ISRL spec §3.9. Couple the two runs so that all draws coincide; the changed
    record then appears Q times in the batch (Q ~ Bin(K, 1/n) with replacement,
    Q ~ Bernoulli(q) for Poisson) and the released means differ by at most
    2 s Q. Since exp((alpha-1) D_alpha) is jointly convex,

        exp((alpha-1) D_alpha(P || P')) <= E_Q exp(alpha (alpha-1) (2 s Q)^2 / (2 sigma^2)),

    per step; steps compose additively. Valid (it is an upper bound) but not
    tight: the gain from subsampling is linear in q instead of quadratic.
    """
    orders = rdp_orders() if orders is None else np.asarray(orders, dtype=float)
    s = schedule.contribution_bound
    sigma = schedule.noise_std
    if sigma == 0:
        return np.full_like(orders, np.inf)
    if schedule.sampling is Sampling.WITH_REPLACEMENT:
        j = np.arange(schedule.batch_size + 1, dtype=float)
        logp = stats.binom.logpmf(j, schedule.batch_size, 1.0 / schedule.dataset_size)
    elif schedule.sampling in (Sampling.POISSON, Sampling.WITHOUT_REPLACEMENT):
        q = schedule.sample_rate
        j = np.array([0.0, 1.0])
        logp = np.array([math.log1p(-q) if q < 1 else -np.inf, math.log(q)])
    else:
        raise ValueError(f"sampling={schedule.sampling.value!r} is not a random-sampling scheme")
    a = orders[:, None]
    expo = a * (a - 1) * (2 * s * j[None, :]) ** 2 / (2 * sigma**2)
    lse = special.logsumexp(logp[None, :] + expo, axis=1)
    rdp = np.maximum(lse, 0.0) / (orders - 1)
    return schedule.steps * rdp


def _rdp_vector(schedule: GaussianSchedule) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    from dp_accounting import rdp as dpa_rdp

    orders = rdp_orders()
    notes: tuple[str, ...] = ()
    if schedule.sampling is Sampling.WITH_REPLACEMENT or (
        schedule.sampling is Sampling.POISSON and schedule.neighboring is Neighboring.REPLACE_ONE
    ):
        notes = (
            "conservative multiplicity-conditioning RDP bound (ISRL spec §3.9); not tight"
            + ("; prefer accountant='pld'" if schedule.sampling is Sampling.POISSON else ""),
        )
        return orders, conditioned_rdp(schedule.replace(group_size=1), orders), notes
    acc = dpa_rdp.RdpAccountant(orders=orders, neighboring_relation=schedule.dp_neighboring_relation)
    base = schedule if schedule.sampling in _DETERMINISTIC else schedule.replace(group_size=1)
    acc.compose(base.to_dp_event())
    if schedule.sampling in (Sampling.ONE_PASS, Sampling.SHUFFLE):
        notes = ("no amplification by shuffling claimed: each record is in one block per epoch",)
    return orders, acc.rdp, notes


def _rdp_delta_fn(orders, rdp) -> Callable[[float], float]:
    from dp_accounting.rdp.rdp_privacy_accountant import compute_delta

    return lambda eps: float(compute_delta(orders, rdp, eps)[0])


def _rdp_eps(orders, rdp, delta) -> float:
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    if np.all(np.isinf(rdp)):
        return math.inf
    return float(compute_epsilon(orders, rdp, delta)[0])


# ----------------------------------------------------------------------------- PLD
def _pld_accountant(schedule: GaussianSchedule, discretization: float | None = None):
    from dp_accounting.pld import PLDAccountant

    if schedule.sampling in (Sampling.WITHOUT_REPLACEMENT, Sampling.WITH_REPLACEMENT):
        raise _refuse(
            "pld",
            schedule,
            "dp_accounting has no PLD for fixed-size subsampling; use accountant='rdp' "
            "(Wang-Balle-Kasiviswanathan bound / multiplicity conditioning) or Poisson sampling",
        )
    acc = PLDAccountant(
        neighboring_relation=schedule.dp_neighboring_relation,
        value_discretization_interval=discretization or PLD_DISCRETIZATION,
    )
    base = schedule if schedule.sampling in _DETERMINISTIC else schedule.replace(group_size=1)
    acc.compose(base.to_dp_event())
    return acc


# ------------------------------------------------------------------- group privacy
def group_privacy_epsilon(delta_fn: Callable[[float], float], group_size: int, delta: float) -> float:
    """Smallest g*eps with delta_fn(eps) * (e^{g eps}-1)/(e^eps-1) <= delta.

    `delta_fn(eps)` is the base (single-record) privacy curve. Group privacy of
    (eps, delta)-DP: (g eps, delta * sum_{i<g} e^{i eps})-DP. Any feasible eps
    gives a valid guarantee; we scan a log grid and refine by bisection.
    """
    g = v.check_int("group_size", group_size, min_value=1)
    delta = v.check_open_unit("delta", delta)

    def total_delta(eps: float) -> float:
        if eps == 0:
            factor = float(g)
        else:
            factor = math.expm1(g * eps) / math.expm1(eps) if g * eps < 700 else math.inf
        base = delta_fn(eps)
        return base * factor if base > 0 else 0.0

    grid = np.concatenate([[0.0], np.geomspace(1e-6, 100.0, 400)])
    prev = None
    for eps in grid:
        if total_delta(float(eps)) <= delta:
            if prev is None:
                return 0.0
            lo, hi = prev, float(eps)
            for _ in range(60):
                mid = 0.5 * (lo + hi)
                if total_delta(mid) <= delta:
                    hi = mid
                else:
                    lo = mid
                if hi - lo <= 1e-10 * hi:
                    break
            return g * hi
        prev = float(eps)
    return math.inf


# ------------------------------------------------------------------------- driver
def tight_epsilon(
    schedule: GaussianSchedule, delta: float, accountant: str, pld_discretization: float | None = None
) -> PrivacyReport:
    """(epsilon, delta) of `schedule` under one of `TIGHT_ACCOUNTANTS`.

    `pld_discretization` overrides the PLD value-discretisation interval
    (default `PLD_DISCRETIZATION` = 1e-4; dp_accounting's pessimistic
    discretisation keeps the result an upper bound for any interval).
    """
    v.check_choice("accountant", accountant, TIGHT_ACCOUNTANTS)
    delta = v.check_open_unit("delta", delta)
    notes: list[str] = []

    def report(eps: float) -> PrivacyReport:
        if schedule.noise_std == 0:
            notes.append("noise_std = 0: non-private")
        eps = float(eps)
        if math.isnan(eps):  # defensive: never hand a NaN to the caller
            raise ValueError(f"accountant={accountant!r} produced no finite bound for this schedule")
        return PrivacyReport(
            epsilon=max(eps, 0.0),
            delta=delta,
            accountant=accountant,
            sampling=schedule.sampling.value,
            neighboring=schedule.neighboring.value,
            unit=schedule.unit.value,
            noise_std=schedule.noise_std,
            notes=tuple(notes),
        )

    g = schedule.group_size
    if g > 1:
        notes.append(
            f"group privacy for groups of {g} records"
            + (" (sensitivity x g: exact)" if schedule.sampling in _DETERMINISTIC else " via (eps, delta) group conversion")
        )
    if schedule.noise_std == 0:
        return report(math.inf)

    if accountant in ("zcdp", "gdp"):
        if schedule.sampling not in _DETERMINISTIC:
            raise _refuse(accountant, schedule, "only deterministic participation (full, one-pass, shuffle without amplification) is certified; use 'rdp' or 'pld'")
        mu = math.sqrt(schedule.passes) * g * schedule.sensitivity / schedule.noise_std
        if schedule.sampling is not Sampling.FULL:
            notes.append("no amplification by shuffling claimed: each record is in one block per epoch")
        if accountant == "gdp":
            return report(_gdp.gdp_epsilon(mu, delta))
        rho = mu * mu / 2.0
        return report(rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta)))

    if accountant == "rdp":
        orders, rdp, extra = _rdp_vector(schedule)
        notes.extend(extra)
        if g > 1 and schedule.sampling not in _DETERMINISTIC:
            return report(group_privacy_epsilon(_rdp_delta_fn(orders, rdp), g, delta))
        return report(_rdp_eps(orders, rdp, delta))

    # pld
    acc = _pld_accountant(schedule, pld_discretization)
    if schedule.sampling in _DETERMINISTIC and schedule.sampling is not Sampling.FULL:
        notes.append("no amplification by shuffling claimed: each record is in one block per epoch")
    if g > 1 and schedule.sampling not in _DETERMINISTIC:
        return report(group_privacy_epsilon(lambda e: float(acc.get_delta(e)), g, delta))
    return report(acc.get_epsilon(delta))
