"""Measuring a family's privacy-relevant quantities from its real step, and the tolerances.

Every measurement runs the family through ``dpjax.auditing.execute.run_family``
(the engine's executor, one key per run) on ``CanaryProbe`` data: the loss
``<w, x>`` whose per-record gradient is the record itself, so the round's
released message is (up to a public affine map per round) a clipped sum of
records plus the family's noise. Two measurements cover a Gaussian release:

* ``noise``: all records zero, noise on -- the released increments are pure
  noise; their second moment is compared with the certified std;
* ``shift``: noise off, a canary record ``+big e_1`` (D') against ``-big e_1``
  (D), same keys -- the increments differ exactly by the canary's clipped
  contribution in the rounds that sampled it, so the size of the difference is
  the sensitivity and its frequency the sampling rate.

Tolerances are the exact laws at a false-alarm probability ``ALPHA`` per
check: the chi-square law of a sum of squared normals (noise), the binomial
law of a count (rates), float32 rounding (shifts, relative 1e-4).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from dpjax.auditing.execute import CanaryProbe, run_family
from dpjax.engine.silos import SiloData

ALPHA = 1e-6  # false-alarm probability of one statistical check
BIG = 100.0  # canary scale: far outside every clip region used here
RTOL = 1e-4  # float32 rounding of a measured shift


def keys(n: int, seed: int = 0):
    return jax.random.split(jax.random.key(seed), n)


def silos(sizes, dim: int, canary: float = 0.0, silo: int = 0, row: int = 0, fill: float = 0.0,
          label: float = 0.0, n_max: int | None = None) -> SiloData:
    """``len(sizes)`` silos of ``dim``-dimensional records (padded to the largest size, or to ``n_max``
    rows), every record ``fill e_1`` with label ``label`` except record ``row`` of silo ``silo``, which
    is ``canary e_1`` (label ``label`` too). Neighbours padded to one ``n_max`` share one compiled
    program (the sizes are data, the shapes static)."""
    xs = [np.full((n, dim), 0.0, np.float32) for n in sizes]
    for x in xs:
        x[:, 0] = fill
    xs[silo][row, 0] = canary
    data = SiloData.from_silos(xs, [np.full(n, label, np.float32) for n in sizes])
    if n_max is None or n_max == data.n_max:
        return data
    if n_max < data.n_max:
        raise ValueError(f"n_max={n_max} is below the largest silo ({data.n_max} records)")
    pad = lambda a: jnp.asarray(np.pad(np.asarray(a), [(0, 0), (0, n_max - data.n_max)] + [(0, 0)] * (a.ndim - 2)))  # noqa: E731
    return SiloData(pad(data.x), pad(data.y), pad(data.mask), data.sizes)  # padded rows: zeros, masked out


def trajectory(family, data, hparams, run_keys, dim: int, start=None, metrics: bool = False):
    """``[runs, rounds + 1, dim]``: the start point then the output parameters after every round
    (and, with ``metrics``, the family's round metrics ``[runs, rounds, ...]``)."""
    params = jnp.zeros((dim,), jnp.float32) if start is None else jnp.asarray(start, jnp.float32)
    result = run_family(family, data, hparams, run_keys, params=params)
    out = np.asarray(result.eval_metrics["params"], np.float64)
    first = np.broadcast_to(np.asarray(params, np.float64), (out.shape[0], 1, out.shape[-1]))
    traj = np.concatenate([first, out], axis=1)
    return (traj, result.round_metrics) if metrics else traj


def increments(traj: np.ndarray) -> np.ndarray:
    """``w_r - w_{r-1}`` for every round ``[runs, rounds, dim]``."""
    return np.diff(traj, axis=1)


def check_std(samples, expected: float, what: str) -> float:
    """``samples`` are i.i.d. N(0, expected^2) (mean 0 known): their mean square over
    ``expected^2`` lies in the two-sided chi-square interval of probability 1 - ALPHA."""
    x = np.asarray(samples, np.float64).ravel()
    m = x.size
    ratio = float(np.mean(x * x)) / expected**2
    lo, hi = stats.chi2.ppf(ALPHA / 2, m) / m, stats.chi2.isf(ALPHA / 2, m) / m
    measured = expected * math.sqrt(ratio)
    assert lo <= ratio <= hi, (f"{what}: measured std {measured:.5g} vs certified {expected:.5g} "
                               f"(ratio^2 {ratio:.4f} outside the chi-square interval [{lo:.4f}, {hi:.4f}], m={m})")
    return measured


def check_fresh_noise(noise: np.ndarray, what: str) -> None:
    """Noise increments ``[runs, rounds, dim]`` are independent across rounds and coordinates (a
    reused key would repeat a draw): every pair's sample correlation r satisfies
    |r| sqrt(runs) <= z at level ALPHA / pairs (r is ~N(0, 1/runs) for independent normals)."""
    flat = np.asarray(noise, np.float64).reshape(noise.shape[0], -1)
    corr = np.corrcoef(flat, rowvar=False)
    pairs = corr[np.triu_indices(flat.shape[1], 1)]
    z = stats.norm.isf(ALPHA / (2 * max(len(pairs), 1)))
    assert np.all(np.abs(pairs) * math.sqrt(flat.shape[0]) <= z), \
        f"{what}: noise correlated across rounds/coordinates (max |r| = {np.abs(pairs).max():.3f})"


def check_rate(hits: int, trials: int, q: float, what: str, alpha: float = ALPHA) -> None:
    """``hits ~ Bin(trials, q)``: exact two-sided binomial test at level ``alpha``."""
    p = stats.binomtest(int(hits), int(trials), float(q)).pvalue
    assert p > alpha, f"{what}: {hits}/{trials} = {hits / trials:.4f} vs certified rate {q:.4f} (p = {p:.2g})"


def check_shift_values(shift: np.ndarray, unit: float, what: str, max_multiple: int = 1) -> np.ndarray:
    """Every measured shift is ``k * unit`` for an integer ``0 <= k <= max_multiple`` (float32
    rounding); returns the multiples ``k``."""
    k = np.rint(np.abs(shift) / unit)
    bad = np.abs(np.abs(shift) - k * unit) > RTOL * max(unit, 1e-12) * max(1, max_multiple) + 1e-6
    assert not bad.any(), (f"{what}: a shift of {np.abs(shift)[bad][0]:.6g} is not a multiple of the certified "
                           f"sensitivity {unit:.6g}")
    assert k.max() <= max_multiple, f"{what}: shift {k.max()} x the certified sensitivity {unit:.6g}"
    return k.astype(int)


def probe(dim: int) -> CanaryProbe:
    return CanaryProbe(dim)
