"""The non-private twin of every family: the same compiled round with noise 0 and clip norms inf.

``non_private(hparams)`` is the one twin mechanism (``FamilyBase.run_hparams`` with
``private=False``): clipping by ``min(1, inf / ||g||) = 1`` and adding ``0 * z`` are exact, so a
private run with zero noise and a non-binding clip is bit-identical to its twin.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp


def non_private(hparams, noise_fields=("noise_multiplier",), clip_fields=("clip_norm",)):
    """``hparams`` with every noise field 0 and every clip norm inf (same shapes).

    Every non-private twin runs the *same* compiled round step as its private algorithm with these values instead of a
    separate code path: two differently fused XLA programs can differ in the last bit, one program on equal values
    cannot."""
    zero = {f: jnp.zeros_like(jnp.asarray(getattr(hparams, f), jnp.float32)) for f in noise_fields}
    inf = {f: jnp.full_like(jnp.asarray(getattr(hparams, f), jnp.float32), jnp.inf) for f in clip_fields}
    return dataclasses.replace(hparams, **zero, **inf)
