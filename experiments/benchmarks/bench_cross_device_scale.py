"""Cross-device scale: DP-FedAvg over 1k / 10k / 100k clients, per-round time and memory set by the cohort
(issue 38, item 4).

Population: ``--clients`` N clients of ``--records`` (50) records each, as a ``dpjax.engine.PooledSiloData``: one
shared record pool on the device (MNIST's 60,000 training images as float32 in [0, 1], 188 MB; or ``--data
synthetic``: ``--pool-size`` Gaussian 784-vectors labelled by a random linear map) and each client an int32 index
row into it (100,000 x 50 x 4 bytes = 20 MB, where the materialised ``SiloData`` would be 15.7 GB). Every client
draws its records uniformly without replacement from the pool (clients share records: the pool is the data a round
reads, the index rows are the population; the same construction at every N, so only N changes). DP-FedAvg as in
``bench_fl_simulation.py``: a Poisson cohort at rate q = m / N (``--cohorts`` m, expected clients a round; the
cohort buffer holds m + 6 sqrt(m) + 8 clients), each cohort client one shuffled local epoch in batches of 10 at lr
0.1 (MLP 784-64-10, ReLU), fixed clipping C = 1 (clip lr 0), noise sigma = 1 on the cohort's sum, server SGD lr 1.
A round gathers only its cohort's minibatch rows from the pool inside the compiled round (all ``--rounds`` rounds
are one ``lax.scan``, one XLA program); what it does over the population is O(N) scalars (N inclusion draws, N
per-client keys). DP-FedAvg keeps no per-client state.

Each (N, m) runs in a fresh subprocess (``--worker``), so its peak memory is its own. Printed per case: the data's
bytes on the device, compile, per round (median and min of ``--repeats`` warm runs of the compiled program, each a
new seed, divided by ``--rounds``; load average beside it), clients/s (mean sampled clients a round / median per
round), the compiled program's argument and temporary bytes (``memory_analysis``), the process's peak RSS
(``resource.getrusage`` maxrss: on XLA:CPU the device memory is host memory) after building the data and at the end,
the device's peak bytes in use where the backend reports it (GPU), and, per cohort, the per-round time at the
largest N over the smallest (acceptance: <= 1.5 at 100k against 1k).

Run (the full grid takes tens of minutes on 2 cores; ``--quick``: 200 / 2,000 synthetic clients, cohort 10,
2 rounds, a seconds-long smoke test)::

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu .venv/bin/python experiments/benchmarks/bench_cross_device_scale.py \\
        [--clients 1000 10000 100000] [--cohorts 100 1000] [--json scale.json] [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import resource
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve()
FEATURES = 784


def _maxrss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB


def client_index(num_clients: int, records: int, pool_size: int, seed: int = 0):
    """``[N, records]`` int32 pool rows, each client's distinct (a row with a repeat is redrawn)."""
    import numpy as np

    if records > pool_size:
        raise ValueError(f"records={records} must be <= the pool's {pool_size} records")
    rng = np.random.default_rng(seed)
    index = rng.integers(0, pool_size, (num_clients, records))
    while True:
        s = np.sort(index, axis=1)
        repeat = np.any(s[:, 1:] == s[:, :-1], axis=1)
        if not repeat.any():
            return index.astype(np.int32)
        index[repeat] = rng.integers(0, pool_size, (int(repeat.sum()), records))


def load_pool(args):
    """``(x [P, 784] float32, y [P] int32)``: MNIST's training set in [0, 1], or a synthetic pool."""
    import numpy as np

    if args.data == "mnist":
        from dpjax.data.mnist import load_mnist

        d = load_mnist(args.data_dir)
        return d["train_images"].reshape(-1, FEATURES).astype(np.float32) / 255.0, d["train_labels"].astype(np.int32)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(args.pool_size, FEATURES)).astype(np.float32)
    return x, np.argmax(x @ rng.normal(size=(FEATURES, 10)), axis=1).astype(np.int32)


