"""`dpjax account`: epsilon (or calibrated sigma) of a Gaussian schedule from the command line.

Examples::

    python -m dpjax.accounting.cli --sampling poisson --sigma 1.1 --batch-size 256 \\
        --dataset-size 60000 --steps 14062 --delta 1e-5 --neighboring add-remove --accountant rdp
    python -m dpjax.accounting.cli --sampling without-replacement --epsilon 1.5 --batch-size 15 \\
        --dataset-size 1238 --steps 35 --delta 6.5e-7 --json

`--sigma` is the noise multiplier (noise std / sensitivity, sensitivity = 2 x
contribution bound under replace-one, 1 x under add/remove). With
`--epsilon`, sigma is calibrated (never overshooting). `--json` prints one
JSON object with at least epsilon, delta, sigma, accountant.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from dpjax.accounting.api import ACCOUNTANTS, calibrate_noise, compute_epsilon
from dpjax.accounting.events import GaussianSchedule, Neighboring, PrivacyUnit, Sampling

__all__ = ["add_account_parser", "build_parser", "main", "run"]


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sampling", choices=[s.value for s in Sampling], default="poisson")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--sigma", type=float, help="noise multiplier (noise std / sensitivity)")
    g.add_argument("--epsilon", type=float, help="target epsilon: calibrate sigma")
    r = p.add_mutually_exclusive_group()
    r.add_argument("--sample-rate", type=float, help="q; with --dataset-size gives batch_size = round(q n)")
    r.add_argument("--batch-size", type=int)
    p.add_argument("--dataset-size", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--delta", type=float, required=True)
    p.add_argument("--neighboring", choices=[n.value for n in Neighboring], default="replace-one")
    p.add_argument("--unit", choices=[u.value for u in PrivacyUnit], default="record")
    p.add_argument("--group-size", type=int, default=1)
    p.add_argument("--accountant", choices=list(ACCOUNTANTS), default="rdp")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> dict:
    """Compute the result dict for parsed arguments (raises ValueError on invalid input)."""
    n = args.dataset_size
    if args.sampling == "full":
        k = None
    elif args.batch_size is not None:
        k = args.batch_size
    elif args.sample_rate is not None:
        if not (isinstance(args.sample_rate, float) and 0 < args.sample_rate <= 1):
            raise ValueError(f"sample_rate={args.sample_rate!r} must be in (0, 1]")
        k = max(1, round(args.sample_rate * n)) if isinstance(n, int) and n > 0 else n
    else:
        raise ValueError("batch_size=None: give --batch-size or --sample-rate (or --sampling full)")
    base = GaussianSchedule(noise_std=1.0, contribution_bound=1.0, sampling=args.sampling, dataset_size=n,
                            batch_size=k, steps=args.steps, neighboring=args.neighboring, unit=args.unit,
                            group_size=args.group_size)
    if args.sigma is not None:
        if not (args.sigma >= 0 and math.isfinite(args.sigma)):
            raise ValueError(f"sigma={args.sigma!r} must be a finite number >= 0")
        std = args.sigma * base.sensitivity
    else:
        std = calibrate_noise(base, args.epsilon, args.delta, args.accountant)
    report = compute_epsilon(base.replace(noise_std=std), args.delta, args.accountant)
    out = report.as_dict()
    out["sigma"] = std / base.sensitivity
    out["sample_rate"] = base.sample_rate
    out["batch_size"] = k
    out["dataset_size"] = n
    out["steps"] = args.steps
    out["group_size"] = args.group_size
    if args.epsilon is not None:
        out["target_epsilon"] = args.epsilon
    return out


def _table(out: dict) -> str:
    rows = [("epsilon", out["epsilon"]), ("delta", out["delta"]), ("sigma (noise multiplier)", out["sigma"]),
            ("accountant", out["accountant"]), ("sampling", out["sampling"]), ("neighbouring", out["neighboring"]),
            ("unit", out["unit"]), ("group size", out["group_size"]), ("dataset size", out["dataset_size"]),
            ("batch size", out["batch_size"]), ("sample rate", out["sample_rate"]), ("steps", out["steps"])]
    if "target_epsilon" in out:
        rows.insert(1, ("target epsilon", out["target_epsilon"]))
    lines = []
    for k, val in rows:
        txt = f"{val:.6g}" if isinstance(val, float) else str(val)
        lines.append(f"{k:<26}{txt}")
    lines += [f"note: {n}" for n in out["notes"]]
    return "\n".join(lines)


def _command(args: argparse.Namespace) -> int:
    try:
        out = run(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out) if args.json else _table(out))
    return 0


def add_account_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `account` subcommand to an argparse subparsers object (sets func=)."""
    p = subparsers.add_parser("account", help="privacy accounting: epsilon of a schedule, or sigma for a target",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(p)
    p.set_defaults(func=_command)
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dpjax account", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(p)
    p.set_defaults(func=_command)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
