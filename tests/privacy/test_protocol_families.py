"""Shuffle-model and gradient-difference families (``shuffle-sgd``, ``shuffle-acsa``,
``sdp-accelerated``, ``diff2-gd``, ``dp-gd``, ``diff2-bvr``): the noise of the released statistic
and a record's (user's) contribution, measured from each family's real step, equal what its
``privacy()`` certifies. Measurements and tolerances: ``tests/privacy/pins.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpjax.accounting import gdp
from dpjax.algorithms.accelerated import AcsaSchedule
from dpjax.algorithms.diff2 import Diff2BvrLSgd, Diff2GD, Diff2HParams
from dpjax.algorithms.shuffle_sco import ScoHParams, ShuffleAcsa, ShuffleSgd
from dpjax.algorithms.shuffled import SdpHParams, SdpOnePassAccelerated
from dpjax.auditing.execute import DifferenceProbe
from dpjax.primitives.shuffle_protocols import PvecParams

from .pins import BIG, check_shift_values, check_std, increments, keys, probe, silos, trajectory

RUNS = 1500
DIM = 2
DELTA = 1e-5


# ----------------------------------------------------------------------------- shuffle SCO
def _sco(cls, aggregator, hp_kw, n=12, batch=4, rounds=3, step=0.5, clip=0.8, **kw):
    family = cls(probe(DIM), rounds, batch, aggregator=aggregator, projection_radius=None, **kw)
    hp = ScoHParams.single_phase(rounds, batch, step, clip_norm=clip, **hp_kw)
    hp0 = ScoHParams.single_phase(rounds, batch, step, clip_norm=clip, interactive=hp_kw.get("interactive", 0),
                                  **({"pvec": PvecParams(hp_kw["pvec"].granularity, 0, 0.0)} if "pvec" in hp_kw
                                     else {}))
    noise = increments(trajectory(family, silos((n,), DIM), hp, keys(RUNS), DIM))
    plus = increments(trajectory(family, silos((n,), DIM, +BIG), hp0, keys(RUNS, 1), DIM))
    minus = increments(trajectory(family, silos((n,), DIM, -BIG), hp0, keys(RUNS, 1), DIM))
    return family, hp, noise, (plus - minus)[..., 0]


@pytest.mark.parametrize("interactive", [0, 1], ids=["fresh-users", "fully-interactive"])
def test_shuffle_sgd_central_gaussian(interactive):
    """P_SGD's / P_GD's Gaussian baseline: the round's sum of the users' (ball-projected) gradients
    plus N(0, noise_std^2 I), divided by the public batch B. Fresh users: the canary user (row 0) is
    in round 0 only; fully interactive: the same users every round, so the canary is in all R
    rounds and the certificate composes R Gaussians (mu = sqrt(R) 2L / std)."""
    family, hp, noise, shift = _sco(ShuffleSgd, "central-gaussian", {"noise_std": 0.7, "interactive": interactive},
                                    output="last")
    report = family.privacy([12], hp).epsilon(DELTA, "gdp")
    scale = 4 / 0.5  # B / eta
    check_std(-noise * scale, report.noise_std, "central-gaussian: noise std on the users' sum")
    mult = check_shift_values(-shift * scale, 2 * 0.8, "central-gaussian: canary user shift (2L)")
    uses = mult.sum(axis=1)
    assert np.all(uses == (3 if interactive else 1)) and np.all(mult[:, 0] == 1)
    assert report.epsilon == pytest.approx(gdp.gdp_epsilon(math.sqrt(uses.max()) * 2 * 0.8 / 0.7, DELTA), rel=1e-6)


def test_shuffle_sgd_pvec_noise_and_user_contribution():
    """P_vec (count level): the analyzer's sum carries (2L/g) centred Bin(B b, p) per coordinate,
    i.e. the report's per-user std times sqrt(B); a user at the range ends moves the sum by 2L."""
    pvec = PvecParams(granularity=4, trials=400, probability=0.3)  # Lemma 3.1 needs b B p >~ 200
    family, hp, noise, shift = _sco(ShuffleSgd, "pvec", {"pvec": pvec}, rounds=2, output="last", max_granularity=8)
    report = family.report(hp, DELTA)
    scale = 4 / 0.5
    check_std(-noise * scale / math.sqrt(4), report.central.noise_std, "pvec: per-user noise std")
    mult = check_shift_values(-shift * scale, 2 * 0.8, "pvec: canary user shift (2L)")
    assert np.all(mult.sum(axis=1) == 1)


