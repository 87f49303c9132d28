"""The batch-clipping-privacy report's checks table: every check has a holds column computed from the
numbers (synthetic rows; no accounting run), and a kept run's report regenerates from its files."""

import csv

from dpjax.reproduce import batch_clipping_privacy as B


def _rows(*, ic_above=True, printed_fails=True, audit_ok=True):
    rows = [{"demo": "N1", "key": f"g={g}", "metric": "min(exact - G_sqrt(gE)/sigma)", "value": 1e-12 * g}
            for g in (1, 2)]
    for g, bound in ((1, 7.5), (2, 11.48)):
        rows += [{"demo": "N3", "key": f"shuffle-individual g={g}", "metric": "exact epsilon",
                  "value": bound + (0.01 if ic_above and g > 1 else 0.0)},
                 {"demo": "N3", "key": f"g={g}", "metric": "epsilon G_sqrt(gE)/sigma", "value": bound}]
    rows += [{"demo": "N4", "key": f"E={e}", "metric": "max(paper f^L - exact f) (>0: printed bound fails)",
              "value": (5e-5 if printed_fails and e == 10 else -1e-3)} for e in (1, 10)]
    rows += [{"demo": "N4", "key": "E=100 eps=30.0", "metric": m, "value": v}
             for m, v in (("exact delta", 3e-4), ("paper delta_GDP(mu_L) + l", 4e-4))]
    rows += [{"demo": "N5", "key": f"ms/N={r}", "metric": "strong exact", "value": v} for r, v in ((0.01, 9.18),
                                                                                                   (0.1, 9.03))]
    rows += [{"demo": "N6", "key": "N=10000 g=2 eps*=11.480", "metric": m, "value": v}
             for m, v in (("exact delta at eps*", 1.7e-5), ("floor E g^2 ms/(N-g)", 1.0))]
    rows += [{"demo": "N8", "key": "mixture audit (Lemma B.5)", "metric": "min(beta_emp - f(alpha_emp))", "value": -2e-3},
             {"demo": "N8", "key": "mixture audit (Lemma B.5)", "metric": "all points on/above curve",
              "value": audit_ok}]
    return rows


def test_checks_have_a_holds_column_that_follows_the_numbers():
    got = {c[0].split(":")[0]: c[2] for c in B.checks(_rows())}
    assert got["paper (sqrt(g) law)"] == "yes"
    assert got["paper (Table 1 row 4)"] == "**no**" and got["paper (Lemmas E.2/E.3)"] == "**no**"
    assert got["paper (V12)"] == "yes"  # the printed delta is above the exact one here
    assert all(v == "yes" for k, v in got.items() if k.startswith("accountant"))
    got = {c[0].split(":")[0]: c[2] for c in B.checks(_rows(ic_above=False, printed_fails=False, audit_ok="False"))}
    assert got["paper (Table 1 row 4)"] == "yes" and got["paper (Lemmas E.2/E.3)"] == "yes"
    assert got["accountant (Monte-Carlo audit"] == "**no**"  # a CSV "False" is false


def test_report_lists_the_checks_first(tmp_path):
    rows = _rows()
    table = [{"row": "3 SH-1", "g": 1, "mu_L": 1.58, "l": 0.0, "mu_U": 1.58, "u": 0.0, "paper_epsilon": 7.51,
              "exact_epsilon": 7.51, "valid": True}]
    rows += [{"demo": "N3", "key": f"{k} g={g}", "metric": "exact epsilon", "value": 7.5}
             for g in (1, 2) for k in ("shuffle-batch", "subsample-batch", "subsample-individual")]
    rows += [{"demo": "N3", "key": f"g={g}", "metric": "epsilon G_g sqrt(E)/sigma", "value": 7.5} for g in (1, 2)]
    rows += [{"demo": "N4", "key": f"E={e}", "metric": m, "value": 0.1} for e in (1, 10, 100)
             for m in ("paper tail e^-E", "exact Pr[c^2 > (c^L)^2]", "exact Pr[c^2 < (c^U)^2]", "exact epsilon",
                       "paper lower-bound epsilon")]
    rows += [{"demo": "N4", "key": "E=100", "metric": "max(paper f^L - exact f) (>0: printed bound fails)",
              "value": -1.0}]
    rows += [{"demo": "N4", "key": f"E=100 eps={e}", "metric": m, "value": 1e-5} for e in (20.0, 34.72, 36.0)
             for m in ("exact delta", "paper delta_GDP(mu_L) + l")]
    rows += [{"demo": "N1", "key": f"g={g}", "metric": "min(exact - G_sqrt(gE)/sigma)", "value": 0.0} for g in (4, 8)]
    rows += [{"demo": "N5", "key": f"ms/N={r}", "metric": m, "value": v} for r in (0.01, 0.1)
             for m, v in (("standard rdp (WOR, replace-one)", 1.4), ("standard CLT (reference)", 0.6))]
    rows += [{"demo": "N6", "key": "N=10000 g=2 eps*=11.480", "metric": "paper delta (GDP + E l)", "value": 1.0}]
    rows += [{"demo": "N8", "key": "implementation audit (S4)", "metric": m, "value": v}
             for m, v in (("min(beta_emp - G_sqrt(E)/sigma)", -1e-3), ("max(beta_emp - G_sqrt(E)/sigma)", 6e-3),
                          ("all points on/above curve", True))]
    from dpjax.accounting.shuffle_gap import LABELS
    from tests.reproduce import missing_labels

    rows += [{"demo": "N9", "key": "SH-BC m=1 s=60", "metric": label, "value": v}
             for label, v in zip(LABELS.values(), (8.3, 0.09, 0.03))]
    n8 = ((None, None, None, True), (None, None, None, True))
    text = B.write_report(tmp_path, rows, [(0.01, 9.18, 1.4, 0.6), (0.1, 9.03, 1.4, 0.6)],
                          [(10000, 2, 1.7e-5, 1.0, 1.0)], table, n8,
                          1.0).read_text()
    assert not missing_labels(text.split("## N9")[1].split("## N8")[0])  # the shuffled runs: never one number alone
    head = text.split("## N1, N3")[0]
    assert "## Checks (" in head and "| claim (whose)" in head and "| holds" in head
    with open(tmp_path / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["demo", "key", "metric", "value"])
        w.writeheader()
        w.writerows(rows)
    with open(tmp_path / "table1.csv", "w", newline="") as f:
        w = csv.DictWriter(f, list(table[0]))
        w.writeheader()
        w.writerows(table)
    again = B.report_only(tmp_path, quick=True).read_text()
    assert again.split("## N1, N3")[0].split("## Checks")[1] == head.split("## Checks")[1]
    assert "nothing re-run" in again and "Wall time: 1.0 s." in again
