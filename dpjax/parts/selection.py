"""Batch selection parts: which silos report and which of their records each round uses.

A batch selection is a part of the one signature (``dpjax.engine.roles``): ``init(params, ctx)`` (its state from
``ctx.data`` and the run key ``ctx.key``) and ``update(data, state, ctx) -> (Batch, state)``, the first of the round;
its host-side ``event(silo_sizes)`` tells the accountant the sampling scheme, the batch sizes and the privacy unit.
Draws come from the round key's ``"availability"`` and ``"sampling"`` streams (``dpjax.keys``), per-silo state (one-pass
permutations) from the run key's ``"permutation"`` stream.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from dpjax import keys
from dpjax.accounting import truncated_poisson
from dpjax.accounting.events import SelectionEvent, SubsetSelectionEvent
from dpjax.engine import silo_sharding
from dpjax.engine.roles import Batch, Context, Stateless
from dpjax.primitives import sampling as sampling_lib


def available_silos(availability, key: jax.Array, num_silos: int):
    """This round's participating silos: ``(silo_ids, available)``.

    With a static count (``FullAvailability``, ``FixedAvailability``) returns the ``[M]`` ids and an all-true mask over
    them, so a round step computes only the available silos' messages. With a random count (``RandomAvailability``)
    returns ``(None, mask [N])``: all N silos are computed and the mask zeroes the unavailable ones. Either way the
    subset comes from the round's ``"availability"`` stream."""
    avail_key = keys.stream_key(key, "availability")
    if silo_sharding.sharded() and isinstance(availability, sampling_lib.FullAvailability):
        # Every silo, in order: ``silo_ids = arange(N)`` would make each silo's rows a gather across
        # the sharded silo axis, which the partitioner runs as an all-gather of the data (every
        # device then computes every silo). None selects the same silos without a gather.
        return None, keys.over_silos(lambda n: availability.sample(avail_key, n), num_silos)
    if hasattr(availability, "sample_ids"):
        silo_ids = availability.sample_ids(avail_key, num_silos)
        return silo_ids, jnp.ones(silo_ids.shape, bool)
    return None, keys.over_silos(lambda n: availability.sample(avail_key, n), num_silos)


def init_sampler_states(sampler, data, run_key: jax.Array):
    """Per-silo sampler state (e.g. one-pass permutations), from the run key."""
    silo_keys = keys.silo_keys(keys.run_stream_key(run_key, "permutation"), data.num_silos)
    return jax.vmap(sampler.init_silo, in_axes=(0, 0, None))(silo_keys, data.sizes, data.n_max)


def _select(tree, silo_ids):
    """Rows ``silo_ids`` of every leaf (identity when ``silo_ids`` is None)."""
    if silo_ids is None:
        return tree
    return jax.tree_util.tree_map(lambda a: a[silo_ids], tree)


def draw_silo_batches(sampler, data, sampler_states, key: jax.Array, round_index, silo_ids=None):
    """Each silo's batch indices for this round: ``(idx [N, B], mask [N, B], overflow [N])``.

    Uses the round's ``"sampling"`` stream split over silos, so an algorithm that logs the indices sees exactly the
    batches its gradients use. With ``silo_ids`` ([M] ints) only those silos draw (rows in that order); silo i's key is
    the same whichever other silos are selected."""
    silo_keys = keys.silo_keys(keys.stream_key(key, "sampling"), data.num_silos)

    def one_silo(size, state, k):
        return sampler.draw(k, size, data.n_max, round_index, state)

    return jax.vmap(one_silo)(*_select((data.sizes, sampler_states, silo_keys), silo_ids))


