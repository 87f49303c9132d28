"""Euclidean projection onto an l2 ball (the constraint set W of the papers)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from dpjax import _validate
from dpjax.primitives import trees
from dpjax.primitives.clipping import global_norm

_TINY = 1e-30  # the norm floor of clipping.clip_to_norm: 0/0 never happens, tiny norms scale by 1

PyTree = Any


def project_l2_ball(tree: PyTree, radius, center: PyTree | None = None) -> PyTree:
    """Projects ``tree`` onto ``{w : ||w - center|| <= radius}`` (global l2 norm over all leaves).

    ``tree`` and ``center`` are pytrees of the same structure and shapes (``center=None``: the origin);
    ``radius`` a scalar. Returns a pytree shaped like ``tree``.

    ``radius = inf`` (or ``None``) is the identity (W = R^d). Points inside the ball are returned unchanged (scaled by
    exactly 1.0). A concrete ``radius`` must be >= 0 and not NaN (a negative one would reflect the point through the
    centre); a traced one is checked in ``dpjax.primitives.checked`` mode."""
    if radius is None:
        return tree
    _validate.check_if_concrete(_validate.check_nonnegative, "radius", radius, allow_inf=True)
    trees.check_array_tree("tree", tree)
    if center is None:
        center = jax.tree_util.tree_map(jnp.zeros_like, tree)
    offset = jax.tree_util.tree_map(jnp.subtract, tree, center)
    norm = global_norm(offset)
    scale = jnp.minimum(1.0, radius / jnp.maximum(norm, _TINY))
    return jax.tree_util.tree_map(lambda c, o: c + o * scale.astype(o.dtype), center, offset)
