"""Truncated Poisson sampling: fixed-size batches from Poisson draws (Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha &
Zhang, "Scalable DP-SGD: Shuffling vs. Poisson Subsampling", NeurIPS 2024, Section 4 and Figure 2: every record
joins independently w.p. q, a batch of more than B records is cut to a uniformly random B of them, a smaller one is
padded with masked dummies of weight 0).

The batch has the static size B (``capacity``) whatever the draw, so it runs inside ``jit``/``scan`` without the
overflow flag of `dpjax.primitives.sampling.Poisson`: truncation is part of this mechanism and is accounted for
(`dpjax.accounting.truncated_poisson`: the probability that a Poisson batch exceeds B, summed over rounds, is charged
to delta). This sampler is the opt-in form with a capacity you choose (``scheme = "truncated-poisson"``, a uniformly
random subset kept); the default Poisson selection of DP-SGD, DP-SGD-General and user-level DP-SGD is
``dpjax.primitives.sampling.poisson_sample(..., truncate=True)`` at a capacity whose charge is negligible.

Each real record's inclusion probability is q E[min(1, B / (1 + K'))], K' ~ Bin(size - 1, q)
(`inclusion_probability`, exact).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from dpjax import _validate

__all__ = ["TruncatedPoisson", "default_capacity", "truncated_poisson_sample"]


def truncated_poisson_sample(key: jax.Array, size, n_max: int, rate, capacity: int):
    """One truncated Poisson batch: ``(idx int32 [capacity], mask bool [capacity], count)``.

    Every real row (``0 .. size - 1`` of ``n_max``) joins w.p. ``rate``; when more than ``capacity`` join, a uniformly
    random ``capacity`` of them are kept (the joined rows ranked by independent uniform scores). ``count`` is the
    untruncated Poisson batch size (for monitoring only: it is not part of the released batch)."""
    _validate.check_if_concrete(_validate.check_probability, "rate", rate)
    n_max = _validate.check_int("n_max", n_max, min_value=1)
    _validate.check_int("capacity", capacity, min_value=1, max_value=n_max)
    # a size above n_max would read rows past the padded array as real (jnp.arange(n_max) < size is then all True)
    _validate.check_if_concrete(_validate.check_int, "size", size, min_value=0, max_value=n_max)
    k_join, k_rank = jax.random.split(key)
    chosen = (jax.random.uniform(k_join, (n_max,)) < rate) & (jnp.arange(n_max) < size)
    # rank the joined rows by fresh uniform scores: the first `capacity` are a uniform subset of them
    scores = jnp.where(chosen, jax.random.uniform(k_rank, (n_max,)), 2.0)
    _, idx = jax.lax.top_k(-scores, capacity)
    count = jnp.sum(chosen)
    mask = jnp.arange(capacity) < jnp.minimum(count, capacity)
    return idx.astype(jnp.int32), mask, count


@dataclasses.dataclass(frozen=True)
class TruncatedPoisson:
    """Poisson at the public rate ``sampling_rate`` q, truncated at and padded to ``capacity`` B.

    ``batch_size`` is the public expected batch (the minibatch divisor, as for `Poisson`). Shapes: ``draw`` ->
    ``idx`` int32 ``[B]``, ``mask`` bool ``[B]``, ``overflow`` bool scalar (always False: truncation is accounted);
    ``draw_weights`` -> ``[n_max]`` float32 multiplicities and the flag."""

    batch_size: int
    sampling_rate: float
    capacity: int
    scheme = "truncated-poisson"
    weights_by_scatter = True

    def __post_init__(self):
        _validate.check_int("batch_size", self.batch_size, min_value=1)
        _validate.check_probability("sampling_rate", self.sampling_rate, allow_zero=False)
        _validate.check_int("capacity", self.capacity, min_value=1)
        if self.capacity < self.batch_size:  # most batches would be cut: the truncation term would exceed any delta
            raise ValueError(f"capacity={self.capacity!r} must be >= batch_size={self.batch_size!r}, the expected "
                             "batch (default_capacity gives one whose truncation is negligible)")

    def validate(self, min_size: int, num_rounds: int) -> None:
        if self.capacity > min_size:
            raise ValueError(f"capacity={self.capacity} must be <= the smallest silo size n={min_size}")

    def padded_size(self, n_max: int) -> int:
        return self.capacity

    def init_silo(self, key, size, n_max):
        return jnp.zeros((), jnp.int32)

    def inclusion_probability(self, size: int) -> float:
        """Exact Pr[a given real record is in the batch] = q E[min(1, B / (1 + K'))], K' ~ Bin(size - 1, q)."""
        from scipy import stats

        size = _validate.check_int("size", size, min_value=1)
        k = range(size)
        pmf = stats.binom.pmf(list(k), size - 1, self.sampling_rate)
        return float(self.sampling_rate * sum(p * min(1.0, self.capacity / (1 + j)) for j, p in zip(k, pmf)))

    def draw(self, key, size, n_max, round_index, silo_state):
        idx, mask, _ = truncated_poisson_sample(key, size, n_max, self.sampling_rate, self.capacity)
        return idx, mask, jnp.asarray(False)

    def draw_weights(self, key, size, n_max, round_index, silo_state):
        idx, mask, overflow = self.draw(key, size, n_max, round_index, silo_state)
        return jnp.zeros((n_max,), jnp.float32).at[idx].add(mask.astype(jnp.float32)), overflow


def default_capacity(expected_batch_size: float, num_rounds: int, tail: float = 1e-12) -> int:
    """A capacity B whose normal-approximate per-run truncation mass is about ``tail`` (a starting point only: the
    certificate uses the exact binomial tail): E + z sqrt(E) with z the normal quantile of tail / R. ``tail`` in
    (0, 1) (0 would ask for an infinite capacity), ``num_rounds`` >= 1, ``expected_batch_size`` > 0."""
    from scipy import stats

    expected = _validate.check_positive("expected_batch_size", expected_batch_size)
    rounds = _validate.check_int("num_rounds", num_rounds, min_value=1)
    tail = _validate.check_open_unit("tail", tail)
    z = float(stats.norm.isf(tail / rounds))
    return int(math.ceil(expected + z * math.sqrt(expected))) + 1
