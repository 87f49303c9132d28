"""Measures the cost of the FULL DIFF2 protocol on this machine, per clipping path, and extrapolates.

Per dataset (full data, seed 0) it runs the first ``--configs`` DIFF2-GD configurations of the grid
(one vmapped batch, as the reproduction runs them) for ``--rounds`` rounds, once to compile and then
warm (best of two), for each DIFF2 clipping path side by side in one process:

* ``per-record``: per-record gradients materialised with ``vmap(grad)`` and the previous iterate's
  gradients cached (the path before ghost clipping);
* ``ghost``: ghost clipping of the gradient differences, both iterates' layer passes recomputed every
  round (the first ghost version);
* ``auto``: what the reproduction runs now (``dpjax.algorithms.diff2.clipping_path``: ghost clipping
  with the previous iterate's layer passes carried, or per-record gradients if cheaper).

Reference row ``non-private GD``: plain full-batch gradient descent on the same network, data and
vmapped batch of runs (``jax.grad`` of the mean loss, no clipping, no noise): the floor of any exact
per-record method, since DIFF2-GD must at least compute one full-batch gradient per round.

The time per (run x round) is the marginal cost of the compiled program (no data loading, privacy
check or evaluation inside the timed call); the evaluation every 20 rounds (full train gradient and
test loss) is timed separately and added per round. The extrapolation uses the ``auto`` path:

    runs = (#GD + #DP-GD + #DIFF2-GD) per seed x 5 seeds, R = 2000 (DP-GD and GD runs are
    counted at the DIFF2-GD cost, an upper bound).

Usage: python experiments/diff2/time_full.py [--rounds 20] [--configs 4] [--datasets ...] [--paths ...]
Writes experiments/diff2/full_timing.json (merged per dataset) and prints a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.algorithms import diff2 as alg
from dpjax import engine
from dpjax.reproduce import diff2 as rep

EPS = {"california_housing": (3.0, 5.0), "gas_turbine": (3.0, 5.0), "blogfeedback": (3.0, 5.0),
       "kddcup99": (3.0,), "a9a": (3.0,)}
PATHS = {"per-record": dict(path="per-record", cache_grads=True), "ghost": dict(path="ghost", cache_grads=False),
         "auto": dict(path="auto", cache_grads=True)}


def _best_of(fn, repeats: int = 2) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(name: str, rounds: int, num_configs: int, paths) -> dict:
    fd, task = rep.model.load_split(name, 0, None)
    classification = task == "classification"
    data = rep.driver.silo_data(fd, classification)
    problem = rep.model.mlp_problem(data.x.shape[-1], fd.num_classes if classification else 1, task)
    n_min = fd.metadata["n_min"]
    proto = dataclasses.replace(rep.config.FULL, num_rounds=rounds, eval_every=rounds, seeds=(0,))
    configs = [c for c in rep.config.build_configs(proto, EPS[name], n_min) if c.algorithm == "DIFF2-GD"][:num_configs]
    noise = alg.Diff2GD(problem, rounds).noise_multipliers_from_paper(
        data.silo_sizes(), sigma_restart=np.array([c.sigma_restart for c in configs]),
        sigma_diff=np.array([c.sigma_diff for c in configs]))
    hp = alg.Diff2HParams(*(jnp.asarray(np.array([getattr(c, f) for c in configs],
                                                 np.int32 if f == "restart_interval" else np.float32))
                            for f in ("learning_rate", "restart_interval", "clip_restart", "clip_diff")),
                          *(jnp.asarray(noise[f], jnp.float32) for f in ("noise_multiplier_restart",
                                                                         "noise_multiplier_diff")),
                          jnp.ones(len(configs)), jnp.zeros(len(configs)))
    params0 = problem.init_params(jax.random.key(1))
    keys_ = jnp.stack([jax.random.key(2)] * len(configs))
    out = {"n_train": int(n_min * rep.config.NUM_SILOS), "n_params": sum(int(p.size) for p in jax.tree_util.tree_leaves(params0)),
           "measured_runs": len(configs), "measured_rounds": rounds, "paths": {}}
    for path in (p for p in paths if p in PATHS):
        algorithm = alg.Diff2GD(problem, rounds, output="last", **PATHS[path])
        t0 = time.perf_counter()
        run = lambda algorithm=algorithm: engine.run_many(algorithm, data, hp, keys_, params=params0).state.params  # noqa: E731
        jax.block_until_ready(run())
        first = time.perf_counter() - t0
        warm = _best_of(run)
        out["paths"][path] = {"runs_on": algorithm.path_used(params0, data), "first_call_s": first, "warm_call_s": warm,
                              "ms_per_run_round": 1e3 * warm / (len(configs) * rounds)}
        print(f"  {name} {path:>10} ({out['paths'][path]['runs_on']}): "
              f"{out['paths'][path]['ms_per_run_round']:.2f} ms/run-round (compile+run {first:.1f} s)", flush=True)
    if "non-private GD" in paths:
        x = data.x.reshape((-1,) + data.x.shape[2:])
        y = data.y.reshape((-1,) + data.y.shape[2:])

        def gd(params):
            def body(p, _):
                g = jax.grad(lambda q: jnp.mean(jax.vmap(problem.loss, (None, 0, 0))(q, x, y)))(p)
                return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g), None
            return jax.lax.scan(body, params, None, length=rounds)[0]

        batch = jax.tree_util.tree_map(lambda a: jnp.stack([a] * len(configs)), params0)
        gd_runs = jax.jit(jax.vmap(gd))
        jax.block_until_ready(gd_runs(batch))
        warm = _best_of(lambda: gd_runs(batch))
        out["paths"]["non-private GD"] = {"runs_on": "full-batch grad", "warm_call_s": warm,
                                          "ms_per_run_round": 1e3 * warm / (len(configs) * rounds)}
        print(f"  {name} non-private GD: {out['paths']['non-private GD']['ms_per_run_round']:.2f} ms/run-round",
              flush=True)
    ed = {"xtr": jnp.asarray(np.concatenate(fd.train_x)), "ytr": jnp.asarray(np.concatenate(fd.train_y)),
          "xte": jnp.asarray(fd.pooled_test_x), "yte": jnp.asarray(fd.pooled_test_y)}
    eval_fn = jax.jit(rep.model.make_eval_fn(problem, classification))
    jax.block_until_ready(eval_fn(params0, ed))
    out["eval_ms"] = 1e3 * _best_of(lambda: eval_fn(params0, ed))
    full_runs = len(rep.config.build_configs(rep.config.FULL, EPS[name], n_min)) * len(rep.config.FULL.seeds)
    if "auto" in out["paths"]:
        per = out["paths"]["auto"]["ms_per_run_round"] + out["eval_ms"] / rep.config.FULL.eval_every
        out.update(full_runs=full_runs, full_rounds=rep.config.FULL.num_rounds,
                   estimated_full_h=per * 1e-3 * full_runs * rep.config.FULL.num_rounds / 3600)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--configs", type=int, default=4)
    ap.add_argument("--datasets", nargs="*", default=list(EPS))
    ap.add_argument("--paths", nargs="*", default=[*PATHS, "non-private GD"], choices=[*PATHS, "non-private GD"])
    ap.add_argument("--out", default=str(pathlib.Path(__file__).with_name("full_timing.json")))
    args = ap.parse_args()
    path = pathlib.Path(args.out)
    results = json.loads(path.read_text()) if path.exists() else {}
    for name in args.datasets:
        res = measure(name, args.rounds, args.configs, args.paths)
        results[name] = res
        p = res["paths"]
        ratio = ", ".join(f"{k} {v['ms_per_run_round']:.2f}" for k, v in p.items())
        drop = (f"; per-record/auto {p['per-record']['ms_per_run_round'] / p['auto']['ms_per_run_round']:.1f}x"
                if {"per-record", "auto"} <= set(p) else "")
        drop += (f"; auto/non-private GD {p['auto']['ms_per_run_round'] / p['non-private GD']['ms_per_run_round']:.2f}x"
                 if {"auto", "non-private GD"} <= set(p) else "")
        est = f"; full protocol ~{res['estimated_full_h']:.0f} h on this machine" if "estimated_full_h" in res else ""
        print(f"{name}: n_train={res['n_train']} d={res['n_params']} ms/run-round: {ratio}{drop}; "
              f"eval {res['eval_ms']:.1f} ms per 20 rounds{est}", flush=True)
        path.write_text(json.dumps(results, indent=2))  # after every dataset: nothing measured is lost


if __name__ == "__main__":
    main()
