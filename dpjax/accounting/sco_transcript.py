"""Whole-transcript privacy of the shuffle-private SCO families (Cheu, Joseph, Mao & Peng, ICLR 2022), as functions
of the events their parts return.

The families (``dpjax.algorithms.shuffle_sco``) run rounds whose users are a public window
``[start_r, start_r + batch_r)`` of one stream of n users; a phase is a block of rounds that takes fresh users every
round (P_SGD, P_AGD: parallel composition) or the same users every round (P_GD: its rounds compose). Phases use
disjoint users, so the run's epsilon is the largest phase's. Each privatizer part returns one event:

* ``PvecTranscriptEvent`` -- every user's P_vec randomizer behind a shuffler with the per-round (g, b, p);
  Theorem 3.2 (Lemma 3.1 per coordinate, Lemma 3.3 across coordinates) at each phase's worst round, composed over
  an interactive phase's rounds (``shuffle_sco.transcript_epsilon``); robust shuffle privacy (Claim A.8).
* ``GaussianTranscriptEvent`` -- the Gaussian baselines: ``"central"`` (one N(0, (z 2L)^2 I) on the round's sum)
  or ``"local"`` (every user's own), z the round's noise multiplier; exact GDP composition over a user's rounds.
* ``PanPrivateEvent`` -- Algorithm 6's two draws per batch; Lemma C.4 (one intrusion), analytic Gaussian or
  Lemma C.5 as printed.
* ``NoGuaranteeEvent`` -- the exact sum and the variance-matched Gaussian surrogate of P_vec: ``NoPrivacy``.

Each ``spec`` checks the windows against the data and returns a ``ReportPrivacy``: ``epsilon`` certifies the run as
configured; calibration (``calibration.smallest_scale``) searches a one-parameter family: P_vec's calculator
parameters at epsilon ``1/scale`` (split over an interactive phase's rounds as the paper does), or Gaussian
multipliers ``scale x sqrt(rounds a user enters)`` (GDP mu = 1/scale per phase). Noise stds are in units of the
clip norm L; the relation is replace-one of one user. Pure Python: never imports jax.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Callable

import numpy as np

from dpjax import _validate as v
from dpjax.accounting import gdp
from dpjax.accounting import pvec as pvec_acc
from dpjax.accounting import shuffle_sco as sco
from dpjax.accounting.schedules import PrivacyReport, SdpReport
from dpjax.accounting.privacy_spec import NoPrivacy, ReportPrivacy


class TranscriptAccountant(str, enum.Enum):
    """Accountant names of the shuffle-private SCO transcripts."""

    PVEC_LEMMA = "pvec-lemma"  # corrected Lemma 3.3 constant, optimal composition across rounds
    PVEC_PRINTED = "pvec-printed"  # the paper's constants, advanced composition
    PVEC_LEMMA_ADVANCED = "pvec-lemma-advanced"  # lemma constants, advanced composition
    PVEC_NUMERICAL = "pvec-numerical"  # numerical PLD at the spread worst-case shift (heuristic, report only)
    GDP = "gdp"  # Gaussian baselines: exact GDP composition
    PAN_ANALYTIC = "pan-analytic"  # pan-privacy, Lemma C.4 with the analytic Gaussian mechanism
    PAN_PAPER = "pan-paper"  # pan-privacy, Lemma C.5 as printed (eps < 1)
    BEST = "best"  # generic (sweep configs): the tightest proven account of the mechanism
    PAPER = "paper"  # generic: the paper's own account


A = TranscriptAccountant
_PVEC = (A.PVEC_LEMMA, A.PVEC_PRINTED, A.PVEC_NUMERICAL, A.PVEC_LEMMA_ADVANCED)
_GENERIC = {"pvec": {A.BEST: A.PVEC_LEMMA, A.PAPER: A.PVEC_PRINTED}, "gdp": {A.BEST: A.GDP},
            "pan": {A.BEST: A.PAN_ANALYTIC, A.PAPER: A.PAN_PAPER}}


def _names(own: tuple, kind: str) -> tuple[str, ...]:
    return tuple(a.value for a in own + tuple(_GENERIC[kind]))


def _resolve(accountant, kind: str) -> TranscriptAccountant:
    a = TranscriptAccountant(accountant)
    return _GENERIC[kind].get(a, a)


# -- The rounds' windows and their phases ----------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class WindowPhase:
    """Rounds ``first .. first + rounds - 1``: fresh users every round, or the same ones."""

    first: int
    rounds: int
    start: int
    batch: int  # the smallest batch of the phase
    fresh: bool

    @property
    def slice(self) -> slice:
        return slice(self.first, self.first + self.rounds)


@dataclasses.dataclass(frozen=True)
class RoundWindows:
    """Round ``r`` uses users ``[start[r], start[r] + batch[r])``; ``stage_round[r] == 1`` opens a phase."""

    start: tuple[int, ...]
    batch: tuple[int, ...]
    stage_round: tuple[int, ...]

    @classmethod
    def of(cls, start, batch, stage_round) -> "RoundWindows":
        """From one run's per-round arrays (NumPy or jax arrays, host-side)."""
        arrays = [np.asarray(a) for a in (start, batch, stage_round)]
        if any(a.ndim != 1 for a in arrays) or len({a.shape for a in arrays}) != 1:
            raise ValueError(f"hparams holds schedules of shapes {[a.shape for a in arrays]}; pass one run's "
                             "hyperparameters (one value per round)")
        return cls(*(tuple(int(x) for x in a) for a in arrays))

    @property
    def num_rounds(self) -> int:
        return len(self.start)

    def phases(self) -> tuple[WindowPhase, ...]:
        """The phases; inside one, ``start`` advances by the batch (fresh) or stays (interactive)."""
        stage, start, batch = (np.asarray(a) for a in (self.stage_round, self.start, self.batch))
        firsts = [int(i) for i in np.flatnonzero(stage == 1)] + [len(stage)]
        if not firsts or firsts[0] != 0:
            raise ValueError("hparams.stage_round must open a phase (1) at round 0")
        out = []
        for a, z in zip(firsts[:-1], firsts[1:]):
            fresh = z - a == 1 or bool(np.all(np.diff(start[a:z]) == batch[a:z - 1]))
            if not fresh and np.any(start[a:z] != start[a]):
                raise ValueError("hparams.start must either advance by the batch (fresh users) or stay fixed "
                                 "(fully interactive) inside a phase")
            out.append(WindowPhase(a, z - a, int(start[a]), int(np.min(batch[a:z])), fresh))
        return tuple(out)

    def check(self, plan) -> int:
        """n, after checking the windows against the plan: one silo of n users, ``num_rounds`` rounds, every window
        inside the data (a window the data cannot fill would add fewer noise contributions than the accountant
        counts) and at most ``max_batch`` (the selection's batch size) users."""
        sizes = plan.selection.dataset_sizes
        if len(sizes) != 1:
            raise ValueError(f"silo_sizes={list(sizes)!r}: the n users are the records of ONE silo")
        n, max_batch = sizes[0], plan.selection.batch_sizes[0]
        if self.num_rounds != plan.num_rounds:
            raise ValueError(f"hparams has {self.num_rounds} rounds; the family has num_rounds={plan.num_rounds}")
        start, batch = np.asarray(self.start), np.asarray(self.batch)
        if np.any(batch > max_batch) or np.any(batch < 1):
            raise ValueError(f"hparams.batch={batch.max()} must be in [1, max_batch={max_batch}]")
        if np.any(start < 0) or np.any(start + batch > n):
            raise ValueError(f"hparams uses users up to {int(np.max(start + batch))} > num_users={n}")
        if plan.clip.neighboring.value != "replace-one":
            raise ValueError(f"neighboring={plan.clip.neighboring.value!r}: the transcripts are accounted replace-one")
        return n


