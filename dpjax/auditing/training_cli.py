"""``dpjax audit training``: the one-run audit of actual training runs (``dpjax.auditing.training``).

    dpjax audit training                                   # both families, honest run and both mutants
    dpjax audit training --family isrl-mbsgd --mutant no-clip --canaries 20000 --delta 1e-7 dpjax audit training --out
    experiments/audit/training

Prints one line per run; with ``--out`` writes ``training_audit.md`` and ``training_audit.json`` (refused when they
exist, unless ``--overwrite``). Exit status 0 when the honest runs' lower bounds stay at or below their certified
epsilon and every mutant's exceeds it, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os

__all__ = ["add_arguments", "run"]

_FILES = ("training_audit.md", "training_audit.json")


#: The training audit's own flags with their defaults. They default to ``None`` on the parser so that the canary
#: audits can tell a flag given from a flag left alone (and refuse it: they would ignore it).
DEFAULTS = {"family": None, "mutant": "all", "canaries": 1_000_000, "rounds": 4, "noise_multiplier": 4.0,
            "delta": 1e-9}


def training_constants() -> dict:
    """``FAMILIES``, ``MUTANTS`` and ``MAX_ROUNDS`` of ``dpjax.auditing.training``, read from its source: that module
    imports jax (seconds), and ``dpjax audit``'s parser, so every refusal of a flag, must not."""
    import ast
    import pathlib

    tree = ast.parse((pathlib.Path(__file__).parent / "training.py").read_text(encoding="utf-8"))
    want = ("FAMILIES", "MUTANTS", "MAX_ROUNDS")
    found = {n.targets[0].id: ast.literal_eval(n.value) for n in tree.body
             if isinstance(n, ast.Assign) and len(n.targets) == 1 and getattr(n.targets[0], "id", None) in want}
    if set(found) != set(want):  # not literals any more: import the module after all
        from dpjax.auditing import training
        return {k: getattr(training, k) for k in want}
    return found


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``training`` audit's flags on the ``dpjax audit`` parser (refused by the canary audits)."""
    from dpjax import _validate as v
    c = training_constants()
    FAMILIES, MAX_ROUNDS, MUTANTS = c["FAMILIES"], c["MAX_ROUNDS"], c["MUTANTS"]
    g = p.add_argument_group("dpjax audit training (one-run audit of a training run; refused by the other audits)")
    g.add_argument("--family", choices=FAMILIES, default=None, help="family to train (default: all three)")
    g.add_argument("--mutant", choices=MUTANTS + ("none", "all"), default=None,
                   help="mutants to run beside the honest run: one, none or all (default)")
    g.add_argument("--canaries", type=v.flag_type("--canaries", v.parse_int), default=None,
                   help="Dirac gradient canaries = training records (default 10^6)")
    g.add_argument("--rounds", type=v.flag_type("--rounds", v.parse_int), default=None,
                   help=f"training rounds (default 4, at most {MAX_ROUNDS})")
    g.add_argument("--noise-multiplier", type=float, default=None, help="sigma (default 4: GDP mu 0.5 over 4 rounds)")
    g.add_argument("--delta", type=float, default=None, help="delta of certificate and bound (default 1e-9; "
                   "2 x canaries x delta must stay well below 1 - confidence)")


def given_flags(args: argparse.Namespace) -> list[str]:
    """The training-only flags set on the command line (``--rounds 8``, ...)."""
    return [f"--{k.replace('_', '-')} {getattr(args, k)}" for k in DEFAULTS if getattr(args, k, None) is not None]


def markdown(audits, header: str) -> str:
    lines = [header, "", "| family | run | certified eps | accountant | one-run lower bound (95 %) | correct / guesses | "
             "canaries | verdict |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for a in audits:
        verdict = ("caught" if a.passed else "NOT caught") if a.mutant else ("pass" if a.passed else "FAIL")
        lines.append(f"| {a.family} | {a.mutant or 'honest'} | {a.certified_epsilon:.3f} | {a.accountant} | "
                     f"{a.bound.epsilon:.3f} | {a.bound.v} / {a.bound.r} | {a.canaries} | {verdict} |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    import platform
    import time
    from dpjax import _validate as v, outputs
    extra = [m for m in args.mechanisms if m != "training"]
    if extra or args.all:
        raise ValueError(f"mechanisms={args.mechanisms!r}: 'training' runs alone (no other MECHANISM, no --all)")
    if args.runs is not None:  # one training run per family and mutant: nothing to repeat
        raise ValueError(f"--runs={args.runs}: `dpjax audit training` trains once per family and mutant (a one-run "
                         "audit); its size is --canaries, not --runs")
    for k, default in DEFAULTS.items():
        if getattr(args, k) is None:
            setattr(args, k, default)
    v.check_seed("--seed", args.seed)
    v.check_open_unit("confidence", args.confidence)
    # training_audit's checks of the sizes, repeated before jax and the families load (seconds): a typo is refused
    # at once; that function checks them again for its Python callers
    canaries = v.check_int("canaries", args.canaries, min_value=2, max_value=2**24)
    v.check_int("rounds", args.rounds, min_value=1, max_value=training_constants()["MAX_ROUNDS"])
    v.check_positive("noise_multiplier", args.noise_multiplier)
    delta = v.check_open_unit("delta", args.delta)
    if 2 * canaries * delta >= 1 - args.confidence:
        raise ValueError(f"delta={delta!r} is too large for canaries={canaries}: the bound's delta term "
                         f"2 m delta = {2 * canaries * delta:.3g} must be below 1 - confidence = "
                         f"{1 - args.confidence:.3g}")
    if args.out is not None:
        outputs.check_report_dir(args.out, _FILES, overwrite=args.overwrite)
    import jax  # after every check of the flags: a bad one costs no jax import
    from dpjax.auditing.training import FAMILIES, MUTANTS, format_row, training_audit
    families = FAMILIES if args.family is None else (args.family,)
    mutants = (None,) + (MUTANTS if args.mutant == "all" else () if args.mutant == "none" else (args.mutant,))
    start = time.perf_counter()
    audits = []
    for fam in families:
        for mut in mutants:
            a = training_audit(fam, mut, canaries=args.canaries, rounds=args.rounds,
                               noise_multiplier=args.noise_multiplier, delta=args.delta, confidence=args.confidence,
                               seed=args.seed)
            print(format_row(a), flush=True)
            audits.append(a)
    wall = time.perf_counter() - start
    passed = all(a.passed for a in audits)
    header = (f"# dpjax one-run training audit (Steinke, Nasr & Jagielski 2023)\n\n{args.canaries} Dirac gradient "
              f"canaries of random sign, {args.rounds} full-batch rounds, noise multiplier {args.noise_multiplier}, "
              f"clip 1, canaries at 100 x the clip; delta {args.delta:g}, confidence {args.confidence:.0%} (Bonferroni "
              f"over the guess plan); seed {args.seed}; wall time {wall:.0f} s. Honest runs pass when the lower bound "
              "is at most the certified epsilon; mutants are caught when it exceeds it.")
    md = markdown(audits, header)
    if args.out is not None:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, _FILES[0]), "w") as f:
            f.write(md)
        meta = {"wall_seconds": wall, "jax": jax.__version__, "python": platform.python_version(),
                "cpu_count": os.cpu_count(), "passed": passed}
        with open(os.path.join(args.out, _FILES[1]), "w") as f:
            json.dump({"meta": meta, "audits": [a.as_dict() for a in audits]}, f, indent=2)
    else:
        print(md)
    return 0 if passed else 1
