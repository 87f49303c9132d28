"""One privacy method for every algorithm family: ``privacy(silo_sizes, hparams) -> PrivacySpec``.

A ``PrivacySpec`` says what a run releases in terms the accounting layer understands, and answers the two questions a
driver asks of any family:

* ``epsilon(delta, accountant)`` -- the guarantee of the run as configured;
* ``calibrate(target_epsilon, delta, accountant)`` -- the hyperparameter values (a dict ``field -> value`` to
  ``dataclasses.replace`` into the family's hparams) that meet a target epsilon, never overshooting it.

Kinds:

* ``GaussianPrivacy``: one or more ``GaussianSchedule``s composed (e.g. DIFF2's restart and difference rounds).
  Calibration scales every schedule's noise by one common factor, so the ratios between the noise fields that the family
  chose are kept.
* ``PerSiloPrivacy``: ISRL-DP with unbalanced silos -- each silo has its own guarantee; the run's epsilon is the
  largest, calibration returns one noise value per silo.
* ``ReportPrivacy``: protocols whose accountant is not a Gaussian schedule (shuffle amplification, P_vec); wraps the
  family's epsilon and calibration functions.
* ``NoPrivacy``: non-private twins; epsilon is infinite and calibration is refused with the reason.

Every PrivacySpec names its neighbouring relation and privacy unit, and refuses a composition of schedules whose
relations differ (such a number would certify neither).

``dp_event()`` is the run as a ``dp_accounting.DpEvent`` where one expresses it (the Gaussian rules: Poisson /
without-replacement sampled, self-composed and composed Gaussians; DP-FTRL's restarted trees), to be composed in an
accountant built with ``dp_neighboring_relation``: dp_accounting's ``RdpAccountant`` gives dpjax's own RDP epsilon on it
(tested for every registered family), and ``dp_event_at(scale)`` is the one-parameter family that
``dp_accounting.calibrate_dp_mechanism`` searches. Mechanisms no DpEvent expresses (shuffle amplification, P_vec
transcripts, f-DP batch clipping, user-level, group privacy under sampling) answer ``dp_accounting.UnsupportedDpEvent``:
dpjax's own accountant certifies them. Pure Python: never imports jax.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any, Callable, Sequence

from dpjax import _validate as v
from dpjax.accounting.schedules import GaussianSchedule, PrivacyReport

# Relative precision of the common-scale bisection (the same order as the
# single-schedule calibration's tolerance).
_SCALE_RTOL = 1e-3


class PrivacySpec(abc.ABC):
    """What a run releases; see the module docstring."""

    private: bool = True

    @property
    @abc.abstractmethod
    def neighboring(self) -> str:
        """The neighbouring relation the guarantee is stated for."""

    @property
    @abc.abstractmethod
    def unit(self) -> str:
        """The privacy unit (record, record in a silo, user, ...)."""

    @abc.abstractmethod
    def epsilon(self, delta: float, accountant: str = "rdp") -> PrivacyReport:
        """The (epsilon, delta) guarantee of the run, naming the accountant."""

    @abc.abstractmethod
    def calibrate(self, target_epsilon: float, delta: float, accountant: str = "rdp") -> dict[str, Any]:
        """Hyperparameter values meeting ``target_epsilon``, keyed by the family's hparams field names -- for every
        Gaussian family ``{"noise_multiplier": z}`` (std / sensitivity), read as ``spec.calibrate(...)[
        "noise_multiplier"]`` and passed on as the hparams' field of that name."""

    def dp_event(self):
        """The run as a ``dp_accounting.DpEvent``; here ``UnsupportedDpEvent``: no dp_accounting event
        expresses this mechanism, and dpjax's own accountant (``epsilon``) certifies it."""
        import dp_accounting

        return dp_accounting.UnsupportedDpEvent()


def _enum_value(x) -> str:
    return getattr(x, "value", x)


class StatedRelation:
    """Mixin for kinds that store their relation and unit as the fields ``neighboring`` and ``privacy_unit``."""

    @property
    def neighboring(self) -> str:
        return self.neighboring

    @property
    def unit(self) -> str:
        return self.privacy_unit


