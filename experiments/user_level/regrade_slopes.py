"""Re-judges the slope claims of kept user-level reports with the verdict rule, without re-running them.

    PYTHONPATH=. python experiments/user_level/regrade_slopes.py experiments/user_level/results/user-level-convex-erm ...

For D5 (user-level-convex-erm), D6 (user-level-strongly-convex) and D8 (user-level-phased-sco), whose full
protocols take 10-30 minutes: the per-run rows of the kept ``results.csv`` are regrouped into the cells of each
slope claim (in the order the figure wrote them) and judged by ``dpjax.reproduce.user_level.claims.slope_claim``
(``dpjax.sweep.select.slope_verdict``: >= 4 points over >= 1 decade, 90 % bootstrap interval over the runs,
paired where the cells share their run keys), exactly as a new run of the figure would; the other claims
of the kept report are left as they are. Rewrites the claims table of ``report.md`` and the counts in
``meta.json``. Checked against fresh quick runs: the regraded quick reports equal them claim for claim.
"""

from __future__ import annotations

import csv
import json
import pathlib
import sys

import numpy as np

from dpjax.reproduce import report, user_level as U


def _cells(rows, algorithm, **match):
    """Consecutive blocks of ``algorithm``'s per-run rows (trial 0, 1, ...) as [(n, m, d, values)]."""
    cells, cur = [], None
    for r in rows:
        if r["algorithm"] != algorithm or any(float(r[k]) != v for k, v in match.items()):
            continue
        key = (int(r["n"]), int(r["m"]), int(r["d"]))
        if cur is None or int(r["trial"]) == 0 or key != cur[0]:
            cur = (key, [])
            cells.append(cur)
        cur[1].append(float(r["value"]))
    return [(*k, np.array(v)) for k, v in cells]


def _split(cells, sizes):
    out, i = [], 0
    for s in sizes:
        out.append(cells[i:i + s])
        i += s
    if i != len(cells):
        raise ValueError(f"expected {sum(sizes)} cells, found {len(cells)}")
    return out


def _claim(old_text, name, cells, axis, theory, setting, **kw):
    xs = [c["nmd".index(axis)] for c in cells]
    return old_text, U.claims.slope_claim(name, xs, [c[3] for c in cells], theory, setting, paired=True, **kw)


def d5(rows, quick):
    k = 4 if quick else 5
    fixed = _split(_cells(rows, "Phased-ERM M' (huber w=0.1)"), [k, k, k, k, 3])
    m, n, d, d400, noisy = fixed
    b1 = _cells(rows, "Phased-ERM with B1 noise (huber w=0.1)")
    tied_cells = _cells(rows, "Phased-ERM M' (tied curvature mu = lambda)")  # absent in runs before the panel
    tm, tn, td = _split(tied_cells, [k, k, k]) if tied_cells else ([], [], [])
    exp, upper = "Phased-ERM excess risk vs {} (Theorem 4.1 exponent)", \
        "excess risk decays at least at the theorem's rate in {} (Theorem 4.1 is an upper bound)"
    old_up = "excess risk decays at least at the theorem's rate in {} (slope <= {:+.2f} + 0.15; Theorem 4.1 is an upper bound)"
    tied = "Phased-ERM excess risk vs {} on the tied-curvature instance (Theorem 4.1 exponent)"
    return [lambda s: _claim(exp.format("m") + ": log-log slope -0.50 +- 0.15", exp.format("m"), m, "m", -0.5, s),
            lambda s: _claim(old_up.format("m", -0.5), upper.format("m"), m, "m", -0.5, s, side="at_most"),
            lambda s: _claim("B1 noise inside Phased-ERM is flat in m (|slope| <= 0.15)",
                             "B1 noise inside Phased-ERM is flat in m", b1, "m", 0.0, s),
            lambda s: _claim(exp.format("n") + ": log-log slope -1.00 +- 0.15", exp.format("n"), n, "n", -1.0, s),
            lambda s: _claim(old_up.format("n", -1.0), upper.format("n"), n, "n", -1.0, s, side="at_most"),
            lambda s: _claim(exp.format("d") + ": log-log slope +0.50 +- 0.15", exp.format("d"), d, "d", 0.5, s),
            lambda s: _claim(exp.format("d (n=400)") + ": log-log slope +0.50 +- 0.15", exp.format("d (n=400)"),
                             d400, "d", 0.5, s),
            lambda s: _claim(old_up.format("m (noisy labels)", -0.5), upper.format("m (noisy labels)"), noisy, "m",
                             -0.5, s, side="at_most"),
            *[lambda s, a=a, c=c, t=t: _claim(tied.format(a) + f": log-log slope {t:+.2f} +- 0.15", tied.format(a),
                                              c, a, t, s) for a, c, t in (("m", tm, -0.5), ("n", tn, -1.0),
                                                                          ("d", td, 0.5)) if tied_cells]]


