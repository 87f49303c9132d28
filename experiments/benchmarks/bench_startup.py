"""Where a dpjax run's end-to-end time goes, cold and warm persistent cache (issue 38, item 2).

The workload is bench_fl_simulation.py's MNIST DP-FedAvg (1,000 clients x 60 records, Poisson cohort q = 0.1, one
local epoch in batches of 10, MLP 784-64-10, ``--rounds`` 50). Each measurement is a FRESH Python process (this
script with ``--child``), started and timed from here, so process start, imports and compile are all inside it:

* ``interpreter``: a bare ``python -c pass`` (same interpreter), timed beside each child;
* ``import jax`` and ``import dpjax`` (the engine and DpFedAvg, what the run imports) in the child;
* ``data``: MNIST load and the 1,000-client split (``SiloData.from_silos``);
* ``family``: the problem, ``DpFedAvg(...)`` and its hyperparameters;
* ``trace`` / ``lower`` / ``backend compile`` from JAX's own monitoring events (``jax.monitoring``:
  jaxpr_trace, jaxpr_to_mlir_module, backend_compile), ``cache read`` the persistent cache's retrieval time (a
  hit replaces the backend compile, which then is mostly this read);
* ``rounds + rest``: ``engine.run`` less the above (the 50 rounds and the engine's own host work);
* ``result``: the released parameters to the host and the test accuracy;
* ``process``: the child's wall time seen from here (spawn to exit, the number to set beside pfl's).

``cold``: the child's persistent cache is a fresh empty directory; ``warm``: a second child reading the directory
the cold child filled (the default set-up of a second ``dpjax run``). ``off``: ``DPJAX_COMPILATION_CACHE=0``. The
modes are interleaved within each of ``--repeats`` repeats; ``os.getloadavg()[0]`` is printed beside each. With
``--peers-python`` the pfl-research worker runs the same 50 rounds in each repeat too, and its process wall time
(start-up, imports and all) is the peer's end to end. ``--importtime`` prints the slowest imports of
``import dpjax.engine`` (``python -X importtime``), cumulative, grouped by top-level package.

Run::

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu .venv/bin/python experiments/benchmarks/bench_startup.py \\
        [--repeats 3] [--peers-python /work/peers-venv/bin/python] [--importtime] [--json out.json]
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
PHASES = ("import_jax", "import_dpjax", "data", "family", "trace", "lower", "backend_compile", "cache_read",
          "rounds_rest", "result", "in_child", "process")
_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
           "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
           "/jax/core/compile/backend_compile_duration": "backend_compile",
           "/jax/compilation_cache/cache_retrieval_time_sec": "cache_read"}


def child(args) -> dict:
    """One end-to-end run in this (fresh) process; returns the phase times in seconds."""
    t = {}
    mark = time.perf_counter()

    def lap(name):
        nonlocal mark
        now = time.perf_counter()
        t[name] = now - mark
        mark = now

    import jax
    import numpy as np
    lap("import_jax")
    import dpjax.engine  # noqa: F401 -- what the run imports: the engine (turns the cache on) and the family
    from dpjax import keys
    from dpjax.algorithms.dp_fedavg import DpFedAvg  # noqa: F401
    lap("import_dpjax")
    events = dict.fromkeys(_EVENTS.values(), 0.0)

    def listener(event, duration, **_):
        if event in _EVENTS:
            events[_EVENTS[event]] += duration

    jax.monitoring.register_event_duration_secs_listener(listener)
    sys.path.insert(0, str(HERE))
    import bench_fl_simulation as bench

    train_x, train_y, test_x, test_y = bench.load_workload(args.clients, 60)
    ns = argparse.Namespace(cifar=False, records=60, clients=args.clients, cohort_rate=0.1, local_steps=6,
                            local_batch=10, dpjax_local="epochs", dpjax_client_batch=max(1, round(args.clients / 40)),
                            dpjax_input_layer="auto", client_lr=0.1, sigma=1.0, clip=1.0)
    runner = bench.DpjaxRunner(ns, train_x, train_y, test_x, test_y)
    lap("data")
    algorithm, hparams = runner.algorithm(args.rounds), runner.hparams()
    lap("family")
    out = dpjax.engine.run(algorithm, runner.data, hparams, keys.run_key(0, 0))
    jax.block_until_ready(out.output)
    lap("run")
    params = jax.device_get(out.output)
    accuracy = runner.accuracy(params)
    lap("result")
    t.update(events)
    compile_side = sum(events.values()) - events["cache_read"]  # backend_compile includes the cache read
    t["rounds_rest"] = t.pop("run") - compile_side
    t["in_child"] = time.perf_counter() - _T0
    t["accuracy"] = accuracy
    t["cache_dir"] = jax.config.jax_compilation_cache_dir
    return t


def _spawn(cmd, env) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed (rc {done.returncode}): {done.stderr.strip()[-600:]}")
    return wall, done.stdout


def measure(mode: str, cache_dir: str | None, args, tree: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    if tree:  # the dpjax of this checkout (a before/after comparison), this script's benchmark code
        env["PYTHONPATH"] = tree
    env["DPJAX_COMPILATION_CACHE"] = cache_dir or "0"
    env.setdefault("JAX_PLATFORMS", "cpu")
    load = os.getloadavg()[0]
    wall, out = _spawn([sys.executable, __file__, "--child", "--rounds", str(args.rounds),
                        "--clients", str(args.clients)], env)
    row = json.loads(out.strip().splitlines()[-1])
    row.update(mode=mode if tree is None else f"{mode} {pathlib.Path(tree).name}", load=load, process=wall)
    return row


def importtime(top: int = 15) -> list[tuple[str, float]]:
    """Cumulative import time (s) of ``import dpjax.engine, dpjax.algorithms.dp_fedavg`` by top-level package."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c",
                           "import dpjax.engine, dpjax.algorithms.dp_fedavg"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    return parse_importtime(done.stderr, top)


