"""Clippers: the only parts that bound what one unit contributes, hence where sensitivity comes from.

A clipper is a part of the one signature (``dpjax.engine.roles``): ``update(units, state, ctx) -> (Sensitive, state)``:
it clips the units a client described and returns their per-silo sum (divided by the client's public denominator)
together with the bound of one unit's contribution and the neighbouring relation (``dpjax.engine.roles.Sensitive``).
Host-side, ``event(hparams)`` names that relation for the accountant.

``ClipPerUnit`` takes the cheapest exact path for per-example gradients: the problem's closed form (GLMs:
``weighted_grad_sum`` with ``row_sq_norms``), ghost norms for flax models (``weighted_grad_sum`` without per-example
gradients, ``dpjax.primitives.ghost_clipping``), else ``vmap(grad)`` (``dpjax.primitives.clipping``). A clip norm of
``inf`` (the non-private twin) multiplies every unit by exactly 1.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from dpjax.accounting.events import ClipEvent
from dpjax.engine.problem import has_closed_form_clipping
from dpjax.engine.roles import Context, PerExampleGradients, PerUnitVectors, Sensitive, Stateless
from dpjax.primitives import clipping


def _silo_clipped_sum(units: PerExampleGradients, clip_norm, neighboring: str):
    """``sum_j w_j clip_C(grad loss(params, x_j, y_j))`` of every silo ``[M, ...]``."""
    problem, params = units.problem, units.params
    closed_form = problem is not None and has_closed_form_clipping(problem)
    ghost = problem is not None and not closed_form and hasattr(problem, "weighted_grad_sum")

    def one_silo(x, y, w, sq):
        if closed_form:
            return problem.weighted_grad_sum(params, x, y, w.astype(x.dtype), clip_norm, row_sq_norms=sq)
        if ghost:
            return problem.weighted_grad_sum(params, x, y, w.astype(x.dtype), clip_norm)
        grads = clipping.per_example_grads(units.loss, params, x, y)
        return clipping.clipped_sum(grads, clip_norm, w, neighboring).total

    if units.row_sq_norms is not None:
        sq = units.row_sq_norms
    elif closed_form:  # never zeros: a closed form fed zero row norms would clip nothing
        sq = jax.vmap(problem.row_sq_norms)(units.x)
    else:
        sq = jnp.zeros(units.weights.shape)
    return jax.vmap(one_silo)(units.x, units.y, units.weights, sq)


@dataclasses.dataclass(frozen=True)
class ClipPerUnit(Stateless):
    """Clip every unit (an example's gradient, or a client-computed vector) to ``C``.

    Args:
      clip_field: the hparams field holding ``C``.
      neighboring: the neighbouring relation the bound is stated for
        (``"replace-one"``: sensitivity ``2C``; ``"add-remove"``: ``C``).
      unit_records: how many records one unit holds, for the accountant (1: individual
        clipping; s: batch clipping of s-record subsets, DP-SGD-General)."""

    clip_field: str = "clip_norm"
    neighboring: str = "replace-one"
    unit_records: int = 1

    roles = ("clipper",)

    def update(self, units, state, ctx: Context) -> tuple[Sensitive, tuple]:
        clip_norm = getattr(ctx.hparams, self.clip_field)
        if isinstance(units, PerExampleGradients):
            if not units.reduce:
                raise ValueError("ClipPerUnit sums per-example gradients; a local randomizer needs the "
                                 "clipped vectors themselves (use a vector clipper)")
            total = _silo_clipped_sum(units, clip_norm, self.neighboring)
        elif isinstance(units, PerUnitVectors):
            if units.per_silo:
                total = clipping.clip_per_example(units.vectors, clip_norm)
                if units.weights is not None:
                    total = jax.tree_util.tree_map(
                        lambda t: t * units.weights.astype(t.dtype).reshape((-1,) + (1,) * (t.ndim - 1)), total)
            else:
                total = jax.vmap(lambda v, w: clipping.clipped_sum(v, clip_norm, w, self.neighboring).total)(
                    units.vectors, units.weights)
        else:
            raise ValueError(f"units={type(units).__name__} is not a unit description ClipPerUnit knows")
        clipped = Sensitive(total, jnp.asarray(clip_norm, jnp.float32), self.neighboring)
        return clipped.divided(units.denominator), state

    def bound_of(self, hparams, denominator=1.0) -> Sensitive:
        """Host-side: the bound ``update`` gives a message with this public denominator (no value)."""
        return Sensitive(None, jnp.asarray(getattr(hparams, self.clip_field), jnp.float32),
                         self.neighboring).divided(denominator)

    def event(self, hparams) -> ClipEvent:
        return ClipEvent(self.neighboring, self.unit_records)


@dataclasses.dataclass(frozen=True)
class ClipVectors(Stateless):
    """Clip every unit to ``C`` and keep the units apart: the inputs of a local randomizer (P_vec,
    Cheu et al. 2022, Algorithm 2: vectors of norm <= L), ``[M, U, ...]`` with bound ``C``.

    Units outside the batch (weight 0) are clipped too; the randomizer masks them with the batch's weights."""

    clip_field: str = "clip_norm"
    neighboring: str = "replace-one"

    roles = ("clipper",)

    def update(self, units, state, ctx: Context) -> tuple[Sensitive, tuple]:
        clip_norm = getattr(ctx.hparams, self.clip_field)
        if isinstance(units, PerExampleGradients):
            def one_silo(x, y):
                return clipping.clip_per_example(clipping.per_example_grads(units.loss, units.params, x, y), clip_norm)

            vectors = jax.vmap(one_silo)(units.x, units.y)
        elif isinstance(units, PerUnitVectors) and not units.per_silo:
            vectors = jax.vmap(clipping.clip_per_example, in_axes=(0, None))(units.vectors, clip_norm)
        else:
            raise ValueError(f"units={type(units).__name__} are not per-unit vectors ClipVectors can keep apart")
        return Sensitive(vectors, jnp.asarray(clip_norm, jnp.float32), self.neighboring), state

    def bound_of(self, hparams, denominator=1.0) -> Sensitive:
        """Host-side: the bound of every unit, ``C``."""
        return Sensitive(None, jnp.asarray(getattr(hparams, self.clip_field), jnp.float32), self.neighboring)

    def event(self, hparams) -> ClipEvent:
        return ClipEvent(self.neighboring)
