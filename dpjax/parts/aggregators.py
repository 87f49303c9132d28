"""Aggregators: how the server combines the silos' messages, and the sensitivity of the result.

An aggregator is ``init(params) -> state`` and
``update(Sensitive, batch, state, ctx) -> (Sensitive, state)``. Its output's
bound is what one unit can move the aggregate by: a record lives in one silo,
so the largest available silo's bound (``"sum"``), divided by the public
number of reports ``M_r`` (``"mean"``). With noise on the server
(``placement="server"``) that is the sensitivity the privatizer reads.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from dpjax import _validate, keys
from dpjax.engine import federated
from dpjax.engine.roles import Batch, Context, Sensitive
from dpjax.parts.servers import Gated

AGGREGATIONS = ("mean", "sum")


def _largest_bound(message: Sensitive, available):
    bound = jnp.asarray(message.bound, jnp.float32)
    if bound.ndim == 0:
        return bound
    return jnp.max(jnp.where(available, bound, 0.0))


def _aggregate_bound(message: Sensitive, available, how: str):
    bound = _largest_bound(message, available)
    if how == "mean":
        return bound / jnp.maximum(jnp.sum(available.astype(jnp.float32)), 1.0)
    return bound


@dataclasses.dataclass(frozen=True)
class Aggregate:
    """``"mean"``: ``sum_{i in S_r} g_i / M_r`` (the papers); ``"sum"``: ``sum_{i in S_r} g_i``
    (the ISRL-DP authors' scripts: the step size times ``M_r``).

    Args:
      how: ``"mean"`` or ``"sum"``.
      denominator: a PUBLIC divisor of every silo's message before it is combined
        (DP-SGD-General's ``U_bar / m``: after the silo's noise, so the noise is
        ``N(0, (z x sensitivity)^2)`` on the clipped sum itself), or None.
      gate: hand the server ``Gated(update, any silo reported)`` so it takes no step
        (and keeps its state) in a round no silo reported (DP-SGD-General's filtering).
    """

    how: str = "mean"
    denominator: float | None = None
    gate: bool = False

    def __post_init__(self):
        _validate.check_choice("aggregation", self.how, AGGREGATIONS)
        if self.denominator is not None:
            _validate.check_positive("denominator", self.denominator)

    def init(self, params):
        return ()

    def update(self, messages: Sensitive, batch: Batch, state, ctx: Context) -> tuple[Sensitive, tuple]:
        if self.denominator is not None:
            messages = messages.divided(self.denominator)
        value = federated.aggregate(messages.value, batch.available, self.how)
        if self.gate:
            value = Gated(value, jnp.any(batch.available))
        return Sensitive(value, _aggregate_bound(messages, batch.available, self.how), messages.relation), state


@dataclasses.dataclass(frozen=True)
class ShuffledAggregate:
    """Behind a shuffler (ISRL-DP Section 5): the aggregate is a function of the multiset of
    reports only (``federated.shuffled_aggregate``, the round's ``"shuffle"`` stream)."""

    how: str = "mean"

    def __post_init__(self):
        _validate.check_choice("aggregation", self.how, AGGREGATIONS)

    def init(self, params):
        return ()

    def update(self, messages: Sensitive, batch: Batch, state, ctx: Context) -> tuple[Sensitive, tuple]:
        value = federated.shuffled_aggregate(messages.value, batch.available, keys.stream_key(ctx.key, "shuffle"),
                                             self.how)
        return Sensitive(value, _aggregate_bound(messages, batch.available, self.how), messages.relation), state
