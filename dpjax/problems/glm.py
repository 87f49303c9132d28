"""Generalised linear models used by the papers' experiments.

Each problem is a frozen (hashable) dataclass so it can be a static argument of ``jit``. ``loss(params, x, y)`` is the
loss of *one* example; the engine vmaps it. ``lipschitz_bound(x)`` returns a bound L on the per-example gradient norm
over all parameters when one exists (computed from data, which is not private: the papers do the same and say so), else
``None`` and the algorithm must clip.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate


def masked_mean(values: jax.Array, mask: jax.Array | None) -> jax.Array:
    if mask is None:
        return jnp.mean(values)
    w = mask.astype(values.dtype)
    return jnp.sum(values * w) / jnp.maximum(jnp.sum(w), 1.0)


_TINY = 1e-30


def _clip_coefficients(residual_norms, weights, clip_norm):
    """``weights_j * min(1, C / ||g_j||)``; ``clip_norm=None`` means no clipping. A record whose gradient norm is not
    finite (overflow) gets 0 (its clipped gradient is the zero vector: see ``_clipped``)."""
    if clip_norm is None:
        return weights
    coef = weights * jnp.minimum(1.0, clip_norm / jnp.maximum(residual_norms, _TINY))
    return jnp.where(jnp.isfinite(residual_norms), coef, jnp.zeros_like(coef))


def _clipped(residual, coef):
    """``residual * coef`` with an exact 0 where ``coef`` is 0: an overflowed residual (inf) times 0 would be NaN and
    one record would make the whole clipped sum NaN (issue 23; ``dpjax.primitives.clipping``)."""
    return jnp.where(coef != 0, residual, jnp.zeros_like(residual)) * coef


def row_sq_norms(x: jax.Array) -> jax.Array:
    """Squared l2 norms of the rows of ``x [..., n, d]`` (``[..., n]``).

    The closed-form clipped sums below need ``||x_j||``. Callers that evaluate them many times on the same data (every
    round, every run of a grid) should compute this once and pass it as ``row_sq_norms``: left inside a vmapped round,
    XLA fuses the reduction into each run's elementwise clip and recomputes it per run (measured 2x on a 32-run grid at
    d = 50).
    """
    return jnp.sum(jnp.square(x), axis=-1)


def _row_norms(x, row_sq_norms_):
    return jnp.sqrt(row_sq_norms(x) if row_sq_norms_ is None else row_sq_norms_)


def max_row_norm(x) -> float:
    """The largest l2 norm of a row of ``x`` (host-side, float64): a GLM's Lipschitz constant per unit parameter."""
    x = np.asarray(x, dtype=np.float64).reshape(np.shape(x)[0], -1)
    return float(np.max(np.linalg.norm(x, axis=1))) if x.shape[0] else 0.0


@dataclasses.dataclass(frozen=True)
class LogisticRegression:
    """Binary logistic regression without bias, labels in {0, 1}.

    As in the experiments of Lowy & Razaviyayn (2023, Sec. 6), the margin <w, x> is clipped to ``[-margin_clip,
    margin_clip]`` before the sigmoid for numerical stability. The clip is *straight-through*: the gradient is
    ``(sigmoid(clip(<w,x>)) - y) x`` exactly as in the authors' code, so ``||grad|| <= ||x||`` always and
    ``lipschitz_bound = max ||x||``.
    """
    dim: int
    margin_clip: float | None = 15.0

    def __post_init__(self):
        _validate.check_int("dim", self.dim, min_value=1)
        if self.margin_clip is not None:
            _validate.check_positive("margin_clip", self.margin_clip)

    kind = "binary"

    def check_labels(self, y) -> None:
        """Host-side: the labels (real rows) are 0 or 1 (not -1/+1, not class ids)."""
        y = np.asarray(y)
        bad = ~np.isin(y, (0, 1))
        if bad.any():
            raise ValueError(f"y={y[bad][0]!r} (first bad label of {int(bad.sum())}): LogisticRegression needs "
                             f"labels in {{0, 1}}; found values {np.unique(y)[:10].tolist()}")

    def init_params(self, key=None):
        return jnp.zeros((self.dim,), jnp.float32)

    def _margin(self, params, x):
        m = jnp.dot(x, params)
        if self.margin_clip is None:
            return m
        clipped = jnp.clip(m, -self.margin_clip, self.margin_clip)
        return m + jax.lax.stop_gradient(clipped - m)

    def loss(self, params, x, y):
        m = self._margin(params, x)
        # log(1 + e^m) - y m, the cross-entropy of sigmoid(m) against y.
        return jax.nn.softplus(m) - y * m

    def predict_proba(self, params, x):
        return jax.nn.sigmoid(jnp.clip(x @ params, -50.0, 50.0))

    row_sq_norms = staticmethod(row_sq_norms)

    def weighted_grad_sum(self, params, x, y, weights, clip_norm=None, row_sq_norms=None):
        """``sum_j weights_j clip_C(grad f(w; x_j, y_j))`` over rows ``x [n, d]``.

        Closed form for a GLM: ``grad_j = r_j x_j`` with ``r_j = sigmoid(m_j) - y_j``, so ``||grad_j|| = |r_j| ||x_j||``
        and the clipped sum is ``X^T (weights * r * min(1, C / (|r| ||x||)))``: the same quantity as per-example
        autodiff + clipping, without materialising ``[n, d]``. ``row_sq_norms`` ([n], optional) are precomputed
        ``||x_j||^2``.
        """
        m = x @ params
        if self.margin_clip is not None:
            m = jnp.clip(m, -self.margin_clip, self.margin_clip)
        r = jax.nn.sigmoid(m) - y
        if clip_norm is None:
            return x.T @ (r * weights)
        norms = jnp.abs(r) * _row_norms(x, row_sq_norms)
        return x.T @ _clipped(r, _clip_coefficients(norms, weights, clip_norm))

    def evaluate(self, params, x, y, mask=None):
        losses = jax.vmap(self.loss, in_axes=(None, 0, 0))(params, x, y)
        wrong = ((self.predict_proba(params, x) >= 0.5).astype(jnp.float32) != y).astype(jnp.float32)
        return {"loss": masked_mean(losses, mask), "error": masked_mean(wrong, mask)}

    def lipschitz_bound(self, x) -> float:
        return max_row_norm(x)


