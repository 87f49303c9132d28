"""A small flax multilayer perceptron (for ``dpjax.problems.FlaxProblem``)."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax


class MLP(nn.Module):
    """``hidden`` tanh layers, then a linear layer of ``outputs`` units (1: a scalar logit)."""
    hidden: Sequence[int] = (16,)
    outputs: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for width in self.hidden:
            x = nn.tanh(nn.Dense(width)(x))
        x = nn.Dense(self.outputs)(x)
        return x[..., 0] if self.outputs == 1 else x
