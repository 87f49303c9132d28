"""Bad input everywhere: every case must end in its category.

* Python API: a ``ValueError`` (or, for missing data, a ``FileNotFoundError``)
  whose message names the argument (or file) and says what is wrong.
* CLI: exit status 2, one ``dpjax: error:`` line, no traceback, and no output
  directory left behind.

Each table row is one distinct bad input (ids say which); the counts are in
dpjax/RELIABILITY.md.
"""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.robustness.conftest import TINY_SWEEP, assert_clean_failure, run_cli


# -- Python API ----------------------------------------------------------------
def _hp(*a, **k):
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams

    return MbSgdHParams.create(*a, **k)


def _silos(*a, **k):
    from dpjax.engine import SiloData

    return SiloData.from_silos(*a, **k)


def _small(labels=None, num_available=2, batch_size=4):
    from dpjax.algorithms.isrl_mbsgd import NoisyMbSgd
    from dpjax.primitives import FixedAvailability
    from dpjax.problems import LogisticRegression

    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(10, 3)).astype(np.float32) for _ in range(3)]
    ys = [(labels if labels is not None else rng.integers(0, 2, 10)).astype(np.float32) for _ in range(3)]
    algo = NoisyMbSgd(LogisticRegression(3), num_rounds=2, batch_size=batch_size,
                      availability=FixedAvailability(num_available))
    return algo, _silos(xs, ys)


def _run(labels=None, key=None, **k):
    from dpjax.engine import run

    algo, data = _small(labels, **k)
    return run(algo, data, _hp(0.1), jax.random.key(0) if key is None else key)


def _run_many(keys_):
    from dpjax.engine import run_many, stack_hparams

    algo, data = _small()
    return run_many(algo, data, stack_hparams([_hp(0.1), _hp(0.2)]), keys_)


def _softmax_labels():
    from dpjax.engine import run
    from dpjax.algorithms.isrl_mbsgd import NoisyMbSgd
    from dpjax.primitives import FixedAvailability
    from dpjax.problems import SoftmaxRegression

    x = [np.ones((6, 2), np.float32)] * 2
    y = [np.array([0, 1, 2, 3, 4, 7], np.float32)] * 2
    algo = NoisyMbSgd(SoftmaxRegression(2, 5), num_rounds=1, batch_size=2, availability=FixedAvailability(1))
    return run(algo, _silos(x, y), _hp(0.1), jax.random.key(0))


def _noise(std):
    from dpjax.primitives.noise import add_gaussian_noise

    return add_gaussian_noise(jax.random.key(0), jnp.zeros(3), std)


def _sampler(*a):
    from dpjax.primitives.sampling import make_sampler

    return make_sampler(*a)


def _schedule(**k):
    from dpjax.accounting import GaussianSchedule

    args = dict(noise_std=1.0, contribution_bound=1.0, sampling="poisson", dataset_size=100, batch_size=10, steps=5)
    return GaussianSchedule(**{**args, **k})


def _task_cfg(**k):
    from dpjax.tasks.isrl_mnist import IsrlMnistConfig

    return IsrlMnistConfig(**k)


def _sweep_cfg(**changes):
    import tomllib

    from dpjax.sweep.config import SweepConfig

    d = tomllib.loads(TINY_SWEEP)
    for key, value in changes.items():
        section, _, field = key.rpartition(".")
        target = d[section] if section else d
        if value is _DELETE:
            target.pop(field)
        else:
            target[field] = value
    return SweepConfig.from_dict(d)


_DELETE = object()
_X = np.zeros((5, 3), np.float32)
_Y = np.zeros(5, np.float32)
_NAN_X = np.array([[0.0, 1.0], [math.nan, 0.0]], np.float32)

