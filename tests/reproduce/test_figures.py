"""Every figure dpjax draws is readable at a glance: each panel has x and y labels and a title, a legend when
it shows several labelled series, log axes where its curves span decades, and nothing drawn outside the
figure. Each figure function is rendered on small synthetic inputs (Agg backend; no computation)."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from dpjax.sweep.plot import spans_decades  # noqa: E402

_close = plt.close  # the real one (the fixture below makes plt.close a no-op)


@pytest.fixture
def captured(monkeypatch):
    """The figures a call leaves open: ``plt.close`` is a no-op while the figure functions run."""
    plt.close("all")
    monkeypatch.setattr(plt, "close", lambda *a, **k: None)
    yield lambda: [plt.figure(n) for n in plt.get_fignums()]
    monkeypatch.undo()
    plt.close("all")


def _visible(values, lo, hi):
    v = np.asarray(values, float)
    return v[np.isfinite(v) & (v >= min(lo, hi)) & (v <= max(lo, hi))]


def assert_readable(fig):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison and ax.get_label() != "<colorbar>"]
    assert panels, "a figure without a visible panel"
    for ax in panels:
        where = f"panel {ax.get_title()!r}"
        assert ax.get_xlabel().strip(), f"{where}: no x label"
        assert ax.get_ylabel().strip(), f"{where}: no y label"
        assert ax.get_title().strip(), "a panel without a title"
        labels = [lab for lab in ax.get_legend_handles_labels()[1] if not lab.startswith("_")]
        if len(set(labels)) >= 2:
            assert ax.get_legend() is not None, f"{where}: {len(set(labels))} labelled series, no legend"
        lines = [ln for ln in ax.get_lines() if len(np.atleast_1d(ln.get_xdata())) >= 2]
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        xs = np.concatenate([_visible(ln.get_xdata(), x0, x1) for ln in lines]) if lines else np.array([])
        ys = np.concatenate([_visible(ln.get_ydata(), y0, y1) for ln in lines]) if lines else np.array([])
        if spans_decades(xs, 2):
            assert ax.get_xscale() == "log", f"{where}: x data span {xs.min():.3g}..{xs.max():.3g} on a linear axis"
        if spans_decades(ys, 2):
            assert ax.get_yscale() == "log", f"{where}: y data span {ys.min():.3g}..{ys.max():.3g} on a linear axis"
        for axis, lo, hi in ((ax.xaxis, 0, 2), (ax.yaxis, 1, 3)):  # tick labels must not overlap each other
            shown = [t.get_window_extent(renderer) for t in axis.get_ticklabels(which="both")
                     if t.get_visible() and t.get_text().strip()]
            ext = ax.bbox.extents
            shown = sorted((b for b in shown if ext[lo] - 1 <= (b.extents[lo] + b.extents[hi]) / 2 <= ext[hi] + 1),
                           key=lambda b: b.extents[lo])
            for u, v in zip(shown, shown[1:]):
                assert u.extents[hi] <= v.extents[lo] + 0.5, f"{where}: overlapping {axis.axis_name} tick labels"
        if "±" in ax.get_ylabel() + ax.get_title():  # a spread is said with what it is
            assert re.search(r"SD|standard|error|interval|CI|percentile", ax.get_ylabel() + ax.get_title()), \
                f"{where}: '±' without saying what it is"
        bb = ax.get_tightbbox(renderer)  # everything the panel draws: labels, tick labels, title, legend
        assert (bb.x0 >= box.x0 - 1 and bb.x1 <= box.x1 + 1 and bb.y0 >= box.y0 - 1 and bb.y1 <= box.y1 + 1), \
            f"{where}: cut off ({bb.bounds} outside the figure's {box.bounds})"
    if fig._suptitle is not None:
        bb = fig._suptitle.get_window_extent(renderer)
        assert bb.x0 >= box.x0 - 1 and bb.x1 <= box.x1 + 1 and bb.y1 <= box.y1 + 1, "suptitle cut off"


def _check_all(figs, expected: int):
    assert len(figs) == expected
    for fig in figs:
        assert_readable(fig)
        _close(fig)


def test_the_checker_catches_a_missing_label_legend_log_axis_and_cut_off_text():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([1, 10, 1000], [1, 2, 3], label="a")
    ax.plot([1, 10, 1000], [3, 2, 1], label="b")
    ax.set(xlabel="x", ylabel="y", title="t")
    with pytest.raises(AssertionError, match="no legend"):
        assert_readable(fig)
    ax.legend()
    with pytest.raises(AssertionError, match="linear axis"):
        assert_readable(fig)
    ax.set_xscale("log")
    with pytest.raises(AssertionError, match="cut off"):  # no layout: the x label falls below the figure
        assert_readable(fig)
    fig.tight_layout()
    assert_readable(fig)
    ax.set_ylabel("a y label far too long to fit in a two-inch high figure without being cut off " * 2)
    with pytest.raises(AssertionError, match="cut off"):
        assert_readable(fig)
    ax.set_ylabel("")
    with pytest.raises(AssertionError, match="no y label"):
        assert_readable(fig)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([1, 2], [1, 2])
    ax.set(xlabel="x", ylabel="y", title="t", xticks=[1, 1.05, 2], xticklabels=["1000", "1050", "2000"])
    fig.tight_layout()
    with pytest.raises(AssertionError, match="overlapping x tick labels"):
        assert_readable(fig)
    plt.close(fig)


def test_dpjax_plot_store(tmp_path, captured):
    from dpjax.sweep.plot import plot_store
    from dpjax.sweep.store import Store

    s = Store(tmp_path)
    s.prepare()
    (tmp_path / "config.json").write_text("{}")
    rng = np.random.default_rng(0)
    eps = [0.5, 2.0, 8.0, 32.0]
    rows = [{"run_id": f"r{i}", "group": 0, "trial": t, "repetition": 0, "epsilon": e, "learning_rate": lr,
             "algorithm": alg, "train_loss": 1 / e + lr, "test_error": float(np.clip(0.5 / e + 0.05 * rng.random(), 0, 1))}
            for i, (e, t, lr, alg) in enumerate((e, t, lr, alg) for e in eps for t in range(3) for lr in (0.1, 1.0)
                                                 for alg in ("a", "b"))]
    s.write_chunk("c-0000", pd.DataFrame(rows), pd.DataFrame({"run_id": ["r0"]}))
    plot_store(tmp_path, out=tmp_path / "fig.png", lines="algorithm")
    (fig,) = captured()
    assert_readable(fig)
    (ax,) = fig.axes
    assert ax.get_legend() is not None
    assert ax.get_xscale() == "log"  # epsilon spans 1.8 decades: log by default
    assert "test_error vs epsilon" in ax.get_title()


def test_plot_panels_and_isrl_figure(tmp_path, captured):
    from dpjax.reproduce import isrl
    from dpjax.reproduce.isrl_protocol import LOCAL, LOCAL_NP, MB, MB_NP

    rows = []
    for alg, cal in ((MB, "paper"), (LOCAL, "paper"), (MB, "tight"), (LOCAL, "tight")):
        for e in (0.5, 2.0, 8.0):
            rows.append({"num_silos": 4, "silos_per_round": 2, "algorithm": alg, "calibration": cal, "epsilon": e,
                         "mean": 0.3 / e, "p_lo": 0.2 / e, "p_hi": 0.4 / e, "half_width": 0.1 / e, "n_trials": 3})
    for alg in (MB_NP, LOCAL_NP):
        rows.append({"num_silos": 4, "silos_per_round": 2, "algorithm": alg, "calibration": "none",
                     "epsilon": math.inf, "mean": 0.1, "p_lo": 0.1, "p_hi": 0.1, "half_width": 0.0, "n_trials": 3})
    exp = isrl.config.Experiment("isrl-x", "test_error", (isrl.config.Setting(4, 2),), (0.5, 2.0, 8.0), 8.0, 5, 1, 1, (0.1,),
                          (0.1,))
    isrl.outputs.plot_figure(tmp_path, exp, pd.DataFrame(rows), "a title (silo heterogeneity υ*² = 0.1)")
    _check_all(captured(), 1)


@pytest.mark.slow
def test_shuffle_sco_figures(tmp_path, captured):
    from dpjax.reproduce import shuffle_sco as R

    rows = [{"check": "p1d_moments", "z_mean": 0.5, "var_ratio": 1.01}, {"check": "pvec_moments", "z_mean": -1.0,
                                                                         "var_ratio": 0.98},
            {"check": "mc_audit", "eps_lower_bound": 0.1, "epsilon": 1.4}]
    support = np.arange(0, 60)
    pmf = np.exp(-0.5 * ((support - 30) / 6.0) ** 2)
    pmf /= pmf.sum()
    rng = np.random.default_rng(0)
    plots = {"bits": (rng.normal(30, 6, 500), rng.normal(30, 6, 500), support, pmf, lambda v: np.round(v)),
             "profile": (np.linspace(0, 3, 50), np.exp(-10 * np.linspace(0, 3, 50)), 1.4, 1e-3)}
    R.protocols.plot_protocols(tmp_path / "p.png", rows, plots)
    _check_all(captured(), 1)

    def point(alg, iname, sweep, n, d, v, **kw):
        return dict(algorithm=alg, instance=iname, sweep=sweep, n=n, d=d, epsilon=0.9, value=v, schedule="lan", **kw)

    rows = []
    for protocol, (iname, *_rest) in R.config.RATE_PROTOCOLS.items():
        for n in (10**3, 10**4, 10**5):
            rows += [point(protocol, iname, "n", n, 8, 10 / n**0.7), point(f"{protocol}_twin", iname, "n", n, 8, 1 / n),
                     point(f"central_dp[{protocol}]", iname, "n", n, 8, 3 / n)]
        rows += [point(protocol, iname, "d", 10**4, d, 0.01 * d**0.4) for d in (2, 8, 32, 128)]
    R.outputs.plot_rates(tmp_path / "r.png", rows, [])
    _check_all(captured(), 1)
    R.regimes.plot_regimes(tmp_path / "g.png", [dict(r, epsilon=0.9) for r in rows])
    _check_all(captured(), 1)


@pytest.mark.slow
def test_diff2_figure(tmp_path, captured):
    from dpjax.reproduce import diff2

    rounds = np.arange(0, 40, 4)
    rng = np.random.default_rng(0)

    def entry(scale):
        curves = scale * (1 + 10 * np.exp(-rounds / 8))[None, :] * (1 + 0.05 * rng.random((5, rounds.size)))
        return {"curves": curves, "best": curves.min(1), "final": curves[:, -1]}

    summary = {(alg, e): {m: entry(s) for m in ("train_loss", "test_loss")}
               for alg, e, s in (("GD", math.inf, 0.01), ("DP-GD", 3.0, 0.02), ("DIFF2-GD", 3.0, 0.015))}
    diff2.figures.plot_figure(tmp_path / "d.png", ["california_housing"], {"california_housing": summary},
                {"california_housing": rounds}, ("train_loss", "test_loss"), 3.0, "DIFF2 figure")
    (fig,) = captured()
    assert "± SD over 5 seeds" in fig.axes[0].get_ylabel()
    _check_all([fig], 1)
    one = {k: {m: {"curves": v["curves"][:1], "best": v["best"][:1], "final": v["final"][:1]} for m, v in e.items()}
           for k, e in summary.items()}
    diff2.figures.plot_figure(tmp_path / "d1.png", ["california_housing"], {"california_housing": one},
                {"california_housing": rounds}, ("train_loss", "test_loss"), 3.0, "DIFF2 figure")
    (fig,) = captured()
    assert "±" not in fig.axes[0].get_ylabel() and "one seed" in fig.axes[0].get_ylabel()  # no spread from one seed
    _check_all([fig], 1)


@pytest.mark.slow
def test_dpsgd_and_batch_clipping_figures(tmp_path, captured):
    from dpjax.reproduce import batch_clipping_privacy as B
    from dpjax.reproduce import dpsgd_mnist_report

    best = {"BC-SH": {"mean": 0.9, "std": 0.01, "seeds": 3}, "IC-SS": {"mean": 0.93, "std": float("nan"), "seeds": 1}}
    privacy = {n: [{"group_size": g, "accountant": a, "epsilon": e0 * g**p} for g in (1, 2, 4, 8)
                   for a, p in (("strong-exact", 0.6), ("sqrt-gE", 0.5), ("generic-group", 1.5))]
               for n, e0 in (("BC-SH", 3.7), ("IC-SS", 5.3))}
    dpsgd_mnist_report.plot(tmp_path / "m.png", best, privacy)
    _check_all(captured(), 1)

    alphas = np.linspace(0, 1, 50)
    n1 = (alphas, {g: (1 - alphas**(1 / g), 1 - alphas**(1 / (g + 0.1)), 1 - alphas**(1 / (2 * g))) for g in (1, 2)})
    n2 = B.n2_heatmap()
    n3 = ((1, 2, 4, 8), {"shuffle-batch": [7.5, 11.4, 17.8, 28.3], "sqrt(gE)/sigma": [7.5, 11.5, 17.9, 28.4],
                         "generic g sqrt(E)/sigma": [7.5, 17.9, 46.2, 133.1]})
    a4 = np.logspace(-6, 0, 40)
    n4 = (a4, {e: tuple(np.clip(1 - a4 * k, 0, 1) for k in (1.0, 1.1, 0.9, 1.05, 0.95)) for e in (1, 10, 100)})
    n8 = ((alphas, 1 - alphas, 1 - alphas, True), (alphas, 1 - alphas, 1 - alphas, True))
    B.plot(tmp_path / "b.png", n1, n2, n3, n4, n8)
    _check_all(captured(), 1)


@pytest.mark.slow
def test_user_level_figures(captured):
    from dpjax.reproduce import user_level as U

    xs = [4, 16, 64, 256]
    U.outputs.loglog_panels(plt, [("D5: excess vs m", "m", "excess empirical risk",
                     [("measured", xs, [1 / x for x in xs], "o-"), ("bound", xs, [2 / x**0.5 for x in xs], "k--")])])
    rng = np.random.default_rng(0)
    U.outputs.plot_tail(plt, [(m, np.abs(rng.normal(0, math.sqrt(m), 2000)), None) for m in (20, 80)], (0.1, 0.01), 2000)
    rate = {(lab, m): (1.0 if lab == "exchangeable" or m < 1000 else 0.0, m / 100) for lab in
            ("exchangeable", "heterogeneous (tau=3)") for m in (16, 256, 4096)}
    U.outputs.plot_certificate(plt, (16, 256, 4096), rate)
    table = [{"H": h, "H_no_stability_test": 10 * h + 0.01, "certified_delta": 0.05} for h in (0.0, 1e-6, 0.02)]
    U.outputs.plot_audit(plt, table)
    _check_all(captured(), 4)
