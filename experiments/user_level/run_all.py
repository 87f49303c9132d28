"""Runs the user-level demonstrations D1-D9 and records their wall times.

    python experiments/user_level/run_all.py [--full] [--only NAME ...] [--out experiments/user_level/results]

Each figure goes to <out>/<figure>[-quick]/ (results.csv, PNG, report.md, meta.json); wall times are appended
to <out>/timings.csv.
"""

from __future__ import annotations

import argparse
import csv
import pathlib
import time

from dpjax import reproduce

FIGURES = ("user-level-tail", "user-level-deletion", "user-level-noise", "user-level-certificate",
           "user-level-convex-erm", "user-level-strongly-convex", "user-level-lower-bound", "user-level-phased-sco",
           "user-level-audit")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--full", action="store_true")
    p.add_argument("--only", nargs="*", default=list(FIGURES))
    p.add_argument("--out", default="experiments/user_level/results")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.only:
        fig = reproduce.get(name)
        target = out / f"{name}{'' if args.full else '-quick'}"
        start = time.perf_counter()
        report = fig.fn(target, quick=not args.full, seed=args.seed)
        wall = time.perf_counter() - start
        held = next(line for line in report.read_text().splitlines() if line.startswith("## Expected"))
        print(f"{name}: {wall:.1f} s; {held}")
        with open(out / "timings.csv", "a", newline="") as fh:
            csv.writer(fh).writerow([name, "full" if args.full else "quick", args.seed, f"{wall:.1f}", held])


if __name__ == "__main__":
    main()
