"""`dpjax --help`, `account`, `reproduce --list`, `sweep --list` and `sweep --algorithms` start without importing jax.

jax (with jaxlib, flax, optax) costs seconds of CPU to import; these commands need none of it. Each runs in a
fresh interpreter so the check sees exactly what the command imports. The listings that make this possible
(``dpjax.cli.COMMAND_HELP``, ``dpjax.reproduce.LISTING``) are checked against what the modules register.
"""

import os
import subprocess
import sys

import pytest

from dpjax import cli, reproduce

ACCOUNT = ["account", "--sampling", "poisson", "--noise-multiplier", "1.1", "--batch-size", "256",
           "--dataset-size", "60000", "--steps", "14062", "--delta", "1e-5", "--neighboring", "add-remove",
           "--accountant", "rdp"]

_PROBE = """
import sys
from dpjax.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code
heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'flax', 'optax', 'chex'))
print('IMPORTED:' + ','.join(heavy), file=sys.stderr)
sys.exit(rc or 0)
"""


def _run(argv, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-c", _PROBE, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("argv,needle", [
    (["--help"], "reproduce a paper figure"),
    (ACCOUNT, "2.59"),
    (["reproduce", "--list"], "user-level-convex-erm"),
    (["sweep", "--list"], "isrl_fig4_mbsgd_appendix_i"),
    (["sweep", "--algorithms"], "fedavg-server-opt"),
    (["sweep", "--help"], "--list"),
    (["plot", "--help"], "--logx"),
], ids=["help", "account", "reproduce-list", "sweep-list", "sweep-algorithms", "sweep-help", "plot-help"])
def test_light_commands_import_no_jax(argv, needle, tmp_path):
    res = _run(argv, tmp_path)
    assert res.returncode == 0, res.stderr
    assert needle in res.stdout
    imported = res.stderr.rsplit("IMPORTED:", 1)[1].strip()
    assert imported == "", f"`dpjax {' '.join(argv)}` imported {imported}"


def test_top_level_help_lines_match_the_commands():
    """`dpjax --help` prints COMMAND_HELP without importing the modules: the lines must be theirs."""
    full = cli.build_parser()
    (sub,) = [a for a in full._actions if a.dest == "command"]
    registered = {c.dest: c.help for c in sub._choices_actions}
    assert registered == cli.COMMAND_HELP
    assert set(cli.COMMAND_MODULES) == set(cli.COMMAND_HELP)


def test_reproduce_listing_matches_the_registered_figures():
    """`reproduce --list` reads LISTING (no figure module imported); every figure must be there as registered."""
    figures = reproduce.figures()
    assert set(reproduce.LISTING) == set(figures)
    for name, fig in figures.items():
        module, paper, description, constructions = reproduce.LISTING[name]
        assert (paper, description, constructions) == (fig.paper, fig.description, fig.constructions), name
        # the module `reproduce NAME` imports registers the figure (itself, or a submodule of a package)
        assert fig.fn.__module__ == module or fig.fn.__module__.startswith(module + "."), name


def test_reproduce_get_imports_only_the_figure_module():
    code = ("import sys; from dpjax import reproduce; fig = reproduce.get('user-level-tail'); "
            "assert fig.name == 'user-level-tail'; "
            "print(sorted(m for m in sys.modules if m.startswith('dpjax.reproduce.')))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "JAX_PLATFORMS": "cpu"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    loaded = eval(res.stdout.strip().splitlines()[-1])
    assert "dpjax.reproduce.user_level" in loaded
    assert not {"dpjax.reproduce.isrl", "dpjax.reproduce.diff2", "dpjax.reproduce.dpsgd_mnist"} & set(loaded)