def parse_importtime(stderr: str, top: int = 15):
    """``(by top-level import, dpjax modules)``: (name, cumulative s) pairs, slowest first, from ``-X importtime``."""
    by_module = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cum_us, name = line.split(":", 1)[1].split("|")
        by_module[name[1:]] = int(cum_us) / 1e6  # one space after the bar; more: nested
    roots = {n: c for n, c in by_module.items() if not n.startswith(" ")}  # a top-level line carries its subtree
    dpjax_mods = sorted(((n.strip(), c) for n, c in by_module.items() if n.strip().startswith("dpjax")),
                        key=lambda x: -x[1])
    return sorted(roots.items(), key=lambda x: -x[1])[:top], dpjax_mods[:top]


def _fmt(rows, name):
    xs = [r[name] for r in rows if name in r]
    return f"{min(xs):.3f}/{statistics.median(xs):.3f}" if xs else "-"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--modes", nargs="+", default=["cold", "warm"], choices=("cold", "warm", "off"))
    p.add_argument("--peers-python", default=None, help="python of the peers venv: pfl-research's 50 rounds too")
    p.add_argument("--trees", nargs="+", default=None,
                   help="repository roots whose dpjax to measure, interleaved (before/after: /work/main .)")
    p.add_argument("--importtime", action="store_true")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return {}
    rows, interp, pfl = [], [], []
    trees = [str(pathlib.Path(t).resolve()) for t in args.trees] if args.trees else [None]
    for r in range(args.repeats):
        for tree in trees:
            with tempfile.TemporaryDirectory() as cache:
                for mode in args.modes:
                    load = os.getloadavg()[0]
                    interp.append({"load": load,
                                   "process": _spawn([sys.executable, "-c", "pass"], dict(os.environ))[0]})
                    rows.append(measure(mode, None if mode == "off" else cache, args, tree))
                    print(f"repeat {r} {rows[-1]['mode']}: load {rows[-1]['load']:.1f} "
                          f"process {rows[-1]['process']:.2f} s", flush=True)
        if args.peers_python:
            load = os.getloadavg()[0]
            sys.path.insert(0, str(HERE))
            pfl.append({"load": load, **_pfl(args)})
            print(f"repeat {r} pfl: load {load:.1f} process {pfl[-1]['process_wall_s']:.2f} s", flush=True)
    print(f"{args.rounds}-round DP-FedAvg MNIST MLP, min/median over {args.repeats} repeats (s); "
          f"interpreter (python -c pass) {_fmt(interp, 'process')}")
    modes = list(dict.fromkeys(x["mode"] for x in rows))
    print("| phase | " + " | ".join(modes) + " |")
    print("|---|" + "---|" * len(modes))
    for phase in PHASES:
        print(f"| {phase} | " + " | ".join(_fmt([x for x in rows if x["mode"] == m], phase) for m in modes) + " |")
    print("| load avg | " + " | ".join("/".join(f"{x['load']:.1f}" for x in rows if x["mode"] == m)
                                       for m in modes) + " |")
    if pfl:
        walls = [x["process_wall_s"] for x in pfl]
        print(f"pfl-research {args.rounds} rounds, process wall (s) min/median {min(walls):.2f}/"
              f"{statistics.median(walls):.2f}, its end_to_end_s (no start-up) "
              f"{_fmt(pfl, 'end_to_end_s')}; load " + "/".join(f"{x['load']:.1f}" for x in pfl))
        for m in modes:
            mine = [x["process"] for x in rows if x["mode"] == m]
            print(f"pfl process wall / dpjax {m} process wall (medians): "
                  f"{statistics.median(walls) / statistics.median(mine):.2f}x")
    result = {"rows": rows, "interpreter": interp, "pfl": pfl, "args": vars(args)}
    if args.importtime:
        roots, mods = importtime()
        print("slowest imports of `import dpjax.engine, dpjax.algorithms.dp_fedavg` (cumulative s):")
        print("  by top-level package: " + ", ".join(f"{n} {c:.3f}" for n, c in roots))
        print("  dpjax modules: " + ", ".join(f"{n} {c:.3f}" for n, c in mods))
        result["importtime"] = {"roots": roots, "dpjax": mods}
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
    return result


def _pfl(args) -> dict:
    import numpy as np

    import bench_fl_simulation as bench  # noqa: F401 -- only for the workload loader (imports jax here, not in pfl)

    with tempfile.TemporaryDirectory() as tmp:
        npz = pathlib.Path(tmp) / "workload.npz"
        train_x, train_y, test_x, test_y = bench.load_workload(args.clients, 60)
        np.savez(npz, train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y)
        ns = argparse.Namespace(cohort_rate=0.1, clip=1.0, sigma=1.0, client_lr=0.1, local_steps=6, local_batch=10,
                                records=60, cifar=False, sweep_lrs=[0.1], sweep_sigmas=[1.0], peer_timeout=900)
        res = bench._peer(args.peers_python, "pfl", npz, ns, "single", args.rounds)
    if "skipped" in res:
        raise RuntimeError(res["skipped"])
    return res


if __name__ == "__main__":
    main()
