"""Silo availability and per-silo minibatch sampling, with static shapes.

Everything here is shape-static so that it runs inside ``jit``/``vmap``/``scan``: a silo holds ``n_max`` padded rows of
which the first ``size`` are real, and every sampler returns a fixed number of indices plus a validity mask.

Availability (ISRL-DP paper, Assumption 1.4): in each round a uniformly random subset of ``M_r`` silos is available;
``FullAvailability`` (``M_r = N``), ``FixedAvailability(M)`` and ``RandomAvailability(pmf)`` (``M_r`` drawn from a
public pmf each round).

Samplers (what the accountant calls the *sampling scheme*):

=====================  ==========================================  ===============
sampler                 law of the batch                           accounting name
=====================  ==========================================  ===============
``WithReplacement``     K i.i.d. uniform indices                    with-replacement
``WithoutReplacement``  K distinct uniform indices                  without-replacement
``OnePass``             disjoint blocks of one per-silo permutation one-pass
``Poisson``             each record independently w.p. q            poisson
``FullBatch``           every record                                full
=====================  ==========================================  ===============

The privacy of a round depends on the sampler, so samplers carry a ``scheme``
string that the algorithms copy into the privacy schedule.

Poisson's rate q is PUBLIC: ``Poisson(K, sampling_rate=q)`` draws every record w.p. the declared ``q`` whatever the
silo's size, and the selection part hands that same ``q`` to the accountant. Without a declared rate it draws at
``K / size``, the silo's actual size: valid only under replace-one, where the size is public -- under add/remove a
neighbour with one record more would sample every other record at ``K / (size + 1)``, a data-dependent law the
accountant does not see, so the parts and families refuse that combination (``sampling_rate`` is required).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from dpjax import _validate

# ----------------------------------------------------------------------------- Silo availability
def _mask_of_size(key: jax.Array, num_silos: int, count) -> jax.Array:
    """A uniformly random {0,1}^N mask with exactly ``count`` ones."""
    scores = jax.random.uniform(key, (num_silos,))
    ranks = jnp.argsort(jnp.argsort(scores))  # a uniform random permutation
    return ranks < count


def _ids_of_size(key: jax.Array, num_silos: int, count: int) -> jax.Array:
    """The ``count`` silo ids where ``_mask_of_size`` (same key) is true, ascending."""
    scores = jax.random.uniform(key, (num_silos,))
    return jnp.sort(jnp.argsort(scores)[:count])


@dataclasses.dataclass(frozen=True)
class FullAvailability:
    """Every silo participates in every round (M_r = N, cross-silo default).

    ``sample(key, num_silos) -> bool [N]`` (all true); ``sample_ids(key, num_silos) -> int32 [N]``."""

    def validate(self, num_silos: int) -> None:
        _validate.check_int("num_silos", num_silos, min_value=1)

    def sample(self, key: jax.Array, num_silos: int) -> jax.Array:
        del key
        return jnp.ones((num_silos,), bool)

    def sample_ids(self, key: jax.Array, num_silos: int) -> jax.Array:
        """The available silos' ids (static count N), ascending."""
        del key
        return jnp.arange(num_silos)

    def expected_inverse(self, num_silos: int) -> float:
        """E[1/M_r]."""
        return 1.0 / num_silos


@dataclasses.dataclass(frozen=True)
class FixedAvailability:
    """A uniformly random subset of exactly ``num_available`` silos per round.

    ``sample(key, num_silos) -> bool [N]`` (exactly M true); ``sample_ids(key, num_silos) -> int32 [M]``."""

    num_available: int

    def __post_init__(self):
        _validate.check_int("num_available", self.num_available, min_value=1)

    def validate(self, num_silos: int) -> None:
        _validate.check_int("num_silos", num_silos, min_value=1)
        _validate.check_le("num_available", self.num_available, "num_silos", num_silos)

    def sample(self, key: jax.Array, num_silos: int) -> jax.Array:
        return _mask_of_size(key, num_silos, self.num_available)

    def sample_ids(self, key: jax.Array, num_silos: int) -> jax.Array:
        """The ids of the same subset as ``sample`` (static count M), ascending.

        Lets a round step compute only the M available silos' messages."""
        return _ids_of_size(key, num_silos, self.num_available)

    def expected_inverse(self, num_silos: int) -> float:
        return 1.0 / self.num_available


