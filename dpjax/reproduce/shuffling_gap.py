"""`dpjax reproduce shuffling-gap`: the epsilon of shuffled DP-SGD against the Poisson epsilon usually reported for it
(Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha & Zhang, "How Private are DP-SGD Implementations?", ICML 2024;
"Scalable DP-SGD: Shuffling vs. Poisson Subsampling", NeurIPS 2024), with van Dijk et al.'s shuffled batch-clipping
configurations ("Generalizing DP-SGD with Shuffling and Batch Clipping") placed on the same axes.

For every (steps per epoch T, epochs E, noise multiplier sigma = std / clip norm): the deterministic (no amplification)
epsilon G_{sqrt(E)/sigma}, Chua et al.'s LOWER bound for shuffling (`dpjax.accounting.shuffle_lower_bound`, their
zero-out pair) and the Poisson epsilon at q = 1/T over T E steps (dp_accounting PLD, add/remove) -- the number
typical shuffled implementations report. Both papers' bounds depend on (T, E, sigma) only (Poisson on q = b/n = 1/T),
so batch size b and data set size n enter through T = n / b. The van Dijk et al. points are each run's three numbers
(`dpjax.accounting.shuffle_gap`: certificate, Poisson number, lower bound) at sigma_plot = 2 sigma_vD (their sigma
is w.r.t. the replace-one sensitivity 2C).

Writes results.csv (tidy: algorithm, epsilon, trial, metric, value, accountant + T, E, sigma), shuffling_gap.png,
report.md, meta.json. Pure accounting: seconds (quick) to minutes (full).
"""

from __future__ import annotations

import math
import pathlib
import time

from dpjax.accounting import shuffle_lower_bound as lb
from dpjax.accounting.gdp import gdp_epsilon
from dpjax.accounting.shuffle_gap import poisson_epsilon_reported, shuffle_gap
from dpjax.reproduce import register, report

PAPER = "Chua et al., How Private are DP-SGD Implementations? (ICML 2024); Scalable DP-SGD (NeurIPS 2024)"
#: grids: T = steps per epoch, E = epochs, sigma = std / clip norm (the papers' sigma), delta
FULL = {"steps_per_epoch": (100, 1000, 10000), "epochs": (1, 2, 5), "sigmas": (0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0),
        "delta": 1e-6}
QUICK = {"steps_per_epoch": (100,), "epochs": (1, 2), "sigmas": (0.5, 1.0, 2.0), "delta": 1e-6}
#: van Dijk et al.'s shuffled configurations (canonical N = 60000, batch 60, E = 10, sigma_vD = 2): name -> kwargs
VAN_DIJK = {"van Dijk SH-BC (m=1, s=60)": dict(m=1, s=60, n=60000, epochs=10, sigma_vd=2.0),
            "van Dijk SH-IC (m=60, s=1)": dict(m=60, s=1, n=60000, epochs=10, sigma_vd=2.0),
            "dpsgd-mnist BC-SH (m=64, s=4)": dict(m=64, s=4, n=60000, epochs=3, sigma_vd=2.0)}
VAN_DIJK_QUICK = ("van Dijk SH-BC (m=1, s=60)",)
#: (T, E, sigma, delta, shuffle lower bound, Poisson epsilon) from the authors' code that draws both papers' figures
#: (google-research dpsgd_batch_sampler_accounting/dpsgd_bounds.py @ 4c42994: ShuffleAccountant().get_epsilons,
#: PoissonPLDAccountant(pessimistic_estimate=True).get_epsilons; run 2026-12-03, dp_accounting 0.6.0). The papers
#: print these quantities only as figures, which could not be read here: NOT values read from the papers.
#: tests/accounting/test_shuffle_lower_bound_paper.py holds the same numbers with all the sources.
CHUA_REFERENCE = ((1000, 1, 0.6, 1e-6, 8.833273872733116, 2.1069573616413746),
                  (1000, 1, 1.0, 1e-6, 3.7238644808530807, 0.1913095250880244),
                  (10000, 1, 0.5, 1e-6, 10.994780361652374, 1.954781647270364),
                  (100, 2, 1.0, 1e-6, 6.068453115087832, 1.149801812397451),
                  (100, 5, 1.0, 1e-6, 8.290751811053862, 1.5807532705337533),
                  (1000, 5, 1.0, 1e-6, 4.701186082638787, 0.4090369191661199))


