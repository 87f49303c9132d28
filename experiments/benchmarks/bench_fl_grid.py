"""Where an 8-configuration DP-FedAvg grid's round goes against a single configuration's (issue #38: "a round of the
8-configuration grid <= 3x a single configuration's round").

The workload is ``bench_fl_simulation.py``'s dpjax side: MNIST, 1,000 clients x 60 records, Poisson q = 0.1, one local
epoch in batches of 10 at lr 0.1, MLP 784-64-10, fixed clipping, low-rank input layer (``input_layer="auto"``), chunks
of ``client_batch`` clients. The grid is its sweep: 4 client learning rates x 2 noise levels as ONE
``engine.run_many(shared_key=True)`` program (common random numbers: the cohorts, batches and noise draws are shared,
so the gathers and the record Grams run once and the first layer's matmuls take the 8 kernels side by side: ``X W_0``
is one ``[k 60, 784] x [784, 8 x 64]`` matmul a chunk, the clipped kernel sums one ``[784, M 60] x [M 60, 8 x 64]``).

Printed, for every ``--client-batch`` k, single and grid interleaved in one process (``--repeats``, min and median,
the 1-minute load average before each repeat):

* per round, wall and process CPU time (the load-robust figure on a shared machine), and grid / single;
* the round's matmul floor in CPU-ms: the first layer's ``X W_0`` over the computed chunks' slots, the clipped kernel
  sum ``X^T h`` over the chunks up to the last sampled client, the per-chunk record Grams, each at THIS process's best
  rate for that very shape (jitted alone, GFLOP per CPU-second); the grid's are 8x the single's except the Grams
  (shared). Hence a lower bound on grid / single that no batching can beat: the grid's floor over the single round as
  measured.

``--profile DIR`` adds a ``jax.profiler`` trace of one run of each and sums its XLA ops' self time (top 15).

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu .venv/bin/python experiments/benchmarks/bench_fl_grid.py \\
        [--repeats 5] [--client-batch 25 10] [--profile /tmp/grid_trace] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import glob
import gzip
import json
import math
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("DPJAX_COMPILATION_CACHE", "0")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_fl_simulation as fl  # noqa: E402

from dpjax import engine, keys  # noqa: E402

RECORDS, DIM, WIDTH, CLASSES = 60, 784, 64, 10


def cpu_rate(fn, *args, repeats=10) -> float:
    """The fewest process CPU seconds one call of ``jit(fn)(*args)`` took in ``repeats`` calls (after a compiling one)."""
    f = jax.jit(fn)
    jax.block_until_ready(f(*args))
    best = math.inf
    for _ in range(repeats):
        c = time.process_time()
        jax.block_until_ready(f(*args))
        best = min(best, time.process_time() - c)
    return best


def matmul_floor(slots: float, prefix: float, configs: int, k: int) -> dict:
    """CPU-ms a round of the first layer's matmuls, each at this process's best rate for its shape: ``X W_0`` over
    ``slots`` computed client slots (chunks of k), ``X^T h`` over ``prefix`` slots, the Grams over ``slots``."""
    key = jax.random.key(0)
    x = jax.random.normal(key, (k * RECORDS, DIM))
    w = jax.random.normal(key, (DIM, configs * WIDTH))
    xs = jax.random.normal(key, (k, RECORDS, DIM))
    m = max(1, round(prefix))
    xt = jax.random.normal(key, (m * RECORDS, DIM))
    h = jax.random.normal(key, (m * RECORDS, configs * WIDTH))
    t_xw = cpu_rate(lambda a, b: a @ b, x, w) * slots / k
    t_xh = cpu_rate(lambda a, b: a.T @ b, xt, h) * prefix / m
    t_gram = cpu_rate(lambda a: jnp.einsum("krd,ksd->krs", a, a), xs) * slots / k
    flops = {"xw": 2 * slots * RECORDS * DIM * WIDTH * configs, "xh": 2 * prefix * RECORDS * DIM * WIDTH * configs,
             "gram": 2 * slots * RECORDS ** 2 * DIM}
    return {"xw_ms": 1e3 * t_xw, "xh_ms": 1e3 * t_xh, "gram_ms": 1e3 * t_gram,
            "total_ms": 1e3 * (t_xw + t_xh + t_gram), "gflop": sum(flops.values()) / 1e9}


def op_self_times(trace_dir: str, rounds: int, top: int = 15):
    """Self time (ms a round) of every op in a ``jax.profiler`` perfetto trace: each event's duration less its
    children's on the same thread, summed by name (host-side Python frames left out)."""
    path = sorted(glob.glob(f"{trace_dir}/**/perfetto_trace.json.gz", recursive=True))[-1]
    events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    threads = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            threads[(e["pid"], e["tid"])].append(e)
    total = collections.Counter()
    for evs in threads.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                stack[-1]["_children"] = stack[-1].get("_children", 0) + e["dur"]
            stack.append(e)
        for e in evs:
            name = e["name"]
            if not (name.startswith("$") or "Thunk" in name or "Pjit" in name or "np.asarray" in name
                    or "copy_to_host" in name):
                total[name] += e["dur"] - e.get("_children", 0)
    whole = sum(total.values())
    return whole / rounds / 1e3, [(n, v / rounds / 1e3, v / whole) for n, v in total.most_common(top)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--client-batch", type=int, nargs="+", default=[25, 10])
    p.add_argument("--profile", default=None, help="a directory for jax.profiler traces (one run of each)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    ns = argparse.Namespace(cifar=False, records=RECORDS, clients=1000, local_steps=6, local_batch=10,
                            dpjax_local="epochs", cohort_rate=0.1, dpjax_client_batch=args.client_batch[0],
                            dpjax_input_layer="auto", client_lr=0.1, sigma=1.0, clip=1.0,
                            sweep_lrs=[0.03, 0.1, 0.3, 1.0], sweep_sigmas=[0.5, 1.0])
    dp = fl.DpjaxRunner(ns, *fl.load_workload(1000, RECORDS, args.data_dir))
    r = args.rounds
    grid, hp = dp.sweep_hparams()
    key = keys.run_key(0, 0)
    fns, counts = {}, {}
    for k in args.client_batch:
        algo = dataclasses.replace(dp.algorithm(r), client_batch=k)
        fns[(k, "single")] = lambda a=algo: engine.run(a, dp.data, dp.hparams(), key)
        fns[(k, "grid")] = lambda a=algo: engine.run_many(a, dp.data, hp, key, shared_key=True)
    compile_s = {}
    for name, fn in fns.items():
        t = time.perf_counter()
        out = fn()
        jax.block_until_ready(out.output)
        compile_s[name] = time.perf_counter() - t
        if name[1] == "single":
            counts[name[0]] = np.asarray(out.round_metrics["num_available"]).reshape(-1)
    wall = {n: [] for n in fns}
    cpu = {n: [] for n in fns}
    loads = []
    for rep in range(args.repeats):
        loads.append(os.getloadavg()[0])
        for name, fn in fns.items():
            t, c = time.perf_counter(), time.process_time()
            jax.block_until_ready(fn().output)
            wall[name].append((time.perf_counter() - t) / r)
            cpu[name].append((time.process_time() - c) / r)
        print(f"repeat {rep + 1}/{args.repeats}, load {loads[-1]:.1f}", flush=True)
    med = statistics.median
    print(f"DP-FedAvg MNIST 1000 x 60, q 0.1, {r} rounds, grid of {len(grid)} (lr x sigma, shared key); "
          f"jax {jax.__version__}; cpus {os.cpu_count()}; load avg per repeat {'/'.join(f'{x:.1f}' for x in loads)}")
    print("| client_batch | program | wall ms a round min / med | CPU ms a round min / med | compile+first run (s) |")
    print("|---|---|---|---|---|")
    rows = []
    for name in fns:
        print(f"| {name[0]} | {name[1]} | {1e3 * min(wall[name]):.1f} / {1e3 * med(wall[name]):.1f} "
              f"| {1e3 * min(cpu[name]):.1f} / {1e3 * med(cpu[name]):.1f} | {compile_s[name]:.1f} |")
    print("| client_batch | grid / single wall min / med | CPU min / med | single CPU / floor | grid CPU / floor "
          "| floor CPU-ms single / grid | grid / single bound (grid floor / single CPU med) |")
    print("|---|---|---|---|---|---|---|")
    for k in args.client_batch:
        s, g = (k, "single"), (k, "grid")
        n = counts[k]
        slots = float(np.mean(np.ceil(n / k) * k))  # chunks holding a sampled client (they come first)
        floors = {c: matmul_floor(slots, slots, c, k) for c in (1, len(grid))}
        floors[len(grid)]["gram_ms"] = floors[1]["gram_ms"]  # shared by the grid's configurations
        floors[len(grid)]["total_ms"] = sum(floors[len(grid)][f] for f in ("xw_ms", "xh_ms", "gram_ms"))
        fs, fg = floors[1]["total_ms"], floors[len(grid)]["total_ms"]
        row = {"client_batch": k, "sampled_mean": float(np.mean(n)), "slots_mean": slots, "floor": floors,
               "single": {"wall": wall[s], "cpu": cpu[s], "compile": compile_s[s]},
               "grid": {"wall": wall[g], "cpu": cpu[g], "compile": compile_s[g]}}
        rows.append(row)
        print(f"| {k} | {min(wall[g]) / min(wall[s]):.2f} / {med(wall[g]) / med(wall[s]):.2f} "
              f"| {min(cpu[g]) / min(cpu[s]):.2f} / {med(cpu[g]) / med(cpu[s]):.2f} "
              f"| {1e3 * med(cpu[s]) / fs:.2f} | {1e3 * med(cpu[g]) / fg:.2f} | {fs:.1f} / {fg:.1f} "
              f"| {fg / (1e3 * med(cpu[s])):.2f} |")
        print(f"  k={k}: {np.mean(n):.1f} sampled, {slots:.1f} computed slots a round; floor parts (CPU-ms) single "
              f"x W {floors[1]['xw_ms']:.1f}, X^T h {floors[1]['xh_ms']:.1f}, Grams {floors[1]['gram_ms']:.1f}; grid "
              f"x W {floors[len(grid)]['xw_ms']:.1f}, X^T h {floors[len(grid)]['xh_ms']:.1f}, Grams (shared) "
              f"{floors[len(grid)]['gram_ms']:.1f}; {floors[1]['gflop']:.2f} / {floors[len(grid)]['gflop']:.2f} GFLOP")
    profiles = {}
    if args.profile:
        for name, fn in fns.items():
            if name[0] != args.client_batch[0]:
                continue
            d = f"{args.profile}/{name[0]}_{name[1]}"
            with jax.profiler.trace(d, create_perfetto_trace=True):
                jax.block_until_ready(fn().output)
            whole, top = op_self_times(d, r)
            profiles[f"{name[0]}/{name[1]}"] = {"self_ms_per_round": whole, "top": top}
            print(f"profile k={name[0]} {name[1]} (load {os.getloadavg()[0]:.1f}): ops' self time {whole:.1f} ms a round")
            for op, ms, frac in top:
                print(f"  {ms:7.2f} ms {100 * frac:5.1f}%  {op[:80]}")
    print(f"load avg at the end {os.getloadavg()}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "jax": jax.__version__,
             "cpu_count": os.cpu_count(), "rounds": r, "loads": loads, "rows": rows, "profiles": profiles},
            indent=1, default=float))
    return rows


if __name__ == "__main__":
    main()
