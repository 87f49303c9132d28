"""The `dpjax run isrl-mnist-trial` task end to end (synthetic silos, and real MNIST
when ../shared/data is present), plus the CLI and the accounting-purity rule."""

import json
import subprocess
import sys

import numpy as np
import pytest

from dpjax.data import FederatedDataset
from dpjax.tasks import isrl_mnist


def _synthetic(num_silos=6, n=80, d=8, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    def make(m):
        x = rng.normal(size=(m, d)).astype(np.float32) / np.sqrt(d)
        return x, (x @ w > 0).astype(np.float32)
    train = [make(n) for _ in range(num_silos)]
    test = [make(20) for _ in range(num_silos)]
    return FederatedDataset(
        train_x=[t[0] for t in train], train_y=[t[1] for t in train],
        test_x=[t[0] for t in test], test_y=[t[1] for t in test],
        name="synthetic", num_classes=2, metadata={},
    )


@pytest.mark.slow
def test_task_on_synthetic_silos_writes_results(tmp_path):
    cfg = isrl_mnist.IsrlMnistConfig(epsilon=2.0, rounds=6, silos_per_round=4, learning_rates=(0.1, 1.0), repetitions=2)
    summary = isrl_mnist.run(cfg, tmp_path, progress=False, dataset=_synthetic())
    assert summary["privacy"]["accountant"] == "rdp"
    assert summary["privacy"]["sampling"] == "without-replacement"
    assert summary["privacy"]["neighboring"] == "replace-one"
    # calibrated to the target, never above it
    assert summary["privacy"]["epsilon"] <= 2.0 and summary["privacy"]["epsilon"] > 1.99
    assert 0.0 <= summary["test_error"] <= 1.0
    assert summary["selected_learning_rate"] in (0.1, 1.0)
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert rows[0].startswith("algorithm,epsilon,trial")
    # 2 algorithms x 2 step sizes x 2 repetitions x 4 metrics
    assert len(rows) == 1 + 2 * 2 * 2 * 4
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["sigma"] == pytest.approx(summary["sigma"])


def test_paper_experiment_calibration_reports_tight_epsilon_too(tmp_path):
    cfg = isrl_mnist.IsrlMnistConfig(
        epsilon=1.0, rounds=5, silos_per_round=3, calibration="paper-experiment",
        learning_rates=(0.5,), repetitions=1, baseline=False, sampling="poisson",
    )
    summary = isrl_mnist.run(cfg, None, progress=False, dataset=_synthetic())
    assert summary["calibration"]["report"]["accountant"] == "paper-experiment"
    assert summary["privacy"]["accountant"] == "pld"
    assert np.isfinite(summary["privacy"]["epsilon"]) and summary["privacy"]["epsilon"] > 0


@pytest.mark.slow
def test_task_on_real_mnist(mnist_dir, tmp_path):
    cfg = isrl_mnist.IsrlMnistConfig(
        epsilon=3.0, rounds=10, silos_per_round=12, n_per_digit=60, learning_rates=(1.0, 5.0),
        repetitions=1, data_dir=str(mnist_dir),
    )
    summary = isrl_mnist.run(cfg, tmp_path, progress=False)
    assert summary["num_silos"] == 25 and summary["dim"] == 50
    # even-vs-odd on PCA-50 features is learnable: far better than chance without privacy
    assert summary["nonprivate"]["test_error"] < 0.35
    # better than chance (0.5): over seeds 0-11 the private error is 0.364 on average (sd 0.071, max 0.487),
    # 0.383 at seed 0. Deterministic in float32; a test that left float64 on process-wide once gave 0.523
    # here (other random streams), which tests/conftest.py's global-state guard now reports at its source.
    assert summary["test_error"] < 0.5
    assert summary["privacy"]["epsilon"] <= 3.0


@pytest.mark.slow
def test_cli_reports_epsilon_with_accountant(mnist_dir, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "dpjax.cli", "run", "isrl-mnist-trial", "--epsilon", "2", "--rounds", "4",
         "--silos-per-round", "5", "--learning-rates", "1.0", "--repetitions", "1", "--no-baseline",
         "--no-progress", "--data-dir", str(mnist_dir), "--out", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["privacy"]["accountant"] == "rdp" and summary["privacy"]["epsilon"] <= 2.0


def test_cli_bad_input_is_a_clear_error():
    out = subprocess.run([sys.executable, "-m", "dpjax.cli", "run", "isrl-mnist-trial", "--epsilon", "-1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "epsilon=-1.0 must be > 0" in out.stderr


def test_old_task_name_says_what_replaced_it(capsys):
    from dpjax.cli import main

    assert main(["run", "isrl-mnist", "--rounds", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "isrl-mnist-trial" in err[0] and "dpjax reproduce isrl-mnist" in err[0]


def test_accounting_never_imports_jax():
    code = "import dpjax.accounting, sys; assert 'jax' not in sys.modules, sorted(m for m in sys.modules if 'jax' in m)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
