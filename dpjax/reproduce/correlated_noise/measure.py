"""The measurements of ``dpjax reproduce correlated-noise``: calibration of every (method, epsilon) and the trainings
(one ``dpjax.engine.run_grid`` per method: every epsilon x step size x seed of it vmapped in one compiled program)."""

from __future__ import annotations

import time

import numpy as np

from dpjax.reproduce.correlated_noise import config as cfgmod

__all__ = ["load_data", "calibrations", "train"]


def load_data(cfg: dict, seed: int, data_dir=None):
    """``(x_train, y_train, x_test, y_test)``: MNIST pixels / 255 flattened; a uniform subset (``seed``) when the
    configuration asks for fewer images than the split holds."""
    from dpjax.data import load_mnist
    from dpjax.data.paths import DatasetNotFoundError

    try:
        d = load_mnist(data_dir)
    except DatasetNotFoundError as err:  # the CLI reports ValueErrors in one line
        raise ValueError(str(err)) from None
    rng = np.random.default_rng(seed)

    def take(images, labels, n):
        idx = np.sort(rng.choice(len(labels), n, replace=False)) if n < len(labels) else np.arange(len(labels))
        return images[idx].reshape(n, -1).astype(np.float32) / 255.0, labels[idx].astype(np.int32)

    return (*take(d["train_images"], d["train_labels"], cfg["n_train"]),
            *take(d["test_images"], d["test_labels"], cfg["n_test"]))


def calibrations(cfg: dict, fams: dict, with_pld: bool) -> list[dict]:
    """One row per (method, target epsilon): z, the certified epsilon (``ACCOUNTANT``), PLD's at the same z
    (``with_pld``), the strategy's RMSE and the seconds it took."""
    from dpjax import progress
    from dpjax.algorithms import band_mf_sgd

    rows = []
    for method, (fam, hp) in fams.items():
        coeffs = (band_mf_sgd.strategy_coeffs(cfg["steps"], fam.bands, fam.band_coeffs) if method == "band-mf"
                  else None)
        for eps in cfg["epsilons"]:
            progress.stage(f"correlated-noise: calibrating {method} at epsilon {eps:g}")
            t0 = time.perf_counter()
            z, certified = cfgmod.calibrate(fam, hp, cfg["n_train"], eps)
            pld = (fam.privacy([cfg["n_train"]], hp.create(1.0, z, 1.0)).epsilon(cfgmod.DELTA, "pld").epsilon
                   if with_pld else float("nan"))
            rows.append({"method": method, "target_epsilon": eps, "noise_multiplier": z,
                         "certified_epsilon": certified, "pld_epsilon": pld,
                         "neighboring": fam.neighboring if hasattr(fam, "neighboring") else "replace-one",
                         **cfgmod.noise_rmse(method, cfg, z, coeffs), "seconds": time.perf_counter() - t0})
    return rows


def final_accuracy(fam, data, hparams: list, run_seeds: list[int], seed: int, n_seeds: int, eval_data, stage: str):
    """Final test accuracy of each run, its divergence round and the wall seconds: one ``run_grid`` over the stacked
    ``hparams``, run i keyed ``fold_in(key of its seed run_seeds[i], i)``, one chunk per seed (each seed's chunk starts
    from its own first key's initialisation). Both halves of the reproduction train through it."""
    import jax

    from dpjax import progress
    from dpjax.engine import run_grid, stack_hparams

    keys = jax.random.split(jax.random.key(seed), n_seeds)
    run_keys = jax.numpy.stack([jax.random.fold_in(keys[s], i) for i, s in enumerate(run_seeds)])
    problem = fam.problem

    def eval_fn(params, ed):
        return {"test_accuracy": 1.0 - problem.evaluate(params, ed[0], ed[1])["error"]}

    progress.stage(stage)
    t0 = time.perf_counter()
    res = run_grid(fam, data, stack_hparams(hparams), run_keys, eval_fn=eval_fn, eval_data=eval_data,
                   common_random_numbers=False, chunk_size=len(run_seeds) // n_seeds)
    return np.asarray(res.evals["test_accuracy"])[:, -1], np.asarray(res.diverged_round), time.perf_counter() - t0


def train(cfg: dict, fams: dict, cal: list[dict], data, seed: int) -> list[dict]:
    """Test accuracy of every (method, epsilon, step size, seed): one ``final_accuracy`` grid per method, the runs
    ordered by seed."""
    from dpjax.engine import SiloData

    xtr, ytr, xte, yte = data
    silos = SiloData.from_silos([xtr], [ytr])
    rows = []
    for method, (fam, hp) in fams.items():
        zs = {r["target_epsilon"]: r["noise_multiplier"] for r in cal if r["method"] == method}
        grid = [(s, eps, lr) for s in range(cfg["seeds"]) for eps in cfg["epsilons"] for lr in cfg["lrs"]]
        acc, diverged, wall = final_accuracy(
            fam, silos, [hp.create(lr, zs[eps], 1.0) for _, eps, lr in grid], [s for s, _, _ in grid], seed,
            cfg["seeds"], (xte, yte), f"correlated-noise: training {method} ({len(grid)} runs x {cfg['steps']} steps)")
        for (s, eps, lr), a, bad in zip(grid, acc, diverged):
            rows.append({"method": method, "target_epsilon": eps, "learning_rate": lr, "seed": s,
                         "test_accuracy": float(a) if bad < 0 else float("nan"), "train_seconds": wall})
    return rows
