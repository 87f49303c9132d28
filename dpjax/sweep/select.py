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

Where the selected step size sits at an end of its grid, the grid is extended
by one more geometric step beyond it and the selection repeated
(``extend_grid_at_edges``), so a selection is never an artefact of the grid's
range.

DIFF2 (Murata & Suzuki 2023, App. A): per configuration, the largest step
size whose training-loss trace passes the authors' patience rule
(``largest_surviving``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from dpjax import _validate


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
    report: str | None = "test_error",
) -> pd.DataFrame:
    """Per ``by`` group, the ``over`` value minimising the mean ``criterion`` over repetitions.

    Returns one row per ``by`` group with columns ``by + [over, criterion,
    report, "n_reps", "n_diverged"]`` (``criterion``/``report`` are the means
    over the selected value's repetitions; ``report=None``: no report column).
    Ties go to the smallest ``over``.
    """
    by = list(by)
    if len(runs) == 0:
        raise ValueError("runs is empty; nothing to select from")
    _check_columns(runs, by + [over, criterion] + ([report] if report is not None else []), "column")
    df = runs.copy()
    bad = ~np.isfinite(df[criterion].to_numpy(float))
    if "diverged_round" in df.columns:
        bad |= df["diverged_round"].to_numpy() >= 0
    df["_crit"] = np.where(bad, np.inf, df[criterion].to_numpy(float))
    df["_bad"] = bad
    rep = {"_rep": (report, "mean")} if report is not None else {}
    agg = df.groupby(by + [over], sort=True, dropna=False).agg(
        _crit=("_crit", "mean"), **rep, n_reps=("_crit", "size"), n_diverged=("_bad", "sum"))
    agg = agg.reset_index().sort_values(by + [over], kind="stable")
    best = agg.loc[agg.groupby(by, sort=True, dropna=False)["_crit"].idxmin()]
    out = best.rename(columns={"_crit": criterion, "_rep": report})
    reported = [report] if report is not None else []
    return out[by + [over, criterion] + reported + ["n_reps", "n_diverged"]].reset_index(drop=True)


def select_mean(
    runs: pd.DataFrame,
    by: Sequence[str],
    *,
    over: str = "hp_index",
    criterion: str = "train_loss",
    report: str = "test",
    mean_columns: Sequence[str] = (),
    first_columns: Sequence[str] = (),
    edge_column: str | None = None,
) -> pd.DataFrame:
    """``select_best`` with the selection's context: per ``by`` group the ``over`` value with
    the lowest mean ``criterion``, plus the means of ``mean_columns`` over its repetitions, the
    values of ``first_columns`` in its first row (e.g. the step size an ``hp_index`` stands for)
    and, with ``edge_column``, ``edge``: whether that column's selected value is the smallest or
    largest of its group (the selection hit an end of the grid)."""
    by = list(by)
    keys = by + [over]
    best = select_best(runs, over=over, by=by, criterion=criterion, report=report)
    for col in mean_columns:
        means = runs.groupby(keys)[col].mean().reset_index()
        best = best.merge(means, on=keys, how="left")
    first = runs.drop_duplicates(keys)[keys + list(first_columns)]
    best = best.merge(first, on=keys, how="left")
    if edge_column is None:
        return best
    ends = runs.groupby(by)[edge_column].agg(["min", "max"]).reset_index()
    best = best.merge(ends, on=by, how="left")
    best["edge"] = np.isclose(best[edge_column], best["min"]) | np.isclose(best[edge_column], best["max"])
    return best.drop(columns=["min", "max"])


def extended_grid(values: Sequence[float], side: str) -> float:
    """The next value of a geometric grid beyond its ``side`` ("low"/"high") end."""
    v = sorted(values)
    ratio = v[1] / v[0] if len(v) > 1 else 10.0
    return v[0] / ratio if side == "low" else v[-1] * ratio


def extend_grid_at_edges(
    runs: pd.DataFrame,
    *,
    by: Sequence[str],
    criterion: str,
    column: str,
    max_extensions: int,
    run_values: Callable[[list[dict], pd.DataFrame], pd.DataFrame],
    over: str = "hp_index",
    log: Callable[[dict], None] | None = None,
) -> pd.DataFrame:
    """Extends a geometric ``column`` grid (a step size) where the selection sits at an end.

    Per ``by`` group, while the selected ``over`` value (lowest mean
    ``criterion`` over repetitions, ``select_best``) has the smallest or largest
    ``column`` value tried and fewer than ``max_extensions`` extensions were
    made on that side, one more geometric step beyond it (``extended_grid``) is
    requested. A group whose runs all diverged (infinite mean) is left alone.
    ``run_values(requests, runs)`` runs the requests -- dicts of the group's
    ``by`` values, ``side`` ("low"/"high") and the new ``column`` value, in
    group order -- and returns their rows; each request is passed to ``log``.
    Rows get ``grid_extension`` = 0 (first grid) or 1 (an extension).
    """
    _validate.check_int("max_extensions", max_extensions, min_value=0)
    by = list(by)
    if "grid_extension" not in runs.columns:
        runs = runs.assign(grid_extension=0)
    if max_extensions == 0:
        return runs
    extensions: dict[tuple, dict[str, int]] = {}
    while True:
        sel = select_mean(runs, by, over=over, criterion=criterion, report=None, first_columns=(column,))
        requests = []
        for rec in sel.to_dict("records"):
            if not np.isfinite(rec[criterion]):
                continue
            group_key = tuple(rec[b] for b in by)
            in_group = np.logical_and.reduce([runs[b] == rec[b] for b in by])
            values = sorted(runs.loc[in_group, column].unique())
            side = "low" if np.isclose(rec[column], values[0]) else (
                "high" if np.isclose(rec[column], values[-1]) else None)
            done = extensions.setdefault(group_key, {"low": 0, "high": 0})
            if side is None or done[side] >= max_extensions:
                continue
            done[side] += 1
            requests.append({b: rec[b] for b in by} | {"side": side, column: extended_grid(values, side)})
        if not requests:
            return runs
        for request in requests:
            if log is not None:
                log(request)
        extra = run_values(requests, runs)
        extra["grid_extension"] = 1
        runs = pd.concat([runs, extra], ignore_index=True)


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
