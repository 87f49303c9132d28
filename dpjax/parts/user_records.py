"""Parts of user-level DP-SGD on record data (Charles, Ganesh, McKenna, McMahan, Mitchell, Pillutla & Rush,
"Fine-Tuning Large Language Models with User-Level Differential Privacy", 2024, Section 3: ULS and ELS).

The data has one silo per user (``dpjax.engine.users.UserSplit``: ``[num_users, m, ...]`` padded rows with a mask,
or index rows into one record pool). A round's batch is a static buffer of (user, slot) rows:

* ``UserSampling`` (ULS selection): every user independently with the public rate q (the sampled users gathered
  into a buffer of ``capacity``), each with its first ``min(size, k)`` records; ``Batch.indices [M, k]``;
* ``RecordSampling`` (ELS selection): every record among each user's first k independently with rate q (the
  contribution bound: a user has at most k records the sampler can draw), gathered into a buffer of records;
  ``Batch.silo_ids [M]`` the records' users, ``Batch.indices [M, 1]`` their slots;
* ``UserRecordGradients`` (client): the batch's records ``[M, B, ...]`` read through ``data.silo_records`` (both
  data forms), as ``UserRecords``;
* ``ClipUserMean`` (ULS clipper and aggregator): ``sum_u clip_C(mean_{j in u} grad l(w, x_uj))`` -- each sampled
  user's mean gradient clipped as one unit (ghost norms with the user as the example, where the model allows: the
  loss of one "example" is the user's masked mean loss; else ``vmap`` over users of its gradient), divided by the
  public expected number of users: bound C, add/remove one user;
* ``ClipRecords`` (ELS clipper and aggregator): ``sum_j clip_C(grad l(w, x_j))`` over the sampled records (ghost
  clipping, ``dpjax.primitives.ghost_clipping``), divided by the public expected batch: bound C per record, so up to
  ``k C`` per user -- the accountant charges group privacy (``dpjax.accounting.user_dpsgd``). Run on ULS batches it is
  the classic bug of clipping per record while accounting per user (a user moves the sum by up to k C), which the
  user-level audit catches (``dpjax.auditing.user_dpsgd``).

The mean of a user's per-record clipped gradients would also be bounded by C (a mean of vectors of norm <= C); clipping
the user's mean gradient is the ULS of Charles et al. The privatizer is ``GaussianNoise(placement="server")``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from dpjax import _validate, keys
from dpjax.accounting import truncated_poisson
from dpjax.accounting.events import ClipEvent
from dpjax.accounting.user_dpsgd import UserSelectionEvent
from dpjax.engine.roles import Batch, Context, Sensitive, Stateless
from dpjax.primitives import ghost_clipping
from dpjax.primitives import sampling as sampling_lib

__all__ = ["UserSampling", "RecordSampling", "UserRecords", "UserRecordGradients", "ClipUserMean", "ClipRecords",
           "user_mean_loss", "pack_user_labels"]


def _capacity(expected: float, slots: int, declared: int | None) -> int:
    cap = declared if declared is not None else sampling_lib.default_poisson_capacity(math.ceil(expected))
    return max(1, min(cap, slots))


#: ``"truncated"``: truncated Poisson (``dpjax.accounting.truncated_poisson``: a buffer of every candidate on a small
#: population, else of ``truncated_capacity`` rows, the cut charged to delta); ``"buffered"``: the former buffer of
#: ``E + 6 sqrt(E) + 8`` rows whose overflow the engine refuses (nothing charged).
POISSON_SELECTIONS = ("truncated", "buffered")


def _truncating(part) -> bool:
    """The part holds its Poisson batch truncated: the default, with the run's rounds known and no declared capacity."""
    if part.poisson_selection not in POISSON_SELECTIONS:
        raise ValueError(f"poisson_selection={part.poisson_selection!r} must be one of {POISSON_SELECTIONS}")
    return part.poisson_selection == "truncated" and part.num_rounds is not None and part.capacity is None


