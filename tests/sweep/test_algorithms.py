"""Every registered algorithm family runs as a sweep, and a sweep row equals a direct run.

The direct run builds the algorithm and its hparams with the algorithm
module's own constructors (not the registry) and calls
``dpjax.engine.run`` with the run key ``fold_in(fold_in(key(seed), trial),
repetition)``.
"""

import dataclasses
import math
import pathlib
import tomllib

import jax
import numpy as np
import pytest

from dpjax.algorithms.accelerated import AcceleratedHParams, AcceleratedMbSgd, AcsaSchedule
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.accounting import CALIBRATION_RTOL
from dpjax.algorithms.diff2 import Diff2BvrLSgd, Diff2GD, Diff2HParams
from dpjax.algorithms.dp_scaffold import DpScaffold, ScaffoldHParams
from dpjax.algorithms.band_mf_fedavg import BandMfFedAvgHParams, DpFedAvgBandMf
from dpjax.algorithms.dp_fedavg import DpFedAvg, FedAvgHParams
from dpjax.algorithms.dp_ftrl import DpFtrl, FtrlHParams
from dpjax.algorithms.dp_sgd import DpSgd
from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
from dpjax.algorithms.local_sgd import LocalSgd
from dpjax.algorithms.shuffle_sco import ScoHParams, ShuffleAcsa, ShuffleSgd
from dpjax.algorithms.shuffled import SdpHParams, SdpOnePassAccelerated, ShuffledNoisyMbSgd
from dpjax.algorithms.unbalanced import UnbalancedHParams, UnbalancedNoisyMbSgd
from dpjax.algorithms.user_level_dpsgd import UserLevelDpSgd
from dpjax.primitives.shuffle_protocols import PvecParams
from dpjax.problems import LinearRegression
from dpjax import engine
from dpjax.primitives.sampling import FixedAvailability
from dpjax.engine import registry
from dpjax.sweep import ALGORITHMS, DATASETS, SweepConfig, datasets, run_sweep
from dpjax.sweep.driver import Sweep
from tests.sweep.conftest import TINY

R = 4  # rounds of every config below (eval after rounds 2 and 4)

# algorithm -> (static table, grid axes beyond trial/repetition)
CONFIGS = {
    "isrl-mbsgd": ({"batch_size": 8, "sampling": "without-replacement"},
                   {"learning_rate": [0.1, 1.0], "noise_multiplier": [0.5], "clip_norm": ["1*maxnorm"]}),
    "mbsgd": ({"batch_size": 8}, {"learning_rate": [0.1, 1.0]}),
    "isrl-local-sgd": ({"local_steps": 3, "availability": 2},
                       {"learning_rate": [0.05, 0.3], "noise_multiplier": [0.1], "clip_norm": [1.0]}),
    "local-sgd": ({"local_steps": 3}, {"learning_rate": [0.05, 0.3]}),
    "isrl-accelerated": ({"batch_size": 8},  # one-pass: R K = 32 <= n = 40
                         {"smoothness": [1.0, 4.0], "regularization": [0.01], "noise_multiplier": [0.8],
                          "clip_norm": [1.0]}),
    "accelerated": ({"batch_size": 8, "sampling": "without-replacement"},
                    {"smoothness": [1.0, 4.0], "strong_convexity": [0.1]}),
}


def direct(name, problem, row):
    """The same configuration built by hand: ``(algorithm, hparams)``."""
    if name == "isrl-mbsgd":
        return (NoisyMbSgd(problem, R, 8, sampling="without-replacement"),
                MbSgdHParams.create(row.learning_rate, row.noise_multiplier, row.clip_norm))
    if name == "mbsgd":
        return NoisyMbSgd(problem, R, 8, private=False), MbSgdHParams.create(row.learning_rate)
    if name == "isrl-local-sgd":
        return (LocalSgd(problem, R, 3, availability=FixedAvailability(2)),
                MbSgdHParams.create(row.learning_rate, row.noise_multiplier, row.clip_norm))
    if name == "local-sgd":
        return LocalSgd(problem, R, 3, private=False), MbSgdHParams.create(row.learning_rate)
    if name == "isrl-accelerated":
        sched = AcsaSchedule.single_stage(R, row.smoothness, row.strong_convexity, row.regularization)
        return AcceleratedMbSgd(problem, R, 8), AcceleratedHParams.create(sched, row.noise_multiplier, row.clip_norm)
    if name == "accelerated":
        sched = AcsaSchedule.single_stage(R, row.smoothness, row.strong_convexity, row.regularization)
        return (AcceleratedMbSgd(problem, R, 8, sampling="without-replacement", private=False),
                AcceleratedHParams.create(sched))
    raise AssertionError(name)