#: NeurIPS 2024 (Scalable DP-SGD), Figures 3 and 6: the setting READ from the captions (eps = 5, delta = 2.7e-8,
#: batch size 65536, E epochs); the data set size is ASSUMED (0.8 x Criteo's 45,840,617 labelled records, 80 % train
#: split as the paper says; 1 / n = 2.7e-8 agrees), hence T = n // b = 559. The sigma on each curve (noise needed for
#: (5, 2.7e-8)) is NOT read -- the paper plots it only -- but computed with the authors' code at that setting
#: (dpsgd_bounds.py @ 4c42994, get_sigma of DeterministicAccountant, ShuffleAccountant(reshuffle=True / False),
#: PoissonPLDAccountant(pessimistic_estimate=True), q = 1/T untruncated; run 2026-12-03, dp_accounting 0.6.0).
#: tests/accounting/test_shuffle_gap_paper_values.py pins dpjax's accountants to them, with all the sources.
CHUA_FIGURE = {
    "epsilon": 5.0, "delta": 2.7e-8, "batch_size": 65536, "dataset_size": 36_672_493,
    "sigmas": {
        1: {"deterministic": 1.1063826084136963, "dynamic": 1.010858342051506, "persistent": 1.010858342051506,
            "poisson": 0.5471565574407578},
        2: {"deterministic": 1.5646612644195557, "dynamic": 1.0561307519674301, "persistent": 1.429569572210312,
            "poisson": 0.5615847557783127},
        3: {"deterministic": 1.9163108617067337, "dynamic": 1.080741360783577, "persistent": 1.7508579790592194,
            "poisson": 0.5711951106786728},
        4: {"deterministic": 2.2127651423215866, "dynamic": 1.098143383860588, "persistent": 2.021716684103012,
            "poisson": 0.5786875635385513},
        5: {"deterministic": 2.473946660757065, "dynamic": 1.1117801815271378, "persistent": 2.2603479772806168,
            "poisson": 0.5849548429250717},
    },
}
_FIGURE_CURVES = {"dynamic": "dynamic shuffling (lower bound)", "persistent": "persistent shuffling (lower bound)",
                  "poisson": "Poisson q = 1/T (untruncated)", "deterministic": "deterministic (no amplification)"}
_FIGURE_QUICK = ((1, "dynamic"), (5, "dynamic"), (5, "persistent"), (1, "poisson"))


def compute(config: dict, van_dijk: tuple[str, ...]) -> list[dict]:
    """The tidy rows of the grid ``config`` and of the ``van_dijk`` configurations."""
    d = config["delta"]
    rows = []

    def add(algorithm, t, e, sigma, metric, value, accountant):
        rows.append({"algorithm": algorithm, "epsilon": value, "trial": 0, "metric": metric, "value": value,
                     "accountant": accountant, "T": t, "E": e, "sigma": sigma})

    for t in config["steps_per_epoch"]:
        for e in config["epochs"]:
            for z in config["sigmas"]:
                add("deterministic", t, e, z, "epsilon (no amplification, upper bound)",
                    gdp_epsilon(math.sqrt(e) / z, d), "gdp")
                add("shuffle lower bound", t, e, z, "epsilon (lower bound, Chua et al.)",
                    lb.shuffle_epsilon_lower_bound(z, t, e, d), "chua-lower-bound")
                add("poisson", t, e, z, "epsilon (Poisson q = 1/T; not a certificate for shuffling)",
                    poisson_epsilon_reported(z, 1, t, t * e, d), "pld")
    for name in van_dijk:
        c = VAN_DIJK[name]
        from dpjax.accounting.batch_clipping import batch_clipping_report

        m, s = c["m"], c["s"]
        t = c["n"] // (m * s)
        cert = batch_clipping_report("strong-exact", sampling="shuffle", n_records=c["n"], s=s, m=m,
                                     num_rounds=t * c["epochs"], rounds_per_epoch=t, sigma=c["sigma_vd"], delta=d)
        gap = shuffle_gap(c["sigma_vd"], m * s, c["n"], c["epochs"], d, certified=cert)
        z = 2 * c["sigma_vd"]
        for entry in gap.entries():
            add(name, t, c["epochs"], z, entry.label, entry.epsilon, entry.method)
    return rows


