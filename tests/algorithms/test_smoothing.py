"""Moreau-envelope smoothing A2 (spec §2.2, §6 item 9)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.algorithms.smoothing import AbsoluteRegression, HingeClassification, MoreauEnvelope
from dpjax import engine
from dpjax.engine.silos import SiloData
from dpjax.problems import LinearRegression

DIM, BETA = 3, 2.5
rng = np.random.default_rng(0)
A = rng.normal(size=(64, DIM)).astype(np.float32)
W = (2 * rng.normal(size=(64, DIM))).astype(np.float32)
Y_REG = rng.normal(size=64).astype(np.float32)
Y_CLS = np.where(rng.random(64) < 0.5, -1.0, 1.0).astype(np.float32)
CASES = [(AbsoluteRegression(DIM), Y_REG), (HingeClassification(DIM), Y_CLS)]


def _batched(problem):
    env = MoreauEnvelope(problem, BETA)
    f = jax.jit(jax.vmap(problem.loss))
    fb = jax.jit(jax.vmap(env.loss))
    gb = jax.jit(jax.vmap(jax.grad(env.loss)))
    return env, f, fb, gb


@pytest.mark.parametrize("problem, y", CASES)
def test_sandwich_and_gradient_bound(problem, y):
    env, f, fb, gb = _batched(problem)
    fv, fbv, g = np.asarray(f(W, A, y)), np.asarray(fb(W, A, y)), np.asarray(gb(W, A, y))
    lip = np.linalg.norm(A, axis=1)  # per-record Lipschitz constant ||a||
    assert np.all(fbv <= fv + 1e-5)
    assert np.all(fv <= fbv + lip**2 / (2 * BETA) + 1e-5)
    assert np.all(np.linalg.norm(g, axis=1) <= lip * (1 + 1e-5))
    assert np.any(fv - fbv > 1e-2)  # the envelope really smooths somewhere


@pytest.mark.parametrize("problem, y", CASES)
def test_envelope_value_is_the_minimum_over_v(problem, y):
    """Independent check of the closed-form prox: numerical min over v in float64."""
    env, _, fb, _ = _batched(problem)
    fbv = np.asarray(fb(W, A, y))
    for j in range(6):
        a, w, yj = A[j].astype(np.float64), W[j].astype(np.float64), float(y[j])
        loss = (lambda v: abs(a @ v - yj)) if isinstance(problem, AbsoluteRegression) else (lambda v: max(0.0, 1 - yj * a @ v))
        obj = lambda v: loss(v) + BETA / 2 * np.sum((w - v) ** 2)
        best = min(optimize.minimize(obj, w + s, method="Nelder-Mead",
                                     options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000}).fun
                   for s in (0.0, 0.3, -0.3))
        assert fbv[j] == pytest.approx(best, abs=2e-5)


@pytest.mark.parametrize("problem, y", CASES)
def test_gradient_matches_finite_differences_and_is_beta_lipschitz(problem, y):
    env, _, fb, gb = _batched(problem)
    g = np.asarray(gb(W, A, y), np.float64)
    h = 1e-2  # f_beta is beta-smooth: central differences err by <= beta h / 2 per coordinate... (quadratic pieces: exact)
    for k in range(DIM):
        e = np.zeros(DIM, np.float32)
        e[k] = h
        fd = (np.asarray(fb(W + e, A, y), np.float64) - np.asarray(fb(W - e, A, y), np.float64)) / (2 * h)
        np.testing.assert_allclose(fd, g[:, k], atol=BETA * h + 1e-3)
    # beta-smoothness between random pairs
    g2 = np.asarray(gb(W[::-1].copy(), A, y), np.float64)
    dist = np.linalg.norm(W - W[::-1], axis=1)
    assert np.all(np.linalg.norm(g - g2, axis=1) <= BETA * dist * (1 + 1e-5) + 1e-5)


def test_absolute_envelope_is_huber():
    env, _, fb, _ = _batched(AbsoluteRegression(DIM))
    t = np.einsum("ij,ij->i", A.astype(np.float64), W.astype(np.float64)) - Y_REG
    sq = np.sum(A.astype(np.float64) ** 2, axis=1)
    huber = np.where(np.abs(t) > sq / BETA, np.abs(t) - sq / (2 * BETA), BETA * t**2 / (2 * sq))
    np.testing.assert_allclose(fb(W, A, Y_REG), huber, rtol=1e-4, atol=1e-5)


def test_lipschitz_factor_option_and_validation():
    x = np.array([[3.0, 4.0]])
    assert MoreauEnvelope(AbsoluteRegression(2), 1.0).lipschitz_bound(x) == pytest.approx(5.0)
    assert MoreauEnvelope(AbsoluteRegression(2), 1.0, lipschitz_factor=2).lipschitz_bound(x) == pytest.approx(10.0)
    assert MoreauEnvelope(AbsoluteRegression(2), 4.0).approximation_gap(2.0) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="beta"):
        MoreauEnvelope(AbsoluteRegression(2), 0.0)
    with pytest.raises(ValueError, match="lipschitz_factor"):
        MoreauEnvelope(AbsoluteRegression(2), 1.0, lipschitz_factor=3)
    with pytest.raises(ValueError, match="prox"):
        MoreauEnvelope(LinearRegression(2), 1.0)


def test_noisy_mbsgd_runs_on_the_envelope():
    """A1 on f_beta (Theorem D.2): the engine differentiates the envelope; the
    smoothed run gets close to the loss of the generating weights."""
    data = SiloData.from_silos([A[:32], A[32:]], [Y_REG[:32] + A[:32] @ np.ones(DIM, np.float32),
                                                  Y_REG[32:] + A[32:] @ np.ones(DIM, np.float32)])
    env = MoreauEnvelope(AbsoluteRegression(DIM), BETA)
    res = engine.run(NoisyMbSgd(env, 30, 8, private=True), data, MbSgdHParams.create(0.2, 0.01, 5.0),
                     jax.random.key(0))
    x, y, m = data.pooled()
    before = float(env.evaluate(env.init_params(), x, y, m)["loss"])
    after = float(env.evaluate(jnp.asarray(res.output), x, y, m)["loss"])
    at_truth = float(np.mean(np.abs(Y_REG)))  # loss of w = 1, where the data came from
    assert after < at_truth + 0.15 < before
