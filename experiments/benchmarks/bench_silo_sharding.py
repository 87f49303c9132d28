"""One federated run with its silo axis sharded over 1/2/4/8 devices (``engine.run(..., silo_devices=)``).

The run: ISRL-DP Noisy MB-SGD of a flax MLP (``--dim`` inputs, one hidden layer of ``--hidden`` tanh units,
logistic loss) on ``--silos`` synthetic silos of ``--rows`` records, ``--batch`` records per silo per
round, ``--rounds`` rounds. Prints, per ``silo_compute`` mode (``"exact"``: every device computes all
silos from the gathered data, bit-identical; ``"per-silo"``: each device its own silos) and device
count, the median wall seconds of the compiled run (after one warm-up call), the speedup over the
unsharded run measured in the same process, and how its output compares with the unsharded run
(bit for bit, or the largest absolute difference). ``"blocks"`` (each device computes its silos
``--block`` at a time, ``dpjax.engine.silo_blocks``) is compared with the unsharded run of the same
``silo_block`` (its own row, ``unsharded blocked``, compared with the plain run). ``--sizes`` repeats it
for several ``silos x hidden`` pairs.

Run on host devices: ``XLA_FLAGS=--xla_force_host_platform_device_count=8 python
experiments/benchmarks/bench_silo_sharding.py``. On a CPU the host devices share the same cores (and
XLA:CPU already spreads one device's work over them), so no speedup is expected there: the numbers
show the sharded program's overhead, not its scaling; the load average printed says how busy the
machine was.
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


def _time(call, repeats):
    t0 = time.perf_counter()
    out = call()
    jax.block_until_ready(out.output)
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(call().output)
        times.append(time.perf_counter() - t0)
    return out, first, statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--silos", type=int, default=256)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--sizes", nargs="*", default=None, metavar="SILOSxHIDDEN",
                    help="several runs, e.g. 256x64 1024x256 (default: --silos x --hidden)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--devices", type=int, nargs="*", default=[1, 2, 4, 8])
    ap.add_argument("--modes", nargs="*", default=["exact", "per-silo", "blocks"])
    ap.add_argument("--block", type=int, default=16, help="silo_block of the blocks mode")
    args = ap.parse_args(argv)

    from dpjax import keys
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.engine import SiloData, run
    from dpjax.problems import FlaxProblem
    from dpjax.problems.mlp import MLP

    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes] if args.sizes else [(args.silos, args.hidden)]
    print(f"{len(jax.devices())} {jax.devices()[0].platform} devices, {os.cpu_count()} CPU cores; "
          f"{args.rows} rows per silo, dim {args.dim}, batch {args.batch}, {args.rounds} rounds; "
          f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}", flush=True)
    print("| silos | MLP parameters | mode | devices | first call (s) | run (s) | speedup vs unsharded | "
          "vs unsharded |", flush=True)
    print("|---|---|---|---|---|---|---|---|", flush=True)
    for num_silos, hidden in sizes:
        rng = np.random.default_rng(0)
        xs = [rng.normal(size=(args.rows, args.dim)).astype(np.float32) for _ in range(num_silos)]
        data = SiloData.from_silos(xs, [(x[:, 0] > 0).astype(np.float32) for x in xs])
        alg = NoisyMbSgd(FlaxProblem(MLP((hidden,)), (args.dim,), "logistic"), args.rounds, args.batch)
        hp = MbSgdHParams.create(0.1, noise_multiplier=1.0, clip_norm=1.0)
        key = keys.run_key(0, 0)
        n_params = (args.dim + 1) * hidden + hidden + 1
        ref, first, base = _time(lambda: run(alg, data, hp, key), args.repeats)  # noqa: B023
        ref_leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(ref.output)]
        print(f"| {num_silos} | {n_params} | unsharded | 1 | {first:.2f} | {base:.3f} | 1.00 | |", flush=True)
        def compare(leaves, against):
            if all(np.array_equal(a, b) for a, b in zip(leaves, against)):
                return "bit for bit"
            return f"max abs diff {max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(leaves, against)):.2g}"

        blocked_leaves = None
        if "blocks" in args.modes:
            out, first, t = _time(lambda: run(alg, data, hp, key, silo_block=args.block), args.repeats)  # noqa: B023
            blocked_leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(out.output)]
            print(f"| {num_silos} | {n_params} | unsharded blocked ({args.block}) | 1 | {first:.2f} | {t:.3f} | "
                  f"{base / t:.2f} | {compare(blocked_leaves, ref_leaves)} (vs plain) |", flush=True)
        for mode in args.modes:
            for ndev in args.devices:
                devices = jax.devices()[:ndev]
                if mode == "blocks" and num_silos < 2 * args.block * ndev:
                    continue  # every device needs two blocks (silo_blocks.check_block)
                extra = {"silo_block": args.block} if mode == "blocks" else {}
                out, first, t = _time(lambda: run(alg, data, hp, key, silo_devices=devices,  # noqa: B023
                                                  silo_compute=mode, **extra), args.repeats)  # noqa: B023
                leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(out.output)]
                verdict = compare(leaves, blocked_leaves if mode == "blocks" else ref_leaves)
                print(f"| {num_silos} | {n_params} | {mode} | {ndev} | {first:.2f} | {t:.3f} | {base / t:.2f} | "
                      f"{verdict} |", flush=True)
    print(f"load average at the end {' '.join(f'{v:.1f}' for v in os.getloadavg())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