def test_shuffle_acsa_pan_private_draws_twice():
    """Pan-private AC-SA (Algorithm 6): two independent N(0, zeta^2 I) draws on the batch sum; the
    certificate (Lemma C.4) credits one of them, so the measured noise / shift is sqrt(2) zeta / 2L."""
    family, hp, noise, shift = _sco(ShuffleAcsa, "pan-gaussian", {"noise_std": 0.9})
    report = family.privacy([12], hp).epsilon(DELTA, "pan-analytic")
    unit = np.abs(shift[:, 0])
    assert np.allclose(unit, unit[0], rtol=1e-4)  # round 0 (later AC-SA increments carry momentum)
    check_std(noise[:, 0] / unit[0], math.sqrt(2) * report.noise_std / (2 * 0.8), "pan-gaussian: noise / shift")
    assert report.epsilon == pytest.approx(gdp.gaussian_mechanism_epsilon(report.noise_std, 2 * 0.8, DELTA))


# ----------------------------------------------------------------------------- SDP one-pass (P_vec)
def test_sdp_one_pass_pvec_noise_relative_to_a_record():
    """Algorithm 6 of Lowy & Razaviyayn: P_vec over the M K vectors of a round, divided by M K.
    Noise / one record's shift = sqrt(m b p (1 - p)) / g with m = the report's ``min_vectors``;
    each record (R K = n on the canary silo) is used in exactly one round."""
    sizes, k, rounds, clip = (4, 6), 2, 2, 0.8
    family = SdpOnePassAccelerated(probe(DIM), rounds, k)
    sched = AcsaSchedule.single_stage(rounds, 1.0)
    hp = SdpHParams.create(sched, PvecParams(granularity=4, trials=400, probability=0.3), clip_norm=clip)
    hp0 = SdpHParams.create(sched, PvecParams(granularity=4, trials=0, probability=0.0), clip_norm=clip)
    report = family.privacy_report(min(sizes), len(sizes), hp, DELTA)
    noise = increments(trajectory(family, silos(sizes, DIM), hp, keys(RUNS), DIM))
    plus = increments(trajectory(family, silos(sizes, DIM, +BIG), hp0, keys(RUNS, 1), DIM))
    minus = increments(trajectory(family, silos(sizes, DIM, -BIG), hp0, keys(RUNS, 1), DIM))
    shift = (plus - minus)[..., 0]
    hits = np.abs(shift) > 1e-3 * np.abs(shift).max()  # float32 cancellation leaves ~1e-8
    assert np.all(hits.sum(axis=1) == 1), "one pass: each record in exactly one round"
    m = report.details["min_vectors"]
    for r in range(rounds):
        unit = np.abs(shift[hits[:, r], r])
        assert unit.size and np.allclose(unit, unit[0], rtol=1e-4)
        check_std(noise[:, r] / unit[0], report.central.noise_std * m / (2 * clip), f"P_vec round {r}: noise/shift")


