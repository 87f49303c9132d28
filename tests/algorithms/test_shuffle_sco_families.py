"""The shuffle-private SCO families (P_SGD, P_GD, P_AGD (+ smoothing, phases), pan-private AC-SA):
non-private twins, zero-noise reductions, schedules, closed forms, and privacy reports checked
against independent recomputations from Lemmas 3.1, A.1 and 3.3."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpjax.accounting import shuffle_sco as sco
from dpjax.accounting.sco_transcript import transcript_report
from dpjax.algorithms import shuffle_sco as S
from dpjax.algorithms.smoothing import AbsoluteRegression
from dpjax import engine
from dpjax.engine.roles import Context
from dpjax.engine.silos import SiloData
from dpjax.parts.clipping import ClipVectors
from dpjax.parts.users import UserGradients, UserWindows
from dpjax.reproduce.isrl_scaling import MeanEstimation
from dpjax.primitives import shuffle_protocols as sp

EPS, DELTA = 1.0, 1e-6


def _stream(n, d, seed=0, radius=1.0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, d))
    a = radius * a / np.linalg.norm(a, axis=1, keepdims=True)
    y = a @ np.full(d, 0.4 / math.sqrt(d)) + 0.1 * rng.laplace(size=n)
    return a, y, SiloData.from_silos([a.astype(np.float32)], [y.astype(np.float32)])


def _proj(v, r=1.0):
    nrm = np.linalg.norm(v)
    return v if nrm <= r else v * (r / nrm)


def _numpy_sgd(grad, a, y, hp):
    """Projected SGD with phase restarts from the phase's average (Algorithms 3/5, Lemma B.7)."""
    theta = np.zeros(a.shape[1])
    acc, cnt = np.zeros_like(theta), 0
    for r in range(len(hp.start)):
        if hp.stage_round[r] == 1 and r > 0:
            theta, acc, cnt = acc / cnt, np.zeros_like(theta), 0
        s, b = int(hp.start[r]), int(hp.batch[r])
        g = np.mean([grad(theta, a[i], y[i], float(hp.smoothing[r])) for i in range(s, s + b)], axis=0)
        acc, cnt = acc + theta, cnt + 1
        theta = _proj(theta - float(hp.step[r]) * g)
    return acc / cnt


def _numpy_acsa(grad, a, y, hp):
    """AC-SA, mu = 0: alpha_t = 2/(t+1), step t/(2 nu), restart from theta^ag at t = 1."""
    w = ag = np.zeros(a.shape[1])
    for r in range(len(hp.start)):
        t, nu = int(hp.stage_round[r]), float(hp.step[r])
        if t == 1:
            w = ag
        alpha = 2 / (t + 1)
        md = (1 - alpha) * ag + alpha * w
        s, b = int(hp.start[r]), int(hp.batch[r])
        g = np.mean([grad(md, a[i], y[i], float(hp.smoothing[r])) for i in range(s, s + b)], axis=0)
        w = _proj(w - t / (2 * nu) * g)
        ag = alpha * w + (1 - alpha) * ag
    return ag


def _sq_grad(theta, a, y, s):
    return _proj(theta - a, 2.0)


def _abs_envelope_grad(theta, a, y, s):
    """s (theta - prox), prox of |<a, v> - y| in closed form."""
    t = a @ theta - y
    return s * np.clip(t / (a @ a), -1 / s, 1 / s) * a


def _hp_numpy(hp):
    return jax.tree_util.tree_map(np.asarray, hp)


def _report(fam, hp, accountant=None):
    """The full transcript report (details included) of a run on the users its schedule uses."""
    users = int(np.max(np.asarray(hp.start) + np.asarray(hp.batch)))
    return transcript_report(fam.dp_plan([users], hp), DELTA, accountant)


def test_p_sgd_twin_matches_numpy_and_zero_noise_gaussians_are_bit_identical():
    n, d = 90, 2
    a, y, data = _stream(n, d)
    fam, hp, plan = S.ShuffleSgd.p_sgd(MeanEstimation(d), n, EPS, DELTA, lipschitz=2.0, aggregator="exact")
    assert plan.num_rounds >= 3 and fam.privacy([n], hp).private is False
    out = np.asarray(engine.run(fam, data, hp, jax.random.key(0)).output)
    np.testing.assert_allclose(out, _numpy_sgd(_sq_grad, a, y, _hp_numpy(hp)), atol=2e-6)
    zero = dataclasses.replace(hp, noise_multiplier=jnp.zeros_like(hp.noise_multiplier))
    local = np.asarray(engine.run(dataclasses.replace(fam, aggregator="local-gaussian"), data, zero,
                                  jax.random.key(0)).output)
    np.testing.assert_array_equal(local, out)


