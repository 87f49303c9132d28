"""A run's privacy, assembled from what its parts say they do (a DP plan).

Each part of a round contributes one immutable event, in the spirit of ``dp_accounting``'s ``DpEvent`` and
``jax_privacy``'s execution plan (clipper x batch selection x noise x rounds):

* the batch selection: ``SelectionEvent`` -- the sampling scheme, each protected data set's size and batch size, the
  privacy unit, how many releases a record can be part of per round, and (Poisson) the declared public rate q its
  sampler draws with;
* the clipper: ``ClipEvent`` -- the neighbouring relation its bound is stated for;
* the privatizer: one ``NoiseEvent`` per kind of release -- the noise multiplier (std / sensitivity; the sensitivity
  itself came from the clipper at run time), the hparams field it lives in, where the noise is added (each silo's own
  message, or once on the server's aggregate) and how many such releases the run makes.

``DpPlan(selection, clip, noises, num_rounds).spec()`` turns them into the ``PrivacySpec`` every driver reads
(``epsilon`` / ``calibrate``). As in jax_privacy's execution plan, each part's event yields its ``dp_accounting``
event where one exists: a noise event its ``GaussianDpEvent(z)``, the batch selection wraps it (Poisson- or
without-replacement-sampled, or bare for a full or one-pass batch) over the releases; ``DpPlan.dp_event()`` composes
them, and the RDP and PLD accountants compose that very object for ``epsilon`` (the spec's ``events``). The run's
noise std is ``noise_multiplier x sensitivity`` (from the clipped value itself), so the schedules below (read by the
paper accountants, zCDP / GDP and the PLD grid) have contribution bound 1 and noise std ``multiplier x
sensitivity(1)``; replace-one's sensitivity 2 is folded into the multiplier. What no DpEvent states stays dpjax's:
per-silo ISRL-DP (one event per silo, ``PerSiloPrivacy``), group privacy under random sampling (one record's event,
then the (eps, delta) conversion), the RDP of Poisson under replace-one and of sampling with replacement (the
multiplicity-conditioned bound; dp_accounting's RdpAccountant has none).

Rules (stated once, here):

* noise on each silo's own message (ISRL-DP, unit ``record-in-silo``): every silo's transcript is its own guarantee and
  the run's epsilon is the largest. Silos with the same (multiplier, batch size) are accounted together at the smallest
  silo (the largest sampling rate); otherwise one schedule per silo (``PerSiloPrivacy``). Every round counts for every
  silo (availability gives no amplification: who reports is visible).
* noise once on the aggregate (central DP, unit ``record``): one schedule at the smallest silo's rate ``K / n_min`` (an
  upper bound on every record's rate).
* Poisson sampling: the rate is the selection's declared ``sampling_rate`` q -- the number its sampler draws with -- for
  every silo; without one, ``K / n`` of the data set's size, which is public only under replace-one. Under add/remove
  the size differs between neighbours, so a plan with an undeclared Poisson rate is refused (ValueError naming
  ``sampling_rate``).
* several noise events (e.g. DIFF2's restart and difference rounds): their schedules composed (RDP curves added / PLDs
  composed); calibration scales all multipliers by one common factor, keeping the ratios the family chose.
* ``group_size`` g protects any g records at once (the Gaussian schedules' ``group_size``; the batch-clipping
  accountant's replace-up-to-g).

Mechanisms whose accountant is not one of these Gaussian rules bring their own: an event with a ``spec(plan)`` method --
a privatizer's (P_vec's ``dpjax.accounting.pvec.PvecEvent``), the aggregator's (a shuffler's
``dpjax.accounting.shuffle.ShuffleEvent``) or the batch selection's (``SubsetSelectionEvent``) -- is dispatched to, in
that order, and reads the rest of the plan (``gaussian_spec()`` gives the Gaussian rules' guarantee, e.g. the silos' own
ISRL-DP guarantee under a shuffler). m clipped subsets of s records per round drawn by shuffling or fixed-size
subsampling (``SubsetSelectionEvent``, DP-SGD-General) take the exact f-DP batch-clipping accountant of
``dpjax.accounting.batch_clipping`` (the strong adversary who sees every round's index sets), at every silo's size, the
worst reported; its ``s`` (records per clipped unit: 1 = individual clipping) is the clipper's
``ClipEvent.unit_records``. Poisson subsets (individual clipping) take the Gaussian rules.

Pure Python: never imports jax.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Protocol, Sequence, runtime_checkable

from dpjax import _validate as v
from dpjax.accounting.schedules import (GaussianSchedule, Neighboring, PrivacyUnit, Sampling, coerce_enum,
                                       sampled_gaussian_event)
from dpjax.accounting.privacy_spec import GaussianPrivacy, NoPrivacy, PerSiloPrivacy, PrivacySpec


@runtime_checkable
class OwnAccountant(Protocol):
    """An event with its own accountant -- a paper's (shuffle amplification, P_vec transcripts, tree aggregation,
    adaptive clipping's joint Gaussian, ...), where no ``dp_accounting`` event expresses the mechanism: ``spec(plan)``
    is the run's guarantee given the rest of the plan. The plan asks, in order, the privatizers' events, the
    aggregator's, then the batch selection's (``DpPlan.spec``); every other event takes the Gaussian rules, whose
    parts' events are ``dp_accounting`` events (``NoiseEvent.dp_event`` wrapped by ``SelectionEvent.dp_event``)."""

    def spec(self, plan: "DpPlan") -> PrivacySpec: ...


