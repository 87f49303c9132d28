"""Outputs of the user-level demonstrations: results, report, figures (one writer for D1-D9)."""

from __future__ import annotations

import json
import math
import pathlib
import platform
import time
from typing import Callable, Sequence

import numpy as np

from dpjax import progress
from dpjax.reproduce import LISTING, register, report
from dpjax.reproduce.user_level.claims import select_rule_line
from dpjax.reproduce.user_level.config import PAPER


def verdict_cell(c: dict) -> str:
    verdict = c.get("verdict", "holds" if c["holds"] else "differs")
    if verdict == "holds":
        return "yes"
    if verdict == "differs":
        return "**no**" + (f" ({c['reason']})" if c.get("reason") else "")
    return f"inconclusive: {c['reason']}"


def check_out_dir(out_dir: pathlib.Path, name: str, quick: bool, seed: int) -> None:
    """Refuses to overwrite a different run (another protocol or seed) in ``out_dir``."""
    meta = out_dir / "meta.json"
    if meta.exists():
        old = json.loads(meta.read_text())
        if (old.get("figure"), old.get("quick"), old.get("seed")) != (name, quick, seed):
            raise ValueError(f"out_dir={str(out_dir)!r} holds another run ({old.get('figure')}, quick="
                             f"{old.get('quick')}, seed={old.get('seed')}); choose another --out or remove it")


def write_figure(out_dir: pathlib.Path, name: str, title: str, rows: list[dict], claims: list[dict], notes: Sequence[str],
           plot: Callable, *, quick: bool, seed: int, wall: float, mode: str) -> pathlib.Path:
    from dpjax.sweep.plot import pyplot, save_figure

    out_dir.mkdir(parents=True, exist_ok=True)
    report.tidy_results(out_dir, rows, fill_missing=True)
    png = save_figure(plot(pyplot()), out_dir / f"{name}.png")
    held = sum(bool(c["holds"]) for c in claims)
    open_ = sum(c.get("verdict") == "inconclusive" for c in claims)
    lines = [f"# {name}: {title}", "",
             f"Paper: {PAPER} (no experiments in the paper; this is a numerical check of its theorems on synthetic "
             f"data). Mode: **{'quick' if quick else 'full'}**, seed {seed}, wall time {wall:.1f} s on "
             f"{platform.machine()} ({report.device_line()}).", "",
             f"Privacy mode: **{mode}**.", "", f"![figure]({png.name})", "",
             f"## Expected outcomes ({held}/{len(claims)} hold" + (f", {open_} inconclusive" if open_ else "") + ")",
             "", select_rule_line(),
             "", report.markdown_table([[c["claim"], c["setting"], c["measured"], verdict_cell(c)] for c in claims],
                                       ["expected outcome", "setting", "measured", "holds"])]
    lines += ["", "## Notes", ""] + [f"* {n}" for n in notes]
    lines += ["", f"Files: `results.csv` (tidy: algorithm, epsilon, trial, metric, value, accountant, ...), "
              f"`{png.name}`, `meta.json`."]
    path = report.write_report(out_dir, lines)
    report.write_meta(out_dir, {"figure": name, "quick": quick, "seed": seed, "wall_time_s": wall,
                                "claims_held": held, "claims_inconclusive": open_, "claims": len(claims)})
    return path


def run_figure(name: str, body: Callable, out_dir, quick: bool, seed: int) -> pathlib.Path:
    out_dir = pathlib.Path(out_dir)
    check_out_dir(out_dir, name, quick, seed)
    start = time.perf_counter()
    progress.stage(f"{name}: computing ({'quick' if quick else 'full'} protocol; a line per cell of each sweep)")
    title, rows, claims, notes, plot, mode = body(quick, seed)
    progress.stage(f"{name}: writing results.csv, the figure and report.md")
    return write_figure(out_dir, name, title, rows, claims, notes, plot, quick=quick, seed=seed,
                  wall=time.perf_counter() - start, mode=mode)