@dataclasses.dataclass(frozen=True)
class GaussianPrivacy(PrivacySpec):
    """A composition of Gaussian schedules.

    Attributes:
      schedules: the releases (at least one), all with the same neighbouring
        relation and unit.
      noise_fields: for each schedule, the hparams field holding its noise;
        ``calibrate`` returns values for these fields.
      multipliers: the fields hold noise multipliers (std / sensitivity; every
        family's hparams): ``calibrate`` returns ``noise_std / sensitivity``.
        False: absolute stds (``GaussianSchedule.noise_std``).
      events: for each schedule, the ``dp_accounting.DpEvent`` the accountants
        compose (RDP composes it, PLD reads its Gaussian, rate and count): a
        ``DpPlan``'s are its parts' events, so ``dp_event()`` and ``epsilon``
        read one object. Under random sampling with ``group_size`` > 1 it is
        one record's event (dpjax converts the curve to the group's). ``()``:
        each schedule's own (``GaussianSchedule.to_dp_event``).
    """

    schedules: tuple[GaussianSchedule, ...]
    noise_fields: tuple[str, ...] = ("noise_std",)
    multipliers: bool = False
    events: tuple = ()

    def __post_init__(self):
        schedules = tuple(self.schedules)
        if not schedules:
            raise ValueError("schedules=() must contain at least one GaussianSchedule")
        for s in schedules:
            if not isinstance(s, GaussianSchedule):
                raise ValueError(f"schedules contains {s!r}; expected GaussianSchedule")
        fields = tuple(self.noise_fields)
        if len(fields) != len(schedules):
            raise ValueError(f"noise_fields={fields!r} must name one field per schedule ({len(schedules)})")
        relations = {_enum_value(s.neighboring) for s in schedules}
        if len(relations) > 1:
            raise ValueError(f"schedules mix neighbouring relations {sorted(relations)}: a composed epsilon "
                             "would certify neither; account them separately")
        units = {_enum_value(s.unit) for s in schedules}
        if len(units) > 1:
            raise ValueError(f"schedules mix privacy units {sorted(units)}; account them separately")
        object.__setattr__(self, "schedules", schedules)
        object.__setattr__(self, "noise_fields", fields)
        from dpjax.accounting import tight

        events = tuple(self.events) or tuple(tight.accounted_event(s) for s in schedules)
        if len(events) != len(schedules):
            raise ValueError(f"events has {len(events)} entries for {len(schedules)} schedules")
        object.__setattr__(self, "events", events)

    @property
    def neighboring(self) -> str:
        return _enum_value(self.schedules[0].neighboring)

    @property
    def unit(self) -> str:
        return _enum_value(self.schedules[0].unit)

    def epsilon(self, delta: float, accountant: str = "rdp") -> PrivacyReport:
        from dpjax.accounting import api

        # one schedule, or their composition (RDP curves added / PLDs composed; mixed relations refused), of the
        # events dp_event() states
        return api.compute_epsilon(self.schedules[0] if len(self.schedules) == 1 else list(self.schedules),
                                   delta, accountant, events=self.events)

    @property
    def schedule(self) -> GaussianSchedule:
        """The one schedule of a single-release spec (refused for a composition)."""
        if len(self.schedules) != 1:
            raise ValueError(f"this spec composes {len(self.schedules)} schedules; use .schedules")
        return self.schedules[0]

    def scaled(self, factor: float) -> "GaussianPrivacy":
        """The same releases with every noise std multiplied by ``factor``."""
        return dataclasses.replace(self, schedules=tuple(s.replace(noise_std=s.noise_std * factor)
                                                         for s in self.schedules),
                                   events=tuple(scaled_event(e, factor) for e in self.events))

    @property
    def dp_neighboring_relation(self):
        """The ``dp_accounting.NeighboringRelation`` of the accountant that composes ``dp_event()``."""
        relations = {s.dp_neighboring_relation for s in self.schedules}
        if len(relations) != 1:
            raise ValueError(f"schedules pair their events with relations {sorted(r.name for r in relations)}: "
                             "no one dp_accounting accountant composes them; use epsilon()")
        return relations.pop()

    def dp_event(self):
        """The composition of ``events`` (a ``ValueError`` for group privacy under sampling, which no DpEvent
        expresses: ``events`` are one record's there)."""
        import dp_accounting

        for s in self.schedules:
            if s.group_size != 1:
                s.to_dp_event()  # random sampling: no DpEvent expresses group privacy; raises, naming group_size
        events = list(self.events)
        return events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events)

    def dp_event_at(self, scale: float):
        """``dp_event()`` with every noise multiplied by ``scale``: the family calibration searches."""
        return self.scaled(v.check_positive("scale", scale)).dp_event()

    def _value(self, schedule: GaussianSchedule, noise_std: float) -> float:
        return noise_std / schedule.sensitivity if self.multipliers else noise_std

    def calibrate(self, target_epsilon: float, delta: float, accountant: str = "rdp") -> dict[str, Any]:
        """Noise meeting ``target_epsilon`` (multipliers or stds, see ``multipliers``).

        One schedule: ``dpjax.accounting.calibrate_noise`` (the current noise is ignored). Several: the current noises
        fix the ratios (all must be > 0) and one common factor is found by ``calibration.smallest_scale``.
        """
        from dpjax.accounting import api, calibration

        target = v.check_positive("target_epsilon", target_epsilon)
        if len(self.schedules) == 1:
            s = self.schedules[0]
            return {self.noise_fields[0]: self._value(s, api.calibrate_noise(s, target, delta, accountant))}
        for field, s in zip(self.noise_fields, self.schedules):
            if not s.noise_std > 0:
                raise ValueError(f"{field}={s.noise_std!r} must be > 0: with several schedules the current "
                                 "noise levels fix the ratios that calibration keeps")
        factor = calibration.smallest_scale(lambda f: self.scaled(f).epsilon(delta, accountant).epsilon, target,
                                            rtol=_SCALE_RTOL, min_scale=1e-12, what="noise scale factor")
        return {f: self._value(s, s.noise_std * factor) for f, s in zip(self.noise_fields, self.schedules)}


