"""Shuffle-model summation protocols P_1D / P_vec (Cheu, Joseph, Mao, Peng,
ICLR 2022, Algorithms 1-2; restated as Algorithms 4-5 of Lowy & Razaviyayn
2023, corrected per spec I-3). Spec: ``shuffle_private_sco.md`` §2.1-2.4.

Protocol for m vectors ``x_k`` with ``||x_k||_2 <= L`` (range ``Delta = 2L``
after the shift), parameters ``(g, b, p)``::

    randomizer, coordinate j:  w = x_j + L in [0, 2L]
                               xhat = floor(w g/Delta) + Bernoulli(frac(w g/Delta))
                               eta2 ~ Binomial(b, p)
                               send (xhat + eta2) ones and (g + b - xhat - eta2) zeros, labelled j
    shuffler:                  uniformly permutes all messages of all users
    analyzer, coordinate j:    o_j = (Delta/g)(#ones labelled j - p b m) - m L

``o`` is an unbiased estimate of ``sum_k x_k`` with per-coordinate variance
``(Delta/g)^2 [sum_k r_k (1 - r_k) + m b p (1 - p)]``, ``r_k`` the fractional
parts (shuffle spec §2.1). The corrections of I-3 are built in: range
``2L`` (not ``L``) and re-centring by ``m L`` (not ``L``).

Simulation (shuffle spec §2.4). The analyzer's output depends on the shuffled
bits only through the per-coordinate count of ones, so the engine never
materialises bits: per coordinate it draws the rounded sum exactly and the
binomial noise ``Binomial(m b, p)`` exactly, which is equal in distribution
to the bit-level protocol (``pvec_bits_numpy`` is the bit-level reference the
tests compare against).

Precision. ``m b`` reaches 1e9-1e10 and ``count - p b m`` is a catastrophic
cancellation: the binomial noise must be drawn with 64-bit integers. JAX's
global x64 flag is NOT flipped (a local ``jax.enable_x64`` context inside a
trace does not lower on jax 0.10), so ``centred_binomial`` draws it on the
host with NumPy (``int64``/``float64``) through ``jax.pure_callback``, seeded
deterministically from the JAX key's raw words (same key => same draw), and
only the *centred* noise ``Binomial(m b, p) - m b p`` (magnitude ~ sqrt(m b))
is returned as float32. The rounded sums are exact int32 on device (they
are <= m g, checked against 2^24 so their float32 conversion is exact).

Parameters ``(g, b, p)`` come from the protocol's calculator (shuffle spec
§2.3), which belongs to the accounting layer; here they are explicit and
static (``PvecParams``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate

_EXACT_F32 = 2**24


@dataclasses.dataclass(frozen=True)
class PvecParams:
    """P_1D/P_vec parameters: precision ``g``, binomial trials ``b`` and
    probability ``p`` (``0 <= p < 1/2``; ``b = 0`` or ``p = 0`` switches the
    privacy noise off, for tests only)."""

    granularity: int
    trials: int
    probability: float

    def __post_init__(self):
        _validate.check_int("granularity", self.granularity, min_value=1)
        _validate.check_int("trials", self.trials, min_value=0)
        p = _validate.check_probability("probability", self.probability)
        if not p < 0.5:
            raise ValueError(f"probability={self.probability!r} must be < 1/2")

    @classmethod
    def from_calculator(cls, calculated) -> "PvecParams":
        """From any calculator result exposing ``g``, ``b`` and ``p`` (e.g. the
        accounting layer's P_vec parameter calculator, shuffle spec §2.3)."""
        return cls(int(calculated.g), int(calculated.b), float(calculated.p))

    def messages_per_coordinate(self) -> int:
        """Each user sends g + b one-bit messages per coordinate."""
        return self.granularity + self.trials


def pvec_variance(x: np.ndarray, params: PvecParams, bound: float) -> np.ndarray:
    """Exact per-coordinate variance of the P_vec sum estimate for inputs ``x [m, d]``."""
    x = np.asarray(x, np.float64)
    g, delta = params.granularity, 2.0 * bound
    scaled = np.clip((x + bound) * g / delta, 0.0, g)
    r = scaled - np.floor(scaled)
    m = x.shape[0]
    b, p = params.trials, params.probability
    return (delta / g) ** 2 * (np.sum(r * (1 - r), axis=0) + m * b * p * (1 - p))


# ---------------------------------------------------------------------------
# JAX count-level simulation
# ---------------------------------------------------------------------------


def _host_centred_binomial(key_words, counts, *, trials, probability, dim):
    key_words = np.asarray(key_words)
    counts = np.asarray(counts)
    batch = counts.shape
    flat_keys = key_words.reshape(int(np.prod(batch, dtype=np.int64)), -1)
    flat_counts = counts.reshape(-1)
    out = np.empty((flat_counts.shape[0], dim), np.float32)
    for i in range(flat_counts.shape[0]):
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(w) for w in flat_keys[i]])))
        n_trials = np.int64(flat_counts[i]) * np.int64(trials)
        draws = rng.binomial(n_trials, probability, size=dim).astype(np.int64)
        out[i] = (draws.astype(np.float64) - float(n_trials) * probability).astype(np.float32)
    return out.reshape(batch + (dim,))


