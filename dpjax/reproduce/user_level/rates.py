"""D5-D6: the rates of Phased-ERM (Theorem 4.1) and of Algorithms 5 and 6 (Theorems 4.3 / 5.3),
rate-shape runs (Ghazi et al., ICML 2023)."""

from __future__ import annotations

import math

import numpy as np

from dpjax import progress
from dpjax.reproduce.user_level.claims import slope, slope_claim
from dpjax.reproduce.user_level.config import DELTA
from dpjax.reproduce.user_level.outputs import demonstration, loglog_panels, result_row


# D5: Theorem 4.1 (Phased-ERM, convex Lipschitz, rate-shape)


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
    return theta, huber_loss(loss, theta, x, y), float(np.linalg.norm(grad))


def huber_loss(loss, theta, x, y) -> float:
    return float(np.mean(loss.value(np.asarray(theta), x, y, np, smoothed=True)))


def true_loss(loss, theta, x, y) -> float:
    return float(np.mean(loss.value(np.asarray(theta), x, y, np, smoothed=False)))


def phased_erm_runs(loss, x, y, dom, keys, rho, *, replace_noise=False, iters=600, lipschitz=None):
    """Rate-shape Phased-ERM (M') outputs for a batch of keys (vmapped: one program per cell); ``replace_noise``:
    B1 inside (sigma_i with the replace-one-user sensitivity 2(2G)/(lambda_i n), no sqrt(m)); ``lipschitz``: G
    when ``loss.lipschitz`` does not apply (the tied-curvature instance). ``rho`` and ``replace_noise`` may be
    per-key sequences, so a cell's runs, its solver floor and its B1 runs are lanes of one program. The keys
    share every solver iteration's pass over the data: linear-model losses contract it with all the keys'
    margins at once (``solver.weighted_mean_grad``)."""
    from dpjax.user_level import phased

    n, m, d = x.shape
    g = loss.lipschitz if lipschitz is None else lipschitz
    t = phased.num_phases(n, m)
    lanes = len(keys)
    rhos = np.broadcast_to(np.asarray(rho, np.float64), (lanes,))
    b1 = np.broadcast_to(np.asarray(replace_noise, bool), (lanes,))
    lams = np.stack([phased.phase_lambdas(phased.erm_lambda(g, dom.diameter, n, 1 if r1 else m, d, r_), t)
                     for r_, r1 in zip(rhos, b1)])
    sig = rhos[:, None] * 2 * g / (lams * n * np.where(b1, 1.0, math.sqrt(m))[:, None])
    if np.all(rhos == rhos[0]) and np.all(b1 == b1[0]):  # one schedule for every key
        lams, sig = lams[0], sig[0]
    return phased.rate_shape_many(keys, loss, x, y, dom, np.ones((t, n)), lams, sig, iters=iters)