def config(name, **top) -> SweepConfig:
    d = tomllib.loads(TINY)
    static, grid = CONFIGS[name]
    d.update(algorithm=name, num_rounds=R, eval_every=2, static=dict(static),
             grid={**grid, "repetition": 2, "trial": 2}, **top)
    return SweepConfig.from_dict(d)


def test_every_registered_algorithm_is_covered():
    assert {"isrl-mbsgd", "isrl-local-sgd", "local-sgd", "mbsgd", "isrl-accelerated"} <= set(ALGORITHMS)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.slow
def test_sweep_end_to_end_and_rows_equal_direct_runs(name, tmp_path):
    cfg = config(name)
    res = run_sweep(cfg, tmp_path, devices=jax.local_devices()[:1], progress=False)
    runs, evals = res.runs, res.evals
    assert len(runs) == 2 * 2 * 2 and runs.run_id.is_unique and (runs.diverged_round == -1).all()
    assert sorted(evals.eval_round.unique()) == [2, 4]
    assert np.isfinite(runs[["train_loss", "test_loss", "train_error", "test_error"]].to_numpy()).all()
    resolved = "local_steps_resolved" if "local" in name else "batch_size_resolved"
    assert (runs[resolved] == CONFIGS[name][0].get("local_steps", CONFIGS[name][0].get("batch_size"))).all()

    sw = Sweep(cfg, jax.local_devices()[:1])
    for _, row in runs.iloc[[0, 3, 5, 6]].iterrows():  # both trials, repetitions and configs
        td = sw.trial(int(row.trial))
        alg, hp = direct(name, td.problem, row)
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(cfg.seed), int(row.trial)), int(row.repetition))
        one = engine.run(alg, td.train, hp, key, eval_fn=datasets.classification_eval(td.problem),
                         eval_data=td.eval_data, eval_every=cfg.eval_every)
        ev = evals[evals.run_id == row.run_id].sort_values("eval_round")
        for m in ("train_loss", "test_loss", "train_error", "test_error"):
            # The sweep vmaps configs that share a key and data (gradients become matrix
            # products) while the direct run is unbatched: XLA may reduce and fuse in a
            # different order, so the last float32 bits can differ (errors are exact counts).
            np.testing.assert_allclose(ev[m].to_numpy(), one.eval_metrics[m].astype(np.float64), rtol=1e-6,
                                       atol=1e-7, err_msg=f"{name} {m}")


@pytest.mark.parametrize("name, accountant", [("isrl-local-sgd", "rdp"), ("isrl-local-sgd", "paper-experiment"),
                                              ("isrl-accelerated", "rdp")])
@pytest.mark.slow
def test_epsilon_axis_calibrates_each_family_with_its_own_schedule(name, accountant):
    """The epsilon axis sets the noise multiplier from the family's privacy spec: the run certifies
    the target, and the multiplier is what the family's own schedule calibrates (the clip norm does
    not enter: multipliers do not scale with it)."""
    from dpjax.accounting import api

    static, grid = CONFIGS[name]
    grid = {k: v for k, v in grid.items() if k != "noise_multiplier"}
    grid["clip_norm"] = [1.7]
    grid["epsilon"] = [1.0, 8.0]
    d = tomllib.loads(TINY)
    d.update(algorithm=name, num_rounds=R, static=dict(static), grid={**grid, "trial": 1},
             privacy={"accountant": accountant, "delta": "1/n^2"})
    cfg = SweepConfig.from_dict(d)
    sw = Sweep(cfg, jax.local_devices()[:1])
    g = sw.groups[0]
    alg = sw.algorithm(g)
    entry = registry.get_algorithm(name)
    n, delta = 40, 1 / 40**2
    for h, axes in enumerate(g.configs):
        hp = sw.hparams(g, 0, h)
        sched = alg.privacy([n], entry.make_hparams(hp, algorithm=alg)).schedule
        assert sched.noise_multiplier == pytest.approx(hp["noise_multiplier"], rel=1e-12) and hp["clip_norm"] > 1
        assert api.compute_epsilon(sched, delta, accountant).epsilon <= axes["epsilon"] * (1 + 1e-9)
        unit_hp = entry.make_hparams({**hp, "noise_multiplier": 1.0}, algorithm=alg)
        unit = alg.privacy([n], unit_hp).schedule
        z = api.calibrate_noise(unit, axes["epsilon"], delta, accountant) / unit.sensitivity
        assert hp["noise_multiplier"] == pytest.approx(z, rel=1e-6)


