"""The user-level rate figures' dominant work, one solver iteration over many runs, against its floors.

Issue 25, item 2. After batching (D5 / D6 / D8 run a cell's runs as lanes of one vmapped program), the
largest cells (m = 1024 items per user: 102,400 items of d = 5 in float64) take most of each figure's
compute. Every iteration of the inner solver computes, for every lane, the margins ``z = X theta``
and the gradient ``X^T phi'(z)`` (``dpjax.user_level.solver.weighted_mean_grad``): 4 N d FLOPs a lane.

Measured here, in one process: the float64 matmul peak, the read bandwidth (a sum over 4-64 MiB, the
best kept), and one iteration of
that gradient for ``--lanes`` runs (a ``fori_loop`` of ``--iters`` iterations, best of ``--repeats``).
Printed floors per iteration:

* FLOPs: 4 N d lanes / float64 matmul peak;
* data only: X and y read twice (2 N (d + 1) 8 bytes) / read bandwidth (the bound if margins and
  coefficients stayed in registers);
* with the intermediates XLA:CPU materialises: the dot writes ``z`` ([lanes, N] float64), the
  elementwise fusion reads it and writes ``phi'``, the second dot reads it: 4 lanes N 8 bytes more.

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu python experiments/benchmarks/bench_user_level_solver.py [--lanes 49]
"""

from __future__ import annotations

import argparse
import time


def _best(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--users", type=int, default=100)
    ap.add_argument("--items", type=int, default=1024)
    ap.add_argument("--dim", type=int, default=5)
    ap.add_argument("--lanes", type=int, nargs="+", default=[1, 24, 49])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peak-size", type=int, default=1024, help="side of the float64 matmul of the FLOP peak")
    args = ap.parse_args(argv)

    import jax

    # float64 only inside this call, never process-wide: tests run main() in-process, and a global flip
    # once leaked float64 (other random streams) into every later test of that pytest worker.
    with jax.enable_x64(True):
        _measure(args)


def _measure(args) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from dpjax.user_level import problems, solver

    n, m, d = args.users, args.items, args.dim
    big = jnp.asarray(np.random.default_rng(0).random((args.peak_size, args.peak_size)))
    matmul = jax.jit(lambda a: a @ a)
    peak_flops = 2 * args.peak_size**3 / _best(lambda: matmul(big).block_until_ready(), args.repeats + 2)
    # read bandwidth: a sum over arrays of 4-64 MiB, the best kept (the floors below are reads of X and y;
    # an elementwise copy allocates a fresh output per call here and under-measures by first-touch faults)
    total = jax.jit(jnp.sum)
    peak_bytes = 0.0
    for mib in (4, 16, 64):
        buf = jnp.asarray(np.random.default_rng(1).random(mib * 2**20 // 8))
        peak_bytes = max(peak_bytes, buf.nbytes / _best(lambda: total(buf).block_until_ready(), args.repeats + 2))
    print(f"float64 matmul peak {peak_flops / 1e9:.1f} GFLOP/s, read {peak_bytes / 1e9:.1f} GB/s "
          f"(n={n}, m={m}, d={d}: N = {n * m} items)")
    x, y = problems.exchangeable("absolute", n, m, d, 1, noise=0.0)
    loss = problems.Loss("absolute", radius=1.0, smoothing=0.1)
    xs, ys, w = jnp.asarray(x), jnp.asarray(y), jnp.ones(n)
    print("| lanes | per iteration | FLOP floor | data-only floor | with intermediates | measured / best floor |\n"
          "|---|---|---|---|---|---|")
    for lanes in args.lanes:
        thetas = jnp.asarray(np.random.default_rng(2).normal(size=(lanes, d)) * 0.1)
        grad = jax.vmap(lambda th: solver.weighted_mean_grad(loss, th, xs, ys, w))

        @jax.jit
        def loop(th):
            return jax.lax.fori_loop(0, args.iters, lambda _, t: t - 0.01 * grad(t), th)

        per_iter = _best(lambda: loop(thetas).block_until_ready(), args.repeats) / args.iters
        big_n = n * m
        flop_floor = 4 * big_n * d * lanes / peak_flops
        data_floor = 2 * big_n * (d + 1) * 8 / peak_bytes
        inter_floor = (2 * big_n * (d + 1) * 8 + 4 * lanes * big_n * 8) / peak_bytes
        best = max(flop_floor, data_floor)
        print(f"| {lanes} | {per_iter * 1e3:.4g} ms | {flop_floor * 1e3:.4g} ms | {data_floor * 1e3:.4g} ms | "
              f"{inter_floor * 1e3:.4g} ms | {per_iter / best:.1f} |", flush=True)


if __name__ == "__main__":
    main()
