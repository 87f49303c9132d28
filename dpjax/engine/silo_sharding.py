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
import numbers
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from dpjax import _validate

SILO_AXIS = "silos"
SILO_COMPUTE = ("exact", "per-silo", "blocks")
_MESH: contextvars.ContextVar = contextvars.ContextVar("dpjax_silo_mesh", default=None)


def check_spec(value, name: str = "silo_devices"):
    """``value`` as given in a config file or on the command line: an int >= 1 or ``"all"``
    (``dpjax._validate.check_devices_spec``, pure Python: commands check it before jax is loaded)."""
    return _validate.check_devices_spec(name, value)


def _available_note(available) -> str:
    kinds = sorted({d.platform for d in available})
    note = f"{len(available)} device(s) available ({', '.join(kinds)})"
    if kinds == ["cpu"]:
        note += ("; XLA_FLAGS=--xla_force_host_platform_device_count=N (set before jax loads) makes N host "
                 "devices")
    return note


def resolve_devices(silo_devices, name: str = "silo_devices") -> tuple:
    """The devices ``silo_devices`` names, checked (a ``ValueError`` naming ``name`` and the value otherwise).

    ``silo_devices``: an int ``N >= 1`` (the first ``N`` of ``jax.local_devices()``; under ``jax.distributed``,
    ``N = jax.device_count()`` is every process's devices), ``"all"`` (``jax.devices()``: this process's, or every
    process's under ``jax.distributed``), or a sequence of distinct ``jax.Device`` objects."""
    if isinstance(silo_devices, (str, numbers.Integral)):
        spec = check_spec(silo_devices, name)
        local, everyone = jax.local_devices(), jax.devices()
        if spec == "all" or (spec == len(everyone) and spec > len(local)):
            return tuple(everyone)
        if spec > len(local):
            if len(everyone) > len(local):
                raise ValueError(f"{name}={silo_devices!r}: this process has {len(local)} device(s) of "
                                 f"{len(everyone)} over {jax.process_count()} processes; give at most "
                                 f"{len(local)} (a share of this process's devices) or 'all' (one mesh over every "
                                 "process's devices)")
            raise ValueError(f"{name}={silo_devices!r} asks for more devices than there are: "
                             f"{_available_note(local)}")
        return tuple(local[:spec])
    try:
        devices = tuple(silo_devices)
    except TypeError:
        raise ValueError(f"{name}={silo_devices!r} must be a number of devices (an int >= 1), 'all' or a "
                         "sequence of jax devices (e.g. jax.devices()[:4])") from None
    if not devices:
        raise ValueError(f"{name}={silo_devices!r} must name at least one device")
    for d in devices:
        if not isinstance(d, jax.Device):
            raise ValueError(f"{name}={silo_devices!r} holds {d!r}, which is not a jax device; give jax.Device "
                             "objects (e.g. jax.devices()[:4]), a number of devices or 'all'")
    seen = set()
    for d in devices:
        if d in seen:
            raise ValueError(f"{name}={silo_devices!r} names {d} twice; each device can hold one share of the "
                             "silos")
        seen.add(d)
    return devices


def silo_mesh(devices, num_silos: int) -> Mesh:
    """A 1-d mesh ``("silos",)`` over ``devices`` (as ``resolve_devices`` takes them); ``num_silos`` must be a
    multiple of their number."""
    devices = resolve_devices(devices)
    if num_silos % len(devices):
        raise ValueError(f"silo_devices holds {len(devices)} devices but the data has {num_silos} silos; the "
                         f"number of silos must be a multiple of the number of devices (pad with empty silos "
                         f"or use {[k for k in range(1, len(devices) + 1) if num_silos % k == 0][-1]} devices)")
    return Mesh(np.array(devices), (SILO_AXIS,))


def addressable(mesh: Mesh) -> bool:
    """Whether every device of ``mesh`` belongs to this process (not so for a mesh over several processes'
    devices under ``jax.distributed``)."""
    return all(d.process_index == jax.process_index() for d in mesh.devices.flat)


def put(tree, sharding):
    """``tree``'s leaves (host arrays, the same in every process) placed with ``sharding``; over several processes
    each process places the pieces its own devices hold (``jax.make_array_from_callback``)."""
    if all(d.process_index == jax.process_index() for d in sharding.device_set):
        return jax.tree_util.tree_map(lambda a: jax.device_put(a, sharding), tree)

    def one(a):
        a = np.asarray(a)
        return jax.make_array_from_callback(a.shape, sharding, lambda index: a[index])

    return jax.tree_util.tree_map(one, tree)


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


class Layout:
    """How the grids run inside ``layout(...)`` shard each run's silos (``silo_devices`` as ``resolve_devices`` takes
    it, ``silo_compute``, ``silo_block``); ``used`` counts the grids that took it."""

    def __init__(self, silo_devices, silo_compute: str = "exact", silo_block: int | None = None):
        self.silo_devices, self.silo_compute, self.silo_block = silo_devices, silo_compute, silo_block
        self.used = 0


_LAYOUT: contextvars.ContextVar = contextvars.ContextVar("dpjax_silo_layout", default=None)


@contextlib.contextmanager
def layout(silo_devices, silo_compute: str = "exact", silo_block: int | None = None):
    """While active, ``engine.run_grid`` calls that pass no ``silo_devices`` shard each run's silos this way: how
    ``dpjax run --silo-devices`` and ``dpjax reproduce --silo-devices`` reach the grids a task or figure runs without
    every driver growing the options. Yields the ``Layout`` (its ``used`` says whether any grid took it)."""
    current = Layout(silo_devices, silo_compute, silo_block)
    token = _LAYOUT.set(current)
    try:
        yield current
    finally:
        _LAYOUT.reset(token)


def current_layout() -> Layout | None:
    """The innermost active ``layout``, or None."""
    return _LAYOUT.get()


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
