"""Tight accountants for `GaussianSchedule`s: RDP, PLD, zCDP and exact GDP.

Which accountant certifies which schedule (others are refused with a ``ValueError`` naming ``accountant``):

============  ===========================================================================
accountant    certifies
============  ===========================================================================
``rdp``       poisson (add/remove: dp_accounting's Mironov-Talwar-Zhang 2019 bound),
              without-replacement (replace-one: Wang-Balle-Kasiviswanathan 2019 Thm 27),
              full / one-pass / shuffle (no amplification: each record is in one block
              per epoch, Gaussian RDP alpha*mu^2/2 composed over epochs),
              with-replacement and poisson+replace-one by the conservative
              multiplicity-conditioning bound (condition on the changed
              record's multiplicity Q ~ Bin(K, 1/n); see
              ``conditioned_rdp``), marked in the report notes.
``pld``       poisson (both relations; replace-one uses the dominating pair
              (1-q)N(0)+qN(s) vs (1-q)N(0)+qN(-s)), full / one-pass / shuffle;
              dp_accounting PLD with pessimistic discretisation (an upper bound).
``zcdp``      full / one-pass / shuffle: rho = passes*(g Delta)^2/(2 sigma^2),
              eps = rho + 2 sqrt(rho ln(1/delta)) (Bun-Steinke 2016, Props 1.3, 1.6).
``gdp``       full / one-pass / shuffle: exact (analytic Gaussian) epsilon for
              mu = sqrt(passes) g Delta / sigma (Balle-Wang 2018; Dong-Roth-Su 2022).
============  ===========================================================================

Group privacy (g > 1): exact for the deterministic-participation schemes (the sensitivity is multiplied by g); for
random sampling the (eps, delta) group conversion eps_g = g eps, delta_g = delta (e^{g eps} - 1)/(e^eps - 1) is
optimised over the base epsilon (Dwork-Roth 2014 Thm 2.2 generalised, by induction), which is valid for every
accountant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import math
import warnings
from collections.abc import Callable, Iterable

import numpy as np
from scipy import special, stats

from dpjax import _validate as v
from dpjax.accounting.pld_dense import dense_for_self_compose
from dpjax.accounting.schedules import GaussianSchedule, Neighboring, PrivacyReport, Sampling
from dpjax.accounting import gdp as _gdp
from dpjax.accounting import wor_rdp
from dpjax.accounting.absl_logs import unconverged_orders
from dpjax.accounting.calibration import bisect_threshold

__all__ = [
    "TIGHT_ACCOUNTANTS",
    "PLD_MAX_POINTS",
    "PLD_MAX_SINGLE_POINTS",
    "certifies",
    "check_composable",
    "rdp_curve",
    "choose_pld_discretization",
    "pld_loss_width",
    "tight_epsilon",
    "conditioned_rdp",
    "rdp_orders",
    "group_privacy_epsilon",
    "NotComputableError",
    "check_computable",
    "MIN_ACCOUNTED_NOISE_MULTIPLIER",
    "MAX_ACCOUNTED_NOISE_MULTIPLIER",
    "MAX_ACCOUNTED_STEPS",
    "PLD_MAX_STEPS",
    "RDP_MAX_WITH_REPLACEMENT_BATCH",
]

TIGHT_ACCOUNTANTS = ("rdp", "pld", "zcdp", "gdp")
_DETERMINISTIC = (Sampling.FULL, Sampling.ONE_PASS, Sampling.SHUFFLE)
PLD_DISCRETIZATION = 1e-4


# ------------------------------------------------------------------ float64 domain
#: The accountants compute in float64. Below this noise multiplier (noise_std /
#: sensitivity) epsilon is astronomically large (about steps q^2 / (2 z^2) at
#: best; 5e9 for a typical DP-SGD schedule at z = 1e-4) and the privacy-loss
#: grids overflow; it is also the floor of ``calibrate_noise``'s search
#: (``api.MIN_NOISE_MULTIPLIER``).
MIN_ACCOUNTED_NOISE_MULTIPLIER = 1e-4
#: Above this noise multiplier epsilon is negligible and dp_accounting's
#: formulas lose their float64 range (overflow, non-convergence).
MAX_ACCOUNTED_NOISE_MULTIPLIER = 1e8
#: Step counts beyond 2^53 are not even exact in float64.
MAX_ACCOUNTED_STEPS = 2**53
#: dp_accounting's PLD self-composition cost grows with the number of steps (it
#: forms ``size ** steps`` as an exact integer): 1e8 steps take about a second,
#: 1e9 more than a minute. Beyond this the PLD accountant refuses (RDP is cheap).
PLD_MAX_STEPS = 10**8
#: The multiplicity-conditioned RDP bound of sampling with replacement sums
#: over the multiplicity 0..K for each of the 156 orders ([156, K+1] float64
#: arrays); beyond this batch size that would take hundreds of MiB.
RDP_MAX_WITH_REPLACEMENT_BATCH = 2**16


class NotComputableError(ValueError):
    """Epsilon of a schedule is not computable in float64 by an accountant (a ``ValueError``
    naming the argument or the accountant and saying why)."""


def check_computable(schedules, accountant: str | None = None) -> None:
    """``NotComputableError`` when a schedule lies outside the float64 domain of the accountants.

    Zero noise is accepted (epsilon = inf, reported as such). A noise multiplier below
    :data:`MIN_ACCOUNTED_NOISE_MULTIPLIER` means epsilon = inf for every practical purpose; above
    :data:`MAX_ACCOUNTED_NOISE_MULTIPLIER` it is negligible; neither is computable in float64.
    """
    for i, s in enumerate(check_composable(schedules)):
        where = "schedule" if isinstance(schedules, GaussianSchedule) else f"schedules[{i}]"
        z = s.noise_std / s.sensitivity
        if s.noise_std == 0:
            continue
        if z < MIN_ACCOUNTED_NOISE_MULTIPLIER:
            raise NotComputableError(
                f"noise_multiplier={z:.3g} ({where}.noise_std={s.noise_std!r} / sensitivity {s.sensitivity:g}) is "
                f"below {MIN_ACCOUNTED_NOISE_MULTIPLIER:g}: epsilon is not computable in float64 there and is "
                "astronomically large (epsilon = inf for any practical purpose); use more noise")
        if z > MAX_ACCOUNTED_NOISE_MULTIPLIER:
            raise NotComputableError(
                f"noise_multiplier={z:.3g} ({where}.noise_std={s.noise_std!r} / sensitivity {s.sensitivity:g}) is "
                f"above {MAX_ACCOUNTED_NOISE_MULTIPLIER:g}: epsilon is not computable in float64 there (it is "
                f"negligible already at noise multiplier {MAX_ACCOUNTED_NOISE_MULTIPLIER:g})")
        if s.steps > MAX_ACCOUNTED_STEPS:
            raise NotComputableError(f"steps={s.steps!r} ({where}.steps) is above 2**53: not computable in float64")
        if accountant == "pld" and s.sampling is Sampling.POISSON and s.steps > PLD_MAX_STEPS:
            raise NotComputableError(
                f"accountant='pld' composes at most {PLD_MAX_STEPS:.0e} steps (dp_accounting's self-composition "
                f"cost grows with the step count); {where}.steps={s.steps!r}: use accountant='rdp'")
        if (accountant == "rdp" and s.sampling is Sampling.WITH_REPLACEMENT
                and s.batch_size > RDP_MAX_WITH_REPLACEMENT_BATCH):
            raise NotComputableError(
                f"accountant='rdp' bounds sampling='with-replacement' by conditioning on the record's multiplicity "
                f"0..batch_size, at most {RDP_MAX_WITH_REPLACEMENT_BATCH} ({where}.batch_size={s.batch_size!r}); "
                "use sampling='poisson' or a smaller batch")


def _is_numeric_failure(err: BaseException) -> bool:
    """An arithmetic failure inside the numerical libraries (not one of dpjax's own argument errors)."""
    if isinstance(err, (OverflowError, ZeroDivisionError, FloatingPointError)):
        return True
    text = str(err)
    return isinstance(err, ValueError) and not isinstance(err, NotComputableError) and any(
        m in text for m in ("NaN", "math domain error", "math range error", "cannot convert float"))


@contextlib.contextmanager
def float64_guard(accountant: str):
    """Turns an overflow (or a NaN) inside the accountant's numerics into a ``NotComputableError``;
    silences the RuntimeWarnings that come with it."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            yield
    except (OverflowError, ZeroDivisionError, FloatingPointError, ValueError) as err:
        if not _is_numeric_failure(err):
            raise
        raise NotComputableError(
            f"accountant={accountant!r} cannot compute epsilon for this schedule in float64 "
            f"({type(err).__name__}: {' '.join(str(err).split())}); use accountant='rdp'"
            + (" or a larger noise multiplier" if accountant == "rdp" else "")) from None


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

    Couple the two runs so that all draws coincide; the changed record then appears Q times in the batch (Q ~ Bin(K,
    1/n) with replacement, Q ~ Bernoulli(q) for Poisson) and the released means differ by at most 2 s Q. Since
    exp((alpha-1) D_alpha) is jointly convex,

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
        q = schedule.inclusion_probability
        j = np.array([0.0, 1.0])
        logp = np.array([math.log1p(-q) if q < 1 else -np.inf, math.log(q)])
    else:
        raise ValueError(f"sampling={schedule.sampling.value!r} is not a random-sampling scheme")
    a = orders[:, None]
    expo = a * (a - 1) * (2 * s * j[None, :]) ** 2 / (2 * sigma**2)
    lse = special.logsumexp(logp[None, :] + expo, axis=1)
    rdp = np.maximum(lse, 0.0) / (orders - 1)
    return schedule.steps * rdp


def _rdp_vector(schedule: GaussianSchedule, orders=None, event=None) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """The RDP curve of ``event`` (the schedule's accounted DpEvent, ``accounted_event``) composed in dp_accounting's
    ``RdpAccountant``, except where dp_accounting's RDP has no bound for the event: with-replacement sampling and
    Poisson under replace-one (the multiplicity-conditioned bound, ``conditioned_rdp``)."""
    from dp_accounting import rdp as dpa_rdp

    orders = rdp_orders() if orders is None else np.asarray(orders, dtype=float)
    notes: tuple[str, ...] = ()
    if schedule.noise_std == 0:
        return orders, np.full_like(orders, np.inf), ("noise_std = 0: non-private",)
    if schedule.sampling is Sampling.WITH_REPLACEMENT or (
        schedule.sampling is Sampling.POISSON and schedule.neighboring is Neighboring.REPLACE_ONE
    ):
        notes = (
            "conservative multiplicity-conditioning RDP bound (conditioned on the record's multiplicity); not tight"
            + ("; prefer accountant='pld'" if schedule.sampling is Sampling.POISSON else ""),
        )
        return orders, conditioned_rdp(schedule.replace(group_size=1), orders), notes
    event = accounted_event(schedule) if event is None else event
    wor = wor_rdp.wor_gaussian_parts(event, schedule.dp_neighboring_relation)
    if wor is not None:  # dp_accounting's own numbers, its O(alpha^2) forward differences computed once
        q, z, count = wor
        return orders, np.zeros_like(orders) + count * wor_rdp.wor_gaussian_rdp(q, z, orders), notes
    acc = dpa_rdp.RdpAccountant(orders=list(orders), neighboring_relation=schedule.dp_neighboring_relation)
    with unconverged_orders() as excluded:
        acc.compose(event)
    if excluded:  # said once, in the report, instead of one absl WARNING per order on stderr
        notes = (f"dp_accounting's RDP series did not converge at {len(excluded)} order(s) "
                 f"({min(excluded):g} .. {max(excluded):g}): those orders are excluded (RDP = inf there)",)
    if schedule.sampling in (Sampling.ONE_PASS, Sampling.SHUFFLE):
        notes += ("no amplification by shuffling claimed: each record is in one block per epoch",)
    return orders, np.asarray(acc.rdp, dtype=float), notes


def accounted_event(schedule: GaussianSchedule):
    """The ``dp_accounting.DpEvent`` the accountants compose for ``schedule``: its own (``to_dp_event``) with the
    group folded in under deterministic participation, one record's under random sampling (group privacy is then
    dpjax's (eps, delta) conversion of that event's curve: no DpEvent expresses it)."""
    return (schedule if schedule.sampling in _DETERMINISTIC else schedule.replace(group_size=1)).to_dp_event()


def _rdp_delta_fn(orders, rdp) -> Callable[[float], float]:
    from dp_accounting.rdp.rdp_privacy_accountant import compute_delta

    return lambda eps: float(compute_delta(orders, rdp, eps)[0])


def _rdp_eps(orders, rdp, delta) -> float:
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    if np.all(np.isinf(rdp)):
        return math.inf
    return float(compute_epsilon(orders, rdp, delta)[0])


# ----------------------------------------------------------------------------- PLD
#: Largest PLD grids dpjax lets dp_accounting build: the single-step PMF (made
#: point by point in Python, ~5 us a point: 2^18 points ~ 1-2 s) and the
#: composed one (FFT; 2^20 float64 points: 8 MiB, its FFTs < 100 MiB).
PLD_MAX_SINGLE_POINTS = 2**18
PLD_MAX_POINTS = 2**20
#: The PLD value-discretisation interval is at most this fraction of the
#: epsilon being certified (the RDP epsilon of the same schedule, an upper
#: bound), so small epsilons keep their relative precision.
PLD_RELATIVE_DISCRETIZATION = 1e-3
_PLD_LOG_MASS_TRUNCATION = -50.0  # dp_accounting's from_gaussian_mechanism default
_PLD_TAIL_TRUNCATION = 1e-15  # dp_accounting's PrivacyLossDistribution.self_compose default


def _refuse_pld_fixed_size(schedule: GaussianSchedule) -> ValueError:
    return _refuse(
        "pld",
        schedule,
        "dp_accounting has no PLD for fixed-size subsampling; use accountant='rdp' "
        "(Wang-Balle-Kasiviswanathan bound / multiplicity conditioning) or Poisson sampling",
    )


def _pld_event_parameters(schedule: GaussianSchedule, event=None) -> tuple[float, float, int]:
    """(noise multiplier, sampling probability, compositions) of ``event`` (default: ``accounted_event(schedule)``),
    read as ``PLDAccountant`` composes it: a self-composed Gaussian (deterministic participation) is one Gaussian of
    multiplier z/sqrt(passes), a Poisson-sampled one is self-composed ``steps`` times. dpjax builds the PLD itself
    from these (``_single_pld``) to choose the grid and to self-compose densely (``dense_for_self_compose``)."""
    if schedule.sampling in (Sampling.WITHOUT_REPLACEMENT, Sampling.WITH_REPLACEMENT):
        raise _refuse_pld_fixed_size(schedule)
    import dp_accounting as dpa

    event = accounted_event(schedule) if event is None else event
    inner, count = event.event, event.count
    if isinstance(inner, dpa.PoissonSampledDpEvent):
        return inner.event.noise_multiplier, inner.sampling_probability, count
    return inner.noise_multiplier / math.sqrt(count), 1.0, 1


def _single_pld(schedule: GaussianSchedule, interval: float, event=None):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    z, q, _ = _pld_event_parameters(schedule, event)
    return pld_lib.from_gaussian_mechanism(
        standard_deviation=z, value_discretization_interval=interval, sampling_prob=q,
        neighboring_relation=schedule.dp_neighboring_relation,
    )


def _pld_of(schedule: GaussianSchedule, interval: float, event=None):
    """dp_accounting's PrivacyLossDistribution of `schedule` (same construction as
    ``PLDAccountant`` composing ``event``, default ``accounted_event(schedule)``)."""
    _, _, count = _pld_event_parameters(schedule, event)
    pld = _single_pld(schedule, interval, event)
    return pld if count == 1 else dense_for_self_compose(pld, count).self_compose(count, _PLD_TAIL_TRUNCATION)


def pld_loss_width(schedule: GaussianSchedule, event=None) -> tuple[float, float]:
    """Widths, in privacy-loss units, of the single-step PMF dp_accounting builds for `schedule` and of its
    self-composition (0 if none); the number of grid points is about width / interval.

    Measured on a coarse grid (~4096 points per step): the single step's support, and for self-composition the Chernoff
    truncation bounds that ``self_compose`` itself uses (tail mass 1e-15).
    """
    from dp_accounting.pld import common

    z, q, count = _pld_event_parameters(schedule, event)
    mu = 1.0 / z
    # privacy loss +-mu t - mu^2/2 with t within sqrt(-2 log mass) ~ 10 sd of either mean (mixtures
    # span both: about mu^2/2 + 20 mu; replace-one pairs twice that)
    t_max = math.sqrt(-2.0 * _PLD_LOG_MASS_TRUNCATION) + 1.0
    factor = 2.0 if schedule.neighboring is Neighboring.REPLACE_ONE else 1.0
    coarse = max(factor * (2.0 * t_max * mu + mu * mu / 2.0), 1e-300) / 4096
    pld = _single_pld(schedule, coarse, event)
    single = composed = 0.0
    for pmf in (pld._pmf_remove, pld._pmf_add):  # noqa: SLF001 (no public accessor for the PMF)
        dense = pmf.to_dense_pmf()
        single = max(single, dense.size * coarse)
        if count > 1:
            lo, hi = common.compute_self_convolve_bounds(dense._probs, count, _PLD_TAIL_TRUNCATION)  # noqa: SLF001
            composed = max(composed, (hi - lo + 1) * coarse)
    return single, composed


def choose_pld_discretization(schedules, epsilon_scale: float, events=None) -> tuple[float, bool]:
    """(value-discretisation interval, whether memory forced it coarser) for one schedule or a composition (whose grid
    widths add).

    The interval is ``min(PLD_DISCRETIZATION, PLD_RELATIVE_DISCRETIZATION * epsilon_scale)``, raised where needed so
    that no PMF exceeds ``PLD_MAX_SINGLE_POINTS`` (one step) or ``PLD_MAX_POINTS`` (composed) points (2x margin on
    `pld_loss_width`). Any interval gives a valid (pessimistic) upper bound; a coarse one is only looser.
    """
    wanted = PLD_DISCRETIZATION
    if math.isfinite(epsilon_scale) and epsilon_scale > 0:
        wanted = min(wanted, PLD_RELATIVE_DISCRETIZATION * epsilon_scale)
    scheds = check_composable(schedules)
    widths = [pld_loss_width(s, e) for s, e in zip(scheds, events or (None,) * len(scheds))]
    floor = 2.0 * max(max(single for single, _ in widths) / PLD_MAX_SINGLE_POINTS,
                      sum(max(single, composed) for single, composed in widths) / PLD_MAX_POINTS)
    return (floor, True) if floor > wanted else (wanted, False)


# ------------------------------------------------------------------- group privacy
def group_privacy_epsilon(delta_fn: Callable[[float], float], group_size: int, delta: float) -> float:
    """Smallest g*eps with delta_fn(eps) * (e^{g eps}-1)/(e^eps-1) <= delta.

    `delta_fn(eps)` is the base (single-record) privacy curve. Group privacy of (eps, delta)-DP: (g eps, delta *
    sum_{i<g} e^{i eps})-DP. Any feasible eps gives a valid guarantee; we scan a log grid and refine by bisection.
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
            return g * bisect_threshold(lambda e: total_delta(e) <= delta, prev, float(eps), iterations=60,
                                        rtol=1e-10)
        prev = float(eps)
    return math.inf


