"""A run's silos computed a fixed-size block at a time: one run spread over devices, bit for bit.

``engine.run(..., silo_block=B)`` computes each round's per-silo stage (selection, client update, clipping and, for
local DP, each silo's noise: ``ChainFamily.step``) ``B`` silos at a time, in a loop over the ``N / B`` blocks; the
cross-silo aggregation and the server update then run on the ``[N, ...]`` messages as always. With ``silo_devices``
(``silo_compute="blocks"``) each device runs the same loop over its own ``N / D`` silos (``shard_map``), and the
messages are all-gathered before the aggregation. The two programs give the same bits, on any number of devices ``D``
with ``B`` dividing ``N / D`` and at least two blocks on every device (tests/engine/silo_blocks_check.py, 8 host
devices; one exception below).

Why blocks. XLA compiles an operation for its shapes: XLA:CPU offloads a reduction to a YNNPACK fusion at 16 silos but
fuses it into an elementwise loop at 2 (the row norms of a GLM's closed-form clipping: 3.6e-7 apart on ONE device, no
sharding involved), simplifies a ``[N] . [N, 1]`` mean to a reduce that it fuses with its producers, and chooses matmul
blockings by size (GPUs choose kernels by shape too). A device holding ``N / D`` silos therefore rounds differently from
the program holding ``N``, whatever the partitioning (``silo_compute="per-silo"``: last-bit differences). A block is the
unit both programs share: every device, and the one-device program, runs the same loop body on ``[B, ...]`` operands,
and the loop is a fusion boundary. Its trip count is read from the data at run time (the silo sizes), so XLA cannot
unroll or remove a loop of one block on one device and keep it on another.

What a block sees. The parts run unchanged on the block's data: per-silo keys come from the run's ``N``-way split
(``keys.silo_window``), so silo ``i`` draws its batch and noise exactly as in the whole run; ``silo_sharding.sharded()``
is true inside a block, so the parts select every silo of the block without a gather. Part states must be per silo
(every leaf ``[N, ...]``: e.g. a sampler's per-silo permutations) and every silo computed each round (full
availability): a random silo subset or a state shared by all silos is refused with a ``ValueError``. Values that do not
depend on the block (the clipper's public bound) are taken from the last block.

Measured (tests/engine/silo_blocks_check.py, 16 silos, 4 rounds, blocks of 1 and 2, 1/2/4/8 host devices): bit for bit
for Noisy MB-SGD with a flax MLP, logistic, softmax and linear regression, and AC-SA. The server update runs outside the
blocks, on every device, so its arithmetic must not leave XLA a rewrite it applies to one program and not another:
AC-SA's prox step divided by the broadcast scalar ``mu + eta``, which XLA:CPU turned into a product with the reciprocal
in one program only (1.5e-8 apart); it is now written as that product (``dpjax.parts.acsa.acsa_update``).

``B`` changes the program, so results with different ``B`` (or with no ``silo_block``, one vmap over all silos) agree
to float rounding, not bit for bit.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from dpjax import keys
from dpjax.engine import silo_sharding

# (mesh or None, block) while a blocked run is traced
_BLOCKS: contextvars.ContextVar = contextvars.ContextVar("dpjax_silo_blocks", default=None)


@contextlib.contextmanager
def tracing(mesh, block: int):
    """While a run program is traced: its silos are computed ``block`` at a time, over ``mesh``'s
    devices (``shard_map``; None: on one device)."""
    token = _BLOCKS.set((mesh, int(block)))
    try:
        yield
    finally:
        _BLOCKS.reset(token)


def active():
    """``(mesh or None, block)`` while a blocked run is traced, else None."""
    return _BLOCKS.get()


def check_block(block, num_silos: int, num_devices: int = 1) -> int:
    """``block`` as an int, or a ``ValueError`` naming it: a positive divisor of ``N / D`` that leaves
    every device at least two blocks (a block as large as a device's silos is the device's whole
    array: XLA then drops the block's slicing and fuses differently, measured on the gather path,
    7e-9 apart on 8 devices; one device with ``N = B`` is the only program of that shape)."""
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"silo_block={block!r} must be a positive int")
    if num_silos % (block * num_devices):
        raise ValueError(f"silo_block={block} must divide the silos per device ({num_silos} silos over "
                         f"{num_devices} device(s))")
    if num_devices > 1 and num_silos < 2 * block * num_devices:
        raise ValueError(f"silo_block={block} leaves {num_silos // num_devices} silos per device, one block; "
                         f"each device needs at least two (silo_block <= {num_silos // (2 * num_devices)})")
    return block


def check_run(algorithm, silo_block, silo_compute: str, num_silos: int, mesh) -> None:
    """``engine.run``'s checks of ``silo_block`` with ``silo_compute`` (a ``ValueError`` naming them)."""
    if silo_compute == "blocks" and silo_block is None:
        raise ValueError("silo_compute='blocks' needs silo_block (the silos a device computes at a time)")
    if silo_block is None:
        return
    if silo_compute == "per-silo":
        raise ValueError("silo_block with silo_compute='per-silo': use silo_compute='blocks'")
    if not getattr(algorithm, "supports_silo_blocks", False):
        why = getattr(algorithm, "silo_blocks_refusal", None) or (  # the family's own reason, if it states one
            "runs its own round step; blocks of silos need a family composed by the generic step "
            "(dpjax.engine.chain.ChainFamily)")
        raise ValueError(f"silo_block: {type(algorithm).__name__} {why}")
    check_block(silo_block, num_silos, mesh.devices.size if silo_compute == "blocks" else 1)


