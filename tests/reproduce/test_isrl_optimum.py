"""Pooled training optimum F^*, w* (Newton) and upsilon*^2 (dpjax.reproduce.isrl_optimum)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.engine import SiloData, run
from dpjax.problems import LinearRegression, LogisticRegression, SoftmaxRegression
from dpjax.reproduce import isrl_optimum as io

D = 4


def _silos(task: str, num_silos=4, n=60, seed=0, same=False):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(D, 3)) if task == "softmax" else rng.normal(size=D)
    xs, ys = [], []
    for i in range(num_silos):
        x = rng.normal(size=(n, D)) + (0.0 if same else 0.4 * i)
        if task == "logistic":
            y = (x @ w + rng.normal(size=n) > 0).astype(np.float32)
        elif task == "softmax":
            y = np.argmax(x @ w + rng.gumbel(size=(n, 3)), axis=1)
        else:
            y = x @ w + 0.3 * rng.normal(size=n) + (0.0 if same else i)
        xs.append(x.astype(np.float32))
        ys.append(y)
        if same:
            xs, ys = xs * num_silos, ys * num_silos
            break
    return xs, ys


PROBLEMS = {
    "logistic": LogisticRegression(D),
    "softmax": SoftmaxRegression(D, 3),
    "least-squares": LinearRegression(D),
}


@pytest.mark.parametrize("task", list(PROBLEMS))
def test_newton_reaches_a_stationary_point(task):
    xs, ys = _silos(task)
    opt = io.pooled_optimum(PROBLEMS[task], xs, ys)
    assert opt.converged and opt.grad_norm < 1e-6 and opt.model == task
    # independent check of the gradient at w* (finite differences of the pooled loss)
    x, y = np.concatenate(xs).astype(np.float64), np.concatenate(ys)
    w = np.asarray(opt.params, np.float64).ravel()
    y = y.astype(np.int64 if task == "softmax" else np.float64)
    num_classes = 3 if task == "softmax" else None
    fd = np.array([(io._loss(task, w + h, x, y, num_classes) - io._loss(task, w - h, x, y, num_classes)) / 2e-6
                   for h in 1e-6 * np.eye(w.size)])
    assert np.max(np.abs(fd)) < 1e-6
    # the authors' fixed damping (step 0.5) reaches the same minimum
    fixed = io.pooled_optimum(PROBLEMS[task], xs, ys, step=0.5, max_iter=200)
    assert fixed.loss == pytest.approx(opt.loss, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("task", list(PROBLEMS))
@pytest.mark.slow
def test_f_star_is_below_every_iterate(task):
    """F^* <= the pooled loss of random points and of a whole MB-SGD trajectory
    (evaluated by the problem itself, float32: tolerance 1e-6 relative)."""
    xs, ys = _silos(task)
    problem = PROBLEMS[task]
    opt = io.pooled_optimum(problem, xs, ys)
    x, y = np.concatenate(xs), np.concatenate(ys)
    rng = np.random.default_rng(3)
    shape = (D, 3) if task == "softmax" else (D,)
    for _ in range(20):
        w = jnp.asarray(np.asarray(opt.params).reshape(shape) + rng.normal(size=shape) * rng.choice([1e-3, 0.1, 2.0]),
                        jnp.float32)
        assert float(problem.evaluate(w, jnp.asarray(x), jnp.asarray(y))["loss"]) >= opt.loss * (1 - 1e-6)
    data = SiloData.from_silos(xs, [np.asarray(v, np.float32) for v in ys])
    algo = NoisyMbSgd(problem, num_rounds=30, batch_size=20, private=False)
    ev = lambda p, _: problem.evaluate(p, jnp.asarray(x), jnp.asarray(y))  # noqa: E731
    res = run(algo, data, MbSgdHParams.create(0.3), jax.random.key(0), eval_fn=ev, eval_every=1)
    losses = np.asarray(res.eval_metrics["loss"], np.float64)
    assert np.all(losses >= opt.loss * (1 - 1e-6))
    assert np.all(io.excess_risk(losses, opt.loss) >= -1e-6 * opt.loss)
    # at w* the problem's own (float32; for logistic margin-clipped) loss agrees with F^*
    at_opt = float(problem.evaluate(jnp.asarray(np.asarray(opt.params), jnp.float32), jnp.asarray(x), jnp.asarray(y))["loss"])
    assert at_opt == pytest.approx(opt.loss, rel=1e-5)


@pytest.mark.parametrize("task", list(PROBLEMS))
def test_heterogeneity_is_zero_for_identical_silos(task):
    xs, ys = _silos(task, same=True)
    assert len(xs) == 4 and all(np.array_equal(xs[0], v) for v in xs)
    opt = io.pooled_optimum(PROBLEMS[task], xs, ys)
    assert opt.heterogeneity < 1e-12
    het = io.pooled_optimum(PROBLEMS[task], *_silos(task))
    assert het.heterogeneity > 1e-3
    # upsilon*^2 is the mean of the silos' squared gradient norms at w*
    manual = np.mean([np.sum(io._grad(task, np.asarray(het.params, np.float64).ravel(), np.asarray(x, np.float64),
                                      np.asarray(y).astype(np.int64 if task == "softmax" else np.float64),
                                      3 if task == "softmax" else None) ** 2) for x, y in zip(*_silos(task))])
    assert het.heterogeneity == pytest.approx(manual, rel=1e-12)


def test_logistic_uses_the_unclipped_loss_and_records_the_margins():
    xs, ys = _silos("logistic")
    opt = io.pooled_optimum(LogisticRegression(D), xs, ys)
    assert opt.max_abs_margin < 15 and opt.clipped_loss == pytest.approx(opt.loss, rel=1e-14)
    tight = io.pooled_optimum(LogisticRegression(D, margin_clip=0.5), xs, ys)
    assert tight.loss == pytest.approx(opt.loss, rel=1e-12)  # the clip does not change the Newton problem
    assert tight.clipped_loss != pytest.approx(opt.loss, rel=1e-3)  # but it changes the loss at w*


def test_softmax_singular_hessian_and_intercept():
    xs, ys = _silos("softmax")
    opt = io.pooled_optimum(SoftmaxRegression(D, 3), xs, ys)
    w = np.asarray(opt.params)
    x, y = np.concatenate(xs).astype(np.float64), np.concatenate(ys)
    shifted = w + np.random.default_rng(0).normal(size=(D, 1))  # same logits up to a per-row constant
    assert io._loss("softmax", shifted.ravel(), x, y, 3) == pytest.approx(opt.loss, rel=1e-12)
    xs, ys = _silos("least-squares")
    fit = io.pooled_optimum(LinearRegression(D, fit_intercept=True), xs, ys)
    x, y = np.concatenate(xs).astype(np.float64), np.concatenate(ys)
    ref = np.linalg.lstsq(np.c_[x, np.ones(len(x))], y, rcond=None)[0]
    np.testing.assert_allclose(fit.params["w"], ref[:-1], rtol=1e-9)
    assert fit.params["b"] == pytest.approx(ref[-1], rel=1e-9)


def test_invalid_inputs_name_the_argument():
    xs, ys = _silos("logistic")
    with pytest.raises(ValueError, match="model"):
        io.newton_minimize("probit", xs[0], ys[0])
    with pytest.raises(ValueError, match="step"):
        io.newton_minimize("logistic", xs[0], ys[0], step=1.5)
    with pytest.raises(ValueError, match="y has shape"):
        io.newton_minimize("logistic", xs[0], ys[0][:-1])
    with pytest.raises(ValueError, match="num_classes"):
        io.newton_minimize("softmax", xs[0], ys[0])
    with pytest.raises(ValueError, match="max_iter"):
        io.newton_minimize("logistic", xs[0], ys[0], max_iter=0)
    with pytest.raises(ValueError, match="problem"):
        io.pooled_optimum(object(), xs, ys)
    with pytest.raises(ValueError, match="equal length"):
        io.pooled_optimum(LogisticRegression(D), xs, ys[:-1])
    assert io.format_upsilon({25: 0.1712}) == "υ*² = 0.171"
    assert io.format_upsilon({3: 0.5, 5: 0.25}) == "υ*²: N=3 0.5, N=5 0.25"


def test_nearly_separable_softmax_converges_at_float64_resolution():
    """Classes 0 and 1 overlap, class 2 is linearly separable from both (like
    the obesity silos): the infimum lies at infinity along one direction and
    Newton converges linearly; the scale-aware decrement rule
    (tol * max(1, F)) still stops, with a tiny gradient and F^* stable."""
    rng = np.random.default_rng(5)
    y = rng.integers(0, 3, size=600)
    means = np.array([[0.5, 0, 0, 0], [-0.5, 0, 0, 0], [0, 8.0, 0, 0]])
    x = means[y] + rng.normal(size=(600, D))
    x[:, -1] = 1.0  # a bias column, as in the obesity features
    xs, ys = np.split(x, 3), np.split(y, 3)
    opt = io.pooled_optimum(SoftmaxRegression(D, 3), xs, ys)
    assert opt.converged and opt.grad_norm < 1e-6 and np.linalg.norm(opt.params) > 10
    looser = io.pooled_optimum(SoftmaxRegression(D, 3), xs, ys, tol=1e-10)
    assert looser.iterations < opt.iterations and looser.loss == pytest.approx(opt.loss, rel=1e-8)
