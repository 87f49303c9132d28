"""Composable parts of a round step, in the style of optax and fedjax.

A round of every gradient-based family is built from these parts, never
copy-pasted::

    silo_ids, available = availability            # which silos report (M-silo fast path)
    messages  = client_update(params, ...)         # minibatch gradient / K local steps
    messages, _ = privatizer.update(messages, privatizer.init(round_key), std)
    update    = aggregator(messages, available, round_key)
    params, opt_state = server(params, update, opt_state)   # optax + projection
    averaged  = averager.update(...)                # the output rule

* Local SGD is ``LocalSteps`` (with the per-step ``StepGaussian``) ->
  ``ModelAveraging``; the SDP one-pass family is ``ClippedExampleVectors`` ->
  ``PvecRandomizer`` -> ``PvecAnalyzer`` under an AC-SA server.
* Problems are declared by protocols (``Problem``; optional
  ``ClosedFormClipping`` for problems that compute clipped gradient sums in
  closed form), not detected by ``hasattr``.
* Privatizers are optax-style pairs ``init(round_key) -> state`` and
  ``update(messages, state, noise_std, ...) -> (messages, state)``; the state is
  the PRNG key of the round's ``"noise"`` stream (``dpjax.keys``), so the key
  handling is explicit and the draws are those of the round key.
* The server optimizer is any ``optax.GradientTransformation`` factory wrapped
  in ``optax.inject_hyperparams``: its learning rate is a traced per-run value
  in the optimizer state (set from the run's hparams at ``init``), so a grid
  over step sizes is one compiled program.
* The non-private twin of every family is one mechanism: the same round with
  ``non_private(hparams)`` (noise stds 0, clip norms inf). Clipping by
  ``min(1, inf / ||g||) = 1`` and adding ``0 * z`` are exact, so a private run
  with zero noise and a non-binding clip is bit-identical to its twin.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from dpjax import keys
from dpjax.engine import federated
from dpjax.engine.problem import ClosedFormClipping, Problem, has_closed_form_clipping  # noqa: F401
from dpjax.primitives import clipping, noise, sampling, shuffle_protocols
from dpjax.primitives.projection import project_l2_ball

PyTree = Any


# ---------------------------------------------------------------------------
# The non-private twin
# ---------------------------------------------------------------------------
def non_private(hparams, noise_fields=("noise_std",), clip_fields=("clip_norm",)):
    """``hparams`` with every noise std 0 and every clip norm inf (same shapes).

    Every non-private twin runs the *same* compiled round step as its private
    algorithm with these values instead of a separate code path: two
    differently fused XLA programs can differ in the last bit, one program on
    equal values cannot.
    """
    zero = {f: jnp.zeros_like(jnp.asarray(getattr(hparams, f), jnp.float32)) for f in noise_fields}
    inf = {f: jnp.full_like(jnp.asarray(getattr(hparams, f), jnp.float32), jnp.inf) for f in clip_fields}
    return dataclasses.replace(hparams, **zero, **inf)


# ---------------------------------------------------------------------------
# Client updates
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MinibatchGradient:
    """Client update: each silo's clipped minibatch mean ``(1/K_i) sum_j clip_C(grad f(w, x_ij))``.

    ``batch_sizes`` (one ``K_i`` per silo, unbalanced silos) keeps the first
    ``K_i`` of the ``max K_i`` drawn indices and divides by ``K_i``; otherwise
    the sampler's ``K`` (or the silo size for full batches) is the public
    divisor. ``dense`` uses the gather-free multiplicity-weighted closed form
    (``federated.silo_dense_gradients``). Returns ``(messages, overflow, info)``
    with the batch indices/mask in ``info`` (gather path).
    """

    problem: Any
    sampler: Any
    neighboring: str = "replace-one"
    clip_mode: str = "per-example"
    batch_sizes: tuple | None = None
    dense: bool = False

    def __call__(self, params, data, sampler_states, key, round_index, clip_norm, silo_ids=None):
        if self.dense:
            grads, overflow = federated.silo_dense_gradients(
                self.problem, self.sampler, params, data, sampler_states, key, round_index,
                clip_norm=clip_norm, silo_ids=silo_ids)
            return grads, overflow, {}
        idx, mask, overflow = federated.draw_silo_batches(self.sampler, data, sampler_states, key, round_index,
                                                          silo_ids)
        if self.batch_sizes is not None:
            ks = jnp.asarray(self.batch_sizes, jnp.int32)
            ks = ks if silo_ids is None else ks[silo_ids]
            mask = mask & (jnp.arange(idx.shape[1])[None, :] < ks[:, None])
            denominators = jnp.asarray(self.batch_sizes, jnp.float32)
        else:
            k = getattr(self.sampler, "batch_size", None)
            denominators = k if k is not None else data.sizes  # full batch: the (public) silo size
        grads = federated.silo_batch_gradients(
            self.problem, params, data, idx, mask, denominators, clip_norm=clip_norm,
            neighboring=self.neighboring, clip_mode=self.clip_mode, silo_ids=silo_ids)
        return grads, overflow, {"indices": idx, "index_mask": mask}


@dataclasses.dataclass(frozen=True)
class LocalSteps:
    """Client update of the local-update families (Local SGD / FedAvg): from the
    server model, ``num_steps`` single-record steps
    ``w <- Proj_W(w - eta (clip_C(grad f(w, x_j)) + u))`` on records drawn with
    replacement; the message is the last local iterate.

    ``privatizer`` (``StepGaussian``) adds the per-step noise ``u``. All K
    indices and all K standard normals of a silo are drawn before the
    sequential steps (K small PRNG calls inside the scan cost ~100 us each on
    CPU). Returns ``(messages, indices [silos, K])``.
    """

    problem: Any
    num_steps: int
    privatizer: Any
    projection_radius: float | None = None

    def __call__(self, params, data, key, hparams, silo_ids=None):
        n = data.num_silos
        pick = (lambda a: a) if silo_ids is None else (lambda a: a[silo_ids])
        sample_keys = keys.silo_keys(keys.stream_key(key, "sampling"), n)
        noise_keys = self.privatizer.silo_keys(self.privatizer.init(key))

        def one_silo(x, y, size, sample_key, noise_key):
            indices = sampling.sample_with_replacement(sample_key, size, self.num_steps)
            std_normals = self.privatizer.standard_normals(noise_key, params, self.num_steps)

            def body(w, step):
                j, z = step
                g = clipping.clip_to_norm(jax.grad(self.problem.loss)(w, x[j], y[j]), hparams.clip_norm)
                g = self.privatizer.update(g, z, hparams.noise_std)
                w = jax.tree_util.tree_map(lambda p, gi: p - hparams.learning_rate * gi, w, g)
                return project_l2_ball(w, self.projection_radius), j

            return jax.lax.scan(body, params, (indices, std_normals))

        return jax.vmap(one_silo)(pick(data.x), pick(data.y), pick(data.sizes), pick(sample_keys),
                                  pick(noise_keys))


@dataclasses.dataclass(frozen=True)
class ClippedExampleVectors:
    """Client update of the shuffle-model families: each silo's K sampled
    per-example gradients at ``params``, clipped to ``clip_norm`` and flattened,
    ``[N, K, P]``, with the batch mask ``[N, K]`` (the inputs of a local
    randomizer such as P_vec)."""

    problem: Any
    sampler: Any

    def __call__(self, params, data, sampler_states, key, round_index, clip_norm):
        idx, mask, _ = federated.draw_silo_batches(self.sampler, data, sampler_states, key, round_index)

        def one_silo(x, y, i):
            grads = clipping.clip_per_example(clipping.per_example_grads(self.problem.loss, params, x[i], y[i]),
                                              clip_norm)
            return jax.vmap(lambda t: ravel_pytree(t)[0])(grads)

        return jax.vmap(one_silo)(data.x, data.y, idx), mask


# ---------------------------------------------------------------------------
# Privatizers (optax-style init/update; the state is the round's noise key)
# ---------------------------------------------------------------------------
class NoiseState(NamedTuple):
    key: jax.Array


@dataclasses.dataclass(frozen=True)
class SiloGaussian:
    """Each silo adds its own ``N(0, sigma_i^2 I)`` to its message (ISRL-DP; the
    silo messages are the protected transcript). ``noise_std``: a scalar or one
    std per silo ``[N]`` (per-silo budgets, ISRL-DP Algorithm 7)."""

    num_silos: int

    def init(self, round_key) -> NoiseState:
        return NoiseState(keys.stream_key(round_key, "noise"))

    def update(self, messages, state: NoiseState, noise_std, silo_ids=None):
        noisy = federated.silo_noise(messages, state.key, noise_std, self.num_silos, silo_ids)
        return noisy, NoiseState(jax.random.fold_in(state.key, 1))


@dataclasses.dataclass(frozen=True)
class CentralGaussian:
    """The server adds ``N(0, noise_std^2 I)`` once to the aggregate (central DP-SGD)."""

    def init(self, round_key) -> NoiseState:
        return NoiseState(keys.stream_key(round_key, "noise"))

    def update(self, update, state: NoiseState, noise_std, silo_ids=None):
        del silo_ids
        return noise.add_gaussian_noise(state.key, update, noise_std), NoiseState(jax.random.fold_in(state.key, 1))


@dataclasses.dataclass(frozen=True)
class StepGaussian:
    """Each silo adds ``N(0, sigma^2 I)`` to every local step's clipped gradient
    (ISRL-DP Local SGD): the silo's draws come from its key of the round's
    ``"noise"`` stream, all K at once (``standard_normals``)."""

    num_silos: int

    def init(self, round_key) -> NoiseState:
        return NoiseState(keys.stream_key(round_key, "noise"))

    def silo_keys(self, state: NoiseState):
        return keys.silo_keys(state.key, self.num_silos)

    def standard_normals(self, silo_key, params, num_steps):
        stacked = jax.tree_util.tree_map(lambda p: jnp.zeros((num_steps,) + jnp.shape(p), jnp.result_type(p)), params)
        return noise.gaussian_like(silo_key, stacked, 1.0)

    def update(self, gradient, std_normal, noise_std):
        return jax.tree_util.tree_map(lambda g, z: g + jnp.asarray(noise_std, z.dtype) * z, gradient, std_normal)


class PvecState(NamedTuple):
    rounding_key: jax.Array
    noise_key: jax.Array


@dataclasses.dataclass(frozen=True)
class PvecRandomizer:
    """The P_vec local randomizer (Cheu et al. 2022, Algorithm 2) of every silo
    on its clipped vectors: one centred count report ``[N, P]`` per silo,
    simulated at the count level (``shuffle_protocols.pvec_user_counts``). The
    state holds the round's ``"rounding"`` and ``"noise"`` stream keys."""

    num_silos: int
    max_granularity: int | None = None

    def init(self, round_key) -> PvecState:
        return PvecState(keys.stream_key(round_key, "rounding"), keys.stream_key(round_key, "noise"))

    def update(self, messages, state: PvecState, pvec, clip_norm):
        vectors, mask = messages
        round_keys = keys.silo_keys(state.rounding_key, self.num_silos)
        noise_keys = keys.silo_keys(state.noise_key, self.num_silos)
        reports = jax.vmap(lambda v, m, kr, kn: shuffle_protocols.pvec_user_counts(
            kr, kn, v, m, pvec, clip_norm, self.max_granularity))(vectors, mask, round_keys, noise_keys)
        return reports, state