def _check_per_silo(tree, count: int, what: str) -> None:
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if jnp.ndim(leaf) == 0 or jnp.shape(leaf)[0] != count:
            raise ValueError(f"silo_block: {what}{jax.tree_util.keystr(path)} has shape {jnp.shape(leaf)}; a "
                             f"blocked run needs every leaf per silo (leading axis {count})")


def map_blocks(fn: Callable, per_silo: Any, shared: Any, sizes: jax.Array, *, num_silos: int, block: int, first=0):
    """``fn(per_silo_block, shared) -> (per_silo_out, shared_out)`` over the blocks of ``per_silo``.

    ``per_silo``: leaves ``[n, ...]`` (the silos ``first .. first + n - 1`` of the run's ``num_silos``); ``sizes``
    ``[n]`` their row counts, read at run time for the number of blocks. Returns the per-silo outputs ``[n, ...]`` (each
    ``[block, ...]`` from ``fn``) and the shared outputs of the last block."""
    n = int(jnp.shape(sizes)[0])

    def one(b, shared):
        start = b * block
        blk = jax.tree_util.tree_map(lambda a: jax.lax.dynamic_slice_in_dim(a, start, block), per_silo)
        with keys.silo_window(num_silos, first + start), silo_sharding.local_block():
            return fn(blk, shared)

    per_shape, shared_shape = jax.eval_shape(one, jnp.int32(0), shared)
    _check_per_silo(per_shape, block, "a per-silo output ")
    zeros = lambda s, lead=(): jnp.zeros(lead + s.shape[1 if lead else 0:], s.dtype)  # noqa: E731
    init = (jax.tree_util.tree_map(lambda s: zeros(s, (n,)), per_shape),
            jax.tree_util.tree_map(zeros, shared_shape))

    def body(b, carry):
        per_out, shared_out = one(b, shared)
        acc = jax.tree_util.tree_map(lambda a, v: jax.lax.dynamic_update_slice_in_dim(a, v, b * block, 0),
                                     carry[0], per_out)
        return acc, shared_out

    # The block count from the data at run time (every size is >= 0): a static count of 1 would let
    # XLA drop the loop, and fuse the block's ops with their neighbours, on one device only.
    num_blocks = jnp.sum(sizes >= 0) // block
    return jax.lax.fori_loop(0, num_blocks, body, init)


def run_round_stage(fn: Callable, per_silo: Any, shared: Any, sizes: jax.Array, num_silos: int):
    """The per-silo stage of a round under the traced blocked run (``tracing``): ``map_blocks`` on
    one device, or on each device of the mesh over its own silos (``shard_map``; per-silo outputs
    stay split over the devices, shared outputs are the last block's, the same on every device)."""
    mesh, block = active()
    _check_per_silo(per_silo, num_silos, "a per-silo input ")
    if mesh is None:
        return map_blocks(fn, per_silo, shared, sizes, num_silos=num_silos, block=block)
    local = num_silos // mesh.devices.size

    def on_device(per_silo, shared, sizes):
        first = jax.lax.axis_index(silo_sharding.SILO_AXIS) * local
        return map_blocks(fn, per_silo, shared, sizes, num_silos=num_silos, block=block, first=first)

    spec = P(silo_sharding.SILO_AXIS)
    return jax.shard_map(on_device, mesh=mesh, in_specs=(spec, P(), spec), out_specs=(spec, P()),
                         check_vma=False)(per_silo, shared, sizes)
