"""Selection protocol and percentile bars on hand-built tables (no JAX)."""

import numpy as np
import pandas as pd
import pytest

from dpjax.sweep import select


def table(rng):
    rows = []
    for eps in (1.0, 4.0):
        for trial in range(5):
            for lr in (0.01, 0.1, 1.0):
                for rep in range(3):
                    # loss is smallest at lr=0.1 for eps=1 and at lr=1.0 for eps=4 (on average over reps)
                    best = 0.1 if eps == 1.0 else 1.0
                    loss = 1.0 + abs(np.log10(lr) - np.log10(best)) + 0.01 * rng.standard_normal()
                    rows.append(dict(epsilon=eps, trial=trial, learning_rate=lr, repetition=rep, train_loss=loss,
                                     test_error=0.1 * trial + lr + rep * 0.01, diverged_round=-1))
    return pd.DataFrame(rows)


def test_select_best_picks_mean_argmin_and_reports_mean_metric():
    df = table(np.random.default_rng(0))
    sel = select.select_best(df, over="learning_rate", by=["epsilon", "trial"])
    assert len(sel) == 10
    assert (sel[sel.epsilon == 1.0].learning_rate == 0.1).all()
    assert (sel[sel.epsilon == 4.0].learning_rate == 1.0).all()
    # reported metric = mean over the 3 repetitions of the selected step size
    exp = 0.1 * sel.trial + sel.learning_rate + 0.01
    np.testing.assert_allclose(sel.test_error, exp, rtol=1e-12)
    assert (sel.n_reps == 3).all()


def test_diverged_or_nan_runs_are_never_selected():
    df = table(np.random.default_rng(1))
    # one repetition of the otherwise best step size diverges: its mean becomes infinite
    hit = (df.epsilon == 1.0) & (df.trial == 0) & (df.learning_rate == 0.1) & (df.repetition == 1)
    df.loc[hit, "diverged_round"] = 7
    nan_hit = (df.epsilon == 1.0) & (df.trial == 1) & (df.learning_rate == 0.1) & (df.repetition == 0)
    df.loc[nan_hit, "train_loss"] = np.nan
    sel = select.select_best(df, over="learning_rate", by=["epsilon", "trial"]).set_index(["epsilon", "trial"])
    assert sel.loc[(1.0, 0), "learning_rate"] != 0.1 and sel.loc[(1.0, 1), "learning_rate"] != 0.1
    assert sel.loc[(1.0, 2), "learning_rate"] == 0.1


def test_error_bars_match_numpy_percentiles():
    rng = np.random.default_rng(2)
    sel = pd.DataFrame({"epsilon": np.repeat([1.0, 2.0], 20), "test_error": rng.random(40)})
    bars = select.error_bars(sel, x="epsilon", value="test_error", clip=(0.0, 1.0))
    for eps, sub in sel.groupby("epsilon"):
        b = bars[bars.epsilon == eps].iloc[0]
        v = sub.test_error.to_numpy()
        assert b["mean"] == pytest.approx(v.mean())
        assert b.p_lo == pytest.approx(np.percentile(v, 5)) and b.p_hi == pytest.approx(np.percentile(v, 95))
        assert b.half_width == pytest.approx((b.p_hi - b.p_lo) / 2)
        assert 0.0 <= b.bar_lo <= b["mean"] <= b.bar_hi <= 1.0


def test_bad_columns_and_percentiles_are_named():
    df = table(np.random.default_rng(3))
    with pytest.raises(ValueError, match="step"):
        select.select_best(df, over="step")
    with pytest.raises(ValueError, match="percentiles"):
        select.error_bars(df, percentiles=(95, 5))
    with pytest.raises(ValueError, match="empty"):
        select.select_best(df.iloc[:0])


def test_diff2_patience_rule_on_hand_made_traces():
    assert select.patience_survives([1.0, 0.9, 0.8, 0.7])
    assert not select.patience_survives([1.0, 0.9, float("nan"), 0.7])
    assert not select.patience_survives([1.0, float("inf")])
    assert not select.patience_survives([float("nan")])
    # five evaluations above 1.05 x best -> fail
    assert not select.patience_survives([1.0, 1.1, 1.2, 1.1, 1.06, 1.3])
    # four are fine
    assert select.patience_survives([1.0, 1.1, 1.2, 1.1, 1.06])
    # the band (best, 1.05 best] leaves the counter unchanged
    assert not select.patience_survives([1.0, 1.1, 1.2, 1.02, 1.1, 1.06, 1.3])
    assert select.patience_survives([1.0, 1.1, 1.2, 1.02, 1.03, 1.04, 1.01, 1.1, 1.2])
    # a strict improvement resets the counter
    assert select.patience_survives([1.0, 1.1, 1.2, 1.1, 1.06, 0.99, 1.1, 1.2, 1.1, 1.06])
    # round 0 seeds best
    assert not select.patience_survives([0.5, 0.6, 0.6, 0.6, 0.6, 0.6])


