"""Local SGD's K sequential local steps (``dpjax.parts.clients.LocalSteps``): layout and clipping, side by side.

Issue 25, item 2: in the full ``isrl-mnist`` figure (Figs. 4/7) the Local SGD chunks took most of the
time. Each of their 35 x 444 sequential steps is a tiny update of every (run, silo) pair's 50-parameter
model, so how XLA:CPU lays out and fuses that one step decides the figure's time. Two choices are
measured here against the code before them:

* **layout**: ``over_silos_runs_inside`` puts the engine's runs axis inside the silo axis
  (``[silos, runs, d]``) instead of outermost (``[runs, silos, d]``, plain ``vmap``);
* **clipping**: a GLM step clips its one record by the problem's closed form (``||grad|| = |r| ||x||``,
  the row norms computed once a round) instead of autodiff's gradient and its norm.

Every variant runs the figure's chunk: 25 MNIST-shaped silos of 1238 records (d = 50), K = 444 local
steps, R = 35 rounds, 130 runs sharing one key (the figure's common random numbers), M = 12 and 25
silos a round (the figure's panels: M = 12, 18, 25). Prints each variant's seconds for one chunk (the best of
``--repeats`` calls after the compiling one), its ratio to the old code's, and its largest relative
difference in the output from the old code's (float rounding: the same arithmetic in another order).

**The floor.** XLA's cost analysis counts a loop body once, so it cannot give this chunk's floor. It is
measured here instead: a step must read every (run, silo) model twice (the margin, then the update) and
write it once, 12 bytes per parameter, so the floor of a step is 1.5x one elementwise pass
``w <- a w + b`` over the same ``[M, runs, d]`` array, timed in the same scan shape (the array, 0.3-0.65
MB, stays in cache: this pass runs faster than the large-copy peak of ``roofline.py``). Printed per M:
the step's time over that floor, and the figure's Local SGD first grids (20 trials x 3 repetitions x one
chunk per panel) at the floor.

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu python experiments/benchmarks/bench_local_steps.py [--rounds 35]
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np


def _runs_outermost(one_silo):
    """The layout before: a plain vmap over silos (an outer vmap puts the runs axis first)."""

    def per_silo(params, *args):
        *silo_args, ctx = args
        return jax.vmap(one_silo, in_axes=(None,) + (0,) * len(silo_args) + (None,))(params, *silo_args, ctx)

    return per_silo


def _clear_compiled():
    """Each variant compiles its own program (the engine caches programs by algorithm, not by code)."""
    from dpjax.engine import program

    program._COMPILED.clear()
    program._sharded.cache_clear()
    jax.clear_caches()


def _time(algo, train, width, repeats):
    from dpjax import keys
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams
    from dpjax.engine import OutputParams, run_grid, stack_hparams

    # step sizes and noise multipliers as a grid's (noise on two lanes in three, as the private runs)
    hp = stack_hparams([MbSgdHParams.create(1e-3 * (i % 10 + 1), float(i % 3), 10.0) for i in range(width)])
    run_keys = jnp.stack([keys.run_key(0, 0)] * width)
    times, out = [], None
    for _ in range(repeats + 1):
        t = time.perf_counter()
        out = run_grid(algo, train, hp, run_keys, eval_fn=OutputParams(), chunk_size=width).evals
        out = np.asarray(jax.tree_util.tree_leaves(out)[0])
        times.append(time.perf_counter() - t)
    return min(times[1:]), out


def _elementwise_pass(m, width, d, steps, repeats) -> float:
    """Seconds per step of ``w <- a w + b`` over ``[m, width, d]`` in a ``steps``-long scan (one read and one
    write of every parameter: 8 bytes each)."""
    a = jnp.linspace(0.9, 1.0, width, dtype=jnp.float32)[None, :, None]
    f = jax.jit(lambda w: jax.lax.scan(lambda w, _: (w * a + 1e-3, None), w, None, length=steps)[0])
    w = jnp.zeros((m, width, d), jnp.float32)
    jax.block_until_ready(f(w))
    times = []
    for _ in range(repeats + 1):
        t = time.perf_counter()
        jax.block_until_ready(f(w))
        times.append(time.perf_counter() - t)
    return min(times) / steps


def main(argv=None) -> None:
    from dpjax.algorithms.local_sgd import LocalSgd
    from dpjax.engine import SiloData
    from dpjax.engine.problem import AutodiffOnly
    from dpjax.parts import clients
    from dpjax.primitives import FixedAvailability
    from dpjax.problems import LogisticRegression

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=35)
    p.add_argument("--local-steps", type=int, default=444)
    p.add_argument("--width", type=int, default=130, help="runs in the chunk (the full figure's first grid: 130)")
    p.add_argument("--silos-per-round", type=int, nargs="+", default=[12, 18, 25])
    p.add_argument("--trials", type=int, default=20, help="the figure's trials (x 3 repetitions) for the floor line")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    silos, n, d = 25, 1238, 50
    # PCA-scaled features (row norms about 1-2, as the figure's): the clip at 10 does not bind
    train = SiloData.from_silos([rng.normal(size=(n, d)).astype(np.float32) * 0.2 for _ in range(silos)],
                                [(rng.random(n) < 0.5).astype(np.int32) for _ in range(silos)])
    glm = LogisticRegression(d)
    variants = [("runs outermost, autodiff clip (before)", _runs_outermost, AutodiffOnly(glm)),
                ("runs outermost, closed-form clip", _runs_outermost, glm),
                ("runs inside silos, autodiff clip", clients.over_silos_runs_inside, AutodiffOnly(glm)),
                ("runs inside silos, closed-form clip (now)", clients.over_silos_runs_inside, glm)]
    print(f"load average at start {os.getloadavg()[0]:.1f}; Local SGD R={args.rounds} K={args.local_steps}, "
          f"{args.width} runs, 25 silos of {n} x {d}")
    print("| M | variant | s per chunk | us per step | before / this | largest relative change |")
    print("|---|---|---|---|---|---|")
    layout = clients.over_silos_runs_inside
    floors = {}
    try:
        for m in args.silos_per_round:
            base = None
            floors[m] = 1.5 * _elementwise_pass(m, args.width, d, args.local_steps, args.repeats)
            for name, mapping, problem in variants:
                clients.over_silos_runs_inside = mapping
                _clear_compiled()
                algo = LocalSgd(problem, num_rounds=args.rounds, local_steps=args.local_steps,
                                availability=FixedAvailability(m), output="window")
                seconds, out = _time(algo, train, args.width, args.repeats)
                base = base or (seconds, out)
                change = float(np.max(np.abs(out - base[1]) / np.maximum(np.abs(base[1]), 1e-3)))
                print(f"| {m} | {name} | {seconds:.3f} | {seconds / (args.rounds * args.local_steps) * 1e6:.0f} "
                      f"| {base[0] / seconds:.2f}x | {change:.1e} |", flush=True)
            floors[m] = (floors[m], seconds / (args.rounds * args.local_steps))
    finally:
        clients.over_silos_runs_inside = layout
    steps = args.rounds * args.local_steps
    print("| M | floor us per step (1.5 elementwise passes) | now us per step | now / floor |")
    print("|---|---|---|---|")
    for m, (floor, now) in floors.items():
        print(f"| {m} | {floor * 1e6:.1f} | {now * 1e6:.1f} | {now / floor:.2f} |")
    runs = 3 * args.trials
    print(f"the figure's Local SGD first grids ({args.trials} trials x 3 repetitions x one {args.width}-run chunk "
          f"per M in {sorted(floors)}): {runs * steps * sum(f for f, _ in floors.values()):.0f} s at the floor, "
          f"{runs * steps * sum(n for _, n in floors.values()):.0f} s now")
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
