"""What a sweep config can name: algorithms and datasets.

Adding an algorithm to ``dpjax sweep`` is one ``register_algorithm`` call
with an ``AlgorithmEntry``: how to build the (static, hashable) algorithm
object from the config's static fields, which per-run hyperparameters it
sweeps, and how to turn a dict of floats into its ``HParams`` pytree.
Datasets are ``DatasetEntry`` objects that load one data split (``trial``)
as padded ``SiloData`` plus the evaluation data and the problem.
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
      make_hparams: ``make_hparams(dict name -> float) -> HParams`` (float32 leaves).
      check_static: ``check_static(static: dict, grid: dict)``, raises ValueError naming the key.
    """

    name: str
    build: Callable
    hparam_fields: tuple[str, ...]
    hparam_defaults: dict
    required_hparams: tuple[str, ...]
    static_fields: tuple[str, ...]
    make_hparams: Callable
    check_static: Callable = lambda static, grid: None


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


def _isrl_check_static(static: dict, grid: dict) -> None:
    from dpjax.algorithms import isrl_mbsgd  # noqa: F401  (import errors surface here)

    merged = {k: (v,) for k, v in static.items()}
    merged.update({k: v for k, v in grid.items() if k in _ISRL_STATIC})
    for v in merged.get("batch_size", ()):
        if v != "isrl-experiment":
            _validate.check_int("static.batch_size", v, min_value=1)
        elif "epsilon" not in grid:
            raise ValueError("static.batch_size='isrl-experiment' needs an epsilon axis (K uses the largest epsilon)")
    for v in merged.get("available", ()):
        if v != "all":
            _validate.check_int("static.available", v, min_value=1)
    for k in ("private",):
        for v in merged.get(k, ()):
            if not isinstance(v, bool):
                raise ValueError(f"static.{k}={v!r} must be true or false")
    for k in ("sampling", "aggregation", "output", "neighboring"):
        for v in merged.get(k, ()):
            if not isinstance(v, str):
                raise ValueError(f"static.{k}={v!r} must be a string")
    for v in merged.get("window", ()):
        _validate.check_int("static.window", v, min_value=1)
    if "batch_size" not in merged:
        raise ValueError("static.batch_size is missing; algorithm 'isrl-mbsgd' needs it")


_ISRL_STATIC = (
    "batch_size", "sampling", "available", "private", "aggregation", "output", "window",
    "projection_radius", "neighboring",
)


def _isrl_build(problem, num_rounds: int, static: dict, ctx: BuildContext):
    from dpjax.accounting import isrl as isrl_acc
    from dpjax.algorithms.isrl_mbsgd import NoisyMbSgd
    from dpjax.primitives.sampling import FixedAvailability, FullAvailability

    kw = dict(static)
    k = kw.pop("batch_size")
    if k == "isrl-experiment":
        # K = ceil(n sqrt(eps_max) / (2 sqrt R)) (ISRL spec §3.7); K does not depend on L or delta.
        k = isrl_acc.isrl_experiment_calibration(1.0, ctx.min_size, num_rounds, ctx.epsilon_max, 0.5)[1]
    m = kw.pop("available", "all")
    availability = FullAvailability() if m == "all" or m == ctx.num_silos else FixedAvailability(int(m))
    return NoisyMbSgd(problem=problem, num_rounds=num_rounds, batch_size=int(k), availability=availability, **kw)


def _isrl_hparams(values: dict):
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams

    f32 = lambda v: jnp.asarray(v, jnp.float32)
    return MbSgdHParams(f32(values["learning_rate"]), f32(values["noise_std"]), f32(values["clip_norm"]))


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
