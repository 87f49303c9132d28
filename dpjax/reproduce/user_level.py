"""Demonstrations D1-D9 of Ghazi et al., "On User-Level Private Convex Optimization" (ICML 2023).

The paper has no experiments; these are numerical checks of its theorems on synthetic data
(``dpjax reproduce user-level-<name> [--quick]``):

==========================  ==========================================================================
figure                      checks
==========================  ==========================================================================
user-level-tail (D1)        Lemma 3.8's tail: exact hypergeometric tails (+-G e_1) and Monte Carlo (sphere)
user-level-deletion (D2)    Theorem 3.6: ||theta*(x) - theta*(x_{-n})|| ~ 1/(n sqrt(m)), bound holds w.p. 1-beta
user-level-noise (D3)       sigma of Algorithm 2, A2c, B1, B0 against m; crossover m* ~ 1e9
user-level-certificate (D4) Appendix C certificate pass rate, exchangeable vs heterogeneous users
user-level-convex-erm (D5)  Theorem 4.1 rate of Phased-ERM (rate-shape M'): slopes -1/2 in m, -1 in n, +1/2 in d
user-level-strongly-convex  Theorems 4.3/5.3 (A5, A6, rate-shape): ERM slopes -1 in m, -2 in n; SCO 1/(nm) term
(D6)
user-level-lower-bound (D7) Appendix D instance: A2 (rate-shape) error tracks d/(n^2 m); B1 flat in m
user-level-phased-sco (D8)  Algorithm 4 as printed plateaus (~R G N0/n); the equal split A4b keeps decreasing
user-level-audit (D9)       exact hockey-stick divergences of Algorithm 1 on neighbouring toy datasets <= delta
==========================  ==========================================================================

"Rate-shape" runs use the idealised mechanism M' of Theorem 4.1's proof (Gaussian noise of the theorem's
shape sigma_i = rho 2G/(lambda_i n sqrt(m)), no stability test). They are NOT private; with the certified
constants the noise multiplier is ~1e5-1e6 (D3), so the rates only show at m ~ 1e9. Every report says which.
Slopes are least-squares fits of log(metric) on log(parameter), compared with the theorem's exponent +-0.15 by
the verdict rule of ``dpjax.sweep.select.slope_verdict`` (>= 4 points over >= 1 decade, 90 % bootstrap interval
over the runs of each cell; holds / differs / inconclusive).
D1-D9 number these demonstrations; the mechanism names (A1-A6, A2c, A4b, B1, B2) are listed with the
paper's algorithm and theorem numbers at ``dpjax.accounting.user_level.MECHANISMS``. B0 is the item-level
output perturbation (sensitivity 2G/(mu n m)), shown for scale only: it is not user-level private.
"""

from __future__ import annotations

import json
import math
import pathlib
import platform
import time
from typing import Callable, Sequence

import numpy as np

from dpjax import progress
from dpjax.reproduce import register, report

PAPER = "Ghazi et al., On User-Level Private Convex Optimization (ICML 2023)"
SLOPE_TOL = 0.15
DELTA = 1e-6


# ---------------------------------------------------------------------------
# shared output writer
# ---------------------------------------------------------------------------


def slope(xs, ys) -> float:
    """Least-squares slope of log(ys) against log(xs)."""
    return float(np.polyfit(np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float)), 1)[0])


def slope_claim(name: str, xs, samples, theory: float, setting: str, *, side: str = "two-sided",
                paired: bool = False, statistic=None, unit: str = "runs") -> dict:
    """A claim on a log-log exponent, judged by ``dpjax.sweep.select.slope_verdict``: ``samples[i]`` are the
    runs at ``xs[i]`` (scalars: exact values); ``side="at_most"``/``"at_least"``: the claim is
    ``slope <= theory + SLOPE_TOL`` / ``>= theory - SLOPE_TOL``; ``paired``: the runs of every cell share their
    keys. ``holds`` is True only for the verdict "holds"; ``verdict`` and ``reason`` say which and why."""
    from dpjax.sweep import select

    v = select.slope_verdict(xs, samples, predicted=theory, tolerance=SLOPE_TOL, side=side, paired=paired,
                             statistic=statistic, unit=unit)
    return {"claim": f"{name}: log-log slope {v.expected()}", "setting": setting, "measured": v.measured(),
            "holds": v.holds, "verdict": v.verdict, "reason": v.reason}


def _verdict_cell(c: dict) -> str:
    verdict = c.get("verdict", "holds" if c["holds"] else "differs")
    if verdict == "holds":
        return "yes"
    if verdict == "differs":
        return "**no**" + (f" ({c['reason']})" if c.get("reason") else "")
    return f"inconclusive: {c['reason']}"


def _check_out_dir(out_dir: pathlib.Path, name: str, quick: bool, seed: int) -> None:
    """Refuses to overwrite a different run (another protocol or seed) in ``out_dir``."""
    meta = out_dir / "meta.json"
    if meta.exists():
        old = json.loads(meta.read_text())
        if (old.get("figure"), old.get("quick"), old.get("seed")) != (name, quick, seed):
            raise ValueError(f"out_dir={str(out_dir)!r} holds another run ({old.get('figure')}, quick="
                             f"{old.get('quick')}, seed={old.get('seed')}); choose another --out or remove it")


def _write(out_dir: pathlib.Path, name: str, title: str, rows: list[dict], claims: list[dict], notes: Sequence[str],
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
             "", report.markdown_table([[c["claim"], c["setting"], c["measured"], _verdict_cell(c)] for c in claims],
                                       ["expected outcome", "setting", "measured", "holds"])]
    lines += ["", "## Notes", ""] + [f"* {n}" for n in notes]
    lines += ["", f"Files: `results.csv` (tidy: algorithm, epsilon, trial, metric, value, accountant, ...), "
              f"`{png.name}`, `meta.json`."]
    path = report.write_report(out_dir, lines)
    report.write_meta(out_dir, {"figure": name, "quick": quick, "seed": seed, "wall_time_s": wall,
                                "claims_held": held, "claims_inconclusive": open_, "claims": len(claims)})
    return path


def select_rule_line() -> str:
    from dpjax.sweep import select

    return ("Slope claims: " + select.verdict_rule_text(SLOPE_TOL) + " The runs of a cell are its seeds "
            "(paired: the cells share their run keys).")


def _figure(name: str, body: Callable, out_dir, quick: bool, seed: int) -> pathlib.Path:
    out_dir = pathlib.Path(out_dir)
    _check_out_dir(out_dir, name, quick, seed)
    start = time.perf_counter()
    progress.stage(f"{name}: computing ({'quick' if quick else 'full'} protocol; a line per cell of each sweep)")
    title, rows, claims, notes, plot, mode = body(quick, seed)
    progress.stage(f"{name}: writing results.csv, the figure and report.md")
    return _write(out_dir, name, title, rows, claims, notes, plot, quick=quick, seed=seed,
                  wall=time.perf_counter() - start, mode=mode)


def _loglog(plt, panels):
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


def _row(alg, metric, value, trial=0, epsilon=math.nan, accountant="none (not private)", **extra):
    return {"algorithm": alg, "epsilon": epsilon, "trial": trial, "metric": metric, "value": float(value),
            "accountant": accountant, **extra}


# ---------------------------------------------------------------------------
# D1: Lemma 3.8
# ---------------------------------------------------------------------------


def _d1(quick: bool, seed: int):
    from dpjax.user_level import audit, problems

    rows, claims = [], []
    exact_ref = {0.1: 1.17e-15, 0.01: 8.37e-30}
    for beta, ref in exact_ref.items():
        tail = audit.lemma38_pm_tail(20000, 2000, beta)
        rows.append(_row("pm-e1 exact", "tail", tail, fail_prob=beta, N=20000, m=2000))
        claims.append({"claim": f"exact +-e1 tail <= beta, equal to the spec's {ref:.3g}", "setting":
                       f"N=20000, m=2000, beta={beta}", "measured": f"{tail:.4g}",
                       "holds": tail <= beta and abs(tail / ref - 1) < 5e-3})
    draws = 10_000 if quick else 100_000
    size, d, g = 2000, 3, 1.0
    vecs = problems.zero_sum_family("sphere", size, d, g, seed)
    rng = np.random.default_rng(seed)
    ms, betas = (20, 80, 320), (0.1, 0.05, 0.01)
    curves = []
    for m in ms:
        progress.stage(f"D1: m={m} ({draws} draws)")
        norms = []
        for start in range(0, draws, 2000):
            k = min(2000, draws - start)
            idx = np.argpartition(rng.random((k, size)), m, axis=1)[:, :m]  # uniform m-subsets = first m of pi
            norms.append(np.linalg.norm(vecs[idx].sum(axis=1), axis=1))
        norms = np.concatenate(norms)
        exact_curve = [audit.lemma38_pm_tail(size, m, b) for b in betas]
        for b, ex in zip(betas, exact_curve):
            thr = 5 * g * math.sqrt(m * math.log(1 / b))
            emp = float(np.mean(norms > thr))
            allowance = 3 * math.sqrt(b * (1 - b) / draws)  # 3 binomial standard deviations
            rows += [_row("sphere Monte Carlo", "tail", emp, fail_prob=b, m=m, draws=draws),
                     _row("pm-e1 exact", "tail", ex, fail_prob=b, m=m, N=size)]
            claims.append({"claim": "empirical tail <= beta (+ 3 binomial sd)", "setting": f"sphere, N={size}, d={d}, "
                           f"m={m}, beta={b}", "measured": f"{emp:.3g} (bound {b})", "holds": emp <= b + allowance})
        curves.append((m, norms, exact_curve))

    def plot(plt):
        return plot_tail(plt, curves, betas, draws)

    notes = [f"Sphere family: {size} random unit vectors in R^{d} minus their mean, rescaled to max norm G = 1; "
             f"{draws} uniformly random m-subsets (the first m slots of a uniform permutation).",
             "+-e1 family: exact hypergeometric law of the sum (no sampling).",
             f"Largest empirical tail at the Lemma's thresholds: {max(r['value'] for r in rows if r['algorithm'] == 'sphere Monte Carlo'):.3g} "
             "(the constant 5 makes the bound loose)."]
    return "Lemma 3.8 tail bound", rows, claims, notes, plot, "not applicable (a probability statement)"


