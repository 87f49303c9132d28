"""``dpjax run <task>``."""

from __future__ import annotations

import datetime
import json
import pathlib


def _run_isrl_mnist(args) -> int:
    from dpjax import _validate
    from dpjax.tasks import isrl_mnist

    _validate.check_seed("--seed", args.seed)  # before anything is loaded
    from dpjax import _silo_flags
    from dpjax.sweep import multihost
    _silo_flags.layout(args)  # the flags' consistency, then the runtime, then the device count (loads jax)
    multihost.check_one_run_distributed(args, "run isrl-mnist-trial")
    index, count = multihost.join_runtime(args)
    silo = _silo_flags.command_layout(args)

    cfg = isrl_mnist.IsrlMnistConfig(
        **{k: getattr(args, k) for k in ("epsilon", "rounds", "silos_per_round", "seed", "batch_size", "epsilon_max",
                                         "sampling", "calibration", "repetitions", "data_dir")},
        learning_rates=tuple(args.learning_rates) if args.learning_rates else None, baseline=not args.no_baseline)
    from dpjax import outputs

    out = args.out or pathlib.Path("runs") / f"isrl-mnist-trial-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    with multihost.follower_output(index) as scratch:  # --distributed: processes > 0 write into a scratch dir
        out = out if scratch is None else pathlib.Path(scratch) / "out"
        # Checked here too so that the message names the flag; run() then writes into the claimed directory.
        path, created = outputs.claim_output_dir(out, isrl_mnist.run_identity(cfg), overwrite=args.overwrite)
        try:
            with silo:  # --silo-devices: every grid the command runs shards its runs' silos
                summary = isrl_mnist.run(cfg, path, progress=not (args.no_progress or args.quiet) and index == 0,
                                         overwrite=True)
        except BaseException:
            outputs.release_output_dir(path, created)
            raise
        multihost.leave_runtime()
    if index > 0:
        print(f"process {index} of {count}: computed the trial with process 0, which wrote {args.out or 'runs/'}")
        return 0
    if args.json:
        print(json.dumps(summary, default=isrl_mnist.json_default))
    else:
        print(isrl_mnist.format_summary(summary))
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("run", help="run an end-to-end task (e.g. isrl-mnist-trial)")
    tasks = p.add_subparsers(dest="task", metavar="TASK")
    m = tasks.add_parser(
        "isrl-mnist-trial",
        help="one trial of ISRL-DP Noisy MB-SGD on 25-silo MNIST at one epsilon (Lowy & Razaviyayn 2023, "
        "Fig. 4 setting; tight RDP calibration)",
        description="One trial of ISRL-DP Noisy MB-SGD on the Fig. 4 MNIST silos at one epsilon: a step-size "
        "grid x repetitions through the sweep executor, selection by mean training loss, test error and the "
        "certified epsilon. Defaults: sigma from a tight RDP accountant for sampling without replacement, last "
        "iterate. Not the figure's protocol: `dpjax reproduce isrl-mnist` runs Fig. 4/7 (MB-SGD and Local SGD, "
        "Appendix I and tight calibrations, 20 trials, 8-iterate window), and "
        "`dpjax sweep isrl_fig4_mbsgd_appendix_i` the Fig. 4 MB-SGD grid with Appendix I's "
        "calibration and the authors' sampling.",
    )
    m.add_argument("--epsilon", type=float, default=1.5, help="target ISRL-DP epsilon per silo (default 1.5)")
    m.add_argument("--rounds", type=int, default=35, help="communication rounds R (default 35)")
    m.add_argument("--silos-per-round", type=int, default=12, help="silos available per round M (default 12)")
    from dpjax import _validate as v

    m.add_argument("--seed", type=v.flag_type("--seed", v.parse_int), default=0,
                   help="seed of the data split and of the run keys (0 .. 2**32 - 1)")
    m.add_argument("--batch-size", type=int, help="records per silo per round K (default: n sqrt(eps_max)/(2 sqrt R))")
    m.add_argument("--epsilon-max", type=float, help="eps_max of the default K rule (default: --epsilon)")
    m.add_argument("--sampling", default="without-replacement",
                   choices=["without-replacement", "with-replacement", "poisson", "one-pass"])
    m.add_argument("--calibration", default="rdp", choices=["rdp", "pld", "paper", "paper-experiment"],
                   help="how sigma is chosen for the target epsilon (default: tight RDP)")
    m.add_argument("--learning-rates", type=float, nargs="+", help="step-size grid (default: M * exp(linspace(-6, 0, 10)))")
    m.add_argument("--repetitions", type=int, default=3, help="repetitions per step size (default 3)")
    m.add_argument("--no-baseline", action="store_true", help="skip the non-private MB-SGD baseline")
    m.add_argument("--data-dir", help="directory with mnist.npz or the IDX files (default: $DPJAX_DATA_DIR, "
                   "then ~/.cache/dpjax, then the packaged copy)")
    m.add_argument("--out", help="output directory (default runs/isrl-mnist-trial-<time>)")
    m.add_argument("--overwrite", action="store_true", help="replace a different earlier run's results in --out")
    m.add_argument("--no-progress", action="store_true", help="no progress bar")
    m.add_argument("--quiet", action="store_true", help="no progress bar (as --no-progress)")
    m.add_argument("--json", action="store_true", help="print the summary as JSON")
    from dpjax import _silo_flags
    from dpjax.sweep import multihost
    _silo_flags.add_arguments(m)
    multihost.add_distributed_arguments(m, "with --silo-devices all the trial's runs span every process's devices "
                                             "(process 0 writes --out)")
    m.set_defaults(func=_run_isrl_mnist)
    p.set_defaults(func=lambda args: p.error("give a TASK: isrl-mnist-trial (dpjax run --help lists the tasks)"))