@dataclasses.dataclass(frozen=True)
class RandomAvailability:
    """``M_r`` drawn each round from ``pmf`` over ``{1, ..., len(pmf)}``, then a
    uniformly random subset of that size (Assumption 1.4 of Lowy & Razaviyayn).

    ``pmf[m - 1] = P(M_r = m)``; it must sum to 1 and ``len(pmf)`` must equal the number of silos."""

    pmf: tuple[float, ...]

    def __post_init__(self):
        if not isinstance(self.pmf, tuple) or len(self.pmf) == 0:
            raise ValueError(f"pmf={self.pmf!r} must be a non-empty tuple of probabilities")
        for m, p in enumerate(self.pmf, start=1):
            _validate.check_probability(f"pmf[{m - 1}]", p)
        if not math.isclose(sum(self.pmf), 1.0, rel_tol=0, abs_tol=1e-9):
            raise ValueError(f"pmf={self.pmf!r} must sum to 1 (sums to {sum(self.pmf)})")

    def validate(self, num_silos: int) -> None:
        _validate.check_int("num_silos", num_silos, min_value=1)
        if len(self.pmf) != num_silos:
            raise ValueError(f"pmf has length {len(self.pmf)}; it must have num_silos={num_silos} entries")

    def sample(self, key: jax.Array, num_silos: int) -> jax.Array:
        k_count, k_subset = jax.random.split(key)
        logits = jnp.log(jnp.asarray(self.pmf, jnp.float32))
        count = jax.random.categorical(k_count, logits) + 1
        return _mask_of_size(k_subset, num_silos, count)

    def expected_inverse(self, num_silos: int) -> float:
        return sum(p / m for m, p in enumerate(self.pmf, start=1))


Availability = FullAvailability | FixedAvailability | RandomAvailability

# ----------------------------------------------------------------------------- Per-silo minibatch samplers
def sample_with_replacement(key: jax.Array, size, batch_size: int) -> jax.Array:
    """``batch_size`` i.i.d. uniform indices in ``[0, size)`` (``size >= 1``): int32 ``[batch_size]``."""
    _validate.check_int("batch_size", batch_size, min_value=1)
    _validate.check_if_concrete(_validate.check_int, "size", size, min_value=1)
    return jax.random.randint(key, (batch_size,), 0, size)


def sample_without_replacement(key: jax.Array, size, n_max: int, batch_size: int) -> jax.Array:
    """``batch_size`` distinct uniform indices in ``[0, size)`` (``size <= n_max``): int32 ``[batch_size]``.

    Top-k of i.i.d. uniform scores with padded rows scored -inf: uniform over k-subsets and much cheaper than a full
    permutation. ``batch_size <= size``: checked when ``size`` is concrete (a traced ``size`` is the caller's contract,
    checked in ``dpjax.primitives.checked`` mode), since a larger batch would return padding rows."""
    _check_subset("batch_size", batch_size, size, n_max)
    scores = jax.random.uniform(key, (n_max,))
    scores = jnp.where(jnp.arange(n_max) < size, scores, -jnp.inf)
    _, idx = jax.lax.top_k(scores, batch_size)
    return idx


def _check_sizes(size, n_max) -> None:
    """``n_max >= 1`` (static) and a concrete ``size`` in ``[0, n_max]``."""
    _validate.check_int("n_max", n_max, min_value=1)
    _validate.check_if_concrete(_validate.check_int, "size", size, min_value=0, max_value=int(n_max))


def _check_subset(name: str, k, size, n_max) -> None:
    """A ``k``-subset of ``size`` real records (``k <= size <= n_max``); concrete values only, traced ones in
    checked mode."""
    _check_sizes(size, n_max)
    if isinstance(k, bool):
        raise ValueError(f"{name}={k!r} must be an integer")
    _validate.check_if_concrete(_validate.check_int, name, k, min_value=1, max_value=int(n_max))
    k_value, size_value = _validate.concrete_scalar(k), _validate.concrete_scalar(size)
    if k_value is not None and size_value is not None and k_value > size_value:
        raise ValueError(f"{name}={k_value!r} must be <= size={size_value!r} (the number of real records): a "
                         "larger batch would hold padding rows")
    if _validate.checking_traced() and (k_value is None or size_value is None):
        import jax.numpy as jnp
        from jax.experimental import checkify

        checkify.check(jnp.asarray(k) <= jnp.asarray(size), f"{name}={{k}} must be <= size={{size}} (the number "
                       "of real records)", k=jnp.asarray(k), size=jnp.asarray(size))


