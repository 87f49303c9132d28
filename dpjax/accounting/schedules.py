"""Immutable privacy schedules: what a run does to each protected record.

A *schedule* is the accounting-side description of a compiled run. The engine builds it from the same config object that
drives the run (e.g. ``NoisyMbSgd.privacy(silo_sizes, hparams).schedules``), so the numbers are never typed twice.
Accountants (``dpjax.accounting.compute_epsilon`` and friends) consume schedules and refuse, with a ``ValueError``
naming ``accountant``, any schedule they cannot certify -- the same contract as ``dp_accounting``'s
``PrivacyAccountant.supports``.

Conventions (stated once, used everywhere):

* ``contribution_bound`` s is the largest l2 norm of ONE record's contribution to the released vector (for a minibatch
  mean of per-example gradients clipped at C with batch size K, s = C/K).
* ``Sensitive.contribution_bound`` (``dpjax.engine.roles``) is this same s inside the compiled step (traced, one per
  silo): one name, ``contribution_bound``, for one quantity (``bound`` alone also names audit lower bounds and rate
  bounds).
* The l2 sensitivity follows from the neighbouring relation: replace-one -> 2 s (the record's contribution changes from
  g to g'), add/remove -> s.
* ``noise_multiplier`` = noise_std / sensitivity (the usual DP-SGD sigma).
* ``group_size`` g: the guarantee protects any g records at once (group privacy); g = 1 is the ordinary record-level
  guarantee.

Mapping to ``dp_accounting``: ``sampled_gaussian_event`` (its table) is the one mapping of a batch selection's
Gaussian releases onto a ``DpEvent``; a family's plan reaches it through its parts' events
(``dpjax.accounting.events.SelectionEvent.dp_event``), a bare schedule through ``to_dp_event``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass
from typing import Any

from dpjax import _validate as v

__all__ = [
    "dp_relation",
    "sampled_gaussian_event",
    "Neighboring",
    "Sampling",
    "PrivacyUnit",
    "GaussianSchedule",
    "PrivacyReport",
    "SdpReport",
]


class Neighboring(str, enum.Enum):
    """Neighbouring relation between data sets."""

    REPLACE_ONE = "replace-one"
    ADD_REMOVE = "add-remove"


class Sampling(str, enum.Enum):
    """How each round's batch is drawn from the protected data set."""

    POISSON = "poisson"  # each record independently with prob. q = K/n
    WITH_REPLACEMENT = "with-replacement"  # K i.i.d. uniform draws
    WITHOUT_REPLACEMENT = "without-replacement"  # uniform K-subset
    ONE_PASS = "one-pass"  # floor(n/K) fixed disjoint blocks of K, cycled in order
    SHUFFLE = "shuffle"  # a fresh random permutation per epoch, floor(n/K) blocks of K
    FULL = "full"  # the whole data set every round


class PrivacyUnit(str, enum.Enum):
    """What one 'record' of the guarantee is."""

    RECORD_IN_SILO = "record-in-silo"  # ISRL-DP: a record of one silo's data
    RECORD = "record"  # central DP: a record anywhere
    USER = "user"  # user-level: all records of one user (group_size of them)


def coerce_enum(name: str, value: Any, cls: type[enum.Enum]) -> Any:
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except (ValueError, TypeError):
        choices = tuple(m.value for m in cls)
        raise ValueError(f"{name}={value!r} must be one of {choices}") from None


FIXED_SIZE = (
    Sampling.WITHOUT_REPLACEMENT,
    Sampling.WITH_REPLACEMENT,
    Sampling.ONE_PASS,
    Sampling.SHUFFLE,
)


