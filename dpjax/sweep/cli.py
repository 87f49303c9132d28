"""``dpjax sweep CONFIG --out DIR`` and ``dpjax plot DIR``.

``dpjax sweep`` resumes by default: finished chunks in DIR are skipped. Several
hosts can share one DIR (on a shared file system) with ``--process-index i
--process-count P``: process i computes chunks i, i+P, i+2P, ... Inside one
host the runs are sharded over all local devices (``shard_map``). JAX's
multi-process runtime (``jax.distributed.initialize()``) is not required for
this: chunks are independent programs, so each host runs its own share.
"""

from __future__ import annotations

import argparse
import pathlib
import sys


def _sweep(args) -> int:
    from dpjax.sweep.config import SweepConfig
    from dpjax.sweep.driver import run_sweep

    path = pathlib.Path(args.config)
    cfg = SweepConfig.from_toml(path)
    if args.chunk_size is not None or args.vmap_width is not None:
        import dataclasses

        cfg = dataclasses.replace(cfg, chunk_size=args.chunk_size or cfg.chunk_size,
                                  vmap_width=args.vmap_width or cfg.vmap_width)
    res = run_sweep(
        cfg, args.out, source_text=path.read_text(), progress=not args.no_progress,
        process_index=args.process_index, process_count=args.process_count, max_chunks=args.max_chunks,
        sleep_between_chunks=args.sleep_between_chunks,
    )
    print(
        f"sweep {cfg.name}: computed {len(res.computed_chunks)} chunk(s), skipped {res.skipped_chunks} finished, "
        f"{len(res.runs)} runs stored of {res.total_chunks} chunks' worth in {args.out} ({res.seconds:.1f} s)"
    )
    return 0


def _plot(args) -> int:
    from dpjax.sweep.plot import plot_store

    out = plot_store(
        args.store, x=args.x, select_over=args.select_over, criterion=args.criterion, metric=args.metric,
        lines=args.lines, out=args.out, percentiles=(args.lo, args.hi), title=args.title, logx=args.logx,
    )
    print(f"figure written to {out}")
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("sweep", help="run (or resume) a hyperparameter sweep as compiled chunks",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="sweep config (TOML)")
    p.add_argument("--out", required=True, help="sweep directory (created; resumed if it exists)")
    p.add_argument("--chunk-size", type=int, default=None, help="runs per stored chunk (default: automatic)")
    p.add_argument("--vmap-width", type=int, default=None, help="runs computed simultaneously (default: automatic)")
    p.add_argument("--process-index", type=int, default=0, help="this host's index when several share --out")
    p.add_argument("--process-count", type=int, default=1, help="number of hosts sharing --out")
    p.add_argument("--max-chunks", type=int, default=None, help="stop after this many chunks (resume later)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--sleep-between-chunks", type=float, default=0.0, help=argparse.SUPPRESS)
    p.set_defaults(func=_sweep)

    q = subparsers.add_parser("plot", help="paper-style figure from a sweep directory")
    q.add_argument("store", help="sweep directory")
    q.add_argument("--x", default="epsilon", help="x-axis column (default epsilon)")
    q.add_argument("--select-over", default="learning_rate",
                   help="column tuned per (x, line, trial) by the mean criterion over repetitions ('' for none)")
    q.add_argument("--criterion", default="train_loss", help="selection metric, minimised (default train_loss)")
    q.add_argument("--metric", default="test_error", help="reported metric (default test_error)")
    q.add_argument("--lines", default=None, help="column giving one curve per value (default: the group's static fields)")
    q.add_argument("--lo", type=float, default=5.0, help="lower percentile of the error bars (default 5)")
    q.add_argument("--hi", type=float, default=95.0, help="upper percentile of the error bars (default 95)")
    q.add_argument("--title", default=None)
    q.add_argument("--logx", action="store_true", help="log-scale x axis")
    q.add_argument("--out", default=None, help="output image (default STORE/figure.png)")
    q.set_defaults(func=_plot)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dpjax")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ValueError as err:
        print(f"dpjax: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