def _mlp_problem(hidden: int):
    import flax.linen as nn

    from dpjax.problems import FlaxProblem

    class ReluMLP(nn.Module):
        """784-hidden-10, ReLU."""

        @nn.compact
        def __call__(self, x):
            return nn.Dense(10)(nn.relu(nn.Dense(hidden)(x)))

    return FlaxProblem(ReluMLP(), (FEATURES,), loss_kind="softmax")


def worker(args) -> dict:
    """One (clients, cohort) case in this process; returns its numbers."""
    import jax
    import numpy as np

    from dpjax import keys
    from dpjax.algorithms.dp_fedavg import DpFedAvg, FedAvgHParams
    from dpjax.engine import PooledSiloData
    from dpjax.engine.chain import DataShape
    from dpjax.engine.program import compiled_runner

    n, m = args.clients[0], args.cohorts[0]
    t = time.perf_counter()
    pool_x, pool_y = load_pool(args)
    data = PooledSiloData.from_indices(pool_x, pool_y, client_index(n, args.records, len(pool_x)))
    del pool_x, pool_y
    jax.block_until_ready(data)
    data_s = time.perf_counter() - t
    rss_data = _maxrss_bytes()
    problem = _mlp_problem(args.hidden)
    alg = DpFedAvg(problem, args.rounds, m, sampling="poisson", sampling_rate=m / n, local_epochs=1,
                   local_batch_size=args.local_batch)
    hp = FedAvgHParams.create(learning_rate=1.0, client_learning_rate=0.1, noise_multiplier=1.0,
                              noise_multiplier_count=1.0, clip_norm=1.0, clip_learning_rate=0.0)
    alg.validate(data)
    params = problem.init_params(keys.run_stream_key(keys.run_key(0, 0), "local"))
    runner = compiled_runner(alg, None, None, False, None, None)
    t = time.perf_counter()
    lowered = runner.lower(hp, data, None, keys.run_key(0, 0), params)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t
    mem = compiled.memory_analysis()
    times, loads, available, overflow = [], [], [], False
    for r in range(args.repeats + 1):  # the first call warms the executable's buffers; not timed
        load = os.getloadavg()[0]
        t = time.perf_counter()
        state, output, metrics, _ = compiled(hp, data, None, keys.run_key(r, 0), params)
        jax.block_until_ready(output)
        wall = time.perf_counter() - t
        if r:
            times.append(wall / args.rounds)
            loads.append(load)
        available.extend(np.asarray(metrics["num_available"]).tolist())
        overflow |= bool(np.any(metrics["sampling_overflow"]))
        if not np.all(np.asarray(metrics["finite"])):
            raise RuntimeError(f"clients={n} cohort={m}: a non-finite iterate")
    per_round = statistics.median(times)
    device_peak = None
    stats = jax.local_devices()[0].memory_stats()
    if stats:
        device_peak = stats.get("peak_bytes_in_use")
    capacity = alg.parts(DataShape.of(data)).selection.capacity(n)
    return {"clients": n, "cohort": m, "records": args.records, "capacity": capacity, "sampling_rate": m / n,
            "data_bytes": int(sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(data))),
            "index_bytes": int(data.index.nbytes + data.sizes.nbytes),
            "materialised_bytes": int(n * args.records * (FEATURES + 1) * 4), "data_s": data_s,
            "compile_s": compile_s, "per_round_s": per_round, "per_round_min_s": min(times), "loads": loads,
            "mean_cohort": float(np.mean(available)), "clients_per_s": float(np.mean(available)) / per_round,
            "computed_slots_per_s": capacity / per_round, "overflow": overflow,
            "argument_bytes": int(mem.argument_size_in_bytes), "temp_bytes": int(mem.temp_size_in_bytes),
            "peak_rss_after_data_bytes": rss_data, "peak_rss_bytes": _maxrss_bytes(), "device_peak_bytes": device_peak,
            "backend": jax.default_backend()}


