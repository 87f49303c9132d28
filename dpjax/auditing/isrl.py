"""Canary audits of the ISRL-DP families (Lowy & Razaviyayn 2023): Noisy MB-SGD (Algorithm 2), Local SGD, one-pass
accelerated MB-SGD (Algorithm 1), unbalanced silos (Algorithm 7) and Shuffled Noisy MB-SGD (Section 5); part of the
catalogue (``dpjax.auditing.mechanisms``)."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from scipy import stats

from dpjax.algorithms.accelerated import AcceleratedHParams, AcceleratedMbSgd
from dpjax.algorithms.dp_scaffold import DpScaffold, ScaffoldHParams
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.algorithms.local_sgd import LocalSgd
from dpjax.algorithms.shuffled import ShuffledNoisyMbSgd
from dpjax.algorithms.unbalanced import UnbalancedHParams, UnbalancedNoisyMbSgd
from dpjax.auditing import exact as exact_lib
from dpjax.auditing.audit import CanaryAudit
from dpjax.auditing.canaries import CANARY_SCALE, DELTA, canary_pair, inclusion_mixture, multiplier_audit
from dpjax.auditing.execute import AutodiffProbe, CanaryProbe
from dpjax.auditing.scores import one_per_epoch_llr
from dpjax.parts.acsa import AcsaSchedule, acsa_constants

__all__ = ["dp_scaffold_audit", "isrl_accelerated_audit", "isrl_local_sgd_audit", "isrl_mbsgd_audit", "isrl_shuffled_audit",
           "isrl_unbalanced_audit"]


def _server_mean_audit(name, registered, description, family, create, sizes, batch: int, sd: float, probs,
                       num_rounds: int, noise_multiplier, clip_norm: float, accountant: str, details,
                       dim: int) -> CanaryAudit:
    """The audit of an ISRL-DP round whose observer sees the server's mean of the N silos' messages, each a clipped mean
    of ``batch`` records plus noise (``sd``: the std of the messages' sum): the canary, far outside the clip region in
    silo 0, enters a round ``l`` times with probability ``probs[l]``, each time moving the sum by ``m = C / (batch sd)``
    of its noise stds."""
    n_silos = len(sizes)
    m = clip_norm / batch / sd
    d, dp = canary_pair(sizes, dim, CANARY_SCALE * clip_norm * batch)
    score, exact = inclusion_mixture(lambda inc: -inc[:, 0] * n_silos / sd, probs, m, num_rounds)
    return multiplier_audit(name, registered, description, family, create, 1.0, sizes, d, dp, noise_multiplier,
                            clip_norm, score, accountant, exact, details, dim)


def isrl_mbsgd_audit(noise_multiplier: float = 2.8, clip_norm: float = 0.5, sizes=(8, 10), batch_size: int = 7,
                     num_rounds: int = 2, dim: int = 2, sampling_scheme: str = "without-replacement",
                     gradient_path: str = "auto", accountant: str = "rdp") -> CanaryAudit:
    """Noisy MB-SGD (Lowy & Razaviyayn 2023, Algorithm 2): K of the canary silo's n records per round, per-example clip
    C, mean, + N(0, sigma^2 I) per silo, sigma = z 2C/K (z the noise multiplier of the clipped mean's replace-one
    sensitivity); the observer sees the server's mean of the N silos' messages. ``gradient_path="auto"`` runs the dense
    (gather-free) path here; ``"gather"`` the indices of the sampler's ``draw`` on the padded silo and per-example
    autodiff."""
    # the gather path with a problem without closed-form clipping: per-example autodiff + clipped_sum
    problem = AutodiffProbe(dim) if gradient_path == "gather" else CanaryProbe(dim)
    family = NoisyMbSgd(problem, num_rounds, batch_size, sampling=sampling_scheme, gradient_path=gradient_path)
    sd = noise_multiplier * 2 * clip_norm / batch_size * math.sqrt(len(sizes))  # the observed sum of the messages
    q = batch_size / sizes[0]
    name = "isrl-mbsgd" if sampling_scheme == "without-replacement" else f"isrl-mbsgd-{sampling_scheme}"
    return _server_mean_audit(
        name, "isrl-mbsgd", f"ISRL-DP Noisy MB-SGD, {sampling_scheme}, {gradient_path} gradient path "
        "(NoisyMbSgd.step: sample K of n, clip, mean, per-silo noise, server mean)", family, MbSgdHParams.create,
        sizes, batch_size, sd, [1 - q, q], num_rounds, noise_multiplier, clip_norm, accountant,
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "silo_sizes": sizes, "batch_size": batch_size,
         "num_rounds": num_rounds, "sampling": sampling_scheme, "gradient_path": gradient_path}, dim)


def isrl_local_sgd_audit(noise_multiplier: float = 0.7, clip_norm: float = 0.5, sizes=(6, 8), local_steps: int = 3,
                         num_rounds: int = 2, dim: int = 2) -> CanaryAudit:
    """ISRL-DP Local SGD: K single-record steps per silo and round, each clipped and noised; the observer sees the mean
    of the silos' last local iterates (the canary enters Bin(K, 1/n) times); every step's noise std is z 2C (the
    replace-one sensitivity of one clipped gradient)."""
    family = LocalSgd(CanaryProbe(dim), num_rounds, local_steps)
    n_silos, k = len(sizes), local_steps
    sd = noise_multiplier * 2 * clip_norm * math.sqrt(n_silos * k)
    probs = stats.binom.pmf(np.arange(k + 1), k, 1 / sizes[0])
    return _server_mean_audit(  # each message a single clipped record (batch 1), entering Bin(K, 1/n) times
        "isrl-local-sgd", "isrl-local-sgd", "ISRL-DP Local SGD (LocalSgd.step: K noisy clipped single-record "
        "steps per silo, model averaging)", family, MbSgdHParams.create,
        sizes, 1, sd, probs, num_rounds, noise_multiplier, clip_norm, "rdp",
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "silo_sizes": sizes, "local_steps": k,
         "num_rounds": num_rounds}, dim)


def dp_scaffold_audit(noise_multiplier: float = 0.8, clip_norm: float = 0.5, sizes=(6, 8), local_steps: int = 3,
                      batch_size: int = 2, dim: int = 2) -> CanaryAudit:
    """DP-SCAFFOLD (Noble et al. 2022) in one round with every silo available and step sizes 1: the control variates
    start at 0, so each silo's delta is the sum of its K noisy clipped minibatch means (``z 2C/s`` noise each); the
    observer sees the server's mean of the deltas, and the canary enters Bin(K, s/n) of the K independent s-subsets of
    its silo, each time moving the sum by ``C/s``."""
    family = DpScaffold(CanaryProbe(dim), 1, len(sizes), local_steps, batch_size)
    n_silos, k = len(sizes), local_steps
    sd = noise_multiplier * 2 * clip_norm / batch_size * math.sqrt(n_silos * k)
    probs = stats.binom.pmf(np.arange(k + 1), k, batch_size / sizes[0])
    return _server_mean_audit(
        "dp-scaffold", "dp-scaffold", "DP-SCAFFOLD (the generic fold: K noisy clipped minibatch steps per silo with "
        "the control-variate correction, the deltas' mean, server step)", family,
        lambda lr, z, c: ScaffoldHParams.create(lr, 1.0, z, c), sizes, batch_size, sd, probs, 1, noise_multiplier,
        clip_norm, "rdp", {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "silo_sizes": sizes,
                           "local_steps": k, "batch_size": batch_size}, dim)


def isrl_accelerated_audit(noise_multiplier: float = 1.2, clip_norm: float = 0.5, sizes=(8, 10), batch_size: int = 4,
                           dim: int = 2, smoothness: float = 1.0) -> CanaryAudit:
    """One-pass accelerated MB-SGD (Algorithm 1 / Theorem 3.1): R = 2 disjoint blocks of K = n/2 of the canary silo, so
    the canary is in exactly one round; AC-SA's w_ag moves by ``-(alpha_t^2 / eta_t) g_t`` in rounds 1 and 2 (mu = 0);
    per-silo noise std z 2C/K."""
    rounds = 2
    family = AcceleratedMbSgd(CanaryProbe(dim), rounds, batch_size, sampling="one-pass")
    if rounds * batch_size != sizes[0]:
        raise ValueError("the audit needs R K = n on the canary silo (each record in exactly one round)")
    schedule = AcsaSchedule.single_stage(rounds, smoothness)
    factors = jnp.asarray([float(e) / float(a) ** 2 for a, e in (acsa_constants(t, smoothness) for t in (1, 2))])
    n_silos = len(sizes)
    sd = noise_multiplier * 2 * clip_norm / batch_size * math.sqrt(n_silos)
    m = clip_norm / batch_size / sd
    d, dp = canary_pair(sizes, dim, CANARY_SCALE * clip_norm * batch_size)
    return multiplier_audit(
        "isrl-accelerated", "isrl-accelerated", "one-pass accelerated ISRL-DP MB-SGD (AcceleratedMbSgd.step: "
        "next block, clip, mean, per-silo noise, AC-SA)",
        family, AcceleratedHParams.create, schedule, sizes, d, dp, noise_multiplier, clip_norm,
        lambda inc: one_per_epoch_llr((-inc[:, 0] * factors * n_silos / sd).reshape(1, rounds), -m, m), "gdp",
        lambda: {"epsilon": exact_lib.one_of_two_epsilon(m, DELTA),
                 "half_noise_epsilon": exact_lib.one_of_two_epsilon(2 * m, DELTA), "shift_in_noise_stds": m},
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "silo_sizes": sizes, "batch_size": batch_size,
         "num_rounds": rounds}, dim)


def isrl_unbalanced_audit(noise_multipliers=(1.05, 2.0), clip_norm: float = 0.5, sizes=(6, 9), batch_sizes=(3, 4),
                          num_rounds: int = 2, dim: int = 2) -> CanaryAudit:
    """Algorithm 7 (unbalanced silos, per-silo K_i and sigma_i); the canary is in silo 0, whose guarantee is the
    largest; the certificate is the largest per-silo epsilon. Silo i's noise std is z_i 2C/K_i."""
    family = UnbalancedNoisyMbSgd(CanaryProbe(dim), num_rounds, tuple(batch_sizes))
    sd = math.sqrt(sum((z * 2 * clip_norm / k) ** 2 for z, k in zip(noise_multipliers, batch_sizes)))
    q = batch_sizes[0] / sizes[0]
    return _server_mean_audit(
        "isrl-unbalanced", "isrl-unbalanced", "ISRL-DP Noisy MB-SGD with unbalanced silos (UnbalancedNoisyMbSgd.step: "
        "K_i of n_i, clip, mean, N(0, sigma_i^2 I))", family, UnbalancedHParams.create, sizes, batch_sizes[0], sd,
        [1 - q, q], num_rounds, list(noise_multipliers), clip_norm, "rdp",
        {"noise_multipliers": tuple(noise_multipliers), "clip_norm": clip_norm, "silo_sizes": sizes,
         "batch_sizes": tuple(batch_sizes), "num_rounds": num_rounds}, dim)


def isrl_shuffled_audit(noise_multiplier: float = 0.8, clip_norm: float = 0.5, sizes=(6, 8), batch_size: int = 2,
                        num_rounds: int = 2, dim: int = 2) -> CanaryAudit:
    """Shuffled Noisy MB-SGD (Section 5): every silo reports (M = N) K records drawn with replacement; the server sees
    the shuffled multiset's mean (per-silo noise std z 2C/K). Certificate: the family's central guarantee."""
    n_silos = len(sizes)
    family = ShuffledNoisyMbSgd(CanaryProbe(dim), num_rounds, n_silos, batch_size)
    sd = noise_multiplier * 2 * clip_norm / batch_size * math.sqrt(n_silos)
    probs = stats.binom.pmf(np.arange(batch_size + 1), batch_size, 1 / sizes[0])
    return _server_mean_audit(
        "isrl-shuffled", "isrl-shuffled", "Shuffled Noisy MB-SGD (ShuffledNoisyMbSgd.step: K with replacement, clip, "
        "mean, per-silo noise, shuffler, multiset mean)", family, MbSgdHParams.create,
        sizes, batch_size, sd, probs, num_rounds, noise_multiplier, clip_norm, "shuffle-tight",
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "silo_sizes": sizes, "batch_size": batch_size,
         "num_rounds": num_rounds}, dim)