def test_local_sgd_isrl_experiment_local_steps_uses_the_mbsgd_k_rule():
    d = tomllib.loads(TINY)
    d.update(algorithm="isrl-local-sgd", num_rounds=R, static={"local_steps": "isrl-experiment"},
             grid={"learning_rate": [0.1], "epsilon": [2.0, 8.0]},
             privacy={"accountant": "paper-experiment", "delta": "1/n^2"})
    sw = Sweep(SweepConfig.from_dict(d), jax.local_devices()[:1])
    assert sw.algorithm(sw.groups[0]).local_steps == math.ceil(40 * math.sqrt(8.0) / (2 * math.sqrt(R)))


def test_unknown_algorithm_lists_the_known_ones():
    d = tomllib.loads(TINY)
    d["algorithm"] = "fedprox"
    with pytest.raises(ValueError) as err:
        SweepConfig.from_dict(d)
    msg = str(err.value)
    assert "algorithm='fedprox' is unknown" in msg and all(repr(n) in msg for n in ALGORITHMS)
    with pytest.raises(ValueError, match="isrl-local-sgd"):
        registry.get_algorithm("fedprox")


@pytest.mark.parametrize("old, new", [("fedopt", "'fedavg-server-opt'"), ("fedavg", "'local-sgd'")])
def test_a_retired_twin_name_is_refused_with_its_new_name(old, new):
    """A sweep config naming a twin by its old name fails at parse time, naming the new one (no alias)."""
    assert old not in ALGORITHMS and old in registry.RETIRED
    d = tomllib.loads(TINY)
    d.update(algorithm=old, static={"local_steps": 3}, grid={"learning_rate": [0.1]})
    with pytest.raises(ValueError, match=f"algorithm='{old}' is (retired|renamed).*{new}"):
        SweepConfig.from_dict(d)


def test_every_twin_is_its_private_family_without_the_privacy_marker():
    """A twin's name says what it is: its private family's name less the privacy marker (``dp-sgd`` ->
    ``sgd``, ``isrl-mbsgd`` -> ``mbsgd``, ``dpsgd-general`` -> ``sgd-general``), one name per twin. Two
    name the non-private algorithm instead: ``bvr-lsgd`` (Murata & Suzuki's BVR-L-SGD) and
    ``fedavg-server-opt`` (FedAvg with dp-fedavg's server optimizer; ``fedavg`` was isrl-local-sgd's twin)."""
    named = {"diff2-bvr": "bvr-lsgd", "dp-fedavg": "fedavg-server-opt"}

    def without_marker(family):
        for marker in ("dp-", "isrl-", "diff2-"):
            if family.startswith(marker):
                return family[len(marker):]
        return family.replace("dpsgd-", "sgd-", 1)

    key = lambda e: (e.cls, tuple(kv for kv in e.fixed if kv[0] != "private"))
    private = {key(e): n for n, e in ALGORITHMS.items() if e.private}
    twins = [(n, e) for n, e in ALGORITHMS.items() if not e.private]
    assert len({key(e) for _, e in twins}) == len(twins), "one name per twin"
    for name, entry in twins:
        family = private[key(entry)]
        assert name == named.get(family, without_marker(family)), (name, family)
        assert entry.description.endswith(f"the twin of {family}"), entry.description



