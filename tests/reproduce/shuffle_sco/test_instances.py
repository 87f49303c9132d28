"""The SCO instances set up for Table 1's non-smooth strongly convex row (Theorem 4.8 with smoothing) and
fully interactive convex row (Theorem 4.9), and the regimes that measure them."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, optimize

from dpjax.accounting import sco_transcript
from dpjax.accounting import shuffle_sco as sco
from dpjax.algorithms import shuffle_sco as S
from dpjax import engine
from dpjax.reproduce import shuffle_sco as R


@pytest.mark.parametrize("d", [2, 3, 8, 32])
def test_sphere_abs_mean_against_the_marginal_density(d):
    # a_1 of a uniform point on S^{d-1} has density proportional to (1 - t^2)^{(d-3)/2} on [-1, 1]
    if d == 2:
        expected = 2 / math.pi  # E|cos phi|
    else:
        w = lambda t: (1 - t * t) ** ((d - 3) / 2)  # noqa: E731
        expected = integrate.quad(lambda t: t * w(t), 0, 1)[0] / integrate.quad(w, 0, 1)[0]
    assert R.config.sphere_abs_mean(d) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("lam", [0.2, 2.0])  # minimiser theta* (lam r <= kappa) and the interior branch
def test_sc_nonsmooth_minimiser_against_a_brute_force_solve(lam):
    """d = 2: the population loss by quadrature over the circle (no rotation-invariance shortcut), minimised
    by Nelder-Mead from several starts."""
    inst = R.config.Instance("sc_nonsmooth", 1.0 + lam, None, lam)
    ts = inst.theta_star(2)

    def pop(theta):
        u = theta - ts
        f = integrate.quad(lambda p: abs(u[0] * math.cos(p) + u[1] * math.sin(p)), 0, 2 * math.pi, limit=200)[0]
        return f / (2 * math.pi) + 0.5 * lam * float(theta @ theta)

    best = min((optimize.minimize(pop, x0, method="Nelder-Mead", options=dict(xatol=1e-9, fatol=1e-12))
                for x0 in ([0.0, 0.0], [0.5, -0.3], [-0.2, 0.6])), key=lambda r: r.fun)
    theta_min, f_min = inst.sc_minimiser(2)
    assert f_min == pytest.approx(best.fun, abs=1e-8)
    np.testing.assert_allclose(theta_min, best.x, atol=1e-4)
    thetas = np.array([[0.0, 0.0], [0.3, -0.1], theta_min])
    np.testing.assert_allclose(inst.excess(thetas, 2, None), [pop(t) - best.fun for t in thetas], atol=1e-7)
    if lam == 0.2:
        np.testing.assert_allclose(theta_min, ts)


def test_sc_nonsmooth_excess_matches_monte_carlo_in_d8():
    inst = R.config.INSTANCES["sc_nonsmooth"]
    d, m = 8, 400_000
    rng = np.random.default_rng(3)
    a = R.config.sphere_points(rng, m, d)
    thetas = rng.normal(size=(3, d)) * 0.3
    _, f_min = inst.sc_minimiser(d)
    vals = np.abs((thetas - inst.theta_star(d)) @ a.T)  # [3, m]
    mc = vals.mean(1) + 0.5 * inst.lam * np.sum(thetas**2, 1) - f_min
    # 5 standard errors of the Monte-Carlo mean: fails with probability < 1e-6 per theta
    np.testing.assert_allclose(inst.excess(thetas, d, None), mc, atol=5 * vals.std(1).max() / math.sqrt(m))


def test_ridge_absolute_regression_strong_convexity_lipschitz_and_prox():
    lam = R.config.INSTANCES["sc_nonsmooth"].lam
    prob = R.config.INSTANCES["sc_nonsmooth"].problem(5)
    rng = np.random.default_rng(0)
    grad, loss, prox = jax.jit(jax.grad(prob.loss)), jax.jit(prob.loss), jax.jit(prob.prox)
    for _ in range(20):
        a = rng.normal(size=5)
        a /= np.linalg.norm(a)
        y, w, v = rng.normal(), rng.normal(size=5) * 0.4, rng.normal(size=5) * 0.4
        a, w, v = (jnp.asarray(z, jnp.float32) for z in (a, w, v))
        gap = loss(w, a, y) - loss(v, a, y) - jnp.dot(grad(v, a, y), w - v)
        q = 0.5 * lam * jnp.sum((w - v) ** 2)
        assert gap >= q - 1e-5  # lam-strongly convex
        if (jnp.dot(a, w) - y) * (jnp.dot(a, v) - y) > 0:  # same linear piece: exactly lam, not more
            assert gap == pytest.approx(float(q), abs=1e-5)
        assert jnp.linalg.norm(grad(w / jnp.maximum(1.0, jnp.linalg.norm(w)), a, y)) <= 1 + lam + 1e-6
        an, wn = np.asarray(a, np.float64), np.asarray(w, np.float64)
        loss64 = lambda z: abs(an @ z - y) + 0.5 * lam * z @ z  # noqa: E731
        assert float(loss(w, a, y)) == pytest.approx(loss64(wn), abs=1e-5)
        beta = float(rng.uniform(0.5, 20))
        # the prox objective is (lam + beta)-strongly convex: a minimum over the kink t = y (SLSQP with the
        # epigraph variable s >= |<a, z> - y|) is exact
        obj = lambda zs: zs[-1] + 0.5 * lam * zs[:-1] @ zs[:-1] + 0.5 * beta * np.sum((zs[:-1] - wn) ** 2)  # noqa
        cons = [{"type": "ineq", "fun": lambda zs, sg=sg: zs[-1] - sg * (an @ zs[:-1] - y)} for sg in (1, -1)]
        num = optimize.minimize(obj, np.append(wn, abs(an @ wn - y)), constraints=cons, method="SLSQP",
                                options=dict(ftol=1e-14, maxiter=500)).x[:-1]
        np.testing.assert_allclose(prox(w, a, y, beta), num, atol=1e-5)


def test_axis_instance_excess_and_counts():
    inst, d, n = R.config.INSTANCES["axis_nonsmooth"], 4, 500
    data = inst.sample(np.random.default_rng(9), n, d)
    x = np.asarray(data.x[0])
    np.testing.assert_array_equal(np.abs(x).sum(0), R.measure.axis_counts(np.random.default_rng(9), n, d))
    np.testing.assert_allclose(np.asarray(data.y[0]), x @ inst.theta_star(d), atol=1e-7)  # noiseless labels
    # the population loss is the mean over the 2d equally likely (axis, sign) types
    theta = np.array([0.3, -0.2, 0.1, 0.9])
    types = np.concatenate([np.eye(d), -np.eye(d)])
    exact = np.mean(np.abs(types @ (theta - inst.theta_star(d))))
    assert inst.excess(theta[None], d, None)[0] == pytest.approx(exact, rel=1e-12)


def test_pgd_axis_simulator_is_the_family_with_exact_sums():
    """The sufficient-statistics recursion against ShuffleSgd.p_gd's own program (aggregator 'exact': the
    noiseless twin) on the same data: same iterates up to float32 rounding of T = n = 300 steps."""
    inst, n, d = R.config.INSTANCES["axis_nonsmooth"], 300, 4
    fam, hp, plan = S.ShuffleSgd.p_gd(inst.problem(d), n, 4.0, 1e-6, lipschitz=1.0, aggregator="exact")
    (ph,) = plan.phases
    assert ph.rounds == n and ph.smoothing > 0
    data = inst.sample(np.random.default_rng(5), n, d)
    out = np.asarray(engine.run_many(fam, data, engine.stack_hparams([hp]), jax.random.split(jax.random.key(0), 1))
                     .output)
    sim = R.measure.pgd_axis_run(R.measure.axis_counts(np.random.default_rng(5), n, d), inst.theta_star(d), float(n), ph.step,
                         ph.smoothing, 1.0, np.zeros(1), jax.random.split(jax.random.key(0), 1), rounds=ph.rounds)
    np.testing.assert_allclose(np.asarray(sim), out, atol=1e-5)
    assert np.abs(out - inst.theta_star(d)).max() < 0.05  # and it does optimise


def test_pgd_axis_noise_enters_the_round_sum():
    """Two rounds by hand: theta_1 = Proj(theta_0 - eta (counts clip(beta (theta_0 - theta*)) + std z)/n) with
    z the round's N(0, I) draw, output (theta_0 + theta_1)/2; the twin (std 0) ignores its key."""
    inst, n, d = R.config.INSTANCES["axis_nonsmooth"], 400, 3
    plan = sco.p_gd_plan(n, d, 4.0, 1e-6, 1.0, 2.0, None)
    (ph,) = plan.phases
    std = sco_transcript.matched_noise_std(plan)[0]
    assert std > 0
    keys = jax.random.split(jax.random.key(1), 2)
    counts = R.measure.axis_counts(np.random.default_rng(0), n, d)
    ts = inst.theta_star(d)
    out = np.asarray(R.measure.pgd_axis_run(counts, ts, float(n), ph.step, ph.smoothing, 1.0, np.array([std, 0.0]),
                                    keys, rounds=2))
    z = np.asarray(jax.random.normal(jax.random.fold_in(keys[0], 0), (d,)), np.float64)
    for row, noise in ((out[0], std * z), (out[1], 0.0)):
        theta1 = -ph.step * (counts * np.clip(ph.smoothing * (0 - ts), -1, 1) + noise) / n
        theta1 *= min(1.0, 1.0 / np.linalg.norm(theta1))
        np.testing.assert_allclose(row, theta1 / 2, rtol=1e-5, atol=1e-7)


