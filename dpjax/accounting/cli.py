"""`dpjax account`: epsilon (or the calibrated noise) of a Gaussian schedule from the command line.

Examples::

    python -m dpjax.accounting.cli --sampling poisson --noise-multiplier 1.1 --batch-size 256 \\
        --dataset-size 60000 --steps 14062 --delta 1e-5 --neighboring add-remove --accountant rdp
    python -m dpjax.accounting.cli --sampling without-replacement --epsilon 1.5 --batch-size 15 \\
        --dataset-size 1238 --steps 35 --delta 6.5e-7 --json

`--noise-multiplier` is noise std / sensitivity (sensitivity = 2 x contribution bound under replace-one, 1 x under
add/remove). `--neighboring` follows the sampling unless given, as DP-FedAvg's does: add-remove for Poisson (the
relation of Abadi et al. 2016, dp_accounting and Opacus, whose multiplier is std / clip norm), replace-one for the
fixed-size schemes and full batches (add/remove needs a data set of unknown size). Under replace-one the multiplier
is std / (2 x clip norm), so the same number is twice the noise of an add/remove one; every replace-one result says so
in a note. With `--epsilon`, the noise is calibrated (never overshooting). `--sampling-rate q` is accounted exactly
for Poisson sampling; the fixed-size schemes need q n to be an integer batch. The default `--accountant best` reports
the smallest epsilon any tight accountant certifies and names it. `--json` prints one JSON object with at least
epsilon, delta, noise_multiplier, noise_std, accountant.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from dpjax import _validate as v
from dpjax.accounting.api import ACCOUNTANTS, calibrate_noise, compute_epsilon
from dpjax.accounting.sampling_bins import BinnedSampling, account_cli
from dpjax.accounting.schedules import GaussianSchedule, Neighboring, PrivacyUnit, Sampling

__all__ = ["REPLACE_ONE_NOTE", "add_account_parser", "batch_size_for_rate", "build_parser", "default_neighboring", "main",
           "run"]


def _count(flag: str):
    """An integer flag (``1e5`` accepted when it is an exact integer; at most 2**53, exact in float64)."""
    return v.flag_type(flag, v.parse_int, exact_in_float64=True)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sampling", choices=[s.value for s in Sampling] + [s.value for s in BinnedSampling],
                   default="poisson", help="how each step's batch is drawn (default: %(default)s)")
    p.add_argument("--num-bins", type=_count("--num-bins"), default=None,
                   help="balls-in-bins: B batches an epoch; cyclic-poisson / min-separation: b groups")
    p.add_argument("--mc-samples", type=_count("--mc-samples"), default=None,
                   help="balls-in-bins: also print Chua et al.'s Monte Carlo estimate (never certified)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--noise-multiplier", type=float, help="noise std / sensitivity")
    g.add_argument("--epsilon", type=float, help="target epsilon: calibrate the noise")
    r = p.add_mutually_exclusive_group()
    r.add_argument("--sampling-rate", "--sample-rate", type=float,
                   help="q: exact for poisson; fixed-size schemes need batch_size = q n to be an integer")
    r.add_argument("--batch-size", type=_count("--batch-size"))
    p.add_argument("--dataset-size", type=_count("--dataset-size"), required=True)
    p.add_argument("--steps", type=_count("--steps"), required=True)
    p.add_argument("--delta", type=float, required=True)
    p.add_argument("--neighboring", choices=[n.value for n in Neighboring], default=None,
                   help="the neighbouring relation (default: add-remove for poisson, replace-one otherwise)")
    p.add_argument("--unit", choices=[u.value for u in PrivacyUnit], default="record",
                   help="what one neighbour differs in, a label of the guarantee (default: %(default)s)")
    p.add_argument("--group-size", type=_count("--group-size"), default=1,
                   help="records covered at once (default: %(default)s)")
    p.add_argument("--accountant", choices=list(ACCOUNTANTS), default="best",
                   help="'best': the smallest epsilon of the tight accountants that certify (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def default_neighboring(sampling: str) -> str:
    """``--neighboring``'s default: add-remove for Poisson sampling, replace-one for the rest (DP-FedAvg's rule).

    Poisson with add/remove is the relation under which Abadi et al. (2016), dp_accounting and Opacus state their
    noise multiplier (std / clip norm), so their schedules typed here mean the same; a fixed-size batch (or a full one)
    needs a public data set size, which add/remove does not give (``GaussianSchedule`` refuses the pair).
    """
    return Neighboring.ADD_REMOVE.value if sampling == Sampling.POISSON.value else Neighboring.REPLACE_ONE.value


REPLACE_ONE_NOTE = ("neighbouring=replace-one: noise multiplier = noise std / (2 x clip norm), the sensitivity of "
                    "swapping one record; dp_accounting and Opacus state std / clip norm under add/remove, so the same "
                    "multiplier here is twice their noise (--neighboring add-remove for their convention, Poisson only)")


def batch_size_for_rate(sampling: str, sampling_rate: float, dataset_size: int) -> float | int | None:
    """The ``batch_size`` that makes ``GaussianSchedule.inclusion_probability`` equal ``sampling_rate``.

    Poisson: the expected batch q n, fractional if need be, nudged up by an ulp where q n / n rounds below q (never
    accounts a smaller rate). Fixed-size schemes: q n must be an integer, else ValueError naming both values.
    """
    q = v.check_probability("sampling_rate", sampling_rate, allow_zero=False)
    n = v.check_int("dataset_size", dataset_size, min_value=1)
    if sampling == Sampling.FULL.value:
        if q != 1:
            raise ValueError(f"sampling_rate={sampling_rate!r} must be 1 for sampling='full'")
        return None
    k = q * n
    if sampling == Sampling.POISSON.value:
        while k / n < q:
            k = math.nextafter(k, math.inf)
        return k
    k_int = round(k)
    if k_int < 1 or abs(k - k_int) > 1e-9 * k:
        raise ValueError(
            f"sampling_rate={sampling_rate!r} with dataset_size={n} is a batch of {k:.6g} records; "
            f"sampling={sampling!r} draws a fixed integer batch: give --batch-size "
            f"(or a sampling rate that is a multiple of 1/{n})"
        )
    return k_int


#: The most steps `--sampling shuffle` accounts: beside the certificate it prints the Poisson epsilon (dp_accounting's
#: PLD, whose cost grows with the steps) and Chua et al.'s lower bound (a PLD composed over the epochs); at 1e6 steps
#: the three take ~15 s on a loaded 2-core machine and 1e7 ran for minutes, so a longer schedule is refused up front.
SHUFFLE_MAX_STEPS = 100_000


def run(args: argparse.Namespace) -> dict:
    """Compute the result dict for parsed arguments (raises ValueError on invalid input)."""
    if args.sampling == Sampling.SHUFFLE.value and args.steps > SHUFFLE_MAX_STEPS:
        raise ValueError(f"--steps={args.steps} with --sampling shuffle: at most {SHUFFLE_MAX_STEPS} steps (the "
                         "Poisson epsilon and the shuffling lower bound printed beside the certificate cost minutes "
                         "beyond); account a longer shuffled run through dpjax.accounting.compute_epsilon")
    if args.sampling in {s.value for s in BinnedSampling}:
        return account_cli(args)  # balls-in-bins / cyclic Poisson / min-separation (dpjax.accounting.sampling_bins)
    if getattr(args, "num_bins", None) is not None or getattr(args, "mc_samples", None) is not None:
        raise ValueError(f"num_bins / mc_samples: sampling={args.sampling!r} takes neither")
    n = args.dataset_size
    if args.sampling_rate is not None:
        k = batch_size_for_rate(args.sampling, args.sampling_rate, n)
    elif args.batch_size is not None or args.sampling == "full":
        k = args.batch_size
    else:
        raise ValueError("batch_size=None: give --batch-size or --sampling-rate (or --sampling full)")
    neighboring = args.neighboring if args.neighboring is not None else default_neighboring(args.sampling)
    base = GaussianSchedule(noise_std=1.0, contribution_bound=1.0, sampling=args.sampling, dataset_size=n,
                            batch_size=k, steps=args.steps, neighboring=neighboring, unit=args.unit,
                            group_size=args.group_size)
    multiplier = getattr(args, "noise_multiplier", None)
    if multiplier is not None:
        std = v.check_nonnegative("noise_multiplier", multiplier) * base.sensitivity
    else:
        std = calibrate_noise(base, args.epsilon, args.delta, args.accountant)
    report = compute_epsilon(base.replace(noise_std=std), args.delta, args.accountant)
    out = report.as_dict() | {"noise_multiplier": std / base.sensitivity, "sampling_rate": base.inclusion_probability,
                              "batch_size": base.batch_size, "dataset_size": n, "steps": args.steps,
                              "group_size": args.group_size}
    if args.epsilon is not None:
        out["target_epsilon"] = args.epsilon
    if base.neighboring is Neighboring.REPLACE_ONE:  # the number means another noise than dp_accounting's: say so
        out["notes"] = [*out["notes"], REPLACE_ONE_NOTE]
    if base.sampling is Sampling.SHUFFLE:  # never the certificate alone: the Poisson number and the lower bound too
        from dpjax.accounting.shuffle_gap import shuffle_gap

        out["shuffle_gap"] = shuffle_gap(std / base.sensitivity, base.batch_size, n, base.passes, args.delta,
                                         neighboring=base.neighboring.value, steps=args.steps,
                                         certified=report).as_dict()
    return out


def _table(out: dict) -> str:
    keys = ["epsilon", "delta", "noise_multiplier", "noise_std", "accountant", "sampling", "neighboring", "unit",
            "group_size", "dataset_size", "batch_size", "sampling_rate", "steps"]
    if "target_epsilon" in out:
        keys.insert(1, "target_epsilon")
    label = {"neighboring": "neighbouring"}
    lines = [f"{label.get(k, k.replace('_', ' ')):<26}" + (f"{v_:.6g}" if isinstance(v_, float) else str(v_))
             for k, v_ in ((k, out[k]) for k in keys)]
    if out["neighboring"] == Neighboring.REPLACE_ONE.value:  # beside the number, not only in the notes below
        lines.insert(1, f"{'convention':<26}replace-one: noise multiplier = std / (2 x clip norm), see the note")
    lines += [f"{e['label']}: ε = {e['epsilon'] if isinstance(e['epsilon'], str) else format(e['epsilon'], '.6g')} "
              f"({e['method']})" for e in out.get("shuffle_gap", {}).values()]
    return "\n".join(lines + [f"note: {n}" for n in out["notes"]])


def _command(args: argparse.Namespace) -> int:
    from dpjax.cli import one_line

    try:
        out = run(args)
    except ValueError as exc:  # bad arguments, or epsilon not computable in float64: one line, as every command
        print(f"dpjax: error: {one_line(exc)}", file=sys.stderr)
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
    from dpjax.cli import ArgumentParser  # argparse errors as one `dpjax: error:` line

    p = ArgumentParser(prog="dpjax account", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(p)
    p.set_defaults(func=_command)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
