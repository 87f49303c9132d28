"""experiments/coverage/privacy_branches.py: the table it prints from a coverage JSON report, its --min gate and
its refusals (the measurement itself runs the privacy suite: CI's slow pass runs it, not this test)."""

import importlib.util
import json
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("privacy_branches", REPO / "experiments/coverage/privacy_branches.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report(module, covered_fraction):
    # every grouped file with 10 branches, covered_fraction of them covered; the missing ones at line 1 -> 2
    files = {}
    for paths in module._files().values():
        for p in paths:
            c = int(10 * covered_fraction)
            files[str(p.relative_to(REPO))] = {"summary": {"num_branches": 10, "covered_branches": c},
                                               "missing_branches": [[1, 2]] * (10 - c)}
    return {"files": files}


def test_table_sums_branches_per_group_and_lists_the_missing():
    m = _script()
    groups, files, missing = m.table(_report(m, 0.9))
    assert {g[0] for g in groups} == set(m.GROUPS)
    for name, n, c, pct in groups:
        assert n == 10 * len(m._files()[name]) and c == 9 * len(m._files()[name]) and pct == pytest.approx(90.0)
    assert len(missing) == len(files) and all(r[1:3] == (1, 2) for r in missing)
    assert "dpjax/engine/contract.py" in {f[0] for f in files}
    assert not any(f[0] in m.EXCLUDED for f in files)


def test_min_gate_and_refusals(tmp_path, capsys):
    m = _script()
    data = tmp_path / "cov.json"
    data.write_text(json.dumps(_report(m, 0.9)))
    assert m.main(["--data", str(data), "--min", "85"]) == 0
    assert m.main(["--data", str(data), "--min", "95"]) == 1
    assert "FAIL: primitives branch coverage 90.00 % < 95.0 %" in capsys.readouterr().err
    assert m.main(["--data", str(tmp_path / "none.json")]) == 2
    assert m.main(["--data", str(data), "--min", "120"]) == 2


def test_gate_checks_every_group_and_the_whole_against_the_floors(tmp_path, capsys):
    m = _script()
    assert set(m.FLOORS) == set(m.GROUPS) | {"all"} and all(80 <= v <= 100 for v in m.FLOORS.values())
    data = tmp_path / "cov.json"
    data.write_text(json.dumps(_report(m, 1.0)))
    assert m.main(["--data", str(data), "--gate"]) == 0
    data.write_text(json.dumps(_report(m, 0.9)))  # 90 % everywhere: below every floor
    assert m.main(["--data", str(data), "--gate"]) == 1
    err = capsys.readouterr().err
    for name in m.FLOORS:
        assert f"FAIL: {name} branch coverage 90.00 %" in err
