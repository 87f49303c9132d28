"""Accounting of truncated Poisson sampling (`dpjax.primitives.sampling_truncated`; Chua, Ghazi, Kamath, Kumar,
Manurangsi, Sinha & Zhang, "Scalable DP-SGD: Shuffling vs. Poisson Subsampling", NeurIPS 2024, Section 4): the
truncation is charged to delta.

The argument (a total-variation coupling; the lemma "if M is (eps, delta)-DP and TV(M(x), M'(x)) <= eta_x for every
x then M' is (eps, delta + eta_x + e^eps eta_x')-DP"). Let M be the untruncated Poisson-subsampled Gaussian run and
M' the truncated one, driven by the same Bernoulli draws and noise: their outputs differ only on the event that some
round's Poisson batch exceeds the capacity B, so TV(M(x), M'(x)) <= eta_x := sum_rounds Pr[Bin(|x|, q) > B] (union
bound over the R rounds). For every set S and neighbours x, x':

    P'(S) <= P(S) + eta_x <= e^eps Q(S) + delta_P(eps) + eta_x <= e^eps Q'(S) + delta_P(eps) + eta_x + e^eps eta_x'.

Under add/remove the neighbour holds at most one record more, and Pr[Bin(n, q) > B] grows with n, so with n a
public upper bound on the data set's size both etas are at most eta = R Pr[Bin(n + 1, q) > B] and

    delta = delta_P(eps) + (1 + e^eps) R Pr[Bin(n + 1, q) > B]

certifies M' (delta_P: dp_accounting's PLD of the Poisson-subsampled Gaussian, add/remove). The report names both
terms; ``truncation_delta`` is the second. (The coupling needs the truncated batch to equal the Poisson batch whenever
no truncation happens, which `truncated_poisson_sample` guarantees.)

**The default Poisson selection of DP-SGD, DP-SGD-General and user-level DP-SGD** (``poisson_selection="truncated"``:
``dpjax.parts.selection.SubsetBatches``; ``dpjax.parts.user_records``' ULS over users and ELS over every user's first
k records, where a neighbour adds up to k candidates, so ``n_i + k`` trials) is this mechanism, sized so that its
charge is negligible and never refused. The others with a Poisson buffer keep the refusing one: ISRL-DP's
``SiloBatches`` (per-silo guarantees; its gather path), DP-FedAvg's cohort (``dpjax.parts.cross_device``):

* capacity. ``truncated_capacity(n, q, R)`` is the smallest B with ``R Pr[Bin(n + 1, q) > B] <= TRUNCATION_MASS``
  (1e-18, per silo and run), n the padded silo size ``n_max``. Every silo's charge is then at most
  ``(1 + e^eps) 1e-18``, which is <= 1e-3 delta for every delta >= 1e-15 (1 + e^eps): every delta >= 1e-8 at
  eps <= 16 (and >= 3e-12 at eps <= 8). Example: n = 60,000, q = 1/240, R = 480 gives B = 413 (the expected batch is
  250).
* what it cannot certify: the charge must fit in half of delta at eps(delta / 2), so a run certifies
  eps <= ln(delta / (2 eta) - 1) only, about 29 at delta = 1e-5 (eta ~ 1e-18). A weaker run (eps above that: little
  noise, or ELS with a large k) is refused with that bound named; ``"buffered"`` still reports its eps.
* large data sets only. When ``n <= 2 B`` (``full_buffer``) a buffer of all n rows costs at most twice the truncated
  one, so the buffer holds every row: exact Poisson, nothing to charge, a DpEvent as before. Above it (n > 2 B) the
  batch is truncated at B and the certificate charges the truncation (``run_truncation_mass``).
* B is computed from ``n_max``, which under add/remove differs between neighbours by one: the charge uses, for
  every neighbour that truncates, the smallest of their capacities, ``B_- = min B(n')`` over the truncating
  ``n' in {n_max - 1, n_max, n_max + 1}`` (B(n) is nondecreasing in n), and ``n_i + 1`` trials in every silo:
  ``eta = R sum_i Pr[Bin(n_i + 1, q) > B_-]`` bounds both ``eta_x`` and ``eta_x'`` above.
* the old static buffer (``poisson_selection="buffered"``: ``E + 6 sqrt(E) + 8`` rows, the run refused when a batch
  does not fit) stays available, for kept reproductions whose outputs it made. It charges nothing for the refusal,
  although a refusal is itself an outcome that depends on the data (by the same coupling its honest charge is
  ``(1 + e^eps) R Pr[Bin(n + 1, q) > E + 6 sqrt(E) + 8]``, e.g. 1.5e-7 (1 + e^eps) at n = 60,000, q = 1/240,
  R = 480: 4.5e-4 at eps = 8, far above delta = 1e-5).
"""