@dataclasses.dataclass(frozen=True)
class SiloBatches:
    """Availability x a per-silo record sampler (Noisy MB-SGD and its relatives).

    Args:
      availability: ``FullAvailability()``, ``FixedAvailability(M)`` or ``RandomAvailability(pmf)``.
      scheme: the record sampler's scheme (``dpjax.primitives.sampling.make_sampler``):
        ``"with-replacement"``, ``"without-replacement"``, ``"poisson"``, ``"one-pass"``, ``"full"``.
      batch_size: K (None for ``"full"``).
      dense: draw each silo's batch as a multiplicity vector over all its rows (``sampler.draw_weights``; same law,
        different draws) for problems with a closed-form clipped sum; else gather K indices (``sampler.draw``).
      all_silos: compute every silo and mask the unavailable ones (for per-silo
        logs) instead of only the available ones when their number is static.
      unit: the privacy unit the selection protects (``"record-in-silo"``: one
        record of one silo's data set, ISRL-DP; ``"record"``: central DP).
      batch_sizes: one ``K_i`` per silo (unbalanced silos, ISRL-DP Algorithm 7): every silo draws
        ``batch_size = max K_i`` records and keeps its first ``K_i`` (without replacement: a uniform ``K_i``-subset;
        with: ``K_i`` i.i.d. draws); gather path only.
      sampling_rate: ``"poisson"`` only: the public rate q every record is drawn with; the event hands the same q to the
        accountant (one number, two consumers). None: ``K / n`` of each silo's size, public only under replace-one (the
        DP plan refuses it under add/remove)."""

    availability: Any = sampling_lib.FullAvailability()
    scheme: str = "without-replacement"
    batch_size: int | None = None
    dense: bool = False
    all_silos: bool = False
    unit: str = "record-in-silo"
    batch_sizes: tuple | None = None
    sampling_rate: float | None = None

    def __post_init__(self):
        if self.batch_sizes is not None and (self.dense or self.batch_size != max(self.batch_sizes)):
            raise ValueError(f"batch_sizes={self.batch_sizes} needs the gather path and batch_size = max K_i, "
                             f"got batch_size={self.batch_size}, dense={self.dense}")
        self.sampler  # noqa: B018  (validates scheme x batch size x rate)

    @property
    def sampler(self):
        return sampling_lib.make_sampler(self.scheme, self.batch_size, self.sampling_rate)

    roles = ("selection",)

    def init(self, params, ctx: Context):
        return init_sampler_states(self.sampler, ctx.data, ctx.key)

    def update(self, data, state, ctx: Context) -> tuple[Batch, Any]:
        if self.all_silos:
            silo_ids = None
            avail_key = keys.stream_key(ctx.key, "availability")
            available = keys.over_silos(lambda n: self.availability.sample(avail_key, n), data.num_silos)
        else:
            silo_ids, available = available_silos(self.availability, ctx.key, data.num_silos)
        if self.dense:
            weights, overflow = self._dense_weights(state, data, ctx, silo_ids)
            return Batch(silo_ids, available, None, weights, overflow, data.num_silos), state
        idx, mask, overflow = draw_silo_batches(self.sampler, data, state, ctx.key, ctx.round, silo_ids)
        if self.batch_sizes is not None:  # each silo keeps its first K_i draws
            ks = jnp.asarray(self.batch_sizes, jnp.int32)
            ks = ks if silo_ids is None else ks[silo_ids]
            mask = mask & (jnp.arange(idx.shape[1])[None, :] < ks[:, None])
        return Batch(silo_ids, available, idx, mask, overflow, data.num_silos), state

    def _dense_weights(self, state, data, ctx: Context, silo_ids):
        sampler = self.sampler
        silo_keys = keys.silo_keys(keys.stream_key(ctx.key, "sampling"), data.num_silos)
        sizes, states = data.sizes, state
        if silo_ids is not None:
            sizes, states, silo_keys = jax.tree_util.tree_map(lambda a: a[silo_ids], (sizes, states, silo_keys))
        return jax.vmap(lambda k, size, s: sampler.draw_weights(k, size, data.n_max, ctx.round, s))(
            silo_keys, sizes, states)

    def validate(self, data) -> None:
        self.availability.validate(data.num_silos)

    def event(self, silo_sizes) -> SelectionEvent:
        if self.scheme == "full":
            return SelectionEvent("full", tuple(int(n) for n in silo_sizes), None, self.unit)
        ks = self.batch_size if self.batch_sizes is None else tuple(self.batch_sizes)
        return SelectionEvent(self.scheme, tuple(int(n) for n in silo_sizes), ks, self.unit,
                              sampling_rate=self.sampling_rate)


