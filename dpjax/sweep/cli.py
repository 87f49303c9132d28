"""``dpjax sweep CONFIG --out DIR`` and ``dpjax plot DIR``.

``dpjax sweep`` resumes by default: finished chunks in DIR are skipped. Inside
one process the runs are sharded over all local devices (``shard_map``).
Several processes (hosts) can share one DIR (on a shared file system):

* ``--distributed``: JAX's multi-process runtime. Every process runs the same
  command (plus ``--coordinator HOST:PORT --num-processes P --process-id I``
  unless JAX detects them: ``JAX_COORDINATOR_ADDRESS``, SLURM, Open MPI,
  Kubernetes, Cloud TPU); each takes its share from ``jax.process_index()``
  and ``jax.process_count()``.
* ``--process-index i --process-count P``: the same split without the runtime.

Either way process i computes chunks i, i+P, i+2P, ... and the directory ends
up bit-identical to a single-process sweep. See ``dpjax.sweep.multihost``
for a multi-host recipe.

One run too large for a device: ``--silo-devices N|all`` (or the config's
``[run] silo_devices``) splits each run's silos over N local devices, one
chunk at a time on all of them; with ``--distributed --silo-devices all`` over
every process's devices (every process computes each chunk, process 0 stores
it). ``--silo-compute exact`` (default) stores the unsharded sweep's bits.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

LEADER_WAIT = 3600  # s: processes > 0 wait this long for process 0 to write config.json (it may compile first)


def _share(args) -> tuple[int, int, bool]:
    """``(process_index, process_count, distributed)`` from the flags; joins JAX's runtime with --distributed.

    Runs before anything else touches JAX (``jax.distributed.initialize`` must).
    """
    from dpjax.sweep import multihost
    if args.distributed:
        for k in ("process_index", "process_count"):
            if getattr(args, k) is not None:
                raise ValueError(f"--{k.replace('_', '-')} and --distributed are exclusive: with --distributed the "
                                 "process index and count come from JAX (jax.process_index(), jax.process_count())")
        return (*multihost.join_runtime(args), True)
    multihost.join_runtime(args)  # refuses a runtime flag without --distributed
    index = 0 if args.process_index is None else args.process_index
    count = 1 if args.process_count is None else args.process_count
    return index, count, False


def precheck_flags(args, raw: dict) -> None:
    """The command line's checks that need no jax, run before it loads (tens of seconds on a loaded machine): the
    sizes, this process's share, the silo layout over the config's ``[run]`` table (the messages
    ``SweepConfig``/``run_sweep`` give later). ``raw``: the config file's table, already ``precheck``ed."""
    from dpjax import _validate as v
    from dpjax.sweep.config import check_run_table

    for k in ("chunk_size", "vmap_width", "max_chunks"):  # 0 or less is refused, never "automatic" or "nothing"
        if getattr(args, k) is not None:
            v.check_int(k, getattr(args, k), min_value=1)
    if getattr(args, "max_data_mb", None) is not None:
        v.check_positive("max_data_mb", args.max_data_mb)
    out = getattr(args, "out", None)
    if out is not None and pathlib.Path(out).exists() and not pathlib.Path(out).is_dir():
        raise ValueError(f"out={str(out)!r} is a file, not a directory; choose a directory path")
    if not args.distributed:  # with --distributed the share comes from JAX (and _share refuses these flags)
        count = 1 if args.process_count is None else v.check_int("process_count", args.process_count, min_value=1)
        if args.process_index is not None:
            v.check_int("process_index", args.process_index, min_value=0)
            if args.process_index >= count:
                raise ValueError(f"process_index={args.process_index} must be < process_count={count} (--process-"
                                 f"count{'' if args.process_count is not None else ', default 1'}): process i of P "
                                 "computes chunks i, i+P, ...")
    flags = {k: getattr(args, k) for k in ("silo_devices", "silo_compute", "silo_block")
             if getattr(args, k) is not None}
    table = raw.get("run") if isinstance(raw.get("run"), dict) else {}
    run = check_run_table({**table, **flags})  # the messages SweepConfig gives the merged table
    block, silos = run.get("silo_block"), (raw.get("data") or {}).get("num_silos")
    if block is not None and isinstance(silos, int) and not isinstance(silos, bool) and block > silos:
        raise ValueError(f"run.silo_block={block} is more than the data's {silos} silos (data.num_silos): a block is "
                         "at most the silos of one device")
    if not args.distributed:  # (with --distributed a number may count every process's devices)
        from dpjax import _silo_flags
        _silo_flags.check_host_devices(run.get("silo_devices"), "run.silo_devices")