def plot(path: pathlib.Path, rows: list[dict], config: dict) -> None:
    from dpjax.sweep.plot import new_figure, save_figure

    ts = config["steps_per_epoch"]
    fig, axes = new_figure(1, len(ts), panel=(5.0, 4.0))
    styles = {"deterministic": ":", "shuffle lower bound": "-o", "poisson": "--s"}
    for ax, t in zip(axes[0], ts):
        for i, e in enumerate(config["epochs"]):
            for alg, style in styles.items():
                pts = sorted((r["sigma"], r["value"]) for r in rows if r["algorithm"] == alg and r["T"] == t
                             and r["E"] == e)
                ax.plot(*zip(*pts), style, color=f"C{i}", label=f"{alg}, E = {e}", markersize=3)
        for j, name in enumerate(sorted({r["algorithm"] for r in rows if r["algorithm"] not in styles})):
            pts = [r for r in rows if r["algorithm"] == name]
            if pts[0]["T"] != t and len(ts) > 1:
                continue
            for r, marker in zip(pts, ("*", "x", "^")):
                ax.plot([r["sigma"]], [r["value"]], marker, color="k" if j == 0 else f"C{5 + j}", markersize=9,
                        label=f"{name} ({'certificate' if marker == '*' else 'Poisson' if marker == 'x' else 'LB'}, "
                              f"T = {r['T']}, E = {r['E']})")
        ax.set_yscale("log")
        ax.set_xlabel("sigma = noise std / clip norm")
        ax.set_ylabel(f"epsilon at delta = {config['delta']:g}")
        ax.set_title(f"T = {t} steps per epoch", fontsize=9)
        ax.legend(fontsize=5)
    save_figure(fig, path, title="shuffling: lower bound vs the Poisson epsilon usually reported")


def compare_with_authors(quick: bool = False) -> list[dict]:
    """One row per `CHUA_REFERENCE` case (quick: the first two): the authors' number, dpjax's, their relative
    difference."""
    rows = []
    for t, e, z, d, ref_lb, ref_p in CHUA_REFERENCE[:2] if quick else CHUA_REFERENCE:
        got_lb = lb.shuffle_epsilon_lower_bound(z, t, e, d)
        got_p = poisson_epsilon_reported(z, 1, t, t * e, d)
        rows.append({"T": t, "E": e, "sigma": z, "delta": f"{d:g}", "LB (authors' code)": f"{ref_lb:.5g}",
                     "LB (dpjax)": f"{got_lb:.5g}", "LB rel. diff": f"{got_lb / ref_lb - 1:+.1e}",
                     "Poisson (authors' code)": f"{ref_p:.5g}", "Poisson (dpjax)": f"{got_p:.5g}",
                     "Poisson rel. diff": f"{got_p / ref_p - 1:+.1e}"})
    return rows


def compare_with_figure(quick: bool = False) -> list[dict]:
    """One row per (E, curve) of `CHUA_FIGURE` (quick: `_FIGURE_QUICK`): the sigma the authors' code puts on the
    curve and dpjax's epsilon at that sigma, which should be the caption's eps = 5."""
    f = CHUA_FIGURE
    d, t = f["delta"], f["dataset_size"] // f["batch_size"]
    evaluate = {"dynamic": lambda z, e: lb.shuffle_epsilon_lower_bound(z, t, e, d),
                "persistent": lambda z, e: lb.shuffle_epsilon_lower_bound(z, t, e, d, reshuffle=False),
                "poisson": lambda z, e: poisson_epsilon_reported(z, 1, t, t * e, d),
                "deterministic": lambda z, e: gdp_epsilon(math.sqrt(e) / z, d)}
    cases = _FIGURE_QUICK if quick else tuple((e, c) for e in sorted(f["sigmas"]) for c in _FIGURE_CURVES
                                              if c != "poisson" or e in (1, 5))
    rows = []
    for e, curve in cases:
        z = f["sigmas"][e][curve]
        got = evaluate[curve](z, e)
        rows.append({"E": e, "curve": _FIGURE_CURVES[curve], "sigma (authors' code)": f"{z:.5g}",
                     "eps (caption)": f"{f['epsilon']:g}", "eps (dpjax at that sigma)": f"{got:.6f}",
                     "rel. diff": f"{got / f['epsilon'] - 1:+.1e}"})
    return rows


