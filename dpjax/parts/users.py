"""Parts of protocols whose units are the users of one public stream (shuffle-private SCO,
Cheu, Joseph, Mao & Peng, ICLR 2022, Section 4 and Appendix C).

The n users are the n records of ONE silo, in a fixed public order (the protocol's user stream). Round ``r`` uses the
window of users ``[start_r, start_r + batch_r)`` (public per-round hparams arrays), so one static shape serves one-pass
schedules (``start_r = r B``), full-batch ones (``start_r = 0``, ``batch_r = n``) and phased schedules alike.

* ``UserWindows`` (batch selection): the round's window, padded to ``max_batch``;
* ``UserGradients`` (client): every user's gradient, or Moreau-envelope
  gradient, flattened (``ravel_pytree`` order), as units kept apart;
* the clipper is ``dpjax.parts.clipping.ClipVectors``: each user's vector projected onto the ball of radius L and kept
  apart (replace-one: sensitivity 2L of any sum of them; an overflowed vector becomes zero);
* ``UserGaussian`` (privatizer): the round's sum plus Gaussian noise
  (central, local, pan-private, a surrogate, or none);
* ``BatchMean`` (aggregator): divided by the public ``batch_r``;
* ``PhasedSgdServer`` (server): projected SGD with the per-round step size and the running average of each phase, a
  phase restarting from the previous phase's output; ``FlatUpdates`` adapts any server to the flat update.

P_vec's privatizer and analyzer for these rounds are in ``dpjax.parts.pvec``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from dpjax import keys
from dpjax.accounting import sco_transcript
from dpjax.accounting.schedules import PrivacyUnit, Sampling
from dpjax.accounting.events import SelectionEvent
from dpjax.engine.contract import sgd_updates
from dpjax.engine.roles import Batch, Context, PerUnitVectors, Sensitive, Served, Stateless, released
from dpjax.parts.privatizers import gaussian_std
from dpjax.primitives.projection import project_l2_ball

PyTree = Any


def _windows(hparams) -> sco_transcript.RoundWindows:
    return sco_transcript.RoundWindows.of(hparams.start, hparams.batch, hparams.stage_round)


@dataclasses.dataclass(frozen=True)
class UserWindows(Stateless):
    """Round ``r``'s users ``[start_r, start_r + batch_r)`` of the one silo (data-independent), as
    ``max_batch`` indices and a mask (users beyond the window or the data are masked)."""

    max_batch: int

    roles = ("selection",)

    def update(self, data, state, ctx: Context) -> tuple[Batch, tuple]:
        hp, r = ctx.hparams, ctx.round
        idx = hp.start[r] + jnp.arange(self.max_batch)
        mask = (jnp.arange(self.max_batch) < hp.batch[r]) & (idx < data.sizes[0])
        idx = jnp.where(mask, idx, 0)
        return Batch(None, jnp.ones((1,), bool), idx[None], mask[None], jnp.zeros((1,), bool), 1), state

    def metrics(self, state, batch: Batch) -> dict:
        """Round metric ``users``: how many users the round's window holds."""
        return {"users": jnp.sum(batch.weights)}

    def event(self, silo_sizes) -> SelectionEvent:
        """One user stream, unit ``user``; the rounds' windows (fresh blocks or the same block) are read
        by the privatizer's transcript event (its accountant does not use ``sampling``), which checks
        them against ``batch_sizes``, the compiled ``max_batch``."""
        return SelectionEvent(Sampling.ONE_PASS, tuple(int(n) for n in silo_sizes), self.max_batch, PrivacyUnit.USER)


@dataclasses.dataclass(frozen=True)
class UserGradients(Stateless):
    """Every user's gradient of ``problem.loss``, or with ``smoothed`` that of its Moreau envelope
    ``s (w - prox_{loss/s}(w))`` with the round's ``smoothing`` s (``problem.prox``), flattened
    (``ravel_pytree`` order): units ``[1, max_batch, P]`` for the clipper, weighted by the window."""

    problem: Any
    smoothed: bool = False
    smoothing_field: str = "smoothing"

    roles = ("client",)

    def denominator(self, silo_sizes):
        """Every unit is one user's vector, undivided (``ChainFamily.message_sensitivity``)."""
        return 1.0

    def update(self, batch: Batch, state, ctx: Context):
        params, data = ctx.query, ctx.data
        idx = batch.indices[0]
        x, y = data.x[0, idx], data.y[0, idx]
        flat = ravel_pytree(params)[0]
        if self.smoothed:
            s = getattr(ctx.hparams, self.smoothing_field)[ctx.round]

            def one(xi, yi):
                return s * (flat - ravel_pytree(self.problem.prox(params, xi, yi, s))[0])
        else:
            def one(xi, yi):
                return ravel_pytree(jax.grad(self.problem.loss)(params, xi, yi))[0]
        return PerUnitVectors(jax.vmap(one)(x, y)[None], batch.weights), state


