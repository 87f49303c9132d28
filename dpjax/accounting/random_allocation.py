"""Certified accountant for balls-in-bins / random-allocation batch selection (a dominating PLD, not an estimate).

Balls-in-bins (Chua, Ghazi, Harrison, Leeman, Kamath, Kumar, Manurangsi, Sinha & Zhang, "Balls-and-Bins Sampling for
DP-SGD", AISTATS 2025) puts every record in exactly one of the B batches of an epoch, each epoch afresh: one epoch is
the random 1-out-of-B allocation of Feldman & Shenfeld ("Privacy amplification by random allocation", 2025,
arXiv:2502.08202). For the adaptive Gaussian composition with one-record sensitivity 1 and noise multiplier z, its
add/remove dominating pair is one epoch of

    P = (1/B) sum_{i<B} N(e_i, z^2 I_B)    vs    Q = N(0, z^2 I_B)

(both directions), and E epochs with fresh allocations are its E-fold composition. The PLD of this pair is computed
by the random-allocation accountant of Feldman & Shenfeld, "Efficient privacy loss accounting for subsampling and
random allocation" (2026, arXiv:2602.17284, Algorithms 1-5 of their Appendix C), in the exp-space geometric-grid form
of dp_accounting's random_allocation package -- merged on GitHub (google/differential-privacy pull request #414) but
not in the dp_accounting 0.6 release, so ported verbatim (import paths only) into ``dpjax.accounting.ra_upstream``
with its Apache-2.0 header and the commit it was taken from. Its DOMINATES rounding makes the PLD a pessimistic
discretisation: ``epsilon`` is a certificate for every ``discretization`` (coarser = looser, never invalid).

What is certified here, and what is not:

* add/remove neighbours, group size 1 (the upstream accountant's relation). Replace-one and group privacy keep
  ``dpjax.accounting.sampling_bins``' no-amplification bound (ceil(T/B) Gaussians).
* T rounds with B bins are ``ceil(T / B)`` full epochs: a final partial epoch releases a prefix of a full epoch's B
  outputs, which is post-processing of the full epoch, so counting it whole is an upper bound.
* The reported epsilon is the smaller of this PLD and the no-amplification composition (both certified), under the
  accountants ``pld`` and ``best`` (``CERTIFYING_ACCOUNTANTS``); ``rdp`` and ``gdp`` report the composition.

The ordering the theory gives, and the tests check: for the same z, B and E,

    eps_Poisson-marginal(q=1/B, E steps)  <=  eps_RA(B, E)  <=  eps_Gaussian(z, E compositions),

the left because an adversary that reads only the first output of each epoch sees exactly one Poisson-subsampled
Gaussian at rate 1/B per epoch (post-processing), the right by joint convexity (each mixture component is one
Gaussian). The certificate (DOMINATES) is >= the exact value >= the IS_DOMINATED lower PLD, and Chua et al.'s Monte
Carlo estimate (``dpjax.accounting.balls_in_bins_mc``) estimates the exact value, so it may fall either side of the
certificate only by its sampling error. Feldman & Shenfeld (2025) also show eps_RA(B) <= eps_Poisson(q = (1 + o(1))/B,
B steps) -- an asymptotic statement, reported, not used.

Pure Python (numpy, scipy, dp_accounting): never imports jax.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from dpjax import _validate as v
from dpjax.accounting.privacy_spec import GaussianPrivacy, PrivacySpec
from dpjax.accounting.schedules import Neighboring, PrivacyReport

#: The default loss grid of the certificate: ~5 s for B = 100 on one loaded core (the geometric convolution is
#: O(n^2) in the grid size n ~ loss range / discretization), about 1-3 % above the exact epsilon.
DEFAULT_DISCRETIZATION = 2e-3
#: The grid of calibration's first (coarse) search, refined at the certificate's own grid.
COARSE_DISCRETIZATION = 1e-2
#: The finest grid accepted: below it one PLD takes minutes (measured: 1e-4 at B = 100 is ~160 s).
MIN_DISCRETIZATION = 1e-4
#: Tail mass the upstream accountant drops into the infinite-loss atom (charged to delta, so still certified).
TAIL_TRUNCATION = 1e-12
#: The most bins one PLD is built for (the geometric self-convolution is binary: log2(B) stages).
MAX_BINS = 10**6
#: The most epochs one certificate composes (0.5 s at 1e5; at 1e10 the composition took > 2 GB and minutes, where
#: issue #39 bounds every answer to 10 s). Beyond it the no-amplification bound is reported, with a note: by then the
#: pessimistic grid's per-epoch error has made the PLD looser than that bound anyway (z = 10, B = 100: 1019 vs ~650
#: at 1e5 epochs).
MAX_EPOCHS = 10**5

ACCOUNTANT = "random-allocation-pld"
#: The accountants that claim the random-allocation PLD: it is a PLD, so the tight ones ("pld", and "best", which
#: takes the smallest certified value). "rdp" and "gdp" keep the no-amplification composition (no RDP or GDP curve
#: of the allocation is ported), with a note; so does every calibration under them.
CERTIFYING_ACCOUNTANTS = ("pld", "best")
_UNCLAIMED = ("balls-in-bins: accountant={!r} certifies without amplification; accountant 'pld' or 'best' reports "
              "the certified random-allocation PLD")
NOTE = ("balls-in-bins: CERTIFIED random-allocation PLD (Feldman & Shenfeld 2026, dp_accounting PR #414 ported), "
        "add/remove, ceil(T/B) epochs of fresh 1-of-B allocations")


def _check(noise_multiplier, num_bins, num_epochs, discretization):
    z = v.check_positive("noise_multiplier", noise_multiplier)
    b = v.check_int("num_bins", num_bins, min_value=1, max_value=MAX_BINS)
    e = v.check_int("num_epochs", num_epochs, min_value=1)
    h = v.check_positive("discretization", discretization)
    if h < MIN_DISCRETIZATION:
        raise ValueError(f"discretization={discretization!r} must be >= {MIN_DISCRETIZATION} (one PLD would take "
                         "minutes: the geometric convolution is quadratic in the grid size)")
    return float(z), b, e, float(h)


@functools.lru_cache(maxsize=64)
def _pld(z: float, b: int, e: int, h: float, upper: bool):
    from dpjax.accounting import ra_upstream as ra

    bound = ra.BoundType.DOMINATES if upper else ra.BoundType.IS_DOMINATED
    params = ra.PrivacyParams(sigma=z, num_steps=b, num_selected=1, num_epochs=e)
    config = ra.AllocationSchemeConfig(value_discretization_interval=h, tail_truncation=TAIL_TRUNCATION)
    return ra.gaussian_allocation_pld(params, config, bound_type=bound)


def allocation_pld(noise_multiplier: float, num_bins: int, num_epochs: int = 1, *,
                   discretization: float = DEFAULT_DISCRETIZATION, upper: bool = True):
    """The dp_accounting ``PrivacyLossDistribution`` (both add/remove directions) of ``num_epochs`` fresh 1-of-B
    random allocations of the Gaussian mechanism with noise multiplier z (sensitivity 1).

    Args:
      noise_multiplier: z (> 0).
      num_bins: B, the steps of one epoch (1 = no amplification: one Gaussian).
      num_epochs: E, the epochs composed.
      discretization: the loss grid (``DEFAULT_DISCRETIZATION``); coarser is faster and looser.
      upper: True: the dominating PLD (a certificate); False: the dominated one (a lower bound, for checks).
    """
    return _pld(*_check(noise_multiplier, num_bins, num_epochs, discretization), bool(upper))


def allocation_epsilon(noise_multiplier: float, num_bins: int, num_epochs: int, delta: float, *,
                       discretization: float = DEFAULT_DISCRETIZATION, upper: bool = True) -> float:
    """Certified epsilon at ``delta`` of E epochs of 1-of-B allocation (``allocation_pld``; ``upper=False``: the
    lower bound)."""
    delta = v.check_open_unit("delta", delta)
    pld = allocation_pld(noise_multiplier, num_bins, num_epochs, discretization=discretization, upper=upper)
    return float(pld.get_epsilon_for_delta(delta))


def poisson_marginal_epsilon(noise_multiplier: float, num_bins: int, num_epochs: int, delta: float) -> float:
    """A LOWER bound on the exact random-allocation epsilon: the first output of each epoch alone is one Poisson
    subsampled Gaussian at rate 1/B (post-processing can only lower epsilon), composed over the E epochs. Computed by
    dp_accounting's PLD with optimistic rounding (``pessimistic_estimate=False``), so it is a lower bound on that
    composition too."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    z, b, e, _ = _check(noise_multiplier, num_bins, num_epochs, DEFAULT_DISCRETIZATION)
    delta = v.check_open_unit("delta", delta)
    pld = pld_lib.from_gaussian_mechanism(z, sampling_prob=1.0 / b, value_discretization_interval=1e-4,
                                          pessimistic_estimate=False, use_connect_dots=False)
    return float(pld.self_compose(e).get_epsilon_for_delta(delta))


