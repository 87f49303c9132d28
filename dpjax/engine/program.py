"""The compiled programs of the executor: rounds in ``lax.scan``, runs in ``vmap``, chunks over devices.

An *algorithm* is a frozen (hashable) dataclass holding everything static, with the family contract of
``dpjax.engine.contract`` (``init``, ``step``, ``params``, ``output_params``); its per-run ``hparams`` live inside the
state, so a grid of configurations with the same static shape is one ``vmap`` over states and keys: one compilation for
the whole grid. Round ``r`` receives ``fold_in(run_key, r)`` (see ``dpjax.keys``); nothing else is random.

One run is ``trace_run`` (rounds in ``lax.scan``, evaluations every ``eval_every`` rounds); ``run_program`` wraps it as
one lane of a batch (key given as key data, starting point from the key, results reduced to
``dpjax.engine.checks.run_flags``), ``compiled_runner`` is the jitted program of ``dpjax.engine.run``/``run_many`` and
``chunk_fn`` the ``Tc x Sc x Hc`` tile of a grid::

    trials       (data split: per-trial SiloData / eval data / hparams)
      repetitions  (run keys)
        configs      (per-run hyperparameters; keys and data shared)

Each level is a ``vmap`` or, when the simultaneous width would exceed ``vmap_width``, a sequential ``lax.map``. Because
the inner ``vmap`` over configs sees an *unbatched* key and data, everything that depends only on the key (availability
masks, minibatch indices, the standard normal draws of the noise) is computed once per repetition and shared by all
configs (the common-random-numbers discipline of ``dpjax.keys`` turned into saved work), and per-config gradient
evaluations become matrix products.

``ChunkProgram`` compiles a chunk once and runs ``len(devices)`` chunks at a time: the program is wrapped in
``shard_map`` over a 1-d mesh ``("runs",)``; device ``d`` runs exactly the single-device program on its own chunk, and
the single-device path uses the same wrapper with a 1-device mesh, so sharded and unsharded grids execute the same
per-chunk HLO and agree bit for bit.

``round_loop="host"`` runs the same rounds as one compiled call per round from a Python loop instead of one ``lax.scan``
(``host_loop``). Use it for convolutional networks on XLA:CPU: its convolution canonicalisation pass
(``ConvCanonicalization``, which rewrites a convolution into the NHWC/HWIO layout that its fast Eigen/YNNPACK kernels
need) visits only the entry computation, so the backward-pass convolutions of a gradient inside a ``scan`` body fall
back to the naive elemental emitter (2-85x slower per convolution on the MNIST CNN; jax-ml/jax#12868). In the host loop
every round is an entry computation. Same rounds and keys; float results may differ in the last bits.
"""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from dpjax import keys
from dpjax.engine import silo_blocks, silo_sharding
from dpjax.engine.checks import run_flags

PyTree = Any
EvalFn = Callable[[PyTree, PyTree], dict]
ROUND_LOOPS = ("scan", "host")

# Number of XLA compilations of chunk programs (tests count them).
COMPILATIONS = {"count": 0}
# Compiled chunk programs, keyed by everything static (program + argument shapes/dtypes):
# a second grid in the same process with the same shapes does not recompile.
_COMPILED: dict = {}


def tree_all_finite(tree: PyTree) -> jax.Array:
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in leaves]))


#: Most evaluation points of one run: each stores its metrics on the host (``[runs, evaluations]`` arrays), so a
#: schedule of 10^9 points would exhaust memory before the first round; a larger one is refused up front.
MAX_EVALUATIONS = 10**6


