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

Not the default Poisson selection: every existing Poisson certificate would gain the truncation term (its epsilon at
the same delta would move), so it is an opt-in scheme, ``"truncated-poisson"``.
"""

from __future__ import annotations

import math

from scipy import stats

from dpjax import _validate as v
from dpjax.accounting.schedules import PrivacyReport

__all__ = ["truncation_probability", "truncation_delta", "truncated_poisson_report"]


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
