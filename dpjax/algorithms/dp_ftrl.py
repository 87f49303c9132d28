"""DP-FTRL with tree aggregation (Kairouz, McMahan, Song, Thakkar, Thakurta & Xu, "Practical and Private
(Deep) Learning without Sampling or Shuffling", ICML 2021, Algorithm 1, tree restarted every epoch).

No sampling: every silo fixes an order of its records (``order="shuffled-once"``: a permutation drawn
once per run; ``"given"``: the stored order) and round r uses its block ``r mod floor(n_i / B)`` of B
records; an epoch is ``T = floor(n_min / B)`` rounds. Round t:

1. ``g_t = (1/(B N)) sum_i sum_{j in block} clip_C(grad f(theta_{t-1}, x_ij))``: per-example clip, the public mean over
   the batch and the silos (its sensitivity, ``2C/(BN)`` under replace-one, comes from the clipper);
2. the tree privatizer releases the noisy prefix sum of the epoch, ``s_t = sum_{tau <= t} g_tau + sum of
   the noises of the dyadic nodes that make up [1, t]``, each node ``N(0, (z x sensitivity)^2 I)``
   drawn once (``noise_multiplier`` z), and hands on its increment ``s_t - s_{t-1}``: the new node's
   noise minus those of the nodes it completes. Its state holds the O(log T) node noises of the current
   prefix; the tree restarts at every epoch;
3. the server is optax SGD (``momentum`` beta: DP-FTRLM): ``theta_t = theta_{t-1} - eta (s_t - s_{t-1})``,
   i.e. ``theta_t = theta_e - eta s_t`` from the epoch's start ``theta_e``: FTRL on the linearised losses
   with regulariser ``||theta - theta_e||^2 / (2 eta)``.

Privacy (Kairouz et al. 2021, Appendix D, DP-FTRL-TreeRestart; ``compute_rdp_tree_restart`` of tensorflow_privacy): in a
tree of T_e leaves a record enters one leaf, hence at most ``floor(log2 T_e) + 1`` (= ceil(log2(T_e + 1))) of the nodes
the prefix sums use -- the first leaf reaches that many. Each node is a Gaussian release of multiplier z on adaptively
chosen inputs, so one epoch is the Gaussian mechanism of sensitivity ``sqrt(floor(log2 T_e) + 1)`` times a leaf's, i.e.
``(floor(log2 T_e) + 1) / (2 z^2)``-zCDP, and the run composes its epochs' trees (RDP orders add): ``TreeEvent`` gives
the plan's Gaussian rules ``sum_e (floor(log2 T_e) + 1)`` unsampled releases of multiplier z. Neighbouring: replace-one
(records sit at fixed positions of the stream; adding or removing one would move every later block). ``private=False``
is SGD on the same order of records.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dpjax import _validate, keys
from dpjax.accounting.schedules import Sampling
from dpjax.accounting.events import NoiseEvent, SelectionEvent
from dpjax.accounting.privacy_spec import GaussianPrivacy, TreeAggregationPrivacy
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.engine.roles import Batch, Context, Sensitive
from dpjax.parts import Aggregate, Averager, ClipPerUnit, MinibatchGradient, OptaxServer, gaussian_std
from dpjax.parts.selection import init_sampler_states
from dpjax.parts.privatizers import host_multiplier
from dpjax.primitives import noise
from dpjax.primitives import sampling as sampling_lib

# learning_rate (eta), noise_multiplier (z of every tree node), clip_norm (C, per example).
FtrlHParams = MbSgdHParams


def tree_depth(leaves: int) -> int:
    """The most released nodes of a tree with ``leaves`` leaves that contain one leaf: floor(log2 T) + 1."""
    return int(leaves).bit_length()


def epoch_tree_counts(num_rounds: int, rounds_per_epoch: int) -> tuple[tuple[int, int], ...]:
    """The run's trees in closed form, ``((leaves, how many), ...)``: ``num_rounds // rounds_per_epoch`` full trees and
    one of the remaining rounds (at most two entries, whatever the number of rounds: 10^9 rounds of 1-round epochs
    are one pair, not 10^9 trees)."""
    full, rest = divmod(int(num_rounds), int(rounds_per_epoch))
    return tuple((leaves, count) for leaves, count in ((int(rounds_per_epoch), full), (rest, 1)) if leaves and count)


def tree_releases(num_rounds: int, rounds_per_epoch: int) -> int:
    """``sum_e tree_depth(T_e)``: the node releases a record enters over the run (closed form)."""
    return sum(count * tree_depth(leaves) for leaves, count in epoch_tree_counts(num_rounds, rounds_per_epoch))


@dataclasses.dataclass(frozen=True)
class EpochBlocks:
    """Records in a fixed order -- each silo's permutation (drawn once, ``OnePass``'s) or, ``shuffled=False``,
    its stored order -- cut into blocks of ``batch_size`` and cycled; publishes ``info["epoch_round"]``,
    the round's place in the epoch of the smallest silo (where trees restart)."""

    batch_size: int
    shuffled: bool = True
    unit: str = "record"

    roles = ("selection",)

    def init(self, params, ctx: Context):
        data = ctx.data
        if not self.shuffled:  # padded rows sit last: the first n_i positions are the silo's records
            return jnp.broadcast_to(jnp.arange(data.n_max, dtype=jnp.int32), (data.num_silos, data.n_max))
        return init_sampler_states(sampling_lib.OnePass(self.batch_size), data, ctx.key)

    def update(self, data, state, ctx: Context) -> tuple[Batch, Any]:
        blocks = data.sizes // self.batch_size
        starts = (ctx.round % blocks) * self.batch_size
        idx = jax.vmap(lambda perm, s: jax.lax.dynamic_slice(perm, (s,), (self.batch_size,)))(state, starts)
        n = data.num_silos
        info = {"epoch_round": ctx.round % jnp.min(blocks)}
        return Batch(None, jnp.ones((n,), bool), idx, jnp.ones(idx.shape, bool), jnp.zeros((n,), bool), n, info), state

    def event(self, silo_sizes) -> SelectionEvent:
        return SelectionEvent("one-pass", tuple(int(n) for n in silo_sizes), self.batch_size, self.unit)


