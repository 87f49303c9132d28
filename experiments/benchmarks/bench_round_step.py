"""Rounds/s of the compiled ISRL-DP round vs its non-private twin vs a NumPy silo loop.

Issue #2 targets: private / non-private time <= 1.3x, and the compiled private
round >= 15x a NumPy loop over silos. All three are measured side by side in
one process (the machines are noisy, so only ratios from one run count).

Settings (binary logistic regression, per-example clipping, Gaussian noise,
N silos each sampling K of n records without replacement, M available):

* ``mnist-fig4``: N=25, M=12, n=1238, d=50, K=444 (the ISRL-DP Fig. 4 shape);
* ``wide``: N=25, M=25, n=2400, d=784, K=256 (raw MNIST pixels).

Two throughputs are printed for the compiled engine: one configuration at a
time (rounds/s), and a grid of ``--grid`` configurations (step sizes and noise
levels) vmapped into one program sharing the data and the run key (common
random numbers, as sweeps use; run-rounds/s, i.e. rounds of all runs per second) -- the way sweeps and figure reproductions use it.
A NumPy loop runs one configuration at a time, so its rounds/s is also its
run-rounds/s on a grid. A last line per setting times a program that makes only
one configuration's random draws (availability, batches, noise): the ceiling
of single-configuration throughput with threefry keys, whatever the arithmetic
costs. On the grid those draws are shared by all configurations (common random
numbers) and stop mattering.

Usage: ``python experiments/benchmarks/bench_round_step.py [--rounds 200] [--grid 32] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd  # noqa: E402
from dpjax.engine import SiloData, run, run_many, stack_hparams  # noqa: E402
from dpjax.primitives import FixedAvailability  # noqa: E402
from dpjax.problems import LogisticRegression  # noqa: E402

SETTINGS = {
    "mnist-fig4": dict(N=25, M=12, n=1238, d=50, K=444),
    "wide": dict(N=25, M=25, n=2400, d=784, K=256),
}


def make_data(N, n, d, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d) / np.sqrt(d)
    xs = [rng.normal(size=(n, d)).astype(np.float32) / np.sqrt(d) * 3 for _ in range(N)]
    ys = [(x @ w > 0).astype(np.float32) for x in xs]
    return xs, ys


def time_compiled(algo, data, hp, repeats):
    key = jax.random.key(0)
    t0 = time.perf_counter()
    run(algo, data, hp, key)  # compile + first run
    compile_s = time.perf_counter() - t0
    best = np.inf
    for i in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(run(algo, data, hp, jax.random.key(i + 1)).output)
        best = min(best, time.perf_counter() - t0)
    return algo.num_rounds / best, compile_s


def time_compiled_grid(algo, data, width, repeats):
    """run-rounds/s of ``width`` configurations vmapped into one program."""
    hps = stack_hparams([MbSgdHParams.create(0.1 + 0.05 * i, 0.05 + 0.01 * i, 1.0) for i in range(width)])
    # common random numbers across the grid, as sweeps and `dpjax run` use
    call = lambda seed: run_many(algo, data, hps, jax.random.key(seed), shared_key=True).output
    jax.block_until_ready(call(0))
    best = np.inf
    for i in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(call(i + 1))
        best = min(best, time.perf_counter() - t0)
    return width * algo.num_rounds / best


def time_draws_only(algo, data, repeats):
    """rounds/s of a program that makes only one configuration's random draws of a
    round (availability, the silos' batches, the silos' noise) and no arithmetic:
    the ceiling of single-configuration throughput with counter-based (threefry)
    keys on this device."""
    from dpjax import keys as keys_lib
    from dpjax.engine.roles import Batch, Context, Sensitive
    from dpjax.parts import GaussianNoise
    from dpjax.parts.selection import available_silos

    hparams = algo.hparams_type.create(0.1, noise_multiplier=1.0)

    params = algo.problem.init_params()

    def one_round(acc, r):
        key = keys_lib.round_key(jax.random.key(7), r)
        silo_ids, available = available_silos(algo.availability, key, data.num_silos)
        silo_keys = keys_lib.silo_keys(keys_lib.stream_key(key, "sampling"), data.num_silos)[silo_ids]
        draw = algo.sampler.draw_weights if algo._dense(data) else algo.sampler.draw
        batch = jax.vmap(lambda k, size: draw(k, size, data.n_max, r, None)[0])(silo_keys, data.sizes[silo_ids])
        zeros = jax.tree_util.tree_map(lambda p: jnp.zeros((silo_ids.shape[0],) + p.shape, p.dtype), params)
        chosen = Batch(silo_ids, available, None, batch, jnp.zeros(available.shape, bool), data.num_silos)
        ctx = Context(r, key, hparams, batch=chosen)  # the silos' noise as the privatizer part draws it
        noisy = GaussianNoise().update(Sensitive(zeros, jnp.float32(0.5)), (), ctx)[0].value
        return acc + jnp.sum(batch) + sum(jnp.sum(l) for l in jax.tree_util.tree_leaves(noisy)), None

    fn = jax.jit(lambda: jax.lax.scan(one_round, jnp.float32(0), jnp.arange(algo.num_rounds))[0])
    jax.block_until_ready(fn())
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return algo.num_rounds / best


def numpy_loop(xs, ys, rounds, K, M, clip, sigma, lr, seed=0):
    """The authors' script structure: a Python loop over rounds and silos with
    analytic per-example logistic gradients, clipping and per-silo noise."""
    rng = np.random.default_rng(seed)
    N, d = len(xs), xs[0].shape[1]
    w = np.zeros(d, np.float32)
    for _ in range(rounds):
        avail = rng.choice(N, M, replace=False)
        msgs = []
        for i in avail:
            idx = rng.choice(len(xs[i]), K, replace=False)
            xb, yb = xs[i][idx], ys[i][idx]
            m = np.clip(xb @ w, -15, 15)
            g = (1 / (1 + np.exp(-m)) - yb)[:, None] * xb  # per-example gradients [K, d]
            norms = np.linalg.norm(g, axis=1, keepdims=True)
            g = g * np.minimum(1.0, clip / np.maximum(norms, 1e-30))
            msgs.append(g.sum(0) / K + sigma * rng.standard_normal(d).astype(np.float32))
        w = w - lr * np.mean(msgs, axis=0)
    return w


def time_numpy(xs, ys, rounds, K, M, repeats):
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        numpy_loop(xs, ys, rounds, K, M, clip=1.0, sigma=0.1, lr=0.5)
        best = min(best, time.perf_counter() - t0)
    return rounds / best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--numpy-rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--grid", type=int, default=32, help="configurations vmapped in the grid measurement")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    args = parser.parse_args(argv)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({jax.devices()}); rounds/s, best of {args.repeats}")
    print(f"single = one configuration per program (rounds/s); grid = {args.grid} configurations vmapped (run-rounds/s)")
    header = (f"{'setting':11s} {'mode':6s} {'private':>9s} {'non-priv':>9s} {'numpy':>7s} "
              f"{'priv/non-priv time':>18s} {'priv/numpy speed':>16s}")
    print(header)
    rows = []
    for name in args.settings:
        s = SETTINGS[name]
        xs, ys = make_data(s["N"], s["n"], s["d"])
        data = SiloData.from_silos(xs, ys)
        common = dict(num_rounds=args.rounds, batch_size=s["K"], availability=FixedAvailability(s["M"]))
        private = NoisyMbSgd(LogisticRegression(s["d"]), **common)
        twin = NoisyMbSgd(LogisticRegression(s["d"]), private=False, **common)
        hp = MbSgdHParams.create(0.5, 0.1, 1.0)
        np_rps = time_numpy(xs, ys, args.numpy_rounds, s["K"], s["M"], args.repeats)
        for mode in ("single", "grid"):
            if mode == "single":
                priv_rps, _ = time_compiled(private, data, hp, args.repeats)
                twin_rps, _ = time_compiled(twin, data, hp, args.repeats)
            else:
                priv_rps = time_compiled_grid(private, data, args.grid, args.repeats)
                twin_rps = time_compiled_grid(twin, data, args.grid, args.repeats)
            ratio, speedup = twin_rps / priv_rps, priv_rps / np_rps
            rows.append((name, mode, priv_rps, twin_rps, np_rps, ratio, speedup))
            print(f"{name:11s} {mode:6s} {priv_rps:9.1f} {twin_rps:9.1f} {np_rps:7.1f} {ratio:18.2f} {speedup:16.1f}")
        draws_rps = time_draws_only(private, data, args.repeats)
        print(f"{name:11s} draws-only ceiling of one configuration: {draws_rps:9.1f} rounds/s "
              f"= {draws_rps / np_rps:.1f}x numpy (the round's PRNG draws alone, no arithmetic)")
    print("targets: private/non-private time <= 1.3; private/numpy speed >= 15")
    return rows


if __name__ == "__main__":
    main()
