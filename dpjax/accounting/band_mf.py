"""Accounting of BandMF (banded matrix-factorization noise), as dp_accounting events.

Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu, "(Amplified) Banded Matrix Factorization: A unified
approach to private training", NeurIPS 2023. The privatizer (``dpjax.parts.band_mf``) adds ``z x Delta x C^{-1} w``
with the strategy ``C`` normalised to unit largest column norm, ``Delta`` a record's clipped contribution:

* **multi-epoch, no amplification** (Sec. 4; also Choquette-Choo et al., "Multi-Epoch Matrix Factorization
  Mechanisms for Private Machine Learning", ICML 2023, Thm 2.1): the run is ``C x + sigma w``, ONE Gaussian mechanism of
  sensitivity ``sens(C) Delta`` under the participation pattern (b-min-separation: ``sens(C)^2`` from
  ``dpjax.primitives.banded_mf.sensitivity_squared``), so of multiplier ``z / sens(C)``: ``GaussianDpEvent``.
  For a unit-norm ``b``-banded ``C`` and separation ``>= b`` the cross terms vanish and ``sens(C) <= sqrt(k)``
  with ``k = ceil(n / min_sep)`` participations (``separated_sensitivity``).
* **amplified, cyclic Poisson sampling** (Thm 4 / Alg. 2): the records split into ``b`` groups, round ``t`` samples
  group ``t mod b`` with Poisson rate ``q``; a record meets ``ceil(n / b)`` rounds, each a Poisson-subsampled
  Gaussian of multiplier ``z`` (column-norm sensitivity), composed adaptively:
  ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), ceil(n / b))``. Neighbouring: add/remove.

In a family (``DpSgd(noise="band-mf")``) the privatizer's ``BandMfEvent`` reads the DP plan's selection:

* records in a fixed order cut into blocks and cycled (``one-pass``, ``T = floor(n_min / B)`` rounds an epoch)
  participate every ``T`` rounds, so ``min_sep = T``, ``k = ceil(R / T)`` and, for ``bands <= T``,
  ``sens(C) <= sqrt(k)``: the run's ``BandMfPrivacy`` is ``multi_epoch_event(z, sqrt(k))``;
* ``min-separation`` groups (``dpjax.parts.selection_bins``, period ``p``): the same with ``min_sep = p``;
* ``cyclic-poisson`` groups (period ``p >= bands``, rate ``q``): ``BandMfAmplifiedPrivacy``, i.e.
  ``amplified_event(z, q, R, p)`` (a record's participations are ``p >= bands`` rounds apart, so the columns of ``C``
  they touch have disjoint supports and each is its own Poisson-subsampled Gaussian: Thm 4, stated there for
  ``p = bands``), wrapped in the selection's overflow charge (``dpjax.accounting.sampling_bins.BinnedPrivacy``).

Pure Python + dp_accounting (no jax).
"""

from __future__ import annotations

import dataclasses
import math

import dp_accounting
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpjax import _validate as v
from dpjax.accounting import gdp
from dpjax.accounting.privacy_spec import NoPrivacy, PrivacySpec, StatedRelation
from dpjax.accounting.sampling_bins import BinnedPrivacy, BinnedSampling, BinnedSelectionEvent, overflow_probability
from dpjax.accounting.schedules import Neighboring, PrivacyReport, Sampling

__all__ = ["separated_sensitivity", "multi_epoch_event", "amplified_event", "band_mf_epsilon", "BandMfPrivacy",
           "BandMfAmplifiedPrivacy", "BandMfEvent"]


