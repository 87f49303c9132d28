"""Run by tests/engine/test_silo_sharding.py in a fresh process with 8 host devices: one federated run
with its silo axis sharded over 1, 2, 4 and 8 devices against the unsharded run, in both
``silo_compute`` modes. Prints one line per case, then two lines per mode on the compiled 8-device
program: its collectives, and the silo sizes of its noise draws (how many silos' noise one device draws).

The shapes (16 unequal silos of <= 32 rows, d = 8) are ones where the sharded logistic regression
used to differ from the unsharded run (row norms summed in another order, <= 9.3e-7 relative)."""

from __future__ import annotations

import re

import jax
import numpy as np

from dpjax import keys
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.engine import SiloData, run, silo_sharding
from dpjax.engine.program import compiled_runner
from dpjax.primitives.sampling import FixedAvailability
from dpjax.problems import FlaxProblem, LinearRegression, LogisticRegression, SoftmaxRegression
from dpjax.problems.mlp import MLP


PER_SILO_CASES = ("mlp-full", "mlp-nonprivate", "logistic-dense", "softmax-dense")


def _leaves(tree):
    return [np.asarray(a) for a in jax.tree_util.tree_leaves(tree)]


def _compiled_text(alg, data, hp, key, mode, ndev):
    """The optimized HLO of the compiled ``ndev``-device program."""
    mesh = silo_sharding.silo_mesh(jax.devices()[:ndev], data.num_silos)
    put = lambda t: silo_sharding.replicate(t, mesh)  # noqa: E731
    params = alg.problem.init_params(keys.run_stream_key(key, "local"))
    return compiled_runner(alg, None, None, False, None, None, silo_mesh=mesh, silo_compute=mode).lower(
        put(hp), silo_sharding.shard_data(data, mesh), None, put(key), put(params)).compile().as_text()


def _collectives(text):
    """The shapes of the all-gathers / all-reduces in a compiled program."""
    return re.findall(r"= \(?([a-z0-9]+\[[0-9,]*\])[^=]*? (?:all-gather|all-reduce)\(", text)


def _noise_rows(text):
    """The leading (silo) sizes of the noise draws' ``erf_inv`` ops in a compiled program: the silos
    whose noise one device draws."""
    return sorted({int(m) for m in re.findall(r"= f32\[([0-9]+),[0-9,]*\][^=]*? [a-z-]+\([^\n]*erf_inv", text)})


def sixteen_silos(d: int = 8):
    """16 unequal silos of <= 32 rows in ``d`` dimensions, with binary, 3-class and real targets."""
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(32 - (i % 3), d)).astype(np.float32) for i in range(16)]  # unequal silos
    data = SiloData.from_silos(xs, [(x[:, 0] > 0).astype(np.float32) for x in xs])
    classes = SiloData.from_silos(xs, [(np.abs(x[:, 0]) > 0.6).astype(np.float32) + (x[:, 1] > 0) for x in xs])
    targets = SiloData.from_silos(xs, [x @ np.linspace(-1, 1, d).astype(np.float32) for x in xs])
    return data, classes, targets


def main() -> None:
    assert len(jax.devices()) == 8, jax.devices()
    d = 8
    data, classes, targets = sixteen_silos(d)
    hp = MbSgdHParams.create(0.2, noise_multiplier=0.7, clip_norm=1.0)
    key = keys.run_key(3, 1)
    mlp = FlaxProblem(MLP((8,)), (d,), "logistic")
    glm = LogisticRegression(d)
    cases = {
        "mlp-full": (NoisyMbSgd(mlp, 4, 8), data),
        "mlp-fixed4-average": (NoisyMbSgd(mlp, 4, 8, availability=FixedAvailability(4), output="average"), data),
        "mlp-nonprivate": (NoisyMbSgd(mlp, 4, 8, private=False), data),
        "logistic-dense": (NoisyMbSgd(glm, 4, 8, gradient_path="dense"), data),
        "logistic-gather": (NoisyMbSgd(glm, 4, 8, gradient_path="gather"), data),
        "logistic-dense-fixed4": (NoisyMbSgd(glm, 4, 8, gradient_path="dense", availability=FixedAvailability(4)),
                                  data),
        "softmax-dense": (NoisyMbSgd(SoftmaxRegression(d, 3), 4, 8, gradient_path="dense"), classes),
        "linear-gather": (NoisyMbSgd(LinearRegression(d), 4, 8, gradient_path="gather"), targets),
    }
    for name, (alg, silo_data) in cases.items():
        ref = run(alg, silo_data, hp, key)
        ref_leaves = _leaves((ref.output, ref.state.params, ref.round_metrics))
        scale = max(float(np.max(np.abs(b))) for b in _leaves((ref.output, ref.state.params)))
        for mode in ("exact", "per-silo"):  # "blocks": silo_blocks_check.py
            if mode == "per-silo" and name not in PER_SILO_CASES:
                continue
            for ndev in (1, 2, 4, 8) if mode == "exact" else (2, 8):
                got = run(alg, silo_data, hp, key, silo_devices=jax.devices()[:ndev], silo_compute=mode)
                pairs = list(zip(_leaves((got.output, got.state.params, got.round_metrics)), ref_leaves))
                same = all(a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b) for a, b in pairs)
                diff = max(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
                           for a, b in pairs)
                print(f"{mode} {name} devices={ndev} {'IDENTICAL' if same else 'DIFFERENT'} max_abs_diff={diff:.3g} "
                      f"max_abs_params={scale:.3g}", flush=True)
    alg = cases["mlp-full"][0]
    for mode in ("exact", "per-silo"):  # "blocks": silo_blocks_check.py
        text = _compiled_text(alg, data, hp, key, mode, 8)
        print(f"collectives {mode} devices=8: {' '.join(_collectives(text))}", flush=True)
        print(f"noise-rows {mode} devices=8: {' '.join(str(r) for r in _noise_rows(text))}", flush=True)


if __name__ == "__main__":
    main()
