"""Pooled training optimum and heterogeneity for the ISRL-DP figures.

Lowy & Razaviyayn (ICLR 2023), Section 6 / Appendix I: step sizes are selected by the final *training excess risk*
``F^(w) - F^*``, with ``F^*`` the minimum of the pooled training loss found by Newton's method, and each plot is
labelled with the heterogeneity at the pooled minimizer ``w*``, ``upsilon*^2 = (1/N) sum_i || grad F^_i(w*) ||^2``
with ``F^_i`` the mean training loss of silo i (Section 1; 0 for homogeneous silos, but not conversely).

``pooled_optimum(problem, xs, ys)`` does both for the three GLMs of the experiments, in float64 NumPy:

* binary logistic regression (MNIST): ``log(1 + e^m) - y m``, m = <w, x>. The experiments clip the margin to
  [-15, 15] (``LogisticRegression.margin_clip``); that loss is flat beyond 15 and not convex, so Newton's method runs
  on the *unclipped* loss and ``F^*`` is its minimum. The two agree at w* (and wherever every margin is within 15),
  which ``max_abs_margin`` and ``clipped_loss`` record; elsewhere the clipped loss can be below ``F^*`` (misclassified
  points beyond 15 only), so an excess risk can be slightly negative.
* softmax regression (obesity): W is [d, C]; the loss is invariant to adding one vector to every column, so the
  Hessian is singular and the Newton step is the minimum-norm least-squares solution (``F^*`` and the silo
  gradients, hence upsilon*^2, do not depend on the choice of minimizer).
* least squares (insurance): ``0.5 (<w, x> (+ b) - y)^2``; a least-squares solve refined by Newton steps.

Newton's method is damped (Boyd & Vandenberghe, Alg. 9.5: backtracking with alpha = 0.25, beta = 0.5 on the Newton
direction) by default; ``step=0.5`` gives the authors' fixed damping. It stops when the Newton decrement ``lambda^2/2
= -g^T dw / 2`` (an estimate of F^(w) - F^*) is at most ``tol * max(1, |F^(w)|)`` (default 1e-14: far below the
float32 training losses it is compared with; the authors use 1e-6 absolute), when the gradient norm is at most
``grad_tol``, or when the line search can no longer decrease the loss (float64 resolution reached; ``converged`` then
reports whether the decrement rule held to 1e-10). Nearly separable data (the obesity silos: 98.6% training accuracy)
have their infimum far out (||W|| ~ 4e3): Newton then converges linearly, F^* to ~1e-13 in about 40 iterations.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import special

from dpjax import _validate

MODELS = ("logistic", "softmax", "least-squares")


@dataclasses.dataclass(frozen=True)
class PooledOptimum:
    """Result of `pooled_optimum` (all float64).

    Attributes:
      params: w* in the problem's parameter layout ([d], [d, C], or
        {"w": [d], "b": scalar} for least squares with an intercept).
      loss: F^*, the pooled mean training loss at w* (unclipped; see module doc).
      grad_norm: ||grad F^(w*)||.
      heterogeneity: upsilon*^2 = (1/N) sum_i ||grad F^_i(w*)||^2.
      iterations: Newton iterations taken.
      converged: whether a stopping rule was met within ``max_iter``.
      model: one of ``MODELS``.
      max_abs_margin: logistic only: max |<w*, x>| over the pooled data.
      clipped_loss: logistic only: the pooled loss with the problem's margin clip at w*.
    """

    params: Any
    loss: float
    grad_norm: float
    heterogeneity: float
    iterations: int
    converged: bool
    model: str
    max_abs_margin: float | None = None
    clipped_loss: float | None = None

    def as_dict(self) -> dict:
        """JSON-friendly summary (without ``params``)."""
        return {"F_star": self.loss, "upsilon_star_sq": self.heterogeneity, "grad_norm": self.grad_norm,
                "newton_iterations": self.iterations, "converged": self.converged, "model": self.model,
                "max_abs_margin": self.max_abs_margin, "clipped_loss_at_optimum": self.clipped_loss}


# Loss, gradient and Hessian of the pooled mean loss (flattened parameters)


def _loss(model: str, w: np.ndarray, x: np.ndarray, y: np.ndarray, num_classes: int | None) -> float:
    if model == "logistic":
        m = x @ w
        return float(np.mean(np.logaddexp(0.0, m) - y * m))
    if model == "softmax":
        z = x @ w.reshape(x.shape[1], num_classes)
        return float(np.mean(special.logsumexp(z, axis=1) - z[np.arange(len(y)), y]))
    r = x @ w - y
    return float(0.5 * np.mean(r * r))


def _grad(model: str, w: np.ndarray, x: np.ndarray, y: np.ndarray, num_classes: int | None) -> np.ndarray:
    n = x.shape[0]
    if model == "logistic":
        return x.T @ (special.expit(x @ w) - y) / n
    if model == "softmax":
        p = special.softmax(x @ w.reshape(x.shape[1], num_classes), axis=1)
        p[np.arange(n), y] -= 1.0
        return (x.T @ p / n).ravel()
    return x.T @ (x @ w - y) / n


def _hessian(model: str, w: np.ndarray, x: np.ndarray, y: np.ndarray, num_classes: int | None) -> np.ndarray:
    n, d = x.shape
    if model == "logistic":
        s = special.expit(x @ w)
        return (x * (s * (1 - s))[:, None]).T @ x / n
    if model == "softmax":
        p = special.softmax(x @ w.reshape(d, num_classes), axis=1)
        # H[(i,a),(j,b)] = mean_k x_ki x_kj (p_ka delta_ab - p_ka p_kb), row-major vec(W)
        h = np.einsum("ki,kj,ka,kb->iajb", x, x, p, p, optimize=True)
        diag = np.einsum("ki,kj,ka->iaj", x, x, p, optimize=True)
        for a in range(num_classes):
            h[:, a, :, a] -= diag[:, a, :]
        return (-h / n).reshape(d * num_classes, d * num_classes)
    return x.T @ x / n


# Newton's method


def newton_minimize(model: str, x, y, *, num_classes: int | None = None, w0=None, step: str | float = "backtracking",
                    tol: float = 1e-14, grad_tol: float = 1e-12, max_iter: int = 100) -> tuple[np.ndarray, int, bool]:
    """(Damped) Newton's method on the pooled mean loss of ``model`` over rows ``x [n, d]``.

    Returns ``(w, iterations, converged)`` with ``w`` flattened ([d] or [d*C], row-major). ``step="backtracking"``
    (default) or a fixed damping in (0, 1] (the authors use 0.5). See the module docstring for the stopping rules.
    """
    _validate.check_choice("model", model, MODELS)
    x = np.asarray(x, np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"x has shape {x.shape}; it must be a non-empty [n, d] matrix")
    y = np.asarray(y)
    if y.shape != (x.shape[0],):
        raise ValueError(f"y has shape {y.shape}; it must be [n] = [{x.shape[0]}]")
    if model == "softmax":
        num_classes = _validate.check_int("num_classes", num_classes, min_value=2)
        y = y.astype(np.int64)
        if y.min() < 0 or y.max() >= num_classes:
            raise ValueError(f"y holds labels outside [0, num_classes={num_classes})")
        size = x.shape[1] * num_classes
    else:
        y = y.astype(np.float64)
        size = x.shape[1]
    if isinstance(step, str):
        _validate.check_choice("step", step, ("backtracking",))
    else:
        _validate.check_probability("step", step, allow_zero=False)
    _validate.check_positive("tol", tol)
    _validate.check_positive("grad_tol", grad_tol)
    max_iter = _validate.check_int("max_iter", max_iter, min_value=1)
    w = np.zeros(size) if w0 is None else np.asarray(w0, np.float64).ravel().copy()
    if w.shape != (size,):
        raise ValueError(f"w0 has {w.size} entries; {model} with these shapes needs {size}")
    if model == "least-squares" and w0 is None:
        w = np.linalg.lstsq(x, y, rcond=None)[0]
    f = _loss(model, w, x, y, num_classes)
    for it in range(max_iter):
        g = _grad(model, w, x, y, num_classes)
        if np.linalg.norm(g) <= grad_tol:
            return w, it, True
        h = _hessian(model, w, x, y, num_classes)
        dw = -np.linalg.lstsq(h, g, rcond=None)[0]
        decrement = -float(g @ dw)  # lambda^2 (>= 0 for a PSD Hessian)
        scale = max(1.0, abs(f))
        if decrement / 2 <= tol * scale:
            return w, it, True
        if step == "backtracking":
            t = 1.0
            while True:
                f_new = _loss(model, w + t * dw, x, y, num_classes)
                if f_new <= f - 0.25 * t * decrement:
                    break
                if t < 1e-12:  # no decrease representable in float64: stalled
                    return w, it, decrement / 2 <= 1e-10 * scale
                t *= 0.5
        else:
            t = float(step)
            f_new = _loss(model, w + t * dw, x, y, num_classes)
        w, f = w + t * dw, f_new
    g = _grad(model, w, x, y, num_classes)
    return w, max_iter, bool(np.linalg.norm(g) <= grad_tol)


def _model_of(problem) -> tuple[str, int | None, bool]:
    """(model, num_classes, fit_intercept) of a dpjax GLM."""
    from dpjax.problems import LinearRegression, LogisticRegression, SoftmaxRegression

    if isinstance(problem, LogisticRegression):
        return "logistic", None, False
    if isinstance(problem, SoftmaxRegression):
        return "softmax", problem.num_classes, False
    if isinstance(problem, LinearRegression):
        return "least-squares", None, bool(problem.fit_intercept)
    raise ValueError(f"problem={type(problem).__name__}: pooled_optimum supports LogisticRegression, "
                     "SoftmaxRegression and LinearRegression")


def silo_heterogeneity(model: str, w, xs: Sequence, ys: Sequence, *, num_classes: int | None = None) -> float:
    """upsilon^2 at ``w``: (1/N) sum_i ||grad F^_i(w)||^2 (F^_i = silo i's mean training loss)."""
    _validate.check_choice("model", model, MODELS)
    if len(xs) == 0 or len(xs) != len(ys):
        raise ValueError(f"xs and ys must be non-empty and of equal length (got {len(xs)} and {len(ys)})")
    w = np.asarray(w, np.float64).ravel()
    total = 0.0
    for x, y in zip(xs, ys):
        x = np.asarray(x, np.float64)
        y = np.asarray(y).astype(np.int64 if model == "softmax" else np.float64)
        total += float(np.sum(_grad(model, w, x, y, num_classes) ** 2))
    return total / len(xs)


def pooled_optimum(problem, xs: Sequence, ys: Sequence, **newton_kw) -> PooledOptimum:
    """F^*, w* (Newton on the pooled training data) and upsilon*^2 for a dpjax GLM.

    Args:
      problem: ``LogisticRegression``, ``SoftmaxRegression`` or ``LinearRegression``.
      xs: the silos' training features (one array per silo).
      ys: the silos' training labels (one array per silo).
      newton_kw: options of `newton_minimize` (``step``, ``tol``, ``grad_tol``, ``max_iter``).
    """
    model, num_classes, intercept = _model_of(problem)
    if len(xs) == 0 or len(xs) != len(ys):
        raise ValueError(f"xs and ys must be non-empty and of equal length (got {len(xs)} and {len(ys)})")
    xs = [np.asarray(x, np.float64).reshape(len(x), -1) for x in xs]
    if intercept:
        xs = [np.concatenate([x, np.ones((len(x), 1))], axis=1) for x in xs]
    x = np.concatenate(xs)
    y = np.concatenate([np.asarray(v) for v in ys])
    w, iters, converged = newton_minimize(model, x, y, num_classes=num_classes, **newton_kw)
    yy = y.astype(np.int64 if model == "softmax" else np.float64)
    loss = _loss(model, w, x, yy, num_classes)
    grad_norm = float(np.linalg.norm(_grad(model, w, x, yy, num_classes)))
    het = silo_heterogeneity(model, w, xs, ys, num_classes=num_classes)
    margin = clipped = None
    if model == "logistic":
        m = x @ w
        margin = float(np.max(np.abs(m)))
        clip = problem.margin_clip
        mc = m if clip is None else np.clip(m, -clip, clip)
        clipped = float(np.mean(np.logaddexp(0.0, mc) - yy * mc))
    if model == "softmax":
        params = w.reshape(x.shape[1], num_classes)
    elif intercept:
        params = {"w": w[:-1], "b": float(w[-1])}
    else:
        params = w
    return PooledOptimum(params, loss, grad_norm, het, iters, converged, model, margin, clipped)


def excess_risk(train_loss, f_star: float):
    """``train_loss - F^*`` (inf stays inf: diverged runs keep an infinite excess risk)."""
    return np.asarray(train_loss, np.float64) - float(f_star)


def format_upsilon(values: dict[int, float]) -> str:
    """Title fragment: ``υ*² = 0.17`` or ``υ*²: N=3 0.12, N=5 0.31`` (per number of silos)."""
    finite = {k: v for k, v in values.items() if math.isfinite(v)}
    if not finite:
        return "υ*² = n/a"
    if len(finite) == 1:
        return f"υ*² = {next(iter(finite.values())):.3g}"
    return "υ*²: " + ", ".join(f"N={k} {v:.3g}" for k, v in sorted(finite.items()))
