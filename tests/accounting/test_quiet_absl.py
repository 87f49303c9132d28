"""dp_accounting's per-order absl warnings stay out of dpjax's output; the report says it once (issue #39, 4)."""

import logging
import subprocess
import sys

import pytest

from dpjax.accounting import GaussianSchedule, compute_epsilon

# q = 0.1 at noise multiplier 1: dp_accounting's fractional-order series does not converge below order 1.6
SCHEDULE = GaussianSchedule(noise_std=1.0, contribution_bound=1.0, sampling="poisson", dataset_size=1000,
                            batch_size=100, steps=10, neighboring="add-remove", unit="record")


def test_dp_accounting_warns_on_this_schedule(caplog):
    """The premise: called directly, dp_accounting logs one warning per unconverged order (and still does after a
    dpjax call: the silencing is scoped to dpjax's own call)."""
    from dp_accounting import rdp

    compute_epsilon(SCHEDULE, 1e-5, "rdp")
    with caplog.at_level(logging.WARNING):
        acc = rdp.RdpAccountant(neighboring_relation=SCHEDULE.dp_neighboring_relation)
        acc.compose(SCHEDULE.to_dp_event())
    assert sum("failed to converge" in r.getMessage() for r in caplog.records) >= 5


@pytest.mark.privacy
def test_compute_epsilon_logs_nothing_and_notes_the_excluded_orders(caplog):
    with caplog.at_level(logging.DEBUG):
        report = compute_epsilon(SCHEDULE, 1e-5, "rdp")
    assert not [r for r in caplog.records if "failed to converge" in r.getMessage()]
    (note,) = [n for n in report.notes if "did not converge" in n]
    assert "5 order(s) (1.1 .. 1.5)" in note and "excluded" in note
    # the excluded orders cost nothing: the same epsilon as dp_accounting's own accountant
    from dp_accounting import rdp

    acc = rdp.RdpAccountant(neighboring_relation=SCHEDULE.dp_neighboring_relation)
    acc.compose(SCHEDULE.to_dp_event())
    assert report.epsilon == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)


def test_dpjax_account_stderr_is_clean():
    argv = ["--sampling", "poisson", "--noise-multiplier", "1", "--sampling-rate", "0.1", "--dataset-size", "1000",
            "--steps", "10", "--delta", "1e-5", "--accountant", "rdp"]
    res = subprocess.run([sys.executable, "-m", "dpjax.accounting.cli", *argv], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert "did not converge at 5 order(s)" in res.stdout
