"""Layout-dependent randomness (issue #42 item 4): a silo draws the same batch and noise keys whatever the
layout of the run -- all silos in one vmap, in blocks of B (``silo_block``), or a device's share of the silos
(``silo_devices`` with ``silo_compute="blocks"``: each device maps its blocks from silo ``first = device x
local``). A key reused across blocks or devices gives two silos the same noise: their noises add coherently
(std x 2 on the pair's sum instead of x sqrt 2), so the certified per-silo noise is not what the aggregate gets.

The device layout is emulated on one device by calling ``map_blocks`` with each device's ``first`` as
``run_round_stage``'s ``shard_map`` does (``axis_index x local``); the 8-device run itself is compared
bit-for-bit in tests/engine/test_silo_blocks.py (slow)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax import keys
from dpjax.engine import silo_blocks

pytestmark = pytest.mark.privacy

TOTAL = 8


def _block_keys(key, first, local, block):
    """What one device's blocked stage draws: the key data of ``silo_keys`` and an availability-style
    ``over_silos`` row for its ``local`` silos starting at ``first``, ``block`` at a time (traced ``first``)."""
    def fn(blk, shared):
        n = blk.shape[0]
        drawn = jax.random.key_data(keys.silo_keys(key, n))
        coin = keys.over_silos(lambda m: jax.random.uniform(key, (m,)), n)
        return (drawn, coin), shared

    per_silo = jnp.zeros((local, 1))
    sizes = jnp.full((local,), 3, jnp.int32)
    run = jax.jit(lambda f: silo_blocks.map_blocks(fn, per_silo, jnp.float32(0), sizes, num_silos=TOTAL,
                                                   block=block, first=f))
    (drawn, coin), _ = run(jnp.int32(first))
    return np.asarray(drawn), np.asarray(coin)


@pytest.mark.parametrize("devices,block", [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (4, 1), (4, 2), (8, 1)])
def test_every_layout_draws_the_whole_runs_keys_for_each_silo(devices, block):
    key = jax.random.key(11)
    whole = np.asarray(jax.random.key_data(jax.random.split(key, TOTAL)))
    whole_coin = np.asarray(jax.random.uniform(key, (TOTAL,)))
    local = TOTAL // devices
    parts = [_block_keys(key, d * local, local, block) for d in range(devices)]
    drawn = np.concatenate([p[0] for p in parts])
    coin = np.concatenate([p[1] for p in parts])
    np.testing.assert_array_equal(drawn, whole)  # silo i gets key i of the whole run's split ...
    np.testing.assert_array_equal(coin, whole_coin)  # ... and row i of a one-key draw
    # ... so no two silos share a key in any layout
    assert len({tuple(row) for row in drawn.reshape(TOTAL, -1)}) == TOTAL


def test_noise_drawn_per_silo_is_layout_free_and_independent():
    # the per-silo Gaussian noise a privatizer draws from the silo keys: equal across layouts, and the noises
    # of two silos uncorrelated (sample correlation within 5 standard errors of 0 over 4000 coordinates)
    key = jax.random.key(3)
    d = 4000
    plain = jax.vmap(lambda k: jax.random.normal(k, (d,)))(keys.silo_keys(key, TOTAL))
    for devices, block in ((2, 2), (4, 1)):
        local = TOTAL // devices
        drawn = np.concatenate([_block_keys(key, i * local, local, block)[0] for i in range(devices)])
        blocked = jax.vmap(lambda k: jax.random.normal(jax.random.wrap_key_data(k), (d,)))(jnp.asarray(drawn))
        np.testing.assert_array_equal(np.asarray(blocked), np.asarray(plain))
    corr = np.corrcoef(np.asarray(plain))
    off = corr[~np.eye(TOTAL, dtype=bool)]
    assert np.max(np.abs(off)) < 5 / np.sqrt(d), off  # a shared key would give correlation 1


def test_a_block_offset_bug_would_be_seen():
    # the mutant "each device starts its blocks at silo 0" (first ignored) reuses device 0's keys
    key = jax.random.key(11)
    a, _ = _block_keys(key, 0, 4, 2)
    b, _ = _block_keys(key, 4, 4, 2)
    assert not any(np.array_equal(x, y) for x, y in itertools.product(a, b))