def separated_sensitivity(num_rounds: int, min_sep: int, bands: int) -> float:
    """``sqrt(ceil(n / min_sep))``: the sensitivity bound of a unit-column-norm ``bands``-banded strategy when every two
    participations are ``min_sep >= bands`` apart (the Gram matrix vanishes between them)."""
    n = v.check_int("num_rounds", num_rounds, min_value=1)
    sep = v.check_int("min_sep", min_sep, min_value=1)
    b = v.check_int("bands", bands, min_value=1)
    if b > sep:
        raise ValueError(f"bands={b} must be <= min_sep={sep} for the separated bound; use "
                         "dpjax.primitives.banded_mf.sensitivity_squared on the strategy matrix")
    return math.sqrt(-(-n // sep))


def multi_epoch_event(noise_multiplier: float, strategy_sensitivity: float) -> dp_accounting.DpEvent:
    """The whole run as one Gaussian mechanism of multiplier ``z / sens(C)``."""
    z = v.check_positive("noise_multiplier", noise_multiplier)
    sens = v.check_positive("strategy_sensitivity", strategy_sensitivity)
    return dp_accounting.GaussianDpEvent(z / sens)


def amplified_event(noise_multiplier: float, sampling_prob: float, num_rounds: int,
                    bands: int) -> dp_accounting.DpEvent:
    """Amplified BandMF under cyclic Poisson sampling (``bands`` groups, rate ``sampling_prob`` inside a group)."""
    z = v.check_positive("noise_multiplier", noise_multiplier)
    q = v.check_probability("sampling_prob", sampling_prob, allow_zero=False)
    n = v.check_int("num_rounds", num_rounds, min_value=1)
    b = v.check_int("bands", bands, min_value=1, max_value=n)
    inner = dp_accounting.GaussianDpEvent(z)
    if q < 1.0:
        inner = dp_accounting.PoissonSampledDpEvent(q, inner)
    return dp_accounting.SelfComposedDpEvent(inner, -(-n // b))


def band_mf_epsilon(event: dp_accounting.DpEvent, delta: float, *, discretization: float = 1e-4) -> float:
    """Certified ``epsilon`` at ``delta`` of a BandMF event by dp_accounting's PLD accountant (add/remove)."""
    d = v.check_open_unit("delta", delta)
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=v.check_positive(
        "discretization", discretization))
    return float(acc.compose(event).get_epsilon(d))


def _rdp_epsilon(event: dp_accounting.DpEvent, delta: float) -> float:
    acc = rdp_privacy_accountant.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    return float(acc.compose(event).get_epsilon(delta))


class _BandMfGuarantee:
    """``epsilon`` / ``calibrate`` of the two BandMF guarantees: each is one dp_accounting event of multiplier ``z``
    (``event_at``); ``"best"`` is the smallest of the other accountants, naming it."""

    def dp_event(self) -> dp_accounting.DpEvent:
        return self.event_at(self.noise_multiplier)

    @property
    def dp_neighboring_relation(self):
        return dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE

    def _epsilon_at(self, z: float, delta: float, accountant: str) -> float:
        if accountant == "best":
            return min(self._epsilon_at(z, delta, a) for a in self.accountants[:-1])
        if accountant == "gdp":
            return gdp.gdp_epsilon(self.strategy_sensitivity / z, delta)
        event = self.event_at(z)
        return band_mf_epsilon(event, delta) if accountant == "pld" else _rdp_epsilon(event, delta)

    def epsilon(self, delta: float, accountant: str = "pld") -> PrivacyReport:
        accountant = v.check_choice("accountant", accountant, self.accountants)
        delta = v.check_open_unit("delta", delta)
        if accountant == "best":
            accountant = min(self.accountants[:-1], key=lambda a: self._epsilon_at(self.noise_multiplier, delta, a))
        return PrivacyReport(self._epsilon_at(self.noise_multiplier, delta, accountant), delta, accountant,
                             self._report_sampling(), self.neighboring, self.privacy_unit, self.noise_multiplier,
                             (self._note(),))

    def calibrate(self, target_epsilon: float, delta: float, accountant: str = "pld") -> dict:
        from dpjax.accounting import calibration

        accountant = v.check_choice("accountant", accountant, self.accountants)
        target = v.check_positive("target_epsilon", target_epsilon)
        delta = v.check_open_unit("delta", delta)
        z = calibration.smallest_scale(lambda z: self._epsilon_at(z, delta, accountant), target,
                                       start=self.noise_multiplier, rtol=1e-4, min_scale=1e-6,
                                       what=self.noise_field)
        return {self.noise_field: z}


@dataclasses.dataclass(frozen=True)
class BandMfPrivacy(_BandMfGuarantee, StatedRelation, PrivacySpec):
    """A BandMF run, multi-epoch without amplification (Choquette-Choo et al., NeurIPS 2023, Sec. 4; ICML 2023,
    Thm 2.1): one Gaussian mechanism of multiplier ``noise_multiplier / strategy_sensitivity``.

    The multiplier ``z`` is w.r.t. the round message's own l2 sensitivity under ``neighboring`` (the clipper's bound:
    ``2C/B`` under replace-one), so the event is a unit-sensitivity Gaussian, composed under dp_accounting's
    ``ADD_OR_REMOVE_ONE`` (as dpjax's unsampled Gaussian schedules are). ``epsilon(delta, "pld")`` is
    ``band_mf_epsilon(multi_epoch_event(z, sens))``; ``"rdp"`` is dp_accounting's RDP accountant on the same event;
    ``"gdp"`` the Gaussian's exact epsilon (``mu = sens / z``, Balle & Wang, ICML 2018, Thm 8); ``"best"`` the smallest.
    ``calibrate`` returns ``{noise_field: z}`` meeting a target epsilon (``z / sens`` scales linearly)."""

    noise_multiplier: float
    strategy_sensitivity: float
    noise_field: str = "noise_multiplier"
    num_rounds: int = 1
    bands: int = 1
    min_sep: int = 1
    neighboring: str = "replace-one"
    privacy_unit: str = "record"
    sampling: str = Sampling.ONE_PASS.value  # the selection's name, reported as the report's ``sampling``

    accountants = ("pld", "rdp", "gdp", "best")

    def __post_init__(self):
        v.check_positive("noise_multiplier", self.noise_multiplier)
        v.check_positive("strategy_sensitivity", self.strategy_sensitivity)

    def event_at(self, noise_multiplier: float) -> dp_accounting.DpEvent:
        return multi_epoch_event(noise_multiplier, self.strategy_sensitivity)

    def dp_event_at(self, scale: float) -> dp_accounting.DpEvent:
        return self.event_at(self.noise_multiplier * v.check_positive("scale", scale))

    def _report_sampling(self) -> str:
        return self.sampling

    def _note(self) -> str:
        k = -(-self.num_rounds // self.min_sep)
        return (f"BandMF multi-epoch (Choquette-Choo et al. 2023): one Gaussian of multiplier z / sens(C) = "
                f"{self.noise_multiplier:g} / {self.strategy_sensitivity:.6g}; {self.bands} bands, <= {k} "
                f"participations >= {self.min_sep} rounds apart; no amplification")


@dataclasses.dataclass(frozen=True)
class BandMfAmplifiedPrivacy(_BandMfGuarantee, StatedRelation, PrivacySpec):
    """Amplified BandMF under cyclic Poisson sampling (Choquette-Choo et al., NeurIPS 2023, Thm 4): the records in
    ``period >= bands`` groups, round ``t`` Poisson-samples group ``t mod period`` at rate ``sampling_rate``; the run is
    ``amplified_event(z, q, R, period)``: ``ceil(R / period)`` Poisson-subsampled Gaussians of multiplier ``z``,
    composed under add/remove.

    ``epsilon(delta, "pld")`` is ``band_mf_epsilon(amplified_event(...))`` (dp_accounting's PLD); ``"rdp"`` its RDP
    accountant on the same event; ``"best"`` the smaller. ``calibrate`` returns ``{noise_field: z}``."""

    noise_multiplier: float
    sampling_rate: float
    num_rounds: int
    period: int
    bands: int
    noise_field: str = "noise_multiplier"
    neighboring: str = "add-remove"
    privacy_unit: str = "record"

    accountants = ("pld", "rdp", "best")

    def __post_init__(self):
        v.check_positive("noise_multiplier", self.noise_multiplier)
        v.check_probability("sampling_rate", self.sampling_rate, allow_zero=False)
        v.check_int("bands", self.bands, min_value=1)
        v.check_int("period", self.period, min_value=1)
        if self.bands > self.period:
            raise ValueError(f"bands={self.bands} must be <= the cyclic period num_bins={self.period} (a record's "
                             "participations must be >= bands rounds apart)")
        if self.neighboring != Neighboring.ADD_REMOVE.value:
            raise ValueError(f"neighboring={self.neighboring!r}: amplified BandMF is accounted under add-remove")

    def event_at(self, noise_multiplier: float) -> dp_accounting.DpEvent:
        return amplified_event(noise_multiplier, self.sampling_rate, self.num_rounds, self.period)

    def _report_sampling(self) -> str:
        return BinnedSampling.CYCLIC_POISSON.value

    def _note(self) -> str:
        k = -(-self.num_rounds // self.period)
        return (f"amplified BandMF (Choquette-Choo et al., NeurIPS 2023, Thm 4): {k} Poisson-subsampled Gaussians of "
                f"multiplier {self.noise_multiplier:g} at q = {self.sampling_rate:g} (cyclic Poisson, "
                f"{self.period} groups, {self.bands} bands)")


@dataclasses.dataclass(frozen=True)
class BandMfEvent:
    """The BandMF privatizer's event (``dpjax.parts.band_mf.BandMfNoise.events``): its noise (``noise``, a
    ``dpjax.accounting.events.NoiseEvent``) and its strategy's ``bands``. ``spec(plan)`` is the run's guarantee (module
    docstring): ``BandMfPrivacy`` for the fixed-order ``one-pass`` selection (b-min-separation ``T = floor(n_min / B)``,
    ``bands <= T``) or ``min-separation`` groups, the amplified ``BandMfAmplifiedPrivacy`` (with the buffer's overflow
    charge) for ``cyclic-poisson`` groups of period ``>= bands``; anything else is refused with a ValueError."""

    noise: object
    bands: int

    def spec(self, plan) -> PrivacySpec:
        sel = plan.selection
        z = self.noise.noise_multiplier
        if isinstance(z, tuple):
            raise ValueError(f"{plan.label}: BandMF noise is added once on the aggregate; noise_multiplier={z!r} "
                             "must be one value")
        if isinstance(sel, BinnedSelectionEvent):
            return self._binned_spec(plan, sel, z)
        if sel.sampling is not Sampling.ONE_PASS or len(set(sel.batch_sizes)) != 1 or sel.batch_sizes[0] is None:
            raise ValueError(f"{plan.label}: BandMF is accounted for records in a fixed order (one-pass blocks of one "
                             f"batch size), min-separation or cyclic-Poisson groups, got sampling="
                             f"{sel.sampling.value!r}")
        min_sep = min(sel.dataset_sizes) // sel.batch_sizes[0]
        if min_sep < 1:
            raise ValueError(f"batch_size={sel.batch_sizes[0]} must be <= the smallest silo size "
                             f"{min(sel.dataset_sizes)}")
        if self.bands > min_sep:
            raise ValueError(f"bands={self.bands} must be <= the rounds between a record's participations, "
                             f"{min_sep} (= smallest silo size // batch_size: b-min-separation)")
        if z == 0:
            return NoPrivacy(f"{plan.label} adds no noise (noise multiplier 0)", plan.clip.neighboring.value,
                             sel.unit.value)
        # any g records: sensitivity <= g sqrt(k) (triangle inequality over the group's members)
        sens = plan.group_size * separated_sensitivity(plan.num_rounds, min_sep, self.bands)
        return BandMfPrivacy(z, sens, self.noise.field, plan.num_rounds, self.bands, min_sep,
                             plan.clip.neighboring.value, sel.unit.value)

    def _binned_spec(self, plan, sel: BinnedSelectionEvent, z: float) -> PrivacySpec:
        """min-separation groups: multi-epoch at ``min_sep = p``; cyclic Poisson: amplified (module docstring)."""
        period = min(sel.periods)
        if sel.sampling is BinnedSampling.BALLS_IN_BINS:
            raise ValueError(f"{plan.label}: sampling='balls-in-bins' with BandMF noise: a record's bins in two "
                             "epochs can be adjacent rounds (no separation); use 'cyclic-poisson' or 'min-separation'")
        if self.bands > period:
            raise ValueError(f"bands={self.bands} must be <= the cyclic period num_bins={period} (a record's "
                             "participations are num_bins rounds apart: b-min-separation)")
        neighboring = plan.clip.neighboring
        if neighboring is Neighboring.ADD_REMOVE and sel.size_derived:
            raise ValueError(f"{plan.label}: the number of groups (or the rate) was read from the data set's size, "
                             "which differs between add/remove neighbours; declare num_bins (and sampling_rate)")
        if z == 0:
            return NoPrivacy(f"{plan.label} adds no noise (noise multiplier 0)", neighboring.value, sel.unit.value)
        if sel.sampling is BinnedSampling.MIN_SEPARATION:
            sens = plan.group_size * separated_sensitivity(plan.num_rounds, period, self.bands)
            return BandMfPrivacy(z, sens, self.noise.field, plan.num_rounds, self.bands, period, neighboring.value,
                                 sel.unit.value, sampling=sel.sampling.value)
        if neighboring is not Neighboring.ADD_REMOVE or plan.group_size != 1:
            raise ValueError(f"{plan.label}: amplified BandMF is accounted for one record under add-remove, got "
                             f"neighboring={neighboring.value!r}, group_size={plan.group_size}")
        amplified = BandMfAmplifiedPrivacy(z, max(sel.rates), plan.num_rounds, period, self.bands, self.noise.field,
                                           neighboring.value, sel.unit.value)
        return BinnedPrivacy(amplified, sel.sampling.value, overflow_probability(plan.num_rounds, sel.tails()),
                             "cyclic Poisson: the static buffer's overflow probability is charged to delta")
