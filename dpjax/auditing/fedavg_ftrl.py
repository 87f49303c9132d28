"""Canary audits of DP-FedAvg with adaptive clipping and DP-FTRL with tree aggregation, part of the catalogue
(``dpjax.auditing.mechanisms``): each a ``FamilyRun`` of the registered family (its own step through
``execute.run_family``), certified by the family's ``privacy()``; the score sees the rounds' iterate increments.
``delta`` is the catalogue's (``mechanisms.DELTA``).

===============  ====================================================  ==========================================
audit            canary pair and what the score reads from the steps   exact epsilon of the pair (upper bound)
===============  ====================================================  ==========================================
dp-fedavg        every user in every round; the canary user's delta     mu-GDP, mu = sqrt(R) / z_Delta: the shift
                 at -V e_1 / +V e_1, clipped either way (equal counts);  C_t against the std 2 z_Delta C_t a round
                 the e_1 steps over C_0 (C_t barely moves: small eta_C)
dp-fedavg-count  the canary user's delta 0 / V e_2 (unclipped /          mu-GDP over R delta releases (1 / (2
                 clipped: the centred count drops by 1); many users at   z_Delta) each) and R - 1 count releases
                 V e_2 make the e_2 step proportional to C_t, whose      (1 / z_b each; the last count moves no
                 log-ratios are the clip's moves, i.e. the noisy counts  released iterate)
dp-ftrl          one record at -V e_1 / +V e_1 in the stored order at    mu-GDP, mu = sqrt(sum_e depth(T_e)) / z
                 row 0: the first leaf of every epoch's tree, under its deepest path (the prefix sums s_1, s_2,
                 s_4, ...)
===============  ====================================================  ==========================================
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from dpjax.accounting import gdp
from dpjax.algorithms.dp_fedavg import DpFedAvg, FedAvgHParams
from dpjax.algorithms.dp_ftrl import DpFtrl, FtrlHParams, tree_depth, tree_releases
from dpjax.auditing.audit import CanaryAudit, Certificate, FamilyRun
from dpjax.auditing.execute import CanaryProbe
from dpjax.engine.silos import SiloData

__all__ = ["dp_fedadam_audit", "dp_fedavg_audit", "dp_fedavg_count_audit", "dp_ftrl_audit"]

def _silos(rows_per_silo, n: int) -> SiloData:
    """One silo of ``n`` records per entry, every record equal to the entry's vector."""
    xs = [np.tile(np.asarray(v, np.float32), (n, 1)) for v in rows_per_silo]
    return SiloData.from_silos(xs, [np.zeros(n, np.float32) for _ in xs])


def _inputs(data, **leaves) -> dict:
    return {"data": data, **{k: jnp.float32(v) for k, v in leaves.items()}}


def _audit(name, registered, description, family, hparams, sizes, d, dp, leaves, score, mutants, mu, details,
           delta):
    report = family.privacy(sizes, hparams(_inputs(None, **leaves))).epsilon(delta, "rdp")
    certificate = Certificate(report.epsilon, delta, f"{type(family).__name__}.privacy -> {report.accountant}",
                              report.neighboring)
    exact = lambda: {"mu": mu, "epsilon": gdp.gdp_epsilon(mu, delta),  # noqa: E731  (an upper bound, see above)
                     "half_noise_epsilon": gdp.gdp_epsilon(2 * mu, delta)}
    params = jnp.zeros((family.problem.dim,), jnp.float32)
    return CanaryAudit(name=name, description=description, mechanism=FamilyRun(family, registered, hparams, params),
                       dataset=_inputs(d, **leaves), neighbour=_inputs(dp, **leaves), score=score,
                       certificate=certificate, mutants=mutants, exact=exact,
                       details={"family": registered, **leaves, **details})