def _case(args, n: int, m: int) -> dict:
    """Runs one case in a fresh subprocess (its peak memory its own)."""
    cmd = [sys.executable, str(HERE), "--worker", "--clients", str(n), "--cohorts", str(m), "--records",
           str(args.records), "--rounds", str(args.rounds), "--repeats", str(args.repeats), "--data", args.data,
           "--pool-size", str(args.pool_size), "--hidden", str(args.hidden), "--local-batch", str(args.local_batch)]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"clients": n, "cohort": m, "failed": f"rc {p.returncode}: {(p.stderr or p.stdout).strip()[-400:]}"}
    return json.loads(lines[-1])


def _mb(b) -> str:
    return "n/a" if b is None else f"{b / 2**20:.0f}"


def print_table(result: dict) -> None:
    a = result["args"]
    print(f"DP-FedAvg cross-device scale: {a['records']} records a client, pool {a['data']}, MLP 784-{a['hidden']}-10, "
          f"1 local epoch in batches of {a['local_batch']}, {a['rounds']} rounds a run; jax {result['versions']['jax']}, "
          f"{result['cpu_count']} cpus")
    print("| clients | cohort m (buffer) | data on device (MB) | compile (s) | per round (s) med/min | load | clients/s "
          "| program args / temp (MB) | peak RSS after data / end (MB) | device peak (MB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in result["cases"]:
        if "failed" in c:
            print(f"| {c['clients']} | {c['cohort']} | failed: {c['failed'][-200:]} | | | | | | | |")
            continue
        loads = "/".join(f"{x:.1f}" for x in c["loads"])
        print(f"| {c['clients']} | {c['cohort']} ({c['capacity']}) | {_mb(c['data_bytes'])} | {c['compile_s']:.2f} "
              f"| {c['per_round_s']:.4f}/{c['per_round_min_s']:.4f} | {loads} | {c['clients_per_s']:.0f} "
              f"| {_mb(c['argument_bytes'])} / {_mb(c['temp_bytes'])} "
              f"| {_mb(c['peak_rss_after_data_bytes'])} / {_mb(c['peak_rss_bytes'])} | {_mb(c['device_peak_bytes'])} |")
    for m, ratio in result["ratios"].items():
        print(f"cohort {m}: per round at {ratio['clients']} clients / at {ratio['base_clients']} = {ratio['ratio']:.2f} "
              f"({'within' if ratio['ratio'] <= 1.5 else 'OVER'} 1.5)")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, nargs="+", default=[1000, 10000, 100000])
    p.add_argument("--cohorts", type=int, nargs="+", default=[100, 1000])
    p.add_argument("--records", type=int, default=50)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--data", choices=("mnist", "synthetic"), default="mnist")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--pool-size", type=int, default=60000, help="records of the synthetic pool")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--local-batch", type=int, default=10)
    p.add_argument("--timeout", type=int, default=3600, help="seconds a case may take")
    p.add_argument("--json", default=None)
    p.add_argument("--quick", action="store_true", help="200 / 2,000 synthetic clients, cohort 10, 2 rounds")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.clients, args.cohorts, args.records, args.rounds, args.repeats = [200, 2000], [10], 20, 2, 1
        args.data, args.pool_size, args.hidden = "synthetic", 2000, 16
    for name in ("clients", "cohorts"):
        for v in getattr(args, name):
            if v < 1:
                p.error(f"--{name} {v} must be >= 1")
    if any(m > n for m in args.cohorts for n in args.clients):
        p.error(f"--cohorts {args.cohorts} must each be <= the smallest of --clients {args.clients}")
    if args.worker:
        print(json.dumps(worker(args)))
        return {}
    import jax

    cases = [_case(args, n, m) for m in args.cohorts for n in args.clients]
    ratios = {}
    for m in args.cohorts:
        ok = [c for c in cases if c["cohort"] == m and "failed" not in c]
        if len(ok) >= 2:
            lo, hi = min(ok, key=lambda c: c["clients"]), max(ok, key=lambda c: c["clients"])
            ratios[m] = {"base_clients": lo["clients"], "clients": hi["clients"],
                         "ratio": hi["per_round_s"] / lo["per_round_s"]}
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "cpu_count": os.cpu_count(),
              "versions": {"jax": jax.__version__, "python": platform.python_version()}, "args": vars(args),
              "cases": cases, "ratios": ratios}
    print_table(result)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
