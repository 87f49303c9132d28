"""``dpjax reproduce``: list and run paper-figure reproductions."""

from __future__ import annotations

import pathlib
import time

from dpjax import outputs, progress, reproduce


def _run(args) -> int:
    if args.list or not args.figure:
        print("\n".join(reproduce.listing_lines()))  # from the listing: no figure module, no jax
        return 0
    from dpjax import _validate

    _validate.check_seed("--seed", args.seed)  # before anything is loaded or claimed
    progress.configure(quiet=args.quiet)
    what = f"reproduce {args.figure}{' --quick' if args.quick else ''}"
    from dpjax import _silo_flags
    from dpjax.sweep import multihost
    if getattr(args, "report_only", False) and (_silo_flags.layout(args) or args.distributed):
        raise ValueError("--silo-devices/--silo-compute/--silo-block/--distributed with --report-only: a report "
                         "computes no run")
    if not reproduce.is_known(args.figure):
        # before any figure module (and jax) loads: LISTING names every figure of FIGURE_MODULES
        import difflib
        close = difflib.get_close_matches(args.figure, list(reproduce.LISTING), n=1)
        raise ValueError(f"figure={args.figure!r} is unknown" + (f" (did you mean {close[0]!r}?)" if close else "")
                         + "; `dpjax reproduce --list` shows the figures")
    chosen = _silo_flags.layout(args)  # the flags' consistency, then the runtime (before jax), then the devices
    if chosen and not args.distributed:
        _silo_flags.check_host_devices(chosen["silo_devices"], "--silo-devices")
    multihost.check_one_run_distributed(args, f"reproduce {args.figure}")
    if args.distributed:  # joining the runtime waits for the other processes: every flag is checked first
        _check_flags_before_loading(args)
    index, count = multihost.join_runtime(args)
    if not args.distributed:
        _check_flags_before_loading(args)
    progress.stage(f"{what}: loading the figure's code (jax, the figure module)")
    fig = reproduce.get(args.figure)
    if getattr(args, "report_only", False):
        return _report_only(fig, args)
    silo = _silo_flags.command_layout(args)  # the device count, before any output is claimed
    options = {}
    if args.construction is not None:
        if args.construction not in fig.constructions:
            raise ValueError(f"--construction={args.construction!r}: {fig.name} offers {fig.constructions}")
        options["construction"] = args.construction
    if fig.reads_data:
        options["data_dir"] = args.data_dir
    elif args.data_dir is not None:
        raise ValueError(f"--data-dir={args.data_dir!r}: {fig.name} is synthetic and reads no dataset")
    out = pathlib.Path(args.out or f"results/{fig.name}{'-quick' if args.quick else ''}"
                       f"{'-' + args.construction if args.construction and args.construction != 'paper' else ''}")
    identity = {"command": "reproduce", "figure": fig.name, "quick": args.quick, "seed": args.seed,
                "construction": args.construction or "paper"}
    start = time.perf_counter()
    with multihost.follower_output(index) as scratch:  # --distributed: processes > 0 write into a scratch dir
        target = out if scratch is None else pathlib.Path(scratch) / "out"
        target, created = outputs.claim_output_dir(target, identity, overwrite=args.overwrite)  # before any compute
        progress.stage(f"{what}: running into {target} (stage lines on stderr; --quiet silences them)")
        try:
            with progress.grid(fig.name):  # the grids the figure runs show a bar / stage lines
                with silo:  # --silo-devices: every grid the command runs shards its runs' silos
                    report = fig.fn(target, quick=args.quick, seed=args.seed, **options)
        except BaseException:
            outputs.release_output_dir(target, created)
            raise
        outputs.finish_output_dir(target, identity)
        multihost.leave_runtime()
    if index > 0:
        print(f"{fig.name}: process {index} of {count} done in {time.perf_counter() - start:.1f} s; process 0 "
              f"wrote {out}")
        return 0
    print(f"{fig.name}: done in {time.perf_counter() - start:.1f} s; report: {report}")
    return 0


