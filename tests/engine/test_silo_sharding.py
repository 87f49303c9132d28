"""One run's silo axis sharded over devices (``engine.run(..., silo_devices=...)``,
``dpjax.engine.silo_sharding``) equals the unsharded run bit for bit on 8 host-platform devices."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

from dpjax import keys
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.engine import SiloData, run
from dpjax.problems import LogisticRegression

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_sharded_runs_equal_the_unsharded_run_on_8_host_devices():
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=8",
               PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, str(REPO / "tests" / "engine" / "silo_sharding_check.py")], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = [line for line in r.stdout.splitlines() if "devices=" in line]
    assert len(lines) == 4 * 4, r.stdout
    for line in lines:
        if line.startswith("glm-dense"):
            # The GLMs' closed-form round compiled with a sharded silo axis can differ from the unsharded
            # one in the last bits at some shapes (observed: <= 9.3e-7 relative at 16 silos x 32 rows x
            # d = 8, the same for 2 and 8 devices, so not the cross-device sum order): float reordering
            # only. At this test's shapes it is identical.
            assert "IDENTICAL" in line or float(line.split("max_abs_diff=")[1]) < 1e-6, line
        else:
            assert "IDENTICAL" in line, line


def test_silo_devices_must_divide_the_silos():
    xs = [np.zeros((4, 2), np.float32)] * 3
    data = SiloData.from_silos(xs, [np.zeros(4, np.float32)] * 3)
    alg = NoisyMbSgd(LogisticRegression(2), 2, 2)
    hp = MbSgdHParams.create(0.1)
    with pytest.raises(ValueError, match="multiple of the number of devices"):
        run(alg, data, hp, keys.run_key(0, 0), silo_devices=[jax.devices()[0]] * 2)
    with pytest.raises(ValueError, match="round_loop='scan'"):
        run(alg, data, hp, keys.run_key(0, 0), silo_devices=jax.devices()[:1], round_loop="host")
