"""Noisy ISRL-DP MB-SGD with unbalanced silos and per-silo privacy budgets
(Lowy & Razaviyayn, ICLR 2023, Appendix H, Algorithm 7, Theorem H.1),
plus the authors'-code minibatch-average clipping option.

Algorithm 7 is Algorithm 2 with silo-specific batch sizes ``K_i`` and noise
``sigma_i``: in round r every available silo i releases

    g_i = (1/K_i) sum_{j <= K_i} clip_C(grad f(w_r, x_ij)) + u_i,   u_i ~ N(0, sigma_i^2 I)

and the server averages the available silos' messages with equal weights
``1/M_r``. On the padded arrays every silo draws ``max_i K_i`` indices and
keeps the first ``K_i`` (for without-replacement sampling the top-K_i of
i.i.d. scores: a uniform K_i-subset; for with-replacement K_i i.i.d. draws);
the divisor is the public ``K_i``.

Parameters: ``schedules.unbalanced_parameters`` computes ``K_i = ceil(c n_i)``
(common fraction c; Theorem H.1 needs K_i/n_i equal across silos) and the paper's ``sigma_i``; a tight
accountant can calibrate each ``sigma_i`` from ``privacy()``.

Privacy (generalised ISRL-DP, Definition 10): silo i's transcript is R
releases of its minibatch mean with sensitivity ``2C/K_i`` plus
``N(0, sigma_i^2 I)``; each silo has its own guarantee, computed from its
own schedule (``privacy()`` holds one per silo).

``clip_mode="minibatch-average"`` reproduces the insurance script of the
authors (it clips the minibatch *mean* to C). One record can then
move a message by up to 2C, so its schedules use contribution bound C (not
C/K_i): the honest, much weaker guarantee.

``private=False`` is the non-private twin (same compiled step with sigma = 0
and no clip).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.accounting.privacy_spec import NoPrivacy, PerSiloPrivacy, PrivacySpec, gaussian
from dpjax.algorithms.isrl_mbsgd import silo_transcript_schedule
from dpjax.engine import federated, parts
from dpjax.engine.contract import RoundFamily
from dpjax.engine.silos import SiloData
from dpjax.primitives import sampling as sampling_lib

PyTree = Any


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class UnbalancedHParams:
    """Per-run hyperparameters: step size, per-silo noise stds ``[N]`` and the clip C."""

    learning_rate: Any
    noise_std: Any
    clip_norm: Any = 1.0

    @classmethod
    def create(cls, learning_rate, noise_std, clip_norm=1.0) -> "UnbalancedHParams":
        stds = np.asarray(noise_std, np.float64)
        if stds.ndim != 1 or stds.size == 0 or not np.all(np.isfinite(stds)) or np.any(stds < 0):
            raise ValueError(f"noise_std={noise_std!r} must be a non-empty 1-D sequence of finite values >= 0")
        _validate.check_if_concrete(_validate.check_positive, "learning_rate", learning_rate)
        _validate.check_if_concrete(_validate.check_positive, "clip_norm", clip_norm, allow_inf=True)
        return cls(jnp.asarray(learning_rate, jnp.float32), jnp.asarray(stds, jnp.float32),
                   jnp.asarray(clip_norm, jnp.float32))


UnbalancedState = parts.RoundState


@dataclasses.dataclass(frozen=True)
class UnbalancedNoisyMbSgd(RoundFamily):
    """Algorithm 7: Noisy MB-SGD with per-silo ``K_i`` and ``sigma_i``.

    Args:
      problem: a dpjax problem.
      num_rounds: R.
      batch_sizes: ``(K_1, ..., K_N)``, static, ``K_i <= n_i``.
      sampling: ``"without-replacement"`` (default) or ``"with-replacement"``.
      availability: silo availability model.
      private: clip + noise (True) or the non-private twin.
      aggregation: ``"mean"`` (paper) or ``"sum"``.
      output: ``"last"``, ``"average"`` or ``"window"``.
      projection_radius: radius of W (None: R^d).
      clip_mode: ``"per-example"`` (default) or ``"minibatch-average"``
        (authors' insurance script; weaker privacy, see module docstring).
    """

    problem: Any
    num_rounds: int
    batch_sizes: tuple
    sampling: str = "without-replacement"
    availability: Any = sampling_lib.FullAvailability()
    private: bool = True
    aggregation: str = "mean"
    output: str = "last"
    window: int = 8
    projection_radius: float | None = None
    clip_mode: str = "per-example"

    hparams_type = UnbalancedHParams

    def __post_init__(self):
        self.check_common()
        if not isinstance(self.batch_sizes, tuple) or not self.batch_sizes:
            raise ValueError(f"batch_sizes={self.batch_sizes!r} must be a non-empty tuple of ints (one per silo)")
        for i, k in enumerate(self.batch_sizes):
            _validate.check_int(f"batch_sizes[{i}]", k, min_value=1)
        _validate.check_choice("sampling", self.sampling, ("without-replacement", "with-replacement"))
        _validate.check_choice("clip_mode", self.clip_mode, federated.CLIP_MODES)
        if self.output == "exponential":
            raise ValueError("output='exponential' is not supported here; use 'last', 'average' or 'window'")

    @property
    def sampler(self):
        return sampling_lib.make_sampler(self.sampling, max(self.batch_sizes))

    def validate(self, data: SiloData) -> None:
        self.availability.validate(data.num_silos)
        if len(self.batch_sizes) != data.num_silos:
            raise ValueError(f"batch_sizes has {len(self.batch_sizes)} entries; the data has {data.num_silos} silos")
        for i, (k, n) in enumerate(zip(self.batch_sizes, data.silo_sizes())):
            if k > n:
                raise ValueError(f"batch_sizes[{i}]={k} must be <= that silo's size n_{i}={n}")

    def init(self, params, hparams: UnbalancedHParams, data: SiloData, run_key) -> UnbalancedState:
        if np.shape(hparams.noise_std)[-1:] != (data.num_silos,):
            raise ValueError(
                f"hparams.noise_std has shape {np.shape(hparams.noise_std)}; it needs one std per silo ({data.num_silos})"
            )
        return super().init(params, hparams, data, run_key)

    def hparams_from_values(self, *, noise_std=0.0, **fields) -> UnbalancedHParams:
        """A scalar ``noise_std`` is every silo's sigma_i."""
        if np.ndim(noise_std) == 0:
            noise_std = [float(noise_std)] * len(self.batch_sizes)
        return UnbalancedHParams.create(noise_std=noise_std, **fields)

    def round(self, data: SiloData) -> parts.FederatedRound:
        """Algorithm 2's round with per-silo ``K_i`` (first ``K_i`` of ``max K_i`` draws) and ``sigma_i``."""
        client = parts.MinibatchGradient(self.problem, self.sampler, clip_mode=self.clip_mode,
                                         batch_sizes=self.batch_sizes)
        return parts.FederatedRound(self.availability, client, parts.SiloGaussian(data.num_silos),
                                    parts.Aggregate(self.aggregation),
                                    parts.ServerOptimizer(projection_radius=self.projection_radius), self.averager)

    def privacy(self, silo_sizes, hparams: UnbalancedHParams) -> PrivacySpec:
        """Per-silo guarantees (silo i: R releases, sensitivity ``2C/K_i`` or
        ``2C``, noise ``sigma_i``); the run's epsilon is the largest and
        calibration gives every silo its own ``noise_std``."""
        if not self.private:
            return NoPrivacy("UnbalancedNoisyMbSgd(private=False) is the non-private twin", "replace-one",
                             "record-in-silo")
        sizes = [int(s) for s in silo_sizes]
        stds = np.asarray(hparams.noise_std, np.float64).reshape(-1)
        if len(sizes) != len(self.batch_sizes) or stds.size != len(self.batch_sizes):
            raise ValueError(
                f"silo_sizes has {len(sizes)} entries and noise_std {stds.size}; both need {len(self.batch_sizes)}"
            )
        clip = float(hparams.clip_norm)
        return PerSiloPrivacy(tuple(
            gaussian(silo_transcript_schedule(
                noise_std=std, contribution_bound=clip / k if self.clip_mode == "per-example" else clip,
                sampling=self.sampling, silo_size=n, batch_size=k, steps=self.num_rounds))
            for n, k, std in zip(sizes, self.batch_sizes, stds)
        ), field="noise_std")


from dpjax.sweep.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("isrl-unbalanced", UnbalancedNoisyMbSgd, twin="unbalanced")
