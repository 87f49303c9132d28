"""The one result check: sampling overflow, non-finite iterates, divergence.

Every executor path (``dpjax.engine.run``/``run_many``, ``run_grid``, the
sweep store) reads a run's round metrics the same way:

* ``run_flags``: the first round whose iterate was not finite (``diverged_round``) and the first round whose Poisson
  batch overflowed its static buffer (``overflow_round``), ``-1`` if none; traced inside a compiled chunk (``xp=jnp``)
  or on the host (``xp=np``);
* ``check_runs``: raises ``SamplingOverflowError`` (always: a truncated batch voids the Poisson privacy analysis) or
  ``NonFiniteError`` (with ``on_nonfinite="raise"``) naming the run and the round, before any result of the failing
  chunk is returned or stored;
* ``diverged``: the protocols' divergence rule (non-finite iterate, non-finite
  final loss, or a final loss above the authors' guard threshold).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

ON_NONFINITE = ("raise", "mark")


class NonFiniteError(FloatingPointError):
    """A run produced NaN or inf parameters."""


class SamplingOverflowError(RuntimeError):
    """A Poisson batch exceeded its static buffer, so the batch was truncated."""


def first_round(flags, xp=np):
    """Index of the first True along the last (rounds) axis, -1 if none (int32)."""
    return xp.where(xp.any(flags, axis=-1), xp.argmax(flags, axis=-1), -1).astype(xp.int32)


def run_flags(round_metrics: dict, xp=np) -> tuple:
    """``(diverged_round, overflow_round)`` of runs from their round metrics.

    ``round_metrics["finite"]`` is ``[..., rounds]`` (leading run axes, if any); ``round_metrics["sampling_overflow"]``
    (when the family reports it) is ``[..., rounds, *per-round shape]``."""
    finite = round_metrics["finite"]
    overflow = round_metrics.get("sampling_overflow")
    if overflow is None:
        return first_round(~finite, xp), xp.full(finite.shape[:-1], -1, xp.int32)
    return first_round(~finite, xp), first_round(overflow.reshape(finite.shape + (-1,)).any(-1), xp)


def check_runs(diverged_round, overflow_round, *, on_nonfinite: str, describe: Callable[[int], str],
               consequence: str = "No result was returned.") -> None:
    """Raises for the first run (in the given order) whose batch overflowed, else (``on_nonfinite="raise"``)
    for the first that went non-finite. ``describe(i)`` names run ``i`` (e.g. ``"run 3"``)."""
    overflow = np.asarray(overflow_round).reshape(-1)
    if (overflow >= 0).any():
        i = int(np.argmax(overflow >= 0))
        raise SamplingOverflowError(
            f"{describe(i)}: a Poisson batch overflowed its buffer at round {int(overflow[i])}; the batch was "
            f"truncated and the Poisson privacy analysis does not apply. Increase the sampler's capacity. {consequence}"
        )
    div = np.asarray(diverged_round).reshape(-1)
    if on_nonfinite == "raise" and (div >= 0).any():
        i = int(np.argmax(div >= 0))
        raise NonFiniteError(
            f"{describe(i)} produced NaN/inf parameters at round {int(div[i])} (0-based); lower the step size or "
            f"check the data, or pass on_nonfinite='mark' to record diverged runs instead. {consequence}"
        )


def diverged(diverged_round, final_loss=None, threshold: float = math.inf) -> np.ndarray:
    """Runs that diverged: a non-finite iterate, or a final loss that is not finite or exceeds
    ``threshold`` (the authors' guard, e.g. Lowy & Razaviyayn's loss threshold)."""
    bad = np.asarray(diverged_round) >= 0
    if final_loss is not None:
        final_loss = np.asarray(final_loss, np.float64)
        bad = bad | ~np.isfinite(final_loss) | (final_loss > threshold)
    return bad