API_CASES = [
    # hyperparameters: Python, NumPy and jax scalars are all checked (tracers are not)
    ("lr-negative", lambda: _hp(-0.1), "learning_rate=-0.1"),
    ("lr-zero", lambda: _hp(0.0), "learning_rate=0.0"),
    ("lr-jax-float32-negative", lambda: _hp(jnp.float32(-0.1)), "learning_rate="),
    ("lr-numpy-nan", lambda: _hp(np.float32("nan")), "learning_rate="),
    ("lr-inf", lambda: _hp(math.inf), "learning_rate=inf"),
    ("lr-bool", lambda: _hp(True), "learning_rate=True"),
    ("noise-negative", lambda: _hp(0.1, noise_multiplier=-1.0), "noise_multiplier=-1.0"),
    ("noise-jax-inf", lambda: _hp(0.1, noise_multiplier=jnp.float32(jnp.inf)), "noise_multiplier="),
    ("clip-zero", lambda: _hp(0.1, clip_norm=0.0), "clip_norm=0.0"),
    ("clip-jax-negative", lambda: _hp(0.1, clip_norm=jnp.float32(-1.0)), "clip_norm="),
    ("gaussian-noise-std-negative", lambda: _noise(-1.0), "std=-1.0"),
    ("gaussian-noise-std-nan", lambda: _noise(math.nan), "std=nan"),
    ("gaussian-noise-std-jax-negative", lambda: _noise(jnp.float32(-2.0)), "std="),
    # silo data
    ("silos-one-array", lambda: _silos(_X, _Y), "xs (a ndarray"),
    ("silos-strings", lambda: _silos(["ab", "cd"], ["x", "y"]), "dtype"),
    ("silos-empty-list", lambda: _silos([], []), "xs=[]"),
    ("silos-zero-size", lambda: _silos([np.zeros((0, 3))], [np.zeros(0)]), "xs[0]"),
    ("silos-nan", lambda: _silos([_NAN_X], [np.zeros(2)]), "NaN"),
    ("silos-length-mismatch", lambda: _silos([_X], [np.zeros(4)]), "ys[0] has 4"),
    ("silos-count-mismatch", lambda: _silos([_X, _X], [_Y]), "ys has 1"),
    ("silos-scalar-label", lambda: _silos([_X], [np.float32(1)]), "ys[0]"),
    # engine
    ("run-many-integer-key", lambda: _run_many(0), "keys_=0"),
    ("run-integer-key", lambda: _run(key=0), "key=0"),
    ("run-int32-array-key", lambda: _run(key=np.arange(3, dtype=np.int32)), "key="),
    ("run-many-one-key", lambda: _run_many(jax.random.key(0)), "keys_"),
    ("logistic-labels-plus-minus-one", lambda: _run(labels=np.where(np.arange(10) % 2, 1, -1)), "labels in {0, 1}"),
    ("logistic-labels-digits", lambda: _run(labels=np.arange(10)), "labels in {0, 1}"),
    ("softmax-label-out-of-range", _softmax_labels, "num_classes=5"),
    ("M-greater-than-N", lambda: _run(num_available=5), "num_available=5"),
    ("batch-larger-than-silo", lambda: _run(batch_size=40), "batch_size=40"),
    ("sampler-full-with-batch", lambda: _sampler("full", 5), "batch_size=5"),
    ("sampler-unknown", lambda: _sampler("bogus", 5), "sampling='bogus'"),
    # accounting schedule (rates > 1, bad noise)
    ("schedule-batch-over-n", lambda: _schedule(batch_size=200), "batch_size=200"),
    ("schedule-noise-negative", lambda: _schedule(noise_std=-1.0), "noise_std"),
    ("schedule-steps-zero", lambda: _schedule(steps=0), "steps"),
    # task config
    ("task-epsilon-zero", lambda: _task_cfg(epsilon=0.0), "epsilon=0.0"),
    ("task-epsilon-nan", lambda: _task_cfg(epsilon=math.nan), "epsilon=nan"),
    ("task-M-over-25", lambda: _task_cfg(silos_per_round=26), "silos_per_round=26"),
    ("task-lr-negative", lambda: _task_cfg(learning_rates=(0.1, -1.0)), "learning_rates[1]=-1.0"),
    ("task-unknown-sampling", lambda: _task_cfg(sampling="bogus"), "sampling='bogus'"),
    ("task-zero-repetitions", lambda: _task_cfg(repetitions=0), "repetitions=0"),
    # sweep configs
    ("sweep-unknown-key", lambda: _sweep_cfg(colour="red"), "colour is not a known config key"),
    ("sweep-empty-grid", lambda: _sweep_cfg(grid={}), "grid is empty"),
    ("sweep-empty-axis", lambda: _sweep_cfg(**{"grid.learning_rate": []}), "grid.learning_rate=[]"),
    ("sweep-lr-negative", lambda: _sweep_cfg(**{"grid.learning_rate": [0.1, -0.5]}), "grid.learning_rate[1]=-0.5"),
    ("sweep-lr-nan", lambda: _sweep_cfg(**{"grid.learning_rate": [math.nan]}), "grid.learning_rate[0]=nan"),
    ("sweep-noise-negative", lambda: _sweep_cfg(**{"grid.noise_multiplier": [-1.0]}),
     "grid.noise_multiplier[0]=-1.0"),
    ("sweep-noise-inf", lambda: _sweep_cfg(**{"grid.noise_multiplier": [math.inf]}), "grid.noise_multiplier[0]=inf"),
    ("sweep-clip-zero", lambda: _sweep_cfg(**{"grid.clip_norm": [0.0]}), "grid.clip_norm[0]=0.0"),
    ("sweep-clip-zero-maxnorm", lambda: _sweep_cfg(**{"grid.clip_norm": ["0*maxnorm"]}), "grid.clip_norm[0]"),
    ("sweep-lr-string", lambda: _sweep_cfg(**{"grid.learning_rate": ["fast"]}), "grid.learning_rate[0]='fast'"),
    ("sweep-rounds-string", lambda: _sweep_cfg(num_rounds="35"), "num_rounds='35'"),
    ("sweep-unknown-algorithm", lambda: _sweep_cfg(algorithm="sgd-9000"), "sgd-9000"),
    ("sweep-unknown-dataset", lambda: _sweep_cfg(**{"data.name": "imagenet"}), "imagenet"),
    ("sweep-unknown-data-option", lambda: _sweep_cfg(**{"data.colour": 1}), "data.colour"),
    ("sweep-unknown-axis", lambda: _sweep_cfg(**{"grid.momentum": [0.9]}), "grid.momentum"),
    ("sweep-repetition-zero", lambda: _sweep_cfg(**{"grid.repetition": 0}), "grid.repetition=0"),
    ("sweep-seed-negative", lambda: _sweep_cfg(seed=-1), "seed=-1"),
    ("sweep-config-chunk-size-zero", lambda: _sweep_cfg(chunk_size=0), "chunk_size=0"),
    ("sweep-epsilon-negative", lambda: _sweep_cfg(
        privacy={"accountant": "rdp", "delta": 1e-5}, **{"grid.noise_multiplier": _DELETE, "grid.epsilon": [-1.0]}),
     "grid.epsilon[0]=-1.0"),
    ("sweep-delta-above-one", lambda: _sweep_cfg(
        privacy={"accountant": "rdp", "delta": 1.5}, **{"grid.noise_multiplier": _DELETE, "grid.epsilon": [1.0]}),
     "privacy.delta=1.5"),
    ("sweep-missing-grid-lr", lambda: _sweep_cfg(**{"grid.learning_rate": _DELETE}), "grid.learning_rate is missing"),
]


