"""Canary audit of DP-FedAvg with BandMF noise over cyclic-Poisson client groups (``DpFedAvgBandMf``, registered as
``dp-fedavg-band-mf``), part of the catalogue (``dpjax.auditing.mechanisms``): a ``FamilyRun`` of the family's own step
(cyclic Poisson cohort, local SGD, fixed clip, public mean, ``dpjax.parts.band_mf.BandMfNoise``, SGD), certified by its
``privacy()`` (amplified BandMF, Choquette-Choo et al., "(Amplified) Banded Matrix Factorization", NeurIPS 2023, Thm 4).

The pair (add/remove of a user): D' holds ``users`` clients, one record each, the canary user's record at ``100 C e_1``
and every other record 0; D lacks the canary user. On ``CanaryProbe`` (loss ``<w, x>``) with client and server learning
rates 1 and one local step, a client's delta is its record, so the canary's clipped delta is ``C e_1`` and every other
delta 0. The negated increments along ``e_1``, in noise stds ``sigma = z C / m``, are ``u = b / z + C_s^{-1} w``
(``b_t`` = 1 when the canary is in round t's cohort, ``C_s`` the strategy), so ``v = C_s u = C_s b / z + w``.

The canary's group ``g`` is uniform over the ``p`` groups (``users`` a multiple of ``p``); it joins rounds
``g, g + p, ...`` each w.p. q. For ``p >= bands`` those columns of ``C_s`` have disjoint supports, so given ``g`` the
pair is ``k = R / p`` independent releases ``N(b_j a_j, 1)`` (``a_j = ||C_s e_t|| / z <= 1 / z``) along the unit
columns. The score is the exact log-likelihood ratio of D' against D given ``v``:
``log mean_g prod_j (1 - q + q exp(a_j s_j - a_j^2 / 2))``, ``s_j`` the projections. The exact epsilon reported is an
upper bound on the pair's: ``k`` i.i.d. Poisson-subsampled Gaussians of shift ``1 / z`` (each ``a_j <= 1 / z``; a
mixture over ``g`` of pairs never leaks more than its worst), which is the certificate's event.

Mutants (the standard multiplier ones, ``canaries.mutants``): half the noise, and a clip the noise does not follow.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.algorithms.band_mf_fedavg import BandMfFedAvgHParams, DpFedAvgBandMf
from dpjax.auditing import canaries
from dpjax.auditing.audit import CanaryAudit
from dpjax.auditing.execute import CanaryProbe
from dpjax.engine.chain import DataShape
from dpjax.engine.silos import SiloData
from dpjax.primitives import banded_mf

__all__ = ["band_mf_fedavg_audit"]


def _users(num: int, canary: float | None) -> SiloData:
    """``num`` one-record users at 0, plus (``canary`` not None) a first user at ``canary e_1``."""
    xs = ([np.array([[canary, 0.0]], np.float32)] if canary is not None else []) + [np.zeros((1, 2), np.float32)] * num
    return SiloData.from_silos(xs, [np.zeros(1, np.float32)] * len(xs))


def band_mf_fedavg_audit(noise_multiplier: float = 1.5, clip_norm: float = 0.5, users: int = 12, groups: int = 3,
                         sampling_rate: float = 0.5, rounds: int = 12, bands: int = 3) -> CanaryAudit:
    """The audit of the module docstring: ``users`` clients in ``groups`` p groups (``users % p == 0``, so the
    canary's group is uniform), ``rounds`` a multiple of p, the optimised strategy of ``bands <= p`` bands, the
    public cohort ``m = q users / p``."""
    if users % groups or rounds % groups or bands > groups:
        raise ValueError(f"users={users} and rounds={rounds} must be multiples of groups={groups}, and bands={bands} "
                         f"<= groups")
    m = max(1, round(sampling_rate * users / groups))
    family = DpFedAvgBandMf(CanaryProbe(2), rounds, m, sampling_rate=sampling_rate, bands=bands, num_groups=groups)
    coeffs = family.parts(DataShape(1, 1)).role("privatizer").coeffs
    strategy = banded_mf.toeplitz_strategy(coeffs, rounds)
    k, z, q = rounds // groups, noise_multiplier, sampling_rate
    norms = np.linalg.norm(strategy, axis=0)  # ||C_s e_t||: 1 except the last bands - 1 rounds
    # rows (g, j): the unit column of round g + j p, and its shift a = ||C_s e_t|| / z
    cols = np.stack([[strategy[:, g + j * groups] / norms[g + j * groups] for j in range(k)] for g in range(groups)])
    shifts = np.stack([[norms[g + j * groups] / z for j in range(k)] for g in range(groups)])
    unit = jnp.asarray(cols @ strategy, jnp.float32)  # [p, k, R]: s = <unit column, C_s u>
    a = jnp.asarray(shifts, jnp.float32)
    sigma = float(np.float32(z) * np.float32(clip_norm)) / m

    def score(inc):
        s = unit @ (-inc[:, 0] / sigma)  # [p, k]
        per_group = jnp.sum(jnp.log1p(q * jnp.expm1(a * s - a * a / 2)), axis=1)
        return jax.scipy.special.logsumexp(per_group) - math.log(groups)

    def hparams(inp):
        return BandMfFedAvgHParams.create(1.0, 1.0, inp["noise_multiplier"], inp["clip_norm"])

    d, dp = _users(users - 1, None), _users(users - 1, canaries.CANARY_SCALE * clip_norm)
    exact = canaries.mixture([1 - q, q], 1.0 / z, k, m_d=0.0)
    return canaries.family_audit(
        "dp-fedavg-band-mf", "dp-fedavg-band-mf",
        "DP-FedAvg with BandMF noise (DpFedAvgBandMf.step: cyclic-Poisson cohort of client groups, local SGD, fixed "
        "clip, public mean, C^{-1}-correlated noise from the (bands-1) x d buffer, SGD), add/remove of a user",
        family, hparams, [1] * users, d, dp, {"noise_multiplier": z, "clip_norm": clip_norm}, score, "pld",
        canaries.mutants({"noise_multiplier": z}, "clip_norm", multiplier_of=clip_norm), exact,
        {"users": users, "groups": groups, "sampling_rate": q, "rounds": rounds, "bands": bands,
         "participations": k, "cohort": m, "coeffs": [round(x, 4) for x in coeffs]}, jnp.zeros((2,), jnp.float32))
