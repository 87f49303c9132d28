"""CPU cost per round of the dpsgd-mnist quick variants: rounds in one ``lax.scan`` (old) vs
one compiled call per round (``round_loop="host"``, new), side by side in one process.

    python experiments/benchmarks/bench_dpsgd_quick_variants.py [--rounds 3] [--host-single]

Quick shapes: 10,240 random 28x28 images, 256 records per round, the small MNIST CNN, the
quick grid's 2 runs (eta in {0.3, 1}) vmapped by ``run_many``. For every variant it prints
the CPU seconds (``time.process_time``, all threads; compilation excluded: each path runs
once to compile, then is timed) per round of both runs, and old/new. ``--host-single`` adds
the host loop with the 2 runs one after the other (``run`` per run) instead of vmapped: what
``dpjax reproduce dpsgd-mnist`` does on CPU (vmapped runs make every convolution a grouped one).

Why the scan is slow on CPU: XLA:CPU's ``ConvCanonicalization`` pass visits only the entry
computation, so the gradient's convolutions inside the scan's loop body (kernel gradient
``f01b_i01o->01bf``, input gradient) keep their non-canonical dimension numbers and run on
the naive elemental emitter instead of the fast Eigen/YNNPACK kernels (jax-ml/jax#12868).
"""

import argparse
import time

import jax
import numpy as np

from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
from dpjax.engine import SiloData, run, run_many, stack_hparams
from dpjax.problems import FlaxProblem
from dpjax.reproduce.dpsgd_mnist_config import QUICK, ROUND_RECORDS, SIGMA, cnn, variants


def cpu_seconds(fn) -> float:
    """CPU seconds of the second call of ``fn`` (the first compiles)."""
    jax.block_until_ready(fn())
    start = time.process_time()
    jax.block_until_ready(fn())
    return time.process_time() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--host-single", action="store_true", help="also time the 2 runs one by one (host loop)")
    ap.add_argument("--only", nargs="*", help="variant names (default: all)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = QUICK["n_train"]
    data = SiloData.from_silos([rng.normal(size=(n, 28, 28, 1)).astype(np.float32)],
                               [rng.integers(0, 10, n).astype(np.int32)])
    problem = FlaxProblem(cnn(), (28, 28, 1), "softmax")
    lrs = QUICK["lrs"]
    keys = jax.random.split(jax.random.key(0), len(lrs))
    paths = ["scan (old)", "host (new)"] + (["host, runs 1 by 1"] if args.host_single else [])
    print(f"CPU s per round of {len(lrs)} runs x {ROUND_RECORDS} records ({args.rounds} rounds timed, "
          f"jax {jax.__version__}, backend {jax.default_backend()})")
    print(f"{'variant':20s} " + " ".join(f"{p:>18s}" for p in paths) + "   old/new"
          + ("   old/(1 by 1)" if args.host_single else ""))
    totals = dict.fromkeys(paths, 0.0)

    def ratios(t):
        single = f"   x{t['scan (old)'] / t['host, runs 1 by 1']:.1f}" if args.host_single else ""
        return f"   x{t['scan (old)'] / t['host (new)']:.1f}{single}"

    for name, kw in variants().items():
        if args.only and name not in args.only:
            continue
        private = kw.get("private", True)
        alg = DpSgdGeneral(problem, args.rounds, rounds_per_epoch=n // ROUND_RECORDS, **kw)
        hps = stack_hparams([DpSgdHParams.create(lr, noise_multiplier=SIGMA if private else 0.0, clip_norm=1.0)
                             for lr in lrs])
        calls = {
            "scan (old)": lambda: run_many(alg, data, hps, keys).output,
            "host (new)": lambda: run_many(alg, data, hps, keys, round_loop="host").output,
            "host, runs 1 by 1": lambda: [run(alg, data, jax.tree_util.tree_map(lambda a, i=i: a[i], hps), keys[i],
                                              round_loop="host").output for i in range(len(lrs))],
        }
        per_round = {p: cpu_seconds(calls[p]) / args.rounds for p in paths}
        for p in paths:
            totals[p] += per_round[p]
        print(f"{name:20s} " + " ".join(f"{per_round[p]:18.3f}" for p in paths) + ratios(per_round), flush=True)
    print(f"{'sum':20s} " + " ".join(f"{totals[p]:18.3f}" for p in paths) + ratios(totals))


if __name__ == "__main__":
    main()
