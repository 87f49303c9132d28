"""Layers for flax models that compile to faster programs on XLA:CPU, with the same forward values.

``max_pool(x, window)``: max pooling over non-overlapping windows (stride =
window, no padding) as a reshape and a ``max`` reduction. ``flax.linen.max_pool``
is ``lax.reduce_window``, whose gradient XLA lowers to ``select_and_scatter``,
slow on CPU: on the MNIST CNN of ``experiments/benchmarks/bench_dp_step.py``
(two 5x5 convolutions, GroupNorm, 2x2 pooling) the reshape form cut the
non-private step from 299 to 206 ms and the ghost-clipped private step from 373
to 302 ms (process CPU, batch 256, shared 2-core CPU). The forward values are
identical; the gradient differs only on ties inside a window (``reduce_window``
sends it to one maximal entry, the ``max`` reduction splits it evenly between the
tied entries), which after a continuous activation have probability zero except
at exact zeros, where ReLU's gradient is zero anyway.
"""

from __future__ import annotations

import jax.numpy as jnp

from dpjax import _validate


def max_pool(x, window: tuple[int, ...]):
    """Max pooling of ``x [..., *spatial, channels]`` over non-overlapping ``window`` blocks
    (``flax.linen.max_pool(x, window, strides=window)`` for spatial sizes divisible by ``window``)."""
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