@pytest.mark.parametrize(
    "name, mutate, key",
    [
        ("mbsgd", lambda d: d["grid"].update(epsilon=[1.0]), "grid.epsilon"),
        ("local-sgd", lambda d: d["grid"].update(noise_multiplier=[0.1]), "grid.noise_multiplier"),
        ("accelerated", lambda d: d["grid"].update(clip_norm=[1.0]), "grid.clip_norm"),
        ("local-sgd", lambda d: d["static"].update(local_steps="isrl-experiment"), "static.local_steps"),
        ("isrl-local-sgd", lambda d: d["static"].update(local_steps="isrl-experiment"), "static.local_steps"),
        ("isrl-local-sgd", lambda d: d["static"].update(batch_size=3), "static.batch_size"),
        ("isrl-local-sgd", lambda d: d["static"].pop("local_steps"), "static.local_steps"),
        ("isrl-local-sgd", lambda d: d["static"].update(local_steps=0), "static.local_steps"),
        ("mbsgd", lambda d: d["static"].update(private=True), "static.private"),
        ("isrl-accelerated", lambda d: d["grid"].update(smoothness=[0.0]), "grid.smoothness[0]"),
        ("isrl-accelerated", lambda d: d["grid"].update(regularization=[-1.0]), "grid.regularization[0]"),
        ("isrl-accelerated", lambda d: d["grid"].pop("smoothness"), "grid.smoothness"),
        ("isrl-accelerated", lambda d: d["grid"].update(learning_rate=[0.1]), "grid.learning_rate"),
        ("isrl-accelerated", lambda d: d["static"].update(batch_size="isrl-experiment"), "static.batch_size"),
        ("accelerated", lambda d: d["static"].update(projection_radius=-1.0), "static.projection_radius"),
    ],
)
def test_bad_family_configs_name_the_key(name, mutate, key):
    d = tomllib.loads(TINY)
    static, grid = CONFIGS[name]
    d.update(algorithm=name, num_rounds=R, static=dict(static), grid=dict(grid))
    mutate(d)
    with pytest.raises(ValueError) as err:
        SweepConfig.from_dict(d)
    assert key in str(err.value)


@pytest.mark.parametrize("static, key", [
    ({"batch_size": 8}, "sampling_rate=None: Poisson sampling under add/remove"),  # no public rate
    ({"batch_size": 8, "sampling_rate": 1.5}, "static.sampling_rate=1.5"),
    ({"batch_size": 8, "sampling": "without-replacement", "neighboring": "replace-one", "sampling_rate": 0.2},
     "static.sampling_rate=0.2: sampling_rate=0.2 is Poisson's"),
])
def test_poisson_rate_configs_name_the_key(static, key):
    """dp-sgd (Poisson, add/remove) needs its public rate in ``[static]``; a bad one is named."""
    d = tomllib.loads(TINY)
    d.update(algorithm="dp-sgd", num_rounds=R, static=dict(static), grid={"learning_rate": [0.1]})
    with pytest.raises(ValueError) as err:
        SweepConfig.from_dict(d)
    assert key in str(err.value)


def test_accelerated_hparams_need_the_algorithm():
    with pytest.raises(ValueError, match="num_rounds"):
        registry.get_algorithm("isrl-accelerated").make_hparams({"smoothness": 1.0})


def test_batched_accelerated_hparams_lanes_equal_the_scalar_schedule():
    """The registry builds every lane with the family's own constructor (here
    ``AcsaSchedule.single_stage`` through ``from_sweep``) and stacks them."""
    entry = registry.get_algorithm("isrl-accelerated")
    alg = AcceleratedMbSgd(LinearRegression(2), 5, 2)
    lanes = [[{"smoothness": float(np.float32(b)), "strong_convexity": float(np.float32(m)),
               "regularization": float(np.float32(r))} for b, m, r in ((1.0, 0.1, 0.01), (4.0, 0.0, 0.3))]]
    batched = entry.make_hparams(lanes, algorithm=alg)
    for j, lane in enumerate(lanes[0]):
        one = AcceleratedHParams.create(AcsaSchedule.single_stage(5, lane["smoothness"], lane["strong_convexity"],
                                                                  lane["regularization"]))
        for a, b in zip(jax.tree_util.tree_leaves(one), jax.tree_util.tree_leaves(batched)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[0, j])
            assert np.asarray(a).dtype == np.asarray(b).dtype


def test_registry_fields_are_the_dataclass_fields():
    """Static and per-run fields come from the family dataclasses, not a restated list."""
    from dpjax.engine.contract import hparam_fields, static_fields

    for name, entry in ALGORITHMS.items():
        fields = set(static_fields(entry.cls)) - {"log_indices"} - set(entry.fixed_values)
        assert fields <= set(entry.static_fields), name
        assert "gradient_path" in registry.get_algorithm("isrl-mbsgd").static_fields
        scalars = {k for k in entry.hparam_fields if "." not in k}
        declared = set(getattr(entry.cls.hparams_type, "SWEEP_AXES", {}))  # a schedule built from declared axes
        assert scalars - {"smoothness", "strong_convexity", "regularization"} - declared <= set(
            hparam_fields(entry.cls.hparams_type))