class Placement(str, enum.Enum):
    """Where the privatizer adds its noise."""

    SILO = "silo"  # each silo on its own message (local / ISRL-DP)
    SERVER = "server"  # once, on the aggregate (central DP, a trusted server)


@dataclasses.dataclass(frozen=True)
class SelectionEvent:
    """What the batch selection does to one protected data set per round.

    Attributes:
      sampling: the scheme (``Sampling``).
      dataset_sizes: the protected data sets' sizes (one per silo).
      batch_sizes: the batch size of each silo (None for the full data set), or
        one value for every silo.
      unit: the privacy unit.
      releases_per_round: how many noisy releases one record can enter per
        round (K single-record local steps: K).
      sampling_rate: Poisson only: the declared public rate q the sampler draws
        every record with (the same object the sampler reads); None: K / n of
        each data set's size (replace-one only, where n is public).
    """

    sampling: Sampling
    dataset_sizes: tuple[int, ...]
    batch_sizes: tuple | int | float | None
    unit: PrivacyUnit = PrivacyUnit.RECORD_IN_SILO
    releases_per_round: int = 1
    sampling_rate: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "sampling", coerce_enum("sampling", self.sampling, Sampling))
        object.__setattr__(self, "unit", coerce_enum("unit", self.unit, PrivacyUnit))
        sizes = tuple(v.check_int(f"silo_sizes[{i}]", int(n), min_value=1) for i, n in enumerate(self.dataset_sizes))
        if not sizes:
            raise ValueError("silo_sizes=() must name at least one silo")
        object.__setattr__(self, "dataset_sizes", sizes)
        k = self.batch_sizes
        ks = tuple(k) if isinstance(k, (tuple, list)) else (k,) * len(sizes)
        if len(ks) != len(sizes):
            raise ValueError(f"batch_sizes has {len(ks)} entries for {len(sizes)} silos")
        object.__setattr__(self, "batch_sizes", ks)
        v.check_int("releases_per_round", self.releases_per_round, min_value=1)
        if self.sampling_rate is not None:
            if self.sampling is not Sampling.POISSON:
                raise ValueError(f"sampling_rate={self.sampling_rate!r} is Poisson's declared rate; "
                                 f"sampling={self.sampling.value!r} takes none")
            object.__setattr__(self, "sampling_rate",
                               v.check_probability("sampling_rate", self.sampling_rate, allow_zero=False))

    def dp_event(self, release, steps: int, neighboring: Neighboring, silo: int = 0, group_size: int = 1):
        """``steps`` releases of ``release`` (a ``NoiseEvent.dp_event``: ``GaussianDpEvent(z)``, z = std / the
        relation's sensitivity) on the batches this selection draws from silo ``silo``, as the ``DpEvent`` of
        ``schedules.sampled_gaussian_event`` (its table: Poisson- or without-replacement-sampled, or, for
        deterministic participation, the Gaussian itself self-composed over the passes, the group folded in)."""
        return sampled_gaussian_event(self.sampling, neighboring, release, steps, self.dataset_sizes[silo],
                                      self.batch_sizes[silo], self.inclusion_probability(silo), group_size)

    def inclusion_probability(self, silo: int) -> float:
        """The probability that the sampler includes a given record of silo ``silo`` in a round
        (Poisson: the declared q, else K / n_silo; fixed-size schemes: K / n_silo; full: 1)."""
        if self.sampling_rate is not None:
            return self.sampling_rate
        k = self.batch_sizes[silo]
        return 1.0 if k is None else k / self.dataset_sizes[silo]


