"""``shuffle-sco-rates``: excess loss against n and d for every protocol of Table 1."""

from __future__ import annotations

import math
import pathlib
import time


from dpjax.reproduce import register, report
from dpjax.reproduce.shuffle_sco.claims import result_row, slope_summary
from dpjax.reproduce.shuffle_sco.config import DELTA_RATES, EPS_RATES, INSTANCES, RATE_PROTOCOLS, TABLE1
from dpjax.reproduce.shuffle_sco.measure import build, measure, measure_point
from dpjax.reproduce.report import write_csv
from dpjax.reproduce.shuffle_sco.outputs import kept_results, kept_wall, rates_report


def protocol_sweep(protocol: str, n_grid, d_grid, d0: int, seeds: int, seed: int, *, eps: float = EPS_RATES,
                   schedule: str = "lan", ceiling: str = "bound", fit: str = "bound", log=print
                   ) -> tuple[list[dict], dict]:
    """One protocol over ``n_grid`` (d = d0) and ``d_grid`` (at the middle n of the fit): rows and the
    slope summary (``slope_summary``: fit range, slopes with their intervals, verdicts)."""
    iname = TABLE1[protocol][0]
    inst = INSTANCES[iname]
    t0 = time.time()
    rows, at_d0 = [], {}
    for n in n_grid:
        plan, res, acc = measure_point(protocol, inst, n, d0, seeds, seed, eps, schedule)
        at_d0[n] = plan, res
        for name, ex in res.items():
            alg = f"{protocol}_twin" if name == "twin" else name
            rows.append(result_row(alg, iname, "n", n, d0, ex, eps, bound=plan.bound if name == protocol else None,
                             rounds=plan.num_rounds, batch=max(p.batch for p in plan.phases),
                             bits_per_user=plan.bits_per_user() if name == protocol else None, schedule=schedule,
                             accountant=acc if name == protocol else ("none" if name == "twin" else "gdp")))
    fit_n = slope_summary(rows, protocol, eps=eps, schedule=schedule, ceiling=ceiling, fit=fit, n_seeds=seeds,
                          d0=d0)["fit_n"].split()
    n_d = int(fit_n[len(fit_n) // 2]) if fit_n else n_grid[-1]
    for d in d_grid:
        # (n_d, d0) is a point of the n-sweep: the same data and, per seed, the same key (a split's first keys
        # do not depend on how many are split), so its protocol lanes are reused instead of compiling the
        # program again for fewer lanes (equal to such a run up to float32 reordering across lane counts)
        plan, res = at_d0[n_d] if d == d0 and n_d in at_d0 else \
            measure_point(protocol, inst, n_d, d, seeds, seed, eps, schedule, variants=False)[:2]
        rows.append(result_row(protocol, iname, "d", n_d, d, res[protocol], eps, bound=plan.bound, rounds=plan.num_rounds,
                         batch=max(p.batch for p in plan.phases), bits_per_user=plan.bits_per_user(),
                         schedule=schedule))
    summary = slope_summary(rows, protocol, eps=eps, schedule=schedule, ceiling=ceiling, fit=fit, n_seeds=seeds,
                            d0=d0, wall=time.time() - t0)
    log(f"{protocol} (eps {eps}, {schedule}): n-slope {summary['slope_n']:.3f} ({summary['verdict_n']}), "
        f"d-slope {summary.get('slope_d', math.nan):.3f} ({summary.get('verdict_d', '-')}); "
        f"{time.time() - t0:.0f} s", flush=True)
    return rows, summary


def rate_sweep(quick: bool, seed: int, log=print) -> tuple[list[dict], list[dict]]:
    """Runs every protocol over its n-grid (and the d-sweep); returns (rows, slope summaries)."""
    n_grid = [10**3, 10**4, 10**5] if quick else [int(round(10 ** (k / 2))) for k in range(6, 12)]
    d_grid = (2, 8, 32) if quick else (2, 8, 32, 128)
    d0, seeds = 8, (4 if quick else 10)
    rows, summaries = [], []
    for protocol in RATE_PROTOCOLS:
        r, summary = protocol_sweep(protocol, n_grid, d_grid, d0, seeds, seed, log=log)
        rows += r
        summaries.append(summary)
    for protocol in ("p_agd_smoothed", "p_agd"):  # the count-level P_vec against its surrogate
        inst = INSTANCES[RATE_PROTOCOLS[protocol][0]]
        n = 10**4
        fam, hp, plan = build(protocol, n, d0, aggregator="pvec")
        ex = measure(fam, {protocol: hp}, inst, n, d0, seeds, seed)[protocol]
        # the surrogate at (n, d0) is the n-sweep's point (same data, same per-seed keys): its mean is reused
        swept = [r["value"] for r in rows if r["algorithm"] == protocol and r["sweep"] == "n" and r["n"] == n]
        if swept:
            surrogate = swept[0]
        else:
            sfam, shp, _ = build(protocol, n, d0)
            surrogate = float(measure(sfam, {protocol: shp}, inst, n, d0, seeds, seed)[protocol].mean())
        rep = fam.privacy([n], hp).epsilon(DELTA_RATES)
        rows.append(dict(result_row(protocol, inst.name, "pvec-check", n, d0, ex, surrogate_value=surrogate,
                              accountant=rep.accountant, bits_per_user=plan.bits_per_user()), epsilon=rep.epsilon))
    return rows, summaries


def rates_report_only(out_dir: pathlib.Path, *, quick: bool) -> pathlib.Path:
    """Rewrites slopes.csv, report.md and the figure of a kept ``shuffle-sco-rates`` run from its results.csv
    (the verdict rule applied to the kept points; nothing re-run). ``quick`` must be the run's protocol (it
    fixes the seeds per point when the kept rows do not record them)."""
    rows = kept_results(out_dir)
    seeds = 4 if quick else 10
    summaries = [slope_summary(rows, p, eps=EPS_RATES, schedule="lan", ceiling="bound", fit="bound", n_seeds=seeds)
                 for p in RATE_PROTOCOLS if any(r["algorithm"] == p for r in rows)]
    return rates_report(out_dir, rows, summaries, quick=quick, wall=kept_wall(out_dir), regenerated=True)


@register("shuffle-sco-rates", report_only=rates_report_only)
def shuffle_sco_rates(out_dir: pathlib.Path, *, quick: bool, seed: int) -> pathlib.Path:
    out_dir = report.fresh_out(out_dir)
    t0 = time.time()
    rows, summaries = rate_sweep(quick, seed)
    wall = time.time() - t0
    write_csv(out_dir / "results.csv", rows)
    return rates_report(out_dir, rows, summaries, quick=quick, wall=wall)
