"""Per-example clipping of flax networks without per-example gradients ("ghost clipping").

DP-SGD (Abadi et al. 2016, Algorithm 1) needs ``sum_i clip_C(grad l_i)`` with ``clip_C(g) = g min(1, C / ||g||)`` and
``||g||`` the global l2 norm over all parameters. Materialising every per-example gradient (``vmap(grad)``) costs
``B x |params|`` memory and time. Every supported layer's per-example gradient is instead a function of two small
per-example tensors that one batched pass already computes: the layer's input ``a_i`` and the gradient ``delta_i`` of
the example's loss with respect to the layer's output.

Ghost layers (norm from ``a_i`` and ``delta_i``, no per-example gradient):

* dense layers (linen ``Dense``/``DenseGeneral``, NNX ``Linear``/``LinearGeneral``, also inside
  ``MultiHeadDotProductAttention``/``SelfAttention``/NNX ``MultiHeadAttention``) ``y = a W + b`` applied at ``T``
  positions (the contracted axes flattened to ``K``, the feature axes to ``C``): ``grad_W = A_i^T D_i`` (``A_i [T, K]``,
  ``D_i [T, C]``), ``grad_b = sum_t D_it``. Squared norm ``||a_i||^2 ||delta_i||^2`` for ``T = 1`` (Goodfellow 2015),
  else the Gram form ``sum_{t,s} (a_t . a_s)(delta_t . delta_s)`` (Li et al. 2022, "Large language models can be strong
  differentially private learners", Sec. 4) or the materialised ``||A_i^T D_i||^2``, whichever costs fewer flops (the
  per-layer choice of Bu et al. 2023, "Differentially private optimization on large model at small cost", mixed ghost
  clipping);
* convolutions (linen/NNX ``Conv``): the same identity on unfolded input patches (``A_i [P, k k c_in]``, P output
  positions; Rochette et al. 2019, Bu et al. 2023); in the materialised form the patches are unfolded a few examples at
  a time, each chunk multiplied while it is still in cache (``lax.map``; the whole batch's patches are never formed);
* embeddings (``Embed``): ``grad_E = onehot(idx_i)^T D_i``, squared norm
  ``sum_{t,s} [idx_t = idx_s] (delta_t . delta_s)``; ``Embed.attend`` (``y = q E^T``): ``grad_E = D_i^T Q_i``, a dense
  layer with the roles of input and output swapped; a tied embedding/read-out (``__call__`` and ``attend`` on one table)
  adds the cross term ``2 sum_{t,s} D^attend_s[idx_t] (delta_t . q_s)``.

Materialised layers (no ghost identity; the layer's own per-example gradient, ``B x |layer|`` floats, is formed layer by
layer): every other flax module that owns parameters and no parametrised submodules (``LayerNorm``, ``RMSNorm``,
``GroupNorm``, grouped/masked/circular convolutions, ``ConvTranspose``, ``Einsum``, ``BatchNorm`` with running averages,
custom leaf modules), and the biases of the layers above. The per-example gradient comes from zero perturbations added
to the layer's parameters *inside* the one batched pass (``params + z_i`` for example ``i``; the backward pass to ``z``
is the per-example gradient of this layer only), so any leaf module works, whatever its arguments.

Weight sharing: a layer called several times, NNX modules sharing a ``Variable``, and a tied embedding/read-out are
handled parameter by parameter: the per-example gradient of a shared parameter is the sum of its calls' contributions
(stacked along the position axis for the Gram form); a parameter shared by layers of different kinds is materialised.

Refused (``GhostPlan.fast`` False with a reason naming the layer or parameter; the default path then runs
``vmap(grad)``, ``require_fast=True`` raises ``GhostFallbackError``): layers called inside a JAX transformation within
the loss (``nn.scan``/``nn.remat``/``nn.vmap``/``nn.jit``, their NNX counterparts,
``jax.lax.scan``/``jax.checkpoint``/``jax.jit``), parameters used outside the layer that owns them (``emb.embedding``
read directly, weight decay inside the loss, NNX state merged by the loss itself instead of through ``NNXLoss``),
modules that own parameters and also have parametrised submodules, ``BatchNorm`` in training mode (its batch statistics
couple the examples). These checks are exact, not heuristic: every use of every parameter in the traced loss (its jaxpr)
must lie inside a recognised layer call that owns the parameter, so no model can silently get a wrong norm.

The algorithm: one batched forward pass with zero "perturbation" tensors added to every ghost layer's output (and to
every materialised layer's parameters), capturing the ghost layers' inputs; one backward pass to the perturbations
(activation gradients only, no weight gradients) gives every ``delta_i`` and every materialised per-example layer
gradient; the norms above give the clip factors ``f_i = w_i min(1, C / ||g_i||)``; the clipped sum is, per layer, the
weight gradient of the batch with output cotangents ``f_i delta_i`` (``A^T diag(f) D`` for a dense layer), which costs
what the non-private backward pass spends on weight gradients. No per-example gradient of the whole model is formed.

Flax NNX: pass the loss as an ``NNXLoss`` (``nnx_loss(model, loss)`` builds one); it is an ordinary per-example loss,
and the ghost functions recognise it and observe the NNX layers' calls.

Gradient differences (DIFF2, Murata & Suzuki 2023, Algorithm 1 step 2): ``grad l_i(w) - grad l_i(w')`` of a dense layer
is ``A^T (D - D') + (A - A')^T D'``, i.e. again one "dense layer" whose factors are ``[A; A - A']`` and ``[D - D'; D']``
stacked along the position axis, so its norm uses the same identities; when the layer's input does not depend on the
parameters (``GhostPlan.fixed_inputs``: a first layer sees the data) the difference is just ``A^T (D - D')``.
``layer_passes`` / ``clipped_difference_from_passes`` let DIFF2 carry the previous iterate's pass instead of recomputing
it. (Expanding ``||A^T D||^2 - 2<A^T D, A'^T D'> + ||A'^T D'||^2`` instead would cancel catastrophically in float32 when
``w' ~ w``.)

The semantics are those of ``dpjax.primitives.clipping.per_example_clipped_sum``; ``fast_path`` says which path ran.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from dpjax.primitives import clipping
from dpjax.primitives.ghost_passes import (capture_layer_io, dense_of, difference_parts, layer_contribution,
                                           layer_parts, parts_sq_norms, weighted_layer_sums)
from dpjax.primitives.ghost_plan import MATERIALISED, GhostPlan, NNXLoss, make_plan, nnx_loss

__all__ = [  # the planning (ghost_plan) and the one batched pass (ghost_passes) are internal modules
    "GhostClippedSum", "GhostFallbackError", "NNXLoss", "carried_passes", "clipped_difference_from_passes",
    "clipped_difference_sum", "ghost_clipped_sum", "layer_passes", "make_plan",
    "nnx_loss", "per_example_grad_norms",
]

PyTree = Any
_TINY = 1e-30  # the norm floor of clipping.clip_to_norm (factor min(1, C / max(norm, floor)))


class GhostClippedSum(NamedTuple):
    """``ClippedSum`` plus which path computed it.

    Attributes:
      total, count, sensitivity: as in ``dpjax.primitives.clipping.ClippedSum`` (``total`` a pytree
        shaped like ``params``, no batch axis; ``count`` and ``sensitivity`` scalars).
      fast_path: True when ghost norms ran, False for the ``vmap(grad)`` fallback
        (a Python bool at trace time; an array once returned from ``jit``)."""

    total: PyTree
    count: jax.Array
    sensitivity: Any
    fast_path: Any


class GhostFallbackError(ValueError):
    """Raised with ``require_fast=True`` when the model is not fully supported."""


def _clip_coefficients(sq_norms, clip_norm, weights):
    """``w_i min(1, C / ||g_i||)``, exactly 0 where ``w_i = 0`` (even for a NaN padding row)."""
    factor = jnp.minimum(1.0, clip_norm / jnp.maximum(jnp.sqrt(sq_norms), _TINY))
    return jnp.where(weights != 0, weights * factor, jnp.zeros_like(factor))


def _weights(mask, batch, dtype=jnp.float32):
    return jnp.ones((batch,), dtype) if mask is None else mask.astype(dtype)


def _zero_masked_rows(x, mask, weights):
    """``x`` with its masked rows zeroed before a batched ghost pass: the per-example parameters of a materialised
    layer are a vmapped kernel, which XLA may lower as one grouped op with zero-masked weights, where 0 * NaN in one
    row turns every row's gradient (hence norm and clip factor) into NaN (found by test_ghost_property)."""
    if mask is None or not jnp.issubdtype(x.dtype, jnp.inexact):
        return x
    return jnp.where((weights != 0).reshape((-1,) + (1,) * (x.ndim - 1)), x, jnp.zeros_like(x))


