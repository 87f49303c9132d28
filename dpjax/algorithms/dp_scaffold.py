"""DP-SCAFFOLD (Noble, Bellet & Dieuleveut, "Differentially Private Federated Learning on Heterogeneous
Data", AISTATS 2022, Algorithm 1): SCAFFOLD's control variates with record-level DP on each silo's data.

Round r: ``l`` of the N silos are available (``FixedAvailability``); each runs K local steps from the
server model x, on independent uniform s-subsets of its records (``LocalStepBatches``)::

    g_k  = (1/s) sum_{j in S_k} clip_C(grad f(y, x_j)) + N(0, (z 2C/s)^2 I)      # the inner chain
    y   <- y - eta_l (g_k - c_i + c)                                             # the SCAFFOLD correction
    c_i <- c_i - c + (x - y_K) / (K eta_l)                                       # option II of Karimireddy et al.

and sends ``x - y_K``; the server steps ``x <- x - eta_g mean_i (x - y_K^i)`` (``OptaxServer``). The
server's control variate ``c = c + (l/N) mean_i Delta c_i`` equals ``(1/N) sum_i c_i`` when every c_i
starts at 0, so the client part, which keeps every ``c_i`` (its state ``[N, ...]``), forms it.

Privacy (record level within a silo, replace-one): every noisy g_k is a Gaussian release on a uniform
s-subset of the silo's n_i records; the control variates and the model are post-processing. The run is
R K such releases composed (the DP plan of the parts), counting every round for every silo (the silo
sampling's amplification, which the paper also takes, is not claimed).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dpjax import _validate
from dpjax.algorithms.hparams import HParams, hparam
from dpjax.engine.chain import ChainFamily, DataShape, Parts, fold, init_all
from dpjax.engine.roles import Batch, Context, PerExampleGradients
from dpjax.parts import Aggregate, Averager, ClipPerUnit, LocalStepGaussian, OptaxServer
from dpjax.parts.selection import LocalStepBatches
from dpjax.primitives import sampling as sampling_lib


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ScaffoldHParams(HParams):
    """Per-run values: the server's and the clients' step sizes, the noise multiplier z, the clip C."""

    learning_rate: Any = hparam(1.0)
    client_learning_rate: Any = hparam(0.1)
    noise_multiplier: Any = hparam(0.0, _validate.check_nonnegative)
    clip_norm: Any = hparam(1.0, allow_inf=True)


@dataclasses.dataclass(frozen=True)
class ScaffoldClient:
    """Every computed silo's K corrected local steps (module docstring); each step's minibatch gradient
    folded through ``inner`` (clipper, then privatizer). State: the control variates ``c_i`` ``[N, ...]``."""

    problem: Any
    num_steps: int
    batch_size: int
    inner: tuple = ()

    roles = ("client",)

    def denominator(self, silo_sizes):
        return self.batch_size  # each step's clipped sum is divided by the public s

    def init(self, params, ctx: Context):
        return jax.tree_util.tree_map(lambda p: jnp.zeros((ctx.data.num_silos,) + jnp.shape(p), p.dtype), params)

    def update(self, batch: Batch, controls, ctx: Context):
        x, lr = ctx.query, ctx.hparams.client_learning_rate
        rows = batch.rows()
        c = jax.tree_util.tree_map(lambda a: jnp.mean(a, axis=0), controls)  # the server's control variate
        xs, ys = (a[rows[:, None, None], batch.indices] for a in (ctx.data.x, ctx.data.y))  # [M, K, s, ...]
        step_ctx = Context(ctx.round, ctx.key, ctx.hparams, batch=batch)
        inner_states = init_all(self.inner, x, step_ctx)

        def one_silo(xs, ys, c_i, states):
            def step(carry, records):
                y, states = carry
                units = PerExampleGradients(self.problem.loss, y, records[0][None], records[1][None],
                                            jnp.ones((1, self.batch_size), bool), self.batch_size, self.problem)
                g, states = fold(self.inner, units, states, step_ctx)
                y = jax.tree_util.tree_map(lambda w, gk, ci, cc: w - lr * (gk[0] - ci + cc), y, g.value, c_i, c)
                return (y, states), None

            (y, _), _ = jax.lax.scan(step, (x, states), (xs, ys))
            delta = optax.tree.sub(x, y)  # the pseudo-gradient x - y_K
            new_c = jax.tree_util.tree_map(lambda ci, cc, d: ci - cc + d / (self.num_steps * lr), c_i, c, delta)
            return delta, new_c

        deltas, new_c = jax.vmap(one_silo)(xs, ys, batch.select(controls), inner_states)
        keep = batch.available
        new_c = jax.tree_util.tree_map(
            lambda new, old: old.at[rows].set(jnp.where(keep.reshape((-1,) + (1,) * (new.ndim - 1)), new,
                                                        old[rows])), new_c, controls)
        return deltas, new_c


@dataclasses.dataclass(frozen=True)
class DpScaffold(ChainFamily):
    """DP-SCAFFOLD and (``private=False``) SCAFFOLD.

    Args:
      problem: a dpjax problem.
      num_rounds: R.
      silos_per_round: l, the silos available each round (a uniform l-subset).
      local_steps: K.
      batch_size: s, the records of each local step."""

    problem: Any
    num_rounds: int
    silos_per_round: int
    local_steps: int
    batch_size: int
    private: bool = True

    hparams_type = ScaffoldHParams

    def __post_init__(self):
        for name in ("silos_per_round", "local_steps", "batch_size"):
            _validate.check_int(name, getattr(self, name), min_value=1)
        self.check_common()

    def validate(self, data) -> None:
        _validate.check_le("silos_per_round", self.silos_per_round, "num_silos", data.num_silos)
        self.parts(DataShape.of(data)).selection.validate(data)

    def parts(self, shape: DataShape) -> Parts:
        inner = (ClipPerUnit("clip_norm"), LocalStepGaussian("noise_multiplier", num_steps=self.local_steps))
        availability = sampling_lib.FixedAvailability(self.silos_per_round)
        return Parts(LocalStepBatches(availability, self.local_steps, self.batch_size),
                     (ScaffoldClient(self.problem, self.local_steps, self.batch_size, inner), Aggregate("mean"),
                      OptaxServer(), Averager("last")))


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("dp-scaffold", DpScaffold, "DP-SCAFFOLD (Noble et al.): control variates, record-level DP per silo",
                twin={"scaffold": "non-private SCAFFOLD (option II control variates), the twin of dp-scaffold"})
