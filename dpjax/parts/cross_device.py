"""Parts of federated learning with user-level DP, the silo being the user (DP-FedAvg, McMahan et al.
2018; Andrew et al. 2021): the silos are sampled, not their records; a sampled silo trains locally and
sends one model delta; the server divides the sum by the public expected number of silos.

* ``SampledSilos`` (batch selection): Poisson sampling of the silos at a declared public rate q, or a
  uniform m-subset; every record of a sampled silo is in its batch; privacy unit "user";
* ``LocalDeltas`` (client): non-private local SGD from the server model, one unit per silo;
* ``PublicMean`` (aggregator): the sampled silos' sum over a public denominator.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dpjax import keys
from dpjax.accounting.events import SelectionEvent
from dpjax.engine.roles import Batch, Context, PerUnitVectors, Sensitive
from dpjax.parts.aggregators import Aggregate
from dpjax.parts.selection import available_silos
from dpjax.primitives import sampling as sampling_lib

SILO_SAMPLINGS = ("poisson", "without-replacement")


@dataclasses.dataclass(frozen=True)
class SampledSilos:
    """Each silo with probability ``sampling_rate`` q (``"poisson"``: all N silos are computed and the unsampled ones
    masked, a random count having no static shape), or a uniform subset of exactly ``silos_per_round``
    (``"without-replacement"``: only those are computed). Draws from the round key's ``"availability"`` stream.

    The Poisson rate is PUBLIC: the declared q is what the draw uses and what ``event`` hands the accountant. Under
    add/remove of a user the number of silos N differs between neighbours, so a rate m/N read from the data would make
    every other user's inclusion probability depend on whether the user is there; without a declared q the draw uses
    m/N, which only replace-one (N public) allows (the DP plan refuses it under add/remove)."""

    silos_per_round: int
    sampling: str = "poisson"
    sampling_rate: float | None = None

    def __post_init__(self):
        if self.sampling_rate is not None:
            sampling_lib.make_sampler(self.sampling, self.silos_per_round, self.sampling_rate)

    def inclusion_probability(self, num_silos):
        """Each silo's inclusion probability: the declared q, else m / N."""
        return self.silos_per_round / num_silos if self.sampling_rate is None else self.sampling_rate

    roles = ("selection",)

    def init(self, params, ctx: Context):
        return ()

    def update(self, data, state, ctx: Context) -> tuple[Batch, Any]:
        if self.sampling == "poisson":
            u = jax.random.uniform(keys.stream_key(ctx.key, "availability"), (data.num_silos,))
            silo_ids, available = None, u < self.inclusion_probability(data.num_silos)
        else:
            availability = sampling_lib.FixedAvailability(self.silos_per_round)
            silo_ids, available = available_silos(availability, ctx.key, data.num_silos)
        weights = data.mask if silo_ids is None else data.mask[silo_ids]
        return Batch(silo_ids, available, None, weights, jnp.zeros(available.shape, bool), data.num_silos), state

    def event(self, silo_sizes) -> SelectionEvent:
        """The protected data set is the N silos (users); m of them per round."""
        return SelectionEvent(self.sampling, (len(silo_sizes),), self.silos_per_round, "user",
                              sampling_rate=self.sampling_rate)


@dataclasses.dataclass(frozen=True)
class LocalDeltas:
    """Every computed silo's ``local_steps`` non-private SGD steps from the server model ``theta`` (step
    size ``hparams.<lr_field>``; each step on a uniform ``local_batch_size``-subset of the silo's records
    drawn from the round key's ``"local"`` stream, or on all of them), sent as the pseudo-gradient
    ``theta - theta_i``: one unit per silo, weighted by whether it reports."""

    problem: Any
    local_steps: int
    local_batch_size: int | None = None
    lr_field: str = "client_learning_rate"

    roles = ("client",)

    def init(self, params, ctx: Context):
        return ()

    def update(self, batch: Batch, state, ctx: Context):
        params, data = ctx.query, ctx.data
        rows, lr = batch.rows(), getattr(ctx.hparams, self.lr_field)
        silo_keys = batch.select(keys.silo_keys(keys.stream_key(ctx.key, "local"), batch.num_silos))

        def one_silo(x, y, mask, size, key):
            def step(w, k):
                chosen = mask if self.local_batch_size is None else sampling_lib.subset_mask_without_replacement(
                    jax.random.fold_in(key, k), size, mask.shape[0], self.local_batch_size)

                def mean_loss(p):
                    losses = jax.vmap(self.problem.loss, in_axes=(None, 0, 0))(p, x, y)
                    return jnp.sum(jnp.where(chosen, losses, 0.0)) / jnp.maximum(jnp.sum(chosen), 1)

                return optax.tree.sub(w, optax.tree.scale(lr, jax.grad(mean_loss)(w))), None

            return optax.tree.sub(params, jax.lax.scan(step, params, jnp.arange(self.local_steps))[0])

        deltas = jax.vmap(one_silo)(data.x[rows], data.y[rows], data.mask[rows], data.sizes[rows], silo_keys)
        return PerUnitVectors(deltas, batch.available.astype(jnp.float32), per_silo=True), state


@dataclasses.dataclass(frozen=True)
class PublicMean:
    """The reporting silos' sum divided by a PUBLIC ``denominator`` (the expected number of silos): with
    Poisson sampling the realised count depends on who is in the data, so dividing by it is not private."""

    denominator: float

    roles = ("aggregator",)

    def init(self, params, ctx: Context):
        return ()

    def update(self, messages: Sensitive, state, ctx: Context) -> tuple[Sensitive, Any]:
        total, state = Aggregate("sum").update(messages, state, ctx)
        return total.divided(self.denominator), state
