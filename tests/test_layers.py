"""dpjax.problems.max_pool: flax.linen.max_pool's values, its gradient away from ties, clear errors."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.problems import max_pool


@pytest.mark.parametrize("shape,window", [((2, 8, 6, 3), (2, 2)), ((4, 9, 5), (3,)), ((1, 6, 6, 2), (3, 2))])
@pytest.mark.slow
def test_max_pool_matches_flax_values_and_gradient(shape, window):
    x = jax.random.normal(jax.random.key(0), shape)  # continuous: no ties, so the gradients agree too
    ref = lambda v: nn.max_pool(v, window, strides=window)  # noqa: E731
    np.testing.assert_array_equal(max_pool(x, window), ref(x))
    w = jax.random.normal(jax.random.key(1), ref(x).shape)
    g = jax.grad(lambda v: jnp.sum(w * max_pool(v, window)))(x)
    np.testing.assert_array_equal(g, jax.grad(lambda v: jnp.sum(w * ref(v)))(x))
    assert int(jnp.sum(g != 0)) == w.size  # one entry per window gets the gradient


def test_max_pool_rejects_indivisible_sizes():
    with pytest.raises(ValueError, match="not divisible"):
        max_pool(jnp.zeros((1, 7, 8, 1)), (2, 2))
