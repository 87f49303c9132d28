"""Per-run hyperparameter dataclasses declared once: each field names its own check and dtype.

A family's hyperparameters are a frozen, jax-registered dataclass whose values may vary per run (they are traced, so a
grid vmaps over them). Before this module every such class wrote the field list three times: the declaration, the
``create`` signature and a block of checks. Now a field says it once::

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass(frozen=True)
    class MbSgdHParams(HParams):
        learning_rate: Any = hparam()                                  # required, > 0
        noise_multiplier: Any = hparam(0.0, _validate.check_nonnegative)
        clip_norm: Any = hparam(1.0, allow_inf=True)                   # > 0, inf = no clipping

and ``MbSgdHParams.create(0.1, noise_multiplier=2.0)`` checks every concrete value with its field's rule (a
``ValueError`` naming the argument and value, ``noise_multiplier=-1.0 must be >= 0``; traced values only in
``dpjax.primitives.checked`` mode) and stores it as a jax array of the field's dtype. Positional arguments bind in field
order, as a hand-written signature would.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax.numpy as jnp

from dpjax import _validate

_META = "dpjax.hparam"


def hparam(default: Any = dataclasses.MISSING, check: Callable = _validate.check_positive, *,
           dtype=jnp.float32, **check_kwargs) -> Any:
    """A hyperparameter field: its default (none = required), its check (a ``dpjax._validate`` rule
    called as ``check(name, value, **check_kwargs)``; default: > 0) and the dtype it is stored in."""
    return dataclasses.field(default=default, metadata={_META: (check, check_kwargs, jnp.dtype(dtype))})


class HParams:
    """Base of the hyperparameter dataclasses whose fields are declared with ``hparam``."""

    @classmethod
    def create(cls, *args, dtype=None, **kwargs):
        """Validated constructor. ``args`` bind to the fields in declaration order; ``dtype`` (optional)
        overrides the dtype of every floating-point field (e.g. float64 for a float64 run)."""
        fields = dataclasses.fields(cls)
        names = [f.name for f in fields]
        if len(args) > len(fields):
            raise TypeError(f"{cls.__name__}.create() takes at most {len(fields)} positional arguments "
                            f"({', '.join(names)}), got {len(args)}")
        values = dict(zip(names, args))
        for name in kwargs:
            if name not in names:
                raise TypeError(f"{cls.__name__}.create() got an unexpected argument {name!r}; "
                                f"its fields are {', '.join(names)}")
            if name in values:
                raise TypeError(f"{cls.__name__}.create() got {name!r} both by position and by name")
        values.update(kwargs)
        stored = {}
        for f in fields:
            if f.name not in values:
                if f.default is dataclasses.MISSING:
                    raise TypeError(f"{cls.__name__}.create() needs {f.name!r}")
                values[f.name] = f.default
            check, check_kwargs, field_dtype = f.metadata[_META]
            _validate.check_if_concrete(check, f.name, values[f.name], **check_kwargs)
            floating = jnp.issubdtype(field_dtype, jnp.floating)
            stored[f.name] = jnp.asarray(values[f.name], dtype if (dtype is not None and floating) else field_dtype)
        return cls(**stored)

    def validate(self) -> None:
        """Re-runs every field's check on the values it holds (entry by entry for a stack of runs).

        ``create`` cannot read values traced under ``jit``/``vmap``; hparams built there come out concrete, so the
        executor calls this at its boundary before compiling: a negative clip built inside ``jax.jit`` is refused
        there (``clip_norm=-1.0 must be > 0``) instead of running with a meaningless sensitivity."""
        for f in dataclasses.fields(self):
            check, check_kwargs, _ = f.metadata[_META]
            _validate.check_if_concrete(check, f.name, getattr(self, f.name), **check_kwargs)
