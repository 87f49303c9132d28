"""The ISRL-DP figures' settings: ``Setting`` / ``Experiment`` / ``Task``, the three experiments (MNIST,
insurance, obesity) under both constructions, and the notes and titles the reports print."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from dpjax import _validate
from dpjax.reproduce import isrl_protocol as proto


PAPER = "ISRL-DP (Lowy & Razaviyayn, ICLR 2023)"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One panel: N silos (data split), M available per round."""

    num_silos: int
    silos_per_round: int

    @property
    def label(self) -> str:
        return f"N={self.num_silos}, M={self.silos_per_round}"


@dataclasses.dataclass(frozen=True)
class Experiment:
    """Everything that defines one figure's protocol.

    ``mb_grid``/``local_grid`` are the authors' step-size grids; the MB-SGD grid is multiplied by ``mb_grid_scale``
    ("M" or "K", see module doc). ``clip_norms=None`` clips at the data's Lipschitz bound ``lipschitz(fed)`` (never
    binding for the GLM losses used); otherwise the clip threshold is tuned jointly with the step size (insurance).
    """

    name: str
    metric: str  # "test_error" or "relative_rmse"
    settings: tuple[Setting, ...]
    epsilons: tuple[float, ...]
    epsilon_max: float
    rounds: int
    trials: int
    repetitions: int
    mb_grid: tuple[float, ...]
    local_grid: tuple[float, ...]
    mb_grid_scale: str = "M"
    clip_norms: tuple[float, ...] | None = None
    nonprivate_clip: bool = False
    output: str = "window"
    divergence_threshold: float = 100.0
    calibrations: tuple[str, ...] = proto.CALIBRATIONS
    construction: str = "paper"
    server_noise: bool = False
    silo_rules: str = "common"
    max_grid_extensions: int = 4

    def __post_init__(self):
        from dpjax.reproduce import CONSTRUCTIONS

        _validate.check_choice("construction", self.construction, CONSTRUCTIONS)
        _validate.check_int("max_grid_extensions", self.max_grid_extensions, min_value=0)
        _validate.check_choice("silo_rules", self.silo_rules, ("common", "insurance-script"))
        _validate.check_choice("metric", self.metric, ("test_error", "relative_rmse"))
        _validate.check_choice("mb_grid_scale", self.mb_grid_scale, ("M", "K", "1"))
        _validate.check_choice("output", self.output, ("window", "last", "average"))
        _validate.check_int("rounds", self.rounds, min_value=1)
        _validate.check_int("trials", self.trials, min_value=1)
        _validate.check_int("repetitions", self.repetitions, min_value=1)
        if not self.settings or not self.epsilons or not self.mb_grid or not self.local_grid:
            raise ValueError("settings, epsilons, mb_grid and local_grid must be non-empty")
        for e in self.epsilons:
            _validate.check_positive("epsilons[]", e)
        if max(self.epsilons) > self.epsilon_max:
            raise ValueError(f"epsilon_max={self.epsilon_max} must be >= max(epsilons)={max(self.epsilons)}")


@dataclasses.dataclass(frozen=True)
class Task:
    """The data side of a figure: ``data(num_silos, seed) -> FederatedDataset``,
    the problem built from it, the Lipschitz rule and the naive predictor (insurance)."""

    data: Callable[[int, int], Any]
    problem: Callable[[Any], Any]
    lipschitz: Callable[[Any], float] | None = None
    test_metric: str = "error"  # key of problem.evaluate
    # Extra test sets evaluated beside the pooled one: ``extra_tests(fed) -> {name: (x, y)}``.
    extra_tests: Callable[[Any], dict] | None = None


# The three experiments


def mnist_experiment(quick: bool, construction: str = "paper") -> Experiment:
    """Fig. 4 (M = 25, 12) and Fig. 7 (M = 18)."""
    mb = proto.log_grid(-6.0, 0.0, 10)
    local = proto.log_grid(-8.0, -1.0, 10)
    eps = (0.75, 1.5, 3.0, 6.0, 12.0, 18.0)
    if quick:
        return Experiment("isrl-mnist", "test_error", (Setting(25, 25), Setting(25, 12)), (0.75, 3.0, 18.0),
                          18.0, 35, trials=2, repetitions=1, mb_grid=proto.thin(mb, 5), local_grid=proto.thin(local, 5),
                          **_construction_fields(construction))
    return Experiment("isrl-mnist", "test_error", (Setting(25, 25), Setting(25, 12), Setting(25, 18)), eps, 18.0, 35,
                      trials=20, repetitions=3, mb_grid=mb, local_grid=local, **_construction_fields(construction))


