"""Hyperparameter sweeps as single compiled programs, with a resumable results store.

* ``SweepConfig`` (dataclass / TOML file) -> groups of runs (one compile per static shape) -> fixed-shape chunks
  (``dpjax.sweep.plan``);
* each chunk is one XLA program: trials x repetitions x configs, rounds in ``lax.scan``, silos vmapped inside, sharded
  over devices with ``shard_map``, run by the engine's one executor (``dpjax.engine.executor``, which also serves
  ``dpjax.engine.run_grid``, the paper drivers' grid executor); ``dpjax.sweep.table``: a table of run specs through
  ``run_grid``, one row per run;
* results go to an append-only, atomically written sweep directory keyed by run-config hashes, the executor's resumable
  store; a killed sweep resumes where it stopped (``dpjax.sweep.store``, ``dpjax.sweep.driver``);
* paper protocols: step-size selection, its grid extension at the ends and percentile error bars
  (``dpjax.sweep.select``) and ``dpjax plot`` (``dpjax.sweep.plot``).
"""

from __future__ import annotations

import importlib

# Imported on first use (PEP 562), so `dpjax sweep --list` and `dpjax --help` start without jax.
_EXPORTS = {"SweepConfig": "dpjax.sweep.config", "SweepResult": "dpjax.sweep.driver", "run_sweep": "dpjax.sweep.driver",
            "load_results": "dpjax.sweep.store", "ALGORITHMS": "dpjax.engine.registry",
            "DATASETS": "dpjax.sweep.datasets", "AlgorithmEntry": "dpjax.engine.registry",
            "DatasetEntry": "dpjax.sweep.datasets", "register_algorithm": "dpjax.engine.registry",
            "register_dataset": "dpjax.sweep.datasets"}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dpjax.sweep' has no attribute {name!r}")
    module = importlib.import_module(_EXPORTS[name])
    importlib.import_module("dpjax.algorithms").load_families()  # every family module registers itself
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