@dataclasses.dataclass(frozen=True)
class UserSampling(Stateless):
    """ULS: each user w.p. the public ``sampling_rate`` q, with its first ``records_per_user`` k records.

    Args:
      users_per_round: m, the expected number of users a round (the public divisor of the sum).
      sampling_rate: q (declared: under add/remove the number of users is not public).
      records_per_user: k, the records of a sampled user that enter its mean gradient.
      capacity: the static buffer of sampled users (None: ``poisson_selection``'s; a declared one is buffered: more
        sampled users is an overflow, which the engine refuses).
      num_rounds: the run's T (sizes the truncated buffer; None: buffered).
      poisson_selection: ``"truncated"`` (default) or ``"buffered"`` (``POISSON_SELECTIONS``)."""

    users_per_round: int
    sampling_rate: float
    records_per_user: int
    capacity: int | None = None
    num_rounds: int | None = None
    poisson_selection: str = "truncated"

    roles = ("selection",)

    def update(self, data, state, ctx: Context) -> tuple[Batch, Any]:
        n, q = data.num_silos, self.sampling_rate
        key = keys.stream_key(ctx.key, "sampling")
        cut = _truncating(self)
        cap = (truncated_poisson.selection_capacity(n, q, self.num_rounds) if cut else
               _capacity(q * n, n, self.capacity))
        if cap < n:
            ids, available, overflow = sampling_lib.poisson_sample(key, n, n, q, cap, truncate=cut)
        else:
            ids, available, overflow = jnp.arange(n), jax.random.uniform(key, (n,)) < q, jnp.asarray(False)
        width = min(self.records_per_user, data.n_max)
        slots = jnp.broadcast_to(jnp.arange(width), (ids.shape[0], width))
        weights = (slots < data.sizes[ids][:, None]) & available[:, None]
        return Batch(ids, available, slots, weights, jnp.broadcast_to(overflow, available.shape), n), state

    def event(self, silo_sizes) -> UserSelectionEvent:
        """Poisson over the users (the protected units), rate q, m of them expected."""
        sizes = tuple(int(s) for s in silo_sizes)
        eta = (truncated_poisson.run_truncation_mass((len(sizes),), self.sampling_rate, self.num_rounds)
               if _truncating(self) else 0.0)
        return UserSelectionEvent("poisson", sizes, self.users_per_round, "user", sampling_rate=self.sampling_rate,
                                  level="user", records_per_user=self.records_per_user, truncation=eta)


@dataclasses.dataclass(frozen=True)
class RecordSampling(Stateless):
    """ELS: each record among every user's first ``records_per_user`` k w.p. the public ``sampling_rate`` q.

    Args:
      records_per_round: the expected batch (the public divisor of the sum).
      sampling_rate: q.
      records_per_user: k, the contribution bound (a user's records past its first k are never drawn).
      capacity: the static buffer of sampled records (None: ``poisson_selection``'s; a declared one is buffered, from
        ``q x num_users x k`` when buffered and undeclared, an upper bound of the expected batch).
      num_rounds: the run's T (sizes the truncated buffer; None: buffered).
      poisson_selection: ``"truncated"`` (default) or ``"buffered"`` (``POISSON_SELECTIONS``)."""

    records_per_round: int
    sampling_rate: float
    records_per_user: int
    capacity: int | None = None
    num_rounds: int | None = None
    poisson_selection: str = "truncated"

    roles = ("selection",)

    def update(self, data, state, ctx: Context) -> tuple[Batch, Any]:
        n, width = data.num_silos, min(self.records_per_user, data.n_max)
        truncating = _truncating(self)
        cap = (truncated_poisson.selection_capacity(n * width, self.sampling_rate, self.num_rounds) if truncating
               else _capacity(self.sampling_rate * n * width, n * width, self.capacity))
        cut = truncating and cap < n * width
        key = keys.stream_key(ctx.key, "sampling")
        real = jnp.arange(width)[None, :] < jnp.minimum(data.sizes, self.records_per_user)[:, None]
        chosen = (jax.random.uniform(key, (n, width)) < self.sampling_rate) & real
        count = jnp.sum(chosen)
        chosen = chosen.reshape(-1)
        if cut:  # truncated Poisson: the same coins, the first `cap` joined slots from a random start slot
            chosen = sampling_lib.cut_cyclic(jax.random.fold_in(key, sampling_lib.TRUNCATION_STREAM), chosen,
                                             n * width, cap)
        (flat,) = jnp.nonzero(chosen, size=cap, fill_value=0)
        available = jnp.arange(cap) < count
        users, slots = flat // width, flat % width
        overflow = jnp.broadcast_to((count > cap) & (not cut), available.shape)
        return Batch(users, available, slots[:, None], available[:, None], overflow, n), state

    def event(self, silo_sizes) -> UserSelectionEvent:
        """Poisson over the records, rate q; every user a group of at most k of them."""
        sizes = tuple(int(s) for s in silo_sizes)
        eta = 0.0
        if _truncating(self):
            # candidates: every user's first k records; a neighbour adds or removes one user (up to k of them) and
            # one user's row of width slots (module docstring of dpjax.accounting.truncated_poisson)
            k, users = self.records_per_user, len(sizes)
            width = min(k, max(sizes))
            rows = tuple(u * width for u in (users - 1, users, users + 1))
            eta = truncated_poisson.truncation_mass([sum(min(m, k) for m in sizes) + k], rows, self.sampling_rate,
                                                    self.num_rounds)
        return UserSelectionEvent("poisson", sizes, self.records_per_round, "user", sampling_rate=self.sampling_rate,
                                  level="example", records_per_user=self.records_per_user, truncation=eta)


