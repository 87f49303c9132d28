"""The one plotting module: ``dpjax plot`` (paper-style figures, metric vs x with percentile bars, from a sweep
directory) and the figure plumbing every reproduction uses (``new_figure``, ``save_figure``, ``percentile_errorbar``,
``plot_panels``)."""

from __future__ import annotations

import math
import pathlib
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from dpjax import _validate
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


def spans_decades(values, decades: float = 1.0) -> bool:
    """Whether ``values`` call for a log axis: all finite ones positive and max/min >= 10**decades."""
    v = np.asarray(list(values), float).ravel()
    v = v[np.isfinite(v)]
    return bool(v.size >= 2 and np.all(v > 0) and v.max() >= 10**decades * v.min())


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (figures are only written to files)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def new_figure(rows: int = 1, cols: int = 1, *, panel: tuple[float, float] = (5.5, 4.0), figsize=None, **kwargs):
    """``(fig, axes)`` on the non-interactive Agg backend; ``axes`` is a 2-d array (``squeeze=False``) unless
    ``squeeze=True`` is passed; ``figsize`` defaults to ``panel`` per panel."""
    kwargs.setdefault("squeeze", False)
    figsize = figsize or (panel[0] * cols, panel[1] * rows)
    return pyplot().subplots(rows, cols, figsize=figsize, **kwargs)


def save_figure(fig, path, *, title: str | None = None, dpi: int = 110, tight: bool = True, **savefig_kwargs
                ) -> pathlib.Path:
    """Sets the suptitle, lays out, writes ``path`` and closes ``fig``."""
    if title:
        fig.suptitle(title, fontsize=10)
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi, **savefig_kwargs)
    pyplot().close(fig)
    return pathlib.Path(path)


def percentile_errorbar(ax, x, mean, lo, hi, *, clip=None, **kwargs):
    """``mean`` against ``x`` with the bar ``[lo, hi]`` drawn around it (asymmetric), capped to ``clip = (min, max)`` if
    given. A bar never reaches past its mean: with few trials the mean can fall outside the interval, and the bar then
    ends at the mean."""
    mean, lo, hi = (np.asarray(a, float) for a in (mean, lo, hi))
    if clip is not None:
        lo, hi = np.maximum(lo, clip[0]), np.minimum(hi, clip[1])
    yerr = np.vstack([np.maximum(mean - lo, 0.0), np.maximum(hi - mean, 0.0)])
    kwargs.setdefault("marker", "o")
    kwargs.setdefault("capsize", 3)
    return ax.errorbar(x, mean, yerr=yerr, **kwargs)


