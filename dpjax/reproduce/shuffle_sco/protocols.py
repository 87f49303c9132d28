"""``shuffle-sco-protocols``: P_1D / P_vec (Algorithms 1-2, Lemma 3.1, Theorem 3.2) against their exact
formulas, the exact privacy profile and a distinguishing audit."""

from __future__ import annotations

import math
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import progress
from dpjax.accounting import pvec as pvec_acc, shuffle_sco as sco
from dpjax.parts import pvec as pvec_parts
from dpjax.primitives import shuffle_protocols as sp
from dpjax.reproduce import register, report
from dpjax.reproduce.shuffle_sco.config import PAPER
from dpjax.reproduce.report import write_csv


# Protocol-level validation


def _pvec_draws(key, x, params, bound, reps):
    # x and the parameters are arguments, not closure constants (XLA would constant-fold the draws)
    f = jax.jit(jax.vmap(lambda k, xs, pv: pvec_parts.pvec_chunked_sum(k, xs, jnp.ones(xs.shape[0], bool), pv, bound,
                                                                       2**14), in_axes=(0, None, None)))
    return np.asarray(f(jax.random.split(key, reps), jnp.asarray(x, jnp.float32), params), np.float64)


def _bits_vs_counts(key_bits, key_counts, seed: int, reps: int):
    """Check 3: P_1D's bit-level and count-level simulations against each other (KS on the counts) and
    against the exact count pmf (chi-square); returns the row and the data of the plot."""
    from scipy import stats

    g, b, p, n = 4, 50, 0.3, 20
    params = sp.PvecParams(g, b, p)
    x = np.random.default_rng(seed).uniform(-1, 1, (n, 1))
    xj, mj = jnp.asarray(x, jnp.float32), jnp.ones(n, bool)
    bits_sums = jax.jit(jax.vmap(lambda k, xs, ms: pvec_parts.pvec_bits_sum(k, xs, ms, params, 1.0, g, b),
                                 in_axes=(0, None, None)))
    bits = np.asarray(bits_sums(jax.random.split(key_bits, reps), xj, mj), np.float64)[:, 0]
    counts = _pvec_draws(key_counts, x, params, 1.0, reps)[:, 0]
    to_count = lambda o: np.rint((o + n) * g / 2 + p * b * n).astype(int)  # noqa: E731  (analyzer inverted)
    # KS on the counts: the two analyzers map one count to floats that differ in the last float32 bits,
    # which a KS test on the raw outputs detects with 1e4 draws (p ~ 1e-6) although the counts agree
    ks = stats.ks_2samp(to_count(bits), to_count(counts)).pvalue
    start, pmf = sco.p1d_count_pmf((x[:, 0] + 1) / 2, g, b, p)
    support = np.arange(start, start + len(pmf))
    chi = {}
    for name, sample in (("bits", bits), ("counts", counts)):
        c = to_count(sample)
        keep = pmf > 5.0 / reps
        obs = np.array([np.sum(c == z) for z in support[keep]])
        exp = pmf[keep] * reps
        chi[name] = float(stats.chi2.sf(np.sum((obs - exp) ** 2 / exp), max(1, keep.sum() - 1)))
    row = dict(check="bits_vs_counts", n=n, d=1, g=g, b=b, reps=reps, ks_pvalue=ks,
               chi2_pvalue_bits=chi["bits"], chi2_pvalue_counts=chi["counts"],
               holds=bool(ks > 1e-3 and min(chi.values()) > 1e-3))
    return row, (bits, counts, support, pmf, to_count)