# ------------------------------------------------------------------------- driver
def check_composable(schedules) -> tuple[GaussianSchedule, ...]:
    """`schedules` (one `GaussianSchedule` or a non-empty sequence of them) as a tuple.

    A composition certifies one neighbouring relation, one privacy unit and one
    group size: schedules that mix them are refused (ValueError naming both).
    """
    if isinstance(schedules, GaussianSchedule):
        return (schedules,)
    if isinstance(schedules, (str, bytes)) or not isinstance(schedules, Iterable):
        raise ValueError(f"schedules={schedules!r} must be a GaussianSchedule or a sequence of them")
    scheds = tuple(schedules)
    if not scheds:
        raise ValueError("schedules=() must contain at least one GaussianSchedule")
    for i, s in enumerate(scheds):
        if not isinstance(s, GaussianSchedule):
            raise ValueError(f"schedules[{i}]={s!r} must be a GaussianSchedule")
    for attr in ("neighboring", "unit", "group_size"):
        first = getattr(scheds[0], attr)
        for i, s in enumerate(scheds[1:], start=1):
            if getattr(s, attr) != first:
                show = lambda x: x.value if isinstance(x, enum.Enum) else x  # noqa: E731
                raise ValueError(
                    f"schedules mix {attr}: schedules[0] has {attr}={show(first)!r}, schedules[{i}] has "
                    f"{attr}={show(getattr(s, attr))!r}; a composition certifies one {attr}, so the "
                    "composed epsilon would certify neither: account them separately"
                )
    return scheds