# Families beyond the first seven: one small sweep each (one config, one trial, one
# repetition) whose row equals the direct run built with the family's own constructors.
N_SILOS, N = 3, 40
MORE = {
    "isrl-unbalanced": ({"batch_sizes": [4, 6, 8]}, {"learning_rate": [0.5], "noise_multiplier": [0.3]},
                        lambda p, r: (UnbalancedNoisyMbSgd(p, R, (4, 6, 8)),
                                      UnbalancedHParams.create(r.learning_rate, [r.noise_multiplier] * 3))),
    "unbalanced": ({"batch_sizes": [4, 6, 8]}, {"learning_rate": [0.5]},
                   lambda p, r: (UnbalancedNoisyMbSgd(p, R, (4, 6, 8), private=False),
                                 UnbalancedHParams.create(r.learning_rate, [0.0] * 3))),
    "isrl-shuffled": ({"num_available": 2}, {"learning_rate": [0.5], "noise_multiplier": [0.3]},
                      lambda p, r: (ShuffledNoisyMbSgd(p, R, 2),
                                    MbSgdHParams.create(r.learning_rate, r.noise_multiplier))),
    "shuffled": ({"num_available": 2}, {"learning_rate": [0.5]},
                 lambda p, r: (ShuffledNoisyMbSgd(p, R, 2, private=False), MbSgdHParams.create(r.learning_rate))),
    "sdp-accelerated": ({"batch_size": 4}, {"smoothness": [2.0], "pvec.granularity": [64], "pvec.trials": [4],
                                            "pvec.probability": [0.25]},
                        lambda p, r: (SdpOnePassAccelerated(p, R, 4), SdpHParams.create(
                            AcsaSchedule.single_stage(R, r.smoothness), PvecParams.create(64, 4, 0.25)))),
    "diff2-gd": ({}, {"learning_rate": [0.5], "restart_interval": [2], "noise_multiplier_restart": [0.5],
                      "noise_multiplier_diff": [0.5]},
                 lambda p, r: (Diff2GD(p, R), Diff2HParams.create(r.learning_rate, 2, noise_multiplier_restart=0.5,
                                                                  noise_multiplier_diff=0.5))),
    "gd": ({}, {"learning_rate": [0.5]}, lambda p, r: (Diff2GD(p, R, private=False),
                                                        Diff2HParams.create(r.learning_rate))),
    "dp-gd": ({}, {"learning_rate": [0.5], "noise_multiplier_restart": [0.5]},
              lambda p, r: (Diff2GD(p, R, restart_every_round=True),
                            Diff2HParams.create(r.learning_rate, noise_multiplier_restart=0.5))),
    "diff2-bvr": ({"local_steps": 2, "batch_size": 4}, {"learning_rate": [0.5], "noise_multiplier_restart": [0.5]},
                  lambda p, r: (Diff2BvrLSgd(p, R, 2, 4),
                                Diff2HParams.create(r.learning_rate, noise_multiplier_restart=0.5))),
    "bvr-lsgd": ({"local_steps": 2, "batch_size": 4}, {"learning_rate": [0.5]},
                 lambda p, r: (Diff2BvrLSgd(p, R, 2, 4, private=False), Diff2HParams.create(r.learning_rate))),
    # Poisson under add/remove: the public rate q = K / n is declared (n = N records per silo)
    "dp-sgd": ({"batch_size": 8, "sampling_rate": 8 / N}, {"learning_rate": [0.05], "noise_multiplier": [0.5]},
               lambda p, r: (DpSgd(p, R, 8, sampling_rate=8 / N),
                             DpSgdHParams.create(r.learning_rate, r.noise_multiplier))),
    "sgd": ({"batch_size": 8, "optimizer": "sgd", "sampling_rate": 8 / N}, {"learning_rate": [0.5]},
            lambda p, r: (DpSgd(p, R, 8, optimizer="sgd", private=False, sampling_rate=8 / N),
                          DpSgdHParams.create(r.learning_rate))),
    # shuffle-private SCO: the n users are the records of ONE silo (4th entry: data overrides)
    "shuffle-sgd": ({"max_batch": 8, "aggregator": "central-gaussian"}, {"batch": [8], "step": [0.5],
                                                                        "noise_multiplier": [0.3]},
                    lambda p, r: (ShuffleSgd(p, R, 8, "central-gaussian"), _sco_hparams(
                        start=[0, 8, 16, 24], batch=8, step=0.5, noise_multiplier=0.3)), {"num_silos": 1}),
    "shuffle-acsa": ({"max_batch": 40, "aggregator": "pvec"},
                     {"batch": [40], "interactive": [1], "step": [2.0], "pvec.granularity": [64],
                      "pvec.trials": [4], "pvec.probability": [0.25]},
                     lambda p, r: (ShuffleAcsa(p, R, 40, "pvec"), _sco_hparams(
                         start=[0, 0, 0, 0], batch=40, step=2.0, pvec=PvecParams.create([64] * R, [4] * R, [0.25] * R))),
                     {"num_silos": 1}),
    # Algorithm 1 of van Dijk et al.: batch clipping of m = 2 mini-batch means of s = 3 per round,
    # shuffling with B = 2 rounds per epoch (R = 4: two epochs); the twin makes the same rounds unclipped.
    "dpsgd-general": ({"subset_size": 3, "num_subsets": 2, "rounds_per_epoch": 2, "sampling": "shuffle"},
                      {"learning_rate": [0.5], "clip_norm": [0.7], "noise_multiplier": [0.3]},
                      lambda p, r: (DpSgdGeneral(p, R, 3, 2, 2), DpSgdHParams.create(r.learning_rate, 0.3, 0.7))),
    "sgd-general": ({"subset_size": 1, "num_subsets": 4, "rounds_per_epoch": 4, "sampling": "subsample"},
                    {"learning_rate": [0.5]},
                    lambda p, r: (DpSgdGeneral(p, R, 1, 4, 4, sampling="subsample", private=False),
                                  DpSgdHParams.create(r.learning_rate))),
    # DP-FedAvg with adaptive clipping (Poisson silos, add/remove) and its twin, FedAvg with the same server
    # optimizer (fixed-size, replace-one)
    "dp-fedavg": ({"silos_per_round": 2, "local_steps": 2, "sampling_rate": 2 / N_SILOS},
                  {"learning_rate": [0.5], "noise_multiplier": [0.8], "noise_multiplier_count": [2.0], "clip_norm": [0.5]},
                  lambda p, r: (DpFedAvg(p, R, 2, local_steps=2, sampling_rate=2 / N_SILOS), FedAvgHParams.create(
                      0.5, noise_multiplier=0.8, noise_multiplier_count=2.0, clip_norm=0.5))),
    "fedavg-server-opt": ({"silos_per_round": 2, "sampling": "without-replacement"}, {"learning_rate": [0.5]},
                          lambda p, r: (DpFedAvg(p, R, 2, sampling="without-replacement", private=False),
                                        FedAvgHParams.create(0.5))),
    # DP-FedAvg with BandMF noise: the 3 clients in 3 cyclic groups, q = 0.5 inside the round's group, 2 bands
    "dp-fedavg-band-mf": ({"silos_per_round": 1, "sampling_rate": 0.5, "bands": 2, "num_groups": 3,
                           "band_coeffs": [1.0, 0.4]}, {"learning_rate": [0.5], "noise_multiplier": [0.8]},
                          lambda p, r: (DpFedAvgBandMf(p, R, 1, sampling_rate=0.5, bands=2, num_groups=3,
                                                       band_coeffs=(1.0, 0.4)),
                                        BandMfFedAvgHParams.create(r.learning_rate, noise_multiplier=0.8))),
    # DP-FTRL (tree aggregation; n = 40, B = 8: R = 4 rounds of a 5-round epoch) and SGD on the same order
    "dp-ftrl": ({"batch_size": 8}, {"learning_rate": [0.5], "noise_multiplier": [0.5], "clip_norm": [1.0]},
                lambda p, r: (DpFtrl(p, R, 8), FtrlHParams.create(0.5, 0.5, 1.0))),
    "ftrl": ({"batch_size": 8, "momentum": 0.9}, {"learning_rate": [0.5]},
             lambda p, r: (DpFtrl(p, R, 8, momentum=0.9, private=False), FtrlHParams.create(0.5))),
    # DP-FedAdam: DP-FedAvg's registration with the Adam server (one line in dp_fedavg.py), and its twin
    "dp-fedadam": ({"silos_per_round": 2, "local_steps": 2, "sampling_rate": 2 / N_SILOS},
                   {"learning_rate": [0.05], "noise_multiplier": [0.8], "noise_multiplier_count": [2.0]},
                   lambda p, r: (DpFedAvg(p, R, 2, local_steps=2, sampling_rate=2 / N_SILOS, server_optimizer="adam"),
                                 FedAvgHParams.create(0.05, noise_multiplier=0.8, noise_multiplier_count=2.0))),
    "fedadam": ({"silos_per_round": 2, "sampling": "without-replacement"}, {"learning_rate": [0.05]},
                lambda p, r: (DpFedAvg(p, R, 2, sampling="without-replacement", server_optimizer="adam", private=False),
                              FedAvgHParams.create(0.05))),
    # DP-SCAFFOLD (client control variates; 2 of the silos a round, 2 local steps of 4 records) and SCAFFOLD
    "dp-scaffold": ({"silos_per_round": 2, "local_steps": 2, "batch_size": 4},
                    {"learning_rate": [1.0], "client_learning_rate": [0.1], "noise_multiplier": [0.8]},
                    lambda p, r: (DpScaffold(p, R, 2, 2, 4), ScaffoldHParams.create(1.0, 0.1, 0.8))),
    "scaffold": ({"silos_per_round": 2, "local_steps": 2, "batch_size": 4}, {"client_learning_rate": [0.1]},
                 lambda p, r: (DpScaffold(p, R, 2, 2, 4, private=False), ScaffoldHParams.create(1.0, 0.1))),
    # user-level DP-SGD (ULS): the 3 silos are 3 users, 2 expected a step, each user's first 8 records
    "user-level-dpsgd": ({"unit": "user", "batch_size": 2, "sampling_rate": 2 / N_SILOS, "records_per_user": 8},
                         {"learning_rate": [0.5], "noise_multiplier": [0.8]},
                         lambda p, r: (UserLevelDpSgd(p, R, "user", 2, 2 / N_SILOS, 8),
                                       DpSgdHParams.create(r.learning_rate, r.noise_multiplier))),
}


