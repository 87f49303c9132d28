"""The one executor: every run of dpjax goes through ``execute`` or its single-program special cases.

Entry points (thin; they differ only in how they lay out runs):

* ``run(algorithm, data, hparams, key)`` / ``run_many(..., keys_)``: one run, or a batch of runs vmapped into ONE
  compiled program (``program.compiled_runner``), returning the full state, output, round metrics and evaluations;
* ``run_grid(algorithm, data, hparams, run_keys)``: a grid of runs in fixed-shape compiled chunks
  (``program.ChunkProgram``), on one data split or on per-trial splits (``Trial``), sharded over devices, returning each
  run's evaluation trace;
* ``execute(chunks, program_of, store)``: the chunk loop itself, which ``run_grid`` and ``dpjax.sweep.run_sweep`` (a
  file-backed, resumable store) both call.

Options, in one place:

* ``round_loop``: ``"scan"`` (rounds in ``lax.scan``) or ``"host"`` (one
  compiled call per round; CNNs on XLA:CPU, see ``dpjax.engine.program``);
* vmapped runs: ``run_many``'s runs axis, the chunks' ``trials x repetitions x configs`` tiles,
  ``common_random_numbers`` (runs with equal keys share their random draws inside one program);
* per-trial splits: ``run_grid(trials, ..., trial_of_run=...)``;
* sharding: ``devices`` (``shard_map`` over the runs axis; 1 device or 8, same bits); one run's silos:
  ``run(..., silo_devices=)`` and ``run_grid(..., silo_devices=)`` (or the active ``silo_sharding.layout``, which
  ``dpjax run / reproduce --silo-devices`` set);
* evaluation schedule: ``eval_fn`` every ``eval_every`` rounds and after the last (``program.eval_schedule``);
* resumable store: ``execute(..., store=...)`` skips the chunks a store reports finished and hands it every checked
  chunk (``ChunkStore``); with ``share=(i, P)`` process ``i`` of ``P`` computes every ``P``-th chunk;
* result check: every run's overflow / non-finite rounds are checked by ``dpjax.engine.checks`` before anything is
  returned or stored (``on_nonfinite="raise"``: ``NonFiniteError`` naming the run and round; ``"mark"``:
  ``diverged_round`` recorded).

``run_grid`` details. ``common_random_numbers=True``: runs with equal run keys are executed as one repetition whose
configurations share the key (availability, batches and standard-normal draws computed once, gradients of all
configurations as one matrix product); chunks never mix repetitions. ``False``: one key per lane; with every run in one
chunk (``chunk_size >= len(run_keys)``) this is ``run_many``'s program and its results bit for bit. ``params``: one
starting point for every run (default: ``problem.init_params`` of the ``"local"`` stream of the chunk's first run key:
each run's own with common random numbers, the first lane's otherwise, as ``run_many``). Per-trial splits: chunks never
mix trials; each trial's runs are chunked as a call on its split alone would chunk them, so the results equal one call
per split bit for bit, and equal-shape trials reuse one compiled program (``run_sweep`` instead stacks equal-shape
splits on a trial axis of one program: other numbers). ``round_loop="host"``: a chunk of one run is
``run(..., round_loop="host")``, a wider one ``run_many(..., round_loop="host")``, bit for bit. Chunk width changes the
floating-point summation order of batched products, so a driver that pins its numbers keeps its ``chunk_size``.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, keys
from dpjax import progress as _progress
from dpjax.engine import silo_blocks, silo_sharding
from dpjax.primitives import trees
from dpjax.engine.checks import ON_NONFINITE, check_runs, run_flags
from dpjax.engine.program import ROUND_LOOPS, ChunkProgram, compiled_runner, eval_schedule, host_loop
from dpjax.engine.silos import PooledSiloData, SiloData

PyTree = Any
EvalFn = Callable[[PyTree, PyTree], dict]


@dataclasses.dataclass
class RunResult:
    """Host-side (NumPy) results of one run or of a batch of runs.

    With ``run_many`` every array has a leading runs axis.

    Attributes:
      output: the algorithm's output parameters.
      state: the final algorithm state.
      round_metrics: per-round metrics, arrays ``[..., num_rounds]``.
      eval_metrics: metrics of ``eval_fn`` at ``eval_rounds``, ``[..., num_evals]``.
      eval_rounds: number of completed rounds at each evaluation.
      diverged_round: first round (0-based) whose iterate was not finite, -1 if
        none; only meaningful with ``on_nonfinite="mark"``."""

    output: PyTree
    state: PyTree
    round_metrics: dict[str, np.ndarray]
    eval_metrics: dict[str, np.ndarray]
    eval_rounds: np.ndarray
    diverged_round: np.ndarray


@dataclasses.dataclass(frozen=True)
class GridResult:
    """Per-run results in the order of the runs given to ``run_grid``."""

    evals: dict[str, Any]  # metric -> [num_runs, num_evals (, metric shape)] (a pytree of such arrays for a pytree metric)
    eval_rounds: np.ndarray  # completed rounds of each evaluation
    diverged_round: np.ndarray  # int [num_runs]: first round with non-finite parameters, -1 if none


@dataclasses.dataclass(frozen=True)
class OutputParams:
    """``eval_fn`` returning the output parameters themselves (``evals["params"]``)."""

    def __call__(self, params, eval_data):
        return {"params": params}


@dataclasses.dataclass(frozen=True)
class Trial:
    """One data split of a grid with per-trial splits (``run_grid(trials, ..., trial_of_run=...)``).

    ``data``: the silos' training data; ``eval_data``: what ``eval_fn`` reads;
    ``params``: the trial's starting point (``None``: from the chunk's first run key, as with one split)."""

    data: Any
    eval_data: Any = None
    params: Any = None


# ----------------------------------------------------------------------------- argument checks
def _check_keys(name: str, value, batch_ndim: int) -> None:
    keys.check_key(name, value, batch_ndim)


def _check_data(algorithm, data: SiloData, batched: bool) -> None:
    """The algorithm's host-side checks plus the problem's label check (when it has one); a ``PooledSiloData``
    only for a family that reads it (``supports_pooled_data``)."""
    if not isinstance(data, (SiloData, PooledSiloData)):
        raise ValueError(f"data={type(data).__name__} must be a dpjax SiloData (e.g. SiloData.from_silos(xs, ys)) or "
                         "PooledSiloData")
    if isinstance(data, PooledSiloData) and not getattr(algorithm, "supports_pooled_data", False):
        raise ValueError(f"data=PooledSiloData: {type(algorithm).__name__} reads the silos' padded records directly "
                         "(only families with supports_pooled_data, e.g. DpFedAvg, read a record pool); pass "
                         "data.materialize() (a SiloData) for a small population")
    num_trials = jax.tree_util.tree_leaves(data)[0].shape[0] if batched else 0
    per_trial = [jax.tree_util.tree_map(lambda a: a[i], data) for i in range(num_trials)] if batched else [data]
    check_labels = getattr(algorithm.problem, "check_labels", None)
    for d in per_trial:
        algorithm.validate(d)
        if check_labels is not None:
            check_labels(d.real_labels() if hasattr(d, "real_labels") else np.asarray(d.y)[np.asarray(d.mask)])


def _check_common(algorithm, eval_every, on_nonfinite, round_loop) -> None:
    _validate.check_choice("on_nonfinite", on_nonfinite, ON_NONFINITE)
    _validate.check_choice("round_loop", round_loop, ROUND_LOOPS)
    if eval_every is not None:
        _validate.check_int("eval_every", eval_every, min_value=1, max_value=algorithm.num_rounds)
        eval_schedule(algorithm.num_rounds, eval_every)  # refuses more evaluations than are stored, before compiling


def _check_params(algorithm, params, key, batched: bool) -> None:
    """Given initial ``params`` have the structure and shapes of the problem's own (``jax.eval_shape`` of its
    ``init_params``: no computation), a runs axis first when ``batched``."""
    init = getattr(algorithm.problem, "init_params", None)
    if params is None or init is None:
        return
    reference = jax.eval_shape(init, keys.run_stream_key(key, "local"))
    given = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(np.shape(a)[1:], getattr(a, "dtype", None)),
                                   params) if batched else params
    trees.check_same_structure("params", given, "the problem's init_params", reference)


def _check_hparams(hparams) -> None:
    """Concrete hparams re-checked at the boundary (``HParams.validate``): values built under a trace skipped
    ``create``'s checks. Nested hparams (pytrees of dataclasses) are checked wherever they declare ``validate``."""
    def declares(node) -> bool:
        return dataclasses.is_dataclass(node) and not isinstance(node, type) and callable(getattr(node, "validate", None))

    for node in jax.tree_util.tree_leaves(hparams, is_leaf=declares):
        if declares(node):
            node.validate()


