"""Per-example gradients and per-example clipping of pytrees.

Clipping is the only thing that bounds how much one record can move a released vector, so it is where sensitivity comes
from. ``clipped_sum`` returns the clipped *sum* together with its l2 sensitivity under a named neighbouring relation:

* ``"add-remove"`` (add or delete one record): one clipped term appears or disappears, sensitivity ``C``;
* ``"replace-one"`` (substitute one record; the relation of ISRL-DP and of the fixed-size-batch analyses): one clipped
  term ``a`` becomes ``a'`` with ``||a - a'|| <= 2C``, sensitivity ``2C``.

The sensitivity assumes the changed record appears *once* in the batch. With sampling with replacement a record can
appear ``Q`` times and the sensitivity is ``Q`` times larger; the accounting layer handles that, not this module.

Norms are the single global l2 norm over all leaves of the pytree (as in
Abadi et al. 2016 and jax_privacy), never per-leaf.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, NamedTuple

import jax
import numpy as np
import jax.numpy as jnp

from dpjax import _validate
from dpjax.primitives import trees
from dpjax.accounting.schedules import Neighboring, coerce_enum

PyTree = Any

# Norms below this are treated as zero: clipping a zero vector must give zero,
# never NaN (C / 0).
_TINY = 1e-30


def global_norm(tree: PyTree) -> jax.Array:
    """l2 norm of all leaves of ``tree`` (any pytree of arrays) taken together: a float scalar (shape ``()``)."""
    trees.check_array_tree("tree", tree)
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.sqrt(sum(jnp.sum(jnp.square(leaf)) for leaf in leaves))


def clip_to_norm(tree: PyTree, clip_norm) -> PyTree:
    """Scales ``tree`` by ``min(1, clip_norm / ||tree||)``.

    Guarantees ``||result|| <= clip_norm`` (up to float rounding); a tree whose norm is already ``<= clip_norm`` is
    returned multiplied by exactly 1.0, and the zero tree stays zero for every ``clip_norm >= 0`` (including 0).
    ``clip_norm = inf`` disables clipping. A concrete ``clip_norm`` (Python, NumPy or jax scalar, or array) must be >= 0
    and not NaN (a negative one would flip the sign of every vector); a traced one is the caller's contract, checked in
    ``dpjax.primitives.checked`` mode.

    A tree with an inf or NaN entry (a gradient that overflowed) becomes the zero tree when ``clip_norm``
    is finite: ``C / ||inf||`` = 0 times inf is NaN, and one such record would turn the whole clipped sum
    -- and the release -- into NaN, an output decided by that record outside the accounted mechanism
    (issue 23). Zero has norm <= C, so the sum's sensitivity is unchanged. Without clipping
    (``clip_norm = inf``, the non-private twin) the NaN propagates as before."""
    _validate.check_if_concrete(_validate.check_nonnegative, "clip_norm", clip_norm, allow_inf=True)
    scale, keep = clip_coefficients(global_norm(tree), clip_norm)
    return jax.tree_util.tree_map(lambda leaf: jnp.where(keep, leaf * scale.astype(leaf.dtype),
                                                         jnp.zeros_like(leaf)), tree)


def clip_coefficients(norms, clip_norm):
    """``clip_to_norm``'s rule for vectors of l2 norms ``norms`` (any shape): ``(scale, keep)``, the factor
    ``min(1, clip_norm / norm)`` and whether the vector is kept (a finite norm, or no clipping); a vector not kept
    becomes zero (select it out: ``inf x 0`` is NaN). For clippers that have the norms without the vectors."""
    scale = jnp.minimum(1.0, clip_norm / jnp.maximum(norms, _TINY))
    return scale, jnp.isfinite(norms) | ~jnp.isfinite(clip_norm)


def per_example_grads(loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array) -> PyTree:
    """Gradients of ``loss_fn(params, x_j, y_j)`` for every example ``j``.

    ``loss_fn(params, x_i, y_i) -> scalar`` is the loss of ONE example: ``x_i = x[i]`` and ``y_i = y[i]`` without the
    batch axis (e.g. ``[d]`` and ``[]``), returning a float scalar (shape ``()``); it is differentiated with respect to
    ``params`` (any pytree) and vmapped over the batch. ``x`` is ``[B, ...]`` and ``y`` ``[B, ...]`` (the same leading
    batch axis B). Each leaf of the result has the shape of the matching ``params`` leaf with a new leading axis of
    length B (memory: B copies of the parameters; ``ghost_clipping.ghost_clipped_sum`` avoids them for flax models)."""
    return jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))(params, x, y)


def clip_per_example(grads: PyTree, clip_norm) -> PyTree:
    """Clips each example's gradient to global norm ``clip_norm`` (>= 0, see ``clip_to_norm``).

    ``grads``: a pytree whose leaves share a leading example axis B (``per_example_grads``' output);
    each example is clipped jointly over all its leaves. Returns the same shapes."""
    _validate.check_if_concrete(_validate.check_nonnegative, "clip_norm", clip_norm, allow_inf=True)
    trees.check_leading_axis("grads", grads)
    return jax.vmap(clip_to_norm, in_axes=(0, None))(grads, clip_norm)


class ClippedSum(NamedTuple):
    """A sum of per-example clipped vectors and its l2 sensitivity.

    Attributes:
      total: pytree, sum over the (valid) examples of the clipped vectors.
      count: number of valid examples summed (a traced scalar).
      sensitivity: l2 sensitivity of ``total`` to one record under the relation it was computed for (``C`` or ``2C``).
    """

    total: PyTree
    count: jax.Array
    sensitivity: Any


def sensitivity_of_clipped_sum(clip_norm, neighboring: str = "replace-one"):
    """l2 sensitivity of a sum of vectors each clipped to ``clip_norm`` (a scalar, as ``clip_norm`` is).

    ``2 * clip_norm`` under replace-one, ``clip_norm`` under add/remove. The
    record is assumed to appear once in the sum."""
    coerce_enum("neighboring", neighboring, Neighboring)
    _check_clip_type(clip_norm)
    # any concrete kind (Python, NumPy, jax scalar or array): a negative clip norm gives a negative sensitivity
    _validate.check_if_concrete(_validate.check_nonnegative, "clip_norm", clip_norm, allow_inf=True)
    return 2.0 * clip_norm if neighboring == "replace-one" else clip_norm


def _check_clip_type(clip_norm) -> None:
    """A clip norm is a real number or a real array (concrete or traced): a ``TypeError`` naming it otherwise (a str
    reached ``2.0 * "1.0"``: "can't multiply sequence by non-int")."""
    if isinstance(clip_norm, numbers.Real):  # bools go on to check_nonnegative's ValueError, as before
        return
    kind = getattr(getattr(clip_norm, "dtype", None), "kind", None)
    if kind not in ("f", "i", "u", "b"):
        raise TypeError(f"clip_norm={clip_norm!r} must be a real number >= 0 (or a real scalar array), not "
                        f"{type(clip_norm).__name__}" + (f" of dtype {clip_norm.dtype}" if kind else ""))


def check_batch_shapes(x, y, mask=None) -> None:
    """``x``, ``y`` (arrays or pytrees of arrays) and ``mask`` share one leading batch axis B (``mask`` is ``[B]``):
    a ``ValueError`` naming both sizes, instead of ``vmap``'s message about its internal arguments. Shapes are static,
    so this holds under ``jit`` too."""
    sizes = {}
    for name, tree in (("x", x), ("y", y)):
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
            shape = np.shape(leaf)
            where = name + jax.tree_util.keystr(path)
            if getattr(getattr(leaf, "dtype", None), "kind", None) == "c":
                # a complex input gives complex losses: the ghost path silently dropped the imaginary part
                raise TypeError(f"{where} has dtype {leaf.dtype}; a per-example loss needs real inputs (complex "
                                "features have no clipped-gradient meaning here)")
            if not shape:
                raise ValueError(f"{where} is a scalar; it must have a leading batch axis [B, ...]")
            sizes[where] = shape[0]
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{k} has {v}" for k, v in sizes.items())
        raise ValueError(f"x and y must have the same leading batch size B (one row per example): {listed}")
    if mask is not None and sizes:
        b = next(iter(sizes.values()))
        if np.shape(mask) != (b,):
            raise ValueError(f"mask has shape {np.shape(mask)}; it must be [B] = ({b},), one flag per example of x")


def check_mask(mask) -> None:
    """A concrete ``mask`` (host array) holds 0/1 flags or non-negative finite multiplicities; a ``ValueError`` names
    the first bad entry (``mask[3]=-1.0``: a negative weight would subtract a record, outside the sensitivity).
    Traced masks are the caller's contract (read on the host only where concrete, vectorised)."""
    if mask is None or _validate.is_tracer(mask):
        return
    try:
        arr = np.asarray(mask)
    except Exception:  # noqa: BLE001 (not host-readable: left to the trace)
        return
    if arr.dtype == bool:
        return
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"mask has dtype {arr.dtype}; give 0/1 flags (bool or numbers) or non-negative multiplicities")
    bad = ~np.isfinite(arr) | (arr < 0) if arr.dtype.kind == "f" else arr < 0
    if bad.any():
        i = int(np.flatnonzero(bad.reshape(-1))[0])
        raise ValueError(f"mask[{i}]={arr.reshape(-1)[i].item()!r} must be 0/1 (padding) or a non-negative finite "
                         "multiplicity")