@dataclass(frozen=True)
class GaussianSchedule:
    """`steps` releases of (a function of) a sampled batch plus N(0, noise_std^2 I).

    Attributes:
      noise_std: absolute per-coordinate std of the Gaussian noise added to
        the released vector (>= 0; 0 means non-private -> epsilon = inf).
      contribution_bound: s, the max l2 norm of ONE record's contribution to
        the released vector (e.g. clip_norm/K for a minibatch mean of
        per-example-clipped gradients). Sensitivity: replace-one -> 2 s,
        add/remove -> s.
      sampling: a `Sampling` (or its string value).
      dataset_size: n, records in the protected data set (one silo for
        ISRL-DP).
      batch_size: K (None for FULL). For POISSON it is the expected batch
        q n and may be fractional (the rate q = K/n is what is accounted); the
        fixed-size schemes need an integer.
      steps: number of releases (rounds) that may touch this data set.
      neighboring: `Neighboring` relation (default replace-one, as in all five
        papers).
      unit: `PrivacyUnit` label of the guarantee (default ``record``, central
        DP; the ISRL-DP families pass ``record-in-silo`` themselves).
      group_size: g >= 1; the guarantee covers any g records at once.
      sampling_rate: POISSON only: the declared public rate q that the sampler
        draws with (then ``inclusion_probability`` is q exactly, and ``batch_size`` is the
        public expected batch, informational); None: q = batch_size /
        dataset_size. Under add/remove the data set's size is not public, so a
        rate read from it would be data-dependent: declare q.

    Raises: ValueError: naming the offending argument and its value.
    """

    noise_std: float
    contribution_bound: float
    sampling: Sampling
    dataset_size: int
    batch_size: int | None
    steps: int
    neighboring: Neighboring = Neighboring.REPLACE_ONE
    unit: PrivacyUnit = PrivacyUnit.RECORD
    group_size: int = 1
    sampling_rate: float | None = None

    def __post_init__(self) -> None:
        set_ = lambda k, val: object.__setattr__(self, k, val)  # noqa: E731
        set_("noise_std", v.check_nonnegative("noise_std", self.noise_std))
        set_("contribution_bound", v.check_positive("contribution_bound", self.contribution_bound))
        set_("sampling", coerce_enum("sampling", self.sampling, Sampling))
        set_("neighboring", coerce_enum("neighboring", self.neighboring, Neighboring))
        set_("unit", coerce_enum("unit", self.unit, PrivacyUnit))
        n = v.check_int("dataset_size", self.dataset_size, min_value=1)
        set_("dataset_size", n)
        set_("steps", v.check_int("steps", self.steps, min_value=1))
        set_("group_size", v.check_int("group_size", self.group_size, min_value=1))
        if self.sampling is Sampling.FULL:
            if self.batch_size is not None:
                k = v.check_int("batch_size", self.batch_size, min_value=1)
                if k != n:
                    raise ValueError(
                        f"batch_size={self.batch_size!r} must be None (or equal to "
                        f"dataset_size={n}) for sampling='full'"
                    )
                set_("batch_size", None)
        else:
            if self.batch_size is None:
                raise ValueError(
                    f"batch_size=None is only allowed for sampling='full'; "
                    f"sampling={self.sampling.value!r} needs an integer batch size"
                )
            if self.sampling is Sampling.POISSON:
                # the expected batch q n: the rate q is the parameter, so q n need not be an integer
                k = v.check_positive("batch_size", self.batch_size)
                if k > n:
                    raise ValueError(f"batch_size={self.batch_size!r} must be <= dataset_size={n} for sampling='poisson'")
                set_("batch_size", int(k) if float(k).is_integer() else k)
            else:
                max_k = None if self.sampling is Sampling.WITH_REPLACEMENT else n
                set_("batch_size", v.check_int("batch_size", self.batch_size, min_value=1, max_value=max_k))
        if self.group_size > n:
            raise ValueError(f"group_size={self.group_size!r} must be <= dataset_size={n}")
        if self.sampling_rate is not None:
            if self.sampling is not Sampling.POISSON:
                raise ValueError(f"sampling_rate={self.sampling_rate!r} is Poisson's declared rate; "
                                 f"sampling={self.sampling.value!r} takes none")
            set_("sampling_rate", v.check_probability("sampling_rate", self.sampling_rate, allow_zero=False))
        if self.neighboring is Neighboring.ADD_REMOVE and self.sampling in FIXED_SIZE:
            raise ValueError(
                f"neighboring='add-remove' is not meaningful for sampling={self.sampling.value!r} "
                "(fixed-size batches need a fixed, public dataset size); use 'replace-one'"
            )

    # ------------------------------------------------------------------ derived
    @property
    def inclusion_probability(self) -> float:
        """q = K/n (1 for FULL; the declared ``sampling_rate`` for Poisson when given). For
        with-replacement: the per-round batch fraction."""
        if self.sampling is Sampling.FULL:
            return 1.0
        if self.sampling_rate is not None:
            return self.sampling_rate
        return self.batch_size / self.dataset_size

    @property
    def sensitivity(self) -> float:
        """l2 sensitivity of one release: 2 s (replace-one) or s (add/remove)."""
        factor = 2.0 if self.neighboring is Neighboring.REPLACE_ONE else 1.0
        return factor * self.contribution_bound

    @property
    def noise_multiplier(self) -> float:
        """noise_std / sensitivity."""
        return self.noise_std / self.sensitivity

    @property
    def blocks_per_epoch(self) -> int:
        """floor(n/K): disjoint full blocks of K records in one permutation.

        ONE_PASS and SHUFFLE walk one permutation block by block (block r is positions [rK, (r+1)K), as
        ``dpjax.primitives.sampling.OnePass`` slices it) and start a new epoch instead of wrapping around, so the n mod
        K records at the end of each epoch's permutation are not used that epoch.
        """
        if self.sampling not in (Sampling.ONE_PASS, Sampling.SHUFFLE):
            raise ValueError(f"blocks_per_epoch is undefined for sampling={self.sampling.value!r}")
        return self.dataset_size // self.batch_size

    @property
    def passes(self) -> int:
        """Most releases that touch one given record (deterministic participation: ``passes``)."""
        if self.sampling in (Sampling.FULL, Sampling.ONE_PASS, Sampling.SHUFFLE):
            return passes(self.sampling, self.steps, self.dataset_size, self.batch_size)
        raise ValueError(f"passes is undefined for sampling={self.sampling.value!r} (random participation)")

    def replace(self, **kw: Any) -> "GaussianSchedule":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **kw)

    # ------------------------------------------------------------ dp_accounting
    @property
    def dp_neighboring_relation(self):
        """The ``dp_accounting.NeighboringRelation`` to pair with ``to_dp_event()``."""
        return dp_relation(self.sampling, self.neighboring)

    def to_dp_event(self):
        """The equivalent ``dp_accounting.DpEvent``: ``sampled_gaussian_event`` of one Gaussian release of multiplier
        ``noise_std / (group_size x sensitivity)`` (the group folded in: exact under deterministic participation).

        Raises:
          ValueError: if no DpEvent describes the schedule (group_size > 1 with
            random sampling: group privacy is not a DpEvent).
        """
        import dp_accounting

        deterministic = self.sampling in (Sampling.FULL, Sampling.ONE_PASS, Sampling.SHUFFLE)
        release = dp_accounting.GaussianDpEvent(self.noise_std / (self.group_size * self.sensitivity))
        return sampled_gaussian_event(self.sampling, self.neighboring, release, self.steps, self.dataset_size,
                                      self.batch_size, self.inclusion_probability,
                                      1 if deterministic else self.group_size)