def eval_schedule(num_rounds: int, eval_every: int | None) -> np.ndarray:
    """Completed-round counts at which ``eval_fn`` runs (always includes the last).

    Built in closed form (``np.arange``, never a Python list of every round); more than ``MAX_EVALUATIONS`` points is a
    ``ValueError`` naming ``eval_every``."""
    if eval_every is None:
        return np.array([num_rounds], np.int64)
    num_rounds, eval_every = int(num_rounds), int(eval_every)
    count = num_rounds // eval_every + (num_rounds % eval_every != 0)
    if count > MAX_EVALUATIONS:
        raise ValueError(f"eval_every={eval_every} over num_rounds={num_rounds} gives {count} evaluations; at most "
                         f"{MAX_EVALUATIONS} are stored (choose eval_every >= {-(-num_rounds // MAX_EVALUATIONS)})")
    points = np.arange(eval_every, num_rounds + 1, eval_every, dtype=np.int64)
    if points.size == 0 or points[-1] != num_rounds:
        points = np.append(points, np.int64(num_rounds))
    return points


def _round(algorithm, state, data, run_key, r):
    """One round with its key; ``metrics["finite"]`` says whether the new iterate is finite."""
    state, metrics = algorithm.step(state, data, keys.round_key(run_key, r))
    metrics = dict(metrics)
    metrics["finite"] = tree_all_finite(algorithm.params(state))
    return state, metrics


def _scan_rounds(one_round, state, start, length: int):
    """``lax.scan`` of ``one_round(state, r)`` for ``r = start, ..., start + length - 1``, the round index kept in the
    carry: scanning over ``jnp.arange(length)`` would materialise a ``[length]`` int32 array (4 GB for 10^9 rounds)."""
    def body(carry, _):
        state, r = carry
        state, out = one_round(state, r)
        return (state, r + 1), out

    (state, _), out = jax.lax.scan(body, (state, jnp.asarray(start, jnp.int32)), None, length=length)
    return state, out


def trace_run(algorithm, eval_fn, eval_every, params, hparams, data, eval_data, run_key, *, flags: bool = False):
    """One run, traced: returns ``(state, output, round_metrics, eval_metrics)``.

    ``flags=True``: ``round_metrics`` is replaced by ``checks.run_flags``' ``(diverged_round, overflow_round)``, kept
    in the scan's carry (first round whose iterate was not finite / whose Poisson batch overflowed, -1 if none), so the
    program holds O(1) per run instead of ``[num_rounds]`` arrays of every per-round metric (10^9 rounds were GBs)."""
    state = algorithm.init(params, hparams, data, run_key)
    if flags:
        none = jnp.full((), -1, jnp.int32)

        def one_round(carry, r):
            state, diverged, overflow = carry
            state, m = _round(algorithm, state, data, run_key, r)
            diverged = jnp.where((diverged < 0) & ~m["finite"], r.astype(jnp.int32), diverged)
            if "sampling_overflow" in m:
                overflow = jnp.where((overflow < 0) & jnp.any(m["sampling_overflow"]), r.astype(jnp.int32), overflow)
            return (state, diverged, overflow), None

        state = (state, none, none)
    else:
        one_round = lambda state, r: _round(algorithm, state, data, run_key, r)  # noqa: E731
    output = lambda state: algorithm.output_params(state[0] if flags else state)  # noqa: E731

    def finish(state, round_metrics, evals):
        if flags:
            state, diverged, overflow = state
            round_metrics = (diverged, overflow)
        return state, algorithm.output_params(state), round_metrics, evals

    num_rounds = algorithm.num_rounds
    if eval_fn is None:
        state, round_metrics = _scan_rounds(one_round, state, 0, num_rounds)
        return finish(state, round_metrics, {})

    every = eval_every or num_rounds
    num_chunks, remainder = divmod(num_rounds, every)

    def chunk(state, c):
        state, m = _scan_rounds(one_round, state, c * every, every)
        return state, (m, eval_fn(output(state), eval_data))

    state, (round_metrics, evals) = jax.lax.scan(chunk, state, jnp.arange(num_chunks))
    if not flags:
        round_metrics = jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[2:]), round_metrics)
    if remainder:
        state, tail = _scan_rounds(one_round, state, num_chunks * every, remainder)
        last_eval = eval_fn(output(state), eval_data)
        if not flags:
            round_metrics = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), round_metrics, tail)
        evals = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b[None]]), evals, last_eval)
    return finish(state, round_metrics, evals)