@dataclasses.dataclass(frozen=True)
class SoftmaxRegression:
    """Multinomial logistic regression, labels are integer class ids.

    Parameters are a ``[dim, num_classes]`` matrix (no bias, as in the obesity experiment). ``||grad|| = ||x|| ||p -
    e_y|| <= sqrt(2) ||x||``.
    """
    dim: int
    num_classes: int

    def __post_init__(self):
        _validate.check_int("dim", self.dim, min_value=1)
        _validate.check_int("num_classes", self.num_classes, min_value=2)

    kind = "multiclass"

    def check_labels(self, y) -> None:
        """Host-side: the labels (real rows) are integers in ``0 .. num_classes - 1``."""
        y = np.asarray(y)
        bad = (y != np.round(y)) | (y < 0) | (y >= self.num_classes)
        if bad.any():
            raise ValueError(f"y={y[bad][0]!r} (first bad label of {int(bad.sum())}): SoftmaxRegression with "
                             f"num_classes={self.num_classes} needs integer labels in [0, {self.num_classes - 1}]")

    def init_params(self, key=None):
        return jnp.zeros((self.dim, self.num_classes), jnp.float32)

    def loss(self, params, x, y):
        logits = x @ params
        return jax.nn.logsumexp(logits) - logits[y.astype(jnp.int32)]

    row_sq_norms = staticmethod(row_sq_norms)

    def weighted_grad_sum(self, params, x, y, weights, clip_norm=None, row_sq_norms=None):
        """Closed-form clipped sum: ``grad_j = x_j (p_j - e_{y_j})^T``, norm ``||x_j|| ||p_j - e_{y_j}||``."""
        resid = jax.nn.softmax(x @ params, axis=-1) - jax.nn.one_hot(y.astype(jnp.int32), self.num_classes, dtype=x.dtype)
        if clip_norm is None:
            return x.T @ (resid * weights[:, None])
        norms = _row_norms(x, row_sq_norms) * jnp.linalg.norm(resid, axis=-1)
        return x.T @ _clipped(resid, _clip_coefficients(norms, weights, clip_norm)[:, None])

    def evaluate(self, params, x, y, mask=None):
        losses = jax.vmap(self.loss, in_axes=(None, 0, 0))(params, x, y)
        wrong = (jnp.argmax(x @ params, axis=-1) != y.astype(jnp.int32)).astype(jnp.float32)
        return {"loss": masked_mean(losses, mask), "error": masked_mean(wrong, mask)}

    def lipschitz_bound(self, x) -> float:
        return float(np.sqrt(2.0)) * max_row_norm(x)


@dataclasses.dataclass(frozen=True)
class LinearRegression:
    """Least squares ``0.5 (<w, x> + b - y)^2`` (optionally with a bias ``b``).

    The gradient is unbounded over R^d, so there is no Lipschitz bound: private algorithms must clip per example.
    """
    dim: int
    fit_intercept: bool = False

    def __post_init__(self):
        _validate.check_int("dim", self.dim, min_value=1)

    kind = "regression"

    def init_params(self, key=None):
        if self.fit_intercept:
            return {"w": jnp.zeros((self.dim,), jnp.float32), "b": jnp.zeros((), jnp.float32)}
        return jnp.zeros((self.dim,), jnp.float32)

    def predict(self, params, x):
        if self.fit_intercept:
            return x @ params["w"] + params["b"]
        return x @ params

    def loss(self, params, x, y):
        return 0.5 * jnp.square(self.predict(params, x) - y)

    row_sq_norms = staticmethod(row_sq_norms)

    def weighted_grad_sum(self, params, x, y, weights, clip_norm=None, row_sq_norms=None):
        """Closed-form clipped sum: ``grad_j = r_j (x_j, 1)``, norm ``|r_j| sqrt(||x_j||^2 + [bias])``."""
        r = self.predict(params, x) - y
        if clip_norm is None:
            coef = r * weights
        else:
            feat_sq = (row_sq_norms if row_sq_norms is not None else jnp.sum(jnp.square(x), axis=-1))
            feat_sq = feat_sq + (1.0 if self.fit_intercept else 0.0)
            coef = _clipped(r, _clip_coefficients(jnp.abs(r) * jnp.sqrt(feat_sq), weights, clip_norm))
        if self.fit_intercept:
            return {"w": x.T @ coef, "b": jnp.sum(coef)}
        return x.T @ coef

    def evaluate(self, params, x, y, mask=None):
        sq = jnp.square(self.predict(params, x) - y)
        return {"loss": 0.5 * masked_mean(sq, mask), "rmse": jnp.sqrt(masked_mean(sq, mask))}

    def lipschitz_bound(self, x):
        return None