@register("user-level-tail", paper=PAPER, description="D1: Lemma 3.8 tail, exact hypergeometric and Monte Carlo")
def d1_figure(out_dir, *, quick: bool, seed: int):
    return _figure("user-level-tail", _d1, out_dir, quick, seed)


# ---------------------------------------------------------------------------
# D2: Theorem 3.6
# ---------------------------------------------------------------------------


def _d2(quick: bool, seed: int):
    """Mean estimation: theta*(x^pi) - theta*(x^pi_{-n}) = (xbar - xbar_n)/(n - 1) exactly (unconstrained)."""
    from dpjax.user_level import problems

    perms = 500 if quick else 2000
    d, beta = 5, 0.05
    ns = (200, 400, 800, 1600) if quick else (200, 500, 1000, 2000, 5000)
    ms = (12, 50, 200, 800) if quick else (12, 50, 200, 800, 3200)
    rng = np.random.default_rng(seed)
    rows, stats, dists = [], {}, {}
    for n in ns:
        progress.stage(f"D2: n={n}, m in {list(ms)}")
        for m in ms:
            if n * m > (2_000_000 if quick else 4_000_000):  # memory: n m d float64 items
                continue
            x, _ = problems.exchangeable("mean", n, m, d, seed + n + m)
            items = x.reshape(n * m, d)
            xbar = items.mean(axis=0)
            g = float(np.linalg.norm(items - xbar, axis=1).max())  # zero-sum family v = x - xbar, ||v|| <= G
            dist = np.empty(perms)
            for k in range(perms):  # the deleted user's items: a uniform m-subset (last user of a uniform pi)
                sub = items[rng.choice(n * m, m, replace=False)]
                dist[k] = np.linalg.norm(xbar - sub.mean(axis=0)) / (n - 1)
            bound = 5 * g * math.sqrt(math.log(1 / beta)) / ((n - 1) * math.sqrt(m))  # mu = 1
            p95, frac = float(np.quantile(dist, 0.95)), float(np.mean(dist > bound))
            stats[(n, m)] = (p95, bound, frac, float(np.median(dist)))
            dists[(n, m)] = dist
            rows += [_row("theta* deletion (mean estimation)", "p95_distance", p95, n=n, m=m, d=d),
                     _row("theta* deletion (mean estimation)", "theorem_3_6_bound", bound, n=n, m=m, d=d),
                     _row("theta* deletion (mean estimation)", "fraction_above_bound", frac, n=n, m=m, d=d)]
    m_fix, n_fix = ms[1], ns[0]
    n_line = [n for n in ns if (n, m_fix) in stats]
    m_line = [m for m in ms if (n_fix, m) in stats]
    p95 = lambda v: np.quantile(v, 0.95, axis=-1)  # noqa: E731  (the claim is on the 95th percentile)
    claims = [slope_claim("95th percentile vs n", n_line, [dists[(n, m_fix)] for n in n_line], -1.0, f"m={m_fix}",
                          statistic=p95, unit="permutations"),
              slope_claim("95th percentile vs m", m_line, [dists[(n_fix, m)] for m in m_line], -0.5, f"n={n_fix}",
                          statistic=p95, unit="permutations")]
    worst = max(v[2] for v in stats.values())
    claims.append({"claim": f"fraction above the Theorem 3.6 bound <= beta = {beta} in every cell", "setting":
                   f"{len(stats)} cells x {perms} permutations", "measured": f"max {worst:.3g}", "holds": worst <= beta})
    if (200, 50) in stats:
        p95, bound, _, med = stats[(200, 50)]
        claims.append({"claim": "spec reference n=200, m=50, d=5: bound ~ 6.2e-3, p95 ~ 1.0e-3 (generator-dependent)",
                       "setting": "beta=0.05", "measured": f"bound {bound:.3g}, p95 {p95:.3g}, median/bound "
                       f"{med / bound:.2f}", "holds": abs(bound / 6.2e-3 - 1) < 0.25 and abs(p95 / 1.0e-3 - 1) < 0.5})

    def plot(plt):
        return _loglog(plt, [
            ("D2: deletion distance vs n (m fixed)", "n", "||theta*(x) - theta*(x_-n)||",
             [(f"p95, m={m_fix}", n_line, [stats[(n, m_fix)][0] for n in n_line], "o-"),
              ("Theorem 3.6 bound", n_line, [stats[(n, m_fix)][1] for n in n_line], "k--")]),
            ("D2: deletion distance vs m (n fixed)", "m", "||theta*(x) - theta*(x_-n)||",
             [(f"p95, n={n_fix}", m_line, [stats[(n_fix, m)][0] for m in m_line], "o-"),
              ("Theorem 3.6 bound", m_line, [stats[(n_fix, m)][1] for m in m_line], "k--")])])

    notes = ["Mean estimation l = 1/2||theta - x||^2 (mu = 1), items uniform on [-1,1]^5 clipped to the unit ball; "
             "the minimiser is the mean, so the deletion distance is exact: ||xbar - xbar_n||/(n-1).",
             "G := max ||x - xbar|| (the zero-sum family of Lemma 3.8).",
             "The logistic + ridge variant (two solver calls per permutation) is not run here; the solver path is "
             "covered by D4 and the tests."]
    return "Theorem 3.6 deletion sensitivity scaling", rows, claims, notes, plot, "not applicable (no release)"


@register("user-level-deletion", paper=PAPER, description="D2: Theorem 3.6, deletion distance ~ 1/(n sqrt(m))")
def d2_figure(out_dir, *, quick: bool, seed: int):
    return _figure("user-level-deletion", _d2, out_dir, quick, seed)


# ---------------------------------------------------------------------------
# D3: noise scales of Algorithm 2 against m
# ---------------------------------------------------------------------------


def _d3(quick: bool, seed: int):
    from dpjax.accounting import user_level as acc

    eps, beta = 1.0, 0.01
    ms = np.logspace(0, 12, 25)
    rows, claims, curves = [], [], {}
    for n in (10**3, 10**4, 10**5):
        a2 = acc.noise_multiplier(eps, DELTA, beta, n, 1, 1) / n
        a2c = acc.noise_multiplier(eps, DELTA, beta, n, 1, 1, "A2c") / n
        b1 = acc.b1_sigma(eps, DELTA, n, 1.0, 1.0)
        sig = {"A2": a2 / np.sqrt(ms), "A2c": a2c / np.sqrt(ms), "B1": np.full_like(ms, b1), "B0 (item-level, not "
               "user-level private)": b1 / ms}
        curves[n] = sig
        for alg, vals in sig.items():
            rows += [_row(alg, "sigma_mu_over_G", s, epsilon=eps, accountant="certified (paper constants)", n=n, m=m)
                     for m, s in zip(ms, vals)]
        mstar = acc.crossover_m(eps, DELTA, beta, n)
        mstar_c = (a2c / b1) ** 2
        claims.append(slope_claim("sigma_A2 vs m", ms, [float(v) for v in sig["A2"]], -0.5, f"n={n}"))  # exact
        claims.append({"claim": "crossover of A2 with B1 near m* ~ 1e9", "setting": f"n={n}, eps=1, "
                       f"delta=1e-6, beta=0.01", "measured": f"m* = {mstar:.3g} (A2c: {mstar_c:.3g})",
                       "holds": 1e8 <= mstar <= 1e10})

    def plot(plt):
        panels = []
        for n, sig in curves.items():
            panels.append((f"D3: noise vs m, n={n}", "m", "sigma mu / G",
                           [(k, ms, v, s) for (k, v), s in zip(sig.items(), ("o-", "s-", "k--", "k:"))]))
        return _loglog(plt, panels)

    notes = ["Certified constants (Algorithm 1 line 3 as read by the spec, Delta_expl with c_K = 1, Delta_C of "
             "Appendix C); pure accounting, no data.",
             "A2c pays an extra factor ~ sqrt(r) over A2 (Lemma C.1 vs Corollary 3.7), so its crossover is later."]
    return "noise scale against m", rows, claims, notes, plot, "certified"


