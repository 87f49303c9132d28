"""Record data split into users of unequal sizes: the per-record ``user_id`` and the grouped layout.

User-level DP protects every record of one user at once (Charles, Ganesh, McKenna, McMahan, Mitchell, Pillutla & Rush,
"Fine-Tuning Large Language Models with User-Level Differential Privacy", 2024, Section 2). Data sets that ship without
user ids (MNIST, tabular sets) are split here into synthetic users whose sizes follow a power law, as real per-user
contribution counts do (a few heavy users, a long tail of light ones):

* ``power_law_user_sizes(num_records, num_users, exponent, seed)``: sizes ``>= min_records`` summing to
  ``num_records``, the remainder split multinomially with weights ``(rank + 1)^-exponent`` (a Zipf law over ranks);
* ``assign_users(sizes, seed)``: one ``user_id`` per record (a seeded uniform permutation of the records dealt by
  the sizes), so a user's records are a uniform subset of the data set;
* ``group_by_user(user_id, max_records)``: the static layout ``index [num_users, m]`` (row ``u`` holds user ``u``'s
  record indices in data-set order, padded with 0), ``sizes [num_users]`` and the distinct user ids, ``m`` the largest
  user's count or the contribution bound ``max_records`` (a user's records past it are dropped, in data-set order:
  a rule that reads only the user's own records, so it does not couple users).

NumPy only (no JAX): ``dpjax.engine.users.UserSplit`` turns the layout into the engine's padded silo data, one silo per
user.
"""

from __future__ import annotations

import numpy as np

from dpjax import _validate

__all__ = ["power_law_user_sizes", "assign_users", "group_by_user"]


def power_law_user_sizes(num_records: int, num_users: int, exponent: float = 1.0, seed: int = 0,
                         min_records: int = 1) -> np.ndarray:
    """``num_users`` sizes summing to ``num_records``: ``min_records`` each, the rest multinomial with weights
    proportional to ``(r + 1)^-exponent`` for the users' ranks r (a seeded random order, so user 0 is not always the
    heaviest). ``exponent = 0`` gives sizes as equal as a multinomial allows. Returns int64 ``[num_users]``."""
    num_records = _validate.check_int("num_records", num_records, min_value=1)
    num_users = _validate.check_int("num_users", num_users, min_value=1)
    min_records = _validate.check_int("min_records", min_records, min_value=1)
    exponent = _validate.check_nonnegative("exponent", exponent)
    if num_users * min_records > num_records:
        raise ValueError(f"num_users={num_users} x min_records={min_records} must be <= num_records={num_records}")
    rng = np.random.default_rng(_validate.check_int("seed", seed, min_value=0))
    weights = (np.arange(1, num_users + 1, dtype=np.float64)) ** -exponent
    weights = weights[rng.permutation(num_users)]
    extra = rng.multinomial(num_records - num_users * min_records, weights / weights.sum())
    return (extra + min_records).astype(np.int64)


def assign_users(sizes, seed: int = 0) -> np.ndarray:
    """One user id per record for users of ``sizes`` (``sum(sizes)`` records): record ``j`` belongs to user
    ``user_id[j]``; the records of user u are a uniform random subset of size ``sizes[u]`` (seeded). int32 ``[n]``."""
    sizes = np.asarray(sizes)
    if sizes.ndim != 1 or sizes.size == 0 or sizes.dtype.kind not in "iu" or sizes.min() < 1:
        raise ValueError(f"sizes={sizes!r} must be a non-empty 1-d array of integers >= 1 (records per user)")
    rng = np.random.default_rng(_validate.check_int("seed", seed, min_value=0))
    owner = np.repeat(np.arange(sizes.size, dtype=np.int32), sizes)
    return owner[rng.permutation(owner.size)]


def group_by_user(user_id, max_records: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The padded per-user layout of records with owners ``user_id`` (``[n]`` integers).

    Returns ``(index [U, m], sizes [U], users [U])``: the U distinct ids in increasing order (``users``), row ``u``
    holding user ``users[u]``'s record indices in data-set order, padded with 0 past ``sizes[u]``;
    ``m = max(sizes)``. With ``max_records`` k each user keeps its first k records (``sizes <= k``): the
    contribution bound of example-level sampling, and a static width for the grouped arrays."""
    owner = np.asarray(user_id)
    if owner.ndim != 1 or owner.size == 0 or owner.dtype.kind not in "iu":
        raise ValueError(f"user_id has shape {owner.shape} and dtype {owner.dtype}; expected a non-empty 1-d array "
                         "of integers (one user id per record)")
    if max_records is not None:
        max_records = _validate.check_int("max_records", max_records, min_value=1)
    order = np.argsort(owner, kind="stable")
    users, starts, counts = np.unique(owner[order], return_index=True, return_counts=True)
    sizes = counts if max_records is None else np.minimum(counts, max_records)
    width = int(sizes.max())
    offset = np.arange(width)
    real = offset[None, :] < sizes[:, None]
    index = np.where(real, order[np.minimum(starts[:, None] + offset, order.size - 1)], 0)
    return index.astype(np.int64), sizes.astype(np.int64), users