# ---------------------------------------------------------------------------
# Aggregators: (messages [M or N, ...], available [M or N], round_key) -> update
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Aggregate:
    """``"mean"``: ``sum_{i in S_r} g_i / M_r`` (the papers); ``"sum"``: the ISRL-DP
    authors' scripts (the step size times ``M_r``)."""

    how: str = "mean"

    def __call__(self, messages, available, round_key):
        return federated.aggregate(messages, available, self.how)


@dataclasses.dataclass(frozen=True)
class Shuffled:
    """Behind a shuffler (ISRL-DP Section 5, Shuffled Noisy MB-SGD): a function of the multiset of
    reports only (``federated.shuffled_aggregate``)."""

    how: str = "mean"

    def __call__(self, messages, available, round_key):
        return federated.shuffled_aggregate(messages, available, keys.stream_key(round_key, "shuffle"), self.how)


@dataclasses.dataclass(frozen=True)
class PvecAnalyzer:
    """The P_vec analyzer on the shuffled reports of the available silos, divided
    by the public number of vectors ``M_r K``: the aggregated gradient, shaped
    like ``params``."""

    batch_size: int

    def __call__(self, reports, available, pvec, clip_norm, params):
        weights = available.astype(jnp.float32)
        total = shuffle_protocols.pvec_analyze(jnp.tensordot(weights, reports, axes=1), pvec, clip_norm)
        m = jnp.maximum(jnp.sum(weights), 1.0) * self.batch_size  # M_r K, public
        return ravel_pytree(params)[1](total / m)


