"""Gaussian noise for pytrees.

``add_gaussian_noise(key, tree, std)`` releases ``tree + N(0, std^2 I)``. If
``tree`` has l2 sensitivity ``Delta`` under some neighbouring relation, one
release is ``(eps, delta)``-DP for every pair on the curve of the analytic
Gaussian mechanism with noise multiplier ``std / Delta`` (Balle & Wang 2018);
``dpjax.accounting`` turns schedules of such releases into ``(eps, delta)``.

All entries are independent: leaves of one dtype share one flat draw (split
into the leaves), mixed-dtype trees get one key per leaf.
``std = 0`` adds exactly zero, which makes a private algorithm with ``std = 0``
bit-identical to its non-private twin.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate

PyTree = Any


def gaussian_like(key: jax.Array, tree: PyTree, std) -> PyTree:
    """Independent ``N(0, std^2)`` entries with the shapes and dtypes of ``tree``.

    A concrete ``std`` must be finite and >= 0 (a traced one is checked in
    ``dpjax.primitives.checked`` mode).
    """
    _validate.check_if_concrete(_validate.check_nonnegative, "std", std)
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    dtypes = {jnp.dtype(leaf.dtype) for leaf in leaves}
    if len(dtypes) == 1 and len(leaves) > 1:
        # One threefry draw for all leaves, then split: same law (i.i.d. normals),
        # same seed => same result, about 2x faster on CPU than a draw per leaf
        # (experiments/benchmarks/bench_noise.py).
        dtype = dtypes.pop()
        sizes = [int(np.prod(leaf.shape)) for leaf in leaves]
        flat = jax.random.normal(key, (sum(sizes),), dtype) * jnp.asarray(std, dtype)
        parts = jnp.split(flat, np.cumsum(sizes)[:-1])
        noise = [part.reshape(leaf.shape) for part, leaf in zip(parts, leaves)]
        return jax.tree_util.tree_unflatten(treedef, noise)
    keys = jax.random.split(key, len(leaves))
    noise = [
        jax.random.normal(k, leaf.shape, leaf.dtype) * jnp.asarray(std, leaf.dtype)
        for k, leaf in zip(keys, leaves)
    ]
    return jax.tree_util.tree_unflatten(treedef, noise)


def add_gaussian_noise(key: jax.Array, tree: PyTree, std) -> PyTree:
    """``tree + N(0, std^2 I)`` (std may be a traced scalar).

    A concrete ``std`` must be finite and >= 0 (a negative one would silently
    act as ``|std|``); a traced one is the caller's responsibility.
    """
    _validate.check_if_concrete(_validate.check_nonnegative, "std", std)
    return jax.tree_util.tree_map(jnp.add, tree, gaussian_like(key, tree, std))
