"""``dpjax reproduce correlated-noise``: test accuracy vs epsilon on MNIST for DP-SGD with Poisson sampling, DP-SGD
with balls-in-bins batches, tree-aggregation DP-FTRL and BandMF (amplified under cyclic Poisson sampling) at equal
certified epsilon and equal compute, with each noise strategy's prefix-sum RMSE.

Papers: Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu, "(Amplified) Banded Matrix Factorization: A
unified approach to private training", NeurIPS 2023 (Alg. 1, Thm 4); Chua, Ghazi, Harrison, Leeman, Kamath, Kumar,
Manurangsi, Sinha & Zhang, "Balls-and-Bins Sampling for DP-SGD", AISTATS 2025; Kairouz, McMahan, Song, Thakkar,
Thakurta & Xu, "Practical and Private (Deep) Learning without Sampling or Shuffling", ICML 2021 (Alg. 1); Abadi et
al., "Deep Learning with Differential Privacy", CCS 2016 (Alg. 1). The protocol is in ``config``, the calibration and
trainings in ``measure``, the files in ``outputs``. Writes ``results.csv`` (tidy), ``correlated_noise.png``,
``report.md`` and ``meta.json``. Its cross-device half, ``dpjax reproduce correlated-noise-fedavg`` (module
``fedavg``), does the same for DP-FedAvg over MNIST dealt to clients.
"""

from __future__ import annotations

import pathlib
import time

from dpjax.reproduce import register
from dpjax.reproduce.correlated_noise import config, measure, outputs

__all__ = ["correlated_noise"]


def _report_only(out: pathlib.Path, *, quick: bool) -> pathlib.Path:
    """Rewrites ``report.md`` and the figure of the kept run in ``out`` from its ``results.csv`` and ``meta.json``."""
    return outputs.rewrite_kept(out, "correlated_noise.png", outputs.plot, outputs.write_report)


# the cross-device half (DP-FedAvg over clients), registered as ``correlated-noise-fedavg``
from dpjax.reproduce.correlated_noise import fedavg  # noqa: E402,F401


@register("correlated-noise", report_only=_report_only)
def correlated_noise(out: pathlib.Path, *, quick: bool, seed: int, data_dir=None, cfg: dict | None = None
                     ) -> pathlib.Path:
    """Runs the protocol (``config.QUICK`` / ``config.FULL``, entries overridden by ``cfg``) into ``out``."""
    from dpjax import progress
    from dpjax.problems import FlaxProblem
    from dpjax.problems.mlp import MLP
    from dpjax.reproduce import report as rep

    out = rep.fresh_out(out, make=False)
    conf = {**(config.QUICK if quick else config.FULL), **(cfg or {})}
    start = time.perf_counter()
    progress.stage(f"correlated-noise: loading {conf['n_train']} + {conf['n_test']} MNIST images")
    data = measure.load_data(conf, seed, data_dir)  # before anything is written: a missing file leaves out empty
    out.mkdir(parents=True, exist_ok=True)
    problem = FlaxProblem(MLP(tuple(conf["hidden"]), 10), (784,), "softmax")
    fams = config.families(conf, problem)
    cal = measure.calibrations(conf, fams, with_pld=not quick)
    cal_seconds = time.perf_counter() - start
    runs = measure.train(conf, fams, cal, data, seed)
    rows = outputs.tidy_rows(cal, runs)
    rep.tidy_results(out, rows)
    meta = {"figure": "correlated-noise", "quick": quick, "seed": seed, "config": conf, "delta": config.DELTA,
            "accountant": config.ACCOUNTANT, "platform": rep.device_line(),
            "calibration_seconds": cal_seconds, "wall_seconds": time.perf_counter() - start}
    rep.write_meta(out, meta)
    outputs.plot(out / "correlated_noise.png", rows)
    return outputs.write_report(out, rows, meta)


# the cross-device half (DP-FedAvg over clients), registered as ``correlated-noise-fedavg``
from dpjax.reproduce.correlated_noise import fedavg  # noqa: E402,F401