def _mc_audit(key_d, key_d_prime, pr, others, n: int, trials: int, delta: float, claim: float) -> dict:
    """Check 5: a Monte-Carlo distinguishing audit of P_1D on the engine's simulator (x_u = -1 vs +1, the
    others at ``others``): threshold chosen on one half of the draws, rates measured on the other half."""
    base = np.array([-1.0] + [2 * o - 1 for o in others])[:, None]
    neigh = base.copy()
    neigh[0, 0] = 1.0
    params = sp.PvecParams.create(pr.g, pr.b, pr.p)
    out_a = _pvec_draws(key_d, base, params, 1.0, 2 * trials)[:, 0]
    out_b = _pvec_draws(key_d_prime, neigh, params, 1.0, 2 * trials)[:, 0]
    ts = np.quantile(np.r_[out_a[:trials], out_b[:trials]], np.linspace(0.5, 0.9999, 200))
    best_t = max(ts, key=lambda t: sco.audit_lower_bound(int(np.sum(out_b[:trials] >= t)),
                                                         int(np.sum(out_a[:trials] >= t)), trials, delta))
    tp, fp = int(np.sum(out_b[trials:] >= best_t)), int(np.sum(out_a[trials:] >= best_t))
    lb = sco.audit_lower_bound(tp, fp, trials, delta)
    return dict(check="mc_audit", n=n, d=1, g=pr.g, b=pr.b, reps=trials, epsilon=claim, delta=delta,
                tpr=tp / trials, fpr=fp / trials, eps_lower_bound=lb, holds=bool(lb <= claim))


