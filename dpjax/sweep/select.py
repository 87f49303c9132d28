"""The papers' selection protocol and error bars, on a sweep's runs table.

ISRL-DP (Lowy & Razaviyayn 2023, Section 6 / App. I): for every (epsilon, setting, trial), each step size is run
``n_reps`` times; the step size with the smallest *mean final training loss* over the repetitions is selected (the
paper's criterion is the excess loss F(w) - F*, which has the same argmin because F* is a per-trial constant) and the
test metric of that step size, averaged over the repetitions, is reported. Diverged runs (NaN/inf, or a
``diverged_round`` >= 0) count as an infinite loss, as the authors' scripts assign a huge loss. Error bars: the 5th and
95th percentiles over trials, drawn as a symmetric bar of half-width (p95 - p5)/2 around the mean.

Where the selected step size sits at an end of its grid, the grid is extended by one more geometric step beyond it and
the selection repeated (``extend_grid_at_edges``), so a selection is never an artefact of the grid's range.

DIFF2 (Murata & Suzuki 2023, App. A): per configuration, the largest step size whose training-loss trace passes the
authors' patience rule (``largest_surviving``).

Scaling exponents (every paper's claims tables): ``slope_verdict`` is the one rule. A fitted log-log exponent may be
called "holds" only from >= 4 points spanning >= 1 decade, with a 90 % bootstrap interval over seeds reported beside it:
"holds" when the interval lies within the claimed range (prediction +- tolerance), "differs" when it excludes that
range, "inconclusive" otherwise (it straddles an edge; too few points; too short a span; no interval).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from dpjax import _validate


def check_columns(df: pd.DataFrame, cols, what: str) -> None:
    for c in cols:
        if c not in df.columns:
            raise ValueError(f"{what}={c!r} is not a column of the runs table; columns: {tuple(df.columns)}")


def select_best(runs: pd.DataFrame, *, over: str = "learning_rate", by: Sequence[str] = ("epsilon", "trial"),
                criterion: str = "train_loss", report: str | None = "test_error") -> pd.DataFrame:
    """Per ``by`` group, the ``over`` value minimising the mean ``criterion`` over repetitions.

    Returns one row per ``by`` group with columns ``by + [over, criterion, report, "n_reps", "n_diverged"]``
    (``criterion``/``report`` are the means over the selected value's repetitions; ``report=None``: no report column).
    Ties go to the smallest ``over``.
    """
    by = list(by)
    if len(runs) == 0:
        raise ValueError("runs is empty; nothing to select from")
    reported = [report] if report is not None else []
    check_columns(runs, by + [over, criterion] + reported, "column")
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
    return out[by + [over, criterion] + reported + ["n_reps", "n_diverged"]].reset_index(drop=True)



def select_mean(runs: pd.DataFrame, by: Sequence[str], *, over: str = "hp_index", criterion: str = "train_loss",
                report: str = "test", mean_columns: Sequence[str] = (), first_columns: Sequence[str] = (),
                edge_column: str | None = None) -> pd.DataFrame:
    """``select_best`` with the selection's context: per ``by`` group the ``over`` value with the lowest mean
    ``criterion``, plus the means of ``mean_columns`` over its repetitions, the values of ``first_columns`` in its first
    row (e.g. the step size an ``hp_index`` stands for) and, with ``edge_column``, ``edge``: whether that column's
    selected value is the smallest or largest of its group (the selection hit an end of the grid)."""
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


def extend_grid_at_edges(runs: pd.DataFrame, *, by: Sequence[str], criterion: str, column: str, max_extensions: int,
                         run_values: Callable[[list[dict], pd.DataFrame], pd.DataFrame], over: str = "hp_index",
                         log: Callable[[dict], None] | None = None) -> pd.DataFrame:
    """Extends a geometric ``column`` grid (a step size) where the selection sits at an end.

    Per ``by`` group, while the selected ``over`` value (lowest mean ``criterion`` over repetitions, ``select_best``)
    has the smallest or largest ``column`` value tried and fewer than ``max_extensions`` extensions were made on that
    side, one more geometric step beyond it (``extended_grid``) is requested. A group whose runs all diverged (infinite
    mean) is left alone. ``run_values(requests, runs)`` runs the requests -- dicts of the group's ``by`` values,
    ``side`` ("low"/"high") and the new ``column`` value, in group order -- and returns their rows; each request is
    passed to ``log``. Rows get ``grid_extension`` = 0 (first grid) or 1 (an extension).
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


def error_bars(selected: pd.DataFrame, *, x: str = "epsilon", value: str = "test_error", lines: Sequence[str] = (),
               percentiles: tuple[float, float] = (5.0, 95.0), clip: tuple[float, float] | None = None) -> pd.DataFrame:
    """Mean over trials and percentile bars per (lines..., x).

    Columns: ``lines + [x, "mean", "p_lo", "p_hi", "half_width", "n_trials"]`` with ``half_width = (p_hi - p_lo) / 2``
    (the authors' symmetric bar); ``clip`` bounds ``mean +- half_width`` when drawing (e.g. (0, 1) for error rates).
    """
    lo, hi = percentiles
    if not 0 <= lo < hi <= 100:
        raise ValueError(f"percentiles={percentiles!r} must satisfy 0 <= lo < hi <= 100")
    keys = list(lines) + [x]
    check_columns(selected, keys + [value], "column")
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
    """DIFF2's (Murata & Suzuki 2023, App. A) early-stopping rule on a train-loss trace (checkpoint 0 first): fail on
    NaN/inf; ``patience`` evaluations with loss > factor x best fail; the counter resets only on a strict improvement
    and is unchanged in between."""
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
    """DIFF2's step-size selection: the index of the largest step size whose trace ``patience_survives`` (``etas`` in
    any order), and whether one survived; otherwise the one with the lowest min train loss."""
    order = np.argsort(-np.asarray(etas, float))
    for i in order:
        if patience_survives(traces[i], patience, factor):
            return int(i), True
    mins = [np.nanmin(np.where(np.isfinite(t), t, np.nan)) if np.isfinite(t).any() else np.inf for t in traces]
    return int(np.argmin(mins)), False


# -- The verdict rule for scaling exponents (every paper's claims tables) --------------------------------------

#: a scaling exponent is judged only from at least this many points ...
MIN_POINTS = 4
#: ... spanning at least this many decades of the x axis
MIN_DECADES = 1.0
#: the level of the bootstrap interval reported beside every fitted exponent
CI_LEVEL = 0.90
#: bootstrap resamples and their fixed seed (the verdict of a kept result never changes between reruns)
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 20240623

SIDES = ("two-sided", "at_most", "at_least")


def verdict_rule_text(tolerance: float | None = None) -> str:
    """The rule in one sentence, for the reports that apply it."""
    tol = f" +- {tolerance:g}" if tolerance is not None else " +- its tolerance"
    return (f"Verdict rule (`dpjax.sweep.select.slope_verdict`): an exponent is judged only from >= {MIN_POINTS} "
            f"points spanning >= {MIN_DECADES:g} decade, with a {round(100 * CI_LEVEL)} % bootstrap interval over seeds "
            f"(fixed resampling seed); holds when the interval lies within the expected exponent{tol}, differs "
            "when it excludes that range, inconclusive otherwise (it straddles an edge, too few points, too short "
            "a span, no interval).")


@dataclasses.dataclass(frozen=True)
class SlopeVerdict:
    """A fitted log-log exponent, its interval and the verdict of ``slope_verdict``.

    ``verdict`` is ``"holds"``, ``"differs"`` or ``"inconclusive"``; ``reason`` says why in words; ``ci`` is the
    ``CI_LEVEL`` interval (``None``: none could be computed); ``interval`` says what the interval is (e.g. "90 % CI,
    bootstrap over 10 seeds"); ``band`` is the range of exponents the claim allows (the prediction +- the tolerance, one
    end open for a one-sided claim).
    """
    verdict: str
    slope: float
    ci: tuple[float, float] | None
    predicted: float
    tolerance: float
    side: str
    band: tuple[float, float]
    n_points: int
    decades: float
    interval: str
    reason: str

    @property
    def holds(self) -> bool:
        return self.verdict == "holds"

    def expected(self) -> str:
        """The claim in words, e.g. ``-0.500 +- 0.15`` or ``<= -0.350``."""
        return _claimed_range(self.predicted, self.tolerance, self.side)

    def measured(self) -> str:
        """The fitted exponent with its interval and what the interval is, for a report cell."""
        exact = self.ci is not None and self.ci[0] == self.ci[1]
        ci = f" [{self.ci[0]:+.3f}, {self.ci[1]:+.3f}]" if self.ci is not None and not exact else ""
        return (f"{self.slope:+.3f}{ci} ({self.interval}; {self.n_points} points over "
                f"{self.decades:.1f} decades)")

    def cell(self) -> str:
        """The verdict with its reason unless it holds, e.g. ``inconclusive: only 3 points (need >= 4)``."""
        return self.verdict if self.verdict == "holds" else f"{self.verdict}: {self.reason}"

    def as_dict(self) -> dict:
        """Flat columns for a slopes CSV."""
        return {"slope": self.slope, "ci_lo": self.ci[0] if self.ci else math.nan,
                "ci_hi": self.ci[1] if self.ci else math.nan, "ci_level": CI_LEVEL, "interval": self.interval,
                "predicted": self.predicted, "tolerance": self.tolerance, "side": self.side,
                "n_points": self.n_points, "decades": self.decades, "verdict": self.verdict, "reason": self.reason}


def _ci_name() -> str:
    return f"{round(100 * CI_LEVEL)} % CI"


def _fit_slopes(lx: np.ndarray, ly: np.ndarray) -> np.ndarray:
    """Least-squares slopes of each row of ``ly`` (shape ``[B, k]``) against ``lx`` (``[k]``)."""
    dx = lx - lx.mean()
    return (ly - ly.mean(axis=-1, keepdims=True)) @ dx / np.sum(dx * dx)


def _claimed_range(predicted: float, tolerance: float, side: str) -> str:
    lo, hi = _band(predicted, tolerance, side)
    if side == "at_most":
        return f"<= {hi:+.3f}"
    if side == "at_least":
        return f">= {lo:+.3f}"
    return f"{predicted:+.3f} +- {tolerance:g}"


def _band(predicted: float, tolerance: float, side: str) -> tuple[float, float]:
    return (-math.inf if side == "at_most" else predicted - tolerance,
            math.inf if side == "at_least" else predicted + tolerance)



def judge_slope(slope: float, ci: tuple[float, float] | None, *, n_points: int, decades: float, predicted: float,
                tolerance: float, side: str = "two-sided", interval: str = "") -> SlopeVerdict:
    """The verdict rule, given a fitted exponent and its interval (see ``slope_verdict``)."""
    _validate.check_choice("side", side, SIDES)
    _validate.check_positive("tolerance", tolerance)
    band = _band(float(predicted), float(tolerance), side)
    args = dict(slope=float(slope), ci=ci, predicted=float(predicted), tolerance=float(tolerance), side=side,
                band=band, n_points=int(n_points), decades=float(decades), interval=interval)
    if n_points < MIN_POINTS:
        return SlopeVerdict("inconclusive", reason=f"only {n_points} point{'s' if n_points != 1 else ''} "
                            f"(need >= {MIN_POINTS})", **args)
    if not decades >= MIN_DECADES - 1e-9:
        return SlopeVerdict("inconclusive", reason=f"the points span {decades:.2f} decades (need >= {MIN_DECADES:g})",
                            **args)
    if ci is None or not (np.isfinite(ci[0]) and np.isfinite(ci[1])):
        return SlopeVerdict("inconclusive", reason=f"no interval ({interval or 'not computable'})", **args)
    lo, hi = ci
    claimed = _claimed_range(predicted, tolerance, side)
    if hi < band[0] or lo > band[1]:
        return SlopeVerdict("differs", reason=f"the interval excludes {claimed}", **args)
    if lo < band[0] or hi > band[1]:
        return SlopeVerdict("inconclusive", reason=f"the interval straddles the edge of {claimed}", **args)
    return SlopeVerdict("holds", reason=f"the interval lies within {claimed}", **args)


def slope_verdict(x: Sequence[float], samples: Sequence, *, predicted: float, tolerance: float, side: str = "two-sided",
                  statistic: Callable[[np.ndarray], np.ndarray] | None = None, paired: bool = False,
                  unit: str = "seeds", resamples: int = BOOTSTRAP_RESAMPLES,
                  seed: int = BOOTSTRAP_SEED) -> SlopeVerdict:
    """The one rule for a scaling exponent: the least-squares slope of ``log stat(samples[i])`` against ``log x[i]``, a
    ``CI_LEVEL`` (90 %) percentile-bootstrap interval over the seeds, and a verdict.

    ``samples[i]``: the per-seed values at ``x[i]`` (1-d arrays; lengths may differ), or a scalar for an exact,
    deterministic value (then the interval is the slope itself). ``statistic`` maps the resampled values (shape ``[B,
    s]``) to one number per resample (default: the mean over seeds); ``paired``: the seeds of different points share
    their randomness (the same keys in every cell), so one resample draws the same seed indices at every point (all
    points must have the same number of seeds).

    Verdict (``judge_slope``):

    * ``"inconclusive"`` with fewer than ``MIN_POINTS`` (4) points, a span under ``MIN_DECADES`` (1) of x, or no
      interval (a point with a single seed, resampled statistics <= 0 in more than half the tail mass);
    * ``"holds"`` when the interval lies within the claimed range ``predicted +- tolerance`` (``side`` ``"at_most"``:
      exponents ``<= predicted + tolerance``; ``"at_least"``: ``>= predicted - tolerance``);
    * ``"differs"`` when the interval excludes that range (no point in common);
    * ``"inconclusive"`` when it straddles an edge of the range (the data cannot tell at the claim's tolerance).

    The bootstrap is deterministic (``seed``), so a kept result always gets the same verdict.
    """
    _validate.check_int("resamples", resamples, min_value=100)
    x = np.asarray(x, float)
    if x.ndim != 1 or len(samples) != x.size:
        raise ValueError(f"x has {x.size} points but samples has {len(samples)}; give one sample array per x")
    if x.size < 2 or np.any(~np.isfinite(x)) or np.any(x <= 0) or np.ptp(x) == 0:
        raise ValueError(f"x={x.tolist()!r} must hold >= 2 distinct positive finite values to fit a log-log slope")
    stat = statistic or (lambda v: np.mean(v, axis=-1))
    arrays = [np.atleast_1d(np.asarray(s, float)) for s in samples]
    deterministic = all(np.ndim(s) == 0 for s in samples)
    point = np.array([float(np.asarray(stat(a[None, :])).reshape(-1)[0]) for a in arrays])
    lx = np.log(x)
    decades = float(np.log10(x.max() / x.min()))
    kw = dict(n_points=int(x.size), decades=decades, predicted=predicted, tolerance=tolerance, side=side)
    if np.any(~np.isfinite(point)) or np.any(point <= 0):
        return judge_slope(math.nan, None, interval="a point's statistic is not positive", **kw)
    slope = float(_fit_slopes(lx, np.log(point)[None, :])[0])
    if deterministic:
        return judge_slope(slope, (slope, slope), interval="exact: deterministic values", **kw)
    sizes = [a.size for a in arrays]
    if min(sizes) < 2:
        return judge_slope(slope, None, interval=f"a point has a single {unit[:-1] if unit.endswith('s') else unit}",
                           **kw)
    rng = np.random.default_rng(seed)
    if paired:
        if len(set(sizes)) != 1:
            raise ValueError(f"paired=True needs the same number of {unit} at every point; got {sizes}")
        idx = rng.integers(0, sizes[0], size=(resamples, sizes[0]))
        stats = np.stack([np.asarray(stat(a[idx]), float) for a in arrays], axis=1)
    else:
        stats = np.stack([np.asarray(stat(a[rng.integers(0, a.size, size=(resamples, a.size))]), float)
                          for a in arrays], axis=1)
    n_desc = f"{sizes[0]}" if len(set(sizes)) == 1 else f"{min(sizes)}-{max(sizes)}"
    interval = f"{_ci_name()}, {'paired ' if paired else ''}bootstrap over {n_desc} {unit}"
    return judge_slope(slope, _percentile_interval(lx, stats), interval=interval, **kw)


def _percentile_interval(lx: np.ndarray, stats: np.ndarray) -> tuple[float, float] | None:
    """The ``CI_LEVEL`` percentile interval of the slopes of resampled statistics ``[B, k]``. A resample with a
    statistic <= 0 (no logarithm) counts as an infinitely steep slope of unknown sign; when those reach either tail the
    interval is undefined (``None``)."""
    alpha = (1 - CI_LEVEL) / 2
    ok = np.all(stats > 0, axis=1) & np.all(np.isfinite(stats), axis=1)
    if np.mean(~ok) >= alpha:
        return None
    slopes = np.sort(_fit_slopes(lx, np.log(stats[ok])))
    # the bad resamples sit outside both tails: shift the quantiles inward by their share
    bad = np.mean(~ok)
    lo_q, hi_q = (alpha - bad) / (1 - bad), (1 - alpha - bad) / (1 - bad)
    lo, hi = np.quantile(slopes, [lo_q, hi_q])
    return float(lo), float(hi)


def slope_verdict_from_band(x: Sequence[float], mean: Sequence[float], q05: Sequence[float], q95: Sequence[float],
                            n_seeds: int, *, predicted: float, tolerance: float, side: str = "two-sided",
                            resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> SlopeVerdict:
    """``slope_verdict`` for kept results that hold, per point, only the mean over ``n_seeds`` seeds and the 5th/95th
    percentiles of the seeds (``np.quantile``, linear interpolation), not the seeds themselves.

    A parametric bootstrap: the seeds' standard deviation is estimated from the band as ``(q95 - q05) / c``, with ``c``
    the expected width of that sample band for ``n_seeds`` normal draws (deterministic Monte Carlo; the band of a few
    draws is much narrower than the population's 3.29 sd), and each resample draws the per-point mean from ``N(mean,
    sd^2 / n_seeds)``. The interval is labelled as such; new runs keep their seeds and use ``slope_verdict``.
    """
    _validate.check_int("n_seeds", n_seeds, min_value=1)
    mean, q05, q95 = (np.asarray(a, float) for a in (mean, q05, q95))
    x = np.asarray(x, float)
    kw = dict(predicted=predicted, tolerance=tolerance, side=side)
    point = slope_verdict(x, list(mean), **kw)  # the point slope and the point/decade checks
    if n_seeds < 2 or not np.isfinite(point.slope):
        return judge_slope(point.slope, None, n_points=point.n_points, decades=point.decades,
                           interval="a point has a single seed" if n_seeds < 2 else point.interval, **kw)
    rng = np.random.default_rng(seed)
    unit = np.quantile(rng.standard_normal((20000, n_seeds)), [0.05, 0.95], axis=1)
    c = float(np.mean(unit[1] - unit[0]))
    sd = np.maximum(q95 - q05, 0.0) / c
    draws = mean[None, :] + sd[None, :] / math.sqrt(n_seeds) * rng.standard_normal((resamples, mean.size))
    interval = (f"{_ci_name()}, parametric bootstrap from the kept 5-95 % band of {n_seeds} seeds "
                "(per-seed values not kept)")
    return judge_slope(point.slope, _percentile_interval(np.log(x), draws), n_points=point.n_points,
                       decades=point.decades, interval=interval, **kw)
