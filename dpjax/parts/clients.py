"""Client updates: what each silo computes from the server's model and its batch.

A client update is ``init(params) -> state`` and
``update(params, batch, data, state, ctx) -> (units, state)``: it describes the
units the clipper clips (``dpjax.engine.roles.PerExampleGradients`` or
``PerUnitVectors``) and the public denominator of the silo's message; it never
clips or adds noise itself, so the sensitivity of what it sends is the
clipper's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from dpjax.engine.problem import has_closed_form_clipping
from dpjax.engine.roles import Batch, Context, PerExampleGradients


@dataclasses.dataclass(frozen=True)
class MinibatchGradient:
    """Each silo's ``(1/K_i) sum_{j in batch_i} grad f(w, x_ij)``, clipped per example by the clipper.

    The divisor is public: the sampler's (expected) batch size ``K``, one
    ``K_i`` per silo (``batch_sizes``, unbalanced silos: the first ``K_i`` of
    the ``max K_i`` drawn indices are kept), or the silo size for full batches.

    Args:
      problem: the problem (``loss``; a closed-form clipped sum if it has one).
      batch_size: K, or None for full batches (divide by the silo size).
      batch_sizes: one K_i per silo (None: every silo uses ``batch_size``).
    """

    problem: Any
    batch_size: int | None = None
    batch_sizes: tuple | None = None

    def init(self, params):
        return ()

    def update(self, params, batch: Batch, data, state, ctx: Context):
        rows = batch.rows()
        closed_form = has_closed_form_clipping(self.problem)
        if batch.indices is None:  # gather-free: every row of the silo, weighted
            x, y, weights = data.x[rows], data.y[rows], batch.weights
            # loop-invariant (data only): computed once from all rows and materialised
            sq = jax.lax.optimization_barrier(self.problem.row_sq_norms(data.x))[rows] if closed_form else None
        else:
            idx, weights = batch.indices, batch.weights
            x, y = data.x[rows[:, None], idx], data.y[rows[:, None], idx]
            sq = (jax.lax.optimization_barrier(self.problem.row_sq_norms(data.x))[rows[:, None], idx]
                  if closed_form else None)
        if self.batch_sizes is not None:
            ks = jnp.asarray(self.batch_sizes, jnp.int32)[rows]
            weights = weights & (jnp.arange(weights.shape[1])[None, :] < ks[:, None])
            denominator = jnp.asarray(self.batch_sizes, jnp.float32)[rows]
        elif self.batch_size is not None:
            denominator = self.batch_size
        else:  # full batch: the (public) silo size
            denominator = batch.select(data.sizes)
        return PerExampleGradients(self.problem.loss, params, x, y, weights, denominator, self.problem, sq), state
