"""``run_sweep``: plan, compile once per group, execute chunks, store, resume.

The chunks run through the engine's one executor (``dpjax.engine.executor.execute``) with the sweep directory
(``dpjax.sweep.store``) as its resumable store.

Privacy: every run's noise is fixed on the host before execution. With an ``epsilon`` axis, every family is calibrated
the same way: ``algorithm.privacy(silo_sizes, unit_hparams).calibrate(epsilon, delta, accountant)``
(``AlgorithmEntry.calibrate``; the plan describes the compiled run: clip norm, batch size, sampling scheme, rounds,
neighbouring relation); the table records epsilon, delta, accountant and the resulting noise values.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import time
from typing import Any

import jax
import numpy as np
import pandas as pd

from dpjax import _validate
from dpjax.engine.executor import Chunk, check_silo_layout, execute
from dpjax.engine.run_inputs import run_key_data
from dpjax import algorithms
from dpjax.engine import registry
from dpjax.engine.program import ChunkProgram, eval_schedule
from dpjax.sweep import datasets
from dpjax.sweep import plan as plan_lib
from dpjax.sweep.config import SweepConfig, parse_maxnorm
from dpjax.sweep.store import Store, check_same_sweep, environment

MEMORY_FRACTION = 0.5


@dataclasses.dataclass
class SweepResult:
    runs: pd.DataFrame
    evals: pd.DataFrame
    computed_chunks: list
    skipped_chunks: int
    total_chunks: int
    seconds: float


def _device_memory(device) -> int:
    try:
        stats = device.memory_stats()
        if stats and "bytes_limit" in stats:
            return int(stats["bytes_limit"])
    except Exception:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 << 30


class Sweep:
    """One sweep's plan, data, algorithms, resolved hyperparameters and chunk programs."""

    def __init__(self, cfg: SweepConfig, devices):
        self.cfg = cfg
        self.entry = algorithms.algorithm_entry(cfg.algorithm)
        self.dataset = datasets.get_dataset(cfg.data["name"])
        self.data_opts = self.dataset.resolve(cfg.data)
        self.devices = tuple(devices)
        self.groups = plan_lib.build_groups(cfg)
        self._trials: dict[int, datasets.TrialData] = {}
        self._algorithms: dict[int, Any] = {}
        self._programs: dict[int, ChunkProgram] = {}
        self._hp_cache: dict = {}
        self._eval_fn = None
        self.chunk_size = cfg.chunk_size or plan_lib.default_chunk_size(self.groups)
        # Default: the whole chunk at once: runs sharing data turn the GLM closed-form gradient into matrix-matrix
        # products. Measured on the Fig. 4 grid (2 trials, 360 runs, 2 busy cores): width 4 took 49.5 s, 20 took
        # 11.0 s, 60 took 9.7 s. The memory check (fit_memory) still halves it when a chunk would not fit.
        self.vmap_width = cfg.vmap_width if cfg.vmap_width is not None else self.chunk_size
        self.silo: dict = {}  # ChunkProgram's silo options (``check_silo``): one run's silos over devices

    def check_silo(self) -> None:
        """Resolves and checks the config's ``[run]`` layout against every group's algorithm and data (before any
        compilation): ``ValueError`` naming ``run.<key>``."""
        run = self.cfg.run
        if "silo_devices" not in run:
            return
        for g in self.groups:
            td = self.trial(g.trials[0])
            try:
                self.silo = check_silo_layout(self.algorithm(g), [td.train], run["silo_devices"],
                                              run.get("silo_compute", "exact"), run.get("silo_block"),
                                              name="run.silo_devices")
            except ValueError as err:  # the [run] table, or the --silo-* flags that override it
                raise ValueError(f"[run] / --silo-*: {err}") from None

    def spans_processes(self) -> bool:
        """Whether one run's silos span several processes' devices (every process then computes every chunk)."""
        return bool(self.silo) and not all(d.process_index == jax.process_index()
                                           for d in self.silo["silo_devices"])

    def trial(self, t) -> datasets.TrialData:
        if t not in self._trials:
            self._trials[t] = self.dataset.load(self.data_opts, t)
        return self._trials[t]

    def eval_fn(self, problem):
        if self._eval_fn is None:
            self._eval_fn = self.dataset.eval_fn(problem)
        return self._eval_fn

    def context(self) -> registry.BuildContext:
        td = self.trial(self.groups[0].trials[0])
        eps = self.cfg.grid.get("epsilon")
        return registry.BuildContext(td.train.num_silos, td.train.min_size, max(eps) if eps else None,
                                     self.cfg.num_rounds)

    def algorithm(self, g: plan_lib.Group):
        if g.index not in self._algorithms:
            td = self.trial(g.trials[0])
            alg = self.entry.build(td.problem, self.cfg.num_rounds, dict(g.static), self.context())
            alg.validate(td.train)
            self._algorithms[g.index] = alg
        return self._algorithms[g.index]

    def delta(self, td) -> float | None:
        if self.cfg.privacy is None:
            return None
        d = self.cfg.privacy["delta"]
        return 1.0 / td.train.min_size**2 if d == "1/n^2" else float(d)

    def hparams(self, g: plan_lib.Group, t, h: int) -> dict:
        """Resolved per-run hyperparameters (floats) of config ``h`` on trial ``t``."""
        key = (g.index, t, h)
        if key in self._hp_cache:
            return self._hp_cache[key]
        td = self.trial(t)
        axes = g.configs[h]
        vals = {**self.entry.hparam_defaults, **{k: v for k, v in axes.items() if k != "epsilon"}}
        for k in self.entry.clip_axes:
            c = parse_maxnorm(vals.get(k))
            if c is not None:
                vals[k] = c * td.max_norm
        # The device computes in float32: record (and account for) exactly the float32 values it uses.
        vals = {k: float(np.float32(v)) for k, v in vals.items()}
        if "epsilon" in axes:
            vals.update(self.entry.calibrate(self.algorithm(g), td.train.silo_sizes(), vals, float(axes["epsilon"]),
                                             self.delta(td), self.cfg.privacy["accountant"], self._hp_cache))
        self._hp_cache[key] = vals
        return vals

    def check_calibration(self) -> None:
        """Calibrates every grid ``epsilon`` point on each group's first trial before any chunk runs, and refuses ALL
        the infeasible ones in one ``ValueError`` (one message per epsilon value), not one per attempt. The
        calibrations are cached, so the chunks reuse them; other trials' splits are calibrated when they run."""
        if "epsilon" not in self.cfg.grid:
            return
        failed: dict[float, str] = {}
        for g in self.groups:
            for h, axes in enumerate(g.configs):
                eps = float(axes["epsilon"])
                if eps in failed:
                    continue
                try:
                    self.hparams(g, g.trials[0], h)
                except ValueError as err:
                    failed[eps] = " ".join(str(err).split())
        if failed:
            values = sorted({float(e) for e in self.cfg.grid["epsilon"]})
            raise ValueError(f"grid.epsilon: {len(failed)} of {len(values)} value(s) cannot be calibrated: "
                             + "; ".join(f"epsilon={e:g}: {m}" for e, m in sorted(failed.items())))

    def chunk_args(self, c: plan_lib.Chunk):
        g = self.groups[c.group]
        trials = [g.trials[i] for i in c.trial_idx]
        hp_rows = [[self.hparams(g, t, h) for h in c.cfg_idx] for t in trials]
        hp = self.entry.make_hparams(hp_rows, algorithm=self.algorithm(g))
        data, eval_data = datasets.stack_trials([self.trial(t) for t in trials])
        kd = np.stack([np.stack([run_key_data(self.cfg.seed, t, g.repetitions[s]) for s in c.rep_idx])
                       for t in trials])
        return hp, data, eval_data, kd, None  # initial parameters from each run key

    def program(self, c: plan_lib.Chunk) -> ChunkProgram:
        """The compiled program of chunk ``c``'s group (every chunk of a group has one shape)."""
        if c.group not in self._programs:
            alg = self.algorithm(self.groups[c.group])
            shape = (len(c.trial_idx), len(c.rep_idx), len(c.cfg_idx))
            self._programs[c.group] = ChunkProgram(alg, self.eval_fn(alg.problem), self.cfg.eval_every, shape,
                                                   self.vmap_width, self.devices, **self.silo)
        return self._programs[c.group]

    def fit_memory(self, chunks) -> None:
        """Halves chunk_size / vmap_width until XLA's memory analysis fits MEMORY_FRACTION of a device."""
        budget = MEMORY_FRACTION * _device_memory(self.devices[0])
        for _ in range(12):
            need = self.program(chunks[0]).memory_bytes(self.chunk_args(chunks[0]))
            if need is None or need <= budget or self.chunk_size == 1:
                return
            self._programs.clear()
            self.chunk_size = max(1, self.chunk_size // 2)
            self.vmap_width = max(1, min(self.vmap_width, self.chunk_size))
            chunks = plan_lib.build_chunks(self.groups, self.chunk_size)

    def lane(self, c: plan_lib.Chunk, lt: int, ls: int, lh: int):
        """``(group, trial, repetition, config index)`` of lane ``(lt, ls, lh)`` of chunk ``c``."""
        g = self.groups[c.group]
        return g, g.trials[c.trial_idx[lt]], g.repetitions[c.rep_idx[ls]], c.cfg_idx[lh]

    def describe(self, c: plan_lib.Chunk, i: int) -> str:
        """Names real run ``i`` of chunk ``c`` in the executor's errors."""
        g, t, s, h = self.lane(c, *list(c.lanes())[i])
        rid = plan_lib.run_id(plan_lib.identity(self.cfg, g, t, s, g.configs[h]))
        return f"run {rid} (trial={t}, repetition={s}, {g.configs[h]}, hparams {self.hparams(g, t, h)})"

    def rows(self, c: plan_lib.Chunk, results: dict, eval_rounds: np.ndarray):
        """The chunk's ``runs`` and ``evals`` tables from its checked per-run ``results``."""
        alg = self.algorithm(self.groups[c.group])
        runs, evals = [], []
        for run, lane in enumerate(c.lanes()):
            g, t, s, h = self.lane(c, *lane)
            rid = plan_lib.run_id(plan_lib.identity(self.cfg, g, t, s, g.configs[h]))
            hp = self.hparams(g, t, h)
            row = {"run_id": rid, "group": g.index, "trial": t, "repetition": s, **g.static,
                   **self.entry.resolved_columns(alg), **{f"axis_{k}": v for k, v in g.configs[h].items()},
                   **{f"{k}[{i}]": x for k, v in hp.items() if isinstance(v, tuple) for i, x in enumerate(v)},
                   **{k: v for k, v in hp.items() if not isinstance(v, tuple)}}
            if "epsilon" in g.configs[h]:
                row["epsilon"] = float(g.configs[h]["epsilon"])
                row["delta"] = self.delta(self.trial(t))
                row["accountant"] = self.cfg.privacy["accountant"]
            row["diverged_round"] = int(results["diverged_round"][run])
            ev = results["evals"]
            runs.append(row | {m: float(arr[run, -1]) for m, arr in ev.items()})
            for e, r in enumerate(eval_rounds):
                evals.append({"run_id": rid, "eval_round": int(r)} | {m: float(arr[run, e]) for m, arr in ev.items()})

        return pd.DataFrame(runs), pd.DataFrame(evals)


class _ReadOnlyStore:
    """A process > 0 of a sweep whose runs span every process's devices: it computes each chunk with process 0 (one
    program over all devices) and stores nothing; process 0 writes."""

    def __init__(self, store: "_DirectoryStore"):
        self.store = store

    def finished(self, chunk: Chunk) -> bool:
        return self.store.finished(chunk)

    def write(self, chunk: Chunk, results: dict) -> None:
        pass


class _DirectoryStore:
    """The sweep directory as the executor's resumable ``ChunkStore``: a committed chunk whose files still match its
    manifest is finished; a damaged one is announced and recomputed."""

    def __init__(self, store: Store, sweep: Sweep, chunks: dict):
        self.store, self.sweep, self.chunks = store, sweep, chunks
        self.eval_rounds = eval_schedule(sweep.cfg.num_rounds, sweep.cfg.eval_every)
        self.committed = store.finished_chunks()

    def finished(self, chunk: Chunk) -> bool:
        if chunk.id not in self.committed:
            return False
        n = len(chunk.lanes)
        why = self.store.verify(chunk.id, (n, n * len(self.eval_rounds)))
        if why is not None:  # committed, then damaged (truncated, emptied, edited): say so, then recompute it
            print(f"sweep {self.sweep.cfg.name}: recomputing chunk {chunk.id}: {why}", file=sys.stderr, flush=True)
        return why is None

    def write(self, chunk: Chunk, results: dict) -> None:
        self.store.write_chunk(chunk.id, *self.sweep.rows(self.chunks[chunk.id], results, self.eval_rounds))


def _wait_for_leader(store: Store, timeout_s: float) -> None:
    """Blocks until ``store``'s config.json exists (written by process 0), or raises ValueError."""
    _validate.check_positive("wait_for_config", timeout_s)
    deadline = time.monotonic() + float(timeout_s)
    while not store.config_path.exists():
        if time.monotonic() > deadline:
            raise ValueError(f"wait_for_config={timeout_s}: process 0 has not written {store.config_path} in time; "
                             "is it running with the same --out directory (on a shared file system)?")
        time.sleep(0.1)


def run_sweep(cfg: SweepConfig, out_dir: str | os.PathLike, *, devices=None, source_text: str | None = None,
              progress: bool = True, process_index: int = 0, process_count: int = 1, max_chunks: int | None = None,
              sleep_between_chunks: float = 0.0, wait_for_config: float | None = None) -> SweepResult:
    """Runs (or resumes) a sweep into ``out_dir``.

    Finished chunks found in ``out_dir`` are skipped; the rest are computed ``len(devices)`` at a time (one per device,
    ``shard_map`` over the runs axis) and each is stored atomically as soon as it is done. With ``process_count = P``
    this process only computes the chunks whose index is ``process_index`` mod P (several hosts sharing one directory).

    Args:
      cfg: the sweep.
      out_dir: the sweep directory (created if needed).
      devices: devices to shard the runs over (default: all local devices).
      source_text: the config file's text, kept verbatim in the directory.
      progress: show a progress bar (runs/s and ETA) on stderr.
      max_chunks: stop after computing this many chunks (resume later).
      sleep_between_chunks: pause after each stored chunk (seconds; for sharing a busy machine and for kill/resume
        tests).
      wait_for_config: with ``process_index > 0``, wait up to this many seconds for process 0 to write
        ``out_dir/config.json`` and adopt its (possibly automatic) tiling, so processes started together never race to
        different ``chunk_size`` choices (``--distributed`` sets it; ``None``: no wait).
    """
    start = time.perf_counter()
    devices = tuple(devices) if devices is not None else tuple(jax.local_devices())
    _validate.check_int("process_count", process_count, min_value=1)
    _validate.check_int("process_index", process_index, min_value=0, max_value=process_count - 1)
    if max_chunks is not None:
        _validate.check_int("max_chunks", max_chunks, min_value=0)
    _validate.check_nonnegative("sleep_between_chunks", sleep_between_chunks)
    store = Store(out_dir)
    store.prepare()  # a file, read-only or full disk fails here, before any compute
    store.lock(process_index, cfg.to_dict())
    try:
        return _run_locked(cfg, store, devices, source_text, progress, process_index, process_count, max_chunks,
                           sleep_between_chunks, wait_for_config, start)
    finally:
        store.unlock()


def _run_locked(cfg, store, devices, source_text, progress, process_index, process_count, max_chunks,
                sleep_between_chunks, wait_for_config, start) -> SweepResult:
    if wait_for_config is not None and process_index > 0:
        _wait_for_leader(store, wait_for_config)
    old = store.read_config()
    if old is not None:  # a different sweep is refused before anything is loaded or compiled
        check_same_sweep(store.root, old, cfg.to_dict(),
                         keys=[k for k in cfg.to_dict() if getattr(cfg, k, None) is not None
                               or k not in ("chunk_size", "vmap_width")])
    if old is not None and cfg.chunk_size is None and cfg.vmap_width is None:
        # Resume with the stored (possibly auto-chosen) tiling: same chunks, same lanes, same bits.
        cfg = dataclasses.replace(cfg, chunk_size=old.get("chunk_size"), vmap_width=old.get("vmap_width"))
    sw = Sweep(cfg, devices)
    sw.check_silo()
    sw.check_calibration()  # every infeasible epsilon named at once, before memory fitting or any compile
    chunks = plan_lib.build_chunks(sw.groups, sw.chunk_size)
    if old is None and cfg.chunk_size is None:
        sw.fit_memory(chunks)
        chunks = plan_lib.build_chunks(sw.groups, sw.chunk_size)
    resolved = dataclasses.replace(cfg, chunk_size=sw.chunk_size, vmap_width=sw.vmap_width).to_dict()
    store.init(resolved, source_text, environment(devices), process_index)

    plan = {c.chunk_id: c for c in chunks}
    work = [Chunk(c.chunk_id, c.group, tuple(c.lanes()), functools.partial(sw.chunk_args, c),
                  functools.partial(sw.describe, c)) for c in chunks]
    target = _DirectoryStore(store, sw, plan)
    share = (process_index, process_count)
    if sw.spans_processes():  # one program over every process's devices: all compute each chunk, process 0 stores
        target = target if process_index == 0 else _ReadOnlyStore(target)
        share = (0, 1)
    computed, skipped = execute(work, lambda chunk: sw.program(plan[chunk.id]), target,
                                on_nonfinite=cfg.on_nonfinite, share=share,
                                max_chunks=max_chunks, progress=f"sweep {cfg.name}" if progress else None,
                                pause=sleep_between_chunks, consequence="Nothing of this chunk was written.")
    runs, evals = store.load()
    return SweepResult(runs, evals, computed, skipped, len(chunks), time.perf_counter() - start)
