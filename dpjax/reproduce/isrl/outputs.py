"""Outputs of the ISRL-DP figures: results, tables, the figure and the report."""

from __future__ import annotations

import dataclasses
import math
import pathlib
import platform
from collections.abc import Sequence

import numpy as np
import pandas as pd

from dpjax.reproduce import isrl_optimum, isrl_protocol as proto, report
from dpjax.reproduce.isrl.claims import fmt_value, selected_means
from dpjax.reproduce.isrl.config import Experiment, PAPER
from dpjax.reproduce.isrl_protocol import LABELS, LOCAL, LOCAL_NP, MB, MB_NP
from dpjax.sweep import plot


def _table(summ: pd.DataFrame, exp: Experiment) -> str:
    def cell(r):
        return f"{fmt_value(r['mean'].iloc[0])} [{fmt_value(r.p_lo.iloc[0])}, {fmt_value(r.p_hi.iloc[0])}]"

    lines = []
    eps = sorted(exp.epsilons)
    columns = ["method", "calibration"] + [f"ε={e:g}" for e in eps]
    for st in exp.settings:
        lines.append(f"\n**{st.label}** — mean over trials [p5, p95]\n")
        sub = summ[(summ.num_silos == st.num_silos) & (summ.silos_per_round == st.silos_per_round)]
        rows = []
        for alg in (MB, LOCAL):
            for cal in exp.calibrations:
                s = sub[(sub.algorithm == alg) & (sub.calibration == cal)]
                rows.append([LABELS[alg], cal] + [cell(r) if len(r := s[np.isclose(s.epsilon, e)]) else "—"
                                                  for e in eps])
        for alg in (MB_NP, LOCAL_NP):
            r = sub[sub.algorithm == alg]
            if len(r):
                rows.append([LABELS[alg], "—", f"{cell(r)} (all ε)"] + [""] * (len(eps) - 1))
        lines.append(report.markdown_table(rows, columns))
    return "\n".join(lines)


def noise_table_md(noise: pd.DataFrame) -> str:
    if not len(noise):
        return ""
    cell = lambda g, col: f"{g[col].iloc[0]:.4g}" if len(g) else "—"  # noqa: E731  (a calibration not run)
    rows = []
    for (setting, alg, e), g in noise.groupby(["setting", "algorithm", "epsilon"], sort=True):
        paper = g[g.calibration == "paper"]
        tight = g[g.calibration == "tight"]
        rows.append([setting, LABELS[alg], f"{e:g}", cell(paper, "sigma_over_L"), cell(paper, "realized_epsilon_rdp"),
                     cell(tight, "sigma_over_L")])
    table = report.markdown_table(rows, ["setting", "algorithm", "ε (nominal)", "σ/L paper", "RDP ε of paper σ",
                                         "σ/L tight (RDP)"])
    note = noise_note(noise)
    return table + ("\n\n" + note if note else "")


#: A paper σ whose RDP epsilon exceeds its nominal epsilon by more than this factor gets a sentence under the table.
FAR_ABOVE_NOMINAL = 10.0


def noise_note(noise: pd.DataFrame) -> str:
    """A sentence for each (setting, algorithm) whose paper σ certifies far more than its nominal ε under RDP (e.g.
    Local SGD's Appendix I σ: ε = 2.7e5 at nominal 3): its curve is labelled with an ε it does not have."""
    if not len(noise) or "realized_epsilon_rdp" not in noise.columns:
        return ""
    paper = noise[(noise.calibration == "paper") & np.isfinite(noise.realized_epsilon_rdp.to_numpy(float))]
    far = paper[paper.realized_epsilon_rdp > FAR_ABOVE_NOMINAL * paper.epsilon]
    out = []
    for (setting, alg), g in far.groupby(["setting", "algorithm"], sort=True):
        pairs = ", ".join(f"ε = {r:.2g} at nominal {e:g}" for e, r in zip(g.epsilon, g.realized_epsilon_rdp))
        out.append(f"The paper's σ for {LABELS[alg]} ({setting}) certifies only {pairs} (RDP, the tight accountant): "
                   f"Appendix I's calibration does not give that algorithm its nominal guarantee, so its 'paper' "
                   f"curve is placed at an ε it does not have; the 'tight' curve is calibrated to the nominal ε.")
    return " ".join(out)


#: what the report titles' υ*² is
UPSILON_NOTE = ("υ*² = (1/N) Σᵢ ‖∇F̂ᵢ(w*)‖², the silos' heterogeneity: the mean squared norm of each silo's training-loss "
                "gradient at the pooled optimum w* (Lowy & Razaviyayn, App. I; 0 when every silo has the same "
                "optimum), averaged over trials; per trial in the table 'Pooled training optimum' below.")