def _resolve(plan: GhostPlan, require_fast: bool, force_fallback: bool) -> bool:
    if force_fallback:
        return False
    if not plan.fast and require_fast:
        raise GhostFallbackError(f"require_fast=True but ghost clipping cannot run: {plan.reason}")
    return plan.fast


def per_example_grad_norms(loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array, *,
                           require_fast: bool = False):
    """Global l2 norms ``||grad loss_fn(params, x_i, y_i)||`` for every example.

    Returns ``(norms [B], fast_path)``."""
    plan = make_plan(loss_fn, params, x, y)
    if not _resolve(plan, require_fast, False):
        grads = clipping.per_example_grads(loss_fn, params, x, y)
        return jax.vmap(clipping.global_norm)(grads), False
    leaves = jax.tree_util.tree_leaves(params)
    inputs, deltas = capture_layer_io(loss_fn, params, x, y, plan)
    return jnp.sqrt(parts_sq_norms(layer_parts(plan, leaves, inputs, deltas)[0])), True


def ghost_clipped_sum(loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array, clip_norm,
                      mask: jax.Array | None = None, neighboring: str = "replace-one", *, require_fast: bool = False,
                      force_fallback: bool = False) -> GhostClippedSum:
    """``sum_i mask_i clip_C(grad loss_fn(params, x_i, y_i))`` by ghost norms.

    Same quantity (to float rounding) and sensitivity as ``clipping.per_example_clipped_sum``; ``mask`` may hold 0/1
    padding flags or non-negative multiplicities. ``clip_norm=None`` or ``inf`` sums unclipped. ``require_fast=True``
    raises ``GhostFallbackError`` instead of falling back to ``vmap(grad)``; ``force_fallback=True`` runs the fallback
    (reference). ``loss_fn`` may be an ``NNXLoss`` (flax NNX models, see ``nnx_loss``).

    Shapes: ``loss_fn(params, x_i, y_i) -> scalar`` is the loss of one example (``x_i = x[i]``, no batch
    axis; a flax linen ``model.apply({"params": params}, x_i)`` inside it); ``x`` ``[B, ...]``, ``y``
    ``[B, ...]``, ``mask`` ``[B]``. Returns ``GhostClippedSum`` with ``total`` shaped like ``params``."""
    sensitivity = clipping.sensitivity_of_clipped_sum(jnp.inf if clip_norm is None else clip_norm, neighboring)
    clipping.check_mask(mask)  # the per-example path refuses the same masks
    clipping.check_batch_shapes(x, y, mask)
    plan = make_plan(loss_fn, params, x, y)
    if not _resolve(plan, require_fast, force_fallback):
        bound = jnp.inf if clip_norm is None else clip_norm
        res = clipping.per_example_clipped_sum(loss_fn, params, x, y, bound, mask, neighboring)
        return GhostClippedSum(res.total, res.count, sensitivity, False)
    weights = _weights(mask, x.shape[0])
    x = _zero_masked_rows(x, mask, weights)
    inputs, deltas = capture_layer_io(loss_fn, params, x, y, plan)
    if clip_norm is None:
        coef = weights
        mats = _materialised_leaves(plan, jax.tree_util.tree_leaves(params), inputs, deltas)
    else:
        parts, mats = layer_parts(plan, jax.tree_util.tree_leaves(params), inputs, deltas)
        sq = parts_sq_norms(parts)
        # As clipping.clip_to_norm: a non-finite gradient (overflow) contributes zero when the clip is finite, so one
        # record cannot turn the total into NaN; unclipped (clip inf) it propagates, on both paths.
        finite = jnp.isfinite(sq) | ~jnp.isfinite(clip_norm)
        coef = jnp.where(finite, _clip_coefficients(sq, clip_norm, weights), 0.0)
    total = weighted_layer_sums(plan, params, inputs, deltas, coef, mats, rows=weights != 0,
                                finite_rows=clip_norm is not None)
    return GhostClippedSum(total, jnp.sum(weights), sensitivity, True)