def test_regimes_configuration_is_valid():
    protocols = set()
    for protocol, eps, schedule, n_grid, d_grid, fit in R.config.REGIMES:
        protocols.add(protocol)
        assert protocol in R.config.TABLE1 and eps > 0 and schedule in ("lan", "paper") and fit in ("bound", "measured")
        assert list(n_grid) == sorted(set(n_grid)) and math.log10(n_grid[-1] / n_grid[0]) >= 1
        inst = R.config.INSTANCES[R.config.TABLE1[protocol][0]]
        for d in (8, *d_grid):
            if inst.name == "sc_nonsmooth":  # the minimiser is theta* (lam ||theta*|| <= kappa_d) on every d
                np.testing.assert_allclose(inst.sc_minimiser(d)[0], inst.theta_star(d))
    assert {"p_agd_phased_smoothed", "p_gd_smoothed"} <= protocols
    # the new rows' smallest points build (plans and families validate)
    fam, hp, plan = R.measure.build("p_agd_phased_smoothed", 10**4, 8, eps=4.0, schedule="paper")
    assert fam.smoothed and len(plan.phases) > 1 and plan.strong_convexity == R.config.INSTANCES["sc_nonsmooth"].lam
    plan = sco.p_gd_plan(10**3, 8, 0.3, R.config.DELTA_RATES, 1.0, 2.0, None)
    assert plan.phases[0].smoothing > 0 and not plan.phases[0].fresh
