"""Gaussian noise: the per-coordinate std matches sigma (statistical test with a
tolerance from the sampling distribution of the variance estimate)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.primitives import noise


@pytest.mark.parametrize("std", [0.01, 1.0, 37.5])
def test_noise_variance_matches_sigma(std):
    tree = {"a": jnp.zeros((200, 50)), "b": jnp.zeros((10_000,))}
    draws = noise.gaussian_like(jax.random.key(7), tree, std)
    for leaf in jax.tree_util.tree_leaves(draws):
        x = np.asarray(leaf, np.float64).ravel()
        m = x.size
        var = x.var(ddof=1)
        # Var of the sample variance of a Gaussian is 2 s^4 / (m - 1): allow 5 standard errors.
        se = std**2 * np.sqrt(2.0 / (m - 1))
        assert abs(var - std**2) < 5 * se
        assert abs(x.mean()) < 5 * std / np.sqrt(m)


def test_leaves_get_independent_noise():
    tree = {"a": jnp.zeros((5000,)), "b": jnp.zeros((5000,))}
    draws = noise.gaussian_like(jax.random.key(0), tree, 1.0)
    corr = np.corrcoef(np.asarray(draws["a"]), np.asarray(draws["b"]))[0, 1]
    assert abs(corr) < 5 / np.sqrt(5000)


def test_zero_std_adds_exactly_zero():
    tree = {"a": jnp.linspace(-3, 3, 11)}
    out = noise.add_gaussian_noise(jax.random.key(1), tree, 0.0)
    np.testing.assert_array_equal(out["a"], tree["a"])


def test_same_key_same_noise_different_key_different_noise():
    tree = jnp.zeros((8,))
    a = noise.gaussian_like(jax.random.key(1), tree, 1.0)
    b = noise.gaussian_like(jax.random.key(1), tree, 1.0)
    c = noise.gaussian_like(jax.random.key(2), tree, 1.0)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(np.asarray(a), np.asarray(c))
