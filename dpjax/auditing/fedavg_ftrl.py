"""Canary audits of DP-FedAvg with adaptive clipping and DP-FTRL with tree aggregation, through the
families' own ``init``/``step`` (``dpjax.algorithms.dp_fedavg``, ``dpjax.algorithms.dp_ftrl``), with
the families' ``privacy()`` as certificates. Part of the catalogue (``dpjax.auditing.mechanisms``).

=================  ====================================================  ===========================================
audit              canary pair and what the observer scores              exact epsilon of the observed output
=================  ====================================================  ===========================================
dp-fedavg          one user's delta at -V e_1 / +V e_1 (both clipped, so  mu-GDP, mu = sqrt(R) / z_Delta (C_t cancels)
                   the clipped counts agree); the rounds' model steps
                   over the released clip norms
dp-fedavg-count    one user's delta 0 / V e_2 (unclipped / clipped: the   mu-GDP, mu = sqrt(R) / z_b
                   counts differ by one); the noisy counts read back
                   from the released clip norms C_t
dp-ftrl            one record at -V e_1 / +V e_1, at the first leaf of    mu-GDP, mu = sqrt(sum_e depth(T_e)) / z
                   every epoch's tree (the data order is public and fixed
                   here); the prefix sums at powers of two = the nodes
                   over that leaf
=================  ====================================================  ===========================================

Every user but the canary (and every record but the canary) contributes a constant the observer
knows, so the observed statistics are Gaussians whose shift is the canary's; the certificates are the
families' accountants (RDP, the combined multiplier of Andrew et al.'s Theorem 1; the tree's depth).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import keys
from dpjax.accounting import gdp
from dpjax.algorithms.dp_fedavg import DpFedAvg, FedAvgHParams
from dpjax.algorithms.dp_ftrl import DpFtrl, FtrlHParams, epoch_trees, tree_depth
from dpjax.auditing.audit import CanaryAudit, Certificate
from dpjax.engine.silos import SiloData

__all__ = ["dp_fedavg_audit", "dp_fedavg_count_audit", "dp_ftrl_audit"]

# How far outside the clip region canaries sit, in clip norms: a clip not applied would move the
# release by far more than the certified sensitivity.
CANARY_SCALE = 100.0


class _Probe:
    """Loss ``<w, x>``: a record's gradient is the record, whatever ``w`` (so are local deltas)."""

    def __init__(self, dim: int):
        self.dim = dim

    def loss(self, params, x, y):
        return jnp.vdot(params, x)

    def init_params(self, key):
        return jnp.zeros((self.dim,), jnp.float32)


def _silos(rows_per_silo) -> SiloData:
    """One silo per entry: ``(n, vector)``, n records all equal to ``vector``."""
    xs = [np.tile(np.asarray(v, np.float32), (n, 1)) for n, v in rows_per_silo]
    return SiloData.from_silos(xs, [np.zeros(len(x), np.float32) for x in xs])


def _inputs(data, **leaves) -> dict:
    return {"data": data, **{k: jnp.float32(v) for k, v in leaves.items()}}


def _certificate(family, sizes, hparams, what: str) -> Certificate:
    from dpjax.auditing.mechanisms import DELTA

    report = family.privacy(sizes, hparams).epsilon(DELTA, "rdp")
    return Certificate(report.epsilon, DELTA, f"{what}.privacy -> {report.accountant}", report.neighboring)


def _exact(mu: float) -> dict:
    from dpjax.auditing.mechanisms import DELTA

    return {"mu": mu, "epsilon": gdp.gdp_epsilon(mu, DELTA), "half_noise_epsilon": gdp.gdp_epsilon(2 * mu, DELTA)}


