"""``dpjax audit``: canary audits of every registered private family's own step (empirical lower
bounds on epsilon, against the family's certified epsilon and the canary pair's exact epsilon).

    dpjax audit --all --runs 100000 --out experiments/audit
    dpjax audit isrl-mbsgd diff2-gd --runs 20000
    dpjax audit training [--family dpsgd-general|isrl-mbsgd] [--mutant no-clip|half-noise|none|all]
      (one-run audit of an actual training run: ``dpjax.auditing.training_cli``)

Writes ``audit.md`` (table) and ``audit.json`` into ``--out``; refuses to
overwrite an earlier report unless ``--overwrite`` (checked before any run).
Exit status 0 when every audit passes (lower bound below the certified
epsilon and below the canary pair's exact epsilon where it is computed, every
mutant caught), 1 otherwise, 2 on bad input. An audit that finds no violation
but whose runs are too few to catch its own mutants is INCONCLUSIVE (exit 1),
with the number of runs that would decide; every other miss is FAIL, and the
summary line names the criterion each one missed.
"""

from __future__ import annotations

import argparse
import os

from dpjax.auditing.stats import MAX_RUNS  # the package __init__ imports stats already

__all__ = ["add_parser", "run", "summary_line"]

_NAMES = ("isrl-mbsgd", "isrl-mbsgd-poisson", "isrl-local-sgd", "isrl-accelerated", "isrl-unbalanced", "isrl-shuffled",
          "sdp-accelerated", "shuffle-sgd", "shuffle-acsa", "dp-sgd", "dp-sgd-band-mf",
          "dp-sgd-band-mf-separation", "dpsgd-general-shuffle-individual",
          "dpsgd-general-shuffle-batch", "dpsgd-general-subsample-individual", "dpsgd-general-subsample-batch",
          "dpsgd-general-poisson", "dpsgd-general-subsample-individual-g2", "dpsgd-general-subsample-batch-g2",
          "diff2-gd", "dp-gd", "diff2-bvr", "user-level", "dp-fedavg", "dp-fedavg-count",
          "dp-ftrl", "dp-fedadam", "dp-scaffold", "dp-fedavg-band-mf", "balls-in-bins", "user-level-dpsgd-uls",
          "user-level-dpsgd-els")
