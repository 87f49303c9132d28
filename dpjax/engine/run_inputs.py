"""The per-run inputs of a compiled grid: stacked hyperparameters and raw run keys (host side)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import keys

PyTree = Any


def stack_hparams(hparams_list) -> PyTree:
    """Stacks a list of per-run hparams into one batched pytree (runs axis first)."""
    if len(hparams_list) == 0:
        raise ValueError("hparams_list=[] must contain at least one configuration")
    return jax.tree_util.tree_map(_stack_leaf, *hparams_list)


def _stack_leaf(*xs):
    """One leaf of ``stack_hparams``: concrete, strongly typed arrays are stacked on the host (an eager
    ``jnp.stack`` compiles one program per leaf shape and run count: 83 of them in shuffle-sco-rates
    --quick); tracers, weakly typed values and PRNG keys keep ``jnp.stack`` (same values either way).
    ``jax.device_put`` of the host array, not ``jnp.asarray``: the latter compiles a copy program per shape."""
    arrays = [jnp.asarray(x) for x in xs]
    if any(isinstance(a, jax.core.Tracer) or a.weak_type or jnp.issubdtype(a.dtype, jax.dtypes.prng_key)
           for a in arrays):
        return jnp.stack(arrays)
    return jax.device_put(np.stack([np.asarray(a) for a in arrays]))  # jnp.asarray would compile a copy


def run_key_data(seed: int, *path: int) -> np.ndarray:
    """Raw key data of ``keys.run_key(seed, *path)`` (what chunk programs take)."""
    return np.asarray(jax.random.key_data(keys.run_key(seed, *path)))