from __future__ import annotations

import math

from scipy import stats

import dataclasses
import functools

from dpjax import _validate as v
from dpjax.accounting.events import SubsetSelectionEvent
from dpjax.accounting.privacy_spec import NoPrivacy, PrivacySpec
from dpjax.accounting.sampling_bins import BinnedPrivacy
from dpjax.accounting.schedules import PrivacyReport

__all__ = ["TRUNCATION_MASS", "truncation_probability", "truncation_delta", "truncated_poisson_report",
           "truncated_capacity", "full_buffer", "selection_capacity", "run_truncation_mass", "truncation_mass",
           "TruncatedPoissonPrivacy", "TruncatedPoissonSelectionEvent"]

#: The per-silo, per-run truncation probability the default capacity is sized for (module docstring).
TRUNCATION_MASS = 1e-18


def truncation_probability(dataset_size: int, sampling_rate: float, capacity: int) -> float:
    """Pr[Bin(n + 1, q) > B]: one round's truncation probability on the data set or its add/remove neighbour."""
    n = v.check_int("dataset_size", dataset_size, min_value=1)
    q = v.check_probability("sampling_rate", sampling_rate, allow_zero=False)
    # a capacity above n is no sampler's (truncated_poisson_sample refuses it): most likely n and B swapped
    b = v.check_int("capacity", capacity, min_value=1, max_value=n)
    return float(stats.binom.sf(b, n + 1, q))


def truncation_delta(dataset_size: int, sampling_rate: float, capacity: int, steps: int, epsilon: float) -> float:
    """(1 + e^eps) R Pr[Bin(n + 1, q) > B]: what truncation adds to delta (module docstring)."""
    r = v.check_int("steps", steps, min_value=1)
    eps = v.check_nonnegative("epsilon", epsilon)
    return min(1.0, (1.0 + math.exp(eps)) * r * truncation_probability(dataset_size, sampling_rate, capacity))


def truncated_capacity(dataset_size: int, sampling_rate: float, steps: int, mass: float = TRUNCATION_MASS) -> int:
    """The smallest capacity B (at most n + 1) with ``R Pr[Bin(n + 1, q) > B] <= mass`` (exact binomial tail,
    bisection): the default selection's buffer (module docstring). ``dataset_size`` n: the padded silo size."""
    n = v.check_int("dataset_size", dataset_size, min_value=1)
    q = v.check_probability("sampling_rate", sampling_rate, allow_zero=False)
    r = v.check_int("steps", steps, min_value=1)
    return _capacity(n, q, r, v.check_open_unit("mass", mass))


@functools.lru_cache(maxsize=256)
def _capacity(n: int, q: float, r: int, mass: float) -> int:
    # cached: the selection part asks at every trace and the event three times per certificate
    lo, hi = 0, n + 1  # Pr[Bin(n + 1, q) > n + 1] = 0 <= mass
    while lo < hi:
        mid = (lo + hi) // 2
        if r * float(stats.binom.sf(mid, n + 1, q)) <= mass:
            hi = mid
        else:
            lo = mid + 1
    return lo


