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


def _prim(name, *args):
    import dpjax.primitives

    return getattr(dpjax.primitives, name)(*args)


def _sampling(name, *args):
    from dpjax.primitives import sampling

    return getattr(sampling, name)(*args)


def _sq_loss(params, x, y):
    return jnp.sum((x * params - y) ** 2)


def _hparams(module, cls, *args, **kwargs):
    import importlib

    return getattr(importlib.import_module(f"dpjax.algorithms.{module}"), cls).create(*args, **kwargs)


def _acsa():
    from dpjax.algorithms.accelerated import AcsaSchedule

    return AcsaSchedule.single_stage(3, 1.0)


def _pvec(probability=0.1):
    from dpjax.primitives.shuffle_protocols import PvecParams

    return PvecParams.create(4, 10, probability)


def _sco(clip_norm=1.0, step=0.1):
    from dpjax.algorithms.shuffle_sco import ScoHParams

    return ScoHParams.single_phase(3, 2, step, clip_norm=clip_norm)


def _run_key(seed):
    from dpjax import keys

    return keys.run_key(seed, 0)


def _mbsgd_alg(**k):
    from dpjax.algorithms.isrl_mbsgd import NoisyMbSgd
    from dpjax.primitives import FixedAvailability
    from dpjax.problems import LogisticRegression

    return NoisyMbSgd(LogisticRegression(3), batch_size=2, availability=FixedAvailability(1), **k)


def _account_schedule(noise_multiplier, neighboring="add-remove", sampling="poisson", steps=100, batch=256, n=60000):
    from dpjax.accounting import GaussianSchedule

    factor = 2.0 if neighboring == "replace-one" else 1.0
    return GaussianSchedule(noise_std=noise_multiplier * factor, contribution_bound=1.0, sampling=sampling,
                            dataset_size=n, batch_size=batch, steps=steps, neighboring=neighboring)


def _eps(z, accountant="best", neighboring="add-remove", sampling="poisson", steps=100, batch=256, n=60000):
    from dpjax.accounting import compute_epsilon

    return compute_epsilon(_account_schedule(z, neighboring, sampling, steps, batch, n), 1e-5, accountant)


def _tight(z):
    from dpjax.accounting.tight import tight_epsilon

    return tight_epsilon(_account_schedule(z), 1e-5, "rdp")


def _cal(target, accountant):
    from dpjax.accounting import calibrate_noise

    sampling = "without-replacement" if accountant.startswith("paper") else "poisson"
    neighboring = "replace-one" if accountant.startswith("paper") else "add-remove"
    return calibrate_noise(_account_schedule(1.0, neighboring, sampling), target, 1e-5, accountant)


def _cal_full(target, accountant):
    from dpjax.accounting import GaussianSchedule, calibrate_noise

    s = GaussianSchedule(noise_std=1.0, contribution_bound=1.0, sampling="full", dataset_size=100, batch_size=None,
                         steps=10)
    return calibrate_noise(s, target, 1e-5, accountant)


def _binary_toml():
    import tempfile

    from dpjax.sweep.config import SweepConfig

    d = tempfile.mkdtemp()
    p = f"{d}/binary.toml"
    with open(p, "wb") as f:
        f.write(b"name = \"x\"\n\xff\xfe\x00\x81 garbage")
    return SweepConfig.from_toml(p)


def _config_dir():
    import tempfile

    from dpjax.sweep.config import SweepConfig

    return SweepConfig.from_toml(tempfile.mkdtemp())


