"""Accountants of user-level DP-SGD on record data: user-level sampling (ULS) and example-level sampling (ELS).

The two ways of training with user-level DP compared by Charles, Ganesh, McKenna, McMahan, Mitchell, Pillutla & Rush
("Fine-Tuning Large Language Models with User-Level Differential Privacy", 2024, Section 3; also Chua et al., "Mind the
Privacy Unit!", COLM 2024). Neighbouring data sets differ by all records of one user (add/remove one user); every step
adds ``N(0, (z C)^2 I)`` to a clipped sum (z the noise multiplier, C the clip norm), and the run releases every iterate.

* **ULS**: every user joins a step independently with the public probability q; a sampled user's (up to k) records give
  ONE gradient, their mean, clipped to C. One user moves the sum by at most C: each step is the Poisson-subsampled
  Gaussian mechanism at the user level, ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` composed T times (Abadi et al.
  2016 at the user level; McMahan et al., ICLR 2018, DP-FedAvg's accounting).
* **ELS**: every record joins independently with probability q, each record's gradient clipped to C, each user holding
  at most k records of the data set (the contribution bound). Adding a user adds ``B ~ Binomial(k, q)`` clipped terms to
  a step's sum, a shift of at most ``B C``. The privacy loss of one step is that of the mixture-of-Gaussians mechanism
  ``N(0, z^2)`` vs ``sum_b P(B = b) N(b, z^2)`` (in units of C), and this pair dominates the group of k records under
  Poisson sampling -- the worst case is every record's clipped gradient equal -- so composing it T times is tight up to
  discretisation (Ganesh, "Tight Group-Level DP Guarantees for DP-SGD with Sampling via Mixture of Gaussians
  Mechanisms", arXiv:2401.10294, 2024, Section 3; the mixture event of Choquette-Choo, Ganesh, Steinke & Thakurta,
  "Privacy Amplification for Matrix Mechanisms", ICLR 2024). It is dp_accounting's ``MixtureOfGaussiansDpEvent`` with
  ``sensitivities = (0, 1, ..., k)`` and ``sampling_probs`` the Binomial(k, q) pmf (computed exactly in rationals, then
  rounded), composed by its PLD accountant; RDP has no rule for that event and is refused (a looser RDP group-privacy
  conversion would not be the tight number this module promises).

A group of g users (``group_size``) is the same mixture with ``g`` (ULS) or ``g k`` (ELS) terms.

``UserDpSgdPrivacy`` is the ``PrivacySpec`` of a run; ``uls_dp_event`` / ``els_dp_event`` are its DpEvents and
``epsilon_of_event`` composes one in dp_accounting's accountants. Pure Python (dp_accounting): never imports jax.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting import dp_event as dp_events
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism

from dpjax import _validate as v
from dpjax.accounting.events import SelectionEvent
from dpjax.accounting.privacy_spec import PrivacySpec
from dpjax.accounting.schedules import Neighboring, PrivacyReport

__all__ = ["LEVELS", "FIELDS", "MAX_PMF_TERMS", "MAX_MIXTURE_TERMS", "PLD_DISCRETIZATION", "PLD_MAX_STEPS", "RDP_ORDERS",
           "UserDpSgdPrivacy", "UserSelectionEvent", "binomial_pmf", "uls_dp_event", "els_dp_event",
           "epsilon_of_event"]

#: ``"user"``: user-level sampling (ULS); ``"example"``: example-level sampling with group privacy (ELS).
LEVELS = ("user", "example")
#: The PLD accountant's discretisation by level (pessimistic estimates: upper bounds at any interval). ULS: dp_accounting's
#: default. ELS: the mixture's PLD is inverted at every point of the grid (``_VectorMixturePrivacyLoss``; k = 4,
#: T = 200 at 1e-4: 13-18 s, ~2 minutes with dp_accounting's scalar bisection); 1e-3 costs ~1 s and moves epsilon by
#: ~1e-6 relative there (up: the estimate stays pessimistic).
PLD_DISCRETIZATION = {"user": 1e-4, "example": 1e-3}
#: RDP orders: integers, where dp_accounting's Poisson-subsampled Gaussian RDP is an exact finite sum.
RDP_ORDERS = tuple(range(2, 129)) + (160, 192, 256, 384, 512)
_ACCOUNTANTS = {"user": ("pld", "rdp", "best"), "example": ("pld", "best")}
#: The hparams fields ``calibrate`` may return: the user-level family keeps its multiplier in ``noise_multiplier``
#: (``dpjax.algorithms.user_level_dpsgd``); any other name would be a dict key no hparams reads.
FIELDS = ("noise_multiplier",)
#: Bounded work before an answer. ``binomial_pmf`` sums exact rationals whose size grows with k (k = 256: 0.3 s,
#: k = 1000: 9 s); a mixture's PLD costs more with more terms (ELS at T = 200, interval 1e-3: k = 8 2-4 s,
#: k = 32 23-33 s on a loaded 2-core machine, 6-16x less than dp_accounting's scalar path at k <= 16); the PLD's
#: self-composition grows with the steps (ULS at 10^5 steps ~3 s; 10^12 steps: MemoryError). Beyond these the
#: inputs are refused up front, naming the argument (ULS beyond ``PLD_MAX_STEPS``: use ``accountant="rdp"``, whose
#: cost does not depend on the steps).
MAX_PMF_TERMS = 256
MAX_MIXTURE_TERMS = 64
PLD_MAX_STEPS = 10**5


def binomial_pmf(k: int, q: float) -> tuple[float, ...]:
    """``P(B = b)`` for ``B ~ Binomial(k, q)``, ``b = 0..k``: each term ``comb(k, b) q^b (1 - q)^(k - b)``
    summed in exact rationals (the float q read exactly) and rounded once, so no cancellation. ``k`` at most
    ``MAX_PMF_TERMS`` (the exact sum's cost grows with k)."""
    k = v.check_int("k", k, min_value=0, max_value=MAX_PMF_TERMS)
    q = Fraction(v.check_probability("q", q))
    return tuple(float(math.comb(k, b) * q**b * (1 - q) ** (k - b)) for b in range(k + 1))


def _mixture(noise_multiplier: float, terms: int, q: float, what: str):
    if terms > MAX_MIXTURE_TERMS:
        raise ValueError(f"{what}: a mixture of {terms + 1} Gaussians exceeds MAX_MIXTURE_TERMS={MAX_MIXTURE_TERMS} "
                         "shifts (dp_accounting builds its PLD point by point; its cost grows with the terms)")
    return dp_events.MixtureOfGaussiansDpEvent(noise_multiplier, tuple(float(b) for b in range(terms + 1)),
                                               binomial_pmf(terms, q))


def uls_dp_event(noise_multiplier: float, sampling_rate: float, num_steps: int, group_size: int = 1):
    """ULS: T steps of the user-level Poisson-subsampled Gaussian (``group_size`` g > 1 users at once: the
    mixture of ``Binomial(g, q)`` shifts)."""
    z = v.check_nonnegative("noise_multiplier", noise_multiplier)
    q = v.check_probability("sampling_rate", sampling_rate)
    steps = v.check_int("num_steps", num_steps, min_value=1)
    g = v.check_int("group_size", group_size, min_value=1)
    step = (dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)) if g == 1
            else _mixture(z, g, q, f"group_size={group_size!r}"))
    return dp_accounting.SelfComposedDpEvent(step, steps)


