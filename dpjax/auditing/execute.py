"""How audits and privacy tests run a family: one helper, ``run_family``, through the engine's executor.

Every canary audit (``dpjax.auditing.mechanisms``) and every privacy pin (``tests/privacy``) runs a *registered family's
own* ``init``/``step`` by calling ``run_family``, which hands the family to ``dpjax.engine.run_many`` (the executor the
sweeps use) with one key per run and records the iterate after every round. Nothing is rebuilt from primitives, so a bug
in a family's step, sampler or noise is a bug in what the audits measure. When the executor changes, only ``run_family``
changes.

``CanaryProbe`` is the audits' learning problem: the loss ``<w, x>`` whose gradient is the record itself whatever ``w``
is, so a family's released message is known in closed form (a clipped sum of records plus noise) and a canary record
moves it along ``e_1`` only. It implements the closed-form clipping protocol too, so a family's dense (gather-free)
gradient path runs on it as well as the per-example path.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

__all__ = ["CanaryProbe", "AutodiffProbe", "DifferenceProbe", "run_family", "trajectory"]


@dataclasses.dataclass(frozen=True)
class _LinearProbe:
    """Loss ``<w, x>`` on ``d``-dimensional records (labels ignored): ``grad = x`` at every ``w``. Equal (and hashed) by
    type and ``d``: a static argument of compiled programs."""

    dim: int

    def loss(self, params, x, y):
        del y
        return jnp.vdot(params, x)

    def init_params(self, key):
        del key
        return jnp.zeros((self.dim,), jnp.float32)

    def evaluate(self, params, x, y, mask=None):
        return {"loss": jnp.mean(x @ params)}


class CanaryProbe(_LinearProbe):
    """Loss ``<w, x>`` on ``d``-dimensional records (labels ignored): ``grad = x`` at every ``w``, with the closed-form
    clipping protocol."""

    # closed-form clipping protocol (``dpjax.engine.problem.ClosedFormClipping``)
    def row_sq_norms(self, x):
        return jnp.sum(x * x, axis=-1)

    def weighted_grad_sum(self, params, x, y, weights, clip_norm=None, row_sq_norms=None):
        sq = self.row_sq_norms(x) if row_sq_norms is None else row_sq_norms
        scale = jnp.ones_like(sq) if clip_norm is None else jnp.minimum(
            1.0, clip_norm / jnp.sqrt(jnp.maximum(sq, 1e-30)))
        return jnp.sum((weights * scale)[:, None] * x, axis=0)


class AutodiffProbe(_LinearProbe):
    """``CanaryProbe``'s loss without the closed-form clipping protocol: families then take their per-example autodiff
    path (``vmap(grad)`` + ``clipped_sum``, the path of neural networks)."""


@dataclasses.dataclass(frozen=True)
class DifferenceProbe:
    """1-D loss ``y (x w + (x w)^2 / 2)`` for the gradient-difference families (DIFF2): gradient ``y x (1 + x w)``; the
    gradient difference between two iterates is ``y x^2 (w - w')``. A record with ``|x|`` large saturates every clip
    with sign ``y``; records with ``x = 0`` contribute nothing."""

    def loss(self, params, x, y):
        u = jnp.vdot(params, x)
        return y * (u + 0.5 * u * u)

    def init_params(self, key):
        del key
        return jnp.zeros((1,), jnp.float32)

    def evaluate(self, params, x, y, mask=None):
        return {"loss": jnp.mean(jax.vmap(self.loss, in_axes=(None, 0, 0))(params, x, y))}


def trajectory(output_params, eval_data) -> dict:
    """The engine's per-round evaluation used by ``run_family``: the flattened output parameters."""
    del eval_data
    return {"params": ravel_pytree(output_params)[0]}


def run_family(family, data, hparams, run_keys: jax.Array, *, params: Any, eval_every: int = 1):
    """Runs ``family`` once per key in ``run_keys`` (same ``data`` and ``hparams`` for all runs) through
    ``dpjax.engine.run_many`` and returns its ``RunResult``; ``eval_metrics["params"]`` holds the flattened output
    parameters after every round, ``[runs, rounds, P]``, and ``round_metrics`` the family's per-round metrics ``[runs,
    rounds, ...]`` (``eval_every``: keep the parameters every that many rounds and after the last instead)."""
    from dpjax.engine import executor
    runs = int(run_keys.shape[0])
    batched = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(jnp.asarray(a), (runs,) + jnp.shape(a)), hparams)
    return executor.run_many(family, data, batched, run_keys, params=params, eval_fn=trajectory,
                              eval_every=eval_every)
