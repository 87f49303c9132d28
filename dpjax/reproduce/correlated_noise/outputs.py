"""The files of ``dpjax reproduce correlated-noise``: the tidy ``results.csv``, the figure and ``report.md``, all
built from the tidy rows (so ``--report-only`` rewrites a kept run's report from its ``results.csv``)."""

from __future__ import annotations

import math
import pathlib

import numpy as np

from dpjax.reproduce import report as rep
from dpjax.reproduce.correlated_noise import config as cfgmod

__all__ = ["tidy_rows", "plot", "accuracy_and_rmse_figure", "write_report", "rewrite_kept", "LABELS"]

LABELS = {"poisson": "DP-SGD, Poisson", "balls-in-bins": "DP-SGD, balls-in-bins", "tree-ftrl": "DP-FTRL, tree",
          "band-mf": "BandMF, cyclic Poisson (amplified)"}
#: calibration columns kept as metrics of the (method, epsilon) rows
CAL_METRICS = ("noise_multiplier", "certified_epsilon", "pld_epsilon", "rmse", "rmse_per_z", "max_per_z")


def tidy_rows(cal: list[dict], runs: list[dict], cal_metrics: tuple[str, ...] = CAL_METRICS) -> list[dict]:
    """One row per (method, epsilon, trial, metric): every run's test accuracy (trial = seed, with its step size) and
    every calibration's ``cal_metrics`` (trial 0)."""
    rows = []
    for r in cal:
        for m in cal_metrics:
            rows.append({"algorithm": r["method"], "epsilon": r["target_epsilon"], "trial": 0, "metric": m,
                         "value": r[m], "accountant": "pld" if m == "pld_epsilon" else cfgmod.ACCOUNTANT,
                         "learning_rate": float("nan"), "neighboring": r["neighboring"], "seconds": r["seconds"]})
    for r in runs:
        rows.append({"algorithm": r["method"], "epsilon": r["target_epsilon"], "trial": r["seed"],
                     "metric": "test_accuracy", "value": r["test_accuracy"], "accountant": cfgmod.ACCOUNTANT,
                     "learning_rate": r["learning_rate"], "neighboring": "", "seconds": r["train_seconds"]})
    return rows


def _value(rows, method, eps, metric):
    return next(r["value"] for r in rows if r["algorithm"] == method and r["epsilon"] == eps and r["metric"] == metric)


def summary(rows: list[dict]) -> dict:
    """(method, epsilon) -> the best step size's accuracies over the seeds (mean, min, max, list, step size)."""
    out = {}
    for method in dict.fromkeys(r["algorithm"] for r in rows):
        for eps in sorted({r["epsilon"] for r in rows if r["algorithm"] == method}):
            by_lr = {}
            for r in rows:
                if r["algorithm"] == method and r["epsilon"] == eps and r["metric"] == "test_accuracy":
                    by_lr.setdefault(r["learning_rate"], []).append(r["value"])
            if not by_lr:
                continue
            lr, accs = max(by_lr.items(), key=lambda kv: np.mean(kv[1]) if np.all(np.isfinite(kv[1])) else -1.0)
            a = np.asarray(accs, float)
            out[method, eps] = {"mean": float(np.mean(a)), "lo": float(np.min(a)), "hi": float(np.max(a)),
                                "all": a, "lr": lr}
    return out


def plot(path: pathlib.Path, rows: list[dict]) -> pathlib.Path:
    """Test accuracy vs epsilon (mean, bars: the range over the seeds) and each strategy's prefix-sum RMSE at the
    calibrated noise."""
    return accuracy_and_rmse_figure(path, rows, cfgmod.METHODS, LABELS, epsilon_label="epsilon (delta 1e-5, certified)",
                                    rmse_units="C/B", accuracy_title="MNIST MLP, equal epsilon and steps",
                                    title="correlated noise and batch selection at equal privacy")