def _materialised_leaves(plan: GhostPlan, leaves, inputs, deltas):
    """``{leaf: G [B, *leaf.shape]}`` for the leaves a materialised layer uses (an unclipped sum needs no norms; the
    ghost layers' sums come from their weight-gradient pass)."""
    mats = {}
    for leaf, contribs in plan.leaf_groups:
        if any(plan.calls[k].kind == MATERIALISED for k, _ in contribs):
            mats[leaf] = sum(dense_of(layer_contribution(plan.calls[k], role, inputs[k], deltas[k]), leaves[leaf].shape)
                             for k, role in contribs)
    return mats


def layer_passes(loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array, plan: GhostPlan):
    """``(inputs, deltas)`` of every layer call at ``params`` (one forward and one activation-gradient backward pass);
    ``plan`` from ``make_plan``. DIFF2 carries these from one round to the next (the previous iterate's pass)."""
    return capture_layer_io(loss_fn, params, x, y, plan)


def carried_passes(plan: GhostPlan, passes):
    """``passes`` without the layer inputs that do not depend on the parameters
    (they are the same at every iterate, so carrying them would only cost memory)."""
    inputs, deltas = passes
    return [None if f else a for a, f in zip(inputs, plan.fixed_inputs)], deltas


def clipped_difference_from_passes(plan: GhostPlan, params: PyTree, prev_params: PyTree, passes, prev_passes,
                                   clip_norm, weights, use_difference=True) -> PyTree:
    """``sum_i weights_i clip_C(grad l_i(params) - grad l_i(prev_params))`` from the
    two iterates' ``layer_passes`` (``prev_passes`` may come from ``carried_passes``).

    A layer whose input is the data (``plan.fixed_inputs``) has the difference ``A^T (D - D')``: its norm is
    ``||a_i||^2 ||d_i - d'_i||^2`` and its clipped sum one weight-gradient pass with cotangents ``f_i (d_i - d'_i)``.
    ``use_difference=False`` clips the plain gradients at ``params``."""
    inputs, deltas = passes
    prev_inputs = [a if f or q is None else q for a, q, f in zip(inputs, prev_passes[0], plan.fixed_inputs)]
    prev_deltas = prev_passes[1]
    parts, mats = layer_parts(plan, jax.tree_util.tree_leaves(params), inputs, deltas)
    prev_parts, prev_mats = layer_parts(plan, jax.tree_util.tree_leaves(prev_params), prev_inputs, prev_deltas)
    sq = jnp.where(use_difference, parts_sq_norms(difference_parts(parts, prev_parts)), parts_sq_norms(parts))
    coef = _clip_coefficients(sq, clip_norm, weights)
    coef_prev = jnp.where(use_difference, coef, jnp.zeros_like(coef))
    # one weight-gradient pass for data-input layers: cotangents coef (D - [use] D')
    merged = frozenset(k for k, f in enumerate(plan.fixed_inputs) if f)
    deltas_eff = [d - jnp.where(use_difference, q, jnp.zeros_like(q)) if k in merged else d
                  for k, (d, q) in enumerate(zip(deltas, prev_deltas))]
    rows = weights != 0  # masked rows add nothing, even if NaN (coefficients are 0 there too)
    cur = weighted_layer_sums(plan, params, inputs, deltas_eff, coef, mats, rows=rows)
    prev = weighted_layer_sums(plan, prev_params, prev_inputs, prev_deltas, coef_prev, prev_mats, skip=merged, rows=rows)
    return jax.tree_util.tree_map(jnp.subtract, cur, prev)


