"""Exact checks of the paper's probabilistic statements (no sampling).

* ``output_law`` / ``hockey_stick``: the exact output distribution of Algorithm 1 on a dataset (a point mass on
  bottom plus a TDLap-weighted Gaussian mixture, from its stable table) and the hockey-stick divergence
  H_{e^eps}(P || Q) between two such laws for scalar f, integrated on a fine grid (demonstration
  D9). Theorem 3.3's proof bounds it by p(0) + p(2 kappa) + e^{eps'} delta_G.
* ``lemma38_pm_tail``: the exact tail of Lemma 3.8 for the +-G e_1 family, where ||sum_{j<=m} v_pi(j)|| =
  G |2K - m| with K hypergeometric (N, N/2, m).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special, stats

from dpjax import _validate as v
from dpjax.user_level.mechanisms import StableTable
from dpjax.user_level.tdlap import sampler_pmf


def output_law(table: StableTable, eps_prime: float, kappa: int) -> tuple[float, np.ndarray, np.ndarray]:
    """``(p_bottom, weights [k], centres [k])``: Algorithm 1's output law (Gaussian components of std sigma)."""
    pmf = sampler_pmf(eps_prime, kappa)
    p_bot = float(pmf[table.bottom].sum())
    keep = ~table.bottom
    return p_bot, pmf[keep], table.centres[keep, 0]


def hockey_stick(law_p, law_q, sigma: float, alpha: float, points_per_sigma: int = 400) -> float:
    """H_alpha(P || Q) = max(0, p_bot - alpha q_bot) + int max(0, p(y) - alpha q(y)) dy (1-D laws; trapezoid rule
    on a grid of spacing sigma/points_per_sigma covering every component's +-12 sigma)."""
    sigma = v.check_positive("sigma", sigma)
    (pb, pw, pc), (qb, qw, qc) = law_p, law_q
    centres = np.concatenate([pc, qc, [0.0]])
    grid = np.arange(centres.min() - 12 * sigma, centres.max() + 12 * sigma, sigma / points_per_sigma)

    def density(w, c):
        if len(w) == 0:
            return np.zeros_like(grid)
        return (w[None, :] * stats.norm.pdf(grid[:, None], loc=c[None, :], scale=sigma)).sum(axis=1)

    gap = np.maximum(0.0, density(pw, pc) - alpha * density(qw, qc))
    return max(0.0, pb - alpha * qb) + float(np.trapezoid(gap, grid))


def lemma38_pm_tail(size: int, m: int, fail_prob: float) -> float:
    """Pr[ |2K - m| > 5 sqrt(m ln(1/beta)) ], K ~ Hypergeometric(N = size, N/2 successes, m draws): the exact
    tail of Lemma 3.8 (in units of G) for the +-G e_1 family (demonstration D1)."""
    size = v.check_int("size", size, min_value=2)
    m = v.check_int("m", m, min_value=1, max_value=size)
    beta = v.check_open_unit("fail_prob", fail_prob)
    thr = 5 * math.sqrt(m * math.log(1 / beta))
    ks = np.arange(0, m + 1)
    far = np.abs(2 * ks - m) > thr
    if not far.any():
        return 0.0
    logp = stats.hypergeom.logpmf(ks[far], size, size // 2, m)
    return float(np.exp(special.logsumexp(logp)))
