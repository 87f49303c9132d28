"""The compiled chunk program: a ``Tc x Sc x Hc`` tile of runs as one XLA program.

Structure (outer to inner)::

    trials       (data split: per-trial SiloData / eval data / hparams)
      repetitions  (run keys)
        configs      (per-run hyperparameters; keys and data shared)
          one run = rounds in lax.scan, silos vmapped inside the round step

Each level is a ``vmap`` or, when the simultaneous width would exceed
``vmap_width``, a sequential ``lax.map`` (the innermost level uses
``lax.map(..., batch_size=vmap_width)``). Because the inner ``vmap`` over
configs sees an *unbatched* key and data, everything that depends only on the
key (availability masks, minibatch indices, the standard normal draws of the
noise) is computed once per repetition and shared by all configs — the
common-random-numbers discipline of ``dpjax.keys`` turned into saved work —
and per-config gradient evaluations become matrix products.

Multi-device: the program is wrapped in ``shard_map`` over a 1-d mesh
``("runs",)``; the global input has a leading device axis and device ``d``
runs exactly the single-device program on its own chunk. The single-device
path uses the same wrapper with a 1-device mesh, so sharded and unsharded
sweeps execute the same per-chunk HLO and agree bit for bit.

Run key of (trial t, repetition s): ``keys.run_key(seed, t, s)``;
initial parameters: ``problem.init_params(run_stream_key(run_key, "local"))``
as in ``dpjax.engine.runner.run``.

``HostLoopExecutor`` runs the same chunks (without a trial axis) as one
compiled call per round instead (``run_grid(..., round_loop="host")``).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from dpjax import keys
from dpjax.engine import runner

# Number of XLA compilations done by this module (tests count them).
COMPILATIONS = {"count": 0}
# Compiled chunk programs, keyed by everything static (program + argument shapes/dtypes):
# a second sweep in the same process with the same shapes does not recompile.
_COMPILED: dict = {}


def run_key_data(seed: int, trial: int, rep: int) -> np.ndarray:
    return np.asarray(jax.random.key_data(keys.run_key(seed, trial, rep)))


def _first_true(flags: jax.Array) -> jax.Array:
    """Index of the first True along the last axis, -1 if none."""
    return jnp.where(jnp.any(flags, axis=-1), jnp.argmax(flags, axis=-1), -1).astype(jnp.int32)


def make_chunk_fn(algorithm, eval_fn, eval_every, shape: tuple[int, int, int], vmap_width: int, *,
                  trial_axis: bool = True, common_keys: bool = True, initial_params: bool = False):
    """The per-device chunk function ``(hp[Tc,Hc], data[Tc], eval[Tc], keydata[Tc,Sc], params) -> results``.

    Options (static; each changes the program, so results are bit-identical
    only within one choice):

    * ``trial_axis=False``: a chunk is the runs of one data split and one
      repetition (``Tc = Sc = 1``), vmapped directly: ``data``/``eval_data``
      carry no trial axis and no size-1 trial or repetition ``vmap`` is added
      (it would change XLA's batched products and so the last bits);
    * ``common_keys=False`` (only without a trial axis): one key per run,
      ``keydata[1,1,Hc]``, instead of one key shared by the chunk;
    * ``initial_params=True``: ``params`` (no leading axes) is every run's
      starting point; otherwise ``problem.init_params`` of the run key's
      ``"local"`` stream and ``params`` is ``None``.

    Returns ``{"diverged_round": int32[Tc,Sc,Hc], "overflow_round": int32[...],
    "evals": {metric: f32[Tc,Sc,Hc,E]}}``.
    """
    tc, sc, hc = shape
    problem = algorithm.problem
    if not trial_axis and (tc, sc) != (1, 1):
        raise ValueError(f"shape={shape}: without a trial axis a chunk holds one trial and one repetition")
    if trial_axis and not common_keys:
        raise ValueError("common_keys=False needs trial_axis=False (one key per lane)")

    def one_run(hp, data, eval_data, kd, params):
        key = jax.random.wrap_key_data(kd)
        if not initial_params:
            params = problem.init_params(keys.run_stream_key(key, "local"))
        _, _, round_metrics, evals = runner._run_single(algorithm, eval_fn, eval_every, params, hp, data, eval_data, key)
        diverged = _first_true(~round_metrics["finite"])
        overflow = round_metrics.get("sampling_overflow")
        overflow = _first_true(overflow.reshape(overflow.shape[0], -1).any(-1)) if overflow is not None else jnp.int32(-1)
        return {"diverged_round": diverged, "overflow_round": overflow, "evals": evals}

    def over_configs(hp_t, data, eval_data, kd, params):
        if common_keys:
            f = lambda hp: one_run(hp, data, eval_data, kd, params)
            xs = hp_t
        else:
            f = lambda a: one_run(a[0], data, eval_data, a[1], params)
            xs = (hp_t, kd)
        if vmap_width >= hc:
            return jax.vmap(f)(xs)
        return jax.lax.map(f, xs, batch_size=vmap_width)

    def over_reps(hp_t, data, eval_data, kds, params):
        f = lambda kd: over_configs(hp_t, data, eval_data, kd, params)
        return jax.vmap(f)(kds) if vmap_width >= hc * sc else jax.lax.map(f, kds)

    def over_trials(hp, data, eval_data, kds, params):
        if not trial_axis:
            first = lambda tree: jax.tree_util.tree_map(lambda a: a[0], tree)
            out = over_configs(first(hp), data, eval_data, kds[0, 0], params)
            return jax.tree_util.tree_map(lambda a: a[None, None], out)
        f = lambda a: over_reps(*a, params)
        args = (hp, data, eval_data, kds)
        return jax.vmap(f)(args) if vmap_width >= hc * sc * tc else jax.lax.map(f, args)

    return over_trials


@functools.lru_cache(maxsize=32)
def _sharded(algorithm, eval_fn, eval_every, shape, vmap_width, devices: tuple, options: tuple = ()):
    mesh = Mesh(np.array(devices), ("runs",))
    inner = make_chunk_fn(algorithm, eval_fn, eval_every, shape, vmap_width, **dict(options))

    per_chunk = _per_chunk_args(dict(options))

    def per_device(*args):
        local = [jax.tree_util.tree_map(lambda a: a[0], x) if sharded else x for x, sharded in zip(args, per_chunk)]
        return jax.tree_util.tree_map(lambda a: a[None], inner(*local))

    specs = tuple(P("runs") if sharded else P() for sharded in per_chunk)
    fn = jax.shard_map(per_device, mesh=mesh, in_specs=specs, out_specs=P("runs"), check_vma=False)
    return jax.jit(fn), mesh


def _per_chunk_args(options: dict) -> tuple[bool, ...]:
    """Which of ``(hp, data, eval_data, keydata, params)`` differ per chunk (a leading device axis).

    Without a trial axis the data and the starting point are shared by every
    chunk and enter the program unsliced: slicing a device axis off the data
    inside the program changes XLA's fusion and the last bits of the result.
    """
    if options.get("trial_axis", True):
        return (True,) * 5
    return (True, False, False, True, False)


def stack_devices(per_device: list, per_chunk: tuple[bool, ...] = (True,) * 5):
    """Stacks per-device chunk arguments on a leading device axis (shared arguments: the first's)."""
    stack = lambda *xs: np.stack([np.asarray(x) for x in xs])
    return tuple(jax.tree_util.tree_map(stack, *column) if sharded else column[0]
                 for column, sharded in zip(zip(*per_device), per_chunk))


class ChunkExecutor:
    """Compiles a group's chunk program once and runs chunks (``len(devices)`` at a time).

    ``options``: the static options of ``make_chunk_fn`` (``trial_axis``,
    ``common_keys``, ``initial_params``). Arguments are
    ``(hp, data, eval_data, keydata, params)`` with a leading device axis
    (without a trial axis only ``hp`` and ``keydata`` have one; the rest is
    shared, see ``_per_chunk_args``).
    """

    def __init__(self, algorithm, eval_fn, eval_every, shape, vmap_width, devices, **options):
        self.devices = tuple(devices)
        self.shape = tuple(shape)
        self.static_key = (algorithm, eval_fn, eval_every, self.shape, int(vmap_width), self.devices,
                           tuple(sorted(options.items())))
        self.fn, self.mesh = _sharded(*self.static_key)
        self.per_chunk = _per_chunk_args(dict(options))
        self.shardings = tuple(NamedSharding(self.mesh, P("runs") if sharded else P()) for sharded in self.per_chunk)
        self._compiled = None

    def _put(self, args):
        return tuple(jax.device_put(a, s) for a, s in zip(args, self.shardings))

    def compile(self, args):
        if self._compiled is None:
            sig = jax.tree_util.tree_map(lambda a: (np.shape(a), np.asarray(a).dtype.str), args)
            key = (self.static_key, repr(jax.tree_util.tree_structure(args)), repr(sig))
            if key not in _COMPILED:
                _COMPILED[key] = self.fn.lower(*self._put(args)).compile()
                COMPILATIONS["count"] += 1
            self._compiled = _COMPILED[key]
        return self._compiled

    def memory_bytes(self, args) -> int | None:
        """Per-device bytes (arguments + outputs + temporaries) from XLA's memory analysis."""
        try:
            ma = self.compile(args).memory_analysis()
            return int(ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes)
        except Exception:  # not every backend reports it
            return None

    def run_chunks(self, chunk_args: list) -> list:
        """Runs up to ``len(devices)`` chunks at once, one per device; returns their outputs in order.

        Idle devices redo the last chunk (same program, discarded output).
        """
        if not 1 <= len(chunk_args) <= len(self.devices):
            raise ValueError(f"{len(chunk_args)} chunks for {len(self.devices)} device(s); give 1 to {len(self.devices)}")
        padded = list(chunk_args) + [chunk_args[-1]] * (len(self.devices) - len(chunk_args))
        out = self(stack_devices(padded, self.per_chunk))
        return [jax.tree_util.tree_map(lambda a: a[i], out) for i in range(len(chunk_args))]

    def __call__(self, args) -> Any:
        """``args`` leaves have a leading axis ``len(devices)`` (one chunk per device)."""
        compiled = self.compile(args)
        return jax.device_get(compiled(*self._put(args)))


def _first_true_np(flags: np.ndarray) -> np.ndarray:
    return np.where(flags.any(axis=-1), np.argmax(flags, axis=-1), -1).astype(np.int32)


class HostLoopExecutor:
    """``round_loop="host"``: runs a chunk's rounds as one compiled call per round from a Python loop.

    Same chunk arguments and outputs as ``ChunkExecutor`` without a trial axis
    (``trial_axis=False``, ``initial_params=True``), on one device, one chunk
    at a time. A chunk of one run executes ``dpjax.engine.run(...,
    round_loop="host")``'s unbatched programs, a wider chunk
    ``dpjax.engine.run_many(..., round_loop="host")``'s vmapped ones (one key
    per lane, or one shared key with ``common_keys``), so the results equal
    those calls bit for bit. Why a host loop: XLA:CPU leaves convolutions of a
    gradient inside a loop body on its naive emitter (see
    ``dpjax.engine.runner``; jax-ml/jax#12868).
    """

    def __init__(self, algorithm, eval_fn, eval_every, width: int, device, *, common_keys: bool = True):
        self.algorithm, self.eval_fn, self.eval_every = algorithm, eval_fn, eval_every
        self.width, self.device, self.common_keys = int(width), device, common_keys

    def run_chunks(self, chunk_args: list) -> list:
        return [self._run_one(*args) for args in chunk_args]

    def _run_one(self, hp, data, eval_data, kd, params):
        batched = self.width > 1
        hp = jax.tree_util.tree_map(lambda a: a[0] if batched else a[0, 0], hp)  # drop the trial (and lane) axis
        kd = kd[0, 0] if self.common_keys or batched else kd[0, 0, 0]
        key_axis = 0 if batched and not self.common_keys else None
        with jax.default_device(self.device):
            out = runner._run_host_loop(self.algorithm, self.eval_fn, self.eval_every, batched, None, None, key_axis,
                                        params, hp, data, eval_data, jax.random.wrap_key_data(kd))
        _, _, round_metrics, evals = jax.device_get(out)
        lanes = (lambda a: np.asarray(a)) if batched else (lambda a: np.asarray(a)[None])
        finite = lanes(round_metrics["finite"])
        overflow = round_metrics.get("sampling_overflow")
        overflow = (_first_true_np(lanes(overflow).reshape(finite.shape + (-1,)).any(-1)) if overflow is not None
                    else np.full(finite.shape[:1], -1, np.int32))
        grid = lambda a: a[None, None]  # noqa: E731  (the [Tc = 1, Sc = 1, Hc] layout of ChunkExecutor's outputs)
        return {"diverged_round": grid(_first_true_np(~finite)), "overflow_round": grid(overflow),
                "evals": jax.tree_util.tree_map(lambda v: grid(lanes(v)), evals)}
