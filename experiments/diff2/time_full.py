"""Measures the cost of the FULL DIFF2 protocol on this machine and extrapolates.

Runs, per dataset, a slice of the full configuration grid on the full data for
a few rounds (after one warm-up call that compiles), and scales the measured
time per (run x round) to the paper's protocol:

    runs = (#GD + #DP-GD + #DIFF2-GD) per seed, 5 seeds, R = 2000.

Usage: python experiments/diff2/time_full.py [--rounds 20] [--configs 16] [--datasets ...]
Writes experiments/diff2/full_timing.json and prints a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import time

from dpjax.reproduce import diff2 as rep

EPS = {"california_housing": (3.0, 5.0), "gas_turbine": (3.0, 5.0), "blogfeedback": (3.0, 5.0),
       "kddcup99": (3.0,), "a9a": (3.0,)}


def _key(c):
    """A configuration without its noise multipliers (those depend on n_min)."""
    return (c.algorithm, c.epsilon, c.restart_interval, c.clip_restart, c.clip_diff, c.learning_rate)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--configs", type=int, default=16)
    ap.add_argument("--datasets", nargs="*", default=list(EPS))
    ap.add_argument("--out", default=str(pathlib.Path(__file__).with_name("full_timing.json")))
    args = ap.parse_args()
    out = {}
    for name in args.datasets:
        proto = dataclasses.replace(rep.FULL, num_rounds=args.rounds, eval_every=args.rounds, seeds=(0,))
        full_cfgs = rep.build_configs(rep.FULL, EPS[name], 1000)
        # the slice: the first DIFF2-GD configurations (the expensive kind; all share one program),
        # taken from the grid at the measured R (restart intervals T scale with R)
        wanted = {_key(c) for c in rep.build_configs(proto, EPS[name], 1000) if c.algorithm == "DIFF2-GD"}
        wanted = set(sorted(wanted, key=str)[: args.configs])
        flt = lambda c, wanted=wanted: _key(c) in wanted  # noqa: E731
        t0 = time.time()
        rep.run_dataset(name, proto, EPS[name], seeds=(0,), log=lambda *_: None, config_filter=flt)
        first = time.time() - t0
        t0 = time.time()
        res = rep.run_dataset(name, proto, EPS[name], seeds=(0,), log=lambda *_: None, config_filter=flt)
        warm = time.time() - t0
        n_runs = len(res["configs"])
        per_run_round = warm / (n_runs * args.rounds)
        total_runs = len(full_cfgs) * len(rep.FULL.seeds)
        est = per_run_round * total_runs * rep.FULL.num_rounds
        out[name] = {
            "n_train": res["meta"]["n_train"], "n_params": res["meta"]["n_params"],
            "measured_runs": n_runs, "measured_rounds": args.rounds, "first_call_s": first, "warm_call_s": warm,
            "s_per_run_round": per_run_round, "full_runs": total_runs, "full_rounds": rep.FULL.num_rounds,
            "estimated_full_s": est, "estimated_full_h": est / 3600,
        }
        print(f"{name}: n_train={out[name]['n_train']} d={out[name]['n_params']} "
              f"{per_run_round * 1e3:.2f} ms/run-round -> full protocol ~{est / 3600:.1f} h "
              f"({total_runs} runs x {rep.FULL.num_rounds} rounds)", flush=True)
    pathlib.Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