def _kth_smallest(values: jax.Array, valid: jax.Array, k) -> jax.Array:
    """Smallest uint32 ``t`` with ``#{valid & values <= t} >= k`` (bisection, 32 steps)."""

    def body(_, bounds):
        lo, hi = bounds
        mid = lo + (hi - lo) // 2
        enough = jnp.sum(valid & (values <= mid)) >= k
        return jnp.where(enough, lo, mid + 1), jnp.where(enough, mid, hi)

    _, hi = jax.lax.fori_loop(0, 32, body, (jnp.uint32(0), jnp.uint32(0xFFFFFFFF)))
    return hi


def subset_mask_without_replacement(key: jax.Array, size, n_max: int, batch_size) -> jax.Array:
    """A uniformly random ``batch_size``-subset of ``[0, size)`` as a bool mask ``[n_max]``.

    Each record gets a random 64-bit score (two uint32 words); the subset is the ``batch_size`` smallest scores, found
    by bisection on the first word and, among records tied at the threshold, on the second. Exact (a uniform k-subset)
    unless two records share all 64 bits, which has probability below ``n_max^2 / 2^65`` (< 1e-12 for n_max <= 10^4); in
    that event the mask may hold more than ``batch_size`` ones, never fewer. Needs only compares and sums (no sort, no
    gather), which is much faster than ``top_k`` on CPU."""
    _check_subset("batch_size", batch_size, size, n_max)
    k_first, k_second = jax.random.split(key)
    valid = jnp.arange(n_max) < size
    first = jax.random.bits(k_first, (n_max,), jnp.uint32)
    second = jax.random.bits(k_second, (n_max,), jnp.uint32)
    threshold = _kth_smallest(first, valid, batch_size)
    below = valid & (first < threshold)
    tied = valid & (first == threshold)
    needed = batch_size - jnp.sum(below)
    second_threshold = _kth_smallest(second, tied, needed)
    return below | (tied & (second <= second_threshold))


def valid_first_permutation(key: jax.Array, size, n_max: int) -> jax.Array:
    """A uniform permutation of ``[0, size)`` followed by the padded rows: int32 ``[n_max]``."""
    _check_sizes(size, n_max)
    scores = jax.random.uniform(key, (n_max,))
    scores = jnp.where(jnp.arange(n_max) < size, scores, 2.0)  # padding sorts last
    return jnp.argsort(scores)


#: folded into a Poisson draw's key for the truncated batch's random start row (a stream apart from the coins)
TRUNCATION_STREAM = 0x74726E63


