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
from dpjax.accounting import diff2 as acc
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


def run_traj(alg, data, hparams, key, rounds=None, step=None):
    """Manual loop returning the states after every round (x_1..x_R) and metrics.

    Per-round facts live in the parts' states: ``state.parts["privatizer"]`` (restart, noise std
    of the release), ``state.parts["clipper"]`` (the clip radius), ``state.parts["server"].estimate`` (v~_r)."""
    state = alg.init(x0(), hparams, data, key)
    step = step or jax.jit(alg.step)
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
Z1, Z2 = "noise_multiplier_restart", "noise_multiplier_diff"


def with_state(state, *, estimate=None, prev_params=None, round=None):
    """``state`` with the server's v~, the client's x_{r-2} and/or the round counter replaced."""
    import dataclasses

    parts = dict(state.parts)
    if estimate is not None:
        parts["server"] = dataclasses.replace(parts["server"], estimate=jnp.asarray(estimate))
    if prev_params is not None:
        parts["client"] = dataclasses.replace(parts["client"], prev_params=prev_params)
    r = state.round if round is None else jnp.asarray(round, jnp.int32)
    return dataclasses.replace(state, parts=parts, round=r)


def server_sensitivity(sizes, radius):
    """Replace-one sensitivity of the server's mean (Prop. 4.1): ``2 radius / (n_min P)``."""
    return 2.0 * radius / (min(sizes) * len(sizes))


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
    # the twin is the same compiled round with multipliers 0 and clips inf: so are private runs with those values
    d2z = engine.run(diff2.dp_gd(PROBLEM, 30, output="last"), data,
                     hp(clip_restart=math.inf, clip_diff=math.inf, clip_local=math.inf), key, params=x0())
    assert np.array_equal(d2z.output, gd.output)


def test_t1_is_bit_identical_to_dpgd_with_noise_and_clipping():
    data, *_ = make_data()
    key = jax.random.key(3)
    h = hp(restart_interval=1, clip_restart=0.5, clip_diff=0.7, **{Z1: 2.0, Z2: 30.0})
    a = engine.run(diff2.Diff2GD(PROBLEM, 40, output="last"), data, h, key, params=x0())
    b = engine.run(diff2.dp_gd(PROBLEM, 40, output="last"), data, h, key, params=x0())
    assert np.array_equal(a.output, b.output)
    assert bool(a.state.parts["privatizer"].restart) and a.state.parts["privatizer"].noise_std > 0
    # and T = 2 does differ (noise_multiplier_diff is used)
    c = engine.run(diff2.Diff2GD(PROBLEM, 40, output="last"), data,
                   hp(restart_interval=2, clip_restart=0.5, clip_diff=0.7, **{Z1: 2.0, Z2: 30.0}),
                   key, params=x0())
    assert not np.array_equal(a.output, c.output)