def d6(rows, quick):
    k = 4 if quick else 5
    a5m, a5n = _split(_cells(rows, "A5 Strongly-Convex-ERM (rate-shape)"), [k, k])
    a6 = _cells(rows, "A6 Strongly-Convex-SCO A4b (rate-shape)", rho=1.0)
    name = "A5 ERM excess risk vs {} (Theorem 4.3)"
    a6name = "A6 SCO excess population risk vs n (the 1/(nm) term dominates when d < n)"
    return [lambda s: _claim(name.format("m") + ": log-log slope -1.00 +- 0.15", name.format("m"), a5m, "m", -1.0, s),
            lambda s: _claim(name.format("n") + ": log-log slope -2.00 +- 0.15", name.format("n"), a5n, "n", -2.0, s),
            lambda s: _claim(a6name + ": log-log slope -1.00 +- 0.15", a6name, a6, "n", -1.0, s)]


def d8(rows, quick):
    a4, a4b = (_cells(rows, f"{v} Phased-SCO (rate-shape)")[-4:] for v in ("A4", "A4b"))
    tail = lambda s: f"{s}; the last 4 m ({a4[0][1]}..{a4[-1][1]})"  # noqa: E731
    return [lambda s: _claim("A4 (as printed) plateaus in m: slope over the last 3 m >= -0.15",
                             "A4 (as printed) plateaus in m", a4, "m", 0.0, tail(s), side="at_least"),
            lambda s: _claim("A4b (equal split) keeps decreasing: slope over the last 3 m <= -0.35",
                             "A4b (equal split) keeps decreasing", a4b, "m", -0.5, tail(s), side="at_most")]


FIGURES = {"user-level-convex-erm": d5, "user-level-strongly-convex": d6, "user-level-phased-sco": d8}


def _cells_of_line(line):
    """The 4 cells of a claims-table row; only the claim text may hold a "|" (e.g. "|slope|")."""
    cells = line.strip()[1:-1].split("|")
    return [c.strip() for c in ["|".join(cells[:-3]), *cells[-3:]]]


def regrade(out: pathlib.Path) -> list[tuple[str, str, str]]:
    meta = json.loads((out / "meta.json").read_text())
    name, quick = meta["figure"], bool(meta["quick"])
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    makers = FIGURES[name](rows, quick)
    lines = (out / "report.md").read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("## Expected outcomes"))
    head = next(i for i in range(start, len(lines)) if lines[i].startswith("| expected outcome"))
    end = next(i for i in range(head + 2, len(lines)) if not lines[i].startswith("|"))
    table = [_cells_of_line(l) for l in lines[head + 2:end]]
    new_rows, changed, used = [], [], 0
    for claim, setting, measured, holds in table:
        for make in makers:
            old_text, c = make(setting)
            if old_text == claim or c["claim"] == claim:
                used += 1
                cell = U.outputs.verdict_cell(c)
                changed.append((c["claim"], f"{measured} -> {c['measured']}", f"{holds} -> {cell}"))
                new_rows.append([c["claim"], c["setting"], c["measured"], cell])
                break
        else:
            new_rows.append([claim, setting, measured, holds])
    if used != len(makers):
        raise ValueError(f"{out}: matched {used} of {len(makers)} slope claims")
    held = sum(r[3] == "yes" for r in new_rows)
    open_ = sum(r[3].startswith("inconclusive") for r in new_rows)
    header = f"## Expected outcomes ({held}/{len(new_rows)} hold" + (f", {open_} inconclusive" if open_ else "") + ")"
    body = [header, "", U.claims.select_rule_line() + " Regraded from the kept results.csv "
            "(experiments/user_level/regrade_slopes.py; nothing re-run).", "",
            report.markdown_table(new_rows, ["expected outcome", "setting", "measured", "holds"])]
    lines = lines[:start] + body + lines[end:]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    meta.update(claims_held=held, claims_inconclusive=open_, claims=len(new_rows))
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return changed


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(f"## {arg}")
        for claim, measured, verdict in regrade(pathlib.Path(arg)):
            print(f"* {claim}: {measured}; {verdict}")
