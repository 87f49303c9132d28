"""What a sweep config can name as data: ``DatasetEntry`` objects, each loading one data split (``trial``) as padded
``SiloData`` plus the evaluation data and the problem; every loader of ``dpjax.data`` is registered (ISRL MNIST,
insurance, obesity, the DIFF2 datasets) plus two synthetic ones.
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


@dataclasses.dataclass(frozen=True)
class DatasetEntry:
    """A data spec: ``load(options: dict, trial: int) -> TrialData``; ``options`` are the config's ``[data]`` table with
    defaults filled in, and the split of trial ``t`` must depend only on (options, t)."""
    name: str
    defaults: dict
    load: Callable
    eval_fn: Callable  # eval_fn(problem) -> fn(params, eval_data) -> dict of scalars
    #: ``size_of(options) -> (values, "how they add up")``: the number of values the options ask the loader to
    #: build, computed without building them (datasets whose size the options set; None: the files set it).
    size_of: Callable | None = None

    def check_options(self, options: dict) -> None:
        for k in options:
            if k != "name" and k not in self.defaults:
                raise ValueError(f"data.{k} is not an option of dataset {self.name!r}; known: {tuple(self.defaults)}")

    def check_size(self, options: dict, max_mb: float) -> None:
        """``ValueError`` before anything is allocated when the options describe more than ``max_mb`` MiB of float32
        data (``max_data_mb`` in a sweep config, ``dpjax sweep --max-data-mb``)."""
        if self.size_of is None:
            return
        values, how = self.size_of(options)
        mb = values * 4 / 2**20
        if mb > max_mb:
            raise ValueError(f"data: {how} = {values:,} values ({mb:,.0f} MiB as float32), above max_data_mb={max_mb:g}; "
                             "make the dataset smaller, or raise the limit with max_data_mb = M in the config "
                             "(dpjax sweep --max-data-mb M) if you mean it")

    def resolve(self, options: dict) -> dict:
        self.check_options(options)
        return {**self.defaults, **{k: v for k, v in options.items() if k != "name"}, "name": self.name}


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
    pool = lambda xs: jnp.asarray(np.concatenate(xs), jnp.float32)  # noqa: E731
    return {"train_x": pool(train_x), "train_y": jnp.asarray(np.concatenate(train_y)), "test_x": pool(test_x),
            "test_y": jnp.asarray(np.concatenate(test_y))}


@functools.lru_cache(maxsize=64)
def classification_eval(problem):
    """Pooled training and pooled test metrics of the output parameters (every metric of ``problem.evaluate``, prefixed
    ``train_`` / ``test_``: loss and error, or loss and rmse)."""

    def fn(params, ed):
        tr = problem.evaluate(params, ed["train_x"], ed["train_y"])
        te = problem.evaluate(params, ed["test_x"], ed["test_y"])
        return {**{f"train_{k}": v for k, v in tr.items()}, **{f"test_{k}": v for k, v in te.items()}}

    return fn


def trial_from_federated(fed, problem, metadata: dict) -> TrialData:
    """A ``dpjax.data.FederatedDataset`` split as sweep ``TrialData`` (pooled evaluation data)."""
    if fed.pooled_test_x is not None:
        return _trial(fed.train_x, fed.train_y, [fed.pooled_test_x], [fed.pooled_test_y], problem, metadata)
    return _trial(fed.train_x, fed.train_y, fed.test_x, fed.test_y, problem, metadata)


def _trial(xs, ys, test_xs, test_ys, problem, metadata: dict) -> TrialData:
    ys, test_ys = ([np.asarray(y, np.float32) for y in yy] for yy in (ys, test_ys))
    max_norm = max(float(np.max(np.linalg.norm(x, axis=1))) for x in xs)
    return TrialData(SiloData.from_silos(xs, ys), _pooled_eval_data(xs, ys, test_xs, test_ys), problem, max_norm,
                     metadata)


def _glm_for(fed):
    from dpjax.problems import LinearRegression, SoftmaxRegression
    d = fed.train_x[0].shape[1]
    return LinearRegression(d) if fed.num_classes is None else SoftmaxRegression(d, fed.num_classes)


@functools.lru_cache(maxsize=8)
def _raw(loader_name: str, data_dir):
    import dpjax.data as data_lib
    return getattr(data_lib, loader_name)(data_dir)


def _load_insurance(opts: dict, trial: int) -> TrialData:
    from dpjax.data import insurance_silos
    seed = int(opts["split_seed"]) + int(trial)
    fed = insurance_silos(_raw("load_insurance", opts["data_dir"]), n_silos=int(opts["n_silos"]), seed=seed,
                          train_fraction=opts["train_fraction"], standardize=opts["standardize"])
    return trial_from_federated(fed, _glm_for(fed), {"split_seed": seed})


def _load_obesity(opts: dict, trial: int) -> TrialData:
    from dpjax.data import obesity_silos
    seed = int(opts["split_seed"]) + int(trial)
    fed = obesity_silos(_raw("load_obesity", opts["data_dir"]), seed=seed, train_fraction=opts["train_fraction"],
                        n_per_silo=opts["n_per_silo"], replace=opts["replace"])
    return trial_from_federated(fed, _glm_for(fed), {"split_seed": seed})


def _load_diff2(name: str, opts: dict, trial: int) -> TrialData:
    from dpjax.data import diff2_dataset
    seed = int(opts["split_seed"]) + int(trial)
    fed = diff2_dataset(name, opts["data_dir"], seed=seed, n_silos=int(opts["n_silos"]),
                        train_fraction=opts["train_fraction"])
    return trial_from_federated(fed, _glm_for(fed), {"split_seed": seed})


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
    seed = int(opts["split_seed"]) + int(trial)
    fed = isrl_mnist_silos(images, labels, seed=seed, n_per_digit=opts["n_per_digit"],
                           train_fraction=opts["train_fraction"], pca_dim=opts["pca_dim"],
                           heterogeneity_p=opts["heterogeneity_p"], replace=opts["replace"], pca=pca)
    return _trial(fed.train_x, fed.train_y, fed.test_x, fed.test_y, LogisticRegression(fed.dim), {"split_seed": seed})


def _isrl_mnist_size(opts: dict) -> tuple[int, str]:
    n = _validate.check_int("data.n_per_digit", opts["n_per_digit"], min_value=1)
    dim = 784 if opts["pca_dim"] is None else _validate.check_int("data.pca_dim", opts["pca_dim"], min_value=1,
                                                                   max_value=784)
    return 25 * 2 * n * dim, f"25 silos x 2 x n_per_digit={n:,} x pca_dim={dim}"


register_dataset(DatasetEntry(
    name="isrl-mnist", defaults={"data_dir": None, "n_per_digit": 774, "pca_dim": 50, "heterogeneity_p": 0.0,
                                 "replace": False, "train_fraction": 0.8, "split_seed": 0},
    load=_load_isrl_mnist, eval_fn=classification_eval, size_of=_isrl_mnist_size))


def synthetic_logistic_silos(num_silos: int, n: int, dim: int, n_test: int, heterogeneity: float, seed: int):
    """Heterogeneous synthetic logistic-regression silos (NumPy).

    Silo i draws features ``x ~ N(mu_i, I/dim)`` with ``mu_i ~ heterogeneity * N(0, I/dim)`` and labels ``y ~
    Bernoulli(sigmoid(<w*, x>))`` for one shared ``w* ~ N(0, 4 I / dim)``; every split depends only on ``seed``.
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