def _fedavg(name, description, canary_d, canary_dp, others, zd, zb, clip_norm, rounds, clip_learning_rate, score,
            mutants, mu, delta, server_optimizer: str = "sgd", registered: str = "dp-fedavg") -> CanaryAudit:
    """Every user reports every round (a fixed m = N: replace-one), one record each."""
    m = 1 + len(others)
    family = DpFedAvg(CanaryProbe(2), rounds, m, sampling="without-replacement", server_optimizer=server_optimizer)

    def hparams(inputs):
        return FedAvgHParams.create(1.0, 1.0, inputs["noise_multiplier"], inputs["noise_multiplier_count"],
                                    inputs["clip_norm"], 0.5, clip_learning_rate)

    d, dp = _silos([canary_d] + others, 1), _silos([canary_dp] + others, 1)
    return _audit(name, registered, description, family, hparams, [1] * m, d, dp,
                  {"noise_multiplier": zd, "noise_multiplier_count": zb, "clip_norm": clip_norm}, score, mutants, mu,
                  {"users": m, "rounds": rounds, "clip_learning_rate": clip_learning_rate}, delta)


def dp_fedavg_audit(noise_multiplier: float = 1.5, count_multiplier: float = 10.0, clip_norm: float = 0.5,
                    users: int = 4, rounds: int = 3, clip_learning_rate: float = 0.01, *, delta: float) -> CanaryAudit:
    """The deltas' channel: the canary user's delta at -/+ V e_1, clipped either way (the counts agree, so C_t has one
    law on D and D'), the other users at 0; a small ``clip_learning_rate`` keeps C_t within ``exp(+-eta_C R)`` of C_0,
    by which the score divides the e_1 steps: about ``N(-/+ 1, (2 z_Delta)^2)``."""
    far, zd, zb = 1e4 * clip_norm, noise_multiplier, count_multiplier

    def score(inc):  # inc [R, 2] = -(clipped sum + noise) / m
        return jnp.sum(-inc[:, 0] * users / clip_norm)

    mutants = {"half-noise": {"noise_multiplier": zd / 2, "noise_multiplier_count": zb / 2},
               "noise-not-scaled-by-clip": {"clip_norm": 4 * clip_norm, "noise_multiplier": zd / 4}}
    return _fedavg("dp-fedavg", "DP-FedAvg with adaptive clipping, the clipped deltas' Gaussian (DpFedAvg.step: "
                   "local deltas, the adaptive clip, the deltas' noise, server SGD)", [-far, 0.0], [far, 0.0],
                   [[0.0, 0.0]] * (users - 1), zd, zb, clip_norm, rounds, clip_learning_rate, score, mutants,
                   math.sqrt(rounds) / zd, delta)


def dp_fedadam_audit(noise_multiplier: float = 1.5, count_multiplier: float = 10.0, clip_norm: float = 1e-3,
                     users: int = 4, *, delta: float) -> CanaryAudit:
    """DP-FedAdam's deltas channel in one round (``dp_fedavg_audit``'s canary pair): Adam's first step from a zero state
    moves the iterate by ``-lr g / (|g| + eps)`` per coordinate (bias-corrected moments ``g`` and ``g^2``; ``eps`` =
    1e-3), which the score inverts back to the noisy mean ``g`` (``|g| = eps |u| / (1 - |u|)``, ``u`` the step over
    ``-lr``); a clip of the order of ``eps`` keeps the inversion well conditioned. One round: ``mu = 1 / z_Delta``."""
    far, zd, zb, eps = 1e4 * clip_norm, noise_multiplier, count_multiplier, 1e-3

    def score(inc):  # inc [1, 2]: Adam's first step at lr 1
        u = -inc[:, 0]
        g = jnp.sign(u) * eps * jnp.abs(u) / jnp.maximum(1.0 - jnp.abs(u), 1e-12)
        return jnp.sum(-g * users / clip_norm)

    mutants = {"half-noise": {"noise_multiplier": zd / 2, "noise_multiplier_count": zb / 2},
               "noise-not-scaled-by-clip": {"clip_norm": 4 * clip_norm, "noise_multiplier": zd / 4}}
    return _fedavg("dp-fedadam", "DP-FedAdam: DP-FedAvg's adaptive clipping with the Adam server, the clipped "
                   "deltas' Gaussian read back through Adam's first step", [-far, 0.0], [far, 0.0],
                   [[0.0, 0.0]] * (users - 1), zd, zb, clip_norm, 1, 0.01, score, mutants, 1.0 / zd, delta,
                   server_optimizer="adam", registered="dp-fedadam")


