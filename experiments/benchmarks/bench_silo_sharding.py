"""One federated run with its silo axis sharded over 1/2/4/8 devices (``engine.run(..., silo_devices=)``).

The run: ISRL-DP Noisy MB-SGD of a flax MLP (``--dim`` inputs, one hidden layer of ``--hidden`` tanh units,
logistic loss) on ``--silos`` synthetic silos of ``--rows`` records, ``--batch`` records per silo per
round, ``--rounds`` rounds. Prints per device count the median wall seconds of the compiled run (after
one warm-up call) and whether its output equals the 1-device run bit for bit.

Run on host devices: ``XLA_FLAGS=--xla_force_host_platform_device_count=8 python
experiments/benchmarks/bench_silo_sharding.py``. On a CPU the host devices share the same cores, so no
speedup is expected there: the numbers show the sharded program's overhead, not its scaling.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--silos", type=int, default=256)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--devices", type=int, nargs="*", default=[1, 2, 4, 8])
    args = ap.parse_args(argv)

    from dpjax import keys
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.engine import SiloData, run
    from dpjax.problems import FlaxProblem
    from dpjax.problems.mlp import MLP

    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(args.rows, args.dim)).astype(np.float32) for _ in range(args.silos)]
    data = SiloData.from_silos(xs, [(x[:, 0] > 0).astype(np.float32) for x in xs])
    alg = NoisyMbSgd(FlaxProblem(MLP((args.hidden,)), (args.dim,), "logistic"), args.rounds, args.batch)
    hp = MbSgdHParams.create(0.1, noise_multiplier=1.0, clip_norm=1.0)
    key = keys.run_key(0, 0)
    n_params = (args.dim + 1) * args.hidden + args.hidden + 1
    print(f"{len(jax.devices())} {jax.devices()[0].platform} devices; {args.silos} silos x {args.rows} rows, "
          f"MLP {args.dim}-{args.hidden}-1 ({n_params} parameters), batch {args.batch}, {args.rounds} rounds; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    ref = None
    for ndev in args.devices:
        devices = jax.devices()[:ndev]
        call = lambda: run(alg, data, hp, key, silo_devices=devices)  # noqa: E731
        t0 = time.perf_counter()
        out = call()
        first = time.perf_counter() - t0
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = call()
            times.append(time.perf_counter() - t0)
        leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(out.output)]
        ref = leaves if ref is None else ref
        same = all(np.array_equal(a, b) for a, b in zip(leaves, ref))
        print(f"devices={ndev}: first call (compile + run) {first:.2f} s, run {statistics.median(times):.3f} s "
              f"(median of {args.repeats}), {'IDENTICAL to' if same else 'DIFFERENT from'} devices={args.devices[0]}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
