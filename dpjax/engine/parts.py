"""What the families share outside ``dpjax.parts``: the non-private twin of every family and the
per-call server step.

* ``non_private(hparams)``: the twin mechanism (noise 0, clip norms inf).
  Every non-private twin runs the *same* compiled round as its private
  algorithm with these values instead of a separate code path: clipping by
  ``min(1, inf / ||g||) = 1`` and adding ``0 * z`` are exact, so a private run
  with zero noise and a non-binding clip is bit-identical to its twin.
* ``ServerOptimizer``: any optax factory with a traced learning rate, then
  ``Proj_W`` (``FamilyBase.server_step``).

The composed round of the other families is ``dpjax.engine.chain`` with the
parts of ``dpjax.parts``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax.numpy as jnp
import optax

from dpjax.primitives.projection import project_l2_ball

PyTree = Any


# ---------------------------------------------------------------------------
# The non-private twin
# ---------------------------------------------------------------------------
def non_private(hparams, noise_fields=("noise_multiplier",), clip_fields=("clip_norm",)):
    """``hparams`` with every noise field 0 and every clip norm inf (same shapes).

    Every non-private twin runs the *same* compiled round step as its private
    algorithm with these values instead of a separate code path: two
    differently fused XLA programs can differ in the last bit, one program on
    equal values cannot.
    """
    zero = {f: jnp.zeros_like(jnp.asarray(getattr(hparams, f), jnp.float32)) for f in noise_fields}
    inf = {f: jnp.full_like(jnp.asarray(getattr(hparams, f), jnp.float32), jnp.inf) for f in clip_fields}
    return dataclasses.replace(hparams, **zero, **inf)


# ---------------------------------------------------------------------------
# Server optimizer and projection
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ServerOptimizer:
    """Any optax optimizer factory (``optax.sgd``, ``optax.adam``, ...) with a traced
    learning rate (``optax.inject_hyperparams``), then ``Proj_W``.

    ``init(params, learning_rate)`` puts the run's step size into the optimizer
    state; ``step(params, gradient, opt_state)`` applies the update and projects
    onto the ball of ``projection_radius`` (dpjax's ``project_l2_ball``: a point
    inside the ball is returned multiplied by exactly 1, which optax's
    ``projection_l2_ball`` does not guarantee). With ``optax.sgd`` the result is
    ``Proj_W(w - eta g)`` bit for bit (``-(eta g)`` is exact).
    """

    factory: Callable = optax.sgd
    projection_radius: float | None = None
    options: tuple = ()  # static keyword arguments of the factory, e.g. (("b1", 0.9),)

    def transformation(self, learning_rate=0.0) -> optax.GradientTransformation:
        return optax.inject_hyperparams(self.factory)(learning_rate=learning_rate, **dict(self.options))

    def init(self, params, learning_rate):
        return self.transformation(jnp.asarray(learning_rate, jnp.float32)).init(params)

    def step(self, params, gradient, opt_state):
        updates, opt_state = self.transformation().update(gradient, opt_state, params)
        return project_l2_ball(optax.apply_updates(params, updates), self.projection_radius), opt_state