def _sco_hparams(start, batch, step, noise_multiplier=0.0, pvec=None):
    """Shuffle-SCO hparams written out round by round (one phase: stage rounds 1..R)."""
    import jax.numpy as jnp

    return ScoHParams(jnp.asarray(start, jnp.int32), jnp.full(R, batch, jnp.int32), jnp.arange(1, R + 1, dtype=jnp.int32),
                      jnp.full(R, step, jnp.float32), jnp.zeros(R, jnp.float32),
                      pvec if pvec is not None else PvecParams.create([1] * R, [0] * R, [0.0] * R),
                      jnp.full(R, noise_multiplier, jnp.float32), jnp.float32(1.0))


def test_every_registered_family_has_a_test():
    assert set(CONFIGS) | set(MORE) == set(ALGORITHMS)


@pytest.mark.parametrize("name", sorted(MORE))
@pytest.mark.slow
def test_more_families_sweep_and_equal_direct_runs(name, tmp_path):
    static, grid, make, *data = MORE[name]
    d = tomllib.loads(TINY)
    if data:
        d["data"].update(data[0])
    d.update(algorithm=name, num_rounds=R, eval_every=R, static=dict(static), grid=dict(grid))
    cfg = SweepConfig.from_dict(d)
    cfg = dataclasses.replace(cfg, grid={**cfg.grid, "trial": (0,), "repetition": (0,)})
    runs = run_sweep(cfg, tmp_path, devices=jax.local_devices()[:1], progress=False).runs
    assert len(runs) == 1 and np.isfinite(runs.train_loss).all()
    row = runs.iloc[0]
    td = Sweep(cfg, jax.local_devices()[:1]).trial(0)
    alg, hp = make(td.problem, row)
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(cfg.seed), 0), 0)
    one = engine.run(alg, td.train, hp, key, eval_fn=datasets.classification_eval(td.problem),
                     eval_data=td.eval_data, eval_every=R)
    # one run in both (no vmap batching differences): equal up to float32 fusion order
    np.testing.assert_allclose(row.train_loss, float(one.eval_metrics["train_loss"][-1]), rtol=1e-6)