@dataclasses.dataclass(frozen=True)
class LocalStepRecords:
    """One uniformly random record for each of K sequential local steps of every available silo
    (ISRL-DP Local SGD, Lowy & Razaviyayn 2023, App. I): ``Batch.indices [M, K]``, the record of
    step t in column t (K independent draws: with replacement across the steps).

    Host-side, each step is its own noisy release on a uniform 1-subset of the silo: ``SelectionEvent`` with batch size
    1 (a uniform 1-subset is sampling without replacement) and ``releases_per_round = K``."""

    availability: Any = sampling_lib.FullAvailability()
    num_steps: int = 1
    all_silos: bool = False

    @property
    def _records(self) -> SiloBatches:
        return SiloBatches(self.availability, "with-replacement", self.num_steps, all_silos=self.all_silos)

    roles = ("selection",)

    def init(self, params, ctx: Context):
        return self._records.init(params, ctx)

    def update(self, data, state, ctx: Context) -> tuple[Batch, Any]:
        return self._records.update(data, state, ctx)

    def event(self, silo_sizes) -> SelectionEvent:
        return SelectionEvent("without-replacement", tuple(int(n) for n in silo_sizes), 1, "record-in-silo",
                              releases_per_round=self.num_steps)


@dataclasses.dataclass(frozen=True)
class LocalStepBatches(Stateless):
    """A uniform ``batch_size``-subset of every available silo's records for each of K sequential local
    steps, drawn independently per step (``Batch.indices`` ``[M, K, b]``; step k's subset from the
    silo's key of the round's ``"sampling"`` stream folded with k). Host-side, each step is its own
    noisy release on a uniform b-subset: ``SelectionEvent`` without replacement of b,
    ``releases_per_round = K`` (independent draws, so the subsampled releases compose adaptively)."""

    availability: Any = sampling_lib.FullAvailability()
    num_steps: int = 1
    batch_size: int = 1

    roles = ("selection",)

    def update(self, data, state, ctx: Context) -> tuple[Batch, Any]:
        silo_ids, available = available_silos(self.availability, ctx.key, data.num_silos)
        silo_keys = _select(keys.silo_keys(keys.stream_key(ctx.key, "sampling"), data.num_silos), silo_ids)
        sizes = _select(data.sizes, silo_ids)

        def one_silo(key, size):
            step = lambda k: sampling_lib.sample_without_replacement(  # noqa: E731
                jax.random.fold_in(key, k), size, data.n_max, self.batch_size)
            return jax.vmap(step)(jnp.arange(self.num_steps))

        idx = jax.vmap(one_silo)(silo_keys, sizes)
        return Batch(silo_ids, available, idx, jnp.ones(idx.shape, bool), jnp.zeros(available.shape, bool),
                     data.num_silos), state

    def validate(self, data) -> None:
        self.availability.validate(data.num_silos)
        if self.batch_size > data.min_size:
            raise ValueError(f"batch_size={self.batch_size} must be <= the smallest silo size {data.min_size}")

    def event(self, silo_sizes) -> SelectionEvent:
        return SelectionEvent("without-replacement", tuple(int(n) for n in silo_sizes), self.batch_size,
                              "record-in-silo", releases_per_round=self.num_steps)


#: How a Poisson selection holds its random-size batch (``SubsetBatches``' docstring).
POISSON_SELECTIONS = ("truncated", "buffered")
#: DP-SGD-General's batch selections and the accounting names of their samplings.
SUBSET_SAMPLINGS = {"shuffle": "shuffle", "subsample": "without-replacement", "poisson": "poisson"}
_FILTER_STREAM = 11  # folded into a silo's sampling key for Appendix D's filtering coins


