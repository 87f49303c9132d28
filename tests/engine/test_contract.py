"""The one algorithm contract: every family implements it, privacy() is the one privacy method."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import accounting
from dpjax.accounting.privacy_spec import GaussianPrivacy, NoPrivacy, PerSiloPrivacy, gaussian
from dpjax.algorithms import MbSgdHParams, NoisyMbSgd
from dpjax.algorithms.accelerated import AcceleratedHParams, AcceleratedMbSgd, AcsaSchedule
from dpjax.algorithms.diff2 import Diff2BvrLSgd, Diff2GD, Diff2HParams
from dpjax.algorithms.local_sgd import LocalSgd
from dpjax.algorithms.shuffled import SdpHParams, SdpOnePassAccelerated, ShuffledNoisyMbSgd
from dpjax.algorithms.unbalanced import UnbalancedHParams, UnbalancedNoisyMbSgd
from dpjax.engine.contract import Algorithm, FamilyBase, check_sampling_relation, hparam_fields, static_fields
from dpjax.problems import LinearRegression

PROBLEM = LinearRegression(3)
DELTA = 1e-5
SIZES = [100, 120] * 10  # 20 silos (P_vec needs enough inputs per round for Lemma 3.1)


def _families():
    """(algorithm, hparams) pairs, one per family (private versions)."""
    mb = MbSgdHParams.create(0.1, 2.0, 1.0)
    acsa = AcceleratedHParams.create(AcsaSchedule.single_stage(10, 1.0), noise_multiplier=2.0, clip_norm=1.0)
    d2 = Diff2HParams.create(0.1, restart_interval=3, noise_multiplier_restart=3.0, noise_multiplier_diff=6.0,
                             noise_multiplier_local=4.0)
    sdp_alg = SdpOnePassAccelerated(PROBLEM, 10, 4)
    sdp = SdpHParams.create(AcsaSchedule.single_stage(10, 1.0), sdp_alg.pvec_params_for(len(SIZES), 3.0, DELTA), 1.0)
    return [
        (NoisyMbSgd(PROBLEM, 10, 4), mb),
        (LocalSgd(PROBLEM, 10, 4), mb),
        (AcceleratedMbSgd(PROBLEM, 10, 4), acsa),
        (UnbalancedNoisyMbSgd(PROBLEM, 10, (4, 5)), UnbalancedHParams.create(0.1, [2.0, 3.0], 1.0)),
        (ShuffledNoisyMbSgd(PROBLEM, 10, 2, batch_size=1), mb),
        (sdp_alg, sdp),
        (Diff2GD(PROBLEM, 10), d2),
        (Diff2BvrLSgd(PROBLEM, 10, local_steps=3, batch_size=4), d2),
    ]


@pytest.mark.parametrize("algorithm,hparams", _families(), ids=lambda x: type(x).__name__)
def test_every_family_implements_the_contract(algorithm, hparams):
    assert isinstance(algorithm, Algorithm)
    assert isinstance(algorithm, FamilyBase)
    assert isinstance(hparams, algorithm.hparams_type)
    sizes = SIZES[:2] if isinstance(algorithm, UnbalancedNoisyMbSgd) else SIZES  # one size per K_i
    spec = algorithm.privacy(sizes, hparams)
    report = spec.epsilon(DELTA)
    assert 0 < report.epsilon < math.inf
    assert report.neighboring == spec.neighboring == "replace-one"
    # fields are derivable from the dataclasses themselves (the registry relies on it)
    assert "problem" not in static_fields(type(algorithm))
    assert set(hparam_fields(algorithm.hparams_type))


def test_privacy_equals_the_schedule_it_wraps():
    alg = NoisyMbSgd(PROBLEM, 20, 8, sampling="poisson")
    hp = MbSgdHParams.create(0.1, 1.5, 2.0)
    direct = accounting.compute_epsilon(alg.privacy([100], hp).schedule, DELTA, "rdp").epsilon
    # the smallest silo certifies: silo sizes (300, 100, 200) -> n = 100
    assert alg.privacy([300, 100, 200], hp).epsilon(DELTA).epsilon == direct


def test_calibration_meets_the_target_and_is_used_back():
    alg = NoisyMbSgd(PROBLEM, 20, 8)
    hp = MbSgdHParams.create(0.1, 1.0, 2.0)
    spec = alg.privacy([100, 100], hp)
    fields = spec.calibrate(1.0, DELTA)
    calibrated = dataclasses.replace(hp, **{k: jnp.float32(v) for k, v in fields.items()})
    eps = alg.privacy([100, 100], calibrated).epsilon(DELTA).epsilon
    # float32 rounding of the std may move eps by ~1e-7 relative; the calibration's own rtol is 1e-3
    assert eps <= 1.0 * (1 + 1e-6)
    assert eps >= 1.0 / (1 + 2 * accounting.CALIBRATION_RTOL) ** 2


def test_composed_calibration_keeps_noise_ratios_and_never_overshoots():
    alg = Diff2GD(PROBLEM, 12)
    hp = Diff2HParams.create(0.1, restart_interval=4, noise_multiplier_restart=1.0, noise_multiplier_diff=3.0)
    spec = alg.privacy([50, 60, 70], hp)
    z1, z2 = "noise_multiplier_restart", "noise_multiplier_diff"
    assert isinstance(spec, GaussianPrivacy) and spec.noise_fields == (z1, z2)
    values = spec.calibrate(2.0, DELTA)
    assert values[z2] / values[z1] == pytest.approx(3.0, rel=1e-12)
    eps = spec.scaled(values[z1] / 1.0).epsilon(DELTA).epsilon
    assert eps <= 2.0
    # a factor 1e-3 (the bisection's precision) below would overshoot the target
    assert spec.scaled(values[z1] / (1 + 2e-3)).epsilon(DELTA).epsilon > 2.0


def test_non_private_twins_return_no_privacy():
    for alg, hp in [(NoisyMbSgd(PROBLEM, 5, 2, private=False), MbSgdHParams.create(0.1)),
                    (LocalSgd(PROBLEM, 5, 2, private=False), MbSgdHParams.create(0.1)),
                    (Diff2GD(PROBLEM, 5, private=False), Diff2HParams.create(0.1))]:
        spec = alg.privacy([10, 10], hp)
        assert isinstance(spec, NoPrivacy) and not spec.private
        assert spec.epsilon(DELTA).epsilon == math.inf
        with pytest.raises(ValueError, match="target_epsilon"):
            spec.calibrate(1.0, DELTA)


def test_mixed_relations_are_refused_by_name():
    a = alg_schedule("replace-one", "without-replacement")
    b = alg_schedule("add-remove", "poisson")
    with pytest.raises(ValueError, match="neighbouring relations"):
        GaussianPrivacy((a, b), ("s1", "s2"))


def alg_schedule(neighboring, sampling):
    return accounting.GaussianSchedule(noise_std=2.0, contribution_bound=1.0, sampling=sampling, dataset_size=100,
                                       batch_size=10, steps=10, neighboring=neighboring, unit="record")


def test_per_silo_privacy_is_the_worst_silo_and_calibrates_each():
    alg = UnbalancedNoisyMbSgd(PROBLEM, 10, (4, 8))
    hp = UnbalancedHParams.create(0.1, [2.0, 2.0], 1.0)
    spec = alg.privacy([40, 80], hp)
    assert isinstance(spec, PerSiloPrivacy)
    per_silo = [s.epsilon(DELTA).epsilon for s in spec.silos]
    assert spec.epsilon(DELTA).epsilon == max(per_silo)
    (zs,) = spec.calibrate(1.0, DELTA).values()
    assert len(zs) == 2 and all(np.isfinite(zs))
    # equal rates K_i/n_i: the same multiplier, stds z x 2C/K_i differ; different rates: different multipliers
    assert zs[0] == zs[1]
    (zs,) = alg.privacy([40, 100], hp).calibrate(1.0, DELTA).values()
    assert zs[0] > zs[1]


def test_relation_checked_at_construction():
    with pytest.raises(ValueError, match="add-remove"):
        NoisyMbSgd(PROBLEM, 5, 2, sampling="without-replacement", neighboring="add-remove")
    NoisyMbSgd(PROBLEM, 5, 2, sampling="poisson", neighboring="add-remove", sampling_rate=0.1)  # meaningful: accepted
    with pytest.raises(ValueError, match="sampling_rate=None"):  # ... with a public rate only
        NoisyMbSgd(PROBLEM, 5, 2, sampling="poisson", neighboring="add-remove")
    with pytest.raises(ValueError, match="neighboring"):
        check_sampling_relation("poisson", "swap")


def test_hparams_type_checked_when_the_run_starts(reg_data_small):
    alg = NoisyMbSgd(PROBLEM, 3, 2)
    wrong = Diff2HParams.create(0.1)
    with pytest.raises(ValueError, match="MbSgdHParams"):
        alg.init(PROBLEM.init_params(jax.random.key(0)), wrong, reg_data_small, jax.random.key(1))


@pytest.fixture
def reg_data_small():
    from dpjax.engine.silos import SiloData
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(6, 3)).astype(np.float32) for _ in range(2)]
    ys = [rng.normal(size=6).astype(np.float32) for _ in range(2)]
    return SiloData.from_silos(xs, ys)


def test_gaussian_shorthand():
    s = alg_schedule("replace-one", "without-replacement")
    assert gaussian(s).noise_fields == ("noise_std",)
    assert gaussian([s, s], ["a", "b"]).noise_fields == ("a", "b")


def test_composed_spec_is_accounted_by_every_tight_accountant():
    """A DIFF2 composition is one accounting call with RDP or PLD; PLD never exceeds RDP by more
    than its discretisation, and 'best' names the accountant that certified."""
    alg = Diff2GD(PROBLEM, 12)
    hp = Diff2HParams.create(0.1, restart_interval=4, noise_multiplier_restart=2.0, noise_multiplier_diff=4.0)
    spec = alg.privacy([50, 60, 70], hp)
    rdp = spec.epsilon(DELTA, "rdp")
    pld = spec.epsilon(DELTA, "pld")
    best = spec.epsilon(DELTA, "best")
    assert 0 < pld.epsilon <= rdp.epsilon * 1.01
    # full-batch Gaussian rounds: the exact GDP composition is also available and is the smallest
    assert best.epsilon <= min(rdp.epsilon, pld.epsilon) and best.accountant in ("rdp", "pld", "gdp")
    assert best.epsilon == spec.epsilon(DELTA, best.accountant).epsilon
