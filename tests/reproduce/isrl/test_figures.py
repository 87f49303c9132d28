"""The isrl-* figure driver end to end on a tiny synthetic task, the claim checks, the registry."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dpjax.data import FederatedDataset
from dpjax.problems import LogisticRegression
from dpjax.reproduce import figures, isrl
from dpjax.reproduce.isrl_protocol import LOCAL, LOCAL_NP, MB, MB_NP


def _tiny_data(num_silos: int, seed: int) -> FederatedDataset:
    rng = np.random.default_rng(seed)
    w = np.array([1.5, -1.0, 0.5])
    xs, ys, txs, tys = [], [], [], []
    for i in range(num_silos):
        x = (rng.normal(size=(50, 3)) + 0.3 * i).astype(np.float32)
        y = (x @ w + 0.5 * rng.normal(size=50) > 0).astype(np.float32)
        xs.append(x[:40]), ys.append(y[:40]), txs.append(x[40:]), tys.append(y[40:])
    return FederatedDataset(xs, ys, txs, tys, name="tiny", num_classes=2, metadata={"seed": seed})


TASK = isrl.config.Task(data=_tiny_data, problem=lambda fed: LogisticRegression(3),
                 lipschitz=lambda fed: 2.0 * max(float(np.max(np.linalg.norm(x, axis=1))) for x in fed.train_x))
EXP = isrl.config.Experiment("tiny", "test_error", (isrl.config.Setting(4, 2),), (2.0,), 2.0, rounds=4, trials=2, repetitions=2,
                      mb_grid=(0.05, 0.5), local_grid=(0.01, 0.1))


@pytest.fixture(scope="module")
def figure_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("fig")
    result = isrl.driver.run_experiment(EXP, TASK, seed=1, log=lambda s: None)
    summ = isrl.claims.selected_means(result["selected"])
    report = isrl.outputs.write_outputs(out, EXP, result, quick=True, seed=1, wall_s=1.0, figure_title="tiny",
                                claims=isrl.claims.claims_mnist(summ, EXP))
    return out, report, result


@pytest.mark.slow
def test_outputs_are_tidy_and_labelled(figure_dir):
    out, report, result = figure_dir
    df = pd.read_csv(out / "results.csv")
    for col in ("algorithm", "epsilon", "trial", "metric", "value", "accountant", "calibration"):
        assert col in df.columns
    assert set(df.algorithm) == {MB, LOCAL, MB_NP, LOCAL_NP}
    private = df[df.algorithm.isin([MB, LOCAL])]
    assert set(private.calibration) == {"paper", "tight"}
    assert set(private[private.calibration == "paper"].accountant) == {"paper-experiment"}
    assert set(private[private.calibration == "tight"].accountant) == {"rdp"}
    assert set(df[df.algorithm.isin([MB_NP, LOCAL_NP])].accountant) == {"none"}
    # one row per algorithm x calibration x epsilon x trial x metric
    assert not df.duplicated(["algorithm", "calibration", "epsilon", "trial", "metric"]).any()
    assert len(private[private.metric == "test_error"]) == 2 * 2 * EXP.trials
    assert len(df[df.algorithm.isin([MB_NP, LOCAL_NP]) & (df.metric == "test_error")]) == 2 * EXP.trials
    tight_eps = private[(private.metric == "realized_epsilon_rdp") & (private.calibration == "tight")].value
    assert (tight_eps <= 2.0 * (1 + 1e-6)).all() and (tight_eps >= 1.8).all()
    assert ((df[df.metric == "test_error"].value >= 0) & (df[df.metric == "test_error"].value <= 1)).all()
    # every run of the grid: 2 calibrations x 1 eps x 2 lrs x 2 reps + 2 lrs x 2 reps non-private, per family/trial
    runs = pd.read_csv(out / "runs.csv")
    assert (runs.grid_extension == 0).sum() == EXP.trials * 2 * (2 * 2 * 2 + 2 * 2)
    # extensions: one logged entry per extended (trial, family, calibration, epsilon, side) step, each
    # adding one step size x repetitions runs (no clip grid here)
    log = result["meta"]["grid_extensions"]
    assert (runs.grid_extension == 1).sum() == len(log) * EXP.repetitions
    assert (out / "tiny.png").stat().st_size > 10_000
    text = report.read_text()
    assert "## Claims" in text and "beats ISRL-DP Local SGD" in text and "paper" in text and "tight" in text


@pytest.mark.slow
def test_grid_extension_moves_edge_selections_inward(figure_dir):
    """Issue #16's generic rule: a step size selected at an end of its grid gets one more
    geometric step beyond that end (up to max_grid_extensions per side), so a final
    selection sits at the grid's edge only when that limit was reached or every
    further step diverged."""
    out, _, result = figure_dir
    runs, selected = result["runs"], result["selected"]
    assert result["meta"]["grid_extensions"], "the tiny protocol's 2-point grids must hit an edge"
    for rec in selected.to_dict("records"):
        group = runs[(runs.trial == rec["trial"]) & (runs.algorithm == rec["algorithm"])
                     & (runs.calibration == rec["calibration"]) & (runs.epsilon == rec["epsilon"])]
        lrs = sorted(group.learning_rate.unique())
        if not rec["edge"]:
            assert lrs[0] < rec["learning_rate"] < lrs[-1]
            continue
        side = "low" if np.isclose(rec["learning_rate"], lrs[0]) else "high"
        mine = [e for e in result["meta"]["grid_extensions"] if e["trial"] == rec["trial"]
                and e["algorithm"] == rec["algorithm"] and e["calibration"] == rec["calibration"]
                and e["epsilon"] == rec["epsilon"] and e["side"] == side]
        # still at the edge of everything tried: only once that side's extension limit was used up
        assert len(mine) == EXP.max_grid_extensions


@pytest.mark.slow
def test_excess_risk_selection_and_heterogeneity_label(figure_dir):
    """F^* (Newton, pooled training data) per trial; excess_risk = train_loss - F^*
    in runs.csv and results.csv; the selection minimises the mean excess risk;
    upsilon*^2 in meta.json, optimum.csv, the report and the figure title."""
    import json

    from dpjax.reproduce import isrl_optimum

    out, report, result = figure_dir
    opt = pd.read_csv(out / "optimum.csv")
    assert list(opt.trial) == [0, 1] and (opt.num_silos == 4).all() and opt.converged.all()
    assert (opt.grad_norm < 1e-6).all() and (opt.upsilon_star_sq > 0).all()
    for t in (0, 1):  # recompute F^* and upsilon*^2 from the trial's data
        fed = _tiny_data(4, 1 * 1000 + t)
        ref = isrl_optimum.pooled_optimum(LogisticRegression(3), fed.train_x, fed.train_y)
        row = opt[opt.trial == t].iloc[0]
        assert row.F_star == pytest.approx(ref.loss, rel=1e-12)
        assert row.upsilon_star_sq == pytest.approx(ref.heterogeneity, rel=1e-12)
    runs = pd.read_csv(out / "runs.csv")
    f_star = runs.trial.map(dict(zip(opt.trial, opt.F_star)))
    np.testing.assert_allclose(runs.excess_risk, runs.train_loss - f_star, rtol=1e-12)
    assert (runs.excess_risk[np.isfinite(runs.excess_risk)] > -1e-6).all()
    sel = result["selected"]
    by = ["algorithm", "calibration", "epsilon", "trial"]
    means = result["runs"].groupby(by + ["hp_index"])["excess_risk"].mean().reset_index()
    best = means.loc[means.groupby(by)["excess_risk"].idxmin()]
    merged = sel.merge(best, on=by, suffixes=("", "_best"))
    assert len(merged) == len(sel) and (merged.hp_index == merged.hp_index_best).all()
    df = pd.read_csv(out / "results.csv")
    ex = df[df.metric == "excess_risk"].set_index(["algorithm", "calibration", "epsilon", "trial"]).value
    tl = df[df.metric == "train_loss"].set_index(["algorithm", "calibration", "epsilon", "trial"]).value
    trial_f = tl.index.get_level_values("trial").map(dict(zip(opt.trial, opt.F_star)))
    np.testing.assert_allclose(ex.loc[tl.index], tl - np.asarray(trial_f), rtol=1e-9, atol=1e-12)
    meta = json.loads((out / "meta.json").read_text())
    ups = meta["settings"]["N=4, M=2"]["upsilon_star_sq"]
    assert ups == pytest.approx(opt.upsilon_star_sq.mean()) and len(meta["pooled_optimum"]) == 2
    assert meta["settings"]["N=4, M=2"]["F_star_by_trial"] == pytest.approx(list(opt.F_star))
    text = report.read_text()
    assert "υ*²" in text and f"υ*² = {ups:.3g}" in text and "excess risk" in text


@pytest.mark.slow
def test_same_seed_same_results(figure_dir):
    _, _, result = figure_dir
    again = isrl.driver.run_experiment(EXP, TASK, seed=1, log=lambda s: None)
    pd.testing.assert_frame_equal(result["runs"], again["runs"])
    other = isrl.driver.run_experiment(EXP, TASK, seed=2, log=lambda s: None)
    base = lambda r: r["runs"][r["runs"].grid_extension == 0]["train_loss"].to_numpy()
    assert not np.allclose(base(other), base(result))


def _summary(values: dict) -> pd.DataFrame:
    rows = []
    for (alg, cal, eps), m in values.items():
        rows.append({"num_silos": 25, "silos_per_round": 12, "algorithm": alg, "calibration": cal, "epsilon": eps,
                     "mean": m, "p_lo": m, "p_hi": m, "half_width": 0.0, "n_trials": 1})
    return pd.DataFrame(rows)


def test_mnist_claims_can_fail():
    exp = isrl.config.Experiment("m", "test_error", (isrl.config.Setting(25, 12),), (1.0, 12.0), 12.0, 5, 1, 1, (0.1,), (0.1,),
                          calibrations=("paper",))
    good = {(MB, "paper", 1.0): 0.20, (MB, "paper", 12.0): 0.14, (LOCAL, "paper", 1.0): 0.25,
            (LOCAL, "paper", 12.0): 0.16, (LOCAL_NP, "none", math.inf): 0.15, (MB_NP, "none", math.inf): 0.13}
    claims = isrl.claims.claims_mnist(_summary(good), exp)
    assert [c["holds"] for c in claims] == [True, True]
    bad = good | {(MB, "paper", 1.0): 0.30, (MB, "paper", 12.0): 0.155}
    claims = isrl.claims.claims_mnist(_summary(bad), exp)
    assert [c["holds"] for c in claims] == [False, False]


def test_obesity_and_insurance_claims_use_the_papers_ranges():
    exp = isrl.config.Experiment("o", "test_error", (isrl.config.Setting(25, 12),), (1.0, 3.0), 3.0, 5, 1, 1, (0.1,), (0.1,),
                          calibrations=("paper",))
    vals = {(MB, "paper", 1.0): 0.40, (MB, "paper", 3.0): 0.35, (LOCAL, "paper", 1.0): 0.50, (LOCAL, "paper", 3.0): 0.45}
    c, weak = isrl.claims.claims_obesity(_summary(vals), exp)
    assert c["holds"] and weak["holds"]  # 20% and 22% lower
    assert "ε=1: MB-SGD 0.400 vs Local SGD 0.500 (MB-SGD 20% lower)" in c["measured"]
    c, weak = isrl.claims.claims_obesity(_summary(vals | {(MB, "paper", 3.0): 0.44}), exp)
    assert not c["holds"] and weak["holds"] and weak["claim"].startswith("weaker form")
    # MB-SGD higher than Local SGD: said as "higher", and the weaker form fails
    c, weak = isrl.claims.claims_obesity(_summary(vals | {(MB, "paper", 3.0): 0.4635}), exp)
    assert "(MB-SGD 3% higher)" in c["measured"] and "% lower)" not in c["measured"].split(";")[1]
    assert not c["holds"] and not weak["holds"] and weak["measured"] == "lower at 1/2 ε (1)"
    ins = isrl.config.Experiment("i", "relative_rmse", (isrl.config.Setting(25, 12),), (1.0, 3.0), 3.0, 5, 1, 1, (0.1,), (0.1,),
                          calibrations=("paper",))
    vals = vals | {(MB, "paper", 1.0): 0.65, (MB, "paper", 3.0): 0.50, (LOCAL, "paper", 1.0): 0.9,
                   (LOCAL, "paper", 3.0): 0.55, (LOCAL_NP, "none", math.inf): 0.48, (MB_NP, "none", math.inf): 0.47}
    got = {c["claim"]: c["holds"] for c in isrl.claims.claims_insurance(_summary(vals), ins)}
    assert got["relative RMSE ≈ 0.6–0.7 at ε ≈ 1 (tolerance ±0.05)"]
    assert got["ISRL-DP MB-SGD beats ISRL-DP Local SGD, especially for ε ≤ 2"]
    vals[(MB, "paper", 1.0)] = 0.95
    got = {c["claim"]: c["holds"] for c in isrl.claims.claims_insurance(_summary(vals), ins)}
    assert not got["relative RMSE ≈ 0.6–0.7 at ε ≈ 1 (tolerance ±0.05)"]


def test_registry_lists_the_three_figures_and_protocols_validate():
    names = set(figures())
    assert {"isrl-mnist", "isrl-insurance", "isrl-obesity"} <= names
    full, quick = isrl.config.mnist_experiment(False), isrl.config.mnist_experiment(True)
    assert {s.silos_per_round for s in full.settings} == {25, 12, 18}
    assert full.trials == 20 and full.repetitions == 3 and len(full.mb_grid) == 10
    assert quick.trials < full.trials and set(quick.epsilons) <= set(full.epsilons)
    assert quick.epsilon_max == full.epsilon_max  # same K in both modes
    ins = isrl.config.insurance_experiment(False)
    assert {(s.num_silos, s.silos_per_round) for s in ins.settings} == {
        (3, 3), (3, 2), (5, 5), (5, 3), (10, 10), (10, 5), (12, 12), (12, 6)}
    with pytest.raises(ValueError, match="epsilon_max"):
        isrl.config.Experiment("x", "test_error", (isrl.config.Setting(2, 1),), (5.0,), 1.0, 5, 1, 1, (0.1,), (0.1,))
    with pytest.raises(ValueError, match="metric"):
        isrl.config.Experiment("x", "accuracy", (isrl.config.Setting(2, 1),), (1.0,), 1.0, 5, 1, 1, (0.1,), (0.1,))
