"""The ISRL-DP experiment protocol (Lowy & Razaviyayn, ICLR 2023, Section 6 / App. I).

Shared by the ``isrl-*`` figures (``dpjax.reproduce.isrl``):

* ``noise_table``: sigma per (calibration, epsilon) for Noisy MB-SGD or Local
  SGD, in the paper's Appendix I form (``"paper"``) or calibrated by a tight
  accountant for the run's actual sampling scheme under replace-one
  (``"tight"``, RDP for fixed-size sampling without replacement), with the
  epsilon a tight accountant certifies for that sigma (Appendix I's form is an add/remove
  calibration, not a replace-one certificate);
* ``run_grid``: every configuration of one trial and one algorithm family
  (calibration x epsilon x step size x clip x repetition, plus the non-private
  twin as sigma = 0) through the sweep's executor ``dpjax.sweep.run_grid``
  (fixed-size compiled chunks, so every trial reuses the same compilation;
  common random numbers per repetition); the data split is shared, not batched;
* ``select``: the paper's step-size selection by the mean over repetitions
  of a final training criterion: the excess risk F^(w) - F^* (the paper's;
  F^* from Newton's method, ``dpjax.reproduce.isrl_optimum``) or the training
  loss (same argmin: F^* is constant per trial); diverged runs count as an
  infinite loss;
* ``summarize``: 5th/95th-percentile error bars over trials (the
  paper-style figure is ``dpjax.sweep.plot.plot_panels``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from dpjax import _validate

# Algorithm labels used in results.csv and the figures.
MB = "isrl-dp-mbsgd"
LOCAL = "isrl-dp-local-sgd"
MB_NP = "mbsgd-nonprivate"
LOCAL_NP = "local-sgd-nonprivate"
LABELS = {
    MB: "ISRL-DP MB-SGD",
    LOCAL: "ISRL-DP Local SGD",
    MB_NP: "MB-SGD (non-private)",
    LOCAL_NP: "Local SGD (non-private)",
}
CALIBRATIONS = ("paper", "tight")
#: What the ``accountant`` column says for each calibration.
ACCOUNTANT_OF = {"paper": "paper-experiment", "tight": "rdp", "none": "none"}


def log_grid(lo: float, hi: float, num: int, scale: float = 1.0) -> tuple[float, ...]:
    """``scale * exp(linspace(lo, hi, num))`` (the authors' grids, evenly spaced exponents)."""
    _validate.check_int("num", num, min_value=1)
    _validate.check_positive("scale", scale)
    return tuple(float(scale * v) for v in np.exp(np.linspace(lo, hi, num)))


def thin(values: Sequence[float], count: int) -> tuple[float, ...]:
    """``count`` values of ``values`` spread evenly (keeps both ends); for quick modes."""
    _validate.check_int("count", count, min_value=1)
    values = tuple(values)
    if count >= len(values):
        return values
    idx = np.unique(np.round(np.linspace(0, len(values) - 1, count)).astype(int))
    return tuple(values[i] for i in idx)


# ---------------------------------------------------------------------------
# Noise calibration
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NoiseEntry:
    """sigma for a unit clip (L = 1; sigma scales linearly with L) and its certified epsilon."""

    calibration: str
    epsilon: float
    sigma_unit: float
    realized_epsilon: float  # tight accountant (RDP, actual sampling, replace-one) at this sigma
    accountant: str


def noise_table(
    kind: str,
    *,
    n: int,
    rounds: int,
    batch_size: int,
    epsilons: Sequence[float],
    delta: float,
    epsilon_max: float,
    calibrations: Sequence[str] = CALIBRATIONS,
    sampling: str = "without-replacement",
) -> dict[tuple[str, float], NoiseEntry]:
    """Noise per (calibration, epsilon) for ``kind`` in {"mbsgd", "local-sgd"}, at L = 1.

    ``"paper"``: Noisy MB-SGD sigma^2 = 8 ln(1/delta) R/(n^2 eps^2) (Appendix I;
    K is fixed by the caller from ``epsilon_max``); Local SGD
    sigma^2 = 8 R K ln(1/delta)/(n^2 eps^2) per local step (Appendix I).
    ``"tight"``: the smallest sigma the RDP accountant certifies at (eps, delta)
    for the run's schedule (fixed-size sampling without replacement of K (MB-SGD)
    or 1 (Local SGD, R K steps) records, replace-one, sensitivity 2L/K or 2L).
    Every entry carries the RDP epsilon of its sigma (``realized_epsilon``).
    ``sampling`` is MB-SGD's minibatch sampling (``"with-replacement"`` is
    accounted conservatively by the RDP accountant).
    """
    from dpjax.accounting import calibrate_noise, compute_epsilon, isrl_experiment_calibration
    from dpjax.accounting.isrl import isrl_local_sgd_paper_sigma

    _validate.check_choice("kind", kind, ("mbsgd", "local-sgd"))
    for c in calibrations:
        _validate.check_choice("calibrations[]", c, CALIBRATIONS)
    n = _validate.check_int("n", n, min_value=1)
    rounds = _validate.check_int("rounds", rounds, min_value=1)
    batch_size = _validate.check_int("batch_size", batch_size, min_value=1, max_value=n)
    delta = _validate.check_open_unit("delta", delta)
    # The schedules the algorithms themselves hand to the accountant (unit clip).
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.algorithms.local_sgd import LocalSgd
    from dpjax.problems import LogisticRegression

    unit = MbSgdHParams.create(1.0, 1.0, 1.0)
    if kind == "mbsgd":
        algo = NoisyMbSgd(LogisticRegression(1), num_rounds=rounds, batch_size=batch_size, sampling=sampling)
    else:
        algo = LocalSgd(LogisticRegression(1), num_rounds=rounds, local_steps=batch_size)
    schedule = algo.privacy([n], unit).schedule
    out = {}
    for eps in epsilons:
        eps = float(_validate.check_positive("epsilons[]", eps))
        for cal in calibrations:
            if cal == "paper":
                if kind == "mbsgd":
                    sigma = isrl_experiment_calibration(1.0, n, rounds, eps, delta, epsilon_max)[0]
                else:
                    sigma = isrl_local_sgd_paper_sigma(1.0, n, rounds, batch_size, eps, delta)
            else:
                sigma = calibrate_noise(schedule, eps, delta, "rdp")
            realized = compute_epsilon(schedule.replace(noise_std=sigma), delta, "rdp").epsilon
            out[(cal, eps)] = NoiseEntry(cal, eps, float(sigma), float(realized), ACCOUNTANT_OF[cal])
    return out


# ---------------------------------------------------------------------------
# One trial's grid as one compiled program
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Evaluator:
    """``eval_fn`` of a grid (hashable, so trials reuse the compiled program).

    Returns the pooled training loss and the test metric ``test_metric`` of
    the problem's ``evaluate`` (``"error"`` or ``"rmse"``).
    """

    problem: Any
    test_metric: str = "error"
    extra_tests: tuple[str, ...] = ()  # further test sets in eval_data, reported as columns of these names

    def __call__(self, params, data):
        tr = self.problem.evaluate(params, *data["train"])
        te = self.problem.evaluate(params, *data["test"])
        out = {"train_loss": tr["loss"], "test": te[self.test_metric]}
        for name in self.extra_tests:
            out[name] = self.problem.evaluate(params, *data[name])[self.test_metric]
        return out


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run of a grid. ``noise_std``/``clip_norm`` are absolute (already scaled by L)."""

    algorithm: str
    calibration: str
    epsilon: float
    learning_rate: float
    clip_norm: float
    noise_std: float
    repetition: int
    hp_index: int  # index of (learning_rate, clip_norm) in the tuning grid


def eval_data_for(train, test_x, test_y, extra: dict | None = None):
    """The ``eval_data`` of ``Evaluator``: pooled training rows, the pooled test set and
    any ``extra`` named test sets ``{name: (x, y)}``."""
    import jax.numpy as jnp

    out = {"train": train.pooled()}
    for name, (x, y) in [("test", (test_x, test_y))] + sorted((extra or {}).items()):
        out[name] = (jnp.asarray(x), jnp.asarray(y), jnp.ones(len(y), bool))
    return out


def run_grid(
    algorithm,
    train,
    eval_data,
    evaluator: Evaluator,
    specs: Sequence[RunSpec],
    key,
    *,
    divergence_threshold: float,
    chunk_size: int = 256,
    make_hparams=None,
) -> pd.DataFrame:
    """Runs every spec of one trial through ``dpjax.sweep.run_grid``; one row per run.

    Repetition ``r`` of every configuration uses ``keys.run_key(key, r)``
    (common random numbers across step sizes, epsilons and calibrations): the
    runs of one repetition share that key inside one program, so availability,
    batches and standard-normal draws are computed once and their gradients
    become matrix products (ISRL-DP Local SGD, 60 MNIST configurations: 1.1 s
    instead of 17 s with one key per run). Chunks of ``chunk_size`` runs within
    a repetition keep the compiled program the same for every chunk and every
    trial. A run is *diverged* if its iterate went non-finite or its final
    training loss exceeds ``divergence_threshold`` (the authors' guard); its
    ``train_loss`` is then +inf. Columns: the spec fields, ``train_loss``,
    ``test``, ``diverged``. ``make_hparams(spec)`` builds one run's hparams
    (default ``MbSgdHParams.create(learning_rate, noise_std, clip_norm)``).
    """
    import jax

    from dpjax import keys
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams
    from dpjax.engine import stack_hparams
    from dpjax.sweep import run_grid as execute

    if len(specs) == 0:
        raise ValueError("specs=[] must hold at least one run")
    _validate.check_positive("divergence_threshold", divergence_threshold, allow_inf=True)
    specs = list(specs)
    make = make_hparams or (lambda s: MbSgdHParams.create(s.learning_rate, s.noise_std, s.clip_norm))
    rep_keys = {r: keys.run_key(key, r) for r in sorted({int(s.repetition) for s in specs})}
    run_keys = jax.numpy.stack([rep_keys[int(s.repetition)] for s in specs])
    res = execute(algorithm, train, stack_hparams([make(s) for s in specs]), run_keys, eval_fn=evaluator,
                  eval_data=eval_data, common_random_numbers=True, chunk_size=chunk_size)
    tl = np.asarray(res.evals["train_loss"][:, -1], np.float64)
    bad = (res.diverged_round >= 0) | ~np.isfinite(tl) | (tl > divergence_threshold)
    df = pd.DataFrame([dataclasses.asdict(s) for s in specs])
    df["train_loss"] = np.where(bad, np.inf, tl)
    df["test"] = np.where(bad, np.nan, np.asarray(res.evals["test"][:, -1], np.float64))
    for name in evaluator.extra_tests:
        df[name] = np.where(bad, np.nan, np.asarray(res.evals[name][:, -1], np.float64))
    df["diverged"] = bad
    return df


def build_specs(
    *,
    private_name: str,
    nonprivate_name: str,
    noise: dict[tuple[str, float], NoiseEntry],
    learning_rates: Sequence[float],
    clip_norms: Sequence[float],
    repetitions: int,
    nonprivate_clip: bool,
) -> list[RunSpec]:
    """The runs of one algorithm family in one trial: for each (calibration, epsilon)
    in ``noise`` every (step size, clip) pair x repetition with sigma = sigma_unit * clip,
    plus the non-private twin (sigma = 0; clipped over ``clip_norms`` if
    ``nonprivate_clip``, else unclipped)."""
    _validate.check_int("repetitions", repetitions, min_value=1)
    if not learning_rates or not clip_norms:
        raise ValueError("learning_rates and clip_norms must be non-empty")
    pairs = [(lr, c) for lr in learning_rates for c in clip_norms]
    specs = []
    for (cal, eps), entry in sorted(noise.items()):
        for h, (lr, c) in enumerate(pairs):
            for r in range(repetitions):
                specs.append(RunSpec(private_name, cal, eps, lr, c, entry.sigma_unit * c, r, h))
    np_pairs = pairs if nonprivate_clip else [(lr, math.inf) for lr in learning_rates]
    for h, (lr, c) in enumerate(np_pairs):
        for r in range(repetitions):
            specs.append(RunSpec(nonprivate_name, "none", math.inf, lr, c, 0.0, r, h))
    return specs


# ---------------------------------------------------------------------------
# Selection, tidy rows, error bars
# ---------------------------------------------------------------------------


def select(runs: pd.DataFrame, by: Sequence[str], criterion: str = "train_loss") -> pd.DataFrame:
    """Per ``by`` group, the (step size, clip) with the lowest mean final ``criterion``
    (``"train_loss"`` or ``"excess_risk"``, a column of ``runs``).

    Uses ``dpjax.sweep.select.select_best`` (over ``hp_index``); adds the
    selected ``learning_rate``/``clip_norm``/``noise_std``, the mean
    ``train_loss`` (and ``excess_risk`` when present) of the selection, and
    ``edge`` (True when the selection hit an end of the step-size grid).
    """
    from dpjax.sweep.select import select_best

    _validate.check_choice("criterion", criterion, ("train_loss", "excess_risk"))
    best = select_best(runs, over="hp_index", by=list(by), criterion=criterion, report="test")
    extra_cols = [c for c in runs.columns if c.startswith("official_")]
    for col in ["train_loss", "excess_risk"] + extra_cols:
        if col != criterion and col in runs.columns:
            means = runs.groupby(list(by) + ["hp_index"])[col].mean().reset_index()
            best = best.merge(means, on=list(by) + ["hp_index"], how="left")
    first = runs.drop_duplicates(list(by) + ["hp_index"])[list(by) + ["hp_index", "learning_rate", "clip_norm", "noise_std"]]
    best = best.merge(first, on=list(by) + ["hp_index"], how="left")
    lrs = runs.groupby(list(by))["learning_rate"].agg(["min", "max"]).reset_index()
    best = best.merge(lrs, on=list(by), how="left")
    best["edge"] = np.isclose(best["learning_rate"], best["min"]) | np.isclose(best["learning_rate"], best["max"])
    return best.drop(columns=["min", "max"])


def summarize(selected: pd.DataFrame, value: str, lines: Sequence[str], clip=None) -> pd.DataFrame:
    """Mean and 5th/95th percentile bars over trials (``dpjax.sweep.select.error_bars``)."""
    from dpjax.sweep.select import error_bars

    return error_bars(selected, x="epsilon", value=value, lines=list(lines), clip=clip)


def tidy_rows(selected: pd.DataFrame, value_name: str, *, setting: dict, noise_by: dict | None = None) -> list[dict]:
    """results.csv rows of the selected configurations: one per algorithm x epsilon x trial x metric.

    ``noise_by[(algorithm, calibration, epsilon)]`` gives the ``NoiseEntry``
    whose tight-accountant epsilon is reported as metric ``realized_epsilon_rdp``.
    """
    rows = []
    for rec in selected.to_dict("records"):
        base = dict(setting) | {
            "algorithm": rec["algorithm"], "calibration": rec["calibration"], "epsilon": rec["epsilon"],
            "trial": rec["trial"], "accountant": ACCOUNTANT_OF[rec["calibration"]],
            "learning_rate": rec["learning_rate"], "clip_norm": rec["clip_norm"], "noise_std": rec["noise_std"],
            "n_reps": rec["n_reps"], "n_diverged": rec["n_diverged"], "lr_at_grid_edge": bool(rec["edge"]),
        }
        rows.append(base | {"metric": value_name, "value": rec["test"]})
        rows.append(base | {"metric": "train_loss", "value": rec["train_loss"]})
        if "excess_risk" in rec:
            rows.append(base | {"metric": "excess_risk", "value": rec["excess_risk"]})
        for col in (c for c in rec if c.startswith("official_")):
            rows.append(base | {"metric": f"{col.replace('_test', '')}_{value_name}", "value": rec[col]})
        if noise_by is not None and rec["calibration"] != "none":
            entry = noise_by[(rec["algorithm"], rec["calibration"], rec["epsilon"])]
            rows.append(base | {"metric": "realized_epsilon_rdp", "value": entry.realized_epsilon})
    return rows
