"""A bad sweep config is refused before jax loads, every problem at once; every infeasible epsilon at once;
``--show NAME`` prints a packaged config and ``--help`` describes the file (issue #39, newcomer 5)."""

import subprocess
import sys
import textwrap

import pytest

from dpjax.cli import main
from dpjax.sweep import cli as sweep_cli

BAD = textwrap.dedent("""
    name = "bad"
    algorithm = "dp-ftrl"
    num_rounds = 40
    seed = -1
    data = { name = "synthetic-logistic", num_silos = 4, n = 64, dim = 5 }
    privacy = { accountant = "rdpp", delta = 1e-5 }
    [grid]
    learning_rate = [0.1, -1.0]
    epsilon = [2.0, 0]
""")


def test_bad_config_is_refused_before_jax_with_every_problem(tmp_path):
    (tmp_path / "bad.toml").write_text(BAD)
    code = ("import sys; from dpjax.cli import main; rc = main(['sweep', 'bad.toml', '--out', 'o']); "
            "assert rc == 2, rc; assert 'jax' not in sys.modules, 'jax imported'")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("dpjax: error: 4 problem(s) in the config")
    for needle in ("seed=-1", "grid.learning_rate[1]=-1.0", "grid.epsilon[1]=0", "privacy.accountant='rdpp'"):
        assert needle in line, needle
    assert not (tmp_path / "o").exists()


def test_unknown_algorithm_is_refused_before_jax(tmp_path):
    (tmp_path / "a.toml").write_text(BAD.replace('"dp-ftrl"', '"dp-ftlr"').replace("seed = -1", "seed = 0")
                                     .replace('"rdpp"', '"rdp"').replace("-1.0", "1.0").replace(", 0]", ", 1.0]"))
    code = ("import sys; from dpjax.cli import main; rc = main(['sweep', 'a.toml', '--out', 'o']); "
            "assert rc == 2, rc; assert 'jax' not in sys.modules, 'jax imported'")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "algorithm='dp-ftlr' is unknown" in res.stderr and "'dp-ftrl'" in res.stderr


def test_every_infeasible_epsilon_is_named_at_once(tmp_path, capsys):
    """delta = 0.5 needs (almost) no noise: 1e10 and 1e11 are met below the smallest noise multiplier, 2 is not."""
    cfg = BAD.replace("seed = -1", "seed = 0").replace('"rdpp", delta = 1e-5', '"rdp", delta = 0.5') \
        .replace("[0.1, -1.0]", "[0.1]").replace("[2.0, 0]", "[1e10, 2.0, 1e11]")
    cfg = cfg.replace("[grid]", "static = { batch_size = 8 }\n[grid]\nclip_norm = [1.0]")
    (tmp_path / "e.toml").write_text(cfg)
    assert main(["sweep", str(tmp_path / "e.toml"), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "grid.epsilon: 2 of 3 value(s) cannot be calibrated" in line
    assert "epsilon=1e+10:" in line and "epsilon=1e+11:" in line and "epsilon=2:" not in line


def test_show_prints_a_packaged_config(capsys):
    assert main(["sweep", "--show", "dp_ftrl_tree"]) == 0
    assert capsys.readouterr().out == sweep_cli.packaged_configs()["dp_ftrl_tree"].read_text(encoding="utf-8")
    assert main(["sweep", "--show", "nope"]) == 2
    assert "config='nope'" in capsys.readouterr().err
    assert main(["sweep", "--show", "dp_ftrl_tree", "--list"]) == 2
    assert "exclusive" in capsys.readouterr().err


def test_help_describes_the_toml_layout(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = capsys.readouterr().out
    for needle in ("[static]", "[data]", "[privacy]", "[grid]", "logspace", "repetition", "--show NAME"):
        assert needle in text, needle
