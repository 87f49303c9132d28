"""Run by tests/engine/test_silo_blocks.py in a fresh process with 8 host devices: federated runs whose
per-silo stage is computed in blocks of silos (``engine.run(..., silo_block=B)``,
``dpjax.engine.silo_blocks``), unsharded and with the silos spread over 1, 2, 4 and 8 devices
(``silo_compute="blocks"``). Prints one line per (case, block, devices) with IDENTICAL or DIFFERENT
against the unsharded blocked run, one line per case with the largest difference between the blocked
and the plain (one vmap over all silos) run, and two lines on the compiled 8-device program: its
collectives and the silo rows of its noise draws.

The shapes (16 unequal silos of <= 32 rows, d = 8) are those of silo_sharding_check.py, where
``silo_compute="per-silo"`` differs from the unsharded run in the last bits."""

from __future__ import annotations

import re

import jax
import numpy as np

from dpjax import keys
from dpjax.algorithms.accelerated import AcceleratedHParams, AcceleratedMbSgd
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.parts.acsa import AcsaSchedule
from dpjax.engine import run, silo_sharding
from dpjax.engine.program import compiled_runner
from dpjax.primitives.sampling import RandomAvailability
from dpjax.problems import FlaxProblem, LinearRegression, LogisticRegression, SoftmaxRegression
from dpjax.problems.mlp import MLP
from silo_sharding_check import sixteen_silos  # (this script's folder is on sys.path)


def _leaves(result):
    return [np.asarray(a) for a in jax.tree_util.tree_leaves((result.output, result.state.params,
                                                              result.round_metrics))]


def _max_diff(xs, ys):
    return max((float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0)
               for a, b in zip(xs, ys))


def _compiled_text(alg, data, hp, key, block, ndev):
    mesh = silo_sharding.silo_mesh(jax.devices()[:ndev], data.num_silos)
    put = lambda t: silo_sharding.replicate(t, mesh)  # noqa: E731
    params = alg.problem.init_params(keys.run_stream_key(key, "local"))
    return compiled_runner(alg, None, None, False, None, None, silo_mesh=mesh, silo_compute="blocks",
                           silo_block=block).lower(put(hp), silo_sharding.shard_data(data, mesh), None, put(key),
                                                   put(params)).compile().as_text()


def main() -> None:
    assert len(jax.devices()) == 8, jax.devices()
    d = 8
    data, classes, targets = sixteen_silos(d)
    hp = MbSgdHParams.create(0.2, noise_multiplier=0.7, clip_norm=1.0)
    acsa = AcceleratedHParams.create(AcsaSchedule.single_stage(4, 1.0), noise_multiplier=0.7, clip_norm=1.0)
    key = keys.run_key(3, 1)
    mlp = FlaxProblem(MLP((8,)), (d,), "logistic")
    glm = LogisticRegression(d)
    cases = {
        "mlp-full": (NoisyMbSgd(mlp, 4, 8), data, hp),
        "mlp-nonprivate": (NoisyMbSgd(mlp, 4, 8, private=False), data, hp),
        "mlp-random-availability-average": (NoisyMbSgd(mlp, 4, 8, availability=RandomAvailability((1 / 16,) * 16),
                                                       output="average"), data, hp),
        "logistic-dense": (NoisyMbSgd(glm, 4, 8, gradient_path="dense"), data, hp),
        "logistic-gather": (NoisyMbSgd(glm, 4, 8, gradient_path="gather"), data, hp),
        "softmax-dense": (NoisyMbSgd(SoftmaxRegression(d, 3), 4, 8, gradient_path="dense"), classes, hp),
        "linear-gather": (NoisyMbSgd(LinearRegression(d), 4, 8, gradient_path="gather"), targets, hp),
        "logistic-accelerated": (AcceleratedMbSgd(glm, 4, 4), data, acsa),
        "mlp-accelerated": (AcceleratedMbSgd(mlp, 4, 4), data, acsa),  # the AC-SA server step on 4 leaves
    }
    for name, (alg, silo_data, hparams) in cases.items():
        plain = _leaves(run(alg, silo_data, hparams, key))
        for block in (1, 2) if name in ("mlp-full", "logistic-gather") else (1,):
            ref = _leaves(run(alg, silo_data, hparams, key, silo_block=block))
            print(f"plain {name} block={block} max_abs_diff={_max_diff(plain, ref):.3g} "
                  f"max_abs={max(float(np.max(np.abs(a))) for a in plain if a.size and a.dtype.kind == 'f'):.3g}",
                  flush=True)
            for ndev in (1, 2, 4, 8) if block == 1 else (1, 2, 4):  # every device holds >= 2 blocks
                got = _leaves(run(alg, silo_data, hparams, key, silo_devices=jax.devices()[:ndev],
                                  silo_compute="blocks", silo_block=block))
                same = all(a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
                           for a, b in zip(got, ref))
                print(f"blocks {name} block={block} devices={ndev} {'IDENTICAL' if same else 'DIFFERENT'} "
                      f"max_abs_diff={_max_diff(got, ref):.3g}", flush=True)
    text = _compiled_text(cases["mlp-full"][0], data, hp, key, 1, 8)
    print("collectives blocks devices=8: "
          + " ".join(re.findall(r"= \(?([a-z0-9]+\[[0-9,]*\])[^=]*? (?:all-gather|all-reduce)\(", text)), flush=True)
    print("noise-rows blocks devices=8: " + " ".join(str(r) for r in sorted({int(m) for m in re.findall(
        r"= f32\[([0-9]+),[0-9,]*\][^=]*? [a-z-]+\([^\n]*erf_inv", text)})), flush=True)


if __name__ == "__main__":
    main()
