"""Argument validators shared by every public entry point.

Pure Python (no jax import): the accounting layer uses these too. Every check raises a ``ValueError`` whose message
starts with ``name=value`` so that the user sees which argument was wrong and what they passed, e.g. ``epsilon=-1.0 must
be > 0``.
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
    """Returns ``value`` as a float; rejects bools, non-numbers and NaN.

    A concrete 0-d or one-element NumPy/jax array counts as its number (``jnp.float32(0.5)``).
    """
    if not isinstance(value, numbers.Number):
        scalar = concrete_scalar(value)
        value = scalar if scalar is not None and not isinstance(scalar, complex) else value
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
    """An integer (Python, NumPy, or a concrete 0-d/one-element integer array) in ``[min_value, max_value]``."""
    if not isinstance(value, numbers.Number) and concrete_scalar(value) is not None:
        value = concrete_scalar(value)
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


#: Largest seed: ``jax.random.key`` keeps 32 bits of an integer seed (without x64), so
#: ``key(2**32)`` equals ``key(0)``; a larger seed would silently repeat a smaller one.
MAX_SEED = 2**32 - 1
#: Largest number of rounds: round keys fold in an int32 round index, and the once-per-run
#: streams use indices just below 2**31 (``dpjax.keys``); 2**30 keeps every round distinct.
MAX_ROUNDS = 2**30


def check_devices_spec(name: str, value: Any) -> int | str:
    """A number of devices as a config or a flag gives it: an int >= 1 (or its text) or ``"all"``."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "all":
            return "all"
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{_fmt(name, value)} must be a number of devices (an int >= 1) or 'all'") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{_fmt(name, value)} must be a number of devices (an int >= 1) or 'all'")
    if value < 1:
        raise ValueError(f"{_fmt(name, value)} must be >= 1 (a number of devices) or 'all'")
    return int(value)


def check_seed(name: str, value: Any) -> int:
    """An integer seed in ``[0, MAX_SEED]`` (see :data:`MAX_SEED`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{_fmt(name, value)} must be an integer")
    if not 0 <= int(value) <= MAX_SEED:
        raise ValueError(f"{_fmt(name, value)} must be in [0, {MAX_SEED}] (2**32 - 1: jax.random.key keeps "
                         "32 bits of a seed, so a larger one would repeat a smaller one)")
    return int(value)


def check_rounds(name: str, value: Any) -> int:
    """A number of rounds in ``[1, MAX_ROUNDS]`` (see :data:`MAX_ROUNDS`)."""
    return check_int(name, value, min_value=1, max_value=MAX_ROUNDS)


def is_tracer(value: Any) -> bool:
    jax = sys.modules.get("jax")  # never import jax here: the accounting layer uses this module
    return jax is not None and isinstance(value, jax.core.Tracer)


def concrete_scalar(value: Any) -> Any:
    """``value`` when it is a concrete scalar (Python, NumPy, a 0-d or one-element jax/NumPy array), else ``None``.

    Lets a constructor validate every value it can see on the host — Python numbers, ``np.float32(-0.1)``,
    ``jnp.float32(-0.1)``, ``jnp.array([-0.1])`` — while leaving jax tracers (inside ``jit``/``vmap``) alone. Bools are
    returned as they are so that the ``check_*`` helpers reject them.
    """
    if isinstance(value, numbers.Number):
        return value
    if is_tracer(value):
        return None
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    if kind is not None and kind in "fiub" and getattr(value, "size", None) == 1:
        try:
            return value.reshape(()).item() if getattr(value, "shape", ()) != () else value.item()
        except Exception:  # not concrete after all (e.g. an abstract value)
            return None
    return None


def concrete_array(value: Any):
    """A NumPy array of ``value``'s entries when it is a concrete numeric array of any size, else ``None``."""
    if isinstance(value, numbers.Number) or is_tracer(value):
        return None
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    if kind is None or kind not in "fiub" or getattr(value, "shape", None) is None:
        return None
    try:
        import numpy as np
        return np.asarray(value)
    except Exception:  # abstract, or not addressable from this process
        return None


# -- checks of traced values (checked mode) --------------------------------------------------
_CHECKED_DEPTH = 0


def checking_traced() -> bool:
    """Whether :func:`checked` is active: traced values are then checked with ``jax.experimental.checkify``."""
    return _CHECKED_DEPTH > 0


def _traced_predicate(check, kwargs):
    """``(predicate(x, jnp), requirement)`` of a ``check_*`` helper, for checkify."""
    allow_inf = kwargs.get("allow_inf", False)
    fin = (lambda x, jnp: jnp.isfinite(x)) if not allow_inf else (lambda x, jnp: ~jnp.isnan(x))
    if check is check_positive:
        return (lambda x, jnp: (x > 0) & fin(x, jnp)), "must be > 0" + ("" if allow_inf else " and finite")
    if check is check_nonnegative:
        return (lambda x, jnp: (x >= 0) & fin(x, jnp)), "must be >= 0" + ("" if allow_inf else " and finite")
    if check is check_probability:
        if kwargs.get("allow_zero", True):
            return (lambda x, jnp: (x >= 0) & (x <= 1)), "must be in [0, 1]"
        return (lambda x, jnp: (x > 0) & (x <= 1)), "must be in (0, 1]"
    if check is check_open_unit:
        return (lambda x, jnp: (x > 0) & (x < 1)), "must be in the open interval (0, 1)"
    if check is check_int:
        lo, hi = kwargs.get("min_value"), kwargs.get("max_value")
        pred = lambda x, jnp: ((x >= lo) if lo is not None else True) & ((x <= hi) if hi is not None else True)  # noqa: E731
        return pred, f"must be in [{lo}, {hi}]"
    return None, ""


