"""Measuring excess population loss of one protocol at one (n, d) point (the families on the engine,
and P_GD on sufficient statistics)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import engine
from dpjax.accounting import sco_transcript, shuffle_sco as sco
from dpjax.algorithms import shuffle_sco as S
from dpjax.primitives.projection import project_l2_ball
from dpjax.reproduce.shuffle_sco.config import (BASELINE_OF, DELTA_RATES, EPS_RATES, INSTANCES, Instance, PGD_ROUNDS,
                                                TABLE1, mc_features)


def build(protocol: str, n: int, d: int, aggregator: str = "matched-gaussian", eps: float = EPS_RATES,
          schedule: str = "lan"):
    """``(family, hparams, plan)`` of a rate-experiment protocol (lemma_opt P_vec); ``schedule`` is the
    AC-SA step schedule of the accelerated protocols (``"lan"`` or Theorem 4.3's ``"paper"``)."""
    inst = INSTANCES[TABLE1[protocol][0]]
    prob, L, e, dl = inst.problem(d), inst.lipschitz, eps, DELTA_RATES
    agg = dict(aggregator=aggregator)
    acc = dict(schedule=schedule)
    if protocol == "p_sgd":
        return S.ShuffleSgd.p_sgd(prob, n, e, dl, lipschitz=L, **agg)
    if protocol == "p_agd_smoothed":
        return S.ShuffleAcsa.p_agd_smoothed(prob, n, e, dl, lipschitz=L, **agg, **acc)
    if protocol == "p_agd":
        return S.ShuffleAcsa.p_agd(prob, n, e, dl, smoothness=inst.smoothness, lipschitz=L, **agg, **acc)
    if protocol == "pan_private_smoothed":
        return S.ShuffleAcsa.pan_private(prob, n, e, dl, lipschitz=L, **acc)
    if protocol == "pan_private":
        return S.ShuffleAcsa.pan_private(prob, n, e, dl, smoothness=inst.smoothness, lipschitz=L, **acc)
    if protocol == "p_agd_phased":
        return S.ShuffleAcsa.phased(prob, n, e, dl, inst.lam, smoothness=inst.smoothness, lipschitz=L, **agg, **acc)
    if protocol == "p_agd_phased_smoothed":  # non-smooth: every phase runs smoothed P_AGD (Theorem 4.8)
        return S.ShuffleAcsa.phased(prob, n, e, dl, inst.lam, smoothness=None, lipschitz=L, **agg, **acc)
    if protocol == "p_gd_smoothed":  # T = min(n, eps^2 n^2/(d ln^2(nd/delta))) rounds of all n users
        return S.ShuffleSgd.p_gd(prob, n, e, dl, lipschitz=L, **agg)
    if protocol == "p_gd_phased":
        return S.ShuffleSgd.p_gd_phased(prob, n, e, dl, inst.lam, smoothness=inst.smoothness, lipschitz=L,
                                        rounds=PGD_ROUNDS, **agg)
    raise ValueError(f"protocol={protocol!r} must be one of {tuple(TABLE1)}")


def _variants(protocol, fam, hp, n, eps=EPS_RATES):
    """Hyperparameters run by the protocol's ONE compiled program: the protocol itself, its non-private
    twin (noise 0: bit-identical to exact sums) and, for the instance's reference schedule, the central-
    and local-DP Gaussian baselines on ``n`` users (calibrated to (EPS_RATES, DELTA_RATES) with GDP; every
    Gaussian aggregator adds one N(0, std^2 I) to the round's sum, so only the std differs: each baseline's
    std on the sum, ``noise_std_of``, is run as ``fam``'s multiplier, ``noise_multiplier_for``)."""
    out = {protocol: hp, "twin": dataclasses.replace(hp, noise_multiplier=jnp.zeros_like(hp.noise_multiplier))}
    if BASELINE_OF.get(TABLE1[protocol][0]) == protocol:
        for agg in ("central-gaussian", "local-gaussian"):
            base = dataclasses.replace(fam, aggregator=agg)
            cal = base.privacy([n], hp).calibrate(eps, DELTA_RATES, "gdp")
            std = base.noise_std_of(dataclasses.replace(hp, noise_multiplier=np.asarray(cal["noise_multiplier"])))
            z = jnp.asarray(fam.noise_multiplier_for(std, hp))
            out[f"{agg.split('-')[0]}_dp[{protocol}]"] = dataclasses.replace(hp, noise_multiplier=z)
    return out


def measure(fam, hps: dict, inst: Instance, n, d, seeds, seed) -> dict:
    """Excess population loss of ``seeds`` runs of every hparams in ``hps`` (one ``dpjax.engine.run_grid``
    chunk holding every run: one key per lane, the first lane's starting point)."""
    from dpjax.engine import OutputParams, run_grid

    rng = np.random.default_rng(seed * 7919 + n + 31 * d)
    data = inst.sample(rng, n, d)
    names = list(hps)
    stacked = engine.stack_hparams([hps[k] for k in names for _ in range(seeds)])
    keys_ = jax.random.split(jax.random.key(seed + n + d), len(names) * seeds)
    res = run_grid(fam, data, stacked, keys_, eval_fn=OutputParams(), common_random_numbers=False,
                   chunk_size=len(keys_), on_nonfinite="raise")
    out = np.asarray(res.evals["params"][:, -1], np.float64)
    ex = inst.excess(out, d, None, features=mc_features(d))  # the draw of default_rng(12345 + d), kept
    return {k: ex[i * seeds:(i + 1) * seeds] for i, k in enumerate(names)}


def axis_counts(rng, n, d):
    """Users per axis of ``axis_nonsmooth`` data: the same draw as ``Instance.sample``'s axes (same rng state)."""
    return np.bincount(rng.integers(0, d, n), minlength=d)


@functools.partial(jax.jit, static_argnames=("rounds",))
def pgd_axis_run(counts, theta_star, n, step, smoothing, radius, noise_std, keys, *, rounds: int):
    """Smoothed P_GD (Algorithm 5 on the Moreau envelope, Theorem 4.9) on the ``axis_nonsmooth`` instance, one run per
    (``noise_std``, ``keys``) row, from sufficient statistics: a user with a = s e_j, y = s theta*_j has envelope
    gradient beta (w - prox) = clip(beta (w_j - theta*_j), -1, 1) e_j (norm <= 1 <= L, so P_vec's clipping is the
    identity), hence the round's gradient sum over all n users is counts * clip(beta (w - theta*), -1, 1): O(d) per
    round instead of O(n d). The aggregator is P_vec's variance-matched Gaussian surrogate (``noise_std``: std of the
    noise on the round's sum, 0 for the twin), divided by the public n; projected step; output the average of
    theta_0..theta_{T-1} (float32 Kahan sum: T reaches 1e7). Same recursion as ``ShuffleSgd`` with the plan's hparams
    (tests/reproduce/shuffle_sco/test_instances.py compares them with exact sums)."""
    counts = jnp.asarray(counts, jnp.float32)
    theta_star = jnp.asarray(theta_star, jnp.float32)

    def one(std, key):
        def body(t, carry):
            w, total, comp = carry
            g = counts * jnp.clip(smoothing * (w - theta_star), -1.0, 1.0)
            g = g + std * jax.random.normal(jax.random.fold_in(key, t), w.shape)
            new = project_l2_ball(w - step * (g / n), radius)
            y = w - comp  # Kahan summation of the iterates
            acc = total + y
            return new, acc, (acc - total) - y

        zero = jnp.zeros_like(theta_star)
        _, total, _ = jax.lax.fori_loop(0, rounds, body, (zero, zero, zero))
        return total / rounds

    return jax.vmap(one)(jnp.asarray(noise_std, jnp.float32), keys)


def measure_pgd_axis(plan, inst: Instance, n, d, seeds, seed) -> dict:
    """``measure`` for ``p_gd_smoothed`` on ``axis_nonsmooth`` (same data seed and key layout; the plan's
    single phase, its matched std and a noiseless twin)."""
    (ph,) = plan.phases
    counts = axis_counts(np.random.default_rng(seed * 7919 + n + 31 * d), n, d)
    std = sco_transcript.matched_noise_std(plan)[0]
    keys_ = jax.random.split(jax.random.key(seed + n + d), 2 * seeds)
    out = pgd_axis_run(counts, inst.theta_star(d), float(n), ph.step, ph.smoothing, 1.0,
                       np.array([std] * seeds + [0.0] * seeds), keys_, rounds=ph.rounds)
    ex = inst.excess(np.asarray(out, np.float64), d, None)
    return {"p_gd_smoothed": ex[:seeds], "twin": ex[seeds:]}


def measure_point(protocol, inst, n, d, seeds, seed, eps, schedule, variants=True):
    """(plan, {name: excess losses}, accountant) of one (n, d) point of ``protocol``."""
    if protocol == "p_gd_smoothed":  # sufficient statistics; the family would need n^2 gradients
        plan = sco.p_gd_plan(n, d, eps, DELTA_RATES, inst.lipschitz, 2.0, None)
        res = measure_pgd_axis(plan, inst, n, d, seeds, seed)
        return plan, res if variants else {protocol: res[protocol]}, "pvec-lemma:optimal (matched-gaussian surrogate)"
    fam, hp, plan = build(protocol, n, d, eps=eps, schedule=schedule)
    res = measure(fam, _variants(protocol, fam, hp, n, eps) if variants else {protocol: hp}, inst, n, d, seeds, seed)
    acc = ("pvec-lemma:optimal (matched-gaussian surrogate)" if fam.aggregator == "matched-gaussian"
           else fam.privacy([n], hp).epsilon(DELTA_RATES).accountant)
    return plan, res, acc


#: Table 1's exponents are checked within this tolerance (``dpjax.sweep.select.slope_verdict``)
