"""The one generic round: a family's parts composed like ``optax.chain``.

A family is a declaration -- its static config plus one part per role
(``Parts``, built by ``parts(shape)``) -- and this module's ``ChainFamily``
gives it ``init``, ``step``, ``params``, ``output_params`` and ``privacy``::

    batch  = selection.update(...)                  # which silos and records
    query  = server.query(params, ...)              # where clients compute (w, or AC-SA's w_md)
    units  = client.update(query, batch, ...)       # what each silo computes (not yet clipped)
    msgs   = clipper.update(units, ...)             # clipped sums + their sensitivity (Sensitive)
    placement "silo":   msgs = privatizer(msgs); agg = aggregator(msgs)     # local / ISRL-DP
    placement "server": agg = aggregator(msgs);  agg = privatizer(agg)      # central DP
    params = server.update(agg.value, params, ...)  # any optax optimizer, projection
    averaged = averager.update(...)                 # the output rule
    metrics = {..., **part.metrics(new_state, batch)}  # optional: a part's own round diagnostics

Every part's state is carried in ``ChainState`` across rounds. The privacy of
the run is the composition of the parts' events over the rounds
(``dpjax.accounting.plan.DpPlan``: selection x clipper x privatizer x rounds);
the noise a run adds is ``noise_multiplier x`` the sensitivity the clipper
returned, so both consumers -- the compiled round and the accountant -- read
the same parts.

The non-private twin (``private=False``) runs the same compiled round with
``FamilyBase.run_hparams``: noise multipliers 0 and clip norms ``inf``
(bit-identical to a private run with those values).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.accounting.plan import DpPlan
from dpjax.accounting.privacy_spec import NoPrivacy, PrivacySpec
from dpjax.engine import silo_blocks
from dpjax.engine.contract import FamilyBase
from dpjax.engine.roles import Context
from dpjax.engine.silo_sharding import gather_silos, on_silo_devices

PyTree = Any
PLACEMENTS = ("silo", "server")


class DataShape(NamedTuple):
    """The static facts of the data a family's parts may depend on.

    ``records``: ``(x, y)`` as ``jax.ShapeDtypeStruct`` of the padded silo
    records ``[N, n_max, ...]`` (a client whose state carries per-record work
    across rounds, e.g. DIFF2's previous-iterate passes, shapes it at ``init``
    from them); None where only the silo sizes are known (privacy, output rule).
    """

    num_silos: int
    n_max: int
    records: Any = None

    @classmethod
    def of(cls, data) -> "DataShape":
        records = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (data.x, data.y))
        return cls(int(data.num_silos), int(data.n_max), records)

    @classmethod
    def of_sizes(cls, silo_sizes) -> "DataShape":
        sizes = [int(n) for n in silo_sizes]
        return cls(len(sizes), max(sizes) if sizes else 0)


@dataclasses.dataclass(frozen=True)
class Roles:
    """One value per role, in the order the round runs them: the parts themselves (``Parts``) or
    the state each part carries across rounds (``ChainState``)."""

    selection: Any
    client: Any
    clipper: Any
    privatizer: Any
    aggregator: Any
    server: Any
    averager: Any


_ROLES = tuple(f.name for f in dataclasses.fields(Roles))


@dataclasses.dataclass(frozen=True)
class Parts(Roles):
    """A family's declaration: one part per role (``Roles``) and where the noise goes.

    ``log_batches`` adds each round's batch (indices, weights, available) to
    the round metrics (for tests and audits).
    """

    placement: str = "silo"
    log_batches: bool = False

    def __post_init__(self):
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement={self.placement!r} must be one of {PLACEMENTS}")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ChainState(Roles):
    """The run state: every part's state (``Roles``), the iterate, the round counter and the run's hparams."""

    params: PyTree
    round: jax.Array
    hparams: Any


def _silo_sizes(silo_sizes) -> tuple[int, ...]:
    if isinstance(silo_sizes, int) or getattr(silo_sizes, "ndim", 1) == 0:
        return (int(silo_sizes),)
    sizes = tuple(int(n) for n in silo_sizes)
    if not sizes:
        raise ValueError("silo_sizes=[] must name at least one silo")
    return sizes


def float32_multiplier(noise_std: float, divisor: float, run_std: Callable, neighbours: int = 2) -> float:
    """The float32 noise multiplier for an absolute ``noise_std``: ``float32(noise_std / divisor)`` or,
    where that one misses, the first of its ``neighbours`` float32 neighbours above, then below, whose
    run std ``run_std(z)`` (the float32 product the compiled round forms from z) is exactly
    ``float32(noise_std)``; the quotient itself where none is. Exactly 0 for ``noise_std = 0``."""
    if noise_std == 0:
        return 0.0
    target = np.float32(noise_std)
    z = np.float32(noise_std / divisor)
    candidates = [z]
    for direction in (np.float32(np.inf), np.float32(-np.inf)):
        c = z
        for _ in range(neighbours):
            c = np.nextafter(c, direction)
            candidates.append(c)
    exact = [c for c in candidates if run_std(c) == target]
    return float(exact[0] if exact else z)


def _part_metrics(part, state, batch) -> dict:
    """A part's own per-round metrics: its optional ``metrics(state, batch) -> dict`` of what the round
    did (public diagnostics, e.g. DIFF2's restart flag and noise std, the users of a shuffle-SCO
    round), read after the round from the part's new state and the round's batch."""
    return dict(part.metrics(state, batch)) if hasattr(part, "metrics") else {}


class ChainFamily(FamilyBase):
    """A family whose round is its ``parts(shape)`` composed by the generic step (mix into a frozen
    dataclass next to ``FamilyBase``'s fields; set ``hparams_type`` and define ``parts``)."""

    def parts(self, shape: DataShape) -> Parts:
        raise NotImplementedError(f"{type(self).__name__} declares no parts")

    @property
    def supports_silo_blocks(self) -> bool:
        """Whether the round is the generic ``step`` (``engine.run(..., silo_block=...)``)."""
        return type(self).step is ChainFamily.step

    # -- the compiled part -------------------------------------------------
    def init(self, params, hparams, data, run_key) -> ChainState:
        hp = self.run_hparams(hparams)
        p = self.parts(DataShape.of(data))
        return ChainState(selection=p.selection.init(data, run_key), client=p.client.init(params),
                          clipper=p.clipper.init(params, hp), privatizer=p.privatizer.init(params),
                          aggregator=p.aggregator.init(params), server=p.server.init(params, hp),
                          averager=p.averager.init(params, run_key), params=params, round=jnp.zeros((), jnp.int32),
                          hparams=hp)

    def step(self, state: ChainState, data, key) -> tuple[ChainState, dict]:
        p = self.parts(DataShape.of(data))
        ctx = Context(state.round, key, state.hparams)
        if silo_blocks.active() is not None:  # the per-silo stage a block of silos at a time
            return self._blocked_step(p, state, data, ctx)
        batch, selection = p.selection.update(state.selection, data, ctx)
        query = p.server.query(state.params, state.server, ctx)
        units, client = p.client.update(query, batch, data, state.client, ctx)
        messages, clipper = p.clipper.update(units, state.clipper, ctx)
        return self._server_step(p, state, ctx, batch, messages, selection, client, clipper, state.privatizer)

    def _blocked_step(self, p: Parts, state: ChainState, data, ctx: Context) -> tuple[ChainState, dict]:
        """``step`` with selection, client, clipper and (placement "silo") the privatizer run on blocks of
        silos (``dpjax.engine.silo_blocks``); the aggregation and the server update as in ``step``."""
        query = p.server.query(state.params, state.server, ctx)
        local_noise = p.placement == "silo"

        def stage(per_silo, shared):
            data, (selection, client, clipper, privatizer) = per_silo
            query, ctx = shared
            batch, selection = p.selection.update(selection, data, ctx)
            if batch.silo_ids is not None:
                raise ValueError("silo_block: a blocked run computes every silo each round; this family's "
                                 "selection computes a random subset (use full or random availability)")
            units, client = p.client.update(query, batch, data, client, ctx)
            messages, clipper = p.clipper.update(units, clipper, ctx)
            if local_noise:
                messages, privatizer = p.privatizer.update(messages, batch, privatizer, ctx)
            bound_per_silo = jnp.ndim(messages.bound) > 0
            per = (batch._replace(num_silos=None), messages.replace(bound=messages.bound if bound_per_silo else None),
                   (selection, client, clipper, privatizer))
            return per, (None if bound_per_silo else messages.bound)

        states = (state.selection, state.client, state.clipper, state.privatizer if local_noise else None)
        (batch, messages, states), bound = silo_blocks.run_round_stage(
            stage, (data, states), (query, ctx), data.sizes, data.num_silos)
        batch = batch._replace(num_silos=data.num_silos)
        if bound is not None:
            messages = messages.replace(bound=bound)
        selection, client, clipper, privatizer = states
        return self._server_step(p, state, ctx, batch, messages, selection, client, clipper,
                                 privatizer if local_noise else state.privatizer, blocked=True)

    def _server_step(self, p: Parts, state: ChainState, ctx: Context, batch, messages, selection, client, clipper,
                     privatizer, blocked: bool = False) -> tuple[ChainState, dict]:
        """The rest of the round from the silos' clipped messages: per-silo noise (placement "silo", unless
        the blocked stage added it), aggregation, central noise (placement "server"), server update,
        averager and the round's metrics."""
        # gather_silos: identity unless the run's silo axis is sharded (then the aggregator reduces
        # the replicated [N, ...] messages in the unsharded order; dpjax.engine.silo_sharding).
        # Per-silo noise (placement "silo") is added on the silo's device before the gather
        # (on_silo_devices); noise added once to the aggregate comes after it.
        if p.placement == "silo":
            if not blocked:  # (the blocked stage added it on the silos' devices)
                messages, privatizer = p.privatizer.update(messages, batch, state.privatizer, ctx)
                messages = messages.replace(value=on_silo_devices(messages.value))
            update, aggregator = p.aggregator.update(*gather_silos((messages, batch)), state.aggregator, ctx)
        else:
            update, aggregator = p.aggregator.update(*gather_silos((messages, batch)), state.aggregator, ctx)
            update, privatizer = p.privatizer.update(update, batch, state.privatizer, ctx)
        params, server = p.server.update(update.value, state.params, state.server, ctx)
        averager = p.averager.update(state.averager, state.params, params, ctx)
        metrics = {"num_available": jnp.sum(batch.available),
                   "sampling_overflow": jnp.any(batch.overflow & batch.available)}
        if p.log_batches:
            metrics.update(indices=batch.indices, index_mask=batch.weights, available=batch.available)
        new = ChainState(selection, client, clipper, privatizer, aggregator, server, averager, params,
                         state.round + 1, state.hparams)
        for role in _ROLES:
            metrics.update(_part_metrics(getattr(p, role), getattr(new, role), batch))
        return new, metrics

    def params(self, state: ChainState) -> PyTree:
        return state.params

    def output_params(self, state: ChainState) -> PyTree:
        # the averager does not depend on the data: any shape gives the same part
        return self.parts(DataShape(1, 1)).averager.value(state.averager, state.params, state.round)

    # -- privacy -----------------------------------------------------------
    def dp_plan(self, silo_sizes, hparams, group_size: int = 1) -> DpPlan:
        """selection x clipper x privatizer x rounds (x the aggregator's event, a shuffler's), from the
        parts the compiled round runs; ``group_size`` g protects any g records at once."""
        sizes = _silo_sizes(silo_sizes)
        p = self.parts(DataShape.of_sizes(sizes))
        aggregation = p.aggregator.event(sizes) if hasattr(p.aggregator, "event") else None
        return DpPlan(p.selection.event(sizes), p.clipper.event(hparams),
                      p.privatizer.events(hparams, self.num_rounds), self.num_rounds, type(self).__name__,
                      aggregation, group_size)

    def message_sensitivity(self, hparams, silo_sizes):
        """The l2 sensitivity of every silo's message the privatizer adds noise to, as the compiled
        round computes it (float32): the clipper's bound (``bound_of``) for the client's public
        denominator (``denominator``) of each silo. A float, or one value per silo ``[N]``."""
        sizes = _silo_sizes(silo_sizes)
        p = self.parts(DataShape.of_sizes(sizes))
        if p.placement != "silo":
            raise ValueError(f"{type(self).__name__}: the aggregate's sensitivity depends on the round's reports "
                             "(placement='server'); use its privacy spec")
        message = p.clipper.bound_of(hparams, p.client.denominator(np.asarray(sizes, np.float32)))
        sens = np.asarray(message.sensitivity, np.float64)
        return float(sens) if sens.ndim == 0 else sens

    def noise_multiplier_for(self, noise_std, hparams, silo_sizes):
        """The noise multiplier whose std is ``noise_std`` (absolute, e.g. a paper's calibration of
        sigma): ``noise_std / message_sensitivity(hparams, silo_sizes)``, per silo where either is;
        exactly 0 for ``noise_std = 0``. Of the float32 multipliers next to the quotient, the one
        whose run std (``z x sensitivity`` in float32) is exactly ``float32(noise_std)``, where one is."""
        std = np.asarray(noise_std, np.float64)
        if np.any(std < 0) or not np.all(np.isfinite(std)):
            raise ValueError(f"noise_std={noise_std!r} must be finite and >= 0")
        sens = np.broadcast_to(np.asarray(self.message_sensitivity(hparams, silo_sizes), np.float64), std.shape)
        if np.any((std > 0) & ~np.isfinite(sens)):
            raise ValueError(f"noise_std={noise_std!r} with an unbounded message (clip norm inf): no noise "
                             "multiplier gives it")
        z = np.array([float32_multiplier(s, c, lambda z, c=np.float32(c): np.float32(z * c))
                      for s, c in zip(std.reshape(-1), sens.reshape(-1))])
        return float(z[0]) if std.ndim == 0 else tuple(float(x) for x in z)

    def privacy(self, silo_sizes, hparams, group_size: int = 1) -> PrivacySpec:
        """The run's guarantee: its parts' events composed over the rounds (``dp_plan(...).spec()``);
        ``group_size`` g protects any g records at once."""
        self.check_hparams(hparams)
        if not getattr(self, "private", True):
            plan = self.dp_plan(silo_sizes, hparams, group_size)
            return NoPrivacy(f"{type(self).__name__}(private=False) is the non-private twin",
                             plan.clip.relation.value, plan.selection.unit.value)
        return self.dp_plan(silo_sizes, hparams, group_size).spec()
