"""The registered ISRL-DP figures (``isrl-mnist``, ``isrl-insurance``, ``isrl-obesity``) and the
report-only rewrite of a kept run."""

from __future__ import annotations

import pathlib
import time

import pandas as pd

from dpjax.reproduce import register, report
from dpjax.reproduce.isrl.claims import claims_insurance, claims_mnist, claims_obesity, selected_means
from dpjax.reproduce.isrl.config import (AUTHORS_NOTES, COMMON_NOTES, Experiment, TITLES, insurance_experiment,
                                         insurance_task, mnist_experiment, mnist_task, obesity_experiment,
                                         obesity_task)
from dpjax.reproduce.isrl.driver import run_experiment
from dpjax.reproduce.isrl.outputs import (UPSILON_NOTE, claims_table, noise_table_md, plot_figure,
                                         title_with_optimum, write_outputs)


def report_only(out_dir: pathlib.Path, *, quick: bool) -> pathlib.Path:
    """Rewrites the title, the claims table and the figure of a kept ISRL run from its results.csv,
    optimum.csv and meta.json (the selected configurations' test metric per trial; nothing re-run). The other
    sections (test-metric table, optimum, selection notes) are kept as they are; the noise table and its sentence are
    rewritten from noise.csv where it is kept."""
    import json

    out_dir = pathlib.Path(out_dir)
    meta = json.loads((out_dir / "meta.json").read_text())
    name, construction = meta["experiment"]["name"], meta.get("construction", "paper")
    if bool(meta["quick"]) != quick:
        raise ValueError(f"out={str(out_dir)!r} holds a {'quick' if meta['quick'] else 'full'} run; quick={quick}")
    factory, claims_fn = {"isrl-mnist": (mnist_experiment, claims_mnist),
                          "isrl-insurance": (insurance_experiment, claims_insurance),
                          "isrl-obesity": (obesity_experiment, claims_obesity)}[name]
    exp = factory(quick, construction)
    kept = meta["experiment"]
    if (list(exp.epsilons) != list(kept["epsilons"]) or list(exp.calibrations) != list(kept["calibrations"])
            or [(s.num_silos, s.silos_per_round) for s in exp.settings]
            != [(s["num_silos"], s["silos_per_round"]) for s in kept["settings"]]):
        raise ValueError(f"out={str(out_dir)!r}: the kept run's protocol differs from {name}'s current one")
    results = pd.read_csv(out_dir / "results.csv")
    summ = selected_means(results[results.metric == exp.metric].rename(columns={"value": "test"}))
    claims = claims_fn(summ, exp)
    optimum = pd.read_csv(out_dir / "optimum.csv") if (out_dir / "optimum.csv").exists() else None
    title = title_with_optimum(TITLES[name], construction, optimum)
    plot_figure(out_dir, exp, summ, title)
    lines = (out_dir / "report.md").read_text().splitlines()
    lines[0] = f"# {exp.name}: {title}"
    if not lines[2].startswith("υ*² ="):
        lines[2:2] = [UPSILON_NOTE, ""]
    else:
        lines[2] = UPSILON_NOTE
    start = lines.index("## Claims")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    lines[start:end] = ["## Claims", "", claims_table(claims), ""]
    noise_heading = "## Noise: paper vs tight calibration"
    if (out_dir / "noise.csv").exists() and noise_heading in lines:  # the table and its sentence, from noise.csv
        start = lines.index(noise_heading)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines[start:end] = [noise_heading, "", noise_table_md(pd.read_csv(out_dir / "noise.csv")), ""]
    return report.write_report(out_dir, lines)


def _figure(exp: Experiment, task_fn, claims_fn, title: str, out_dir, quick: bool, seed: int, notes=(),
            data_dir=None) -> pathlib.Path:
    from dpjax import progress

    start = time.perf_counter()
    progress.stage(f"{exp.name}: loading the data ({exp.construction} construction)")
    task = task_fn(data_dir, construction=exp.construction)
    progress.stage(f"{exp.name}: running the step-size grids (a bar or line per grid)")
    result = run_experiment(exp, task, seed=seed)
    progress.stage(f"{exp.name}: writing results.csv, the figure and report.md")
    summ = selected_means(result["selected"])
    claims = claims_fn(summ, exp)
    wall = time.perf_counter() - start
    extra = AUTHORS_NOTES if exp.construction == "authors" else ()
    return write_outputs(pathlib.Path(out_dir), exp, result, quick=quick, seed=seed, wall_s=wall,
                         figure_title=title, claims=claims, notes=COMMON_NOTES + extra + tuple(notes))