@register("user-level-noise", paper=PAPER, description="D3: sigma of A2/A2c/B1/B0 vs m, crossover m* ~ 1e9")
def d3_figure(out_dir, *, quick: bool, seed: int):
    return _figure("user-level-noise", _d3, out_dir, quick, seed)


# ---------------------------------------------------------------------------
# D4: certificate pass rate (Appendix C)
# ---------------------------------------------------------------------------


def _d4(quick: bool, seed: int):
    from dpjax.accounting import user_level as acc
    from dpjax.user_level import mechanisms as mech, problems

    eps, delta, beta = 1.0, 1e-5, 0.01
    n, d = 300, 2
    ms = (16, 256, 1024, 4096) if quick else (16, 64, 256, 1024, 4096, 8192)
    reps = 5 if quick else 20
    loss, dom = problems.Loss("mean"), mech.Domain.ball(1.0, d)
    kappa = acc.user_level_params(eps, delta).kappa
    rows, claims, rate = [], [], {}
    for het, label in ((0.0, "exchangeable"), (3.0, "heterogeneous (tau=3)")):
        for m in ms:
            progress.stage(f"D4 {label}: m={m} ({reps} runs)")
            target = acc.certificate_sensitivity(n, m, 4 * kappa, beta, loss.lipschitz, 1.0)
            gt = acc.gamma_target(n, m, beta, loss.lipschitz)
            passes, gammas = [], []
            for r in range(reps):
                x, y = problems.exchangeable("mean", n, m, d, seed * 1000 + r, heterogeneous=het)
                theta = mech.minimiser(loss, x, y, dom)
                cert = mech.certificate(loss, x, y, dom, theta, 4 * kappa, target)
                passes.append(cert.passed)
                gammas.append(cert.gamma)
                rows += [_row(f"A2c {label}", "certificate_passed", cert.passed, r, eps, "certified", n=n, m=m),
                         _row(f"A2c {label}", "gamma_over_target", cert.gamma / gt, r, eps, "certified", n=n, m=m)]
            rate[(label, m)] = (float(np.mean(passes)), float(np.mean(gammas)) / gt)
    ex = [rate[("exchangeable", m)][0] for m in ms]
    het = [rate[("heterogeneous (tau=3)", m)][0] for m in ms]
    claims.append({"claim": f"exchangeable users: pass rate >= 1 - beta = {1 - beta} at every m", "setting":
                   f"n={n}, d={d}, {reps} datasets per m", "measured": ", ".join(f"m={m}: {p:.2f}" for m, p in
                                                                                  zip(ms, ex)),
                   "holds": min(ex) >= 1 - beta})
    claims.append({"claim": "heterogeneous users: pass rate drops sharply once gamma_target < gamma (large m)",
                   "setting": f"n={n}, d={d}", "measured": ", ".join(f"m={m}: {p:.2f}" for m, p in zip(ms, het)),
                   "holds": het[-1] <= 0.5 and het[0] >= 0.5})

    def plot(plt):
        return plot_certificate(plt, ms, rate)

    notes = [f"Mean estimation on K = B(0,1) (G = 2, mu = 1), eps = {eps}, delta = {delta}, beta = {beta}, "
             f"kappa = {kappa}, r = 4 kappa = {4 * kappa}; c_K = 2.",
             "What the pass rate means (issue 23): the fraction of datasets on which the Appendix C certificate "
             "lets A2c skip Algorithm 1's exact stable-set enumeration (its polynomial-time path) -- a property of "
             "the data, not a release rate. A2c's output is Algorithm 1's: the certificate path when it passes, the "
             f"exact enumeration when it fails; at n = {n} (kappa = {kappa}) the enumeration is infeasible, so the "
             "private A2c refuses at this size before reading the data. Earlier versions of this report said a "
             "failed certificate 'stops the run as not releasable (spec A14): privacy is unaffected' -- wrong: that "
             "stop is a data-dependent output (release vs stop on neighbouring datasets either side of the "
             "threshold, an unbounded privacy loss); it survives only as the NOT private fallback='stop'.",
             "Heterogeneous control: user-specific feature shifts u_i ~ N(0, 9 I) before clipping to the unit ball."]
    return "Appendix C certificate pass rate", rows, claims, notes, plot, \
        "certificate diagnostic at the certified constants (A2c's Delta_C); no release (A2c refuses at this n)"


@register("user-level-certificate", paper=PAPER, description="D4: A2c certificate pass rate vs m, exchangeable vs "
          "heterogeneous users")
def d4_figure(out_dir, *, quick: bool, seed: int):
    return _figure("user-level-certificate", _d4, out_dir, quick, seed)


# ---------------------------------------------------------------------------
# D5: Theorem 4.1 (Phased-ERM, convex Lipschitz, rate-shape)
# ---------------------------------------------------------------------------


D5_HUBER_WIDTH = 0.1  # the D5 loss itself (not a solver surrogate); 1/10 of the label range |b| <= 1/2


def huber_reference(loss, x, y, iters: int = 300) -> tuple[np.ndarray, float, float]:
    """High-precision non-private minimiser of D5's Huber regression loss h_w(<theta, a> - b) (float64 IRLS:
    weights psi(r)/r = 1/max(|r|, w), a majorise-minimise iteration for the Huber loss). Unconstrained; the
    report checks that it lies inside K. Returns (theta, mean loss, gradient norm at theta)."""
    a = x.reshape(-1, x.shape[-1])
    b = y.reshape(-1)
    theta = np.linalg.lstsq(a, b, rcond=None)[0]
    for _ in range(iters):
        w = 1.0 / np.maximum(np.abs(a @ theta - b), loss.smoothing)
        theta = np.linalg.solve(a.T @ (w[:, None] * a), a.T @ (w * b))
    grad = np.mean(loss.grad(theta, a, b, np), axis=0)
    return theta, _huber_loss(loss, theta, x, y), float(np.linalg.norm(grad))


def _huber_loss(loss, theta, x, y) -> float:
    return float(np.mean(loss.value(np.asarray(theta), x, y, np, smoothed=True)))


def _true_loss(loss, theta, x, y) -> float:
    return float(np.mean(loss.value(np.asarray(theta), x, y, np, smoothed=False)))


def _phased_erm_runs(loss, x, y, dom, keys, rho, *, replace_noise=False, iters=600, lipschitz=None):
    """Rate-shape Phased-ERM (M') outputs for a batch of keys; ``replace_noise``: B1 inside (sigma_i with the
    replace-one-user sensitivity 2(2G)/(lambda_i n), no sqrt(m)); ``lipschitz``: G when ``loss.lipschitz``
    does not apply (the tied-curvature instance)."""
    from dpjax.user_level import phased

    n, m, d = x.shape
    g = loss.lipschitz if lipschitz is None else lipschitz
    t = phased.num_phases(n, m)
    lam = phased.erm_lambda(g, dom.diameter, n, 1 if replace_noise else m, d, rho)
    lams = phased.phase_lambdas(lam, t)
    sig = rho * 2 * g / (lams * n * (1.0 if replace_noise else math.sqrt(m)))
    return phased.rate_shape_many(keys, loss, x, y, dom, np.ones((t, n)), lams, sig, iters=iters)


