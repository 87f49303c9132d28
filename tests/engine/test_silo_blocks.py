"""A run's per-silo stage computed in blocks of silos (``engine.run(..., silo_block=B)``,
``dpjax.engine.silo_blocks``): the same bits unsharded and with the silos spread over 1, 2, 4 and 8
host devices (``silo_compute="blocks"``), within float rounding of the plain run."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dpjax import keys
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.algorithms.local_sgd import LocalSgd
from dpjax.engine import SiloData, run, silo_blocks
from dpjax.primitives.sampling import FixedAvailability
from dpjax.problems import FlaxProblem, LogisticRegression
from dpjax.problems.mlp import MLP
from tests.engine.test_silo_sharding import run_on_8_host_devices


@pytest.mark.slow
def test_blocked_runs_are_bit_identical_on_1_2_4_8_host_devices():
    r = run_on_8_host_devices("silo_blocks_check.py")
    lines = r.stdout.splitlines()
    blocks = [line for line in lines if line.startswith("blocks ")]
    # 9 cases x 4 device counts with block 1, and 2 cases x 3 device counts with block 2
    assert len(blocks) == 9 * 4 + 2 * 3, r.stdout
    for line in blocks:  # np.array_equal on every leaf of output, final state and round metrics (AC-SA too)
        assert " IDENTICAL " in line, line
    for line in (line for line in lines if line.startswith("plain ")):
        # blocked vs one vmap over all silos: another program, so float rounding only. One float32
        # rounding (eps = 1.2e-7) per message coordinate, summed over 16 silos and 4 rounds, bounds
        # the difference by 4 * 16 * eps ~ 7.7e-6 relative to the parameters' size.
        diff, scale = (float(line.split(f"{k}=")[1].split()[0]) for k in ("max_abs_diff", "max_abs"))
        assert diff <= 1e-5 * max(scale, 1.0), line
    collectives = next(line for line in lines if line.startswith("collectives")).split(":", 1)[1].split()
    # the data ([16, 32, 8]) stays on its devices; the [16, ...] messages are gathered
    assert collectives and "f32[16,32,8]" not in collectives, r.stdout
    noise_rows = next(line for line in lines if line.startswith("noise-rows")).split(":", 1)[1].split()
    assert noise_rows == ["1"], r.stdout  # block 1: each draw is one silo's noise, on its own device


def _data(num_silos=4, n=12, d=3, seed=0):
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(n - (i % 2), d)).astype(np.float32) for i in range(num_silos)]
    return SiloData.from_silos(xs, [(x[:, 0] > 0).astype(np.float32) for x in xs])


def _leaves(result):
    return [np.asarray(a) for a in jax.tree_util.tree_leaves((result.output, result.state.params,
                                                              result.round_metrics))]


def test_blocked_run_equals_its_one_device_mesh_run_and_the_plain_run_to_rounding():
    data = _data()
    alg = NoisyMbSgd(FlaxProblem(MLP((4,)), (3,), "logistic"), 3, 4)
    hp = MbSgdHParams.create(0.3, noise_multiplier=0.8, clip_norm=1.0)
    key = keys.run_key(5, 2)
    plain = _leaves(run(alg, data, hp, key))
    blocked = _leaves(run(alg, data, hp, key, silo_block=2))
    on_mesh = _leaves(run(alg, data, hp, key, silo_devices=jax.devices()[:1], silo_compute="blocks", silo_block=2))
    assert all(np.array_equal(a, b) for a, b in zip(blocked, on_mesh))
    # same draws (batches, noise), another program: float32 rounding only (3 rounds x 4 silos x eps)
    for a, b in zip(plain, blocked):
        np.testing.assert_allclose(b, a, rtol=0, atol=12 * 1.2e-7 * max(1.0, float(np.max(np.abs(a)))))
    # (so the blocked run draws the plain run's batches and noise: noise of std 0.8 x 2 / 4 per silo
    # left out or drawn from other keys would move the parameters by orders of magnitude more)


def test_silo_window_gives_the_blocks_slice_of_the_whole_runs_draws():
    key = jax.random.key(7)
    whole = jax.random.key_data(keys.silo_keys(key, 6))
    with keys.silo_window(6, 2):
        part = jax.random.key_data(keys.silo_keys(key, 3))
        mask = keys.over_silos(lambda n: jax.random.bernoulli(key, 0.5, (n,)), 3)
    np.testing.assert_array_equal(part, whole[2:5])
    np.testing.assert_array_equal(mask, jax.random.bernoulli(key, 0.5, (6,))[2:5])


def test_bad_blocks_are_refused_with_their_value():
    data = _data()
    hp = MbSgdHParams.create(0.1)
    alg = NoisyMbSgd(LogisticRegression(3), 2, 4)
    key = keys.run_key(0, 0)
    for block, message in ((0, "silo_block=0 must be a positive int"), (3, "silo_block=3 must divide"),
                           (2.0, "silo_block=2.0 must be a positive int")):
        with pytest.raises(ValueError, match=message):
            run(alg, data, hp, key, silo_block=block)
    with pytest.raises(ValueError, match="silo_block=2 leaves 2 silos per device, one block"):
        silo_blocks.check_block(2, 4, 2)
    with pytest.raises(ValueError, match="silo_compute='blocks' needs silo_block"):
        run(alg, data, hp, key, silo_devices=jax.devices()[:1], silo_compute="blocks")
    with pytest.raises(ValueError, match="use silo_compute='blocks'"):
        run(alg, data, hp, key, silo_devices=jax.devices()[:1], silo_compute="per-silo", silo_block=2)
    with pytest.raises(ValueError, match="selection computes a random subset"):  # LocalSgd is the generic fold now
        run(LocalSgd(LogisticRegression(3), 2, 2, availability=FixedAvailability(2)), data, hp, key, silo_block=2)
    with pytest.raises(ValueError, match="selection computes a random subset"):
        run(NoisyMbSgd(LogisticRegression(3), 2, 4, availability=FixedAvailability(2)), data, hp, key, silo_block=2)
    with pytest.raises(ValueError, match="round_loop='host' with silo_devices or silo_block"):
        run(alg, data, hp, key, silo_block=2, round_loop="host")
