"""The catalogue of canary audits: every private mechanism dpjax runs today.

Each builder returns a ``CanaryAudit`` whose mechanism is the compiled code
path (engine / primitives functions, not a re-implementation), whose
certificate comes from ``dpjax.accounting`` for the same configuration, and
whose mutants are the same code with a privacy bug (half the noise std, or a
clip not applied). Canaries are worst-case records: a vector far outside the
clip region along ``e_1`` (``+`` on D', ``-`` on D for replace-one), every
other record zero (so nothing else moves the release).

=======================  ==========================================  =============================================
audit                    mechanism                                   certificate (accountant)
=======================  ==========================================  =============================================
gaussian                 clipped sum + Gaussian noise, one release   exact mu-GDP (Balle-Wang analytic Gaussian)
isrl-silo                one silo's ISRL-DP messages, R rounds       RDP, without-replacement (Wang-Balle-Kasiviswanathan)
isrl-silo-poisson        the same with Poisson sampling              PLD (dp-accounting), replace-one
dpsgd-*-shuffle          clipped sum + noise, permutation per epoch  van Dijk et al. exact strong-adversary mixture
dpsgd-*-subsample        clipped sum + noise, uniform K-subsets      van Dijk et al. exact strong-adversary mixture
dpsgd-individual-poisson clipped sum + noise, Poisson sampling       PLD (dp-accounting), add/remove
dpsgd-*-subsample-g2     as dpsgd-*-subsample, a user of 2 records   van Dijk et al., replace-up-to-2
diff2                    DIFF2-GD restart + difference round         RDP (dp-accounting) of the DIFF2 schedules
p1d                      Cheu et al. P_1D (count-level simulation)   Lemma 3.1 of Cheu et al.; exact pmf compared
pvec                     Cheu et al. P_vec, d = 4                    Thm 3.2 (Lemma 3.1 + 3.3, corrected constant)
user-level               Ghazi et al. Algorithm 1 (DelOutputPert)    Theorem 3.3's proof (test-mode kappa, sigma)
dp-fedavg, -count        DpFedAvg's own step (delta / count channel)  RDP, Theorem 1 of Andrew et al. (fedavg_ftrl)
dp-ftrl                  DpFtrl's own step (tree, first leaf)        RDP of the tree's depth per epoch (fedavg_ftrl)
=======================  ==========================================  =============================================
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import keys
from dpjax.accounting import batch_clipping as bc_accounting
from dpjax.accounting import gdp
from dpjax.accounting import pvec as pvec_accounting
from dpjax.accounting.api import compute_epsilon
from dpjax.accounting.diff2 import compose_epsilon
from dpjax.accounting.events import GaussianSchedule
from dpjax.algorithms.diff2 import Diff2GD, Diff2HParams
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.auditing import exact as exact_lib
from dpjax.auditing import fedavg_ftrl
from dpjax.auditing.audit import CanaryAudit, Certificate
from dpjax.auditing.scores import inclusion_mixture_llr, one_per_epoch_llr
from dpjax.engine import federated
from dpjax.engine.silos import SiloData
from dpjax.primitives import clipping, noise, sampling
from dpjax.primitives import shuffle_protocols as sp

__all__ = ["AUDITS", "build_audit", "audit_names"]

# The (eps, delta) point at which certificates are audited. Any point of the
# certified curve is a valid test; at delta = 1e-3 a threshold test on ~10^5
# runs sees the relevant tails (at 1e-5 the certified epsilon is set by events
# rarer than 1 in 10^5, so a half-noise mutant can hide below it).
DELTA = 1e-3
# How far outside the clip region canaries sit (in units of the clip norm,
# times the batch size where a batch mean is clipped): large enough that a
# missing clip moves the release by far more than the certified sensitivity.
_CANARY_SCALE = 100.0


def _canary_pair(n: int, dim: int, value: float) -> tuple[np.ndarray, np.ndarray]:
    """n records in R^dim, all zero except record 0 = -value e_1 (D) / +value e_1 (D')."""
    d = np.zeros((n, dim), np.float32)
    dp = d.copy()
    d[0, 0], dp[0, 0] = -value, value
    return d, dp


# ----------------------------------------------------------------------------- Gaussian reference
def _inputs(data, **hparams) -> dict:
    """A mechanism's inputs: the data plus its public hyperparameters as float32 leaves (mutants override them)."""
    return {"data": data, **{k: jnp.float32(v) for k, v in hparams.items()}}


def gaussian_audit(noise_multiplier: float = 2.0, clip_norm: float = 1.0, n: int = 4, dim: int = 2) -> CanaryAudit:
    """One release of a clipped sum plus N(0, (noise_multiplier 2C)^2 I) (replace-one: sensitivity 2C)."""
    std = noise_multiplier * 2 * clip_norm

    def mech(key, inputs):
        total = clipping.clipped_sum(inputs["data"], inputs["clip_norm"]).total
        return noise.add_gaussian_noise(key, total, inputs["noise_std"])

    d, dp = _canary_pair(n, dim, _CANARY_SCALE * clip_norm)
    mu = 1.0 / noise_multiplier
    cert = gdp.gdp_epsilon(mu, DELTA)
    return CanaryAudit(
        name="gaussian",
        description="clipped sum + Gaussian noise, one release (primitives.clipping, primitives.noise)",
        mechanism=mech, dataset=_inputs(jnp.asarray(d), noise_std=std, clip_norm=clip_norm),
        neighbour=_inputs(jnp.asarray(dp), noise_std=std, clip_norm=clip_norm),
        score=lambda out: out[0],
        certificate=Certificate(cert, DELTA, "dpjax.accounting.gdp.gdp_epsilon (exact mu-GDP, mu = 2C/std)"),
        mutants=_standard_mutants(std),
        exact=lambda: {"mu": mu, "epsilon": gdp.gdp_epsilon(mu, DELTA),
                       "half_noise_epsilon": gdp.gdp_epsilon(2 * mu, DELTA)},
        details={"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "n": n, "dim": dim},
    )


def _standard_mutants(noise_std: float) -> dict:
    """Half the noise std; the clip not applied (clip norm = inf)."""
    return {"half-noise": {"noise_std": noise_std / 2}, "no-clip": {"clip_norm": math.inf}}


# ----------------------------------------------------------------------------- ISRL-DP silo messages
class _LinearProbe:
    """Loss ``<w, x>``: every record's gradient is the record itself (the canary's vector)."""

    def loss(self, params, x, y):
        del y
        return jnp.vdot(params, x)


def isrl_silo_audit(noise_std: float = 0.8, clip_norm: float = 1.0, silo_size: int = 8, batch_size: int = 7,
                    num_rounds: int = 2, num_silos: int = 2, dim: int = 2, sampling_scheme: str = "without-replacement",
                    accountant: str = "rdp") -> CanaryAudit:
    """Silo 0's ISRL-DP transcript (Lowy & Razaviyayn 2023, Algorithm 2): per round, K of n records
    without replacement, per-example clip to C, mean over K, + N(0, sigma^2 I); R rounds.

    Uses ``NoisyMbSgd``'s sampler and ``dpjax.engine.federated`` (``silo_minibatch_gradients``,
    ``privatize_messages``); certificate from ``NoisyMbSgd.privacy`` (replace-one in the silo).
    """
    algo = NoisyMbSgd(_LinearProbe(), num_rounds=num_rounds, batch_size=batch_size, sampling=sampling_scheme)
    params0 = jnp.zeros((dim,), jnp.float32)

    def data_for(first_silo):
        xs = [first_silo] + [np.zeros((silo_size, dim), np.float32)] * (num_silos - 1)
        silos = SiloData.from_silos(xs, [np.zeros(silo_size, np.float32)] * num_silos)
        return _inputs(silos, noise_std=noise_std, clip_norm=clip_norm)

    def mech(run_key, inputs):
        data = inputs["data"]
        states = federated.init_sampler_states(algo.sampler, data, run_key)

        def one_round(r):
            key = keys.round_key(run_key, r)
            grads, _ = federated.silo_minibatch_gradients(
                algo.problem, algo.sampler, params0, data, states, key, r, clip_norm=inputs["clip_norm"])
            return federated.privatize_messages(grads, key, inputs["noise_std"], data.num_silos)[0]

        return jax.vmap(one_round)(jnp.arange(num_rounds))

    d, dp = _canary_pair(silo_size, dim, _CANARY_SCALE * clip_norm * batch_size)
    q = batch_size / silo_size
    m = clip_norm / batch_size / noise_std  # one entry of the canary, in noise stds

    sizes = [silo_size] * num_silos
    unit = MbSgdHParams.create(1.0, 0.0, clip_norm)
    at_std = dataclasses.replace(unit, noise_multiplier=noise_std / algo.message_sensitivity(unit, sizes))
    report = algo.privacy(sizes, at_std).epsilon(DELTA, accountant)
    return CanaryAudit(
        name="isrl-silo" if sampling_scheme == "without-replacement" else f"isrl-silo-{sampling_scheme}",
        description="ISRL-DP per-silo Gaussian messages (engine.federated: sample K of n, clip, mean, noise)",
        mechanism=mech, dataset=data_for(d), neighbour=data_for(dp),
        score=lambda out: inclusion_mixture_llr(out[:, 0] / noise_std, [1 - q, q], -m, m),
        certificate=Certificate(report.epsilon, DELTA, f"dpjax.accounting.compute_epsilon({report.accountant}; "
                                f"{report.sampling}, NoisyMbSgd.privacy)", report.neighboring),
        mutants=_standard_mutants(noise_std),
        details={"noise_std": noise_std, "clip_norm": clip_norm, "silo_size": silo_size, "batch_size": batch_size,
                 "num_rounds": num_rounds, "num_silos": num_silos, "sampling": sampling_scheme},
    )


# ----------------------------------------------------------------------------- central DP-SGD
def _batches(sampler_name: str, key, size, n: int, batch_size: int, epochs: int, rate: float):
    """Per-round (idx [R, B], mask [R, B]) for the sampler; R = epochs * (n // batch_size)."""
    per_epoch = n // batch_size
    if sampler_name == "shuffle":
        def epoch(e):
            perm = sampling.valid_first_permutation(jax.random.fold_in(key, e), size, n)
            return perm[: per_epoch * batch_size].reshape(per_epoch, batch_size)
        idx = jax.vmap(epoch)(jnp.arange(epochs)).reshape(-1, batch_size)
        return idx, jnp.ones(idx.shape, bool)
    rounds = jnp.arange(epochs * per_epoch)
    if sampler_name == "subsample":
        draw = lambda r: sampling.sample_without_replacement(jax.random.fold_in(key, r), size, n, batch_size)  # noqa: E731
        idx = jax.vmap(draw)(rounds)
        return idx, jnp.ones(idx.shape, bool)
    def poisson(r):  # buffer = n: never overflows
        idx, mask, _ = sampling.poisson_sample(jax.random.fold_in(key, r), size, n, rate, n)
        return idx, mask
    return jax.vmap(poisson)(rounds)


def dpsgd_audit(clip_mode: str, sampler_name: str, noise_multiplier: float, n: int,
                batch_size: int = 5, epochs: int = 1, clip_norm: float = 1.0, dim: int = 2,
                group_size: int = 1) -> CanaryAudit:
    """Central DP-SGD release sequence: per round a batch (shuffle / uniform subsample / Poisson),
    per-record gradients = the records, individual clipping (clip each, sum) or batch clipping
    (clip the batch mean), + Gaussian noise. van Dijk et al. convention for shuffle/subsample:
    std = 2 C sigma (replace-one); Poisson (Abadi et al.): std = C sigma, add/remove.

    ``group_size`` g > 1 (subsampling only): D and D' differ in g canary records (a user
    with g records; van Dijk et al.'s replace-up-to-g relation). Individual clipping then
    moves a round by up to g C, batch clipping by C: the two modes' certificates differ.
    """
    if group_size > 1 and sampler_name != "subsample":
        raise ValueError(f"group_size={group_size} > 1 is audited with sampler='subsample' only")
    if clip_mode not in ("individual", "batch") or sampler_name not in ("shuffle", "subsample", "poisson"):
        raise ValueError(f"clip_mode={clip_mode!r}, sampler={sampler_name!r}: unknown DP-SGD variant")
    if sampler_name == "poisson" and clip_mode == "batch":
        raise ValueError("clip_mode='batch' with sampler='poisson': no accountant covers it (random batch size)")
    poisson = sampler_name == "poisson"
    std = noise_multiplier * clip_norm * (1 if poisson else 2)
    rate = batch_size / n
    rounds = epochs * (n // batch_size)

    def mech(key, inputs):
        x, size = inputs["data"]
        idx, mask = _batches(sampler_name, keys.stream_key(key, "sampling"), size, n, batch_size, epochs, rate)

        def release(r, i, m):
            rows = x[i]
            if clip_mode == "individual":
                total = clipping.clipped_sum(rows, inputs["clip_norm"], m).total
            else:
                mean = jnp.sum(jnp.where(m[:, None], rows, 0.0), axis=0) / batch_size  # public K
                total = clipping.clip_to_norm(mean, inputs["clip_norm"])
            noise_key = jax.random.fold_in(keys.stream_key(key, "noise"), r)
            return noise.add_gaussian_noise(noise_key, total, inputs["noise_std"])

        return jax.vmap(release)(jnp.arange(rounds), idx, mask)

    value = _CANARY_SCALE * clip_norm * batch_size
    if poisson:
        x = np.zeros((n, dim), np.float32)
        x[n - 1, 0] = value  # D' = D + canary; D excludes row n-1 through its size
        dataset, neighbour = (jnp.asarray(x), jnp.int32(n - 1)), (jnp.asarray(x), jnp.int32(n))
        m_d, m_dp = 0.0, 1.0 / noise_multiplier
        schedule = GaussianSchedule(noise_std=std, contribution_bound=clip_norm, sampling="poisson", dataset_size=n,
                                    batch_size=batch_size, steps=rounds, neighboring="add-remove", unit="record")
        report = compute_epsilon(schedule, DELTA, "pld")
        cert = Certificate(report.epsilon, DELTA, "dpjax.accounting.compute_epsilon(pld; poisson, add-remove)",
                           "add-remove")
        score = lambda out: inclusion_mixture_llr(out[:, 0] / std, [1 - rate, rate], m_d, m_dp)  # noqa: E731
    else:
        d, dp = _canary_pair(n, dim, value)
        d[:group_size, 0], dp[:group_size, 0] = -value, value
        dataset, neighbour = (jnp.asarray(d), jnp.int32(n)), (jnp.asarray(dp), jnp.int32(n))
        m = 1.0 / (2 * noise_multiplier)
        s, mm = (1, batch_size) if clip_mode == "individual" else (batch_size, 1)
        eps = bc_accounting.batch_clipping_epsilon(sampler_name, n, s, mm, group_size, epochs, noise_multiplier, DELTA)
        cert = Certificate(eps, DELTA, f"dpjax.accounting.batch_clipping.batch_clipping_epsilon({sampler_name}, "
                           f"s={s}, m={mm}, g={group_size}; exact strong adversary)",
                           "replace-one" if group_size == 1 else f"replace-up-to-{group_size}")
        if sampler_name == "shuffle":
            per_epoch = n // batch_size
            score = lambda out: one_per_epoch_llr(out[:, 0].reshape(epochs, per_epoch) / std, -m, m)  # noqa: E731
        else:
            # canaries in a round: t ~ Hypergeometric(n, g, K); clipped entries L = t (individual), min(t, 1) (batch)
            hits = [math.comb(group_size, t) * math.comb(n - group_size, batch_size - t) / math.comb(n, batch_size)
                    for t in range(min(group_size, batch_size) + 1)]
            probs = hits if clip_mode == "individual" else [hits[0], 1.0 - hits[0]]
            score = lambda out: inclusion_mixture_llr(out[:, 0] / std, probs, -m, m)  # noqa: E731
    suffix = "" if group_size == 1 else f"-g{group_size}"
    return CanaryAudit(
        name=f"dpsgd-{clip_mode}-{sampler_name}{suffix}",
        description=f"central DP-SGD, {clip_mode} clipping, {sampler_name} (primitives: sampling, clipping, noise)",
        mechanism=mech, dataset=_inputs(dataset, noise_std=std, clip_norm=clip_norm),
        neighbour=_inputs(neighbour, noise_std=std, clip_norm=clip_norm), score=score, certificate=cert,
        mutants=_standard_mutants(std),
        details={"noise_multiplier": noise_multiplier, "noise_std": std, "clip_norm": clip_norm, "n": n,
                 "batch_size": batch_size, "epochs": epochs, "rounds": rounds, "group_size": group_size},
    )


# ----------------------------------------------------------------------------- DIFF2
class _Diff2Canary:
    """1-D loss ``y (x w + (x w)^2 / 2)``: gradient ``y x (1 + x w)``; the gradient
    difference between two iterates is ``y x^2 (w - w')``. A record with ``|x|`` large
    saturates both clips with sign ``y``; records with ``x = 0`` contribute nothing."""

    def loss(self, params, x, y):
        u = jnp.vdot(params, x)
        return y * (u + 0.5 * u * u)


def diff2_audit(sigma_restart: float = 0.45, sigma_diff: float = 0.45, silo_size: int = 4, num_silos: int = 2,
                clip_restart: float = 1.0, clip_diff: float = 1.0, learning_rate: float = 1.0) -> CanaryAudit:
    """DIFF2-GD (Murata & Suzuki 2023, Alg. 1 + 3) for R = 2 rounds with T = 2: round 1 is a
    restart round (noise std sigma1 C1), round 2 a difference round (noise std sigma2 C2 ||x1 - x0||).
    The released transcript is the two noisy estimators; certificate: ``compose_epsilon`` of
    ``Diff2GD.privacy`` (RDP, dp-accounting)."""
    problem = _Diff2Canary()
    algo = Diff2GD(problem, num_rounds=2, output="last")
    big = _CANARY_SCALE * max(clip_restart, clip_diff, 1.0)

    def multipliers(s1, s2):  # the paper's sigma (std / radius) -> the family's noise multipliers
        return algo.noise_multipliers_from_paper([silo_size] * num_silos, sigma_restart=s1, sigma_diff=s2)

    def data_for(sign):
        xs = [np.zeros((silo_size, 1), np.float32) for _ in range(num_silos)]
        ys = [np.ones(silo_size, np.float32) for _ in range(num_silos)]
        xs[0][0, 0], ys[0][0] = big, sign
        return _inputs(SiloData.from_silos(xs, ys), sigma_restart=sigma_restart, sigma_diff=sigma_diff)

    def mech(run_key, inputs):
        data = inputs["data"]
        hp = Diff2HParams.create(learning_rate, restart_interval=2, clip_restart=clip_restart, clip_diff=clip_diff,
                                 **multipliers(inputs["sigma_restart"], inputs["sigma_diff"]))
        state = algo.init(jnp.zeros((1,), jnp.float32), hp, data, run_key)
        state1, _ = algo.step(state, data, keys.round_key(run_key, 0))
        state2, _ = algo.step(state1, data, keys.round_key(run_key, 1))
        return jnp.stack([state1.server.estimate[0], state2.server.estimate[0], state2.client.prev_params[0]])

    a = 1.0 / (silo_size * num_silos)  # normalised shift of the server mean (Prop. 4.1: 2C/(nP) between D, D')

    def score(out):
        v1, v2, x1 = out[0], out[1], out[2]
        z1 = v1 / (sigma_restart * clip_restart)
        radius = clip_diff * jnp.abs(x1)  # x0 = 0
        z2 = (v2 - v1) / (sigma_diff * radius) * jnp.sign(x1)
        return 2 * a * (z1 / sigma_restart + z2 / sigma_diff)  # Gaussian LLR up to a constant

    hp0 = Diff2HParams.create(learning_rate, restart_interval=2, **multipliers(sigma_restart, sigma_diff))
    schedules = algo.privacy([silo_size] * num_silos, hp0).schedules
    eps = compose_epsilon(schedules, DELTA)
    eps = eps.epsilon if hasattr(eps, "epsilon") else float(eps)
    mu = 2 * a * math.hypot(1 / sigma_restart, 1 / sigma_diff)
    return CanaryAudit(
        name="diff2",
        description="DIFF2-GD restart + difference channel (algorithms.diff2: clipped means, sigma x radius noise)",
        mechanism=mech, dataset=data_for(-1.0), neighbour=data_for(1.0), score=score,
        certificate=Certificate(eps, DELTA, "dpjax.accounting.diff2.compose_epsilon (RDP, dp-accounting) of "
                                "Diff2GD.privacy", "replace-one"),
        mutants={"half-noise": {"sigma_restart": sigma_restart / 2, "sigma_diff": sigma_diff / 2}},
        exact=lambda: {"mu": mu, "epsilon": gdp.gdp_epsilon(mu, DELTA),
                       "half_noise_epsilon": gdp.gdp_epsilon(2 * mu, DELTA)},
        details={"sigma_restart": sigma_restart, "sigma_diff": sigma_diff, "silo_size": silo_size,
                 "num_silos": num_silos, "rounds": 2, "restart_interval": 2},
    )


# ----------------------------------------------------------------------------- P_1D / P_vec
def _unclipped_rounding(key, x, params, bound):
    """Mutant of ``randomized_rounding`` with the clip of w g / Delta to [0, g] removed."""
    g = jnp.asarray(params.granularity, jnp.float32)
    scaled = (x + bound) * (g / (2.0 * bound))
    low = jnp.floor(scaled)
    return low.astype(jnp.int32) + (jax.random.uniform(key, x.shape) < (scaled - low)).astype(jnp.int32)


def _pvec_mechanism(params, bound: float, clip: bool = True) -> Callable:
    def mech(key, vectors):
        if clip:
            return sp.pvec_sum(key, vectors, params, bound)
        k_round, k_noise = jax.random.split(key)
        xhat = _unclipped_rounding(k_round, vectors, params, bound)
        g = jnp.asarray(params.granularity, jnp.float32)
        rounded = jnp.sum(xhat, axis=0).astype(jnp.float32) - vectors.shape[0] * g / 2
        noise_ = sp.centred_binomial(k_noise, vectors.shape[0], params, vectors.shape[1])
        return sp.pvec_analyze(rounded + noise_, params, bound)
    return mech


def _pvec_canary(n: int, dim: int, bound: float, scale: float = 1000.0):
    """User 0 at -/+ ``scale`` L e_1 (clipped to the range ends), users 1.. at -L e_1: every
    rounding is deterministic (coordinate 1 at the range end, others at g/2 for even g).
    The protocols' binomial noise is ~50x a Gaussian's (Cheu et al. constants), so the
    no-clip canary sits further out than for the Gaussian mechanisms."""
    d = np.zeros((n, dim), np.float32)
    d[:, 0] = -bound
    dp = d.copy()
    d[0, 0], dp[0, 0] = -scale * bound, scale * bound
    return jnp.asarray(d), jnp.asarray(dp)


def _binomial_exact(n: int, b: int, p: float, g: int, cert_eps: float) -> dict:
    pm, qm = exact_lib.shifted_binomial_pmfs(n * b, p, g)
    half_b = exact_lib.shifted_binomial_pmfs(n * (b // 2), p, g)
    return {
        "epsilon": exact_lib.exact_epsilon(pm, qm, DELTA),
        "delta_at_certified_epsilon": exact_lib.hockey_stick(pm, qm, cert_eps),
        "half_noise_epsilon": exact_lib.exact_epsilon(*half_b, DELTA),
        "note": "coordinate-1 count: Bin(n b, p) vs g + Bin(n b, p); half noise = b/2 trials",
    }


def p1d_audit(epsilon: float = 2.0, n: int = 20, bound: float = 1.0) -> CanaryAudit:
    """P_1D (Cheu et al. 2022, Algorithm 1) with ``p1d_params(epsilon, delta, n)``; certificate:
    Lemma 3.1 (``pvec_epsilon(..., d=1)``'s per-coordinate eps_hat at delta_hat = delta)."""
    cal = pvec_accounting.p1d_params(epsilon, DELTA, n)
    params = sp.PvecParams.create(cal.g, cal.b, cal.p)
    g, b, p = params.numbers()
    # pvec_epsilon splits delta as delta/(d+1) = delta/2 per coordinate: pass 2 delta to read Lemma 3.1 at delta.
    cert_eps = pvec_accounting.pvec_epsilon(g, b, p, n, 1, 2 * DELTA).eps_hat
    d, dp = _pvec_canary(n, 1, bound)
    return CanaryAudit(
        name="p1d",
        description="Cheu et al. P_1D shuffle protocol (primitives.shuffle_protocols.pvec_sum, d = 1)",
        mechanism=_pvec_mechanism(params, bound), dataset=d, neighbour=dp, score=lambda out: out[0],
        certificate=Certificate(cert_eps, DELTA, "Cheu et al. Lemma 3.1 (dpjax.accounting.pvec, eps_hat)",
                                "replace-one"),
        mutants={"no-clip": _pvec_mechanism(params, bound, clip=False)},
        exact=lambda: _binomial_exact(n, b, p, g, cert_eps),
        details={"n": n, "g": g, "b": b, "p": p, "calibrated_epsilon": epsilon},
    )


def pvec_audit(epsilon: float = 2.0, n: int = 100, dim: int = 4, bound: float = 1.0) -> CanaryAudit:
    """P_vec (Cheu et al. 2022, Algorithm 2) with ``pvec_params(epsilon, delta, n, d, "lemma_opt")``;
    certificate: ``pvec_epsilon`` (Thm 3.2: Lemma 3.1 per coordinate, Lemma 3.3 corrected)."""
    cal = pvec_accounting.pvec_params(epsilon, DELTA, n, dim, "lemma_opt")
    params = sp.PvecParams.create(cal.g, cal.b, cal.p)
    g, b, p = params.numbers()
    cert = pvec_accounting.pvec_epsilon(g, b, p, n, dim, DELTA)
    d, dp = _pvec_canary(n, dim, bound)
    return CanaryAudit(
        name="pvec",
        description=f"Cheu et al. P_vec shuffle protocol, d = {dim} (primitives.shuffle_protocols.pvec_sum)",
        mechanism=_pvec_mechanism(params, bound), dataset=d, neighbour=dp, score=lambda out: out[0],
        certificate=Certificate(cert.epsilon, cert.delta, "dpjax.accounting.pvec.pvec_epsilon (Thm 3.2, lemma)",
                                "replace-one"),
        mutants={"no-clip": _pvec_mechanism(params, bound, clip=False)},
        exact=lambda: _binomial_exact(n, b, p, g, cert.epsilon),
        details={"n": n, "d": dim, "g": g, "b": b, "p": p, "calibrated_epsilon": epsilon},
    )


# ----------------------------------------------------------------------------- user-level output perturbation
def user_level_audit(eps_prime: float = 1.0, kappa: int = 3, n: int = 14, outliers: int = 2,
                     sensitivity: float = 1e-4, gaussian_mu: float = 0.25) -> CanaryAudit:
    """Algorithm 1 of Ghazi et al. (ICML 2023), DelOutputPert, on f = mean of the users' values clipped to [0, 1],
    replace-one-user neighbours (``dpjax.user_level.audit.canary_pair``: D' moves the canary user from 0 to 1).

    Test mode (spec test U5): ``kappa`` and sigma = 8 kappa Delta / ``gaussian_mu`` are given directly; the
    certificate is Theorem 3.3's proof, ``(2 eps', p(0) + p(2 kappa) + e^{eps'} delta_G(eps', gaussian_mu))``.
    The stable tables come from the exact enumeration of every deletion set of <= 4 kappa + 1 users
    (``stable_table``); the audited runs are ``release_from_table`` (the TDLap draw, bottom, the Gaussian) jitted
    and vmapped over keys. The target Delta is far below the replace sensitivity 1/n of f (the paper's regime:
    Delta ~ 1/(n sqrt(m)) << 1/n), so privacy rests on the stability test; the mutant skips it (releases
    f(x) + N(0, sigma^2), never bottom) and is caught. Score: the release, bottom mapped above every release.
    """
    from dpjax.accounting import user_level as ul_acc
    from dpjax.user_level import audit as ul_audit, mechanisms as ul_mech

    sigma = 8 * kappa * sensitivity / gaussian_mu
    params = ul_acc.a1_test_params(eps_prime, kappa, sensitivity, sigma)
    cert_eps, cert_delta = ul_acc.a1_certified(params)
    x, x2 = ul_audit.canary_pair(n, outliers)
    tables = [ul_audit.clipped_mean_table(v_, kappa, sensitivity) for v_ in (x, x2)]

    def inputs(values, table):
        return {"centres": jnp.asarray(table.centres, jnp.float32), "bottom": jnp.asarray(table.bottom),
                "sigma": jnp.float32(sigma), "f_full": jnp.float32(np.clip(values, 0, 1).mean())}

    def mech(key, inp):
        return ul_mech.release_from_table(key, inp["centres"], inp["bottom"], inp["sigma"], eps_prime, kappa)

    def no_stability_test(key, inp):  # the same key use: the noise key is the second half of split(key)
        _, key_noise = jax.random.split(key)
        return jnp.int32(ul_mech.OK), inp["f_full"] + inp["sigma"] * jax.random.normal(key_noise, (1,))

    bottom_score = 1e3  # above every release (|f| <= 1, sigma << 1): one threshold sees both bottom and shifts

    def exact():
        laws = [ul_audit.output_law(t, eps_prime, kappa) for t in tables]
        skip = [ul_audit.skip_test_law(v_) for v_ in (x, x2)]
        return {"epsilon": ul_audit.exact_epsilon(*laws, sigma, cert_delta),
                "no_stability_test_epsilon": ul_audit.exact_epsilon(*skip, sigma, cert_delta),
                "half_noise_epsilon": ul_audit.exact_epsilon(*laws, sigma / 2, cert_delta),
                "p_bottom_d": laws[0][0], "p_bottom_d_prime": laws[1][0]}

    return CanaryAudit(
        name="user-level",
        description="Ghazi et al. Algorithm 1 (DelOutputPert; user_level.mechanisms.release_from_table on exact "
                    "stable tables), f = clipped mean of user values",
        mechanism=mech, dataset=inputs(x, tables[0]), neighbour=inputs(x2, tables[1]),
        score=lambda out: jnp.where(out[0] == ul_mech.BOTTOM, bottom_score, out[1][0]),
        certificate=Certificate(cert_eps, cert_delta, "dpjax.accounting.user_level.a1_certified (Theorem 3.3 proof, "
                                "test-mode kappa and sigma)", "replace-one-user"),
        mutants={"no-stability-test": no_stability_test},
        exact=exact,
        details={"eps_prime": eps_prime, "kappa": kappa, "n": n, "outlier_users": outliers,
                 "Delta": sensitivity, "sigma": sigma, "gaussian_mu": gaussian_mu,
                 "release_probability": f"{1 - tables[0].bottom.dot(ul_audit.sampler_pmf(eps_prime, kappa)):.3f} (D), "
                                        f"{1 - tables[1].bottom.dot(ul_audit.sampler_pmf(eps_prime, kappa)):.3f} (D')"},
    )


# DP-SGD configurations (certified eps 1-3 at DELTA): shuffle, 2 rounds of 5 of 10 records;
# subsample, 2 epochs of one round of 5 of 6 records; Poisson, 4 rounds at q = 1/4.
# Groups of g = 2 records (a user), subsampling as above at sigma = 2: individual clipping
# certifies 4.49, batch clipping 2.05.
_DPSGD = {"shuffle": dict(noise_multiplier=1.2, n=10, epochs=1),
          "subsample": dict(noise_multiplier=1.5, n=6, epochs=2),
          "poisson": dict(noise_multiplier=1.5, n=20, epochs=1),
          "subsample-g2": dict(noise_multiplier=2.0, n=6, epochs=2, group_size=2)}

AUDITS: dict[str, Callable[[], CanaryAudit]] = {
    "gaussian": gaussian_audit,
    "isrl-silo": isrl_silo_audit,
    "isrl-silo-poisson": lambda: isrl_silo_audit(noise_std=0.6, batch_size=4, sampling_scheme="poisson",
                                                 accountant="pld"),
    "dpsgd-individual-shuffle": lambda: dpsgd_audit("individual", "shuffle", **_DPSGD["shuffle"]),
    "dpsgd-batch-shuffle": lambda: dpsgd_audit("batch", "shuffle", **_DPSGD["shuffle"]),
    "dpsgd-individual-subsample": lambda: dpsgd_audit("individual", "subsample", **_DPSGD["subsample"]),
    "dpsgd-batch-subsample": lambda: dpsgd_audit("batch", "subsample", **_DPSGD["subsample"]),
    "dpsgd-individual-poisson": lambda: dpsgd_audit("individual", "poisson", **_DPSGD["poisson"]),
    "dpsgd-individual-subsample-g2": lambda: dpsgd_audit("individual", "subsample", **_DPSGD["subsample-g2"]),
    "dpsgd-batch-subsample-g2": lambda: dpsgd_audit("batch", "subsample", **_DPSGD["subsample-g2"]),
    "diff2": diff2_audit,
    "p1d": p1d_audit,
    "pvec": pvec_audit,
    "user-level": user_level_audit,
    "dp-fedavg": fedavg_ftrl.dp_fedavg_audit,
    "dp-fedavg-count": fedavg_ftrl.dp_fedavg_count_audit,
    "dp-ftrl": fedavg_ftrl.dp_ftrl_audit,
}


def audit_names() -> tuple[str, ...]:
    return tuple(AUDITS)


def build_audit(name: str) -> CanaryAudit:
    """The catalogue's audit ``name`` (see ``audit_names()``)."""
    if name not in AUDITS:
        raise ValueError(f"mechanism={name!r} must be one of {audit_names()}")
    return AUDITS[name]()