#: The sweep configs shipped inside the package (``dpjax sweep NAME`` runs one from any directory).
CONFIGS_DIR = pathlib.Path(__file__).resolve().parent / "configs"


def packaged_configs() -> dict[str, pathlib.Path]:
    """``{name: path}`` of the packaged sweep configs (the file name without ``.toml``)."""
    return {p.stem: p for p in sorted(CONFIGS_DIR.glob("*.toml"))}


def describe_config(path: pathlib.Path) -> str:
    """A config's one-line description: the first line of its leading comment, without trailing punctuation."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text:
            return text.split(": ")[0].rstrip(",;:")
    return "(no description: the file starts without a comment)"


def listing_lines() -> list[str]:
    """``dpjax sweep --list``: one line per packaged config, its name and description."""
    configs = packaged_configs()
    width = max(map(len, configs), default=0)
    return [f"{name:{width}s}  {describe_config(path)}" for name, path in configs.items()]


def algorithm_lines() -> list[str]:
    """``dpjax sweep --algorithms``: one line per name a config's ``algorithm =`` takes, with its class and the registry
    entry's description (``dpjax.list_algorithms()``; no jax imported)."""
    import dpjax
    listed = dpjax.list_algorithms()
    width = max(map(len, listed), default=0)
    return [f"{name:{width}s}  {line}" for name, line in listed.items()]


def resolve_config(config: str) -> pathlib.Path:
    """``config`` as a file if one exists there, else the packaged config of that name (``.toml`` optional).

    Paths keep working; a name works from any directory. Anything else is a ``ValueError`` naming the packaged configs.
    """
    path = pathlib.Path(config)
    if path.is_file():
        return path
    configs = packaged_configs()
    name = path.name[:-len(".toml")] if path.name.endswith(".toml") else path.name
    if path.parent == pathlib.Path(".") and name in configs:  # a bare name, not a missing path
        return configs[name]
    if path.exists():
        raise ValueError(f"config={config!r} is a directory, not a sweep config (TOML file)")
    what = ("is neither a file nor a packaged config" if path.parent == pathlib.Path(".")
            else "does not exist (no such file)")
    hint = (f"; the packaged config {name!r} is run by name from any directory: `dpjax sweep {name}`"
            if name in configs else "")
    raise ValueError(f"config={config!r} {what}{hint}; packaged configs: {', '.join(configs) or 'none'} "
                     "(`dpjax sweep --list` describes them)")


def show_config(name: str) -> str:
    """``dpjax sweep --show NAME``: the text of a packaged config (or of a config file), to read or to copy
    (``dpjax sweep --show dp_ftrl_tree > my.toml``)."""
    configs = packaged_configs()
    if not name.strip():
        raise ValueError(f"--show={name!r} is empty: give a packaged config's name (one of {', '.join(configs)}) "
                         "or a config file")
    if pathlib.Path(name).is_dir():
        raise ValueError(f"--show={name!r} is a directory: give a packaged config's name (`dpjax sweep --list`) or "
                         "a config file (TOML)")
    return resolve_config(name).read_text(encoding="utf-8")