# ----------------------------------------------------------------------------- DP-FedAvg
def _fedavg_mechanism(family: DpFedAvg, dim: int):
    """The family's rounds from its own init/step: ``(w [R] first coordinate, C [R + 1] clip norms)``."""
    params0 = jnp.zeros((dim,), jnp.float32)

    def mech(run_key, inputs):
        hp = FedAvgHParams.create(1.0, 1.0, inputs["noise_multiplier"], inputs["noise_multiplier_count"],
                                  inputs["clip_norm"])
        state = family.init(params0, hp, inputs["data"], run_key)

        def body(s, r):
            s, _ = family.step(s, inputs["data"], keys.round_key(run_key, r))
            return s, (s.params[0], s.clipper)

        w, clips = jax.lax.scan(body, state, jnp.arange(family.num_rounds))[1]
        return w, jnp.concatenate([hp.clip_norm[None], clips])

    return mech


def _fedavg_audit(name, description, canary_d, canary_dp, others, zd, zb, clip, rounds, score, mu, mutants):
    dim, m = 2, 1 + len(others)
    family = DpFedAvg(_Probe(dim), rounds, m, sampling="without-replacement")  # every user, every round
    leaves = dict(noise_multiplier=zd, noise_multiplier_count=zb, clip_norm=clip)
    sizes = [3] * m
    hp = FedAvgHParams.create(1.0, 1.0, zd, zb, clip)
    return CanaryAudit(
        name=name, description=description, mechanism=_fedavg_mechanism(family, dim),
        dataset=_inputs(_silos([(3, canary_d)] + [(3, v) for v in others]), **leaves),
        neighbour=_inputs(_silos([(3, canary_dp)] + [(3, v) for v in others]), **leaves),
        score=score, certificate=_certificate(family, sizes, hp, "DpFedAvg"), mutants=mutants,
        exact=lambda: _exact(mu),
        details={"users": m, "rounds": rounds, "noise_multiplier": zd, "noise_multiplier_count": zb,
                 "clip_norm_0": clip, "sampling": "every user (fixed m = N), replace-one"})


def dp_fedavg_audit(noise_multiplier: float = 1.5, count_multiplier: float = 10.0, clip_norm: float = 0.5,
                    users: int = 4, rounds: int = 3) -> CanaryAudit:
    """The deltas' channel: the canary user's delta at -/+ V e_1, clipped either way to C_t (the counts
    agree, so C_t has one law under D and D'); the observer scales each model step by the released
    ``m / C_t``: ``N(-/+ 1, (2 z_Delta)^2)`` per round."""
    v = CANARY_SCALE * clip_norm * math.exp(0.2 * rounds)  # beyond every C_t (eta_C = 0.2)

    def score(out):
        w, clips = out
        steps = -jnp.diff(jnp.concatenate([jnp.zeros((1,), w.dtype), w]))
        return jnp.sum(steps * users / clips[:-1])

    zd, zb = noise_multiplier, count_multiplier
    mutants = {"half-noise": {"noise_multiplier": zd / 2, "noise_multiplier_count": zb / 2},
               "noise-not-scaled-by-clip": {"clip_norm": 4 * clip_norm, "noise_multiplier": zd / 4}}
    return _fedavg_audit("dp-fedavg", "DP-FedAvg, adaptive clipping: the clipped deltas' Gaussian (DpFedAvg's "
                         "own step)", [-v, 0.0], [v, 0.0], [[0.0, 0.0]] * (users - 1), zd, zb, clip_norm, rounds,
                         score, math.sqrt(rounds) / zd, mutants)


def dp_fedavg_count_audit(noise_multiplier: float = 6.0, count_multiplier: float = 1.5, clip_norm: float = 0.5,
                          rounds: int = 2, clip_learning_rate: float = 0.2) -> CanaryAudit:
    """The count's channel: the canary user's delta 0 (unclipped) / V e_2 (clipped), nine users at 0 and
    ten at V e_2, so the centred count is 0 / -1 and the fraction below C_t 1/2 / 0.45; the observer
    reads ``m (fraction - 1/2) = count + N(0, z_b^2)`` back from ``log(C_{t+1} / C_t) = -eta_C (fraction -
    gamma)`` (replace-one: a user moves the centred count by 1)."""
    m = 20
    v = CANARY_SCALE * clip_norm * math.exp(clip_learning_rate * rounds)

    def score(out):
        _, clips = out
        fraction = 0.5 - jnp.log(clips[1:] / clips[:-1]) / clip_learning_rate
        return -jnp.sum((fraction - 0.5) * m)

    zd, zb = noise_multiplier, count_multiplier
    mutants = {"half-noise": {"noise_multiplier": zd / 2, "noise_multiplier_count": zb / 2},
               "count-without-noise": {"noise_multiplier_count": 0.0}}
    others = [[0.0, 0.0]] * 9 + [[0.0, v]] * 10
    return _fedavg_audit("dp-fedavg-count", "DP-FedAvg, adaptive clipping: the noisy clipped count read from the "
                         "released clip norms (DpFedAvg's own step)", [0.0, 0.0], [0.0, v], others, zd, zb,
                         clip_norm, rounds, score, math.sqrt(rounds) / zb, mutants)


