"""DP federated simulation, dpjax against pfl-research and Flower on one workload (issue 38, item 1).

Measured: MNIST split into ``--clients`` clients x 60 records; each round a Poisson cohort at rate
``--cohort-rate`` q (expected ``q x clients``; a fixed cohort of that size where a framework has no Poisson
sampling); 6 local SGD steps of batch 10 at client lr 0.1; MLP 784-64-10 (ReLU); DP-FedAvg with FIXED
clipping of each client's model delta at C = ``--clip`` and Gaussian noise sigma C (``--sigma``) on the SUM
of the cohort's clipped deltas, divided by the expected cohort; server SGD lr 1.0. Defaults C = 1.0,
sigma = 1.0. dpjax runs in-process (XLA at its default threads); each peer runs as a subprocess with
``--peers-python`` (torch at 1 thread), reading the same arrays from an .npz in a temp dir and printing one
JSON line of timings (workers in ``experiments/benchmarks/fl_peers/``). A peer that is absent (no
``--peers-python``, a missing worker, or an import failure) is skipped with the reason printed.

Printed per framework: start-up (process start + imports; dpjax's includes ``dpjax.engine`` and the family), compile
(dpjax: cold, into an empty persistent cache) and warm-start compile (dpjax: the same program again with the
in-memory caches dropped, read back from its persistent compilation cache as a second process would) or first round
(peers), per-round
time (median and min of ``--repeats`` repeats, the frameworks interleaved, ``os.getloadavg()[0]`` beside each),
end to end for ``--rounds`` (5) and ``--rounds-long`` (50) rounds, test accuracy on MNIST's test set, and the
epsilon each framework reports at delta = 1e-5 (dpjax: its accountant for the run's schedule, Poisson
add/remove). The sweep case runs 8 configurations (4 client learning rates x 2 noise levels) as ONE
vmapped dpjax program (``dpjax.engine.run_many``) against the peers' 8 runs in turn (``--sweep-repeats``,
``--sweep-peers``: Flower's 8 Ray simulations take minutes a repeat). dpjax's sweep shares one run key over the 8
configurations (``--sweep-keys shared``, common random numbers as ``dpjax sweep`` uses: the same cohorts, batches and
noise draws, so the gathers and sampling run once and the first layer's matmuls take the 8 kernels side by side);
``--dpjax-cache fresh|default|off``: dpjax's persistent compilation cache is ON, as for a user (``fresh``, the
default: a new empty directory for each cold compile, removed at the end; ``default``: dpjax's own directory, so a
"cold" compile may be a read; ``off``: ``DPJAX_COMPILATION_CACHE=0``, the warm start is then a second cold compile).
The long run is timed cold and then as a warm start; "with start-up" adds the process start-up to each.
``--sweep-keys independent`` gives each configuration its own key, as the peers' runs in turn have their own seeds. ``--json PATH`` writes every number with versions, date,
load averages and the cpu count.

dpjax side: family ``dp-fedavg`` (``dpjax.algorithms.DpFedAvg``) with ``clip_learning_rate = 0`` (fixed
clipping: the count is unused and not accounted, Andrew et al. 2021, Algorithm 1 with eta_C = 0). Its local
steps are one shuffled pass over the client's 60 records in batches of 10 (``local_epochs=1``, the peers'
convention; ``--dpjax-local draws``: an independent uniform 10-subset per step).
Peer gaps: pfl and Flower sample a FIXED cohort of q x clients (not Poisson) and divide by the actual cohort;
pfl's epsilon is its PLD accountant given the rate q, dpjax's its PLD accountant (add/remove, Poisson q); Flower reports none.

``--cifar``: pfl-research's own CIFAR-10 benchmark setup (its ``benchmarks/cifar10``: 50 records a user, cohort 50,
local batch 10, one local epoch, client lr 0.1, server lr 1.0, its ``simple_cnn``: conv 3x3 32, conv 3x3 64,
max-pool 2, dense 128, dense 10) on CIFAR-shaped synthetic data (no CIFAR-10 on this machine: 32x32x3 Gaussian
images labelled by a fixed random linear teacher, so accuracy moves but is not CIFAR's); 1,000 clients, q = 0.05,
5 local steps of 10, 3 rounds, no long run and no sweep unless asked (a round is ~0.25 TFLOP: seconds on 2 cores).
The CNN runs WITHOUT pfl's two dropout layers in all three frameworks (dpjax's side is deterministic; the same
arithmetic everywhere).

Peers recipe (a venv outside the repository, CPU torch wheel first so nothing pulls a CUDA build)::

    python3 -m venv /work/peers-venv
    /work/peers-venv/bin/pip install torch==2.13.0 numpy
    echo torch==2.13.0 > /tmp/peers-constraints.txt
    /work/peers-venv/bin/pip install -c /tmp/peers-constraints.txt pfl==0.6.0 'flwr[simulation]==1.42.*'

Run::

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu .venv/bin/python experiments/benchmarks/bench_fl_simulation.py \\
        --peers-python /work/peers-venv/bin/python [--rounds-long 50] [--json out.json] [--no-peers]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

_T_PROCESS = time.perf_counter()
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
DELTA = 1e-5
CIFAR_SHAPE = (32, 32, 3)


def load_workload(clients: int, records: int, data_dir=None):
    """MNIST (dpjax's loader) flattened to [0, 1]; the first clients x records training rows, records per client."""
    from dpjax.data.mnist import load_mnist

    d = load_mnist(data_dir)
    n = clients * records
    if n > len(d["train_images"]):
        raise ValueError(f"clients={clients}: needs {n} records, MNIST has {len(d['train_images'])}")
    # only the rows the clients hold, divided in place: each fresh 188 MB array costs 0.04 s idle but up to 3-8 s of
    # page faults on a busy shared machine (measured), and x /= 255 is the same float32 division as x / 255
    x = d["train_images"][:n].reshape(-1, 784).astype(np.float32)
    x /= 255.0
    test_x = d["test_images"].reshape(-1, 784).astype(np.float32)
    test_x /= 255.0
    return x, d["train_labels"][:n].astype(np.int32), test_x, d["test_labels"].astype(np.int32)


def cifar_shaped_workload(clients: int, records: int, test: int = 1000, seed: int = 0):
    """Synthetic CIFAR-shaped data: N(0, 1) images of shape 32x32x3, labels argmax of a fixed random linear map of
    the image (a learnable 10-class task), ``clients x records`` training and ``test`` test images."""
    rng = np.random.default_rng(seed)
    n = clients * records + test
    x = rng.standard_normal((n, *CIFAR_SHAPE), dtype=np.float32)
    teacher = rng.standard_normal((int(np.prod(CIFAR_SHAPE)), 10)).astype(np.float32)
    y = np.argmax(x.reshape(n, -1) @ teacher, axis=-1).astype(np.int32)
    m = clients * records
    return x[:m], y[:m], x[m:], y[m:]


def _cnn_problem():
    import flax.linen as nn

    from dpjax.problems import FlaxProblem

    class SimpleCnn(nn.Module):
        """pfl-research's benchmark ``simple_cnn`` without dropout; Glorot-uniform kernels as pfl initialises."""

        @nn.compact
        def __call__(self, x):
            init = nn.initializers.xavier_uniform()
            x = nn.relu(nn.Conv(32, (3, 3), padding="VALID", kernel_init=init)(x))
            x = nn.relu(nn.Conv(64, (3, 3), padding="VALID", kernel_init=init)(x))
            x = nn.max_pool(x, (2, 2), strides=(2, 2))
            x = nn.relu(nn.Dense(128, kernel_init=init)(x.reshape(-1)))
            return nn.Dense(10, kernel_init=init)(x)

    return FlaxProblem(SimpleCnn(), CIFAR_SHAPE, loss_kind="softmax")


def _mlp_problem():
    import flax.linen as nn

    from dpjax.problems import FlaxProblem

    class ReluMLP(nn.Module):
        """784-64-10, ReLU."""

        @nn.compact
        def __call__(self, x):
            return nn.Dense(10)(nn.relu(nn.Dense(64)(x)))

    return FlaxProblem(ReluMLP(), (784,), loss_kind="softmax")


class DpjaxRunner:
    """The workload in dpjax's public API: family dp-fedavg, fixed clipping, Poisson cohort."""

    def __init__(self, args, train_x, train_y, test_x, test_y):
        from dpjax.engine import SiloData

        self.args = args
        self.problem = _cnn_problem() if args.cifar else _mlp_problem()
        r = args.records
        self.data = SiloData.from_silos([train_x[i * r:(i + 1) * r] for i in range(args.clients)],
                                        [train_y[i * r:(i + 1) * r] for i in range(args.clients)])
        self.test_x, self.test_y = jax.device_put(test_x), np.asarray(test_y)
        # one jitted program (an eager vmap compiles each op of the model on its own)
        self._logits = jax.jit(jax.vmap(self.problem.output, in_axes=(None, 0)))
        self.cohort = max(1, round(args.cohort_rate * args.clients))

    def algorithm(self, rounds, sweep=False):
        from dpjax.algorithms.dp_fedavg import DpFedAvg

        steps, batch = self.args.local_steps, self.args.local_batch
        if self.args.dpjax_local == "epochs":  # the peers' convention: shuffled passes, each record once an epoch
            if steps * batch % self.args.records:
                raise ValueError(f"--dpjax-local epochs needs local_steps*local_batch={steps * batch} to be whole "
                                 f"epochs of {self.args.records} records; use --dpjax-local draws")
            local = dict(local_epochs=steps * batch // self.args.records)
        else:  # independent uniform subsets per step
            local = dict(local_steps=steps)
        return DpFedAvg(self.problem, rounds, self.cohort, sampling="poisson", sampling_rate=self.args.cohort_rate,
                        local_batch_size=batch,
                        client_batch=None if sweep else self.args.dpjax_client_batch,
                        input_layer=self.args.dpjax_input_layer, **local)

    def hparams(self, client_lr=None, sigma=None):
        from dpjax.algorithms.dp_fedavg import FedAvgHParams

        return FedAvgHParams.create(learning_rate=1.0, client_learning_rate=client_lr or self.args.client_lr,
                                    noise_multiplier=self.args.sigma if sigma is None else sigma,
                                    noise_multiplier_count=1.0, clip_norm=self.args.clip, clip_learning_rate=0.0)

    def accuracy(self, params) -> float:
        logits = self._logits(params, self.test_x)
        return float(np.mean(np.argmax(np.asarray(logits), -1) == self.test_y))

    def epsilon(self, rounds, hp) -> float:
        return float(self.algorithm(rounds).privacy([self.args.records] * self.args.clients, hp).epsilon(DELTA, "pld").epsilon)  # pfl reports PLD too

    def run(self, rounds, seed=0):
        from dpjax import engine, keys

        t = time.perf_counter()
        out = engine.run(self.algorithm(rounds), self.data, self.hparams(), keys.run_key(seed, 0))
        jax.block_until_ready(out.output)
        return time.perf_counter() - t, out

    def sweep_hparams(self):
        from dpjax.engine import stack_hparams

        grid = [(lr, s) for lr in self.args.sweep_lrs for s in self.args.sweep_sigmas]
        return grid, stack_hparams([self.hparams(lr, s) for lr, s in grid])

    def run_sweep(self, rounds, seed=0):
        from dpjax import engine, keys

        grid, hp = self.sweep_hparams()
        t = time.perf_counter()
        if self.args.sweep_keys == "shared":  # common random numbers: one cohort, one set of batches and noise draws
            out = engine.run_many(self.algorithm(rounds), self.data, hp, keys.run_key(seed, 0), shared_key=True)
        else:
            out = engine.run_many(self.algorithm(rounds, sweep=True), self.data, hp,
                                  jnp.stack([keys.run_key(seed, i) for i in range(len(grid))]))
        jax.block_until_ready(out.output)
        return time.perf_counter() - t, out, grid


def _peer(python, worker, npz, args, mode, rounds):
    """Runs one peer worker; returns its JSON dict or {"skipped": reason}."""
    if not python:
        return {"skipped": "no --peers-python"}
    script = HERE / "fl_peers" / f"{worker}_worker.py"
    if not script.exists():
        return {"skipped": f"{script.name} missing"}
    cmd = [python, str(script), "--npz", str(npz), "--mode", mode, "--rounds", str(rounds),
           "--cohort-rate", str(args.cohort_rate), "--clip", str(args.clip), "--sigma", str(args.sigma),
           "--client-lr", str(args.client_lr), "--local-steps", str(args.local_steps),
           "--local-batch", str(args.local_batch), "--records", str(args.records),
           "--model", "cnn" if args.cifar else "mlp", "--sweep-lrs", *map(str, args.sweep_lrs),
           "--sweep-sigmas", *map(str, args.sweep_sigmas)]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.peer_timeout)
    wall = time.perf_counter() - t
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"skipped": f"{worker} failed (rc {p.returncode}): {(p.stderr or p.stdout).strip()[-300:]}"}
    out = json.loads(lines[-1])
    out["process_wall_s"] = wall
    return out


