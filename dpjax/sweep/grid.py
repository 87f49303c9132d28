"""``run_grid``: the programmatic grid executor every experiment driver goes through.

``dpjax.sweep.run_sweep`` (file-backed: plan, store, resume) and the paper
drivers (``dpjax.reproduce``, ``dpjax.tasks``) execute their runs with the same
compiled chunk program (``dpjax.sweep.program.ChunkExecutor``): a fixed-shape
chunk of runs is one XLA program, rounds in ``lax.scan``, runs vmapped,
compiled once per shape and reused by every chunk and every call with equal
shapes. ``run_grid`` takes a data split (or one per trial), a stack of per-run
hyperparameters and one run key per run, and returns the runs' evaluation
traces in run order.

Options of the protocol rather than of a driver:

* ``common_random_numbers=True``: runs with equal run keys are executed as
  one repetition whose configurations share the key (availability, batches and
  standard-normal draws computed once, gradients of all configurations as one
  matrix product); chunks never mix repetitions. ``False``: one key per lane;
  with every run in one chunk (``chunk_size >= len(run_keys)``) this is
  ``dpjax.engine.run_many``'s program and its results bit for bit;
* ``params``: one starting point for every run (default: ``problem.init_params``
  of the ``"local"`` stream of the chunk's first run key: each run's own with
  common random numbers, the first lane's otherwise, as ``engine.run_many``);
* per-trial data splits: ``data`` a sequence of ``Trial(data, eval_data,
  params)`` and ``trial_of_run`` the trial index of each run. Chunks never mix
  trials; each trial's runs are chunked as a call on its split alone would
  chunk them, so the results equal one call per split bit for bit, and
  equal-shape trials reuse one compiled program. (``run_sweep`` instead stacks
  equal-shape splits on a trial axis of one program: other numbers.);
* ``round_loop="host"``: one compiled call per round from a Python loop instead
  of one ``lax.scan`` (``program.HostLoopExecutor``; one device, chunks one
  after another). XLA:CPU leaves the convolutions of a gradient inside a loop
  body on its naive emitter (jax-ml/jax#12868, see ``dpjax.engine.runner``), so
  CNNs run 2-10x faster on CPU this way. A chunk of one run is
  ``engine.run(..., round_loop="host")``, a wider one
  ``engine.run_many(..., round_loop="host")``, bit for bit; the float results
  differ from the scan's in the last bits;
* the papers' selection rules (mean over repetitions, DIFF2's patience rule)
  apply to the returned traces: ``dpjax.sweep.select``.

Chunk width changes the floating-point summation order of batched products,
so a driver that pins its numbers keeps its ``chunk_size``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from dpjax import _validate, keys
from dpjax.engine import runner
from dpjax.sweep import program


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


def _key_data(run_keys) -> np.ndarray:
    runner._check_keys("run_keys", run_keys, 1)
    typed = jax.numpy.issubdtype(run_keys.dtype, jax.dtypes.prng_key)
    return np.asarray(jax.random.key_data(run_keys) if typed else run_keys)


def _chunks(key_data: np.ndarray, common: bool, chunk_size: int) -> tuple[int, list[list[int]]]:
    """Chunk width and the run indices of each chunk (before padding)."""
    if not common:
        width = min(chunk_size, len(key_data))
        return width, [list(range(s, min(s + width, len(key_data)))) for s in range(0, len(key_data), width)]
    groups: dict[bytes, list[int]] = {}
    for i, kd in enumerate(key_data):
        groups.setdefault(kd.tobytes(), []).append(i)
    width = min(chunk_size, max(len(g) for g in groups.values()))
    return width, [g[s:s + width] for g in groups.values() for s in range(0, len(g), width)]


@dataclasses.dataclass(frozen=True)
class Trial:
    """One data split of a grid with per-trial splits (``run_grid(trials, ..., trial_of_run=...)``).

    ``data``: the silos' training data; ``eval_data``: what ``eval_fn`` reads;
    ``params``: the trial's starting point (``None``: from the chunk's first
    run key, as with one split).
    """

    data: Any
    eval_data: Any = None
    params: Any = None


def _trials(data, eval_data, params, trial_of_run, num_runs: int) -> tuple[list[Trial], np.ndarray]:
    """The trials and each run's trial index (one split: one trial holding every run)."""
    if not isinstance(data, (list, tuple)):
        if trial_of_run is not None:
            raise ValueError(f"trial_of_run={trial_of_run!r} needs data given as a sequence of Trial (per-trial splits)")
        return [Trial(data, eval_data, params)], np.zeros(num_runs, np.int64)
    if not data or not all(isinstance(t, Trial) for t in data):
        raise ValueError(f"data={type(data).__name__} of {len(data)} must be a SiloData or a non-empty sequence of "
                         "dpjax.sweep.Trial (one per data split)")
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