def test_phased_smoothed_p_agd_twin_matches_numpy_and_pan_private_zero_noise():
    n, d = 400, 2
    a, y, data = _stream(n, d, seed=1)
    fam, hp, plan = S.ShuffleAcsa.phased(AbsoluteRegression(d), n, EPS, DELTA, 1.0, phases=2,
                                         aggregator="exact")
    assert len(plan.phases) == 2 and fam.smoothed and np.all(np.asarray(hp.smoothing) > 0)
    out = np.asarray(engine.run(fam, data, hp, jax.random.key(0)).output)
    np.testing.assert_allclose(out, _numpy_acsa(_abs_envelope_grad, a, y, _hp_numpy(hp)), atol=1e-5)
    zero = dataclasses.replace(hp, noise_multiplier=jnp.zeros_like(hp.noise_multiplier))
    pan = np.asarray(engine.run(dataclasses.replace(fam, aggregator="pan-gaussian"), data, zero,
                                jax.random.key(0)).output)
    np.testing.assert_array_equal(pan, out)


def test_p_gd_without_privacy_noise_tracks_the_twin_within_the_rounding_bound():
    """b = p = 0: only randomized rounding remains, each user's coordinate error < Delta/g = 2L/g, so
    the mean gradient is off by < sqrt(d) 2L/g; the step theta -> (1-eta) theta + eta mean(a) (eta <= 1)
    and the projection are non-expansive, so ||theta_t - theta'_t|| <= sum_s eta_s sqrt(d) 2L/g."""
    n, d, g = 50, 3, 4000
    a, y, data = _stream(n, d, seed=2)
    fam, hp, plan = S.ShuffleSgd.p_gd(MeanEstimation(d), n, EPS, DELTA, lipschitz=2.0, smoothness=1.0,
                                      rounds=6, max_granularity=g)
    T = plan.num_rounds
    quiet = dataclasses.replace(hp, pvec=sp.PvecParams.create(np.full(T, g), np.zeros(T, int), np.zeros(T)))
    out = np.asarray(engine.run(fam, data, quiet, jax.random.key(3)).output)
    twin = _numpy_sgd(_sq_grad, a, y, _hp_numpy(hp))
    bound = float(np.sum(np.asarray(hp.step))) * math.sqrt(d) * 2 * 2.0 / g
    assert np.linalg.norm(out - twin) <= bound + 1e-5
    assert np.all(np.asarray(hp.start) == 0) and np.all(np.asarray(hp.batch) == n)  # every user every round


def test_closed_form_single_round():
    """Spec §6 item 22: d = 1, l = (theta - x)^2/2, eta = 1, B = n (T = 1): the printed output (the average
    of theta_0..theta_{T-1}) is theta_0; the last iterate is the sample mean (no noise: the twin)."""
    n = 25
    x = np.random.default_rng(5).uniform(-1, 1, (n, 1))
    data = SiloData.from_silos([x.astype(np.float32)], [np.zeros(n, np.float32)])
    plan = sco.p_sgd_plan(n, 1, EPS, DELTA, 2.0, 2.0, batch=n)
    hp = dataclasses.replace(S.ScoHParams.from_plan(plan), step=jnp.ones(1))
    fam = S.ShuffleSgd(MeanEstimation(1), 1, n, aggregator="exact")
    assert float(engine.run(fam, data, hp, jax.random.key(0)).output[0]) == 0.0
    last = engine.run(dataclasses.replace(fam, output="last"), data, hp, jax.random.key(0)).output
    assert float(last[0]) == pytest.approx(x.mean(), abs=1e-6)


