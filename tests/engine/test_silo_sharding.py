"""One run's silo axis sharded over devices (``engine.run(..., silo_devices=...)``,
``dpjax.engine.silo_sharding``): ``silo_compute="exact"`` equals the unsharded run bit for bit on 8
host-platform devices for every model below; ``"per-silo"`` computes each silo on its device, within
float32 rounding."""

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


def run_on_8_host_devices(script: str) -> subprocess.CompletedProcess:
    """``tests/engine/<script>`` run in a fresh process with 8 host-platform devices (it must exit 0)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=8",
               PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, str(REPO / "tests" / "engine" / script)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


@pytest.mark.slow
def test_sharded_runs_equal_the_unsharded_run_on_8_host_devices():
    r = run_on_8_host_devices("silo_sharding_check.py")
    lines = [line for line in r.stdout.splitlines() if " devices=" in line and not line.startswith("collectives")]
    exact = [line for line in lines if line.startswith("exact ")]
    per_silo = [line for line in lines if line.startswith("per-silo ")]
    assert len(exact) == 8 * 4 and len(per_silo) == 4 * 2, r.stdout
    for line in exact:  # every model, 1/2/4/8 devices: bit for bit (np.array_equal on every leaf)
        assert "IDENTICAL" in line, line
    for line in per_silo:
        # each device computes its silos: XLA:CPU fuses (and so FMA-rounds) some per-silo values
        # differently (dpjax.engine.silo_sharding). A float32 rounding (eps = 1.2e-7) per message
        # coordinate, summed over 16 silos and 4 rounds, bounds the difference by 4 * 16 * eps ~ 7.7e-6
        # relative to the parameters' size.
        diff, scale = (float(line.split(f"{k}=")[1].split()[0]) for k in ("max_abs_diff", "max_abs_params"))
        assert diff <= 1e-5 * max(scale, 1.0), line
    collectives = {line.split()[1]: line.split(":", 1)[1].split() for line in r.stdout.splitlines()
                   if line.startswith("collectives")}
    # the data's x is [16, 32, 8]: "exact" gathers it (once); "per-silo" keeps it on its devices and only
    # gathers [16, ...] messages
    assert "f32[16,32,8]" in collectives["exact"], r.stdout
    assert "f32[16,32,8]" not in collectives["per-silo"] and collectives["per-silo"], r.stdout
    # each silo's noise is drawn and added on its device (2 silos each of 16 on 8 devices) before the
    # messages are gathered; "exact" draws all 16 on every device (gathering the noiseless messages,
    # as per-silo once did, made every device draw every silo's noise)
    noise_rows = {line.split()[1]: line.split(":", 1)[1].split() for line in r.stdout.splitlines()
                  if line.startswith("noise-rows")}
    assert noise_rows == {"exact": ["16"], "per-silo": ["2"]}, r.stdout


def _tiny(num_silos: int = 3):
    xs = [np.zeros((4, 2), np.float32)] * num_silos
    data = SiloData.from_silos(xs, [np.zeros(4, np.float32)] * num_silos)
    return NoisyMbSgd(LogisticRegression(2), 2, 2), data, MbSgdHParams.create(0.1)


@pytest.mark.parametrize("silo_devices, message", [
    (2, r"silo_devices=2 asks for more devices than there are: 1 device\(s\) available \(cpu\); XLA_FLAGS="),
    (0, r"silo_devices=0 must be >= 1 \(a number of devices\) or 'all'"),
    (-1, r"silo_devices=-1 must be >= 1"),
    (True, r"silo_devices=True must be a number of devices"),
    (2.0, r"silo_devices=2.0 must be a number of devices"),
    ("cpu:0", r"silo_devices='cpu:0' must be a number of devices"),
    (["cpu:0"], r"silo_devices=\['cpu:0'\] holds 'cpu:0', which is not a jax device"),
    ([0], r"silo_devices=\[0\] holds 0, which is not a jax device"),
    ([], r"silo_devices=\[\] must name at least one device"),
    ("dup", r"silo_devices=\[.*\] names .* twice; each device can hold one share"),
])
def test_bad_silo_devices_are_value_errors_naming_the_value(silo_devices, message):
    """dpjax#39: an int gave ``TypeError: 'int' object is not iterable``, a repeated device a bare ``AssertionError``,
    a device name an ``AttributeError``."""
    alg, data, hp = _tiny(4)
    if silo_devices == "dup":
        silo_devices = [jax.devices()[0]] * 2
    with pytest.raises(ValueError, match=message):
        run(alg, data, hp, keys.run_key(0, 0), silo_devices=silo_devices)


@pytest.mark.slow
def test_a_number_of_devices_or_all_shards_over_the_local_devices():
    alg, data, hp = _tiny(4)
    ref = run(alg, data, hp, keys.run_key(0, 0))
    for spec in (1, "all", "ALL", jax.devices()[:1]):
        got = run(alg, data, hp, keys.run_key(0, 0), silo_devices=spec)
        assert all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(got.output),
                                                        jax.tree_util.tree_leaves(ref.output)))


def test_run_grid_checks_its_silo_options():
    from dpjax.engine import run_grid, silo_sharding, stack_hparams
    alg, data, hp = _tiny(4)
    hps, rk = stack_hparams([hp]), keys.run_key(0, 0)[None]
    with pytest.raises(ValueError, match=r"silo_devices=0 must be >= 1"):
        run_grid(alg, data, hps, rk, silo_devices=0)
    with pytest.raises(ValueError, match=r"silo_block=2 needs silo_devices"):
        run_grid(alg, data, hps, rk, silo_block=2)
    with pytest.raises(ValueError, match=r"round_loop='host' with silo_devices=1"):
        run_grid(alg, data, hps, rk, silo_devices=1, round_loop="host")
    with pytest.raises(ValueError, match=r"silo_devices=\[\] must name at least one device"):
        with silo_sharding.layout([]):  # the layout a command sets reaches the grids inside it
            run_grid(alg, data, hps, rk)


def test_silo_devices_must_divide_the_silos():
    alg, data, hp = _tiny(3)
    with pytest.raises(ValueError, match="silo_compute='all' must be one of"):
        run(alg, data, hp, keys.run_key(0, 0), silo_devices=jax.devices()[:1], silo_compute="all")
    with pytest.raises(ValueError, match="round_loop='scan'"):
        run(alg, data, hp, keys.run_key(0, 0), silo_devices=jax.devices()[:1], round_loop="host")