def passes(sampling: Sampling, steps: int, dataset_size: int, batch_size) -> int:
    """Most of ``steps`` releases that touch one given record under deterministic participation: ``steps`` for FULL.
    ONE_PASS and SHUFFLE walk one permutation block by block and an epoch is floor(n/K) blocks
    (``GaussianSchedule.blocks_per_epoch``), so a record is used at most ceil(steps / floor(n/K)) times (in every
    epoch, in the worst case). ceil(steps*K/n) would under-count when n mod K > 0: n = 10, K = 4, 5 steps is 3 epochs
    of 2 blocks, not 2."""
    if sampling is Sampling.FULL:
        return steps
    blocks_per_epoch = dataset_size // batch_size
    return -(-steps // blocks_per_epoch)


def dp_relation(sampling: Sampling, neighboring: Neighboring):
    """The ``dp_accounting.NeighboringRelation`` that ``sampled_gaussian_event`` is stated for: Poisson, the clipper's
    relation; the fixed-size samplings, REPLACE_ONE (the only relation they are meaningful for); deterministic
    participation, ADD_OR_REMOVE_ONE (the relation's sensitivity is folded into the multiplier, so the bare Gaussian
    means the same to every dp_accounting accountant: ``RdpAccountant`` ignores the relation of a Gaussian,
    ``PLDAccountant`` would double it under REPLACE_ONE)."""
    import dp_accounting

    nr = dp_accounting.NeighboringRelation
    if sampling is Sampling.POISSON:
        return nr.REPLACE_ONE if neighboring is Neighboring.REPLACE_ONE else nr.ADD_OR_REMOVE_ONE
    return nr.REPLACE_ONE if sampling in (Sampling.WITHOUT_REPLACEMENT, Sampling.WITH_REPLACEMENT) else \
        nr.ADD_OR_REMOVE_ONE


def sampled_gaussian_event(sampling: Sampling, neighboring: Neighboring, release, steps: int, dataset_size: int,
                           batch_size, rate: float, group_size: int = 1):
    """``steps`` releases of ``release`` (``GaussianDpEvent(z)``, z = std / the relation's sensitivity) on batches of
    ``batch_size`` K drawn by ``sampling`` from ``dataset_size`` n records (Poisson at ``rate`` q), as a ``DpEvent``
    stated for ``dp_relation(sampling, neighboring)`` -- the one mapping onto dp_accounting of a batch selection's
    event (``events.SelectionEvent.dp_event``) and of a schedule's (``GaussianSchedule.to_dp_event``):

    ====================  ============================================================
    poisson               SelfComposed(PoissonSampled(q, Gaussian(f z)), steps)
    without-replacement   SelfComposed(SampledWithoutReplacement(n, K, Gaussian(z)), steps)
    with-replacement      SelfComposed(SampledWithReplacement(n, K, Gaussian(z)), steps)
    full                  SelfComposed(Gaussian(z / g), steps)
    one-pass / shuffle    SelfComposed(Gaussian(z / g), ceil(steps / floor(n / K)))
    ====================  ============================================================

    f = 2 under replace-one, 1 under add/remove: dp_accounting's Poisson Gaussian is stated per record's bound s (its
    REPLACE_ONE PLD compares (1-q)N(0) + qN(s) with (1-q)N(0) + qN(-s)), while its without-replacement RDP (Wang,
    Balle & Kasiviswanathan 2019, Thm 27) takes the replace-one sensitivity 2s. A record is in at most one block of an
    epoch (deterministic participation: no amplification claimed; ``passes``), and a group of g
    records moves the released sums by at most g times the sensitivity in total, so group privacy is exact there
    (z / g). Group privacy under random sampling is no DpEvent: ValueError (dpjax's accountant converts the
    per-record curve instead).
    """
    import dp_accounting as dpa

    z, g = release.noise_multiplier, v.check_int("group_size", group_size, min_value=1)
    if z == 0:
        return dpa.NonPrivateDpEvent()
    if sampling in (Sampling.FULL, Sampling.ONE_PASS, Sampling.SHUFFLE):
        count = passes(sampling, steps, dataset_size, batch_size)
        return dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z / g) if g != 1 else release, count)
    if g != 1:
        raise ValueError(f"group_size={g} with sampling={sampling.value!r} has no dp_accounting DpEvent; use "
                         "dpjax.accounting.compute_epsilon (group privacy)")
    if sampling is Sampling.POISSON:
        f = 2.0 if neighboring is Neighboring.REPLACE_ONE else 1.0
        inner = dpa.PoissonSampledDpEvent(rate, dpa.GaussianDpEvent(f * z))
    elif sampling is Sampling.WITHOUT_REPLACEMENT:
        inner = dpa.SampledWithoutReplacementDpEvent(dataset_size, batch_size, release)
    else:
        inner = dpa.SampledWithReplacementDpEvent(dataset_size, batch_size, release)
    return dpa.SelfComposedDpEvent(inner, steps)