@dataclasses.dataclass(frozen=True)
class PerSiloPrivacy(PrivacySpec):
    """ISRL-DP with per-silo guarantees (unbalanced silos, per-silo budgets).

    The run is (max_i epsilon_i, delta)-ISRL-DP. ``calibrate`` returns one tuple of per-silo noise stds for ``field``,
    each silo calibrated to the target on its own schedule.
    """

    silos: tuple[GaussianPrivacy, ...]
    field: str = "noise_stds"

    def __post_init__(self):
        silos = tuple(self.silos)
        if not silos:
            raise ValueError("silos=() must contain at least one silo's GaussianPrivacy")
        if len({s.neighboring for s in silos}) > 1 or len({s.unit for s in silos}) > 1:
            raise ValueError("silos mix neighbouring relations or units; account them separately")
        object.__setattr__(self, "silos", silos)

    @property
    def neighboring(self) -> str:
        return self.silos[0].neighboring

    @property
    def unit(self) -> str:
        return self.silos[0].unit

    def epsilon(self, delta: float, accountant: str = "rdp") -> PrivacyReport:
        reports = [s.epsilon(delta, accountant) for s in self.silos]
        worst = max(range(len(reports)), key=lambda i: reports[i].epsilon)
        r = reports[worst]
        notes = r.notes + (f"largest of {len(reports)} per-silo guarantees (silo {worst})",)
        return dataclasses.replace(r, notes=notes)

    def dp_event(self, silo: int = 0):
        """Silo ``silo``'s releases as a ``dp_accounting.DpEvent`` (each silo is its own guarantee)."""
        return self.silos[v.check_int("silo", silo, min_value=0, max_value=len(self.silos) - 1)].dp_event()

    @property
    def dp_neighboring_relation(self):
        return self.silos[0].dp_neighboring_relation

    def calibrate(self, target_epsilon: float, delta: float, accountant: str = "rdp") -> dict[str, Any]:
        values = []
        for s in self.silos:
            (value,) = s.calibrate(target_epsilon, delta, accountant).values()
            values.append(value)
        return {self.field: tuple(values)}


