"""D1-D4: Lemma 3.8's tail, Theorem 3.6's deletion distance, Algorithm 2's noise scales and the
Appendix C certificate (Ghazi et al., ICML 2023)."""

from __future__ import annotations

import math

import numpy as np

from dpjax import progress
from dpjax.reproduce.user_level.claims import slope_claim
from dpjax.reproduce.user_level.config import DELTA
from dpjax.reproduce.user_level.outputs import (demonstration, loglog_panels, plot_certificate, plot_tail, result_row)


# D1: Lemma 3.8


def _d1(quick: bool, seed: int):
    from dpjax.user_level import audit, problems

    rows, claims = [], []
    exact_ref = {0.1: 1.17e-15, 0.01: 8.37e-30}
    for beta, ref in exact_ref.items():
        tail = audit.lemma38_pm_tail(20000, 2000, beta)
        rows.append(result_row("pm-e1 exact", "tail", tail, fail_prob=beta, N=20000, m=2000))
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
            rows += [result_row("sphere Monte Carlo", "tail", emp, fail_prob=b, m=m, draws=draws),
                     result_row("pm-e1 exact", "tail", ex, fail_prob=b, m=m, N=size)]
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


d1_figure = demonstration("user-level-tail", _d1)


# D2: Theorem 3.6


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
            rows += [result_row("theta* deletion (mean estimation)", "p95_distance", p95, n=n, m=m, d=d),
                     result_row("theta* deletion (mean estimation)", "theorem_3_6_bound", bound, n=n, m=m, d=d),
                     result_row("theta* deletion (mean estimation)", "fraction_above_bound", frac, n=n, m=m, d=d)]
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
        return loglog_panels(plt, [
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


d2_figure = demonstration("user-level-deletion", _d2)


# D3: noise scales of Algorithm 2 against m


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
            rows += [result_row(alg, "sigma_mu_over_G", s, epsilon=eps, accountant="certified (paper constants)", n=n, m=m)
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
        return loglog_panels(plt, panels)

    notes = ["Certified constants (Algorithm 1 line 3 as read by the spec, Delta_expl with c_K = 1, Delta_C of "
             "Appendix C); pure accounting, no data.",
             "A2c pays an extra factor ~ sqrt(r) over A2 (Lemma C.1 vs Corollary 3.7), so its crossover is later."]
    return "noise scale against m", rows, claims, notes, plot, "certified"


d3_figure = demonstration("user-level-noise", _d3)


# D4: certificate pass rate (Appendix C)


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
                rows += [result_row(f"A2c {label}", "certificate_passed", cert.passed, r, eps, "certified", n=n, m=m),
                         result_row(f"A2c {label}", "gamma_over_target", cert.gamma / gt, r, eps, "certified", n=n, m=m)]
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


d4_figure = demonstration("user-level-certificate", _d4)
