"""Privatizers: the parts that add noise, reading the sensitivity from the value they are given.

A privatizer is a part of the one signature (``dpjax.engine.roles``): ``update(Sensitive, state,
ctx) -> (Sensitive, state)``, the round's ``ctx.batch`` saying which silos it holds; host-side,
``events(hparams, num_rounds)`` lists the releases it makes for the accountant
(``dpjax.accounting.events.NoiseEvent``). Gaussian noise is always given as a
noise multiplier ``z`` (an hparams field): the std is ``z x sensitivity`` with the sensitivity of the value
(``Sensitive``), so the sensitivity is never re-derived here; ``z = 0`` adds exactly zero (also for an unclipped value,
whose sensitivity is infinite), which makes a private run with ``z = 0`` bit-identical to its non-private twin.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import keys
from dpjax.accounting.events import NoiseEvent, Placement
from dpjax.engine.roles import Context, Sensitive, Stateless
from dpjax.primitives import noise


def gaussian_std(noise_multiplier, sensitivity):
    """``noise_multiplier x sensitivity``, exactly 0 when the multiplier is 0 (even for ``inf`` sensitivity)."""
    z = jnp.asarray(noise_multiplier, jnp.float32)
    sens = jnp.asarray(sensitivity, jnp.float32)
    return jnp.where(z == 0, jnp.zeros_like(z * sens), z * sens)


def host_multiplier(value) -> float | tuple[float, ...]:
    """One run's noise multiplier(s) as Python floats (a per-silo vector becomes a tuple)."""
    a = np.asarray(value, np.float64)
    if a.ndim == 0:
        return float(a)
    if a.ndim == 1:
        return tuple(float(x) for x in a)
    raise ValueError(f"noise multiplier has shape {a.shape}; pass one run's hyperparameters")


@dataclasses.dataclass(frozen=True)
class GaussianNoise(Stateless):
    """Gaussian noise ``N(0, (z x sensitivity)^2 I)``.

    Args:
      noise_field: the hparams field holding the multiplier ``z`` (a scalar, or
        one value per silo ``[N]``: per-silo budgets).
      placement: ``"silo"``: every silo adds its own noise to its message with its own key of the round's ``stream``
        (ISRL-DP; the silo messages are the protected transcript); ``"server"``: the server adds it once to the
        aggregate (central DP).
      stream: the round key's stream the noise is drawn from."""

    noise_field: str = "noise_multiplier"
    placement: str = "silo"
    stream: str = "noise"

    roles = ("privatizer",)

    def __post_init__(self):
        Placement(self.placement)

    def update(self, message: Sensitive, state, ctx: Context) -> tuple[Sensitive, tuple]:
        batch = ctx.batch
        z = getattr(ctx.hparams, self.noise_field)
        noise_key = keys.stream_key(ctx.key, self.stream)
        if self.placement == "server":
            std = gaussian_std(z, message.sensitivity)
            return message.replace(value=noise.add_gaussian_noise(noise_key, message.value, std)), state
        if jnp.ndim(z) == 1:  # per-silo multipliers [N]
            z = batch.select(z)
        std = gaussian_std(z, message.sensitivity)
        silo_keys = batch.select(keys.silo_keys(noise_key, batch.num_silos))
        std_axis = 0 if jnp.ndim(std) == 1 else None
        noisy = jax.vmap(noise.add_gaussian_noise, in_axes=(0, 0, std_axis))(silo_keys, message.value, std)
        return message.replace(value=noisy), state

    def events(self, hparams, num_rounds: int) -> tuple[NoiseEvent, ...]:
        return (NoiseEvent(self.noise_field, host_multiplier(getattr(hparams, self.noise_field)), self.placement),)


@dataclasses.dataclass(frozen=True)
class LocalStepGaussian:
    """Gaussian noise on every local step's clipped gradient (ISRL-DP Local SGD, Lowy & Razaviyayn 2023, App. I):
    ``N(0, (z x sensitivity)^2 I)`` with the sensitivity of the step's clipped message.

    A part of a local loop's inner chain (``dpjax.parts.clients.LocalSteps``): its state lives for the loop. ``init``
    (at the loop's start, ``ctx.batch`` the round's batch) draws every computed silo's ``num_steps`` standard normals at
    once from its key of the round's ``stream``; ``update`` (inside one silo's loop) adds the current step's. Host-side,
    ``events`` lists one release per local step (``num_rounds x releases_per_round`` of the batch selection)."""

    noise_field: str = "noise_multiplier"
    stream: str = "noise"
    num_steps: int = 1

    roles = ("privatizer",)

    def init(self, params, ctx: Context):
        batch = ctx.batch
        if batch is None:  # the run's state: nothing lives across rounds
            return ()
        silo_keys = batch.select(keys.silo_keys(keys.stream_key(ctx.key, self.stream), batch.num_silos))
        stacked = jax.tree_util.tree_map(lambda p: jnp.zeros((self.num_steps,) + jnp.shape(p), jnp.result_type(p)),
                                         params)
        normals = jax.vmap(lambda k: noise.gaussian_like(k, stacked, 1.0))(silo_keys)
        return normals, jnp.zeros(silo_keys.shape[:1], jnp.int32)

    def update(self, message: Sensitive, state, ctx: Context) -> tuple[Sensitive, tuple]:
        """One step of one silo: ``message + (z x sensitivity) std_normal[step]``."""
        normals, step = state
        std = gaussian_std(getattr(ctx.hparams, self.noise_field), message.sensitivity)
        noisy = jax.tree_util.tree_map(lambda g, z: g + std.astype(z.dtype) * z[step][None], message.value, normals)
        return message.replace(value=noisy), (normals, step + 1)

    def events(self, hparams, num_rounds: int) -> tuple[NoiseEvent, ...]:
        return (NoiseEvent(self.noise_field, host_multiplier(getattr(hparams, self.noise_field)), "silo"),)
