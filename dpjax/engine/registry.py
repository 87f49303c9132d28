"""The family registry: what a sweep config (or any driver) can name as an algorithm.

It lives in the engine, below the algorithms: a family module registers itself
here, and the sweep (above both) reads it, so no import goes in a circle.

Algorithms are *derived* from the family classes, never restated: a family
registers itself next to its class, with its one-line description and its
non-private twin's (``register_family("isrl-mbsgd", NoisyMbSgd, "ISRL-DP
Noisy MB-SGD ...", twin={"mbsgd": "non-private MB-SGD, the twin of
isrl-mbsgd"})`` at the end of its module; every module of ``dpjax.algorithms``
is imported, so a new family is one module plus that line;
``dpjax.algorithms.load_families()`` imports them all). ``ALGORITHMS`` is the
one registry: ``dpjax.list_algorithms()``, ``dpjax sweep --algorithms`` and the
documentation show each entry's ``description``. A twin names the algorithm it
is: the private family's name without its privacy marker (``dp-sgd`` ->
``sgd``, ``isrl-mbsgd`` -> ``mbsgd``); retired names (``RETIRED``) are refused
with the new name. Its ``AlgorithmEntry`` reads

* static fields (compile-time; one program per combination) from the family dataclass (``contract.static_fields``), with
  their defaults; the twin name fixes ``private=False``; ``availability`` is an int M, ``"all"`` or a pmf list;
* per-run fields (vmapped inside one program) from ``hparams_type`` (``contract.hparam_fields``): scalar fields are grid
  axes; a nested field whose type declares ``SWEEP_AXES``/``from_sweep`` is built from those axes (the accelerated
  families' AC-SA schedule from ``smoothness``, ``strong_convexity``, ``regularization``); other nested dataclasses are
  dotted axes (``pvec.granularity``);
* validation by instantiation: ``cls(...)`` for static values and the family's ``hparams_from_values``
  (``hparams_type.create``) for per-run values, the error naming ``static.<k>`` or ``grid.<k>[i]``.

Rules shared by all families: ``"isrl-experiment"`` for a size field (``batch_size``, ``local_steps``) resolves K =
ceil(n sqrt(eps_max) / (2 sqrt R)) from the grid's largest epsilon (ISRL-DP Appendix I); a clip axis may be
``"<c>*maxnorm"`` (c times the trial's largest feature norm); an ``epsilon`` axis sets the calibrated fields through
``algorithm.privacy(silo_sizes, unit_hparams).calibrate(eps, delta, accountant)`` (``AlgorithmEntry.calibrate``).
"""

from __future__ import annotations

import dataclasses
import functools
import typing

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.engine.contract import hparam_fields, static_fields


# ----------------------------------------------------------------------------- Build context
@dataclasses.dataclass(frozen=True)
class BuildContext:
    """Public facts the static fields may depend on (e.g. the ISRL K rule)."""

    num_silos: int
    min_size: int
    epsilon_max: float | None
    num_rounds: int


# ------------------------------------------------------------- Algorithms: entries derived from the family dataclasses
ISRL_EXPERIMENT = "isrl-experiment"  # K = ceil(n sqrt(eps_max) / (2 sqrt R)) (ISRL-DP Appendix I)
SIZE_RULE_FIELDS = ("batch_size", "local_steps")  # int fields that accept ISRL_EXPERIMENT
# Static fields that every other field's one-at-a-time check carries: Poisson's public rate belongs to
# its sampling scheme and relation (a family refuses Poisson under add/remove without one, and a rate
# for a fixed-size scheme), so none is checked without the others; the noise kind likewise (DP-SGD's
# bands and band_coeffs need noise="band-mf", so checked without it they would be refused for the wrong reason).
CARRIED_STATIC = ("sampling", "neighboring", "sampling_rate", "noise")
_NOT_CONFIGURABLE = ("problem", "num_rounds", "log_indices")


def _placeholder_problem():
    """A real, tiny problem used to construct (and so validate) a family at config time."""
    from dpjax.problems.glm import LinearRegression

    return LinearRegression(1)


