"""Server optimizers and output averagers.

A server optimizer is ``init(params, hparams) -> state``,
``query(params, state, ctx) -> params`` (where clients compute this round:
the iterate itself, or AC-SA's query point) and
``update(update, params, state, ctx) -> (params, state)``. An averager is
``init(params, run_key) -> state``, ``update(state, before, after, ctx) ->
state`` and ``value(state, params, rounds_done) -> params`` (the output rule).
The AC-SA server is ``dpjax.parts.acsa.AcsaServer``; ``ModelAveraging`` is the
server of the local-update families (their own step: it reads local models).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpjax.engine import federated
from dpjax.engine.averaging import IterateAverager
from dpjax.engine.roles import Context
from dpjax.primitives.projection import project_l2_ball


@dataclasses.dataclass(frozen=True)
class OptaxServer:
    """Any optax optimizer factory (``optax.sgd``, ``optax.adam``, ...) with a traced learning rate
    (``optax.inject_hyperparams``: the run's ``hparams.<lr_field>`` sits in the optimizer state, so
    a grid over step sizes is one compiled program), then ``Proj_W``.

    dpjax's ``project_l2_ball`` returns a point inside the ball multiplied by
    exactly 1 (optax's ``projection_l2_ball`` does not guarantee it); with
    ``optax.sgd`` the step is ``Proj_W(w - eta g)`` bit for bit (``-(eta g)`` is exact).
    """

    factory: Callable = optax.sgd
    projection_radius: float | None = None
    options: tuple = ()  # static keyword arguments of the factory, e.g. (("b1", 0.9),)
    lr_field: str = "learning_rate"

    def transformation(self, learning_rate=0.0) -> optax.GradientTransformation:
        return optax.inject_hyperparams(self.factory)(learning_rate=learning_rate, **dict(self.options))

    def init(self, params, hparams):
        return self.transformation(jnp.asarray(getattr(hparams, self.lr_field), jnp.float32)).init(params)

    def query(self, params, state, ctx: Context):
        return params

    def update(self, update, params, state, ctx: Context):
        updates, state = self.transformation().update(update, state, params)
        return project_l2_ball(optax.apply_updates(params, updates), self.projection_radius), state


class Gated(NamedTuple):
    """An aggregate with a flag: ``apply`` False means no silo reported, so the server takes no step."""

    update: Any
    apply: jax.Array


@dataclasses.dataclass(frozen=True)
class UnitStepServer:
    """Any optax transformation at unit step size, then ``w - eta u`` with the run's traced
    ``eta = hparams.<lr_field>`` (DP-SGD-General's server: identity = ``w - eta U_bar / m``,
    ``optax.scale_by_adam()`` = Adam, ``optax.trace(0.9)`` = heavy ball).

    Given a ``Gated`` update it steps only when ``apply`` holds, and otherwise keeps both the
    iterate and the optimizer state (a round in which no silo ran).
    """

    transformation: optax.GradientTransformation = optax.identity()
    lr_field: str = "learning_rate"

    def init(self, params, hparams):
        return self.transformation.init(params)

    def query(self, params, state, ctx: Context):
        return params

    def update(self, update, params, state, ctx: Context):
        gated = isinstance(update, Gated)
        direction, new_state = self.transformation.update(update.update if gated else update, state, params)
        eta = getattr(ctx.hparams, self.lr_field)
        stepped = optax.apply_updates(params, optax.tree.scale(-eta, direction))  # -(eta u): w - eta u exactly
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

    @property
    def _rule(self) -> IterateAverager:
        return IterateAverager(self.rule, self.window)

    def init(self, params, run_key):
        return self._rule.init(params)

    def update(self, state, before, after, ctx: Context):
        return self._rule.update(state, before, after, ctx.round)

    def value(self, state, params, rounds_done):
        return self._rule.value(state, params, rounds_done)


@dataclasses.dataclass(frozen=True)
class ModelAveraging:
    """The server of the local-update families (FedAvg; Lowy & Razaviyayn 2023, App. I) on the
    available silos' local models ``[M, ...]``: ``"mean"`` averages them (the paper), ``"sum"``
    adds their summed local updates ``w^i - w`` to the server model (the ISRL-DP authors'
    scripts); then ``Proj_W``."""

    how: str = "mean"
    projection_radius: float | None = None

    def update(self, models, available, params):
        if self.how == "mean":
            new = federated.aggregate(models, available, "mean")
        else:
            updates = jax.tree_util.tree_map(lambda m, p: m - p[None], models, params)
            new = optax.tree.add(params, federated.aggregate(updates, available, "sum"))
        return project_l2_ball(new, self.projection_radius)