def _versions(python):
    v = {"jax": jax.__version__, "python": platform.python_version()}
    if python:
        try:
            code = ("import json,importlib.metadata as m\nd={}\nfor k in ('torch','pfl','flwr','ray'):\n"
                    " try: d[k]=m.version(k)\n except Exception: d[k]=None\nprint(json.dumps(d))")
            v.update(json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True,
                                               timeout=120).stdout))
        except Exception as e:  # noqa: BLE001 -- versions are informative only
            v["peers_error"] = repr(e)
    return v


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peers-python", default=None, help="python of a venv with torch, pfl, flwr")
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--cifar", action="store_true",
                   help="pfl-research's CIFAR-10 benchmark setup (its CNN, cohort 50) on CIFAR-shaped data")
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--records", type=int, default=None, help="records a client (default 60; --cifar 50)")
    p.add_argument("--cohort-rate", type=float, default=None, help="default 0.1 (cohort 100); --cifar 0.05 (50)")
    p.add_argument("--local-steps", type=int, default=None, help="default 6; --cifar 5 (one epoch of 50)")
    p.add_argument("--local-batch", type=int, default=10)
    p.add_argument("--dpjax-local", choices=("epochs", "draws"), default="epochs",
                   help="dpjax's local batches: shuffled epochs (the peers' convention; default) or independent draws")
    p.add_argument("--dpjax-client-batch", type=int, default=None,
                   help="DpFedAvg(client_batch=) of the single runs (default: a quarter of the expected cohort; --cifar 1)")
    p.add_argument("--dpjax-input-layer", choices=("materialized", "low-rank", "auto"), default="auto",
                   help="DpFedAvg(input_layer=): the MLP's first Dense kernel in low-rank form (auto: where it applies)")
    p.add_argument("--client-lr", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--sigma", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=None, help="default 5; --cifar 3")
    p.add_argument("--rounds-long", type=int, default=None, help="default 50; --cifar 0 (no long run)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sweep-lrs", type=float, nargs="+", default=[0.03, 0.1, 0.3, 1.0])
    p.add_argument("--sweep-sigmas", type=float, nargs="+", default=[0.5, 1.0])
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument("--sweep-keys", choices=("shared", "independent"), default="shared",
                   help="the sweep's run keys: one shared key (common random numbers, dpjax sweeps' convention: the 8 "
                        "configurations see the same cohorts, batches and noise draws; default) or one key each")
    p.add_argument("--sweep", action="store_true", help="run the sweep case with --cifar too")
    p.add_argument("--sweep-repeats", type=int, default=None, help="repeats of the sweep case (default: --repeats)")
    p.add_argument("--peers", nargs="*", default=["pfl", "flower"], choices=("pfl", "flower"),
                   help="peers of the single-configuration rows")
    p.add_argument("--long-peers", nargs="*", default=["pfl", "flower"], choices=("pfl", "flower"),
                   help="peers of the --rounds-long run (Flower's 50 rounds take > 15 min at load 2)")
    p.add_argument("--sweep-peers", nargs="*", default=["pfl", "flower"],
                   help="peers that run the sweep case (Flower's 8 runs in turn take minutes a repeat)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--peer-timeout", type=int, default=1800)
    p.add_argument("--json", default=None)
    p.add_argument("--dpjax-cache", choices=("fresh", "default", "off"), default="fresh",
                   help="dpjax's persistent compilation cache: fresh (default) a new empty directory for each cold "
                        "compile, then a warm start read back from it; default dpjax's own directory as a user has it "
                        "(compiles there may be warm already); off DPJAX_COMPILATION_CACHE=0 (warm start = cold)")
    args = p.parse_args(argv)
    saved_cache = os.environ.get("DPJAX_COMPILATION_CACHE"), jax.config.jax_compilation_cache_dir
    cache_root = _set_cache(args.dpjax_cache)  # before dpjax.engine is imported: it turns the cache on
    import dpjax.algorithms.dp_fedavg  # noqa: F401 -- dpjax's start-up: what the run imports
    import dpjax.engine  # noqa: F401
    preset = (dict(records=50, cohort_rate=0.05, local_steps=5, rounds=3, rounds_long=0) if args.cifar else
              dict(records=60, cohort_rate=0.1, local_steps=6, rounds=5, rounds_long=50))
    for name, value in preset.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.dpjax_client_batch is None:
        # CNN: a vmapped conv over per-client kernels is a slow grouped conv on XLA:CPU, so one client at a time;
        # MLP: vmapped chunks of ~a quarter of the expected cohort skip the Poisson buffer's empty tail (measured
        # 0.09-0.12 s a round against 0.13-0.15 s for one vmap over the whole buffer). A sweep with independent keys
        # keeps one vmap (under run_many's vmap a chunk's lax.cond on a per-configuration cohort computes both
        # branches); with a shared key (the default) the cohort is one for all configurations and the chunks skip.
        args.dpjax_client_batch = 1 if args.cifar else max(1, round(args.cohort_rate * args.clients / 4))
    if args.cifar and not args.sweep:
        args.no_sweep = True
    startup = time.perf_counter() - _T_PROCESS
    python = None if args.no_peers else args.peers_python
    train_x, train_y, test_x, test_y = (cifar_shaped_workload(args.clients, args.records) if args.cifar else
                                        load_workload(args.clients, args.records, args.data_dir))
    dp = DpjaxRunner(args, train_x, train_y, test_x, test_y)
    rows = {"dpjax": {"startup_s": startup, "rounds": []}}
    tmp = tempfile.TemporaryDirectory()
    npz = pathlib.Path(tmp.name) / "workload.npz"
    np.savez(npz, train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y)
    peers = tuple(args.peers)
    for peer in peers:
        rows[peer] = {"rounds": []}
    # single configuration: repeats interleaved (dpjax, pfl, flower, dpjax, ...)
    for r in range(args.repeats):
        load = os.getloadavg()[0]
        _forget_programs(cache_root, f"single-{r}")  # a cold compile each repeat
        cold, out = dp.run(args.rounds, seed=r)
        warm, out = dp.run(args.rounds, seed=r)
        _forget_programs()  # a warm start: in-memory caches gone, the persistent cache kept (a second process)
        restart, out = dp.run(args.rounds, seed=r)
        rows["dpjax"]["rounds"].append({"load": load, "cold_s": cold, "warm_s": warm,
                                        "compile_s": cold - warm, "warm_start_s": restart,
                                        "warm_start_compile_s": restart - warm, "per_round_s": warm / args.rounds,
                                        "accuracy": dp.accuracy(out.output)})
        for peer in peers:
            res = _peer(python, peer, npz, args, "single", args.rounds)
            res["load"] = os.getloadavg()[0]
            rows[peer]["rounds"].append(res)
    rows["dpjax"]["epsilon"] = dp.epsilon(args.rounds, dp.hparams())
    if args.rounds_long:
        load = os.getloadavg()[0]
        _forget_programs(cache_root, "long")
        long_s, out = dp.run(args.rounds_long)
        _forget_programs()
        long_warm_s, _ = dp.run(args.rounds_long)
        rows["dpjax"]["long"] = {"load": load, "rounds": args.rounds_long, "end_to_end_s": long_s,
                                 "warm_start_end_to_end_s": long_warm_s,
                                 "accuracy": dp.accuracy(out.output),
                                 "epsilon": dp.epsilon(args.rounds_long, dp.hparams())}
        for peer in (p for p in peers if p in args.long_peers):
            res = _peer(python, peer, npz, args, "single", args.rounds_long)
            res["load"] = os.getloadavg()[0]
            rows[peer]["long"] = res
    sweep = {}
    if not args.no_sweep:
        sweep["dpjax"] = []
        for peer in peers:
            sweep[peer] = []
        for r in range(args.repeats if args.sweep_repeats is None else args.sweep_repeats):
            load = os.getloadavg()[0]
            _forget_programs(cache_root, f"sweep-{r}")
            cold, out, grid = dp.run_sweep(args.rounds, seed=r)
            warm, out, grid = dp.run_sweep(args.rounds, seed=r)
            accs = [dp.accuracy(jax.tree_util.tree_map(lambda a, i=i: a[i], out.output)) for i in range(len(grid))]
            sweep["dpjax"].append({"load": load, "cold_s": cold, "warm_s": warm, "compile_s": cold - warm,
                                   "per_round_s": warm / args.rounds, "accuracy": accs, "grid": grid})
            for peer in peers:
                res = (_peer(python, peer, npz, args, "sweep", args.rounds) if peer in args.sweep_peers
                       else {"skipped": "not in --sweep-peers"})
                res["load"] = os.getloadavg()[0]
                sweep[peer].append(res)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "cpu_count": os.cpu_count(),
              "versions": _versions(python), "args": vars(args), "single": rows, "sweep": sweep,
              "loadavg_end": os.getloadavg()}
    _print_table(result)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1, default=float))
    tmp.cleanup()
    if cache_root is not None:  # main() called in a process that goes on (tests): its cache settings back
        _restore_cache(*saved_cache)
        shutil.rmtree(cache_root, ignore_errors=True)
    return result