def clipped_sum(
    grads: PyTree,
    clip_norm,
    mask: jax.Array | None = None,
    neighboring: str = "replace-one",
) -> ClippedSum:
    """Clips every example of ``grads`` (leading axis) and sums them.

    Args:
      grads: pytree whose leaves share a leading example axis of length B.
      clip_norm: clip threshold C >= 0 (float or traced scalar; ``inf`` means
        no clipping, in which case the sensitivity is unbounded).
      mask: optional bool/0-1 array [B]; examples with mask 0 (padding) do not contribute.
      neighboring: ``"replace-one"`` or ``"add-remove"``.

    Returns:
      ``ClippedSum(total, count, sensitivity)``."""
    sensitivity = sensitivity_of_clipped_sum(clip_norm, neighboring)
    check_mask(mask)
    clipped = clip_per_example(grads, clip_norm)
    leaves = jax.tree_util.tree_leaves(clipped)
    batch = leaves[0].shape[0]
    weights = jnp.ones((batch,), leaves[0].dtype) if mask is None else mask.astype(leaves[0].dtype)
    total = jax.tree_util.tree_map(lambda leaf: jnp.tensordot(weights, leaf, axes=1), clipped)
    return ClippedSum(total=total, count=jnp.sum(weights), sensitivity=sensitivity)


