"""The ISRL-DP experiment protocol (Lowy & Razaviyayn, ICLR 2023, Section 6 / App. I).

The paper-specific pieces of the ``isrl-*`` figures (``dpjax.reproduce.isrl``); the grid runs through the one
experiment pipeline (``dpjax.sweep.table``: run specs -> compiled chunks -> one row per run; ``dpjax.sweep.select``:
selection by the mean criterion over repetitions and the step-size grid extension):

* ``noise_table``: sigma per (calibration, epsilon) for Noisy MB-SGD or Local SGD, in the paper's Appendix I form
  (``"paper"``) or calibrated by a tight accountant for the run's actual sampling scheme under replace-one
  (``"tight"``, RDP for fixed-size sampling without replacement), with the epsilon a tight accountant certifies for
  that sigma (Appendix I's form is an add/remove calibration, not a replace-one certificate);
* ``build_specs``/``extension_specs``: the runs of one trial and one algorithm family (calibration x epsilon x step
  size x clip x repetition, plus the non-private twin as sigma = 0);
* ``select``: the paper's step-size selection by the mean over repetitions of a final training criterion: the excess
  risk F^(w) - F^* (the paper's; F^* from Newton's method, ``dpjax.reproduce.isrl_optimum``) or the training loss
  (same argmin: F^* is constant per trial); diverged runs count as an infinite loss;
* ``tidy_rows``: results.csv rows of the selected configurations.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
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


# Noise calibration


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

    ``"paper"``: Noisy MB-SGD sigma^2 = 8 ln(1/delta) R/(n^2 eps^2) (Appendix I; K is fixed by the caller from
    ``epsilon_max``); Local SGD sigma^2 = 8 R K ln(1/delta)/(n^2 eps^2) per local step (Appendix I). ``"tight"``: the
    smallest sigma the RDP accountant certifies at (eps, delta) for the run's schedule (fixed-size sampling without
    replacement of K (MB-SGD) or 1 (Local SGD, R K steps) records, replace-one, sensitivity 2L/K or 2L). Every entry
    carries the RDP epsilon of its sigma (``realized_epsilon``). ``sampling`` is MB-SGD's minibatch sampling
    (``"with-replacement"`` is accounted conservatively by the RDP accountant). Tables are cached (every trial of a
    figure asks for the same ones).
    """
    return dict(_noise_table(kind, n, rounds, batch_size, tuple(epsilons), delta, epsilon_max, tuple(calibrations),
                             sampling))


@functools.lru_cache(maxsize=256)
def _noise_table(kind, n, rounds, batch_size, epsilons, delta, epsilon_max, calibrations, sampling):
    import dataclasses as dc

    from dpjax.accounting import isrl_experiment_calibration
    from dpjax.accounting.isrl import isrl_local_sgd_paper_sigma

    _validate.check_choice("kind", kind, ("mbsgd", "local-sgd"))
    for c in calibrations:
        _validate.check_choice("calibrations[]", c, CALIBRATIONS)
    n = _validate.check_int("n", n, min_value=1)
    rounds = _validate.check_int("rounds", rounds, min_value=1)
    batch_size = _validate.check_int("batch_size", batch_size, min_value=1, max_value=n)
    delta = _validate.check_open_unit("delta", delta)
    # The privacy specs the algorithms themselves hand to the accountant (unit clip), and their
    # messages' sensitivity at L = 1 (2/K or 2): sigma_unit = noise multiplier x that sensitivity.
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.algorithms.local_sgd import LocalSgd
    from dpjax.problems import LogisticRegression

    unit = MbSgdHParams.create(1.0, 1.0, 1.0)
    if kind == "mbsgd":
        algo = NoisyMbSgd(LogisticRegression(1), num_rounds=rounds, batch_size=batch_size, sampling=sampling)
    else:
        algo = LocalSgd(LogisticRegression(1), num_rounds=rounds, local_steps=batch_size)
    spec = algo.privacy([n], unit)
    sensitivity = algo.message_sensitivity(unit, [n])
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
                sigma = spec.calibrate(eps, delta, "rdp")["noise_multiplier"] * sensitivity
            at_sigma = dc.replace(unit, noise_multiplier=sigma / sensitivity)
            realized = algo.privacy([n], at_sigma).epsilon(delta, "rdp").epsilon
            out[(cal, eps)] = NoiseEntry(cal, eps, float(sigma), float(realized), ACCOUNTANT_OF[cal])
    return out


