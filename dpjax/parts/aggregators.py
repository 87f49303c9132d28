"""Aggregators: how the server combines the silos' messages, and the sensitivity of the result.

An aggregator is a part of the one signature (``dpjax.engine.roles``):
``update(Sensitive, state, ctx) -> (Sensitive, state)`` over the round's ``ctx.batch``, the first part of the round that
combines the silos. Its output's bound is what one unit can move the aggregate by: a record lives in one silo, so the
largest available silo's bound (``"sum"``), divided by the public number of reports ``M_r`` (``"mean"``). With noise on
the server (``placement="server"``) that is the sensitivity the privatizer reads. An aggregator that changes what the
analyzer sees (a shuffler) says so host-side: ``aggregation_event(silo_sizes)``
(``dpjax.accounting.shuffle.ShuffleEvent``), which the run's DP plan dispatches to.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from dpjax import _validate, keys
from dpjax.accounting.shuffle import ShuffleEvent
from dpjax.engine.contract import AGGREGATIONS
from dpjax.engine.roles import Context, Gated, Sensitive, Stateless
from dpjax.primitives import sampling as sampling_lib

PyTree = Any


def aggregate(messages: PyTree, available: jax.Array, how: str = "mean") -> PyTree:
    """Server aggregate of the available silos' messages.

    ``"mean"``: ``sum_{i in S_r} g_i / M_r`` (the papers' algorithms). ``"sum"``: ``sum_{i in S_r} g_i`` (the ISRL-DP
    authors' MNIST/insurance scripts; equivalent to multiplying the step size by ``M_r``)."""
    _validate.check_choice("aggregation", how, AGGREGATIONS)
    weights = available.astype(jnp.float32)
    count = jnp.maximum(jnp.sum(weights), 1.0)

    def combine(leaf):
        total = jnp.tensordot(weights.astype(leaf.dtype), leaf, axes=1)
        return total / count.astype(leaf.dtype) if how == "mean" else total

    return jax.tree_util.tree_map(combine, messages)


def _canonical_order(rows: jax.Array) -> jax.Array:
    """A permutation that sorts the rows ``[N, P]`` by four fixed projections.

    Each key is a per-row reduction, so it does not depend on the row's position; the sorted order (hence the float sum
    over it) is a function of the multiset of rows unless two *different* rows tie on all four keys."""
    p = rows.shape[1]
    j = jnp.arange(1, p + 1, dtype=rows.dtype)
    proj = [jnp.sum(rows * jnp.cos(j * (0.618034 + k)), axis=1) for k in range(4)]
    return jnp.lexsort(tuple(reversed(proj)))


def shuffle_reports(messages: PyTree, available: jax.Array, key: jax.Array):
    """The shuffler: the available silos' reports, uniformly permuted.

    Returns ``(reports [N, P], present [N])`` with the silos' messages flattened to vectors; absent silos' rows are zero
    and ``present`` false. The permutation comes from the ``key`` given (use the round's ``"shuffle"`` stream)."""
    flat = jax.vmap(lambda t: ravel_pytree(t)[0])(messages)
    flat = jnp.where(available[:, None], flat, 0.0)
    perm = jax.random.permutation(key, flat.shape[0])
    return flat[perm], available[perm]


def shuffled_aggregate(messages: PyTree, available: jax.Array, key: jax.Array, how: str = "mean") -> PyTree:
    """Server aggregate behind a shuffler (ISRL-DP Section 5, Shuffled Noisy MB-SGD).

    The reports of the available silos are shuffled (``shuffle_reports``) and the server sums them in a canonical order,
    so its output is a function of the *multiset* of reports only: exactly (bitwise) invariant to the shuffler's
    permutation and to which silo sent what. ``"mean"`` divides by ``M_r``, the number of reports (public)."""
    _validate.check_choice("aggregation", how, AGGREGATIONS)
    one = jax.tree_util.tree_map(lambda leaf: leaf[0], messages)
    _, unravel = ravel_pytree(one)
    reports, present = shuffle_reports(messages, available, key)
    total = jnp.sum(reports[_canonical_order(reports)], axis=0)
    if how == "mean":
        total = total / jnp.maximum(jnp.sum(present), 1).astype(total.dtype)
    return unravel(total)


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
    bound = jnp.asarray(message.contribution_bound, jnp.float32)
    if bound.ndim == 0:
        return bound
    return jnp.max(jnp.where(available, bound, 0.0))


def _aggregate_bound(message: Sensitive, available, how: str):
    bound = _largest_bound(message, available)
    if how == "mean":
        return bound / jnp.maximum(jnp.sum(available.astype(jnp.float32)), 1.0)
    return bound


@dataclasses.dataclass(frozen=True)
class Aggregate(Stateless):
    """``"mean"``: ``sum_{i in S_r} g_i / M_r`` (the papers); ``"sum"``: ``sum_{i in S_r} g_i``
    (the ISRL-DP authors' scripts: the step size times ``M_r``).

    Args:
      how: ``"mean"`` or ``"sum"``.
      denominator: a PUBLIC divisor of every silo's message before it is combined (DP-SGD-General's ``U_bar / m``: after
        the silo's noise, so the noise is ``N(0, (z x sensitivity)^2)`` on the clipped sum itself), or None.
      gate: hand the server ``Gated(update, any silo reported)`` so it takes no step
        (and keeps its state) in a round no silo reported (DP-SGD-General's filtering)."""

    how: str = "mean"
    denominator: float | None = None
    gate: bool = False

    roles = ("aggregator",)

    def __post_init__(self):
        _validate.check_choice("aggregation", self.how, AGGREGATIONS)
        if self.denominator is not None:
            _validate.check_positive("denominator", self.denominator)

    def update(self, messages, state, ctx: Context):
        """A ``Sensitive``'s mean (or sum) with its bound; values released already (post-processing of
        noise added inside the silo, e.g. local models) are combined as they are."""
        batch = ctx.batch
        if not isinstance(messages, Sensitive):
            return aggregate(messages, batch.available, self.how), state
        if self.denominator is not None:
            messages = messages.divided(self.denominator)
        value = aggregate(messages.value, batch.available, self.how)
        if self.gate:
            value = Gated(value, jnp.any(batch.available))
        return Sensitive(value, _aggregate_bound(messages, batch.available, self.how), messages.neighboring), state


@dataclasses.dataclass(frozen=True)
class ShuffledAggregate(Stateless):
    """Behind a shuffler (ISRL-DP Section 5): the aggregate is a function of the multiset of
    reports only (``shuffled_aggregate``, the round's ``"shuffle"`` stream).

    Host-side, ``event(silo_sizes)`` is the shuffler's ``ShuffleEvent`` (the central guarantee's accountant,
    ``dpjax.accounting.shuffle``): the fewest reports of any round of ``availability`` (the silos' availability model,
    M) and what the analyzer knows (``participation``, ``isrl_bound``: see ``ShuffleEvent``)."""

    how: str = "mean"
    availability: Any = None
    participation: str = "hidden"
    isrl_bound: bool = True

    roles = ("aggregator",)

    def __post_init__(self):
        _validate.check_choice("aggregation", self.how, AGGREGATIONS)

    def aggregation_event(self, silo_sizes) -> ShuffleEvent:
        if self.availability is None:
            raise ValueError("ShuffledAggregate(availability=None) cannot state its shuffle: give the silos' "
                             "availability model")
        n = len(silo_sizes)
        return ShuffleEvent(min_available(self.availability, n), n, self.participation, self.isrl_bound)

    def update(self, messages: Sensitive, state, ctx: Context) -> tuple[Sensitive, tuple]:
        batch = ctx.batch
        value = shuffled_aggregate(messages.value, batch.available, keys.stream_key(ctx.key, "shuffle"),
                                             self.how)
        return Sensitive(value, _aggregate_bound(messages, batch.available, self.how), messages.neighboring), state
