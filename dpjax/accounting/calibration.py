"""dpjax's calibration routine: the smallest noise scale whose epsilon meets a target.

A single Gaussian schedule whose RDP is dp_accounting's (unsampled, one-pass, Poisson under add/remove) is calibrated
by ``dp_accounting.calibrate_dp_mechanism`` on its DpEvent (``api.calibrate_noise``); every other ``PrivacySpec`` is
calibrated here, for what calibrate_dp_mechanism does not do: one common scale of several multipliers (DIFF2's
ratios kept), one-parameter families that are no DpEvent (shuffle amplification, P_vec, f-DP batch clipping), a
coarse PLD grid re-bracketed onto the reporting one, and curves dp_accounting's RDP does not give (without-replacement
sampling's fast curve, the conditioned bound, group conversion). A spec exposes a one-parameter family of
mechanisms, ``epsilon_at(scale)``, whose epsilon does not increase as the scale grows (more noise: a Gaussian noise
multiplier times ``scale``, P_vec parameters from the calculator at ``epsilon' / scale``, ...). ``smallest_scale``
finds the smallest scale with ``epsilon_at(scale) <= target``:

1. bracket by factors of 4 from ``start`` (refusing targets no noise reaches, and targets met at every scale down to
   ``min_scale``: "needs no noise");
2. Brent's method on ``log epsilon`` against ``log scale`` (where epsilon is finite and positive at both ends) for a
   root estimate, a step either side of it to re-bracket;
3. bisection on ``log scale`` down to a relative width ``rtol``, always keeping ``epsilon(lo) > target >= epsilon(hi)``.

It returns ``hi``: a scale at which the target was *evaluated* to hold, so a calibrated run never overshoots its target
under the same accountant. ``coarse_epsilon_at`` (optional) is a cheaper, slightly different curve (PLD on a coarser
grid): the root is found on it first, then re-bracketed and finished on ``epsilon_at``.

Pure Python: never imports jax.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from scipy import optimize

EpsilonAt = Callable[[float], float]

#: Default relative width of the final bracket.
DEFAULT_RTOL = 1e-6


def _bracket(eps_at: EpsilonAt, target: float, start: float, min_scale: float, what: str) -> tuple[float, float]:
    """``(lo, hi)`` with ``eps(lo) > target >= eps(hi)``, by factors of 4 from ``start``."""
    lo, hi = None, start
    for _ in range(40):  # up to 4^40 ~ 1e24 times the start
        if eps_at(hi) <= target:
            break
        lo, hi = hi, hi * 4.0
    else:
        raise ValueError(f"target_epsilon={target!r} cannot be reached by any noise level: epsilon is still "
                         f"{eps_at(hi):.3g} at {what} {hi:.3g}")
    if lo is None:
        lo = hi
        while True:
            lo = lo / 4.0
            if lo < min_scale:
                raise ValueError(
                    f"target_epsilon={target!r} is met at every noise level down to {what} {min_scale:.3g} "
                    f"(epsilon {eps_at(hi):.3g} there): this delta needs (almost) no noise, nothing to "
                    "calibrate; use a smaller delta")
            if eps_at(lo) > target:
                break
            hi = lo
    return lo, hi


def refine_bracket(eps_at: EpsilonAt, target: float, lo: float, hi: float, rtol: float) -> tuple[float, float]:
    """Shrinks a bracket (``eps(lo) > target >= eps(hi)``) to ``hi/lo <= 1 + rtol``."""
    a, b = math.log(lo), math.log(hi)
    feasible = lambda x: eps_at(math.exp(x)) <= target  # noqa: E731
    xtol = math.log1p(rtol) / 4
    if math.isfinite(eps_at(lo)) and eps_at(hi) > 0 and b - a > math.log1p(rtol):
        def f(x: float) -> float:
            e = eps_at(math.exp(x))
            return math.log(e) - math.log(target) if e > 0 else -math.inf

        try:
            root = optimize.brentq(f, a, b, xtol=xtol, rtol=4 * np.finfo(float).eps, maxiter=100)
        except (ValueError, RuntimeError):  # epsilon 0 inside the bracket: bisection alone
            root = None
        if root is not None:
            for x in (root - xtol, root - 2 * xtol):
                if a < x < b and not feasible(x):
                    a = x
                    break
            for x in (root + xtol, root + 2 * xtol, root + 4 * xtol):
                if a < x < b and feasible(x):
                    b = x
                    break
    while b - a > math.log1p(rtol):
        mid = 0.5 * (a + b)
        if feasible(mid):
            b = mid
        else:
            a = mid
    return math.exp(a), math.exp(b)


def rebracket(eps_at: EpsilonAt, target: float, lo: float, hi: float) -> tuple[float, float]:
    """Moves a bracket found on a nearby curve until it brackets the root of ``eps_at``.

    Refuses (ValueError) when 40 growing steps (a factor ~1e200) do not reach a feasible ``hi``: the bisection
    after it would otherwise return a scale at which the target was never met."""
    for k in range(40):
        if eps_at(hi) <= target:
            break
        lo, hi = hi, hi * (1 + 1e-3 * 2**k)
    else:
        raise ValueError(f"target_epsilon={target!r} cannot be reached: epsilon is still {eps_at(hi):.3g} at scale "
                         f"{hi:.3g}, far above where the coarse curve met it")
    for k in range(40):
        if eps_at(lo) > target:
            break
        hi, lo = lo, lo / (1 + 1e-3 * 2**k)
    else:
        raise ValueError(f"target_epsilon={target!r} is met at every scale down to {lo:.3g} (epsilon "
                         f"{eps_at(lo):.3g} there): this delta needs (almost) no noise, nothing to calibrate")
    return lo, hi


def bisect_threshold(feasible: Callable[[float], bool], lo: float, hi: float, *, iterations: int, rtol: float,
                     floor: float = 0.0) -> float:
    """The upper end of ``[lo, hi]`` (``feasible(hi)`` holds, ``feasible(lo)`` does not) after
    bisection: at most ``iterations`` halvings, stopping once ``hi - lo <= rtol * max(floor, hi)``.
    The returned point is one at which ``feasible`` was evaluated to hold (or the given ``hi``)."""
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if feasible(mid):
            hi = mid
        else:
            lo = mid
        if hi - lo <= rtol * max(floor, hi):
            break
    return hi


def smallest_scale(epsilon_at: EpsilonAt, target: float, *, start: float = 1.0, rtol: float = DEFAULT_RTOL,
                   min_scale: float = 1e-4, what: str = "noise multiplier",
                   coarse_epsilon_at: EpsilonAt | None = None, coarse_rtol: float = 1e-3) -> float:
    """The smallest scale (to relative width ``rtol``) with ``epsilon_at(scale) <= target``.

    Args:
      epsilon_at: epsilon of the mechanism at a noise scale; non-increasing.
      target: the epsilon to meet (> 0).
      start: where the bracketing starts (noise multiplier 1, or the
        mechanism's current noise).
      rtol: relative width of the final bracket.
      min_scale: below this scale a target that still holds is refused
        ("needs no noise") instead of chased towards 0.
      what: how the scale is named in error messages.
      coarse_epsilon_at: an optional cheaper epsilon curve, searched first (to ``coarse_rtol``)
        to narrow the bracket that ``epsilon_at`` refines.
      coarse_rtol: relative width of the coarse curve's bracket.

    Returns: A scale at which ``epsilon_at(scale) <= target`` was evaluated.

    Raises: ValueError: a target no noise level reaches, or one met even at ``min_scale``.
    """
    cache: dict[float, float] = {}

    def eps(scale: float) -> float:
        if scale not in cache:
            cache[scale] = float(epsilon_at(scale))
        return cache[scale]

    first = eps if coarse_epsilon_at is None else coarse_epsilon_at
    lo, hi = _bracket(first, target, start, min_scale, what)
    if coarse_epsilon_at is None:
        return refine_bracket(eps, target, lo, hi, rtol)[1]
    lo, hi = refine_bracket(first, target, lo, hi, coarse_rtol)
    lo, hi = rebracket(eps, target, lo, hi)
    return refine_bracket(eps, target, lo, hi, rtol)[1]