def test_diff2_selection_takes_largest_survivor_or_falls_back():
    etas = [0.25, 1.0, 0.5]
    traces = [np.array([1.0, 0.5, 0.4]), np.array([1.0, np.nan, np.nan]), np.array([1.0, 0.6, 0.3])]
    assert select.largest_surviving(etas, traces) == (2, True)
    bad = [np.array([1.0, 2.0, 2.0, 2.0, 2.0, 2.0]), np.array([1.0, np.nan, np.nan, np.nan, np.nan, np.nan]),
           np.array([1.0, 0.7, 2.0, 2.0, 2.0, 2.0, 2.0])]
    assert select.largest_surviving(etas, bad) == (2, False)


def _quadratic_runs(lrs, *, group, best, hp_start=0, reps=2, diverge=False):
    """Runs of one group whose mean training loss is (log10 lr - log10 best)^2 (+ a repetition offset)."""
    return pd.DataFrame([dict(group=group, learning_rate=lr, hp_index=hp_start + h, repetition=r,
                              train_loss=np.inf if diverge else (np.log10(lr) - np.log10(best)) ** 2 + 0.01 * r,
                              test=lr)
                         for h, lr in enumerate(lrs) for r in range(reps)])


def test_select_mean_adds_means_first_values_and_the_grid_edge():
    runs = pd.concat([_quadratic_runs((0.01, 0.1, 1.0), group="a", best=0.1),
                      _quadratic_runs((0.01, 0.1, 1.0), group="b", best=10.0)], ignore_index=True)
    runs["excess"] = runs["train_loss"] + 1.0
    sel = select.select_mean(runs, ["group"], criterion="train_loss", mean_columns=("excess",),
                             first_columns=("learning_rate",), edge_column="learning_rate")
    a, b = sel.set_index("group").loc["a"], sel.set_index("group").loc["b"]
    assert a.learning_rate == 0.1 and not a.edge and a.excess == pytest.approx(1.005)
    assert b.learning_rate == 1.0 and b.edge  # the best step lies beyond the grid's top
    assert a.test == pytest.approx(0.1)  # the reported metric's mean over repetitions


def test_extend_grid_at_edges_steps_geometrically_until_inside_or_capped():
    runs = pd.concat([_quadratic_runs((0.01, 0.1, 1.0), group="inside", best=0.1),
                      _quadratic_runs((0.01, 0.1, 1.0), group="high", best=100.0),
                      _quadratic_runs((0.01, 0.1, 1.0), group="far", best=1e9),
                      _quadratic_runs((0.01, 0.1, 1.0), group="diverged", best=1.0, diverge=True)], ignore_index=True)
    requested, logged = [], []

    def run_values(requests, done):
        requested.append(requests)
        start = int(done["hp_index"].max()) + 1
        best = {"high": 100.0, "far": 1e9}
        return pd.concat([_quadratic_runs((r["learning_rate"],), group=r["group"], best=best[r["group"]],
                                          hp_start=start + j) for j, r in enumerate(requests)], ignore_index=True)

    out = select.extend_grid_at_edges(runs, by=["group"], criterion="train_loss", column="learning_rate",
                                      max_extensions=3, run_values=run_values, log=logged.append)
    new = out[out.grid_extension == 1]
    assert set(new.group) == {"high", "far"}  # "inside" is interior, "diverged" has no finite selection
    # "high": 10, then 100 (selected, interior once 1000 is tried), then 1000 -> stops inside the grid
    assert sorted(new[new.group == "high"].learning_rate.unique()) == pytest.approx([10.0, 100.0, 1000.0])
    # "far": capped after 3 extensions on the high side
    assert sorted(new[new.group == "far"].learning_rate.unique()) == pytest.approx([10.0, 100.0, 1000.0])
    assert [len(r) for r in requested] == [2, 2, 2]
    assert logged[0] == {"group": "far", "side": "high", "learning_rate": pytest.approx(10.0)}
    assert (out.grid_extension == 0).sum() == len(runs) and (new.hp_index > runs.hp_index.max()).all()
    untouched = select.extend_grid_at_edges(runs, by=["group"], criterion="train_loss", column="learning_rate",
                                            max_extensions=0, run_values=run_values)
    assert len(untouched) == len(runs) and (untouched.grid_extension == 0).all()
    with pytest.raises(ValueError, match="max_extensions"):
        select.extend_grid_at_edges(runs, by=["group"], criterion="train_loss", column="learning_rate",
                                    max_extensions=-1, run_values=run_values)
    assert select.extended_grid([0.01, 0.1, 1.0], "low") == pytest.approx(0.001)


