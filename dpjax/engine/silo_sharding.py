"""One run's silo axis sharded over devices (``engine.run(..., silo_devices=...)``).

A sweep shards its *runs* over devices (``program.ChunkProgram``); a single
federated run with thousands of silos and a neural model instead spreads its
*silos*. Nothing in a family changes: its ``vmap`` over silos stays, and the
sharding comes from the inputs. ``shard_data`` places every leaf of the
``SiloData`` (``x``, ``y``, ``mask``, ``sizes``: silo axis first) with
``NamedSharding(mesh, P("silos"))``; ``jit``'s partitioner then propagates the
silo sharding to everything computed per silo (sampler states, batches,
per-silo gradients, clipping and per-silo noise: each device computes its own
silos), while the model, the server state and the hyperparameters are
replicated.

Bit for bit. A reduction over a sharded silo axis would run as per-device
partial sums plus an all-reduce: another summation order, other last bits. The
generic round (``chain.ChainFamily.step``) therefore hands the aggregator its
per-silo messages through ``gather_silos``: under a silo mesh they are
replicated first (an all-gather of ``N x |message|`` values, the same bytes a
server receives from its silos), so the aggregate is the unsharded program's
reduction over the same ``[N, ...]`` array, computed on every device alike;
without a silo mesh ``gather_silos`` is the identity and the traced program
is unchanged. Random draws agree because JAX's threefry is partitionable (a
sharded draw yields the unsharded values).

Tested (tests/engine/test_silo_sharding.py, 8 host devices): flax-MLP runs
(full / fixed availability, private / non-private) are bit-identical on 1, 2,
4 and 8 devices. The GLMs' closed-form round, compiled with a sharded silo
axis, can differ in the last bits at some shapes (<= 9.3e-7 relative observed
at 16 silos x 32 rows x d = 8, the same on 2 and 8 devices: XLA compiles the
partitioned per-silo products differently, not a cross-device sum); not
root-caused.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

SILO_AXIS = "silos"
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


@contextlib.contextmanager
def tracing(mesh: Mesh | None):
    """While a program is traced: ``gather_silos`` replicates onto ``mesh`` (None: identity)."""
    token = _MESH.set(mesh)
    try:
        yield
    finally:
        _MESH.reset(token)


def gather_silos(tree: Any) -> Any:
    """Per-silo arrays replicated before a reduction over silos when the traced run's silo axis is
    sharded (see the module docstring); the identity otherwise."""
    mesh = _MESH.get()
    if mesh is None:
        return tree
    sharding = NamedSharding(mesh, P())
    return jax.tree_util.tree_map(lambda a: jax.lax.with_sharding_constraint(a, sharding), tree)