def _check_runs_axis(hparams, num_runs: int) -> None:
    for path, leaf in jax.tree_util.tree_leaves_with_path(hparams):
        if np.shape(leaf)[:1] != (num_runs,):
            raise ValueError(f"hparams{jax.tree_util.keystr(path)} has shape {np.shape(leaf)}; its leading axis "
                             f"must be the number of runs ({num_runs} keys)")


def _eval_rounds(algorithm, eval_fn, eval_every) -> np.ndarray:
    return eval_schedule(algorithm.num_rounds, eval_every) if eval_fn else np.array([], int)


# ----------------------------------------------------------------------------- one program: run / run_many
def _finish(out, hparams, on_nonfinite: str, batched: bool, eval_rounds: np.ndarray) -> RunResult:
    state, output, round_metrics, evals = jax.device_get(out)
    lead = (lambda a: np.asarray(a)) if batched else (lambda a: np.asarray(a)[None])  # noqa: E731  (runs axis)
    diverged, overflow = run_flags({k: lead(v) for k, v in round_metrics.items()}, np)
    round_metrics.pop("finite")

    def describe(i: int) -> str:
        hp = jax.tree_util.tree_map(lambda a: np.asarray(a)[i] if batched else np.asarray(a), jax.device_get(hparams))
        return f"{f'run {i}' if batched else 'the run'} (hparams {hp})"

    check_runs(diverged, overflow, on_nonfinite=on_nonfinite, describe=describe)
    diverged = diverged.astype(np.int64)
    return RunResult(output=output, state=state, round_metrics={k: np.asarray(v) for k, v in round_metrics.items()},
                     eval_metrics={k: np.asarray(v) for k, v in evals.items()}, eval_rounds=eval_rounds,
                     diverged_round=diverged if batched else diverged[0])


