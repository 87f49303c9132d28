"""The papers' selection protocol and error bars, on a sweep's runs table.

ISRL-DP (Lowy & Razaviyayn 2023, Section 6 / App. I): for every (epsilon,
setting, trial), each step size is run ``n_reps`` times; the step size with the
smallest *mean final training loss* over the repetitions is selected (the
paper's criterion is the excess loss F(w) - F*, which has the same argmin
because F* is a per-trial constant) and the test metric of that step size,
averaged over the repetitions, is reported. Diverged runs (NaN/inf, or a
``diverged_round`` >= 0) count as an infinite loss, as the authors' scripts
assign a huge loss. Error bars: the 5th and 95th percentiles over trials,
drawn as a symmetric bar of half-width (p95 - p5)/2 around the mean.

DIFF2 (Murata & Suzuki 2023, App. A): per configuration, the largest step
size whose training-loss trace passes the authors' patience rule
(``largest_surviving``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def _check_columns(df: pd.DataFrame, cols, what: str) -> None:
    for c in cols:
        if c not in df.columns:
            raise ValueError(f"{what}={c!r} is not a column of the runs table; columns: {tuple(df.columns)}")


def select_best(
    runs: pd.DataFrame,
    *,
    over: str = "learning_rate",
    by: Sequence[str] = ("epsilon", "trial"),
    criterion: str = "train_loss",
    report: str = "test_error",
) -> pd.DataFrame:
    """Per ``by`` group, the ``over`` value minimising the mean ``criterion`` over repetitions.

    Returns one row per ``by`` group with columns ``by + [over, criterion,
    report, "n_reps", "n_diverged"]`` (``criterion``/``report`` are the means
    over the selected value's repetitions). Ties go to the smallest ``over``.
    """
    by = list(by)
    if len(runs) == 0:
        raise ValueError("runs is empty; nothing to select from")
    _check_columns(runs, by + [over, criterion, report], "column")
    df = runs.copy()
    bad = ~np.isfinite(df[criterion].to_numpy(float))
    if "diverged_round" in df.columns:
        bad |= df["diverged_round"].to_numpy() >= 0
    df["_crit"] = np.where(bad, np.inf, df[criterion].to_numpy(float))
    df["_bad"] = bad
    agg = df.groupby(by + [over], sort=True, dropna=False).agg(
        _crit=("_crit", "mean"), _rep=(report, "mean"), n_reps=("_crit", "size"), n_diverged=("_bad", "sum"))
    agg = agg.reset_index().sort_values(by + [over], kind="stable")
    best = agg.loc[agg.groupby(by, sort=True, dropna=False)["_crit"].idxmin()]
    out = best.rename(columns={"_crit": criterion, "_rep": report})
    return out[by + [over, criterion, report, "n_reps", "n_diverged"]].reset_index(drop=True)


def error_bars(
    selected: pd.DataFrame,
    *,
    x: str = "epsilon",
    value: str = "test_error",
    lines: Sequence[str] = (),
    percentiles: tuple[float, float] = (5.0, 95.0),
    clip: tuple[float, float] | None = None,
) -> pd.DataFrame:
    """Mean over trials and percentile bars per (lines..., x).

    Columns: ``lines + [x, "mean", "p_lo", "p_hi", "half_width", "n_trials"]``
    with ``half_width = (p_hi - p_lo) / 2`` (the authors' symmetric bar);
    ``clip`` bounds ``mean +- half_width`` when drawing (e.g. (0, 1) for error rates).
    """
    lo, hi = percentiles
    if not 0 <= lo < hi <= 100:
        raise ValueError(f"percentiles={percentiles!r} must satisfy 0 <= lo < hi <= 100")
    keys = list(lines) + [x]
    _check_columns(selected, keys + [value], "column")
    rows = []
    for k, sub in selected.groupby(keys, sort=True, dropna=False):
        v = sub[value].to_numpy(float)
        k = k if isinstance(k, tuple) else (k,)
        rows.append(dict(zip(keys, k)) | {
            "mean": float(np.mean(v)), "p_lo": float(np.percentile(v, lo)), "p_hi": float(np.percentile(v, hi)),
            "n_trials": len(v)})
    out = pd.DataFrame(rows)
    out["half_width"] = (out["p_hi"] - out["p_lo"]) / 2
    if clip is not None:
        out["bar_lo"] = np.maximum(out["mean"] - out["half_width"], clip[0])
        out["bar_hi"] = np.minimum(out["mean"] + out["half_width"], clip[1])
    return out


def patience_survives(losses, patience: int = 5, factor: float = 1.05) -> bool:
    """DIFF2's (Murata & Suzuki 2023, App. A) early-stopping rule on a train-loss trace
    (checkpoint 0 first): fail on NaN/inf; ``patience`` evaluations with loss >
    factor x best fail; the counter resets only on a strict improvement and is
    unchanged in between."""
    losses = np.asarray(losses, float)
    if losses.size == 0 or not np.isfinite(losses[0]):
        return False
    best, count = losses[0], 0
    for loss in losses[1:]:
        if not np.isfinite(loss):
            return False
        if loss > factor * best:
            count += 1
        elif loss < best:
            best, count = loss, 0
        if count >= patience:
            return False
    return True


def largest_surviving(etas, traces, patience: int = 5, factor: float = 1.05) -> tuple[int, bool]:
    """DIFF2's step-size selection: the index of the largest step size whose trace
    ``patience_survives`` (``etas`` in any order), and whether one survived;
    otherwise the one with the lowest min train loss."""
    order = np.argsort(-np.asarray(etas, float))
    for i in order:
        if patience_survives(traces[i], patience, factor):
            return int(i), True
    mins = [np.nanmin(np.where(np.isfinite(t), t, np.nan)) if np.isfinite(t).any() else np.inf for t in traces]
    return int(np.argmin(mins)), False
