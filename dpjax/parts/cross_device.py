"""Parts of federated learning with user-level DP, the silo being the user (DP-FedAvg, McMahan et al.
2018; Andrew et al. 2021): the silos are sampled, not their records; a sampled silo trains locally and
sends one model delta; the server divides the sum by the public expected number of silos.

* ``SampledSilos`` (batch selection): Poisson sampling of the silos at a declared public rate q, or a
  uniform m-subset; every record of a sampled silo is in its batch; privacy unit "user";
* ``LocalDeltas`` (client): non-private local SGD from the server model, one unit per silo;
* ``PublicMean`` (aggregator): the sampled silos' sum over a public denominator.

Both read the data only through the methods ``SiloData`` and ``PooledSiloData`` share (``silo_masks``,
``silo_records``, ``sizes``), and a Poisson round computes only its cohort's buffer: on a ``PooledSiloData`` population
a round's cost and memory are the cohort's, plus O(N) scalars (the N inclusion draws and per-silo keys).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dpjax import _validate, keys
from dpjax.accounting.events import SelectionEvent
from dpjax.engine import input_dense
from dpjax.engine.conv_layout import canonical_convs
from dpjax.engine.input_dense import low_rank_local_factors, split_input_dense
from dpjax.engine.roles import Batch, Context, FactoredDeltas, PerUnitVectors, Sensitive
from dpjax.parts.aggregators import Aggregate
from dpjax.parts.selection import available_silos
from dpjax.primitives import sampling as sampling_lib

SILO_SAMPLINGS = ("poisson", "without-replacement")
#: How local steps update a Dense first layer (``LocalDeltas.input_layer``).
INPUT_LAYER_UPDATES = ("materialized", "low-rank", "auto")


@dataclasses.dataclass(frozen=True)
class SampledSilos:
    """Each silo with probability ``sampling_rate`` q (``"poisson"``: the sampled silos gathered into a static buffer,
    ``capacity``; the unsampled ones are never computed), or a uniform subset of exactly ``silos_per_round``
    (``"without-replacement"``: only those are computed). Draws from the round key's ``"availability"`` stream.

    The Poisson rate is PUBLIC: the declared q is what the draw uses and what ``event`` hands the accountant. Under
    add/remove of a user the number of silos N differs between neighbours, so a rate m/N read from the data would make
    every other user's inclusion probability depend on whether the user is there; without a declared q the draw uses
    m/N, which only replace-one (N public) allows (the DP plan refuses it under add/remove)."""

    silos_per_round: int
    sampling: str = "poisson"
    sampling_rate: float | None = None
    cohort_capacity: int | None = None
    capacity_multiple: int = 1

    def __post_init__(self):
        if self.sampling_rate is not None:
            sampling_lib.make_sampler(self.sampling, self.silos_per_round, self.sampling_rate)
        if self.cohort_capacity is not None:
            _validate.check_int("cohort_capacity", self.cohort_capacity, min_value=1)
        _validate.check_int("capacity_multiple", self.capacity_multiple, min_value=1)

    def capacity(self, num_silos: int) -> int:
        """How many silos a Poisson round computes: the sampled ones gathered into a static buffer of
        ``cohort_capacity`` (default ``qN + 6 sqrt(qN) + 8``, overflow probability < 1e-8 a round), all N when
        that is not fewer. A round that samples more refuses the run (``SamplingOverflowError``), never truncates.
        The default rounds up to a multiple of ``capacity_multiple`` (a client training k silos at a time then cuts
        the buffer into whole chunks, with no padded copy of it): a larger buffer holds the same sampled silos in the
        same slots and only overflows less."""
        cap = self.cohort_capacity
        if cap is None:
            cap = sampling_lib.default_poisson_capacity(math.ceil(self.inclusion_probability(num_silos) * num_silos))
            cap = -(-cap // self.capacity_multiple) * self.capacity_multiple
        return min(cap, num_silos)

    def inclusion_probability(self, num_silos):
        """Each silo's inclusion probability: the declared q, else m / N."""
        return self.silos_per_round / num_silos if self.sampling_rate is None else self.sampling_rate

    roles = ("selection",)

    def init(self, params, ctx: Context):
        return ()

    def update(self, data, state, ctx: Context) -> tuple[Batch, Any]:
        overflow = jnp.zeros((), bool)
        if self.sampling == "poisson":
            n, key = data.num_silos, keys.stream_key(ctx.key, "availability")
            cap, q = self.capacity(n), self.inclusion_probability(n)
            if cap < n:  # only the sampled silos are computed: the round's cost is the cohort's, not N's
                silo_ids, available, overflow = sampling_lib.poisson_sample(key, n, n, q, cap)
            else:
                silo_ids, available = None, jax.random.uniform(key, (n,)) < q
        else:
            availability = sampling_lib.FixedAvailability(self.silos_per_round)
            silo_ids, available = available_silos(availability, ctx.key, data.num_silos)
        weights = data.silo_masks(silo_ids)
        return Batch(silo_ids, available, None, weights, jnp.broadcast_to(overflow, available.shape), data.num_silos), state

    def event(self, silo_sizes) -> SelectionEvent:
        """The protected data set is the N silos (users); m of them per round."""
        return SelectionEvent(self.sampling, (len(silo_sizes),), self.silos_per_round, "user",
                              sampling_rate=self.sampling_rate)


