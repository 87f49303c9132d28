"""``dpjax reproduce correlated-noise``: the four methods' configuration (equal steps and batch), their calibration
to equal certified epsilon, the strategies' prefix-sum RMSE against closed forms, and (slow) the --quick run."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dpjax.reproduce.correlated_noise import config as C

pytestmark = pytest.mark.privacy

TINY = dict(C.QUICK, n_train=1200, batch=100, steps=24, bands=2)


def _families(cfg=TINY):
    from dpjax.problems import FlaxProblem
    from dpjax.problems.mlp import MLP

    return C.families(cfg, FlaxProblem(MLP((8,), 10), (784,), "softmax"))


def test_equal_compute_every_method_runs_the_same_steps_at_the_same_expected_batch():
    fams = _families()
    assert tuple(fams) == C.METHODS
    assert {f.num_rounds for f, _ in fams.values()} == {TINY["steps"]}
    assert {f.batch_size for f, _ in fams.values()} == {TINY["batch"]}
    n, b = TINY["n_train"], TINY["batch"]
    poisson, bib, _, band = (f for f, _ in fams.values())
    assert poisson.sampling_rate * n == pytest.approx(b)  # expected batch q n = B
    assert bib.num_bins == n // b  # n / B bins: batches of B an epoch
    # cyclic Poisson: groups of n / bands sampled at q: expected batch q n / bands = B
    assert band.num_bins == TINY["bands"] and band.sampling_rate * n / TINY["bands"] == pytest.approx(b)
    with pytest.raises(ValueError, match="multiple of batch"):
        _families(dict(TINY, n_train=1250))


@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_cheap_methods_are_calibrated_to_the_target_from_below(eps):
    fams = _families()
    for method in ("balls-in-bins", "tree-ftrl"):
        fam, hp = fams[method]
        z, certified = C.calibrate(fam, hp, TINY["n_train"], eps)
        assert certified <= eps and abs(certified / eps - 1) < 1e-6, method
        # the family's own report at that z gives the same number, and 0.1 % less noise misses the target
        assert fam.privacy([TINY["n_train"]], hp.create(1.0, z, 1.0)).epsilon(C.DELTA, C.ACCOUNTANT).epsilon == \
            pytest.approx(certified, rel=1e-12)
        assert fam.privacy([TINY["n_train"]], hp.create(1.0, z * 0.999, 1.0)).epsilon(C.DELTA, C.ACCOUNTANT
                                                                                       ).epsilon > eps


@pytest.mark.slow  # Poisson and BandMF RDP calibrations: ~35 s on the shared 2-core CPU
def test_all_four_methods_reach_equal_epsilon_to_1e_6():
    fams = _families()
    got = {m: C.calibrate(f, hp, TINY["n_train"], 2.0) for m, (f, hp) in fams.items()}
    certified = np.array([e for _, e in got.values()])
    assert np.all(certified <= 2.0) and np.max(np.abs(certified / 2.0 - 1)) < 1e-6
    z = {m: v[0] for m, v in got.items()}
    # no amplification for balls-in-bins (certified as ceil(R/B) Gaussians) and tree aggregation: more noise than
    # Poisson's amplified guarantee at the same epsilon
    assert z["balls-in-bins"] > z["poisson"] and z["tree-ftrl"] > z["poisson"]


def test_tree_prefix_variances_count_the_nodes_of_each_prefix():
    # T = 4 leaves per tree, R = 8: prefixes 1..4 use 1, 1, 2, 1 nodes (the 1-bits of t); the second epoch adds the
    # first tree's last prefix (popcount(4) = 1 node) to its own 1, 1, 2, 1
    np.testing.assert_array_equal(C.tree_prefix_variances(8, 4), [1, 1, 2, 1, 2, 2, 3, 2])
    np.testing.assert_array_equal(C.tree_prefix_variances(7, 7), [1, 1, 2, 1, 2, 2, 3])


def test_noise_rmse_against_closed_forms():
    cfg = dict(TINY, steps=8, n_train=400, batch=100)  # 4 rounds an epoch
    # independent noise: prefix t has variance t, so RMSE = sqrt(mean_t t) = sqrt((R + 1) / 2), last prefix sqrt(R)
    ind = C.noise_rmse("poisson", cfg, 2.0)
    assert ind["rmse_per_z"] == pytest.approx(math.sqrt(4.5), rel=1e-6)
    assert ind["max_per_z"] == pytest.approx(math.sqrt(8), rel=1e-6) and ind["rmse"] == pytest.approx(2 * ind[
        "rmse_per_z"])
    # tree (replace-one, node std 2C/B): 4 x mean of [1, 1, 2, 1, 2, 2, 3, 2] = 4 x 14 / 8
    tree = C.noise_rmse("tree-ftrl", cfg, 1.0)
    assert tree["rmse_per_z"] == pytest.approx(math.sqrt(4 * 14 / 8)) and tree["max_per_z"] == pytest.approx(
        math.sqrt(8))
    # a 2-band strategy c = (a, b), ||c|| = 1: C^{-1} has first column (-b/a)^k / a; the prefix-sum workload's
    # error is the explicit matrix product's Frobenius norm
    a, b = 0.8, 0.6
    m = np.eye(8) * a + np.eye(8, k=-1) * b
    explicit = np.linalg.norm(np.tril(np.ones((8, 8))) @ np.linalg.inv(m)) / math.sqrt(8)
    assert C.noise_rmse("band-mf", cfg, 1.0, (a, b))["rmse_per_z"] == pytest.approx(explicit, rel=1e-5)


def test_registered_listed_and_refuses_a_used_out_dir(tmp_path):
    from dpjax import reproduce
    from dpjax.reproduce import correlated_noise as cn

    assert reproduce.get("correlated-noise").fn is cn.correlated_noise
    assert "correlated-noise" in reproduce.LISTING and reproduce.get("correlated-noise").reads_data
    (tmp_path / "results.csv").write_text("x\n")
    with pytest.raises(ValueError, match="never overwritten"):
        cn.correlated_noise(tmp_path, quick=True, seed=0)


@pytest.mark.slow  # calibrations and 4 x 2 trainings: ~1-3 minutes on the shared 2-core CPU
def test_quick_run_writes_report_figure_and_equal_epsilons(tmp_path, mnist_dir):
    from dpjax.reproduce import correlated_noise as cn

    report = cn.correlated_noise(tmp_path / "run", quick=True, seed=0, data_dir=mnist_dir)
    rows = pd.read_csv(tmp_path / "run" / "results.csv")
    assert list(rows.columns[:6]) == ["algorithm", "epsilon", "trial", "metric", "value", "accountant"]
    acc = rows[rows.metric == "test_accuracy"]
    assert set(acc.algorithm) == set(C.METHODS) and len(acc) == 4 * C.QUICK["seeds"] * len(C.QUICK["epsilons"])
    assert acc.value.between(0.2, 1.0).all()  # every method learns beyond chance (0.1) in 60 steps
    cert = rows[rows.metric == "certified_epsilon"]
    assert (np.abs(cert.value / cert.epsilon - 1) < 1e-6).all() and (cert.value <= cert.epsilon).all()
    text = report.read_text()
    assert text.startswith("# Correlated noise") and "Quick mode" in text and "RMSE at z" in text
    assert (tmp_path / "run" / "correlated_noise.png").stat().st_size > 0
    # --report-only rewrites the same report from the kept files
    before = text
    (tmp_path / "run" / "report.md").unlink()
    assert cn._report_only(tmp_path / "run", quick=True).read_text() == before


def test_missing_mnist_is_one_clear_error_and_leaves_no_output(tmp_path):
    from dpjax.reproduce import correlated_noise as cn

    with pytest.raises(ValueError, match="(?i)mnist"):
        cn.correlated_noise(tmp_path / "out", quick=True, seed=0, data_dir=tmp_path / "no-such-dir")
    assert not (tmp_path / "out").exists()