def _set_cache(choice: str) -> str | None:
    """Sets ``$DPJAX_COMPILATION_CACHE`` for ``--dpjax-cache`` (read when dpjax.engine is imported); returns the
    directory under which ``fresh`` puts one empty cache per cold compile (None otherwise)."""
    if choice == "off":
        os.environ["DPJAX_COMPILATION_CACHE"] = "0"
    if choice != "fresh":
        return None
    root = tempfile.mkdtemp(prefix="dpjax-bench-cache-")
    os.environ["DPJAX_COMPILATION_CACHE"] = os.path.join(root, "first")
    return root


def _restore_cache(env_value: str | None, directory: str | None):
    from jax.experimental.compilation_cache import compilation_cache

    if env_value is None:
        os.environ.pop("DPJAX_COMPILATION_CACHE", None)
    else:
        os.environ["DPJAX_COMPILATION_CACHE"] = env_value
    compilation_cache.reset_cache()
    jax.config.update("jax_compilation_cache_dir", directory)


def _forget_programs(cache_root: str | None = None, tag: str = ""):
    """Drops the engine's and JAX's in-memory programs, so the next run traces and compiles again; with a
    ``cache_root`` (``--dpjax-cache fresh``) also points the persistent cache at a new empty directory: the next
    compile is cold. Without one the persistent cache is kept: the next compile is a warm start (a cache read)."""
    from jax.experimental.compilation_cache import compilation_cache

    from dpjax.engine import program

    program._COMPILED.clear()
    jax.clear_caches()
    if cache_root is not None:
        compilation_cache.reset_cache()
        jax.config.update("jax_compilation_cache_dir", os.path.join(cache_root, tag))


