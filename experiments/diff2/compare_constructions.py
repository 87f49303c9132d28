"""Paper vs authors construction, side by side, from two DIFF2 runs' ``results.csv``.

    python experiments/diff2/compare_constructions.py PAPER_DIR AUTHORS_DIR [--metrics train_loss,grad_norm_sq,test_loss]

Prints a markdown table: per dataset, epsilon and metric, the mean over seeds of the per-seed
minimum over checkpoints (maximum for accuracies) of GD, DP-GD and DIFF2-GD under each
construction, and the one-sided paired t-test p-value for DIFF2-GD < DP-GD
(``dpjax.reproduce.diff2.claims.paired_one_sided_pvalue``).
"""

from __future__ import annotations

import argparse
import math
import pathlib

import numpy as np
import pandas as pd

from dpjax.reproduce.diff2.claims import paired_one_sided_pvalue


def best_values(run_dir: pathlib.Path) -> pd.DataFrame:
    df = pd.read_csv(pathlib.Path(run_dir) / "results.csv")
    return df[df["kind"] == "best"]


def summary(best: pd.DataFrame, dataset: str, eps: float, metric: str) -> tuple[dict, float]:
    rows = best[(best.dataset == dataset) & (best.metric == metric)]
    per_algo = {}
    for algo, e in (("GD", math.inf), ("DP-GD", eps), ("DIFF2-GD", eps)):
        sel = rows[(rows.algorithm == algo) & np.isclose(rows.epsilon, e)].sort_values("trial")
        per_algo[algo] = sel["value"].to_numpy(float)
    a, b = per_algo["DIFF2-GD"], per_algo["DP-GD"]
    if metric.endswith("accuracy"):
        a, b = -a, -b
    return {k: float(np.mean(v)) for k, v in per_algo.items()}, paired_one_sided_pvalue(a, b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paper_dir")
    ap.add_argument("authors_dir")
    ap.add_argument("--metrics", default="train_loss,grad_norm_sq,test_loss")
    args = ap.parse_args()
    paper, authors = best_values(args.paper_dir), best_values(args.authors_dir)
    print("| dataset | eps | metric | GD paper / authors | DP-GD paper / authors | DIFF2-GD paper / authors "
          "| p paper / authors |")
    print("|---|---|---|---|---|---|---|")
    for dataset in paper.dataset.unique():
        for eps in sorted(e for e in paper.epsilon.unique() if np.isfinite(e)):
            for metric in args.metrics.split(","):
                (sp, pp), (sa, pa) = summary(paper, dataset, eps, metric), summary(authors, dataset, eps, metric)
                cells = " | ".join(f"{sp[k]:.4g} / {sa[k]:.4g}" for k in ("GD", "DP-GD", "DIFF2-GD"))
                print(f"| {dataset} | {eps:g} | {metric} | {cells} | {pp:.3g} / {pa:.3g} |")


if __name__ == "__main__":
    main()