def plot_figure(out_dir: pathlib.Path, exp: Experiment, summ: pd.DataFrame, figure_title: str) -> pathlib.Path:
    """The paper-style figure: one panel per (setting, calibration), private curves and non-private lines."""
    metric = exp.metric
    # error bars capped to [0, 1] for errors, and for the relative RMSE under the authors' construction
    # (their insurance plot caps the upper bar at 1.0)
    clip = (0.0, 1.0) if metric == "test_error" or exp.construction == "authors" else None
    panels = [(f"{st.label}; σ: {'paper (App. I)' if cal == 'paper' else 'tight (RDP)'}",
               {"num_silos": st.num_silos, "silos_per_round": st.silos_per_round, "calibration_in": cal})
              for cal in exp.calibrations for st in exp.settings]
    # A panel shows the private curves of its calibration and the non-private lines.
    plot_summ = []
    for cal in exp.calibrations:
        s = summ[(summ.calibration == cal) | (summ.calibration == "none")].copy()
        s["calibration_in"] = cal
        plot_summ.append(s)
    png = out_dir / f"{exp.name}.png"
    plot.plot_panels(png, pd.concat(plot_summ, ignore_index=True), panels,
                     private={MB: (LABELS[MB], "tab:blue"), LOCAL: (LABELS[LOCAL], "tab:red")},
                     nonprivate={MB_NP: (LABELS[MB_NP], "tab:blue"), LOCAL_NP: (LABELS[LOCAL_NP], "tab:red")},
                     ylabel="test error" if metric == "test_error" else "relative RMSE", title=figure_title, clip=clip,
                     ncols=len(exp.settings))
    return png


def claims_table(claims: list[dict]) -> str:
    """The claims with their verdict: ``holds`` / ``differs`` / ``inconclusive`` where the claim compares curves by
    their trial intervals (``claims.compare_below``), else yes / no on the means."""
    def verdict(c):
        if "verdict" not in c:
            return report.yes_no(c["holds"])
        return c["verdict"] + (f" ({c['verdict_reason']})" if c["verdict"] != "holds" and c.get("verdict_reason")
                               else "")
    return report.markdown_table([[c["claim"], c["setting"], c["calibration"], c["measured"], verdict(c)]
                                  for c in claims], ["claim", "setting", "calibration", "measured", "holds"])


def title_with_optimum(title: str, construction: str, optimum) -> str:
    title = f"{title} [construction: {construction}]"
    if optimum is not None and len(optimum):
        ups = optimum.groupby("num_silos")["upsilon_star_sq"].mean().to_dict()
        title = f"{title} (silo heterogeneity {isrl_optimum.format_upsilon(ups)})"
    return title


