"""`dpjax sweep --list` and `dpjax sweep NAME`: the configs shipped inside the package, by name."""

import pytest

from dpjax.cli import main
from dpjax.sweep import cli as sweep_cli


def test_list_names_every_packaged_config_with_a_description(capsys):
    assert main(["sweep", "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    names = sorted(p.stem for p in sweep_cli.CONFIGS_DIR.glob("*.toml"))
    assert len(names) >= 4 and [ln.split()[0] for ln in lines] == names
    for line in lines:
        description = line.split(None, 1)[1]
        assert len(description) > 20 and "no description" not in description, line


@pytest.mark.parametrize("given", ["dp_ftrl_tree", "dp_ftrl_tree.toml"])
def test_a_name_with_or_without_toml_is_the_packaged_file(given, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert sweep_cli.resolve_config(given) == sweep_cli.CONFIGS_DIR / "dp_ftrl_tree.toml"


def test_a_local_file_wins_over_a_packaged_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dp_ftrl_tree.toml").write_text("name = 'mine'\n")
    assert sweep_cli.resolve_config("dp_ftrl_tree.toml").resolve() == (tmp_path / "dp_ftrl_tree.toml").resolve()


def test_unknown_name_is_one_line_listing_the_names(tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["sweep", "fig4", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dpjax: error: config='fig4' is neither a file nor a packaged config")
    assert all(name in err[0] for name in sweep_cli.packaged_configs())
    assert not out.exists()


@pytest.mark.parametrize("argv,needle", [
    (["sweep"], "give a CONFIG"),
    (["sweep", "dp_ftrl_tree"], "the following arguments are required: --out"),
    (["sweep", "--list", "dp_ftrl_tree"], "--list takes no CONFIG"),
])
def test_missing_arguments_are_one_line(argv, needle, capsys):
    assert main(argv) == 2
    assert needle in capsys.readouterr().err
