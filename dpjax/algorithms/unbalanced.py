"""Noisy ISRL-DP MB-SGD with unbalanced silos and per-silo privacy budgets
(Lowy & Razaviyayn, ICLR 2023, Appendix H, Algorithm 7, Theorem H.1).

Algorithm 7 is Algorithm 2 with silo-specific batch sizes ``K_i`` and noise
``sigma_i``: in round r every available silo i releases

    g_i = (1/K_i) sum_{j <= K_i} clip_C(grad f(w_r, x_ij)) + u_i,   u_i ~ N(0, sigma_i^2 I)

with ``sigma_i = z_i x 2C/K_i`` (``noise_multiplier``: one multiplier per silo of the sensitivity of its clipped mean),
and the server averages the available silos' messages with equal weights ``1/M_r``. On the padded arrays every silo
draws ``max_i K_i`` indices and keeps the first ``K_i`` (for without-replacement sampling the top-K_i of i.i.d. scores:
a uniform K_i-subset; for with-replacement K_i i.i.d. draws); the divisor is the public ``K_i``.

The round is Noisy MB-SGD's parts (``dpjax.engine.chain``) with per-silo ``K_i`` (``SiloBatches(batch_sizes=...)``,
``MinibatchGradient(batch_sizes=...)``) and per-silo multipliers (``GaussianNoise`` reads ``[N]``).

Parameters: ``schedules.unbalanced_parameters`` computes ``K_i = ceil(c n_i)`` (common fraction c; Theorem H.1 needs
K_i/n_i equal across silos) and the paper's ``sigma_i`` (absolute: ``noise_multiplier_for`` converts them with the
family's own sensitivities); a tight accountant can calibrate each multiplier from ``privacy()``.

Privacy (generalised ISRL-DP, Definition 10): silo i's transcript is R releases of its minibatch mean plus Gaussian
noise of multiplier ``z_i``; ``privacy()`` composes the parts' events (``dpjax.accounting.events``): silos that differ
in batch size or multiplier get their own guarantee (``PerSiloPrivacy``, the run's epsilon is the largest; calibration
gives every silo its own multiplier), equal ones are accounted together at the smallest.

The clipper is ``silo_clipper()`` (every record's gradient clipped to C); a subclass may declare another one, and
``privacy()`` reads that clipper's bound and event.

``private=False`` is the non-private twin (same compiled round with noise multipliers 0 and no clip).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.algorithms.isrl_mbsgd import IsrlRoundOptions
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.engine.silos import SiloData
from dpjax.parts import (
    Aggregate, Averager, ClipPerUnit, GaussianNoise, MinibatchGradient, OptaxServer, SiloBatches,
)
from dpjax.primitives import sampling as sampling_lib

PyTree = Any


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class UnbalancedHParams:
    """Per-run hyperparameters: step size, per-silo noise multipliers ``[N]`` (each silo's std over
    the sensitivity of its message) and the clip C."""

    learning_rate: Any
    noise_multiplier: Any
    clip_norm: Any = 1.0

    @classmethod
    def create(cls, learning_rate, noise_multiplier, clip_norm=1.0) -> "UnbalancedHParams":
        zs = np.asarray(noise_multiplier, np.float64)
        if zs.ndim != 1 or zs.size == 0 or not np.all(np.isfinite(zs)) or np.any(zs < 0):
            raise ValueError(f"noise_multiplier={noise_multiplier!r} must be a non-empty 1-D sequence of finite "
                             "values >= 0")
        _validate.check_if_concrete(_validate.check_positive, "learning_rate", learning_rate)
        _validate.check_if_concrete(_validate.check_positive, "clip_norm", clip_norm, allow_inf=True)
        return cls(jnp.asarray(learning_rate, jnp.float32), jnp.asarray(zs, jnp.float32),
                   jnp.asarray(clip_norm, jnp.float32))


@dataclasses.dataclass(frozen=True)
class UnbalancedNoisyMbSgd(IsrlRoundOptions, ChainFamily):
    """Algorithm 7: Noisy MB-SGD with per-silo ``K_i`` and noise multipliers ``z_i``.

    Args:
      problem: a dpjax problem.
      num_rounds: R.
      batch_sizes: ``(K_1, ..., K_N)``, static, ``K_i <= n_i``.
      sampling: ``"without-replacement"`` (default) or ``"with-replacement"``.
      availability: which silos take part (``IsrlRoundOptions``, as are ``private``, ``aggregation``,
        ``output``, ``window`` and ``projection_radius``)."""

    problem: Any
    num_rounds: int
    batch_sizes: tuple
    sampling: str = "without-replacement"

    hparams_type = UnbalancedHParams

    def __post_init__(self):
        self.check_common()
        if not isinstance(self.batch_sizes, tuple) or not self.batch_sizes:
            raise ValueError(f"batch_sizes={self.batch_sizes!r} must be a non-empty tuple of ints (one per silo)")
        for i, k in enumerate(self.batch_sizes):
            _validate.check_int(f"batch_sizes[{i}]", k, min_value=1)
        _validate.check_choice("sampling", self.sampling, ("without-replacement", "with-replacement"))
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

    def check_hparams(self, hparams):
        """Also refuses noise multipliers that are not one per silo."""
        super().check_hparams(hparams)
        if np.shape(hparams.noise_multiplier)[-1:] != (len(self.batch_sizes),):
            raise ValueError(f"hparams.noise_multiplier has shape {np.shape(hparams.noise_multiplier)}; it needs "
                             f"one multiplier per silo ({len(self.batch_sizes)})")
        return hparams

    def hparams_from_values(self, *, noise_multiplier=0.0, **fields) -> UnbalancedHParams:
        """A scalar ``noise_multiplier`` is every silo's z_i."""
        if np.ndim(noise_multiplier) == 0:
            noise_multiplier = [float(noise_multiplier)] * len(self.batch_sizes)
        return UnbalancedHParams.create(noise_multiplier=noise_multiplier, **fields)

    def silo_clipper(self):
        """The clipper of every silo's minibatch: each record's gradient clipped to C."""
        return ClipPerUnit("clip_norm")

    def parts(self, shape: DataShape) -> Parts:
        """Algorithm 2's parts with per-silo ``K_i`` (first ``K_i`` of ``max K_i`` draws) and ``z_i``."""
        k_max = max(self.batch_sizes)
        return Parts(
            SiloBatches(self.availability, self.sampling, k_max, batch_sizes=self.batch_sizes),
            (MinibatchGradient(self.problem, k_max, batch_sizes=self.batch_sizes), self.silo_clipper(),
             GaussianNoise("noise_multiplier", placement="silo"), Aggregate(self.aggregation),
             OptaxServer(projection_radius=self.projection_radius), Averager(self.output, self.window)))


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("isrl-unbalanced", UnbalancedNoisyMbSgd,
                "ISRL-DP MB-SGD for unbalanced silos (Algorithm 7: per-silo K_i and noise z_i)",
                twin={"unbalanced": "non-private MB-SGD on unbalanced silos, the twin of isrl-unbalanced"})