# ----------------------------------------------------------------------------- DIFF2
@pytest.mark.parametrize("restart_every_round", [False, True], ids=["diff2-gd", "dp-gd"])
def test_diff2_rounds_release_what_their_schedules_say(restart_every_round):
    """DIFF2-GD (T = 2, R = 5: restart rounds 1, 3, 5 and difference rounds 2, 4) and DP-GD:
    restart rounds add N(0, (sigma1 C1)^2), difference rounds N(0, (sigma2 C2 ||x_{r-1} - x_{r-2}||)^2)
    to the estimator; one record of the smallest silo moves the server mean by radius / (n P).
    In radius units both are the schedules' noise std and contribution."""
    sizes, rounds, eta = (4, 6), 5, 1.0
    c1, c2, s1, s2 = 0.6, 0.8, 0.5, 0.7
    family = Diff2GD(DifferenceProbe(), rounds, restart_every_round=restart_every_round, output="last")
    hp = Diff2HParams.create(eta, 2, c1, c2, s1, s2)
    schedules = family.privacy(sizes, hp).schedules
    traj, metrics = trajectory(family, silos(sizes, 1), hp, keys(RUNS), 1, metrics=True)
    restart = np.asarray(metrics["restart"])
    assert np.all(restart == restart[0])
    restart = restart[0].astype(bool)
    assert restart.sum() == schedules[0].steps and (~restart).sum() == rounds - schedules[0].steps
    assert len(schedules) == (1 if restart.all() else 2)
    v = -increments(traj)[..., 0] / eta  # the released estimators v~_r
    radius = c2 * np.abs(np.diff(traj[..., 0], axis=1, prepend=traj[:, :1, 0]))[:, :-1]  # C2 |x_{r-1} - x_{r-2}|
    check_std(v[:, restart] / c1, schedules[0].noise_std, "restart rounds: noise / C1")
    if not restart.all():
        dv = np.diff(v, axis=1, prepend=0.0)
        check_std(dv[:, ~restart] / radius[:, ~restart], schedules[1].noise_std, "difference rounds: noise / radius")
    # contribution: canary (x = BIG, y = 1) vs a zero record, noise off
    hp0 = Diff2HParams.create(eta, 2, c1, c2, 0.0, 0.0)
    d1, d0 = (trajectory(family, silos(sizes, 1, canary, label=1.0), hp0, keys(4, 3), 1)[0, :, 0]
              for canary in (BIG, 0.0))
    assert np.all(d0 == 0)
    v1 = -np.diff(d1) / eta
    rad = np.where(restart, c1, c2 * np.abs(np.diff(d1, prepend=d1[0])[:-1]))
    dv1 = np.where(restart, v1, np.diff(v1, prepend=0.0))
    for r in range(rounds):
        which = schedules[0] if restart[r] else schedules[1]
        assert abs(dv1[r]) / rad[r] == pytest.approx(which.contribution_bound, rel=1e-4), f"round {r + 1}"


def test_diff2_bvr_local_step_noise():
    """DIFF2-BVR-L-SGD's local step: N(0, (sigma3 C3 ||x_1 - x_0||)^2) on the local estimator,
    i.e. the local schedule's noise std in radius units; K - 1 local steps per round are counted
    K ceil(R / P) times per silo by the paper's count."""
    sizes, eta, c3, s3 = (4, 6), 1.0, 0.5, 0.6
    family = Diff2BvrLSgd(DifferenceProbe(), 1, local_steps=2, batch_size=2, output="last")
    noisy = Diff2HParams.create(eta, 1, 2.0, 1.0, 0.0, 0.0, c3, s3)
    schedule = family.privacy(sizes, noisy).schedules[-1]
    assert schedule.steps == 2 * math.ceil(1 / len(sizes)) and schedule.contribution_bound == pytest.approx(1 / 2)
    data = silos(sizes, 1, 1.0, fill=1.0, label=1.0)  # every record x = 1, y = 1: gradient 1 at w = 0
    a = trajectory(family, data, noisy, keys(RUNS), 1)
    b = trajectory(family, data, Diff2HParams.create(eta, 1, 2.0, 1.0, 0.0, 0.0, c3, 0.0), keys(RUNS), 1)
    # v1 = 1 (unclipped, C1 = 2), x1 = -eta, local radius C3 |x1 - x0| = C3 eta; x_last = x1 - eta v
    radius = c3 * eta
    check_std((a[:, 1, 0] - b[:, 1, 0]) / eta / radius, schedule.noise_std, "BVR local step: noise / radius")
