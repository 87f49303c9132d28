"""The ``dpjax`` command line.

Subcommands live next to the code they drive; each module listed in
``SUBCOMMAND_MODULES`` exposes ``add_parser(subparsers)`` which registers its
parser with ``set_defaults(func=...)``. ``func(args)`` returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMAND_MODULES = [
    "dpjax.sweep.cli",  # dpjax sweep, dpjax plot
    "dpjax.tasks.cli",  # dpjax run <task>
    "dpjax.accounting.cli",  # dpjax account
    "dpjax.reproduce.cli",  # dpjax reproduce
    "dpjax.auditing.cli",  # dpjax audit
]


# command -> the one module that registers it: `dpjax account` must not import
# jax (dpjax.sweep does), so main() imports only the module it needs.
COMMAND_MODULES = {
    "sweep": "dpjax.sweep.cli",
    "plot": "dpjax.sweep.cli",
    "run": "dpjax.tasks.cli",
    "account": "dpjax.accounting.cli",
    "reproduce": "dpjax.reproduce.cli",
    "audit": "dpjax.auditing.cli",
}


def build_parser(modules: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpjax",
        description="JAX-compiled experiments for differentially private federated optimization.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES if modules is None else modules:
        module = importlib.import_module(name)
        add = getattr(module, "add_parser", None) or getattr(module, "add_account_parser")
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = COMMAND_MODULES.get(argv[0]) if argv else None
    parser = build_parser(None if command is None else [command])
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ValueError as err:  # bad input: a clear message, not a traceback
        print(f"dpjax: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