def run(algorithm, data: SiloData, hparams: PyTree, key: jax.Array, *, params: PyTree | None = None,
        eval_fn: EvalFn | None = None, eval_data: PyTree = None, eval_every: int | None = None,
        on_nonfinite: str = "raise", round_loop: str = "scan", silo_devices=None, silo_compute: str = "exact",
        silo_block: int | None = None) -> RunResult:
    """Runs ``algorithm.num_rounds`` rounds of one configuration.

    Args:
      algorithm: an algorithm object (see ``dpjax.engine.program``).
      data: the silos' training data.
      hparams: the algorithm's per-run hyperparameters (its ``HParams``).
      key: the run key; every random draw of the run derives from it.
      params: initial parameters (default: ``algorithm.problem.init_params`` of the key's ``"local"`` stream).
      eval_fn: optional ``eval_fn(output_params, eval_data) -> dict`` of scalars,
        evaluated every ``eval_every`` rounds and after the last round.
      on_nonfinite: ``"raise"`` (default) raises ``NonFiniteError`` naming the
        round; ``"mark"`` returns the result with ``diverged_round`` set.
      round_loop: ``"scan"`` (default: all rounds in one compiled ``lax.scan``) or ``"host"`` (one compiled call per
        round; for CNNs on CPU, see ``dpjax.engine.program``). Same rounds and keys; float results may differ in the
        last bits.
      silo_devices: devices to shard the silo axis of this one run over (``dpjax.engine.silo_sharding``: the data's
        silos split evenly, the model replicated; the number of silos a multiple of the number of devices): an int
        ``N`` (the first ``N`` local devices), ``"all"`` or a sequence of distinct ``jax.Device``;
        ``round_loop="scan"`` only.
      silo_compute: with ``silo_devices``: ``"exact"`` (default; the data gathered once, every device computes all
        silos: bit-identical to the unsharded run, tested on 8 host devices) or ``"per-silo"`` (each device computes its
        own silos; float results can differ in the last bits, see ``silo_sharding``) or ``"blocks"`` (each device
        computes its silos ``silo_block`` at a time: bit-identical to the unsharded run with the same ``silo_block``;
        ``dpjax.engine.silo_blocks``).
      silo_block: compute each round's per-silo stage this many silos at a
        time (``dpjax.engine.silo_blocks``; families of the generic step)."""
    _check_common(algorithm, eval_every, on_nonfinite, round_loop)
    _check_keys("key", key, 0)
    _check_data(algorithm, data, batched=False)
    _check_hparams(hparams)
    _check_params(algorithm, params, key, batched=False)
    if params is None:
        params = algorithm.problem.init_params(keys.run_stream_key(key, "local"))
    if silo_block is not None or silo_devices is not None:
        if isinstance(data, PooledSiloData):
            raise ValueError("silo_devices / silo_block with data=PooledSiloData: sharding and blocking split the "
                             "materialised silo axis; run a record pool unsharded (its round is the cohort's)")
        if round_loop != "scan":
            raise ValueError(f"round_loop={round_loop!r} with silo_devices or silo_block: needs round_loop='scan'")
        _validate.check_choice("silo_compute", silo_compute, silo_sharding.SILO_COMPUTE)
        mesh = None if silo_devices is None else silo_sharding.silo_mesh(silo_devices, int(data.num_silos))
        if mesh is not None and not silo_sharding.addressable(mesh):
            raise ValueError(f"silo_devices={silo_devices!r} includes other processes' devices; run() shards over "
                             "this process's devices (jax.local_devices()): one run over several processes is "
                             "`dpjax sweep CONFIG --distributed --silo-devices all`")
        silo_blocks.check_run(algorithm, silo_block, silo_compute, int(data.num_silos), mesh)
        put = (lambda t: t) if mesh is None else functools.partial(silo_sharding.replicate, mesh=mesh)
        out = compiled_runner(algorithm, eval_fn, eval_every, False, None, None, silo_mesh=mesh,
                              silo_compute=silo_compute, silo_block=silo_block)(
            put(hparams), data if mesh is None else silo_sharding.shard_data(data, mesh), put(eval_data),
            put(key), put(params))
    elif round_loop == "host":
        out = host_loop(algorithm, eval_fn, eval_every, False, None, None, None, params, hparams, data, eval_data, key)
    else:
        out = compiled_runner(algorithm, eval_fn, eval_every, False, None, None)(hparams, data, eval_data, key, params)
    return _finish(out, hparams, on_nonfinite, batched=False, eval_rounds=_eval_rounds(algorithm, eval_fn, eval_every))


