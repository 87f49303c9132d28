"""ISRL-DP Local SGD and non-private Local SGD (FedAvg): the baselines of
Lowy & Razaviyayn (ICLR 2023), Appendix I.

Each round r:

1. the network makes a uniformly random subset S_r of M_r silos available;
2. every available silo i starts from the server model, ``w^{i,0} = w_r``, and
   takes K single-record steps, ``t = 1..K``::

       j_t ~ Uniform{0..n_i-1}                       (a fresh index each step)
       g_t = clip_C(grad f(w^{i,t-1}, x_{i,j_t})) + u_t,   u_t ~ N(0, sigma^2 I)
       w^{i,t} = Proj_W(w^{i,t-1} - eta g_t)

   with ``sigma = noise_multiplier x 2C`` (the sensitivity of one clipped
   gradient), and sends only its last local iterate ``w^{i,K}`` (the message);
3. the server sets ``w_{r+1} = (1/M_r) sum_{i in S_r} w^{i,K}`` (``"mean"``,
   the paper's FedAvg) or ``w_r + sum_{i in S_r} (w^{i,K} - w_r)``
   (``"sum"``, summed local updates, the authors' scripts' scaling).

Privacy (ISRL-DP, record level, replace-one within a silo): silo i's message
is post-processing of its R*K noisy single-record gradients; each is a
Gaussian mechanism of multiplier z on the clipped gradient of a uniformly
random record (sampling rate 1/n_i), adaptively composed R*K times.
``privacy()`` is the DP plan of the parts (``LocalStepRecords``: K
releases per round, each on a uniform 1-subset; ``ClipPerUnit``;
``LocalStepGaussian``). The paper's own calibration
``sigma^2 = 8 C^2 R K ln(1/delta) / (eps^2 n^2)``
(``dpjax.accounting.isrl.isrl_local_sgd_paper_sigma``, an absolute std:
``noise_multiplier_for`` converts it) is not certified by the moments
accountant in the paper's regime (it needs RK >= n^2 eps/4): calibrate with the
accountant instead and report both.

``private=False`` is non-private Local SGD (FedAvg): the same compiled step
with noise multiplier 0 and ``clip_norm = inf``. With ``noise_multiplier = 0``
and a clip that never binds, the private algorithm is bit-identical to it
(tested).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from dpjax.algorithms.isrl_mbsgd import IsrlRoundOptions, MbSgdHParams
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.engine.roles import Context
from dpjax.engine.silos import SiloData
from dpjax.parts import Averager, ClipPerUnit, LocalStepGaussian, LocalStepRecords, LocalSteps, ModelAveraging

PyTree = Any

# Local SGD takes the same per-run hyperparameters as Noisy MB-SGD:
# learning_rate (eta of every local step), noise_multiplier (z of every local
# step's noise, std z x 2C), clip_norm (C, per-record gradient clip).
LocalSgdHParams = MbSgdHParams


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LocalSgdState:
    params: PyTree
    round: jax.Array
    selection: Any
    averaged: PyTree
    hparams: MbSgdHParams


@dataclasses.dataclass(frozen=True)
class LocalSgd(IsrlRoundOptions, ChainFamily):
    """ISRL-DP Local SGD and (``private=False``) non-private Local SGD / FedAvg.

    One of the two families with a step of their own: the noise is added
    inside each silo's sequential loop of K local steps, after every step's
    clipped gradient and before the next step's gradient is taken at the
    noisy iterate, so the round is not one pass through the chain's roles
    (client -> clipper -> privatizer -> aggregator once per round). The step
    is still built from parts -- the batch selection (``LocalStepRecords``),
    the per-step clipper (``ClipPerUnit``) and privatizer
    (``LocalStepGaussian``) run by the local loop (``LocalSteps``), the server
    (``ModelAveraging``) and the averager -- and ``privacy()`` is the chain's
    DP plan of those parts (K single-record releases per round).

    Args:
      problem: a dpjax problem.
      num_rounds: R (communication rounds).
      local_steps: K single-record local steps per silo per round (the same
        number of gradient evaluations as MB-SGD with batch K).
      availability: which silos take part (``IsrlRoundOptions``, as are ``private``, ``aggregation``,
        ``output``, ``window`` and ``projection_radius``); here ``private`` clips and adds noise at
        every local step, ``aggregation="mean"`` averages the local iterates (paper) and ``"sum"``
        sums the local updates ``w^{i,K} - w_r`` (authors' scale), and the projection follows every
        local step.
      log_indices: add the record indices used by every silo to the round
        metrics (``"indices"`` ``[N, K]``), for tests and audits.
    """

    problem: Any
    num_rounds: int
    local_steps: int
    log_indices: bool = False

    hparams_type = MbSgdHParams

    def __post_init__(self):
        self.check_common()
        if self.output == "exponential":
            raise ValueError("output='exponential' is not supported by LocalSgd; use 'last', 'average' or 'window'")

    def validate(self, data: SiloData) -> None:
        self.availability.validate(data.num_silos)

    def parts(self, shape: DataShape) -> Parts:
        return Parts(
            selection=LocalStepRecords(self.availability, self.local_steps, all_silos=self.log_indices),
            client=LocalSteps(self.problem, self.local_steps, self.projection_radius),
            clipper=ClipPerUnit("clip_norm"),
            privatizer=LocalStepGaussian("noise_multiplier"),
            aggregator=None,  # the server averages local models itself
            server=ModelAveraging(self.aggregation, self.projection_radius),
            averager=Averager(self.output, self.window))

    def init(self, params, hparams: MbSgdHParams, data: SiloData, run_key) -> LocalSgdState:
        p = self.parts(DataShape.of(data))
        return LocalSgdState(params, jnp.zeros((), jnp.int32), p.selection.init(data, run_key),
                             p.averager.init(params, run_key), self.run_hparams(hparams))

    def step(self, state: LocalSgdState, data: SiloData, key) -> tuple[LocalSgdState, dict]:
        """availability x K records -> K local steps with per-step clip and Gaussian noise ->
        model averaging -> averager."""
        p = self.parts(DataShape.of(data))
        ctx = Context(state.round, key, state.hparams)
        batch, selection = p.selection.update(state.selection, data, ctx)
        models = p.client.run(state.params, batch, data, p.clipper, p.privatizer, ctx)
        new_params = p.server.update(models, batch.available, state.params)
        averaged = p.averager.update(state.averaged, state.params, new_params, ctx)
        metrics = {"num_available": jnp.sum(batch.available)}
        if self.log_indices:
            metrics["indices"] = batch.indices
            metrics["available"] = batch.available
        return LocalSgdState(new_params, state.round + 1, selection, averaged, state.hparams), metrics

    def output_params(self, state: LocalSgdState):
        return self.parts(DataShape(1, 1)).averager.value(state.averaged, state.params, state.round)


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("isrl-local-sgd", LocalSgd,  # "fedavg" is retired (registry.RETIRED)
                "ISRL-DP Local SGD: noisy local steps on each silo, averaged each round",
                twin={"local-sgd": "non-private Local SGD, the twin of isrl-local-sgd"})
