"""`dpjax reproduce shuffling-gap` at reduced size: files, invariants, and the three labelled numbers of every
shuffled configuration in the report."""

import csv

import pytest

from dpjax.reproduce import shuffling_gap as sg
from tests.reproduce import missing_labels

pytestmark = pytest.mark.privacy


def test_reduced_figure_writes_table_figure_report(tmp_path, monkeypatch):
    monkeypatch.setattr(sg, "QUICK", {"steps_per_epoch": (20,), "epochs": (1, 2), "sigmas": (0.8, 2.0),
                                      "delta": 1e-6})
    # a small van Dijk-style configuration (the name carries m = 1, s = 10, as the module's names do)
    monkeypatch.setattr(sg, "VAN_DIJK", {"small (m=1, s=10)": dict(m=1, s=10, n=200, epochs=2, sigma_vd=1.0)})
    monkeypatch.setattr(sg, "VAN_DIJK_QUICK", ("small (m=1, s=10)",))
    path = sg.shuffling_gap(tmp_path, quick=True, seed=0)
    text = path.read_text()
    assert (tmp_path / "shuffling_gap.png").exists() and (tmp_path / "meta.json").exists()
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:6] == ["algorithm", "epsilon", "trial", "metric", "value", "accountant"]
    cell = {(r["algorithm"], int(r["E"]), float(r["sigma"])): float(r["value"]) for r in rows}
    for e in (1, 2):
        for z in (0.8, 2.0):
            assert cell[("shuffle lower bound", e, z)] <= cell[("deterministic", e, z)] + 1e-6
    assert cell[("shuffle lower bound", 1, 0.8)] > cell[("poisson", 1, 0.8)]  # the papers' regime: small sigma
    assert not missing_labels(text.split("van Dijk et al.'s shuffled configurations")[1])
    # the comparison with the authors' code (issue #41): two rows in quick mode, each within 2 %
    against = text.split("## Against the papers")[1]
    assert "NOT values read from the papers" in against.replace("\n", " ")
    diffs = [float(line.split("|")[7]) for line in against.splitlines() if line.startswith("| 1000 ")]
    assert len(diffs) == 2 and all(abs(x) < 0.02 for x in diffs)
    with pytest.raises(ValueError, match="never overwritten"):
        sg.shuffling_gap(tmp_path, quick=True, seed=0)


def test_registered_and_listed():
    from dpjax import reproduce

    assert reproduce.get("shuffling-gap").fn is sg.shuffling_gap
    assert "shuffling-gap" in reproduce.LISTING


def test_figure_is_readable(monkeypatch):
    pytest.importorskip("matplotlib")
    from tests.reproduce.test_figures import _check_all, plt

    config = {"steps_per_epoch": (20, 50), "epochs": (1, 2), "sigmas": (1.0, 2.0), "delta": 1e-6}
    rows = [{"algorithm": a, "T": t, "E": e, "sigma": z, "value": v * (1 + e) / z, "metric": a, "accountant": "x"}
            for t in (20, 50) for e in (1, 2) for z in (1.0, 2.0)
            for a, v in (("deterministic", 3.0), ("shuffle lower bound", 2.0), ("poisson", 0.5))]
    rows += [{"algorithm": "small (m=1, s=10)", "T": 20, "E": 2, "sigma": 2.0, "value": v, "metric": m,
              "accountant": "x"} for m, v in (("certified", 3.0), ("poisson", 0.2), ("lower bound", 0.4))]
    plt.close("all")
    monkeypatch.setattr(plt, "close", lambda *a, **k: None)
    sg.plot(pytest.importorskip("pathlib").Path("/dev/null"), rows, config)
    monkeypatch.undo()
    _check_all([plt.figure(n) for n in plt.get_fignums()], 1)
