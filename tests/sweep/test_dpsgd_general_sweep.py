"""DP-SGD-General (van Dijk et al., Algorithm 1) as a sweep family: an epsilon axis calibrates
sigma through the family's own exact strong-adversary accountant."""

import tomllib

import jax

from dpjax.sweep import SweepConfig
from dpjax.sweep.driver import Sweep
from tests.sweep.conftest import TINY


def test_epsilon_axis_calibrates_sigma_with_the_strong_exact_accountant():
    d = tomllib.loads(TINY)
    d.update(algorithm="dpsgd-general", num_rounds=4,
             static={"subset_size": 3, "num_subsets": 2, "rounds_per_epoch": 2, "sampling": "shuffle"},
             grid={"learning_rate": [0.5], "clip_norm": [0.7], "epsilon": [3.0], "trial": 1},
             privacy={"accountant": "strong-exact", "delta": 1e-5})
    sw = Sweep(SweepConfig.from_dict(d), jax.local_devices()[:1])
    g = sw.groups[0]
    alg, vals = sw.algorithm(g), sw.hparams(g, 0, 0)
    spec = alg.privacy(sw.trial(0).train.silo_sizes(), sw.entry.make_hparams(vals, alg))
    eps = spec.epsilon(1e-5, "strong-exact").epsilon
    # the family's calibration bisects sigma to a relative width 1e-4 and returns the safe end; float32
    # rounding of sigma moves epsilon by far less than that width's effect (epsilon ~ 1/sigma)
    assert 3.0 * (1 - 1e-3) <= eps <= 3.0 * (1 + 1e-6)
    assert abs(vals["clip_norm"] - 0.7) < 1e-6  # the clip is not rescaled: sigma is a multiplier of C