def test_pan_private_release_has_covariance_two_zeta_squared():
    """Spec §6 item 14: zero gradients, one round: g_1 = Z_1 + Z_2 on the mean, covariance 2 zeta^2 I.
    With alpha_1 = 1 the output is theta^ag = -g_1/(2 nu). Variance within the chi^2 99.9% interval."""
    n, d, reps = 2000, 3, 2000
    data = SiloData.from_silos([np.zeros((n, d), np.float32)], [np.zeros(n, np.float32)])
    fam, hp, plan = S.ShuffleAcsa.pan_private(MeanEstimation(d), n, 0.5, DELTA, smoothness=1.0, lipschitz=2.0)
    first = jax.tree_util.tree_map(lambda v: v[:1] if np.ndim(v) else v, hp)
    fam1 = dataclasses.replace(fam, num_rounds=1, projection_radius=None)
    batch = jax.tree_util.tree_map(lambda v: jnp.broadcast_to(v, (reps,) + jnp.shape(v)), first)
    out = np.asarray(engine.run_many(fam1, data, batch, jax.random.split(jax.random.key(7), reps)).output, np.float64)
    g = -2 * float(first.step[0]) * out
    zeta2 = 8 * 2.0**2 * math.log(2 / DELTA) / (plan.phases[0].batch**2 * 0.5**2)
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], reps - 1) / (reps - 1)
    ratio = g.var(0, ddof=1) / (2 * zeta2)
    assert np.all((ratio > lo) & (ratio < hi))
    assert np.all(np.abs(g.mean(0)) <= 4 * math.sqrt(2 * zeta2 / reps))


def _lemma_epsilon(g, b, p, m, d, delta, printed):
    """Independent recomputation: Lemma A.1 (alpha from delta_hat), Lemma 3.1 (eps_j = eps_hat (2/g + a_j/Delta))
    and Lemma 3.3 (both constants), maximised over difference vectors a with ||a|| <= Delta = 2L."""
    gamma = delta / (d + 1)
    alpha = math.sqrt(10 * math.log(2 / gamma) / (b * m * p))
    eps_hat = 3 * g * alpha
    rng = np.random.default_rng(0)
    cands = [np.full(d, 1 / math.sqrt(d)), np.eye(d)[0]] + [np.abs(v) / np.linalg.norm(v) for v in rng.normal(size=(20, d))]
    worst = 0.0
    for u in cands:  # u = a/Delta, ||u|| = 1
        ej = eps_hat * (2 / g + u)
        lin = (2 if printed else math.sqrt(2)) * math.sqrt(math.log(1 / gamma) * np.sum(ej**2))
        worst = max(worst, float(np.sum(ej * np.expm1(ej))) + lin)
    return worst


@pytest.mark.parametrize("accountant", ["pvec-lemma", "pvec-printed"])
def test_reports_are_never_below_independent_recomputation(accountant):
    printed = accountant == "pvec-printed"
    mode = "paper" if printed else "lemma_opt"
    n, d = 20000, 4
    prob = AbsoluteRegression(d)
    cases = {
        "p_sgd": S.ShuffleSgd.p_sgd(prob, n, EPS, DELTA, mode=mode),
        "p_agd_smoothed": S.ShuffleAcsa.p_agd_smoothed(prob, n, EPS, DELTA, mode=mode),
        "p_gd": S.ShuffleSgd.p_gd(prob, n, EPS, DELTA, mode=mode, rounds=20),
    }
    for name, (fam, hp, plan) in cases.items():
        rep = _report(fam, hp, accountant)
        ph = plan.phases[0]
        g, b, p = (int(np.asarray(hp.pvec.granularity)[0]), fam.trial_groups * int(np.asarray(hp.pvec.trials)[0]),
                   float(np.asarray(hp.pvec.probability)[0]))
        assert b >= ph.pvec.b and b * p == pytest.approx(ph.pvec.b * ph.pvec.p, rel=1e-6)
        if ph.fresh:
            indep = _lemma_epsilon(g, b, p, ph.batch, d, DELTA, printed)
        else:
            e0 = _lemma_epsilon(g, b, p, ph.batch, d, ph.delta_round, printed)
            slack = DELTA - ph.rounds * ph.delta_round
            indep = math.sqrt(2 * ph.rounds * math.log(1 / slack)) * e0 + ph.rounds * e0 * math.expm1(e0)
            if not printed:  # optimal composition: never below the exact KOV value (recomputed by dp_accounting)
                indep = min(indep, sco.compose_epsilon(e0, ph.delta_round, ph.rounds, DELTA, "optimal"))
        eps = rep.central.epsilon
        assert eps >= indep * (1 - 1e-9), name
        assert eps <= EPS * (1 + 1e-6), name  # the calculator's parameters certify the nominal eps
        assert rep.details["bits_per_user"] == (1 if ph.fresh else ph.rounds) * d * (g + b)
        assert rep.central.unit == "user" and rep.central.neighboring == "replace-one"


