"""Distinguishing scores for Gaussian canary audits (log-likelihood ratios).

A canary audit projects each released vector onto the canary direction and divides by the noise std, giving ``z_r ~
N(L_r m, 1)`` per release r, where ``L_r`` is how many times the canary entered release r (random under sampling) and
``m`` the normalised shift of one entry (``m_d`` on D, ``m_dp`` on D'). The Neyman-Pearson test thresholds the
log-likelihood ratio; these helpers compute it (exactly for independent inclusions, and for a shuffle's
one-batch-per-epoch law). Any score gives a valid bound; a better score only gives a tighter one.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.special import logsumexp

__all__ = ["inclusion_mixture_llr", "one_per_epoch_llr"]


def _log_mixture(z, probs, shift):
    """log sum_l probs[l] phi(z - l shift), up to the common -z^2/2 - log sqrt(2 pi)."""
    probs = jnp.asarray(probs, jnp.float32)
    l = jnp.arange(probs.shape[0], dtype=jnp.float32)
    mean = l * shift
    terms = jnp.log(probs) + z[..., None] * mean - 0.5 * mean * mean
    return logsumexp(terms, axis=-1)


def inclusion_mixture_llr(z, probs, m_d: float, m_dp: float):
    """``sum_r log p_D'(z_r) - log p_D(z_r)`` for independent releases.

    ``p_X(z) = sum_l probs[l] phi(z - l m_X)``; ``probs[l] = P(L_r = l)`` (``[1 - q, q]`` for Poisson or uniform
    subsampling of one record).
    """
    z = jnp.asarray(z, jnp.float32)
    return jnp.sum(_log_mixture(z, probs, m_dp) - _log_mixture(z, probs, m_d))


def one_per_epoch_llr(z, m_d: float, m_dp: float):
    """LLR when the canary is in exactly one uniformly random release of each epoch.

    ``z [epochs, releases_per_epoch]``; per epoch ``log mean_b exp(m_dp z_b - m_dp^2/2) - log mean_b exp(m_d z_b -
    m_d^2/2)`` (shuffling: one permutation per epoch, the canary's batch is uniform).
    """
    z = jnp.asarray(z, jnp.float32)
    f = lambda m: logsumexp(m * z - 0.5 * m * m, axis=-1)  # noqa: E731
    return jnp.sum(f(m_dp) - f(m_d))
