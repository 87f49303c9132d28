"""dpjax.engine.conv_layout: convolutions relabelled for XLA:CPU compute the same numbers, and the compiled
gradient step inside a loop holds only canonically labelled convolutions (the structural cause of the CNN round's
15-50x slowdown; timing lives in experiments/benchmarks/bench_fl_simulation.py --cifar)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from dpjax.engine.conv_layout import canonical_convs, relabeled_conv

CASES = [  # (lhs shape, rhs shape, dimension numbers, conv kwargs)
    ((2, 9, 9, 3), (3, 3, 3, 4), ("NHWC", "HWIO", "NHWC"), {}),
    ((2, 3, 9, 9), (4, 3, 3, 3), ("NCHW", "OIHW", "NCHW"), dict(window_strides=(2, 1), padding="SAME")),
    ((2, 9, 9, 4), (3, 2, 2, 6), ("NHWC", "HWIO", "NHWC"), dict(feature_group_count=2, rhs_dilation=(2, 1))),
    ((3, 11, 2), (3, 2, 5), ("NWC", "WIO", "NWC"), dict(padding=((1, 2),), lhs_dilation=(2,))),
    ((2, 7, 7, 3), (3, 3, 3, 4), ("NHWC", "HWIO", "NCHW"), dict(padding="VALID")),
]


def _conv(lhs, rhs, dn, kw):
    kw = dict(kw)
    strides = kw.pop("window_strides", (1,) * (lhs.ndim - 2))
    return lax.conv_general_dilated(lhs, rhs, strides, kw.pop("padding", "VALID"), dimension_numbers=dn, **kw)


@pytest.mark.parametrize("lhs_shape,rhs_shape,dn,kw", CASES)
def test_relabelled_convolution_and_its_gradients_equal_jax(lhs_shape, rhs_shape, dn, kw):
    with jax.enable_x64(True):
        k1, k2 = jax.random.split(jax.random.key(0))
        lhs = jax.random.normal(k1, lhs_shape, jnp.float64)
        rhs = jax.random.normal(k2, rhs_shape, jnp.float64)
        f = lambda a, b: jnp.sum(jnp.sin(_conv(a, b, dn, kw)))  # noqa: E731
        want = jax.jit(jax.grad(f, argnums=(0, 1)))(lhs, rhs)
        got = jax.jit(canonical_convs(jax.grad(f, argnums=(0, 1))))(lhs, rhs)
        for w, g in zip(want, got):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-12)
        # the relabelled forward convolution itself, from the primitive's own parameters
        closed = jax.make_jaxpr(lambda a, b: _conv(a, b, dn, kw))(lhs, rhs)
        (eqn,) = [e for e in closed.jaxpr.eqns if e.primitive is lax.conv_general_dilated_p]
        np.testing.assert_allclose(np.asarray(jax.jit(lambda a, b: relabeled_conv(a, b, **eqn.params))(lhs, rhs)),
                                   np.asarray(_conv(lhs, rhs, dn, kw)), rtol=1e-12, atol=1e-12)


def _dim_labels(fn, *args):
    text = jax.jit(fn).lower(*args).compile().as_text()
    return set(re.findall(r"dim_labels=([\w>-]+)", text))


def test_gradient_step_in_a_loop_compiles_to_canonical_convolutions_only():
    x = jnp.ones((3, 4, 8, 8, 2))  # 3 steps of 4 NHWC images
    w0 = jnp.full((3, 3, 2, 5), 0.1)
    loss = lambda w, x: jnp.sum(_conv(x, w, ("NHWC", "HWIO", "NHWC"), {}) ** 2)  # noqa: E731

    def train(grad):
        return lambda xs: lax.scan(lambda w, x: (w - 1e-3 * grad(w, x), None), w0, xs)[0]

    assert _dim_labels(train(canonical_convs(jax.grad(loss))), x) == {"b01f_01io->b01f"}
    # JAX's own kernel gradient, which XLA:CPU leaves unlabelled inside a while body: what the rewrite removes
    assert _dim_labels(train(jax.grad(loss)), x) - {"b01f_01io->b01f"}
    np.testing.assert_allclose(np.asarray(jax.jit(train(canonical_convs(jax.grad(loss))))(x)),
                               np.asarray(jax.jit(train(jax.grad(loss)))(x)), rtol=1e-5)


def test_functions_without_convolutions_pass_through_unchanged():
    f = lambda a: {"y": jnp.tanh(a) @ a.T}  # noqa: E731
    a = jnp.arange(6.0).reshape(2, 3)
    out = canonical_convs(f)(a)
    assert set(out) == {"y"}
    np.testing.assert_array_equal(np.asarray(out["y"]), np.asarray(f(a)["y"]))