def write_outputs(out_dir: pathlib.Path, exp: Experiment, result: dict, *, quick: bool, seed: int, wall_s: float,
                  figure_title: str, claims: list[dict], notes: Sequence[str] = ()) -> pathlib.Path:
    """results.csv (tidy), runs.csv (every run), noise.csv, <name>.png, report.md."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    selected = result["selected"]
    metric = exp.metric
    noise_by = {}
    for rec in result["noise"].to_dict("records"):
        noise_by[(rec["setting"], rec["algorithm"], rec["calibration"], rec["epsilon"])] = rec
    rows = []
    for st in exp.settings:
        sel = selected[(selected.num_silos == st.num_silos) & (selected.silos_per_round == st.silos_per_round)]
        nb = {(a, c, e): proto.NoiseEntry(c, e, r["sigma_over_L"], r["realized_epsilon_rdp"], proto.ACCOUNTANT_OF[c])
              for (s_, a, c, e), r in noise_by.items() if s_ == st.label}
        rows += proto.tidy_rows(sel, metric, setting={"num_silos": st.num_silos, "silos_per_round": st.silos_per_round},
                                noise_by=nb)
    report.tidy_results(out_dir, rows, report.TIDY_COLUMNS + ("calibration",))
    result["runs"].to_csv(out_dir / "runs.csv", index=False)
    result["noise"].to_csv(out_dir / "noise.csv", index=False)
    optimum = result.get("optimum")
    if optimum is not None and len(optimum):
        optimum.to_csv(out_dir / "optimum.csv", index=False)
    figure_title = title_with_optimum(figure_title, exp.construction, optimum)

    summ = selected_means(selected)
    png = plot_figure(out_dir, exp, summ, figure_title)

    lines = [
        f"# {exp.name}: {figure_title}",
        "",
        UPSILON_NOTE,
        "",
        f"Paper: {PAPER}. Mode: **{'quick' if quick else 'full'}** protocol, seed {seed}. "
        f"Wall time {wall_s:.1f} s on {platform.machine()} ({report.device_line()}).",
        "",
        f"Protocol: R = {exp.rounds}, ε ∈ {list(exp.epsilons)} (K from ε_max = {exp.epsilon_max:g}), "
        f"{exp.trials} trials × {exp.repetitions} repetitions, {len(exp.mb_grid)} MB-SGD / {len(exp.local_grid)} "
        f"Local SGD step sizes" + (f", clip thresholds {list(exp.clip_norms)}" if exp.clip_norms else "")
        + f", output = {exp.output}{' (last 8 iterates)' if exp.output == 'window' else ''}, "
        f"MB-SGD grid × {exp.mb_grid_scale} (averaged messages), selection by mean final training excess risk "
        "F̂(w) − F̂* (F̂*, w* by Newton's method on each trial's pooled training data), divergence → +∞ loss, "
        "error bars 5th–95th percentiles.",
        "",
        "Two calibrations at the same nominal ε: **paper** = Appendix I moments-accountant σ (accountant "
        "`paper-experiment`, an add/remove calibration); **tight** = σ calibrated by the RDP accountant for the actual "
        "schedule (fixed-size sampling without replacement, replace-one, same K). The RDP ε that the paper's σ "
        "actually certifies is in the noise table (spec I-10).",
        "",
        f"![figure]({png.name})",
        "",
        "## Claims",
        "",
    ]
    lines.append(claims_table(claims))
    lines += ["", f"## Test {'error' if metric == 'test_error' else 'relative RMSE'} of the selected configurations",
              _table(summ, exp), ""]
    if "official_test" in selected.columns:
        official = selected_means(selected.assign(test=selected["official_test"]))
        lines += ["## The same selections on the official MNIST test set (10,000 images, parity labels)", "",
                  "The generalisation gap between constructions: under the authors' construction most pooled test "
                  "rows are copies of training images.", "", _table(official, exp), ""]
    lines += ["## Noise: paper vs tight calibration", "", noise_table_md(result["noise"]), "",
              "## Pooled training optimum (Newton) and heterogeneity υ*²", "", _optimum_md(optimum), ""]
    edge = selected[selected["edge"] & np.isfinite(selected["train_loss"])]
    lines.append(f"Selected step size at an end of its grid in {len(edge)}/{len(selected)} selections "
                 "(column `lr_at_grid_edge` of results.csv).")
    ext = result["meta"].get("grid_extensions", [])
    lines.append(f"The selection hit an end of the step-size grid {len(ext)} times before extension; each time "
                 f"one more geometric step was run beyond it (at most {exp.max_grid_extensions} per side and group; "
                 "runs.csv column `grid_extension`, meta.json `grid_extensions`).")
    ndiv = int(result["runs"]["diverged"].sum())
    lines.append(f"Diverged runs: {ndiv}/{len(result['runs'])} (counted as +∞ training loss).")
    lines += ["", "## Notes", ""] + [f"* {n}" for n in notes]
    lines += ["", "Files: `results.csv` (tidy, selected configurations; metrics "
              f"`{metric}`, `train_loss`, `excess_risk`, `realized_epsilon_rdp`), `runs.csv` (every run), `noise.csv`, "
              f"`optimum.csv` (F̂*, υ*² per trial), `{png.name}`, `meta.json`."]
    path = report.write_report(out_dir, lines)
    report.write_meta(out_dir, {"experiment": dataclasses.asdict(exp) | {"settings": [dataclasses.asdict(s)
                                                                                    for s in exp.settings]},
                                "seed": seed, "quick": quick, "wall_time_s": wall_s} | result["meta"])
    return path


def _optimum_md(optimum) -> str:
    if optimum is None or not len(optimum):
        return ""
    intro = ("F̂* = min of the pooled training loss (Newton's method, float64; logistic: the unclipped loss — the "
             "training loss of the runs clips margins at ±15, which agrees at w* when max |⟨w*, x⟩| ≤ 15); "
             "υ*² = (1/N) Σᵢ ‖∇F̂ᵢ(w*)‖² (Lowy & Razaviyayn, App. I). Excess risk of a run = final training loss − F̂*.")
    rows = []
    for rec in optimum.sort_values(["num_silos", "trial"]).to_dict("records"):
        margin = rec.get("max_abs_margin")
        margin = "—" if margin is None or (isinstance(margin, float) and not math.isfinite(margin)) else f"{margin:.3g}"
        rows.append([rec["num_silos"], rec["trial"], f"{rec['F_star']:.6g}", f"{rec['upsilon_star_sq']:.4g}",
                     f"{rec['grad_norm']:.2g}", rec["newton_iterations"], report.yes_no(rec["converged"]), margin])
    return intro + "\n\n" + report.markdown_table(rows, ["N", "trial", "F̂*", "υ*²", "‖∇F̂(w*)‖", "Newton iterations",
                                                         "converged", "max abs margin ⟨w*, x⟩"])
