"""A0: the shifted, truncated discrete Laplace distribution TDLap(eps, delta) (Definition 3.4).

Support {0, ..., 2 kappa}, pmf proportional to exp(-eps |r - kappa|) (kappa = ceil(1 + ln(1/delta)/eps), rounded up;
the proof of Theorem 3.3 needs p(0) = p(2 kappa) <= delta and adjacent ratios <= e^eps).

The sampler is exact for a law we can write down: the pmf is quantised to integer masses summing to 2^64
(``sampler_masses``), and one 64-bit uniform integer (two keyed uint32 words) is located among the cumulative
thresholds by lexicographic comparison. The sampled law is therefore exactly ``sampler_masses / 2^64``; it differs
from the real pmf by < 2^-64 per atom, and the tests check p(0) <= delta and the adjacent-ratio bound on the quantised
law itself (``sampler_log_ratio``).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate as v
from dpjax.accounting.user_level import tdlap_pmf

SCALE = 2**64


@functools.lru_cache(maxsize=256)
def sampler_masses(eps: float, kappa: int) -> tuple[int, ...]:
    """Integer masses (summing to 2^64, symmetric around kappa) of the law the sampler draws from."""
    eps = v.check_positive("eps", eps)
    kappa = v.check_int("kappa", kappa, min_value=1)
    pmf = tdlap_pmf(eps, kappa)
    tails = [int(round(float(pmf[r]) * SCALE)) for r in range(kappa)]
    masses = tails + [SCALE - 2 * sum(tails)] + tails[::-1]
    return tuple(masses)


def sampler_pmf(eps: float, kappa: int) -> np.ndarray:
    """The sampler's exact law as float64 (masses / 2^64)."""
    return np.array([m / SCALE for m in sampler_masses(eps, kappa)])


def sampler_log_ratio(eps: float, kappa: int) -> float:
    """max_r |ln p(r)/p(r+1)| of the quantised law (exact integer ratio, evaluated with log of ints)."""
    ms = sampler_masses(eps, kappa)
    return max(abs(math.log(a) - math.log(b)) for a, b in zip(ms[:-1], ms[1:]))


def _thresholds(eps: float, kappa: int) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative thresholds t_k = sum_{r<k} mass_r, k = 1..2 kappa, as (high, low) uint32 words."""
    cum = np.cumsum(np.array(sampler_masses(eps, kappa), dtype=object))[:-1]
    hi = np.array([int(c) >> 32 for c in cum], dtype=np.uint32)
    lo = np.array([int(c) & 0xFFFFFFFF for c in cum], dtype=np.uint32)
    return hi, lo


def tdlap_from_bits(hi: jax.Array, lo: jax.Array, thresholds: tuple[np.ndarray, np.ndarray]) -> jax.Array:
    """r = #{k : (hi, lo) >= t_k}: the inverse CDF of the quantised law at the 64-bit integer (hi, lo)."""
    th, tl = (jnp.asarray(a) for a in thresholds)
    ge = (hi > th) | ((hi == th) & (lo >= tl))
    return jnp.sum(ge.astype(jnp.int32))


def tdlap_sample(key: jax.Array, eps: float, kappa: int) -> jax.Array:
    """One draw R1 ~ TDLap (Definition 3.4) from ``key`` (int32 scalar in {0..2 kappa})."""
    bits = jax.random.bits(key, (2,), jnp.uint32)
    return tdlap_from_bits(bits[0], bits[1], _thresholds(eps, kappa))