_G = jnp.ones((4, 3))
_T = jnp.ones(3)
_X3 = np.ones((4, 3), np.float32)
_Y3 = np.zeros((4, 3), np.float32)
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
] + [
    # -- issue #23: primitives with concrete values of every kind (Python, NumPy, jax scalars, arrays) --------
    ("clipped-sum-numpy-negative", lambda: _prim("clipped_sum", _G, np.float32(-2.0)), "clip_norm=np.float32(-2.0)"),
    ("clipped-sum-jax-negative", lambda: _prim("clipped_sum", _G, jnp.float32(-2.0)), "clip_norm=-2.0 must be >= 0"),
    ("clipped-sum-one-element-array", lambda: _prim("clipped_sum", _G, jnp.array([-2.0])), "clip_norm=-2.0"),
    ("clipped-sum-nan", lambda: _prim("clipped_sum", _G, math.nan), "clip_norm=nan must not be NaN"),
    ("clipped-sum-add-remove-negative", lambda: _prim("clipped_sum", _G, -1.0, None, "add-remove"), "clip_norm=-1.0"),
    ("clip-to-norm-negative", lambda: _prim("clip_to_norm", _T, -1.0), "clip_norm=-1.0 must be >= 0"),
    ("clip-to-norm-jax-nan", lambda: _prim("clip_to_norm", _T, jnp.float32(jnp.nan)), "clip_norm=nan"),
    ("clip-to-norm-numpy-array", lambda: _prim("clip_to_norm", _T, np.array([-1.0])), "clip_norm=-1.0"),
    ("clip-per-example-negative", lambda: _prim("clip_per_example", _G, -2.0), "clip_norm=-2.0"),
    ("clip-per-example-int64", lambda: _prim("clip_per_example", _G, np.int64(-2)), "clip_norm=np.int64(-2)"),
    ("sensitivity-numpy-negative", lambda: _prim("sensitivity_of_clipped_sum", np.float64(-1.0)), "clip_norm="),
    ("per-example-clipped-sum-negative", lambda: _prim("per_example_clipped_sum", _sq_loss, _T, _X3, _Y3, -1.0),
     "clip_norm=-1.0"),
    ("ghost-clipped-sum-negative", lambda: _prim("ghost_clipped_sum", _sq_loss, _T, _X3, _Y3, -1.0), "clip_norm=-1.0"),
    ("clipped-difference-sum-nan", lambda: _prim("clipped_difference_sum", _sq_loss, _T, _T, _X3, _Y3, math.nan),
     "clip_norm=nan"),
    ("project-l2-ball-negative", lambda: _prim("project_l2_ball", _T, -1.0), "radius=-1.0 must be >= 0"),
    ("project-l2-ball-nan", lambda: _prim("project_l2_ball", _T, math.nan), "radius=nan"),
    ("project-l2-ball-jax-negative", lambda: _prim("project_l2_ball", _T, jnp.float32(-1.0)), "radius=-1.0"),
    ("gaussian-like-negative", lambda: _prim("gaussian_like", jax.random.key(0), _T, -1.0), "std=-1.0"),
    ("gaussian-like-array-nan", lambda: _prim("gaussian_like", jax.random.key(0), _T, jnp.array([jnp.nan])), "std="),
    ("gaussian-like-inf", lambda: _prim("gaussian_like", jax.random.key(0), _T, math.inf), "std=inf must be finite"),
    ("without-replacement-k-over-size", lambda: _prim("sample_without_replacement", jax.random.key(0), 5, 10, 8),
     "batch_size=8 must be <= size=5"),
    ("without-replacement-size-over-n-max", lambda: _prim("sample_without_replacement", jax.random.key(0), 12, 10, 3),
     "size=12 must be <= 10"),
    ("without-replacement-k-zero", lambda: _prim("sample_without_replacement", jax.random.key(0), 5, 10, 0),
     "batch_size=0 must be >= 1"),
    ("subset-mask-k-over-size", lambda: _sampling("subset_mask_without_replacement", jax.random.key(0), 5, 10, 8),
     "batch_size=8 must be <= size=5"),
    ("permutation-size-over-n-max", lambda: _prim("valid_first_permutation", jax.random.key(0), 11, 10), "size=11"),
    ("poisson-rate-above-one", lambda: _prim("poisson_sample", jax.random.key(0), 5, 10, 1.5, 4), "rate=1.5"),
    ("poisson-rate-negative", lambda: _prim("poisson_sample", jax.random.key(0), 5, 10, -0.5, 4), "rate=-0.5"),
    ("poisson-rate-nan", lambda: _prim("poisson_sample", jax.random.key(0), 5, 10, math.nan, 4), "rate=nan"),
    ("poisson-rate-numpy", lambda: _prim("poisson_sample", jax.random.key(0), 5, 10, np.float32(2.0), 4), "rate="),
    ("poisson-buffer-zero", lambda: _prim("poisson_sample", jax.random.key(0), 5, 10, 0.5, 0), "max_batch_size=0"),
    ("with-replacement-size-zero", lambda: _prim("sample_with_replacement", jax.random.key(0), 0, 4), "size=0"),
    # -- every hyperparameter type's create, with one-element arrays and NumPy/jax scalars ----------------
    ("mbsgd-clip-one-element-array", lambda: _hp(0.1, 0.0, jnp.array([-1.0])), "clip_norm=-1.0 must be > 0"),
    ("mbsgd-lr-batched-array", lambda: _hp(jnp.array([0.1, -0.2])), "learning_rate[1]="),
    ("mbsgd-noise-numpy-array", lambda: _hp(0.1, np.array([-1.0])), "noise_multiplier=-1.0"),
    ("dpsgd-lr-numpy", lambda: _hparams("dpsgd_general", "DpSgdHParams", np.float32(-0.1)), "learning_rate="),
    ("dpsgd-noise-one-element", lambda: _hparams("dpsgd_general", "DpSgdHParams", 0.1, jnp.array([-1.0])),
     "noise_multiplier=-1.0"),
    ("dpsgd-clip-jax-zero", lambda: _hparams("dpsgd_general", "DpSgdHParams", 0.1, 0.5, jnp.float32(0.0)),
     "clip_norm=0.0"),
    ("accelerated-noise-numpy", lambda: _hparams("accelerated", "AcceleratedHParams", _acsa(), np.float32(-1.0)),
     "noise_multiplier="),
    ("accelerated-clip-one-element", lambda: _hparams("accelerated", "AcceleratedHParams", _acsa(), 0.0,
                                                      jnp.array([0.0])), "clip_norm=0.0 must be > 0"),
    ("sdp-clip-numpy", lambda: _hparams("shuffled", "SdpHParams", _acsa(), _pvec(), np.float32(-1.0)), "clip_norm="),
    ("unbalanced-lr-one-element", lambda: _hparams("unbalanced", "UnbalancedHParams", jnp.array([-1.0]), [0.1]),
     "learning_rate=-1.0"),
    ("diff2-clip-one-element", lambda: _hparams("diff2", "Diff2HParams", 0.1, 1, jnp.array([-1.0])),
     "clip_restart=-1.0"),
    ("diff2-sigma-numpy-nan", lambda: _hparams("diff2", "Diff2HParams", 0.1,
                                               noise_multiplier_diff=np.float32("nan")),
     "noise_multiplier_diff="),
    ("diff2-restart-numpy-zero", lambda: _hparams("diff2", "Diff2HParams", 0.1, np.int32(0)), "restart_interval=np.int32(0) must be >= 1"),
    ("sco-clip-one-element", lambda: _sco(clip_norm=jnp.array([-1.0])), "clip_norm=-1.0"),
    ("sco-step-negative", lambda: _sco(step=-0.1), "step="),
    ("pvec-probability-half", lambda: _pvec(probability=0.5), "probability=0.5"),
    # -- seeds and rounds: jax keeps 32 bits of a seed; round indices are int32 --------------------------
    ("run-key-seed-2-pow-32", lambda: _run_key(2**32), "seed=4294967296 must be in [0, 4294967295]"),
    ("run-key-seed-negative", lambda: _run_key(-1), "seed=-1"),
    ("run-key-seed-numpy-huge", lambda: _run_key(np.uint64(2**40)), "seed="),
    ("task-seed-huge", lambda: _task_cfg(seed=1180591620717411303424), "seed=1180591620717411303424"),
    ("task-rounds-beyond-int32", lambda: _task_cfg(rounds=2**31), "rounds=2147483648 must be <= 1073741824"),
    ("engine-rounds-beyond-int32", lambda: _mbsgd_alg(num_rounds=10**12), "num_rounds=1000000000000"),
    # -- sweep sizes, refused before anything is expanded or allocated ---------------------------------------
    ("sweep-logspace-billion", lambda: _sweep_cfg(**{"grid.learning_rate": {"logspace": [-3, -1, 1_000_000_000]}}),
     "above max_runs=100,000"),
    ("sweep-three-1000-axes", lambda: _sweep_cfg(**{"grid.learning_rate": {"linspace": [0.001, 1, 1000]},
                                                    "grid.repetition": 1000, "grid.trial": 1000}), "runs ("),
    ("sweep-trial-trillion", lambda: _sweep_cfg(**{"grid.trial": 10**12}), "above max_runs"),
    ("sweep-max-runs-small", lambda: _sweep_cfg(max_runs=5), "grid has 36 runs"),
    ("sweep-max-runs-zero", lambda: _sweep_cfg(max_runs=0), "max_runs=0"),
    ("sweep-max-data-negative", lambda: _sweep_cfg(max_data_mb=-1.0), "max_data_mb=-1.0"),
    ("sweep-logspace-overflow", lambda: _sweep_cfg(**{"grid.learning_rate": {"logspace": [-3, 400, 3]}}),
     "reaches 10^400, outside float64"),
    ("sweep-logspace-underflow", lambda: _sweep_cfg(**{"grid.learning_rate": {"logspace": [-400, 0, 3]}}),
     "reaches 10^-400"),
    ("sweep-linspace-inf", lambda: _sweep_cfg(**{"grid.learning_rate": {"linspace": [0.1, math.inf, 3]}}),
     "linspace[1]=inf must be finite"),
    ("sweep-logspace-num-float", lambda: _sweep_cfg(**{"grid.learning_rate": {"logspace": [-3, 0, 3.5]}}),
     "logspace[2]=3.5 must be an integer"),
    ("sweep-logspace-base-inf", lambda: _sweep_cfg(**{"grid.learning_rate": {"logspace": [-3, 0, 3], "base": math.inf}}),
     "base=inf"),
    ("sweep-data-n-1e11", lambda: _sweep_cfg(**{"data.n": 100_000_000_000}), "above max_data_mb=256"),
    ("sweep-data-dim-huge", lambda: _sweep_cfg(**{"data.dim": 10**9}), "dim=1,000,000,000"),
    ("sweep-data-n-negative", lambda: _sweep_cfg(**{"data.n": -5}), "data.n=-5"),
    ("sweep-rounds-1e14", lambda: _sweep_cfg(num_rounds=10**14), "num_rounds=100000000000000 must be <= 1073741824"),
    ("sweep-seed-huge", lambda: _sweep_cfg(seed=2**70), "seed=1180591620717411303424 must be in"),
    ("sweep-config-binary", lambda: _binary_toml(), "is not a TOML text file"),
    ("sweep-config-directory", lambda: _config_dir(), "(it is a directory)"),
    # -- accounting: outside float64 is a ValueError naming the argument, never an OverflowError or a NaN ---
    ("eps-noise-1e-6", lambda: _eps(1e-6), "noise_multiplier=1e-06"),
    ("eps-noise-1e-300", lambda: _eps(1e-300), "not computable in float64"),
    ("eps-noise-1e300", lambda: _eps(1e300), "noise_multiplier=1e+300"),
    ("eps-noise-1e-6-pld", lambda: _eps(1e-6, "pld"), "epsilon = inf for any practical purpose"),
    ("eps-noise-1e300-replace-one", lambda: _eps(1e300, "rdp", "replace-one"), "above 1e+08"),
    ("eps-noise-1e-300-paper", lambda: _eps(1e-300, "paper", "replace-one", "without-replacement"), "below 0.0001"),
    ("eps-steps-beyond-2-pow-53", lambda: _eps(1.1, "rdp", steps=2**60), "steps=1152921504606846976"),
    ("eps-pld-steps-1e9", lambda: _eps(1.1, "pld", steps=10**9), "accountant='pld' composes at most"),
    ("eps-with-replacement-huge-batch", lambda: _eps(1.0, "rdp", "replace-one", "with-replacement", batch=10**7,
                                                     n=10**9), "batch_size=10000000"),
    ("tight-noise-1e-300", lambda: _tight(1e-300), "noise_multiplier=1e-300"),
    ("calibrate-target-1e6-paper-experiment", lambda: _cal(1e6, "paper-experiment"), "target_epsilon=1000000.0"),
    ("calibrate-target-1e300", lambda: _cal(1e300, "rdp"), "target_epsilon=1e+300"),
    ("calibrate-target-1e-300-zcdp", lambda: _cal_full(1e-300, "zcdp"), "target_epsilon=1e-300 cannot be reached"),
    ("calibrate-target-inf", lambda: _cal(math.inf, "best"), "target_epsilon=inf must be finite"),
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
    # issue #23: values are checked on load (finite, dtype, range), naming the file, row and column
    ("mnist-images-nan-floats", lambda t: _mnist(_npz_images(t, np.full((4, 28, 28), np.nan, np.float32))),
     "train images hold 3136 NaN/inf value(s)"),
    ("mnist-images-scaled-floats", lambda t: _mnist(_npz_images(t, np.full((4, 28, 28), 0.5, np.float32))),
     "fractional values"),
    ("mnist-images-out-of-range", lambda t: _mnist(_npz_images(t, np.full((4, 28, 28), 300, np.int32))),
     "range over 300..300"),
    ("mnist-labels-out-of-range", lambda t: _mnist(_npz_images(t, np.zeros((4, 28, 28), np.uint8), label=12)),
     "train labels range over 12..12"),
    ("mnist-images-strings", lambda t: _mnist(_npz_images(t, np.full((4, 28, 28), "a"))), "have dtype <U1"),
    ("insurance-nan-row", lambda t: _load("load_insurance", _write(
        t / "insurance.csv", INS_HEADER + "19,female,27.9,0,yes,southwest,16884.9\nnan,male,33.8,1,no,southeast,1725.5\n"),
        source="files", verify=False), "data row 2, column 'age': 'nan' is not a finite number"),
    ("insurance-inf-charges", lambda t: _load("load_insurance", _write(
        t / "insurance.csv", INS_HEADER + "19,female,27.9,0,yes,southwest,inf\n"), source="files", verify=False),
     "column 'charges': 'inf' is not a finite number"),
    ("obesity-nan-age", lambda t: _load("load_obesity", _obesity_csv(t, age="nan"), verify=False),
     "column 'Age': 'nan' is not a finite number"),
    ("cal-housing-nan", lambda t: _load("load_california_housing", _write(
        t / "cal_housing.data", "1,2,3,4,5,6,7,8,9\n1,2,nan,4,5,6,7,8,9\n"), verify=False),
     "row 2, column 3: nan is not a finite number"),
    ("cal-housing-empty-field", lambda t: _load("load_california_housing", _write(
        t / "cal_housing.data", "1,2,3,4,5,6,7,8,9\n1,2,,4,5,6,7,8,9\n"), verify=False), "cal_housing.data"),
    ("svmlight-huge-index", lambda t: _svm(t, "1 1:0.5 2000000000:1\n"), "GiB dense"),
    ("svmlight-nan-value", lambda t: _svm(t, "1 1:nan 2:1\n"), "not a finite number"),
]