def run_many(algorithm, data: SiloData, hparams: PyTree, keys_: jax.Array, *, params: PyTree | None = None,
             params_batched: bool = False, data_batched: bool = False, eval_fn: EvalFn | None = None,
             eval_data: PyTree = None, eval_every: int | None = None, on_nonfinite: str = "raise",
             shared_key: bool = False, round_loop: str = "scan") -> RunResult:
    """Runs a batch of independent configurations as one compiled program.

    ``hparams`` leaves and ``keys_`` carry a leading runs axis of the same length. ``data``/``eval_data`` (and
    ``params``) are shared by all runs unless ``data_batched`` (``params_batched``) says they have a runs axis too (e.g.
    one train/test split per trial). Results equal the same runs done one by one with ``run`` (tested).

    ``shared_key=True``: ``keys_`` is ONE key used by every run (common random numbers: all configurations see the same
    availability, batches and noise draws). The draws are then computed once, not per run, which on a grid of step sizes
    / noise levels over shared data turns per-run matrix-vector products into one matrix-matrix product.

    ``round_loop``: as in ``run`` (``"host"``: one compiled call per round for all runs)."""
    _check_common(algorithm, eval_every, on_nonfinite, round_loop)
    _check_keys("keys_ (shared_key=True)" if shared_key else "keys_", keys_, 0 if shared_key else 1)
    _check_runs_axis(hparams, jax.tree_util.tree_leaves(hparams)[0].shape[0] if shared_key else keys_.shape[0])
    _check_hparams(hparams)
    _check_data(algorithm, data, batched=data_batched)
    _check_params(algorithm, params, keys_ if shared_key else keys_[0], batched=params_batched)
    if params is None:
        params = algorithm.problem.init_params(keys.run_stream_key(keys_ if shared_key else keys_[0], "local"))
        params_batched = False
    axes = (0 if params_batched else None, 0 if data_batched else None, None if shared_key else 0)
    if round_loop == "host":
        out = host_loop(algorithm, eval_fn, eval_every, True, *axes, params, hparams, data, eval_data, keys_)
    else:
        out = compiled_runner(algorithm, eval_fn, eval_every, True, *axes)(hparams, data, eval_data, keys_, params)
    return _finish(out, hparams, on_nonfinite, batched=True, eval_rounds=_eval_rounds(algorithm, eval_fn, eval_every))


