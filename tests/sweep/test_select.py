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
