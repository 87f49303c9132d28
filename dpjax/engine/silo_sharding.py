"""One run's silo axis sharded over devices (``engine.run(..., silo_devices=...)``).

A sweep shards its *runs* over devices (``program.ChunkProgram``); a single federated run with thousands of silos and a
neural model instead spreads its *silos*. Nothing in a family changes: its ``vmap`` over silos stays, and the sharding
comes from the inputs. ``shard_data`` places every leaf of the ``SiloData`` (``x``, ``y``, ``mask``, ``sizes``: silo
axis first) with ``NamedSharding(mesh, P("silos"))``; the model, the server state and the hyperparameters are
replicated.

Three ways to compute (``engine.run(..., silo_compute=...)``, ``SILO_COMPUTE``):

* ``"exact"`` (default): bit-identical to the unsharded run. The data is stored split over the devices and gathered once
  when the program starts; every device then runs the unsharded program on all silos. It spreads the data's storage
  between calls, not the computation.
* ``"per-silo"``: each device computes its own silos (sampling, per-silo gradients, clipping, per-silo noise): parts
  select all silos without a gather across the silo axis (``sharded()``; ``roles.Batch.records``,
  ``dpjax.parts.selection.available_silos``); a per-silo privatizer's output stays on the silos' devices
  (``on_silo_devices``), so each device draws and adds only its silos' noise; and the messages are replicated before the
  aggregator (``gather_silos``: an all-gather of ``N x |message|`` values, the bytes a server receives) so the
  cross-silo reduction is the unsharded one. Noise added once to the aggregate (placement ``"server"``) comes after the
  gather. Float results can differ from the unsharded run in the last bits (below). (Without the all-silos selection,
  full availability's ``silo_ids = arange(N)`` made every silo's rows a gather across the sharded axis, which the
  partitioner ran as an all-gather of the batches every round: every device computed every silo. Without
  ``on_silo_devices``, ``gather_silos``' replicated sharding propagated backwards through the noise add: the partitioner
  gathered the noiseless messages ``total / K`` and every device drew every silo's noise.)
* ``"blocks"`` (with ``silo_block=B``): each device computes its own silos ``B`` at a time
  (``dpjax.engine.silo_blocks``), and the result is bit-identical to the unsharded run with the same
  ``silo_block``: both programs run the same loop body on ``[B, ...]`` blocks. This is the mode that
  both spreads the work and keeps the bits.

Why per-silo is not bit for bit (measured on 8 host devices, jax 0.10.2 XLA:CPU; tests/engine/silo_sharding_check.py):
the partitioned program has other fusion boundaries and other dot shapes, and XLA:CPU rounds differently across them
(it contracts ``a * b + c`` inside a fusion into one FMA; a reduction that is a fusion's root is vectorised as a tree,
one fused into a consumer is summed in sequence). Adding each silo's noise on its device makes every leaf whose
cross-silo mean is a ``dot`` bit for bit; what still differs is of order 1e-10 to 1e-8 (an MLP's 1-wide output bias,
whose ``[N] . [N, 1]`` mean becomes a reduce fused differently; dense GLMs, whose per-device dots have other shapes;
even on ONE device XLA:CPU offloads a row-norm reduction to a YNNPACK fusion at 16 silos but not at 8). Making the two
programs agree needs the same shapes and fusion boundaries in both, which ``"blocks"`` gives.

Random draws agree in both modes because JAX's threefry is partitionable (a sharded draw yields the unsharded values).
``FixedAvailability``'s random silo subset is a gather across the silo axis: under ``"per-silo"`` its rows are gathered
to every device.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

SILO_AXIS = "silos"
SILO_COMPUTE = ("exact", "per-silo", "blocks")
_MESH: contextvars.ContextVar = contextvars.ContextVar("dpjax_silo_mesh", default=None)


def silo_mesh(devices, num_silos: int) -> Mesh:
    """A 1-d mesh ``("silos",)`` over ``devices``; ``num_silos`` must be a multiple of their number."""
    devices = tuple(devices)
    if not devices:
        raise ValueError("silo_devices=() must name at least one device")
    if num_silos % len(devices):
        raise ValueError(f"silo_devices holds {len(devices)} devices but the data has {num_silos} silos; the "
                         f"number of silos must be a multiple of the number of devices (pad with empty silos "
                         f"or use {[k for k in range(1, len(devices) + 1) if num_silos % k == 0][-1]} devices)")
    return Mesh(np.array(devices), (SILO_AXIS,))


def shard_data(data, mesh: Mesh):
    """``data`` (a ``SiloData``) with every leaf sharded on its leading (silo) axis."""
    sharding = NamedSharding(mesh, P(SILO_AXIS))
    return jax.tree_util.tree_map(lambda a: jax.device_put(a, sharding), data)


def replicate(tree, mesh: Mesh):
    """``tree`` placed whole on every device of ``mesh``."""
    sharding = NamedSharding(mesh, P())
    return jax.tree_util.tree_map(lambda a: jax.device_put(a, sharding), tree)


def replicated(tree, mesh: Mesh):
    """``tree`` constrained (inside a traced program) to be whole on every device of ``mesh``."""
    sharding = NamedSharding(mesh, P())
    return jax.tree_util.tree_map(lambda a: jax.lax.with_sharding_constraint(a, sharding), tree)


@contextlib.contextmanager
def tracing(mesh: Mesh | None, per_silo: bool = False):
    """While a program is traced: ``gather_silos`` replicates onto ``mesh`` (None: identity);
    ``per_silo``: ``sharded()`` is true (see ``SILO_COMPUTE``)."""
    token = _MESH.set(None if mesh is None else (mesh, per_silo))
    try:
        yield
    finally:
        _MESH.reset(token)


_LOCAL_BLOCK: contextvars.ContextVar = contextvars.ContextVar("dpjax_local_block", default=False)


@contextlib.contextmanager
def local_block():
    """While one block of silos is traced (``dpjax.engine.silo_blocks``): ``sharded()`` is true, so the
    parts select the block's silos without a gather across the silo axis."""
    token = _LOCAL_BLOCK.set(True)
    try:
        yield
    finally:
        _LOCAL_BLOCK.reset(token)


