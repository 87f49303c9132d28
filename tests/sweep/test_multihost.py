"""Several processes, one sweep: JAX's multi-process runtime (``--distributed``) and its flags.

The two-process test starts two OS processes on 127.0.0.1 (coordinator bound
to the loopback interface), each with 2 fake CPU devices, and checks that the
directory they fill together equals a single-process, single-device sweep of
the same config bit for bit.
"""

import os
import socket
import subprocess
import sys
import tomllib

import jax
import pandas as pd
import pytest

from dpjax.sweep import SweepConfig, cli, multihost, run_sweep
from dpjax.sweep.store import load_results
from tests.sweep.conftest import TINY

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER_ENV_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "TPU_", "KUBERNETES_", "JAX_")
TIMEOUT_S = 420


def _clean_env(**extra) -> dict:
    """This environment without anything JAX's cluster detection or a proxy could pick up."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(CLUSTER_ENV_PREFIXES) and "_proxy" not in k.lower() and k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", **extra)
    return env


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch_pair(cfg_path, out, port, extra=()):
    """Runs ``dpjax sweep --distributed`` (plus ``extra`` flags) as processes 0 and 1 on 127.0.0.1:port; returns
    (procs, logs).

    Bounded by TIMEOUT_S; children still running on the way out are killed.
    """
    env = _clean_env(XLA_FLAGS="--xla_force_host_platform_device_count=2",
                     JAX_COORDINATOR_BIND_ADDRESS=f"127.0.0.1:{port}")  # loopback only
    base = [sys.executable, "-m", "dpjax.cli", "sweep", str(cfg_path), "--out", str(out), "--no-progress",
            "--distributed", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
            "--init-timeout", "120", "--shutdown-timeout", "300", *extra]
    procs = []
    try:
        for i in range(2):
            procs.append(subprocess.Popen(base + ["--process-id", str(i)], cwd=REPO, env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        logs = [p.communicate(timeout=TIMEOUT_S)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    return procs, logs


def _tiny_cfg() -> SweepConfig:
    d = tomllib.loads(TINY)
    d["chunk_size"] = 4  # 12 chunks: 6 per process, 2 per step on each process's 2 devices
    return SweepConfig.from_dict(d)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The tiny sweep (chunk_size 4) in this process, on one device."""
    return run_sweep(_tiny_cfg(), tmp_path_factory.mktemp("single"), devices=jax.local_devices()[:1], progress=False)


@pytest.mark.slow
def test_two_processes_with_jax_distributed_equal_one_process(tmp_path, reference):
    cfg_path = tmp_path / "tiny.toml"
    cfg_path.write_text(TINY.replace('name = "tiny"', 'name = "tiny"\nchunk_size = 4'))  # as _tiny_cfg()
    for attempt in range(2):  # a second try only if the free port was taken in between
        out = tmp_path / f"shared{attempt}"
        procs, logs = _launch_pair(cfg_path, out, _free_port())
        if not any("address already in use" in log.lower() for log in logs):
            break
    for i, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"process {i}:\n{log[-4000:]}"
        assert f"(process {i} of 2): computed 6 chunk(s)" in log, log
        assert "all 2 processes finished" in log and "holds 12 of 12 chunks" in log, log

    # the shared directory == one process on one device, bit for bit
    ref = reference
    runs, evals = load_results(out)
    assert len(runs) == 36 and set(runs.run_id) == set(ref.runs.run_id)
    pd.testing.assert_frame_equal(runs, ref.runs, check_exact=True)
    pd.testing.assert_frame_equal(evals, ref.evals, check_exact=True)
    envs = [pd.read_json(out / f"env-{i}.json", typ="series") for i in range(2)]
    assert [int(e["process_index"]) for e in envs] == [0, 1]
    assert all(len(e["devices"]) == 2 for e in envs)
    assert not list(out.rglob("*.tmp"))