def run_program(algorithm, eval_fn, eval_every, *, key_data: bool = False, init_params: bool = False,
                flags: bool = False):
    """One lane ``(hparams, data, eval_data, key, params) -> results`` of a batch of runs.

    ``key_data``: ``key`` is raw key data (``jax.random.key_data``), wrapped here;
    ``init_params``: the starting point is ``problem.init_params`` of the key's ``"local"`` stream (``params`` is
    ignored); ``flags``: return ``{"diverged_round", "overflow_round", "evals"}`` (``checks.run_flags``, reduced in the
    round loop's carry) instead of ``(state, output, round_metrics, evals)``."""

    def lane(hparams, data, eval_data, key, params):
        if key_data:
            key = jax.random.wrap_key_data(key)
        if init_params:
            params = algorithm.problem.init_params(keys.run_stream_key(key, "local"))
        out = trace_run(algorithm, eval_fn, eval_every, params, hparams, data, eval_data, key, flags=flags)
        if not flags:
            return out
        diverged, overflow = out[2]
        return {"diverged_round": diverged, "overflow_round": overflow, "evals": out[3]}

    return lane


def map_lanes(fn, args: tuple, axes: tuple, width: int, vmap_width: int | None = None):
    """``fn`` over the lanes of ``args`` (``axes[i]`` 0: mapped, ``None``: shared): one ``vmap``, or
    ``lax.map`` in batches of ``vmap_width`` when the lanes are wider."""
    if vmap_width is None or vmap_width >= width:
        return jax.vmap(fn, in_axes=axes)(*args)
    mapped = [i for i, a in enumerate(axes) if a is not None]

    def one(xs):
        full = list(args)
        for i, x in zip(mapped, xs):
            full[i] = x
        return fn(*full)

    return jax.lax.map(one, tuple(args[i] for i in mapped), batch_size=vmap_width)


@functools.lru_cache(maxsize=64)
def compiled_runner(algorithm, eval_fn, eval_every, batched: bool, params_axis, data_axis, key_axis=0,
                    silo_mesh=None, silo_compute="exact", silo_block=None):
    """The jitted program of ``engine.run`` (unbatched) / ``run_many`` (runs vmapped with these axes);
    cached so a second call with new arrays of the same shapes does not recompile. Arguments
    ``(hparams, data, eval_data, key, params)``. ``silo_mesh``: the run's silos are sharded over this
    mesh (``dpjax.engine.silo_sharding``; the data must be placed with ``shard_data``), computed
    as ``silo_compute`` says (``silo_sharding.SILO_COMPUTE``). ``silo_block``: the per-silo stage
    runs that many silos at a time (``dpjax.engine.silo_blocks``; over the mesh for ``"blocks"``)."""
    lane = run_program(algorithm, eval_fn, eval_every)
    if silo_block is not None:
        whole = lane
        block_mesh = silo_mesh if silo_compute == "blocks" else None

        def lane(*args):
            with silo_blocks.tracing(block_mesh, silo_block):
                return whole(*args)
    if silo_mesh is not None:
        unsharded = lane

        def lane(hparams, data, *rest):
            if silo_compute == "exact":  # every device the unsharded program on all silos
                data = silo_sharding.replicated(data, silo_mesh)
            with silo_sharding.tracing(silo_mesh, per_silo=silo_compute == "per-silo"):
                return unsharded(hparams, data, *rest)
    if not batched:
        return jax.jit(lane)
    return jax.jit(jax.vmap(lane, in_axes=(0, data_axis, data_axis, key_axis, params_axis)))


