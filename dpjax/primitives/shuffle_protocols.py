"""Shuffle-model summation protocols P_1D / P_vec (Cheu, Joseph, Mao, Peng, ICLR 2022, Algorithms 1-2; restated as
Algorithms 4-5 of Lowy & Razaviyayn 2023, whose restatement shifts by L instead of 2L and re-centres by L instead of m
L; the original protocols are implemented). For m vectors ``x_k`` with ``||x_k||_2 <= L`` (range ``Delta = 2L`` after
the shift), parameters ``(g, b, p)``::

    randomizer, coordinate j:  w = x_j + L in [0, 2L]
                               xhat = floor(w g/Delta) + Bernoulli(frac(w g/Delta))
                               eta2 ~ Binomial(b, p)
                               send (xhat + eta2) ones and (g + b - xhat - eta2) zeros, labelled j
    shuffler:                  uniformly permutes all messages of all users
    analyzer, coordinate j:    o_j = (Delta/g)(#ones labelled j - p b m) - m L

``o`` is an unbiased estimate of ``sum_k x_k`` with per-coordinate variance
``(Delta/g)^2 [sum_k r_k (1 - r_k) + m b p (1 - p)]``, ``r_k`` the fractional parts (Cheu et al., Lemma 3.1).

Simulation. The analyzer's output depends on the shuffled bits only through the per-coordinate count of ones, so the
engine never materialises bits: per coordinate it draws the rounded sum exactly and the binomial noise
``Binomial(m b, p)`` exactly, which is equal in distribution to the bit-level protocol (tests/algorithms/test_shuffled.py
compares it with a bit-level reference).

Precision. ``m b`` reaches 1e9-1e10 and ``count - p b m`` is a catastrophic cancellation: the binomial noise must
be drawn with 64-bit integers. JAX's global x64 flag is NOT flipped (a local ``jax.enable_x64`` context inside a
trace does not lower on jax 0.10), so ``centred_binomial`` draws it on the host with NumPy (``int64``/``float64``)
through ``jax.pure_callback``, seeded deterministically from the JAX key's raw words (same key => same draw), and
only the *centred* noise ``Binomial(m b, p) - m b p`` (magnitude ~ sqrt(m b)) is returned as float32. The rounded
sums are exact int32 on device (they are <= m g, checked against 2^24 so their float32 conversion is exact).

Parameters ``(g, b, p)`` come from the protocol's calculator (proof of Theorem 3.2 of Cheu et al.;
``dpjax.accounting.pvec``). They are per-run *numbers*, not shapes: the count-level simulation never materialises the
``g + b`` bits, so a change of (g, b, p) changes no array shape. ``PvecParams`` is therefore a pytree whose three fields
may be traced, and a grid over epsilon (hence over (g, b, p)) is one vmap in one compiled program. Traced b and p reach
the host as the int32 / float32 values the run holds (``PvecParams.create`` rounds p *up* to float32, so a run never has
less noise than its calculator asked for, and privacy reports read those stored values); static Python numbers are used
exactly. The only static quantity is an upper bound ``max_granularity`` on g, needed to keep the rounded sums exact in
float32 (``m * max_granularity < 2^24`` for m vectors per party); a traced g above it turns the report into NaN (the
runner then raises, naming the run's hyperparameters).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate

_EXACT_F32 = 2**24
MAX_TRIALS = 2**31 - 1  # trials are int32 leaves; n b is formed in int64 on the host


def _static_scalar(x):
    """``x`` as a Python number if it is a concrete scalar, else None (tracers, batches)."""
    try:
        a = np.asarray(x)
    except Exception:  # a tracer cannot become a NumPy array
        return None
    return a.item() if a.ndim == 0 else None


def _round_up_f32(p: np.ndarray) -> np.ndarray:
    """Nearest float32 >= p (more binomial noise, never less), unless that reaches 1/2."""
    p = np.asarray(p, np.float64)
    p32 = p.astype(np.float32)
    up = np.where(p32.astype(np.float64) < p, np.nextafter(p32, np.float32(1.0)), p32)
    return np.where(up >= 0.5, np.nextafter(np.float32(0.5), np.float32(0.0)), up).astype(np.float32)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PvecParams:
    """P_1D/P_vec parameters: precision ``g``, binomial trials ``b`` and probability ``p`` (``0 <= p < 1/2``; ``b = 0``
    or ``p = 0`` switches the privacy noise off, for tests only).

    A pytree: the fields may be Python numbers, arrays, batches (a leading runs axis) or tracers. The constructor does
    not validate (JAX rebuilds pytrees with placeholder leaves); ``create`` and ``validate`` do."""

    granularity: Any
    trials: Any
    probability: Any

    @classmethod
    def create(cls, granularity, trials, probability) -> "PvecParams":
        """Validated parameters as arrays ready for a run: g, b int32 and p float32, rounded *up* to the next float32
        (more noise; a report reads the stored value, see ``dpjax.algorithms.shuffled``)."""
        out = cls(granularity, trials, probability)
        out.validate()
        g = np.asarray(granularity)
        b = np.asarray(trials)
        # integer casts on the host (validated above, so in range) and device_put: an eager jnp cast or
        # jnp.asarray compiles a program per shape
        return cls(jax.device_put(g.astype(np.int32)), jax.device_put(b.astype(np.int32)),
                   jax.device_put(_round_up_f32(probability)))

    def validate(self) -> "PvecParams":
        """Host-side checks of concrete values (any shape); ValueError naming the field."""
        for name, lo in (("granularity", 1), ("trials", 0)):
            a = np.asarray(getattr(self, name))
            if a.dtype == bool or not np.issubdtype(a.dtype, np.integer):
                if not (np.issubdtype(a.dtype, np.floating) and np.all(a == np.round(a))):
                    raise ValueError(f"{name}={getattr(self, name)!r} must be an integer")
            if np.any(a < lo):
                raise ValueError(f"{name}={getattr(self, name)!r} must be >= {lo}")
        if np.any(np.asarray(self.trials, np.float64) > MAX_TRIALS):
            raise ValueError(f"trials={self.trials!r} must be <= 2^31 - 1 (int32 leaves)")
        p = np.asarray(self.probability)
        if p.dtype == bool or not np.issubdtype(p.dtype, np.number) or np.any(np.isnan(p)):
            raise ValueError(f"probability={self.probability!r} must be a real number")
        if np.any(p < 0) or not np.all(p < 0.5):
            raise ValueError(f"probability={self.probability!r} must be in [0, 1/2)")
        return self

    @classmethod
    def from_calculator(cls, calculated) -> "PvecParams":
        """From any calculator result exposing ``g``, ``b`` and ``p`` (e.g.
        ``dpjax.accounting.pvec.pvec_params``, proof of Cheu et al. Theorem 3.2), via ``create``."""
        return cls.create(int(calculated.g), int(calculated.b), float(calculated.p))

    def numbers(self) -> tuple[int, int, float]:
        """``(g, b, p)`` as Python numbers (concrete, unbatched parameters only)."""
        vals = [_static_scalar(x) for x in (self.granularity, self.trials, self.probability)]
        if any(x is None for x in vals):
            raise ValueError("PvecParams holds traced or batched values; index one run's parameters first")
        return int(vals[0]), int(vals[1]), float(vals[2])


def pvec_variance(x: np.ndarray, params: PvecParams, bound: float) -> np.ndarray:
    """Exact per-coordinate variance of the P_vec sum estimate for inputs ``x [m, d]``."""
    x = np.asarray(x, np.float64)
    g, b, p = params.numbers()
    delta = 2.0 * bound
    scaled = np.clip((x + bound) * g / delta, 0.0, g)
    r = scaled - np.floor(scaled)
    m = x.shape[0]
    return (delta / g) ** 2 * (np.sum(r * (1 - r), axis=0) + m * b * p * (1 - p))


# ----------------------------------------------------------------------------- JAX count-level simulation
def _host_centred_binomial(key_words, counts, trials, probability, *, dim):
    key_words = np.asarray(key_words)
    counts = np.asarray(counts)
    batch = counts.shape
    size = int(np.prod(batch, dtype=np.int64))
    flat_keys = key_words.reshape(size, -1)
    flat_counts = counts.reshape(-1)
    flat_trials = np.broadcast_to(np.asarray(trials), batch).reshape(-1)
    flat_probs = np.broadcast_to(np.asarray(probability), batch).reshape(-1)
    out = np.empty((size, dim), np.float32)
    for i in range(size):
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(w) for w in flat_keys[i]])))
        n_trials = np.int64(flat_counts[i]) * np.int64(flat_trials[i])
        prob = float(flat_probs[i])  # the float32 value the run holds, exactly
        draws = rng.binomial(n_trials, prob, size=dim).astype(np.int64)
        out[i] = (draws.astype(np.float64) - float(n_trials) * prob).astype(np.float32)
    return out.reshape(batch + (dim,))


def centred_binomial(key: jax.Array, num_users, params: PvecParams, dim: int) -> jax.Array:
    """``Binomial(num_users * b, p) - num_users * b * p`` per coordinate, float32 [dim].

    Drawn exactly on the host (int64) via ``jax.pure_callback``; deterministic in ``(key, num_users * b, p)``; works
    under ``jit``, ``vmap`` and ``scan``, with ``b`` and ``p`` traced (per-run) or static."""
    b, p = _static_scalar(params.trials), _static_scalar(params.probability)
    if b == 0 or p == 0.0:  # statically off (tests); a traced zero draws zeros on the host
        return jnp.zeros((dim,), jnp.float32)
    words = jax.random.key_data(key)
    out_shape = jax.ShapeDtypeStruct(jnp.shape(num_users) + (dim,), jnp.float32)
    counts = jnp.asarray(num_users, jnp.int32)
    if b is not None and p is not None:  # static numbers: used exactly (p in float64)
        fn = lambda kw, c: _host_centred_binomial(kw, c, int(b), float(p), dim=dim)  # noqa: E731
        return jax.pure_callback(fn, out_shape, words, counts, vmap_method="broadcast_all")
    # per-run (traced) numbers: the host uses exactly the int32 b and float32 p the run holds
    fn = lambda kw, c, t, q: _host_centred_binomial(kw, c, t, q, dim=dim)  # noqa: E731
    return jax.pure_callback(
        fn, out_shape, words, counts, jnp.asarray(params.trials, jnp.int32),
        jnp.asarray(params.probability, jnp.float32), vmap_method="broadcast_all",
    )


def randomized_rounding(key: jax.Array, x: jax.Array, params: PvecParams, bound) -> jax.Array:
    """``xhat = floor(w g/Delta) + Bernoulli(frac)`` for ``w = x + L``, int32, same shape as ``x``."""
    g = jnp.asarray(params.granularity, jnp.float32)
    scaled = jnp.clip((x + bound) * (g / (2.0 * bound)), 0.0, g)
    low = jnp.floor(scaled)
    up = jax.random.uniform(key, x.shape) < (scaled - low)
    return low.astype(jnp.int32) + up.astype(jnp.int32)


def _check_exact(num_vectors: int, params: PvecParams, max_granularity: int | None) -> int | None:
    """The static exactness check; returns the bound a traced g must respect (None if g is static)."""
    g = _static_scalar(params.granularity)
    if g is not None:
        bound, what = int(g), f"granularity={int(g)}"
    elif max_granularity is None:
        raise ValueError(
            "max_granularity=None: a traced PvecParams.granularity needs a static upper bound "
            "(max_granularity) so that the rounded sums are exact in float32"
        )
    else:
        bound = _validate.check_int("max_granularity", max_granularity, min_value=1)
        what = f"max_granularity={bound}"
    if num_vectors * bound >= _EXACT_F32:
        raise ValueError(
            f"{num_vectors} vectors x {what} >= 2^24: rounded sums would not be exact in float32; "
            "use fewer vectors per party or a smaller granularity"
        )
    return None if g is not None else bound


def pvec_user_counts(round_key: jax.Array, noise_key: jax.Array, vectors: jax.Array, mask: jax.Array,
                     params: PvecParams, bound, max_granularity: int | None = None) -> jax.Array:
    """One party's centred count report for its valid ``vectors [m, d]``.

    Returns ``sum_k (xhat_k - g/2) + (Binomial(m b, p) - m b p)`` per coordinate (float32 [d]): the part of the
    per-coordinate count of ones that this party's messages contribute, minus its public expectation offset. The
    analyzer's estimate is ``(2L/g) * sum over parties``.

    ``max_granularity`` (static) bounds a traced g (module docstring); a g
    above it makes the report NaN rather than silently inexact."""
    g_max = _check_exact(vectors.shape[0], params, max_granularity)
    xhat = randomized_rounding(round_key, vectors, params, bound)
    xhat = jnp.where(mask[:, None], xhat, 0)
    count = jnp.sum(mask.astype(jnp.int32))
    g = jnp.asarray(params.granularity, jnp.float32)
    rounded = jnp.sum(xhat, axis=0).astype(jnp.float32) - count.astype(jnp.float32) * (g / 2.0)
    report = rounded + centred_binomial(noise_key, count, params, vectors.shape[1])
    if g_max is not None:
        report = jnp.where(jnp.asarray(params.granularity) <= g_max, report, jnp.nan)
    return report


def pvec_analyze(total_counts: jax.Array, params: PvecParams, bound) -> jax.Array:
    """Analyzer on the summed centred counts: ``(Delta/g) * counts`` (the
    ``- m L`` re-centring is already inside the centred counts).

    ``total_counts``: float ``[d]`` (the users' ``pvec_user_counts`` reports summed); ``bound`` L: the
    per-coordinate bound (``Delta = 2L``). Returns the estimate of the users' vector sum, float32 ``[d]``."""
    return total_counts * (2.0 * bound / jnp.asarray(params.granularity, jnp.float32))


def pvec_sum(key: jax.Array, vectors: jax.Array, params: PvecParams, bound, mask=None,
             max_granularity: int | None = None) -> jax.Array:
    """P_vec estimate of ``sum_k vectors[k]`` for one batch of users (count level).

    ``vectors``: float ``[m, d]`` (one row per user, each coordinate in ``[-bound, bound]``); ``mask``:
    optional bool ``[m]`` (padded users report nothing); ``params``: ``PvecParams`` (g, b, p, traced or
    not). Returns float32 ``[d]``."""
    mask = jnp.ones(vectors.shape[:1], bool) if mask is None else mask
    k_round, k_noise = jax.random.split(key)
    report = pvec_user_counts(k_round, k_noise, vectors, mask, params, bound, max_granularity)
    return pvec_analyze(report, params, bound)