@dataclasses.dataclass(frozen=True)
class SubsetSelectionEvent(SelectionEvent):
    """Each round, m disjoint subsets of s records (the clipper's units; ``batch_sizes`` = m s, or the
    expected batch m for Poisson) -- DP-SGD-General's batch selection (van Dijk et al., Algorithm 1).

    Attributes:
      num_subsets: m, the clipped units per round.
      rounds_per_epoch: B; shuffling uses blocks 0..B-1 of a fresh permutation per epoch,
        subsampling counts B rounds as an epoch (reporting only).
      filtering: Appendix D's probabilistic filtering (data-independent coins drop
        subsets); reported without its heuristic factor-2 gain.
    """

    num_subsets: int = 1
    rounds_per_epoch: int = 1
    filtering: bool = False

    def __post_init__(self):
        super().__post_init__()
        v.check_int("num_subsets", self.num_subsets, min_value=1)
        v.check_int("rounds_per_epoch", self.rounds_per_epoch, min_value=1)

    def spec(self, plan: "DpPlan") -> PrivacySpec:
        """Shuffled or subsampled subsets: the exact batch-clipping accountant; Poisson: the Gaussian rules.

        One noise event (the round's Gaussian, multiplier sigma w.r.t. the replace sensitivity 2C of one unit); with
        noise on the aggregate (pooled silos) one record still enters only its own silo's subsets and the other silos'
        terms are independent of it, so each silo's law applies to its records and the run's guarantee is the worst
        silo's -- the same numbers as noise on every silo.
        """
        from dpjax.accounting import batch_clipping

        if self.sampling not in _BATCH_CLIPPING:
            return plan.gaussian_spec()
        if plan.clip.neighboring is not Neighboring.REPLACE_ONE:
            raise ValueError(f"{plan.label}: sampling={self.sampling.value!r} batches have a fixed size; the "
                             f"clipper's relation must be 'replace-one', not {plan.clip.neighboring.value!r}")
        if len(plan.noises) != 1 or isinstance(plan.noises[0].noise_multiplier, tuple):
            raise ValueError(f"{plan.label}: the batch-clipping accountant takes one noise event with one noise "
                             "multiplier")
        noise, s, m = plan.noises[0], plan.clip.unit_records, self.num_subsets
        if any(k != m * s for k in self.batch_sizes):
            raise ValueError(f"{plan.label}: batch sizes {self.batch_sizes} must equal num_subsets*unit_records="
                             f"{m * s}")
        notes = (("experimental filtering: reported without its heuristic factor-2 gain",) if self.filtering else ())
        return batch_clipping.batch_clipping_privacy(
            sampling=_BATCH_CLIPPING[self.sampling], dataset_sizes=self.dataset_sizes, s=s, m=m,
            num_rounds=plan._steps(noise), rounds_per_epoch=self.rounds_per_epoch,
            noise_multiplier=noise.noise_multiplier, field=noise.field, group_size=plan.group_size,
            unit=self.unit.value, notes=notes)


@dataclasses.dataclass(frozen=True)
class ClipEvent:
    """The clipper's neighbouring relation (its bound is per unit of that relation) and how many records one clipped
    unit holds (``unit_records``: 1 = individual clipping, s = batch clipping of s-record subsets)."""

    neighboring: Neighboring = Neighboring.REPLACE_ONE
    unit_records: int = 1

    def __post_init__(self):
        object.__setattr__(self, "neighboring", coerce_enum("neighboring", self.neighboring, Neighboring))
        v.check_int("unit_records", self.unit_records, min_value=1)