# ---------------------------------------------------------------------------
# the verdict rule for scaling exponents
# ---------------------------------------------------------------------------


def _power_law(x, exponent, spread, seeds=12, seed=0):
    """Per-seed values exponent-power-law in x with lognormal noise of sd ``spread`` (in log)."""
    rng = np.random.default_rng(seed)
    return [xi**exponent * np.exp(spread * rng.standard_normal(seeds)) for xi in x]


X5 = np.array([1e3, 3e3, 1e4, 3e4, 1e5])  # 5 points, 2 decades


def test_slope_verdict_holds_when_the_interval_lies_within_the_claim():
    v = select.slope_verdict(X5, _power_law(X5, -0.5, 0.05), predicted=-0.5, tolerance=0.15)
    assert v.verdict == "holds" and v.holds
    lo, hi = v.ci
    assert lo < v.slope < hi and hi - lo < 0.1  # tight interval around the true exponent
    assert abs(v.slope + 0.5) < 0.03
    assert "90 % CI, bootstrap over 12 seeds" in v.measured() and "5 points over 2.0 decades" in v.measured()


def test_slope_verdict_differs_only_when_the_interval_excludes_the_claimed_range():
    samples = _power_law(X5, -0.5, 0.05)
    v = select.slope_verdict(X5, samples, predicted=-2 / 3, tolerance=0.1)  # range [-0.767, -0.567]
    assert v.verdict == "differs" and v.ci[0] > -2 / 3 + 0.1
    # same data, tolerance wide enough to hold the interval -> holds
    assert select.slope_verdict(X5, samples, predicted=-2 / 3, tolerance=0.2).verdict == "holds"
    kw = dict(n_points=5, decades=2, predicted=-2 / 3, tolerance=0.15)  # claimed range [-0.817, -0.517]
    assert select.judge_slope(-0.82, (-0.86, -0.80), **kw).verdict == "inconclusive"  # straddles -0.817
    assert select.judge_slope(-0.85, (-0.88, -0.82), **kw).verdict == "differs"
    assert select.judge_slope(-0.70, (-0.80, -0.60), **kw).verdict == "holds"
    # a point estimate inside the range does not make it hold when the interval reaches outside
    v = select.judge_slope(-0.60, (-0.70, -0.45), **kw)
    assert v.verdict == "inconclusive" and "straddles" in v.reason


def test_slope_verdict_is_inconclusive_with_a_wide_interval():
    v = select.slope_verdict(X5, _power_law(X5, -0.5, 2.0, seeds=6), predicted=-0.5, tolerance=0.15)
    assert v.verdict == "inconclusive" and "straddles" in v.reason
    assert v.ci[1] - v.ci[0] > 0.3


def test_slope_verdict_needs_four_points():
    x3 = X5[[0, 2, 4]]  # 3 points over 2 decades: an exact power law, still not enough points
    v = select.slope_verdict(x3, _power_law(x3, -0.5, 0.01), predicted=-0.5, tolerance=0.15)
    assert v.verdict == "inconclusive" and "only 3 points" in v.reason
    v = select.slope_verdict(x3, _power_law(x3, -0.5, 0.01), predicted=-2.0, tolerance=0.15)
    assert v.verdict == "inconclusive"  # not even "differs" from 3 points
    x4 = np.array([1e3, 1e4, 1e5, 1e6])
    assert select.slope_verdict(x4, _power_law(x4, -0.5, 0.01), predicted=-0.5, tolerance=0.15).verdict == "holds"


def test_slope_verdict_needs_one_decade():
    x = np.array([100, 200, 400, 800])  # 0.9 decades
    v = select.slope_verdict(x, _power_law(x, -1.0, 0.01), predicted=-1.0, tolerance=0.15)
    assert v.verdict == "inconclusive" and "0.90 decades" in v.reason
    x = np.array([100, 200, 400, 1000])  # exactly one decade is enough
    assert select.slope_verdict(x, _power_law(x, -1.0, 0.01), predicted=-1.0, tolerance=0.15).verdict == "holds"


