"""Central DP-SGD (Abadi et al. 2016, Algorithm 1) with any optax optimizer.

Each step the trainer samples a batch (Poisson with rate ``K/n``, or a fixed
``K``-subset without replacement), clips every record's gradient to ``C``
(``dpjax.primitives.per_example_clipped_sum``), adds ``N(0, noise_std^2 I)``
once to the clipped sum, divides by the public expected batch size and hands
the result to the server optimizer (``optax.adam`` by default; any optax
factory through ``parts.ServerOptimizer``, its learning rate a traced per-run
value). Data given as several silos is treated as one pooled dataset: every
silo samples its own records at rate ``K/n_i`` and the clipped sums add up.

Privacy (record level, central DP): ``R`` releases of a clipped sum with
contribution bound ``C`` plus Gaussian noise, subsampled at rate ``K/n_min``
(an upper bound on every record's rate): a ``GaussianPrivacy`` over a Poisson
(add-remove) or fixed-batch (replace-one) schedule with unit ``"record"``.
``private=False`` is the non-private twin (noise 0, no clip).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dpjax import _validate
from dpjax.accounting.events import GaussianSchedule, Neighboring, PrivacyUnit, Sampling
from dpjax.accounting.privacy_spec import NoPrivacy, PrivacySpec, gaussian
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, smallest_silo
from dpjax.engine import federated, parts
from dpjax.engine.contract import FamilyBase
from dpjax.engine.silos import SiloData
from dpjax.primitives import clipping
from dpjax.primitives import sampling as sampling_lib

PyTree = Any
OPTIMIZERS = {"adam": optax.adam, "sgd": optax.sgd, "adamw": optax.adamw, "rmsprop": optax.rmsprop}


#: Per-run hyperparameters: step size, std of the noise on the clipped sum, clip norm C
#: (the fields of Noisy MB-SGD's hparams, so the same type).
DpSgdHParams = MbSgdHParams


@dataclasses.dataclass(frozen=True)
class DpSgd(FamilyBase):
    """Central DP-SGD with an optax server optimizer.

    Args:
      problem: a dpjax problem (e.g. ``dpjax.problems.FlaxProblem``).
      num_rounds: R optimizer steps.
      batch_size: K, expected records per silo per step.
      sampling: ``"poisson"`` (default; add-remove) or ``"without-replacement"``
        (fixed batches; replace-one).
      optimizer: a key of ``OPTIMIZERS`` (``"adam"`` default).
      private: clip and add noise (True) or the non-private twin.
      neighboring: ``"add-remove"`` (default) or ``"replace-one"``.
      output: ``"last"``, ``"average"`` or ``"window"``.
    """

    problem: Any
    num_rounds: int
    batch_size: int
    sampling: str = "poisson"
    optimizer: str = "adam"
    private: bool = True
    neighboring: str = "add-remove"
    output: str = "last"
    window: int = 8

    hparams_type = DpSgdHParams

    def __post_init__(self):
        _validate.check_choice("sampling", self.sampling, ("poisson", "without-replacement"))
        _validate.check_choice("optimizer", self.optimizer, tuple(OPTIMIZERS))
        self.check_common()

    @property
    def sampler(self):
        return sampling_lib.make_sampler(self.sampling, self.batch_size)

    @property
    def server(self) -> parts.ServerOptimizer:
        return parts.ServerOptimizer(OPTIMIZERS[self.optimizer])

    def validate(self, data: SiloData) -> None:
        self.sampler.validate(data.min_size, self.num_rounds)

    def init(self, params, hparams: DpSgdHParams, data: SiloData, run_key) -> parts.RoundState:
        hparams = self.run_hparams(hparams)
        return parts.RoundState(params, jnp.zeros((), jnp.int32), self.averager.init(params),
                                federated.init_sampler_states(self.sampler, data, run_key),
                                self.server.init(params, hparams.learning_rate), hparams)

    def step(self, state: parts.RoundState, data: SiloData, key) -> tuple[parts.RoundState, dict]:
        hp = state.hparams
        idx, mask, overflow = federated.draw_silo_batches(self.sampler, data, state.sampler_states, key, state.round)
        rows = jnp.arange(data.num_silos)[:, None]

        def silo_sum(x, y, m):
            return clipping.per_example_clipped_sum(self.problem.loss, state.params, x, y, hp.clip_norm, m,
                                                    self.neighboring).total

        sums = jax.vmap(silo_sum)(data.x[rows, idx], data.y[rows, idx], mask)
        total = jax.tree_util.tree_map(lambda s: jnp.sum(s, axis=0), sums)
        privatizer = parts.CentralGaussian()
        noisy, _ = privatizer.update(total, privatizer.init(key), hp.noise_std)
        denom = float(self.batch_size * data.num_silos)  # public expected batch size
        gradient = jax.tree_util.tree_map(lambda t: t / denom, noisy)
        new_params, opt_state = self.server.step(state.params, gradient, state.opt_state)
        averaged = self.averager.update(state.averaged, state.params, new_params, state.round)
        new_state = dataclasses.replace(state, params=new_params, round=state.round + 1, averaged=averaged,
                                        opt_state=opt_state)
        return new_state, {"sampling_overflow": jnp.any(overflow), "batch_records": jnp.sum(mask)}

    def output_params(self, state: parts.RoundState):
        return self.averager.value(state.averaged, state.params, state.round)

    def privacy(self, silo_sizes, hparams: DpSgdHParams) -> PrivacySpec:
        """R subsampled Gaussian releases of a clipped sum (contribution C), at the
        smallest silo's rate ``K/n_min`` (every record's rate is at most that)."""
        if not self.private:
            return NoPrivacy("DpSgd(private=False) is the non-private twin", self.neighboring, "record")
        return gaussian(GaussianSchedule(
            noise_std=float(hparams.noise_std), contribution_bound=float(hparams.clip_norm),
            sampling=Sampling(self.sampling), dataset_size=smallest_silo(silo_sizes), batch_size=self.batch_size,
            steps=self.num_rounds, neighboring=Neighboring(self.neighboring), unit=PrivacyUnit.RECORD))


from dpjax.sweep.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("dp-sgd", DpSgd, twin="sgd")
