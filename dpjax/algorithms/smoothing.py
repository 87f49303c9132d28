"""Moreau-envelope (Nesterov) smoothing for non-smooth losses (Lowy & Razaviyayn, ICLR 2023, Appendix D.2, Lemma D.7).

``f_beta(w, x) = min_v [ f(v, x) + (beta/2) ||w - v||^2 ]`` with minimiser ``v* = prox_{f/beta}(w)`` and
``grad f_beta(w) = beta (w - v*)``. The envelope is convex, beta-smooth and ``f_beta <= f <= f_beta + L^2/(2 beta)``.

``MoreauEnvelope(base, beta)`` is a dpjax problem whose per-example loss is the envelope of ``base``'s loss, written as
``f(sg(v*)) + (beta/2)||w - sg(v*)||^2`` (``sg`` = stop-gradient), so that its value is ``f_beta(w)`` and its autodiff
gradient is exactly ``beta (w - v*)`` (Danskin). Every algorithm of dpjax can run on it unchanged (Theorem D.2: run
Noisy MB-SGD, Algorithm 2, on ``f_beta``).

The prox is taken over ``v in R^d`` (the *unconstrained* envelope; Lemma D.7's 2L is for the W-constrained one): then
``||grad f_beta|| <= L`` and the approximation bound holds on all of R^d. The paper states the envelope is
``2L``-Lipschitz (for the W-constrained envelope); ``lipschitz_factor=2`` reproduces that conservative constant in
``lipschitz_bound`` (paper mode), ``1`` is the tight default. Privacy is unchanged: the per-record gradient norm bound
the noise is calibrated to is ``lipschitz_factor * L`` (or the clip norm when the algorithm clips).

Closed-form proxes are provided for the two non-smooth losses of the paper's examples: absolute-deviation regression and
the hinge loss. Only problems with a ``prox(params, x, y, beta)`` method can be smoothed (there is no inexact inner
solver here).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from dpjax import _validate
from dpjax.problems.glm import masked_mean, max_row_norm

_TINY = 1e-30


@dataclasses.dataclass(frozen=True)
class _LinearNonSmooth:
    """A non-smooth convex loss of the linear score ``<a, w>`` on ``dim`` features, started at
    ``w = 0``, ``||a||``-Lipschitz in ``w``; a subclass gives ``loss`` and its closed-form ``prox``."""

    dim: int

    def __post_init__(self):
        _validate.check_int("dim", self.dim, min_value=1)

    def init_params(self, key=None):
        return jnp.zeros((self.dim,), jnp.float32)

    def _losses(self, params, x, y):
        return jax.vmap(self.loss, in_axes=(None, 0, 0))(params, x, y)

    def lipschitz_bound(self, x) -> float:
        return max_row_norm(x)


@dataclasses.dataclass(frozen=True)
class AbsoluteRegression(_LinearNonSmooth):
    """``f(w; a, y) = |<a, w> - y|`` (non-smooth, convex, ``||a||``-Lipschitz)."""

    kind = "regression"

    def loss(self, params, x, y):
        return jnp.abs(jnp.dot(x, params) - y)

    def prox(self, params, x, y, beta):
        """``argmin_v |<a,v> - y| + (beta/2)||w - v||^2 = w - clip(t/||a||^2, -1/beta, 1/beta) a``,
        ``t = <a, w> - y``."""
        sq = jnp.dot(x, x)
        t = jnp.dot(x, params) - y
        s = jnp.clip(t / jnp.maximum(sq, _TINY), -1.0 / beta, 1.0 / beta)
        return params - s * x

    def evaluate(self, params, x, y, mask=None):
        return {"loss": masked_mean(self._losses(params, x, y), mask)}


@dataclasses.dataclass(frozen=True)
class HingeClassification(_LinearNonSmooth):
    """``f(w; a, y) = max(0, 1 - y <a, w>)``, labels ``y in {-1, +1}``."""

    kind = "binary"

    def loss(self, params, x, y):
        return jnp.maximum(0.0, 1.0 - y * jnp.dot(x, params))

    def prox(self, params, x, y, beta):
        """``v = w + s y a``, ``s = clip((1 - y<a,w>)/||a||^2, 0, 1/beta)`` (uses ``y^2 = 1``)."""
        sq = jnp.dot(x, x)
        s = jnp.clip((1.0 - y * jnp.dot(x, params)) / jnp.maximum(sq, _TINY), 0.0, 1.0 / beta)
        s = jnp.where(sq > 0, s, 0.0)
        return params + s * y * x

    def evaluate(self, params, x, y, mask=None):
        wrong = (jnp.sign(x @ params) != y).astype(jnp.float32)
        return {"loss": masked_mean(self._losses(params, x, y), mask), "error": masked_mean(wrong, mask)}


@dataclasses.dataclass(frozen=True)
class MoreauEnvelope:
    """The beta-smooth Moreau envelope of ``base`` as a dpjax problem.

    Args:
      base: a problem with a ``prox(params, x, y, beta)`` method (``AbsoluteRegression``, ``HingeClassification``).
      beta: smoothing parameter (e.g. ``schedules.smoothing_beta``); static, so changing it recompiles.
      lipschitz_factor: 1 (tight, unconstrained envelope, default) or 2 (the
        paper's Lemma D.7 constant); multiplies ``lipschitz_bound``."""

    base: Any
    beta: float
    lipschitz_factor: int = 1

    def __post_init__(self):
        if not hasattr(self.base, "prox"):
            raise ValueError(f"base={self.base!r} has no closed-form prox(params, x, y, beta); it cannot be smoothed")
        _validate.check_positive("beta", self.beta)
        _validate.check_choice("lipschitz_factor", self.lipschitz_factor, (1, 2))

    @property
    def kind(self):
        return self.base.kind

    def init_params(self, key=None):
        return self.base.init_params(key)

    def prox(self, params, x, y):
        return self.base.prox(params, x, y, self.beta)

    def loss(self, params, x, y):
        v = jax.lax.stop_gradient(self.base.prox(params, x, y, self.beta))
        return self.base.loss(v, x, y) + 0.5 * self.beta * jnp.sum(jnp.square(params - v))

    def evaluate(self, params, x, y, mask=None):
        """The base problem's metrics (the true, unsmoothed loss) plus the envelope loss."""
        out = dict(self.base.evaluate(params, x, y, mask))
        env = jax.vmap(self.loss, in_axes=(None, 0, 0))(params, x, y)
        out["envelope_loss"] = masked_mean(env, mask)
        return out

    def lipschitz_bound(self, x):
        base = self.base.lipschitz_bound(x)
        return None if base is None else self.lipschitz_factor * base

    def approximation_gap(self, lipschitz: float) -> float:
        """``L^2/(2 beta)``: ``f - f_beta`` never exceeds it (Lemma D.7.2)."""
        return _validate.check_nonnegative("lipschitz", lipschitz) ** 2 / (2.0 * self.beta)
