"""Adaptive quantile clipping (Andrew, Thakkar, McMahan & Ramaswamy, "Differentially Private Learning with Adaptive
Clipping", NeurIPS 2021, Algorithm 1) as ONE mechanism: it owns the clip bound C_t, the indicator count that moves it,
and both Gaussian noises (pfl-research's ``adaptive_clipping.py`` is the same shape).

One round, on the silos' deltas (``PerUnitVectors``, one unit per silo, weighted by whether it reports):

1. clip every delta to C_t; the bound of one silo's contribution is C_t (under ``neighboring``);
2. the centred count ``sum_i (b_i - 1/2)``, ``b_i = 1[||Delta_i|| <= C_t]`` (one silo moves it by 1/2),
   plus ``N(0, (z_b x 1/2)^2)`` (``count_field`` z_b; the paper's sigma_b = z_b / 2 under add/remove,
   the round key's ``"server_noise"`` stream); then ``C_{t+1} = C_t exp(-eta_C (b~ - gamma))`` with
   ``b~ = clip(noisy count / m + 1/2, 0, 1)`` (geometric update; ``clip_learning_rate`` eta_C,
   ``target_quantile`` gamma);
3. the clipped deltas' sum over the PUBLIC expected count m (``PublicMean``), plus ``N(0, (z_Delta C_t / m)^2)``
   (``noise_field`` z_Delta, the ``"noise"`` stream; the sensitivity C_t / m is the clipped mean's).

Privacy (Andrew et al. 2021, Theorem 1): the round's two Gaussian releases on the same sampled silos are one Gaussian
mechanism on the concatenated query, of multiplier ``z = (z_Delta^-2 + z_b^-2)^-1/2`` (``JointGaussianEvent``, read by
the DP plan). Calibration sets z_Delta with z_b fixed (``JointGaussianPrivacy.calibrate``): a target needing z >= z_b is
out of reach. ``clip_learning_rate = 0`` is fixed clipping (the count is unused and not accounted).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from dpjax import keys
from dpjax.accounting.events import ClipEvent, NoiseEvent
from dpjax.accounting.privacy_spec import GaussianPrivacy, NoPrivacy
from dpjax.engine import input_dense
from dpjax.engine.roles import Context, FactoredDeltas, PerUnitVectors, Sensitive
from dpjax.parts.cross_device import PublicMean
from dpjax.parts.privatizers import GaussianNoise, gaussian_std, host_multiplier
from dpjax.primitives import clipping


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
                             plan.clip.neighboring.value, plan.selection.unit.value)
        z = 0.0 if z_delta == 0 else (z_delta ** -2.0 + z_b ** -2.0) ** -0.5
        spec = dataclasses.replace(plan, noises=(dataclasses.replace(self.delta, noise_multiplier=z),)).gaussian_spec()
        if not isinstance(spec, GaussianPrivacy):
            return spec
        return JointGaussianPrivacy(spec.schedules, spec.noise_fields, spec.multipliers, spec.events,
                                    count_multiplier=z_b, count_field=self.count.field)


@dataclasses.dataclass(frozen=True)
class AdaptiveClipMean:
    """The mechanism of the module docstring: clipper, aggregator (the mean over the public
    ``expected_silos`` m) and privatizer of the deltas and of the count, in one part; its state is C_t.

    Args:
      expected_silos: m, the public divisor of the clipped sum and of the count.
      neighboring: the neighbouring relation of one silo's data.
      noise_field: the hparams field of z_Delta (the deltas' noise multiplier).
      count_field: the hparams field of z_b (the count's noise multiplier)."""

    expected_silos: int
    neighboring: str = "add-remove"
    noise_field: str = "noise_multiplier"
    count_field: str = "noise_multiplier_count"

    roles = ("clipper", "aggregator", "privatizer")

    def init(self, params, ctx: Context):
        return jnp.asarray(ctx.hparams.clip_norm, jnp.float32)

    def update(self, units: PerUnitVectors, clip_norm, ctx: Context) -> tuple[Sensitive, jax.Array]:
        hp, w = ctx.hparams, units.weights
        if isinstance(units, FactoredDeltas):
            norms, mean = self._factored_mean(units, clip_norm, ctx)
        else:
            norms = jax.vmap(clipping.global_norm)(units.vectors)
            clipped = jax.tree_util.tree_map(lambda t: t * w.reshape((-1,) + (1,) * (t.ndim - 1)).astype(t.dtype),
                                             clipping.clip_per_example(units.vectors, clip_norm))
            mean, _ = PublicMean(self.expected_silos).update(Sensitive(clipped, clip_norm, self.neighboring), (), ctx)
        count = Sensitive(jnp.sum(w * ((norms <= clip_norm) - 0.5)), jnp.float32(0.5), self.neighboring)
        std = gaussian_std(getattr(hp, self.count_field), count.sensitivity)
        noisy = count.value + std * jax.random.normal(keys.stream_key(ctx.key, "server_noise"))
        fraction = jnp.clip(noisy / self.expected_silos + 0.5, 0.0, 1.0)
        new_clip = clip_norm * jnp.exp(-hp.clip_learning_rate * (fraction - hp.target_quantile))
        released, _ = GaussianNoise(self.noise_field, placement="server").update(mean, (), ctx)
        # the state keeps init's dtype: under x64 the count's float64 noise would promote it (a scan carry mismatch)
        return released, new_clip.astype(clip_norm.dtype)

    def _factored_mean(self, units: FactoredDeltas, clip_norm, ctx: Context):
        """The norms and the clipped mean of ``units`` with its kernel leaf in factored form: the same values as the
        materialised path to float rounding. Norms: the other leaves' squares plus ``<X X^T, h h^T>``; the kernel's
        clipped sum ``X_all^T (s * h_all)``, one matmul, with ``s_i`` = clip factor x weight x availability (what
        ``clip_per_example``, the weights and ``Aggregate``'s ``available`` multiply each delta by). The other leaves,
        the bound C, the public divisor and the noise go through ``PublicMean`` and ``GaussianNoise`` as before (the
        kernel's leaf there is a placeholder, replaced by its factored mean): same sensitivity, tree, keys, draws."""
        k, w = units.kernel_index, units.weights
        leaves, treedef = jax.tree_util.tree_flatten(units.vectors)
        rest_sq = sum(jnp.sum(jnp.square(t).reshape(t.shape[0], -1), axis=1) for i, t in enumerate(leaves) if i != k)
        kernel_sq = (input_dense.factored_sq_norms(units.gram, units.h) if units.kernel_sq_norms is None
                     else units.kernel_sq_norms)  # formed by the client, chunk by chunk
        norms = jnp.sqrt(rest_sq + kernel_sq)
        scale, keep = clipping.clip_coefficients(norms, clip_norm)
        kept = lambda t: jnp.where(keep.reshape((-1,) + (1,) * (t.ndim - 1)),  # noqa: E731
                                   t * (scale * w).reshape((-1,) + (1,) * (t.ndim - 1)).astype(t.dtype), 0)
        placeholder = jnp.zeros((leaves[k].shape[0], 1), leaves[k].dtype)
        clipped = [placeholder if i == k else kept(t) for i, t in enumerate(leaves)]
        mean, _ = PublicMean(self.expected_silos).update(
            Sensitive(jax.tree_util.tree_unflatten(treedef, clipped), clip_norm, self.neighboring), (), ctx)
        coefficients = jnp.where(keep, scale * w * ctx.batch.available.astype(scale.dtype), 0.0)
        kernel_sum = input_dense.factored_weighted_sum(units.records, units.h, coefficients,
                                                       live=ctx.batch.available, chunk=units.live_chunk)
        mean_leaves = jax.tree_util.tree_leaves(mean.value)
        mean_leaves[k] = kernel_sum / jnp.asarray(self.expected_silos).astype(kernel_sum.dtype)  # Sensitive.divided's
        return norms, mean.replace(value=jax.tree_util.tree_unflatten(treedef, mean_leaves))

    def event(self, hparams) -> ClipEvent:
        return ClipEvent(self.neighboring)

    def count_event(self, hparams) -> NoiseEvent | None:
        """The count's Gaussian release, or None when the clip never moves (``clip_learning_rate = 0``)."""
        if float(hparams.clip_learning_rate) == 0.0:
            return None
        return NoiseEvent(self.count_field, host_multiplier(getattr(hparams, self.count_field)), "server")

    def events(self, hparams, num_rounds: int) -> tuple:
        (delta,) = GaussianNoise(self.noise_field, placement="server").events(hparams, num_rounds)
        return (JointGaussianEvent(delta, self.count_event(hparams)),)