def _d5(quick: bool, seed: int):
    import jax

    from dpjax.user_level import mechanisms as mech, problems

    rho, radius, reps, iters = 1.0, 1.0, (8 if quick else 24), 300
    base_n, base_m, base_d = 100, 4, 5
    sweeps = {"m": [(base_n, m, base_d) for m in ((4, 16, 64, 256) if quick else (4, 16, 64, 256, 1024))],
              "n": [(n, base_m, base_d) for n in ((100, 200, 400, 800) if quick else (100, 200, 400, 800, 1600))],
              "d": [(base_n, 16, d) for d in ((2, 4, 8, 16) if quick else (2, 4, 8, 16, 32))]}
    theory = {"m": -0.5, "n": -1.0, "d": 0.5}
    # The Huber regression loss h_w(<theta, a> - b) IS the loss here (convex, G = 1, (1/w)-smooth), so Theorem 4.1
    # applies to it and the inner solves are exact to float precision; the excess is measured on the same loss.
    kind = "absolute"
    loss = problems.Loss(kind, radius=radius, smoothing=D5_HUBER_WIDTH)
    rows, claims, curves, ref_norms, ref_grads, floors, ratios = [], [], {}, [], [], [], []
    keys = jax.random.split(jax.random.key(seed), reps)
    sweeps["d (n=400)"] = [(400, 16, d) for d in ((2, 4, 8, 16) if quick else (2, 4, 8, 16, 32))]
    sweeps["m (noisy labels)"] = sweeps["m"][:3]
    for axis, cells in sweeps.items():
        vals, flat, runs, flat_runs = [], [], [], []
        noise = 0.1 if "noisy" in axis else 0.0
        for n, m, d in cells:
            progress.stage(f"D5 sweep over {axis}: cell n={n}, m={m}, d={d} ({reps} runs)")
            x, y = problems.exchangeable(kind, n, m, d, seed + 7 * n + m + d, noise=noise)
            dom = mech.Domain.ball(radius, d)
            ref, best, gnorm = huber_reference(loss, x, y)
            ref_norms.append(float(np.linalg.norm(ref)))
            ref_grads.append(gnorm)
            progress.stage(f"D5 sweep over {axis}: cell n={n}, m={m}, d={d}: Phased-ERM runs and the solver floor")
            outs = _phased_erm_runs(loss, x, y, dom, keys, rho, iters=iters)
            exc = np.array([_huber_loss(loss, th, x, y) - best for th in outs])
            floors.append(_huber_loss(loss, _phased_erm_runs(loss, x, y, dom, keys[:1], 1e-4, iters=iters)[0], x, y)
                          - best)
            vals.append(float(exc.mean()))
            runs.append(exc)
            ratios.append(vals[-1] / max(floors[-1], 1e-300))
            rows.append(_row(f"Phased-ERM rho=1e-4 ({kind})", "solver_floor", floors[-1], n=n, m=m, d=d))
            rows += [_row(f"Phased-ERM M' (huber w={D5_HUBER_WIDTH})", "excess_empirical_risk", e, r, n=n, m=m,
                          d=d, rho=rho) for r, e in enumerate(exc)]
            if axis == "m":  # B1 noise inside, on the sharp instance
                progress.stage(f"D5 sweep over {axis}: cell n={n}, m={m}, d={d}: B1 noise inside Phased-ERM")
                b1 = _phased_erm_runs(loss, x, y, dom, keys, rho, replace_noise=True, iters=iters)
                exb = np.array([_huber_loss(loss, th, x, y) - best for th in b1])
                flat.append(float(exb.mean()))
                flat_runs.append(exb)
                rows += [_row(f"Phased-ERM with B1 noise (huber w={D5_HUBER_WIDTH})", "excess_empirical_risk", e,
                              r, n=n, m=m, d=d, rho=rho) for r, e in enumerate(exb)]
        xs = [c[{"n": 0, "m": 1, "d": 2}[axis[0]]] for c in cells]
        progress.stage(f"D5 sweep over {axis}: fitting the slopes (paired bootstrap)")
        curves[axis] = (xs, vals, flat)
        setting = (f"rate-shape rho={rho}; {'noisy' if noise else 'sharp'} instance; "
                   + ", ".join(f"{k}={v}" for k, v in zip("nmd", cells[0]) if k != axis[0]))
        # the same run keys in every cell: a paired bootstrap over the runs
        if not noise:
            claims.append(slope_claim(f"Phased-ERM excess risk vs {axis} (Theorem 4.1 exponent)", xs, runs,
                                      theory[axis[0]], setting, paired=True))
        if axis[0] != "d":
            claims.append(slope_claim(f"excess risk decays at least at the theorem's rate in {axis} (Theorem 4.1 "
                                      "is an upper bound)", xs, runs, theory[axis[0]], setting, side="at_most",
                                      paired=True))
        if flat:
            claims.append(slope_claim("B1 noise inside Phased-ERM is flat in m", xs, flat_runs, 0.0, setting,
                                      paired=True))

    d_xs, d_vals, _ = curves["d"]
    n_d, m_d = sweeps["d"][0][0], sweeps["d"][0][1]
    # Converged inner solves: the largest d cell again with 4x the iterations must give the same excess.
    n_c, m_c, d_c = sweeps["d"][-1]
    x, y = problems.exchangeable(kind, n_c, m_c, d_c, seed + 7 * n_c + m_c + d_c, noise=0.0)  # the sharp cell
    _, best, _ = huber_reference(loss, x, y)
    long_out = _phased_erm_runs(loss, x, y, mech.Domain.ball(radius, d_c), keys, rho, iters=4 * iters)
    long_exc = float(np.mean([_huber_loss(loss, th, x, y) - best for th in long_out]))
    rows.append(_row(f"Phased-ERM M' (huber w={D5_HUBER_WIDTH}), 4x inner iterations", "excess_empirical_risk",
                     long_exc, n=n_c, m=m_c, d=d_c, rho=rho, inner_iterations=4 * iters))
    solver_change = long_exc / d_vals[-1] - 1
    claims.append({"claim": "the excess is the private term, not inner-solver error: 4x the inner iterations "
                   "changes it by < 5 %", "setting": f"n={n_c}, m={m_c}, d={d_c}",
                   "measured": f"{d_vals[-1]:.4g} -> {long_exc:.4g} ({solver_change:+.2%})",
                   "holds": abs(solver_change) < 0.05})
    worst_case = [2 * radius * math.sqrt(d_) / (n_d * math.sqrt(m_d)) for d_ in d_xs]  # R G sqrt(d)/(n sqrt(m))
    d_ratio = [a / b for a, b in zip(d_vals, worst_case)]
    claims.append({"claim": "Theorem 4.1 as an upper bound: excess risk <= R G sqrt(d)/(n sqrt(m)) at every d "
                   "(R = diameter of K, G = 1; the O-tilde constant taken as 1)", "setting": f"n={n_d}, m={m_d}",
                   "measured": "ratios " + ", ".join(f"d={d_}: {r_:.2g}" for d_, r_ in zip(d_xs, d_ratio)),
                   "holds": max(d_ratio) <= 1.0})
    claims.append({"claim": "every cell's mean excess risk is >= 3x its floor (rho = 1e-4 run)",
                   "setting": f"{len(ratios)} cells", "measured": f"min ratio {min(ratios):.3g}",
                   "holds": min(ratios) >= 3})

    tied_rows, tied_claims, tied_curves, tied_notes = _d5_tied_curvature(quick, seed, {a: sweeps[a] for a in "mnd"},
                                                                         theory, rho, radius)
    rows += tied_rows
    claims += tied_claims

    def plot(plt):
        panels = []
        for axis, (xs, vals, flat) in curves.items():
            cs = [("M' huber", xs, vals, "o-")]
            if flat:
                cs.append(("B1 noise inside", xs, flat, "s--"))
            panels.append((f"D5 huber: excess risk vs {axis}", axis, "excess empirical risk", cs))
        for axis, (xs, vals, pred, bound) in tied_curves.items():
            panels.append((f"D5 tied curvature mu = lambda: excess vs {axis}", axis, "excess empirical risk",
                           [("M' (measured)", xs, vals, "o-"), ("closed form without projection", xs, pred, "k:"),
                            ("R G sqrt(d)/(n sqrt(m))", xs, bound, "r--")]))
        return _loglog(plt, panels)

    slopes = {axis: slope(c[0], c[1]) for axis, c in curves.items()}
    notes = [f"Rate-shape mode (M' of Theorem 4.1's proof, NOT private): sigma_i = rho 2G/(lambda_i n sqrt(m)), "
             f"rho = {rho}, lambda = (G/R) rho sqrt(d)/(n sqrt(m)), T = ceil(log2(n m)); {reps} noise draws per cell.",
             f"Loss: Huber regression h_w(<theta, a> - b) with w = {D5_HUBER_WIDTH} (h_w(u) = u^2/(2w) for |u| <= w, "
             "|u| - w/2 beyond): convex and G = 1 Lipschitz, so Theorem 4.1 applies to it as the loss; it is also "
             f"(1/w)-smooth, so the inner solves (accelerated projected gradient, {iters} iterations) are exact "
             "and the excess, measured on the same loss, is the private term (convergence claim: 4x the iterations "
             f"changes it by {solver_change:+.2%}). K = B(0, {radius}), b = <a, w*>/2 (||w*|| = 1). Sharp instance (main sweeps): "
             "no label noise. Noisy instance (second m sweep): + Laplace(0.1) label noise clipped to [-1, 1].",
             f"Reference minimum: float64 IRLS for the Huber loss (unconstrained; norm at most {max(ref_norms):.3f} < "
             f"{radius}, so it is the minimiser over K; gradient norm at most {max(ref_grads):.1e}).",
             f"Floor (the same schedule with rho = 1e-4, metric solver_floor): at most {max(floors):.2g}.",
             "B1 inside Phased-ERM: the same schedule with replace-one-user noise 2(2G)/(lambda_i n) (no sqrt(m)).",
             "Measured slopes: " + ", ".join(f"{a}: {s_:+.2f}" for a, s_ in slopes.items()) + ". Theorem 4.1 is a "
             "worst-case upper bound; its exponents are attained by instances whose curvature near the minimiser "
             "scales like lambda ~ sqrt(d)/(n sqrt(m)) (the Appendix D construction). A fixed smooth instance has "
             "curvature h > 0 near its minimiser (here E[a a^T]/w on the sharp instance, ~ 1/(d w)); once lambda_1 < h "
             "the phases with lambda_i < h contract the earlier noise and the error is set by the phase with "
             "lambda_i ~ h: excess ~ h d sigma_i^2 ~ rho^2 G^2 d/(h n^2 m), i.e. the strongly convex rate of Theorem "
             "4.3 with mu = h (m exponent -1, n exponent -2; d exponent +1 from the noise, +1 more from h ~ 1/d on the "
             "sharp instance). So the Theorem 4.1 exponent claims fail here because this instance is in that locally "
             "strongly convex regime, not because the bound is violated: the excess stays "
             f"{min(d_ratio):.2g}-{max(d_ratio):.2g} of R G sqrt(d)/(n sqrt(m)) in the d sweep, and the m and n slopes "
             f"are steeper than the theorem's (the upper-bound claims hold). The ratio grows like d^"
             f"{slope(d_xs, d_ratio):.2f}; extrapolated, it reaches 1 (the worst-case regime lambda_1 ~ h) near d ~ "
             f"{d_xs[-1] * d_ratio[-1] ** (-1 / slope(d_xs, d_ratio)):.0f} at n = {n_d}, m = {m_d} (not run).",
             "The hinge loss is not run (no high-precision reference solver for it here)."] + tied_notes
    return "Theorem 4.1 convex ERM rate (Phased-ERM, rate-shape)", rows, claims, notes, plot, \
        "rate-shape (M', NOT private)"