# ----------------------------------------------------------------------------- DP-FTRL
def dp_ftrl_audit(noise_multiplier: float = 2.0, clip_norm: float = 0.5, n: int = 8, batch_size: int = 2,
                  rounds: int = 8, dim: int = 2) -> CanaryAudit:
    """One silo of n records in a fixed order (the permutation of a fixed key: public, as DP-FTRL's
    stream order is), the canary at the record that opens every epoch, so it sits under the deepest
    path of each tree (``tree_depth(T)`` nodes: s_1, s_2, s_4, ... are single nodes). Learning rate 1,
    plain SGD: the prefix sums are read back from the iterates, ``s_t = -(w_t - w_epoch start)``."""
    per_epoch = n // batch_size
    if rounds % per_epoch:
        raise ValueError(f"rounds={rounds} must be a whole number of epochs of {per_epoch} rounds")
    family = DpFtrl(_Probe(dim), rounds, batch_size)
    params0, order_key = jnp.zeros((dim,), jnp.float32), jax.random.key(0)
    zeros = _silos([(n, [0.0] * dim)])
    first = int(np.asarray(family.init(params0, FtrlHParams.create(1.0), zeros, order_key).selection)[0, 0])

    def data_for(sign):
        x = np.zeros((n, dim), np.float32)
        x[first, 0] = sign * CANARY_SCALE * clip_norm
        return SiloData.from_silos([x], [np.zeros(n, np.float32)])

    def mech(run_key, inputs):
        hp = FtrlHParams.create(1.0, inputs["noise_multiplier"], inputs["clip_norm"])
        state = family.init(params0, hp, inputs["data"], order_key)  # the fixed order; noise from run_key

        def body(s, r):
            s, _ = family.step(s, inputs["data"], keys.round_key(run_key, r))
            return s, s.params[0]

        return jax.lax.scan(body, state, jnp.arange(rounds))[1]

    nodes = [2 ** level - 1 for level in range(tree_depth(per_epoch))]  # s_1, s_2, s_4, ... (0-based)

    def score(w):
        w = w.reshape(rounds // per_epoch, per_epoch)
        start = jnp.concatenate([jnp.zeros((1,), w.dtype), w[:-1, -1]])
        return jnp.sum(-(w - start[:, None])[:, nodes])

    releases = sum(tree_depth(t) for t in epoch_trees(rounds, per_epoch))
    z = noise_multiplier
    return CanaryAudit(
        name="dp-ftrl", description="DP-FTRL, tree aggregation restarted every epoch (DpFtrl's own step)",
        mechanism=mech, dataset=_inputs(data_for(-1.0), noise_multiplier=z, clip_norm=clip_norm),
        neighbour=_inputs(data_for(1.0), noise_multiplier=z, clip_norm=clip_norm), score=score,
        certificate=_certificate(family, [n], FtrlHParams.create(1.0, z, clip_norm), "DpFtrl"),
        mutants={"half-noise": {"noise_multiplier": z / 2},
                 "noise-not-scaled-by-clip": {"clip_norm": 4 * clip_norm, "noise_multiplier": z / 4}},
        exact=lambda: _exact(math.sqrt(releases) / z),
        details={"n": n, "batch_size": batch_size, "rounds": rounds, "rounds_per_epoch": per_epoch,
                 "node_releases_per_record": releases, "noise_multiplier": z, "clip_norm": clip_norm})
