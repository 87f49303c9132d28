"""Declared problem protocols: what the engine may ask of a learning problem."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax

PyTree = Any


@runtime_checkable
class Problem(Protocol):
    """What every algorithm needs of a learning problem."""

    def loss(self, params: PyTree, x: jax.Array, y: jax.Array) -> jax.Array: ...

    def init_params(self, key: jax.Array) -> PyTree: ...

    def evaluate(self, params: PyTree, x: jax.Array, y: jax.Array, mask=None) -> dict: ...


@runtime_checkable
class ClosedFormClipping(Protocol):
    """Optional: ``sum_j w_j clip_C(grad f(params; x_j, y_j))`` without per-example gradients
    (GLMs: the gradient is a residual times the row). ``row_sq_norms(x)`` are the
    data-only ``||x_j||^2`` the clip needs (computed once, loop-invariant)."""

    def weighted_grad_sum(self, params, x, y, weights, clip_norm=None, row_sq_norms=None) -> PyTree: ...

    def row_sq_norms(self, x: jax.Array) -> jax.Array: ...


def has_closed_form_clipping(problem) -> bool:
    return isinstance(problem, ClosedFormClipping)
