"""ISRL-DP families: what each silo releases, measured from the family's real step, equals what
its ``privacy()`` certifies -- noise std, sensitivity (clip C != 1, batch K > 1), sampling rate
of the sampler that runs (on a padded silo smaller than the padded size), number of releases
(K > 1 local steps, one-pass participation), and the per-silo (local) report at K > 1.

Settings shared by every case: unequal silo sizes with the canary in the smallest silo (the one
``privacy()`` accounts), padded to the largest; clip C = 0.7; noise multiplier z = 0.5; step size
0.5. ``privacy()``'s schedules are in units of one record's contribution to a silo's message
(contribution bound 1, noise std ``z x sensitivity(1)``): every measured noise std and shift is
divided by that contribution, computed here by hand (C/K for a clipped minibatch mean, C for one
clipped gradient or a clipped mean). Measurements and tolerances: ``tests/privacy/pins.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpjax.accounting import compute_epsilon
from dpjax.accounting.schedules import GaussianSchedule
from dpjax.accounting.shuffle import shuffled_gaussian_report
from dpjax.algorithms.accelerated import AcceleratedHParams, AcceleratedMbSgd, AcsaSchedule
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.algorithms.local_sgd import LocalSgd
from dpjax.algorithms.shuffled import ShuffledNoisyMbSgd
from dpjax.algorithms.unbalanced import UnbalancedHParams, UnbalancedNoisyMbSgd
from dpjax.auditing.execute import AutodiffProbe

from .pins import BIG, check_fresh_noise, check_rate, check_shift_values, check_std, increments, keys, probe, silos, trajectory

RUNS = 1500
DIM = 2
C, Z, ETA = 0.7, 0.5, 0.5
SIZES = (7, 10, 12)  # canary silo 0: 7 real rows padded to 12


def _noise_and_shift(family, hp, hp0, sizes, silo=0, seed=0):
    """(pure-noise increments, canary shift D' - D of the increments) of ``family``'s runs."""
    noise = increments(trajectory(family, silos(sizes, DIM), hp, keys(RUNS, seed), DIM))
    plus = increments(trajectory(family, silos(sizes, DIM, +BIG, silo), hp0, keys(RUNS, seed + 1), DIM))
    minus = increments(trajectory(family, silos(sizes, DIM, -BIG, silo), hp0, keys(RUNS, seed + 1), DIM))
    assert np.all(plus[..., 1:] == minus[..., 1:]), "the canary moved a coordinate other than e_1"
    return noise, (plus - minus)[..., 0]


# "auto" takes the dense (gather-free) path here (K >= n_max / 8); "gather" with a problem that has
# no closed-form clipping takes the per-example autodiff path (vmap(grad) + clipped_sum, the path of
# neural networks) on the indices of the Poisson ``draw`` on the padded silo. With-replacement
# batches run in the shuffled family's test below.
@pytest.mark.parametrize("sampling,path", [("without-replacement", "auto"), ("poisson", "gather")])
def test_noisy_mbsgd_releases_what_privacy_certifies(sampling, path):
    """Noisy MB-SGD: round r's mean message is ``-(w_r - w_{r-1}) / eta`` (N = 3 silos, all available)."""
    k, rounds, n = 3, 4, len(SIZES)
    problem = probe(DIM) if path != "gather" else AutodiffProbe(DIM)
    family = NoisyMbSgd(problem, rounds, k, sampling=sampling, gradient_path=path)
    hp = MbSgdHParams.create(ETA, Z, C)
    spec = family.privacy(SIZES, hp).schedule
    assert spec.steps == rounds and spec.dataset_size == min(SIZES)
    noise, shift = _noise_and_shift(family, hp, MbSgdHParams.create(ETA, 0.0, C), SIZES)
    unit = C / k  # one record's contribution to a silo's clipped minibatch mean
    # every silo adds its own N(0, sigma^2 I): the mean over N silos has std sigma / sqrt(N)
    check_std(-noise / ETA * math.sqrt(n) / unit, spec.noise_std, f"{sampling}/{path}: silo noise std / (C/K)")
    check_fresh_noise(noise, f"{sampling}/{path}")
    # silo 0's message moves by 2C/K when the canary is in its batch (k times with replacement)
    mult = check_shift_values(-shift / ETA * n / unit, spec.sensitivity, f"{sampling}/{path}: silo message shift",
                              max_multiple=k if sampling == "with-replacement" else 1)
    if sampling == "with-replacement":  # K i.i.d. draws, each the canary w.p. 1/n: q = K/n is the batch fraction
        check_rate(mult.sum(), mult.size * k, spec.inclusion_probability / k, f"{sampling}/{path}: canary multiplicity")
    else:
        check_rate((mult > 0).sum(), mult.size, spec.inclusion_probability, f"{sampling}/{path}: canary inclusion")


def test_local_sgd_counts_every_local_step():
    """ISRL-DP Local SGD (K = 3 local steps): the message ``w^{i,K}`` carries K noisy clipped
    single-record gradients, so the accounted releases are R K at rate 1/n with sensitivity 2C."""
    k, rounds, sizes = 3, 3, (5, 8)
    family = LocalSgd(probe(DIM), rounds, k)
    hp = MbSgdHParams.create(ETA, Z, C)
    spec = family.privacy(sizes, hp).schedule
    noise, shift = _noise_and_shift(family, hp, MbSgdHParams.create(ETA, 0.0, C), sizes)
    n = len(sizes)
    # w_{r+1} - w_r = -(eta/N) sum_i sum_k (clip(g_ik) + u_ik): K draws of std sigma per silo; one
    # record's contribution to a step is its clipped gradient (C)
    check_std(-noise / ETA * math.sqrt(n / k) / C, spec.noise_std, "local SGD: per-step noise std / C")
    mult = check_shift_values(-shift / ETA * n / C, spec.sensitivity, "local SGD: per-step shift / C", max_multiple=k)
    # each of the spec's R K steps picks the canary w.p. 1/n: the canary's count over a run is
    # Bin(steps, q), so the measured count per run pins steps * q = R K / n
    check_rate(mult.sum(), RUNS * spec.steps, spec.inclusion_probability, "local SGD: canary picks per accounted step")


def test_one_pass_accelerated_uses_each_record_once():
    """One-pass accelerated MB-SGD: R K = n on the canary silo, so the canary is in exactly one
    round (``spec.passes`` = 1); noise / shift in that round is the certified noise multiplier."""
    k, rounds, sizes = 4, 2, (8, 10)
    family = AcceleratedMbSgd(probe(DIM), rounds, k, sampling="one-pass")
    hp = AcceleratedHParams.create(AcsaSchedule.single_stage(rounds, 1.0), Z, C)
    spec = family.privacy(sizes, hp).schedule
    hp0 = AcceleratedHParams.create(AcsaSchedule.single_stage(rounds, 1.0), 0.0, C)
    noise, shift = _noise_and_shift(family, hp, hp0, sizes)
    hits = np.abs(shift) > 1e-3 * np.abs(shift).max()  # float32 cancellation leaves ~1e-8
    assert np.all(hits.sum(axis=1) == spec.passes), "a record was used a number of times other than passes"
    n = len(sizes)
    for r in range(rounds):  # the AC-SA map from gradient to w_ag is affine with a public factor per round
        unit = np.abs(shift[hits[:, r], r])
        assert unit.size and np.allclose(unit, unit[0], rtol=1e-4)
        # noise of the mean over N silos relative to one silo's shift: sigma sqrt(N) / (2C/K)
        check_std(noise[:, r] / unit[0], spec.noise_multiplier * math.sqrt(n), f"one-pass round {r}: noise/shift")


@pytest.mark.parametrize("clip_mode", ["per-example", "minibatch-average"])
def test_unbalanced_silos_each_release_what_their_schedule_says(clip_mode):
    """Algorithm 7: silo i releases with its own K_i and z_i; its schedule in the
    ``PerSiloPrivacy`` must match (contribution C/K_i, or C for minibatch-average clipping)."""
    sizes, batch_sizes, stds, rounds = (5, 9), (2, 3), (0.5, 0.9), 3  # stds: the multipliers z_i
    from dpjax.reproduce.isrl.constructions import InsuranceScriptMbSgd  # clips the minibatch mean

    family_type = UnbalancedNoisyMbSgd if clip_mode == "per-example" else InsuranceScriptMbSgd
    family = family_type(probe(DIM), rounds, batch_sizes)
    specs = family.privacy(sizes, UnbalancedHParams.create(ETA, stds, C)).silos
    n = len(sizes)
    for i in range(n):
        spec = specs[i].schedule
        alone = [s if j == i else 0.0 for j, s in enumerate(stds)]  # only silo i adds noise
        noise, shift = _noise_and_shift(family, UnbalancedHParams.create(ETA, alone, C),
                                        UnbalancedHParams.create(ETA, [0.0] * n, C), sizes, silo=i, seed=10 * i)
        assert spec.dataset_size == sizes[i] and spec.steps == rounds
        unit = C / batch_sizes[i] if clip_mode == "per-example" else C  # one record's contribution
        check_std(-noise / ETA * n / unit, spec.noise_std, f"{clip_mode}: silo {i} noise std / contribution")
        mult = check_shift_values(-shift / ETA * n / unit, spec.sensitivity, f"{clip_mode}: silo {i} shift")
        check_rate((mult > 0).sum(), mult.size, spec.inclusion_probability, f"{clip_mode}: silo {i} inclusion")


def test_shuffled_mbsgd_local_report_at_k_above_one():
    """Shuffled Noisy MB-SGD with K = 2 records per report: the per-silo (local) guarantee is R
    with-replacement Gaussian releases with contribution C/K, measured from the step; the report's
    ``local`` epsilon is that schedule's (the plan's Gaussian rules without the shuffler)."""
    k, rounds, sizes = 2, 3, (6, 9)
    n = len(sizes)
    family = ShuffledNoisyMbSgd(probe(DIM), rounds, num_available=n, batch_size=k)
    hp = MbSgdHParams.create(ETA, Z, C)
    spec = family.dp_plan(sizes, hp).gaussian_spec().schedule
    noise, shift = _noise_and_shift(family, hp, MbSgdHParams.create(ETA, 0.0, C), sizes)
    unit = C / k  # one record's contribution to a silo's clipped minibatch mean
    check_std(-noise / ETA * math.sqrt(n) / unit, spec.noise_std, "shuffled: silo noise std / (C/K)")
    mult = check_shift_values(-shift / ETA * n / unit, spec.sensitivity, "shuffled: silo shift", max_multiple=k)
    check_rate(mult.sum(), mult.size * k, spec.inclusion_probability / k, "shuffled: canary multiplicity")
    f32 = lambda v: float(np.float32(v))  # noqa: E731  (hparams hold float32 values)
    measured = GaussianSchedule(2 * f32(Z), 1.0, "with-replacement", min(sizes), k, rounds,  # std z 2 (C/K) / (C/K)
                                unit="record-in-silo")
    assert spec == measured
    plan = family.dp_plan(sizes, hp)
    report = shuffled_gaussian_report(plan, plan.aggregation, 1e-5)  # what privacy().epsilon reports centrally
    assert family.privacy(sizes, hp).epsilon(1e-5, "shuffle-tight").epsilon == report.central.epsilon
    assert report.local.epsilon == pytest.approx(compute_epsilon(measured, 1e-5, "rdp").epsilon, rel=1e-9)
    # the central guarantee never exceeds the silos' local one (ISRL-DP => central DP)
    assert report.central.epsilon <= report.local.epsilon * (1 + 1e-9)