@dataclasses.dataclass(frozen=True)
class NoiseEvent:
    """Gaussian releases of one kind.

    Attributes:
      field: the hparams field holding the noise multiplier (what calibration returns).
      noise_multiplier: std / sensitivity; one value, or one per silo (silo placement).
      placement: ``Placement.SILO`` or ``Placement.SERVER``.
      steps: how many such releases the run makes per record's data set (None:
        every round's releases, ``num_rounds x releases_per_round``).
    """

    field: str
    noise_multiplier: float | tuple[float, ...]
    placement: Placement = Placement.SILO
    steps: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "placement", coerce_enum("placement", self.placement, Placement))
        z = self.noise_multiplier
        if isinstance(z, (tuple, list)):
            object.__setattr__(self, "noise_multiplier",
                               tuple(v.check_nonnegative(f"{self.field}[{i}]", float(x)) for i, x in enumerate(z)))
        else:
            object.__setattr__(self, "noise_multiplier", v.check_nonnegative(self.field, float(z)))
        if self.steps is not None:
            v.check_int("steps", self.steps, min_value=0)

    def dp_event(self, silo: int = 0):
        """One release at silo ``silo``: ``dp_accounting.GaussianDpEvent(z)``, z = std / the clipper's sensitivity
        (the batch selection wraps it: ``SelectionEvent.dp_event``)."""
        import dp_accounting

        return dp_accounting.GaussianDpEvent(DpPlan._z(self, silo))


#: Deterministic participation: a record is in at most one batch per epoch (no amplification claimed).
_DETERMINISTIC = (Sampling.FULL, Sampling.ONE_PASS, Sampling.SHUFFLE)

#: The samplings the batch-clipping accountant covers, by its names for them.
_BATCH_CLIPPING = {Sampling.SHUFFLE: "shuffle", Sampling.WITHOUT_REPLACEMENT: "subsample"}


def _unit_sensitivity(neighboring: Neighboring) -> float:
    return 2.0 if neighboring is Neighboring.REPLACE_ONE else 1.0


