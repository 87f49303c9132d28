"""Running one ISRL-DP experiment: every panel's grid through the paper's protocol (selection by the
training excess risk, noise calibrations, realised epsilon)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from dpjax import _validate
from dpjax.reproduce import isrl_optimum, isrl_protocol as proto
from dpjax.reproduce.isrl.config import Experiment, Setting, Task
from dpjax.reproduce.isrl_protocol import LOCAL, LOCAL_NP, MB, MB_NP


# The driver


def _pooled_test(fed):
    if fed.pooled_test_x is not None:
        return np.asarray(fed.pooled_test_x), np.asarray(fed.pooled_test_y)
    return np.concatenate(fed.test_x), np.concatenate(fed.test_y)


@dataclasses.dataclass(frozen=True)
class Panel:
    """One trial of one setting as configuration: the data, the two families' grids
    (``dpjax.sweep.table.Family``), their noise tables and what ``meta.json`` records."""

    train: Any
    eval_data: Any
    evaluator: Any
    families: tuple
    noise: dict
    naive_rmse: float | None
    meta: dict


def realized_on_the_silos(table: dict, algo, n_min: int, delta: float) -> dict:
    """``table`` with every ``realized_epsilon`` recomputed for the run's own silos: the RDP epsilon that
    ``algo.privacy`` certifies at the smallest training silo (``n_min`` records) and the panel's delta.
    The insurance script calibrates Local SGD's sigma with n = ceil(1338/N), the silo size before the 80/20
    split; accounting it at that n (larger than every training silo: a smaller sampling rate) under-reported
    the run's epsilon (issue 23: nominal 0.25, 0.395 reported where 0.495 holds)."""
    from dpjax.accounting import compute_epsilon
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams

    schedule = algo.privacy([n_min], MbSgdHParams.create(1.0, 1.0, 1.0)).schedule
    return {key: dataclasses.replace(e, realized_epsilon=float(compute_epsilon(
        schedule.replace(noise_std=e.sigma_unit), delta, "rdp").epsilon)) for key, e in table.items()}