@dataclasses.dataclass(frozen=True)
class AllocationPrivacy(PrivacySpec):
    """Balls-in-bins' certified bound: the random-allocation PLD, capped by the no-amplification composition.

    Attributes:
      base: the no-amplification bound (``GaussianPrivacy`` of each noise event's ceil(T/B) Gaussians; add/remove,
        sensitivity 1, group size 1: ``noise_std`` is the noise multiplier).
      num_bins: B, the bins of one epoch.
      discretization: the certificate's loss grid.
    """

    base: GaussianPrivacy
    num_bins: int
    discretization: float = DEFAULT_DISCRETIZATION

    def __post_init__(self):
        if self.base.neighboring != Neighboring.ADD_REMOVE.value:
            raise ValueError(f"neighboring={self.base.neighboring!r}: the random-allocation accountant is stated for "
                             "add/remove neighbours")
        for s in self.base.schedules:
            if s.group_size != 1 or s.contribution_bound != 1.0:
                raise ValueError("AllocationPrivacy: group size and contribution bound must be 1 (the accountant's "
                                 "one-record sensitivity)")
        _check(1.0, self.num_bins, 1, self.discretization)

    @property
    def neighboring(self) -> str:
        return self.base.neighboring

    @property
    def unit(self) -> str:
        return self.base.unit

    @property
    def dp_neighboring_relation(self):
        return self.base.dp_neighboring_relation

    def dp_event(self):
        """The no-amplification composition's event (still a valid, looser, bound): dp_accounting 0.6 has no
        random-allocation event."""
        return self.base.dp_event()

    def _allocation_epsilon(self, delta: float, scale: float = 1.0, discretization: float | None = None) -> float:
        """The certificate's epsilon with every noise multiplied by ``scale`` (inf where it claims nothing)."""
        h = self.discretization if discretization is None else discretization
        schedules = self.base.schedules
        if len({s.steps for s in schedules}) != 1 or not all(s.noise_std * scale > 0 for s in schedules):
            return math.inf
        if schedules[0].steps > MAX_EPOCHS:  # bounded work: the no-amplification bound is reported instead
            return math.inf
        # several noise events release the same batch each round: the record's bin is shared, so they are one
        # allocation of the Gaussian whose 1/z^2 is the sum of theirs (not independent allocations composed)
        z = sum((s.noise_std * scale) ** -2 for s in schedules) ** -0.5
        pld = allocation_pld(z, self.num_bins, schedules[0].steps, discretization=h)
        return float(pld.get_epsilon_for_delta(delta))

    def epsilon(self, delta: float, accountant: str = "rdp") -> PrivacyReport:
        delta = v.check_open_unit("delta", delta)
        plain = self.base.epsilon(delta, accountant)
        if accountant not in CERTIFYING_ACCOUNTANTS:
            return dataclasses.replace(plain, notes=plain.notes + (_UNCLAIMED.format(accountant),))
        if self.base.schedules[0].steps > MAX_EPOCHS:
            return dataclasses.replace(plain, notes=plain.notes + (
                f"balls-in-bins: {self.base.schedules[0].steps} epochs > MAX_EPOCHS={MAX_EPOCHS}: the random-allocation "
                "PLD is not built (bounded work); the no-amplification bound is reported",))
        eps = self._allocation_epsilon(delta)
        if eps >= plain.epsilon:  # no amplification left to claim: the composition is the tighter certificate
            return dataclasses.replace(plain, notes=plain.notes + (
                f"random-allocation PLD {eps:.6g} >= the no-amplification bound; the latter is reported",))
        return dataclasses.replace(plain, epsilon=eps, accountant=ACCOUNTANT, notes=plain.notes + (
            NOTE + f" (B = {self.num_bins}, grid {self.discretization:g}); no-amplification bound "
            f"{plain.epsilon:.6g} ({plain.accountant})",))

    def calibrate(self, target_epsilon: float, delta: float, accountant: str = "rdp") -> dict[str, Any]:
        """The noise meeting ``target_epsilon`` under the certificate: one common factor on every noise event's
        multiplier (a single event: the multiplier itself), searched on the coarse grid first, then refined on the
        certificate's grid to relative width 1e-3; the returned noise's certificate was evaluated <= target."""
        from dpjax.accounting import calibration

        target = v.check_positive("target_epsilon", target_epsilon)
        delta = v.check_open_unit("delta", delta)
        plain = self.base.calibrate(target, delta, accountant)
        if accountant not in CERTIFYING_ACCOUNTANTS or self.base.schedules[0].steps > MAX_EPOCHS:
            return plain
        # the no-amplification noise meets the target and the certificate is <= that bound, so the answer is a
        # factor <= 1 of it (its ratios between noise events kept)
        units = dataclasses.replace(self, base=dataclasses.replace(self.base, schedules=tuple(
            s.replace(noise_std=float(plain[f]) * (s.sensitivity if self.base.multipliers else 1.0))
            for f, s in zip(self.base.noise_fields, self.base.schedules))))
        h = self.discretization
        coarse = max(h, COARSE_DISCRETIZATION)

        # at a factor >= 1 the no-amplification bound (reported when smaller) meets the target: both curves are capped
        # there, so no search grows the noise past it (a coarse grid too pessimistic for a small target had grown it
        # to z ~ 1e18, where the upstream grid breaks)
        def fine(f):
            eps = units._allocation_epsilon(delta, f, h)
            return eps if f < 1 else min(eps, target)

        def rough(f):
            eps = units._allocation_epsilon(delta, f, coarse)
            return eps if f < 1 else min(eps, target)

        # the coarse grid's pessimism is nearly a constant excess in epsilon near the root (1e-2 vs 2e-3: the coarse
        # root 10 % above the fine one, which took the fine bracket 10 growing steps to cross); the coarse curve
        # lowered by the excess measured at its own root points the fine search close to the fine root. Only the
        # fine curve decides: the returned factor is one where the certificate itself was evaluated <= target.
        at = calibration.smallest_scale(rough, target, start=1.0, rtol=1e-3, min_scale=1e-6, what="noise scale factor")
        excess = rough(at) - fine(at)
        shifted = rough if not math.isfinite(excess) or excess <= 0 else (lambda f: rough(f) - excess)
        factor = calibration.smallest_scale(fine, target, start=at, rtol=1e-3, min_scale=1e-6,
                                            what="noise scale factor", coarse_epsilon_at=shifted)
        factor = min(factor, 1.0)
        return {f: float(plain[f]) * factor for f in self.base.noise_fields}