# ----------------------------------------------------------------------------- host round loop
@functools.lru_cache(maxsize=64)
def _host_programs(algorithm, eval_fn, batched: bool, params_axis, data_axis, key_axis=0):
    """``(init, round, output, evaluate)`` jitted separately; a round is ``trace_run``'s round with the
    same round key, so only XLA's compilation differs."""

    def init(params, hparams, data, run_key):
        return algorithm.init(params, hparams, data, run_key)

    def one_round(state, data, run_key, r):
        return _round(algorithm, state, data, run_key, r)

    output = algorithm.output_params

    def evaluate(state, eval_data):
        return eval_fn(algorithm.output_params(state), eval_data) if eval_fn is not None else {}

    if batched:
        init = jax.vmap(init, in_axes=(params_axis, 0, data_axis, key_axis))
        one_round = jax.vmap(one_round, in_axes=(0, data_axis, key_axis, None))
        output = jax.vmap(output)
        evaluate = jax.vmap(evaluate, in_axes=(0, data_axis))
    return jax.jit(init), jax.jit(one_round), jax.jit(output), jax.jit(evaluate)


def host_loop(algorithm, eval_fn, eval_every, batched, params_axis, data_axis, key_axis,
              params, hparams, data, eval_data, run_key):
    """``round_loop="host"``: the rounds of ``trace_run`` from a Python loop, one compiled call per round
    (runs vmapped with the given axes when ``batched``); returns ``trace_run``'s outputs."""
    init, one_round, output, evaluate = _host_programs(algorithm, eval_fn, batched, params_axis, data_axis, key_axis)
    state = init(params, hparams, data, run_key)
    eval_points = set(eval_schedule(algorithm.num_rounds, eval_every).tolist()) if eval_fn else set()
    round_metrics, evals = [], []
    from dpjax import progress

    title, last = progress.grid_title(), time.perf_counter()  # under `dpjax reproduce`: a line every 10 s or more
    for r in range(algorithm.num_rounds):
        state, metrics = one_round(state, data, run_key, jnp.int32(r))
        round_metrics.append(metrics)
        if title is not None:
            jax.block_until_ready(metrics)  # the round has run, not only been dispatched (the clock is honest)
        if title is not None and time.perf_counter() - last > 10:
            progress.stage(f"{title}: round {r + 1}/{algorithm.num_rounds} of the chunk (host round loop)")
            last = time.perf_counter()
        if r + 1 in eval_points:
            evals.append(evaluate(state, eval_data))
    axis = 1 if batched else 0
    stack = lambda *xs: jnp.stack(xs, axis=axis)  # noqa: E731  (rounds / evaluations axis, as scan's)
    round_metrics = jax.tree_util.tree_map(stack, *round_metrics)
    evals = jax.tree_util.tree_map(stack, *evals) if evals else {}
    return state, output(state), round_metrics, evals


# ----------------------------------------------------------------------------- chunk programs
def chunk_fn(algorithm, eval_fn, eval_every, shape: tuple[int, int, int], vmap_width: int, *,
             trial_axis: bool = True, common_keys: bool = True, initial_params: bool = False):
    """The per-device chunk function ``(hp[Tc,Hc], data[Tc], eval[Tc], keydata[Tc,Sc], params) -> results``.

    Options (static; each changes the program, so results are bit-identical only within one choice):

    * ``trial_axis=False``: a chunk is the runs of one data split and one repetition (``Tc = Sc = 1``), vmapped
      directly: ``data``/``eval_data`` carry no trial axis and no size-1 trial or repetition ``vmap`` is added (it would
      change XLA's batched products and so the last bits);
    * ``common_keys=False`` (only without a trial axis): one key per run,
      ``keydata[1,1,Hc]``, instead of one key shared by the chunk;
    * ``initial_params=True``: ``params`` (no leading axes) is every run's starting point; otherwise
      ``problem.init_params`` of the run key's ``"local"`` stream and ``params`` is ``None``.

    Returns ``{"diverged_round": int32[Tc,Sc,Hc], "overflow_round": int32[...], "evals": {metric: f32[Tc,Sc,Hc,E]}}``.
    """
    tc, sc, hc = shape
    if not trial_axis and (tc, sc) != (1, 1):
        raise ValueError(f"shape={shape}: without a trial axis a chunk holds one trial and one repetition")
    if trial_axis and not common_keys:
        raise ValueError("common_keys=False needs trial_axis=False (one key per lane)")
    lane = run_program(algorithm, eval_fn, eval_every, key_data=True, init_params=not initial_params, flags=True)
    config_axes = (0, None, None, None if common_keys else 0, None)

    def over_configs(hp_t, data, eval_data, kd, params):
        return map_lanes(lane, (hp_t, data, eval_data, kd, params), config_axes, hc, vmap_width)

    def over_reps(hp_t, data, eval_data, kds, params):
        f = lambda kd: over_configs(hp_t, data, eval_data, kd, params)  # noqa: E731
        return jax.vmap(f)(kds) if vmap_width >= hc * sc else jax.lax.map(f, kds)

    def over_trials(hp, data, eval_data, kds, params):
        if not trial_axis:
            first = lambda tree: jax.tree_util.tree_map(lambda a: a[0], tree)  # noqa: E731
            out = over_configs(first(hp), data, eval_data, kds[0, 0], params)
            return jax.tree_util.tree_map(lambda a: a[None, None], out)
        f = lambda a: over_reps(*a, params)  # noqa: E731
        args = (hp, data, eval_data, kds)
        return jax.vmap(f)(args) if vmap_width >= hc * sc * tc else jax.lax.map(f, args)

    return over_trials


