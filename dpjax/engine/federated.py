"""Shared building blocks of federated round steps.

Round steps of every algorithm are composed from these, never copy-pasted:

* ``draw_silo_batches`` / ``silo_batch_gradients``: each silo samples a
  batch, computes per-example gradients, clips them (private) and divides
  the sum by the public batch size ``K``; vmapped over silos.
* ``privatize_messages``: each silo adds its own Gaussian noise (the silo
  messages are the protected transcript of ISRL-DP).
* ``aggregate``: the server combines the messages of available silos.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from dpjax import _validate, keys
from dpjax.engine import silo_sharding
from dpjax.engine.problem import has_closed_form_clipping
from dpjax.engine.silos import SiloData
from dpjax.primitives import clipping, noise
from dpjax.primitives.sampling import FullAvailability

PyTree = Any
AGGREGATIONS = ("mean", "sum")


def available_silos(availability, key: jax.Array, num_silos: int):
    """This round's participating silos: ``(silo_ids, available)``.

    With a static count (``FullAvailability``, ``FixedAvailability``) returns
    the ``[M]`` ids and an all-true mask over them, so a round step computes
    only the available silos' messages. With a random count
    (``RandomAvailability``) returns ``(None, mask [N])``: all N silos are
    computed and the mask zeroes the unavailable ones. Either way the subset
    comes from the round's ``"availability"`` stream.
    """
    avail_key = keys.stream_key(key, "availability")
    if silo_sharding.sharded() and isinstance(availability, FullAvailability):
        # Every silo, in order: ``silo_ids = arange(N)`` would make each silo's rows a gather across
        # the sharded silo axis, which the partitioner runs as an all-gather of the data (every
        # device then computes every silo). None selects the same silos without a gather.
        return None, keys.over_silos(lambda n: availability.sample(avail_key, n), num_silos)
    if hasattr(availability, "sample_ids"):
        silo_ids = availability.sample_ids(avail_key, num_silos)
        return silo_ids, jnp.ones(silo_ids.shape, bool)
    return None, keys.over_silos(lambda n: availability.sample(avail_key, n), num_silos)


def init_sampler_states(sampler, data: SiloData, run_key: jax.Array):
    """Per-silo sampler state (e.g. one-pass permutations), from the run key."""
    silo_keys = keys.silo_keys(keys.run_stream_key(run_key, "permutation"), data.num_silos)
    return jax.vmap(sampler.init_silo, in_axes=(0, 0, None))(silo_keys, data.sizes, data.n_max)


def _select(tree, silo_ids):
    """Rows ``silo_ids`` of every leaf (identity when ``silo_ids`` is None)."""
    if silo_ids is None:
        return tree
    return jax.tree_util.tree_map(lambda a: a[silo_ids], tree)


def draw_silo_batches(sampler, data: SiloData, sampler_states, key: jax.Array, round_index, silo_ids=None):
    """Each silo's batch indices for this round: ``(idx [N, B], mask [N, B], overflow [N])``.

    Uses the round's ``"sampling"`` stream split over silos, so an algorithm
    that logs the indices sees exactly the batches its gradients use. With
    ``silo_ids`` ([M] ints) only those silos draw (rows in that order); silo
    i's key is the same whichever other silos are selected.
    """
    silo_keys = keys.silo_keys(keys.stream_key(key, "sampling"), data.num_silos)

    def one_silo(size, state, k):
        return sampler.draw(k, size, data.n_max, round_index, state)

    return jax.vmap(one_silo)(*_select((data.sizes, sampler_states, silo_keys), silo_ids))


CLIP_MODES = ("per-example", "minibatch-average")


def silo_batch_gradients(
    problem,
    params: PyTree,
    data: SiloData,
    idx: jax.Array,
    mask: jax.Array,
    denominators,
    *,
    clip_norm,
    neighboring: str = "replace-one",
    clip_mode: str = "per-example",
    silo_ids=None,
):
    """Per-silo ``(1/K_i) sum_{j in batch_i} clip(grad f(w, x_ij))`` at a shared ``w``.

    ``denominators`` is the public batch size: a scalar ``K`` or a per-silo
    vector ``[N]`` of ``K_i`` (unbalanced silos, ISRL-DP Appendix H); never a
    data-dependent count. ``clip_mode``:

    * ``"per-example"`` (default): each record's gradient is clipped to
      ``clip_norm`` before averaging; one record moves the silo's message by at
      most ``2 C / K_i`` (replace-one).
    * ``"minibatch-average"``: the authors' insurance script: the unclipped
      minibatch mean is clipped to ``clip_norm``. One record can then move the
      message by up to ``2 C`` (not ``2 C / K``): callers must account it so
      (the authors' insurance script clips the minibatch mean).

    ``clip_norm = inf`` (the non-private twins) clips by exactly 1. With ``silo_ids`` ([M]), ``idx``
    and ``mask`` are the selected silos' batches and only their rows are
    gathered (``[M, B, ...]``), so unavailable silos cost nothing.
    """
    _validate.check_choice("clip_mode", clip_mode, CLIP_MODES)
    denominators = jnp.broadcast_to(jnp.asarray(denominators, jnp.float32), (data.num_silos,))
    rows = (jnp.arange(data.num_silos) if silo_ids is None else silo_ids)[:, None]
    xb_all, yb_all = data.x[rows, idx], data.y[rows, idx]
    denominators = _select(denominators, silo_ids)

    per_example = clip_mode == "per-example"
    closed_form = per_example and has_closed_form_clipping(problem)
    # Precomputed once from all rows (loop-invariant across rounds), gathered like the rows.
    sq_all = (jax.lax.optimization_barrier(problem.row_sq_norms(data.x))[rows, idx] if closed_form
              else jnp.zeros(idx.shape))

    def batch_loss(p, xb, yb, m, denom):
        losses = jax.vmap(problem.loss, in_axes=(None, 0, 0))(p, xb, yb)
        return jnp.sum(jnp.where(m, losses, 0.0)) / denom

    def one_silo(xb, yb, m, denom, sq):
        if closed_form:
            # GLMs: the same clipped sum in closed form (no [B, d] per-example tensor).
            total = problem.weighted_grad_sum(params, xb, yb, m.astype(xb.dtype), clip_norm, row_sq_norms=sq)
            mean = jax.tree_util.tree_map(lambda t: t / denom.astype(t.dtype), total)
        elif per_example:
            grads = clipping.per_example_grads(problem.loss, params, xb, yb)
            summed = clipping.clipped_sum(grads, clip_norm, m, neighboring)
            mean = jax.tree_util.tree_map(lambda t: t / denom.astype(t.dtype), summed.total)
        else:
            # Minibatch-average clipping: the gradient of the batch-mean loss,
            # without materialising per-example gradients, clipped below.
            mean = jax.grad(batch_loss)(params, xb, yb, m, denom)
        if clip_mode == "minibatch-average":
            mean = clipping.clip_to_norm(mean, clip_norm)
        return mean

    return jax.vmap(one_silo)(xb_all, yb_all, mask, denominators, sq_all)


def supports_dense_gradients(problem, sampler) -> bool:
    """Whether the gather-free (multiplicity-weighted, closed-form) path applies."""
    return has_closed_form_clipping(problem) and hasattr(sampler, "draw_weights")


def prefer_dense_gradients(problem, sampler, batch_size: int, n_max: int) -> bool:
    """The ``gradient_path="auto"`` rule: dense when it applies, the batch is not tiny
    (``8 K >= n_max``: two passes over the silo cost less than gathering K rows and
    drawing K distinct indices by ``top_k``) and the sampler's multiplicity vector is
    not just a scatter of gathered indices (``weights_by_scatter``)."""
    return (supports_dense_gradients(problem, sampler) and 8 * batch_size >= n_max
            and not getattr(sampler, "weights_by_scatter", False)
            and not getattr(problem, "prefer_gathered_batches", False))  # networks: cost per row, gather


def privatize_messages(messages: PyTree, key: jax.Array, noise_std, num_silos: int, silo_ids=None) -> PyTree:
    """Each silo adds its own ``N(0, noise_std^2 I)`` to its message (the round key's ``"noise"`` stream)."""
    return silo_noise(messages, keys.stream_key(key, "noise"), noise_std, num_silos, silo_ids)


def silo_noise(messages: PyTree, noise_key: jax.Array, noise_std, num_silos: int, silo_ids=None) -> PyTree:
    """Each silo adds its own ``N(0, noise_std^2 I)`` to its message, silo i with key ``silo_keys(noise_key)[i]``.

    ``noise_std`` is a scalar (all silos) or a vector ``[N]`` of per-silo
    stds ``sigma_i`` (per-silo budgets, ISRL-DP Algorithm 7). With
    ``silo_ids``, ``messages`` holds those silos' rows and each gets its own
    silo's key (and std).
    """
    silo_keys = _select(keys.silo_keys(noise_key, num_silos), silo_ids)
    if jnp.ndim(noise_std) == 1:
        noise_std = _select(noise_std, silo_ids)
    std_axis = 0 if jnp.ndim(noise_std) == 1 else None
    return jax.vmap(noise.add_gaussian_noise, in_axes=(0, 0, std_axis))(silo_keys, messages, noise_std)


def aggregate(messages: PyTree, available: jax.Array, how: str = "mean") -> PyTree:
    """Server aggregate of the available silos' messages.

    ``"mean"``: ``sum_{i in S_r} g_i / M_r`` (the papers' algorithms).
    ``"sum"``: ``sum_{i in S_r} g_i`` (the ISRL-DP authors' MNIST/insurance
    scripts; equivalent to multiplying the step size by ``M_r``).
    """
    _validate.check_choice("aggregation", how, AGGREGATIONS)
    weights = available.astype(jnp.float32)
    count = jnp.maximum(jnp.sum(weights), 1.0)

    def combine(leaf):
        total = jnp.tensordot(weights.astype(leaf.dtype), leaf, axes=1)
        return total / count.astype(leaf.dtype) if how == "mean" else total

    return jax.tree_util.tree_map(combine, messages)


def _canonical_order(rows: jax.Array) -> jax.Array:
    """A permutation that sorts the rows ``[N, P]`` by four fixed projections.

    Each key is a per-row reduction, so it does not depend on the row's
    position; the sorted order (hence the float sum over it) is a function of
    the multiset of rows unless two *different* rows tie on all four keys.
    """
    p = rows.shape[1]
    j = jnp.arange(1, p + 1, dtype=rows.dtype)
    proj = [jnp.sum(rows * jnp.cos(j * (0.618034 + k)), axis=1) for k in range(4)]
    return jnp.lexsort(tuple(reversed(proj)))


def shuffle_reports(messages: PyTree, available: jax.Array, key: jax.Array):
    """The shuffler: the available silos' reports, uniformly permuted.

    Returns ``(reports [N, P], present [N])`` with the silos' messages
    flattened to vectors; absent silos' rows are zero and ``present`` false.
    The permutation comes from the ``key`` given (use the round's
    ``"shuffle"`` stream).
    """
    from jax.flatten_util import ravel_pytree

    flat = jax.vmap(lambda t: ravel_pytree(t)[0])(messages)
    flat = jnp.where(available[:, None], flat, 0.0)
    perm = jax.random.permutation(key, flat.shape[0])
    return flat[perm], available[perm]


def shuffled_aggregate(messages: PyTree, available: jax.Array, key: jax.Array, how: str = "mean") -> PyTree:
    """Server aggregate behind a shuffler (ISRL-DP Section 5, Shuffled Noisy MB-SGD).

    The reports of the available silos are shuffled (``shuffle_reports``) and
    the server sums them in a canonical order, so its output is a function of
    the *multiset* of reports only: exactly (bitwise) invariant to the
    shuffler's permutation and to which silo sent what. ``"mean"`` divides by
    ``M_r``, the number of reports (public).
    """
    from jax.flatten_util import ravel_pytree

    _validate.check_choice("aggregation", how, AGGREGATIONS)
    one = jax.tree_util.tree_map(lambda leaf: leaf[0], messages)
    _, unravel = ravel_pytree(one)
    reports, present = shuffle_reports(messages, available, key)
    total = jnp.sum(reports[_canonical_order(reports)], axis=0)
    if how == "mean":
        total = total / jnp.maximum(jnp.sum(present), 1).astype(total.dtype)
    return unravel(total)
