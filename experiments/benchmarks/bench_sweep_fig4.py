"""ISRL-DP Fig. 4 protocol three ways: compiled grid vs per-config jit loop vs NumPy (authors' structure).

Protocol (Lowy & Razaviyayn 2023, Fig. 4 and Appendix I): binary logistic
regression on the 25-silo MNIST split (N = 25, n = 1238, d = 50), M = 12
silos available per round, R = 35 rounds, K = ceil(n sqrt(eps_max)/(2 sqrt R))
= 444 records per silo per round drawn with replacement (as the authors'
script), noise sigma^2 = 8 L^2 ln(1/delta) R / (n^2 eps^2) with delta = 1/n^2
and L = 2 max ||x|| (the "paper-experiment" accountant), 6 epsilons x 10 step
sizes exp(linspace(-6, 0, 10)) x 3 repetitions x 20 trials = 3600 runs, output
= average of the last 8 iterates, final training loss and test error.

1. **compiled grid**: ``dpjax.sweep.run_sweep`` (one compilation, chunks of
   one trial's 180 runs, results stored) — timed end to end, including data
   splits, calibration, compilation and the results store.
2. **per-config jit loop**: a Python loop that builds and jits one program per
   configuration (hyperparameters baked in as constants, as a script would do)
   — timed on ``--loop-sample`` configurations and extrapolated linearly to
   3600; also the same loop reusing one compiled program (``engine.run``).
3. **NumPy, authors' structure** (``DP_FL_MNIST_logistic_FINAL.py`` of Lowy &
   Razaviyayn, re-implemented, not copied): loops over trials, epsilons, step
   sizes, repetitions, rounds and available silos; per available silo a
   vectorised minibatch gradient (K indices with replacement, no per-example
   clipping: the authors rely on L bounding the gradient) plus the noise as
   ``multivariate_normal(0, sigma^2 I)`` (what the script calls); the training
   loss of the 8-iterate window average every ``loss_freq = 5`` rounds (the
   divergence guard); the test error of the output by a per-example Python
   loop over the silos' test sets, as the script's ``test_err``. Timed on one
   (trial, epsilon) block of 30 runs and extrapolated.
4. **NumPy, vectorised**: the same loops with the cheap choices
   (``standard_normal`` noise, loss only at the end, vectorised test error):
   what a careful NumPy rewrite costs, printed for reference.

Run: ``python experiments/benchmarks/bench_sweep_fig4.py`` (``--trials 2`` for a
quick look; ``--host-devices 2`` splits a 2-core CPU into two XLA devices so the
sweep's ``shard_map`` runs two chunks at once). Prints the times and the ratios
from this one run.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

import numpy as np


def fig4_config(trials: int, vmap_width: int | None, data: str):
    from dpjax.sweep import SweepConfig

    d = {
        "name": "isrl-fig4-mbsgd-appendix-i-m12",  # the M = 12 panel of sweep/configs/isrl_fig4_mbsgd_appendix_i.toml
        "algorithm": "isrl-mbsgd",
        "num_rounds": 35,
        "seed": 0,
        "static": {"batch_size": "isrl-experiment", "sampling": "with-replacement", "availability": 12,
                   "output": "window", "window": 8},
        "data": {"name": data} if data == "isrl-mnist" else
                {"name": "synthetic-logistic", "num_silos": 25, "n": 1238, "dim": 50, "n_test": 310},
        "privacy": {"accountant": "paper-experiment", "delta": "1/n^2"},
        "grid": {
            "learning_rate": {"logspace": [-6, 0, 10], "base": "e"},
            "epsilon": [0.75, 1.5, 3.0, 6.0, 12.0, 18.0],
            "clip_norm": ["2*maxnorm"],
            "repetition": 3,
            "trial": trials,
        },
    }
    if vmap_width:
        d["vmap_width"] = vmap_width
    return SweepConfig.from_dict(d)


def time_grid(cfg):
    from dpjax.engine import program
    from dpjax.sweep import run_sweep

    with tempfile.TemporaryDirectory() as out:
        c0 = program.COMPILATIONS["count"]
        t0 = time.perf_counter()
        res = run_sweep(cfg, out, progress=True)
        dt = time.perf_counter() - t0
        compiles = program.COMPILATIONS["count"] - c0
    return dt, res, compiles


def time_jit_loop(cfg, sample: int):
    """Fresh jit per configuration (constants baked in) and a loop reusing one compiled program."""
    import jax

    from dpjax import engine
    from dpjax.engine.program import trace_run
    from dpjax.keys import run_key
    from dpjax.sweep.driver import Sweep

    sw = Sweep(cfg, jax.local_devices()[:1])
    g = sw.groups[0]
    alg = sw.algorithm(g)
    td = sw.trial(g.trials[0])
    ev = sw.eval_fn(td.problem)
    entry = sw.entry
    picks = [(h, s) for h in range(len(g.configs)) for s in g.repetitions][:: max(1, 180 // sample)][:sample]
    keys = {s: run_key(cfg.seed, g.trials[0], s) for s in g.repetitions}
    # (a) one jit per configuration
    t0 = time.perf_counter()
    for h, s in picks:
        hp = entry.make_hparams(sw.hparams(g, g.trials[0], h))
        params = td.problem.init_params()

        def one(data, eval_data, key, hp=hp, params=params):  # hp closed over: a new program per config
            return trace_run(alg, ev, None, params, hp, data, eval_data, key)[3]

        jax.block_until_ready(jax.jit(one)(td.train, td.eval_data, keys[s]))
    fresh = (time.perf_counter() - t0) / len(picks)
    # (b) the same loop reusing one compiled program (engine.run; first call compiles)
    hp0 = entry.make_hparams(sw.hparams(g, g.trials[0], 0))
    engine.run(alg, td.train, hp0, keys[0], eval_fn=ev, eval_data=td.eval_data)  # compile outside the timing
    t0 = time.perf_counter()
    for h, s in picks:
        hp = entry.make_hparams(sw.hparams(g, g.trials[0], h))
        engine.run(alg, td.train, hp, keys[s], eval_fn=ev, eval_data=td.eval_data)
    cached = (time.perf_counter() - t0) / len(picks)
    return fresh, cached, len(picks)


def numpy_block(cfg, rng_seed: int = 0, faithful: bool = True):
    """One (trial, epsilon) block of the authors' loop structure: 10 step sizes x 3 repetitions.

    ``faithful``: the script's own choices (multivariate-normal noise, window
    loss every 5 rounds, per-example test-error loop); else the vectorised
    equivalents.
    """
    import jax

    from dpjax.sweep.driver import Sweep

    sw = Sweep(cfg, jax.local_devices()[:1])
    g = sw.groups[0]
    alg = sw.algorithm(g)
    td = sw.trial(g.trials[0])
    N, n = td.train.num_silos, td.train.n_max
    xs = [np.asarray(td.train.x[i], np.float64) for i in range(N)]
    ys = [np.asarray(td.train.y[i], np.float64) for i in range(N)]
    xtr, ytr = np.asarray(td.eval_data["train_x"], np.float64), np.asarray(td.eval_data["train_y"], np.float64)
    xte, yte = np.asarray(td.eval_data["test_x"], np.float64), np.asarray(td.eval_data["test_y"], np.float64)
    K, R, M = alg.batch_size, cfg.num_rounds, 12
    rng = np.random.default_rng(rng_seed)
    eps = cfg.grid["epsilon"][0]
    h_of = {(c["learning_rate"], c["epsilon"]): i for i, c in enumerate(g.configs)}
    d = xs[0].shape[1]
    eye = np.eye(d)
    sigmoid = lambda z: 1.0 / (1.0 + np.exp(-np.clip(z, -15, 15)))

    def train_loss(w):
        p = sigmoid(xtr @ w)
        return -np.mean(ytr * np.log(1e-12 + p) + (1 - ytr) * np.log(1e-12 + 1 - p))

    xte_silos = np.asarray(td.eval_data["test_x"], np.float64).reshape(N, -1, d) if faithful else None
    yte_silos = np.asarray(td.eval_data["test_y"], np.float64).reshape(N, -1) if faithful else None

    def test_error(w):
        if not faithful:
            return np.mean(((xte @ w) > 0) != (yte > 0.5))
        wrong = 0
        for i in range(xte_silos.shape[0]):  # the script's test_err: one example at a time
            for j in range(xte_silos.shape[1]):
                wrong += int((sigmoid(np.dot(xte_silos[i, j], w)) > 0.5) != yte_silos[i, j])
        return wrong / yte_silos.size

    t0 = time.perf_counter()
    results = []
    for lr in cfg.grid["learning_rate"]:
        vals = sw.hparams(g, g.trials[0], h_of[(lr, eps)])
        # the calibrated noise multiplier times the family's message sensitivity (2L/K): the script's sigma
        sigma = vals["noise_multiplier"] * alg.message_sensitivity(sw.entry.make_hparams(vals, alg),
                                                                   td.train.silo_sizes())
        for _rep in cfg.grid["repetition"]:
            iterates = [np.zeros(d)]
            diverged = False
            for r in range(R):
                iterates = iterates[-7:]
                w = iterates[-1]
                avail = rng.choice(N, M, replace=False)
                total = np.zeros_like(w)
                for i in avail:
                    idx = rng.integers(0, n, K)
                    xb, yb = xs[i][idx], ys[i][idx]
                    grad = xb.T @ (sigmoid(xb @ w) - yb) / K
                    noise = (rng.multivariate_normal(np.zeros(d), sigma**2 * eye) if faithful
                             else rng.normal(0.0, sigma, size=d))
                    total += grad + noise
                iterates.append(w - lr * total / M)
                if faithful and (r + 1) % 5 == 0 and train_loss(np.mean(iterates, axis=0)) > 100:
                    diverged = True
                    break
            wbar = np.mean(iterates, axis=0)
            results.append((train_loss(wbar), None if diverged else test_error(wbar)))
    dt = time.perf_counter() - t0
    return dt, len(results)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--vmap-width", type=int, default=None, help="runs computed simultaneously (default: automatic)")
    ap.add_argument("--loop-sample", type=int, default=6, help="configurations timed for the per-config loop")
    ap.add_argument("--data", choices=("isrl-mnist", "synthetic"), default="isrl-mnist",
                    help="real MNIST split (default) or synthetic data of the same shapes")
    ap.add_argument("--host-devices", type=int, default=None,
                    help="split the CPU into this many XLA host devices (one per core) so the sweep's shard_map "
                         "runs chunks side by side; results are bit-identical to one device")
    args = ap.parse_args(argv)
    if args.host_devices:
        if "jax" in sys.modules:
            raise RuntimeError("--host-devices must be set before jax is imported")
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={args.host_devices}").strip()

    import jax

    data = args.data
    if data == "isrl-mnist":
        try:
            from dpjax.data import load_mnist

            load_mnist()
        except Exception as err:  # noqa: BLE001
            print(f"MNIST not available ({err}); using synthetic data of the same shapes", file=sys.stderr)
            data = "synthetic"
    cfg = fig4_config(args.trials, args.vmap_width, data)
    total_runs = 6 * 10 * 3 * args.trials
    print(f"device: {jax.devices()[0]} ({jax.device_count()} device(s)); cpus: {os.cpu_count()}; "
          f"load avg: {os.getloadavg()}")
    print(f"protocol: {total_runs} runs (6 eps x 10 lr x 3 reps x {args.trials} trials), R=35, N=25, M=12, d=50, "
          f"data={data}")

    grid_s, res, compiles = time_grid(cfg)
    k = int(res.runs["batch_size_resolved"].iloc[0])
    div = int((res.runs["diverged_round"] >= 0).sum())
    print(f"[grid ] {grid_s:8.1f} s  ({total_runs / grid_s:.1f} runs/s, {compiles} compilation(s), K={k}, "
          f"{div} diverged runs marked)")

    fresh, cached, m = time_jit_loop(cfg, args.loop_sample)
    loop_s, cached_s = fresh * total_runs, cached * total_runs
    print(f"[loop ] {loop_s:8.1f} s  (jit per config: {fresh:.2f} s/run over {m} configs, extrapolated)")
    print(f"[loop'] {cached_s:8.1f} s  (one compiled program reused, Python loop: {cached:.3f} s/run, extrapolated)")

    block_s, block_runs = numpy_block(cfg)
    numpy_s = block_s / block_runs * total_runs
    print(f"[numpy] {numpy_s:8.1f} s  (authors' script structure: {block_s / block_runs:.3f} s/run over "
          f"{block_runs} runs, extrapolated)")
    vblock_s, vblock_runs = numpy_block(cfg, faithful=False)
    vnumpy_s = vblock_s / vblock_runs * total_runs
    print(f"[np-v ] {vnumpy_s:8.1f} s  (same loops, vectorised noise/evaluation: {vblock_s / vblock_runs:.3f} s/run, "
          f"extrapolated)")

    print("\nratios (higher = compiled grid faster):")
    print(f"  per-config jit loop / grid      = {loop_s / grid_s:7.1f}x   (target >= 30x)")
    print(f"  reused-program loop / grid      = {cached_s / grid_s:7.1f}x")
    print(f"  NumPy authors' structure / grid = {numpy_s / grid_s:7.1f}x   (target >= 100x)")
    print(f"  NumPy vectorised / grid         = {vnumpy_s / grid_s:7.1f}x")
    print(f"  grid wall time                  = {grid_s:7.1f} s    (target < 60 s on the 2-core CPU)")
    sel = None
    try:
        from dpjax.sweep import select

        sel = select.select_best(res.runs, over="learning_rate", by=["epsilon", "trial"])
        summary = select.error_bars(sel, x="epsilon", value="test_error")
        print("\nFig. 4 (M=12) test error of the selected step size, mean over trials [p5, p95]:")
        for _, r in summary.iterrows():
            print(f"  eps={r.epsilon:5.2f}: {r['mean']:.4f} [{r.p_lo:.4f}, {r.p_hi:.4f}]")
    except Exception as err:  # noqa: BLE001
        print(f"(selection summary failed: {err})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
