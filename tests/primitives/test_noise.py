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


@pytest.fixture(params=["unrolled for every size", "default threshold"])
def fast_path_threshold(request, monkeypatch):
    """Runs a test with the unrolled path forced for every size (so small shapes still test it) and with
    the shipped threshold (small draws through jax.random.normal)."""
    if request.param == "unrolled for every size":
        monkeypatch.setattr(noise, "FAST_PATH_MIN_SIZE", 0)
    return noise.FAST_PATH_MIN_SIZE


@pytest.mark.parametrize("shape", [(), (1,), (7,), (203_530,), (3, 5, 4)])
@pytest.mark.parametrize("raw_key", [False, True])
def test_fast_normal_is_jax_normal_bit_for_bit(shape, raw_key, fast_path_threshold):
    """noise.normal unrolls Threefry for speed; it must reproduce jax.random.normal exactly,
    eagerly, under jit and under vmap over keys (else every recorded result would change)."""
    base = jax.random.PRNGKey(11) if raw_key else jax.random.key(11)
    keys = jax.random.split(base, 3)
    # compiled: one program holding both sides, the key an argument (XLA merges only identical
    # computations, so a different bit stream still differs); one such program for the vmapped draws too
    both = jax.jit(lambda k: (noise.normal(k, shape), jax.random.normal(k, shape)))
    for key in keys:
        np.testing.assert_array_equal(noise.normal(key, shape), jax.random.normal(key, shape))
        np.testing.assert_array_equal(*both(key))
    batched, expected = jax.jit(jax.vmap(lambda k: (noise.normal(k, shape), jax.random.normal(k, shape))))(keys)
    np.testing.assert_array_equal(batched, expected)


def test_small_draws_use_jax_random_normal_and_large_ones_the_unrolled_rounds():
    """Below FAST_PATH_MIN_SIZE the program holds jax's own threefry (which XLA can run beside the
    gradient); from it on, no threefry primitive: the unrolled integer rounds."""
    key = jax.random.key(3)
    small = str(jax.make_jaxpr(lambda k: noise.normal(k, (12, 50)))(key))
    large = str(jax.make_jaxpr(lambda k: noise.normal(k, (noise.FAST_PATH_MIN_SIZE,)))(key))
    assert "random_bits" in small or "threefry2x32" in small
    assert "random_bits" not in large and "threefry2x32" not in large
    tree = {"w": jnp.zeros((50,)), "b": jnp.zeros(())}
    assert "random_bits" in str(jax.make_jaxpr(lambda k: noise.gaussian_like(k, tree, 1.0))(key))


def test_fast_normal_falls_back_for_other_keys_and_dtypes():
    rbg = jax.random.key(5, impl="rbg")
    np.testing.assert_array_equal(noise.normal(rbg, (9,)), jax.random.normal(rbg, (9,)))
    key = jax.random.key(5)
    np.testing.assert_array_equal(noise.normal(key, (9,), jnp.bfloat16), jax.random.normal(key, (9,), jnp.bfloat16))


def test_gaussian_like_tree_is_the_split_flat_jax_draw(fast_path_threshold):
    """Each leaf's noise is drawn in place from its counter range: the numbers of one flat
    jax.random.normal draw split into the leaves (what gaussian_like released before)."""
    tree = {"a": jnp.zeros((3, 70)), "b": jnp.zeros((11,)), "c": jnp.zeros((2, 2, 5))}
    key = jax.random.key(42)
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    sizes = [leaf.size for leaf in leaves]

    def flat_draw_split(k):  # the previous implementation
        flat = jax.random.normal(k, (sum(sizes),)) * 2.5
        return [p.reshape(leaf.shape) for p, leaf in zip(jnp.split(flat, np.cumsum(sizes)[:-1]), leaves)]

    # eager against eager, compiled against compiled (XLA may fold sqrt(2) * std into one constant)
    for draw, expected in ((noise.gaussian_like(key, tree, 2.5), flat_draw_split(key)),
                           (jax.jit(lambda k: noise.gaussian_like(k, tree, 2.5))(key), jax.jit(flat_draw_split)(key))):
        for got, want in zip(jax.tree_util.tree_leaves(draw), expected):
            np.testing.assert_array_equal(got, want)