def els_dp_event(noise_multiplier: float, sampling_rate: float, num_steps: int, records_per_user: int,
                 group_size: int = 1):
    """ELS: T steps of the mixture of Gaussians with shifts ``0..k g`` (k records per user, g users), weighted by
    the Binomial(k g, q) pmf (Ganesh 2024's dominating pair for a group of k g records under Poisson sampling)."""
    z = v.check_nonnegative("noise_multiplier", noise_multiplier)
    q = v.check_probability("sampling_rate", sampling_rate)
    steps = v.check_int("num_steps", num_steps, min_value=1)
    k = v.check_int("records_per_user", records_per_user, min_value=1)
    g = v.check_int("group_size", group_size, min_value=1)
    what = f"records_per_user={records_per_user!r}" + (f" x group_size={group_size!r}" if g > 1 else "")
    return dp_accounting.SelfComposedDpEvent(_mixture(z, k * g, q, what), steps)


def _rdp_supports(event) -> bool:
    """Whether dp_accounting's RDP accountant has a rule for ``event``."""
    return dp_accounting.rdp.RdpAccountant(list(RDP_ORDERS), dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
                                           ).supports(event)


class _VectorMixturePrivacyLoss(privacy_loss_mechanism.MixtureGaussianPrivacyLoss):
    """dp_accounting's mixture-of-Gaussians privacy loss with its inverse computed for all privacy losses at once.

    Why: building the mixture's PLD inverts the privacy loss at every discretisation point by a recursive bisection
    that evaluates ``privacy_loss`` once per node, in Python (dp_accounting 0.6,
    ``MixtureGaussianPrivacyLoss._inverse_privacy_losses_with_range``): ~2 x 10^5 scalar calls for k = 8 at interval
    1e-3, ~99 % of an ELS epsilon (the T-fold self-composition is an FFT, ~0.2 s). This runs the same bisection for
    every target at once: per target the same midpoints ``(lo + hi) / 2``, the same comparison ``l < pl(mid)``, the
    same stop ``hi - lo <= precision`` and the same answer ``floor(hi / precision) precision``, with ``pl`` evaluated
    on a vector of midpoints (the scalar ``privacy_loss``'s formula, row-wise). Same grid, same pessimistic PLD: the
    epsilon agrees with dp_accounting's own path (tests/accounting/test_user_dpsgd_speed.py)."""

    def _losses(self, x: np.ndarray) -> np.ndarray:
        x_loss = self.sensitivities[None, :] * x[:, None] / self._variance
        const = self._precompute_privacy_loss_constants[None, :]
        add = self.adjacency_type == privacy_loss_mechanism.AdjacencyType.ADD
        summands = const + x_loss if add else const - x_loss
        # logaddexp.reduce's left-to-right order, one column at a time (a reduce along the short axis is ~10x slower)
        acc = summands[:, 0]
        for j in range(1, summands.shape[1]):
            acc = np.logaddexp(acc, summands[:, j])
        return -acc if add else acc

    def _inverse_privacy_losses_with_range(self, privacy_losses, bounds, precision=1e-6):
        losses = np.asarray(privacy_losses, dtype=float)
        lo = np.full(losses.shape, float(bounds[0]))
        hi = np.full(losses.shape, float(bounds[1]))
        active = hi - lo > precision
        while active.any():
            mid = (lo[active] + hi[active]) / 2
            lower = losses[active] < self._losses(mid)  # the recursion's "lower_indices": search (mid, hi)
            idx = np.flatnonzero(active)
            lo[idx[lower]] = mid[lower]
            hi[idx[~lower]] = mid[~lower]
            active = hi - lo > precision
        return np.floor(hi / precision) * precision


