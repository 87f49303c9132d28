"""`dpjax plot`: a flat curve is drawn flat, one trial with repetitions gets bars over them, epsilon = inf is drawn
and named, and a non-private reference can be added (issue #39, newcomer 6 and the plot part of 9)."""

import numpy as np
import pandas as pd
import pytest

from tests.reproduce.test_figures import assert_readable, captured  # noqa: F401  (the fixture)


def _store(root, rows):
    from dpjax.sweep.store import Store

    s = Store(root)
    s.prepare()
    (root / "config.json").write_text("{}")
    s.write_chunk("c-0000", pd.DataFrame(rows), pd.DataFrame({"run_id": ["r0"]}))
    return root


def _rows(eps, trials, reps, err, seed=0):
    rng = np.random.default_rng(seed)
    return [{"run_id": f"r{i}", "group": 0, "trial": t, "repetition": r, "epsilon": e, "learning_rate": lr,
             "train_loss": lr, "test_error": err(e) + 1e-4 * rng.random()}
            for i, (e, t, r, lr) in enumerate((e, t, r, lr) for e in eps for t in range(trials) for r in range(reps)
                                              for lr in (0.1, 1.0))]


def test_flat_curve_is_not_zoomed_into_its_noise(tmp_path, captured):  # noqa: F811
    from dpjax.sweep.plot import MIN_RATE_SPAN, plot_store

    store = _store(tmp_path / "s", _rows([1.0, 2.0, 4.0], trials=3, reps=1, err=lambda e: 0.147))
    plot_store(store, out=tmp_path / "fig.png")
    (fig,) = captured()
    lo, hi = fig.axes[0].get_ylim()
    assert hi - lo >= MIN_RATE_SPAN * (1 - 1e-9)  # the values span 1e-4; the axis at least 0.05
    assert_readable(fig)


def test_one_trial_with_repetitions_gets_bars_over_them(tmp_path, captured):  # noqa: F811
    from dpjax.sweep.plot import plot_store

    store = _store(tmp_path / "s", _rows([1.0, 2.0], trials=1, reps=2, err=lambda e: 0.3 / e))
    out = plot_store(store, out=tmp_path / "fig.png")
    (fig,) = captured()
    assert "over 2 repetitions" in fig.axes[0].get_ylabel()
    bars = pd.read_csv(out.with_suffix(".csv"))
    assert (bars["n_trials"] == 2).all() and (bars["p_hi"] > bars["p_lo"]).all()
    single = _store(tmp_path / "one", _rows([1.0, 2.0], trials=1, reps=1, err=lambda e: 0.3 / e))
    plot_store(single, out=tmp_path / "fig1.png")
    assert "no bars: 1 trial, 1 repetition" in captured()[-1].axes[0].get_ylabel()


def test_epsilon_inf_is_drawn_and_a_reference_is_added(tmp_path, captured):  # noqa: F811
    from dpjax.sweep.plot import plot_store

    store = _store(tmp_path / "s", _rows([1.0, 4.0, float("inf")], trials=2, reps=1, err=lambda e: 0.1 + 0.2 / e))
    twin = _store(tmp_path / "twin", [r | {"test_error": 0.08} for r in _rows([float("nan")], 2, 1, lambda e: 0)])
    plot_store(store, out=tmp_path / "fig.png", reference=twin)
    (fig,) = captured()
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("epsilon=inf" in t for t in labels), labels
    assert any(t.startswith("reference: twin (0.08") for t in labels), labels
    levels = sorted(round(float(line.get_ydata()[0]), 4) for line in fig.axes[0].get_lines()
                    if len(set(np.asarray(line.get_ydata(), float))) == 1 and len(line.get_ydata()) == 2)
    assert 0.08 in levels and pytest.approx(0.1, abs=1e-3) in levels


def test_several_trials_with_repetitions_can_spread_bars_over_every_run(tmp_path, captured):  # noqa: F811
    from dpjax.sweep.plot import plot_store

    rows = _rows([1.0, 2.0], trials=3, reps=2, err=lambda e: 0.3 / e)
    store = _store(tmp_path / "s", rows)
    out = plot_store(store, out=tmp_path / "fig.png", bars="runs")
    assert "over 6 runs (trials x repetitions)" in captured()[-1].axes[0].get_ylabel()
    bars = pd.read_csv(out.with_suffix(".csv"))
    assert (bars["n_trials"] == 6).all()
    # the selected learning rate (min train_loss = lr) is 0.1: the bars' mean is the mean of its 6 runs
    frame = pd.DataFrame(rows)
    for _, row in bars.iterrows():
        chosen = frame[(frame.epsilon == row["epsilon"]) & (frame.learning_rate == 0.1)]["test_error"]
        assert row["mean"] == pytest.approx(chosen.mean(), rel=1e-12)
    plot_store(store, out=tmp_path / "fig2.png")  # auto: several trials -> bars over the 3 trials
    assert "over 3 trials" in captured()[-1].axes[0].get_ylabel()
    with pytest.raises(ValueError, match=r"bars='seeds'"):
        plot_store(store, out=tmp_path / "fig3.png", bars="seeds")