def _load_synthetic(opts: dict, trial: int, mlp: bool = False) -> TrialData:
    from dpjax.problems.glm import LogisticRegression
    n, dim, num_silos, n_test = _synthetic_dims(opts)
    het = _validate.check_nonnegative("data.heterogeneity", opts["heterogeneity"])
    seed = _validate.check_int("data.split_seed", opts["split_seed"], min_value=0) + int(trial)
    xs, ys, txs, tys = synthetic_logistic_silos(num_silos, n, dim, n_test, het, seed)
    problem = LogisticRegression(dim)
    if mlp:
        from dpjax.problems import FlaxProblem
        from dpjax.problems.mlp import MLP
        width = _validate.check_int("data.hidden", opts["hidden"], min_value=1)
        problem = FlaxProblem(MLP((width,)), (dim,), "logistic")
    return _trial(xs, ys, txs, tys, problem, {"split_seed": seed})


def _synthetic_dims(opts: dict) -> tuple[int, int, int, int]:
    return tuple(_validate.check_int(f"data.{k}", opts[k], min_value=1) for k in ("n", "dim", "num_silos", "n_test"))


def _synthetic_size(opts: dict) -> tuple[int, str]:
    n, dim, num_silos, n_test = _synthetic_dims(opts)
    return num_silos * (n + n_test) * dim, f"num_silos={num_silos:,} x (n={n:,} + n_test={n_test:,}) x dim={dim:,}"