@dataclasses.dataclass(frozen=True)
class TreeEvent:
    """Tree aggregation restarted every epoch (Kairouz et al. 2021, Appendix D): ``sum_e tree_depth(T_e)``
    Gaussian releases of multiplier z per record, no sampling (the plan's Gaussian rules, ``"full"``)."""

    noise: NoiseEvent

    def spec(self, plan):
        sel = plan.selection
        if sel.sampling is not Sampling.ONE_PASS or len(set(sel.batch_sizes)) != 1:
            raise ValueError(f"{plan.label}: tree aggregation is accounted for records in a fixed order (one-pass "
                             f"blocks of one batch size), got sampling={sel.sampling.value!r}")
        per_epoch = min(sel.dataset_sizes) // sel.batch_sizes[0]
        if per_epoch < 1:
            raise ValueError(f"batch_size={sel.batch_sizes[0]} must be <= the smallest silo size "
                             f"{min(sel.dataset_sizes)}")
        trees = epoch_tree_counts(plan.num_rounds, per_epoch)
        unsampled = dataclasses.replace(sel, sampling=Sampling.FULL, batch_sizes=None)
        noises = (dataclasses.replace(self.noise, steps=tree_releases(plan.num_rounds, per_epoch)),)
        spec = dataclasses.replace(plan, selection=unsampled, noises=noises).gaussian_spec()
        if not isinstance(spec, GaussianPrivacy):
            return spec
        return TreeAggregationPrivacy(spec.schedules, spec.noise_fields, spec.multipliers, spec.events,
                                      tree_counts=trees)


@dataclasses.dataclass(frozen=True)
class TreeAggregationNoise:
    """The binary-tree privatizer on the server's aggregate (module docstring, step 2): state ``[levels,
    ...]`` per parameter, the noise of the prefix's node at each level; the new node of leaf t sits at
    level ``ctz(t)`` and completes the prefix's nodes below it. Noise from the round's ``"noise"`` stream."""

    levels: int
    noise_field: str = "noise_multiplier"

    roles = ("privatizer",)

    def init(self, params, ctx: Context):
        return jax.tree_util.tree_map(lambda p: jnp.zeros((self.levels,) + jnp.shape(p), jnp.result_type(p)), params)

    def update(self, message: Sensitive, state, ctx: Context) -> tuple[Sensitive, Any]:
        t = ctx.batch.info["epoch_round"] + 1  # the leaf, 1-based in its tree
        level = jax.lax.population_count((t & -t) - 1)  # trailing zeros of t: the new node's height
        completed = jnp.arange(self.levels) < level
        std = gaussian_std(getattr(ctx.hparams, self.noise_field), message.sensitivity)
        fresh = noise.gaussian_like(keys.stream_key(ctx.key, "noise"), message.value, std)

        def released(new, nodes):  # noise(s_t) - noise(s_{t-1}): the new node less the nodes it completes
            return new - jnp.tensordot(completed.astype(nodes.dtype), nodes, axes=1)

        value = jax.tree_util.tree_map(lambda v, new, nodes: v + released(new, nodes), message.value, fresh, state)
        state = jax.tree_util.tree_map(lambda new, nodes: nodes.at[level].set(new), fresh, state)
        return message.replace(value=value), state

    def events(self, hparams, num_rounds: int) -> tuple[TreeEvent]:
        z = host_multiplier(getattr(hparams, self.noise_field))
        return (TreeEvent(NoiseEvent(self.noise_field, z, "server")),)


@dataclasses.dataclass(frozen=True)
class DpFtrl(ChainFamily):
    """DP-FTRL with tree restarts every epoch and (``private=False``) SGD on the same order of records.

    Args:
      problem: a dpjax problem; num_rounds: R (any number of epochs).
      batch_size: B records per silo per round (``floor(n_min / B)`` rounds per epoch).
      momentum: beta of the server's optax SGD (DP-FTRLM); None: plain SGD (DP-FTRL).
      order: ``"shuffled-once"`` (a permutation drawn once per run) or ``"given"`` (the stored order);
        either is a fixed order, which is all the accounting assumes."""

    problem: Any
    num_rounds: int
    batch_size: int
    momentum: float | None = None
    order: str = "shuffled-once"
    private: bool = True

    hparams_type = FtrlHParams

    def __post_init__(self):
        _validate.check_choice("order", self.order, ("shuffled-once", "given"))
        if self.momentum is not None:
            _validate.check_probability("momentum", self.momentum)
        self.check_common()

    def validate(self, data) -> None:
        _validate.check_le("batch_size", self.batch_size, "the smallest silo size", data.min_size)

    def parts(self, shape: DataShape) -> Parts:
        server = OptaxServer(optax.identity() if self.momentum is None else optax.trace(self.momentum))
        levels = max(shape.n_max // self.batch_size, 1).bit_length()
        return Parts(EpochBlocks(self.batch_size, self.order == "shuffled-once"),
                     (MinibatchGradient(self.problem, self.batch_size), ClipPerUnit("clip_norm", "replace-one"),
                      Aggregate("mean"), TreeAggregationNoise(levels), server, Averager("last")))


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("dp-ftrl", DpFtrl, "DP-FTRL with tree aggregation, restarted every epoch (Kairouz et al.)",
                twin={"ftrl": "non-private FTRL-order SGD, the twin of dp-ftrl"})
