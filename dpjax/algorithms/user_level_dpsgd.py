"""User-level DP-SGD on record data: user-level sampling (ULS) or example-level sampling with group privacy (ELS),
as compared by Charles, Ganesh, McKenna, McMahan, Mitchell, Pillutla & Rush ("Fine-Tuning Large Language Models with
User-Level Differential Privacy", 2024, Section 3, Algorithms ULS and ELS) and Chua et al. ("Mind the Privacy Unit!",
COLM 2024).

The data is grouped by user, one silo per user (``dpjax.engine.users.UserSplit``). Each step:

* ``unit="user"`` (ULS): every user joins w.p. the public ``sampling_rate`` q; a sampled user's first
  ``records_per_user`` k records give its mean gradient, clipped to C as one unit; the sum over the sampled users is
  divided by the public expected number of users ``batch_size`` m, and ``N(0, (z C / m)^2 I)`` is added once
  (central DP). Accounting: the user-level Poisson-subsampled Gaussian, T steps.
* ``unit="example"`` (ELS): every record among each user's first k joins w.p. q, every record's gradient is clipped
  to C (ghost clipping for flax models), the sum over the public expected batch ``batch_size``, the same noise.
  Accounting: group privacy of k records under Poisson sampling, the mixture-of-Gaussians PLD (tight; Ganesh 2024).

Both guarantees are user-level, add/remove one user (``dpjax.accounting.user_dpsgd``); the optimizer is any of
``dp_sgd.OPTIMIZERS`` (unit step, then ``-eta``). The parts: ``dpjax.parts.user_records`` -> ``GaussianNoise`` on the
server -> ``OptaxServer`` -> ``Averager``. ``private=False`` is the same rounds unclipped and noiseless.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from dpjax import _validate
from dpjax.algorithms import static_rules
from dpjax.algorithms.dp_sgd import OPTIMIZERS
from dpjax.algorithms.dpsgd_general import DpSgdHParams
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.engine.contract import OutputRule
from dpjax.parts import Averager, GaussianNoise, OptaxServer
from dpjax.parts.user_records import (POISSON_SELECTIONS, ClipRecords, ClipUserMean, RecordSampling,
                                      UserRecordGradients, UserSampling)

__all__ = ["UNITS", "UserLevelDpSgd"]

UNITS = static_rules.USER_UNITS


@dataclasses.dataclass(frozen=True)
class UserLevelDpSgd(OutputRule, ChainFamily):
    """User-level DP-SGD (ULS or ELS) with an optax optimizer.

    Args:
      problem: a dpjax problem (``FlaxProblem`` for any flax model).
      num_rounds: T steps.
      unit: ``"user"`` (ULS: sample users, clip each user's mean gradient) or ``"example"`` (ELS: sample records,
        clip each record, group privacy over k).
      batch_size: the public divisor: expected users per step (ULS) or expected records per step (ELS).
      sampling_rate: q, each user's (ULS) or record's (ELS) public inclusion probability.
      records_per_user: k: the records of a sampled user (ULS) / each user's contribution bound (ELS).
      optimizer: a key of ``dp_sgd.OPTIMIZERS``.
      private: clip and add noise (False: the non-private twin of the same rounds).
      capacity: the static buffer of sampled users / records (None: ``poisson_selection``'s; a declared one is the
        buffered selection's).
      poisson_selection: ``"truncated"`` (default: truncated Poisson on a large population, the cut charged to
        delta; a buffer of every candidate on a small one) or ``"buffered"`` (expected + 6 sqrt + 8, the run refused
        on overflow, nothing charged); ``dpjax.accounting.truncated_poisson``.
      output: the released iterate (``OutputRule``); window: its averaging window."""

    problem: Any
    num_rounds: int
    unit: str = "user"
    batch_size: int = 1
    sampling_rate: float = 0.01
    records_per_user: int = 1
    optimizer: str = "sgd"
    private: bool = True
    capacity: int | None = None
    poisson_selection: str = "truncated"

    hparams_type = DpSgdHParams
    # not fields: what check_common validates the declared rate against (Poisson, add/remove one user)
    sampling = "poisson"
    neighboring = "add-remove"
    supports_pooled_data = True  # the parts read the data through silo_records / sizes
    supports_silo_blocks = False  # a round computes a sampled buffer of users, not every silo

    def __post_init__(self):
        _validate.check_choice("optimizer", self.optimizer, tuple(OPTIMIZERS))
        # unit, q, k, capacity: the jax-free rule `dpjax sweep` also checks before jax loads (one definition)
        static_rules.check("UserLevelDpSgd", vars(self))
        _validate.check_choice("poisson_selection", self.poisson_selection, POISSON_SELECTIONS)
        self.check_common()

    def validate(self, data) -> None:
        if int(data.num_silos) < 1:
            raise ValueError("data has no users (one silo per user)")
        if self.unit == "example" and self.poisson_selection == "truncated" and self.capacity is None:
            largest = max(int(m) for m in np.asarray(data.sizes))
            k = self.records_per_user
            if min(k, int(data.n_max)) != min(k, largest):  # the buffer is sized from the slots, the charge from sizes
                raise ValueError(f"n_max={data.n_max} rows padded beyond the largest user ({largest} records) with "
                                 f"records_per_user={k}: the truncated buffer's slots and its charge would differ; "
                                 "pad to the largest user or choose poisson_selection='buffered'")

    def parts(self, shape: DataShape) -> Parts:
        if self.unit == "user":
            selection = UserSampling(self.batch_size, self.sampling_rate, self.records_per_user, self.capacity,
                                     self.num_rounds, self.poisson_selection)
            clip = ClipUserMean(self.problem, float(self.batch_size), records_per_user=self.records_per_user)
        else:
            selection = RecordSampling(self.batch_size, self.sampling_rate, self.records_per_user, self.capacity,
                                       self.num_rounds, self.poisson_selection)
            clip = ClipRecords(self.problem, float(self.batch_size))
        return Parts(selection, (UserRecordGradients(), clip, GaussianNoise("noise_multiplier", placement="server"),
                                 OptaxServer(OPTIMIZERS[self.optimizer]), Averager(self.output, self.window)))


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("user-level-dpsgd", UserLevelDpSgd,
                "user-level DP-SGD on record data (Charles et al. 2024): ULS sampling users or ELS sampling records")
