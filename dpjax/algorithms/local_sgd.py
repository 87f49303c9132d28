"""ISRL-DP Local SGD and non-private Local SGD (FedAvg): the baselines of Lowy & Razaviyayn (ICLR 2023), Appendix I.

Each round r:

1. the network makes a uniformly random subset S_r of M_r silos available;
2. every available silo i starts from the server model, ``w^{i,0} = w_r``, and takes K single-record steps,
   ``t = 1..K``::

       j_t ~ Uniform{0..n_i-1}                       (a fresh index each step)
       g_t = clip_C(grad f(w^{i,t-1}, x_{i,j_t})) + u_t,   u_t ~ N(0, sigma^2 I)
       w^{i,t} = Proj_W(w^{i,t-1} - eta g_t)

   with ``sigma = noise_multiplier x 2C`` (the sensitivity of one clipped gradient), and sends only its last local
   iterate ``w^{i,K}`` (the message);
3. the server sets ``w_{r+1} = (1/M_r) sum_{i in S_r} w^{i,K}`` (``"mean"``, the paper's FedAvg) or
   ``w_r + sum_{i in S_r} (w^{i,K} - w_r)`` (``"sum"``, summed local updates, the authors' scripts' scaling).

Privacy (ISRL-DP, record level, replace-one within a silo): silo i's message is post-processing of its R*K noisy
single-record gradients; each is a Gaussian mechanism of multiplier z on the clipped gradient of a uniformly random
record (sampling rate 1/n_i), adaptively composed R*K times. ``privacy()`` is the DP plan of the parts
(``LocalStepRecords``: K releases per round, each on a uniform 1-subset; ``ClipPerUnit``; ``LocalStepGaussian``). The
paper's own calibration ``sigma^2 = 8 C^2 R K ln(1/delta) / (eps^2 n^2)``
(``dpjax.accounting.isrl.isrl_local_sgd_paper_sigma``, an absolute std: ``noise_multiplier_for`` converts it) is not
certified by the moments accountant in the paper's regime (it needs RK >= n^2 eps/4): calibrate with the accountant
instead and report both.

``private=False`` is non-private Local SGD (FedAvg): the same compiled step with noise multiplier 0 and
``clip_norm = inf``. With ``noise_multiplier = 0`` and a clip that never binds, the private algorithm is bit-identical
to it (tested).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from dpjax.algorithms.isrl_mbsgd import IsrlRoundOptions, MbSgdHParams
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.engine.silos import SiloData
from dpjax.parts import Averager, ClipPerUnit, LocalStepGaussian, LocalStepRecords, LocalSteps, ModelAveraging

PyTree = Any

# Local SGD takes the same per-run hyperparameters as Noisy MB-SGD:
# learning_rate (eta of every local step), noise_multiplier (z of every local
# step's noise, std z x 2C), clip_norm (C, per-record gradient clip).
LocalSgdHParams = MbSgdHParams


@dataclasses.dataclass(frozen=True)
class LocalSgd(IsrlRoundOptions, ChainFamily):
    """ISRL-DP Local SGD and (``private=False``) non-private Local SGD / FedAvg.

    The noise is added inside each silo's sequential loop of K local steps, after every step's clipped gradient and
    before the next step's gradient is taken at the noisy iterate: the local loop (``LocalSteps``) folds each step's
    gradient through its inner chain (``ClipPerUnit``, then ``LocalStepGaussian``) under ``lax.scan``. The round is the
    generic fold: ``LocalStepRecords`` -> ``LocalSteps`` -> ``ModelAveraging`` -> ``Averager``; ``privacy()`` is the DP
    plan of those parts (K single-record releases per round).

    Args:
      problem: a dpjax problem.
      num_rounds: R (communication rounds).
      local_steps: K single-record local steps per silo per round (the same
        number of gradient evaluations as MB-SGD with batch K).
      availability: which silos take part (``IsrlRoundOptions``, as are ``private``, ``aggregation``, ``output``,
        ``window`` and ``projection_radius``); here ``private`` clips and adds noise at every local step,
        ``aggregation="mean"`` averages the local iterates (paper) and ``"sum"`` sums the local updates
        ``w^{i,K} - w_r`` (authors' scale), and the projection follows every local step.
      log_indices: add the record indices used by every silo to the round
        metrics (``"indices"`` ``[N, K]``, ``"available"``), for tests and audits."""

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
        inner = (ClipPerUnit("clip_norm"), LocalStepGaussian("noise_multiplier", num_steps=self.local_steps))
        return Parts(
            LocalStepRecords(self.availability, self.local_steps, all_silos=self.log_indices),
            (LocalSteps(self.problem, self.local_steps, self.projection_radius, inner=inner),
             ModelAveraging(self.aggregation, self.projection_radius), Averager(self.output, self.window)),
            log_batches=self.log_indices)


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("isrl-local-sgd", LocalSgd,  # "fedavg" is retired (registry.RETIRED)
                "ISRL-DP Local SGD: noisy local steps on each silo, averaged each round",
                twin={"local-sgd": "non-private Local SGD, the twin of isrl-local-sgd"})
