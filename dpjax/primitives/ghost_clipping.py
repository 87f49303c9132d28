"""Per-example clipping of flax networks without per-example gradients ("ghost clipping").

DP-SGD (Abadi et al. 2016, Algorithm 1) needs ``sum_i clip_C(grad l_i)`` with
``clip_C(g) = g min(1, C / ||g||)`` and ``||g||`` the global l2 norm over all
parameters. Materialising every per-example gradient (``vmap(grad)``) costs
``B x |params|`` memory and time. Every supported layer's per-example gradient
is instead a function of two small per-example tensors that one batched pass
already computes: the layer's input ``a_i`` and the gradient ``delta_i`` of the
example's loss with respect to the layer's output:

* dense layer ``y = a W + b`` applied at ``T`` positions (T = 1 for a vector
  input): ``grad_W = A_i^T D_i`` (``A_i [T, d_in]``, ``D_i [T, d_out]``) and
  ``grad_b = sum_t D_it``. Squared norm ``||a_i||^2 ||delta_i||^2`` for
  ``T = 1`` (Goodfellow 2015), else the Gram form
  ``sum_{t,s} (a_t . a_s)(delta_t . delta_s)`` (Li et al. 2022, "Large language
  models can be strong differentially private learners", Sec. 4) or the
  materialised ``||A_i^T D_i||^2``, whichever costs fewer flops (the per-layer
  choice of Bu et al. 2023, "Differentially private optimization on large model
  at small cost", mixed ghost clipping);
* convolution: the same identity on unfolded input patches (``A_i [P, k k c_in]``,
  P output positions; Rochette et al. 2019, Bu et al. 2023);
* embedding: ``sum_{t,s} [idx_t = idx_s] (delta_t . delta_s)``;
* LayerNorm / GroupNorm / RMSNorm: the per-example gradients of scale and bias
  are reductions of ``delta_i`` and the normalised input (as long as the
  feature vector, so materialised).

The algorithm: one batched forward pass with zero "perturbation" tensors added
to every supported layer's output, capturing the layers' inputs; one backward
pass to the perturbations (activation gradients only, no weight gradients)
gives every ``delta_i``; the norms above give the clip factors
``f_i = w_i min(1, C / ||g_i||)``; the clipped sum is, per layer, the weight
gradient of the batch with output cotangents ``f_i delta_i`` (``A^T diag(f) D``
for a dense layer), which costs what the non-private backward pass spends on
weight gradients. No per-example gradient of the whole model is formed.

Gradient differences (DIFF2, Murata & Suzuki 2023, Algorithm 1 step 2):
``grad l_i(w) - grad l_i(w')`` of a dense layer is
``A^T (D - D') + (A - A')^T D'``, i.e. again one "dense layer" whose factors are
``[A; A - A']`` and ``[D - D'; D']`` stacked along the position axis, so its norm
uses the same identities; when the layer's input does not depend on the
parameters (``GhostPlan.fixed_inputs``: a first layer sees the data) the
difference is just ``A^T (D - D')``. ``layer_passes`` / ``clipped_difference_from_passes``
let DIFF2 carry the previous iterate's pass instead of recomputing it. (Expanding ``||A^T D||^2 - 2<A^T D, A'^T D'> + ||A'^T D'||^2``
instead would cancel catastrophically in float32 when ``w' ~ w``.)

Supported: models made of ``flax.linen`` ``Dense``, ``Conv``, ``Embed``,
``LayerNorm``, ``GroupNorm`` and ``RMSNorm`` (exact types; any parameter-free
code in between: activations, pooling, reshapes, custom parameter-free
modules), each parameter used only through its layer's ``__call__`` (shared
layers called several times are fine). Anything else (other parametrised
layers, ``Embed.attend``, grouped or circular convolutions, parameters used
outside layers) falls back to ``vmap(grad)``; the result's ``fast_path`` says
which path ran and ``require_fast=True`` turns the fallback into an error.
The semantics are those of ``dpjax.primitives.clipping.per_example_clipped_sum``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.extend as jex
import jax.numpy as jnp

from dpjax.primitives import clipping

PyTree = Any
_TINY = clipping._TINY
_HIGHEST = jax.lax.Precision.HIGHEST

_KINDS = {nn.Dense: "dense", nn.Conv: "conv", nn.Embed: "embed",
          nn.LayerNorm: "norm", nn.GroupNorm: "norm", nn.RMSNorm: "norm"}


class GhostClippedSum(NamedTuple):
    """``ClippedSum`` plus which path computed it.

    Attributes:
      total, count, sensitivity: as in ``dpjax.primitives.clipping.ClippedSum``.
      fast_path: True when ghost norms ran, False for the ``vmap(grad)`` fallback
        (a Python bool at trace time; an array once returned from ``jit``).
    """

    total: PyTree
    count: jax.Array
    sensitivity: Any
    fast_path: Any


class GhostFallbackError(ValueError):
    """Raised with ``require_fast=True`` when the model is not fully supported."""


@dataclasses.dataclass(frozen=True)
class _Call:
    kind: str
    module: Any  # unbound clone, applied to one example
    param_names: tuple[str, ...]
    leaf_ids: tuple[int, ...]  # positions in tree_leaves(params)
    out_shape: tuple[int, ...]
    out_dtype: Any


@dataclasses.dataclass(frozen=True)
class GhostPlan:
    """What ghost clipping found in a model (built from one traced example).

    ``fast`` says whether ghost norms apply; ``reason`` why not; ``calls`` the
    supported layer calls in execution order; ``groups`` the calls that share
    parameters (a layer called several times is one group).
    """

    fast: bool
    reason: str
    calls: tuple[_Call, ...] = ()
    groups: tuple[tuple[int, ...], ...] = ()
    fixed_inputs: tuple[bool, ...] = ()  # per call: its input does not depend on params (e.g. the data)


def _own_params(module) -> dict:
    return {k: v for k, v in module.variables.get("params", {}).items() if not isinstance(v, dict)}


def _has_child_params(module) -> bool:
    return any(isinstance(v, dict) for v in module.variables.get("params", {}).values())


def _conv_padding(module, rank: int):
    pad = module.padding
    if isinstance(pad, str):
        return pad if pad in ("SAME", "VALID", "SAME_LOWER") else None
    if isinstance(pad, int):
        return [(pad, pad)] * rank
    pad = list(pad)
    return [(p, p) if isinstance(p, int) else tuple(p) for p in pad]


def _unsupported_reason(module, kind, args, kwargs) -> str | None:
    if kwargs or len(args) != 1:
        return f"{type(module).__name__} called with extra arguments"
    if kind == "conv":
        rank = len(module.kernel_size)
        if module.feature_group_count != 1 or module.mask is not None or _conv_padding(module, rank) is None:
            return "grouped, masked or circular/causal convolution"
    if kind == "norm" and getattr(module, "feature_axes", -1) not in (-1, (-1,)):
        return f"{type(module).__name__} with feature_axes={module.feature_axes}"
    return None


def make_plan(loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array) -> GhostPlan:
    """Traces ``loss_fn(params, x[0], y[0])`` once (shapes only) and decides the path."""
    found: list = []
    problems: list = []

    def probe(p, xi, yi):
        ids = {id(leaf): i for i, leaf in enumerate(jax.tree_util.tree_leaves(p))}

        def interceptor(fn, args, kwargs, ctx):
            module = ctx.module
            own = _own_params(module)
            if not own or ctx.method_name == "setup":
                return fn(*args, **kwargs)
            kind = _KINDS.get(type(module))
            if kind is None or ctx.method_name != "__call__" or _has_child_params(module):
                problems.append(f"{type(module).__name__}.{ctx.method_name} has parameters ghost clipping does not support")
                return fn(*args, **kwargs)
            reason = _unsupported_reason(module, kind, args, kwargs)
            if reason:
                problems.append(reason)
                return fn(*args, **kwargs)
            out = fn(*args, **kwargs)
            if any(id(v) not in ids for v in own.values()):
                problems.append(f"{type(module).__name__} parameters are not leaves of params")
                return out
            names = tuple(sorted(own))
            found.append(_Call(kind, module.clone(parent=None), names, tuple(ids[id(own[n])] for n in names),
                               tuple(out.shape), out.dtype))
            return out

        with nn.intercept_methods(interceptor):
            return loss_fn(p, xi, yi)

    jax.eval_shape(probe, params, x[0], y[0])
    if problems:
        return GhostPlan(False, problems[0])
    n_leaves = len(jax.tree_util.tree_leaves(params))
    groups: dict = {}
    for i, call in enumerate(found):
        groups.setdefault(call.leaf_ids, []).append(i)
    covered = [leaf for ids in groups for leaf in ids]
    if len(covered) != len(set(covered)):
        return GhostPlan(False, "a parameter is shared between different layers")
    if set(covered) != set(range(n_leaves)):
        return GhostPlan(False, "some parameters are not used by a supported flax layer")
    fixed = _parameter_free_inputs(loss_fn, params, x[0], y[0], len(found))
    return GhostPlan(True, "", tuple(found), tuple(tuple(g) for g in groups.values()), fixed)


def _parameter_free_inputs(loss_fn, params, xi, yi, num_calls: int) -> tuple[bool, ...]:
    """Per supported layer call, whether its input is independent of ``params``
    (a dependency walk over the jaxpr of the captured inputs as a function of
    ``params``; any equation with a dependent operand is dependent, so the
    answer errs towards False)."""

    def inputs_of(p):
        captured = []

        def interceptor(fn, args, kwargs, ctx):
            if ctx.method_name == "__call__" and type(ctx.module) in _KINDS and _own_params(ctx.module):
                captured.append(args[0])
            return fn(*args, **kwargs)

        with nn.intercept_methods(interceptor):
            loss_fn(p, xi, yi)
        return captured

    jaxpr = jax.make_jaxpr(inputs_of)(params).jaxpr
    dependent = set(jaxpr.invars)
    is_dep = lambda v: isinstance(v, jex.core.Var) and v in dependent  # noqa: E731  (literals are constants)
    for eqn in jaxpr.eqns:
        if any(is_dep(v) for v in eqn.invars):
            dependent.update(eqn.outvars)
    out = tuple(not is_dep(v) for v in jaxpr.outvars)
    return out if len(out) == num_calls else (False,) * num_calls


def _capture(loss_fn, params, x, y, plan: GhostPlan):
    """One forward + one activation-gradient backward pass.

    Returns ``(inputs, deltas)``, lists over ``plan.calls`` of the batched layer
    inputs ``[B, ...]`` and output gradients of each example's own loss.
    """
    batch = x.shape[0]
    zeros = [jnp.zeros((batch,) + c.out_shape, c.out_dtype) for c in plan.calls]

    def per_example(z, xi, yi):
        captured = []

        def interceptor(fn, args, kwargs, ctx):
            if ctx.method_name != "__call__" or type(ctx.module) not in _KINDS or not _own_params(ctx.module):
                return fn(*args, **kwargs)
            k = len(captured)
            captured.append(args[0])
            return fn(*args, **kwargs) + z[k]

        with nn.intercept_methods(interceptor):
            loss = loss_fn(params, xi, yi)
        return loss, captured

    losses, vjp_fn, inputs = jax.vjp(lambda z: jax.vmap(per_example)(z, x, y), zeros, has_aux=True)
    (deltas,) = vjp_fn(jnp.ones_like(losses))
    return inputs, deltas


def _patches(call: _Call, a):
    """Unfolded input patches ``[B, P, c_in prod(kernel)]`` of a convolution."""
    m = call.module
    rank = len(m.kernel_size)
    batch = a.shape[0]
    a = a.reshape((-1,) + a.shape[a.ndim - rank - 1:])
    spatial = "DHW"[3 - rank:] if rank <= 3 else None
    dn = ("N" + spatial + "C", spatial + "IO", "N" + spatial + "C")
    as_tuple = lambda v: (v,) * rank if isinstance(v, int) else tuple(v)  # noqa: E731
    p = jax.lax.conv_general_dilated_patches(
        a, m.kernel_size, as_tuple(m.strides or 1), _conv_padding(m, rank),
        lhs_dilation=as_tuple(m.input_dilation or 1), rhs_dilation=as_tuple(m.kernel_dilation or 1),
        dimension_numbers=dn, precision=_HIGHEST)
    return p.reshape(batch, -1, p.shape[-1])


def _flat(v, last: int):
    return v.reshape(v.shape[0], -1, last)


def _per_example_layer_grads(call: _Call, own: dict, a, d) -> list:
    """Materialised per-example gradients of one (small) layer, flattened ``[B, F]``."""

    def one(ai, di):
        _, vjp = jax.vjp(lambda p: call.module.apply({"params": p}, ai), own)
        return vjp(di)[0]

    grads = jax.vmap(one)(a, d)
    return [g.reshape(g.shape[0], -1) for g in jax.tree_util.tree_leaves(grads)]


def _materialise(t: int, k: int, c: int) -> bool:
    """Per-example ``A^T D`` costs T K C flops, its Gram-form norm T^2 (K + C)."""
    return t > 1 and t * (k + c) > k * c


def _layer_parts(plan: GhostPlan, leaves, inputs, deltas):
    """Per group, the factors of its per-example gradient:
    ``("outer", A [B,T,K], D [B,T,C], fixed)`` (grad = A^T D; ``fixed``: A does not depend on params), ``("embed", idx [B,T], D)``,
    ``("mat", G [B,K,C])`` or ``("vec", G [B,F])`` (materialised). Also returns
    ``{group: (kernel grads [B,K,C], bias grads [B,C] or None)}`` for the
    materialised groups."""
    parts, mats = [], {}
    for gi, group in enumerate(plan.groups):
        call = plan.calls[group[0]]
        if call.kind == "norm":
            own = dict(zip(call.param_names, (leaves[i] for i in call.leaf_ids)))
            vecs = None
            for k in group:
                g = _per_example_layer_grads(plan.calls[k], own, inputs[k], deltas[k])
                vecs = g if vecs is None else [u + v for u, v in zip(vecs, g)]
            parts.append(("vec", jnp.concatenate(vecs, axis=1)))
            continue
        cout = call.out_shape[-1]
        ds = jnp.concatenate([_flat(deltas[k], cout) for k in group], axis=1)
        if call.kind == "embed":
            idx = jnp.concatenate([inputs[k].reshape(inputs[k].shape[0], -1) for k in group], axis=1)
            parts.append(("embed", idx, ds))
            continue
        if call.kind == "dense":
            a_s = jnp.concatenate([_flat(inputs[k], inputs[k].shape[-1]) for k in group], axis=1)
        else:
            a_s = jnp.concatenate([_patches(plan.calls[k], inputs[k]) for k in group], axis=1)
        bias = jnp.sum(ds, axis=1) if "bias" in call.param_names else None
        if _materialise(a_s.shape[1], a_s.shape[2], ds.shape[2]):
            kernel = jnp.einsum("btk,btc->bkc", a_s, ds, precision=_HIGHEST)
            parts.append(("mat", kernel))
            mats[gi] = (kernel, bias)  # reused by the clipped sum: no second weight-gradient pass
        else:
            parts.append(("outer", a_s, ds, all(plan.fixed_inputs[k] for k in group)))
        if bias is not None:
            parts.append(("vec", bias))
    return parts, mats


def _difference_parts(parts, prev_parts) -> list:
    """Factors of ``grad l_i(w) - grad l_i(w')`` from those at ``w`` and ``w'``."""
    out = []
    for p, q in zip(parts, prev_parts):
        if p[0] in ("vec", "mat"):
            out.append((p[0], p[1] - q[1]))
        elif p[0] == "embed":
            out.append(("embed", jnp.concatenate([p[1], q[1]], 1), jnp.concatenate([p[2], -q[2]], 1)))
        elif p[3]:  # the layer sees the data itself: A = A', so the difference is A^T (D - D')
            out.append(("outer", p[1], p[2] - q[2], True))
        else:  # A^T D - A'^T D' = A^T (D - D') + (A - A')^T D'
            out.append(("outer", jnp.concatenate([p[1], p[1] - q[1]], 1), jnp.concatenate([p[2] - q[2], q[2]], 1),
                        False))
    return out


def _outer_sq_norms(a, d):
    """``||A_i^T D_i||_F^2`` per example, by the cheaper of the Gram and materialised forms."""
    t, k, c = a.shape[1], a.shape[2], d.shape[2]
    if t == 1:
        return jnp.sum(jnp.square(a[:, 0]), -1) * jnp.sum(jnp.square(d[:, 0]), -1)
    if t <= 4 and not _materialise(t, k, c):  # tiny Gram (e.g. a DIFF2 difference, T = 2): fused
        # elementwise products, not B batched 2x2 matrix products
        gram_a = jnp.sum(a[:, :, None, :] * a[:, None, :, :], axis=-1)
        gram_d = jnp.sum(d[:, :, None, :] * d[:, None, :, :], axis=-1)
        return jnp.sum(gram_a * gram_d, axis=(1, 2))
    if not _materialise(t, k, c):
        gram_a = jnp.einsum("btk,bsk->bts", a, a, precision=_HIGHEST)
        gram_d = jnp.einsum("btc,bsc->bts", d, d, precision=_HIGHEST)
        return jnp.sum(gram_a * gram_d, axis=(1, 2))
    return jnp.sum(jnp.square(jnp.einsum("btk,btc->bkc", a, d, precision=_HIGHEST)), axis=(1, 2))


def _sq_norms(parts):
    total = 0.0
    for p in parts:
        if p[0] in ("vec", "mat"):
            total = total + jnp.sum(jnp.square(p[1].reshape(p[1].shape[0], -1)), axis=-1)
        elif p[0] == "embed":
            same = p[1][:, :, None] == p[1][:, None, :]
            gram = jnp.einsum("btf,bsf->bts", p[2], p[2], precision=_HIGHEST)
            total = total + jnp.sum(jnp.where(same, gram, 0.0), axis=(1, 2))
        else:
            total = total + _outer_sq_norms(p[1], p[2])
    return jnp.maximum(total, 0.0)  # the Gram form can round below 0 for a zero gradient


def _weighted_layer_sums(plan: GhostPlan, params, inputs, deltas, coef, mats, skip=frozenset(), rows=None) -> PyTree:
    """``sum_i coef_i grad l_i`` as a params pytree: per layer, the batch's weight
    gradient with output cotangents ``coef_i delta_i`` (``A^T diag(coef) D`` for dense),
    or ``sum_i coef_i G_i`` where the norms already materialised ``G_i``. Calls in
    ``skip`` contribute nothing. ``rows`` (default ``coef != 0``): the rows whose
    inputs are used; pass the data mask so that inputs shared by a vmapped batch
    of runs (the data) stay shared instead of being masked once per run."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    out = [jnp.zeros_like(leaf) for leaf in leaves]
    done = set(skip)
    for gi, (kernel, bias) in mats.items():
        call = plan.calls[plan.groups[gi][0]]
        keep = coef != 0  # masked rows add nothing, even if NaN
        for name, per_example in (("kernel", kernel), ("bias", bias)):
            if per_example is None:
                continue
            weighted = jnp.where(keep.reshape((-1,) + (1,) * (per_example.ndim - 1)), per_example, 0.0)
            total = jnp.tensordot(coef.astype(weighted.dtype), weighted, axes=1)
            i = call.leaf_ids[call.param_names.index(name)]
            if name == "kernel" and call.kind == "conv":  # patches are (c_in, *window)-major: to (*window, c_in, c_out)
                total = jnp.moveaxis(total.reshape((-1,) + tuple(call.module.kernel_size) + (total.shape[-1],)), 0, -2)
            out[i] = total.reshape(leaves[i].shape).astype(leaves[i].dtype)
        done.update(plan.groups[gi])
    for k, (call, a, d) in enumerate(zip(plan.calls, inputs, deltas)):
        if k in done:
            continue
        own = dict(zip(call.param_names, (leaves[i] for i in call.leaf_ids)))
        c = coef.reshape((-1,) + (1,) * (d.ndim - 1)).astype(d.dtype)
        cot = jnp.where(c != 0, c * d, jnp.zeros_like(d))  # masked rows add nothing, even if NaN
        used = (coef != 0) if rows is None else rows
        a = jnp.where(used.reshape((-1,) + (1,) * (a.ndim - 1)), a, jnp.zeros_like(a))
        _, vjp = jax.vjp(lambda p, call=call, a=a: jax.vmap(lambda ai: call.module.apply({"params": p}, ai))(a), own)
        grads = vjp(cot)[0]
        for name, i in zip(call.param_names, call.leaf_ids):
            out[i] = out[i] + grads[name].astype(out[i].dtype)
    return jax.tree_util.tree_unflatten(treedef, out)


def _clip_coefficients(sq_norms, clip_norm, weights):
    """``w_i min(1, C / ||g_i||)``, exactly 0 where ``w_i = 0`` (even for a NaN padding row)."""
    factor = jnp.minimum(1.0, clip_norm / jnp.maximum(jnp.sqrt(sq_norms), _TINY))
    return jnp.where(weights != 0, weights * factor, jnp.zeros_like(factor))


def _weights(mask, batch, dtype=jnp.float32):
    return jnp.ones((batch,), dtype) if mask is None else mask.astype(dtype)


def _resolve(plan: GhostPlan, require_fast: bool, force_fallback: bool) -> bool:
    if force_fallback:
        return False
    if not plan.fast and require_fast:
        raise GhostFallbackError(f"require_fast=True but ghost clipping cannot run: {plan.reason}")
    return plan.fast


def per_example_grad_norms(loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array, *,
                           require_fast: bool = False):
    """Global l2 norms ``||grad loss_fn(params, x_i, y_i)||`` for every example.

    Returns ``(norms [B], fast_path)``.
    """
    plan = make_plan(loss_fn, params, x, y)
    if not _resolve(plan, require_fast, False):
        grads = clipping.per_example_grads(loss_fn, params, x, y)
        return jax.vmap(clipping.global_norm)(grads), False
    leaves = jax.tree_util.tree_leaves(params)
    inputs, deltas = _capture(loss_fn, params, x, y, plan)
    return jnp.sqrt(_sq_norms(_layer_parts(plan, leaves, inputs, deltas)[0])), True


def ghost_clipped_sum(
    loss_fn: Callable,
    params: PyTree,
    x: jax.Array,
    y: jax.Array,
    clip_norm,
    mask: jax.Array | None = None,
    neighboring: str = "replace-one",
    *,
    require_fast: bool = False,
    force_fallback: bool = False,
) -> GhostClippedSum:
    """``sum_i mask_i clip_C(grad loss_fn(params, x_i, y_i))`` by ghost norms.

    Same quantity (to float rounding) and sensitivity as
    ``clipping.per_example_clipped_sum``; ``mask`` may hold 0/1 padding flags
    or non-negative multiplicities. ``clip_norm=None`` or ``inf`` sums unclipped.
    ``require_fast=True`` raises ``GhostFallbackError`` instead of falling back
    to ``vmap(grad)``; ``force_fallback=True`` runs the fallback (reference).
    """
    sensitivity = clipping.sensitivity_of_clipped_sum(jnp.inf if clip_norm is None else clip_norm, neighboring)
    plan = make_plan(loss_fn, params, x, y)
    if not _resolve(plan, require_fast, force_fallback):
        bound = jnp.inf if clip_norm is None else clip_norm
        res = clipping.per_example_clipped_sum(loss_fn, params, x, y, bound, mask, neighboring)
        return GhostClippedSum(res.total, res.count, sensitivity, False)
    weights = _weights(mask, x.shape[0])
    inputs, deltas = _capture(loss_fn, params, x, y, plan)
    if clip_norm is None:
        coef, mats = weights, {}
    else:
        parts, mats = _layer_parts(plan, jax.tree_util.tree_leaves(params), inputs, deltas)
        coef = _clip_coefficients(_sq_norms(parts), clip_norm, weights)
    total = _weighted_layer_sums(plan, params, inputs, deltas, coef, mats, rows=weights != 0)
    return GhostClippedSum(total, jnp.sum(weights), sensitivity, True)


def layer_passes(loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array, plan: GhostPlan):
    """``(inputs, deltas)`` of every supported layer call at ``params`` (one forward
    and one activation-gradient backward pass); ``plan`` from ``make_plan``.
    DIFF2 carries these from one round to the next (the previous iterate's pass)."""
    return _capture(loss_fn, params, x, y, plan)


def carried_passes(plan: GhostPlan, passes):
    """``passes`` without the layer inputs that do not depend on the parameters
    (they are the same at every iterate, so carrying them would only cost memory)."""
    inputs, deltas = passes
    return [None if f else a for a, f in zip(inputs, plan.fixed_inputs)], deltas


def clipped_difference_from_passes(plan: GhostPlan, params: PyTree, prev_params: PyTree, passes, prev_passes,
                                   clip_norm, weights, use_difference=True) -> PyTree:
    """``sum_i weights_i clip_C(grad l_i(params) - grad l_i(prev_params))`` from the
    two iterates' ``layer_passes`` (``prev_passes`` may come from ``carried_passes``).

    A layer whose input is the data (``plan.fixed_inputs``) has the difference
    ``A^T (D - D')``: its norm is ``||a_i||^2 ||d_i - d'_i||^2`` and its clipped sum
    one weight-gradient pass with cotangents ``f_i (d_i - d'_i)``.
    ``use_difference=False`` clips the plain gradients at ``params``.
    """
    inputs, deltas = passes
    prev_inputs = [a if f or q is None else q for a, q, f in zip(inputs, prev_passes[0], plan.fixed_inputs)]
    prev_deltas = prev_passes[1]
    parts, mats = _layer_parts(plan, jax.tree_util.tree_leaves(params), inputs, deltas)
    prev_parts, prev_mats = _layer_parts(plan, jax.tree_util.tree_leaves(prev_params), prev_inputs, prev_deltas)
    sq = jnp.where(use_difference, _sq_norms(_difference_parts(parts, prev_parts)), _sq_norms(parts))
    coef = _clip_coefficients(sq, clip_norm, weights)
    coef_prev = jnp.where(use_difference, coef, jnp.zeros_like(coef))
    in_mats = {k for gi in mats for k in plan.groups[gi]}
    merged = frozenset(k for k, f in enumerate(plan.fixed_inputs) if f and k not in in_mats)
    # one weight-gradient pass for data-input layers: cotangents coef (D - [use] D')
    deltas_eff = [d - jnp.where(use_difference, q, jnp.zeros_like(q)) if k in merged else d
                  for k, (d, q) in enumerate(zip(deltas, prev_deltas))]
    rows = weights != 0  # masked rows add nothing, even if NaN (coefficients are 0 there too)
    cur = _weighted_layer_sums(plan, params, inputs, deltas_eff, coef, mats, rows=rows)
    prev = _weighted_layer_sums(plan, prev_params, prev_inputs, prev_deltas, coef_prev, prev_mats, skip=merged, rows=rows)
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
    """
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
    passes = _capture(loss_fn, params, x, y, plan)
    if static_plain:
        inputs, deltas = passes
        parts, mats = _layer_parts(plan, jax.tree_util.tree_leaves(params), inputs, deltas)
        coef = _clip_coefficients(_sq_norms(parts), clip_norm, weights)
        return GhostClippedSum(_weighted_layer_sums(plan, params, inputs, deltas, coef, mats, rows=weights != 0),
                               jnp.sum(weights), sensitivity, True)
    prev_passes = _capture(loss_fn, prev_params, x, y, plan)
    total = clipped_difference_from_passes(plan, params, prev_params, passes, prev_passes, clip_norm, weights,
                                           use_difference)
    return GhostClippedSum(total, jnp.sum(weights), sensitivity, True)


def clipped_difference_mean(loss_fn, params, prev_params, x, y, clip_norm, mask, count, *, use_difference=True):
    """DIFF2's ClippedMean (Algorithm 2) of per-record gradient differences
    (or of gradients when ``use_difference`` is False), divided by the true
    record count ``count``."""
    res = clipped_difference_sum(loss_fn, params, prev_params, x, y, clip_norm, mask, use_difference=use_difference)
    return jax.tree_util.tree_map(lambda t: t / jnp.asarray(count, t.dtype), res.total)
