"""Branches of the paper accountants' plan checks reached by tests that can fail (issue 42, item 1): an accountant
handed a run its analysis does not cover (no shuffler for P_vec, add/remove for a replace-one chain, two noise
events for one Gaussian, a rate-less user-level selection) must refuse by name rather than certify it.

The plans are minimal stand-ins carrying only the fields each check reads; the user-level group epsilon is
recomputed from dp_accounting with the Binomial(g, q) mixture weights computed here.
"""

from __future__ import annotations

import math
import types

import dp_accounting
import pytest

from dpjax.accounting import pvec, sco_transcript, shuffle, user_dpsgd
from dpjax.accounting.events import NoiseEvent, Placement
from dpjax.accounting.schedules import Neighboring, Sampling

pytestmark = pytest.mark.privacy

NS = types.SimpleNamespace
REPLACE, ADD = NS(neighboring=Neighboring.REPLACE_ONE), NS(neighboring=Neighboring.ADD_REMOVE)


def _plan(**kw):
    base = dict(label="Fam", aggregation=NS(min_reports=2), clip=REPLACE, num_rounds=2,
                selection=NS(sampling=Sampling.ONE_PASS, batch_sizes=(4,), dataset_sizes=(10, 12)),
                noises=(NoiseEvent("noise_multiplier", 1.0),))
    return NS(**(base | kw))


def test_pvec_setting_refuses_what_its_analysis_does_not_cover():
    assert pvec._pvec_setting(_plan(), None) == (8, 10)  # m = min reports x K, n = the smallest silo
    with pytest.raises(ValueError, match=r"Fam: P_vec needs a shuffler between the silos and the analyzer"):
        pvec._pvec_setting(_plan(aggregation=None), None)
    with pytest.raises(ValueError, match=r"neighboring='add-remove': the P_vec analysis is replace-one"):
        pvec._pvec_setting(_plan(clip=ADD), None)
    with pytest.raises(ValueError, match=r"sampling='without-replacement': the P_vec run is one pass"):
        pvec._pvec_setting(_plan(selection=NS(sampling=Sampling.WITHOUT_REPLACEMENT, batch_sizes=(4,),
                                              dataset_sizes=(10,))), None)


def test_shuffle_chain_takes_one_silo_gaussian_under_replace_one():
    assert shuffle._one_gaussian(_plan()).noise_multiplier == 1.0
    with pytest.raises(ValueError, match=r"Fam: the shuffle chain analyses one Gaussian noise event per report"):
        shuffle._one_gaussian(_plan(noises=(NoiseEvent("a", 1.0), NoiseEvent("b", 1.0))))
    with pytest.raises(ValueError, match=r"Fam: the shuffle chain needs one noise multiplier, added by every silo"):
        shuffle._one_gaussian(_plan(noises=(NoiseEvent("a", 1.0, Placement.SERVER),)))
    with pytest.raises(ValueError, match=r"neighboring='add-remove': the shuffle chain is a replace-one analysis"):
        shuffle._one_gaussian(_plan(clip=ADD))


def test_transcript_report_needs_a_certifying_event():
    with pytest.raises(ValueError, match=r"Fam: NoiseEvent certifies nothing; there is no report"):
        sco_transcript.transcript_report(_plan(), 1e-5)


def test_user_level_dp_sgd_selection_and_spec_refusals():
    with pytest.raises(ValueError, match=r"sampling_rate=None: user-level DP-SGD samples at a declared public rate"):
        user_dpsgd.UserSelectionEvent(Sampling.POISSON, (5, 5), 2)
    sel = user_dpsgd.UserSelectionEvent(Sampling.POISSON, (5, 5), 2, sampling_rate=0.1, level="example",
                                        records_per_user=2)
    with pytest.raises(ValueError, match=r"Fam: user-level DP-SGD's bound is stated for add/remove"):
        sel.spec(_plan(clip=REPLACE))
    with pytest.raises(ValueError, match=r"Fam: user-level DP-SGD takes one noise event with one noise multiplier"):
        sel.spec(_plan(clip=ADD, noises=(NoiseEvent("z", (1.0, 2.0)),)))
    with pytest.raises(ValueError, match=r"Fam: example-level sampling clips every record \(unit_records=1\), got "
                                         r"unit_records=3"):
        sel.spec(_plan(clip=NS(neighboring=Neighboring.ADD_REMOVE, unit_records=3)))


def test_user_level_group_epsilon_is_the_binomial_mixture_pld():
    z, q, steps, g, delta = 1.2, 0.05, 3, 2, 1e-5
    spec = user_dpsgd.UserDpSgdPrivacy("user", z, q, steps, group_size=g, pld_interval=1e-2)  # coarse: fast
    rep = spec.epsilon(delta, "pld")
    assert "group of 2 users" in rep.notes
    # a group of g users under Poisson sampling: the mixture of shifts 0..g weighted by Binomial(g, q), by hand
    weights = tuple(math.comb(g, b) * q**b * (1 - q) ** (g - b) for b in range(g + 1))
    acc = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                          value_discretization_interval=1e-2)
    acc.compose(dp_accounting.dp_event.MixtureOfGaussiansDpEvent(z, (0.0, 1.0, 2.0), weights), steps)
    assert rep.epsilon == pytest.approx(acc.get_epsilon(delta), rel=1e-9)
    with pytest.raises(ValueError, match=r"accountant='rdp' has no rule for SelfComposedDpEvent; use 'pld'"):
        user_dpsgd.epsilon_of_event(spec.dp_event(), delta, "rdp")


def test_round_windows_phases_and_their_refusals():
    rw = sco_transcript.RoundWindows.of([0, 4, 0, 0], [4, 4, 2, 2], [1, 2, 1, 2])
    # by hand: phase 1 = rounds 0-1, start advancing by the batch (fresh users); phase 2 = rounds 2-3, start fixed
    assert [(p.first, p.rounds, p.fresh) for p in rw.phases()] == [(0, 2, True), (2, 2, False)]
    with pytest.raises(ValueError, match=r"hparams holds schedules of shapes \[\(2,\), \(2,\), \(3,\)\]"):
        sco_transcript.RoundWindows.of([0, 1], [1, 1], [1, 2, 3])
    with pytest.raises(ValueError, match=r"hparams.stage_round must open a phase \(1\) at round 0"):
        sco_transcript.RoundWindows.of([0, 1], [1, 1], [2, 3]).phases()
    with pytest.raises(ValueError, match=r"hparams.start must either advance by the batch"):
        sco_transcript.RoundWindows.of([0, 1, 5], [4, 4, 4], [1, 2, 3]).phases()


def test_shuffled_gaussian_report_needs_one_batch_size_and_record_sampling():
    event = shuffle.ShuffleEvent(2, 2, "hidden", True)
    two_sizes = NS(sampling=Sampling.WITHOUT_REPLACEMENT, batch_sizes=(4, 5), dataset_sizes=(10, 12))
    with pytest.raises(ValueError, match=r"batch_sizes=\(4, 5\): the shuffle chain needs one batch size K"):
        shuffle.shuffled_gaussian_report(_plan(selection=two_sizes), event, 1e-5)
    with pytest.raises(ValueError, match=r"sampling='one-pass': the shuffle chain analyses minibatches drawn with or "
                                         r"without replacement"):
        shuffle.shuffled_gaussian_report(_plan(), event, 1e-5)  # K = 4 in one pass: not a random minibatch
