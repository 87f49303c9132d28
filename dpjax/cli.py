"""The ``dpjax`` command line.

Subcommands live next to the code they drive; each module listed in ``SUBCOMMAND_MODULES`` exposes
``add_parser(subparsers)`` which registers its parser with ``set_defaults(func=...)``. ``func(args)`` returns an exit
code.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys

SUBCOMMAND_MODULES = [
    "dpjax.sweep.cli",  # dpjax sweep, dpjax plot
    "dpjax.tasks.cli",  # dpjax run <task>
    "dpjax.accounting.cli",  # dpjax account
    "dpjax.reproduce.cli",  # dpjax reproduce
    "dpjax.auditing.cli",  # dpjax audit
    "dpjax.docs.cli",  # dpjax docs (argparse only; mkdocs is imported when building)
]


# command -> the one module that registers it: `dpjax account` must not import
# jax (dpjax.sweep does), so main() imports only the module it needs.
COMMAND_MODULES = {"sweep": "dpjax.sweep.cli", "plot": "dpjax.sweep.cli", "run": "dpjax.tasks.cli",
                   "account": "dpjax.accounting.cli", "reproduce": "dpjax.reproduce.cli", "audit": "dpjax.auditing.cli",
                   "docs": "dpjax.docs.cli"}



#: ``dpjax --help``'s one line per command, so the top-level help imports no subcommand module (they pull in
#: jax, seconds of CPU); tests/test_cli_lazy.py checks each line against the module's own ``help=``.
COMMAND_HELP = {"sweep": "run (or resume) a hyperparameter sweep as compiled chunks",
                "plot": "paper-style figure from a sweep directory",
                "run": "run an end-to-end task (e.g. isrl-mnist-trial)",
                "account": "privacy accounting: epsilon of a schedule, or sigma for a target",
                "reproduce": "reproduce a paper figure (see --list)",
                "audit": "empirical privacy audits (canary experiments) of dpjax's mechanisms",
                "docs": "build the documentation site (needs the docs extra)"}

EPILOG = ("Every command takes --help. Long commands (reproduce, audit, sweep, run, plot) print stage lines on "
          "stderr (--quiet silences them). Python API: help(dpjax), dpjax.list_algorithms().")


class ArgumentParser(argparse.ArgumentParser):
    """argparse with dpjax's error form: the usage, then one ``dpjax: error: ...`` line, exit status 2.

    Subcommand parsers inherit the class (``add_subparsers`` uses the parent's type), so ``dpjax account --steps x``
    says ``dpjax: error: argument --steps: ...`` rather than ``dpjax account: error: ...``.
    """

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, f"dpjax: error: {' '.join(str(message).split())}\n")


def build_parser(modules: list[str] | None = None, *, lazy: bool = False) -> argparse.ArgumentParser:
    """The ``dpjax`` parser with the commands of ``modules`` (default: all); ``lazy``: every command as a placeholder
    with its ``COMMAND_HELP`` line, importing nothing (``dpjax --help``)."""
    parser = ArgumentParser(prog="dpjax",
                            description="JAX-compiled experiments for differentially private federated optimization.",
                            epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    if lazy:
        for name, text in COMMAND_HELP.items():
            sub.add_parser(name, help=text, add_help=False)
        return parser
    for name in SUBCOMMAND_MODULES if modules is None else modules:
        module = importlib.import_module(name)
        add = getattr(module, "add_parser", None) or getattr(module, "add_account_parser")
        add(sub)
    return parser


#: Failures a user can cause and fix (bad arguments or files, missing data, a full or read-only disk): one line on
#: stderr and exit status 2. Anything else is a bug and keeps its traceback.
EXPECTED_ERRORS = (ValueError, OSError)

_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


def _attach_negative_numbers(argv: list[str]) -> list[str]:
    """``["--delta", "-1e-5"]`` -> ``["--delta=-1e-5"]``.

    argparse only recognises ``-1`` and ``-.5`` as negative numbers; ``-1e-5`` or ``-inf`` after an option would read as
    an unknown option ("expected one argument"). Attached, the value reaches the option and its validator, which then
    says what is wrong with it.
    """
    out: list[str] = []
    for tok in argv:
        prev = out[-1] if out else ""
        if _NEGATIVE_NUMBER.match(tok) and prev.startswith("--") and "=" not in prev and prev != "--":
            out[-1] = f"{prev}={tok}"
        else:
            out.append(tok)
    return out


def one_line(err: BaseException) -> str:
    """``err``'s message on one line (an ``OSError`` keeps its errno, reason and file name)."""
    return " ".join(str(err).split()) or type(err).__name__


# Old task names: one line saying what replaced them (the three "isrl-mnist" pipelines are named by what differs).
RENAMED_TASKS = {
    "isrl-mnist": "the task isrl-mnist is now `dpjax run isrl-mnist-trial` (one trial at one epsilon); "
                  "the paper figure is `dpjax reproduce isrl-mnist`",
}


def main(argv: list[str] | None = None) -> int:
    from dpjax import progress  # pure Python: stage lines count seconds from here
    progress.configure(quiet=False, restart_clock=True)
    argv = sys.argv[1:] if argv is None else list(argv)
    command = COMMAND_MODULES.get(argv[0]) if argv else None
    if command is not None and len(argv) > 1 and argv[0] == "run" and argv[1] in RENAMED_TASKS:
        print(f"dpjax: error: {RENAMED_TASKS[argv[1]]}", file=sys.stderr)
        return 2
    parser = build_parser(None if command is None else [command], lazy=command is None)
    try:
        args, extra = parser.parse_known_args(_attach_negative_numbers(argv))
        if extra and command == "dpjax.auditing.cli" and not any(t.startswith("-") for t in extra):
            # `dpjax audit training --family X dp-sgd`: argparse leaves a name after the flags over; it is a
            # MECHANISM like the first ones, so `run` can say what is wrong with the list (not "unrecognized")
            args.mechanisms, extra = [*args.mechanisms, *extra], []
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except BrokenPipeError:  # `dpjax --help | head`
        return _closed_stdout()
    if not getattr(args, "func", None):
        parser.error(f"give a COMMAND: one of {', '.join(COMMAND_MODULES)} (dpjax --help lists them)")
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `dpjax reproduce --list | head`: the reader left, not an error
        return _closed_stdout()
    except EXPECTED_ERRORS as err:  # bad input: a clear message, not a traceback
        print(f"dpjax: error: {one_line(err)}", file=sys.stderr)
        return 2


def _closed_stdout() -> int:
    import os
    try:  # Python would report the broken pipe again when it flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