def _calls(phase: WindowPhase) -> int:
    """How many of the phase's rounds one of its users enters."""
    return 1 if phase.fresh else phase.rounds


def _report(eps, delta, accountant, phases, std, notes, details) -> SdpReport:
    sampling = "fresh-users" if all(p.fresh for p in phases) else "fully-interactive"
    central = PrivacyReport(eps, delta, accountant, sampling, "replace-one", "user", std, tuple(notes))
    return SdpReport(central, None, details)


def _searched(fn, delta, accountant, scale):
    """``fn(...)``, or epsilon inf where the search family has no valid mechanism at this scale."""
    try:
        return fn(delta, accountant, scale)
    except ValueError:
        return PrivacyReport(math.inf, delta, str(accountant), "n/a", "replace-one", "user", 0.0)


# -- P_vec -----------------------------------------------------------------------------------------
def grouped_trials(b: int, p: float, groups: int) -> tuple[int, float]:
    """Trials per group ``ceil(b/groups)`` and probability ``b p / (groups ceil(b/groups))`` keeping ``b p`` when every
    user runs ``groups`` groups of trials (counts above int32); ``groups ceil(b/groups) >= b`` trials still satisfy
    Lemma 3.1's lower bound on b."""
    if groups == 1:
        return int(b), float(p)
    per = -(-int(b) // groups)
    return per, float(b) * p / (groups * per)


@dataclasses.dataclass(frozen=True)
class PvecTranscriptEvent:
    """Every user's P_vec randomizer (Algorithm 2) behind a shuffler, round by round.

    Attributes:
      field: the hparams field holding the (g, b, p) per round (what calibration returns).
      windows: the rounds' user windows.
      granularity, trials, probability: per round, as the run stores them (``trials`` per group).
      trial_groups: groups of ``trials`` each user runs (``grouped_trials``).
      dim: d, the dimension of every input vector.
      honest_frac: the fraction of a round's users assumed to run the randomizer (Claim A.8).
      max_granularity: the compiled bound on g.
      make_params: ``make_params(g, b, p)`` (per-round tuples) -> the hparams value the run would hold (certified
        as stored).
    """

    field: str
    windows: RoundWindows
    granularity: tuple[int, ...]
    trials: tuple[int, ...]
    probability: tuple[float, ...]
    trial_groups: int
    dim: int
    honest_frac: float = 1.0
    max_granularity: int | None = None
    make_params: Callable[[tuple, tuple, tuple], Any] = lambda g, b, p: (g, b, p)

    def spec(self, plan):
        return pvec_transcript_privacy(plan, self)

    def report(self, plan, delta: float, accountant: str = "pvec-lemma") -> SdpReport:
        return pvec_transcript_report(self, delta, accountant)

    def holding(self, value) -> "PvecTranscriptEvent":
        """The same event with the parameters of ``value`` (a hparams value of ``make_params``)."""
        g, b, p = (np.asarray(getattr(value, k)).reshape(-1) for k in ("granularity", "trials", "probability"))
        return dataclasses.replace(self, granularity=tuple(int(x) for x in g), trials=tuple(int(x) for x in b),
                                   probability=tuple(float(x) for x in p))


def _pvec_form(accountant: TranscriptAccountant) -> tuple[str, str | None]:
    """``(base accountant of transcript_epsilon, composition override)``."""
    if accountant is A.PVEC_LEMMA_ADVANCED:
        return A.PVEC_LEMMA.value, "advanced"
    return accountant.value, None


def _pvec_rows(event: PvecTranscriptEvent, delta, base, comp):
    """Per phase, the row of ``transcript_epsilon`` at its worst round: every distinct round is accounted with its
    own (g, b, p, users) and the largest epsilon kept (no min or max over one of them stands in for it, issue 23)."""
    rows, bits = [], 0
    batch = event.windows.batch
    for ph in event.windows.phases():
        candidates = []
        for r in range(ph.first, ph.first + ph.rounds):
            g, b, p = event.granularity[r], event.trials[r] * event.trial_groups, event.probability[r]
            if b == 0 or p == 0.0:
                raise ValueError(f"hparams.{event.field} has trials={b}, probability={p} in round {r}: no privacy "
                                 "noise")
            row = (g, b, p, batch[r], ph.fresh, ph.rounds, delta / (ph.rounds + 1))
            if row not in candidates:
                candidates.append(row)
        if len(candidates) > 1:
            candidates.sort(key=lambda row: sco.transcript_epsilon([row], event.dim, delta, base, comp,
                                                                   event.honest_frac)[0])
        rows.append(candidates[-1])
        g_max, b_max = max(event.granularity[ph.slice]), max(event.trials[ph.slice])
        bits = max(bits, _calls(ph) * event.dim * (g_max + event.trial_groups * b_max))
    return rows, bits


def pvec_transcript_report(event: PvecTranscriptEvent, delta: float, accountant: str = "pvec-lemma") -> SdpReport:
    """Certificate of the whole transcript from the (g, b, p) the run holds.

    Per phase, Theorem 3.2 inverted at its worst round (``_pvec_rows``) in the accountant's form
    (``TranscriptAccountant``); the run's eps is the largest phase's. Details: per-phase eps and how it was composed,
    bits per user (Corollaries B.8-B.11, exact in (g, b)) and the ``gaussian_approx`` diagnostic eps (never a
    guarantee). ``noise_std``: the smallest per-coordinate std of one user's binomial noise (2/g) sqrt(b p (1-p)).
    """
    delta = v.check_open_unit("delta", delta)
    acc = _resolve(v.check_choice("accountant", accountant, _names(_PVEC, "pvec")), "pvec")
    base, comp = _pvec_form(acc)
    rows, bits = _pvec_rows(event, delta, base, comp)
    eps, per_phase = sco.transcript_epsilon(rows, event.dim, delta, base, comp, event.honest_frac)
    phases = event.windows.phases()
    details = {"phases": len(phases), "rounds": event.windows.num_rounds, "aggregator": "pvec",
               "per_phase": per_phase, "bits_per_user": bits, "honest_frac": event.honest_frac,
               "gaussian_approx_epsilon": sco.gaussian_approx_transcript_epsilon(rows, event.dim, delta)}
    notes = [f"P_vec (Theorem 3.2; Lemma 3.1 per coordinate, Lemma 3.3 "
             f"{'as printed' if base == A.PVEC_PRINTED.value else 'with the Hoeffding constant'})",
             "; ".join(f"phase {i}: eps={e:.4g} ({how})" for i, (e, how) in enumerate(per_phase)),
             f"communication: {bits} one-bit messages per user"]
    if event.honest_frac < 1:
        notes.append(f"robust shuffle privacy with honest fraction {event.honest_frac:g} (Claim A.8)")
    if acc is A.PVEC_NUMERICAL:
        notes.append("HEURISTIC: numerical account at the spread worst-case shift, not proven for binomial noise "
                     "(not a guarantee of the paper)")
    g, b, p = (np.asarray(a, np.float64) for a in (event.granularity, event.trials, event.probability))
    std = float(np.min((2.0 / g) * np.sqrt(np.maximum(event.trial_groups * b * p * (1 - p), 0))))
    name = f"{base}:{comp or sco.PVEC_ACCOUNTANTS[base][2]}"
    return _report(eps, delta, name, phases, std, notes, details)


def pvec_calculator_params(event: PvecTranscriptEvent, epsilon: float, delta: float, accountant: str):
    """The hparams value of the calculator's parameters (``pvec.pvec_params``) at ``epsilon`` for every phase:
    fresh phases at (epsilon, delta), an interactive phase's rounds at its ``pgd_round_budget``; ``pvec-printed``
    with the paper's calculator, the lemma accountants with ``lemma_opt`` (at ``floor(honest_frac batch)`` users)."""
    acc = _resolve(accountant, "pvec")
    if acc.value in sco.REPORT_ONLY:
        raise ValueError(f"accountant={acc.value!r} is a heuristic report; calibrate with 'pvec-lemma' or "
                         "'pvec-printed'")
    base, comp_override = _pvec_form(acc)
    comp_name, mode, comp = sco.PVEC_ACCOUNTANTS[base]
    comp = comp_override or comp
    g, b, p = list(event.granularity), list(event.trials), list(event.probability)
    for ph in event.windows.phases():
        e, dl = (epsilon, delta) if ph.fresh or ph.rounds == 1 else sco.pgd_round_budget(epsilon, delta,
                                                                                         ph.rounds, comp)
        users = ph.batch
        if event.honest_frac < 1 and comp_name == "lemma":
            users = max(1, math.floor(event.honest_frac * ph.batch))
        calc = pvec_acc.pvec_params(min(e, 15.0), dl, users, event.dim, mode)
        if event.max_granularity is not None and calc.g > event.max_granularity:
            raise ValueError(f"max_granularity={event.max_granularity} is below the calculator's g={calc.g}")
        stored = grouped_trials(calc.b, calc.p, event.trial_groups)
        for r in range(ph.first, ph.first + ph.rounds):
            g[r], (b[r], p[r]) = calc.g, stored
    return event.make_params(tuple(g), tuple(b), tuple(p))


def pvec_transcript_privacy(plan, event: PvecTranscriptEvent) -> ReportPrivacy:
    """``ReportPrivacy`` of a P_vec transcript: ``epsilon`` certifies the configured (g, b, p); calibration searches
    the calculator's parameters at epsilon ``1/scale`` (certified as the run would store them)."""
    event.windows.check(plan)
    event.windows.phases()

    def values(scale, delta, accountant):
        return {event.field: pvec_calculator_params(event, 1.0 / scale, delta, accountant)}

    def search(delta, accountant, scale):
        if _resolve(accountant, "pvec").value in sco.REPORT_ONLY:  # refused, not searched
            raise ValueError(f"accountant={accountant!r} is a heuristic report; calibrate with 'pvec-lemma' or "
                             "'pvec-printed'")
        return _searched(lambda d, a, s: pvec_transcript_report(event.holding(values(s, d, a)[event.field]), d, a),
                         delta, accountant, scale)

    return ReportPrivacy(epsilon_fn=lambda delta, accountant, scale: pvec_transcript_report(event, delta, accountant),
                         values_fn=values, accountants=_names(_PVEC, "pvec"), neighboring="replace-one",
                         privacy_unit="user", rtol=1e-8, search_fn=search)


# -- Gaussian baselines and the pan-private protocol -----------------------------------------------
LOCALITIES = ("central", "local")


@dataclasses.dataclass(frozen=True)
class GaussianTranscriptEvent:
    """Gaussian noise of multiplier ``noise_multiplier[r]`` in round ``r``: once on the round's sum
    (``"central"``: std z 2L) or on every user's own message (``"local"``: each user's std z 2L)."""

    field: str
    windows: RoundWindows
    noise_multiplier: tuple[float, ...]
    locality: str = "central"

    def __post_init__(self):
        v.check_choice("locality", self.locality, LOCALITIES)

    def spec(self, plan):
        return gaussian_transcript_privacy(plan, self)

    def report(self, plan, delta: float, accountant: str = "gdp") -> SdpReport:
        return gaussian_transcript_report(self, delta, accountant)


def gaussian_transcript_report(event: GaussianTranscriptEvent, delta: float, accountant: str = "gdp") -> SdpReport:
    """GDP of the whole transcript: each phase at its smallest multiplier ``z``, one user's view mu = sqrt(rounds it
    enters) / z (sensitivity 2L, std z 2L); the run's mu is the largest phase's. ``noise_std``: the smallest z 2L."""
    delta = v.check_open_unit("delta", delta)
    _resolve(v.check_choice("accountant", accountant, _names((A.GDP,), "gdp")), "gdp")
    phases = event.windows.phases()
    z = np.asarray(event.noise_multiplier, np.float64)
    z_mins = [float(np.min(z[ph.slice])) for ph in phases]
    mus = [math.inf if z_min == 0 else math.sqrt(_calls(ph)) / z_min for ph, z_min in zip(phases, z_mins)]
    eps = gdp.gdp_epsilon(max(mus), delta)
    notes = [f"{event.locality} Gaussian mechanism, sensitivity 2L, exact GDP composition over a user's rounds"
             + (" (local DP: each user's own message)" if event.locality == "local" else "")]
    details = {"phases": len(phases), "rounds": event.windows.num_rounds, "mu": max(mus)}
    return _report(eps, delta, A.GDP.value, phases, 2.0 * float(z.min()), notes, details)


def _gaussian_search_multipliers(windows: RoundWindows, scale: float) -> tuple[float, ...]:
    """``scale x sqrt(rounds a user enters)`` per round: every phase at GDP mu = 1/scale."""
    z = [0.0] * windows.num_rounds
    for ph in windows.phases():
        for r in range(ph.first, ph.first + ph.rounds):
            z[r] = scale * math.sqrt(_calls(ph))
    return tuple(z)


def gaussian_transcript_privacy(plan, event: GaussianTranscriptEvent) -> ReportPrivacy:
    """``ReportPrivacy`` of a Gaussian baseline; calibration returns ``_gaussian_search_multipliers``."""
    event.windows.check(plan)
    event.windows.phases()

    def at(scale):
        return dataclasses.replace(event, noise_multiplier=_gaussian_search_multipliers(event.windows, scale))

    return ReportPrivacy(
        epsilon_fn=lambda delta, accountant, scale: gaussian_transcript_report(event, delta, accountant),
        values_fn=lambda scale, delta, accountant: {event.field: at(scale).noise_multiplier},
        accountants=_names((A.GDP,), "gdp"), neighboring="replace-one", privacy_unit="user", rtol=1e-10,
        min_scale=1e-12,
        search_fn=lambda delta, accountant, scale: gaussian_transcript_report(at(scale), delta, accountant))


@dataclasses.dataclass(frozen=True)
class PanPrivateEvent:
    """Algorithm 6: two independent N(0, (z 2L)^2 I) on every batch's sum (z = ``noise_multiplier[r]``)."""

    field: str
    windows: RoundWindows
    noise_multiplier: tuple[float, ...]

    def spec(self, plan):
        return pan_private_privacy(plan, self)

    def report(self, plan, delta: float, accountant: str = "pan-analytic") -> SdpReport:
        return pan_private_report(self, delta, accountant)


def _single_batch_phases(windows: RoundWindows) -> tuple[WindowPhase, ...]:
    phases = windows.phases()
    if not all(ph.fresh for ph in phases):
        raise ValueError("the pan-private analysis (Lemma C.4) needs every user in one batch")
    return phases


def pan_private_report(event: PanPrivateEvent, delta: float, accountant: str = "pan-analytic") -> SdpReport:
    """Pan-privacy against one intrusion (Lemma C.4): ``shuffle_sco.pan_private_epsilon`` at the smallest round
    multiplier z (one Gaussian draw of the batch protects it); every user in one batch. ``noise_std``: z 2L."""
    delta = v.check_open_unit("delta", delta)
    acc = _resolve(v.check_choice("accountant", accountant, _names((A.PAN_ANALYTIC, A.PAN_PAPER), "pan")), "pan")
    phases = _single_batch_phases(event.windows)
    z = min(event.noise_multiplier)
    # std z 2L on the sum of the batch, sensitivity 2L: in units of L, std 2z at Lipschitz 1
    eps = math.inf if z == 0 else sco.pan_private_epsilon(2.0 * z, 1.0, delta, acc.value)
    notes = ["pan-privacy against one intrusion (Lemma C.4): one Gaussian draw of the batch protects it"]
    details = {"phases": len(phases), "rounds": event.windows.num_rounds}
    return _report(eps, delta, acc.value, phases, 2.0 * z, notes, details)


def pan_private_privacy(plan, event: PanPrivateEvent) -> ReportPrivacy:
    """``ReportPrivacy`` of Algorithm 6; calibration returns one multiplier for every round."""
    event.windows.check(plan)
    _single_batch_phases(event.windows)
    names = _names((A.PAN_ANALYTIC, A.PAN_PAPER), "pan")

    def at(scale):
        return dataclasses.replace(event, noise_multiplier=(scale,) * event.windows.num_rounds)

    return ReportPrivacy(
        epsilon_fn=lambda delta, accountant, scale: pan_private_report(event, delta, accountant),
        values_fn=lambda scale, delta, accountant: {event.field: at(scale).noise_multiplier},
        accountants=names, neighboring="replace-one", privacy_unit="user", rtol=1e-10, min_scale=1e-12,
        search_fn=lambda delta, accountant, scale: _searched(
            lambda d, a, s: pan_private_report(at(s), d, a), delta, accountant, scale))


@dataclasses.dataclass(frozen=True)
class NoGuaranteeEvent:
    """A release that certifies nothing (the exact sum; a variance-matched surrogate)."""

    reason: str

    def spec(self, plan):
        return NoPrivacy(self.reason, plan.clip.neighboring.value, plan.selection.unit.value)


def transcript_report(plan, delta: float, accountant: str | None = None) -> SdpReport:
    """The full ``SdpReport`` of a shuffle-SCO family's plan (``family.dp_plan(silo_sizes, hparams)``); ``accountant``
    None: the event's default."""
    (event,) = plan.noises
    if not hasattr(event, "report"):
        raise ValueError(f"{plan.label}: {type(event).__name__} certifies nothing; there is no report")
    event.spec(plan)  # the windows against the data
    return event.report(plan, delta) if accountant is None else event.report(plan, delta, accountant)


def matched_noise_std(plan: sco.ProtocolPlan) -> tuple[float, ...]:
    """Per-round std of a Gaussian on the round's sum with P_vec's exact per-coordinate variance (worst-case
    rounding, ``shuffle_sco.pvec_total_variance``): the surrogate of ``matched-gaussian``."""
    return tuple(math.sqrt(sco.pvec_total_variance(ph.pvec, plan.lipschitz, ph.batch) / plan.d)
                 for ph in plan.phases for _ in range(ph.rounds))
