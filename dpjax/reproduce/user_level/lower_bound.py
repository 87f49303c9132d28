"""D7-D9: the Appendix D lower-bound instance, Phased-SCO as printed vs the equal split, and the
exact privacy audit of Algorithm 1 (Ghazi et al., ICML 2023)."""

from __future__ import annotations

import math

import numpy as np

from dpjax import progress
from dpjax.reproduce.user_level.claims import slope_claim
from dpjax.reproduce.user_level.config import DELTA
from dpjax.reproduce.user_level.outputs import demonstration, loglog_panels, plot_audit, result_row
from dpjax.reproduce.user_level.rates import true_loss


# D7: Appendix D lower-bound instance


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
            rows += [result_row("A2 (rate-shape)", "sq_error", a2[-1], n=n, m=m, d=d),
                     result_row("B1", "sq_error", b1[-1], epsilon=eps, accountant="classical Gaussian", n=n, m=m, d=d),
                     result_row("lower bound d sigma_D^2/(eps^2 n^2 m)", "sq_error", lb[-1], n=n, m=m, d=d)]
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
        return loglog_panels(plt, [(f"D7: E||theta - chi||^2 vs {axis}", axis, "squared error",
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


d7_figure = demonstration("user-level-lower-bound", _d7)


# D8: Phased-SCO as printed (A4) vs the equal split (A4b)


def _d8(quick: bool, seed: int):
    import jax
    import jax.numpy as jnp

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
            # the runs as lanes of one program; each equals phased.phased_sco(key_r, ..., mode="rate-shape")
            run_keys = jnp.stack([jax.random.fold_in(jax.random.key(seed), r) for r in range(reps)])
            thetas = phased.phased_sco_rate_shape(run_keys, loss, x, y, dom, 1.0, DELTA, variant=variant, rho=rho,
                                                  min_group=n0)
            exc = [true_loss(loss, th, held_x, held_y) for th in thetas]
            res[variant].append(float(np.mean(exc)))
            runs[variant].append(np.asarray(exc))
            rows += [result_row(f"{variant} Phased-SCO (rate-shape)", "excess_population_risk", e, r, n=n, m=m, d=d)
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
        return loglog_panels(plt, [("D8: Phased-SCO, excess population risk vs m", "m", "excess population risk",
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


d8_figure = demonstration("user-level-phased-sco", _d8)


# D9: exact privacy audit of Algorithm 1


def _d9_claims(table, configs, eps_p: float) -> list[dict]:
    """D9's claims from its cases: every divergence within the certified delta, a non-vacuous
    certificate on the canary pairs, the stability-test-skipped mutant caught, partial-bottom laws seen."""
    canary = [c for c in table if c["pair"].startswith("canary")]
    worst = max(c["H"] / c["certified_delta"] for c in table)
    return [
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
                rows.append(result_row("Algorithm 1 (exact)", "hockey_stick", case["H"], epsilon=eps_c,
                                 accountant="Theorem 3.3 proof (test mode)", **{k: v_ for k, v_ in case.items()
                                                                                 if k != "H"}))
    claims = _d9_claims(table, configs, eps_p)

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


d9_figure = demonstration("user-level-audit", _d9)
