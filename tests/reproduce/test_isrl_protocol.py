"""The ISRL-DP experiment protocol pieces (dpjax.reproduce.isrl_protocol) and the run-table executor
(dpjax.sweep.table) on tiny shapes."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import pandas as pd
import pytest

from dpjax.algorithms.isrl_mbsgd import NoisyMbSgd
from dpjax.engine import SiloData
from dpjax.primitives import FixedAvailability
from dpjax.problems import LogisticRegression
from dpjax.reproduce import isrl_protocol as proto
from dpjax.sweep import table


def _silos(num_silos=4, n=30, d=3, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    xs, ys = [], []
    for _ in range(num_silos):
        x = rng.normal(size=(n, d)).astype(np.float32)
        ys.append((x @ w + 0.3 * rng.normal(size=n) > 0).astype(np.float32))
        xs.append(x)
    return xs, ys


def test_log_grid_and_thin():
    g = proto.log_grid(-6.0, 0.0, 10, scale=12)
    assert len(g) == 10
    assert g[0] == pytest.approx(12 * math.exp(-6)) and g[-1] == pytest.approx(12.0)
    assert np.allclose(np.diff(np.log(g)), 6 / 9)
    t = proto.thin(g, 4)
    assert t[0] == g[0] and t[-1] == g[-1] and len(t) == 4
    assert proto.thin(g, 20) == g
    with pytest.raises(ValueError, match="count"):
        proto.thin(g, 0)


def test_build_specs_scales_noise_with_clip_and_adds_nonprivate_twin():
    noise = {("paper", 1.0): proto.NoiseEntry("paper", 1.0, 0.5, 2.0, "paper-experiment"),
             ("tight", 1.0): proto.NoiseEntry("tight", 1.0, 0.8, 1.0, "rdp")}
    specs = proto.build_specs(private_name="p", nonprivate_name="np", noise=noise, learning_rates=(0.1, 1.0),
                              clip_norms=(10.0, 100.0), repetitions=3, nonprivate_clip=False)
    private = [s for s in specs if s.algorithm == "p"]
    nonpriv = [s for s in specs if s.algorithm == "np"]
    assert len(private) == 2 * 2 * 2 * 3  # calibrations x lrs x clips x reps
    assert len(nonpriv) == 2 * 3  # unclipped: lrs x reps
    for s in private:
        assert s.noise_std == pytest.approx(noise[(s.calibration, s.epsilon)].sigma_unit * s.clip_norm)
    assert all(s.noise_std == 0.0 and math.isinf(s.clip_norm) and math.isinf(s.epsilon) for s in nonpriv)
    clipped = proto.build_specs(private_name="p", nonprivate_name="np", noise=noise, learning_rates=(0.1,),
                                clip_norms=(10.0, 100.0), repetitions=1, nonprivate_clip=True)
    assert sorted(s.clip_norm for s in clipped if s.algorithm == "np") == [10.0, 100.0]


def test_noise_table_paper_formula_and_tight_certificate():
    n, r, k, delta = 200, 10, 30, 1 / 200**2
    tab = proto.noise_table("mbsgd", n=n, rounds=r, batch_size=k, epsilons=[2.0], delta=delta, epsilon_max=2.0)
    paper, tight = tab[("paper", 2.0)], tab[("tight", 2.0)]
    # Appendix I: sigma^2 = 8 L^2 ln(1/delta) R / (n^2 eps^2) at L = 1.
    assert paper.sigma_unit == pytest.approx(math.sqrt(8 * math.log(1 / delta) * r / (n**2 * 4.0)))
    # The tight sigma is certified at (about) the target by RDP, never above it.
    assert 0.9 * 2.0 <= tight.realized_epsilon <= 2.0 * (1 + 1e-6)
    # sigma_unit is the std at L = 1: the family's multiplier times its sensitivity 2/K; the realized
    # epsilon is the family's privacy at that multiplier
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams

    algo = NoisyMbSgd(LogisticRegression(1), num_rounds=r, batch_size=k)
    hp = MbSgdHParams.create(1.0, 1.0, 1.0)
    assert algo.message_sensitivity(hp, [n]) == pytest.approx(2 / k)
    z = algo.privacy([n], hp).calibrate(2.0, delta, "rdp")["noise_multiplier"]
    assert tight.sigma_unit == pytest.approx(z * 2 / k, rel=1e-6)
    at = MbSgdHParams(hp.learning_rate, tight.sigma_unit / (2 / k), hp.clip_norm)
    assert tight.realized_epsilon == pytest.approx(algo.privacy([n], at).epsilon(delta, "rdp").epsilon, rel=1e-6)
    # Less noise certifies a larger epsilon (monotone accountant).
    if paper.sigma_unit < tight.sigma_unit:
        assert paper.realized_epsilon > tight.realized_epsilon
    else:
        assert paper.realized_epsilon <= tight.realized_epsilon
    with pytest.raises(ValueError, match="kind"):
        proto.noise_table("sgd", n=n, rounds=r, batch_size=k, epsilons=[1.0], delta=delta, epsilon_max=1.0)
    with pytest.raises(ValueError, match="batch_size"):
        proto.noise_table("mbsgd", n=n, rounds=r, batch_size=n + 1, epsilons=[1.0], delta=delta, epsilon_max=1.0)


def _grid_setup(num_silos=4, n=30, d=3):
    xs, ys = _silos(num_silos, n, d)
    train = SiloData.from_silos(xs, ys)
    tx, ty = _silos(2, 20, d, seed=1)
    problem = LogisticRegression(d)
    algo = NoisyMbSgd(problem, num_rounds=6, batch_size=5, availability=FixedAvailability(2), output="window")
    return algo, train, table.eval_data_for(train, np.concatenate(tx), np.concatenate(ty)), table.Evaluator(problem)


def test_spec_field_the_family_does_not_take_is_an_error():
    """A spec's absolute ``noise_std`` is not a per-run field of a family that takes a noise
    multiplier: the default ``hparams_from_spec`` names it (dropping it would run without noise)."""
    algo, train, eval_data, ev = _grid_setup()
    spec = proto.RunSpec("a", "paper", 1.0, 0.1, 1.0, 0.5, 0, 0)
    with pytest.raises(ValueError, match="noise_std=0.5"):
        table.hparams_from_spec(algo, spec)
    with pytest.raises(ValueError, match="noise_std"):
        table.run_table(algo, train, eval_data, ev, [spec], jax.random.key(0), divergence_threshold=100.0)
    hp = table.hparams_from_spec(algo, _LabelledSpec(0.1, 0))  # labels (repetition) are not hparams
    assert float(hp.learning_rate) == pytest.approx(0.1) and float(hp.noise_multiplier) == 0.0


@dataclasses.dataclass(frozen=True)
class _LabelledSpec:
    learning_rate: float
    repetition: int


@pytest.mark.slow
def test_run_grid_chunking_is_invisible_and_divergence_is_marked():
    algo, train, eval_data, ev = _grid_setup()
    specs = [proto.RunSpec("a", "paper", 1.0, lr, 1e3, sig, rep, h)
             for h, (lr, sig) in enumerate([(0.1, 0.0), (0.5, 0.2), (1.0, 1.0), (3e38, 0.0)]) for rep in range(2)][1:]
    key = jax.random.key(3)
    make = proto.spec_hparams(algo, train.silo_sizes())  # absolute noise_std -> the family's multiplier
    # 7 runs as one chunk vs chunks of 4 (the last one padded): identical rows.
    whole = table.run_table(algo, train, eval_data, ev, specs, key, divergence_threshold=100.0, chunk_size=7,
                            make_hparams=make)
    chunked = table.run_table(algo, train, eval_data, ev, specs, key, divergence_threshold=100.0, chunk_size=4,
                              make_hparams=make)
    pd.testing.assert_frame_equal(whole, chunked)
    # the multiplier is noise_std over the message's sensitivity 2C/K (K = 5)
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams

    def by_hand(s):
        return MbSgdHParams.create(s.learning_rate, s.noise_std / (2 * s.clip_norm / 5), s.clip_norm)

    for s in specs:
        assert float(make(s).noise_multiplier) == pytest.approx(float(by_hand(s).noise_multiplier), rel=1e-6)
    explicit = table.run_table(algo, train, eval_data, ev, specs, key, divergence_threshold=100.0, chunk_size=7,
                               make_hparams=by_hand)
    pd.testing.assert_frame_equal(whole, explicit, rtol=1e-5)
    huge = whole[whole.learning_rate > 1e30]
    assert len(huge) == 2 and huge["diverged"].all() and np.isinf(huge["train_loss"]).all()
    ok = whole[whole.learning_rate < 1e30]
    assert not ok["diverged"].any() and np.isfinite(ok["train_loss"]).all()
    # Repetition r of a spec uses fold_in(key, r) wherever it sits in the grid.
    again = table.run_table(algo, train, eval_data, ev, specs[3:7], key, divergence_threshold=100.0, chunk_size=4,
                            make_hparams=make)
    np.testing.assert_array_equal(again["train_loss"].to_numpy(), whole["train_loss"].to_numpy()[3:7])
    # Each row is the run done alone with its repetition's key (the grid shares that key
    # across a repetition's runs; rtol: the shared draws turn per-run products into GEMMs).
    from dpjax import engine

    for i in (0, 3, 4):
        s = specs[i]
        alone = engine.run(algo, train, make(s), jax.random.fold_in(key, s.repetition), eval_fn=ev,
                           eval_data=eval_data)
        np.testing.assert_allclose(whole["train_loss"].iloc[i], alone.eval_metrics["train_loss"][-1], rtol=1e-5)
    # A threshold below every loss marks everything as diverged.
    low = table.run_table(algo, train, eval_data, ev, specs[:4], key, divergence_threshold=1e-6, chunk_size=4,
                          make_hparams=make)
    assert low["diverged"].all()
    with pytest.raises(ValueError, match="specs"):
        table.run_table(algo, train, eval_data, ev, [], key, divergence_threshold=1.0)


def test_select_uses_mean_training_loss_and_treats_divergence_as_infinite():
    rows = []
    # lr 0.1: losses 1.0, 1.2 -> mean 1.1 (test 0.30); lr 1.0: 0.5 and diverged -> inf; lr 0.5: 0.9, 1.0 -> 0.95.
    for lr, h, losses, tests in ((0.1, 0, (1.0, 1.2), (0.3, 0.3)), (1.0, 2, (0.5, math.inf), (0.1, float("nan"))),
                                 (0.5, 1, (0.9, 1.0), (0.2, 0.24))):
        for rep, (l, t) in enumerate(zip(losses, tests)):
            rows.append({"algorithm": "a", "calibration": "paper", "epsilon": 1.0, "trial": 0, "learning_rate": lr,
                         "clip_norm": 1.0, "noise_std": 0.1, "repetition": rep, "hp_index": h, "train_loss": l,
                         "test": t, "diverged": math.isinf(l)})
    sel = proto.select(pd.DataFrame(rows), ["algorithm", "calibration", "epsilon", "trial"])
    assert len(sel) == 1
    rec = sel.iloc[0]
    assert rec["learning_rate"] == 0.5
    assert rec["test"] == pytest.approx(0.22)
    assert rec["train_loss"] == pytest.approx(0.95)
    assert not rec["edge"]  # 0.5 is inside [0.1, 1.0]


@pytest.mark.slow
def test_run_families_keys_each_family_and_extends_only_with_a_rule():
    """Family i runs with keys.run_key(key, i) in balanced chunks; ``extend=None`` adds no column."""
    from dpjax import keys

    algo, train, eval_data, ev = _grid_setup()
    specs = [proto.RunSpec("a", "paper", 1.0, lr, 1e3, 0.2, rep, h) for h, lr in enumerate((0.1, 0.5)) for rep in range(2)]
    key = jax.random.key(5)
    make = proto.spec_hparams(algo, train.silo_sizes())  # absolute noise_std -> the family's multiplier
    fams = [table.Family(algo, specs, make_hparams=make), table.Family(algo, specs, make_hparams=make)]
    first, second = table.run_families(fams, train, eval_data, ev, key, divergence_threshold=100.0)
    for i, got in enumerate((first, second)):
        alone = table.run_table(algo, train, eval_data, ev, specs, keys.run_key(key, i), divergence_threshold=100.0,
                                chunk_size=table.balanced_chunk(len(specs)), make_hparams=make)
        pd.testing.assert_frame_equal(got, alone)
    assert not np.array_equal(first["train_loss"], second["train_loss"])  # different keys, different noise
    assert table.balanced_chunk(300) == 150 and table.balanced_chunk(256) == 256 and table.balanced_chunk(7) == 7


def test_extension_width_is_one_grid_value_of_one_repetition():
    """``extension_width``: the runs one repetition holds at one step size (every group and clip),
    at most the chunk; specs without the column fall back to a whole repetition."""
    noise = {("paper", 1.0): proto.NoiseEntry("paper", 1.0, 0.5, 1.0, "x"),
             ("tight", 1.0): proto.NoiseEntry("tight", 1.0, 0.4, 1.0, "x")}
    common = {"private_name": "a", "nonprivate_name": "b", "noise": noise, "learning_rates": (0.1, 0.5, 1.0),
              "repetitions": 2}
    one_clip = proto.build_specs(clip_norms=(1e3,), nonprivate_clip=False, **common)
    assert table.extension_width(one_clip, "learning_rate", 256) == 3  # 2 (calibration) + 1 non-private
    two_clips = proto.build_specs(clip_norms=(1e2, 1e3), nonprivate_clip=True, **common)
    assert table.extension_width(two_clips, "learning_rate", 256) == 6
    assert table.extension_width(two_clips, "learning_rate", 4) == 4
    assert table.extension_width([_LabelledSpec(0.1, 0), _LabelledSpec(0.2, 0)], "clip_norm", 256) == 2


@pytest.mark.slow
def test_grid_extensions_run_in_one_narrow_program(monkeypatch):
    """``run_families``' extension rounds run in chunks of ``extension_width`` lanes: every extension round
    compiles at most one program per family, and its rows are those ``run_table`` gives the same specs in
    chunks of that width (so the narrow chunks change nothing but the lane count)."""
    from dpjax import keys
    from dpjax.engine import program

    algo, train, eval_data, ev = _grid_setup()
    make = proto.spec_hparams(algo, train.silo_sizes())
    noise = {("paper", 1.0): proto.NoiseEntry("paper", 1.0, 0.3, 1.0, "x"),
             ("paper", 4.0): proto.NoiseEntry("paper", 4.0, 0.1, 1.0, "x")}
    runs = {"private_name": "a", "nonprivate_name": "b", "noise": noise, "clip_norms": (1e3,), "repetitions": 2,
            "nonprivate_clip": False}
    specs = proto.build_specs(learning_rates=(1e-4, 2e-4, 4e-4), **runs)  # tiny steps: the low edge is never chosen
    width = table.extension_width(specs, "learning_rate", table.balanced_chunk(len(specs)))
    assert width == 3
    done = []
    fam = table.Family(algo, specs, lambda requests, df: done.append(proto.extension_specs(requests, df, **runs))
                       or done[-1], make)
    key = jax.random.key(3)
    shapes, run_chunks = [], program.ChunkProgram.run_chunks
    monkeypatch.setattr(program.ChunkProgram, "run_chunks",
                        lambda self, args: shapes.append(self.shape) or run_chunks(self, args))
    before = program.COMPILATIONS["count"]
    (df,) = table.run_families([fam], train, eval_data, ev, key, divergence_threshold=100.0,
                               extend_by=["calibration", "epsilon"], max_extensions=3)
    assert len(done) == 3  # three rounds at the high edge, every group
    assert program.COMPILATIONS["count"] - before <= 2  # the first grid's program and one narrow one
    assert shapes == [(1, 1, 9)] * 2 + [(1, 1, 3)] * 6  # per repetition: the first grid, then 3 rounds
    ext = [s for round_ in done for s in round_]
    alone = table.run_table(algo, train, eval_data, ev, ext, keys.run_key(key, 0), divergence_threshold=100.0,
                            chunk_size=width, make_hparams=make, pad_to=width)
    got = df[df.grid_extension == 1].reset_index(drop=True)
    np.testing.assert_array_equal(got["train_loss"].to_numpy(), alone["train_loss"].to_numpy())
    # narrow_extensions=False: the extension rounds reuse the first grid's 9-lane program
    shapes.clear()
    (wide,) = table.run_families([fam], train, eval_data, ev, key, divergence_threshold=100.0,
                                 extend_by=["calibration", "epsilon"], max_extensions=3, narrow_extensions=False)
    assert shapes == [(1, 1, 9)] * 8
    assert len(wide) == len(df) and wide["learning_rate"].tolist() == df["learning_rate"].tolist()


def test_spec_hparams_are_shared_across_trials_only_for_equal_algorithms_and_silos():
    """``spec_hparams`` caches hparams for the process (``isrl_protocol.hparams_maker``): a later trial's
    maker built from an EQUAL algorithm and the same silo sizes returns the very same objects; another
    batch size (another sensitivity 2C/K) or other silo sizes must not hit that cache, and a cached
    multiplier equals noise_std over the sensitivity computed by hand."""
    algo, train, _, _ = _grid_setup()
    spec = proto.RunSpec("a", "paper", 1.0, 0.3, 2.0, 0.8, 0, 0)
    first = proto.spec_hparams(algo, train.silo_sizes())(spec)
    again = proto.spec_hparams(dataclasses.replace(algo), tuple(train.silo_sizes()))(dataclasses.replace(spec, repetition=1))
    assert again is first
    assert float(first.noise_multiplier) == pytest.approx(0.8 / (2 * 2.0 / 5), rel=1e-6)
    other_k = proto.spec_hparams(dataclasses.replace(algo, batch_size=10), train.silo_sizes())(spec)
    assert float(other_k.noise_multiplier) == pytest.approx(0.8 / (2 * 2.0 / 10), rel=1e-6)
    other_silos = proto.spec_hparams(algo, tuple(s + 1 for s in train.silo_sizes()))(spec)
    assert other_silos is not first
