"""ISRL-DP Noisy minibatch SGD (Lowy & Razaviyayn, ICLR 2023, Algorithm 2).

Each round r:

1. the network makes a uniformly random subset S_r of M_r silos available;
2. every available silo i samples K of its n_i records, computes per-example
   gradients at w_r, clips each to ``clip_norm`` (L) and releases
   ``g_i = (1/K) sum_j clip(grad f(w_r, x_ij)) + u_i``, ``u_i ~ N(0, sigma^2 I)``;
3. the server averages the messages, ``g = (1/M_r) sum_{i in S_r} g_i``, and
   steps ``w_{r+1} = Proj_W(w_r - eta g)``.

Privacy (inter-silo record-level DP, replace-one within a silo): silo i's
transcript is R releases of a minibatch mean with l2 sensitivity ``2L/K``
(for a record drawn once) plus Gaussian noise of std sigma.
``privacy()`` hands exactly this to ``dpjax.accounting``; which
accountant certifies it depends on the sampling scheme (the paper's
with-replacement sampling is accounted conservatively; without-replacement
or Poisson sampling get tight RDP/PLD accounting).

``private=False`` gives the non-private twin (MB-SGD / "FedSGD"): the same
compiled round with noise std 0 and clip norm inf (``parts.non_private``), so
with ``noise_std = 0`` and a clip that never binds the private algorithm is
bit-identical to it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from dpjax import _validate
from dpjax.accounting.events import GaussianSchedule, Neighboring, PrivacyUnit, Sampling
from dpjax.accounting.privacy_spec import NoPrivacy, PrivacySpec, gaussian
from dpjax.engine import federated, parts
from dpjax.engine.contract import RoundFamily
from dpjax.engine.silos import SiloData
from dpjax.primitives import sampling as sampling_lib

PyTree = Any


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class MbSgdHParams:
    """Per-run hyperparameters (a sweep vmaps over these).

    Attributes:
      learning_rate: constant step size eta.
      noise_std: sigma, per-coordinate std of each silo's Gaussian noise
        (absolute, in gradient units, as in the paper).
      clip_norm: per-example clip threshold L (the gradient-norm bound that
        the sensitivity 2L/K assumes).
    """

    learning_rate: Any
    noise_std: Any = 0.0
    clip_norm: Any = 1.0

    @classmethod
    def create(cls, learning_rate, noise_std=0.0, clip_norm=1.0) -> "MbSgdHParams":
        # Concrete values of any kind (Python, NumPy, jax scalars and arrays) are checked; tracers only in
        # dpjax.primitives.checked mode.
        _validate.check_if_concrete(_validate.check_positive, "learning_rate", learning_rate)
        _validate.check_if_concrete(_validate.check_nonnegative, "noise_std", noise_std)
        _validate.check_if_concrete(_validate.check_positive, "clip_norm", clip_norm, allow_inf=True)
        f32 = lambda v: jnp.asarray(v, jnp.float32)
        return cls(f32(learning_rate), f32(noise_std), f32(clip_norm))


def silo_transcript_schedule(
    *, noise_std, contribution_bound, sampling, silo_size, batch_size, steps, neighboring="replace-one"
) -> GaussianSchedule:
    """One silo's transcript under ISRL-DP (unit: a record within that silo).

    Shared by every ISRL-DP algorithm family: ``steps`` Gaussian releases,
    each moved by at most ``contribution_bound`` by one record of a silo of
    ``silo_size`` records sampled by ``sampling``.
    """
    return GaussianSchedule(
        noise_std=float(noise_std),
        contribution_bound=float(contribution_bound),
        sampling=Sampling(sampling),
        dataset_size=int(silo_size),
        batch_size=batch_size,
        steps=int(steps),
        neighboring=Neighboring(neighboring),
        unit=PrivacyUnit.RECORD_IN_SILO,
    )



def smallest_silo(silo_sizes) -> int:
    """The smallest silo size (the guarantee that holds for every silo); an int passes through."""
    if isinstance(silo_sizes, (int,)) or getattr(silo_sizes, "ndim", 1) == 0:
        return _validate.check_int("silo_sizes", int(silo_sizes), min_value=1)
    sizes = [int(n) for n in silo_sizes]
    if not sizes:
        raise ValueError("silo_sizes=[] must name at least one silo")
    return _validate.check_int("silo_sizes (smallest)", min(sizes), min_value=1)


def isrl_privacy(algorithm, silo_sizes, noise_std, contribution_bound, *, sampling, batch_size, steps,
                 neighboring="replace-one") -> PrivacySpec:
    """ISRL-DP ``privacy()`` of a family whose silos each release ``steps`` Gaussian messages."""
    if not algorithm.private:
        return NoPrivacy(f"{type(algorithm).__name__}(private=False) is the non-private twin", neighboring,
                         PrivacyUnit.RECORD_IN_SILO.value)
    return gaussian(silo_transcript_schedule(
        noise_std=noise_std, contribution_bound=contribution_bound, sampling=sampling,
        silo_size=smallest_silo(silo_sizes), batch_size=batch_size, steps=steps, neighboring=neighboring))


MbSgdState = parts.RoundState


@dataclasses.dataclass(frozen=True)
class NoisyMbSgd(RoundFamily):
    """ISRL-DP Noisy MB-SGD and (``private=False``) its non-private twin.

    Args:
      problem: a dpjax problem (``loss``, ``init_params``, ``evaluate``).
      num_rounds: R.
      batch_size: K, records per silo per round.
      sampling: ``"without-replacement"`` (default; tight accounting),
        ``"with-replacement"`` (Algorithm 2 as printed), ``"poisson"`` or
        ``"one-pass"``.
      availability: ``FullAvailability()``, ``FixedAvailability(M)`` or
        ``RandomAvailability(pmf)``.
      private: clip and add noise (True) or the non-private twin (False).
      aggregation: ``"mean"`` (paper) or ``"sum"`` (authors' scripts).
      output: ``"last"``, ``"average"`` (paper), ``"window"`` (authors' 8-iterate window).
      projection_radius: radius D/2 of the ball W centred at 0; None for R^d.
      neighboring: ``"replace-one"`` (ISRL-DP's relation) or ``"add-remove"``.
      gradient_path: how silo gradients are computed (same law, different
        draws): ``"gather"`` gathers the K sampled rows and uses per-example
        autodiff; ``"dense"`` draws the batch as a multiplicity vector and uses
        the problem's closed-form clipped sum over the silo (GLMs; no gather);
        ``"auto"`` (default) picks dense when the problem supports it,
        ``K >= n_max / 8`` and the sampler draws a real mask (not with
        replacement or one-pass, whose weights are a scatter of K indices);
        see ``federated.prefer_dense_gradients``.
    """

    problem: Any
    num_rounds: int
    batch_size: int
    sampling: str = "without-replacement"
    availability: Any = sampling_lib.FullAvailability()
    private: bool = True
    aggregation: str = "mean"
    output: str = "last"
    window: int = 8
    projection_radius: float | None = None
    neighboring: str = "replace-one"
    gradient_path: str = "auto"

    hparams_type = MbSgdHParams

    def __post_init__(self):
        _validate.check_choice("sampling", self.sampling, ("with-replacement", "without-replacement", "poisson", "one-pass"))
        self.check_common()
        _validate.check_choice("gradient_path", self.gradient_path, ("auto", "gather", "dense"))
        if self.gradient_path == "dense" and not federated.supports_dense_gradients(self.problem, self.sampler):
            raise ValueError(f"gradient_path='dense' needs a problem with weighted_grad_sum; {type(self.problem).__name__} has none")

    # -- static pieces -----------------------------------------------------
    @property
    def sampler(self):
        return sampling_lib.make_sampler(self.sampling, self.batch_size)

    def validate(self, data: SiloData) -> None:
        """Host-side checks of the configuration against the data."""
        self.availability.validate(data.num_silos)
        self.sampler.validate(data.min_size, self.num_rounds)

    # -- the round: minibatch gradient -> per-silo Gaussian -> mean/sum -> SGD ----
    def round(self, data: SiloData) -> parts.FederatedRound:
        client = parts.MinibatchGradient(self.problem, self.sampler, self.neighboring, dense=self._dense(data))
        return parts.FederatedRound(self.availability, client, parts.SiloGaussian(data.num_silos),
                                    parts.Aggregate(self.aggregation),
                                    parts.ServerOptimizer(projection_radius=self.projection_radius), self.averager)

    def _dense(self, data: SiloData) -> bool:
        if self.gradient_path != "auto":
            return self.gradient_path == "dense"
        return federated.prefer_dense_gradients(self.problem, self.sampler, self.batch_size, data.n_max)

    # -- privacy -----------------------------------------------------------
    def privacy(self, silo_sizes, hparams: MbSgdHParams) -> PrivacySpec:
        """Each silo's transcript: R Gaussian releases of a minibatch mean with
        contribution ``clip_norm / K`` (accounted at the smallest silo). Every round
        is counted even when a silo is unavailable (the adversary sees who
        participates, so availability gives no amplification)."""
        return isrl_privacy(self, silo_sizes, hparams.noise_std, float(hparams.clip_norm) / self.batch_size,
                            sampling=self.sampling, batch_size=self.batch_size, steps=self.num_rounds,
                            neighboring=self.neighboring)


from dpjax.sweep.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("isrl-mbsgd", NoisyMbSgd, twin="mbsgd")
