"""Ghost clipping and NNX losses at the edges (issue #39's battery): a str clip norm reached ``2.0 * "1.0"``, a complex
input was silently accepted (the ghost path dropped its imaginary part), a training-mode ``nnx.Dropout`` surfaced
flax's ``TraceContextError``, and a non-callable NNX loss failed deep inside the trace. Each is now a refusal at the
API boundary naming the argument and its value, the same on the ghost and the per-example paths."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dpjax.primitives import clipping, ghost_clipped_sum, nnx_loss, per_example_clipped_sum
from dpjax.primitives.ghost_plan import NNXLoss

LIN = nn.Dense(2)
PARAMS = LIN.init(jax.random.key(0), jnp.zeros(3))["params"]
X = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3)), jnp.float32)
Y = jnp.zeros((4, 2), jnp.float32)


def _loss(p, x, y):
    return jnp.sum((LIN.apply({"params": p}, x) - y) ** 2)


PATHS = {"ghost": ghost_clipped_sum, "per-example": per_example_clipped_sum}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("clip", ["1.0", b"1", 1j, [1.0], np.array(["1.0"])])
def test_a_clip_norm_of_the_wrong_type_is_a_type_error_naming_it(path, clip):
    with pytest.raises(TypeError, match=r"clip_norm=.* must be a real number"):
        PATHS[path](_loss, PARAMS, X, Y, clip)


def test_real_clip_norms_of_every_kind_still_work():
    ref = per_example_clipped_sum(_loss, PARAMS, X, Y, 1.0).total
    for clip in (1, np.float32(1.0), jnp.float32(1.0), jnp.asarray(1.0)):
        got = ghost_clipped_sum(_loss, PARAMS, X, Y, clip).total
        # the same clipped sum: float32 rounding of a different summation order (relative 1e-5 of the terms)
        for u, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(ref)):
            np.testing.assert_allclose(np.asarray(u), np.asarray(w), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"clip_norm=True must be a real number"):  # a bool: ValueError, as before
        clipping.sensitivity_of_clipped_sum(True)


@pytest.mark.privacy
@pytest.mark.parametrize("path", sorted(PATHS))
def test_complex_inputs_are_refused_on_both_paths(path):
    # the ghost path returned a finite clipped sum of the real parts: a silent accept
    with pytest.raises(TypeError, match=r"x has dtype complex64"):
        PATHS[path](_loss, PARAMS, X.astype(jnp.complex64), Y, 1.0)
    with pytest.raises(TypeError, match=r"y\['t'\] has dtype complex64"):
        PATHS[path](lambda p, x, y: _loss(p, x, jnp.real(y["t"])), PARAMS, X, {"t": Y.astype(jnp.complex64)}, 1.0)


class _Net(nnx.Module):
    def __init__(self, rngs, dropout=0.5):
        self.l1 = nnx.Linear(3, 4, rngs=rngs)
        self.drop = nnx.Dropout(dropout, rngs=rngs)
        self.l2 = nnx.Linear(4, 2, rngs=rngs)

    def __call__(self, x):
        return self.l2(jax.nn.relu(self.drop(self.l1(x))))


def _nloss(m, x, y):
    return jnp.sum((m(x) - y) ** 2)


@pytest.mark.parametrize("kwargs", [{}, {"require_fast": True}, {"force_fallback": True}])
def test_training_mode_dropout_is_dpjaxs_own_refusal(kwargs):
    loss_fn, params = nnx_loss(_Net(nnx.Rngs(0)), _nloss)
    with pytest.raises(ValueError, match=r"Dropout 'drop' is in training mode \(deterministic=False\).*model\.eval\(\)"):
        ghost_clipped_sum(loss_fn, params, X, Y, 1.0, **kwargs)
    with pytest.raises(ValueError, match=r"Dropout 'drop' is in training mode"):
        per_example_clipped_sum(loss_fn, params, X, Y, 1.0)


def test_eval_mode_dropout_runs_and_agrees():
    model = _Net(nnx.Rngs(0))
    model.eval()
    loss_fn, params = nnx_loss(model, _nloss)
    fast = ghost_clipped_sum(loss_fn, params, X, Y, 1.0)
    ref = per_example_clipped_sum(loss_fn, params, X, Y, 1.0)
    assert fast.fast_path
    for u, w in zip(jax.tree_util.tree_leaves(fast.total), jax.tree_util.tree_leaves(ref.total)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("loss", [3, "mse", None])
def test_a_non_callable_nnx_loss_is_a_type_error_naming_it(loss):
    with pytest.raises(TypeError, match=r"loss=.* must be callable"):
        nnx_loss(_Net(nnx.Rngs(0)), loss)
    graphdef, params, rest = nnx.split(_Net(nnx.Rngs(0)), nnx.Param, ...)
    with pytest.raises(TypeError, match=r"loss=.* must be callable"):
        NNXLoss(graphdef, loss, (rest,))