def _construction_fields(construction: str) -> dict:
    """The authors' scripts run only the Appendix I calibration."""
    return {"construction": construction,
            "calibrations": ("paper",) if construction == "authors" else proto.CALIBRATIONS}


def insurance_experiment(quick: bool, construction: str = "paper") -> Experiment:
    """Fig. 5, 8, 9 (N in {3, 5, 10, 12}, M = N and ceil(N/2)); the authors' construction runs
    the script's default N = 10, M = 5 and its per-silo rules."""
    mb = proto.log_grid(-8.0, 1.0, 10)
    local = proto.log_grid(-10.0, 0.0, 10)
    clips = (1e2, 1e4, 1e6, 1e8, 1e32)
    eps = (0.125, 0.25, 0.5, 1.0, 2.0, 3.0)
    if quick:
        return Experiment("isrl-insurance", "relative_rmse", (Setting(10, 5),), (0.25, 1.0, 3.0), 3.0, 35,
                          trials=2, repetitions=1, mb_grid=proto.thin(mb, 5), local_grid=proto.thin(local, 5),
                          clip_norms=(1e2, 1e4, 1e32), nonprivate_clip=True, divergence_threshold=5e9,
                          **_construction_fields(construction), **_insurance_rules(construction))
    settings = tuple(Setting(n, m) for n in (3, 5, 10, 12) for m in sorted({n, math.ceil(n / 2)}, reverse=True))
    if construction == "authors":
        settings = (Setting(10, 5),)  # the script's default (N = 10, M = 5)
    return Experiment("isrl-insurance", "relative_rmse", settings, eps, 3.0, 35, trials=20, repetitions=3,
                      mb_grid=mb, local_grid=local, clip_norms=clips, nonprivate_clip=True, divergence_threshold=5e9,
                      **_construction_fields(construction), **_insurance_rules(construction))


def _insurance_rules(construction: str) -> dict:
    return {"silo_rules": "insurance-script" if construction == "authors" else "common"}


def obesity_experiment(quick: bool, construction: str = "paper") -> Experiment:
    """Fig. 6 (authors' code: R = 100, M = 3 of 7, K from ε_max = 9, last iterate); with
    ``construction="authors"`` also the script's single server-side noise draw."""
    fields = _construction_fields(construction) | {"server_noise": construction == "authors"}
    mb = proto.log_grid(-7.0, -1.0, 8)
    # Local SGD: the MB grid extended to smaller steps (as the authors'
    # script uses exp(linspace(-12, -2)) for DP Local SGD).
    local = proto.log_grid(-12.0, -1.0, 12)
    eps = (0.5, 1.0, 3.0, 6.0, 9.0)
    if quick:
        return Experiment("isrl-obesity", "test_error", (Setting(7, 3),), (0.5, 3.0, 9.0), 9.0, 100, trials=2,
                          repetitions=1, mb_grid=proto.thin(mb, 5), local_grid=proto.thin(local, 6),
                          mb_grid_scale="K", output="last", **fields)
    return Experiment("isrl-obesity", "test_error", (Setting(7, 3),), eps, 9.0, 100, trials=3, repetitions=3,
                      mb_grid=mb, local_grid=local, mb_grid_scale="K", output="last", **fields)


def mnist_lipschitz(fed) -> float:
    """L = 2 max ||x|| over ONE silo's training features (silo index 1, as the authors' script and
    the paper's Appendix I do). Clipping at L makes the guarantee hold for every silo; records of
    other silos with larger norms are clipped (about 9-12 % smaller sigma than the all-silo rule)."""
    return 2.0 * float(np.max(np.linalg.norm(np.asarray(fed.train_x[1], np.float64), axis=1)))