def _mixture_pld(event, interval: float):
    """dp_accounting's PLD of a (self-composed) mixture-of-Gaussians event, built as ``from_mixture_gaussian_mechanism``
    builds it (pessimistic, connect-the-dots, log-mass truncation -50) but with ``_VectorMixturePrivacyLoss``; None
    for an event it does not cover (then the accountant's own path runs)."""
    count, step = (event.count, event.event) if isinstance(event, dp_accounting.SelfComposedDpEvent) else (1, event)
    if not isinstance(step, dp_events.MixtureOfGaussiansDpEvent) or step.standard_deviation == 0 or max(
            step.sensitivities) == 0:
        return None
    build = getattr(pld_lib, "_create_pld_pmf_from_monotone_privacy_loss", None)
    if build is None:  # pragma: no cover - a dp_accounting without the builder: its own (slow) path
        return None
    pmfs = [build(_VectorMixturePrivacyLoss(step.standard_deviation, step.sensitivities, step.sampling_probs,
                                            pessimistic_estimate=True, log_mass_truncation_bound=-50,
                                            adjacency_type=adjacency),
                  pessimistic_estimate=True, value_discretization_interval=interval, use_connect_dots=True)
            for adjacency in (privacy_loss_mechanism.AdjacencyType.REMOVE, privacy_loss_mechanism.AdjacencyType.ADD)]
    one = pld_lib.PrivacyLossDistribution(*pmfs).self_compose(count)
    # what PLDAccountant does: its identity PLD composed with the event's
    return pld_lib.identity(interval).compose(one)


def epsilon_of_event(event, delta: float, accountant: str = "pld", pld_interval: float = 1e-4) -> float:
    """The event's epsilon at ``delta`` under add/remove: dp_accounting's PLD accountant (pessimistic, discretisation
    ``pld_interval``; at most ``PLD_MAX_STEPS`` self-composed steps, refused above) or its RDP accountant at
    ``RDP_ORDERS``."""
    delta = v.check_open_unit("delta", delta)
    v.check_choice("accountant", accountant, ("pld", "rdp"))
    relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    if accountant == "pld":
        acc = dp_accounting.pld.PLDAccountant(relation, value_discretization_interval=v.check_positive(
            "pld_interval", pld_interval))
    else:
        acc = dp_accounting.rdp.RdpAccountant(list(RDP_ORDERS), relation)
    if not acc.supports(event):
        raise ValueError(f"accountant={accountant!r} has no rule for {type(event).__name__}; use 'pld'")
    steps = event.count if isinstance(event, dp_accounting.SelfComposedDpEvent) else 1
    if accountant == "pld" and steps > PLD_MAX_STEPS:
        alt = ("use accountant='rdp' (its cost does not depend on the steps)" if _rdp_supports(event) else
               "no accountant here bounds it at that size (RDP has no rule for the mixture)")
        raise ValueError(f"num_steps={steps!r} exceeds PLD_MAX_STEPS={PLD_MAX_STEPS}: the PLD's self-composition "
                         f"grows with the steps; {alt}")
    if accountant == "pld":
        fast = _mixture_pld(event, pld_interval)
        if fast is not None:
            return float(fast.get_epsilon_for_delta(delta))
    return float(acc.compose(event).get_epsilon(delta))


