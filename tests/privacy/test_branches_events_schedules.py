"""Branches of ``dpjax.accounting.events.SelectionEvent`` and ``dpjax.accounting.schedules.GaussianSchedule`` (what a
selection says it does, and the schedule the accountants read) reached by tests that can fail (issue 42, item 1).
Expected values by hand: a record's inclusion probability (the declared Poisson q, else K / n_i; 1 for the full
batch), the passes of a one-pass / shuffled schedule (ceil(R / floor(n / K))), and the dp_accounting events the
module table names (replace-one fixed-size batches: multiplier sigma / (2 s); with replacement: SampledWithReplacement).
"""

from __future__ import annotations

import dp_accounting as dpa
import pytest

from dpjax.accounting.events import SelectionEvent
from dpjax.accounting.schedules import GaussianSchedule

pytestmark = pytest.mark.privacy


def test_selection_event_refusals_and_inclusion_probability():
    with pytest.raises(ValueError, match=r"silo_sizes=\(\) must name at least one silo"):
        SelectionEvent("poisson", (), 5)
    with pytest.raises(ValueError, match="batch_sizes has 3 entries for 2 silos"):
        SelectionEvent("without-replacement", (10, 20), (1, 2, 3))
    with pytest.raises(ValueError, match=r"sampling_rate=0.1 is Poisson's declared rate; sampling='shuffle' takes none"):
        SelectionEvent("shuffle", (10,), 5, sampling_rate=0.1)
    declared = SelectionEvent("poisson", (100, 40), 5, sampling_rate=0.05)
    assert [declared.inclusion_probability(i) for i in (0, 1)] == [0.05, 0.05]  # the declared q, not K / n_i
    derived = SelectionEvent("poisson", (100, 40), 5)
    assert [derived.inclusion_probability(i) for i in (0, 1)] == [5 / 100, 5 / 40]
    assert SelectionEvent("full", (100,), None).inclusion_probability(0) == 1.0


def test_schedule_refusals():
    with pytest.raises(ValueError, match=r"batch_size=50 must be None \(or equal to dataset_size=100\)"):
        GaussianSchedule(1.0, 1.0, "full", 100, 50, 3)
    assert GaussianSchedule(1.0, 1.0, "full", 100, 100, 3).batch_size is None  # K = n is the full batch
    with pytest.raises(ValueError, match=r"sampling_rate=0.1 is Poisson's declared rate; sampling='one-pass'"):
        GaussianSchedule(1.0, 1.0, "one-pass", 100, 10, 3, sampling_rate=0.1)
    with pytest.raises(ValueError, match="blocks_per_epoch is undefined for sampling='poisson'"):
        GaussianSchedule(1.0, 1.0, "poisson", 100, 10, 3).blocks_per_epoch
    with pytest.raises(ValueError, match=r"passes is undefined for sampling='poisson' \(random participation\)"):
        GaussianSchedule(1.0, 1.0, "poisson", 100, 10, 3).passes


def test_shuffled_passes_and_fixed_size_events():
    # n = 10, K = 4: floor(10 / 4) = 2 blocks an epoch; 5 steps are ceil(5 / 2) = 3 epochs
    assert GaussianSchedule(1.0, 1.0, "shuffle", 10, 4, 5).passes == 3
    assert GaussianSchedule(2.0, 0.5, "shuffle", 10, 4, 5).to_dp_event() == dpa.SelfComposedDpEvent(
        dpa.GaussianDpEvent(2.0 / (2 * 0.5)), 3)  # replace-one: sensitivity 2 s
    assert GaussianSchedule(2.0, 0.5, "with-replacement", 100, 7, 9).to_dp_event() == dpa.SelfComposedDpEvent(
        dpa.SampledWithReplacementDpEvent(100, 7, dpa.GaussianDpEvent(2.0 / (2 * 0.5))), 9)
