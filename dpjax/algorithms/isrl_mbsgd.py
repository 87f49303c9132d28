"""ISRL-DP Noisy minibatch SGD (Lowy & Razaviyayn, ICLR 2023, Algorithm 2).

Each round r:

1. the network makes a uniformly random subset S_r of M_r silos available;
2. every available silo i samples K of its n_i records, computes per-example gradients at w_r, clips each to
   ``clip_norm`` (L) and releases ``g_i = (1/K) sum_j clip(grad f(w_r, x_ij)) + u_i``, ``u_i ~ N(0, sigma^2 I)`` with
   ``sigma = noise_multiplier x 2L/K`` (the sensitivity of the clipped mean);
3. the server averages the messages, ``g = (1/M_r) sum_{i in S_r} g_i``, and steps ``w_{r+1} = Proj_W(w_r - eta g)``.

The round is its parts (``dpjax.engine.chain``): ``SiloBatches`` (availability x record sampler) ->
``MinibatchGradient`` -> ``ClipPerUnit`` (the sensitivity ``2L/K`` comes from here) -> ``GaussianNoise`` on each silo ->
``Aggregate`` -> ``OptaxServer`` (SGD + projection) -> ``Averager``.

Privacy (inter-silo record-level DP, replace-one within a silo): silo i's transcript is R releases of a minibatch mean
plus Gaussian noise of multiplier ``noise_multiplier``; ``privacy()`` composes the parts' events
(``dpjax.accounting.events``). Which accountant certifies it depends on the sampling scheme (the paper's
with-replacement sampling is accounted conservatively; without-replacement or Poisson sampling get tight RDP/PLD
accounting).

``private=False`` gives the non-private twin (MB-SGD / "FedSGD"): the same compiled round with noise multiplier 0 and
clip norm inf, so with ``noise_multiplier = 0`` and a clip that never binds the private algorithm is bit-identical to
it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from dpjax import _validate
from dpjax.algorithms.hparams import HParams, hparam
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.engine.contract import OutputRule
from dpjax.engine.silos import SiloData
from dpjax.parts import Aggregate, Averager, ClipPerUnit, GaussianNoise, MinibatchGradient, OptaxServer, SiloBatches
from dpjax.parts.clients import prefer_dense_gradients, supports_dense_gradients
from dpjax.primitives import sampling as sampling_lib

PyTree = Any


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class MbSgdHParams(HParams):
    """Per-run hyperparameters (a sweep vmaps over these).

    Attributes:
      learning_rate: constant step size eta.
      noise_multiplier: z, each silo's noise std divided by the sensitivity of its message (``sigma = z x 2L/K`` under
        replace-one; the std itself is derived from the clipper's bound at run time).
      clip_norm: per-example clip threshold L."""

    # ``create(learning_rate, noise_multiplier=0.0, clip_norm=1.0)`` checks concrete values of any kind
    # (Python, NumPy, jax scalars and arrays); tracers only in dpjax.primitives.checked mode (HParams).
    learning_rate: Any = hparam()
    noise_multiplier: Any = hparam(0.0, _validate.check_nonnegative)
    clip_norm: Any = hparam(1.0, allow_inf=True)


@dataclasses.dataclass(frozen=True, kw_only=True)
class IsrlRoundOptions(OutputRule):
    """The options the ISRL-DP federated families share, declared once (Noisy MB-SGD, its unbalanced
    variant and Local SGD; keyword-only, so they follow each family's own positional fields).

    Args:
      availability: which silos report each round: ``FullAvailability()`` (default),
        ``FixedAvailability(M)`` or ``RandomAvailability(pmf)``.
      private: clip and add noise (True) or the non-private twin (False).
      aggregation: ``"mean"`` (paper) or ``"sum"`` (authors' scripts) of the silos' messages.
      output: the released iterate (``OutputRule``; ``"average"`` is the paper's; the authors' scripts
        average an 8-iterate window).
      window: the averaging window of ``output="average"`` (``OutputRule``).
      projection_radius: radius D/2 of the ball W centred at 0; None for R^d."""

    availability: Any = sampling_lib.FullAvailability()
    private: bool = True
    aggregation: str = "mean"
    projection_radius: float | None = None


@dataclasses.dataclass(frozen=True)
class NoisyMbSgd(IsrlRoundOptions, ChainFamily):
    """ISRL-DP Noisy MB-SGD and (``private=False``) its non-private twin.

    Args:
      problem: a dpjax problem (``loss``, ``init_params``, ``evaluate``).
      num_rounds: R.
      batch_size: K, records per silo per round.
      sampling: ``"without-replacement"`` (default; tight accounting), ``"with-replacement"`` (Algorithm 2 as printed),
        ``"poisson"`` or ``"one-pass"``.
      availability: which silos take part (``IsrlRoundOptions``, as are ``private``, ``aggregation``,
        ``output``, ``window`` and ``projection_radius``).
      neighboring: ``"replace-one"`` (ISRL-DP's relation) or ``"add-remove"``.
      sampling_rate: ``"poisson"`` only: the public rate q each record of every silo is drawn with
        (the accountant reads the same q). Required under add/remove; None under replace-one
        draws at ``K / n_i`` of each silo's (public) size.
      gradient_path: how silo gradients are computed (same law, different draws): ``"gather"`` gathers the K sampled
        rows and uses per-example autodiff; ``"dense"`` draws the batch as a multiplicity vector and uses the problem's
        closed-form clipped sum over the silo (GLMs; no gather); ``"auto"`` (default) picks dense when the problem
        supports it, ``K >= n_max / 8`` and the sampler draws a real mask (not with replacement or one-pass, whose
        weights are a scatter of K indices); see ``dpjax.parts.clients.prefer_dense_gradients``."""

    problem: Any
    num_rounds: int
    batch_size: int
    sampling: str = "without-replacement"
    neighboring: str = "replace-one"
    gradient_path: str = "auto"
    sampling_rate: float | None = None

    hparams_type = MbSgdHParams

    def __post_init__(self):
        _validate.check_choice("sampling", self.sampling, ("with-replacement", "without-replacement", "poisson", "one-pass"))
        self.check_common()
        _validate.check_choice("gradient_path", self.gradient_path, ("auto", "gather", "dense"))
        if self.gradient_path == "dense" and not supports_dense_gradients(self.problem, self.sampler):
            raise ValueError(f"gradient_path='dense' needs a problem with weighted_grad_sum; {type(self.problem).__name__} has none")

    # -- static pieces -----------------------------------------------------
    @property
    def sampler(self):
        return sampling_lib.make_sampler(self.sampling, self.batch_size, self.sampling_rate)

    def validate(self, data: SiloData) -> None:
        """Host-side checks of the configuration against the data."""
        self.availability.validate(data.num_silos)
        self.sampler.validate(data.min_size, self.num_rounds)

    # -- the round: minibatch gradient -> per-silo Gaussian -> mean/sum -> SGD ----
    def parts(self, shape: DataShape) -> Parts:
        dense = self._dense(shape)
        return Parts(
            SiloBatches(self.availability, self.sampling, self.batch_size, dense=dense,
                        sampling_rate=self.sampling_rate),
            (MinibatchGradient(self.problem, self.batch_size), ClipPerUnit("clip_norm", self.neighboring),
             GaussianNoise("noise_multiplier", placement="silo"), Aggregate(self.aggregation),
             OptaxServer(projection_radius=self.projection_radius), Averager(self.output, self.window)))

    def _dense(self, shape: DataShape) -> bool:
        if self.gradient_path != "auto":
            return self.gradient_path == "dense"
        return prefer_dense_gradients(self.problem, self.sampler, self.batch_size, shape.n_max)


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("isrl-mbsgd", NoisyMbSgd,
                "ISRL-DP Noisy MB-SGD (Lowy & Razaviyayn, Algorithm 1): per-silo clipped, noised minibatch gradients",
                twin={"mbsgd": "non-private MB-SGD, the twin of isrl-mbsgd"})
