"""One run's silos over devices from the commands a user types (``dpjax sweep / run --silo-devices``, the ``[run]``
table; ``dpjax.engine.silo_sharding``): equal to the same command without it, refused with one line when it cannot
be done. The 8-device cases run in a fresh process (tests/sweep/silo_sharding_cli_check.py)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from dpjax import cli
from dpjax.sweep import SweepConfig
from tests.sweep.conftest import TINY

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_commands_with_silo_devices_equal_the_commands_without_on_8_host_devices():
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=8",
               PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, str(REPO / "tests" / "sweep" / "silo_sharding_cli_check.py")], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = {" ".join(ln.split()[:3]): ln for ln in r.stdout.splitlines()
             if ln.startswith(("sweep ", "run ", "refused "))}
    # "exact" and "blocks" (against one device with the same block: the unblocked program here, whose bits the
    # blocked one keeps for this model) store the unsharded sweep's bits; so does the [run] table
    for case in ("sweep exact devices=8", "sweep exact devices=2", "sweep blocks devices=4",
                 "sweep table devices=8"):
        assert "IDENTICAL" in lines[case], r.stdout
    # per-silo: each device computes its silos; XLA may round a fused value differently (last bits). A float32
    # rounding (eps = 1.2e-7) per message coordinate, summed over <= 25 silos and 4 rounds, bounds the relative
    # difference by 100 eps ~ 1.2e-5. Per-silo draws that depended on the layout would instead move every noisy run
    # by its noise (noise_multiplier 0.5 of a clip norm per round, or the task's sigma): orders of magnitude more.
    for case in ("sweep per-silo devices=8", "run per-silo devices=5"):
        diff = float(lines[case].split("max_rel_diff=")[1])
        assert diff <= 1.2e-5, lines[case]
    assert "must be a multiple of the number of devices" in lines["refused --silo-devices 3:"], r.stdout
    assert "run.silo_devices=9 asks for more devices than there are: 8 device(s)" in lines["refused --silo-devices 9:"]
    assert "silo_block=4 must divide the silos per device" in lines["refused --silo-devices 8"], r.stdout


def _sweep_error(tmp_path, capsys, flags, config=TINY) -> str:
    path = tmp_path / "c.toml"
    path.write_text(config)
    try:
        rc = cli.main(["sweep", str(path), "--out", str(tmp_path / "o"), "--quiet", *flags])
    except SystemExit as stop:  # argparse's refusal of a flag's value
        rc = stop.code
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.startswith("dpjax: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("flags, message", [
    (["--silo-devices", "0"], r"--silo-devices=0 must be >= 1 \(a number of devices\) or 'all'"),
    (["--silo-devices", "-1"], r"--silo-devices=-1 must be >= 1"),
    (["--silo-devices", "two"], r"--silo-devices='two' must be a number of devices \(an int >= 1\) or 'all'"),
    (["--silo-compute", "fast"], r"argument --silo-compute: invalid choice: 'fast'"),
    (["--silo-block", "0"], r"--silo-block=0 must be >= 1"),
])
def test_bad_silo_flags_are_refused_before_anything_runs(tmp_path, capsys, flags, message):
    line = _sweep_error(tmp_path, capsys, flags)
    assert re.search(message, line), line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flags, message", [
    (["--silo-devices", "2"], r"run.silo_devices=2 asks for more devices than there are: 1 device\(s\) available"),
    (["--silo-compute", "per-silo"], r"run.silo_compute='per-silo' needs run.silo_devices"),
    (["--silo-devices", "1", "--silo-compute", "blocks"], r"silo_compute='blocks' needs run.silo_block"),
    (["--silo-devices", "1", "--silo-block", "2", "--silo-compute", "per-silo"], r"use silo_compute = 'blocks'"),
])
def test_inconsistent_silo_flags_name_the_option(tmp_path, capsys, flags, message):
    assert re.search(message, _sweep_error(tmp_path, capsys, flags))


@pytest.mark.parametrize("table, message", [
    ("silo_devices = 0", r"run.silo_devices=0 must be >= 1"),
    ("silo_devices = true", r"run.silo_devices=True must be a number of devices"),
    ("silo_devices = [0, 1]", r"run.silo_devices=\[0, 1\] must be a number of devices"),
    ("silo_devices = 'all'\nsilo_compute = 'sharded'", r"run.silo_compute='sharded' must be one of"),
    ("silo_devices = 'all'\nsilo_block = -2", r"run.silo_block=-2 must be >= 1"),
    ("devices = 2", r"run.devices is not a known key; known: \('silo_devices', 'silo_compute', 'silo_block'\)"),
])
def test_bad_run_tables_name_the_key(table, message):
    d = {"name": "t", "algorithm": "isrl-mbsgd", "num_rounds": 2, "data": {"name": "synthetic-logistic"},
         "grid": {"learning_rate": [0.1]}}
    import tomllib
    d["run"] = tomllib.loads(table)
    with pytest.raises(ValueError, match=message):
        SweepConfig.from_dict(d)


def test_layouts_that_keep_the_bits_are_not_part_of_the_sweep(tmp_path, capsys):
    """``silo_devices`` (and "exact") leave the stored identity as without a [run] table, so a sweep resumes on
    another device count; ``silo_block`` / "per-silo" change the program and are part of it."""
    import tomllib
    d = tomllib.loads(TINY)
    plain = SweepConfig.from_dict(d).to_dict()
    assert SweepConfig.from_dict({**d, "run": {"silo_devices": 1}}).to_dict() == plain
    blocked = SweepConfig.from_dict({**d, "run": {"silo_devices": "all", "silo_compute": "blocks", "silo_block": 1}})
    assert blocked.to_dict()["run"] == {"silo_block": 1} and blocked.to_dict() != plain
    per_silo = SweepConfig.from_dict({**d, "run": {"silo_devices": 2, "silo_compute": "per-silo"}}).to_dict()
    assert per_silo["run"] == {"silo_compute": "per-silo"}


def test_a_command_that_runs_no_grid_says_the_flags_did_nothing(capsys):
    import argparse

    from dpjax import _silo_flags, progress
    from dpjax.engine import silo_sharding
    args = argparse.Namespace(silo_devices=1, silo_compute=None, silo_block=None)
    progress.configure(quiet=False)
    with _silo_flags.command_layout(args) as layout:
        assert silo_sharding.current_layout() is layout and layout.silo_compute == "exact"
    assert silo_sharding.current_layout() is None
    assert "note: --silo-devices did nothing" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"--silo-devices=3 asks for more devices than there are"):
        _silo_flags.command_layout(argparse.Namespace(silo_devices=3, silo_compute=None, silo_block=None))
    with pytest.raises(ValueError, match=r"--silo-block needs --silo-devices"):
        _silo_flags.command_layout(argparse.Namespace(silo_devices=None, silo_compute=None, silo_block=2))