@dataclasses.dataclass(frozen=True)
class ModelAveraging:
    """Server of the local-update families (FedAvg) on local models:
    ``"mean"`` averages the available silos' models (the paper), ``"sum"``
    adds their summed local updates ``w^i - w`` to the server model (the
    ISRL-DP authors' scripts); then ``Proj_W``."""

    how: str = "mean"
    projection_radius: float | None = None

    def step(self, params, messages, available):
        if self.how == "mean":
            new = federated.aggregate(messages, available, "mean")
        else:
            updates = jax.tree_util.tree_map(lambda m, p: m - p[None], messages, params)
            new = jax.tree_util.tree_map(jnp.add, params, federated.aggregate(updates, available, "sum"))
        return project_l2_ball(new, self.projection_radius)


# ---------------------------------------------------------------------------
# Server optimizer and projection
# ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ServerOptimizer:
    """Any optax optimizer factory (``optax.sgd``, ``optax.adam``, ...) with a traced
    learning rate (``optax.inject_hyperparams``), then ``Proj_W``.

    ``init(params, learning_rate)`` puts the run's step size into the optimizer
    state; ``step(params, gradient, opt_state)`` applies the update and projects
    onto the ball of ``projection_radius`` (dpjax's ``project_l2_ball``: a point
    inside the ball is returned multiplied by exactly 1, which optax's
    ``projection_l2_ball`` does not guarantee). With ``optax.sgd`` the result is
    ``Proj_W(w - eta g)`` bit for bit (``-(eta g)`` is exact).
    """

    factory: Callable = optax.sgd
    projection_radius: float | None = None
    options: tuple = ()  # static keyword arguments of the factory, e.g. (("b1", 0.9),)

    def transformation(self, learning_rate=0.0) -> optax.GradientTransformation:
        return optax.inject_hyperparams(self.factory)(learning_rate=learning_rate, **dict(self.options))

    def init(self, params, learning_rate):
        return self.transformation(jnp.asarray(learning_rate, jnp.float32)).init(params)

    def step(self, params, gradient, opt_state):
        updates, opt_state = self.transformation().update(gradient, opt_state, params)
        return project_l2_ball(optax.apply_updates(params, updates), self.projection_radius), opt_state