def full_buffer(dataset_size: int, sampling_rate: float, steps: int) -> bool:
    """A small data set: ``n <= 2 truncated_capacity(n, q, R)``, so the buffer holds all n rows (exact Poisson)."""
    return dataset_size <= 2 * truncated_capacity(dataset_size, sampling_rate, steps)


def selection_capacity(dataset_size: int, sampling_rate: float, steps: int) -> int:
    """The default Poisson selection's static buffer for padded silos of ``dataset_size`` rows: all of them when
    ``full_buffer``, else the truncated capacity B (whose batches are truncated at B)."""
    if full_buffer(dataset_size, sampling_rate, steps):
        return int(dataset_size)
    return truncated_capacity(dataset_size, sampling_rate, steps)


def run_truncation_mass(dataset_sizes, sampling_rate: float, steps: int) -> float:
    """eta, a bound on the probability that the run, or its run on any add/remove neighbour, truncates a batch:
    ``R sum_i Pr[Bin(n_i + 1, q) > B_-]`` (module docstring); 0 when neither truncates (a small data set)."""
    sizes = tuple(v.check_int(f"dataset_sizes[{i}]", int(n), min_value=1) for i, n in enumerate(dataset_sizes))
    if not sizes:
        raise ValueError("dataset_sizes=() must name at least one silo")
    q = v.check_probability("sampling_rate", sampling_rate, allow_zero=False)
    r = v.check_int("steps", steps, min_value=1)
    n_max = max(sizes)
    return truncation_mass([n + 1 for n in sizes], (n_max - 1, n_max, n_max + 1), q, r)


def truncation_mass(trials, buffer_rows, sampling_rate: float, steps: int) -> float:
    """``R sum_j Pr[Bin(trials_j, q) > B_-]``, ``B_- = min selection_capacity(n')`` over the ``buffer_rows`` n' (the
    padded rows of the data set and of its neighbours) whose buffer truncates; 0 when none does. ``trials``: an upper
    bound on each buffer's joined candidates on the data set or a neighbour (``run_truncation_mass``: n_i + 1)."""
    q = v.check_probability("sampling_rate", sampling_rate, allow_zero=False)
    r = v.check_int("steps", steps, min_value=1)
    truncating = [int(n) for n in buffer_rows if n >= 1 and not full_buffer(int(n), q, r)]
    if not truncating:
        return 0.0
    b = min(truncated_capacity(n, q, r) for n in truncating)
    return min(1.0, r * sum(float(stats.binom.sf(b, int(t), q)) for t in trials))


@dataclasses.dataclass(frozen=True)
class TruncatedPoissonPrivacy(BinnedPrivacy):
    """The Poisson-subsampled Gaussian bound of the untruncated run (``base``) with the truncation charged to delta:
    ``delta = delta_P(eps) + (1 + e^eps) eta`` (``overflow_probability`` is eta; module docstring). The report's
    ``sampling`` is ``"truncated-poisson"`` and its notes name the charge."""

    def _reduced_delta(self, delta: float, epsilon_bound: float) -> float:
        charge = (1.0 + math.exp(min(epsilon_bound, 700.0))) * self.overflow_probability
        if charge > delta / 2:
            eta = self.overflow_probability
            top = math.log(max(delta / (2 * eta) - 1, 1.0))
            raise ValueError(f"delta={delta!r}: truncated Poisson's truncation probability {eta:.3g} over the run "
                             f"costs {charge:.3g} of it at eps={epsilon_bound:.3g} (more than half; this buffer "
                             f"certifies eps <= {top:.3g} only); raise delta or the noise, or choose "
                             "poisson_selection='buffered'")
        return delta - charge

    def epsilon(self, delta: float, accountant: str = "rdp") -> PrivacyReport:
        report = super().epsilon(delta, accountant)
        return dataclasses.replace(report, notes=tuple(n.replace("static buffer: overflow probability",
                                                                 "truncated Poisson: truncation probability")
                                                       for n in report.notes))


