"""Batch selection beyond Poisson, with static shapes: balls-in-bins, cyclic Poisson, b-min-separation.

Every sampler here keeps the contract of ``dpjax.primitives.sampling`` (``draw(key, size, n_max, round_index,
silo_state) -> (idx int32 [capacity], mask bool [capacity], overflow bool scalar)``, ``draw_weights`` -> ``[n_max]``
float32 multiplicities and the flag, ``init_silo``, ``padded_size``, ``validate``, ``scheme``):

==================  ==============================================================  =================
sampler             law of round t's batch                                          accounting name
==================  ==============================================================  =================
``BallsInBins``     epoch e = t // B: every record put in one of B bins uniformly at  balls-in-bins
                    random (independently per epoch); round t takes bin t mod B
``CyclicPoisson``   records split once into b groups (a uniform balanced partition);  cyclic-poisson
                    round t: each record of group t mod b independently w.p. q
``MinSeparation``   the same b groups; round t takes all of group t mod b             min-separation
==================  ==============================================================  =================

References: Chua, Ghazi, Harrison, Leeman, Kamath, Kumar, Manurangsi, Sinha & Zhang, "Balls-and-Bins Sampling for
DP-SGD", AISTATS 2025 (Algorithm 1's batch sampler); Feldman & Shenfeld, "Privacy amplification by random
allocation", 2025 (the same law, "random allocation"); Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu,
"(Amplified) Banded Matrix Factorization: A unified approach to private training", NeurIPS 2023 (cyclic Poisson,
Section 4, and (k, b)-participation / b-min-separation, Definition 2).

Static shapes and overflow: a balls-in-bins bin and a cyclic-Poisson batch have random sizes, gathered into a fixed
buffer of ``capacity`` rows (``padded_size``). A batch that does not fit raises ``overflow`` (the engine refuses such
runs); the accountant (``dpjax.accounting.sampling_bins``) charges the exact binomial probability that any batch of
the run overflows to delta, so the guarantee stays honest. ``capacity = n_max`` can never overflow (charge 0). The
default capacity is ``binomial_capacity`` of the largest possible expected batch at a per-batch tail of 1e-15 (a
Bernstein bound, so the exact tail the accountant charges is smaller still). ``MinSeparation``'s groups are balanced,
so its buffer of ``ceil(n_max / b)`` rows never overflows.

Public numbers: the number of bins / groups is public. Left as None it is read from the silo's size
(``max(1, size // batch_size)``), which is public only under replace-one; the accounting event refuses that under
add/remove (as Poisson's undeclared rate is refused).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from dpjax import _validate

#: Per-batch overflow tail the default capacities are sized for (the accountant charges the exact tail).
DEFAULT_TAIL = 1e-15


def binomial_capacity(mean_bound: float, tail: float = DEFAULT_TAIL) -> int:
    """A buffer size ``c`` with ``P(X > c) <= tail`` for every binomial ``X`` of mean ``<= mean_bound`` (a scalar).

    Bernstein's inequality: ``P(X - mu >= t) <= exp(-t^2 / (2 (mu + t / 3)))`` (variance <= mean for a binomial), so
    ``t = L / 3 + sqrt(L^2 / 9 + 2 m L)`` with ``L = log(1 / tail)``, ``m = mean_bound`` gives ``c = ceil(m + t)``."""
    m = _validate.check_nonnegative("mean_bound", mean_bound)
    tail = _validate.check_open_unit("tail", tail)
    big_l = math.log(1.0 / tail)
    t = big_l / 3.0 + math.sqrt(big_l * big_l / 9.0 + 2.0 * m * big_l)
    return max(1, int(math.ceil(m + t)))


def balls_in_bins_assignment(key: jax.Array, size, n_max: int, num_bins) -> jax.Array:
    """Each real row's bin, uniform over ``[0, num_bins)`` and independent across rows: int32 ``[n_max]``.

    Rows ``size .. n_max - 1`` are padding and get ``num_bins`` (no bin). ``num_bins`` may be traced (an int32
    scalar, e.g. ``size // K``)."""
    _validate.check_int("n_max", n_max, min_value=1)
    _validate.check_if_concrete(_validate.check_int, "num_bins", num_bins, min_value=1)
    bins = jax.random.randint(key, (n_max,), 0, num_bins)
    return jnp.where(jnp.arange(n_max) < size, bins, num_bins).astype(jnp.int32)


def balanced_groups(key: jax.Array, size, n_max: int, num_groups) -> jax.Array:
    """A uniformly random balanced partition of the ``size`` real rows into ``num_groups`` groups: int32 ``[n_max]``.

    Row i's group is ``rank_i mod num_groups`` for a uniform random ranking, so every group holds
    ``floor(size / b)`` or ``ceil(size / b)`` rows; padding rows get ``num_groups`` (no group)."""
    _validate.check_int("n_max", n_max, min_value=1)
    _validate.check_if_concrete(_validate.check_int, "num_groups", num_groups, min_value=1)
    valid = jnp.arange(n_max) < size
    scores = jnp.where(valid, jax.random.uniform(key, (n_max,)), 2.0)  # padding ranks last
    ranks = jnp.argsort(jnp.argsort(scores))
    return jnp.where(valid, ranks % num_groups, num_groups).astype(jnp.int32)


def gather_chosen(chosen: jax.Array, capacity: int):
    """The rows where ``chosen`` (bool ``[n_max]``) holds, gathered into a static buffer.

    Returns ``(idx int32 [capacity], mask bool [capacity], overflow bool scalar)``: ``overflow`` is true when more
    than ``capacity`` rows were chosen (the buffer then holds the first ``capacity``)."""
    _validate.check_int("capacity", capacity, min_value=1)
    count = jnp.sum(chosen)
    (idx,) = jnp.nonzero(chosen, size=capacity, fill_value=0)
    return idx.astype(jnp.int32), jnp.arange(capacity) < count, count > capacity


def _groups_of(num, size, batch_size):
    """``num`` (static), or ``max(1, size // batch_size)`` read from the (public, replace-one) size."""
    if num is not None:
        return num
    return jnp.maximum(1, jnp.asarray(size) // batch_size)


@dataclasses.dataclass(frozen=True)
class BallsInBins:
    """Balls-and-bins batches (Chua et al., AISTATS 2025, Algorithm 1; Feldman & Shenfeld 2025's random allocation).

    Each epoch ``e = t // B`` every record is placed in exactly one of the ``B = num_bins`` bins uniformly at random
    (from the silo's run key folded with ``e``, held as the silo state); round t uses bin ``t mod B``. So every record
    is in exactly one batch of every full epoch. ``batch_size`` K is the public expected batch (the divisor).

    Args:
      batch_size: K, the expected batch (``n / B``).
      num_bins: B, batches per epoch (public); None: ``max(1, size // K)`` of each silo (replace-one only).
      capacity: the static buffer; None: ``binomial_capacity`` of the largest expected batch (``n_max / B``, or
        ``2K`` with B read from the size, since ``s / (s // K) < 2K``); ``n_max``: never overflows.

    Shapes: ``draw`` -> ``idx`` int32 ``[capacity]``, ``mask`` bool ``[capacity]``, ``overflow`` bool scalar;
    ``draw_weights`` -> ``[n_max]`` float32 0/1 weights and False (no buffer, no overflow)."""

    batch_size: int
    num_bins: int | None = None
    capacity: int | None = None
    scheme = "balls-in-bins"
    weights_by_scatter = False

    def __post_init__(self):
        _validate.check_int("batch_size", self.batch_size, min_value=1)
        if self.num_bins is not None:
            _validate.check_int("num_bins", self.num_bins, min_value=1)
        if self.capacity is not None:
            _validate.check_int("capacity", self.capacity, min_value=1)

    def validate(self, min_size: int, num_rounds: int) -> None:
        if self.batch_size > min_size:
            raise ValueError(f"batch_size={self.batch_size} must be <= the smallest silo size n={min_size}")

    def padded_size(self, n_max: int) -> int:
        if self.capacity is not None:
            return min(self.capacity, n_max)
        mean = n_max / self.num_bins if self.num_bins is not None else 2.0 * self.batch_size
        return min(binomial_capacity(mean), n_max)

    def init_silo(self, key, size, n_max):
        """The silo's epoch key (each epoch's assignment is this key folded with the epoch): a PRNG key."""
        return key

    def assignment(self, silo_state, size, n_max: int, epoch) -> jax.Array:
        """Epoch ``epoch``'s bin of every row: int32 ``[n_max]`` (padding: B)."""
        return balls_in_bins_assignment(jax.random.fold_in(silo_state, epoch), size, n_max,
                                        _groups_of(self.num_bins, size, self.batch_size))

    def _chosen(self, size, n_max, round_index, silo_state):
        num_bins = _groups_of(self.num_bins, size, self.batch_size)
        bins = self.assignment(silo_state, size, n_max, round_index // num_bins)
        return bins == round_index % num_bins

    def draw(self, key, size, n_max, round_index, silo_state):
        del key  # the epoch's assignment comes from the silo state, so a record is in one bin an epoch
        return gather_chosen(self._chosen(size, n_max, round_index, silo_state), self.padded_size(n_max))

    def draw_weights(self, key, size, n_max, round_index, silo_state):
        del key
        return self._chosen(size, n_max, round_index, silo_state).astype(jnp.float32), jnp.asarray(False)


@dataclasses.dataclass(frozen=True)
class CyclicPoisson:
    """Cyclic Poisson sampling (Choquette-Choo et al., NeurIPS 2023, Section 4): the records are split once into
    ``b = num_groups`` balanced groups (a uniform partition from the run key, the silo state); round t Poisson-samples
    group ``t mod b``: each of its records independently w.p. ``q``.

    Args:
      batch_size: K, the public expected batch (the divisor).
      num_groups: b (public); 1 is plain Poisson sampling.
      sampling_rate: q, the public rate; None: ``K b / size`` (replace-one only: the size is then public).
      capacity: the static buffer; None: ``binomial_capacity`` of the largest expected batch: ``q ceil(n_max / b)``
        with a declared q, else ``K + 1`` (``K b ceil(s / b) / s <= K + K b / s <= K + 1`` as ``K b <= s``).

    Shapes: ``draw`` -> ``idx`` int32 ``[capacity]``, ``mask`` bool ``[capacity]``, ``overflow`` bool scalar;
    ``draw_weights`` -> ``[n_max]`` float32 0/1 weights and False."""

    batch_size: int
    num_groups: int = 1
    sampling_rate: float | None = None
    capacity: int | None = None
    scheme = "cyclic-poisson"
    weights_by_scatter = False

    def __post_init__(self):
        _validate.check_int("batch_size", self.batch_size, min_value=1)
        _validate.check_int("num_groups", self.num_groups, min_value=1)
        if self.sampling_rate is not None:
            _validate.check_probability("sampling_rate", self.sampling_rate, allow_zero=False)
        if self.capacity is not None:
            _validate.check_int("capacity", self.capacity, min_value=1)

    def validate(self, min_size: int, num_rounds: int) -> None:
        if self.batch_size * self.num_groups > min_size:
            raise ValueError(f"batch_size={self.batch_size} x num_groups={self.num_groups} must be <= the smallest "
                             f"silo size n={min_size}")

    def padded_size(self, n_max: int) -> int:
        if self.capacity is not None:
            return min(self.capacity, n_max)
        group = -(-n_max // self.num_groups)  # the largest group
        mean = self.batch_size + 1 if self.sampling_rate is None else self.sampling_rate * group
        return min(binomial_capacity(mean), group)

    def inclusion_probability(self, size):
        """q: the declared rate, else ``K b / size`` (a record of the round's group joins w.p. q)."""
        if self.sampling_rate is not None:
            return self.sampling_rate
        return jnp.minimum(1.0, self.batch_size * self.num_groups / size)

    def init_silo(self, key, size, n_max):
        """The fixed group of every row: int32 ``[n_max]`` (padding: b)."""
        return balanced_groups(key, size, n_max, self.num_groups)

    def _chosen(self, key, size, n_max, round_index, groups):
        coin = jax.random.uniform(key, (n_max,)) < self.inclusion_probability(size)
        return (groups == round_index % self.num_groups) & coin

    def draw(self, key, size, n_max, round_index, silo_state):
        return gather_chosen(self._chosen(key, size, n_max, round_index, silo_state), self.padded_size(n_max))

    def draw_weights(self, key, size, n_max, round_index, silo_state):
        return self._chosen(key, size, n_max, round_index, silo_state).astype(jnp.float32), jnp.asarray(False)


@dataclasses.dataclass(frozen=True)
class MinSeparation:
    """b-min-separation participation (Choquette-Choo et al., NeurIPS 2023, Definition 2 with the cyclic order of their
    multi-epoch setting): the records are split once into ``b = num_groups`` balanced groups and round t takes all of
    group ``t mod b``, so every record takes part exactly every b rounds (at most ``ceil(T / b)`` times in T rounds, any
    two participations >= b apart). Deterministic given the partition: no amplification.

    Args:
      batch_size: K, the public batch (the divisor).
      num_groups: b; None: ``max(1, size // K)`` of each silo (replace-one only).

    The buffer is the largest group, ``ceil(n_max / b)`` rows (or ``2K`` with b read from the size, since
    ``ceil(s / (s // K)) <= 2K``): it never overflows.

    Shapes: ``draw`` -> ``idx`` int32 ``[capacity]``, ``mask`` bool ``[capacity]``, ``overflow`` bool scalar (always
    False); ``draw_weights`` -> ``[n_max]`` float32 0/1 weights and False."""

    batch_size: int
    num_groups: int | None = None
    scheme = "min-separation"
    weights_by_scatter = False

    def __post_init__(self):
        _validate.check_int("batch_size", self.batch_size, min_value=1)
        if self.num_groups is not None:
            _validate.check_int("num_groups", self.num_groups, min_value=1)

    def validate(self, min_size: int, num_rounds: int) -> None:
        if self.batch_size > min_size:
            raise ValueError(f"batch_size={self.batch_size} must be <= the smallest silo size n={min_size}")

    def padded_size(self, n_max: int) -> int:
        if self.num_groups is None:
            return min(2 * self.batch_size, n_max)
        return -(-n_max // self.num_groups)

    def init_silo(self, key, size, n_max):
        """The fixed group of every row: int32 ``[n_max]`` (padding: b)."""
        return balanced_groups(key, size, n_max, _groups_of(self.num_groups, size, self.batch_size))

    def _chosen(self, size, round_index, groups):
        return groups == round_index % _groups_of(self.num_groups, size, self.batch_size)

    def draw(self, key, size, n_max, round_index, silo_state):
        del key
        return gather_chosen(self._chosen(size, round_index, silo_state), self.padded_size(n_max))

    def draw_weights(self, key, size, n_max, round_index, silo_state):
        del key
        return self._chosen(size, round_index, silo_state).astype(jnp.float32), jnp.asarray(False)