def plot_panels(path: pathlib.Path, summary, panels: Sequence[tuple[str, dict]], *, private: Mapping[str, tuple],
                nonprivate: Mapping[str, tuple], ylabel: str, title: str, clip=None, ncols: int = 3) -> None:
    """Paper-style figure: one panel per ``(title, selector)``; the ``private`` methods (``name -> (label, color)``) vs
    epsilon with symmetric ``half_width`` bars around the mean, the ``nonprivate`` ones as horizontal lines. ``summary``
    has columns ``algorithm, epsilon, mean, half_width`` and the selectors' columns."""
    import matplotlib.ticker
    from dpjax import _validate
    _validate.check_int("ncols", ncols, min_value=1)
    cols = min(ncols, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = new_figure(rows, cols, panel=(4.6, 3.6))
    for ax, (ptitle, sel) in zip(axes.flat, panels):
        sub = summary
        for k, v in sel.items():
            sub = sub[sub[k] == v]
        priv = sub[np.isfinite(sub["epsilon"].to_numpy(float))]
        for alg, (label, color) in private.items():
            s = priv[priv["algorithm"] == alg].sort_values("epsilon")
            if len(s):
                percentile_errorbar(ax, s["epsilon"], s["mean"], s["mean"] - s["half_width"],
                                    s["mean"] + s["half_width"], clip=clip, color=color, label=label)
        for alg, (label, color) in nonprivate.items():
            s = sub[sub["algorithm"] == alg]
            if len(s):
                m = float(s["mean"].iloc[0])
                ax.axhline(m, color=color, ls="--", label=f"{label} ({m:.3g})")
        ax.set_xscale("log")
        eps_ticks = sorted(set(float(e) for e in priv["epsilon"]))
        if eps_ticks:
            ax.set_xticks(eps_ticks)
            ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("ε (nominal)")
        ax.set_ylabel(ylabel)
        ax.set_title(ptitle, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    save_figure(fig, path, title=title)


def completeness(store) -> tuple[int, int] | None:
    """``(finished, planned)`` chunks of a sweep directory, from the plan of its ``config.json`` (``None`` when the
    directory records no plannable config, e.g. a hand-made store)."""
    import sys
    from dpjax.sweep import plan
    from dpjax.sweep.config import SweepConfig
    from dpjax.sweep.store import Store
    s = Store(store)
    cfg = s.read_config()
    if not isinstance(cfg, dict) or "algorithm" not in cfg:
        return None
    try:  # the directory's own sweep: its size was accepted when it was written
        c = SweepConfig.from_dict({**cfg, "max_runs": sys.maxsize, "max_data_mb": 1e300})
    except (ValueError, TypeError) as err:
        raise ValueError(f"{s.config_path} does not describe a sweep this dpjax can plan: {err}") from None
    groups = plan.build_groups(c)
    chunks = plan.build_chunks(groups, c.chunk_size or plan.default_chunk_size(groups))
    expected = {ch.chunk_id for ch in chunks}
    return len(s.finished_chunks() & expected), len(expected)


#: Smallest y span ``dpjax plot`` draws for an error rate (absolute) and for any other metric (relative to its
#: largest magnitude): a flat curve zoomed to its own 5e-4 range makes seed noise look like a trend.
MIN_RATE_SPAN = 0.05
MIN_RELATIVE_SPAN = 0.1


def _selected(runs, *, select_over, by, criterion, metric):
    """One row per ``by`` group: the metric of the ``select_over`` value chosen by mean ``criterion`` (or the mean)."""
    if select_over:
        return select.select_best(runs, over=select_over, by=by, criterion=criterion, report=metric)
    select.check_columns(runs, by + [metric], "column")
    return runs.groupby(by, dropna=False)[metric].mean().reset_index()


BAR_UNITS = ("auto", "trials", "runs")


def _bar_units(runs, chosen, *, select_over, by, metric, bars: str = "auto"):
    """``(rows, unit)``: the rows the bars spread over. ``bars="trials"``: one row per trial (the mean over its
    repetitions: the spread of the data split); ``"runs"``: every run of the selected configuration, trials x
    repetitions (the spread of split and seed together); ``"auto"``: trials when some point has several, else the
    repetitions, so a 1-trial sweep with repetitions gets bars."""
    _validate.check_choice("bars", bars, BAR_UNITS)
    trials = chosen.groupby([c for c in by if c != "trial"], dropna=False)["trial"].nunique()
    several_trials = bool(len(trials) and trials.max() > 1)
    if bars == "trials" or (bars == "auto" and several_trials):
        return chosen, "trials"
    keys = by + ([select_over] if select_over else [])
    reps = runs.merge(chosen[keys].drop_duplicates(), on=keys, how="inner")
    return reps[keys + [metric]], ("runs (trials x repetitions)" if several_trials else "repetitions")


def _ylabel(metric: str, bars, unit: str, percentiles) -> str:
    """The y label: the metric, what the mean is over, and what the bars are (or that there are none)."""
    n_units = int(bars["n_trials"].max()) if len(bars) else 0
    spread = (f"bars: p{percentiles[0]:g}-p{percentiles[1]:g} over {n_units} {unit}" if n_units > 1
              else "no bars: 1 trial, 1 repetition")
    return f"{metric}\n(mean over {unit}; {spread})"


def _reference_level(reference, select_over, criterion: str, metric: str) -> float:
    """The mean ``metric`` of another sweep directory, ``select_over`` chosen per trial as in the plotted one."""
    ref_runs, _ = load_results(reference)
    if len(ref_runs) == 0:
        raise ValueError(f"reference={str(reference)!r} has no finished runs yet")
    ref_by = ["trial"] if "trial" in ref_runs.columns else []
    return float(_selected(ref_runs, select_over=select_over, by=ref_by, criterion=criterion,
                           metric=metric)[metric].mean())


def _widen_flat(ax, values, is_rate: bool) -> bool:
    """Widens a linear y axis to at least the minimum span around the data's middle; True when it did."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if v.size == 0 or ax.get_yscale() != "linear":
        return False
    lo, hi = float(v.min()), float(v.max())
    need = MIN_RATE_SPAN if is_rate else MIN_RELATIVE_SPAN * max(abs(lo), abs(hi), 1e-12)
    if hi - lo >= need:
        return False
    mid = (lo + hi) / 2
    lo_, hi_ = mid - need / 2, mid + need / 2
    if is_rate and lo_ < 0:
        lo_, hi_ = 0.0, need
    ax.set_ylim(lo_, hi_)
    return True


def plot_store(store, *, x: str = "epsilon", select_over: str | None = "learning_rate", criterion: str = "train_loss",
               metric: str = "test_error", lines: str | None = None, out=None, percentiles=(5.0, 95.0),
               title: str | None = None, logx: bool | None = None, logy: bool | None = None,
               partial: bool = False, reference=None, bars: str = "auto") -> pathlib.Path:
    """Selects ``select_over`` per (x, line, trial) by mean ``criterion`` over repetitions, then plots the mean
    ``metric`` over trials against ``x`` with percentile bars.

    Bars spread over the trials; a sweep of one trial gets them over the selected configuration's repetitions instead
    (``bars="auto"``); ``bars="runs"`` spreads them over every run of the selected configuration (trials x
    repetitions), ``bars="trials"`` over trials only. The axis label says which (and how many), or that there are none. A linear y axis spans at least
    ``MIN_RATE_SPAN`` (error rates) or ``MIN_RELATIVE_SPAN`` of the values, so a flat curve is drawn flat. Points at a
    non-finite ``x`` (epsilon = inf) are drawn as a horizontal line named in the legend, not dropped silently.
    ``reference``: another sweep directory (e.g. the non-private twin's), its ``metric`` selected the same way and
    averaged, drawn as a dashed horizontal line.

    ``logx``/``logy``: log axes; ``None`` (default): log when the plotted values are positive and span at least a decade
    (``spans_decades``). ``title``: default "<metric> vs <x>" with the store's name and the selection rule.

    A sweep directory holding only some of its planned chunks (interrupted, or a full disk) is refused with a
    ``ValueError`` saying "k of n chunks", unless ``partial=True``: the figure then says so in its title.
    """
    _validate.check_choice("bars", bars, BAR_UNITS)
    runs, _ = load_results(store)
    if len(runs) == 0:
        raise ValueError(f"store={str(store)!r} has no finished runs yet")
    done = completeness(store)
    if done is not None and done[0] < done[1]:
        if not partial:
            raise ValueError(f"store={str(store)!r} is partial: {done[0]} of {done[1]} chunks are finished (an "
                             "interrupted sweep, or a full disk); run the same `dpjax sweep CONFIG --out DIR` to finish "
                             "it, or pass --partial to plot the finished chunks")
        partial_note = f" (partial: {done[0]} of {done[1]} chunks)"
    else:
        partial_note = ""
    ref_mean = None if reference is None else _reference_level(reference, select_over, criterion, metric)
    line_cols = [lines] if lines else _static_lines(runs, x)
    by = line_cols + [x, "trial"]
    chosen = _selected(runs, select_over=select_over, by=by, criterion=criterion, metric=metric)
    units, unit = _bar_units(runs, chosen, select_over=select_over, by=by, metric=metric, bars=bars)
    is_rate = metric.endswith("error")
    bars = select.error_bars(units, x=x, value=metric, lines=line_cols, percentiles=percentiles,
                             clip=(0.0, 1.0) if is_rate else None)
    finite = np.isfinite(bars[x].to_numpy(float))
    fig, ax = new_figure(squeeze=True, figsize=(7, 4.6))
    groups = list(bars.groupby(line_cols, dropna=False)) if line_cols else [((), bars)]
    drawn = 0
    for key, sub in groups:
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(f"{c}={v}" for c, v in zip(line_cols, key)) or metric
        fin = sub[np.isfinite(sub[x].to_numpy(float))]
        if len(fin):
            percentile_errorbar(ax, fin[x], fin["mean"], fin["p_lo"], fin["p_hi"], label=label)
            drawn += 1
        for _, row in sub[~np.isfinite(sub[x].to_numpy(float))].iterrows():  # e.g. epsilon = inf: a level, no x
            ax.axhline(row["mean"], ls=":", color="gray", label=f"{label} at {x}={row[x]:g} ({row['mean']:.3g})")
            drawn += 1
    if ref_mean is not None:
        ax.axhline(ref_mean, ls="--", color="black",
                   label=f"reference: {pathlib.Path(reference).name} ({ref_mean:.3g})")
        drawn += 1
    ax.set_xlabel(x)
    ax.set_ylabel(_ylabel(metric, bars, unit, percentiles))
    if logx if logx is not None else spans_decades(bars.loc[finite, x]):
        ax.set_xscale("log")
    if logy if logy is not None else spans_decades(pd.concat([bars["mean"], bars["p_lo"], bars["p_hi"]])):
        ax.set_yscale("log")
    levels = [bars["mean"], bars["p_lo"], bars["p_hi"]] + ([pd.Series([ref_mean])] if ref_mean is not None else [])
    _widen_flat(ax, pd.concat(levels), is_rate)
    ax.grid(alpha=0.3, which="both")
    if drawn > 1:
        ax.legend(fontsize=8)
    chosen_by = f"\n{select_over} chosen per point by the mean {criterion}" if select_over else ""
    ax.set_title((title or f"{metric} vs {x} ({pathlib.Path(store).name}){chosen_by}") + partial_note, fontsize=10)
    out = save_figure(fig, pathlib.Path(out) if out else pathlib.Path(store) / "figure.png", dpi=150)
    bars.to_csv(out.with_suffix(".csv"), index=False)
    return out