# ----------------------------------------------------------------------------- chunks: the one loop
@dataclasses.dataclass(frozen=True)
class Chunk:
    """One unit of compiled work (and of storage).

    ``group``: chunks of one group share their ``ChunkProgram`` and unsharded arguments, so consecutive ones run side by
    side on the devices; ``lanes``: the ``(t, s, h)`` positions of the real (non-padding) runs in the program's
    ``[Tc, Sc, Hc]`` outputs, in run order; ``args()``: the program's arguments (built when the chunk runs);
    ``describe(i)``: names real run ``i`` in errors; ``runs``: the caller's identifiers of the real runs."""

    id: str
    group: Hashable
    lanes: tuple
    args: Callable[[], tuple]
    describe: Callable[[int], str]
    runs: tuple = ()


class ChunkStore(Protocol):
    """Where ``execute`` puts checked chunks: ``finished(chunk)`` (skip it: a resumable store),
    ``write(chunk, results)`` with ``results`` as ``lane_results`` returns."""

    def finished(self, chunk: Chunk) -> bool: ...

    def write(self, chunk: Chunk, results: dict) -> None: ...


def lane_results(out: dict, lanes: Sequence[tuple]) -> dict:
    """A chunk program's ``[Tc, Sc, Hc, ...]`` outputs at the real lanes: ``[num_runs, ...]`` arrays."""
    index = tuple(np.asarray(axis) for axis in zip(*lanes))
    return jax.tree_util.tree_map(lambda a: np.asarray(a)[index], out)


def execute(chunks: Sequence[Chunk], program_of: Callable[[Chunk], ChunkProgram], store: ChunkStore, *,
            on_nonfinite: str = "raise", share: tuple[int, int] = (0, 1), max_chunks: int | None = None,
            progress: str | None = None, pause: float = 0.0,
            consequence: str = "No result was returned.") -> tuple[list[str], int]:
    """Runs the chunks the store has not finished; returns ``(ids computed, number skipped)``.

    Chunks are taken in order, consecutive chunks of one group ``program.chunks_at_once`` at a time (one per device); each
    finished chunk's runs pass the result check (``checks.check_runs``; on failure the chunk is not written and
    ``consequence`` ends the message) and are handed to ``store.write`` at once, so a killed execution keeps every chunk
    written before. ``share=(i, P)``: only chunks whose position is ``i`` mod ``P`` (process ``i`` of ``P``);
    ``max_chunks``: stop after that many; ``progress``: a progress bar with this title; ``pause``: seconds to sleep
    after each chunk."""
    index, count = share
    finished = [store.finished(c) for c in chunks]
    skipped = sum(finished)
    todo = [c for i, c in enumerate(chunks) if not finished[i] and i % count == index]
    if max_chunks is not None:
        todo = todo[:max_chunks]
    bar = None
    announce = progress is None and _progress.grid_title() is not None  # a paper driver under `dpjax reproduce`
    if announce and todo:
        title = _progress.grid_title()
        _progress.stage(f"{title}: {sum(len(c.lanes) for c in todo)} runs in {len(todo)} compiled chunk(s) "
                        f"(the first of each shape compiles)")
        bar = _progress.bar(total=sum(len(c.lanes) for c in todo), unit="run", desc=title, smoothing=0.1)
    elif progress is not None:  # a bar on a terminal only; a log gets stage lines (dpjax.progress)
        bar = _progress.bar(total=sum(len(c.lanes) for c in todo), unit="run", desc=progress, smoothing=0.1)
        bar.set_postfix_str(f"chunks 0/{len(todo)} ({skipped} done before)")
    title = _progress.grid_title() if announce else progress
    computed: list[str] = []
    last_line = time.perf_counter()
    i = 0
    while i < len(todo):
        prog = program_of(todo[i])
        batch = [todo[i]]
        while len(batch) < prog.chunks_at_once and i + len(batch) < len(todo) and todo[i + len(batch)].group == todo[i].group:
            batch.append(todo[i + len(batch)])
        i += len(batch)
        for c, out in zip(batch, prog.run_chunks([c.args() for c in batch])):
            results = lane_results(out, c.lanes)
            check_runs(results["diverged_round"], results["overflow_round"], on_nonfinite=on_nonfinite,
                       describe=c.describe, consequence=consequence)
            try:
                store.write(c, results)
            except OSError as err:
                raise OSError(err.errno, f"could not store chunk {c.id} ({err.strerror}); the "
                              f"{skipped + len(computed)} chunk(s) stored before are intact: fix the disk and rerun "
                              f"the same command to resume") from err
            computed.append(c.id)
            if bar is not None and bar.disable and time.perf_counter() - last_line > 10:  # a log, not a terminal
                _progress.stage(f"{title}: chunk {len(computed)}/{len(todo)} done")
                last_line = time.perf_counter()
            if bar is not None:
                bar.update(len(c.lanes))
                bar.set_postfix_str(f"chunks {len(computed)}/{len(todo)} ({skipped} done before)")
            if pause:
                time.sleep(pause)
    if bar is not None:
        bar.close()
    if announce and todo:
        _progress.stage(f"{_progress.grid_title()}: {len(computed)} chunk(s) done")
    return computed, skipped