def _with_pvec(hp, g=None, b=None, p=None):
    """``hp`` with per-round P_vec arrays replaced (raw PvecParams: what a user-built schedule can hold)."""
    pv = hp.pvec
    return dataclasses.replace(hp, pvec=sp.PvecParams(*(np.asarray(old if new is None else new) for old, new in
                                                       ((pv.granularity, g), (pv.trials, b), (pv.probability, p)))))


def test_pvec_report_takes_each_phases_worst_round_not_the_smallest_g():
    """Issue 23, item 2: eps grows with g (at the constructor's b, p: g = 20/32/64/128 give eps ~ 1.0/1.5/3.1/6.8),
    so a phase whose rounds vary g is certified at its LARGEST g (before: the smallest -- an under-report).
    Hand computation: every round's own Theorem 3.2 eps (``pvec_epsilon`` at its g, b, p and batch); a fresh
    phase is the largest of them, an interactive one composes T rounds at the largest per-round eps."""
    d = 4
    fam, hp, plan = S.ShuffleSgd.p_sgd(AbsoluteRegression(d), 20000, EPS, DELTA)
    t = len(np.asarray(hp.start))
    g0 = int(np.asarray(hp.pvec.granularity)[0])
    b, p = (int(np.asarray(hp.pvec.trials)[0]) * fam.trial_groups, float(np.asarray(hp.pvec.probability)[0]))
    m = int(np.asarray(hp.batch)[0])
    per_g = {g: sco.pvec_acc.pvec_epsilon(g, b, p, m, d, DELTA).epsilon for g in (g0, 32, 64, 128)}
    assert per_g[g0] == pytest.approx(EPS, rel=1e-6) and per_g[g0] < per_g[32] < per_g[64] < per_g[128]
    varying = _with_pvec(hp, g=np.resize(np.array([g0, 32, 64, 128, 32]), t))
    assert _report(fam, varying).central.epsilon == pytest.approx(per_g[128], rel=1e-12)  # before: per_g[g0]
    # b and p: eps falls with both (p < 1/2, Lemma 3.1), so the worst round is the one with the smallest b p
    low_b = _with_pvec(hp, b=np.where(np.arange(t) == 7, b // 3, b))
    assert _report(fam, low_b).central.epsilon == pytest.approx(
        sco.pvec_acc.pvec_epsilon(g0, b // 3, p, m, d, DELTA).epsilon, rel=1e-12)
    with pytest.raises(ValueError, match="probability"):  # p >= 1/2 anywhere is outside the lemma: refused
        _report(fam, _with_pvec(hp, p=np.where(np.arange(t) == 3, 1 - p / 2, p)))

    # interactive (P_GD: the same users every round): T rounds composed at the worst round's eps
    fam_i, hp_i, plan_i = S.ShuffleSgd.p_gd(AbsoluteRegression(d), 20000, EPS, DELTA, rounds=20)
    ph = plan_i.phases[0]
    gi = int(np.asarray(hp_i.pvec.granularity)[0])
    bi, pi = (int(np.asarray(hp_i.pvec.trials)[0]) * fam_i.trial_groups, float(np.asarray(hp_i.pvec.probability)[0]))
    dr = DELTA / (ph.rounds + 1)
    hand = sco.compose_epsilon(sco.pvec_acc.pvec_epsilon(2 * gi, bi, pi, ph.batch, d, dr).epsilon, dr, ph.rounds,
                               DELTA, "optimal")
    rep = _report(fam_i, _with_pvec(hp_i, g=np.where(np.arange(ph.rounds) == 5, 2 * gi, gi))).central.epsilon
    assert rep == pytest.approx(hand, rel=1e-9) and rep > _report(fam_i, hp_i).central.epsilon


def test_local_gaussian_report_uses_each_users_smallest_noise():
    """Issue 23, item 2: local DP noise per user is the noise on the round's sum over sqrt(batch_r); stds
    [1, 2] on the sums of batches [1, 100] are per-user stds [1, 0.2], so the guarantee rests on 0.2, not on
    min(noise)/sqrt(min(batch)) = 1 (before: a 5x smaller GDP mu, an under-report). The multipliers are each
    user's own (noise_multiplier_for divides by sqrt(batch_r) and the sensitivity 2L). Central Gaussian: the
    smallest noise on the sum, whatever the batch."""
    d = 3
    fam, hp, _ = S.ShuffleSgd.local_baseline(AbsoluteRegression(d), 1000, EPS, DELTA)
    clip = float(hp.clip_norm)
    noise, batch = np.array([1.0, 2.0]), np.array([1, 100])
    two = S.ScoHParams(jnp.asarray([0, 1], jnp.int32), jnp.asarray(batch, jnp.int32), jnp.asarray([1, 2], jnp.int32),
                       jnp.ones(2, jnp.float32), jnp.zeros(2, jnp.float32), sp.PvecParams(1, 0, 0.0),
                       jnp.zeros(2, jnp.float32), jnp.float32(clip))
    fam2 = dataclasses.replace(fam, num_rounds=2, max_batch=100)
    local = dataclasses.replace(two, noise_multiplier=jnp.asarray(fam2.noise_multiplier_for(noise, two)))
    np.testing.assert_allclose(np.asarray(local.noise_multiplier), [1 / (2 * clip), 0.2 / (2 * clip)], rtol=1e-6)
    np.testing.assert_allclose(fam2.noise_std_of(local), noise, rtol=1e-6)
    hand = sco.gdp.gdp_epsilon(sco.gdp.gaussian_mechanism_mu(0.2, 2 * clip, 1), DELTA)
    rep = _report(fam2, local).central
    assert rep.epsilon == pytest.approx(hand, rel=1e-6)
    assert rep.epsilon > sco.gdp.gdp_epsilon(sco.gdp.gaussian_mechanism_mu(1.0, 2 * clip, 1), DELTA)
    fam_c = dataclasses.replace(fam2, aggregator="central-gaussian")
    central = dataclasses.replace(two, noise_multiplier=jnp.asarray(fam_c.noise_multiplier_for(noise, two)))
    assert _report(fam_c, central).central.epsilon == pytest.approx(
        sco.gdp.gdp_epsilon(sco.gdp.gaussian_mechanism_mu(1.0, 2 * clip, 1), DELTA), rel=1e-6)


def test_a_user_whose_gradient_overflows_sends_zero_to_pvec():
    """Issue 23 (privacy sweep): the users project their own gradient onto the ball of radius L (``ClipVectors``);
    one user whose gradient overflowed (inf) used to send NaN (inf times L/inf), making the protocol's sum NaN by
    that user's data alone. It now sends the zero vector (norm 0 <= L)."""
    class Scaled:  # loss 1e20 <theta, x>: the gradient 1e20 x overflows float32 for |x| > 3.4e18
        def loss(self, params, x, y):
            return 1e20 * jnp.sum(params * x)

    x = np.array([[1e-20, 0.0], [1e19, 0.0], [0.0, -2e-20], [0.0, 0.0]], np.float32)
    data = SiloData.from_silos([x], [np.zeros(4, np.float32)])
    data = dataclasses.replace(data, x=data.x.at[0, 3, 0].set(jnp.nan))  # past from_silos' data check
    hp = S.ScoHParams.single_phase(1, 4, 1.0, clip_norm=1.0)
    ctx = Context(jnp.int32(0), jax.random.key(0), hp, data, None, jnp.zeros(2), jnp.zeros(2))
    batch, _ = UserWindows(4).update(data, (), ctx)
    units, _ = UserGradients(Scaled()).update(batch, (), ctx._replace(batch=batch))
    clipped, _ = ClipVectors().update(units, (), ctx)
    grads = np.asarray(clipped.value[0])
    assert np.all(np.isfinite(grads)) and np.all(grads[[1, 3]] == 0) and float(clipped.sensitivity) == 2.0
    np.testing.assert_allclose(grads[[0, 2]], [[1.0, 0.0], [0.0, -1.0]], rtol=1e-6)


def test_privacy_refuses_a_schedule_the_data_cannot_run():
    """Issue 23 (privacy sweep): a round whose users run past the n that exist (or beyond max_batch) runs with
    fewer users than its ``batch`` -- the oracle masks them, so fewer P_vec noise contributions -- while the
    report counts ``batch``: ``privacy(silo_sizes, hparams)`` now checks the schedule against n and refuses."""
    fam, hp, plan = S.ShuffleSgd.p_sgd(AbsoluteRegression(2), 1000, EPS, DELTA)
    used = int(np.max(np.asarray(hp.start) + np.asarray(hp.batch)))
    assert fam.privacy([used], hp).epsilon(DELTA).epsilon == pytest.approx(EPS, rel=1e-6)
    with pytest.raises(ValueError, match="num_users"):
        fam.privacy([used - 1], hp)
    with pytest.raises(ValueError, match="max_batch"):
        fam.privacy([1000], dataclasses.replace(hp, batch=hp.batch.at[0].set(fam.max_batch + 1)))


def test_calibration_round_trip_and_robust_report():
    n, d = 5000, 3
    fam, hp, plan = S.ShuffleSgd.p_sgd(AbsoluteRegression(d), n, EPS, DELTA)
    spec = fam.privacy([n], hp)
    new = dataclasses.replace(hp, **spec.calibrate(0.4, DELTA))
    eps = fam.privacy([n], new).epsilon(DELTA).epsilon
    assert 0.3 < eps <= 0.4 * (1 + 1e-6)
    robust = dataclasses.replace(fam, honest_frac=0.5)
    assert _report(robust, hp).central.epsilon > _report(fam, hp).central.epsilon
    gauss, ghp, _ = S.ShuffleSgd.local_baseline(AbsoluteRegression(d), n, EPS, DELTA)
    assert gauss.privacy([n], ghp).epsilon(DELTA).epsilon == pytest.approx(EPS, rel=1e-6)


def test_schedules_use_disjoint_fresh_users():
    fam, hp, plan = S.ShuffleAcsa.phased(AbsoluteRegression(3), 10**5, EPS, DELTA, 1.0, phases=3)
    start, batch = np.asarray(hp.start), np.asarray(hp.batch)
    used = np.zeros(10**5, int)
    for s, b in zip(start, batch):
        used[s:s + b] += 1
    assert used.max() == 1 and 1 <= batch.min() and batch.max() <= fam.max_batch
    assert [p.start for p in plan.phases] == [0, 10**5 // 3, 2 * (10**5 // 3)]


def test_invalid_inputs_name_the_argument():
    fam, hp, plan = S.ShuffleSgd.p_sgd(AbsoluteRegression(2), 1000, EPS, DELTA)
    two = SiloData.from_silos([np.zeros((5, 2))] * 2, [np.zeros(5)] * 2)
    with pytest.raises(ValueError, match="silos"):
        fam.validate(two)
    with pytest.raises(ValueError, match="num_users"):
        fam.privacy([500], hp)
    with pytest.raises(ValueError, match="aggregator"):
        dataclasses.replace(fam, aggregator="laplace")
    with pytest.raises(ValueError, match="bit_buffer"):
        dataclasses.replace(fam, aggregator="pvec-bits")
    with pytest.raises(ValueError, match="honest_frac"):
        dataclasses.replace(fam, honest_frac=0.0)
    with pytest.raises(ValueError, match="accountant"):
        fam.privacy([1000], hp).epsilon(DELTA, "rdp")


def test_families_follow_the_contract():
    from dpjax.engine.contract import Algorithm

    for fam, hp, _ in (S.ShuffleSgd.p_sgd(AbsoluteRegression(2), 1000, EPS, DELTA),
                       S.ShuffleAcsa.pan_private(AbsoluteRegression(2), 1000, 0.5, DELTA)):
        assert isinstance(fam, Algorithm) and isinstance(hp, fam.hparams_type)
        assert fam.privacy([1000], hp).neighboring == "replace-one"
        with pytest.raises(ValueError, match="hparams"):
            fam.check_hparams(object())


def test_paper_acsa_schedule_matches_algorithm_4_as_printed():
    """schedule="paper": alpha_t = 2/(t+2), theta_{t+1} = Proj(theta_t - g_t/L_t) with
    L_t = ((T+2)^{3/2} sigma_or/D + beta)/(t+1) (Theorem 4.3), computed here by hand from the plan's
    batch and P_vec parameters; the family's twin must follow it step by step."""
    n, d, L, beta = 600, 2, 2.0, 1.0
    a, y, data = _stream(n, d, seed=3)
    fam, hp, plan = S.ShuffleAcsa.p_agd(MeanEstimation(d), n, EPS, DELTA, smoothness=beta, lipschitz=L,
                                        aggregator="exact", schedule="paper")
    assert fam.acsa_schedule == "paper" and plan.num_rounds >= 3
    ph = plan.phases[0]
    B, T, D = ph.batch, ph.rounds, 2.0
    g, b, p = ph.pvec.g, ph.pvec.b, ph.pvec.p
    sigma = math.sqrt(L * L / B + d * (2 * L / g) ** 2 * (B / 4 + B * b * p * (1 - p)) / B**2)
    nu = (T + 2) ** 1.5 * sigma / D + beta
    np.testing.assert_allclose(np.asarray(hp.step), nu, rtol=1e-6)
    theta = ag = np.zeros(d)
    for t in range(1, T + 1):
        alpha, Lt = 2 / (t + 2), nu / (t + 1)
        md = alpha * theta + (1 - alpha) * ag
        s0 = (t - 1) * B
        grad = np.mean([_sq_grad(md, a[i], y[i], 0.0) for i in range(s0, s0 + B)], axis=0)
        theta = _proj(theta - grad / Lt)
        ag = alpha * theta + (1 - alpha) * ag
    out = np.asarray(engine.run(fam, data, hp, jax.random.key(0)).output)
    np.testing.assert_allclose(out, ag, atol=2e-6)
    lan_fam, lan_hp, _ = S.ShuffleAcsa.p_agd(MeanEstimation(d), n, EPS, DELTA, smoothness=beta, lipschitz=L,
                                             aggregator="exact")
    lan = np.asarray(engine.run(lan_fam, data, lan_hp, jax.random.key(0)).output)
    assert not np.allclose(lan, out)  # the default (Lan) schedule is a different program
    with pytest.raises(ValueError, match="acsa_schedule"):
        dataclasses.replace(fam, acsa_schedule="nesterov")


def test_sweep_single_phase_schedule_and_its_validation():
    """The sweep's one-phase schedule: fresh users advance by the batch, interactive ones stay; bad
    axis values are refused naming the axis."""
    fresh = S.ScoHParams.single_phase(3, 5, 0.1)
    inter = S.ScoHParams.single_phase(3, 5.0, 0.1, interactive=1.0, noise_multiplier=[0.1, 0.2, 0.3])
    np.testing.assert_array_equal(np.asarray(fresh.start), [0, 5, 10])
    np.testing.assert_array_equal(np.asarray(inter.start), [0, 0, 0])
    np.testing.assert_array_equal(np.asarray(inter.stage_round), [1, 2, 3])
    np.testing.assert_allclose(np.asarray(inter.noise_multiplier), [0.1, 0.2, 0.3])
    for kwargs, name in (({"batch": 0}, "batch"), ({"batch": 2.5}, "batch"), ({"step": -1.0}, "step"),
                         ({"interactive": 2}, "interactive"), ({"noise_multiplier": -0.1}, "noise_multiplier")):
        args = {"batch": 5, "step": 0.1} | kwargs
        with pytest.raises(ValueError, match=name):
            S.ScoHParams.single_phase(3, args.pop("batch"), args.pop("step"), **args)


def test_float32_multipliers_hit_the_float32_std_round_by_round():
    """``GaussianUsers.multiplier_for``'s float32 multipliers, vectorised over rounds: per round, the first
    of z, z +- 1..3 ulps (up first) whose float32 run std (z sens) factor equals float32(noise_std), else z;
    0 for a zero std. Checked against a per-round scalar search on 4000 random rounds (local factors
    sqrt(batch), central factor 1)."""
    from dpjax.parts.users import _float32_multipliers

    rng = np.random.default_rng(0)
    std = np.exp(rng.uniform(-8, 8, 4000))
    std[::97] = 0.0
    for sens, factor in ((np.float32(2.0), np.sqrt(rng.integers(1, 10**6, 4000).astype(np.float32))),
                         (np.float32(0.3), np.ones(4000, np.float32))):
        got = _float32_multipliers(std, sens, factor)
        for s, f, g in zip(std, factor, got):
            if s == 0:
                assert g == 0
                continue
            z = np.float32(s / (float(sens) * float(f)))
            order = [z]
            up, down = z, z
            for _ in range(3):
                up = np.nextafter(up, np.float32(np.inf))
                order.append(up)
            for _ in range(3):
                down = np.nextafter(down, np.float32(-np.inf))
                order.append(down)
            hits = [c for c in order if np.float32(np.float32(c * sens) * f) == np.float32(s)]
            assert g == (hits[0] if hits else z)
        naive = (std / (float(sens) * factor.astype(np.float64))).astype(np.float32)
        assert np.any(got[std > 0] != naive[std > 0])  # the search moves z in some rounds (it is exercised)
