"""ISRL-DP Local SGD and non-private Local SGD (FedAvg): the baselines of
Lowy & Razaviyayn (ICLR 2023), Appendix I.

Each round r:

1. the network makes a uniformly random subset S_r of M_r silos available;
2. every available silo i starts from the server model, ``w^{i,0} = w_r``, and
   takes K single-record steps, ``t = 1..K``::

       j_t ~ Uniform{0..n_i-1}                       (a fresh index each step)
       g_t = clip_C(grad f(w^{i,t-1}, x_{i,j_t})) + u_t,   u_t ~ N(0, sigma^2 I)
       w^{i,t} = Proj_W(w^{i,t-1} - eta g_t)

   and sends only its last local iterate ``w^{i,K}`` (the message);
3. the server sets ``w_{r+1} = (1/M_r) sum_{i in S_r} w^{i,K}`` (``"mean"``,
   the paper's FedAvg) or ``w_r + sum_{i in S_r} (w^{i,K} - w_r)``
   (``"sum"``, summed local updates, the authors' scripts' scaling).

Privacy (ISRL-DP, record level, replace-one within a silo): silo i's message
is post-processing of its R*K noisy single-record gradients; each is a
Gaussian mechanism with l2 sensitivity ``2C`` (one clipped gradient replaced)
applied to a uniformly random record (sampling rate 1/n_i), adaptively
composed R*K times. ``privacy()`` hands exactly this to the accountant
(a uniformly random 1-subset per step, i.e. fixed-size sampling without
replacement with K = 1). The paper's own calibration
``sigma^2 = 8 C^2 R K ln(1/delta) / (eps^2 n^2)``
(``dpjax.accounting.isrl.isrl_local_sgd_paper_sigma``) is not certified by
the moments accountant in the paper's regime (it needs RK >= n^2 eps/4): calibrate with the
accountant instead and report both.

``private=False`` is non-private Local SGD (FedAvg): the same compiled step
with ``noise_std = 0`` and ``clip_norm = inf`` (``parts.non_private``). With ``noise_std = 0`` and a clip that never
binds, the private algorithm is bit-identical to it (tested).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from dpjax import keys
from dpjax.accounting.privacy_spec import PrivacySpec
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, isrl_privacy
from dpjax.engine.contract import FamilyBase
from dpjax.engine import federated, parts
from dpjax.engine.silos import SiloData
from dpjax.primitives import sampling as sampling_lib

PyTree = Any

# Local SGD takes the same per-run hyperparameters as Noisy MB-SGD:
# learning_rate (eta of every local step), noise_std (sigma per local step),
# clip_norm (C, per-record gradient clip).
LocalSgdHParams = MbSgdHParams


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LocalSgdState:
    params: PyTree
    round: jax.Array
    averaged: PyTree
    hparams: MbSgdHParams


@dataclasses.dataclass(frozen=True)
class LocalSgd(FamilyBase):
    """ISRL-DP Local SGD and (``private=False``) non-private Local SGD / FedAvg.

    Args:
      problem: a dpjax problem.
      num_rounds: R (communication rounds).
      local_steps: K single-record local steps per silo per round (the same
        number of gradient evaluations as MB-SGD with batch K).
      availability: ``FullAvailability()``, ``FixedAvailability(M)`` or
        ``RandomAvailability(pmf)``.
      private: clip and add noise at every local step (True) or not.
      aggregation: ``"mean"`` (average of the local iterates, paper) or
        ``"sum"`` (sum of the local updates ``w^{i,K} - w_r``, authors' scale).
      output: ``"last"``, ``"average"`` or ``"window"`` (as ``NoisyMbSgd``).
      projection_radius: radius of the ball W (applied after every local
        step), None for R^d.
      log_indices: add the record indices used by every silo to the round
        metrics (``"indices"`` ``[N, K]``), for tests and audits.
    """

    problem: Any
    num_rounds: int
    local_steps: int
    availability: Any = sampling_lib.FullAvailability()
    private: bool = True
    aggregation: str = "mean"
    output: str = "last"
    window: int = 8
    projection_radius: float | None = None
    log_indices: bool = False

    hparams_type = MbSgdHParams

    def __post_init__(self):
        self.check_common()
        if self.output == "exponential":
            raise ValueError("output='exponential' is not supported by LocalSgd; use 'last', 'average' or 'window'")

    def init(self, params, hparams: MbSgdHParams, data: SiloData, run_key) -> LocalSgdState:
        return LocalSgdState(params, jnp.zeros((), jnp.int32), self.averager.init(params), self.run_hparams(hparams))

    def step(self, state: LocalSgdState, data: SiloData, key) -> tuple[LocalSgdState, dict]:
        """availability -> K local steps with per-step Gaussian noise (``parts.LocalSteps``,
        ``parts.StepGaussian``) -> model averaging (``parts.ModelAveraging``) -> averager."""
        hp = state.hparams
        if self.log_indices:  # the index log is per silo: keep all N rows
            silo_ids, available = None, self.availability.sample(keys.stream_key(key, "availability"), data.num_silos)
        else:  # static M: only the available silos run their local steps
            silo_ids, available = federated.available_silos(self.availability, key, data.num_silos)
        client = parts.LocalSteps(self.problem, self.local_steps, parts.StepGaussian(data.num_silos),
                                  self.projection_radius)
        messages, indices = client(state.params, data, key, hp, silo_ids)
        new_params = parts.ModelAveraging(self.aggregation, self.projection_radius).step(state.params, messages,
                                                                                         available)
        averaged = self.averager.update(state.averaged, state.params, new_params, state.round)
        metrics = {"num_available": jnp.sum(available)}
        if self.log_indices:
            metrics["indices"] = indices
            metrics["available"] = available
        return LocalSgdState(new_params, state.round + 1, averaged, hp), metrics

    def output_params(self, state: LocalSgdState):
        return self.averager.value(state.averaged, state.params, state.round)

    def privacy(self, silo_sizes, hparams: MbSgdHParams) -> PrivacySpec:
        """Each silo's transcript: R*K adaptive Gaussian releases, each on one
        uniformly random record (rate 1/n) with sensitivity 2C (replace-one);
        every round counts, available or not."""
        return isrl_privacy(self, silo_sizes, hparams.noise_std, float(hparams.clip_norm),
                            sampling="without-replacement", batch_size=1,
                            steps=self.num_rounds * self.local_steps)


from dpjax.sweep.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("isrl-local-sgd", LocalSgd, twin=("local-sgd", "fedavg"))  # two names of one twin