def _per_chunk_args(trial_axis: bool) -> tuple[bool, ...]:
    """Which of ``(hp, data, eval_data, keydata, params)`` differ per chunk (a leading device axis).

    Without a trial axis the data and the starting point are shared by every chunk and enter the program unsliced:
    slicing a device axis off the data inside the program changes XLA's fusion and the last bits of the result."""
    return (True,) * 5 if trial_axis else (True, False, False, True, False)


@functools.lru_cache(maxsize=32)
def _sharded(algorithm, eval_fn, eval_every, shape, vmap_width, devices: tuple, options: tuple = ()):
    mesh = Mesh(np.array(devices), ("runs",))
    options = dict(options)
    inner = chunk_fn(algorithm, eval_fn, eval_every, shape, vmap_width, **options)
    per_chunk = _per_chunk_args(options.get("trial_axis", True))

    def per_device(*args):
        local = [jax.tree_util.tree_map(lambda a: a[0], x) if sharded else x for x, sharded in zip(args, per_chunk)]
        return jax.tree_util.tree_map(lambda a: a[None], inner(*local))

    specs = tuple(P("runs") if sharded else P() for sharded in per_chunk)
    fn = jax.shard_map(per_device, mesh=mesh, in_specs=specs, out_specs=P("runs"), check_vma=False)
    return jax.jit(fn), mesh


@functools.lru_cache(maxsize=32)
def _silo_sharded(algorithm, eval_fn, eval_every, shape, vmap_width, devices: tuple, silo_compute: str,
                  silo_block, options: tuple = ()):
    """One chunk at a time with the silo axis of its data split over ``devices`` (``silo_sharding``): the chunk
    function of ``_sharded`` on a device axis of one chunk, its data's silos sharded (``[1, Tc, N, ...]`` with a
    trial axis, ``[N, ...]`` without), everything else and the outputs replicated."""
    mesh = Mesh(np.array(devices), (silo_sharding.SILO_AXIS,))
    options = dict(options)
    trial_axis = options.get("trial_axis", True)
    inner = chunk_fn(algorithm, eval_fn, eval_every, shape, vmap_width, **options)
    per_chunk = _per_chunk_args(trial_axis)
    block_mesh = mesh if silo_compute == "blocks" else None

    def one_chunk(*args):
        hp, data, eval_data, kd, params = (jax.tree_util.tree_map(lambda a: a[0], x) if sharded else x
                                           for x, sharded in zip(args, per_chunk))
        if silo_compute == "exact":  # every device the unsharded program on all silos
            data = silo_sharding.replicated(data, mesh)
        with contextlib.ExitStack() as stack:
            stack.enter_context(silo_sharding.tracing(mesh, per_silo=silo_compute == "per-silo"))
            if silo_block is not None:
                stack.enter_context(silo_blocks.tracing(block_mesh, silo_block))
            out = inner(hp, data, eval_data, kd, params)
        return jax.tree_util.tree_map(lambda a: a[None], out)

    silo_dim = 2 if trial_axis else 0  # [device = 1, trial, silo, ...] or [silo, ...]
    whole = NamedSharding(mesh, P())
    shardings = (whole, NamedSharding(mesh, P(*([None] * silo_dim), silo_sharding.SILO_AXIS)), whole, whole, whole)
    return jax.jit(one_chunk, in_shardings=shardings, out_shardings=whole), shardings


