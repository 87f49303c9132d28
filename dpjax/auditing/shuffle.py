"""Canary audits of the shuffle-model families: SDP one-pass accelerated MB-SGD with P_vec (Lowy & Razaviyayn 2023,
Algorithm 6), P_SGD with P_vec and pan-private AC-SA (Cheu et al. 2022); part of the catalogue
(``dpjax.auditing.mechanisms``)."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from dpjax.accounting import gdp
from dpjax.algorithms.shuffle_sco import ScoHParams, ShuffleAcsa, ShuffleSgd
from dpjax.algorithms.shuffled import SdpHParams, SdpOnePassAccelerated
from dpjax.auditing import exact as exact_lib
from dpjax.auditing.audit import CanaryAudit
from dpjax.auditing.canaries import DELTA, canary_pair, family_audit, mutants, silos
from dpjax.auditing.execute import CanaryProbe
from dpjax.parts.acsa import AcsaSchedule, acsa_constants
from dpjax.primitives.shuffle_protocols import PvecParams

__all__ = ["binomial_exact", "sdp_accelerated_audit", "shuffle_acsa_audit", "shuffle_sgd_audit"]


def binomial_exact(trials: int, p: float, g: int) -> dict:
    pm, qm = exact_lib.shifted_binomial_pmfs(trials, p, g)
    half = exact_lib.shifted_binomial_pmfs(trials // 2, p, g)
    return {"epsilon": exact_lib.exact_epsilon(pm, qm, DELTA), "half_noise_epsilon": exact_lib.exact_epsilon(*half, DELTA),
            "note": f"canary coordinate's count: Bin({trials}, p) vs {g} + Bin({trials}, p)"}


def sdp_accelerated_audit(epsilon: float = 2.0, sizes=(4, 4), bound: float = 1.0) -> CanaryAudit:
    """SDP one-pass accelerated MB-SGD (Lowy & Razaviyayn Algorithm 6): one round of K = n records per silo, each
    clipped and run through the P_vec randomizer (d = 1), analyzer over the M K shuffled vectors. Other records sit
    at -L (deterministic rounding to 0), the canary at -/+ 1000 L (clipped to the range ends: rounding 0 or g), so the
    count is Bin(M K b, p) or g + Bin(M K b, p)."""
    k = sizes[0]
    family = SdpOnePassAccelerated(CanaryProbe(1), 1, k)
    params = family.pvec_params_for(len(sizes), epsilon, DELTA)
    g, b, p = params.numbers()
    schedule = AcsaSchedule.single_stage(1, 1.0)
    gran, prob = jnp.int32(g), jnp.float32(params.probability)

    def hparams(inp):
        return SdpHParams(schedule, PvecParams(gran, inp["trials"], prob), inp["clip_norm"])

    d, dp = (silos(sizes, 1, s * 1000.0 * bound, fill=-bound) for s in (-1.0, 1.0))
    vectors = family.min_vectors(len(sizes))
    return family_audit(
        "sdp-accelerated", "sdp-accelerated", "SDP one-pass accelerated MB-SGD with P_vec (SdpOnePassAccelerated.step: "
        "clipped vectors, P_vec randomizer, shuffled analyzer)",
        family, hparams, sizes, d, dp, {"trials": int(b), "clip_norm": bound},
        lambda inc: -inc[0, 0], "pvec-lemma", {"no-noise": {"trials": 0}},
        lambda: binomial_exact(vectors * b, p, g),
        {"silo_sizes": sizes, "vectors": vectors, "g": g, "b": b, "p": p, "calibrated_epsilon": epsilon},
        jnp.zeros((1,), jnp.float32))


def shuffle_sgd_audit(epsilon: float = 2.0, n: int = 20, bound: float = 1.0) -> CanaryAudit:
    """P_SGD (Cheu et al. 2022, Algorithm 3) for one round of all n users with P_vec (d = 1), the P_vec parameters from
    the family's own calibration: P_1D on the canary's coordinate."""
    family = ShuffleSgd(CanaryProbe(1), 1, n, aggregator="pvec", projection_radius=None, output="last")
    base = ScoHParams.single_phase(1, n, 1.0, clip_norm=bound)
    pv = family.privacy([n], base).calibrate(epsilon, DELTA, "pvec-lemma")["pvec"]
    g, b, p = (int(np.asarray(pv.granularity)[0]), int(np.asarray(pv.trials)[0]) * family.trial_groups,
               float(np.asarray(pv.probability)[0]))
    gran, prob = jnp.asarray(pv.granularity), jnp.asarray(pv.probability)

    def hparams(inp):
        return ScoHParams(base.start, base.batch, base.stage_round, base.step, base.smoothing,
                          PvecParams(gran, jnp.reshape(inp["trials"], (1,)), prob), base.noise_multiplier,
                          inp["clip_norm"])

    d, dp = (silos((n,), 1, s * 1000.0 * bound, fill=-bound) for s in (-1.0, 1.0))
    return family_audit(
        "shuffle-sgd", "shuffle-sgd", "P_SGD with P_vec (ShuffleSgd.step: users' projected gradients, count-level "
        "P_vec, analyzer / B)",
        family, hparams, [n], d, dp, {"trials": int(np.asarray(pv.trials)[0]), "clip_norm": bound},
        lambda inc: -inc[0, 0], "pvec-lemma", {"no-noise": {"trials": 0}}, lambda: binomial_exact(n * b, p, g),
        {"n": n, "g": g, "b": b, "p": p, "calibrated_epsilon": epsilon}, jnp.zeros((1,), jnp.float32))


def shuffle_acsa_audit(noise_multiplier: float = 2.5, n: int = 10, batch: int = 5, bound: float = 0.5,
                       smoothness: float = 1.0) -> CanaryAudit:
    """Pan-private AC-SA (Cheu et al. 2022, Appendix C, Algorithm 6): two N(0, zeta^2) draws on each batch sum of the
    users' projected gradients (zeta = z 2L, the sum's replace-one sensitivity); the canary user is in round 1's batch.
    Round 1 moves w_ag by ``-(alpha_1^2 / eta_1)`` times the batch mean."""
    rounds = 2
    family = ShuffleAcsa(CanaryProbe(1), rounds, batch, aggregator="pan-gaussian", projection_radius=None)
    base = ScoHParams.single_phase(rounds, batch, smoothness, noise_multiplier=noise_multiplier, clip_norm=bound)
    alpha, eta = acsa_constants(1, smoothness, family.acsa_schedule)
    factor = float(eta) / float(alpha) ** 2 * batch

    def hparams(inp):
        return ScoHParams(base.start, base.batch, base.stage_round, base.step, base.smoothing, base.pvec,
                          jnp.full((rounds,), inp["noise_multiplier"]), inp["clip_norm"])

    sd = math.sqrt(2) * noise_multiplier * 2 * bound
    m = bound / sd
    d, dp = canary_pair((n,), 1, 1000.0 * bound)
    return family_audit(
        "shuffle-acsa", "shuffle-acsa", "pan-private AC-SA (ShuffleAcsa.step: projected user gradients, two Gaussian "
        "draws per batch)",
        family, hparams, [n], d, dp, {"noise_multiplier": noise_multiplier, "clip_norm": bound},
        lambda inc: -inc[0, 0] * factor / sd, "pan-analytic",
        mutants({"noise_multiplier": noise_multiplier}, "clip_norm", multiplier_of=bound),
        lambda: {"epsilon": gdp.gdp_epsilon(2 * m, DELTA), "half_noise_epsilon": gdp.gdp_epsilon(4 * m, DELTA)},
        {"n": n, "batch": batch, "noise_multiplier": noise_multiplier, "clip_norm": bound}, jnp.zeros((1,), jnp.float32))


