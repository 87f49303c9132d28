"""Every family's run as a ``dp_accounting.DpEvent`` (``privacy(...).dp_event()``): dp_accounting's own
``RdpAccountant``, composing that event under ``dp_neighboring_relation``, gives dpjax's RDP epsilon, and
``dp_accounting.calibrate_dp_mechanism`` on ``dp_event_at(scale)`` finds dpjax's calibrated noise.

The equalities are exact up to float summation order (rel 1e-9): where dpjax's RDP is dp_accounting's
(Poisson add/remove, without-replacement, unsampled Gaussians, tree aggregation) the two compute the same
curve. Mechanisms no DpEvent expresses answer ``UnsupportedDpEvent``, non-private twins
``NonPrivateDpEvent``.
"""

from __future__ import annotations

import dp_accounting
import pytest
from dp_accounting import mechanism_calibration as mc
from dp_accounting.rdp import RdpAccountant

from dpjax.accounting.privacy_spec import PerSiloPrivacy, TreeAggregationPrivacy
from dpjax.accounting.tight import rdp_orders
from dpjax.algorithms.diff2 import Diff2GD, Diff2HParams
from dpjax.algorithms.dp_fedavg import DpFedAvg, FedAvgHParams
from dpjax.algorithms.dp_ftrl import DpFtrl, FtrlHParams
from dpjax.algorithms.dp_scaffold import DpScaffold, ScaffoldHParams
from dpjax.algorithms.dp_sgd import DpSgd
from dpjax.algorithms.dpsgd_general import DpSgdHParams
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.algorithms.local_sgd import LocalSgd
from dpjax.algorithms.shuffled import ShuffledNoisyMbSgd
from dpjax.algorithms.unbalanced import UnbalancedHParams, UnbalancedNoisyMbSgd
from dpjax.problems import LinearRegression

pytestmark = pytest.mark.privacy

P = LinearRegression(3)
DELTA = 1e-5
SIZES = (40, 48, 44, 52, 40, 60)

# name -> (family, hparams): the Gaussian-rules families, each with the samplings it is certified under
GAUSSIAN = {
    "isrl-mbsgd wor": (NoisyMbSgd(P, 30, 8, sampling="without-replacement"), MbSgdHParams.create(0.1, 1.5, 1.0)),
    "isrl-mbsgd poisson add/remove": (NoisyMbSgd(P, 30, 8, sampling="poisson", neighboring="add-remove",
                                                 sampling_rate=0.2), MbSgdHParams.create(0.1, 1.5, 1.0)),
    "isrl-local-sgd": (LocalSgd(P, 12, 3), MbSgdHParams.create(0.1, 4.0, 1.0)),
    "dp-sgd poisson": (DpSgd(P, 50, 4, sampling="poisson", neighboring="add-remove", sampling_rate=0.1),
                       DpSgdHParams.create(0.5, 1.1, 0.6)),
    "diff2-gd (composed)": (Diff2GD(P, 12), Diff2HParams.create(0.1, restart_interval=3, noise_multiplier_restart=3.0,
                                                                noise_multiplier_diff=6.0)),
    "dp-fedavg (joint Gaussian)": (DpFedAvg(P, 20, 2, local_steps=2, sampling_rate=2 / len(SIZES)),
                                   FedAvgHParams.create(0.5, noise_multiplier=0.8, noise_multiplier_count=2.0,
                                                        clip_norm=0.5)),
    "dp-scaffold": (DpScaffold(P, 20, 2, 2, 4), ScaffoldHParams.create(1.0, 0.1, 0.8)),
    "dp-ftrl (tree aggregation)": (DpFtrl(P, 13, 8), FtrlHParams.create(0.5, 0.7, 1.0)),
}


def _rdp_epsilon_of(event, relation) -> float:
    accountant = RdpAccountant(orders=list(rdp_orders()), neighboring_relation=relation)
    return accountant.compose(event).get_epsilon(DELTA)


@pytest.mark.parametrize("name", list(GAUSSIAN))
def test_dp_accounting_on_the_run_event_gives_dpjax_epsilon(name):
    family, hp = GAUSSIAN[name]
    spec = family.privacy(SIZES, hp)
    event = spec.dp_event()
    assert not isinstance(event, (dp_accounting.UnsupportedDpEvent, dp_accounting.NonPrivateDpEvent))
    ours = spec.epsilon(DELTA, "rdp").epsilon
    assert 0 < ours < 1e3
    assert _rdp_epsilon_of(event, spec.dp_neighboring_relation) == pytest.approx(ours, rel=1e-9)


