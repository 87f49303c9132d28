"""Side by side (issue #38): bench_fl_simulation's dpjax workload on the path before and after the padding cut.

Both code paths run in one process, interleaved (before, after, before, ...), on the MNIST workload of
``bench_fl_simulation.py`` (1,000 clients x 60 records, Poisson q = 0.1, one local epoch in batches of 10, MLP
784-64-10, fixed clipping, sigma 1, low-rank input layer, ``client_batch`` 25):

* ``before``: ``LocalDeltas(chunk_gather=False, keep_grams=True)``, ``SampledSilos(capacity_multiple=1)`` -- the
  whole 168-slot Poisson buffer gathered (the chunks' last one padded), the kernels' norms and their clipped sum over
  all of it, every client's record Gram formed at the start of the run; the sweep
  vmapped over independent run keys with one vmap over the whole buffer (``client_batch=None``);
* ``after``: a 175-slot buffer (whole chunks of 25), the chunks gather their own records and form the kernels' norms,
  the kernel sum gathers and multiplies up to the last sampled silo's chunk only; the Grams
  formed only for the visited silos where the run visits fewer than N (``dp_fedavg.keep_record_grams``); the sweep
  with common random numbers (``run_many(shared_key=True)``, dpjax sweeps' convention: the cohort, the batches and
  the noise draws shared by the 8 configurations, so the gathers run once and the matmuls take the 8 kernels as one)
  and the same chunks.

Printed per path: per round (a ``--rounds``-round run's wall time over its rounds, init included as
``bench_fl_simulation`` counts it; median and min of ``--repeats``), process CPU time per round (the load-robust
figure on a shared machine), compile (cold run less warm run), the 8-configuration grid's round and its ratio to the
single round, and the load average before each measurement. The final models of the two paths are compared
(``max |before - after|``): the same cohort and noise, different float rounding of the kernel sum.

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu .venv/bin/python experiments/benchmarks/bench_fl_padding.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("DPJAX_COMPILATION_CACHE", "0")  # cold compiles each repeat

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_fl_simulation as fl  # noqa: E402

from dpjax import engine, keys  # noqa: E402
from dpjax.algorithms.dp_fedavg import DpFedAvg  # noqa: E402
from dpjax.engine import program  # noqa: E402
from dpjax.parts.cross_device import LocalDeltas  # noqa: E402


@dataclasses.dataclass(frozen=True)
class BeforeDpFedAvg(DpFedAvg):
    """DpFedAvg with its client on the path before issue #38's padding cut."""

    def parts(self, shape):
        p = super().parts(shape)
        chain = tuple(dataclasses.replace(c, chunk_gather=False, keep_grams=True) if isinstance(c, LocalDeltas) else c
                      for c in p.chain)
        return dataclasses.replace(p, selection=dataclasses.replace(p.selection, capacity_multiple=1), chain=chain)


def before(algo: DpFedAvg) -> BeforeDpFedAvg:
    return BeforeDpFedAvg(**{f.name: getattr(algo, f.name) for f in dataclasses.fields(DpFedAvg)})


def timed(fn):
    jax.clear_caches()
    program._COMPILED.clear()
    t, c = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn().output)
    cold = time.perf_counter() - t
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    jax.block_until_ready(out.output)
    return cold, time.perf_counter() - t, time.process_time() - c, out


#: The round's floor arithmetic a sampled client (60 records, MLP 784-64-10): its records through the first layer
#: (x W, 2 R d w) and the first kernel's gradient (X^T G, 2 R d w), the second layer forward and backward
#: (~3 x 2 R w c);
#: what any local SGD of one epoch must compute (materialised per-step kernels add their updates, the low-rank form its
#: Gram). Padding slots and the Grams are not in the floor.
FLOOR_FLOPS_PER_CLIENT = 2 * 60 * 784 * 64 * 2 + 3 * 2 * 60 * 64 * 10