def certifies(accountant: str, schedules) -> bool:
    """Whether `accountant` (one of `TIGHT_ACCOUNTANTS`) certifies every schedule."""
    scheds = check_composable(schedules)
    if accountant == "rdp":
        return True
    if accountant == "pld":
        return all(s.sampling not in (Sampling.WITHOUT_REPLACEMENT, Sampling.WITH_REPLACEMENT) for s in scheds)
    return all(s.sampling in _DETERMINISTIC for s in scheds)


# integer orders only (dp_accounting's closed form, fast): the epsilon scale that sets the PLD grid
_HINT_ORDERS = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 128, 256, 512, 1024)


def rdp_curve(scheds, orders=None, events=None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per-order RDP of the composition (curves add, Mironov 2017 Prop. 1) of the schedules' ``events``."""
    total, notes = None, []
    for s, e in zip(scheds, events or (None,) * len(scheds)):
        orders, rdp, extra = _rdp_vector(s, orders, e)
        total = rdp if total is None else total + rdp
        notes.extend(n for n in extra if n not in notes)
    return orders, total, notes


def tight_epsilon(
    schedules, delta: float, accountant: str, pld_discretization: float | None = None, pld_coarsening: float = 1.0,
    events=None) -> PrivacyReport:
    """(epsilon, delta) of one schedule or of the composition of several.

    `accountant`: one of `TIGHT_ACCOUNTANTS` or ``"best"`` (the smallest epsilon of rdp, pld and, for deterministic
    participation, gdp, among those that certify; the report names the winner). A composition needs one neighbouring
    relation, unit and group size (see `check_composable`).

    `pld_discretization` overrides the PLD value-discretisation interval (default: `choose_pld_discretization`, i.e. <=
    1e-4 and <= 1e-3 x the RDP epsilon, coarsened only to keep the grid <= `PLD_MAX_POINTS`; dp_accounting's pessimistic
    discretisation keeps the result an upper bound for any interval). `pld_coarsening` multiplies the automatic interval
    (calibration's cheap first search). `events`: the DpEvents the accountants compose, one per schedule
    (``accounted_event``; a ``DpPlan``'s are its parts' events); default: each schedule's own.
    """
    v.check_choice("accountant", accountant, TIGHT_ACCOUNTANTS + ("best",))
    scheds = check_composable(schedules)
    delta = v.check_open_unit("delta", delta)
    events = tuple(events) if events else None
    if events is not None and len(events) != len(scheds):
        raise ValueError(f"events has {len(events)} entries for {len(scheds)} schedules")
    if accountant == "best":
        return _best_epsilon(schedules, delta, events)
    check_computable(schedules, accountant)
    with float64_guard(accountant):
        return _tight_epsilon(scheds, delta, accountant, pld_discretization, pld_coarsening, events)


def _tight_epsilon(scheds, delta, accountant, pld_discretization, pld_coarsening, events) -> PrivacyReport:
    first = scheds[0]
    g = first.group_size
    deterministic = all(s.sampling in _DETERMINISTIC for s in scheds)
    # schedules whose curves are composed: group size folded in (deterministic) or 1 (conversion after)
    comp = scheds if deterministic else tuple(s.replace(group_size=1) for s in scheds)
    convert_group = g > 1 and not deterministic
    notes: list[str] = []

    def report(eps: float) -> PrivacyReport:
        eps = float(eps)
        if math.isnan(eps):  # defensive: never hand a NaN to the caller
            raise NotComputableError(f"accountant={accountant!r} produced no finite bound for this schedule (NaN in "
                                     "float64); use accountant='rdp'")
        return PrivacyReport(
            epsilon=max(eps, 0.0),
            delta=delta,
            accountant=accountant,
            sampling="+".join(dict.fromkeys(s.sampling.value for s in scheds)),
            neighboring=first.neighboring.value,
            unit=first.unit.value,
            noise_std=min(s.noise_std for s in scheds),
            notes=tuple(notes),
        )

    if len(scheds) > 1:
        notes.append(f"composition of {len(scheds)} schedules (noise_std: the smallest)")
    if g > 1:
        notes.append(
            f"group privacy for groups of {g} records"
            + (" (sensitivity x g: exact)" if deterministic else " via (eps, delta) group conversion")
        )
    if any(s.noise_std == 0 for s in scheds):
        notes.append("noise_std = 0: non-private")
        return report(math.inf)

    if accountant in ("zcdp", "gdp"):
        for s in scheds:
            if s.sampling not in _DETERMINISTIC:
                raise _refuse(accountant, s, "only deterministic participation (full, one-pass, shuffle without "
                                             "amplification) is certified; use 'rdp' or 'pld'")
        # mu^2 adds over Gaussian releases (Dong-Roth-Su 2022 Cor. 3.3)
        mu = math.sqrt(sum(s.passes * (g * s.sensitivity / s.noise_std) ** 2 for s in scheds))
        if any(s.sampling is not Sampling.FULL for s in scheds):
            notes.append("no amplification by shuffling claimed: each record is in one block per epoch")
        if accountant == "gdp":
            return report(_gdp.gdp_epsilon(mu, delta))
        rho = mu * mu / 2.0
        return report(rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta)))

    if accountant == "rdp":
        orders, rdp, rdp_notes = rdp_curve(comp, None, events)
        notes.extend(rdp_notes)
        if convert_group:
            return report(group_privacy_epsilon(_rdp_delta_fn(orders, rdp), g, delta))
        return report(_rdp_eps(orders, rdp, delta))

    # pld
    for s in scheds:
        if s.sampling in (Sampling.WITHOUT_REPLACEMENT, Sampling.WITH_REPLACEMENT):
            raise _refuse_pld_fixed_size(s)
    pld, interval, coarsened = _composed_pld(comp, delta, pld_discretization, pld_coarsening, events)
    if any(s.sampling in (Sampling.ONE_PASS, Sampling.SHUFFLE) for s in scheds):
        notes.append("no amplification by shuffling claimed: each record is in one block per epoch")
    if convert_group:
        eps = group_privacy_epsilon(lambda e: float(pld.get_delta_for_epsilon(e)), g, delta)
    else:
        eps = pld.get_epsilon_for_delta(delta)
    if coarsened:
        notes.append(f"PLD discretisation coarsened to {interval:.3g} to bound the grid "
                     f"({PLD_MAX_SINGLE_POINTS} points a step, {PLD_MAX_POINTS} composed; still an upper bound)")
        rdp_report = tight_epsilon(scheds, delta, "rdp", events=events)
        if rdp_report.epsilon < eps:
            return dataclasses.replace(rdp_report, notes=rdp_report.notes + (notes[-1], (
                f"accountant='pld' fell back to rdp: the memory-bounded PLD grid certifies only {eps:.6g}")))
    return report(eps)


