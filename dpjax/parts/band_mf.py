"""The BandMF privatizer: banded-Toeplitz ``C^{-1}``-correlated Gaussian noise released on the fly.

Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu, "(Amplified) Banded Matrix Factorization: A unified
approach to private training", NeurIPS 2023, Alg. 1: round t adds ``std z_t`` with ``z = C^{-1} w``, ``w`` i.i.d.
standard normal, for the banded lower-triangular Toeplitz ``C`` of ``coeffs`` (``dpjax.primitives.banded_mf``).
Since ``C z = w``, ``z_t = (w_t - sum_{j=1}^{b-1} c_j z_{t-j}) / c_0``: the state is a buffer of the last ``b - 1``
released draws per parameter (``[b - 1, *shape]``), O(bands x model size) whatever the number of rounds; the buffer
starts at zero, which is the recursion's boundary condition for ``t < b``.

``std = z x sensitivity`` of the message (the column-norm sensitivity: ``coeffs`` are normalised to ``||c|| = 1``, the
largest column norm of ``C``). Accounting (``dpjax.accounting.band_mf``): the whole run is one Gaussian mechanism of
multiplier ``z / sens(C)`` with ``sens(C)`` the strategy's sensitivity under the run's participation, or, under cyclic
Poisson sampling with ``min_sep >= bands``, a Poisson-subsampled Gaussian of multiplier ``z`` composed ``ceil(n / b)``
times.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import keys
from dpjax.accounting.band_mf import BandMfEvent
from dpjax.accounting.events import NoiseEvent
from dpjax.engine.roles import Context, Sensitive
from dpjax.parts.privatizers import gaussian_std, host_multiplier
from dpjax.primitives import noise


@dataclasses.dataclass(frozen=True)
class BandMfNoise:
    """Server-side BandMF noise of the Toeplitz strategy ``coeffs`` (a tuple, static; normalised to unit norm).

    Args:
      coeffs: ``(c_0, ..., c_{b-1})``, ``c_0 > 0`` (e.g. ``optimize_banded_toeplitz(rounds, bands)``).
      noise_field: the hparams field holding the multiplier ``z``.
      stream: the round key's stream the fresh normals ``w_t`` come from."""

    coeffs: tuple[float, ...]
    noise_field: str = "noise_multiplier"
    stream: str = "noise"

    roles = ("privatizer",)

    def __post_init__(self):
        c = np.asarray(self.coeffs, np.float64)
        if c.ndim != 1 or c.size < 1 or not np.all(np.isfinite(c)) or c[0] <= 0:
            raise ValueError(f"coeffs={self.coeffs!r} must be a non-empty finite sequence with coeffs[0] > 0")
        object.__setattr__(self, "coeffs", tuple(float(x) for x in c / np.linalg.norm(c)))

    @property
    def bands(self) -> int:
        return len(self.coeffs)

    def init(self, params, ctx: Context):
        return jax.tree_util.tree_map(
            lambda p: jnp.zeros((self.bands - 1,) + jnp.shape(p), jnp.result_type(p)), params)

    def correlate(self, fresh, state):
        """``(z_t, new state)`` from the fresh standard normals ``w_t`` and the buffer ``(z_{t-1}, ..., z_{t-b+1})``."""
        c = self.coeffs

        def one(w, buf):
            past = jnp.tensordot(jnp.asarray(c[1:], buf.dtype), buf, axes=1) if self.bands > 1 else 0.0
            z = (w - past) / jnp.asarray(c[0], w.dtype)
            return z, jnp.concatenate([z[None], buf[:-1]]) if self.bands > 1 else buf

        out = jax.tree_util.tree_map(one, fresh, state)
        treedef = jax.tree_util.tree_structure(fresh)
        leaves = treedef.flatten_up_to(out)
        return (treedef.unflatten([z for z, _ in leaves]), treedef.unflatten([b for _, b in leaves]))

    def update(self, message: Sensitive, state, ctx: Context) -> tuple[Sensitive, Any]:
        std = gaussian_std(getattr(ctx.hparams, self.noise_field), message.sensitivity)
        fresh = noise.gaussian_like(keys.stream_key(ctx.key, self.stream), message.value, 1.0)
        z, state = self.correlate(fresh, state)
        value = jax.tree_util.tree_map(lambda v, n: v + std.astype(n.dtype) * n, message.value, z)
        return message.replace(value=value), state

    def events(self, hparams, num_rounds: int) -> tuple[BandMfEvent]:
        """The run's releases for the accountant: one ``BandMfEvent`` (its ``spec(plan)`` reads the selection's
        separation; ``dpjax.accounting.band_mf``)."""
        z = host_multiplier(getattr(hparams, self.noise_field))
        return (BandMfEvent(NoiseEvent(self.noise_field, z, "server"), self.bands),)