class UserRecords(NamedTuple):
    """The round's records: ``x [M, B, ...]``, ``y [M, B, ...]``, ``weights [M, B]`` (0 on padding), one row per
    user (ULS) or per record (ELS, ``B = 1``)."""

    x: jax.Array
    y: jax.Array
    weights: jax.Array


@dataclasses.dataclass(frozen=True)
class UserRecordGradients(Stateless):
    """The client of both units: the batch's (user, slot) records, gathered (``data.silo_records``)."""

    roles = ("client",)

    def update(self, batch: Batch, state, ctx: Context):
        x, y = ctx.data.silo_records(batch.rows()[:, None], batch.indices)
        return UserRecords(x, y, batch.weights.astype(jnp.float32)), state


def pack_user_labels(y, weights):
    """``y [M, B, ...]`` and ``weights [M, B]`` as one float array ``[M, B, d + 1]`` (the ghost path takes one label
    array per example; integer labels below 2^24 are exact in float32)."""
    flat = y.reshape(y.shape[:2] + (-1,)).astype(jnp.float32)
    return jnp.concatenate([flat, weights[..., None].astype(jnp.float32)], axis=-1)


def user_mean_loss(loss, label_shape, label_dtype):
    """The loss of one user ``(x [B, ...], packed [B, d + 1])``: the weighted mean of its records' losses (the mean
    over its real records)."""
    def user_loss(params, x, packed):
        w = packed[:, -1]
        y = packed[:, :-1].reshape((packed.shape[0],) + label_shape).astype(label_dtype)
        # unrolled over the user's B records (static): every layer call stays visible to the ghost plan (a layer
        # called B times is one shared parameter, its per-user gradient the sum of the calls'), which a vmap
        # inside the loss would hide (ghost_clipping refuses it and falls back to vmap(grad) over users)
        losses = jnp.stack([loss(params, x[j], y[j]) for j in range(x.shape[0])])
        return jnp.sum(jnp.where(w > 0, losses * w, 0.0)) / jnp.maximum(jnp.sum(w), 1.0)

    return user_loss


@dataclasses.dataclass(frozen=True)
class ClipUserMean(Stateless):
    """ULS: every user's mean gradient clipped to C, summed, over the public ``denominator`` (bound C / m,
    add/remove one user). A user with no real record (a padded buffer row) contributes exactly zero."""

    problem: Any
    denominator: float
    clip_field: str = "clip_norm"
    records_per_user: int = 1

    roles = ("clipper", "aggregator")

    def update(self, units: UserRecords, state, ctx: Context) -> tuple[Sensitive, tuple]:
        clip_norm = getattr(ctx.hparams, self.clip_field)
        present = jnp.any(units.weights > 0, axis=1).astype(jnp.float32)
        loss = user_mean_loss(self.problem.loss, units.y.shape[2:], units.y.dtype)
        total = ghost_clipping.ghost_clipped_sum(loss, ctx.query, units.x, pack_user_labels(units.y, units.weights),
                                                 clip_norm, present, "add-remove").total
        return Sensitive(total, jnp.asarray(clip_norm, jnp.float32), "add-remove").divided(self.denominator), state

    def event(self, hparams) -> ClipEvent:
        return ClipEvent("add-remove", self.records_per_user)


@dataclasses.dataclass(frozen=True)
class ClipRecords(Stateless):
    """ELS: every sampled record's gradient clipped to C (ghost clipping), summed over the batch, over the public
    ``denominator`` (bound C / m per record, add/remove one record)."""

    problem: Any
    denominator: float
    clip_field: str = "clip_norm"

    roles = ("clipper", "aggregator")

    def __post_init__(self):
        _validate.check_positive("denominator", self.denominator)

    def update(self, units: UserRecords, state, ctx: Context) -> tuple[Sensitive, tuple]:
        clip_norm = getattr(ctx.hparams, self.clip_field)
        flat = lambda a: a.reshape((-1,) + a.shape[2:])  # noqa: E731
        total = ghost_clipping.ghost_clipped_sum(self.problem.loss, ctx.query, flat(units.x), flat(units.y),
                                                 clip_norm, flat(units.weights), "add-remove").total
        return Sensitive(total, jnp.asarray(clip_norm, jnp.float32), "add-remove").divided(self.denominator), state

    def event(self, hparams) -> ClipEvent:
        return ClipEvent("add-remove", 1)
