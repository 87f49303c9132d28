"""dpjax.problems.max_pool: flax.linen.max_pool's values, its gradient away from ties, clear errors;
dpjax.problems.GroupNorm: flax.linen.GroupNorm's parameters, values and gradients up to float reordering."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.problems import GroupNorm, max_pool


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


@pytest.mark.parametrize("shape,groups", [((3, 6, 5, 8), 4), ((2, 7, 6), 3), ((4, 6), 2)])
@pytest.mark.slow
def test_group_norm_matches_flax(shape, groups):
    """Same parameter tree and initial values; output and gradients (input and parameters) equal to
    float32 reordering: both compute E[x], E[x^2] - E[x]^2 and rsqrt(var + eps) from sums of the same
    numbers in another order, so the relative gap is a few ulp (1e-5 leaves a 100x margin) ."""
    key = jax.random.key(0)
    x = 3.0 * jax.random.normal(key, shape) + 1.5  # an offset: the fast variance's cancellation is exercised
    ours, ref = GroupNorm(num_groups=groups), nn.GroupNorm(num_groups=groups)
    p_ours, p_ref = ours.init(key, x), ref.init(key, x)
    assert jax.tree_util.tree_structure(p_ours) == jax.tree_util.tree_structure(p_ref)
    jax.tree_util.tree_map(np.testing.assert_array_equal, p_ours, p_ref)
    # non-trivial scale and bias, so the affine part is checked too
    p = jax.tree_util.tree_map(lambda a: a + 0.3 * jax.random.normal(jax.random.key(1), a.shape), p_ref)
    w = jax.random.normal(jax.random.key(2), shape)

    @jax.jit
    def outputs_and_grads(q, v):
        def f(module):
            return module.apply(q, v), jax.grad(lambda q, v: jnp.sum(w * jnp.tanh(module.apply(q, v))), (0, 1))(q, v)
        return f(ours), f(ref)

    (y_ours, g_ours), (y_ref, g_ref) = outputs_and_grads(p, x)
    np.testing.assert_allclose(y_ours, y_ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree_util.tree_leaves(g_ours), jax.tree_util.tree_leaves(g_ref)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_group_norm_constant_group_is_finite():
    """A constant group has variance 0 (E[x^2] - E[x]^2 may round below 0: clipped, as flax does)."""
    x = jnp.full((2, 3, 3, 4), 0.1)
    p = GroupNorm(num_groups=2).init(jax.random.key(0), x)
    y, y_ref = jax.jit(lambda v: (GroupNorm(num_groups=2).apply(p, v), nn.GroupNorm(num_groups=2).apply(p, v)))(x)
    assert bool(jnp.all(jnp.isfinite(y)))
    np.testing.assert_allclose(y, y_ref, atol=1e-2)  # both (rounding noise) x rsqrt(eps): within 1e-2 of bias 0


def test_group_norm_rejects_indivisible_channels():
    with pytest.raises(ValueError, match="num_groups=3"):
        GroupNorm(num_groups=3).init(jax.random.key(0), jnp.zeros((1, 4, 4, 8)))
