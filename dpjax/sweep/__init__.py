"""Hyperparameter sweeps as single compiled programs, with a resumable results store.

* ``SweepConfig`` (dataclass / TOML file) -> groups of runs (one compile per
  static shape) -> fixed-shape chunks (``dpjax.sweep.plan``);
* each chunk is one XLA program: trials x repetitions x configs, rounds in
  ``lax.scan``, silos vmapped inside, sharded over devices with ``shard_map``,
  run by the engine's one executor (``dpjax.engine.executor``, which also
  serves ``dpjax.engine.run_grid``, the paper drivers' grid executor);
  ``dpjax.sweep.table``: a table of run specs through ``run_grid``, one row per run;
* results go to an append-only, atomically written sweep directory keyed by
  run-config hashes, the executor's resumable store; a killed sweep resumes
  where it stopped (``dpjax.sweep.store``, ``dpjax.sweep.driver``);
* paper protocols: step-size selection, its grid extension at the ends and
  percentile error bars (``dpjax.sweep.select``) and ``dpjax plot`` (``dpjax.sweep.plot``).
"""

from dpjax.sweep.config import SweepConfig
from dpjax.sweep.driver import SweepResult, run_sweep
from dpjax.engine.registry import ALGORITHMS, AlgorithmEntry, register_algorithm
from dpjax.sweep.datasets import DATASETS, DatasetEntry, register_dataset
from dpjax.sweep.store import load_results
from dpjax.algorithms import load_families

__all__ = [
    "SweepConfig", "SweepResult", "run_sweep", "load_results", "ALGORITHMS", "DATASETS",
    "AlgorithmEntry", "DatasetEntry", "register_algorithm", "register_dataset",
]

load_families()  # every dpjax.algorithms module registers its families
