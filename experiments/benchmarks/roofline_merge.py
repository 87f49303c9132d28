"""Merges per-figure roofline runs (``roofline.py --no-synthetic --figures NAME --stem NAME``, one process a
figure) into one protocol table and one program table.

Each process measured its own peaks (and saw its own machine load), so every merged row keeps the peaks
and load average of the process that produced it: ratios are comparable only within a row's process.

Usage::

    python experiments/benchmarks/roofline_merge.py --out experiments/benchmarks/results \\
        quick=/tmp/roof/quick_fig full=/tmp/roof/full_fig
"""

from __future__ import annotations

import argparse
import csv
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import roofline  # noqa: E402

EXTRA = ["peak_gflop_per_s", "peak_gbytes_per_s", "load_start", "load_end", "wall_s"]


def _process_facts(md: pathlib.Path) -> dict:
    """Peaks and load average of the process that wrote ``md`` (its first lines)."""
    text = md.read_text()
    peak = re.search(r"Peaks \(this process\): ([\d.]+) GFLOP/s .*?, ([\d.]+) GB/s best copy", text)
    load = re.search(r"load average at start ([\d.]+), at end ([\d.]+)", text)
    return {"peak_gflop_per_s": peak.group(1) if peak else "", "peak_gbytes_per_s": peak.group(2) if peak else "",
            "load_start": load.group(1) if load else "", "load_end": load.group(2) if load else ""}


def merge(sources: list[tuple[str, pathlib.Path]]) -> tuple[list[dict], list[dict]]:
    """Rows and protocols of every run in ``sources``; a (figure, protocol) recorded by several runs keeps
    the last source's (a later, per-figure rerun replaces an earlier one)."""
    protocols, rows = {}, {}
    for _label, folder in sources:
        for pfile in sorted(folder.glob("*_protocols.csv")):
            stem = pfile.name[: -len("_protocols.csv")]
            facts = _process_facts(folder / f"{stem}.md")
            with open(pfile) as f:
                mine = [dict(p, **facts) for p in csv.DictReader(f)]
            protocol = {p["figure"]: p["protocol"] for p in mine}
            for p in mine:
                protocols[p["figure"], p["protocol"]] = p
            with open(folder / f"{stem}.csv") as f:
                for r in csv.DictReader(f):
                    key = (r["group"], protocol.get(r["group"], ""))
                    if key[0] in protocol and rows.get(key, (None,))[0] != pfile:
                        rows[key] = (pfile, [])
                    rows.setdefault(key, (pfile, []))[1].append(dict(r, protocol=key[1], **facts))
    order = sorted(protocols, key=lambda k: (k[1] != "quick", k[0]))
    return [r for k in order if k in rows for r in rows[k][1]], [protocols[k] for k in order]


def _cell(v: str) -> str:
    try:
        return roofline._fmt(float(v))
    except (TypeError, ValueError):
        return v or "n/a"


def markdown(rows: list[dict], protocols: list[dict]) -> str:
    pcols = roofline.PROTOCOL_COLUMNS + EXTRA
    lines = ["Per figure protocol (each row from its own process: its peaks and load average).", "",
             "| " + " | ".join(pcols) + " |", "|" + "---|" * len(pcols)]
    lines += ["| " + " | ".join(_cell(p.get(c, "")) for c in pcols) + " |" for p in protocols]
    cols = ["group", "protocol"] + roofline.COLUMNS[1:]
    lines += ["", "Programs.", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", help="LABEL=FOLDER of per-figure roofline outputs")
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--stem", default="roofline_figures")
    args = ap.parse_args(argv)
    sources = [(s.split("=", 1)[0], pathlib.Path(s.split("=", 1)[1])) for s in args.sources]
    rows, protocols = merge(sources)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / f"{args.stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["group", "protocol"] + roofline.COLUMNS[1:] + EXTRA[:-1],
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    with open(args.out / "roofline_protocols.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=roofline.PROTOCOL_COLUMNS + EXTRA, extrasaction="ignore")
        w.writeheader()
        w.writerows(protocols)
    text = markdown(rows, protocols)
    (args.out / f"{args.stem}.md").write_text(text)
    print(text.split("\n\nPrograms.")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