def _stack_devices(per_device: list, per_chunk: tuple[bool, ...]):
    """Stacks per-device chunk arguments on a leading device axis (shared arguments: the first's)."""
    stack = lambda *xs: np.stack([np.asarray(x) for x in xs])  # noqa: E731
    return tuple(jax.tree_util.tree_map(stack, *column) if sharded else column[0]
                 for column, sharded in zip(zip(*per_device), per_chunk))


class ChunkProgram:
    """One chunk shape of one algorithm, compiled once, run ``len(devices)`` chunks at a time.

    Chunk arguments are ``(hp, data, eval_data, keydata, params)`` as in ``chunk_fn`` (whose options ``trial_axis``,
    ``common_keys`` and ``initial_params`` it takes). ``round_loop="host"`` (one device, no trial axis,
    ``initial_params``) runs a chunk's rounds with ``host_loop`` instead: a chunk of one run executes
    ``dpjax.engine.run(..., round_loop="host")``'s unbatched programs, a wider chunk
    ``run_many(..., round_loop="host")``'s vmapped ones (one key per lane, or one shared key with ``common_keys``), so
    the results equal those calls bit for bit.

    ``silo_devices`` (resolved devices; ``silo_compute``, ``silo_block`` as in ``engine.run``): one chunk at a time,
    its data's silo axis split over these devices (``_silo_sharded``; the mesh may span ``jax.distributed``
    processes, every one of which then runs each chunk), instead of one chunk per device. ``"exact"`` gives the
    bits of the program without ``silo_devices``, ``"blocks"`` those of one device with the same ``silo_block``
    (tests/sweep/silo_sharding_cli_check.py)."""

    def __init__(self, algorithm, eval_fn, eval_every, shape, vmap_width, devices, *, round_loop: str = "scan",
                 silo_devices=None, silo_compute: str = "exact", silo_block: int | None = None, **options):
        self.devices = tuple(devices)
        self.shape = tuple(shape)
        self.round_loop = round_loop
        self.options = options
        self.silo_devices = None if silo_devices is None else tuple(silo_devices)
        #: chunks computed side by side (one per device); one when each chunk's silos span the devices
        self.chunks_at_once = 1 if self.silo_devices is not None else len(self.devices)
        if self.silo_devices is not None:
            if round_loop != "scan":
                raise ValueError(f"round_loop={round_loop!r} with silo_devices: sharding a run's silos needs "
                                 "round_loop='scan' (all rounds in one compiled program)")
            self.static_key = (algorithm, eval_fn, eval_every, self.shape, int(vmap_width), self.silo_devices,
                               silo_compute, silo_block, tuple(sorted(options.items())))
            self.fn, self.shardings = _silo_sharded(*self.static_key)
            self.per_chunk = _per_chunk_args(options.get("trial_axis", True))
            self._compiled = None
            return
        if silo_block is not None:
            raise ValueError("silo_block without silo_devices: ChunkProgram computes blocks of silos only "
                             "with its silos sharded (silo_devices=1 for one device)")
        if round_loop == "host":
            if len(self.devices) != 1 or options.get("trial_axis", True) or not options.get("initial_params"):
                raise ValueError("round_loop='host' runs chunks without a trial axis, from given initial "
                                 "parameters, on one device")
            self.algorithm, self.eval_fn, self.eval_every = algorithm, eval_fn, eval_every
            return
        self.static_key = (algorithm, eval_fn, eval_every, self.shape, int(vmap_width), self.devices,
                           tuple(sorted(options.items())))
        self.fn, self.mesh = _sharded(*self.static_key)
        self.per_chunk = _per_chunk_args(options.get("trial_axis", True))
        self.shardings = tuple(NamedSharding(self.mesh, P("runs") if sharded else P()) for sharded in self.per_chunk)
        self._compiled = None

    def _put(self, args):
        if self.silo_devices is not None:  # the mesh may span processes: each places its devices' pieces
            return tuple(silo_sharding.put(a, s) for a, s in zip(args, self.shardings))
        return tuple(jax.device_put(a, s) for a, s in zip(args, self.shardings))

    def _compile(self, args):
        if self._compiled is None:
            sig = jax.tree_util.tree_map(lambda a: (np.shape(a), np.asarray(a).dtype.str), args)
            key = (self.static_key, repr(jax.tree_util.tree_structure(args)), repr(sig))
            if key not in _COMPILED:
                _COMPILED[key] = self.fn.lower(*self._put(args)).compile()
                COMPILATIONS["count"] += 1
            self._compiled = _COMPILED[key]
        return self._compiled

    def memory_bytes(self, chunk_args) -> int | None:
        """Per-device bytes (arguments + outputs + temporaries) of one step, from XLA's memory analysis;
        ``None`` where the backend does not say (or for the host loop)."""
        if self.round_loop == "host":
            return None
        try:
            ma = self._compile(_stack_devices([chunk_args] * self.chunks_at_once, self.per_chunk)).memory_analysis()
            return int(ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes)
        except Exception:  # not every backend reports it
            return None

    def run_chunks(self, chunk_args: list) -> list:
        """Runs up to ``len(devices)`` chunks at once, one per device; returns their outputs in order.

        Idle devices redo the last chunk (same program, discarded output)."""
        at_once = self.chunks_at_once
        if not 1 <= len(chunk_args) <= at_once:
            raise ValueError(f"{len(chunk_args)} chunks for {at_once} at once; give 1 to {at_once}")
        if self.round_loop == "host":
            return [self._host_chunk(*args) for args in chunk_args]
        padded = list(chunk_args) + [chunk_args[-1]] * (at_once - len(chunk_args))
        args = _stack_devices(padded, self.per_chunk)
        out = self._compile(args)(*self._put(args))
        if self.silo_devices is not None:  # replicated outputs: this process's copy (the mesh may span processes)
            out = jax.tree_util.tree_map(lambda a: np.asarray(a.addressable_data(0)), out)
        else:
            out = jax.device_get(out)
        return [jax.tree_util.tree_map(lambda a: a[i], out) for i in range(len(chunk_args))]

    def _host_chunk(self, hp, data, eval_data, kd, params):
        width = self.shape[2]
        batched, common = width > 1, self.options.get("common_keys", True)
        hp = jax.tree_util.tree_map(lambda a: a[0] if batched else a[0, 0], hp)  # drop the trial (and lane) axis
        kd = kd[0, 0] if common or batched else kd[0, 0, 0]
        key_axis = 0 if batched and not common else None
        with jax.default_device(self.devices[0]):
            out = host_loop(self.algorithm, self.eval_fn, self.eval_every, batched, None, None, key_axis,
                            params, hp, data, eval_data, jax.random.wrap_key_data(kd))
        _, _, round_metrics, evals = jax.device_get(out)
        lanes = (lambda a: np.asarray(a)) if batched else (lambda a: np.asarray(a)[None])  # noqa: E731
        diverged, overflow = run_flags(jax.tree_util.tree_map(lanes, round_metrics), np)
        grid = lambda a: a[None, None]  # noqa: E731  (the [Tc = 1, Sc = 1, Hc] layout of the scanned chunks)
        return {"diverged_round": grid(diverged), "overflow_round": grid(overflow),
                "evals": jax.tree_util.tree_map(lambda v: grid(lanes(v)), evals)}