def peak_flops(n=2048, repeats=5):
    """Best float32 matmul rate of this process, as wall FLOP/s and as FLOP per CPU-second (the load-robust unit)."""
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    jax.block_until_ready(f(a))
    wall, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(f(a))
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return 2 * n ** 3 / min(wall), 2 * n ** 3 / min(cpu)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--client-batch", type=int, default=25)
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument("--data-dir", default=None)
    args = p.parse_args(argv)
    ns = argparse.Namespace(cifar=False, records=60, clients=1000, local_steps=6, local_batch=10, dpjax_local="epochs",
                            cohort_rate=0.1, dpjax_client_batch=args.client_batch, dpjax_input_layer="auto",
                            client_lr=0.1, sigma=1.0, clip=1.0, sweep_lrs=[0.03, 0.1, 0.3, 1.0],
                            sweep_sigmas=[0.5, 1.0])
    dp = fl.DpjaxRunner(ns, *fl.load_workload(1000, 60, args.data_dir))
    r = args.rounds
    after_single = dp.algorithm(r)
    algos = {"before": before(after_single), "after": after_single}
    grid, hp = dp.sweep_hparams()
    sweeps = {"before": lambda: engine.run_many(before(dp.algorithm(r, sweep=True)), dp.data, hp,
                                                jnp.stack([keys.run_key(0, i) for i in range(len(grid))])),
              "after": lambda: engine.run_many(after_single, dp.data, hp, keys.run_key(0, 0), shared_key=True)}
    rows = {k: {"load": [], "per_round": [], "cpu_round": [], "compile": [], "grid_round": [], "grid_cpu": [],
                "grid_compile": []} for k in algos}
    outs = {}
    for rep in range(args.repeats):
        for name, algo in algos.items():
            row = rows[name]
            row["load"].append(os.getloadavg()[0])
            cold, warm, cpu, out = timed(lambda: engine.run(algo, dp.data, dp.hparams(), keys.run_key(0, 0)))
            outs[name] = out.output
            row.setdefault("sampled", float(jnp.sum(out.round_metrics["num_available"])) / r)
            row["per_round"].append(warm / r)
            row["cpu_round"].append(cpu / r)
            row["compile"].append(cold - warm)
            if not args.no_sweep:
                cold, warm, cpu, _ = timed(sweeps[name])
                row["grid_round"].append(warm / r)
                row["grid_cpu"].append(cpu / r)
                row["grid_compile"].append(cold - warm)
        print(f"repeat {rep + 1}/{args.repeats} done, load {os.getloadavg()[0]:.1f}", flush=True)
    diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree_util.tree_leaves(outs["before"]),
                                                                jax.tree_util.tree_leaves(outs["after"])))
    peak_wall, peak_cpu = peak_flops()
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    lo = lambda xs: min(xs) if xs else float("nan")  # noqa: E731
    print(f"DP-FedAvg MNIST 1000 x 60, q 0.1, {r} rounds, client_batch {args.client_batch}; jax {jax.__version__}; "
          f"cpus {os.cpu_count()}; max |before - after| of the final model {diff:.2e}")
    print("| path | load avg | per round ms med/min | CPU ms/round med/min | compile s med/min "
          "| grid-of-8 round ms med/min | grid CPU ms/round med | grid / single (wall med, CPU med) | grid compile s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, row in rows.items():
        ratio = med(row["grid_round"]) / med(row["per_round"])
        cratio = med(row["grid_cpu"]) / med(row["cpu_round"])
        print(f"| {name} | {'/'.join(f'{x:.1f}' for x in row['load'])} "
              f"| {1e3 * med(row['per_round']):.1f}/{1e3 * lo(row['per_round']):.1f} "
              f"| {1e3 * med(row['cpu_round']):.1f}/{1e3 * lo(row['cpu_round']):.1f} "
              f"| {med(row['compile']):.2f}/{lo(row['compile']):.2f} "
              f"| {1e3 * med(row['grid_round']):.1f}/{1e3 * lo(row['grid_round']):.1f} "
              f"| {1e3 * med(row['grid_cpu']):.1f} "
              f"| {ratio:.2f}, {cratio:.2f} | {med(row['grid_compile']):.2f} |")
    floor = rows["after"]["sampled"] * FLOOR_FLOPS_PER_CLIENT
    print(f"roofline: {rows['after']['sampled']:.1f} sampled clients a round x "
          f"{FLOOR_FLOPS_PER_CLIENT / 1e6:.1f} MFLOP = "
          f"{floor / 1e9:.2f} GFLOP; peak matmul {peak_wall / 1e9:.1f} GFLOP/s wall, {peak_cpu / 1e9:.1f} GFLOP per "
          f"CPU-s (2048^2, load {os.getloadavg()[0]:.1f}); floor {1e3 * floor / peak_wall:.1f} ms wall, "
          f"{1e3 * floor / peak_cpu:.1f} CPU-ms")
    for name, row in rows.items():
        print(f"  {name}: measured / floor = {med(row['per_round']) * peak_wall / floor:.2f} (wall), "
              f"{med(row['cpu_round']) * peak_cpu / floor:.2f} (CPU); grid of 8 / its floor (8 x, every "
              f"configuration its own kernels) = {med(row['grid_round']) * peak_wall / (8 * floor):.2f} (wall), "
              f"{med(row['grid_cpu']) * peak_cpu / (8 * floor):.2f} (CPU)")
    print(f"after / before per round: wall {med(rows['after']['per_round']) / med(rows['before']['per_round']):.2f}, "
          f"CPU {med(rows['after']['cpu_round']) / med(rows['before']['cpu_round']):.2f}; "
          f"load avg at the end {os.getloadavg()}")
    return rows


if __name__ == "__main__":
    main()
