"""Canary audits of DIFF2 (Murata & Suzuki 2023): DIFF2-GD, DIFF2-BVR-L-SGD and DP-GD (every round a restart); part of
the catalogue (``dpjax.auditing.mechanisms``)."""

from __future__ import annotations

import math

import jax.numpy as jnp

from dpjax.accounting import gdp
from dpjax.algorithms.diff2 import Diff2BvrLSgd, Diff2GD, Diff2HParams
from dpjax.auditing.audit import CanaryAudit
from dpjax.auditing.canaries import CANARY_SCALE, DELTA, family_audit, mutants, silos
from dpjax.auditing.execute import DifferenceProbe

__all__ = ["diff2_audit", "dp_gd_audit"]


def diff2_audit(kind: str = "diff2-gd", noise_multiplier_restart: float = 1.8, noise_multiplier_diff: float = 1.8,
                sizes=(4, 6), clip_restart: float = 1.0, clip_diff: float = 1.0,
                learning_rate: float = 1.0) -> CanaryAudit:
    """DIFF2 (Murata & Suzuki 2023, Alg. 1 + 3) for R = 2 rounds with T = 2: round 1 restarts (std z1 2 C1 / (n_min P),
    the replace-one sensitivity of the server mean of clipped means), round 2 is a difference round (std z2 2 C2 ||x1 -
    x0|| / (n_min P)); the observer sees the two noisy estimators (from the iterates). ``kind="diff2-bvr"``: the same
    estimator in ``Diff2BvrLSgd.step`` with K = 1 (no local steps; their noise is pinned in tests/privacy)."""
    if kind == "diff2-gd":
        family = Diff2GD(DifferenceProbe(), 2, output="last")
        privacy_kw = None
    else:
        family = Diff2BvrLSgd(DifferenceProbe(), 2, local_steps=1, batch_size=2, output="last")
        privacy_kw = {"local_count": "exact"}
    z1, z2 = noise_multiplier_restart, noise_multiplier_diff
    big = CANARY_SCALE * max(clip_restart, clip_diff, 1.0)
    d, dp = (silos(sizes, 1, big, label=1.0, canary_label=sign) for sign in (-1.0, 1.0))
    a = 1.0 / (sizes[0] * len(sizes))  # normalised shift of the server mean (Prop. 4.1: 2C/(n P) between D, D')

    def score(inc):
        v1, v2, x1 = -inc[0, 0] / learning_rate, -inc[1, 0] / learning_rate, inc[0, 0]
        s1 = v1 / (2 * a * z1 * clip_restart)  # the restart estimator in noise stds
        s2 = (v2 - v1) / (2 * a * z2 * clip_diff * jnp.abs(x1)) * jnp.sign(x1)  # x0 = 0
        return s1 / z1 + s2 / z2  # Gaussian LLR up to a constant (the shifts are 1/z in noise stds)

    mu = math.hypot(1 / z1, 1 / z2)
    return family_audit(
        kind, kind, f"DIFF2 restart + difference channel ({type(family).__name__}.step: clipped means, z x "
        "sensitivity noise)",
        family, lambda inp: Diff2HParams.create(learning_rate, 2, clip_restart, clip_diff,
                                                inp["noise_multiplier_restart"], inp["noise_multiplier_diff"]),
        sizes, d, dp, {"noise_multiplier_restart": z1, "noise_multiplier_diff": z2}, score, "rdp",
        {"half-noise": {"noise_multiplier_restart": z1 / 2, "noise_multiplier_diff": z2 / 2}},
        lambda: {"mu": mu, "epsilon": gdp.gdp_epsilon(mu, DELTA), "half_noise_epsilon": gdp.gdp_epsilon(2 * mu, DELTA)},
        {"noise_multiplier_restart": z1, "noise_multiplier_diff": z2, "silo_sizes": sizes, "rounds": 2,
         "restart_interval": 2}, jnp.zeros((1,), jnp.float32), privacy_kw=privacy_kw)


def dp_gd_audit(noise_multiplier: float = 2.0, sizes=(4, 6), clip_norm: float = 0.5,
                learning_rate: float = 1.0) -> CanaryAudit:
    """DP-GD (DIFF2-GD with every round a restart round), one round: the Gaussian mechanism on the server mean of the
    silos' clipped full-batch means, std z 2C / (n_min P)."""
    family = Diff2GD(DifferenceProbe(), 1, restart_every_round=True, output="last")
    d, dp = (silos(sizes, 1, CANARY_SCALE * clip_norm, label=1.0, canary_label=sign) for sign in (-1.0, 1.0))
    a = 1.0 / (sizes[0] * len(sizes))
    std = noise_multiplier * 2 * a * clip_norm
    mu = 1 / noise_multiplier  # the shift 2 a C in noise stds
    return family_audit(
        "dp-gd", "dp-gd", "DP-GD (Diff2GD.step, restart every round: clipped full-batch means, one Gaussian)",
        family, lambda inp: Diff2HParams.create(learning_rate, 1, inp["clip_norm"], 1.0,
                                                inp["noise_multiplier_restart"], 0.0),
        sizes, d, dp, {"noise_multiplier_restart": noise_multiplier, "clip_norm": clip_norm},
        lambda inc: -inc[0, 0] / (learning_rate * std), "rdp",
        mutants({"noise_multiplier_restart": noise_multiplier}, "clip_norm", multiplier_of=clip_norm),
        lambda: {"mu": mu, "epsilon": gdp.gdp_epsilon(mu, DELTA), "half_noise_epsilon": gdp.gdp_epsilon(2 * mu, DELTA)},
        {"noise_multiplier_restart": noise_multiplier, "clip_norm": clip_norm, "silo_sizes": sizes},
        jnp.zeros((1,), jnp.float32))


