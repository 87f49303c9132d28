"""Regression tests of issue 11's findings 7-11 (robustness half); each failed before its fix.

Finding 9's sweep half and finding 10's bad inputs are in test_faults.py and
test_bad_inputs.py; the index is in dpjax/RELIABILITY.md.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.robustness.conftest import REPO, assert_clean_failure, run_cli


# -- finding 7: one data-dir rule, --data-dir everywhere, no paths relative to the package ------------
def test_no_package_code_reads_a_path_relative_to_its_own_files():
    pattern = re.compile(r"parents\[\d+\]\s*/\s*[\"']shared|__file__.*[\"']shared[\"']")
    offenders = [f"{p.relative_to(REPO)}:{i + 1}" for p in (REPO / "dpjax").rglob("*.py")
                 for i, line in enumerate(p.read_text().splitlines()) if pattern.search(line)]
    assert offenders == []


@pytest.fixture
def fake_figure(monkeypatch):
    """A registered figure that reads the obesity CSV through the loaders (synthetic file, fast)."""
    from dpjax import reproduce
    from dpjax.data import load_obesity

    def fn(out_dir, *, quick, seed, data_dir=None):
        raw = load_obesity(data_dir, verify=False)
        report = out_dir / "report.md"
        report.write_text(f"rows={len(raw['y'])} seed={seed}\n")
        return report

    reproduce.figures()
    monkeypatch.setitem(reproduce._REGISTRY, "robust-fake", reproduce.Figure("robust-fake", "test", "test", fn))
    return fn


def _obesity_dir(tmp_path) -> pathlib.Path:
    from tests.data.test_isrl_tabular import _write_obesity

    d = tmp_path / "data"
    (d / "obesity").mkdir(parents=True)
    _write_obesity(d / "obesity" / "ObesityDataSet_raw_and_data_sinthetic.csv")
    return d


def test_reproduce_reads_data_from_flag_then_env_then_says_how(tmp_path, fake_figure, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # an empty cache
    monkeypatch.delenv("DPJAX_DATA_DIR", raising=False)
    d = _obesity_dir(tmp_path)
    code, out, err = run_cli(["reproduce", "robust-fake", "--data-dir", d, "--out", tmp_path / "a"], capsys)
    assert code == 0, err
    assert (tmp_path / "a" / "report.md").read_text().startswith("rows=")
    monkeypatch.setenv("DPJAX_DATA_DIR", str(d))
    code, out, err = run_cli(["reproduce", "robust-fake", "--out", tmp_path / "b"], capsys)
    assert code == 0, err
    monkeypatch.delenv("DPJAX_DATA_DIR")
    code, out, err = run_cli(["reproduce", "robust-fake", "--out", tmp_path / "c"], capsys)
    assert_clean_failure(code, err, "obesity data not found", "--data-dir DIR", "DPJAX_DATA_DIR",
                         str(tmp_path / "cache" / "dpjax"))
    assert not (tmp_path / "c").exists(), "a failed run must not leave an empty output directory"


@pytest.mark.slow
def test_reproduce_isrl_obesity_quick_from_any_directory(tmp_path, real_data):
    """The new user's first command, run outside the repository with --data-dir (finding 7's report)."""
    env = {"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-m", "dpjax.cli", "reproduce", "isrl-obesity", "--quick", "--data-dir",
                        str(real_data), "--out", str(tmp_path / "o")], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "o" / "report.md").is_file()


# -- finding 8: never overwrite a different run's results; check --out before computing ---------------
@pytest.mark.slow
def test_run_never_overwrites_a_different_run_and_reports_divergence(tmp_path, capsys):
    from dpjax.tasks import isrl_mnist
    from tests.tasks.test_isrl_mnist import _synthetic

    out = tmp_path / "run"
    # A step size of 3e38 overflows float32 within a few rounds: every run diverges (finding 10).
    a = isrl_mnist.IsrlMnistConfig(epsilon=2.0, rounds=6, silos_per_round=3, learning_rates=(3e38,), repetitions=1,
                                   baseline=False)
    summary = isrl_mnist.run(a, out, progress=False, dataset=_synthetic())
    assert summary["test_error"] == np.inf and summary["diverged_runs"] == 1
    assert "DIVERGED: every run of the selected step size produced NaN/inf parameters" in \
        isrl_mnist.format_summary(summary)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    b = isrl_mnist.IsrlMnistConfig(**{**a.__dict__, "epsilon": 4.0, "learning_rates": (0.5,)})
    with pytest.raises(ValueError, match="another run's results; pass --overwrite"):
        isrl_mnist.run(b, out, progress=False, dataset=_synthetic())
    # From the CLI the check comes before the data are read (a missing --data-dir would fail later).
    code, _, err = run_cli(["run", "isrl-mnist-trial", "--epsilon", "4", "--data-dir", tmp_path / "none", "--out", out,
                            "--no-progress"], capsys)
    assert_clean_failure(code, err, f"--out={str(out)!r} already holds another run's results", "--overwrite")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert json.loads((out / "config.json").read_text())["epsilon"] == 2.0
    # (--overwrite replacing a run end to end: test_reproduce_out_refuses_another_run_unless_overwrite)


def test_reproduce_out_refuses_another_run_unless_overwrite(tmp_path, fake_figure, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = _obesity_dir(tmp_path)
    base = ["reproduce", "robust-fake", "--data-dir", d, "--out", tmp_path / "o"]
    assert run_cli(base + ["--seed", "1"], capsys)[0] == 0
    assert run_cli(base + ["--seed", "1"], capsys)[0] == 0  # the same run may be repeated
    code, _, err = run_cli(base + ["--seed", "2"], capsys)
    assert_clean_failure(code, err, "--overwrite")
    assert "seed=1" in (tmp_path / "o" / "report.md").read_text()
    assert run_cli(base + ["--seed", "2", "--overwrite"], capsys)[0] == 0
    assert "seed=2" in (tmp_path / "o" / "report.md").read_text()


# -- finding 9: data files checked against their published row counts / checksums ----------------
def test_obesity_csv_cut_at_a_line_boundary_is_refused(tmp_path, real_data):
    from dpjax.data import load_obesity

    src = real_data / "obesity" / "ObesityDataSet_raw_and_data_sinthetic.csv"
    assert len(load_obesity(real_data)["y"]) == 2111  # the published file passes
    cut = tmp_path / "obesity" / src.name
    cut.parent.mkdir()
    cut.write_bytes(b"".join(src.read_bytes().splitlines(keepends=True)[:1001]))  # header + 1000 rows
    with pytest.raises(ValueError, match="has 1000 data rows but the published file has 2111"):
        load_obesity(tmp_path)
    assert len(load_obesity(tmp_path, verify=False)["y"]) == 1000  # explicit opt-out


def test_store_verify_names_row_count_and_checksum_problems(tmp_path):
    import pandas as pd

    from dpjax.sweep.store import Store

    s = Store(tmp_path)
    s.prepare()
    s.write_chunk("c-0001", pd.DataFrame({"run_id": ["a", "b"]}), pd.DataFrame({"run_id": ["a", "a", "b", "b"]}))
    assert s.verify("c-0001", (2, 4)) is None
    assert "the plan has (3, 6)" in s.verify("c-0001", (3, 6))
    assert "never committed" in s.verify("c-0002")
    (tmp_path / "evals" / "c-0001.csv").write_text("run_id\na\n")
    assert "evals/c-0001.csv does not match its manifest" in s.verify("c-0001")


# -- finding 11: `dpjax plot` draws the percentile interval it names -----------------------------------
@pytest.mark.filterwarnings("ignore:No artists with labels")
def test_plot_error_bars_are_the_asymmetric_percentile_interval(tmp_path, monkeypatch):
    import matplotlib.axes
    import pandas as pd

    from dpjax.sweep.plot import plot_store
    from dpjax.sweep.store import Store

    s = Store(tmp_path)
    s.prepare()
    (tmp_path / "config.json").write_text("{}")
    errors = [0.1, 0.1, 0.1, 0.1, 0.9]  # skewed: mean 0.26, 5th pct 0.1, 95th pct 0.74
    s.write_chunk("c-0000", pd.DataFrame({
        "run_id": [f"r{t}" for t in range(5)], "group": 0, "trial": range(5), "repetition": 0, "epsilon": 1.0,
        "learning_rate": 0.1, "train_loss": 0.5, "test_error": errors}), pd.DataFrame({"run_id": ["r0"]}))
    drawn = {}

    def errorbar(self, x, y, yerr=None, **kw):
        drawn["y"], drawn["yerr"] = np.asarray(y, float), np.asarray(yerr, float)

    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", errorbar)
    plot_store(tmp_path, out=tmp_path / "fig.png")
    mean, lo, hi = np.mean(errors), np.percentile(errors, 5), np.percentile(errors, 95)
    np.testing.assert_allclose(drawn["y"], [mean])
    np.testing.assert_allclose(drawn["yerr"][:, 0], [mean - lo, hi - mean])  # not +-(hi - lo)/2
