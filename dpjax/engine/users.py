"""Record data grouped by user: the engine's silo data with one silo per user, beside each record's ``user_id``.

User-level DP-SGD (``dpjax.algorithms.user_level_dpsgd``) reads its data as ``[num_users, m, ...]``: silo ``u`` is user
``u``'s records, padded to the static width ``m`` with a mask (``SiloData``), or as index rows into one record pool
(``PooledSiloData``, the memory of the records once, for many users of very unequal sizes). ``UserSplit`` carries
that data together with the per-record ``user_id`` it was grouped from and the layout (``index``: which record of the
data set sits in each slot), so a report can map a user's slots back to its records.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dpjax.data.users import assign_users, group_by_user, power_law_user_sizes
from dpjax.engine.silos import PooledSiloData, SiloData

__all__ = ["UserSplit"]


@dataclasses.dataclass(frozen=True)
class UserSplit:
    """Records grouped by user.

    Attributes: data: one silo per user (``SiloData`` ``[U, m, ...]`` with its mask, or ``PooledSiloData`` index rows).
      user_id: ``[n]`` the owner of every record of the data set (host NumPy). users: ``[U]`` the distinct user ids,
      silo ``u`` being user ``users[u]``. index: ``[U, m]`` the data-set row of each slot (0 past the user's size).
      sizes: ``[U]`` each user's records in ``data`` (at most the contribution bound ``max_records``)."""

    data: SiloData | PooledSiloData
    user_id: np.ndarray
    users: np.ndarray
    index: np.ndarray
    sizes: np.ndarray

    @property
    def num_users(self) -> int:
        return int(self.users.size)

    @classmethod
    def from_user_ids(cls, x, y, user_id, *, max_records: int | None = None, pooled: bool = False,
                      **kwargs) -> "UserSplit":
        """The users of records ``(x [n, ...], y [n, ...])`` owned by ``user_id [n]`` (``dpjax.data.users.
        group_by_user``; ``max_records`` k keeps each user's first k records). ``pooled=True`` returns the index-row
        form; keyword arguments (``dtype``, ``label_dtype``) go to ``PooledSiloData.from_indices``."""
        owner = np.asarray(user_id)
        if owner.shape != (np.shape(x)[0],):
            raise ValueError(f"user_id has shape {owner.shape}; expected ({np.shape(x)[0]},), one id per record of x")
        index, sizes, users = group_by_user(owner, max_records)
        data = PooledSiloData.from_indices(x, y, index, sizes=sizes, **kwargs)
        return cls(data if pooled else data.materialize(), owner, users, index, sizes)

    @classmethod
    def power_law(cls, x, y, num_users: int, *, exponent: float = 1.0, seed: int = 0, min_records: int = 1,
                  max_records: int | None = None, pooled: bool = False, **kwargs) -> "UserSplit":
        """Records ``(x, y)`` dealt to ``num_users`` synthetic users of power-law sizes
        (``dpjax.data.users.power_law_user_sizes`` then ``assign_users``, both from ``seed``)."""
        sizes = power_law_user_sizes(int(np.shape(x)[0]), num_users, exponent, seed, min_records)
        return cls.from_user_ids(x, y, assign_users(sizes, seed), max_records=max_records, pooled=pooled, **kwargs)