def clipped_difference_sum(
    loss_fn: Callable,
    params: PyTree,
    prev_params: PyTree,
    x: jax.Array,
    y: jax.Array,
    clip_norm,
    mask: jax.Array | None = None,
    *,
    use_difference=True,
    require_fast: bool = False,
    force_fallback: bool = False,
) -> GhostClippedSum:
    """``sum_i mask_i clip_C(grad l_i(params) - grad l_i(prev_params))`` (DIFF2,
    Murata & Suzuki 2023, Algorithm 1 step 2), without forming either gradient.

    ``use_difference`` (bool, may be traced): False clips the plain gradients at
    ``params`` instead (a DIFF2 restart round). Replace-one sensitivity ``2C``.

    Shapes as ``ghost_clipped_sum``: ``loss_fn(params, x_i, y_i) -> scalar`` for one example, ``params``
    and ``prev_params`` the same pytree structure, ``x``/``y`` ``[B, ...]``, ``mask`` ``[B]``; ``total``
    is shaped like ``params``."""
    sensitivity = clipping.sensitivity_of_clipped_sum(clip_norm, "replace-one")
    static_plain = isinstance(use_difference, bool) and not use_difference
    plan = make_plan(loss_fn, params, x, y)
    weights = _weights(mask, x.shape[0])
    if not _resolve(plan, require_fast, force_fallback):
        g = clipping.per_example_grads(loss_fn, params, x, y)
        if not static_plain:
            g_prev = clipping.per_example_grads(loss_fn, prev_params, x, y)
            g = jax.tree_util.tree_map(lambda u, v: jnp.where(use_difference, u - v, u), g, g_prev)
        res = clipping.clipped_sum(g, clip_norm, mask)
        return GhostClippedSum(res.total, res.count, sensitivity, False)
    x = _zero_masked_rows(x, mask, weights)  # as ghost_clipped_sum: a NaN padding row stays out of the real rows
    passes = capture_layer_io(loss_fn, params, x, y, plan)
    if static_plain:
        inputs, deltas = passes
        parts, mats = layer_parts(plan, jax.tree_util.tree_leaves(params), inputs, deltas)
        coef = _clip_coefficients(parts_sq_norms(parts), clip_norm, weights)
        return GhostClippedSum(weighted_layer_sums(plan, params, inputs, deltas, coef, mats, rows=weights != 0),
                               jnp.sum(weights), sensitivity, True)
    prev_passes = capture_layer_io(loss_fn, prev_params, x, y, plan)
    total = clipped_difference_from_passes(plan, params, prev_params, passes, prev_passes, clip_norm, weights,
                                           use_difference)
    return GhostClippedSum(total, jnp.sum(weights), sensitivity, True)