def write_report(out: pathlib.Path, rows: list[dict], config: dict, wall: float, quick: bool) -> pathlib.Path:
    grid = [r for r in rows if r["algorithm"] in ("shuffle lower bound", "poisson", "deterministic")]
    key = lambda r: (r["T"], r["E"], r["sigma"])  # noqa: E731
    cells = {}
    for r in grid:
        cells.setdefault(key(r), {})[r["algorithm"]] = r["value"]
    table = [{"T": t, "E": e, "sigma": z, "Poisson (not a certificate)": f"{c['poisson']:.4g}",
              "shuffle lower bound": f"{c['shuffle lower bound']:.4g}", "no amplification": f"{c['deterministic']:.4g}",
              "lower bound / Poisson": f"{c['shuffle lower bound'] / c['poisson']:.3g}"}
             for (t, e, z), c in sorted(cells.items())]
    above = sum(c["shuffle lower bound"] > c["poisson"] for c in cells.values())
    ok = all(c["shuffle lower bound"] <= c["deterministic"] + 1e-6 for c in cells.values())
    lines = ["# Shuffling gap: Chua et al.'s lower bound vs the Poisson epsilon", "", f"Papers: {PAPER}; van Dijk et al. "
             "configurations from 'Generalizing DP-SGD with Shuffling and Batch Clipping'.", "",
             f"{'Quick' if quick else 'Full'} grid, delta = {config['delta']:g}. Every lower bound is a LOWER bound "
             "(the run is not (eps, delta)-DP below it); the Poisson column is what a shuffled implementation "
             "typically reports and is NOT a certificate for a shuffled run.", "",
             f"- lower bound > Poisson epsilon in {above} of {len(cells)} grid points (the papers' finding: at small "
             "sigma the shuffled run is far less private than its Poisson number says).",
             f"- lower bound <= no-amplification upper bound everywhere: {report.yes_no(ok)}.", "",
             report.markdown_table(table), "", "## van Dijk et al.'s shuffled configurations (three numbers each)", ""]
    for name in dict.fromkeys(r["algorithm"] for r in rows if r not in grid):
        lines.append(f"* {name} (T = {next(r['T'] for r in rows if r['algorithm'] == name)}, "
                     f"E = {next(r['E'] for r in rows if r['algorithm'] == name)}):")
        lines += [f"  * {r['metric']}: ε = {r['value']:.4g} ({r['accountant']})" for r in rows if r["algorithm"] == name]
    lines += ["", "## Against the papers", "",
              "What was read from the papers: no plotted value. Both papers give these results as figures only (no "
              "table), and the stored texts return only their openings; the ICML 2024 paper yielded no number at "
              "all. Read from the NeurIPS 2024 paper's captions: the setting of Figure 3 (sigma each sampler needs "
              "for eps = 5, delta = 2.7e-8, 1 and 5 epochs) and of Figure 6 (the same at batch size 65536, varying "
              "epochs), and its 80 % Criteo training split. Assumed: n = 36,672,493 (80 % of Criteo's 45,840,617 "
              "records; 1 / n = 2.7e-8), so T = 559. The sigma on each curve is computed with the authors' code "
              "(google-research dpsgd_batch_sampler_accounting/dpsgd_bounds.py @ 4c42994) at that setting; dpjax's "
              "epsilon at that sigma should be the caption's 5 (within 2 % also puts dpjax's sigma within 2 %; "
              "tests/accounting/test_shuffle_gap_paper_values.py). Not reconstructed: Figure 3's truncated-Poisson "
              "curve (its maximum batch size is not readable) and its other batch sizes.", "",
              report.markdown_table(compare_with_figure(quick)), "",
              "On a grid of (T, E, sigma), the reference is the authors' code again (delta as given), NOT "
              "values read from the papers; tests/accounting/test_shuffle_lower_bound_paper.py checks 15 lower-bound "
              "and 10 Poisson cases within 2 %. The construction (pair MoG(2) vs MoG(1), cube sets, optimistic PLD "
              "over epochs) is also checked against closed forms in tests/accounting/test_shuffle_lower_bound.py.", "",
              report.markdown_table(compare_with_authors(quick)), "",
              f"Wall time: {wall:.1f} s. Figure: shuffling_gap.png."]
    return report.write_report(out, lines)


@register("shuffling-gap")
def shuffling_gap(out: pathlib.Path, *, quick: bool, seed: int) -> pathlib.Path:
    del seed  # pure accounting: nothing random
    out = report.fresh_out(out)
    config = QUICK if quick else FULL
    start = time.perf_counter()
    rows = compute(config, VAN_DIJK_QUICK if quick else tuple(VAN_DIJK))
    report.tidy_results(out, rows)
    plot(out / "shuffling_gap.png", rows, config)
    report.write_meta(out, {"figure": "shuffling-gap", "quick": quick, "config": config,
                            "wall_seconds": time.perf_counter() - start})
    return write_report(out, rows, config, time.perf_counter() - start, quick)
