"""Theory-driven parameter rules of Lowy & Razaviyayn (ICLR 2023) as pure Python functions (no jax): averaging
weights, smoothing constants, multi-stage schedules and unbalanced-silo parameters (Appendix H). Every function cites
the theorem it implements. ``M`` is the (harmonic-mean) availability, ``1/M = E[1/M_r]``; noise calibrations come
from ``dpjax.accounting`` so the numbers are never typed twice.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dpjax import _validate as v
from dpjax.accounting.isrl import isrl_paper_min_batch_size, isrl_paper_sigma


def stich_weights(num_rounds: int, strong_convexity: float, learning_rate: float) -> np.ndarray:
    """Normalised ``gamma_r = (1 - mu eta)^{-(r+1)}``, r = 0..R-1 (Theorem D.1.2).

    Computed in log space and normalised by the largest weight, so it never
    overflows (R = 10^7 is fine); sums to 1. Needs ``0 < mu eta < 1``."""
    rounds = v.check_int("num_rounds", num_rounds, min_value=1)
    mu, eta = v.check_positive("strong_convexity", strong_convexity), v.check_positive("learning_rate", learning_rate)
    if not mu * eta < 1:
        raise ValueError(f"strong_convexity*learning_rate={mu * eta!r} must be < 1")
    log_w = -np.log1p(-mu * eta) * np.arange(1, rounds + 1, dtype=np.float64)
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


def smoothing_beta(*, lipschitz, n, num_available, dim, epsilon, delta, diameter=None,
                   strong_convexity=None, erm=False) -> float:
    """Moreau-envelope beta for non-smooth losses.

    SCO (Theorem D.2): convex ``(L sqrt(M)/D) / (1/sqrt(n) + sqrt(d ln(1/delta))/(eps n))``;
    strongly convex ``mu M / (1/n + d ln(1/delta)/(eps^2 n^2))``.
    ERM (``erm=True``, Theorem F.2): convex ``eps n sqrt(M) L/(sqrt(d) D)``; strongly convex ``mu M eps^2 n^2/d``. Give
    exactly one of ``diameter`` (convex) or ``strong_convexity``."""
    lip = v.check_positive("lipschitz", lipschitz)
    n, d = v.check_int("n", n, min_value=1), v.check_int("dim", dim, min_value=1)
    m, eps = v.check_positive("num_available", num_available), v.check_positive("epsilon", epsilon)
    delta = v.check_open_unit("delta", delta)
    if (diameter is None) == (strong_convexity is None):
        raise ValueError(f"diameter={diameter!r}, strong_convexity={strong_convexity!r}: give exactly one")
    if diameter is not None:
        big_d = v.check_positive("diameter", diameter)
        if erm:
            return eps * n * math.sqrt(m) * lip / (math.sqrt(d) * big_d)
        return (lip * math.sqrt(m) / big_d) / (1 / math.sqrt(n) + math.sqrt(d * math.log(1 / delta)) / (eps * n))
    mu = v.check_positive("strong_convexity", strong_convexity)
    if erm:
        return mu * m * eps**2 * n**2 / d
    return mu * m / (1 / n + d * math.log(1 / delta) / (eps**2 * n**2))


def multistage_stages(*, num_rounds, smoothness, strong_convexity, variance, initial_gap) -> list[tuple[int, float]]:
    """Multi-stage AC-SA (Appendix E.1; Ghadimi & Lan 2013 Prop. 7).

    ``R_k = ceil(max(4 sqrt(2 beta/mu), 128 V^2/(3 mu Delta 2^{-(k+1)})))``,
    ``nu_k = max(2 beta, sqrt(mu V^2/(3 Delta 2^{-(k-1)} R_k (R_k+1)(R_k+2))))``, for k = 1..U with U the largest
    integer such that ``sum R_k <= R``. ``variance`` is V^2 and ``initial_gap`` Delta >= F(w_0) - F*. Returns
    ``[(R_k, nu_k), ...]`` (run ``sum R_k`` rounds). Raises ``ValueError`` when even the first stage needs more than
    ``num_rounds``."""
    rounds = v.check_int("num_rounds", num_rounds, min_value=1)
    beta, mu = v.check_positive("smoothness", smoothness), v.check_positive("strong_convexity", strong_convexity)
    var, gap = v.check_nonnegative("variance", variance), v.check_positive("initial_gap", initial_gap)
    stages, used, k = [], 0, 1
    while True:
        r_k = math.ceil(max(4 * math.sqrt(2 * beta / mu), 128 * var / (3 * mu * gap * 2.0 ** (-(k + 1)))) - 1e-9)
        if used + r_k > rounds:
            break
        nu_k = max(2 * beta, math.sqrt(mu * var / (3 * gap * 2.0 ** (-(k - 1)) * r_k * (r_k + 1) * (r_k + 2))))
        stages.append((r_k, nu_k))
        used += r_k
        k += 1
    if not stages:
        raise ValueError(f"num_rounds={rounds} is smaller than the first stage's R_1; increase num_rounds")
    return stages


def unbalanced_parameters(*, silo_sizes: Sequence[int], epsilons: Sequence[float], deltas: Sequence[float],
                          num_rounds: int, lipschitz: float) -> dict:
    """Algorithm 7 (Appendix H; K_i = ceil(c n_i) with a common c): per-silo ``sigma_i`` (paper calibration with that
    silo's n_i, eps_i, delta_i) and ``K_i = ceil(c n_i)`` with one common fraction ``c = max_i K_min,i / n_i`` so that
    ``K_i / n_i`` is (up to rounding) equal and every ``K_i >= K_min,i``.

    Returns ``{"batch_sizes": (K_i), "noise_stds": (sigma_i), "fraction": c}``."""
    sizes = [v.check_int(f"silo_sizes[{i}]", s, min_value=1) for i, s in enumerate(silo_sizes)]
    if not sizes:
        raise ValueError("silo_sizes=[] must name at least one silo")
    for name, seq in (("epsilons", epsilons), ("deltas", deltas)):
        if len(seq) != len(sizes):
            raise ValueError(f"{name} has {len(seq)} entries; it must have one per silo ({len(sizes)})")
    rounds = v.check_int("num_rounds", num_rounds, min_value=1)
    k_min = [isrl_paper_min_batch_size(n, rounds, e, dl) for n, e, dl in zip(sizes, epsilons, deltas)]
    c = max(km / n for km, n in zip(k_min, sizes))
    ks = tuple(int(min(n, math.ceil(c * n - 1e-12))) for n in sizes)
    sigmas = tuple(isrl_paper_sigma(lipschitz, n, rounds, e, dl) for n, e, dl in zip(sizes, epsilons, deltas))
    return {"batch_sizes": ks, "noise_stds": sigmas, "fraction": c}
