"""Canary audits of central DP-SGD (Abadi et al., Poisson) and DP-SGD-General (van Dijk et al., Algorithm 1: shuffling,
subsampling or Poisson; individual or batch clipping); part of the catalogue (``dpjax.auditing.mechanisms``)."""

from __future__ import annotations

import math

from dpjax.algorithms.dp_sgd import DpSgd
from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
from dpjax.auditing import exact as exact_lib
from dpjax.auditing.audit import CanaryAudit
from dpjax.auditing.canaries import (CANARY_SCALE, DELTA, add_remove_pair, canary_pair, inclusion_mixture,
                                    multiplier_audit)
from dpjax.auditing.execute import CanaryProbe
from dpjax.auditing.scores import one_per_epoch_llr

__all__ = ["dp_sgd_audit", "dpsgd_general_audit"]


def dp_sgd_audit(noise_multiplier: float = 1.5, clip_norm: float = 0.5, sizes=(20, 24), batch_size: int = 5,
                 num_rounds: int = 4, dim: int = 2) -> CanaryAudit:
    """DP-SGD (Abadi et al., Poisson, add/remove): D' holds the canary as the last record of the smallest silo, D does
    not; N(0, (sigma C)^2 I) once on the clipped sum; SGD server. Both draw every record at the declared public rate q =
    K / n of D' (not at each data set's own K / n)."""
    q = batch_size / sizes[0]
    family = DpSgd(CanaryProbe(dim), num_rounds, batch_size, sampling="poisson", optimizer="sgd", sampling_rate=q)
    std = noise_multiplier * clip_norm  # the multiplier of the add/remove sensitivity C of the sum
    n_silos = len(sizes)
    m = clip_norm / std
    d, dp = add_remove_pair(sizes, dim, CANARY_SCALE * clip_norm)
    scale = batch_size * n_silos / std  # w <- w - (S + z) / (K N): the sum in noise stds
    score, exact = inclusion_mixture(lambda inc: -inc[:, 0] * scale, [1 - q, q], m, num_rounds, m_d=0.0)
    return multiplier_audit(
        "dp-sgd", "dp-sgd", "DP-SGD, Poisson (DpSgd, DP-SGD-General's step: Poisson batches, per-example clip, one "
        "Gaussian on the pooled mean)",
        family, DpSgdHParams.create, 1.0, sizes, d, dp, noise_multiplier, clip_norm, score, "pld", exact,
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "silo_sizes": sizes, "batch_size": batch_size,
         "num_rounds": num_rounds}, dim)


def dpsgd_general_audit(sampling: str, clip: str, noise_multiplier: float, n: int, batch_size: int = 5,
                        epochs: int = 1, clip_norm: float = 0.5, dim: int = 2, group_size: int = 1) -> CanaryAudit:
    """DP-SGD-General (van Dijk et al., Algorithm 1) on one silo: shuffling (one permutation per epoch), uniform
    subsampling or Poisson; individual clipping (s = 1, m = K) or batch clipping (s = K, m = 1); N(0, (2 C sigma)^2 I)
    (Poisson: (C sigma)^2, add/remove) on the sum of the clipped terms. ``group_size`` g > 1: D and D' differ in g
    canary records (replace-up-to-g)."""
    s, mm = (1, batch_size) if clip == "individual" else (batch_size, 1)
    poisson = sampling == "poisson"
    per_epoch = n // batch_size if sampling != "subsample" else 1
    family = DpSgdGeneral(CanaryProbe(dim), epochs * per_epoch, s, mm, per_epoch, sampling=sampling,
                          neighboring="add-remove" if poisson else "replace-one",
                          sampling_rate=mm / n if poisson else None)  # D and D' both drawn at q = m / n
    rounds = family.num_rounds
    std = noise_multiplier * clip_norm * (1 if poisson else 2)
    shift = clip_norm / std  # the canary's clipped term in noise stds
    value = CANARY_SCALE * clip_norm * batch_size
    if poisson:
        d, dp = add_remove_pair((n,), dim, value)
        q = mm / n
        probs, m_d = [1 - q, q], 0.0
    else:
        d, dp = canary_pair((n,), dim, value, rows=tuple(range(group_size)))
        m_d = -shift
        hits = [math.comb(group_size, t) * math.comb(n - group_size, batch_size - t) / math.comb(n, batch_size)
                for t in range(min(group_size, batch_size) + 1)]
        probs = hits if clip == "individual" else [hits[0], 1.0 - hits[0]]
    if sampling == "shuffle":
        score = lambda inc: one_per_epoch_llr((-inc[:, 0] * mm / std).reshape(epochs, per_epoch), -shift, shift)  # noqa: E731
        exact = (lambda: {"epsilon": exact_lib.one_of_two_epsilon(shift, DELTA),
                          "half_noise_epsilon": exact_lib.one_of_two_epsilon(2 * shift, DELTA)}) \
            if (epochs, per_epoch) == (1, 2) else None
    else:
        score, exact = inclusion_mixture(lambda inc: -inc[:, 0] * mm / std, probs, shift, rounds, m_d=m_d)
    suffix = "" if group_size == 1 else f"-g{group_size}"
    name = "dpsgd-general-poisson" if poisson else f"dpsgd-general-{sampling}-{clip}{suffix}"
    return multiplier_audit(
        name, "dpsgd-general", f"DP-SGD-General, {clip} clipping, {sampling} (DpSgdGeneral.step)",
        family, DpSgdHParams.create, 1.0, [n], d, dp, noise_multiplier, clip_norm, score,
        "pld" if poisson else "strong-exact", exact,
        {"noise_multiplier": noise_multiplier, "noise_std": std, "clip_norm": clip_norm, "n": n,
         "batch_size": batch_size, "epochs": epochs, "rounds": rounds, "group_size": group_size},
        dim, privacy_kw=None if poisson else {"group_size": group_size})


