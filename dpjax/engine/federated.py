"""Shared building blocks of federated round steps.

Round steps of every algorithm are composed from these, never copy-pasted:

* ``silo_minibatch_gradients``: each silo samples a batch, computes
  per-example gradients, clips them (private) and divides the sum by the
  public batch size ``K``; vmapped over silos.
* ``privatize_messages``: each silo adds its own Gaussian noise (the silo
  messages are the protected transcript of ISRL-DP).
* ``aggregate``: the server combines the messages of available silos.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from dpjax import _validate, keys
from dpjax.engine.silos import SiloData
from dpjax.primitives import clipping, noise

PyTree = Any
AGGREGATIONS = ("mean", "sum")


def init_sampler_states(sampler, data: SiloData, run_key: jax.Array):
    """Per-silo sampler state (e.g. one-pass permutations), from the run key."""
    silo_keys = keys.silo_keys(keys.run_stream_key(run_key, "permutation"), data.num_silos)
    return jax.vmap(sampler.init_silo, in_axes=(0, 0, None))(silo_keys, data.sizes, data.n_max)


def silo_minibatch_gradients(
    problem,
    sampler,
    params: PyTree,
    data: SiloData,
    sampler_states,
    key: jax.Array,
    round_index,
    *,
    clip_norm,
    private: bool,
    neighboring: str = "replace-one",
):
    """Per-silo minibatch gradients ``(1/K) sum_j clip(grad f(w, x_ij))``.

    ``K`` is the sampler's (expected) batch size, a public constant, so the
    sensitivity of one silo's mean to one record is ``2 C / K`` (replace-one)
    when the record appears once. Non-private (``private=False``) skips
    clipping but keeps everything else identical, so the two differ only in
    the clip and the noise.

    Returns ``(grads [N, ...], overflow [N])``.
    """
    silo_keys = keys.silo_keys(keys.stream_key(key, "sampling"), data.num_silos)
    batch_size = getattr(sampler, "batch_size", None)

    def one_silo(x, y, size, state, k):
        idx, mask, overflow = sampler.draw(k, size, data.n_max, round_index, state)
        xb, yb = x[idx], y[idx]
        grads = clipping.per_example_grads(problem.loss, params, xb, yb)
        bound = clip_norm if private else jnp.inf
        summed = clipping.clipped_sum(grads, bound, mask, neighboring)
        denom = batch_size if batch_size is not None else summed.count
        mean = jax.tree_util.tree_map(lambda t: t / jnp.asarray(denom, t.dtype), summed.total)
        return mean, overflow

    return jax.vmap(one_silo)(data.x, data.y, data.sizes, sampler_states, silo_keys)


def privatize_messages(messages: PyTree, key: jax.Array, noise_std, num_silos: int) -> PyTree:
    """Each silo adds its own ``N(0, noise_std^2 I)`` to its message."""
    silo_keys = keys.silo_keys(keys.stream_key(key, "noise"), num_silos)
    return jax.vmap(noise.add_gaussian_noise, in_axes=(0, 0, None))(silo_keys, messages, noise_std)


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