@pytest.mark.slow
def test_epsilon_axis_is_calibrated_through_privacy_for_other_families():
    """unbalanced (one multiplier per silo) and DIFF2 (noise multipliers) via privacy().calibrate."""
    for name, static, grid in (("isrl-unbalanced", {"batch_sizes": [4, 6, 8]}, {"learning_rate": [0.5]}),
                               ("dp-gd", {}, {"learning_rate": [0.5]})):
        d = tomllib.loads(TINY)
        d.update(algorithm=name, num_rounds=R, static=static, grid={**grid, "epsilon": [2.0], "trial": 1},
                 privacy={"accountant": "rdp", "delta": 1e-5})
        sw = Sweep(SweepConfig.from_dict(d), jax.local_devices()[:1])
        g = sw.groups[0]
        alg, vals = sw.algorithm(g), sw.hparams(g, 0, 0)
        eps = alg.privacy(sw.trial(0).train.silo_sizes(), sw.entry.make_hparams(vals, alg)).epsilon(1e-5, "rdp")
        assert eps.epsilon <= 2.0 * (1 + 1e-6), name
        assert eps.epsilon >= 2.0 / (1 + 2 * CALIBRATION_RTOL) ** 2, name


from tests._shared import require_shared_data  # noqa: E402


@pytest.mark.slow
def test_every_dataset_loader_of_dpjax_data_is_registered():
    """ISRL MNIST/insurance/obesity, every DIFF2 dataset and the synthetic ones; each real one loads
    one split as padded silos with pooled evaluation metrics of its problem."""
    from dpjax.data.diff2 import DIFF2_DATASETS

    expected = {"isrl-mnist", "isrl-insurance", "isrl-obesity", "synthetic-logistic", "synthetic-mlp"}
    expected |= {f"diff2-{n.replace('_', '-')}" for n in DIFF2_DATASETS}
    assert expected <= set(DATASETS)
    shared = require_shared_data("the real insurance, obesity and a9a files (registration checked above)")
    for name, silos in (("isrl-insurance", 3), ("isrl-obesity", 7), ("diff2-a9a", 10)):
        entry = DATASETS[name]
        td = entry.load(entry.resolve({"name": name, "data_dir": str(shared)}), 0)
        assert td.train.num_silos == silos and td.max_norm > 0
        metrics = entry.eval_fn(td.problem)(td.problem.init_params(jax.random.key(0)), td.eval_data)
        assert {"train_loss", "test_loss"} <= set(metrics) and all(np.isfinite(float(v)) for v in metrics.values())