def _sweep(args) -> int:
    listings = [f for f, on in (("--list", args.list), ("--algorithms", args.algorithms),
                                ("--show", args.show is not None)) if on]
    if listings:
        if len(listings) > 1:
            raise ValueError(f"{' and '.join(listings)} are exclusive: give one listing")
        if args.config is not None:
            raise ValueError(f"{listings[0]} takes no CONFIG (got {args.config!r})")
        if args.out is not None:  # a listing writes nothing: --out would be silently ignored
            raise ValueError(f"{listings[0]} with --out={args.out!r}: a listing prints and writes no sweep directory; "
                             f"to run a config give CONFIG --out DIR")
        if args.show is not None:
            print(show_config(args.show), end="")
            return 0
        print("\n".join(listing_lines() if args.list else algorithm_lines()))
        return 0
    if args.config is None:
        raise ValueError("give a CONFIG: a sweep config file or the name of a packaged one (`dpjax sweep --list`)")
    path = resolve_config(args.config)  # before jax is imported or anything is written
    if args.out is None:
        raise ValueError("the following arguments are required: --out (the sweep directory: created, resumed if "
                         "it exists)")
    from dpjax.sweep.config import SweepConfig, precheck
    raw = SweepConfig.read_toml(path)
    precheck(raw, max_runs=args.max_runs)  # every jax-free check, before jax loads
    precheck_flags(args, raw)
    from dpjax import progress
    progress.configure(quiet=args.quiet)
    progress.stage(f"sweep {args.config}: loading jax and the families, reading {path}")
    index, count, distributed = _share(args)
    from dpjax.sweep import multihost
    from dpjax.sweep.driver import run_sweep
    import dataclasses
    from dpjax.sweep import datasets
    cfg = SweepConfig.from_toml(path, max_runs=args.max_runs, max_data_mb=args.max_data_mb)
    if args.chunk_size is not None or args.vmap_width is not None:  # 0 or less is refused, never "automatic"
        cfg = dataclasses.replace(cfg, chunk_size=cfg.chunk_size if args.chunk_size is None else args.chunk_size,
                                  vmap_width=cfg.vmap_width if args.vmap_width is None else args.vmap_width)
    flags = {k: getattr(args, k) for k in ("silo_devices", "silo_compute", "silo_block")
             if getattr(args, k) is not None}
    if flags:  # over the config's [run] table (checked as one: SweepConfig)
        cfg = dataclasses.replace(cfg, run={**cfg.run, **flags})
    if args.data_dir is not None:
        if "data_dir" not in datasets.get_dataset(cfg.data["name"]).defaults:
            raise ValueError(f"--data-dir={args.data_dir!r}: dataset {cfg.data['name']!r} reads no files")
        cfg = dataclasses.replace(cfg, data={**cfg.data, "data_dir": args.data_dir})
    res = run_sweep(cfg, args.out, source_text=path.read_text(), progress=not (args.no_progress or args.quiet),
                    process_index=index, process_count=count, max_chunks=args.max_chunks,
                    sleep_between_chunks=args.sleep_between_chunks,
                    wait_for_config=LEADER_WAIT if distributed else None)
    who = f" (process {index} of {count})" if count > 1 else ""
    print(
        f"sweep {cfg.name}{who}: computed {len(res.computed_chunks)} chunk(s), skipped {res.skipped_chunks} finished, "
        f"{len(res.runs)} runs stored of {res.total_chunks} chunks' worth in {args.out} ({res.seconds:.1f} s)",
        flush=True)
    if distributed:
        multihost.finish()  # barrier: every process has stored its chunks
        from dpjax.sweep.store import Store
        done = len(Store(args.out).finished_chunks())
        print(f"sweep {cfg.name}: all {count} processes finished; {args.out} holds {done} of {res.total_chunks} chunks")
    return 0


def _plot(args) -> int:
    from dpjax import progress
    progress.configure(quiet=args.quiet)
    progress.stage(f"plot {args.store}: loading the sweep's results")
    from dpjax.sweep.plot import completeness, plot_store
    out = plot_store(args.store, x=args.x, select_over=args.select_over, criterion=args.criterion, metric=args.metric,
                     lines=args.lines, out=args.out, percentiles=(args.lo, args.hi), title=args.title, logx=args.logx,
                     partial=args.partial, reference=args.reference, bars=args.bars)
    done = completeness(args.store)
    note = f" (partial: {done[0]} of {done[1]} chunks)" if done is not None and done[0] < done[1] else ""
    print(f"figure written to {out}{note}")
    return 0


