"""From a ``SweepConfig`` to groups of runs and fixed-shape chunks.

* A **group** is one combination of the algorithm's static fields: one compiled program serves every run of the group.
* Inside a group the runs form a 3-d grid ``trial x repetition x config`` (``config`` = one point of the per-run
  hyperparameter axes, e.g. ``learning_rate x epsilon``), ordered lexicographically.
* A **chunk** is a ``Tc x Sc x Hc`` tile of that grid: the unit of compiled execution and of storage. Every chunk of a
  group has the same shape (edge tiles are padded by repeating their last valid index and the padded lanes are
  discarded), so the group compiles once. The tiling depends only on the config and ``chunk_size``, so an interrupted
  sweep recomputes exactly the same chunks with exactly the same lanes when it resumes (bit-identical).

Every run has an id: the first 16 hex digits of the SHA-256 of the canonical JSON of everything that defines it
(algorithm, resolved static fields, data spec, privacy specification, rounds, seed, trial, repetition, axis values).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math

from dpjax import algorithms
from dpjax.engine import registry
from dpjax.sweep import datasets
from dpjax.sweep.config import SweepConfig


@dataclasses.dataclass(frozen=True)
class Group:
    index: int
    static: dict  # this group's static field values (config static + static grid axes)
    trials: tuple
    repetitions: tuple
    configs: tuple  # tuple of dicts: per-run hyperparameter axis values (incl. epsilon)


@dataclasses.dataclass(frozen=True)
class Chunk:
    group: int
    index: int  # global, 0..num_chunks-1 (in plan order)
    trial_idx: tuple  # indices into group.trials, length Tc (padded)
    rep_idx: tuple
    cfg_idx: tuple
    valid: tuple  # (nt, ns, nh): number of real entries along each axis

    @property
    def chunk_id(self) -> str:
        return f"g{self.group:03d}-c{self.index:06d}"

    @property
    def num_runs(self) -> int:
        return self.valid[0] * self.valid[1] * self.valid[2]

    def lanes(self):
        """(t, s, h) lane indices of the real (non-padded) runs, in run order."""
        return itertools.product(range(self.valid[0]), range(self.valid[1]), range(self.valid[2]))


def canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def run_id(identity: dict) -> str:
    return hashlib.sha256(canonical(identity).encode()).hexdigest()[:16]


def build_groups(cfg: SweepConfig) -> list[Group]:
    entry = algorithms.algorithm_entry(cfg.algorithm)
    static_axes = [k for k in cfg.grid if k in entry.static_fields]
    cfg_axes = [k for k in cfg.grid if k in entry.hparam_fields or k == "epsilon"]
    trials = cfg.grid.get("trial", (0,))
    reps = cfg.grid.get("repetition", (0,))
    configs = tuple(dict(zip(cfg_axes, vals)) for vals in itertools.product(*(cfg.grid[k] for k in cfg_axes)))
    groups = []
    for i, vals in enumerate(itertools.product(*(cfg.grid[k] for k in static_axes))):
        static = dict(cfg.static)
        static.update(dict(zip(static_axes, vals)))
        groups.append(Group(i, static, tuple(trials), tuple(reps), configs))
    return groups


def identity(cfg: SweepConfig, group: Group, trial, rep, config: dict) -> dict:
    """Everything that defines one run (hashed into its id)."""
    return {"algorithm": cfg.algorithm, "num_rounds": cfg.num_rounds, "eval_every": cfg.eval_every, "seed": cfg.seed,
            "data": datasets.get_dataset(cfg.data["name"]).resolve(cfg.data), "privacy": cfg.privacy,
            "static": group.static, "trial": trial, "repetition": rep, "config": config}


def tile_shape(num_t: int, num_s: int, num_h: int, chunk_size: int) -> tuple[int, int, int]:
    """Tile ``(Tc, Sc, Hc)`` with ``Tc*Sc*Hc <= max(chunk_size, 1)``, filling inner axes first."""
    hc = min(num_h, chunk_size)
    sc = min(num_s, max(1, chunk_size // hc))
    tc = min(num_t, max(1, chunk_size // (hc * sc)))
    return tc, sc, hc


def default_chunk_size(groups: list[Group]) -> int:
    """One trial's repetitions x configs (the common unit of the papers' protocols), capped at 4096 runs."""
    g = groups[0]
    return int(min(4096, len(g.repetitions) * len(g.configs)))


def build_chunks(groups: list[Group], chunk_size: int) -> list[Chunk]:
    chunks = []
    for g in groups:
        T, S, H = len(g.trials), len(g.repetitions), len(g.configs)
        tc, sc, hc = tile_shape(T, S, H, chunk_size)
        for t0 in range(0, T, tc):
            for s0 in range(0, S, sc):
                for h0 in range(0, H, hc):
                    nt, ns, nh = min(tc, T - t0), min(sc, S - s0), min(hc, H - h0)
                    pad = lambda start, n, size: tuple(start + min(i, n - 1) for i in range(size))
                    chunks.append(Chunk(g.index, len(chunks), pad(t0, nt, tc), pad(s0, ns, sc), pad(h0, nh, hc),
                                        (nt, ns, nh)))
    return chunks


def num_runs(groups: list[Group]) -> int:
    return sum(len(g.trials) * len(g.repetitions) * len(g.configs) for g in groups)


def describe(groups: list[Group], chunks: list[Chunk]) -> str:
    shape = {}
    for c in chunks:
        shape.setdefault(c.group, (len(c.trial_idx), len(c.rep_idx), len(c.cfg_idx)))
    parts = [f"{len(groups)} group(s) x {sum(math.prod((len(g.trials), len(g.repetitions), len(g.configs))) for g in groups)} runs"]
    parts.append(f"{len(chunks)} chunks of shape (trials, reps, configs) = {sorted(set(shape.values()))}")
    return "; ".join(parts)