def _check_traced(check, name: str, value: Any, kwargs) -> None:
    pred, requirement = _traced_predicate(check, kwargs)
    if pred is None:
        return
    import jax.numpy as jnp
    from jax.experimental import checkify
    checkify.check(jnp.all(pred(value, jnp)), f"{name}={{value}} {requirement}", value=value)


def check_if_concrete(check, name: str, value: Any, **kwargs) -> None:
    """Runs ``check(name, x, **kwargs)`` on every value it can see on the host.

    Concrete scalars (see :func:`concrete_scalar`) are checked as ``name``; concrete arrays entry by entry as
    ``name[i]`` (a stack of per-run values). Traced values (inside ``jit``/``vmap``) cannot be read on the host: they
    are the caller's contract, checked only in :func:`checked` mode (a ``checkify`` check that :func:`checked` turns
    into a ``ValueError``).
    """
    scalar = concrete_scalar(value)
    if scalar is not None:
        check(name, scalar, **kwargs)
        return
    if is_tracer(value):
        if checking_traced():
            _check_traced(check, name, value, kwargs)
        return
    arr = concrete_array(value)
    if arr is not None:
        for i, x in enumerate(arr.reshape(-1).tolist()):
            check(f"{name}[{i}]" if arr.ndim == 1 else f"{name}.flat[{i}]", x, **kwargs)


def checked(fn):
    """``fn`` with dpjax's argument checks applied to traced values too (the checked mode).

    Outside this mode, a value that is traced inside ``jit``/``vmap`` (a clip norm, radius, noise std or rate computed
    inside the program) is the caller's contract: dpjax cannot read it on the host, and a negative or NaN one is not
    reported. ``checked(fn)(*args)`` traces ``fn`` with ``jax.experimental.checkify`` checks at every public entry point
    of ``dpjax.primitives`` and the hyperparameter types, runs it, and raises a ``ValueError`` naming the argument when
    one fails, e.g.::

        dpjax.primitives.checked(jax.jit(lambda c: clip_to_norm(t, c)))(-1.0)
        # ValueError: clip_norm=-1.0 must be >= 0 ...

    ``fn`` is traced afresh inside this call (its ``jax.jit`` is bypassed, so an earlier unchecked trace is never
    reused; ``lax`` loops then run step by step): a debugging and testing mode, not for long runs.
    """
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        global _CHECKED_DEPTH
        import jax
        from jax.experimental import checkify
        _CHECKED_DEPTH += 1
        try:
            # jit caches traces by function: a function traced before (unchecked) would be reused without
            # the checks, so its jit is bypassed here and it is traced afresh inside checkify.
            with jax.disable_jit():
                err, out = checkify.checkify(fn)(*args, **kwargs)
        finally:
            _CHECKED_DEPTH -= 1
        msg = err.get()
        if msg:
            raise ValueError(msg.split(" (`check` failed)")[0].strip())
        return out

    return wrapper


# -- command-line flags ----------------------------------------------------------------------
#: Integers a command-line count may take: exact in float64 (2**53), which every accountant needs.
MAX_FLAG_INT = 2**53


def parse_int(text: str) -> int:
    """A command-line integer: ``"1000"``, or ``"1e12"`` when it is an exact integer."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None
    if not math.isfinite(value) or not value.is_integer():
        raise ValueError(f"{text!r} is not an integer")
    return int(value)


parse_int.__name__ = "int"


def flag_type(flag: str, kind, check=None, *, exact_in_float64: bool = False, **kwargs):
    """An argparse ``type=`` that parses ``kind`` (``parse_int`` or ``float``) and runs ``check``.

    A value that does not parse (or fails ``check``) ends as argparse's usage and one ``dpjax: error: argument
    --flag: ...`` line, before the command loads or computes anything. ``exact_in_float64``: integers beyond 2**53 are
    refused too (counts the accountants compute with). Range checks that should read as one line naming the flag belong
    at the top of the command (``check_seed("--seed", args.seed)``).
    """
    import argparse

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag}={text!r} is not a valid {kind.__name__}") from None
        if check is not None:
            try:
                check(flag, value, **kwargs)
            except ValueError as err:
                raise argparse.ArgumentTypeError(str(err)) from None
        if exact_in_float64 and abs(value) > MAX_FLAG_INT:
            raise argparse.ArgumentTypeError(f"{flag}={text} is beyond 2**53 (not exact in float64)")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in some messages
    return parse
