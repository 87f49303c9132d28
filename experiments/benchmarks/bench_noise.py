"""Cost of drawing the Gaussian noise of one DP-SGD step, by PRNG implementation and dtype.

A DP-SGD step on the 784-256-10 MLP draws 203,530 normals; on CPU that is
about as expensive as the non-private gradient step itself. Options measured
side by side (interleaved, median ms per draw):

* ``threefry`` (JAX's default; what ``dpjax.primitives.noise`` uses), one draw
  per pytree leaf (as ``gaussian_like``) and one flat draw;
* ``rbg`` / ``unsafe_rbg`` keys (XLA's RngBitGenerator), derived from the
  threefry key so the same seed still gives the same result;
* normals generated in bfloat16 / float16 and cast up.

Which ones are admissible for DP noise (exact in distribution, same seed =>
same result):

* threefry: yes (counter-based, stable across backends and versions);
* rbg / unsafe_rbg: the distribution is the same (same bits -> normal map),
  same seed => same result on one backend and version, but JAX documents their
  streams as not stable across backends or versions, and ``unsafe_rbg`` splits
  keys with a weaker hash; kept out unless much faster;
* bf16 / f16 draws: NOT exact: the normal is quantised to 8 / 11 mantissa bits
  (and f16 clips the tails), so the released noise is not the Gaussian the
  accountant assumes. Rejected whatever their speed.

Measured (2026-11-24, the shared 2-core CPU under load ~15, so only ratios
within one run mean anything; three runs): one flat threefry draw took 0.41x,
0.50x and 0.52x the time of one draw per leaf, so ``gaussian_like`` now draws
a same-dtype tree in one flat draw (still threefry: same law, same seed =>
same result). rbg and unsafe_rbg were 11-14x *slower* than per-leaf threefry
on this CPU (XLA's CPU RngBitGenerator), bf16 2.9x and f16 1.2x slower, and
are inexact anyway. On CPU the noise of a 203k-parameter model still costs
about one non-private MLP step (bench_dp_step.py, "noise only" row).

Usage: ``python experiments/benchmarks/bench_noise.py [--n 203530] [--repeats 40]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

MLP_LEAVES = (784 * 256, 256, 256 * 10, 10)


def rbg_key(key, impl):
    return jax.random.wrap_key_data(jax.random.bits(key, (4,), jnp.uint32), impl=impl)


def options(n):
    def per_leaf(key):
        return [jax.random.normal(k, (s,)) for k, s in zip(jax.random.split(key, len(MLP_LEAVES)), MLP_LEAVES)]

    return {
        "threefry f32, per leaf (before)": per_leaf,
        "threefry f32, flat (gaussian_like)": lambda k: jax.random.normal(k, (n,)),
        "threefry raw bits only": lambda k: jax.random.bits(k, (n,)),
        "rbg f32 (rejected)": lambda k: jax.random.normal(rbg_key(k, "rbg"), (n,)),
        "unsafe_rbg f32 (rejected)": lambda k: jax.random.normal(rbg_key(k, "unsafe_rbg"), (n,)),
        "threefry bf16 (not exact)": lambda k: jax.random.normal(k, (n,), jnp.bfloat16).astype(jnp.float32),
        "threefry f16 (not exact)": lambda k: jax.random.normal(k, (n,), jnp.float16).astype(jnp.float32),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=sum(MLP_LEAVES))
    ap.add_argument("--repeats", type=int, default=40)
    args = ap.parse_args()
    fns = {label: jax.jit(fn) for label, fn in options(args.n).items()}
    key = jax.random.key(0)
    for f in fns.values():
        jax.block_until_ready(f(key))
    # same seed => same result, for every option
    for label, f in fns.items():
        a, b = f(key), f(jax.random.key(0))
        assert all(bool(jnp.array_equal(u, v)) for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))), label
    times = {label: [] for label in fns}
    for _ in range(args.repeats):
        for label, f in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f(key))
            times[label].append(time.perf_counter() - t0)
    base = statistics.median(times["threefry f32, per leaf (before)"])
    print(f"device: {jax.devices()[0].device_kind}, {args.n} normals, median of {args.repeats} (ms)")
    for label, ts in times.items():
        ms = statistics.median(ts)
        print(f"  {label:30s} {ms * 1e3:8.3f} ms  {ms / base:6.2f}x  {ms / args.n * 1e9:6.2f} ns/normal")


if __name__ == "__main__":
    main()