@pytest.mark.parametrize("make,fragment", [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES])
def test_api_bad_input_raises_value_error_naming_it(make, fragment):
    with pytest.raises(ValueError) as info:
        make()
    assert fragment in str(info.value), str(info.value)


def test_tracers_are_not_validated_on_the_host():
    """The checks above never touch traced values (they would fail to concretise)."""
    out = jax.vmap(lambda lr: _hp(lr, noise_multiplier=lr).learning_rate)(jnp.array([0.1, 0.2]))
    np.testing.assert_allclose(out, [0.1, 0.2])


# -- data files ----------------------------------------------------------------
def _write(path, text_or_bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(text_or_bytes, bytes) else path.write_text)(text_or_bytes)
    return path.parent


def _mnist(d, **kw):
    from dpjax.data import load_mnist

    return load_mnist(d, source="files", **kw)


def _npz(t, **arrays):
    np.savez(t / "mnist.npz", **arrays)
    return t


def _valid_npz_bytes(tmp_path) -> bytes:
    p = tmp_path / "ok.npz"
    np.savez(p, x_train=np.zeros((4, 28, 28), np.uint8), y_train=np.zeros(4, np.uint8),
             x_test=np.zeros((2, 28, 28), np.uint8), y_test=np.zeros(2, np.uint8))
    return p.read_bytes()


