"""Sweep configuration: a frozen dataclass and its TOML file form.

A sweep is one algorithm (plus its static fields), one data spec and a grid of axes. The TOML form mirrors the dataclass
one to one::

    name = "isrl-fig4-mbsgd-appendix-i"
    algorithm = "isrl-mbsgd"          # a key of dpjax.sweep.ALGORITHMS
    num_rounds = 35
    eval_every = 35                   # optional; default: only after the last round
    seed = 0                          # base seed of every run key
    on_nonfinite = "mark"             # "mark" (record diverged_round) or "raise"

    [static]                          # the algorithm's static (compile-time) fields
    batch_size = "isrl-experiment"    # or an int
    sampling = "with-replacement"
    available = 12                    # silos available per round ("all" = N)

    [data]
    name = "isrl-mnist"               # a key of dpjax.sweep.DATASETS
    n_per_digit = 774

    [privacy]                         # needed when the grid has an "epsilon" axis
    accountant = "paper-experiment"   # any dpjax.accounting accountant
    delta = "1/n^2"                   # or a number

    [grid]
    learning_rate = { logspace = [-6, 0, 10], base = "e" }
    epsilon = [0.75, 1.5, 3, 6, 12, 18]
    clip_norm = ["2*maxnorm"]         # numbers, or "<c>*maxnorm" (c times the largest ||x||)
    repetition = 3                    # an int n means range(n)
    trial = 20                        # data split i uses split seed data.split_seed + i

Size limits (checked arithmetically from the axis specs and data options, before anything is expanded, loaded or
allocated; neither is part of the sweep's identity, so raising one never invalidates a sweep directory)::

    max_runs = 100000                 # runs = the product of the grid's axis lengths (default 100,000)
    max_data_mb = 256                 # the data a [data] table describes, float32 (default 256 MiB)

``dpjax sweep --max-runs N --max-data-mb M`` override them.

One run's silos over several devices (``dpjax.engine.silo_sharding``; ``dpjax sweep --silo-devices N|all
--silo-compute MODE --silo-block B`` override the table)::

    [run]
    silo_devices = 8                  # or "all": the first 8 of jax.devices() (every process's with --distributed)
    silo_compute = "exact"            # "exact" (default), "per-silo" or "blocks" (with silo_block)
    silo_block = 4                    # silos a device computes at a time ("blocks")

Each chunk then runs on all the devices at once, its data's silo axis split over them (the number of silos a multiple
of the number of devices), instead of one chunk per device. ``silo_devices`` is a layout, not part of the sweep:
``"exact"`` and ``"blocks"`` store the same bits on any number of devices (``"blocks"``: the same bits as one device
with the same ``silo_block``), so a sweep resumes with another count. ``silo_block`` and ``silo_compute = "per-silo"``
(last-bit differences) change the program and are part of the sweep.

Grid axes are: ``trial`` (data split), ``repetition`` (run seed), the algorithm's per-run hyperparameters (e.g.
``learning_rate``, ``noise_std``, ``clip_norm``), ``epsilon`` (converted to ``noise_std`` per run by the accountant, so
it excludes a ``noise_std`` axis) and any static field of the algorithm (each distinct static combination is compiled
once). A scalar is a one-point axis. Every error names the offending key.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import pathlib
import re
import tomllib
from typing import Any

from dpjax import _validate

TOP_LEVEL_KEYS = ("name", "algorithm", "num_rounds", "eval_every", "seed", "on_nonfinite", "static", "data", "privacy",
                  "grid", "chunk_size", "vmap_width", "max_runs", "max_data_mb", "run")
#: Keys of the ``[run]`` table: how one run is laid out over devices (``dpjax.engine.silo_sharding``).
RUN_KEYS = ("silo_devices", "silo_compute", "silo_block")
SILO_COMPUTE = ("exact", "per-silo", "blocks")  # dpjax.engine.silo_sharding.SILO_COMPUTE (no jax imported here)
#: Largest grid a sweep builds without being told (``max_runs``): 14x the largest packaged config
#: (7,200 runs); a typo such as ``logspace = [-3, -1, 1000000000]`` is refused before any expansion.
DEFAULT_MAX_RUNS = 100_000
#: Largest dataset (float32 MiB) a ``[data]`` table may describe without being told (``max_data_mb``).
DEFAULT_MAX_DATA_MB = 256
#: Keys that limit a sweep without defining it (not in ``to_dict``, never compared on resume).
LIMIT_KEYS = ("max_runs", "max_data_mb")
PRIVACY_KEYS = ("accountant", "delta")
SPECIAL_AXES = ("trial", "repetition", "epsilon")
_MAXNORM = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*\*\s*maxnorm\s*$")


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _range_args(where: str, spec: dict) -> tuple[str, float, float, int]:
    """``(kind, start, stop, num)`` of a ``{logspace|linspace = [start, stop, num]}`` axis, validated."""
    kinds = [k for k in spec if k in ("logspace", "linspace")]
    unknown = [k for k in spec if k not in ("logspace", "linspace", "base")]
    if unknown:
        raise ValueError(f"{where}.{unknown[0]} is not a known key; use logspace/linspace (and base)")
    if len(kinds) != 1:
        raise ValueError(f"{where}={spec!r} must have exactly one of logspace or linspace")
    kind = kinds[0]
    args = spec[kind]
    if not (isinstance(args, list) and len(args) == 3 and all(_is_real(a) for a in args)):
        raise ValueError(f"{where}.{kind}={args!r} must be [start, stop, num]")
    for i, a in enumerate(args[:2]):
        if not math.isfinite(a):
            raise ValueError(f"{where}.{kind}[{i}]={a!r} must be finite")
    num = _validate.check_int(f"{where}.{kind}[2]", args[2], min_value=1)
    return kind, float(args[0]), float(args[1]), num


def axis_length(key: str, spec: Any) -> int:
    """Number of values of grid axis ``key`` -- from the spec alone, without expanding it."""
    if isinstance(spec, dict):
        return _range_args(f"grid.{key}", spec)[3]
    if key in ("trial", "repetition") and isinstance(spec, int) and not isinstance(spec, bool):
        return _validate.check_int(f"grid.{key}", spec, min_value=1)
    return len(spec) if isinstance(spec, (list, tuple)) else 1


def grid_size(grid: dict) -> tuple[int, str]:
    """``(runs, "a=3 x b=1000 x ...")``: the product of the axis lengths, computed exactly (no expansion)."""
    lengths = {k: axis_length(k, spec) for k, spec in grid.items()}
    return math.prod(lengths.values()), " x ".join(f"{k}={n:,}" for k, n in lengths.items())


def expand_axis(key: str, spec: Any) -> tuple:
    """One grid axis as a tuple of values. ``spec`` is a list, a scalar (a one-point axis), an int for ``trial`` and
    ``repetition`` (``range(n)``), or a table ``{logspace = [a, b, num], base = "e" | 10}`` / ``{linspace = [a, b,
    num]}``."""
    where = f"grid.{key}"
    if isinstance(spec, dict):
        kind, start, stop, num = _range_args(where, spec)
        args = spec[kind]
        pts = [start + (stop - start) * i / (num - 1) for i in range(num)] if num > 1 else [start]
        if kind == "linspace":
            if "base" in spec:
                raise ValueError(f"{where}.base is only meaningful with logspace")
            return tuple(pts)
        base = spec.get("base", 10)
        if base == "e":
            base = math.e
        if not _is_real(base) or not math.isfinite(base) or base <= 0 or base == 1:
            raise ValueError(f"{where}.base={spec.get('base')!r} must be 'e' or a positive number != 1")
        values = []
        for p in pts:
            try:
                value = float(base) ** p
            except OverflowError:
                value = math.inf
            if not math.isfinite(value) or (value == 0.0 and p != -math.inf):
                raise ValueError(f"{where}.logspace={args!r} reaches {spec.get('base', 10)}^{p:g}, outside float64 "
                                 "(about 1e-308 to 1.8e308): give exponents, e.g. logspace = [-3, 0, 4]")
            values.append(value)
        return tuple(values)
    if key in ("trial", "repetition") and isinstance(spec, int) and not isinstance(spec, bool):
        n = _validate.check_int(where, spec, min_value=1)
        return tuple(range(n))
    values = spec if isinstance(spec, list) else [spec]
    if len(values) == 0:
        raise ValueError(f"{where}=[] is an empty grid axis; give at least one value")
    for i, v in enumerate(values):
        if isinstance(v, (dict, list)):
            raise ValueError(f"{where}[{i}]={v!r} must be a scalar")
    if key in ("trial", "repetition"):
        for i, v in enumerate(values):
            _validate.check_int(f"{where}[{i}]", v, min_value=0)
    if len(set(map(repr, values))) != len(values):
        raise ValueError(f"{where}={values!r} repeats a value; every grid point must be distinct")
    return tuple(values)


#: Per-run hyperparameters that must be > 0 (the others, noise included, must be >= 0). All must be finite:
#: an infinite clip norm or step size is never a meaningful grid point (and would void the privacy accounting).
POSITIVE_HPARAMS = ("epsilon", "learning_rate", "clip_norm", "smoothness")


def check_hparam_value(where: str, key: str, value) -> None:
    """A grid value of hyperparameter ``key``: finite, > 0 or >= 0 by :data:`POSITIVE_HPARAMS`."""
    if key in POSITIVE_HPARAMS:
        _validate.check_positive(where, value)
    else:
        _validate.check_nonnegative(where, value)


def parse_maxnorm(value) -> float | None:
    """``"2*maxnorm"`` -> 2.0; ``None`` for anything else."""
    if isinstance(value, str):
        m = _MAXNORM.match(value)
        if m:
            return float(m.group(1))
    return None


def check_run_table(run) -> dict:
    """The ``[run]`` table, checked (a ``ValueError`` naming ``run.<key>`` and its value); ``silo_devices`` as an int
    or ``"all"`` (the device count is checked against the devices once jax has loaded)."""
    if not isinstance(run, dict):
        raise ValueError(f"run={run!r} must be a table (keys {RUN_KEYS})")
    for k in run:
        if k not in RUN_KEYS:
            raise ValueError(f"run.{k} is not a known key; known: {RUN_KEYS}")
    out = dict(run)
    if "silo_devices" in out:
        out["silo_devices"] = _validate.check_devices_spec("run.silo_devices", out["silo_devices"])
    if "silo_compute" in out:
        _validate.check_choice("run.silo_compute", out["silo_compute"], SILO_COMPUTE)
    if "silo_block" in out:
        out["silo_block"] = _validate.check_int("run.silo_block", out["silo_block"], min_value=1)
    compute = out.get("silo_compute", "exact")
    if (compute != "exact" or "silo_block" in out) and "silo_devices" not in out:
        what = "run.silo_block" if "silo_block" in out else f"run.silo_compute={compute!r}"
        raise ValueError(f"{what} needs run.silo_devices (the devices one run's silos are split over; 1 for one "
                         "device)")
    if compute == "blocks" and "silo_block" not in out:
        raise ValueError("run.silo_compute='blocks' needs run.silo_block (the silos a device computes at a time)")
    if compute == "per-silo" and "silo_block" in out:
        raise ValueError("run.silo_block with run.silo_compute='per-silo': use silo_compute = 'blocks'")
    return out


def run_identity(run: dict) -> dict:
    """The part of a ``[run]`` table that decides a sweep's bits: ``silo_block`` and a ``"per-silo"``
    ``silo_compute`` (``"exact"`` and ``"blocks"`` keep the unsharded bits on any number of devices)."""
    identity = {}
    if run.get("silo_block") is not None:
        identity["silo_block"] = run["silo_block"]
    if run.get("silo_compute") == "per-silo":
        identity["silo_compute"] = "per-silo"
    return identity


def _retired_algorithms() -> dict[str, str]:
    """``dpjax.engine.registry.RETIRED`` (retired name -> its replacement), read from its source (no jax)."""
    from dpjax.sweep import static_precheck

    return static_precheck.registry_literal("RETIRED", {})


def _precheck_grid(d: dict, max_runs, problems: list, check) -> None:
    """``precheck``'s grid part: the size before expansion, each axis, the numeric values it can judge alone."""
    grid = d.get("grid")
    if "grid" in d and (not isinstance(grid, dict) or not grid):
        problems.append("grid is empty; give at least one axis (e.g. learning_rate = [0.1])")
    elif isinstance(grid, dict):
        sized = check(grid_size, grid)
        own = d.get("max_runs")  # a refused limit (0, "many") is reported by precheck, not used to size the grid
        limit = max_runs if max_runs is not None else own if isinstance(own, int) and own >= 1 else None
        limit = DEFAULT_MAX_RUNS if limit is None else limit
        if sized is not None and sized[0] > limit:
            problems.append(_runs_over_limit(*sized, limit))
        elif sized is not None:
            for k, spec in grid.items():
                values = check(expand_axis, k, spec)
                if k not in POSITIVE_HPARAMS or values is None:
                    continue
                for i, val in enumerate(values):  # numbers only: "2*maxnorm" and the like need the family
                    if k == "epsilon" and not _is_real(val):
                        problems.append(f"grid.epsilon[{i}]={val!r} must be a number")
                    elif _is_real(val):
                        check(check_hparam_value, f"grid.{k}[{i}]", k, val)
        if "epsilon" in grid and not isinstance(d.get("privacy"), dict):
            problems.append("grid.epsilon needs a [privacy] table with accountant and delta")