# ---------------------------------------------------------------------------
# One federated round of the minibatch-SGD families
# ---------------------------------------------------------------------------
@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RoundState:
    """State of a composed round: iterate, round counter, output-rule buffer,
    per-silo sampler states, server optimizer state and the run's hparams."""

    params: PyTree
    round: jax.Array
    averaged: PyTree
    sampler_states: Any
    opt_state: Any
    hparams: Any


@dataclasses.dataclass(frozen=True)
class FederatedRound:
    """availability -> client update -> privatizer -> aggregator -> server -> averager.

    ``fast_path`` computes only the available silos' messages when their number
    is static (``federated.available_silos``).
    """

    availability: Any
    client: MinibatchGradient
    privatizer: Any
    aggregator: Any
    server: ServerOptimizer
    averager: Any
    fast_path: bool = True

    def init(self, params, hparams, data, run_key) -> RoundState:
        return RoundState(params, jnp.zeros((), jnp.int32), self.averager.init(params),
                          federated.init_sampler_states(self.client.sampler, data, run_key),
                          self.server.init(params, hparams.learning_rate), hparams)

    def step(self, state: RoundState, data, key) -> tuple[RoundState, dict]:
        hp = state.hparams
        if self.fast_path:
            silo_ids, available = federated.available_silos(self.availability, key, data.num_silos)
        else:
            silo_ids, available = None, self.availability.sample(keys.stream_key(key, "availability"), data.num_silos)
        grads, overflow, _ = self.client(state.params, data, state.sampler_states, key, state.round, hp.clip_norm,
                                         silo_ids)
        grads, _ = self.privatizer.update(grads, self.privatizer.init(key), hp.noise_std, silo_ids)
        update = self.aggregator(grads, available, key)
        new_params, opt_state = self.server.step(state.params, update, state.opt_state)
        averaged = self.averager.update(state.averaged, state.params, new_params, state.round)
        metrics = {"num_available": jnp.sum(available), "sampling_overflow": jnp.any(overflow & available)}
        return dataclasses.replace(state, params=new_params, round=state.round + 1, averaged=averaged,
                                   opt_state=opt_state), metrics

    def output_params(self, state: RoundState):
        return self.averager.value(state.averaged, state.params, state.round)
