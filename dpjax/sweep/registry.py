"""What a sweep config can name: algorithms and datasets.

Adding an algorithm to ``dpjax sweep`` is one ``register_algorithm`` call
with an ``AlgorithmEntry``: how to build the (static, hashable) algorithm
object from the config's static fields, which per-run hyperparameters it
sweeps, and how to turn a dict of floats into its ``HParams`` pytree.
Datasets are ``DatasetEntry`` objects that load one data split (``trial``)
as padded ``SiloData`` plus the evaluation data and the problem.

Registered algorithms (static fields: compile-time, one program per
combination; per-run axes: vmapped inside one program; an ``epsilon`` axis
sets ``noise_std`` through the algorithm's own ``privacy_schedule``):

* ``isrl-mbsgd``: ``NoisyMbSgd`` (ISRL-DP Algorithm 2). Static: batch_size
  (int or ``"isrl-experiment"``), sampling, available, private, aggregation,
  output, window, projection_radius, neighboring. Per run: learning_rate,
  noise_std or epsilon, clip_norm.
* ``mbsgd``: its non-private twin ``NoisyMbSgd(private=False)``. Static as
  above without private/neighboring (batch_size an int). Per run: learning_rate.
* ``isrl-local-sgd``: ``LocalSgd`` (private Local SGD). Static: local_steps
  (int or ``"isrl-experiment"``), available, aggregation, output, window,
  projection_radius. Per run: learning_rate, noise_std or epsilon, clip_norm.
* ``local-sgd`` / ``fedavg`` (two names, one algorithm):
  ``LocalSgd(private=False)``. Static as above (local_steps an int). Per run:
  learning_rate.
* ``isrl-accelerated``: ``AcceleratedMbSgd`` (ISRL-DP Algorithm 1 with a
  single-stage AC-SA schedule; one-pass A3a by default). Static: batch_size
  (int), sampling, available, aggregation, projection_radius, neighboring.
  Per run: smoothness (the schedule's nu = beta; the step-size axis),
  strong_convexity, regularization, noise_std or epsilon, clip_norm.
* ``accelerated``: its non-private twin. Per run: smoothness,
  strong_convexity, regularization.

``"isrl-experiment"`` resolves K = ceil(n sqrt(eps_max) / (2 sqrt R)) from the
grid's largest epsilon (ISRL spec §3.7; Local SGD uses the same K as local
steps, as in the paper's experiments). The non-private twins refuse an
``epsilon`` axis; their hparams carry ``noise_std = 0`` and
``clip_norm = inf`` (``non_private_hparams``). The accelerated families build
the single-stage AC-SA schedule per run (``AcsaSchedule.single_stage(R,
smoothness, strong_convexity, regularization)``); multi-stage schedules are
not a per-run scalar and are not offered here.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.engine.silos import SiloData


# ---------------------------------------------------------------------------
# Build context and per-trial data
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class BuildContext:
    """Public facts the static fields may depend on (e.g. the ISRL K rule)."""

    num_silos: int
    min_size: int
    epsilon_max: float | None
    num_rounds: int


@dataclasses.dataclass
class TrialData:
    """One data split: training silos, evaluation data (a pytree), the problem.

    ``max_norm`` (largest training feature norm) resolves ``"<c>*maxnorm"`` clip norms.
    """

    train: SiloData
    eval_data: Any
    problem: Any
    max_norm: float
    metadata: dict


# ---------------------------------------------------------------------------
# Algorithms
# ---------------------------------------------------------------------------
def _batch_size_column(alg) -> dict:
    return {"batch_size_resolved": getattr(alg, "batch_size", None)}


@dataclasses.dataclass(frozen=True)
class AlgorithmEntry:
    """How the sweep builds and drives one algorithm family.

    Attributes:
      name: the config's ``algorithm`` value.
      build: ``build(problem, num_rounds, static: dict, ctx: BuildContext) -> algorithm``.
      hparam_fields: per-run scalar fields (grid axes vmapped in one program).
      hparam_defaults: values used when an axis is absent from the grid.
      required_hparams: fields that must be on the grid.
      static_fields: static fields the config may set or sweep (one compile each).
      make_hparams: ``make_hparams(values: dict name -> float or array, algorithm=None) -> HParams``
        (float32 leaves; array values give a batch of runs). ``algorithm`` is the
        built algorithm object, for hparams that depend on its static fields
        (e.g. per-round schedules of length ``num_rounds``); families that
        do not need it ignore it.
      check_static: ``check_static(static: dict, grid: dict)``, raises ValueError naming the key
        (``grid`` also holds the per-run axes, so value checks of those belong here too).
      private: whether the family has a privacy guarantee (an ``epsilon`` axis
        is calibrated through its ``privacy_schedule``); non-private twins refuse one.
      resolved_columns: ``resolved_columns(algorithm) -> dict`` of columns recorded
        for every run (e.g. the K that ``"isrl-experiment"`` resolved to).
    """

    name: str
    build: Callable
    hparam_fields: tuple[str, ...]
    hparam_defaults: dict
    required_hparams: tuple[str, ...]
    static_fields: tuple[str, ...]
    make_hparams: Callable
    check_static: Callable = lambda static, grid: None
    private: bool = True
    resolved_columns: Callable = _batch_size_column


ALGORITHMS: dict[str, AlgorithmEntry] = {}


def register_algorithm(entry: AlgorithmEntry) -> AlgorithmEntry:
    if entry.name in ALGORITHMS and ALGORITHMS[entry.name] is not entry:
        raise ValueError(f"algorithm={entry.name!r} is registered twice")
    ALGORITHMS[entry.name] = entry
    return entry


def get_algorithm(name) -> AlgorithmEntry:
    if name not in ALGORITHMS:
        raise ValueError(f"algorithm={name!r} is unknown; known: {tuple(sorted(ALGORITHMS))}")
    return ALGORITHMS[name]


# -- shared pieces of the ISRL-DP families ------------------------------------
ISRL_EXPERIMENT = "isrl-experiment"  # K = ceil(n sqrt(eps_max) / (2 sqrt R)) (ISRL spec §3.7)


def _check_static_fields(algorithm: str, size_field: str, static: dict, grid: dict, fields: tuple,
                         rule_allowed: bool) -> None:
    """Type checks of the static fields shared by the ISRL-DP families.

    ``size_field`` (``batch_size`` or ``local_steps``) is an int >= 1 or, when
    ``rule_allowed``, ``"isrl-experiment"`` (which needs an epsilon axis).
    """
    merged = {k: (v,) for k, v in static.items()}
    merged.update({k: v for k, v in grid.items() if k in fields})
    for v in merged.get(size_field, ()):
        if v == ISRL_EXPERIMENT and rule_allowed:
            if "epsilon" not in grid:
                raise ValueError(f"static.{size_field}={ISRL_EXPERIMENT!r} needs an epsilon axis "
                                 "(K uses the largest epsilon)")
        elif v == ISRL_EXPERIMENT:
            raise ValueError(f"static.{size_field}={ISRL_EXPERIMENT!r} is not available for algorithm "
                             f"{algorithm!r}; give an int")
        else:
            _validate.check_int(f"static.{size_field}", v, min_value=1)
    for v in merged.get("available", ()):
        if v != "all":
            _validate.check_int("static.available", v, min_value=1)
    for v in merged.get("private", ()):
        if not isinstance(v, bool):
            raise ValueError(f"static.private={v!r} must be true or false")
    for k in ("sampling", "aggregation", "output", "neighboring"):
        for v in merged.get(k, ()):
            if not isinstance(v, str):
                raise ValueError(f"static.{k}={v!r} must be a string")
    for v in merged.get("window", ()):
        _validate.check_int("static.window", v, min_value=1)
    for v in merged.get("projection_radius", ()):
        _validate.check_positive("static.projection_radius", v)
    if size_field not in merged:
        raise ValueError(f"static.{size_field} is missing; algorithm {algorithm!r} needs it")


def _static_checker(algorithm: str, size_field: str, fields: tuple, rule_allowed: bool) -> Callable:
    return functools.partial(_check_static_fields, algorithm, size_field, fields=fields, rule_allowed=rule_allowed)


def _resolve_size(value, ctx: BuildContext) -> int:
    if value == ISRL_EXPERIMENT:
        from dpjax.accounting import isrl as isrl_acc

        # K does not depend on L or delta.
        return isrl_acc.isrl_experiment_calibration(1.0, ctx.min_size, ctx.num_rounds, ctx.epsilon_max, 0.5)[1]
    return int(value)


def _availability(value, ctx: BuildContext):
    from dpjax.primitives.sampling import FixedAvailability, FullAvailability

    return FullAvailability() if value == "all" or value == ctx.num_silos else FixedAvailability(int(value))


def _f32(v):
    return jnp.asarray(v, jnp.float32)


def _mbsgd_hparams(values: dict, algorithm=None):
    """``MbSgdHParams`` (also Local SGD's); absent noise_std / clip_norm default to 0 / 1."""
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams

    lr = _f32(values["learning_rate"])
    noise = _f32(values.get("noise_std", 0.0)) + jnp.zeros_like(lr)
    clip = _f32(values.get("clip_norm", 1.0)) + jnp.zeros_like(lr)
    return MbSgdHParams(lr, noise, clip)


def _nonprivate_mbsgd_hparams(values: dict, algorithm=None):
    """The non-private twins' hparams: noise_std = 0 and clip_norm = inf (``non_private_hparams``)."""
    from dpjax.algorithms.accelerated import non_private_hparams

    return non_private_hparams(_mbsgd_hparams({"learning_rate": values["learning_rate"]}))


# -- Noisy MB-SGD (ISRL-DP Algorithm 2) and its non-private twin ---------------
_ISRL_STATIC = (
    "batch_size", "sampling", "available", "private", "aggregation", "output", "window",
    "projection_radius", "neighboring",
)
_MBSGD_STATIC = tuple(k for k in _ISRL_STATIC if k not in ("private", "neighboring"))


def _isrl_check_static(static: dict, grid: dict) -> None:
    from dpjax.algorithms import isrl_mbsgd  # noqa: F401  (import errors surface here)

    _check_static_fields("isrl-mbsgd", "batch_size", static, grid, _ISRL_STATIC, True)


def _mbsgd_builder(private: bool | None):
    def build(problem, num_rounds: int, static: dict, ctx: BuildContext):
        from dpjax.algorithms.isrl_mbsgd import NoisyMbSgd

        kw = dict(static)
        k = _resolve_size(kw.pop("batch_size"), ctx)
        availability = _availability(kw.pop("available", "all"), ctx)
        if private is not None:
            kw["private"] = private
        return NoisyMbSgd(problem=problem, num_rounds=num_rounds, batch_size=k, availability=availability, **kw)

    return build


_isrl_build = _mbsgd_builder(None)  # static.private may switch the ISRL entry to its twin


def _isrl_hparams(values: dict, algorithm=None):
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams

    return MbSgdHParams(_f32(values["learning_rate"]), _f32(values["noise_std"]), _f32(values["clip_norm"]))


register_algorithm(
    AlgorithmEntry(
        name="isrl-mbsgd",
        build=_isrl_build,
        hparam_fields=("learning_rate", "noise_std", "clip_norm"),
        hparam_defaults={"noise_std": 0.0, "clip_norm": 1.0},
        required_hparams=("learning_rate",),
        static_fields=_ISRL_STATIC,
        make_hparams=_isrl_hparams,
        check_static=_isrl_check_static,
    )
)

register_algorithm(
    AlgorithmEntry(
        name="mbsgd",
        build=_mbsgd_builder(False),
        hparam_fields=("learning_rate",),
        hparam_defaults={},
        required_hparams=("learning_rate",),
        static_fields=_MBSGD_STATIC,
        make_hparams=_nonprivate_mbsgd_hparams,
        check_static=_static_checker("mbsgd", "batch_size", _MBSGD_STATIC, False),
        private=False,
    )
)


# -- Local SGD (ISRL-DP baseline) and non-private Local SGD / FedAvg -----------
_LOCAL_STATIC = ("local_steps", "available", "aggregation", "output", "window", "projection_radius")


def _local_sgd_builder(private: bool):
    def build(problem, num_rounds: int, static: dict, ctx: BuildContext):
        from dpjax.algorithms.local_sgd import LocalSgd

        kw = dict(static)
        k = _resolve_size(kw.pop("local_steps"), ctx)
        availability = _availability(kw.pop("available", "all"), ctx)
        return LocalSgd(problem=problem, num_rounds=num_rounds, local_steps=k, availability=availability,
                        private=private, **kw)

    return build


def _local_steps_column(alg) -> dict:
    return {"local_steps_resolved": alg.local_steps}


register_algorithm(
    AlgorithmEntry(
        name="isrl-local-sgd",
        build=_local_sgd_builder(True),
        hparam_fields=("learning_rate", "noise_std", "clip_norm"),
        hparam_defaults={"noise_std": 0.0, "clip_norm": 1.0},
        required_hparams=("learning_rate",),
        static_fields=_LOCAL_STATIC,
        make_hparams=_mbsgd_hparams,
        check_static=_static_checker("isrl-local-sgd", "local_steps", _LOCAL_STATIC, True),
        resolved_columns=_local_steps_column,
    )
)

for _name in ("local-sgd", "fedavg"):  # two names of one algorithm (run ids differ: they hash the name)
    register_algorithm(
        AlgorithmEntry(
            name=_name,
            build=_local_sgd_builder(False),
            hparam_fields=("learning_rate",),
            hparam_defaults={},
            required_hparams=("learning_rate",),
            static_fields=_LOCAL_STATIC,
            make_hparams=_nonprivate_mbsgd_hparams,
            check_static=_static_checker(_name, "local_steps", _LOCAL_STATIC, False),
            private=False,
            resolved_columns=_local_steps_column,
        )
    )


# -- Accelerated noisy MB-SGD (ISRL-DP Algorithm 1, single-stage AC-SA) ---------
_ACCEL_STATIC = ("batch_size", "sampling", "available", "aggregation", "projection_radius", "neighboring")
_ACCEL_SCHEDULE = ("smoothness", "strong_convexity", "regularization")
_ACCEL_DEFAULTS = {"strong_convexity": 0.0, "regularization": 0.0}


def _accelerated_builder(private: bool):
    def build(problem, num_rounds: int, static: dict, ctx: BuildContext):
        from dpjax.algorithms.accelerated import AcceleratedMbSgd

        kw = dict(static)
        k = int(kw.pop("batch_size"))
        availability = _availability(kw.pop("available", "all"), ctx)
        return AcceleratedMbSgd(problem=problem, num_rounds=num_rounds, batch_size=k, availability=availability,
                                private=private, **kw)

    return build


def acsa_single_stage(values: dict, num_rounds: int):
    """``AcsaSchedule.single_stage`` for scalar or array ``smoothness`` / ``strong_convexity`` / ``regularization``.

    Every leaf gets the broadcast shape of the values as leading axes
    (``stage_round`` / ``stage_nu`` add a trailing ``[num_rounds]``). The sums
    ``mu + lam`` and ``beta + lam`` are formed in float64 and rounded once to
    float32, exactly as ``single_stage`` does with Python floats, so a sweep
    lane equals the directly built schedule bit for bit.
    """
    from dpjax.algorithms.accelerated import AcsaSchedule

    r = _validate.check_int("num_rounds", num_rounds, min_value=1)
    get = lambda k: np.asarray(values.get(k, _ACCEL_DEFAULTS.get(k)), np.float64)
    beta, mu, lam = get("smoothness"), get("strong_convexity"), get("regularization")
    shape = np.broadcast_shapes(beta.shape, mu.shape, lam.shape)
    full = lambda a: jnp.asarray(np.broadcast_to(a, shape).astype(np.float32))
    per_round = lambda a: jnp.asarray(np.broadcast_to(a, shape + (r,)))
    return AcsaSchedule(
        mu=full(mu + lam),
        lam=full(lam),
        stage_round=per_round(np.arange(1, r + 1, dtype=np.int32)),
        stage_nu=per_round((beta + lam)[..., None].astype(np.float32)),
    )


def _accelerated_hparams_maker(private: bool):
    def make(values: dict, algorithm=None):
        from dpjax.algorithms.accelerated import AcceleratedHParams, non_private_hparams

        if algorithm is None:
            raise ValueError("make_hparams(algorithm=None): the accelerated families build a per-round AC-SA "
                             "schedule and need the built algorithm (its num_rounds)")
        sched = acsa_single_stage(values, algorithm.num_rounds)
        like = sched.mu
        if not private:
            return non_private_hparams(AcceleratedHParams(sched, jnp.zeros_like(like), jnp.ones_like(like)))
        noise = _f32(values.get("noise_std", 0.0)) + jnp.zeros_like(like)
        clip = _f32(values.get("clip_norm", 1.0)) + jnp.zeros_like(like)
        return AcceleratedHParams(sched, noise, clip)

    return make


def _accelerated_checker(algorithm: str):
    def check(static: dict, grid: dict) -> None:
        _check_static_fields(algorithm, "batch_size", static, grid, _ACCEL_STATIC, False)
        for k in _ACCEL_SCHEDULE:
            for i, v in enumerate(grid.get(k, ())):
                (_validate.check_positive if k == "smoothness" else _validate.check_nonnegative)(f"grid.{k}[{i}]", v)

    return check


register_algorithm(
    AlgorithmEntry(
        name="isrl-accelerated",
        build=_accelerated_builder(True),
        hparam_fields=_ACCEL_SCHEDULE + ("noise_std", "clip_norm"),
        hparam_defaults={**_ACCEL_DEFAULTS, "noise_std": 0.0, "clip_norm": 1.0},
        required_hparams=("smoothness",),
        static_fields=_ACCEL_STATIC,
        make_hparams=_accelerated_hparams_maker(True),
        check_static=_accelerated_checker("isrl-accelerated"),
    )
)

register_algorithm(
    AlgorithmEntry(
        name="accelerated",
        build=_accelerated_builder(False),
        hparam_fields=_ACCEL_SCHEDULE,
        hparam_defaults=dict(_ACCEL_DEFAULTS),
        required_hparams=("smoothness",),
        static_fields=_ACCEL_STATIC,
        make_hparams=_accelerated_hparams_maker(False),
        check_static=_accelerated_checker("accelerated"),
        private=False,
    )
)


# ---------------------------------------------------------------------------
# Datasets
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class DatasetEntry:
    """A data spec: ``load(options: dict, trial: int) -> TrialData``.

    ``options`` are the config's ``[data]`` table with defaults filled in; the
    split of trial ``t`` must depend only on (options, t).
    """

    name: str
    defaults: dict
    load: Callable
    eval_fn: Callable  # eval_fn(problem) -> fn(params, eval_data) -> dict of scalars

    def check_options(self, options: dict) -> None:
        for k in options:
            if k != "name" and k not in self.defaults:
                raise ValueError(f"data.{k} is not an option of dataset {self.name!r}; known: {tuple(self.defaults)}")

    def resolve(self, options: dict) -> dict:
        self.check_options(options)
        out = dict(self.defaults)
        out.update({k: v for k, v in options.items() if k != "name"})
        out["name"] = self.name
        return out


DATASETS: dict[str, DatasetEntry] = {}


def register_dataset(entry: DatasetEntry) -> DatasetEntry:
    if entry.name in DATASETS and DATASETS[entry.name] is not entry:
        raise ValueError(f"dataset={entry.name!r} is registered twice")
    DATASETS[entry.name] = entry
    return entry


def get_dataset(name) -> DatasetEntry:
    if name not in DATASETS:
        raise ValueError(f"data.name={name!r} is unknown; known: {tuple(sorted(DATASETS))}")
    return DATASETS[name]


def _pooled_eval_data(train_x, train_y, test_x, test_y):
    def pool(xs, ys):
        return jnp.asarray(np.concatenate(xs), jnp.float32), jnp.asarray(np.concatenate(ys))

    xtr, ytr = pool(train_x, train_y)
    xte, yte = pool(test_x, test_y)
    return {"train_x": xtr, "train_y": ytr, "test_x": xte, "test_y": yte}


@functools.lru_cache(maxsize=64)
def classification_eval(problem):
    """Pooled training loss/error and pooled test loss/error of the output parameters."""

    def fn(params, ed):
        tr = problem.evaluate(params, ed["train_x"], ed["train_y"])
        te = problem.evaluate(params, ed["test_x"], ed["test_y"])
        return {"train_loss": tr["loss"], "train_error": tr["error"], "test_loss": te["loss"], "test_error": te["error"]}

    return fn


@functools.lru_cache(maxsize=4)
def _mnist_and_pca(data_dir, pca_dim):
    from dpjax.data import load_mnist, pca_fit

    raw = load_mnist(data_dir)
    images, labels = raw["train_images"], raw["train_labels"].astype(np.int64)
    pca = None
    if pca_dim is not None:
        pca = pca_fit(images.reshape(images.shape[0], -1).astype(np.float64) / 255.0, int(pca_dim))
    return images, labels, pca


def _load_isrl_mnist(opts: dict, trial: int) -> TrialData:
    from dpjax.data import isrl_mnist_silos
    from dpjax.problems.glm import LogisticRegression

    images, labels, pca = _mnist_and_pca(opts["data_dir"], opts["pca_dim"])
    fed = isrl_mnist_silos(
        images, labels, seed=int(opts["split_seed"]) + int(trial), n_per_digit=opts["n_per_digit"],
        train_fraction=opts["train_fraction"], pca_dim=opts["pca_dim"], heterogeneity_p=opts["heterogeneity_p"],
        replace=opts["replace"], pca=pca,
    )
    problem = LogisticRegression(fed.dim)
    train = SiloData.from_silos(fed.train_x, [y.astype(np.float32) for y in fed.train_y])
    ed = _pooled_eval_data(fed.train_x, [y.astype(np.float32) for y in fed.train_y],
                           fed.test_x, [y.astype(np.float32) for y in fed.test_y])
    max_norm = max(float(np.max(np.linalg.norm(x, axis=1))) for x in fed.train_x)
    return TrialData(train, ed, problem, max_norm, {"split_seed": int(opts["split_seed"]) + int(trial)})


register_dataset(
    DatasetEntry(
        name="isrl-mnist",
        defaults={"data_dir": None, "n_per_digit": 774, "pca_dim": 50, "heterogeneity_p": 0.0,
                  "replace": False, "train_fraction": 0.8, "split_seed": 0},
        load=_load_isrl_mnist,
        eval_fn=classification_eval,
    )
)


def synthetic_logistic_silos(num_silos: int, n: int, dim: int, n_test: int, heterogeneity: float, seed: int):
    """Heterogeneous synthetic logistic-regression silos (NumPy).

    Silo i draws features ``x ~ N(mu_i, I/dim)`` with ``mu_i ~ heterogeneity *
    N(0, I/dim)`` and labels ``y ~ Bernoulli(sigmoid(<w*, x>))`` for one shared
    ``w* ~ N(0, 4 I / dim)``; every split depends only on ``seed``.
    """
    rng = np.random.default_rng(seed)
    w = rng.normal(size=dim) * 2.0 / math.sqrt(dim)
    xs, ys, txs, tys = [], [], [], []
    for _ in range(num_silos):
        mu = heterogeneity * rng.normal(size=dim) / math.sqrt(dim)
        for sink_x, sink_y, m in ((xs, ys, n), (txs, tys, n_test)):
            x = (mu + rng.normal(size=(m, dim)) / math.sqrt(dim)).astype(np.float32)
            p = 1.0 / (1.0 + np.exp(-(x @ w)))
            sink_x.append(x)
            sink_y.append((rng.random(m) < p).astype(np.float32))
    return xs, ys, txs, tys


def _load_synthetic(opts: dict, trial: int) -> TrialData:
    from dpjax.problems.glm import LogisticRegression

    n = _validate.check_int("data.n", opts["n"], min_value=1)
    dim = _validate.check_int("data.dim", opts["dim"], min_value=1)
    num_silos = _validate.check_int("data.num_silos", opts["num_silos"], min_value=1)
    n_test = _validate.check_int("data.n_test", opts["n_test"], min_value=1)
    het = _validate.check_nonnegative("data.heterogeneity", opts["heterogeneity"])
    seed = _validate.check_int("data.split_seed", opts["split_seed"], min_value=0) + int(trial)
    xs, ys, txs, tys = synthetic_logistic_silos(num_silos, n, dim, n_test, het, seed)
    problem = LogisticRegression(dim)
    max_norm = max(float(np.max(np.linalg.norm(x, axis=1))) for x in xs)
    return TrialData(SiloData.from_silos(xs, ys), _pooled_eval_data(xs, ys, txs, tys), problem, max_norm,
                     {"split_seed": seed})


register_dataset(
    DatasetEntry(
        name="synthetic-logistic",
        defaults={"num_silos": 4, "n": 64, "dim": 5, "n_test": 32, "heterogeneity": 1.0, "split_seed": 0},
        load=_load_synthetic,
        eval_fn=classification_eval,
    )
)


def stack_trials(trials: list[TrialData]):
    """Stacks per-trial ``SiloData`` and eval data (leading trial axis); shapes must agree."""
    shapes = {jax.tree_util.tree_map(np.shape, (t.train, t.eval_data)).__repr__() for t in trials}
    if len(shapes) != 1:
        raise ValueError("data splits of different trials have different shapes; a sweep needs equal shapes")
    stack = lambda *xs: jnp.stack(xs)
    return (jax.tree_util.tree_map(stack, *[t.train for t in trials]),
            jax.tree_util.tree_map(stack, *[t.eval_data for t in trials]))
