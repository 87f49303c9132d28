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


# -- DpPlan: which guarantee a plan's events give ---------------------------------------------------------------

from dpjax.accounting.events import ClipEvent, DpPlan, NoiseEvent, SubsetSelectionEvent  # noqa: E402
from dpjax.accounting.privacy_spec import GaussianPrivacy, NoPrivacy, PerSiloPrivacy  # noqa: E402


def _plan(selection, *noises, neighboring="replace-one", **kw):
    return DpPlan(selection, ClipEvent(neighboring), noises, 10, label="fam", **kw)


def test_plan_refusals():
    sel = SelectionEvent("poisson", (100,), 5)
    with pytest.raises(ValueError, match=r"noises=\(\) must list at least one NoiseEvent"):
        _plan(sel)
    with pytest.raises(ValueError, match="fam: sampling_rate=None with Poisson sampling under add/remove"):
        _plan(sel, NoiseEvent("z", 1.0), neighboring="add-remove")
    mixed = _plan(SelectionEvent("full", (100, 50), None), NoiseEvent("a", 1.0, "silo"), NoiseEvent("b", 1.0, "server"))
    with pytest.raises(ValueError, match=r"fam: noise events mix placements \['server', 'silo'\]"):
        mixed.spec()
    uneven = _plan(SelectionEvent("without-replacement", (100, 50), (5, 10)), NoiseEvent("z", 1.0, "server"))
    with pytest.raises(ValueError, match="noise on the aggregate needs one noise multiplier and one batch size"):
        uneven.spec()
    two_fields = _plan(SelectionEvent("without-replacement", (100, 50), (5, 10)), NoiseEvent("a", 1.0),
                       NoiseEvent("b", 2.0))
    with pytest.raises(ValueError, match=r"per-silo accounting of several noise fields \['a', 'b'\]"):
        two_fields.spec()
    with pytest.raises(ValueError, match="has no Gaussian rule and no spec"):
        _plan(sel, object()).spec()


def test_plan_guarantees_by_hand():
    # no noise: not private
    assert isinstance(_plan(SelectionEvent("full", (100,), None), NoiseEvent("z", 0.0)).spec(), NoPrivacy)
    # one batch size and multiplier: one composed Gaussian spec at the smallest silo, z x 2 (replace-one unit 1)
    spec = _plan(SelectionEvent("without-replacement", (100, 50), 5), NoiseEvent("z", 1.5)).spec()
    assert isinstance(spec, GaussianPrivacy)
    (s,) = spec.schedules
    assert (s.noise_std, s.contribution_bound, s.dataset_size, s.batch_size, s.steps) == (3.0, 1.0, 50, 5, 10)
    # per-silo multipliers on the silos: the ISRL-DP per-silo guarantee, each silo its own schedule
    per = _plan(SelectionEvent("without-replacement", (100, 50), 5), NoiseEvent("z", (1.0, 2.0))).spec()
    assert isinstance(per, PerSiloPrivacy)
    assert [(g.schedules[0].noise_std, g.schedules[0].dataset_size) for g in per.silos] == [(2.0, 100), (4.0, 50)]


def test_batch_clipping_selection_refusals():
    sub = SubsetSelectionEvent("shuffle", (100,), 8, num_subsets=2, rounds_per_epoch=6)
    with pytest.raises(ValueError, match="fixed size; the clipper's relation must be 'replace-one', not 'add-remove'"):
        sub.spec(DpPlan(sub, ClipEvent("add-remove", 4), (NoiseEvent("z", 1.0),), 10, label="fam"))
    with pytest.raises(ValueError, match="takes one noise event with one noise multiplier"):
        sub.spec(DpPlan(sub, ClipEvent("replace-one", 4), (NoiseEvent("z", (1.0,)),), 10, label="fam"))
    # units of s = 3 records: m s = 6 != the batch size 8
    with pytest.raises(ValueError, match=r"batch sizes \(8,\) must equal num_subsets\*unit_records=6"):
        sub.spec(DpPlan(sub, ClipEvent("replace-one", 3), (NoiseEvent("z", 1.0),), 10, label="fam"))
