"""``PooledSiloData``, silos as index rows into one shared record pool: the same silos as the materialised
``SiloData`` (records, masks, the rows a part gathers, the shapes a family sees), the constructors' checks,
and the executor refusing it where a family reads padded records directly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.engine import PooledSiloData, SiloData, run
from dpjax.engine.chain import DataShape
from dpjax.problems import LinearRegression


def _pool(num_records=30, dim=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_records, dim)).astype(np.float32)
    return x, rng.integers(0, 4, num_records).astype(np.int64)


def _ragged(num_records, num_silos=7, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.choice(num_records, size=int(rng.integers(1, 6)), replace=False) for _ in range(num_silos)]


def test_a_pool_is_the_materialised_silos():
    x, y = _pool()
    rows = _ragged(len(x))
    pooled = PooledSiloData.from_indices(x, y, rows)
    direct = SiloData.from_silos([x[r] for r in rows], [y[r] for r in rows])
    for a, b in zip(jax.tree_util.tree_leaves(pooled.materialize()), jax.tree_util.tree_leaves(direct)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert (pooled.num_silos, pooled.n_max, pooled.min_size) == (direct.num_silos, direct.n_max, direct.min_size)
    assert pooled.silo_sizes() == direct.silo_sizes() == tuple(len(r) for r in rows)
    np.testing.assert_array_equal(pooled.mask, direct.mask)
    ids = jnp.array([3, 0, 3])
    np.testing.assert_array_equal(pooled.silo_masks(ids), direct.silo_masks(ids))
    for silo in range(pooled.num_silos):  # a part's gathers: a step's rows, and every row with its mask
        size = len(rows[silo])
        step_rows = jnp.array([size - 1, 0])
        for a, b in zip(pooled.silo_records(silo, step_rows), direct.silo_records(silo, step_rows)):
            np.testing.assert_array_equal(a, b)
        (px, py), (dx, dy) = pooled.silo_records(silo), direct.silo_records(silo)
        np.testing.assert_array_equal(px[:size], dx[:size])  # real rows equal; padded rows are masked
        np.testing.assert_array_equal(py[:size], dy[:size])
    assert DataShape.of(pooled) == DataShape.of(direct)  # what a family's parts are built from
    np.testing.assert_array_equal(np.sort(pooled.real_labels()), np.sort(y[np.unique(np.concatenate(rows))]))


def test_an_index_array_with_sizes_equals_the_ragged_list():
    x, y = _pool()
    rows = _ragged(len(x))
    width = max(len(r) for r in rows)
    array = np.full((len(rows), width), 29)  # entries past a silo's size are ignored
    for i, r in enumerate(rows):
        array[i, : len(r)] = r
    a = PooledSiloData.from_indices(x, y, array, sizes=[len(r) for r in rows])
    b = PooledSiloData.from_indices(x, y, rows)
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(u, v)
    assert a.index.dtype == jnp.int32 and a.pool_y.dtype == jnp.int32 and a.pool_x.dtype == jnp.float32
    full = PooledSiloData.from_indices(x, y, array)
    assert full.silo_sizes() == (width,) * len(rows)


def test_a_data_set_split_by_user():
    x, y = _pool(12)
    owner = np.array([7, 2, 7, 5, 2, 2, 9, 7, 5, 9, 9, 2])
    data = PooledSiloData.from_assignment(x, y, owner)
    mat = data.materialize()
    for silo, user in enumerate(np.unique(owner)):
        mine = np.flatnonzero(owner == user)
        assert data.silo_sizes()[silo] == len(mine)
        np.testing.assert_array_equal(np.asarray(mat.x[silo, : len(mine)]), x[mine])
    with pytest.raises(ValueError, match="silo_of_record has shape"):
        PooledSiloData.from_assignment(x, y, owner[:-1])


@pytest.mark.parametrize("kwargs, match", [
    (dict(indices=[]), r"indices=\[\] must contain at least one silo"),
    (dict(indices=[np.array([0, 1]), np.array([], int)]), r"indices\[1\] has shape \(0,\)"),
    (dict(indices=[np.array([0, 30])]), r"silo 0 hold pool rows outside \[0, 30\)"),
    (dict(indices=[np.array([-1])]), r"outside \[0, 30\)"),
    (dict(indices=np.zeros((2, 3), int), sizes=[3, 0]), r"sizes\[1\]=0 must be in \[1, 3\]"),
    (dict(indices=np.zeros((2, 3), int), sizes=[3]), r"sizes has shape \(1,\)"),
    (dict(indices=[np.array([0])], sizes=[1]), "sizes is given by the lengths"),
    (dict(indices=np.zeros((2, 3), np.float32)), "pool rows must be integers"),
    (dict(indices=np.zeros(3, int)), r"indices has shape \(3,\)"),
    (dict(indices=[np.array([0])], pool_y=np.zeros(29)), "pool_x has 30 records but pool_y has 29"),
    (dict(indices=[np.array([0])], pool_x=np.full((30, 3), np.nan)), "pool_x contains NaN or inf"),
    (dict(indices=[np.array([0])], pool_x=np.zeros((0, 3))), r"pool_x has shape \(0, 3\)"),
])
def test_constructor_refuses_bad_input_naming_the_argument(kwargs, match):
    x, y = _pool()
    args = {"pool_x": x, "pool_y": y, **kwargs}
    with pytest.raises(ValueError, match=match):
        PooledSiloData.from_indices(args.pop("pool_x"), args.pop("pool_y"), args.pop("indices"), **args)


def test_executor_refuses_a_pool_for_a_family_reading_padded_records():
    x, y = _pool()
    data = PooledSiloData.from_indices(x, y.astype(np.float32), _ragged(len(x)))
    algo = NoisyMbSgd(LinearRegression(3), num_rounds=2, batch_size=1, private=False)
    assert not getattr(algo, "supports_pooled_data", False)
    with pytest.raises(ValueError, match="data=PooledSiloData: NoisyMbSgd reads the silos' padded records"):
        run(algo, data, MbSgdHParams.create(0.1, 0.0, 1.0), jax.random.key(0))