def run_grid(
    algorithm,
    data,
    hparams,
    run_keys,
    *,
    eval_fn=None,
    eval_data=None,
    eval_every: int | None = None,
    common_random_numbers: bool = True,
    params=None,
    trial_of_run=None,
    chunk_size: int = 256,
    devices=None,
    on_nonfinite: str = "mark",
    round_loop: str = "scan",
) -> GridResult:
    """Runs ``len(run_keys)`` runs of ``algorithm`` in compiled chunks, on one data split or one per trial.

    Args:
      algorithm: the algorithm (its static configuration is the program).
      data: the silos' training data (``SiloData``), shared by every run; or a
        sequence of ``Trial`` (per-trial splits, see ``trial_of_run``).
      hparams: per-run hyperparameters stacked on a leading runs axis.
      run_keys: one run key per run (``dpjax.keys.run_key``).
      eval_fn: as in ``dpjax.engine.run`` (``OutputParams()`` returns the output parameters).
      eval_data: as in ``dpjax.engine.run``.
      eval_every: as in ``dpjax.engine.run``.
      common_random_numbers: runs with equal keys share them inside one
        program (see the module docstring); ``False``: one key per lane.
      params: one starting point for every run (default: from the chunk's first run key, see above).
      trial_of_run: with ``data`` a sequence of ``Trial``: the trial index of
        each run (``eval_data`` and ``params`` then come from the trials).
      chunk_size: runs per compiled chunk (the last chunk of a repetition is
        padded by repeating its first run; padding is discarded).
      devices: devices to spread chunks over (default: the first local device).
      on_nonfinite: ``"mark"`` (diverged runs get ``diverged_round >= 0``) or
        ``"raise"`` (``NonFiniteError``).
      round_loop: ``"scan"`` (rounds in ``lax.scan``, one program per chunk) or
        ``"host"`` (one compiled call per round, one device; see the module docstring).
    """
    _validate.check_choice("on_nonfinite", on_nonfinite, ("raise", "mark"))
    _validate.check_choice("round_loop", round_loop, runner.ROUND_LOOPS)
    _validate.check_int("chunk_size", chunk_size, min_value=1)
    runner._check_eval_every(algorithm, eval_every)
    key_data = _key_data(run_keys)
    num_runs = len(key_data)
    if num_runs == 0:
        raise ValueError("run_keys holds no key; a grid needs at least one run")
    for path, leaf in jax.tree_util.tree_leaves_with_path(hparams):
        if np.shape(leaf)[:1] != (num_runs,):
            raise ValueError(f"hparams{jax.tree_util.keystr(path)} has shape {np.shape(leaf)}; its leading axis "
                             f"must be the number of runs ({num_runs} keys)")
    trials, trial_index = _trials(data, eval_data, params, trial_of_run, num_runs)
    for trial in trials:
        runner._check_data(algorithm, trial.data, batched=False)
    devices = tuple(devices) if devices is not None else tuple(jax.local_devices()[:1])
    if round_loop == "host" and len(devices) != 1:
        raise ValueError(f"devices={devices!r}: round_loop='host' runs on one device")
    hparams = jax.tree_util.tree_map(np.asarray, hparams)
    problem = algorithm.problem
    def executor(width: int):
        """A trial's executor; equal-shape trials find the compiled program in ``program``'s cache."""
        if round_loop == "host":
            return program.HostLoopExecutor(algorithm, eval_fn, eval_every, width, devices[0],
                                            common_keys=common_random_numbers)
        return program.ChunkExecutor(algorithm, eval_fn, eval_every, (1, 1, width), width, devices,
                                     trial_axis=False, common_keys=common_random_numbers, initial_params=True)

    def chunk_args(trial: Trial, members: list[int], width: int):
        lanes = np.asarray(members + [members[0]] * (width - len(members)))
        hp = jax.tree_util.tree_map(lambda a: a[lanes][None], hparams)
        kd = key_data[lanes[0]][None, None] if common_random_numbers else key_data[lanes][None, None]
        # The starting point enters the program as data (as in dpjax.engine.run_many): computed inside,
        # XLA would fold the constant and round differently.
        start = trial.params if trial.params is not None else problem.init_params(
            keys.run_stream_key(jax.random.wrap_key_data(key_data[lanes[0]]), "local"))
        return hp, trial.data, trial.eval_data, kd, start

    diverged = np.empty(num_runs, np.int64)
    evals: dict[str, np.ndarray] = {}
    for t, trial in enumerate(trials):
        # A trial's chunks are laid out as a call on its split alone would lay them out (same widths, same bits).
        runs_of_trial = np.flatnonzero(trial_index == t)
        if len(runs_of_trial) == 0:
            continue
        width, local_chunks = _chunks(key_data[runs_of_trial], common_random_numbers, chunk_size)
        chunks = [[int(runs_of_trial[i]) for i in c] for c in local_chunks]
        ex = executor(width)
        for start in range(0, len(chunks), len(devices)):
            batch = chunks[start:start + len(devices)]
            for members, out in zip(batch, ex.run_chunks([chunk_args(trial, m, width) for m in batch])):
                real = len(members)
                overflow = np.asarray(out["overflow_round"][0, 0, :real])
                if (overflow >= 0).any():
                    lane = int(np.argmax(overflow >= 0))
                    raise runner.SamplingOverflowError(
                        f"run {members[lane]}: a Poisson batch overflowed its buffer at round {int(overflow[lane])}; "
                        "the batch was truncated and the Poisson privacy analysis does not apply. "
                        "Increase the sampler's capacity.")
                diverged[members] = out["diverged_round"][0, 0, :real]
                for m, tree in out["evals"].items():  # a metric may be a pytree (OutputParams of a flax model)
                    tree = jax.tree_util.tree_map(lambda a: np.asarray(a[0, 0, :real]), tree)
                    if m not in evals:
                        evals[m] = jax.tree_util.tree_map(lambda a: np.empty((num_runs,) + a.shape[1:], a.dtype), tree)
                    jax.tree_util.tree_map(lambda dst, a: dst.__setitem__(members, a), evals[m], tree)
    if on_nonfinite == "raise" and (diverged >= 0).any():
        run = int(np.argmax(diverged >= 0))
        raise runner.NonFiniteError(
            f"run {run} produced NaN/inf parameters at round {int(diverged[run])} (0-based); lower the step size "
            "or check the data, or pass on_nonfinite='mark'. No result was returned.")
    eval_rounds = runner.eval_schedule(algorithm.num_rounds, eval_every) if eval_fn else np.array([], int)
    return GridResult(evals, eval_rounds, diverged)
