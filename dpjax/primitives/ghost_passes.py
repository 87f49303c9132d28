"""One batched pass of ghost clipping: layer inputs and output gradients captured per call, each layer's
per-example contribution (Gram or materialised form), squared norms and the clip-weighted gradient sums
(:mod:`dpjax.primitives.ghost_clipping`)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import jax
import jax.numpy as jnp

from dpjax.primitives.ghost_plan import (ConvSpec, DenseSpec, GhostPlan, HIGHEST_PRECISION, LayerCall, MATERIALISED,
                                         Observer, observed_loss)


PyTree = Any


# ----------------------------------------------------------------------------- one pass
def capture_layer_io(loss_fn, params, x, y, plan: GhostPlan):
    """One forward + one backward pass to the perturbations.

    Returns ``(inputs, deltas)``, lists over ``plan.calls``: for a ghost layer the batched input ``[B, ...]`` and output
    gradient of each example's own loss; for a materialised layer ``None`` and the tuple of its per-example parameter
    gradients ``[B, *leaf.shape]`` (in ``param_names`` order)."""
    batch = x.shape[0]
    leaves = jax.tree_util.tree_leaves(params)
    zeros = []
    for c in plan.calls:
        if c.kind == MATERIALISED:
            zeros.append(tuple(jnp.zeros((batch,) + leaves[i].shape, leaves[i].dtype) for i in c.leaf_ids))
        else:
            zeros.append(jnp.zeros((batch,) + c.out_shape, c.out_dtype))

    def per_example(z, xi, yi):
        obs = Observer(leaves, "capture", plan, z)
        loss = observed_loss(loss_fn, params, xi, yi, obs)
        return loss, obs.captured

    losses, vjp_fn, inputs = jax.vjp(lambda z: jax.vmap(per_example)(z, x, y), zeros, has_aux=True)
    (deltas,) = vjp_fn(jnp.ones_like(losses))
    return inputs, deltas


def _patches(spec: ConvSpec, a):
    """Unfolded input patches ``[B, P, c_in prod(kernel)]`` of a convolution."""
    rank = len(spec.kernel_size)
    batch = a.shape[0]
    a = a.reshape((-1,) + a.shape[a.ndim - rank - 1:])
    spatial = "DHW"[3 - rank:] if rank <= 3 else None
    dn = ("N" + spatial + "C", spatial + "IO", "N" + spatial + "C")
    p = jax.lax.conv_general_dilated_patches(
        a, spec.kernel_size, spec.strides, spec.padding, lhs_dilation=spec.input_dilation,
        rhs_dilation=spec.kernel_dilation, dimension_numbers=dn, precision=HIGHEST_PRECISION)
    return p.reshape(batch, -1, p.shape[-1])


_CONV_CHUNK_FLOATS = 1 << 18  # patches per chunk of examples (1 MiB of float32: stays in the CPU's L2 cache)


def _conv_per_example_grads(spec: ConvSpec, a, d, shape):
    """Per-example kernel gradients ``[B, *shape]`` (``shape``: the kernel's ``(*window, c_in, c_out)``) of a
    convolution from its input ``a [B, ..., *spatial, c_in]`` and output gradient ``d [B, ..., *out_spatial, c_out]``.

    Each example's gradient is ``P_i^T D_i`` (Rochette et al. 2019): ``P_i`` its unfolded input patches, ``D_i`` its
    output gradient. The examples are processed in chunks (``lax.map``) small enough that a chunk's patches
    (``_CONV_CHUNK_FLOATS``) stay in cache between being written and multiplied; unfolding the whole batch at once
    writes and re-reads ``B P K`` floats through main memory (80 MB for the MNIST CNN's second convolution) and cost ~4x
    more (measurements in experiments/benchmarks/bench_dp_step.py)."""
    rank = len(spec.kernel_size)
    batch = a.shape[0]
    x = a.reshape((batch, -1) + a.shape[a.ndim - rank - 1:])        # [B, n, *S, c_in]
    dd = d.reshape((batch, -1) + d.shape[d.ndim - rank - 1:])       # [B, n, *O, c_out]
    chunk = _conv_chunk(batch, math.prod(dd.shape[1:-1]) * x.shape[-1] * math.prod(spec.kernel_size))
    n_chunks = -(-batch // chunk)
    if n_chunks == 1:
        return _conv_chunk_grads(spec, x, dd).reshape((batch,) + tuple(shape))
    pad = n_chunks * chunk - batch  # zero rows have zero gradients; dropped below
    x = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1)).reshape((n_chunks, chunk) + x.shape[1:])
    dd = jnp.pad(dd, [(0, pad)] + [(0, 0)] * (dd.ndim - 1)).reshape((n_chunks, chunk) + dd.shape[1:])
    g = jax.lax.map(lambda xd: _conv_chunk_grads(spec, *xd), (x, dd))
    return g.reshape((n_chunks * chunk,) + g.shape[2:])[:batch].reshape((batch,) + tuple(shape))


def _conv_chunk(batch: int, patch_floats: int) -> int:
    """Examples per chunk: on CPU as many as keep a chunk's patches within ``_CONV_CHUNK_FLOATS``;
    elsewhere the whole batch (a GPU has no such cache to stay in, and a loop of small kernels
    would serialise its work; the chunking was measured on CPU only)."""
    if jax.default_backend() != "cpu":
        return batch
    return max(1, min(batch, _CONV_CHUNK_FLOATS // max(patch_floats, 1)))


def _conv_chunk_grads(spec: ConvSpec, x, dd):
    """``[b, prod(window) c_in, c_out]`` per-example gradients of ``x [b, n, *S, c_in]``
    (inputs) and ``dd [b, n, *O, c_out]`` (output gradients): the patches as
    ``prod(window)`` strided slices of the padded (and input-dilated) input, stacked in
    ``[b, window c_in, positions]`` layout, times the output gradients ``[b, c_out, positions]``."""
    batch = x.shape[0]
    x = jnp.moveaxis(x, -1, 1)                                      # [b, c_in, n, *S]
    window = [(k - 1) * r + 1 for k, r in zip(spec.kernel_size, spec.kernel_dilation)]
    if isinstance(spec.padding, str):  # as lax.conv_general_dilated: from the undilated input shape
        pads = jax.lax.padtype_to_pads(x.shape[3:], window, spec.strides, spec.padding)
    else:
        pads = spec.padding
    x = jax.lax.pad(x, jnp.zeros((), x.dtype),
                    [(0, 0, 0)] * 3 + [(lo, hi, r - 1) for (lo, hi), r in zip(pads, spec.input_dilation)])
    out = dd.shape[2:-1]
    slices = []
    for offsets in itertools.product(*(range(k) for k in spec.kernel_size)):
        start = (0, 0, 0) + tuple(o * r for o, r in zip(offsets, spec.kernel_dilation))
        limit = x.shape[:3] + tuple(s + (n - 1) * st + 1 for s, n, st in zip(start[3:], out, spec.strides))
        slices.append(jax.lax.slice(x, start, limit, (1, 1, 1) + tuple(spec.strides)))
    p = jnp.stack(slices, 1).reshape(batch, len(slices) * x.shape[1], -1)   # [b, window c_in, T]
    dt = jnp.moveaxis(dd, -1, 1).reshape(batch, dd.shape[-1], -1)           # [b, c_out, T]
    return jnp.einsum("bkt,bct->bkc", p, dt, precision=HIGHEST_PRECISION)


def _conv_dn(rank):
    spatial = "DHW"[3 - rank:] if rank <= 3 else None
    return ("N" + spatial + "C", spatial + "IO", "N" + spatial + "C")


def _dense_a(spec: DenseSpec, a):
    """Layer input ``[B, ...]`` as ``[B, T, K]`` (contracted axes last, in kernel order)."""
    n = len(spec.axes)
    a = jnp.moveaxis(a, [ax + 1 for ax in spec.axes], list(range(a.ndim - n, a.ndim)))
    k = math.prod(a.shape[a.ndim - n:])
    return a.reshape(a.shape[0], -1, k)


def _flat_d(call: LayerCall, d):
    """Output gradient ``[B, *out]`` as ``[B, T, C]`` (C: the feature axes)."""
    nf = call.spec.n_features if call.kind == "dense" else 1
    c = math.prod(call.out_shape[len(call.out_shape) - nf:]) if call.out_shape else 1
    return d.reshape(d.shape[0], -1, c)


def _embed_index(call: LayerCall, idx):
    """Token ids ``[B, T]`` with negative ids wrapped (as ``jnp.take``) and
    out-of-range ids set to ``num_embeddings`` (their gradient is zero)."""
    v = call.spec.num_embeddings
    idx = idx.reshape(idx.shape[0], -1).astype(jnp.int32)
    if v == 1:  # flax broadcasts the single row
        return jnp.zeros_like(idx)
    idx = jnp.where(idx < 0, idx + v, idx)
    return jnp.where((idx >= 0) & (idx < v), idx, v)


def layer_contribution(call: LayerCall, role: str, a, d):
    """One call's contribution to one leaf's per-example gradient: ``("outer", A [B,T,K], D [B,T,C], layout)`` (gradient
    ``A^T D`` in ``layout``), ``("conv", a [B,...], d [B,...], ConvSpec)`` (a convolution's input and output gradient;
    ``_as_outer`` unfolds it), ``("index", idx [B,T], D [B,T,F], V)`` or ``("vec", G [B, F])``."""
    if call.kind == MATERIALISED:
        g = d[call.param_names.index(role)]
        return ("vec", g.reshape(g.shape[0], -1))
    if role == "bias":
        return ("vec", jnp.sum(_flat_d(call, d), axis=1))
    if call.kind == "dense":
        return ("outer", _dense_a(call.spec, a), _flat_d(call, d), "plain")
    if call.kind == "conv":  # unfolded to ("outer", patches, D, layout) by _as_outer where the Gram form needs it
        return ("conv", a, d, call.spec)
    if call.kind == "embed":
        return ("index", _embed_index(call, a), _flat_d(call, d), call.spec.num_embeddings)
    # attend: grad_E = D^T Q, i.e. (Q^T D)^T with Q the query [T, F], D the output gradient [T, V]
    return ("outer", a.reshape(a.shape[0], -1, a.shape[-1]), _flat_d(call, d), "transposed")


def _as_outer(contrib):
    """A convolution's contribution as ``("outer", patches [B,P,K], D [B,P,C], layout)``."""
    if contrib[0] != "conv":
        return contrib
    _, a, d, spec = contrib
    return ("outer", _patches(spec, a), d.reshape(d.shape[0], -1, d.shape[-1]), ("conv", spec.kernel_size))


def _conv_dims(contribs):
    """``(T, K, C)`` of the stacked patches of one leaf's convolution calls (``None``
    unless every contribution is a convolution with the same window and channels)."""
    if {c[0] for c in contribs} != {"conv"}:
        return None
    kcs = {(c[3].kernel_size, c[1].shape[-1], c[2].shape[-1]) for c in contribs}
    if len(kcs) != 1:
        return None
    (window, c_in, c_out), = kcs
    t = sum(math.prod(c[2].shape[1:-1]) for c in contribs)
    return t, c_in * math.prod(window), c_out


def _materialise(t: int, k: int, c: int) -> bool:
    """Per-example ``A^T D`` costs T K C flops, its Gram-form norm T^2 (K + C)."""
    return t > 1 and t * (k + c) > k * c


def _materialise_index(t: int, v: int, f: int) -> bool:
    """Scattering ``onehot(idx)^T D`` keeps ``V F`` floats per example, the Gram form ``T^2`` (and costs ``T^2 F`` flops
    against ``(T + V) F``): materialise only when the table is no larger than the Gram matrix (memory decides; a
    vocabulary-sized per-example table would dominate the step's memory)."""
    return v * f <= t * t


def dense_of(contrib, shape):
    """A contribution's per-example gradient ``[B, *shape]`` (the leaf's layout)."""
    kind = contrib[0]
    if kind == "conv":
        return _conv_per_example_grads(contrib[3], contrib[1], contrib[2], shape)
    if kind == "vec":
        return contrib[1].reshape((contrib[1].shape[0],) + tuple(shape))
    if kind == "index":
        _, idx, d, v = contrib
        b = jnp.arange(idx.shape[0])[:, None]
        g = jnp.zeros((idx.shape[0], v, d.shape[-1]), d.dtype).at[b, idx].add(d, mode="drop")
        return g.reshape((idx.shape[0],) + tuple(shape))
    _, a, d, layout = contrib
    g = jnp.einsum("btk,btc->bkc", a, d, precision=HIGHEST_PRECISION)
    if layout == "transposed":
        g = jnp.swapaxes(g, 1, 2)
    elif layout != "plain":  # conv patches are (c_in, *window)-major: to (*window, c_in, c_out)
        window = layout[1]
        g = jnp.moveaxis(g.reshape((g.shape[0], -1) + tuple(window) + (g.shape[-1],)), 1, -2)
    return g.reshape((g.shape[0],) + tuple(shape))


def layer_parts(plan: GhostPlan, leaves, inputs, deltas):
    """Per leaf group, the factors of its per-example gradient (for the norm): ``("vec", G [B,F])`` (materialised),
    ``("outer", A, D, fixed)`` (grad = A^T D or its transpose; ``fixed``: A does not depend on params),
    ``("embed", idx, D, fixed, V)``, or ``("tied", embed part, outer part)``. Also returns
    ``{leaf: G [B, *leaf.shape]}`` for the materialised leaves (reused by the clipped sum)."""
    parts, mats = [], {}
    for leaf, contribs in plan.leaf_groups:
        shape = leaves[leaf].shape
        cs = [(layer_contribution(plan.calls[k], role, inputs[k], deltas[k]), plan.fixed_inputs[k]) for k, role in contribs]
        dims = _conv_dims([c for c, _ in cs])
        if dims is not None and _materialise(*dims):  # per-example kernel gradients without the patches op
            g = sum(dense_of(c, shape) for c, _ in cs)
            mats[leaf] = g
            parts.append(("vec", g.reshape(g.shape[0], -1)))
            continue
        cs = [(_as_outer(c), f) for c, f in cs]
        kinds = {c[0][0] for c in cs}
        layouts = {c[0][3] for c in cs if c[0][0] == "outer"}
        part = None
        if kinds == {"outer"} and len(layouts) == 1 and len({(c[0][1].shape[2], c[0][2].shape[2]) for c in cs}) == 1:
            a = jnp.concatenate([c[0][1] for c in cs], axis=1)
            d = jnp.concatenate([c[0][2] for c in cs], axis=1)
            if not _materialise(a.shape[1], a.shape[2], d.shape[2]):
                part = ("outer", a, d, all(f for _, f in cs))
        elif kinds == {"index"}:
            idx = jnp.concatenate([c[0][1] for c in cs], axis=1)
            d = jnp.concatenate([c[0][2] for c in cs], axis=1)
            if not _materialise_index(idx.shape[1], cs[0][0][3], d.shape[2]):
                part = ("embed", idx, d, all(f for _, f in cs), cs[0][0][3])
        elif kinds == {"index", "outer"} and layouts == {"transposed"}:  # tied embedding and read-out
            ix = [c for c in cs if c[0][0] == "index"]
            ou = [c for c in cs if c[0][0] == "outer"]
            idx = jnp.concatenate([c[0][1] for c in ix], axis=1)
            dx = jnp.concatenate([c[0][2] for c in ix], axis=1)
            a = jnp.concatenate([c[0][1] for c in ou], axis=1)
            d = jnp.concatenate([c[0][2] for c in ou], axis=1)
            v = ix[0][0][3]
            if not _materialise_index(idx.shape[1], v, dx.shape[2]) and not _materialise(a.shape[1], a.shape[2],
                                                                                          d.shape[2]):
                part = ("tied", ("embed", idx, dx, all(f for _, f in ix), v), ("outer", a, d, all(f for _, f in ou)))
        if part is None:  # the materialised gradient of this leaf: sum of its contributions
            g = sum(dense_of(c, shape) for c, _ in cs)
            mats[leaf] = g
            part = ("vec", g.reshape(g.shape[0], -1))
        parts.append(part)
    return parts, mats


def difference_parts(parts, prev_parts) -> list:
    """Factors of ``grad l_i(w) - grad l_i(w')`` from those at ``w`` and ``w'``."""

    def diff(p, q):
        if p[0] == "vec":
            return ("vec", p[1] - q[1])
        if p[0] == "embed":
            if p[3]:  # same ids at both iterates
                return ("embed", p[1], p[2] - q[2], True, p[4])
            return ("embed", jnp.concatenate([p[1], q[1]], 1), jnp.concatenate([p[2], -q[2]], 1), False, p[4])
        if p[0] == "tied":
            return ("tied", diff(p[1], q[1]), diff(p[2], q[2]))
        if p[3]:  # the layer sees the data itself: A = A', so the difference is A^T (D - D')
            return ("outer", p[1], p[2] - q[2], True)
        # A^T D - A'^T D' = A^T (D - D') + (A - A')^T D'
        return ("outer", jnp.concatenate([p[1], p[1] - q[1]], 1), jnp.concatenate([p[2] - q[2], q[2]], 1), False)

    return [diff(p, q) for p, q in zip(parts, prev_parts)]


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
        gram_a = jnp.einsum("btk,bsk->bts", a, a, precision=HIGHEST_PRECISION)
        gram_d = jnp.einsum("btc,bsc->bts", d, d, precision=HIGHEST_PRECISION)
        return jnp.sum(gram_a * gram_d, axis=(1, 2))
    return jnp.sum(jnp.square(jnp.einsum("btk,btc->bkc", a, d, precision=HIGHEST_PRECISION)), axis=(1, 2))


def _embed_sq_norms(idx, d, v):
    same = (idx[:, :, None] == idx[:, None, :]) & (idx[:, :, None] < v)
    gram = jnp.einsum("btf,bsf->bts", d, d, precision=HIGHEST_PRECISION)
    return jnp.sum(jnp.where(same, gram, 0.0), axis=(1, 2))


def parts_sq_norms(parts):
    total = 0.0
    for p in parts:
        if p[0] == "vec":
            total = total + jnp.sum(jnp.square(p[1]), axis=-1)
        elif p[0] == "embed":
            total = total + _embed_sq_norms(p[1], p[2], p[4])
        elif p[0] == "tied":
            (_, idx, dx, _, v), (_, q, dv, _) = p[1], p[2]
            # <onehot(idx)^T Dx, Dv^T Q> = sum_{t,s} Dv[s, idx_t] (Dx_t . Q_s)
            picked = jnp.take_along_axis(dv, jnp.broadcast_to(jnp.minimum(idx, v - 1)[:, None, :],
                                                              dv.shape[:2] + idx.shape[1:]), axis=2)
            picked = jnp.where((idx < v)[:, None, :], picked, 0.0)  # [B, S, T]
            cross = jnp.einsum("bst,btf,bsf->b", picked, dx, q, precision=HIGHEST_PRECISION)
            total = total + _embed_sq_norms(idx, dx, v) + _outer_sq_norms(q, dv) + 2.0 * cross
        else:
            total = total + _outer_sq_norms(p[1], p[2])
    return jnp.maximum(total, 0.0)  # the Gram form can round below 0 for a zero gradient


def _weight_grad(call: LayerCall, role: str, a, cot, shape):
    """``sum_i`` of one call's contribution to one leaf with output cotangents ``cot``
    (the batch's weight gradient of this call; ``a``: its masked inputs)."""
    if role == "bias":
        return jnp.sum(_flat_d(call, cot), axis=(0, 1)).reshape(shape)
    if call.kind == "dense":
        a2, d2 = _dense_a(call.spec, a), _flat_d(call, cot)
        return jnp.einsum("btk,btc->kc", a2, d2).reshape(shape)
    if call.kind == "conv":
        spec = call.spec
        rank = len(spec.kernel_size)
        lhs = a.reshape((-1,) + a.shape[a.ndim - rank - 1:])
        out = cot.reshape((-1,) + cot.shape[cot.ndim - rank - 1:])

        def conv(kernel):
            return jax.lax.conv_general_dilated(lhs, kernel, spec.strides, spec.padding,
                                                lhs_dilation=spec.input_dilation, rhs_dilation=spec.kernel_dilation,
                                                dimension_numbers=_conv_dn(rank))

        _, vjp = jax.vjp(conv, jnp.zeros(shape, out.dtype))
        return vjp(out)[0]
    if call.kind == "embed":
        idx = _embed_index(call, a).reshape(-1)
        d2 = _flat_d(call, cot)
        return jnp.zeros(shape, d2.dtype).at[idx].add(d2.reshape(-1, d2.shape[-1]), mode="drop")
    # attend: grad_E = sum_t D_t^T q_t
    return jnp.einsum("btv,btf->vf", _flat_d(call, cot), a.reshape(a.shape[0], -1, a.shape[-1])).reshape(shape)


def weighted_layer_sums(plan: GhostPlan, params, inputs, deltas, coef, mats, skip=frozenset(), rows=None,
                        finite_rows: bool = False) -> PyTree:
    """``sum_i coef_i grad l_i`` as a params pytree: per ghost layer, the batch's weight gradient with output cotangents
    ``coef_i delta_i`` (``A^T diag(coef) D`` for dense), ``sum_i coef_i G_i`` where the per-example gradient was
    materialised. Calls in ``skip`` contribute nothing (outside ``mats``). ``rows`` (default ``coef != 0``): the rows
    whose inputs are used; pass the data mask so that inputs shared by a vmapped batch of runs (the data) stay shared
    instead of being masked once per run. ``finite_rows``: also drop input rows holding a non-finite entry (their
    coefficient is 0: a clipped NaN/inf gradient contributes zero, as in ``clipping.clip_to_norm``; the test reads the
    input alone, so data shared by vmapped runs stays shared)."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    out = [jnp.zeros_like(leaf) for leaf in leaves]
    keep = coef != 0  # masked rows add nothing, even if NaN
    used = keep if rows is None else rows
    for leaf, g in mats.items():
        weighted = jnp.where(keep.reshape((-1,) + (1,) * (g.ndim - 1)), g, jnp.zeros_like(g))
        out[leaf] = jnp.tensordot(coef.astype(g.dtype), weighted, axes=1).astype(leaves[leaf].dtype)
    cots, ins = {}, {}
    for leaf, contribs in plan.leaf_groups:
        if leaf in mats:
            continue
        for k, role in contribs:
            if k in skip:
                continue
            if k not in cots:
                d, a = deltas[k], inputs[k]
                c = coef.reshape((-1,) + (1,) * (d.ndim - 1)).astype(d.dtype)
                cots[k] = jnp.where(c != 0, c * d, jnp.zeros_like(d))
                take = used.reshape((-1,) + (1,) * (a.ndim - 1))
                if finite_rows:
                    take = take & jnp.all(jnp.isfinite(a), axis=tuple(range(1, a.ndim)), keepdims=True)
                ins[k] = jnp.where(take, a, jnp.zeros_like(a))
            g = _weight_grad(plan.calls[k], role, ins[k], cots[k], leaves[leaf].shape)
            out[leaf] = out[leaf] + g.astype(out[leaf].dtype)
    return jax.tree_util.tree_unflatten(treedef, out)
