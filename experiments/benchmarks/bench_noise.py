"""Cost of drawing the Gaussian noise of one DP-SGD step, by PRNG implementation and dtype.

A DP-SGD step on the 784-256-10 MLP draws 203,530 normals; on CPU that is
about as expensive as the non-private gradient step itself. Options measured
side by side (interleaved, median ms per draw):

* ``threefry`` (JAX's default; what ``dpjax.primitives.noise`` uses), one draw
  per pytree leaf (as ``gaussian_like``) and one flat draw;
* ``rbg`` / ``unsafe_rbg`` keys (XLA's RngBitGenerator), derived from the
  threefry key so the same seed still gives the same result;
* the parts of the threefry normal: raw bits only, and bits + jax's
  ``sqrt(2) erfinv`` transform written out;
* Box-Muller from the same threefry bits (exact in law up to float32
  rounding, like erfinv), and four normals from three threefry words
  (24-bit slices: the law of ``jax.random.uniform``, which uses 23 of 32 bits);
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
are inexact anyway.

Second session (2026-11-24 04:00 UTC, load 25-27, two runs, 203,530 normals):
the threefry *bits alone* cost 0.94x and 0.98x of the full flat normal draw
(6.0 vs 6.4 ms; 7.7 vs 7.9 ms), so the erfinv transform is ~5% and no exact
transform can make the noise materially cheaper: Box-Muller was 2.7-4.4x
slower than the flat draw (XLA CPU's log/sin/cos), three words -> four normals
3.3x slower (the slicing costs more than the saved threefry rounds),
rbg/unsafe_rbg 4.5-7.9x slower. ``gaussian_like`` stays one flat threefry
draw. On CPU the noise of a 203k-parameter model costs about one non-private
MLP step (bench_dp_step.py, "noise only" row: 1.03x the non-private step).

Third session (2026-11-26, issue 25): the cost above was jax's CPU lowering, not
Threefry. On CPU jax lowers ``threefry2x32`` as a rolled 5-step ``fori_loop``
(each step a separate kernel writing and re-reading both 32-bit state arrays);
written out with the 20 rounds unrolled (``dpjax.primitives.noise.normal``:
the same integer ops, the same counters, the same ``sqrt(2) erfinv``
transform, so bit for bit ``jax.random.normal``) XLA fuses bits and transform
into one loop: 203,530 normals in 0.92 ms against 1.8-1.9 ms (process CPU,
three interleaved runs; bits alone 0.41-0.49 vs 1.43-1.70 ms).
``gaussian_like`` now draws that way, each leaf from its own counter range.

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


def _unit_uniform(bits):
    """[0, 1) floats from 32-bit words: the top 23 bits as a mantissa (what jax.random.uniform does)."""
    return jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0


def box_muller(key, n):
    """Box-Muller from one threefry draw of n words (ceil(n/2) pairs): exact in law up to float32
    rounding, like the inverse-erf transform jax uses (1 - u keeps log away from 0)."""
    bits = jax.random.bits(key, (2, (n + 1) // 2))
    r = jnp.sqrt(-2.0 * jnp.log1p(-_unit_uniform(bits[0])))
    theta = (2.0 * jnp.pi) * _unit_uniform(bits[1])
    return jnp.concatenate([r * jnp.cos(theta), r * jnp.sin(theta)])[:n]


def erfinv_from_bits(key, n):
    """jax.random.normal's transform written out (uniform on (-1, 1), sqrt(2) erfinv): isolates the transform."""
    u = _unit_uniform(jax.random.bits(key, (n,)))
    lo = jnp.nextafter(jnp.float32(-1.0), jnp.float32(0.0))
    return jnp.sqrt(2.0) * jax.lax.erf_inv(jnp.maximum(2.0 * u - 1.0, lo))


def packed_erfinv(key, n):
    """Four normals from three threefry words: each 24-bit slice gives a 23-bit uniform with the
    law of jax.random.uniform (which uses 23 of 32 bits), then jax's sqrt(2) erfinv transform;
    25% fewer threefry words, same law, a different (deterministic) stream."""
    m = (n + 3) // 4
    w = jax.random.bits(key, (3, m))
    chunks = [w[0] >> 8, ((w[0] & 0xFF) << 16) | (w[1] >> 16), ((w[1] & 0xFFFF) << 8) | (w[2] >> 24), w[2] & 0xFFFFFF]
    u = jnp.concatenate([(c >> 1).astype(jnp.float32) * jnp.float32(2.0**-23) for c in chunks])[:n]
    lo = jnp.nextafter(jnp.float32(-1.0), jnp.float32(0.0))
    return jnp.sqrt(2.0) * jax.lax.erf_inv(jnp.maximum(2.0 * u - 1.0, lo))


def options(n):
    def per_leaf(key):
        return [jax.random.normal(k, (s,)) for k, s in zip(jax.random.split(key, len(MLP_LEAVES)), MLP_LEAVES)]

    return {
        "threefry f32, per leaf (before)": per_leaf,
        "threefry f32, flat (gaussian_like)": lambda k: jax.random.normal(k, (n,)),
        "threefry raw bits only": lambda k: jax.random.bits(k, (n,)),
        "threefry bits + erfinv (explicit)": lambda k: erfinv_from_bits(k, n),
        "threefry bits + Box-Muller": lambda k: box_muller(k, n),
        "threefry 3 words -> 4 normals": lambda k: packed_erfinv(k, n),
        "threefry flat, noise added to a tree": lambda k: jax.random.normal(k, (n,)) * 0.5 + jnp.ones((n,)),
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