def sharded() -> bool:
    """Whether the program being traced computes each silo on its own device (``tracing`` with a
    mesh and ``per_silo=True``, or one block of ``silo_blocks``): parts then select all silos
    without a gather across the silo axis."""
    if _LOCAL_BLOCK.get():
        return True
    state = _MESH.get()
    return state is not None and state[1]


def on_silo_devices(tree: Any) -> Any:
    """Per-silo arrays ``[M, ...]`` kept split over the silo axis, each silo's rows on its device, when the traced run
    computes per silo (``sharded()``); the identity otherwise (the unsharded program and ``"exact"`` trace nothing new).
    ``gather_silos`` of the result then all-gathers finished values: without it the partitioner propagates
    ``gather_silos``' replicated sharding backwards through an elementwise op and gathers its sharded operand instead (a
    silo's message before its noise, which every device then drew for all silos). Leaves whose ``M`` the devices do not
    divide (a random silo subset, already gathered to every device) are left as they are."""
    state = _MESH.get()
    if state is None or not state[1]:
        return tree
    mesh = state[0]
    count = mesh.devices.size

    def split(a):
        if jax.numpy.ndim(a) == 0 or a.shape[0] % count:
            return a
        return jax.lax.with_sharding_constraint(a, NamedSharding(mesh, P(SILO_AXIS)))

    return jax.tree_util.tree_map(split, tree)


def gather_silos(tree: Any) -> Any:
    """Per-silo arrays replicated before a reduction over silos when the traced run's silo axis is
    sharded (see the module docstring); the identity otherwise."""
    state = _MESH.get()
    if state is None:
        return tree
    sharding = NamedSharding(state[0], P())
    return jax.tree_util.tree_map(lambda a: jax.lax.with_sharding_constraint(a, sharding), tree)
