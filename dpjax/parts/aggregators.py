"""Aggregators: how the server combines the silos' messages, and the sensitivity of the result.

An aggregator is ``init(params) -> state`` and
``update(Sensitive, batch, state, ctx) -> (Sensitive, state)``. Its output's
bound is what one unit can move the aggregate by: a record lives in one silo,
so the largest available silo's bound (``"sum"``), divided by the public
number of reports ``M_r`` (``"mean"``). With noise on the server
(``placement="server"``) that is the sensitivity the privatizer reads.
An aggregator that changes what the analyzer sees (a shuffler) says so
host-side: ``event(silo_sizes)`` (``dpjax.accounting.shuffle.ShuffleEvent``),
which the run's DP plan dispatches to.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from dpjax import _validate, keys
from dpjax.accounting.shuffle import ShuffleEvent
from dpjax.engine import federated
from dpjax.engine.roles import Batch, Context, Sensitive
from dpjax.parts.servers import Gated
from dpjax.primitives import sampling as sampling_lib

AGGREGATIONS = ("mean", "sum")


def min_available(availability, num_silos: int) -> int:
    """The smallest number of silos any round of ``availability`` can have (M for fixed, N for full)."""
    num_silos = _validate.check_int("num_silos", num_silos, min_value=1)
    availability.validate(num_silos)
    if isinstance(availability, sampling_lib.FullAvailability):
        return num_silos
    if isinstance(availability, sampling_lib.FixedAvailability):
        return availability.num_available
    if isinstance(availability, sampling_lib.RandomAvailability):
        return min(m for m, p in enumerate(availability.pmf, start=1) if p > 0)
    raise ValueError(f"availability={availability!r}: no rule for its smallest round size")


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
    reports only (``federated.shuffled_aggregate``, the round's ``"shuffle"`` stream).

    Host-side, ``event(silo_sizes)`` is the shuffler's ``ShuffleEvent`` (the
    central guarantee's accountant, ``dpjax.accounting.shuffle``): the fewest
    reports of any round of ``availability`` (the silos' availability model,
    M) and what the analyzer knows (``participation``, ``isrl_bound``: see
    ``ShuffleEvent``).
    """

    how: str = "mean"
    availability: Any = None
    participation: str = "hidden"
    isrl_bound: bool = True

    def __post_init__(self):
        _validate.check_choice("aggregation", self.how, AGGREGATIONS)

    def event(self, silo_sizes) -> ShuffleEvent:
        if self.availability is None:
            raise ValueError("ShuffledAggregate(availability=None) cannot state its shuffle: give the silos' "
                             "availability model")
        n = len(silo_sizes)
        return ShuffleEvent(min_available(self.availability, n), n, self.participation, self.isrl_bound)

    def init(self, params):
        return ()

    def update(self, messages: Sensitive, batch: Batch, state, ctx: Context) -> tuple[Sensitive, tuple]:
        value = federated.shuffled_aggregate(messages.value, batch.available, keys.stream_key(ctx.key, "shuffle"),
                                             self.how)
        return Sensitive(value, _aggregate_bound(messages, batch.available, self.how), messages.relation), state