def _panel(exp: Experiment, task: Task, setting: Setting, fed, grid_log: list[dict], context: dict) -> Panel:
    """ISRL-DP MB-SGD and Local SGD on ``fed`` with the protocol of the module docstring."""
    from dpjax.reproduce.isrl.constructions import (experiment_batch_size, insurance_script_mbsgd, minibatch_sampling,
                                                    server_noise_equivalent)
    from dpjax.algorithms.isrl_mbsgd import NoisyMbSgd
    from dpjax.algorithms.local_sgd import LocalSgd
    from dpjax.engine import SiloData
    from dpjax.primitives import FixedAvailability
    from dpjax.sweep import table

    train = SiloData.from_silos(fed.train_x, fed.train_y)
    _validate.check_le("silos_per_round", setting.silos_per_round, "num_silos", train.num_silos)
    problem = task.problem(fed)
    n = train.min_size
    delta = 1.0 / n**2
    # The insurance script takes K and Local SGD's noise from n = ceil(1338/N), the silo
    # size before its 80/20 split; elsewhere n is the (smallest) training size.
    n_script = int(fed.metadata["group_size"]) if exp.silo_rules == "insurance-script" else n
    k = experiment_batch_size(n_script, exp.rounds, exp.epsilon_max, exp.construction)
    clips = (float(task.lipschitz(fed)),) if exp.clip_norms is None else tuple(exp.clip_norms)
    mb_lrs = tuple({"M": setting.silos_per_round, "K": k, "1": 1}[exp.mb_grid_scale] * v for v in exp.mb_grid)
    sampling = minibatch_sampling(exp.construction)
    common = {"rounds": exp.rounds, "batch_size": k, "epsilons": tuple(float(e) for e in exp.epsilons),
              "epsilon_max": float(exp.epsilon_max), "calibrations": tuple(exp.calibrations)}
    noise = {MB: proto.noise_table("mbsgd", n=n, delta=delta, sampling=sampling, **common),
             LOCAL: proto.noise_table("local-sgd", n=n_script, delta=1.0 / n_script**2, **common)}
    if exp.server_noise:
        noise[MB] = server_noise_equivalent(noise[MB], setting.silos_per_round, k)
    avail = FixedAvailability(setting.silos_per_round)
    mb_algo = NoisyMbSgd(problem, num_rounds=exp.rounds, batch_size=k, sampling=sampling, availability=avail,
                         output=exp.output)
    mb_make = proto.spec_hparams(mb_algo, train.silo_sizes())
    if exp.silo_rules == "insurance-script":
        mb_algo, mb_make, noise[MB] = insurance_script_mbsgd(
            problem, rounds=exp.rounds, batch_size=k, availability=avail, output=exp.output,
            silo_sizes=train.silo_sizes(), n_ref=n, delta=delta, noise=noise[MB])
    local_algo = LocalSgd(problem, num_rounds=exp.rounds, local_steps=k, availability=avail, output=exp.output)
    if n_script != n:
        noise[LOCAL] = realized_on_the_silos(noise[LOCAL], local_algo, n, delta)

    def family(priv, nonpriv, algo, lrs, make):
        runs = {"private_name": priv, "nonprivate_name": nonpriv, "noise": noise[priv], "clip_norms": clips,
                "repetitions": exp.repetitions, "nonprivate_clip": exp.nonprivate_clip}

        def extend(requests, done):
            grid_log.extend(context | {"algorithm": nonpriv if r["calibration"] == "none" else priv} | r
                            for r in requests)
            return proto.extension_specs(requests, done, **runs)

        return table.Family(algo, proto.build_specs(learning_rates=lrs, **runs), extend, make)

    test_x, test_y = _pooled_test(fed)
    extra = task.extra_tests(fed) if task.extra_tests is not None else {}
    naive = None
    if exp.metric == "relative_rmse":
        naive = float(np.sqrt(np.mean((np.asarray(test_y, np.float64) - float(fed.metadata["y_train_mean"])) ** 2)))
    meta = {"n_min": n, "silo_sizes": list(train.silo_sizes()), "K": k, "delta": delta, "dim": problem.dim,
            "sampling": sampling, "noise_placement": "server (one draw)" if exp.server_noise else "per silo",
            "silo_rules": exp.silo_rules, "n_for_K": n_script, "clip_norms": list(clips),
            "mb_learning_rates": list(mb_lrs), "local_learning_rates": list(exp.local_grid)}
    return Panel(train, table.eval_data_for(train, test_x, test_y, extra),
                 table.Evaluator(problem, task.test_metric, tuple(sorted(extra))),
                 (family(MB, MB_NP, mb_algo, mb_lrs, mb_make),
                  family(LOCAL, LOCAL_NP, local_algo, exp.local_grid, proto.spec_hparams(local_algo, train.silo_sizes()))),
                 noise, naive, meta)


#: Grid extensions get a narrow program of their own (``table.extension_width``) when each program serves at
#: least this many (trial, repetition) pairs: a second program costs one compilation (~3 s CPU for the
#: MNIST Local SGD chunk) and saves per extension call what the dropped lanes cost (MNIST Local SGD, M = 25:
#: 130 -> 13 lanes ~2.2 s, 35 -> 7 lanes ~0.8 s CPU; ``experiments/benchmarks/bench_isrl_chunk_width.py``).
#: The quick protocols (2 trials x 1 repetition) keep the first grid's program; the full ones (3-20 trials x
#: 3 repetitions) go narrow. Results are bit-identical either way (measured on isrl-mnist).
NARROW_FROM = 4