@dataclass(frozen=True)
class PrivacyReport:
    """An (epsilon, delta) guarantee together with how it was obtained.

    ``accountant`` names the method (e.g. 'rdp', 'pld', 'paper', 'gdp-exact');
    ``notes`` carry caveats (conservative bounds, paper-mode validity, ...).
    """

    epsilon: float
    delta: float
    accountant: str
    sampling: str
    neighboring: str
    unit: str
    noise_std: float
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        eps = v.check_real("epsilon", self.epsilon)
        if eps < 0:
            raise ValueError(f"epsilon={self.epsilon!r} must be >= 0")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", v.check_probability("delta", self.delta))
        object.__setattr__(self, "notes", tuple(self.notes))
        for k in ("sampling", "neighboring", "unit"):
            val = getattr(self, k)
            if isinstance(val, enum.Enum):
                object.__setattr__(self, k, val.value)

    def as_dict(self) -> dict:
        """JSON-friendly dict (epsilon = inf is written as the string 'inf')."""
        d = dataclasses.asdict(self)
        d["notes"] = list(self.notes)
        for k in ("epsilon", "noise_std"):
            if math.isinf(d[k]):
                d[k] = "inf"
        return d

    def __str__(self) -> str:
        eps = "inf" if math.isinf(self.epsilon) else f"{self.epsilon:.4g}"
        return (
            f"ε = {eps} (δ = {self.delta:.2g}; accountant={self.accountant}, "
            f"sampling={self.sampling}, neighbouring={self.neighboring}, unit={self.unit})"
        )