def _tied_excess_closed_form(mu, lams, sigmas, d, gap0):
    """E[F(theta_T)] - F* of M' on the isotropic quadratic (mu/2)||theta - x_bar||^2 without the projections onto
    K: e_i = a_i e_{i-1} + sigma_i z_i with a_i = lambda_i/(mu + lambda_i), so E||e_T||^2 = ||e_0||^2 prod a_i^2
    + sum_i d sigma_i^2 prod_{j>i} a_j^2. With x_bar in K each projection only shortens e_i and the noise is
    independent and centred, so the measured excess is at most this."""
    a = lams / (mu + lams)
    tail = np.append(np.cumprod(a[::-1] ** 2)[::-1][1:], 1.0)  # prod_{j>i} a_j^2
    return 0.5 * mu * (gap0**2 * np.prod(a**2) + float(np.sum(d * sigmas**2 * tail)))


def _d5_tied_curvature(quick: bool, seed: int, grids: dict, theory: dict, rho: float, radius: float):
    """D5's second panel: Theorem 4.1's exponents on the instance family whose curvature is the cell's lambda
    (``problems.convex_rate_instance``; the regime where the bound is attained)."""
    import jax

    from dpjax.user_level import mechanisms as mech, phased, problems

    g, reps = 1.0, (256 if quick else 1024)
    # common random numbers: the same run keys in every cell (the cells differ only in lambda and the data)
    keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), 1), reps)
    rows, claims, curves, bar_norms, ratios, worst = [], [], {}, [], [], -math.inf
    for axis, cells in grids.items():
        vals, preds, bounds, runs = [], [], [], []
        for n, m, d in cells:
            progress.stage(f"D5 tied-curvature sweep over {axis}: cell n={n}, m={m}, d={d}")
            x, _, mu, _ = problems.convex_rate_instance(n, m, d, seed + 7 * n + m + d, rho=rho, radius=radius,
                                                        lipschitz=g)
            loss, dom = problems.Loss("squared", radius=radius, zeta=mu / 2), mech.Domain.ball(radius, d)
            x_bar = x.reshape(-1, d).mean(0)
            best = dom.project(x_bar)  # minimiser of the isotropic quadratic over K
            bar_norms.append(float(np.linalg.norm(x_bar)))
            outs = _phased_erm_runs(loss, x, np.zeros((n, m)), dom, keys, rho, lipschitz=g)
            exc = 0.5 * mu * (np.sum((outs - x_bar) ** 2, axis=1) - np.sum((best - x_bar) ** 2))
            t = phased.num_phases(n, m)
            lams = phased.phase_lambdas(mu, t)  # lambda = mu on this instance
            pred = _tied_excess_closed_form(mu, lams, rho * 2 * g / (lams * n * math.sqrt(m)), d,
                                            float(np.linalg.norm(x_bar)))
            bound = 2 * radius * g * math.sqrt(d) / (n * math.sqrt(m))  # R G sqrt(d)/(n sqrt(m))
            vals.append(float(exc.mean()))
            runs.append(exc)
            preds.append(pred)
            bounds.append(bound)
            ratios.append(vals[-1] / bound)
            worst = max(worst, (vals[-1] - pred) / (exc.std(ddof=1) / math.sqrt(reps)))
            rows += [_row("Phased-ERM M' (tied curvature mu = lambda)", "excess_empirical_risk", e, r, n=n, m=m, d=d,
                          rho=rho, mu=mu) for r, e in enumerate(exc)]
            rows.append(_row("closed form without projection", "excess_empirical_risk", pred, n=n, m=m, d=d, mu=mu))
        xs = [c[{"n": 0, "m": 1, "d": 2}[axis]] for c in cells]
        curves[axis] = (xs, vals, preds, bounds)
        claims.append(slope_claim(f"Phased-ERM excess risk vs {axis} on the tied-curvature instance (Theorem 4.1 "
                                  "exponent)", xs, runs, theory[axis], paired=True, setting=
                                  f"rate-shape rho={rho}; mu = lambda; " + ", ".join(
                                      f"{k}={v}" for k, v in zip("nmd", cells[0]) if k != axis)))
    claims.append({"claim": "tied-curvature instance: excess <= R G sqrt(d)/(n sqrt(m)) in every cell (Theorem 4.1, "
                   "O-tilde constant 1)", "setting": f"{len(ratios)} cells", "measured":
                   f"ratios {min(ratios):.3g} .. {max(ratios):.3g}", "holds": max(ratios) <= 1.0})
    claims.append({"claim": "tied-curvature instance: mean excess <= the closed-form expectation without projection "
                   "(+ 3 standard errors)", "setting": f"{len(ratios)} cells, {reps} runs each",
                   "measured": f"max (measured - closed form)/SE = {worst:+.2f}", "holds": worst <= 3.0})
    notes = [f"Tied-curvature panel (problems.convex_rate_instance): per cell, loss (mu/2)||theta - x||^2 with mu = "
             f"lambda = (G/R) rho sqrt(d)/(n sqrt(m)) (G = {g}, R = {2 * radius}, rho = {rho}), K = B(0, {radius}), "
             "x_ij ~ N^tr(chi, (radius^2/d) I; G/mu - radius), ||chi|| = radius/2, so G-Lipschitz on K and the "
             "minimiser x_bar sits at a fixed position inside K (||x_bar|| "
             f"{min(bar_norms):.3f}..{max(bar_norms):.3f}). {reps} runs per cell, the same keys in every cell; excess "
             "(mu/2)(||theta - x_bar||^2 - ||theta* - x_bar||^2) exactly; the inner solves are closed form.",
             "Why mu = lambda (written before the first run): Phased-ERM's excess on this quadratic is ~ mu R^2 for "
             "mu << lambda (it barely moves from theta_0) and ~ G^2 d/(mu n^2 m) for mu >> lambda (the strongly convex "
             "rate); both meet at mu ~ lambda, where the excess is Theta(lambda R^2) = Theta(R G sqrt(d)/(n sqrt(m))) "
             "-- the regime in which Theorem 4.1's bound is attained. Prediction: with mu = lambda the noise of phase "
             "i has d sigma_i^2 = 4 R^2/16^i (independent of n, m, d) and the contraction factors a_i = 4^i/(1 + 4^i) "
             "are fixed, so excess / lambda is the same in every cell up to the projections onto K (which matter "
             "more at small d, where ||noise|| fluctuates more): slopes -0.5 in m, -1 in n, +0.5 in d, and excess "
             "<= the closed form without projection, excess/(R G sqrt(d)/(n sqrt(m))) <= ~0.13."]
    return rows, claims, curves, notes


@register("user-level-convex-erm", paper=PAPER, description="D5: Theorem 4.1 Phased-ERM rate (rate-shape), "
          "Huber regression loss; slopes in m, n, d")