def poisson_sample(key: jax.Array, size, n_max: int, rate, max_batch_size: int, truncate: bool = False):
    """Poisson sampling: each real record joins independently w.p. ``rate``.

    Args:
      key: the PRNG key of this draw.
      size: how many records are real: rows ``0 .. size - 1`` of the padded data (an int, or a traced int such as one
        silo's size in a ``SiloData``); rows ``size .. n_max - 1`` are padding and never drawn. For an unpadded data
        set of n records, ``size = n_max = n``.
      n_max: the padded number of rows (static): the length of the index space the draw runs over.
      rate: q, each real record's inclusion probability (the accounted sampling rate).
      max_batch_size: the static length of the returned buffer, e.g. ``default_poisson_capacity(q n)``.
      truncate: truncated Poisson (Chua et al., "Scalable DP-SGD: Shuffling vs. Poisson Subsampling", NeurIPS 2024):
        the joined rows listed in cyclic row order from a uniformly random start row, the first ``max_batch_size`` of
        them kept when more join (every real record equally likely to be kept, by cyclic symmetry), and no overflow
        reported: the truncation is charged by the accountant (``dpjax.accounting.truncated_poisson``). The coins are
        the same as without it, so whenever nothing is cut the batch holds exactly the untruncated batch's records
        (the coupling the charge rests on), in another order.

    Returns ``(idx [max_batch_size], mask [max_batch_size], overflow)``; the sampled records are gathered into a
    fixed-size buffer (``jnp.nonzero`` with ``size=``) and ``mask`` marks the real ones. ``overflow`` is true when more
    than ``max_batch_size`` records were drawn, in which case the batch was truncated and the Poisson privacy analysis
    no longer applies: callers must surface it (the engine refuses such runs); with ``truncate`` it is always false.
    A concrete ``rate`` must be in [0, 1] (a traced one is checked in ``dpjax.primitives.checked`` mode)."""
    _validate.check_if_concrete(_validate.check_probability, "rate", rate)
    _check_sizes(size, n_max)
    _validate.check_int("max_batch_size", max_batch_size, min_value=1)
    chosen = (jax.random.uniform(key, (n_max,)) < rate) & (jnp.arange(n_max) < size)
    if truncate:
        # one cumulative sum gives every joined row its cyclic rank; the kept rows are scattered to their rank's slot
        # (rows in cyclic order from the start, not ascending: the same set as the untruncated batch when nothing is
        # cut, at the cost of the untruncated gather, which is a cumulative sum and a scatter too)
        rank, count = _cyclic_ranks(jax.random.fold_in(key, TRUNCATION_STREAM), chosen, size)
        slot = jnp.where(chosen & (rank <= max_batch_size), rank - 1, max_batch_size)
        idx = jnp.zeros((max_batch_size,), jnp.int32).at[slot].set(jnp.arange(n_max, dtype=jnp.int32), mode="drop")
        return idx, jnp.arange(max_batch_size) < count, jnp.asarray(False)
    count = jnp.sum(chosen)
    (idx,) = jnp.nonzero(chosen, size=max_batch_size, fill_value=0)
    mask = jnp.arange(max_batch_size) < count
    return idx, mask, count > max_batch_size


def cut_cyclic(key: jax.Array, chosen: jax.Array, size, capacity: int) -> jax.Array:
    """Truncated Poisson's cut: of the true rows of ``chosen`` (bool ``[n]``), the first ``capacity`` in cyclic row
    order from a uniformly random start row in ``[0, size)``; all of them when no more than ``capacity`` are true.
    One cumulative sum, no sort (``top_k`` over n rows costs ~20x a Poisson draw on CPU)."""
    rank, _ = _cyclic_ranks(key, chosen, size)
    return chosen & (rank <= capacity)


def _cyclic_ranks(key: jax.Array, chosen: jax.Array, size):
    """``(rank, count)``: each true row's 1-based rank among the true rows of ``chosen`` in cyclic order from a
    uniformly random start row in ``[0, size)``, and their number."""
    start = jax.random.randint(key, (), 0, jnp.maximum(size, 1))
    cum = jnp.cumsum(chosen)
    count = cum[-1]
    before = jnp.where(start > 0, cum[jnp.maximum(start - 1, 0)], 0)
    rank = jnp.where(jnp.arange(chosen.shape[0]) >= start, cum - before, cum + (count - before))
    return rank, count


def default_poisson_capacity(expected_batch_size: int) -> int:
    """Buffer size for Poisson batches: K + 6 sqrt(K) + 8 (overflow prob. < 1e-8)."""
    return int(expected_batch_size + math.ceil(6 * math.sqrt(expected_batch_size)) + 8)


@dataclasses.dataclass(frozen=True)
class _BatchSampler:
    """A minibatch sampler of ``batch_size`` K records per silo and round.

    Per silo and round: ``draw(key, size, n_max, round_index, silo_state) -> (idx, mask, overflow)`` with ``idx`` int32
    ``[K]`` row indices into the silo's padded ``[n_max, ...]`` rows (``size`` real ones), ``mask`` bool ``[K]`` and
    ``overflow`` a bool scalar; ``silo_state`` comes from ``init_silo(key, size, n_max)``. ``draw_weights`` (same
    arguments) returns the batch as a multiplicity vector over the ``n_max`` rows and the overflow flag."""

    batch_size: int

    def __post_init__(self):
        _validate.check_int("batch_size", self.batch_size, min_value=1)

    def validate(self, min_size: int, num_rounds: int) -> None:
        if self.batch_size > min_size:
            raise ValueError(
                f"batch_size={self.batch_size} must be <= the smallest silo size n={min_size}"
            )

    def padded_size(self, n_max: int) -> int:
        return self.batch_size

    def init_silo(self, key: jax.Array, size, n_max: int):
        """Per-silo state created once per run (none for most samplers)."""
        return jnp.zeros((), jnp.int32)

    # ``draw_weights`` is the gather-free form of ``draw``: the batch as a
    # multiplicity vector over all ``n_max`` rows (same law, other draws).
    # ``weights_by_scatter``: the vector is a scatter of ``draw``'s indices, so
    # gathering those K rows is always cheaper than two passes over all n_max
    # (measured: 2114 vs 1952 rounds/s single, 26.8k vs 14.4k run-rounds/s on a
    # 32-config grid, with-replacement K=444 of n=1238, d=50).
    weights_by_scatter = False