@dataclasses.dataclass(frozen=True)
class ReportPrivacy(StatedRelation, PrivacySpec):
    """A protocol whose accountant is its own (shuffle amplification, P_vec, f-DP batch clipping).

    The protocol is a one-parameter family of noise levels: ``scale = 1`` is the run as configured, larger scales add
    more noise. Calibration is the one routine, ``calibration.smallest_scale`` on ``epsilon_fn``.

    Attributes:
      epsilon_fn: ``epsilon_fn(delta, accountant, scale) -> PrivacyReport`` (an
        ``SdpReport`` is reduced to its central report); non-increasing in scale.
      values_fn: ``values_fn(scale, delta, accountant) -> dict``: the hparams
        values (``field -> value``) of the run at ``scale``.
      accountants: the accountant names this protocol understands; others
        are refused.
      neighboring, privacy_unit: what the guarantee is stated for.
      start: where calibration's bracketing starts; rtol: its relative width;
      min_scale: the smallest scale it looks at.
      search_fn: the one-parameter family calibration searches when it is not
        the configured run at ``scale`` (``search_fn(delta, accountant, scale)
        -> PrivacyReport``; ``values_fn`` then gives that family's values). P_vec:
        the calculator's parameters at ``1 / scale`` (a calculator's output is
        not the configured (g, b, p) at any scale). None: ``epsilon_fn``.
    """

    epsilon_fn: Callable[[float, str, float], Any]
    values_fn: Callable[[float, float, str], dict]
    accountants: tuple[str, ...]
    neighboring: str = "replace-one"
    privacy_unit: str = "record"
    start: float = 1.0
    rtol: float = 1e-4
    min_scale: float = 1e-6
    search_fn: Callable[[float, str, float], Any] | None = None

    def _check(self, accountant: str | None) -> str:
        return v.check_choice("accountant", accountant or self.accountants[0], self.accountants)

    def epsilon(self, delta: float, accountant: str | None = None) -> PrivacyReport:
        report = self.epsilon_fn(delta, self._check(accountant), 1.0)
        return getattr(report, "central", report)

    def calibrate(self, target_epsilon: float, delta: float, accountant: str | None = None) -> dict[str, Any]:
        from dpjax.accounting import calibration

        accountant = self._check(accountant)
        target = v.check_positive("target_epsilon", target_epsilon)
        delta = v.check_open_unit("delta", delta)

        curve = self.search_fn or self.epsilon_fn

        def eps(scale: float) -> float:
            report = curve(delta, accountant, scale)
            return getattr(report, "central", report).epsilon

        scale = calibration.smallest_scale(eps, target, start=self.start, rtol=self.rtol, min_scale=self.min_scale,
                                           what="noise scale")
        return dict(self.values_fn(scale, delta, accountant))


@dataclasses.dataclass(frozen=True)
class NoPrivacy(StatedRelation, PrivacySpec):
    """A non-private twin: no guarantee; calibration is refused."""

    reason: str = "the non-private twin adds no noise"
    neighboring: str = "replace-one"
    privacy_unit: str = "record"
    private = False

    def epsilon(self, delta: float, accountant: str = "rdp") -> PrivacyReport:
        delta = v.check_open_unit("delta", delta)
        return PrivacyReport(math.inf, delta, "none", "n/a", self.neighboring, self.privacy_unit, 0.0, (self.reason,))

    def calibrate(self, target_epsilon: float, delta: float, accountant: str = "rdp") -> dict[str, Any]:
        raise ValueError(f"target_epsilon={target_epsilon!r} cannot be met: {self.reason}")

    def dp_event(self):
        import dp_accounting

        return dp_accounting.NonPrivateDpEvent()