def d5_figure(out_dir, *, quick: bool, seed: int):
    return _figure("user-level-convex-erm", _d5, out_dir, quick, seed)


# ---------------------------------------------------------------------------
# D6: Theorems 4.3 / 5.3 (Algorithms 5 and 6, rate-shape)
# ---------------------------------------------------------------------------


def _d6(quick: bool, seed: int):
    import jax

    from dpjax.user_level import mechanisms as mech, phased, problems

    rho, reps, mu = 1.0, (6 if quick else 20), 0.1
    rows, claims, curves = [], [], {}
    # ERM (Algorithm 5): ridge-logistic, excess empirical risk against a converged float64 solve
    loss = problems.Loss("logistic", radius=1.0, ridge=mu)
    d = 5
    erm_cells = {"m": [(100, m) for m in ((4, 16, 64, 256) if quick else (4, 16, 64, 256, 1024))],
                 "n": [(n, 4) for n in ((50, 100, 200, 400) if quick else (50, 100, 200, 400, 800))]}
    for axis, cells in erm_cells.items():
        vals, runs = [], []
        for n, m in cells:
            progress.stage(f"D6 A5 ERM sweep over {axis}: cell n={n}, m={m} ({reps} runs)")
            x, y = problems.exchangeable("logistic", n, m, d, seed + 11 * n + m)
            dom = mech.Domain.ball(1.0, d)
            f = lambda th: _true_loss(loss, th, x, y)  # noqa: E731
            best = f(mech.minimiser(loss, x, y, dom))
            exc = []
            for r in range(reps):
                res = phased.strongly_convex_erm(jax.random.fold_in(jax.random.key(seed), r), loss, x, y, dom, 1.0,
                                                 DELTA, 1 / (2 * n * n * m), mode="rate-shape", rho=rho)
                exc.append(f(res.theta) - best)
            vals.append(float(np.mean(exc)))
            runs.append(np.asarray(exc))
            rows += [_row("A5 Strongly-Convex-ERM (rate-shape)", "excess_empirical_risk", e, r, n=n, m=m, d=d)
                     for r, e in enumerate(exc)]
        xs = [c[0] if axis == "n" else c[1] for c in cells]
        curves[("A5 ERM", axis)] = (xs, vals)
        claims.append(slope_claim(f"A5 ERM excess risk vs {axis} (Theorem 4.3)", xs, runs, {"m": -1.0, "n": -2.0}[axis],
                                  f"ridge-logistic mu={mu}, d={d}, rho={rho}", paired=True))
    # SCO (Algorithm 6): mean estimation, population excess 1/2||theta - E x||^2 = 1/2||theta||^2 exactly
    mloss = problems.Loss("mean")
    d2 = 2
    sco_cells = [(n, 8) for n in ((128, 256, 512, 1024) if quick else (128, 256, 512, 1024, 2048))]
    sco_rhos = (rho, 0.1, 0.01)  # rho -> 0 isolates the non-noise terms of A6 (decomposition, see the notes)
    sco = {r_: [] for r_ in sco_rhos}
    sco_runs = []  # the runs of rho = rho per n
    erm_part = []
    for n, m in sco_cells:
        progress.stage(f"D6 A6 SCO: cell n={n}, m={m} ({reps} runs x {len(sco_rhos)} rho)")
        dom = mech.Domain.ball(1.0, d2)
        # population risk is an expectation over x ~ D too: a fresh dataset per run (one dataset per n made the
        # statistical part a single chi-square draw per cell)
        data = [problems.exchangeable("mean", n, m, d2, seed + 13 * n + m + 1000 * r) for r in range(reps)]
        erm_part.append(float(np.mean([0.5 * np.sum(x.reshape(-1, d2).mean(0) ** 2) for x, _ in data])))
        for rho_ in sco_rhos:
            exc = []
            for r, (x, y) in enumerate(data):
                res = phased.strongly_convex_sco(jax.random.fold_in(jax.random.key(seed), r), mloss, x, y, dom, 1.0,
                                                 DELTA, 1 / (2 * n * n * m), mode="rate-shape", rho=rho_, min_group=4)
                exc.append(0.5 * float(np.sum(res.theta ** 2)))
            sco[rho_].append(float(np.mean(exc)))
            if rho_ == rho:
                sco_runs.append(np.asarray(exc))
            rows += [_row("A6 Strongly-Convex-SCO A4b (rate-shape)", "excess_population_risk", e, r, n=n, m=m, d=d2,
                          rho=rho_) for r, e in enumerate(exc)]
        rows.append(_row("statistical term 1/2||xbar - E x||^2", "excess_population_risk", erm_part[-1], n=n, m=m,
                         d=d2))
    xs = [c[0] for c in sco_cells]
    vals = sco[rho]
    curves[("A6 SCO", "n")] = (xs, vals)
    curves[("statistical term 1/2||xbar - E x||^2", "n")] = (xs, erm_part)
    claims.append(slope_claim("A6 SCO excess population risk vs n (the 1/(nm) term dominates when d < n)", xs,
                              sco_runs, -1.0, f"mean estimation d={d2}, m=8, rho={rho}", paired=True))
    sco_slopes = {r_: slope(xs, v_) for r_, v_ in sco.items()}
    floor_ratio = [a / b for a, b in zip(sco[sco_rhos[-1]], erm_part)]

    def plot(plt):
        panels = [(f"D6 A5 ERM: vs {axis}", axis, "excess empirical risk", [("A5", xs_, v, "o-")])
                  for (name, axis), (xs_, v) in curves.items() if name == "A5 ERM"]
        panels.append(("D6 A6 SCO: vs n (m = 8)", "n", "excess population risk",
                       [("A6 (A4b inside)", curves[("A6 SCO", "n")][0], curves[("A6 SCO", "n")][1], "o-"),
                        *[(f"A6, rho={r_}", xs, v_, ":") for r_, v_ in sco.items() if r_ != rho],
                        ("1/2||xbar - E x||^2", xs, erm_part, "k--")]))
        return _loglog(plt, panels)

    notes = [f"Rate-shape mode (NOT private): theta_0 = theta* + N(0, sigma_0^2 I), sigma_0 = rho G/(mu n sqrt(m)); "
             f"R' = sigma_0 (sqrt(d) + sqrt(2 ln(1/beta))) (+ the Proposition B.1 term for A6), beta = 1/(2 n^2 m); "
             f"then M' (Phased-ERM / Phased-SCO A4b) on K' = K cap B(theta_0, R'); rho = {rho}, {reps} runs per cell.",
             f"A5: ridge-logistic (mu = {mu}) on K = B(0, 1); reference minimum from the same oracle (accelerated "
             "gradient, linear convergence, float64).",
             "A6: mean estimation (items symmetric around 0, so the population excess is 1/2||theta||^2 exactly); "
             "users split in halves (spec A15); rate-shape N0 = 4; a fresh dataset per run (population risk is an "
             "expectation over the data as well).",
             "A6 slope in n, measured honestly against the spec's -1: the fitted slope depends on rho -- "
             + ", ".join(f"rho={r_}: {s_:+.2f}" for r_, s_ in sco_slopes.items())
             + f". At rho = {rho} the noise term (d/(n^2 m) shape, slope -2) is not negligible next to the 1/(nm) "
             f"term at n <= {xs[-1]}, so the fit lies between -1 and -2. As rho -> 0 (noise switched off) what remains "
             f"decays SLOWER than 1/(nm) and sits {min(floor_ratio):.1f}-{max(floor_ratio):.1f}x above the statistical "
             "term 1/2||xbar||^2 itself: A6 runs Phased-SCO (A4b) on half the users split into T = ceil(log2(n m)) "
             "groups, so each phase's minimiser sees n/(2T) users and lambda carries sqrt(T) -- polylog factors that "
             f"Theorem 5.3's O-tilde hides and that grow over this n range (T = {phased.num_phases(xs[0] // 2, 8)}.."
             f"{phased.num_phases(xs[-1] // 2, 8)}). No rho in "
             "between is a principled choice (picking one to land on -1 would be tuning), so the claim stays as "
             "measured."]
    return "Theorems 4.3 / 5.3 strongly convex rates (A5, A6, rate-shape)", rows, claims, notes, plot, \
        "rate-shape (M', NOT private)"


@register("user-level-strongly-convex", paper=PAPER, description="D6: Theorems 4.3/5.3, A5 ERM and A6 SCO rates "
          "(rate-shape)")
def d6_figure(out_dir, *, quick: bool, seed: int):
    return _figure("user-level-strongly-convex", _d6, out_dir, quick, seed)


# ---------------------------------------------------------------------------
# D7: Appendix D lower-bound instance
# ---------------------------------------------------------------------------


