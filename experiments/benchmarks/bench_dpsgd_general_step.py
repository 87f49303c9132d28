"""DP-SGD-General round cost on the MNIST CNN: private steps against the non-private step, side by side.

    python experiments/benchmarks/bench_dpsgd_general_step.py [--rounds 30] [--batch 64]

Prints ms/round (median of repeats) for the non-private mini-batch SGD step and for
BC-SH (batch clipping of the mean: one backward pass) and IC-SS (individual clipping:
the problem's clipped sum, ghost norms when FlaxProblem provides them), and their
ratios to the non-private step (the issue's target: DP-SGD within 1.5x).
"""

import argparse
import time

import jax
import numpy as np

from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
from dpjax.engine import SiloData, run
from dpjax.problems import FlaxProblem
from dpjax.reproduce.dpsgd_mnist_config import cnn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = 4096
    data = SiloData.from_silos([rng.normal(size=(n, 28, 28, 1)).astype(np.float32)],
                               [rng.integers(0, 10, n).astype(np.int32)])
    problem = FlaxProblem(cnn(), (28, 28, 1), "softmax")
    b = args.batch
    configs = {
        "non-private SGD": dict(subset_size=b, num_subsets=1, private=False),
        "BC-SH (eq. 4)": dict(subset_size=b, num_subsets=1),
        "IC-SS (eq. 1)": dict(subset_size=1, num_subsets=b, sampling="subsample"),
        "IC-SS non-private": dict(subset_size=1, num_subsets=b, sampling="subsample", private=False),
    }
    hp = DpSgdHParams.create(0.1, noise_multiplier=2.0, clip_norm=1.0)
    times = {}
    for name, kw in configs.items():
        alg = DpSgdGeneral(problem, args.rounds, rounds_per_epoch=n // b, **kw)
        run(alg, data, hp, jax.random.key(0))  # compile
        reps = []
        for r in range(args.repeats):
            t = time.perf_counter()
            out = run(alg, data, hp, jax.random.key(r + 1))
            jax.block_until_ready(out.output)
            reps.append((time.perf_counter() - t) / args.rounds)
        times[name] = float(np.median(reps))
    base = times["non-private SGD"]
    for name, t in times.items():
        print(f"{name:22s} {1e3 * t:8.2f} ms/round   x{t / base:5.2f} vs non-private SGD")
    ghost = getattr(problem, "uses_ghost_clipping", None)
    print("ghost clipping path:", ghost(problem.init_params(jax.random.key(0)), data.x[0, :b], data.y[0, :b])
          if ghost else "not available in this checkout (vmap(grad) per-example path)")


if __name__ == "__main__":
    main()