OBESITY = "ObesityDataSet_raw_and_data_sinthetic.csv"
INS_HEADER = "age,sex,bmi,children,smoker,region,charges\n"

FILE_CASES = [
    ("npz-empty", lambda t: _mnist(_write(t / "mnist.npz", b"")), "not a readable .npz"),
    ("npz-garbage", lambda t: _mnist(_write(t / "mnist.npz", b"\x00garbage" * 50)), "not a readable .npz"),
    ("npz-truncated", lambda t: _mnist(_write(t / "mnist.npz", _valid_npz_bytes(t)[:300])), "not a readable .npz"),
    ("npz-wrong-arrays", lambda t: _mnist(_npz(t, a=np.zeros(3))), "lacks the arrays"),
    ("obesity-header-only", lambda t: _load("load_obesity", _write(t / OBESITY, "Gender,Age\n")), "no data rows"),
    ("insurance-header-only", lambda t: _load("load_insurance", _write(t / "insurance.csv", INS_HEADER), source="files"),
     "no data rows"),
    ("insurance-non-numeric", lambda t: _load("load_insurance", _write(
        t / "insurance.csv", INS_HEADER + "19,female,27.9,0,yes,southwest,16884.9\nold,male,33.8,1,no,southeast,1725.5\n"),
        source="files", verify=False), "data row 2, column 'age': 'old' is not a number"),
    ("cal-housing-non-numeric", lambda t: _load("load_california_housing", _write(
        t / "cal_housing.data", "1,2,3,4,5,6,7,8,9\n1,2,x,4,5,6,7,8,9\n"), verify=False), "cal_housing.data"),
    ("gas-turbine-header-only", lambda t: _gas_header_only(t), "no data rows"),
    ("blogfeedback-empty", lambda t: _load("load_blogfeedback", _write(t / "blogData_train.csv", "")),
     "blogData_train.csv is not a readable CSV"),
    ("blogfeedback-non-numeric", lambda t: _load("load_blogfeedback", _write(
        t / "blogData_train.csv", ",".join(["1"] * 280 + ["many"]) + "\n"), verify=False), "row 1, column 281"),
    ("mnist-dir-missing-no-package-fallback", lambda t: _load("load_mnist", t / "nonexistent"), "does not exist"),
    ("insurance-truncated-at-line", lambda t: _truncated_insurance(t), "has 3 data rows but the published file has 1338"),
]


def _load(name, d, **kw):
    import dpjax.data
    from dpjax.data import diff2

    fn = getattr(dpjax.data, name, None) or getattr(diff2, name)
    return fn(d, **kw)


def _gas_header_only(t):
    for y in range(2011, 2016):
        _write(t / f"gt_{y}.csv", "AT,AP,AH,AFDP,GTEP,TIT,TAT,TEY,CDP,CO,NOX\n")
    return _load("load_gas_turbine", t, verify=False)


def _truncated_insurance(t):
    rows = "".join(f"{20 + i},female,27.9,0,yes,southwest,1688{i}.9\n" for i in range(3))
    return _load("load_insurance", _write(t / "insurance.csv", INS_HEADER + rows), source="files")