def _d7(quick: bool, seed: int):
    import jax

    from dpjax.accounting import user_level as acc
    from dpjax.user_level import mechanisms as mech, problems

    eps, mu, g, reps, rho = 1.0, 1.0, 1.0, (200 if quick else 1000), 1.0
    d = 10
    cells = {"m": [(200, m) for m in (1, 4, 16, 64, 256)], "n": [(n, 16) for n in (100, 200, 400, 800)]}
    rows, claims, curves = [], [], {}
    for axis, grid in cells.items():
        a2, b1, lb, a2_runs, b1_runs = [], [], [], [], []
        for n, m in grid:
            progress.stage(f"D7 sweep over {axis}: cell n={n}, m={m}")
            x, chi, sigma_d, big_b = problems.lower_bound_instance(n, m, d, seed + n + m, lipschitz=g,
                                                                   strong_convexity=mu)
            loss = problems.Loss("squared", radius=big_b, zeta=mu / 2)
            dom = mech.Domain.ball(big_b, d)
            theta = mech.minimiser(loss, x, np.zeros(x.shape[:2]), dom)
            g_eff = loss.lipschitz  # mu (G/mu + B) = 2G on K (Appendix D instance)
            s_a2 = rho * g_eff / (mu * n * math.sqrt(m))
            s_b1 = acc.b1_sigma(eps, DELTA, n, g_eff, mu)
            with jax.enable_x64(True):
                z = np.asarray(jax.random.normal(jax.random.key(seed + n + m), (reps, d), "float64"))
            err_a2 = np.sum((theta + s_a2 * z - chi) ** 2, axis=1)
            err_b1 = np.sum((theta + s_b1 * z - chi) ** 2, axis=1)
            a2.append(float(err_a2.mean()))
            b1.append(float(err_b1.mean()))
            a2_runs.append(err_a2)
            b1_runs.append(err_b1)
            lb.append(d * sigma_d**2 / (eps**2 * n**2 * m))
            rows += [_row("A2 (rate-shape)", "sq_error", a2[-1], n=n, m=m, d=d),
                     _row("B1", "sq_error", b1[-1], epsilon=eps, accountant="classical Gaussian", n=n, m=m, d=d),
                     _row("lower bound d sigma_D^2/(eps^2 n^2 m)", "sq_error", lb[-1], n=n, m=m, d=d)]
        xs = [c[1] if axis == "m" else c[0] for c in grid]
        curves[axis] = (xs, a2, b1, lb)
        claims.append(slope_claim(f"A2 error vs {axis} tracks d/(n^2 m)", xs, a2_runs, {"m": -1.0, "n": -2.0}[axis],
                                  f"d={d}, rho={rho}", unit="noise draws"))
        if axis == "m":
            claims.append(slope_claim("B1 error is flat in m", xs, b1_runs, 0.0, f"n=200, d={d}", unit="noise draws"))
            ratio = [a / b for a, b in zip(a2, lb)]
            claims.append({"claim": "A2 error / lower bound is constant in m (rates match; the constant is the "
                           "G/sigma_D gap of the worst-case noise)", "setting": f"n=200, d={d}",
                           "measured": f"ratios {min(ratio):.3g} .. {max(ratio):.3g}",
                           "holds": max(ratio) / min(ratio) <= 2.0})

    def plot(plt):
        return _loglog(plt, [(f"D7: E||theta - chi||^2 vs {axis}", axis, "squared error",
                              [("A2 (rate-shape)", xs, a2, "o-"), ("B1 (eps=1)", xs, b1, "s--"),
                               ("lower bound shape", xs, lb, "k:")]) for axis, (xs, a2, b1, lb) in curves.items()])

    notes = ["L1 instance (Appendix D): x_ij ~ N(chi, sigma_D^2 I) truncated to ||x|| <= B = G/mu, sigma_D = "
             "B/(1000 sqrt(d)), chi uniform in [-sigma_D/sqrt(m), sigma_D/sqrt(m)]^d; loss (mu/2)||theta - x||^2 on "
             "K = B(0, B) (Lipschitz 2G there).",
             f"A2 in rate-shape mode (NOT private): theta* + N(0, sigma^2 I), sigma = rho 2G/(mu n sqrt(m)), rho={rho}; "
             f"B1: the certified user-level Gaussian mechanism at eps={eps}, delta={DELTA}. {reps} noise draws per "
             "cell; chi_tr = chi (truncation at 1000 sqrt(d) standard deviations is never hit).",
             "A2's worst-case noise uses G, not sigma_D: its error sits ~(G/sigma_D)^2 above the lower bound, with "
             "the same exponents in n and m."]
    return "Appendix D lower-bound instance", rows, claims, notes, plot, "rate-shape (A2) and certified (B1)"


@register("user-level-lower-bound", paper=PAPER, description="D7: Appendix D instance, A2 error vs d/(n^2 m), B1")
def d7_figure(out_dir, *, quick: bool, seed: int):
    return _figure("user-level-lower-bound", _d7, out_dir, quick, seed)


# ---------------------------------------------------------------------------
# D8: Phased-SCO as printed (A4) vs the equal split (A4b)
# ---------------------------------------------------------------------------


def _d8(quick: bool, seed: int):
    import jax

    from dpjax.user_level import mechanisms as mech, phased, problems

    # A4b needs n >= T N0 with T = ceil(log2(n m)): n = 256 allows m <= 256, the full grid's m = 1024 needs n = 512
    n, d, n0, rho, reps = (256 if quick else 512), 3, 16, 1.0, (4 if quick else 12)
    ms = (1, 4, 16, 64, 256) if quick else (1, 4, 16, 64, 256, 1024)
    for m in ms:  # checked before any compute (a late failure would waste the cells before it)
        if n < phased.num_phases(n, m) * n0:
            raise ValueError(f"D8 grid: n={n} < T N0 = {phased.num_phases(n, m) * n0} at m={m} (A4b equal split)")
    loss, dom = problems.Loss("absolute", radius=1.0, smoothing=2e-4), mech.Domain.ball(1.0, d)
    # population risk: the generator's b = <a, w>/2 without label noise, so L(theta*; D) = 0 at theta* = w/2 and
    # L(theta; D) is estimated on 20000 fresh items
    held_x, held_y = problems.exchangeable("absolute", 20000, 1, d, seed, noise=0.0)
    rows, claims, res = [], [], {"A4": [], "A4b": []}
    runs = {"A4": [], "A4b": []}
    for m in ms:
        progress.stage(f"D8: m={m} (A4 and A4b, {reps} runs each)")
        x, y = problems.exchangeable("absolute", n, m, d, seed, noise=0.0)  # same w for every m (same seed)
        for variant in res:
            exc = []
            for r in range(reps):
                out = phased.phased_sco(jax.random.fold_in(jax.random.key(seed), r), loss, x, y, dom, 1.0, DELTA,
                                        1 / (n * m), variant=variant, mode="rate-shape", rho=rho, min_group=n0)
                exc.append(_true_loss(loss, out.theta, held_x, held_y))
            res[variant].append(float(np.mean(exc)))
            runs[variant].append(np.asarray(exc))
            rows += [_row(f"{variant} Phased-SCO (rate-shape)", "excess_population_risk", e, r, n=n, m=m, d=d)
                     for r, e in enumerate(exc)]
    # the tail of the m grid: the verdict rule's minimum of 4 points (1.8 decades of m)
    tail = slice(len(ms) - 4, None)
    setting = f"n={n}, N0={n0}, d={d}; the last 4 m ({ms[tail][0]}..{ms[-1]})"
    claims.append(slope_claim("A4 (as printed) plateaus in m", ms[tail], runs["A4"][tail], 0.0, setting,
                              side="at_least", paired=True))
    claims.append(slope_claim("A4b (equal split) keeps decreasing", ms[tail], runs["A4b"][tail], -0.5, setting,
                              side="at_most", paired=True))
    claims.append({"claim": "A4b below A4 at the largest m", "setting": f"m={ms[-1]}",
                   "measured": f"A4 {res['A4'][-1]:.3g}, A4b {res['A4b'][-1]:.3g}",
                   "holds": res["A4b"][-1] < res["A4"][-1]})

    def plot(plt):
        return _loglog(plt, [("D8: Phased-SCO, excess population risk vs m", "m", "excess population risk",
                              [("A4 as printed (halving groups)", ms, res["A4"], "o-"),
                               ("A4b equal split", ms, res["A4b"], "s-")])])

    notes = [f"Rate-shape mode (NOT private): sigma_i = rho 2G/(lambda_i n_i sqrt(m)), rho = {rho}, "
             "lambda = (G/R) max{rho T sqrt(d)/(n sqrt(m)), sqrt(T/(n m))} (the spec's correction of Theorem 5.1's "
             "lambda; T = 1 in the max for A4, T = number of groups for A4b).",
             f"A4: groups (n/2^i, n/2^(i-1)], T = floor(log2(n/N0)) with N0 = {n0} (rate-shape; the certified N0 is "
             "8 kappa + 2 = 258 at eps = 1, delta = 1e-6); A4b: T = ceil(log2(n m)) equal groups.",
             "Loss: absolute regression without label noise (b = <a, w>/2), a convex, sharp (linear-growth) SCO "
             "instance with L* = 0; population risk estimated on 20000 held-out items. K = B(0, 1), G = 1.",
             f"{reps} runs per point."]
    return "Phased-SCO gap: A4 as printed vs the equal split A4b", rows, claims, notes, plot, \
        "rate-shape (NOT private)"