@register("isrl-mnist", report_only=report_only)
def isrl_mnist_figure(out_dir: pathlib.Path, *, quick: bool, seed: int, construction: str = "paper",
                      data_dir=None) -> pathlib.Path:
    data_note = ("Silos drawn without replacement across silos (disjoint silos, disjoint train/test)."
                 if construction == "paper" else
                 "Authors' data: the first 774 images of each digit in file order (the same pool every trial), "
                 "1,548 rows per silo drawn with replacement, split 80/20 with random_state=1 (most test rows "
                 "are copies of training images).")
    return _figure(mnist_experiment(quick, construction), mnist_task, claims_mnist,
                   TITLES["isrl-mnist"], out_dir, quick, seed, data_dir=data_dir,
                   notes=(data_note,
                          "L = 2 max‖x‖ over silo 1's training features (the script's and Appendix I's rule); "
                          "records are clipped at L, so the guarantee holds for every silo.",
                          "Metric `official_test_error`: the selected configurations on the official 10,000-image "
                          "MNIST test set (parity labels, same PCA), beside the per-silo pooled test set.",
                          "Quick mode: M ∈ {25, 12} only (Fig. 7's M = 18 in the full protocol)." if quick else
                          "Full protocol: M ∈ {25, 12} (Fig. 4) and 18 (Fig. 7)."))


@register("isrl-insurance", report_only=report_only)
def isrl_insurance_figure(out_dir: pathlib.Path, *, quick: bool, seed: int, construction: str = "paper",
                          data_dir=None) -> pathlib.Path:
    rules = (("Per-example clipping at the tuned threshold; non-private baselines are tuned over the same clip grid.",
              "K, σ and δ = 1/n² use the smallest silo's training size (the last silo is slightly smaller), "
              "so every silo's guarantee is at least as strong.") if construction == "paper" else
             ("Authors' rules (DP_FL_insurance_linreg_FINAL.py): each silo clips its minibatch MEAN to L "
              "(sensitivity 2L, so the Appendix I σ — calibrated for 2L/K — certifies a much larger ε: see the "
              "noise table) and uses its own n_i and δ_i = 1/n_i²; K and Local SGD's noise use n = ⌈1338/N⌉, the "
              "silo size before the split; age and BMI standardised with ddof = 1; N = 10, M = 5 (the script's "
              "default).",))
    return _figure(insurance_experiment(quick, construction), insurance_task, claims_insurance,
                   TITLES["isrl-insurance"], out_dir, quick, seed,
                   data_dir=data_dir, notes=rules + ("Relative RMSE = √(test MSE / test MSE of the pooled training mean).",))


@register("isrl-obesity", report_only=report_only)
def isrl_obesity_figure(out_dir: pathlib.Path, *, quick: bool, seed: int, construction: str = "paper",
                        data_dir=None) -> pathlib.Path:
    noise_note = ("Per-silo noise on minibatch means (the paper's Algorithm 2)." if construction == "paper" else
                  "Authors' noise model: silos send K-record gradient SUMS and the server adds ONE Gaussian draw of "
                  "the Appendix I σ to their average — run as per-silo noise σ√M/K on the means with the step × K "
                  "(the same law); the silo messages carry no noise, so there is no ISRL-DP guarantee "
                  "(realized ε = ∞).")
    silo_note = ("Silos subsampled without replacement to 200 records." if construction == "paper" else
                 "Silos resampled with replacement to the smallest class's training count (the script's n_min).")
    return _figure(obesity_experiment(quick, construction), obesity_task, claims_obesity,
                   TITLES["isrl-obesity"], out_dir, quick, seed, data_dir=data_dir,
                   notes=("R = 100, M = 3, L = 20, last-iterate output from the authors' code.", noise_note,
                          silo_note))