@pytest.mark.parametrize("make,fragment", [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_bad_data_file_raises_naming_the_file(tmp_path, make, fragment):
    with pytest.raises((ValueError, FileNotFoundError)) as info:
        make(tmp_path)
    assert fragment in str(info.value), str(info.value)


# -- output paths and sweep directories (Python API) -------------------------------
def test_output_dir_that_is_a_file_unwritable_or_another_run(tmp_path):
    from dpjax import outputs

    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        outputs.claim_output_dir(f, {"a": 1})
    with pytest.raises(ValueError, match="not writable"):
        outputs.claim_output_dir(f / "sub", {"a": 1})
    d, _ = outputs.claim_output_dir(tmp_path / "run", {"a": 1})
    (d / "results.csv").write_text("old")
    outputs.finish_output_dir(d, {"a": 1})
    with pytest.raises(ValueError, match="another run's results; pass --overwrite"):
        outputs.claim_output_dir(d, {"a": 2})
    assert (d / "results.csv").read_text() == "old"
    assert outputs.claim_output_dir(d, {"a": 1})[0] == d  # the same run may rewrite its own results
    assert outputs.claim_output_dir(d, {"a": 2}, overwrite=True)[0] == d


def test_sweep_store_refuses_file_and_second_writer(tmp_path):
    from dpjax.sweep.store import Store

    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        Store(f).prepare()
    with pytest.raises(ValueError, match="not writable"):
        Store(f / "sub").prepare()
    a, b = Store(tmp_path / "s"), Store(tmp_path / "s")
    a.prepare()
    a.lock(0)
    try:
        with pytest.raises(ValueError, match="another dpjax sweep"):
            b.lock(0)
        b.lock(1)  # another share of the same directory is fine
        b.unlock()
    finally:
        a.unlock()
    b.lock(0)  # free again once released
    b.unlock()


# -- CLI -----------------------------------------------------------------------------
def _sweep_files(t):
    cfg = t / "tiny.toml"
    cfg.write_text(TINY_SWEEP)
    return cfg


def _other_run_dir(t):
    d = t / "old"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"epsilon": 3.0}))
    (d / "results.csv").write_text("algorithm,value\nx,1\n")
    return d


def _different_sweep_dir(t):
    d = t / "sw"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"name": "other", "algorithm": "isrl-mbsgd"}))
    return d


def _damaged_store(t, empty=False):
    from dpjax.sweep.store import Store

    d = t / "store"
    s = Store(d)
    s.prepare()
    import pandas as pd

    (d / "config.json").write_text("{}")
    s.write_chunk("c-0000", pd.DataFrame({"run_id": ["a", "b"], "x": [1.0, 2.0]}),
                  pd.DataFrame({"run_id": ["a"], "eval_round": [1]}))
    p = d / "runs" / "c-0000.csv"
    p.write_text("" if empty else p.read_text().splitlines()[0] + "\n")  # emptied, or cut after the header
    return d


def _file(t):
    f = t / "afile"
    f.write_text("x")
    return f