@pytest.mark.slow
def test_one_run_over_two_processes_equals_one_process(tmp_path):
    """``--distributed --silo-devices all``: each run's 4 silos over the 4 devices of 2 processes (one program over
    both; every process computes every chunk, process 0 stores it) stores the bits of one process on one device.
    ``--silo-compute exact`` (the default) keeps the unsharded program; what crosses the processes is the data's
    gather and the replicated outputs."""
    d = tomllib.loads(TINY)
    d["data"]["num_silos"] = 4
    d["grid"]["trial"] = 1
    d["chunk_size"] = 4
    ref = run_sweep(SweepConfig.from_dict(d), tmp_path / "single", devices=jax.local_devices()[:1], progress=False)
    cfg_path = tmp_path / "four_silos.toml"
    cfg_path.write_text(TINY.replace("num_silos = 3", "num_silos = 4").replace("trial = 3", "trial = 1")
                        .replace('name = "tiny"', 'name = "tiny"\nchunk_size = 4'))
    for attempt in range(2):  # a second try only if the free port was taken in between
        out = tmp_path / f"shared{attempt}"
        procs, logs = _launch_pair(cfg_path, out, _free_port(), ["--silo-devices", "all"])
        if not any("address already in use" in log.lower() for log in logs):
            break
    for i, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"process {i}:\n{log[-4000:]}"
        assert f"(process {i} of 2): computed 4 chunk(s)" in log, log  # every chunk, on all 4 devices
        assert "holds 4 of 4 chunks" in log, log
    runs, evals = load_results(out)
    assert len(runs) == 12
    pd.testing.assert_frame_equal(runs, ref.runs, check_exact=True)
    pd.testing.assert_frame_equal(evals, ref.evals, check_exact=True)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--distributed", "--process-count", "2"], "--process-count and --distributed are exclusive"),
        (["--distributed", "--process-index", "1"], "--process-index and --distributed are exclusive"),
        (["--coordinator", "127.0.0.1:1234"], "--coordinator needs --distributed"),
        (["--num-processes", "2"], "--num-processes needs --distributed"),
        (["--process-id", "0"], "--process-id needs --distributed"),
        (["--init-timeout", "5"], "--init-timeout needs --distributed"),
        (["--distributed", "--coordinator", "localhost"], "coordinator='localhost' must be HOST:PORT"),
        (["--distributed", "--coordinator", "h:99999"], "port 99999"),
        (["--distributed", "--num-processes", "2", "--process-id", "2"], r"process_id=2 must be in \[0, num_processes=2\)"),
        (["--distributed", "--num-processes", "0"], "num_processes"),
    ],
)
def test_flag_errors_name_the_flag(tiny_toml, tmp_path, capsys, flags, message):
    """Checked before JAX's runtime is touched (safe inside the test process)."""
    import re

    rc = cli.main(["sweep", str(tiny_toml), "--out", str(tmp_path / "o"), "--no-progress", *flags])
    err = capsys.readouterr().err
    assert rc == 2 and re.search(message, err), err
    assert not (tmp_path / "o").exists()


def test_initialize_after_jax_was_used_is_a_clear_error():
    jax.devices()  # the test process has used JAX already
    with pytest.raises(ValueError, match="before"):
        multihost.initialize("127.0.0.1:1", 2, 0, initialization_timeout=1)
    assert not multihost.is_initialized()


def test_distributed_without_any_cluster_information_is_a_clear_error(tiny_toml, tmp_path):
    r = subprocess.run([sys.executable, "-m", "dpjax.cli", "sweep", str(tiny_toml), "--out", str(tmp_path / "o"),
                        "--distributed", "--init-timeout", "5"], cwd=REPO, env=_clean_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "jax.distributed.initialize failed" in r.stderr and "--coordinator HOST:PORT" in r.stderr, r.stderr


def test_followers_wait_for_the_leaders_config(tmp_path):
    with pytest.raises(ValueError, match="process 0 has not written"):
        run_sweep(_tiny_cfg(), tmp_path, process_index=1, process_count=2, wait_for_config=0.3, progress=False)
    assert not (tmp_path / "config.json").exists()


def test_manual_process_split_still_equals_one_process(tmp_path, reference):
    """``--process-index/--process-count`` without the runtime: two shares, one directory."""
    first = run_sweep(_tiny_cfg(), tmp_path, process_index=1, process_count=2, progress=False)
    assert first.computed_chunks == [f"g000-c{i:06d}" for i in range(1, 12, 2)]
    second = run_sweep(_tiny_cfg(), tmp_path, process_index=0, process_count=2, progress=False)
    assert second.computed_chunks == [f"g000-c{i:06d}" for i in range(0, 12, 2)]
    pd.testing.assert_frame_equal(second.runs, reference.runs, check_exact=True)
    pd.testing.assert_frame_equal(second.evals, reference.evals, check_exact=True)
    with pytest.raises(ValueError, match="process_index=2"):
        run_sweep(_tiny_cfg(), tmp_path, process_index=2, process_count=2, progress=False)