# the public samplers state the contract they share (tests/test_primitives_docs.py: every public
# primitive says what shapes it takes); written once, appended to each docstring below
_SHAPES = ("\n\nShapes (the contract of every sampler here): ``draw`` -> ``idx`` int32 ``[K]``, ``mask`` "
           "bool ``[K]``, ``overflow`` bool scalar; ``draw_weights`` -> ``[n_max]`` float32 multiplicities "
           "and the flag.")


@dataclasses.dataclass(frozen=True)
class WithReplacement(_BatchSampler):
    """K indices drawn uniformly with replacement (Algorithm 2 as printed)."""

    scheme = "with-replacement"
    weights_by_scatter = True

    def draw(self, key, size, n_max, round_index, silo_state):
        idx = sample_with_replacement(key, size, self.batch_size)
        return idx, jnp.ones((self.batch_size,), bool), jnp.asarray(False)

    def draw_weights(self, key, size, n_max, round_index, silo_state):
        idx = sample_with_replacement(key, size, self.batch_size)
        return jnp.zeros((n_max,), jnp.float32).at[idx].add(1.0), jnp.asarray(False)


@dataclasses.dataclass(frozen=True)
class WithoutReplacement(_BatchSampler):
    """K distinct indices per round (fresh draw every round)."""

    scheme = "without-replacement"

    def draw(self, key, size, n_max, round_index, silo_state):
        idx = sample_without_replacement(key, size, n_max, self.batch_size)
        return idx, jnp.ones((self.batch_size,), bool), jnp.asarray(False)

    def draw_weights(self, key, size, n_max, round_index, silo_state):
        mask = subset_mask_without_replacement(key, size, n_max, self.batch_size)
        return mask.astype(jnp.float32), jnp.asarray(False)


@dataclasses.dataclass(frozen=True)
class OnePass(_BatchSampler):
    """Round r uses block r of a per-silo permutation: every record at most once."""

    scheme = "one-pass"
    weights_by_scatter = True

    def validate(self, min_size: int, num_rounds: int) -> None:
        super().validate(min_size, num_rounds)
        if num_rounds * self.batch_size > min_size:
            raise ValueError(
                f"num_rounds={num_rounds} times batch_size={self.batch_size} must be <= the smallest "
                f"silo size n={min_size} for one-pass sampling (R <= floor(n/K))"
            )

    def init_silo(self, key, size, n_max):
        return valid_first_permutation(key, size, n_max)

    def draw(self, key, size, n_max, round_index, silo_state):
        del key
        start = round_index * self.batch_size
        idx = jax.lax.dynamic_slice(silo_state, (start,), (self.batch_size,))
        mask = (start + jnp.arange(self.batch_size)) < size
        return idx, mask, jnp.asarray(False)

    def draw_weights(self, key, size, n_max, round_index, silo_state):
        idx, mask, overflow = self.draw(key, size, n_max, round_index, silo_state)
        return jnp.zeros((n_max,), jnp.float32).at[idx].add(mask.astype(jnp.float32)), overflow


for _sampler in (WithReplacement, WithoutReplacement, OnePass):
    _sampler.__doc__ += _SHAPES


