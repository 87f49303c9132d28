"""Run by tests/engine/test_silo_sharding.py in a fresh process with 8 host devices: one federated run
with its silo axis sharded over 1, 2, 4 and 8 devices against the unsharded run. Prints one line per case."""

from __future__ import annotations

import jax
import numpy as np

from dpjax import keys
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.engine import SiloData, run
from dpjax.primitives.sampling import FixedAvailability
from dpjax.problems import FlaxProblem, LogisticRegression
from dpjax.problems.mlp import MLP


def _leaves(tree):
    return [np.asarray(a) for a in jax.tree_util.tree_leaves(tree)]


def main() -> None:
    assert len(jax.devices()) == 8, jax.devices()
    rng = np.random.default_rng(0)
    num_silos, n, d = 8, 12, 6
    xs = [rng.normal(size=(n - (i % 3), d)).astype(np.float32) for i in range(num_silos)]  # unequal silos
    data = SiloData.from_silos(xs, [(x[:, 0] > 0).astype(np.float32) for x in xs])
    hp = MbSgdHParams.create(0.2, noise_multiplier=0.7, clip_norm=1.0)
    key = keys.run_key(3, 1)
    mlp = FlaxProblem(MLP((8,)), (d,), "logistic")
    cases = {
        "mlp-full": NoisyMbSgd(mlp, 4, 3),
        "mlp-fixed4-average": NoisyMbSgd(mlp, 4, 3, availability=FixedAvailability(4), output="average"),
        "mlp-nonprivate": NoisyMbSgd(mlp, 4, 3, private=False),
        "glm-dense": NoisyMbSgd(LogisticRegression(d), 4, 3, gradient_path="dense"),
    }
    for name, alg in cases.items():
        ref = run(alg, data, hp, key)
        for ndev in (1, 2, 4, 8):
            got = run(alg, data, hp, key, silo_devices=jax.devices()[:ndev])
            pairs = list(zip(_leaves((got.output, got.state.params, got.round_metrics)),
                             _leaves((ref.output, ref.state.params, ref.round_metrics))))
            same = all(a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b) for a, b in pairs)
            diff = max(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
                       for a, b in pairs)
            print(f"{name} devices={ndev} {'IDENTICAL' if same else 'DIFFERENT'} max_abs_diff={diff:.3g}", flush=True)


if __name__ == "__main__":
    main()
