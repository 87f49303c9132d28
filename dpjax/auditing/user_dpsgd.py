"""Canary audit of user-level DP-SGD with user-level sampling (ULS; Charles et al. 2024, ``dpjax.algorithms.
user_level_dpsgd``); part of the catalogue (``dpjax.auditing.mechanisms``).

Add/remove one user: D' holds a canary user of k records ``100 C e_1`` (every gradient of ``CanaryProbe`` is its
record) beside users whose records are zero; D lacks the canary user. Each round the canary user is sampled with
probability q and its mean gradient, clipped as one unit, shifts the released sum by C; the observer reads the
released sums from the increments, in noise stds. The certificate is the family's own ULS accountant (PLD), the exact
epsilon that of the canary pair (``inclusion_mixture``). Mutants: half the noise, and clipping per record instead of
per user (every record of a sampled user clipped to C and summed, the DP-SGD clipper on user data: the canary user
then moves the sum by k C while the ULS accountant charges C).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from dpjax.accounting.user_dpsgd import binomial_pmf
from dpjax.algorithms.user_level_dpsgd import DpSgdHParams, UserLevelDpSgd
from dpjax.auditing.audit import CanaryAudit, FamilyRun
from dpjax.auditing.canaries import CANARY_SCALE, family_audit, inclusion_mixture, mutants
from dpjax.auditing.execute import CanaryProbe
from dpjax.engine.chain import DataShape, Parts
from dpjax.engine.silos import SiloData
from dpjax.parts.user_records import ClipRecords

__all__ = ["PerRecordClippingUls", "user_dpsgd_audit", "user_dpsgd_els_audit"]


@dataclasses.dataclass(frozen=True)
class PerRecordClippingUls(UserLevelDpSgd):
    """The mutant: ULS batches and accounting, but every record's gradient clipped and summed (``ClipRecords``)
    instead of each user's mean gradient clipped once (``ClipUserMean``)."""

    def parts(self, shape: DataShape) -> Parts:
        return super().parts(shape).with_role("clipper", lambda _: ClipRecords(self.problem, float(self.batch_size)))


def _users(num_users: int, records: int, dim: int, canary: bool, value: float = 1.0) -> SiloData:
    """``num_users`` users of ``records`` zero records each, the last one (``canary``) of ``value e_1`` records."""
    xs = [np.zeros((records, dim), np.float32) for _ in range(num_users)]
    if canary:
        xs[-1][:, 0] = value
    return SiloData.from_silos(xs, [np.zeros(records, np.float32) for _ in range(num_users)])


def user_dpsgd_audit(noise_multiplier: float = 1.0, clip_norm: float = 0.5, num_users: int = 4,
                     records_per_user: int = 4, sampling_rate: float = 0.5, num_rounds: int = 3,
                     dim: int = 2) -> CanaryAudit:
    """ULS on ``num_users`` users of ``records_per_user`` records (D': the last is the canary user), q public,
    m = q x num_users the public divisor, SGD at step 1; noise ``N(0, (z C)^2 I)`` on the clipped sum."""
    m = sampling_rate * num_users
    family = UserLevelDpSgd(CanaryProbe(dim), num_rounds, "user", batch_size=max(1, round(m)),
                            sampling_rate=sampling_rate, records_per_user=records_per_user)
    divisor = float(family.batch_size)
    value = CANARY_SCALE * clip_norm
    dp = _users(num_users, records_per_user, dim, canary=True, value=value)
    d = _users(num_users - 1, records_per_user, dim, canary=False)
    std = noise_multiplier * clip_norm  # of the sum (C: add/remove one user)
    score, exact = inclusion_mixture(lambda inc: -inc[:, 0] * divisor / std, [1 - sampling_rate, sampling_rate],
                                     clip_norm / std, num_rounds, m_d=0.0)
    hparams = lambda inp: DpSgdHParams.create(1.0, inp["noise_multiplier"], inp["clip_norm"])  # noqa: E731
    per_record = PerRecordClippingUls(CanaryProbe(dim), num_rounds, "user", batch_size=family.batch_size,
                                      sampling_rate=sampling_rate, records_per_user=records_per_user)
    params = jnp.zeros((dim,), jnp.float32)
    audit_mutants = {**mutants({"noise_multiplier": noise_multiplier}),
                     "clip-per-record": FamilyRun(per_record, "user-level-dpsgd", hparams, params)}
    return family_audit(
        "user-level-dpsgd-uls", "user-level-dpsgd",
        "user-level DP-SGD, ULS (UserLevelDpSgd: Poisson over users, each user's mean gradient clipped, one Gaussian)",
        family, hparams, dp.silo_sizes(), d, dp, {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm},
        score, "pld", audit_mutants, exact,
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "num_users": num_users,
         "records_per_user": records_per_user, "sampling_rate": sampling_rate, "num_rounds": num_rounds},
        params)


def user_dpsgd_els_audit(noise_multiplier: float = 2.0, clip_norm: float = 0.5, num_users: int = 3,
                         records_per_user: int = 2, sampling_rate: float = 0.5, num_rounds: int = 3,
                         dim: int = 2) -> CanaryAudit:
    """ELS (records w.p. q, every record clipped, each user's first k records drawable): the canary user holds 2k
    records ``100 C e_1``, of which the sampler may draw k, so a round shifts the released sum by ``B C`` with
    ``B ~ Binomial(k, q)``; certified by the family's ELS accountant (the mixture-of-Gaussians PLD). Mutants: half the
    noise, and the contribution bound not enforced (the sampler draws all 2k of the canary's records while the
    accountant charges k)."""
    k = records_per_user
    slots = num_users * 2 * k
    family = UserLevelDpSgd(CanaryProbe(dim), num_rounds, "example", batch_size=max(1, round(sampling_rate * slots)),
                            sampling_rate=sampling_rate, records_per_user=k)
    divisor = float(family.batch_size)
    dp = _users(num_users, 2 * k, dim, canary=True, value=CANARY_SCALE * clip_norm)
    d = _users(num_users - 1, 2 * k, dim, canary=False)
    std = noise_multiplier * clip_norm
    score, exact = inclusion_mixture(lambda inc: -inc[:, 0] * divisor / std, list(binomial_pmf(k, sampling_rate)),
                                     clip_norm / std, num_rounds, m_d=0.0)
    hparams = lambda inp: DpSgdHParams.create(1.0, inp["noise_multiplier"], inp["clip_norm"])  # noqa: E731
    unbounded = dataclasses.replace(family, records_per_user=2 * k)  # draws the canary's 2k records
    params = jnp.zeros((dim,), jnp.float32)
    audit_mutants = {**mutants({"noise_multiplier": noise_multiplier}),
                     "contribution-bound-not-enforced": FamilyRun(unbounded, "user-level-dpsgd", hparams, params)}
    return family_audit(
        "user-level-dpsgd-els", "user-level-dpsgd",
        "user-level DP-SGD, ELS (UserLevelDpSgd: Poisson over each user's first k records, per-record clip, group "
        "privacy)", family, hparams, dp.silo_sizes(), d, dp,
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm}, score, "pld", audit_mutants, exact,
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "num_users": num_users,
         "records_per_user": k, "sampling_rate": sampling_rate, "num_rounds": num_rounds}, params)