MECHANISMS = ("none", "central", "local", "pan-private", "surrogate")


@dataclasses.dataclass(frozen=True)
class UserGaussian(Stateless):
    """The round's users' clipped vectors summed, plus Gaussian noise of the round's multiplier ``z_r`` (hparams
    ``noise_field[r]``) times the sensitivity 2L of that sum, from the round's ``"noise"`` stream (privatizer,
    ``placement="silo"``: the one silo is the round's users, so noise on its sum is also the curator's noise on the
    aggregate; it comes before the division by the public batch, as the protocols add it to the sum).

    ``mechanism``: ``"none"`` (the exact sum, the non-private twin); ``"central"`` (one draw of std z 2L on the sum);
    ``"local"`` (every user's own N(0, (z 2L)^2 I), simulated as one draw of std sqrt(m) z 2L on the sum of the m users'
    messages: equal in distribution); ``"pan-private"`` (Algorithm 6: two independent draws of std z 2L, the second from
    the ``"server_noise"`` stream); ``"surrogate"`` (one draw like ``"central"``, a variance-matched stand-in for P_vec
    that certifies nothing). Returns ``[1, P]``."""

    mechanism: str = "central"
    noise_field: str = "noise_multiplier"

    roles = ("privatizer",)

    def __post_init__(self):
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"mechanism={self.mechanism!r} must be one of {MECHANISMS}")

    def update(self, message: Sensitive, state, ctx: Context) -> tuple[Sensitive, tuple]:
        mask = ctx.batch.weights[0]
        total = jnp.sum(message.value[0] * mask[:, None], axis=0)
        if self.mechanism != "none":
            std = gaussian_std(getattr(ctx.hparams, self.noise_field)[ctx.round], message.sensitivity)
            if self.mechanism == "local":
                std = std * jnp.sqrt(jnp.sum(mask.astype(jnp.float32)))
            total = total + std * jax.random.normal(keys.stream_key(ctx.key, "noise"), total.shape)
            if self.mechanism == "pan-private":  # Algorithm 6 draws twice per batch (lines 4 and 6)
                total = total + std * jax.random.normal(keys.stream_key(ctx.key, "server_noise"), total.shape)
        return message.replace(value=total[None]), state

    def multiplier_for(self, noise_std, batch, sensitivity) -> np.ndarray:
        """Host-side: the per-round multipliers whose run std on the round's sum is ``noise_std`` (absolute, e.g. a
        paper's calibration): ``noise_std / (sensitivity sqrt(batch))`` for local noise, ``noise_std / sensitivity``
        otherwise; of the float32 multipliers next to the quotient, the one whose float32 std (as ``update`` computes
        it) is exactly ``float32(noise_std)``, where one is."""
        if self.mechanism == "none":
            raise ValueError("mechanism='none' adds no noise; no multiplier gives a noise std")
        std = np.broadcast_to(np.asarray(noise_std, np.float64), np.shape(batch))
        sens = np.float32(sensitivity)
        factor = np.sqrt(np.asarray(batch, np.float32)) if self.mechanism == "local" else np.ones(np.shape(batch),
                                                                                               np.float32)
        return _float32_multipliers(std, sens, factor)

    def sum_std(self, noise_multiplier, batch, sensitivity) -> np.ndarray:
        """Host-side: the per-round std on the round's sum, ``z sensitivity`` (times ``sqrt(batch)``
        for local noise), in float64 from the multipliers as given."""
        z = np.broadcast_to(np.asarray(noise_multiplier, np.float64), np.shape(batch))
        std = z * float(sensitivity)
        return std * np.sqrt(np.asarray(batch, np.float64)) if self.mechanism == "local" else std

    def events(self, hparams, num_rounds: int) -> tuple:
        windows = _windows(hparams)
        if self.mechanism == "none":
            return (sco_transcript.NoGuaranteeEvent("the exact sum (non-private twin)"),)
        if self.mechanism == "surrogate":
            return (sco_transcript.NoGuaranteeEvent("matched-gaussian is a variance-matched surrogate of P_vec, "
                                                    "not a DP mechanism"),)
        z = tuple(float(x) for x in np.asarray(getattr(hparams, self.noise_field), np.float64).reshape(-1))
        if self.mechanism == "pan-private":
            return (sco_transcript.PanPrivateEvent(self.noise_field, windows, z),)
        return (sco_transcript.GaussianTranscriptEvent(self.noise_field, windows, z, self.mechanism),)


