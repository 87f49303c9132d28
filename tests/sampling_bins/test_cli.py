"""``dpjax account --sampling balls-in-bins|cyclic-poisson|min-separation``: the certified numbers of
``dpjax.accounting.sampling_bins`` (pinned to dp_accounting's analytic Gaussian), calibration, one-line refusals, and
the Monte Carlo estimate printed as an estimate only."""

import json
import math

import pytest
from dp_accounting import gaussian_mechanism

from dpjax.accounting import cli
from dpjax.accounting import random_allocation as ra

pytestmark = pytest.mark.privacy

COMMON = ["--dataset-size", "60000", "--steps", "250", "--delta", "1e-5"]


def _json(capsys, argv):
    rc = cli.main(argv + ["--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_balls_in_bins_epsilon_is_the_random_allocation_certificate_of_ceil_t_over_b_epochs(capsys):
    rc, out = _json(capsys, ["--sampling", "balls-in-bins", "--noise-multiplier", "2.0", "--num-bins", "100"] + COMMON)
    # 250 steps of 100 bins: 3 epochs of fresh 1-of-100 allocations (the partial epoch counted whole), certified by
    # the random-allocation PLD and strictly below the unamplified 3 Gaussians (one of multiplier 2 / sqrt(3))
    assert rc == 0 and out["participations"] == 3 and out["neighboring"] == "add-remove"
    assert out["epsilon"] == ra.allocation_epsilon(2.0, 100, 3, 1e-5) and out["accountant"] == ra.ACCOUNTANT
    assert out["epsilon"] < gaussian_mechanism.get_epsilon_gaussian(2.0 / math.sqrt(3), 1e-5)
    assert "monte_carlo_estimate" not in out


def test_calibration_meets_the_target(capsys):
    rc, out = _json(capsys, ["--sampling", "cyclic-poisson", "--epsilon", "2", "--num-bins", "4",
                             "--sampling-rate", "0.1", "--accountant", "rdp"] + COMMON)
    assert rc == 0 and 1.99 < out["epsilon"] <= 2 and out["participations"] == math.ceil(250 / 4)


def test_min_separation_reads_b_from_the_size_under_replace_one(capsys):
    rc, out = _json(capsys, ["--sampling", "min-separation", "--noise-multiplier", "3", "--batch-size", "600"] + COMMON)
    assert rc == 0 and out["num_bins"] == 100 and out["neighboring"] == "replace-one"
    assert out["epsilon"] == pytest.approx(gaussian_mechanism.get_epsilon_gaussian(3 / math.sqrt(3), 1e-5), rel=1e-6)


def test_monte_carlo_is_printed_as_an_estimate_beside_the_certificate(capsys):
    rc, out = _json(capsys, ["--sampling", "balls-in-bins", "--noise-multiplier", "2.0", "--num-bins", "10",
                             "--mc-samples", "20000", "--dataset-size", "1000", "--steps", "20", "--delta", "1e-2"])
    est = out["monte_carlo_estimate"]
    assert rc == 0 and est["certified"] is False and est["epsilon"] < out["epsilon"]
    assert any("ESTIMATE (not certified)" in n for n in out["notes"])


@pytest.mark.parametrize("argv,needle", [
    (["--sampling", "balls-in-bins", "--noise-multiplier", "1", "--batch-size", "600"], "give --num-bins"),
    (["--sampling", "cyclic-poisson", "--noise-multiplier", "1", "--num-bins", "3"], "sampling_rate=None"),
    (["--sampling", "balls-in-bins", "--noise-multiplier", "1", "--num-bins", "3", "--sampling-rate", "0.1"],
     "sampling_rate=0.1"),
    (["--sampling", "poisson", "--noise-multiplier", "1", "--batch-size", "6", "--num-bins", "3"], "num_bins"),
    (["--sampling", "cyclic-poisson", "--noise-multiplier", "1", "--num-bins", "3", "--sampling-rate", "0.1",
      "--mc-samples", "100"], "mc_samples=100"),
])
def test_refusals_are_one_line_exit_2(capsys, argv, needle):
    assert cli.main(argv + COMMON) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and err.startswith("dpjax: error:")
