"""Exact checks of the paper's probabilistic statements (no sampling).

* ``output_law`` / ``hockey_stick``: the exact output distribution of Algorithm 1 on a dataset (a point mass on bottom
  plus a TDLap-weighted Gaussian mixture, from its stable table) and the hockey-stick divergence H_{e^eps}(P || Q)
  between two such laws for scalar f, integrated on a fine grid (demonstration D9). Theorem 3.3's proof bounds it by
  p(0) + p(2 kappa) + e^{eps'} delta_G.
* ``canary_pair`` / ``clipped_mean_table`` / ``skip_test_law`` / ``exact_epsilon``: the worst-case neighbouring user
  datasets of the bottom step of Theorem 3.3's proof (one more outlier user to delete on D'), Algorithm 1's stable
  tables for f = clipped mean, the output law of the mutant that skips the stability test, and the exact epsilon of
  two laws at a given delta (D9 and the ``user-level`` audit of ``dpjax.auditing``).
* ``lemma38_pm_tail``: the exact tail of Lemma 3.8 for the +-G e_1 family, where ||sum_{j<=m} v_pi(j)|| = G |2K - m|
  with K hypergeometric (N, N/2, m).
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


# The canary pair of the user-level audit (D9 and ``dpjax audit user-level``)


def clipped_mean_table(values, kappa: int, sensitivity: float):
    """Algorithm 1's stable table for f = mean of the users' scalar values clipped to [0, 1] (the deterministic
    oracle of mean estimation on K = B(0, 1), one item per user)."""
    from dpjax.user_level import mechanisms as mech, problems

    x = np.clip(np.asarray(values, np.float64), 0, 1)[:, None, None]
    return mech.stable_table(mech.oracle(problems.Loss("mean"), x, np.zeros(x.shape[:2]), mech.Domain.ball(1.0, 1)),
                             len(x), kappa, sensitivity)


def canary_pair(n: int, outliers: int) -> tuple[np.ndarray, np.ndarray]:
    """Neighbouring user datasets in [0, 1]: D has users 1..outliers at 1 and the rest at 0; D' also moves user 0
    (the canary) from 0 to 1. Deleting the outliers leaves a constant dataset (deletion sensitivity 0), so D's
    first stable set has ``outliers`` users and D''s one more: bottom exactly when R1 < outliers (D) or
    R1 < outliers + 1 (D'), and both release the same centre 0 otherwise (the worst case of the bottom step of
    Theorem 3.3's proof, Observation 3.5 with equality)."""
    n = v.check_int("n", n, min_value=2)
    outliers = v.check_int("outliers", outliers, min_value=0, max_value=n - 2)
    x = np.zeros(n)
    x[1:outliers + 1] = 1.0
    x2 = x.copy()
    x2[0] = 1.0
    return x, x2


def skip_test_law(values) -> tuple[float, np.ndarray, np.ndarray]:
    """Output law of Algorithm 1 with the stability test skipped (a mutant): never bottom, f(x) + N(0, sigma^2)."""
    return 0.0, np.ones(1), np.array([float(np.clip(np.asarray(values, np.float64), 0, 1).mean())])


def exact_epsilon(law_p, law_q, sigma: float, delta: float, eps_max: float = 100.0, tol: float = 1e-4) -> float:
    """Smallest eps with max(H_{e^eps}(P||Q), H_{e^eps}(Q||P)) <= delta for two 1-D output laws (bisection;
    ``inf`` beyond ``eps_max``)."""
    delta = v.check_open_unit("delta", delta)
    h = lambda e: max(hockey_stick(law_p, law_q, sigma, math.exp(e)), hockey_stick(law_q, law_p, sigma, math.exp(e)))  # noqa: E731
    if h(0.0) <= delta:
        return 0.0
    if h(eps_max) > delta:
        return math.inf
    lo, hi = 0.0, eps_max
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if h(mid) > delta else (lo, mid)
    return hi
