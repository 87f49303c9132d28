"""The one generic round: a family's parts folded in order, like ``optax.chain``.

A family is a declaration -- its static config plus its parts in the order the round runs them
(``Parts``, built by ``parts(shape)``) -- and this module's ``ChainFamily`` gives it ``init``,
``step``, ``params``, ``output_params`` and ``privacy``. Every part has the one signature of
``dpjax.engine.roles`` (``init(params, ctx)``, ``update(value, state, ctx)``), and a round is::

    batch, s   = selection.update(data, s, ctx)            # which silos and records
    ctx        = ctx._replace(batch=batch)
    value      = batch
    for part in chain:                                     # e.g. client, clipper, privatizer,
        value, s = part.update(value, s, ctx)              #      aggregator, server, averager
    params, query = served(value)                          # the new iterate, where clients compute next

Where the noise goes is the order of the parts: ``(..., GaussianNoise(), Aggregate(), ...)`` adds it on every silo
(local / ISRL-DP), ``(..., Aggregate(), GaussianNoise(placement="server"), ...)`` once to the aggregate (central DP).
The parts before the first aggregator are the round's per-silo stage: silo blocking (``dpjax.engine.silo_blocks``) runs
exactly that stage a block of silos at a time, and silo sharding gathers the silos' messages between it and the
aggregator; neither is a second round.

Every part's state is carried in ``ChainState.parts`` across rounds (keyed by the part's first role). The privacy of the
run is the composition of the parts' events over the rounds (``dpjax.accounting.events.DpPlan``: selection x clipper x
privatizer x rounds); the noise a run adds is ``noise_multiplier x`` the sensitivity the clipper returned, so both
consumers -- the compiled round and the accountant -- read the same parts.

The non-private twin (``private=False``) runs the same compiled round with ``FamilyBase.run_hparams``: noise multipliers
0 and clip norms ``inf`` (bit-identical to a private run with those values).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.accounting.events import DpPlan
from dpjax.accounting.privacy_spec import NoPrivacy, PrivacySpec
from dpjax.engine import silo_blocks
from dpjax.engine.contract import FamilyBase
from dpjax.engine.roles import ROLES, Context, served
from dpjax.engine.silo_sharding import gather_silos, on_silo_devices

PyTree = Any


class DataShape(NamedTuple):
    """The static facts of the data a family's parts may depend on.

    ``records``: ``(x, y)`` as ``jax.ShapeDtypeStruct`` of the padded silo records ``[N, n_max, ...]`` (a client whose
    state carries per-record work across rounds, e.g. DIFF2's previous-iterate passes, shapes it at ``init`` from them);
    None where only the silo sizes are known (privacy, output rule)."""

    num_silos: int
    n_max: int
    records: Any = None

    @classmethod
    def of(cls, data) -> "DataShape":
        if hasattr(data, "record_structs"):  # PooledSiloData: the shapes, not the N x n_max records
            records = tuple(data.record_structs())
        else:
            records = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (data.x, data.y))
        return cls(int(data.num_silos), int(data.n_max), records)

    @classmethod
    def of_sizes(cls, silo_sizes) -> "DataShape":
        sizes = [int(n) for n in silo_sizes]
        return cls(len(sizes), max(sizes) if sizes else 0)


def roles_of(part) -> tuple:
    """The positions ``part`` fills (its ``roles`` class attribute)."""
    roles = getattr(part, "roles", None)
    if not roles or any(r not in ROLES for r in roles):
        raise ValueError(f"part {type(part).__name__} must declare roles, a tuple of {ROLES}; got {roles!r}")
    return tuple(roles)


def fold(parts, value, states, ctx: Context):
    """``value`` through ``parts`` in order (``update(value, state, ctx)`` each); returns the last
    value and the parts' new states (a tuple aligned with ``parts``)."""
    new = []
    for part, state in zip(parts, states):
        value, state = part.update(value, state, ctx)
        new.append(state)
    return value, tuple(new)


def init_all(parts, params, ctx: Context) -> tuple:
    """Every part's ``init(params, ctx)``, a tuple aligned with ``parts``."""
    return tuple(part.init(params, ctx) for part in parts)


def _inner_chain(part) -> tuple:
    """A local loop's inner chain (its ``inner`` tuple of parts), or ``()``; a wrapper's single ``inner``
    part (an audit's mutant) is not a chain."""
    inner = getattr(part, "inner", ())
    return inner if isinstance(inner, tuple) else ()


@dataclasses.dataclass(frozen=True)
class Parts:
    """A family's declaration: its batch selection and the round's other parts in fold order.

    ``log_batches`` adds each round's batch (indices, weights, available) to the round metrics (for tests and audits).
    """

    selection: Any
    chain: tuple
    log_batches: bool = False

    def __post_init__(self):
        object.__setattr__(self, "chain", tuple(p for p in self.chain if p is not None))
        if "selection" not in roles_of(self.selection):
            raise ValueError(f"selection={type(self.selection).__name__} is not a batch selection part")
        keys = [roles_of(p)[0] for p in self.chain]
        if len(set(keys)) != len(keys):
            raise ValueError(f"parts {keys}: each role may lead one part of the chain")

    @property
    def keys(self) -> tuple:
        """The state keys of the chain's parts (each part's first role)."""
        return tuple(roles_of(p)[0] for p in self.chain)

    def _members(self):
        """``(position in the chain, part)`` of every part, a local loop's inner parts (``inner``) at
        their loop's position; the selection at -1."""
        yield -1, self.selection
        for i, part in enumerate(self.chain):
            yield i, part
            for inner in _inner_chain(part):
                yield i, inner

    def role(self, name: str, default=dataclasses.MISSING):
        """The part filling role ``name``: the selection, or the first part of the chain (or of a local
        loop's inner chain) that names it."""
        for _, part in self._members():
            if name in roles_of(part):
                return part
        if default is dataclasses.MISSING:
            raise ValueError(f"these parts fill no {name!r} role: {[type(p).__name__ for p in self.chain]}")
        return default

    def position(self, name: str) -> int:
        """The chain position of the part filling (or whose inner chain fills) role ``name``."""
        for i, part in self._members():
            if name in roles_of(part):
                return i
        raise ValueError(f"these parts fill no {name!r} role: {[type(p).__name__ for p in self.chain]}")

    def with_role(self, name: str, wrap: Callable) -> "Parts":
        """These parts with the one filling role ``name`` replaced by ``wrap(part)`` (in a local loop's
        inner chain too): e.g. an audit's mutant clipper."""
        target = self.role(name)
        if target is self.selection:
            return dataclasses.replace(self, selection=wrap(target))

        def swap(part):
            if part is target:
                return wrap(part)
            inner = _inner_chain(part)
            if any(p is target for p in inner):
                return dataclasses.replace(part, inner=tuple(wrap(p) if p is target else p for p in inner))
            return part

        return dataclasses.replace(self, chain=tuple(swap(p) for p in self.chain))

    @property
    def per_silo_length(self) -> int:
        """How many parts of the chain run per silo: those before the first that combines the silos
        (an aggregator, or a server reading the silos' values)."""
        for i, part in enumerate(self.chain):
            if "aggregator" in roles_of(part):
                return i
        return len(self.chain)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ChainState:
    """The run state: the selection's and every part's state (``parts``, keyed like ``Parts.keys``),
    the iterate, where the next round's clients compute, the round counter and the run's hparams."""

    selection: Any
    parts: dict
    params: PyTree
    query: PyTree
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


def _on_silo_devices(messages):
    """Per-silo messages pinned to their silos' devices (a ``Sensitive``'s value, or a bare pytree)."""
    if hasattr(messages, "replace") and hasattr(messages, "value"):
        return messages.replace(value=on_silo_devices(messages.value))
    return on_silo_devices(messages)


def _blocked(stage, data, selection_state, silo_states, ctx: Context):
    """``stage`` on blocks of silos (``dpjax.engine.silo_blocks``): per-silo outputs stacked ``[N, ...]``,
    a message bound that does not depend on the silo (the clipper's public bound) from the last block."""

    def one_block(per_silo, ctx):
        data, (selection_state, silo_states) = per_silo
        batch, messages, selection_state, silo_states = stage(data, selection_state, silo_states, ctx)
        if batch.silo_ids is not None:
            raise ValueError("silo_block: a blocked run computes every silo each round; this family's "
                             "selection computes a random subset (use full or random availability)")
        bound = getattr(messages, "contribution_bound", None)
        shared_bound = bound is not None and jnp.ndim(bound) == 0
        if shared_bound:
            messages = messages.replace(contribution_bound=None)
        return (batch._replace(num_silos=None), messages, (selection_state, silo_states)), \
            (bound if shared_bound else None)

    (batch, messages, (selection_state, silo_states)), bound = silo_blocks.run_round_stage(
        one_block, (data, (selection_state, silo_states)), ctx._replace(data=None), data.sizes, data.num_silos)
    batch = batch._replace(num_silos=data.num_silos)
    if bound is not None:
        messages = messages.replace(contribution_bound=bound)
    return batch, messages, selection_state, silo_states


class ChainFamily(FamilyBase):
    """A family whose round is its ``parts(shape)`` folded by the generic step (mix into a frozen
    dataclass next to ``FamilyBase``'s fields; set ``hparams_type`` and define ``parts``)."""

    def parts(self, shape: DataShape) -> Parts:
        raise NotImplementedError(f"{type(self).__name__} declares no parts")

    supports_silo_blocks = True
    # True where every part reads the data only through silo_masks / silo_records / sizes (the methods SiloData and
    # PooledSiloData share): the executor then accepts a record pool (dpjax.engine.silos)
    supports_pooled_data = False

    def validate(self, data) -> None:
        """Host-side checks against the data: ``FamilyBase``'s (availability, the sampler's rounds) where the
        family declares them, then every part's own ``validate(data)``."""
        if hasattr(self, "availability"):
            super().validate(data)
        p = self.parts(DataShape.of(data))
        for part in (p.selection,) + p.chain:
            if hasattr(part, "validate"):
                part.validate(data)

    # -- the compiled part -------------------------------------------------
    def init(self, params, hparams, data, run_key) -> ChainState:
        hp = self.run_hparams(hparams)
        p = self.parts(DataShape.of(data))
        ctx = Context(jnp.zeros((), jnp.int32), run_key, hp, data, None, params, params)
        return ChainState(p.selection.init(params, ctx), dict(zip(p.keys, init_all(p.chain, params, ctx))),
                          params, params, jnp.zeros((), jnp.int32), hp)

    def step(self, state: ChainState, data, key) -> tuple[ChainState, dict]:
        p = self.parts(DataShape.of(data))
        ctx = Context(state.round, key, state.hparams, data, None, state.params, state.query)
        cut = p.per_silo_length
        per_silo, rest = p.chain[:cut], p.chain[cut:]
        states = tuple(state.parts[k] for k in p.keys)

        def stage(data, selection_state, silo_states, ctx):
            """The round's per-silo stage: the selection and the parts before the aggregator."""
            ctx = ctx._replace(data=data)
            batch, selection_state = p.selection.update(data, selection_state, ctx)
            value, silo_states = fold(per_silo, batch, silo_states, ctx._replace(batch=batch))
            return batch, value, selection_state, silo_states

        if silo_blocks.active() is not None:  # the per-silo stage a block of silos at a time
            batch, messages, selection, silo_states = _blocked(stage, data, state.selection, states[:cut], ctx)
        else:
            batch, messages, selection, silo_states = stage(data, state.selection, states[:cut], ctx)
        ctx = ctx._replace(batch=batch)
        # on_silo_devices / gather_silos: identity unless the run's silo axis is sharded (then the
        # per-silo messages stay on the silo's device until the aggregator, which reduces the
        # replicated [N, ...] messages in the unsharded order; dpjax.engine.silo_sharding).
        if rest:
            messages = _on_silo_devices(messages)
            messages, batch = gather_silos((messages, batch))
        value, rest_states = fold(rest, messages, states[cut:], ctx._replace(batch=batch))
        params, query = served(value)
        metrics = {"num_available": jnp.sum(batch.available),
                   "sampling_overflow": jnp.any(batch.overflow & batch.available)}
        if p.log_batches:
            metrics.update(indices=batch.indices, index_mask=batch.weights, available=batch.available)
        new_parts = dict(zip(p.keys, silo_states + rest_states))
        new = ChainState(selection, new_parts, params, query, state.round + 1, state.hparams)
        for part, key in zip((p.selection,) + p.chain, ("selection",) + p.keys):
            metrics.update(_part_metrics(part, selection if key == "selection" else new_parts[key], batch))
        return new, metrics

    def params(self, state: ChainState) -> PyTree:
        return state.params

    def output_params(self, state: ChainState) -> PyTree:
        # the averager does not depend on the data: any shape gives the same part
        p = self.parts(DataShape(1, 1))
        averager = p.role("averager", None)
        if averager is None:
            return state.params
        return averager.value(state.parts[roles_of(averager)[0]], state.params, state.round)

    # -- privacy -----------------------------------------------------------
    def dp_plan(self, silo_sizes, hparams, group_size: int = 1) -> DpPlan:
        """selection x clipper x privatizer x rounds (x the aggregator's event, a shuffler's), from the
        parts the compiled round runs; ``group_size`` g protects any g records at once."""
        sizes = _silo_sizes(silo_sizes)
        p = self.parts(DataShape.of_sizes(sizes))
        aggregator = p.role("aggregator", None)
        aggregation = aggregator.aggregation_event(sizes) if hasattr(aggregator, "aggregation_event") else None
        return DpPlan(p.selection.event(sizes), p.role("clipper").event(hparams),
                      p.role("privatizer").events(hparams, self.num_rounds), self.num_rounds, type(self).__name__,
                      aggregation, group_size)

    def message_sensitivity(self, hparams, silo_sizes):
        """The l2 sensitivity of every silo's message the privatizer adds noise to, as the compiled
        round computes it (float32): the clipper's bound (``bound_of``) for the client's public
        denominator (``denominator``) of each silo. A float, or one value per silo ``[N]``."""
        sizes = _silo_sizes(silo_sizes)
        p = self.parts(DataShape.of_sizes(sizes))
        if p.position("privatizer") >= p.per_silo_length:
            raise ValueError(f"{type(self).__name__}: the aggregate's sensitivity depends on the round's reports "
                             "(noise on the aggregate); use its privacy spec")
        message = p.role("clipper").bound_of(hparams, p.role("client").denominator(np.asarray(sizes, np.float32)))
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
                             plan.clip.neighboring.value, plan.selection.unit.value)
        return self.dp_plan(silo_sizes, hparams, group_size).spec()