def accuracy_and_rmse_figure(path: pathlib.Path, rows: list[dict], methods, labels: dict, *, epsilon_label: str,
                             rmse_units: str, accuracy_title: str, title: str) -> pathlib.Path:
    """Both halves' figure: test accuracy vs epsilon (mean, bars: the range over the seeds) of ``methods`` in that
    order, and each one's prefix-sum RMSE at the calibrated noise (units ``rmse_units``)."""
    from dpjax.sweep.plot import new_figure, save_figure

    best = summary(rows)
    fig, axes = new_figure(1, 2, panel=(5.0, 3.8))
    for i, method in enumerate(m for m in methods if any(k[0] == m for k in best)):
        eps = sorted(e for m, e in best if m == method)
        mean = np.array([best[method, e]["mean"] for e in eps])
        err = np.array([[best[method, e]["mean"] - best[method, e]["lo"] for e in eps],
                        [best[method, e]["hi"] - best[method, e]["mean"] for e in eps]])
        axes[0, 0].errorbar(eps, mean, yerr=err, fmt="o-", capsize=3, color=f"C{i}", label=labels[method])
        axes[0, 1].plot(eps, [_value(rows, method, e, "rmse") for e in eps], "o-", color=f"C{i}",
                        label=labels[method])
    axes[0, 0].set(xscale="log", xlabel=epsilon_label, ylabel="test accuracy", title=accuracy_title)
    axes[0, 1].set(xscale="log", yscale="log", xlabel=epsilon_label,
                   ylabel=f"prefix-sum noise RMSE (units of {rmse_units})", title="noise strategy RMSE at calibrated z")
    ticks = sorted({e for _, e in best})
    for ax in axes[0]:
        ax.set_xticks(ticks, [f"{e:g}" for e in ticks])  # the epsilon grid itself, not 2 x 10^0
        ax.minorticks_off()
        ax.legend(fontsize=7)
    return save_figure(fig, path, title=title)


def _fmt_acc(s) -> str:
    return f"{s['mean']:.4f} [{s['lo']:.4f}, {s['hi']:.4f}]"


def _looseness(rows, methods, epsilons) -> list[str]:
    """A bullet on how far each method's PLD epsilon sits below the RDP target it was calibrated to (RDP's slack
    differs between the events, so equal RDP epsilon is not equal PLD epsilon); none without PLD numbers."""
    e = epsilons[0]
    ratios = {m: _value(rows, m, e, "pld_epsilon") / e for m in methods}
    if not all(math.isfinite(x) for x in ratios.values()):
        return []
    return [f"- RDP's slack differs between the events: at RDP ε = {e:g} the PLD ε of the same run is "
            + ", ".join(f"{LABELS[m]} {ratios[m] * e:.3g}" for m in methods)
            + ". The comparison is at equal RDP ε; calibrated on PLD, the methods with the most slack (smallest "
              "PLD ε here) would get less noise."]