RUN = ["run", "isrl-mnist-trial", "--no-progress"]
CLI_CASES = [
    ("run-epsilon-negative-exponent", lambda t: RUN + ["--epsilon", "-1e-5", "--out", t / "o"], ["epsilon=-1e-05"]),
    ("run-epsilon-minus-inf", lambda t: RUN + ["--epsilon", "-inf", "--out", t / "o"], ["epsilon=-inf"]),
    ("run-epsilon-nan", lambda t: RUN + ["--epsilon", "nan", "--out", t / "o"], ["epsilon=nan"]),
    ("run-M-zero", lambda t: RUN + ["--silos-per-round", "0", "--out", t / "o"], ["silos_per_round=0"]),
    ("run-rounds-negative", lambda t: RUN + ["--rounds", "-3", "--out", t / "o"], ["rounds=-3"]),
    ("run-lr-negative", lambda t: RUN + ["--learning-rates", "-1e-3", "--out", t / "o"], ["learning_rates[0]"]),
    ("run-batch-zero", lambda t: RUN + ["--batch-size", "0", "--out", t / "o"], ["batch_size=0"]),
    ("run-data-dir-missing", lambda t: RUN + ["--data-dir", t / "nonexistent", "--out", t / "o"],
     ["does not exist", "--data-dir"]),
    ("run-out-is-file", lambda t: RUN + ["--out", _file(t)], ["--out=", "is a file"]),
    ("run-out-unwritable", lambda t: RUN + ["--out", _file(t) / "sub"], ["not writable"]),
    ("run-out-holds-other-run", lambda t: RUN + ["--out", _other_run_dir(t)], ["--overwrite"]),
    ("run-sampling-unknown", lambda t: RUN + ["--sampling", "bogus"], ["invalid choice"]),
    ("run-epsilon-not-a-number", lambda t: RUN + ["--epsilon", "lots"], ["invalid float value"]),
    ("reproduce-unknown-figure", lambda t: ["reproduce", "fig-99", "--out", t / "o"], ["figure='fig-99'"]),
    ("reproduce-data-dir-missing", lambda t: ["reproduce", "isrl-obesity", "--quick", "--data-dir", t / "none",
                                               "--out", t / "o"], ["does not exist", "--data-dir"]),
    ("reproduce-out-is-file", lambda t: ["reproduce", "isrl-obesity", "--quick", "--out", _file(t)], ["is a file"]),
    ("reproduce-out-holds-other-run", lambda t: ["reproduce", "isrl-obesity", "--out", _other_run_dir(t)],
     ["--overwrite"]),
    ("sweep-config-missing", lambda t: ["sweep", t / "none.toml", "--out", t / "o"], ["none.toml", "does not exist"]),
    ("sweep-config-invalid-toml", lambda t: ["sweep", _write(t / "c" / "bad.toml", "grid = [") / "bad.toml",
                                              "--out", t / "o"], ["not valid TOML"]),
    ("sweep-chunk-size-zero", lambda t: ["sweep", _sweep_files(t), "--out", t / "o", "--chunk-size", "0"],
     ["chunk_size=0"]),
    ("sweep-vmap-width-negative", lambda t: ["sweep", _sweep_files(t), "--out", t / "o", "--vmap-width", "-2"],
     ["vmap_width=-2"]),
    ("sweep-max-chunks-negative", lambda t: ["sweep", _sweep_files(t), "--out", t / "o", "--max-chunks", "-1"],
     ["max_chunks=-1"]),
    ("sweep-process-index-out-of-range", lambda t: ["sweep", _sweep_files(t), "--out", t / "o", "--process-index",
                                                    "2", "--process-count", "2"], ["process_index=2"]),
    ("sweep-out-is-file", lambda t: ["sweep", _sweep_files(t), "--out", _file(t)], ["is a file"]),
    ("sweep-out-unwritable", lambda t: ["sweep", _sweep_files(t), "--out", _file(t) / "x"], ["not writable"]),
    ("sweep-resume-different-config", lambda t: ["sweep", _sweep_files(t), "--out", _different_sweep_dir(t)],
     ["holds a different sweep"]),
    ("sweep-data-dir-for-synthetic", lambda t: ["sweep", _sweep_files(t), "--out", t / "o", "--data-dir", t],
     ["reads no files"]),
    ("plot-not-a-sweep", lambda t: ["plot", t], ["not a sweep directory"]),
    ("plot-damaged-chunk", lambda t: ["plot", _damaged_store(t)], ["c-0000.csv does not match its manifest"]),
    ("plot-empty-chunk", lambda t: ["plot", _damaged_store(t, empty=True)], ["runs/c-0000.csv does not match"]),
]


@pytest.mark.parametrize("make,fragments", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys, monkeypatch, make, fragments):
    monkeypatch.chdir(tmp_path)  # nothing may be written to the working directory either
    monkeypatch.delenv("DPJAX_DATA_DIR", raising=False)
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = make(tmp_path)
    made = sorted(p.name for p in tmp_path.iterdir())
    code, _, err = run_cli(argv, capsys)
    assert_clean_failure(code, err, *fragments)
    after = sorted(p.name for p in tmp_path.iterdir())
    assert after == made, f"the failed command left {set(after) - set(made)} behind (before: {before})"