def mnist_task(data_dir: str | None = None, construction: str = "paper") -> Task:
    from dpjax.data import isrl_mnist_silos, load_mnist, pca_fit
    from dpjax.problems import LogisticRegression
    from dpjax.reproduce.isrl.authors_data import authors_mnist_silos

    mnist = load_mnist(data_dir)
    images, labels = mnist["train_images"], mnist["train_labels"]
    pca = pca_fit(images.reshape(images.shape[0], -1).astype(np.float64) / 255.0, 50)
    test_images = mnist["test_images"].reshape(mnist["test_images"].shape[0], -1).astype(np.float64) / 255.0
    official = ((test_images - pca.mean) @ pca.components[:50].T).astype(np.float32)
    official_y = (mnist["test_labels"] % 2 == 0).astype(np.int32)

    def data(num_silos: int, seed: int):
        if num_silos != 25:
            raise ValueError(f"num_silos={num_silos}: the MNIST task has the 25 (even, odd) pair silos")
        if construction == "authors":
            return authors_mnist_silos(images, labels, seed=seed, pca=pca)
        return isrl_mnist_silos(images, labels, seed=seed, pca=pca)

    # The official 10,000-image test set, parity labels (1 = even), projected with the same PCA:
    # beside the per-silo pooled test set, it shows the generalisation gap between constructions.
    return Task(data=data, problem=lambda fed: LogisticRegression(fed.train_x[0].shape[1]),
                lipschitz=mnist_lipschitz, extra_tests=lambda fed: {"official_test": (official, official_y)})


def insurance_task(data_dir: str | None = None, construction: str = "paper") -> Task:
    from dpjax.data import insurance_silos, load_insurance
    from dpjax.problems import LinearRegression

    raw = load_insurance(data_dir)
    ddof = 1 if construction == "authors" else 0  # the script standardises with pandas std() (ddof = 1)
    return Task(data=lambda n_silos, seed: insurance_silos(raw, n_silos=n_silos, seed=seed, ddof=ddof),
                problem=lambda fed: LinearRegression(fed.train_x[0].shape[1]), test_metric="rmse")


def obesity_task(data_dir: str | None = None, construction: str = "paper") -> Task:
    from dpjax.data import load_obesity, obesity_silos
    from dpjax.problems import SoftmaxRegression

    raw = load_obesity(data_dir)

    def data(num_silos: int, seed: int):
        if num_silos != 7:
            raise ValueError(f"num_silos={num_silos}: the obesity task has one silo per class (7)")
        # A fixed silo size keeps K, sigma and the compiled program identical across
        # trials (the smallest class's training count varies with the split; the
        # authors' script uses n_min = 202).
        if construction == "authors":
            # The script resamples every class to the smallest class's training count with replacement.
            return obesity_silos(raw, seed=seed, replace=True)
        return obesity_silos(raw, seed=seed, n_per_silo=OBESITY_SILO_SIZE)

    # L = 20 (>= 2 max ||x|| ~ 18.4, Appendix I), the authors' constant.
    return Task(data=data, problem=lambda fed: SoftmaxRegression(fed.train_x[0].shape[1], fed.num_classes),
                lipschitz=lambda fed: 20.0)


OBESITY_SILO_SIZE = 200

COMMON_NOTES = (
    "Sampling is fixed-size without replacement (spec I-8); the authors' scripts sample with replacement.",
    "Preprocessing, the Lipschitz constant L and the tuning itself are not private (as in the paper, App. J.1).",
    "Non-private baselines are the same compiled programs with σ = 0 (bit-identical to the non-private twins).",
)


AUTHORS_NOTES = (
    "Construction **authors**: the authors' public scripts (lowya/Private-Federated-Learning-Without-a-Trusted-Server) "
    "as run: minibatches drawn with replacement, K = int(n sqrt(ε_max/(4R))) (a floor), only the Appendix I σ; "
    "the realized RDP ε of the with-replacement schedule is accounted conservatively.",
)


TITLES = {"isrl-mnist": "ISRL-DP MNIST logistic regression (Fig. 4/7): test error vs ε",
          "isrl-insurance": "ISRL-DP insurance linear regression (Fig. 5/8/9): relative RMSE vs ε",
          "isrl-obesity": "ISRL-DP obesity softmax regression (Fig. 6): test error vs ε"}
