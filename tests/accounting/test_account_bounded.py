"""`dpjax account` answers within seconds for schedules of up to 10^12 steps (issue 39: 10^8 steps at noise multiplier
10^4 never answered: dp_accounting's sparse self-composition computes ``size ** steps`` as a Python integer)."""

import json
import resource
import time

import pytest

from dpjax.accounting import tight
from dpjax.accounting.schedules import GaussianSchedule
from dpjax.cli import main

pytestmark = pytest.mark.privacy


def _schedule(steps, z=10_000.0):
    return GaussianSchedule(noise_std=z, contribution_bound=1.0, sampling="poisson", dataset_size=10_000,
                            batch_size=100, steps=steps, neighboring="add-remove")


@pytest.mark.parametrize("steps", [1, 7, 1000])
def test_dense_conversion_gives_dp_accountings_own_pld(steps):
    """Where dp_accounting's sparse self-composition is cheap, ours (densified by the same test, in logarithms) is the
    same PLD: the same epsilon to the last bit."""
    s = _schedule(steps)
    interval = 1e-6
    ours = tight._pld_of(s, interval).get_epsilon_for_delta(1e-5)
    theirs = tight._single_pld(s, interval)
    theirs = theirs if steps == 1 else theirs.self_compose(steps, tight._PLD_TAIL_TRUNCATION)
    assert ours == theirs.get_epsilon_for_delta(1e-5)


@pytest.mark.parametrize("steps", ["100000000", "10000000000", "1000000000000"])
def test_account_cli_answers_a_long_schedule_in_bounded_time_and_memory(steps, capsys):
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code = main(["account", "--noise-multiplier", "10000", "--batch-size", "100", "--dataset-size", "10000",
                 "--steps", steps, "--delta", "1e-5", "--json"])
    seconds = time.perf_counter() - start
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == int(steps) and 0 < out["epsilon"] < float("inf")
    assert seconds < 10 * 3 and grown_mb < 1024  # 10 s on an idle machine; x3 for the shared 2-core test machine