def add_parser(subparsers) -> None:
    from dpjax.sweep import config as config_lib  # jax-free: its docstring is the file layout
    layout = config_lib.__doc__.split("\n\n", 1)[1]
    p = subparsers.add_parser("sweep", help="run (or resume) a hyperparameter sweep as compiled chunks",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog="The config file (TOML), as `dpjax sweep --show NAME` prints a packaged one:\n\n"
                                     + layout)
    p.add_argument("config", nargs="?", default=None, metavar="CONFIG",
                   help="sweep config: a TOML file, or the name of a packaged config (see --list)")
    p.add_argument("--list", action="store_true", help="list the packaged sweep configs with a line each")
    p.add_argument("--algorithms", action="store_true",
                   help="list the algorithms a config's `algorithm =` can name, with a line each")
    p.add_argument("--show", default=None, metavar="NAME",
                   help="print a packaged config's TOML (copy it: dpjax sweep --show NAME > my.toml)")
    p.add_argument("--out", default=None, help="sweep directory (created; resumed if it exists); required to run")
    p.add_argument("--chunk-size", type=int, default=None, help="runs per stored chunk (default: automatic)")
    p.add_argument("--vmap-width", type=int, default=None, help="runs computed simultaneously (default: automatic)")
    p.add_argument("--process-index", type=int, default=None,
                   help="this host's index when several share --out without --distributed (default 0)")
    p.add_argument("--process-count", type=int, default=None,
                   help="number of hosts sharing --out without --distributed (default 1)")
    from dpjax import _silo_flags
    from dpjax.sweep import multihost
    multihost.add_distributed_arguments(p, "the process index/count come from JAX")
    _silo_flags.add_arguments(p)
    p.add_argument("--data-dir", default=None,
                   help="directory holding the datasets (sets data.data_dir; default: the config's, then "
                        "$DPJAX_DATA_DIR, then ~/.cache/dpjax)")
    p.add_argument("--max-chunks", type=int, default=None, help="stop after this many chunks (resume later)")
    from dpjax import _validate as v
    p.add_argument("--max-runs", type=v.flag_type("--max-runs", v.parse_int), default=None,
                   help="refuse a grid of more runs (default: the config's max_runs, else 100,000)")
    p.add_argument("--max-data-mb", type=v.flag_type("--max-data-mb", float), default=None,
                   help="refuse a [data] table describing more float32 MiB (default: the config's max_data_mb, else 256)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no stage lines on stderr")
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
    scale = q.add_mutually_exclusive_group()
    scale.add_argument("--logx", action="store_const", const=True, default=None,
                       help="log-scale x axis (default: log when the x values span a decade or more)")
    scale.add_argument("--linear-x", dest="logx", action="store_const", const=False, help="linear x axis")
    q.add_argument("--out", default=None, help="output image (default STORE/figure.png)")
    q.add_argument("--reference", default=None, metavar="DIR",
                   help="another sweep directory (e.g. the non-private twin's) drawn as a dashed reference level")
    q.add_argument("--partial", action="store_true",
                   help="plot a sweep directory that holds only some of its chunks (refused otherwise)")
    q.add_argument("--bars", choices=("auto", "trials", "runs"), default="auto",
                   help="what the error bars spread over: trials, every run (trials x repetitions), or auto (trials "
                        "when there are several, else repetitions; default)")
    q.add_argument("--quiet", action="store_true", help="no stage lines on stderr")
    q.set_defaults(func=_plot)


def main(argv=None) -> int:
    from dpjax.cli import EXPECTED_ERRORS, one_line
    from dpjax.cli import ArgumentParser
    parser = ArgumentParser(prog="dpjax")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except EXPECTED_ERRORS as err:
        print(f"dpjax: error: {one_line(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
