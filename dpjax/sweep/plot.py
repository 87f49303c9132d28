"""``dpjax plot``: paper-style figures (metric vs x with percentile bars) from a sweep directory."""

from __future__ import annotations

import pathlib

import numpy as np

from dpjax.sweep import select
from dpjax.sweep.store import load_results


def _static_lines(runs, x: str) -> list[str]:
    """Columns (other than x) that vary between groups: one curve per combination."""
    if "group" not in runs.columns or runs["group"].nunique() <= 1:
        return []
    skip = {x, "run_id", "group", "trial", "repetition", "batch_size_resolved"}
    cols = []
    for c in runs.columns:
        if c in skip or c.startswith("axis_"):
            continue
        per_group = runs.groupby("group")[c].nunique(dropna=False)
        if (per_group <= 1).all() and runs[c].nunique(dropna=False) > 1:
            cols.append(c)
    return cols


def plot_store(
    store,
    *,
    x: str = "epsilon",
    select_over: str | None = "learning_rate",
    criterion: str = "train_loss",
    metric: str = "test_error",
    lines: str | None = None,
    out=None,
    percentiles=(5.0, 95.0),
    title: str | None = None,
    logx: bool = False,
) -> pathlib.Path:
    """Selects ``select_over`` per (x, line, trial) by mean ``criterion`` over repetitions,
    then plots the mean ``metric`` over trials against ``x`` with percentile bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, _ = load_results(store)
    if len(runs) == 0:
        raise ValueError(f"store={str(store)!r} has no finished runs yet")
    line_cols = [lines] if lines else _static_lines(runs, x)
    by = line_cols + [x, "trial"]
    if select_over:
        chosen = select.select_best(runs, over=select_over, by=by, criterion=criterion, report=metric)
    else:
        select._check_columns(runs, by + [metric], "column")
        chosen = runs.groupby(by, dropna=False)[metric].mean().reset_index()
    is_rate = metric.endswith("error")
    bars = select.error_bars(chosen, x=x, value=metric, lines=line_cols, percentiles=percentiles,
                             clip=(0.0, 1.0) if is_rate else None)
    fig, ax = plt.subplots(figsize=(5.5, 4.0))
    groups = bars.groupby(line_cols, dropna=False) if line_cols else [((), bars)]
    for key, sub in groups:
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(f"{c}={v}" for c, v in zip(line_cols, key)) or metric
        # The bar is the percentile interval itself, [p_lo, p_hi], drawn around the mean (asymmetric);
        # with few trials the mean can fall outside it, and the bar then ends at the mean.
        lo = np.maximum(sub["mean"] - sub["p_lo"], 0.0)
        hi = np.maximum(sub["p_hi"] - sub["mean"], 0.0)
        ax.errorbar(sub[x], sub["mean"], yerr=np.vstack([lo, hi]), marker="o", capsize=3, label=label)
    ax.set_xlabel(x)
    ax.set_ylabel(f"{metric} (mean over trials; bars: {percentiles[0]:g}th-{percentiles[1]:g}th percentile)")
    if logx:
        ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    out = pathlib.Path(out) if out else pathlib.Path(store) / "figure.png"
    fig.savefig(out, dpi=150)
    plt.close(fig)
    bars.to_csv(out.with_suffix(".csv"), index=False)
    return out