def per_example_clipped_sum(loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array, clip_norm,
                            mask: jax.Array | None = None, neighboring: str = "replace-one") -> ClippedSum:
    """Per-example gradients of ``loss_fn`` on a batch, clipped and summed: ``sum_i mask_i clip_C(grad l_i)``.

    Args:
      loss_fn: ``loss_fn(params, x_i, y_i) -> scalar`` is the loss of ONE example: ``x_i = x[i]`` and
        ``y_i = y[i]`` without the batch axis (e.g. ``[d]`` and ``[]``), returning a float scalar (shape
        ``()``); it is differentiated with respect to ``params`` (any pytree) and vmapped over the batch.
      params: the pytree differentiated (e.g. ``{"w": [d], "b": []}`` or a flax ``params`` dict).
      x: features ``[B, ...]``; y: labels ``[B, ...]`` (same leading batch axis B).
      clip_norm: C >= 0 (float or traced scalar; ``inf``: no clipping, unbounded sensitivity).
      mask: optional ``[B]`` bool/0-1 array; padded examples (0) contribute nothing.
      neighboring: ``"replace-one"`` (sensitivity 2C) or ``"add-remove"`` (C).

    Returns:
      ``ClippedSum``: ``total`` (a pytree shaped like ``params``, no batch axis), ``count`` (scalar: the
      examples summed) and ``sensitivity`` (the l2 sensitivity of ``total`` for one example).

    Example::

        def loss_fn(w, x_i, y_i):          # x_i [d], y_i [] -> scalar
            return jnp.logaddexp(0.0, -y_i * x_i @ w)

        res = per_example_clipped_sum(loss_fn, jnp.zeros(d), x, y, clip_norm=1.0)   # x [B, d], y [B]
        noisy = add_gaussian_noise(key, res.total, sigma * res.sensitivity)
    """
    check_batch_shapes(x, y, mask)
    return clipped_sum(per_example_grads(loss_fn, params, x, y), clip_norm, mask, neighboring)
