"""DP-FedAvg with adaptive clipping (Andrew, Thakkar, McMahan & Ramaswamy, "Differentially Private
Learning with Adaptive Clipping", NeurIPS 2021, Algorithm 1): user-level DP, the silo being the user.

Each round t:

1. the round's silos are sampled -- each of the N silos with the declared public probability q
   (``"poisson"``, add/remove: ``sampling_rate``, m/N for a public N; the number of users is not
   public under add/remove, so q is declared, never read from the data) or a uniform m-subset
   (``"without-replacement"``, replace-one);
2. every sampled silo runs ``local_steps`` non-private SGD steps from the server model
   (``client_learning_rate``; a uniform ``local_batch_size``-subset of its records per step, or all
   of them) and sends its model delta as the pseudo-gradient ``Delta_i = theta_t - theta_i``;
3. the adaptive clipper (its state: the clip norm C_t) clips every delta to C_t and releases the
   centred count ``sum_i (b_i - 1/2)``, ``b_i = 1[||Delta_i|| <= C_t]`` (one silo moves it by 1/2),
   plus ``N(0, (z_b x 1/2)^2)`` (``noise_multiplier_count`` z_b; the paper's sigma_b = z_b / 2 under
   add/remove); then ``C_{t+1} = C_t exp(-eta_C (b~ - gamma))`` with ``b~ = clip(noisy count / m + 1/2,
   0, 1)`` (geometric update; ``clip_learning_rate`` eta_C, ``target_quantile`` gamma);
4. the server adds ``N(0, (z_Delta C_t / m)^2)`` to the clipped deltas' sum over the public m
   (``noise_multiplier`` z_Delta; the sensitivity C_t / m comes from the clipper's bound) and applies it
   with optax SGD (``learning_rate`` eta_s, ``server_momentum`` beta).

Privacy (Andrew et al. 2021, Theorem 1): the round's two Gaussian releases on the same sampled silos
are one Gaussian mechanism on the concatenated query, of multiplier
``z = (z_Delta^-2 + z_b^-2)^-1/2`` (the paper's ``z_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2``); the run is R
of them subsampled at the silo rate, unit "user" (``JointGaussianEvent``, read by the DP plan of the
parts). Calibration sets z_Delta with z_b fixed (Algorithm 1 derives z_Delta from z and sigma_b): a target
needing z >= z_b is out of reach. ``clip_learning_rate = 0`` is fixed clipping (the count is unused and
not accounted). ``private=False`` is FedAvg with a server optimizer (FedOpt): no clip, no noise.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dpjax import _validate, keys
from dpjax.algorithms.hparams import HParams, hparam
from dpjax.accounting.plan import ClipEvent, NoiseEvent
from dpjax.accounting.privacy_spec import GaussianPrivacy, NoPrivacy
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.engine.roles import Batch, Context, PerUnitVectors, Sensitive
from dpjax.parts import Averager, GaussianNoise, OptaxServer, gaussian_std
from dpjax.parts.cross_device import SILO_SAMPLINGS, LocalDeltas, PublicMean, SampledSilos
from dpjax.parts.privatizers import host_multiplier
from dpjax.primitives import clipping


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class FedAvgHParams(HParams):
    """Per-run values: server / client step sizes, the delta's and the count's noise multipliers, the
    initial clip C_0, the target quantile gamma and the clip's learning rate eta_C."""

    learning_rate: Any = hparam(1.0)
    client_learning_rate: Any = hparam(0.1)
    noise_multiplier: Any = hparam(0.0, _validate.check_nonnegative)
    noise_multiplier_count: Any = hparam(0.0, _validate.check_nonnegative)
    clip_norm: Any = hparam(1.0, allow_inf=True)
    target_quantile: Any = hparam(0.5, _validate.check_probability)
    clip_learning_rate: Any = hparam(0.2, _validate.check_nonnegative)