def run_experiment(exp: Experiment, task: Task, *, seed: int, log: Callable[[str], None] = print) -> dict:
    """Runs every trial of ``exp``; returns ``{"runs", "selected", "noise", "meta", "optimum"}``.

    Per trial and setting: the MB-SGD and Local SGD families' grids (calibration x epsilon x step size [x clip] x
    repetition + non-private) through ``dpjax.sweep.table.run_families``, each step-size grid extended where the
    selection sits at an end (at most ``exp.max_grid_extensions`` per side and group). Per trial and number of silos:
    F^*, w* and upsilon*^2 by Newton's method on the pooled training data (``isrl_optimum.pooled_optimum``; rows of
    ``optimum``); every run gets ``excess_risk = train_loss - F^*`` and the selection minimises its mean.
    """
    from dpjax import keys
    from dpjax.sweep import table

    _validate.check_int("seed", seed, min_value=0)
    all_runs, noise_rows, optimum_rows, meta = [], [], [], {"settings": {}, "construction": exp.construction}
    grid_log: list[dict] = []
    for trial in range(exp.trials):
        data: dict[int, Any] = {}
        f_star: dict[int, float] = {}
        for setting in exp.settings:
            t0 = time.perf_counter()
            if setting.num_silos not in data:
                data[setting.num_silos] = fed = task.data(setting.num_silos, seed * 1000 + trial)
                opt = isrl_optimum.pooled_optimum(task.problem(fed), fed.train_x, fed.train_y)
                f_star[setting.num_silos] = opt.loss
                optimum_rows.append({"trial": trial, "num_silos": setting.num_silos} | opt.as_dict())
            context = {"trial": trial, "num_silos": setting.num_silos, "silos_per_round": setting.silos_per_round}
            panel = _panel(exp, task, setting, data[setting.num_silos], grid_log, context)
            key = keys.run_key(seed, trial, 1000 * setting.num_silos + setting.silos_per_round)
            for df in table.run_families(panel.families, panel.train, panel.eval_data, panel.evaluator, key,
                                         divergence_threshold=exp.divergence_threshold,
                                         extend_by=["calibration", "epsilon"], criterion="train_loss",
                                         column="learning_rate", max_extensions=exp.max_grid_extensions,
                                         narrow_extensions=exp.trials * exp.repetitions >= NARROW_FROM):
                df["excess_risk"] = isrl_optimum.excess_risk(df["train_loss"], f_star[setting.num_silos])
                if panel.naive_rmse is not None:
                    df["test"] = df["test"] / panel.naive_rmse
                all_runs.append(df.assign(**context))
            if trial == 0:
                meta["settings"][setting.label] = panel.meta
                noise_rows += [{"setting": setting.label, "algorithm": fam, "calibration": cal, "epsilon": e,
                                "sigma_over_L": entry.sigma_unit, "realized_epsilon_rdp": entry.realized_epsilon}
                               for fam, tab in panel.noise.items() for (cal, e), entry in tab.items()]
            log(f"[{exp.name}] trial {trial + 1}/{exp.trials} {setting.label}: {time.perf_counter() - t0:.1f} s")
    runs = pd.concat(all_runs, ignore_index=True)
    selected = proto.select(runs, ["num_silos", "silos_per_round", "algorithm", "calibration", "epsilon", "trial"],
                            criterion="excess_risk")
    optimum = pd.DataFrame(optimum_rows)
    meta["selection_criterion"] = "mean final training excess risk F^(w) - F^* over repetitions"
    meta["grid_extensions"] = grid_log
    meta["pooled_optimum"] = optimum_rows
    for st in exp.settings:
        rows = optimum[optimum.num_silos == st.num_silos]
        meta["settings"][st.label] |= {"upsilon_star_sq": float(rows.upsilon_star_sq.mean()),
                                       "F_star_by_trial": [float(v) for v in rows.F_star]}
    return {"runs": runs, "selected": selected, "noise": pd.DataFrame(noise_rows), "meta": meta, "optimum": optimum}
