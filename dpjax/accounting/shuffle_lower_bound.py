"""LOWER bounds on the privacy of shuffled DP-SGD: Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha & Zhang, "How Private
are DP-SGD Implementations?" (ICML 2024, arXiv 2403.17673; single epoch) and "Scalable DP-SGD: Shuffling vs. Poisson
Subsampling" (NeurIPS 2024, arXiv 2411.04205; multiple epochs).

Every number here is a LOWER bound: a run of shuffled DP-SGD with these parameters is NOT (eps, delta)-DP for any eps
below it. It is never a certificate (the certificate of a shuffled run is `dpjax.accounting.shuffle_gap`'s
``certified`` entry); it says how far an optimistic (Poisson) number can be from the truth.

The construction (ABLQ_S, adaptive batch linear queries with shuffled batches, T = steps per epoch). The adversary
makes every record but the differing one contribute -s (s the per-record contribution bound) to every step's sum,
and the differing record contribute +s (data set x) or 0 (neighbour x', the record replaced by one whose clipped
gradient is 0). Shifting every step's sum by the known -s b, the epoch's T noisy sums are, per unit of s,

    P = (1/T) sum_t N(2 e_t, z^2 I_T)    vs    Q = (1/T) sum_t N(e_t, z^2 I_T),

z = noise std / s (the paper's sigma). These are the authors' "MoG(2) vs MoG(1)" pair (their public code,
google-research/dpsgd_batch_sampler_accounting, ``ShuffleAccountant(mean_upper=2, mean_lower=1)``). A lower bound on
the hockey-stick divergence of (P, Q) is one of shuffled DP-SGD itself (the pair is produced by adjacent data sets and
an admissible query sequence):

* one epoch: the "cube" sets E_C = {x : max_t x_t > C}: delta(eps) >= max_C P(E_C) - e^eps Q(E_C), with
  P(max_t x_t <= C) = Phi((C - 2)/z) Phi(C/z)^(T-1) (closed form; `single_epoch_delta`);
* E epochs, a fresh permutation each (dpjax's shuffling): the E-fold product of the single-epoch pair (same queries
  every epoch), bounded through the law of the statistic max_t x_t cut into slices (a coarsening, i.e.
  post-processing: only lowers the divergence), privacy losses rounded DOWN onto a grid and composed with
  dp_accounting's PLD in its optimistic mode (`multi_epoch_pld`); all three steps only lower delta, so the result
  stays a lower bound. A persistent permutation (``reshuffle=False``) is one epoch at z / sqrt(E).

Relations. The pair above is zero-out (replace by a null record): it is a pair of replace-one neighbours too, so it
bounds dpjax's replace-one runs (noise multiplier sigma = std / (2 s), hence z = 2 sigma). Under replace-one the
differing record may also swap +s for -s, the pair MoG(2) vs MoG(0) = N(0, z^2 I) (``pair=SWAP_PAIR``); both are
valid lower bounds and `shuffle_epsilon_lower_bound(..., pair="best-replace-one")` returns the larger.

For T = 1 the pair is the Gaussian mechanism N(2, z^2) vs N(1, z^2) and every bound here equals the deterministic
(no amplification) epsilon; for T > 1 it is at most that (tests/accounting/test_shuffle_lower_bound.py).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from dpjax import _validate as v

__all__ = ["PAPER_PAIR", "SWAP_PAIR", "PAIRS", "MAX_COMPOSED_EPOCHS", "single_epoch_delta", "single_epoch_epsilon",
           "multi_epoch_pld", "shuffle_epsilon_lower_bound", "shuffle_delta_lower_bound"]

#: (mean of P's hit coordinate, mean of Q's) in units of the contribution bound: Chua et al.'s zero-out pair.
PAPER_PAIR = (2.0, 1.0)
#: The replace-one swap pair (the differing record's +s against -s): Q has no hit at all.
SWAP_PAIR = (2.0, 0.0)
PAIRS = {"paper": PAPER_PAIR, "swap": SWAP_PAIR}
_EPS_MAX = 200.0  # epsilons searched up to here; a bound that reaches it is reported as _EPS_MAX (never inf)
_MAX_SLICES = 200_000
_MAX_GRID = 200_000
_LOSS_CAP = 500.0
#: The most reshuffled epochs whose PLD is composed (`multi_epoch_pld`: dp_accounting's self-composition grows with E;
#: 10^5 epochs took ~1 s, 10^6 ~12 s). A run of more epochs releases these epochs' outputs and more, so its privacy
#: loss is at least theirs (marginalising is post-processing): the bound of the first ``MAX_COMPOSED_EPOCHS`` epochs
#: is still a lower bound for it, and `shuffle_epsilon_lower_bound` / `shuffle_delta_lower_bound` return that one.
MAX_COMPOSED_EPOCHS = 10**5


def _pair(pair) -> tuple[float, float]:
    if isinstance(pair, str):
        v.check_choice("pair", pair, tuple(PAIRS))
        return PAIRS[pair]
    hi, lo = (float(x) for x in pair)
    if not (hi > lo >= 0):
        raise ValueError(f"pair={pair!r} must be (hi, lo) with hi > lo >= 0")
    return hi, lo


def _log_in_cube(c, mean: float, z: float, steps: int):
    """log P(max_t x_t <= c) under (1/T) sum_t N(mean e_t, z^2 I): the hit coordinate is any one of the T (by
    symmetry the mixture's probability of the cube is that of one component)."""
    c = np.asarray(c, dtype=float)
    return special.log_ndtr((c - mean) / z) + (steps - 1) * special.log_ndtr(c / z)


def _out_cube(c, mean, z, steps):
    return -np.expm1(_log_in_cube(c, mean, z, steps))


def _check(z, steps):
    return v.check_positive("noise_multiplier", z), v.check_int("steps_per_epoch", steps, min_value=1)


def single_epoch_delta(noise_multiplier: float, steps_per_epoch: int, epsilon: float, pair=PAPER_PAIR) -> float:
    """Lower bound on delta(eps) of ONE epoch of shuffled DP-SGD (Chua et al. ICML 2024, the cube sets E_C):
    max_C [P(max x > C) - e^eps Q(max x > C)], a grid over C refined by a bounded search (any C gives a valid bound,
    so the search can only under-estimate the maximum: the answer stays a lower bound)."""
    z, t = _check(noise_multiplier, steps_per_epoch)
    eps = v.check_nonnegative("epsilon", epsilon)
    hi, lo = _pair(pair)
    # C where either mixture's cube can matter: from a few z below the T-max of N(0, z^2) to far above hi
    c_lo = z * float(special.ndtri(math.exp(-40.0 / t))) - 1.0
    c_hi = hi + 40.0 * z
    grid = np.linspace(c_lo, c_hi, 4001)
    f = lambda c: _out_cube(c, hi, z, t) - math.exp(eps) * _out_cube(c, lo, z, t)  # noqa: E731
    vals = f(grid)
    i = int(np.argmax(vals))
    best = float(vals[i])
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    res = optimize.minimize_scalar(lambda c: -float(f(c)), bounds=(a, b), method="bounded",
                                   options={"xatol": 1e-12})
    return max(0.0, best, -float(res.fun))


def single_epoch_epsilon(noise_multiplier: float, steps_per_epoch: int, delta: float, pair=PAPER_PAIR) -> float:
    """The largest eps at which `single_epoch_delta` still exceeds delta (bisection; the lower end of the final
    bracket is returned, so the value never overshoots): shuffled DP-SGD is not (eps', delta)-DP for eps' below it."""
    d = v.check_open_unit("delta", delta)
    fn = lambda e: single_epoch_delta(noise_multiplier, steps_per_epoch, e, pair)  # noqa: E731
    if fn(0.0) <= d:
        return 0.0
    lo, hi = 0.0, 1.0
    while fn(hi) > d:
        lo, hi = hi, 2 * hi
        if hi > _EPS_MAX:  # delta is still above target at _EPS_MAX: that much is shown, no more
            return _EPS_MAX
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if fn(mid) > d:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * max(1.0, hi):
            break
    return lo


def multi_epoch_pld(noise_multiplier: float, steps_per_epoch: int, epochs: int, pair=PAPER_PAIR,
                    discretization: float = 1e-3, log_truncation: float = -40.0):
    """An optimistic (lower-bound) ``dp_accounting`` PLD of E reshuffled epochs (Chua et al. NeurIPS 2024).

    One epoch's pair is pushed through the statistic max_t x_t and cut into slices of width w = discretization z^2 /
    (hi - lo) (the slice's privacy loss moves by about one grid step), plus the two tails below / above caps holding
    at most e^log_truncation of P's mass each; each slice's privacy loss log P(slice) - log Q(slice) is rounded DOWN
    to the grid. Coarsening and rounding down only lower every delta(eps), so does the optimistic composition."""
    from dp_accounting import pld

    z, t = _check(noise_multiplier, steps_per_epoch)
    e = v.check_int("epochs", epochs, min_value=1, max_value=MAX_COMPOSED_EPOCHS)
    hi, lo = _pair(pair)
    disc = v.check_positive("discretization", discretization)
    log_tr = float(log_truncation) - math.log(2 * e)
    # the two lumped tails hold at most e^log_tr of P's mass each: P(max <= c) <= Phi(c/z)^T, and by the union
    # bound P(max > c) <= T Phi((hi - c)/z)
    c_min = z * float(special.ndtri(math.exp(log_tr / t)))
    c_max = hi - z * float(special.ndtri(math.exp(log_tr) / t))
    # slices: about one grid step of privacy loss each, at most _MAX_SLICES (wider slices: a coarser statistic, still
    # a lower bound)
    width = max(disc * z * z / (hi - lo), (c_max - c_min) / _MAX_SLICES)
    edges = np.arange(c_min, c_max + width, width)
    lp_hi = _log_in_cube(edges, hi, z, t)
    lp_lo = _log_in_cube(edges, lo, z, t)
    with np.errstate(divide="ignore", invalid="ignore"):
        # log(F(b) - F(a)) = log F(a) + log(expm1(log F(b) - log F(a))); the lumped tails at both ends
        log_p = np.concatenate([[lp_hi[0]], lp_hi[:-1] + np.log(np.expm1(np.diff(lp_hi))),
                                [np.log(_out_cube(edges[-1], hi, z, t))]])
        log_q = np.concatenate([[lp_lo[0]], lp_lo[:-1] + np.log(np.expm1(np.diff(lp_lo))),
                                [np.log(_out_cube(edges[-1], lo, z, t))]])
        loss = log_p - log_q
    keep = np.isfinite(log_p) & (loss > -_LOSS_CAP)  # dropping P mass only lowers delta
    # losses above the cap (or where Q underflows) are rounded DOWN to the cap, which only lowers delta
    loss = np.minimum(np.where(np.isfinite(loss), loss, _LOSS_CAP), _LOSS_CAP)[keep]
    probs = np.exp(log_p[keep])
    # a grid coarse enough that the E-fold composition's dense array stays small (rounding down on any grid)
    disc = max(disc, float(loss.max() - loss.min()) / _MAX_GRID) if loss.size else disc
    idx = np.floor(loss / disc).astype(np.int64)
    uniq, inv = np.unique(idx, return_inverse=True)
    pmf = dict(zip((int(k) for k in uniq), np.bincount(inv, weights=probs).tolist()))
    one = pld.privacy_loss_distribution.PrivacyLossDistribution(
        pld.pld_pmf.SparsePLDPmf(pmf, disc, 0.0, False))
    return one.self_compose(e) if e > 1 else one


def shuffle_delta_lower_bound(noise_multiplier: float, steps_per_epoch: int, epochs: int, epsilon: float,
                              pair=PAPER_PAIR, reshuffle: bool = True, discretization: float = 1e-3) -> float:
    """Lower bound on delta(eps) of E epochs of shuffled DP-SGD (see the module docstring)."""
    e = v.check_int("epochs", epochs, min_value=1)
    if pair == "best-replace-one":
        return max(shuffle_delta_lower_bound(noise_multiplier, steps_per_epoch, e, epsilon, p, reshuffle,
                                             discretization) for p in PAIRS)
    if e == 1 or not reshuffle:
        return single_epoch_delta(noise_multiplier / math.sqrt(e), steps_per_epoch, epsilon, pair)
    eps = v.check_nonnegative("epsilon", epsilon)
    # beyond MAX_COMPOSED_EPOCHS: the bound of the first ones (still a lower bound, see MAX_COMPOSED_EPOCHS)
    pl = multi_epoch_pld(noise_multiplier, steps_per_epoch, min(e, MAX_COMPOSED_EPOCHS), pair, discretization)
    return float(pl.get_delta_for_epsilon(eps))


def shuffle_epsilon_lower_bound(noise_multiplier: float, steps_per_epoch: int, epochs: int, delta: float,
                                pair=PAPER_PAIR, reshuffle: bool = True, discretization: float = 1e-3) -> float:
    """LOWER bound on the epsilon of E epochs of shuffled DP-SGD at ``delta``: no run with these parameters is
    (eps, delta)-DP for a smaller eps. ``noise_multiplier`` z = noise std / per-record contribution bound (the
    paper's sigma; 2 x dpjax's replace-one multiplier); ``pair``: ``"paper"`` (zero-out), ``"swap"`` or
    ``"best-replace-one"`` (the larger of the two, valid under replace-one only)."""
    d = v.check_open_unit("delta", delta)
    e = v.check_int("epochs", epochs, min_value=1)
    if pair == "best-replace-one":
        return max(shuffle_epsilon_lower_bound(noise_multiplier, steps_per_epoch, e, d, p, reshuffle, discretization)
                   for p in PAIRS)
    if e == 1 or not reshuffle:
        return single_epoch_epsilon(noise_multiplier / math.sqrt(e), steps_per_epoch, d, pair)
    # beyond MAX_COMPOSED_EPOCHS: the bound of the first ones (still a lower bound, see MAX_COMPOSED_EPOCHS)
    pl = multi_epoch_pld(noise_multiplier, steps_per_epoch, min(e, MAX_COMPOSED_EPOCHS), pair, discretization)
    return float(pl.get_epsilon_for_delta(d))
