"""Functional DP primitives: clipping, noise, sampling, projection.

All functions are pure and take explicit PRNG keys; they can be used on their
own inside user JAX code (``jit``/``vmap``/``scan`` friendly).

Argument contract: every entry point checks the values it can see on the host (Python, NumPy and jax scalars and arrays:
a negative or NaN clip norm, radius or noise std, a rate outside [0, 1], a batch larger than the records) and raises a
``ValueError`` naming the argument. Inside ``jit``/``vmap`` the
values are tracers and cannot be read: they are the caller's contract, unless the function runs in checked mode,
``checked(fn)(*args)``, which adds ``jax.experimental.checkify`` checks and raises the same ``ValueError``.
"""

from dpjax._validate import checked

from dpjax.primitives.clipping import (ClippedSum, clip_per_example, clip_to_norm, clipped_sum, global_norm,
                                       per_example_clipped_sum, per_example_grads, sensitivity_of_clipped_sum)
from dpjax.primitives.ghost_clipping import (GhostClippedSum, GhostFallbackError, NNXLoss, clipped_difference_sum,
                                             ghost_clipped_sum, nnx_loss, per_example_grad_norms)
from dpjax.primitives.noise import add_gaussian_noise, gaussian_like
from dpjax.primitives.projection import project_l2_ball
from dpjax.primitives.sampling import (FixedAvailability, FullAvailability, FullBatch, OnePass, Poisson,
                                       RandomAvailability, WithoutReplacement, WithReplacement, make_sampler,
                                       poisson_sample, sample_with_replacement, sample_without_replacement,
                                       valid_first_permutation)

__all__ = [
    "checked",
    "ClippedSum", "clip_per_example", "clip_to_norm", "clipped_sum", "global_norm",
    "per_example_clipped_sum", "per_example_grads", "sensitivity_of_clipped_sum",
    "GhostClippedSum", "GhostFallbackError", "clipped_difference_sum", "ghost_clipped_sum",
    "per_example_grad_norms", "NNXLoss", "nnx_loss",
    "add_gaussian_noise", "gaussian_like", "project_l2_ball",
    "FixedAvailability", "FullAvailability", "FullBatch", "OnePass", "Poisson",
    "RandomAvailability", "WithoutReplacement", "WithReplacement", "make_sampler",
    "poisson_sample", "sample_with_replacement", "sample_without_replacement",
    "valid_first_permutation",
]