def test_dp_ftrl_event_is_dp_accountings_restarted_tree():
    """13 rounds of 5-round epochs (n_min = 40, B = 8): trees of 5, 5 and 3 leaves, each
    SingleEpochTreeAggregationDpEvent under REPLACE_SPECIAL (Kairouz et al. 2021, Appendix D)."""
    family, hp = GAUSSIAN["dp-ftrl (tree aggregation)"]
    spec = family.privacy(SIZES, hp)
    assert isinstance(spec, TreeAggregationPrivacy) and spec.step_counts == (5, 5, 3)
    assert spec.tree_counts == ((5, 2), (3, 1))  # the closed form: one entry per tree size
    event = spec.dp_event()
    (fives, three) = event.events
    assert (fives.count, fives.event.step_counts, three.step_counts) == (2, 5, 3)
    assert spec.dp_neighboring_relation is dp_accounting.NeighboringRelation.REPLACE_SPECIAL
    # the same releases as the Gaussian rules' count: depth 3 + 3 + 2 unsampled Gaussians
    assert spec.schedule.steps == 8


@pytest.mark.parametrize("name", ["isrl-mbsgd wor", "dp-sgd poisson", "diff2-gd (composed)"])
def test_calibrate_dp_mechanism_on_dp_event_at_finds_dpjax_calibration(name):
    """dp_accounting's calibration over the noise scale of ``dp_event_at`` and dpjax's own (which also
    never overshoots dpjax's reported epsilon, PLD and group privacy included) agree to their tolerances."""
    family, hp = GAUSSIAN[name]
    spec = family.privacy(SIZES, hp)
    target = 2.0
    ours = spec.calibrate(target, DELTA, "rdp")
    scale = mc.calibrate_dp_mechanism(
        lambda: RdpAccountant(orders=list(rdp_orders()), neighboring_relation=spec.dp_neighboring_relation),
        spec.dp_event_at, target, DELTA, mc.LowerEndpointAndGuess(1e-3, 1.0), tol=1e-7)
    for field, value in ours.items():
        assert value == pytest.approx(float(getattr(hp, field)) * scale, rel=2e-3 if len(ours) > 1 else 1e-5), field
    assert _rdp_epsilon_of(spec.dp_event_at(scale), spec.dp_neighboring_relation) <= target


def test_per_silo_events_are_each_silos_own():
    family = UnbalancedNoisyMbSgd(P, 20, (4, 6))
    spec = family.privacy((40, 90), UnbalancedHParams.create(0.1, [2.0, 3.0], 1.0))
    assert isinstance(spec, PerSiloPrivacy)
    worst = max(_rdp_epsilon_of(spec.dp_event(i), spec.dp_neighboring_relation) for i in range(2))
    assert worst == pytest.approx(spec.epsilon(DELTA, "rdp").epsilon, rel=1e-9)
    with pytest.raises(ValueError, match="silo=2"):
        spec.dp_event(2)


def test_mechanisms_without_a_dp_event_and_twins_say_so():
    shuffled = ShuffledNoisyMbSgd(P, 10, 2, batch_size=1).privacy([100, 120] * 10, MbSgdHParams.create(0.1, 2, 1))
    assert isinstance(shuffled.dp_event(), dp_accounting.UnsupportedDpEvent)  # shuffle amplification
    fixed = DpSgd(P, 20, 4, sampling="without-replacement", neighboring="replace-one")
    assert isinstance(fixed.privacy(SIZES, DpSgdHParams.create(0.5, 3.0, 0.6)).dp_event(),  # f-DP, strong adversary
                      dp_accounting.UnsupportedDpEvent)
    twin = NoisyMbSgd(P, 10, 4, private=False).privacy(SIZES, MbSgdHParams.create(0.1))
    assert isinstance(twin.dp_event(), dp_accounting.NonPrivateDpEvent)
    with pytest.raises(ValueError, match="scale"):
        GAUSSIAN["dp-sgd poisson"][0].privacy(SIZES, GAUSSIAN["dp-sgd poisson"][1]).dp_event_at(0.0)