def _npz_images(t, x, label=0):
    y = np.full(x.shape[0], label, np.uint8)
    return _npz(t, x_train=x, y_train=y, x_test=x[:2], y_test=y[:2])


def _obesity_csv(t, age="21"):
    from dpjax.data.tabular import OBESITY_FEATURES

    header = ",".join(OBESITY_FEATURES + ("NObeyesdad",))
    row = {"Gender": "Female", "Age": age, "Height": "1.62", "Weight": "64", "family_history_with_overweight": "yes",
           "FAVC": "no", "FCVC": "2", "NCP": "3", "CAEC": "Sometimes", "SMOKE": "no", "CH2O": "2", "SCC": "no",
           "FAF": "0", "TUE": "1", "CALC": "no", "MTRANS": "Walking", "NObeyesdad": "Normal_Weight"}
    line = ",".join(row[c] for c in OBESITY_FEATURES + ("NObeyesdad",))
    return _write(t / OBESITY, f"{header}\n{line}\n")


def _svm(t, text):
    from dpjax.data.diff2 import load_svmlight

    p = t / "data.svm"
    p.write_text(text)
    return load_svmlight(p)


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
    # -- issue #23 -----------------------------------------------------------------------------------------
    ("sweep-grid-billion-runs", lambda t: ["sweep", _toml(t, "learning_rate = { logspace = [-3, -1, 1000000000] }"),
                                           "--out", t / "o"], ["12,000,000,000 runs", "max_runs=100,000"]),
    ("sweep-three-1000-value-axes", lambda t: ["sweep", _toml(
        t, "learning_rate = { linspace = [0.001, 1, 1000] }", "repetition = 1000", "trial = 1000"), "--out", t / "o"],
     ["above max_runs"]),
    ("sweep-logspace-overflow", lambda t: ["sweep", _toml(t, "learning_rate = { logspace = [-3, 400, 3] }"),
                                           "--out", t / "o"], ["grid.learning_rate.logspace", "outside float64"]),
    ("sweep-data-n-1e11", lambda t: ["sweep", _toml(t, data_n="100000000000"), "--out", t / "o"],
     ["n=100,000,000,000", "max_data_mb=256"]),
    ("sweep-max-runs-flag-below-grid", lambda t: ["sweep", _sweep_files(t), "--out", t / "o", "--max-runs", "10"],
     ["grid has 36 runs", "max_runs=10"]),
    ("sweep-max-runs-flag-zero", lambda t: ["sweep", _sweep_files(t), "--out", t / "o", "--max-runs", "0"],
     ["max_runs=0 must be >= 1"]),
    ("sweep-max-data-flag-nan", lambda t: ["sweep", _sweep_files(t), "--out", t / "o", "--max-data-mb", "nan"],
     ["max_data_mb=nan"]),
    ("sweep-max-runs-flag-text", lambda t: ["sweep", _sweep_files(t), "--out", t / "o", "--max-runs", "lots"],
     ["argument --max-runs: --max-runs='lots' is not a valid int"]),
    ("sweep-config-binary", lambda t: ["sweep", _write(t / "c" / "b.toml", b"\x00\xff\xfe\x81binary") / "b.toml",
                                       "--out", t / "o"], ["b.toml", "is not a TOML text file"]),
    ("sweep-seed-huge-in-config", lambda t: ["sweep", _toml(t, seed="1180591620717411303424"), "--out", t / "o"],
     ["seed=1180591620717411303424 must be in [0, 4294967295]"]),
    ("sweep-rounds-huge-in-config", lambda t: ["sweep", _toml(t, rounds="100000000000000"), "--out", t / "o"],
     ["num_rounds=100000000000000"]),
    ("sweep-unknown-flag", lambda t: ["sweep", _sweep_files(t), "--out", t / "o", "--colour", "red"],
     ["unrecognized arguments: --colour red"]),
    ("sweep-missing-out", lambda t: ["sweep", _sweep_files(t)], ["the following arguments are required: --out"]),
    ("plot-partial-store", lambda t: ["plot", _partial_store(t)], ["is partial: 1 of 3 chunks", "--partial"]),
    ("plot-unknown-flag", lambda t: ["plot", t, "--colour"], ["unrecognized arguments: --colour"]),
    ("run-seed-2-pow-70", lambda t: RUN + ["--seed", "1180591620717411303424", "--out", t / "o"],
     ["--seed=1180591620717411303424 must be in [0, 4294967295]"]),
    ("run-seed-negative", lambda t: RUN + ["--seed", "-1", "--out", t / "o"], ["--seed=-1 must be in"]),
    ("run-seed-not-a-number", lambda t: RUN + ["--seed", "abc", "--out", t / "o"], ["argument --seed"]),
    ("run-rounds-beyond-int32", lambda t: RUN + ["--rounds", "100000000000000", "--out", t / "o"],
     ["rounds=100000000000000 must be <= 1073741824"]),
    ("run-repetitions-zero", lambda t: RUN + ["--repetitions", "0", "--out", t / "o"], ["repetitions=0"]),
    ("run-epsilon-max-negative", lambda t: RUN + ["--epsilon-max", "-2", "--out", t / "o"], ["epsilon_max=-2.0"]),
    ("run-mnist-nan-images", lambda t: RUN + ["--data-dir", _mnist_with_nan_images(t), "--out", t / "o"],
     ["mnist.npz", "NaN/inf", "--data-dir"]),
    ("run-no-task", lambda t: ["run"], ["give a TASK"]),
    ("no-command", lambda t: [], ["give a COMMAND"]),
    ("unknown-command", lambda t: ["frobnicate"], ["invalid choice: 'frobnicate'"]),
    ("reproduce-seed-negative", lambda t: ["reproduce", "isrl-obesity", "--seed", "-1", "--out", t / "o"],
     ["--seed=-1 must be in"]),
    ("reproduce-seed-huge", lambda t: ["reproduce", "isrl-obesity", "--seed", "99999999999999999999", "--out",
                                       t / "o"], ["--seed=99999999999999999999 must be in"]),
    ("reproduce-unknown-flag", lambda t: ["reproduce", "isrl-obesity", "--bogus"], ["unrecognized arguments: --bogus"]),
    ("audit-runs-1e12", lambda t: ["audit", "dp-gd", "--runs", "1e12"], ["runs=1000000000000 must be <= 10000000"]),
    ("audit-runs-one", lambda t: ["audit", "dp-gd", "--runs", "1"], ["runs=1 must be >= 2"]),
    ("audit-runs-fraction", lambda t: ["audit", "dp-gd", "--runs", "2.5"], ["argument --runs"]),
    ("audit-seed-negative", lambda t: ["audit", "dp-gd", "--seed", "-5"], ["--seed=-5 must be in"]),
    ("audit-confidence-two", lambda t: ["audit", "dp-gd", "--confidence", "2"], ["confidence=2.0"]),
    ("audit-unknown-mechanism", lambda t: ["audit", "bogus"], ["mechanism='bogus'"]),
    ("account-noise-1e-6", lambda t: ACCOUNT + ["--noise-multiplier", "1e-6"],
     ["noise_multiplier=1e-06", "not computable in float64", "epsilon = inf"]),
    ("account-noise-1e-300", lambda t: ACCOUNT + ["--noise-multiplier", "1e-300"], ["noise_multiplier=1e-300"]),
    ("account-noise-1e300", lambda t: ACCOUNT + ["--noise-multiplier", "1e300"], ["noise_multiplier=1e+300"]),
    ("account-noise-1e-6-pld", lambda t: ACCOUNT + ["--noise-multiplier", "1e-6", "--accountant", "pld"],
     ["not computable in float64"]),
    ("account-noise-negative", lambda t: ACCOUNT + ["--noise-multiplier", "-1"], ["noise_multiplier=-1.0"]),
    ("account-noise-nan", lambda t: ACCOUNT + ["--noise-multiplier", "nan"], ["noise_multiplier=nan"]),
    ("account-epsilon-1e6-paper-experiment", lambda t: ACCOUNT_WOR + ["--epsilon", "1e6", "--accountant",
                                                                      "paper-experiment"], ["target_epsilon=1000000.0"]),
    ("account-epsilon-1e300", lambda t: ACCOUNT + ["--epsilon", "1e300"], ["target_epsilon=1e+300"]),
    ("account-epsilon-inf", lambda t: ACCOUNT + ["--epsilon", "inf"], ["target_epsilon=inf must be finite"]),
    ("account-steps-beyond-2-pow-53", lambda t: ACCOUNT[:-2] + ["--steps", "1e17", "--noise-multiplier", "1"],
     ["argument --steps", "beyond 2**53"]),
    ("account-steps-not-a-number", lambda t: ACCOUNT[:-2] + ["--steps", "many", "--noise-multiplier", "1"],
     ["argument --steps"]),
    ("account-steps-zero", lambda t: ACCOUNT[:-2] + ["--steps", "0", "--noise-multiplier", "1"],
     ["steps=0 must be >= 1"]),
    ("account-dataset-size-1e400", lambda t: ACCOUNT + ["--noise-multiplier", "1", "--dataset-size", "1e400"],
     ["argument --dataset-size"]),
    ("account-with-replacement-huge-batch", lambda t: ["account", "--sampling", "with-replacement", "--batch-size",
                                                       "10000000", "--dataset-size", "1000000000", "--steps", "10",
                                                       "--delta", "1e-5", "--noise-multiplier", "1"],
     ["batch_size=10000000"]),
    ("account-delta-zero", lambda t: ACCOUNT + ["--noise-multiplier", "1", "--delta", "0"], ["delta=0.0"]),
    ("account-missing-delta", lambda t: ["account", "--noise-multiplier", "1", "--batch-size", "5", "--dataset-size",
                                         "50", "--steps", "3"], ["the following arguments are required: --delta"]),
    ("account-no-noise-or-epsilon", lambda t: ACCOUNT, ["one of the arguments --noise-multiplier"]),
    ("account-unknown-accountant", lambda t: ACCOUNT + ["--noise-multiplier", "1", "--accountant", "moments"],
     ["argument --accountant: invalid choice"]),
]