def dp_fedavg_count_audit(noise_multiplier: float = 4.0, count_multiplier: float = 1.5, clip_norm: float = 0.5,
                          rounds: int = 3, clip_learning_rate: float = 200.0, movers: int = 100, *,
                          delta: float) -> CanaryAudit:
    """The count's channel: the canary user's delta 0 (unclipped) / V e_2 (clipped), ``movers`` users at 0 and as many
    at V e_2, so the centred count is 1/2 / -1/2 and the fraction below C_t within ``1/(2m)`` of 1/2. The movers make
    the e_2 step ``movers C_t / m`` (the canary's ``C_t / m`` on D' too), relative noise ``2 z_Delta / movers``: the
    steps' log-ratios are the clip's moves ``-eta_C (fraction - 1/2)``, read back as the noisy counts (``count + N(0,
    z_b^2)``, replace-one), the large ``eta_C`` making the steps' noise negligible against z_b (``2 sqrt(2) z_Delta m /
    (movers eta_C)`` ~ 0.11 in count units)."""
    m, far, zd, zb = 2 * movers + 1, 1e6 * clip_norm, noise_multiplier, count_multiplier

    def score(inc):
        steps = -inc[:, 1] * m
        counts = -jnp.log(steps[1:] / steps[:-1]) / clip_learning_rate * m
        return -jnp.sum(counts)

    mutants = {"half-noise": {"noise_multiplier": zd / 2, "noise_multiplier_count": zb / 2},
               "count-without-noise": {"noise_multiplier_count": 0.0}}
    mu = math.sqrt(rounds / (4 * zd * zd) + (rounds - 1) / (zb * zb))
    return _fedavg("dp-fedavg-count", "DP-FedAvg with adaptive clipping, the noisy clipped count (DpFedAvg.step; "
                   "read from the clip's moves in the steps)", [0.0, 0.0], [0.0, far],
                   [[0.0, 0.0]] * movers + [[0.0, far]] * movers, zd, zb, clip_norm, rounds, clip_learning_rate,
                   score, mutants, mu, delta)


def dp_ftrl_audit(noise_multiplier: float = 2.0, clip_norm: float = 0.5, n: int = 8, batch_size: int = 2,
                  rounds: int = 8, *, delta: float) -> CanaryAudit:
    """DP-FTRL, one silo of n records in their stored order, the canary at row 0: leaf 1 of each epoch's tree
    (``tree_depth(T)`` released nodes: the prefix sums at powers of two). Learning rate 1, plain SGD: the epoch's prefix
    sums are minus the cumulated increments."""
    per_epoch = n // batch_size
    if rounds % per_epoch:
        raise ValueError(f"rounds={rounds} must be a whole number of epochs of {per_epoch} rounds")
    family = DpFtrl(CanaryProbe(2), rounds, batch_size, order="given")
    canary = np.zeros((n, 2), np.float32)
    d, dp = canary.copy(), canary.copy()
    d[0, 0], dp[0, 0] = -100 * clip_norm, 100 * clip_norm
    d, dp = (SiloData.from_silos([x], [np.zeros(n, np.float32)]) for x in (d, dp))
    nodes = [2 ** level - 1 for level in range(tree_depth(per_epoch))]  # s_1, s_2, s_4, ... (0-based)

    def score(inc):
        prefix = -jnp.cumsum(inc[:, 0].reshape(rounds // per_epoch, per_epoch), axis=1)
        return jnp.sum(prefix[:, nodes])

    z = noise_multiplier
    releases = tree_releases(rounds, per_epoch)
    mutants = {"half-noise": {"noise_multiplier": z / 2},
               "noise-not-scaled-by-clip": {"clip_norm": 4 * clip_norm, "noise_multiplier": z / 4}}
    return _audit("dp-ftrl", "dp-ftrl", "DP-FTRL, tree aggregation restarted every epoch (DpFtrl.step: the block, "
                  "clip, mean, the tree's noisy prefix-sum increment, SGD)", family,
                  lambda inp: FtrlHParams.create(1.0, inp["noise_multiplier"], inp["clip_norm"]), [n], d, dp,
                  {"noise_multiplier": z, "clip_norm": clip_norm}, score, mutants, math.sqrt(releases) / z,
                  {"n": n, "batch_size": batch_size, "rounds": rounds, "node_releases_per_record": releases}, delta)
