"""Adapter that turns any flax (linen) module into a dpjax problem."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from dpjax import _validate
from dpjax.primitives import ghost_clipping
from dpjax.problems.glm import masked_mean

LOSSES = ("squared", "logistic", "softmax")


@functools.partial(jax.jit, static_argnums=0)
def _init_params(problem, key):
    """``problem.module.init`` as one jitted program (compiled once per problem), not flax's eager ops one by one:
    each eager op is its own XLA compile (~15 for an MLP, 0.3-3 s of a run's start-up on 2 busy cores); the same
    ops, so the same bits (issue #38)."""
    return problem.module.init(key, jnp.zeros(problem.input_shape, problem.input_dtype))


@dataclasses.dataclass(frozen=True)
class FlaxProblem:
    """A flax module ``module.apply(params, x)`` with a per-example loss.

    Args:
      module: a ``flax.linen.Module`` mapping one example (no batch axis) or a batch of examples to a prediction (scalar
        / logit vector).
      input_shape: shape of one example, used to initialise parameters.
      loss_kind: ``"squared"`` (0.5 (f(x) - y)^2, regression), ``"logistic"`` (binary, labels in {0,1}, scalar logit) or
        ``"softmax"`` (integer labels).
      input_dtype: dtype of the example used to initialise parameters (``jnp.int32`` for token inputs).

    Flax models have no a-priori Lipschitz bound: private algorithms clip; ``weighted_grad_sum`` gives them the clipped
    sum by ghost norms. ``prefer_gathered_batches``: a network's clipped sum costs a forward and backward pass per row,
    so the engine should gather sampled rows rather than weight every row of a silo (the GLMs' dense path).
    """
    module: Any
    input_shape: tuple[int, ...]
    loss_kind: str = "squared"
    input_dtype: Any = jnp.float32
    prefer_gathered_batches = True

    def __post_init__(self):
        _validate.check_choice("loss_kind", self.loss_kind, LOSSES)

    @property
    def kind(self):
        return {"squared": "regression", "logistic": "binary", "softmax": "multiclass"}[self.loss_kind]

    def init_params(self, key):
        return _init_params(self, key)

    def output(self, params, x):
        """The model's output for one example (logits, or the prediction of a regression)."""
        return self.module.apply(params, x)

    def loss(self, params, x, y):
        out = self.output(params, x)
        if self.loss_kind == "squared":
            return 0.5 * jnp.sum(jnp.square(out - y))
        if self.loss_kind == "logistic":
            m = jnp.reshape(out, ())
            return jax.nn.softplus(m) - y * m
        return jax.nn.logsumexp(out) - out[y.astype(jnp.int32)]

    def weighted_grad_sum(self, params, x, y, weights, clip_norm=None, row_sq_norms=None):
        """``sum_j weights_j clip_C(grad loss(params, x_j, y_j))`` by ghost norms.

        The per-example gradients are never materialised (see ``dpjax.primitives.ghost_clipping``; models with layers it
        does not support fall back to ``vmap(grad)``). ``weights`` are 0/1 padding flags or multiplicities;
        ``clip_norm=None`` sums unclipped gradients. ``row_sq_norms`` is accepted for the GLM interface and unused.
        """
        return ghost_clipping.ghost_clipped_sum(self.loss, params, x, y, clip_norm, weights).total

    def uses_ghost_clipping(self, params, x, y) -> bool:
        """Whether ``weighted_grad_sum`` runs the ghost path on this model (else ``vmap(grad)``)."""
        return ghost_clipping.make_plan(self.loss, params, x, y).fast

    def evaluate(self, params, x, y, mask=None):
        losses = jax.vmap(self.loss, in_axes=(None, 0, 0))(params, x, y)
        out = jax.vmap(self.output, in_axes=(None, 0))(params, x)
        metrics = {"loss": masked_mean(losses, mask)}
        if self.loss_kind == "squared":
            metrics["rmse"] = jnp.sqrt(masked_mean(jnp.sum(jnp.square(out.reshape(y.shape[0], -1) - y.reshape(y.shape[0], -1)), axis=-1), mask))
        elif self.loss_kind == "logistic":
            wrong = ((out.reshape(-1) >= 0).astype(jnp.float32) != y).astype(jnp.float32)
            metrics["error"] = masked_mean(wrong, mask)
        else:
            wrong = (jnp.argmax(out, axis=-1) != y.astype(jnp.int32)).astype(jnp.float32)
            metrics["error"] = masked_mean(wrong, mask)
        return metrics

    def lipschitz_bound(self, x):
        return None