@dataclasses.dataclass(frozen=True)
class UserDpSgdPrivacy(PrivacySpec):
    """The user-level guarantee of a ULS or ELS run (add/remove one user; see the module docstring).

    Attributes:
      level: ``"user"`` (ULS) or ``"example"`` (ELS).
      noise_multiplier: z, the noise std over the clip norm C of one unit (a user's clipped mean gradient, or a
        record's clipped gradient).
      sampling_rate: q, the public inclusion probability of a user (ULS) or a record (ELS).
      num_steps: T noisy releases.
      records_per_user: k, the contribution bound (ELS: the group each user is; ULS: reported only).
      group_size: g users protected at once.
      field: the hparams field ``calibrate`` returns.
      pld_interval: the PLD discretisation (None: ``PLD_DISCRETIZATION[level]``).
      truncation: eta, the probability that the run, or its run on a neighbour, cuts a truncated Poisson batch
        (``dpjax.accounting.truncated_poisson``); charged to delta as ``(1 + e^eps) eta`` (0: nothing cut)."""

    level: str
    noise_multiplier: float
    sampling_rate: float
    num_steps: int
    records_per_user: int = 1
    group_size: int = 1
    field: str = "noise_multiplier"
    pld_interval: float | None = None
    truncation: float = 0.0

    def __post_init__(self):
        v.check_choice("level", self.level, LEVELS)
        v.check_probability("truncation", self.truncation)
        v.check_choice("field", self.field, FIELDS)
        self.event_at(1.0)  # validates the numbers

    @property
    def neighboring(self) -> str:
        return "add-remove"

    @property
    def unit(self) -> str:
        return "user"

    @property
    def accountants(self) -> tuple[str, ...]:
        return _ACCOUNTANTS[self.level]

    def event_at(self, scale: float):
        """The run's DpEvent with the noise multiplier times ``scale``."""
        z = self.noise_multiplier * scale
        if self.level == "user":
            return uls_dp_event(z, self.sampling_rate, self.num_steps, self.group_size)
        return els_dp_event(z, self.sampling_rate, self.num_steps, self.records_per_user, self.group_size)

    def dp_event(self):
        return self.event_at(1.0)

    @property
    def interval(self) -> float:
        """The PLD discretisation this spec uses."""
        return PLD_DISCRETIZATION[self.level] if self.pld_interval is None else self.pld_interval

    def _epsilon(self, delta: float, accountant: str, scale: float, interval: float | None = None) -> float:
        names = [a for a in self.accountants if a != "best"] if accountant == "best" else [accountant]
        if accountant == "best" and len(names) > 1 and self.num_steps > PLD_MAX_STEPS:
            names.remove("pld")  # "best" of what can be computed: the PLD would refuse (epsilon_of_event)
        return min(epsilon_of_event(self.event_at(scale), delta, a, interval or self.interval) for a in names)

    def _accountant(self, accountant: str | None) -> str:
        return v.check_choice("accountant", accountant or "pld", self.accountants)

    def epsilon(self, delta: float, accountant: str | None = None) -> PrivacyReport:
        accountant = self._accountant(accountant)
        delta = v.check_open_unit("delta", delta)
        charge = 0.0
        if self.truncation > 0:  # eps(delta / 2) bounds eps at any delta' >= delta / 2: the charge is safe
            charge = self._charge(delta, self._epsilon(delta / 2, accountant, 1.0))
        eps = self._epsilon(delta - charge, accountant, 1.0)
        what = ("ULS: user-level Poisson-subsampled Gaussian" if self.level == "user" else
                f"ELS: group privacy of k={self.records_per_user} records by the mixture-of-Gaussians PLD "
                "(Ganesh 2024)")
        notes = (what, f"q={self.sampling_rate:g}, T={self.num_steps}, k={self.records_per_user}")
        if self.group_size > 1:
            notes += (f"group of {self.group_size} users",)
        sampling = "poisson"
        if self.truncation > 0:
            sampling = "truncated-poisson"
            notes += (f"truncated Poisson: truncation probability {self.truncation:.3g} charged to delta "
                      f"({charge:.3g}, (1 + e^eps) x it); the untruncated run is accounted at delta={delta - charge:.6g}",)
        return PrivacyReport(eps, delta, accountant, sampling, "add-remove", "user", self.noise_multiplier, notes)

    def _charge(self, delta: float, epsilon_bound: float) -> float:
        """``(1 + e^eps_bound) eta``, refused when it takes more than half of delta."""
        charge = (1.0 + math.exp(min(epsilon_bound, 700.0))) * self.truncation
        if charge > delta / 2:
            top = math.log(max(delta / (2 * self.truncation) - 1, 1.0))
            raise ValueError(f"delta={delta!r}: the truncation probability {self.truncation:.3g} costs {charge:.3g} "
                             f"of it at eps={epsilon_bound:.3g} (more than half; this buffer certifies eps <= {top:.3g} "
                             "only); raise delta or the noise, or choose poisson_selection='buffered'")
        return charge

    def calibrate(self, target_epsilon: float, delta: float, accountant: str | None = None) -> dict[str, Any]:
        """``{field: z}``: the smallest noise multiplier (relative width 1e-4) whose epsilon is at most the target
        (the returned z was evaluated: its epsilon is at most the target)."""
        from dpjax.accounting import calibration

        accountant = self._accountant(accountant)
        target = v.check_positive("target_epsilon", target_epsilon)
        delta = v.check_open_unit("delta", delta)
        if self.truncation > 0:  # the calibrated eps is <= the target: charging (1 + e^target) eta is safe
            delta -= self._charge(delta, target)
        base = self.noise_multiplier if self.noise_multiplier > 0 else 1.0
        spec = dataclasses.replace(self, noise_multiplier=base)
        # ELS: a coarse PLD (interval 10x wider, still an upper bound) narrows the bracket the fine one refines
        coarse = None if self.level == "user" else (lambda s: spec._epsilon(delta, accountant, s, 10 * spec.interval))
        scale = calibration.smallest_scale(lambda s: spec._epsilon(delta, accountant, s), target, rtol=1e-4,
                                           what="noise multiplier", coarse_epsilon_at=coarse, coarse_rtol=1e-2)
        return {self.field: base * scale}