def centred_binomial(key: jax.Array, num_users, params: PvecParams, dim: int) -> jax.Array:
    """``Binomial(num_users * b, p) - num_users * b * p`` per coordinate, float32 [dim].

    Drawn exactly on the host (int64) via ``jax.pure_callback``; deterministic
    in ``key``; works under ``jit``, ``vmap`` and ``scan``.
    """
    if params.trials == 0 or params.probability == 0.0:
        return jnp.zeros((dim,), jnp.float32)
    words = jax.random.key_data(key)
    fn = lambda kw, c: _host_centred_binomial(  # noqa: E731
        kw, c, trials=params.trials, probability=params.probability, dim=dim)
    out_shape = jax.ShapeDtypeStruct(jnp.shape(num_users) + (dim,), jnp.float32)
    return jax.pure_callback(fn, out_shape, words, jnp.asarray(num_users, jnp.int32), vmap_method="broadcast_all")


def randomized_rounding(key: jax.Array, x: jax.Array, params: PvecParams, bound) -> jax.Array:
    """``xhat = floor(w g/Delta) + Bernoulli(frac)`` for ``w = x + L``, int32, same shape as ``x``."""
    g = params.granularity
    scaled = jnp.clip((x + bound) * (g / (2.0 * bound)), 0.0, float(g))
    low = jnp.floor(scaled)
    up = jax.random.uniform(key, x.shape) < (scaled - low)
    return low.astype(jnp.int32) + up.astype(jnp.int32)


def pvec_user_counts(round_key: jax.Array, noise_key: jax.Array, vectors: jax.Array, mask: jax.Array,
                     params: PvecParams, bound) -> jax.Array:
    """One party's centred count report for its valid ``vectors [m, d]``.

    Returns ``sum_k (xhat_k - g/2) + (Binomial(m b, p) - m b p)`` per
    coordinate (float32 [d]): the part of the per-coordinate count of ones
    that this party's messages contribute, minus its public expectation
    offset. The analyzer's estimate is ``(2L/g) * sum over parties``.
    """
    if vectors.shape[0] * params.granularity >= _EXACT_F32:
        raise ValueError(
            f"{vectors.shape[0]} vectors x granularity={params.granularity} >= 2^24: rounded sums would "
            "not be exact in float32; use fewer vectors per party or a smaller granularity"
        )
    xhat = randomized_rounding(round_key, vectors, params, bound)
    xhat = jnp.where(mask[:, None], xhat, 0)
    count = jnp.sum(mask.astype(jnp.int32))
    rounded = jnp.sum(xhat, axis=0).astype(jnp.float32) - count.astype(jnp.float32) * (params.granularity / 2.0)
    return rounded + centred_binomial(noise_key, count, params, vectors.shape[1])


def pvec_analyze(total_counts: jax.Array, params: PvecParams, bound) -> jax.Array:
    """Analyzer on the summed centred counts: ``(Delta/g) * counts`` (the
    ``- m L`` re-centring is already inside the centred counts)."""
    return total_counts * (2.0 * bound / params.granularity)


def pvec_sum(key: jax.Array, vectors: jax.Array, params: PvecParams, bound, mask=None) -> jax.Array:
    """P_vec estimate of ``sum_k vectors[k]`` for one batch of users (count level)."""
    mask = jnp.ones(vectors.shape[:1], bool) if mask is None else mask
    k_round, k_noise = jax.random.split(key)
    return pvec_analyze(pvec_user_counts(k_round, k_noise, vectors, mask, params, bound), params, bound)


# ---------------------------------------------------------------------------
# NumPy references (tests)
# ---------------------------------------------------------------------------


def pvec_bits_numpy(x: np.ndarray, params: PvecParams, bound: float, rng: np.random.Generator) -> np.ndarray:
    """Bit-level reference: materialises every labelled one-bit message, shuffles
    them, and runs the analyzer on the shuffled list. Small g, b, m only."""
    x = np.asarray(x, np.float64)
    m, d = x.shape
    g, b, p = params.granularity, params.trials, params.probability
    delta = 2.0 * bound
    labels, bits = [], []
    for k in range(m):
        for j in range(d):
            scaled = min(max((x[k, j] + bound) * g / delta, 0.0), g)
            low = np.floor(scaled)
            xhat = int(low) + int(rng.random() < scaled - low)
            eta2 = int(np.sum(rng.random(b) < p))
            ones = xhat + eta2
            labels.append(np.full(g + b, j))
            bits.append(np.r_[np.ones(ones, np.int64), np.zeros(g + b - ones, np.int64)])
    labels, bits = np.concatenate(labels), np.concatenate(bits)
    order = rng.permutation(len(bits))  # the shuffler
    labels, bits = labels[order], bits[order]
    ones_per_label = np.bincount(labels, weights=bits, minlength=d)
    return (delta / g) * (ones_per_label - p * b * m) - m * bound
