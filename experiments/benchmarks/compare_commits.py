"""Before/after timing of a refactor: one benchmark script from two commits, interleaved.

On a shared machine two benchmark runs minutes apart see different loads, so a
before/after comparison from separate runs is noise. This script checks out
both commits into temporary worktrees and runs each commit's own copy of a
benchmark alternately (A B A B ...), each in a fresh process with its own
``PYTHONPATH``, parses the numbers it prints, and reports per-metric medians
and the median of the paired ratios after/before (each pair ran back to back,
so a load change between pairs cancels in its ratio).

Benchmarks understood (the parsers below read their printed tables):

* ``round_step``: ``bench_round_step.py`` -- private / non-private rounds/s
  per setting and mode (single configuration, vmapped grid); higher is better.
* ``sweep_fig4``: ``bench_sweep_fig4.py`` -- the compiled grid's wall time for
  the ISRL Fig. 4 protocol (``[grid ]`` line, end to end); lower is better.
* ``dp_step``: ``bench_dp_step.py`` -- ms per step of every row of the MLP and CNN tables (private
  ghost, non-private, vmap(grad), ...); lower is better.

Issue #10 (the composable round steps) may not slow the engine down: run

    python experiments/benchmarks/compare_commits.py --before cf1ff84 --after HEAD --bench round_step --pairs 3

and read the ratio column (1.00 = unchanged).

Measured 2026-11-24 on the quiet 2-core CPU (load average 0.3-1), cf1ff84 (before the composable
round steps) against main after issue #10's pipeline work, ``--pairs 2 -- --rounds 100 --repeats 2``:

| metric (rounds/s; grid = 32 configurations vmapped) | before | after | ratio | per pair |
|---|---|---|---|---|
| mnist-fig4 single private | 1238.9 | 1239.3 | 1.001 | 0.98 1.02 |
| mnist-fig4 single non-private | 1195.3 | 1238.5 | 1.037 | 1.00 1.07 |
| mnist-fig4 grid private | 19742.6 | 20784.3 | 1.059 | 0.97 1.15 |
| mnist-fig4 grid non-private | 24083.2 | 20908.7 | 0.868 | 0.85 0.88 |
| wide single private | 212.6 | 215.9 | 1.015 | 1.03 1.00 |
| wide single non-private | 214.3 | 211.4 | 0.987 | 0.96 1.02 |
| wide grid private | 3378.3 | 3268.4 | 0.968 | 0.98 0.95 |
| wide grid non-private | 3338.9 | 3444.3 | 1.032 | 1.04 1.02 |

The private rounds are unchanged within the pair-to-pair spread (0.97-1.06). One row moved in both
pairs: the non-private twin on the Fig. 4 grid is 13 % slower, because it now runs the private
family's own code path with the noise and clipping switched off instead of a separate ``jax.grad``
path (the issue's "one non-private twin mechanism"); the private/non-private ratio there is now 0.99.

The whole Fig. 4 protocol through the sweep executor (``--bench sweep_fig4``: ``dpjax.sweep.run_sweep``
end to end, data splits, calibration, compilation and the results store included), cf1ff84 against
bb79b58 on the same machine (load 0.3-3.8: two other developers at work; interleaving cancels most of it):

| run | before (median s) | after (median s) | ratio | per pair |
|---|---|---|---|---|
| 2 trials (360 runs), ``--pairs 4`` | 6.5 | 6.7 | 1.04 | 0.88 1.08 1.08 1.00 |
| 20 trials (3,600 runs), ``--pairs 3 -- --trials 20 --loop-sample 1`` | 18.2 | 12.7 | 0.81 | 0.97 0.70 0.81 |

No regression: the spread between pairs is larger than any difference between the commits.

Issue #24 (the composed round from stateful parts), measured 2026-11-26: 4530b5b (before its core) against
e35cdb3, ``--pairs 2``; round_step and sweep_fig4 on the quiet 2-core CPU (load 1-3), dp_step while
another job ran (its pairs spread 0.5-1.7, read only the medians):

| benchmark | after / before (median of pairs) | per pair |
|---|---|---|
| round_step mnist-fig4 single private / non-private (rounds/s) | 0.907 / 0.912 | 0.91 0.90 / 0.92 0.91 |
| round_step mnist-fig4 grid private / non-private | 0.916 / 0.927 | 0.92 0.91 / 0.91 0.94 |
| round_step wide single private / non-private | 1.006 / 1.003 | 1.00 1.01 / 1.00 1.00 |
| round_step wide grid private / non-private | 0.949 / 0.951 | 0.93 0.97 / 0.92 0.99 |
| sweep_fig4 whole protocol (s, lower is better) | 1.009 (5.8 -> 5.9 s) | 0.98 1.03 |
| dp_step mlp / cnn private (ms, lower is better) | 0.914 / 0.937 | |

The Fig. 4-shaped round (the smallest: N 25, M 12, K 444, d 50) is 9 % slower in both pairs, private
and non-private alike: a fixed per-round cost of the composed round, which the larger wide round and the
whole protocol (compilation, data, store) do not show.

The cause was the unrolled Threefry noise fused into the update (it waited for the gradient instead of
running beside it). With draws under ``noise.FAST_PATH_MIN_SIZE`` back on ``jax.random.normal`` (the same
numbers), measured 2026-11-26 on the idle 2-core CPU (load 1-2), ``--bench round_step --pairs 2``:

| metric (rounds/s) | 4530b5b (before #24) -> fix | per pair | main before the fix -> fix | per pair |
|---|---|---|---|---|
| mnist-fig4 single private | 1.002 | 1.03 0.98 | 1.095 | 1.15 1.04 |
| mnist-fig4 single non-private | 0.989 | 1.00 0.98 | 1.104 | 1.16 1.05 |
| mnist-fig4 grid private | 0.952 | 0.93 0.97 | 1.005 | 0.94 1.07 |
| mnist-fig4 grid non-private | 1.011 | 1.08 0.95 | 0.983 | 0.98 0.98 |
| wide single private / non-private | 0.975 / 0.978 | 1.04 0.91 / 1.06 0.90 | 1.002 / 0.999 | |
| wide grid private / non-private | 0.984 / 0.971 | 1.02 0.95 / 0.98 0.97 | 1.057 / 1.020 | |

The single Fig. 4 round is back to its pre-#24 speed (1.00 / 0.99, from 0.91); every row is within its
pair-to-pair spread of 1.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]

BENCHES = {
    "round_step": ("experiments/benchmarks/bench_round_step.py", ["--rounds", "200", "--grid", "32", "--repeats", "3"]),
    "sweep_fig4": ("experiments/benchmarks/bench_sweep_fig4.py", ["--trials", "2", "--loop-sample", "1"]),
    "dp_step": ("experiments/benchmarks/bench_dp_step.py", ["--models", "mlp", "cnn", "--repeats", "20"]),
}


def parse_round_step(text: str) -> dict[str, float]:
    """``setting mode private non-priv numpy ...`` rows -> {"mnist-fig4 single private": rounds/s, ...}."""
    out = {}
    for m in re.finditer(r"^(\S+)\s+(single|grid)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", text, re.M):
        setting, mode, priv, nonpriv = m.group(1), m.group(2), float(m.group(3)), float(m.group(4))
        out[f"{setting} {mode} private (rounds/s)"] = priv
        out[f"{setting} {mode} non-private (rounds/s)"] = nonpriv
    return out


def parse_sweep_fig4(text: str) -> dict[str, float]:
    m = re.search(r"^\[grid \]\s+([\d.]+) s", text, re.M)
    return {"compiled grid wall (s)": float(m.group(1))} if m else {}


def parse_dp_step(text: str) -> dict[str, float]:
    """``bench_dp_step.py``'s per-model tables: a ``NAME (N params)`` header, then ``  label  ms  ratio x ...``
    rows -> {"mlp private (ghost) (ms)": ms, ...}."""
    out, model = {}, None
    for line in text.splitlines():
        header = re.match(r"^(\S+) \(\d+ params\)", line)
        if header:
            model = header.group(1)
            continue
        row = re.match(r"^  (\S.*?)\s{2,}([\d.]+)\s+[\d.]+x", line)
        if model and row:
            out[f"{model} {row.group(1)} (ms)"] = float(row.group(2))
    return out


PARSERS = {"round_step": parse_round_step, "sweep_fig4": parse_sweep_fig4, "dp_step": parse_dp_step}
HIGHER_IS_BETTER = {"round_step": True, "sweep_fig4": False, "dp_step": False}


def run_once(tree: pathlib.Path, bench: str, extra: list[str]) -> dict[str, float]:
    script, args = BENCHES[bench]
    env = {**os.environ, "PYTHONPATH": str(tree), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    proc = subprocess.run([sys.executable, str(tree / script), *args, *extra], cwd=tree, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{bench} failed in {tree}:\n{proc.stderr[-2000:]}")
    values = PARSERS[bench](proc.stdout)
    if not values:
        raise SystemExit(f"could not parse {bench}'s output in {tree}:\n{proc.stdout[-2000:]}")
    return values


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="cf1ff84")
    ap.add_argument("--after", default="HEAD")
    ap.add_argument("--bench", choices=sorted(BENCHES), default="round_step")
    ap.add_argument("--pairs", type=int, default=3, help="A/B pairs (each pair runs before then after, alternating order)")
    ap.add_argument("extra", nargs="*", help="arguments passed on to the benchmark (after --)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for label, rev in (("before", args.before), ("after", args.after)):
            path = pathlib.Path(tmp) / label
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), rev], check=True)
            trees[label] = path
        # tests read ../shared/data relative to a checkout; the benchmarks find MNIST through it too
        shared = ROOT.parent / "shared"
        if shared.exists() and not (pathlib.Path(tmp) / "shared").exists():
            (pathlib.Path(tmp) / "shared").symlink_to(shared)
        try:
            results = {"before": [], "after": []}
            for i in range(args.pairs):
                order = ("before", "after") if i % 2 == 0 else ("after", "before")
                for label in order:
                    results[label].append(run_once(trees[label], args.bench, args.extra))
                    print(f"pair {i + 1}/{args.pairs}: {label} done", file=sys.stderr, flush=True)
        finally:
            for path in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False)
    keys = [k for k in results["before"][0] if all(k in r for r in results["before"] + results["after"])]
    better = "higher" if HIGHER_IS_BETTER[args.bench] else "lower"
    print(f"{args.bench}: before = {args.before}, after = {args.after}, {args.pairs} interleaved pairs "
          f"({better} is better); ratio = median over pairs of after/before")
    print(f"{'metric':42s} {'before (median)':>16s} {'after (median)':>15s} {'ratio':>7s}  per-pair ratios")
    for k in keys:
        b = [r[k] for r in results["before"]]
        a = [r[k] for r in results["after"]]
        ratios = [x / y for x, y in zip(a, b)]
        print(f"{k:42s} {statistics.median(b):16.1f} {statistics.median(a):15.1f} {statistics.median(ratios):7.3f}  "
              + " ".join(f"{r:.2f}" for r in ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
