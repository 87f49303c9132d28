"""``dpjax run isrl-mnist-trial --distributed --silo-devices all``: one trial's runs over the devices of several
processes (JAX's multi-process runtime on 127.0.0.1) write, from process 0 only, the results of the same command in one
process (to float32 rounding); the other processes leave nothing behind. (#38: ``--distributed`` for run/reproduce.)"""

import pathlib
import subprocess
import sys

import pandas as pd
import pytest

from dpjax import cli
from tests._shared import mnist_data_dir
from tests.sweep.test_multihost import REPO, _clean_env, _free_port

PROCESSES = 5  # 25 silos over 5 processes x 1 device
TASK = ["run", "isrl-mnist-trial", "--rounds", "2", "--repetitions", "1", "--learning-rates", "0.1", "1.0",
        "--no-baseline", "--quiet"]


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory):
    return mnist_data_dir(tmp_path_factory)


@pytest.mark.slow
def test_one_trial_over_five_processes_equals_one_process(tmp_path, mnist_dir):
    ref = tmp_path / "ref"
    assert cli.main(TASK + ["--data-dir", str(mnist_dir), "--out", str(ref)]) == 0
    port = _free_port()
    out = tmp_path / "shared"
    env = _clean_env(XLA_FLAGS="--xla_force_host_platform_device_count=1",
                     JAX_COORDINATOR_BIND_ADDRESS=f"127.0.0.1:{port}")
    base = [sys.executable, "-m", "dpjax.cli", *TASK, "--data-dir", str(mnist_dir), "--out", str(out),
            "--silo-devices", "all", "--distributed", "--coordinator", f"127.0.0.1:{port}",
            "--num-processes", str(PROCESSES), "--init-timeout", "120", "--shutdown-timeout", "300"]
    procs = []
    try:
        for i in range(PROCESSES):
            procs.append(subprocess.Popen(base + ["--process-id", str(i)], cwd=REPO, env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        logs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for i, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"process {i}:\n{log[-3000:]}"
    assert all(f"process {i} of {PROCESSES}" in logs[i] for i in range(1, PROCESSES)), logs[1]
    a, b = pd.read_csv(ref / "results.csv"), pd.read_csv(out / "results.csv")
    num = [c for c in a.columns if pd.api.types.is_float_dtype(a[c])]
    rel = max(float(((a[c] - b[c]).abs() / a[c].abs().clip(lower=1e-3)).max()) for c in num)
    # Measured 9.6e-8 (one float32 ulp in one of 8 losses): across processes the evaluation's reduction over the
    # silos is compiled differently; within one process --silo-compute exact keeps the bits (test_silo_sharding_cli).
    assert rel <= 1e-6, rel
    pd.testing.assert_frame_equal(a.drop(columns=num), b.drop(columns=num), check_exact=True)
    assert sorted(pathlib.Path(tmp_path).iterdir()) == [ref, out]  # followers wrote into scratch dirs only


@pytest.mark.parametrize("flags, message", [
    (["--distributed"], "needs --silo-devices all"),
    (["--distributed", "--silo-devices", "2"], "needs --silo-devices all"),
    (["--coordinator", "127.0.0.1:1234"], "--coordinator needs --distributed"),
    (["--num-processes", "2"], "--num-processes needs --distributed"),
])
def test_distributed_flags_are_checked_before_anything_runs(tmp_path, capsys, flags, message):
    for command in (TASK, ["reproduce", "isrl-mnist", "--quick"]):
        assert cli.main(command + ["--out", str(tmp_path / "x"), *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert not (tmp_path / "x").exists()