def _availability(value, num_silos: int | None = None):
    """``"all"`` (or N) -> every silo; an int M -> M random silos a round; a list -> ``RandomAvailability(pmf)``."""
    from dpjax.primitives.sampling import FixedAvailability, FullAvailability, RandomAvailability

    if value == "all" or (num_silos is not None and value == num_silos):
        return FullAvailability()
    if isinstance(value, (list, tuple)):
        return RandomAvailability(tuple(float(p) for p in value))
    _validate.check_int("availability", value, min_value=1)
    return FixedAvailability(int(value))


def _resolve_size(value, ctx: BuildContext | None) -> int:
    if value == ISRL_EXPERIMENT:
        from dpjax.accounting import isrl as isrl_acc

        if ctx is None or ctx.epsilon_max is None:
            return 1  # config-time check: the rule itself is checked against the grid
        # K does not depend on L or delta.
        return isrl_acc.isrl_experiment_calibration(1.0, ctx.min_size, ctx.num_rounds, ctx.epsilon_max, 0.5)[1]
    return value


def _is_dataclass_type(t) -> bool:
    return isinstance(t, type) and dataclasses.is_dataclass(t)


@dataclasses.dataclass(frozen=True)
class AlgorithmEntry:
    """How the sweep builds and drives one algorithm family, derived from its classes.

    Static fields are the family dataclass's fields (``contract.static_fields``; ``fixed`` values are set by the name,
    e.g. ``{"private": False}`` for a non-private twin) and per-run fields are those of its ``hparams_type``
    (``contract.hparam_fields``): scalar fields are grid axes, a nested field whose type declares ``SWEEP_AXES`` /
    ``from_sweep`` (the AC-SA schedule) is built from those axes, any other nested dataclass (P_vec parameters) is
    addressed by dotted names (``pvec.granularity``). Defaults are the dataclass defaults; validation is constructing
    the objects (``cls(...)``, ``hparams_type.create(...)``); the twin's axes exclude the family's ``noise_fields`` and
    ``clip_fields``."""

    name: str
    cls: type
    fixed: tuple = ()  # ((field, value), ...) set by the name
    noise_fields: tuple | None = None  # overrides of the class's (e.g. DIFF2's multipliers)
    clip_fields: tuple | None = None
    description: str = ""  # one line: what list_algorithms(), the CLI and the docs show (set by register_family)

    # -- derived facts -----------------------------------------------------
    @property
    def fixed_values(self) -> dict:
        return dict(self.fixed)

    @property
    def private(self) -> bool:
        return self.fixed_values.get("private", True) is not False

    @property
    def noise(self) -> tuple:
        return tuple(self.noise_fields if self.noise_fields is not None else self.cls.noise_fields)

    @property
    def clips(self) -> tuple:
        return tuple(self.clip_fields if self.clip_fields is not None else self.cls.clip_fields)

    @functools.cached_property
    def _fields(self) -> dict:
        return {k: f for k, f in static_fields(self.cls).items()
                if k not in _NOT_CONFIGURABLE and k not in self.fixed_values}

    @property
    def static_fields(self) -> tuple[str, ...]:
        return tuple(self._fields)

    @property
    def required_static(self) -> tuple[str, ...]:
        return tuple(k for k, f in self._fields.items()
                     if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)

    @functools.cached_property
    def _hparam_layout(self) -> dict:
        """axis -> (kind, owner field, default): kind 'scalar', 'sweep' (nested with
        from_sweep) or 'sub' (nested dataclass field)."""
        hints = typing.get_type_hints(self.cls.hparams_type)
        out = {}
        declared = getattr(self.cls.hparams_type, "SWEEP_AXES", None)
        if declared is not None:  # the hparams type builds its whole (per-round) schedule from these axes
            for axis, default in declared.items():
                owner = axis.split(".")[0]
                if self.private or owner not in self.noise + self.clips:
                    out[axis] = ("sub" if "." in axis else "scalar", owner, default)
            return out
        for name, f in hparam_fields(self.cls.hparams_type).items():
            if not self.private and name in self.noise + self.clips:
                continue
            t = hints.get(name)
            if hasattr(t, "SWEEP_AXES"):
                for axis, default in t.SWEEP_AXES.items():
                    out[axis] = ("sweep", name, default)
            elif _is_dataclass_type(t):
                for sub in dataclasses.fields(t):
                    out[f"{name}.{sub.name}"] = ("sub", name, dataclasses.MISSING)
            else:
                out[name] = ("scalar", name, f.default)
        return out

    @property
    def hparam_fields(self) -> tuple[str, ...]:
        return tuple(self._hparam_layout)

    @property
    def hparam_defaults(self) -> dict:
        return {k: d for k, (_, _, d) in self._hparam_layout.items() if d is not dataclasses.MISSING}

    @property
    def calibrated_fields(self) -> tuple[str, ...]:
        """Axes an ``epsilon`` axis sets (the noise fields, or the nested fields calibration returns)."""
        return tuple(k for k, (kind, owner, _) in self._hparam_layout.items()
                     if owner in self.noise or (kind == "sub" and self.private))

    @property
    def required_hparams(self) -> tuple[str, ...]:
        return tuple(k for k, (_, _, d) in self._hparam_layout.items() if d is dataclasses.MISSING)

    @property
    def clip_axes(self) -> tuple[str, ...]:
        return tuple(k for k in self.hparam_fields if k in self.clips)

    # -- building ------------------------------------------------------------
    def build(self, problem, num_rounds: int, static: dict, ctx: BuildContext | None = None):
        """The family object; constructing it validates every static field."""
        kw = dict(static)
        for k in SIZE_RULE_FIELDS:
            if k in kw:
                kw[k] = _resolve_size(kw[k], ctx)
        if "availability" in kw:
            kw["availability"] = _availability(kw["availability"], ctx.num_silos if ctx else None)
        for k, f in self._fields.items():
            if k in kw and isinstance(kw[k], list):
                kw[k] = tuple(kw[k])
        return self.cls(problem=problem, num_rounds=num_rounds, **kw, **self.fixed_values)

    def _lane(self, values: dict, num_rounds) -> dict:
        """One run's hparams constructor arguments from its axis values."""
        if any(v == "sweep" for v, _, _ in self._hparam_layout.values()) and num_rounds is None:
            raise ValueError(f"make_hparams(algorithm=None): algorithm {self.name!r} builds a per-round schedule "
                             "and needs the built algorithm (its num_rounds)")
        kwargs, hints = {}, typing.get_type_hints(self.cls.hparams_type)
        for axis, (kind, owner, default) in self._hparam_layout.items():
            if kind == "scalar":
                v = values.get(axis, default)
                if v is dataclasses.MISSING:
                    raise ValueError(f"grid.{axis} is missing; algorithm {self.name!r} needs it")
                kwargs[owner] = int(v) if isinstance(default, int) and not isinstance(default, bool) else v
            elif owner not in kwargs:
                t = hints[owner]
                if kind == "sweep":
                    kwargs[owner] = t.from_sweep(values, num_rounds)
                else:
                    sub = {}
                    for f in dataclasses.fields(t):
                        axis = f"{owner}.{f.name}"
                        sub[f.name] = values.get(axis, self._hparam_layout[axis][2])
                        if sub[f.name] is dataclasses.MISSING:
                            raise ValueError(f"grid.{axis} is missing; algorithm {self.name!r} needs it")
                    kwargs[owner] = t.create(**sub)
        return kwargs

    def make_hparams(self, values, algorithm=None):
        """The family's hparams: ``values`` is one run's dict (axis -> number) or a nested list of such dicts (a batch
        of runs; leaves get the list's leading axes). Each run's hparams are built by the family's validated constructor
        (``algorithm.hparams_from_values`` or ``hparams_type.create``)."""
        num_rounds = getattr(algorithm, "num_rounds", None)
        make = algorithm.hparams_from_values if algorithm is not None else self.cls.hparams_type.create
        if isinstance(values, dict):
            return make(**self._lane(values, num_rounds))
        arr = np.empty(len(values), dtype=object)
        arr[:] = [self.make_hparams(v, algorithm) for v in values]
        return jax.tree_util.tree_map(lambda *xs: jnp.asarray(np.stack([np.asarray(x) for x in xs])), *arr)

    def calibrate(self, algorithm, silo_sizes, values: dict, epsilon: float, delta: float, accountant: str,
                  cache: dict | None = None) -> dict:
        """The axis values an ``epsilon`` point sets:
        ``algorithm.privacy(silo_sizes, unit).calibrate(epsilon, delta, accountant)`` at unit noise, rounded up to
        float32. Every family's Gaussian noise is a ``noise_multiplier`` (std ÷ the clipper's sensitivity), so the
        result does not scale with this run's clip norm; nested results (P_vec parameters) become their dotted axes."""
        unit = dict(values)
        unit.update({k: 1.0 for k in self.noise if k in self._hparam_layout})
        spec = algorithm.privacy(silo_sizes, self.make_hparams(unit, algorithm))
        try:
            key = (spec, epsilon, delta, accountant)
            hash(key)
        except TypeError:
            key = None
        if cache is not None and key is not None and key in cache:
            out = cache[key]
        else:
            out = spec.calibrate(epsilon, delta, accountant)
            if cache is not None and key is not None:
                cache[key] = out

        def rounded_up(sigma: float) -> float:
            sigma = float(sigma)
            s32 = np.float32(sigma)
            if float(s32) < sigma:  # round the noise up, never down
                s32 = np.nextafter(s32, np.float32(np.inf))
            return float(s32)

        result = {}
        for k, v in out.items():
            if dataclasses.is_dataclass(v):  # per-round parameters (one per round) become tuples
                result.update({f"{k}.{f.name}": _item_or_tuple(getattr(v, f.name)) for f in dataclasses.fields(v)})
            elif np.ndim(v) == 1:
                result[k] = tuple(rounded_up(x) for x in v)
            else:
                result[k] = rounded_up(v)
        return result

    def resolved_columns(self, algorithm) -> dict:
        """The values the size rules resolved to (``batch_size_resolved``, ...)."""
        return {f"{k}_resolved": getattr(algorithm, k) for k in SIZE_RULE_FIELDS if k in self._fields}

    # -- config-time validation -------------------------------------------------
    def check_static(self, static: dict, grid: dict, num_rounds: int = 1) -> None:
        """Validates every static value and every per-run axis value by constructing
        the objects, naming the key (``static.k`` / ``grid.k[i]``)."""
        merged = {k: (v,) for k, v in static.items()}
        merged.update({k: tuple(v) for k, v in grid.items() if k in self.static_fields})
        names = set(merged)
        for k in self.required_static:
            if k not in names:
                raise ValueError(f"static.{k} is missing; algorithm {self.name!r} needs it")
        first = {k: v[0] for k, v in merged.items()}
        carried = [k for k in CARRIED_STATIC if k in merged]
        for k, vals in merged.items():
            field = self._fields[k]
            for v in vals:
                if v == ISRL_EXPERIMENT and k in SIZE_RULE_FIELDS:
                    if "epsilon" not in grid:
                        raise ValueError(f"static.{k}={ISRL_EXPERIMENT!r} needs an epsilon axis (K uses the largest "
                                         "epsilon); give an int" + ("" if self.private else " (non-private family)"))
                    continue
                if isinstance(field.default, (bool, str)) and type(v) is not type(field.default):
                    raise ValueError(f"static.{k}={v!r} must be a {type(field.default).__name__}")
                trial = {kk: vv for kk, vv in first.items() if kk in (k, *carried) or kk in self.required_static}
                trial[k] = v
                try:
                    self.build(_placeholder_problem(), num_rounds, trial)
                except (ValueError, TypeError) as err:
                    # an error about a carried field's own value names that field
                    culprit = next((c for c in carried if c != k and str(err).startswith(f"{c}=")), k)
                    raise ValueError(f"static.{culprit}={trial[culprit]!r}: {err}") from None
        algorithm = self.build(_placeholder_problem(), num_rounds,
                               {k: (1 if v == ISRL_EXPERIMENT else v) for k, v in first.items()})
        # One axis at a time, the others at their defaults (required ones at their first value):
        # the error names the axis value that fails. Axes only calibration fills (P_vec) are
        # checked when each run is built.
        base = {k: 1.0 for k in self.calibrated_fields}
        base.update({k: d for k, (kind, _, d) in self._hparam_layout.items()  # nested axes with declared defaults
                     if k in base and kind == "sub" and d is not dataclasses.MISSING})
        base.update({k: grid[k][0] for k in self.required_hparams if k in grid})
        order = [k for k in self.required_hparams if k in grid] + [k for k in grid if k in self.hparam_fields]
        for k in dict.fromkeys(order):
            for i, v in enumerate(grid[k]):
                if isinstance(v, str):  # "<c>*maxnorm" clip norms resolve per trial
                    continue
                try:
                    self.make_hparams({**base, k: v}, algorithm)
                except (ValueError, TypeError) as err:
                    if k not in self.required_hparams and not self._builds(base, algorithm):
                        break
                    raise ValueError(f"grid.{k}[{i}]={v!r}: {err}") from None

    def _builds(self, values, algorithm) -> bool:
        try:
            self.make_hparams(values, algorithm)
        except (ValueError, TypeError, KeyError):
            return False
        return True


