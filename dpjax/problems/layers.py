"""Layers for flax models that compile to faster programs on XLA:CPU, with the same forward values.

``max_pool(x, window)``: max pooling over non-overlapping windows (stride = window, no padding) as a reshape and a
``max`` reduction. ``flax.linen.max_pool`` is ``lax.reduce_window``, whose gradient XLA lowers to
``select_and_scatter``, slow on CPU: on the MNIST CNN of ``experiments/benchmarks/bench_dp_step.py`` (two 5x5
convolutions, GroupNorm, 2x2 pooling) the reshape form cut the non-private step from 299 to 206 ms and the ghost-clipped
private step from 373 to 302 ms (process CPU, batch 256, shared 2-core CPU). The forward values are identical; the
gradient differs only on ties inside a window (``reduce_window`` sends it to one maximal entry, the ``max`` reduction
splits it evenly between the tied entries), which after a continuous activation have probability zero except at exact
zeros, where ReLU's gradient is zero anyway.

``GroupNorm(num_groups)``: ``flax.linen.GroupNorm`` with its statistics summed over the spatial axes first (see the
class).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from dpjax import _validate


def max_pool(x, window: tuple[int, ...]):
    """Max pooling of ``x [..., *spatial, channels]`` over non-overlapping ``window`` blocks (``flax.linen.max_pool(x,
    window, strides=window)`` for spatial sizes divisible by ``window``)."""
    window = tuple(int(w) for w in window)
    spatial = x.shape[-1 - len(window):-1]
    if len(x.shape) < len(window) + 1:
        raise ValueError(f"x.shape={x.shape} has fewer than {len(window)} spatial axes and a channel axis")
    for name_i, (size, w) in enumerate(zip(spatial, window)):
        _validate.check_int(f"window[{name_i}]", w, min_value=1)
        if size % w:
            raise ValueError(f"window={window}: spatial size {size} (x.shape={x.shape}) is not divisible by {w}")
    lead = x.shape[:-1 - len(window)]
    blocked = []
    for size, w in zip(spatial, window):
        blocked += [size // w, w]
    y = x.reshape(*lead, *blocked, x.shape[-1])
    axes = tuple(len(lead) + 2 * i + 1 for i in range(len(window)))
    return jnp.max(y, axis=axes)


class GroupNorm(nn.Module):
    """``flax.linen.GroupNorm(num_groups, epsilon)`` (Wu & He 2018) with the statistics summed spatial axes first; the
    same parameters (``scale`` [C] ones, ``bias`` [C] zeros, the same auto-name), the same function up to float
    reordering.

    ``x [batch, *spatial, C]``: each example's ``C`` channels split into ``num_groups`` groups; each group is normalised
    by its mean and (fast, ``E[x^2] - E[x]^2``, clipped at 0) variance over the spatial axes and its channels, then
    scaled and shifted per channel. flax reduces the ``[batch, *spatial, groups, C / groups]`` reshape over all its
    non-batch, non-group axes at once (a reduction over non-contiguous axes on XLA:CPU, and the normalisation ``(x -
    mean) rsqrt(var + eps) scale + bias`` broadcasts three tensors in the gradient); here the per-channel sums over the
    spatial axes are summed within each group and the output is ``x mul + (bias - mean mul)`` with ``mul = rsqrt(var +
    eps) scale`` per example and channel. On the bench_dp_step CNN's first GroupNorm (batch 256, 28x28x16, forward +
    backward, vmapped per example) this took 16 ms against flax's 47.5 ms (process CPU, shared 2-core CPU).
    """
    num_groups: int
    epsilon: float = 1e-6

    @nn.compact
    def __call__(self, x):
        channels = x.shape[-1]
        _validate.check_int("num_groups", self.num_groups, min_value=1)
        if channels % self.num_groups:
            raise ValueError(f"num_groups={self.num_groups} does not divide the {channels} channels of x.shape={x.shape}")
        if x.ndim < 2:
            raise ValueError(f"x.shape={x.shape} needs a batch axis and a channel axis")
        scale = self.param("scale", nn.initializers.ones, (channels,), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (channels,), jnp.float32)
        x32 = jnp.promote_types(x.dtype, jnp.float32)
        xf = x.astype(x32)
        per_group = channels // self.num_groups
        count = per_group
        for size in x.shape[1:-1]:
            count *= size
        spatial = tuple(range(1, x.ndim - 1))
        grouped = (x.shape[0], self.num_groups, per_group)
        mean = jnp.sum(jnp.sum(xf, axis=spatial).reshape(grouped), axis=-1) / count
        mean2 = jnp.sum(jnp.sum(jax.lax.square(xf), axis=spatial).reshape(grouped), axis=-1) / count
        var = jnp.maximum(0.0, mean2 - jax.lax.square(mean))
        mul = jnp.repeat(jax.lax.rsqrt(var + self.epsilon), per_group, axis=-1) * scale  # [batch, C]
        shift = bias - jnp.repeat(mean, per_group, axis=-1) * mul
        lead = (x.shape[0],) + (1,) * len(spatial) + (channels,)
        return (xf * mul.reshape(lead) + shift.reshape(lead)).astype(x.dtype)

