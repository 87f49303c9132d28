"""Users of unequal sizes: power-law sizes, per-record user ids, the padded [users, m] layout and UserSplit."""

from __future__ import annotations

import numpy as np
import pytest

from dpjax.data.users import assign_users, group_by_user, power_law_user_sizes
from dpjax.engine.users import UserSplit


def test_power_law_sizes_sum_and_are_unequal_and_seeded():
    sizes = power_law_user_sizes(1000, 50, exponent=1.2, seed=4, min_records=2)
    assert sizes.sum() == 1000 and sizes.min() >= 2 and sizes.shape == (50,)
    # a Zipf law over 50 ranks with exponent 1.2: the heaviest user's expected share of the 900 extra records is
    # 1 / H_{50,1.2} ~ 0.30 (H = sum_r r^-1.2 ~ 3.3), far above the mean 1/50
    assert sizes.max() > 10 * np.median(sizes)
    np.testing.assert_array_equal(sizes, power_law_user_sizes(1000, 50, exponent=1.2, seed=4, min_records=2))
    assert not np.array_equal(sizes, power_law_user_sizes(1000, 50, exponent=1.2, seed=5, min_records=2))


def test_assign_users_gives_each_user_its_size():
    sizes = np.array([5, 1, 3, 7])
    owner = assign_users(sizes, seed=1)
    assert owner.shape == (16,) and owner.dtype == np.int32
    np.testing.assert_array_equal(np.bincount(owner), sizes)


def test_group_by_user_layout_and_contribution_bound():
    owner = np.array([2, 0, 2, 7, 0, 2, 2])
    index, sizes, users = group_by_user(owner)
    np.testing.assert_array_equal(users, [0, 2, 7])
    np.testing.assert_array_equal(sizes, [2, 4, 1])
    np.testing.assert_array_equal(index, [[1, 4, 0, 0], [0, 2, 5, 6], [3, 0, 0, 0]])
    index, sizes, _ = group_by_user(owner, max_records=2)  # each user's first 2 records in data-set order
    np.testing.assert_array_equal(sizes, [2, 2, 1])
    np.testing.assert_array_equal(index, [[1, 4], [0, 2], [3, 0]])


@pytest.mark.parametrize("pooled", [False, True])
def test_user_split_rows_are_the_users_records(pooled):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 3)).astype(np.float32)
    y = rng.integers(0, 2, 60)
    split = UserSplit.power_law(x, y, 7, exponent=1.0, seed=2, max_records=9, pooled=pooled)
    assert split.num_users == 7 and split.data.num_silos == 7 and int(split.sizes.max()) <= 9
    data = split.data if not pooled else split.data.materialize()
    for u in range(7):
        mine = np.flatnonzero(split.user_id == split.users[u])[: split.sizes[u]]
        np.testing.assert_array_equal(np.asarray(data.x[u, : split.sizes[u]]), x[mine])
        np.testing.assert_array_equal(np.asarray(data.y[u, : split.sizes[u]]), y[mine])
        assert not np.asarray(data.mask[u, split.sizes[u]:]).any()


@pytest.mark.parametrize("call, name", [
    (lambda: power_law_user_sizes(10, 20), "num_users=20"),
    (lambda: power_law_user_sizes(10, 2, exponent=-1.0), "exponent"),
    (lambda: assign_users(np.array([2, 0])), "sizes"),
    (lambda: group_by_user(np.array([0.5, 1.0])), "user_id"),
    (lambda: group_by_user(np.array([0, 1]), max_records=0), "max_records"),
    (lambda: UserSplit.from_user_ids(np.zeros((3, 2)), np.zeros(3), np.array([0, 1])), "user_id"),
])
def test_bad_inputs_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