# ----------------------------------------------------------------------------- run_grid
def check_silo_layout(algorithm, datas, silo_devices, silo_compute: str, silo_block, round_loop: str = "scan",
                      name: str = "silo_devices") -> dict:
    """``ChunkProgram``'s silo options (``silo_devices`` resolved to devices), checked against the algorithm and every
    data split before anything compiles: a ``ValueError`` naming the option and its value."""
    _validate.check_choice("silo_compute", silo_compute, silo_sharding.SILO_COMPUTE)
    if silo_devices is None:
        raise ValueError(f"silo_block={silo_block!r} needs silo_devices (1 for blocks on one device)")
    devices = silo_sharding.resolve_devices(silo_devices, name)
    if round_loop != "scan":
        raise ValueError(f"round_loop={round_loop!r} with silo_devices={silo_devices!r}: sharding a run's silos needs "
                         "round_loop='scan' (all rounds in one compiled program)")
    for data in datas:
        num_silos = int(data.num_silos)
        mesh = silo_sharding.silo_mesh(devices, num_silos)
        silo_blocks.check_run(algorithm, silo_block, silo_compute, num_silos, mesh)
    return {"silo_devices": devices, "silo_compute": silo_compute, "silo_block": silo_block}


def _trials(data, eval_data, params, trial_of_run, num_runs: int) -> tuple[list[Trial], np.ndarray]:
    """The trials and each run's trial index (one split: one trial holding every run)."""
    if not isinstance(data, (list, tuple)):
        if trial_of_run is not None:
            raise ValueError(f"trial_of_run={trial_of_run!r} needs data given as a sequence of Trial (per-trial splits)")
        return [Trial(data, eval_data, params)], np.zeros(num_runs, np.int64)
    if not data or not all(isinstance(t, Trial) for t in data):
        raise ValueError(f"data={type(data).__name__} of {len(data)} must be a SiloData or a non-empty sequence of "
                         "dpjax.engine.Trial (one per data split)")
    for name, value in (("eval_data", eval_data), ("params", params)):
        if value is not None:
            raise ValueError(f"{name} must be None with per-trial splits (each Trial carries its own {name})")
    if trial_of_run is None:
        raise ValueError(f"data holds {len(data)} trials; trial_of_run (the trial index of each run) is required")
    index = np.asarray(trial_of_run)
    if index.shape != (num_runs,) or not np.issubdtype(index.dtype, np.integer):
        raise ValueError(f"trial_of_run has shape {index.shape} and dtype {index.dtype}; expected {num_runs} integers "
                         "(one per run key)")
    if num_runs and not (0 <= index.min() and index.max() < len(data)):
        raise ValueError(f"trial_of_run holds {int(index.min())}..{int(index.max())}; trial indices must lie in "
                         f"[0, {len(data)}) ({len(data)} trials)")
    return list(data), index.astype(np.int64)