register_dataset(DatasetEntry(
    name="synthetic-logistic", defaults={"num_silos": 4, "n": 64, "dim": 5, "n_test": 32, "heterogeneity": 1.0,
                                         "split_seed": 0},
    load=_load_synthetic, eval_fn=classification_eval, size_of=_synthetic_size))
register_dataset(DatasetEntry(  # the same silos, a one-hidden-layer flax MLP (FlaxProblem) as the model
    name="synthetic-mlp", defaults={"num_silos": 1, "n": 256, "dim": 5, "n_test": 128, "heterogeneity": 0.0,
                                    "split_seed": 0, "hidden": 16},
    load=functools.partial(_load_synthetic, mlp=True), eval_fn=classification_eval, size_of=_synthetic_size))
register_dataset(DatasetEntry(  # ISRL-DP experiment B (linear regression, silos sorted by charges)
    name="isrl-insurance", defaults={"data_dir": None, "n_silos": 3, "train_fraction": 0.8,
                                     "standardize": "per_silo", "split_seed": 0},
    load=_load_insurance, eval_fn=classification_eval))
register_dataset(DatasetEntry(  # ISRL-DP experiment C (softmax regression, one silo per class)
    name="isrl-obesity", defaults={"data_dir": None, "n_per_silo": 200, "replace": False, "train_fraction": 0.8,
                                   "split_seed": 0},
    load=_load_obesity, eval_fn=classification_eval, size_of=lambda o: _obesity_size(o)))


def _obesity_size(opts: dict) -> tuple[int, str]:
    n = opts["n_per_silo"]
    n = 2111 if n is None else _validate.check_int("data.n_per_silo", n, min_value=1)
    return 7 * n * 16, f"7 silos x n_per_silo={n:,} x 16 features"


def _register_diff2_datasets() -> None:
    """The DIFF2 experiments' datasets (a GLM on P client silos; ``dpjax.data.DIFF2_DATASETS``)."""
    from dpjax.data.diff2 import DIFF2_DATASETS
    for name in DIFF2_DATASETS:
        register_dataset(DatasetEntry(
            name=f"diff2-{name.replace('_', '-')}",
            defaults={"data_dir": None, "n_silos": 10, "train_fraction": 0.8, "split_seed": 0},
            load=functools.partial(_load_diff2, name), eval_fn=classification_eval))


_register_diff2_datasets()


def stack_trials(trials: list[TrialData]):
    """Stacks per-trial ``SiloData`` and eval data (leading trial axis); shapes must agree."""
    shapes = {jax.tree_util.tree_map(np.shape, (t.train, t.eval_data)).__repr__() for t in trials}
    if len(shapes) != 1:
        raise ValueError("data splits of different trials have different shapes; a sweep needs equal shapes")
    stack = lambda *xs: jnp.stack(xs)
    return (jax.tree_util.tree_map(stack, *[t.train for t in trials]),
            jax.tree_util.tree_map(stack, *[t.eval_data for t in trials]))