@dataclasses.dataclass(frozen=True)
class DpPlan:
    """selection x clip x noise x rounds; ``spec()`` gives the run's ``PrivacySpec``."""

    selection: SelectionEvent
    clip: ClipEvent
    noises: tuple
    num_rounds: int
    label: str = "family"
    aggregation: Any = None  # the aggregator's event (a shuffler's), or None
    group_size: int = 1

    def __post_init__(self):
        object.__setattr__(self, "noises", tuple(self.noises))
        if not self.noises:
            raise ValueError("noises=() must list at least one NoiseEvent")
        v.check_int("num_rounds", self.num_rounds, min_value=1)
        v.check_int("group_size", self.group_size, min_value=1)
        sel = self.selection
        if (sel.sampling is Sampling.POISSON and sel.sampling_rate is None
                and self.clip.neighboring is Neighboring.ADD_REMOVE):
            raise ValueError(f"{self.label}: sampling_rate=None with Poisson sampling under add/remove: the rate "
                             "K/n would be read from the data set's size, which differs between neighbours; "
                             "declare the public rate q (sampling_rate)")

    def _schedule(self, n: int, k, z: float, steps: int, unit: PrivacyUnit) -> GaussianSchedule:
        return GaussianSchedule(noise_std=z * _unit_sensitivity(self.clip.neighboring), contribution_bound=1.0,
                                sampling=self.selection.sampling, dataset_size=n,
                                batch_size=k, steps=steps, neighboring=self.clip.neighboring, unit=unit,
                                group_size=self.group_size, sampling_rate=self.selection.sampling_rate)

    def _steps(self, noise: NoiseEvent) -> int:
        if noise.steps is not None:
            return noise.steps
        return self.num_rounds * self.selection.releases_per_round

    def _group(self, silos: Sequence[int]) -> GaussianPrivacy | None:
        """The composed schedules of the silos ``silos``, accounted at the smallest of them
        (the largest rate, the most passes); None when they differ in batch size or multiplier."""
        sel = self.selection
        ks = {sel.batch_sizes[i] for i in silos}
        if len(ks) != 1:
            return None
        (k,) = ks
        smallest = min(silos, key=lambda i: sel.dataset_sizes[i])
        n = sel.dataset_sizes[smallest]
        # group privacy: folded into the event under deterministic participation; under sampling the event is one
        # record's and dpjax's accountant converts its curve (no DpEvent expresses group privacy there)
        g = self.group_size if sel.sampling in _DETERMINISTIC else 1
        schedules, fields, events = [], [], []
        for noise in self.noises:
            zs = {self._z(noise, i) for i in silos}
            if len(zs) != 1:
                return None
            steps = self._steps(noise)
            if steps == 0:
                continue
            schedules.append(self._schedule(n, k, zs.pop(), steps, sel.unit))
            fields.append(noise.field)
            events.append(sel.dp_event(noise.dp_event(smallest), steps, self.clip.neighboring, smallest, g))
        return GaussianPrivacy(tuple(schedules), tuple(fields), multipliers=True, events=tuple(events))

    @staticmethod
    def _z(noise: NoiseEvent, silo: int) -> float:
        z = noise.noise_multiplier
        return z[silo] if isinstance(z, tuple) else z

    def spec(self) -> PrivacySpec:
        """The ``PrivacySpec`` of the plan (see the module docstring for the rules): a privatizer's, the
        aggregator's or the batch selection's own accountant where its event has one, else the Gaussian rules."""
        for noise in self.noises:
            if isinstance(noise, OwnAccountant):
                return noise.spec(self)
        if isinstance(self.aggregation, OwnAccountant) and not self._no_noise():
            return self.aggregation.spec(self)
        if isinstance(self.selection, OwnAccountant) and not self._no_noise():
            return self.selection.spec(self)
        return self.gaussian_spec()

    def dp_event(self):
        """The run as a ``dp_accounting.DpEvent``, like jax_privacy's execution plan's ``dp_event``: under the
        Gaussian rules, each noise event's ``GaussianDpEvent`` wrapped by the batch selection
        (``SelectionEvent.dp_event``), the noise events composed -- the very events ``epsilon`` composes
        (``gaussian_spec().events``); per-silo ISRL-DP: silo 0's (``PerSiloPrivacy.dp_event(silo)``: each silo is its
        own guarantee, which no one DpEvent states). A mechanism with its own accountant answers its spec's event
        (``UnsupportedDpEvent`` where none expresses it)."""
        return self.spec().dp_event()

    def _no_noise(self) -> bool:
        return all(self._all_zero(noise) for noise in self.noises)

    def gaussian_spec(self) -> PrivacySpec:
        """The Gaussian rules' guarantee of the noise events (the module docstring), ignoring the aggregator's event."""
        neighboring, unit = self.clip.neighboring.value, self.selection.unit.value
        if self._no_noise():
            return NoPrivacy(f"{self.label} adds no noise (noise multiplier 0)", neighboring, unit)
        placements = {noise.placement for noise in self.noises}
        if len(placements) != 1:
            raise ValueError(f"{self.label}: noise events mix placements {sorted(p.value for p in placements)}")
        silos = list(range(len(self.selection.dataset_sizes)))
        together = self._group(silos)
        if together is not None:
            return together
        if placements.pop() is Placement.SERVER:
            raise ValueError(f"{self.label}: noise on the aggregate needs one noise multiplier and one batch size "
                             "for every silo")
        per_silo = []
        for i in silos:
            one = self._group([i])
            if one is None:
                raise ValueError(f"{self.label}: silo {i} mixes batch sizes")  # unreachable: one silo
            per_silo.append(one)
        fields = {noise.field for noise in self.noises}
        if len(fields) != 1:
            raise ValueError(f"{self.label}: per-silo accounting of several noise fields {sorted(fields)} is not "
                             "supported")
        return PerSiloPrivacy(tuple(per_silo), fields.pop())

    @staticmethod
    def _all_zero(noise) -> bool:
        if not isinstance(noise, NoiseEvent):
            raise ValueError(f"noise event {noise!r} has no Gaussian rule and no spec(plan) of its own")
        z = noise.noise_multiplier
        return all(x == 0 for x in z) if isinstance(z, tuple) else z == 0 or (noise.steps == 0)