@dataclasses.dataclass(frozen=True)
class Poisson(_BatchSampler):
    """Each record joins w.p. ``sampling_rate`` (the public q), or ``batch_size / size`` when no rate is
    declared (replace-one only: the silo's size is then public). ``batch_size`` K is the public
    expected batch (the minibatch divisor and the buffer size).

    ``draw(...)`` returns ``idx`` int32 ``[capacity]`` (the joined rows first), ``mask`` bool ``[capacity]``
    and ``overflow`` (a bool scalar: more joined than ``capacity``).

    ``capacity`` is the static buffer size (default E + 6 sqrt(E) + 8 for the expected batch of a
    full padded silo, E = max(K, ceil(q n_max)); E = K without a declared rate)."""

    capacity: int | None = None
    sampling_rate: float | None = None
    scheme = "poisson"

    def __post_init__(self):
        super().__post_init__()
        if self.capacity is not None:
            _validate.check_int("capacity", self.capacity, min_value=self.batch_size)
        if self.sampling_rate is not None:
            _validate.check_probability("sampling_rate", self.sampling_rate, allow_zero=False)

    def padded_size(self, n_max: int) -> int:
        expected = self.batch_size if self.sampling_rate is None else max(self.batch_size, math.ceil(self.sampling_rate * n_max))
        cap = self.capacity or default_poisson_capacity(expected)
        return min(cap, n_max)

    def inclusion_probability(self, size):
        """Each real record's probability of joining a batch: the declared rate, else K / size."""
        return self.batch_size / size if self.sampling_rate is None else self.sampling_rate

    def draw(self, key, size, n_max, round_index, silo_state):
        return poisson_sample(key, size, n_max, self.inclusion_probability(size), self.padded_size(n_max))

    def draw_weights(self, key, size, n_max, round_index, silo_state):
        # No buffer, so no overflow: the exact Poisson batch.
        rate = self.inclusion_probability(size)
        chosen = (jax.random.uniform(key, (n_max,)) < rate) & (jnp.arange(n_max) < size)
        return chosen.astype(jnp.float32), jnp.asarray(False)


@dataclasses.dataclass(frozen=True)
class FullBatch:
    """Every record of the silo, every round (gradient descent).

    ``draw(...) -> (arange(n_max) int32 [n_max], mask bool [n_max] (the ``size`` real rows), False)``."""

    scheme = "full"

    def validate(self, min_size: int, num_rounds: int) -> None:
        return None

    def padded_size(self, n_max: int) -> int:
        return n_max

    def init_silo(self, key, size, n_max):
        return jnp.zeros((), jnp.int32)

    def draw(self, key, size, n_max, round_index, silo_state):
        del key
        return jnp.arange(n_max), jnp.arange(n_max) < size, jnp.asarray(False)

    def draw_weights(self, key, size, n_max, round_index, silo_state):
        del key
        return (jnp.arange(n_max) < size).astype(jnp.float32), jnp.asarray(False)


Sampler = WithReplacement | WithoutReplacement | OnePass | Poisson | FullBatch

SAMPLERS = {
    "with-replacement": WithReplacement,
    "without-replacement": WithoutReplacement,
    "one-pass": OnePass,
    "poisson": Poisson,
}
from dpjax.primitives import sampling_bins as _bins  # noqa: E402  (balls-in-bins, cyclic Poisson, min-separation)

SAMPLERS["balls-in-bins"] = _bins.BallsInBins
SAMPLERS["cyclic-poisson"] = _bins.CyclicPoisson
SAMPLERS["min-separation"] = _bins.MinSeparation


def make_sampler(scheme: str, batch_size: int | None = None, sampling_rate: float | None = None) -> Sampler:
    """Builds a sampler from its accounting name (``"full"``: every record, so no ``batch_size``);
    ``sampling_rate``: Poisson's public inclusion probability q (None: K / the silo's size, replace-one only)."""
    if sampling_rate is not None and scheme != "poisson":
        raise ValueError(f"sampling_rate={sampling_rate!r} is Poisson's public rate; sampling={scheme!r} draws fixed-size "
                         "batches and takes none")
    if scheme == "poisson":
        return Poisson(batch_size, sampling_rate=sampling_rate)
    if scheme == "full":
        if batch_size is not None:
            raise ValueError(f"batch_size={batch_size!r} must be None with sampling='full' (every record is used "
                             "every round); choose another sampling scheme to use batches")
        return FullBatch()
    _validate.check_choice("sampling", scheme, tuple(SAMPLERS) + ("full",))
    return SAMPLERS[scheme](batch_size)
