"""Table 1's slope claims: points, seeds and the verdict of ``dpjax.sweep.select.slope_verdict``."""

from __future__ import annotations

import math

import numpy as np

from dpjax.reproduce.shuffle_sco.config import DELTA_RATES, EPS_RATES, INSTANCES, TABLE1, mc_features
from dpjax.sweep import select


SLOPE_TOL = 0.15


def result_row(alg, iname, sweep, n, d, ex, eps=EPS_RATES, **kw):
    """One point: the mean over seeds, the 5-95 % band, the seeds' count and values (for the bootstrap)."""
    return dict(algorithm=alg, instance=iname, sweep=sweep, n=n, d=d, epsilon=eps, delta=DELTA_RATES,
                trial="mean", metric="excess_loss", value=float(ex.mean()), q05=float(np.quantile(ex, 0.05)),
                q95=float(np.quantile(ex, 0.95)), seeds=int(ex.size),
                seed_values=" ".join(f"{v:.9g}" for v in np.asarray(ex, float)), **kw)


def as_number(v, kind=float):
    """A CSV cell (or a live value) as a number; ``None`` for an empty cell."""
    if v is None or (isinstance(v, str) and v.strip() in ("", "None", "nan")):
        return None
    return kind(float(v)) if kind is int else kind(v)


def row_seed_values(row) -> np.ndarray | None:
    v = row.get("seed_values")
    if v is None or (isinstance(v, float) and math.isnan(v)) or not str(v).strip():
        return None
    return np.array([float(t) for t in str(v).split()])


def _slope(xs, point_rows, expected, n_seeds) -> select.SlopeVerdict:
    """``select.slope_verdict`` on the points' seeds (bootstrap over seeds); for kept results without
    per-seed values, the parametric variant on their 5-95 % band (``n_seeds`` seeds per point)."""
    kw = dict(predicted=expected, tolerance=SLOPE_TOL)
    if len(set(xs)) < 2:
        return select.judge_slope(math.nan, None, n_points=len(xs), decades=0.0, interval="no fit", **kw)
    samples = [row_seed_values(r) for r in point_rows]
    if all(v is not None for v in samples):
        return select.slope_verdict(xs, samples, **kw)
    return select.slope_verdict_from_band(xs, [as_number(r["value"]) for r in point_rows],
                                          [as_number(r["q05"]) for r in point_rows], [as_number(r["q95"]) for r in point_rows],
                                          n_seeds, **kw)


def _matches(row, alg, sweep, eps, schedule) -> bool:
    # results.csv of runs before the schedule column existed hold the default (Lan's) schedule only
    sched = row.get("schedule")
    return (row["algorithm"] == alg and row["sweep"] == sweep and math.isclose(as_number(row["epsilon"]), eps)
            and (sched in (None, "") or (isinstance(sched, float) and math.isnan(sched)) or sched == schedule))


def slope_summary(rows, protocol: str, *, eps: float, schedule: str, ceiling: str, fit: str, n_seeds: int,
                  d0: int = 8, wall: float = math.nan) -> dict:
    """The fit and verdicts of one protocol from its rows (live, or read back from a kept results.csv).

    The n-slope is fitted over the n of the bound window ([0.01, 0.3] L D from the explicit bound) where the measured
    loss is >= 3x the non-private twin's and not saturated; with fewer than two such n, over the n where the measured
    private term dominates. Saturated means above ``0.3 L D`` (``ceiling="bound"``) or above 0.3 x the excess loss of
    the start theta_0 = 0 (``ceiling="trivial"``: the iterates barely leave theta_0 there, whatever L D allows).
    ``fit="measured"`` skips the bound window (for instances where the explicit bound's constants put the window less
    than a decade wide inside the measured regime) and fits every n meeting the two measured conditions. Verdicts:
    ``dpjax.sweep.select.slope_verdict`` (>= 4 points over >= 1 decade, 90 % bootstrap interval over seeds)."""
    iname, table_row, sn, sd = TABLE1[protocol]
    inst = INSTANCES[iname]
    LD = inst.lipschitz * 2.0
    top = 0.3 * LD if ceiling == "bound" else 0.3 * float(inst.excess(np.zeros((1, d0)), d0, None,
                                                                       features=mc_features(d0))[0])
    own = {as_number(r["n"], int): r for r in rows if _matches(r, protocol, "n", eps, schedule)
           and as_number(r["d"], int) == d0}
    twin = {as_number(r["n"], int): as_number(r["value"]) for r in rows if _matches(r, f"{protocol}_twin", "n", eps, schedule)}
    n_grid = sorted(own)
    meas = {n: as_number(own[n]["value"]) for n in n_grid}
    bounds = {n: as_number(own[n].get("bound")) for n in n_grid}
    window = [n for n in n_grid if bounds[n] is not None and 0.01 * LD <= bounds[n] <= 0.3 * LD]
    # slope where the private term dominates (>= 3x the twin) and is not saturated
    dominant = [n for n in n_grid if n in twin and meas[n] >= 3 * twin[n] and meas[n] <= top]
    fit_n = [n for n in dominant if n in window]
    rule = "bound window and private term >= 3x twin"
    if fit == "measured":
        fit_n, rule = dominant, f"measured: private term >= 3x twin and <= {top:.3g} (regime's rule)"
    elif len(fit_n) < 2:  # the bound is worst case: fall back to the measured private term
        fit_n, rule = dominant, f"measured: private term >= 3x twin and <= {top:.3g} (bound window too narrow)"
    vn = _slope(fit_n, [own[n] for n in fit_n], sn, n_seeds)
    drows = sorted((r for r in rows if _matches(r, protocol, "d", eps, schedule)), key=lambda r: as_number(r["d"], int))
    d_grid = [as_number(r["d"], int) for r in drows]
    vd = _slope(d_grid, drows, sd, n_seeds) if drows else None
    n_d = as_number(drows[0]["n"], int) if drows else (fit_n[len(fit_n) // 2] if fit_n else None)
    flat = lambda v, k: {f"{c}_{k}": x for c, x in v.as_dict().items()  # noqa: E731
                         if c not in ("ci_level", "tolerance", "side", "predicted")} if v else {}
    return dict(protocol=protocol, instance=iname, table_row=table_row, epsilon=eps, schedule=schedule,
                expected_n=sn, fit_n=" ".join(map(str, fit_n)), n_range=(min(fit_n), max(fit_n)) if fit_n else None,
                bound_window=(min(window), max(window)) if window else None, fit_rule=rule, **flat(vn, "n"),
                expected_d=sd, d_grid=" ".join(map(str, d_grid)), n_for_d=n_d, **flat(vd, "d"),
                tolerance=SLOPE_TOL, n_seeds=n_seeds, wall=wall)
