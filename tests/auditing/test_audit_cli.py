"""`dpjax audit`: report files, exit codes, refusing to overwrite or to run on bad input."""

import json
import os

import pytest

from dpjax.cli import main


def test_audit_writes_markdown_and_json(tmp_path, capsys):
    out = tmp_path / "report"
    code = main(["audit", "dp-gd", "--runs", "400", "--out", str(out)])
    assert code in (0, 1)  # 400 runs may not catch the half-noise mutant; the report says which
    data = json.loads((out / "audit.json").read_text())
    (audit,) = data["audits"]
    assert audit["name"] == "dp-gd" and audit["runs_per_dataset"] == 400
    assert audit["lower_bound"]["epsilon"] < audit["certificate"]["epsilon"]
    assert audit["details"]["family"] == "dp-gd" and audit["exact"]["epsilon"] > 0
    assert {m["name"] for m in audit["mutants"]} == {"half-noise", "noise-not-scaled-by-clip"}
    assert data["meta"]["passed"] == (code == 0)
    assert audit["passed"] == (audit["below_certificate"] and audit["below_exact"]
                               and all(m["caught"] for m in audit["mutants"]))
    md = (out / "audit.md").read_text()
    assert "| dp-gd |" in md and "Diff2GD.privacy" in md
    # a second run into the same directory is refused before any compute
    assert main(["audit", "dp-gd", "--runs", "400", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err


@pytest.mark.parametrize("argv,needle", [
    (["audit"], "mechanisms=[]"),
    (["audit", "nope"], "mechanism='nope'"),
    (["audit", "dp-gd", "--all"], "not both"),
    (["audit", "dp-gd", "--runs", "1"], "runs=1"),
    (["audit", "dp-gd", "--confidence", "1.5"], "confidence=1.5"),
    # flags of the other kind of audit are refused, not ignored
    (["audit", "training", "--runs", "5"], "--runs=5"),
    (["audit", "dp-ftrl", "--family", "isrl-mbsgd"], "--family isrl-mbsgd"),
    (["audit", "dp-fedavg", "--mutant", "no-clip"], "--mutant no-clip"),
    (["audit", "dp-gd", "--rounds", "8"], "--rounds 8"),
    (["audit", "--all", "--canaries", "100"], "--canaries 100"),
    # bounded: a schedule of 10^9 rounds is refused up front (it was a MemoryError from the evaluation schedule)
    (["audit", "training", "--rounds", "1000000000", "--family", "isrl-mbsgd", "--mutant", "none", "--canaries",
      "1000"], "rounds=1000000000"),
])
def test_bad_input_is_one_line_and_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["audit", "dp-gd", "--out", str(f)]) == 2
    assert "is a file" in capsys.readouterr().err


def test_bad_input_leaves_no_output_directory(tmp_path):
    out = tmp_path / "new" / "report"
    assert main(["audit", "nope", "--out", str(out)]) == 2
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("argv", [["audit", "dp-gd"], ["audit", "training"]])
def test_both_audit_commands_check_out_the_same_way(tmp_path, capsys, argv):
    """`dpjax audit` and `dpjax audit training` share one --out check: a file, an existing report of
    theirs (without --overwrite) and an unwritable parent are refused before anything runs."""
    f = tmp_path / "file"
    f.write_text("x")
    assert main(argv + ["--out", str(f)]) == 2
    assert "is a file" in capsys.readouterr().err
    (tmp_path / "locked").mkdir(mode=0o500)
    if not os.access(tmp_path / "locked", os.W_OK):  # root may write anyway
        assert main(argv + ["--out", str(tmp_path / "locked" / "report")]) == 2
        assert "is not writable" in capsys.readouterr().err
    kept = tmp_path / "kept"
    kept.mkdir()
    report = "audit.md" if argv[-1] != "training" else "training_audit.md"
    (kept / report).write_text("an earlier report")
    assert main(argv + ["--out", str(kept)]) == 2
    assert "--overwrite" in capsys.readouterr().err and (kept / report).read_text() == "an earlier report"
