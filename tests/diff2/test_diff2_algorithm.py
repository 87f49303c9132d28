"""DIFF2-GD / DP-GD / GD / DIFF2-BVR-L-SGD: spec §6 algorithmic identities 2-14, 25-27.

All identity tests run in float64 (spec §6: "deterministic, float64").
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpjax import keys
from dpjax.algorithms import diff2
from dpjax import engine
from dpjax.engine.silos import SiloData
from dpjax.primitives import clipping, noise
from dpjax.problems import LinearRegression


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


DIM = 3


def make_data(sizes=(7, 5, 6), seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    xs = [scale * rng.normal(size=(n, DIM)) for n in sizes]
    w = rng.normal(size=DIM)
    ys = [x @ w + 0.1 * rng.normal(size=len(x)) for x in xs]
    return SiloData.from_silos(xs, ys, dtype=jnp.float64), xs, ys


PROBLEM = LinearRegression(DIM, fit_intercept=False)


def x0():
    return jnp.asarray([0.3, -0.2, 0.5], jnp.float64)


def hp(**kw):
    kw.setdefault("learning_rate", 0.05)
    return diff2.Diff2HParams.create(dtype=jnp.float64, **kw)


def run_traj(alg, data, hparams, key, rounds=None):
    """Manual loop returning the states after every round (x_1..x_R) and metrics."""
    state = alg.init(x0(), hparams, data, key)
    step = jax.jit(alg.step)
    traj, mets = [], []
    for r in range(rounds or alg.num_rounds):
        state, m = step(state, data, keys.round_key(key, r))
        traj.append(state)
        mets.append(jax.device_get(m))
    return traj, mets


def full_grad(params, xs, ys):
    """grad f = (1/P) sum_p (1/n_p) sum_i grad l, in numpy (least squares, 0.5 factor)."""
    w = np.asarray(params)
    return np.mean([x.T @ (x @ w - y) / len(x) for x, y in zip(xs, ys)], axis=0)


# ----------------------------------------------------------------------------- identities
def test_sigma0_diff2_gd_equals_gd_telescoping():
    data, *_ = make_data()
    key = jax.random.key(1)
    R = 60
    gd = engine.run(diff2.nonprivate_gd(PROBLEM, R, output="last"), data, hp(), key, params=x0())
    for T in (1, 4, 7, 60):
        d2 = engine.run(diff2.Diff2GD(PROBLEM, R, output="last"), data,
                        hp(restart_interval=T, clip_restart=math.inf, clip_diff=math.inf), key, params=x0())
        np.testing.assert_allclose(d2.output, gd.output, rtol=0, atol=1e-12)
    # clipping radii above the per-record gradient norm / smoothness (spec §6.10):
    # C2 >= max ||a_i||^2 makes difference clipping inactive too.
    big = float(max(np.max(np.sum(np.asarray(data.x) ** 2, -1)), 1.0)) * 1.01
    d2 = engine.run(diff2.Diff2GD(PROBLEM, R, output="last"), data,
                    hp(restart_interval=5, clip_restart=1e6, clip_diff=big), key, params=x0())
    np.testing.assert_allclose(d2.output, gd.output, rtol=0, atol=1e-10)
    # and with a small C2 clipping is active, so the iterates differ
    d2c = engine.run(diff2.Diff2GD(PROBLEM, R, output="last"), data,
                     hp(restart_interval=5, clip_restart=1e6, clip_diff=0.05), key, params=x0())
    assert np.max(np.abs(d2c.output - gd.output)) > 1e-6


def test_sigma0_infinite_clip_t1_is_bit_identical_to_gd():
    data, *_ = make_data()
    key = jax.random.key(2)
    gd = engine.run(diff2.nonprivate_gd(PROBLEM, 30, output="last"), data, hp(), key, params=x0())
    d2 = engine.run(diff2.Diff2GD(PROBLEM, 30, output="last"), data,
                    hp(restart_interval=1, clip_restart=math.inf), key, params=x0())
    assert np.array_equal(d2.output, gd.output)


def test_t1_is_bit_identical_to_dpgd_with_noise_and_clipping():
    data, *_ = make_data()
    key = jax.random.key(3)
    h = hp(restart_interval=1, clip_restart=0.5, clip_diff=0.7, sigma_restart=0.3, sigma_diff=5.0)
    a = engine.run(diff2.Diff2GD(PROBLEM, 40, output="last"), data, h, key, params=x0())
    b = engine.run(diff2.dp_gd(PROBLEM, 40, output="last"), data, h, key, params=x0())
    assert np.array_equal(a.output, b.output)
    assert np.all(a.round_metrics["restart"])
    # and T = 2 does differ (sigma_diff is used)
    c = engine.run(diff2.Diff2GD(PROBLEM, 40, output="last"), data,
                   hp(restart_interval=2, clip_restart=0.5, clip_diff=0.7, sigma_restart=0.3, sigma_diff=5.0),
                   key, params=x0())
    assert not np.array_equal(a.output, c.output)


def test_restart_schedule_and_count():
    data, *_ = make_data()
    for R, T in ((20, 1), (20, 3), (20, 6), (20, 20), (20, 50)):
        res = engine.run(diff2.Diff2GD(PROBLEM, R), data, hp(restart_interval=T, sigma_restart=0.1, sigma_diff=0.1),
                         jax.random.key(0), params=x0())
        restarts = np.flatnonzero(res.round_metrics["restart"]) + 1  # 1-based rounds
        np.testing.assert_array_equal(restarts, np.arange(1, R + 1, T))
        assert len(restarts) == -(-R // T)


@pytest.mark.parametrize("completed", [0, 4, 8])
def test_estimate_reset_at_every_restart_including_first(completed):
    """T = 4: rounds 1, 5, 9 are restarts; a garbage v~_{r-1} must not matter."""
    data, *_ = make_data()
    alg = diff2.Diff2GD(PROBLEM, 12)
    key = jax.random.key(5)
    state = alg.init(x0(), hp(restart_interval=4, clip_restart=0.8, clip_diff=0.9, sigma_restart=0.2, sigma_diff=0.3),
                     data, key)
    for r in range(completed):
        state, _ = alg.step(state, data, keys.round_key(key, r))
    garbage = state.__class__(state.params, state.prev_params, state.estimate + 1e3, state.round,
                              state.output_round, state.output, state.hparams)
    rk = keys.round_key(key, completed)
    s1, m1 = alg.step(state, data, rk)
    s2, m2 = alg.step(garbage, data, rk)
    assert bool(m1["restart"])
    assert np.array_equal(s1.params, s2.params) and np.array_equal(s1.estimate, s2.estimate)
    # in a difference round the accumulator does carry over
    s3, _ = alg.step(s1, data, keys.round_key(key, completed + 1))
    bumped = s1.__class__(s1.params, s1.prev_params, s1.estimate + 1.0, s1.round, s1.output_round, s1.output, s1.hparams)
    s4, m4 = alg.step(bumped, data, keys.round_key(key, completed + 1))
    assert not bool(m4["restart"])
    np.testing.assert_allclose(np.asarray(s4.estimate) - np.asarray(s3.estimate), 1.0, atol=1e-12)


def test_restart_estimator_formula_and_noise_scaling():
    """Spec §6.5/§6.8: restart v~ = mean_p ClippedMean(grads, C1) + sigma1 C1 z;
    difference v~ = v~_{r-1} + mean_p ClippedMean(diffs, C2||dx||) + sigma2 C2 ||dx|| z."""
    data, xs, ys = make_data(sizes=(7, 3, 5))
    C1, C2, s1, s2 = 0.7, 0.4, 0.3, 0.6
    alg = diff2.Diff2GD(PROBLEM, 10)
    key = jax.random.key(6)
    h = hp(restart_interval=3, clip_restart=C1, clip_diff=C2, sigma_restart=s1, sigma_diff=s2)
    state = alg.init(x0(), h, data, key)

    def clip_rows(g, c):
        n = np.linalg.norm(g, axis=1, keepdims=True)
        return g * np.minimum(1.0, c / np.maximum(n, 1e-30))

    for r in range(6):
        rk = keys.round_key(key, r)
        new, m = alg.step(state, data, rk)
        z = np.asarray(noise.gaussian_like(keys.stream_key(rk, "server_noise"), state.params, 1.0))
        w, wp = np.asarray(state.params), np.asarray(state.prev_params)
        if r % 3 == 0:
            msgs = [clip_rows(x * (x @ w - y)[:, None], C1).mean(0) for x, y in zip(xs, ys)]
            expect = np.mean(msgs, 0) + s1 * C1 * z
            assert float(m["noise_std"]) == pytest.approx(s1 * C1, rel=1e-12)
        else:
            rad = C2 * np.linalg.norm(w - wp)
            msgs = [clip_rows(x * (x @ w - y)[:, None] - x * (x @ wp - y)[:, None], rad).mean(0) for x, y in zip(xs, ys)]
            expect = np.asarray(state.estimate) + np.mean(msgs, 0) + s2 * rad * z
            assert float(m["noise_std"]) == pytest.approx(s2 * rad, rel=1e-12)
        np.testing.assert_allclose(new.estimate, expect, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(new.params, w - 0.05 * expect, rtol=1e-10, atol=1e-12)
        state = new


def test_accumulated_error_identity_E1():
    """Clipping inactive: v~_r - grad f(x_{r-1}) = sum of noise since the last restart."""
    data, xs, ys = make_data()
    alg = diff2.Diff2GD(PROBLEM, 9)
    key = jax.random.key(7)
    L = max(float(np.max(np.sum(x**2, 1))) for x in xs) * 1.01  # C2 >= smoothness: no clipping
    state = alg.init(x0(), hp(restart_interval=4, clip_restart=1e3, clip_diff=L,
                              sigma_restart=1e-4, sigma_diff=0.02), data, key)
    acc = 0.0
    for r in range(9):
        rk = keys.round_key(key, r)
        new, m = alg.step(state, data, rk)
        z = np.asarray(noise.gaussian_like(keys.stream_key(rk, "server_noise"), state.params, 1.0))
        acc = (0.0 if bool(m["restart"]) else acc) + float(m["noise_std"]) * z
        np.testing.assert_allclose(np.asarray(new.estimate) - full_grad(state.params, xs, ys), acc, atol=1e-10)
        state = new


def test_zero_displacement_gives_exact_carry_and_no_nan():
    data, *_ = make_data()
    alg = diff2.Diff2GD(PROBLEM, 5)
    h = hp(restart_interval=5, clip_restart=1.0, clip_diff=1.0, sigma_restart=0.5, sigma_diff=0.5)
    state = alg.init(x0(), h, data, jax.random.key(0))
    state = state.__class__(state.params, state.params, jnp.asarray([1.0, 2.0, 3.0]), jnp.asarray(1, jnp.int32),
                            state.output_round, state.output, h)
    new, m = alg.step(state, data, keys.round_key(jax.random.key(0), 1))
    assert not bool(m["restart"]) and float(m["clip_radius"]) == 0.0 and float(m["noise_std"]) == 0.0
    np.testing.assert_array_equal(new.estimate, [1.0, 2.0, 3.0])


def test_silo_average_of_local_means_with_padding():
    """f = (1/P) sum_p f_p with unequal n_p: the ClippedMean divides by the true n_p."""
    data, xs, ys = make_data(sizes=(9, 2, 4))
    v = diff2.server_estimate(PROBLEM, x0(), x0(), jnp.zeros(DIM), data, True, jnp.inf, 1.0)
    np.testing.assert_allclose(v, full_grad(x0(), xs, ys), rtol=1e-12)


# ----------------------------------------------------------------------------- sensitivity
def _replace(data: SiloData, silo: int, row: int, x_new, y_new) -> SiloData:
    return SiloData(data.x.at[silo, row].set(x_new), data.y.at[silo, row].set(y_new), data.mask, data.sizes)


@pytest.mark.parametrize("restart", [True, False])
def test_difference_sensitivity_bound_holds_per_sample(restart):
    """Spec §6.9: replacing one record of silo p moves v_r by <= 2C/(n_p P), C = C1 or C2||dx||;
    adversarial records come close to the bound."""
    sizes = (6, 4, 5)
    data, *_ = make_data(sizes=sizes, scale=3.0)
    C1, C2 = 0.5, 0.8
    w = jnp.asarray([0.4, -0.1, 0.2])
    wp = jnp.asarray([0.1, 0.3, -0.2])
    vprev = jnp.asarray([0.5, 0.5, -1.0])
    P = len(sizes)
    C = C1 if restart else C2 * float(jnp.linalg.norm(w - wp))
    f = jax.jit(lambda d: diff2.server_estimate(PROBLEM, w, wp, vprev, d, restart, C1, C2))
    base = np.asarray(f(data))
    rng = np.random.default_rng(1)
    worst = 0.0
    for trial in range(40):
        p = trial % P
        i = int(rng.integers(sizes[p]))
        xn = rng.normal(size=DIM) * rng.choice([0.1, 1.0, 30.0])
        yn = rng.normal() * 30
        delta = np.linalg.norm(np.asarray(f(_replace(data, p, i, xn, yn))) - base)
        bound = 2 * C / (sizes[p] * P)
        assert delta <= bound * (1 + 1e-9)
        worst = max(worst, delta / bound)
    # adversarial pair on the smallest silo: two large records whose clipped
    # contributions point in opposite directions
    p = 1
    d = np.asarray(w - wp) / np.linalg.norm(w - wp)
    u = np.cross(d, [1.0, 0.0, 0.0]); u /= np.linalg.norm(u)
    if restart:
        a1, y1, a2, y2 = 100 * u, -1e4, 100 * u, 1e4
    else:
        a1, y1, a2, y2 = d + 100 * u, 0.0, d - 100 * u, 0.0
    d1 = _replace(data, p, 0, a1, y1)
    d2 = _replace(data, p, 0, a2, y2)
    delta = np.linalg.norm(np.asarray(f(d1)) - np.asarray(f(d2)))
    bound = 2 * C / (sizes[p] * P)
    assert delta <= bound * (1 + 1e-9)
    assert delta >= 0.98 * bound


def test_smoothness_means_no_difference_clipping():
    """Spec §6.10: least squares per-record difference = a a^T (x - x'), norm <= ||a||^2 ||x - x'||."""
    data, xs, ys = make_data()
    w, wp = x0(), x0() + 0.1
    L = max(float(np.max(np.sum(x**2, 1))) for x in xs)
    msgs_clip = diff2.silo_messages(PROBLEM, w, wp, data, False, 1.0, L)
    msgs_free = diff2.silo_messages(PROBLEM, w, wp, data, False, 1.0, jnp.inf)
    np.testing.assert_allclose(msgs_clip, msgs_free, rtol=1e-12)
    msgs_small = diff2.silo_messages(PROBLEM, w, wp, data, False, 1.0, 0.1 * L)
    assert np.max(np.abs(np.asarray(msgs_small) - np.asarray(msgs_free))) > 1e-6


# ----------------------------------------------------------------------------- output rule & stats
def test_random_iterate_output_rule():
    data, *_ = make_data()
    R = 8
    alg = diff2.Diff2GD(PROBLEM, R, output="random")
    h = hp(restart_interval=3, clip_restart=1.0, clip_diff=1.0, sigma_restart=0.1, sigma_diff=0.1)
    # r^ is uniform on 1..R (chi-square)
    ks = jax.random.split(jax.random.key(11), 4000)
    rh = np.asarray(jax.vmap(lambda k: alg.init(x0(), h, data, k).output_round)(ks))
    counts = np.bincount(rh, minlength=R + 2)
    assert counts[0] == 0 and counts[R + 1] == 0
    assert stats.chisquare(counts[1:R + 1]).pvalue > 1e-3
    # the returned point is x_{r^-1}, never x_R
    key = ks[0]
    traj, _ = run_traj(alg, data, h, key)
    r_hat = int(traj[-1].output_round)
    iterates = [np.asarray(x0())] + [np.asarray(s.params) for s in traj]  # x_0..x_R
    np.testing.assert_array_equal(alg.output_params(traj[-1]), iterates[r_hat - 1])
    last = diff2.Diff2GD(PROBLEM, R, output="last")
    np.testing.assert_array_equal(last.output_params(traj[-1]), iterates[R])


def test_noise_second_moment():
    """Spec §6.25: E||xi||^2 = sigma^2 C^2 d (10^4 draws, 5%)."""
    data, *_ = make_data()
    alg = diff2.dp_gd(PROBLEM, 1)
    sig, C = 0.7, 1.3
    h = hp(clip_restart=C, sigma_restart=sig)
    state = alg.init(x0(), h, data, jax.random.key(0))
    clean = diff2.server_estimate(PROBLEM, x0(), x0(), jnp.zeros(DIM), data, True, C, 1.0)
    ks = jax.random.split(jax.random.key(12), 10000)
    est = jax.vmap(lambda k: alg.step(state, data, k)[0].estimate)(ks)
    sq = np.sum((np.asarray(est) - np.asarray(clean)) ** 2, axis=1)
    expect = sig**2 * C**2 * DIM
    # relative sd of the mean of a chi^2_d/d average is sqrt(2/(d*1e4)) ~ 0.8%: 5% is > 6 sd
    assert abs(sq.mean() / expect - 1) < 0.05


def test_run_many_vmaps_over_restart_interval():
    data, *_ = make_data()
    alg = diff2.Diff2GD(PROBLEM, 12, output="last")
    Ts = [1, 2, 5]
    hs = engine.stack_hparams([hp(restart_interval=T, clip_restart=0.5, clip_diff=0.5, sigma_restart=0.1, sigma_diff=0.2)
                               for T in Ts])
    key = jax.random.key(4)
    many = engine.run_many(alg, data, hs, jnp.stack([key] * 3), params=x0())
    for i, T in enumerate(Ts):
        one = engine.run(alg, data, hp(restart_interval=T, clip_restart=0.5, clip_diff=0.5, sigma_restart=0.1,
                                       sigma_diff=0.2), key, params=x0())
        np.testing.assert_allclose(many.output[i], one.output, rtol=1e-12, atol=1e-14)
        assert many.round_metrics["restart"][i].sum() == -(-12 // T)


# ----------------------------------------------------------------------------- BVR
def test_bvr_k1_t1_no_noise_equals_gd():
    data, *_ = make_data()
    key = jax.random.key(8)
    gd = engine.run(diff2.nonprivate_gd(PROBLEM, 15, output="last"), data, hp(), key, params=x0())
    bvr = engine.run(diff2.Diff2BvrLSgd(PROBLEM, 15, local_steps=1, batch_size=2, output="last"), data,
                     hp(restart_interval=1, clip_restart=math.inf, clip_diff=math.inf, clip_local=math.inf),
                     key, params=x0())
    np.testing.assert_allclose(bvr.output, gd.output, atol=1e-12)


def test_bvr_full_local_batch_single_client_is_gd_with_k_steps():
    data, *_ = make_data(sizes=(6,))
    key = jax.random.key(9)
    R, K = 6, 4
    gd = engine.run(diff2.nonprivate_gd(PROBLEM, R * K, output="last"), data, hp(), key, params=x0())
    bvr = engine.run(diff2.Diff2BvrLSgd(PROBLEM, R, local_steps=K, batch_size=6, private=False, output="last"),
                     data, hp(restart_interval=3), key, params=x0())
    np.testing.assert_allclose(bvr.output, gd.output, atol=1e-10)


def test_bvr_client_schedule_and_locality():
    """Spec §6.12: p_r = r mod P (0-indexed); only that client's data enters the local steps."""
    data, *_ = make_data(sizes=(5, 5, 5))
    alg = diff2.Diff2BvrLSgd(PROBLEM, 6, local_steps=3, batch_size=2)
    h = hp(restart_interval=2, clip_restart=1.0, clip_diff=1.0, clip_local=1.0,
           sigma_restart=0.1, sigma_diff=0.1, sigma_local=0.1)
    traj, mets = run_traj(alg, data, h, jax.random.key(1))
    assert [int(m["local_client"]) for m in mets] == [1, 2, 0, 1, 2, 0]
    # A difference round with x_{r-1} = x_{r-2}: C_{2,r} = 0, so v~_r = v~_{r-1} whatever the data;
    # then only client p_r's data can move the local steps.
    key = jax.random.key(1)
    state = alg.init(x0(), h, data, key)
    state = state.__class__(state.params, state.params, jnp.asarray([0.2, -0.1, 0.3]), jnp.asarray(1, jnp.int32),
                            state.output_round, state.output, h)  # next round r = 2: p_r = 2, not a restart
    rk = keys.round_key(key, 1)
    s_a, m_a = alg.step(state, data, rk)
    assert int(m_a["local_client"]) == 2 and not bool(m_a["restart"])
    for silo in (0, 1):
        s_b, _ = alg.step(state, _replace(data, silo, 0, np.ones(DIM) * 5, 3.0), rk)
        assert np.array_equal(s_a.params, s_b.params)
    changed = SiloData(data.x.at[2].multiply(3.0), data.y, data.mask, data.sizes)
    s_c, _ = alg.step(state, changed, rk)
    assert not np.array_equal(s_a.params, s_c.params)


def test_bvr_minibatch_difference_unbiased():
    """Spec §6.27: the local minibatch difference is unbiased for the local full difference."""
    data, xs, ys = make_data(sizes=(12,))
    w, wp = x0(), x0() + jnp.asarray([0.05, -0.1, 0.02])
    from dpjax.primitives.sampling import sample_without_replacement

    def one(k):
        idx = sample_without_replacement(k, 12, 12, 4)
        xb, yb = data.x[0][idx], data.y[0][idx]
        g = clipping.per_example_grads(PROBLEM.loss, w, xb, yb) - clipping.per_example_grads(PROBLEM.loss, wp, xb, yb)
        return g.mean(0)

    est = np.asarray(jax.vmap(one)(jax.random.split(jax.random.key(3), 20000)))
    full = full_grad(w, xs, ys) - full_grad(wp, xs, ys)
    se = est.std(0) / np.sqrt(len(est))
    assert np.all(np.abs(est.mean(0) - full) < 5 * se + 1e-12)
    L = float(np.max(np.sum(xs[0] ** 2, 1)))
    assert np.sum(est.var(0)) <= L**2 / 4 * float(jnp.sum((w - wp) ** 2))


# ----------------------------------------------------------------------------- validation
def test_bad_arguments_raise_value_error_naming_them():
    with pytest.raises(ValueError, match="num_rounds"):
        diff2.Diff2GD(PROBLEM, 0)
    with pytest.raises(ValueError, match="output"):
        diff2.Diff2GD(PROBLEM, 3, output="best")
    with pytest.raises(ValueError, match="restart_interval"):
        hp(restart_interval=0)
    with pytest.raises(ValueError, match="sigma_diff"):
        hp(sigma_diff=-1.0)
    with pytest.raises(ValueError, match="learning_rate"):
        hp(learning_rate=0.0)
    with pytest.raises(ValueError, match="local_steps"):
        diff2.Diff2BvrLSgd(PROBLEM, 3, local_steps=0, batch_size=1)
    data, *_ = make_data(sizes=(3, 2))
    with pytest.raises(ValueError, match="batch_size"):
        diff2.Diff2BvrLSgd(PROBLEM, 3, local_steps=2, batch_size=3).validate(data)
    with pytest.raises(ValueError, match="non-private"):
        diff2.nonprivate_gd(PROBLEM, 3).privacy([10, 10], hp()).calibrate(1.0, 1e-5)


def test_gradient_cache_gives_the_same_run():
    data, *_ = make_data()
    key = jax.random.key(13)
    h = hp(restart_interval=4, clip_restart=0.6, clip_diff=0.8, sigma_restart=0.2, sigma_diff=0.4)
    a = engine.run(diff2.Diff2GD(PROBLEM, 25, output="last"), data, h, key, params=x0())
    b = engine.run(diff2.Diff2GD(PROBLEM, 25, output="last", cache_grads=True), data, h, key, params=x0())
    np.testing.assert_allclose(a.output, b.output, rtol=0, atol=1e-13)
    assert b.state.grad_cache is not None and a.state.grad_cache is None
