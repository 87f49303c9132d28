"""The one report writer of the reproductions: markdown tables (pandas ``to_markdown``), ``report.md``, ``meta.json``,
the tidy ``results.csv`` and the machine line every report states.

Cells are written verbatim (``disable_numparse``): a reproduction formats its numbers itself (significant digits,
intervals, "—" for a missing run), and the table keeps them exactly as formatted.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Iterable, Mapping, Sequence

#: the leading columns of every reproduction's tidy ``results.csv``
TIDY_COLUMNS = ("algorithm", "epsilon", "trial", "metric", "value", "accountant")


def fresh_out(out: pathlib.Path, *, make: bool = True) -> pathlib.Path:
    """``out`` as a path, refused when it already holds a ``results.csv`` (kept results are never overwritten);
    created when ``make``."""
    out = pathlib.Path(out)
    if (out / "results.csv").exists():
        raise ValueError(f"out={str(out)!r} already holds results.csv; choose another --out or remove it (results are "
                         "never overwritten)")
    if make:
        out.mkdir(parents=True, exist_ok=True)
    return out


def markdown_table(rows: Iterable[Mapping[str, Any]] | Iterable[Sequence[Any]], columns: Sequence[str] | None = None
                   ) -> str:
    """A GitHub markdown table of ``rows`` (dicts, or sequences with ``columns``)."""
    import pandas as pd

    frame = pd.DataFrame(list(rows), columns=list(columns) if columns is not None else None)
    return frame.astype(str).to_markdown(index=False, disable_numparse=True)


def yes_no(flag) -> str:
    return "yes" if flag else "no"


def tidy_results(out_dir: pathlib.Path, rows: Sequence[Mapping[str, Any]], first: Sequence[str] = TIDY_COLUMNS,
                 *, fill_missing: bool = False) -> pathlib.Path:
    """Writes ``results.csv``: one row per (algorithm, epsilon, trial, metric), the ``first``
    columns leading (missing ones added as NaN with ``fill_missing``)."""
    import numpy as np
    import pandas as pd

    tidy = pd.DataFrame(list(rows))
    for c in first:
        if fill_missing and c not in tidy:
            tidy[c] = np.nan
    tidy = tidy[list(first) + [c for c in tidy.columns if c not in first]]
    path = pathlib.Path(out_dir) / "results.csv"
    tidy.to_csv(path, index=False)
    return path


def write_csv(path: pathlib.Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None
              ) -> pathlib.Path:
    """Writes the dicts ``rows`` as a CSV file with ``columns`` (default: every key, in first-seen order)."""
    import csv

    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, list(columns) if columns is not None else list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    return pathlib.Path(path)


def write_report(out_dir: pathlib.Path, lines: Sequence[str]) -> pathlib.Path:
    """Writes ``report.md`` (the lines joined, one final newline)."""
    path = pathlib.Path(out_dir) / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_meta(out_dir: pathlib.Path, meta: Mapping[str, Any]) -> pathlib.Path:
    """Writes ``meta.json`` (values JSON cannot hold are written as strings)."""
    path = pathlib.Path(out_dir) / "meta.json"
    path.write_text(json.dumps(dict(meta), indent=2, default=str))
    return path


def device_line() -> str:
    """The platform of the run, as every report states it."""
    import os

    import jax

    return f"{jax.devices()[0].platform}, {os.cpu_count()} visible CPUs, jax {jax.__version__}"
