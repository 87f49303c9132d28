"""Experiment plumbing of the DIFF2 reproductions (spec §6 items 29-32, §5.3)."""

import math

import jax
import numpy as np
import pytest
from scipy import stats

from dpjax.reproduce import diff2 as rep


def test_pvalue_matches_scipy_paired_one_sided():
    a = np.array([0.10, 0.12, 0.09, 0.11, 0.10])
    b = np.array([0.13, 0.12, 0.12, 0.15, 0.11])
    assert rep.claims.paired_one_sided_pvalue(a, b) == pytest.approx(stats.ttest_rel(a, b, alternative="less").pvalue)
    d = a - b
    t = d.mean() / (d.std(ddof=1) / math.sqrt(5))
    assert rep.claims.paired_one_sided_pvalue(a, b) == pytest.approx(stats.t.cdf(t, 4))
    assert rep.claims.paired_one_sided_pvalue(b, a) > 0.9


def test_mlp_init_bounds_and_squared_loss_convention():
    prob = rep.model.mlp_problem(8, 1, "regression")
    params = prob.init_params(jax.random.key(0))
    leaves = jax.tree_util.tree_leaves_with_path(params)
    sizes = sum(int(np.size(l)) for _, l in leaves)
    assert sizes == 10 * 8 + 10 + 10 * 1 + 1  # spec §5.2: d = 10 d_in + 10 + 10 d_out + d_out = 101
    for path, leaf in leaves:
        fan_in = 8 if "Dense_0" in jax.tree_util.keystr(path) else 10
        assert np.max(np.abs(leaf)) <= 1 / math.sqrt(fan_in)
        assert np.max(np.abs(leaf)) > 0.5 / math.sqrt(fan_in)  # uniform over the whole range, not tiny
    x = np.ones(8, np.float32)
    pred = float(prob.output(params, x)[0])
    assert float(prob.loss(params, x, 2.0)) == pytest.approx((pred - 2.0) ** 2, rel=1e-5)  # no 1/2 (A18)
    cls = rep.model.mlp_problem(5, 3, "classification")
    p2 = cls.init_params(jax.random.key(1))
    logits = np.asarray(cls.output(p2, np.ones(5, np.float32)))
    assert float(cls.loss(p2, np.ones(5, np.float32), np.int32(1))) == pytest.approx(
        float(np.log(np.exp(logits).sum()) - logits[1]), rel=1e-5)


def test_configs_and_noise_from_the_accountant():
    from dpjax.accounting import diff2 as acc

    proto = rep.config.FULL
    assert proto.restart_intervals() == (6, 20, 60, 200)  # spec §2.8
    cfgs = rep.config.build_configs(proto, (3.0,), 1651)
    counts = {a: sum(c.algorithm == a for c in cfgs) for a in ("GD", "DP-GD", "DIFF2-GD")}
    assert counts == {"GD": 10, "DP-GD": 50, "DIFF2-GD": 1000}
    d = next(c for c in cfgs if c.algorithm == "DIFF2-GD" and c.restart_interval == 20)
    assert (d.sigma_restart, d.sigma_diff) == pytest.approx(acc.diff2_gd_sigmas(3.0, 1e-5, 2000, 20, 1651, 10))
    assert d.sigma_restart == pytest.approx(2.346e-3, rel=6e-4)
    dp = next(c for c in cfgs if c.algorithm == "DP-GD")
    assert dp.sigma_restart == pytest.approx(9.383e-3, rel=6e-4) and dp.restart_interval == 1
    privacy = rep.config.verify_privacy(cfgs, proto, 1651)
    for (eps, T), (paper, composed) in privacy.items():
        assert paper <= eps and composed <= eps


def test_tiny_end_to_end_pipeline(tmp_path, shared_data):
    """R = 6 on 300 California records, two seeds: files, columns, selection, p-values."""
    import pandas as pd

    proto = rep.config.Protocol(num_rounds=6, eval_every=3, seeds=(0, 1), learning_rates=(0.5, 0.25),
                         clip_restart=(1.0,), clip_diff=(3.0,), restart_fractions=(0.5,),
                         max_records={"california_housing": 300})
    res = rep.driver.run_dataset("california_housing", proto, (3.0,), data_dir=str(shared_data), log=lambda *_: None)
    assert res["meta"]["n_min"] == 24 and len(res["configs"]) == 2 + 2 + 2
    assert list(res["eval_rounds"]) == [0, 3, 6]
    summ = rep.claims.summarize(res, proto, rep.config.METRICS_REG)
    assert set(summ) == {("GD", math.inf), ("DP-GD", 3.0), ("DIFF2-GD", 3.0)}
    assert summ[("DP-GD", 3.0)]["train_loss"]["curves"].shape == (2, 3)
    # the GD row is the non-private run: its train loss decreases from the common starting point
    g = summ[("GD", math.inf)]["train_loss"]["curves"]
    assert np.all(g[:, -1] < g[:, 0])
    assert np.allclose(g[:, 0], summ[("DIFF2-GD", 3.0)]["train_loss"]["curves"][:, 0])
    report = rep.figures.write_outputs(tmp_path, "t", ["california_housing"], (3.0,), rep.config.METRICS_REG,
                                {"california_housing": res}, {"california_housing": summ}, proto, True, 1.0)
    df = pd.read_csv(tmp_path / "results.csv")
    for col in ("algorithm", "epsilon", "trial", "metric", "value", "accountant"):
        assert col in df.columns
    assert (tmp_path / "t_eps3.png").exists()
    text = report.read_text()
    assert "Claim by claim" in text and "QUICK" in text
