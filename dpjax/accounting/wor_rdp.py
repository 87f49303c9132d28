"""Renyi DP of the Gaussian mechanism on a subsample drawn without replacement (replace-one), as dp_accounting
computes it (Wang, Balle & Kasiviswanathan 2019, Theorem 27), its forward differences computed once per noise level
instead of once per order (``dpjax.accounting.tight`` reads it for every fixed-size sampled schedule)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["wor_gaussian_parts", "wor_gaussian_rdp"]


def wor_gaussian_parts(event, neighboring):
    """``(q, noise multiplier, count)`` if ``event`` is ``count`` self-composed Gaussians sampled without replacement
    under replace-one (what ``RdpAccountant`` composes with ``_compute_rdp_sample_wor_gaussian``), else None."""
    import dp_accounting as dpa

    if neighboring is not dpa.NeighboringRelation.REPLACE_ONE or not isinstance(event, dpa.SelfComposedDpEvent):
        return None
    inner = event.event
    if not (isinstance(inner, dpa.SampledWithoutReplacementDpEvent) and isinstance(inner.event, dpa.GaussianDpEvent)):
        return None
    return inner.sample_size / inner.source_dataset_size, inner.event.noise_multiplier, event.count


def wor_gaussian_rdp(q: float, sigma: float, orders) -> np.ndarray:
    """dp_accounting's ``_compute_rdp_sample_wor_gaussian(q, sigma, orders)`` (Wang, Balle & Kasiviswanathan 2019,
    Theorem 27), bit for bit, in a fraction of its time.

    dp_accounting recomputes the forward differences of ``exp(cgf)`` up to order alpha (``_get_forward_diffs``,
    O(alpha^2) pure-Python steps) for every integer order it needs; they depend only on sigma and those up to alpha
    are a prefix of those up to any larger order, so they are computed once, up to the largest order needed. The
    rest is dp_accounting's code, line for line (Apache 2.0); ``tests/accounting/test_wor_rdp.py`` checks equality.
    """
    from dp_accounting.rdp import rdp_privacy_accountant as rpa

    max_alpha = 256  # dp_accounting's exact/Stirling switch
    needed = sorted({a for order in orders if not np.isinf(order)
                     for a in ({int(order)} if float(order).is_integer() else {math.floor(order), math.ceil(order)})})
    exact_top = max([a for a in needed if 2 <= a <= max_alpha], default=0)

    def cgf(x):
        return x * 1.0 * (x + 1) / (2.0 * sigma**2)

    def func(x):
        return 1.0 * x / (2.0 * sigma**2)

    deltas = rpa._get_forward_diffs(cgf, exact_top)[0] if exact_top else None
    log_f2m1 = func(2.0) + math.log1p(-np.exp(-func(2.0)))
    cache: dict[int, float] = {}

    def log_a_int(alpha: int) -> float:  # rpa._compute_rdp_sample_wor_gaussian_int
        if alpha in cache:
            return cache[alpha]
        if alpha == 1:
            return 0
        log_a = 0
        for i in range(2, alpha + 1):
            if i == 2:
                s = 2 * np.log(q) + rpa._log_comb(alpha, 2) + np.minimum(np.log(4) + log_f2m1, func(2.0) + np.log(2))
            elif alpha <= max_alpha:
                delta_lo = deltas[int(2 * np.floor(i / 2.0)) - 1]
                delta_hi = deltas[int(2 * np.ceil(i / 2.0)) - 1]
                s = np.log(4) + 0.5 * (delta_lo + delta_hi)
                s = np.minimum(s, np.log(2) + cgf(i - 1))
                s += i * np.log(q) + rpa._log_comb(alpha, i)
            else:
                s = np.log(2) + cgf(i - 1) + i * np.log(q) + rpa._log_comb(alpha, i)
            log_a = rpa._log_add(log_a, s)
        cache[alpha] = float(log_a) if alpha <= max_alpha else log_a
        return cache[alpha]

    def scalar(alpha) -> float:  # rpa._compute_rdp_sample_wor_gaussian_scalar
        assert (q <= 1) and (q >= 0) and (alpha >= 1)
        if q == 0:
            return 0
        if q == 1.0:
            return alpha / (2 * sigma**2)
        if np.isinf(alpha):
            return np.inf
        if float(alpha).is_integer():
            return log_a_int(int(alpha)) / (alpha - 1)
        alpha_f, alpha_c = math.floor(alpha), math.ceil(alpha)
        x, y = log_a_int(alpha_f), log_a_int(alpha_c)
        t = alpha - alpha_f
        return ((1 - t) * x + t * y) / (alpha - 1)

    return np.array([scalar(order) for order in orders])