def _composed_pld(comp, delta: float, pld_discretization, pld_coarsening: float, events=None):
    """``(pld, interval, coarsened)``: the composed PLD of the schedules ``comp`` on the grid
    ``pld_discretization`` or, when ``None``, the one ``choose_pld_discretization`` picks from an
    RDP hint of the epsilon (times ``pld_coarsening``; ``coarsened`` when memory bounded it)."""
    events = events or (None,) * len(comp)
    interval, coarsened = pld_discretization, False
    if interval is None:
        hint_orders, hint_rdp, _ = rdp_curve(comp, _HINT_ORDERS, events)
        interval, coarsened = choose_pld_discretization(comp, _rdp_eps(hint_orders, hint_rdp, delta), events)
        interval *= pld_coarsening
    pld = _pld_of(comp[0], interval, events[0])
    for s, e in zip(comp[1:], events[1:]):
        pld = pld.compose(_pld_of(s, interval, e))
    return pld, interval, coarsened


def _best_epsilon(schedules, delta: float, events=None) -> PrivacyReport:
    """The smallest epsilon among rdp, pld and gdp (where each certifies and computes), naming the winner."""
    check_computable(schedules)
    scheds = check_composable(schedules)
    reports, failed = [], []
    for a in ("rdp", "pld", "gdp"):
        if certifies(a, scheds):
            try:
                reports.append(tight_epsilon(schedules, delta, a, events=events))
            except NotComputableError as err:  # e.g. PLD's grid overflows where RDP still computes
                failed.append((a, err))
    if not reports:
        raise failed[0][1]
    best = min(reports, key=lambda r: r.epsilon)
    others = ", ".join(f"{r.accountant} {r.epsilon:.6g}" for r in reports if r is not best)
    note = f"accountant='best': {best.accountant} certified the smallest epsilon" + (f" (vs {others})" if others else "")
    notes = (note,) + tuple(f"accountant={a!r} skipped: not computable in float64 for this schedule" for a, _ in failed)
    return dataclasses.replace(best, notes=best.notes + notes)
