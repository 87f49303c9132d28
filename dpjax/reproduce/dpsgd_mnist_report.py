"""Tables, figure and report of ``dpjax reproduce dpsgd-mnist`` (see ``dpjax.reproduce.dpsgd_mnist``)."""

from __future__ import annotations

import math

import os
import pathlib

import numpy as np

from dpjax.reproduce import report
from dpjax.reproduce.dpsgd_mnist_config import (AUTHORS_LR_DECAY, AUTHORS_REPO, FULL, GROUPS, MINI_BATCH, PAPER,
                                                PAPER_ACCURACY, ROUND_RECORDS, SIGMA, cnn, describe, family_kwargs)
from dpjax.reproduce.shuffle_report import GAP_ACCOUNTANTS, gap_lines


def _seeds_text(cfg, best) -> str:
    counts = sorted({b["seeds"] for b in best.values()})
    if counts == [cfg["seeds"]]:
        return f"{cfg['seeds']} seed(s)"
    return f"{cfg['seeds']} seed(s) requested; the selected configurations have " + "/".join(map(str, counts)) + \
        " (per row)"


def extrapolate_full(timings: dict) -> float:
    """Full-protocol CPU seconds from the measured CPU seconds per run-round of each variant.

    A round's cost depends on its ``ms`` records and not on N, so one run-round of a variant costs what it cost here;
    the full protocol has (runs x rounds) of each: 3 seeds x 25 (eta, C) (5 eta for SGD) x N/(ms) rounds x (10 + 30 +
    50) epochs on N = 60,000.
    """
    per_run_round: dict[str, list] = {}
    for key, t in timings.items():
        name = key.rsplit(" E=", 1)[0]
        per_run_round.setdefault(name, []).append((t["cpu_seconds"] / (t["runs"] * t["rounds"]), t["batch"]))
    total = 0.0
    for name, vals in per_run_round.items():
        runs = FULL["seeds"] * len(FULL["lrs"]) * (len(FULL["clips"]) if name != "SGD (non-private)" else 1)
        cost = float(np.mean([v for v, _ in vals]))
        total += cost * runs * (FULL["n_train"] // vals[0][1]) * sum(FULL["epochs"])
    return total


def bars_note(seeds) -> str:
    """What the bars of the accuracy panel are: ``no bars (1 seed)``, ``bars: sample SD over 3 seeds``, or for mixed
    counts ``bars: sample SD over 2/3 seeds; none where 1 seed``."""
    counts = sorted(set(int(s) for s in seeds))
    several = [c for c in counts if c > 1]
    if not several:
        return "no bars: 1 seed"
    return (f"bars: sample SD over {'/'.join(map(str, several))} seeds"
            + ("; none where 1 seed" if 1 in counts else ""))


def plot(path: pathlib.Path, best: dict, privacy: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    names = list(best)
    ax1.bar(range(len(names)), [100 * best[n]["mean"] for n in names],
            yerr=[100 * best[n]["std"] if best[n]["seeds"] > 1 else 0.0 for n in names],
            color=[f"C{i}" for i in range(len(names))])
    for n, v in PAPER_ACCURACY.items():
        if n in names:
            ax1.plot([names.index(n) - 0.4, names.index(n) + 0.4], [v, v], "k--")
    ax1.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
    ax1.set_xlabel("variant")
    ax1.set_ylabel("best test accuracy (%, mean over seeds)")
    ax1.set_title(f"MNIST, sigma = 2 (dashed: paper; {bars_note([best[n]['seeds'] for n in names])})", fontsize=9)
    not_drawn = []  # series whose every epsilon is inf (e.g. the non-private baseline): named, not in the legend
    for name, rows in privacy.items():
        for acc, style in (("strong-exact", "-o"), ("sqrt-gE", ":"), ("generic-group", "--")):
            pts = [(r["group_size"], r["epsilon"]) for r in rows if r["accountant"] == acc]
            finite = [(g, e) for g, e in pts if math.isfinite(e)]
            if finite:
                ax2.plot(*zip(*finite), style, label=f"{name} {acc}")
            elif pts:
                not_drawn.append(f"{name} {acc}")
    ax2.set_xscale("log", base=2)
    from dpjax.sweep.plot import spans_decades

    if spans_decades([r["epsilon"] for rows in privacy.values() for r in rows if math.isfinite(r["epsilon"])]):
        ax2.set_yscale("log")
    ax2.set_xlabel("group size g")
    ax2.set_ylabel("epsilon at delta = 1e-5")
    ax2.set_title("privacy of the selected configurations"
                  + (f"\n(ε = inf, not drawn: {', '.join(not_drawn)})" if not_drawn else ""), fontsize=9)
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def noise_reading(chosen: dict) -> list[str]:
    """Per private variant: the message's noise std per coordinate and its norm against the signal (<= C)."""
    import math

    from dpjax.problems import FlaxProblem

    import jax

    dim = sum(x.size for x in jax.tree_util.tree_leaves(jax.eval_shape(  # shapes only: no init op by op
        FlaxProblem(cnn(), (28, 28, 1), "softmax").init_params, jax.random.key(0))))
    lines = []
    for name, kw in chosen.items():
        if kw.get("private", True):
            std = 2 * SIGMA * family_kwargs(kw)[1] / kw["num_subsets"]
            lines.append(f"{name} ({describe(kw)}): noise std {std:.4g} C per coordinate, noise norm about "
                         f"{std * math.sqrt(dim):.3g} C against a message of norm <= C (D = {dim:,} parameters)")
    return lines


def _edge_flags(rows: list[dict], best: dict) -> dict[str, str]:
    """Per variant: which of the selected eta / C still sit at an end of the values tried at its E ("no" if none)."""
    flags = {}
    for n, b in best.items():
        mine = [r for r in rows if r["variant"] == n and r["epochs"] == b["epochs"]]
        if not mine:
            continue
        at = []
        for col, label in (("learning_rate", "eta"), ("clip_norm", "C")):
            values = sorted({r[col] for r in mine})
            if len(values) > 1 and (np.isclose(b[col], values[0]) or np.isclose(b[col], values[-1])):
                at.append(f"{label} ({'low' if np.isclose(b[col], values[0]) else 'high'})")
        flags[n] = ", ".join(at) or "no"
    return flags


def accuracy_cell(b: dict) -> str:
    """Mean test accuracy (%) with its spread said: "90.95 ± 0.32 (sample SD, 3 seeds)"; one seed: no "±"."""
    if b["seeds"] < 2:
        return f"{100 * b['mean']:.2f} (1 seed)"
    return f"{100 * b['mean']:.2f} ± {100 * b['std']:.2f} (sample SD, {b['seeds']} seeds)"


def write_report(out, quick, cfg, chosen, best, privacy, wall, cpu, full_estimate, timings,
                 parts: int = 1, load: float | None = None, construction: str = "paper",
                 run_rows: list[dict] | None = None) -> pathlib.Path:
    lines = [f"# DP-SGD-General on MNIST ({'quick' if quick else 'full' if cfg == FULL else 'reduced'} protocol, "
             f"construction: {construction})", "",
             f"Paper: {PAPER}. Paper's claims (sigma = 2): BC-SH 98.3 %, IC-SS 98.4 %; hyperparameters unknown "
             "(Appendix H is missing from the text).", "",
             f"Protocol (ours): {cfg['n_train']} training / {cfg['n_test']} test images; every round uses "
             f"ms = {ROUND_RECORDS} records, sums m clipped terms, adds N(0, (2 C z)^2 I) and divides by m "
             f"(Algorithm 1; z = the dpjax noise multiplier below: sigma for 'paper'); E in {list(cfg['epochs'])}, eta in {list(cfg['lrs'])}, C in {list(cfg['clips'])}, "
             f"{_seeds_text(cfg, best)}, sigma = {SIGMA}. Selection on test accuracy (its privacy cost is ignored); "
             + (f"a selection at an end of the values tried is extended by one geometric step (at most "
                f"{cfg['max_extensions']} per side and axis)." if cfg.get("max_extensions", 0) else
                "no grid-edge extension (a run made before the rule, or max_extensions = 0)."), ""]
    if construction == "authors":
        lines += [f"Construction 'authors': the noise placement and clipping of the batch-clipping code of the authors' "
                  f"group ({AUTHORS_REPO}, PyTorchProjectFramework/), see the variant column; the learning rate decays "
                  f"x{AUTHORS_LR_DECAY} per epoch (main_new.py line 210). The privacy below is what dpjax's accountant "
                  "certifies for the noise actually added (dpjax noise multiplier = sigma x factor), not the paper's "
                  "sigma = 2 guarantee.", ""]
    edges = _edge_flags(run_rows or [], best)
    lines += ["| variant | round | best test accuracy (%, mean over seeds) | E | eta | C | dpjax noise multiplier | "
              "at grid edge | paper (%) |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n, b in best.items():
        nm = SIGMA * family_kwargs(chosen[n])[1] if chosen[n].get("private", True) else 0.0
        lines.append(f"| {n} | {describe(chosen[n])} | {accuracy_cell(b)} | {b['epochs']} | "
                     f"{b['learning_rate']} | {b['clip_norm']} | {nm:.4g} | {edges.get(n, '-')} | "
                     f"{PAPER_ACCURACY.get(n, '-')} |")
    lines += ["", "Privacy of the selected configurations (delta = 1e-5; replace-up-to-g, N fixed; "
              "strong adversary unless 'standard'):", "",
              "| variant | g | strong-exact | sqrt-gE | generic-group | standard |", "| --- | --- | --- | --- | --- | --- |"]
    for n, rows in privacy.items():
        for g in GROUPS:
            get = {r["accountant"]: r["epsilon"] for r in rows if r["group_size"] == g}
            fmt = lambda a: f"{get[a]:.3f}" if a in get else "-"  # noqa: E731
            lines.append(f"| {n} | {g} | {fmt('strong-exact')} | {fmt('sqrt-gE')} | {fmt('generic-group')} | "
                         f"{fmt('standard')} |")
    gap = [(n, rows) for n, rows in privacy.items() if any(r["accountant"] in GAP_ACCOUNTANTS.values() for r in rows)]
    if gap:  # shuffled variants: never the certificate alone
        lines += ["", "Shuffled variants at g = 1 (delta = 1e-5): the certificate beside the Poisson number a typical "
                  "implementation would report and the lower bound for shuffling:", ""]
        for n, rows in gap:
            cert = next(r["epsilon"] for r in rows if r["group_size"] == 1 and r["accountant"] == "strong-exact")
            lines += gap_lines(n, cert, rows)
    lines += ["", "## Reading", "", "Signal against noise per round (message = sum of clipped terms / m + noise):", ""]
    lines += [f"* {x}" for x in noise_reading(chosen)]
    bc, ic, one = best.get("BC-SH"), best.get("IC-SS"), best.get("BC-SH m=1")
    if bc and ic:
        gap = 100 * (ic["mean"] - bc["mean"])
        lines += ["", f"BC-SH reaches {100 * bc['mean']:.2f} % against IC-SS {100 * ic['mean']:.2f} % "
                  f"(gap {gap:+.2f} points; paper: 98.3 % vs 98.4 %): "
                  + ("within a few points, as the paper says." if abs(gap) <= 3 else
                     "NOT within a few points." + (" With the same ms per round both make the same number of rounds, "
                     f"but BC-SH sums m = {ROUND_RECORDS // MINI_BATCH} clipped terms against IC-SS's "
                     f"{ROUND_RECORDS}, so its noise per unit of signal is {MINI_BATCH}x larger."
                                                   if construction == "paper" else ""))]
    if construction == "authors" and privacy:
        eps = {n: {r["accountant"]: r["epsilon"] for r in rs if r["group_size"] == 1} for n, rs in privacy.items()}
        lines += ["", "Certified epsilon of the authors' noise at g = 1 (delta = 1e-5): " + "; ".join(
            f"{n}: strong-exact {e.get('strong-exact', float('nan')):.4g}, standard {e.get('standard', float('nan')):.4g}"
            for n, e in eps.items()) + ". The paper's Algorithm 1 at sigma = 2 certifies the values of the 'paper' "
            "construction's report for the same E."]
    if one:
        lines += ["", f"BC-SH with m = 1 (eq. (4) as printed: one clipped mean of {ROUND_RECORDS} records per round) "
                  f"reaches {100 * one['mean']:.2f} %: its message has norm <= C and noise of norm hundreds of C, "
                  "so the paper's 98.3 % cannot come from this round at sigma = 2 with noise 2 C sigma. The batch "
                  "clipping code published by the authors' group (github.com/MisaNguyen/DPSGD, "
                  "train_model_BC_FGC.py; not labelled as this paper's code) adds noise of std sigma C to the clipped "
                  "mean and then divides the noise by the batch size, i.e. noise std sigma C / s per coordinate: "
                  f"{2 * ROUND_RECORDS}x less than Algorithm 1's 2 C sigma for m = 1, s = {ROUND_RECORDS}. "
                  "That would explain accuracies equal to individual clipping's; it is not the privacy the paper's "
                  "theorems account for."]
    if quick:
        lines += ["", f"Quick mode is a smoke test, not a reproduction: every code path (batch and individual "
                  f"clipping, shuffling and subsampling, local SGD and momentum, no privacy, the grid-edge extension, "
                  f"the accountants) on {cfg['n_train']} training images ({cfg['n_train'] // ROUND_RECORDS} rounds per "
                  f"epoch) for E = {', '.join(map(str, cfg['epochs']))}, one seed; its accuracies are far below a "
                  "trained model's and say nothing about the paper's numbers, and its extrapolation below counts "
                  "each variant's compilation in a few run-rounds (an overestimate) and only the variants run here."]
    est = full_estimate
    summed = f" (summed over {parts} processes run side by side, one per variant)" if parts > 1 else ""
    load = os.getloadavg()[0] if load is None else load
    lines += ["", f"Wall time: {wall:.0f} s, CPU time {cpu:.0f} s (all threads){summed} on this machine (2 CPU cores shared "
              f"with other jobs; load average at the end {load:.1f}). Extrapolated full protocol "
              f"(the variants above x 25 (eta, C) (5 eta for SGD) x 3 seeds x E in {{10, 30, 50}} on 60,000 images, from "
              f"the CPU seconds per run-round measured here, compilation included): {est / 3600:.0f} CPU hours, i.e. about "
              f"{est / 7200:.0f} h on 2 idle cores.", "",
              "Per-variant timings: " + ", ".join(f"{k}: {v['seconds']:.0f} s ({v['cpu_seconds']:.0f} s CPU)"
                                                  for k, v in timings.items())]
    return report.write_report(out, lines)