@pytest.mark.parametrize("name,static,grid", [
    ("shuffle-acsa", {"max_batch": 40, "aggregator": "pvec"}, {"batch": [40], "interactive": [1], "step": [2.0]}),
    ("shuffle-sgd", {"max_batch": 8, "aggregator": "central-gaussian"}, {"batch": [8], "step": [0.5]}),
])
def test_epsilon_axis_calibrates_the_shuffle_sco_families(name, static, grid):
    """An epsilon axis sets P_vec's (g, b, p) (or the Gaussian std) through privacy().calibrate with the
    generic accountant "best" (P_vec: the lemma account; Gaussian: GDP); the built run certifies the
    target, and not far below it (the calculator solves the lemma's equation; GDP is exact)."""
    d = tomllib.loads(TINY)
    d["data"].update(num_silos=1)
    d.update(algorithm=name, num_rounds=R, static=static, grid={**grid, "epsilon": [2.0], "trial": 1},
             privacy={"accountant": "best", "delta": 1e-5})
    sw = Sweep(SweepConfig.from_dict(d), jax.local_devices()[:1])
    g = sw.groups[0]
    alg, vals = sw.algorithm(g), sw.hparams(g, 0, 0)
    hp = sw.entry.make_hparams(vals, alg)
    rep = alg.privacy(sw.trial(0).train.silo_sizes(), hp).epsilon(1e-5, "best")
    assert 2.0 * 0.99 <= rep.epsilon <= 2.0 * (1 + 1e-6), name
    if name == "shuffle-acsa":  # 4 interactive rounds share the budget: one P_vec per round
        assert rep.accountant == "pvec-lemma:optimal" and np.all(np.asarray(hp.pvec.trials) > 0)