# One trial's runs


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run of a grid. ``noise_std``/``clip_norm`` are absolute (already scaled by L); a family's
    hparams take the noise multiplier ``noise_std / sensitivity`` (``spec_hparams``)."""

    algorithm: str
    calibration: str
    epsilon: float
    learning_rate: float
    clip_norm: float
    noise_std: float
    repetition: int
    hp_index: int  # index of (learning_rate, clip_norm) in the tuning grid


@functools.lru_cache(maxsize=256)
def hparams_maker(algorithm, silo_sizes: tuple, per_silo_factors: tuple | None = None) -> Callable[..., Any]:
    """``make_values(learning_rate, clip_norm, noise_std)``: ``algorithm``'s hparams at an absolute noise std
    (times ``per_silo_factors`` per silo, if given), converted to its noise multiplier by its own message
    sensitivity (``noise_multiplier_for``). Cached per (algorithm, silo sizes, factors) for the process and per
    value triple inside: an ISRL figure asks for the same few thousand triples in every trial and panel
    (isrl-insurance full: about 200,000 requests), and each new hparams object costs tens of eager scalar
    JAX ops (validation, the clipper's bound; 0.78 ms). hparams are immutable, so sharing them is safe;
    ``algorithm`` must be hashable (frozen dataclasses are), and equal algorithms give equal hparams."""
    factors = None if per_silo_factors is None else np.asarray(per_silo_factors, np.float64)

    @functools.lru_cache(maxsize=None)
    def make_values(learning_rate, clip_norm, noise_std):
        hp = algorithm.hparams_from_values(learning_rate=learning_rate, clip_norm=clip_norm)
        std = noise_std if factors is None else noise_std * factors
        z = algorithm.noise_multiplier_for(std, hp, silo_sizes)
        return algorithm.hparams_from_values(learning_rate=learning_rate, clip_norm=clip_norm, noise_multiplier=z)

    return make_values


def spec_hparams(algorithm, silo_sizes):
    """``make_hparams(spec)`` for ``dpjax.sweep.table``: the family's hparams of a run spec, its absolute ``noise_std``
    converted by the family's own message sensitivity at the spec's clip (``noise_multiplier_for``)."""

    # One hparams object per distinct (algorithm, silo sizes, step size, clip, noise std) for the whole process:
    # a grid's repetitions, its extensions' re-requests and every later trial and panel with the same silos
    # share them (hparams_maker). Each costs tens of eager scalar JAX ops (0.78 ms).
    make_values = hparams_maker(algorithm, tuple(int(s) for s in silo_sizes))

    def make(spec: RunSpec):
        return make_values(spec.learning_rate, spec.clip_norm, spec.noise_std)

    return make


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
    """The runs of one algorithm family in one trial: for each (calibration, epsilon) in ``noise`` every (step size,
    clip) pair x repetition with sigma = sigma_unit * clip, plus the non-private twin (sigma = 0; clipped over
    ``clip_norms`` if ``nonprivate_clip``, else unclipped)."""
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


def extension_specs(
    requests: Sequence[dict],
    runs: pd.DataFrame,
    *,
    private_name: str,
    nonprivate_name: str,
    noise: dict[tuple[str, float], NoiseEntry],
    clip_norms: Sequence[float],
    repetitions: int,
    nonprivate_clip: bool,
) -> list[RunSpec]:
    """The runs of step-size grid extensions (``dpjax.sweep.select.extend_grid_at_edges``
    requests: a (calibration, epsilon) group and its new ``learning_rate``), as
    ``build_specs`` would have made them, with ``hp_index`` values after those of ``runs``."""
    next_h = int(runs["hp_index"].max()) + 1
    specs = []
    for j, req in enumerate(requests):
        cal, eps, lr = req["calibration"], req["epsilon"], req["learning_rate"]
        name = nonprivate_name if cal == "none" else private_name
        for c_i, c in enumerate(clip_norms if cal != "none" or nonprivate_clip else (math.inf,)):
            sigma = 0.0 if cal == "none" else noise[(cal, eps)].sigma_unit * c
            for r in range(repetitions):
                specs.append(RunSpec(name, cal, eps, lr, c, sigma, r, next_h + j * len(clip_norms) + c_i))
    return specs


# Selection, tidy rows


def select(runs: pd.DataFrame, by: Sequence[str], criterion: str = "train_loss") -> pd.DataFrame:
    """Per ``by`` group, the (step size, clip) with the lowest mean final ``criterion``
    (``"train_loss"`` or ``"excess_risk"``, a column of ``runs``).

    ``dpjax.sweep.select.select_mean`` over ``hp_index``: the selected ``learning_rate``/``clip_norm``/``noise_std``,
    the mean ``test``, ``train_loss`` (and ``excess_risk``, ``official_*`` when present) of the selection, and
    ``edge`` (True when the selection hit an end of the step-size grid).
    """
    from dpjax.sweep.select import select_mean

    _validate.check_choice("criterion", criterion, ("train_loss", "excess_risk"))
    extra_cols = [c for c in runs.columns if c.startswith("official_")]
    means = [c for c in ["train_loss", "excess_risk"] + extra_cols if c != criterion and c in runs.columns]
    return select_mean(runs, by, over="hp_index", criterion=criterion, report="test", mean_columns=means,
                       first_columns=("learning_rate", "clip_norm", "noise_std"), edge_column="learning_rate")


def tidy_rows(selected: pd.DataFrame, value_name: str, *, setting: dict, noise_by: dict | None = None) -> list[dict]:
    """results.csv rows of the selected configurations: one per algorithm x epsilon x trial x metric.

    ``noise_by[(algorithm, calibration, epsilon)]`` gives the ``NoiseEntry`` whose tight-accountant epsilon is
    reported as metric ``realized_epsilon_rdp``.
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