@register("user-level-phased-sco", paper=PAPER, description="D8: Phased-SCO as printed (A4) vs equal split (A4b)")
def d8_figure(out_dir, *, quick: bool, seed: int):
    return _figure("user-level-phased-sco", _d8, out_dir, quick, seed)


# ---------------------------------------------------------------------------
# D9: exact privacy audit of Algorithm 1
# ---------------------------------------------------------------------------


def _d9(quick: bool, seed: int):
    """Exact hockey-stick audit of Algorithm 1 (spec test U5) at parameters where the certificate is not vacuous
    (certified delta well below 1, release probability well above 0), with the stability-test-skipped mutant."""
    from dpjax.accounting import user_level as acc
    from dpjax.user_level import audit

    eps_p = 1.0
    configs = ((3, 14),) if quick else ((3, 14), (4, 18))  # (kappa, n): n >= 4 kappa + 2, exact enumeration
    rng = np.random.default_rng(seed)
    rows, table = [], []
    for kappa, n in configs:
        spread = rng.uniform(0.3, 0.7, size=n)
        pairs = [(f"canary, {j} outlier users", *audit.canary_pair(n, j), 1e-4) for j in range(4)]
        # spread data at larger Delta: partial-bottom laws and shifted centres (Delta near the deletion sensitivity)
        pairs += [(f"spread data, user 0 -> 1.0, Delta={sens}", spread, np.where(np.arange(n) == 0, 1.0, spread),
                   sens) for sens in ((0.1, 0.2) if quick else (0.05, 0.1, 0.15, 0.2))]
        for label, x, x2, sens in pairs:
            lp, lq = (audit.output_law(audit.clipped_mean_table(v_, kappa, sens), eps_p, kappa) for v_ in (x, x2))
            sp, sq = audit.skip_test_law(x), audit.skip_test_law(x2)
            for gaussian_mu in (0.25, 0.5):
                sigma = 8 * kappa * sens / gaussian_mu
                eps_c, delta_c = acc.a1_certified(acc.a1_test_params(eps_p, kappa, sens, sigma))
                h = lambda a, b, s_: max(audit.hockey_stick(a, b, s_, math.exp(eps_c)),  # noqa: E731
                                         audit.hockey_stick(b, a, s_, math.exp(eps_c)))
                case = {"kappa": kappa, "n": n, "pair": label, "Delta": sens, "sigma": sigma, "mu_G": gaussian_mu,
                        "certified_epsilon": eps_c, "certified_delta": delta_c,
                        "release_prob_x": float(lp[1].sum()), "release_prob_x2": float(lq[1].sum()),
                        "H": h(lp, lq, sigma), "exact_epsilon": audit.exact_epsilon(lp, lq, sigma, delta_c),
                        "H_no_stability_test": h(sp, sq, sigma), "H_half_noise": h(lp, lq, sigma / 2)}
                table.append(case)
                rows.append(_row("Algorithm 1 (exact)", "hockey_stick", case["H"], epsilon=eps_c,
                                 accountant="Theorem 3.3 proof (test mode)", **{k: v_ for k, v_ in case.items()
                                                                                 if k != "H"}))
    canary = [c for c in table if c["pair"].startswith("canary")]
    worst = max(c["H"] / c["certified_delta"] for c in table)
    claims = [
        {"claim": "every hockey-stick divergence H_{e^eps}(P||Q), both directions, <= the certified delta",
         "setting": f"{len(table)} cases, eps' = {eps_p}, (kappa, n) in {configs}", "measured":
         f"max H/delta_cert = {worst:.3g}; max exact eps {max(c['exact_epsilon'] for c in table):.3f} "
         f"(certified {2 * eps_p:g})", "holds": worst <= 1.0},
        {"claim": "the certificate is not vacuous: certified delta < 1 and release probability > 0 on both "
         "datasets of every canary pair", "setting": f"{len(canary)} canary cases (Delta = 1e-4)",
         "measured": f"certified delta {min(c['certified_delta'] for c in canary):.3g} .. "
         f"{max(c['certified_delta'] for c in canary):.3g}; release probability "
         f"{min(min(c['release_prob_x'], c['release_prob_x2']) for c in canary):.3g} .. 1",
         "holds": max(c["certified_delta"] for c in canary) < 1
         and min(min(c["release_prob_x"], c["release_prob_x2"]) for c in canary) > 0},
        {"claim": "mutant with the stability test skipped violates the certificate (H > certified delta) on every "
         "canary pair", "setting": "f(x) + N(0, sigma^2), never bottom", "measured":
         f"min H/delta_cert = {min(c['H_no_stability_test'] / c['certified_delta'] for c in canary):.3g}",
         "holds": all(c["H_no_stability_test"] > c["certified_delta"] for c in canary)},
        {"claim": "the audit exercises partial-bottom laws (some R1 values release, others output bottom)",
         "setting": "", "measured": f"{sum(1 for c in table if 0 < min(c['release_prob_x'], c['release_prob_x2']) < 1)}"
         f"/{len(table)} cases", "holds": any(0 < min(c["release_prob_x"], c["release_prob_x2"]) < 1 for c in table)},
    ]

    def plot(plt):
        return plot_audit(plt, table)

    lines = ["| kappa | n | pair | Delta | sigma | cert. delta | P(release) x | P(release) x' | H | exact eps | "
             "H, no stability test | H, half noise |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {c['kappa']} | {c['n']} | {c['pair']} | {c['Delta']:g} | {c['sigma']:.3g} | "
              f"{c['certified_delta']:.3g} | {c['release_prob_x']:.3g} | {c['release_prob_x2']:.3g} | {c['H']:.3g} | "
              f"{c['exact_epsilon']:.3f} | {c['H_no_stability_test']:.3g} | {c['H_half_noise']:.3g} |" for c in table]
    notes = [f"Test mode: eps' = {eps_p} (certified eps = 2 eps' = {2 * eps_p:g}), kappa and sigma = 8 kappa Delta/mu_G "
             "given directly (mu_G in {0.25, 0.5}); f = mean of user values clipped to [0, 1] (the deterministic "
             "oracle on K = B(0,1)); stable sets by exhaustive enumeration of every deletion set of <= 4 kappa + 1 "
             "users; output laws exact (the sampler's TDLap law x bottom / Gaussian mixture), divergence integrated "
             "on a grid of spacing sigma/400.",
             "certified delta = p(0) + p(2 kappa) + e^{eps'} delta_G(eps', 8 kappa Delta/sigma) (Theorem 3.3's proof). "
             "The earlier version of this audit used kappa = 2, eps' = 0.5 (certified delta >= 0.25, mostly 1.0) "
             "where the laws were bottom with probability 1 or the certificate was vacuous; here kappa = 3-4, "
             "eps' = 1 give certified delta 0.017-0.066.",
             "Canary pairs (dpjax.user_level.audit.canary_pair): D has j outlier users at 1 and the rest at 0, D' also "
             "moves user 0 from 0 to 1; with Delta = 1e-4 (far below the replace sensitivity 1/n, the paper's regime "
             "Delta ~ 1/(n sqrt(m))) the first stable set deletes the outliers, so both release the same centre and "
             "differ only in P(bottom) = P(R1 < j) vs P(R1 < j+1): exact eps up to ~eps' (0.90 at j = 2), the bottom "
             "step of the proof is nearly tight. The same pair is `dpjax audit user-level` (empirical, 95 % "
             "Clopper-Pearson).",
             "Mutants: skipping the stability test releases f(x) + N(0, sigma^2), whose centres differ by 1/n >> sigma: "
             "caught on every canary pair. Halving sigma is NOT caught by any case: Theorem 3.3's Gaussian step "
             "charges a shift of 8 kappa Delta, while neighbouring releases here differ by at most ~2 Delta "
             "(column 'H, half noise' <= certified delta throughout) -- the certificate is loose by a factor "
             "~4 kappa in its Gaussian part, so half the noise stays within it.",
             "Table:\n\n" + "\n".join(lines)]
    return "exact privacy audit of Algorithm 1 (toy, non-vacuous certificate)", rows, claims, notes, plot, \
        "certified (test-mode constants)"


@register("user-level-audit", paper=PAPER, description="D9: exact hockey-stick audit of Algorithm 1 on toy neighbours")
def d9_figure(out_dir, *, quick: bool, seed: int):
    return _figure("user-level-audit", _d9, out_dir, quick, seed)
