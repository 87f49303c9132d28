"""Accountants for balls-in-bins, cyclic Poisson and b-min-separation batch selection (certified upper bounds).

The samplers are ``dpjax.primitives.sampling_bins``'s. Each bound below is a composition of Gaussian schedules
(``GaussianSchedule``), so every tight accountant of ``dpjax.accounting`` (``rdp``, ``pld`` -- dp_accounting's PLD --,
``gdp``, ``best``) certifies it and calibration is the one routine:

* **balls-in-bins** (Chua et al., "Balls-and-Bins Sampling for DP-SGD", AISTATS 2025; Feldman & Shenfeld, "Privacy
  amplification by random allocation", 2025): every record sits in exactly one of the B batches of an epoch, so in
  T rounds it enters at most ``E = ceil(T / B)`` releases, each with the one-record sensitivity. Whatever the bin
  of the differing record, the run is then an adaptive composition of E Gaussian mechanisms (the mixture over its
  bins is dominated by each component: joint convexity), i.e. ``SelfComposed(Gaussian(z), E)`` -- certified and
  always valid, but it claims NO amplification. Under add/remove (group size 1) the amplified bound is certified too:
  ``dpjax.accounting.random_allocation`` (the random-allocation PLD of Feldman & Shenfeld 2026, dp_accounting's
  unreleased accountant, ported), and the report is the smaller of the two. Chua et al.'s Monte Carlo number
  (``dpjax.accounting.balls_in_bins_mc``) stays an ESTIMATE, never the reported epsilon.
* **cyclic Poisson** (Choquette-Choo et al., "(Amplified) Banded Matrix Factorization", NeurIPS 2023, Section 4):
  a record's group is Poisson-sampled at rate q once every b rounds, so the run is ``ceil(T / b)`` compositions of
  ``PoissonSampled(q, Gaussian(z))`` (dp_accounting's PLD / RDP).
* **b-min-separation** (the same paper, Definition 2, cyclic order): a record takes part exactly every b rounds:
  ``ceil(T / b)`` Gaussians.

Overflow: balls-in-bins and cyclic-Poisson batches are gathered into a static buffer of ``capacity`` rows. The
run that was executed differs from the ideal one (no buffer) only on the event that some batch overflows, whose
probability ``p`` over the run is at most ``T * sum_silos P(Binomial(m_i, r_i) > capacity)`` (a union bound; m_i,
r_i: the silo's size and 1/B, or its largest group and q). If the ideal run is (eps, delta')-DP, the executed one is
(eps, delta' + (1 + e^eps) p)-DP (total variation <= p on both neighbours); ``BinnedPrivacy`` charges exactly this,
so a too-small capacity costs delta rather than going unaccounted.

Pure Python: never imports jax.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

from dpjax import _validate as v
from dpjax.accounting.privacy_spec import GaussianPrivacy, NoPrivacy, PrivacySpec
from dpjax.accounting.schedules import GaussianSchedule, Neighboring, PrivacyReport, PrivacyUnit, coerce_enum


class BinnedSampling(str, enum.Enum):
    """The batch selections accounted here (``dpjax.primitives.sampling_bins``' schemes)."""

    BALLS_IN_BINS = "balls-in-bins"
    CYCLIC_POISSON = "cyclic-poisson"
    MIN_SEPARATION = "min-separation"


def participations(num_steps: int, period: int) -> int:
    """The most releases one record can enter in ``num_steps`` rounds when it enters at most one per ``period``
    consecutive rounds (an epoch of B bins, or b groups): ``ceil(num_steps / period)``."""
    t = v.check_int("num_steps", num_steps, min_value=0)
    b = v.check_int("period", period, min_value=1)
    return -(-t // b)


def binomial_tail(trials: int, probability: float, capacity: int) -> float:
    """``P(Binomial(trials, probability) > capacity)`` (exact, scipy's survival function)."""
    from scipy import stats

    n = v.check_int("trials", trials, min_value=0)
    p = v.check_probability("probability", probability)
    c = v.check_int("capacity", capacity, min_value=0)
    return 0.0 if c >= n else float(stats.binom.sf(c, n, p))


def overflow_probability(num_steps: int, tails) -> float:
    """Union bound on the probability that any of ``num_steps`` rounds overflows: ``min(1, T * sum(tails))``."""
    t = v.check_int("num_steps", num_steps, min_value=0)
    return min(1.0, t * float(sum(tails)))


@dataclasses.dataclass(frozen=True)
class BinnedPrivacy(PrivacySpec):
    """A ``GaussianPrivacy`` (or, balls-in-bins under add/remove, ``AllocationPrivacy``) bound with the scheme's name and the overflow charge (module docstring).

    Attributes:
      base: the certified bound of the ideal (unbuffered) run.
      sampling: the scheme's name, reported as the report's ``sampling``.
      overflow_probability: p, the probability that some batch of the run overflows its buffer (0: never).
      note: what the bound claims (written into every report).
    """

    base: PrivacySpec
    sampling: str
    overflow_probability: float = 0.0
    note: str = ""

    def __post_init__(self):
        v.check_probability("overflow_probability", self.overflow_probability)

    @property
    def neighboring(self) -> str:
        return self.base.neighboring

    @property
    def unit(self) -> str:
        return self.base.unit

    def _reduced_delta(self, delta: float, epsilon_bound: float) -> float:
        """``delta - (1 + e^eps_bound) p``, refused when that leaves less than half of delta."""
        charge = (1.0 + math.exp(min(epsilon_bound, 700.0))) * self.overflow_probability
        if charge > delta / 2:
            raise ValueError(f"capacity: the buffer overflows with probability {self.overflow_probability:.3g} over "
                             f"the run, which costs {charge:.3g} of delta={delta!r}; raise the capacity (capacity "
                             "= n_max never overflows)")
        return delta - charge

    def epsilon(self, delta: float, accountant: str = "rdp") -> PrivacyReport:
        delta = v.check_open_unit("delta", delta)
        notes = [self.note] if self.note else []
        if self.overflow_probability > 0:
            # eps_b = eps(delta/2) >= eps(delta') for every delta' >= delta/2, so charging (1 + e^eps_b) p is safe
            eps_b = self.base.epsilon(delta / 2, accountant).epsilon
            reduced = self._reduced_delta(delta, eps_b)
            report = self.base.epsilon(reduced, accountant)
            notes.append(f"static buffer: overflow probability {self.overflow_probability:.3g} charged to delta "
                         f"({delta - reduced:.3g}); the ideal run is accounted at delta={reduced:.6g}")
        else:
            report = self.base.epsilon(delta, accountant)
        return dataclasses.replace(report, delta=delta, sampling=self.sampling, notes=tuple(notes) + report.notes)

    def calibrate(self, target_epsilon: float, delta: float, accountant: str = "rdp") -> dict[str, Any]:
        target = v.check_positive("target_epsilon", target_epsilon)
        delta = v.check_open_unit("delta", delta)
        # the calibrated run's eps is <= target, so charging (1 + e^target) p is safe
        reduced = self._reduced_delta(delta, target) if self.overflow_probability > 0 else delta
        return self.base.calibrate(target, reduced, accountant)

    def dp_event(self):
        """The ideal run's ``DpEvent`` when nothing can overflow; else ``UnsupportedDpEvent`` (the overflow charge
        is no DpEvent)."""
        if self.overflow_probability > 0:
            return super().dp_event()
        return self.base.dp_event()

    @property
    def dp_neighboring_relation(self):
        return self.base.dp_neighboring_relation


_NOTES = {
    BinnedSampling.BALLS_IN_BINS: ("balls-in-bins: certified without amplification (each record in one batch per "
                                   "epoch: ceil(T/B) Gaussians); the amplified value is only a Monte Carlo estimate"),
    BinnedSampling.CYCLIC_POISSON: "cyclic Poisson: ceil(T/b) Poisson-sampled Gaussians at the group rate q",
    BinnedSampling.MIN_SEPARATION: "b-min-separation: ceil(T/b) Gaussians, no amplification",
}


_AMPLIFIED_NOTE = ("balls-in-bins: certified by the random-allocation PLD (add/remove, group size 1), capped by "
                   "ceil(T/B) Gaussians; a Monte Carlo value is only an estimate")


def _certified(base: GaussianPrivacy, sampling: BinnedSampling, period: int, discretization: float | None,
               amplified: bool = True) -> tuple[PrivacySpec, str]:
    """``base`` wrapped in the random-allocation certificate where it applies (balls-in-bins, add/remove, group size
    1, B > 1, noise > 0, ``amplified``), else ``base`` (the no-amplification bound); with the report's note."""
    from dpjax.accounting import random_allocation as ra

    applies = (amplified and sampling is BinnedSampling.BALLS_IN_BINS
               and base.neighboring == Neighboring.ADD_REMOVE.value and period > 1
               and all(s.group_size == 1 and s.noise_std > 0 and s.contribution_bound == 1.0
                       for s in base.schedules))
    if not applies:
        return base, _NOTES[sampling]
    h = ra.DEFAULT_DISCRETIZATION if discretization is None else discretization
    return ra.AllocationPrivacy(base, period, h), _AMPLIFIED_NOTE


def binned_privacy(sampling, noise_multiplier: float, num_steps: int, period: int, *, sampling_rate=None,
                   neighboring="add-remove", unit="record", group_size: int = 1, dataset_size: int | None = None,
                   overflow: float = 0.0, field: str = "noise_multiplier",
                   discretization: float | None = None, amplified: bool = True) -> BinnedPrivacy:
    """The certified bound of one scheme: ``BinnedPrivacy`` over ``participations(num_steps, period)`` releases.

    Args:
      sampling: a ``BinnedSampling`` (or its name).
      noise_multiplier: z, noise std / the one-record sensitivity (2C replace-one, C add/remove).
      num_steps: T, the noisy rounds.
      period: B (bins per epoch) or b (groups).
      sampling_rate: q, cyclic Poisson's rate (required there, refused elsewhere).
      neighboring: the guarantee's neighbouring relation.
      unit: its privacy unit.
      group_size: the records it protects at once.
      dataset_size: the smallest data set (only checked against ``group_size``; default: large).
      overflow: the run's overflow probability (``overflow_probability``).
      field: the hparams field calibration returns.
      discretization: the random-allocation certificate's loss grid (balls-in-bins under add/remove; default
        ``random_allocation.DEFAULT_DISCRETIZATION``).
      amplified: False keeps balls-in-bins at the no-amplification bound (for comparison).
    """
    sampling = coerce_enum("sampling", sampling, BinnedSampling)
    z = v.check_nonnegative("noise_multiplier", noise_multiplier)
    k = participations(num_steps, period)
    neighboring = coerce_enum("neighboring", neighboring, Neighboring)
    if (sampling is BinnedSampling.CYCLIC_POISSON) != (sampling_rate is not None):
        raise ValueError(f"sampling_rate={sampling_rate!r}: cyclic Poisson needs its rate q, the other schemes "
                         "take none")
    n = int(dataset_size) if dataset_size is not None else 2**31 - 1
    sens = 2.0 if neighboring is Neighboring.REPLACE_ONE else 1.0
    common = dict(noise_std=z * sens, contribution_bound=1.0, dataset_size=n, steps=max(k, 1),
                  neighboring=neighboring, unit=unit, group_size=group_size)
    if sampling is BinnedSampling.CYCLIC_POISSON:
        q = v.check_probability("sampling_rate", sampling_rate, allow_zero=False)
        schedule = GaussianSchedule(sampling="poisson", batch_size=q * n, sampling_rate=q, **common)
    else:
        schedule = GaussianSchedule(sampling="full", batch_size=None, **common)
    base = GaussianPrivacy((schedule,), (field,), multipliers=True)
    spec, note = _certified(base, sampling, int(period), discretization, amplified)
    return BinnedPrivacy(spec, sampling.value, overflow, note)


def binned_epsilon(sampling, noise_multiplier: float, num_steps: int, period: int, delta: float,
                   accountant: str = "best", **kwargs) -> PrivacyReport:
    """``binned_privacy(...).epsilon(delta, accountant)``: the certified (eps, delta) of one scheme."""
    return binned_privacy(sampling, noise_multiplier, num_steps, period, **kwargs).epsilon(delta, accountant)


@dataclasses.dataclass(frozen=True)
class BinnedSelectionEvent:
    """The batch selection event of ``dpjax.parts.selection_bins``' parts (an event with its own accountant,
    ``spec(plan)``; duck-typed as a ``SelectionEvent`` for the plan).

    Attributes:
      sampling: the scheme (``BinnedSampling``).
      dataset_sizes: each silo's size.
      batch_sizes: the public (expected) batch K (one value, or one per silo).
      periods: each silo's B (bins per epoch) or b (groups).
      unit: the privacy unit.
      rates: cyclic Poisson: each silo's group rate q (None otherwise).
      capacity: the static buffer the sampler gathers into (None: never overflows).
      group_sizes: each silo's largest cyclic-Poisson group (the trials of its overflow tail).
      releases_per_round: releases one record can enter per round (1).
      size_derived: B, b or q was read from the data set's size (public only under replace-one: refused under
        add/remove).
    """

    sampling: BinnedSampling
    dataset_sizes: tuple[int, ...]
    batch_sizes: Any
    periods: tuple[int, ...]
    unit: PrivacyUnit = PrivacyUnit.RECORD
    rates: tuple[float, ...] | None = None
    capacity: int | None = None
    group_sizes: tuple[int, ...] | None = None
    releases_per_round: int = 1
    size_derived: bool = False
    sampling_rate: None = None  # read by the plan's Poisson check: these schemes declare their rates in ``rates``

    def __post_init__(self):
        object.__setattr__(self, "sampling", coerce_enum("sampling", self.sampling, BinnedSampling))
        object.__setattr__(self, "unit", coerce_enum("unit", self.unit, PrivacyUnit))
        sizes = tuple(v.check_int(f"silo_sizes[{i}]", int(n), min_value=1) for i, n in enumerate(self.dataset_sizes))
        if not sizes:
            raise ValueError("silo_sizes=() must name at least one silo")
        object.__setattr__(self, "dataset_sizes", sizes)
        k = self.batch_sizes
        object.__setattr__(self, "batch_sizes", tuple(k) if isinstance(k, (tuple, list)) else (k,) * len(sizes))
        periods = tuple(v.check_int(f"periods[{i}]", int(b), min_value=1) for i, b in enumerate(self.periods))
        if len(periods) != len(sizes):
            raise ValueError(f"periods has {len(periods)} entries for {len(sizes)} silos")
        object.__setattr__(self, "periods", periods)
        cyclic = self.sampling is BinnedSampling.CYCLIC_POISSON
        if cyclic != (self.rates is not None):
            raise ValueError(f"rates={self.rates!r}: cyclic Poisson needs one rate per silo, the others none")
        if cyclic:
            rates = tuple(v.check_probability(f"rates[{i}]", float(q), allow_zero=False)
                          for i, q in enumerate(self.rates))
            if len(rates) != len(sizes):
                raise ValueError(f"rates has {len(rates)} entries for {len(sizes)} silos")
            object.__setattr__(self, "rates", rates)
        if self.capacity is not None:
            v.check_int("capacity", self.capacity, min_value=1)

    def tails(self) -> tuple[float, ...]:
        """Each silo's per-round overflow probability ``P(batch > capacity)``."""
        if self.capacity is None or self.sampling is BinnedSampling.MIN_SEPARATION:
            return (0.0,) * len(self.dataset_sizes)
        if self.sampling is BinnedSampling.BALLS_IN_BINS:
            return tuple(binomial_tail(n, 1.0 / b, self.capacity) for n, b in zip(self.dataset_sizes, self.periods))
        groups = self.group_sizes or tuple(-(-n // b) for n, b in zip(self.dataset_sizes, self.periods))
        return tuple(binomial_tail(g, q, self.capacity) for g, q in zip(groups, self.rates))

    def spec(self, plan) -> PrivacySpec:
        """The run's certified bound: the worst silo's schedule (most participations, largest rate, smallest
        noise multiplier), one per noise event, composed; overflow charged over all silos and rounds."""
        neighboring = plan.clip.neighboring
        if neighboring is Neighboring.ADD_REMOVE and self.size_derived:
            raise ValueError(f"{plan.label}: the number of bins/groups (or the rate) was read from the data set's "
                             "size, which differs between add/remove neighbours; declare num_bins / num_groups "
                             "(and sampling_rate) as public numbers")
        schedules, fields = [], []
        for noise in plan.noises:
            z = noise.noise_multiplier
            z = min(z) if isinstance(z, tuple) else z
            steps = noise.steps if noise.steps is not None else plan.num_rounds * self.releases_per_round
            if steps == 0 or z == 0:
                if z == 0 and steps:
                    return NoPrivacy(f"{plan.label} adds no noise (noise multiplier 0)", neighboring.value,
                                     self.unit.value)
                continue
            one = binned_privacy(self.sampling, z, steps, min(self.periods),
                                 sampling_rate=max(self.rates) if self.rates else None, neighboring=neighboring,
                                 unit=self.unit, group_size=plan.group_size, dataset_size=min(self.dataset_sizes),
                                 field=noise.field)
            schedules.extend(getattr(one.base, "base", one.base).schedules)
            fields.append(noise.field)
        base = GaussianPrivacy(tuple(schedules), tuple(fields), multipliers=True)
        p = overflow_probability(plan.num_rounds, self.tails())
        spec, note = _certified(base, self.sampling, min(self.periods), None)
        return BinnedPrivacy(spec, self.sampling.value, p, note)


def account_cli(args) -> dict:
    """``dpjax account --sampling balls-in-bins|cyclic-poisson|min-separation``: the certified result dict (the
    ideal, unbuffered run; a part's static buffer adds its overflow charge through its event).

    ``--num-bins``: B (bins per epoch) or b (groups); default ``dataset_size // batch_size`` (balls-in-bins,
    min-separation; replace-one only) or 1 (cyclic Poisson). Cyclic Poisson's rate: ``--sampling-rate``, else
    ``batch_size b / dataset_size``. ``--mc-samples N`` adds, for balls-in-bins under add/remove, Chua et al.'s Monte
    Carlo epsilon -- labelled an estimate, never the reported epsilon."""
    scheme = coerce_enum("sampling", args.sampling, BinnedSampling)
    n, k = args.dataset_size, args.batch_size
    cyclic = scheme is BinnedSampling.CYCLIC_POISSON
    neighboring = args.neighboring or ("replace-one" if scheme is BinnedSampling.MIN_SEPARATION else "add-remove")
    samples = getattr(args, "mc_samples", None)
    if samples is not None and (scheme is not BinnedSampling.BALLS_IN_BINS or neighboring != "add-remove"):
        raise ValueError(f"mc_samples={samples!r}: the Monte Carlo estimate is balls-in-bins' under add-remove")
    if samples is not None:  # 0 would silently print no estimate; a huge count would fill the memory
        from dpjax.accounting.balls_in_bins_mc import MAX_SAMPLES
        v.check_int("--mc-samples", samples, min_value=1, max_value=MAX_SAMPLES)
    if args.num_bins is not None:
        # more bins (groups) than records leaves most of them empty: a typo, not a schedule
        period = v.check_int("--num-bins", args.num_bins, min_value=1, max_value=n)
    elif cyclic:
        period = 1
    else:
        if k is None:
            raise ValueError(f"num_bins=None: give --num-bins (or --batch-size, for B = n // K) with "
                             f"sampling={scheme.value!r}")
        if neighboring == "add-remove":
            raise ValueError("num_bins=None under add-remove: B = n // K would be read from the data set's size, "
                             "which differs between neighbours; give --num-bins")
        period = max(1, n // k)
    if samples is not None:  # the estimate's cost, refused before any accounting runs
        from dpjax.accounting.balls_in_bins_mc import check_work
        check_work(samples, args.steps, period, "--mc-samples")
    rate = None
    if cyclic:
        if args.sampling_rate is not None:
            rate = args.sampling_rate
        elif k is not None and neighboring == "replace-one":
            rate = min(1.0, k * period / n)
        elif k is not None:  # add/remove: q = K b / n would be read from n, which differs between neighbours
            raise ValueError(f"sampling_rate=None: cyclic Poisson under neighboring={neighboring!r} needs "
                             f"--sampling-rate q (each record's inclusion rate in its group's steps), given instead "
                             f"of --batch-size {k}; or pass --neighboring replace-one to keep --batch-size "
                             f"(q = batch_size x num_bins / dataset_size = {min(1.0, k * period / n):.6g})")
        else:
            raise ValueError("sampling_rate=None: cyclic Poisson needs --sampling-rate q (each record's inclusion "
                             "rate in its group's steps)")
    elif args.sampling_rate is not None:
        raise ValueError(f"sampling_rate={args.sampling_rate!r}: sampling={scheme.value!r} takes --num-bins, not a "
                         "rate")
    spec = binned_privacy(scheme, 1.0, args.steps, period, sampling_rate=rate, neighboring=neighboring,
                          unit=args.unit, group_size=args.group_size, dataset_size=n)
    if args.noise_multiplier is not None:
        z = v.check_nonnegative("noise_multiplier", args.noise_multiplier)
    else:
        z = spec.calibrate(args.epsilon, args.delta, args.accountant)["noise_multiplier"]
    spec = binned_privacy(scheme, z, args.steps, period, sampling_rate=rate, neighboring=neighboring,
                          unit=args.unit, group_size=args.group_size, dataset_size=n)
    report = spec.epsilon(args.delta, args.accountant)
    kk = participations(args.steps, period)
    notes = list(report.notes) + [f"{'B' if scheme is BinnedSampling.BALLS_IN_BINS else 'b'} = {period}: each record "
                                  f"enters at most {kk} of the {args.steps} steps"]
    out = report.as_dict() | {"noise_multiplier": z, "sampling_rate": rate, "batch_size": k, "dataset_size": n,
                              "steps": args.steps, "group_size": args.group_size, "num_bins": period,
                              "participations": kk, "notes": notes}
    if args.epsilon is not None:
        out["target_epsilon"] = args.epsilon
    if samples:
        from dpjax.accounting import balls_in_bins_mc

        est = balls_in_bins_mc.mc_epsilon(z, args.steps, period, args.delta, num_samples=samples)
        out["monte_carlo_estimate"] = dataclasses.asdict(est)
        out["notes"].append(f"Monte Carlo ESTIMATE (not certified): epsilon ~ {est.epsilon:.4g} "
                            f"(delta {est.delta:.3g} +- {est.stderr:.2g}, {samples} samples"
                            + ("; UNRESOLVED: the standard error is above delta / 4, raise --mc-samples)"
                               if est.stderr > args.delta / 4 else ")"))
    return out
