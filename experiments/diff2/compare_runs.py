"""Side-by-side check of two DIFF2 reproduction outputs (e.g. before/after a refactor).

    python experiments/diff2/compare_runs.py OLD_DIR NEW_DIR

Reads each folder's ``results.csv`` and ``report.md`` (``dpjax reproduce diff2-*``) and prints:
the panels whose chosen configuration differs, the largest relative change of the values whose
configuration is the same (all rows, and the best-over-rounds values), and whether the
claim-by-claim tables are identical (else the differing rows).
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd


def claims(folder: str) -> list[str]:
    text = open(f"{folder}/report.md").read()
    return text[text.index("## Claim by claim"):text.index("Figures:")].splitlines()


def main(old: str, new: str) -> None:
    a, b = pd.read_csv(f"{old}/results.csv"), pd.read_csv(f"{new}/results.csv")
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        raise SystemExit("the two runs have different rows or columns")
    keys = [c for c in a.columns if c != "value"]
    same = (a[keys].astype(str).values == b[keys].astype(str).values).all(axis=1)
    flips = a[~same][["dataset", "algorithm", "epsilon", "trial", "metric"]].drop_duplicates()
    print(f"panels with another chosen configuration: {len(flips)}")
    if len(flips):
        print(flips.to_string(index=False))
    va, vb = a.value.to_numpy(float), b.value.to_numpy(float)
    ok = same & np.isfinite(va) & np.isfinite(vb) & (va != 0)
    rel = np.abs(va - vb) / np.where(ok, np.abs(va), 1.0)
    best = ok & (a.kind.to_numpy() == "best")
    print(f"same configuration: {int(np.sum(va[ok] == vb[ok]))}/{int(ok.sum())} values identical; largest relative "
          f"change {rel[ok].max():.3g} (best-over-rounds values: {rel[best].max():.3g})")
    ca, cb = claims(old), claims(new)
    print("claims tables identical" if ca == cb else "claims tables differ:")
    for x, y in zip(ca, cb):
        if x != y:
            print(f"  - {x}\n  + {y}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