def test_plan_event_is_the_parts_events_composed_and_drives_epsilon():
    """``DpPlan.dp_event()`` is built from the parts' events (each noise event's Gaussian wrapped by the batch
    selection, at the smallest silo), and that object is what the RDP and PLD accountants compose."""
    import dataclasses

    from dpjax.accounting.events import ClipEvent, DpPlan, NoiseEvent, SelectionEvent

    sel = SelectionEvent("poisson", (40, 30, 50), 5, sampling_rate=0.1)
    plan = DpPlan(sel, ClipEvent("add-remove"), (NoiseEvent("a", 1.5), NoiseEvent("b", 3.0, steps=4)), num_rounds=6)
    dpa = dp_accounting
    a, b = (dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(z)), n)
            for z, n in ((1.5, 6), (3.0, 4)))
    assert plan.dp_event() == dp_accounting.ComposedDpEvent([a, b])
    spec = plan.gaussian_spec()
    assert spec.events == (a, b)
    ar = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    assert spec.epsilon(DELTA, "rdp").epsilon == pytest.approx(_rdp_epsilon_of(plan.dp_event(), ar), rel=1e-9)
    # the events, not the schedules, decide: the same schedules with the second release's event replaced by the first's
    swapped = dataclasses.replace(spec, events=(a, a))
    assert swapped.epsilon(DELTA, "rdp").epsilon == pytest.approx(
        _rdp_epsilon_of(dp_accounting.ComposedDpEvent([a, a]), ar), rel=1e-9)
    # unsampled releases of a group of 2: the group folded into the Gaussian (z / g), a record in every round; the
    # PLD reads the events too (mu^2 adds: 5 / 1.5^2 + 4 / 3^2 against 10 / 1.5^2 with the first event twice)
    full = DpPlan(SelectionEvent("full", (30,), None), ClipEvent(), (NoiseEvent("a", 3.0), NoiseEvent("b", 6.0, steps=4)),
                  num_rounds=5, group_size=2)
    c, d = dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(1.5), 5), dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(3.0), 4)
    assert full.dp_event() == dpa.ComposedDpEvent([c, d])
    unsampled = full.gaussian_spec()
    assert dataclasses.replace(unsampled, events=(c, c)).epsilon(DELTA, "pld").epsilon > \
        unsampled.epsilon(DELTA, "pld").epsilon


def test_single_multiplier_calibration_is_dp_accountings_calibrate_dp_mechanism(monkeypatch):
    """One Gaussian schedule under 'rdp', where dpjax's RDP is dp_accounting's RdpAccountant on its event (unsampled,
    one-pass, Poisson add/remove): ``calibrate_dp_mechanism`` finds the noise; it meets the target on dpjax's report
    and a std smaller by the documented tolerance does not. Poisson under replace-one (dpjax's conditioned bound, no
    dp_accounting RDP) keeps dpjax's search."""
    from dpjax.accounting import api
    from dpjax.accounting.schedules import GaussianSchedule

    calls = []
    real = mc.calibrate_dp_mechanism
    monkeypatch.setattr(mc, "calibrate_dp_mechanism", lambda *a, **k: calls.append(a) or real(*a, **k))
    for s in (GaussianSchedule(1.0, 1.0, "full", 100, None, 30), GaussianSchedule(1.0, 1.0, "one-pass", 100, 10, 25)):
        std = api.calibrate_noise(s, 1.5, DELTA, "rdp")
        assert len(calls) == 1
        assert api.compute_epsilon(s.replace(noise_std=std), DELTA, "rdp").epsilon <= 1.5
        smaller = std / (1 + 2 * api.CALIBRATION_RTOL)
        assert _rdp_epsilon_of(s.replace(noise_std=smaller).to_dp_event(), s.dp_neighboring_relation) > 1.5
        calls.clear()
    conditioned = GaussianSchedule(4.0, 1.0, "poisson", 100, 10, 5, neighboring="replace-one")
    api.calibrate_noise(conditioned, 1.5, DELTA, "rdp")
    assert not calls


def test_scaled_event_scales_every_gaussian_and_refuses_what_it_cannot():
    from dpjax.accounting.privacy_spec import scaled_event

    dpa = dp_accounting
    event = dpa.ComposedDpEvent([dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(2.0)), 3),
                                 dpa.SampledWithoutReplacementDpEvent(10, 2, dpa.GaussianDpEvent(1.0))])
    assert scaled_event(event, 1.5) == dpa.ComposedDpEvent([
        dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(3.0)), 3),
        dpa.SampledWithoutReplacementDpEvent(10, 2, dpa.GaussianDpEvent(1.5))])
    assert scaled_event(dpa.NonPrivateDpEvent(), 2.0) == dpa.NonPrivateDpEvent()
    with pytest.raises(ValueError, match="no noise multiplier to scale"):
        scaled_event(dpa.SingleEpochTreeAggregationDpEvent(1.0, 4), 2.0)