@dataclasses.dataclass(frozen=True)
class SubsetBatches:
    """Each silo's round of DP-SGD-General (van Dijk et al., Algorithm 1): ``m`` subsets of ``s``
    records (``indices``/``weights`` ``[M, m, s]``).

    ``"shuffle"`` takes block ``b`` of the epoch's uniform permutation (drawn once per epoch and silo from the run key,
    held in the state: ``[N, epochs, n_max]``; the last ``n - B m s`` records sit the epoch out); ``"subsample"`` a
    fresh uniform ``ms``-subset in random order (consecutive rows: a uniform partition into ``m`` subsets);
    ``"poisson"`` each record w.p. the public ``sampling_rate`` q (``s = 1``). ``poisson_selection="truncated"``
    (default): truncated Poisson (``dpjax.accounting.truncated_poisson``): a buffer of every row on a small data set
    (exact Poisson), else of ``truncated_capacity(n_max, q, R)`` rows with the batch cut there and the truncation
    charged to delta by the event (``TruncatedPoissonSelectionEvent``); the run never stops on a full buffer.
    ``"buffered"``: the former static buffer of ``E + 6 sqrt(E) + 8`` rows, E the expected batch ``max(m, q n_max)``,
    ``overflow`` (the engine refuses the run) when it does not fit, nothing charged. Without a declared q: ``m / n`` of
    the silo's size, which only replace-one makes public (the DP plan refuses it under add/remove), always buffered.

    With ``filtering`` (Appendix D) every subset is kept w.p. 1/2 by a data-independent coin
    (``info["keep"]`` ``[M, m]``) and a silo runs its round when at least ``filter_threshold``
    subsets are kept: ``available`` says which silos ran (public, as the coins are)."""

    sampling: str
    subset_size: int
    num_subsets: int
    rounds_per_epoch: int
    num_rounds: int
    filtering: bool = False
    filter_threshold: int = 1
    unit: str = "record-in-silo"
    sampling_rate: float | None = None
    poisson_selection: str = "truncated"

    def __post_init__(self):
        if self.sampling_rate is not None:
            sampling_lib.make_sampler(SUBSET_SAMPLINGS[self.sampling], self.num_subsets, self.sampling_rate)
        if self.poisson_selection not in POISSON_SELECTIONS:
            raise ValueError(f"poisson_selection={self.poisson_selection!r} must be one of {POISSON_SELECTIONS}")

    @property
    def truncated(self) -> bool:
        """The default truncated Poisson selection (Poisson at a declared rate, ``poisson_selection="truncated"``)."""
        return (self.sampling == "poisson" and self.sampling_rate is not None
                and self.poisson_selection == "truncated")

    @property
    def stored_epochs(self) -> int:
        return -(-self.num_rounds // self.rounds_per_epoch)

    roles = ("selection",)

    def init(self, params, ctx: Context):
        data = ctx.data
        if self.sampling != "shuffle":
            return jnp.zeros((data.num_silos, 1), jnp.int32)
        silo_keys = keys.silo_keys(keys.run_stream_key(ctx.key, "permutation"), data.num_silos)

        def one_silo(k, size):
            epoch_keys = jax.vmap(lambda e: jax.random.fold_in(k, e))(jnp.arange(self.stored_epochs))
            return jax.vmap(lambda ek: sampling_lib.valid_first_permutation(ek, size, data.n_max))(epoch_keys)

        return jax.vmap(one_silo)(silo_keys, data.sizes).astype(jnp.int32)

    def draw(self, key, perms, size, n_max: int, round_index):
        """One silo's round: ``(idx [m, s], mask [m, s], overflow)`` (Poisson: ``[capacity, 1]``)."""
        m, s = self.num_subsets, self.subset_size
        if self.sampling == "shuffle":
            epoch, block = round_index // self.rounds_per_epoch, round_index % self.rounds_per_epoch
            idx = jax.lax.dynamic_slice(perms[epoch], (block * m * s,), (m * s,)).reshape(m, s)
            return idx, jnp.ones((m, s), bool), jnp.asarray(False)
        if self.sampling == "subsample":
            idx = sampling_lib.sample_without_replacement(key, size, n_max, m * s).reshape(m, s)
            return idx, jnp.ones((m, s), bool), jnp.asarray(False)
        if self.truncated:
            cap = truncated_poisson.selection_capacity(n_max, self.sampling_rate, self.num_rounds)
            idx, mask, overflow = sampling_lib.poisson_sample(key, size, n_max, self.sampling_rate, cap,
                                                              truncate=cap < n_max)
            return idx[:, None], mask[:, None], overflow
        sampler = sampling_lib.Poisson(m, sampling_rate=self.sampling_rate)
        idx, mask, overflow = sampler.draw(key, size, n_max, round_index, None)
        return idx[:, None], mask[:, None], overflow

    def update(self, data, state, ctx: Context) -> tuple[Batch, Any]:
        silo_keys = keys.silo_keys(keys.stream_key(ctx.key, "sampling"), data.num_silos)

        def one_silo(k, perms, size):
            idx, mask, overflow = self.draw(k, perms, size, data.n_max, ctx.round)
            if not self.filtering:
                return idx, mask, overflow, jnp.asarray(True), None
            keep = jax.random.bernoulli(jax.random.fold_in(k, _FILTER_STREAM), 0.5, (self.num_subsets,))
            return idx, mask, overflow, jnp.sum(keep) >= self.filter_threshold, keep

        idx, mask, overflow, ran, keep = jax.vmap(one_silo)(silo_keys, state, data.sizes)
        info = {"keep": keep} if self.filtering else {}
        return Batch(None, ran, idx, mask, overflow, data.num_silos, info), state

    def validate(self, data) -> None:
        n = int(data.min_size)
        if self.truncated and not truncated_poisson.full_buffer(data.n_max, self.sampling_rate, self.num_rounds):
            largest = int(max(int(k) for k in jax.device_get(data.sizes)))
            if largest != data.n_max:  # the buffer is sized from n_max, the charge from the silo sizes
                raise ValueError(f"n_max={data.n_max} rows padded beyond the largest silo ({largest} records): the "
                                 "truncated Poisson buffer is sized from the padded rows and its charge from the "
                                 "silo sizes; pad to the largest silo or choose poisson_selection='buffered'")
        ms = self.num_subsets * self.subset_size
        need = self.rounds_per_epoch * ms if self.sampling == "shuffle" else ms
        if need > n:
            if self.sampling == "shuffle" and ms <= n:
                # a shuffled epoch deals disjoint batches of s*m records to its rounds from one permutation
                raise ValueError(
                    f"a shuffled epoch needs rounds_per_epoch={self.rounds_per_epoch} batches of num_subsets="
                    f"{self.num_subsets} x subset_size={self.subset_size} records, {need} in all, but the smallest "
                    f"silo holds n={n}: lower rounds_per_epoch, num_subsets or subset_size (rounds_per_epoch <= "
                    f"{n // ms} here)")
            raise ValueError(f"a batch of num_subsets={self.num_subsets} x subset_size={self.subset_size} = {need} "
                             f"records must be <= the smallest silo size n={n} (sampling={self.sampling!r})")

    def event(self, silo_sizes) -> SubsetSelectionEvent:
        batch = self.num_subsets * self.subset_size  # the expected batch m for Poisson (s = 1)
        kind = truncated_poisson.TruncatedPoissonSelectionEvent if self.truncated else SubsetSelectionEvent
        return kind(SUBSET_SAMPLINGS[self.sampling], tuple(int(n) for n in silo_sizes), batch,
                                    self.unit, num_subsets=self.num_subsets,
                                    rounds_per_epoch=self.rounds_per_epoch, filtering=self.filtering,
                                    sampling_rate=self.sampling_rate)
