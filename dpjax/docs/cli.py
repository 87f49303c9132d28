"""``dpjax docs build``: build the documentation site (needs the ``docs`` extra and a source checkout).

Only argparse is imported here, so ``dpjax --help`` stays fast; mkdocs is imported when the site is built.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("docs", help="build the documentation site (needs the docs extra)")
    sub = parser.add_subparsers(dest="docs_command", metavar="ACTION", required=True)
    build = sub.add_parser("build", help="build the site with mkdocs --strict (warnings are errors)")
    build.add_argument("--out", default="site", help="output folder (default: site)")
    build.add_argument("--repo", default=None,
                       help="source checkout holding experiments/ and notebooks/ (default: the one holding the "
                            "installed dpjax/, else the working directory or a folder above it)")
    build.add_argument("--no-strict", dest="strict", action="store_false",
                       help="report warnings instead of failing on them")
    build.add_argument("--keep-staging", default=None, metavar="DIR",
                       help="also write the generated markdown and mkdocs.yml to DIR (for debugging)")
    build.add_argument("--dry-run", action="store_true",
                       help="only say which checkout and output folder the build would use")
    build.add_argument("--quiet", action="store_true", help="no stage lines on stderr")
    build.set_defaults(func=_build)


def _build(args: argparse.Namespace) -> int:
    from dpjax import progress
    from dpjax.docs.build import main_build
    progress.configure(quiet=args.quiet)
    return main_build(args.out, args.repo, args.strict, args.keep_staging, dry_run=args.dry_run)


def main(argv: list[str] | None = None) -> int:
    """``python -m dpjax.docs ...``: the same parser and error handling as ``dpjax docs ...``."""
    from dpjax.cli import main as dpjax_main
    import sys
    return dpjax_main(["docs", *(sys.argv[1:] if argv is None else argv)])