def _raise(message: str):
    raise ValueError(message)


def _call(fn, *args, **kwargs):
    return fn(*args, **kwargs)


def _runs_over_limit(size: int, shape: str, limit: int) -> str:
    return (f"grid has {size:,} runs ({shape}), above max_runs={limit:,}; shrink the grid, or raise the limit with "
            "max_runs = N in the config (dpjax sweep --max-runs N) if you mean it")


#: ``dpjax.engine.program.MAX_EVALUATIONS`` (that module imports jax; tests/cli/test_cli_edges.py checks the two agree):
#: the most evaluation points a run stores.
MAX_EVALUATIONS = 10**6


def _check_fields(d: dict, fail, check) -> None:
    """The checks of the plain fields shared by ``precheck`` (``fail``/``check`` collect every problem) and
    ``SweepConfig`` (they raise the first): name, rounds, seed, sizes, the data and static tables."""
    if "name" in d and not (isinstance(d["name"], str) and d["name"]):
        fail(f"name={d['name']!r} must be a non-empty string")
    rounds = check(_validate.check_rounds, "num_rounds", d["num_rounds"]) if "num_rounds" in d else None
    if d.get("eval_every") is not None:
        every = check(_validate.check_int, "eval_every", d["eval_every"], min_value=1, max_value=rounds)
        count = None if rounds is None or every is None else -(-rounds // every)
        if count is not None and count > MAX_EVALUATIONS:  # engine.program.eval_schedule's limit, before jax
            fail(f"eval_every={every} over num_rounds={rounds} gives {count} evaluations; at most {MAX_EVALUATIONS} "
                 f"are stored (choose eval_every >= {-(-rounds // MAX_EVALUATIONS)})")
    if "seed" in d:
        check(_validate.check_seed, "seed", d["seed"])
    if "on_nonfinite" in d:
        check(_validate.check_choice, "on_nonfinite", d["on_nonfinite"], ("mark", "raise"))
    for k in ("chunk_size", "vmap_width", "max_runs"):
        if d.get(k) is not None:
            check(_validate.check_int, k, d[k], min_value=1)
    if d.get("max_data_mb") is not None:
        check(_validate.check_positive, "max_data_mb", d["max_data_mb"])
    if "data" in d and not (isinstance(d["data"], dict) and "name" in d["data"]):
        fail(f"data={d['data']!r} must be a table with a 'name' key")
    if "static" in d and not isinstance(d["static"], dict):
        fail(f"static={d['static']!r} must be a table")


def _check_privacy(privacy, fail, check) -> None:
    """The [privacy] table: keys, the accountant's name, delta (``fail``/``check`` as in ``_check_fields``)."""
    if privacy is not None:
        if not isinstance(privacy, dict):
            fail(f"privacy={privacy!r} must be a table")
        else:
            for k in privacy:
                if k not in PRIVACY_KEYS:
                    fail(f"privacy.{k} is not a known key; known: {PRIVACY_KEYS}")
            if "accountant" not in privacy or "delta" not in privacy:
                fail("privacy must set both accountant and delta")
            if "accountant" in privacy:
                from dpjax.accounting import api  # pure Python
                from dpjax.accounting.batch_clipping import BATCH_CLIPPING_ACCOUNTANTS  # DP-SGD-General's reports

                check(_validate.check_choice, "privacy.accountant", privacy["accountant"],
                      api.ACCOUNTANTS + BATCH_CLIPPING_ACCOUNTANTS)
            if privacy.get("delta", "1/n^2") != "1/n^2":
                check(_validate.check_open_unit, "privacy.delta", privacy["delta"])


def precheck(d: Any, *, max_runs: int | None = None) -> None:
    """Every check of a raw config table that needs no jax, ALL problems in one ``ValueError`` (``"; "``-joined).

    ``dpjax sweep`` runs it before jax and the families load (tens of seconds on a loaded machine), so a typo costs a
    fraction of a second and every typo is named at once. ``SweepConfig`` repeats these checks and adds the ones that
    need the family (its static and per-run fields) and the dataset. ``max_runs``: the command line's limit.
    """
    if not isinstance(d, dict):
        raise ValueError(f"config={d!r} must be a table")
    problems: list[str] = []

    def check(fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ValueError as err:
            problems.append(str(err))
            return None

    for k in d:
        if k not in TOP_LEVEL_KEYS:
            problems.append(f"{k} is not a known config key; known: {TOP_LEVEL_KEYS}")
    for k in ("algorithm", "num_rounds", "data", "grid"):
        if k not in d:
            problems.append(f"{k} is missing from the config")
    from dpjax.sweep import static_precheck  # pure Python: families are read from their source, no jax

    if "algorithm" in d:
        from dpjax import algorithms  # the package module only: families are read from their source, no jax

        declared, name = algorithms.declared_families(), d["algorithm"]
        retired = _retired_algorithms()
        if isinstance(name, str) and name in retired:
            problems.append(retired[name])
        elif declared is not None and name not in declared:
            problems.append(f"algorithm={name!r} is unknown; known: {tuple(sorted(declared))} "
                            "(`dpjax sweep --algorithms` describes them)")
    _check_fields(d, problems.append, check)
    static_precheck.check_static(d, problems)
    if "run" in d:
        check(check_run_table, d["run"])
    if max_runs is not None and check(_validate.check_int, "max_runs", max_runs, min_value=1) is None:
        max_runs = None  # the command line's limit is refused above; size the grid against the config's own
    _precheck_grid(d, max_runs, problems, check)
    _check_privacy(d.get("privacy"), problems.append, check)
    if problems:
        raise ValueError(f"{len(problems)} problem(s) in the config: " + "; ".join(problems)
                         if len(problems) > 1 else problems[0])


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """A resolved sweep configuration (see the module docstring for the fields). ``grid`` maps each axis to a tuple of
    values (already expanded); ``chunk_size`` (runs per stored chunk) and ``vmap_width`` (runs computed simultaneously
    inside a chunk) are chosen automatically when ``None``."""


    algorithm: str
    num_rounds: int
    data: dict
    grid: dict
    static: dict = dataclasses.field(default_factory=dict)
    privacy: dict | None = None
    eval_every: int | None = None
    seed: int = 0
    on_nonfinite: str = "mark"
    name: str = "sweep"
    chunk_size: int | None = None
    vmap_width: int | None = None
    max_runs: int | None = None  # None: DEFAULT_MAX_RUNS (a limit, not part of the sweep: see LIMIT_KEYS)
    max_data_mb: float | None = None  # None: DEFAULT_MAX_DATA_MB
    run: dict = dataclasses.field(default_factory=dict)  # [run]: RUN_KEYS (see the module docstring)

    def __post_init__(self):
        object.__setattr__(self, "run", check_run_table(self.run))
        from dpjax import algorithms  # late: the families import jax
        from dpjax.engine import registry
        from dpjax.sweep import datasets
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name={self.name!r} must be a non-empty string")
        entry = algorithms.algorithm_entry(self.algorithm)
        _check_fields({f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, _raise, _call)
        dataset = datasets.get_dataset(self.data["name"])
        dataset.check_options(self.data)
        dataset.check_size(dataset.resolve(self.data),
                           DEFAULT_MAX_DATA_MB if self.max_data_mb is None else self.max_data_mb)
        for k in self.static:
            if k not in entry.static_fields:
                raise ValueError(f"static.{k} is not a static field of algorithm {self.algorithm!r}; "
                                 f"known: {entry.static_fields}")
        if not isinstance(self.grid, dict) or not self.grid:
            raise ValueError("grid is empty; give at least one axis (e.g. learning_rate = [0.1])")
        # the size before any axis is expanded: a huge axis must not be built to be refused
        size, shape = grid_size(self.grid)
        limit = DEFAULT_MAX_RUNS if self.max_runs is None else self.max_runs
        if size > limit:
            raise ValueError(_runs_over_limit(size, shape, limit))
        grid = {}
        for k, spec in self.grid.items():
            if k not in SPECIAL_AXES and k not in entry.hparam_fields and k not in entry.static_fields:
                raise ValueError(f"grid.{k} is not a known axis of algorithm {self.algorithm!r}; known: "
                                 f"{SPECIAL_AXES + entry.hparam_fields + entry.static_fields}")
            if k in self.static:
                raise ValueError(f"grid.{k} is also set in static.{k}; set it in one place")
            values = spec if isinstance(spec, tuple) else expand_axis(k, spec)
            if k in entry.hparam_fields or k == "epsilon":
                for i, v in enumerate(values):
                    if k in entry.clip_axes and parse_maxnorm(v) is not None:
                        _validate.check_positive(f"grid.{k}[{i}] (the factor of maxnorm)", parse_maxnorm(v))
                        continue
                    if not _is_real(v):
                        raise ValueError(f"grid.{k}[{i}]={v!r} must be a number")
                    check_hparam_value(f"grid.{k}[{i}]", k, v)
            grid[k] = values
        object.__setattr__(self, "grid", grid)
        for k in entry.required_hparams:
            if k not in grid and not (k in entry.calibrated_fields and "epsilon" in grid):
                raise ValueError(f"grid.{k} is missing; algorithm {self.algorithm!r} needs it")
        if "epsilon" in grid:
            if not entry.private:
                private = [n for n, e in sorted(registry.ALGORITHMS.items()) if e.private]
                raise ValueError(f"grid.epsilon: algorithm {self.algorithm!r} is non-private (nothing to calibrate); "
                                 f"private algorithms: {tuple(private)}")
            for k in entry.calibrated_fields:
                if k in grid:
                    raise ValueError(f"grid.epsilon and grid.{k} are exclusive (epsilon sets {k})")
            if not isinstance(self.privacy, dict):
                raise ValueError("grid.epsilon needs a [privacy] table with accountant and delta")
        _check_privacy(self.privacy, _raise, _call)
        entry.check_static(self.static, self.grid, self.num_rounds)

    # -- file forms ----------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict) -> "SweepConfig":
        if not isinstance(d, dict):
            raise ValueError(f"config={d!r} must be a table")
        for k in d:
            if k not in TOP_LEVEL_KEYS:
                raise ValueError(f"{k} is not a known config key; known: {TOP_LEVEL_KEYS}")
        for k in ("algorithm", "num_rounds", "data", "grid"):
            if k not in d:
                raise ValueError(f"{k} is missing from the config")
        return cls(**d)

    @classmethod
    def from_toml(cls, path: str | pathlib.Path, **limits) -> "SweepConfig":
        """The config in TOML file ``path``; ``limits`` (``max_runs``, ``max_data_mb``) override the file's."""
        d = cls.read_toml(path)
        d.update({k: v for k, v in limits.items() if v is not None})
        return cls.from_dict(d)

    @staticmethod
    def read_toml(path: str | pathlib.Path) -> dict:
        """The raw table of a TOML config file; a ``ValueError`` naming the file when it is not one."""
        path = pathlib.Path(path)
        if not path.is_file():
            raise ValueError(f"config={str(path)!r} does not exist" + (" (it is a directory)" if path.is_dir() else ""))
        try:
            return tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"config={str(path)!r} is not valid TOML: {err}") from None
        except UnicodeDecodeError as err:
            raise ValueError(f"config={str(path)!r} is not a TOML text file (not UTF-8: byte "
                             f"{err.object[err.start]:#04x} at offset {err.start})") from None

    def to_dict(self) -> dict:
        """JSON-able resolved form (grid axes as lists); ``from_dict`` round-trips it. The limits (``max_runs``,
        ``max_data_mb``) are not part of a sweep and are left out."""
        d = dataclasses.asdict(self)
        for k in LIMIT_KEYS:
            d.pop(k)
        identity = run_identity(self.run)
        if identity:
            d["run"] = identity
        else:  # no [run] table, or a layout that keeps the bits: a directory of the unsharded sweep
            d.pop("run")
        d["grid"] = {k: list(v) for k, v in self.grid.items()}
        return d

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
