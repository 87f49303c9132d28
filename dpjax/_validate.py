"""Argument validators shared by every public entry point.

Pure Python (no jax import): the accounting layer uses these too. Every check
raises a ``ValueError`` whose message starts with ``name=value`` so that the
user sees which argument was wrong and what they passed, e.g.
``epsilon=-1.0 must be > 0``.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Iterable
from typing import Any


def _fmt(name: str, value: Any) -> str:
    return f"{name}={value!r}"


def check_real(name: str, value: Any) -> float:
    """Returns ``value`` as a float; rejects bools, non-numbers and NaN."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{_fmt(name, value)} must be a real number")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{_fmt(name, value)} must not be NaN")
    return value


def check_positive(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """``value > 0`` (finite unless ``allow_inf``)."""
    v = check_real(name, value)
    if not v > 0:
        raise ValueError(f"{_fmt(name, value)} must be > 0")
    if math.isinf(v) and not allow_inf:
        raise ValueError(f"{_fmt(name, value)} must be finite")
    return v


def check_nonnegative(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """``value >= 0`` (finite unless ``allow_inf``)."""
    v = check_real(name, value)
    if not v >= 0:
        raise ValueError(f"{_fmt(name, value)} must be >= 0")
    if math.isinf(v) and not allow_inf:
        raise ValueError(f"{_fmt(name, value)} must be finite")
    return v


def check_open_unit(name: str, value: Any) -> float:
    """``0 < value < 1`` (e.g. a DP ``delta``)."""
    v = check_real(name, value)
    if not 0.0 < v < 1.0:
        raise ValueError(f"{_fmt(name, value)} must be in the open interval (0, 1)")
    return v


def check_probability(name: str, value: Any, *, allow_zero: bool = True) -> float:
    """``0 <= value <= 1`` (or ``0 < value <= 1`` when ``allow_zero=False``)."""
    v = check_real(name, value)
    lo_ok = v >= 0.0 if allow_zero else v > 0.0
    if not (lo_ok and v <= 1.0):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ValueError(f"{_fmt(name, value)} must be in {interval}")
    return v


def check_int(name: str, value: Any, *, min_value: int | None = None, max_value: int | None = None) -> int:
    """An integer (Python or NumPy) in ``[min_value, max_value]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{_fmt(name, value)} must be an integer")
    v = int(value)
    if min_value is not None and v < min_value:
        raise ValueError(f"{_fmt(name, value)} must be >= {min_value}")
    if max_value is not None and v > max_value:
        raise ValueError(f"{_fmt(name, value)} must be <= {max_value}")
    return v


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{_fmt(name, value)} must be one of {choices}")
    return value


def check_le(name: str, value: Any, other_name: str, other: Any) -> None:
    """``value <= other``, naming both arguments."""
    if not value <= other:
        raise ValueError(f"{_fmt(name, value)} must be <= {other_name}={other!r}")


def concrete_scalar(value: Any) -> Any:
    """``value`` when it is a concrete scalar (Python, NumPy or a 0-d jax array), else ``None``.

    Lets a constructor validate every value it can see on the host — Python
    numbers, ``np.float32(-0.1)``, ``jnp.float32(-0.1)`` — while leaving jax
    tracers (inside ``jit``/``vmap``) and batched arrays alone. Bools are
    returned as they are so that the ``check_*`` helpers reject them.
    """
    if isinstance(value, numbers.Number):
        return value
    jax = sys.modules.get("jax")  # never import jax here: the accounting layer uses this module
    if jax is not None and isinstance(value, jax.core.Tracer):
        return None
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    if getattr(value, "shape", None) == () and kind is not None and kind in "fiub":
        try:
            return value.item()
        except Exception:  # not concrete after all (e.g. an abstract value)
            return None
    return None


def check_if_concrete(check, name: str, value: Any, **kwargs) -> None:
    """Runs ``check(name, scalar, **kwargs)`` when ``value`` is a concrete scalar (see :func:`concrete_scalar`)."""
    scalar = concrete_scalar(value)
    if scalar is not None:
        check(name, scalar, **kwargs)
