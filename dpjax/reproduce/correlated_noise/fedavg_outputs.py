"""The files of ``dpjax reproduce correlated-noise-fedavg``: the tidy ``results.csv``, the figure and ``report.md``,
all built from the tidy rows (so ``--report-only`` rewrites a kept run's report from its ``results.csv``)."""

from __future__ import annotations

import math
import pathlib


from dpjax.reproduce import report as rep
from dpjax.reproduce.correlated_noise import config as cfgmod
from dpjax.reproduce.correlated_noise import outputs
from dpjax.reproduce.correlated_noise.outputs import summary

__all__ = ["tidy_rows", "plot", "write_report", "compare", "LABELS"]

#: the methods in ``fedavg.METHODS``' order (kept here so this module does not import the protocol's)
LABELS = {"poisson": "DP-FedAvg, Poisson clients", "band-mf": "BandMF, cyclic Poisson (amplified)",
          "band-mf-min-sep": "BandMF, min-separation (no amplification)"}
METHODS = tuple(LABELS)
CAL_METRICS = ("noise_multiplier", "certified_epsilon", "pld_epsilon", "rmse", "rmse_per_z", "max_per_z", "bands")
#: the verdict rule: a claim over the epsilon axis is judged only from at least this many epsilons spanning at least
#: a decade (``dpjax.sweep.select``'s MIN_POINTS / MIN_DECADES: "a verdict is no stronger than its data")
MIN_POINTS, MIN_DECADES = 4, 1.0


def tidy_rows(cal: list[dict], runs: list[dict]) -> list[dict]:
    """One row per (method, epsilon, trial, metric): every run's test accuracy (trial = seed) and every calibration's
    numbers, the bands included (trial 0); the central half's layout."""
    return outputs.tidy_rows(cal, runs, cal_metrics=CAL_METRICS)


def _value(rows, method, eps, metric):
    return next(r["value"] for r in rows if r["algorithm"] == method and r["epsilon"] == eps and r["metric"] == metric)


def _fmt_acc(s) -> str:
    return f"{s['mean']:.4f} [{s['lo']:.4f}, {s['hi']:.4f}]"


def compare(best: dict, method: str, baseline: str, epsilons) -> dict:
    """``method`` against ``baseline`` in test accuracy over the epsilon grid.

    Per epsilon, the interval of the difference is the difference of the two seed ranges, ``[min(method) -
    max(baseline), max(method) - min(baseline)]`` (no pairing: the two families draw their cohorts and noise
    differently): ``better`` if it lies above 0, ``worse`` if below, ``tie`` if it holds 0. Over the grid: ``better`` /
    ``worse`` only when every epsilon says so and the grid has >= ``MIN_POINTS`` epsilons spanning >= ``MIN_DECADES``
    decades; ``mixed`` when the epsilons disagree; ``inconclusive`` otherwise."""
    per = {}
    for e in epsilons:
        if (method, e) not in best or (baseline, e) not in best:
            continue
        a, b = best[method, e], best[baseline, e]
        lo, hi = a["lo"] - b["hi"], a["hi"] - b["lo"]
        per[e] = {"diff": a["mean"] - b["mean"], "lo": lo, "hi": hi,
                  "call": "better" if lo > 0 else "worse" if hi < 0 else "tie"}
    calls = {v["call"] for v in per.values()}
    eps = sorted(per)
    decades = math.log10(eps[-1] / eps[0]) if len(eps) > 1 else 0.0
    if len(eps) < MIN_POINTS or decades < MIN_DECADES - 1e-9:
        overall, why = "inconclusive", (f"{len(eps)} epsilon(s) over {decades:.2f} decades (need >= {MIN_POINTS} over "
                                        f">= {MIN_DECADES:g})")
    elif calls == {"better"} or calls == {"worse"}:
        overall, why = calls.pop(), f"at all {len(eps)} epsilons over {decades:.1f} decades"
    elif len(calls) == 1:
        overall, why = "inconclusive", f"the seed ranges overlap at all {len(eps)} epsilons"
    else:
        overall, why = "mixed", ", ".join(f"{c} at ε = {', '.join(f'{e:g}' for e in eps if per[e]['call'] == c)}"
                                          for c in ("better", "tie", "worse") if c in calls)
    return {"per": per, "overall": overall, "why": why}