def _d5_sweeps(sweeps, theory, loss, kind, keys, rho, radius, iters, reps, seed):
    """D5's sweeps, axis by axis and cell by cell: Phased-ERM in rate-shape mode (and, on the m axis, with
    B1 noise inside) against the float64 reference minimum, the rho = 1e-4 floor, the slope claims.
    Returns ``(rows, claims, curves, ref_norms, ref_grads, floors, ratios)``, the last four the
    per-cell diagnostics the notes quote."""
    import jax.numpy as jnp

    from dpjax.user_level import mechanisms as mech, problems

    rows, claims, curves, ref_norms, ref_grads, floors, ratios = [], [], {}, [], [], [], []
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
            b1_inside = axis == "m"  # B1 noise inside, on the sharp instance
            progress.stage(f"D5 sweep over {axis}: cell n={n}, m={m}, d={d}: Phased-ERM runs, the solver floor"
                           + (" and B1 noise inside Phased-ERM" if b1_inside else ""))
            # one program: the reps runs, the rho = 1e-4 floor (the first key) and, on the m axis, B1's runs
            lane_keys = jnp.concatenate([keys, keys[:1]] + ([keys] if b1_inside else []))
            lane_rho = [rho] * reps + [1e-4] + ([rho] * reps if b1_inside else [])
            lane_b1 = [False] * (reps + 1) + ([True] * reps if b1_inside else [])
            all_outs = phased_erm_runs(loss, x, y, dom, lane_keys, lane_rho, replace_noise=lane_b1, iters=iters)
            outs = all_outs[:reps]
            exc = np.array([huber_loss(loss, th, x, y) - best for th in outs])
            floors.append(huber_loss(loss, all_outs[reps], x, y) - best)
            vals.append(float(exc.mean()))
            runs.append(exc)
            ratios.append(vals[-1] / max(floors[-1], 1e-300))
            rows.append(result_row(f"Phased-ERM rho=1e-4 ({kind})", "solver_floor", floors[-1], n=n, m=m, d=d))
            rows += [result_row(f"Phased-ERM M' (huber w={D5_HUBER_WIDTH})", "excess_empirical_risk", e, r, n=n, m=m,
                          d=d, rho=rho) for r, e in enumerate(exc)]
            if b1_inside:
                b1 = all_outs[reps + 1:]
                exb = np.array([huber_loss(loss, th, x, y) - best for th in b1])
                flat.append(float(exb.mean()))
                flat_runs.append(exb)
                rows += [result_row(f"Phased-ERM with B1 noise (huber w={D5_HUBER_WIDTH})", "excess_empirical_risk", e,
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
    return rows, claims, curves, ref_norms, ref_grads, floors, ratios


def _d5_plot(curves, tied_curves):
    """D5's figure: a log-log panel per sweep axis (M' and, on the m axis, B1 noise inside) and per
    tied-curvature axis (measured, closed form, the theorem's bound)."""

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
        return loglog_panels(plt, panels)

    return plot


def _d5_solver_check(loss, kind, cell, keys, rho, radius, iters, seed, excess):
    """D5's converged-inner-solves check: the sharp cell ``cell`` (the largest d) again with 4x the inner
    iterations must give the same mean excess as the sweep's ``excess``; returns ``(row, claim, change)``."""
    from dpjax.user_level import mechanisms as mech, problems

    n_c, m_c, d_c = cell
    x, y = problems.exchangeable(kind, n_c, m_c, d_c, seed + 7 * n_c + m_c + d_c, noise=0.0)  # the sharp cell
    _, best, _ = huber_reference(loss, x, y)
    long_out = phased_erm_runs(loss, x, y, mech.Domain.ball(radius, d_c), keys, rho, iters=4 * iters)
    long_exc = float(np.mean([huber_loss(loss, th, x, y) - best for th in long_out]))
    row = result_row(f"Phased-ERM M' (huber w={D5_HUBER_WIDTH}), 4x inner iterations", "excess_empirical_risk",
                     long_exc, n=n_c, m=m_c, d=d_c, rho=rho, inner_iterations=4 * iters)
    solver_change = long_exc / excess - 1
    claim = {"claim": "the excess is the private term, not inner-solver error: 4x the inner iterations "
             "changes it by < 5 %", "setting": f"n={n_c}, m={m_c}, d={d_c}",
             "measured": f"{excess:.4g} -> {long_exc:.4g} ({solver_change:+.2%})",
             "holds": abs(solver_change) < 0.05}
    return row, claim, solver_change


def _d5(quick: bool, seed: int):
    import jax

    from dpjax.user_level import problems

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
    keys = jax.random.split(jax.random.key(seed), reps)
    sweeps["d (n=400)"] = [(400, 16, d) for d in ((2, 4, 8, 16) if quick else (2, 4, 8, 16, 32))]
    sweeps["m (noisy labels)"] = sweeps["m"][:3]
    rows, claims, curves, ref_norms, ref_grads, floors, ratios = _d5_sweeps(sweeps, theory, loss, kind, keys, rho,
                                                                             radius, iters, reps, seed)

    d_xs, d_vals, _ = curves["d"]
    n_d, m_d = sweeps["d"][0][0], sweeps["d"][0][1]
    row, claim, solver_change = _d5_solver_check(loss, kind, sweeps["d"][-1], keys, rho, radius, iters, seed,
                                                 d_vals[-1])
    rows.append(row)
    claims.append(claim)
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

    plot = _d5_plot(curves, tied_curves)
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


def tied_excess_closed_form(mu, lams, sigmas, d, gap0):
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
            outs = phased_erm_runs(loss, x, np.zeros((n, m)), dom, keys, rho, lipschitz=g)
            exc = 0.5 * mu * (np.sum((outs - x_bar) ** 2, axis=1) - np.sum((best - x_bar) ** 2))
            t = phased.num_phases(n, m)
            lams = phased.phase_lambdas(mu, t)  # lambda = mu on this instance
            pred = tied_excess_closed_form(mu, lams, rho * 2 * g / (lams * n * math.sqrt(m)), d,
                                            float(np.linalg.norm(x_bar)))
            bound = 2 * radius * g * math.sqrt(d) / (n * math.sqrt(m))  # R G sqrt(d)/(n sqrt(m))
            vals.append(float(exc.mean()))
            runs.append(exc)
            preds.append(pred)
            bounds.append(bound)
            ratios.append(vals[-1] / bound)
            worst = max(worst, (vals[-1] - pred) / (exc.std(ddof=1) / math.sqrt(reps)))
            rows += [result_row("Phased-ERM M' (tied curvature mu = lambda)", "excess_empirical_risk", e, r, n=n, m=m, d=d,
                          rho=rho, mu=mu) for r, e in enumerate(exc)]
            rows.append(result_row("closed form without projection", "excess_empirical_risk", pred, n=n, m=m, d=d, mu=mu))
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


d5_figure = demonstration("user-level-convex-erm", _d5)


# D6: Theorems 4.3 / 5.3 (Algorithms 5 and 6, rate-shape)


def _d6_erm(quick: bool, seed: int, rho: float, reps: int, mu: float):
    """D6's ERM part (Algorithm 5, Theorem 4.3): ridge-logistic, excess empirical risk against a converged
    float64 solve, sweeps in m and n; returns ``(rows, claims, curves)``."""
    import jax
    import jax.numpy as jnp

    from dpjax.user_level import mechanisms as mech, phased, problems

    rows, claims, curves = [], [], {}
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
            f = lambda th: true_loss(loss, th, x, y)  # noqa: E731
            best = f(mech.minimiser(loss, x, y, dom))
            # the reps in one batched call (theta* once, M' vmapped over the runs); each run equals
            # phased.strongly_convex_erm(key_r, ..., mode="rate-shape") with the same key
            run_keys = jnp.stack([jax.random.fold_in(jax.random.key(seed), r) for r in range(reps)])
            thetas = phased.strongly_convex_erm_rate_shape(run_keys, loss, x, y, dom, 1 / (2 * n * n * m), rho=rho)
            exc = [f(th) - best for th in thetas]
            vals.append(float(np.mean(exc)))
            runs.append(np.asarray(exc))
            rows += [result_row("A5 Strongly-Convex-ERM (rate-shape)", "excess_empirical_risk", e, r, n=n, m=m, d=d)
                     for r, e in enumerate(exc)]
        xs = [c[0] if axis == "n" else c[1] for c in cells]
        curves[("A5 ERM", axis)] = (xs, vals)
        claims.append(slope_claim(f"A5 ERM excess risk vs {axis} (Theorem 4.3)", xs, runs, {"m": -1.0, "n": -2.0}[axis],
                                  f"ridge-logistic mu={mu}, d={d}, rho={rho}", paired=True))
    return rows, claims, curves


def _d6(quick: bool, seed: int):
    import jax

    from dpjax.user_level import mechanisms as mech, phased, problems

    rho, reps, mu = 1.0, (6 if quick else 20), 0.1
    rows, claims, curves = _d6_erm(quick, seed, rho, reps, mu)
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
            rows += [result_row("A6 Strongly-Convex-SCO A4b (rate-shape)", "excess_population_risk", e, r, n=n, m=m, d=d2,
                          rho=rho_) for r, e in enumerate(exc)]
        rows.append(result_row("statistical term 1/2||xbar - E x||^2", "excess_population_risk", erm_part[-1], n=n, m=m,
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
        return loglog_panels(plt, panels)

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


d6_figure = demonstration("user-level-strongly-convex", _d6)
