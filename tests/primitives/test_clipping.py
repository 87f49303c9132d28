"""Per-example clipping: the bound holds for every example, and the clipped sum
has the sensitivity it claims under each neighbouring relation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.primitives import clipping


def _tree_batch(key, batch):
    """Examples whose norms span five orders of magnitude."""
    k1, k2 = jax.random.split(key)
    scale = jnp.logspace(-3, 2, batch)
    return {
        "w": scale[:, None, None] * jax.random.normal(k1, (batch, 4, 3)),
        "b": scale[:, None] * jax.random.normal(k2, (batch, 5)),
    }


@pytest.mark.parametrize("clip_norm", [0.0, 0.3, 1.0, 7.0])
def test_every_clipped_example_within_bound(clip_norm):
    grads = _tree_batch(jax.random.key(0), 64)
    clipped = clipping.clip_per_example(grads, clip_norm)
    norms = jax.vmap(clipping.global_norm)(clipped)
    raw = jax.vmap(clipping.global_norm)(grads)
    assert np.all(np.asarray(norms) <= clip_norm * (1 + 1e-6) + 1e-12)
    # examples already inside the ball are untouched (scaled by exactly 1)
    inside = np.asarray(raw) <= clip_norm
    if inside.any():
        np.testing.assert_array_equal(np.asarray(clipped["b"])[inside], np.asarray(grads["b"])[inside])
    # examples outside are scaled onto the sphere (direction preserved)
    outside = ~inside
    if clip_norm > 0 and outside.any():
        np.testing.assert_allclose(np.asarray(norms)[outside], clip_norm, rtol=1e-5)


def test_zero_vector_and_zero_clip_never_nan():
    z = {"a": jnp.zeros((3,)), "b": jnp.zeros((2, 2))}
    for c in (0.0, 1.0, jnp.inf):
        out = clipping.clip_to_norm(z, c)
        assert all(np.all(np.asarray(leaf) == 0) for leaf in jax.tree_util.tree_leaves(out))
    nonzero = {"a": jnp.ones((3,))}
    out = clipping.clip_to_norm(nonzero, 0.0)
    assert np.all(np.asarray(out["a"]) == 0)


def test_global_norm_is_one_norm_over_all_leaves():
    tree = {"a": jnp.array([3.0]), "b": jnp.array([[4.0]])}
    assert float(clipping.global_norm(tree)) == pytest.approx(5.0)
    out = clipping.clip_to_norm(tree, 1.0)
    np.testing.assert_allclose([out["a"][0], out["b"][0, 0]], [0.6, 0.8], rtol=1e-6)


@pytest.mark.parametrize("neighboring,factor", [("replace-one", 2.0), ("add-remove", 1.0)])
def test_clipped_sum_sensitivity_holds_adversarially(neighboring, factor):
    clip_norm = 0.7
    rng = np.random.default_rng(1)
    worst = 0.0
    for trial in range(50):
        grads = jnp.asarray(rng.normal(size=(16, 6)) * rng.uniform(0.01, 10))
        base = clipping.clipped_sum(grads, clip_norm, neighboring=neighboring)
        assert base.sensitivity == pytest.approx(factor * clip_norm)
        j = int(rng.integers(16))
        if neighboring == "replace-one":
            # replace record j by an adversarial one pointing the other way
            other = grads.at[j].set(-grads[j] * 1e3)
            mask = None
        else:
            other = grads
            mask = jnp.ones(16, bool).at[j].set(False)
        neighbour = clipping.clipped_sum(other, clip_norm, mask=mask, neighboring=neighboring)
        diff = float(clipping.global_norm(jax.tree_util.tree_map(jnp.subtract, base.total, neighbour.total)))
        assert diff <= base.sensitivity * (1 + 1e-5)
        worst = max(worst, diff)
    # the bound is attained up to rounding when the record is clipped: it is tight
    assert worst >= 0.99 * factor * clip_norm


def test_masked_examples_do_not_contribute():
    grads = jnp.arange(12.0).reshape(4, 3)
    mask = jnp.array([True, False, True, False])
    out = clipping.clipped_sum(grads, jnp.inf, mask=mask)
    np.testing.assert_allclose(out.total, grads[0] + grads[2])
    assert float(out.count) == 2


def test_per_example_grads_match_manual_loop():
    def loss(w, x, y):
        return 0.5 * (jnp.dot(w, x) - y) ** 2

    w = jnp.array([0.5, -1.0, 2.0])
    x = jax.random.normal(jax.random.key(3), (5, 3))
    y = jnp.arange(5.0)
    per = clipping.per_example_grads(loss, w, x, y)
    for j in range(5):
        np.testing.assert_allclose(per[j], jax.grad(loss)(w, x[j], y[j]), rtol=1e-6)


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_negative_or_nan_clip_norm_rejected(bad):
    with pytest.raises(ValueError, match="clip_norm"):
        clipping.sensitivity_of_clipped_sum(bad)


def test_unknown_relation_rejected():
    with pytest.raises(ValueError, match="neighboring"):
        clipping.clipped_sum(jnp.ones((2, 2)), 1.0, neighboring="swap")


@pytest.mark.parametrize("make", ["logistic", "softmax", "linear", "linear-bias"])
@pytest.mark.parametrize("clip_norm", [None, 0.05, 1.0])
def test_closed_form_glm_clipped_sum_equals_per_example_autodiff(make, clip_norm):
    from dpjax.problems import LinearRegression, LogisticRegression, SoftmaxRegression

    rng = np.random.default_rng(0)
    n, d = 40, 6
    x = jnp.asarray(rng.normal(size=(n, d)) * 2, jnp.float32)
    weights = jnp.asarray(rng.integers(0, 3, size=n), jnp.float32)  # multiplicities
    if make == "logistic":
        prob, y = LogisticRegression(d, margin_clip=1.0), jnp.asarray(rng.integers(0, 2, n), jnp.float32)
        params = jnp.asarray(rng.normal(size=d), jnp.float32)  # some margins beyond the clip
    elif make == "softmax":
        prob, y = SoftmaxRegression(d, 3), jnp.asarray(rng.integers(0, 3, n), jnp.int32)
        params = jnp.asarray(rng.normal(size=(d, 3)), jnp.float32)
    else:
        prob = LinearRegression(d, fit_intercept=(make == "linear-bias"))
        y = jnp.asarray(rng.normal(size=n), jnp.float32)
        params = jax.tree_util.tree_map(lambda p: p + 0.3, prob.init_params())
    from dpjax.problems.glm import row_sq_norms

    @jax.jit  # one program per case (op by op, the four sums took ~40 XLA compiles per case)
    def sums(p):
        closed = prob.weighted_grad_sum(p, x, y, weights, clip_norm)
        clipped = clipping.clip_per_example(clipping.per_example_grads(prob.loss, p, x, y),
                                            jnp.inf if clip_norm is None else clip_norm)
        reference = jax.tree_util.tree_map(lambda g: jnp.tensordot(weights, g, axes=1), clipped)
        pre = prob.weighted_grad_sum(p, x, y, weights, clip_norm, row_sq_norms=row_sq_norms(x))
        wrong = (None if clip_norm is None else
                 prob.weighted_grad_sum(p, x, y, weights, clip_norm, row_sq_norms=4 * row_sq_norms(x) + 1))
        return closed, reference, pre, wrong

    closed, reference, pre, wrong = sums(params)
    for a, b in zip(jax.tree_util.tree_leaves(closed), jax.tree_util.tree_leaves(reference)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-5)
    # precomputed row norms (what the engine passes, hoisted out of the rounds) give the same sum
    for a, b in zip(jax.tree_util.tree_leaves(pre), jax.tree_util.tree_leaves(closed)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    if clip_norm is not None:  # and the argument is really used: wrong norms change a binding clip
        assert not all(np.allclose(a, b) for a, b in zip(jax.tree_util.tree_leaves(wrong),
                                                          jax.tree_util.tree_leaves(closed)))


def test_an_overflowed_example_contributes_zero_not_nan():
    """Issue 23 (privacy sweep): one example whose gradient is inf or NaN used to make the clipped sum NaN (C/inf
    = 0 times inf), so that one record decided whether the release was NaN -- outside the accounted mechanism.
    It now contributes the zero vector (norm 0 <= C, sensitivity unchanged); without clipping (C = inf, the
    non-private twin) the NaN still propagates."""
    grads = {"w": jnp.array([[3.0, 4.0], [jnp.inf, 1.0], [jnp.nan, 0.0], [0.3, 0.4]]), "b": jnp.ones((4,))}
    res = clipping.clipped_sum(grads, 1.0)
    expected = clipping.clipped_sum(jax.tree_util.tree_map(lambda g: g[jnp.array([0, 3])], grads), 1.0).total
    for got, want in zip(jax.tree_util.tree_leaves(res.total), jax.tree_util.tree_leaves(expected)):
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert not np.all(np.isfinite(clipping.clipped_sum(grads, jnp.inf).total["w"]))


@pytest.mark.parametrize("make", ["logistic", "softmax", "linear", "linear-bias"])
def test_closed_form_glm_clipped_sum_drops_an_overflowed_record(make):
    """The closed-form GLM sums: a record whose gradient overflows float32 (x = 1e30 here; linear regression's
    residual r = <w, x> - y is then inf) adds zero, exactly as ``clip_per_example`` makes it -- not NaN
    (logistic regression was already safe: its margin is clipped before the sigmoid)."""
    from dpjax.problems import LinearRegression, LogisticRegression, SoftmaxRegression

    d = 3
    x = jnp.array([[1.0, 2.0, 0.5], [1e30, 1e30, 1e30], [0.2, -1.0, 0.3]], jnp.float32)
    if make == "logistic":
        prob, y, params = LogisticRegression(d), jnp.array([1.0, 0.0, 1.0]), jnp.full((d,), 1e10, jnp.float32)
    elif make == "softmax":
        prob, y = SoftmaxRegression(d, 3), jnp.array([0, 1, 2], jnp.int32)
        params = jnp.full((d, 3), 1e10, jnp.float32).at[:, 1].set(-1e10)
    else:
        prob = LinearRegression(d, fit_intercept=(make == "linear-bias"))
        y = jnp.array([0.5, 0.0, -0.5])
        params = jax.tree_util.tree_map(lambda p: p + 1e10, prob.init_params())
    weights = jnp.ones((3,))
    closed = prob.weighted_grad_sum(params, x, y, weights, 1.0)
    keep = jnp.array([0, 2])
    clean = prob.weighted_grad_sum(params, x[keep], y[keep], weights[keep], 1.0)
    for a, b in zip(jax.tree_util.tree_leaves(closed), jax.tree_util.tree_leaves(clean)):
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
