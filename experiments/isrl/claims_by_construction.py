"""Side-by-side claim verdicts of the kept full ISRL outputs under both constructions.

    python experiments/isrl/claims_by_construction.py > experiments/isrl/results/claims_by_construction.md

Reads the ``## Claims`` table of ``results/isrl-<figure>-full/report.md`` (paper construction) and
``results/isrl-<figure>-full-authors/report.md`` and joins them on (claim, setting, calibration); a row that
one construction does not run (the authors' insurance script runs N = 10, M = 5 only; the scripts use the
Appendix I calibration only) says so.
"""

from __future__ import annotations

import pathlib
import sys

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def claims(report: pathlib.Path) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(claim, setting, calibration) -> (measured, holds) from a report's claims table."""
    if not report.exists():
        return {}
    block = report.read_text().split("## Claims", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 5 and cells[0] != "claim" and not set(cells[0]) <= set("-"):
            rows[tuple(cells[:3])] = (cells[3], cells[4])
    return rows


def main() -> int:
    out = ["| figure | claim | setting | calibration | paper construction | authors' construction |",
           "|---|---|---|---|---|---|"]
    for figure in ("mnist", "insurance", "obesity"):
        paper = claims(RESULTS / f"isrl-{figure}-full" / "report.md")
        authors = claims(RESULTS / f"isrl-{figure}-full-authors" / "report.md")
        for key in dict.fromkeys([*paper, *authors]):
            cell = lambda rows: rows[key][1] if key in rows else "not run in this construction"  # noqa: E731
            out.append(f"| {figure} | {key[0]} | {key[1]} | {key[2]} | {cell(paper)} | {cell(authors)} |")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