@dataclasses.dataclass(frozen=True)
class LocalDeltas:
    """Every computed silo's non-private local SGD from the server model ``theta`` (step size
    ``hparams.<lr_field>``), sent as the pseudo-gradient ``theta - theta_i``: one unit per silo, weighted by
    whether it reports. The local batches, from the round key's ``"local"`` stream:

    * ``local_epochs`` None: ``local_steps`` steps, each on an independent uniform ``local_batch_size``-subset of
      the silo's records (or on all of them);
    * ``local_epochs`` E: E epochs, each a fresh permutation of the silo's records cut into
      ``ceil(n_max / local_batch_size)`` consecutive batches (every record once an epoch, the last batch of a
      smaller silo partial or empty: FedAvg's convention, McMahan et al. 2017, Algorithm 1).

    A step's gradient is the mean over its batch's records only: the batch's rows are gathered (``[B, ...]``), not
    the silo's whole data masked, so a step costs B records' backward pass. The step's gradient runs through
    ``engine.conv_layout.canonical_convs`` (XLA:CPU's fast convolutions inside the step loop).

    ``client_batch``: None (default) trains all computed silos at once under ``vmap``; ``k`` trains them ``k`` at a
    time (``lax.map`` over vmapped chunks of k), skipping every chunk that holds no reporting silo. Vmapping a
    convolution over per-silo kernels makes it a grouped convolution, which XLA:CPU runs ~2.5x slower per silo
    than one silo's (pfl-research's CIFAR CNN on 2 cores): ``client_batch=1`` is the faster choice there; dense
    models gain from the batched matmuls of ``vmap``, and a chunk size near the expected cohort skips the Poisson
    buffer's empty tail.

    The records are read through ``data.silo_records`` / ``data.silo_masks``, so the part runs on ``SiloData`` and on
    ``PooledSiloData`` (a population of index rows into one record pool: a step gathers its B records from the
    pool) alike.

    ``input_layer``: ``"materialized"`` (default) runs every step on the silo's own copy of the parameters;
    ``"low-rank"`` keeps a Dense first layer's kernel in its low-rank form (``dpjax.engine.input_dense``: one matmul
    with the server kernel for the whole cohort's records plus each silo's record Gram matrix, no per-silo kernel
    copies; the same deltas up to float32 rounding, ~2x faster on XLA:CPU for an MNIST MLP) and refuses a model that
    does not start with ``x @ W`` on the flat record; ``"auto"``: low-rank where the model allows it. Needs
    ``local_batch_size``. In the low-rank form the units are ``FactoredDeltas`` (``factored_units``, default): the
    kernel's delta ``X^T h`` also kept as its factors, so a clipper that reads them (``AdaptiveClipMean``) clips and
    sums the cohort's kernels without the ``[M, d, width]`` deltas; False hands over the materialised deltas only.

    ``chunk_gather`` (low-rank form with ``client_batch``; default True): each chunk of ``client_batch`` silos gathers
    its own records, Grams and local batches inside its ``lax.cond``, and the units tell the clipper to sum the kernels
    over the chunks up to the last sampled silo only (``FactoredDeltas.live_chunk``): the Poisson buffer's empty tail
    (the default buffer is ~1.7x the expected cohort) is neither gathered nor multiplied. The same deltas; the kernel
    sum's matmul is shorter, so it differs from False (the whole buffer gathered, one matmul over it: the path before
    issue #38) by float rounding only."""

    problem: Any
    local_steps: int
    local_batch_size: int | None = None
    lr_field: str = "client_learning_rate"
    local_epochs: int | None = None
    client_batch: int | None = None
    input_layer: str = "materialized"
    factored_units: bool = True
    chunk_gather: bool = True
    keep_grams: bool = True

    roles = ("client",)

    #: Largest per-silo record Gram state (``N x n_max^2`` floats) the low-rank form keeps across rounds.
    GRAM_STATE_BYTES = 256 << 20

    def __post_init__(self):
        _validate.check_choice("input_layer", self.input_layer, INPUT_LAYER_UPDATES)
        if self.input_layer != "materialized" and self.local_batch_size is None:
            raise ValueError(f"input_layer={self.input_layer!r} needs a local_batch_size (steps on all of a silo's "
                             "records keep the materialised form)")

    def _input_split(self, params, x, y):
        """The low-rank split of the problem's loss (``input_dense.split_input_dense``), or None."""
        if self.input_layer == "materialized" or self.local_batch_size is None:
            return None
        split = split_input_dense(self.problem.loss, params, jnp.zeros(x.shape[1:], x.dtype),
                                  jnp.zeros(y.shape[1:], y.dtype))
        if split is None and self.input_layer == "low-rank":
            raise ValueError(f"input_layer='low-rank' needs a model whose first operation is a Dense layer on the flat "
                             f"record (h = x @ W, the kernel used nowhere else); {type(self.problem).__name__}'s "
                             f"model does not start that way (use input_layer='auto' or 'materialized')")
        return split

    def init(self, params, ctx: Context):
        """``()``, or for the low-rank form on a materialised ``SiloData`` every silo's record Gram matrix
        ``[N, n_max, n_max]`` (data only, computed once: a round gathers its batches' entries instead of forming
        them), when it fits ``GRAM_STATE_BYTES`` and ``keep_grams`` (a family sets it False for a run that visits
        fewer silos than it has: ``num_rounds x`` the expected cohort ``< N``, where forming the visited silos' Grams
        each round costs less than forming all N once)."""
        data = ctx.data
        x = getattr(data, "x", None)  # PooledSiloData has no materialised records: its rounds form their Grams
        if (self.input_layer == "materialized" or not self.keep_grams or x is None or x.ndim != 3
                or x.shape[0] * x.shape[1] ** 2 * 4 > self.GRAM_STATE_BYTES
                or self._input_split(params, x[0], data.y[0]) is None):
            return ()
        return jnp.einsum("nrd,nsd->nrs", x, x)

    def _batches(self, key, size, n_max: int):
        """``(rows [steps, B], valid [steps, B])`` of one silo's local steps."""
        b = self.local_batch_size
        if self.local_epochs is None:
            def one(k):
                chosen = sampling_lib.subset_mask_without_replacement(jax.random.fold_in(key, k), size, n_max, b)
                # b ones (more only if two of the 64-bit scores tie, p < n_max^2 / 2^65): their positions
                return jnp.nonzero(chosen, size=b, fill_value=0)[0]

            rows = jax.vmap(one)(jnp.arange(self.local_steps))
            return rows, jnp.ones(rows.shape, bool)
        per_epoch = -(-n_max // b)
        pad = per_epoch * b - n_max

        def epoch(e):
            perm = sampling_lib.valid_first_permutation(jax.random.fold_in(key, e), size, n_max)
            position = jnp.arange(per_epoch * b)
            return jnp.pad(perm, (0, pad)), position < size

        rows, valid = jax.vmap(epoch)(jnp.arange(self.local_epochs))
        return rows.reshape(-1, b), valid.reshape(-1, b)

    def _in_chunks(self, one_silo, available, inputs):
        """``one_silo`` over the computed silos ``client_batch`` at a time (``lax.map`` over vmapped chunks); a chunk
        holding no reporting silo trains nothing (``lax.cond``): the Poisson buffer holds its sampled silos first and
        is sized for the tail (~m + 6 sqrt(m) + 8), so its last chunks are mostly empty. Their deltas are zeros,
        weighted 0 as before. (Under a vmapped sweep with a key per configuration the cohorts differ, the predicate is
        batched and the cond computes both branches: no saving, same numbers. With one shared key -- common random
        numbers, ``run_many(shared_key=True)`` -- the cohort is the configurations' one and the cond still skips.)"""
        k, slots = self.client_batch, available.shape[0]
        chunks = -(-slots // k)
        # padded slots repeat slot 0 (PRNG keys cannot be zero-padded); their outputs are cut off below
        pad = lambda a: jnp.concatenate([a, jnp.repeat(a[:1], chunks * k - slots, axis=0)]).reshape(  # noqa: E731
            chunks, k, *a.shape[1:])

        def chunk(args):
            avail, *silo_args = args
            # the zeros are made in the branch that returns them: made outside, XLA re-broadcasts them every iteration
            shapes = jax.eval_shape(jax.vmap(one_silo), *silo_args)
            zeros = lambda: jax.tree_util.tree_map(lambda t: jnp.zeros(t.shape, t.dtype), shapes)  # noqa: E731
            return jax.lax.cond(jnp.any(avail), lambda: jax.vmap(one_silo)(*silo_args), zeros)

        if chunks * k == slots:  # whole chunks (SampledSilos.capacity_multiple): no padded copy in, no slice out
            pad = lambda a: a.reshape(chunks, k, *a.shape[1:])  # noqa: E731
        out = jax.lax.map(chunk, jax.tree_util.tree_map(pad, (available, *inputs)))
        return jax.tree_util.tree_map(lambda a: a.reshape(chunks * k, *a.shape[2:])[:slots], out)

    def update(self, batch: Batch, state, ctx: Context):
        params, data = ctx.query, ctx.data
        lr = getattr(ctx.hparams, self.lr_field)
        silo_keys = batch.select(keys.silo_keys(keys.stream_key(ctx.key, "local"), batch.num_silos))
        loss = jax.vmap(self.problem.loss, in_axes=(None, 0, 0))
        masked_mean = lambda p, x, y, valid: (jnp.sum(jnp.where(valid, loss(p, x, y), 0.0))  # noqa: E731
                                              / jnp.maximum(jnp.sum(valid), 1))
        grad = canonical_convs(jax.grad(masked_mean))

        split = None
        if self.input_layer != "materialized" and self.local_batch_size is not None:
            record = jax.eval_shape(lambda: data.silo_records(jnp.int32(0), jnp.zeros((1,), jnp.int32)))
            split = self._input_split(params, *record)

        def one_silo(silo, size, key):
            if self.local_batch_size is None:  # every record, every step
                (x, y), mask = data.silo_records(silo), data.silo_masks(silo)

                def step(w, _):
                    return optax.tree.sub(w, optax.tree.scale(lr, grad(w, x, y, mask))), None

                return optax.tree.sub(params, jax.lax.scan(step, params, None, length=self.local_steps)[0])

            def step(w, batch_rows):
                rows, valid = batch_rows
                x, y = data.silo_records(silo, rows)  # the B records of this step only
                return optax.tree.sub(w, optax.tree.scale(lr, grad(w, x, y, valid))), None

            return optax.tree.sub(params, jax.lax.scan(step, params, self._batches(key, size, data.n_max))[0])

        rows = batch.rows()
        weights = batch.available.astype(jnp.float32)
        if split is not None:
            return self._low_rank_units(split, batch, state, ctx, silo_keys, lr, weights), state
        inputs = (rows, data.sizes[rows], silo_keys)
        if self.client_batch is None:
            deltas = jax.vmap(one_silo)(*inputs)
        else:
            deltas = self._in_chunks(one_silo, batch.available, inputs)
        return PerUnitVectors(deltas, weights, per_silo=True), state

    def _low_rank_units(self, split, batch, state, ctx, silo_keys, lr, weights):
        """The computed silos' deltas in the low-rank form (``input_dense.low_rank_local_factors``) as
        ``FactoredDeltas`` (or, ``factored_units=False``, their materialised ``PerUnitVectors``). The records are
        gathered once for the cohort: a silo's own n_max rows when its steps visit at least as many positions (local
        epochs: its Gram kept as state is used as it is), else the steps' rows in step order."""
        data, params, rows = ctx.data, ctx.query, batch.rows()
        kept = isinstance(state, jax.Array)  # per-silo Grams [N, n_max, n_max]
        if self.client_batch is not None and self.chunk_gather:
            return self._low_rank_chunked(split, batch, state if kept else None, ctx, silo_keys, lr, weights)
        steps, valid = jax.vmap(lambda key, size: self._batches(key, size, data.n_max))(silo_keys, data.sizes[rows])
        m, s, b = steps.shape
        if s * b >= data.n_max:
            records, labels = jax.vmap(data.silo_records)(rows)
            index, gram = steps, state[rows] if kept else None
        else:
            flat = steps.reshape(m, s * b)
            records, labels = jax.vmap(data.silo_records)(rows, flat)
            index = jnp.broadcast_to(jnp.arange(s * b).reshape(s, b), steps.shape)
            gram = jax.vmap(lambda g, r: g[r][:, r])(state[rows], flat) if kept else None
        y = jax.vmap(lambda lab, i: lab[i])(labels, index)

        def one_silo(x, i, yy, v, g):
            return low_rank_local_factors(split, params, x, i, yy, v, lr, g)

        inputs = (records, index, y, valid, gram)
        if self.client_batch is None:
            leaves, h, gram = jax.vmap(one_silo)(*inputs)
        else:
            leaves, h, gram = self._in_chunks(one_silo, batch.available, inputs)
        k = split.kernel_index
        # every silo's kernel delta X_i^T h_i: dead code (dropped by XLA) when the clipper reads the factors instead
        leaves[k] = jnp.einsum("mrd,mrw->mdw", records, h)
        deltas = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(params), leaves)
        if not self.factored_units:
            return PerUnitVectors(deltas, weights, per_silo=True)
        return FactoredDeltas(deltas, weights, per_silo=True, kernel_index=k, records=records, h=h, gram=gram)

    def _low_rank_chunked(self, split, batch, grams, ctx, silo_keys, lr, weights):
        """``_low_rank_units`` with each chunk's gathers (records, labels, kept Grams) and local batches inside its
        chunk (``_in_chunks``): an empty chunk of the Poisson buffer gathers nothing. The same rows, indices and
        factors as the whole-buffer gather, silo by silo."""
        data, params, rows = ctx.data, ctx.query, batch.rows()
        n_max = data.n_max

        def one_silo(row, key, size):
            steps, valid = self._batches(key, size, n_max)
            s, b = steps.shape
            if s * b >= n_max:  # the silo's own rows, indexed by the steps (its kept Gram as it is)
                records, labels = data.silo_records(row)
                index, gram = steps, None if grams is None else grams[row]
            else:  # the steps' rows in step order
                flat = steps.reshape(s * b)
                records, labels = data.silo_records(row, flat)
                index = jnp.arange(s * b).reshape(s, b)
                gram = None if grams is None else grams[row][flat][:, flat]
            leaves, h, gram = low_rank_local_factors(split, params, records, index, labels[index], valid, lr, gram)
            # the kernel's ||X^T h||^2 from the chunk's Gram (through the module: one definition, one mutation site)
            sq_norm = input_dense.factored_sq_norms(gram[None], h[None])[0]
            return leaves, h, sq_norm, (None if s * b >= n_max else flat)

        leaves, h, sq_norms, flat = self._in_chunks(one_silo, batch.available, (rows, silo_keys, data.sizes[rows]))

        def records_of(n):
            """The first n computed silos' rows, gathered again where they are needed (the kernel's clipped sum, the
            materialised deltas): not carried out of the chunks as an [M, R, d] buffer."""
            if flat is None:
                return jax.vmap(data.silo_records)(rows[:n])[0]
            return jax.vmap(data.silo_records)(rows[:n], flat[:n])[0]

        k = split.kernel_index
        leaves[k] = jnp.einsum("mrd,mrw->mdw", records_of(rows.shape[0]), h)  # dead code when the clipper reads the
        deltas = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(params), leaves)  # factors
        if not self.factored_units:
            return PerUnitVectors(deltas, weights, per_silo=True)
        return FactoredDeltas(deltas, weights, per_silo=True, kernel_index=k, records=records_of, h=h,
                              live_chunk=self.client_batch, kernel_sq_norms=sq_norms)


@dataclasses.dataclass(frozen=True)
class PublicMean:
    """The reporting silos' sum divided by a PUBLIC ``denominator`` (the expected number of silos): with
    Poisson sampling the realised count depends on who is in the data, so dividing by it is not private."""

    denominator: float

    roles = ("aggregator",)

    def init(self, params, ctx: Context):
        return ()

    def update(self, messages: Sensitive, state, ctx: Context) -> tuple[Sensitive, Any]:
        total, state = Aggregate("sum").update(messages, state, ctx)
        return total.divided(self.denominator), state