@dataclass(frozen=True)
class SdpReport:
    """A shuffle-model run's privacy: the central guarantee and, where the
    analysis has one, the local guarantee of each silo before shuffling.

    Attributes:
      central: (eps, delta)-shuffle DP of everything the analyzer sees (unit
        ``record``: one record anywhere, replace-one).
      local: the per-silo guarantee of the silo's own messages (unit
        ``record-in-silo``; ISRL-DP), or None when the paper's analysis gives
        none (e.g. P_vec, whose security rests on the shuffler).
      details: intermediate quantities of the accountant (name -> number).
    """

    central: PrivacyReport
    local: PrivacyReport | None = None
    details: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.central, PrivacyReport):
            raise ValueError(f"central={self.central!r} must be a PrivacyReport")
        if self.local is not None and not isinstance(self.local, PrivacyReport):
            raise ValueError(f"local={self.local!r} must be a PrivacyReport or None")
        object.__setattr__(self, "details", dict(self.details))

    @property
    def epsilon(self) -> float:
        """The central (shuffle-DP) epsilon."""
        return self.central.epsilon

    @property
    def delta(self) -> float:
        """The central (shuffle-DP) delta."""
        return self.central.delta

    def as_dict(self) -> dict:
        """JSON-friendly dict: ``central``, ``local`` (or None) and ``details``."""
        details = {k: ("inf" if isinstance(x, float) and math.isinf(x) else x) for k, x in self.details.items()}
        return {"central": self.central.as_dict(), "local": None if self.local is None else self.local.as_dict(),
                "details": details}

    def __str__(self) -> str:
        local = "none" if self.local is None else str(self.local)
        return f"shuffle DP: {self.central}; local (per silo): {local}"
