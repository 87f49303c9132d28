"""Accelerated noisy ISRL-DP minibatch SGD (Lowy & Razaviyayn, ICLR 2023, Algorithm 1; its body is lost in print,
so the AC-SA step of Ghadimi & Lan 2012 is used).

One round ``r``: every available silo releases its clipped minibatch mean at the AC-SA query point ``w_md`` plus
Gaussian noise, ``g_i = (1/K) sum_j clip_C(grad f(w_md, x_ij)) + u_i``, ``u_i ~ N(0, sigma^2 I)``,
``sigma = noise_multiplier x 2C/K`` (the sensitivity of the clipped mean); the server averages them and takes the
AC-SA step (``dpjax.parts.acsa``: the step, the multi-stage schedule of Appendix E.1 / Ghadimi & Lan 2013 Prop. 7,
the optional regulariser ``lam``). The output is ``w_ag``. The parts: ``SiloBatches`` -> ``MinibatchGradient`` ->
``ClipPerUnit`` -> ``GaussianNoise`` on each silo -> ``Aggregate`` -> ``AcsaServer`` (query ``w_md``, params ``w_ag``).

Variants by the local sampling scheme:

* ``sampling="one-pass"``: One-Pass Accelerated Noisy MB-SGD (Theorem 3.1/E.1): disjoint blocks of a per-silo
  permutation, so silo i's transcript is ONE Gaussian release per record (parallel composition), sensitivity 2C/K.
* ``sampling="with-replacement"``: accelerated ERM (Section 4, Theorem 4.1/F.1), K i.i.d. records per round.
* ``"without-replacement"`` / ``"poisson"``: the same step with the samplers the tight accountants certify.

Privacy (ISRL-DP, record level, replace-one within a silo): ``privacy()`` composes the parts' events with the
sampling scheme actually used. ``private=False`` is the non-private twin (noise multiplier 0, no clip);
``noise_multiplier = 0`` with a non-binding clip is bit-identical to it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from dpjax import _validate
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.parts import Aggregate, Averager, ClipPerUnit, GaussianNoise, MinibatchGradient, SiloBatches
from dpjax.parts.acsa import AcsaSchedule, AcsaServer
from dpjax.primitives import sampling as sampling_lib


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AcceleratedHParams:
    """Per-run hyperparameters: the AC-SA schedule, the noise multiplier z (each silo's noise std
    is ``z x 2C/K``) and the per-example clip C."""

    schedule: AcsaSchedule
    noise_multiplier: Any = 0.0
    clip_norm: Any = 1.0

    @classmethod
    def create(cls, schedule: AcsaSchedule, noise_multiplier=0.0, clip_norm=1.0) -> "AcceleratedHParams":
        _validate.check_if_concrete(_validate.check_nonnegative, "noise_multiplier", noise_multiplier)
        _validate.check_if_concrete(_validate.check_positive, "clip_norm", clip_norm, allow_inf=True)
        return cls(schedule, jnp.asarray(noise_multiplier, jnp.float32), jnp.asarray(clip_norm, jnp.float32))


@dataclasses.dataclass(frozen=True)
class AcceleratedMbSgd(ChainFamily):
    """Accelerated noisy ISRL-DP MB-SGD (Algorithm 1; one-pass Theorem 3.1, ERM Theorem 4.1) and its non-private twin.

    Args:
      problem: a dpjax problem.
      num_rounds: R; must equal the length of the hparams' schedule.
      batch_size: K records per silo per round.
      sampling: ``"one-pass"`` (Theorem 3.1, default), ``"with-replacement"`` (ERM, Theorem 4.1),
        ``"without-replacement"`` or ``"poisson"``.
      availability: silo availability model.
      private: clip + per-silo Gaussian noise (True) or non-private twin.
      aggregation: ``"mean"`` (paper) or ``"sum"``.
      projection_radius: radius of the ball W (None: R^d).
      neighboring: ``"replace-one"`` (ISRL-DP) or ``"add-remove"``.
      log_indices: add each silo's batch indices/mask to the round metrics (computes all N silos).
      sampling_rate: ``"poisson"`` only: the public rate q (required under add/remove; None under
        replace-one: ``K / n_i``), the same number the sampler draws with and the accountant reads."""

    problem: Any
    num_rounds: int
    batch_size: int
    sampling: str = "one-pass"
    availability: Any = sampling_lib.FullAvailability()
    private: bool = True
    aggregation: str = "mean"
    projection_radius: float | None = None
    neighboring: str = "replace-one"
    log_indices: bool = False
    sampling_rate: float | None = None

    hparams_type = AcceleratedHParams

    def __post_init__(self):
        _validate.check_choice("sampling", self.sampling,
                               ("one-pass", "with-replacement", "without-replacement", "poisson"))
        self.check_common()

    def parts(self, shape: DataShape) -> Parts:
        """Minibatch gradient at ``w_md`` -> per-silo Gaussian -> mean/sum -> AC-SA (only the M
        available silos are computed when M is static, unless indices are logged)."""
        return Parts(
            SiloBatches(self.availability, self.sampling, self.batch_size, all_silos=self.log_indices,
                        sampling_rate=self.sampling_rate),
            (MinibatchGradient(self.problem, self.batch_size), ClipPerUnit("clip_norm", self.neighboring),
             GaussianNoise("noise_multiplier", placement="silo"), Aggregate(self.aggregation),
             AcsaServer(self.num_rounds, self.projection_radius), Averager("last")),
            log_batches=self.log_indices)


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("isrl-accelerated", AcceleratedMbSgd,
                "accelerated ISRL-DP MB-SGD (one-pass Theorem 3.1, ERM Theorem 4.1, multi-stage)",
                twin={"accelerated": "non-private accelerated MB-SGD, the twin of isrl-accelerated"})
