"""What an ISRL figure's chunk costs by its lane count and by its silo count, side by side.

Two decisions of the ``isrl-*`` figures rest on these numbers (issue 25, item 2):

* grid extensions run in chunks of ``dpjax.sweep.table.extension_width`` lanes (one step size of every
  group: 13 in the full ``isrl-mnist``) instead of the first grid's width (130): a chunk's cost grows
  with its lanes, so an extension round padded to 130 lanes cost as much as the first grid;
* the silos per round M stays static. Making it a runtime value needs the silo axis padded to the
  largest M of the figure (25) with the unavailable silos masked: the M = 12 panel's chunk then computes
  25 silos. The ``padded`` row measures exactly that (``LocalSgd(log_indices=True)`` computes every silo
  and masks the unavailable ones) against the compile time it would save (one program per M).

Prints, per case, the compile+first call and a second call's process CPU seconds (CPU: the machine is
shared; wall is printed too) and the ratios. The default sizes are the full ``isrl-mnist`` Local SGD chunk
(25 silos of 1238 records, d = 50, R = 35, K = 444); ``--rounds`` shortens it for a smoke run.

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu python experiments/benchmarks/bench_isrl_chunk_width.py [--rounds 35]
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np


def _case(algo, train, problem, width: int) -> dict:
    from dpjax import keys
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams
    from dpjax.engine import run_grid, stack_hparams

    hp = stack_hparams([MbSgdHParams.create(1e-3 * (i + 1), 1.0, 10.0) for i in range(width)])
    run_keys = jnp.stack([keys.run_key(0, 0)] * width)
    evaluate = lambda p, d: {"train_loss": problem.evaluate(p, *d["train"])["loss"]}  # noqa: E731
    out = {}
    for label in ("first", "second"):
        t, c = time.perf_counter(), time.process_time()
        res = run_grid(algo, train, hp, run_keys, eval_fn=evaluate, eval_data={"train": train.pooled()},
                       chunk_size=width)
        jax.block_until_ready(res.evals)
        out[label] = (time.process_time() - c, time.perf_counter() - t)
    return out


def main(argv=None) -> None:
    from dpjax.algorithms.local_sgd import LocalSgd
    from dpjax.engine import SiloData
    from dpjax.primitives import FixedAvailability
    from dpjax.problems import LogisticRegression

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=35)
    p.add_argument("--local-steps", type=int, default=444)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    silos, n, d = 25, 1238, 50
    train = SiloData.from_silos([rng.normal(size=(n, d)).astype(np.float32) * 0.2 for _ in range(silos)],
                                [(rng.random(n) < 0.5).astype(np.int32) for _ in range(silos)])
    problem = LogisticRegression(d)

    def local(m, padded=False):
        return LocalSgd(problem, num_rounds=args.rounds, local_steps=args.local_steps,
                        availability=FixedAvailability(m), output="window", log_indices=padded)

    cases = [("M=25, 130 lanes (full first grid)", local(25), 130),
             ("M=25, 13 lanes (full extension round)", local(25), 13),
             ("M=25, 35 lanes (quick first grid)", local(25), 35),
             ("M=25, 7 lanes (quick extension round)", local(25), 7),
             ("M=12, 130 lanes", local(12), 130),
             ("M=12 padded to 25 silos, 130 lanes", local(12, padded=True), 130)]
    print(f"load average at start {os.getloadavg()[0]:.1f}; Local SGD R={args.rounds} K={args.local_steps}")
    print("| case | compile + first call CPU s | call CPU s | call wall s |")
    print("|---|---|---|---|")
    rows = {}
    for name, algo, width in cases:
        r = rows[name] = _case(algo, train, problem, width)
        print(f"| {name} | {r['first'][0]:.2f} | {r['second'][0]:.2f} | {r['second'][1]:.2f} |", flush=True)
    call = {k: v["second"][0] for k, v in rows.items()}
    compile_s = rows["M=12, 130 lanes"]["first"][0] - call["M=12, 130 lanes"]
    print(f"130 / 13 lanes: {call[cases[0][0]] / call[cases[1][0]]:.2f}x per call; "
          f"35 / 7 lanes: {call[cases[2][0]] / call[cases[3][0]]:.2f}x")
    print(f"padded / unpadded M=12: {call[cases[5][0]] / call[cases[4][0]]:.2f}x per call "
          f"(+{call[cases[5][0]] - call[cases[4][0]]:.2f} s a call) against {compile_s:.2f} s of compilation a program")
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