@dataclasses.dataclass(frozen=True)
class AdaptiveQuantileClip:
    """Clips each silo's delta to the state's C_t and moves C_t towards the gamma-quantile of the delta
    norms through the noisy centred count (steps 3 of the module docstring; the round's
    ``"server_noise"`` stream). Its count release is accounted with the delta's (``AdaptiveClipNoise``)."""

    expected_silos: int
    relation: str = "add-remove"
    count_field: str = "noise_multiplier_count"

    def init(self, params, hparams):
        return jnp.asarray(hparams.clip_norm, jnp.float32)

    def update(self, units: PerUnitVectors, state, ctx: Context) -> tuple[Sensitive, jax.Array]:
        hp, clip_norm, w = ctx.hparams, state, units.weights
        norms = jax.vmap(clipping.global_norm)(units.vectors)
        clipped = jax.tree_util.tree_map(lambda t: t * w.reshape((-1,) + (1,) * (t.ndim - 1)).astype(t.dtype),
                                         clipping.clip_per_example(units.vectors, clip_norm))
        count = Sensitive(jnp.sum(w * ((norms <= clip_norm) - 0.5)), jnp.float32(0.5), self.relation)
        std = gaussian_std(getattr(hp, self.count_field), count.sensitivity)
        noisy = count.value + std * jax.random.normal(keys.stream_key(ctx.key, "server_noise"))
        fraction = jnp.clip(noisy / self.expected_silos + 0.5, 0.0, 1.0)
        new_clip = clip_norm * jnp.exp(-hp.clip_learning_rate * (fraction - hp.target_quantile))
        return Sensitive(clipped, clip_norm, self.relation), new_clip

    def event(self, hparams) -> ClipEvent:
        return ClipEvent(self.relation)

    def count_event(self, hparams) -> NoiseEvent | None:
        """The count's Gaussian release, or None when the clip never moves (``clip_learning_rate = 0``)."""
        if float(hparams.clip_learning_rate) == 0.0:
            return None
        return NoiseEvent(self.count_field, host_multiplier(getattr(hparams, self.count_field)), "server")


@dataclasses.dataclass(frozen=True)
class JointGaussianPrivacy(GaussianPrivacy):
    """The Gaussian rules' guarantee at the combined multiplier z; ``calibrate`` returns the delta's
    ``z_Delta = (z^-2 - z_b^-2)^-1/2`` for the calibrated z, the count's z_b fixed (Algorithm 1)."""

    count_multiplier: float = math.inf
    count_field: str = "noise_multiplier_count"

    def calibrate(self, target_epsilon: float, delta: float, accountant: str = "rdp") -> dict:
        ((field, z),) = super().calibrate(target_epsilon, delta, accountant).items()
        z_b = self.count_multiplier
        if z >= z_b:
            raise ValueError(f"target_epsilon={target_epsilon!r} needs a combined noise multiplier {z:.4g}, not below "
                             f"{self.count_field}={z_b:.4g}: the count alone spends more; raise {self.count_field}")
        z_delta = (z ** -2.0 - z_b ** -2.0) ** -0.5
        while (z_delta ** -2.0 + z_b ** -2.0) ** -0.5 < z:  # never below the calibrated combination
            z_delta = math.nextafter(z_delta, math.inf)
        return {field: z_delta}


@dataclasses.dataclass(frozen=True)
class JointGaussianEvent:
    """The delta sum's and the count's releases of one round, on the same sampled silos: one Gaussian of
    multiplier ``(z_Delta^-2 + z_b^-2)^-1/2`` (Andrew et al. 2021, Theorem 1), then the plan's rules."""

    delta: NoiseEvent
    count: NoiseEvent | None

    def spec(self, plan):
        if self.count is None:  # fixed clipping: the delta's Gaussian alone
            return dataclasses.replace(plan, noises=(self.delta,)).gaussian_spec()
        z_delta, z_b = self.delta.noise_multiplier, self.count.noise_multiplier
        if z_b == 0:
            return NoPrivacy(f"{plan.label} releases the clipped count without noise ({self.count.field}=0)",
                             plan.clip.relation.value, plan.selection.unit.value)
        z = 0.0 if z_delta == 0 else (z_delta ** -2.0 + z_b ** -2.0) ** -0.5
        spec = dataclasses.replace(plan, noises=(dataclasses.replace(self.delta, noise_multiplier=z),)).gaussian_spec()
        if not isinstance(spec, GaussianPrivacy):
            return spec
        return JointGaussianPrivacy(spec.schedules, spec.noise_fields, spec.multipliers, z_b, self.count.field)