ACCOUNT = ["account", "--batch-size", "256", "--dataset-size", "60000", "--delta", "1e-5", "--steps", "100"]
ACCOUNT_WOR = ACCOUNT + ["--sampling", "without-replacement"]


def _toml(t, *grid_lines, data_n=None, seed=None, rounds=None):
    """The tiny sweep with some grid lines replaced (same key) or [data] n / seed / num_rounds changed."""
    lines = TINY_SWEEP.splitlines()
    for new in grid_lines:
        key = new.split("=")[0].strip()
        lines = [new if ln.strip().startswith(key + " ") else ln for ln in lines]
    for key, value in (("n", data_n), ("seed", seed), ("num_rounds", rounds)):
        if value is not None:
            lines = [f"{key} = {value}" if ln.strip().startswith(key + " ") else ln for ln in lines]
    p = t / "cfg.toml"
    p.write_text("\n".join(lines) + "\n")
    return p


def _mnist_with_nan_images(t):
    d = t / "nanmnist"
    d.mkdir()
    _npz_images(d, np.full((4, 28, 28), np.nan, np.float32))
    return d


def _partial_store(t):
    """The tiny sweep (3 chunks) stopped after its first chunk, as a full disk or a kill leaves it."""
    import tomllib

    from dpjax.sweep.config import SweepConfig
    from dpjax.sweep.driver import run_sweep

    d = t / "partial"
    run_sweep(SweepConfig.from_dict(tomllib.loads(TINY_SWEEP)), d, progress=False, max_chunks=1)
    return d