def _float32_multipliers(noise_std: np.ndarray, sens: np.float32, factor: np.ndarray) -> np.ndarray:
    """Per round, ``noise_std / (sens factor)`` as the float32 z whose run std ``(z sens) factor`` (float32)
    is ``float32(noise_std)`` where one of its three float32 neighbours on either side gives it (the first
    of z, z+1, z+2, z+3, z-1, z-2, z-3 ulps that does); 0 where ``noise_std`` is 0. Vectorised over the rounds:
    P_GD plans reach 3e6 rounds, where a Python loop per round cost seconds."""
    std = np.asarray(noise_std, np.float64)
    factor = np.asarray(factor, np.float32)
    target = std.astype(np.float32)
    z = (std / (float(sens) * factor.astype(np.float64))).astype(np.float32)
    candidates = [z]
    for direction in (np.float32(np.inf), np.float32(-np.inf)):
        c = z
        for _ in range(3):
            c = np.nextafter(c, direction)
            candidates.append(c)
    candidates = np.stack(candidates)
    exact = (candidates * sens).astype(np.float32) * factor == target
    first = np.argmax(exact, axis=0)
    chosen = np.where(exact.any(axis=0), np.take_along_axis(candidates, first[None], axis=0)[0], z)
    return np.where(std == 0, np.float32(0.0), chosen).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class BatchMean(Stateless):
    """The privatized sum ``[1, P]`` divided by the public number of users ``batch_r`` (aggregator):
    the flat ``[P]`` mean gradient, bound ``L / batch_r``."""

    batch_field: str = "batch"

    roles = ("aggregator",)

    def update(self, messages: Sensitive, state, ctx: Context) -> tuple[Sensitive, tuple]:
        users = getattr(ctx.hparams, self.batch_field)[ctx.round].astype(jnp.float32)
        return Sensitive(messages.value[0], messages.contribution_bound, messages.neighboring).divided(users), state


class PhaseState(NamedTuple):
    """``PhasedSgdServer``'s state: the iterate theta and the phase's sum and count of iterates."""

    theta: PyTree
    total: PyTree
    count: jax.Array


@dataclasses.dataclass(frozen=True)
class PhasedSgdServer:
    """Projected SGD ``theta <- Proj(theta - eta_r g)`` with the per-round step size (hparams
    ``step_field[r]``; the paper prints ``+ eta g``, a sign error), by phases: a phase's first round
    (``stage_round == 1``) restarts from the previous phase's output (the reduction of Lemma B.7).

    The run's params are the protocol's output so far -- the average of the phase's
    ``theta_0..theta_{t-1}`` (``output="average"``, Algorithms 3 and 5 as printed) or the last
    iterate (``"last"``) -- as AC-SA's are ``w_ag``; the state holds theta and the phase's sum."""

    output: str = "average"
    projection_radius: float | None = None
    step_field: str = "step"
    stage_field: str = "stage_round"

    def __post_init__(self):
        if self.output not in ("average", "last"):
            raise ValueError(f"output={self.output!r} must be one of ('average', 'last')")

    roles = ("server",)

    def init(self, params, ctx: Context) -> PhaseState:
        return PhaseState(params, optax.tree.zeros_like(params), jnp.zeros((), jnp.float32))

    def _restart(self, params, theta, round_index, hparams):
        stage_round = getattr(hparams, self.stage_field)
        round_index = jnp.minimum(round_index, jnp.shape(stage_round)[-1] - 1)  # (past the last round: unused)
        restart = (stage_round[round_index] == 1) & (round_index > 0)
        return restart, jax.tree_util.tree_map(lambda p, t: jnp.where(restart, p, t), params, theta)

    def update(self, update, state: PhaseState, ctx: Context):
        """The round's step from ``theta`` (or the restart point); serves the output so far and the next
        round's theta (where its users compute)."""
        restart, theta = self._restart(ctx.params, state.theta, ctx.round, ctx.hparams)
        eta = getattr(ctx.hparams, self.step_field)[ctx.round]
        new = project_l2_ball(optax.apply_updates(theta, sgd_updates(released(update), eta)), self.projection_radius)
        total = jax.tree_util.tree_map(lambda s: jnp.where(restart, 0.0, s), state.total)
        total = optax.tree.add(total, theta)  # theta_{t-1}: the output excludes the last step's theta_T
        count = jnp.where(restart, 0.0, state.count) + 1.0
        output = new if self.output == "last" else jax.tree_util.tree_map(lambda s: s / jnp.maximum(count, 1.0), total)
        query = self._restart(output, new, ctx.round + 1, ctx.hparams)[1]
        return Served(output, query), PhaseState(new, total, count)


@dataclasses.dataclass(frozen=True)
class FlatUpdates:
    """A server part fed the round's update as one flat vector (the users' flattened gradients):
    unravelled to the params' structure (``ravel_pytree`` order) before ``server``."""

    server: Any

    roles = ("server",)

    def init(self, params, ctx: Context):
        return self.server.init(params, ctx)

    def update(self, update, state, ctx: Context):
        return self.server.update(ravel_pytree(ctx.params)[1](released(update)), state, ctx)
