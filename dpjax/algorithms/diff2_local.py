"""DIFF2-BVR-L-SGD's local steps (Murata & Suzuki, ICML 2023, Alg. 4) as parts.

``LocalSarahSteps`` is the family's server: the estimator's server step (``EstimatorSgd``), then the ``K - 1`` local
SARAH steps of one client under ``lax.scan``, each folding an inner chain (``RadiusClipper`` on ``clip_local``,
``SiloMean`` of the one client, ``SarahRecursion``, ``StepNoise``; ``dpjax.engine.chain.fold``). ``LocalMinibatches`` is
their sampling (and its event for the accountant); ``RandomLocalIterate`` the output rule recording ``x_{k^-1, r^-1}``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from dpjax import keys
from dpjax.accounting.events import SelectionEvent
from dpjax.algorithms.diff2_parts import (EstimatorSgd, EstimatorState, GhostRecords, RandomIterate, RecordDifferences,
                                          displacement)
from dpjax.engine.chain import fold, init_all
from dpjax.engine.roles import Context, Sensitive
from dpjax.primitives.sampling import sample_without_replacement

PyTree = Any


@dataclasses.dataclass(frozen=True)
class LocalMinibatches:
    """The local steps' batches: ``b`` records of one silo without replacement (Alg. 4); the
    accountant amplifies over the smallest silo (Lemma B.7)."""

    batch_size: int

    def draw(self, key, size, n_max):
        return sample_without_replacement(key, size, n_max, self.batch_size)

    def event(self, silo_sizes) -> SelectionEvent:
        return SelectionEvent("without-replacement", tuple(int(n) for n in silo_sizes), self.batch_size, "record")


def local_differences(loss, params, prev_params, x, y, batch_size: int) -> RecordDifferences:
    """One local step's units: the per-record differences of a minibatch ``x, y`` between the
    local iterates ``x_{k-1}`` and ``x_{k-2}`` (one silo, leading axis 1), divided by ``b``."""
    return RecordDifferences(False, displacement(params, prev_params), None, jnp.ones((1,)) * batch_size,
                             ghost=GhostRecords(loss, params, prev_params, x[None], y[None], True))


@dataclasses.dataclass(frozen=True)
class SarahRecursion:
    """The local SARAH estimator of Alg. 4, a part of the local steps' inner chain: the message of step ``k`` is
    ``v~_{k-1} + d_k`` (its state ``v~_{k-1}`` is already released, post-processing: the message keeps ``d_k``'s bound);
    the local loop keeps the released ``v~_k`` as the next step's state (``LocalSarahSteps``)."""

    roles = ("server",)

    def init(self, params, ctx: Context):
        return optax.tree.zeros_like(params)

    def update(self, message: Sensitive, state, ctx: Context) -> tuple[Sensitive, Any]:
        return message.replace(value=optax.tree.add(message.value, state)), state


class LocalCandidate(NamedTuple):
    """The BVR server's value for the output rule: the new iterate and the round's output candidate
    ``x_{k^-1, r-1}`` (the starting point of local step ``k^``)."""

    params: Any
    candidate: Any


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LocalSarahState:
    """``estimate`` = v~_r (the round's noisy estimator; the local steps' ones are not kept);
    ``local_client`` = p_r, the client that ran the round's local steps (a public diagnostic)."""

    estimate: PyTree
    local_client: jax.Array


@dataclasses.dataclass(frozen=True)
class LocalSarahSteps:
    """DIFF2-BVR-L-SGD's server (Alg. 4): the estimator's server step ``x_{1,r-1} = x_{r-1} - eta v~_r``
    (``estimator``), then ``K - 1`` local SARAH steps on client ``p_r = r mod P`` under ``lax.scan``. Step ``k = 2..K``
    draws ``b`` of the client's records without replacement (``batches``, key
    ``fold_in(stream_key(round key, "sampling"), k)``), describes their differences between ``x_{k-1}`` and ``x_{k-2}``
    (``local_differences``) and folds them through ``inner`` (``RadiusClipper`` on ``clip_local``, ``SiloMean``,
    ``SarahRecursion``, ``StepNoise``; the inner context's round is ``k``); ``x_k = x_{k-1} - eta v~_k``. The inner
    states live for the round's loop. Its value is ``x_{K,r-1}`` or, with ``record_candidate``, a ``LocalCandidate``
    carrying ``x_{k^-1,r-1}`` too (``k^ ~ Unif{1..K}`` from the round key's ``"output"`` stream) for
    ``RandomLocalIterate``. The accountant reads ``batches`` and the inner parts (``Parts.role`` looks inside
    ``inner``)."""

    problem: Any
    estimator: EstimatorSgd
    batches: LocalMinibatches
    local_steps: int
    inner: tuple = ()
    record_candidate: bool = False
    lr_field: str = "learning_rate"

    roles = ("server",)

    def init(self, params, ctx: Context):
        return LocalSarahState(self.estimator.init(params, ctx).estimate, jnp.zeros((), jnp.int32))

    @staticmethod
    def local_client(round_number, num_silos: int):
        """``p_r`` (0-indexed) for 1-based round ``r``."""
        return round_number % num_silos

    def update(self, value, state: LocalSarahState, ctx: Context):
        x1, est = self.estimator.update(value, EstimatorState(state.estimate), ctx)
        p = self.local_client(ctx.round + 1, ctx.data.num_silos)
        x_last, out_k = self._local_loop(ctx.params, x1, est.estimate, p, ctx)
        new = LocalSarahState(est.estimate, jnp.asarray(p, jnp.int32))
        return (LocalCandidate(x_last, out_k) if self.record_candidate else x_last), new

    def metrics(self, state: LocalSarahState, batch) -> dict:
        return {"local_client": state.local_client}

    def _with_estimate(self, states, estimate):
        """The inner states with ``SarahRecursion``'s replaced by the released ``estimate``."""
        return tuple(estimate if isinstance(part, SarahRecursion) else s for part, s in zip(self.inner, states))

    def _local_loop(self, x0, x1, v1, p, ctx: Context):
        """Alg. 4's local steps k = 2..K on client ``p``; returns ``(x_{K,r-1}, x_{k^-1,r-1})``."""
        if self.local_steps == 1:
            return x1, x0  # k^ = 1: the server step starts at x_{0,r-1}
        data, lr = ctx.data, getattr(ctx.hparams, self.lr_field)
        xs, ys, size = data.x[p], data.y[p], data.sizes[p]
        sample_key = keys.stream_key(ctx.key, "sampling")
        k_hat = jax.random.randint(keys.stream_key(ctx.key, "output"), (), 1, self.local_steps + 1)
        loop_ctx = Context(ctx.round, ctx.key, ctx.hparams, data, None, x1, x1)
        states = self._with_estimate(init_all(self.inner, x1, loop_ctx), v1)

        def local_step(carry, k):
            x_prev, x_cur, out, states = carry  # x_{k-2}, x_{k-1}; states hold v~_{k-1}
            idx = self.batches.draw(jax.random.fold_in(sample_key, k), size, data.n_max)
            units = local_differences(self.problem.loss, x_cur, x_prev, xs[idx], ys[idx], self.batches.batch_size)
            step_ctx = loop_ctx._replace(round=k, params=x_cur, query=x_cur)  # the loop counts local steps
            v, states = fold(self.inner, units, states, step_ctx)
            x_next = optax.tree.add_scale(x_cur, -lr, v.value)
            out = optax.tree.where(k == k_hat, x_cur, out)  # x_{k^-1}: start of local step k^
            return (x_cur, x_next, out, self._with_estimate(states, v.value)), None

        (_, x_last, out_k, _), _ = jax.lax.scan(local_step, (x0, x1, x0, states),
                                                jnp.arange(2, self.local_steps + 1))
        return x_last, out_k


class RandomLocalIterate(RandomIterate):
    """BVR's output ``x_{k^-1, r^-1}`` (a local starting point): the candidate the server's
    ``LocalCandidate`` carries; passes the new iterate on."""

    def candidate(self, value: LocalCandidate, ctx: Context):
        return value.candidate

    def passed(self, value: LocalCandidate):
        return value.params
