"""Where a whole reproduction's wall time goes: tracing, lowering and XLA compilation against the rest.

Issue 25, item 2 asks, for every CPU-feasible full protocol, how far its time is from its floor. For
figures made of many small compiled programs (one per grid cell shape: the user-level rate figures,
shuffle-sco's points) the arithmetic floor says little, because compiling the programs is a large part of
the run. This script runs each named reproduction as a plain ``dpjax reproduce`` in a fresh process
(nothing cached, like a user's first run) with JAX's compile-time listeners attached
(``jax.monitoring``: ``/jax/core/compile/jaxpr_trace_duration``, ``jaxpr_to_mlir_module_duration``,
``backend_compile_duration``) and prints one row per figure:

* wall and process CPU seconds of the reproduction (its ``run`` call, imports excluded);
* tracing, lowering (jaxpr -> MLIR) and XLA backend compilation: seconds and number of events;
* ``rest``: wall minus those three (running the compiled programs, dispatch and host Python).

Compilation is single-threaded here while programs use both cores, so ``compile / wall`` is the share
of the wall a second core cannot help. Rows are printed as they finish; ``--csv`` also writes them.

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu python experiments/benchmarks/figure_time_split.py \\
        user-level-convex-erm user-level-phased-sco [--quick] [--csv out.csv] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

EVENTS = {"trace": "/jax/core/compile/jaxpr_trace_duration",
          "lower": "/jax/core/compile/jaxpr_to_mlir_module_duration",
          "compile": "/jax/core/compile/backend_compile_duration"}


def _child(name: str, quick: bool, out_dir: str, data_dir: str | None = None) -> dict:
    """Runs one reproduction in this process with the listeners attached; returns the row."""
    import resource
    import time

    import jax.monitoring

    from dpjax.cli import main

    totals = {k: [0.0, 0] for k in EVENTS}
    by_event = {v: k for k, v in EVENTS.items()}

    def listener(event, duration, **_):
        if event in by_event:
            totals[by_event[event]][0] += duration
            totals[by_event[event]][1] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    status = main(["reproduce", name, "--quiet", "--out", out_dir] + (["--quick"] if quick else [])
                  + (["--data-dir", data_dir] if data_dir else []))
    wall = time.perf_counter() - t0
    if status:  # the CLI printed its one-line reason on stderr
        raise SystemExit(status)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    row = {"figure": name, "protocol": "quick" if quick else "full", "wall_s": round(wall, 2),
           "cpu_s": round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 2)}
    for k, (secs, count) in totals.items():
        row[f"{k}_s"], row[f"{k}_events"] = round(secs, 2), count
    row["rest_s"] = round(wall - sum(v[0] for v in totals.values()), 2)
    row["load_end"] = os.getloadavg()[0]
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("figures", nargs="+", help="names from `dpjax reproduce --list`")
    ap.add_argument("--quick", action="store_true", help="the --quick protocols (default: full)")
    ap.add_argument("--csv", help="also write the rows here")
    ap.add_argument("--data-dir", help="passed to the figures (the ISRL ones read datasets)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:  # one figure in this fresh process; the row goes back as JSON on the last line
        print(json.dumps(_child(args.figures[0], args.quick, args.child, args.data_dir)))
        return
    rows = []
    header = ("figure", "protocol", "wall s", "CPU s", "trace s (n)", "lower s (n)", "XLA compile s (n)",
              "compile share", "rest s")
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header), flush=True)
    for name in args.figures:
        with tempfile.TemporaryDirectory() as tmp:
            load0 = os.getloadavg()[0]
            proc = subprocess.run([sys.executable, __file__, name, "--child", os.path.join(tmp, "out")]
                                  + (["--quick"] if args.quick else [])
                                  + (["--data-dir", args.data_dir] if args.data_dir else []),
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"| {name} | failed: {proc.stderr.strip().splitlines()[-1:]} |", flush=True)
                continue
            row = dict(json.loads(proc.stdout.strip().splitlines()[-1]), load_start=load0)
        rows.append(row)
        spent = row["trace_s"] + row["lower_s"] + row["compile_s"]
        print(f"| {row['figure']} | {row['protocol']} | {row['wall_s']:.1f} | {row['cpu_s']:.1f} | "
              f"{row['trace_s']:.1f} ({row['trace_events']}) | {row['lower_s']:.1f} ({row['lower_events']}) | "
              f"{row['compile_s']:.1f} ({row['compile_events']}) | {spent / row['wall_s']:.0%} | "
              f"{row['rest_s']:.1f} |", flush=True)
    if args.csv and rows:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