@dataclasses.dataclass(frozen=True)
class UserSelectionEvent(SelectionEvent):
    """The batch selection of a ULS or ELS run (``dpjax.parts.user_records``): Poisson at the declared rate over the
    users (``level="user"``) or over every user's first k records (``level="example"``); ``dataset_sizes`` are the
    users' sizes. Its own accountant: ``spec(plan)`` is the run's ``UserDpSgdPrivacy``.

    Attributes: level: ``"user"`` (ULS) or ``"example"`` (ELS). records_per_user: k, the records of a user that can
      enter a round (ELS: its contribution bound). truncation: the truncated Poisson buffer's eta (0: nothing cut)."""

    level: str = "user"
    records_per_user: int = 1
    truncation: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        v.check_choice("level", self.level, LEVELS)
        v.check_int("records_per_user", self.records_per_user, min_value=1)
        v.check_probability("truncation", self.truncation)
        if self.sampling_rate is None:
            raise ValueError("sampling_rate=None: user-level DP-SGD samples at a declared public rate q")

    def spec(self, plan) -> UserDpSgdPrivacy:
        """One server Gaussian per round at multiplier z over the clipper's bound (add/remove): ULS's or ELS's
        accountant for the plan's rounds and group size."""
        if plan.clip.neighboring is not Neighboring.ADD_REMOVE:
            raise ValueError(f"{plan.label}: user-level DP-SGD's bound is stated for add/remove, not "
                             f"{plan.clip.neighboring.value!r}")
        if len(plan.noises) != 1 or isinstance(plan.noises[0].noise_multiplier, tuple):
            raise ValueError(f"{plan.label}: user-level DP-SGD takes one noise event with one noise multiplier")
        if self.level == "example" and plan.clip.unit_records != 1:
            raise ValueError(f"{plan.label}: example-level sampling clips every record (unit_records=1), got "
                             f"unit_records={plan.clip.unit_records}")
        noise = plan.noises[0]
        steps = noise.steps if noise.steps is not None else plan.num_rounds * self.releases_per_round
        return UserDpSgdPrivacy(self.level, noise.noise_multiplier, self.sampling_rate, steps, self.records_per_user,
                                plan.group_size, noise.field, truncation=self.truncation)
