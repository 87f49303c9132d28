"""The server part, the output averager, and the model-averaging server of local-update families.

A server is a part of the one signature (``dpjax.engine.roles``): ``update(aggregate, state, ctx)
-> (params, state)`` from the round's iterate ``ctx.params``. ``OptaxServer`` is the one server
optimizer of the composed families: any optax ``GradientTransformation`` at unit step, then ``w - eta u`` with the run's
traced step size. The averager is the last part of the fold: ``update(params, state, ctx)`` folds the round into its
state and passes the params on; ``value(state, params, rounds_done)`` reads the output rule's point out of its state.
The AC-SA server is ``dpjax.parts.acsa.AcsaServer``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from dpjax.engine.averaging import IterateAverager
from dpjax.engine.roles import Context, Gated, Stateless, released, served
from dpjax.parts.aggregators import aggregate
from dpjax.primitives.projection import project_l2_ball


@dataclasses.dataclass(frozen=True)
class OptaxServer:
    """Any optax transformation at unit step size, then ``Proj_W(w - eta u)`` with the run's traced
    ``eta = hparams.<lr_field>`` (so a grid over step sizes is one compiled program):
    ``optax.identity()`` is SGD (``w - eta g``, bit for bit: ``-(eta g)`` is exact),
    ``optax.trace(0.9)`` heavy ball (``optax.sgd(eta, momentum=0.9)``), ``optax.scale_by_adam()``
    Adam (``optax.adam(eta)``), ``optax.scale_by_yogi()`` Yogi, ...

    dpjax's ``project_l2_ball`` returns a point inside the ball multiplied by exactly 1 (optax's ``projection_l2_ball``
    does not guarantee it). Given a ``Gated`` update it steps only when ``apply`` holds, and otherwise keeps both the
    iterate and the optimizer state (a round in which no silo ran)."""

    transformation: optax.GradientTransformation = optax.identity()
    projection_radius: float | None = None
    lr_field: str = "learning_rate"

    roles = ("server",)

    def init(self, params, ctx: Context):
        return self.transformation.init(params)

    def update(self, update, state, ctx: Context):
        params, update = ctx.params, released(update)
        gated = isinstance(update, Gated)
        direction, new_state = self.transformation.update(update.update if gated else update, state, params)
        eta = getattr(ctx.hparams, self.lr_field)
        stepped = optax.apply_updates(params, optax.tree.scale(-eta, direction))  # -(eta u): w - eta u exactly
        stepped = project_l2_ball(stepped, self.projection_radius)
        if not gated:
            return stepped, new_state

        def keep(new, old):
            return jax.tree_util.tree_map(lambda a, b: jnp.where(update.apply, a, b), new, old)

        return keep(stepped, params), keep(new_state, state)


@dataclasses.dataclass(frozen=True)
class Averager:
    """The output rule (``dpjax.engine.averaging.IterateAverager``: last, average, window, exponential)."""

    rule: str = "last"
    window: int = 8

    roles = ("averager",)

    @property
    def _rule(self) -> IterateAverager:
        return IterateAverager(self.rule, self.window)

    def init(self, params, ctx: Context):
        return self._rule.init(params)

    def update(self, value, state, ctx: Context):
        """Folds the round that moved ``ctx.params`` to ``value``'s iterate; passes ``value`` on."""
        return value, self._rule.update(state, ctx.params, served(value).params, ctx.round)

    def value(self, state, params, rounds_done):
        return self._rule.value(state, params, rounds_done)


@dataclasses.dataclass(frozen=True)
class ModelAveraging(Stateless):
    """The server of the local-update families (FedAvg; Lowy & Razaviyayn 2023, App. I) on the
    available silos' local models ``[M, ...]``: ``"mean"`` averages them (the paper), ``"sum"``
    adds their summed local updates ``w^i - w`` to the server model (the ISRL-DP authors'
    scripts); then ``Proj_W``. It combines the silos, so it is the round's aggregator too."""

    how: str = "mean"
    projection_radius: float | None = None

    roles = ("server", "aggregator")

    def update(self, models, state, ctx: Context):
        available, params = ctx.batch.available, ctx.params
        if self.how == "mean":
            new = aggregate(models, available, "mean")
        else:
            updates = jax.tree_util.tree_map(lambda m, p: m - p[None], models, params)
            new = optax.tree.add(params, aggregate(updates, available, "sum"))
        return project_l2_ball(new, self.projection_radius), state
