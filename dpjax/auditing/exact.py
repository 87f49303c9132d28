"""Exact privacy curves where the output distributions are computable.

* ``hockey_stick``: ``delta(eps) = max(sum (P - e^eps Q)_+, sum (Q - e^eps P)_+)`` for two pmfs on a common support (the
  tight delta of the pair, both orders).
* ``exact_epsilon``: the smallest eps with ``hockey_stick <= delta`` (bisection).
* ``shifted_binomial_pmfs``: the P_1D count of ones on neighbouring inputs (Cheu et al. 2022, Algorithm 1) when every
  other user's rounding is deterministic: ``Bin(trials, p)`` vs ``shift + Bin(trials, p)``.
* ``mixture_pair_epsilon``: ``rounds`` independent releases, each a unit-variance Gaussian mixture on D and another on
  D' (a canary included with some probability, some number of times): the privacy-loss distribution of one release on a
  fine grid, composed by FFT.
* ``one_of_two_epsilon``: two releases, the canary's shift in exactly one of them chosen uniformly (one shuffled epoch
  of two batches; a one-pass run of two blocks).

Pure NumPy/SciPy.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from dpjax import _validate as v

__all__ = ["hockey_stick", "exact_epsilon", "shifted_binomial_pmfs", "mixture_pair_epsilon", "one_of_two_epsilon"]


def hockey_stick(p, q, epsilon: float) -> float:
    """Tight delta(epsilon) of the pair of pmfs ``p``, ``q`` (symmetrised)."""
    p = np.asarray(p, np.float64)
    q = np.asarray(q, np.float64)
    if p.shape != q.shape:
        raise ValueError(f"p has shape {p.shape} but q has shape {q.shape}; they must match")
    e = math.exp(v.check_nonnegative("epsilon", epsilon))
    return float(max(np.sum(np.clip(p - e * q, 0, None)), np.sum(np.clip(q - e * p, 0, None))))


def exact_epsilon(p, q, delta: float, eps_max: float = 60.0, tol: float = 1e-9) -> float:
    """Smallest epsilon with ``hockey_stick(p, q, epsilon) <= delta`` (upper end of a bisection bracket)."""
    delta = v.check_open_unit("delta", delta)
    if hockey_stick(p, q, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, eps_max
    if hockey_stick(p, q, hi) > delta:
        return math.inf
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if hockey_stick(p, q, mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def shifted_binomial_pmfs(trials: int, probability: float, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """pmfs of ``Bin(trials, p)`` and ``shift + Bin(trials, p)`` on a common support.

    The support is ``0..trials+shift`` cut to the mean +- 40 standard deviations (+ shift): outside it both pmfs are
    below 1e-300, i.e. zero in float64.
    """
    trials = v.check_int("trials", trials, min_value=0)
    shift = v.check_int("shift", shift, min_value=0)
    p = v.check_probability("probability", probability)
    mean, sd = trials * p, math.sqrt(trials * p * (1 - p))
    lo = max(0, math.floor(mean - 40 * sd - 1))
    hi = min(trials + shift, math.ceil(mean + 40 * sd + 1) + shift)
    k = np.arange(lo, hi + 1)
    return stats.binom.pmf(k, trials, p), stats.binom.pmf(k - shift, trials, p)


def _epsilon_of(delta_fn, delta: float, eps_max: float = 60.0, tol: float = 1e-7) -> float:
    """Smallest eps with ``delta_fn(eps) <= delta`` (non-increasing ``delta_fn``; bisection)."""
    if delta_fn(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, eps_max
    if delta_fn(hi) > delta:
        return math.inf
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if delta_fn(mid) > delta else (lo, mid)
    return hi


def _mixture_cells(components, edges):
    mass = np.zeros(len(edges) - 1)
    for w, mean in components:
        mass += w * np.diff(stats.norm.cdf(edges - mean))
    return mass


def mixture_pair_epsilon(components_d, components_d_prime, rounds: int, delta: float,
                         cell: float = 1e-3, loss_bin: float = 2e-4) -> float:
    """Exact epsilon at ``delta`` of ``rounds`` independent releases, each ``sum_j w_j N(mean_j, 1)`` on D
    (``components_d``: pairs ``(w_j, mean_j)``) and likewise on D'.

    One release's output is cut into cells of width ``cell`` (a post-processing: its delta is at most the continuous
    one, by less than the loss's variation over a cell, ~``cell * max|mean|``), its privacy loss rounded *up* to a
    multiple of ``loss_bin`` (which can only raise delta), the loss distribution composed ``rounds`` times by FFT; cells
    where one law vanishes carry infinite loss and count in full. Both directions (D vs D', D' vs D); returns the larger
    epsilon.
    """
    rounds = v.check_int("rounds", rounds, min_value=1)
    delta = v.check_open_unit("delta", delta)
    means = [m for _, m in list(components_d) + list(components_d_prime)]
    edges = np.arange(min(means) - 14.0, max(means) + 14.0 + cell, cell)
    p = _mixture_cells(components_d, edges)
    q = _mixture_cells(components_d_prime, edges)

    def direction(a, b):  # delta(eps) of a against b: E_a[(1 - e^{eps - L})_+], L = log(a / b)
        both = (a > 0) & (b > 0)
        inf_mass = float(a[(a > 0) & (b <= 0)].sum())
        loss = np.ceil(np.log(a[both] / b[both]) / loss_bin).astype(np.int64)
        lo = int(loss.min())
        pmf = np.bincount(loss - lo, weights=a[both])
        size = rounds * (len(pmf) - 1) + 1
        n_fft = 1 << (size - 1).bit_length()
        composed = np.fft.irfft(np.fft.rfft(pmf, n_fft) ** rounds, n_fft)[:size]
        composed = np.clip(composed, 0.0, None)
        values = (rounds * lo + np.arange(size)) * loss_bin
        # the FFT composes the sub-probability of finite loss: its mass is (1 - inf_mass)^rounds;
        # every run with an infinite-loss round counts in full
        infinite = 1.0 - (1.0 - inf_mass) ** rounds
        # delta(eps) = sum_{values > eps} composed (1 - e^{eps - values}) = S0 - e^eps S1 with suffix sums S0 of
        # composed and S1 of composed e^{-values} above eps: O(log size) per bisection step instead of an exp over the
        # whole grid (95 % of an audit's exact eps, issue #39). Summed from the top, so the large e^{-values} of the
        # negative losses below eps never enter.
        tail = np.cumsum(composed[::-1])[::-1]
        tail_scaled = np.cumsum((composed * np.exp(-values))[::-1])[::-1]

        def delta_fn(eps):
            i = int(np.searchsorted(values, eps, side="right"))
            finite = max(0.0, float(tail[i] - math.exp(eps) * tail_scaled[i])) if i < size else 0.0
            return min(1.0, finite + infinite)

        return _epsilon_of(delta_fn, delta)

    return max(direction(q, p), direction(p, q))


def one_of_two_epsilon(shift: float, delta: float, cell: float = 0.02) -> float:
    """Exact epsilon at ``delta`` of two unit-variance Gaussian releases where the canary shifts exactly one of them
    (chosen uniformly) by ``-shift`` on D and ``+shift`` on D': ``P = (N(-s e1) + N(-s e2)) / 2`` against ``Q = (N(s
    e1) + N(s e2)) / 2``, by integration on a grid of ``cell``-sized squares (density at the centre times the area)."""
    s = v.check_nonnegative("shift", shift)
    delta = v.check_open_unit("delta", delta)
    grid = np.arange(-s - 9.0, s + 9.0, cell) + cell / 2
    z1, z2 = np.meshgrid(grid, grid, indexing="ij")
    phi = lambda a: np.exp(-0.5 * a * a)  # noqa: E731  (the normalising constant cancels below)
    p = 0.5 * (phi(z1 + s) * phi(z2) + phi(z1) * phi(z2 + s))
    q = 0.5 * (phi(z1 - s) * phi(z2) + phi(z1) * phi(z2 - s))
    p, q = (p / p.sum()).ravel(), (q / q.sum()).ravel()
    # by symmetry (swap e1 <-> e2 and z -> -z) both directions have the same curve: delta(eps) =
    # sum over cells with L = log(q/p) > eps of (q - e^eps p), from suffix sums of the cells sorted by L
    keep = (p > 0) & (q > 0)
    loss = np.log(q[keep] / p[keep])
    order = np.argsort(loss)
    loss, qs, ps = loss[order], np.cumsum(q[keep][order][::-1])[::-1], np.cumsum(p[keep][order][::-1])[::-1]
    tail = float(q[(q > 0) & (p <= 0)].sum())

    def delta_fn(eps):
        i = int(np.searchsorted(loss, eps, side="right"))
        return tail + (float(qs[i] - math.exp(eps) * ps[i]) if i < len(loss) else 0.0)

    return _epsilon_of(delta_fn, delta)
