"""The one part signature, the context every part reads, and the values passed between parts.

A family's round is a fold over stateful parts of ONE signature (``dpjax.engine.chain``), the way
``optax.chain`` folds gradient transformations (the design note ``design/core.md``)::

    init(params, ctx) -> state
    update(value, state, ctx) -> (value, state)

``ctx`` (``Context``) carries what any part may read: the round index, the key (the run key at ``init``, the round key
in ``update``; parts draw from its named streams, ``dpjax.keys``), the run's hyperparameters, the data, the round's
``Batch``, the iterate at the round's start (``params``) and the point the round's clients compute at (``query``). A
part's state lives in the run state across rounds, so a part can remember: a sampler's permutation, an adaptive clip
norm, a tree-aggregation noise buffer, an optimiser's moments, SCAFFOLD's control variates.

A role is a POSITION in the fold, not a signature; what flows::

    data --selection--> Batch --client--> units --clipper--> Sensitive --privatizer / aggregator-->
    Sensitive --server--> params (or Served) --averager--> params

``roles`` (a class attribute of every part) names the positions a part fills; the accountant and
the fold look parts up by it (``Parts.role``). Where the noise goes -- on each silo (ISRL-DP) or
once on the aggregate (central DP) -- is the order of privatizer and aggregator in the fold.

Every part also says, host-side, what it contributes to the run's privacy (the selection's
``event(silo_sizes)``, the clipper's ``event(hparams)``, the privatizer's ``events(hparams, rounds)``,
a shuffling aggregator's ``aggregation_event(silo_sizes)``); a family's ``privacy()`` is their
composition over the rounds (``dpjax.accounting.events``), never re-derived.

**Privacy travels with the value.** The clipper returns a ``Sensitive``: the clipped sum together with the l2 bound of
ONE unit's contribution to it and the neighbouring relation that bound is stated for (``sensitivity = 2 bound`` for
replace-one, ``bound`` for add/remove, the convention of ``dpjax.primitives.clipping``). Dividing by a public constant
divides the bound (``Sensitive.divided``); an aggregator passes on the bound of its output; a privatizer adds
``N(0, (noise_multiplier * sensitivity)^2 I)`` reading the sensitivity from the value it is given. Only privatizers draw
noise. No family computes a sensitivity.

Units (what the clipper clips) are described by the client, not materialised:
``PerExampleGradients`` lets the clipper take the cheapest exact path (the problem's closed form,
ghost norms for flax models, else ``vmap(grad)``); ``PerUnitVectors`` are vectors the client already
computed (local updates, subset gradients, gradient differences, model deltas).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp

from dpjax.accounting.schedules import Neighboring, coerce_enum
from dpjax.engine import silo_sharding

PyTree = Any


class Context(NamedTuple):
    """What every part reads.

    Attributes:
      round: the 0-based round index (int32 scalar; a local loop's context counts its steps).
      key: at ``init`` the run key, in ``update`` the round key (``dpjax.keys.round_key``).
      hparams: the run's hyperparameters (the non-private twin's: noise 0, clip inf).
      data: the run's ``SiloData`` (padded ``[N, n_max, ...]`` records and their sizes), or a ``PooledSiloData``
        (index rows into one record pool) for a family with ``supports_pooled_data``.
      batch: the round's ``Batch`` once the selection has run (None before, and at ``init``).
      params: the iterate at the round's start (the run's params).
      query: where the round's clients compute: ``params``, unless the server keeps the iterate
        elsewhere (AC-SA's ``w_md``, a phase's restart point; a server returns ``Served``)."""

    round: jax.Array
    key: jax.Array
    hparams: Any
    data: Any = None
    batch: Any = None
    params: Any = None
    query: Any = None


class Served(NamedTuple):
    """A server part's value: the new iterate ``params`` and where the next round's clients compute
    (``query``); a server that returns a bare pytree serves its iterate (``query = params``)."""

    params: Any
    query: Any


class Gated(NamedTuple):
    """An aggregate with a flag: ``apply`` False means no silo reported, so the server takes no step."""

    update: Any
    apply: jax.Array


def served(value) -> Served:
    """``value`` as ``Served`` (a bare pytree serves itself)."""
    return value if isinstance(value, Served) else Served(value, value)


class Batch(NamedTuple):
    """The batch selection of one round.

    Attributes:
      silo_ids: int32 ``[M]``, the silos computed this round (their rows, in this
        order), or None: all ``N`` silos (unavailable ones masked by ``available``).
      available: bool ``[M]`` (or ``[N]``): which computed silos report.
      indices: int32 ``[M, B]`` record indices of each silo's batch, or None:
        every row of the silo, weighted by ``weights`` (the gather-free path).
      weights: ``[M, B]`` (or ``[M, n_max]``): 0/1 mask or multiplicities of the records.
      overflow: bool ``[M]``: a silo's batch did not fit its static buffer.
      num_silos: N, the number of silos of the data (static; per-silo keys split over N).
      info: extra per-round facts a part published (e.g. ``{"run": bool[M]}``), or ``{}``."""

    silo_ids: Any
    available: jax.Array
    indices: Any
    weights: jax.Array
    overflow: jax.Array
    num_silos: int
    info: dict = {}

    def rows(self):
        """The data rows of the computed silos: ``silo_ids`` or ``arange(N)``."""
        return jnp.arange(self.num_silos) if self.silo_ids is None else self.silo_ids

    def records(self, tree):
        """The computed silos' batch records of every leaf of ``tree`` (per-silo ``[N, n_max, ...]``
        data; None leaves stay None): ``[M, B, ...]`` rows ``indices`` of silos ``rows()``, or with
        ``indices`` None every row ``[M, n_max, ...]``.

        In a silo-sharded program with all silos computed (``silo_ids`` None) each silo's records
        are gathered within the silo (``vmap``), so the partitioner keeps them on the silo's device;
        otherwise through ``rows()`` (the unsharded program as it always was traced)."""
        if self.silo_ids is None and silo_sharding.sharded():
            if self.indices is None:
                return tree
            return jax.tree_util.tree_map(lambda a: jax.vmap(lambda rows, i: rows[i])(a, self.indices), tree)
        rows = self.rows()
        if self.indices is None:
            return jax.tree_util.tree_map(lambda a: a[rows], tree)
        return jax.tree_util.tree_map(lambda a: a[rows[:, None], self.indices], tree)

    def select(self, tree):
        """Rows ``silo_ids`` of every leaf of ``tree`` (a per-silo ``[N, ...]`` pytree); identity for all silos."""
        if self.silo_ids is None:
            return tree
        return jax.tree_util.tree_map(lambda a: a[self.silo_ids], tree)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["value", "contribution_bound"], meta_fields=["neighboring"])
@dataclasses.dataclass(frozen=True)
class Sensitive:
    """A value about to be released (or already privatized) with its sensitivity.

    Attributes:
      value: the pytree (leading silo axis ``[M, ...]`` for per-silo messages).
      contribution_bound: the largest l2 norm of one unit's contribution to ``value`` (a scalar,
        or ``[M]``: one per silo); ``inf`` when nothing clips (the non-private twin).
      neighboring: the neighbouring relation the sensitivity is stated for."""

    value: PyTree
    contribution_bound: Any
    neighboring: str = "replace-one"

    def __post_init__(self):
        coerce_enum("neighboring", self.neighboring, Neighboring)  # validates; the value is kept as given

    @property
    def sensitivity(self):
        """l2 sensitivity of ``value`` to one unit: ``2 contribution_bound`` (replace-one) or ``contribution_bound`` (add/remove)."""
        return 2.0 * self.contribution_bound if self.neighboring == "replace-one" else self.contribution_bound

    def divided(self, denominator) -> "Sensitive":
        """``value / denominator`` for a PUBLIC denominator (scalar, or ``[M]`` per silo), bound likewise."""
        d = jnp.asarray(denominator)
        per_silo = d.ndim == 1

        def div(t):
            dd = d.astype(t.dtype)
            return t / (dd.reshape((-1,) + (1,) * (t.ndim - 1)) if per_silo else dd)

        return Sensitive(jax.tree_util.tree_map(div, self.value), self.contribution_bound / d.astype(jnp.float32), self.neighboring)

    def replace(self, **kw) -> "Sensitive":
        return dataclasses.replace(self, **kw)


# -------------------------------------- Units: what a client asks the clipper to clip (one silo row per leading index)
@dataclasses.dataclass(frozen=True)
class PerExampleGradients:
    """For every silo, ``sum_j w_j clip(grad loss(params, x_j, y_j))`` divided by ``denominator``.

    Attributes:
      loss: per-example ``loss(params, x, y)`` (static).
      params: the point the gradients are taken at.
      x, y: ``[M, B, ...]`` the silos' records (gathered rows, or every row).
      weights: ``[M, B]`` 0/1 mask or multiplicities.
      denominator: the public divisor, scalar or ``[M]`` (``K``, ``K_i``, or the silo size).
      problem: the problem (the clipper looks for a closed form or ghost norms on it).
      row_sq_norms: optional precomputed ``||x_j||^2`` ``[M, B]`` (GLM closed form).
      reduce: False keeps the clipped per-example vectors ``[M, B, P]`` (local randomizers)."""

    loss: Callable
    params: PyTree
    x: jax.Array
    y: jax.Array
    weights: jax.Array
    denominator: Any = 1.0
    problem: Any = None
    row_sq_norms: Any = None
    reduce: bool = True


@dataclasses.dataclass(frozen=True)
class PerUnitVectors:
    """Vectors the client computed, one unit per leading index of ``[M, U, ...]`` (or ``[M, ...]``
    with ``per_silo=True``: one unit per silo), with weights ``[M, U]`` (or ``[M]``); the clipper
    clips each unit and sums them per silo, then divides by ``denominator``."""

    vectors: PyTree
    weights: Any = None
    denominator: Any = 1.0
    per_silo: bool = False


@dataclasses.dataclass(frozen=True)
class FactoredDeltas(PerUnitVectors):
    """One unit per silo whose leaf ``kernel_index`` (of ``jax.tree.leaves(vectors)``) is also given in factored form:
    silo i's ``X_i^T h_i`` with ``records`` ``X`` [M, R, d], ``h`` [M, R, w] and the rows' Gram ``X_i X_i^T`` [M, R, R]
    (``dpjax.engine.input_dense``). ``vectors`` holds every leaf, the kernel's materialised too, so a clipper that does
    not know the form clips the same deltas; one that does (``AdaptiveClipMean``) takes the norms from the Gram and the
    clipped sum as one matmul, and XLA drops the unused [M, d, w] buffer.

    ``live_chunk`` k (static, or None): the units are a Poisson buffer whose available silos come first and the client
    trained them k at a time; the clipper may then sum the kernels over the first ``ceil((last available + 1) / k)``
    chunks of k rows only (``input_dense.factored_weighted_sum``), skipping the buffer's empty tail. Such a client
    may hand ``records`` as a function of n returning the first n silos' records (gathered again where the sum needs
    them) and the kernels' squared norms ``kernel_sq_norms`` [M] (``input_dense.factored_sq_norms`` of each silo's Gram
    and h, formed where they were) instead of the Gram."""

    kernel_index: int = 0
    records: Any = None
    h: Any = None
    gram: Any = None
    live_chunk: int | None = None
    kernel_sq_norms: Any = None


# ----------------------------------------------------------------------------- The one signature
ROLES = ("selection", "client", "clipper", "privatizer", "aggregator", "server", "averager")


@runtime_checkable
class Part(Protocol):
    """Every part of a round: ``roles`` (the positions it fills, ``ROLES``), ``init`` and ``update``."""

    roles: tuple

    def init(self, params, ctx: Context) -> Any: ...

    def update(self, value, state, ctx: Context) -> tuple[Any, Any]: ...


class Stateless:
    """Base of the parts that keep nothing across rounds: ``init`` is ``()``."""

    def init(self, params, ctx: Context):
        return ()


def released(value):
    """The pytree a ``Sensitive`` carries (a bare pytree as it is): what a server steps with."""
    return value.value if isinstance(value, Sensitive) else value
