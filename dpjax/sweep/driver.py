"""``run_sweep``: plan, compile once per group, execute chunks, store, resume.

Privacy: every run's noise is fixed on the host before execution. With an
``epsilon`` axis, every family is calibrated the same way:
``algorithm.privacy(silo_sizes, unit_hparams).calibrate(epsilon, delta,
accountant)`` (``AlgorithmEntry.calibrate``; the plan describes the compiled
run: clip norm, batch size, sampling scheme, rounds, neighbouring relation);
the table records epsilon, delta, accountant and the resulting noise values.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any

import jax
import numpy as np
import pandas as pd

from dpjax import _validate
from dpjax.engine import runner
from dpjax.sweep import plan as plan_lib
from dpjax.sweep import program, registry
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


class _Sweep:
    def __init__(self, cfg: SweepConfig, devices):
        self.cfg = cfg
        self.entry = registry.get_algorithm(cfg.algorithm)
        self.dataset = registry.get_dataset(cfg.data["name"])
        self.data_opts = self.dataset.resolve(cfg.data)
        self.devices = tuple(devices)
        self.groups = plan_lib.build_groups(cfg)
        self._trials: dict[int, registry.TrialData] = {}
        self._algorithms: dict[int, Any] = {}
        self._executors: dict[int, program.ChunkExecutor] = {}
        self._hp_cache: dict = {}
        self._eval_fn = None
        self.chunk_size = cfg.chunk_size or plan_lib.default_chunk_size(self.groups)
        if cfg.vmap_width is not None:
            self.vmap_width = cfg.vmap_width
        else:
            # Whole chunk at once: runs sharing data turn the GLM closed-form
            # gradient into matrix-matrix products. Measured on the Fig. 4
            # grid (2 trials, 360 runs, 2 busy cores): width 4 took 49.5 s,
            # 20 took 11.0 s, 60 took 9.7 s. The memory check below still
            # halves it when a chunk would not fit.
            self.vmap_width = self.chunk_size

    # -- data, algorithms, hyperparameters ---------------------------------
    def trial(self, t) -> registry.TrialData:
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
        vals = dict(self.entry.hparam_defaults)
        vals.update({k: v for k, v in axes.items() if k != "epsilon"})
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

    # -- chunk arguments -----------------------------------------------------
    def chunk_args(self, c: plan_lib.Chunk):
        g = self.groups[c.group]
        trials = [g.trials[i] for i in c.trial_idx]
        hp_rows = [[self.hparams(g, t, h) for h in c.cfg_idx] for t in trials]
        hp = self.entry.make_hparams(hp_rows, algorithm=self.algorithm(g))
        data, eval_data = registry.stack_trials([self.trial(t) for t in trials])
        kd = np.stack([np.stack([program.run_key_data(self.cfg.seed, t, g.repetitions[s]) for s in c.rep_idx])
                       for t in trials])
        return hp, data, eval_data, kd, None  # initial parameters from each run key

    def executor(self, g: plan_lib.Group, shape) -> program.ChunkExecutor:
        if g.index not in self._executors:
            alg = self.algorithm(g)
            ev = self.eval_fn(alg.problem)
            self._executors[g.index] = program.ChunkExecutor(
                alg, ev, self.cfg.eval_every, shape, self.vmap_width, self.devices)
        return self._executors[g.index]

    def fit_memory(self, chunks) -> None:
        """Halves chunk_size / vmap_width until XLA's memory analysis fits MEMORY_FRACTION of a device."""
        budget = MEMORY_FRACTION * _device_memory(self.devices[0])
        for _ in range(12):
            c = chunks[0]
            shape = (len(c.trial_idx), len(c.rep_idx), len(c.cfg_idx))
            ex = self.executor(self.groups[c.group], shape)
            need = ex.memory_bytes(program.stack_devices([self.chunk_args(c)] * len(self.devices)))
            if need is None or need <= budget or self.chunk_size == 1:
                return
            self._executors.clear()
            self.chunk_size = max(1, self.chunk_size // 2)
            self.vmap_width = max(1, min(self.vmap_width, self.chunk_size))
            chunks = plan_lib.build_chunks(self.groups, self.chunk_size)

    # -- results -------------------------------------------------------------
    def rows(self, c: plan_lib.Chunk, out: dict, eval_rounds: np.ndarray):
        g = self.groups[c.group]
        alg = self.algorithm(g)
        runs, evals = [], []
        for lt, ls, lh in c.lanes():
            t, s, h = g.trials[c.trial_idx[lt]], g.repetitions[c.rep_idx[ls]], c.cfg_idx[lh]
            ident = plan_lib.identity(self.cfg, g, t, s, g.configs[h])
            rid = plan_lib.run_id(ident)
            hp = self.hparams(g, t, h)
            div = int(out["diverged_round"][lt, ls, lh])
            ovf = int(out["overflow_round"][lt, ls, lh])
            if ovf >= 0:
                raise runner.SamplingOverflowError(
                    f"run {rid} (trial={t}, repetition={s}, {g.configs[h]}): a Poisson batch overflowed its buffer "
                    f"at round {ovf}; the Poisson privacy analysis does not apply. Nothing of this chunk was written."
                )
            if div >= 0 and self.cfg.on_nonfinite == "raise":
                raise runner.NonFiniteError(
                    f"run {rid} (trial={t}, repetition={s}, {g.configs[h]}, hparams {hp}) produced NaN/inf "
                    f"parameters at round {div} (0-based). Nothing of this chunk was written; set "
                    "on_nonfinite='mark' to record diverged runs instead."
                )
            row = {"run_id": rid, "group": g.index, "trial": t, "repetition": s}
            row.update({k: v for k, v in g.static.items()})
            row.update(self.entry.resolved_columns(alg))
            row.update({f"axis_{k}": v for k, v in g.configs[h].items()})
            row.update({f"{k}[{i}]": x for k, v in hp.items() if isinstance(v, tuple) for i, x in enumerate(v)})
            row.update({k: v for k, v in hp.items() if not isinstance(v, tuple)})
            if "epsilon" in g.configs[h]:
                row["epsilon"] = float(g.configs[h]["epsilon"])
                row["delta"] = self.delta(self.trial(t))
                row["accountant"] = self.cfg.privacy["accountant"]
            row["diverged_round"] = div
            for m, arr in out["evals"].items():
                row[m] = float(arr[lt, ls, lh, -1])
            runs.append(row)
            for e, r in enumerate(eval_rounds):
                er = {"run_id": rid, "eval_round": int(r)}
                er.update({m: float(arr[lt, ls, lh, e]) for m, arr in out["evals"].items()})
                evals.append(er)
        return pd.DataFrame(runs), pd.DataFrame(evals)


def _wait_for_leader(store: Store, timeout_s: float) -> None:
    """Blocks until ``store``'s config.json exists (written by process 0), or raises ValueError."""
    _validate.check_positive("wait_for_config", timeout_s)
    deadline = time.monotonic() + float(timeout_s)
    while not store.config_path.exists():
        if time.monotonic() > deadline:
            raise ValueError(
                f"wait_for_config={timeout_s}: process 0 has not written {store.config_path} in time; "
                "is it running with the same --out directory (on a shared file system)?"
            )
        time.sleep(0.1)


def run_sweep(
    cfg: SweepConfig,
    out_dir: str | os.PathLike,
    *,
    devices=None,
    source_text: str | None = None,
    progress: bool = True,
    process_index: int = 0,
    process_count: int = 1,
    max_chunks: int | None = None,
    sleep_between_chunks: float = 0.0,
    wait_for_config: float | None = None,
) -> SweepResult:
    """Runs (or resumes) a sweep into ``out_dir``.

    Finished chunks found in ``out_dir`` are skipped; the rest are computed
    ``len(devices)`` at a time (one per device, ``shard_map`` over the runs
    axis) and each is stored atomically as soon as it is done. With
    ``process_count = P`` this process only computes the chunks whose index
    is ``process_index`` mod P (several hosts sharing one directory).

    Args:
      cfg: the sweep.
      out_dir: the sweep directory (created if needed).
      devices: devices to shard the runs over (default: all local devices).
      source_text: the config file's text, kept verbatim in the directory.
      progress: show a progress bar (runs/s and ETA) on stderr.
      max_chunks: stop after computing this many chunks (resume later).
      sleep_between_chunks: pause after each stored chunk (seconds; for
        sharing a busy machine and for kill/resume tests).
      wait_for_config: with ``process_index > 0``, wait up to this many
        seconds for process 0 to write ``out_dir/config.json`` and adopt its
        (possibly automatic) tiling, so processes started together never
        race to different ``chunk_size`` choices (``--distributed`` sets it;
        ``None``: no wait).
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
    sw = _Sweep(cfg, devices)
    chunks = plan_lib.build_chunks(sw.groups, sw.chunk_size)
    if old is None and cfg.chunk_size is None:
        sw.fit_memory(chunks)
        chunks = plan_lib.build_chunks(sw.groups, sw.chunk_size)
    resolved = dataclasses.replace(cfg, chunk_size=sw.chunk_size, vmap_width=sw.vmap_width).to_dict()
    store.init(resolved, source_text, environment(devices), process_index)

    n_evals = len(runner.eval_schedule(cfg.num_rounds, cfg.eval_every))
    finished, committed = set(), store.finished_chunks()
    for c in chunks:
        if c.chunk_id in committed:
            why = store.verify(c.chunk_id, (c.num_runs, c.num_runs * n_evals))
            if why is None:
                finished.add(c.chunk_id)
            else:  # committed, then damaged (truncated, emptied, edited): say so, then recompute it
                print(f"sweep {cfg.name}: recomputing chunk {c.chunk_id}: {why}", file=sys.stderr, flush=True)
    todo = [c for c in chunks if c.chunk_id not in finished and c.index % process_count == process_index]
    skipped = sum(1 for c in chunks if c.chunk_id in finished)
    if max_chunks is not None:
        todo = todo[:max_chunks]
    eval_rounds = runner.eval_schedule(cfg.num_rounds, cfg.eval_every)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(c.num_runs for c in todo), unit="run", desc=f"sweep {cfg.name}", smoothing=0.1)
        bar.set_postfix_str(f"chunks 0/{len(todo)} ({skipped} done before)")
    computed = []
    D = len(devices)
    i = 0
    while i < len(todo):
        batch = [todo[i]]
        while len(batch) < D and i + len(batch) < len(todo) and todo[i + len(batch)].group == todo[i].group:
            batch.append(todo[i + len(batch)])
        i += len(batch)
        g = sw.groups[batch[0].group]
        shape = (len(batch[0].trial_idx), len(batch[0].rep_idx), len(batch[0].cfg_idx))
        ex = sw.executor(g, shape)
        outs = ex.run_chunks([sw.chunk_args(c) for c in batch])
        for c, out in zip(batch, outs):
            runs_df, evals_df = sw.rows(c, out, eval_rounds)
            try:
                store.write_chunk(c.chunk_id, runs_df, evals_df)
            except OSError as err:
                raise OSError(err.errno, f"could not store chunk {c.chunk_id} ({err.strerror}); the "
                              f"{skipped + len(computed)} chunk(s) stored before are intact: fix the disk and rerun "
                              f"the same command to resume") from err
            computed.append(c.chunk_id)
            if bar is not None:
                bar.update(c.num_runs)
                bar.set_postfix_str(f"chunks {len(computed)}/{len(todo)} ({skipped} done before)")
            if sleep_between_chunks:
                time.sleep(sleep_between_chunks)
    if bar is not None:
        bar.close()
    runs, evals = store.load()
    return SweepResult(runs, evals, computed, skipped, len(chunks), time.perf_counter() - start)