def _check_flags_before_loading(args) -> None:
    """The checks that need only ``LISTING`` and the file system, before the figure's module (and jax) loads."""
    if getattr(args, "report_only", False):
        _check_kept_run(args)  # a wrong --out costs no import
        return
    constructions = reproduce.LISTING[args.figure][3] if args.figure in reproduce.LISTING else None
    if args.construction is not None and constructions is not None and args.construction not in constructions:
        raise ValueError(f"--construction={args.construction!r}: {args.figure} offers {constructions}")
    if args.data_dir is not None and not pathlib.Path(args.data_dir).is_dir():
        # no figure downloads into it (dpjax.data.download_* are explicit), so a missing one is always an error
        raise ValueError(f"--data-dir={args.data_dir!r} does not exist (or is not a directory): give the directory "
                         "holding the datasets (dpjax.data.download_mnist(DIR) fetches MNIST)")


def _check_kept_run(args) -> None:
    """``--report-only``'s checks of ``--out`` that need no figure module: a kept run's results.csv is there."""
    if args.out is None:
        raise ValueError("--report-only needs --out, the directory of the kept run")
    out = pathlib.Path(args.out)
    if not (out / "results.csv").is_file():
        what = " (it does not exist)" if not out.exists() else " (it is not a directory)" if not out.is_dir() else ""
        raise ValueError(f"--report-only: --out={args.out!r} holds no results.csv of a kept run{what}; --report-only "
                         f"rewrites the report of a kept run (run `dpjax reproduce {args.figure}"
                         f"{' --quick' if args.quick else ''} --out DIR` first)")


def _report_only(fig, args) -> int:
    """Rewrites the report of a kept run in --out (checked by ``_check_kept_run``) from its files (no compute)."""
    import json

    if fig.report_only is None:
        with_it = [f.name for f in reproduce.figures().values() if f.report_only is not None]
        raise ValueError(f"--report-only: {fig.name} cannot regenerate its report from kept results "
                         f"(figures that can: {', '.join(with_it) or 'none'})")
    out = pathlib.Path(args.out)
    record = out / outputs.RECORD
    if record.is_file():
        kept = json.loads(record.read_text())
        if kept.get("figure") != fig.name or bool(kept.get("quick")) != args.quick:
            raise ValueError(f"--out={args.out!r} holds a run of {kept.get('figure')} (quick={kept.get('quick')}), "
                             f"not {fig.name} (quick={args.quick})")
    report = fig.report_only(out, quick=args.quick)
    print(f"{fig.name}: report regenerated from kept results: {report}")
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("reproduce", help="reproduce a paper figure (see --list)")
    p.add_argument("figure", nargs="?", help="figure id, e.g. isrl-mnist")
    p.add_argument("--list", action="store_true", help="list the available figures")
    p.add_argument("--quick", action="store_true", help="small protocol that finishes in minutes on 2 CPU cores")
    p.add_argument("--out", help="output directory (default results/<figure>[-quick])")
    p.add_argument("--overwrite", action="store_true", help="replace a different earlier run's results in --out")
    p.add_argument("--data-dir", help="directory holding the datasets (default: $DPJAX_DATA_DIR, then ~/.cache/dpjax)")
    from dpjax import _validate as v

    p.add_argument("--seed", type=v.flag_type("--seed", v.parse_int), default=0,
                   help="base seed of the figure's runs and data splits (default 0)")
    p.add_argument("--report-only", action="store_true",
                   help="rewrite the report (claims table, verdicts, figure) of the kept run in --out from its files, "
                        "without re-running (figures that support it; give --quick for a quick run)")
    p.add_argument("--construction", choices=("paper", "authors"), default=None,
                   help="paper: the construction the paper's text describes (default); authors: what the authors' "
                        "public scripts do (figures that offer it: see --list)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress (stage lines and bars on stderr); the result line and errors still print")
    from dpjax import _silo_flags
    from dpjax.sweep import multihost
    _silo_flags.add_arguments(p)
    multihost.add_distributed_arguments(p, "with --silo-devices all the figure's runs span every process's "
                                             "devices (process 0 writes --out)")
    p.set_defaults(func=_run)