@dataclasses.dataclass(frozen=True)
class TruncatedPoissonSelectionEvent(SubsetSelectionEvent):
    """DP-SGD-General's Poisson selection with the default truncated buffer (``SubsetBatches``,
    ``poisson_selection="truncated"``): the Gaussian rules' Poisson bound, and the truncation charged when the data
    set is large enough to truncate (``run_truncation_mass``; else exactly the Poisson bound)."""

    def spec(self, plan) -> PrivacySpec:
        base = plan.gaussian_spec()
        if isinstance(base, NoPrivacy) or self.sampling_rate is None:
            return base
        eta = run_truncation_mass(self.dataset_sizes, self.sampling_rate, plan.num_rounds)
        if eta == 0.0:
            return base
        n_max = max(self.dataset_sizes)
        note = (f"truncated Poisson (Chua et al., NeurIPS 2024): q = {self.sampling_rate:g}, batches cut at "
                f"B = {truncated_capacity(n_max, self.sampling_rate, plan.num_rounds)} rows, {plan.num_rounds} rounds; "
                "delta = Poisson delta + (1 + e^eps) x truncation probability")
        return TruncatedPoissonPrivacy(base, "truncated-poisson", eta, note)


def _poisson_pld(noise_multiplier: float, sampling_rate: float, steps: int):
    import dp_accounting as dpa

    acc = dpa.pld.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(sampling_rate, dpa.GaussianDpEvent(noise_multiplier)),
                                        steps))
    return acc


def truncated_poisson_report(noise_multiplier: float, sampling_rate: float, dataset_size: int, capacity: int,
                             steps: int, delta: float) -> PrivacyReport:
    """The certified (eps, delta) of R rounds of truncated Poisson sampling: the smallest eps the PLD finds with
    delta_P(eps) + (1 + e^eps) R Pr[Bin(n + 1, q) > B] <= delta (fixed point from the untruncated eps; each step
    only raises eps, and the final eps is re-checked). ``dataset_size``: a public upper bound on n."""
    z = v.check_positive("noise_multiplier", noise_multiplier)
    q = v.check_probability("sampling_rate", sampling_rate, allow_zero=False)
    r = v.check_int("steps", steps, min_value=1)
    d = v.check_open_unit("delta", delta)
    eta = r * truncation_probability(dataset_size, q, capacity)  # validates n and the capacity before the PLD
    acc = _poisson_pld(z, q, r)
    if 2 * eta >= d:
        raise ValueError(f"capacity={capacity}: the truncation probability summed over {r} rounds ({eta:.3g}) leaves "
                         f"no room in delta={delta!r}; raise the capacity")
    eps = acc.get_epsilon(d - 2 * eta)
    for _ in range(100):
        trunc = (1.0 + math.exp(eps)) * eta
        if trunc >= d:
            raise ValueError(f"capacity={capacity}: the truncation term {trunc:.3g} at eps={eps:.4g} exceeds "
                             f"delta={delta!r}; raise the capacity")
        new = acc.get_epsilon(d - trunc)
        if new <= eps:
            break
        eps = new
    trunc = (1.0 + math.exp(eps)) * eta
    poisson_delta = acc.get_delta(eps)
    if poisson_delta + trunc > d * (1 + 1e-9):  # pragma: no cover - the fixed point above guarantees it
        raise ValueError(f"epsilon={eps!r} does not meet delta={delta!r}")
    notes = (f"truncated Poisson: q = {q:g}, capacity B = {capacity}, {r} rounds, n <= {dataset_size}",
             f"delta = poisson {poisson_delta:.3e} + truncation {trunc:.3e} "
             f"((1 + e^eps) R Pr[Bin(n+1, q) > B], R Pr = {eta:.3e})")
    return PrivacyReport(eps, d, "pld+truncation", "truncated-poisson", "add-remove", "record", z, notes)
