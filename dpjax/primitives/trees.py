"""Structure checks for the pytrees the public primitives take, so that a wrong tree is refused with a message naming
the leaf (``tree['a'] is a str ('x')``) instead of jax's abstract-array or ``vmap`` error. Shapes and dtypes are static,
so every check here also holds under ``jit``/``vmap`` (tracers carry both) and costs nothing at run time."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

PyTree = Any


def _leaves(name: str, tree: PyTree):
    return [(name + jax.tree_util.keystr(path), leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(tree)]


def check_array_tree(name: str, tree: PyTree) -> None:
    """Every leaf of ``tree`` is a numeric array or number (bool, int, float or complex dtype)."""
    for where, leaf in _leaves(name, tree):
        kind = getattr(getattr(leaf, "dtype", None), "kind", None)
        if kind is None and isinstance(leaf, (bool, int, float, complex, np.number)):
            continue
        if kind is None or kind not in "biufc":
            what = f"an array of dtype {leaf.dtype}" if kind is not None else f"a {type(leaf).__name__} ({leaf!r:.40})"
            raise ValueError(f"{where} is {what}; the leaves must be numeric arrays (e.g. a flax params dict)")


def check_leading_axis(name: str, tree: PyTree) -> int:
    """Every leaf of ``tree`` has the same leading (example) axis; returns its length B."""
    sizes = {}
    for where, leaf in _leaves(name, tree):
        shape = np.shape(leaf)
        if not shape:
            raise ValueError(f"{where} is a scalar; every leaf of {name} needs the leading example axis [B, ...]")
        sizes[where] = shape[0]
    if not sizes:
        raise ValueError(f"{name} holds no array; it must be a pytree of [B, ...] arrays")
    if len(set(sizes.values())) > 1:
        raise ValueError(f"the leaves of {name} must share one leading example axis B: "
                         + ", ".join(f"{k} has {v}" for k, v in sizes.items()))
    return next(iter(sizes.values()))


def check_same_structure(name: str, tree: PyTree, reference_name: str, reference: PyTree) -> None:
    """``tree`` has the structure, shapes and dtype kinds of ``reference`` (e.g. ``jax.eval_shape`` of an init)."""
    got, want = jax.tree_util.tree_structure(tree), jax.tree_util.tree_structure(reference)
    if got != want:
        raise ValueError(f"{name} has tree structure {got}; {reference_name} has {want}")
    for (where, a), (_, b) in zip(_leaves(name, tree), _leaves(name, reference)):
        if np.shape(a) != np.shape(b):
            raise ValueError(f"{where} has shape {np.shape(a)}; {reference_name} has {np.shape(b)}")
