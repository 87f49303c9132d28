"""Running one DIFF2 dataset: every configuration in one compiled program per dataset."""

from __future__ import annotations

import time

import numpy as np

from dpjax.reproduce.diff2.config import NUM_SILOS, Protocol, build_configs, verify_privacy
from dpjax.reproduce.diff2.model import load_split, make_eval_fn, mlp_problem


# ----------------------------------------------------------------------------- running
def run_dataset(name: str, protocol: Protocol, epsilons, *, seed_offset: int = 0, data_dir=None, log=print,
                seeds=None, config_filter=None, construction: str = "paper") -> dict:
    """Runs every configuration for every seed on one dataset; returns traces.

    Result: ``{"configs", "eval_rounds", "traces": {seed: {metric: [num_configs, num_checkpoints]}}, "meta",
    "privacy", "wall_s"}``; checkpoint 0 is the initial point.
    """
    import jax
    import jax.numpy as jnp

    from dpjax import keys
    from dpjax.algorithms import diff2 as alg
    from dpjax.engine import Trial, run_grid

    t0 = time.time()
    seeds = protocol.seeds if seeds is None else seeds
    cap = (protocol.max_records or {}).get(name)
    fd0, task = load_split(name, seeds[0] + seed_offset, cap, data_dir, construction)
    n_min = fd0.metadata["n_min"]
    configs = build_configs(protocol, epsilons, n_min, construction)
    if config_filter is not None:
        configs = [c for c in configs if config_filter(c)]
    privacy = verify_privacy(configs, protocol, n_min)
    classification = task == "classification"
    d_in = fd0.train_x[0].shape[1]
    problem = mlp_problem(d_in, fd0.num_classes if classification else 1, task)
    eval_fn = make_eval_fn(problem, classification)
    # Ghost clipping of the differences or materialised per-record gradients, whichever moves fewer floats
    # (alg.clipping_path); either way the previous iterate's per-record work is carried, not recomputed.
    algorithm = alg.Diff2GD(problem, protocol.num_rounds, output="last", cache_grads=True, path=protocol.path)
    clip_path = algorithm.path_used(problem.init_params(jax.random.key(0)), silo_data(fd0, classification))
    ghost = clip_path == "ghost"
    # the paper's sigma (std / radius) as noise multipliers (std / sensitivity) of this algorithm's rounds
    noise = algorithm.noise_multipliers_from_paper(
        [len(x) for x in fd0.train_x],
        sigma_restart=np.array([c.sigma_restart for c in configs]),
        sigma_diff=np.array([c.sigma_diff for c in configs]))
    hp_all = alg.Diff2HParams(
        learning_rate=np.array([c.learning_rate for c in configs], np.float32),
        restart_interval=np.array([c.restart_interval for c in configs], np.int32),
        clip_restart=np.array([c.clip_restart for c in configs], np.float32),
        clip_diff=np.array([c.clip_diff for c in configs], np.float32),
        noise_multiplier_restart=noise["noise_multiplier_restart"].astype(np.float32),
        noise_multiplier_diff=noise["noise_multiplier_diff"].astype(np.float32),
        clip_local=np.ones(len(configs), np.float32),
        noise_multiplier_local=np.zeros(len(configs), np.float32),
    )
    n_params = sum(int(np.prod(np.shape(p))) for p in jax.tree_util.tree_leaves(problem.init_params(jax.random.key(0))))
    n_train = n_min * NUM_SILOS
    n_out = fd0.num_classes if classification else 1
    per_record = 8 * (10 + n_out) if ghost else n_params  # activations/output grads at two iterates vs gradients
    chunk = int(max(1, min(len(configs), protocol.chunk_floats // (3 * n_train * per_record))))
    # Every seed's split first, then one grid: a trial per seed, the seed's configurations as its runs.
    trials, seed_values = [], [s + seed_offset for s in seeds]
    for s, seed in zip(seeds, seed_values):
        fd, _ = (fd0, task) if s == seeds[0] else load_split(name, seed, cap, data_dir, construction)
        ed = {
            "xtr": jnp.asarray(np.concatenate(fd.train_x)),
            "ytr": jnp.asarray(np.concatenate(fd.train_y)),
            "xte": jnp.asarray(fd.pooled_test_x),
            "yte": jnp.asarray(fd.pooled_test_y),
        }
        trials.append(Trial(silo_data(fd, classification), ed, problem.init_params(keys.run_key(seed, 1))))
    # One (equal) key per lane and one starting point per seed: the historical program, numbers pinned.
    run_keys = jnp.stack([keys.run_key(seed, 2) for seed in seed_values for _ in configs])
    hp_seeds = jax.tree_util.tree_map(lambda a: np.tile(a, len(seeds)), hp_all)
    res = run_grid(algorithm, trials, hp_seeds, run_keys, trial_of_run=np.repeat(np.arange(len(seeds)), len(configs)),
                   eval_fn=eval_fn, eval_data=None, eval_every=protocol.eval_every, common_random_numbers=False,
                   chunk_size=chunk)
    rounds, traces = res.eval_rounds, {}
    initial_eval = jax.jit(eval_fn)
    for t, (trial, seed) in enumerate(zip(trials, seed_values)):
        ev0 = jax.device_get(initial_eval(trial.params, trial.eval_data))
        runs = slice(t * len(configs), (t + 1) * len(configs))
        traces[seed] = {k: np.concatenate([np.full((len(configs), 1), ev0[k]), v[runs]], axis=1)
                        for k, v in res.evals.items()}
    log(f"  {name} seeds {seed_values}: {len(seeds)} x {len(configs)} runs x {protocol.num_rounds} rounds, "
        f"{time.time() - t0:.0f}s elapsed")
    return {
        "configs": configs,
        "eval_rounds": np.concatenate([[0], rounds]),
        "traces": traces,
        "meta": {**{k: v for k, v in fd0.metadata.items() if k not in ("train_indices", "test_indices", "feature_names")},
                 "n_params": n_params, "task": task, "max_records": cap, "clipping_path": clip_path},
        "privacy": privacy,
        "wall_s": time.time() - t0,
    }


def silo_data(fd, classification: bool):
    import jax.numpy as jnp

    from dpjax.engine.silos import SiloData

    return SiloData.from_silos(fd.train_x, fd.train_y, dtype=jnp.float32,
                               label_dtype=jnp.int32 if classification else jnp.float32)