def test_slope_verdict_one_sided_claims_and_exact_values():
    samples = _power_law(X5, -0.5, 0.05)
    assert select.slope_verdict(X5, samples, predicted=-0.5, tolerance=0.15, side="at_most").verdict == "holds"
    v = select.slope_verdict(X5, samples, predicted=-1.0, tolerance=0.15, side="at_most")
    assert v.verdict == "differs" and v.expected() == "<= -0.850"
    assert select.slope_verdict(X5, samples, predicted=-1.0, tolerance=0.15, side="at_least").verdict == "holds"
    at_most = dict(n_points=5, decades=2, predicted=-0.5, tolerance=0.15, side="at_most")  # <= -0.35
    assert select.judge_slope(-0.36, (-0.40, -0.30), **at_most).verdict == "inconclusive"
    exact = select.slope_verdict(X5, list(X5**-0.5), predicted=-0.5, tolerance=0.15)
    assert exact.verdict == "holds" and exact.ci == (exact.slope, exact.slope) and "deterministic" in exact.interval
    single = select.slope_verdict(X5, [np.array([v_]) for v_ in X5**-0.5], predicted=-0.5, tolerance=0.15)
    assert single.verdict == "inconclusive" and single.ci is None and "single seed" in single.reason


def test_slope_verdict_is_deterministic_and_the_bootstrap_covers_the_truth():
    samples = _power_law(X5, -0.5, 0.3, seeds=10)
    a = select.slope_verdict(X5, samples, predicted=-0.5, tolerance=0.15)
    b = select.slope_verdict(X5, samples, predicted=-0.5, tolerance=0.15)
    assert a == b
    # coverage of the 90 % interval over independent data sets: ~90 %; 200 sets, binomial sd ~2 %
    hits = 0
    for s in range(200):
        v = select.slope_verdict(X5, _power_law(X5, -0.5, 0.3, seeds=10, seed=s + 1), predicted=-0.5,
                                 tolerance=0.15, resamples=400)
        hits += v.ci[0] <= -0.5 <= v.ci[1]
    assert 0.78 <= hits / 200 <= 0.97  # percentile bootstrap of 10 seeds under-covers slightly


def test_slope_verdict_paired_resamples_and_bad_input():
    samples = _power_law(X5, -0.5, 0.05)
    v = select.slope_verdict(X5, samples, predicted=-0.5, tolerance=0.15, paired=True)
    assert v.verdict == "holds" and "paired" in v.interval
    with pytest.raises(ValueError, match="paired"):
        select.slope_verdict(X5, samples[:-1] + [samples[-1][:3]], predicted=-0.5, tolerance=0.15, paired=True)
    with pytest.raises(ValueError, match="x has 5 points"):
        select.slope_verdict(X5, samples[:4], predicted=-0.5, tolerance=0.15)
    with pytest.raises(ValueError, match="positive"):
        select.slope_verdict(-X5, samples, predicted=-0.5, tolerance=0.15)
    with pytest.raises(ValueError, match="side"):
        select.slope_verdict(X5, samples, predicted=-0.5, tolerance=0.15, side="both")


def test_slope_verdict_from_band_matches_the_seed_bootstrap():
    """Kept results with only mean and the 5-95 % band of the seeds: the parametric interval is close to the
    bootstrap over the seeds themselves (same data)."""
    samples = _power_law(X5, -0.5, 0.2, seeds=10, seed=3)
    full = select.slope_verdict(X5, samples, predicted=-0.5, tolerance=0.15)
    mean = [s.mean() for s in samples]
    q05, q95 = zip(*(np.quantile(s, [0.05, 0.95]) for s in samples))
    band = select.slope_verdict_from_band(X5, mean, q05, q95, 10, predicted=-0.5, tolerance=0.15)
    assert band.slope == pytest.approx(full.slope)
    width_full, width_band = full.ci[1] - full.ci[0], band.ci[1] - band.ci[0]
    assert 0.6 < width_band / width_full < 1.6
    assert "parametric" in band.interval and "10 seeds" in band.interval
    assert select.slope_verdict_from_band(X5[:3], mean[:3], q05[:3], q95[:3], 10, predicted=-0.5,
                                          tolerance=0.15).verdict == "inconclusive"
