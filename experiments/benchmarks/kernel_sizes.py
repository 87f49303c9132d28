"""Where a figure's main chunk program sits between its one-bandwidth floor and the CPU's bandwidth at its kernels' sizes.

Issue 25, item 2 (a measured reason for a figure more than 3x from its floor). The roofline's floor
divides a program's bytes by the best copy bandwidth of the machine (``roofline.measure_peaks``), which
this 2-core CPU reaches only for arrays of 8-16 MiB: smaller copies are slower a byte (each kernel's
fixed cost), larger ones fall out of the cache. A program made of hundreds of kernels of a few MiB each,
a round, cannot run at that peak. This script runs one figure (``dpjax reproduce NAME``), takes its
chunk program with the most time, and prints, in one process:

* its kernels from the optimized HLO (``hlo_cost.kernel_traffic``: launches weighted by loop trip
  counts, one launch's bytes): how many a round, and how the bytes split over kernel sizes;
* the copy bandwidth at each size (a scaled copy of 0.25-256 MiB, best of several), and the cost of one
  tiny kernel inside a compiled loop (a scan of a few-byte body: its time over its launches);
* the program's measured time (best of ``--repeats``) against two estimates: the one-bandwidth floor
  (all bytes at the best copy, as the roofline) and the size-aware estimate (each kernel's bytes at the
  copy bandwidth of its size, kernels under 64 KiB at the tiny-kernel cost or their bytes at the best
  copy, whichever is more). The second is an estimate, not a floor: a kernel's access pattern can be
  better or worse than a copy's, and the tiny-kernel probe (a loop of one small fusion) is cheaper than
  most real small kernels.

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu python experiments/benchmarks/kernel_sizes.py diff2-regression \
        --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import bisect
import math
import os
import pathlib
import sys
import tempfile
import time

import jax
import jax.numpy as jnp

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # this folder's scripts are not a package
    sys.path.insert(0, str(HERE))
import roofline  # noqa: E402  (its timer and its loader of sibling modules)
COPY_MIB = (0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 256)
TINY_BYTES = 64 * 1024
SIZE_EDGES = (0, TINY_BYTES, 256 * 1024, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, math.inf)


def _best(fn, repeats: int) -> float:
    return roofline.best_time(fn, repeats, budget_s=30.0)[0]


def copy_bandwidths(repeats: int, sizes_mib=COPY_MIB) -> list[tuple[float, float]]:
    """``(traffic bytes, bytes/s)`` of a scaled copy (read + write) of each size."""
    scale = jax.jit(lambda x: x * jnp.float32(1.0000001))
    out = []
    for mib in sizes_mib:
        x = jnp.ones((int(mib * 2**20) // 4,), jnp.float32)
        t = _best(lambda: scale(x), repeats if mib < 64 else max(3, repeats // 3))
        out.append((2.0 * x.nbytes, 2.0 * x.nbytes / t))
    return out


def bandwidth_at(curve: list[tuple[float, float]], nbytes: float) -> float:
    """The copy bandwidth at a kernel's traffic: interpolated in log(size) between the measured copies,
    the end values outside them."""
    sizes = [s for s, _ in curve]
    i = bisect.bisect_left(sizes, nbytes)
    if i == 0:
        return curve[0][1]
    if i == len(curve):
        return curve[-1][1]
    (s0, b0), (s1, b1) = curve[i - 1], curve[i]
    w = (math.log(nbytes) - math.log(s0)) / (math.log(s1) - math.log(s0))
    return b0 + w * (b1 - b0)


def tiny_kernel_seconds(repeats: int, iterations: int = 20_000) -> float:
    """One tiny kernel's cost inside a compiled loop: a scan of a 16-float body, its time over the
    launches ``kernel_traffic`` counts in it (the body's fusion and the loop's own counter and test)."""
    hlo_cost = roofline._load_sibling("hlo_cost")
    step = jax.jit(lambda c: jax.lax.scan(lambda c, _: (jnp.sin(c) + 1.0, None), c, None, length=iterations)[0])
    c = jnp.zeros((16,), jnp.float32)
    launches = sum(n for n, *_ in hlo_cost.kernel_traffic(step.lower(c).compile().as_text()))
    return _best(lambda: step(c), repeats) / max(launches, 1)


def capture_main_chunk(name: str, data_dir, seed: int = 0, algorithm: str | None = None):
    """Runs figure ``name`` (``--quick``) and returns ``(program, chunk_args, seconds)`` of the chunk
    program with the most time in it (of those whose algorithm class is named ``algorithm``, if given:
    programs of similar time swap places from run to run)."""
    from dpjax import reproduce
    from dpjax.engine.program import ChunkProgram

    spent: dict[int, list] = {}
    original = ChunkProgram.run_chunks

    def timed(program, chunk_args):
        t0 = time.perf_counter()
        out = original(program, chunk_args)
        entry = spent.setdefault(id(program), [program, chunk_args[0], 0.0])
        entry[2] += time.perf_counter() - t0
        return out

    fig = reproduce.get(name)
    kwargs = {"quick": True, "seed": seed} | ({"data_dir": data_dir} if fig.reads_data else {})
    ChunkProgram.run_chunks = timed
    try:
        with tempfile.TemporaryDirectory() as tmp:
            fig.fn(pathlib.Path(tmp), **kwargs)
    finally:
        ChunkProgram.run_chunks = original
    scanned = [e for e in spent.values() if e[0].round_loop == "scan"
               and algorithm in (None, type(e[0].static_key[0]).__name__)]
    if not scanned:
        raise SystemExit(f"{name}: no scanned chunk program ran" + (f" of {algorithm}" if algorithm else ""))
    return tuple(max(scanned, key=lambda e: e[2]))


def analyse(name: str, data_dir, repeats: int, algorithm: str | None = None) -> str:
    from dpjax.engine import program as prog

    hlo_cost = roofline._load_sibling("hlo_cost")
    program, chunk_args, _ = capture_main_chunk(name, data_dir, algorithm=algorithm)
    args = prog._stack_devices([chunk_args] * len(program.devices), program.per_chunk)
    compiled = program._compile(args)
    placed = program._put(args)
    measured = _best(lambda: compiled(*placed), repeats)
    kernels = hlo_cost.kernel_traffic(compiled.as_text())
    rounds = program.static_key[0].num_rounds
    curve = copy_bandwidths(repeats)
    best_bw = max(b for _, b in curve)
    tiny = tiny_kernel_seconds(repeats)
    total = sum(n * b for n, b, *_ in kernels)
    launches = sum(n for n, *_ in kernels)
    one_bw = total / best_bw
    aware = sum(n * (max(tiny, b / best_bw) if b < TINY_BYTES else b / bandwidth_at(curve, b)) for n, b, *_ in kernels)
    lines = [
        f"# kernel_sizes.py {name} --quick: {type(program.static_key[0]).__name__}, chunk {program.shape}, "
        f"{rounds} rounds",
        "",
        f"load {', '.join(f'{x:.1f}' for x in os.getloadavg())}; copy bandwidth by array size (GB/s, traffic twice "
        "the size): "
        + ", ".join(f"{s / 2 / 2**20:g} MiB {b / 1e9:.1f}" for s, b in curve)
        + f"; one tiny kernel in a compiled loop: {tiny * 1e6:.2f} us",
        "",
        f"{launches:,} kernel launches ({launches / rounds:.0f} a round), {total / 1e9:.2f} GB (the HLO model's count)",
        "",
        "| one launch's traffic | kernels a round | share of bytes | copy bandwidth there (a copy of that traffic) |",
        "|---|---|---|---|",
    ]
    for lo, hi in zip(SIZE_EDGES, SIZE_EDGES[1:]):
        inside = [(n, b) for n, b, *_ in kernels if lo <= b < hi]
        if not inside:
            continue
        count, nbytes = sum(n for n, _ in inside), sum(n * b for n, b in inside)
        mid = nbytes / count
        bw = "tiny: per-kernel cost" if hi <= TINY_BYTES else f"{bandwidth_at(curve, mid) / 1e9:.1f} GB/s"
        label = f"{lo / 2**20:g}-{hi / 2**20:g} MiB" if hi != math.inf else f">= {lo / 2**20:g} MiB"
        lines.append(f"| {label} | {count / rounds:.1f} | {100 * nbytes / total:.1f} % | {bw} |")
    lines += [
        "",
        f"measured {measured * 1e3:.1f} ms a call; one-bandwidth floor {one_bw * 1e3:.1f} ms "
        f"(measured / floor {measured / one_bw:.2f}); size-aware estimate {aware * 1e3:.1f} ms "
        f"(measured / estimate {measured / aware:.2f})",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("figures", nargs="+", help="reproduce names (run --quick)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None, help="also append the report to this file")
    ap.add_argument("--algorithm", default=None, help="only chunk programs of this algorithm class (e.g. LocalSgd)")
    args = ap.parse_args(argv)
    for name in args.figures:
        report = analyse(name, args.data_dir, args.repeats, args.algorithm)
        print(report, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(report + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