def plot(path: pathlib.Path, rows: list[dict]) -> pathlib.Path:
    """Test accuracy vs epsilon (mean, bars: the range over the seeds) and each strategy's prefix-sum RMSE at the
    calibrated noise."""
    return outputs.accuracy_and_rmse_figure(
        path, rows, METHODS, LABELS, epsilon_label="user-level epsilon (delta 1e-5, certified)", rmse_units="C/m",
        accuracy_title="MNIST MLP over clients, equal epsilon and rounds",
        title="DP-FedAvg cross-device: correlated noise at equal privacy")


def _verdict_lines(best, methods, epsilons) -> list[str]:
    lines = []
    for method in (m for m in methods if m != "poisson"):
        c = compare(best, method, "poisson", epsilons)
        cells = "; ".join(f"ε = {e:g}: {v['diff']:+.4f} [{v['lo']:+.4f}, {v['hi']:+.4f}] {v['call']}"
                          for e, v in sorted(c["per"].items()))
        lines.append(f"- {LABELS[method]} − {LABELS['poisson']} (accuracy): {cells}. **Verdict: {c['overall']}** "
                     f"({c['why']}).")
    return lines


def write_report(out: pathlib.Path, rows: list[dict], meta: dict) -> pathlib.Path:
    """``report.md`` from the tidy rows and the run's ``meta.json`` entries."""
    cfg, quick = meta["config"], meta["quick"]
    best = summary(rows)
    methods = [m for m in METHODS if any(r["algorithm"] == m for r in rows)]
    epsilons = sorted({r["epsilon"] for r in rows})
    n, rec, m, r = cfg["clients"], cfg["records"], cfg["cohort"], cfg["rounds"]
    cal_table, worst = [], 0.0
    for meth in methods:
        for e in epsilons:
            cert = _value(rows, meth, e, "certified_epsilon")
            worst = max(worst, abs(cert / e - 1))
            pld = _value(rows, meth, e, "pld_epsilon")
            cal_table.append([LABELS[meth], f"{e:g}", f"{int(_value(rows, meth, e, 'bands'))}",
                              f"{_value(rows, meth, e, 'noise_multiplier'):.5f}", f"{cert:.9g}",
                              f"{cert / e - 1:+.1e}", "—" if not math.isfinite(pld) else f"{pld:.4f}",
                              f"{_value(rows, meth, e, 'rmse_per_z'):.3f}", f"{_value(rows, meth, e, 'max_per_z'):.3f}",
                              f"{_value(rows, meth, e, 'rmse'):.3f}"])
    acc_table = [[LABELS[x]] + [_fmt_acc(best[x, e]) if (x, e) in best else "—" for e in epsilons] for x in methods]
    rmse_order = []
    for e in epsilons:
        ranked = sorted((_value(rows, x, e, "rmse"), x) for x in methods)
        rmse_order.append(f"ε = {e:g}: " + " < ".join(f"{LABELS[x]} {v:.2f}" for v, x in ranked))
    b = cfg["bands"]
    lines = [f"# DP-FedAvg cross-device: correlated noise at equal user-level ε on MNIST "
             f"({'quick' if quick else 'full'})", "",
             "DP-FedAvg (McMahan et al., ICLR 2018) with Poisson client sampling and independent noise, against "
             "DP-FedAvg with BandMF noise (Choquette-Choo et al., NeurIPS 2023) under cyclic Poisson client groups "
             "(amplified, Thm 4) and under min-separation (multi-epoch, no amplification; Choquette-Choo et al., ICML "
             "2023), at equal certified user-level ε and equal compute. The cross-device half of "
             "`dpjax reproduce correlated-noise`; a measurement with dpjax's families, not a reproduction of a paper's "
             "figure: no paper number is claimed."
             + (" **Quick mode: a smoke test of every code path, not a measurement.**" if quick else ""), "",
             "## Protocol", "",
             f"- data: MNIST's training set permuted (seed {meta['seed']}) and cut into N = {n} clients of {rec} "
             f"records (IID clients), pixels / 255; the first {cfg['n_test']} test images; seeds 0..{cfg['seeds'] - 1}:"
             " the cohorts, the noise and the initialisation differ per seed (the split does not);",
             f"- model: MLP {tuple(cfg['hidden'])} tanh → 10, softmax cross-entropy; every method: {r} rounds, public "
             f"cohort m = {m}, {cfg['local_steps']} local SGD steps of {cfg['local_batch']} records at client step "
             f"{cfg['client_lr']:g}, each client's model delta clipped to C = {cfg['clip']:g} (fixed), the sum "
             f"divided by m, server SGD at step {cfg['server_lr']:g} (one pair for every method and ε, not tuned);",
             f"- participation: Poisson each round at q = m/N = {m / n:.4g} (family `dp-fedavg`, "
             "`clip_learning_rate = 0`: fixed clipping, the count neither used nor accounted); amplified BandMF: the "
             f"clients in b = {b} groups, group t mod {b} sampled at q = mb/N = {m * b / n:.4g} (family "
             f"`dp-fedavg-band-mf`), b = {b} bands optimised for the R prefix sums; min-separation: {n // m} fixed "
             f"groups of {m}, round t takes group t mod {n // m} whole, {cfg['min_sep_bands']} bands; "
             f"a client takes part in ≈ {r * m / n:g} rounds (Poisson, in expectation), at most "
             f"{-(-r // b)} (cyclic Poisson) or exactly {-(-r // (n // m))} (min-separation);",
             "- tree-aggregation DP-FTRL is not run: dpjax's `dp-ftrl` is record-level (its accounting reads one-pass "
             "record blocks) and no DP-FedAvg family has tree noise; the min-separation arm has federated DP-FTRL's "
             "participation (clients in a fixed order, no sampling, Kairouz et al. ICML 2021 Sec. 5);",
             f"- equal ε: each method's noise multiplier z calibrated to every target ε at δ = {cfgmod.DELTA:g} by "
             "`dpjax.accounting.calibration.smallest_scale` on the certified ε of the family's own `privacy()` spec "
             f"over the {n} clients ({cfgmod.ACCOUNTANT.upper()}, dp_accounting; add/remove of a client; the cohort "
             f"buffer's overflow tail charged to δ), bracket width {cfgmod.REFINE_RTOL:g}: largest |certified ε / "
             f"target − 1| = {worst:.1e}. PLD's ε at the same z beside it.", "",
             "## Calibration and noise RMSE", "",
             "RMSE: the noise in the R prefix sums of the released mean deltas (the server SGD model is θ₀ − η × that "
             "sum), from each strategy (identity for independent noise, BandMF's C⁻¹), in units of C/m: per unit z "
             "(mean over the prefixes, and the last prefix) and at the calibrated z.", "",
             rep.markdown_table(cal_table, ["method", "target ε", "bands", "z", f"certified ε ({cfgmod.ACCOUNTANT})",
                                            "rel. diff", "PLD ε at z", "RMSE / z", "last prefix / z",
                                            "RMSE at z"]), "",
             "## Test accuracy", "",
             f"Mean over {cfg['seeds']} seeds [min, max over the seeds].", "",
             rep.markdown_table(acc_table, ["method"] + [f"ε = {e:g}" for e in epsilons]), "",
             "## Verdicts", "",
             f"Rule: per ε, the difference's interval is the difference of the seed ranges (better / worse when it "
             f"excludes 0, tie otherwise); over the grid, a verdict needs >= {MIN_POINTS} ε spanning >= "
             f"{MIN_DECADES:g} decade all agreeing (a verdict is no stronger than its data).", "",
             *_verdict_lines(best, methods, epsilons),
             *[f"- noise RMSE at the calibrated z, {o}" for o in rmse_order], "",
             "![figure](correlated_noise_fedavg.png)", "",
             f"Platform: {meta.get('platform', '?')}; wall time {meta.get('wall_seconds', float('nan')):.0f} s "
             f"(calibration {meta.get('calibration_seconds', float('nan')):.0f} s)."]
    return rep.write_report(out, lines)