def _stats(xs):
    xs = [x for x in xs if x is not None]
    return (min(xs), statistics.median(xs)) if xs else (float("nan"), float("nan"))


def _print_table(result):
    a = result["args"]
    print(f"DP-FedAvg{' (CIFAR-shaped, CNN)' if a['cifar'] else ''}, {a['clients']} clients x {a['records']}, q={a['cohort_rate']}, C={a['clip']} sigma={a['sigma']}, "
          f"{a['local_steps']} local steps of {a['local_batch']}; sweep keys {a.get('sweep_keys')}; versions {result['versions']}")
    print("| case | framework | load avg | start-up (s) | compile / first round (s) min/med | warm-start compile (s) "
          f"min/med | per round (s) min/med | {a['rounds']}-round total (s) min/med | {a['rounds_long']}-round total (s) "
          f"cold/warm start | {a['rounds_long']}-round with start-up (s) cold/warm | test acc | epsilon |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, row in result["single"].items():
        rs = [r for r in row["rounds"] if "skipped" not in r]
        if not rs:
            reason = row["rounds"][0].get("skipped") if row["rounds"] else "not run"
            print(f"| single | {name} | | skipped: {reason} | | | | | | | | |")
            continue
        loads = "/".join(f"{r['load']:.1f}" for r in rs)
        comp = _stats([r.get("compile_s", r.get("first_round_s")) for r in rs])
        per = _stats([r["per_round_s"] for r in rs])
        tot = _stats([r.get("cold_s", r.get("end_to_end_s")) for r in rs])
        lg = row.get("long", {})
        start = row.get("startup_s", _stats([r.get("startup_s") for r in rs])[1])
        eps = row.get("epsilon", rs[0].get("epsilon"))
        ws = _stats([r.get("warm_start_compile_s") for r in rs])
        nan = float("nan")
        long_cold = lg.get("end_to_end_s", nan)
        long_warm = lg.get("warm_start_end_to_end_s", long_cold)
        print(f"| single | {name} | {loads} | {start:.2f} | {comp[0]:.2f}/{comp[1]:.2f} | {ws[0]:.2f}/{ws[1]:.2f} "
              f"| {per[0]:.3f}/{per[1]:.3f} | {tot[0]:.2f}/{tot[1]:.2f} | {long_cold:.2f}/{long_warm:.2f} "
              f"| {lg.get('startup_s', start) + long_cold:.2f}/{lg.get('startup_s', start) + long_warm:.2f} "
              f"| {lg.get('accuracy', rs[-1].get('accuracy', float('nan'))):.3f} | {eps} |")
    for name, rs0 in result["sweep"].items():
        rs = [r for r in rs0 if "skipped" not in r]
        if not rs:
            print(f"| sweep x8 | {name} | | skipped: {rs0[0].get('skipped') if rs0 else 'not run'} | | | | | | | | |")
            continue
        loads = "/".join(f"{r['load']:.1f}" for r in rs)
        comp = _stats([r.get("compile_s", r.get("first_round_s")) for r in rs])
        per = _stats([r["per_round_s"] for r in rs])
        tot = _stats([r.get("cold_s", r.get("end_to_end_s")) for r in rs])
        acc = rs[-1]["accuracy"]
        print(f"| sweep x8 | {name} | {loads} | | {comp[0]:.2f}/{comp[1]:.2f} | | {per[0]:.3f}/{per[1]:.3f} "
              f"| {tot[0]:.2f}/{tot[1]:.2f} | | | {min(acc):.3f}-{max(acc):.3f} | |")


if __name__ == "__main__":
    main()