def demonstration(name: str, body: Callable) -> Callable:
    """Registers the demonstration ``body`` (``(quick, seed) -> (title, rows, claims, notes, plot, mode)``) as the
    figure ``name`` (described by its ``LISTING`` entry); returns its figure function ``(out_dir, *, quick, seed)``,
    which runs it through ``run_figure``."""

    def figure(out_dir, *, quick: bool, seed: int):
        return run_figure(name, body, out_dir, quick, seed)

    figure.__name__ = figure.__qualname__ = body.__name__.lstrip("_") + "_figure"
    figure.__module__ = body.__module__
    figure.__doc__ = f"{LISTING[name][2]} (``dpjax reproduce {name}``)."
    return register(name)(figure)


def loglog_panels(plt, panels):
    """panels: list of (title, xlabel, ylabel, [(label, xs, ys, style)])."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (title, xl, yl, curves) in zip(axes[0], panels):
        for label, xs, ys, style in curves:
            ax.loglog(xs, ys, style, label=label)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_tail(plt, curves, betas, draws):
    """D1's figure: the empirical tail of ||sum of the first m of a random permutation|| per m (log y), with
    Lemma 3.8's thresholds; ``curves`` = [(m, norms, exact_curve)]."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for m, norms, _ in curves:
        ts = np.linspace(0, norms.max() * 1.1, 200)
        ax.semilogy(ts / math.sqrt(m), [max(np.mean(norms > t), 1 / draws / 10) for t in ts], label=f"sphere m={m}")
    for b in betas:
        ax.axvline(5 * math.sqrt(math.log(1 / b)), ls=":", color="k", lw=0.8)
    ax.set_xlabel("t / (G sqrt(m))  (dotted: Lemma 3.8's thresholds 5 sqrt(ln 1/beta))")
    ax.set_ylabel("Pr[||sum_{j<=m} v_pi(j)|| > t]")
    ax.legend(fontsize=7)
    ax.set_title("D1: Lemma 3.8 tail (zero-sum family, random permutations)", fontsize=9)
    fig.tight_layout()
    return fig


def plot_certificate(plt, ms, rate):
    """D4's figure: certificate pass rate and gamma/gamma_target against m; ``rate[(label, m)] = (pass, ratio)``."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for label in ("exchangeable", "heterogeneous (tau=3)"):
        axes[0].semilogx(ms, [rate[(label, m)][0] for m in ms], "o-", label=label)
        axes[1].loglog(ms, [rate[(label, m)][1] for m in ms], "o-", label=label)
    axes[1].axhline(1.0, color="k", ls="--", lw=0.8)
    axes[0].set(xlabel="m (items per user)", ylabel="certificate pass rate", title="D4: A2c certificate pass rate")
    axes[1].set(xlabel="m (items per user)", ylabel="gamma / gamma_target", title="measured gamma vs gamma_target")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_audit(plt, table):
    """D9's figure: the exact hockey-stick divergence per case against the certified delta (log y)."""
    fig, ax = plt.subplots(figsize=(8, 4))
    idx = np.arange(len(table))
    floor = 1e-12  # log axis: zero divergences drawn at the floor
    ax.bar(idx - 0.2, [max(c["H"], floor) for c in table], 0.4, label="Algorithm 1: H (max of both directions)")
    ax.bar(idx + 0.2, [max(c["H_no_stability_test"], floor) for c in table], 0.4,
           label="mutant: stability test skipped")
    ax.plot(idx, [c["certified_delta"] for c in table], "k_", markersize=12, label="certified delta")
    ax.set_yscale("log")
    ax.set_xlabel("case (see the table in report.md)")
    ax.set_ylabel("hockey-stick divergence H (log; 0 drawn at 1e-12)")
    ax.set_title("D9: exact hockey-stick divergence of Algorithm 1 at the certified epsilon", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def result_row(alg, metric, value, trial=0, epsilon=math.nan, accountant="none (not private)", **extra):
    return {"algorithm": alg, "epsilon": epsilon, "trial": trial, "metric": metric, "value": float(value),
            "accountant": accountant, **extra}