def _item_or_tuple(value):
    a = np.asarray(value)
    return a.item() if a.size == 1 else tuple(a.tolist())


ALGORITHMS: dict[str, AlgorithmEntry] = {}

#: Names no longer registered -> what to use instead (a config naming one is refused, never aliased: the
#: old "fedavg" was isrl-local-sgd's twin although "dp-fedavg" is DP-FedAvg).
RETIRED = {
    "fedavg": "algorithm='fedavg' is retired (it named isrl-local-sgd's non-private twin, not dp-fedavg's): "
              "use 'local-sgd' for that twin, or 'fedavg-server-opt' for dp-fedavg's",
    "fedopt": "algorithm='fedopt' is renamed 'fedavg-server-opt' (dp-fedavg's non-private twin: FedAvg with a "
              "server optimizer)",
}


def first_sentence(cls) -> str:
    """A class docstring's first paragraph on one line (the description of a family registered without one)."""
    import inspect

    return " ".join((inspect.getdoc(cls) or "no description").split("\n\n")[0].split())


def register_algorithm(entry: AlgorithmEntry) -> AlgorithmEntry:
    if entry.name in ALGORITHMS and ALGORITHMS[entry.name] != entry:
        raise ValueError(f"algorithm={entry.name!r} is registered twice")
    ALGORITHMS[entry.name] = entry
    return entry


