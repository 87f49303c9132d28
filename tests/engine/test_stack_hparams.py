"""``stack_hparams``: the host fast path for strongly typed JAX leaves must give exactly what stacking every
leaf with ``jnp.asarray`` + ``jnp.stack`` gives (values, dtypes, weak types), for every kind of leaf a
configuration holds; mismatched structures still fail."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.engine import stack_hparams


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class _HP:
    strong: jax.Array
    weak: jax.Array
    python: float
    host: np.ndarray
    vector: jax.Array
    key: jax.Array


def _config(i: int) -> _HP:
    return _HP(strong=jnp.float32(0.5 + i), weak=jnp.asarray(0.25 * i), python=0.5 * i, host=np.float64(1.5 * i),
               vector=jnp.arange(3, dtype=jnp.int32) + i, key=jax.random.key(i))


def _reference(configs):
    def leaf(*xs):
        return jnp.stack([jnp.asarray(x) for x in xs])

    return jax.tree_util.tree_map(leaf, *configs)


def test_every_kind_of_leaf_stacks_as_jnp_stack_would():
    configs = [_config(i) for i in range(5)]
    got, want = stack_hparams(configs), _reference(configs)
    for name in ("strong", "weak", "python", "host", "vector"):
        g, w = getattr(got, name), getattr(want, name)
        assert g.shape == w.shape and g.dtype == w.dtype and g.weak_type == w.weak_type, name
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    np.testing.assert_array_equal(jax.random.key_data(got.key), jax.random.key_data(want.key))


def test_strongly_typed_leaves_keep_their_dtype_per_column():
    configs = [_HP(jnp.bfloat16(i), jnp.asarray(1.0), 1.0, np.float32(i), jnp.zeros(3, jnp.int32), jax.random.key(0))
               for i in range(3)]
    got = stack_hparams(configs)
    assert got.strong.dtype == jnp.bfloat16 and not got.strong.weak_type
    np.testing.assert_array_equal(np.asarray(got.strong, np.float32), [0.0, 1.0, 2.0])


def test_mismatched_structures_still_fail():
    with pytest.raises(ValueError):
        stack_hparams([{"a": jnp.float32(1.0)}, {"b": jnp.float32(1.0)}])