@pytest.mark.parametrize("make,fragments", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
@pytest.mark.slow
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


# -- issue #23: traced values (inside jit/vmap) and the checked mode ---------------------------------------------
def _checked_cases():
    from dpjax import primitives as P
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams

    key, t, g = jax.random.key(0), jnp.ones(3), jnp.ones((4, 3))
    return [
        ("clip-to-norm", lambda c: P.clip_to_norm(t, c), -1.0, "clip_norm=-1.0 must be >= 0"),
        ("clip-per-example", lambda c: P.clip_per_example(g, c), jnp.nan, "clip_norm=nan"),
        ("clipped-sum", lambda c: P.clipped_sum(g, c).total, -2.0, "clip_norm=-2.0"),
        ("project-l2-ball", lambda r: P.project_l2_ball(t, r), -1.0, "radius=-1.0"),
        ("gaussian-like", lambda s: P.gaussian_like(key, t, s), -1.0, "std=-1.0"),
        ("add-gaussian-noise", lambda s: P.add_gaussian_noise(key, t, s), jnp.inf, "std=inf"),
        ("poisson-rate", lambda r: P.poisson_sample(key, 5, 10, r, 8)[1], 1.5, "rate=1.5 must be in [0, 1]"),
        ("without-replacement-size", lambda n: P.sample_without_replacement(key, n, 10, 8), 5,
         "batch_size=8 must be <= size=5", 9),
        ("mbsgd-hparams", lambda c: MbSgdHParams.create(0.1, 0.0, c).clip_norm, -1.0, "clip_norm=-1.0 must be > 0"),
    ]


@pytest.mark.parametrize("case", range(9), ids=[c[0] for c in _checked_cases()])
@pytest.mark.slow
def test_checked_mode_refuses_bad_traced_values(case):
    """Inside jit the value is a tracer: not checked by default (the documented contract), a ValueError naming
    the argument in dpjax.primitives.checked mode; good values pass through it unchanged."""
    from dpjax.primitives import checked

    _, fn, bad, fragment, *good = _checked_cases()[case]
    jax.jit(fn)(bad)  # the contract: a traced value is the caller's responsibility (no host check possible)
    with pytest.raises(ValueError) as info:
        checked(jax.jit(fn))(bad)
    assert fragment in str(info.value), str(info.value)
    good = good[0] if good else 0.5
    # the same values (checked mode traces op by op: float rounding may differ in the last bit)
    np.testing.assert_allclose(np.asarray(checked(jax.jit(fn))(good)), np.asarray(jax.jit(fn)(good)), rtol=1e-6)


def test_checked_mode_covers_vmapped_batches():
    from dpjax.primitives import checked, clip_to_norm

    fn = jax.vmap(lambda c: clip_to_norm(jnp.ones(3), c))
    with pytest.raises(ValueError, match="clip_norm=-2.0"):
        checked(fn)(jnp.array([1.0, -2.0]))


def test_good_concrete_arrays_are_accepted():
    """One-element and batched arrays of valid values pass (the checks look at every entry)."""
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams
    from dpjax.primitives import clip_to_norm

    hp = MbSgdHParams.create(jnp.array([0.1, 0.2]), np.array([0.0, 1.0]), jnp.array([1.0]))
    np.testing.assert_allclose(hp.learning_rate, [0.1, 0.2])
    np.testing.assert_allclose(clip_to_norm(jnp.full(4, 2.0), np.float32(1.0)), [0.5] * 4)


# -- issue #23: refusals allocate nothing large ----------------------------------------------------------------
@pytest.mark.parametrize("argv_of", [
    lambda t: ["sweep", _toml(t, "learning_rate = { logspace = [-3, -1, 1000000000] }"), "--out", t / "o"],
    lambda t: ["sweep", _toml(t, "learning_rate = { linspace = [0.001, 1, 1000] }", "repetition = 1000",
                              "trial = 1000"), "--out", t / "o"],
    lambda t: ["sweep", _toml(t, data_n="100000000000"), "--out", t / "o"],
    lambda t: ACCOUNT + ["--noise-multiplier", "1e-300"],
    lambda t: ["account", "--sampling", "with-replacement", "--batch-size", "10000000", "--dataset-size",
               "1000000000", "--steps", "10", "--delta", "1e-5", "--noise-multiplier", "1"],
], ids=["logspace-1e9", "three-1000-axes", "data-n-1e11", "account-noise-1e-300", "account-huge-batch"])
def test_refusal_allocates_less_than_100_mb(tmp_path, capsys, argv_of):
    """The size is computed from the specs: nothing near the refused size (4.6-12.5 GB before) is built."""
    import tracemalloc

    argv = argv_of(tmp_path)
    run_cli(["account", "--help"], capsys)  # imports done outside the measurement
    tracemalloc.start()
    try:
        code, _, err = run_cli(argv, capsys)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_clean_failure(code, err)
    assert peak < 100 * 2**20, f"peak {peak / 2**20:.0f} MiB before the refusal"


def test_account_huge_step_count_reports_rdp_and_says_pld_is_not_computable(capsys):
    """1e12 steps: RDP computes a (huge, honest) epsilon in a second; PLD's self-composition would not finish,
    so 'best' names it as skipped instead of hanging or overflowing."""
    code, out, err = run_cli(ACCOUNT[:-2] + ["--steps", "1e12", "--noise-multiplier", "1.1", "--json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    assert res["accountant"] == "rdp" and res["epsilon"] > 1e6 and res["steps"] == 10**12
    assert any("accountant='pld' skipped" in n for n in res["notes"])


def test_account_module_main_has_the_same_error_prefix(capsys):
    """``python -m dpjax.accounting.cli`` too: `dpjax: error:` for its own and for argparse's errors."""
    from dpjax.accounting import cli

    assert cli.main(["--noise-multiplier", "1e-6", "--batch-size", "10", "--dataset-size", "100", "--steps", "5",
                     "--delta", "1e-5"]) == 2
    assert capsys.readouterr().err.startswith("dpjax: error: noise_multiplier=1e-06")
    with pytest.raises(SystemExit) as info:
        cli.main(["--steps", "x"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.splitlines()[-1].startswith("dpjax: error: argument --steps")


@pytest.mark.slow
def test_plot_partial_store_with_flag_says_how_partial(tmp_path, capsys):
    store = _partial_store(tmp_path)
    code, out, err = run_cli(["plot", store, "--x", "noise_multiplier", "--partial", "--out", tmp_path / "fig.png"], capsys)
    assert code == 0, err
    assert "(partial: 1 of 3 chunks)" in out and (tmp_path / "fig.png").stat().st_size > 1000


def test_second_writer_of_a_different_config_is_told_so(tmp_path):
    from dpjax.sweep.store import Store

    a, b, c = Store(tmp_path), Store(tmp_path), Store(tmp_path)
    a.prepare()
    a.lock(0, {"name": "one", "algorithm": "isrl-mbsgd", "chunk_size": 4})
    try:
        with pytest.raises(ValueError, match="of a different config; use a new --out"):
            b.lock(0, {"name": "two", "algorithm": "isrl-mbsgd"})
        with pytest.raises(ValueError, match="computing the same share"):  # the same sweep (any tiling)
            c.lock(0, {"name": "one", "algorithm": "isrl-mbsgd", "chunk_size": 8})
    finally:
        a.unlock()
