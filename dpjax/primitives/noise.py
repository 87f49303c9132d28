"""Gaussian noise for pytrees.

``add_gaussian_noise(key, tree, std)`` releases ``tree + N(0, std^2 I)``. If ``tree`` has l2 sensitivity ``Delta`` under
some neighbouring relation, one release is ``(eps, delta)``-DP for every pair on the curve of the analytic Gaussian
mechanism with noise multiplier ``std / Delta`` (Balle & Wang 2018); ``dpjax.accounting`` turns schedules of such
releases into ``(eps, delta)``.

All entries are independent: leaves of one dtype share one flat draw (split into the leaves), mixed-dtype trees get one
key per leaf. ``std = 0`` adds exactly zero, which makes a private algorithm with ``std = 0`` bit-identical to its
non-private twin.

The normals come from ``normal``: bit for bit ``jax.random.normal`` (same key, same Threefry-2x32 counter stream, same
``sqrt(2) erfinv`` transform), but on CPU about 2x cheaper, because jax lowers Threefry on CPU as a rolled 5-step loop
(every step a separate kernel that writes and re-reads both state arrays), while ``normal`` writes the 20 rounds out so
that XLA fuses bits and transform into one vectorised loop (experiments/benchmarks/bench_noise.py). Draws of fewer than
``FAST_PATH_MIN_SIZE`` entries call ``jax.random.normal`` itself (the same numbers): there the rolled loop depends only
on the key, so XLA runs it beside the gradient, while the unrolled bits fuse into the update and wait for it (and, on a
grid of configurations sharing one key, are recomputed per configuration): the Fig. 4-shaped round (600 normals) was 9 %
slower with them (compare_commits.py records the A/B).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.keys import check_key
from dpjax.primitives import trees

PyTree = Any

#: draws smaller than this many float32 entries use ``jax.random.normal`` (same numbers, see above); the
#: unrolled Threefry pays off on model-sized draws (203,530 normals: about 2x, bench_noise.py)
FAST_PATH_MIN_SIZE = 16_384

# Threefry-2x32 (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"):
# the rotation schedule and key-schedule parity constant jax uses.
_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = np.uint32(0x1BD11BDA)


def _rotate_left(x, d: int):
    return jax.lax.shift_left(x, np.uint32(d)) | jax.lax.shift_right_logical(x, np.uint32(32 - d))


def _threefry2x32(k1, k2, x0, x1):
    """Threefry-2x32 with 20 rounds, unrolled (jax's own non-CPU lowering, the same integer ops)."""
    ks = (k1, k2, k1 ^ k2 ^ _THREEFRY_PARITY)
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for r in _THREEFRY_ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = x0 ^ _rotate_left(x1, r)
        x0, x1 = x0 + ks[(i + 1) % 3], x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def _fast_path_key_data(key):
    """``uint32[2]`` key words when ``normal`` can reproduce ``jax.random.normal`` for this key, else None."""
    if not jax.config.jax_threefry_partitionable:
        return None
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != () or "threefry2x32" not in str(jax.random.key_impl(key)):
            return None
        return jax.random.key_data(key)
    if key.dtype == jnp.uint32 and key.shape == (2,) and jax.config.jax_default_prng_impl == "threefry2x32":
        return key  # raw jax.random.PRNGKey
    return None


def normal(key: jax.Array, shape=(), dtype=jnp.float32) -> jax.Array:
    """``jax.random.normal(key, shape, dtype)``, bit for bit, cheaper on CPU.

    For a (typed or raw) Threefry key and float32 this computes exactly what jax does with
    ``jax_threefry_partitionable`` (the default): the ``uint64`` iota of the flat index as two words, Threefry-2x32 of
    it under the key, the xor of the two output words as the 32 random bits, 23 of them as the mantissa of a uniform on
    ``(-1, 1)`` and ``sqrt(2) erfinv`` of it. Only the lowering differs (unrolled rounds; see the module docstring), so
    the noise is the same exact Gaussian the accountant assumes and the same seed gives the same result as before. Any
    other key, dtype or configuration calls ``jax.random.normal``."""
    shape = tuple(shape)
    dtype = jnp.dtype(dtype)
    words = _fast_path_key_data(key) if dtype == jnp.float32 else None
    size = int(np.prod(shape, dtype=np.int64))
    if words is None or size < max(FAST_PATH_MIN_SIZE, 1) or size >= 2**32:
        return jax.random.normal(key, shape, dtype)
    return _threefry_normal(words, 0, shape)


def _threefry_normal(words, offset: int, shape) -> jax.Array:
    """Entries ``offset, ..., offset + prod(shape) - 1`` of the flat float32 ``jax.random.normal``
    stream of the key with Threefry words ``words`` (partitionable mode), in ``shape``.

    The stream is elementwise in the counter, so a slice of one long draw is computed without drawing the rest: the
    leaves of a tree get the slices of one flat draw with no split or copy."""
    counts_lo = jax.lax.iota(np.uint32, int(np.prod(shape, dtype=np.int64))) + np.uint32(offset)
    counts_hi = jnp.zeros(counts_lo.shape, np.uint32)  # the uint64 iota's high word: 0 below 2**32 entries
    b1, b2 = _threefry2x32(words[0], words[1], counts_hi, counts_lo)
    bits = (b1 ^ b2).reshape(shape)
    one_bits = np.uint32(np.array(1.0, np.float32).view(np.uint32))
    mantissa = jax.lax.shift_right_logical(bits, np.uint32(32 - 23)) | one_bits
    floats = jax.lax.bitcast_convert_type(mantissa, jnp.float32) - np.float32(1.0)  # uniform on [0, 1)
    lo = np.nextafter(np.float32(-1.0), np.float32(0.0))
    uniform = jax.lax.max(lo, floats * (np.float32(1.0) - lo) + lo)
    return np.float32(np.sqrt(2)) * jax.lax.erf_inv(uniform)


def check_noise_args(key, tree: PyTree, std) -> None:
    """One key, a pytree of numeric arrays and a scalar std (>= 0 when concrete): refused by name otherwise (a
    per-leaf std is not this function's contract: scale the leaves instead)."""
    check_key("key", key)
    trees.check_array_tree("tree", tree)
    if not hasattr(std, "dtype") and not isinstance(std, (int, float, np.number)) or np.ndim(std) != 0:
        shape = f"shape {np.shape(std)}" if hasattr(std, "shape") else type(std).__name__
        shown = repr(std) if len(repr(std)) <= 60 else repr(std)[:57] + "..."
        raise ValueError(f"std={shown} must be a scalar (one standard deviation for every entry), got {shape}")
    _validate.check_if_concrete(_validate.check_nonnegative, "std", std)


def gaussian_like(key: jax.Array, tree: PyTree, std) -> PyTree:
    """Independent ``N(0, std^2)`` entries with the shapes and dtypes of ``tree``.

    A concrete ``std`` must be finite and >= 0 (a traced one is checked in ``dpjax.primitives.checked`` mode)."""
    check_noise_args(key, tree, std)
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    dtypes = {jnp.dtype(leaf.dtype) for leaf in leaves}
    if len(dtypes) == 1 and len(leaves) > 1:
        # One threefry draw for all leaves, then split: same law (i.i.d. normals),
        # same seed => same result, about 2x faster on CPU than a draw per leaf
        # (experiments/benchmarks/bench_noise.py).
        dtype = dtypes.pop()
        sizes = [int(np.prod(leaf.shape)) for leaf in leaves]
        words = (_fast_path_key_data(key) if dtype == jnp.float32
                 and max(FAST_PATH_MIN_SIZE, 1) <= sum(sizes) < 2**32 else None)
        if words is not None:  # the same numbers as the flat draw below, each leaf drawn in place
            offsets = np.cumsum([0] + sizes[:-1])
            noise = [_threefry_normal(words, int(o), leaf.shape) * jnp.asarray(std, dtype)
                     for o, leaf in zip(offsets, leaves)]
            return jax.tree_util.tree_unflatten(treedef, noise)
        flat = normal(key, (sum(sizes),), dtype) * jnp.asarray(std, dtype)
        parts = jnp.split(flat, np.cumsum(sizes)[:-1])
        noise = [part.reshape(leaf.shape) for part, leaf in zip(parts, leaves)]
        return jax.tree_util.tree_unflatten(treedef, noise)
    keys = jax.random.split(key, len(leaves))
    noise = [
        normal(k, leaf.shape, leaf.dtype) * jnp.asarray(std, leaf.dtype)
        for k, leaf in zip(keys, leaves)
    ]
    return jax.tree_util.tree_unflatten(treedef, noise)


def add_gaussian_noise(key: jax.Array, tree: PyTree, std) -> PyTree:
    """``tree + N(0, std^2 I)`` (std may be a traced scalar).

    A concrete ``std`` must be finite and >= 0 (a negative one would silently
    act as ``|std|``); a traced one is the caller's responsibility."""
    check_noise_args(key, tree, std)
    return jax.tree_util.tree_map(jnp.add, tree, gaussian_like(key, tree, std))