def protocol_checks(quick: bool, seed: int, log=print) -> tuple[list[dict], dict]:
    """All protocol-level checks; returns tidy rows and the data for the plots."""
    from scipy import stats

    reps = 2000 if quick else 10000
    key = jax.random.key(seed)
    rows, plots = [], {}
    chi_lo, chi_hi = stats.chi2.ppf([0.0005, 0.9995], reps - 1) / (reps - 1)
    # 1. P_1D moments (inputs in [-1, 1] = [0, Delta] after the shift; Delta = 2)
    for n in (10, 100, 1000):
        progress.stage(f"protocol checks 1/5: P_1D moments, n={n}")
        pr = pvec_acc.p1d_params(1.0, 1e-5, n)
        params = sp.PvecParams.create(pr.g, pr.b, pr.p)
        for kind in ("uniform", "zeros", "Delta", "half"):
            x = {"uniform": np.random.default_rng(seed + n).uniform(-1, 1, n), "zeros": np.full(n, -1.0),
                 "Delta": np.full(n, 1.0), "half": np.full(n, -1 + 2 * 0.5 / pr.g)}[kind][:, None]
            key, k = jax.random.split(key)
            est = _pvec_draws(k, x, params, 1.0, reps)[:, 0]
            var = float(sp.pvec_variance(x, params, 1.0)[0])
            z = (est.mean() - x.sum()) / math.sqrt(var / reps)
            ratio = est.var(ddof=1) / var
            rows.append(dict(check="p1d_moments", n=n, d=1, inputs=kind, g=pr.g, b=pr.b, reps=reps, z_mean=z,
                             var_ratio=ratio, chi2_lo=chi_lo, chi2_hi=chi_hi,
                             holds=bool(abs(z) <= 4 and chi_lo <= ratio <= chi_hi)))
    # 2. P_vec moments and the envelope constant
    for d in (1, 10, 100):
        progress.stage(f"protocol checks 2/5: P_vec moments, d={d}")
        m = 50
        pv = pvec_acc.pvec_params(1.0, 1e-5, m, d, "lemma_opt")
        params = sp.PvecParams.create(pv.g, pv.b, pv.p)
        for kind in ("sphere", "zero"):
            rng = np.random.default_rng(seed + d)
            x = rng.normal(size=(m, d))
            x = x / np.linalg.norm(x, axis=1, keepdims=True) if kind == "sphere" else np.zeros((m, d))
            key, k = jax.random.split(key)
            est = _pvec_draws(k, x, params, 1.0, reps // 2)
            var = sp.pvec_variance(x, params, 1.0)
            z = np.max(np.abs(est.mean(0) - x.sum(0)) / np.sqrt(var / (reps // 2)))
            tot = float(np.mean(np.sum((est - x.sum(0)) ** 2, axis=1)))
            envelope = d * math.log(d / 1e-5) ** 2 / 1.0**2  # d Delta_2^2 ln^2(d/delta)/eps^2
            rows.append(dict(check="pvec_moments", n=m, d=d, inputs=kind, g=pv.g, b=pv.b, reps=reps // 2,
                             z_mean=z, var_ratio=tot / float(np.sum(var)), envelope_constant=tot / envelope,
                             holds=bool(z <= 4 + math.sqrt(2 * math.log(d)) and abs(tot / np.sum(var) - 1) < 0.1)))
    # 3. bit level vs count level, against the exact count pmf
    progress.stage("protocol checks 3/5: bit level vs count level")
    key, k1, k2 = jax.random.split(key, 3)
    row, plots["bits"] = _bits_vs_counts(k1, k2, seed, reps)
    rows.append(row)
    progress.stage("protocol checks 4/5: exact hockey-stick profile of P_1D")
    # 4. exact hockey-stick profile of P_1D (x_u = 0 vs Delta, the others at fractional positions 1/2)
    eps, delta, n = 1.0, 1e-3, 20
    pr = pvec_acc.p1d_params(eps, delta, n)
    others = [0.5 / pr.g + 0.25] * (n - 1)
    P = sco.p1d_count_pmf([0.0] + others, pr.g, pr.b, pr.p)
    Q = sco.p1d_count_pmf([1.0] + others, pr.g, pr.b, pr.p)
    claim = eps * (2 / pr.g + 1)
    grid = np.linspace(0, claim, 40)
    prof = [max(sco.hockey_stick(P, Q, e), sco.hockey_stick(Q, P, e)) for e in grid]
    at_claim = max(sco.hockey_stick(P, Q, claim), sco.hockey_stick(Q, P, claim))
    rows.append(dict(check="hockey_stick", n=n, d=1, g=pr.g, b=pr.b, epsilon=claim, delta=delta,
                     exact_delta=at_claim, holds=bool(at_claim <= delta)))
    plots["profile"] = (grid, prof, claim, delta)
    progress.stage("protocol checks 5/5: Monte-Carlo distinguishing audit")
    # 5. Monte-Carlo distinguishing audit on the engine's simulator: threshold on the estimate,
    #    threshold chosen on one half of the draws, rates measured on the other half
    trials = 20000 if quick else 200000
    key, ka, kb = jax.random.split(key, 3)
    rows.append(_mc_audit(ka, kb, pr, others, n, trials, delta, claim))
    log(f"protocol checks: {sum(r['holds'] for r in rows)}/{len(rows)} hold")
    return rows, plots


def plot_protocols(path, rows, plots):
    from dpjax.sweep.plot import new_figure, save_figure

    fig, ax = new_figure(1, 4, figsize=(18, 4), squeeze=True)
    p1 = [r for r in rows if r["check"] in ("p1d_moments", "pvec_moments")]
    ax[0].scatter(range(len(p1)), [r["z_mean"] for r in p1], label="z of the mean")
    ax[0].scatter(range(len(p1)), [(r["var_ratio"] - 1) * 10 for r in p1], marker="x", label="10 (var ratio - 1)")
    ax[0].axhline(4, ls="--", c="k")
    ax[0].axhline(-4, ls="--", c="k")
    ax[0].set_title("P_1D / P_vec: mean z-scores and variance ratios (dashed: +-4)", fontsize=9)
    ax[0].set_xlabel("configuration (n, d, inputs)")
    ax[0].set_ylabel("z-score / 10 (var ratio - 1)")
    ax[0].legend(fontsize=7)
    bits, counts, support, pmf, to_count = plots["bits"]
    ax[1].hist(to_count(bits), bins=np.arange(support[0], support[-1] + 2) - 0.5, density=True, alpha=0.5,
               label="bit level")
    ax[1].hist(to_count(counts), bins=np.arange(support[0], support[-1] + 2) - 0.5, density=True, alpha=0.5,
               label="count level")
    ax[1].plot(support, pmf, "k.-", ms=2, label="exact pmf")
    lo, hi = support[np.argmax(pmf)] - 25, support[np.argmax(pmf)] + 25
    ax[1].set_xlim(lo, hi)
    from dpjax.sweep.plot import spans_decades

    if spans_decades(np.asarray(pmf)[(support >= lo) & (support <= hi)], 2):  # the tails: a log axis
        ax[1].set_yscale("log")
    ax[1].set_title("count of ones: bit vs count simulators", fontsize=9)
    ax[1].set_xlabel("count of ones in the analyzer's input")
    ax[1].set_ylabel("probability")
    ax[1].legend(fontsize=7)
    grid, prof, claim, delta = plots["profile"]
    ax[2].semilogy(grid, np.maximum(prof, 1e-300), label="exact delta(eps) of P_1D")
    ax[2].scatter([claim], [delta], c="r", label="claimed (eps(2/g+1), delta)")
    ax[2].set_xlabel("eps")
    ax[2].set_ylabel("delta(eps) (log)")
    ax[2].set_title("P_1D privacy profile (n = 20)", fontsize=9)
    ax[2].legend(fontsize=7)
    audit = [r for r in rows if r["check"] == "mc_audit"][0]
    ax[3].bar(["audit lower bound", "claimed eps"], [audit["eps_lower_bound"], audit["epsilon"]])
    ax[3].set_title("Monte-Carlo distinguishing audit", fontsize=9)
    ax[3].set_xlabel("quantity")
    ax[3].set_ylabel("eps")
    save_figure(fig, path, dpi=100, title="shuffle-sco-protocols: P_1D / P_vec checks (Lemma 3.1, Theorem 3.2)")


@register("shuffle-sco-protocols")
def shuffle_sco_protocols(out_dir: pathlib.Path, *, quick: bool, seed: int) -> pathlib.Path:
    out_dir = report.fresh_out(out_dir)
    t0 = time.time()
    rows, plots = protocol_checks(quick, seed)
    wall = time.time() - t0
    tidy = [dict(algorithm="P_1D" if r["d"] == 1 else "P_vec", epsilon=r.get("epsilon", 1.0), trial=0,
                 metric=r["check"], value=r.get("z_mean", r.get("exact_delta", r.get("eps_lower_bound",
                                                                                     r.get("ks_pvalue")))),
                 accountant="lemma3.1", **{k: v for k, v in r.items() if k not in ("epsilon",)}) for r in rows]
    write_csv(out_dir / "results.csv", tidy)
    plot_protocols(out_dir / "shuffle_sco_protocols.png", rows, plots)
    lines = [f"# shuffle-sco-protocols ({'quick' if quick else 'full'}; {wall:.0f} s)", "", f"Paper: {PAPER}.",
             "The paper has no experiments; these checks validate Lemma 3.1 / Theorem 3.2 on dpjax's simulators.",
             ""]
    checks = []
    for r in rows:
        if r["check"] in ("p1d_moments", "pvec_moments"):
            stat = f"z = {r['z_mean']:.2f}, var ratio = {r['var_ratio']:.3f}" + (
                f", E||o - sum||^2 / (d ln^2(d/delta)/eps^2) = {r['envelope_constant']:.3g}" if "envelope_constant" in r else "")
        elif r["check"] == "bits_vs_counts":
            stat = (f"KS p = {r['ks_pvalue']:.3g}; chi^2 vs exact pmf p = {r['chi2_pvalue_bits']:.3g} (bits), "
                    f"{r['chi2_pvalue_counts']:.3g} (counts)")
        elif r["check"] == "hockey_stick":
            stat = f"exact delta at eps(2/g+1) = {r['epsilon']:.3f}: {r['exact_delta']:.3g} <= {r['delta']:g}"
        else:
            stat = (f"TPR {r['tpr']:.4f}, FPR {r['fpr']:.4f}: eps >= {r['eps_lower_bound']:.3f} "
                    f"(95%) vs claimed {r['epsilon']:.3f}")
        checks.append([r["check"], r["n"], r["d"], r.get("inputs", ""), stat, "holds" if r["holds"] else "DIFFERS"])
    lines.append(report.markdown_table(checks, ["check", "n", "d", "inputs", "statistic", "holds"]))
    lines += ["", "Tolerances: mean within 4 standard errors (P_vec: plus sqrt(2 ln d) for the maximum over d "
              "coordinates); variance ratio within the chi^2 99.9% interval (P_1D) or 10% (P_vec total).",
              "", "Figure: shuffle_sco_protocols.png; tidy results: results.csv."]
    return report.write_report(out_dir, lines)