def _lane_groups(key_data: np.ndarray, common: bool, chunk_size: int, pad_to: int | None = None) -> tuple[int, list[list[int]]]:
    """Chunk width and the run indices of each chunk (before padding); a width below ``pad_to`` is raised
    to it (at most ``chunk_size``)."""
    if not common:
        width = min(chunk_size, max(len(key_data), pad_to or 0))
        return width, [list(range(s, min(s + width, len(key_data)))) for s in range(0, len(key_data), width)]
    groups: dict[bytes, list[int]] = {}
    for i, kd in enumerate(key_data):
        groups.setdefault(kd.tobytes(), []).append(i)
    width = min(chunk_size, max(max(len(g) for g in groups.values()), pad_to or 0))
    return width, [g[s:s + width] for g in groups.values() for s in range(0, len(g), width)]


def _grid_chunks(problem, trials, trial_index, hparams, key_data, common: bool, chunk_size: int,
                 pad_to: int | None = None):
    """``run_grid``'s chunks (group = trial index) and each trial's chunk width.

    A trial's chunks are laid out as a call on its split alone would lay them
    out (same widths, same bits); a chunk's last lanes repeat its first run."""

    def chunk_args(trial: Trial, members: list[int], width: int):
        lanes = np.asarray(members + [members[0]] * (width - len(members)))
        hp = jax.tree_util.tree_map(lambda a: a[lanes][None], hparams)
        kd = key_data[lanes[0]][None, None] if common else key_data[lanes][None, None]
        # The starting point enters the program as data (as in run_many): computed inside,
        # XLA would fold the constant and round differently.
        start = trial.params if trial.params is not None else problem.init_params(
            keys.run_stream_key(jax.random.wrap_key_data(key_data[lanes[0]]), "local"))
        return hp, trial.data, trial.eval_data, kd, start

    chunks, widths = [], {}
    for t, trial in enumerate(trials):
        runs_of_trial = np.flatnonzero(trial_index == t)
        if len(runs_of_trial) == 0:
            continue
        widths[t], local_chunks = _lane_groups(key_data[runs_of_trial], common, chunk_size, pad_to)
        for j, local in enumerate(local_chunks):
            members = [int(runs_of_trial[i]) for i in local]
            chunks.append(Chunk(f"t{t}-c{j}", t, tuple((0, 0, lane) for lane in range(len(members))),
                                lambda trial=trial, members=members, w=widths[t]: chunk_args(trial, members, w),
                                lambda i, members=members: f"run {members[i]}", tuple(members)))
    return chunks, widths


class _GridCollector:
    """``run_grid``'s in-memory ``ChunkStore``: each chunk's results back at its runs' indices."""

    def __init__(self, num_runs: int):
        self.num_runs = num_runs
        self.diverged = np.empty(num_runs, np.int64)
        self.evals: dict[str, Any] = {}

    def finished(self, chunk: Chunk) -> bool:
        return False

    def write(self, chunk: Chunk, results: dict) -> None:
        members = list(chunk.runs)
        self.diverged[members] = results["diverged_round"]
        for m, tree in results["evals"].items():  # a metric may be a pytree (OutputParams of a flax model)
            if m not in self.evals:
                self.evals[m] = jax.tree_util.tree_map(lambda a: np.empty((self.num_runs,) + a.shape[1:], a.dtype), tree)
            jax.tree_util.tree_map(lambda dst, a: dst.__setitem__(members, a), self.evals[m], tree)