def test_restart_schedule_and_count():
    data, *_ = make_data()
    alg = diff2.Diff2GD(PROBLEM, 20)
    step = jax.jit(alg.step)  # T is traced: one program for every T
    for R, T in ((20, 1), (20, 3), (20, 6), (20, 20), (20, 50)):
        traj, _ = run_traj(alg, data, hp(restart_interval=T, **{Z1: 1.0, Z2: 1.0}), jax.random.key(0), R, step)
        restarts = np.flatnonzero([bool(s.parts["privatizer"].restart) for s in traj]) + 1  # 1-based rounds
        np.testing.assert_array_equal(restarts, np.arange(1, R + 1, T))
        assert len(restarts) == -(-R // T) == alg.restart_count(T)


@pytest.mark.parametrize("completed", [0, 4, 8])
def test_estimate_reset_at_every_restart_including_first(completed):
    """T = 4: rounds 1, 5, 9 are restarts; a garbage v~_{r-1} must not matter."""
    data, *_ = make_data()
    alg = diff2.Diff2GD(PROBLEM, 12)
    step = jax.jit(alg.step)
    key = jax.random.key(5)
    state = alg.init(x0(), hp(restart_interval=4, clip_restart=0.8, clip_diff=0.9, **{Z1: 1.0, Z2: 1.5}),
                     data, key)
    for r in range(completed):
        state, _ = step(state, data, keys.round_key(key, r))
    garbage = with_state(state, estimate=state.parts["server"].estimate + 1e3)
    rk = keys.round_key(key, completed)
    s1, _ = step(state, data, rk)
    s2, _ = step(garbage, data, rk)
    assert bool(s1.parts["privatizer"].restart)
    assert np.array_equal(s1.params, s2.params)
    assert np.array_equal(s1.parts["server"].estimate, s2.parts["server"].estimate)
    # in a difference round the accumulator does carry over
    s3, _ = step(s1, data, keys.round_key(key, completed + 1))
    s4, _ = step(with_state(s1, estimate=s1.parts["server"].estimate + 1.0), data, keys.round_key(key, completed + 1))
    assert not bool(s4.parts["privatizer"].restart)
    np.testing.assert_allclose(np.asarray(s4.parts["server"].estimate) - np.asarray(s3.parts["server"].estimate), 1.0,
                               atol=1e-12)


def test_restart_estimator_formula_and_noise_scaling():
    """Spec §6.5/§6.8: restart v~ = mean_p ClippedMean(grads, C1) + xi; difference
    v~ = v~_{r-1} + mean_p ClippedMean(diffs, C2||dx||) + xi; xi ~ N(0, std^2 I) with
    std = z x 2 radius/(n_min P) (the multiplier times the clipper's sensitivity)."""
    sizes = (7, 3, 5)
    data, xs, ys = make_data(sizes=sizes)
    C1, C2, z1, z2 = 0.7, 0.4, 2.0, 4.0
    alg = diff2.Diff2GD(PROBLEM, 10)
    key = jax.random.key(6)
    h = hp(restart_interval=3, clip_restart=C1, clip_diff=C2, **{Z1: z1, Z2: z2})
    state = alg.init(x0(), h, data, key)
    step = jax.jit(alg.step)

    def clip_rows(g, c):
        n = np.linalg.norm(g, axis=1, keepdims=True)
        return g * np.minimum(1.0, c / np.maximum(n, 1e-30))

    for r in range(6):
        rk = keys.round_key(key, r)
        new, _ = step(state, data, rk)
        z = np.asarray(noise.gaussian_like(keys.stream_key(rk, "server_noise"), state.params, 1.0))
        w, wp = np.asarray(state.params), np.asarray(state.parts["client"].prev_params)
        std = float(new.parts["privatizer"].noise_std)  # float32, as the privatizer computes it
        if r % 3 == 0:
            msgs = [clip_rows(x * (x @ w - y)[:, None], C1).mean(0) for x, y in zip(xs, ys)]
            expect = np.mean(msgs, 0) + std * z
            assert std == pytest.approx(z1 * server_sensitivity(sizes, C1), rel=1e-6)
            assert float(new.parts["clipper"]) == pytest.approx(C1, rel=1e-12)
        else:
            rad = C2 * np.linalg.norm(w - wp)
            msgs = [clip_rows(x * (x @ w - y)[:, None] - x * (x @ wp - y)[:, None], rad).mean(0) for x, y in zip(xs, ys)]
            expect = np.asarray(state.parts["server"].estimate) + np.mean(msgs, 0) + std * z
            assert std == pytest.approx(z2 * server_sensitivity(sizes, rad), rel=1e-6)
            assert float(new.parts["clipper"]) == pytest.approx(rad, rel=1e-12)
        np.testing.assert_allclose(new.parts["server"].estimate, expect, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(new.params, w - 0.05 * expect, rtol=1e-10, atol=1e-12)
        state = new


def test_accumulated_error_identity_E1():
    """Clipping inactive: v~_r - grad f(x_{r-1}) = sum of noise since the last restart."""
    data, xs, ys = make_data()
    alg = diff2.Diff2GD(PROBLEM, 9)
    key = jax.random.key(7)
    L = max(float(np.max(np.sum(x**2, 1))) for x in xs) * 1.01  # C2 >= smoothness: no clipping
    state = alg.init(x0(), hp(restart_interval=4, clip_restart=1e3, clip_diff=L, **{Z1: 0.5, Z2: 0.3}), data, key)
    acc_noise, step = 0.0, jax.jit(alg.step)
    for r in range(9):
        rk = keys.round_key(key, r)
        new, _ = step(state, data, rk)
        z = np.asarray(noise.gaussian_like(keys.stream_key(rk, "server_noise"), state.params, 1.0))
        release = new.parts["privatizer"]
        acc_noise = (0.0 if bool(release.restart) else acc_noise) + float(release.noise_std) * z
        estimate = np.asarray(new.parts["server"].estimate)
        np.testing.assert_allclose(estimate - full_grad(state.params, xs, ys), acc_noise,
                                   atol=1e-10)
        state = new


def test_zero_displacement_gives_exact_carry_and_no_nan():
    data, *_ = make_data()
    alg = diff2.Diff2GD(PROBLEM, 5)
    h = hp(restart_interval=5, clip_restart=1.0, clip_diff=1.0, **{Z1: 2.0, Z2: 2.0})
    state = alg.init(x0(), h, data, jax.random.key(0))
    state = with_state(state, estimate=[1.0, 2.0, 3.0], prev_params=state.params, round=1)
    new, _ = jax.jit(alg.step)(state, data, keys.round_key(jax.random.key(0), 1))  # compiled, as the engine runs it
    release = new.parts["privatizer"]
    assert not bool(release.restart) and float(new.parts["clipper"]) == 0.0 and float(release.noise_std) == 0.0
    np.testing.assert_array_equal(new.parts["server"].estimate, [1.0, 2.0, 3.0])


def test_silo_average_of_local_means_with_padding():
    """f = (1/P) sum_p f_p with unequal n_p: the ClippedMean divides by the true n_p."""
    data, xs, ys = make_data(sizes=(9, 2, 4))
    v = jax.jit(lambda w: jnp.mean(diff2.silo_messages(PROBLEM, w, w, data, True, jnp.inf, 1.0), 0))(x0())  # compiled
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
    # v_r = mean_p d_r^(p) + [not restart] v~_{r-1} (the estimator before the noise)
    f = jax.jit(lambda d: jnp.mean(diff2.silo_messages(PROBLEM, w, wp, d, restart, C1, C2), 0)
                + (0.0 if restart else vprev))
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
    # the family's parts state that bound at the smallest silo: what the noise is scaled by
    assert diff2.Diff2GD(PROBLEM, 2).message_sensitivity(sizes, C) == pytest.approx(
        server_sensitivity(sizes, C), rel=1e-6)


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
    h = hp(restart_interval=3, clip_restart=1.0, clip_diff=1.0, **{Z1: 1.0, Z2: 1.0})
    # r^ is uniform on 1..R (chi-square)
    ks = jax.random.split(jax.random.key(11), 4000)
    rh = np.asarray(jax.vmap(lambda k: alg.init(x0(), h, data, k).parts["averager"].output_round)(ks))
    counts = np.bincount(rh, minlength=R + 2)
    assert counts[0] == 0 and counts[R + 1] == 0
    assert stats.chisquare(counts[1:R + 1]).pvalue > 1e-3
    # the returned point is x_{r^-1}, never x_R
    key = ks[0]
    traj, _ = run_traj(alg, data, h, key)
    r_hat = int(traj[-1].parts["averager"].output_round)
    iterates = [np.asarray(x0())] + [np.asarray(s.params) for s in traj]  # x_0..x_R
    np.testing.assert_array_equal(alg.output_params(traj[-1]), iterates[r_hat - 1])
    last = diff2.Diff2GD(PROBLEM, R, output="last")
    np.testing.assert_array_equal(last.output_params(traj[-1]), iterates[R])


def _noise_second_moment(alg, state, data, clean, n_draws=10000):
    """Mean of ||v~_r - clean||^2 over ``n_draws`` round keys (the noise of one release)."""
    ks = jax.random.split(jax.random.key(12), n_draws)
    est = jax.jit(jax.vmap(lambda k: alg.step(state, data, k)[0].parts["server"].estimate))(ks)
    return float(np.mean(np.sum((np.asarray(est) - np.asarray(clean)) ** 2, axis=1)))


@pytest.mark.parametrize("restart", [True, False])
def test_measured_noise_std_is_multiplier_times_sensitivity(restart):
    """Spec §6.25 with multipliers: the noise of a round has E||xi||^2 = std^2 d with
    std = z x 2 radius/(n_min P) (unequal silos: n_min = 5), radius C1 (restart) or C2 ||dx||."""
    sizes = (7, 5, 6)
    data, *_ = make_data(sizes=sizes)
    z1, z2, C1, C2 = 3.0, 5.0, 1.3, 0.6
    alg = diff2.Diff2GD(PROBLEM, 4)
    h = hp(restart_interval=2, clip_restart=C1, clip_diff=C2, **{Z1: z1, Z2: z2})
    state = alg.init(x0(), h, data, jax.random.key(0))
    if not restart:  # one round in: round 2 (T = 2) is a difference round
        state, _ = jax.jit(alg.step)(state, data, keys.round_key(jax.random.key(0), 0))
    w, wp = state.params, state.parts["client"].prev_params
    clean = jnp.mean(diff2.silo_messages(PROBLEM, w, wp, data, restart, C1, C2), 0)
    if not restart:
        clean = clean + state.parts["server"].estimate
    radius = C1 if restart else C2 * float(jnp.linalg.norm(w - wp))
    std = (z1 if restart else z2) * server_sensitivity(sizes, radius)
    # relative sd of the mean of a chi^2_d/d average is sqrt(2/(d*1e4)) ~ 0.8%: 5% is > 6 sd
    assert abs(_noise_second_moment(alg, state, data, clean) / (std**2 * DIM) - 1) < 0.05


def test_run_many_vmaps_over_restart_interval():
    data, *_ = make_data()
    alg = diff2.Diff2GD(PROBLEM, 12, output="last")
    Ts = [1, 2, 5]
    hs = engine.stack_hparams([hp(restart_interval=T, clip_restart=0.5, clip_diff=0.5, **{Z1: 1.0, Z2: 2.0})
                               for T in Ts])
    key = jax.random.key(4)
    many = engine.run_many(alg, data, hs, jnp.stack([key] * 3), params=x0())
    for i, T in enumerate(Ts):
        one = engine.run(alg, data, hp(restart_interval=T, clip_restart=0.5, clip_diff=0.5, **{Z1: 1.0, Z2: 2.0}),
                         key, params=x0())
        np.testing.assert_allclose(many.output[i], one.output, rtol=1e-12, atol=1e-14)
        # round 12 restarts iff 11 mod T == 0
        assert bool(many.state.parts["privatizer"].restart[i]) == diff2.is_restart_round(12, T)


# ----------------------------------------------------------------------------- privacy
def test_privacy_is_the_hand_computed_composition():
    """R = 12, T = 5 (m = 3 restart and 9 difference releases), unequal silos (40, 25, 33),
    C1 = 2.5, C2 = 0.3: every round is a Gaussian release of multiplier z whatever the radius,
    so the run is mu-GDP with mu^2 = m/z1^2 + (R-m)/z2^2 and has RDP alpha (m/(2 z1^2) + (R-m)/(2 z2^2));
    the paper's sigma_i (std / radius, Prop. 4.1) is z_i 2/(n_min P)."""
    from scipy import optimize

    sizes, R, T, z1, z2, delta = (40, 25, 33), 12, 5, 1.5, 2.5, 1e-5
    m, n_min, P = 3, 25, 3
    alg = diff2.Diff2GD(PROBLEM, R)
    h = hp(restart_interval=T, clip_restart=2.5, clip_diff=0.3, **{Z1: z1, Z2: z2})
    spec = alg.privacy(sizes, h)
    assert spec.noise_fields == (Z1, Z2) and [s.steps for s in spec.schedules] == [m, R - m]
    assert {s.dataset_size for s in spec.schedules} == {n_min} and spec.unit == "record"
    mu = math.sqrt(m / z1**2 + (R - m) / z2**2)
    gdp = optimize.brentq(lambda e: stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2)
                          - delta, 0.0, 100.0, xtol=1e-14)
    assert spec.epsilon(delta, "gdp").epsilon == pytest.approx(gdp, rel=1e-6)
    rho = m / (2 * z1**2) + (R - m) / (2 * z2**2)
    orders = [1.5, 2.0, 3.0, 5.0, 8.0, 12.0, 20.0, 64.0]
    mironov = min(a * rho + math.log(1 / delta) / (a - 1) for a in orders)
    assert acc.compose_epsilon(spec.schedules, delta, orders=orders) == pytest.approx(mironov, rel=1e-12)
    # the paper's parametrisation: same RDP at sigma_i = z_i 2/(n_min P), and back through the family's helper
    s1, s2 = z1 * 2 / (n_min * P), z2 * 2 / (n_min * P)
    assert acc.diff2_rdp(8.0, R, T, n_min, P, s1, s2) == pytest.approx(8.0 * rho, rel=1e-12)
    back = alg.noise_multipliers_from_paper(sizes, sigma_restart=s1, sigma_diff=s2)
    assert back == pytest.approx({Z1: z1, Z2: z2}, rel=1e-6)  # float32 sensitivity
    # calibration scales both multipliers by one factor
    values = spec.calibrate(2.0, delta)
    assert values[Z2] / values[Z1] == pytest.approx(z2 / z1, rel=1e-12)


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


def test_bvr_local_steps_are_parts_of_the_chain_and_silo_blocks_are_refused():
    """BVR's round is the generic fold (no step of its own): its server runs the local steps as an inner
    chain, whose parts the accountant reads; DIFF2 refuses silo blocks from its declaration."""
    from dpjax.engine.chain import ChainFamily, DataShape

    alg = diff2.Diff2BvrLSgd(PROBLEM, 4, local_steps=3, batch_size=2)
    assert "step" not in type(alg).__dict__ and type(alg).step is ChainFamily.step
    p = alg.parts(DataShape(3, 5))
    server = p.role("server")
    assert [type(q).__name__ for q in server.inner] == ["RadiusClipper", "SiloMean", "SarahRecursion", "StepNoise"]
    batches, clipper, mean, noise_part = alg.local_parts()
    assert batches == server.batches and clipper.restart_field is None and clipper.difference_field == "clip_local"
    assert (clipper, mean, noise_part) == (server.inner[0], server.inner[1], server.inner[3])
    assert p.role("clipper").restart_field == "clip_restart"  # the estimator's clipper leads the chain
    data, *_ = make_data()
    for family in (alg, diff2.Diff2GD(PROBLEM, 4)):
        assert not family.supports_silo_blocks
        with pytest.raises(ValueError, match="silo_block: .*x_{r-2} is one iterate shared by every silo"):
            engine.run(family, data, hp(), jax.random.key(0), params=x0(), silo_block=1)


def test_bvr_client_schedule_and_locality():
    """Spec §6.12: p_r = r mod P (0-indexed); only that client's data enters the local steps."""
    data, *_ = make_data(sizes=(5, 5, 5))
    alg = diff2.Diff2BvrLSgd(PROBLEM, 6, local_steps=3, batch_size=2)
    h = hp(restart_interval=2, clip_restart=1.0, clip_diff=1.0, clip_local=1.0,
           **{Z1: 1.0, Z2: 1.0, "noise_multiplier_local": 0.1})
    step = jax.jit(alg.step)
    traj, mets = run_traj(alg, data, h, jax.random.key(1), step=step)
    assert [int(m["local_client"]) for m in mets] == [1, 2, 0, 1, 2, 0]
    # A difference round with x_{r-1} = x_{r-2}: C_{2,r} = 0, so v~_r = v~_{r-1} whatever the data;
    # then only client p_r's data can move the local steps.
    key = jax.random.key(1)
    state = alg.init(x0(), h, data, key)
    state = with_state(state, estimate=[0.2, -0.1, 0.3], prev_params=state.params, round=1)  # r = 2: p_r = 2
    rk = keys.round_key(key, 1)
    s_a, m_a = step(state, data, rk)
    assert int(m_a["local_client"]) == 2 and not bool(m_a["restart"])
    for silo in (0, 1):
        s_b, _ = step(state, _replace(data, silo, 0, np.ones(DIM) * 5, 3.0), rk)
        assert np.array_equal(s_a.params, s_b.params)
    changed = SiloData(data.x.at[2].multiply(3.0), data.y, data.mask, data.sizes)
    s_c, _ = step(state, changed, rk)
    assert not np.array_equal(s_a.params, s_c.params)


def test_bvr_local_noise_is_multiplier_times_local_sensitivity():
    """A local step's noise std is z3 x 2 C3 ||x_{k-1} - x_{k-2}|| / b. With x_{r-1} = x_{r-2} the
    server round adds no noise (radius 0) and with b = n the minibatch is the whole silo, so the
    spread of x_r over round keys is the one local step's noise, eta^2 std^2 per coordinate."""
    data, *_ = make_data(sizes=(6, 6))
    b, z3, C3, eta = 6, 4.0, 0.5, 0.05
    alg = diff2.Diff2BvrLSgd(PROBLEM, 3, local_steps=2, batch_size=b)
    h = hp(learning_rate=eta, restart_interval=5, clip_restart=1.0, clip_diff=1.0, clip_local=C3,
           noise_multiplier_local=z3, **{Z1: 1.0, Z2: 1.0})
    state = alg.init(x0(), h, data, jax.random.key(0))
    v = jnp.asarray([0.2, -0.1, 0.3])
    state = with_state(state, estimate=v, prev_params=state.params, round=1)
    radius = C3 * eta * float(jnp.linalg.norm(v))  # x_1 = x_0 - eta v: the local step's displacement
    std = z3 * 2 * radius / b
    assert alg.local_sensitivity(radius) == pytest.approx(2 * radius / b, rel=1e-6)
    xs = np.asarray(jax.jit(jax.vmap(lambda k: alg.step(state, data, k)[0].params))(
        jax.random.split(jax.random.key(3), 10000)))
    spread = np.mean(np.sum((xs - xs.mean(0)) ** 2, axis=1)) / ((eta * std) ** 2 * DIM)
    # relative sd of a chi^2_3 mean over 1e4 draws ~ 0.8%: 5% is > 6 sd
    assert abs(spread - 1) < 0.05


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
    with pytest.raises(ValueError, match="noise_multiplier_diff"):
        hp(noise_multiplier_diff=-1.0)
    with pytest.raises(ValueError, match="learning_rate"):
        hp(learning_rate=0.0)
    with pytest.raises(ValueError, match="local_steps"):
        diff2.Diff2BvrLSgd(PROBLEM, 3, local_steps=0, batch_size=1)
    data, *_ = make_data(sizes=(3, 2))
    with pytest.raises(ValueError, match="batch_size"):
        diff2.Diff2BvrLSgd(PROBLEM, 3, local_steps=2, batch_size=3).validate(data)
    with pytest.raises(ValueError, match="non-private"):
        diff2.nonprivate_gd(PROBLEM, 3).privacy([10, 10], hp()).calibrate(1.0, 1e-5)
    with pytest.raises(ValueError, match="sigma_local"):
        diff2.Diff2GD(PROBLEM, 3).noise_multipliers_from_paper([10, 10], sigma_local=1.0)
    with pytest.raises(ValueError, match="sigma_typo"):
        diff2.Diff2GD(PROBLEM, 3).noise_multipliers_from_paper([10, 10], sigma_typo=1.0)


def test_gradient_cache_gives_the_same_run():
    data, *_ = make_data()
    key = jax.random.key(13)
    h = hp(restart_interval=4, clip_restart=0.6, clip_diff=0.8, **{Z1: 1.0, Z2: 2.0})
    a = engine.run(diff2.Diff2GD(PROBLEM, 25, output="last"), data, h, key, params=x0())
    b = engine.run(diff2.Diff2GD(PROBLEM, 25, output="last", cache_grads=True), data, h, key, params=x0())
    np.testing.assert_allclose(a.output, b.output, rtol=0, atol=1e-13)
    assert b.state.parts["client"].cache is not None and a.state.parts["client"].cache is None