def register_family(name: str, cls: type | None = None, description: str | None = None, *,
                    twin: str | tuple[str, ...] | dict[str, str] | None = None, fixed: dict | None = None, **overrides):
    """Registers a family under ``name`` with its one-line ``description`` (default: the class
    docstring's first paragraph), and its non-private twin(s) under ``twin`` (the same class with
    ``private=False``): ``{twin_name: description}``, or bare names described as the twin of
    ``name``. Use as a decorator next to the class or as a call: ``register_family("isrl-mbsgd",
    NoisyMbSgd, "ISRL-DP Noisy MB-SGD ...", twin={"mbsgd": "non-private MB-SGD, the twin of isrl-mbsgd"})``."""
    twins = dict(twin) if isinstance(twin, dict) else {t: None for t in ((twin,) if isinstance(twin, str) else twin or ())}

    def register(c):
        fx = tuple(sorted((fixed or {}).items()))
        register_algorithm(AlgorithmEntry(name, c, fx, **overrides, description=description or first_sentence(c)))
        for t, line in twins.items():
            register_algorithm(AlgorithmEntry(t, c, tuple(sorted({**dict(fx), "private": False}.items())),
                                              **overrides, description=line or f"the non-private twin of {name}"))
        return c

    return register(cls) if cls is not None else register


def get_algorithm(name) -> AlgorithmEntry:
    """The entry registered as ``name`` (families register when their module is imported:
    ``dpjax.algorithms.load_families()``); a retired name is refused with its replacement."""
    if name not in ALGORITHMS:
        if name in RETIRED:
            raise ValueError(RETIRED[name])
        raise ValueError(f"algorithm={name!r} is unknown; known: {tuple(sorted(ALGORITHMS))}")
    return ALGORITHMS[name]