def run_grid(algorithm, data, hparams, run_keys, *, eval_fn=None, eval_data=None, eval_every: int | None = None,
             common_random_numbers: bool = True, params=None, trial_of_run=None, chunk_size: int = 256, devices=None,
             on_nonfinite: str = "mark", round_loop: str = "scan", pad_to: int | None = None, silo_devices=None,
             silo_compute: str = "exact", silo_block: int | None = None) -> GridResult:
    """Runs ``len(run_keys)`` runs of ``algorithm`` in compiled chunks, on one data split or one per trial.

    Args:
      algorithm: the algorithm (its static configuration is the program).
      data: the silos' training data (``SiloData``), shared by every run; or a
        sequence of ``Trial`` (per-trial splits, see ``trial_of_run``).
      hparams: per-run hyperparameters stacked on a leading runs axis.
      run_keys: one run key per run (``dpjax.keys.run_key``).
      eval_fn: as in ``run`` (``OutputParams()`` returns the output parameters).
      eval_data: as in ``run``.
      eval_every: as in ``run``.
      common_random_numbers: runs with equal keys share them inside one
        program (see the module docstring); ``False``: one key per lane.
      params: one starting point for every run (default: from the chunk's first run key, see above).
      trial_of_run: with ``data`` a sequence of ``Trial``: the trial index of
        each run (``eval_data`` and ``params`` then come from the trials).
      chunk_size: runs per compiled chunk (the last chunk of a repetition is
        padded by repeating its first run; padding is discarded).
      devices: devices to spread chunks over (default: the first local device).
      on_nonfinite: ``"mark"`` (diverged runs get ``diverged_round >= 0``) or ``"raise"`` (``NonFiniteError``).
      round_loop: ``"scan"`` (rounds in ``lax.scan``, one program per chunk) or
        ``"host"`` (one compiled call per round, one device; see the module docstring).
      pad_to: chunks narrower than this are padded (by repeating their first run) to ``min(pad_to, chunk_size)`` lanes,
        so grids of different sizes of one algorithm reuse one compiled program (a step-size grid extension of a few
        runs then costs a chunk's execution, not a compilation). A run's lane count is part of its program: its last
        bits may differ from an unpadded call's.
      silo_devices: shard each run's silos over these devices (as ``run``'s; default: the active
        ``silo_sharding.layout``, if any, else none): one chunk at a time spans the devices, instead of one chunk per
        device. ``silo_compute="exact"`` (and ``"blocks"`` against one device with the same ``silo_block``) gives the
        unsharded grid's bits; ``"per-silo"`` agrees to float rounding.
      silo_compute: as in ``run``, with ``silo_devices``.
      silo_block: as in ``run``, with ``silo_devices``."""
    _check_common(algorithm, eval_every, on_nonfinite, round_loop)
    layout = silo_sharding.current_layout() if silo_devices is None else None
    if layout is not None:
        silo_devices, silo_compute, silo_block = layout.silo_devices, layout.silo_compute, layout.silo_block
        layout.used += 1
    _validate.check_int("chunk_size", chunk_size, min_value=1)
    if pad_to is not None:
        _validate.check_int("pad_to", pad_to, min_value=1)
    _check_keys("run_keys", run_keys, 1)
    typed = jnp.issubdtype(run_keys.dtype, jax.dtypes.prng_key)
    key_data = np.asarray(jax.random.key_data(run_keys) if typed else run_keys)
    num_runs = len(key_data)
    if num_runs == 0:
        raise ValueError("run_keys holds no key; a grid needs at least one run")
    _check_runs_axis(hparams, num_runs)
    _check_hparams(hparams)
    trials, trial_index = _trials(data, eval_data, params, trial_of_run, num_runs)
    for trial in trials:
        _check_data(algorithm, trial.data, batched=False)
    devices = tuple(devices) if devices is not None else tuple(jax.local_devices()[:1])
    if round_loop == "host" and len(devices) != 1:
        raise ValueError(f"devices={devices!r}: round_loop='host' runs on one device")
    silo = {}
    if silo_devices is not None or silo_block is not None:
        silo = check_silo_layout(algorithm, [t.data for t in trials], silo_devices, silo_compute, silo_block,
                                 round_loop)
    chunks, widths = _grid_chunks(algorithm.problem, trials, trial_index, jax.tree_util.tree_map(np.asarray, hparams),
                                  key_data, common_random_numbers, chunk_size, pad_to)
    # One program per trial; equal-shape trials find the compiled program in ``program``'s cache.
    programs = {t: ChunkProgram(algorithm, eval_fn, eval_every, (1, 1, w), w, devices, round_loop=round_loop,
                                trial_axis=False, common_keys=common_random_numbers, initial_params=True, **silo)
                for t, w in widths.items()}
    collector = _GridCollector(num_runs)
    execute(chunks, lambda c: programs[c.group], collector, on_nonfinite=on_nonfinite)
    return GridResult(collector.evals, _eval_rounds(algorithm, eval_fn, eval_every), collector.diverged)
