"""Wall time of the full ISRL-DP protocols, measured on a fraction and extrapolated.

    python experiments/isrl/time_full.py isrl-mnist [--settings 1] [--trials 2]

Runs the *full* protocol of a figure (all epsilons, step sizes, clips,
repetitions) for the first ``--settings`` (N, M) settings and ``--trials``
trials, and extrapolates to all settings x trials: the first trial-setting
carries compilation and noise calibration, the later ones are steady state,
so ``total ~ first + (settings_full * trials_full - 1) * mean(later)`` (an
upper-ish estimate: other settings compile once more each). Writes
``<out>/timing.json`` and prints it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import time

from dpjax.reproduce import isrl

EXPERIMENTS = {
    "isrl-mnist": (isrl.config.mnist_experiment, isrl.config.mnist_task),
    "isrl-insurance": (isrl.config.insurance_experiment, isrl.config.insurance_task),
    "isrl-obesity": (isrl.config.obesity_experiment, isrl.config.obesity_task),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("figure", choices=sorted(EXPERIMENTS))
    ap.add_argument("--settings", type=int, default=1)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--out", default="experiments/isrl/results/timing")
    args = ap.parse_args(argv)
    exp_fn, task_fn = EXPERIMENTS[args.figure]
    full = exp_fn(False)
    part = dataclasses.replace(full, settings=full.settings[: args.settings], trials=min(args.trials, full.trials))
    times: list[float] = []

    def log(line: str) -> None:
        print(line, flush=True)
        m = re.search(r": ([0-9.]+) s$", line)
        if m:
            times.append(float(m.group(1)))

    start = time.perf_counter()
    task = task_fn()
    setup = time.perf_counter() - start
    isrl.driver.run_experiment(part, task, seed=0, log=log)
    measured = time.perf_counter() - start
    steady = sum(times[1:]) / max(1, len(times) - 1) if len(times) > 1 else times[0]
    units = len(full.settings) * full.trials
    estimate = setup + times[0] + (units - 1) * steady
    out = {"figure": args.figure, "measured_settings": [s.label for s in part.settings], "measured_trials": part.trials,
           "setup_s": setup, "trial_setting_times_s": times, "measured_total_s": measured,
           "full_settings": len(full.settings), "full_trials": full.trials,
           "extrapolated_full_s": estimate, "extrapolated_full_h": estimate / 3600}
    path = pathlib.Path(args.out)
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{args.figure}.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