@dataclasses.dataclass(frozen=True)
class TreeAggregationPrivacy(GaussianPrivacy):
    """Tree aggregation restarted every epoch (Kairouz et al. 2021, Appendix D; DP-FTRL-TreeRestart):
    the epochs' trees, ``tree_counts = ((leaves, how many), ...)`` (closed form: a run of 10^9 one-round epochs is one
    pair), composed. Its Gaussian rules (``schedules``: one unsampled schedule of ``sum_e (floor(log2 T_e) + 1)``
    releases) and its DpEvent, dp_accounting's ``SingleEpochTreeAggregationDpEvent`` per epoch (self-composed per
    tree size) under ``REPLACE_SPECIAL``, give the same RDP. ``epsilon`` composes the Gaussian rules' ``events``:
    dp_accounting's PLD accountant has no tree-aggregation event, and its RDP of one is theirs."""

    tree_counts: tuple[tuple[int, int], ...] = ()

    #: Most epochs ``step_counts`` lists one by one (beyond, ``tree_counts`` is the only form).
    MAX_LISTED_EPOCHS = 10**6

    @property
    def step_counts(self) -> tuple[int, ...]:
        """The leaves of every epoch's tree, one entry per epoch (refused beyond ``MAX_LISTED_EPOCHS`` epochs)."""
        epochs = sum(count for _, count in self.tree_counts)
        if epochs > self.MAX_LISTED_EPOCHS:
            raise ValueError(f"step_counts of {epochs} epochs is not listed one by one (at most "
                             f"{self.MAX_LISTED_EPOCHS}); read tree_counts, {self.tree_counts}")
        return tuple(leaves for leaves, count in self.tree_counts for _ in range(count))

    @property
    def dp_neighboring_relation(self):
        import dp_accounting

        return dp_accounting.NeighboringRelation.REPLACE_SPECIAL

    def dp_event(self):
        import dp_accounting

        (s,) = self.schedules
        if s.noise_std == 0:
            return dp_accounting.NonPrivateDpEvent()
        z = s.noise_std / (s.group_size * s.sensitivity)
        trees = [dp_accounting.SingleEpochTreeAggregationDpEvent(z, leaves) if count == 1 else
                 dp_accounting.SelfComposedDpEvent(dp_accounting.SingleEpochTreeAggregationDpEvent(z, leaves), count)
                 for leaves, count in self.tree_counts]
        return trees[0] if len(trees) == 1 else dp_accounting.ComposedDpEvent(trees)


def scaled_event(event, factor: float):
    """``event`` with every Gaussian's noise multiplier times ``factor`` (the one-parameter family that calibration
    searches)."""
    import dp_accounting as dpa

    if isinstance(event, dpa.GaussianDpEvent):
        return dpa.GaussianDpEvent(event.noise_multiplier * factor)
    if isinstance(event, dpa.SelfComposedDpEvent):
        return dpa.SelfComposedDpEvent(scaled_event(event.event, factor), event.count)
    if isinstance(event, dpa.ComposedDpEvent):
        return dpa.ComposedDpEvent([scaled_event(e, factor) for e in event.events])
    if isinstance(event, dpa.PoissonSampledDpEvent):
        return dpa.PoissonSampledDpEvent(event.sampling_probability, scaled_event(event.event, factor))
    if isinstance(event, (dpa.SampledWithoutReplacementDpEvent, dpa.SampledWithReplacementDpEvent)):
        return type(event)(event.source_dataset_size, event.sample_size, scaled_event(event.event, factor))
    if isinstance(event, dpa.NonPrivateDpEvent):
        return event  # no noise at any scale
    raise ValueError(f"event={event!r} has no noise multiplier to scale")  # never leave a release unscaled


def gaussian(schedules: GaussianSchedule | Sequence[GaussianSchedule], noise_fields: str | Sequence[str] = "noise_std"
             ) -> GaussianPrivacy:
    """Shorthand: ``gaussian(schedule)`` or ``gaussian([s1, s2], ["sigma_a", "sigma_b"])``."""
    if isinstance(schedules, GaussianSchedule):
        schedules = (schedules,)
    if isinstance(noise_fields, str):
        noise_fields = (noise_fields,) * len(tuple(schedules))
    return GaussianPrivacy(tuple(schedules), tuple(noise_fields))