_FILES = ("audit.md", "audit.json")
RUNS = 100_000  # --runs default of the canary audits


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("audit", help="empirical privacy audits (canary experiments) of dpjax's mechanisms",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mechanisms", nargs="*", metavar="MECHANISM", help=f"one or more of {', '.join(_NAMES)}")
    p.add_argument("--all", action="store_true", help="audit every mechanism")
    from dpjax import _validate as v
    p.add_argument("--runs", type=v.flag_type("--runs", v.parse_int), default=None,
                   help=f"runs per dataset (half select the threshold, half bound; default {RUNS:.0e}, at most "
                        f"{MAX_RUNS:.0e}; not for `training`)")
    p.add_argument("--seed", type=v.flag_type("--seed", v.parse_int), default=0, help="0 .. 2**32 - 1 (default 0)")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--out", default=None, help="directory for audit.md and audit.json (default: print only)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing report in --out")
    p.add_argument("--quiet", action="store_true", help="no stage lines on stderr (results and the summary still print)")
    from dpjax.auditing import training_cli
    training_cli.add_arguments(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from dpjax import _validate as v, outputs
    if "training" in args.mechanisms:
        from dpjax.auditing import training_cli
        return training_cli.run(args)
    names = list(_NAMES) if args.all else list(args.mechanisms)
    if args.all and args.mechanisms:
        raise ValueError(f"mechanisms={args.mechanisms!r}: give either MECHANISM names or --all, not both")
    if not names:
        raise ValueError(f"mechanisms=[]: name one or more of {_NAMES} or pass --all")
    for name in names:
        v.check_choice("mechanism", name, _NAMES)
    from dpjax.auditing import training_cli
    ignored = training_cli.given_flags(args)
    if ignored:  # the canary audits fix their mechanisms' sizes and mutants: these flags would do nothing
        raise ValueError(f"{ignored[0]}: a flag of `dpjax audit training` only; the canary audit of "
                         f"{', '.join(names) if len(names) <= 3 else f'{len(names)} mechanisms'} has no such setting")
    if args.runs is None:
        args.runs = RUNS
    v.check_int("runs", args.runs, min_value=2, max_value=MAX_RUNS)  # the scores are float64 [runs] arrays
    v.check_seed("--seed", args.seed)
    v.check_open_unit("confidence", args.confidence)
    check_runs(args.runs, args.confidence)
    if args.out is not None:
        outputs.check_report_dir(args.out, _FILES, overwrite=args.overwrite)

    import platform
    import time
    from dpjax import progress
    progress.configure(quiet=getattr(args, "quiet", False))
    progress.stage(f"audit: {len(names)} mechanism(s), {args.runs} runs per dataset; loading jax and the families")
    import jax
    from dpjax.auditing.audit import run_audit
    from dpjax.auditing.mechanisms import DELTA, build_audit
    from dpjax.auditing.report import json_report, markdown_report
    start = time.perf_counter()
    results = []
    for i, name in enumerate(names, 1):
        progress.stage(f"audit [{i}/{len(names)}] {name}: compiling and running the canary experiments")
        result = run_audit(build_audit(name), runs=args.runs, seed=args.seed, confidence=args.confidence)
        exact = "-" if result.exact_epsilon is None else f"{result.exact_epsilon:.3f}"
        print(f"{name}: certified {result.certificate.epsilon:.3f}, exact {exact}, lower bound {result.bound.epsilon:.3f}, "
              + ", ".join(f"{m.name} {m.bound.epsilon:.3f}" for m in result.mutants)
              + f" -> {result.verdict} ({result.seconds:.1f} s)"
              + (f": {'; '.join(result.failed_criteria())}" if not result.passed else ""), flush=True)
        results.append(result)
    wall = time.perf_counter() - start
    meta = {"mechanisms": names, "runs_per_dataset": args.runs, "seed": args.seed, "confidence": args.confidence,
            "delta": DELTA,
            "wall_seconds": wall, "jax": jax.__version__, "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "passed": all(r.passed for r in results)}
    header = (f"# dpjax privacy audit\n\n{args.runs} runs per dataset (half choose the threshold, half bound epsilon), "
              f"seed {args.seed}, confidence {args.confidence:.0%}, delta {DELTA:g}; wall time {wall:.0f} s.")
    md = markdown_report(results, header)
    if args.out is not None:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "audit.md"), "w") as f:
            f.write(md)
        with open(os.path.join(args.out, "audit.json"), "w") as f:
            f.write(json_report(results, meta))
    else:
        print(md)
    print(summary_line(names, [r.passed for r in results], wall, results=results), flush=True)
    return 0 if meta["passed"] else 1


def min_runs(confidence: float) -> int:
    """The fewest ``--runs`` (per dataset) whose audit can report any epsilon above 0 at ``confidence``.

    Half the runs, m, bound epsilon; with no error at all the one-sided Clopper-Pearson bounds on both rates (each at
    level ``1 - alpha / 2``, ``alpha = 1 - confidence``: ``dpjax.auditing.stats``) are ``u = 1 - (alpha / 2)^(1/m)``,
    and ``eps >= log((1 - delta - u) / u)`` is positive only when ``u < (1 - delta) / 2``: even at delta = 0 that
    needs ``(alpha / 2)^(1/m) > 1/2``, i.e. ``m > log2(2 / alpha)``. With fewer runs every outcome, mutants included,
    reads "no violation": the audit cannot decide anything."""
    import math

    half = math.floor(math.log2(2.0 / (1.0 - confidence))) + 1
    return 2 * half


def check_runs(runs: int, confidence: float) -> int:
    """``--runs``: even (half choose the threshold, half bound epsilon) and at least ``min_runs(confidence)``."""
    if runs % 2:
        raise ValueError(f"--runs={runs} must be even: half the runs choose the test's threshold and the other half "
                         f"bound epsilon (give {runs + 1})")
    need = min_runs(confidence)
    if runs < need:
        raise ValueError(f"--runs={runs} is too few to decide anything at --confidence={confidence:g}: with "
                         f"{runs // 2} runs bounding epsilon no outcome gives a lower bound above 0, so no mutant "
                         f"could be caught; give at least {need}")
    return runs


def summary_line(names, passed, seconds: float, results=None) -> str:
    """``audit: 22 of 24 passed, 1 failed (dp-ftrl: lower bound 3.1 >= certified 2.0), 1 inconclusive (dp-sgd: 2000
    runs too few: about 40000 would decide) in 310 s``: the last line of ``dpjax audit``. Without ``results`` (the
    ``AuditResult`` per name) a non-passed audit is a failure named without its criterion."""
    by_verdict = {"FAIL": [], "INCONCLUSIVE": []}
    for i, (name, ok) in enumerate(zip(names, passed)):
        if ok:
            continue
        r = None if results is None else results[i]
        verdict = "FAIL" if r is None else r.verdict
        by_verdict[verdict].append(name if r is None else f"{name}: {'; '.join(r.failed_criteria())}")
    failed, unsure = by_verdict["FAIL"], by_verdict["INCONCLUSIVE"]
    line = f"audit: {len(names) - len(failed) - len(unsure)} of {len(names)} passed"
    line += f", {len(failed)} failed ({', '.join(failed)})" if failed else ", none failed"
    if unsure:
        line += f", {len(unsure)} inconclusive ({', '.join(unsure)})"
    return line + f" in {seconds:.0f} s"