@dataclasses.dataclass(frozen=True)
class AdaptiveClipNoise:
    """``GaussianNoise`` on the server's aggregate, accounted jointly with ``clipper``'s count."""

    clipper: AdaptiveQuantileClip
    noise_field: str = "noise_multiplier"

    def init(self, params):
        return ()

    def update(self, message: Sensitive, batch: Batch, state, ctx: Context):
        return GaussianNoise(self.noise_field, placement="server").update(message, batch, state, ctx)

    def events(self, hparams, num_rounds: int) -> tuple:
        (delta,) = GaussianNoise(self.noise_field, placement="server").events(hparams, num_rounds)
        return (JointGaussianEvent(delta, self.clipper.count_event(hparams)),)


@dataclasses.dataclass(frozen=True)
class DpFedAvg(ChainFamily):
    """DP-FedAvg with adaptive clipping and (``private=False``) FedOpt, its non-private twin.

    Args:
      problem: a dpjax problem; num_rounds: R.
      silos_per_round: m, the (expected, for Poisson) number of sampled silos.
      sampling: ``"poisson"`` (add/remove) or ``"without-replacement"`` (replace-one).
      local_steps: each silo's local SGD steps.
      local_batch_size: records per local step (None: all the silo's records per step).
      server_momentum: beta of the server's optax SGD (None: plain SGD).
      neighboring: of one silo's data; None: ``"add-remove"`` for Poisson, ``"replace-one"`` for a fixed m.
      sampling_rate: q, each silo's public inclusion probability (``"poisson"``; required under
        add/remove); the accountant reads the same q, ``silos_per_round`` m stays the public divisor.
    """

    problem: Any
    num_rounds: int
    silos_per_round: int
    sampling: str = "poisson"
    local_steps: int = 1
    local_batch_size: int | None = None
    server_momentum: float | None = None
    neighboring: str | None = None
    private: bool = True
    sampling_rate: float | None = None

    hparams_type = FedAvgHParams
    noise_fields = ("noise_multiplier", "noise_multiplier_count")

    def __post_init__(self):
        _validate.check_choice("sampling", self.sampling, SILO_SAMPLINGS)
        if self.neighboring is None:
            object.__setattr__(self, "neighboring", "add-remove" if self.sampling == "poisson" else "replace-one")
        _validate.check_int("silos_per_round", self.silos_per_round, min_value=1)
        if self.local_batch_size is not None:
            _validate.check_int("local_batch_size", self.local_batch_size, min_value=1)
        if self.server_momentum is not None:
            _validate.check_probability("server_momentum", self.server_momentum)
        self.check_common()

    def validate(self, data) -> None:
        _validate.check_le("silos_per_round", self.silos_per_round, "num_silos", data.num_silos)
        if self.local_batch_size is not None:
            _validate.check_le("local_batch_size", self.local_batch_size, "the smallest silo size", data.min_size)

    def parts(self, shape: DataShape) -> Parts:
        clipper = AdaptiveQuantileClip(self.silos_per_round, self.neighboring)
        momentum = () if self.server_momentum is None else (("momentum", self.server_momentum),)
        return Parts(selection=SampledSilos(self.silos_per_round, self.sampling, self.sampling_rate),
                     client=LocalDeltas(self.problem, self.local_steps, self.local_batch_size),
                     clipper=clipper, privatizer=AdaptiveClipNoise(clipper),
                     aggregator=PublicMean(self.silos_per_round),
                     server=OptaxServer(optax.sgd, options=momentum), averager=Averager("last"), placement="server")


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

# The epsilon axis calibrates z_Delta; the count's z_b stays the grid's value (Algorithm 1's parametrisation).
register_family("dp-fedavg", DpFedAvg,  # "fedopt" is renamed (registry.RETIRED)
                "DP-FedAvg with adaptive quantile clipping (Andrew et al.), user-level DP",
                twin={"fedavg-server-opt": "non-private FedAvg with dp-fedavg's server optimizer (FedOpt), the twin "
                                           "of dp-fedavg"},
                noise_fields=("noise_multiplier",))