def write_report(out: pathlib.Path, rows: list[dict], meta: dict) -> pathlib.Path:
    """``report.md`` from the tidy rows and the run's ``meta.json`` entries."""
    cfg, quick = meta["config"], meta["quick"]
    best = summary(rows)
    methods = [m for m in cfgmod.METHODS if any(r["algorithm"] == m for r in rows)]
    epsilons = sorted({r["epsilon"] for r in rows})
    n, b, steps = cfg["n_train"], cfg["batch"], cfg["steps"]
    cal_table, worst = [], 0.0
    for m in methods:
        for e in epsilons:
            cert = _value(rows, m, e, "certified_epsilon")
            worst = max(worst, abs(cert / e - 1))
            pld = _value(rows, m, e, "pld_epsilon")
            cal_table.append([LABELS[m], f"{e:g}", f"{_value(rows, m, e, 'noise_multiplier'):.5f}", f"{cert:.9g}",
                              f"{cert / e - 1:+.1e}", "—" if not math.isfinite(pld) else f"{pld:.4f}",
                              f"{_value(rows, m, e, 'rmse_per_z'):.3f}", f"{_value(rows, m, e, 'max_per_z'):.3f}",
                              f"{_value(rows, m, e, 'rmse'):.3f}"])
    acc_table = [[LABELS[m]] + [_fmt_acc(best[m, e]) if (m, e) in best else "—" for e in epsilons] for m in methods]
    lrs = sorted({r["learning_rate"] for r in rows if r["metric"] == "test_accuracy"})
    winners = []
    for e in epsilons:
        ranked = sorted((best[m, e]["mean"], m) for m in methods if (m, e) in best)
        if ranked:
            winners.append(f"ε = {e:g}: best {LABELS[ranked[-1][1]]} ({ranked[-1][0]:.4f}), worst "
                           f"{LABELS[ranked[0][1]]} ({ranked[0][0]:.4f})")
    rmse_order = []
    for e in epsilons:
        ranked = sorted((_value(rows, m, e, "rmse"), m) for m in methods)
        rmse_order.append(f"ε = {e:g}: " + " < ".join(f"{LABELS[m]} {v:.2f}" for v, m in ranked))
    lines = [f"# Correlated noise and batch selection at equal ε on MNIST ({'quick' if quick else 'full'})", "",
             "DP-SGD with Poisson sampling (Abadi et al., CCS 2016), DP-SGD with balls-in-bins batches (Chua et al., "
             "AISTATS 2025), tree-aggregation DP-FTRL (Kairouz et al., ICML 2021) and BandMF under cyclic Poisson "
             "sampling (Choquette-Choo et al., NeurIPS 2023, amplified, Thm 4), at equal certified ε and equal "
             "compute. A measurement with dpjax's families, not a reproduction of a paper's figure: no paper number "
             "is claimed." + (" **Quick mode: a smoke test of every code path, not a measurement.**" if quick else ""),
             "", "## Protocol", "",
             f"- data: {n} MNIST training images (pixels / 255), {cfg['n_test']} test images; seeds 0..{cfg['seeds'] - 1} "
             f"(base seed {meta['seed']}): the noise, the batches and the initialisation differ per seed;",
             f"- model: MLP {tuple(cfg['hidden'])} tanh → 10, softmax cross-entropy; plain SGD at a constant step "
             f"(tried: {', '.join(f'{x:g}' for x in lrs)}; the best mean over seeds per cell, chosen on the test "
             "data as usual — that choice is not private), clip norm C = 1 per example;",
             f"- equal compute: every method runs R = {steps} steps at expected batch B = {b} ({steps * b / n:.2f} "
             f"epochs); Poisson q = B/n = {b / n:.4g}; balls-in-bins n/B = {n // b} bins an epoch; tree aggregation "
             f"blocks of B in a fixed order, the tree restarted every {n // b} rounds; BandMF b = {cfg['bands']} bands "
             f"(optimised for the R prefix sums), the records in {cfg['bands']} cyclic groups sampled at q = Bb/n = "
             f"{b * cfg['bands'] / n:.4g};",
             f"- equal ε: each method's noise multiplier z calibrated to every target ε at δ = {cfgmod.DELTA:g} by "
             "dpjax's calibration routine (`dpjax.accounting.calibration.smallest_scale`) on the certified ε of the "
             f"family's own `privacy()` spec ({cfgmod.ACCOUNTANT.upper()}, dp_accounting), bracket width "
             f"{cfgmod.REFINE_RTOL:g}: largest |certified ε / target − 1| = {worst:.1e}. PLD's ε at the same z is "
             "shown beside it (a tighter certificate of the same run).",
             "- neighbouring: add/remove for Poisson, balls-in-bins and BandMF; replace-one for tree aggregation "
             "(records at fixed stream positions; its sensitivity is 2C/B, twice the add/remove one). Balls-in-bins "
             "is certified **without** amplification (ceil(R / (n/B)) Gaussians, `dpjax.accounting.sampling_bins`): "
             "Chua et al.'s amplified ε exists only as a Monte Carlo estimate, which is not used here.", "",
             "## Calibration and noise RMSE", "",
             "RMSE: the noise in the R prefix sums of the released mean gradients (the SGD model is θ₀ − η × that "
             "sum), from each strategy (identity for independent noise, the tree's nodes, BandMF's C⁻¹), in units "
             "of C/B: per unit z (mean over the prefixes, and the last prefix), and at the calibrated z.", "",
             rep.markdown_table(cal_table, ["method", "target ε", "z", f"certified ε ({cfgmod.ACCOUNTANT})",
                                            "rel. diff", "PLD ε at z", "RMSE / z", "last prefix / z",
                                            "RMSE at z"]), "",
             "## Test accuracy", "",
             f"Mean over {cfg['seeds']} seeds [min, max over the seeds] at the best step size of each cell.", "",
             rep.markdown_table(acc_table, ["method"] + [f"ε = {e:g}" for e in epsilons]), "",
             "Measured (from the tables above):", "", *[f"- {w}" for w in winners],
             *[f"- noise RMSE at the calibrated z, {o}" for o in rmse_order], *_looseness(rows, methods, epsilons),
             "",
             "![figure](correlated_noise.png)", "",
             f"Platform: {meta.get('platform', '?')}; wall time {meta.get('wall_seconds', float('nan')):.0f} s "
             f"(calibration {meta.get('calibration_seconds', float('nan')):.0f} s)."]
    return rep.write_report(out, lines)


def rewrite_kept(out, figure: str, plot_fn, write_fn) -> pathlib.Path:
    """``--report-only`` of either half: redraws ``figure`` with ``plot_fn`` and rewrites ``report.md`` with
    ``write_fn`` from the kept run's ``results.csv`` and ``meta.json`` in ``out``."""
    import json

    import pandas as pd

    out = pathlib.Path(out)
    rows = pd.read_csv(out / "results.csv").to_dict("records")
    meta = json.loads((out / "meta.json").read_text())
    plot_fn(out / figure, rows)
    return write_fn(out, rows, meta)
