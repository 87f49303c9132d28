"""Declared problem protocols: what the engine may ask of a learning problem."""

from __future__ import annotations

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class AutodiffOnly:
    """``problem`` without its closed-form clipping: the engine then clips autodiff's per-example gradients.
    For checking a closed form against autodiff, and benchmarking one against the other."""

    problem: Any

    def loss(self, params, x, y):
        return self.problem.loss(params, x, y)

    def init_params(self, key=None):
        return self.problem.init_params(key)

    def evaluate(self, params, x, y, mask=None):
        return self.problem.evaluate(params, x, y, mask)
